"""``python -m kernels.multi_gpu``: the TP decode step, NCCL's all-reduce and the KV transfer on
this machine's GPUs, in one run (docs/kernels/MULTI_GPU.md).

``--json PATH`` writes the records (:mod:`kernels.multi_gpu.records`) with provenance, the
planner's prediction beside each measurement and the targets. A bad argument ends as one line
naming the option and exit status 2, before the GPUs are counted; fewer than two GPUs end the
same way, with one line saying so.

The predictions come from the planner, which sits above this package: ``python -m
kernels.multi_gpu`` is forwarded by module name to :mod:`planner.cluster.measured`, which calls
:func:`main` with its predictor, so this package never imports the planner.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace

import torch

from hardware.gpus import GPU_IDS
from hardware.links import LINK_IDS
from inputs.bounds import Bound
from inputs.cli import OneLineParser, choice, run_cli, token_list
from kernels.bench.sweeps import SweepConfig, decode_shapes
from kernels.bench.timing import environment
from kernels.multi_gpu import env
from kernels.multi_gpu.bench import PROMPTS, BenchConfig, run_bench
from kernels.multi_gpu.records import MultiGpuProvenance, MultiGpuReport, Predictor, write_report
from kernels.multi_gpu.transfer import MAX_PROMPT_TOKENS

__all__ = ["PROG", "ONLY", "MIN_GPUS", "build_parser", "config_from_args", "gpu_provenance", "main"]

PROG = "python -m kernels.multi_gpu"
ONLY = ("all", "tp", "all-reduce", "transfer")
MIN_GPUS = 2
PROMPT = Bound(field="prompts", low=1, high=MAX_PROMPT_TOKENS, integer=True, unit="tokens")
PredictorFactory = Callable[[str, str], Predictor]  # (GPU id, link id) -> the planner's predictor


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description="The TP decode step, NCCL's all-reduce and the KV transfer on "
                                             "this machine's GPUs, with the planner's predictions.")
    p.add_argument("--json", metavar="PATH", help="write the records as JSON to PATH")
    p.add_argument("--quick", action="store_true", help="the harness's short decode sweep, prompts 1K, 8K and 32K")
    p.add_argument("--only", type=choice(ONLY), default="all",
                   help=f"which part to run: {', '.join(ONLY)} (tp brings the all-reduce sweep its target reads)")
    p.add_argument("--prompts", type=token_list(PROMPT), help="transfer prompt lengths, e.g. 1k,8k,32k (each "
                                                              f"1 to {MAX_PROMPT_TOKENS:,} tokens)")
    p.add_argument("--gpu", type=choice(GPU_IDS), default="h200",
                   help="catalogue GPU the planner predicts for (default h200)")
    p.add_argument("--link", type=choice(LINK_IDS), default="nvlink4",
                   help="catalogue link between the GPUs the planner predicts for (default nvlink4)")
    p.add_argument("--eager", action="store_true", help="time plain calls, no CUDA graphs")
    return p


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    sweep = SweepConfig.quick() if args.quick else SweepConfig()
    cfg = BenchConfig(decode_shapes=decode_shapes(sweep), prompts=(1024, 8192, 32768) if args.quick else PROMPTS)
    changes: dict[str, object] = {}
    if args.prompts:
        changes["prompts"] = args.prompts
    if args.only != "all":
        changes.update(run_tp=args.only == "tp", run_all_reduce=args.only in ("tp", "all-reduce"),
                       run_transfer=args.only == "transfer")
    if args.eager:
        changes["cuda_graphs"] = False
    return replace(cfg, **changes)


def _topology() -> str:
    """``nvidia-smi topo -m`` as printed (how the GPUs are linked), "" when it cannot run."""
    try:
        done = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=30, check=True)
        return done.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _nccl_version() -> str:
    try:
        version = torch.cuda.nccl.version()
    except (AttributeError, RuntimeError):
        return ""
    return ".".join(str(part) for part in version) if isinstance(version, tuple) else str(version)


def gpu_provenance(command: str, *, gpu_count: int, backend: str = "nccl") -> MultiGpuProvenance:
    """The harness's provenance of this machine plus the GPU count, topology, NCCL and the
    multicast-off variables this process runs with (:func:`kernels.multi_gpu.bench.run_bench`
    replaces them with the ranks' own, and adds whether GPU 0 has peer access to GPU 1)."""
    return MultiGpuProvenance(run=environment(command), gpu_count=gpu_count, topology=_topology(),
                              nccl=_nccl_version() if backend == "nccl" else "", backend=backend,
                              multicast_env=env.multicast_env_text())


def _summary(report: MultiGpuReport) -> str:
    lines = [f"{len(report.tp_steps)} TP steps, {len(report.all_reduce)} all-reduce points, "
             f"{len(report.transfers)} transfers on {report.provenance.gpu_count} GPUs"]
    for t in report.targets:
        figure = "not measured" if t.measured is None else f"{t.measured:.3f}"
        bound = "<=" if t.at_most else ">="
        lines.append(f"{t.name}: {figure} ({bound} {t.required:g}) {'met' if t.met else 'missed'}; {t.detail}")
    return "\n".join(lines)


def _run(argv: list[str], predictor_factory: PredictorFactory | None) -> int:
    args = build_parser().parse_args(argv)
    env.set_multicast_off()  # before anything of CUDA or NCCL starts in this process or its ranks
    gpus = torch.cuda.device_count()
    if gpus < MIN_GPUS:
        print(f"kernels.multi_gpu: needs at least {MIN_GPUS} CUDA GPUs, found {gpus} (the CPU tests in "
              "tests/kernels/multi_gpu/ run the same code over gloo).", file=sys.stderr)
        return 2
    world = min(gpus, env.MAX_WORLD_SIZE)
    command = shlex.join([sys.executable, "-m", "kernels.multi_gpu", *argv])
    predictor = None if predictor_factory is None else predictor_factory(args.gpu, args.link)
    report = run_bench(config_from_args(args), world_size=world, predictor=predictor,
                       provenance=gpu_provenance(command, gpu_count=gpus))
    print(_summary(report))
    if args.json:
        print(f"wrote {write_report(report, args.json)}")
    return 0


def main(argv: Sequence[str] | None = None, *, predictor_factory: PredictorFactory | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    return run_cli(PROG, lambda: _run(argv, predictor_factory))

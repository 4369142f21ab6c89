"""Engine options of ``python -m sizing`` (``--engine vllm`` and its settings), which the
``explain-log`` subcommand (:mod:`sizing.explain_cli`) shares.

Per-GPU budgets here (``--kv-budget-gib-per-gpu``, ``--activation-gib``, ``--non-torch-gib``,
``--cuda-graph-gib``, ``--gpu-total-gib``) are what vLLM logs for one GPU; the sizer's own
``--kv-budget-gib`` stays the budget over the whole TP group. ``--pp-layer-partition 16,32``
(vLLM's ``VLLM_PP_LAYER_PARTITION``, read by :func:`pp_layer_partition_arg`) makes the engine
request a pipeline's, one stage per count.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from inputs.bounds import Bound
from inputs.cli import UsageError, arg_type, choice, help_range
from inputs.uploads import loads_json, read_path_capped
from sizing.engine.capacity import (
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    DEFAULT_MAX_NUM_SEQS,
    DEFAULT_UTILIZATION,
    EngineReport,
    EngineRequest,
    plan_engine,
)
from sizing.engine.groups import (
    DEFAULT_ATTENTION_BACKEND,
    DEFAULT_VLLM_VERSION,
    KERNEL_BLOCK_ALIGNMENT,
    MAX_KERNEL_BLOCK_ALIGNMENT,
    GroupingRule,
    vllm_release,
)
from sizing.engine.memory import ActivationShape
from sizing.engine.mxfp4 import AUTO, MXFP4_BACKEND_CHOICES
from sizing.engine.pipeline import partition_counts
from sizing.errors import NoKVRoom
from sizing.hf_config import MAX_CONFIG_BYTES
from sizing.layers import MAX_SPECULATIVE_TOKENS
from sizing.presets import DEFAULT_PRESET
from units import GiB

ENGINES = ("vllm",)
UTILIZATION = Bound(field="gpu_memory_utilization", low=0, low_open=True, high=1)
BATCHED_TOKENS = Bound(field="max_num_batched_tokens", low=1, high=1 << 24, integer=True, unit="tokens")
NUM_SEQS = Bound(field="max_num_seqs", low=1, high=1 << 20, integer=True, unit="sequences")
GIB_PER_GPU = Bound(field="gib", low=0, high=100_000, unit="GiB")
TOTAL_GIB = Bound(field="gpu_total_gib", low=0.001, high=100_000, unit="GiB")
ALIGNMENT = Bound(field="kernel_block_alignment", low=1, high=MAX_KERNEL_BLOCK_ALIGNMENT, integer=True, unit="tokens")
SPECULATIVE = Bound(field="speculative_tokens", low=0, high=MAX_SPECULATIVE_TOKENS, integer=True, unit="tokens")
ATTENTION_BACKENDS = tuple(KERNEL_BLOCK_ALIGNMENT)
ENGINE_OPTION_FOR_FIELD = {
    "gpu_memory_utilization": "--gpu-memory-utilization", "max_num_batched_tokens": "--max-num-batched-tokens",
    "max_num_seqs": "--max-num-seqs", "kv_budget_gib_per_gpu": "--kv-budget-gib-per-gpu",
    "kv_budget_bytes_per_gpu": "--kv-budget-gib-per-gpu", "activation_bytes": "--activation-gib",
    "non_torch_bytes": "--non-torch-gib", "cuda_graph_bytes": "--cuda-graph-gib", "engine_rule": "--engine-rule",
    "max_model_len": "--context", "total_bytes_per_gpu": "--gpu-total-gib", "log": "PATH",
    "attention_backend": "--attention-backend", "kernel_block_alignment": "--kernel-block-alignment",
    "speculative_tokens": "--speculative-tokens", "vllm_version": "--vllm-version",
    "mxfp4_backend": "--mxfp4-backend", "pp_layer_partition": "--pp-layer-partition", "pp": "--pp",
}


def vllm_version_arg(text: str) -> str:
    """``--vllm-version``: a release like 0.24.0 (what ``vllm_release`` reads: at most 64
    characters, no development build), kept as typed."""
    try:
        vllm_release(text)
    except ValueError as exc:  # InputError included: its message names the value
        raise argparse.ArgumentTypeError(getattr(exc, "message", str(exc))) from None
    return text


def pp_layer_partition_arg(text: str) -> str:
    """``--pp-layer-partition``: vLLM's ``VLLM_PP_LAYER_PARTITION``, whole layer counts per stage
    ("16,32"), each at least 1, at most 64 stages; kept as comma-joined counts. Whether they add
    up to the model's layers is checked once the model is known."""
    try:
        counts = partition_counts(text)
    except ValueError as exc:  # SizingError included: its message names the value
        raise argparse.ArgumentTypeError(getattr(exc, "message", str(exc))) from None
    return ",".join(map(str, counts))


def gib_bytes(value: float | None) -> int | None:
    """A GiB option as whole bytes (exact from its decimal text, floored)."""
    return None if value is None else math.floor(Fraction(repr(value)) * GiB)


def add_engine_arguments(parser: argparse.ArgumentParser, *, with_engine_flag: bool = True) -> None:
    """The engine group: ``--engine`` and vLLM's settings, with per-GPU overrides."""
    group = parser.add_argument_group("engine (vLLM V1; per-GPU figures as vLLM logs them)")
    if with_engine_flag:
        group.add_argument("--engine", type=choice(ENGINES), metavar="{vllm}",
                           help="add the engine's figures: memory profile, KV-cache groups, tokens, concurrency, "
                                "reverse questions and launch commands")
    group.add_argument("--gpu-memory-utilization", type=arg_type(UTILIZATION), default=DEFAULT_UTILIZATION,
                       metavar="F", help=f"vLLM's --gpu-memory-utilization ({help_range(UTILIZATION)}; default 0.9)")
    group.add_argument("--max-num-batched-tokens", type=arg_type(BATCHED_TOKENS),
                       default=DEFAULT_MAX_NUM_BATCHED_TOKENS, metavar="N",
                       help=f"tokens per scheduler step ({help_range(BATCHED_TOKENS)}; default 8192)")
    group.add_argument("--max-num-seqs", type=arg_type(NUM_SEQS), default=DEFAULT_MAX_NUM_SEQS, metavar="N",
                       help=f"sequences per step ({help_range(NUM_SEQS)}; default 256)")
    for option, what in (("--kv-budget-gib-per-gpu", "the engine's \"Available KV cache memory\" on ONE GPU; "
                                                     "replaces the estimated memory profile"),
                         ("--activation-gib", "measured activation peak per GPU (replaces the estimate)"),
                         ("--non-torch-gib", "measured non-torch memory per GPU (replaces the estimate)"),
                         ("--cuda-graph-gib", "measured CUDA-graph memory per GPU (replaces the estimate)")):
        group.add_argument(option, type=arg_type(GIB_PER_GPU), metavar="X", help=f"{what} ({help_range(GIB_PER_GPU)})")
    group.add_argument("--gpu-total-gib", type=arg_type(TOTAL_GIB), metavar="X",
                       help="the CUDA total per GPU (torch.cuda.mem_get_info); default: the catalogue's")
    group.add_argument("--engine-rule", type=choice(tuple(GroupingRule)), default=str(GroupingRule.HYBRID),
                       metavar="{" + ",".join(GroupingRule) + "}",
                       help="KV-cache grouping: hybrid (vLLM ≥ 0.12), hybrid-min (0.10–0.11), single (older)")
    add_hybrid_arguments(group, defaults=True)
    group.add_argument("--enforce-eager", action="store_true", help="no CUDA graphs (their estimate becomes 0)")
    group.add_argument("--vllm-before-0.21", dest="cuda_graphs_not_profiled", action="store_true",
                       help="a vLLM before 0.21, which sized the KV cache before capturing CUDA graphs "
                            "(their memory is then not subtracted)")
    group.add_argument("--vllm-version", type=vllm_version_arg, default=DEFAULT_VLLM_VERSION, metavar="X.Y.Z",
                       help="the vLLM release to model: how it counts 'GPU KV cache size' (int(concurrency × "
                            "max_model_len) from 0.24) and, before 0.21, no CUDA-graph term "
                            f"(default {DEFAULT_VLLM_VERSION}, the newest the rules were checked against)")
    group.add_argument("--mxfp4-backend", type=choice(MXFP4_BACKEND_CHOICES), default=AUTO,
                       metavar="{" + ",".join(MXFP4_BACKEND_CHOICES) + "}",
                       help="the MoE kernel holding MXFP4 experts, whose padding the weights carry (default auto: "
                            "the one vLLM picks on the GPU; marlin for builds without triton_kernels on an H100)")


def add_hybrid_arguments(group, *, defaults: bool) -> None:
    """``--attention-backend``, ``--kernel-block-alignment`` and ``--speculative-tokens``: what
    steps a hybrid model's attention block and sizes its state (``explain-log`` shares them,
    with ``defaults=False`` so that unset means "as the log says")."""
    group.add_argument("--attention-backend", type=choice(ATTENTION_BACKENDS),
                       default=DEFAULT_ATTENTION_BACKEND if defaults else None,
                       metavar="{" + ",".join(ATTENTION_BACKENDS) + "}",
                       help="vLLM's attention backend, whose smallest kernel block steps a hybrid model's attention "
                            f"block (default {DEFAULT_ATTENTION_BACKEND}: 16 tokens)")
    group.add_argument("--kernel-block-alignment", type=arg_type(ALIGNMENT), metavar="N",
                       help=f"the hybrid attention block's step, overriding the backend's ({help_range(ALIGNMENT)})")
    group.add_argument("--speculative-tokens", type=arg_type(SPECULATIVE), default=0 if defaults else None,
                       metavar="N", help="vLLM's num_speculative_tokens (MTP / EAGLE): widens a Mamba2 / gated-delta-net "
                                         f"convolution state ({help_range(SPECULATIVE)}; default 0)")


def hybrid_options_from_args(args: argparse.Namespace) -> dict:
    """The hybrid options of ``args`` as keyword arguments of :class:`EngineRequest` or
    :func:`~sizing.engine.explain.explain_log` (None where unset)."""
    return {name: getattr(args, name, None) for name in ("attention_backend", "kernel_block_alignment",
                                                          "speculative_tokens")}


def activation_from_config(path: Path) -> ActivationShape:
    config = loads_json(read_path_capped(str(path), MAX_CONFIG_BYTES, field="config"), field="config")
    if not isinstance(config, dict):
        raise UsageError("argument --config: the top level must be a JSON object")
    return ActivationShape.from_config(config)


def engine_request_from_args(args: argparse.Namespace, model, gpu, weights_total_bytes: int,
                             weight_dtype: str = "bf16") -> EngineRequest:
    """The :class:`EngineRequest` of the sizer's parsed options (``model``/``gpu`` already built,
    ``weights_total_bytes`` the sizer's weight bytes for the whole model, in ``weight_dtype``)."""
    manual = any(getattr(args, name, None) is not None for name in ("layers", "q_heads", "kv_heads", "head_dim",
                                                                     "params"))
    if getattr(args, "config", None) is None and not manual:
        model = args.model or DEFAULT_PRESET
    activation = activation_from_config(args.config) if getattr(args, "config", None) is not None else None
    return EngineRequest(
        model=model, gpu=gpu, tp=args.tp, kv_dtype=args.kv_dtype, weights_total_bytes=weights_total_bytes,
        weight_dtype=weight_dtype, mxfp4_backend=getattr(args, "mxfp4_backend", AUTO),
        vllm_version=getattr(args, "vllm_version", DEFAULT_VLLM_VERSION),
        max_model_len=args.context, block_size=args.block_size,
        gpu_memory_utilization=args.gpu_memory_utilization, max_num_batched_tokens=args.max_num_batched_tokens,
        max_num_seqs=args.max_num_seqs, users=args.users, rule=args.engine_rule, enforce_eager=args.enforce_eager,
        attention_backend=args.attention_backend, kernel_block_alignment=args.kernel_block_alignment,
        speculative_tokens=args.speculative_tokens,
        cuda_graphs_profiled=not getattr(args, "cuda_graphs_not_profiled", False),
        activation=activation, total_bytes_per_gpu=gib_bytes(args.gpu_total_gib),
        kv_budget_bytes_per_gpu=gib_bytes(args.kv_budget_gib_per_gpu),
        activation_bytes=gib_bytes(args.activation_gib), non_torch_bytes=gib_bytes(args.non_torch_gib),
        cuda_graph_bytes=gib_bytes(args.cuda_graph_gib),
        pp_layer_partition=getattr(args, "pp_layer_partition", None),
    )


@dataclass(frozen=True, kw_only=True)
class EngineOutput:
    """Engine mode at the asked TP: the report, or None when that TP leaves no room for a KV
    block beside the weights (``refused`` then says why; the answer names the TP that serves)."""

    report: EngineReport | None
    refused: str = ""

    def to_dict(self) -> dict:
        if self.report is not None:
            return {**self.report.to_dict(), "engine_fits_at_tp": True}
        return {"engine": "vllm", "engine_fits_at_tp": False, "engine_refused_at_tp": self.refused}


def run_engine(request: EngineRequest) -> EngineOutput:
    """:func:`plan_engine` at the request's TP.

    A TP whose weights leave no room for one KV block is not an error: the output says so (the
    answer, :mod:`sizing.answer`, names the TP that serves the users). A measured budget that
    holds no block (``--kv-budget-gib-per-gpu``) still is, since the user's own figure is what
    is wrong.
    """
    try:
        report = plan_engine(request)
    except NoKVRoom as exc:
        if exc.measured:
            raise
        return EngineOutput(report=None,
                            refused=f"TP {request.tp} cannot serve it as set ({exc.field}): vLLM's memory profile "
                                    f"{exc.message}")
    return EngineOutput(report=report)


def format_engine(output: EngineOutput) -> list[str]:
    """Readable lines for the table output: the engine's figures at the asked TP."""
    report = output.report
    if report is None:
        return ["", f"Engine (vLLM, per GPU): {output.refused}."]
    p, layout = report.profile, report.layout
    partition = report.request.pp_layer_partition
    pp = 1 if partition is None else len(partition_counts(partition))
    stage = "" if pp == 1 else f" × PP {pp}, stage {report.request.pp_stage} (the one holding the fewest requests)"
    lines = ["", f"Engine at TP {report.request.tp}{stage}, as asked (vLLM, per GPU, grouping rule {layout.rule}):"]
    for term in p.terms:
        lines.append(f"  {term.name:<18} {term.bytes / GiB:>10,.2f} GiB  {'estimate' if term.estimated else 'given'}"
                     f" ({term.basis})")
    lines += [f"  Available KV cache memory: {report.available_kv_bytes_per_gpu / GiB:,.2f} GiB",
              f"  KV-cache groups: {', '.join(g.label for g in layout.groups)} "
              f"({layout.layer_slots} layer slots, page {layout.page_bytes:,} B)",
              *(f"  ! {w.message}" for w in layout.warnings),
              f"  GPU KV cache size: {report.kv_cache_tokens:,} tokens (as vLLM {report.request.vllm_version} "
              "counts it)",
              f"  Maximum concurrency for {report.request.max_model_len:,} tokens per request: "
              f"{report.max_concurrency:.2f}x",
              f"  largest max_model_len that fits: {report.max_model_len_fit:,}"]
    if report.required_gpu_memory_utilization is not None:
        lines.append(f"  gpu_memory_utilization for {report.request.users:,} users in one replica: "
                     f"{report.required_gpu_memory_utilization:g}")
    lines += [f"  smallest TP at which one replica holds all users: {report.smallest_tp}",
              *(f"  note: {n}" for n in report.notes)]
    return lines

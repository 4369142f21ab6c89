"""``python -m sizing``: the sizer from the command line (JSON with ``--json``, else a table).

Contract (issue 2): ``--model NAME`` | ``--config PATH`` | ``--layers N --q-heads N --kv-heads N
--head-dim N --params N``; ``--kv-dtype``, ``--weight-dtype``, ``--context``, ``--users``,
``--gpu``, ``--usable``, ``--tp``, ``--block-size``, ``--kv-budget-gib``. Bad arguments exit
with status 2 and one line naming the argument: no traceback, no usage block.

The option groups are built by ``add_*_arguments`` helpers and turned into a request by
:func:`request_from_args`, so that a later ``python -m sizing plan`` subcommand (issue 6) can
reuse them; ``python -m sizing plan ...`` is dispatched to :mod:`planner.cli`.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from typing import NoReturn

from sizing.errors import ConfigError, SizingError
from hardware.gpus import DEFAULT_GPU, GPU_IDS, custom_gpu, get_gpu, gpus
from sizing.hf_config import MAX_CONFIG_BYTES, parse_hf_config
from sizing.kv import DEFAULT_BLOCK_SIZE, DEFAULT_USABLE_FRACTION
from sizing.models import ModelShape
from sizing.precisions import DEFAULT_GROUP_SIZE, PRECISION_NAMES
from sizing.presets import DEFAULT_PRESET, PRESET_IDS, get_preset, presets
from sizing.report import SizingReport, SizingRequest, size_deployment
from units import GiB, UnitSystem, both, format_bytes

PROG = "python -m sizing"
EXIT_USAGE = 2  # argparse's status for bad arguments

# Library field -> the option that sets it, so errors raised deep in the library still name
# what the user typed.
_OPTION_FOR_FIELD = {
    "model": "--model", "layers": "--layers", "q_heads": "--q-heads", "kv_heads": "--kv-heads",
    "head_dim": "--head-dim", "params": "--params", "kv_dtype": "--kv-dtype", "weight_dtype": "--weight-dtype",
    "kv_dtype_group_size": "--kv-group-size", "weight_dtype_group_size": "--weight-group-size",
    "context": "--context", "users": "--users", "gpu": "--gpu", "usable_fraction": "--usable", "tp": "--tp",
    "n_gpus": "--gpus", "block_size": "--block-size", "kv_budget_bytes": "--kv-budget-gib",
    "gpus_per_node": "--gpus-per-node", "gpu_memory_gb": "--gpu-memory-gb",
    "gpu_bandwidth_tbs": "--gpu-bandwidth-tbs", "gpu_bf16_tflops": "--gpu-bf16-tflops",
}
_MANUAL_OPTIONS = ("layers", "q_heads", "kv_heads", "head_dim", "params")


class UsageError(Exception):
    """A bad argument; the message is the one line printed."""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage block) and exit status 2."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(" ".join(message.split()))


# ---- argument types (errors become "argument --x: <message>") -------------------------------
def _positive_int(text: str) -> int:
    try:
        value = int(text.replace("_", "").replace(",", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number ≥ 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number ≥ 0, got {text!r}")
    return value


def _finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def _fraction(text: str) -> float:
    value = _finite_float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be above 0 and at most 1, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    value = _finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def _non_negative_float(text: str) -> float:
    value = _finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be ≥ 0, got {text!r}")
    return value


_PARAM_SUFFIXES = {"k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}


def _param_count(text: str) -> int:
    """``70000000000``, ``70e9``, ``70B`` or ``7.24b`` → an integer parameter count."""
    raw = text.strip().replace("_", "").replace(",", "")
    scale = 1
    if raw and raw[-1].lower() in _PARAM_SUFFIXES:
        scale, raw = _PARAM_SUFFIXES[raw[-1].lower()], raw[:-1]
    try:
        value = Fraction(raw) * scale
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(f"must be a parameter count such as 70e9 or 70B, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text!r}")
    return round(value)


def _choice(options: Sequence[str]):
    def parse(text: str) -> str:
        key = text.lower()
        if key not in options:
            raise argparse.ArgumentTypeError(f"unknown value {text!r}; choose one of {', '.join(options)}")
        return key
    parse.__name__ = "choice"
    return parse


# ---- parser --------------------------------------------------------------------------------
def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """``--model`` | ``--config`` | the manual shape (whose options also override a preset)."""
    group = parser.add_argument_group("model (one of: a preset, a config.json, or a manual shape)")
    source = group.add_mutually_exclusive_group()
    source.add_argument("--model", type=_choice(PRESET_IDS), metavar="NAME",
                        help=f"preset id (default {DEFAULT_PRESET}): {', '.join(PRESET_IDS)}")
    source.add_argument("--config", type=Path, metavar="PATH", help="a Hugging Face config.json")
    group.add_argument("--layers", type=_positive_int, metavar="N", help="transformer layers")
    group.add_argument("--q-heads", type=_positive_int, metavar="N", help="query (attention) heads")
    group.add_argument("--kv-heads", type=_positive_int, metavar="N", help="KV heads (GQA groups), not query heads")
    group.add_argument("--head-dim", type=_positive_int, metavar="N", help="values per head")
    group.add_argument("--params", type=_param_count, metavar="N", help="parameters, e.g. 70e9 or 70B")


def add_precision_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("precision")
    group.add_argument("--kv-dtype", type=_choice(PRECISION_NAMES), default="bf16", metavar="{" + ",".join(PRECISION_NAMES) + "}",
                       help="KV-cache precision (default bf16)")
    group.add_argument("--weight-dtype", type=_choice(PRECISION_NAMES), default="bf16", metavar="{" + ",".join(PRECISION_NAMES) + "}",
                       help="weight precision (default bf16)")
    group.add_argument("--kv-group-size", type=_non_negative_int, default=DEFAULT_GROUP_SIZE, metavar="N",
                       help=f"KV values per fp16 scale for int formats; 0: no scales (default {DEFAULT_GROUP_SIZE})")
    group.add_argument("--weight-group-size", type=_non_negative_int, default=DEFAULT_GROUP_SIZE, metavar="N",
                       help=f"weights per fp16 scale for int formats; 0: no scales (default {DEFAULT_GROUP_SIZE})")


def add_hardware_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("hardware")
    group.add_argument("--gpu", type=_choice(GPU_IDS), default=None, metavar="NAME",
                       help=f"GPU id (default {DEFAULT_GPU}): {', '.join(GPU_IDS)}")
    group.add_argument("--gpu-memory-gb", type=_non_negative_float, metavar="GB",
                       help="a custom GPU with this much memory (vendor GB) instead of --gpu")
    group.add_argument("--gpu-bandwidth-tbs", type=_non_negative_float, default=1.0, metavar="TB/s",
                       help="custom GPU memory bandwidth (default 1)")
    group.add_argument("--usable", type=_fraction, default=DEFAULT_USABLE_FRACTION, metavar="FRACTION",
                       help="share of GPU memory for weights + KV (default 0.9)")
    group.add_argument("--tp", type=_positive_int, default=1, metavar="N", help="tensor-parallel size (default 1)")
    group.add_argument("--gpus", type=_positive_int, metavar="N",
                       help="GPUs deployed, for the KV budget and reverse questions (default: --tp)")
    group.add_argument("--gpus-per-node", type=_positive_int, default=8, metavar="N", help="default 8")


def add_workload_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("workload and KV budget")
    group.add_argument("--context", type=_positive_int, default=32_768, metavar="TOKENS",
                       help="tokens per user at full context (default 32768)")
    group.add_argument("--users", type=_positive_int, default=100, metavar="N", help="concurrent users (default 100)")
    group.add_argument("--block-size", type=_positive_int, default=DEFAULT_BLOCK_SIZE, metavar="N",
                       help=f"tokens per KV block (default {DEFAULT_BLOCK_SIZE}, as vLLM)")
    group.add_argument("--kv-budget-gib", type=_non_negative_float, metavar="X",
                       help="a KV budget in GiB: prints kv_capacity_tokens (whole blocks) and max_concurrency")


def _epilog() -> str:
    models = "\n".join(f"  {p.id:<22} {p.name}" for p in presets())
    devices = "\n".join(f"  {g.id:<22} {g.name}, {g.memory_gb:g} GB, {g.bandwidth_tbs:g} TB/s" for g in gpus())
    return f"models:\n{models}\n\nGPUs:\n{devices}\n\nExit status 2 on a bad argument, with one line naming it."


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Size an LLM's KV cache and the GPUs it needs (reference-page count and a TP plan).",
        epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    add_model_arguments(parser)
    add_precision_arguments(parser)
    add_workload_arguments(parser)
    add_hardware_arguments(parser)
    return parser


# ---- args -> request -----------------------------------------------------------------------
def _model_from_args(args: argparse.Namespace) -> ModelShape:
    manual = {name: getattr(args, name) for name in _MANUAL_OPTIONS if getattr(args, name) is not None}
    if args.config is not None:
        try:
            if args.config.stat().st_size > MAX_CONFIG_BYTES:
                raise UsageError(f"argument --config: {args.config} is over the 1 MB limit")
            data = args.config.read_bytes()
        except OSError as exc:
            raise UsageError(f"argument --config: cannot read {args.config}: {exc.strerror or exc}") from None
        try:
            base = parse_hf_config(data, name=args.config.stem if args.config.name != "config.json" else None)
        except ConfigError as exc:
            raise UsageError(f"argument --config: {exc}") from None
    elif args.model is not None or not manual:
        base = get_preset(args.model or DEFAULT_PRESET).shape
    else:
        missing = [name for name in _MANUAL_OPTIONS if name not in manual]
        if missing:
            raise UsageError(f"argument --{missing[0].replace('_', '-')}: required for a manual shape "
                             f"(or give --model / --config)")
        return ModelShape(name="custom", **manual)
    if not manual:
        return base
    # Manual options override the preset or config (e.g. --model llama-3.1-70b --kv-heads 64).
    if base.kv_lora_rank and {"kv_heads", "head_dim"} & manual.keys():
        manual = {**manual, "kv_lora_rank": 0, "qk_rope_head_dim": 0}
    return replace(base, name=f"{base.name} (edited)", **manual)


def request_from_args(args: argparse.Namespace) -> SizingRequest:
    """The :class:`SizingRequest` the parsed options describe (library errors propagate)."""
    if args.gpu_memory_gb is not None:
        if args.gpu is not None:
            raise UsageError("argument --gpu-memory-gb: not allowed with argument --gpu")
        gpu = custom_gpu(args.gpu_memory_gb, bandwidth_tbs=args.gpu_bandwidth_tbs)
    else:
        gpu = get_gpu(args.gpu or DEFAULT_GPU)
    budget = None
    if args.kv_budget_gib is not None:
        budget = math.floor(Fraction(repr(args.kv_budget_gib)) * GiB)
    return SizingRequest(
        model=_model_from_args(args),
        kv_dtype=args.kv_dtype,
        weight_dtype=args.weight_dtype,
        kv_group_size=args.kv_group_size or None,
        weight_group_size=args.weight_group_size or None,
        context=args.context,
        users=args.users,
        gpu=gpu,
        usable_fraction=args.usable,
        tp=args.tp,
        n_gpus=args.gpus,
        block_size=args.block_size,
        kv_budget_bytes=budget,
        gpus_per_node=args.gpus_per_node,
    )


# ---- output --------------------------------------------------------------------------------
def format_table(report: SizingReport) -> str:
    """A readable summary: the worked formula, then the main figures in GiB and GB."""
    r, d = report, UnitSystem.DECIMAL
    lines = [f"{r.model.name}: {r.model.summary}", f"GPU: {r.gpu.label}", "", "Worked formula:"]
    lines += [f"  {step.text}" for step in r.steps]
    plan = r.plan
    rows = [
        ("per token", both(r.per_token_bytes)),
        (f"per user ({r.context:,} tokens)", both(r.per_user_bytes)),
        (f"KV, {r.users:,} users", both(r.kv_bytes_total)),
        ("weights", both(r.weights_bytes)),
        ("GPUs needed (pooled)", r.gpus.label),
        (f"KV per token per GPU at TP {r.tp}", format_bytes(r.per_gpu_kv_bytes_per_token)),
        ("deployable plan", plan.summary),
        (f"KV budget ({'given' if r.kv_budget_given else f'{r.n_gpus} GPUs'})", both(max(r.kv_budget_bytes, 0))),
        (f"capacity ({r.block_size}-token blocks)", f"{r.capacity.blocks:,} blocks = {r.capacity.tokens:,} tokens"),
        (f"max concurrency at {r.context:,}", f"{r.capacity.max_concurrency:,.2f}"),
        (f"most users at {r.context:,}", f"{r.max_users:,}"),
        (f"longest context for {r.users:,} users",
         "unbounded (every layer slides)" if r.max_context is None else f"{r.max_context:,} tokens"),
        ("without GQA (MHA)", f"{format_bytes(r.without_gqa.per_token_bytes)}/token, "
                               f"{both(r.without_gqa.kv_bytes_total)}, {r.without_gqa.gpus.label} GPUs"),
    ]
    width = max(len(k) for k, _ in rows)
    lines += ["", *(f"  {k:<{width}}  {v}" for k, v in rows)]
    if r.warnings:
        lines += ["", "Warnings:", *(f"  ! {w.message}" for w in r.warnings)]
    lines += ["", "Reference table (KV precision × GPU):"]
    for row in r.table:
        lines.append(f"  {row.kv_label:<12} {row.gpu_name:<22} KV {format_bytes(row.kv_all_users_bytes, d, largest='GB'):>12}"
                     f"  total {format_bytes(row.total_bytes, d, largest='GB'):>12}  {row.gpus.label} GPUs")
    return "\n".join(lines)


def _fail(message: str, prog: str = PROG) -> int:
    print(f"{prog}: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _option_message(exc: SizingError) -> str:
    """A library error as ``argument --option: message``, naming the option the user typed."""
    option = _OPTION_FOR_FIELD.get(exc.field, f"--{exc.field.replace('_', '-')}")
    return f"argument {option}: {exc.message}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0, or 2 for a bad argument)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        report = size_deployment(request_from_args(args))
    except UsageError as exc:
        return _fail(str(exc))
    except SizingError as exc:
        return _fail(_option_message(exc))
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(format_table(report))
    return 0

"""Command line: ``python -m simulation snapshot|timeline [options] [--json]``.

Bad arguments end with exit code 2 and one line that names the argument, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import NoReturn

import numpy as np

from simulation.allocators import AddressSpace
from simulation.memory import GIB, KvBudget, MemoryBreakdown
from simulation.policies import ReservationPolicy
from simulation.snapshot import DEFAULT_BLOCK_SIZE, SnapshotConfig, run_snapshot
from simulation.timeline import Allocation, Preemption, TimelineConfig, run_timeline
from simulation.traces import TraceError, load_trace_csv
from simulation.workloads import (Fixed, LogNormal, TotalLengthSpec, Uniform, Workload,
                                  poisson_arrivals)

EXIT_BAD_ARGUMENTS = 2
# Defaults reproduce the reference page's problem 4: 8 × H100 80 GB at 90 % minus 70 GB of FP8
# weights = 506 GB of KV, at 160 KiB per token (Llama-style 70B, FP8 KV), 32K maximum context.
DEFAULT_BUDGET_BYTES = 506 * 10**9
DEFAULT_PER_TOKEN_BYTES = 160 * 1024
DEFAULT_MAX_CONTEXT = 32_768
DEFAULT_MEAN_TOKENS = 2_048.0
DEFAULT_SIGMA = 0.5  # assumed spread of the log-normal default
DEFAULT_SNAPSHOT_REQUESTS = 10_000
DEFAULT_TIMELINE_REQUESTS = 2_000


class ArgumentError(Exception):
    """A bad command-line value; ``argument`` is the option's name."""

    def __init__(self, argument: str, message: str) -> None:
        super().__init__(f"argument {argument}: {message}")


class _Parser(argparse.ArgumentParser):
    """argparse that reports errors in one line with exit code 2."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_ARGUMENTS)


def _number_type(parse: type[int] | type[float], *, minimum: int, strict: bool,
                 requirement: str) -> Callable[[str], int | float]:
    """An argparse ``type``: ``parse(text)``, refused unless ``> minimum`` (``strict``) or
    ``>= minimum``, and finite; ``requirement`` words the condition in the error."""
    kind = "a whole number" if parse is int else "a number"

    def check(text: str) -> int | float:
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind}, got {text!r}") from None
        in_range = value > minimum if strict else value >= minimum
        # Python ints are always finite (and may be too large for math.isfinite).
        if not (in_range and (parse is int or math.isfinite(value))):
            raise argparse.ArgumentTypeError(f"must be {requirement}, got {value if parse is int else text}")
        return value

    return check


_positive_int = _number_type(int, minimum=1, strict=False, requirement=">= 1")
_non_negative_int = _number_type(int, minimum=0, strict=False, requirement=">= 0")
_positive_float = _number_type(float, minimum=0, strict=True, requirement="a positive finite number")
_non_negative_float = _number_type(float, minimum=0, strict=False, requirement="a finite number >= 0")


def _progress(text: str) -> float | None:
    if text == "random":
        return None
    value = _non_negative_float(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1] or 'random', got {text}")
    return value


def _add_workload_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("workload")
    group.add_argument("--dist", choices=("lognormal", "uniform", "fixed"), default="lognormal",
                       help="total tokens per request (default lognormal)")
    group.add_argument("--mean", type=_positive_float, help=f"log-normal mean tokens (default {DEFAULT_MEAN_TOKENS:g})")
    group.add_argument("--sigma", type=_non_negative_float, help=f"log-normal sigma (default {DEFAULT_SIGMA})")
    group.add_argument("--median", type=_positive_float, help="log-normal by median tokens (with --p90)")
    group.add_argument("--p90", type=_positive_float, help="log-normal 90th percentile tokens (with --median)")
    group.add_argument("--low", type=_positive_int, help="uniform: fewest tokens")
    group.add_argument("--high", type=_positive_int, help="uniform: most tokens")
    group.add_argument("--length", type=_positive_int, help="fixed: tokens per request")
    group.add_argument("--prompt-fraction", type=_non_negative_float, default=0.5,
                       help="share of each synthetic request that is prompt (default 0.5, assumed)")
    group.add_argument("--trace", help="CSV with prompt and output token columns (and arrival times)")
    group.add_argument("--n", type=_positive_int, help="requests (synthetic) or first rows (trace)")
    group.add_argument("--seed", type=_non_negative_int, default=0, help="random seed (default 0)")


def _add_budget_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("KV budget (default: the reference page's 506 GB at 160 KiB/token)")
    group.add_argument("--kv-budget-tokens", type=_positive_int, help="budget in token slots")
    group.add_argument("--kv-budget-gib", type=_positive_float, help="budget in GiB (needs --per-token-bytes)")
    group.add_argument("--per-token-bytes", type=_positive_int, help="KV bytes per token, all layers")
    parser.add_argument("--max-context", type=_positive_int, default=DEFAULT_MAX_CONTEXT,
                        help=f"model's maximum context, tokens (default {DEFAULT_MAX_CONTEXT})")
    parser.add_argument("--block-size", type=_positive_int, default=DEFAULT_BLOCK_SIZE,
                        help=f"paged block size, tokens (default {DEFAULT_BLOCK_SIZE})")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def build_parser() -> argparse.ArgumentParser:
    """The CLI's parser (subcommands ``snapshot`` and ``timeline``)."""
    parser = _Parser(prog="python -m simulation",
                     description="KV-cache fragmentation: contiguous reservation against paged blocks.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    snapshot = commands.add_parser("snapshot", help="requests that fit a budget, utilisation, waste")
    _add_workload_options(snapshot)
    _add_budget_options(snapshot)
    snapshot.add_argument("--policy", choices=[p.value for p in ReservationPolicy], default="max",
                          help="contiguous reservation (Orca baselines; default max)")
    snapshot.add_argument("--address-space", choices=[a.value for a in AddressSpace], default="buddy")
    snapshot.add_argument("--progress", type=_progress, default=1.0,
                          help="share of each output generated at the snapshot, or 'random' (default 1)")
    timeline = commands.add_parser("timeline", help="continuous batching over time")
    _add_workload_options(timeline)
    _add_budget_options(timeline)
    timeline.add_argument("--rate", type=_positive_float, help="Poisson arrivals, requests/s "
                          "(default: the trace's own arrival times)")
    timeline.add_argument("--allocator", choices=[a.value for a in Allocation], default="paged")
    timeline.add_argument("--address-space", choices=[a.value for a in AddressSpace], default="buddy",
                          help="contiguous allocators only (default buddy)")
    timeline.add_argument("--preempt", choices=[p.value for p in Preemption], default="recompute")
    timeline.add_argument("--decode-step-s", type=_positive_float, default=None)
    timeline.add_argument("--prefill-tokens-per-s", type=_positive_float, default=None)
    timeline.add_argument("--max-batch", type=_positive_int, default=None)
    return parser


def _workload(args: argparse.Namespace, default_n: int, rng: np.random.Generator) -> Workload:
    if args.trace is not None:
        try:
            workload = load_trace_csv(args.trace)
        except OSError as err:
            raise ArgumentError("--trace", f"cannot read {args.trace!r}: {err.strerror}") from None
        except TraceError as err:
            raise ArgumentError("--trace", str(err)) from None
        return workload.head(args.n) if args.n else workload
    given = {name for name in ("mean", "sigma", "median", "p90", "low", "high", "length")
             if getattr(args, name) is not None}
    allowed = {"lognormal": {"mean", "sigma", "median", "p90"}, "uniform": {"low", "high"},
               "fixed": {"length"}}[args.dist]
    if stray := sorted(given - allowed):
        raise ArgumentError(f"--{stray[0]}", f"not used with --dist {args.dist}")
    if args.prompt_fraction > 1:
        raise ArgumentError("--prompt-fraction", f"must be in [0, 1], got {args.prompt_fraction}")
    by_quantiles = args.median is not None or args.p90 is not None
    if args.dist == "lognormal" and by_quantiles:
        if args.mean is not None or args.sigma is not None:
            raise ArgumentError("--median", "give --mean/--sigma or --median/--p90, not both")
        if args.median is None or args.p90 is None:
            raise ArgumentError("--p90" if args.p90 is None else "--median", "--median and --p90 go together")
        if args.p90 < args.median:
            raise ArgumentError("--p90", f"must be >= --median ({args.median:g}), got {args.p90:g}")
        lengths = LogNormal.from_median_p90(median=args.median, p90=args.p90)
    elif args.dist == "lognormal":
        lengths = LogNormal(mean=args.mean or DEFAULT_MEAN_TOKENS,
                            sigma=DEFAULT_SIGMA if args.sigma is None else args.sigma)
    elif args.dist == "uniform":
        if args.low is None or args.high is None:
            raise ArgumentError("--low" if args.low is None else "--high", "--dist uniform needs --low and --high")
        if args.low > args.high:
            raise ArgumentError("--high", f"must be >= --low ({args.low}), got {args.high}")
        lengths = Uniform(low=args.low, high=args.high)
    else:
        if args.length is None:
            raise ArgumentError("--length", "--dist fixed needs --length")
        lengths = Fixed(length=args.length)
    spec = TotalLengthSpec(lengths=lengths, prompt_fraction=args.prompt_fraction)
    return spec.generate(args.n or default_n, rng)


def _budget(args: argparse.Namespace) -> KvBudget:
    if args.kv_budget_tokens is not None:
        if args.kv_budget_gib is not None:
            raise ArgumentError("--kv-budget-gib", "give either --kv-budget-tokens or --kv-budget-gib, not both")
        return KvBudget(tokens=args.kv_budget_tokens, per_token_bytes=args.per_token_bytes)
    if args.kv_budget_gib is not None:
        if args.per_token_bytes is None:
            raise ArgumentError("--per-token-bytes", "--kv-budget-gib needs --per-token-bytes")
        budget_bytes = int(args.kv_budget_gib * GIB)
        if budget_bytes < args.per_token_bytes:
            raise ArgumentError("--kv-budget-gib", "the budget holds less than one token")
        return KvBudget.from_bytes(total_bytes=budget_bytes, per_token_bytes=args.per_token_bytes)
    per_token = args.per_token_bytes or DEFAULT_PER_TOKEN_BYTES
    return KvBudget.from_bytes(total_bytes=DEFAULT_BUDGET_BYTES, per_token_bytes=per_token)


def _check_context(args: argparse.Namespace) -> None:
    if args.max_context < 2:
        raise ArgumentError("--max-context", f"must be >= 2 tokens, got {args.max_context}")


def _breakdown_json(breakdown: MemoryBreakdown) -> dict[str, float]:
    return {name: round(value, 6) for name, value in asdict(breakdown.fractions()).items()}


def _snapshot(args: argparse.Namespace) -> dict[str, object]:
    _check_context(args)
    rng = np.random.default_rng(args.seed)
    workload = _workload(args, DEFAULT_SNAPSHOT_REQUESTS, rng)
    config = SnapshotConfig(budget=_budget(args), max_context=args.max_context,
                            block_size=args.block_size, policy=args.policy,
                            address_space=args.address_space, progress=args.progress)
    result = run_snapshot(workload, config, rng)
    return {
        "workload": workload.source, "requests": result.requests, "clipped": result.clipped,
        "budget_tokens": config.budget.tokens, "budget_bytes": config.budget.bytes,
        "max_context": config.max_context, "block_size": config.block_size,
        "policy": config.policy.value, "address_space": config.address_space.value,
        "contiguous_fit": result.contiguous.fit, "paged_fit": result.paged.fit,
        "contiguous_utilisation": round(result.contiguous.utilisation, 6),
        "paged_utilisation": round(result.paged.utilisation, 6),
        "contiguous_waste_tokens_mean": round(result.contiguous.waste_tokens_mean, 3),
        "paged_waste_tokens_mean": round(result.paged.waste_tokens_mean, 3),
        "paged_waste_tokens_max": result.paged.waste_tokens_max,
        "contiguous_breakdown": _breakdown_json(result.contiguous.breakdown),
        "paged_breakdown": _breakdown_json(result.paged.breakdown),
        "sample_reused": result.sample_reused,
    }


def _timeline(args: argparse.Namespace) -> dict[str, object]:
    _check_context(args)
    rng = np.random.default_rng(args.seed)
    workload = _workload(args, DEFAULT_TIMELINE_REQUESTS, rng)
    if args.rate is not None:
        workload = workload.with_arrivals(poisson_arrivals(workload.size, args.rate, rng))
    elif workload.arrival_s is None:
        raise ArgumentError("--rate", "the workload has no arrival times: give --rate (requests/s)")
    overrides = {name: getattr(args, name) for name in ("decode_step_s", "prefill_tokens_per_s", "max_batch")
                 if getattr(args, name) is not None}
    config = TimelineConfig(budget=_budget(args), max_context=args.max_context,
                            allocation=args.allocator, block_size=args.block_size,
                            address_space=args.address_space, preemption=args.preempt, **overrides)
    result = run_timeline(workload, config)
    return {
        "workload": workload.source, "requests": workload.size, "budget_tokens": config.budget.tokens,
        "allocator": config.allocation.value, "preempt": config.preemption.value,
        "block_size": config.block_size, "max_context": config.max_context,
        "completed": result.completed, "rejected": result.rejected,
        "duration_s": round(result.duration_s, 3), "mean_batch_size": round(result.mean_batch_size, 3),
        "token_state_fraction": round(result.token_state_fraction, 6),
        "breakdown": _breakdown_json(result.breakdown),
        "preemptions": result.preemptions, "recomputed_tokens": result.recomputed_tokens,
        "swapped_tokens": result.swapped_tokens,
        "preemption_stall_s": round(result.preemption_stall_s, 3),
        "mean_wait_s": round(result.mean_wait_s, 4),
    }


def _table(report: dict[str, object]) -> str:
    rows = []
    for key, value in report.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k} {v:.1%}" for k, v in value.items())
        elif isinstance(value, float):
            value = f"{value:,.4g}"
        elif isinstance(value, int) and not isinstance(value, bool):
            value = f"{value:,}"
        rows.append((key, str(value)))
    width = max(len(key) for key, _ in rows)
    return "\n".join(f"{key:<{width}}  {value}" for key, value in rows)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0, or 2 for bad arguments)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        report = _snapshot(args) if args.command == "snapshot" else _timeline(args)
    except ArgumentError as err:
        print(f"{parser.prog} {args.command}: error: {err}", file=sys.stderr)
        return EXIT_BAD_ARGUMENTS
    except ValueError as err:  # a combination the library refuses; its message names the value
        print(f"{parser.prog} {args.command}: error: {str(err).splitlines()[0]}", file=sys.stderr)
        return EXIT_BAD_ARGUMENTS
    print(json.dumps(report, indent=2) if args.json else _table(report))
    return 0

"""``python -m sizing plan``: the capacity planner from the command line (JSON with ``--json``).

Contract (issue 6): the sizer's model, precision and GPU options plus ``--tp N``, ``--batch B``,
``--context L``, ``--bandwidth-source {measured,h200-results,datasheet}``, ``--efficiency F``;
prints at least ``decode_step_s``, ``tokens_per_s``, ``max_batch_paged``,
``max_batch_contiguous``, ``binding_limit``. Every sequence holds ``--context`` tokens (a fixed
workload) unless ``--trace`` or ``--mean``/``--sigma`` give a distribution. With
``--bandwidth-source datasheet --efficiency 1`` a memory-bound step is exactly
``(weight bytes per GPU + B × L × per-GPU KV bytes per token) ÷ bandwidth``.

Bad arguments: exit status 2 and one line naming the argument (the sizer CLI's convention, whose
option groups and parser are reused here).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sizing import cli as sizer_cli
from planner.bandwidth import SOURCES_IN_ORDER, BenchJsonError, load_bench_json
from sizing.errors import SizingError
from planner.capacity import binding_limit_at, decode_step, effective_bandwidth
from planner.plan import (
    DEFAULT_MAX_CONTEXT,
    PlanOutcome,
    PlanRequest,
    TrafficSpec,
    run_plan,
)
from sizing.precisions import get_precision

PROG = "python -m sizing plan"
POLICIES = ("max", "pow2", "oracle")
DEFAULT_CONTEXT = 2048  # the reference page's average request (problem 4)


# Argument types shared with the sizer's CLI, so both report bad values the same way.
_efficiency = sizer_cli._fraction  # a factor on bandwidth in (0, 1]
_positive_float = sizer_cli._positive_float
_positive_int = sizer_cli._positive_int


def build_parser() -> argparse.ArgumentParser:
    """The ``plan`` parser: the sizer's model/precision/hardware groups plus the planner's own."""
    parser = sizer_cli._Parser(
        prog=PROG,
        description="Users served and time per output token, contiguous against paged KV.",
        epilog="Exit status 2 on a bad argument, with one line naming it.",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    sizer_cli.add_model_arguments(parser)
    sizer_cli.add_precision_arguments(parser)
    sizer_cli.add_hardware_arguments(parser)
    group = parser.add_argument_group("planner")
    group.add_argument("--batch", type=_positive_int, metavar="B",
                       help="sequences decoded together (default: the largest the plan allows)")
    group.add_argument("--context", type=_positive_int, default=DEFAULT_CONTEXT, metavar="L",
                       help=f"tokens each sequence holds (default {DEFAULT_CONTEXT})")
    group.add_argument("--max-context", type=_positive_int, default=DEFAULT_MAX_CONTEXT,
                       metavar="TOKENS", help="contiguous reservation for Orca-Max "
                       f"(default {DEFAULT_MAX_CONTEXT})")
    group.add_argument("--block-size", type=_positive_int, default=16, metavar="N",
                       help="paged block size in tokens (default 16, as vLLM)")
    group.add_argument("--policy", choices=POLICIES, default="max",
                       help="contiguous reservation policy (default max)")
    group.add_argument("--mean", type=_positive_float, metavar="TOKENS",
                       help="log-normal traffic: mean total tokens per request (instead of --context)")
    group.add_argument("--sigma", type=_positive_float, default=0.8, metavar="S",
                       help="log-normal sigma (default 0.8)")
    group.add_argument("--trace", type=Path, metavar="CSV", help="request lengths from a trace CSV")
    group.add_argument("--bandwidth-source", choices=SOURCES_IN_ORDER, default=None,
                       help="measured (needs --bench-json), h200-results, datasheet "
                            "(default: the best available, in that order)")
    group.add_argument("--bench-json", type=Path, metavar="PATH",
                       help="a `python -m kernels.bench --json` run on this GPU")
    group.add_argument("--efficiency", type=_efficiency, metavar="F",
                       help="factor on datasheet bandwidth (default: from the source)")
    group.add_argument("--tpot-ms", type=_positive_float, metavar="MS", help="TPOT target")
    group.add_argument("--ttft-ms", type=_positive_float, metavar="MS", help="TTFT target")
    group.add_argument("--rate", type=_positive_float, metavar="REQ/S",
                       help="arrival rate, for the replicas it needs")
    return parser


def request_from_args(args: argparse.Namespace) -> tuple[PlanRequest, dict[str, Any] | None]:
    """The plan request and the measured harness JSON (if any) the options describe."""
    # The sizer's request builder wants its own workload options; they do not matter here.
    sizer_args = argparse.Namespace(**vars(args), users=1, kv_budget_gib=None)
    sizing = sizer_cli.request_from_args(sizer_args)
    if args.trace is not None and args.mean is not None:
        raise sizer_cli.UsageError("argument --trace: not allowed with argument --mean")
    if args.trace is not None:
        try:
            data = args.trace.read_bytes()
        except OSError as exc:
            raise sizer_cli.UsageError(f"argument --trace: cannot read {args.trace}: "
                                       f"{exc.strerror or exc}") from None
        traffic = TrafficSpec(kind="trace", trace_bytes=data, trace_name=args.trace.name)
    elif args.mean is not None:
        traffic = TrafficSpec(kind="lognormal", mean=args.mean, sigma=args.sigma)
    else:
        if args.context < 2:
            raise sizer_cli.UsageError("argument --context: must be at least 2 tokens")
        traffic = TrafficSpec(kind="fixed", length=args.context)
    measured = None
    if args.bench_json is not None:
        try:
            measured = dict(load_bench_json(Path(args.bench_json)))
        except BenchJsonError as exc:
            raise sizer_cli.UsageError(f"argument --bench-json: {exc}") from None
    elif args.bandwidth_source == "measured":
        raise sizer_cli.UsageError("argument --bench-json: required with --bandwidth-source measured")
    request = PlanRequest(
        model=sizing.model,
        kv_precision=get_precision(sizing.kv_dtype, group_size=sizing.kv_group_size,
                                   field="kv_dtype"),
        weight_precision=get_precision(sizing.weight_dtype, group_size=sizing.weight_group_size,
                                       field="weight_dtype"),
        gpu=sizing.gpu, tp=sizing.tp, usable_fraction=sizing.usable_fraction, traffic=traffic,
        max_context=max(args.max_context, 2), block_size=args.block_size, policy=args.policy,
        bandwidth_source=args.bandwidth_source or "measured", efficiency=args.efficiency,
        tpot_target_s=None if args.tpot_ms is None else args.tpot_ms / 1e3,
        ttft_target_s=None if args.ttft_ms is None else args.ttft_ms / 1e3,
        arrival_rate_per_s=args.rate,
    )
    return request, measured


def result_dict(outcome: PlanOutcome, *, batch: int | None, context: float | None) -> dict[str, Any]:
    """The JSON object printed: the step at ``batch``, by default the paged operating point
    (the largest batch memory and the TPOT target allow, and the limit that stops it there)."""
    plan = outcome.plan
    model, gpu, estimate = plan.model, plan.gpu, plan.estimate
    context = plan.context if context is None else context
    operating_point = batch is None
    batch = plan.paged.batch if batch is None else batch
    step = None if batch < 1 else decode_step(model, gpu, estimate, batch=batch, context=context)
    if step is None or operating_point:
        limit, words = plan.paged.binding_limit, plan.paged.explanation
    else:
        limit, words = binding_limit_at(model, gpu, estimate, batch=batch, context=context,
                                        memory_batch=plan.paged.memory_batch,
                                        tpot_target_s=plan.tpot_target_s)
    return {
        "model": model.name, "gpu": gpu.name, "tp": model.tp,
        "batch": batch, "context": context,
        "decode_step_s": None if step is None else step.step_s,
        "tokens_per_s": None if step is None else step.tokens_per_s,
        "tokens_per_s_per_gpu": None if step is None else step.tokens_per_s / model.tp,
        "step_bound": None if step is None else step.bound,
        "memory_time_s": None if step is None else step.memory_s,
        "compute_time_s": None if step is None else step.compute_s,
        "bytes_read_per_gpu": None if step is None else step.bytes_read,
        "binding_limit": limit,
        "binding_explanation": words,
        "max_batch_paged": plan.paged.memory_batch,
        "max_batch_contiguous": plan.contiguous.memory_batch,
        "max_batch_tpot": plan.paged.latency_batch,
        "weight_bytes_per_gpu": model.weight_bytes_per_gpu,
        "kv_bytes_per_token_per_gpu": model.kv_bytes_per_token_per_gpu,
        "kv_budget_bytes_per_gpu": plan.kv_budget_bytes_per_gpu,
        "kv_budget_tokens_per_gpu": outcome.fits.budget_tokens,
        "bandwidth_source": estimate.source,
        "bandwidth_efficiency": estimate.bandwidth_efficiency,
        "compute_efficiency": estimate.compute_efficiency,
        "bandwidth_bytes_per_s": effective_bandwidth(gpu, estimate),
        "bandwidth_label": estimate.label,
        "source_notes": list(outcome.source_notes),
        "ttft_s": plan.ttft_s,
        "traffic": outcome.traffic_label,
        "paged": _allocator_dict(plan.paged),
        "contiguous": _allocator_dict(plan.contiguous),
        "paged_gain": plan.paged_gain,
        "paper_check": plan.paper_check(),
        "required_concurrency": plan.required_concurrency,
        "replicas_needed": plan.replicas_needed,
        "gpus_needed": plan.gpus_needed,
    }


def _allocator_dict(allocator) -> dict[str, Any]:
    return {
        "label": allocator.fit.label, "fit": allocator.memory_batch,
        "utilisation": allocator.fit.utilisation, "batch": allocator.batch,
        "tpot_s": None if allocator.step is None else allocator.step.step_s,
        "tokens_per_s": allocator.tokens_per_s,
        "tokens_per_s_per_gpu": allocator.tokens_per_s_per_gpu,
        "users_per_gpu": allocator.users_per_gpu, "users_per_node": allocator.users_per_node,
        "binding_limit": allocator.binding_limit, "explanation": allocator.explanation,
    }


def format_table(result: dict[str, Any]) -> str:
    """A readable summary of ``result_dict``."""
    def ms(value):
        return "—" if value is None else f"{value * 1e3:.2f} ms"

    rows = [
        ("model / GPU", f"{result['model']} on {result['gpu']}, TP {result['tp']}"),
        ("bandwidth", result["bandwidth_label"]),
        (f"decode step at B={result['batch']}, L={result['context']:,.0f}",
         f"{ms(result['decode_step_s'])} ({result['step_bound']})"),
        ("tokens/s per replica", "—" if result["tokens_per_s"] is None
         else f"{result['tokens_per_s']:,.0f}"),
        ("max batch: paged / contiguous",
         f"{result['max_batch_paged']:,} / {result['max_batch_contiguous']:,}"),
        ("binding limit", result["binding_explanation"]),
        ("paging vs contiguous", result["paper_check"]),
        ("time to first token", ms(result["ttft_s"])),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``plan``; returns 0, or 2 after one line naming a bad argument."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
        request, measured = request_from_args(args)
        outcome = run_plan(request, measured=measured)
        fixed = request.traffic.kind == "fixed"
        result = result_dict(outcome, batch=args.batch, context=args.context if fixed else None)
    except sizer_cli.UsageError as exc:
        return _fail(str(exc))
    except SizingError as exc:
        return _fail(sizer_cli._option_message(exc))
    except ValueError as exc:  # a trace the simulator rejects names its row or column
        return _fail(f"argument {'--trace' if args.trace else '--context'}: {exc}")
    print(json.dumps(result, indent=2) if args.json else format_table(result))
    return 0


def _fail(message: str) -> int:
    return sizer_cli._fail(message, prog=PROG)


if __name__ == "__main__":
    sys.exit(main())

"""``python -m planner`` (also ``python -m sizing plan``): the capacity planner from the command
line (JSON with ``--json``).

Options: the sizer's model, precision and GPU options plus ``--tp N``, ``--batch B``,
``--context L``, ``--bandwidth-source {measured,h200-results,datasheet}``, ``--efficiency F``,
``--engine {vllm,sglang}``, ``--enforce-eager`` (no CUDA graphs), ``--max-num-batched-tokens N``;
prints at least ``decode_step_s``, ``tokens_per_s``, ``max_batch_paged``,
``max_batch_contiguous``, ``binding_limit``, and ``timing_model`` / ``timing_label``: which model
produced the times. Every sequence holds ``--context`` tokens (a fixed workload) unless
``--trace`` or ``--mean``/``--sigma`` give a distribution.

A model with a config (``--model``, a catalogue ``--model-id``, ``--config``) is timed by the step
model (:mod:`planner.step_model`): TPOT, the TPOT cap, TTFT, and ``serving``, what a serving
benchmark would print at the paged operating point (:mod:`planner.serving`); the answer's line
"TPOT at the answer's batch" comes from the same step model. A shape typed by hand (or a preset
edited by ``--layers``, ``--kv-heads``, …, whose config no longer describes it) keeps the
roofline; with ``--bandwidth-source datasheet --efficiency 1`` its memory-bound step is exactly
``(weight bytes per GPU + B × L × per-GPU KV bytes per token) ÷ bandwidth``.

Bad arguments: exit status 2 and one line naming the argument, as the sizer's CLI, whose
option groups are reused so both parse a model and a GPU the same way.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from glossary import allocator_label, dtype_label
from inputs.bounds import Bound
from inputs.cli import OneLineParser, UsageError, arg_type, choice, help_range, run_cli
from inputs.errors import InputError
from inputs.uploads import dumps_strict, read_path_capped
from kernels.bench.records import BenchReport, read_bench_file
from planner.bandwidth import SOURCES_IN_ORDER
from planner import bench_like
from planner.cluster import cli as cluster_cli
from planner.capacity import binding_limit_at, decode_step, effective_bandwidth
from planner.plan import (
    DEFAULT_MAX_CONTEXT,
    ENGINES,
    PlanOutcome,
    PlanRequest,
    TrafficSpec,
    answer_timing,
    run_plan,
)
from planner.serving import VALIDATION
from sizing import cli as sizer_cli
from sizing.engine.cli import ENGINE_OPTION_FOR_FIELD
from sizing.answer import answer_for
from sizing.catalogue import find_entry
from sizing.hf_config import MAX_CONFIG_BYTES
from sizing.kv import DEFAULT_BLOCK_SIZE
from sizing.presets import DEFAULT_PRESET, get_preset
from sizing.report import size_deployment

PROG = "python -m sizing plan"
POLICIES = ("max", "pow2", "oracle")
DEFAULT_CONTEXT = 2048  # the reference page's average request
MAX_TRACE_BYTES = 64_000_000  # the largest shipped trace is under 1 MB; a bigger file is not one
# Options that change a preset's or config's shape, after which its config.json no longer
# describes the model: the roofline times it.
SHAPE_OPTIONS = ("layers", "q_heads", "kv_heads", "head_dim", "params", "layout", "kv_lora_rank",
                 "qk_rope_head_dim", "state")

# Ranges of the planner's own numeric options (shown by --help). A fixed workload needs one
# prompt token and one output token, hence contexts from 2.
BATCH = Bound(field="batch", low=1, high=10_000_000, integer=True, unit="sequences")
CONTEXT = Bound(field="context", low=2, high=10_000_000, integer=True, unit="tokens")
MAX_CONTEXT = Bound(field="max_context", low=2, high=10_000_000, integer=True, unit="tokens")
MEAN = Bound(field="mean", low=2, high=10_000_000, unit="tokens")
SIGMA = Bound(field="sigma", low=0, low_open=True, high=4)
EFFICIENCY = Bound(field="efficiency", low=0.01, high=1)  # below 1 % of the datasheet is no working GPU
TPOT_MS = Bound(field="tpot_ms", low=0, low_open=True, high=10_000_000, unit="ms")
TTFT_MS = Bound(field="ttft_ms", low=0, low_open=True, high=10_000_000, unit="ms")
RATE = Bound(field="rate", low=0, low_open=True, high=1_000_000, unit="requests/s")


def _add(group, option: str, bound: Bound, text: str, **kwargs: Any) -> None:
    group.add_argument(option, type=arg_type(bound), help=f"{text} ({help_range(bound)})", **kwargs)


def build_parser() -> argparse.ArgumentParser:
    """The planner's parser: the sizer's model/precision/hardware groups plus its own."""
    parser = OneLineParser(
        prog=PROG,
        description="Users served and time per output token, contiguous against paged KV.",
        epilog="Exit status 2 on a bad argument, with one line naming it.",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    sizer_cli.add_model_arguments(parser)
    sizer_cli.add_precision_arguments(parser)
    sizer_cli.add_hardware_arguments(parser)
    group = parser.add_argument_group("planner")
    _add(group, "--batch", BATCH, "sequences decoded together (default: the largest the plan allows)",
         metavar="B")
    _add(group, "--context", CONTEXT, f"tokens each sequence holds (default {DEFAULT_CONTEXT})",
         default=DEFAULT_CONTEXT, metavar="L")
    _add(group, "--max-context", MAX_CONTEXT, "contiguous reservation for Orca-Max "
         f"(default {DEFAULT_MAX_CONTEXT})", default=DEFAULT_MAX_CONTEXT, metavar="TOKENS")
    _add(group, "--block-size", sizer_cli.BLOCK_SIZE,
         f"paged block size in tokens (default {DEFAULT_BLOCK_SIZE}, as vLLM)",
         default=DEFAULT_BLOCK_SIZE, metavar="N")
    group.add_argument("--policy", type=choice(POLICIES), default="max", metavar="{max,pow2,oracle}",
                       help="contiguous reservation policy (default max)")
    _add(group, "--mean", MEAN, "log-normal traffic: mean total tokens per request (instead of "
         "--context)", metavar="TOKENS")
    _add(group, "--sigma", SIGMA, "log-normal sigma (default 0.8)", default=0.8, metavar="S")
    group.add_argument("--trace", type=Path, metavar="CSV",
                       help=f"request lengths from a trace CSV (at most {MAX_TRACE_BYTES:,} bytes)")
    group.add_argument("--bandwidth-source", type=choice(SOURCES_IN_ORDER), default=None,
                       metavar="{" + ",".join(SOURCES_IN_ORDER) + "}",
                       help="measured (needs --bench-json), h200-results, datasheet "
                            "(default: the best available, in that order)")
    group.add_argument("--bench-json", type=Path, metavar="PATH",
                       help="a `python -m kernels.bench --json` run on this GPU")
    _add(group, "--efficiency", EFFICIENCY, "factor on datasheet bandwidth (default: from the source)",
         metavar="F")
    _add(group, "--tpot-ms", TPOT_MS, "TPOT target", metavar="MS")
    _add(group, "--ttft-ms", TTFT_MS, "TTFT target", metavar="MS")
    _add(group, "--rate", RATE, "arrival rate, for the replicas it needs", metavar="REQ/S")
    _add(group, "--users", sizer_cli.USERS, "concurrent users of --max-context tokens, for the answer "
         "(GPUs, TP × replicas, launch command) (default 100)", default=100, metavar="N")
    group.add_argument("--engine", type=choice(ENGINES), default="vllm", metavar="{" + ",".join(ENGINES) + "}",
                       help="the serving engine the step model times: vLLM mixes prompt chunks into decode "
                            "steps, SGLang runs them apart (default vllm; the answer is vLLM's)")
    sizer_cli.add_engine_arguments(parser, with_engine_flag=False)
    return parser


def config_from_args(args: argparse.Namespace) -> bytes | None:
    """The config.json the step model reads: ``--config``'s file (size-capped), the catalogue's
    for ``--model`` or a catalogue ``--model-id``; None for a shape typed or edited by hand and
    for a model fetched from the Hub (its config is not kept), which the roofline times."""
    if any(getattr(args, name, None) is not None for name in SHAPE_OPTIONS):
        return None
    if args.config is not None:
        return read_path_capped(str(args.config), MAX_CONFIG_BYTES, field="config")
    if args.model_id is not None:
        hub = sizer_cli.hub_model_from_args(args)
        entry = find_entry(hub.catalogue_id) if hub.catalogue_id else None
        return None if entry is None else entry.config_bytes
    return get_preset(args.model or DEFAULT_PRESET).config_bytes


def traffic_from_args(args: argparse.Namespace) -> TrafficSpec:
    """A trace (read with a size cap), a log-normal or every request at ``--context`` tokens."""
    if args.trace is not None and args.mean is not None:
        raise UsageError("argument --trace: not allowed with argument --mean")
    if args.trace is not None:
        data = read_path_capped(str(args.trace), MAX_TRACE_BYTES, field="trace")
        return TrafficSpec(kind="trace", trace_bytes=data, trace_name=args.trace.name)
    if args.mean is not None:
        return TrafficSpec(kind="lognormal", mean=args.mean, sigma=args.sigma)
    return TrafficSpec(kind="fixed", length=args.context)


def measured_from_args(args: argparse.Namespace) -> BenchReport | None:
    """The harness report of ``--bench-json`` (read with the kernels loader's size cap)."""
    if args.bench_json is not None:
        return read_bench_file(args.bench_json)
    if args.bandwidth_source == "measured":
        raise UsageError("argument --bench-json: required with --bandwidth-source measured")
    return None


def request_from_args(args: argparse.Namespace) -> PlanRequest:
    """The plan request the options describe (library errors propagate, naming their field)."""
    kv_precision, weight_precision = sizer_cli.precisions_from_args(args)
    return PlanRequest(
        model=sizer_cli.model_from_args(args), kv_precision=kv_precision,
        weight_precision=weight_precision, gpu=sizer_cli.gpu_from_args(args), tp=args.tp,
        usable_fraction=args.usable, traffic=traffic_from_args(args),
        max_context=args.max_context, block_size=args.block_size, policy=args.policy,
        bandwidth_source=args.bandwidth_source or "measured", efficiency=args.efficiency,
        tpot_target_s=None if args.tpot_ms is None else args.tpot_ms / 1e3,
        ttft_target_s=None if args.ttft_ms is None else args.ttft_ms / 1e3,
        arrival_rate_per_s=args.rate, config=config_from_args(args), engine=args.engine,
        cuda_graphs=not args.enforce_eager, chunk_tokens=args.max_num_batched_tokens,
        max_num_seqs=args.max_num_seqs,
    )


def result_dict(outcome: PlanOutcome, *, batch: int | None, context: float | None) -> dict[str, Any]:
    """The JSON object printed: the step at ``batch``, by default the paged operating point
    (the largest batch memory and the TPOT target allow, and the limit that stops it there)."""
    plan, timing = outcome.plan, outcome.timing
    model, gpu, estimate = plan.model, plan.gpu, plan.estimate
    context = plan.context if context is None else context
    operating_point = batch is None
    batch = plan.paged.batch if batch is None else batch
    step = None if batch < 1 else decode_step(model, gpu, estimate, batch=batch, context=context, timing=timing)
    if step is None or operating_point:
        limit, words = plan.paged.binding_limit, plan.paged.explanation
    else:
        limit, words = binding_limit_at(model, gpu, estimate, batch=batch, context=context,
                                        memory_batch=plan.paged.memory_batch,
                                        tpot_target_s=plan.tpot_target_s, timing=timing)
    return {
        "model": model.name, "gpu": gpu.name, "tp": model.tp,
        "batch": batch, "context": context,
        "timing_model": plan.timing_model, "timing_label": plan.timing_label,
        "timing_note": outcome.timing_note or None,
        "engine": None if timing is None else timing.setup.engine,
        "cuda_graphs": None if timing is None else timing.setup.cuda_graphs,
        "max_num_batched_tokens": None if timing is None else timing.chunk_tokens,
        "decode_step_s": None if step is None else step.step_s,
        "decode_step_terms": (None if step is None or timing is None
                              else timing.terms(batch, context).as_record()),
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
        "serving": _serving_dict(outcome),
        "validation": None if timing is None else {**asdict(VALIDATION), "doc": bench_like.VALIDATION_DOC},
    }


def _serving_dict(outcome: PlanOutcome) -> dict[str, Any] | None:
    """What a serving benchmark would print at the paged operating point (seconds); P90s are
    None where the arrivals give none (see :mod:`planner.serving`)."""
    p, spec = outcome.serving, outcome.serving_spec
    if p is None or spec is None:
        return None
    return {
        "arrival": p.arrival, "concurrency": p.concurrency, "input_len": spec.input_len,
        "output_len": spec.output_len, "chunk_tokens": spec.chunk_tokens,
        "mean_tpot_s": p.tpot_s, "p90_tpot_s": p.p90_tpot_s, "mean_ttft_s": p.ttft_s,
        "p90_ttft_s": p.p90_ttft_s, "mean_itl_s": p.itl_s, "p90_itl_s": p.p90_itl_s,
        "output_tokens_per_s": p.output_tokens_per_s, "decode_step_s": p.decode_step.total_s,
        "notes": list(outcome.serving_notes),
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


def format_table(result: dict[str, Any], request: PlanRequest | None = None) -> str:
    """A readable summary of ``result_dict``; ``request`` adds the formats and the contiguous
    allocator by the names every page uses (:mod:`glossary`)."""
    def ms(value):
        return "—" if value is None else f"{value * 1e3:.2f} ms"

    step_model = result["timing_model"] == "step model"
    rows = [("model / GPU", f"{result['model']} on {result['gpu']}, TP {result['tp']}")]
    if request is not None:
        kv, weights = request.kv_precision, request.weight_precision
        rows += [("KV cache / weights", f"{dtype_label(kv.name, kv.group_size)} KV, "
                                        f"{dtype_label(weights.name, weights.group_size)} weights"),
                 ("allocators", f"{allocator_label('paged')} against {allocator_label(request.policy)}")]
    rows += [
        ("timing model", result["timing_label"] + (f" ({result['timing_note']})" if result["timing_note"] else "")),
        ("bandwidth", result["bandwidth_label"]),
        (f"decode step at B={result['batch']}, L={result['context']:,.0f}",
         f"{ms(result['decode_step_s'])} ({'step model' if step_model else result['step_bound']})"),
        ("tokens/s per replica", "—" if result["tokens_per_s"] is None
         else f"{result['tokens_per_s']:,.0f}"),
        ("max batch: paged / contiguous",
         f"{result['max_batch_paged']:,} / {result['max_batch_contiguous']:,}"),
        ("binding limit", result["binding_explanation"]),
        ("paging vs contiguous", result["paper_check"]),
        ("time to first token", f"{ms(result['ttft_s'])} (the mean prompt alone, "
                                f"{'step model' if step_model else 'roofline'})"),
    ]
    if (serving := result["serving"]) is not None:
        rows.append((f"serving at {serving['concurrency']:,.0f} in flight ({serving['arrival']})",
                     f"TPOT {ms(serving['mean_tpot_s'])} (P90 {ms(serving['p90_tpot_s'])}), TTFT "
                     f"{ms(serving['mean_ttft_s'])} (P90 {ms(serving['p90_ttft_s'])}), "
                     f"{serving['output_tokens_per_s']:,.0f} output tokens/s"))
        rows += [("serving note", note) for note in serving["notes"]]
    if step_model:
        rows.append(("step model's error", bench_like.error_band()))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the planner; returns 0, or 2 after one line naming a bad argument."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["cluster"]:  # python -m planner cluster: the cluster plan has its own options
        return cluster_cli.main(argv[1:])
    if argv[:1] == ["bench-like"]:  # what vllm bench serve would print, from the step model
        return bench_like.main(argv[1:])
    if argv[:1] == ["layer-mix"]:  # a catalogue model's attention layers timed on this GPU
        from planner import layer_mix_cli  # imports torch only for this command

        return layer_mix_cli.main(argv[1:])

    def body() -> int:
        args = build_parser().parse_args(argv)
        request = request_from_args(args)
        measured = measured_from_args(args)
        try:
            outcome = run_plan(request, measured=measured)
        except InputError:
            raise
        except ValueError as exc:  # a trace the simulator rejects names its row or column
            raise UsageError(f"argument {'--trace' if args.trace else '--context'}: {exc}") from None
        concurrency = outcome.plan.required_concurrency
        if concurrency is not None and not math.isfinite(concurrency):
            raise UsageError("argument --rate: not one sequence can run on this plan, so no "
                             "number of replicas serves an arrival rate")
        fixed = request.traffic.kind == "fixed"
        result = result_dict(outcome, batch=args.batch, context=args.context if fixed else None)
        report = size_deployment(sizer_cli.request_from_args(args, context=args.max_context))
        settings = sizer_cli.engine_settings_from_args(args)
        answer = answer_for(report, settings)
        answer = replace(answer, timing=answer_timing(report, answer, settings, config=request.config))
        try:
            if args.json:
                tpot = None if answer.timing is None else answer.timing.as_record()
                text = dumps_strict({**result, "answer": answer.as_dict(), "answer_tpot": tpot}, indent=2)
            else:
                text = "\n".join([*sizer_cli.format_answer(answer), "", format_table(result, request)])
        except ValueError:  # the bounds keep every figure finite; refuse rather than print NaN
            raise UsageError("the options give a result that is not a finite number; "
                             "use smaller values") from None
        print(text)
        return 0

    return run_cli(PROG, body, option_for_field=_option_for_field)


def _option_for_field(field: str) -> str:
    return ({"bench_json": "--bench-json", "trace": "--trace", "context": "--max-context",
             "chunk_tokens": "--max-num-batched-tokens", "cuda_graphs": "--enforce-eager"}.get(field)
            or ENGINE_OPTION_FOR_FIELD.get(field) or sizer_cli.option_for_field(field))


if __name__ == "__main__":
    sys.exit(main())

"""``python -m planner bench-like``: what ``vllm bench serve`` would print for a load, from the
step model (:mod:`planner.step_model`, :mod:`planner.serving`), so a prediction can be held next
to a run; strict JSON with ``--json``.

Options are the benchmark's (``--model``, ``--random-input-len``, ``--random-output-len``,
``--random-range-ratio``, ``--max-concurrency`` or ``--request-rate``, ``--num-prompts``), the
server's (``--tp``, ``--engine``, ``--enforce-eager``, ``--max-num-batched-tokens``,
``--max-num-seqs``) and the sizer's GPU and precisions (``--gpu``, ``--kv-dtype``,
``--weight-dtype``). ``--model`` is a catalogue id or the Hugging Face repo the catalogue ships
(``Qwen/Qwen2.5-72B-Instruct``); any other model needs its ``config.json`` (``--config``), since
a step is timed from the config's widths, not from a shape typed by hand.

The figures, for ``N`` prompts of ``in`` and ``out`` tokens (every request generates ``out``
tokens, as with ``--ignore-eos``)::

    mean TTFT, mean TPOT, steady output tokens/s      planner.serving.predict_benchmark
    mean ITL  = mean TPOT                             equal output lengths: the mean gap over all tokens
    duration  = N × out ÷ (output tokens/s)           closed loop: N ÷ c waves, or Little's law
              = (N − 1) ÷ rate + TTFT + (out − 1) × TPOT   Poisson: the last arrival, then its own latency
    request, output and total throughput = N, N × out, N × (in + out) ÷ duration

``--request-rate inf`` (the benchmark's default) sends all ``N`` at once: a closed loop of ``N``.
Refused, naming the option: a model without a config, weights larger than the TP group's memory,
requests longer than the model's context, and loads the model cannot answer — more sequences in
flight than vLLM runs at once (``--max-num-seqs``; the queue behind it is not modelled) or a
Poisson rate the replica does not keep up with. A KV cache the sizer finds too small for the
sequences in flight is a note, since the memory a server gives it is the server's setting
(``--gpu-memory-utilization``). Not modelled: the client's HTTP and tokenisation time (TTFT
comes out short, see the error band), preemption, percentiles.

Bad arguments: exit status 2 and one line naming the option, as the planner's other CLIs.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hardware.gpus import DEFAULT_GPU, GPU, GPU_IDS, get_gpu
from inputs.bounds import Bound
from inputs.cli import OneLineParser, UsageError, arg_type, choice, help_range, run_cli
from inputs.uploads import dumps_strict, read_path_capped
from planner.efficiency import Engine
from planner.serving import VALIDATION, BenchmarkSpec, ServingPrediction, predict_benchmark
from planner.step_model import ServingSetup, StepShape, step_shape
from sizing import cli as sizer_cli
from sizing.catalogue import CatalogueEntry, find_entry
from sizing.engine.capacity import DEFAULT_UTILIZATION, ENGINE_KV_DTYPES
from sizing.errors import ConfigError
from sizing.hf_config import MAX_CONFIG_BYTES, parse_hf_config
from sizing.models import ModelShape
from sizing.precisions import DEFAULT_GROUP_SIZE, WEIGHT_FORMAT_NAMES, get_precision
from sizing.report import size_deployment
from sizing.request import SizingRequest
from sizing.weights import AUTO, resolve_weight_precision
from units import GiB, MiB, both

PROG = "python -m planner bench-like"
ENGINES = ("vllm", "sglang")
VALIDATION_DOC = "docs/planner/VALIDATION.md"
# vllm bench serve's own defaults (vllm/benchmarks/serve.py, datasets.py).
DEFAULT_INPUT, DEFAULT_OUTPUT, DEFAULT_PROMPTS = 1024, 128, 1000

INPUT_LEN = Bound(field="random_input_len", low=1, high=10_000_000, integer=True, unit="tokens")
OUTPUT_LEN = Bound(field="random_output_len", low=2, high=10_000_000, integer=True, unit="tokens")  # TPOT needs 2
RANGE_RATIO = Bound(field="random_range_ratio", low=0, high=1)  # 1 itself is refused: vLLM takes [0, 1)
CONCURRENCY = Bound(field="max_concurrency", low=1, high=10_000_000, integer=True, unit="requests")
RATE = Bound(field="request_rate", low=0, low_open=True, high=1_000_000, unit="requests/s")
PROMPTS = Bound(field="num_prompts", low=1, high=10_000_000, integer=True, unit="requests")
BATCHED_TOKENS = Bound(field="max_num_batched_tokens", low=1, high=1 << 24, integer=True, unit="tokens")
NUM_SEQS = Bound(field="max_num_seqs", low=1, high=1 << 20, integer=True, unit="sequences")
# The share feeds the sizer's KV-capacity check as its usable fraction; below 1 % no GPU holds a
# model's weights, and shares near 0 overflow that check's exact arithmetic.
UTILIZATION_SHARE = Bound(field="gpu_memory_utilization", low=0.01, high=1.0)

_LABEL_WIDTH, _RULE_WIDTH = 40, 50  # vllm bench serve's "{:<40} {:<10}" lines and "=" * 50 rules


# ---------------------------------------------------------------------------------------------
# The engines' defaults when the server is given none
# ---------------------------------------------------------------------------------------------


def _vllm_large_gpu(gpu: GPU) -> bool:
    """vLLM's API-server defaults switch on the device's total memory (``cudaMemGetInfo``) and
    its name: ≥ 70 GiB and not an A100 (vllm/engine/arg_utils.py; tests/engine/test_arg_utils.py
    ``test_defaults_with_usage_context``)."""
    return gpu.engine_total_bytes >= 70 * GiB and "a100" not in gpu.name.lower()


def default_batched_tokens(gpu: GPU, engine: Engine) -> int:
    """Tokens per step the server schedules (vLLM ``--max-num-batched-tokens``, SGLang
    ``--chunked-prefill-size``): vLLM 8,192 on a large GPU, else 2,048; SGLang by nvidia-smi's
    total, 2,048 under 35 GiB, 4,096 under 60, 8,192 under 160, else 16,384
    (python/sglang/srt/server_args.py)."""
    if engine == "vllm":
        return 8192 if _vllm_large_gpu(gpu) else 2048
    total_mib = gpu.driver_total_mib or gpu.engine_total_bytes // MiB
    for below_gib, tokens in ((35, 2048), (60, 4096), (160, 8192)):
        if total_mib < below_gib * 1024:
            return tokens
    return 16384


def default_max_num_seqs(gpu: GPU) -> int:
    """vLLM's API-server ``--max-num-seqs``: 1,024 on a large GPU, else 256."""
    return 1024 if _vllm_large_gpu(gpu) else 256


# ---------------------------------------------------------------------------------------------
# The parser
# ---------------------------------------------------------------------------------------------


def _request_rate(text: str) -> float:
    """A Poisson rate in RATE, or ``inf`` (every request at once, the benchmark's default)."""
    if text.strip().lower() in ("inf", "infinity"):
        return math.inf
    return arg_type(RATE)(text)


def _catalogue_model(text: str) -> CatalogueEntry:
    entry = find_entry(text)
    if entry is None:
        raise argparse.ArgumentTypeError(
            f"{text[:60]!r} is not in the catalogue (see `python -m sizing models`); the step model times a "
            "step from the model's config.json, so give --config PATH for any other model")
    return entry


def _add(group, option: str, bound: Bound, text: str, *aliases: str, **kwargs: Any) -> None:
    group.add_argument(option, *aliases, type=arg_type(bound), help=f"{text} ({help_range(bound)})", **kwargs)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog=PROG, description="What `vllm bench serve` would print, predicted by the step "
                                                  "model, with the error it reached on published runs.",
                           epilog="Exit status 2 on a bad argument, with one line naming it.")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    model = parser.add_argument_group("model (one of)").add_mutually_exclusive_group(required=True)
    model.add_argument("--model", type=_catalogue_model, metavar="ID",
                       help="a catalogue id or the Hugging Face repo it ships")
    model.add_argument("--config", type=Path, metavar="PATH",
                       help=f"the model's config.json (at most {MAX_CONFIG_BYTES:,} bytes)")
    server = parser.add_argument_group("server")
    server.add_argument("--gpu", type=choice(GPU_IDS), default=DEFAULT_GPU, metavar="NAME",
                        help=f"GPU id (default {DEFAULT_GPU}): {', '.join(GPU_IDS)}")
    _add(server, "--tp", sizer_cli.TP, "tensor-parallel size (default 1)", "--tensor-parallel-size",
         default=1, metavar="N", dest="tp")
    server.add_argument("--engine", type=choice(ENGINES), default="vllm", metavar="{vllm,sglang}",
                        help="the serving engine: vLLM mixes prompt chunks into decode steps, SGLang runs "
                             "them apart (default vllm)")
    server.add_argument("--enforce-eager", "--disable-cuda-graph", action="store_true", dest="enforce_eager",
                        help="no CUDA graphs: the host launches every kernel")
    server.add_argument("--kv-dtype", "--kv-cache-dtype", type=choice(ENGINE_KV_DTYPES), default="bf16",
                        dest="kv_dtype", metavar="{" + ",".join(ENGINE_KV_DTYPES) + "}",
                        help="KV-cache precision (default bf16)")
    weights = (AUTO, *WEIGHT_FORMAT_NAMES)
    server.add_argument("--weight-dtype", type=choice(weights), default=AUTO, metavar="{" + ",".join(weights) + "}",
                        help="weight format (default auto: the config's own quantization_config, else bf16)")
    _add(server, "--max-num-batched-tokens", BATCHED_TOKENS, "tokens per step; SGLang's --chunked-prefill-size "
         "(default: the engine's for the GPU)", "--chunked-prefill-size", dest="max_num_batched_tokens",
         metavar="N")
    _add(server, "--max-num-seqs", NUM_SEQS, "vLLM's sequences per step (default: vLLM's for the GPU)",
         metavar="N")
    _add(server, "--gpu-memory-utilization", UTILIZATION_SHARE, "share of GPU memory for weights and KV, for the "
         f"KV-capacity check (default {DEFAULT_UTILIZATION:g})", default=DEFAULT_UTILIZATION, metavar="F")
    load = parser.add_argument_group("benchmark (vllm bench serve --dataset-name random)")
    _add(load, "--random-input-len", INPUT_LEN, f"prompt tokens (default {DEFAULT_INPUT})",
         default=DEFAULT_INPUT, metavar="N")
    _add(load, "--random-output-len", OUTPUT_LEN, f"generated tokens (default {DEFAULT_OUTPUT})",
         default=DEFAULT_OUTPUT, metavar="N")
    _add(load, "--random-range-ratio", RANGE_RATIO, "lengths drawn from [len × (1 − r), len × (1 + r)], "
         "below 1 (default 0)", default=0.0, metavar="R")
    _add(load, "--num-prompts", PROMPTS, f"requests (default {DEFAULT_PROMPTS})", default=DEFAULT_PROMPTS,
         metavar="N")
    arrival = load.add_mutually_exclusive_group()
    _add(arrival, "--max-concurrency", CONCURRENCY, "requests in flight at most (closed loop)", metavar="N")
    arrival.add_argument("--request-rate", type=_request_rate, metavar="REQ/S",
                         help=f"Poisson arrivals ({help_range(RATE)}), or inf: every request at once (default)")
    return parser


# ---------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class BenchLike:
    """One predicted benchmark: its inputs as resolved, the library's prediction and the totals
    ``vllm bench serve`` derives from them."""

    model_id: str
    shape: StepShape
    setup: ServingSetup
    spec: BenchmarkSpec
    prediction: ServingPrediction
    kv_dtype: str
    num_prompts: int
    max_concurrency: int | None
    request_rate: float  # inf: every request at once
    range_ratio: float
    notes: tuple[str, ...] = ()  # what the prediction leaves out for this load

    @property
    def e2e_s(self) -> float:
        return self.prediction.ttft_s + (self.spec.output_len - 1) * self.prediction.tpot_s

    @property
    def duration_s(self) -> float:
        if self.spec.arrival == "poisson":
            return (self.num_prompts - 1) / self.request_rate + self.e2e_s
        return self.num_prompts * self.spec.output_len / self.prediction.output_tokens_per_s

    @property
    def input_tokens(self) -> float:
        return self.num_prompts * self.spec.input_len

    @property
    def output_tokens(self) -> float:
        return self.num_prompts * self.spec.output_len


def _config(args: argparse.Namespace) -> tuple[bytes, str, str | None]:
    """(config bytes, the id printed, the model's name or None for the config's own)."""
    if args.config is not None:
        return read_path_capped(str(args.config), MAX_CONFIG_BYTES, field="config"), str(args.config), None
    return args.model.config_bytes, args.model.id, args.model.name


def _model_shape(args: argparse.Namespace, config: bytes, name: str | None) -> ModelShape:
    """The sizer's shape of the same model (the catalogue's, with its published parameter count)."""
    return args.model.shape if args.model is not None else parse_hf_config(config, name=name)


def run(args: argparse.Namespace) -> BenchLike:
    """The prediction the options ask for (library errors propagate, naming their field)."""
    if args.random_range_ratio >= 1:
        raise UsageError("argument --random-range-ratio: must be below 1 (vLLM samples [len × (1 − r), "
                         f"len × (1 + r)] for r in [0, 1)), got {args.random_range_ratio:g}")
    gpu = get_gpu(args.gpu)
    config, model_id, name = _config(args)
    kv_bytes = float(get_precision(args.kv_dtype, field="kv_dtype").bytes_per_value)
    weights = None if args.weight_dtype == AUTO else args.weight_dtype
    try:
        shape = step_shape(config, tp=args.tp, gpu=gpu, weight_format=weights, kv_bytes=kv_bytes, name=name)
        model = _model_shape(args, config, name)
    except ConfigError as exc:  # its field is the config's key, not an option
        option = "--config" if args.config is not None else "--model"
        raise UsageError(f"argument {option}: the step model cannot read this config: {exc}") from None
    longest = math.ceil((args.random_input_len + args.random_output_len) * (1 + args.random_range_ratio))
    if model.max_context and longest > model.max_context:  # vLLM refuses such a request outright
        raise UsageError(f"argument --random-input-len: prompt and output reach {longest:,} tokens, beyond "
                         f"{model.name}'s context of {model.max_context:,}")
    setup = ServingSetup(gpu=gpu, engine=args.engine, cuda_graphs=not args.enforce_eager)
    prompts, rate = args.num_prompts, math.inf if args.request_rate is None else args.request_rate
    closed = args.max_concurrency is not None or math.isinf(rate)
    in_flight = min(args.max_concurrency or prompts, prompts)  # the benchmark never has more than N
    max_seqs = args.max_num_seqs or default_max_num_seqs(gpu)
    if closed:
        _check_in_flight(args, in_flight, max_seqs)
    spec = BenchmarkSpec(
        input_len=args.random_input_len, output_len=args.random_output_len,
        concurrency=in_flight if closed else None, request_rate=None if closed else rate,
        # One wave (N ≤ c) starts together whatever the lengths; they drift apart only over waves.
        lengths_vary=args.random_range_ratio > 0 and prompts > in_flight,
        chunk_tokens=args.max_num_batched_tokens or default_batched_tokens(gpu, args.engine),
        num_prompts=prompts if closed else None)
    prediction = predict_benchmark(shape, setup, spec)
    if not closed:
        _check_poisson(args, prediction, max_seqs)
    memory = _memory(args, model, spec, prediction, source="config" if args.config is not None else "catalogue")
    return BenchLike(model_id=model_id, shape=shape, setup=setup, spec=spec, prediction=prediction,
                     kv_dtype=args.kv_dtype, num_prompts=prompts, max_concurrency=args.max_concurrency,
                     request_rate=rate, range_ratio=args.random_range_ratio, notes=memory)


def _memory(args: argparse.Namespace, model: ModelShape, spec: BenchmarkSpec, prediction: ServingPrediction, *,
            source: str) -> tuple[str, ...]:
    """Refuse weights larger than the TP group's memory (no engine can load them); note, not
    refuse, a KV cache the sizer finds too small for the sequences in flight at their longest
    (``in + out``): how much memory a server gives the cache is its own setting."""
    weights = resolve_weight_precision(args.weight_dtype, model, group_size=DEFAULT_GROUP_SIZE)
    users = max(1, math.ceil(prediction.concurrency))
    report = size_deployment(SizingRequest(
        model=model, kv_dtype=args.kv_dtype, weight_dtype=weights.name, context=spec.input_len + spec.output_len,
        users=users, gpu=args.gpu, tp=args.tp, usable_fraction=args.gpu_memory_utilization, model_source=source))
    gpu = report.gpu
    if report.weights_bytes > args.tp * gpu.engine_total_bytes:
        raise UsageError(f"argument --tp: the weights ({both(report.weights_bytes)}, {weights.name}) are "
                         f"more than {args.tp} × {gpu.name} hold ({both(args.tp * gpu.engine_total_bytes)});"
                         " give a larger --tp or a smaller --weight-dtype")
    utilization = f"--gpu-memory-utilization {args.gpu_memory_utilization:g}"
    if report.max_users >= users:
        return ()
    if report.kv_budget_bytes <= 0:
        return (f"KV capacity: at {utilization} the weights ({both(report.weights_bytes)}) leave no room for "
                "the KV cache; a server that runs this load gives the engine more memory",)
    return (f"KV capacity: at {utilization} the sizer's budget ({both(report.kv_budget_bytes)}) holds "
            f"{report.max_users:,} sequences of {spec.input_len + spec.output_len:,} tokens, fewer than the "
            f"{users:,} in flight; the engine would queue or preempt the rest, which the step model does not model",)


def _check_in_flight(args: argparse.Namespace, in_flight: int, max_seqs: int) -> None:
    """vLLM runs at most ``max_num_seqs`` sequences; more in flight wait in its queue, whose time
    TTFT would hold and the step model does not."""
    if args.engine != "vllm" or in_flight <= max_seqs:
        return
    if args.max_concurrency is not None:
        raise UsageError(f"argument --max-concurrency: vLLM runs at most {max_seqs:,} sequences at once "
                         "(--max-num-seqs); the requests beyond wait in its queue, which the step model "
                         f"does not model: give at most {max_seqs:,}")
    raise UsageError(f"argument --num-prompts: with --request-rate inf all {args.num_prompts:,} requests arrive "
                     f"at once and vLLM runs at most {max_seqs:,} (--max-num-seqs); the queue behind them is "
                     f"not modelled: give --max-concurrency {max_seqs:,} or at most {max_seqs:,} prompts")


def _check_poisson(args: argparse.Namespace, prediction: ServingPrediction, max_seqs: int) -> None:
    """A rate the replica keeps up with: Little's law's in-flight count finite, within the
    benchmark's prompts and (vLLM) within the sequences it runs at once."""
    limit = min(args.num_prompts, max_seqs) if args.engine == "vllm" else args.num_prompts
    concurrency = prediction.concurrency
    if not math.isfinite(concurrency) or concurrency > limit:
        shown = f"{concurrency:,.0f}" if concurrency < 100 * limit else f"over {100 * limit:,}"
        raise UsageError(f"argument --request-rate: at {args.request_rate:g} req/s Little's law puts {shown} "
                         f"requests in flight, more than {limit:,} ("
                         + ("--num-prompts" if limit == args.num_prompts else "vLLM's --max-num-seqs")
                         + "): the replica does not keep up and the queue is not modelled; give a lower rate")


# ---------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------


def record(result: BenchLike) -> dict[str, Any]:
    """The JSON object: the figures under ``vllm bench serve --save-result``'s keys, the inputs,
    the steady decode step term by term and the validation summary."""
    p, spec, setup = result.prediction, result.spec, result.setup
    duration, step = result.duration_s, p.decode_step
    return {
        "predicted": True, "model_id": result.model_id, "model": result.shape.name,
        "gpu": setup.gpu.name, "gpu_id": setup.gpu.id, "tp": result.shape.tp, "engine": setup.engine,
        "cuda_graphs": setup.cuda_graphs, "kv_dtype": result.kv_dtype, "weight_format": result.shape.weight_format,
        "random_input_len": spec.input_len, "random_output_len": spec.output_len,
        "random_range_ratio": result.range_ratio, "num_prompts": result.num_prompts,
        "max_concurrency": result.max_concurrency,
        "request_rate": "inf" if math.isinf(result.request_rate) else result.request_rate,  # as vLLM saves it
        "max_num_batched_tokens": spec.chunk_tokens, "arrival": p.arrival, "in_flight": p.concurrency,
        "completed": result.num_prompts, "duration": duration,
        "total_input_tokens": result.input_tokens, "total_output_tokens": result.output_tokens,
        "request_throughput": result.num_prompts / duration, "output_throughput": result.output_tokens / duration,
        "total_token_throughput": (result.input_tokens + result.output_tokens) / duration,
        "mean_ttft_ms": p.ttft_s * 1e3, "mean_tpot_ms": p.tpot_s * 1e3, "mean_itl_ms": p.tpot_s * 1e3,
        "mean_e2el_ms": result.e2e_s * 1e3,
        "steady_output_tokens_per_s": p.output_tokens_per_s,
        "decode_step": {**step.as_record(), "kernels": step.kernels, "experts_touched": step.experts_touched,
                        "notes": list(step.notes)},
        "notes": [*result.notes, *step.notes],
        "validation": {**asdict(VALIDATION), "doc": VALIDATION_DOC},
    }


def error_band() -> str:
    """One line quoting :data:`planner.serving.VALIDATION`, percentages as the doc prints them."""
    v = VALIDATION

    def pct(x: float, digits: int) -> str:
        return f"{x * 100:.{digits}f} %"

    return (f"Error band ({VALIDATION_DOC}, {v.runs} published runs, nothing fitted): TPOT median "
            f"{pct(v.tpot_median_error, 1)}, max {pct(v.tpot_max_error, 0)}, {v.tpot_within_10_percent} within "
            f"10 %; TTFT {'short on all' if v.ttft_all_low else 'off on'} {v.ttft_runs} runs that report it "
            f"(median {pct(v.ttft_median_error, 0)}): client, HTTP and tokenisation time are not modelled")


def format_text(rec: dict[str, Any]) -> str:
    """``vllm bench serve``'s result block with the predicted figures, then the error band."""
    def line(label: str, value: float | int, digits: int = 2) -> str:
        text = f"{value:.{digits}f}" if isinstance(value, float) else f"{value}"
        return f"{label + ':':<{_LABEL_WIDTH}} {text:<10}"

    def rule(title: str, fill: str) -> str:
        return f"{title:{fill}^{_RULE_WIDTH}}"

    eager = "eager" if not rec["cuda_graphs"] else "CUDA graphs"
    lines = [f"Predicted by the step model, not measured: {rec['model']} on {rec['tp']} × {rec['gpu']} "
             f"(TP {rec['tp']}), {rec['engine']}, {eager}, {rec['arrival']} arrivals",
             rule(" Serving Benchmark Result ", "="), line("Successful requests", rec["completed"])]
    if rec["max_concurrency"] is not None:
        lines.append(line("Maximum request concurrency", rec["max_concurrency"]))
    lines += [line("Benchmark duration (s)", rec["duration"]),
              line("Total input tokens", round(rec["total_input_tokens"])),
              line("Total generated tokens", round(rec["total_output_tokens"])),
              line("Request throughput (req/s)", rec["request_throughput"]),
              line("Output token throughput (tok/s)", rec["output_throughput"]),
              line("Total Token throughput (tok/s)", rec["total_token_throughput"]),
              rule("Time to First Token", "-"), line("Mean TTFT (ms)", rec["mean_ttft_ms"]),
              rule("Time per Output Token (excl. 1st token)", "-"), line("Mean TPOT (ms)", rec["mean_tpot_ms"]),
              rule("Inter-token Latency", "-"), line("Mean ITL (ms)", rec["mean_itl_ms"]), "=" * _RULE_WIDTH]
    step = rec["decode_step"]
    terms = ", ".join(f"{name.removesuffix('_s').replace('_', ' ')} {step[name] * 1e3:.3f}"
                      for name in ("attention_gemms_s", "attention_s", "mlp_gemms_s", "experts_s", "small_kernels_s",
                                   "allreduce_s", "lm_head_s", "sampling_s", "host_s") if step[name])
    lines += [f"Steady decode step at {rec['in_flight']:,.0f} in flight: {step['total_s'] * 1e3:.3f} ms ({terms} ms)",
              *(f"note: {n}" for n in rec["notes"]), error_band()]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the prediction; returns 0, or 2 after one line naming a bad argument."""
    argv = list(sys.argv[1:] if argv is None else argv)

    def body() -> int:
        args = build_parser().parse_args(argv)
        rec = record(run(args))
        try:
            text = dumps_strict(rec, indent=2) if args.json else format_text(rec)
        except ValueError:  # the bounds keep every figure finite; refuse rather than print NaN
            raise UsageError("the options give a result that is not a finite number; use smaller values") from None
        print(text)
        return 0

    return run_cli(PROG, body, option_for_field=sizer_cli.option_for_field)


if __name__ == "__main__":
    sys.exit(main())

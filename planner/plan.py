"""Builds the planner's inputs from the rest of the project: the sizer's model shapes, precisions
and GPU catalogue, and the simulator's snapshot fits on a workload.

Kept apart from ``planner.capacity`` so that the planner's equations depend on plain numbers
only (and their tests on hand calculations), while this module follows the other libraries' APIs.

A model with a config (every catalogue model, an uploaded or fetched ``config.json``) is timed by
the step model (:mod:`planner.step_model`): its TPOT, TPOT cap, curve and time to first token,
and a ``serving`` prediction of what ``vllm bench serve`` would print at the plan's operating
point (:mod:`planner.serving`). A shape typed by hand has no config to build the step model
from, so the roofline times it, and the plan says which model produced its figures.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np

from hardware.gpus import GPU
from inputs.errors import InputError, clip, shown
from kernels.bench.records import BenchReport
from planner.bandwidth import RESULTS_DIR, BandwidthEstimate, choose_estimate
from planner.capacity import (
    AllocatorFit,
    CapacityPlan,
    GpuSpec,
    ModelCost,
    kv_budget_bytes_per_gpu,
    plan_capacity,
)
from planner.edge import EdgePlan, EdgeWorkload, HistoryPoint, plan_edge, step_against_history
from planner.efficiency import Engine
from planner.serving import BenchmarkSpec, ServingPrediction, StepModelTiming, predict_benchmark
from planner.step_model import ServingSetup, step_shape
from simulation.memory import KvBudget
from simulation.policies import ReservationPolicy, clip_to_context
from simulation.snapshot import SnapshotConfig, run_snapshot
from simulation.traces import load_trace_csv
from simulation.workloads import LogNormal, TotalLengthSpec, Workload, preset
from sizing.answer import Answer, AnswerTiming, EngineSettings
from sizing.catalogue import find_entry
from sizing.kv import DEFAULT_BLOCK_SIZE, DEFAULT_USABLE_FRACTION, KVCacheSpec, weights_bytes
from sizing.models import ModelShape
from sizing.precisions import Precision
from sizing.report import SizingReport

# FLOPs per cached token per query head per layer at decode, MHA/GQA/MQA: q·k (2 × head_dim)
# and p·v (2 × head_dim).
ATTENTION_FLOPS_PER_HEAD_DIM = 4
TFLOPS = 10**12  # FLOP/s in one TFLOP/s


@dataclass(frozen=True, kw_only=True)
class TrafficFits:
    """The simulator's snapshot on one workload, as the planner consumes it."""

    contiguous: AllocatorFit
    paged: AllocatorFit
    mean_tokens: float  # mean final length of a request (prompt + output, clipped), tokens
    mean_prompt_tokens: float
    mean_output_tokens: float
    budget_tokens: int  # KV slots of one GPU's budget
    clipped: int  # requests cut to the maximum context


def model_cost(shape: ModelShape, *, kv_precision: Precision, weight_precision: Precision,
               tp: int, context: int | None = None) -> ModelCost:
    """The planner's view of a model at tensor parallelism ``tp``.

    With sliding-window layers the KV bytes per token depend on the context (windowed layers stop
    growing), so ``context`` turns them into the mean bytes per token of a ``context``-long
    sequence; without windows it does not matter. MoE models read all experts' weights once a
    batch is large (every expert is hit), so weights count in full, while FLOPs use the active
    parameters.
    """
    spec = KVCacheSpec(model=shape, precision=kv_precision, tp=tp)
    per_gpu = spec.bytes_per_token_per_gpu
    whole = spec.bytes_per_token
    layer_share = 1.0
    if context and shape.sliding_window:
        per_gpu = spec.sequence_bytes_per_gpu(context) / context
        whole = spec.sequence_bytes(context) / context
        layer_share = shape.cached_layer_tokens(context) / (shape.layers * context)
    return ModelCost(
        name=shape.name,
        weight_bytes=float(weights_bytes(shape.params, weight_precision)),
        params=float(shape.active_params or shape.params),
        kv_bytes_per_token=float(whole),
        kv_bytes_per_token_per_gpu=float(per_gpu),
        attention_flops_per_context_token_per_gpu=_attention_flops(shape, tp) * layer_share,
        tp=tp,
    )


def gpu_spec(gpu: GPU) -> GpuSpec:
    """The planner's view of a catalogue GPU (memory in bytes, rates per second)."""
    return GpuSpec(name=gpu.name, memory_bytes=float(gpu.memory_bytes),
                   bandwidth_bytes_per_s=gpu.bandwidth_bytes_per_s,
                   bf16_flops_per_s=gpu.bf16_tflops * TFLOPS)


def allocator_fits(workload: Workload, *, budget_bytes: float, kv_bytes_per_token_per_gpu: float,
                   max_context: int, block_size: int, policy: str = "max") -> TrafficFits:
    """Sequences that fit one GPU's KV budget, contiguous (``policy``) and paged, by the simulator.

    The budget is turned into token slots of
    one GPU (every GPU of a replica holds the same tokens, its share of the heads); requests are
    counted at their final length, as the reference page does.
    """
    prompt, output, clipped = clip_to_context(workload, max_context)
    totals = prompt + output
    policy_label = {
        "max": f"contiguous, reserving {max_context:,} tokens (Orca-Max)",
        "pow2": "contiguous, output rounded up to a power of two (Orca-Pow2)",
        "oracle": "contiguous, exact length known ahead (Orca-Oracle)",
    }[ReservationPolicy(policy).value]
    budget_tokens = int(budget_bytes // kv_bytes_per_token_per_gpu) if budget_bytes > 0 else 0
    # (sequences, utilisation) per allocator; none fit when the budget holds no token.
    contiguous_fit, paged_fit = (0, 0.0), (0, 0.0)
    if budget_tokens >= 1:
        result = run_snapshot(workload, SnapshotConfig(
            budget=KvBudget(tokens=budget_tokens), max_context=max_context,
            block_size=block_size, policy=ReservationPolicy(policy)))
        contiguous_fit = (int(result.contiguous.fit), float(result.contiguous.utilisation))
        paged_fit = (int(result.paged.fit), float(result.paged.utilisation))
    contiguous = AllocatorFit(allocator=f"contiguous-{policy}", label=policy_label,
                              sequences=contiguous_fit[0], utilisation=contiguous_fit[1])
    paged = AllocatorFit(allocator="paged", label=f"paged, {block_size}-token blocks",
                         sequences=paged_fit[0], utilisation=paged_fit[1])
    return TrafficFits(contiguous=contiguous, paged=paged, mean_tokens=float(np.mean(totals)),
                       mean_prompt_tokens=float(np.mean(prompt)),
                       mean_output_tokens=float(np.mean(output)),
                       budget_tokens=budget_tokens, clipped=int(clipped))


def fixed_context_workload(context: int) -> Workload:
    """One request of ``context`` tokens (``context − 1`` prompt, 1 output), reused by the
    snapshot: the CLI's "every sequence holds ``--context`` tokens"."""
    if context < 2:
        raise ValueError(f"context must be at least 2 tokens (one prompt, one output), got {context}")
    return Workload(prompt_tokens=np.array([context - 1], dtype=np.int64),
                    output_tokens=np.array([1], dtype=np.int64), source=f"fixed {context}")


def _attention_flops(shape: ModelShape, tp: int) -> float:
    """Decode attention FLOPs per cached token on one GPU, all layers (query heads split by TP)."""
    heads_per_gpu = shape.q_heads / tp
    if shape.kv_lora_rank:
        # MLA with the projections absorbed: scores against the latent and its RoPE part
        # (2 × (rank + rope)), then the weighted sum of latents (2 × rank), per query head.
        per_head = 2 * (shape.kv_lora_rank + shape.qk_rope_head_dim) + 2 * shape.kv_lora_rank
    else:
        per_head = ATTENTION_FLOPS_PER_HEAD_DIM * shape.head_dim
    return shape.layers * heads_per_gpu * per_head


# ---------------------------------------------------------------------------------------------
# One request in, one plan out: what the page and ``python -m planner`` both call
# ---------------------------------------------------------------------------------------------

TrafficKind = Literal["fixed", "lognormal", "preset", "trace"]
# Requests drawn for a synthetic workload: enough that the admitted prefix's mean length is
# within ~1 % of the distribution's for the sigmas offered (the snapshot reuses the sample).
DEFAULT_SAMPLE_REQUESTS = 20_000
DEFAULT_MAX_CONTEXT = 32_768  # the reference page's maximum context (and the sizer's default)
ENGINES: tuple[Engine, ...] = ("vllm", "sglang")
DEFAULT_CHUNK_TOKENS = 8192  # vLLM's --max-num-batched-tokens on a large GPU (the answer's default)
MAX_CHUNK_TOKENS = 1 << 24  # the engine options' own bound
# vLLM's --max-num-seqs on a large GPU: a serving prediction past it notes the queue it ignores.
VLLM_MAX_NUM_SEQS = 1024
MAX_NUM_SEQS = 1 << 20
# What a config the sizer parses may still raise in the step model (a width it lacks or that is
# not a number); InputError, the config reader's own, is a ValueError.
_UNREADABLE = (ValueError, KeyError, TypeError, ZeroDivisionError)


@dataclass(frozen=True, kw_only=True)
class TrafficSpec:
    """The length distribution or trace of the requests (tokens), hashable for caching.

    ``fixed``: every request holds ``length`` tokens. ``lognormal``: total tokens log-normal with
    arithmetic ``mean`` and log-space ``sigma``, ``prompt_fraction`` of each being prompt.
    ``preset``: a simulator preset by name (ShareGPT, Alpaca, ...). ``trace``: a CSV at
    ``trace_path`` or the uploaded ``trace_bytes``.
    """

    kind: TrafficKind = "fixed"
    length: int = 2048
    mean: float = 2048.0
    sigma: float = 0.8
    prompt_fraction: float = 0.5
    preset: str = "ShareGPT"
    trace_path: str | None = None
    trace_bytes: bytes | None = None
    trace_name: str = "uploaded trace"
    n_requests: int = DEFAULT_SAMPLE_REQUESTS
    seed: int = 0


@dataclass(frozen=True, kw_only=True)
class PlanRequest:
    """Everything a capacity plan depends on, as plain values (the page's widgets, the CLI's flags)."""

    model: ModelShape
    kv_precision: Precision
    weight_precision: Precision
    gpu: GPU
    tp: int = 1
    usable_fraction: float = DEFAULT_USABLE_FRACTION
    traffic: TrafficSpec = TrafficSpec()
    max_context: int = DEFAULT_MAX_CONTEXT
    block_size: int = DEFAULT_BLOCK_SIZE
    policy: str = "max"
    bandwidth_source: str = "measured"  # the most preferred source; falls back down the list
    efficiency: float | None = None  # overrides the source's bandwidth efficiency
    tpot_target_s: float | None = None
    ttft_target_s: float | None = None
    arrival_rate_per_s: float | None = None
    # The engine's KV budget of one GPU (vLLM's "Available KV cache memory", bytes); replaces
    # usable fraction × memory − weights, so the plan and the engine's sizing share one budget.
    kv_budget_bytes_per_gpu: float | None = None
    # The step model's source: the model's config.json as read (size-capped by the reader); None
    # for a shape typed by hand, which the roofline times.
    config: bytes | None = None
    engine: Engine = "vllm"
    cuda_graphs: bool = True  # False: eager mode, the host launches every kernel
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS  # tokens per step (vLLM --max-num-batched-tokens)

    max_num_seqs: int = VLLM_MAX_NUM_SEQS  # vLLM's cap on running sequences, for the serving notes

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise InputError("engine", f"must be one of {', '.join(ENGINES)}, got {shown(self.engine)}")
        if not isinstance(self.cuda_graphs, bool):
            raise InputError("cuda_graphs", f"must be True or False, got {shown(self.cuda_graphs)}")
        for field, value, high in (("chunk_tokens", self.chunk_tokens, MAX_CHUNK_TOKENS),
                                   ("max_num_seqs", self.max_num_seqs, MAX_NUM_SEQS)):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
                raise InputError(field, f"must be a whole number from 1 to {high:,}, got {shown(value)}")
        if self.config is not None and not isinstance(self.config, bytes):
            raise InputError("config", "must be the bytes of a config.json")


@dataclass(frozen=True, kw_only=True)
class PlanOutcome:
    """A capacity plan with what it was computed from and the notes on skipped sources."""

    plan: CapacityPlan
    fits: TrafficFits
    estimate: BandwidthEstimate
    source_notes: tuple[str, ...]
    traffic_label: str
    # The step model behind the plan (None: the roofline timed it) and, at the paged operating
    # point, what a serving benchmark would print; None when no config or no sequence runs.
    timing: StepModelTiming | None = None
    serving: ServingPrediction | None = None
    serving_spec: BenchmarkSpec | None = None
    serving_notes: tuple[str, ...] = ()
    timing_note: str = ""  # why a config was not timed by the step model, when it was not


def build_workload(spec: TrafficSpec) -> Workload:
    """The simulator's ``Workload`` for ``spec`` (seeded: the same spec gives the same requests)."""
    rng = np.random.default_rng(spec.seed)
    if spec.kind == "fixed":
        return fixed_context_workload(spec.length)
    if spec.kind == "lognormal":
        return TotalLengthSpec(lengths=LogNormal(mean=spec.mean, sigma=spec.sigma),
                               prompt_fraction=spec.prompt_fraction).generate(spec.n_requests, rng)
    if spec.kind == "preset":
        return preset(spec.preset).spec.generate(spec.n_requests, rng)
    if spec.kind == "trace":
        if spec.trace_bytes is not None:
            return load_trace_csv(spec.trace_bytes, name=spec.trace_name)
        if spec.trace_path is None:
            raise ValueError("trace: give a trace file")
        return load_trace_csv(spec.trace_path)
    raise ValueError(f"traffic kind must be fixed, lognormal, preset or trace, got {spec.kind!r}")


def run_plan(request: PlanRequest, *, measured: BenchReport | None = None,
             measured_gpu: GPU | None = None, results_dir: Path | None = None) -> PlanOutcome:
    """The capacity plan for ``request``: sizing → simulator fits → planner.

    ``measured`` is a harness report from a run on ``measured_gpu`` (default: the device the
    report names, through the datasheet figures it states).
    """
    workload = build_workload(request.traffic)
    fits_context = int(min(np.mean(workload.total_tokens), request.max_context)) or 1
    cost = model_cost(request.model, kv_precision=request.kv_precision,
                      weight_precision=request.weight_precision, tp=request.tp,
                      context=fits_context)
    gpu = gpu_spec(request.gpu)
    if measured is None:  # the shipped results, read once per folder state
        estimate, notes = _shipped_or_datasheet(request.bandwidth_source, results_dir)
    else:
        kwargs: dict[str, Any] = {} if results_dir is None else {"results_dir": results_dir}
        estimate, notes = choose_estimate(
            request.bandwidth_source, measured=measured,
            measured_datasheet_tbps=None if measured_gpu is None else measured_gpu.bandwidth_tbs,
            measured_datasheet_tflops=None if measured_gpu is None else measured_gpu.bf16_tflops,
            **kwargs)
    if request.efficiency is not None:
        estimate = estimate.with_bandwidth_efficiency(request.efficiency)
    budget = (kv_budget_bytes_per_gpu(cost, gpu, request.usable_fraction)
              if request.kv_budget_bytes_per_gpu is None else float(request.kv_budget_bytes_per_gpu))
    fits = allocator_fits(workload, budget_bytes=budget,
                          kv_bytes_per_token_per_gpu=cost.kv_bytes_per_token_per_gpu,
                          max_context=request.max_context, block_size=request.block_size,
                          policy=request.policy)
    timing, timing_note = _step_model_or_why_not(request)
    plan = plan_capacity(cost, gpu, estimate, contiguous=fits.contiguous, paged=fits.paged,
                         context=fits.mean_tokens, usable_fraction=request.usable_fraction,
                         prompt_tokens=fits.mean_prompt_tokens,
                         tpot_target_s=request.tpot_target_s,
                         ttft_target_s=request.ttft_target_s,
                         arrival_rate_per_s=request.arrival_rate_per_s,
                         mean_output_tokens=fits.mean_output_tokens,
                         kv_budget_bytes=request.kv_budget_bytes_per_gpu, timing=timing)
    spec = None if timing is None else serving_spec(request, fits, plan.paged.batch)
    serving = None if spec is None else predict_benchmark(timing.shape, timing.setup, spec)
    return PlanOutcome(plan=plan, fits=fits, estimate=estimate, source_notes=tuple(notes),
                       traffic_label=workload.source, timing=timing, serving=serving, serving_spec=spec,
                       serving_notes=_serving_notes(request, fits, spec), timing_note=timing_note)


def step_model_timing(config: bytes, *, model: ModelShape, weight_precision: Precision,
                      kv_precision: Precision, gpu: GPU, tp: int, engine: Engine = "vllm",
                      cuda_graphs: bool = True, chunk_tokens: int = DEFAULT_CHUNK_TOKENS) -> StepModelTiming:
    """The step model of ``config`` at ``tp`` on ``gpu``, as the plan and the answer's TPOT use it.

    The weight format is the config's own when ``weight_precision`` is the model's own format, so
    what its ``quantization_config`` leaves in bf16 (gpt-oss's attention) stays bf16; another
    format converts every linear layer. The KV cache holds ``kv_precision``'s bytes per value.
    """
    chosen = weight_precision.name
    own = chosen == (model.weight_format or "bf16")
    shape = step_shape(config, tp=tp, gpu=gpu, weight_format=None if own else chosen,
                       kv_bytes=float(kv_precision.bytes_per_value), name=model.name)
    setup = ServingSetup(gpu=gpu, engine=engine, cuda_graphs=cuda_graphs)
    return StepModelTiming(shape=shape, setup=setup, chunk_tokens=chunk_tokens)


def _step_model_or_why_not(request: PlanRequest) -> tuple[StepModelTiming | None, str]:
    """The request's step model, or None and why: no config (a shape typed by hand), or a
    config the step model cannot read, which the roofline then times instead of refusing a plan
    the sizer could make."""
    if request.config is None:
        return None, ""
    try:
        return step_model_timing(request.config, model=request.model, weight_precision=request.weight_precision,
                                 kv_precision=request.kv_precision, gpu=request.gpu, tp=request.tp,
                                 engine=request.engine, cuda_graphs=request.cuda_graphs,
                                 chunk_tokens=request.chunk_tokens), ""
    except _UNREADABLE as exc:
        return None, clip(f"the step model cannot read this config ({exc}); the roofline times it", 240)


def serving_spec(request: PlanRequest, fits: TrafficFits, batch: int) -> BenchmarkSpec | None:
    """The benchmark the plan's operating point amounts to: ``batch`` requests in flight (a
    closed loop), the traffic's mean prompt and output; lengths that vary drift apart
    (staggered), equal ones start in waves (burst). None when no sequence runs."""
    if batch < 1:
        return None
    return BenchmarkSpec(input_len=max(1.0, fits.mean_prompt_tokens), output_len=max(2.0, fits.mean_output_tokens),
                         concurrency=int(batch), lengths_vary=request.traffic.kind != "fixed",
                         chunk_tokens=request.chunk_tokens)


def _serving_notes(request: PlanRequest, fits: TrafficFits, spec: BenchmarkSpec | None) -> tuple[str, ...]:
    notes = []
    if spec is not None and fits.mean_output_tokens < 2:
        notes.append(f"the traffic generates {fits.mean_output_tokens:g} token per request on average; the "
                     "serving figures decode 2 (TPOT needs two), so they show a prompt-heavy load")
    if spec is not None and request.engine == "vllm" and spec.concurrency > request.max_num_seqs:
        notes.append(f"{spec.concurrency:,} sequences in flight: vLLM runs at most {request.max_num_seqs:,} at once "
                     "(--max-num-seqs); the figures assume all run, not the queue behind them")
    return tuple(notes)


def answer_timing(report: SizingReport, answer: Answer, settings: EngineSettings | None = None, *,
                  config: bytes | None = None) -> AnswerTiming | None:
    """The time per output token of the sizer's answer: one replica's decode step at the load it
    carries (``load_per_replica`` sequences, each counted at the answer's full context, as the
    plan counts its sequences), from :func:`step_model_timing` under the answer's engine settings
    (vLLM, CUDA graphs unless ``enforce_eager``), the same step model the plan's TPOT comes from.

    ``config``: the model's config.json; default the catalogue's when the report's model is a
    catalogue entry. None when there is no step model to ask: no engine answer (a KV dtype no
    engine caches, or nothing fits) or no config (a shape typed by hand). Pipeline stages are
    not in the step model, so that answer says so instead of a figure.
    """
    if answer.basis != "vllm" or not answer.fits:
        return None
    if config is None:
        entry = find_entry(report.handoff.preset_id) if report.handoff.preset_id else None
        if entry is None:
            return None
        config = entry.config_bytes
    settings = settings or EngineSettings()
    batch, context = answer.load_per_replica, answer.context
    if answer.pp > 1:
        return AnswerTiming(batch=batch, context=context, tpot_s=None, label="step model",
                            reason=f"{answer.pp} pipeline stages are not in the step model")
    try:
        timing = step_model_timing(config, model=report.model, weight_precision=report.weight_precision,
                                   kv_precision=report.kv_precision, gpu=report.gpu, tp=answer.tp,
                                   cuda_graphs=not settings.enforce_eager,
                                   chunk_tokens=settings.max_num_batched_tokens)
    except _UNREADABLE as exc:
        return AnswerTiming(batch=batch, context=context, tpot_s=None, label="step model",
                            reason=clip(f"the step model cannot read this config: {exc}", 160))
    return AnswerTiming(batch=batch, context=context, tpot_s=timing.step_s(batch, context), label=timing.label)


def _shipped_or_datasheet(source: str, results_dir: Path | None) -> tuple[BandwidthEstimate, list[str]]:
    """``choose_estimate`` without a harness run, cached on the results folder's files (name,
    size, modification time): parsing the shipped reports costs ~200 ms, a plan must take < 50."""
    folder = RESULTS_DIR if results_dir is None else Path(results_dir)
    try:
        files = tuple(sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in folder.glob("*.json")))
    except OSError:
        files = ()
    estimate, notes = _cached_estimate(source, str(folder), files)
    return estimate, list(notes)


@lru_cache(maxsize=32)
def _cached_estimate(source: str, folder: str, files: tuple) -> tuple[BandwidthEstimate, tuple[str, ...]]:
    del files  # part of the cache key only
    estimate, notes = choose_estimate(source, results_dir=Path(folder))
    return estimate, tuple(notes)


def run_edge_plan(*, model: ModelShape, kv_precision: Precision, weight_precision: Precision,
                  device: GPU, workload: EdgeWorkload, estimate: BandwidthEstimate,
                  curve_points: int = 40) -> tuple[EdgePlan, tuple[HistoryPoint, ...]]:
    """The edge plan on one device (TP 1) and its step-against-history curve, up to 1.5 × the
    longer of the memory and control-step limits (so both limits show on the chart)."""
    cost = model_cost(model, kv_precision=kv_precision, weight_precision=weight_precision, tp=1)
    spec = gpu_spec(device)
    plan = plan_edge(cost, spec, estimate, workload)
    # Headroom past the furthest limit so the crossing is visible; at least one minute.
    span = 1.5 * max(plan.history_s, plan.control_history_s, 60.0)
    curve = step_against_history(cost, spec, estimate, workload, max_history_s=span,
                                 points=curve_points)
    return plan, curve

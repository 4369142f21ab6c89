"""Capacity planner: from a model, GPUs and traffic to users served and time per output token.

The model, per GPU of one tensor-parallel replica of ``tp`` GPUs:

* KV budget = usable fraction × GPU memory − weight bytes ÷ tp.
* Concurrent sequences = budget ÷ (KV pool tokens one sequence holds × KV bytes per token per GPU),
  under a contiguous policy (each sequence reserves ahead) or paging (whole blocks as it grows).
* Decode step (one new token for each of ``batch`` sequences of ``context`` cached tokens)::

      memory_s  = (weight bytes per GPU + batch × context × KV bytes per token per GPU)
                  ÷ (datasheet bandwidth × bandwidth efficiency)
      compute_s = batch × (2 × params per GPU + attention FLOPs per context token per GPU × context)
                  ÷ (datasheet bf16 rate × compute efficiency)
      step_s    = max(memory_s, compute_s)          (a roofline: whichever binds)

  Decode reads every weight once per step whatever the batch, so a bigger batch is nearly free
  until the KV reads or the matmuls catch up: that is why memory waste caps throughput.
* Prefill of ``n`` prompt tokens: ``n × 2 × params + attention (causal, ≈ a n² / 2)`` FLOPs at
  the matmul rate, or the weight read if that is longer: the time to first token.
* Throughput = batch ÷ step_s tokens/s per replica; TPOT = step_s.

Limits named in ``binding_limit`` (first violated wins, else what sets the step time):
``"memory"`` (the KV budget caps the batch), ``"latency"`` (the TPOT target caps it),
``"bandwidth"`` or ``"compute"`` (what the step time is made of at the batch asked for).

Simplification, stated: every sequence in a batch is counted at its full length (the snapshot
view of the fragmentation explorer); live contexts are shorter on average, so the step time is an upper bound.

The roofline above is the fallback. Given a :class:`planner.timing.StepTiming` (the step model of
:mod:`planner.step_model`, whenever the model has a config), every step time, the TPOT cap (by
bisection over the batch), the curve and the time to first token come from it instead; the
bytes, FLOPs and ``bound`` stay the roofline's description of what a step reads and computes, and
``timing_model`` says which model produced the times.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from planner.bandwidth import BandwidthEstimate
from planner.timing import StepTiming, TimingModel, largest_batch_within
from sizing.kv import DEFAULT_USABLE_FRACTION
from sizing.plan import GPUS_PER_NODE  # an HGX/DGX node: the unit GPUs are bought and wired in

BindingLimit = Literal["memory", "latency", "bandwidth", "compute"]
StepBound = Literal["bandwidth", "compute"]

# FLOPs per parameter per token in a forward pass: one multiply and one add per weight.
FLOPS_PER_PARAM_PER_TOKEN = 2
# The PagedAttention paper's claim to check the user's numbers against (Kwon et al., 2023).
PAPER_THROUGHPUT_GAIN = (2.0, 4.0)
# Batch sizes above this are not plotted: no engine schedules more sequences per replica.
MAX_PLOTTED_BATCH = 8192


@dataclass(frozen=True, kw_only=True)
class ModelCost:
    """The bytes and FLOPs one model costs per GPU at one tensor-parallel degree.

    Attributes
    ----------
    name : for labels.
    weight_bytes : all weights of the model, bytes.
    params : parameters a token passes through (active parameters for a mixture of experts).
    kv_bytes_per_token : KV cache of one token, whole model, bytes.
    kv_bytes_per_token_per_gpu : the same on one GPU at ``tp`` (heads split, or replicated).
    attention_flops_per_context_token_per_gpu : FLOPs one new token spends per cached token on
        one GPU: 4 × layers × query heads per GPU × head dim (QKᵀ and PV, 2 FLOPs a multiply-add).
    tp : tensor-parallel degree (GPUs per replica).
    """

    name: str
    weight_bytes: float
    params: float
    kv_bytes_per_token: float
    kv_bytes_per_token_per_gpu: float
    attention_flops_per_context_token_per_gpu: float = 0.0
    tp: int = 1

    def __post_init__(self) -> None:
        if not (isinstance(self.tp, int) and self.tp >= 1):
            raise ValueError(f"tp must be a positive integer, got {self.tp!r}")
        for field in ("weight_bytes", "params", "kv_bytes_per_token",
                      "kv_bytes_per_token_per_gpu", "attention_flops_per_context_token_per_gpu"):
            check_non_negative(field, getattr(self, field))
        check_positive("kv_bytes_per_token_per_gpu", self.kv_bytes_per_token_per_gpu)

    @property
    def weight_bytes_per_gpu(self) -> float:
        """Weights are sharded evenly across the replica's GPUs (bytes)."""
        return self.weight_bytes / self.tp

    @property
    def params_per_gpu(self) -> float:
        return self.params / self.tp


@dataclass(frozen=True, kw_only=True)
class GpuSpec:
    """Datasheet figures of one GPU: memory in bytes (vendor GB × 10⁹), rates per second."""

    name: str
    memory_bytes: float
    bandwidth_bytes_per_s: float
    bf16_flops_per_s: float

    def __post_init__(self) -> None:
        for field in ("memory_bytes", "bandwidth_bytes_per_s", "bf16_flops_per_s"):
            check_positive(field, getattr(self, field))


@dataclass(frozen=True, kw_only=True)
class DecodeStep:
    """One decode step of ``batch`` sequences of ``context`` tokens, on one GPU of the replica."""

    batch: int
    context: float
    bytes_read: float  # weights per GPU + KV per GPU, bytes
    flops: float  # per GPU
    memory_s: float  # the roofline's read time
    compute_s: float  # the roofline's matmul time
    modelled_s: float | None = None  # the step model's time; None: the roofline times the step
    words: str = ""  # the step model's sentence of what the time is made of

    @property
    def step_s(self) -> float:
        """Time per output token (TPOT), seconds: the step model's when it timed the step."""
        return max(self.memory_s, self.compute_s) if self.modelled_s is None else self.modelled_s

    @property
    def timing_model(self) -> TimingModel:
        """Which model produced ``step_s``."""
        return "roofline" if self.modelled_s is None else "step model"

    @property
    def bound(self) -> StepBound:
        """Whether the step's bytes or its FLOPs take longer at the roofline's rates."""
        return "bandwidth" if self.memory_s >= self.compute_s else "compute"

    @property
    def tokens_per_s(self) -> float:
        """Output tokens per second of the whole replica (one per sequence per step)."""
        return self.batch / self.step_s


@dataclass(frozen=True, kw_only=True)
class AllocatorFit:
    """How many sequences one allocator fits in a replica's KV budget (from ``simulation/``).

    Attributes
    ----------
    allocator : ``"contiguous-max"``, ``"contiguous-pow2"``, ``"contiguous-oracle"`` or ``"paged"``.
    label : words for the page, e.g. "paged, 16-token blocks".
    sequences : concurrent sequences admitted (≥ 0).
    utilisation : share of the allocated KV memory holding real tokens (0–1).
    """

    allocator: str
    label: str
    sequences: int
    utilisation: float

    def __post_init__(self) -> None:
        if not (isinstance(self.sequences, (int, np.integer)) and self.sequences >= 0):
            raise ValueError(f"{self.allocator}: sequences must be an integer ≥ 0")
        if not 0 <= self.utilisation <= 1:
            raise ValueError(f"{self.allocator}: utilisation must be in [0, 1]")


@dataclass(frozen=True, kw_only=True)
class AllocatorPlan:
    """The operating point of one allocator: the largest batch memory and the TPOT target allow."""

    fit: AllocatorFit
    memory_batch: int  # sequences that fit in the KV budget
    latency_batch: int | None  # largest batch meeting the TPOT target; None without a target
    step: DecodeStep | None  # at ``batch``; None when not even one sequence can run
    tp: int
    binding_limit: BindingLimit
    explanation: str

    @property
    def batch(self) -> int:
        if self.latency_batch is None:
            return self.memory_batch
        return min(self.memory_batch, self.latency_batch)

    @property
    def tokens_per_s(self) -> float:
        """Output tokens per second of one replica at the operating batch."""
        return 0.0 if self.step is None else self.step.tokens_per_s

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.tokens_per_s / self.tp

    @property
    def users_per_gpu(self) -> float:
        """Concurrent sequences per GPU (a replica's batch spread over its ``tp`` GPUs)."""
        return self.batch / self.tp

    @property
    def users_per_node(self) -> float:
        """Concurrent sequences per node of ``GPUS_PER_NODE`` GPUs: whole replicas when they fit."""
        if self.tp <= GPUS_PER_NODE:
            return self.batch * (GPUS_PER_NODE // self.tp)
        return self.batch * GPUS_PER_NODE / self.tp


@dataclass(frozen=True, kw_only=True)
class CurvePoint:
    """Throughput and TPOT at one batch size, and whether each allocator can hold that batch."""

    batch: int
    tpot_s: float
    tokens_per_s: float  # whole replica
    tokens_per_s_per_gpu: float  # the replica's rate ÷ its ``tp`` GPUs
    bound: StepBound
    fits_contiguous: bool
    fits_paged: bool
    timing_model: TimingModel = "roofline"


@dataclass(frozen=True, kw_only=True)
class CapacityPlan:
    """Everything the planner page and ``python -m planner`` show."""

    model: ModelCost
    gpu: GpuSpec
    estimate: BandwidthEstimate
    usable_fraction: float
    kv_budget_bytes_per_gpu: float  # ≤ 0 when the weights alone do not fit
    context: float  # mean tokens per sequence used for the KV read
    tpot_target_s: float | None
    ttft_s: float  # prefill of the mean prompt
    ttft_target_s: float | None
    contiguous: AllocatorPlan
    paged: AllocatorPlan
    curve: tuple[CurvePoint, ...]
    required_concurrency: float | None  # Little's law at the arrival rate; None without a rate
    arrival_rate_per_s: float | None
    timing_model: TimingModel = "roofline"
    timing_label: str = ""  # what produced the step times, in words

    @property
    def kv_budget_tokens_per_gpu(self) -> float:
        return max(self.kv_budget_bytes_per_gpu, 0.0) / self.model.kv_bytes_per_token_per_gpu

    @property
    def paged_gain(self) -> float | None:
        """Paged ÷ contiguous throughput at their operating points; None if contiguous serves none."""
        if self.contiguous.tokens_per_s <= 0:
            return None
        return self.paged.tokens_per_s / self.contiguous.tokens_per_s

    @property
    def replicas_needed(self) -> int | None:
        """Replicas of the paged plan the arrival rate needs (Little's law), None without a rate."""
        if self.required_concurrency is None or self.paged.batch <= 0:
            return None
        return max(1, math.ceil(self.required_concurrency / self.paged.batch))

    @property
    def gpus_needed(self) -> int | None:
        replicas = self.replicas_needed
        return None if replicas is None else replicas * self.model.tp

    def replicas_for(self, users: int) -> int | None:
        """Paged replicas that hold ``users`` concurrent sequences (None: one holds none)."""
        check_non_negative("users", users)
        return math.ceil(users / self.paged.batch) if self.paged.batch > 0 else None

    def paper_check(self) -> str:
        """The PagedAttention paper's "2–4× throughput", checked against these numbers, in words."""
        gain = self.paged_gain
        if gain is None:
            return ("Contiguous allocation cannot hold one sequence here, so paging's gain is "
                    "unbounded; the paper's 2–4× compares systems that both run.")
        low, high = PAPER_THROUGHPUT_GAIN
        verdict = ("within" if low <= gain <= high else "below" if gain < low else "above")
        return (f"Paging serves {gain:.2f}× the tokens/s of {self.contiguous.fit.label} here, "
                f"{verdict} the paper's {low:g}–{high:g}× (measured there against FasterTransformer "
                "and Orca at equal latency).")


# ---------------------------------------------------------------------------------------------
# The equations
# ---------------------------------------------------------------------------------------------


def kv_budget_bytes_per_gpu(model: ModelCost, gpu: GpuSpec, usable_fraction: float) -> float:
    """Usable memory minus this GPU's share of the weights (bytes; negative if they do not fit)."""
    _check_fraction("usable_fraction", usable_fraction)
    return usable_fraction * gpu.memory_bytes - model.weight_bytes_per_gpu


def effective_bandwidth(gpu: GpuSpec, estimate: BandwidthEstimate) -> float:
    """Bytes per second a decode step reads at: datasheet × the source's efficiency."""
    return gpu.bandwidth_bytes_per_s * estimate.bandwidth_efficiency


def effective_flops(gpu: GpuSpec, estimate: BandwidthEstimate) -> float:
    """bf16 FLOP/s the matmuls reach: datasheet × the source's efficiency."""
    return gpu.bf16_flops_per_s * estimate.compute_efficiency


def decode_step(model: ModelCost, gpu: GpuSpec, estimate: BandwidthEstimate, *,
                batch: int, context: float, timing: StepTiming | None = None) -> DecodeStep:
    """Time of one decode step on one GPU of the replica (see the module docstring); with
    ``timing``, its step time and sentence beside the roofline's bytes and FLOPs."""
    if not (isinstance(batch, (int, np.integer)) and batch >= 1):
        raise ValueError(f"batch must be a positive integer, got {batch!r}")
    check_non_negative("context", context)
    bytes_read = model.weight_bytes_per_gpu + batch * context * model.kv_bytes_per_token_per_gpu
    flops = batch * _flops_per_sequence(model, context)
    return DecodeStep(
        batch=int(batch), context=context, bytes_read=bytes_read, flops=flops,
        memory_s=bytes_read / effective_bandwidth(gpu, estimate),
        compute_s=flops / effective_flops(gpu, estimate),
        modelled_s=None if timing is None else timing.step_s(int(batch), context),
        words="" if timing is None else timing.describe(int(batch), context),
    )


def prefill_seconds(model: ModelCost, gpu: GpuSpec, estimate: BandwidthEstimate, *,
                    prompt_tokens: float) -> float:
    """Time to prefill one prompt of ``prompt_tokens`` (seconds): causal attention, matmul rate.

    Attention over a causal prompt of n tokens sees on average n / 2 earlier tokens, hence the
    n² / 2. A short prompt is still bounded below by reading the weights once.
    """
    check_non_negative("prompt_tokens", prompt_tokens)
    flops = (prompt_tokens * FLOPS_PER_PARAM_PER_TOKEN * model.params_per_gpu
             + model.attention_flops_per_context_token_per_gpu * prompt_tokens**2 / 2)
    compute_s = flops / effective_flops(gpu, estimate)
    weights_s = model.weight_bytes_per_gpu / effective_bandwidth(gpu, estimate)
    return max(compute_s, weights_s)


def spare_bytes_within(model: ModelCost, gpu: GpuSpec, estimate: BandwidthEstimate,
                       seconds: float) -> float:
    """KV bytes one GPU can read in ``seconds`` after reading its share of the weights once."""
    return seconds * effective_bandwidth(gpu, estimate) - model.weight_bytes_per_gpu


def largest_batch_within_tpot(model: ModelCost, gpu: GpuSpec, estimate: BandwidthEstimate, *,
                              context: float, tpot_s: float, timing: StepTiming | None = None) -> int:
    """The largest batch whose decode step takes at most ``tpot_s`` seconds (0 if none does).

    With ``timing``, by bisection over its step time (:func:`planner.timing.largest_batch_within`).
    The roofline's times are linear in the batch, so each gives a bound in closed form::

        memory:  B ≤ (tpot × bandwidth − weight bytes) ÷ (context × KV bytes per token)
        compute: B ≤ tpot × FLOP/s ÷ FLOPs per sequence
    """
    if not (tpot_s > 0 and math.isfinite(tpot_s)):
        raise ValueError(f"tpot_s must be a positive number, got {tpot_s!r}")
    if timing is not None:
        return largest_batch_within(lambda batch: timing.step_s(batch, context), tpot_s,
                                    high=MAX_PLOTTED_BATCH * 1024)
    kv_bytes = context * model.kv_bytes_per_token_per_gpu
    spare_bytes = spare_bytes_within(model, gpu, estimate, tpot_s)
    by_memory = math.inf if kv_bytes == 0 else spare_bytes / kv_bytes
    per_sequence_flops = _flops_per_sequence(model, context)
    by_compute = (math.inf if per_sequence_flops == 0
                  else tpot_s * effective_flops(gpu, estimate) / per_sequence_flops)
    bound = min(by_memory, by_compute)
    if bound < 1:
        return 0
    batch = int(min(bound, MAX_PLOTTED_BATCH * 1024))  # a cap far past any real schedule
    # The division may land a hair above an integer; step back if rounding let one too many in.
    while batch > 0 and decode_step(model, gpu, estimate, batch=batch, context=context).step_s > tpot_s:
        batch -= 1
    return batch


# ---------------------------------------------------------------------------------------------
# The plan
# ---------------------------------------------------------------------------------------------


def plan_capacity(model: ModelCost, gpu: GpuSpec, estimate: BandwidthEstimate, *,
                  contiguous: AllocatorFit, paged: AllocatorFit, context: float,
                  usable_fraction: float = DEFAULT_USABLE_FRACTION, prompt_tokens: float | None = None,
                  tpot_target_s: float | None = None, ttft_target_s: float | None = None,
                  arrival_rate_per_s: float | None = None,
                  mean_output_tokens: float | None = None,
                  kv_budget_bytes: float | None = None,
                  timing: StepTiming | None = None) -> CapacityPlan:
    """Contiguous and paged operating points, the throughput curve and the limits that bind.

    Parameters
    ----------
    contiguous, paged : sequences each allocator fits in one GPU's KV budget (the simulator's
        snapshot on the chosen traffic; ``planner.plan.allocator_fits``).
    context : mean tokens per sequence, for the KV bytes a decode step reads.
    usable_fraction : share of GPU memory for weights plus KV (0–1], the rest is headroom.
    prompt_tokens : mean prompt, for the time to first token; default: the mean sequence length.
    tpot_target_s, ttft_target_s : latency targets (seconds), or None for none.
    arrival_rate_per_s, mean_output_tokens : traffic, for the concurrency it needs (Little's law:
        concurrency = rate × (TTFT + output tokens × TPOT)).
    kv_budget_bytes : the KV budget of one GPU when known from the engine (vLLM's "Available KV
        cache memory"); default: usable fraction × memory − weights per GPU.
    timing : the step model that times every step and the prefill; default the roofline.
    """
    if tpot_target_s is not None and not (tpot_target_s > 0 and math.isfinite(tpot_target_s)):
        raise ValueError(f"tpot_target_s must be a positive number, got {tpot_target_s!r}")
    check_non_negative("context", context)
    if kv_budget_bytes is None:
        budget = kv_budget_bytes_per_gpu(model, gpu, usable_fraction)
    else:
        check_non_negative("kv_budget_bytes", kv_budget_bytes)
        budget = float(kv_budget_bytes)
    latency_batch = (None if tpot_target_s is None else
                     largest_batch_within_tpot(model, gpu, estimate, context=context,
                                               tpot_s=tpot_target_s, timing=timing))
    plans = {
        name: _allocator_plan(model, gpu, estimate, fit=fit, budget=budget,
                              context=context, latency_batch=latency_batch,
                              tpot_target_s=tpot_target_s, timing=timing)
        for name, fit in (("contiguous", contiguous), ("paged", paged))
    }
    prompt = context if prompt_tokens is None else prompt_tokens
    check_non_negative("prompt_tokens", prompt)
    ttft = (prefill_seconds(model, gpu, estimate, prompt_tokens=prompt) if timing is None
            else timing.prefill_s(prompt))
    concurrency = None
    if arrival_rate_per_s is not None:
        check_non_negative("arrival_rate_per_s", arrival_rate_per_s)
        outputs = context if mean_output_tokens is None else mean_output_tokens
        paged_step = plans["paged"].step
        tpot = paged_step.step_s if paged_step is not None else math.inf
        concurrency = arrival_rate_per_s * (ttft + outputs * tpot)
    return CapacityPlan(
        model=model, gpu=gpu, estimate=estimate, usable_fraction=usable_fraction,
        kv_budget_bytes_per_gpu=budget, context=context, tpot_target_s=tpot_target_s,
        ttft_s=ttft, ttft_target_s=ttft_target_s,
        contiguous=plans["contiguous"], paged=plans["paged"],
        curve=throughput_curve(model, gpu, estimate, context=context,
                               max_batch=max(plans["paged"].memory_batch, latency_batch or 0, 1),
                               contiguous_batch=plans["contiguous"].memory_batch,
                               paged_batch=plans["paged"].memory_batch, timing=timing),
        required_concurrency=concurrency, arrival_rate_per_s=arrival_rate_per_s,
        timing_model="roofline" if timing is None else "step model",
        timing_label=f"roofline: {estimate.label}" if timing is None else timing.label,
    )


def throughput_curve(model: ModelCost, gpu: GpuSpec, estimate: BandwidthEstimate, *,
                     context: float, max_batch: int, contiguous_batch: int,
                     paged_batch: int, timing: StepTiming | None = None) -> tuple[CurvePoint, ...]:
    """TPOT and tokens/s at batch 1, 2, 4, ... up to ``max_batch`` (and the operating points),
    timed by ``timing`` when given, else by the roofline."""
    top = min(max(max_batch, 1), MAX_PLOTTED_BATCH)
    batches = {2**k for k in range(int(math.log2(top)) + 1)} | {top}
    batches |= {b for b in (contiguous_batch, paged_batch) if 1 <= b <= top}
    points = []
    for batch in sorted(batches):
        step = decode_step(model, gpu, estimate, batch=batch, context=context, timing=timing)
        points.append(CurvePoint(batch=batch, tpot_s=step.step_s, tokens_per_s=step.tokens_per_s,
                                 tokens_per_s_per_gpu=step.tokens_per_s / model.tp,
                                 bound=step.bound, fits_contiguous=batch <= contiguous_batch,
                                 fits_paged=batch <= paged_batch, timing_model=step.timing_model))
    return tuple(points)


def binding_limit_at(model: ModelCost, gpu: GpuSpec, estimate: BandwidthEstimate, *, batch: int,
                     context: float, memory_batch: int, tpot_target_s: float | None = None,
                     timing: StepTiming | None = None) -> tuple[BindingLimit, str]:
    """What limits a replica running ``batch`` sequences: the first constraint broken, else
    what the step time is made of. Returns the limit and a sentence saying it."""
    step = decode_step(model, gpu, estimate, batch=batch, context=context, timing=timing)
    if batch > memory_batch:
        return "memory", (f"memory: {batch} sequences of {context:,.0f} tokens do not fit; the KV "
                          f"budget holds {memory_batch}.")
    if tpot_target_s is not None and step.step_s > tpot_target_s:
        return "latency", (f"latency target: a step takes {step.step_s * 1e3:.1f} ms, over the "
                           f"{tpot_target_s * 1e3:g} ms TPOT target.")
    return step.bound, _bound_sentence(model, step)


def _allocator_plan(model: ModelCost, gpu: GpuSpec, estimate: BandwidthEstimate, *,
                    fit: AllocatorFit, budget: float, context: float,
                    latency_batch: int | None, tpot_target_s: float | None,
                    timing: StepTiming | None) -> AllocatorPlan:
    memory_batch = int(fit.sequences) if budget > 0 else 0
    batch = memory_batch if latency_batch is None else min(memory_batch, latency_batch)
    step = (None if batch < 1 else
            decode_step(model, gpu, estimate, batch=batch, context=context, timing=timing))
    # The step model's batch-1 step says why a target is missed, only needed when it is.
    one_step_s = timing.step_s(1, context) if timing is not None and latency_batch == 0 else None
    limit, words = _operating_limit(model, fit=fit, budget=budget, memory_batch=memory_batch,
                                    latency_batch=latency_batch, step=step, tpot_target_s=tpot_target_s,
                                    one_step_s=one_step_s)
    return AllocatorPlan(fit=fit, memory_batch=memory_batch, latency_batch=latency_batch,
                         step=step, tp=model.tp, binding_limit=limit, explanation=words)


def _operating_limit(model: ModelCost, *, fit: AllocatorFit, budget: float, memory_batch: int,
                     latency_batch: int | None, step: DecodeStep | None, tpot_target_s: float | None,
                     one_step_s: float | None) -> tuple[BindingLimit, str]:
    if budget <= 0:
        return "memory", ("memory: the weights alone fill the usable memory of each GPU; "
                          "use more tensor parallelism, smaller weights or a bigger GPU.")
    if memory_batch == 0:
        return "memory", (f"memory: not one sequence fits the KV budget under {fit.label}.")
    if latency_batch is not None and latency_batch == 0:
        return "latency", (f"latency target: even one sequence misses the "
                           f"{tpot_target_s * 1e3:g} ms TPOT target, since "
                           + ("reading the weights alone takes longer." if one_step_s is None
                              else f"its step alone takes {one_step_s * 1e3:.2f} ms by the step model."))
    assert step is not None
    if latency_batch is not None and latency_batch < memory_batch:
        return "latency", (f"latency target: the {tpot_target_s * 1e3:g} ms TPOT target caps the "
                           f"batch at {latency_batch} while memory would hold {memory_batch}; "
                           f"at that batch the step is {_bound_sentence(model, step)}")
    return "memory", (f"memory: the KV budget holds {memory_batch} sequences under "
                      f"{fit.label} ({fit.utilisation:.0%} of it real tokens); "
                      f"at that batch the step is {_bound_sentence(model, step)}")


def _bound_sentence(model: ModelCost, step: DecodeStep) -> str:
    if step.modelled_s is not None:
        return step.words
    weight_share = model.weight_bytes_per_gpu / step.bytes_read if step.bytes_read else 0.0
    if step.bound == "bandwidth":
        return (f"bandwidth-bound: {step.bytes_read / 1e9:.2f} GB read per GPU per step "
                f"({weight_share:.0%} weights, {1 - weight_share:.0%} KV) in "
                f"{step.memory_s * 1e3:.2f} ms.")
    return (f"compute-bound: {step.flops / 1e12:.2f} TFLOP per GPU per step in "
            f"{step.compute_s * 1e3:.2f} ms (reading memory would take {step.memory_s * 1e3:.2f} ms).")


def _flops_per_sequence(model: ModelCost, context: float) -> float:
    return (FLOPS_PER_PARAM_PER_TOKEN * model.params_per_gpu
            + model.attention_flops_per_context_token_per_gpu * context)


def check_positive(name: str, value: float) -> None:
    """``ValueError`` naming ``name`` unless ``value`` is a finite number above 0."""
    check_non_negative(name, value)
    if value <= 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")


def check_non_negative(name: str, value: float) -> None:
    """``ValueError`` naming ``name`` unless ``value`` is a finite number ≥ 0."""
    if not (isinstance(value, (int, float, np.integer, np.floating)) and math.isfinite(value)
            and value >= 0):
        raise ValueError(f"{name} must be a finite number ≥ 0, got {value!r}")


def _check_fraction(name: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and 0 < value <= 1):
        raise ValueError(f"{name} must be in (0, 1], got {value!r}")

"""One replica of a cluster plan: the load, the cluster, and a layout's roofline figures.

A load is ``rate`` requests per second of ``prompt`` tokens in and ``output`` tokens out, with
optional TPOT and TTFT targets. A replica is one :class:`~planner.cluster.parallel.ParallelLayout`
(TP × PP × DP GPUs); its per-GPU weights, KV and users come from
:func:`~planner.cluster.parallel.parallel_memory`, each stage's KV budget from
:mod:`planner.cluster.budget` (vLLM's memory profile by default, the reference formula when the
spec says ``budget="formula"``), its times from the planner's roofline
(:func:`planner.capacity.decode_step`, :func:`planner.capacity.prefill_seconds`) on the heaviest
pipeline stage, per GPU::

    prefill   T_s = prefill_seconds(one stage, prompt)    latency PP × T_s; a DP rank takes a
                                                          new prompt every T_s
    decode    TPOT(n) = max(A + B·m, C·m),  m = max(n, PP)    n sequences per DP rank
              A = PP × stage weights ÷ bandwidth          the token's step reads every stage once
              B = context × KV per token ÷ bandwidth,  C = FLOPs per sequence ÷ FLOP/s

(``A``, ``B``, ``C`` are read off ``decode_step`` at batch 1 and 2, so the roofline keeps one home.
With PP the ``n`` sequences travel as PP micro-batches, one per stage; fewer than PP sequences
leave stages idle, hence ``m``. Stages hand activations on at no cost, so a PP replica's TPOT is
a lower bound.)

**Prefill queue.** Prompts arrive at random (Poisson) and each DP rank serves them one at a time
in ``T_s``: an M/D/1 queue whose mean wait at utilisation ``ρ`` is ``ρ·T_s ÷ (2 (1 − ρ))``
(Pollaczek–Khinchine with a fixed service time). With a TTFT target the wait must fit in the
slack ``s = target − PP × T_s − transfer``, so ``ρ ≤ 2s ÷ (T_s + 2s)``. The wait's percentiles
come from Erlang's M/D/1 waiting-time distribution (:func:`md1_wait_cdf`).

**Transfer.** One prompt's KV from a prefill to a decode replica is
:func:`planner.cluster.transfer.kv_transfer`'s, each PP stage shipping its own layers; its time is
the busier end's bytes over the link.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from decimal import Decimal, localcontext
from typing import Any, Literal

from hardware.gpus import GPU
from hardware.links import Link, check_nics, get_link
from inputs.errors import InputError, shown
from planner.bandwidth import BandwidthEstimate
from planner.capacity import (ModelCost, decode_step, effective_bandwidth, largest_batch_within_tpot,
                              prefill_seconds)
from planner.cluster.budget import Budget, check_budget, usable_for_stages
from planner.cluster.parallel import ParallelLayout, ParallelMemory, Term, parallel_memory
from planner.cluster.transfer import TransferTime, decode_staging, kv_transfer, transfer_time
from planner.plan import gpu_spec, model_cost
from sizing.engine.memory import ActivationShape
from sizing.engine.pipeline import stage_layer_counts
from sizing.kv import DEFAULT_BLOCK_SIZE, DEFAULT_USABLE_FRACTION, usable_bytes
from sizing.models import MAX_TOKENS, ModelShape, check_int
from sizing.plan import GPUS_PER_NODE
from sizing.precisions import Precision
from units import format_number

Limit = Literal["memory", "tpot_target", "ttft_target", "bandwidth", "compute", "transfer"]
Role = Literal["prefill", "decode", "aggregated"]
MAX_RATE = 1_000_000  # requests/s: far past any one deployment, rejects typos
MAX_TARGET_S = 10_000  # seconds: no latency target is hours

# Relative slack on float comparisons against a target: a count that meets it exactly must not
# fail on the last bit of a division.
TOLERANCE = 1e-12


def _positive(field: str, value: object, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not (0 < value <= high):
        raise InputError(field, f"must be a number above 0 and at most {high:,}, got {shown(value)}")
    return float(value)


@dataclass(frozen=True, kw_only=True)
class Load:
    """The traffic: ``rate`` requests/s, each ``prompt_tokens`` in and ``output_tokens`` out;
    targets in seconds (None: none). The TTFT target is on the mean (the M/D/1 mean wait)."""

    rate_per_s: float
    prompt_tokens: int
    output_tokens: int
    tpot_target_s: float | None = None
    ttft_target_s: float | None = None

    def __post_init__(self) -> None:
        _positive("rate", self.rate_per_s, MAX_RATE)
        check_int("prompt_tokens", self.prompt_tokens, high=MAX_TOKENS)
        check_int("output_tokens", self.output_tokens, high=MAX_TOKENS)
        if self.prompt_tokens + self.output_tokens > MAX_TOKENS:
            raise InputError("output_tokens", f"prompt + output exceeds {MAX_TOKENS:,} tokens")
        for field in ("tpot_target_s", "ttft_target_s"):
            if getattr(self, field) is not None:
                _positive(field, getattr(self, field), MAX_TARGET_S)

    @property
    def context(self) -> int:
        """Tokens a sequence holds when its last token is out."""
        return self.prompt_tokens + self.output_tokens


@dataclass(frozen=True, kw_only=True)
class ClusterSpec:
    """The model, the GPU type, the roofline's efficiencies and the link between the pools.

    ``budget`` picks each GPU's KV budget (:mod:`planner.cluster.budget`): ``"engine"``, vLLM's
    memory profile at ``usable_fraction`` as ``--gpu-memory-utilization``, with the model's
    ``activation`` widths (config.json; None: assumed from the attention shape, and labelled);
    ``"formula"``, the vendor's GB × ``usable_fraction`` − the weights.
    """

    model: ModelShape
    kv_precision: Precision
    weight_precision: Precision
    gpu: GPU
    estimate: BandwidthEstimate
    link: Link | str = "ib-ndr"
    nics: int = 1  # NICs one GPU's transfers stripe over (one rail per GPU: 1)
    usable_fraction: float = DEFAULT_USABLE_FRACTION
    block_size: int = DEFAULT_BLOCK_SIZE
    kv_buffer_device: str = "cuda"
    routed_params: int | None = None  # the routed experts' parameters (parallel.routed_expert_params)
    gpus_per_node: int = GPUS_PER_NODE
    budget: Budget = "engine"
    activation: ActivationShape | None = None

    def __post_init__(self) -> None:
        check_budget(self.budget)
        if self.activation is not None and not isinstance(self.activation, ActivationShape):
            raise InputError("activation", f"must be an ActivationShape or None, got {type(self.activation).__name__}")
        usable_bytes(self.gpu, self.usable_fraction)  # refuses a fraction outside (0, 1], naming it
        if not isinstance(self.link, Link):
            object.__setattr__(self, "link", get_link(self.link))
        check_nics(self.nics)
        check_int("gpus_per_node", self.gpus_per_node, high=1024)
        decode_staging(self.kv_buffer_device, 0)  # refuses an unknown device, naming it


# ---------------------------------------------------------------------------------------------
# The prefill queue (module docstring)
# ---------------------------------------------------------------------------------------------


def md1_wait_s(utilisation: float, service_s: float) -> float:
    """Mean wait of an M/D/1 queue: ``ρ·T ÷ (2 (1 − ρ))`` seconds (``ρ`` < 1)."""
    if not 0 <= utilisation < 1:
        raise ValueError(f"utilisation must be in [0, 1), got {utilisation!r}")
    return utilisation * service_s / (2 * (1 - utilisation))


# Waits past this many service times are not computed: the series' terms then need hundreds of
# digits (and a queue that full misses any target anyway).
MAX_WAIT_SERVICES = 1000
_GUARD_DIGITS = 30  # digits kept beyond the largest term's, for the alternating series


def _check_queue(utilisation: float, service_s: float) -> None:
    if not (isinstance(utilisation, int | float) and 0 <= utilisation < 1):
        raise ValueError(f"utilisation must be in [0, 1), got {utilisation!r}")
    if not (isinstance(service_s, int | float) and math.isfinite(service_s) and service_s > 0):
        raise ValueError(f"service_s must be a positive number of seconds, got {service_s!r}")


def _md1_cdf(rho: float, tau: float) -> float:
    """Erlang's series at ``τ = t ÷ D`` (see :func:`md1_wait_cdf`), in decimal arithmetic.

    Written ``e^{ρτ} Σ_ν (ρ(ν − τ) e^{−ρ})^ν ÷ ν!``: its terms reach ``e^{2ρτ}`` in size and
    alternate in sign while they cancel to at most 1, so the precision grows with ``ρτ``.
    """
    last = math.floor(tau)
    with localcontext() as ctx:
        ctx.prec = _GUARD_DIGITS + math.ceil(2 * rho * tau / math.log(10))
        r, t = Decimal(rho), Decimal(tau)
        shrink = (-r).exp()
        total, factorial = Decimal(1), Decimal(1)  # the ν = 0 term is 1
        for nu in range(1, last + 1):
            factorial *= nu
            total += (r * (nu - t) * shrink) ** nu / factorial
        value = (1 - r) * (r * t).exp() * total
    return min(1.0, max(0.0, float(value)))


def md1_wait_cdf(utilisation: float, service_s: float, wait_s: float) -> float:
    """P(W ≤ ``wait_s``) of an M/D/1 queue's wait (FCFS, service ``D`` = ``service_s``, ``ρ`` < 1).

    Erlang's waiting-time distribution, with ``τ = t ÷ D``::

        P(W ≤ t) = (1 − ρ) Σ_{ν=0}^{⌊τ⌋} (ρ(ν − τ))^ν ÷ ν! × e^{−ρ(ν − τ)}

    A. K. Erlang, "The theory of probabilities and telephone conversations", Nyt Tidsskrift for
    Matematik B 20 (1909) 33–39; the c = 1 case of G. J. Franx, "A simple solution for the M/D/c
    waiting time distribution", Operations Research Letters 29 (2001) 221–229. On ``[0, D)`` it is
    ``(1 − ρ) e^{λt}``; ``P(W = 0) = 1 − ρ``; its mean is Pollaczek–Khinchine's ``ρD ÷ 2(1 − ρ)``.
    """
    _check_queue(utilisation, service_s)
    if not (isinstance(wait_s, int | float) and wait_s >= 0):
        raise ValueError(f"wait_s must be a number of seconds >= 0, got {wait_s!r}")
    tau = wait_s / service_s
    if tau > MAX_WAIT_SERVICES:
        raise ValueError(f"waits past {MAX_WAIT_SERVICES:,} service times are not computed")
    return _md1_cdf(float(utilisation), tau)


def _decay_rate(rho: float) -> float:
    """θ (per service time) with ρ (e^θ − 1) = θ: Kingman's bound P(W > τD) ≤ e^{−θτ} for an M/D/1
    queue (J. F. C. Kingman, "A martingale inequality in the theory of queues", Proc. Cambridge
    Philos. Soc. 60 (1964) 359–361), used only to bracket a percentile."""
    def excess(theta: float) -> float:
        return rho * math.expm1(theta) - theta

    low, high = 0.0, 1.0
    while excess(high) <= 0:
        high *= 2
    for _ in range(200):
        middle = (low + high) / 2
        if middle in (low, high):
            break
        low, high = (middle, high) if excess(middle) <= 0 else (low, middle)
    return low


def md1_wait_quantile_s(utilisation: float, service_s: float, quantile: float) -> float | None:
    """The ``quantile`` (0–1) of an M/D/1 queue's wait, seconds (:func:`md1_wait_cdf` inverted);
    0 when ``quantile ≤ 1 − ρ`` (that share never waits); None past ``MAX_WAIT_SERVICES``
    service times."""
    _check_queue(utilisation, service_s)
    if not (isinstance(quantile, int | float) and 0 < quantile < 1):
        raise ValueError(f"quantile must be in (0, 1), got {quantile!r}")
    rho = float(utilisation)
    if quantile <= 1 - rho:
        return 0.0
    high = min(float(MAX_WAIT_SERVICES), math.log(1 / (1 - quantile)) / _decay_rate(rho))
    if _md1_cdf(rho, high) < quantile:
        return None
    # The whole service times first (the series has ⌊τ⌋ + 1 terms), then the last one halved.
    whole_low, whole_high = 0, math.ceil(high)
    while whole_high - whole_low > 1:
        middle = (whole_low + whole_high) // 2
        whole_low, whole_high = (middle, whole_high) if _md1_cdf(rho, middle) < quantile else (whole_low, middle)
    return _illinois(lambda tau: _md1_cdf(rho, tau) - quantile, float(whole_low), min(float(whole_high), high)) * service_s


def _illinois(f, low: float, high: float) -> float:
    """The root of increasing ``f`` in ``[low, high]`` (``f(low) < 0 ≤ f(high)``): regula falsi
    with the Illinois halving, which converges superlinearly on a smooth piece like one service
    time of Erlang's series; returns the upper end of the last bracket."""
    f_low, f_high = f(low), f(high)
    side = 0
    for _ in range(100):
        if high - low <= 1e-12 * max(1.0, high) or f_high == 0:
            break
        x = high - f_high * (high - low) / (f_high - f_low)
        if not low < x < high:
            x = (low + high) / 2
        fx = f(x)
        if fx < 0:
            low, f_low = x, fx
            if side == -1:
                f_high /= 2
            side = -1
        else:
            high, f_high = x, fx
            if side == 1:
                f_low /= 2
            side = 1
    return high


def max_utilisation(slack_s: float, service_s: float) -> float:
    """The utilisation whose M/D/1 mean wait is ``slack_s``: ``2s ÷ (T + 2s)`` (0 without slack)."""
    if slack_s <= 0:
        return 0.0
    return 2 * slack_s / (service_s + 2 * slack_s)


# ---------------------------------------------------------------------------------------------
# One replica's roofline figures
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Replica:
    """One layout's roofline figures (module docstring); seconds, per DP rank where it says so."""

    layout: ParallelLayout
    memory: ParallelMemory  # at the context it was built for
    stage: ModelCost  # one GPU of the heaviest stage
    users_per_dp_rank: int  # whole sequences of the context the KV budget holds
    fixed_s: float  # A
    per_sequence_memory_s: float  # B
    per_sequence_compute_s: float  # C
    stage_prefill_s: float  # T_s
    prefill_bound: Literal["bandwidth", "compute"] = "compute"  # a prompt's matmuls, or its weight reads

    @property
    def gpus(self) -> int:
        return self.layout.gpus

    @property
    def prefill_latency_s(self) -> float:
        return self.layout.pp * self.stage_prefill_s

    def tpot_s(self, n: float) -> float:
        """The decode step with ``n`` sequences per DP rank, seconds."""
        m = max(n, self.layout.pp)
        return max(self.fixed_s + self.per_sequence_memory_s * m, self.per_sequence_compute_s * m)

    def bound(self, n: float) -> Limit:
        m = max(n, self.layout.pp)
        memory = self.fixed_s + self.per_sequence_memory_s * m
        return "bandwidth" if memory >= self.per_sequence_compute_s * m else "compute"

    def step_formula(self, n: float) -> str:
        """``"max(1.893 ms + 0.0197 ms × 10.78, 0.0194 ms × 10.78)"``."""
        m = max(n, self.layout.pp)
        floor = f" (at least PP {self.layout.pp} micro-batches)" if m > n else ""
        return (f"max({_f(self.fixed_s * 1e3, 3)} ms + {_f(self.per_sequence_memory_s * 1e3, 4)} ms × {_f(m)}, "
                f"{_f(self.per_sequence_compute_s * 1e3, 4)} ms × {_f(m)}){floor}")


def replica(spec: ClusterSpec, layout: ParallelLayout, *, context: int, prompt_tokens: int) -> Replica:
    """The roofline figures of ``layout`` for sequences of ``context`` tokens and prompts of
    ``prompt_tokens`` (refusals name the layout field, as :func:`parallel_memory` does)."""
    model, tp, pp = spec.model, layout.tp, layout.pp
    memory = parallel_memory(model, layout, kv_precision=spec.kv_precision, weight_precision=spec.weight_precision,
                             context=context, routed_params=spec.routed_params,
                             usable_bytes_per_gpu=usable_for_stages(spec, layout))
    share = max(stage_layer_counts(model.layers, pp)) / model.layers
    base = model_cost(model, kv_precision=spec.kv_precision, weight_precision=spec.weight_precision, tp=tp,
                      context=context)
    kv_per_token = max(s.kv_bytes_per_sequence_per_gpu for s in memory.stages) / context
    # ModelCost divides weights and parameters by TP; parallel_memory's per-GPU figures already
    # hold the TP, DP and EP split, so they go in multiplied back by TP.
    stage = replace(base, weight_bytes=float(memory.weight_bytes_per_gpu) * tp, params=base.params * share,
                    kv_bytes_per_token_per_gpu=float(kv_per_token) or base.kv_bytes_per_token_per_gpu,
                    attention_flops_per_context_token_per_gpu=base.attention_flops_per_context_token_per_gpu * share)
    gpu = gpu_spec(spec.gpu)
    one = decode_step(stage, gpu, spec.estimate, batch=1, context=context)
    two = decode_step(stage, gpu, spec.estimate, batch=2, context=context)
    per_sequence = two.memory_s - one.memory_s
    prefill_s = prefill_seconds(stage, gpu, spec.estimate, prompt_tokens=prompt_tokens)
    # prefill_seconds is max(matmuls, one read of the weights); which one it was names the bound.
    weights_s = stage.weight_bytes_per_gpu / effective_bandwidth(gpu, spec.estimate)
    return Replica(layout=layout, memory=memory, stage=stage, users_per_dp_rank=memory.users_per_dp_rank or 0,
                   fixed_s=pp * (one.memory_s - per_sequence), per_sequence_memory_s=per_sequence,
                   per_sequence_compute_s=one.compute_s,
                   stage_prefill_s=prefill_s, prefill_bound="bandwidth" if prefill_s <= weights_s else "compute")


def budget_term(rep: Replica) -> Term | None:
    """The KV budget per GPU of the stage holding the fewest sequences, its formula naming the rule
    (:mod:`planner.cluster.budget`); None without a budget."""
    stages = [s for s in rep.memory.stages if s.concurrency is not None]
    if not stages:
        return None
    stage = min(stages, key=lambda s: s.concurrency)
    term = next((t for t in stage.terms if t.name == "KV budget per GPU"), None)
    if term is None or rep.layout.pp == 1:
        return term
    return replace(term, name=f"KV budget per GPU (stage {stage.stage}, the fewest sequences)")


def role_replica(spec: ClusterSpec, layout: ParallelLayout, role: Role, *, context: int,
                 prompt_tokens: int) -> Replica:
    """:func:`replica`, with a refusal's field named for the role (``"decode_tp"``), so a page or
    the CLI can point at the layout that is wrong."""
    try:
        return replica(spec, layout, context=context, prompt_tokens=prompt_tokens)
    except InputError as exc:
        if exc.field in _LAYOUT_FIELDS:
            raise InputError(f"{role}_{exc.field}", f"{role} layout: {exc.message}") from None
        raise


_LAYOUT_FIELDS = frozenset({"tp", "pp", "dp", "ep", "dcp", "pp_layer_partition", "router_imbalance"})


def fitting_layout(spec: ClusterSpec, load: Load, role: Role, *, max_pp: int = 4) -> ParallelLayout:
    """The smallest layout that holds one of ``role``'s sequences (a prefill GPU one prompt, a
    decode or aggregated GPU one prompt plus its output): TP over the degrees the model accepts
    up to one node, then, at a node's TP, pipeline stages up to ``max_pp``, as an engine user
    would try them. A TP that cannot hold the weights is never the answer when a larger one does;
    where none does, the node's TP (the pools then say what does not fit)."""
    model = spec.model
    context = load.prompt_tokens if role == "prefill" else load.context
    tps = [tp for tp in range(1, spec.gpus_per_node + 1) if model.q_heads % tp == 0 and accepts_tp(model, tp)]
    tried = [ParallelLayout(tp=tp) for tp in tps]
    tried += [ParallelLayout(tp=tps[-1], pp=pp) for pp in range(2, min(max_pp, model.layers) + 1)] if tps else []
    for layout in tried:
        if replica(spec, layout, context=context, prompt_tokens=load.prompt_tokens).users_per_dp_rank >= 1:
            return layout
    return tried[-1] if tried else ParallelLayout()


def accepts_tp(model: ModelShape, tp: int) -> bool:
    """Whether the engine shards ``model`` over ``tp`` ranks (its KV-head and MLA rules, :meth:`ModelShape.check_tp`)."""
    try:
        model.check_tp(tp)
    except InputError:
        return False
    return True


def tpot_batch_cap(spec: ClusterSpec, rep: Replica, *, context: int, tpot_s: float) -> int:
    """The largest batch per DP rank whose step meets ``tpot_s`` (its PP micro-batches together)."""
    pipeline = replace(rep.stage, weight_bytes=rep.stage.weight_bytes * rep.layout.pp)
    cap = largest_batch_within_tpot(pipeline, gpu_spec(spec.gpu), spec.estimate, context=context, tpot_s=tpot_s)
    # Fewer sequences than stages still pay PP micro-batch slots (Replica.tpot_s).
    return cap if cap >= rep.layout.pp or rep.tpot_s(cap) <= tpot_s * (1 + TOLERANCE) else 0


def batch_cap(spec: ClusterSpec, rep: Replica, load: Load) -> int:
    """Sequences per DP rank: the KV capacity, and the TPOT target's batch when there is one."""
    cap = rep.users_per_dp_rank
    if load.tpot_target_s is not None and cap > 0:
        cap = min(cap, tpot_batch_cap(spec, rep, context=load.context, tpot_s=load.tpot_target_s))
    return cap


@dataclass(frozen=True, kw_only=True)
class TransferLeg:
    """The KV of one request between a prefill and a decode replica, per rank, bytes."""

    received_per_decode_rank: int
    sent_per_prefill_rank: int
    time: TransferTime


def transfer_leg(spec: ClusterSpec, prefill: ParallelLayout, decode: ParallelLayout, prompt_tokens: int) -> TransferLeg:
    """Bytes and time of one prompt's KV (:func:`kv_transfer`); a PP stage ships its layers only
    (its share of them, the heaviest stage's); the time is the busier end's bytes over the link."""
    layers = spec.model.layers
    t = kv_transfer(spec.model, spec.kv_precision, prompt_tokens=prompt_tokens, block_size=spec.block_size,
                    prefill_tp=prefill.tp, decode_tp=decode.tp)
    received = math.ceil(t.wire_bytes_per_decode_rank * max(stage_layer_counts(layers, decode.pp)) / layers)
    sent = math.ceil(t.bytes_sent_per_prefill_rank * max(stage_layer_counts(layers, prefill.pp)) / layers)
    return TransferLeg(received_per_decode_rank=received, sent_per_prefill_rank=sent,
                       time=transfer_time(max(received, sent), spec.link, nics=spec.nics))


def layout_record(layout: ParallelLayout | None) -> dict[str, Any] | None:
    if layout is None:
        return None
    return {"tp": layout.tp, "pp": layout.pp, "dp": layout.dp, "ep": layout.expert_parallel,
            "dcp": layout.dcp, "gpus": layout.gpus}


def term_record(term: Term) -> dict[str, Any]:
    return {"name": term.name, "value": float(term.value), "unit": term.unit, "formula": term.formula,
            "text": term.text}


def _f(value: float, digits: int = 2) -> str:
    return format_number(value, digits)


__all__ = ["MAX_RATE", "MAX_TARGET_S", "MAX_WAIT_SERVICES", "TOLERANCE", "ClusterSpec", "Limit", "Load", "Replica", "Role",
           "accepts_tp", "budget_term", "fitting_layout", "TransferLeg", "batch_cap", "layout_record", "max_utilisation",
           "md1_wait_cdf", "md1_wait_quantile_s", "md1_wait_s", "replica", "role_replica", "term_record", "tpot_batch_cap",
           "transfer_leg"]

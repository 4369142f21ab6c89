"""Disaggregated prefill/decode pools and the aggregated deployment for one load, side by side.

Each replica's figures (``T_s``, ``TPOT(n)``, the prefill queue, the KV transfer) are
:mod:`planner.cluster.replica`'s.

**Disaggregated.** Prefill replicas = ⌈rate × T_s ÷ (DP × ρ_max)⌉, ``ρ_max`` the largest
utilisation whose mean M/D/1 wait fits the TTFT target (1 without one: sized to throughput), more
if the link cannot carry the KV they send; TTFT = PP × T_s + the KV transfer over the chosen link
+ the queue's mean wait (queueing-free without a target). Decode replicas: the fewest whose DP
ranks each hold their share of the concurrent sequences, which Little's law gives as
``rate × output × TPOT``, within the KV capacity (users per DP rank at prompt + output tokens)
and the TPOT target — at most the largest batch whose step meets the TPOT
(:func:`planner.capacity.largest_batch_within_tpot`) — and whose links carry the KV they receive.
The decode side stages nothing on the GPU; with ``kv_buffer_device="cpu"`` each GPU has a host
copy of its KV cache (:func:`planner.cluster.transfer.decode_staging`).

**Aggregated.** Each replica both prefills and decodes: of every second it spends
``u = (rate ÷ replicas) × T_s ÷ DP`` prefilling, and its decode steps stretch to
``TPOT(n) ÷ (1 − u)`` on average. TTFT = PP × T_s + the queue's mean wait at ``u`` (with a TTFT
target; no transfer).

**TTFT percentiles.** Where the TTFT includes the queue (a TTFT target), its p90 and p99 add the
same prefill (and transfer) to the wait's percentiles from Erlang's M/D/1 waiting-time
distribution (:func:`planner.cluster.replica.md1_wait_quantile_s`) at the same utilisation.

With ``r`` requests/s per replica, Little's law makes each DP rank decode ``n = k × TPOT(n)``
sequences, ``k = r × output ÷ (DP × (1 − u))``; while ``n ≥ PP`` the roofline's lines give the
fixed point ``n = k·A ÷ (1 − k·B)`` for ``k·B < 1`` and ``k·C ≤ 1`` (past either the replica is
saturated). The fewest replicas for which that ``n`` fits the KV and meets the targets is the
answer; what stops one replica fewer is the binding limit (``memory``, ``tpot_target``,
``ttft_target``, ``bandwidth`` or ``compute``: the step saturated; ``transfer``: the link). A
deployment no replica count serves names its limit with ``feasible`` False.

Simplifications, stated: every decoding sequence is counted at its full prompt + output length
(an upper bound on its KV, as :mod:`planner.capacity` does); prefill steps stretch decode steps
on average, not in bursts; requests are spread over replicas at random; the aggregated TTFT
leaves out the decode steps a prompt waits behind.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any, Literal

from planner.cluster.parallel import ParallelLayout, Term
from planner.cluster.replica import (
    TOLERANCE, ClusterSpec, Limit, Load, Replica, Role, TransferLeg, batch_cap, budget_term, layout_record,
    max_utilisation, md1_wait_quantile_s, md1_wait_s, role_replica, term_record, transfer_leg,
)
from planner.cluster.transfer import StagingNeed, TransferTime, decode_staging
from sizing.plan import GPUS_PER_NODE
from units import format_number

MAX_REPLICAS = 1 << 20  # past this the load is no deployment's; the search stops
TTFT_QUANTILES = (0.9, 0.99)  # the TTFT percentiles a queueing plan reports

# ---------------------------------------------------------------------------------------------
# The pools
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Pool:
    """The replicas of one role. ``replicas`` is None when no count serves the load."""

    role: Role
    layout: ParallelLayout
    replicas: int | None
    binding_limit: Limit
    explanation: str
    terms: tuple[Term, ...]
    sequences_per_dp_rank: float = 0.0  # decoding sequences each DP rank holds (Little's law)
    batch_cap_per_dp_rank: int = 0  # sequences a DP rank may hold (KV and TPOT target)

    @property
    def gpus_per_replica(self) -> int:
        return self.layout.gpus

    @property
    def gpus(self) -> int | None:
        return None if self.replicas is None else self.replicas * self.layout.gpus


@dataclass(frozen=True)
class DecodeFit:
    """Whether a replica count serves the load; ``why``: the limit it meets (or its step's bound)."""

    ok: bool
    n: float = 0.0  # sequences per DP rank
    tpot_s: float = 0.0
    why: Limit = "memory"
    ttft_s: float = 0.0  # aggregated only: PP × T_s + the prefill queue's wait


def _sequences(rep: Replica, k: float) -> tuple[float | None, Limit]:
    """The fixed point ``n = k × TPOT(n)`` (module docstring), or None and what saturates."""
    pp = rep.layout.pp
    below = k * rep.tpot_s(pp)  # TPOT is flat up to PP sequences
    if below <= pp:
        return below, "bandwidth"
    if k * rep.per_sequence_memory_s >= 1:
        return None, "bandwidth"
    if k * rep.per_sequence_compute_s > 1:
        return None, "compute"
    return k * rep.fixed_s / (1 - k * rep.per_sequence_memory_s), "bandwidth"


def decode_fit(rep: Replica, load: Load, replicas: int, busy_per_request_s: float, cap: int) -> DecodeFit:
    """Whether ``replicas`` serve the load, each DP rank holding at most ``cap`` sequences, each
    replica prefilling for ``busy_per_request_s`` of its time per request (0: a decode pool, whose
    TTFT is not its own)."""
    r = load.rate_per_s / replicas
    u = r * busy_per_request_s
    if u >= 1:
        return DecodeFit(False, why="compute")  # prefills alone fill every second
    k = r * load.output_tokens / (rep.layout.dp * (1 - u))
    n, saturated = _sequences(rep, k)
    if n is None:
        return DecodeFit(False, why=saturated)
    tpot = rep.tpot_s(n) / (1 - u)
    ttft = rep.prefill_latency_s + md1_wait_s(u, rep.stage_prefill_s) if busy_per_request_s else 0.0
    if n > cap:
        return DecodeFit(False, n, tpot, "memory" if cap == rep.users_per_dp_rank else "tpot_target", ttft)
    if load.tpot_target_s is not None and tpot > load.tpot_target_s * (1 + TOLERANCE):
        return DecodeFit(False, n, tpot, "tpot_target", ttft)
    if busy_per_request_s and load.ttft_target_s is not None and ttft > load.ttft_target_s * (1 + TOLERANCE):
        return DecodeFit(False, n, tpot, "ttft_target", ttft)
    return DecodeFit(True, n, tpot, rep.bound(n), ttft)


def fewest_replicas(rep: Replica, load: Load, busy_per_request_s: float, cap: int) -> tuple[int | None, DecodeFit]:
    """The fewest replicas that serve the load (feasibility only grows with the count) with their
    fit, whose ``why`` is what stops one replica fewer (one replica: what its step is made of)."""
    if cap < 1:
        return None, DecodeFit(False, why="memory" if rep.users_per_dp_rank < 1 else "tpot_target")
    low = math.floor(load.rate_per_s * busy_per_request_s) + 1  # fewer are busy prefilling all the time
    high = low
    while not (fit := decode_fit(rep, load, high, busy_per_request_s, cap)).ok:
        if high >= MAX_REPLICAS:
            return None, fit
        low, high = high + 1, min(2 * high, MAX_REPLICAS)
    while low < high:  # the fewest feasible count in [low, high]
        mid = (low + high) // 2
        if decode_fit(rep, load, mid, busy_per_request_s, cap).ok:
            high = mid
        else:
            low = mid + 1
    fit = decode_fit(rep, load, high, busy_per_request_s, cap)
    if high > 1:
        fit = replace(fit, why=decode_fit(rep, load, high - 1, busy_per_request_s, cap).why)
    return high, fit


def _ms(seconds: float) -> Fraction:
    return Fraction(seconds * 1000)


def _t(name: str, value: float, unit: str, formula: str) -> Term:
    return Term(name=name, value=Fraction(value), unit=unit, formula=formula)


def _f(value: float, digits: int = 2) -> str:
    return format_number(value, digits)


def _budget(rep: Replica) -> tuple[Term, ...]:
    """The replica's KV budget per GPU, its formula naming the rule (engine profile or formula)."""
    term = budget_term(rep)
    return () if term is None else (term,)


def _decode_terms(rep: Replica, load: Load, replicas: int | None, fit: DecodeFit, cap: int, role: str,
                  busy: float) -> list[Term]:
    dp = rep.layout.dp
    terms = [
        *_budget(rep),
        _t("sequences per DP rank the KV holds", rep.users_per_dp_rank, "sequences",
           f"{load.context:,} tokens each (prompt {load.prompt_tokens:,} + output {load.output_tokens:,})"),
        _t("batch cap per DP rank", cap, "sequences",
           "min(KV capacity, largest batch within the TPOT target)" if load.tpot_target_s else "the KV capacity"),
    ]
    if replicas is None:
        return terms
    r = load.rate_per_s / replicas
    u = r * busy
    terms += [
        _t("decode step", _ms(rep.tpot_s(fit.n)), "ms", f"{rep.step_formula(fit.n)} at n = {_f(fit.n)}"),
        _t(f"{role} replicas", replicas, "replicas", "the fewest whose DP ranks hold the load within the cap"
           + (" and the TTFT target" if busy and load.ttft_target_s is not None else "")),
        _t("sequences per DP rank (Little's law)", fit.n, "sequences",
           f"{_f(r, 3)} requests/s per replica × {load.output_tokens:,} tokens × TPOT {_f(fit.tpot_s * 1e3)} ms "
           f"÷ DP {dp}"),
    ]
    if busy:
        terms.append(_t("share of each second spent prefilling", u, "share",
                        f"{_f(r, 3)} requests/s × {_f(busy * 1e3)} ms ÷ request"))
        terms.append(_t("TPOT with prefill stealing", _ms(fit.tpot_s), "ms",
                        f"{_f(rep.tpot_s(fit.n) * 1e3)} ms ÷ (1 − {_f(u, 3)} prefilling)"))
    return terms


def _explain(limit: Limit, role: str, replicas: int | None) -> str:
    if replicas is None:
        return {
            "memory": f"{role}: the weights leave no KV room for one sequence",
            "tpot_target": f"{role}: no batch meets the TPOT target, whatever the replica count",
            "ttft_target": f"{role}: the TTFT target is missed whatever the replica count",
            "bandwidth": f"{role}: no replica count keeps the decode step's memory reads from saturating",
            "compute": f"{role}: no replica count keeps the matmuls from saturating",
            "transfer": f"{role}: no replica count lets the link carry the KV",
        }[limit]
    if replicas == 1 and limit in ("bandwidth", "compute"):
        return f"{role}: one replica carries the load; its step is {limit}-bound"
    fewer = "one replica fewer" if replicas > 1 else "the load"
    return {
        "memory": f"{role}: the KV capacity per DP rank is what {fewer} would exceed",
        "tpot_target": f"{role}: the TPOT target is what {fewer} would miss",
        "ttft_target": f"{role}: the TTFT target (the prefill queue's mean wait) is what {fewer} would miss",
        "bandwidth": f"{role}: with {fewer} the decode step's memory reads would saturate the replicas",
        "compute": f"{role}: with {fewer} the matmuls would saturate the replicas",
        "transfer": f"{role}: the link carries the KV of no fewer replicas",
    }[limit]


def _decode_pool(spec: ClusterSpec, rep: Replica, load: Load, *, role: Role, busy: float,
                 link_replicas: int = 0) -> tuple[Pool, DecodeFit]:
    cap = batch_cap(spec, rep, load)
    if cap >= 1 and busy and load.ttft_target_s is not None and rep.prefill_latency_s > load.ttft_target_s:
        replicas, fit = None, DecodeFit(False, why="ttft_target")  # even an empty queue is too slow
    else:
        replicas, fit = fewest_replicas(rep, load, busy, cap)
    limit = fit.why
    if replicas is not None and link_replicas > replicas:
        replicas, limit = link_replicas, "transfer"
        fit = decode_fit(rep, load, replicas, busy, cap)
    terms = _decode_terms(rep, load, replicas, fit, cap, role, busy)
    return Pool(role=role, layout=rep.layout, replicas=replicas, binding_limit=limit,
                explanation=_explain(limit, role, replicas), terms=tuple(terms),
                sequences_per_dp_rank=fit.n if replicas is not None else 0.0, batch_cap_per_dp_rank=cap), fit


def _link_replicas(load: Load, dp: int, bytes_per_request_per_rank: int, link_bytes_per_s: int) -> int:
    """Replicas whose ranks' links carry ``rate × bytes`` between them: ⌈rate × bytes ÷ (DP × B/s)⌉."""
    return math.ceil(load.rate_per_s * bytes_per_request_per_rank / (dp * link_bytes_per_s))


def _ceil(x: float) -> int:
    """⌈x⌉, forgiving the last bits of a division that lands a hair above a whole number."""
    return math.ceil(x * (1 - TOLERANCE))


@dataclass(frozen=True, kw_only=True)
class PrefillSizing:
    """The prefill pool's count and its queue. ``replicas`` None: no count meets the TTFT target
    (or one prompt does not fit)."""

    replicas: int | None
    limit: Limit
    by_throughput: int  # ⌈rate × T_s ÷ DP⌉
    by_target: int  # ⌈rate × T_s ÷ (DP × ρ_max)⌉ (0 without a target)
    by_link: int
    max_utilisation: float  # ρ_max: 1 without a TTFT target
    utilisation: float  # ρ at ``replicas``
    wait_s: float  # the mean wait at ρ (0 without a target: queueing-free)


def size_prefill(rep: Replica, load: Load, *, transfer_s: float, by_link: int) -> PrefillSizing:
    """The fewest prefill replicas for ``load`` (module docstring: throughput, TTFT target, link)."""
    service, dp = rep.stage_prefill_s, rep.layout.dp
    throughput = _ceil(load.rate_per_s * service / dp)
    if rep.users_per_dp_rank < 1:
        return PrefillSizing(replicas=None, limit="memory", by_throughput=throughput, by_target=0, by_link=by_link,
                             max_utilisation=1.0, utilisation=0.0, wait_s=0.0)
    rho_max, by_target = 1.0, 0
    if load.ttft_target_s is not None:
        rho_max = max_utilisation(load.ttft_target_s - rep.prefill_latency_s - transfer_s, service)
        if rho_max <= 0:
            return PrefillSizing(replicas=None, limit="ttft_target", by_throughput=throughput, by_target=0,
                                 by_link=by_link, max_utilisation=0.0, utilisation=0.0, wait_s=0.0)
        by_target = _ceil(load.rate_per_s * service / (dp * rho_max))
    replicas = max(throughput, by_target, by_link, 1)
    limit: Limit = ("transfer" if by_link == replicas and by_link > max(throughput, by_target) else
                    "ttft_target" if by_target == replicas and by_target > throughput else rep.prefill_bound)
    rho = min(1.0, load.rate_per_s * service / (dp * replicas))
    wait = md1_wait_s(rho, service) if load.ttft_target_s is not None else 0.0
    return PrefillSizing(replicas=replicas, limit=limit, by_throughput=throughput, by_target=by_target,
                         by_link=by_link, max_utilisation=rho_max, utilisation=rho, wait_s=wait)


@dataclass(frozen=True, kw_only=True)
class Deployment:
    """One way to serve the load: its pools, latencies and throughput, each with its formula."""

    mode: Literal["disaggregated", "aggregated"]
    pools: tuple[Pool, ...]
    ttft_s: float
    tpot_s: float | None  # None: the decode side serves no count of replicas
    concurrency: float | None  # sequences decoding at once: rate × output × TPOT
    binding_limit: Limit
    explanation: str
    terms: tuple[Term, ...]
    feasible: bool
    ttft_includes_queueing: bool  # True with a TTFT target (the mean wait); else queueing-free
    transfer: TransferTime | None = None
    staging: StagingNeed | None = None  # per decode GPU
    prefill_staging: StagingNeed | None = None  # per prefill GPU
    output_tokens_per_s: float = 0.0
    # TTFT p90 / p99, seconds: with a TTFT target (the queue modelled); None otherwise, or past
    # the waits the M/D/1 series computes.
    ttft_p90_s: float | None = None
    ttft_p99_s: float | None = None

    @property
    def gpus(self) -> int | None:
        counts = [p.gpus for p in self.pools]
        return None if None in counts else sum(counts)

    @property
    def tokens_per_s_per_gpu(self) -> float | None:
        gpus = self.gpus
        return None if not gpus or not self.feasible else self.output_tokens_per_s / gpus

    def as_record(self, gpus_per_node: int = GPUS_PER_NODE) -> dict[str, Any]:
        """Plain JSON-ready values (floats, ints, strings, None), every term with its formula."""
        return {
            "mode": self.mode, "feasible": self.feasible, "gpus": self.gpus,
            "ttft_s": self.ttft_s, "ttft_includes_queueing": self.ttft_includes_queueing,
            "ttft_p90_s": self.ttft_p90_s, "ttft_p99_s": self.ttft_p99_s,
            "tpot_s": self.tpot_s, "concurrency": self.concurrency,
            "output_tokens_per_s": self.output_tokens_per_s, "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "binding_limit": self.binding_limit, "explanation": self.explanation,
            "pools": [_pool_record(p, gpus_per_node) for p in self.pools],
            "terms": [term_record(t) for t in self.terms],
            "transfer": None if self.transfer is None else {
                "bytes": self.transfer.bytes, "bandwidth_bytes_per_s": self.transfer.bandwidth_bytes_per_s,
                "seconds": float(self.transfer.seconds), "latency_published": self.transfer.latency_published},
            "staging_per_decode_gpu": _staging_record(self.staging),
            "staging_per_prefill_gpu": _staging_record(self.prefill_staging),
        }


def _pool_record(pool: Pool, gpus_per_node: int) -> dict[str, Any]:
    return {"role": pool.role, "layout": layout_record(pool.layout), "replicas": pool.replicas,
            "gpus_per_replica": pool.gpus_per_replica, "gpus": pool.gpus,
            "nodes": None if pool.replicas is None else nodes(pool.gpus_per_replica, pool.replicas, gpus_per_node),
            "binding_limit": pool.binding_limit, "explanation": pool.explanation,
            "sequences_per_dp_rank": pool.sequences_per_dp_rank, "batch_cap_per_dp_rank": pool.batch_cap_per_dp_rank,
            "terms": [term_record(t) for t in pool.terms]}


def _staging_record(staging: StagingNeed | None) -> dict[str, int] | None:
    return None if staging is None else {"gpu_bytes": staging.gpu_bytes, "host_bytes": staging.host_bytes}


def plan_disaggregated(spec: ClusterSpec, load: Load, *, prefill: ParallelLayout, decode: ParallelLayout) -> Deployment:
    """Prefill and decode pools for ``load`` (module docstring)."""
    p_rep = role_replica(spec, prefill, "prefill", context=load.prompt_tokens, prompt_tokens=load.prompt_tokens)
    d_rep = role_replica(spec, decode, "decode", context=load.context, prompt_tokens=load.prompt_tokens)
    leg = transfer_leg(spec, prefill, decode, load.prompt_tokens)
    link = spec.link.bytes_per_s_for(spec.nics)
    transfer_s = float(leg.time.seconds)
    sizing = size_prefill(p_rep, load, transfer_s=transfer_s,
                          by_link=_link_replicas(load, prefill.dp, leg.sent_per_prefill_rank, link))
    ttft = p_rep.prefill_latency_s + transfer_s + sizing.wait_s
    prefill_pool = Pool(role="prefill", layout=prefill, replicas=sizing.replicas, binding_limit=sizing.limit,
                        explanation=_prefill_explanation(sizing), terms=_prefill_terms(p_rep, load, leg, link, sizing))
    decode_pool, fit = _decode_pool(spec, d_rep, load, role="decode", busy=0.0,
                                    link_replicas=_link_replicas(load, decode.dp, leg.received_per_decode_rank, link))
    staging = decode_staging(spec.kv_buffer_device, _kv_cache_bytes(d_rep))
    prefill_staging = decode_staging(spec.kv_buffer_device, _kv_cache_bytes(p_rep))
    queued = load.ttft_target_s is not None and sizing.replicas is not None
    queue = (f" + {_f(sizing.wait_s * 1e3)} ms mean wait (M/D/1 at ρ {_f(sizing.utilisation, 3)})"
             if queued else ", queueing-free")
    fixed = p_rep.prefill_latency_s + transfer_s
    percentiles = (_ttft_percentiles(fixed, sizing.utilisation, p_rep.stage_prefill_s,
                                     f"{_f(p_rep.prefill_latency_s * 1e3)} ms prefill + {_f(transfer_s * 1e3, 3)} ms "
                                     "transfer") if queued else {})
    terms = [
        _t("KV per request per decode rank", leg.received_per_decode_rank, "bytes",
           f"{load.prompt_tokens:,} prompt tokens, prefill TP {prefill.tp} → decode TP {decode.tp}, whole blocks"),
        _t("KV transfer", _ms(transfer_s), "ms",
           f"{leg.time.bytes:,} B ÷ {leg.time.bandwidth_bytes_per_s:,} B/s ({spec.link.name} × {spec.nics})"
           + (" + latency" if leg.time.latency_s else " (no published latency: a lower bound)")),
        _t("TTFT", _ms(ttft), "ms", f"{_f(p_rep.prefill_latency_s * 1e3)} ms prefill + "
                                    f"{_f(transfer_s * 1e3, 3)} ms transfer{queue}"),
        _t("GPU staging per decode GPU", staging.gpu_bytes, "bytes",
           "none: the connector reads into the decode GPU's own KV blocks"),
        _t("host staging per decode GPU", staging.host_bytes, "bytes",
           f"kv_buffer_device={spec.kv_buffer_device!r}: "
           + ("a host copy of the GPU's KV cache" if staging.host_bytes else "read straight into the KV blocks")),
    ]
    if staging.host_bytes:
        per_node = min(spec.gpus_per_node, decode.gpus) * staging.host_bytes
        terms += [_t("host staging per decode node", per_node, "bytes",
                     f"{min(spec.gpus_per_node, decode.gpus)} GPUs × the per-GPU host copy"),
                  _t("host staging per prefill GPU", prefill_staging.host_bytes, "bytes",
                     "a host copy of the prefill GPU's KV cache (both ends register host buffers)")]
    terms[3:3] = percentiles.pop("terms", [])  # after the mean TTFT
    return _deployment("disaggregated", (prefill_pool, decode_pool), load, fit, ttft, terms,
                       transfer=leg.time, staging=staging, prefill_staging=prefill_staging, **percentiles)


def _ttft_percentiles(fixed_s: float, utilisation: float, service_s: float, fixed_words: str) -> dict[str, Any]:
    """``ttft_p90_s``/``ttft_p99_s`` = ``fixed_s`` + the M/D/1 wait's percentile at ``utilisation``
    (service ``service_s``), with their terms under ``"terms"``; a percentile past the series'
    reach stays None and gets no term."""
    out: dict[str, Any] = {"terms": []}
    if not 0 <= utilisation < 1:
        return out
    for q in TTFT_QUANTILES:
        wait = md1_wait_quantile_s(utilisation, service_s, q)
        if wait is None:
            continue
        name = f"p{round(q * 100)}"
        out[f"ttft_{name}_s"] = fixed_s + wait
        out["terms"].append(_t(f"TTFT {name}", _ms(fixed_s + wait), "ms",
                               f"{fixed_words} + {_f(wait * 1e3)} ms {name} wait (Erlang's M/D/1 waiting-time "
                               f"distribution at ρ {_f(utilisation, 3)}, service {_f(service_s * 1e3)} ms)"))
    return out


def _kv_cache_bytes(rep: Replica) -> int:
    """One GPU's KV cache (the fullest stage's budget), bytes, at least 0."""
    return max(0, math.floor(max(s.kv_budget_bytes_per_gpu or 0 for s in rep.memory.stages)))


def _prefill_terms(rep: Replica, load: Load, leg: TransferLeg, link: int, sizing: PrefillSizing) -> tuple[Term, ...]:
    dp, service = rep.layout.dp, rep.stage_prefill_s
    terms = [
        *_budget(rep),
        _t("prefill of one prompt", _ms(rep.prefill_latency_s), "ms",
           f"PP {rep.layout.pp} × {_f(service * 1e3)} ms per stage ({load.prompt_tokens:,} tokens, roofline)"),
        _t("prefill replicas for throughput", sizing.by_throughput, "replicas",
           f"⌈{_f(load.rate_per_s, 3)} requests/s × {_f(service * 1e3)} ms ÷ DP {dp}⌉"),
        _t("prefill replicas for the link", sizing.by_link, "replicas",
           f"⌈rate × {leg.sent_per_prefill_rank:,} B ÷ (DP {dp} × {link:,} B/s)⌉"),
    ]
    if sizing.by_target:
        slack = load.ttft_target_s - rep.prefill_latency_s - float(leg.time.seconds)
        terms += [
            _t("largest prefill utilisation within the TTFT target", sizing.max_utilisation, "share",
               f"2 × {_f(slack * 1e3)} ms slack ÷ ({_f(service * 1e3)} ms + 2 × {_f(slack * 1e3)} ms) "
               "(M/D/1 mean wait)"),
            _t("prefill replicas for the TTFT target", sizing.by_target, "replicas",
               f"⌈{_f(load.rate_per_s, 3)} requests/s × {_f(service * 1e3)} ms ÷ (DP {dp} × "
               f"{_f(sizing.max_utilisation, 4)})⌉"),
        ]
    if sizing.replicas is not None:
        terms.append(_t("prefill replicas", sizing.replicas, "replicas", "the largest of the counts above"))
    return tuple(terms)


def _prefill_explanation(sizing: PrefillSizing) -> str:
    if sizing.replicas is None:
        return ("prefill: the weights leave no KV room for one prompt" if sizing.limit == "memory" else
                "prefill: prefill and transfer alone exceed the TTFT target, whatever the replica count")
    if sizing.limit == "transfer":
        return "prefill: the link carries the KV of no fewer replicas"
    if sizing.limit == "ttft_target":
        return "prefill: the TTFT target (the prompt queue's mean wait) is what one replica fewer would miss"
    return f"prefill: {sizing.limit}-bound prompts, sized to throughput"


def plan_aggregated(spec: ClusterSpec, load: Load, *, layout: ParallelLayout) -> Deployment:
    """One pool that prefills and decodes (module docstring)."""
    rep = role_replica(spec, layout, "aggregated", context=load.context, prompt_tokens=load.prompt_tokens)
    busy = rep.stage_prefill_s / layout.dp
    pool, fit = _decode_pool(spec, rep, load, role="aggregated", busy=busy)
    queued = load.ttft_target_s is not None and pool.replicas is not None
    ttft = fit.ttft_s if queued else rep.prefill_latency_s
    queue = (f" + {_f((ttft - rep.prefill_latency_s) * 1e3)} ms mean wait (M/D/1 at the prefilling share)"
             if queued else ", queueing-free")
    terms = [_t("TTFT", _ms(ttft), "ms", f"PP {layout.pp} × {_f(rep.stage_prefill_s * 1e3)} ms prefill "
                                         f"({load.prompt_tokens:,} tokens){queue}, no transfer")]
    percentiles: dict[str, Any] = {}
    if queued:
        u = load.rate_per_s / pool.replicas * busy  # decode_fit's prefilling share
        percentiles = _ttft_percentiles(rep.prefill_latency_s, u, rep.stage_prefill_s,
                                        f"{_f(rep.prefill_latency_s * 1e3)} ms prefill")
        terms += percentiles.pop("terms")
    return _deployment("aggregated", (pool,), load, fit, ttft, terms, **percentiles)


def _deployment(mode: Literal["disaggregated", "aggregated"], pools: tuple[Pool, ...], load: Load, fit: DecodeFit,
                ttft: float, terms: list[Term], **extra: Any) -> Deployment:
    decode = pools[-1]
    served = decode.replicas is not None
    tpot = fit.tpot_s if served else None
    concurrency = None if tpot is None else load.rate_per_s * load.output_tokens * tpot
    if concurrency is not None:
        terms.append(_t("concurrent decoding sequences (Little's law)", concurrency, "sequences",
                        f"{_f(load.rate_per_s, 3)} requests/s × {load.output_tokens:,} tokens × {_f(tpot * 1e3)} ms"))
    gpus = [p.gpus for p in pools]
    if None not in gpus:
        terms.append(_t("GPUs", sum(gpus), "GPUs", " + ".join(
            f"{p.role} {p.replicas} × {p.gpus_per_replica}" for p in pools)))
        terms.append(_t("output tokens/s per GPU", load.rate_per_s * load.output_tokens / sum(gpus), "tokens/s",
                        f"{_f(load.rate_per_s, 3)} requests/s × {load.output_tokens:,} tokens ÷ {sum(gpus):,} GPUs"))
    failing = next((p for p in pools if p.replicas is None), None)
    late = (failing is None and load.ttft_target_s is not None
            and ttft > load.ttft_target_s * (1 + TOLERANCE))
    binding = "ttft_target" if late else (failing or decode).binding_limit
    words = (f"TTFT {_f(ttft * 1e3)} ms misses the {_f(load.ttft_target_s * 1e3)} ms target" if late
             else (failing or decode).explanation)
    return Deployment(mode=mode, pools=pools, ttft_s=ttft, tpot_s=tpot, concurrency=concurrency,
                      binding_limit=binding, explanation=words, terms=tuple(terms),
                      feasible=failing is None and not late, ttft_includes_queueing=load.ttft_target_s is not None,
                      output_tokens_per_s=load.rate_per_s * load.output_tokens, **extra)


@dataclass(frozen=True, kw_only=True)
class Comparison:
    """The same load served disaggregated and aggregated, side by side."""

    load: Load
    disaggregated: Deployment
    aggregated: Deployment
    terms: tuple[Term, ...]


def compare(spec: ClusterSpec, load: Load, *, prefill: ParallelLayout, decode: ParallelLayout,
            aggregated: ParallelLayout | None = None) -> Comparison:
    """:func:`plan_disaggregated` beside :func:`plan_aggregated` (on ``decode``'s layout unless
    ``aggregated`` is given), with the GPU ratio between them."""
    split = plan_disaggregated(spec, load, prefill=prefill, decode=decode)
    joint = plan_aggregated(spec, load, layout=aggregated or decode)
    terms = []
    if split.gpus and joint.gpus:
        terms.append(_t("GPUs, disaggregated ÷ aggregated", Fraction(split.gpus, joint.gpus), "share",
                        f"{split.gpus:,} ÷ {joint.gpus:,} GPUs"))
    if split.tpot_s and joint.tpot_s:
        terms.append(_t("TPOT, disaggregated ÷ aggregated", split.tpot_s / joint.tpot_s, "share",
                        f"{_f(split.tpot_s * 1e3)} ms ÷ {_f(joint.tpot_s * 1e3)} ms"))
    return Comparison(load=load, disaggregated=split, aggregated=joint, terms=tuple(terms))


def nodes(gpus_per_replica: int, replicas: int, gpus_per_node: int = GPUS_PER_NODE) -> int:
    """Nodes a pool takes: whole replicas per node when one fits a node, else whole nodes per replica."""
    if gpus_per_replica <= gpus_per_node:
        return math.ceil(replicas / (gpus_per_node // gpus_per_replica))
    return replicas * math.ceil(gpus_per_replica / gpus_per_node)


__all__ = ["Comparison", "DecodeFit", "Deployment", "MAX_REPLICAS", "Pool", "PrefillSizing", "compare", "decode_fit",
           "fewest_replicas", "nodes", "plan_aggregated", "plan_disaggregated", "size_prefill"]

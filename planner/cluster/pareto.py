"""The layouts of one model on one GPU type, swept: tokens/s per GPU against TPOT (and TTFT),
the limit that binds each point, and the Pareto fronts.

Layouts swept (:func:`layouts`): TP among the divisors of the query heads up to one node (8) that
vLLM accepts for the KV heads, PP 1–4, and for a mixture of experts data-parallel attention
(TP × DP within the node) with and without expert parallelism (where the experts split evenly).
A dense model's DP ranks are plain replicas, which change no per-GPU figure, so DP stays 1.

A point is one layout in one mode at one batch ``b`` (sequences per DP rank: powers of two up to
the cap — the KV capacity and, with a target, the largest batch within the TPOT — and the cap),
the replica fully loaded (:mod:`planner.cluster.pools` for the formulas)::

    aggregated     r = DP·b ÷ (output × TPOT(b) + b × T_s)   requests/s per replica
                   u = r × T_s ÷ DP,  TPOT = TPOT(b) ÷ (1 − u),  TTFT = PP × T_s (+ M/D/1 wait at u)
                   tokens/s per GPU = r × output ÷ GPUs
    disaggregated  r = DP·b ÷ (output × TPOT(b))  per decode replica (less if its links cannot
                   receive r prompts' KV); the prefill layout with the fewest GPUs per request/s
                   that meets the TTFT target feeds it, with
                   x = max(T_s ÷ ρ_max, link seconds) ÷ DP replicas per request/s
                   (fractional: the xPyD ratio; ρ_max from the TTFT target, 1 without one)
                   TTFT = PP × T_s + transfer (+ M/D/1 wait at ρ = T_s ÷ (DP·x))
                   tokens/s per GPU = r × output ÷ (decode GPUs + r × x × prefill GPUs)

As in the pools, TTFT holds the queue's mean wait only when a TTFT target is given; without one
both modes show the queueing-free latency (a fully loaded prefill queue has no finite mean wait).

The binding limit of a point: ``ttft_target`` or ``tpot_target`` when the point misses one,
``memory`` or ``tpot_target`` at the cap that stops the batch, ``transfer`` when a link lowers
``r``, otherwise what the decode step is made of (``bandwidth``/``compute``); a disaggregated
point also names what sized its prefill (``prefill_limit``). On the TPOT front: no other point
that meets the targets has at least the tokens/s per GPU at no more TPOT (one of them strictly);
the TTFT front is the same with TTFT. Points that miss a target are on neither.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from inputs.errors import InputError
from planner.cluster.parallel import ParallelLayout
from planner.cluster.replica import (
    TOLERANCE, ClusterSpec, Limit, Load, Replica, TransferLeg, accepts_tp, batch_cap, layout_record, max_utilisation,
    md1_wait_s, replica, transfer_leg,
)
from sizing.errors import SizingError
from sizing.models import ModelShape

Mode = Literal["aggregated", "disaggregated"]
MODES: tuple[Mode, ...] = ("aggregated", "disaggregated")
MAX_NODE_TP = 8  # one NVLink node
MAX_SWEPT_PP = 4


@dataclass(frozen=True, kw_only=True)
class ParetoPoint:
    """One layout, mode and batch, fully loaded. Times in seconds; ``batch`` per DP rank."""

    mode: Mode
    layout: ParallelLayout  # the decode (or aggregated) replica
    prefill_layout: ParallelLayout | None
    batch: int
    tpot_s: float
    ttft_s: float
    tokens_per_s_per_gpu: float
    binding_limit: Limit
    meets_targets: bool
    prefill_limit: Limit | None = None  # disaggregated: what sized the prefill GPUs
    prefill_gpus_per_decode_gpu: float = 0.0  # disaggregated: the xPyD ratio in GPUs
    on_front: bool = False  # the TPOT front
    on_ttft_front: bool = False

    @property
    def tokens_per_s_per_user(self) -> float:
        return 1 / self.tpot_s

    def as_record(self) -> dict[str, Any]:
        return {"mode": self.mode, "layout": layout_record(self.layout),
                "prefill_layout": layout_record(self.prefill_layout), "batch": self.batch,
                "tpot_s": self.tpot_s, "ttft_s": self.ttft_s, "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
                "tokens_per_s_per_user": self.tokens_per_s_per_user, "binding_limit": self.binding_limit,
                "prefill_limit": self.prefill_limit, "prefill_gpus_per_decode_gpu": self.prefill_gpus_per_decode_gpu,
                "meets_targets": self.meets_targets, "on_front": self.on_front, "on_ttft_front": self.on_ttft_front}


@dataclass(frozen=True, kw_only=True)
class Sweep:
    """Every point, and the layouts left out with the reason (weights that do not fit, a split
    vLLM refuses)."""

    points: tuple[ParetoPoint, ...]
    skipped: tuple[tuple[ParallelLayout, str], ...]
    ttft_includes_queueing: bool

    @property
    def front(self) -> tuple[ParetoPoint, ...]:
        """The TPOT front, by TPOT."""
        return tuple(sorted((p for p in self.points if p.on_front), key=lambda p: p.tpot_s))

    @property
    def ttft_front(self) -> tuple[ParetoPoint, ...]:
        return tuple(sorted((p for p in self.points if p.on_ttft_front), key=lambda p: p.ttft_s))

    def as_record(self) -> dict[str, Any]:
        return {"ttft_includes_queueing": self.ttft_includes_queueing,
                "points": [p.as_record() for p in self.points],
                "skipped": [{"layout": layout_record(layout), "reason": why} for layout, why in self.skipped]}


def layouts(model: ModelShape, *, max_tp: int = MAX_NODE_TP, max_pp: int = MAX_SWEPT_PP) -> tuple[ParallelLayout, ...]:
    """The layouts the sweep tries (module docstring), before memory is checked."""
    found = []
    tps = [tp for tp in range(1, max_tp + 1) if model.q_heads % tp == 0 and accepts_tp(model, tp)]
    for pp in range(1, min(max_pp, model.layers) + 1):
        for tp in tps:
            dps = [dp for dp in (1, 2, 4, 8) if tp * dp <= max_tp] if model.is_moe else [1]
            for dp in dps:
                found.append(ParallelLayout(tp=tp, pp=pp, dp=dp))
                if model.is_moe and tp * dp > 1 and model.num_experts % (tp * dp) == 0:
                    found.append(ParallelLayout(tp=tp, pp=pp, dp=dp, ep=True))
    return tuple(found)


def sweep(spec: ClusterSpec, load: Load, *, modes: tuple[Mode, ...] = MODES, max_tp: int = MAX_NODE_TP,
          max_pp: int = MAX_SWEPT_PP) -> Sweep:
    """Every point of every layout in ``modes`` for ``load``'s lengths and targets (the rate only
    labels the load: each point is one replica fully loaded)."""
    for mode in modes:
        if mode not in MODES:
            raise InputError("mode", f"must be one of {', '.join(MODES)}, got {mode!r:.40}")
    decode, prefill, skipped = {}, {}, []
    for layout in layouts(spec.model, max_tp=max_tp, max_pp=max_pp):
        try:
            rep = replica(spec, layout, context=load.context, prompt_tokens=load.prompt_tokens)
        except InputError as exc:
            skipped.append((layout, exc.message))
            continue
        if rep.users_per_dp_rank < 1:
            skipped.append((layout, f"the weights leave no KV room for one sequence of {load.context:,} tokens"))
        else:
            decode[layout] = (rep, batch_cap(spec, rep, load))
        if "disaggregated" in modes:
            p_rep = replica(spec, layout, context=load.prompt_tokens, prompt_tokens=load.prompt_tokens)
            if p_rep.users_per_dp_rank >= 1:
                prefill[layout] = p_rep
    legs: dict[tuple[int, int, int, int], TransferLeg | None] = {}
    points = []
    for layout, (rep, cap) in decode.items():
        batches = sorted({1 << k for k in range(cap.bit_length()) if 1 << k <= cap} | {cap}) if cap >= 1 else []
        if "aggregated" in modes:
            points += [_aggregated(rep, load, b, cap) for b in batches]
        if "disaggregated" in modes and prefill:
            feeder = _best_prefill(spec, load, layout, prefill, legs)
            if feeder is not None:
                points += [_disaggregated(rep, load, b, cap, feeder) for b in batches]
    return Sweep(points=_flag_fronts(points), skipped=tuple(skipped),
                 ttft_includes_queueing=load.ttft_target_s is not None)


@dataclass(frozen=True)
class _Feeder:
    layout: ParallelLayout
    ttft_s: float
    limit: Limit  # what sized it: ttft_target, transfer, or its prompts' bound
    prefill_gpus_per_request_s: float  # prefill GPUs one request/s keeps busy (x × prefill GPUs)
    decode_link_requests_per_s: float  # prompts/s one decode replica's links can receive
    meets_ttft: bool


def _leg(spec: ClusterSpec, load: Load, prefill: ParallelLayout, decode: ParallelLayout,
         legs: dict) -> TransferLeg | None:
    """The transfer between two layouts (depends on their TP and PP only), cached for the sweep."""
    key = (prefill.tp, prefill.pp, decode.tp, decode.pp)
    if key not in legs:
        try:
            legs[key] = transfer_leg(spec, prefill, decode, load.prompt_tokens)
        except (SizingError, InputError):  # TPs that do not divide one another
            legs[key] = None
    return legs[key]


def _best_prefill(spec: ClusterSpec, load: Load, decode: ParallelLayout, prefill: dict[ParallelLayout, Replica],
                  legs: dict) -> _Feeder | None:
    """The prefill layout that feeds ``decode`` with the fewest GPUs per request/s among those
    meeting the TTFT target (without one that does, the one with the lowest TTFT)."""
    link = spec.link.bytes_per_s_for(spec.nics)
    best = None
    for layout, rep in prefill.items():
        leg = _leg(spec, load, layout, decode, legs)
        if leg is None:
            continue
        service, transfer_s = rep.stage_prefill_s, float(leg.time.seconds)
        latency = rep.prefill_latency_s + transfer_s
        rho_max = 1.0
        if load.ttft_target_s is not None:
            rho_max = max_utilisation(load.ttft_target_s - latency, service)
        meets = rho_max > 0
        link_s = leg.sent_per_prefill_rank / link
        compute_s = service / rho_max if meets else service
        per_rate = max(compute_s, link_s) / layout.dp  # replicas per request/s
        ttft = latency
        if meets and load.ttft_target_s is not None:
            ttft += md1_wait_s(service / (layout.dp * per_rate), service)
        limit: Limit = ("transfer" if link_s > compute_s else
                        "ttft_target" if rho_max < 1 else rep.prefill_bound)
        receive = decode.dp * link / leg.received_per_decode_rank if leg.received_per_decode_rank else float("inf")
        feeder = _Feeder(layout, ttft, limit, per_rate * layout.gpus, receive, meets)
        rank = (not meets, feeder.prefill_gpus_per_request_s if meets else ttft)
        if best is None or rank < best[0]:
            best = (rank, feeder)
    return None if best is None else best[1]


def _limit(rep: Replica, load: Load, b: int, cap: int, tpot: float, ttft_ok: bool, linked: bool) -> tuple[Limit, bool]:
    if not ttft_ok:
        return "ttft_target", False
    if load.tpot_target_s is not None and tpot > load.tpot_target_s * (1 + TOLERANCE):
        return "tpot_target", False
    if b == cap:
        return ("memory" if cap == rep.users_per_dp_rank else "tpot_target"), True
    return ("transfer" if linked else rep.bound(b)), True


def _aggregated(rep: Replica, load: Load, b: int, cap: int) -> ParetoPoint:
    dp, step, service = rep.layout.dp, rep.tpot_s(b), rep.stage_prefill_s
    r = dp * b / (load.output_tokens * step + b * service)
    u = r * service / dp
    tpot = step / (1 - u)
    ttft = rep.prefill_latency_s + (md1_wait_s(u, service) if load.ttft_target_s is not None else 0.0)
    ttft_ok = load.ttft_target_s is None or ttft <= load.ttft_target_s * (1 + TOLERANCE)
    limit, meets = _limit(rep, load, b, cap, tpot, ttft_ok, False)
    return ParetoPoint(mode="aggregated", layout=rep.layout, prefill_layout=None, batch=b, tpot_s=tpot, ttft_s=ttft,
                       tokens_per_s_per_gpu=r * load.output_tokens / rep.gpus, binding_limit=limit, meets_targets=meets)


def _disaggregated(rep: Replica, load: Load, b: int, cap: int, feeder: _Feeder) -> ParetoPoint:
    tpot = rep.tpot_s(b)
    r = rep.layout.dp * b / (load.output_tokens * tpot)
    linked = r > feeder.decode_link_requests_per_s
    r = min(r, feeder.decode_link_requests_per_s)
    prefill_gpus = r * feeder.prefill_gpus_per_request_s
    limit, meets = _limit(rep, load, b, cap, tpot, feeder.meets_ttft, linked)
    return ParetoPoint(mode="disaggregated", layout=rep.layout, prefill_layout=feeder.layout, batch=b, tpot_s=tpot,
                       ttft_s=feeder.ttft_s, tokens_per_s_per_gpu=r * load.output_tokens / (rep.gpus + prefill_gpus),
                       binding_limit=limit, meets_targets=meets, prefill_limit=feeder.limit,
                       prefill_gpus_per_decode_gpu=prefill_gpus / rep.gpus)


def _front(points: list[ParetoPoint], latency: str) -> set[int]:
    """Indices of the points meeting the targets that no other such point dominates in
    (``latency`` lower, tokens/s per GPU higher): walk by latency, keep each new best rate."""
    order = sorted((i for i, p in enumerate(points) if p.meets_targets),
                   key=lambda i: (getattr(points[i], latency), -points[i].tokens_per_s_per_gpu))
    front, best, at = set(), -1.0, None
    for i in order:
        rate, when = points[i].tokens_per_s_per_gpu, getattr(points[i], latency)
        # Equal points do not dominate each other: a tie with the best so far joins it.
        if rate > best or (rate == best and when == at):
            front.add(i)
            best, at = rate, when
    return front


def _flag_fronts(points: list[ParetoPoint]) -> tuple[ParetoPoint, ...]:
    tpot, ttft = _front(points, "tpot_s"), _front(points, "ttft_s")
    return tuple(replace(p, on_front=i in tpot, on_ttft_front=i in ttft) for i, p in enumerate(points))


__all__ = ["MAX_NODE_TP", "MAX_SWEPT_PP", "MODES", "ParetoPoint", "Sweep", "layouts", "sweep"]

"""A cluster plan's decode pool and its aggregated pool over time, through the simulator.

The plan (:mod:`planner.cluster.pools`) sizes pools from averages; this runs one DP rank of each
pool through the over-time engine (:func:`simulation.timeline.run_timeline`) on the same load and
reports what its KV cache goes through: peak and time-averaged blocks in use, preemptions.

One DP rank of a pool of ``R`` replicas of DP ``d`` takes ``rate ÷ (R × d)`` requests/s (the
plan spreads requests evenly), as Poisson arrivals of ``prompt`` + ``output`` tokens each, on:

* **its KV cache** — for every stage, the KV budget per GPU ÷ that stage's KV bytes per token per
  GPU, the fewest over stages, in token slots; paged in blocks of the cluster's block size;
* **its step** — the heaviest stage's roofline (:func:`planner.step_time.step_cost`) with the
  weights read PP times a step, as :meth:`~planner.cluster.replica.Replica.tpot_s` counts them;
* **its scheduler** — ``max_num_seqs`` the pool's batch cap per DP rank (the launch command's
  ``--max-num-seqs``), ``max_num_batched_tokens`` the launch default (at least the cap), chunked
  prefill, preemption by recompute.

The decode pool runs with ``arrive_prefilled``: a request arrives the plan's TTFT after its
arrival (prefill, KV transfer and, with a TTFT target, the mean prefill wait) with its prompt's
KV, takes its blocks at admission and only decodes. The aggregated pool prefills its own prompts.

Simplifications, stated: the decode pool's arrivals are the prefill pool's completions, taken as
Poisson (an M/D/1 queue's departures are smoother), and one constant delay shifts them all, which
changes no occupancy figure; the means span the whole run, the ramp from an empty pool and the
drain after the last arrival included; per-token bytes are exact for full attention (a sliding
window's or a recurrent state's cost per sequence is not a per-token cost).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np

from inputs.errors import InputError
from planner.cluster.pools import Comparison, Deployment, Pool
from planner.cluster.replica import ClusterSpec, Load, Replica, role_replica
from planner.plan import gpu_spec
from planner.step_time import step_cost
from simulation.memory import KvBudget
from simulation.run_budget import Deadline
from simulation.timeline import TimelineConfig, TimelineResult, run_timeline
from simulation.timeline_types import DEFAULT_MAX_NUM_BATCHED_TOKENS, MAX_TRANSFER_DELAY_S
from simulation.workloads import Workload, poisson_arrivals
from sizing.models import check_int

DEFAULT_REQUESTS = 1000  # per pool: about a minute of arrivals at typical per-rank rates
MAX_REQUESTS = 20_000  # the simulator stays within seconds of wall clock below this
MAX_SEED = 2**63 - 1
# Token slots of one DP rank beyond which a pool is not simulated (a per-block pool this large
# means a config, not a GPU).
MAX_SLOTS = 10**9

PoolRole = Literal["decode", "aggregated"]


@dataclass(frozen=True, kw_only=True)
class PoolOccupancy:
    """One DP rank of a pool over time. Blocks are of ``block_size`` tokens; times in seconds.

    Attributes
    ----------
    role : "decode" or "aggregated"
    replicas, dp : int
        The pool's replica count and DP ranks per replica (the plan's).
    rate_per_dp_rank : float
        Requests/s the simulated rank takes.
    kv_blocks, block_size : int
        Blocks of the rank's KV cache, and their tokens.
    max_num_seqs : int
        The rank's sequence cap (the pool's batch cap per DP rank).
    peak_blocks : int
        Most blocks in use at once.
    mean_blocks : float
        Time-averaged blocks in use over the run.
    preemptions, completed, rejected : int
    mean_batch_size, mean_ttft_s, mean_tpot_s, duration_s : float
        From the run (TTFT from the arrival at the pool: for the decode pool, after the delay;
        the duration up to the last completion).
    transfer_delay_s : float
        The decode pool's arrival delay (0 for the aggregated pool).
    computed_tokens : int
        Tokens the rank's steps computed (the decode pool's: one per output token, recomputes aside).
    """

    role: PoolRole
    replicas: int
    dp: int
    rate_per_dp_rank: float
    kv_blocks: int
    block_size: int
    max_num_seqs: int
    peak_blocks: int
    mean_blocks: float
    preemptions: int
    completed: int
    rejected: int
    mean_batch_size: float
    mean_ttft_s: float
    mean_tpot_s: float
    duration_s: float
    transfer_delay_s: float
    computed_tokens: int

    @property
    def peak_share(self) -> float:
        return self.peak_blocks / self.kv_blocks if self.kv_blocks else 0.0

    @property
    def mean_share(self) -> float:
        return self.mean_blocks / self.kv_blocks if self.kv_blocks else 0.0

    def as_record(self) -> dict[str, Any]:
        return {"role": self.role, "replicas": self.replicas, "dp": self.dp,
                "rate_per_dp_rank": self.rate_per_dp_rank, "kv_blocks": self.kv_blocks,
                "block_size": self.block_size, "max_num_seqs": self.max_num_seqs,
                "peak_blocks": self.peak_blocks, "mean_blocks": self.mean_blocks,
                "peak_share": self.peak_share, "mean_share": self.mean_share,
                "preemptions": self.preemptions, "completed": self.completed, "rejected": self.rejected,
                "mean_batch_size": self.mean_batch_size, "mean_ttft_s": self.mean_ttft_s,
                "mean_tpot_s": self.mean_tpot_s, "duration_s": self.duration_s,
                "transfer_delay_s": self.transfer_delay_s,
                "computed_tokens": self.computed_tokens}


@dataclass(frozen=True, kw_only=True)
class Occupancy:
    """The decode pool and the aggregated pool of one plan over time (``pools``: those simulated;
    ``skipped``: role → why not)."""

    requests: int
    seed: int
    pools: tuple[PoolOccupancy, ...]
    skipped: tuple[tuple[PoolRole, str], ...] = ()

    def pool(self, role: PoolRole) -> PoolOccupancy | None:
        return next((p for p in self.pools if p.role == role), None)

    def as_record(self) -> dict[str, Any]:
        return {"requests": self.requests, "seed": self.seed, "pools": [p.as_record() for p in self.pools],
                "skipped": [{"role": role, "reason": why} for role, why in self.skipped]}


def kv_slots_per_dp_rank(rep: Replica) -> int:
    """Token slots of one DP rank's KV cache: the fewest over stages of budget ÷ bytes per token."""
    slots = []
    for stage in rep.memory.stages:
        budget, per_token = stage.kv_budget_bytes_per_gpu, stage.kv_bytes_per_token_per_gpu
        if budget is None or per_token <= 0:
            return 0
        slots.append(max(0, math.floor(budget / per_token)))
    return min(slots)


def simulate_pool(spec: ClusterSpec, load: Load, rep: Replica, pool: Pool, *, role: PoolRole, requests: int,
                  rng: np.random.Generator, transfer_delay_s: float = 0.0, deadline: Deadline | None = None,
                  progress: Callable[[float], None] | None = None) -> PoolOccupancy:
    """One DP rank of ``pool`` (``rep`` its replica's figures) through the over-time engine
    (module docstring); ``transfer_delay_s`` > 0 or ``role`` ``"decode"`` runs prefilled arrivals.
    ``progress``, as :func:`~simulation.timeline.run_timeline` takes it: called with the share of
    requests finished (0–1) about every 1 %; what it raises stops the run."""
    if pool.replicas is None:
        raise InputError(f"{role}_replicas", "the pool serves the load with no replica count: nothing to simulate")
    dp = pool.layout.dp
    rate = load.rate_per_s / (pool.replicas * dp)
    slots = kv_slots_per_dp_rank(rep)
    block = spec.block_size
    if slots // block < 1:
        raise InputError(f"{role}_kv", "the KV cache of a DP rank holds no block")
    if slots > MAX_SLOTS:
        raise InputError(f"{role}_kv", f"{slots:,} token slots per DP rank: past the {MAX_SLOTS:,} simulated")
    cap = max(1, pool.batch_cap_per_dp_rank)
    pipeline = replace(rep.stage, weight_bytes=rep.stage.weight_bytes * rep.layout.pp)
    prefilled = role == "decode"
    config = TimelineConfig(
        budget=KvBudget(tokens=slots), max_context=load.context, block_size=block,
        step_cost=step_cost(pipeline, gpu_spec(spec.gpu), spec.estimate),
        max_num_seqs=cap, max_num_batched_tokens=max(DEFAULT_MAX_NUM_BATCHED_TOKENS, cap),
        arrive_prefilled=prefilled, transfer_delay_s=min(transfer_delay_s, MAX_TRANSFER_DELAY_S) if prefilled else 0.0)
    workload = Workload(prompt_tokens=np.full(requests, load.prompt_tokens, dtype=np.int64),
                        output_tokens=np.full(requests, load.output_tokens, dtype=np.int64),
                        arrival_s=poisson_arrivals(requests, rate, rng), source=f"{role} pool, one DP rank")
    result = run_timeline(workload, config, deadline=deadline, progress=progress)
    return _occupancy(result, role=role, replicas=pool.replicas, dp=dp, rate=rate, slots=slots)


def _occupancy(result: TimelineResult, *, role: PoolRole, replicas: int, dp: int, rate: float,
               slots: int) -> PoolOccupancy:
    c = result.config
    block = c.block_size
    return PoolOccupancy(
        role=role, replicas=replicas, dp=dp, rate_per_dp_rank=rate, kv_blocks=slots // block, block_size=block,
        max_num_seqs=c.max_num_seqs, peak_blocks=result.peak_allocated_tokens // block,
        mean_blocks=result.mean_allocated_tokens / block, preemptions=result.preemptions,
        completed=result.completed, rejected=result.rejected, mean_batch_size=result.mean_batch_size,
        mean_ttft_s=result.mean_ttft_s, mean_tpot_s=result.mean_tpot_s, duration_s=result.duration_s,
        transfer_delay_s=c.transfer_delay_s,
        computed_tokens=result.computed_tokens)


def simulate_occupancy(spec: ClusterSpec, comparison: Comparison, *, requests: int = DEFAULT_REQUESTS,
                       seed: int = 0, deadline: Deadline | None = None,
                       progress: Callable[[float], None] | None = None) -> Occupancy:
    """The decode pool of ``comparison``'s disaggregated plan beside its aggregated pool, each one
    DP rank over ``requests`` requests (seeded; the two runs draw their own arrivals from one
    generator, decode first). A pool with no replica count is skipped, with the plan's reason.

    ``progress`` (optional) is called with the share of the whole run done (0–1), each simulated
    pool an equal part (their runs take about as long: 0.76 s and 0.58 s for 20,000 requests of
    the page's default plan), about every 1 % of a pool's requests; the figures are the same
    with it or without. What it raises stops the run between two of the simulator's steps and
    propagates (the page's Cancel works so)."""
    check_int("sim_requests", requests, low=1, high=MAX_REQUESTS)
    check_int("sim_seed", seed, low=0, high=MAX_SEED)
    if progress is not None and not callable(progress):
        raise TypeError(f"progress: must be callable or None, got {type(progress).__name__}")
    load = comparison.load
    runs, skipped = [], []
    for role, deployment in (("decode", comparison.disaggregated), ("aggregated", comparison.aggregated)):
        pool = deployment.pools[-1]
        if pool.replicas is None:
            skipped.append((role, pool.explanation))
            continue
        rep = role_replica(spec, pool.layout, role, context=load.context, prompt_tokens=load.prompt_tokens)
        if kv_slots_per_dp_rank(rep) // spec.block_size < 1:
            skipped.append((role, "its KV cache holds no block"))
            continue
        runs.append((role, deployment, pool, rep))
    rng = np.random.default_rng(seed)
    pools = [simulate_pool(spec, load, rep, pool, role=role, requests=requests, rng=rng,
                           transfer_delay_s=_delay(deployment) if role == "decode" else 0.0, deadline=deadline,
                           progress=_part(progress, index, len(runs)))
             for index, (role, deployment, pool, rep) in enumerate(runs)]
    if progress is not None and not runs:
        progress(1.0)  # nothing to simulate: done
    return Occupancy(requests=requests, seed=seed, pools=tuple(pools), skipped=tuple(skipped))


def _part(progress: Callable[[float], None] | None, index: int, parts: int) -> Callable[[float], None] | None:
    """Pool ``index``'s share done (0–1) as the whole run's, each of ``parts`` pools an equal
    part and those before it done (None without ``progress``)."""
    if progress is None:
        return None
    return lambda share: progress((index + share) / parts)


def _delay(deployment: Deployment) -> float:
    """When a request's KV reaches the decode pool: the disaggregated plan's TTFT (prefill,
    transfer and the mean prefill wait where the plan models the queue)."""
    return deployment.ttft_s if math.isfinite(deployment.ttft_s) and deployment.ttft_s >= 0 else 0.0


__all__ = ["DEFAULT_REQUESTS", "Deadline", "MAX_REQUESTS", "MAX_SEED", "Occupancy", "PoolOccupancy", "kv_slots_per_dp_rank",
           "simulate_occupancy", "simulate_pool"]

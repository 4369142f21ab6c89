"""What an over-time run reports: its integrals, per-request times and series as a
:class:`~simulation.timeline_types.TimelineResult` (the engine is :mod:`simulation.engine`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from simulation.engine_sums import series_from_samples
from simulation.memory import MemoryBreakdown
from simulation.timeline_types import PrefixStats, TimelineResult

if TYPE_CHECKING:
    from simulation.engine import Engine


def engine_result(engine: Engine) -> TimelineResult:
    """The result of a finished run: time averages over ``engine.time`` seconds."""
    duration = engine.time
    span = duration if duration > 0 else 1.0
    tokens, filled, reserved, held, external, _ = (value / span for value in engine.acc.memory)
    budget = engine.budget
    breakdown = MemoryBreakdown(
        token_states=tokens, reservation=filled - tokens, internal_fragmentation=reserved - filled,
        external_fragmentation=held - reserved + external, free=budget - held - external,
    )
    admitted_at, first_token_at, finished_at = (np.array(values, dtype=np.float64) for values in
                                                (engine.admitted_at, engine.first_token_at, engine.finished_at))
    wait = admitted_at - engine.arrival
    ttft = first_token_at - engine.arrival
    later = (engine.output - 1).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(later > 0, (finished_at - first_token_at) / later, np.nan)
    return TimelineResult(
        config=engine.config, completed=engine.completed, rejected=int(engine.rejected.sum()),
        duration_s=duration, mean_batch_size=engine.acc.batch / span,
        token_state_fraction=tokens / budget, breakdown=breakdown,
        preemptions=engine.preemptions, recomputed_tokens=engine.recomputed_tokens,
        swapped_tokens=engine.swapped_tokens, preemption_stall_s=engine.stall_s,
        wait_s=wait, ttft_s=ttft, tpot_s=tpot,
        mean_step_s=duration / engine.steps if engine.steps else 0.0, steps=engine.steps,
        computed_tokens=engine.computed_tokens, peak_allocated_tokens=engine.peak_allocated,
        mean_allocated_tokens=held,
        prefix=_prefix_stats(engine), series=series_from_samples(engine.samples, engine.config.series_points),
    )


def _prefix_stats(engine: Engine) -> PrefixStats | None:
    if not engine.caching:
        return None
    stats = engine.cpu.stats if engine.cpu is not None else None
    return PrefixStats(
        prompt_tokens=engine.prefix_prompt, hit_tokens=engine.prefix_hits, cpu_hit_tokens=engine.prefix_cpu_hits,
        readmission_hit_tokens=engine.prefix_readmit_hits, evictions=engine.pool.evictions,
        cached_blocks_peak=engine.cached_peak, cpu_stored_blocks=stats.stored if stats else 0,
        cpu_dropped_blocks=stats.dropped if stats else 0, cpu_loaded_tokens=engine.cpu_loaded_tokens,
        cpu_transfer_s=engine.cpu_transfer_s)

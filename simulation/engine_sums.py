"""Closed-form sums the over-time engine integrates with, its running integrals and its series."""

from __future__ import annotations

import numpy as np

from simulation.timeline_types import TimelineSeries
from units import cdiv


def slots_sum(upper: np.ndarray, block_size: int) -> np.ndarray:
    """S(n) = Σ_{m=1..n} B·⌈m/B⌉ (int64, element-wise): slots held summed over lengths 1..n."""
    q, r = np.divmod(upper, block_size)
    return block_size * block_size * q * (q + 1) // 2 + r * block_size * (q + 1)


def paged_sums(length: np.ndarray, final: np.ndarray, steps: int, block_size: int) -> tuple[int, int]:
    """Over the next ``steps`` decode steps (lengths ``length + 1 .. length + steps``), summed over
    steps and requests: (slots held, slots held that the request will eventually fill).

    ``min(B·⌈m/B⌉, F)`` equals ``F`` once m is in the request's last block (m > F_b) and the slots
    held otherwise, so both sums are differences of ``slots_sum``.
    """
    end = length + steps
    last_block_start = block_size * (cdiv(final, block_size) - 1)
    # One vectorised call for the four S(·) terms (per-event overhead dominates at small batches).
    terms = slots_sum(np.concatenate([end, length, np.minimum(end, last_block_start),
                                      np.minimum(length, last_block_start)]), block_size)
    size = length.size
    held = terms[:size].sum() - terms[size:2 * size].sum()
    below = terms[2 * size:3 * size].sum() - terms[3 * size:].sum()
    in_last = np.maximum(0, end - np.maximum(length, last_block_start))
    return int(held), int(below + (final * in_last).sum())


class Accumulator:
    """Time integrals (slot·seconds, request·seconds) of the engine's memory figures.

    :attr:`memory` holds, in order: token states, slots their request will fill, slots reserved
    by the policy, slots allocated, external holes, cached free slots. ``paged``: a paged pool
    allocates exactly the slots it reserves, so the two figures arrive equal and one is summed.
    """

    def __init__(self, paged: bool = False) -> None:
        self.paged = paged
        self.totals = [0.0] * 6
        self.batch = 0.0

    @property
    def memory(self) -> list[float]:
        """The six integrals (slot·seconds), in the order above."""
        totals = list(self.totals)
        if self.paged:
            totals[3] = totals[2]
        return totals

    def add(self, seconds: float, memory: tuple[int, ...], batch: float) -> None:
        """Add ``seconds`` × each figure (figures may already be sums over steps of ``seconds``).
        A figure of 0 adds exactly 0.0, so it is skipped (most runs have no cached or external slots)."""
        total = self.totals
        tokens, filled, reserved, allocated, external, cached = memory  # unrolled: called at every event
        total[0] += seconds * tokens
        total[1] += seconds * filled
        total[2] += seconds * reserved
        if not self.paged:
            total[3] += seconds * allocated
        if external:
            total[4] += seconds * external
        if cached:
            total[5] += seconds * cached
        self.batch += seconds * batch


def series_from_samples(samples: list[tuple[float, ...]], points: int) -> TimelineSeries:
    """The engine's samples (one tuple per recorded moment, time first) thinned to ``points``
    evenly spaced times (the state at the last sample at or before each)."""
    table = np.asarray(samples, dtype=np.float64)
    if table.shape[0] > points:
        times = np.linspace(table[0, 0], table[-1, 0], points)
        table = table[np.searchsorted(table[:, 0], times, side="right") - 1]
    columns = table.T
    return TimelineSeries(
        time_s=columns[0], token_states=columns[1], reservation=columns[2],
        internal_fragmentation=columns[3], external_fragmentation=columns[4], free=columns[5],
        cached=columns[6], batch_size=columns[7], queue_length=columns[8], preemptions=columns[9],
        step_s=columns[10], batched_tokens=columns[11],
    )

"""Step times of a pure-decode stretch in plain Python floats, for the over-time engine's hot loop.

:meth:`simulation.step_cost.StepCost.decode_seconds` is the model (closed-form sum of the
memory/compute roofline over the stretch) and works on NumPy arrays; a call on one number costs
microseconds of array overhead, paid once or more per engine event. :func:`decode_seconds` below
does the same float64 operations in the same order on Python floats, so it returns the very same
number (IEEE 754 arithmetic is exact-rounded either way; tests compare the two bit for bit), and
:func:`steps_to_reach` replaces an array search over every step count by a binary search that
probes the same sums in the order ``numpy.searchsorted`` would.
"""

from __future__ import annotations

import math

from simulation.step_cost import StepCost


def _affine_sum(a0: float, a1: float, start: float, stop: float) -> float:
    """Σ_{j=start}^{stop-1} (a0 + a1·j) as ``step_cost._affine_sum`` computes it on one element."""
    count = stop - start
    if count < 0:
        count = 0.0
    return a0 * count + a1 * (stop * (stop - 1) - start * (start - 1)) / 2 * (1.0 if count > 0 else 0.0)


def decode_seconds(cost: StepCost, batch: int, context: int, steps: int) -> float:
    """``cost.decode_seconds(batch=batch, context=context, steps=steps)`` (seconds), bit for bit."""
    k = float(steps)
    m0 = cost.fixed_s + cost.per_context_token_s * context
    m1 = cost.per_context_token_s * batch
    c0 = cost.per_token_s * batch + cost.per_attention_pair_s * context
    c1 = cost.per_attention_pair_s * batch
    if m1 == c1:
        if m1 == 0.0:  # a constant step: a0·k + 0·(…) = a0·k exactly
            return (m0 if m0 >= c0 else c0) * k
        return _affine_sum(m0 if m0 >= c0 else c0, m1, 0.0, k)
    crossing = (c0 - m0) / (m1 - c1)  # finite over finite: Python gives ±inf where NumPy would
    split = float(math.ceil(crossing)) if math.isfinite(crossing) else crossing
    split = min(max(split, 0.0), k)  # numpy.clip(…, 0, k)
    first, second = ((c0, c1), (m0, m1)) if m1 > c1 else ((m0, m1), (c0, c1))
    return _affine_sum(*first, 0.0, split) + _affine_sum(*second, split, k)


def constant_decode_step(cost: StepCost, batch: int) -> float:
    """One pure-decode step of ``batch`` sequences (seconds) when ``cost.is_constant_decode``:
    then ``decode_seconds(cost, batch, context, k) == constant_decode_step(cost, batch) * k`` bit
    for bit (the context terms are ``0.0 × context``, which adds nothing to a positive sum)."""
    m0, c0 = cost.fixed_s, cost.per_token_s * batch
    return m0 if m0 >= c0 else c0


def steps_to_reach(cost: StepCost, batch: int, context: int, wait: float, cap: int) -> int:
    """Fewest decode steps (≥ 1, ≤ ``cap``) whose total time reaches ``wait`` seconds.

    A constant decode step divides; otherwise the lower-bound binary search of
    ``numpy.searchsorted(total(1..cap), wait)`` runs on the same sums, one at a time.
    """
    if cost.is_constant_decode:
        one = decode_seconds(cost, batch, context, 1)
        return max(1, min(cap, math.ceil(wait / one)))
    low, high = 0, cap  # index i stands for i + 1 steps
    while low < high:
        middle = low + ((high - low) >> 1)
        if decode_seconds(cost, batch, context, middle + 1) < wait:
            low = middle + 1
        else:
            high = middle
    return min(cap, max(1, low + 1))

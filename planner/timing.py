"""How the capacity planner times a decode step when the roofline is not the model: the interface
a per-batch step time meets, and the largest batch within a TPOT target found by bisection.

:mod:`planner.capacity` takes any :class:`StepTiming` (the step model's adapter is
:class:`planner.serving.StepModelTiming`) and keeps the roofline's closed form for shapes typed
by hand, which have no config to build a step model from. This module imports nothing of the
planner, so the capacity equations stay free of the step model's imports.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal, Protocol

TimingModel = Literal["step model", "roofline"]


class StepTiming(Protocol):
    """A decode step's time from a model other than the roofline.

    ``step_s(batch, context)``: seconds of one decode step on one GPU of the replica for
    ``batch`` sequences of ``context`` cached tokens each; must not fall as ``batch`` grows (the
    bisection relies on it). ``prefill_s(prompt_tokens)``: seconds to prefill one prompt alone.
    ``describe(batch, context)``: a sentence of what the step's time is made of.
    ``label``: what produced the figures, shown beside them.
    """

    @property
    def label(self) -> str: ...

    def step_s(self, batch: int, context: float) -> float: ...

    def prefill_s(self, prompt_tokens: float) -> float: ...

    def describe(self, batch: int, context: float) -> str: ...


def largest_batch_within(step_s: Callable[[int], float], tpot_s: float, *, high: int) -> int:
    """The largest batch in [1, ``high``] whose ``step_s(batch)`` ≤ ``tpot_s`` (0 if batch 1
    already misses it), by bisection over a step time that does not fall with the batch:
    about log₂(high) evaluations instead of one per batch."""
    if not (tpot_s > 0 and math.isfinite(tpot_s)):
        raise ValueError(f"tpot_s must be a positive number, got {tpot_s!r}")
    if not (isinstance(high, int) and high >= 1):
        raise ValueError(f"high must be a positive integer, got {high!r}")
    if step_s(1) > tpot_s:
        return 0
    if step_s(high) <= tpot_s:
        return high
    good, bad = 1, high  # invariant: step_s(good) ≤ target < step_s(bad)
    while bad - good > 1:
        middle = (good + bad) // 2
        if step_s(middle) <= tpot_s:
            good = middle
        else:
            bad = middle
    return good

"""The largest batch within a TPOT target, by bisection, against step times written out here."""

from __future__ import annotations

import math

import pytest

from planner.timing import largest_batch_within


class Counted:
    """A step time of the batch that counts how often it is asked."""

    def __init__(self, step):
        self.step, self.calls = step, 0

    def __call__(self, batch: int) -> float:
        self.calls += 1
        return self.step(batch)


def test_a_linear_step_meets_the_target_up_to_the_hand_batch():
    # 2,000 µs + 10 µs per sequence: 5,000 µs holds (5,000 − 2,000) ÷ 10 = 300 sequences exactly
    step = Counted(lambda batch: 2000.0 + 10.0 * batch)
    assert largest_batch_within(step, 5000.0, high=1 << 20) == 300
    # about log₂(2²⁰) = 20 halvings, plus the two ends
    assert step.calls <= 20 + 2


def test_a_step_that_rises_in_stairs():
    # ⌊√B⌋ ms: 10 ms holds every batch up to 120 (⌊√121⌋ = 11)
    assert largest_batch_within(lambda batch: float(math.isqrt(batch)), 10.0, high=10_000) == 120


@pytest.mark.parametrize("target, expected", [
    (2009.0, 0),  # batch 1 takes 2,010 µs: not even one sequence
    (2010.0, 1),  # exactly on the target: one sequence
    (1e9, 4096),  # everything up to the top meets it
])
def test_the_ends(target, expected):
    assert largest_batch_within(lambda batch: 2000.0 + 10.0 * batch, target, high=4096) == expected


@pytest.mark.parametrize("target, high, field", [
    (0.0, 10, "tpot_s"), (math.nan, 10, "tpot_s"), (math.inf, 10, "tpot_s"),
    (1.0, 0, "high"), (1.0, 2.5, "high"),
])
def test_bad_targets_and_ranges_are_named(target, high, field):
    with pytest.raises(ValueError, match=field):
        largest_batch_within(lambda batch: 1.0, target, high=high)

"""The prefix-caching and sharing views' progress hooks: the same figures with and without one,
shares that climb to 1 at the steps the docstrings name, and a callback that raises stops the run."""

import numpy as np
import pytest

from simulation.explorer import SharingSettings, prefix_view, sharing_view
from simulation.memory import KvBudget
from simulation.prefix_workloads import PrefixScenario
from simulation.sharing import beam_search
from simulation.timeline import TimelineConfig

SCENARIO = PrefixScenario(requests=20, system_tokens=1000, user_tokens=50, output_tokens=20, rate=5.0)


def _config(tokens: int) -> TimelineConfig:
    return TimelineConfig(budget=KvBudget(tokens=tokens), max_context=8192, block_size=16)


def _same_prefix_views(a, b) -> None:
    assert a.result.prefix == b.result.prefix and a.result.completed == b.result.completed
    assert a.result.duration_s == b.result.duration_s and a.result.steps == b.result.steps
    np.testing.assert_array_equal(a.result.ttft_s, b.result.ttft_s)
    np.testing.assert_array_equal(a.result.series.token_states, b.result.series.token_states)
    assert (a.sweep_blocks, a.sweep_budgets) == (b.sweep_blocks, b.sweep_budgets)
    np.testing.assert_array_equal(a.sweep_hit_rate, b.sweep_hit_rate)
    np.testing.assert_array_equal(a.sweep_evictions, b.sweep_evictions)


# 400,000 slots: budgets of 100,000 and 400,000 at blocks 16, 64, 256. 1,500 slots: a quarter is
# 375, fewer than two 256-token blocks, so that sweep point is skipped (and counted done at once).
@pytest.mark.parametrize("tokens", [400_000, 1_500])
def test_prefix_view_reports_each_of_its_seven_runs_and_draws_the_same_figures(tokens):
    shares = []
    with_progress = prefix_view(SCENARIO, _config(tokens), 0, progress=shares.append)
    _same_prefix_views(with_progress, prefix_view(SCENARIO, _config(tokens), 0))
    # The run as set + 2 budgets × 3 block sizes = 7 equal parts; each ends at k / 7.
    assert np.all(np.diff(shares) >= 0) and 0 < shares[0] and shares[-1] == pytest.approx(1.0)
    for k in range(1, 8):
        assert np.isclose(shares, k / 7).any(), k


def test_a_value_error_raised_by_progress_in_the_sweep_stops_the_run():
    calls = []

    def progress(share):
        calls.append(share)
        if share > 1 / 7 and len([c for c in calls if c > 1 / 7]) == 1:
            # A sweep point's own ValueError only skips that point: this one must not be taken for it.
            raise ValueError("stop here")

    with pytest.raises(ValueError, match="stop here"):
        prefix_view(SCENARIO, _config(400_000), 0, progress=progress)
    assert calls[-1] > 1 / 7 and len([c for c in calls if c > 1 / 7]) == 1  # nothing ran after it


def test_sharing_view_reports_every_percent_of_each_scenario_and_draws_the_same_figures():
    settings = SharingSettings()  # 4 samples of 200 tokens, 4 beams for 200 steps, 20 requests
    shares = []
    assert sharing_view(settings, block_size=16, seed=3, progress=shares.append) == sharing_view(
        settings, block_size=16, seed=3)
    # 200 lockstep steps and 200 beam steps: every 2nd step (1 %), 100 calls each; 20 requests: each one.
    assert len(shares) == 100 + 100 + 20
    assert np.all(np.diff(shares) > 0) and shares[-1] == pytest.approx(1.0)


def test_beam_search_stops_where_progress_raises():
    rng, calls = np.random.default_rng(7), []

    def progress(share):
        calls.append(share)
        if share >= 0.5:
            raise KeyboardInterrupt  # any exception, even one that is not an Exception

    with pytest.raises(KeyboardInterrupt):
        beam_search(prompt_tokens=100, width=4, steps=400, block_size=16, rng=rng, progress=progress)
    # 400 steps report every 4th; the 50th call is at step 200, and each step drew one set of
    # parents: 200 draws were made, so the generator is where a fresh one is after 200 draws.
    assert len(calls) == 50 and calls[-1] == 0.5
    fresh = np.random.default_rng(7)
    beams = [1] + [4] * 199  # one beam before the first step, four after
    for n in beams:
        fresh.integers(0, n, size=4)
    assert rng.integers(0, 2**31) == fresh.integers(0, 2**31)

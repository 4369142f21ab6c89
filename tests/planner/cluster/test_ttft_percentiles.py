"""The M/D/1 waiting-time distribution (Erlang's) against hand calculations and a simulated
queue, and the TTFT percentiles the pools report from it."""

from __future__ import annotations

import math
from functools import partial

import numpy as np
import pytest

from planner.cluster.parallel import ParallelLayout
from planner.cluster.pools import plan_aggregated, plan_disaggregated
from planner.cluster.replica import MAX_WAIT_SERVICES, md1_wait_cdf, md1_wait_quantile_s, md1_wait_s
from support.cluster_toy import LOAD, T_S, TRANSFER
from support.cluster_toy import toy_spec

# The toy's figures are worked on the reference formula's budget (0.9 × 10 GB − 2 GB = 7 GB);
# the default budget, vLLM's memory profile, is checked in test_budget.py.
_spec = partial(toy_spec, budget="formula")

ONE = ParallelLayout()


def _bisect(f, low: float, high: float) -> float:
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if f(middle) < 0 else (low, middle)
    return high


def test_no_wait_with_probability_one_minus_rho():
    # P(W = 0) = 1 − ρ: an arrival finds the server idle.
    assert md1_wait_cdf(0.3, 1.0, 0.0) == pytest.approx(0.7, rel=1e-12)
    assert md1_wait_quantile_s(0.3, 1.0, 0.7) == 0.0 and md1_wait_quantile_s(0.05, 2.0, 0.9) == 0.0


def test_p90_within_the_first_service_time_by_hand():
    # On [0, D): P(W ≤ t) = (1 − ρ) e^{ρt/D}. At ρ = 0.2: 0.8 e^{0.2τ} = 0.9 → τ = 5 ln(9/8) = 0.5889.
    assert md1_wait_quantile_s(0.2, 1.0, 0.9) == pytest.approx(5 * math.log(9 / 8), rel=1e-9)
    assert md1_wait_quantile_s(0.2, 0.05, 0.9) == pytest.approx(0.05 * 5 * math.log(9 / 8), rel=1e-9)


def test_p90_within_the_second_service_time_by_hand():
    # On [D, 2D): P(W ≤ τD) = (1 − ρ)[e^{ρτ} − ρ(τ − 1) e^{ρ(τ − 1)}]. At ρ = 0.5, F(1) = 0.5 e^{0.5}
    # = 0.824 < 0.9 ≤ F(2) = 0.5 (e − 0.5 e^{0.5}) = 0.947, so p90 lies in [1, 2).
    rho = 0.5

    def two_terms(tau: float) -> float:
        return (1 - rho) * (math.exp(rho * tau) - rho * (tau - 1) * math.exp(rho * (tau - 1)))

    assert two_terms(1) < 0.9 <= two_terms(2)
    expected = _bisect(lambda tau: two_terms(tau) - 0.9, 1.0, 2.0)
    assert md1_wait_quantile_s(rho, 1.0, 0.9) == pytest.approx(expected, rel=1e-9)
    assert md1_wait_cdf(rho, 1.0, 1.5) == pytest.approx(two_terms(1.5), rel=1e-12)


def test_the_distribution_has_pollaczek_khinchines_mean():
    # E[W] = ∫ (1 − F) dt = ρD ÷ 2(1 − ρ); trapezoids of 1/200 of a service time up to 40 D.
    rho = 0.7
    grid = np.linspace(0.0, 40.0, 8001)
    tail = np.array([1 - md1_wait_cdf(rho, 1.0, float(t)) for t in grid])
    mean = float(np.sum((tail[1:] + tail[:-1]) / 2) * (grid[1] - grid[0]))
    assert mean == pytest.approx(md1_wait_s(rho, 1.0), rel=1e-4)


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_percentiles_match_a_simulated_queue(rho):
    # Lindley's recursion W_{n+1} = max(0, W_n + D − A_{n+1}) with exponential gaps of mean D/ρ,
    # solved at once: W_n = S_n − min(0, min_{k≤n} S_k) for the walk S of (D − A).
    rng = np.random.default_rng(20)
    steps = 1.0 - rng.exponential(1 / rho, 2_000_000)
    walk = np.cumsum(steps)
    waits = (walk - np.minimum(0.0, np.minimum.accumulate(walk)))[:-1][20_000:]  # past the warm-up
    for q, tolerance in ((0.9, 0.01), (0.99, 0.03)):
        assert md1_wait_quantile_s(rho, 1.0, q) == pytest.approx(float(np.quantile(waits, q)), rel=tolerance)


def test_near_saturation_the_percentile_is_not_computed_past_the_bound():
    # At ρ = 0.999 the p90 wait is ~1,150 service times (mean 499.5 D): past MAX_WAIT_SERVICES.
    assert md1_wait_quantile_s(0.999, 1.0, 0.9) is None
    with pytest.raises(ValueError):
        md1_wait_cdf(0.5, 1.0, (MAX_WAIT_SERVICES + 1) * 1.0)


@pytest.mark.parametrize("args", [(1.0, 1.0, 0.9), (-0.1, 1.0, 0.9), (0.5, 0.0, 0.9), (0.5, 1.0, 1.0),
                                  (0.5, 1.0, 0.0), (0.5, math.nan, 0.9)])
def test_bad_queues_are_refused(args):
    with pytest.raises(ValueError):
        md1_wait_quantile_s(*args)


def test_disaggregated_ttft_percentiles_add_prefill_and_transfer_to_the_wait():
    plan = plan_disaggregated(_spec(), LOAD, prefill=ONE, decode=ONE)
    rho = 2000 * T_S / 51  # 51 prefill replicas (tests/planner/cluster/test_pools.py)
    assert plan.ttft_p90_s == pytest.approx(T_S + TRANSFER + md1_wait_quantile_s(rho, T_S, 0.9), rel=1e-9)
    assert plan.ttft_p99_s == pytest.approx(T_S + TRANSFER + md1_wait_quantile_s(rho, T_S, 0.99), rel=1e-9)
    assert plan.ttft_s < plan.ttft_p90_s < plan.ttft_p99_s
    record = plan.as_record()
    assert record["ttft_p90_s"] == plan.ttft_p90_s and record["ttft_p99_s"] == plan.ttft_p99_s
    names = [t.name for t in plan.terms]
    assert names.index("TTFT") + 1 == names.index("TTFT p90") and "TTFT p99" in names


def test_aggregated_ttft_percentiles_use_the_prefilling_share():
    plan = plan_aggregated(_spec(), LOAD, layout=ONE)
    u = 2000 / 68 * T_S  # 68 replicas (tests/planner/cluster/test_pools.py), each prefilling u of its time
    assert plan.ttft_p90_s == pytest.approx(T_S + md1_wait_quantile_s(u, T_S, 0.9), rel=1e-9)
    assert plan.ttft_p99_s > plan.ttft_p90_s > plan.ttft_s


def test_without_a_ttft_target_no_percentile_is_claimed():
    load = type(LOAD)(rate_per_s=100, prompt_tokens=1000, output_tokens=100)
    plan = plan_disaggregated(_spec(), load, prefill=ONE, decode=ONE)
    assert plan.ttft_p90_s is None and plan.ttft_p99_s is None
    assert not any(t.name.startswith("TTFT p") for t in plan.terms)

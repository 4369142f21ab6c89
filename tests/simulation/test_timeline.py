"""Over-time simulation: hand-checked small runs, conservation, preemption, the shared trace."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulation.memory import KvBudget
from simulation.timeline import TimelineConfig, _paged_sums, run_timeline
from simulation.traces import load_trace_csv
from simulation.workloads import Workload, poisson_arrivals, preset
from support.paths import trace


@settings(max_examples=200, deadline=None)
@given(length=st.integers(1, 500), extra=st.integers(0, 500), steps=st.integers(1, 500),
       block=st.integers(1, 64))
def test_closed_form_integrals_match_step_by_step(length, extra, steps, block):
    final = length + extra + steps  # the request does not finish before the jump ends
    lengths = np.arange(length + 1, length + steps + 1)
    held = -(-lengths // block) * block
    held_sum, filled_sum = _paged_sums(np.array([length]), np.array([final]), steps, block)
    assert held_sum == held.sum()
    assert filled_sum == np.minimum(held, final).sum()


def _one_request(prompt, output, **config):
    workload = Workload(prompt_tokens=np.array([prompt]), output_tokens=np.array([output]),
                        arrival_s=np.array([0.0]))
    return run_timeline(workload, TimelineConfig(max_context=4096, **config))


def test_single_request_by_hand():
    # Prefill 1,000 tokens at 10,000 tokens/s = 0.1 s, then 100 steps of 0.02 s = 2 s.
    result = _one_request(1000, 100, budget=KvBudget(tokens=10_000), decode_step_s=0.02,
                          prefill_tokens_per_s=10_000)
    assert result.completed == 1 and result.preemptions == 0
    assert result.duration_s == pytest.approx(2.1)
    assert result.mean_wait_s == 0
    # Tokens: 1,000 during prefill (0.1 s), then 1,001 … 1,100 for 0.02 s each.
    token_seconds = 1000 * 0.1 + 0.02 * sum(range(1001, 1101))
    assert result.token_state_fraction == pytest.approx(token_seconds / 2.1 / 10_000)
    assert result.mean_batch_size == pytest.approx(1.0)
    assert result.breakdown.total == pytest.approx(10_000)


def test_contiguous_max_reserves_the_context_for_the_whole_run():
    result = _one_request(100, 100, budget=KvBudget(tokens=8192), allocation="contiguous-max",
                          decode_step_s=0.01, prefill_tokens_per_s=1e9)
    breakdown = result.breakdown
    # The 4,096-slot chunk is held throughout: 200 of it will hold tokens, 3,896 never.
    assert breakdown.internal_fragmentation == pytest.approx(4096 - 200, rel=1e-6)
    assert breakdown.allocated == pytest.approx(4096, rel=1e-6)


def test_contiguous_queues_and_paged_preempts_on_a_tight_budget():
    rng = np.random.default_rng(0)
    workload = preset("ShareGPT").spec.generate(400, rng)
    workload = workload.with_arrivals(poisson_arrivals(workload.size, 20.0, rng))
    budget = KvBudget(tokens=8192)
    paged = run_timeline(workload, TimelineConfig(budget=budget, max_context=2048))
    contiguous = run_timeline(workload, TimelineConfig(budget=budget, max_context=2048,
                                                       allocation="contiguous-max"))
    assert paged.completed == contiguous.completed == 400
    assert contiguous.preemptions == 0
    assert paged.preemptions > 0 and paged.recomputed_tokens > 0 and paged.swapped_tokens == 0
    # Four 2,048-slot reservations at most: a batch of ≤ 4 and long waits.
    assert contiguous.series.batch_size.max() <= 4
    assert paged.mean_batch_size > 2 * contiguous.mean_batch_size
    assert paged.mean_wait_s < contiguous.mean_wait_s
    assert paged.breakdown.token_share_of_used > 0.9 > 0.3 > contiguous.breakdown.token_share_of_used
    swap = run_timeline(workload, TimelineConfig(budget=budget, max_context=2048, preemption="swap"))
    assert swap.swapped_tokens > 0 and swap.recomputed_tokens == 0
    for result in (paged, contiguous, swap):
        assert result.breakdown.total == pytest.approx(budget.tokens)
        series = result.series
        total = (series.token_states + series.reservation + series.internal_fragmentation
                 + series.external_fragmentation + series.free)
        np.testing.assert_allclose(total, budget.tokens)


def test_buddy_holes_show_as_external_fragmentation():
    rng = np.random.default_rng(1)
    workload = preset("ShareGPT").spec.generate(300, rng)
    workload = workload.with_arrivals(poisson_arrivals(workload.size, 10.0, rng))
    result = run_timeline(workload, TimelineConfig(budget=KvBudget(tokens=12_000), max_context=2048,
                                                   allocation="contiguous-oracle"))
    assert result.breakdown.external_fragmentation > 0
    assert result.series.external_fragmentation.max() > 0


def test_requests_larger_than_the_budget_are_rejected_not_deadlocked():
    workload = Workload(prompt_tokens=np.array([10, 5000, 10]), output_tokens=np.array([5, 5, 5]),
                        arrival_s=np.array([0.0, 0.1, 0.2]))
    result = run_timeline(workload, TimelineConfig(budget=KvBudget(tokens=1000), max_context=8192))
    assert result.completed == 2 and result.rejected == 1
    assert np.isnan(result.wait_s[1])


def test_needs_arrivals():
    workload = Workload(prompt_tokens=np.array([10]), output_tokens=np.array([5]))
    with pytest.raises(ValueError, match="arrival"):
        run_timeline(workload, TimelineConfig(budget=KvBudget(tokens=100), max_context=64))


def test_whole_conversation_trace_with_a_paged_pool():
    workload = load_trace_csv(trace("splitwise_conv.csv"))
    calls = []
    result = run_timeline(workload, TimelineConfig(budget=KvBudget(tokens=400_000), max_context=16_384),
                          progress=calls.append)
    assert result.completed == 19_366
    assert calls[-1] == 1.0 and len(calls) > 10
    assert 0 < result.token_state_fraction < 1
    # Little's law: mean batch = arrival rate × time running. A request runs for its decode steps
    # (211 tokens × 25 ms on average) stretched by the prefill stalls of everyone (prompt tokens
    # at 30k tokens/s: ~21 % of the run), so ≈ 5.5/s × 5.3 s / 0.79 ≈ 37.
    rate = workload.size / result.duration_s
    decode_s = workload.output_tokens.mean() * result.config.decode_step_s
    stalled = workload.prompt_tokens.sum() / result.config.prefill_tokens_per_s / result.duration_s
    assert result.mean_batch_size == pytest.approx(rate * decode_s / (1 - stalled), rel=0.05)


@pytest.mark.parametrize("allocation, preemption", [("paged", "recompute"), ("paged", "swap"),
                                                    ("contiguous-pow2", "recompute")])
def test_jumps_equal_step_by_step_simulation(monkeypatch, allocation, preemption):
    """The event jumps and their closed-form integrals give what one step at a time gives."""
    import simulation.timeline as timeline

    rng = np.random.default_rng(11)
    workload = Workload(prompt_tokens=rng.integers(1, 300, 150), output_tokens=rng.integers(1, 200, 150),
                        arrival_s=np.sort(rng.uniform(0, 30, 150)))
    config = TimelineConfig(budget=KvBudget(tokens=3000), max_context=512, allocation=allocation,
                            preemption=preemption, block_size=16, max_batch=12)
    jumped = run_timeline(workload, config)
    monkeypatch.setattr(timeline, "_JUMP_LIMIT", 1)
    stepped = run_timeline(workload, config)
    assert jumped.completed == stepped.completed == 150
    assert jumped.preemptions == stepped.preemptions
    if allocation == "paged":
        assert jumped.preemptions > 0  # the budget is tight enough to exercise preemption
    assert jumped.duration_s == pytest.approx(stepped.duration_s, rel=1e-9)
    np.testing.assert_allclose(jumped.wait_s, stepped.wait_s, rtol=1e-9, atol=1e-9)
    for part in ("token_states", "reservation", "internal_fragmentation", "external_fragmentation", "free"):
        assert getattr(jumped.breakdown, part) == pytest.approx(getattr(stepped.breakdown, part), rel=1e-9, abs=1e-6)
    assert jumped.mean_batch_size == pytest.approx(stepped.mean_batch_size, rel=1e-9)


def test_block_accounting_balances_after_a_run_with_preemptions():
    """Every block taken (admission, growth) is given back (completion, preemption)."""
    from simulation.timeline import _Simulation

    rng = np.random.default_rng(5)
    workload = Workload(prompt_tokens=rng.integers(1, 400, 300), output_tokens=rng.integers(1, 400, 300),
                        arrival_s=np.sort(rng.uniform(0, 20, 300)))
    simulation = _Simulation(workload, TimelineConfig(budget=KvBudget(tokens=4000), max_context=1024,
                                                      block_size=16), None)
    result = simulation.run()
    assert result.preemptions > 0
    assert simulation.free_blocks == simulation.total_blocks == 4000 // 16
    # The time series never holds more than the budget, and memory held is whole blocks.
    series = result.series
    held = series.token_states + series.reservation + series.internal_fragmentation
    assert held.max() <= 4000 and np.all(held % 16 == 0)

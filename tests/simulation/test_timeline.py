"""Over-time simulation: hand-checked small runs, the scheduler's limits, conservation, preemption."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simulation.engine as engine
from simulation.engine import Engine
from simulation.engine_sums import paged_sums
from simulation.memory import KvBudget
from simulation.step_cost import StepCost
from simulation.timeline import TimelineConfig, run_timeline
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
    held_sum, filled_sum = paged_sums(np.array([length]), np.array([final]), steps, block)
    assert held_sum == held.sum()
    assert filled_sum == np.minimum(held, final).sum()


def _one_request(prompt, output, **config):
    workload = Workload(prompt_tokens=np.array([prompt]), output_tokens=np.array([output]),
                        arrival_s=np.array([0.0]))
    return run_timeline(workload, TimelineConfig(max_context=4096, **config))


def test_single_request_by_hand():
    # The prefill step computes 1,000 tokens at 10,000 tokens/s = 0.1 s (longer than a 0.02 s
    # decode step) and yields the first token; 99 decode steps of 0.02 s give the other 99.
    result = _one_request(1000, 100, budget=KvBudget(tokens=10_000),
                          step_cost=StepCost.constant(decode_step_s=0.02, prefill_tokens_per_s=10_000))
    assert result.completed == 1 and result.preemptions == 0 and result.steps == 100
    assert result.duration_s == pytest.approx(0.1 + 99 * 0.02)
    assert result.mean_wait_s == 0
    assert result.mean_ttft_s == pytest.approx(0.1)
    assert result.mean_tpot_s == pytest.approx(0.02)
    # Slots: 1,001 during the prefill step (the prompt and the first token), then 1,002 … 1,100.
    token_seconds = 1001 * 0.1 + 0.02 * sum(range(1002, 1101))
    assert result.token_state_fraction == pytest.approx(token_seconds / 2.08 / 10_000)
    assert result.mean_batch_size == pytest.approx(1.0)
    assert result.breakdown.total == pytest.approx(10_000)


def test_contiguous_max_reserves_the_context_for_the_whole_run():
    result = _one_request(100, 100, budget=KvBudget(tokens=8192), allocation="contiguous-max",
                          step_cost=StepCost.constant(decode_step_s=0.01, prefill_tokens_per_s=1e9))
    breakdown = result.breakdown
    # The 4,096-slot chunk is held throughout: 200 of it will hold tokens, 3,896 lie beyond the
    # final length (internal fragmentation); 4,096 is a power of two, so no buddy rounding.
    assert breakdown.internal_fragmentation == pytest.approx(4096 - 200, rel=1e-6)
    assert breakdown.token_states + breakdown.reservation == pytest.approx(200, rel=1e-6)
    assert breakdown.external_fragmentation == 0
    assert breakdown.free == pytest.approx(8192 - 4096)


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
    assert swap.swapped_tokens > 0
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
    oracle = run_timeline(workload, TimelineConfig(budget=KvBudget(tokens=12_000), max_context=2048,
                                                   allocation="contiguous-oracle"))
    assert oracle.breakdown.external_fragmentation > 0
    assert oracle.series.external_fragmentation.max() > 0
    assert oracle.breakdown.internal_fragmentation == 0  # Oracle never reserves beyond the final length
    first_fit = run_timeline(workload, TimelineConfig(budget=KvBudget(tokens=12_000), max_context=2048,
                                                      allocation="contiguous-oracle", address_space="first-fit"))
    # No rounding with first fit: what remains external is holes too small for the head.
    assert first_fit.breakdown.external_fragmentation < oracle.breakdown.external_fragmentation


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


def test_max_num_seqs_caps_the_batch_and_the_token_budget_must_hold_it():
    rng = np.random.default_rng(2)
    workload = preset("Alpaca").spec.generate(500, rng)
    workload = workload.with_arrivals(poisson_arrivals(workload.size, 200.0, rng))
    capped = run_timeline(workload, TimelineConfig(budget=KvBudget(tokens=10**6), max_context=2048, max_num_seqs=8))
    free = run_timeline(workload, TimelineConfig(budget=KvBudget(tokens=10**6), max_context=2048))
    assert capped.series.batch_size.max() == 8 and capped.mean_batch_size <= 8
    assert free.series.batch_size.max() > 8 and capped.mean_wait_s > free.mean_wait_s
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        TimelineConfig(budget=KvBudget(tokens=100), max_context=64, max_num_seqs=300, max_num_batched_tokens=256)


def test_chunked_prefill_splits_a_long_prompt_by_hand():
    # A decodes alone in 0.01 s steps; B (4,000-token prompt) arrives at 1.005 s and is admitted
    # when the step in progress ends (1.01 s). Each step then has 1,024 tokens: A's one plus a
    # 1,023-token chunk of B, at 10⁵ tokens/s = 10.24 ms; B's last chunk is 4,000 − 3 × 1,023 =
    # 931 tokens (9.32 ms of compute, so the 10 ms decode floor). TTFT = 0.005 + 3 × 0.01024 + 0.01.
    workload = Workload(prompt_tokens=np.array([10, 4000]), output_tokens=np.array([400, 5]),
                        arrival_s=np.array([0.0, 1.005]))
    cost = StepCost.constant(decode_step_s=0.01, prefill_tokens_per_s=1e5)
    chunked = run_timeline(workload, TimelineConfig(budget=KvBudget(tokens=10**5), max_context=4096,
                                                    step_cost=cost, max_num_batched_tokens=1024))
    assert chunked.wait_s[1] == pytest.approx(0.005, abs=1e-9)
    assert chunked.ttft_s[1] == pytest.approx(0.005 + 3 * 0.01024 + 0.01, abs=1e-9)
    # Without chunking B's prompt goes in one step of 4,001 tokens (40.01 ms), A waiting on it.
    whole = run_timeline(workload, TimelineConfig(budget=KvBudget(tokens=10**5), max_context=4096,
                                                  step_cost=cost, max_num_batched_tokens=4096,
                                                  chunked_prefill=False))
    assert whole.ttft_s[1] == pytest.approx(0.005 + 0.04001, abs=1e-9)
    assert whole.tpot_s[0] > chunked.tpot_s[0] - 1e-12


def test_whole_conversation_trace_batch_is_the_sum_of_residence_times():
    workload = load_trace_csv(trace("splitwise_conv.csv"))
    calls = []
    result = run_timeline(workload, TimelineConfig(budget=KvBudget(tokens=400_000), max_context=16_384),
                          progress=calls.append)
    assert result.completed == 19_366 and result.preemptions == 0
    assert calls[-1] == 1.0 and len(calls) > 10
    assert 0 < result.token_state_fraction < 1
    # Little's law, exactly: the time-averaged batch is the total time requests spend running
    # (admission to last token) over the run's length.
    output = workload.output_tokens
    running = (result.ttft_s - result.wait_s) + np.where(output > 1, result.tpot_s * (output - 1), 0)
    assert result.mean_batch_size == pytest.approx(running.sum() / result.duration_s, rel=1e-6)


@pytest.mark.parametrize("allocation, preemption, cost", [
    ("paged", "recompute", StepCost.constant()), ("paged", "swap", StepCost.constant()),
    ("contiguous-pow2", "recompute", StepCost.constant()),
    ("paged", "recompute", StepCost(fixed_s=0.01, per_context_token_s=2e-6, per_token_s=1e-4,
                                    per_attention_pair_s=1e-8)),
])
def test_jumps_equal_step_by_step_simulation(monkeypatch, allocation, preemption, cost):
    """The event jumps and their closed-form integrals give what one step at a time gives (a
    step time that grows with the context is exact in time, and its integrals take the jump's
    mean step: within 0.1 % of the budget)."""
    rng = np.random.default_rng(11)
    workload = Workload(prompt_tokens=rng.integers(1, 300, 150), output_tokens=rng.integers(1, 200, 150),
                        arrival_s=np.sort(rng.uniform(0, 30, 150)))
    config = TimelineConfig(budget=KvBudget(tokens=3000), max_context=512, allocation=allocation,
                            preemption=preemption, block_size=16, max_num_seqs=12, step_cost=cost)
    jumped = run_timeline(workload, config)
    monkeypatch.setattr(engine, "JUMP_LIMIT", 1)
    stepped = run_timeline(workload, config)
    exact = cost.is_constant_decode
    rel, slots = (1e-9, 1e-6) if exact else (1e-3, 1e-3 * 3000)  # within 0.1 % of the budget
    assert jumped.completed == stepped.completed == 150
    assert jumped.preemptions == stepped.preemptions
    if allocation == "paged":
        assert jumped.preemptions > 0  # the budget is tight enough to exercise preemption
    assert jumped.duration_s == pytest.approx(stepped.duration_s, rel=1e-9)
    np.testing.assert_allclose(jumped.wait_s, stepped.wait_s, rtol=1e-9, atol=1e-9)
    for part in ("token_states", "reservation", "internal_fragmentation", "external_fragmentation", "free"):
        assert getattr(jumped.breakdown, part) == pytest.approx(getattr(stepped.breakdown, part), rel=rel, abs=slots)
    assert jumped.mean_batch_size == pytest.approx(stepped.mean_batch_size, rel=rel)


def test_block_accounting_balances_after_a_run_with_preemptions():
    """Every block taken (admission, growth) is given back (completion, preemption)."""
    rng = np.random.default_rng(5)
    workload = Workload(prompt_tokens=rng.integers(1, 400, 300), output_tokens=rng.integers(1, 400, 300),
                        arrival_s=np.sort(rng.uniform(0, 20, 300)))
    run = Engine(workload, TimelineConfig(budget=KvBudget(tokens=4000), max_context=1024, block_size=16), None)
    result = run.run()
    assert result.preemptions > 0
    assert run.pool.free == run.total_blocks == 4000 // 16
    # The time series never holds more than the budget, and memory held is whole blocks.
    series = result.series
    held = series.token_states + series.reservation + series.internal_fragmentation
    assert held.max() <= 4000 and np.all(held % 16 == 0)

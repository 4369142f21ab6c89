"""The event engine against slower references: its scalar step times against the array model,
its running totals against sums over the batch, its jumps against one step at a time, and its
figures against those the step-by-step engine it replaced printed for the same runs."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simulation.engine as engine
from simulation.engine_batch import tail_sum
from simulation.engine_cost import decode_seconds, steps_to_reach
from simulation.memory import KvBudget
from simulation.prefix_workloads import PrefixScenario, prefix_workload
from simulation.step_cost import StepCost
from simulation.timeline import CpuTierConfig, TimelineConfig, run_timeline
from simulation.workloads import Workload

ROOFLINE = StepCost(fixed_s=0.01, per_context_token_s=2e-6, per_token_s=1e-4, per_attention_pair_s=1e-8)
coefficient = st.one_of(st.just(0.0), st.floats(1e-12, 1e-2))


@settings(max_examples=300, deadline=None)
@given(fixed=st.floats(1e-4, 1.0), per_context=coefficient, per_token=coefficient, per_pair=coefficient,
       batch=st.integers(1, 4096), context=st.integers(0, 10**8), steps=st.integers(1, 100_000))
def test_scalar_decode_seconds_is_the_array_model_bit_for_bit(fixed, per_context, per_token, per_pair, batch,
                                                               context, steps):
    cost = StepCost(fixed_s=fixed, per_context_token_s=per_context, per_token_s=per_token,
                    per_attention_pair_s=per_pair)
    assert decode_seconds(cost, batch, context, steps) == cost.decode_seconds(batch=batch, context=context,
                                                                               steps=steps)


@settings(max_examples=200, deadline=None)
@given(per_context=coefficient, per_pair=coefficient, batch=st.integers(1, 512), context=st.integers(0, 10**6),
       cap=st.integers(1, 3000), wait=st.floats(1e-6, 100.0))
def test_steps_to_reach_is_the_array_search(per_context, per_pair, batch, context, cap, wait):
    cost = StepCost(fixed_s=0.01, per_context_token_s=per_context, per_token_s=1e-5, per_attention_pair_s=per_pair)
    # The array search the engine ran before: every step count's total, searched at once.
    if cost.is_constant_decode:
        one = cost.decode_seconds(batch=batch, context=context, steps=1)
        expected = max(1, min(cap, math.ceil(wait / one)))
    else:
        total = cost.decode_seconds(batch=batch, context=context, steps=np.arange(1, cap + 1))
        expected = int(min(cap, max(1, np.searchsorted(total, wait) + 1)))
    assert steps_to_reach(cost, batch, context, wait, cap) == expected


def test_tail_sum_by_hand():
    # Blocks of 4, a tail of 1 empty slot, 6 steps: tails 0, 3, 2, 1, 0, 3 after each step = 9.
    assert tail_sum(1, 6, 4) == 9
    # A full block (tail 0), 4 steps of blocks of 4: 3, 2, 1, 0 = 6 = B(B − 1)/2, one whole period.
    assert tail_sum(0, 4, 4) == 6


@settings(max_examples=300, deadline=None)
@given(block=st.integers(1, 64), data=st.data())
def test_tail_sum_is_the_step_by_step_sum(block, data):
    tail = data.draw(st.integers(0, block - 1))
    steps = data.draw(st.integers(0, 400))
    assert tail_sum(tail, steps, block) == sum((tail - j) % block for j in range(1, steps + 1))


def _small(seed: int) -> Workload:
    rng = np.random.default_rng(seed)
    return Workload(prompt_tokens=rng.integers(1, 300, 300), output_tokens=rng.integers(1, 200, 300),
                    arrival_s=np.sort(rng.uniform(0, 15, 300)))


def _tight(**config) -> TimelineConfig:
    return TimelineConfig(budget=KvBudget(tokens=3000, per_token_bytes=1000), max_context=512, **config)


EQUIVALENCE_CASES = {
    "paged recompute": dict(block_size=16, max_num_seqs=12),
    "paged swap, roofline, blocks of 7": dict(block_size=7, max_num_seqs=12, preemption="swap", step_cost=ROOFLINE),
    "paged, blocks of 1": dict(block_size=1, max_num_seqs=12),
    "prefix caching": dict(block_size=16, max_num_seqs=12, prefix_caching=True),
    "CPU tier, swap": dict(block_size=16, max_num_seqs=12, preemption="swap",
                           cpu_tier=CpuTierConfig(gib=0.0001, link_gbps=1.0)),
    "chunks of 64": dict(max_num_batched_tokens=64, max_num_seqs=16),
    "whole prompts": dict(chunked_prefill=False, max_num_batched_tokens=512, max_num_seqs=8),
    "contiguous max": dict(allocation="contiguous-max", max_num_seqs=12),
    "contiguous pow2, first fit": dict(allocation="contiguous-pow2", address_space="first-fit", step_cost=ROOFLINE),
}


@pytest.mark.parametrize("name", EQUIVALENCE_CASES)
def test_jumps_with_checked_totals_equal_step_by_step(monkeypatch, name):
    """Every step checks the batch's running totals against sums over its requests; the jumps give
    the counts of one step at a time exactly, and its times to rounding (a roofline step's
    integrals take the jump's mean step, within 0.1 % of the budget)."""
    monkeypatch.setattr(engine, "VERIFY_TOTALS", True)
    config = _tight(**EQUIVALENCE_CASES[name])
    jumped = run_timeline(_small(3), config)
    monkeypatch.setattr(engine, "JUMP_LIMIT", 1)
    stepped = run_timeline(_small(3), config)
    for field in ("completed", "rejected", "steps", "preemptions", "recomputed_tokens", "swapped_tokens", "prefix"):
        assert getattr(jumped, field) == getattr(stepped, field), field
    assert jumped.completed == 300
    assert jumped.duration_s == pytest.approx(stepped.duration_s, rel=1e-9)
    np.testing.assert_allclose(jumped.ttft_s, stepped.ttft_s, rtol=1e-9)
    exact = config.step_cost.is_constant_decode
    for part in ("token_states", "reservation", "internal_fragmentation", "external_fragmentation", "free"):
        assert getattr(jumped.breakdown, part) == pytest.approx(
            getattr(stepped.breakdown, part), rel=1e-9 if exact else 1e-3, abs=1e-6 if exact else 3.0), part


# Figures the step-by-step engine (one NumPy pass over the batch per step) gave for these runs,
# before the event engine replaced it: (steps, preemptions, recomputed, swapped, duration s,
# mean batch, token states, reservation, internal fragmentation, external fragmentation, Σ wait s).
PINNED = {
    "paged recompute, blocks of 16": (
        dict(seed=0, block_size=16, max_num_seqs=12),
        (2787, 51, 10419, 0, 69.7484912248284, 11.030704557034529, 2513.5077751702456, 78.0622620559584,
         4.563539574981405, 8.0, 7425.0426154389315)),
    "paged swap, roofline, blocks of 7": (
        dict(seed=1, block_size=7, max_num_seqs=12, preemption="swap", step_cost=ROOFLINE),
        (2661, 25, 0, 10254, 41.579580225969366, 11.293329365954484, 2510.4868323277165, 32.92250602388367,
         0.9064114802304175, 4.0, 3730.5099292190957)),
    "contiguous pow2, first fit, roofline": (
        dict(seed=2, allocation="contiguous-pow2", address_space="first-fit", step_cost=ROOFLINE),
        (4124, 0, 0, 0, 56.2356282651811, 7.053535176303817, 1526.59820840153, 458.13858361465145,
         413.2815265464005, 534.5399163633437, 6201.540873255677)),
    "prefix caching after preemptions": (
        dict(seed=0, block_size=16, max_num_seqs=12, prefix_caching=True),
        (2787, 51, 3267, 0, 69.7484912248284, 11.030704557034529, 2513.5077751702456, 78.0622620559584,
         4.563539574981405, 8.0, 7425.0426154389315)),
}


def _figures(result) -> tuple:
    b = result.breakdown
    return (result.steps, result.preemptions, result.recomputed_tokens, result.swapped_tokens, result.duration_s,
            result.mean_batch_size, b.token_states, b.reservation, b.internal_fragmentation,
            b.external_fragmentation, float(result.wait_s.sum()))


@pytest.mark.parametrize("name", PINNED)
def test_figures_equal_the_step_by_step_engine(name):
    settings_, expected = PINNED[name]
    settings_ = dict(settings_)
    workload = _small(settings_.pop("seed"))
    config = TimelineConfig(budget=KvBudget(tokens=3000), max_context=512, **settings_)
    assert _figures(run_timeline(workload, config)) == expected


def test_prefix_conversations_with_a_cpu_tier_equal_the_step_by_step_engine():
    scenario = PrefixScenario(requests=400, system_tokens=1000, user_tokens=200, output_tokens=200, rate=5.0,
                              turns=4, prefixes=2)
    config = TimelineConfig(budget=KvBudget(tokens=20_000, per_token_bytes=160 * 1024), max_context=32_768,
                            prefix_caching=True, cpu_tier=CpuTierConfig(gib=0.5))
    result = run_timeline(prefix_workload(scenario, np.random.default_rng(0)), config)
    b, prefix = result.breakdown, result.prefix
    assert (result.steps, result.preemptions, result.recomputed_tokens) == (4610, 48, 730)
    assert (prefix.hit_tokens, prefix.evictions, prefix.cached_blocks_peak, prefix.cpu_loaded_tokens) == (
        397360, 25240, 1239, 23536)
    assert (result.duration_s, result.mean_batch_size, b.token_states, b.reservation, b.internal_fragmentation) == (
        122.74847886293328, 17.253350220922847, 17849.353992315187, 128.67889845411628, 6.76737386134846)
    assert float(result.ttft_s.sum()) == 4719.633975908325

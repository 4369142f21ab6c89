"""The event engine against slower references: its scalar step times against the array model,
its running totals against sums over the batch, its jumps against one step at a time, and its
figures against those the step-by-step engine it replaced printed for the same runs."""

import dataclasses
import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simulation.engine as engine
from simulation.block_pool import CachingPool, OwnBlockPool
from simulation.content import unique_content
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
    config.setdefault("budget", KvBudget(tokens=3000, per_token_bytes=1000))
    return TimelineConfig(max_context=512, **config)


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


# ---- the engine's fast paths against its general code ------------------------------------------

def _assert_identical(left, right, path="result"):
    """Every field of two results equal: numbers exactly, arrays element by element (NaN = NaN)."""
    if dataclasses.is_dataclass(left):
        assert type(left) is type(right), path
        for field in dataclasses.fields(left):
            _assert_identical(getattr(left, field.name), getattr(right, field.name), f"{path}.{field.name}")
    elif isinstance(left, np.ndarray):
        assert left.dtype == right.dtype and np.array_equal(left, right, equal_nan=True), path
    elif isinstance(left, float) and math.isnan(left):
        assert math.isnan(right), path
    else:
        assert type(left) is type(right) and left == right, (path, left, right)


def _conversations(seed: int) -> Workload:
    scenario = PrefixScenario(requests=240, system_tokens=120, user_tokens=40, output_tokens=50, rate=8.0, turns=4,
                              think_s=1.0)
    return prefix_workload(scenario, np.random.default_rng(seed))


# Cases the lane (engine_lane) runs for most of their steps: small batches that fill, tight
# budgets that preempt, conversations whose next turns arrive at completions.
LANE_CASES = {
    **{name: (_small, settings_) for name, settings_ in EQUIVALENCE_CASES.items()},
    "paged, roomy": (_small, dict(budget=KvBudget(tokens=40_000), max_num_seqs=12)),
    "prefix caching, roomy, roofline": (_small, dict(budget=KvBudget(tokens=40_000), max_num_seqs=12,
                                                     prefix_caching=True, step_cost=ROOFLINE)),
    "conversations": (_conversations, dict(budget=KvBudget(tokens=40_000), max_num_seqs=6)),
    "conversations, tight, swap": (_conversations, dict(budget=KvBudget(tokens=1200), max_num_seqs=6,
                                                        preemption="swap")),
}


def _lane_run(name: str, seed: int):
    make, settings_ = LANE_CASES[name]
    workload, config = make(seed), _tight(**settings_)
    lane_runs = engine.Engine(workload, config, None)
    expected = lane_runs.paged and not lane_runs.per_block  # the engine's own condition for the lane
    return run_timeline(workload, config, progress=(calls := []).append), calls, expected


@pytest.mark.parametrize("name", LANE_CASES)
def test_the_lane_gives_the_general_loops_figures(monkeypatch, name):
    lane_steps = []
    run_lane = engine.run_lane

    def counted(e, *args):
        before = e.steps
        run_lane(e, *args)
        lane_steps.append(e.steps - before)

    monkeypatch.setattr(engine, "run_lane", counted)
    fast, fast_progress, expected = _lane_run(name, 4)
    monkeypatch.setattr(engine, "LANE", False)
    general, general_progress, _ = _lane_run(name, 4)
    _assert_identical(fast, general)
    assert fast_progress == general_progress and fast_progress[-1] == 1.0
    # The lane ran most steps where it can: the comparison is not of one path with itself.
    assert sum(lane_steps) > fast.steps / 20 if expected else not lane_steps


@pytest.mark.parametrize("settings_", [dict(max_num_seqs=12), dict(max_num_seqs=12, block_size=1),
                                       dict(max_num_seqs=12, block_size=7, step_cost=ROOFLINE),
                                       dict(budget=KvBudget(tokens=40_000), max_num_seqs=20)],
                         ids=["blocks of 16", "blocks of 1", "blocks of 7, roofline", "roomy"])
def test_own_block_pool_gives_the_per_block_pools_figures(monkeypatch, settings_):
    """Prefix caching where only a request's own blocks can hit (after a preemption): OwnBlockPool's
    runs (and the lane, which runs with it) against CachingPool's blocks and hashes."""
    config = _tight(prefix_caching=True, **settings_)
    fast = run_timeline(_small(5), config)
    monkeypatch.setattr(engine, "OWN_BLOCK_POOL", False)
    per_block = run_timeline(_small(5), config)
    _assert_identical(fast, per_block)
    assert fast.prefix.evictions > 0
    if "budget" not in settings_:
        assert fast.preemptions > 0 and fast.prefix.readmission_hit_tokens > 0  # readmissions hit their blocks


def test_prompts_that_share_nothing_cache_alike_with_or_without_content():
    """A workload whose content says every prompt is its own runs on the per-block pool (it has
    content); without content it runs on OwnBlockPool: the same hashes, the same figures."""
    workload = _small(6)
    config = _tight(prefix_caching=True, max_num_seqs=12)
    with_content = run_timeline(replace(workload, content=unique_content(workload.size)), config)
    _assert_identical(run_timeline(workload, config), with_content)


def test_own_block_pool_by_hand():
    # 6 blocks. A takes 3 and registers 2 (its 3rd block is its partial tail); B takes 2, none full.
    pool = OwnBlockPool(6)
    pool.take(3)
    pool.take(2)
    pool.release(0, 3, 2)  # queue: [1 free never cached] [A: tail, then 2 cached]
    pool.release(1, 2, 0)  # [B: 2 uncached]
    assert (pool.free, pool.cached_free, pool.cached_of(0), pool.cached_of(1)) == (6, 2, 2, 0)
    pool.take(2)  # the never-cached block, then A's uncached tail: nothing evicted
    assert (pool.free, pool.evictions, pool.cached_of(0)) == (4, 0, 2)
    pool.take(1)  # A's last cached block goes first: A keeps its first block cached
    assert (pool.free, pool.evictions, pool.cached_free, pool.cached_of(0)) == (3, 1, 1, 1)
    pool.touch(0, 1)  # A readmitted: its cached block leaves the queue, B's two stay
    assert (pool.free, pool.cached_free, pool.cached_of(0)) == (2, 0, 0)
    pool.take(2)
    assert (pool.free, pool.evictions) == (0, 1)
    with pytest.raises(RuntimeError):
        pool.take(1)


def test_own_block_pool_follows_caching_pool_through_the_same_requests():
    """The same admissions, readmission hits and releases on both pools (a request's hashes are
    its own): equal counts after every operation."""
    rng = np.random.default_rng(0)
    own, per_block = OwnBlockPool(64), CachingPool(64)
    readmitted = 0
    tables: dict[int, tuple[list[int], int]] = {}  # running request → (its blocks in CachingPool, hits)
    for _ in range(600):
        request = int(rng.integers(0, 12))
        if request in tables:  # release it with its first `full` blocks registered (its hits at least)
            table, hit_count = tables.pop(request)
            full = int(rng.integers(hit_count, len(table) + 1))
            for index in range(full):
                per_block.cache(table[index], hash((request, index)))
            own.release(request, len(table), full)
            per_block.release(table)
        else:  # admit it: its cached blocks hit, then new ones
            hits = per_block.lookup([hash((request, index)) for index in range(64)])
            assert len(hits) == own.cached_of(request)
            new = int(rng.integers(1, 6))
            if new > per_block.free - per_block.evictable(hits):
                continue
            if hits:
                own.touch(request, len(hits))
                readmitted += 1
            per_block.touch(hits)
            own.take(new)
            tables[request] = (hits + per_block.allocate(new), len(hits))
        assert (own.free, own.cached_free, own.evictions) == (per_block.free, per_block.cached_free,
                                                              per_block.evictions)
    assert own.evictions > 50 and readmitted > 50

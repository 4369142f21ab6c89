"""Prefix caching over time with vLLM's rules, and the CPU tier: hand calculations and balances."""

import numpy as np
import pytest

from simulation.block_pool import CachingPool, CpuTier
from simulation.content import block_hashes
from simulation.memory import KvBudget
from simulation.prefix_workloads import PrefixScenario, prefix_workload, with_shared_prefix
from simulation.timeline import CpuTierConfig, TimelineConfig, run_timeline
from simulation.traces import load_trace_csv

KIB = 1024


def _run(scenario: PrefixScenario, *, block: int, budget: int, max_context: int = 8192, **config):
    workload = prefix_workload(scenario, np.random.default_rng(0))
    return run_timeline(workload, TimelineConfig(budget=KvBudget(tokens=budget, per_token_bytes=config.pop(
        "per_token_bytes", None)), max_context=max_context, block_size=block, prefix_caching=True, **config))


def test_a_1000_token_system_prompt_at_block_16_caches_992_tokens_per_later_request():
    scenario = PrefixScenario(requests=20, system_tokens=1000, user_tokens=50, output_tokens=20, rate=5.0)
    prefix = _run(scenario, block=16, budget=200_000).prefix
    # 1,000 // 16 = 62 full blocks = 992 tokens; block 63 mixes system and user tokens and differs.
    assert prefix.hit_tokens == 19 * 992
    assert prefix.prompt_tokens == 20 * 1050
    assert prefix.hit_rate == pytest.approx(19 * 992 / (20 * 1050))
    assert prefix.evictions == 0


def test_a_240_token_prompt_shorter_than_a_784_token_block_caches_nothing():
    scenario = PrefixScenario(requests=20, system_tokens=240, user_tokens=30, output_tokens=20, rate=5.0)
    prefix = _run(scenario, block=784, budget=200_000).prefix
    assert prefix.hit_tokens == 0 and prefix.hit_rate == 0


def test_the_last_prompt_token_is_never_taken_from_the_cache():
    # The whole 1,024-token prompt is shared, but a hit stops at (1,024 − 1) // 16 = 63 blocks.
    scenario = PrefixScenario(requests=5, system_tokens=1024, user_tokens=0, output_tokens=10, rate=2.0)
    prefix = _run(scenario, block=16, budget=100_000).prefix
    assert prefix.hit_tokens == 4 * 63 * 16


def test_a_second_turn_hits_the_first_turns_prompt_and_answer():
    # Turn 1: 100 own tokens, 60 out; 159 tokens computed at the end (the last token's KV is
    # never written): 9 full blocks. Turn 2's prompt = 100 + 60 + 100 = 260 tokens: 9 blocks hit.
    scenario = PrefixScenario(requests=2, system_tokens=0, user_tokens=100, output_tokens=60, turns=2, think_s=1.0)
    result = _run(scenario, block=16, budget=100_000)
    assert result.prefix.hit_tokens == 9 * 16
    assert result.prefix.prompt_tokens == 100 + 260
    # The second turn arrives its think time after the first ends.
    assert result.completed == 2


def test_hits_fall_with_block_size_and_eviction_with_a_small_budget():
    scenario = PrefixScenario(requests=300, system_tokens=1000, user_tokens=200, output_tokens=50, turns=3,
                              prefixes=4, rate=20.0, think_s=2.0)
    rates = [_run(scenario, block=block, budget=400_000).prefix.hit_rate for block in (16, 64, 256)]
    assert rates[0] > rates[1] > rates[2] > 0
    roomy = _run(scenario, block=16, budget=400_000).prefix
    tight = _run(scenario, block=16, budget=12_000).prefix
    assert roomy.evictions == 0 < tight.evictions
    assert tight.hit_rate < roomy.hit_rate


def test_free_queue_evicts_least_recently_freed_and_a_sequences_tail_first():
    pool = CachingPool(6)
    a, b = pool.allocate(3), pool.allocate(2)
    assert a == [0, 1, 2] and b == [3, 4]
    for block, block_hash in zip(a + b, (10, 11, 12, 20, 21)):
        pool.cache(block, block_hash)
    pool.release(a)  # freed last block first: queue = [5, 2, 1, 0]
    pool.release(b)  # then [5, 2, 1, 0, 4, 3]
    assert list(pool.queue) == [5, 2, 1, 0, 4, 3]
    assert pool.cached_free == 5
    # A hit on a free cached block takes it out of the queue.
    hits = pool.lookup([20, 21, 99])
    assert hits == [3, 4]
    pool.touch(hits)
    assert list(pool.queue) == [5, 2, 1, 0] and pool.cached_free == 3
    # Allocation takes the uncached block first (freed earliest), then A's tail, then its head.
    assert pool.allocate(3) == [5, 2, 1]
    assert pool.evictions == 2 and pool.lookup([10, 11, 12]) == [0]


def test_block_hashes_share_exactly_the_common_full_blocks():
    shared = ((7, 40),)
    first = block_hashes(shared + ((100, 30),), 16, 4)
    second = block_hashes(shared + ((101, 30),), 16, 4)
    # 40 shared tokens: blocks 0 and 1 (tokens 0–31) agree; block 2 mixes 8 shared and 8 own.
    assert first[:2] == second[:2] and first[2] != second[2]
    # The same tokens split into segments differently are different content.
    assert block_hashes(((1, 32),), 16, 2) != block_hashes(((1, 16), (2, 16)), 16, 2)


def test_cpu_tier_serves_evicted_prefixes_and_its_accounting_balances():
    scenario = PrefixScenario(requests=400, system_tokens=2000, user_tokens=300, output_tokens=50, prefixes=8,
                              rate=10.0)
    per_token = 160 * KIB
    gpu_only = _run(scenario, block=16, budget=6_000, per_token_bytes=per_token)
    tiered = _run(scenario, block=16, budget=6_000, per_token_bytes=per_token,
                  cpu_tier=CpuTierConfig(gib=20, link_gbps=25))
    assert gpu_only.prefix.cpu_hit_tokens == 0 and gpu_only.prefix.evictions > 0
    assert tiered.prefix.cpu_hit_tokens > 0
    assert tiered.prefix.hit_rate > gpu_only.prefix.hit_rate
    assert tiered.mean_ttft_s < gpu_only.mean_ttft_s
    # Every hit from the CPU is paid for over the link: tokens × bytes ÷ bandwidth.
    assert tiered.prefix.cpu_loaded_tokens >= tiered.prefix.cpu_hit_tokens
    assert tiered.prefix.cpu_transfer_s == pytest.approx(tiered.prefix.cpu_loaded_tokens * per_token / 25e9)
    # Stored blocks are either still in CPU memory or were dropped from it (LRU).
    cpu = CpuTier(3)
    for block_hash in range(5):
        cpu.store(block_hash)
    assert cpu.stats.stored == 5 and cpu.stats.dropped == 2 and list(cpu.cached) == [2, 3, 4]
    assert cpu.hits([2, 3, 9]) == 2 and cpu.stats.hits == 2
    assert cpu.park(2) and cpu.stats.dropped == 4 and cpu.used_blocks == 3
    assert not cpu.park(2)  # 2 parked + 1 cached: no room for 2 more without unpinning
    cpu.unpark(2)
    assert cpu.parked == 0


def test_a_traces_conversations_share_their_history():
    rows = ["arrived_at,conversation_id,num_prefill_tokens,num_decode_tokens",
            "0,1,200,40", "30,1,400,40", "60,2,100,10"]
    workload = with_shared_prefix(load_trace_csv("\n".join(rows).encode()), 0)
    # Turn 2 of conversation 1 (400 tokens) starts with turn 1's 200 + 40 = 240 tokens.
    assert workload.content.segments[1][:2] == workload.content.segments[0] + ((-1, 40),)
    result = run_timeline(workload, TimelineConfig(budget=KvBudget(tokens=50_000), max_context=4096,
                                                   prefix_caching=True))
    # Turn 1 leaves 239 computed tokens: 14 full blocks, all inside turn 2's first 399 tokens.
    assert result.prefix.hit_tokens == 14 * 16

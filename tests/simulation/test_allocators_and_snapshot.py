"""Buddy and first-fit allocators, reservation policies, and the snapshot's bookkeeping."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulation.allocators import BuddyAllocator, FirstFitAllocator, chunk_sizes
from simulation.memory import KvBudget
from simulation.policies import ReservationPolicy, reservation_tokens
from simulation.snapshot import SnapshotConfig, compare_policies, run_snapshot
from simulation.workloads import Workload


def _no_overlap(chunks: dict[int, int], capacity: int) -> None:
    spans = sorted(chunks.items())
    for (start, size), (next_start, _) in zip(spans, spans[1:]):
        assert start + size <= next_start
    if spans:
        assert spans[-1][0] + spans[-1][1] <= capacity


@settings(max_examples=150, deadline=None)
@given(capacity=st.integers(1, 5000), kind=st.sampled_from(["buddy", "first-fit"]),
       ops=st.lists(st.tuples(st.booleans(), st.integers(1, 700)), max_size=80))
def test_allocators_never_overlap_and_coalesce_back(capacity, kind, ops):
    allocator = BuddyAllocator(capacity) if kind == "buddy" else FirstFitAllocator(capacity)
    live: dict[int, int] = {}
    for is_alloc, size in ops:
        if is_alloc or not live:
            offset = allocator.allocate(size)
            if offset is not None:
                live[offset] = allocator.chunk_size(size)
                _no_overlap(live, capacity)
        else:
            offset = sorted(live)[size % len(live)]
            allocator.release(offset)
            del live[offset]
        assert allocator.free_slots == capacity - sum(live.values())
        assert allocator.hole_sizes().sum() == allocator.free_slots
    for offset in list(live):
        allocator.release(offset)
    # Everything freed: holes merge back into the initial arenas.
    if kind == "first-fit":
        assert allocator.hole_sizes().tolist() == [capacity]
    else:
        expected = sorted(1 << k for k in range(capacity.bit_length()) if capacity >> k & 1)
        assert sorted(allocator.hole_sizes().tolist()) == expected


def test_buddy_rounds_up_and_holes_block_a_big_request():
    buddy = BuddyAllocator(1024)
    assert buddy.chunk_size(300) == 512 and buddy.chunk_size(512) == 512
    a, b, c, d = (buddy.allocate(256) for _ in range(4))
    buddy.release(a)
    buddy.release(c)
    # 512 slots free, but as two non-buddy 256 holes: external fragmentation.
    assert buddy.free_slots == 512
    assert buddy.allocate(512) is None
    buddy.release(b)  # a and b are buddies: they merge into 512
    assert buddy.allocate(512) == 0


def test_first_fit_takes_lowest_hole_and_merges():
    allocator = FirstFitAllocator(100)
    assert [allocator.allocate(30) for _ in range(3)] == [0, 30, 60]
    allocator.release(0)
    allocator.release(60)  # merges with the 10-slot tail: holes of 30 (at 0) and 40 (at 60)
    assert allocator.hole_sizes().tolist() == [30, 40]
    assert allocator.allocate(45) is None  # 70 free, but not contiguous
    allocator.release(30)
    assert allocator.hole_sizes().tolist() == [100]


@settings(max_examples=100, deadline=None)
@given(capacity=st.integers(1, 100_000), sizes=st.lists(st.integers(1, 4096), min_size=1, max_size=60))
def test_snapshot_running_sum_equals_a_real_buddy_allocator(capacity, sizes):
    """Without frees a buddy allocator admits a chunk iff the free total covers it (snapshot.py)."""
    buddy = BuddyAllocator(capacity)
    admitted = 0
    for size in sizes:
        if buddy.allocate(size) is None:
            break
        admitted += 1
    chunks = chunk_sizes("buddy", np.asarray(sizes))
    by_sum = int(np.searchsorted(np.cumsum(chunks), capacity, side="right"))
    assert admitted == by_sum


def test_orca_policies_on_hand_examples():
    prompt, output = np.array([10, 100]), np.array([25, 1000])
    # Pow2: "if the true output length is 25, it reserves 32"; capped at the maximum context.
    assert reservation_tokens(ReservationPolicy.POW2, prompt, output, 1000).tolist() == [42, 1000]
    assert reservation_tokens(ReservationPolicy.ORACLE, prompt, output, 2000).tolist() == [35, 1100]
    assert reservation_tokens(ReservationPolicy.MAX, prompt, output, 2048).tolist() == [2048, 2048]


def test_breakdown_adds_up_and_hand_example():
    # Two requests of prompt 10, output 20 (final 30) at 50 % progress → 20 tokens each.
    workload = Workload(prompt_tokens=np.array([10, 10]), output_tokens=np.array([20, 20]))
    config = SnapshotConfig(budget=KvBudget(tokens=200), max_context=64, block_size=16,
                            policy="oracle", progress=0.5)
    result = run_snapshot(workload, config)
    # Oracle reserves exactly 30 (no internal fragmentation, as in the paper); the buddy
    # allocator hands out 32: its 2 rounding slots per request are external fragmentation.
    contiguous = result.contiguous.breakdown
    assert result.contiguous.fit == 6  # 200 // 32, the sample reused
    assert (contiguous.token_states, contiguous.reservation, contiguous.internal_fragmentation) == (120, 60, 0)
    assert contiguous.external_fragmentation == 6 * 2
    assert contiguous.free == 200 - 6 * 32
    # Paged: 20 tokens in two 16-token blocks (32 slots); 10 of the 12 empty slots will be filled,
    # the last 2 lie beyond the final length (internal); the 8-slot remainder is external.
    paged = result.paged.breakdown
    assert result.paged.fit == 6  # 192 usable slots (200 − the 8-slot remainder) // 32
    assert (paged.token_states, paged.reservation, paged.internal_fragmentation) == (120, 60, 12)
    assert paged.external_fragmentation == 8
    for summary in (result.contiguous, result.paged):
        assert summary.breakdown.total == 200
        assert summary.breakdown.fractions().total == pytest.approx(1.0)


@pytest.mark.parametrize("policy, expected", [
    # One request: prompt 100, output 150 (final 250), half its output generated (175 tokens held),
    # max context 1,024, buddy allocator, budget 1,024 slots. By hand, per the paper's figure 2:
    # Max reserves 1,024 (a power of two already): 175 tokens, 75 still to come, 774 beyond 250.
    # One chunk of 1,024 fills the budget.
    ("max", dict(fit=1, token_states=175, reservation=75, internal_fragmentation=774, external_fragmentation=0)),
    # Pow2 reserves 100 + 256 = 356 (106 beyond 250); buddy rounds 356 to 512: 156 slots of rounding,
    # and two such chunks fill the budget (the sample reused).
    ("pow2", dict(fit=2, token_states=175, reservation=75, internal_fragmentation=106, external_fragmentation=156)),
    # Oracle reserves exactly 250 (nothing beyond the final length); buddy rounds to 256: four fit.
    ("oracle", dict(fit=4, token_states=175, reservation=75, internal_fragmentation=0, external_fragmentation=6)),
])
def test_one_request_per_policy_in_the_papers_categories(policy, expected):
    workload = Workload(prompt_tokens=np.array([100]), output_tokens=np.array([150]))
    config = SnapshotConfig(budget=KvBudget(tokens=1024), max_context=1024, policy=policy, progress=0.5)
    rows = {row.name: row.summary for row in compare_policies(workload, config)}
    summary = rows[f"contiguous {policy}"]
    assert summary.fit == expected["fit"]
    per_request = {k: v / summary.fit for k, v in vars(summary.breakdown).items() if k != "free"}
    assert per_request == {k: v for k, v in expected.items() if k != "fit"}
    assert summary.breakdown.free == 0
    # First fit does not round: the buddy's rounding (external) disappears, the rest stays.
    first_fit = run_snapshot(workload, SnapshotConfig(budget=KvBudget(tokens=1024), max_context=1024,
                                                      policy=policy, progress=0.5, address_space="first-fit"))
    assert first_fit.contiguous.breakdown.external_fragmentation == 0
    assert first_fit.contiguous.breakdown.internal_fragmentation / first_fit.contiguous.fit == \
        expected["internal_fragmentation"]


def test_pow2_and_oracle_differ_only_by_the_reservation_beyond_the_output():
    """The buddy allocator often rounds Pow2's and Oracle's reservations to the same power of two:
    then both admit the same requests and hold the same memory, split differently."""
    # Prompt 100, output 150: Pow2 asks 356, Oracle 250 → chunks of 512 and 256 (they differ).
    # Prompt 200, output 200: Pow2 asks 456, Oracle 400 → both 512: identical fits.
    workload = Workload(prompt_tokens=np.array([200]), output_tokens=np.array([200]))
    rows = {row.name: row.summary for row in compare_policies(
        workload, SnapshotConfig(budget=KvBudget(tokens=4096), max_context=1024))}
    pow2, oracle = rows["contiguous pow2"], rows["contiguous oracle"]
    assert pow2.fit == oracle.fit == 8
    assert pow2.breakdown.allocated + pow2.breakdown.external_fragmentation == \
        oracle.breakdown.allocated + oracle.breakdown.external_fragmentation
    assert pow2.breakdown.internal_fragmentation == 8 * (456 - 400)
    assert oracle.breakdown.internal_fragmentation == 0
    assert oracle.breakdown.external_fragmentation == 8 * (512 - 400)


def test_random_progress_is_seeded_and_policies_rank_as_in_the_paper():
    rng = np.random.default_rng(3)
    workload = Workload(prompt_tokens=rng.integers(20, 300, 5000), output_tokens=rng.integers(10, 800, 5000))
    config = SnapshotConfig(budget=KvBudget(tokens=15_728), max_context=2048, progress=None)
    rows = compare_policies(workload, config, np.random.default_rng(9))
    again = compare_policies(workload, config, np.random.default_rng(9))
    assert [r.summary for r in rows] == [r.summary for r in again]
    shares = [r.summary.breakdown.token_share_of_used for r in rows]
    fits = [r.summary.fit for r in rows]
    # Max < Pow2 < Oracle < paged in both token share and requests that fit.
    assert shares == sorted(shares) and fits == sorted(fits)
    assert shares[-1] > 0.9 and shares[0] < 0.3
    with pytest.raises(ValueError, match="rng"):
        run_snapshot(workload, config)

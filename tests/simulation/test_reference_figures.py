"""The reference page's problem 4 and the PagedAttention paper's Orca-Max case, reproduced."""

import numpy as np
import pytest

from simulation.memory import GIB, KvBudget
from simulation.snapshot import SnapshotConfig, run_snapshot
from simulation.workloads import Fixed, TotalLengthSpec, Uniform

KIB, MIB = 1024, 1024**2
# Reference page, problem 4: 70B (80 layers, 8 KV heads, head dim 128), FP8 KV:
# 2 × 80 × 8 × 128 × 1 B = 160 KiB per token.
PER_TOKEN_70B_FP8 = 2 * 80 * 8 * 128
# KV budget = 8 × 80 GB × 0.9 − 70 GB = 506 GB.
BUDGET_BYTES_PROBLEM_4 = 8 * 80 * 10**9 * 9 // 10 - 70 * 10**9


def problem_4_budget() -> KvBudget:
    return KvBudget.from_bytes(total_bytes=BUDGET_BYTES_PROBLEM_4, per_token_bytes=PER_TOKEN_70B_FP8)


def test_problem_4_budget_is_471_gib():
    budget = problem_4_budget()
    assert PER_TOKEN_70B_FP8 == 160 * KIB
    assert BUDGET_BYTES_PROBLEM_4 == 506 * 10**9
    assert budget.bytes / GIB == pytest.approx(471.25, abs=0.01)
    # One 16-token block is 2.5 MiB for the whole model.
    assert 16 * PER_TOKEN_70B_FP8 == 2.5 * MIB


def test_problem_4_contiguous_94_requests_at_6_percent():
    workload = TotalLengthSpec(lengths=Uniform(low=1024, high=3072)).generate(
        20_000, np.random.default_rng(4))
    result = run_snapshot(workload, SnapshotConfig(budget=problem_4_budget(), max_context=32_768))
    # 471.25 GiB / (32,768 × 160 KiB = 5 GiB) = 94.25 → 94 reservations.
    assert result.contiguous.fit == 94
    # 2,048 / 32,768 = 6.25 % of the reserved memory holds tokens (the page rounds to 6 %).
    assert result.contiguous.utilisation == pytest.approx(2048 / 32768, abs=0.005)


def test_problem_4_paged_about_1500_requests_at_99_6_percent():
    workload = TotalLengthSpec(lengths=Uniform(low=1024, high=3072)).generate(
        100_000, np.random.default_rng(4))
    result = run_snapshot(workload, SnapshotConfig(budget=problem_4_budget(), max_context=32_768,
                                                   block_size=16))
    # Page: (2,048 + 8 wasted) × 160 KiB ≈ 321 MiB per request; 471 × 1,024 / 321 ≈ 1,500.
    expected_fit = 471.25 * 1024 / ((2048 + 8) * 160 / 1024)
    assert expected_fit == pytest.approx(1502, abs=1)
    # The first ~1,500 requests' mean length is within ~1 % of 2,048 (uniform on 1,024–3,072).
    assert result.paged.fit == pytest.approx(1500, rel=0.025)
    assert result.paged.utilisation == pytest.approx(2048 / 2056, abs=0.001)  # 99.6 %
    # About 16× more concurrent sequences than contiguous reservation.
    assert result.paged.fit / result.contiguous.fit == pytest.approx(16, rel=0.05)


def test_paged_exact_when_every_request_is_2048_tokens():
    """2,048 is a multiple of 16: no waste, so the fit is the budget in 2,048-token requests."""
    workload = TotalLengthSpec(lengths=Fixed(length=2048)).generate(10, np.random.default_rng(0))
    result = run_snapshot(workload, SnapshotConfig(budget=problem_4_budget(), max_context=32_768))
    # 3,088,378 slots // 2,048 = 1,507 (2,048 × 1,508 = 3,088,384 is 6 slots too many).
    assert result.paged.fit == 3_088_378 // 2048 == 1507
    assert result.paged.utilisation == 1.0
    assert result.sample_reused


def test_orca_max_opt_13b_fits_7_requests():
    """PagedAttention paper: OPT-13B (800 KiB per token), 12 GiB of KV, 2,048-token maximum."""
    # OPT-13B: 2 (K, V) × 40 layers × 5,120 hidden × 2 B (FP16) = 819,200 B = 800 KiB per token.
    per_token = 2 * 40 * 5120 * 2
    assert per_token == 800 * KIB
    budget = KvBudget.from_gib(gib=12, per_token_bytes=per_token)
    assert budget.tokens == 15_728  # 12 GiB / 800 KiB = 15,728.64
    workload = TotalLengthSpec(lengths=Uniform(low=50, high=2000)).generate(
        1000, np.random.default_rng(13))
    result = run_snapshot(workload, SnapshotConfig(budget=budget, max_context=2048, policy="max"))
    # 15,728 // 2,048 = 7 (a buddy allocator with 2,048-slot chunks admits exactly as many).
    assert result.contiguous.fit == 7

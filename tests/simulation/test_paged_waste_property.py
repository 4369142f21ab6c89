"""Paging wastes at most B − 1 tokens per sequence, about B/2 on average."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulation.arith import paged_slots
from simulation.memory import KvBudget
from simulation.snapshot import SnapshotConfig, run_snapshot, sweep_block_sizes
from simulation.workloads import TotalLengthSpec, Uniform, Workload


@settings(max_examples=200, deadline=None)
@given(lengths=st.lists(st.integers(min_value=1, max_value=100_000), min_size=1, max_size=200),
       block_size=st.integers(min_value=1, max_value=512))
def test_paged_waste_never_exceeds_block_minus_one(lengths, block_size):
    lengths = np.asarray(lengths, dtype=np.int64)
    waste = paged_slots(lengths, block_size) - lengths
    assert waste.min() >= 0
    assert waste.max() <= block_size - 1


@settings(max_examples=100, deadline=None)
@given(prompt=st.lists(st.integers(1, 5000), min_size=1, max_size=100),
       output_seed=st.integers(0, 2**32 - 1),
       block_size=st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128, 256]),
       progress=st.floats(0.0, 1.0))
def test_snapshot_paged_waste_bounded(prompt, output_seed, block_size, progress):
    prompt = np.asarray(prompt, dtype=np.int64)
    output = np.random.default_rng(output_seed).integers(1, 3000, size=prompt.size)
    workload = Workload(prompt_tokens=prompt, output_tokens=output)
    config = SnapshotConfig(budget=KvBudget(tokens=10**6), max_context=8192,
                            block_size=block_size, progress=progress)
    result = run_snapshot(workload, config)
    assert result.paged.waste_tokens_max <= block_size - 1
    assert result.paged.waste_tokens_mean <= block_size - 1
    assert np.all(result.picture.paged_slots - result.picture.tokens <= block_size - 1)


def test_mean_waste_is_about_half_a_block():
    workload = TotalLengthSpec(lengths=Uniform(low=100, high=20_000)).generate(
        100_000, np.random.default_rng(7))
    sweep = sweep_block_sizes(workload, max_context=32_768)
    assert sweep.block_sizes.tolist() == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    # Lengths spread evenly modulo B leave (B − 1)/2 empty slots on average.
    np.testing.assert_allclose(sweep.waste_tokens_expected, (sweep.block_sizes - 1) / 2)
    np.testing.assert_allclose(sweep.waste_tokens_mean, sweep.waste_tokens_expected, rtol=0.03, atol=0.01)
    assert sweep.waste_tokens_mean[0] == 0
    assert np.all(np.diff(sweep.utilisation) < 0)  # bigger blocks waste more


def test_sweep_block_size_16_matches_hand_count():
    workload = Workload(prompt_tokens=np.array([1, 8, 9, 20]), output_tokens=np.array([1, 8, 8, 20]))
    sweep = sweep_block_sizes(workload, max_context=1000, block_sizes=(16,))
    # Totals are 2, 16, 17, 40 → slots 16, 16, 32, 48 → waste 14, 0, 15, 8.
    assert sweep.waste_tokens_mean[0] == pytest.approx((14 + 0 + 15 + 8) / 4)

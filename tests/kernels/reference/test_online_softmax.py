"""The NumPy online-softmax walk-through: exact against naive softmax, hand-checked steps and bytes."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels.reference.online_softmax import naive_attention_np, online_softmax_attention, random_head, tile_traffic

MiB = 2**20


@pytest.mark.parametrize("n, d, tq, tk", [(1, 4, 1, 1), (16, 8, 4, 4), (37, 16, 8, 5), (64, 32, 64, 16),
                                          (50, 8, 7, 64)])
@pytest.mark.parametrize("causal", [False, True])
def test_matches_naive_to_1e_5(n, d, tq, tk, causal):
    q, k, v = random_head(n, d, np.random.default_rng(n * 100 + d))
    run = online_softmax_attention(q, k, v, tile_q=tq, tile_k=tk, causal=causal)
    assert run.max_abs_err < 1e-5
    np.testing.assert_allclose(run.output, naive_attention_np(q, k, v, causal=causal), atol=1e-5)


@settings(deadline=None, max_examples=40)
@given(n=st.integers(1, 40), d=st.sampled_from([1, 4, 16]), tq=st.integers(1, 48), tk=st.integers(1, 48),
       causal=st.booleans(), seed=st.integers(0, 2**31), spread=st.sampled_from([0.1, 1.0, 8.0]))
def test_any_tiling_matches(n, d, tq, tk, causal, seed, spread):
    # spread 8 gives scores in the hundreds: e^s would overflow float32 without the running max.
    q, k, v = random_head(n, d, np.random.default_rng(seed), spread=spread)
    run = online_softmax_attention(q, k, v, tile_q=tq, tile_k=tk, causal=causal)
    ref = run.reference
    assert np.all(np.isfinite(run.output))
    assert run.max_abs_err <= 1e-5 * max(1.0, float(np.abs(ref).max()))


def test_two_key_walk_by_hand():
    # d = 4, scale 1/2. Row 0: q = (2,0,0,0); k0 = 0 → s = 0; k1 = (4,0,0,0) → s = 2·4/2 = 4.
    q = np.array([[2, 0, 0, 0], [0, 0, 0, 0]], dtype=np.float32)
    k = np.array([[0, 0, 0, 0], [4, 0, 0, 0]], dtype=np.float32)
    v = np.array([[1, 0, 0, 0], [0, 1, 0, 0]], dtype=np.float32)
    run = online_softmax_attention(q, k, v, tile_q=2, tile_k=1)
    first, second = run.steps
    assert first.m_old[0] == -np.inf and first.m_new[0] == 0 and first.l[0] == 1
    np.testing.assert_array_equal(first.out_unnormalised[0], [1, 0, 0, 0])
    assert second.m_new[0] == 4
    assert second.rescale[0] == pytest.approx(math.exp(-4))
    assert second.l[0] == pytest.approx(1 + math.exp(-4))
    np.testing.assert_allclose(second.out_unnormalised[0], [math.exp(-4), 1, 0, 0], rtol=1e-6)
    e = math.exp(-4)
    np.testing.assert_allclose(run.output[0], [e / (1 + e), 1 / (1 + e), 0, 0], rtol=1e-6)
    # Row 1 has q = 0: equal scores, the max never moves (rescale 1), output is the mean of v.
    assert second.rescale[1] == 1.0
    np.testing.assert_allclose(run.output[1], [0.5, 0.5, 0, 0])
    assert second.last_for_block and not first.last_for_block


def test_step_order_and_causal_skipping():
    q, k, v = random_head(10, 4, np.random.default_rng(0))
    full = online_softmax_attention(q, k, v, tile_q=4, tile_k=3)
    assert len(full.steps) == 3 * 4  # ceil(10/4) query blocks × ceil(10/3) key tiles
    assert [s.cols for s in full.steps[:4]] == [(0, 3), (3, 6), (6, 9), (9, 10)]
    causal = online_softmax_attention(q, k, v, tile_q=4, tile_k=3, causal=True)
    # Rows [0,4) need keys < 4: tiles at 0, 3; rows [4,8): 0, 3, 6; rows [8,10): 0, 3, 6, 9.
    assert len(causal.steps) == 2 + 3 + 4
    for s in full.steps:
        assert np.all(s.m_new >= s.m_old)  # the running max never falls
        # e^(m_old − m_new) ∈ (0, 1]; 0 only at a block's first tile, where m_old = −inf.
        first = s.k_block == 0
        assert np.all(s.rescale == 0) if first else np.all((s.rescale > 0) & (s.rescale <= 1))


def test_traffic_matches_reference_page():
    # One query block covering all N: read Q, K, V + write O = 4 × 8,192 × 128 × 2 B = 8 MiB.
    t = tile_traffic(seq_len=8192, head_dim=128, tile_q=8192, tile_k=128)
    assert t.tiled_bytes == 8 * MiB
    # Naive: the same 8 MiB of Q, K, V, O plus 4 passes over the 128 MiB matrix.
    assert t.naive_bytes == 8 * MiB + 512 * MiB
    # 128-row query tiles: K and V re-read by each of 64 blocks: (2 + 2·64) × N·d·2 B = 260 MiB.
    small = tile_traffic(seq_len=8192, head_dim=128, tile_q=128, tile_k=64)
    assert small.tiled_bytes == 260 * MiB
    # On chip: Q tile 128×128, K and V tiles 64×128, scores 128×64 at 2 B, m and l fp32.
    assert small.sram_bytes == (128 * 128 + 2 * 64 * 128 + 128 * 64) * 2 + 2 * 128 * 4


def test_bad_input():
    q, k, v = random_head(8, 4, np.random.default_rng(1))
    with pytest.raises(ValueError, match="tile_k"):
        online_softmax_attention(q, k, v, tile_q=4, tile_k=0)
    with pytest.raises(ValueError, match="seq_len, head_dim"):
        online_softmax_attention(q, k[:5], v, tile_q=4, tile_k=4)

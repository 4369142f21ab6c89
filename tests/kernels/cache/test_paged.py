"""The paged-cache builder: tables, shuffling, poisoning, appending, FP8 quantisation."""

from __future__ import annotations

import pytest
import torch

from kernels.cache.paged import (
    FP8_MAX, append_token, build_paged_cache, paged_from_contiguous, quantize_fp8,
)
from kernels.reference.paged import gather_kv, gather_kv_padded
from units import cdiv


def test_cdiv_gives_the_blocks_a_sequence_needs():
    # The paged cache counts a sequence's blocks with units.cdiv.
    assert [cdiv(n, 16) for n in (1, 15, 16, 17, 32, 33)] == [1, 1, 1, 2, 2, 3]


def test_in_order_tables_and_geometry():
    c = build_paged_cache([17, 5, 32], block_size=16, n_kv_heads=2, head_dim=8, spare_blocks=1)
    assert c.k_cache.shape == (2 + 1 + 2 + 1, 2, 16, 8)
    assert c.block_tables.tolist() == [[0, 1], [2, -1], [3, 4]]
    assert c.lengths == [17, 5, 32]
    assert c.blocks_per_seq == [2, 1, 2]
    assert c.free_blocks == [5]
    assert c.bytes_per_token == 2 * 2 * 8 * 2  # K and V, 2 heads, d = 8, bf16
    assert c.token_bytes == 54 * 64
    assert c.slot_utilisation == pytest.approx(54 / 80)


def test_shuffle_is_seeded_and_a_permutation():
    def make(seed):
        return build_paged_cache([40, 9], block_size=8, n_kv_heads=1, head_dim=4, shuffle=True,
                                 generator=torch.Generator().manual_seed(seed), spare_blocks=3)

    a, b, other = make(1), make(1), make(2)
    assert torch.equal(a.block_tables, b.block_tables) and torch.equal(a.k_cache, b.k_cache)
    assert not torch.equal(a.block_tables, other.block_tables)
    used = a.used_blocks
    assert len(used) == 5 + 2 and len(set(used)) == len(used)
    assert sorted(used + a.free_blocks) == list(range(a.num_blocks))


def test_shuffle_needs_an_injected_generator():
    with pytest.raises(ValueError, match="needs a torch.Generator"):
        build_paged_cache([4], block_size=2, n_kv_heads=1, head_dim=4, shuffle=True)


@pytest.mark.parametrize("kw,pattern", [
    (dict(seq_lens=[]), "at least one sequence"),
    (dict(seq_lens=[3, 0]), r"seq_lens must be >= 1, got \[3, 0\]"),
    (dict(block_size=0), "block_size must be >= 1"),
    (dict(spare_blocks=-1), "spare_blocks must be >= 0"),
    (dict(max_blocks_per_seq=1), "below the 2 blocks"),
])
def test_bad_build_arguments(kw, pattern):
    args = dict(seq_lens=[3, 20], block_size=16, n_kv_heads=1, head_dim=4) | kw
    with pytest.raises(ValueError, match=pattern):
        build_paged_cache(**args)


def test_poison_marks_exactly_the_unused_slots():
    c = build_paged_cache([17, 5], block_size=16, n_kv_heads=2, head_dim=4, spare_blocks=1,
                          poison_unused=True)
    nan_slots = torch.isnan(c.k_cache.float()).all(dim=-1).all(dim=1)  # [num_blocks, block_size]
    assert nan_slots.sum().item() == 4 * 16 - 22  # 4 blocks of 16 slots, 22 tokens
    for b, n in enumerate(c.lengths):
        assert torch.isfinite(gather_kv(c.k_cache, c.block_tables[b], n).float()).all()
    assert torch.equal(torch.isnan(c.v_cache.float()), torch.isnan(c.k_cache.float()))


def test_poison_fp8_pool():
    c = quantize_fp8(build_paged_cache([3], block_size=4, n_kv_heads=1, head_dim=4, poison_unused=True))
    assert torch.isnan(c.k_cache.float()[0, 0, 3]).all() and torch.isfinite(c.k_cache.float()[0, 0, :3]).all()


def test_paged_from_contiguous_round_trip():
    g = torch.Generator().manual_seed(0)
    k = torch.randn(2, 3, 20, 8, generator=g)
    v = torch.randn(2, 3, 20, 8, generator=g)
    for bs in (1, 4, 16, 32):
        c = paged_from_contiguous(k, v, [20, 11], block_size=bs, shuffle=True, generator=g, spare_blocks=1)
        assert torch.equal(gather_kv(c.k_cache, c.block_tables[0], 20), k[0])
        assert torch.equal(gather_kv(c.v_cache, c.block_tables[1], 11), v[1, :, :11])
    padded = gather_kv_padded(c.k_cache, torch.stack([c.block_tables[0], c.block_tables[0]]), 20)
    assert torch.equal(padded[1], k[0])


def test_append_token_fills_the_last_block_then_takes_a_free_one():
    c = build_paged_cache([3, 4], block_size=4, n_kv_heads=2, head_dim=4, spare_blocks=2,
                          dtype=torch.float32)
    k1, v1 = torch.full((2, 4), 7.0), torch.full((2, 4), -7.0)
    c1 = append_token(c, 0, k1, v1)  # slot 3 of block 0
    assert c1.lengths == [4, 4] and c.lengths == [3, 4]  # the old cache keeps its lengths
    assert torch.equal(c1.block_tables, c.block_tables)
    assert torch.equal(gather_kv(c1.k_cache, c1.block_tables[0], 4)[:, 3], k1)
    c2 = append_token(c1, 1, k1, v1)  # sequence 1's block is full: lowest free block (2)
    assert c2.block_tables.tolist() == [[0], [1]] or c2.block_tables[1].tolist() == [1, 2]
    assert c2.block_tables[1].tolist() == [1, 2] and c2.block_tables[0].tolist() == [0, -1]
    assert c2.lengths == [4, 5] and c2.free_blocks == [3]
    assert torch.equal(gather_kv(c2.v_cache, c2.block_tables[1], 5)[:, 4], v1)


def test_append_token_pool_full_and_bad_args():
    c = build_paged_cache([4], block_size=4, n_kv_heads=1, head_dim=4)
    with pytest.raises(ValueError, match="the pool is full: all 1 blocks are in use"):
        append_token(c, 0, torch.zeros(1, 4), torch.zeros(1, 4))
    with pytest.raises(ValueError, match=r"seq must be in 0..0, got 3"):
        append_token(c, 3, torch.zeros(1, 4), torch.zeros(1, 4))
    with pytest.raises(ValueError, match=r"k_new must have shape \(1, 4\), got \(4,\)"):
        append_token(c, 0, torch.zeros(4), torch.zeros(1, 4))


def test_quantize_fp8_scales_and_error():
    c = build_paged_cache([40], block_size=8, n_kv_heads=2, head_dim=16, dtype=torch.float32)
    c8 = quantize_fp8(c, per_head=True)
    assert c8.k_scale.shape == (2,)
    amax = c.k_cache.abs().amax(dim=(0, 2, 3))
    assert torch.allclose(c8.k_scale, amax / FP8_MAX)
    deq = c8.k_cache.float() * c8.k_scale.view(1, -1, 1, 1)
    # e4m3 keeps 3 mantissa bits: relative error <= 2^-4 for normal values.
    assert ((deq - c.k_cache).abs() <= c.k_cache.abs() / 16 + 1e-3).all()
    with pytest.raises(ValueError, match="already float8"):
        quantize_fp8(c8)
    assert quantize_fp8(c, per_head=False).v_scale.shape == (1,)


def test_append_to_fp8_cache_uses_the_scale():
    c8 = quantize_fp8(build_paged_cache([2], block_size=4, n_kv_heads=1, head_dim=4))
    x = torch.full((1, 4), 0.5)
    c9 = append_token(c8, 0, x, x)
    stored = c9.k_cache[c9.block_tables[0, 0], 0, 2].float() * c9.k_scale
    assert torch.allclose(stored, x[0], rtol=1 / 16)

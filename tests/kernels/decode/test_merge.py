"""The split-KV merge kernel's launch shapes: every cut of the head dim gives the LSE-weighted sum
written out by hand here, and the policy picks the cuts timed on the H200 (CPU: Triton's
interpreter)."""

from __future__ import annotations

import pytest
import torch

from kernels.decode.merge import merge_launch, merge_splits


def _by_hand(parts: torch.Tensor, lse: torch.Tensor) -> torch.Tensor:
    """sum_s 2^(lse_s - m) o_s / sum_s 2^(lse_s - m), m the largest lse, in float64."""
    lse = lse.double()
    w = torch.exp2(lse - lse.max(dim=-1, keepdim=True).values)
    return (parts.double() * w[..., None]).sum(-2) / w.sum(-1)[..., None]


def _partials(batch: int, heads: int, splits: int, head_dim: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    parts = torch.randn(batch, heads, splits, head_dim, generator=g)
    lse = torch.randn(batch, heads, splits, generator=g) * 4
    if splits > 2:
        lse[0, 0, splits - 1] = float("-inf")  # an empty split: zero weight (split 0 is never empty)
    return parts, lse


_CUTS = [(None, None), (128, 4), (64, 2), (32, 1), (16, 2), (8, 1)]


@pytest.mark.parametrize(("splits", "head_dim", "d_chunk", "num_warps"), [
    (splits, head_dim, d_chunk, num_warps) for splits, head_dim in [(1, 64), (5, 128), (33, 128), (66, 64)]
    for d_chunk, num_warps in _CUTS if d_chunk is None or d_chunk <= head_dim])
def test_every_cut_of_the_head_dim_merges_like_the_formula(splits, head_dim, d_chunk, num_warps):
    parts, lse = _partials(2, 3, splits, head_dim, seed=splits)
    out = merge_splits(parts, lse, torch.empty(2, 3, head_dim), d_chunk=d_chunk, num_warps=num_warps)
    torch.testing.assert_close(out.double(), _by_hand(parts, lse), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("splits", [1, 7, 33])
def test_sinks_join_each_heads_denominator(splits):
    # o = sum_s 2^lse_s o_s / (sum_s 2^lse_s + e^sink): the sink is a natural-log logit with no value.
    parts, lse = _partials(2, 3, splits, 64, seed=splits)
    sinks = torch.tensor([-1.5, 0.0, 2.5])
    out = merge_splits(parts, lse, torch.empty(2, 3, 64), sinks=sinks)
    lse64 = lse.double()
    z = torch.exp2(lse64).sum(-1) + torch.exp(sinks.double())
    by_hand = (parts.double() * torch.exp2(lse64)[..., None]).sum(-2) / z[..., None]
    torch.testing.assert_close(out.double(), by_hand, rtol=1e-5, atol=1e-6)
    # A sink far above every split's lse takes nearly all the weight; far below, none.
    assert merge_splits(parts, lse, torch.empty(2, 3, 64), sinks=sinks + 60).abs().max() < 1e-6
    torch.testing.assert_close(merge_splits(parts, lse, torch.empty(2, 3, 64), sinks=sinks - 200).double(),
                               _by_hand(parts, lse), rtol=1e-5, atol=1e-6)


def test_a_bf16_output_is_the_rounded_sum():
    parts, lse = _partials(1, 4, 9, 128)
    out = merge_splits(parts, lse, torch.empty(1, 4, 128, dtype=torch.bfloat16))
    assert out.dtype == torch.bfloat16
    # Within one bf16 ulp (8 significant bits: 2^-7 relative) of the float64 sum: Triton's
    # interpreter converts float32 to bf16 by truncation, the GPU by rounding.
    torch.testing.assert_close(out.double(), _by_hand(parts, lse), rtol=2 ** -7, atol=1e-6)


def test_the_policy_cuts_many_splits_finer():
    # Fastest on the H200 (INT4, batch 8 x 32K and 32 x 16K): 33 splits -> 32 dims on one warp; 8 -> 64 on two.
    assert merge_launch(8, 64, 33, 128) == (32, 1)
    assert merge_launch(1, 32, 66, 128) == (32, 1)
    assert merge_launch(32, 64, 8, 128) == (64, 2)
    assert merge_launch(8, 64, 16, 64) == (32, 1)
    assert merge_launch(8, 64, 2, 64) == (64, 2)
    assert merge_launch(8, 64, 2, 32) == (32, 2)  # never wider than the head dim


@pytest.mark.parametrize(("d_chunk", "num_warps", "message"), [
    (48, 1, "d_chunk must be a power of two dividing head_dim 128"),
    (256, 1, "d_chunk must be a power of two dividing head_dim 128"),
    (32, 3, "num_warps must be 1, 2, 4 or 8"),
])
def test_refuses_a_cut_it_cannot_launch(d_chunk, num_warps, message):
    parts, lse = _partials(1, 1, 4, 128)
    with pytest.raises(ValueError, match=message):
        merge_splits(parts, lse, torch.empty(1, 1, 128), d_chunk=d_chunk, num_warps=num_warps)


def test_bf16_partials_merge_as_their_float32_values():
    # The INT4 kernel may keep its partials in bf16: the merge must weigh the values as stored.
    parts, lse = _partials(2, 4, 33, 128, seed=7)
    stored = parts.to(torch.bfloat16)
    out = merge_splits(stored, lse, torch.empty(2, 4, 128))
    torch.testing.assert_close(out.double(), _by_hand(stored.float(), lse), rtol=1e-5, atol=1e-6)


def test_only_int4_asks_for_bf16_partials():
    from kernels.decode.rdq import partial_dtype
    from kernels.decode.rdq_config import RdqConfig

    asked = RdqConfig(block_n=16, swap_ab=True, reg_prefetch=True, bf16_partials=True)
    assert partial_dtype(asked, "int4") == torch.bfloat16
    assert partial_dtype(asked, "fp8") == torch.float32  # measured with bf16 partials for INT4 only
    assert partial_dtype(RdqConfig(), "int4") == torch.float32

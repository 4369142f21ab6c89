"""The read-only kernels behind the paged-read floor (``scripts/tuning/read_floor_kernels.py``),
under the interpreter: every K and V word of each sequence's tokens folded exactly once, for any
tile, split count and pool arrangement, with and without the decode kernels' start and end."""

from __future__ import annotations

import pytest
import torch

from scripts.tuning.read_floor_kernels import expected_fold, head_major, paged_read, paged_read_wide, xor_rows

BLOCKS, HEADS, PAGE, D = 24, 4, 16, 32


@pytest.fixture(scope="module")
def pools():
    g = torch.Generator().manual_seed(0)
    k = torch.randn(BLOCKS, HEADS, PAGE, D, generator=g).to(torch.bfloat16)
    v = torch.randn(BLOCKS, HEADS, PAGE, D, generator=g).to(torch.bfloat16)
    tables = torch.randperm(BLOCKS, generator=g).to(torch.int32).reshape(2, BLOCKS // 2)
    return k, v, tables


def test_the_torch_fold_is_the_xor_of_every_word():
    x = torch.tensor([[0b0011, 0b0101, 0b1000], [7, 7, 1]], dtype=torch.int32)
    assert xor_rows(x).tolist() == [0b1110, 1]
    k = torch.zeros(2, 1, 16, 4, dtype=torch.bfloat16)  # two int32 words a token
    k.view(torch.int32)[1, 0, 3, 0] = 5  # one word of block 1, token 3
    v = torch.zeros_like(k)
    v.view(torch.int32)[0, 0, 0, 1] = 12
    tables = torch.tensor([[1, 0]], dtype=torch.int32)
    assert expected_fold(k, v, tables, 32).tolist() == [[5 ^ 12]]
    assert expected_fold(k, v, tables, 16).tolist() == [[5]]  # block 0 (the second page) unread


@pytest.mark.parametrize("cfg", [(64, 4, 3), (16, 1, 4), (32, 2, 1)])
@pytest.mark.parametrize("splits", [1, 3, 7])
def test_one_head_read_folds_every_word_once(pools, cfg, splits):
    k, v, tables = pools
    ctx = BLOCKS // 2 * PAGE
    for kk, vv in ((k, v), (head_major(k), head_major(v))):
        folds = paged_read(kk, vv, tables, ctx, splits, cfg)
        assert folds.shape == (2, HEADS, splits)
        assert torch.equal(xor_rows(folds), expected_fold(kk, vv, tables, ctx))


def test_one_head_read_stops_at_the_length(pools):
    k, v, tables = pools
    folds = xor_rows(paged_read(k, v, tables, 80, 3, (32, 4, 3)))
    assert torch.equal(folds, expected_fold(k, v, tables, 80))
    assert not torch.equal(folds, expected_fold(k, v, tables, 96))


def test_the_decode_kernels_start_and_end_do_not_change_what_is_read(pools):
    k, v, tables = pools
    ctx = BLOCKS // 2 * PAGE
    lens = torch.full((2,), ctx, dtype=torch.int32)
    parts = torch.full((2 * HEADS * 3 * 17 * D // 2,), float("nan"))
    for kw in (dict(lens=lens), dict(partials=parts), dict(lens=lens, partials=parts)):
        folds = paged_read(k, v, tables, ctx, 3, (32, 4, 3), **kw)
        assert torch.equal(xor_rows(folds), expected_fold(k, v, tables, ctx)), kw
    assert not torch.isnan(parts).any()  # every program stored its partial-sized tile and row values


@pytest.mark.parametrize("cfg", [(1, 4, 3), (2, 8, 2), (1, 4, 1)])
@pytest.mark.parametrize("splits", [1, 4])
def test_whole_page_read_folds_every_word_once(pools, cfg, splits):
    k, v, tables = pools
    for ctx in (BLOCKS // 2 * PAGE, 5 * PAGE):
        folds = paged_read_wide(k, v, tables, ctx, splits, cfg)
        assert folds.shape == (2, splits)
        assert torch.equal(xor_rows(folds), xor_rows(expected_fold(k, v, tables, ctx)))

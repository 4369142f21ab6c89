"""Sliding windows, chunked local attention and sinks in the mixed chunked-prefill kernel.

Each row is checked against attention computed directly on the contiguous K/V the pool was
paged from (a row at position p sees keys first_visible(p)..p; a sink is one more logit with a
zero value), and against the varlen reference. CPU (CI): the interpreter with its small tiles
(32-row prefill tiles, 16-key steps), so windows narrower than a step, wider than a tile and
chunk boundaries inside a tile are all crossed. GPU (marked ``gpu``): real sizes.
"""

from __future__ import annotations

import math

import pytest
import torch

from kernels.attention_span import first_visible, span_of
from kernels.cache.paged import paged_from_contiguous, quantize_fp8
from kernels.prefill.chunked import chunked_prefill_attention, plan_batch
from kernels.reference.varlen import varlen_attention_reference
from kernels.tolerances import tolerance

ON_GPU = torch.cuda.is_available()
DEVICE = "cuda" if ON_GPU else "cpu"
TOL = {name: tolerance("chunked_prefill", name) for name in ("bf16", "fp8")}
LSE_TOL = tolerance("flash_forward_lse", "fp32")

# (q_len, seq_len): a chunk after a cached prefix, a decode row, a whole prompt, a short row
Q_LENS, SEQ_LENS = [40, 1, 33, 1], [100, 77, 33, 5]


def _inputs(seq_lens, q_lens, *, hq=4, hkv=2, d=32, block_size=16, seed=0):
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    n = max(seq_lens)
    k = torch.randn(len(seq_lens), hkv, n, d, generator=g, device=DEVICE).to(torch.bfloat16)
    v = torch.randn(len(seq_lens), hkv, n, d, generator=g, device=DEVICE).to(torch.bfloat16)
    q = torch.randn(sum(q_lens), hq, d, generator=g, device=DEVICE).to(torch.bfloat16)
    sinks = torch.randn(hq, generator=g, device=DEVICE) * 2
    c = paged_from_contiguous(k, v, seq_lens, block_size=block_size, shuffle=True, poison_unused=True,
                              spare_blocks=2, generator=g)
    return q, k, v, sinks, c


def _direct(q, k, v, q_lens, seq_lens, span, sinks=None):
    """Row-by-row attention over the contiguous K/V: (out, lse), float32."""
    hq, d = q.shape[1], q.shape[2]
    group = hq // k.shape[1]
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    lse = torch.empty(q.shape[:2], dtype=torch.float32, device=q.device)
    row = 0
    for b, (nq, nk) in enumerate(zip(q_lens, seq_lens)):
        for i in range(nq):
            p = nk - nq + i
            lo = first_visible(span, p)
            kb = k[b, :, lo:p + 1].float().repeat_interleave(group, 0)
            vb = v[b, :, lo:p + 1].float().repeat_interleave(group, 0)
            s = torch.einsum("hd,hnd->hn", q[row].float(), kb) / math.sqrt(d)
            if sinks is not None:
                s = torch.cat([s, sinks.float()[:, None]], 1)
            out[row] = torch.einsum("hn,hnd->hd", torch.softmax(s, 1)[:, :kb.shape[1]], vb)
            lse[row] = torch.logsumexp(s, 1)
            row += 1
    return out, lse


def _run(q, c, q_lens, seq_lens, tables=None, sinks=None, **span):
    plan = plan_batch(q_lens, seq_lens, n_q_heads=q.shape[1], n_kv_heads=c.n_kv_heads, head_dim=c.head_dim,
                      device=q.device, **span)
    return chunked_prefill_attention(q, c.k_cache, c.v_cache, c.block_tables if tables is None else tables, plan,
                                     k_scale=c.k_scale, v_scale=c.v_scale, sinks=sinks)


def _close(got, want, tol):
    out, lse = got
    assert torch.isfinite(out).all() and torch.isfinite(lse).all(), "NaN/inf reached the output"
    torch.testing.assert_close(out.float(), want[0], atol=tol.atol, rtol=tol.rtol)
    torch.testing.assert_close(lse, want[1], atol=LSE_TOL.atol, rtol=LSE_TOL.rtol)


@pytest.mark.parametrize("span", [dict(sliding_window=1), dict(sliding_window=7), dict(sliding_window=24),
                                  dict(sliding_window=1000), dict(chunk_size=16), dict(chunk_size=37)],
                         ids=lambda kw: "-".join(f"{k}{v}" for k, v in kw.items()))
@pytest.mark.parametrize("with_sinks", [False, True])
def test_windows_chunks_and_sinks_match_direct_attention(span, with_sinks):
    q, k, v, sinks, c = _inputs(SEQ_LENS, Q_LENS, seed=len(span))
    sinks = sinks if with_sinks else None
    want = _direct(q, k, v, Q_LENS, SEQ_LENS, span_of(**span), sinks)
    _close(_run(q, c, Q_LENS, SEQ_LENS, sinks=sinks, **span), want, TOL["bf16"])
    ref = varlen_attention_reference(q, c.k_cache, c.v_cache, c.block_tables, Q_LENS, SEQ_LENS, sinks=sinks, **span)
    torch.testing.assert_close(ref[0], want[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ref[1], want[1], atol=1e-5, rtol=1e-5)


def test_sinks_without_a_window():
    q, k, v, sinks, c = _inputs(SEQ_LENS, Q_LENS, seed=5)
    _close(_run(q, c, Q_LENS, SEQ_LENS, sinks=sinks), _direct(q, k, v, Q_LENS, SEQ_LENS, span_of(), sinks),
           TOL["bf16"])


def test_pages_before_the_first_visible_key_are_never_read():
    q_lens, seq_lens, window, bs = [20, 1], [120, 90], 24, 4
    q, k, v, sinks, c = _inputs(seq_lens, q_lens, block_size=bs, seed=8)
    want = _direct(q, k, v, q_lens, seq_lens, span_of(sliding_window=window), sinks)
    tables = c.block_tables.clone()
    for b, (nq, nk) in enumerate(zip(q_lens, seq_lens)):
        for j in range(first_visible(span_of(sliding_window=window), nk - nq) // bs):
            c.k_cache[tables[b, j]] = float("nan")
            c.v_cache[tables[b, j]] = float("nan")
            tables[b, j] = -1
    _close(_run(q, c, q_lens, seq_lens, tables=tables, sinks=sinks, sliding_window=window), want, TOL["bf16"])
    with pytest.raises(ValueError, match="block_tables entries must index the pool"):
        _run(q, c, q_lens, seq_lens, tables=tables)


def test_fp8_window_with_sinks():
    q, k, v, sinks, c = _inputs(SEQ_LENS, Q_LENS, seed=9)
    c = quantize_fp8(c)
    span = dict(sliding_window=24)
    want = varlen_attention_reference(q, c.k_cache, c.v_cache, c.block_tables, Q_LENS, SEQ_LENS, k_scale=c.k_scale,
                                      v_scale=c.v_scale, sinks=sinks, **span)
    _close(_run(q, c, Q_LENS, SEQ_LENS, sinks=sinks, **span), want, TOL["fp8"])


def test_a_window_ranks_tiles_by_the_keys_they_read():
    """Without a window a decode row over a longer sequence (6,000 keys) outranks a chunk over
    5,000; with a 128-token window the decode row reads 128 keys and each chunk tile reads its
    rows' 128 plus the tile's spread, so the chunk comes first."""
    q_lens, seq_lens = [64, 1], [5000, 6000]
    kw = dict(n_q_heads=4, n_kv_heads=2, head_dim=32, device=DEVICE)
    assert plan_batch(q_lens, seq_lens, **kw).tiles[0, 0].item() == 1
    assert plan_batch(q_lens, seq_lens, sliding_window=128, **kw).tiles[0, 0].item() == 0


GPU_CASES = [
    # q_lens, seq_lens, block, hq, hkv, d, span, sinks
    ([2048, 1, 1, 512], [6000, 32768, 129, 512], 16, 64, 8, 64, dict(sliding_window=128), True),
    ([1024, 1], [9000, 4096], 32, 16, 8, 256, dict(sliding_window=1024), False),
    ([4096, 1], [20000, 8200], 16, 40, 8, 128, dict(chunk_size=8192), False),
]


@pytest.mark.gpu
@pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("case", GPU_CASES, ids=lambda c: f"d{c[5]}-{c[6]}-s{c[7]}")
def test_gpu_real_sizes(case):
    q_lens, seq_lens, bs, hq, hkv, d, span, with_sinks = case
    q, k, v, sinks, c = _inputs(seq_lens, q_lens, hq=hq, hkv=hkv, d=d, block_size=bs, seed=3)
    sinks = sinks if with_sinks else None
    want = varlen_attention_reference(q, c.k_cache, c.v_cache, c.block_tables, q_lens, seq_lens, sinks=sinks, **span)
    _close(_run(q, c, q_lens, seq_lens, sinks=sinks, **span), want, TOL["bf16"])

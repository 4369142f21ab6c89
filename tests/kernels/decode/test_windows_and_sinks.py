"""Sliding windows, chunked local attention and attention sinks in the paged decode kernel.

Each case is checked against attention computed directly on the contiguous K/V the pool was
paged from (softmax over the visible slice, the sink appended as one more logit with a zero
value), so neither the paged reference's gathering nor the kernel's page walk is trusted.
CPU (CI): the kernel under TRITON_INTERPRET=1 on small shapes; GPU (marked ``gpu``): real sizes.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from kernels.attention_span import FULL, Span, first_visible, span_of, visible_bound
from kernels.cache.int4 import quantize_pool_int4
from kernels.cache.paged import paged_from_contiguous, quantize_fp8
from kernels.decode.api import decode_plan, paged_decode_attention
from kernels.decode.config import FULL_MIN_TILES, default_num_splits
from kernels.decode.paged import default_config
from kernels.reference.paged import paged_attention_reference
from kernels.tolerances import tolerance

ON_GPU = torch.cuda.is_available()
DEVICE = "cuda" if ON_GPU else "cpu"
BF16_TOL = tolerance("paged_decode", "bf16").atol
FP8_TOL = tolerance("paged_decode", "fp8" if ON_GPU else "fp8 fp16 dots").atol


def _contiguous(batch, max_len, *, hq=4, hkv=2, d=64, seed=0):
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    k = torch.randn(batch, hkv, max_len, d, generator=g, device=DEVICE).to(torch.bfloat16)
    v = torch.randn(batch, hkv, max_len, d, generator=g, device=DEVICE).to(torch.bfloat16)
    q = torch.randn(batch, hq, d, generator=g, device=DEVICE).to(torch.bfloat16)
    sinks = torch.randn(hq, generator=g, device=DEVICE) * 2  # logits of the size gpt-oss learns
    return q, k, v, sinks


def _direct(q, k, v, lens, span: Span, sinks=None, k_deq=None, v_deq=None):
    """Attention of each sequence's last query over its visible contiguous keys, float32."""
    batch, hq, d = q.shape
    group = hq // k.shape[1]
    out = torch.empty(batch, hq, d, dtype=torch.float32, device=q.device)
    for b, n in enumerate(lens):
        lo = first_visible(span, n - 1)
        kb = (k if k_deq is None else k_deq)[b, :, lo:n].float().repeat_interleave(group, 0)
        vb = (v if v_deq is None else v_deq)[b, :, lo:n].float().repeat_interleave(group, 0)
        s = torch.einsum("hd,hnd->hn", q[b].float(), kb) / math.sqrt(d)
        p = torch.softmax(s if sinks is None else torch.cat([s, sinks.float()[:, None]], 1), dim=1)
        out[b] = torch.einsum("hn,hnd->hd", p[:, :kb.shape[1]], vb)
    return out


def _page(k, v, lens, block_size, *, seed=1, **kw):
    return paged_from_contiguous(k, v, lens, block_size=block_size, shuffle=True, poison_unused=True,
                                 generator=torch.Generator(device=DEVICE).manual_seed(seed), **kw)


def _err(out, ref):
    assert torch.isfinite(out).all(), "NaN/inf reached the output"
    return (out.float() - ref).abs().max().item()


def test_spans_follow_the_engines_definitions():
    # vLLM's window (W - 1, 0): the W tokens ending at the query; Llama 4's chunks start at
    # multiples of the chunk size.
    assert first_visible(span_of(sliding_window=128), 127) == 0
    assert first_visible(span_of(sliding_window=128), 128) == 1
    assert first_visible(span_of(sliding_window=1), 500) == 500
    assert first_visible(span_of(chunk_size=8192), 8191) == 0
    assert first_visible(span_of(chunk_size=8192), 8192) == 8192
    assert first_visible(span_of(chunk_size=8192), 20000) == 16384
    assert first_visible(FULL, 9999) == 0
    assert visible_bound(span_of(sliding_window=4096), 32768) == 4096
    assert visible_bound(span_of(chunk_size=100), 50) == 50


@pytest.mark.parametrize("kw,pattern", [
    (dict(sliding_window=4, chunk_size=4), "not both"),
    (dict(sliding_window=0), "sliding_window must be an int in 1"),
    (dict(chunk_size=2.5), "chunk_size must be an int"),
    (dict(sliding_window=True), "sliding_window must be an int"),
])
def test_bad_spans_are_refused(kw, pattern):
    with pytest.raises(ValueError, match=pattern):
        span_of(**kw)


LENS = [1, 17, 97, 200]


# (span, block size, split counts): every span kind over page sizes 1-64, windows inside one
# page, across pages and past the sequence, 16 splits leaving most of them empty.
SPAN_CASES = [
    (dict(sliding_window=1), 16, (None, 3)),
    (dict(sliding_window=17), 1, (None, 16)),
    (dict(sliding_window=100), 16, (1, 3, 16)),
    (dict(sliding_window=1000), 64, (None,)),
    (dict(chunk_size=16), 16, (None, 3)),
    (dict(chunk_size=37), 1, (None, 5)),
    (dict(chunk_size=37), 64, (16,)),
    (dict(chunk_size=512), 16, (None,)),
]


@pytest.mark.parametrize("kw,block_size,split_counts", SPAN_CASES,
                         ids=lambda x: "-".join(f"{k}{v}" for k, v in x.items()) if isinstance(x, dict) else str(x))
def test_windows_and_chunks_match_direct_attention(kw, block_size, split_counts):
    q, k, v, _ = _contiguous(len(LENS), max(LENS), seed=block_size)
    c = _page(k, v, LENS, block_size, spare_blocks=2)
    ref = _direct(q, k, v, LENS, span_of(**kw))
    for splits in split_counts:
        out = paged_decode_attention(q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens, num_splits=splits, **kw)
        assert _err(out, ref) <= BF16_TOL, (kw, splits)


@pytest.mark.parametrize("kw", [{}, dict(sliding_window=40), dict(chunk_size=64)], ids=["full", "window", "chunk"])
@pytest.mark.parametrize("hq,hkv", [(4, 2), (8, 1)])
def test_sinks_join_the_denominator(kw, hq, hkv):
    q, k, v, sinks = _contiguous(len(LENS), max(LENS), hq=hq, hkv=hkv, seed=hq)
    c = _page(k, v, LENS, 16)
    ref = _direct(q, k, v, LENS, span_of(**kw), sinks)
    assert _err(paged_attention_reference(q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens, sinks=sinks, **kw),
                ref) < 1e-5
    # Unsplit and merged inline the split kernel folds the sinks in; through the merge kernel,
    # the merge does and the split kernel runs without them.
    for splits, merge in ((None, "auto"), (1, "auto"), (5, "inline"), (5, "kernel"), (3, "kernel")):
        config = replace(default_config(q.shape[-1], c.k_cache.dtype), merge=merge)
        out = paged_decode_attention(q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens, sinks=sinks,
                                     num_splits=splits, config=config, **kw)
        assert _err(out, ref) <= BF16_TOL, (splits, merge)
    # A large sink takes nearly all the weight: the output shrinks towards 0, as e^sink / Z says.
    big = paged_decode_attention(q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens, sinks=sinks + 30, **kw)
    assert big.float().abs().max().item() < 1e-3


def test_sinks_in_bf16_are_widened_and_give_the_same_output():
    q, k, v, sinks = _contiguous(2, 50, seed=3)
    c = paged_from_contiguous(k, v, [50, 33], block_size=16)
    s16 = sinks.to(torch.bfloat16)
    out16 = paged_decode_attention(q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens, sinks=s16)
    out32 = paged_decode_attention(q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens, sinks=s16.float())
    assert torch.equal(out16, out32)


def test_pages_before_the_window_are_never_read():
    """Freed pages (table entries -1, pool pages full of NaN) before the first visible key change
    nothing, and validation accepts the table."""
    lens, bs, window = [200, 130], 16, 40
    q, k, v, sinks = _contiguous(len(lens), max(lens), seed=7)
    c = _page(k, v, lens, bs, spare_blocks=1)
    ref = _direct(q, k, v, lens, span_of(sliding_window=window), sinks)
    tables = c.block_tables.clone()
    for b, n in enumerate(lens):
        first_page = (n - window) // bs
        for j in range(first_page):
            c.k_cache[tables[b, j]] = float("nan")
            c.v_cache[tables[b, j]] = float("nan")
            tables[b, j] = -1
    for splits in (None, 4):
        out = paged_decode_attention(q, c.k_cache, c.v_cache, tables, c.seq_lens, sliding_window=window,
                                     sinks=sinks, num_splits=splits)
        assert _err(out, ref) <= BF16_TOL
    with pytest.raises(ValueError, match="block_tables entries must index the pool"):
        paged_decode_attention(q, c.k_cache, c.v_cache, tables, c.seq_lens)  # full attention reads them


def test_fp8_windows_and_sinks():
    lens = [97, 200]
    q, k, v, sinks = _contiguous(len(lens), max(lens), seed=9)
    c = quantize_fp8(_page(k, v, lens, 16), per_head=True)
    kw = dict(sliding_window=50)
    ref = paged_attention_reference(q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens, k_scale=c.k_scale,
                                    v_scale=c.v_scale, sinks=sinks, **kw)
    out = paged_decode_attention(q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens, k_scale=c.k_scale,
                                 v_scale=c.v_scale, sinks=sinks, **kw)
    assert _err(out, ref) <= FP8_TOL
    # and the reference itself is the direct computation on the dequantised values
    deq = [(x.float() * s.reshape(1, -1, 1, 1)).to(torch.float32) for x, s in ((c.k_cache, c.k_scale),
                                                                              (c.v_cache, c.v_scale))]
    k_deq = torch.stack([deq[0][c.block_tables[b, :13].long()].transpose(0, 1).reshape(2, -1, 64)[:, :200]
                         for b in range(2)])
    v_deq = torch.stack([deq[1][c.block_tables[b, :13].long()].transpose(0, 1).reshape(2, -1, 64)[:, :200]
                         for b in range(2)])
    assert _err(ref, _direct(q, k, v, lens, span_of(**kw), sinks, k_deq=k_deq, v_deq=v_deq)) < 1e-5


def test_a_window_plans_its_splits_for_the_keys_it_sees():
    lens = [3000]
    q, k, v, _ = _contiguous(1, 3000, seed=2)
    c = paged_from_contiguous(k, v, lens, block_size=16)
    cfg = default_config(64, torch.bfloat16)
    plan = decode_plan(q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens, sliding_window=128)
    sms = torch.cuda.get_device_properties(0).multi_processor_count if ON_GPU else 4
    # 192 keys at most: 2 tiles of 128 (head dim 64's tile), a window short enough to stay whole.
    assert cfg.block_n == 128 and plan.num_splits == 1
    longer = decode_plan(q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens, sliding_window=1024)
    if not ON_GPU:  # on a GPU the residency comes from the compiled kernel
        # 1,152 keys at most: 9 tiles, one a split at most.
        assert longer.num_splits == default_num_splits(1, 2, 1024 + cfg.block_n, cfg.block_n, sms, cfg.waves, 2,
                                                       min_tiles=1) > 1
    full = decode_plan(q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens)
    # The window cuts at most one tile a split (17), full attention keeps at least four
    # (3,000 keys: 47 tiles, 11 splits at most): on 132 SMs the window gets more splits.
    assert plan.num_splits < longer.num_splits <= math.ceil((1024 + cfg.block_n) / cfg.block_n)
    assert 1 <= full.num_splits <= math.ceil(3000 / cfg.block_n) // FULL_MIN_TILES


def test_windows_and_sinks_refuse_what_cannot_run_them():
    q, k, v, sinks = _contiguous(1, 32, seed=4)
    c = paged_from_contiguous(k, v, [32], block_size=16)
    with pytest.raises(ValueError, match="not INT4"):
        kq, vq = quantize_pool_int4(c.k_cache), quantize_pool_int4(c.v_cache)
        paged_decode_attention(q, kq, vq, c.block_tables, c.seq_lens, sliding_window=8)
    with pytest.raises(ValueError, match="run on the Triton kernel"):
        paged_decode_attention(q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens, sinks=sinks, backend="rdq")
    with pytest.raises(ValueError, match="sinks must have n_q_heads=4"):
        paged_decode_attention(q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens, sinks=sinks[:3])
    with pytest.raises(ValueError, match="sinks must be 1-D float32"):
        paged_decode_attention(q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens, sinks=sinks.to(torch.int32))


# GPU: real sizes (gpt-oss 64/8 x 64, Gemma-3 window 1024 at d 256 / 128, Llama 4 chunks 8192)
GPU_CASES = [
    # lens, block, hq, hkv, d, kw, sinks, fp8
    ([32768, 4096, 129, 1], 16, 64, 8, 64, dict(sliding_window=128), True, False),
    ([32768, 5000], 64, 64, 8, 64, dict(sliding_window=128), True, True),
    ([20000, 1025], 16, 32, 16, 128, dict(sliding_window=1024), False, False),
    ([9000, 3], 32, 16, 8, 256, dict(sliding_window=1024), False, True),
    ([20000, 8192, 8193], 16, 40, 8, 128, dict(chunk_size=8192), False, False),
    ([32768, 777], 1, 64, 8, 64, {}, True, False),
]


@pytest.mark.gpu
@pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("case", GPU_CASES, ids=lambda c: f"L{c[0][0]}-bs{c[1]}-d{c[4]}-{c[5]}-s{c[6]}-f{c[7]}")
def test_gpu_real_sizes(case):
    lens, bs, hq, hkv, d, kw, with_sinks, fp8 = case
    q, k, v, sinks = _contiguous(len(lens), max(lens), hq=hq, hkv=hkv, d=d, seed=11)
    c = _page(k, v, lens, bs, spare_blocks=3)
    if fp8:
        c = quantize_fp8(c)
    sinks = sinks if with_sinks else None
    ref = paged_attention_reference(q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens, k_scale=c.k_scale,
                                    v_scale=c.v_scale, sinks=sinks, **kw)
    out = paged_decode_attention(q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens, k_scale=c.k_scale,
                                 v_scale=c.v_scale, sinks=sinks, **kw)
    assert _err(out, ref) <= (FP8_TOL if fp8 else BF16_TOL)

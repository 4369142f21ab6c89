"""Mixed chunked-prefill + decode attention over a paged cache, against the float32 reference.

CPU (CI): the kernel runs under TRITON_INTERPRET=1 at tiny shapes with small tiles
(``default_varlen_config``: 32-row prefill tiles, 16-key steps), so tiles that end inside a
chunk, chunks that end mid-block, the shared/masked key split and decode-sized tiles are all
crossed. GPU (marked ``gpu``): the same kernel at real sizes; skipped only without CUDA.
"""

from __future__ import annotations

import math

import pytest
import torch

from kernels.prefill.chunked import VarlenConfig, chunked_prefill_attention, plan_batch
from kernels.prefill.flash import flash_attention_forward
from kernels.cache.paged import build_paged_cache, paged_from_contiguous, quantize_fp8
from kernels.decode.api import paged_decode_attention
from kernels.tolerances import tolerance
from kernels.reference.varlen import cu_seqlens, varlen_attention_reference

ON_GPU = torch.cuda.is_available()
DEVICE = "cuda" if ON_GPU else "cpu"
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
TOL = {name: tolerance("chunked_prefill", name) for name in ("bf16", "fp16", "fp8")}
LSE_TOL = tolerance("flash_forward_lse", "fp32")


def _gen(seed: int) -> torch.Generator:
    return torch.Generator(device=DEVICE).manual_seed(seed)


def _case(q_lens, seq_lens, *, block_size=16, hq=4, hkv=2, d=32, dtype="fp16", seed=0):
    g = _gen(seed)
    cache = build_paged_cache(seq_lens, block_size=block_size, n_kv_heads=hkv, head_dim=d, dtype=DTYPES[dtype],
                              device=DEVICE, shuffle=True, generator=g, spare_blocks=2, poison_unused=True)
    q = torch.randn(sum(q_lens), hq, d, generator=g, device=DEVICE).to(DTYPES[dtype])
    return q, cache


def _run(q, c, q_lens, seq_lens, config=None, **kw):
    plan = plan_batch(q_lens, seq_lens, n_q_heads=q.shape[1], n_kv_heads=c.n_kv_heads, head_dim=c.head_dim,
                      device=q.device, config=config)
    return chunked_prefill_attention(q, c.k_cache, c.v_cache, c.block_tables, plan,
                                     k_scale=c.k_scale, v_scale=c.v_scale, **kw)


def _check(q, c, q_lens, seq_lens, tol, config=None, **kw):
    out, lse = _run(q, c, q_lens, seq_lens, config, **kw)
    ref, ref_lse = varlen_attention_reference(q, c.k_cache, c.v_cache, c.block_tables, q_lens, seq_lens,
                                              k_scale=c.k_scale, v_scale=c.v_scale, **kw)
    assert out.shape == q.shape and out.dtype == q.dtype and lse.shape == q.shape[:2]
    assert torch.isfinite(out).all() and torch.isfinite(lse).all(), "NaN/inf reached the output"
    torch.testing.assert_close(out.float(), ref, atol=tol.atol, rtol=tol.rtol)
    torch.testing.assert_close(lse, ref_lse, atol=LSE_TOL.atol, rtol=LSE_TOL.rtol)
    return out, lse


# ---------------------------------------------------------------- mixed batches


@pytest.mark.parametrize("hq,hkv", [(2, 2), (8, 2), (8, 1)])  # GQA ratios 1, 4, 8
def test_mixed_batch_matches_reference(hq, hkv):
    # Decode rows over 1, 17 and 97 tokens; a chunk of 37 over a prefix of 60 (ends mid-block);
    # a first chunk of 50 tokens (no prefix).
    q_lens, seq_lens = [1, 37, 1, 50, 1], [17, 97, 1, 50, 97]
    q, c = _case(q_lens, seq_lens, hq=hq, hkv=hkv, seed=hq + hkv)
    _check(q, c, q_lens, seq_lens, TOL["fp16"])


@pytest.mark.parametrize("block_size", [1, 16, 64])
def test_chunks_ending_mid_block_and_tails(block_size):
    q_lens, seq_lens = [17, 1, 33], [40, 97, 33]
    q, c = _case(q_lens, seq_lens, block_size=block_size, hq=4, hkv=2, dtype="bf16", seed=block_size)
    _check(q, c, q_lens, seq_lens, TOL["bf16"])


def test_short_chunks_take_decode_tiles():
    # GROUP 4 pads to 4 heads: a decode tile holds 4 tokens, so chunks of 2-4 go there too.
    q_lens, seq_lens = [2, 4, 5], [30, 4, 21]
    q, c = _case(q_lens, seq_lens, hq=8, hkv=2)
    plan = plan_batch(q_lens, seq_lens, n_q_heads=8, n_kv_heads=2, head_dim=32, device=DEVICE)
    assert plan.small_q == 4 and plan.n_small_tiles == 2
    _check(q, c, q_lens, seq_lens, TOL["fp16"])


def test_page_size_invariance():
    """The same logical K/V paged with block sizes 1, 16 and 32 gives the same output."""
    g = _gen(3)
    q_lens, seq_lens = [20, 1], [45, 70]
    k = torch.randn(2, 2, 70, 32, generator=g, device=DEVICE).to(torch.float16)
    v = torch.randn(2, 2, 70, 32, generator=g, device=DEVICE).to(torch.float16)
    q = torch.randn(21, 4, 32, generator=g, device=DEVICE).to(torch.float16)
    outs = []
    for bs in (1, 16, 32):
        c = paged_from_contiguous(k, v, seq_lens, block_size=bs, shuffle=True, generator=_gen(bs), spare_blocks=2,
                                  poison_unused=True)
        outs.append(_check(q, c, q_lens, seq_lens, TOL["fp16"])[0].float())
    # Same key steps in the same order whatever the page size: only the addressing differs.
    for out in outs[1:]:
        assert (out - outs[0]).abs().max().item() <= 1e-6


def test_nan_in_unused_slots_does_not_reach_output():
    q_lens, seq_lens = [9, 1], [25, 3]
    q, c = _case(q_lens, seq_lens, block_size=16)
    assert torch.isnan(c.k_cache.float()).any() and torch.isnan(c.v_cache.float()).any()
    _check(q, c, q_lens, seq_lens, TOL["fp16"])


def test_shuffled_and_in_order_tables_agree():
    g = _gen(5)
    k = torch.randn(1, 2, 50, 32, generator=g, device=DEVICE).to(torch.float16)
    v = torch.randn(1, 2, 50, 32, generator=g, device=DEVICE).to(torch.float16)
    q = torch.randn(18, 4, 32, generator=g, device=DEVICE).to(torch.float16)
    a = paged_from_contiguous(k, v, [50], block_size=16, shuffle=False)
    b = paged_from_contiguous(k, v, [50], block_size=16, shuffle=True, generator=_gen(9), spare_blocks=4)
    assert not torch.equal(a.block_tables[0, :4].cpu(), b.block_tables[0, :4].cpu())
    assert torch.allclose(_run(q, a, [18], [50])[0].float(), _run(q, b, [18], [50])[0].float(), atol=1e-6)


def test_decode_only_batch_equals_the_decode_kernel():
    seq_lens = [1, 17, 97, 40]
    q, c = _case([1] * 4, seq_lens, hq=8, hkv=2, dtype="bf16", seed=11)
    out, _ = _check(q, c, [1] * 4, seq_lens, TOL["bf16"])
    dec = paged_decode_attention(q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens)
    # Both are checked against the reference; against each other they differ by roundings only.
    assert (out.float() - dec.float()).abs().max().item() <= TOL["bf16"].atol


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_single_chunk_without_prefix_equals_dense_forward(dtype):
    n, hq, hkv, d = 70, 4, 2, 64
    q, c = _case([n], [n], hq=hq, hkv=hkv, d=d, dtype=dtype, seed=2)
    out, lse = _check(q, c, [n], [n], TOL[dtype])
    k = c.k_cache[c.block_tables[0, :5].long()].transpose(0, 1).reshape(hkv, -1, d)[:, :n][None]
    v = c.v_cache[c.block_tables[0, :5].long()].transpose(0, 1).reshape(hkv, -1, d)[:, :n][None]
    dense, dense_lse = flash_attention_forward(q.transpose(0, 1)[None].contiguous(), k.contiguous(), v.contiguous(),
                                               causal=True)
    tol = TOL[dtype]
    torch.testing.assert_close(out.float(), dense[0].transpose(0, 1).float(), atol=tol.atol, rtol=tol.rtol)
    torch.testing.assert_close(lse, dense_lse[0].transpose(0, 1), atol=LSE_TOL.atol, rtol=LSE_TOL.rtol)


@pytest.mark.parametrize("d", [64, 128, 256])
def test_head_dims(d):
    q_lens, seq_lens = [19, 1], [30, 24]
    q, c = _case(q_lens, seq_lens, hq=4, hkv=1, d=d, block_size=32, seed=d)
    _check(q, c, q_lens, seq_lens, TOL["fp16"])


@pytest.mark.parametrize("per_head", [True, False])
def test_fp8_kv_within_tolerance_of_dequantised_reference(per_head):
    q_lens, seq_lens = [21, 1], [40, 33]
    q, c16 = _case(q_lens, seq_lens, hq=8, hkv=2, dtype="bf16", seed=4)
    c8 = quantize_fp8(c16, per_head=per_head)
    out, _ = _check(q, c8, q_lens, seq_lens, TOL["fp8"])
    ref16, _ = varlen_attention_reference(q, c16.k_cache, c16.v_cache, c16.block_tables, q_lens, seq_lens)
    assert (out.float() - ref16).abs().max().item() < 0.25  # e4m3 keeps 4 bits: loose, informative


def test_sm_scale_and_lse_normalise_the_softmax():
    q_lens, seq_lens = [12], [30]
    q, c = _case(q_lens, seq_lens, hq=2, hkv=2, seed=8)
    _, lse = _check(q, c, q_lens, seq_lens, TOL["fp16"], sm_scale=0.3)
    # exp(s * scale - lse) over the keys a row sees sums to 1 (computed here by hand).
    k = c.k_cache[c.block_tables[0, :2].long()].transpose(0, 1).reshape(2, -1, 32)[:, :30].float()
    s = torch.einsum("thd,hkd->thk", q.float(), k) * 0.3
    visible = torch.arange(30, device=DEVICE)[None, :] <= (18 + torch.arange(12, device=DEVICE))[:, None]
    total = (torch.exp(s - lse[..., None]) * visible[:, None, :]).sum(-1)
    torch.testing.assert_close(total, torch.ones_like(total), atol=1e-4, rtol=1e-4)


def test_other_tile_shapes():
    q_lens, seq_lens = [45, 1, 3], [80, 50, 3]
    q, c = _case(q_lens, seq_lens, hq=4, hkv=2, seed=6)
    for cfg in (VarlenConfig(block_m=16, block_n=16, small_block_n=32, num_warps=4, num_stages=1),
                VarlenConfig(block_m=64, block_n=32, small_block_n=16, num_warps=4, num_stages=1)):
        _check(q, c, q_lens, seq_lens, TOL["fp16"], config=cfg)


# ---------------------------------------------------------------- the plan


def test_plan_tiles_by_hand():
    # GROUP 4 (pads to 4): prefill tiles of 128 / 4 = 32 tokens, decode tiles of 16 / 4 = 4 tokens.
    cfg = VarlenConfig(block_m=128, block_n=64)
    plan = plan_batch([100, 1, 3], [1100, 500, 3], n_q_heads=8, n_kv_heads=2, head_dim=128, device="cpu",
                      config=cfg)
    assert (plan.big_q, plan.small_q, plan.group_pad) == (32, 4, 4)
    # Chunk of 100 over a prefix of 1000: tiles at tokens 0, 32, 64, 96 reading 1032, 1064,
    # 1096 and 1100 keys; the decode row reads 500 keys; the 3-token chunk 3.
    assert plan.tiles.tolist() == [[0, 96, 0], [0, 64, 0], [0, 32, 0], [0, 0, 0], [1, 0, 1], [2, 0, 1]]
    assert plan.programs == 6 * 2 and plan.n_small_tiles == 2
    assert plan.cu_seqlens_q.tolist() == cu_seqlens([100, 1, 3]) == [0, 100, 101, 104]


def test_plan_pads_odd_groups():
    plan = plan_batch([40], [40], n_q_heads=6, n_kv_heads=2, head_dim=64, device="cpu",
                      config=VarlenConfig(block_m=128))
    assert (plan.group, plan.group_pad, plan.big_q) == (3, 4, 32)


def test_odd_group_matches_reference():
    q_lens, seq_lens = [20, 1], [33, 19]
    q, c = _case(q_lens, seq_lens, hq=6, hkv=2, seed=12)
    _check(q, c, q_lens, seq_lens, TOL["fp16"])


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize("q_lens,seq_lens,pattern", [
    ([], [], "must name the same sequences"),
    ([1, 2], [3], "must name the same sequences"),
    ([5], [4], r"1 <= q_len <= seq_len; \(sequence, q_len, seq_len\) \[\(0, 5, 4\)\]"),
    ([0], [4], r"\[\(0, 0, 4\)\]"),
])
def test_plan_rejects_bad_lengths(q_lens, seq_lens, pattern):
    with pytest.raises(ValueError, match=pattern):
        plan_batch(q_lens, seq_lens, n_q_heads=4, n_kv_heads=2, head_dim=32, device="cpu")


def test_plan_rejects_bad_heads():
    with pytest.raises(ValueError, match=r"n_q_heads \(6\) must be a multiple of n_kv_heads \(4\)"):
        plan_batch([1], [1], n_q_heads=6, n_kv_heads=4, head_dim=32, device="cpu")
    with pytest.raises(ValueError, match="head_dim must be one of .* got 48"):
        plan_batch([1], [1], n_q_heads=4, n_kv_heads=2, head_dim=48, device="cpu")
    with pytest.raises(ValueError, match="at most 64 query heads per KV head, got 128"):
        plan_batch([1], [1], n_q_heads=128, n_kv_heads=1, head_dim=32, device="cpu")


def _good():
    q, c = _case([5, 1], [20, 9])
    plan = plan_batch([5, 1], [20, 9], n_q_heads=4, n_kv_heads=2, head_dim=32, device=DEVICE)
    return dict(q=q, k_cache=c.k_cache, v_cache=c.v_cache, block_tables=c.block_tables, plan=plan)


BAD = {
    "q dtype": (lambda a: a.update(q=a["q"].float()), "q dtype must be one of"),
    "q rows": (lambda a: a.update(q=a["q"][:5]), r"q must be \[total_q, n_q_heads, head_dim\] = \[6, 4, 32\]"),
    "kv dtype": (lambda a: a.update(k_cache=a["k_cache"].bfloat16(), v_cache=a["v_cache"].bfloat16()),
                 "k_cache dtype torch.bfloat16 must equal q dtype torch.float16"),
    "k/v differ": (lambda a: a.update(v_cache=a["v_cache"][:1]), "k_cache and v_cache differ"),
    "table rows": (lambda a: a.update(block_tables=a["block_tables"][:1]), "block_tables has 1 rows for a batch of 2"),
    "table dtype": (lambda a: a.update(block_tables=a["block_tables"].long()), "block_tables dtype"),
    "table too narrow": (lambda a: a.update(block_tables=a["block_tables"][:, :1].contiguous()),
                         "seq_lens up to 20 exceed the tables' 1 columns x block_size 16 = 16 tokens"),
    "table outside pool": (lambda a: a["block_tables"].__setitem__((1, 0), 99),
                           r"\(sequence, block\) \[\(1, 0\)\] hold \[99\]"),
    "q stride": (lambda a: a.update(q=a["q"].transpose(1, 2).contiguous().transpose(1, 2)),
                 "q last dim must be contiguous"),
    "scale on bf16 cache": (lambda a: a.update(k_scale=0.5), "k_scale applies only to a torch.float8_e4m3fn cache"),
    "sm_scale": (lambda a: a.update(sm_scale=float("nan")), "sm_scale must be a finite positive number"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_input_raises_value_error(name):
    args = _good()
    mutate, pattern = BAD[name]
    mutate(args)
    kw = {k: args.pop(k) for k in ("k_scale", "sm_scale") if k in args}
    with pytest.raises(ValueError, match=pattern):
        chunked_prefill_attention(args["q"], args["k_cache"], args["v_cache"], args["block_tables"], args["plan"],
                                  **kw)


# ---------------------------------------------------------------- GPU, real sizes


@pytest.mark.gpu
@pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_gpu_mixed_batch(d, dtype):
    # Two chunks over prefixes (one ending mid-block), a first chunk, decode rows with tails.
    q_lens = [512, 300, 1025, 1, 1, 1]
    seq_lens = [2560, 1327, 1025, 1027, 97, 4096]
    q, c = _case(q_lens, seq_lens, hq=32, hkv=8, d=d, dtype=dtype, seed=d)
    _check(q, c, q_lens, seq_lens, TOL[dtype])


@pytest.mark.gpu
@pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")
def test_gpu_fp8_and_dense_equivalence():
    q_lens, seq_lens = [700, 1], [1500, 2000]
    q, c16 = _case(q_lens, seq_lens, hq=32, hkv=8, d=128, dtype="bf16", seed=1)
    _check(q, quantize_fp8(c16), q_lens, seq_lens, TOL["fp8"])
    n = 2048
    q, c = _case([n], [n], hq=32, hkv=8, d=128, dtype="bf16", seed=2)
    out, _ = _check(q, c, [n], [n], TOL["bf16"])
    blocks = math.ceil(n / 16)
    k = c.k_cache[c.block_tables[0, :blocks].long()].transpose(0, 1).reshape(8, -1, 128)[None].contiguous()
    v = c.v_cache[c.block_tables[0, :blocks].long()].transpose(0, 1).reshape(8, -1, 128)[None].contiguous()
    dense, _ = flash_attention_forward(q.transpose(0, 1)[None].contiguous(), k, v, causal=True)
    assert (out.float() - dense[0].transpose(0, 1).float()).abs().max().item() <= TOL["bf16"].atol

"""The INT4 paged decode kernel against the float32 reference on the dequantised cache.

CPU (CI): the Triton interpreter on tiny shapes — tails 1/17/97, GQA 1/4/8, shuffled tables,
block sizes 1 to 256, NaN scales in every unused slot, split-KV, both dequantisers. GPU
(marked ``gpu``): real sizes. The quantiser is checked against hand-worked codes, and the
bytes the kernel reads against the sizer's INT4 bytes per token.
"""

from __future__ import annotations

import pytest
import torch

from kernels.cache.int4 import dequantize_int4, quantize_int4, quantize_pool_int4
from kernels.cache.paged import build_paged_cache, paged_from_contiguous
from kernels.decode.api import paged_decode_attention
from kernels.decode.paged import DecodeConfig
from kernels.reference.paged import paged_attention_reference
from kernels.tolerances import tolerance

ON_GPU = torch.cuda.is_available()
DEVICE = "cuda" if ON_GPU else "cpu"
TOL = tolerance("paged_decode", "int4").atol
gpu = pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")


def _gen(seed):
    return torch.Generator(device=DEVICE).manual_seed(seed)


def _case(lens, *, block_size=16, hq=4, hkv=2, d=64, seed=0, spare=3):
    g = _gen(seed)
    c = build_paged_cache(lens, block_size=block_size, n_kv_heads=hkv, head_dim=d, device=DEVICE, shuffle=True,
                          generator=g, spare_blocks=spare, poison_unused=True)
    q = torch.randn(len(lens), hq, d, generator=g, device=DEVICE).to(torch.bfloat16)
    return q, quantize_int4(c)


def _ref(q, c):
    return paged_attention_reference(q, dequantize_int4(c.k), dequantize_int4(c.v), c.block_tables, c.seq_lens)


def _run(q, c, **kw):
    return paged_decode_attention(q, c.k, c.v, c.block_tables, c.seq_lens, **kw)


def _assert_close(out, ref, tol=TOL):
    assert torch.isfinite(out).all(), "NaN/inf reached the output"
    err = (out.float() - ref).abs().max().item()
    assert err <= tol, f"max abs error {err:.3e} > {tol:.1e}"


def test_quantiser_codes_by_hand():
    # One token, head_dim 32: the low half holds 0..15 scaled, the high half a single 7.
    x = torch.zeros(1, 1, 1, 32)
    x[..., :16] = torch.arange(-7, 9).float() * 0.5  # amax 4.0 -> scale 4/7; codes round(x*7/4) + 8
    x[..., 16] = 7.0  # amax 7 -> scale 1, code 15
    pool = quantize_pool_int4(x)
    lo_scale, hi_scale = pool.scales[0, 0, 0].tolist()
    assert lo_scale == pytest.approx(4 / 7, rel=1e-3) and hi_scale == 1.0
    assert int(pool.data[0, 0, 0, 0]) & 0xF == 8 + round(-3.5 * 7 / 4)  # -3.5 -> code 2
    assert int(pool.data[0, 0, 0, 0]) >> 4 == 15  # dim 16 (= 0 + 32/2) in the high nibble
    assert int(pool.data[0, 0, 0, 1]) >> 4 == 8  # dim 17 is 0 -> code 8
    back = dequantize_int4(pool)
    assert (back - x).abs().max().item() <= (4 / 7) / 2 + 1e-3  # within half a step


def test_bytes_read_match_the_sizer():
    """68 B per token and KV head at d = 128: what the sizer counts for INT4 with group size 64."""
    from sizing.precisions import get_precision

    c = quantize_int4(build_paged_cache([5], block_size=16, n_kv_heads=8, head_dim=128))
    int4 = get_precision("int4", group_size=64)
    assert c.k.bytes_per_token_per_head == 68
    assert c.bytes_per_token == 2 * 8 * 128 * int4.bytes_per_value  # K and V, 8 heads, 128 values


@pytest.mark.parametrize("lens", [[1], [17], [97], [1, 17, 97]])
@pytest.mark.parametrize("hq,hkv", [(2, 2), (8, 2), (8, 1)])  # GQA ratios 1, 4, 8
def test_lengths_and_gqa_ratios(lens, hq, hkv):
    q, c = _case(lens, hq=hq, hkv=hkv)
    _assert_close(_run(q, c), _ref(q, c))


@pytest.mark.parametrize("dequant", [0, 1])
@pytest.mark.parametrize("splits", [1, 3, 40])
def test_splits_and_dequantisers(dequant, splits):
    q, c = _case([300, 33], hq=8, hkv=2, seed=4)
    out = _run(q, c, num_splits=splits, dequant=dequant, config=DecodeConfig(block_n=16))
    _assert_close(out, _ref(q, c))


def test_block_size_invariance_1_to_256():
    g = _gen(3)
    k = torch.randn(2, 2, 97, 64, generator=g, device=DEVICE)
    v = torch.randn(2, 2, 97, 64, generator=g, device=DEVICE)
    q = torch.randn(2, 8, 64, generator=g, device=DEVICE).to(torch.bfloat16)
    outs = []
    for bs in (1, 16, 64, 256):
        c = quantize_int4(paged_from_contiguous(k, v, [97, 33], block_size=bs, shuffle=True, generator=_gen(bs),
                                                spare_blocks=2, poison_unused=True))
        outs.append(_run(q, c, num_splits=2, config=DecodeConfig(block_n=32)).float())
        _assert_close(outs[-1], _ref(q, c))
    for out in outs:  # the same codes and scales whatever the page size
        assert (out - outs[0]).abs().max().item() <= 1e-6


def test_nan_scales_in_unused_slots_do_not_reach_the_output():
    q, c = _case([5, 20], block_size=16, seed=9)
    assert torch.isnan(c.k.scales.float()).any()  # the poisoned slots really hold NaN
    _assert_close(_run(q, c, num_splits=2, config=DecodeConfig(block_n=16)), _ref(q, c))


def test_bad_inputs_name_the_argument():
    q, c = _case([17])
    with pytest.raises(ValueError, match="k must be an Int4Pool"):
        paged_decode_attention(q, c.k.data, c.v, c.block_tables, c.seq_lens)
    with pytest.raises(ValueError, match="head_dim"):
        paged_decode_attention(q[..., :32].contiguous(), c.k, c.v, c.block_tables, c.seq_lens)
    with pytest.raises(ValueError, match="dequant must be 0 or 1"):
        _run(q, c, dequant=2)
    with pytest.raises(ValueError, match="backend must be one of"):
        _run(q, c, backend="cuda")
    with pytest.raises(ValueError, match="INT4 pools need head_dim"):
        quantize_pool_int4(torch.zeros(1, 1, 1, 96))


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("bs,splits", [(1, 9), (16, None), (256, 4)])
def test_gpu_real_sizes(bs, splits):
    q, c = _case([4096, 999, 33], block_size=bs, hq=32, hkv=8, d=128, seed=11, spare=5)
    for dequant in (0, 1):
        _assert_close(_run(q, c, num_splits=splits, dequant=dequant, backend="triton"), _ref(q, c))
    _assert_close(_run(q, c, num_splits=splits), _ref(q, c))  # the default: Gluon on Hopper

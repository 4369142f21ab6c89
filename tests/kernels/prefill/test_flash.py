"""Tests of the tiled FlashAttention forward kernel against the float32 reference.

On CPU (CI) the kernel runs under TRITON_INTERPRET=1 (set by tests/conftest.py) at tiny shapes
with small tiles (see kernels.prefill.flash.pick_config), so masked tails, several off-diagonal
tiles and the diagonal are all exercised. The same checks run at real sizes on a GPU
(``-m gpu``), skipped only when CUDA is unavailable.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from kernels.prefill.flash import GLUON_MIN_TOKENS, FlashConfig, flash_attention_forward, gluon_preferred, pick_config
from kernels.runtime import hopper_gluon_available
from kernels.reference.dense import naive_attention_lse
from kernels.tolerances import tolerance

HAS_CUDA = torch.cuda.is_available()
DEVICE = "cuda" if HAS_CUDA else "cpu"

# (atol, rtol) of the output and of the log-sum-exp against the float32 reference: the
# project's tolerance table, where the reasons are.
OUT_TOL = {dtype: (tolerance("flash_forward", name).atol, tolerance("flash_forward", name).rtol)
           for dtype, name in ((torch.float16, "fp16"), (torch.bfloat16, "bf16"))}
LSE_TOL = (tolerance("flash_forward_lse", "fp32").atol, tolerance("flash_forward_lse", "fp32").rtol)


def _inputs(b, hq, hkv, n, d, dtype, seed=0, device=DEVICE):
    g = torch.Generator(device="cpu").manual_seed(seed)
    q = torch.randn(b, hq, n, d, generator=g).to(device=device, dtype=dtype)
    k = torch.randn(b, hkv, n, d, generator=g).to(device=device, dtype=dtype)
    v = torch.randn(b, hkv, n, d, generator=g).to(device=device, dtype=dtype)
    return q, k, v


def _check(q, k, v, *, causal, sm_scale=None, config=None):
    out, lse = flash_attention_forward(q, k, v, causal=causal, sm_scale=sm_scale, config=config)
    ref_out, ref_lse = naive_attention_lse(q, k, v, causal=causal, sm_scale=sm_scale)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert lse.shape == q.shape[:3] and lse.dtype == torch.float32
    assert torch.isfinite(out).all(), "unwritten or NaN output"
    atol, rtol = OUT_TOL[q.dtype]
    torch.testing.assert_close(out.float(), ref_out, atol=atol, rtol=rtol)
    torch.testing.assert_close(lse, ref_lse, atol=LSE_TOL[0], rtol=LSE_TOL[1])


# ---------------------------------------------------------------- interpreter-sized checks


@pytest.mark.parametrize("n", [1, 17, 97])  # 97: three 32-row query tiles + a 1-row tail
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("group", [1, 4, 8])  # GQA ratios Hq / Hkv
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_matches_reference(n, causal, group, dtype):
    q, k, v = _inputs(1, group, 1, n, 64, dtype, seed=n + group)
    _check(q, k, v, causal=causal)


@pytest.mark.parametrize("n", [17, 40])
@pytest.mark.parametrize("causal", [False, True])
def test_head_dim_128(n, causal):
    q, k, v = _inputs(2, 4, 2, n, 128, torch.bfloat16, seed=n)
    _check(q, k, v, causal=causal)


@pytest.mark.parametrize("causal", [False, True])
def test_head_dim_256(causal):
    # Gemma-2/3 heads: a 33-token tail crosses two 32-row query tiles and three 16-key steps.
    q, k, v = _inputs(1, 2, 1, 33, 256, torch.bfloat16, seed=9)
    _check(q, k, v, causal=causal)


def test_maxnreg_is_checked():
    with pytest.raises(ValueError, match="maxnreg must be in 24..255"):
        FlashConfig(block_m=128, block_n=64, num_warps=8, num_stages=2, maxnreg=300)


@pytest.mark.parametrize(
    "config",
    [
        FlashConfig(block_m=16, block_n=16, num_warps=4, num_stages=1),
        FlashConfig(block_m=32, block_n=16, num_warps=4, num_stages=1, maxnreg=128),
        FlashConfig(block_m=64, block_n=32, num_warps=4, num_stages=2),
        FlashConfig(block_m=32, block_n=32, num_warps=4, num_stages=1),
        # TMA descriptors over the flattened [B*H*N, D] views: tail tiles read the next
        # head's rows, which the masks must neutralise (B=2 below makes that happen).
        FlashConfig(block_m=32, block_n=16, num_warps=4, num_stages=1, use_tma=True),
        FlashConfig(block_m=32, block_n=32, num_warps=4, num_stages=1, use_tma=True),
    ],
)
@pytest.mark.parametrize("causal", [False, True])
def test_other_tile_shapes(config, causal):
    # Block shapes change which keys fall in the unmasked loop, the diagonal and the tail.
    q, k, v = _inputs(2, 2, 1, 50, 64, torch.float16, seed=3)
    _check(q, k, v, causal=causal, config=config)


def test_custom_scale():
    q, k, v = _inputs(1, 2, 2, 33, 64, torch.float16, seed=5)
    _check(q, k, v, causal=True, sm_scale=0.05)


def test_strided_inputs_and_nan_padding_never_read():
    # [B, N, H, D] storage viewed as [B, H, N, D] (what a QKV projection produces), and K/V
    # cut from buffers whose slots past N hold NaN: the masked tail must not read them.
    b, hq, hkv, n, d = 1, 4, 2, 37, 64
    q = torch.randn(b, n, hq, d).to(DEVICE, torch.bfloat16).transpose(1, 2)
    k_buf = torch.full((b, hkv, n + 27, d), float("nan"), device=DEVICE, dtype=torch.bfloat16)
    v_buf = torch.full_like(k_buf, float("nan"))
    k_buf[:, :, :n] = torch.randn(b, hkv, n, d).to(DEVICE, torch.bfloat16)
    v_buf[:, :, :n] = torch.randn(b, hkv, n, d).to(DEVICE, torch.bfloat16)
    k, v = k_buf[:, :, :n], v_buf[:, :, :n]
    assert not q.is_contiguous()
    for causal in (False, True):
        _check(q, k, v, causal=causal)


def test_lse_gives_the_softmax_normaliser():
    # exp(s*scale - lse) summed over the keys a row sees must be 1.
    q, k, v = _inputs(1, 1, 1, 21, 64, torch.float16, seed=7)
    _, lse = flash_attention_forward(q, k, v, causal=True)
    s = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(64)
    s = s.masked_fill(torch.ones(21, 21, dtype=torch.bool, device=DEVICE).triu(1), float("-inf"))
    total = torch.exp(s - lse[..., None]).sum(-1)
    torch.testing.assert_close(total, torch.ones_like(total), atol=1e-4, rtol=1e-4)


# ---------------------------------------------------------------- bad input


def _good():
    return _inputs(1, 4, 2, 8, 64, torch.float16)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda q, k, v: (q.float(), k.float(), v.float()), r"q.dtype must be float16 or bfloat16"),
        (lambda q, k, v: (q, k.bfloat16(), v.bfloat16()), r"q, k, v must share a dtype"),
        (lambda q, k, v: (q[0], k, v), r"q must be 4-D"),
        (lambda q, k, v: (q, k, v[:, :, :4]), r"k and v must have the same shape"),
        (lambda q, k, v: (q[..., :32], k[..., :32], v[..., :32]), r"head_dim must be one of \(64, 128, 256\), got 32"),
        (lambda q, k, v: (q[:, :3], k, v), r"query heads \(3\) must be a multiple of KV heads \(2\)"),
        (lambda q, k, v: (q, k[:, :, :5], v[:, :, :5]), r"N_q == N_k, got q tokens 8 and k tokens 5"),
        (lambda q, k, v: (torch.cat([q, q]), k, v), r"k batch \(1\) must equal q batch \(2\)"),
        (lambda q, k, v: (q, k, v.transpose(2, 3).contiguous().transpose(2, 3)),
         r"v must have a contiguous head dim"),
        (lambda q, k, v: (q, k.to("meta"), v.to("meta")), r"q, k, v must be on one device"),
    ],
)
def test_bad_input_raises_before_launch(make, match):
    q, k, v = make(*_good())
    with pytest.raises(ValueError, match=match):
        flash_attention_forward(q, k, v, causal=False)


@pytest.mark.parametrize("scale", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_scale_raises(scale):
    with pytest.raises(ValueError, match="sm_scale must be a finite positive number"):
        flash_attention_forward(*_good(), causal=True, sm_scale=scale)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(block_m=64, block_n=128, num_warps=4, num_stages=2), "block_n .128. must divide block_m .64."),
        (dict(block_m=96, block_n=32, num_warps=4, num_stages=2), "block_m must be a power of two"),
        (dict(block_m=64, block_n=64, num_warps=3, num_stages=2), "num_warps"),
    ],
)
def test_bad_config_raises(kwargs, match):
    with pytest.raises(ValueError, match=match):
        FlashConfig(**kwargs)


# ---------------------------------------------------------------- real sizes on the GPU


def test_backend_is_checked():
    q, k, v = _inputs(1, 2, 1, 17, 64, torch.bfloat16)
    with pytest.raises(ValueError, match=r"backend must be one of \('auto', 'triton', 'gluon'\), got 'cudnn'"):
        flash_attention_forward(q, k, v, causal=True, backend="cudnn")


def test_auto_takes_gluon_only_where_it_can_run_and_was_measured_faster():
    """Gluon from GLUON_MIN_TOKENS on Hopper with contiguous, aligned D 64/128 inputs; never
    under the interpreter (CI), for D 256, strided inputs or short prompts."""
    q, k, v = _inputs(1, 2, 1, GLUON_MIN_TOKENS, 64, torch.bfloat16)
    assert gluon_preferred(q, k, v) == hopper_gluon_available()
    short = _inputs(1, 2, 1, GLUON_MIN_TOKENS - 1, 64, torch.bfloat16)
    assert not gluon_preferred(*short)
    strided = q.transpose(1, 2).contiguous().transpose(1, 2)
    assert not gluon_preferred(strided, k, v)
    assert not gluon_preferred(*_inputs(1, 2, 1, GLUON_MIN_TOKENS, 256, torch.bfloat16))


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_every_backend_matches_the_reference(causal):
    q, k, v = _inputs(2, 32, 8, 1027, 128, torch.bfloat16, seed=3)
    for backend in ("auto", "triton") + (("gluon",) if hopper_gluon_available() else ()):
        out, lse = flash_attention_forward(q, k, v, causal=causal, backend=backend)
        ref_out, ref_lse = naive_attention_lse(q, k, v, causal=causal)
        torch.testing.assert_close(out.float(), ref_out, atol=OUT_TOL[q.dtype][0], rtol=OUT_TOL[q.dtype][1])
        torch.testing.assert_close(lse, ref_lse, atol=LSE_TOL[0], rtol=LSE_TOL[1])


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("n", [1, 97, 1025, 4096])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("variant", ["table", "pointers", "tma"])
def test_gpu_real_sizes(n, causal, d, dtype, variant):
    # The table's choice, plus both load paths whatever it picks.
    q, k, v = _inputs(2, 32, 8, n, d, dtype, seed=n + d)
    cfg = pick_config(head_dim=d, causal=causal, n_ctx=n)
    if variant != "table":
        cfg = dataclasses.replace(cfg, use_tma=variant == "tma")
    _check(q, k, v, causal=causal, config=cfg)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("group", [1, 4, 8])
def test_gpu_gqa_ratios(group):
    q, k, v = _inputs(1, 8 * group, 8, 1027, 128, torch.bfloat16, seed=group)
    _check(q, k, v, causal=True)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("n", [97, 4096])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gpu_head_dim_256(n, causal, dtype):
    q, k, v = _inputs(2, 16, 8, n, 256, dtype, seed=n)
    _check(q, k, v, causal=causal)

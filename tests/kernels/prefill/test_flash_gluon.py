"""Tests of the Gluon (sm_90) attention forward.

CPU (CI): every launch configuration compiles for sm_90 with the installed Triton's bundled
ptxas, uses the tensor cores (wgmma) and spills nothing; configurations are checked. GPU
(``-m gpu``, skipped without CUDA): results against the float32 reference at tails, GQA
ratios, both masks and dtypes, with NaN planted where a leaking tile would read it.
"""

from __future__ import annotations


import pytest
import torch

from kernels.prefill.flash_gluon import (
    GLUON_CONFIGS,
    GluonConfig,
    gluon_attention_forward,
)
from kernels.runtime import hopper_gluon_available
from kernels.reference.dense import naive_attention_lse
from kernels.tolerances import tolerance
from support.compiled import rows_from_child

OUT_TOL = {dtype: (tolerance("flash_forward", name).atol, tolerance("flash_forward", name).rtol)
           for dtype, name in ((torch.float16, "fp16"), (torch.bfloat16, "bf16"))}
LSE_TOL = (tolerance("flash_forward_lse", "fp32").atol, tolerance("flash_forward_lse", "fp32").rtol)

needs_hopper = pytest.mark.skipif(not hopper_gluon_available(), reason="needs Gluon and a CUDA device of capability 9.x")

# Compiled in a child process: the suite runs under TRITON_INTERPRET=1, where Triton's
# reductions are interpreter objects that the Gluon compiler rejects.
_BUILD_SCRIPT = """
import dataclasses, json
from kernels.prefill.flash_gluon import GLUON_CONFIGS, sm90_build
rows = [dataclasses.asdict(sm90_build(c, causal=causal)) for c in GLUON_CONFIGS for causal in (False, True)]
rows.append(dataclasses.asdict(sm90_build(GLUON_CONFIGS[0], causal=True, head_dim=64)))
print(json.dumps(rows))
"""


@pytest.fixture(scope="module")
def sm90_builds():
    return rows_from_child(_BUILD_SCRIPT)


def test_every_config_compiles_for_sm90_without_spills(sm90_builds):
    assert len(sm90_builds) == 2 * len(GLUON_CONFIGS) + 1
    for build in sm90_builds:
        assert build["cubin_bytes"] > 0, build
        assert build["spill_bytes"] == 0, f"register spills: {build}"
        # 255 is the hardware cap; a kernel at the cap is one edit away from spilling.
        assert 0 < build["registers"] < 255, build
        assert build["wgmma"] > 0, f"no tensor-core (wgmma) path: {build}"
        assert build["shared_bytes"] <= 227 * 1024, build


def test_shared_memory_is_q_plus_kv_stages(sm90_builds):
    # Hand count, bf16, D = 128, the default 128 x 128 three-stage program: Q 128 x 128 x 2 B =
    # 32 KiB (two 64-row halves); each stage holds a K and a V tile of 128 x 128 x 2 B (32 KiB
    # each): 32 + 3 * 64 = 224 KiB = 229,376 B, plus the mbarriers (8 B each) and alignment, and
    # under the 227 KiB a block may opt into on sm_90.
    first = next(b for b in sm90_builds if b["config"] == GLUON_CONFIGS[0].name)
    assert GLUON_CONFIGS[0].shared_bytes(128) == 229_376
    assert 229_376 <= first["shared_bytes"] < 229_376 + 1024 <= 227 * 1024
    # Two stages of 64-key tiles: 32 + 2 * 2 * 16 = 96 KiB.
    assert GluonConfig(block_n=64, num_stages=2).shared_bytes(128) == 98_304


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(block_m=256), "block_m must be 128"),
    (dict(block_m=64, block_n=64), "block_m must be 128"),
    (dict(block_n=32), "block_n must be 64 or 128"),
    (dict(num_stages=1), "num_stages must be in 2..4"),
    (dict(num_stages=5), "num_stages must be in 2..4"),
])
def test_config_is_checked(kwargs, message):
    with pytest.raises(ValueError, match=message):
        GluonConfig(**kwargs)


def test_warps_follow_the_warpgroups():
    assert GluonConfig(block_m=128).num_warps == 8  # two consumer warpgroups
    assert GluonConfig(block_m=128, warp_specialize=True).num_warps == 4  # + 4 + 1 in workers


@pytest.mark.skipif(hopper_gluon_available(), reason="checks the refusal on machines without sm_90")
def test_refuses_without_hopper():
    q = torch.randn(1, 2, 8, 128, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="capability 9.x"):
        gluon_attention_forward(q, q[:, :1].contiguous(), q[:, :1].contiguous(), causal=False)


# ---------------------------------------------------------------------------- GPU checks


def _inputs(b, hq, hkv, n, d, dtype, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    return tuple(torch.randn(b, h, n, d, generator=g).to(device="cuda", dtype=dtype) for h in (hq, hkv, hkv))


def _check(q, k, v, *, causal, config=None, rows=None):
    out, lse = gluon_attention_forward(q, k, v, causal=causal, config=config)
    ref_out, ref_lse = naive_attention_lse(q, k, v, causal=causal)
    assert out.shape == q.shape and out.dtype == q.dtype and out.is_contiguous()
    assert lse.shape == q.shape[:3] and lse.dtype == torch.float32
    if rows is not None:
        out, lse, ref_out, ref_lse = out[rows], lse[rows], ref_out[rows], ref_lse[rows]
    assert torch.isfinite(out).all() and torch.isfinite(lse).all(), "NaN/inf or unwritten output"
    atol, rtol = OUT_TOL[q.dtype]
    torch.testing.assert_close(out.float(), ref_out, atol=atol, rtol=rtol)
    torch.testing.assert_close(lse, ref_lse, atol=LSE_TOL[0], rtol=LSE_TOL[1])


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("n", [1, 97, 1025, 4096])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("group", [1, 4, 8])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_matches_reference(n, causal, group, dtype):
    q, k, v = _inputs(1, 8, 8 // group, n, 128, dtype, seed=n + group)
    _check(q, k, v, causal=causal)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("config", GLUON_CONFIGS, ids=lambda c: c.name.replace(" ", "_"))
@pytest.mark.parametrize("causal", [False, True])
def test_every_config_matches_reference(config, causal):
    # 1027: a 3-row query tail and a 3-key tail; 8 query heads over 2 KV heads.
    q, k, v = _inputs(2, 8, 2, 1027, 128, torch.bfloat16, seed=7)
    _check(q, k, v, causal=causal, config=config)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("causal", [False, True])
def test_head_dim_64(causal):
    q, k, v = _inputs(1, 4, 1, 333, 64, torch.bfloat16, seed=3)
    _check(q, k, v, causal=causal)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("causal", [False, True])
def test_nan_beyond_the_sequence_does_not_leak(causal):
    # Batch 1's keys and values are NaN, and so is the memory right after each tensor: a tail
    # tile that read the next head's rows (a flattened descriptor) or past the end would turn
    # batch 0's output into NaN, because 0 * NaN is NaN.
    b, h, n, d = 2, 4, 1000, 128
    q, k, v = _inputs(b, h, 1, n, d, torch.bfloat16, seed=11)

    def poisoned(t):
        buf = torch.full((t.numel() + 4096,), float("nan"), dtype=t.dtype, device=t.device)
        view = buf[: t.numel()].view(t.shape)
        view.copy_(t)
        view[1] = float("nan")
        return view

    k, v = poisoned(k), poisoned(v)
    _check(q, k, v, causal=causal, rows=0)

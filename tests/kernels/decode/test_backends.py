"""Which kernel the decode entry runs (kernels.decode.backends).

CPU (CI): the rules themselves — ``auto`` keeps the Triton kernel wherever the rdq kernel cannot
run or was not timed (no Hopper, head dim 64, more than 16 query heads per KV head, bf16 KV, a
Triton-only option), forced backends are refused by name where they cannot run, and unknown
names are refused. GPU (``-m gpu``, Hopper): ``auto`` returns exactly what the rdq kernel
returns for FP8 and INT4 caches, and what the Triton kernel returns for a bf16 cache.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from kernels.decode.backends import choose_kernel, default_rdq_config, rdq_preferred
from kernels.decode.rdq_config import RdqConfig
from kernels.decode.config import DecodeConfig
from kernels.cache.int4 import quantize_int4
from kernels.cache.paged import build_paged_cache, quantize_fp8
from kernels.decode.api import paged_decode_attention
from kernels.runtime import hopper_gluon_available
from support.views import off_grid

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
needs_hopper = pytest.mark.skipif(not hopper_gluon_available(), reason="needs Gluon and a CUDA device of capability 9.x")


def _cache(lens, *, hq=8, hkv=2, d=128, device=DEVICE, seed=0):
    g = torch.Generator(device=device).manual_seed(seed)
    c = build_paged_cache(lens, block_size=16, n_kv_heads=hkv, head_dim=d, device=device, shuffle=True, generator=g,
                          spare_blocks=2, poison_unused=True)
    q = torch.randn(len(lens), hq, d, generator=g, device=device).to(torch.bfloat16)
    return q, c


def test_auto_takes_rdq_only_when_preferred_and_no_other_kernels_option_was_set():
    q, c = _cache([40], device="cpu")
    fp8 = quantize_fp8(c)
    args = (q, fp8.k_cache, fp8.v_cache)
    preferred = "rdq" if rdq_preferred(*args) else "triton"
    assert choose_kernel(*args, backend="auto", config=None, dequant=None) == preferred
    # A DecodeConfig or the INT4 dequantiser choice belongs to the Triton kernels, an RdqConfig to rdq.
    assert choose_kernel(*args, backend="auto", config=DecodeConfig(), dequant=None) == "triton"
    assert choose_kernel(*args, backend="auto", config=None, dequant=0) == "triton"
    assert choose_kernel(*args, backend="auto", config=None, dequant=1) == preferred  # 1 is the default
    assert choose_kernel(*args, backend="auto", config=RdqConfig(), dequant=None) == "rdq"
    assert choose_kernel(*args, backend="triton", config=None, dequant=None) == "triton"
    assert choose_kernel(*args, backend="rdq", config=None, dequant=None) == "rdq"  # forced, even where not preferred
    with pytest.raises(ValueError, match="backend='triton' takes a DecodeConfig"):
        choose_kernel(*args, backend="triton", config=RdqConfig(), dequant=None)
    with pytest.raises(ValueError, match="backend='rdq' takes an RdqConfig"):
        choose_kernel(*args, backend="rdq", config=DecodeConfig(), dequant=None)
    for name in ("wgmma", "cudnn", "gluon"):  # the Gluon kernels for 16-bit and INT4 KV were removed
        with pytest.raises(ValueError, match="backend must be one of"):
            choose_kernel(*args, backend=name, config=None, dequant=None)


def test_the_one_entry_refuses_options_that_do_not_fit_the_pool():
    q, c = _cache([40], device="cpu")
    int4 = quantize_int4(c)
    with pytest.raises(ValueError, match="INT4 pools carry their own scales"):
        paged_decode_attention(q, int4.k, int4.v, int4.block_tables, int4.seq_lens, k_scale=1.0)
    with pytest.raises(ValueError, match="dequant is for INT4 pools"):
        paged_decode_attention(q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens, dequant=0)
    with pytest.raises(ValueError, match="k must be an Int4Pool"):
        paged_decode_attention(q, int4.k.data, int4.v, int4.block_tables, int4.seq_lens)


def test_rdq_is_preferred_only_for_quantised_caches_at_timed_shapes_on_hopper():
    q, c = _cache([40], device="cpu")
    assert not rdq_preferred(q, c.k_cache, c.v_cache)  # bf16 KV: the Triton kernel's
    fp8, int4 = quantize_fp8(c), quantize_int4(c)
    assert rdq_preferred(q, fp8.k_cache, fp8.v_cache) == hopper_gluon_available()
    assert rdq_preferred(q, int4.k, int4.v) == hopper_gluon_available()
    shifted = dataclasses.replace(int4.k, data=off_grid(int4.k.data))
    assert not rdq_preferred(q, shifted, int4.v)  # 4 bytes off the grid the rdq kernel copies by
    q64, c64 = _cache([40], d=64, device="cpu")
    i64 = quantize_int4(c64)
    assert not rdq_preferred(q64, i64.k, i64.v)  # head dim 64: correct on the GPU, not timed
    q32, c32 = _cache([40], hq=34, hkv=2, device="cpu")  # 17 query heads per KV head: past the 16 MMA rows
    f32 = quantize_fp8(c32)
    assert not rdq_preferred(q32, f32.k_cache, f32.v_cache)
    assert default_rdq_config("int4").swap_ab and default_rdq_config("fp8").swap_ab  # the timed defaults
    assert (default_rdq_config("int4").block_n, default_rdq_config("fp8").block_n) == (16, 32)
    with pytest.raises(ValueError, match="fmt must be"):
        default_rdq_config("int8")


@pytest.mark.skipif(hopper_gluon_available(), reason="checks the refusal where there is no Hopper GPU")
def test_forced_rdq_is_refused_without_hopper_and_auto_still_runs():
    q, c = _cache([5, 70], device="cpu")
    fp8, int4 = quantize_fp8(c), quantize_int4(c)
    with pytest.raises(ValueError, match="capability 9.x"):
        paged_decode_attention(q, fp8.k_cache, fp8.v_cache, fp8.block_tables, fp8.seq_lens, backend="rdq")
    with pytest.raises(ValueError, match="capability 9.x"):
        paged_decode_attention(q, int4.k, int4.v, int4.block_tables, int4.seq_lens, backend="rdq")
    with pytest.raises(ValueError, match="backend must be one of"):
        paged_decode_attention(q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens, backend="gluon")
    auto = paged_decode_attention(q, int4.k, int4.v, int4.block_tables, int4.seq_lens)
    forced = paged_decode_attention(q, int4.k, int4.v, int4.block_tables, int4.seq_lens, backend="triton")
    assert torch.equal(auto, forced)


@pytest.mark.gpu
@needs_hopper
def test_auto_runs_rdq_for_quantised_caches_and_triton_for_bf16():
    q, c = _cache([5, 4000, 999], hq=32, hkv=8, seed=3)
    fp8, int4 = quantize_fp8(c, per_head=True), quantize_int4(c)
    args = (fp8.k_cache, fp8.v_cache, fp8.block_tables, fp8.seq_lens)
    kw = dict(k_scale=fp8.k_scale, v_scale=fp8.v_scale)
    assert torch.equal(paged_decode_attention(q, *args, **kw), paged_decode_attention(q, *args, **kw, backend="rdq"))
    assert not torch.equal(paged_decode_attention(q, *args, **kw),
                           paged_decode_attention(q, *args, **kw, config=DecodeConfig(block_n=64)))
    args4 = (int4.k, int4.v, int4.block_tables, int4.seq_lens)
    assert torch.equal(paged_decode_attention(q, *args4), paged_decode_attention(q, *args4, backend="rdq"))
    args16 = (c.k_cache, c.v_cache, c.block_tables, c.seq_lens)
    assert torch.equal(paged_decode_attention(q, *args16), paged_decode_attention(q, *args16, backend="triton"))


def test_the_plan_names_the_kernel_its_config_and_the_split_count_the_call_uses():
    from kernels.decode.api import decode_plan
    from kernels.decode.config import default_config
    from kernels.decode.int4 import default_int4_config
    from kernels.decode.paged import decode_num_splits

    q, c = _cache([5, 700])  # on the GPU where there is one: the plan compiles the kernel there
    args = (c.k_cache, c.v_cache, c.block_tables, c.seq_lens)
    plan = decode_plan(q, *args)
    assert plan.kernel == "triton" and plan.config == default_config(128, torch.bfloat16)
    assert plan.num_splits == decode_num_splits(q, *args) >= 1
    assert decode_plan(q, *args, config=DecodeConfig(block_n=16)).config.block_n == 16
    int4 = quantize_int4(c)
    plan4 = decode_plan(q, int4.k, int4.v, int4.block_tables, int4.seq_lens)
    assert plan4.kernel == ("rdq" if hopper_gluon_available() else "triton")
    if not hopper_gluon_available():
        assert plan4.config == default_int4_config(128) and plan4.num_splits >= 1
        with pytest.raises(ValueError, match="capability 9.x"):
            decode_plan(q, int4.k, int4.v, int4.block_tables, int4.seq_lens, backend="rdq")

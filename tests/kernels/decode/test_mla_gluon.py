"""Tests of the Gluon (sm_90) MLA decode, :mod:`kernels.decode.mla_gluon`.

CPU (CI): the kernel compiles for sm_90 with the installed Triton's bundled ptxas (split and
unsplit, every block size it takes), uses the tensor cores, spills nothing and fits its hand-counted
shared memory; which calls it takes is checked. GPU (``-m gpu``, skipped without a Hopper GPU):
results against the float32 absorbed reference, with NaN planted in the pool slots past every
sequence's end (a tail row that reached a P.V would turn the output NaN), forced and planned
splits, empty splits, block sizes 64-256 and 64-192 heads; and the API routes DeepSeek-V3's shape to it.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from kernels.cache.mla import build_mla_cache, quantize_mla_fp8
from kernels.decode.api import mla_decode_attention
from kernels.decode.mla import MlaConfig, mla_num_splits
from kernels.decode.mla_gluon import gluon_mla_decode, gluon_mla_num_splits, gluon_mla_supported
from kernels.reference.mla import mla_decode_reference
from kernels.runtime import hopper_gluon_available
from kernels.tolerances import tolerance
from support.compiled import rows_from_child

BF16_TOL = tolerance("mla_decode", "bf16").atol
V3_SCALE = 1.0 / math.sqrt(128 + 64)
needs_hopper = pytest.mark.skipif(not hopper_gluon_available(), reason="needs Gluon and a CUDA device of capability 9.x")

_BUILD_SCRIPT = """
import json
from kernels.decode.mla_gluon import mla_sm90_build
print(json.dumps([mla_sm90_build(split=s, page_size=p) for s in (False, True) for p in (64, 128, 256)]))
"""


@pytest.fixture(scope="module")
def sm90_builds():
    return rows_from_child(_BUILD_SCRIPT)


def test_compiles_for_sm90_without_spills(sm90_builds):
    assert len(sm90_builds) == 6
    for build in sm90_builds:
        assert build["spill_bytes"] == 0, build
        assert 0 < build["registers"] < 255, build
        # S: 9 chunk wgmmas a tile (at two call sites: the first tile and the next tile's);
        # P.V: 4 + 4 (the two warpgroups' halves). Fewer would mean a product left to the CUDA cores.
        assert build["wgmma"] >= 9 + 4 + 4, build
        # Producer warp, values warpgroup, scores warpgroup: three register budgets.
        assert {40, 192} <= set(build["setmaxnreg"]), build


def test_shared_memory_is_q_two_slots_and_p(sm90_builds):
    # Hand count, bf16: Q is 64 heads x 576 = 73,728 B; each slot 64 tokens x 576 x 2 B = 73,728 B,
    # two slots; P 64 x 64 x 2 = 8,192 B; alpha 64 x 4 = 256 B: 229,632 B, plus 7 mbarriers of 8 B
    # and alignment, under the 227 KiB (232,448 B) a block may opt into on sm_90.
    for build in sm90_builds:
        assert 229_632 <= build["shared_bytes"] < 229_632 + 512 <= 227 * 1024, build


def _cache(lens, block_size, seed=1, device="cpu", dtype=torch.bfloat16):
    return build_mla_cache(lens, block_size=block_size, kv_lora_rank=512, rope_dim=64, dtype=dtype, device=device,
                           shuffle=True, generator=torch.Generator(device=device).manual_seed(seed))


def test_which_calls_it_takes():
    # On a machine without Hopper it takes none; the shape rules are checked where it could.
    cache = _cache([64], 64)
    q = torch.zeros(1, 128, 512, dtype=torch.bfloat16)
    assert not gluon_mla_supported(q, cache)  # a CPU tensor
    assert not gluon_mla_supported("not a tensor", cache)
    with pytest.raises(ValueError, match="Gluon MLA kernel needs Hopper"):
        gluon_mla_decode(q, q[..., :64], cache, sm_scale=0.1)


def test_split_count_is_one_wave_of_one_program_per_sm():
    # 132 SMs (H200), 2 head tiles a sequence at 128 heads: batch 1 -> 66 splits, batch 8 -> 8,
    # batch 64 -> 1 (128 programs already fill the wave); never under 4 tiles a split.
    cuda = torch.device("cuda", 0)
    if not torch.cuda.is_available() or torch.cuda.get_device_properties(0).multi_processor_count != 132:
        cuda = None
    if cuda is not None:
        assert gluon_mla_num_splits(1, 128, 32768, cuda) == 66
        assert gluon_mla_num_splits(8, 128, 8192, cuda) == 8
        assert gluon_mla_num_splits(64, 128, 4096, cuda) == 1
        assert gluon_mla_num_splits(1, 128, 64 * 12, cuda) == 3
    cpu = torch.device("cpu")  # 4 "SMs"
    assert gluon_mla_num_splits(1, 128, 32768, cpu) == 2
    assert gluon_mla_num_splits(1, 64, 32768, cpu) == 4
    assert gluon_mla_num_splits(8, 128, 32768, cpu) == 1


GPU_CASES = [  # lens, block size, heads, splits
    ([4096] * 4, 64, 128, 1),
    ([33, 7, 129, 9000], 64, 128, 1),
    ([33, 7, 129], 64, 128, 16),  # most splits of the short sequences empty
    ([2048, 10], 64, 192, None),
    ([1, 63, 64, 65, 1000, 4097], 128, 64, 3),
    ([300, 5000], 256, 128, 8),
    ([32768], 64, 128, None),
]


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("case", GPU_CASES, ids=lambda c: f"B{len(c[0])}-L{max(c[0])}-bs{c[1]}-h{c[2]}-s{c[3]}")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_gpu_matches_reference_with_nan_past_the_ends(case, dtype):
    lens, bs, heads, splits = case
    cache = _cache(lens, bs, device="cuda", dtype=dtype)
    for i, n in enumerate(lens):  # poison the unused rows of each sequence's last page
        if n % bs:
            cache.latent[int(cache.block_tables[i, (n - 1) // bs]), n % bs:] = float("nan")
    g = torch.Generator(device="cuda").manual_seed(5)
    q_lat = torch.randn(len(lens), heads, 512, generator=g, device="cuda").to(dtype)
    q_pe = torch.randn(len(lens), heads, 64, generator=g, device="cuda").to(dtype)
    assert gluon_mla_supported(q_lat, cache)
    out = gluon_mla_decode(q_lat, q_pe, cache, sm_scale=V3_SCALE, num_splits=splits)
    ref = mla_decode_reference(q_lat, q_pe, cache, sm_scale=V3_SCALE)
    assert not torch.isnan(out).any()
    assert (out.float() - ref).abs().max().item() <= BF16_TOL


@pytest.mark.gpu
@needs_hopper
def test_gpu_api_routes_deepseek_v3_to_gluon_and_others_to_triton():
    cache = _cache([4096] * 8, 64, device="cuda")
    q_lat = torch.randn(8, 128, 512, device="cuda").to(torch.bfloat16)
    q_pe = torch.randn(8, 128, 64, device="cuda").to(torch.bfloat16)
    assert gluon_mla_supported(q_lat, cache)
    assert mla_num_splits(q_lat, cache) == gluon_mla_num_splits(8, 128, 4096, q_lat.device)
    routed = mla_decode_attention(q_lat, q_pe, cache, sm_scale=V3_SCALE)
    direct = gluon_mla_decode(q_lat, q_pe, cache, sm_scale=V3_SCALE)
    assert torch.equal(routed, direct)
    # A config asks for the Triton kernel; FP8 and 16 heads are not the Gluon kernel's.
    triton_out = mla_decode_attention(q_lat, q_pe, cache, sm_scale=V3_SCALE, config=MlaConfig(block_h=64, block_n=64,
                                                                                              num_warps=8))
    assert (triton_out.float() - routed.float()).abs().max().item() <= BF16_TOL
    assert not gluon_mla_supported(q_lat, quantize_mla_fp8(cache))
    assert not gluon_mla_supported(q_lat[:, :16], cache)
    assert not gluon_mla_supported(q_lat, replace(cache, latent=cache.latent.view(-1, 32, 576)))

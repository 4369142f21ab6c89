"""MLA paged decode (absorbed form) against the logical MLA attention it stands for.

The chain is checked link by link: the logical attention (per-head K and V expanded from the
latent with random W_UK / W_UV, in float64) equals the absorbed form on the same latent (the
reference), and the kernel on a shuffled, paged latent equals the reference. CPU (CI): the kernel
under TRITON_INTERPRET=1 at a small rank; GPU (marked ``gpu``): DeepSeek-V3's 128 heads, 512 + 64.
"""

from __future__ import annotations

import math

import pytest
import torch

from kernels.cache.mla import build_mla_cache, quantize_mla_fp8
from kernels.decode.api import mla_decode_attention
from kernels.decode.mla import MlaConfig, mla_num_splits
from kernels.reference.mla import absorb_query, logical_attention, mla_decode_reference
from kernels.tolerances import tolerance

ON_GPU = torch.cuda.is_available()
DEVICE = "cuda" if ON_GPU else "cpu"
BF16_TOL = tolerance("mla_decode", "bf16").atol
FP8_TOL = tolerance("mla_decode", "fp8").atol
# DeepSeek-V3's attention: qk_nope_head_dim 128 + qk_rope_head_dim 64 per query head.
V3_SCALE = 1.0 / math.sqrt(128 + 64)


def _queries(batch, heads, rank, rope, seed=0, device=DEVICE):
    g = torch.Generator(device=device).manual_seed(seed)
    q_lat = torch.randn(batch, heads, rank, generator=g, device=device) / math.sqrt(rank) * 4
    q_pe = torch.randn(batch, heads, rope, generator=g, device=device)
    return q_lat.to(torch.bfloat16), q_pe.to(torch.bfloat16)


def _cache(lens, block_size, rank, rope, seed=1, device=DEVICE, **kw):
    return build_mla_cache(lens, block_size=block_size, kv_lora_rank=rank, rope_dim=rope, device=device,
                           shuffle=True, generator=torch.Generator(device=device).manual_seed(seed), **kw)


def test_absorbed_reference_is_the_logical_attention():
    # Per-head K/V expanded from the latent, as the model's up-projections would (float64).
    g = torch.Generator().manual_seed(3)
    heads, rank, rope, d_nope, d_v, n = 4, 32, 16, 24, 20, 37
    q_nope = torch.randn(1, heads, d_nope, generator=g, dtype=torch.float64)
    q_pe = torch.randn(1, heads, rope, generator=g, dtype=torch.float64)
    w_uk = torch.randn(heads, rank, d_nope, generator=g, dtype=torch.float64) / math.sqrt(rank)
    w_uv = torch.randn(heads, rank, d_v, generator=g, dtype=torch.float64) / math.sqrt(rank)
    cache = build_mla_cache([n], block_size=8, kv_lora_rank=rank, rope_dim=rope, dtype=torch.float64,
                            shuffle=True, generator=torch.Generator().manual_seed(4))
    scale = 1.0 / math.sqrt(d_nope + rope)
    logical = logical_attention(q_nope[0], q_pe[0], cache.sequence_latent(0), w_uk, w_uv, rank, sm_scale=scale)
    o_lat = mla_decode_reference(absorb_query(q_nope, w_uk), q_pe, cache, sm_scale=scale)
    absorbed = torch.einsum("hr,hrd->hd", o_lat[0].double(), w_uv)
    assert torch.allclose(absorbed, logical, atol=1e-5)  # the reference's float32 softmax


def test_reference_by_hand_on_one_token():
    # One token: softmax of one logit is 1, so each head's output is that token's latent.
    cache = build_mla_cache([1], block_size=4, kv_lora_rank=16, rope_dim=16)
    q_lat, q_pe = _queries(1, 3, 16, 16, device="cpu")
    out = mla_decode_reference(q_lat, q_pe, cache, sm_scale=0.1)
    assert torch.allclose(out[0], cache.latent[cache.block_tables[0, 0], 0, :16].float().expand(3, 16))


CPU_CASES = [  # lens, block size, heads, rank, rope, splits
    ([37], 1, 16, 32, 16, None),
    ([64, 5], 16, 20, 32, 16, None),  # heads not a multiple of the tile: padded rows
    ([100, 33, 1], 64, 16, 64, 16, 3),  # forced splits, the last split of short sequences empty
    ([129], 256, 32, 32, 32, 2),
]


@pytest.mark.parametrize("case", CPU_CASES, ids=lambda c: f"L{c[0]}-bs{c[1]}-h{c[2]}-r{c[3]}-s{c[5]}")
@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
def test_kernel_matches_reference(case, fp8):
    lens, bs, heads, rank, rope, splits = case
    cache = _cache(lens, bs, rank, rope, spare_blocks=2)
    if fp8:
        cache = quantize_mla_fp8(cache)
    q_lat, q_pe = _queries(len(lens), heads, rank, rope)
    out = mla_decode_attention(q_lat, q_pe, cache, sm_scale=V3_SCALE, num_splits=splits,
                               config=MlaConfig(block_h=16, block_n=16))
    ref = mla_decode_reference(q_lat, q_pe, cache, sm_scale=V3_SCALE)
    assert out.shape == (len(lens), heads, rank) and out.dtype == torch.bfloat16
    assert (out.float() - ref).abs().max().item() <= (FP8_TOL if fp8 else BF16_TOL)


def test_split_and_unsplit_agree():
    cache = _cache([300, 17], 16, 32, 16)
    q_lat, q_pe = _queries(2, 16, 32, 16)
    one = mla_decode_attention(q_lat, q_pe, cache, sm_scale=0.1, num_splits=1, config=MlaConfig(block_n=16))
    four = mla_decode_attention(q_lat, q_pe, cache, sm_scale=0.1, num_splits=4, config=MlaConfig(block_n=16))
    assert (one.float() - four.float()).abs().max().item() <= BF16_TOL


@pytest.mark.parametrize("change, message", [
    (dict(q_rope_rope=8), r"rank 32 \+ rope 16; the queries have 32 and 8"),
    (dict(fp16_query=True), "the latent cache must be"),
    (dict(no_scale=True), "needs its scale"),
    (dict(bad_table=True), "block_tables entries"),
    (dict(long_len=True), "seq_lens must lie in"),
])
def test_refusals_name_the_argument(change, message):
    cache = _cache([20], 8, 32, 16)
    q_lat, q_pe = _queries(1, 16, 32, 16)
    if change.get("q_rope_rope"):
        q_pe = q_pe[..., :8].contiguous()
    if change.get("fp16_query"):
        q_lat, q_pe = q_lat.half(), q_pe.half()
    if change.get("no_scale"):
        from dataclasses import replace
        cache = replace(quantize_mla_fp8(cache), scale=None)
    if change.get("bad_table"):
        cache.block_tables[0, 1] = cache.num_blocks
    if change.get("long_len"):
        cache.seq_lens[0] = 10_000
    with pytest.raises(ValueError, match=message):
        mla_decode_attention(q_lat, q_pe, cache, sm_scale=0.1)


@pytest.mark.skipif(ON_GPU, reason="counts the interpreter's assumed residency; a GPU's comes from the compile")
def test_split_count_fills_the_gpu_only_when_the_batch_does_not():
    # On the CPU the residency is the assumed 2 per SM of 4 "SMs": 8 slots, two waves = 16 programs.
    cache = _cache([4096] * 2, 64, 32, 16)
    q_lat, _ = _queries(2, 16, 32, 16)
    # 2 sequences x 1 head tile = 2 programs: split to fill two waves (16 / 2 = 8 parts).
    assert mla_num_splits(q_lat, cache) == 8
    big = _cache([64] * 16, 64, 32, 16)
    q16, _ = _queries(16, 16, 32, 16)
    assert mla_num_splits(q16, big) == 1  # 16 programs already fill two waves


GPU_CASES = [  # lens, block size, fp8
    ([4096] * 64, 64, False),
    ([4096] * 64, 64, True),
    ([32768, 1, 777], 1, False),
    ([16384, 9000], 256, True),
    ([100_000], 64, False),
]


@pytest.mark.gpu
@pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("case", GPU_CASES, ids=lambda c: f"B{len(c[0])}-L{max(c[0])}-bs{c[1]}-fp8{c[2]}")
def test_gpu_deepseek_v3_shape(case):
    lens, bs, fp8 = case
    cache = _cache(lens, bs, 512, 64, spare_blocks=3)
    if fp8:
        cache = quantize_mla_fp8(cache)
    q_lat, q_pe = _queries(len(lens), 128, 512, 64, seed=5)
    out = mla_decode_attention(q_lat, q_pe, cache, sm_scale=V3_SCALE)
    check = [0, len(lens) - 1]
    ref = mla_decode_reference(q_lat[check], q_pe[check], _subset(cache, check), sm_scale=V3_SCALE)
    assert (out[check].float() - ref).abs().max().item() <= (FP8_TOL if fp8 else BF16_TOL)


def _subset(cache, seqs):
    from dataclasses import replace
    return replace(cache, block_tables=cache.block_tables[seqs], seq_lens=cache.seq_lens[seqs])

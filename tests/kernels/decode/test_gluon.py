"""Tests of the Gluon (sm_90) paged decode kernel.

CPU (CI): every launch configuration compiles for sm_90 with the installed Triton's bundled
ptxas (in a child process: the suite runs under the interpreter, whose objects Gluon cannot
compile); the PTX gathers K and V with 16-byte ``cp.async`` copies only, does both products on
the tensor cores (``wgmma``), loads no single bytes, and ptxas spills nothing. Inputs the
kernel cannot take are refused by name. GPU (``-m gpu``, skipped without Hopper): results
against the float32 paged reference at tails, page sizes, GQA ratios and split counts, with NaN
in every slot no sequence owns.
"""

from __future__ import annotations

import json

import pytest
import torch

from kernels.cache.paged import build_paged_cache, quantize_fp8
from kernels.decode.paged import paged_decode_attention
from kernels.decode.gluon import (
    GLUON_DECODE_CONFIGS,
    GluonDecodeConfig,
    gluon_decode_available,
    gluon_paged_decode,
)
from kernels.reference.paged import paged_attention_reference
from kernels.tolerances import tolerance
from support.compiled import rows_from_child
from support.views import off_grid

TOLERANCE = {torch.bfloat16: tolerance("paged_decode", "bf16").atol, torch.float16: tolerance("paged_decode", "fp16").atol}

needs_hopper = pytest.mark.skipif(not gluon_decode_available(), reason="needs Gluon and a CUDA device of capability 9.x")

# (config index, head_dim, block_size, group, split): every configuration at the main shape,
# then the default one at the other page sizes, head dim 64, GQA 1 and 8, and unsplit.
_BUILDS = ([(i, 128, 16, 4, True) for i in range(len(GLUON_DECODE_CONFIGS))]
           + [(0, 128, bs, 4, True) for bs in (1, 64, 256)]
           + [(0, 64, 16, 4, True), (1, 64, 16, 4, True), (0, 128, 16, 1, True), (0, 128, 16, 8, False)])

_BUILD_SCRIPT = """
import dataclasses, json, sys
from kernels.decode.gluon import GLUON_DECODE_CONFIGS, decode_sm90_build
rows = []
for i, d, bs, group, split in json.loads(sys.argv[1]):
    b = decode_sm90_build(GLUON_DECODE_CONFIGS[i], head_dim=d, block_size=bs, group=group, split=split)
    rows.append(dict(dataclasses.asdict(b), index=i, split=split))
print(json.dumps(rows))
"""


@pytest.fixture(scope="module")
def sm90_builds():
    return rows_from_child(_BUILD_SCRIPT, json.dumps(_BUILDS))


def test_every_config_compiles_for_sm90_without_spills(sm90_builds):
    assert len(sm90_builds) == len(_BUILDS)
    for build in sm90_builds:
        assert build["spill_bytes"] == 0, f"register spills: {build}"
        # 255 is the hardware cap; a kernel at the cap is one edit away from spilling.
        assert 0 < build["registers"] < 255, build
        assert build["shared_bytes"] <= 227 * 1024, build


def test_both_products_run_on_the_tensor_cores(sm90_builds):
    # Hand count for the non-overlapped loop, d = 128: q.k^T is M64 x N(block_n) x K128, eight
    # k16 steps; p.v is M64 x N128 x K(block_n), block_n / 16 steps. The overlapped loop has each
    # product twice in the code (the peeled first tile / the last tile's p.v, and the loop body).
    for build in sm90_builds:
        cfg = GLUON_DECODE_CONFIGS[build["index"]]
        per_tile = build["head_dim"] // 16 + cfg.block_n // 16
        assert build["wgmma"] == (2 * per_tile if cfg.overlap else per_tile), build


def test_kv_tiles_arrive_by_16_byte_async_copies(sm90_builds):
    for build in sm90_builds:
        assert build["cp_async_narrow"] == 0, f"copies narrower than 16 B: {build}"
        assert build["byte_loads"] == 0, f"byte-wise loads: {build}"
        cfg = GLUON_DECODE_CONFIGS[build["index"]]
        # One tile of K and one of V: 2 * block_n * head_dim * 2 B over 128 threads in 16-byte
        # copies, written once per issue site (prologue: num_stages - 1 unrolled, plus the loop;
        # the overlapped loop also refills after its peeled first tile).
        per_tile = 2 * cfg.block_n * build["head_dim"] * 2 // 16 // 128
        sites = cfg.num_stages - 1 + 1 + (1 if cfg.overlap else 0)
        assert build["cp_async_16"] == per_tile * sites, build


def test_shared_memory_is_query_plus_ring(sm90_builds):
    # Hand count, bf16, d = 128, 64-token tiles, 3 stages: the query padded to 64 rows is
    # 64 x 128 x 2 B = 16 KiB; each stage holds a K and a V tile of 64 x 128 x 2 B (16 KiB
    # each): 16 + 3 * 32 = 112 KiB = 114,688 B, so two programs fit in an SM's 228 KiB.
    assert GluonDecodeConfig(block_n=64, num_stages=3).shared_bytes(128) == 114_688
    for build in sm90_builds:
        expected = GLUON_DECODE_CONFIGS[build["index"]].shared_bytes(build["head_dim"])
        assert expected <= build["shared_bytes"] < expected + 1024, build
    default = next(b for b in sm90_builds if b["index"] == 0 and b["head_dim"] == 128)
    assert default["resident_per_sm"] == 2


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(block_n=8), "block_n must be 16, 32, 64 or 128"),
    (dict(block_n=256), "block_n must be 16, 32, 64 or 128"),
    (dict(num_stages=1), "num_stages must be in 2..6"),
    (dict(waves=3), "waves must be 1 or 2"),
])
def test_config_is_checked(kwargs, message):
    with pytest.raises(ValueError, match=message):
        GluonDecodeConfig(**kwargs)


def _case(lens, *, block_size=16, hq=8, hkv=2, d=128, dtype=torch.bfloat16, seed=0, device="cpu"):
    g = torch.Generator(device=device).manual_seed(seed)
    cache = build_paged_cache(lens, block_size=block_size, n_kv_heads=hkv, head_dim=d, dtype=dtype, device=device,
                              shuffle=True, generator=g, spare_blocks=3, poison_unused=True)
    q = torch.randn(len(lens), hq, d, generator=g, device=device).to(dtype)
    return q, cache


def _call(q, c, **kw):
    return gluon_paged_decode(q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens, **kw)


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(d=256), "head_dim must be one of \\(64, 128\\)"),
    (dict(d=32), "head_dim must be one of \\(64, 128\\)"),
    (dict(hq=32, hkv=2), "at most 8 .* got 32 / 2 = 16"),
])
def test_refuses_shapes_it_cannot_take(kwargs, message):
    q, c = _case([5], **kwargs)
    with pytest.raises(ValueError, match=message):
        _call(q, c)


def test_refuses_fp8_caches():
    q, c = _case([5])
    c8 = quantize_fp8(c)
    with pytest.raises(ValueError, match="k_cache dtype must be bfloat16 or float16"):
        gluon_paged_decode(q, c8.k_cache, c8.v_cache, c8.block_tables, c8.seq_lens)


def test_refuses_fp8_even_after_the_triton_kernel_took_it():
    # The shape checks are cached per call signature; the Triton kernel accepting one must not
    # let this kernel skip its own refusals.
    q, c = _case([5], device="cuda" if torch.cuda.is_available() else "cpu")
    c8 = quantize_fp8(c)
    paged_decode_attention(q, c8.k_cache, c8.v_cache, c8.block_tables, c8.seq_lens, k_scale=c8.k_scale,
                           v_scale=c8.v_scale)
    with pytest.raises(ValueError, match="k_cache dtype must be bfloat16 or float16"):
        gluon_paged_decode(q, c8.k_cache, c8.v_cache, c8.block_tables, c8.seq_lens)


def test_refuses_a_cache_off_the_16_byte_grid_but_the_triton_kernel_reads_it():
    # Its cp.async copies move 16-byte runs; a view 2 bytes (one bf16) past the grid would not compile.
    q, c = _case([5, 40], device="cuda" if torch.cuda.is_available() else "cpu")
    k, v = off_grid(c.k_cache, 2), off_grid(c.v_cache, 2)
    assert k.stride() == c.k_cache.stride() and k.data_ptr() % 16 == 2
    with pytest.raises(ValueError, match="k_cache and v_cache must start on a 16-byte boundary .* got addresses 2 and "):
        gluon_paged_decode(q, k, v, c.block_tables, c.seq_lens)
    out = paged_decode_attention(q, k, v, c.block_tables, c.seq_lens)
    ref = paged_attention_reference(q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens)
    assert (out.float() - ref).abs().max().item() <= tolerance("paged_decode", "bf16").atol


def test_refuses_a_foreign_config():
    q, c = _case([5])
    with pytest.raises(ValueError, match="config must be a GluonDecodeConfig"):
        _call(q, c, config=object())


@pytest.mark.skipif(gluon_decode_available(), reason="checks the refusal on machines without sm_90")
def test_refuses_without_hopper():
    q, c = _case([5])
    with pytest.raises(ValueError, match="capability 9.x"):
        _call(q, c)


# ---------------------------------------------------------------------------- GPU checks


def _check(q, c, **kw):
    out = _call(q, c, **kw)
    ref = paged_attention_reference(q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert torch.isfinite(out).all(), "NaN/inf reached the output (a slot past a sequence's end was read)"
    err = (out.float() - ref).abs().max().item()
    assert err <= TOLERANCE[q.dtype], f"max abs error {err:.3e} > {TOLERANCE[q.dtype]:.1e}"
    return out


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("block_size", [1, 16, 64, 256])
@pytest.mark.parametrize("hq,hkv", [(8, 8), (16, 4), (32, 4)])  # GQA 1, 4, 8
def test_matches_reference(block_size, hq, hkv):
    q, c = _case([1, 17, 97, 1025, 20000], block_size=block_size, hq=hq, hkv=hkv, device="cuda",
                 seed=block_size + hq)
    _check(q, c)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("config", GLUON_DECODE_CONFIGS, ids=lambda c: c.name.replace(" ", "_"))
@pytest.mark.parametrize("splits", [1, 5, 66])  # 66 > tiles of the short sequences: empty splits
def test_every_config_and_split_count(config, splits):
    q, c = _case([1, 17, 97, 1025, 20000], block_size=16, hq=32, hkv=8, device="cuda", seed=splits)
    _check(q, c, config=config, num_splits=splits)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("d", [64, 128])
def test_dtypes_and_head_dims(dtype, d):
    q, c = _case([3, 333, 4099], block_size=32, hq=16, hkv=4, d=d, dtype=dtype, device="cuda", seed=d)
    _check(q, c)


@pytest.mark.gpu
@needs_hopper
def test_same_tokens_under_every_page_size_give_the_same_output():
    # One logical KV (the same K and V rows in order) paged with blocks of 1 and of 256 tokens:
    # the kernel sees different gathers, and the outputs may differ only by summation order.
    lens = [1025, 77]
    g = torch.Generator(device="cuda").manual_seed(5)
    k = [torch.randn(4, n, 128, generator=g, device="cuda").to(torch.bfloat16) for n in lens]
    v = [torch.randn(4, n, 128, generator=g, device="cuda").to(torch.bfloat16) for n in lens]
    q = torch.randn(len(lens), 16, 128, generator=g, device="cuda").to(torch.bfloat16)
    outs = []
    for bs in (1, 256):
        c = build_paged_cache(lens, block_size=bs, n_kv_heads=4, head_dim=128, device="cuda", shuffle=True,
                              generator=g, poison_unused=True)
        for b, n in enumerate(lens):
            for j in range(-(-n // bs)):
                blk = int(c.block_tables[b, j])
                rows = slice(j * bs, min(n, (j + 1) * bs))
                c.k_cache[blk, :, : rows.stop - rows.start] = k[b][:, rows]
                c.v_cache[blk, :, : rows.stop - rows.start] = v[b][:, rows]
        outs.append(_check(q, c).float())
    # At most one bf16 rounding apart: 2^-8 relative, and 2^-9 absolute near zero.
    torch.testing.assert_close(outs[0], outs[1], atol=2 ** -9, rtol=2 ** -8)


@pytest.mark.gpu
@needs_hopper
def test_refuses_a_ring_larger_than_shared_memory():
    # 64 query rows + 6 stages x 2 x 128 rows, each row 128 x 2 B: 400 KiB > 227 KiB.
    q, c = _case([5], device="cuda")
    with pytest.raises(ValueError, match="shared memory"):
        _call(q, c, config=GluonDecodeConfig(block_n=128, num_stages=6))

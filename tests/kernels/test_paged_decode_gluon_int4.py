"""Tests of the Gluon (sm_90) paged decode kernel for INT4 KV.

CPU (CI): every launch configuration compiles for sm_90 with the installed Triton's bundled
ptxas (in a child process: the suite runs under the interpreter, whose objects Gluon cannot
compile). The PTX does both products as fp16 ``wgmma`` (counts by hand), gathers codes with
16-byte ``cp.async`` only, reads the code tiles with 16-byte shared loads, loads no single
bytes, and ptxas spills nothing; the default holds three programs per SM. The dequantising PTX
is run instruction by instruction (a small interpreter written from the PTX manual's
definitions) on every byte value, and the kernel's fp16 roundings (emulated in PyTorch) stay
inside the INT4 tolerance. Inputs the kernel cannot take are refused by name. GPU (``-m gpu``,
skipped without Hopper): results against the float32 paged reference on the dequantised pools
at tails, page sizes 1/16/256, GQA 1/4/8, split counts, both head dims and query dtypes, with
NaN scales in every slot no sequence owns.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

from kernels.int4_cache import dequantize_int4, quantize_int4
from kernels.paged_cache import build_paged_cache
from kernels.paged_decode_gluon import GluonDecodeConfig, gluon_decode_available
from kernels.paged_decode_gluon_int4 import (
    DEQUANT_PTX,
    GLUON_INT4_DECODE_CONFIGS,
    THREE_PER_SM_REGISTERS,
    gluon_paged_decode_int4,
    int4_shared_bytes,
)
from kernels.paged_decode_int4 import paged_decode_int4
from kernels.paged_reference import gather_kv, paged_attention_reference
from kernels.tolerances import tolerance
from support.paths import ROOT

INT4_TOL = tolerance("paged_decode", "int4").atol
needs_hopper = pytest.mark.skipif(not gluon_decode_available(), reason="needs Gluon and a CUDA device of capability 9.x")

# (config index, head_dim, block_size, group, split, query dtype): every configuration at the
# main shape, then the default at page sizes 1 and 256, head dim 64, GQA 1 and 8, unsplit and
# an fp16 query.
_BUILDS = ([(i, 128, 16, 4, True, "bf16") for i in range(len(GLUON_INT4_DECODE_CONFIGS))]
           + [(0, 128, bs, 4, True, "bf16") for bs in (1, 256)]
           + [(0, 64, 16, 4, True, "bf16"), (0, 128, 16, 1, True, "bf16"), (0, 128, 16, 8, False, "bf16"),
              (0, 128, 16, 4, True, "fp16")])

_BUILD_SCRIPT = """
import dataclasses, json, sys
from kernels.gluon_int4_sm90 import int4_decode_sm90_build
from kernels.paged_decode_gluon_int4 import GLUON_INT4_DECODE_CONFIGS
rows = []
for i, d, bs, group, split, q_dtype in json.loads(sys.argv[1]):
    b = int4_decode_sm90_build(GLUON_INT4_DECODE_CONFIGS[i], head_dim=d, block_size=bs, group=group, split=split,
                               q_dtype=q_dtype)
    rows.append(dict(dataclasses.asdict(b), index=i, split=split))
print(json.dumps(rows))
"""


@pytest.fixture(scope="module")
def sm90_builds():
    env = {**os.environ, "TRITON_INTERPRET": "0", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", _BUILD_SCRIPT, json.dumps(_BUILDS)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _cfg(build: dict) -> GluonDecodeConfig:
    return GLUON_INT4_DECODE_CONFIGS[build["index"]]


def test_every_config_compiles_for_sm90_without_spills(sm90_builds):
    assert len(sm90_builds) == len(_BUILDS)
    for build in sm90_builds:
        # Under the three-per-SM cap ptxas keeps a 24-byte stack frame at GQA 1 (measured with
        # Triton 3.6.0 and 3.7.1; six words, L1-resident); anything more is a real spill.
        allowed = 24 if _cfg(build).maxnreg and build["group"] == 1 else 0
        assert build["spill_bytes"] <= allowed, f"register spills: {build}"
        assert 0 < build["registers"] <= (_cfg(build).maxnreg or 254), build
        assert build["shared_bytes"] <= 227 * 1024, build


def test_both_products_are_fp16_mmas(sm90_builds):
    # Hand count, one loop body: q.k^T is two M64 x N(block_n) x K(head_dim / 2) products (one
    # per half), K steps of 16: 2 * (head_dim / 2) / 16; p.v is two M64 x N(head_dim / 2) x
    # K(block_n) products: 2 * block_n / 16. At d 128, 64 tokens: 8 + 8.
    for build in sm90_builds:
        assert build["wgmma_f16"] == build["head_dim"] // 16 + 2 * _cfg(build).block_n // 16, build
        assert build["wgmma_other"] == 0, build


def test_codes_arrive_by_16_byte_async_copies_and_are_read_16_bytes_at_a_time(sm90_builds):
    for build in sm90_builds:
        cfg = _cfg(build)
        assert build["cp_async_narrow"] == 0, f"copies narrower than 16 B: {build}"
        assert build["byte_loads"] == 0, f"byte-wise loads: {build}"
        code_bytes = cfg.block_n * build["head_dim"] // 2  # one K or V code tile
        # K and V tiles over 128 threads in 16-byte copies (d 128, 64 tokens: 2 each), per issue
        # site: the prologue's num_stages - 1 unrolled tiles plus the loop's refill.
        assert build["cp_async_16"] == 2 * code_bytes // 16 // 128 * cfg.num_stages, build
        # The dequantisation reads each tile once, 16 bytes per thread and access, and nothing
        # else reads shared memory.
        assert build["shared_loads_v4"] == 2 * code_bytes // 16 // 128, build
        assert build["shared_loads_narrow"] == 0, build
        # Four codes per inlined body, 8 f16x2 instructions each; each 16-byte code vector
        # becomes 64 bytes of fp16 (two halves), written in 16-byte stores, plus the query's two
        # fp16 half tiles (64 rows x head_dim x 2 B) once.
        assert build["dequant_calls"] == 2 * code_bytes // 4 // 128, build
        assert build["f16x2_ops"] == 8 * build["dequant_calls"], build
        assert build["shared_stores_v4"] == (2 * code_bytes * 4 + 64 * build["head_dim"] * 2) // 16 // 128, build


def test_shared_memory_and_the_default_holds_three_programs_per_sm(sm90_builds):
    # Hand count, d 128, 64-token tiles, 3 stages: the fp16 query padded to 64 rows is
    # 64 x 128 x 2 B = 16 KiB; each stage holds a K and a V code tile of 64 x 64 B (4 KiB each);
    # the four fp16 half tiles are 64 x 64 x 2 B = 8 KiB each: 16 + 3 * 8 + 32 = 72 KiB.
    assert int4_shared_bytes(GluonDecodeConfig(block_n=64, num_stages=3), 128) == 73_728
    for build in sm90_builds:
        expected = int4_shared_bytes(_cfg(build), build["head_dim"])
        assert expected <= build["shared_bytes"] < expected + 1024, build
    default = next(b for b in sm90_builds if b["index"] == 0 and b["head_dim"] == 128 and b["group"] == 4)
    # 65,536 registers / (3 programs x 128 threads) = 170.7: at most 168 (units of 8) for three.
    assert THREE_PER_SM_REGISTERS == 168 and default["registers"] <= THREE_PER_SM_REGISTERS, default
    assert default["resident_per_sm"] == 3, default


@pytest.mark.parametrize(("kwargs", "head_dim", "message"), [
    (dict(block_n=64, num_stages=3, overlap=True), 128, "no overlapped loop"),
    # One pass of 16-byte vectors over 128 threads covers 2048 / (d / 2) tokens: 64 at d 64.
    (dict(block_n=32), 64, "block_n must be at least 64 at head_dim 64"),
    (dict(block_n=16), 128, "block_n must be at least 32 at head_dim 128"),
])
def test_configs_it_cannot_run_are_refused(kwargs, head_dim, message):
    from kernels.gluon_int4_sm90 import compile_int4_decode_for_sm90

    with pytest.raises(ValueError, match=message):
        compile_int4_decode_for_sm90(GluonDecodeConfig(**kwargs), head_dim=head_dim)


# ---------------------------------------------------------------------------- the PTX, run on the CPU


def _run_dequant_ptx(word: int, scale_lo: np.float16, scale_hi: np.float16) -> tuple[list, list]:
    """``DEQUANT_PTX`` executed on one register of four codes, by the PTX manual's definitions of
    mov, prmt (default mode), lop3, sub/fma.rn/mul .f16x2 (fp16 lanes, round to nearest even)."""
    def halves(x):
        return np.array([x & 0xFFFF, x >> 16], dtype=np.uint16).view(np.float16)

    def word_of(h):
        bits = np.asarray(h, dtype=np.float16).view(np.uint16).astype(np.uint32)
        return int(bits[0]) | int(bits[1]) << 16

    pair = lambda s: word_of([s, s])  # noqa: E731 - a token's scale in both lanes
    regs = {"$4": word, "$5": pair(scale_lo), "$6": pair(scale_lo), "$7": pair(scale_hi), "$8": pair(scale_hi)}
    val = lambda t: int(t, 0) if t[0].isdigit() else regs[t]  # noqa: E731
    body = [line.strip().rstrip(";") for line in DEQUANT_PTX.splitlines()]
    for line in body:
        if not line or line[0] in "{}" or line.startswith(".reg"):
            continue
        op, args = line.split(None, 1)
        d, *src = [a.strip() for a in args.split(",")]
        if op == "mov.b32":
            regs[d] = val(src[0])
        elif op == "prmt.b32":
            pool = val(src[0]) | val(src[1]) << 32
            sel = val(src[2])
            regs[d] = sum(((pool >> (8 * ((sel >> (4 * i)) & 7))) & 0xFF) << (8 * i) for i in range(4))
        elif op == "lop3.b32":
            a, b, c, lut = (val(s) for s in src)
            regs[d] = sum(((lut >> ((a >> i & 1) << 2 | (b >> i & 1) << 1 | (c >> i & 1))) & 1) << i
                          for i in range(32))
        elif op in ("sub.f16x2", "mul.f16x2", "fma.rn.f16x2"):
            x = [halves(val(s)).astype(np.float64) for s in src]
            exact = {"sub.f16x2": lambda: x[0] - x[1], "mul.f16x2": lambda: x[0] * x[1],
                     "fma.rn.f16x2": lambda: x[0] * x[1] + x[2]}[op]()
            regs[d] = word_of(exact.astype(np.float16))  # one rounding of the exact result
        else:
            raise AssertionError(f"instruction the test interpreter does not know: {line}")
    out = [halves(regs[f"${i}"]) for i in range(4)]
    return [*out[0], *out[1]], [*out[2], *out[3]]


def test_dequant_ptx_gives_scaled_codes_minus_8_for_every_byte():
    assert set(re.findall(r"^\s*\.?([a-z0-9]+)[.\s]", DEQUANT_PTX, re.M)) == {"reg", "mov", "prmt", "lop3", "sub", "fma",
                                                                         "mul"}
    rng = np.random.default_rng(0)
    for first in range(0, 256, 4):  # each byte value at each of the four positions of a register
        codes = [(first + i) % 256 for i in range(4)]
        rng.shuffle(codes)
        word = sum(c << (8 * i) for i, c in enumerate(codes))
        s_lo, s_hi = np.float16(rng.uniform(0.01, 2.0)), np.float16(rng.uniform(0.01, 2.0))
        lo, hi = _run_dequant_ptx(word, s_lo, s_hi)
        # By hand: byte j holds dim j in its low nibble and dim j + D/2 in its high nibble; the
        # value is (nibble - 8) * scale, rounded once to fp16.
        assert [float(x) for x in lo] == [float(np.float16(((c & 15) - 8) * float(s_lo))) for c in codes], codes
        assert [float(x) for x in hi] == [float(np.float16(((c >> 4) - 8) * float(s_hi))) for c in codes], codes


# ---------------------------------------------------------------------------- the kernel's numerics


def _case(lens, *, block_size=16, hq=32, hkv=8, d=128, q_dtype=torch.bfloat16, seed=0, device="cpu"):
    g = torch.Generator(device=device).manual_seed(seed)
    cache = build_paged_cache(lens, block_size=block_size, n_kv_heads=hkv, head_dim=d, dtype=torch.bfloat16,
                              device=device, shuffle=True, generator=g, spare_blocks=3, poison_unused=True)
    q = torch.randn(len(lens), hq, d, generator=g, device=device).to(q_dtype)
    return q, quantize_int4(cache)


def _reference(q, c):
    return paged_attention_reference(q, dequantize_int4(c.k), dequantize_int4(c.v), c.block_tables, c.seq_lens)


def _emulated(q: torch.Tensor, c) -> torch.Tensor:
    """The kernel's arithmetic in PyTorch, one sequence at a time: K and V values ``(c - 8) *
    scale`` rounded once to fp16 (what ``DEQUANT_PTX`` writes), the query rounded to fp16,
    scores and softmax in float32, P rounded to fp16 before p.v. Only the accumulation order and
    the output's rounding are left out."""
    batch, hq, d = q.shape
    group = hq // c.k.data.shape[1]
    k16, v16 = dequantize_int4(c.k).half().float(), dequantize_int4(c.v).half().float()
    out = torch.empty(batch, hq, d, dtype=torch.float32)
    for b, n in enumerate(int(x) for x in c.seq_lens.tolist()):
        k = gather_kv(k16, c.block_tables[b], n).repeat_interleave(group, dim=0)  # [hq, n, d]
        v = gather_kv(v16, c.block_tables[b], n).repeat_interleave(group, dim=0)
        scores = torch.einsum("hd,hnd->hn", q[b].half().float(), k) / math.sqrt(d)
        p = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
        out[b] = torch.einsum("hn,hnd->hd", p.half().float(), v) / p.sum(dim=-1, keepdim=True)
    return out


def test_fp16_roundings_stay_inside_the_int4_tolerance():
    # The bound the GPU tests apply leaves room for the output's bf16 rounding (|out| <~ 3:
    # 2^-8 relative, ~1.2e-2) on top of the roundings emulated here.
    for seed in range(3):
        q, c = _case([17, 33, 97, 1025], hkv=4, hq=16, seed=seed)
        err = (_emulated(q, c) - _reference(q, c)).abs().max().item()
        assert 0 < err <= INT4_TOL - 1.2e-2, f"seed {seed}: {err:.3e}"


# ---------------------------------------------------------------------------- inputs


def _call(q, c, **kw):
    return gluon_paged_decode_int4(q, c.k, c.v, c.block_tables, c.seq_lens, **kw)


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(d=32, hq=8, hkv=2), "head_dim must be one of \\(64, 128\\)"),
    (dict(hq=32, hkv=2), "at most 8 .* got 32 / 2 = 16"),
])
def test_refuses_shapes_it_cannot_take(kwargs, message):
    q, c = _case([5], **kwargs)
    with pytest.raises(ValueError, match=message):
        _call(q, c)


def test_refuses_what_the_triton_int4_kernel_refuses_even_after_it_took_head_dim_32():
    # The Triton wrapper caches its checks per signature: its acceptance of d 32 must not let
    # this kernel skip its own.
    q, c = _case([5], d=32, hq=8, hkv=2)
    paged_decode_int4(q, c.k, c.v, c.block_tables, c.seq_lens)
    with pytest.raises(ValueError, match="head_dim must be one of"):
        _call(q, c)
    with pytest.raises(ValueError, match="k must be an Int4Pool"):
        gluon_paged_decode_int4(q, c.k.data, c.v, c.block_tables, c.seq_lens)


def test_refuses_a_foreign_config():
    q, c = _case([5])
    with pytest.raises(ValueError, match="config must be a GluonDecodeConfig"):
        _call(q, c, config=object())


@pytest.mark.skipif(gluon_decode_available(), reason="checks the refusal on machines without sm_90")
def test_refuses_without_hopper():
    q, c = _case([5])
    with pytest.raises(ValueError, match="capability 9.x"):
        _call(q, c)


def test_the_int4_wrapper_runs_this_kernel_as_its_wgmma_backend():
    q, c = _case([5])
    with pytest.raises(ValueError, match="capability 9.x"):  # no Hopper here: refused, not emulated
        paged_decode_int4(q, c.k, c.v, c.block_tables, c.seq_lens, backend="wgmma")


# ---------------------------------------------------------------------------- GPU checks


def _check(q, c, **kw):
    out = _call(q, c, **kw)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert torch.isfinite(out).all(), "NaN/inf reached the output (a slot past a sequence's end was read)"
    err = (out.float() - _reference(q, c)).abs().max().item()
    assert err <= INT4_TOL, f"max abs error {err:.3e} against the dequantised reference > {INT4_TOL:.1e}"
    return out


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("block_size", [1, 16, 256])
@pytest.mark.parametrize("hq,hkv", [(8, 8), (16, 4), (32, 4)])  # GQA 1, 4, 8
def test_matches_reference(block_size, hq, hkv):
    q, c = _case([1, 17, 97, 1025, 20000], block_size=block_size, hq=hq, hkv=hkv, device="cuda",
                 seed=block_size + hq)
    assert torch.isnan(c.k.scales.float()).any()  # the unused slots really hold NaN scales
    _check(q, c)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("config", GLUON_INT4_DECODE_CONFIGS, ids=lambda c: c.name.replace(" ", "_"))
@pytest.mark.parametrize("splits", [1, 5, 66])  # 66 > tiles of the short sequences: empty splits
def test_every_config_and_split_count(config, splits):
    q, c = _case([1, 17, 97, 1025, 20000], block_size=16, hq=32, hkv=8, device="cuda", seed=splits)
    _check(q, c, config=config, num_splits=splits)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("q_dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("d", [64, 128])
def test_query_dtypes_and_head_dims(q_dtype, d):
    q, c = _case([3, 333, 4099], block_size=32, hq=16, hkv=4, d=d, q_dtype=q_dtype, device="cuda", seed=d)
    _check(q, c)


@pytest.mark.gpu
@needs_hopper
def test_agrees_with_the_triton_int4_kernel():
    q, c = _case([4096, 999, 33], block_size=16, hq=32, hkv=8, device="cuda", seed=11)
    triton_out = paged_decode_int4(q, c.k, c.v, c.block_tables, c.seq_lens)
    assert (_check(q, c).float() - triton_out.float()).abs().max().item() <= INT4_TOL

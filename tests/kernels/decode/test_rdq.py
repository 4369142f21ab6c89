"""Tests of the register-dequant warp-MMA decode kernel (INT4 and FP8 KV).

CPU (CI): configurations of both designs (heads as the MMA's rows, and swapped: heads as its N)
compile for sm_90 with the installed Triton's bundled ptxas (in a child process: the suite runs
under the interpreter, whose objects Gluon cannot compile); the PTX does both products as
``mma.sync.m16n8k16`` (counted by hand), loads no single bytes, gathers codes with 8/16-byte
``cp.async`` only, stores nothing to shared memory and shuffles nothing but the softmax's
reductions inside the loop (the dequantised operands and the swapped design's P^T stay in
registers: ``movmatrix`` counted by hand), and ptxas spills nothing. The dequantising PTX is run
instruction by instruction (an interpreter written from the PTX manual's definitions) on every
byte value. The head-dim permutations are checked two ways: a model of which value each lane's
registers hold, pushed through the same reshapes and permutes as the kernel, against the direct
map of :mod:`kernels.decode.rdq_layouts`; and the lane that loads a byte is the lane the MMA fragment
needs it in, by the PTX manual's fragment tables and by Triton's own operand layouts. The swapped
design's P^T: a model of ``movmatrix``'s fragment semantics (PTX manual) run on Triton's
accumulator layout, relabelled as the kernel does, is a direct transpose in Triton's B layout.
GPU (``-m gpu``, skipped without Hopper), both designs: results against the float32 paged reference
on the dequantised pools at tails 1/17/97/1025/20000, page sizes 1/16/256, GQA 1/4/8/16, forced
splits, shuffled tables and NaN in every slot no sequence owns.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from kernels.cache.int4 import dequantize_int4, quantize_int4
from kernels.cache.paged import build_paged_cache, quantize_fp8
from kernels.decode.rdq import (RDQ_CONFIGS, RdqConfig, rdq_available, rdq_decode, rdq_shared_bytes,
                                     uses_register_prefetch)
from kernels.decode.rdq_swap import swapped_heads
from kernels.reference.paged import paged_attention_reference
from kernels.decode.rdq_layouts import (
    FP8_K_ELEMENT_BYTE,
    FP8_K_PTX,
    FP8_V_PTX,
    INT4_K_ELEMENT_BYTE,
    INT4_K_PTX,
    INT4_V_PTX,
    k_physical_byte,
    k_tile_layout_bases,
    p_transpose_reshape,
    v_physical_byte,
    v_tile_layout_bases,
    word_layout_bases,
)
from kernels.tolerances import tolerance
from support.compiled import rows_from_child
from support.views import off_grid

needs_hopper = pytest.mark.skipif(not rdq_available(), reason="needs Gluon and a CUDA device of capability 9.x")

_SWAP = next(i for i, c in enumerate(RDQ_CONFIGS) if c.swap_ab)  # the first swapped config
# (config index, format, head_dim, block_size, group, split): every config at the main INT4
# shape, the default for FP8, both head dims, page sizes 1 and 256, GQA 1, 8 and 16, unsplit;
# the swapped design at each of those too (GQA 16: two n-tiles).
_BUILDS = ([(i, "int4", 128, 16, 4, True) for i in range(len(RDQ_CONFIGS))]
           + [(0, "fp8", 128, 16, 4, True), (0, "fp8", 64, 16, 8, True), (0, "int4", 64, 256, 1, True),
              (0, "int4", 128, 1, 16, False), (1, "fp8", 128, 256, 16, False)]
           + [(_SWAP, "fp8", 128, 16, 4, True), (_SWAP, "fp8", 64, 16, 8, True), (_SWAP, "int4", 64, 256, 1, True),
              (_SWAP, "int4", 128, 1, 16, False), (_SWAP, "fp8", 128, 256, 16, False)])

_BUILD_SCRIPT = """
import dataclasses, json, sys
from kernels.decode.rdq_sm90 import rdq_sm90_build
from kernels.decode.rdq import RDQ_CONFIGS
rows = []
for i, fmt, d, bs, group, split in json.loads(sys.argv[1]):
    b = rdq_sm90_build(RDQ_CONFIGS[i], fmt=fmt, head_dim=d, block_size=bs, group=group, split=split)
    rows.append(dict(dataclasses.asdict(b), index=i, split=split))
print(json.dumps(rows))
"""


@pytest.fixture(scope="module")
def sm90_builds():
    return rows_from_child(_BUILD_SCRIPT, json.dumps(_BUILDS))


def _cfg(build: dict) -> RdqConfig:
    return RDQ_CONFIGS[build["index"]]


def _n_tiles(build: dict) -> int:
    """The swapped design's n-tiles of 8 query heads (1 for GQA <= 8, 2 for 16)."""
    return swapped_heads(build["group"]) // 8


def _row_bytes(build: dict) -> int:
    return build["head_dim"] // 2 if build["fmt"] == "int4" else build["head_dim"]


def test_every_build_compiles_without_spills_and_fits(sm90_builds):
    assert len(sm90_builds) == len(_BUILDS)
    for b in sm90_builds:
        assert b["spill_bytes"] == 0, f"register spills: {b}"
        assert 0 < b["registers"] <= 255, b
        ring = rdq_shared_bytes(_cfg(b), b["head_dim"], b["fmt"], b["block_size"])
        # The ring, plus the scratch of the query's and the output's one layout change each
        # (reused): 16 rows x RB fp16 per half, [RB, 8 or 16] fp32.
        assert ring <= b["shared_bytes"] <= ring + 16 * b["head_dim"] * 2, b
        assert b["resident_per_sm"] >= 4, b


def test_both_products_are_warp_mmas_counted_by_hand(sm90_builds):
    # Rows design, per tile: q.k^T is [16, D] x [D, block_n]: D/16 k-steps x block_n/8 n-tiles;
    # p.V is [16, block_n] x [block_n, D]: block_n/16 x D/8. INT4 splits each into two halves of
    # the same total. At d 128, 32 tokens: 32 + 32.
    # Swapped, per tile: K Q^T is [block_n, D] x [D, 8 c]: block_n/16 m-tiles x D/16 k-steps x c
    # n-tiles; V^T P^T is [D, block_n] x [block_n, 8 c]: D/16 x block_n/16 x c. At d 128, 16
    # tokens, GQA 4 (c = 1): 8 + 8, half the rows design's 16 + 16.
    for b in sm90_builds:
        n, d = _cfg(b).block_n, b["head_dim"]
        if _cfg(b).swap_ab:
            assert b["mma_sync"] == 2 * (n // 16) * (d // 16) * _n_tiles(b), b
        else:
            assert b["mma_sync"] == (d // 16) * (n // 8) + (n // 16) * (d // 8), b
        assert b["mma_other"] == 0, b
    main = {(b["config"], b["fmt"]): b for b in sm90_builds if b["group"] == 4 and b["head_dim"] == 128}
    rows, swapped = RDQ_CONFIGS[1], RDQ_CONFIGS[_SWAP]  # both 16 x 4 stages
    assert (rows.block_n, rows.num_stages) == (swapped.block_n, swapped.num_stages)
    assert main[(swapped.name, "int4")]["mma_sync"] * 2 == main[(rows.name, "int4")]["mma_sync"]


def test_the_swapped_design_transposes_p_with_movmatrix_only(sm90_builds):
    # One movmatrix per 8 x 8 block of P: 2 per 16 tokens and n-tile, twice for INT4's two
    # scaled copies of P; none in the rows design. All in the loop.
    for b in sm90_builds:
        n = _cfg(b).block_n
        if _cfg(b).swap_ab:
            expected = (n // 16) * 2 * _n_tiles(b) * (2 if b["fmt"] == "int4" else 1)
        else:
            expected = 0
        assert b["movmatrix"] == b["movmatrix_in_loop"] == expected, b


def test_split_builds_let_the_merge_start_early(sm90_builds):
    for b in sm90_builds:
        assert b["launch_dependents"] == (1 if b["split"] and _cfg(b).pdl else 0), b


def test_codes_move_in_wide_copies_and_operands_stay_in_registers(sm90_builds):
    for b in sm90_builds:
        n, rb, stages = _cfg(b).block_n, _row_bytes(b), _cfg(b).num_stages
        assert b["byte_loads"] == 0, b
        if uses_register_prefetch(_cfg(b), b["fmt"], b["block_size"]):
            _assert_register_prefetch_loop(b, n, rb)
            continue
        # K: each lane copies rb/4 contiguous bytes per token (16-byte copies, split in 16s);
        # V: rb/8 bytes per token. Per issue site (the prologue's stages - 1 plus the loop's).
        k_width, v_width = min(rb // 4, 16), min(rb // 8, 16)
        expected: dict = {}
        expected[k_width] = expected.get(k_width, 0) + n * rb // 32 // k_width * stages
        expected[v_width] = expected.get(v_width, 0) + n * rb // 32 // v_width * stages
        if _cfg(b).ring_scales and _cfg(b).swap_ab and b["fmt"] == "int4":
            # The scale words (4 bytes a token, K and V) as S^T's rows hold them: lane (g, t)
            # copies tokens g + 8 i of each 16-token m-tile, so n / 8 words a ring per site.
            expected[4] = expected.get(4, 0) + 2 * (n // 8) * stages
        assert {int(w): c for w, c in b["cp_async"].items()} == expected, b
        # Nothing is written to shared memory inside the loop: K and V reach the MMAs from
        # registers; the only shuffles there are the softmax's. Rows design: max and sum over 4
        # lanes, rows g and g + 8: 2 x 2 x 2. Swapped: the max over the 8 lanes holding a head
        # pair (3 steps x 2 heads per n-tile), then whether any head's max grew (the 4 lanes
        # holding different head pairs: 2 steps); the sum stays per lane until after the loop.
        assert b["shared_stores_in_loop"] == 0, b
        assert b["shfl_in_loop"] == (6 * _n_tiles(b) + 2 if _cfg(b).swap_ab else 8), b
        assert b["loop_sass"] > 0, b


def _assert_register_prefetch_loop(b: dict, n: int, rb: int) -> None:
    """A register-prefetch build: no copy or read-back through shared memory, no barrier, and per
    tile the global loads counted by hand: K's rb/4 bytes a token per lane in 16-byte loads, V's
    rb/8 in 8-byte ones (over 32 lanes), the n/8 scale words each lane holds per format, and one
    block-table entry."""
    assert b["cp_async"] == {}, b
    ops = b["loop_sass_ops"]
    assert not any(ops.get(op) for op in ("LDS", "LDGSTS", "STS", "BAR", "DEPBAR")), b
    k_loads, v_loads = n * rb // 32 // min(rb // 4, 16), n * rb // 32 // min(rb // 8, 16)
    assert ops["LDG"] == k_loads + v_loads + 2 * (n // 8) + 1, b
    assert b["shared_stores_in_loop"] == 0 and b["shfl_in_loop"] == 6 * _n_tiles(b) + 2, b


def test_the_swapped_rescale_is_the_only_skippable_block_counted_by_hand(sm90_builds):
    # Swapped, the block a tile skips while no running max grows: per lane, 2 heads per n-tile
    # (an FADD and an exp2 each for alpha) and one FMUL per fp32 accumulator register: O^T is
    # [RB, 8 c] per half (INT4: two halves), the running sums [block_n, 8 c], over 32 lanes. INT4
    # d 128, 16 tokens, GQA 4: 2 x 64 x 8 / 32 + 16 x 8 / 32 = 36 FMUL + 2 + 2 = 40 (measured 40).
    for b in sm90_builds:
        cfg, c = _cfg(b), _n_tiles(b)
        if not cfg.swap_ab:
            assert b["loop_sass_skippable"] == 0, b
            continue
        if cfg.ring_scales and b["fmt"] == "int4":
            # The scale copies' own branches add skippable ranges: at least the rescale's.
            halves = 2
            assert b["loop_sass_skippable"] >= (halves * _row_bytes(b) * 8 * c + cfg.block_n * 8 * c) // 32, b
            continue
        halves = 2 if b["fmt"] == "int4" else 1
        fmuls = (halves * _row_bytes(b) * 8 * c + cfg.block_n * 8 * c) // 32
        # ptxas may compute alpha's FADD/exp2 ahead of the branch (seen at d 64): bounds, not equality.
        assert fmuls <= b["loop_sass_skippable"] <= fmuls + 2 * 2 * c, b
        assert b["loop_sass_ops"]["FMUL"] >= fmuls, b


def test_the_swapped_design_stores_its_partials_in_vectors(sm90_builds):
    # Swapped: O^T's rows relabelled into physical head-dim order, then each lane holds 4
    # consecutive dims of one head: an [RB, 8 c] fp32 partial per half is RB x 8 c / 128 16-byte
    # vectors (bf16 partials: 8-byte ones), plus one 4-byte lse per head pair a lane owns. At d 128,
    # GQA <= 8, INT4: 2 halves x 64 x 8 / 128 = 8 vectors.
    for b in sm90_builds:
        cfg = _cfg(b)
        if not (cfg.swap_ab and b["split"]):
            continue
        halves = 2 if b["fmt"] == "int4" else 1
        width = 8 if cfg.bf16_partials and b["fmt"] == "int4" else 16
        stores = {int(w): c for w, c in b["global_stores"].items()}
        assert stores.get(width) == halves * _row_bytes(b) * 8 * _n_tiles(b) // 128, b
        assert set(stores) <= {width, 4}, b  # nothing scattered but the lse


def test_the_16_byte_grid_by_hand():
    from kernels.decode.checks import on_16_byte_grid as pools_on_16_byte_grid

    pool = torch.zeros(8, 2, 16, 64, dtype=torch.uint8)  # [blocks, heads, page, RB]: strides 2048, 1024, 64
    assert pools_on_16_byte_grid(pool, pool[2:])  # a whole-block slice keeps every address 16-aligned
    wide = torch.zeros(8, 2, 16, 65, dtype=torch.uint8)[..., 1:]  # offset by a byte, token stride 65
    assert wide.stride(-1) == 1 and not pools_on_16_byte_grid(wide)
    assert not pools_on_16_byte_grid(pool, torch.zeros(8, 2, 16, 72, dtype=torch.uint8)[..., :64])  # stride 72
    shifted = off_grid(pool)
    assert shifted.stride() == pool.stride() and not pools_on_16_byte_grid(shifted)  # 4 bytes off
    # Strides count in bytes: a bf16 cache with 8-value rows has a 16-byte token stride, 4 values 8.
    assert pools_on_16_byte_grid(torch.zeros(4, 2, 16, 8, dtype=torch.bfloat16))
    assert not pools_on_16_byte_grid(torch.zeros(4, 2, 16, 4, dtype=torch.bfloat16))


def _shifted(c):
    """The case's K and V code pools (INT4) or caches (FP8) moved off the 16-byte grid."""
    if hasattr(c, "k"):
        return dataclasses.replace(c, k=dataclasses.replace(c.k, data=off_grid(c.k.data)),
                                   v=dataclasses.replace(c.v, data=off_grid(c.v.data)))
    return dataclasses.replace(c, k_cache=off_grid(c.k_cache), v_cache=off_grid(c.v_cache))


@pytest.mark.parametrize("fmt", ["int4", "fp8"])
def test_refuses_pools_off_the_16_byte_grid_even_after_an_aligned_call(fmt):
    # The checks run once per call signature; the address's place on the grid is part of it, so an
    # aligned call's pass does not wave an off-grid view of the same shape through.
    from kernels.decode.launch import signature

    q, c = _case([5, 40], fmt=fmt)
    shifted = _shifted(c)
    pools = (c.k.data, shifted.k.data) if fmt == "int4" else (c.k_cache, shifted.k_cache)
    assert pools[0].stride() == pools[1].stride() and signature(pools[0]) != signature(pools[1])
    assert pools[1].data_ptr() % 16 == 4
    if rdq_available():
        _call(q, c)
    else:
        with pytest.raises(ValueError, match="capability 9.x"):  # every other check passed
            _call(q, c)
    names = "k.data and v.data" if fmt == "int4" else "k and v"
    with pytest.raises(ValueError, match=f"{names} must start on a 16-byte boundary .* got addresses 4 and 4 bytes"):
        _call(q, shifted)


def test_shared_bytes_formula_by_hand():
    # 3 stages x 32 tokens x (64 B of K + 64 B of V) at d 128 INT4; FP8 rows are 128 B.
    assert rdq_shared_bytes(RdqConfig(block_n=32, num_stages=3), 128, "int4", 16) == 12_288
    assert rdq_shared_bytes(RdqConfig(block_n=32, num_stages=3), 128, "fp8", 16) == 24_576
    # Register prefetch: no ring where it applies (INT4, swapped, pages of a tile or more).
    prefetch = RdqConfig(block_n=16, swap_ab=True, reg_prefetch=True)
    assert rdq_shared_bytes(prefetch, 128, "int4", 16) == 0
    assert rdq_shared_bytes(prefetch, 128, "int4", 1) == rdq_shared_bytes(dataclasses.replace(
        prefetch, reg_prefetch=False), 128, "int4", 1) == 3 * 16 * (64 + 64)
    assert rdq_shared_bytes(prefetch, 128, "fp8", 16) == 3 * 16 * (128 + 128)


# ---------------------------------------------------------------------------- the PTX, run on the CPU


def _halves(x: int) -> np.ndarray:
    return np.array([x & 0xFFFF, x >> 16], dtype=np.uint16).view(np.float16)


def _word(h) -> int:
    bits = np.asarray(h, dtype=np.float16).view(np.uint16).astype(np.uint32)
    return int(bits[0]) | int(bits[1]) << 16


def _e4m3(byte: int) -> float:
    return float(torch.tensor([byte], dtype=torch.uint8).view(torch.float8_e4m3fn).float())


def _run_ptx(ptx: str, inputs: dict) -> dict:
    """Run a dequantising PTX body by the PTX manual's definitions of mov (also the b16 pair
    split), shr.b32, prmt (default mode), lop3, sub/fma.rn .f16x2 (fp16 lanes, one rounding) and
    cvt.rn.f16x2.e4m3x2 (low byte to the low half). Registers hold ints."""
    regs = dict(inputs)
    val = lambda t: int(t, 0) if t[0].isdigit() else regs[t]  # noqa: E731
    for line in (raw.strip().rstrip(";") for raw in ptx.splitlines()):
        if not line or line[0] in "{}" or line.startswith(".reg"):
            continue
        op, args = line.split(None, 1)
        if op == "mov.b32" and args.startswith("{"):
            names, src = args[1:].split("}")
            lo, hi = (n.strip() for n in names.split(","))
            word = val(src.strip(" ,"))
            regs[lo], regs[hi] = word & 0xFFFF, word >> 16
            continue
        d, *src = [a.strip() for a in args.split(",")]
        if op == "mov.b32":
            regs[d] = val(src[0])
        elif op == "shr.b32":
            regs[d] = val(src[0]) >> val(src[1])
        elif op == "prmt.b32":
            pool, sel = val(src[0]) | val(src[1]) << 32, val(src[2])
            regs[d] = sum(((pool >> (8 * ((sel >> (4 * i)) & 7))) & 0xFF) << (8 * i) for i in range(4))
        elif op == "lop3.b32":
            a, b, c, lut = (val(s) for s in src)
            regs[d] = sum(((lut >> ((a >> i & 1) << 2 | (b >> i & 1) << 1 | (c >> i & 1))) & 1) << i for i in range(32))
        elif op in ("sub.f16x2", "fma.rn.f16x2"):
            x = [_halves(val(s)).astype(np.float64) for s in src]
            exact = x[0] - x[1] if op == "sub.f16x2" else x[0] * x[1] + x[2]
            regs[d] = _word(exact.astype(np.float16))
        elif op == "cvt.rn.f16x2.e4m3x2":
            h = val(src[0])
            regs[d] = _word([_e4m3(h & 0xFF), _e4m3(h >> 8)])
        else:
            raise AssertionError(f"instruction the test interpreter does not know: {line}")
    return regs


def _words(rng, n: int) -> list[list[int]]:
    """Byte quadruples covering every byte value at every position, shuffled."""
    out = []
    for first in range(0, 256, 4):
        codes = [(first + i) % 256 for i in range(4)]
        rng.shuffle(codes)
        out.append(codes)
    return out[:n] if n else out


def _pack(codes) -> int:
    return sum(c << (8 * i) for i, c in enumerate(codes))


def _vals(regs: dict, names) -> list[float]:
    return [float(x) for n in names for x in _halves(regs[n])]


def test_int4_k_ptx_gives_codes_minus_8_in_its_element_order():
    for codes in _words(np.random.default_rng(0), 0):
        r = _run_ptx(INT4_K_PTX, {"$4": _pack(codes)})
        # By hand: value m of the low (high) output is the low (high) nibble of byte
        # INT4_K_ELEMENT_BYTE[m], minus 8.
        assert _vals(r, ("$0", "$1")) == [(codes[b] & 15) - 8 for b in INT4_K_ELEMENT_BYTE], codes
        assert _vals(r, ("$2", "$3")) == [(codes[b] >> 4) - 8 for b in INT4_K_ELEMENT_BYTE], codes


def test_int4_v_ptx_pairs_two_tokens_at_each_byte():
    rng = np.random.default_rng(1)
    words = _words(rng, 0)
    for a, b in zip(words, words[1:] + words[:1]):
        r = _run_ptx(INT4_V_PTX, {"$8": _pack(a), "$9": _pack(b)})
        # Register i (i = 0..3) holds (token a, token b) at byte i; $0..$3 low nibbles, $4..$7 high.
        for i in range(4):
            assert _vals(r, (f"${i}",)) == [(a[i] & 15) - 8, (b[i] & 15) - 8], (a, b, i)
            assert _vals(r, (f"${i + 4}",)) == [(a[i] >> 4) - 8, (b[i] >> 4) - 8], (a, b, i)


def test_fp8_ptx_converts_exactly():
    rng = np.random.default_rng(2)
    words = _words(rng, 0)
    for a, b in zip(words, words[1:] + words[:1]):
        if any(x & 0x7F == 0x7F for x in a + b):  # NaN codes: never loaded (masked slots are 0)
            continue
        k = _run_ptx(FP8_K_PTX, {"$2": _pack(a)})
        assert _vals(k, ("$0", "$1")) == [_e4m3(a[i]) for i in FP8_K_ELEMENT_BYTE], a
        v = _run_ptx(FP8_V_PTX, {"$4": _pack(a), "$5": _pack(b)})
        for i in range(4):
            assert _vals(v, (f"${i}",)) == [_e4m3(a[i]), _e4m3(b[i])], (a, b, i)


# ---------------------------------------------------------------------------- the permutations


_OWNERS: dict[str, dict] = {}


def _owner(bases: dict, coord: tuple[int, int]) -> int:
    """The lane that holds element ``coord`` of a one-warp linear layout (XOR of the bases)."""
    key = repr(bases)
    if key not in _OWNERS:
        owners = {}
        for lane in range(32):
            for reg in range(1 << len(bases["reg_bases"])):
                x = y = 0
                for bits, base in ((reg, bases["reg_bases"]), (lane, bases["lane_bases"])):
                    for i, (bx, by) in enumerate(base):
                        if bits >> i & 1:
                            x, y = x ^ bx, y ^ by
                owners[x, y] = lane
        _OWNERS[key] = owners
    return _OWNERS[key][coord]


@pytest.mark.parametrize("row_bytes", [32, 64, 128])
def test_k_operand_model_matches_the_direct_map_and_the_fragment_owner(row_bytes):
    n_tok = 16
    for element_byte in (INT4_K_ELEMENT_BYTE, FP8_K_ELEMENT_BYTE):
        # What the conversion returns: per token, per lane slice, per word s, value m is byte
        # 4 s + element_byte[m] of the slice; the element index is slice * rb/4 + 4 s + m.
        conv = np.empty((n_tok, row_bytes), dtype=np.int64)
        for n in range(n_tok):
            for idx in range(row_bytes):
                word, m = divmod(idx, 4)
                conv[n, idx] = n * 1000 + 4 * word + element_byte[m]  # token and physical byte
        # The kernel's _k_logical: reshape [N, 4, RB/16, 2, 2], permute (2, 3, 1, 4, 0), reshape [RB, N].
        logical = conv.reshape(n_tok, 4, row_bytes // 16, 2, 2).transpose(2, 3, 1, 4, 0).reshape(row_bytes, n_tok)
        bases = k_tile_layout_bases(n_tok, row_bytes)
        for k in range(row_bytes):
            for n in range(n_tok):
                phys = k_physical_byte(k, row_bytes, element_byte)
                assert logical[k, n] == n * 1000 + phys, (k, n)
                # mma B fragment: lane 4 g + t holds column n = g (mod 8), rows k = 2t, 2t+1 (mod 8).
                assert _owner(bases, (n, phys)) == 4 * (n % 8) + (k % 8) // 2, (k, n)
        assert sorted(k_physical_byte(k, row_bytes, element_byte) for k in range(row_bytes)) == list(range(row_bytes))


@pytest.mark.parametrize("row_bytes", [32, 64, 128])
def test_v_operand_model_matches_the_direct_map_and_the_fragment_owner(row_bytes):
    n_tok = 32
    # x_q[n2, 4 w + m] (q = 0: bytes 0-1 of word w, q = 1: bytes 2-3) is token 2 n2 + (m & 1),
    # byte 4 w + 2 q + (m >> 1): what the V conversions return for even/odd token words.
    xs = []
    for q in (0, 1):
        x = np.empty((n_tok // 2, row_bytes), dtype=np.int64)
        for n2 in range(n_tok // 2):
            for idx in range(row_bytes):
                w, m = divmod(idx, 4)
                x[n2, idx] = (2 * n2 + (m & 1)) * 1000 + 4 * w + 2 * q + (m >> 1)
        xs.append(x)
    # The kernel's _v_logical: join, reshape [N/2, 8, RB/32, 2, 2, 2], permute (0, 4, 2, 5, 3, 1).
    joined = np.stack(xs, axis=-1).reshape(n_tok // 2, 8, row_bytes // 32, 2, 2, 2)
    logical = joined.transpose(0, 4, 2, 5, 3, 1).reshape(n_tok, row_bytes)
    bases = v_tile_layout_bases(n_tok, row_bytes)
    for tok in range(n_tok):
        for n in range(row_bytes):
            phys = v_physical_byte(n, row_bytes)
            assert logical[tok, n] == tok * 1000 + phys, (tok, n)
            # mma B fragment of p.V: lane 4 g + t holds column n = g (mod 8), rows (tokens) 2t, 2t+1 (mod 8).
            assert _owner(bases, (tok, phys)) == 4 * (n % 8) + (tok % 8) // 2, (tok, n)
    assert sorted(v_physical_byte(n, row_bytes) for n in range(row_bytes)) == list(range(row_bytes))


def test_the_kernel_s_query_offset_formula_is_the_map():
    # rdq_tiles.query_dims (both designs load q there): phys = ((k >> 1) & 3) RB/4 + 4 (k >> 4)
    # + byte(m), m = 2 ((k >> 3) & 1) + (k & 1), byte(m) = (m >> 1) + 2 (m & 1) for INT4 and m for FP8.
    for rb in (32, 64, 128):
        k = np.arange(rb)
        m = 2 * ((k >> 3) & 1) + (k & 1)
        for element_byte, byte in ((INT4_K_ELEMENT_BYTE, (m >> 1) + 2 * (m & 1)), (FP8_K_ELEMENT_BYTE, m)):
            phys = ((k >> 1) & 3) * (rb // 4) + 4 * (k >> 4) + byte
            assert phys.tolist() == [k_physical_byte(int(i), rb, element_byte) for i in k]


def test_the_kernel_s_output_column_formula_is_the_map():
    # rdq_tiles.output_dims computes 4 ((n & 7) WT + (n >> 5)) + 2 ((n >> 4) & 1) + ((n >> 3) & 1).
    for rb in (32, 64, 128):
        n = np.arange(rb)
        cols = 4 * ((n & 7) * (rb // 32) + (n >> 5)) + 2 * ((n >> 4) & 1) + ((n >> 3) & 1)
        assert cols.tolist() == [v_physical_byte(int(i), rb) for i in n]



def _triton_layout(operand: str, shape: tuple[int, int]) -> dict:
    """Triton's own one-warp linear layout of the ``mma.m16n8k16`` accumulator (``"c"``) or of an
    fp16 operand (``"a"``, ``"b"``; k_width 2) for a ``shape`` tile: ``{(lane, register): (row, col)}``."""
    from triton._C.libtriton import gluon_ir, ir
    from triton.experimental.gluon import language as gl

    ctx = ir.context()
    ir.load_dialects(ctx)
    builder = gluon_ir.GluonOpBuilder(ctx)
    mma = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[1, 1], instr_shape=[16, 8])
    layout = mma if operand == "c" else gl.DotOperandLayout(operand_index="ab".index(operand), parent=mma, k_width=2)
    ll = builder.to_linear_layout(layout._to_ir(builder), list(shape))
    assert not ll.warp_bases and ll.shape == list(shape)
    out = {}
    for lane in range(32):
        for reg in range(1 << len(ll.reg_bases)):
            x = y = 0
            for bits, bases in ((reg, ll.reg_bases), (lane, ll.lane_bases)):
                for i, (bx, by) in enumerate(bases):
                    if bits >> i & 1:
                        x, y = x ^ bx, y ^ by
            out[lane, reg] = (x, y)
    assert len(set(out.values())) == shape[0] * shape[1]  # no replication: every element once
    return out


def _lane_of(layout: dict) -> dict:
    return {pos: lane for (lane, _), pos in layout.items()}


def test_triton_s_mma_layouts_are_the_ptx_fragment_tables():
    # The fragment tables every map here is written from (PTX ISA, mma.m16n8k16 .f16, lane 4 g + t).
    c, a, b = _triton_layout("c", (16, 8)), _triton_layout("a", (16, 16)), _triton_layout("b", (16, 8))
    for lane in range(32):
        g, t = divmod(lane, 4)
        assert {pos for (ln, _), pos in c.items() if ln == lane} == {(r, 2 * t + e) for r in (g, g + 8) for e in (0, 1)}
        assert {pos for (ln, _), pos in a.items() if ln == lane} == {
            (r, 2 * t + e + 8 * h) for r in (g, g + 8) for h in (0, 1) for e in (0, 1)}
        assert {pos for (ln, _), pos in b.items() if ln == lane} == {
            (2 * t + e + 8 * h, g) for h in (0, 1) for e in (0, 1)}
    # pack=2 of the P tile pairs registers 2w and 2w + 1: heads 2t and 2t + 1 of one token.
    for (lane, reg), (row, col) in c.items():
        if reg % 2 == 0:
            assert c[lane, reg + 1] == (row, col + 1)


def _movmatrix(words: torch.Tensor) -> torch.Tensor:
    """``movmatrix.sync.aligned.m8n8.trans.b16`` by the PTX manual: ``words [32 lanes, 2]`` (the
    two 16-bit halves of each lane's register). Source: lane ``4 r + c`` holds row ``r``, columns
    ``2c, 2c + 1`` of an 8 x 8 matrix; result: lane ``4 r + c`` holds column ``r``, rows ``2c, 2c +
    1`` of it (the transpose in the source's layout)."""
    matrix = words.reshape(8, 4, 2).reshape(8, 8)  # [row, col]: lane 4 row + col // 2, half col % 2
    return matrix.t().reshape(8, 4, 2).reshape(32, 2)


@pytest.mark.parametrize("block_n", [16, 32, 64])
@pytest.mark.parametrize("heads", [8, 16])
def test_movmatrix_then_the_relabelling_is_p_in_the_b_layout(block_n, heads):
    p = torch.arange(block_n * heads, dtype=torch.int64).reshape(block_n, heads) * 7 + 3  # distinct values
    c, b = _triton_layout("c", (block_n, heads)), _triton_layout("b", (block_n, heads))
    n_regs = len(c) // 32
    regs = torch.tensor([[int(p[c[lane, r]]) for r in range(n_regs)] for lane in range(32)])  # P in the C layout
    moved = torch.cat([_movmatrix(regs[:, w:w + 2]) for w in range(0, n_regs, 2)], dim=1)  # one per register pair
    # Gluon still calls the output Y (C layout); the kernel relabels Y as Z by reshape/permute.
    shape, perm = p_transpose_reshape(block_n, heads)
    z_of_y = torch.arange(block_n * heads).reshape(block_n, heads).reshape(shape).permute(perm).reshape(block_n, heads)
    y_to_z = {divmod(int(y), heads): (i, j) for (i, j), y in np.ndenumerate(z_of_y.numpy())}
    b_lane = _lane_of(b)
    for lane in range(32):
        for r in range(n_regs):
            z = y_to_z[c[lane, r]]
            assert b_lane[z] == lane, (lane, r, z)  # Z's layout is B's up to register order: the convert is free
            assert int(moved[lane, r]) == int(p[z]), (lane, r, z)  # and it holds P there: a direct transpose
    # The movmatrix model itself against a direct transpose of one 8 x 8 block.
    block = torch.arange(64).reshape(8, 8)
    assert torch.equal(_movmatrix(block.reshape(32, 2)).reshape(8, 8), block.t())


@pytest.mark.parametrize("tile", ["k", "v"])
@pytest.mark.parametrize(("block_n", "row_bytes"), [(16, 32), (16, 64), (32, 64), (64, 128)])
def test_a_word_tile_gives_each_lane_the_bytes_it_holds_in_the_byte_tile(tile, block_n, row_bytes):
    # Register prefetch loads words where the ring loaded bytes: every byte (token, c) must still
    # reach the lane that owns it in the byte layout, as byte c % 4 of word (token, c // 4), and
    # each lane's words must be whole 16-byte (K at d 128) or 8-byte (V) runs of one token row.
    byte_bases = (k_tile_layout_bases if tile == "k" else v_tile_layout_bases)(block_n, row_bytes)
    words = word_layout_bases(byte_bases)
    assert words["shape"] == [block_n, row_bytes // 4]
    for token in range(block_n):
        for c in range(row_bytes):
            assert _owner(words, (token, c // 4)) == _owner(byte_bases, (token, c)), (token, c)
    run = len([b for b in words["reg_bases"] if b[0] == 0])  # registers walking one row's words
    assert 4 * (1 << run) == (row_bytes // 4 if tile == "k" else row_bytes // 8)
    with pytest.raises(ValueError, match="walk a word's bytes"):
        word_layout_bases(dict(byte_bases, reg_bases=byte_bases["reg_bases"][1:]))


@pytest.mark.parametrize("row_bytes", [32, 64, 128])
def test_the_output_store_puts_rows_in_physical_order(row_bytes):
    # The swapped store relabels O^T's rows (logical output column n) as [RB/8, 8] transposed, so
    # that its rows are physical dims (n % 8) RB/8 + n // 8: that must be v_physical_byte.
    n = torch.arange(row_bytes)
    physical = n.reshape(row_bytes // 8, 8).t().reshape(row_bytes)  # the row each physical dim holds
    for dim, logical in enumerate(physical.tolist()):
        assert v_physical_byte(logical, row_bytes) == dim


@pytest.mark.parametrize(("fmt", "row_bytes"), [("int4", 32), ("int4", 64), ("fp8", 64), ("fp8", 128)])
def test_the_code_tiles_feed_both_designs_operands_from_the_lanes_that_loaded_them(fmt, row_bytes):
    element_byte = INT4_K_ELEMENT_BYTE if fmt == "int4" else FP8_K_ELEMENT_BYTE
    n_tok = 32
    k_bases, v_bases = k_tile_layout_bases(n_tok, row_bytes), v_tile_layout_bases(n_tok, row_bytes)
    k_lanes = {(n, kk): _owner(k_bases, (n, k_physical_byte(kk, row_bytes, element_byte)))
               for n in range(n_tok) for kk in range(row_bytes)}
    v_lanes = {(tok, m): _owner(v_bases, (tok, v_physical_byte(m, row_bytes)))
               for tok in range(n_tok) for m in range(row_bytes)}
    # Rows design: K^T [k, tokens] and V [tokens, n] are B operands.
    kt_b, v_b = _lane_of(_triton_layout("b", (row_bytes, n_tok))), _lane_of(_triton_layout("b", (n_tok, row_bytes)))
    # Swapped: K [tokens, k] and V^T [dims, tokens] are A operands.
    k_a, vt_a = _lane_of(_triton_layout("a", (n_tok, row_bytes))), _lane_of(_triton_layout("a", (row_bytes, n_tok)))
    for (n, kk), lane in k_lanes.items():
        assert kt_b[kk, n] == lane and k_a[n, kk] == lane, (n, kk)
    for (tok, m), lane in v_lanes.items():
        assert v_b[tok, m] == lane and vt_a[m, tok] == lane, (tok, m)


def test_swapped_heads_and_config_names():
    assert [swapped_heads(g) for g in (1, 4, 8, 9, 16)] == [8, 8, 8, 16, 16]
    with pytest.raises(ValueError, match="1 to 16 query heads"):
        swapped_heads(17)
    assert RdqConfig(block_n=16, num_stages=4, swap_ab=True).name == "rdq swap 16x4st"
    assert RdqConfig(block_n=16, num_stages=4).name == "rdq 16x4st"
    assert RdqConfig(pdl=False, per_sm=4).name == "rdq 32x3st 4/SM nopdl"
    with pytest.raises(ValueError, match="swap_ab must be a bool"):
        RdqConfig(swap_ab=1)
    assert RdqConfig(swap_ab=True, ring_scales=True).name == "rdq swap 32x3st ring-scales"
    for bad in (0, 65, True, 2.0):
        with pytest.raises(ValueError, match="per_sm must be None or an int"):
            RdqConfig(per_sm=bad)
    names = [c.name for c in RDQ_CONFIGS]
    assert len(set(names)) == len(names)


# ---------------------------------------------------------------------------- inputs


def _case(lens, *, fmt="int4", block_size=16, hq=32, hkv=8, d=128, q_dtype=torch.bfloat16, seed=0, device="cpu"):
    g = torch.Generator(device=device).manual_seed(seed)
    cache = build_paged_cache(lens, block_size=block_size, n_kv_heads=hkv, head_dim=d, dtype=torch.bfloat16,
                              device=device, shuffle=True, generator=g, spare_blocks=3, poison_unused=True)
    q = torch.randn(len(lens), hq, d, generator=g, device=device).to(q_dtype)
    return q, (quantize_int4(cache) if fmt == "int4" else quantize_fp8(cache))


def _call(q, c, **kw):
    if hasattr(c, "k"):
        return rdq_decode(q, c.k, c.v, c.block_tables, c.seq_lens, **kw)
    return rdq_decode(q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens, k_scale=c.k_scale,
                            v_scale=c.v_scale, **kw)


def _reference(q, c):
    if hasattr(c, "k"):
        return paged_attention_reference(q, dequantize_int4(c.k), dequantize_int4(c.v), c.block_tables, c.seq_lens)
    ks, vs = c.k_scale.view(1, -1, 1, 1), c.v_scale.view(1, -1, 1, 1)
    return paged_attention_reference(q, c.k_cache.float() * ks, c.v_cache.float() * vs, c.block_tables, c.seq_lens)


@pytest.mark.parametrize(("fmt", "kwargs", "message"), [
    ("int4", dict(d=32, hq=8, hkv=2), "head_dim must be one of \\(64, 128\\)"),
    ("int4", dict(hq=34, hkv=1), "at most 16 .* got 34 / 1 = 34"),
    ("fp8", dict(d=256, hq=8, hkv=2), "head_dim must be one of"),
])
def test_refuses_shapes_it_cannot_take(fmt, kwargs, message):
    q, c = _case([5], fmt=fmt, **kwargs)
    with pytest.raises(ValueError, match=message):
        _call(q, c)


def test_refuses_a_foreign_config():
    q, c = _case([5])
    with pytest.raises(ValueError, match="config must be an RdqConfig"):
        _call(q, c, config=object())
    with pytest.raises(ValueError, match="block_n must be 16, 32 or 64"):
        RdqConfig(block_n=24)


@pytest.mark.skipif(rdq_available(), reason="checks the refusal on machines without sm_90")
def test_refuses_without_hopper():
    for fmt in ("int4", "fp8"):
        q, c = _case([5], fmt=fmt)
        with pytest.raises(ValueError, match="capability 9.x"):
            _call(q, c)


# ---------------------------------------------------------------------------- GPU checks

_TOL = {"int4": tolerance("paged_decode", "int4").atol, "fp8": tolerance("paged_decode", "fp8 fp16 dots").atol}


def _check(q, c, fmt, **kw):
    out = _call(q, c, **kw)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert torch.isfinite(out).all(), "NaN/inf reached the output (a slot past a sequence's end was read)"
    err = (out.float() - _reference(q, c)).abs().max().item()
    assert err <= _TOL[fmt], f"max abs error {err:.3e} against the dequantised reference > {_TOL[fmt]:.1e}"


def _design(swap: bool) -> RdqConfig | None:
    """The default config (rows design) or the first swapped one."""
    return RDQ_CONFIGS[_SWAP] if swap else None


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("swap", [False, True], ids=["rows", "swap"])
@pytest.mark.parametrize("fmt", ["int4", "fp8"])
@pytest.mark.parametrize("block_size", [1, 16, 256])
@pytest.mark.parametrize("hq,hkv", [(8, 8), (16, 4), (32, 4), (32, 2)])  # GQA 1, 4, 8, 16
def test_matches_reference(fmt, block_size, hq, hkv, swap):
    q, c = _case([1, 17, 97, 1025, 20000], fmt=fmt, block_size=block_size, hq=hq, hkv=hkv, device="cuda",
                 seed=block_size + hq)
    _check(q, c, fmt, config=_design(swap))


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("fmt", ["int4", "fp8"])
@pytest.mark.parametrize("config", RDQ_CONFIGS, ids=lambda c: c.name.replace(" ", "_"))
@pytest.mark.parametrize("splits", [1, 5, 66])  # 66 > tiles of the short sequences: empty splits
def test_every_config_and_split_count(fmt, config, splits):
    q, c = _case([1, 17, 97, 1025, 20000], fmt=fmt, block_size=16, hq=32, hkv=8, device="cuda", seed=splits)
    _check(q, c, fmt, config=config, num_splits=splits)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("swap", [False, True], ids=["rows", "swap"])
@pytest.mark.parametrize("fmt", ["int4", "fp8"])
@pytest.mark.parametrize("q_dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("d", [64, 128])
def test_query_dtypes_and_head_dims(fmt, q_dtype, d, swap):
    q, c = _case([3, 333, 4099], fmt=fmt, block_size=32, hq=16, hkv=4, d=d, q_dtype=q_dtype, device="cuda", seed=d)
    _check(q, c, fmt, config=_design(swap))


@pytest.mark.gpu
@needs_hopper
def test_off_grid_pools_take_the_triton_kernel_under_auto():
    # backend="auto" sends a view the rdq kernel cannot copy to the Triton kernel, which reads any
    # view, and gets the same answer; asked for by name, the rdq kernel refuses it.
    from kernels.decode.api import paged_decode_attention
    
    for fmt in ("int4", "fp8"):
        q, c = _case([1, 97, 1025, 5000], fmt=fmt, device="cuda", seed=11)
        shifted = _shifted(c)
        if fmt == "int4":
            out = paged_decode_attention(q, shifted.k, shifted.v, c.block_tables, c.seq_lens, backend="auto")
        else:
            out = paged_decode_attention(q, shifted.k_cache, shifted.v_cache, c.block_tables, c.seq_lens,
                                         k_scale=c.k_scale, v_scale=c.v_scale, backend="auto")
        # The Triton kernel's own tolerance: its FP8 path takes the q.k dot in e4m3.
        tol = tolerance("paged_decode", fmt).atol
        assert (out.float() - _reference(q, c)).abs().max().item() <= tol, fmt
        with pytest.raises(ValueError, match="16-byte boundary"):
            _call(q, shifted)

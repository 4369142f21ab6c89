"""Paged decode attention for Hopper (sm_90) in Gluon, INT4 KV.

Same contract as :func:`kernels.paged_decode_int4.paged_decode_int4` (pools in
:mod:`kernels.int4_cache`'s layout: ``data [num_blocks, n_kv_heads, block_size, head_dim / 2]``
uint8, byte ``j`` holding dim ``j`` in its low nibble and dim ``j + head_dim / 2`` in its high
nibble; ``scales [num_blocks, n_kv_heads, block_size, 2]`` fp16, one per token for each half),
built on the 16-bit Gluon kernel (:mod:`kernels.paged_decode_gluon`: the page-gathered 16-byte
``cp.async`` ring, the split rule, the online softmax, the stores and the Triton merge as a
programmatic dependent launch are its). What INT4 changes is what reaches the tensor cores:

* The ring holds the packed codes as stored (``block_n x head_dim / 2`` bytes of K and of V per
  stage, 16-byte copies). Once per tile, each code tile is read from its slot in 16-byte vectors
  (16 bytes = 32 values per thread and row pass) and turned into two fp16 tiles, the low half
  (dims ``0 .. D/2 - 1``) and the high half (``D/2 .. D - 1``), already multiplied by their
  token's scale, stored in the MMA's shared layout. The conversion works on whole 32-bit
  registers (inline PTX, 4 codes per register): ``prmt`` spreads two bytes into the two 16-bit
  lanes, ``lop3`` ORs a nibble into the fp16 exponent pattern ``0x6400`` (low nibble: 1024 + c;
  high nibble: 1024 + 16 c), one ``sub.f16x2`` / ``fma.rn.f16x2`` makes ``c - 8`` exactly, one
  ``mul.f16x2`` applies the scale: 14 instructions per 8 values.
* ``s = q_lo @ k_lo^T + q_hi @ k_hi^T``: two chained fp16 ``wgmma`` (the query as two fp16 half
  tiles in shared memory, rounded from bf16 once per program), so the scores come out scaled
  and nothing per token touches the ``[64, block_n]`` score tile (whose 64 rows are mostly
  padding: GROUP <= 8 query heads). Issued asynchronously: V's conversion runs on the CUDA cores
  meanwhile.
* ``acc_lo += p @ v_lo``, ``acc_hi += p @ v_hi``: one fp16 P in registers, two accumulators of
  ``[64, D/2]`` (as many registers as one ``[64, D]``), each stored as its half of the output.

Why not an int8 ``wgmma`` for q.k^T (codes - 8 are exact int8, the query quantised per row): it
halves q.k^T's tensor-core time, but the per-token K scale must then be applied to the s32
scores (two ``[64, block_n]`` tiles, of which only GROUP rows are real: ~190 instructions per
thread and 64-token tile at d = 128, against ~110 for scaling K as it is dequantised), with
scale loads in the scores' layout (16 per thread, not 2) and the query's rounding on top.

The Triton INT4 kernel leaves the dequantisation to Triton, which keeps the dequantised tiles in
registers in the MMA operand layout and loads V's codes from shared memory a byte at a time:
Nsight Compute showed 20 % of DRAM bandwidth, 240 registers, two programs per SM
(benchmarks/NOTES-decode.md, round 10).

Limits: Hopper only, Triton with Gluon (3.6 or newer), no interpreter path; q bf16 or fp16 (the
products run in fp16, so |q| < 65504); head_dim 64 or 128; 1 to 8 query heads per KV head; block
sizes powers of two 1..256; at least ``4096 / head_dim`` tokens per tile (one 16-byte vector per
thread and row pass); no overlapped loop order; ``ValueError`` naming the argument otherwise.
"""

from __future__ import annotations

import dataclasses

import torch

from kernels.decode_checks import check_int4_inputs, check_values
from kernels.decode_launch import (
    SplitPlan,
    check_call_options,
    checked_once,
    planned_split,
    signature,
    split_buffers,
)
from kernels.int4_cache import Int4Pool
from kernels.paged_decode import LOG2_E, merge_splits, pdl_merge
from kernels.paged_decode_gluon import (
    _HAVE_GLUON,
    _SMEM_LIMIT,
    GLUON_DECODE_HEAD_DIMS,
    MAX_GLUON_GROUP,
    MMA_ROWS,
    GluonDecodeConfig,
    gluon_decode_available,
)

if _HAVE_GLUON:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.ampere import async_copy
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        warpgroup_mma,
        warpgroup_mma_wait,
    )

    from kernels.paged_decode_gluon import _issue_tile, _load_pages, _softmax_step, _store_result

__all__ = ["GLUON_INT4_DECODE_CONFIGS", "Int4DecodeConfig", "THREE_PER_SM_REGISTERS", "int4_shared_bytes",
           "gluon_paged_decode_int4", "gluon_int4_decode_plan", "DEQUANT_PTX"]

_VECTOR_BYTES = 16  # bytes per thread per access: cp.async's widest copy, one ld.shared.v4

# Three programs per SM need <= 170 registers per thread (65,536 / (3 x 128) rounded down to
# the allocation unit of 8): the 64-token tiles compile to 191-193 without a cap.
THREE_PER_SM_REGISTERS = 168


@dataclasses.dataclass(frozen=True, kw_only=True)
class Int4DecodeConfig(GluonDecodeConfig):
    """A :class:`GluonDecodeConfig` with an optional register cap (ptxas ``.maxnreg``)."""

    maxnreg: int | None = None

    @property
    def name(self) -> str:
        return super().name + (f" r{self.maxnreg}" if self.maxnreg else "")


# Compiled for sm_90 (kernels.gluon_int4_sm90, d 128, block 16, GQA 4): registers / shared memory /
# programs per SM 64x3st r168 168 / 72 KiB / 3, 32x4st 128 / 48 KiB / 4, 32x6st 128 / 56 KiB / 4,
# 64x3st 192 / 72 KiB / 2, 64x2st 188 / 64 KiB / 2, no spills. Timed on the H200
# (scripts/tuning/h200_gluon_int4_check.py, benchmarks/NOTES-decode.md round 12), x the Triton INT4
# kernel at the four timed shapes: 1.08-1.21, 1.11-1.13, 1.08-1.12, 1.04-1.06, 1.04-1.08. The first
# is the default: three programs per SM of 64-token tiles, two of them in flight each.
GLUON_INT4_DECODE_CONFIGS: tuple[GluonDecodeConfig, ...] = (
    Int4DecodeConfig(block_n=64, num_stages=3, maxnreg=THREE_PER_SM_REGISTERS),
    Int4DecodeConfig(block_n=32, num_stages=4),
    Int4DecodeConfig(block_n=32, num_stages=6),
    Int4DecodeConfig(block_n=64, num_stages=3),
    Int4DecodeConfig(block_n=64, num_stages=2),
)

# Four codes (one 32-bit register, $4) and the scales of their token for the low and the high
# half ($5,$6 and $7,$8: fp16 pairs) -> four scaled fp16 values of the low half ($0,$1) and four
# of the high half ($2,$3). Codes 0..15 stand for c - 8 (kernels.int4_cache).
DEQUANT_PTX = """{
.reg .b32 t<2>, a<2>, b<2>, k1032, k16, km72;
mov.b32 k1032, 0x64086408;
mov.b32 k16, 0x2C002C00;
mov.b32 km72, 0xD480D480;
prmt.b32 t0, $4, 0, 0x4140;
prmt.b32 t1, $4, 0, 0x4342;
lop3.b32 a0, t0, 0x000F000F, 0x64006400, 0xEA;
lop3.b32 a1, t1, 0x000F000F, 0x64006400, 0xEA;
lop3.b32 b0, t0, 0x00F000F0, 0x64006400, 0xEA;
lop3.b32 b1, t1, 0x00F000F0, 0x64006400, 0xEA;
sub.f16x2 a0, a0, k1032;
sub.f16x2 a1, a1, k1032;
fma.rn.f16x2 b0, b0, k16, km72;
fma.rn.f16x2 b1, b1, k16, km72;
mul.f16x2 $0, a0, $5;
mul.f16x2 $1, a1, $6;
mul.f16x2 $2, b0, $7;
mul.f16x2 $3, b1, $8;
}"""
# prmt 0x4140: bytes 0 and 1 into bits 0-7 and 16-23 (selector 4: the zero operand), 0x4342:
# bytes 2 and 3. lop3 0xEA is (a & b) | c. fp16 0x6400 | c = 1024 + c, 0x6400 | 16 c = 1024 +
# 16 c (exact: spacing 1 in [1024, 2048)); 0x6408 = 1032, 0x2C00 = 1/16, 0xD480 = -72.
if _HAVE_GLUON:
    _DEQUANT_ASM = gl.constexpr(DEQUANT_PTX)


def int4_shared_bytes(cfg: GluonDecodeConfig, head_dim: int) -> int:
    """Shared memory of the tiles (bytes): the fp16 query padded to the MMA's 64 rows, a K and a
    V code tile per stage (``head_dim / 2`` bytes per token each), and the fp16 K and V tiles
    the products read."""
    return MMA_ROWS * head_dim * 2 + 2 * cfg.num_stages * cfg.block_n * head_dim // 2 + 2 * cfg.block_n * head_dim * 2


def _min_block_n(cfg: GluonDecodeConfig, head_dim: int) -> int:
    """Tokens one pass of the code layout covers: 16-byte vectors along the ``head_dim / 2``
    bytes of a token, 32 threads per warp, ``num_warps`` warps."""
    return cfg.num_warps * 32 * _VECTOR_BYTES // (head_dim // 2)


if _HAVE_GLUON:

    @gluon.jit
    def _tile_scales(pages, ks_head_ptr, vs_head_ptr, tile_start, end, stride_ksb, stride_kst, stride_vsb,
                     stride_vst, PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr, code_layout: gl.constexpr):
        """Both halves' scales of each token of a tile (its blocks: ``pages``), one 32-bit load
        per token and pool (low half in bits 0-15, high in 16-31), 0 past ``end`` (so the NaN
        scales of unwritten slots are never read)."""
        offs_n = tile_start + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, code_layout))
        live = offs_n < end
        page = pages.to(gl.int64)
        in_page = (offs_n % PAGE_SIZE).to(gl.int64)
        ks = gl.load(ks_head_ptr + page * stride_ksb + in_page * stride_kst, mask=live, other=0)
        vs = gl.load(vs_head_ptr + page * stride_vsb + in_page * stride_vst, mask=live, other=0)
        return ks, vs

    @gluon.jit
    def _half_scale(pair, HIGH: gl.constexpr, like):
        """One half's fp16 scale from a 32-bit (low, high) pair, broadcast along a code row."""
        bits = (pair >> 16) if HIGH else pair
        scale = bits.to(gl.int16).to(gl.float16, bitcast=True)
        return gl.broadcast(gl.expand_dims(scale, 1), like)[0]

    @gluon.jit
    def _dequant_tile(code_smem, lo_smem, hi_smem, pair, code_layout: gl.constexpr):
        """The codes of one ring slot -> scaled fp16 low-half and high-half tiles in shared memory
        (16-byte shared loads, four codes per inline-PTX call; see ``DEQUANT_PTX``)."""
        codes = code_smem.load(code_layout)
        lo, hi = gl.inline_asm_elementwise(
            _DEQUANT_ASM, "=r,=r,=r,=r,r,r,r,r,r",
            [codes, _half_scale(pair, False, codes), _half_scale(pair, True, codes)],
            dtype=(gl.float16, gl.float16), is_pure=True, pack=4)
        lo_smem.store(lo)
        hi_smem.store(hi)

    @gluon.jit
    def _gluon_int4_decode_kernel(
        q_ptr,  # [batch, n_q_heads, HEAD_DIM] query, bf16/fp16
        k_codes_ptr,  # [num_blocks, n_kv_heads, PAGE_SIZE, HEAD_DIM // 2] uint8 packed key codes
        v_codes_ptr,  # [num_blocks, n_kv_heads, PAGE_SIZE, HEAD_DIM // 2] uint8 packed value codes
        k_scales_ptr,  # [num_blocks, n_kv_heads, PAGE_SIZE] int32: the two fp16 key scales of a token
        v_scales_ptr,  # [num_blocks, n_kv_heads, PAGE_SIZE] int32: the two fp16 value scales
        block_tables_ptr,  # [batch, max_blocks_per_seq] int32 pool indices
        seq_lens_ptr,  # [batch] int32 tokens per sequence
        out_ptr,  # [batch, n_q_heads, HEAD_DIM] final output, q's dtype (written when not SPLIT)
        part_out_ptr,  # [batch, n_q_heads, num_splits, HEAD_DIM] fp32 partial outputs (SPLIT)
        part_lse_ptr,  # [batch, n_q_heads, num_splits] fp32 base-2 lse per split (SPLIT)
        qk_scale,  # sm_scale * log2(e): logits come out in base 2 for exp2
        num_splits,  # parts each sequence is cut into (grid dim 2)
        stride_qb, stride_qh, stride_kb, stride_kh, stride_kt, stride_vb, stride_vh, stride_vt,
        stride_ksb, stride_ksh, stride_kst, stride_vsb, stride_vsh, stride_vst,
        stride_btb, stride_ob, stride_oh, stride_pob, stride_poh, stride_pos, stride_plb, stride_plh,
        GROUP: gl.constexpr,  # query heads per KV head (<= MMA rows)
        HEAD_DIM: gl.constexpr,
        PAGE_SIZE: gl.constexpr,  # tokens per cache block
        BLOCK_N: gl.constexpr,  # tokens per tile (may span several pages or part of one)
        STAGES: gl.constexpr,  # shared-memory ring slots
        SPLIT: gl.constexpr,  # write partials + lse for the merge kernel instead of the output
        EARLY_MERGE_LAUNCH: gl.constexpr,  # let the merge kernel (a PDL dependent) start now
        num_warps: gl.constexpr,
    ):
        if EARLY_MERGE_LAUNCH:
            # griddepcontrol.launch_dependents: the merge's griddepcontrol.wait still waits for
            # this whole grid to finish and flush, so where this sits is only a hint.
            gl.inline_asm_elementwise("griddepcontrol.launch_dependents; // $0", "=r", [], dtype=gl.int32,
                                      is_pure=False, pack=1)
        ROWS: gl.constexpr = 64
        HALF: gl.constexpr = HEAD_DIM // 2
        # 16-byte vectors along a token's HALF code bytes, the rest of a warp across tokens: the
        # cp.async gathers and the dequantisation use it.
        code_layout: gl.constexpr = gl.BlockedLayout(
            size_per_thread=[1, 16], threads_per_warp=[32 * 16 // HALF, HALF // 16],
            warps_per_cta=[num_warps, 1], order=[1, 0])
        # 8-element (16-byte) fp16 vectors for the query.
        q_layout: gl.constexpr = gl.BlockedLayout(
            size_per_thread=[1, 8], threads_per_warp=[32 * 8 // HALF, HALF // 8],
            warps_per_cta=[num_warps, 1], order=[1, 0])
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BLOCK_N, 16])
        o_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, HALF, 16])
        p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
        code_smem_layout: gl.constexpr = gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1, order=[1, 0])
        half_smem_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, HALF], gl.float16)
        q_smem_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([ROWS, HALF], gl.float16)

        kv_head = gl.program_id(0)
        seq = gl.program_id(1)
        split = gl.program_id(2)
        # Tokens [start, end) of this split in whole tiles (the Triton kernel's split rule).
        seq_len = gl.load(seq_lens_ptr + seq)
        tiles_per_split = gl.cdiv(gl.cdiv(seq_len, BLOCK_N), num_splits)
        start = split * tiles_per_split * BLOCK_N
        end = gl.minimum(start + tiles_per_split * BLOCK_N, seq_len)
        n_tiles = gl.cdiv(end - start, BLOCK_N)  # <= 0 for a split past the sequence's end

        k_head_ptr = k_codes_ptr + kv_head.to(gl.int64) * stride_kh
        v_head_ptr = v_codes_ptr + kv_head.to(gl.int64) * stride_vh
        ks_head_ptr = k_scales_ptr + kv_head.to(gl.int64) * stride_ksh
        vs_head_ptr = v_scales_ptr + kv_head.to(gl.int64) * stride_vsh
        table_ptr = block_tables_ptr + seq.to(gl.int64) * stride_btb
        kc_smem = gl.allocate_shared_memory(gl.uint8, [STAGES, BLOCK_N, HALF], code_smem_layout)
        vc_smem = gl.allocate_shared_memory(gl.uint8, [STAGES, BLOCK_N, HALF], code_smem_layout)
        k_lo_smem = gl.allocate_shared_memory(gl.float16, [BLOCK_N, HALF], half_smem_layout)
        k_hi_smem = gl.allocate_shared_memory(gl.float16, [BLOCK_N, HALF], half_smem_layout)
        v_lo_smem = gl.allocate_shared_memory(gl.float16, [BLOCK_N, HALF], half_smem_layout)
        v_hi_smem = gl.allocate_shared_memory(gl.float16, [BLOCK_N, HALF], half_smem_layout)
        # The ring fills first: its copies are in flight while the query is loaded.
        for t in gl.static_range(STAGES - 1):
            pages = _load_pages(table_ptr, start + t * BLOCK_N, end, PAGE_SIZE, BLOCK_N, code_layout)
            _issue_tile(k_head_ptr, v_head_ptr, pages, kc_smem, vc_smem, start + t * BLOCK_N, end, t, stride_kb,
                        stride_kt, stride_vb, stride_vt, PAGE_SIZE, BLOCK_N, HALF, code_layout)
        pages = _load_pages(table_ptr, start + (STAGES - 1) * BLOCK_N, end, PAGE_SIZE, BLOCK_N, code_layout)
        scale_pages = _load_pages(table_ptr, start, end, PAGE_SIZE, BLOCK_N, code_layout)

        # The query's two halves in fp16; rows >= GROUP are zeros (finite scores, never stored).
        offs_r = gl.arange(0, ROWS, layout=gl.SliceLayout(1, q_layout))
        offs_dq = gl.arange(0, HALF, layout=gl.SliceLayout(0, q_layout))
        q_ptrs = (q_ptr + seq.to(gl.int64) * stride_qb + gl.expand_dims((kv_head * GROUP + offs_r) * stride_qh, 1)
                  + gl.expand_dims(offs_dq, 0))
        q_mask = gl.expand_dims(offs_r < GROUP, 1)
        q_lo = gl.load(q_ptrs, mask=q_mask, other=0.0).to(gl.float16)
        q_hi = gl.load(q_ptrs + HALF, mask=q_mask, other=0.0).to(gl.float16)
        q_lo_smem = gl.allocate_shared_memory(gl.float16, [ROWS, HALF], q_smem_layout, q_lo)
        q_hi_smem = gl.allocate_shared_memory(gl.float16, [ROWS, HALF], q_smem_layout, q_hi)

        m_i = gl.full([ROWS], float("-inf"), gl.float32, layout=gl.SliceLayout(1, s_layout))
        l_i = gl.zeros([ROWS], gl.float32, layout=gl.SliceLayout(1, s_layout))
        acc_lo = gl.zeros([ROWS, HALF], gl.float32, o_layout)
        acc_hi = gl.zeros([ROWS, HALF], gl.float32, o_layout)
        s_zero = gl.zeros([ROWS, BLOCK_N], gl.float32, s_layout)
        for j in range(n_tiles):
            slot = j % STAGES
            # Refill the slot tile j-1 used, then wait until only the STAGES-1 newest groups are
            # in flight: tile j has landed.
            _issue_tile(k_head_ptr, v_head_ptr, pages, kc_smem, vc_smem, start + (j + STAGES - 1) * BLOCK_N,
                        end, (j + STAGES - 1) % STAGES, stride_kb, stride_kt, stride_vb, stride_vt,
                        PAGE_SIZE, BLOCK_N, HALF, code_layout)
            pages = _load_pages(table_ptr, start + (j + STAGES) * BLOCK_N, end, PAGE_SIZE, BLOCK_N, code_layout)
            # The scales' blocks were loaded one step ahead: only the scale load itself waits.
            ks, vs = _tile_scales(scale_pages, ks_head_ptr, vs_head_ptr, start + j * BLOCK_N, end, stride_ksb,
                                  stride_kst, stride_vsb, stride_vst, PAGE_SIZE, BLOCK_N, code_layout)
            scale_pages = _load_pages(table_ptr, start + (j + 1) * BLOCK_N, end, PAGE_SIZE, BLOCK_N, code_layout)
            async_copy.wait_group(STAGES - 1)
            _dequant_tile(kc_smem.index(slot), k_lo_smem, k_hi_smem, ks, code_layout)
            fence_async_shared()  # plain stores above, read by the async proxy (wgmma) below
            s_tok = warpgroup_mma(q_lo_smem, k_lo_smem.permute((1, 0)), s_zero, use_acc=False, is_async=True)
            s_tok = warpgroup_mma(q_hi_smem, k_hi_smem.permute((1, 0)), s_tok, is_async=True)
            # V's conversion on the CUDA cores while the tensor cores do q.k^T.
            _dequant_tile(vc_smem.index(slot), v_lo_smem, v_hi_smem, vs, code_layout)
            s = warpgroup_mma_wait(0, deps=[s_tok])
            p, alpha, m_i, l_i = _softmax_step(s, m_i, l_i, start + j * BLOCK_N, end, qk_scale, BLOCK_N, s_layout)
            alpha_o = gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
            p16 = gl.convert_layout(p.to(gl.float16), p_layout)
            fence_async_shared()
            acc_lo = warpgroup_mma(p16, v_lo_smem, acc_lo * alpha_o)
            acc_hi = warpgroup_mma(p16, v_hi_smem, acc_hi * alpha_o)
        async_copy.wait_group(0)  # no copy may still target shared memory when the program exits

        # Each half is its own slice of the output row: dims 0..HALF-1, then HALF..HEAD_DIM-1
        # (the split's lse is written twice, the same value).
        _store_result(acc_lo, m_i, l_i, seq, split, kv_head, out_ptr, part_out_ptr, part_lse_ptr,
                      stride_ob, stride_oh, stride_pob, stride_poh, stride_pos, stride_plb, stride_plh,
                      GROUP, ROWS, HALF, SPLIT, s_layout, o_layout)
        _store_result(acc_hi, m_i, l_i, seq, split, kv_head, out_ptr + HALF, part_out_ptr + HALF, part_lse_ptr,
                      stride_ob, stride_oh, stride_pob, stride_poh, stride_pos, stride_plb, stride_plh,
                      GROUP, ROWS, HALF, SPLIT, s_layout, o_layout)


# ----------------------------------------------------------------------------------------------
# Wrapper
# ----------------------------------------------------------------------------------------------


def _check_gluon_int4_inputs(q: torch.Tensor, k: Int4Pool) -> None:
    """What this kernel refuses beyond the Triton INT4 kernel's checks (each error names the argument)."""
    head_dim = q.shape[2]
    if head_dim not in GLUON_DECODE_HEAD_DIMS:
        raise ValueError(f"head_dim must be one of {GLUON_DECODE_HEAD_DIMS} for the Gluon INT4 decode kernel, "
                         f"got {head_dim}")
    group = q.shape[1] // k.data.shape[1]
    if group > MAX_GLUON_GROUP:
        raise ValueError(f"n_q_heads / n_kv_heads must be at most {MAX_GLUON_GROUP} for the Gluon INT4 decode "
                         f"kernel, got {q.shape[1]} / {k.data.shape[1]} = {group}")
    if not gluon_decode_available():
        raise ValueError("the Gluon INT4 decode kernel needs Triton's Gluon and a CUDA device of capability 9.x")


def _check_int4_config(cfg: GluonDecodeConfig, head_dim: int) -> None:
    if cfg.overlap:
        raise ValueError(f"config {cfg.name}: the Gluon INT4 decode kernel has no overlapped loop (overlap=False)")
    if cfg.block_n < _min_block_n(cfg, head_dim):
        raise ValueError(f"config {cfg.name}: block_n must be at least {_min_block_n(cfg, head_dim)} at head_dim "
                         f"{head_dim} for the Gluon INT4 decode kernel, got {cfg.block_n}")
    if int4_shared_bytes(cfg, head_dim) > _SMEM_LIMIT:
        raise ValueError(f"config {cfg.name} needs {int4_shared_bytes(cfg, head_dim)} B of shared memory at "
                         f"head_dim {head_dim}, more than the {_SMEM_LIMIT} B a block may use on sm_90")


def _scale_words(name: str, pool: Int4Pool) -> torch.Tensor:
    """``pool.scales`` ``[.., block_size, 2]`` fp16 as ``[.., block_size]`` int32: a token's two
    scales in one 32-bit word (the kernel loads both with one access)."""
    try:
        return pool.scales.view(torch.int32).squeeze(-1)
    except RuntimeError as exc:
        raise ValueError(f"{name}.scales must have even strides and storage offset (its fp16 pairs are read as "
                         f"32-bit words), got strides {pool.scales.stride()}") from exc


def _kernel_args(q, k: Int4Pool, v: Int4Pool, ks, vs, block_tables, seq_lens, out, plan: SplitPlan,
                 qk_scale: float) -> tuple:
    part_out, part_lse, part_strides = split_buffers(plan, q, out)
    return (q, k.data, v.data, ks, vs, block_tables, seq_lens, out, part_out, part_lse, qk_scale, plan.num_splits,
            q.stride(0), q.stride(1),
            k.data.stride(0), k.data.stride(1), k.data.stride(2),
            v.data.stride(0), v.data.stride(1), v.data.stride(2),
            ks.stride(0), ks.stride(1), ks.stride(2), vs.stride(0), vs.stride(1), vs.stride(2),
            block_tables.stride(0), out.stride(0), out.stride(1), *part_strides)


def _constexprs(cfg: GluonDecodeConfig, *, group: int, head_dim: int, block_size: int, split: bool,
                early_merge: bool) -> dict:
    return dict(GROUP=group, HEAD_DIM=head_dim, PAGE_SIZE=block_size, BLOCK_N=cfg.block_n, STAGES=cfg.num_stages,
                SPLIT=split, EARLY_MERGE_LAUNCH=early_merge)


def _options(cfg: GluonDecodeConfig) -> dict:
    """Compile options of a config: one warpgroup, and its register cap where it has one."""
    cap = getattr(cfg, "maxnreg", None)
    return {"num_warps": cfg.num_warps, **({"maxnreg": cap} if cap else {})}


def gluon_paged_decode_int4(
    q: torch.Tensor,
    k: Int4Pool,
    v: Int4Pool,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    *,
    sm_scale: float | None = None,
    num_splits: int | None = None,
    config: GluonDecodeConfig | None = None,
    validate: bool = True,
) -> torch.Tensor:
    """Decode attention of one query token per sequence over a paged INT4 KV cache (Hopper).

    Parameters
    ----------
    q : Tensor [batch, n_q_heads, head_dim], bf16 or fp16, last dim contiguous
        The new token's query for every sequence; ``head_dim`` 64 or 128.
    k, v : Int4Pool
        ``data [num_blocks, n_kv_heads, block_size, head_dim // 2]`` uint8 and ``scales
        [num_blocks, n_kv_heads, block_size, 2]`` fp16 (:func:`kernels.int4_cache.quantize_pool_int4`);
        ``block_size`` a power of two in 1..256; ``n_q_heads = GROUP * n_kv_heads`` with
        ``1 <= GROUP <= 8``.
    block_tables : Tensor [batch, max_blocks_per_seq], int32
        Pool index of each sequence's ``j``-th block; entries past a sequence's last block are
        never read.
    seq_lens : Tensor [batch], int32
        Tokens per sequence, ``1 <= seq_lens[b] <= max_blocks_per_seq * block_size``.
    sm_scale : float, optional
        Softmax scale; default ``1 / sqrt(head_dim)``.
    num_splits : int, optional
        Parts each sequence is cut into (split-KV); default: whole waves of the programs an SM
        holds (:func:`kernels.decode_config.default_num_splits`).
    config : GluonDecodeConfig, optional
        Tile and ring depth (``overlap`` must be False); default ``GLUON_INT4_DECODE_CONFIGS[0]``.
    validate : bool
        Check table entries and lengths against the pool (one device-to-host sync).

    Returns
    -------
    Tensor [batch, n_q_heads, head_dim], dtype of ``q``

    Raises
    ------
    ValueError
        Inputs this kernel cannot take (what :func:`kernels.paged_decode_int4.paged_decode_int4`
        refuses, head_dim other than 64/128, more than 8 query heads per KV head), a config it
        cannot run, or no Gluon-capable GPU; before any launch.
    """
    cfg, plan, out, ks, vs, constexprs = _prepare(q, k, v, block_tables, seq_lens, num_splits, config, validate)
    args = _kernel_args(q, k, v, ks, vs, block_tables, seq_lens, out, plan,
                        check_call_options(sm_scale, num_splits, q.shape[2]) * LOG2_E)
    _gluon_int4_decode_kernel[plan.grid](*args, **constexprs, **_options(cfg))
    if plan.split:
        merge_splits(args[8], args[9], out, pdl=constexprs["EARLY_MERGE_LAUNCH"])
    return out


def gluon_int4_decode_plan(q: torch.Tensor, k: Int4Pool, v: Int4Pool, block_tables: torch.Tensor,
                           seq_lens: torch.Tensor, *, config: GluonDecodeConfig | None = None) -> tuple[int, int]:
    """``(num_splits, resident programs per SM)`` that :func:`gluon_paged_decode_int4` would use
    for this call with its default split count (the kernel is compiled, nothing is launched)."""
    plan, resident = _prepare(q, k, v, block_tables, seq_lens, None, config, False, plan_only=True)
    return plan.num_splits, resident


def _prepare(q, k, v, block_tables, seq_lens, num_splits, config, validate: bool, *, plan_only: bool = False) -> tuple:
    """Checks, the scale words, the split plan (whole waves of the compiled kernel's resident
    programs), the output and the compile-time values of one call."""
    if config is not None and not isinstance(config, GluonDecodeConfig):
        raise ValueError(f"config must be a GluonDecodeConfig, got {type(config).__name__}")
    sig = signature(q, k.data, k.scales, v.data, v.scales, block_tables, seq_lens) \
        if isinstance(k, Int4Pool) and isinstance(v, Int4Pool) else None
    key = None if sig is None else ("gluon int4", *sig)  # own key: the Triton wrapper takes head_dim 32
    checked_once(key, lambda: (check_int4_inputs(q, k, v, block_tables, seq_lens), _check_gluon_int4_inputs(q, k)))
    cfg = config or GLUON_INT4_DECODE_CONFIGS[0]
    batch, n_q_heads, head_dim = q.shape
    num_blocks, n_kv_heads, block_size, _ = k.data.shape
    _check_int4_config(cfg, head_dim)
    check_call_options(None, num_splits, head_dim)
    ks, vs = _scale_words("k", k), _scale_words("v", v)
    if validate:
        check_values(block_tables, seq_lens, num_blocks, block_size)
    max_len = block_tables.shape[1] * block_size  # upper bound, known without a host sync
    out = torch.empty_like(q)
    shape = dict(group=n_q_heads // n_kv_heads, head_dim=head_dim, block_size=block_size)
    plan, resident = planned_split(
        (key, cfg), batch, n_kv_heads, max_len, q.device, num_splits, cfg.block_n, cfg.waves,
        lambda trial: _gluon_int4_decode_kernel.warmup(
            *_kernel_args(q, k, v, ks, vs, block_tables, seq_lens, out, trial, 1.0), grid=trial.grid,
            **_constexprs(cfg, **shape, split=True, early_merge=pdl_merge(cfg, True, q.device)),
            **_options(cfg)))
    if plan_only:
        return plan, resident
    return cfg, plan, out, ks, vs, _constexprs(cfg, **shape, split=plan.split,
                                               early_merge=pdl_merge(cfg, plan.split, q.device))

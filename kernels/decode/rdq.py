"""Paged decode attention for INT4 and FP8 KV with register dequantisation and warp MMAs (sm_80+, tuned for sm_90).

Reached through :func:`kernels.decode.api.paged_decode_attention` for INT4 pools
(:mod:`kernels.cache.int4`'s layout) and FP8 ones (e4m3, per-tensor or per-KV-head fp32
``k_scale`` / ``v_scale``). Why not Hopper's ``wgmma``, as the Gluon FP8 and INT4 kernels built
on it did (H200: 1.0x the Triton FP8 kernel, 1.01x bf16 for INT4): its
MMA has M = 64 rows for at most 8 (usually 4) query heads, so 56-60 rows of every product are
padding, and they dequantise each tile into an fp16 shared tile that the MMA reads back. At
B 8 x L 32K both costs are about the whole time budget of an INT4 decode at HBM speed.

Here one warp is one program (one flash-decoding partition of a (KV head, sequence, split)):

* ``mma.sync.m16n8k16`` (Gluon's ``ampere.mma_v2``), M = 16: the query heads of a KV head (1 to
  16) padded to 16. Q is the A operand, loaded once and held in registers; ``K^T`` is the B
  operand, dequantised in registers from 16-byte (d 128) global loads of the codes, never
  written to shared memory.
* FlashAttention-2's register reuse: S's accumulator converted to fp16 is the A operand of
  ``o += p . V`` (the same thread holds the same values), and V is the B operand, also
  dequantised in registers.
* The head-dim and token index maps of :mod:`kernels.decode.rdq_layouts` make each thread's operand
  values the bytes of one contiguous slice of a token row, so the dequantised values land in
  the operand layout with register renaming only (checked on the PTX: no shared memory, no
  shuffles for the operands).
* INT4: codes become exact fp16 ``c - 8`` with the ``0x6400`` exponent trick (one ``lop3`` and
  one ``sub``/``fma`` per two values); the per-token, per-half scales go on the scores (two
  accumulators: ``s = s_lo ks_lo + s_hi ks_hi``) and on P (``p vs_lo`` for the low dims'
  products, ``p vs_hi`` for the high dims'), never on the ``[tokens, D]`` tiles. For V an MMA
  register pairs two tokens at one dim, so two token rows are merged with ``prmt`` first.
* FP8: ``cvt.rn.f16x2.e4m3x2`` (exact: e4m3 is a subset of fp16); ``k_scale`` and the softmax
  scale are folded into the query, ``v_scale`` into the final normalisation.
* Codes travel by 16-byte (d 128 K) / 8-byte (V) ``cp.async`` into a small shared ring,
  ``num_stages - 1`` tiles ahead, each lane copying exactly the bytes it later reads (so no
  barrier), then one vector ``ld.shared`` per slice. The split plan and the merge are the other
  decode kernels'; the merge goes out as a programmatic dependent launch on Hopper
  (``RdqConfig.pdl``).
* ``RdqConfig(reg_prefetch=True)`` (INT4, swapped, pages of at least a tile; the INT4 default):
  no ring. The next tile's codes and scales are loaded into registers while this tile is
  computed, as 32-bit *words* in the byte tiles' layouts with a word per four bytes
  (:func:`kernels.decode.rdq_layouts.word_layout_bases`), and the dequantising PTX takes one word per
  element, its fp16-pair outputs split into halves that LLVM folds away. (A tile carried across
  the loop as bytes becomes one SSA value per byte, and repacking them for the PTX cost ~300
  ``PRMT`` per 32-token tile.) No copy, read-back or barrier in the loop: 5-6 % faster than the
  ring at the worst INT4 shape on the H200.
* The swapped design stores its output (or partial) with rows relabelled into physical head-dim
  order and one layout change, so each lane writes 16-byte vectors: scattered 4-byte stores of
  2,112 partials cost ~4 us at batch 8 x 32K.
* ``RdqConfig(swap_ab=True)`` transposes both products so that the query heads are the MMA's
  N = 8 instead of its padded M = 16 (:mod:`kernels.decode.rdq_swap`): half the ``mma.sync`` and half
  the accumulator and query registers at GQA <= 8, the same code tiles and dequantising PTX,
  and P^T moved into the B operand by ``movmatrix``. The Gluon pieces both designs share are in
  :mod:`kernels.decode.rdq_tiles`.

Sources: Dao 2023 (FlashAttention-2, register reuse of P); Frantar et al. 2024 (Marlin: free
index permutations, the ``0x6400`` trick); PTX ISA (mma fragments, ``prmt``, ``lop3``, ``cvt``).

Limits: compute capability 8.9+ for FP8 (``cvt.e4m3x2``), compiled and tuned for sm_90; Triton
with Gluon (3.6 or newer), no interpreter path; q bf16 or fp16 (products in fp16, |q| < 65504);
head_dim 64 or 128; 1 to 16 query heads per KV head; block sizes powers of two 1..256.
"""

from __future__ import annotations

import functools

import torch

from kernels.decode.checks import check_shapes, check_strides, check_values
from kernels.decode.config import FP8_DTYPE
from kernels.decode.launch import (SplitKernelArgs, SplitPlan, check_call_options, checked_once, fp8_scales, planned_split, signature,
                                   split_buffers)
from kernels.cache.int4 import Int4Pool, scale_words
from kernels.decode.merge import merge_splits, pdl_merge
from kernels.decode.direct_launch import DirectLauncher
from kernels.reference.online_softmax import LOG2_E
from kernels.decode.rdq_tiles import _HAVE_GLUON
from kernels.runtime import hopper_gluon_available
from kernels.decode.checks import check_16_byte_grid, check_int4_inputs
from kernels.decode.rdq_layouts import (FP8_K_PTX, FP8_V_PTX, INT4_K_PTX, INT4_V_PTX, k_tile_layout_bases, v_tile_layout_bases,
                                 word_layout_bases)
from kernels.decode.rdq_config import (MAX_RDQ_GROUP, RDQ_CONFIGS, RDQ_FORMATS, RdqConfig,
                                rdq_shared_bytes, uses_register_prefetch)
from kernels.decode.rdq_swap import attend_swapped, swapped_heads

if _HAVE_GLUON:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.ampere import async_copy, mma_v2

    from kernels.decode.rdq_tiles import (split_tiles, code_offsets, issue_codes, k_logical, load_scales, next_codes, output_dims,
                                   query_dims, scale_halves, token_pairs, v_logical)

__all__ = ["RdqConfig", "RDQ_CONFIGS", "RDQ_FORMATS", "MAX_RDQ_GROUP", "rdq_available", "rdq_decode",
           "rdq_plan", "rdq_shared_bytes", "uses_register_prefetch",
           "INT4_K_PTX", "INT4_V_PTX", "FP8_K_PTX", "FP8_V_PTX"]

_MMA_ROWS = 16  # rows of mma.m16n8k16: the query heads, zero-padded
RDQ_HEAD_DIMS = (64, 128)  # whole 16x8x16 MMA k-steps per head and 16-byte rows of codes



if _HAVE_GLUON:
    _INT4_K_ASM = gl.constexpr(INT4_K_PTX)
    _INT4_V_ASM = gl.constexpr(INT4_V_PTX)
    _FP8_K_ASM = gl.constexpr(FP8_K_PTX)
    _FP8_V_ASM = gl.constexpr(FP8_V_PTX)
    _EARLY_MERGE_ASM = gl.constexpr("griddepcontrol.launch_dependents; // $0")
    _ROWS = gl.constexpr(_MMA_ROWS)

    @gluon.jit
    def _rdq_decode_kernel(
        q_ptr,  # [batch, n_q_heads, HEAD_DIM] query, bf16/fp16
        k_codes_ptr,  # [num_blocks, n_kv_heads, PAGE_SIZE, RB] uint8: INT4 packed codes or e4m3 bytes
        v_codes_ptr,  # same for V
        k_scales_ptr,  # INT4: [num_blocks, n_kv_heads, PAGE_SIZE] int32 scale words; FP8: [n_kv_heads] fp32
        v_scales_ptr,  # same for V
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
        INT4: gl.constexpr,  # KV format: INT4 (True) or FP8 e4m3 (False)
        GROUP: gl.constexpr,  # query heads per KV head (<= 16)
        HEAD_DIM: gl.constexpr,
        PAGE_SIZE: gl.constexpr,  # tokens per cache block
        BLOCK_N: gl.constexpr,  # tokens per tile
        STAGES: gl.constexpr,  # shared-memory ring slots of code tiles (STAGES - 1 tiles in flight)
        SPLIT: gl.constexpr,  # write partials + lse for the merge kernel instead of the output
        SWAP_AB: gl.constexpr,  # heads as the MMA's N (kernels.decode.rdq_swap) instead of its M
        RING_SCALES: gl.constexpr,  # INT4, swapped: scale words through the ring with their codes
        EARLY_MERGE_LAUNCH: gl.constexpr,  # let the merge kernel (a PDL dependent) start now
        REG_PREFETCH: gl.constexpr,  # INT4, swapped: next tile's words into registers, no ring
        kw_layout: gl.constexpr,  # the K code tile as words (REG_PREFETCH)
        vw_layout: gl.constexpr,  # the V code tile as words
        k_layout: gl.constexpr,  # the K code tile's register layout (tile_layouts)
        v_layout: gl.constexpr,  # the V code tile's
        ring_layout: gl.constexpr,  # the ring's shared layout: rows as stored, unswizzled
        num_warps: gl.constexpr,
    ):
        if EARLY_MERGE_LAUNCH:
            # griddepcontrol.launch_dependents: the merge's own griddepcontrol.wait still waits
            # for this whole grid to finish and flush, so where this sits is only a hint.
            gl.inline_asm_elementwise(_EARLY_MERGE_ASM, "=r", [], dtype=gl.int32, is_pure=False, pack=1)
        RB: gl.constexpr = HEAD_DIM // 2 if INT4 else HEAD_DIM  # code bytes per token row

        kv_head = gl.program_id(0)
        seq = gl.program_id(1)
        split = gl.program_id(2)
        start, end, n_tiles = split_tiles(seq_lens_ptr, seq, split, num_splits, BLOCK_N)

        k_head_ptr = k_codes_ptr + kv_head.to(gl.int64) * stride_kh
        v_head_ptr = v_codes_ptr + kv_head.to(gl.int64) * stride_vh
        ks_head_ptr = k_scales_ptr + kv_head.to(gl.int64) * stride_ksh
        vs_head_ptr = v_scales_ptr + kv_head.to(gl.int64) * stride_vsh
        table_ptr = block_tables_ptr + seq.to(gl.int64) * stride_btb

        # Per-lane offsets within a tile's page slots, computed once: the loop adds them to one
        # scalar base per tile.
        k_offs = code_offsets(stride_kt, PAGE_SIZE, BLOCK_N, RB, k_layout)
        v_offs = code_offsets(stride_vt, PAGE_SIZE, BLOCK_N, RB, v_layout)
        kw_offs = 0
        vw_offs = 0
        if REG_PREFETCH:
            kw_offs = code_offsets(stride_kt // 4, PAGE_SIZE, BLOCK_N, RB // 4, kw_layout)
            vw_offs = code_offsets(stride_vt // 4, PAGE_SIZE, BLOCK_N, RB // 4, vw_layout)
            k_ring = 0  # not read
            v_ring = 0
        else:
            # The ring of code tiles fills first: its copies are in flight while the query is loaded.
            k_ring = gl.allocate_shared_memory(gl.uint8, [STAGES, BLOCK_N, RB], ring_layout)
            v_ring = gl.allocate_shared_memory(gl.uint8, [STAGES, BLOCK_N, RB], ring_layout)
        # The swapped design's S^T rows: where its scale words are read (and, RING_SCALES, copied).
        scale_layout: gl.constexpr = gl.SliceLayout(1, gl.NVMMADistributedLayout(
            version=[2, 0], warps_per_cta=[1, 1], instr_shape=[16, 8]))
        if RING_SCALES:
            words: gl.constexpr = gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1, order=[0])  # per slot
            ks_ring = gl.allocate_shared_memory(gl.int32, [STAGES, BLOCK_N], words)
            vs_ring = gl.allocate_shared_memory(gl.int32, [STAGES, BLOCK_N], words)
        else:
            ks_ring = k_ring  # not read
            vs_ring = v_ring
        for t in gl.static_range(0 if REG_PREFETCH else STAGES - 1):
            issue_codes(k_head_ptr, v_head_ptr, table_ptr, k_ring, v_ring, start + t * BLOCK_N, end, t, k_offs,
                        v_offs, stride_kb, stride_kt, stride_vb, stride_vt, PAGE_SIZE, BLOCK_N, INT4, k_layout,
                        v_layout, ks_head_ptr, vs_head_ptr, ks_ring, vs_ring, stride_ksb, stride_kst, stride_vsb,
                        stride_vst, RING_SCALES, scale_layout)

        if SWAP_AB:
            attend_swapped(q_ptr, k_scales_ptr, v_scales_ptr, ks_head_ptr, vs_head_ptr, k_head_ptr, v_head_ptr,
                           table_ptr, k_ring, v_ring, k_offs, v_offs, out_ptr, part_out_ptr, part_lse_ptr, qk_scale,
                           seq, split, kv_head, start, end, n_tiles, stride_qb, stride_qh, stride_kb, stride_kt,
                           stride_vb, stride_vt, stride_ksb, stride_kst, stride_vsb, stride_vst, stride_ob, stride_oh,
                           stride_pob, stride_poh, stride_pos, stride_plb, stride_plh, INT4, GROUP, RB, PAGE_SIZE,
                           BLOCK_N, STAGES, SPLIT, k_layout, v_layout, ks_ring, vs_ring, RING_SCALES, kw_offs, vw_offs,
                           REG_PREFETCH)
        else:
            _attend_rows(q_ptr, k_scales_ptr, v_scales_ptr, ks_head_ptr, vs_head_ptr, k_head_ptr, v_head_ptr,
                         table_ptr, k_ring, v_ring, k_offs, v_offs, out_ptr, part_out_ptr, part_lse_ptr, qk_scale,
                         seq, split, kv_head, start, end, n_tiles, stride_qb, stride_qh, stride_kb, stride_kt,
                         stride_vb, stride_vt, stride_ksb, stride_kst, stride_vsb, stride_vst, stride_ob, stride_oh,
                         stride_pob, stride_poh, stride_pos, stride_plb, stride_plh, INT4, GROUP, RB, PAGE_SIZE,
                         BLOCK_N, STAGES, SPLIT, k_layout, v_layout)

    @gluon.jit
    def _attend_rows(q_ptr, k_scales_ptr, v_scales_ptr, ks_head_ptr, vs_head_ptr, k_head_ptr, v_head_ptr, table_ptr,
                     k_ring, v_ring, k_offs, v_offs, out_ptr, part_out_ptr, part_lse_ptr, qk_scale, seq, split, kv_head,
                     start, end, n_tiles, stride_qb, stride_qh, stride_kb, stride_kt, stride_vb, stride_vt, stride_ksb,
                     stride_kst, stride_vsb, stride_vst, stride_ob, stride_oh, stride_pob, stride_poh, stride_pos,
                     stride_plb, stride_plh, INT4: gl.constexpr, GROUP: gl.constexpr, RB: gl.constexpr, PAGE_SIZE:
                     gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, SPLIT: gl.constexpr, k_layout:
                     gl.constexpr, v_layout: gl.constexpr):
        """Query load, main loop and store of one program with the query heads as the MMA's rows
        (Q the A operand, K^T and V the B operands), after the kernel has started the ring's first
        ``STAGES - 1`` copies (arguments: the kernel's)."""
        mma: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[1, 1], instr_shape=[16, 8])
        a_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
        b_op: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=2)
        q_layout: gl.constexpr = gl.BlockedLayout(size_per_thread=[1, 4], threads_per_warp=[2, 16],
                                                  warps_per_cta=[1, 1], order=[1, 0])
        col_layout: gl.constexpr = gl.SliceLayout(0, mma)
        row_layout: gl.constexpr = gl.SliceLayout(1, mma)

        # The query in the head-dim order of the K operand (k_physical_byte), softmax scale (and
        # FP8's k_scale) folded in, rounded once to fp16; rows >= GROUP are zeros.
        offs_r = gl.arange(0, _ROWS, layout=gl.SliceLayout(1, q_layout))
        phys = query_dims(gl.arange(0, RB, layout=gl.SliceLayout(0, q_layout)), INT4, RB)
        if INT4:
            q_scale = qk_scale
        else:
            q_scale = qk_scale * gl.load(k_scales_ptr + kv_head)
        q_ptrs = (q_ptr + seq.to(gl.int64) * stride_qb + gl.expand_dims((kv_head * GROUP + offs_r) * stride_qh, 1)
                  + gl.expand_dims(phys, 0))
        q_mask = gl.expand_dims(offs_r < GROUP, 1)
        q_lo = gl.convert_layout((gl.load(q_ptrs, mask=q_mask, other=0.0).to(gl.float32) * q_scale).to(gl.float16),
                                 a_op)
        if INT4:
            q_hi = gl.convert_layout(
                (gl.load(q_ptrs + RB, mask=q_mask, other=0.0).to(gl.float32) * q_scale).to(gl.float16), a_op)

        m_i = gl.full([_ROWS], float("-inf"), gl.float32, layout=row_layout)
        l_i = gl.zeros([_ROWS], gl.float32, layout=row_layout)
        o_lo = gl.zeros([_ROWS, RB], gl.float32, mma)
        o_hi = gl.zeros([_ROWS, RB], gl.float32, mma)
        s_zero = gl.zeros([_ROWS, BLOCK_N], gl.float32, mma)
        slot = 0  # ring slot of tile j
        for j in range(n_tiles):
            tile = start + j * BLOCK_N
            kc, vc, slot = next_codes(k_head_ptr, v_head_ptr, table_ptr, k_ring, v_ring, tile, end, slot, k_offs,
                                      v_offs, stride_kb, stride_kt, stride_vb, stride_vt, PAGE_SIZE, BLOCK_N, STAGES,
                                      INT4, k_layout, v_layout)
            cols = tile + gl.arange(0, BLOCK_N, layout=col_layout)
            if INT4:
                ks_lo, ks_hi = scale_halves(load_scales(ks_head_ptr, table_ptr, tile, end, stride_ksb, stride_kst,
                                                        PAGE_SIZE, BLOCK_N, col_layout), col_layout)
                vs_lo, vs_hi = scale_halves(load_scales(vs_head_ptr, table_ptr, tile, end, stride_vsb, stride_vst,
                                                        PAGE_SIZE, BLOCK_N, col_layout), col_layout)
                k_lo, k_hi = gl.inline_asm_elementwise(_INT4_K_ASM, "=r,=r,=r,=r,r", [kc],
                                                       dtype=(gl.float16, gl.float16), is_pure=True, pack=4)
                s_lo = mma_v2(q_lo, gl.convert_layout(k_logical(k_lo, BLOCK_N, RB), b_op), s_zero)
                s_hi = mma_v2(q_hi, gl.convert_layout(k_logical(k_hi, BLOCK_N, RB), b_op), s_zero)
                s = s_lo * gl.expand_dims(ks_lo, 0) + s_hi * gl.expand_dims(ks_hi, 0)
            else:
                k16 = gl.inline_asm_elementwise(_FP8_K_ASM, "=r,=r,r", [kc], dtype=gl.float16, is_pure=True, pack=4)
                s = mma_v2(q_lo, gl.convert_layout(k_logical(k16, BLOCK_N, RB), b_op), s_zero)
            s = gl.where(gl.expand_dims(cols < end, 0), s, float("-inf"))
            m_new = gl.maximum(m_i, gl.max(s, axis=1))
            p = gl.exp2(s - gl.expand_dims(m_new, 1))
            alpha_row = gl.exp2(m_i - m_new)
            alpha = gl.expand_dims(alpha_row, 1)
            l_i = l_i * alpha_row + gl.sum(p, axis=1)
            m_i = m_new
            even, odd = token_pairs(vc, BLOCK_N, RB)
            if INT4:
                x0, x1, x2, x3 = gl.inline_asm_elementwise(
                    _INT4_V_ASM, "=r,=r,=r,=r,=r,=r,=r,=r,r,r", [even, odd],
                    dtype=(gl.float16, gl.float16, gl.float16, gl.float16), is_pure=True, pack=4)
                p_lo = gl.convert_layout((p * gl.expand_dims(vs_lo, 0)).to(gl.float16), a_op)
                p_hi = gl.convert_layout((p * gl.expand_dims(vs_hi, 0)).to(gl.float16), a_op)
                o_lo = mma_v2(p_lo, gl.convert_layout(v_logical(x0, x1, BLOCK_N, RB), b_op), o_lo * alpha)
                o_hi = mma_v2(p_hi, gl.convert_layout(v_logical(x2, x3, BLOCK_N, RB), b_op), o_hi * alpha)
            else:
                x0, x1 = gl.inline_asm_elementwise(_FP8_V_ASM, "=r,=r,=r,=r,r,r", [even, odd],
                                                   dtype=(gl.float16, gl.float16), is_pure=True, pack=4)
                p16 = gl.convert_layout(p.to(gl.float16), a_op)
                o_lo = mma_v2(p16, gl.convert_layout(v_logical(x0, x1, BLOCK_N, RB), b_op), o_lo * alpha)

        async_copy.wait_group(0)  # no copy may still target shared memory when the program exits
        if not INT4:
            o_lo = o_lo * gl.load(v_scales_ptr + kv_head)
        _store(o_lo, m_i, l_i, seq, split, kv_head, out_ptr, part_out_ptr, part_lse_ptr, stride_ob, stride_oh,
               stride_pob, stride_poh, stride_pos, stride_plb, stride_plh, GROUP, RB, SPLIT, mma)
        if INT4:
            _store(o_hi, m_i, l_i, seq, split, kv_head, out_ptr + RB, part_out_ptr + RB, part_lse_ptr, stride_ob,
                   stride_oh, stride_pob, stride_poh, stride_pos, stride_plb, stride_plh, GROUP, RB, SPLIT, mma)

    @gluon.jit
    def _store(acc, m_i, l_i, seq, split, kv_head, out_ptr, part_out_ptr, part_lse_ptr, stride_ob, stride_oh,
               stride_pob, stride_poh, stride_pos, stride_plb, stride_plh, GROUP: gl.constexpr, RB: gl.constexpr,
               SPLIT: gl.constexpr, mma: gl.constexpr):
        """Rows ``< GROUP`` of an ``[16, RB]`` accumulator, normalised, at the physical dims of its
        columns (:func:`kernels.decode.rdq_layouts.v_physical_byte`); or a split's partial and base-2 lse
        (zeros and -inf for a split that saw no token: zero weight in the merge)."""
        has_tokens = l_i > 0.0
        out = acc * gl.expand_dims(1.0 / gl.where(has_tokens, l_i, 1.0), 1)  # a reciprocal per head
        rows = gl.arange(0, _ROWS, layout=gl.SliceLayout(1, mma))
        cols = output_dims(gl.arange(0, RB, layout=gl.SliceLayout(0, mma)), RB)
        heads = kv_head * GROUP + rows
        row_ok = gl.expand_dims(rows < GROUP, 1)
        if SPLIT:
            po = (part_out_ptr + seq.to(gl.int64) * stride_pob + gl.expand_dims(heads * stride_poh, 1)
                  + split * stride_pos + gl.expand_dims(cols, 0))
            gl.store(po, out.to(part_out_ptr.dtype.element_ty), mask=row_ok)
            lse = gl.where(has_tokens, m_i + gl.log2(gl.where(has_tokens, l_i, 1.0)), float("-inf"))
            pl = part_lse_ptr + seq.to(gl.int64) * stride_plb + heads * stride_plh + split
            gl.store(pl, lse, mask=rows < GROUP)
        else:
            o = out_ptr + seq.to(gl.int64) * stride_ob + gl.expand_dims(heads * stride_oh, 1) + gl.expand_dims(cols, 0)
            gl.store(o, out.to(out_ptr.dtype.element_ty), mask=row_ok)


# Eager calls are host-bound at batch 1: the Gluon JIT's per-call binding was 60.7 us on the H200 host.
_launch_rdq_kernel = DirectLauncher(_rdq_decode_kernel) if _HAVE_GLUON else None


@functools.lru_cache(maxsize=64)
def tile_layouts(block_n: int, head_dim: int, fmt: str) -> tuple:
    """The K and V code tiles' register layouts (``gl.DistributedLinearLayout``) for one warp;
    cached: building them costs ~24 us of Python, on every call's path."""
    rb = head_dim // 2 if fmt == "int4" else head_dim
    return (gl.DistributedLinearLayout(**k_tile_layout_bases(block_n, rb)),
            gl.DistributedLinearLayout(**v_tile_layout_bases(block_n, rb)))


@functools.lru_cache(maxsize=64)
def word_layouts(block_n: int, head_dim: int, fmt: str) -> tuple:
    """The K and V code tiles as 32-bit words (``reg_prefetch``), each lane's words the bytes
    it holds in :func:`tile_layouts`."""
    rb = head_dim // 2 if fmt == "int4" else head_dim
    return (gl.DistributedLinearLayout(**word_layout_bases(k_tile_layout_bases(block_n, rb))),
            gl.DistributedLinearLayout(**word_layout_bases(v_tile_layout_bases(block_n, rb))))


@functools.lru_cache(maxsize=256)  # one dict per variant: DirectLauncher keys on its identity
def _launch_kwargs(cfg: RdqConfig, *, fmt: str, group: int, head_dim: int, block_size: int, split: bool,
                   early_merge: bool) -> dict:
    """Compile-time values and launch options of one call variant."""
    return {**_constexprs(cfg, fmt=fmt, group=group, head_dim=head_dim, block_size=block_size, split=split,
                          early_merge=early_merge), **_options(cfg)}


def _constexprs(cfg: RdqConfig, *, fmt: str, group: int, head_dim: int, block_size: int, split: bool,
                early_merge: bool = False) -> dict:
    """Compile-time values of one call: ``early_merge`` from :func:`kernels.decode.paged.pdl_merge`."""
    k_layout, v_layout = tile_layouts(cfg.block_n, head_dim, fmt)
    if cfg.swap_ab:
        swapped_heads(group)
    reg_prefetch = uses_register_prefetch(cfg, fmt, block_size)
    kw_layout, vw_layout = word_layouts(cfg.block_n, head_dim, fmt) if reg_prefetch else (None, None)
    return dict(INT4=fmt == "int4", GROUP=group, HEAD_DIM=head_dim, PAGE_SIZE=block_size, BLOCK_N=cfg.block_n,
                STAGES=cfg.num_stages, SPLIT=split, SWAP_AB=cfg.swap_ab,
                RING_SCALES=cfg.ring_scales and cfg.swap_ab and fmt == "int4" and not reg_prefetch,
                EARLY_MERGE_LAUNCH=early_merge, REG_PREFETCH=reg_prefetch,
                k_layout=k_layout, v_layout=v_layout, kw_layout=kw_layout, vw_layout=vw_layout,
                ring_layout=gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1, order=[1, 0]))


def _options(cfg: RdqConfig) -> dict:
    """Compile options of a config: one warp, and its register cap where it has one."""
    return {"num_warps": cfg.num_warps, **({"maxnreg": cfg.maxnreg} if cfg.maxnreg else {})}


def rdq_available() -> bool:
    """True where the kernel runs: Gluon, a CUDA device of capability 9.x, no interpreter."""
    return hopper_gluon_available()


# ----------------------------------------------------------------------------------------------
# Wrapper
# ----------------------------------------------------------------------------------------------


def _check_rdq_inputs(q, k, v, block_tables, seq_lens) -> str:
    """The KV format (``"int4"`` for Int4Pool pools, else ``"fp8"``) after every check (each
    error names the argument)."""
    if isinstance(k, Int4Pool) or isinstance(v, Int4Pool):
        check_int4_inputs(q, k, v, block_tables, seq_lens)
        fmt, n_kv_heads = "int4", k.data.shape[1]
    else:
        check_shapes(q, k, v, block_tables, seq_lens)
        check_strides(q, k, v, block_tables, seq_lens)
        if k.dtype != FP8_DTYPE or v.dtype != FP8_DTYPE:
            raise ValueError(f"k and v must be Int4Pool pools or {FP8_DTYPE} caches for the rdq decode kernel, "
                             f"got {k.dtype} and {v.dtype}")
        fmt, n_kv_heads = "fp8", k.shape[1]
    codes = (k.data, v.data) if fmt == "int4" else (k, v)
    check_16_byte_grid("rdq decode kernel", "k.data and v.data" if fmt == "int4" else "k and v", *codes)
    if q.shape[2] not in RDQ_HEAD_DIMS:
        raise ValueError(f"head_dim must be one of {RDQ_HEAD_DIMS} for the rdq decode kernel, got {q.shape[2]}")
    if q.shape[1] // n_kv_heads > MAX_RDQ_GROUP:
        raise ValueError(f"n_q_heads / n_kv_heads must be at most {MAX_RDQ_GROUP} for the rdq decode kernel, got "
                         f"{q.shape[1]} / {n_kv_heads} = {q.shape[1] // n_kv_heads}")
    if not rdq_available():
        raise ValueError("the rdq decode kernel needs Triton's Gluon and a CUDA device of capability 9.x")
    return fmt


def _pool_args(fmt: str, k, v, k_scale, v_scale, n_kv_heads: int, device) -> tuple:
    """``(k codes, v codes, k scales, v scales)`` as the kernel reads them: uint8 code pools;
    INT4 scale words ``[blocks, heads, page]`` int32, FP8 per-head fp32 scales."""
    if fmt == "int4":
        return k.data, v.data, scale_words("k", k), scale_words("v", v)
    return (k.view(torch.uint8), v.view(torch.uint8), fp8_scales("k_scale", k_scale, FP8_DTYPE, n_kv_heads, device),
            fp8_scales("v_scale", v_scale, FP8_DTYPE, n_kv_heads, device))


def partial_dtype(cfg: RdqConfig, fmt: str) -> torch.dtype:
    """The split partials' dtype: bf16 for INT4 with ``cfg.bf16_partials`` (its rounding, 2^-9 of
    a partial output, is a hundredth of INT4's own error), fp32 otherwise."""
    return torch.bfloat16 if cfg.bf16_partials and fmt == "int4" else torch.float32


def _kernel_args(q, kc, vc, ks, vs, block_tables, seq_lens, out, plan: SplitPlan, qk_scale: float,
                 partial_dtype: torch.dtype = torch.float32) -> SplitKernelArgs:
    part_out, part_lse, part_strides = split_buffers(plan, q, out, partial_dtype)
    scale_strides = ((*ks.stride()[:3], *vs.stride()[:3]) if ks.dim() == 3 else (0, 1, 0, 0, 1, 0))
    return SplitKernelArgs(inputs=(q, kc, vc, ks, vs, block_tables, seq_lens), out=out, part_out=part_out,
                           part_lse=part_lse, counters=None, qk_scale=qk_scale, num_splits=plan.num_splits,
                           strides=(q.stride(0), q.stride(1), *kc.stride()[:3], *vc.stride()[:3], *scale_strides,
                                    block_tables.stride(0), out.stride(0), out.stride(1), *part_strides))


def rdq_decode(
    q: torch.Tensor,
    k,
    v,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    *,
    k_scale: float | torch.Tensor | None = None,
    v_scale: float | torch.Tensor | None = None,
    sm_scale: float | None = None,
    num_splits: int | None = None,
    config: RdqConfig | None = None,
    validate: bool = True,
) -> torch.Tensor:
    """This module's kernel on INT4 or FP8 pools (arguments as
    :func:`kernels.decode.api.paged_decode_attention`, which is how callers reach it), with
    ``config`` an :class:`RdqConfig` (default ``RDQ_CONFIGS[0]``) and a default split count of the
    most that fit in one wave of ``config.per_sm`` programs per SM, or of as many as an SM holds
    (:func:`kernels.decode.config.single_wave_splits`). Refuses, before any launch: head dims
    other than 64/128, more than 16 query heads per KV head, scales for INT4 pools, a foreign
    config, no Gluon-capable GPU.
    """
    cfg, fmt, plan, out, pools, constexprs = _prepare(q, k, v, block_tables, seq_lens, k_scale, v_scale,
                                                      num_splits, config, validate)
    args = _kernel_args(q, *pools, block_tables, seq_lens, out, plan,
                        check_call_options(sm_scale, num_splits, q.shape[2]) * LOG2_E, partial_dtype(cfg, fmt))
    _launch_rdq_kernel(plan.grid, args.values(), constexprs)
    if plan.split:
        merge_splits(args.part_out, args.part_lse, out, pdl=constexprs["EARLY_MERGE_LAUNCH"])
    return out


def rdq_plan(q: torch.Tensor, k, v, block_tables: torch.Tensor, seq_lens: torch.Tensor, *,
             config: RdqConfig | None = None) -> tuple[int, int]:
    """``(num_splits, resident programs per SM)`` that :func:`rdq_decode` would use for this
    call with its default split count (the kernel is compiled, nothing is launched)."""
    plan, resident = _prepare(q, k, v, block_tables, seq_lens, None, None, None, config, False, plan_only=True)
    return plan.num_splits, resident


def _prepare(q, k, v, block_tables, seq_lens, k_scale, v_scale, num_splits, config, validate: bool, *,
             plan_only: bool = False) -> tuple:
    """Checks, the pools as the kernel reads them, the split plan (at most one wave of
    ``config.per_sm`` or the compiled kernel's resident programs), the output and the
    compile-time values of one call."""
    if config is not None and not isinstance(config, RdqConfig):
        raise ValueError(f"config must be an RdqConfig, got {type(config).__name__}")
    tensors = (k.data, k.scales, v.data, v.scales) if isinstance(k, Int4Pool) and isinstance(v, Int4Pool) else (k, v)
    sig = signature(q, *tensors, block_tables, seq_lens)
    key = None if sig is None else ("rdq", *sig)
    fmt = "int4" if isinstance(k, Int4Pool) else "fp8"
    checked_once(key, lambda: _check_rdq_inputs(q, k, v, block_tables, seq_lens))
    if fmt == "int4" and (k_scale is not None or v_scale is not None):
        raise ValueError("k_scale and v_scale are for FP8 caches; INT4 pools carry their own scales")
    cfg = config or RDQ_CONFIGS[0]
    batch, n_q_heads, head_dim = q.shape
    codes = k.data if fmt == "int4" else k
    num_blocks, n_kv_heads, block_size, _ = codes.shape
    check_call_options(None, num_splits, head_dim)
    pools = _pool_args(fmt, k, v, k_scale, v_scale, n_kv_heads, q.device)
    if validate:
        check_values(block_tables, seq_lens, num_blocks, block_size)
    max_len = block_tables.shape[1] * block_size  # upper bound, known without a host sync
    out = torch.empty_like(q)
    shape = dict(fmt=fmt, group=n_q_heads // n_kv_heads, head_dim=head_dim, block_size=block_size)
    plan, resident = planned_split(
        (key, cfg), batch, n_kv_heads, max_len, q.device, num_splits, cfg.block_n, 1,  # waves: unused, one wave
        lambda trial: _rdq_decode_kernel.warmup(
            *_kernel_args(q, *pools, block_tables, seq_lens, out, trial, 1.0, partial_dtype(cfg, fmt)).values(),
            grid=trial.grid,
            **_launch_kwargs(cfg, **shape, split=True, early_merge=pdl_merge(cfg, True, q.device))),
        single_wave=True, single_wave_per_sm=cfg.per_sm)
    if plan_only:
        return plan, resident
    return cfg, fmt, plan, out, pools, _launch_kwargs(cfg, **shape, split=plan.split,
                                                      early_merge=pdl_merge(cfg, plan.split, q.device))

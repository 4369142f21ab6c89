"""The swapped product of the register-dequant decode kernel (:mod:`kernels.decode.rdq`,
``RdqConfig(swap_ab=True)``): query heads as the MMA's N = 8 instead of its M = 16.

With GQA 4 the row design pads 12 of the MMA's 16 rows: three quarters of its ``mma.sync``,
of its ``[16, D]`` fp32 output accumulator and of its ``[16, D]`` fp16 query fragment are
zeros. Transposing both products puts the heads on the 8-wide side:

* ``S^T = K Q^T``: A = the dequantised K tile ``[tokens, dims]`` (16 tokens per m-tile), B =
  ``Q^T [dims, heads]`` (loaded once: 16 registers at d 128, not 32), C = ``S^T [tokens, heads]``.
* ``O^T += V^T P^T``: A = ``V^T [dims, tokens]`` (the head dim as M: 8 m-tiles at d 128), B =
  ``P^T [tokens, heads]``, C = ``O^T [dims, heads]`` fp32 (32 registers, not 64).

Per 16 tokens that is 16 ``mma.sync`` instead of 32, and the softmax works on 8 heads instead
of 16 padded rows. Byte ownership does not change: the A fragment (lane ``(g, t)``: rows ``g, g
+ 8``, k columns ``2t, 2t+1, 2t+8, 2t+9``) is the transpose of the B fragment the row design
fills, so the code tiles, their copies and the dequantising PTX are the row design's, and the
dequantised tiles become A operands by a transpose of their logical index (register renaming).

What moves is P: S^T's C fragment gives lane ``(g, t)`` tokens ``g, g + 8`` of heads ``2t, 2t +
1``; the B operand wants tokens ``2t, 2t + 1, 2t + 8, 2t + 9`` of head ``g``. That is an 8 x 8
transpose of each half, one ``movmatrix.trans`` per half (:data:`kernels.decode.rdq_layouts.MOVMATRIX_PTX`)
and a relabelling (:func:`kernels.decode.rdq_layouts.p_transpose_reshape`). INT4's two scaled copies of
P (``p vs_lo``, ``p vs_hi``) take two each. The softmax runs down S^T's columns (axis 0): the
running max needs a reduction across the 8 lanes that share a head pair; the running sum is kept
per lane (``[tokens, heads]``) and reduced once after the loop. Per-token INT4 scales scale rows
of S^T and of P, the per-head ``alpha`` columns of O^T.

Limits: 1 to 16 query heads per KV head (9 to 16 use two n-tiles, N = 16, and no fewer MMAs than
the row design). Everything else as :mod:`kernels.decode.rdq`.
"""

from __future__ import annotations

from kernels.decode.rdq_tiles import _HAVE_GLUON
from kernels.decode.rdq_layouts import FP8_K_PTX, FP8_V_PTX, INT4_K_PTX, INT4_V_PTX, MOVMATRIX_PTX

if _HAVE_GLUON:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.ampere import async_copy, mma_v2

    from kernels.decode.rdq_tiles import (k_logical, load_code_words, load_scales, load_scales_at, next_codes,
                                   next_codes_and_scales, query_dims, scale_halves, tile_page,
                                   token_pairs, v_logical)

__all__ = ["attend_swapped", "swapped_heads"]


def swapped_heads(group: int) -> int:
    """The MMA's N in the swapped design: 8 query heads per KV head or fewer fill one n-tile,
    9 to 16 two."""
    if not 1 <= group <= 16:
        raise ValueError(f"the swapped rdq design takes 1 to 16 query heads per KV head, got {group}")
    return 8 if group <= 8 else 16


if _HAVE_GLUON:
    _INT4_K_ASM = gl.constexpr(INT4_K_PTX)
    _INT4_V_ASM = gl.constexpr(INT4_V_PTX)
    _FP8_K_ASM = gl.constexpr(FP8_K_PTX)
    _FP8_V_ASM = gl.constexpr(FP8_V_PTX)
    _MOVMATRIX_ASM = gl.constexpr(MOVMATRIX_PTX)

    @gluon.jit
    def _halves(r):
        """A tensor of 32-bit words holding two fp16 each -> their low and high halves as fp16."""
        return ((r & 0xFFFF).to(gl.int16).to(gl.float16, bitcast=True),
                (r >> 16).to(gl.int16).to(gl.float16, bitcast=True))

    @gluon.jit
    def _quad2(r0, r1, BLOCK_N: gl.constexpr, RB: gl.constexpr):
        """Two tensors of fp16-pair words (one per code word) -> ``[BLOCK_N, RB]`` fp16, word
        ``w``'s four values (``r0`` low, high, ``r1`` low, high) at columns ``4 w .. 4 w + 3``."""
        a, b = _halves(r0)
        c, d = _halves(r1)
        return _quad(a, b, c, d, BLOCK_N, RB)

    @gluon.jit
    def _quad(a, b, c, d, BLOCK_N: gl.constexpr, RB: gl.constexpr):
        """Four ``[BLOCK_N, RB / 4]`` tensors of one value per word -> ``[BLOCK_N, RB]``, the
        values of word ``w`` at columns ``4 w .. 4 w + 3`` in argument order."""
        # join's new dimension is the minor one: join(join(a, c), join(b, d))[.., k, n] is a, b, c, d
        # at 2 k + n.
        return gl.reshape(gl.join(gl.join(a, c), gl.join(b, d)), [BLOCK_N, RB])

    @gluon.jit
    def _int4_scores_words(kw, ks_lo, ks_hi, qt_lo, qt_hi, s_zero, a_op: gl.constexpr, BLOCK_N: gl.constexpr,
                           RB: gl.constexpr):
        """:func:`_int4_scores` from the K tile as code words."""
        h = gl.inline_asm_elementwise(_INT4_K_ASM, "=r,=r,=r,=r,r", [kw], dtype=(gl.int32,) * 4, is_pure=True,
                                      pack=1)
        k_lo = _quad2(h[0], h[1], BLOCK_N, RB)
        k_hi = _quad2(h[2], h[3], BLOCK_N, RB)
        s_lo = mma_v2(gl.convert_layout(gl.permute(k_logical(k_lo, BLOCK_N, RB), (1, 0)), a_op), qt_lo, s_zero)
        s_hi = mma_v2(gl.convert_layout(gl.permute(k_logical(k_hi, BLOCK_N, RB), (1, 0)), a_op), qt_hi, s_zero)
        return s_lo * gl.expand_dims(ks_lo, 1) + s_hi * gl.expand_dims(ks_hi, 1)

    @gluon.jit
    def _int4_pv_words(p, vw, vs_lo, vs_hi, o_lo, o_hi, a_op: gl.constexpr, b_op: gl.constexpr,
                       BLOCK_N: gl.constexpr, RB: gl.constexpr, HEADS: gl.constexpr):
        """:func:`_int4_pv` from the V tile as code words."""
        even, odd = token_pairs(vw, BLOCK_N, RB // 4)
        h = gl.inline_asm_elementwise(_INT4_V_ASM, "=r,=r,=r,=r,=r,=r,=r,=r,r,r", [even, odd],
                                      dtype=(gl.int32,) * 8, is_pure=True, pack=1)
        x0 = _quad2(h[0], h[1], BLOCK_N // 2, RB)
        x1 = _quad2(h[2], h[3], BLOCK_N // 2, RB)
        x2 = _quad2(h[4], h[5], BLOCK_N // 2, RB)
        x3 = _quad2(h[6], h[7], BLOCK_N // 2, RB)
        pt_lo = _p_operand(p * gl.expand_dims(vs_lo, 1), BLOCK_N, HEADS, b_op)
        pt_hi = _p_operand(p * gl.expand_dims(vs_hi, 1), BLOCK_N, HEADS, b_op)
        o_lo = mma_v2(gl.convert_layout(gl.permute(v_logical(x0, x1, BLOCK_N, RB), (1, 0)), a_op), pt_lo, o_lo)
        o_hi = mma_v2(gl.convert_layout(gl.permute(v_logical(x2, x3, BLOCK_N, RB), (1, 0)), a_op), pt_hi, o_hi)
        return o_lo, o_hi

    @gluon.jit
    def _p_operand(p, BLOCK_N: gl.constexpr, HEADS: gl.constexpr, b_op: gl.constexpr):
        """``[BLOCK_N, HEADS]`` fp32 P in S^T's C layout -> the fp16 B operand of ``V^T P^T``.

        ``pack=2``: a C register holds heads ``2t, 2t + 1`` of one token, the two 16-bit values
        movmatrix moves as one. The reshape and permute are
        :func:`kernels.decode.rdq_layouts.p_transpose_reshape` (the final layout change is free)."""
        y = gl.inline_asm_elementwise(_MOVMATRIX_ASM, "=r,r", [p.to(gl.float16)], dtype=gl.float16, is_pure=True,
                                      pack=2)
        z = gl.permute(gl.reshape(y, [BLOCK_N // 16, 2, 8, HEADS // 8, 4, 2]), (0, 1, 4, 5, 3, 2))
        return gl.convert_layout(gl.reshape(z, [BLOCK_N, HEADS]), b_op)

    @gluon.jit
    def _query_t(q_ptrs, q_mask, q_scale, b_op: gl.constexpr):
        """One code half's ``Q^T [RB, HEADS]``, scaled and rounded once to fp16, as the B operand."""
        return gl.convert_layout((gl.load(q_ptrs, mask=q_mask, other=0.0).to(gl.float32) * q_scale).to(gl.float16),
                                 b_op)

    @gluon.jit
    def _int4_scores(kc, ks_lo, ks_hi, qt_lo, qt_hi, s_zero, a_op: gl.constexpr, BLOCK_N: gl.constexpr,
                     RB: gl.constexpr):
        """S^T ``[BLOCK_N, HEADS]`` of one INT4 tile (unmasked): both code halves dequantised into
        A operands, times ``Q^T``, each scaled by its tokens' scale (``ks_lo``, ``ks_hi``)."""
        k_lo, k_hi = gl.inline_asm_elementwise(_INT4_K_ASM, "=r,=r,=r,=r,r", [kc], dtype=(gl.float16, gl.float16),
                                               is_pure=True, pack=4)
        s_lo = mma_v2(gl.convert_layout(gl.permute(k_logical(k_lo, BLOCK_N, RB), (1, 0)), a_op), qt_lo, s_zero)
        s_hi = mma_v2(gl.convert_layout(gl.permute(k_logical(k_hi, BLOCK_N, RB), (1, 0)), a_op), qt_hi, s_zero)
        return s_lo * gl.expand_dims(ks_lo, 1) + s_hi * gl.expand_dims(ks_hi, 1)

    @gluon.jit
    def _int4_pv(p, vc, vs_lo, vs_hi, o_lo, o_hi, a_op: gl.constexpr, b_op: gl.constexpr, BLOCK_N: gl.constexpr,
                 RB: gl.constexpr, HEADS: gl.constexpr):
        """``O^T += V^T P^T`` for one INT4 tile, both halves: V's codes dequantised into A operands,
        P scaled per token by each half's scale (``vs_lo``, ``vs_hi``)."""
        even, odd = token_pairs(vc, BLOCK_N, RB)
        x0, x1, x2, x3 = gl.inline_asm_elementwise(
            _INT4_V_ASM, "=r,=r,=r,=r,=r,=r,=r,=r,r,r", [even, odd],
            dtype=(gl.float16, gl.float16, gl.float16, gl.float16), is_pure=True, pack=4)
        pt_lo = _p_operand(p * gl.expand_dims(vs_lo, 1), BLOCK_N, HEADS, b_op)
        pt_hi = _p_operand(p * gl.expand_dims(vs_hi, 1), BLOCK_N, HEADS, b_op)
        o_lo = mma_v2(gl.convert_layout(gl.permute(v_logical(x0, x1, BLOCK_N, RB), (1, 0)), a_op), pt_lo, o_lo)
        o_hi = mma_v2(gl.convert_layout(gl.permute(v_logical(x2, x3, BLOCK_N, RB), (1, 0)), a_op), pt_hi, o_hi)
        return o_lo, o_hi

    @gluon.jit
    def _softmax_step(s, rows, left, m_i, l_acc, o_lo, o_hi):
        """One tile's online-softmax step on S^T (rows ``>= left`` masked): P, and the running
        max, per-lane sums and accumulators, rescaled only when some head's max grew (a
        warp-uniform branch; otherwise alpha is exactly 1, and past the first tiles of a long
        sequence that is rare: the rescale is the O^T accumulators' whole size in FMULs)."""
        s = gl.where(gl.expand_dims(rows < left, 1), s, float("-inf"))
        m_new = gl.maximum(m_i, gl.max(s, axis=0))
        p = gl.exp2(s - gl.expand_dims(m_new, 0))
        if gl.max(m_new - m_i, axis=0) > 0.0:
            alpha = gl.expand_dims(gl.exp2(m_i - m_new), 0)
            l_acc = l_acc * alpha
            o_lo = o_lo * alpha
            o_hi = o_hi * alpha
        return p, m_new, l_acc + p, o_lo, o_hi

    @gluon.jit
    def _store_swapped(acc, m_i, l_i, seq, split, kv_head, out_ptr, part_out_ptr, part_lse_ptr, stride_ob,
                       stride_oh, stride_pob, stride_poh, stride_pos, stride_plb, stride_plh, GROUP: gl.constexpr,
                       RB: gl.constexpr, HEADS: gl.constexpr, SPLIT: gl.constexpr, mma: gl.constexpr):
        """Columns ``< GROUP`` of an ``[RB, HEADS]`` ``O^T``, normalised, at the physical dims of
        its rows; or a split's partial and base-2 lse (zeros and -inf for a split that saw no
        token: zero weight in the merge)."""
        has_tokens = l_i > 0.0
        # One reciprocal per head, then a multiply per value: a full-range division per value
        # cost the INT4 kernel 72 more SASS instructions (1,320 against 1,248), a fifth of a tile.
        out = acc * gl.expand_dims(1.0 / gl.where(has_tokens, l_i, 1.0), 0)
        # Rows in physical head-dim order, then four consecutive dims of one head per lane: the
        # stores are 16-byte vectors, not scattered words. The physical dim of row n is
        # (n % 8) RB / 8 + n // 8 (kernels.decode.rdq_layouts.v_physical_byte): a relabelling of the
        # registers, and one layout change through shared memory.
        out = gl.reshape(gl.permute(gl.reshape(out, [RB // 8, 8, HEADS]), (1, 0, 2)), [RB, HEADS])
        lanes_d: gl.constexpr = RB // 4 if RB // 4 < 32 else 32
        store_layout: gl.constexpr = gl.BlockedLayout(size_per_thread=[4, 1], threads_per_warp=[lanes_d, 32 // lanes_d],
                                                      warps_per_cta=[1, 1], order=[0, 1])
        out = gl.convert_layout(out, store_layout)
        dims = gl.expand_dims(gl.arange(0, RB, layout=gl.SliceLayout(1, store_layout)), 1)
        cols = gl.arange(0, HEADS, layout=gl.SliceLayout(0, store_layout))
        heads = kv_head * GROUP + cols
        col_ok = gl.expand_dims(cols < GROUP, 0)
        l_i = gl.convert_layout(l_i, gl.SliceLayout(0, store_layout))
        m_i = gl.convert_layout(m_i, gl.SliceLayout(0, store_layout))
        has_tokens = l_i > 0.0
        if SPLIT:
            po = (part_out_ptr + seq.to(gl.int64) * stride_pob + gl.expand_dims(heads * stride_poh, 0)
                  + split * stride_pos + dims)
            gl.store(po, out.to(part_out_ptr.dtype.element_ty), mask=col_ok)
            lse = gl.where(has_tokens, m_i + gl.log2(gl.where(has_tokens, l_i, 1.0)), float("-inf"))
            gl.store(part_lse_ptr + seq.to(gl.int64) * stride_plb + heads * stride_plh + split, lse, mask=cols < GROUP)
        else:
            o = out_ptr + seq.to(gl.int64) * stride_ob + gl.expand_dims(heads * stride_oh, 0) + dims
            gl.store(o, out.to(out_ptr.dtype.element_ty), mask=col_ok)

    @gluon.jit
    def _word_pools(k_head_ptr, v_head_ptr, stride_kb, stride_kt, stride_vb, stride_vt):
        """A KV head's code pools as 32-bit words: ``(k, v, k block and token strides, v's)``, the
        strides in words (the pools are on the 16-byte grid: :func:`kernels.decode.checks.on_16_byte_grid`)."""
        return (k_head_ptr.to(gl.pointer_type(gl.int32), bitcast=True),
                v_head_ptr.to(gl.pointer_type(gl.int32), bitcast=True),
                stride_kb // 4, stride_kt // 4, stride_vb // 4, stride_vt // 4)

    @gluon.jit
    def _int4_tile_words(words, ks_head_ptr, vs_head_ptr, table_ptr, page, tile, end, kw_offs, vw_offs, stride_ksb,
                         stride_kst, stride_vsb, stride_vst, PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr,
                         token_layout: gl.constexpr):
        """One INT4 tile's K and V code words (``words``: :func:`_word_pools`) and scale words from
        its pool block ``page``, loaded into registers (scale words past ``end`` are 0)."""
        k_words, v_words, skb, skt, svb, svt = words
        kw = load_code_words(k_words, page, tile, kw_offs, skb, skt, PAGE_SIZE)
        vw = load_code_words(v_words, page, tile, vw_offs, svb, svt, PAGE_SIZE)
        ksw = load_scales_at(ks_head_ptr, table_ptr, page, tile, end, stride_ksb, stride_kst, PAGE_SIZE, BLOCK_N,
                             token_layout)
        vsw = load_scales_at(vs_head_ptr, table_ptr, page, tile, end, stride_vsb, stride_vst, PAGE_SIZE, BLOCK_N,
                             token_layout)
        return kw, vw, ksw, vsw

    @gluon.jit
    def _int4_first_words(words, ks_head_ptr, vs_head_ptr, table_ptr, kw_offs, vw_offs, start, end, stride_ksb,
                          stride_kst, stride_vsb, stride_vst, PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr,
                          token_layout: gl.constexpr):
        """The register-prefetch loop's start, issued before the query is loaded so that the two
        wait together: the first tile's code and scale words and the second tile's pool block."""
        page = tile_page(table_ptr, start, end, PAGE_SIZE)
        first = _int4_tile_words(words, ks_head_ptr, vs_head_ptr, table_ptr, page, start, end, kw_offs, vw_offs,
                                 stride_ksb, stride_kst, stride_vsb, stride_vst, PAGE_SIZE, BLOCK_N, token_layout)
        return first, tile_page(table_ptr, start + BLOCK_N, end, PAGE_SIZE)

    @gluon.jit
    def _int4_loop_registers(first, page_next, words, ks_head_ptr, vs_head_ptr, table_ptr, kw_offs, vw_offs, qt_lo,
                             qt_hi, m_i, l_acc, o_lo, o_hi, s_zero, rows, start, end, n_tiles, stride_ksb, stride_kst,
                             stride_vsb, stride_vst, a_op: gl.constexpr, b_op: gl.constexpr, RB: gl.constexpr,
                             HEADS: gl.constexpr, PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr,
                             token_layout: gl.constexpr):
        """The INT4 main loop with each next tile's codes and scales loaded into registers while
        this one is computed (no shared memory: no copy or read-back instructions, no barrier);
        ``first``, ``page_next``: :func:`_int4_first_words`. The block-table entry is read a tile
        earlier still, so those loads need not wait for it."""
        kw, vw, ksw, vsw = first
        for j in range(n_tiles):
            tile = start + j * BLOCK_N
            kw_n, vw_n, ksw_n, vsw_n = _int4_tile_words(words, ks_head_ptr, vs_head_ptr, table_ptr, page_next,
                                                        tile + BLOCK_N, end, kw_offs, vw_offs, stride_ksb, stride_kst,
                                                        stride_vsb, stride_vst, PAGE_SIZE, BLOCK_N, token_layout)
            page_next = tile_page(table_ptr, tile + 2 * BLOCK_N, end, PAGE_SIZE)
            m_i, l_acc, o_lo, o_hi = _int4_words_step(kw, vw, ksw, vsw, qt_lo, qt_hi, m_i, l_acc, o_lo, o_hi,
                                                      s_zero, rows, end - tile, a_op, b_op, RB, HEADS, BLOCK_N,
                                                      token_layout)
            kw, vw, ksw, vsw = kw_n, vw_n, ksw_n, vsw_n
        return m_i, l_acc, o_lo, o_hi

    @gluon.jit
    def _int4_words_step(kw, vw, ksw, vsw, qt_lo, qt_hi, m_i, l_acc, o_lo, o_hi, s_zero, rows, left,
                         a_op: gl.constexpr, b_op: gl.constexpr, RB: gl.constexpr, HEADS: gl.constexpr,
                         BLOCK_N: gl.constexpr, token_layout: gl.constexpr):
        """One INT4 tile from its code and scale words (``left``: tokens from the tile's start to
        the split's end): scores, the online-softmax step and p.V."""
        ks_lo, ks_hi = scale_halves(ksw, token_layout)
        vs_lo, vs_hi = scale_halves(vsw, token_layout)
        s = _int4_scores_words(kw, ks_lo, ks_hi, qt_lo, qt_hi, s_zero, a_op, BLOCK_N, RB)
        p, m_i, l_acc, o_lo, o_hi = _softmax_step(s, rows, left, m_i, l_acc, o_lo, o_hi)
        o_lo, o_hi = _int4_pv_words(p, vw, vs_lo, vs_hi, o_lo, o_hi, a_op, b_op, BLOCK_N, RB, HEADS)
        return m_i, l_acc, o_lo, o_hi

    @gluon.jit
    def attend_swapped(q_ptr, k_scales_ptr, v_scales_ptr, ks_head_ptr, vs_head_ptr, k_head_ptr, v_head_ptr, table_ptr,
                       k_ring, v_ring, k_offs, v_offs, out_ptr, part_out_ptr, part_lse_ptr, qk_scale, seq, split,
                       kv_head, start, end, n_tiles, stride_qb, stride_qh, stride_kb, stride_kt, stride_vb, stride_vt,
                       stride_ksb, stride_kst, stride_vsb, stride_vst, stride_ob, stride_oh, stride_pob, stride_poh,
                       stride_pos, stride_plb, stride_plh, INT4: gl.constexpr, GROUP: gl.constexpr, RB: gl.constexpr,
                       PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, SPLIT: gl.constexpr,
                       k_layout: gl.constexpr, v_layout: gl.constexpr, ks_ring, vs_ring, RING_SCALES: gl.constexpr,
                       kw_offs, vw_offs, REG_PREFETCH: gl.constexpr):
        """Query load, main loop and store of one program in the swapped design, after the
        kernel has started the ring's first ``STAGES - 1`` copies (arguments: the kernel's;
        ``RING_SCALES``: INT4 scale words from ``ks_ring``/``vs_ring``, copied with the codes)."""
        HEADS: gl.constexpr = 8 if GROUP <= 8 else 16
        mma: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[1, 1], instr_shape=[16, 8])
        a_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
        b_op: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=2)
        # Q^T is contiguous along dims (axis 0): 4-element vectors down the columns.
        q_layout: gl.constexpr = gl.BlockedLayout(size_per_thread=[4, 1], threads_per_warp=[16, 2],
                                                  warps_per_cta=[1, 1], order=[0, 1])
        token_layout: gl.constexpr = gl.SliceLayout(1, mma)  # S^T's rows
        head_layout: gl.constexpr = gl.SliceLayout(0, mma)  # S^T's and O^T's columns

        if REG_PREFETCH:
            words = _word_pools(k_head_ptr, v_head_ptr, stride_kb, stride_kt, stride_vb, stride_vt)
            first, page_next = _int4_first_words(words, ks_head_ptr, vs_head_ptr, table_ptr, kw_offs, vw_offs, start,
                                                 end, stride_ksb, stride_kst, stride_vsb, stride_vst, PAGE_SIZE,
                                                 BLOCK_N, token_layout)
        # Q^T in the head-dim order of the K operand, softmax scale (and FP8's k_scale) folded
        # in; columns >= GROUP are zeros.
        dims = query_dims(gl.arange(0, RB, layout=gl.SliceLayout(1, q_layout)), INT4, RB)
        cols = gl.arange(0, HEADS, layout=gl.SliceLayout(0, q_layout))
        q_ptrs = (q_ptr + seq.to(gl.int64) * stride_qb + gl.expand_dims((kv_head * GROUP + cols) * stride_qh, 0)
                  + gl.expand_dims(dims, 1))
        q_mask = gl.expand_dims(cols < GROUP, 0)
        if INT4:
            q_scale = qk_scale
        else:
            q_scale = qk_scale * gl.load(k_scales_ptr + kv_head)
        qt_lo = _query_t(q_ptrs, q_mask, q_scale, b_op)
        if INT4:
            qt_hi = _query_t(q_ptrs + RB, q_mask, q_scale, b_op)

        m_i = gl.full([HEADS], float("-inf"), gl.float32, layout=head_layout)
        l_acc = gl.zeros([BLOCK_N, HEADS], gl.float32, mma)  # per-lane partial sums, reduced after the loop
        o_lo = gl.zeros([RB, HEADS], gl.float32, mma)
        o_hi = gl.zeros([RB, HEADS], gl.float32, mma)
        s_zero = gl.zeros([BLOCK_N, HEADS], gl.float32, mma)
        rows = gl.arange(0, BLOCK_N, layout=token_layout)
        slot = 0  # ring slot of tile j
        if REG_PREFETCH:
            m_i, l_acc, o_lo, o_hi = _int4_loop_registers(
                first, page_next, words, ks_head_ptr, vs_head_ptr, table_ptr, kw_offs, vw_offs, qt_lo, qt_hi, m_i,
                l_acc, o_lo, o_hi, s_zero, rows, start, end, n_tiles, stride_ksb, stride_kst, stride_vsb,
                stride_vst, a_op, b_op, RB, HEADS, PAGE_SIZE, BLOCK_N, token_layout)
        else:
            for j in range(n_tiles):
                tile = start + j * BLOCK_N
                if RING_SCALES:
                    kc, vc, ks_words, vs_words, slot = next_codes_and_scales(
                        k_head_ptr, v_head_ptr, ks_head_ptr, vs_head_ptr, table_ptr, k_ring, v_ring, ks_ring,
                        vs_ring, tile, end, slot, k_offs, v_offs, stride_kb, stride_kt, stride_vb, stride_vt,
                        stride_ksb, stride_kst, stride_vsb, stride_vst, PAGE_SIZE, BLOCK_N, STAGES, k_layout,
                        v_layout, token_layout)
                else:
                    kc, vc, slot = next_codes(k_head_ptr, v_head_ptr, table_ptr, k_ring, v_ring, tile, end, slot,
                                              k_offs, v_offs, stride_kb, stride_kt, stride_vb, stride_vt, PAGE_SIZE,
                                              BLOCK_N, STAGES, INT4, k_layout, v_layout)
                if INT4:
                    if not RING_SCALES:
                        ks_words = load_scales(ks_head_ptr, table_ptr, tile, end, stride_ksb, stride_kst, PAGE_SIZE,
                                               BLOCK_N, token_layout)
                        vs_words = load_scales(vs_head_ptr, table_ptr, tile, end, stride_vsb, stride_vst, PAGE_SIZE,
                                               BLOCK_N, token_layout)
                    ks_lo, ks_hi = scale_halves(ks_words, token_layout)
                    vs_lo, vs_hi = scale_halves(vs_words, token_layout)
                    s = _int4_scores(kc, ks_lo, ks_hi, qt_lo, qt_hi, s_zero, a_op, BLOCK_N, RB)
                else:
                    k16 = gl.inline_asm_elementwise(_FP8_K_ASM, "=r,=r,r", [kc], dtype=gl.float16, is_pure=True,
                                                    pack=4)
                    s = mma_v2(gl.convert_layout(gl.permute(k_logical(k16, BLOCK_N, RB), (1, 0)), a_op), qt_lo,
                               s_zero)
                p, m_i, l_acc, o_lo, o_hi = _softmax_step(s, rows, end - tile, m_i, l_acc, o_lo, o_hi)
                if INT4:
                    o_lo, o_hi = _int4_pv(p, vc, vs_lo, vs_hi, o_lo, o_hi, a_op, b_op, BLOCK_N, RB, HEADS)
                else:
                    even, odd = token_pairs(vc, BLOCK_N, RB)
                    x0, x1 = gl.inline_asm_elementwise(_FP8_V_ASM, "=r,=r,=r,=r,r,r", [even, odd],
                                                       dtype=(gl.float16, gl.float16), is_pure=True, pack=4)
                    o_lo = mma_v2(gl.convert_layout(gl.permute(v_logical(x0, x1, BLOCK_N, RB), (1, 0)), a_op),
                                  _p_operand(p, BLOCK_N, HEADS, b_op), o_lo)

        async_copy.wait_group(0)  # no copy may still target shared memory when the program exits
        l_i = gl.sum(l_acc, axis=0)
        if not INT4:
            o_lo = o_lo * gl.load(v_scales_ptr + kv_head)
        _store_swapped(o_lo, m_i, l_i, seq, split, kv_head, out_ptr, part_out_ptr, part_lse_ptr, stride_ob,
                       stride_oh, stride_pob, stride_poh, stride_pos, stride_plb, stride_plh, GROUP, RB, HEADS,
                       SPLIT, mma)
        if INT4:
            _store_swapped(o_hi, m_i, l_i, seq, split, kv_head, out_ptr + RB, part_out_ptr + RB, part_lse_ptr,
                           stride_ob, stride_oh, stride_pob, stride_poh, stride_pos, stride_plb, stride_plh, GROUP,
                           RB, HEADS, SPLIT, mma)

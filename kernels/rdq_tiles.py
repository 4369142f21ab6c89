"""Gluon building blocks of the register-dequant decode kernel (:mod:`kernels.paged_decode_rdq`):
the copy ring's ``cp.async`` gathers, the INT4 scale loads, and the register-only reshapes that
turn dequantised code tiles into MMA operands (index maps: :mod:`kernels.rdq_layouts`).

Both products of that kernel use these: the row design (query heads as the MMA's M) takes the
dequantised K and V tiles as B operands, the swapped design (:mod:`kernels.rdq_swap`, heads as
the N) takes their transposes as A operands; the bytes each lane holds are the same in both.
"""

from __future__ import annotations

from kernels.paged_decode_gluon import _HAVE_GLUON

if _HAVE_GLUON:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.ampere import async_copy

__all__ = ["k_logical", "v_logical", "token_pairs", "scale_halves", "issue_codes", "load_scales", "query_dims",
           "output_dims"]

if _HAVE_GLUON:
    @gluon.jit
    def k_logical(x, BLOCK_N: gl.constexpr, RB: gl.constexpr):
        """``[BLOCK_N, RB]`` converted K values (lane ``t``'s slice, words ``s``, values ``m =
        2h + e``) -> the ``[RB, BLOCK_N]`` B operand with ``k = 16 s + 8 h + 2 t + e``
        (:func:`kernels.rdq_layouts.k_physical_byte`)."""
        x = gl.reshape(x, [BLOCK_N, 4, RB // 16, 2, 2])
        return gl.reshape(gl.permute(x, (2, 3, 1, 4, 0)), [RB, BLOCK_N])

    @gluon.jit
    def v_logical(x0, x1, BLOCK_N: gl.constexpr, RB: gl.constexpr):
        """Two ``[BLOCK_N / 2, RB]`` converted V halves (``x0``: bytes 0-1 of each word, ``x1``:
        2-3; value ``m`` of a word is token ``2 n2 + (m & 1)``, byte ``m >> 1``) -> the ``[BLOCK_N,
        RB]`` B operand with column ``n = 8 ((w0 2 + q) 2 + bb) + wg``
        (:func:`kernels.rdq_layouts.v_physical_byte`)."""
        x = gl.reshape(gl.join(x0, x1), [BLOCK_N // 2, 8, RB // 32, 2, 2, 2])
        return gl.reshape(gl.permute(x, (0, 4, 2, 5, 3, 1)), [BLOCK_N, RB])

    @gluon.jit
    def token_pairs(codes, BLOCK_N: gl.constexpr, RB: gl.constexpr):
        """A V code tile's even and odd tokens as two ``[BLOCK_N / 2, RB]`` tiles (same lanes)."""
        pairs = gl.permute(gl.reshape(codes, [BLOCK_N // 2, 2, RB]), (0, 2, 1))
        return gl.split(pairs)

    @gluon.jit
    def scale_halves(words, layout: gl.constexpr):
        """A token's two fp16 INT4 scales from one 32-bit word (low half, high half), as fp32."""
        lo = (words & 0xFFFF).to(gl.int16).to(gl.float16, bitcast=True).to(gl.float32)
        hi = (words >> 16).to(gl.int16).to(gl.float16, bitcast=True).to(gl.float32)
        return lo, hi

    @gluon.jit
    def _tile_rows(table_ptr, tile_start, end, PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr,
                   layout: gl.constexpr):
        """``(pool block, slot in block, live)`` of each token of a tile, in a slice ``layout``.
        Tiles are aligned to BLOCK_N, so with pages of at least BLOCK_N tokens one table entry
        serves the whole tile (one scalar load instead of one per token)."""
        offs_n = tile_start + gl.arange(0, BLOCK_N, layout=layout)
        live = offs_n < end
        if PAGE_SIZE >= BLOCK_N:
            page = gl.load(table_ptr + tile_start // PAGE_SIZE, mask=tile_start < end, other=0)
            pages = gl.full([BLOCK_N], 0, gl.int32, layout) + page
        else:
            pages = gl.load(table_ptr + offs_n // PAGE_SIZE, mask=live, other=0)
        return pages.to(gl.int64), (offs_n % PAGE_SIZE).to(gl.int64), live

    @gluon.jit
    def _copy_codes(head_ptr, table_ptr, ring, slot, tile_start, end, stride_b, stride_t, PAGE_SIZE: gl.constexpr,
                    BLOCK_N: gl.constexpr, RB: gl.constexpr, layout: gl.constexpr):
        """Start the cp.async copies of one ``[BLOCK_N, RB]`` code tile into ring slot ``slot``,
        each lane copying the bytes it will read in ``layout``. Rows past ``end`` are masked: the
        copy zero-fills them and reads nothing (unwritten slots, which may hold NaN bytes, are
        never read)."""
        pages, slots, live = _tile_rows(table_ptr, tile_start, end, PAGE_SIZE, BLOCK_N, gl.SliceLayout(1, layout))
        cols = gl.arange(0, RB, layout=gl.SliceLayout(0, layout))
        ptrs = head_ptr + gl.expand_dims(pages * stride_b + slots * stride_t, 1) + gl.expand_dims(cols, 0)
        async_copy.async_copy_global_to_shared(ring.index(slot), ptrs, mask=gl.expand_dims(live, 1))

    @gluon.jit
    def issue_codes(k_head_ptr, v_head_ptr, table_ptr, k_ring, v_ring, tile_start, end, slot, stride_kb, stride_kt,
                     stride_vb, stride_vt, PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr, RB: gl.constexpr,
                     k_layout: gl.constexpr, v_layout: gl.constexpr):
        """One tile's K and V code copies as one commit group."""
        _copy_codes(k_head_ptr, table_ptr, k_ring, slot, tile_start, end, stride_kb, stride_kt, PAGE_SIZE, BLOCK_N,
                    RB, k_layout)
        _copy_codes(v_head_ptr, table_ptr, v_ring, slot, tile_start, end, stride_vb, stride_vt, PAGE_SIZE, BLOCK_N,
                    RB, v_layout)
        async_copy.commit_group()

    @gluon.jit
    def load_scales(head_ptr, table_ptr, tile_start, end, stride_b, stride_t, PAGE_SIZE: gl.constexpr,
                     BLOCK_N: gl.constexpr, layout: gl.constexpr):
        """The INT4 scale words of a tile's tokens (0 past ``end``), in ``layout`` (S's columns)."""
        pages, slots, live = _tile_rows(table_ptr, tile_start, end, PAGE_SIZE, BLOCK_N, layout)
        return gl.load(head_ptr + pages * stride_b + slots * stride_t, mask=live, other=0)

    @gluon.jit
    def query_dims(k, INT4: gl.constexpr, RB: gl.constexpr):
        """Physical head dim (within a code half) of logical q.k index ``k``: the kernel's copy
        of :func:`kernels.rdq_layouts.k_physical_byte` (INT4 values come out as bytes 0, 2, 1, 3
        of a word, FP8 in order)."""
        elem = 2 * ((k >> 3) & 1) + (k & 1)
        if INT4:
            elem_byte = (elem >> 1) + 2 * (elem & 1)
        else:
            elem_byte = elem
        return ((k >> 1) & 3) * (RB // 4) + 4 * (k >> 4) + elem_byte

    @gluon.jit
    def output_dims(n, RB: gl.constexpr):
        """Physical head dim (within a code half) of logical p.V output index ``n``: the kernel's
        copy of :func:`kernels.rdq_layouts.v_physical_byte`."""
        return 4 * ((n & 7) * (RB // 32) + (n >> 5)) + 2 * ((n >> 4) & 1) + ((n >> 3) & 1)

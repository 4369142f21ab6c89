"""Gluon building blocks of the register-dequant decode kernel (:mod:`kernels.decode.rdq`):
the copy ring's ``cp.async`` gathers, the INT4 scale loads, and the register-only reshapes that
turn dequantised code tiles into MMA operands (index maps: :mod:`kernels.decode.rdq_layouts`).

Both products of that kernel use these: the row design (query heads as the MMA's M) takes the
dequantised K and V tiles as B operands, the swapped design (:mod:`kernels.decode.rdq_swap`, heads as
the N) takes their transposes as A operands; the bytes each lane holds are the same in both.
"""

from __future__ import annotations

from kernels.runtime import gluon_importable

_HAVE_GLUON = gluon_importable()
if _HAVE_GLUON:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.ampere import async_copy

__all__ = ["split_tiles", "k_logical", "v_logical", "token_pairs", "scale_halves", "issue_codes", "next_codes", "next_codes_and_scales",
           "load_scales", "code_offsets", "tile_page", "query_dims", "output_dims", "load_code_words",
           "load_scales_at"]

if _HAVE_GLUON:
    @gluon.jit
    def split_tiles(seq_lens_ptr, seq, split, num_splits, BLOCK_N: gl.constexpr):
        """``(start, end, n_tiles)``: tokens ``[start, end)`` of this split of sequence ``seq``, in
        whole tiles so that only the sequence's last tile is ragged (the Triton kernel's split
        rule); ``n_tiles <= 0`` for a split past the sequence's end."""
        seq_len = gl.load(seq_lens_ptr + seq)
        tiles_per_split = gl.cdiv(gl.cdiv(seq_len, BLOCK_N), num_splits)
        start = split * tiles_per_split * BLOCK_N
        end = gl.minimum(start + tiles_per_split * BLOCK_N, seq_len)
        return start, end, gl.cdiv(end - start, BLOCK_N)

    @gluon.jit
    def k_logical(x, BLOCK_N: gl.constexpr, RB: gl.constexpr):
        """``[BLOCK_N, RB]`` converted K values (lane ``t``'s slice, words ``s``, values ``m =
        2h + e``) -> the ``[RB, BLOCK_N]`` B operand with ``k = 16 s + 8 h + 2 t + e``
        (:func:`kernels.decode.rdq_layouts.k_physical_byte`)."""
        x = gl.reshape(x, [BLOCK_N, 4, RB // 16, 2, 2])
        return gl.reshape(gl.permute(x, (2, 3, 1, 4, 0)), [RB, BLOCK_N])

    @gluon.jit
    def v_logical(x0, x1, BLOCK_N: gl.constexpr, RB: gl.constexpr):
        """Two ``[BLOCK_N / 2, RB]`` converted V halves (``x0``: bytes 0-1 of each word, ``x1``:
        2-3; value ``m`` of a word is token ``2 n2 + (m & 1)``, byte ``m >> 1``) -> the ``[BLOCK_N,
        RB]`` B operand with column ``n = 8 ((w0 2 + q) 2 + bb) + wg``
        (:func:`kernels.decode.rdq_layouts.v_physical_byte`)."""
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
    def code_offsets(stride_t, PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr, RB: gl.constexpr,
                     layout: gl.constexpr):
        """Loop-invariant int32 offsets (bytes) of a ``[BLOCK_N, RB]`` code tile's elements from the
        start of its first token's page slot, in ``layout``: ``(row % PAGE_SIZE) stride_t + col``.
        Tiles start at multiples of BLOCK_N, so row ``r`` of a tile is slot ``slot0 + r`` of one
        page (pages of at least BLOCK_N tokens) or slot ``r % PAGE_SIZE`` of its own page."""
        rows = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, layout))
        cols = gl.arange(0, RB, layout=gl.SliceLayout(0, layout))
        return gl.expand_dims((rows % PAGE_SIZE) * stride_t, 1) + gl.expand_dims(cols, 0)

    @gluon.jit
    def tile_page(table_ptr, tile_start, end, PAGE_SIZE: gl.constexpr):
        """Pool block of a tile's first token as one scalar load (0 for a tile past ``end``: a
        real block, so copies from it stay in bounds; nothing of such a tile is read)."""
        return gl.load(table_ptr + tile_start // PAGE_SIZE, mask=tile_start < end, other=0)

    @gluon.jit
    def _row_pages(table_ptr, tile_start, end, PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr,
                   layout: gl.constexpr):
        """Pool block of each token of a tile (pages shorter than a tile), 0 past ``end``."""
        offs_n = tile_start + gl.arange(0, BLOCK_N, layout=layout)
        return gl.load(table_ptr + offs_n // PAGE_SIZE, mask=offs_n < end, other=0).to(gl.int64)

    @gluon.jit
    def _copy_codes(head_ptr, table_ptr, ring, slot, tile_start, end, page, offs, stride_b, stride_t,
                    PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr, ROW_MASK: gl.constexpr, layout: gl.constexpr):
        """Start the cp.async copies of one ``[BLOCK_N, RB]`` code tile into ring slot ``slot``, each
        lane copying the bytes it will read in ``layout``.

        Pages of at least a tile: the tile's base ``page stride_b + slot0 stride_t`` is one scalar
        64-bit value and lanes add their int32 ``offs``. Rows past ``end`` then lie in the same
        (allocated) page; with ``ROW_MASK`` off they are copied as they are (their scores are
        masked to -inf and their P is exactly 0, so only finite codes may be copied unmasked:
        INT4 codes, FP8 K, whose NaN scores the mask replaces), with it on they are zero-filled
        (FP8 V: e4m3 NaN bytes times p = 0 would still be NaN). A tile past ``end`` copies
        nothing. Shorter pages: one table entry per row, rows past ``end`` masked."""
        rows = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, layout))
        if PAGE_SIZE >= BLOCK_N:
            base = head_ptr + (page.to(gl.int64) * stride_b + (tile_start % PAGE_SIZE) * stride_t)
            ptrs = base + offs
            if ROW_MASK:
                live = rows < end - tile_start
            else:
                live = rows * 0 + tile_start < end
        else:
            pages = _row_pages(table_ptr, tile_start, end, PAGE_SIZE, BLOCK_N, gl.SliceLayout(1, layout))
            if BLOCK_N <= 32:
                ptrs = head_ptr + gl.expand_dims(pages * stride_b, 1) + offs
            else:
                # Recomputed from tile_start, so not held across the loop: the hoisted offsets of
                # a 64-token tile spill (rows design, INT4 64x2st, block 16).
                cols = gl.arange(0, offs.shape[1], layout=gl.SliceLayout(0, layout))
                slots = gl.expand_dims(((tile_start + rows) % PAGE_SIZE) * stride_t, 1) + gl.expand_dims(cols, 0)
                ptrs = head_ptr + gl.expand_dims(pages * stride_b, 1) + slots
            live = rows < end - tile_start
        async_copy.async_copy_global_to_shared(ring.index(slot), ptrs, mask=gl.expand_dims(live, 1))

    @gluon.jit
    def _scale_ptrs(head_ptr, table_ptr, tile_start, end, page, stride_b, stride_t, PAGE_SIZE: gl.constexpr,
                    BLOCK_N: gl.constexpr, layout: gl.constexpr):
        """Addresses of a tile's INT4 scale words in ``layout`` and whether each token is live
        (``page``: the tile's pool block, used with pages of at least a tile)."""
        rows = gl.arange(0, BLOCK_N, layout=layout)
        if PAGE_SIZE >= BLOCK_N:
            ptrs = head_ptr + (page.to(gl.int64) * stride_b + (tile_start % PAGE_SIZE) * stride_t) + rows * stride_t
        else:
            pages = _row_pages(table_ptr, tile_start, end, PAGE_SIZE, BLOCK_N, layout)
            ptrs = head_ptr + pages * stride_b + (rows % PAGE_SIZE) * stride_t
        return ptrs, rows < end - tile_start

    @gluon.jit
    def _copy_scales(head_ptr, table_ptr, ring, slot, tile_start, end, page, stride_b, stride_t,
                     PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr, layout: gl.constexpr):
        """Start the cp.async copies of a tile's INT4 scale words into ring slot ``slot`` (zeros
        past ``end``), each lane copying the words it reads back in ``layout``."""
        ptrs, live = _scale_ptrs(head_ptr, table_ptr, tile_start, end, page, stride_b, stride_t, PAGE_SIZE, BLOCK_N,
                                 layout)
        async_copy.async_copy_global_to_shared(ring.index(slot), ptrs, mask=live)

    @gluon.jit
    def issue_codes(k_head_ptr, v_head_ptr, table_ptr, k_ring, v_ring, tile_start, end, slot, k_offs, v_offs,
                    stride_kb, stride_kt, stride_vb, stride_vt, PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr,
                    INT4: gl.constexpr, k_layout: gl.constexpr, v_layout: gl.constexpr, ks_head_ptr=None,
                    vs_head_ptr=None, ks_ring=None, vs_ring=None, stride_ksb=0, stride_kst=0, stride_vsb=0,
                    stride_vst=0, RING_SCALES: gl.constexpr = False, scale_layout: gl.constexpr = None):
        """One tile's K and V code copies as one commit group (``k_offs``/``v_offs``:
        :func:`code_offsets`); one table load for both with pages of at least a tile. With
        ``RING_SCALES`` the tile's INT4 scale words ride in the same group into their own rings."""
        page = 0
        if PAGE_SIZE >= BLOCK_N:
            page = tile_page(table_ptr, tile_start, end, PAGE_SIZE)
        _copy_codes(k_head_ptr, table_ptr, k_ring, slot, tile_start, end, page, k_offs, stride_kb, stride_kt,
                    PAGE_SIZE, BLOCK_N, False, k_layout)
        _copy_codes(v_head_ptr, table_ptr, v_ring, slot, tile_start, end, page, v_offs, stride_vb, stride_vt,
                    PAGE_SIZE, BLOCK_N, not INT4, v_layout)
        if RING_SCALES:
            _copy_scales(ks_head_ptr, table_ptr, ks_ring, slot, tile_start, end, page, stride_ksb, stride_kst,
                         PAGE_SIZE, BLOCK_N, scale_layout)
            _copy_scales(vs_head_ptr, table_ptr, vs_ring, slot, tile_start, end, page, stride_vsb, stride_vst,
                         PAGE_SIZE, BLOCK_N, scale_layout)
        async_copy.commit_group()

    @gluon.jit
    def next_codes(k_head_ptr, v_head_ptr, table_ptr, k_ring, v_ring, tile_start, end, slot, k_offs, v_offs,
                   stride_kb, stride_kt, stride_vb, stride_vt, PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr,
                   STAGES: gl.constexpr, INT4: gl.constexpr, k_layout: gl.constexpr, v_layout: gl.constexpr):
        """The K and V code tiles of the tile at ``tile_start`` from ring slot ``slot``, and the next
        slot (``j % STAGES``, counted rather than divided). First the slot the previous tile used
        is refilled with the tile ``STAGES - 1`` ahead, then the wait leaves only the ``STAGES - 1``
        newest copy groups in flight: this tile has landed. Each lane reads back exactly the
        bytes it copied (copies and reads share the layouts), so no barrier is needed."""
        issue_codes(k_head_ptr, v_head_ptr, table_ptr, k_ring, v_ring, tile_start + (STAGES - 1) * BLOCK_N, end,
                    _refill_slot(slot, STAGES), k_offs, v_offs, stride_kb, stride_kt, stride_vb, stride_vt, PAGE_SIZE,
                    BLOCK_N, INT4, k_layout, v_layout)
        return _landed_codes(k_ring, v_ring, slot, STAGES, k_layout, v_layout)

    @gluon.jit
    def _refill_slot(slot, STAGES: gl.constexpr):
        """The ring slot the previous tile used: refilled with the tile ``STAGES - 1`` ahead."""
        return gl.where(slot == 0, STAGES - 1, slot - 1)

    @gluon.jit
    def _landed_codes(k_ring, v_ring, slot, STAGES: gl.constexpr, k_layout: gl.constexpr, v_layout: gl.constexpr):
        """Wait until only the ``STAGES - 1`` newest copy groups are in flight (the tile in
        ``slot`` has landed), then its K and V code tiles and the next slot."""
        async_copy.wait_group(STAGES - 1)
        kc = k_ring.index(slot).load(k_layout)
        vc = v_ring.index(slot).load(v_layout)
        return kc, vc, gl.where(slot == STAGES - 1, 0, slot + 1)

    @gluon.jit
    def next_codes_and_scales(k_head_ptr, v_head_ptr, ks_head_ptr, vs_head_ptr, table_ptr, k_ring, v_ring, ks_ring,
                              vs_ring, tile_start, end, slot, k_offs, v_offs, stride_kb, stride_kt, stride_vb,
                              stride_vt, stride_ksb, stride_kst, stride_vsb, stride_vst, PAGE_SIZE: gl.constexpr,
                              BLOCK_N: gl.constexpr, STAGES: gl.constexpr, k_layout: gl.constexpr,
                              v_layout: gl.constexpr, scale_layout: gl.constexpr):
        """:func:`next_codes` for INT4 with the scale words in rings of their own: the tile's
        code tiles, its K and V scale words (in ``scale_layout``, as each lane copied them) and
        the next slot; the scales arrive with the codes instead of by a load the loop waits on."""
        issue_codes(k_head_ptr, v_head_ptr, table_ptr, k_ring, v_ring, tile_start + (STAGES - 1) * BLOCK_N, end,
                    _refill_slot(slot, STAGES), k_offs, v_offs, stride_kb, stride_kt, stride_vb, stride_vt, PAGE_SIZE,
                    BLOCK_N, True, k_layout, v_layout, ks_head_ptr, vs_head_ptr, ks_ring, vs_ring, stride_ksb,
                    stride_kst, stride_vsb, stride_vst, True, scale_layout)
        kc, vc, next_slot = _landed_codes(k_ring, v_ring, slot, STAGES, k_layout, v_layout)
        return kc, vc, ks_ring.index(slot).load(scale_layout), vs_ring.index(slot).load(scale_layout), next_slot

    @gluon.jit
    def load_code_words(words_ptr, page, tile_start, offs, stride_b, stride_t, PAGE_SIZE: gl.constexpr):
        """One ``[BLOCK_N, RB / 4]`` code tile as 32-bit words, loaded straight into registers
        (pages of at least a tile; ``words_ptr`` a head's codes as int32, strides in words,
        ``offs`` :func:`code_offsets` in words). Rows past the sequence's end lie in its last
        (allocated) page and a tile past it reads block 0, so nothing is masked: INT4 codes are
        finite, and those rows' scores are masked to -inf and their P is exactly 0."""
        base = words_ptr + (page.to(gl.int64) * stride_b + (tile_start % PAGE_SIZE) * stride_t)
        return gl.load(base + offs)

    @gluon.jit
    def load_scales_at(head_ptr, table_ptr, page, tile_start, end, stride_b, stride_t, PAGE_SIZE: gl.constexpr,
                       BLOCK_N: gl.constexpr, layout: gl.constexpr):
        """:func:`load_scales` with the tile's pool block ``page`` already known (pages of at least
        a tile; shorter pages load each token's block from the table)."""
        ptrs, live = _scale_ptrs(head_ptr, table_ptr, tile_start, end, page, stride_b, stride_t, PAGE_SIZE, BLOCK_N,
                                 layout)
        return gl.load(ptrs, mask=live, other=0)

    @gluon.jit
    def load_scales(head_ptr, table_ptr, tile_start, end, stride_b, stride_t, PAGE_SIZE: gl.constexpr,
                    BLOCK_N: gl.constexpr, layout: gl.constexpr):
        """The INT4 scale words of a tile's tokens (0 past ``end``), in ``layout`` (S's columns)."""
        page = 0
        if PAGE_SIZE >= BLOCK_N:
            page = tile_page(table_ptr, tile_start, end, PAGE_SIZE)
        return load_scales_at(head_ptr, table_ptr, page, tile_start, end, stride_b, stride_t, PAGE_SIZE, BLOCK_N,
                              layout)

    @gluon.jit
    def query_dims(k, INT4: gl.constexpr, RB: gl.constexpr):
        """Physical head dim (within a code half) of logical q.k index ``k``: the kernel's copy
        of :func:`kernels.decode.rdq_layouts.k_physical_byte` (INT4 values come out as bytes 0, 2, 1, 3
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
        copy of :func:`kernels.decode.rdq_layouts.v_physical_byte`."""
        return 4 * ((n & 7) * (RB // 32) + (n >> 5)) + 2 * ((n >> 4) & 1) + ((n >> 3) & 1)

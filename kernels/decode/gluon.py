"""Paged decode attention for Hopper (sm_90) in Gluon, bf16/fp16 KV.

Same contract as :func:`kernels.decode.paged.paged_decode_attention` for 16-bit caches (layout
``[num_blocks, n_kv_heads, block_size, head_dim]``, one query token per sequence, split-KV with
the same merge kernel); what differs is how a program moves its bytes, which Gluon states
explicitly instead of leaving it to Triton's pipeliner:

* One program per (KV head, sequence, split), as in the Triton kernel. The ``GROUP`` query heads
  of the KV head are the rows of one warpgroup MMA (``wgmma``, M = 64; rows past ``GROUP`` are
  zero queries whose results are never stored). The MMA work is tiny next to the bytes: a
  64-token tile is 32 KiB of K and V and two 64 x 64 x 128 products.
* K and V tiles of ``BLOCK_N`` tokens are gathered page by page straight into a ring of
  ``num_stages`` shared-memory slots with ``cp.async`` (16-byte copies, one row per page slot, so
  any page size from 1 to 256 works), ``num_stages - 1`` tiles ahead of their use. Rows past
  the sequence's end are masked copies, which the hardware zero-fills: a slot that was never
  written (NaN in the pool) cannot reach the ``p @ v`` product, where 0 * NaN would be NaN.
* ``s = q @ k^T`` reads Q and K (K-major, the stored ``[tokens, head_dim]`` tile transposed as
  a view) from shared memory; ``acc += p @ v`` takes P from registers (wgmma's "RS" form) and V
  from shared memory as an MN-major B operand (allowed for 16-bit types). Nothing is staged
  through registers on its way to the tensor cores.
* Online softmax in base 2 with ``sm_scale * log2(e)`` folded into one multiply; a split writes
  its normalised partial output and base-2 log-sum-exp, and the Triton merge kernel
  (:func:`kernels.decode.paged.merge_splits`) combines them, on Hopper as a programmatic
  dependent launch.
* ``overlap=True`` (FlashAttention-3's intra-warpgroup pipelining, Shah et al. 2024): tile j's
  ``q @ k^T`` is issued before tile j-1's ``p @ v``, so the softmax of tile j runs on the CUDA
  cores while the tensor cores do the previous product.

Sources: Kwon et al. 2023 (PagedAttention); Dao, FlashAttention-2 (online softmax); the
FlashDecoding split-KV scheme; Shah et al., FlashAttention-3, 2024; Triton's Gluon tutorials
for the API.

Limits: Hopper only (compute capability 9.x), Triton with Gluon (3.6 or newer), no interpreter
path; q, K and V bf16 or fp16 (the same dtype); head_dim 64 or 128; 1 to 8 query heads per KV
head; block sizes powers of two 1..256; ``ValueError`` naming the argument otherwise.
"""

from __future__ import annotations

import dataclasses

import torch

from kernels.decode.checks import check_16_byte_grid, check_shapes, check_strides, check_values
from kernels.decode.launch import (
    SplitPlan,
    check_call_options,
    checked_once,
    planned_split,
    signature,
    split_buffers,
)
from kernels.decode.merge import merge_splits, pdl_merge
from kernels.reference.online_softmax import LOG2_E
from kernels.runtime import ensure_triton_backend, interpreter_active

ensure_triton_backend()  # before triton is imported: the interpreter is chosen at decoration

try:  # Gluon is experimental: absent on old Tritons, and its API moves between releases
    import triton
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.ampere import async_copy
    from triton.experimental.gluon.language.nvidia.hopper import warpgroup_mma, warpgroup_mma_wait

    _HAVE_GLUON = True
except ImportError:  # pragma: no cover - depends on the installed Triton
    _HAVE_GLUON = False

__all__ = ["GluonDecodeConfig", "GLUON_DECODE_CONFIGS", "GLUON_DECODE_HEAD_DIMS", "MAX_GLUON_GROUP",
           "gluon_decode_available", "gluon_paged_decode", "gluon_decode_plan", "compile_decode_for_sm90",
           "decode_sm90_build", "DecodeSm90Build"]

GLUON_DECODE_HEAD_DIMS = (64, 128)
MAX_GLUON_GROUP = 8  # query heads per KV head; the MMA has 64 rows, so more would fit, but 8 is tested
MMA_ROWS = 64  # wgmma's M for one warpgroup: the GROUP query rows, zero-padded
_KV_DTYPES = (torch.bfloat16, torch.float16)
_SMEM_LIMIT = 227 * 1024  # opt-in shared memory per block on sm_90


def gluon_decode_available() -> bool:
    """True when Gluon imports, a CUDA device of capability 9.x is present, and Triton is not
    interpreting (the Gluon kernel has no CPU path)."""
    if not _HAVE_GLUON or interpreter_active() or not torch.cuda.is_available():
        return False
    return torch.cuda.get_device_capability()[0] == 9


@dataclasses.dataclass(frozen=True, kw_only=True)
class GluonDecodeConfig:
    """Launch configuration of the Gluon decode kernel.

    block_n: tokens per tile (one K and one V tile of ``block_n x head_dim``); num_stages:
    shared-memory slots of the ring (``num_stages - 1`` tiles in flight ahead of the one in use);
    overlap: issue tile j's q.k^T before tile j-1's p.v (FlashAttention-3 pipelining); waves:
    whole waves of resident programs the split count aims at; pdl: launch the merge as a
    programmatic dependent launch. One warpgroup (4 warps) per program: the MMA's 64 rows.
    """

    block_n: int = 64
    num_stages: int = 3
    overlap: bool = False
    waves: int = 1
    pdl: bool = True

    def __post_init__(self) -> None:
        if self.block_n not in (16, 32, 64, 128):
            raise ValueError(f"block_n must be 16, 32, 64 or 128, got {self.block_n}")
        if not 2 <= self.num_stages <= 6:
            raise ValueError(f"num_stages must be in 2..6, got {self.num_stages}")
        if self.waves not in (1, 2):
            raise ValueError(f"waves must be 1 or 2, got {self.waves}")

    @property
    def num_warps(self) -> int:
        return 4

    def shared_bytes(self, head_dim: int, elem_bytes: int = 2) -> int:
        """Shared memory of the tiles: the padded query once, K and V per stage (bytes)."""
        return (MMA_ROWS + 2 * self.num_stages * self.block_n) * head_dim * elem_bytes

    @property
    def name(self) -> str:
        return f"gluon {self.block_n}x{self.num_stages}st{' ov' if self.overlap else ''}"


# Timed on the H200 by scripts/tuning/h200_gluon_decode_check.py (CUDA-graph medians); the
# first is the default: x the Triton kernel 64x2st 0.99-1.02, 64x3st ov 0.88-0.94, 64x3st 0.92-0.99,
# 32x3st 0.92-1.00, 128x2st 0.80-0.87 (a 32x4st overlapped variant returned NaN at block 1: dropped).
GLUON_DECODE_CONFIGS: tuple[GluonDecodeConfig, ...] = (
    GluonDecodeConfig(block_n=64, num_stages=2),
    GluonDecodeConfig(block_n=64, num_stages=3, overlap=True),
    GluonDecodeConfig(block_n=64, num_stages=3),
    GluonDecodeConfig(block_n=32, num_stages=3),
    GluonDecodeConfig(block_n=128, num_stages=2),
)


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
    def _load_pages(table_ptr, tile_start, end, PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr,
                    load_layout: gl.constexpr):
        """Pool block of each token of the tile at ``tile_start`` (int32, 0 past ``end``). Loaded
        one loop step before the copies that need it, so the table's latency is hidden behind
        that step's products instead of stalling the copy issue."""
        offs_n = tile_start + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, load_layout))
        return gl.load(table_ptr + offs_n // PAGE_SIZE, mask=offs_n < end, other=0)

    @gluon.jit
    def _issue_tile(k_head_ptr, v_head_ptr, pages, k_smem, v_smem, tile_start, end, slot,
                    stride_kb, stride_kt, stride_vb, stride_vt,
                    PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr,
                    load_layout: gl.constexpr):
        """Start the cp.async copies of tokens ``[tile_start, tile_start + BLOCK_N)`` of K and V
        (their blocks: ``pages``) into ring slot ``slot``, as one commit group. Rows at or past
        ``end`` are masked: the copy zero-fills them and reads nothing (a tile wholly past the
        end costs no HBM read)."""
        offs_n = tile_start + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, load_layout))
        offs_d = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, load_layout))
        # Widen before the stride multiply: a large pool's element offsets overflow int32.
        page = pages.to(gl.int64)
        in_page = (offs_n % PAGE_SIZE).to(gl.int64)
        mask = gl.expand_dims(offs_n < end, 1)
        cols = gl.expand_dims(offs_d, 0)
        k_ptrs = k_head_ptr + gl.expand_dims(page * stride_kb + in_page * stride_kt, 1) + cols
        v_ptrs = v_head_ptr + gl.expand_dims(page * stride_vb + in_page * stride_vt, 1) + cols
        async_copy.async_copy_global_to_shared(k_smem.index(slot), k_ptrs, mask=mask)
        async_copy.async_copy_global_to_shared(v_smem.index(slot), v_ptrs, mask=mask)
        async_copy.commit_group()

    @gluon.jit
    def _softmax_step(s, m_i, l_i, tile_start, end, qk_scale, BLOCK_N: gl.constexpr,
                      s_layout: gl.constexpr):
        """Online-softmax update with one raw score tile ``s`` [MMA_ROWS, BLOCK_N] (fp32).

        Returns ``(p, alpha, m_new, l_new)``. Every tile holds at least one live token, so
        ``m_new`` is finite and ``exp2(-inf - m_new)`` is 0, never NaN.
        """
        cols = tile_start + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        s = gl.where(gl.expand_dims(cols < end, 0), s * qk_scale, float("-inf"))
        m_new = gl.maximum(m_i, gl.max(s, axis=1))
        p = gl.exp2(s - gl.expand_dims(m_new, 1))
        alpha = gl.exp2(m_i - m_new)
        return p, alpha, m_new, l_i * alpha + gl.sum(p, axis=1)

    @gluon.jit
    def _gluon_decode_kernel(
        q_ptr,  # [batch, n_q_heads, HEAD_DIM] query, bf16/fp16
        k_cache_ptr,  # [num_blocks, n_kv_heads, PAGE_SIZE, HEAD_DIM] key pool
        v_cache_ptr,  # [num_blocks, n_kv_heads, PAGE_SIZE, HEAD_DIM] value pool
        block_tables_ptr,  # [batch, max_blocks_per_seq] int32 pool indices
        seq_lens_ptr,  # [batch] int32 tokens per sequence
        out_ptr,  # [batch, n_q_heads, HEAD_DIM] final output (written when not SPLIT)
        part_out_ptr,  # [batch, n_q_heads, num_splits, HEAD_DIM] fp32 partial outputs (SPLIT)
        part_lse_ptr,  # [batch, n_q_heads, num_splits] fp32 base-2 lse per split (SPLIT)
        qk_scale,  # sm_scale * log2(e): logits come out in base 2 for exp2
        num_splits,  # parts each sequence is cut into (grid dim 2)
        stride_qb, stride_qh, stride_kb, stride_kh, stride_kt, stride_vb, stride_vh, stride_vt,
        stride_btb, stride_ob, stride_oh, stride_pob, stride_poh, stride_pos, stride_plb, stride_plh,
        GROUP: gl.constexpr,  # query heads per KV head (<= MMA rows)
        HEAD_DIM: gl.constexpr,
        PAGE_SIZE: gl.constexpr,  # tokens per cache block
        BLOCK_N: gl.constexpr,  # tokens per tile (may span several pages or part of one)
        STAGES: gl.constexpr,  # shared-memory ring slots
        OVERLAP: gl.constexpr,  # issue q.k^T of tile j before p.v of tile j-1
        SPLIT: gl.constexpr,  # write partials + lse for the merge kernel instead of the output
        EARLY_MERGE_LAUNCH: gl.constexpr,  # let the merge kernel (a PDL dependent) start now
        num_warps: gl.constexpr,
    ):
        if EARLY_MERGE_LAUNCH:
            # griddepcontrol.launch_dependents: the merge's own griddepcontrol.wait still waits
            # for this whole grid to finish and flush, so where this sits is only a hint.
            gl.inline_asm_elementwise("griddepcontrol.launch_dependents; // $0", "=r", [], dtype=gl.int32,
                                      is_pure=False, pack=1)
        ROWS: gl.constexpr = 64
        # 16-byte (8-element) vectors along head_dim, the rest of a warp across tokens.
        load_layout: gl.constexpr = gl.BlockedLayout(
            size_per_thread=[1, 8], threads_per_warp=[32 * 8 // HEAD_DIM, HEAD_DIM // 8],
            warps_per_cta=[num_warps, 1], order=[1, 0])
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BLOCK_N, 16])
        o_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, HEAD_DIM, 16])
        # P as wgmma's register A operand: two 16-bit values per 32-bit register.
        p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
        dtype: gl.constexpr = k_cache_ptr.dtype.element_ty
        kv_smem_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, HEAD_DIM], dtype)
        q_smem_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([ROWS, HEAD_DIM], dtype)

        kv_head = gl.program_id(0)
        seq = gl.program_id(1)
        split = gl.program_id(2)
        start, end, n_tiles = split_tiles(seq_lens_ptr, seq, split, num_splits, BLOCK_N)

        k_head_ptr = k_cache_ptr + kv_head.to(gl.int64) * stride_kh
        v_head_ptr = v_cache_ptr + kv_head.to(gl.int64) * stride_vh
        table_ptr = block_tables_ptr + seq.to(gl.int64) * stride_btb
        k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], kv_smem_layout)
        v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], kv_smem_layout)
        # The ring fills first: its copies are in flight while the query is loaded.
        for t in gl.static_range(STAGES - 1):
            pages = _load_pages(table_ptr, start + t * BLOCK_N, end, PAGE_SIZE, BLOCK_N, load_layout)
            _issue_tile(k_head_ptr, v_head_ptr, pages, k_smem, v_smem, start + t * BLOCK_N, end, t, stride_kb,
                        stride_kt, stride_vb, stride_vt, PAGE_SIZE, BLOCK_N, HEAD_DIM, load_layout)
        # Blocks of the first tile the loop issues (tile STAGES - 1).
        pages = _load_pages(table_ptr, start + (STAGES - 1) * BLOCK_N, end, PAGE_SIZE, BLOCK_N, load_layout)

        # Query rows >= GROUP are zeros: finite scores, outputs never stored.
        offs_r = gl.arange(0, ROWS, layout=gl.SliceLayout(1, load_layout))
        offs_dq = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, load_layout))
        q_ptrs = (q_ptr + seq.to(gl.int64) * stride_qb + gl.expand_dims((kv_head * GROUP + offs_r) * stride_qh, 1)
                  + gl.expand_dims(offs_dq, 0))
        q = gl.load(q_ptrs, mask=gl.expand_dims(offs_r < GROUP, 1), other=0.0)
        q_smem = gl.allocate_shared_memory(dtype, [ROWS, HEAD_DIM], q_smem_layout, q)

        m_i = gl.full([ROWS], float("-inf"), gl.float32, layout=gl.SliceLayout(1, s_layout))
        l_i = gl.zeros([ROWS], gl.float32, layout=gl.SliceLayout(1, s_layout))
        acc = gl.zeros([ROWS, HEAD_DIM], gl.float32, o_layout)
        s_zero = gl.zeros([ROWS, BLOCK_N], gl.float32, s_layout)
        if OVERLAP:
            acc, m_i, l_i = _loop_overlapped(
                acc, m_i, l_i, q_smem, k_smem, v_smem, k_head_ptr, v_head_ptr, table_ptr, pages, start, end, n_tiles,
                qk_scale, s_zero, stride_kb, stride_kt, stride_vb, stride_vt,
                PAGE_SIZE, BLOCK_N, HEAD_DIM, STAGES, load_layout, s_layout, o_layout, p_layout)
        else:
            for j in range(n_tiles):
                slot = j % STAGES
                # Refill the slot tile j-1 used (its products retired last iteration), then wait
                # until only the STAGES-1 newest groups are in flight: tile j has landed.
                _issue_tile(k_head_ptr, v_head_ptr, pages, k_smem, v_smem, start + (j + STAGES - 1) * BLOCK_N,
                            end, (j + STAGES - 1) % STAGES, stride_kb, stride_kt, stride_vb, stride_vt,
                            PAGE_SIZE, BLOCK_N, HEAD_DIM, load_layout)
                pages = _load_pages(table_ptr, start + (j + STAGES) * BLOCK_N, end, PAGE_SIZE, BLOCK_N, load_layout)
                async_copy.wait_group(STAGES - 1)
                s = warpgroup_mma(q_smem, k_smem.index(slot).permute((1, 0)), s_zero, use_acc=False)
                p, alpha, m_i, l_i = _softmax_step(s, m_i, l_i, start + j * BLOCK_N, end, qk_scale, BLOCK_N,
                                                   s_layout)
                acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
                acc = warpgroup_mma(gl.convert_layout(p.to(dtype), p_layout), v_smem.index(slot), acc)
        async_copy.wait_group(0)  # no copy may still target shared memory when the program exits

        _store_result(acc, m_i, l_i, seq, split, kv_head, out_ptr, part_out_ptr, part_lse_ptr,
                      stride_ob, stride_oh, stride_pob, stride_poh, stride_pos, stride_plb, stride_plh,
                      GROUP, ROWS, HEAD_DIM, SPLIT, s_layout, o_layout)

    @gluon.jit
    def _loop_overlapped(acc, m_i, l_i, q_smem, k_smem, v_smem, k_head_ptr, v_head_ptr, table_ptr, pages,
                         start, end, n_tiles, qk_scale, s_zero, stride_kb, stride_kt, stride_vb, stride_vt,
                         PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr,
                         STAGES: gl.constexpr, load_layout: gl.constexpr, s_layout: gl.constexpr,
                         o_layout: gl.constexpr, p_layout: gl.constexpr):
        """The tile loop with FlashAttention-3's ordering. Tile 0's scores first, then per tile j::

            S_j = Q K_j^T          (async wgmma, issued first)
            O  += P_{j-1} V_{j-1}  (async wgmma, P in registers)
            wait for S_j; softmax of S_j on the CUDA cores while P.V runs
            wait for P.V; refill the slot of tile j-1; O *= alpha_j

        and the last tile's P.V after the loop. O is rescaled only after P_{j-1} V_{j-1} retired,
        keeping ``O = sum_t exp2(S_t - m) V_t`` over the tiles already multiplied. A slot is
        refilled once its P.V has retired, so STAGES-2 tiles are in flight ahead of tile j.
        """
        dtype: gl.constexpr = k_smem.dtype
        p = gl.zeros(s_zero.shape, dtype, p_layout)
        if n_tiles > 0:
            async_copy.wait_group(STAGES - 2)
            s = warpgroup_mma(q_smem, k_smem.index(0).permute((1, 0)), s_zero, use_acc=False)
            p_new, alpha, m_i, l_i = _softmax_step(s, m_i, l_i, start, end, qk_scale, BLOCK_N, s_layout)
            p = gl.convert_layout(p_new.to(dtype), p_layout)
            _issue_tile(k_head_ptr, v_head_ptr, pages, k_smem, v_smem, start + (STAGES - 1) * BLOCK_N, end,
                        STAGES - 1, stride_kb, stride_kt, stride_vb, stride_vt, PAGE_SIZE, BLOCK_N, HEAD_DIM,
                        load_layout)
            pages = _load_pages(table_ptr, start + STAGES * BLOCK_N, end, PAGE_SIZE, BLOCK_N, load_layout)
        for j in range(1, n_tiles):
            slot = j % STAGES
            prev = (j - 1) % STAGES
            async_copy.wait_group(STAGES - 2)  # tile j has landed; tiles j+1 .. j+STAGES-2 may not
            s_tok = warpgroup_mma(q_smem, k_smem.index(slot).permute((1, 0)), s_zero, use_acc=False,
                                  is_async=True)
            o_tok = warpgroup_mma(p, v_smem.index(prev), acc, is_async=True)
            # wgmma groups retire in order: one outstanding means S_j is done, P.V may still run.
            s = warpgroup_mma_wait(1, deps=[s_tok])
            p_new, alpha, m_i, l_i = _softmax_step(s, m_i, l_i, start + j * BLOCK_N, end, qk_scale, BLOCK_N,
                                                   s_layout)
            # p stays alive until its wgmma retires: it is that wgmma's A operand.
            acc, p = warpgroup_mma_wait(0, deps=[o_tok, p])
            _issue_tile(k_head_ptr, v_head_ptr, pages, k_smem, v_smem, start + (j + STAGES - 1) * BLOCK_N,
                        end, prev, stride_kb, stride_kt, stride_vb, stride_vt, PAGE_SIZE, BLOCK_N, HEAD_DIM,
                        load_layout)
            pages = _load_pages(table_ptr, start + (j + STAGES) * BLOCK_N, end, PAGE_SIZE, BLOCK_N, load_layout)
            acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
            p = gl.convert_layout(p_new.to(dtype), p_layout)
        if n_tiles > 0:
            acc = warpgroup_mma(p, v_smem.index((n_tiles - 1) % STAGES), acc)
        return acc, m_i, l_i

    @gluon.jit
    def _store_result(acc, m_i, l_i, seq, split, kv_head, out_ptr, part_out_ptr, part_lse_ptr,
                      stride_ob, stride_oh, stride_pob, stride_poh, stride_pos, stride_plb, stride_plh,
                      GROUP: gl.constexpr, ROWS: gl.constexpr, HEAD_DIM: gl.constexpr, SPLIT: gl.constexpr,
                      s_layout: gl.constexpr, o_layout: gl.constexpr):
        """Store rows ``< GROUP`` of the normalised output, or a split's partial and base-2 lse.
        A split that saw no token has ``l_i = 0``: zeros and lse = -inf (zero weight in the merge)."""
        has_tokens = l_i > 0.0
        l_o = gl.convert_layout(gl.where(has_tokens, l_i, 1.0), gl.SliceLayout(1, o_layout))
        out = acc / gl.expand_dims(l_o, 1)
        rows = gl.arange(0, ROWS, layout=gl.SliceLayout(1, o_layout))
        cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
        heads = kv_head * GROUP + rows
        row_ok = gl.expand_dims(rows < GROUP, 1)
        if SPLIT:
            po = (part_out_ptr + seq.to(gl.int64) * stride_pob + gl.expand_dims(heads * stride_poh, 1)
                  + split * stride_pos + gl.expand_dims(cols, 0))
            gl.store(po, out, mask=row_ok)
            lse = gl.where(has_tokens, m_i + gl.log2(gl.where(has_tokens, l_i, 1.0)), float("-inf"))
            rows_s = gl.arange(0, ROWS, layout=gl.SliceLayout(1, s_layout))
            pl = part_lse_ptr + seq.to(gl.int64) * stride_plb + (kv_head * GROUP + rows_s) * stride_plh + split
            gl.store(pl, lse, mask=rows_s < GROUP)
        else:
            o = out_ptr + seq.to(gl.int64) * stride_ob + gl.expand_dims(heads * stride_oh, 1) + gl.expand_dims(cols, 0)
            gl.store(o, out.to(out_ptr.dtype.element_ty), mask=row_ok)


# ----------------------------------------------------------------------------------------------
# Wrapper
# ----------------------------------------------------------------------------------------------


def _check_gluon_inputs(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> None:
    """What this kernel refuses beyond the shared checks (each error names the argument)."""
    if k_cache.dtype not in _KV_DTYPES:
        raise ValueError(f"k_cache dtype must be bfloat16 or float16 for the Gluon decode kernel, got {k_cache.dtype}")
    check_16_byte_grid("Gluon decode kernel", "k_cache and v_cache", k_cache, v_cache)
    head_dim = q.shape[2]
    if head_dim not in GLUON_DECODE_HEAD_DIMS:
        raise ValueError(f"head_dim must be one of {GLUON_DECODE_HEAD_DIMS} for the Gluon decode kernel, got {head_dim}")
    group = q.shape[1] // k_cache.shape[1]
    if group > MAX_GLUON_GROUP:
        raise ValueError(f"n_q_heads / n_kv_heads must be at most {MAX_GLUON_GROUP} for the Gluon decode kernel, "
                         f"got {q.shape[1]} / {k_cache.shape[1]} = {group}")
    if not gluon_decode_available():
        raise ValueError("the Gluon decode kernel needs Triton's Gluon and a CUDA device of capability 9.x")


def _kernel_args(q, k_cache, v_cache, block_tables, seq_lens, out, plan: SplitPlan, qk_scale: float) -> tuple:
    part_out, part_lse, part_strides = split_buffers(plan, q, out)
    return (q, k_cache, v_cache, block_tables, seq_lens, out, part_out, part_lse, qk_scale, plan.num_splits,
            q.stride(0), q.stride(1),
            k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
            v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
            block_tables.stride(0), out.stride(0), out.stride(1), *part_strides)


def _constexprs(cfg: GluonDecodeConfig, *, group: int, head_dim: int, block_size: int, split: bool,
                early_merge: bool) -> dict:
    return dict(GROUP=group, HEAD_DIM=head_dim, PAGE_SIZE=block_size, BLOCK_N=cfg.block_n, STAGES=cfg.num_stages,
                OVERLAP=cfg.overlap, SPLIT=split, EARLY_MERGE_LAUNCH=early_merge)


def gluon_paged_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    *,
    sm_scale: float | None = None,
    num_splits: int | None = None,
    config: GluonDecodeConfig | None = None,
    validate: bool = True,
) -> torch.Tensor:
    """Decode attention of one query token per sequence over a paged bf16/fp16 KV cache (Hopper).

    Parameters
    ----------
    q : Tensor [batch, n_q_heads, head_dim], bf16 or fp16, last dim contiguous
        The new token's query for every sequence; ``head_dim`` 64 or 128.
    k_cache, v_cache : Tensor [num_blocks, n_kv_heads, block_size, head_dim]
        The pool of KV blocks, q's dtype, last dim contiguous; ``block_size`` a power of two in
        1..256; ``n_q_heads = GROUP * n_kv_heads`` with ``1 <= GROUP <= 8``.
    block_tables : Tensor [batch, max_blocks_per_seq], int32
        Pool index of each sequence's ``j``-th block; entries past a sequence's last block are
        never read.
    seq_lens : Tensor [batch], int32
        Tokens per sequence, ``1 <= seq_lens[b] <= max_blocks_per_seq * block_size``.
    sm_scale : float, optional
        Softmax scale; default ``1 / sqrt(head_dim)``.
    num_splits : int, optional
        Parts each sequence is cut into (split-KV); default: whole waves of the programs an SM
        holds (:func:`kernels.decode.config.default_num_splits`).
    config : GluonDecodeConfig, optional
        Tile, ring depth and loop order; default ``GLUON_DECODE_CONFIGS[0]``.
    validate : bool
        Check table entries and lengths against the pool (one device-to-host sync).

    Returns
    -------
    Tensor [batch, n_q_heads, head_dim], dtype of ``q``

    Raises
    ------
    ValueError
        Inputs this kernel cannot take (FP8 caches, head_dim other than 64/128, more than 8
        query heads per KV head, anything :mod:`kernels.decode.checks` refuses), or no Gluon-capable
        GPU; before any launch.
    """
    cfg, plan, out, constexprs = _prepare(q, k_cache, v_cache, block_tables, seq_lens, num_splits, config, validate)
    args = _kernel_args(q, k_cache, v_cache, block_tables, seq_lens, out, plan,
                        check_call_options(sm_scale, num_splits, q.shape[2]) * LOG2_E)
    _gluon_decode_kernel[plan.grid](*args, **constexprs, num_warps=cfg.num_warps)
    if plan.split:
        merge_splits(args[6], args[7], out, pdl=constexprs["EARLY_MERGE_LAUNCH"])
    return out


def gluon_decode_plan(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
                      seq_lens: torch.Tensor, *, config: GluonDecodeConfig | None = None) -> tuple[int, int]:
    """``(num_splits, resident programs per SM)`` that :func:`gluon_paged_decode` would use for
    this call with its default split count (the kernel is compiled, nothing is launched)."""
    plan, resident = _prepare(q, k_cache, v_cache, block_tables, seq_lens, None, config, False, plan_only=True)
    return plan.num_splits, resident


def _prepare(q, k_cache, v_cache, block_tables, seq_lens, num_splits, config, validate: bool, *,
             plan_only: bool = False) -> tuple:
    """Checks, the split plan (whole waves of the compiled kernel's resident programs), the
    output and the compile-time values of one call."""
    if config is not None and not isinstance(config, GluonDecodeConfig):
        raise ValueError(f"config must be a GluonDecodeConfig, got {type(config).__name__}")
    sig = signature(q, k_cache, v_cache, block_tables, seq_lens)
    # Own cache key: a signature the Triton wrapper accepted (an FP8 cache, head_dim 256) may
    # still be one this kernel refuses.
    key = None if sig is None else ("gluon", *sig)
    checked_once(key, lambda: (check_shapes(q, k_cache, v_cache, block_tables, seq_lens),
                               check_strides(q, k_cache, v_cache, block_tables, seq_lens),
                               _check_gluon_inputs(q, k_cache, v_cache)))
    cfg = config or GLUON_DECODE_CONFIGS[0]
    batch, n_q_heads, head_dim = q.shape
    num_blocks, n_kv_heads, block_size, _ = k_cache.shape
    if cfg.shared_bytes(head_dim) > _SMEM_LIMIT:
        raise ValueError(f"config {cfg.name} needs {cfg.shared_bytes(head_dim)} B of shared memory at head_dim "
                         f"{head_dim}, more than the {_SMEM_LIMIT} B a block may use on sm_90")
    check_call_options(None, num_splits, head_dim)
    if validate:
        check_values(block_tables, seq_lens, num_blocks, block_size)
    max_len = block_tables.shape[1] * block_size  # upper bound, known without a host sync
    out = torch.empty_like(q)
    shape = dict(group=n_q_heads // n_kv_heads, head_dim=head_dim, block_size=block_size)
    plan, resident = planned_split(
        (key, cfg), batch, n_kv_heads, max_len, q.device, num_splits, cfg.block_n, cfg.waves,
        lambda trial: _gluon_decode_kernel.warmup(
            *_kernel_args(q, k_cache, v_cache, block_tables, seq_lens, out, trial, 1.0), grid=trial.grid,
            **_constexprs(cfg, **shape, split=True, early_merge=pdl_merge(cfg, True, q.device)),
            num_warps=cfg.num_warps))
    if plan_only:
        return plan, resident
    return cfg, plan, out, _constexprs(cfg, **shape, split=plan.split,
                                       early_merge=pdl_merge(cfg, plan.split, q.device))


# ----------------------------------------------------------------------------------------------
# Compile checks without a GPU
# ----------------------------------------------------------------------------------------------

# Arguments the JIT marks divisible by 16 when they are (every pool, table and buffer built here).
_POINTERS = ("q_ptr", "k_cache_ptr", "v_cache_ptr", "block_tables_ptr", "seq_lens_ptr", "out_ptr",
             "part_out_ptr", "part_lse_ptr")
_STRIDES = tuple(f"stride_{name}" for name in ("qb", "qh", "kb", "kh", "kt", "vb", "vh", "vt", "btb", "ob", "oh",
                                               "pob", "poh", "pos", "plb", "plh"))


def compile_decode_for_sm90(cfg: GluonDecodeConfig, *, head_dim: int = 128, group: int = 4, block_size: int = 16,
                            split: bool = True, dtype: str = "bf16"):
    """Compile the kernel for sm_90 without a GPU (Triton's bundled ptxas).

    Pointers and strides are marked divisible by 16, as the JIT marks them for the real
    launch when they are (every pool and table this project builds), so the compiled code is
    the one that runs. Returns Triton's ``CompiledKernel`` (``.asm``: ``ttgir``/``ptx``/``cubin``).
    """
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    elem = {"bf16": "bf16", "fp16": "fp16"}[dtype]
    types = {"q_ptr": f"*{elem}", "k_cache_ptr": f"*{elem}", "v_cache_ptr": f"*{elem}", "block_tables_ptr": "*i32",
             "seq_lens_ptr": "*i32", "out_ptr": f"*{elem}", "part_out_ptr": "*fp32", "part_lse_ptr": "*fp32",
             "qk_scale": "fp32", "num_splits": "i32", **{name: "i32" for name in _STRIDES}}
    constexprs = _constexprs(cfg, group=group, head_dim=head_dim, block_size=block_size, split=split,
                             early_merge=split and cfg.pdl)
    constexprs["num_warps"] = cfg.num_warps
    signature_ = {**types, **{name: "constexpr" for name in constexprs}}
    names = _gluon_decode_kernel.arg_names
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in _POINTERS + _STRIDES}
    src = GluonASTSource(_gluon_decode_kernel, signature_, constexprs=constexprs, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": cfg.num_warps})


@dataclasses.dataclass(frozen=True, kw_only=True)
class DecodeSm90Build:
    """What ptxas made of one configuration, and what its PTX does (no GPU needed)."""

    config: str
    head_dim: int
    block_size: int
    registers: int  # per thread
    spill_bytes: int  # local memory per thread (stack frame: spills); 0 means no spills
    shared_bytes: int  # dynamic shared memory per program
    wgmma: int  # wgmma.mma_async instructions in the PTX
    cp_async_16: int  # 16-byte cp.async copies (the K/V gathers)
    cp_async_narrow: int  # cp.async copies of fewer than 16 bytes
    byte_loads: int  # ld.global/ld.shared of single bytes (none expected for 16-bit KV)
    bar_sync: int  # CTA barriers
    resident_per_sm: int  # programs an SM holds (registers, shared memory, warps)


def decode_sm90_build(cfg: GluonDecodeConfig, *, head_dim: int = 128, block_size: int = 16,
                      group: int = 4, split: bool = True) -> DecodeSm90Build:
    """Compile for sm_90 and read registers and spills off the cubin with Triton's cuobjdump.

    Must run with ``TRITON_INTERPRET`` off (Gluon cannot compile the interpreter's objects).
    """
    import re

    from kernels.occupancy import cubin_resources, resident_programs

    kernel = compile_decode_for_sm90(cfg, head_dim=head_dim, block_size=block_size, group=group, split=split)
    cubin, ptx = kernel.asm["cubin"], kernel.asm["ptx"]
    registers, spill_bytes = cubin_resources(cubin)
    copies = [int(n, 0) for n in re.findall(
        r"cp\.async\.c[ga]\.shared\.global(?:\.L2::\d+B)?\s*\[[^\]]+\],\s*\[[^\]]+\],\s*(0x[0-9a-fA-F]+|\d+)", ptx)]
    shared = int(kernel.metadata.shared)
    return DecodeSm90Build(
        config=cfg.name, head_dim=head_dim, block_size=block_size, registers=registers,
        spill_bytes=spill_bytes, shared_bytes=shared,
        wgmma=ptx.count("wgmma.mma_async"), cp_async_16=sum(c == 16 for c in copies),
        cp_async_narrow=sum(c != 16 for c in copies),
        byte_loads=len(re.findall(r"ld\.(?:global|shared)(?:\.\w+)*\.[bsu]8\b", ptx)),
        bar_sync=len(re.findall(r"\bbar\.sync\b|\bbarrier\.sync\b", ptx)),
        resident_per_sm=resident_programs(registers_per_thread=registers, shared_bytes=shared,
                                          num_warps=cfg.num_warps))

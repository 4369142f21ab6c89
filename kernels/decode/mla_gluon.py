"""MLA paged decode for Hopper (sm_90) in Gluon: the absorbed form of :mod:`kernels.decode.mla`
with the work of one program split between two warpgroups, as FlashMLA does by hand.

At 128 query heads (DeepSeek-V3 on one GPU) the absorbed form does ~242 FLOPs per latent byte,
so the matmul rate bounds it, and the Triton kernel's ``[64 heads, 512]`` fp32 accumulator (128
registers a thread on 8 warps) leaves one warpgroup-wide schedule to Triton's pipeliner. Here a
program takes 64 heads of one sequence and one split of its tokens, 64 tokens (one TMA tile) at
a time, in three partitions::

    producer (1 warp)   Q's 9 column chunks once; then each tile's 9 chunks of 64 latent columns
                        (8 of ``c``, 1 of ``k_pe``) by TMA into a ring of STAGES slots
    scores   (4 warps)  S_j = Q K_j^T (9 async wgmmas), online softmax, P_j and alpha_j to
                        shared memory for the other warpgroup, then O[:, :256] += P_j V_j
    values   (4 warps)  O[:, 256:] = alpha_j * O[:, 256:] + P_j V_j, P_j read from shared memory

so each warpgroup holds a ``[64, 256]`` fp32 accumulator (128 registers) and S's 576-deep product
is done once. Per tile the scores warpgroup issues its P_j V_j and then S_{j+1} behind it, and
releases tile j's slot as soon as that P.V retires: with two 72 KiB slots (all that fits beside
Q's 72 KiB) the copy of tile j+2 then runs under tile j+1's work. Issuing S_j before the P.V of
tile j-1 instead (FlashAttention-3's overlap of softmax and P.V, as in
:mod:`kernels.prefill.flash_gluon`) holds each slot a tile longer, leaves the copy nothing to
overlap, and ran 21-25 % slower on the H200 (``docs/kernels/FAMILIES.md``).

A tile is one TMA box of 64 rows of the pool viewed as ``[num_blocks * block_size, 576]``, so the
block size must be a multiple of 64 (vLLM's MLA page is 64). Tokens past a sequence's end in its
last tile are masked out of S, and their rows are zeroed in shared memory before any P.V reads
them: a pool's unused slots may hold any bits, and 0 * NaN is NaN.

Limits: Hopper with Gluon (Triton 3.6+), bf16 or fp16 latent (FP8 takes the Triton kernel),
``kv_lora_rank`` 512 and ``rope_dim`` 64 (every MLA model the catalogue holds), query heads a
multiple of 64, block size 64, 128 or 256. :func:`gluon_mla_supported` says whether a call fits.
"""

from __future__ import annotations

import re
from functools import lru_cache

import torch

from kernels.runtime import ensure_triton_backend, gluon_importable, hopper_gluon_available

ensure_triton_backend()  # before triton is imported: the interpreter is chosen at decoration

import triton  # noqa: E402

from kernels.cache.mla import MlaLatentCache  # noqa: E402
from kernels.decode.config import sm_count  # noqa: E402
from kernels.decode.launch import SplitPlan, split_buffers  # noqa: E402
from kernels.decode.merge import merge_splits  # noqa: E402
from kernels.reference.online_softmax import LOG2_E  # noqa: E402

_HAVE_GLUON = gluon_importable()
if _HAVE_GLUON:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    # Syncs the warps of one partition; Triton 3.7 renamed thread_barrier to barrier.
    warps_barrier = getattr(gl, "thread_barrier", None) or gl.barrier

__all__ = ["gluon_mla_decode", "gluon_mla_supported", "routes_to_gluon", "gluon_mla_num_splits", "GLUON_MLA_RANK",
           "GLUON_MLA_ROPE", "GLUON_MLA_HEADS", "GLUON_MLA_TOKENS"]

GLUON_MLA_RANK = 512
GLUON_MLA_ROPE = 64
GLUON_MLA_HEADS = 64  # query heads a program (wgmma's M)
GLUON_MLA_TOKENS = 64  # tokens a tile (one TMA box of rows)
_CHUNK = 64  # columns a TMA box: 128 bytes of 16-bit values, the widest 128-byte-swizzled box
_STAGES = 2


def gluon_mla_supported(q_latent: torch.Tensor, cache: MlaLatentCache) -> bool:
    """Whether :func:`gluon_mla_decode` takes this call (module docstring's limits)."""
    if not isinstance(q_latent, torch.Tensor) or q_latent.dim() != 3 or not isinstance(cache, MlaLatentCache):
        return False
    lat = cache.latent
    return (q_latent.is_cuda and hopper_gluon_available()
            and lat.dtype in (torch.bfloat16, torch.float16) and lat.dtype == q_latent.dtype
            and cache.kv_lora_rank == GLUON_MLA_RANK and cache.rope_dim == GLUON_MLA_ROPE
            and q_latent.shape[1] % GLUON_MLA_HEADS == 0
            and cache.block_size % GLUON_MLA_TOKENS == 0 and cache.block_size <= 256
            and lat.is_contiguous() and lat.data_ptr() % 16 == 0)


def routes_to_gluon(q_latent: torch.Tensor, cache: MlaLatentCache, config: object | None) -> bool:
    """Whether :func:`kernels.decode.api.mla_decode_attention` runs this call here: no Triton
    config asked for, and :func:`gluon_mla_supported`."""
    return config is None and gluon_mla_supported(q_latent, cache)


def gluon_mla_num_splits(batch: int, n_heads: int, max_len: int, device: torch.device) -> int:
    """Splits per sequence: one program per SM at most in one wave (a program takes ~224 KiB of
    shared memory, so one is resident per SM), and at least 4 tiles a split."""
    sms = sm_count(device.index or 0) if device.type == "cuda" else 4
    programs = batch * (n_heads // GLUON_MLA_HEADS)
    tiles = triton.cdiv(max_len, GLUON_MLA_TOKENS)
    return max(1, min(sms // programs, tiles // 4))


if _HAVE_GLUON:

    @gluon.jit
    def _producer(q_desc, qr_desc, kv_desc, tables_ptr, q_smem, kv_smem, q_bar, kv_ready, kv_empty,
                  q_row, table_row, first_tile, n_tiles,
                  PAGE_SIZE: gl.constexpr, NCH: gl.constexpr, STAGES: gl.constexpr):
        """One warp: Q's chunks once, then every tile's chunks as slots free up."""
        CH: gl.constexpr = q_desc.block_type.shape[1]
        BLOCK_N: gl.constexpr = kv_desc.block_type.shape[0]
        busy = n_tiles > 0  # an empty split loads nothing (no copy may outlive the program)
        mbarrier.expect(q_bar, NCH * q_desc.block_type.nbytes, pred=busy)
        for c in gl.static_range(NCH - 1):
            tma.async_copy_global_to_shared(q_desc, [q_row, c * CH], q_bar, q_smem.index(c), pred=busy)
        tma.async_copy_global_to_shared(qr_desc, [q_row, 0], q_bar, q_smem.index(NCH - 1), pred=busy)
        for t in range(0, n_tiles):
            slot = t % STAGES
            # Slot reuse: both warpgroups released tile t - STAGES.
            mbarrier.wait(kv_empty.index(slot), ((t // STAGES) + 1) & 1, pred=t >= STAGES)
            tok = (first_tile + t) * BLOCK_N
            page = gl.load(tables_ptr + table_row + tok // PAGE_SIZE)
            row = page * PAGE_SIZE + tok % PAGE_SIZE
            mbarrier.expect(kv_ready.index(slot), NCH * kv_desc.block_type.nbytes)
            for c in gl.static_range(NCH):
                tma.async_copy_global_to_shared(kv_desc, [row, c * CH], kv_ready.index(slot),
                                                kv_smem.index(slot * NCH + c))

    @gluon.jit
    def _zero_tail(kv_smem, slot, valid, NCH: gl.constexpr, BLOCK_N: gl.constexpr, CH: gl.constexpr):
        """Zero rows ``valid..BLOCK_N-1`` of slot ``slot``'s value chunks (the tile past the end)."""
        layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
        rows = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, layout))
        keep = gl.expand_dims(rows < valid, 1)
        for c in gl.static_range(NCH - 1):
            view = kv_smem.index(slot * NCH + c)
            view.store(gl.where(keep, view.load(layout), 0.0))

    @gluon.jit
    def _store_half(o0, o1, o2, o3, l_i, m_i, out_ptr, part_out_ptr, part_lse_ptr, seq, head0, split,
                    stride_ob, stride_oh, stride_pob, stride_poh, stride_pos, stride_plb, stride_plh,
                    COL0: gl.constexpr, SPLIT: gl.constexpr, WRITE_LSE: gl.constexpr,
                    BLOCK_H: gl.constexpr, CH: gl.constexpr, o_layout: gl.constexpr):
        """Normalise four ``[BLOCK_H, CH]`` chunks of O (columns from ``COL0``) and store them."""
        heads = head0 + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, o_layout))
        cols = gl.arange(0, CH, layout=gl.SliceLayout(0, o_layout))
        inv = 1.0 / gl.where(l_i > 0.0, l_i, 1.0)  # l_i is 0 only in an empty split
        inv = gl.expand_dims(gl.convert_layout(inv, gl.SliceLayout(1, o_layout)), 1)
        if SPLIT:
            base = (part_out_ptr + seq.to(gl.int64) * stride_pob + gl.expand_dims(heads, 1) * stride_poh
                    + split * stride_pos + COL0 + gl.expand_dims(cols, 0))
            gl.store(base, o0 * inv)
            gl.store(base + CH, o1 * inv)
            gl.store(base + 2 * CH, o2 * inv)
            gl.store(base + 3 * CH, o3 * inv)
            if WRITE_LSE:
                safe = gl.where(l_i > 0.0, l_i, 1.0)
                lse = gl.where(l_i > 0.0, m_i + gl.log2(safe), float("-inf"))
                lse_heads = head0 + gl.arange(0, BLOCK_H, layout=l_i.type.layout)
                gl.store(part_lse_ptr + seq.to(gl.int64) * stride_plb + lse_heads * stride_plh + split, lse)
        else:
            base = (out_ptr + seq.to(gl.int64) * stride_ob + gl.expand_dims(heads, 1) * stride_oh
                    + COL0 + gl.expand_dims(cols, 0))
            dt: gl.constexpr = out_ptr.dtype.element_ty
            gl.store(base, (o0 * inv).to(dt))
            gl.store(base + CH, (o1 * inv).to(dt))
            gl.store(base + 2 * CH, (o2 * inv).to(dt))
            gl.store(base + 3 * CH, (o3 * inv).to(dt))

    @gluon.jit
    def _issue_scores(q_smem, kv_smem, kv_ready, j, NCH: gl.constexpr, STAGES: gl.constexpr,
                      BLOCK_H: gl.constexpr, BLOCK_N: gl.constexpr, s_layout: gl.constexpr):
        """Wait for tile ``j`` and issue S_j = Q K_j^T as 9 chained async wgmmas (one per chunk)."""
        slot = j % STAGES
        mbarrier.wait(kv_ready.index(slot), (j // STAGES) & 1)
        s = gl.zeros([BLOCK_H, BLOCK_N], gl.float32, s_layout)
        for c in gl.static_range(NCH):
            s = warpgroup_mma(q_smem.index(c), kv_smem.index(slot * NCH + c).permute((1, 0)), s,
                              use_acc=c > 0, is_async=True)
        return s

    @gluon.jit
    def _online_softmax(s, m_i, l_i, qk_scale, valid, BLOCK_N: gl.constexpr, s_layout: gl.constexpr):
        """Online-softmax step over one raw score tile ``s`` [64, BLOCK_N] whose first ``valid``
        columns are tokens: ``(p, alpha, m_new, l_new)``, base 2."""
        cols = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        s = gl.where(gl.expand_dims(cols < valid, 0), s, float("-inf"))
        m_new = gl.maximum(m_i, gl.max(s, axis=1) * qk_scale)  # finite: every tile holds a token
        p = gl.exp2(s * qk_scale - gl.expand_dims(m_new, 1))
        alpha = gl.exp2(m_i - m_new)
        return p, alpha, m_new, l_i * alpha + gl.sum(p, axis=1)

    @gluon.jit
    def _hand_over(p_new, alpha, p_smem, stat_smem, p_ready, p_free, j, p_layout: gl.constexpr):
        """Publish P_j and alpha_j to the values warpgroup once it is done with P_{j-1}; returns
        P_j as this warpgroup's register operand."""
        p16 = p_new.to(p_smem.dtype)
        mbarrier.wait(p_free, (j + 1) & 1, pred=j > 0)
        p_smem.store(p16)
        stat_smem.store(alpha)
        fence_async_shared()
        warps_barrier()
        mbarrier.arrive(p_ready, count=1)
        return gl.convert_layout(p16, p_layout)

    @gluon.jit
    def _step(s, o0, o1, o2, o3, m_i, l_i, q_smem, kv_smem, p_smem, stat_smem, kv_ready, kv_empty, p_ready, p_free,
              qk_scale, j, first_tile, end, NEXT: gl.constexpr, NCH: gl.constexpr, STAGES: gl.constexpr,
              BLOCK_H: gl.constexpr, BLOCK_N: gl.constexpr, CH: gl.constexpr, s_layout: gl.constexpr,
              o_layout: gl.constexpr, p_layout: gl.constexpr):
        """Tile ``j`` of the scores warpgroup, from its finished S_j: softmax, hand-over, its half of
        P_j V_j, and (``NEXT``) S_{j+1} issued behind that P.V. The slot is released as soon as
        this P.V retires, so with two slots the copy of tile j+2 overlaps tile j+1's work.
        Returns S_{j+1} (``s`` unchanged without ``NEXT``), O's chunks and the row statistics."""
        valid = end - (first_tile + j) * BLOCK_N
        p_new, alpha, m_i, l_i = _online_softmax(s, m_i, l_i, qk_scale, valid, BLOCK_N, s_layout)
        if valid < BLOCK_N:
            _zero_tail(kv_smem, j % STAGES, valid, NCH, BLOCK_N, CH)
        a = gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
        p = _hand_over(p_new, alpha, p_smem, stat_smem, p_ready, p_free, j, p_layout)
        slot = j % STAGES
        o0 = warpgroup_mma(p, kv_smem.index(slot * NCH), o0 * a, is_async=True)
        o1 = warpgroup_mma(p, kv_smem.index(slot * NCH + 1), o1 * a, is_async=True)
        o2 = warpgroup_mma(p, kv_smem.index(slot * NCH + 2), o2 * a, is_async=True)
        o3 = warpgroup_mma(p, kv_smem.index(slot * NCH + 3), o3 * a, is_async=True)
        if NEXT:
            s_next = _issue_scores(q_smem, kv_smem, kv_ready, j + 1, NCH, STAGES, BLOCK_H, BLOCK_N, s_layout)
            o0, o1, o2, o3, p = warpgroup_mma_wait(NCH, deps=[o0, o1, o2, o3, p])
            mbarrier.arrive(kv_empty.index(slot), count=1)
            s = warpgroup_mma_wait(0, deps=[s_next])
        else:
            o0, o1, o2, o3, p = warpgroup_mma_wait(0, deps=[o0, o1, o2, o3, p])
            mbarrier.arrive(kv_empty.index(slot), count=1)
        return s, o0, o1, o2, o3, m_i, l_i

    @gluon.jit
    def _scores(q_smem, kv_smem, p_smem, stat_smem, q_bar, kv_ready, kv_empty, p_ready, p_free,
                out_ptr, part_out_ptr, part_lse_ptr, qk_scale, seq, head0, split, first_tile, n_tiles, end,
                stride_ob, stride_oh, stride_pob, stride_poh, stride_pos, stride_plb, stride_plh,
                SPLIT: gl.constexpr, NCH: gl.constexpr, STAGES: gl.constexpr,
                BLOCK_H: gl.constexpr, BLOCK_N: gl.constexpr, CH: gl.constexpr):
        """The scores warpgroup (module docstring): S, softmax, P for both, its half of P.V."""
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16])
        o_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, CH, 16])
        p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
        row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
        m_i = gl.full([BLOCK_H], float("-inf"), gl.float32, layout=row_layout)
        l_i = gl.zeros([BLOCK_H], gl.float32, layout=row_layout)
        o0 = gl.zeros([BLOCK_H, CH], gl.float32, o_layout)
        o1 = gl.zeros([BLOCK_H, CH], gl.float32, o_layout)
        o2 = gl.zeros([BLOCK_H, CH], gl.float32, o_layout)
        o3 = gl.zeros([BLOCK_H, CH], gl.float32, o_layout)
        s = gl.zeros([BLOCK_H, BLOCK_N], gl.float32, s_layout)
        if n_tiles > 0:
            mbarrier.wait(q_bar, 0)
            s = _issue_scores(q_smem, kv_smem, kv_ready, 0, NCH, STAGES, BLOCK_H, BLOCK_N, s_layout)
            s = warpgroup_mma_wait(0, deps=[s])
        for j in range(0, n_tiles - 1):
            s, o0, o1, o2, o3, m_i, l_i = _step(s, o0, o1, o2, o3, m_i, l_i, q_smem, kv_smem, p_smem, stat_smem,
                                                kv_ready, kv_empty, p_ready, p_free, qk_scale, j, first_tile, end,
                                                True, NCH, STAGES, BLOCK_H, BLOCK_N, CH, s_layout, o_layout,
                                                p_layout)
        if n_tiles > 0:  # the last tile: no next S to start
            s, o0, o1, o2, o3, m_i, l_i = _step(s, o0, o1, o2, o3, m_i, l_i, q_smem, kv_smem, p_smem, stat_smem,
                                                kv_ready, kv_empty, p_ready, p_free, qk_scale, n_tiles - 1,
                                                first_tile, end, False, NCH, STAGES, BLOCK_H, BLOCK_N, CH,
                                                s_layout, o_layout, p_layout)
        # The final row sums for the values warpgroup, once it is done with the last P (its
        # n_tiles-th release of p_free).
        mbarrier.wait(p_free, (n_tiles + 1) & 1, pred=n_tiles > 0)
        stat_smem.store(l_i)
        warps_barrier()
        mbarrier.arrive(p_ready, count=1)
        _store_half(o0, o1, o2, o3, l_i, m_i, out_ptr, part_out_ptr, part_lse_ptr, seq, head0, split,
                    stride_ob, stride_oh, stride_pob, stride_poh, stride_pos, stride_plb, stride_plh,
                    0, SPLIT, True, BLOCK_H, CH, o_layout)

    @gluon.jit
    def _values(kv_smem, p_smem, stat_smem, kv_ready, kv_empty, p_ready, p_free,
                out_ptr, part_out_ptr, part_lse_ptr, seq, head0, split, n_tiles,
                stride_ob, stride_oh, stride_pob, stride_poh, stride_pos, stride_plb, stride_plh,
                SPLIT: gl.constexpr, NCH: gl.constexpr, STAGES: gl.constexpr,
                BLOCK_H: gl.constexpr, BLOCK_N: gl.constexpr, CH: gl.constexpr):
        """The values warpgroup: columns 256-511 of O, from P_j in shared memory."""
        o_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, CH, 16])
        row_layout: gl.constexpr = gl.SliceLayout(1, o_layout)
        o0 = gl.zeros([BLOCK_H, CH], gl.float32, o_layout)
        o1 = gl.zeros([BLOCK_H, CH], gl.float32, o_layout)
        o2 = gl.zeros([BLOCK_H, CH], gl.float32, o_layout)
        o3 = gl.zeros([BLOCK_H, CH], gl.float32, o_layout)
        for j in range(0, n_tiles):
            slot = j % STAGES
            mbarrier.wait(p_ready, j & 1)
            mbarrier.wait(kv_ready.index(slot), (j // STAGES) & 1)
            a = gl.expand_dims(stat_smem.load(row_layout), 1)
            o0 = warpgroup_mma(p_smem, kv_smem.index(slot * NCH + 4), o0 * a, is_async=True)
            o1 = warpgroup_mma(p_smem, kv_smem.index(slot * NCH + 5), o1 * a, is_async=True)
            o2 = warpgroup_mma(p_smem, kv_smem.index(slot * NCH + 6), o2 * a, is_async=True)
            o3 = warpgroup_mma(p_smem, kv_smem.index(slot * NCH + 7), o3 * a, is_async=True)
            o0, o1, o2, o3 = warpgroup_mma_wait(0, deps=[o0, o1, o2, o3])
            warps_barrier()
            mbarrier.arrive(p_free, count=1)
            mbarrier.arrive(kv_empty.index(slot), count=1)
        mbarrier.wait(p_ready, n_tiles & 1)
        l_i = stat_smem.load(row_layout)
        _store_half(o0, o1, o2, o3, l_i, l_i, out_ptr, part_out_ptr, part_lse_ptr, seq, head0, split,
                    stride_ob, stride_oh, stride_pob, stride_poh, stride_pos, stride_plb, stride_plh,
                    4 * CH, SPLIT, False, BLOCK_H, CH, o_layout)

    @gluon.jit
    def _mla_decode_gluon(q_desc, qr_desc, kv_desc, tables_ptr, lens_ptr, out_ptr, part_out_ptr, part_lse_ptr,
                          qk_scale, n_heads, num_splits, stride_tb,
                          stride_ob, stride_oh, stride_pob, stride_poh, stride_pos, stride_plb, stride_plh,
                          PAGE_SIZE: gl.constexpr, SPLIT: gl.constexpr, STAGES: gl.constexpr,
                          num_warps: gl.constexpr):
        """Grid (n_heads // 64, batch, num_splits); descriptors over the 2-D views the wrapper
        builds (``[batch * n_heads, 512]``, ``[batch * n_heads, 64]``, ``[rows, 576]``)."""
        BLOCK_H: gl.constexpr = q_desc.block_type.shape[0]
        CH: gl.constexpr = q_desc.block_type.shape[1]
        BLOCK_N: gl.constexpr = kv_desc.block_type.shape[0]
        NCH: gl.constexpr = 9  # 8 latent chunks and the rope chunk
        head_tile = gl.program_id(0)
        seq = gl.program_id(1)
        split = gl.program_id(2)
        length = gl.load(lens_ptr + seq)
        tiles = gl.cdiv(length, BLOCK_N)
        per_split = gl.cdiv(tiles, num_splits)
        first_tile = split * per_split
        n_tiles = gl.maximum(gl.minimum(tiles - first_tile, per_split), 0)
        end = gl.minimum(length, (first_tile + n_tiles) * BLOCK_N)
        head0 = head_tile * BLOCK_H
        q_row = seq * n_heads + head0

        q_smem = gl.allocate_shared_memory(q_desc.dtype, [NCH, BLOCK_H, CH], q_desc.layout)
        kv_smem = gl.allocate_shared_memory(kv_desc.dtype, [STAGES * NCH, BLOCK_N, CH], kv_desc.layout)
        p_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, BLOCK_N], q_desc.dtype)
        p_smem = gl.allocate_shared_memory(q_desc.dtype, [BLOCK_H, BLOCK_N], p_layout)
        # Row statistics handed from the scores to the values warpgroup: alpha_j, then the final l.
        stat_smem = gl.allocate_shared_memory(gl.float32, [BLOCK_H], gl.SwizzledSharedLayout(1, 1, 1, [0]))
        q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        kv_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        kv_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        p_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        p_free = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        mbarrier.init(q_bar, count=1)
        mbarrier.init(p_ready, count=1)
        mbarrier.init(p_free, count=1)
        for i in gl.static_range(STAGES):
            mbarrier.init(kv_ready.index(i), count=1)
            mbarrier.init(kv_empty.index(i), count=2)  # one arrive per warpgroup
        fence_async_shared()
        table_row = seq.to(gl.int64) * stride_tb
        gl.warp_specialize([
            (_scores, (q_smem, kv_smem, p_smem, stat_smem, q_bar, kv_ready, kv_empty, p_ready, p_free,
                       out_ptr, part_out_ptr, part_lse_ptr, qk_scale, seq, head0, split, first_tile, n_tiles, end,
                       stride_ob, stride_oh, stride_pob, stride_poh, stride_pos, stride_plb, stride_plh,
                       SPLIT, NCH, STAGES, BLOCK_H, BLOCK_N, CH)),
            (_values, (kv_smem, p_smem, stat_smem, kv_ready, kv_empty, p_ready, p_free,
                       out_ptr, part_out_ptr, part_lse_ptr, seq, head0, split, n_tiles,
                       stride_ob, stride_oh, stride_pob, stride_poh, stride_pos, stride_plb, stride_plh,
                       SPLIT, NCH, STAGES, BLOCK_H, BLOCK_N, CH)),
            (_producer, (q_desc, qr_desc, kv_desc, tables_ptr, q_smem, kv_smem, q_bar, kv_ready, kv_empty,
                         q_row, table_row, first_tile, n_tiles, PAGE_SIZE, NCH, STAGES)),
        ], [4, 1], [192, 40])


@lru_cache(maxsize=4)
def _box_layout(dtype: torch.dtype):
    """The shared layout of every TMA box (64 x 64 16-bit values: Q chunks and latent chunks alike)."""
    return gl.NVMMASharedLayout.get_default_for([GLUON_MLA_HEADS, _CHUNK],
                                                gl.bfloat16 if dtype == torch.bfloat16 else gl.float16)


def _descriptors(q_latent: torch.Tensor, q_rope: torch.Tensor, latent: torch.Tensor) -> tuple:
    q_block = [GLUON_MLA_HEADS, _CHUNK]
    kv_block = [GLUON_MLA_TOKENS, _CHUNK]
    q_layout = kv_layout = _box_layout(latent.dtype)
    batch, n_heads, rank = q_latent.shape
    rows = latent.shape[0] * latent.shape[1]
    return (TensorDescriptor.from_tensor(q_latent.reshape(batch * n_heads, rank), q_block, q_layout),
            TensorDescriptor.from_tensor(q_rope.reshape(batch * n_heads, q_rope.shape[2]), q_block, q_layout),
            TensorDescriptor.from_tensor(latent.view(rows, latent.shape[2]), kv_block, kv_layout))


def gluon_mla_decode(q_latent: torch.Tensor, q_rope: torch.Tensor, cache: MlaLatentCache, *, sm_scale: float,
                     num_splits: int | None = None) -> torch.Tensor:
    """Absorbed MLA decode on Hopper (arguments as :func:`kernels.decode.api.mla_decode_attention`,
    which checks them and routes here when :func:`gluon_mla_supported`); returns
    ``[batch, n_heads, 512]`` in the query's dtype."""
    if not gluon_mla_supported(q_latent, cache):
        raise ValueError("the Gluon MLA kernel needs Hopper, a 16-bit latent of 512 + 64, query heads a "
                         "multiple of 64 and a block size of 64, 128 or 256")
    q_latent = q_latent.contiguous()
    q_rope = q_rope.contiguous()
    batch, n_heads, _ = q_latent.shape
    max_len = cache.block_tables.shape[1] * cache.block_size
    if num_splits is None:
        num_splits = gluon_mla_num_splits(batch, n_heads, max_len, q_latent.device)
    plan = SplitPlan(grid=(n_heads // GLUON_MLA_HEADS, batch, num_splits), num_splits=num_splits)
    out = torch.empty_like(q_latent)
    part_out, part_lse, part_strides = split_buffers(plan, q_latent, out)
    q_desc, qr_desc, kv_desc = _descriptors(q_latent, q_rope, cache.latent)
    _mla_decode_gluon[plan.grid](
        q_desc, qr_desc, kv_desc, cache.block_tables, cache.seq_lens, out, part_out, part_lse,
        sm_scale * LOG2_E, n_heads, num_splits, cache.block_tables.stride(0), out.stride(0), out.stride(1),
        *part_strides, PAGE_SIZE=cache.block_size, SPLIT=plan.split, STAGES=_STAGES, num_warps=4)
    if plan.split:
        merge_splits(part_out, part_lse, out)
    return out


def compile_mla_for_sm90(*, split: bool, page_size: int = 64, dtype: str = "bf16"):
    """Compile the kernel for sm_90 without a GPU (Triton's bundled ptxas); returns Triton's
    ``CompiledKernel`` (``.asm`` holds ``ptx`` and ``cubin``, ``.metadata.shared`` the bytes)."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    layout = _box_layout({"bf16": torch.bfloat16, "fp16": torch.float16}[dtype])
    desc = f"tensordesc<{dtype}[{GLUON_MLA_HEADS},{_CHUNK}],{layout!r}>"
    signature = {"q_desc": desc, "qr_desc": desc, "kv_desc": desc, "tables_ptr": "*i32", "lens_ptr": "*i32",
                 "out_ptr": f"*{dtype}", "part_out_ptr": "*fp32", "part_lse_ptr": "*fp32", "qk_scale": "fp32"}
    signature.update({name: "i32" for name in ("n_heads", "num_splits", "stride_tb", "stride_ob", "stride_oh",
                                               "stride_pob", "stride_poh", "stride_pos", "stride_plb", "stride_plh")})
    constexprs = dict(PAGE_SIZE=page_size, SPLIT=bool(split), STAGES=_STAGES, num_warps=4)
    signature.update({name: "constexpr" for name in constexprs})
    src = GluonASTSource(_mla_decode_gluon, signature, constexprs=constexprs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})


def mla_sm90_build(*, split: bool, page_size: int = 64) -> dict:
    """Registers, spills, shared bytes and wgmma count of one sm_90 build (no GPU needed; run with
    ``TRITON_INTERPRET`` off, as :func:`kernels.prefill.flash_gluon.sm90_build`)."""
    from kernels.occupancy import cubin_resources

    kernel = compile_mla_for_sm90(split=split, page_size=page_size)
    registers, spill_bytes = cubin_resources(kernel.asm["cubin"])
    ptx = kernel.asm["ptx"]
    return dict(split=bool(split), page_size=page_size, registers=registers, spill_bytes=spill_bytes,
                shared_bytes=int(kernel.metadata.shared), wgmma=ptx.count("wgmma.mma_async"),
                setmaxnreg=sorted({int(w) for w in re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+(\d+)", ptx)}))

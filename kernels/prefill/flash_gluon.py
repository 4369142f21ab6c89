"""FlashAttention forward (prefill) for Hopper (sm_90) written in Gluon.

Same contract as :func:`kernels.prefill.flash.flash_attention_forward`; what differs is how
each warpgroup's work is scheduled, which Gluon states explicitly instead of leaving it to
Triton's pipeliner:

* K and V tiles arrive by the bulk tensor copy engine (TMA) into a ring of ``num_stages``
  shared-memory slots, each completing on its own mbarrier. Loads are issued ahead, either by
  the consumer warps themselves (``warp_specialize=False``) or by a one-warp producer
  partition (``warp_specialize=True``) that waits on "slot empty" barriers.
* Intra-warpgroup overlap (FlashAttention-3, Shah et al. 2024, section 3.2). Per key tile j::

      S_j   = Q K_jᵀ                 (async wgmma, issued first)
      O    += P_{j-1} V_{j-1}        (async wgmma, P in registers: the "RS" form)
      wait until only the P·V wgmma is in flight  ->  S_j is ready
      m', P_j, alpha = online softmax of S_j     (CUDA cores, while P·V runs)
      wait for P·V  ->  O *= alpha ;  m, l updated

  Rescaling O only after the P·V of the previous tile has completed keeps the invariant
  ``O = sum_t exp2(S_t - m) V_t`` over the tiles already multiplied.
* Base-2 softmax with ``sm_scale * log2(e)`` folded into one multiply, fp32 ``m_i``, ``l_i``
  and ``O`` (as in :mod:`kernels.prefill.flash`).
* Causal: the tiles left of the diagonal run unmasked, the diagonal (and a key tail) masked;
  the heaviest query blocks are launched first.

Descriptors are 3-D, ``[B*H, N, D]``, so the copy engine bounds every head separately: rows
past ``N`` of a tail tile are zero-filled (never the next head's rows), padded query rows have
finite scores, masked scores are -inf, zero V rows contribute 0, and the output store clips at
``N``. Nothing beyond the sequence can leak into the result.

Sources
-------
* Shah, Bikshandi, Zhang, Thakkar, Ramani, Dao, "FlashAttention-3", 2024 (algorithm 1 and the
  intra-warpgroup pipelining of section 3.2).
* Triton's Gluon tutorials (layouts, TMA, wgmma) for the API.

Limits
------
* Hopper only (compute capability 9.x), Triton with Gluon (3.6 or newer); no interpreter path.
* Head dim 64 or 128; float16 or bfloat16; contiguous q, k, v with 16-byte aligned bases.
* Forward only; ``N_q == N_k`` (prefill).
"""

from __future__ import annotations

import dataclasses

import torch

from kernels.reference.online_softmax import LOG2_E
from kernels.prefill.checks import check_scale, check_tensors
from kernels.runtime import ensure_triton_backend, gluon_importable, hopper_gluon_available

ensure_triton_backend()  # before triton is imported: the interpreter is chosen at decoration

import triton  # noqa: E402

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

__all__ = ["GluonConfig", "GLUON_CONFIGS", "Sm90Build", "gluon_attention_forward",
           "pick_gluon_config", "sm90_build"]

GLUON_HEAD_DIMS = (64, 128)


@dataclasses.dataclass(frozen=True, kw_only=True)
class GluonConfig:
    """Launch configuration of the Gluon forward.

    ``block_m`` query rows per program, 64 per consumer warpgroup (wgmma's M is 64), two
    warpgroups; ``block_n`` keys per tile (divides ``block_m`` so
    the causal diagonal starts on a tile edge); ``num_stages`` K/V slots in shared memory.
    """

    block_m: int = 128
    block_n: int = 128
    num_stages: int = 2
    # One extra warp issues all TMA loads (gl.warp_specialize) and each consumer warpgroup
    # runs as its own partition, so the two warpgroups are never forced into lock step.
    warp_specialize: bool = False

    def __post_init__(self) -> None:
        # 64-row programs (one warpgroup) compiled but returned NaN on the H200; only the
        # two-warpgroup shape is offered until that is understood.
        if self.block_m != 128:
            raise ValueError(f"block_m must be 128 (two warpgroups of 64 rows), got {self.block_m}")
        if self.block_n not in (64, 128):
            raise ValueError(f"block_n must be 64 or 128, got {self.block_n}")
        if self.block_m % self.block_n:
            raise ValueError(f"block_n ({self.block_n}) must divide block_m ({self.block_m})")
        if not 2 <= self.num_stages <= 4:
            raise ValueError(f"num_stages must be in 2..4, got {self.num_stages}")

    @property
    def num_warps(self) -> int:
        """Warps of the launch's default region: all consumers, or with warp specialisation
        the first consumer warpgroup (the second and the producer warp are workers)."""
        return 4 if self.warp_specialize else self.block_m // 16

    def shared_bytes(self, head_dim: int, elem_bytes: int = 2) -> int:
        """Shared memory the tiles take: Q once, K and V per stage (bytes, barriers excluded)."""
        return (self.block_m + 2 * self.num_stages * self.block_n) * head_dim * elem_bytes

    @property
    def name(self) -> str:
        ws = " ws" if self.warp_specialize else ""
        return f"gluon {self.block_m}x{self.block_n} {self.num_stages}st{ws}"


# Candidates worth timing again (harness variants, kernels.bench.variants); the first is the default.
# H200, D = 128, bf16, two runs: 128x128 3st ws
# ran at 0.96-1.03x cuDNN non-causal and 0.92-1.07x causal over the target shapes; 128x128 2st
# ws 0.85-0.96x; 128x64 4st ws 0.86-0.94x; the non-specialised program 0.67-0.80x (the CTA-wide
# barriers Gluon places around each TMA issue keep its two warpgroups in lock step).
GLUON_CONFIGS: tuple[GluonConfig, ...] = (
    GluonConfig(block_m=128, block_n=128, num_stages=3, warp_specialize=True),
    GluonConfig(block_m=128, block_n=128, num_stages=2, warp_specialize=True),
    GluonConfig(block_m=128, block_n=64, num_stages=4, warp_specialize=True),
    GluonConfig(block_m=128, block_n=128, num_stages=2),
)

_SMEM_LIMIT = 227 * 1024  # opt-in shared memory per block on sm_90


def pick_gluon_config(*, head_dim: int, causal: bool) -> GluonConfig:
    """The default launch configuration (the same for both masks until measured otherwise)."""
    del causal
    cfg = GLUON_CONFIGS[0]
    if cfg.shared_bytes(head_dim) > _SMEM_LIMIT:  # pragma: no cover - all entries fit D <= 128
        raise ValueError(f"{cfg.name} needs {cfg.shared_bytes(head_dim)} B of shared memory")
    return cfg


if _HAVE_GLUON:

    @gluon.jit
    def _load_kv(k_desc, v_desc, k_smem, v_smem, k_ready, v_ready, kv_bh, tile, n_tiles,
                 BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
        """Start the TMA copies of key/value tile ``tile`` into slot ``tile % STAGES``
        (skipped past the last tile)."""
        slot = tile % STAGES
        pred = tile < n_tiles
        mbarrier.expect(k_ready.index(slot), k_desc.block_type.nbytes, pred=pred)
        tma.async_copy_global_to_shared(k_desc, [kv_bh, tile * BLOCK_N, 0], k_ready.index(slot),
                                        k_smem.index(slot), pred=pred)
        mbarrier.expect(v_ready.index(slot), v_desc.block_type.nbytes, pred=pred)
        tma.async_copy_global_to_shared(v_desc, [kv_bh, tile * BLOCK_N, 0], v_ready.index(slot),
                                        v_smem.index(slot), pred=pred)

    @gluon.jit
    def _softmax(s, m_i, l_i, q_row0, k_col0, n_ctx, qk_scale,
                 MASK: gl.constexpr, CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr,
                 BLOCK_N: gl.constexpr, s_layout: gl.constexpr):
        """Online-softmax update of one raw score tile ``s`` [BLOCK_M, BLOCK_N] (fp32).

        Returns ``(p, alpha, m_new, l_new)``: ``p`` unnormalised probabilities (fp32), ``alpha``
        the factor that rescales what was accumulated under the old max.
        """
        if MASK:
            cols = k_col0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
            keep = gl.expand_dims(cols < n_ctx, 0)
            if CAUSAL:
                rows = q_row0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
                keep = keep & (gl.expand_dims(rows, 1) >= gl.expand_dims(cols, 0))
            s = gl.where(keep, s, float("-inf"))
        # Every row sees a real key in its first tile, so m_new is finite from then on and
        # exp2(-inf - m_new) is 0, never NaN.
        m_new = gl.maximum(m_i, gl.max(s, axis=1) * qk_scale)
        p = gl.exp2(s * qk_scale - gl.expand_dims(m_new, 1))
        alpha = gl.exp2(m_i - m_new)
        return p, alpha, m_new, l_i * alpha + gl.sum(p, axis=1)

    @gluon.jit
    def _kv_loop(o, p, m_i, l_i, q_smem, k_smem, v_smem, k_ready, v_ready, k_empty,
                 k_desc, v_desc, kv_bh, q_row0, lo, hi, n_tiles, n_ctx, qk_scale,
                 MASK: gl.constexpr, CAUSAL: gl.constexpr, PRODUCE: gl.constexpr,
                 RELEASE: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                 HEAD_DIM: gl.constexpr, STAGES: gl.constexpr,
                 s_layout: gl.constexpr, o_layout: gl.constexpr, p_layout: gl.constexpr):
        """Key tiles ``lo .. hi-1``: S_j issued before the P·V of tile j-1 (see module doc).

        ``p`` holds P_{lo-1} on entry; on exit it holds P_{hi-1}, whose P·V is still to do.
        ``PRODUCE``: this region issues the loads itself (slot of tile j-1 refilled with tile
        j-1+STAGES once its P·V retired). ``RELEASE``: signal a producer partition instead.
        """
        for j in range(lo, hi):
            slot = j % STAGES
            prev = (j - 1) % STAGES
            mbarrier.wait(k_ready.index(slot), (j // STAGES) & 1)
            k_t = k_smem.index(slot).reshape([BLOCK_N, HEAD_DIM]).permute((1, 0))
            s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)
            s_tok = warpgroup_mma(q_smem, k_t, s_zero, use_acc=False, is_async=True)
            mbarrier.wait(v_ready.index(prev), ((j - 1) // STAGES) & 1)
            v_t = v_smem.index(prev).reshape([BLOCK_N, HEAD_DIM])
            o_tok = warpgroup_mma(p, v_t, o, is_async=True)
            # Groups retire in order: one outstanding means S_j is done, P·V may still run.
            s = warpgroup_mma_wait(1, deps=[s_tok])
            p_new, alpha, m_i, l_i = _softmax(s, m_i, l_i, q_row0, j * BLOCK_N, n_ctx, qk_scale,
                                              MASK, CAUSAL, BLOCK_M, BLOCK_N, s_layout)
            # p stays alive until its wgmma retires: it is that wgmma's A operand.
            o, p = warpgroup_mma_wait(0, deps=[o_tok, p])
            if RELEASE:
                mbarrier.arrive(k_empty.index(prev), count=1)
            if PRODUCE:
                _load_kv(k_desc, v_desc, k_smem, v_smem, k_ready, v_ready, kv_bh,
                         j - 1 + STAGES, n_tiles, BLOCK_N, STAGES)
            o = o * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
            p = gl.convert_layout(p_new.to(q_smem.dtype), p_layout)
        return o, p, m_i, l_i

    @gluon.jit
    def _tile_ranges(start_m, n_ctx, CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr,
                     BLOCK_N: gl.constexpr):
        """(unmasked tiles, all tiles) of query block ``start_m``: tiles before the first
        masked one need no mask (every key <= every query, all keys < n_ctx)."""
        if CAUSAL:
            n_free = (start_m * BLOCK_M) // BLOCK_N
            n_tiles = gl.cdiv(gl.minimum((start_m + 1) * BLOCK_M, n_ctx), BLOCK_N)
        else:
            n_free = n_ctx // BLOCK_N
            n_tiles = gl.cdiv(n_ctx, BLOCK_N)
        return n_free, n_tiles

    @gluon.jit
    def _consumer(q_desc, k_desc, v_desc, o_desc, lse_ptr, q_smem, k_smem, v_smem,
                  q_bar, k_ready, v_ready, k_empty, qk_scale, n_ctx, bh, kv_bh, start_m,
                  row_off, PRODUCE: gl.constexpr, RELEASE: gl.constexpr, CAUSAL: gl.constexpr,
                  BLOCK_M: gl.constexpr, ROWS: gl.constexpr, BLOCK_N: gl.constexpr,
                  HEAD_DIM: gl.constexpr, STAGES: gl.constexpr, WARPS: gl.constexpr):
        """One consumer region: ``ROWS`` query rows (64 per warpgroup of ``WARPS // 4``),
        starting ``row_off`` rows into the program's block. Computes and stores O and lse."""
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[WARPS, 1], instr_shape=[16, BLOCK_N, 16])
        o_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[WARPS, 1], instr_shape=[16, HEAD_DIM, 16])
        # P as wgmma's register A operand: two 16-bit values per 32-bit register.
        p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
        q_row0 = start_m * BLOCK_M + row_off
        n_free, n_tiles = _tile_ranges(start_m, n_ctx, CAUSAL, BLOCK_M, BLOCK_N)

        mbarrier.wait(q_bar, 0)
        q2 = q_smem.reshape([ROWS, HEAD_DIM])
        # Tile 0 (masked in general: it may be the diagonal or the key tail).
        mbarrier.wait(k_ready.index(0), 0)
        k_t = k_smem.index(0).reshape([BLOCK_N, HEAD_DIM]).permute((1, 0))
        s = warpgroup_mma(q2, k_t, gl.zeros([ROWS, BLOCK_N], gl.float32, s_layout),
                          use_acc=False, is_async=True)
        s = warpgroup_mma_wait(0, deps=[s])
        m_i = gl.full([ROWS], float("-inf"), gl.float32, layout=gl.SliceLayout(1, s_layout))
        l_i = gl.zeros([ROWS], gl.float32, layout=gl.SliceLayout(1, s_layout))
        p, _alpha, m_i, l_i = _softmax(s, m_i, l_i, q_row0, 0, n_ctx, qk_scale, True, CAUSAL,
                                       ROWS, BLOCK_N, s_layout)
        p = gl.convert_layout(p.to(q_smem.dtype), p_layout)
        o = gl.zeros([ROWS, HEAD_DIM], gl.float32, o_layout)

        # Tiles 1 .. n_free-1 unmasked (empty when n_free <= 1), then the masked rest.
        o, p, m_i, l_i = _kv_loop(o, p, m_i, l_i, q2, k_smem, v_smem, k_ready, v_ready, k_empty,
                                  k_desc, v_desc, kv_bh, q_row0, 1, n_free,
                                  n_tiles, n_ctx, qk_scale, False, CAUSAL, PRODUCE, RELEASE,
                                  ROWS, BLOCK_N, HEAD_DIM, STAGES, s_layout, o_layout, p_layout)
        o, p, m_i, l_i = _kv_loop(o, p, m_i, l_i, q2, k_smem, v_smem, k_ready, v_ready, k_empty,
                                  k_desc, v_desc, kv_bh, q_row0, gl.maximum(n_free, 1), n_tiles,
                                  n_tiles, n_ctx, qk_scale, True, CAUSAL, PRODUCE, RELEASE,
                                  ROWS, BLOCK_N, HEAD_DIM, STAGES, s_layout, o_layout, p_layout)
        # P·V of the last tile.
        last = (n_tiles - 1) % STAGES
        mbarrier.wait(v_ready.index(last), ((n_tiles - 1) // STAGES) & 1)
        o_tok = warpgroup_mma(p, v_smem.index(last).reshape([BLOCK_N, HEAD_DIM]), o, is_async=True)
        o, p = warpgroup_mma_wait(0, deps=[o_tok, p])

        l_o = gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))
        o = o / gl.expand_dims(l_o, 1)
        # lse in natural log: (m + log2 l) * ln 2.
        lse = (m_i + gl.log2(l_i)) * 0.6931471805599453
        rows = q_row0 + gl.arange(0, ROWS, layout=gl.SliceLayout(1, s_layout))
        gl.store(lse_ptr + bh.to(gl.int64) * n_ctx + rows, lse, mask=rows < n_ctx)
        # Q is dead (its last wgmma retired): its slot stages O for one clipped TMA store.
        q_smem.reshape([ROWS, HEAD_DIM]).store(o.to(q_smem.dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(o_desc, [bh, q_row0, 0], q_smem)
        tma.store_wait(0)

    @gluon.jit
    def _producer(q_desc, k_desc, v_desc, q_smem0, q_smem1, k_smem, v_smem, q_bar0, q_bar1,
                  k_ready, v_ready, k_empty, n_ctx, bh, kv_bh, start_m, CAUSAL: gl.constexpr,
                  BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
        """One-warp producer partition: Q halves once, then K/V tiles as slots free up."""
        half: gl.constexpr = BLOCK_M // 2
        mbarrier.expect(q_bar0, q_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [bh, start_m * BLOCK_M, 0], q_bar0, q_smem0)
        mbarrier.expect(q_bar1, q_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [bh, start_m * BLOCK_M + half, 0], q_bar1, q_smem1)
        _n_free, n_tiles = _tile_ranges(start_m, n_ctx, CAUSAL, BLOCK_M, BLOCK_N)
        for t in range(0, n_tiles):
            slot = t % STAGES
            # Slot reuse: both consumers released tile t - STAGES (phase of that release).
            mbarrier.wait(k_empty.index(slot), ((t // STAGES) + 1) & 1, pred=t >= STAGES)
            _load_kv(k_desc, v_desc, k_smem, v_smem, k_ready, v_ready, kv_bh, t, n_tiles,
                     BLOCK_N, STAGES)

    @gluon.jit
    def _attn_fwd_gluon(q_desc, k_desc, v_desc, o_desc, lse_ptr, qk_scale, n_ctx, h_q,
                        GROUP: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr,
                        BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                        WARP_SPEC: gl.constexpr, num_warps: gl.constexpr):
        """Grid (cdiv(N, BLOCK_M), B*Hq). Descriptors over [B*H, N, D] views (see module doc)."""
        num_m = gl.cdiv(n_ctx, BLOCK_M)
        if CAUSAL:
            start_m = num_m - 1 - gl.program_id(0)  # most keys first: short programs fill the tail
        else:
            start_m = gl.program_id(0)
        bh = gl.program_id(1)
        kv_bh = (bh // h_q) * (h_q // GROUP) + (bh % h_q) // GROUP  # GQA: h -> h // GROUP

        k_smem = gl.allocate_shared_memory(k_desc.dtype, [STAGES] + k_desc.block_type.shape, k_desc.layout)
        v_smem = gl.allocate_shared_memory(v_desc.dtype, [STAGES] + v_desc.block_type.shape, v_desc.layout)
        k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(STAGES):
            mbarrier.init(k_ready.index(i), count=1)
            mbarrier.init(v_ready.index(i), count=1)
            mbarrier.init(k_empty.index(i), count=2)  # one arrive per consumer partition
        if WARP_SPEC:
            half: gl.constexpr = BLOCK_M // 2
            q_smem0 = gl.allocate_shared_memory(q_desc.dtype, q_desc.block_type.shape, q_desc.layout)
            q_smem1 = gl.allocate_shared_memory(q_desc.dtype, q_desc.block_type.shape, q_desc.layout)
            q_bar = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
            mbarrier.init(q_bar.index(0), count=1)
            mbarrier.init(q_bar.index(1), count=1)
            fence_async_shared()
            gl.warp_specialize([
                (_consumer, (q_desc, k_desc, v_desc, o_desc, lse_ptr, q_smem0, k_smem, v_smem,
                             q_bar.index(0), k_ready, v_ready, k_empty, qk_scale, n_ctx, bh, kv_bh,
                             start_m, 0, False, True, CAUSAL, BLOCK_M, half, BLOCK_N, HEAD_DIM,
                             STAGES, 4)),
                (_consumer, (q_desc, k_desc, v_desc, o_desc, lse_ptr, q_smem1, k_smem, v_smem,
                             q_bar.index(1), k_ready, v_ready, k_empty, qk_scale, n_ctx, bh, kv_bh,
                             start_m, half, False, True, CAUSAL, BLOCK_M, half, BLOCK_N, HEAD_DIM,
                             STAGES, 4)),
                (_producer, (q_desc, k_desc, v_desc, q_smem0, q_smem1, k_smem, v_smem,
                             q_bar.index(0), q_bar.index(1), k_ready, v_ready, k_empty, n_ctx, bh,
                             kv_bh, start_m, CAUSAL, BLOCK_M, BLOCK_N, STAGES)),
            ], [4, 1], [232, 40])
        else:
            q_smem = gl.allocate_shared_memory(q_desc.dtype, q_desc.block_type.shape, q_desc.layout)
            q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
            mbarrier.init(q_bar, count=1)
            fence_async_shared()
            mbarrier.expect(q_bar, q_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(q_desc, [bh, start_m * BLOCK_M, 0], q_bar, q_smem)
            _n_free, n_tiles = _tile_ranges(start_m, n_ctx, CAUSAL, BLOCK_M, BLOCK_N)
            for t in gl.static_range(STAGES):
                _load_kv(k_desc, v_desc, k_smem, v_smem, k_ready, v_ready, kv_bh, t, n_tiles,
                         BLOCK_N, STAGES)
            _consumer(q_desc, k_desc, v_desc, o_desc, lse_ptr, q_smem, k_smem, v_smem, q_bar,
                      k_ready, v_ready, k_empty, qk_scale, n_ctx, bh, kv_bh, start_m, 0, True,
                      False, CAUSAL, BLOCK_M, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, num_warps)


def _layouts(cfg: GluonConfig, head_dim: int, dtype) -> tuple:
    """Shared layouts and block shapes of the Q/O and K/V descriptors."""
    q_rows = cfg.block_m // 2 if cfg.warp_specialize else cfg.block_m
    q_block = [1, q_rows, head_dim]
    kv_block = [1, cfg.block_n, head_dim]
    return (q_block, gl.NVMMASharedLayout.get_default_for(q_block, dtype),
            kv_block, gl.NVMMASharedLayout.get_default_for(kv_block, dtype))


def _kernel_args(cfg: GluonConfig, *, head_dim: int, group: int, causal: bool) -> dict:
    return dict(GROUP=group, HEAD_DIM=head_dim, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
                STAGES=cfg.num_stages, CAUSAL=bool(causal), WARP_SPEC=cfg.warp_specialize)


def compile_for_sm90(cfg: GluonConfig, *, head_dim: int = 128, causal: bool = False,
                     group: int = 4, dtype: str = "bf16"):
    """Compile the kernel for sm_90 without a GPU (Triton's bundled ptxas).

    Returns Triton's ``CompiledKernel``: ``.asm`` holds ``ttgir``/``ptx``/``cubin``,
    ``.metadata`` the shared memory; registers and spills are read from the cubin by the
    caller (``n_regs``/``n_spills`` are only filled in once a driver loads it).
    """
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    gl_dtype = {"bf16": gl.bfloat16, "fp16": gl.float16}[dtype]
    q_block, q_layout, kv_block, kv_layout = _layouts(cfg, head_dim, gl_dtype)

    def desc(block, layout):
        return f"tensordesc<{dtype}[{','.join(map(str, block))}],{layout!r}>"

    constexprs = _kernel_args(cfg, head_dim=head_dim, group=group, causal=causal)
    constexprs["num_warps"] = cfg.num_warps
    signature = {"q_desc": desc(q_block, q_layout), "k_desc": desc(kv_block, kv_layout),
                 "v_desc": desc(kv_block, kv_layout), "o_desc": desc(q_block, q_layout),
                 "lse_ptr": "*fp32", "qk_scale": "fp32", "n_ctx": "i32", "h_q": "i32"}
    signature.update({name: "constexpr" for name in constexprs})
    src = GluonASTSource(_attn_fwd_gluon, signature, constexprs=constexprs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": cfg.num_warps})


@dataclasses.dataclass(frozen=True, kw_only=True)
class Sm90Build:
    """What ptxas made of one configuration (read from the cubin, no GPU needed)."""

    config: str
    causal: bool
    registers: int  # per thread
    spill_bytes: int  # local memory per thread (stack frame: spills); 0 means no spills
    shared_bytes: int  # dynamic shared memory per program
    wgmma: int  # wgmma.mma_async instructions in the PTX (0 would mean no tensor-core path)
    cubin_bytes: int


def sm90_build(cfg: GluonConfig, *, causal: bool, head_dim: int = 128) -> Sm90Build:
    """Compile for sm_90 and read registers and spills off the cubin with Triton's cuobjdump.

    Must run with ``TRITON_INTERPRET`` off: under the interpreter Triton's reductions are
    interpreter objects that Gluon cannot compile.
    """
    from kernels.occupancy import cubin_resources

    kernel = compile_for_sm90(cfg, causal=causal, head_dim=head_dim)
    cubin = kernel.asm["cubin"]
    registers, spill_bytes = cubin_resources(cubin)
    return Sm90Build(config=cfg.name, causal=bool(causal), registers=registers, spill_bytes=spill_bytes,
                     shared_bytes=int(kernel.metadata.shared),
                     wgmma=kernel.asm["ptx"].count("wgmma.mma_async"), cubin_bytes=len(cubin))


def gluon_attention_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool,
    sm_scale: float | None = None,
    config: GluonConfig | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention forward (prefill) on Hopper through the Gluon kernel.

    Parameters
    ----------
    q : torch.Tensor
        ``[B, Hq, N, D]`` queries, float16 or bfloat16, contiguous, on a CUDA device of
        capability 9.x; ``D`` in (64, 128).
    k, v : torch.Tensor
        ``[B, Hkv, N, D]`` keys and values, same dtype, contiguous; ``Hq % Hkv == 0`` (query
        head ``h`` reads KV head ``h // (Hq // Hkv)``).
    causal : bool
        Query ``i`` sees keys ``j <= i`` only.
    sm_scale : float, optional
        Softmax scale, default ``1 / sqrt(D)``; must be finite and positive.
    config : GluonConfig, optional
        Launch configuration (default :func:`pick_gluon_config`).

    Returns
    -------
    out : torch.Tensor
        ``[B, Hq, N, D]`` contiguous, q's dtype.
    lse : torch.Tensor
        ``[B, Hq, N]`` float32, natural-log log-sum-exp of each row's scaled scores.

    Raises
    ------
    ValueError
        Inputs the kernel cannot take (checked before launch), or no Gluon-capable GPU.
    """
    check_tensors(q, k, v)
    b, hq, n, d = q.shape
    scale = check_scale(sm_scale, d)
    if not hopper_gluon_available():
        raise ValueError("the Gluon kernel needs Triton's Gluon and a CUDA device of capability 9.x")
    if d not in GLUON_HEAD_DIMS:
        raise ValueError(f"head_dim must be one of {GLUON_HEAD_DIMS} for the Gluon kernel, got {d}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not t.is_contiguous() or t.data_ptr() % 16:
            raise ValueError(f"{name} must be contiguous with a 16-byte aligned base for TMA")
    cfg = config if config is not None else pick_gluon_config(head_dim=d, causal=bool(causal))
    hkv = k.shape[1]
    out = torch.empty((b, hq, n, d), dtype=q.dtype, device=q.device)
    lse = torch.empty((b, hq, n), dtype=torch.float32, device=q.device)
    gl_dtype = gl.bfloat16 if q.dtype == torch.bfloat16 else gl.float16
    q_block, q_layout, kv_block, kv_layout = _layouts(cfg, d, gl_dtype)
    # 3-D views: the copy engine bounds each head at N (zero fill on loads, clipped stores).
    q_desc = TensorDescriptor.from_tensor(q.view(b * hq, n, d), q_block, q_layout)
    o_desc = TensorDescriptor.from_tensor(out.view(b * hq, n, d), q_block, q_layout)
    k_desc = TensorDescriptor.from_tensor(k.view(b * hkv, n, d), kv_block, kv_layout)
    v_desc = TensorDescriptor.from_tensor(v.view(b * hkv, n, d), kv_block, kv_layout)
    grid = (triton.cdiv(n, cfg.block_m), b * hq)
    _attn_fwd_gluon[grid](
        q_desc, k_desc, v_desc, o_desc, lse, scale * LOG2_E, n, hq,
        **_kernel_args(cfg, head_dim=d, group=hq // hkv, causal=causal),
        num_warps=cfg.num_warps,
    )
    return out, lse

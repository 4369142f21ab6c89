"""Tiled FlashAttention-style forward pass (prefill) in Triton.

Algorithm (FlashAttention-2 forward, Dao 2023; online softmax of Milakov & Gimelshein 2018)
--------------------------------------------------------------------------------------------
One program owns ``BLOCK_M`` query rows of one query head. It walks the keys in tiles of
``BLOCK_N`` and keeps, per row, the running max ``m_i``, the running softmax denominator ``l_i``
and the unnormalised output ``acc`` (float32), never writing the ``N × N`` score matrix:

    for each K, V tile j:
        s    = q · k_jᵀ · scale · log2(e)          # log2(e) folded in, so exp2 replaces exp
        m'   = max(m_i, rowmax(s))
        p    = exp2(s − m')
        α    = exp2(m_i − m')                      # rescales what was accumulated so far
        l_i  = α · l_i + rowsum(p)
        acc  = α · acc + p · v_j                   # p cast to the input dtype for the tensor cores
        m_i  = m'
    out = acc / l_i ;  lse = (m_i + log2 l_i) · ln 2   (natural log, for a backward pass or a merge)

Causal prefill splits each program's key range in two: the tiles strictly left of the diagonal
(no mask needed, the hot loop) and the ``BLOCK_M`` keys on the diagonal (masked). A non-causal
sequence whose length is not a multiple of ``BLOCK_N`` gets one masked tail tile. Causal
programs are launched heaviest first (last query block first) so the tail of the grid is short.

Grouped-query attention: query head ``h`` reads KV head ``h // (Hq // Hkv)``, as in
:mod:`kernels.reference.dense`.

On Hopper, ``flash_attention_forward`` hands inputs it can take (contiguous, D 64 or 128, N >=
``GLUON_MIN_TOKENS``) to the Gluon kernel of :mod:`kernels.prefill.flash_gluon`, which schedules
each warpgroup explicitly (FlashAttention-3's overlap; 0.92-1.03x of cuDNN on the H200 at N >= 4K,
1.02-1.31x this kernel from N = 1K). ``backend="triton"`` keeps this kernel.

Loads: plain pointer loads (any strides with a contiguous head dim), or, for contiguous inputs
of N >= 2048 on the GPU, Hopper's bulk tensor copy (TMA) through host tensor descriptors over the
flattened ``[B*H*N, D]`` views. A tail tile then reads the next head's rows: their scores are
masked to -inf and their V rows zeroed, so NaN there cannot leak. Launch configurations come
from a per-(head dim, causal) table measured on an H200 (``benchmarks/results/tuning/prefill-tune-v*-h200.json``):
about 500-530 TFLOP/s at D = 128, N >= 4K, non-causal, and 450-490 causal; 560 / 470 at D = 256.

Sources
-------
* Dao et al., "FlashAttention", NeurIPS 2022; Dao, "FlashAttention-2", 2023.
* Triton tutorial 06 "Fused Attention" (structure of the inner loop, the causal stage split).

Limits
------
* Prefill only: ``N_q == N_k`` (for decode use :mod:`kernels.decode.paged`).
* Causal is aligned as in the reference (query ``i`` sees keys ``j <= i`` when ``N_q == N_k``).
* Head dim 64, 128 or 256 (Gemma-2/3); float16 or bfloat16; the head dim must be contiguous.
* Forward only (no backward kernel).
* Under ``TRITON_INTERPRET=1`` (CPU tests) the tile products run in float32, because the
  interpreter's bfloat16 ``tl.dot`` and arithmetic are wrong; on the GPU they run on bf16/fp16
  tensor cores with float32 accumulation.
"""

from __future__ import annotations

import dataclasses

import torch

from kernels.runtime import ensure_triton_backend, hopper_gluon_available, interpreter_active

# Triton decides interpret-or-compile when a kernel is decorated: choose before importing it.
ensure_triton_backend()

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from kernels.prefill.flash_gluon import GLUON_HEAD_DIMS, gluon_attention_forward  # noqa: E402
from kernels.reference.online_softmax import LOG2_E  # noqa: E402
from kernels.prefill.checks import check_scale, check_tensors  # noqa: E402

try:  # host-side tensor descriptors (TMA): triton >= 3.3; the pointer path works without them
    from triton.tools.tensor_descriptor import TensorDescriptor as _TensorDescriptor
except ImportError:  # pragma: no cover - older triton
    _TensorDescriptor = None

__all__ = ["FlashConfig", "flash_attention_forward", "pick_config", "gluon_preferred", "BACKENDS",
           "GLUON_MIN_TOKENS"]



def _interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (TRITON_INTERPRET=1)."""
    return interpreter_active()


@triton.jit
def _softmax_step(qk, m_i, l_i, qk_scale):
    """Online-softmax update for one score tile: returns (p, alpha, m_new, l_new)."""
    m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
    p = tl.math.exp2(qk * qk_scale - m_ij[:, None])  # one FMA + one exp2 per score
    alpha = tl.math.exp2(m_i - m_ij)  # 1 where the max did not move
    return p, alpha, m_ij, l_i * alpha + tl.sum(p, 1)


@triton.jit
def _attn_fwd_inner(
    acc,  # [BLOCK_M, HEAD_DIM] float32 running numerator
    l_i,  # [BLOCK_M] float32 running denominator
    m_i,  # [BLOCK_M] float32 running max, in the log2-scaled domain
    q,  # [BLOCK_M, HEAD_DIM] query tile, loaded once by the caller
    k_base,  # pointer to key 0 of this program's KV head (USE_TMA: K's tensor descriptor)
    v_base,  # pointer to value 0 of this program's KV head (USE_TMA: V's tensor descriptor)
    kv_row0,  # USE_TMA: row of key 0 of this KV head in the flattened [B*Hkv*N, D] view
    stride_kn,  # key-token stride (elements)
    stride_vn,  # value-token stride (elements)
    offs_m,  # [BLOCK_M] absolute query indices of this tile
    offs_n,  # [BLOCK_N] 0..BLOCK_N-1
    offs_d,  # [HEAD_DIM] 0..HEAD_DIM-1
    lo,  # first key of this range (multiple of BLOCK_N)
    hi,  # one past the last key of this range
    n_ctx,  # sequence length: keys at or past it are padding
    qk_scale,  # sm_scale * log2(e)
    BLOCK_N: tl.constexpr,
    MASK: tl.constexpr,  # 0: no mask (hot loop); 1: causal diagonal; 2: key tail (j < n_ctx)
    COMPUTE_F32: tl.constexpr,  # interpreter only: do the products in float32
    USE_TMA: tl.constexpr,  # K/V tiles come through Hopper's bulk tensor copy (descriptors)
    WARP_SPEC: tl.constexpr,  # let Triton split producer / consumer warps (where supported)
):
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WARP_SPEC):
        offs_kn = start_n + offs_n
        if USE_TMA:
            # Rows past n_ctx belong to the next head (or are zero-filled past the tensor's end);
            # their scores are masked below and their V rows zeroed.
            k = k_base.load([kv_row0 + start_n, 0])
        elif MASK == 0:
            # Every key of these tiles exists: unmasked loads keep the hot loop lean.
            k = tl.load(k_base + offs_kn[:, None] * stride_kn + offs_d[None, :])
        else:
            # Keys past n_ctx may be garbage (even NaN) in a padded buffer: load zeros instead.
            k = tl.load(
                k_base + offs_kn[:, None] * stride_kn + offs_d[None, :],
                mask=offs_kn[:, None] < n_ctx,
                other=0.0,
            )
        if COMPUTE_F32:
            k = k.to(tl.float32)
        qk = tl.dot(q, tl.trans(k))  # [BLOCK_M, BLOCK_N] float32 raw scores
        if MASK == 1:
            # Causal: query i sees key j <= i. For real rows (i < n_ctx) this also hides keys
            # >= n_ctx; padding rows are never stored.
            qk = tl.where(offs_m[:, None] >= offs_kn[None, :], qk, float("-inf"))
        elif MASK == 2:
            qk = tl.where(offs_kn[None, :] < n_ctx, qk, float("-inf"))
        # Every row sees at least one key in its first tile, so the running max is finite and
        # (-inf) - max is -inf, never NaN.
        p, alpha, m_i, l_i = _softmax_step(qk, m_i, l_i, qk_scale)
        acc = acc * alpha[:, None]
        if USE_TMA:
            v = v_base.load([kv_row0 + start_n, 0])
            if MASK != 0:
                # p is 0 there, but 0 * NaN would not be: zero the rows past the sequence.
                v = tl.where(offs_kn[:, None] < n_ctx, v, 0.0)
        elif MASK == 0:
            v = tl.load(v_base + offs_kn[:, None] * stride_vn + offs_d[None, :])
        else:
            v = tl.load(
                v_base + offs_kn[:, None] * stride_vn + offs_d[None, :],
                mask=offs_kn[:, None] < n_ctx,
                other=0.0,
            )
        if COMPUTE_F32:
            v = v.to(tl.float32)
        # p goes to the tensor cores in the input dtype (bf16/fp16), accumulating in float32.
        acc = tl.dot(p.to(v.dtype), v, acc)
    return acc, l_i, m_i


# n_ctx is not specialised: one compiled kernel serves every length (tails are masked anyway).
@triton.jit(do_not_specialize=["n_ctx"])
def _attn_fwd_kernel(
    Q,  # [B, Hq, N, D] queries (USE_TMA: descriptor of the contiguous [B*Hq*N, D] view)
    K,  # [B, Hkv, N, D] keys (USE_TMA: descriptor of [B*Hkv*N, D])
    V,  # [B, Hkv, N, D] values (USE_TMA: descriptor of [B*Hkv*N, D])
    Out,  # [B, Hq, N, D] output, q's dtype
    Lse,  # [B, Hq, N] float32 log-sum-exp (natural log), contiguous
    qk_scale,  # sm_scale * log2(e)
    stride_qb, stride_qh, stride_qn,  # q strides (elements); head dim is contiguous
    stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_on,
    n_ctx,  # sequence length N (queries and keys)
    H_Q,  # number of query heads
    GROUP: tl.constexpr,  # Hq // Hkv query heads per KV head
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,  # query rows per program
    BLOCK_N: tl.constexpr,  # keys per inner tile; divides BLOCK_M
    CAUSAL: tl.constexpr,
    COMPUTE_F32: tl.constexpr,  # interpreter only (bf16 tl.dot is wrong there)
    USE_TMA: tl.constexpr,  # Q/K/V are tensor descriptors (contiguous inputs, Hopper+)
    WARP_SPEC: tl.constexpr,  # warp-specialised inner loop (triton >= 3.4 where supported)
):
    num_m = tl.cdiv(n_ctx, BLOCK_M)
    if CAUSAL:
        # Last query block has the most keys: launch it first so short programs fill the tail.
        start_m = num_m - 1 - tl.program_id(0)
    else:
        start_m = tl.program_id(0)
    off_bh = tl.program_id(1)
    off_b = off_bh // H_Q
    off_h = off_bh % H_Q
    off_kvh = off_h // GROUP  # GQA: query heads h*GROUP..h*GROUP+GROUP-1 share KV head h

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    o_base = Out + off_b.to(tl.int64) * stride_ob + off_h.to(tl.int64) * stride_oh

    if USE_TMA:
        # Row indices into the flattened [B*H*N, D] views (int32: fine below 2^31 rows).
        kv_row0 = (off_b * (H_Q // GROUP) + off_kvh) * n_ctx
        k_base = K
        v_base = V
        # Tail rows of the last block read the next head's queries: never stored.
        q = Q.load([off_bh * n_ctx + start_m * BLOCK_M, 0])
    else:
        kv_row0 = 0
        # 64-bit base offsets: B * H * N * D can exceed 2^31 elements at long contexts.
        q_base = Q + off_b.to(tl.int64) * stride_qb + off_h.to(tl.int64) * stride_qh
        k_base = K + off_b.to(tl.int64) * stride_kb + off_kvh.to(tl.int64) * stride_kh
        v_base = V + off_b.to(tl.int64) * stride_vb + off_kvh.to(tl.int64) * stride_vh
        q_ptrs = q_base + offs_m[:, None] * stride_qn + offs_d[None, :]
        q = tl.load(q_ptrs, mask=offs_m[:, None] < n_ctx, other=0.0)
    if COMPUTE_F32:
        q = q.to(tl.float32)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)

    if CAUSAL:
        # Off-diagonal: keys [0, start_m*BLOCK_M) are all <= every query of this block.
        acc, l_i, m_i = _attn_fwd_inner(
            acc, l_i, m_i, q, k_base, v_base, kv_row0, stride_kn, stride_vn, offs_m, offs_n, offs_d,
            0, start_m * BLOCK_M, n_ctx, qk_scale, BLOCK_N, 0, COMPUTE_F32, USE_TMA, WARP_SPEC,
        )
        # Diagonal: keys [start_m*BLOCK_M, (start_m+1)*BLOCK_M), masked.
        acc, l_i, m_i = _attn_fwd_inner(
            acc, l_i, m_i, q, k_base, v_base, kv_row0, stride_kn, stride_vn, offs_m, offs_n, offs_d,
            start_m * BLOCK_M, tl.minimum((start_m + 1) * BLOCK_M, n_ctx), n_ctx, qk_scale,
            BLOCK_N, 1, COMPUTE_F32, USE_TMA, False,
        )
    else:
        n_full = (n_ctx // BLOCK_N) * BLOCK_N  # keys in whole tiles
        acc, l_i, m_i = _attn_fwd_inner(
            acc, l_i, m_i, q, k_base, v_base, kv_row0, stride_kn, stride_vn, offs_m, offs_n, offs_d,
            0, n_full, n_ctx, qk_scale, BLOCK_N, 0, COMPUTE_F32, USE_TMA, WARP_SPEC,
        )
        # At most one partial tile left: mask the keys past n_ctx.
        acc, l_i, m_i = _attn_fwd_inner(
            acc, l_i, m_i, q, k_base, v_base, kv_row0, stride_kn, stride_vn, offs_m, offs_n, offs_d,
            n_full, n_ctx, n_ctx, qk_scale, BLOCK_N, 2, COMPUTE_F32, USE_TMA, False,
        )

    acc = acc / l_i[:, None]
    lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453  # base 2 -> natural log (ln 2)
    row_ok = offs_m < n_ctx
    lse_ptrs = Lse + off_bh.to(tl.int64) * n_ctx + offs_m
    tl.store(lse_ptrs, lse, mask=row_ok)
    o_ptrs = o_base + offs_m[:, None] * stride_on + offs_d[None, :]
    tl.store(o_ptrs, acc.to(Out.dtype.element_ty), mask=row_ok[:, None])


@dataclasses.dataclass(frozen=True, kw_only=True)
class FlashConfig:
    """Launch configuration of the forward kernel.

    ``block_n`` must divide ``block_m`` (the causal diagonal is walked in ``block_n`` steps).
    """

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    # Load Q/K/V tiles with the bulk tensor copy engine (TMA) through host tensor descriptors.
    # Needs contiguous inputs and triton.tools.tensor_descriptor; otherwise pointer loads.
    use_tma: bool = False
    # tl.range(..., warp_specialize=True) on the hot loop: producer/consumer warp split.
    warp_specialize: bool = False
    # Register cap per thread (Triton's maxnreg): 128 lets two 8-warp programs share an SM, so
    # one program's softmax can overlap the other's matrix products. None: the compiler's choice.
    maxnreg: int | None = None

    def __post_init__(self) -> None:
        for name in ("block_m", "block_n"):
            val = getattr(self, name)
            if val < 16 or val & (val - 1):
                raise ValueError(f"{name} must be a power of two >= 16, got {val}")
        if self.block_m % self.block_n:
            raise ValueError(f"block_n ({self.block_n}) must divide block_m ({self.block_m})")
        if self.num_warps not in (1, 2, 4, 8, 16):
            raise ValueError(f"num_warps must be 1, 2, 4, 8 or 16, got {self.num_warps}")
        if self.num_stages < 1:
            raise ValueError(f"num_stages must be >= 1, got {self.num_stages}")
        if self.maxnreg is not None and not 24 <= self.maxnreg <= 255:
            raise ValueError(f"maxnreg must be in 24..255 (or None), got {self.maxnreg}")


# Per-shape table, tuned on an H200: the timings are in benchmarks/results/tuning/prefill-tune-*-h200.json.
# Key: (head_dim, causal). BLOCK_M = 128 with 8 warps = two warpgroups of m64 wgmma; TMA
# descriptor loads keep registers under the 255 cap (198 vs 255 for pointer loads).
_GPU_CONFIGS: dict[tuple[int, bool], FlashConfig] = {
    # D = 64 non-causal: 446.9 TFLOP/s with this against 372.5 for the 128x128 TMA config.
    (64, False): FlashConfig(block_m=128, block_n=64, num_warps=8, num_stages=3),
    (64, True): FlashConfig(block_m=128, block_n=128, num_warps=8, num_stages=3, use_tma=True),
    # D = 128: two programs per SM, so one's softmax can overlap the other's matrix products.
    # Non-causal: 128 x 64 tiles, 8 warps, 2 stages, registers capped at 128 (two 8-warp programs
    # fit the 64K-register file): 503-520 TFLOP/s at B1/B4 N4K over three runs, against 462-502
    # for the 128 x 128 TMA entry before. Causal: 64-row programs of one warpgroup (4 warps,
    # 3 stages, 112 KiB of shared memory): B1 N4K 448-455 against 406-409, B4 N4K 473-503 against
    # 432-450 TFLOP/s.
    (128, False): FlashConfig(block_m=128, block_n=64, num_warps=8, num_stages=2, maxnreg=128),
    (128, True): FlashConfig(block_m=64, block_n=64, num_warps=4, num_stages=3, use_tma=True),
    # D = 256: a 128 x 256 fp32 accumulator is 128 registers per thread at 8 warps, and one
    # 64-key K + V stage is 64 KiB: 64-key steps, 2 stages (Q 64 KiB + 128 KiB of stages).
    (256, False): FlashConfig(block_m=128, block_n=64, num_warps=8, num_stages=2, use_tma=True),
    (256, True): FlashConfig(block_m=128, block_n=64, num_warps=8, num_stages=2, use_tma=True),
}
# Below this many tokens a launch takes ~0.1 ms or less and the host-side descriptor set-up
# shows in the time (measured at N = 1K, B = 1: TMA 126 TFLOP/s against 221-357 with pointers).
_TMA_MIN_TOKENS = 2048
# Interpreter (CPU tests): small tiles so tails and several tiles are exercised at tiny N.
_INTERPRETER_CONFIG = FlashConfig(block_m=32, block_n=16, num_warps=4, num_stages=1)


def pick_config(*, head_dim: int, causal: bool, n_ctx: int) -> FlashConfig:
    """Launch configuration for a shape: the tuned table on a GPU, small tiles when interpreting."""
    if _interpreting():
        return _INTERPRETER_CONFIG
    cfg = _GPU_CONFIGS[(head_dim, causal)]
    if n_ctx <= 64:
        # Very short prompts: a 128-row tile would be mostly padding.
        return FlashConfig(block_m=64, block_n=64 if head_dim <= 128 else 32, num_warps=4, num_stages=2)
    if n_ctx < _TMA_MIN_TOKENS:
        return dataclasses.replace(cfg, use_tma=False)
    return cfg


BACKENDS = ("auto", "triton", "gluon")
# From this many tokens the Gluon kernel is the default on Hopper: on the H200 it was 1.02-1.31x
# the triton.language kernel at every N >= 1K shape timed, and tied it (0.99-1.01x) at N = 512 causal.
GLUON_MIN_TOKENS = 1024


def gluon_preferred(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """Whether ``backend="auto"`` takes the Gluon kernel for these (already checked) inputs."""
    return (q.shape[2] >= GLUON_MIN_TOKENS and q.shape[3] in GLUON_HEAD_DIMS and hopper_gluon_available()
            and all(t.is_contiguous() and t.data_ptr() % 16 == 0 for t in (q, k, v)))


def _tma_eligible(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """TMA descriptors need this Triton's host TensorDescriptor, contiguous tensors and 16-B bases."""
    if _TensorDescriptor is None:
        return False
    return all(t.is_contiguous() and t.data_ptr() % 16 == 0 for t in (q, k, v))


def flash_attention_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool,
    sm_scale: float | None = None,
    config: FlashConfig | None = None,
    backend: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tiled attention forward pass (prefill): softmax(Q Kᵀ · sm_scale) V without the N×N matrix.

    ``backend="auto"`` runs the Gluon kernel (:mod:`kernels.prefill.flash_gluon`) where it
    applies and was measured faster (a Hopper GPU, D 64 or 128, contiguous inputs, N >=
    ``GLUON_MIN_TOKENS``), the Triton kernel of this module otherwise; ``"triton"`` always runs
    this module's kernel, ``"gluon"`` the Gluon one (refused where it cannot run).

    Parameters
    ----------
    q : torch.Tensor
        ``[B, Hq, N, D]`` queries, float16 or bfloat16, CUDA (CPU only under
        ``TRITON_INTERPRET=1``). Any strides with the head dim contiguous.
    k, v : torch.Tensor
        ``[B, Hkv, N, D]`` keys and values, same dtype and device; ``Hq % Hkv == 0``
        (query head ``h`` uses KV head ``h // (Hq // Hkv)``). Prefill: same ``N`` as q.
    causal : bool
        Query ``i`` sees keys ``j <= i`` only.
    sm_scale : float, optional
        Softmax scale, default ``1 / sqrt(D)``; must be positive.
    config : FlashConfig, optional
        Override the per-shape launch configuration of the Triton kernel (a tuning variant);
        implies the Triton kernel.
    backend : {"auto", "triton", "gluon"}
        Which kernel runs (see above).

    Returns
    -------
    out : torch.Tensor
        ``[B, Hq, N, D]`` contiguous, q's dtype.
    lse : torch.Tensor
        ``[B, Hq, N]`` float32, natural-log log-sum-exp of the scaled scores of each row.

    Raises
    ------
    ValueError
        Unsupported dtype, head dim, shape, stride, device or head ratio; checked before launch.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    check_tensors(q, k, v)
    b, hq, n, d = q.shape
    scale = check_scale(sm_scale, d)
    if backend == "gluon" or (backend == "auto" and config is None and gluon_preferred(q, k, v)):
        return gluon_attention_forward(q, k, v, causal=causal, sm_scale=scale)
    cfg = config if config is not None else pick_config(head_dim=d, causal=bool(causal), n_ctx=n)
    out = torch.empty((b, hq, n, d), dtype=q.dtype, device=q.device)
    lse = torch.empty((b, hq, n), dtype=torch.float32, device=q.device)
    use_tma = cfg.use_tma and _tma_eligible(q, k, v)
    if use_tma:
        # 2-D descriptors over the contiguous [B*H*N, D] views; the kernel indexes rows.
        q_arg = _TensorDescriptor(q, [b * hq * n, d], [d, 1], [cfg.block_m, d])
        k_arg = _TensorDescriptor(k, [b * k.shape[1] * n, d], [d, 1], [cfg.block_n, d])
        v_arg = _TensorDescriptor(v, [b * k.shape[1] * n, d], [d, 1], [cfg.block_n, d])
    else:
        q_arg, k_arg, v_arg = q, k, v
    grid = (triton.cdiv(n, cfg.block_m), b * hq)
    _attn_fwd_kernel[grid](
        q_arg, k_arg, v_arg, out, lse,
        scale * LOG2_E,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        out.stride(0), out.stride(1), out.stride(2),
        n, hq,
        GROUP=hq // k.shape[1],
        HEAD_DIM=d,
        BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n,
        CAUSAL=bool(causal),
        COMPUTE_F32=_interpreting(),
        USE_TMA=use_tma,
        WARP_SPEC=cfg.warp_specialize,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
        **({} if cfg.maxnreg is None or _interpreting() else {"maxnreg": cfg.maxnreg}),
    )
    return out, lse


"""RoPE on the new token's query and key heads and the write of its K/V into the paged pools, in
one kernel (vLLM launches ``rotary_embedding`` and ``reshape_and_cache_flash``; Qwen3's per-head
Q/K RMSNorm joins them as in its fused ``qk_norm_rope``).

Algorithm
---------
``qkv`` [tokens, (q_heads + 2·kv_heads) · head_dim] is the QKV projection's output, the query
heads, then the key heads, then the value heads. One program per (token, head) over the query
and key heads; for a head ``x`` = (x₁, x₂), its two halves, at the token's position ``p``::

    x      = x · rsqrt(mean(x²) + eps) · norm_weight          (only with per-head norms)
    θ_j    = p · inv_freq[j]                                    j < head_dim ÷ 2
    rope(x) = (x₁ cos θ − x₂ sin θ,  x₂ cos θ + x₁ sin θ)        (rotate-half, Llama's layout)

A query head is written to ``q_out`` [tokens, q_heads, head_dim]; a key head, with the value
head of the same index, goes to its page: ``block = block_table[token, p ÷ page]``, slot
``p mod page`` of the pools [blocks, kv_heads, page, head_dim]. Tables of windowed layers map a
position to its ring slot already, so the kernel does not know windows.

Limits: ``head_dim`` a power of two (16–512); positions below 2²⁴ (exact in float32).
"""

from __future__ import annotations

from kernels.runtime import ensure_triton_backend

ensure_triton_backend()  # before triton is imported: the interpreter is chosen at decoration

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

__all__ = ["rope_and_cache"]


@triton.jit
def _rope_cache_kernel(
    qkv_ptr,  # [tokens, (N_Q + 2 N_KV) · HEAD_DIM]
    pos_ptr,  # [tokens] int64: the position of each token
    inv_freq_ptr,  # [HEAD_DIM / 2] fp32
    norm_ptr,  # [2, HEAD_DIM]: query then key norm weights (unused without HAS_NORM)
    q_out_ptr,  # [tokens, N_Q, HEAD_DIM]
    k_pool_ptr, v_pool_ptr,  # [blocks, N_KV, PAGE, HEAD_DIM]
    table_ptr,  # [tokens, pages per sequence] int32
    eps,
    stride_qkv, stride_qo_t, stride_qo_h,
    stride_pool_b, stride_pool_h, stride_pool_s,
    stride_table,
    N_Q: tl.constexpr, N_KV: tl.constexpr, HEAD_DIM: tl.constexpr, PAGE: tl.constexpr,
    HAS_NORM: tl.constexpr,
):
    token = tl.program_id(0)
    head = tl.program_id(1)  # query heads first, then key heads: the column order of qkv
    HALF: tl.constexpr = HEAD_DIM // 2
    offs = tl.arange(0, HALF)
    src = qkv_ptr + token * stride_qkv + head * HEAD_DIM
    x1 = tl.load(src + offs).to(tl.float32)
    x2 = tl.load(src + HALF + offs).to(tl.float32)
    if HAS_NORM:
        is_key = (head >= N_Q).to(tl.int32)
        rstd = 1.0 / tl.sqrt((tl.sum(x1 * x1, axis=0) + tl.sum(x2 * x2, axis=0)) / HEAD_DIM + eps)
        x1 = x1 * rstd * tl.load(norm_ptr + is_key * HEAD_DIM + offs).to(tl.float32)
        x2 = x2 * rstd * tl.load(norm_ptr + is_key * HEAD_DIM + HALF + offs).to(tl.float32)
    pos = tl.load(pos_ptr + token)
    theta = pos.to(tl.float32) * tl.load(inv_freq_ptr + offs)
    cos, sin = tl.cos(theta), tl.sin(theta)
    r1 = x1 * cos - x2 * sin
    r2 = x2 * cos + x1 * sin
    if head < N_Q:
        dst = q_out_ptr + token * stride_qo_t + head * stride_qo_h
        tl.store(dst + offs, r1.to(q_out_ptr.dtype.element_ty))
        tl.store(dst + HALF + offs, r2.to(q_out_ptr.dtype.element_ty))
    else:
        kv_head = head - N_Q
        block = tl.load(table_ptr + token * stride_table + pos // PAGE).to(tl.int64)
        at = block * stride_pool_b + kv_head * stride_pool_h + (pos % PAGE) * stride_pool_s
        tl.store(k_pool_ptr + at + offs, r1.to(k_pool_ptr.dtype.element_ty))
        tl.store(k_pool_ptr + at + HALF + offs, r2.to(k_pool_ptr.dtype.element_ty))
        # The value head of the same index sits N_KV heads further along the row.
        full = tl.arange(0, HEAD_DIM)
        v = tl.load(src + N_KV * HEAD_DIM + full)
        tl.store(v_pool_ptr + at + full, v.to(v_pool_ptr.dtype.element_ty))


def rope_and_cache(qkv: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor, k_pool: torch.Tensor,
                   v_pool: torch.Tensor, block_table: torch.Tensor, *, q_heads: int, kv_heads: int,
                   qk_norm: torch.Tensor | None = None, eps: float = 1e-6) -> torch.Tensor:
    """Rotated query heads of each token, with its rotated K and its V written into the pools.

    Parameters
    ----------
    qkv : [tokens, (q_heads + 2·kv_heads) · head_dim], 16-bit, rows contiguous
    positions : [tokens] int64, each token's position (its slot in the cache)
    inv_freq : [head_dim / 2] float32, RoPE's inverse frequencies
    k_pool, v_pool : [blocks, kv_heads, page, head_dim], ``qkv``'s dtype, written in place
    block_table : [tokens, pages] int32, a page's pool block (token ``t``'s sequence)
    qk_norm : [2, head_dim], the per-head RMSNorm weights of the query then the key heads
        (Qwen3), or None for no per-head norm
    eps : the per-head norm's epsilon

    Returns
    -------
    q : [tokens, q_heads, head_dim], ``qkv``'s dtype
    """
    tokens = qkv.shape[0]
    head_dim = inv_freq.shape[0] * 2
    _check(qkv, positions, inv_freq, k_pool, v_pool, block_table, q_heads, kv_heads, head_dim, qk_norm)
    q = torch.empty((tokens, q_heads, head_dim), device=qkv.device, dtype=qkv.dtype)
    norms = inv_freq if qk_norm is None else qk_norm  # a valid pointer the kernel never reads without norms
    if tokens:
        _rope_cache_kernel[(tokens, q_heads + kv_heads)](
            qkv, positions, inv_freq, norms, q, k_pool, v_pool, block_table, float(eps),
            qkv.stride(0), q.stride(0), q.stride(1), k_pool.stride(0), k_pool.stride(1), k_pool.stride(2),
            block_table.stride(0),
            N_Q=q_heads, N_KV=kv_heads, HEAD_DIM=head_dim, PAGE=k_pool.shape[2], HAS_NORM=qk_norm is not None)
    return q


def _check(qkv, positions, inv_freq, k_pool, v_pool, block_table, q_heads, kv_heads, head_dim, qk_norm):
    if not (16 <= head_dim <= 512 and head_dim & (head_dim - 1) == 0):
        raise ValueError(f"inv_freq: {inv_freq.shape[0]} frequencies give head_dim {head_dim}, "
                         "not a power of two in 16..512")
    if inv_freq.dim() != 1 or inv_freq.dtype != torch.float32:
        raise ValueError(f"inv_freq: a [head_dim / 2] float32 tensor, got {tuple(inv_freq.shape)} {inv_freq.dtype}")
    if q_heads < 1 or kv_heads < 1 or q_heads % kv_heads:
        raise ValueError(f"q_heads, kv_heads: {q_heads}, {kv_heads}: both ≥ 1 and q_heads a multiple of kv_heads")
    width = (q_heads + 2 * kv_heads) * head_dim
    if qkv.dim() != 2 or qkv.shape[1] != width or qkv.stride(-1) != 1:
        raise ValueError(f"qkv: expected [tokens, {width}] with a contiguous last dimension, got {tuple(qkv.shape)}")
    if qkv.dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"qkv: bfloat16 or float16, got {qkv.dtype}")
    if positions.shape != (qkv.shape[0],) or positions.dtype != torch.int64:
        raise ValueError(f"positions: expected [{qkv.shape[0]}] int64, got {tuple(positions.shape)} {positions.dtype}")
    for name, pool in (("k_pool", k_pool), ("v_pool", v_pool)):
        if pool.dim() != 4 or pool.shape[1] != kv_heads or pool.shape[3] != head_dim or pool.dtype != qkv.dtype \
                or pool.stride(-1) != 1:
            raise ValueError(f"{name}: expected [blocks, {kv_heads}, page, {head_dim}] {qkv.dtype}, "
                             f"got {tuple(pool.shape)} {pool.dtype}")
    if k_pool.shape != v_pool.shape or k_pool.stride() != v_pool.stride():
        raise ValueError(f"v_pool: shape and strides must equal k_pool's, got {tuple(v_pool.shape)}")
    if block_table.dim() != 2 or block_table.shape[0] != qkv.shape[0] or block_table.dtype != torch.int32:
        raise ValueError(f"block_table: expected [{qkv.shape[0]}, pages] int32, got "
                         f"{tuple(block_table.shape)} {block_table.dtype}")
    if qk_norm is not None and (qk_norm.shape != (2, head_dim) or not qk_norm.is_contiguous()):
        raise ValueError(f"qk_norm: a contiguous [2, {head_dim}] tensor, got {tuple(qk_norm.shape)}")

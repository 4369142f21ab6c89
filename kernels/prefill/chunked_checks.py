"""Input checks of :func:`kernels.prefill.chunked.chunked_prefill_attention`, before any launch;
each names the argument and the offending values.
"""

from __future__ import annotations

import math

import torch

from kernels.attention_span import FULL, Span
from kernels.runtime import interpreter_active

__all__ = ["check_varlen_inputs", "check_table_entries", "scale_tensor", "Q_DTYPES", "KV_DTYPES", "FP8_DTYPE",
           "MAX_BLOCK_SIZE"]

MAX_BLOCK_SIZE = 256
Q_DTYPES = (torch.bfloat16, torch.float16)
FP8_DTYPE = torch.float8_e4m3fn
KV_DTYPES = (torch.bfloat16, torch.float16, FP8_DTYPE)




def check_varlen_inputs(q, k_cache, v_cache, block_tables, plan) -> None:
    """Dtypes, shapes, strides, devices and table capacity against ``plan`` (a ``BatchPlan``)."""
    for name, t, ndim, dtypes in (("q", q, 3, Q_DTYPES), ("k_cache", k_cache, 4, KV_DTYPES),
                                  ("v_cache", v_cache, 4, KV_DTYPES), ("block_tables", block_tables, 2, (torch.int32,))):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != ndim:
            raise ValueError(f"{name} must have {ndim} dims, got shape {tuple(t.shape)}")
        if t.dtype not in dtypes:
            raise ValueError(f"{name} dtype must be one of {[str(d) for d in dtypes]}, got {t.dtype}")
        if t.stride(-1) != 1 and t.shape[-1] > 1:
            raise ValueError(f"{name} last dim must be contiguous (stride 1), got strides {t.stride()}")
    if k_cache.shape != v_cache.shape or k_cache.dtype != v_cache.dtype:
        raise ValueError(f"k_cache and v_cache differ: {tuple(k_cache.shape)} {k_cache.dtype} and "
                         f"{tuple(v_cache.shape)} {v_cache.dtype}")
    if k_cache.dtype != FP8_DTYPE and k_cache.dtype != q.dtype:
        raise ValueError(f"k_cache dtype {k_cache.dtype} must equal q dtype {q.dtype} (or be {FP8_DTYPE})")
    total_q, n_q_heads, head_dim = q.shape
    num_blocks, n_kv_heads, block_size, kv_dim = k_cache.shape
    want = (plan.total_q, plan.n_q_heads, plan.head_dim)
    if (total_q, n_q_heads, head_dim) != want:
        raise ValueError(f"q must be [total_q, n_q_heads, head_dim] = {list(want)} for this plan, got {list(q.shape)}")
    if (n_kv_heads, kv_dim) != (plan.n_kv_heads, plan.head_dim):
        raise ValueError(f"k_cache has {n_kv_heads} KV heads of dim {kv_dim}; the plan has "
                         f"{plan.n_kv_heads} of dim {plan.head_dim}")
    if block_size < 1 or block_size > MAX_BLOCK_SIZE or block_size & (block_size - 1):
        raise ValueError(f"k_cache block_size (dim 2) must be a power of two in 1..{MAX_BLOCK_SIZE}, got {block_size}")
    if block_tables.shape[0] != plan.batch:
        raise ValueError(f"block_tables has {block_tables.shape[0]} rows for a batch of {plan.batch}")
    capacity = block_tables.shape[1] * block_size
    if max(plan.seq_lens) > capacity:
        raise ValueError(f"seq_lens up to {max(plan.seq_lens)} exceed the tables' {block_tables.shape[1]} "
                         f"columns x block_size {block_size} = {capacity} tokens")
    devices = {t.device for t in (q, k_cache, v_cache, block_tables, plan.tiles)}
    if len(devices) != 1:
        raise ValueError(f"q, the caches, block_tables and the plan must share one device, got {devices}")
    if not q.is_cuda and not interpreter_active():
        raise ValueError(f"q is on {q.device}: CPU tensors need the Triton interpreter (TRITON_INTERPRET=1)")


def check_table_entries(block_tables: torch.Tensor, plan, num_blocks: int, block_size: int) -> None:
    """Every table entry a sequence's queries read indexes the pool (one host sync). With a
    window or chunks, pages before the first key its first new token sees may hold anything."""
    used_blocks = (plan.seq_lens_t.to(torch.int64) + block_size - 1) // block_size
    cols = torch.arange(block_tables.shape[1], device=block_tables.device)
    used = cols[None, :] < used_blocks[:, None]
    span: Span = plan.span
    if span != FULL:
        context = plan.seq_lens_t.to(torch.int64) - (plan.cu_seqlens_q[1:] - plan.cu_seqlens_q[:-1]).to(torch.int64)
        if span.kind == "sliding":
            first = (context - span.size + 1).clamp(min=0)
        else:
            first = torch.div(context, span.size, rounding_mode="floor") * span.size
        used &= cols[None, :] >= (first // block_size)[:, None]
    bad = used & ((block_tables < 0) | (block_tables >= num_blocks))
    if bool(bad.any()):
        where = torch.nonzero(bad)[:8].tolist()
        raise ValueError(f"block_tables entries must index the pool 0..{num_blocks - 1}; (sequence, block) "
                         f"{[tuple(w) for w in where]} hold {[int(block_tables[r, c]) for r, c in where]}")


def scale_tensor(name: str, scale, kv_dtype: torch.dtype, n_kv_heads: int, device) -> torch.Tensor | None:
    """A k/v scale as a [n_kv_heads] fp32 tensor (None for a bf16/fp16 cache)."""
    if kv_dtype != FP8_DTYPE:
        if scale is not None:
            raise ValueError(f"{name} applies only to a {FP8_DTYPE} cache; the cache is {kv_dtype}")
        return None
    if scale is None:
        return torch.ones(n_kv_heads, dtype=torch.float32, device=device)
    if isinstance(scale, (int, float)):
        if not math.isfinite(scale) or scale <= 0:
            raise ValueError(f"{name} must be a finite positive number, got {scale}")
        return torch.full((n_kv_heads,), float(scale), dtype=torch.float32, device=device)
    if not isinstance(scale, torch.Tensor) or scale.numel() not in (1, n_kv_heads):
        raise ValueError(f"{name} must be a float or a tensor of 1 or {n_kv_heads} elements, got {scale!r:.80}")
    return scale.reshape(-1).to(device=device, dtype=torch.float32).expand(n_kv_heads).contiguous()

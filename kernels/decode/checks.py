"""Input checks of the paged decode wrappers: run before any launch, each error names the
argument and prints the offending values (FlashInfer's ``_check_*`` style).
"""

from __future__ import annotations

import math

import torch

from kernels.attention_span import FULL, Span
from kernels.decode.config import FP8_DTYPE
from kernels.cache.int4 import INT4_HEAD_DIMS, SCALE_DTYPE, Int4Pool
from kernels.runtime import interpreter_active

__all__ = ["check_tensor", "check_shapes", "check_strides", "check_scale", "check_values",
           "check_int4_inputs", "first_visible_tokens", "on_16_byte_grid", "check_16_byte_grid", "SUPPORTED_HEAD_DIMS", "Q_DTYPES",
           "KV_DTYPES", "MAX_BLOCK_SIZE"]

SUPPORTED_HEAD_DIMS = (16, 32, 64, 128, 256)  # tl.arange needs powers of two; 16 is the dot minimum
Q_DTYPES = (torch.bfloat16, torch.float16)
KV_DTYPES = (torch.bfloat16, torch.float16, FP8_DTYPE)
MAX_BLOCK_SIZE = 256


def check_tensor(name: str, t: object, ndim: int, dtypes: tuple[torch.dtype, ...]) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dims, got shape {tuple(t.shape)}")
    if t.dtype not in dtypes:
        allowed = ", ".join(str(d) for d in dtypes)
        raise ValueError(f"{name} dtype must be one of ({allowed}), got {t.dtype}")
    return t


def check_shapes(q, k_cache, v_cache, block_tables, seq_lens) -> None:
    check_tensor("q", q, 3, Q_DTYPES)
    check_tensor("k_cache", k_cache, 4, KV_DTYPES)
    check_tensor("v_cache", v_cache, 4, KV_DTYPES)
    check_tensor("block_tables", block_tables, 2, (torch.int32,))
    check_tensor("seq_lens", seq_lens, 1, (torch.int32,))
    if k_cache.shape != v_cache.shape:
        raise ValueError(
            f"k_cache and v_cache must have the same shape, got {tuple(k_cache.shape)} and "
            f"{tuple(v_cache.shape)}"
        )
    if k_cache.dtype != v_cache.dtype:
        raise ValueError(f"k_cache and v_cache dtypes differ: {k_cache.dtype} and {v_cache.dtype}")
    if k_cache.dtype != FP8_DTYPE and k_cache.dtype != q.dtype:
        raise ValueError(
            f"k_cache dtype {k_cache.dtype} must equal q dtype {q.dtype} (or be {FP8_DTYPE})"
        )
    batch, n_q_heads, head_dim = q.shape
    num_blocks, n_kv_heads, block_size, kv_head_dim = k_cache.shape
    if kv_head_dim != head_dim:
        raise ValueError(f"k_cache head_dim {kv_head_dim} differs from q head_dim {head_dim}")
    if head_dim not in SUPPORTED_HEAD_DIMS:
        raise ValueError(f"head_dim must be one of {SUPPORTED_HEAD_DIMS}, got {head_dim}")
    if block_size < 1 or block_size > MAX_BLOCK_SIZE or block_size & (block_size - 1):
        raise ValueError(
            f"k_cache block_size (dim 2) must be a power of two in 1..{MAX_BLOCK_SIZE}, got {block_size}"
        )
    if num_blocks < 1:
        raise ValueError(f"k_cache must hold at least one block, got shape {tuple(k_cache.shape)}")
    if n_kv_heads < 1 or n_q_heads % n_kv_heads:
        raise ValueError(
            f"n_q_heads ({n_q_heads}, q dim 1) must be a multiple of n_kv_heads "
            f"({n_kv_heads}, k_cache dim 1)"
        )
    if block_tables.shape[0] != batch:
        raise ValueError(f"block_tables has {block_tables.shape[0]} rows for a batch of {batch} (q dim 0)")
    if block_tables.shape[1] < 1:
        raise ValueError(f"block_tables must have at least one column, got shape {tuple(block_tables.shape)}")
    if seq_lens.shape[0] != batch:
        raise ValueError(f"seq_lens has {seq_lens.shape[0]} entries for a batch of {batch} (q dim 0)")
    devices = {t.device for t in (q, k_cache, v_cache, block_tables, seq_lens)}
    if len(devices) != 1:
        raise ValueError(f"q, k_cache, v_cache, block_tables, seq_lens must share one device, got {devices}")
    if not q.is_cuda and not interpreter_active():
        raise ValueError(f"q is on {q.device}: CPU tensors need the Triton interpreter (TRITON_INTERPRET=1)")


def check_strides(q, k_cache, v_cache, block_tables, seq_lens) -> None:
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("block_tables", block_tables)):
        if t.stride(-1) != 1 and t.shape[-1] > 1:
            raise ValueError(f"{name} last dim must be contiguous (stride 1), got strides {t.stride()}")
    if seq_lens.stride(0) != 1 and seq_lens.shape[0] > 1:
        raise ValueError(f"seq_lens must be contiguous, got stride {seq_lens.stride()}")


def check_scale(name: str, scale, kv_dtype: torch.dtype, n_kv_heads: int, device) -> torch.Tensor | None:
    """Normalise a k/v scale to a [n_kv_heads] fp32 tensor (None for non-FP8 caches)."""
    if scale is None:
        return None if kv_dtype != FP8_DTYPE else torch.ones(n_kv_heads, dtype=torch.float32, device=device)
    if kv_dtype != FP8_DTYPE:
        raise ValueError(f"{name} applies only to a {FP8_DTYPE} cache; the cache is {kv_dtype}")
    if isinstance(scale, (int, float)):
        if not math.isfinite(scale) or scale <= 0:
            raise ValueError(f"{name} must be a finite positive number, got {scale}")
        return torch.full((n_kv_heads,), float(scale), dtype=torch.float32, device=device)
    if not isinstance(scale, torch.Tensor):
        raise ValueError(f"{name} must be a float or a tensor, got {type(scale).__name__}")
    if scale.numel() not in (1, n_kv_heads):
        raise ValueError(
            f"{name} must have 1 (per tensor) or n_kv_heads={n_kv_heads} (per head) elements, "
            f"got shape {tuple(scale.shape)}"
        )
    if scale.device != torch.device(device):
        raise ValueError(f"{name} is on {scale.device}, the cache on {device}")
    return scale.reshape(-1).to(torch.float32).expand(n_kv_heads).contiguous()


def first_visible_tokens(seq_lens: torch.Tensor, span: Span) -> torch.Tensor:
    """[batch] int64: the first key each sequence's decode query sees
    (:func:`kernels.attention_span.first_visible` at position ``seq_len - 1``, on the device)."""
    lens = seq_lens.to(torch.int64)
    if span.kind == "sliding":
        return (lens - span.size).clamp(min=0)
    if span.kind == "chunked":
        return torch.div(lens - 1, span.size, rounding_mode="floor") * span.size
    return torch.zeros_like(lens)


def check_values(block_tables, seq_lens, num_blocks: int, block_size: int, span: Span = FULL) -> None:
    """Lengths within 1..table capacity; the table entries the kernel reads inside the pool (one
    host sync). With a window or chunks, the pages before the first visible key are never read
    and may hold anything (an engine frees them: vLLM points them at its null block)."""
    lens = seq_lens.to(torch.int64)
    capacity = block_tables.shape[1] * block_size
    bad_len = (lens < 1) | (lens > capacity)
    blocks_used = (lens + block_size - 1) // block_size
    cols = torch.arange(block_tables.shape[1], device=block_tables.device)
    used = cols[None, :] < blocks_used[:, None]
    if span.kind != "full":
        used &= cols[None, :] >= (first_visible_tokens(seq_lens, span) // block_size)[:, None]
    bad_entry = used & ((block_tables < 0) | (block_tables >= num_blocks))
    flags = torch.stack([bad_len.any(), bad_entry.any()]).tolist()
    if flags[0]:
        idx = torch.nonzero(bad_len).flatten()[:8].tolist()
        vals = [int(lens[i]) for i in idx]
        raise ValueError(
            f"seq_lens must be in 1..{capacity} (block_tables columns {block_tables.shape[1]} x "
            f"block_size {block_size}); sequences {idx} have lengths {vals}"
        )
    if flags[1]:
        where = torch.nonzero(bad_entry)[:8].tolist()
        vals = [int(block_tables[r, c]) for r, c in where]
        raise ValueError(
            f"block_tables entries must index the pool 0..{num_blocks - 1}; "
            f"(sequence, block) {[tuple(w) for w in where]} hold {vals}"
        )


def check_int4_inputs(q, k: Int4Pool, v: Int4Pool, block_tables, seq_lens) -> None:
    """Shapes, dtypes and strides of an INT4 decode call (:mod:`kernels.cache.int4` pools)."""
    check_tensor("q", q, 3, Q_DTYPES)
    for name, pool in (("k", k), ("v", v)):
        if not isinstance(pool, Int4Pool):
            raise ValueError(f"{name} must be an Int4Pool (kernels.cache.int4), got {type(pool).__name__}")
        check_tensor(f"{name}.data", pool.data, 4, (torch.uint8,))
        check_tensor(f"{name}.scales", pool.scales, 4, (SCALE_DTYPE,))
        if tuple(pool.scales.shape) != tuple(pool.data.shape[:3]) + (2,):
            raise ValueError(f"{name}.scales must be {tuple(pool.data.shape[:3]) + (2,)}, got {tuple(pool.scales.shape)}")
        if pool.data.stride(-1) != 1 or pool.scales.stride(-1) != 1:
            raise ValueError(f"{name}.data and {name}.scales need a contiguous last dim")
    if k.data.shape != v.data.shape:
        raise ValueError(f"k and v pools differ in shape: {tuple(k.data.shape)} and {tuple(v.data.shape)}")
    check_tensor("block_tables", block_tables, 2, (torch.int32,))
    check_tensor("seq_lens", seq_lens, 1, (torch.int32,))
    batch, n_q_heads, head_dim = q.shape
    _, n_kv_heads, block_size, half = k.data.shape
    if 2 * half != head_dim or head_dim not in INT4_HEAD_DIMS:
        raise ValueError(f"q head_dim {head_dim} needs pools of head_dim // 2 bytes per token in {INT4_HEAD_DIMS}; "
                         f"the pools hold {half}")
    if block_size < 1 or block_size > MAX_BLOCK_SIZE or block_size & (block_size - 1):
        raise ValueError(f"block_size (dim 2) must be a power of two in 1..{MAX_BLOCK_SIZE}, got {block_size}")
    if n_q_heads % n_kv_heads:
        raise ValueError(f"n_q_heads ({n_q_heads}) must be a multiple of n_kv_heads ({n_kv_heads})")
    if block_tables.shape[0] != batch or seq_lens.shape[0] != batch:
        raise ValueError(f"block_tables {tuple(block_tables.shape)} and seq_lens {tuple(seq_lens.shape)} "
                         f"must have {batch} rows (q dim 0)")
    if q.stride(-1) != 1 or block_tables.stride(-1) != 1:
        raise ValueError("q and block_tables need a contiguous last dim")


def on_16_byte_grid(*pools: torch.Tensor) -> bool:
    """Whether KV pools (``[blocks, heads, page, row]``: bf16/FP8 caches, INT4 code bytes) start on
    a 16-byte boundary with block, head and token strides that are multiples of 16 bytes. The
    Gluon kernels copy pages by 16-byte ``cp.async`` runs and the rdq kernel also loads 32-bit
    words; the JIT compiles a pool off that grid (an offset slice, odd strides) as aligned to its
    element only, which ``cp.async`` cannot copy. The Triton kernels read any view."""
    return all(p.data_ptr() % 16 == 0 and all(s * p.element_size() % 16 == 0 for s in p.stride()[:3])
               for p in pools)


def check_16_byte_grid(kernel: str, names: str, first: torch.Tensor, second: torch.Tensor) -> None:
    """Raise unless both pools are :func:`on_16_byte_grid`, naming them and ``kernel``."""
    if not on_16_byte_grid(first, second):
        strides = [tuple(s * t.element_size() for s in t.stride()[:3]) for t in (first, second)]
        raise ValueError(f"{names} must start on a 16-byte boundary with block, head and token strides that are "
                         f"multiples of 16 bytes for the {kernel} (it copies 16-byte runs); got addresses "
                         f"{first.data_ptr() % 16} and {second.data_ptr() % 16} bytes past it, strides (bytes) "
                         f"{strides[0]} and {strides[1]}; pass .clone() copies, or take the Triton kernel "
                         f"(backend='triton')")

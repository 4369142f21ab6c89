"""Argument checks and constants shared by the prefill forward kernels (Triton and Gluon).

Both kernels take the same ``q [B, Hq, N, D]``, ``k, v [B, Hkv, N, D]`` and refuse the same
inputs with the same messages, before any launch.
"""

from __future__ import annotations

import math

import torch

from kernels.runtime import interpreter_active

__all__ = ["SUPPORTED_DTYPES", "SUPPORTED_HEAD_DIMS", "check_tensors", "check_scale"]

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)
SUPPORTED_HEAD_DIMS = (64, 128, 256)  # 256: Gemma-2/3


def check_tensors(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """Raise ValueError, naming the argument and values, for anything the kernel can't take."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(
                f"{name} must be 4-D [batch, heads, tokens, head_dim], got shape {tuple(t.shape)}"
            )
        if t.dtype not in SUPPORTED_DTYPES:
            raise ValueError(f"{name}.dtype must be float16 or bfloat16, got {t.dtype}")
        if t.stride(3) != 1:
            raise ValueError(
                f"{name} must have a contiguous head dim (stride 1), got strides {tuple(t.stride())}"
            )
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    if q.device.type != "cuda" and not interpreter_active():
        raise ValueError(
            f"q is on {q.device}; the kernel needs a CUDA device (or TRITON_INTERPRET=1 for CPU)"
        )
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    b, hq, n, d = q.shape
    if k.shape[0] != b:
        raise ValueError(f"k batch ({k.shape[0]}) must equal q batch ({b})")
    if k.shape[2] != n:
        raise ValueError(
            f"prefill kernel needs N_q == N_k, got q tokens {n} and k tokens {k.shape[2]}"
        )
    if k.shape[3] != d:
        raise ValueError(f"k head_dim ({k.shape[3]}) must equal q head_dim ({d})")
    if d not in SUPPORTED_HEAD_DIMS:
        raise ValueError(f"head_dim must be one of {SUPPORTED_HEAD_DIMS}, got {d}")
    hkv = k.shape[1]
    if hkv == 0 or hq % hkv != 0:
        raise ValueError(f"query heads ({hq}) must be a multiple of KV heads ({hkv})")
    if b == 0 or n == 0:
        raise ValueError(f"batch and tokens must be >= 1, got q shape {tuple(q.shape)}")
    if b * hq > 65535:
        raise ValueError(f"batch * query heads must be <= 65535 (grid axis 1), got {b * hq}")


def check_scale(sm_scale: float | None, head_dim: int) -> float:
    """Default 1/sqrt(D); reject non-finite or non-positive scales (the mask relies on scale > 0)."""
    if sm_scale is None:
        return 1.0 / math.sqrt(head_dim)
    scale = float(sm_scale)
    if not math.isfinite(scale) or scale <= 0.0:
        raise ValueError(f"sm_scale must be a finite positive number, got {sm_scale!r}")
    return scale

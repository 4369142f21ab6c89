"""INT4 KV pools: 4-bit values with one fp16 scale per group of ``head_dim / 2`` values.

Layout (chosen for the decode kernel in :mod:`kernels.decode.int4`)
-------------------------------------------------------------------------
``data: [num_blocks, n_kv_heads, block_size, head_dim // 2]`` uint8. Byte ``j`` of a token's
head vector holds dim ``j`` in its low nibble and dim ``j + head_dim / 2`` in its high nibble,
so the low nibbles of a tile are the first half of the head vector and the high nibbles the
second half: the kernel splits each dot into two half-width dots and never interleaves nibbles.

``scales: [num_blocks, n_kv_heads, block_size, 2]`` fp16: one scale per token, KV head and half
(group size ``head_dim / 2``: 64 at d = 128, 32 at d = 64). Symmetric quantisation:
``code = clamp(round(x / scale), -8, 7) + 8``, ``scale = amax / 7`` over the group, and
``x ≈ (code - 8) * scale``.

Why per token (along the head dim) for both K and V, not KIVI's per-channel keys: a
per-channel key scale is computed over a page's tokens, and decode appends one token at a time,
so KIVI keeps the newest tokens in full precision until a group fills; per-token groups let every
token be written once, in place, with its final scale, which is what a paged cache does.

Bytes per token and KV head: ``head_dim / 2 + 2 * 2`` (68 B at d = 128, against 256 B in bf16:
3.76x fewer) — the sizer's INT4 with group size ``head_dim / 2`` counts the same bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernels.cache.paged import PagedKVCache

__all__ = ["Int4Pool", "PagedInt4Cache", "quantize_pool_int4", "dequantize_int4", "quantize_int4", "scale_words",
           "INT4_HEAD_DIMS", "SCALE_DTYPE"]

INT4_HEAD_DIMS = (32, 64, 128)  # half-width dots need head_dim / 2 >= 16 (the dot minimum)
SCALE_DTYPE = torch.float16
_QMAX = 7  # symmetric 4-bit codes -8..7; the scale maps amax to 7


@dataclass(frozen=True, kw_only=True)
class Int4Pool:
    """One K or V pool in 4 bits (see the module docstring for the layout)."""

    data: torch.Tensor  # [num_blocks, n_kv_heads, block_size, head_dim // 2] uint8
    scales: torch.Tensor  # [num_blocks, n_kv_heads, block_size, 2] fp16

    @property
    def head_dim(self) -> int:
        return 2 * self.data.shape[-1]

    @property
    def group_size(self) -> int:
        """Values per fp16 scale: half the head dim."""
        return self.data.shape[-1]

    @property
    def bytes_per_token_per_head(self) -> int:
        """Bytes one token of one KV head occupies: packed values plus two fp16 scales."""
        return self.data.shape[-1] * self.data.element_size() + 2 * self.scales.element_size()


@dataclass(frozen=True, kw_only=True)
class PagedInt4Cache:
    """A paged cache with INT4 pools; tables and lengths as in :class:`PagedKVCache`."""

    k: Int4Pool
    v: Int4Pool
    block_tables: torch.Tensor  # [batch, max_blocks_per_seq] int32
    seq_lens: torch.Tensor  # [batch] int32

    @property
    def bytes_per_token(self) -> int:
        """K + V bytes per token over all KV heads (what decode reads per token)."""
        heads = self.k.data.shape[1]
        return heads * (self.k.bytes_per_token_per_head + self.v.bytes_per_token_per_head)


def quantize_pool_int4(pool: torch.Tensor) -> Int4Pool:
    """``pool`` ``[num_blocks, n_kv_heads, block_size, head_dim]`` (any float dtype) in INT4.

    A group holding NaN (a poisoned, never-written slot) gets a NaN scale, so it stays NaN when
    dequantised and a kernel that read it would show it.
    """
    if pool.dim() != 4:
        raise ValueError(f"pool must be [num_blocks, n_kv_heads, block_size, head_dim], got {tuple(pool.shape)}")
    head_dim = pool.shape[-1]
    if head_dim not in INT4_HEAD_DIMS:
        raise ValueError(f"INT4 pools need head_dim in {INT4_HEAD_DIMS}, got {head_dim}")
    data = torch.empty(*pool.shape[:-1], head_dim // 2, dtype=torch.uint8, device=pool.device)
    scales = torch.empty(*pool.shape[:-1], 2, dtype=SCALE_DTYPE, device=pool.device)
    for h in range(pool.shape[1]):  # head by head: one head's float32 copy at a time
        data[:, h], scales[:, h] = _quantize_head(pool[:, h])
    return Int4Pool(data=data, scales=scales)


def _quantize_head(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``[num_blocks, block_size, head_dim]`` -> packed codes and ``[.., 2]`` fp16 scales."""
    half = x.shape[-1] // 2
    groups = x.float().reshape(*x.shape[:-1], 2, half)  # [..., half index, value]: lo half, hi half
    nan = torch.isnan(groups).any(dim=-1)
    groups = torch.nan_to_num(groups, nan=0.0)
    scales = (torch.clamp(groups.abs().amax(dim=-1), min=1e-8) / _QMAX).to(SCALE_DTYPE)
    # Quantise with the stored (fp16-rounded) scale, so dequantisation inverts exactly that.
    codes = (torch.clamp(torch.round(groups / scales.float().unsqueeze(-1)), -8, _QMAX) + 8).to(torch.uint8)
    data = codes[..., 0, :] | (codes[..., 1, :] << 4)
    return data, torch.where(nan, torch.full_like(scales, float("nan")), scales)


def dequantize_int4(pool: Int4Pool) -> torch.Tensor:
    """The float32 values ``(code - 8) * scale`` as ``[num_blocks, n_kv_heads, block_size, head_dim]``."""
    lo = (pool.data & 0xF).float() - 8
    hi = (pool.data >> 4).float() - 8
    s = pool.scales.float()
    return torch.cat([lo * s[..., 0:1], hi * s[..., 1:2]], dim=-1)


def quantize_int4(cache: PagedKVCache) -> PagedInt4Cache:
    """The same cache with both pools in INT4 (NaN-poisoned slots get NaN scales)."""
    return PagedInt4Cache(k=quantize_pool_int4(cache.k_cache), v=quantize_pool_int4(cache.v_cache),
                          block_tables=cache.block_tables, seq_lens=cache.seq_lens)


def scale_words(name: str, pool: Int4Pool) -> torch.Tensor:
    """``pool.scales`` ``[.., block_size, 2]`` fp16 as ``[.., block_size]`` int32: a token's two
    scales in one 32-bit word (the Gluon decode kernel loads both with one access)."""
    try:
        return pool.scales.view(torch.int32).squeeze(-1)
    except RuntimeError as exc:
        raise ValueError(f"{name}.scales must have even strides and storage offset (its fp16 pairs are read as "
                         f"32-bit words), got strides {pool.scales.stride()}") from exc

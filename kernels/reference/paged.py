"""PyTorch reference for paged decode attention: gather the pages, then attend in float32.

``gather_kv`` follows each sequence's block table and lays its tokens out contiguously
(``[n_kv_heads, seq_len, head_dim]``): exactly the work a paged kernel avoids. The reference
then computes ``softmax(q k^T * sm_scale) v`` in float32, one sequence at a time (ragged
lengths, no padding to get wrong), repeating each KV head for its ``n_q_heads // n_kv_heads``
query heads (GQA). FP8 caches are dequantised first (value * scale), so the kernel is compared
against the function it is meant to compute on the stored values.

Used by the tests and shown by the app; slow on purpose (a Python loop over sequences).
"""

from __future__ import annotations

import math

import torch

from kernels.attention_span import first_visible, span_of
from units import cdiv

__all__ = ["gather_kv", "gather_kv_padded", "gather_span", "paged_attention_reference"]


def gather_kv(cache: torch.Tensor, block_table: torch.Tensor, seq_len: int) -> torch.Tensor:
    """One sequence's tokens from the pool.

    Parameters
    ----------
    cache : Tensor [num_blocks, n_kv_heads, block_size, head_dim]
    block_table : Tensor [max_blocks_per_seq] (int)
    seq_len : int

    Returns
    -------
    Tensor [n_kv_heads, seq_len, head_dim], the cache's dtype
    """
    block_size = cache.shape[2]
    nblk = cdiv(seq_len, block_size)
    pages = cache[block_table[:nblk].long()]  # [nblk, n_kv_heads, block_size, head_dim]
    tokens = pages.transpose(0, 1).reshape(cache.shape[1], nblk * block_size, cache.shape[3])
    return tokens[:, :seq_len]


def gather_kv_padded(cache: torch.Tensor, block_tables: torch.Tensor, max_len: int) -> torch.Tensor:
    """All sequences at once, padded to ``max_len``: what "gather then SDPA" does on the GPU.

    One advanced-indexing copy: ``out[b, h, t] = cache[block_tables[b, t // block_size], h,
    t % block_size]``. Table entries up to ``cdiv(max_len, block_size)`` must index the pool;
    tokens past a shorter sequence's end are garbage that the caller must mask.

    Returns
    -------
    Tensor [batch, n_kv_heads, max_len, head_dim]
    """
    block_size, n_kv_heads = cache.shape[2], cache.shape[1]
    pos = torch.arange(max_len, device=cache.device)
    blocks = block_tables[:, pos // block_size].long()  # [batch, max_len]
    heads = torch.arange(n_kv_heads, device=cache.device)
    slots = pos % block_size
    return cache[blocks[:, None, :], heads[None, :, None], slots[None, None, :]]


def _dequant(x: torch.Tensor, scale: torch.Tensor | float | None) -> torch.Tensor:
    """[n_kv_heads, L, D] -> float32 with the per-tensor or per-head scale applied."""
    xf = x.float()
    if scale is None:
        return xf
    if isinstance(scale, (int, float)):
        return xf * float(scale)
    s = scale.float().reshape(-1)
    s = s.expand(x.shape[0]) if s.numel() == 1 else s
    return xf * s.to(x.device).reshape(-1, 1, 1)


def paged_attention_reference(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    *,
    sm_scale: float | None = None,
    k_scale: torch.Tensor | float | None = None,
    v_scale: torch.Tensor | float | None = None,
    sliding_window: int | None = None,
    chunk_size: int | None = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """Float32 decode attention over a paged cache (same arguments as ``paged_decode_attention``).

    With a window or chunks the query attends only its visible keys
    (:func:`kernels.attention_span.first_visible`), gathered from the pages that hold them; with
    ``sinks`` each head's softmax runs over its keys plus one extra logit whose value is zero.

    Parameters
    ----------
    q : Tensor [batch, n_q_heads, head_dim]
    k_cache, v_cache : Tensor [num_blocks, n_kv_heads, block_size, head_dim]
    block_tables : Tensor [batch, max_blocks_per_seq] int
    seq_lens : Tensor [batch] int
    sm_scale : float, optional; default ``1 / sqrt(head_dim)``
    k_scale, v_scale : FP8 dequantisation scales (float, [1] or [n_kv_heads]), optional
    sliding_window, chunk_size : int, optional (at most one)
    sinks : Tensor [n_q_heads], optional; natural-log logits (kernels.attention_span)

    Returns
    -------
    Tensor [batch, n_q_heads, head_dim], float32
    """
    batch, n_q_heads, head_dim = q.shape
    n_kv_heads = k_cache.shape[1]
    group = n_q_heads // n_kv_heads
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(head_dim)
    out = torch.empty(batch, n_q_heads, head_dim, dtype=torch.float32, device=q.device)
    span = span_of(sliding_window, chunk_size)
    lens = [int(n) for n in seq_lens.tolist()]
    for b, n in enumerate(lens):
        lo = first_visible(span, n - 1)
        k = _dequant(gather_span(k_cache, block_tables[b], lo, n), k_scale)  # [Hkv, n - lo, D]
        v = _dequant(gather_span(v_cache, block_tables[b], lo, n), v_scale)
        k = k.repeat_interleave(group, dim=0)  # [Hq, n - lo, D]: query head h reads KV head h // group
        v = v.repeat_interleave(group, dim=0)
        scores = torch.einsum("hd,hnd->hn", q[b].float(), k) * sm_scale
        if sinks is not None:  # one more logit per head, with a zero value row
            scores = torch.cat([scores, sinks.float().to(scores.device)[:, None]], dim=1)
            v = torch.cat([v, torch.zeros_like(v[:, :1])], dim=1)
        out[b] = torch.einsum("hn,hnd->hd", torch.softmax(scores, dim=-1), v)
    return out


def gather_span(cache: torch.Tensor, block_table: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
    """Tokens ``lo .. hi - 1`` of one sequence, reading only the table entries of their pages
    (entries before ``lo``'s page may be freed: any value).

    Returns
    -------
    Tensor [n_kv_heads, hi - lo, head_dim], the cache's dtype
    """
    block_size = cache.shape[2]
    pos = torch.arange(lo, hi, device=cache.device)
    pages = block_table.to(cache.device)[pos // block_size].long()
    return cache[pages, :, pos % block_size].transpose(0, 1)

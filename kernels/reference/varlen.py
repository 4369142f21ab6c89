"""PyTorch reference for mixed chunked-prefill + decode attention over a paged KV cache.

One batch holds sequences of three kinds, all reading the same pool of KV blocks:

* a decode row: one new query token that sees every cached token;
* a prefill chunk: ``q_len`` new tokens appended after ``context = seq_len - q_len`` cached ones;
  chunk token ``i`` (0-based) sits at absolute position ``context + i`` and sees keys
  ``j <= context + i`` (full attention to the prefix, causal inside the chunk);
* a first chunk (``context = 0``): ordinary causal prefill.

As in vLLM, the chunk's own K/V are already in the cache when attention runs, so ``seq_len``
counts them. Queries are packed ("varlen"): ``q[cu_seqlens_q[b] : cu_seqlens_q[b + 1]]`` are
sequence ``b``'s tokens.

This reference gathers each sequence's visible tokens (``kernels.reference.paged.gather_span``),
dequantises an FP8 cache (value x scale), and computes ``softmax(q k^T * sm_scale) v`` in
float32 one sequence at a time, with the natural-log log-sum-exp of every row. Slow on purpose.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from kernels.attention_span import first_visible, span_of
from kernels.reference.paged import gather_span

__all__ = ["varlen_attention_reference", "cu_seqlens"]


def cu_seqlens(q_lens: Sequence[int]) -> list[int]:
    """Start offsets of each sequence's queries in the packed tensor, plus the total: ``[0, q0, q0 + q1, ...]``."""
    out = [0]
    for n in q_lens:
        out.append(out[-1] + int(n))
    return out


def _dequant(x: torch.Tensor, scale) -> torch.Tensor:
    """[n_kv_heads, L, D] -> float32 with a per-tensor or per-head scale applied."""
    xf = x.float()
    if scale is None:
        return xf
    if isinstance(scale, (int, float)):
        return xf * float(scale)
    s = scale.float().reshape(-1).to(x.device)
    return xf * (s.expand(x.shape[0]) if s.numel() == 1 else s).reshape(-1, 1, 1)


def varlen_attention_reference(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    q_lens: Sequence[int],
    seq_lens: Sequence[int],
    *,
    sm_scale: float | None = None,
    k_scale=None,
    v_scale=None,
    sliding_window: int | None = None,
    chunk_size: int | None = None,
    sinks: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Float32 attention of packed query chunks over a paged cache.

    With a window or chunks each query sees keys from
    :func:`kernels.attention_span.first_visible` of its position to itself, gathered from the
    pages that hold them; ``sinks`` add one logit per head with a zero value to every row.

    Parameters
    ----------
    q : Tensor [total_q, n_q_heads, head_dim]
        Every sequence's new tokens, packed in batch order (``sum(q_lens)`` rows).
    k_cache, v_cache : Tensor [num_blocks, n_kv_heads, block_size, head_dim]
    block_tables : Tensor [batch, max_blocks_per_seq] int
    q_lens : sequence of int
        New (query) tokens per sequence, ``1 <= q_lens[b] <= seq_lens[b]``.
    seq_lens : sequence of int
        Tokens in the cache per sequence, the chunk's own included.
    sm_scale : float, optional; default ``1 / sqrt(head_dim)``
    k_scale, v_scale : FP8 dequantisation scales (float, [1] or [n_kv_heads]), optional
    sliding_window, chunk_size : int, optional (at most one)
    sinks : Tensor [n_q_heads], optional; natural-log logits

    Returns
    -------
    out : Tensor [total_q, n_q_heads, head_dim], float32
    lse : Tensor [total_q, n_q_heads], float32, natural log of each row's softmax denominator
    """
    span = span_of(sliding_window, chunk_size)
    total_q, n_q_heads, head_dim = q.shape
    group = n_q_heads // k_cache.shape[1]
    scale = 1.0 / math.sqrt(head_dim) if sm_scale is None else float(sm_scale)
    starts = cu_seqlens(q_lens)
    if starts[-1] != total_q:
        raise ValueError(f"q has {total_q} rows but q_lens sum to {starts[-1]}")
    out = torch.empty(total_q, n_q_heads, head_dim, dtype=torch.float32, device=q.device)
    lse = torch.empty(total_q, n_q_heads, dtype=torch.float32, device=q.device)
    for b, (n_q, n_kv) in enumerate(zip(q_lens, seq_lens)):
        n_q, n_kv = int(n_q), int(n_kv)
        if not 1 <= n_q <= n_kv:
            raise ValueError(f"sequence {b}: need 1 <= q_len <= seq_len, got {n_q} and {n_kv}")
        context = n_kv - n_q
        lo = first_visible(span, context)  # the first key any of the chunk's queries sees
        k = _dequant(gather_span(k_cache, block_tables[b], lo, n_kv), k_scale).repeat_interleave(group, dim=0)
        v = _dequant(gather_span(v_cache, block_tables[b], lo, n_kv), v_scale).repeat_interleave(group, dim=0)
        rows = slice(starts[b], starts[b + 1])
        qb = q[rows].float().transpose(0, 1)  # [Hq, n_q, D]
        scores = torch.einsum("hqd,hkd->hqk", qb, k) * scale
        positions = range(context, n_kv)  # absolute position of each query
        pos = torch.tensor(positions, device=q.device)
        first = torch.tensor([first_visible(span, p) for p in positions], device=q.device)
        keys = torch.arange(lo, n_kv, device=q.device)[None, :]
        scores = scores.masked_fill(~((keys <= pos[:, None]) & (keys >= first[:, None])), float("-inf"))
        if sinks is not None:  # one more logit per head and row, with a zero value row
            sink = sinks.float().to(q.device)[:, None, None].expand(n_q_heads, n_q, 1)
            scores = torch.cat([scores, sink], dim=2)
            v = torch.cat([v, torch.zeros_like(v[:, :1])], dim=1)
        out[rows] = torch.einsum("hqk,hkd->hqd", torch.softmax(scores, dim=-1), v).transpose(0, 1)
        lse[rows] = torch.logsumexp(scores, dim=-1).transpose(0, 1)
    return out, lse

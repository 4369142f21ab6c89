"""Naive attention references: softmax(Q Kᵀ · scale) V, written the obvious way.

Two flavours:

* :func:`naive_attention` / :func:`naive_attention_lse` upcast to float32 and are the
  *correctness* references for every kernel in this package (tiled prefill, paged decode).
* :func:`naive_attention_native` stays in the input dtype and materialises the N×N score
  and probability matrices, as a user's first PyTorch version would. The benchmark harness
  uses it for the naive-against-tiled time and peak-memory comparison (reference page,
  problem 5: "standard attention writes the N×N matrix to HBM; FlashAttention never does").

Conventions shared with the kernels
-----------------------------------
* Layout ``[batch, heads, tokens, head_dim]`` for q, k and v.
* Grouped-query attention (GQA/MQA): ``Hq % Hkv == 0``; query head ``h`` reads KV head
  ``h // (Hq // Hkv)`` (the repeat-interleave order used by Llama and by SDPA's ``enable_gqa``).
* Causal masking is aligned to the END of the key sequence: query ``i`` of ``Nq`` sees keys
  ``j <= Nk - Nq + i``. For prefill (``Nq == Nk``) this is the usual lower triangle; for decode
  (``Nq == 1``) the single query sees every key. Queries that see no key at all (only possible
  when ``Nq > Nk``) produce zeros and an lse of ``-inf``.
* The default scale is ``1 / sqrt(head_dim)``.
* The log-sum-exp is in natural log: ``lse[b, h, i] = log(sum_j exp(scale · q_i · k_j))``
  over the visible keys, so ``softmax = exp(scale · s - lse)``.
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "naive_attention",
    "naive_attention_lse",
    "naive_attention_native",
    "causal_mask",
]


def _check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """Validate shapes shared by every reference; raise ValueError naming the argument."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D [batch, heads, tokens, head_dim], got shape {tuple(t.shape)}")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape, got k {tuple(k.shape)} and v {tuple(v.shape)}")
    if q.shape[0] != k.shape[0]:
        raise ValueError(f"q and k must have the same batch size, got q {q.shape[0]} and k {k.shape[0]}")
    if q.shape[3] != k.shape[3]:
        raise ValueError(f"q and k must have the same head_dim, got q {q.shape[3]} and k {k.shape[3]}")
    hq, hkv = q.shape[1], k.shape[1]
    if hkv == 0 or hq % hkv != 0:
        raise ValueError(f"query heads ({hq}) must be a multiple of KV heads ({hkv})")


def causal_mask(n_q: int, n_k: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Boolean [n_q, n_k] mask, True where query i may see key j (end-aligned causal).

    Query ``i`` sees keys ``j <= n_k - n_q + i``.
    """
    i = torch.arange(n_q, device=device).unsqueeze(1)
    j = torch.arange(n_k, device=device).unsqueeze(0)
    return j <= (n_k - n_q) + i


def _scores_f32(
    q: torch.Tensor, k: torch.Tensor, causal: bool, sm_scale: float | None
) -> torch.Tensor:
    """Scaled, masked scores in float32, [B, Hq, Nq, Nk]; masked entries are -inf."""
    _check_qkv(q, k, k)
    group = q.shape[1] // k.shape[1]
    scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else float(sm_scale)
    # repeat_interleave: query head h uses KV head h // group (Llama / SDPA enable_gqa order).
    kf = k.float().repeat_interleave(group, dim=1)
    s = torch.matmul(q.float(), kf.transpose(-1, -2)) * scale
    if causal:
        mask = causal_mask(q.shape[2], k.shape[2], device=q.device)
        s = s.masked_fill(~mask, float("-inf"))
    return s


def naive_attention_lse(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    sm_scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention output and log-sum-exp, computed in float32.

    Parameters
    ----------
    q : torch.Tensor
        ``[B, Hq, Nq, D]`` queries, any floating dtype.
    k, v : torch.Tensor
        ``[B, Hkv, Nk, D]`` keys and values; ``Hq % Hkv == 0``.
    causal : bool
        End-aligned causal mask: query ``i`` sees keys ``j <= Nk - Nq + i``.
    sm_scale : float, optional
        Softmax scale; default ``1 / sqrt(D)``.

    Returns
    -------
    out : torch.Tensor
        ``[B, Hq, Nq, D]`` float32. Rows that see no key are zero.
    lse : torch.Tensor
        ``[B, Hq, Nq]`` float32, natural log of the softmax denominator of the *scaled*
        scores; ``-inf`` for rows that see no key.
    """
    _check_qkv(q, k, v)
    s = _scores_f32(q, k, causal, sm_scale)
    group = q.shape[1] // k.shape[1]
    lse = torch.logsumexp(s, dim=-1)
    # exp(s - lse) is the softmax; rows with lse = -inf (no visible key) would give NaN,
    # so substitute 0 there: those rows get p = exp(-inf) = 0 and a zero output.
    safe_lse = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
    p = torch.exp(s - safe_lse.unsqueeze(-1))
    vf = v.float().repeat_interleave(group, dim=1)
    out = torch.matmul(p, vf)
    return out, lse


def naive_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    sm_scale: float | None = None,
) -> torch.Tensor:
    """softmax(Q Kᵀ · scale) V in float32: the reference every kernel is tested against.

    Parameters
    ----------
    q : torch.Tensor
        ``[B, Hq, Nq, D]`` queries, any floating dtype.
    k, v : torch.Tensor
        ``[B, Hkv, Nk, D]`` keys and values; ``Hq % Hkv == 0`` (GQA by repeating KV heads).
    causal : bool
        End-aligned causal mask (query ``i`` sees keys ``j <= Nk - Nq + i``), so the same
        function serves prefill (``Nq == Nk``) and decode (``Nq == 1``, sees every key).
    sm_scale : float, optional
        Softmax scale; default ``1 / sqrt(D)``.

    Returns
    -------
    torch.Tensor
        ``[B, Hq, Nq, D]`` float32.
    """
    out, _ = naive_attention_lse(q, k, v, causal=causal, sm_scale=sm_scale)
    return out


def naive_attention_native(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    sm_scale: float | None = None,
) -> torch.Tensor:
    """Naive attention in the input dtype, materialising S and P like user code would.

    This is the baseline for the naive-against-tiled time and peak-memory comparison: it
    allocates the ``[B, Hq, Nq, Nk]`` score matrix and the probability matrix in the input
    dtype (two N×N tensors per head alive at the peak). GQA is handled by expanding the KV
    heads (a view, then a copy by ``reshape``), as ``repeat_kv`` in Llama does.

    Parameters
    ----------
    q : torch.Tensor
        ``[B, Hq, Nq, D]``.
    k, v : torch.Tensor
        ``[B, Hkv, Nk, D]``, same dtype as q.
    causal : bool
        End-aligned causal mask.
    sm_scale : float, optional
        Default ``1 / sqrt(D)``.

    Returns
    -------
    torch.Tensor
        ``[B, Hq, Nq, D]`` in q's dtype.
    """
    _check_qkv(q, k, v)
    b, hq, nq, d = q.shape
    hkv, nk = k.shape[1], k.shape[2]
    group = hq // hkv
    scale = 1.0 / math.sqrt(d) if sm_scale is None else float(sm_scale)
    if group > 1:
        k = k[:, :, None].expand(b, hkv, group, nk, d).reshape(b, hq, nk, d)
        v = v[:, :, None].expand(b, hkv, group, nk, d).reshape(b, hq, nk, d)
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(~causal_mask(nq, nk, device=q.device), float("-inf"))
    p = torch.softmax(s, dim=-1)
    return torch.matmul(p, v)

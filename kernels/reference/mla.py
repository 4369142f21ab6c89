"""MLA decode references: the absorbed form the kernel computes, and the logical attention it
stands for, from which the absorbed form is derived.

Logical MLA (DeepSeek-V2, section 2.1) for one query head ``h`` and the latents ``c_t`` of the
sequence's tokens::

    k_t^h = [c_t W_UK^h, k_pe_t]     v_t^h = c_t W_UV^h       (W_UK^h: [rank, d_nope], W_UV^h: [rank, d_v])
    q^h   = [q_nope^h, q_pe^h]
    o^h   = sum_t softmax_t(scale * q^h . k_t^h) v_t^h

Since ``q_nope^h . (c_t W_UK^h) = (q_nope^h W_UK^hT) . c_t``, the up-projections fold into the
query and the output ("absorbed"): with ``q_lat^h = q_nope^h W_UK^hT`` (``[rank]``), attention
runs on the latent itself, every head over the same ``c_t`` and ``k_pe_t``::

    o_lat^h = sum_t softmax_t(scale * (q_lat^h . c_t + q_pe^h . k_pe_t)) c_t      [rank]
    o^h     = o_lat^h W_UV^h

so a decode step reads ``rank + rope_dim`` values a token for all heads instead of per head.
"""

from __future__ import annotations

import torch

from kernels.cache.mla import MlaLatentCache

__all__ = ["mla_decode_reference", "absorb_query", "logical_attention"]


def mla_decode_reference(q_latent: torch.Tensor, q_rope: torch.Tensor, cache: MlaLatentCache, *,
                         sm_scale: float) -> torch.Tensor:
    """Absorbed MLA decode in float32: ``q_latent [batch, n_heads, rank]``, ``q_rope [batch,
    n_heads, rope_dim]`` against the cache; returns ``o_lat [batch, n_heads, rank]`` float32."""
    rank = cache.kv_lora_rank
    scale = 1.0 if cache.scale is None else float(cache.scale.reshape(-1)[0])
    out = torch.empty(q_latent.shape, dtype=torch.float32, device=q_latent.device)
    for b in range(cache.batch):
        lat = cache.sequence_latent(b).float() * scale  # [L, rank + rope]
        c, k_pe = lat[:, :rank], lat[:, rank:]
        logits = (q_latent[b].float() @ c.T + q_rope[b].float() @ k_pe.T) * sm_scale  # [H, L]
        out[b] = torch.softmax(logits, dim=-1) @ c
    return out


def absorb_query(q_nope: torch.Tensor, w_uk: torch.Tensor) -> torch.Tensor:
    """``q_lat = q_nope W_UK^T`` per head: ``q_nope [batch, n_heads, d_nope]``, ``w_uk [n_heads,
    rank, d_nope]`` -> ``[batch, n_heads, rank]``, in the dtype of the inputs."""
    return torch.einsum("bhd,hrd->bhr", q_nope, w_uk)


def logical_attention(q_nope: torch.Tensor, q_pe: torch.Tensor, latent: torch.Tensor, w_uk: torch.Tensor,
                      w_uv: torch.Tensor, rank: int, *, sm_scale: float) -> torch.Tensor:
    """One sequence's MLA attention with K and V expanded per head (float64, for checks).

    ``q_nope [n_heads, d_nope]``, ``q_pe [n_heads, rope]``, ``latent [L, rank + rope]`` (c then
    k_pe), ``w_uk [n_heads, rank, d_nope]``, ``w_uv [n_heads, rank, d_v]``; returns ``[n_heads, d_v]``.
    """
    c, k_pe = latent[:, :rank].double(), latent[:, rank:].double()
    k_nope = torch.einsum("tr,hrd->htd", c, w_uk.double())  # [H, L, d_nope]
    v = torch.einsum("tr,hrd->htd", c, w_uv.double())  # [H, L, d_v]
    logits = (torch.einsum("hd,htd->ht", q_nope.double(), k_nope) + q_pe.double() @ k_pe.T) * sm_scale
    return torch.einsum("ht,htd->hd", torch.softmax(logits, dim=-1), v)

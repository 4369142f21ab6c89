"""A mixture-of-experts layer's routing in three kernels and its combine in one, around two
grouped GEMMs: the launches of vLLM's fused MoE call (``topk_softmax``, ``moe_align_block_size``,
the two expert GEMMs, the activation, ``moe_sum``), with ``torch._grouped_mm`` for the GEMMs.

Algorithm
---------
For ``tokens`` rows choosing ``top_k`` of ``experts``::

    route     one program a token: the top-k router logits (k rounds of argmax), their softmax
              (Qwen3's softmax-then-renormalise over the k is the same), and an atomic count a
              chosen expert
    offsets   one program: each expert's end row = cumsum(counts), its start = end − count
    scatter   one program a token: each (token, slot) pair takes the next row of its expert
              (an atomic cursor) and copies the token's row there
    GEMMs     xs [pairs, hidden] @ w13ᵀ → SiLU-and-mul → @ w2ᵀ, one grouped GEMM each over the
              experts' rows (an expert no token picks reads nothing)
    combine   one program a token and column tile: Σ_k weight · its pair's output row

Rows within an expert come in whatever order the atomics give; each pair's output goes back to
its own token, so the result does not depend on that order.
"""

from __future__ import annotations

from kernels.runtime import ensure_triton_backend

ensure_triton_backend()  # before triton is imported: the interpreter is chosen at decoration

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from kernels.layer.activation import silu_and_mul  # noqa: E402

__all__ = ["route_top_k", "routed_experts", "MAX_EXPERTS", "MAX_TOP_K"]

MAX_EXPERTS = 1024
MAX_TOP_K = 32
COMBINE_BLOCK = 1024  # columns a combine program sums


@triton.jit
def _route_kernel(
    logits_ptr,  # [tokens, experts] router logits
    ids_ptr, weights_ptr,  # [tokens, TOP_K] int32, fp32
    counts_ptr,  # [experts] int32, zero on entry: pairs per expert
    experts, stride_logits,
    TOP_K: tl.constexpr, K_PAD: tl.constexpr, BLOCK_E: tl.constexpr,
):
    token = tl.program_id(0)
    offs = tl.arange(0, BLOCK_E)
    scores = tl.load(logits_ptr + token * stride_logits + offs, mask=offs < experts,
                     other=-float("inf")).to(tl.float32)
    slots = tl.arange(0, K_PAD)
    ids = tl.zeros((K_PAD,), dtype=tl.int32)
    top = tl.full((K_PAD,), -float("inf"), dtype=tl.float32)
    for j in tl.static_range(TOP_K):
        best = tl.max(scores, axis=0)
        pick = tl.argmax(scores, axis=0)
        ids = tl.where(slots == j, pick, ids)
        top = tl.where(slots == j, best, top)
        scores = tl.where(offs == pick, -float("inf"), scores)
    # The first pick is the largest, so exp(top − top[0]) ≤ 1 and slots past TOP_K give 0.
    first = tl.max(top, axis=0)
    e = tl.exp(top - first)
    keep = slots < TOP_K
    tl.store(ids_ptr + token * TOP_K + slots, ids, mask=keep)
    tl.store(weights_ptr + token * TOP_K + slots, e / tl.sum(e, axis=0), mask=keep)
    tl.atomic_add(counts_ptr + ids, tl.full((K_PAD,), 1, dtype=tl.int32), mask=keep)


@triton.jit
def _offsets_kernel(
    counts_ptr,  # [experts] int32
    ends_ptr, cursor_ptr,  # [experts] int32: each expert's end row; its next free row (its start)
    experts, BLOCK_E: tl.constexpr,
):
    offs = tl.arange(0, BLOCK_E)
    mask = offs < experts
    counts = tl.load(counts_ptr + offs, mask=mask, other=0)
    ends = tl.cumsum(counts, axis=0)
    tl.store(ends_ptr + offs, ends, mask=mask)
    tl.store(cursor_ptr + offs, ends - counts, mask=mask)


@triton.jit
def _scatter_kernel(
    x_ptr,  # [tokens, hidden]
    ids_ptr,  # [tokens, TOP_K] int32
    cursor_ptr,  # [experts] int32: advanced atomically
    row_ptr,  # [tokens, TOP_K] int32 out: the row of xs each pair took
    xs_ptr,  # [tokens · TOP_K, hidden] out: the pairs' rows, grouped by expert
    hidden, stride_x, stride_xs,
    TOP_K: tl.constexpr, BLOCK_H: tl.constexpr,
):
    token = tl.program_id(0)
    offs = tl.arange(0, BLOCK_H)
    mask = offs < hidden
    row = tl.load(x_ptr + token * stride_x + offs, mask=mask)
    for j in tl.static_range(TOP_K):
        expert = tl.load(ids_ptr + token * TOP_K + j)
        at = tl.atomic_add(cursor_ptr + expert, 1)
        tl.store(row_ptr + token * TOP_K + j, at)
        tl.store(xs_ptr + at.to(tl.int64) * stride_xs + offs, row, mask=mask)


@triton.jit
def _combine_kernel(
    ys_ptr,  # [tokens · TOP_K, hidden]: each pair's expert output
    row_ptr, weights_ptr,  # [tokens, TOP_K] int32, fp32
    out_ptr,  # [tokens, hidden]
    hidden, stride_ys, stride_out,
    TOP_K: tl.constexpr, BLOCK: tl.constexpr,
):
    token = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < hidden
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for j in tl.static_range(TOP_K):
        at = tl.load(row_ptr + token * TOP_K + j).to(tl.int64)
        w = tl.load(weights_ptr + token * TOP_K + j)
        acc += w * tl.load(ys_ptr + at * stride_ys + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + token * stride_out + offs, acc.to(out_ptr.dtype.element_ty), mask=mask)


def route_top_k(logits: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each row's ``top_k`` experts, their softmax weights and the pairs each expert got.

    Parameters
    ----------
    logits : [tokens, experts] router logits, rows contiguous
    top_k : experts a token chooses (1 ≤ top_k ≤ experts)

    Returns
    -------
    ids : [tokens, top_k] int32, the chosen experts, largest logit first
    weights : [tokens, top_k] float32, softmax over the chosen logits (rows sum to 1)
    counts : [experts] int32, pairs routed to each expert
    """
    if logits.dim() != 2 or logits.stride(-1) != 1:
        raise ValueError(f"logits: a [tokens, experts] tensor with contiguous rows, got {tuple(logits.shape)}")
    tokens, experts = logits.shape
    if not 1 <= experts <= MAX_EXPERTS:
        raise ValueError(f"logits: {experts} experts, outside 1..{MAX_EXPERTS}")
    if not 1 <= top_k <= min(experts, MAX_TOP_K):
        raise ValueError(f"top_k: {top_k} is outside 1..{min(experts, MAX_TOP_K)}")
    ids = torch.empty((tokens, top_k), device=logits.device, dtype=torch.int32)
    weights = torch.empty((tokens, top_k), device=logits.device, dtype=torch.float32)
    counts = torch.zeros(experts, device=logits.device, dtype=torch.int32)
    if tokens:
        _route_kernel[(tokens,)](logits, ids, weights, counts, experts, logits.stride(0), TOP_K=top_k,
                                 K_PAD=triton.next_power_of_2(top_k), BLOCK_E=triton.next_power_of_2(experts))
    return ids, weights, counts


def routed_experts(x: torch.Tensor, router_logits: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor,
                   top_k: int) -> torch.Tensor:
    """The routed experts' SwiGLU MLP of ``x``, weighted by the router.

    Parameters
    ----------
    x : [tokens, hidden], 16-bit, rows contiguous
    router_logits : [tokens, experts]
    w13 : [experts, 2·width, hidden], each expert's gate rows then up rows (``x``'s dtype)
    w2 : [experts, hidden, width]
    top_k : experts each token goes to

    Returns
    -------
    [tokens, hidden], ``x``'s dtype: Σ over a token's experts of weight · w2 (silu(gate) · up)
    """
    if x.dim() != 2 or x.stride(-1) != 1 or x.dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"x: a 16-bit [tokens, hidden] tensor with contiguous rows, got {tuple(x.shape)} {x.dtype}")
    if w13.dim() != 3 or w2.dim() != 3 or w13.dtype != x.dtype or w2.dtype != x.dtype:
        raise ValueError(f"w13, w2: 3-D tensors of x's dtype, got {tuple(w13.shape)} {w13.dtype}, "
                         f"{tuple(w2.shape)} {w2.dtype}")
    tokens, hidden = x.shape
    experts, width2, _ = w13.shape
    if router_logits.shape != (tokens, experts):
        raise ValueError(f"router_logits: {tuple(router_logits.shape)}, expected ({tokens}, {experts})")
    if w13.shape[2] != hidden or width2 % 2 or w2.shape != (experts, hidden, width2 // 2):
        raise ValueError(f"w13, w2: {tuple(w13.shape)} and {tuple(w2.shape)} do not fit hidden {hidden} "
                         f"([experts, 2·width, hidden] and [experts, hidden, width])")
    ids, weights, counts = route_top_k(router_logits, top_k)
    pairs = tokens * top_k
    ends = torch.empty(experts, device=x.device, dtype=torch.int32)
    cursor = torch.empty_like(ends)
    rows = torch.empty((tokens, top_k), device=x.device, dtype=torch.int32)
    xs = torch.empty((pairs, hidden), device=x.device, dtype=x.dtype)
    out = torch.empty_like(x)
    if not tokens:
        return out
    block_e = triton.next_power_of_2(experts)
    _offsets_kernel[(1,)](counts, ends, cursor, experts, BLOCK_E=block_e)
    _scatter_kernel[(tokens,)](x, ids, cursor, rows, xs, hidden, x.stride(0), xs.stride(0), TOP_K=top_k,
                               BLOCK_H=triton.next_power_of_2(hidden))
    gate_up = torch._grouped_mm(xs, w13.transpose(1, 2), offs=ends)
    ys = torch._grouped_mm(silu_and_mul(gate_up), w2.transpose(1, 2), offs=ends)
    _combine_kernel[(tokens, triton.cdiv(hidden, COMBINE_BLOCK))](
        ys, rows, weights, out, hidden, ys.stride(0), out.stride(0), TOP_K=top_k, BLOCK=COMBINE_BLOCK)
    return out

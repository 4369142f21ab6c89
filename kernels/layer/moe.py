"""A mixture-of-experts layer as vLLM's fused MoE call launches it: top-k routing, the pairs
grouped by expert in blocks of ``BLOCK_M`` rows (``moe_align_block_size``), one expert GEMM per
projection over those blocks with the activation between them, and the weighted sum a token.

Algorithm
---------
For ``tokens`` rows choosing ``top_k`` of ``experts``::

    route     one program a token: the top-k router logits (k rounds of argmax), their softmax
              (Qwen3's softmax-then-renormalise over the k is the same), and an atomic count a
              chosen expert
    align     one program: each expert's rows padded to a multiple of BLOCK_M; its first row
              (an exclusive cumsum), and the expert each BLOCK_M-row block belongs to (−1 for the
              blocks past the last expert's)
    scatter   one program a token: its pairs take the next rows of their experts (one vector
              atomic on the experts' cursors) and copy the token's row there
    GEMMs     a block of rows times its expert's weights, tiled BLOCK_N × BLOCK_K: programs of
              unused blocks return at once, and an expert no token picks is never read
              (``torch._grouped_mm`` over the same rows is the other choice, ``gemm="grouped_mm"``)
    combine   one program a token and column tile: Σ_k weight · its pair's output row

Rows within an expert come in whatever order the atomics give; each pair's output goes back to
its own token, so the result does not depend on that order. The grids are fixed by the token
count (``tokens · top_k + experts · (BLOCK_M − 1)`` rows at most), so a CUDA graph can hold them.
"""

from __future__ import annotations

from kernels.runtime import ensure_triton_backend, interpreter_active

ensure_triton_backend()  # before triton is imported: the interpreter is chosen at decoration

from dataclasses import dataclass  # noqa: E402

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from kernels.layer.activation import silu_and_mul  # noqa: E402

__all__ = ["route_top_k", "routed_experts", "gemm_config_for", "ExpertGemmConfig", "GEMMS", "MAX_EXPERTS", "MAX_TOP_K"]

MAX_EXPERTS = 1024
MAX_TOP_K = 32
COMBINE_BLOCK = 1024  # columns a combine program sums
SCATTER_BLOCK = 1024  # columns a scatter program copies per step
ALIGN_BLOCKS = 32  # blocks the align program maps to their experts per step
GEMMS = ("triton", "grouped_mm")


@dataclass(frozen=True)
class ExpertGemmConfig:
    """Tiles of the expert GEMM: ``block_m`` rows of one expert (the padding unit of the
    alignment, for both GEMM choices), ``block_n`` output columns, ``block_k`` of the reduction
    per step."""

    block_m: int = 16
    block_n: int = 64
    block_k: int = 128
    num_warps: int = 4
    num_stages: int = 4  # tiles in flight


# The tiles by the pairs an expert averages, fastest of 9-12 configurations on the H200 at
# Qwen3-30B-A3B's and gpt-oss-20b's decode batches 1-512 (benchmarks/results/planner/README.md).
GEMM_CONFIGS = (  # (most pairs an expert averages, tiles)
    (8, ExpertGemmConfig(block_m=16, block_n=64, block_k=128, num_warps=4, num_stages=4)),
    (16, ExpertGemmConfig(block_m=32, block_n=128, block_k=64, num_warps=4, num_stages=4)),
    (None, ExpertGemmConfig(block_m=64, block_n=128, block_k=64, num_warps=4, num_stages=3)),
)


def gemm_config_for(pairs: int, experts: int) -> ExpertGemmConfig:
    """The tiles for ``pairs`` (tokens × top-k) over ``experts``: 16-row blocks while an expert
    averages at most 8 pairs (the GEMM reads weights, and taller blocks only pad more rows), 32
    rows up to 16 and 64 beyond (each weight tile read then serves more rows). Chosen from the
    host-known pair count, so a CUDA graph's grid stays fixed."""
    return next(config for most, config in GEMM_CONFIGS if most is None or pairs <= most * experts)


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
def _align_kernel(
    counts_ptr,  # [experts] int32: pairs per expert
    cursor_ptr, ends_ptr,  # [experts] int32 out: each expert's first row; the end of its padded rows
    block_expert_ptr,  # [max_blocks] int32 out: the expert of each BLOCK_M-row block, −1 if none
    experts, max_blocks,
    BLOCK_M: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_B: tl.constexpr,
):
    offs = tl.arange(0, BLOCK_E)
    mask = offs < experts
    counts = tl.load(counts_ptr + offs, mask=mask, other=0)
    padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    ends = tl.cumsum(padded, axis=0)
    tl.store(cursor_ptr + offs, ends - padded, mask=mask)
    tl.store(ends_ptr + offs, ends, mask=mask)
    total = tl.sum(padded, axis=0)
    for b0 in range(0, max_blocks, BLOCK_B):
        blocks = b0 + tl.arange(0, BLOCK_B)
        first_row = blocks * BLOCK_M
        # The block's expert is the number of experts whose padded rows end at or before it (an
        # expert with no pairs ends where the one before it does, so no block is given to it).
        before = (ends[None, :] <= first_row[:, None]) & mask[None, :]
        expert = tl.sum(before.to(tl.int32), axis=1)
        expert = tl.where(first_row < total, expert, -1)
        tl.store(block_expert_ptr + blocks, expert, mask=blocks < max_blocks)


@triton.jit
def _scatter_kernel(
    x_ptr,  # [tokens, hidden]
    ids_ptr,  # [tokens, TOP_K] int32
    cursor_ptr,  # [experts] int32: advanced atomically
    row_ptr,  # [tokens, TOP_K] int32 out: the row of xs each pair took
    xs_ptr,  # [rows, hidden] out: the pairs' rows, grouped by expert
    hidden, stride_x, stride_xs,
    TOP_K: tl.constexpr, K_PAD: tl.constexpr, BLOCK_H: tl.constexpr,
):
    token = tl.program_id(0)
    slots = tl.arange(0, K_PAD)
    keep = slots < TOP_K
    ids = tl.load(ids_ptr + token * TOP_K + slots, mask=keep, other=0)
    # A token's experts are distinct, so one vector atomic gives each of its pairs a row.
    at = tl.atomic_add(cursor_ptr + ids, tl.full((K_PAD,), 1, dtype=tl.int32), mask=keep)
    tl.store(row_ptr + token * TOP_K + slots, at, mask=keep)
    dst = xs_ptr + at.to(tl.int64)[:, None] * stride_xs
    for h0 in range(0, hidden, BLOCK_H):
        offs = h0 + tl.arange(0, BLOCK_H)
        mask = offs < hidden
        row = tl.load(x_ptr + token * stride_x + offs, mask=mask)
        tl.store(dst + offs[None, :], tl.broadcast_to(row[None, :], (K_PAD, BLOCK_H)),
                 mask=keep[:, None] & mask[None, :])


@triton.jit
def _expert_gemm_kernel(
    a_ptr,  # [rows, K]: the pairs' rows, grouped by expert in BLOCK_M-row blocks
    w_ptr,  # [experts, N, K]: each expert's weight, rows contiguous
    c_ptr,  # [rows, N] out: a @ w[expert]ᵀ for each block's expert, 0 in its padding rows
    block_expert_ptr,  # [blocks] int32: the expert of each block, −1 for none
    row_end_ptr,  # [experts] int32: the end of each expert's pairs (its padding follows)
    N, stride_a, stride_we, stride_wn, stride_c,
    K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    UPCAST: tl.constexpr,
):
    block = tl.program_id(0)
    expert = tl.load(block_expert_ptr + block)
    if expert < 0:
        return
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < tl.load(row_end_ptr + expert)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < N
    a_rows = a_ptr + rows.to(tl.int64)[:, None] * stride_a
    w_rows = w_ptr + expert.to(tl.int64) * stride_we + cols.to(tl.int64)[:, None] * stride_wn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_ok = ks < K
        a = tl.load(a_rows + ks[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        w = tl.load(w_rows + ks[None, :], mask=col_ok[:, None] & k_ok[None, :], other=0.0)
        if UPCAST:  # the interpreter's dot takes float32
            a = a.to(tl.float32)
            w = w.to(tl.float32)
        acc = tl.dot(a, tl.trans(w), acc)
    tl.store(c_ptr + rows.to(tl.int64)[:, None] * stride_c + cols[None, :], acc.to(c_ptr.dtype.element_ty),
             mask=col_ok[None, :])


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


def _expert_gemm(a: torch.Tensor, w: torch.Tensor, block_expert: torch.Tensor, row_end: torch.Tensor,
                 config: ExpertGemmConfig) -> torch.Tensor:
    """``a`` [rows, K] @ ``w[e]``ᵀ for each block's expert ``e`` (``w`` [experts, N, K]): [rows, N],
    0 in an expert's padding rows (whatever ``a`` holds there) and unwritten in blocks without one."""
    rows, k = a.shape
    n = w.shape[1]
    c = torch.empty((rows, n), device=a.device, dtype=a.dtype)
    grid = (block_expert.numel(), triton.cdiv(n, config.block_n))
    _expert_gemm_kernel[grid](a, w, c, block_expert, row_end, n, a.stride(0), w.stride(0), w.stride(1), c.stride(0),
                              K=k, BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k,
                              UPCAST=interpreter_active(), num_warps=config.num_warps,
                              num_stages=config.num_stages)
    return c


def routed_experts(x: torch.Tensor, router_logits: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor,
                   top_k: int, *, gemm: str = "triton", config: ExpertGemmConfig | None = None) -> torch.Tensor:
    """The routed experts' SwiGLU MLP of ``x``, weighted by the router.

    Parameters
    ----------
    x : [tokens, hidden], 16-bit, rows contiguous
    router_logits : [tokens, experts]
    w13 : [experts, 2·width, hidden], each expert's gate rows then up rows (``x``'s dtype), contiguous
    w2 : [experts, hidden, width], contiguous
    top_k : experts each token goes to
    gemm : ``"triton"`` (the block-tiled expert GEMM) or ``"grouped_mm"`` (``torch._grouped_mm``
        over the same padded rows)
    config : the Triton GEMM's tiles (default :func:`gemm_config_for` the pairs); ``block_m`` is
        the padding unit for both choices

    Returns
    -------
    [tokens, hidden], ``x``'s dtype: Σ over a token's experts of weight · w2 (silu(gate) · up)
    """
    if x.dim() != 2 or x.stride(-1) != 1 or x.dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"x: a 16-bit [tokens, hidden] tensor with contiguous rows, got {tuple(x.shape)} {x.dtype}")
    if w13.dim() != 3 or w2.dim() != 3 or w13.dtype != x.dtype or w2.dtype != x.dtype:
        raise ValueError(f"w13, w2: 3-D tensors of x's dtype, got {tuple(w13.shape)} {w13.dtype}, "
                         f"{tuple(w2.shape)} {w2.dtype}")
    if not (w13.is_contiguous() and w2.is_contiguous()):
        raise ValueError("w13, w2: contiguous [experts, rows, columns] tensors")
    if gemm not in GEMMS:
        raise ValueError(f"gemm: {gemm!r}, expected one of {', '.join(GEMMS)}")
    tokens, hidden = x.shape
    experts, width2, _ = w13.shape
    if router_logits.shape != (tokens, experts):
        raise ValueError(f"router_logits: {tuple(router_logits.shape)}, expected ({tokens}, {experts})")
    if w13.shape[2] != hidden or width2 % 2 or w2.shape != (experts, hidden, width2 // 2):
        raise ValueError(f"w13, w2: {tuple(w13.shape)} and {tuple(w2.shape)} do not fit hidden {hidden} "
                         f"([experts, 2·width, hidden] and [experts, hidden, width])")
    out = torch.empty_like(x)
    if not tokens:
        return out
    ids, weights, counts = route_top_k(router_logits, top_k)
    pairs = tokens * top_k
    config = config or gemm_config_for(pairs, experts)
    block_m = config.block_m
    # Each expert's rows padded to whole blocks: at most pairs · BLOCK_M rows when every pair has
    # an expert of its own, and at most pairs + experts · (BLOCK_M − 1) in any case.
    max_blocks = triton.cdiv(min(pairs * block_m, pairs + experts * (block_m - 1)), block_m)
    cursor = torch.empty(experts, device=x.device, dtype=torch.int32)
    ends = torch.empty_like(cursor)
    block_expert = torch.empty(max_blocks, device=x.device, dtype=torch.int32)
    rows = torch.empty((tokens, top_k), device=x.device, dtype=torch.int32)
    # The Triton GEMM masks the padding rows; the grouped GEMM reads them, so they start at 0.
    alloc = torch.empty if gemm == "triton" else torch.zeros
    xs = alloc((max_blocks * block_m, hidden), device=x.device, dtype=x.dtype)
    _align_kernel[(1,)](counts, cursor, ends, block_expert, experts, max_blocks, BLOCK_M=block_m,
                        BLOCK_E=triton.next_power_of_2(experts), BLOCK_B=ALIGN_BLOCKS)
    _scatter_kernel[(tokens,)](x, ids, cursor, rows, xs, hidden, x.stride(0), xs.stride(0), TOP_K=top_k,
                               K_PAD=triton.next_power_of_2(top_k),
                               BLOCK_H=min(SCATTER_BLOCK, triton.next_power_of_2(hidden)))
    # The scatter left each expert's cursor at the end of its pairs.
    if gemm == "triton":
        gate_up = _expert_gemm(xs, w13, block_expert, cursor, config)
        ys = _expert_gemm(silu_and_mul(gate_up), w2, block_expert, cursor, config)
    else:
        gate_up = torch._grouped_mm(xs, w13.transpose(1, 2), offs=ends)
        ys = torch._grouped_mm(silu_and_mul(gate_up), w2.transpose(1, 2), offs=ends)
    _combine_kernel[(tokens, triton.cdiv(hidden, COMBINE_BLOCK))](
        ys, rows, weights, out, hidden, ys.stride(0), out.stride(0), TOP_K=top_k, BLOCK=COMBINE_BLOCK)
    return out

"""Merging split-KV partial outputs: the merge kernel, the merge inside the split kernel, and
which of the two a call uses (shared by the bf16/FP8 and INT4 Triton kernels; the Gluon kernels
use the merge kernel).

A split call leaves per split a normalised fp32 partial ``[batch, n_q_heads, num_splits,
head_dim]`` and its base-2 log-sum-exp ``[batch, n_q_heads, num_splits]`` (``-inf`` for an empty
split); the output is their LSE-weighted sum. By default (``DecodeConfig.merge="auto"``) few
splits are merged by the last split program of each (sequence, KV head) to finish, many by a
second kernel launched as a programmatic dependent launch on Hopper. On the H200 the inline
merge was faster at 8 splits (0.979x cuDNN against 0.963x) and slower at batch 1's 66, where one
program reads every partial in series while the merge kernel spreads them over a grid.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Callable

from kernels.runtime import ensure_triton_backend, pdl_supported

ensure_triton_backend()  # must run before `import triton`: the interpreter is chosen at decoration

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from kernels.decode.config import MAX_SPLITS, DecodeConfig  # noqa: E402
from kernels.decode.launch import SplitPlan, interpreted, merge_counters  # noqa: E402
from kernels.decode.direct_launch import DirectLauncher  # noqa: E402

__all__ = ["merge_splits", "merge_launch", "merge_if_last", "pdl_merge", "merges_inline",
           "choose_merge_plan", "merge_constexprs", "inline_counters", "INLINE_MERGE_MAX_SPLITS"]


@triton.jit
def merge_if_last(
    seq, num_splits, counter_ptr, part_out_ptr, part_lse_ptr, out_ptr,
    stride_ob, stride_oh, stride_pob, stride_poh, stride_pos, stride_plb, stride_plh,
    GROUP: tl.constexpr, MERGE_GROUP: tl.constexpr, MERGE_SPLITS: tl.constexpr, HEAD_DIM: tl.constexpr,
):
    """Take this split's ticket; the program that draws the last one merges every partial of the
    (sequence, KV head) into the output (LSE-weighted, as ``_merge_splits_kernel``) and resets
    the counter."""
    kv_head = tl.program_id(0)
    # All threads' partial stores precede the barrier; the one thread that takes the ticket then
    # releases them at GPU scope (cumulative), so the program that acquires the last ticket sees
    # every split's partial.
    tl.debug_barrier()
    counter = counter_ptr + seq * tl.num_programs(0) + kv_head
    ticket = tl.atomic_add(counter, 1, sem="acq_rel", scope="gpu")
    if ticket == num_splits - 1:
        tl.debug_barrier()  # the acquire comes before any thread's loads of the partials
        offs_g = tl.arange(0, MERGE_GROUP)
        offs_c = tl.arange(0, MERGE_SPLITS)
        offs_d = tl.arange(0, HEAD_DIM)
        mask_g = offs_g < GROUP
        heads = kv_head * GROUP + offs_g
        pl_base = part_lse_ptr + seq.to(tl.int64) * stride_plb + heads[:, None] * stride_plh
        po_base = (part_out_ptr + seq.to(tl.int64) * stride_pob + heads[:, None, None] * stride_poh
                   + offs_d[None, None, :])
        m = tl.full([MERGE_GROUP], float("-inf"), dtype=tl.float32)
        den = tl.zeros([MERGE_GROUP], dtype=tl.float32)
        acc = tl.zeros([MERGE_GROUP, HEAD_DIM], dtype=tl.float32)
        for first in range(0, num_splits, MERGE_SPLITS):
            splits = first + offs_c
            mask = mask_g[:, None] & (splits < num_splits)[None, :]
            # .cg: through L2 only; the L1 of this SM may not see other SMs' stores.
            lse = tl.load(pl_base + splits[None, :], mask=mask, other=float("-inf"), cache_modifier=".cg")
            parts = tl.load(po_base + splits[None, :, None] * stride_pos, mask=mask[:, :, None], other=0.0,
                            cache_modifier=".cg")
            # Finite from the first step on (split 0 always holds a token); padded rows pinned to 0.
            m_new = tl.where(mask_g, tl.maximum(m, tl.max(lse, 1)), 0.0)
            alpha = tl.math.exp2(m - m_new)  # 0 on the first step
            w = tl.math.exp2(lse - m_new[:, None])  # 0 for empty, padded and masked splits
            acc = acc * alpha[:, None] + tl.sum(parts * w[:, :, None], 1)
            den = den * alpha + tl.sum(w, 1)
            m = m_new
        out = acc / tl.where(den > 0.0, den, 1.0)[:, None]
        o_ptrs = out_ptr + seq.to(tl.int64) * stride_ob + heads[:, None] * stride_oh + offs_d[None, :]
        tl.store(o_ptrs, out.to(out_ptr.dtype.element_ty), mask=mask_g[:, None])
        tl.store(counter, 0)  # every split has taken its ticket: zero for the next call or replay


@triton.jit
def _merge_splits_kernel(
    part_out_ptr,  # [batch, n_q_heads, num_splits, HEAD_DIM] fp32 (or bf16) normalised partial outputs
    part_lse_ptr,  # [batch, n_q_heads, num_splits] fp32 base-2 log-sum-exp (-inf: empty split)
    out_ptr,  # [batch, n_q_heads, HEAD_DIM]
    sinks_ptr,  # [n_q_heads] fp32 sink logits, natural log (read only when HAS_SINKS)
    num_splits,
    stride_pob, stride_poh, stride_pos,
    stride_plb, stride_plh,
    stride_ob, stride_oh,
    SPLITS_PAD: tl.constexpr,  # num_splits rounded up to a power of two
    HEAD_DIM: tl.constexpr,
    WAIT_FOR_SPLITS: tl.constexpr = False,  # launched as a PDL dependent: wait for the split kernel
    D_CHUNK: tl.constexpr = 128,  # head dims per program (grid dim 2 walks the head's chunks)
    HAS_SINKS: tl.constexpr = False,  # a learned logit per query head joins the denominator
):
    seq = tl.program_id(0)
    head = tl.program_id(1)
    if HAS_SINKS:
        # An input, not a split's result: loaded before the wait, so it overlaps the split kernel.
        sink = tl.load(sinks_ptr + head) * 1.4426950408889634  # natural -> base 2
    if WAIT_FOR_SPLITS:
        # Programmatic dependent launch: this grid may be resident before the split kernel has
        # finished; griddepcontrol.wait returns once its writes are complete and visible.
        tl.extra.cuda.gdc_wait()
    offs_s = tl.arange(0, SPLITS_PAD)
    offs_d = tl.program_id(2) * D_CHUNK + tl.arange(0, D_CHUNK)
    mask_s = offs_s < num_splits
    lse = tl.load(
        part_lse_ptr + seq.to(tl.int64) * stride_plb + head * stride_plh + offs_s,
        mask=mask_s, other=float("-inf"),
    )
    m = tl.max(lse, 0)  # finite: split 0 always holds the sequence's first token
    if HAS_SINKS:
        m = tl.maximum(m, sink)
    w = tl.math.exp2(lse - m)  # exp2(-inf) = 0 for empty and padded splits
    po_ptrs = (
        part_out_ptr + seq.to(tl.int64) * stride_pob + head * stride_poh
        + offs_s[:, None] * stride_pos + offs_d[None, :]
    )
    parts = tl.load(po_ptrs, mask=mask_s[:, None], other=0.0).to(tl.float32)
    den = tl.sum(w, 0)
    if HAS_SINKS:
        den += tl.math.exp2(sink - m)  # a logit with no value: it only weighs the others down
    out = tl.sum(parts * w[:, None], 0) / den
    o_ptrs = out_ptr + seq.to(tl.int64) * stride_ob + head * stride_oh + offs_d
    tl.store(o_ptrs, out.to(out_ptr.dtype.element_ty))


def pdl_merge(config, split: bool, device: torch.device) -> bool:
    """Whether a call that merges its splits in the merge kernel (``split``) launches it as a
    programmatic dependent launch: asked for by the config, compiled (not interpreted), on a GPU
    that has it (compute capability 9.0+)."""
    return config.pdl and split and not interpreted(device) and pdl_supported(device)


# Up to this many splits, DecodeConfig(merge="auto") merges inline inside a CUDA graph. On the H200
# the inline merge was 1.016x the merge kernel at 8 splits (B8 L32K 64/8) and 1.00x at 2, but
# 0.93x at 66 (batch 1 x 32K), where one program reads 66 partials in series. Called eagerly, a
# small call is bound by the host, and one launch fewer is worth more than those GPU microseconds
# (batch 1 x 32K: eager 55.6 us inline against 80.9 with the merge kernel), so "auto" merges
# inline at every split count outside a graph.
INLINE_MERGE_MAX_SPLITS = 8


def merges_inline(config, num_splits: int, *, in_graph: bool) -> bool:
    """Whether a call cut into ``num_splits`` merges inside the split kernel: ``merge="inline"``
    whenever it splits; ``"auto"`` always when called eagerly, and inside a CUDA graph capture
    (``in_graph``, :func:`kernels.decode.launch.capturing`) up to ``INLINE_MERGE_MAX_SPLITS``.
    Configs without a ``merge`` field (the rdq kernel's) always use the merge kernel."""
    mode = getattr(config, "merge", "kernel")
    auto_inline = not in_graph or num_splits <= INLINE_MERGE_MAX_SPLITS
    return num_splits > 1 and (mode == "inline" or (mode == "auto" and auto_inline))


# Elements of one inline merge step's [MERGE_GROUP, MERGE_SPLITS, HEAD_DIM] fp32 tile per warp
# (32 per thread) unless DecodeConfig.merge_splits says otherwise. The merge's loads, their
# addresses and one lse per row all sit in registers, and the kernel's count is the larger of
# the main loop's and the merge's: compiled locally for sm_90 (triton 3.7.1, d 128), the bf16
# kernel went from 105 registers to 128 with 4 heads x 8 splits a step and 116 with 1 x 32
# (4 programs per SM kept), but to 205 with 8 x 4 (8 x 1: 104), and to 158 at twice this tile.
MERGE_TILE_PER_WARP = 1024


def merge_constexprs(config: DecodeConfig, inline: bool, group: int, head_dim: int) -> dict:
    """The split kernels' inline-merge compile-time values (shared with the INT4 kernel);
    ``inline`` from :func:`merges_inline`."""
    merge_group = triton.next_power_of_2(group)
    per_step = config.merge_splits or MERGE_TILE_PER_WARP * config.num_warps // (merge_group * head_dim)
    return dict(INLINE_MERGE=inline, MERGE_GROUP=merge_group,
                MERGE_SPLITS=max(1, min(MAX_SPLITS, per_step)))


def choose_merge_plan(config, plan_for: Callable[[bool], SplitPlan], *, in_graph: bool) -> tuple[SplitPlan, bool]:
    """A call's split plan and whether it merges inline, each plan made with the residency of
    the kernel variant that will run it (``plan_for(inline)``: the inline variant holds more
    registers, so it can fit fewer programs per SM and get another split count).

    ``in_graph``: the call is being captured in a CUDA graph (:func:`merges_inline`). "kernel"
    and "inline" plan for their own variant. "auto" plans for the merge-kernel variant
    and, where that plan has few enough splits to merge inline, replans for the inline variant;
    it merges inline only if that plan still qualifies, else keeps the first. (Planning the
    inline variant alone once turned batch 8 x 32K at block 1 from 8 splits into 10, 1.2 waves of
    the variant that then ran: 4.00 -> 3.19 TB/s on the H200.)
    """
    mode = getattr(config, "merge", "kernel")
    if mode == "inline":
        plan = plan_for(True)
        return plan, plan.split
    plan = plan_for(False)
    if mode == "auto" and merges_inline(config, plan.num_splits, in_graph=in_graph):
        inline_plan = plan_for(True)
        if merges_inline(config, inline_plan.num_splits, in_graph=in_graph):
            return inline_plan, True
    return plan, False


def inline_counters(inline: bool, plan: SplitPlan, out: torch.Tensor) -> torch.Tensor:
    """The ticket counters of an inline-merge split call (``plan.grid`` is ``(n_kv_heads, batch,
    splits)``); ``out`` stands in where nothing reads them."""
    if not inline:
        return out
    return merge_counters(out.device, plan.grid[0] * plan.grid[1])


def merge_launch(batch: int, n_q_heads: int, num_splits: int, head_dim: int) -> tuple[int, int]:
    """``(head dims per program, warps)`` of the merge kernel for a call's partials. Small
    programs: each (sequence, query head) is cut along the head dim so that more, lighter
    programs share the few microseconds the merge has (one wave either way). On the H200
    (CUDA-graph medians), INT4 batch 8 x 32K 64/8 at 33 splits: 32 dims and one
    warp 2.5 us faster a call than the whole head on four warps; batch 32 x 16K at 8 splits: 64
    dims on two warps 2.8 us faster."""
    if num_splits >= 16:
        return min(head_dim, 32), 1
    return min(head_dim, 64), 2


def merge_splits(part_out: torch.Tensor, part_lse: torch.Tensor, out: torch.Tensor, *,
                 pdl: bool = False, d_chunk: int | None = None, num_warps: int | None = None,
                 sinks: torch.Tensor | None = None) -> torch.Tensor:
    """Merge split-KV partial outputs into ``out`` (the second kernel of a split call).

    ``part_out`` is ``[batch, n_q_heads, num_splits, head_dim]`` fp32 (or bf16) normalised partial outputs
    (last dim contiguous), ``part_lse`` ``[batch, n_q_heads, num_splits]`` fp32 base-2
    log-sum-exps (last dim contiguous; ``-inf`` for an empty split, split 0 never empty), ``out``
    ``[batch, n_q_heads, head_dim]``. Public so the merge can be timed on its own.

    ``pdl``: the split kernel was launched with ``EARLY_MERGE_LAUNCH``; this one then goes out
    as its programmatic dependent launch and waits on the device, not behind the stream.
    ``d_chunk``: head dims per program (a power of two dividing ``head_dim``), with ``num_warps``
    warps each; by default :func:`merge_launch`'s. ``sinks``: ``[n_q_heads]`` fp32 sink logits
    (natural log, contiguous) that join each head's denominator here, so the split kernel that
    wrote the partials runs as it does without sinks.
    """
    batch, n_q_heads, num_splits, head_dim = part_out.shape
    chosen_chunk, chosen_warps = merge_launch(batch, n_q_heads, num_splits, head_dim)
    d_chunk, num_warps = d_chunk or chosen_chunk, num_warps or chosen_warps
    _launch_merge_kernel((batch, n_q_heads, head_dim // d_chunk), (
        part_out, part_lse, out, out if sinks is None else sinks, num_splits,
        part_out.stride(0), part_out.stride(1), part_out.stride(2),
        part_lse.stride(0), part_lse.stride(1),
        out.stride(0), out.stride(1)), _merge_kwargs(triton.next_power_of_2(num_splits), head_dim, pdl, d_chunk,
                                                     num_warps, sinks is not None))
    return out


_launch_merge_kernel = DirectLauncher(_merge_splits_kernel)  # eager calls are host-bound at batch 1


@lru_cache(maxsize=64)  # one dict per variant: DirectLauncher keys on its identity
def _merge_kwargs(splits_pad: int, head_dim: int, pdl: bool, d_chunk: int, num_warps: int,
                  has_sinks: bool = False) -> dict:
    if d_chunk < 1 or d_chunk & (d_chunk - 1) or head_dim % d_chunk:
        raise ValueError(f"d_chunk must be a power of two dividing head_dim {head_dim}, got {d_chunk}")
    if num_warps not in (1, 2, 4, 8):
        raise ValueError(f"num_warps must be 1, 2, 4 or 8, got {num_warps}")
    return dict(SPLITS_PAD=splits_pad, HEAD_DIM=head_dim, WAIT_FOR_SPLITS=pdl, num_warps=num_warps, D_CHUNK=d_chunk,
                HAS_SINKS=has_sinks, **({"launch_pdl": True} if pdl else {}))

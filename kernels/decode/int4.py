"""Paged decode attention over an INT4 KV cache (4-bit values, fp16 scales per half head vector).

Same algorithm, grid and split-KV scheme as :mod:`kernels.decode.paged` (one program per
(KV head, sequence, split), all query heads of the KV head in one tile, online softmax in base
2, the merge kernel or ``DecodeConfig(merge="inline")``); only the loads and the dots differ. The pool layout is
:mod:`kernels.cache.int4`'s: byte ``j`` holds dim ``j`` (low nibble) and dim ``j + D/2`` (high
nibble), one fp16 scale per token for each half. So a K tile splits into two half tiles without
any interleaving, and each half has one scale per token, which factors out of the dots:

    s   = (q_lo . k_lo^T) * ks_lo[n] + (q_hi . k_hi^T) * ks_hi[n]       # codes - 8, in fp16
    acc_lo += (p * vs_lo[n]) . v_lo ;  acc_hi += (p * vs_hi[n]) . v_hi

The codes ``0..15`` become fp16 ``code - 8`` exactly, either with an integer -> float convert
(``DEQUANT = 0``) or with the bit trick ``fp16(0x6400 | code) = 1024 + code`` then ``- 1032``
(``DEQUANT = 1``; an OR and a subtract instead of the quarter-rate I2F unit). The scales are
applied to the ``[GROUP, BLOCK_N]`` logits and probabilities, never to the ``[BLOCK_N, D]`` tiles.

Limits: head_dim 32, 64 or 128 (half-width dots need D/2 >= 16); block size a power of two
1..256; query bf16 or fp16 (the dots run in fp16, so |q| < 65504).
"""

from __future__ import annotations

from functools import lru_cache

from kernels.runtime import ensure_triton_backend

ensure_triton_backend()  # must run before `import triton`: the interpreter is chosen at decoration

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from kernels.decode.checks import check_int4_inputs, check_values  # noqa: E402
from kernels.decode.config import DecodeConfig  # noqa: E402
from kernels.decode.direct_launch import DirectLauncher  # noqa: E402
from kernels.decode.launch import (  # noqa: E402
    SplitKernelArgs,
    SplitPlan,
    capturing,
    check_call_options,
    checked_once,
    planned_split,
    signature,
    split_buffers,
)
from kernels.cache.int4 import Int4Pool  # noqa: E402
from kernels.decode.merge import (  # noqa: E402
    choose_merge_plan,
    inline_counters,
    merge_splits,
)
from kernels.reference.online_softmax import LOG2_E  # noqa: E402
from kernels.decode.paged import _split_range, _write_output, split_kernel_constexprs  # noqa: E402

__all__ = ["triton_int4_decode", "int4_num_splits", "default_int4_config"]


@triton.jit
def _dequant(codes, HIGH: tl.constexpr, DEQUANT: tl.constexpr, INTERPRET: tl.constexpr):
    """The low (or high) nibbles of uint8 ``codes`` as ``nibble - 8`` (fp16; fp32 interpreted)."""
    if HIGH:
        nib = codes >> 4
    else:
        nib = codes & 0xF
    if INTERPRET:
        return nib.to(tl.float32) - 8.0
    if DEQUANT == 1:
        magic = (nib.to(tl.uint16) | 0x6400).to(tl.float16, bitcast=True)  # 1024 + code
        return magic - 1032.0
    return nib.to(tl.float16) - 8.0


@triton.jit
def _int4_tile(
    q_lo, q_hi, m_i, l_i, acc_lo, acc_hi, scale, start_n, end,
    table_ptr, k_head_ptr, v_head_ptr, ks_head_ptr, vs_head_ptr,
    stride_kb, stride_kt, stride_vb, stride_vt, stride_ksb, stride_kst, stride_vsb, stride_vst,
    offs_h,
    PAGE_SIZE: tl.constexpr, BLOCK_N: tl.constexpr,
    DEQUANT: tl.constexpr, INTERPRET: tl.constexpr,
):
    """One online-softmax step over ``BLOCK_N`` tokens; returns m, l and the two accumulators."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    mask_n = offs_n < end
    page = tl.load(table_ptr + offs_n // PAGE_SIZE, mask=mask_n, other=0).to(tl.int64)
    slot = offs_n % PAGE_SIZE
    k_ptrs = k_head_ptr + page[:, None] * stride_kb + slot[:, None] * stride_kt + offs_h[None, :]
    v_ptrs = v_head_ptr + page[:, None] * stride_vb + slot[:, None] * stride_vt + offs_h[None, :]
    ks_ptrs = ks_head_ptr + page * stride_ksb + slot * stride_kst
    vs_ptrs = vs_head_ptr + page * stride_vsb + slot * stride_vst
    # Past the end: codes 8 (value 0) and scale 0, so NaN scales of unwritten slots never load.
    kp = tl.load(k_ptrs, mask=mask_n[:, None], other=8)
    vp = tl.load(v_ptrs, mask=mask_n[:, None], other=8)
    ks_lo = tl.load(ks_ptrs, mask=mask_n, other=0.0).to(tl.float32)
    ks_hi = tl.load(ks_ptrs + 1, mask=mask_n, other=0.0).to(tl.float32)
    vs_lo = tl.load(vs_ptrs, mask=mask_n, other=0.0).to(tl.float32)
    vs_hi = tl.load(vs_ptrs + 1, mask=mask_n, other=0.0).to(tl.float32)
    k_lo = _dequant(kp, False, DEQUANT, INTERPRET)
    k_hi = _dequant(kp, True, DEQUANT, INTERPRET)
    s = tl.dot(q_lo, tl.trans(k_lo)) * ks_lo[None, :] + tl.dot(q_hi, tl.trans(k_hi)) * ks_hi[None, :]
    s = tl.where(mask_n[None, :], s * scale, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    alpha = tl.math.exp2(m_i - m_new)
    p = tl.math.exp2(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    v_lo = _dequant(vp, False, DEQUANT, INTERPRET)
    v_hi = _dequant(vp, True, DEQUANT, INTERPRET)
    acc_lo = acc_lo * alpha[:, None] + tl.dot((p * vs_lo[None, :]).to(v_lo.dtype), v_lo)
    acc_hi = acc_hi * alpha[:, None] + tl.dot((p * vs_hi[None, :]).to(v_hi.dtype), v_hi)
    return m_new, l_i, acc_lo, acc_hi


@triton.jit
def _paged_decode_int4_kernel(
    q_ptr,  # [batch, n_q_heads, HEAD_DIM] bf16/fp16
    k_ptr, v_ptr,  # [num_blocks, n_kv_heads, PAGE_SIZE, HEAD_DIM // 2] uint8 packed codes
    ks_ptr, vs_ptr,  # [num_blocks, n_kv_heads, PAGE_SIZE, 2] fp16 scales (low half, high half)
    block_tables_ptr,  # [batch, max_blocks_per_seq] int32
    seq_lens_ptr,  # [batch] int32
    out_ptr, part_out_ptr, part_lse_ptr, counter_ptr,  # as in the bf16 kernel
    qk_scale, num_splits,
    stride_qb, stride_qh,
    stride_kb, stride_kh, stride_kt, stride_vb, stride_vh, stride_vt,
    stride_ksb, stride_ksh, stride_kst, stride_vsb, stride_vsh, stride_vst,
    stride_btb, stride_ob, stride_oh,
    stride_pob, stride_poh, stride_pos, stride_plb, stride_plh,
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr, PAGE_SIZE: tl.constexpr,
    BLOCK_N: tl.constexpr, SPLIT: tl.constexpr, DEQUANT: tl.constexpr,
    INTERPRET: tl.constexpr, EARLY_MERGE_LAUNCH: tl.constexpr = False,
    INLINE_MERGE: tl.constexpr = False, MERGE_GROUP: tl.constexpr = 1, MERGE_SPLITS: tl.constexpr = 1,
):
    if EARLY_MERGE_LAUNCH:
        tl.extra.cuda.gdc_launch_dependents()
    HALF: tl.constexpr = HEAD_DIM // 2
    kv_head = tl.program_id(0)
    seq = tl.program_id(1)
    split = tl.program_id(2)
    start, end, _ = _split_range(seq_lens_ptr, seq, split, num_splits, 0, BLOCK_N)

    offs_g = tl.arange(0, GROUP_PAD)
    offs_h = tl.arange(0, HALF)
    mask_g = offs_g < GROUP
    q_heads = kv_head * GROUP + offs_g
    q_base = q_ptr + seq.to(tl.int64) * stride_qb + q_heads[:, None] * stride_qh + offs_h[None, :]
    q_lo = tl.load(q_base, mask=mask_g[:, None], other=0.0)
    q_hi = tl.load(q_base + HALF, mask=mask_g[:, None], other=0.0)
    if INTERPRET:
        q_lo = q_lo.to(tl.float32)
        q_hi = q_hi.to(tl.float32)
    else:
        q_lo = q_lo.to(tl.float16)
        q_hi = q_hi.to(tl.float16)

    k_head_ptr = k_ptr + kv_head.to(tl.int64) * stride_kh
    v_head_ptr = v_ptr + kv_head.to(tl.int64) * stride_vh
    ks_head_ptr = ks_ptr + kv_head.to(tl.int64) * stride_ksh
    vs_head_ptr = vs_ptr + kv_head.to(tl.int64) * stride_vsh
    table_ptr = block_tables_ptr + seq.to(tl.int64) * stride_btb

    m_i = tl.full([GROUP_PAD], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([GROUP_PAD], dtype=tl.float32)
    acc_lo = tl.zeros([GROUP_PAD, HALF], dtype=tl.float32)
    acc_hi = tl.zeros([GROUP_PAD, HALF], dtype=tl.float32)
    for start_n in range(start, end, BLOCK_N):
        m_i, l_i, acc_lo, acc_hi = _int4_tile(
            q_lo, q_hi, m_i, l_i, acc_lo, acc_hi, qk_scale, start_n, end,
            table_ptr, k_head_ptr, v_head_ptr, ks_head_ptr, vs_head_ptr,
            stride_kb, stride_kt, stride_vb, stride_vt, stride_ksb, stride_kst, stride_vsb, stride_vst,
            offs_h, PAGE_SIZE, BLOCK_N, DEQUANT, INTERPRET,
        )
    has_tokens = l_i > 0.0
    norm = tl.where(has_tokens, l_i, 1.0)[:, None]
    # [GROUP_PAD, HALF] x 2 -> [GROUP_PAD, HEAD_DIM]: dims 0..HALF-1 then HALF..HEAD_DIM-1.
    out = tl.reshape(tl.permute(tl.join(acc_lo / norm, acc_hi / norm), (0, 2, 1)), (GROUP_PAD, HEAD_DIM))
    offs_d = tl.arange(0, HEAD_DIM)
    _write_output(
        out, m_i, l_i, has_tokens, seq, split, q_heads, mask_g, offs_d,
        out_ptr, part_out_ptr, part_lse_ptr, counter_ptr, num_splits,
        stride_ob, stride_oh, stride_pob, stride_poh, stride_pos, stride_plb, stride_plh, SPLIT,
        INLINE_MERGE, GROUP, MERGE_GROUP, MERGE_SPLITS, HEAD_DIM,
    )


def default_int4_config(head_dim: int) -> DecodeConfig:
    """Launch parameters for INT4 KV: 128-token tiles, 4 warps, 3 stages were the best of six
    configurations at every shape measured on the H200 (0.84x the bf16 kernel's tokens/s at
    batch 128 x 32K: every value is unpacked in registers and moved between layouts)."""
    return DecodeConfig(block_n=128, num_warps=4, num_stages=3)


def _prepare(q, k, v, block_tables, seq_lens, sm_scale, num_splits, config, dequant: int, validate: bool, *,
             in_graph: bool | None = None) -> tuple:
    """Checks, the split plan and merge, the arguments' and compile-time values' builders and the
    output of one call (``in_graph``: plan as inside a CUDA graph capture or not; default: whether
    one is under way)."""
    key = signature(q, k.data, k.scales, v.data, v.scales, block_tables, seq_lens) \
        if isinstance(k, Int4Pool) and isinstance(v, Int4Pool) else None
    checked_once(key, lambda: check_int4_inputs(q, k, v, block_tables, seq_lens))
    if dequant not in (0, 1):
        raise ValueError(f"dequant must be 0 or 1, got {dequant!r}")
    batch, n_q_heads, head_dim = q.shape
    num_blocks, n_kv_heads, block_size, _ = k.data.shape
    sm_scale = check_call_options(sm_scale, num_splits, head_dim)
    if validate:
        check_values(block_tables, seq_lens, num_blocks, block_size)
    config = config or default_int4_config(head_dim)
    group = n_q_heads // n_kv_heads
    out = torch.empty_like(q)

    def args(plan: SplitPlan, inline: bool) -> SplitKernelArgs:
        part_out, part_lse, part_strides = split_buffers(plan, q, out)
        return SplitKernelArgs(
            inputs=(q, k.data, v.data, k.scales, v.scales, block_tables, seq_lens),
            out=out, part_out=part_out, part_lse=part_lse, counters=inline_counters(inline, plan, out),
            qk_scale=sm_scale * LOG2_E, num_splits=plan.num_splits,
            strides=(q.stride(0), q.stride(1), *k.data.stride()[:3], *v.data.stride()[:3], *k.scales.stride()[:3],
                     *v.scales.stride()[:3], block_tables.stride(0), out.stride(0), out.stride(1), *part_strides))

    def constexprs(plan: SplitPlan, inline: bool) -> dict:
        return _constexprs(group, head_dim, block_size, config, dequant, plan.split, inline, q.device)

    def plan_for(inline: bool) -> SplitPlan:
        return planned_split((key, config, dequant, inline), batch, n_kv_heads, block_tables.shape[1] * block_size,
                             q.device, num_splits, config.block_n, config.waves,
                             lambda trial: _paged_decode_int4_kernel.warmup(*args(trial, inline).values(), grid=trial.grid,
                                                                            **constexprs(trial, inline)))[0]

    plan, inline = choose_merge_plan(config, plan_for, in_graph=capturing(q.device) if in_graph is None else in_graph)
    return plan, inline, args, constexprs, out


def triton_int4_decode(
    q: torch.Tensor, k: Int4Pool, v: Int4Pool, block_tables: torch.Tensor, seq_lens: torch.Tensor, *,
    sm_scale: float | None = None, num_splits: int | None = None, config: DecodeConfig | None = None,
    dequant: int = 1, validate: bool = True,
) -> torch.Tensor:
    """This module's kernel on INT4 pools (arguments as :func:`kernels.decode.api.paged_decode_attention`,
    which is how callers reach it).

    ``dequant``: 0, integer -> fp16 convert; 1 (the default, 1.4-1.5x faster on the H200), the
    fp16 bit trick (see the module docstring).
    """
    plan, inline, args, constexprs, out = _prepare(q, k, v, block_tables, seq_lens, sm_scale, num_splits, config,
                                                   dequant, validate)
    launch_args, launch_constexprs = args(plan, inline), constexprs(plan, inline)
    _launch_int4_kernel(plan.grid, launch_args.values(), launch_constexprs)
    if plan.split and not launch_constexprs["INLINE_MERGE"]:
        merge_splits(launch_args.part_out, launch_args.part_lse, out, pdl=launch_constexprs["EARLY_MERGE_LAUNCH"])
    return out


def int4_num_splits(q: torch.Tensor, k: Int4Pool, v: Int4Pool, block_tables: torch.Tensor, seq_lens: torch.Tensor, *,
                    config: DecodeConfig | None = None, dequant: int = 1, in_graph: bool = False) -> int:
    """The split count :func:`triton_int4_decode` would use for this call, eagerly or inside a CUDA
    graph capture (nothing is launched; on a GPU the kernel is compiled, as the call would)."""
    return _prepare(q, k, v, block_tables, seq_lens, None, None, config, dequant, False, in_graph=in_graph)[0].num_splits


_launch_int4_kernel = DirectLauncher(_paged_decode_int4_kernel)  # eager calls are host-bound at batch 1


@lru_cache(maxsize=256)  # one dict per variant: DirectLauncher keys on its identity
def _constexprs(group: int, head_dim: int, block_size: int, config: DecodeConfig, dequant: int, split: bool,
                inline: bool, device: torch.device) -> dict:
    """The INT4 kernel's compile-time values and launch options for one call variant."""
    return dict(DEQUANT=dequant, **split_kernel_constexprs(config, group, head_dim, block_size, split, inline, device))

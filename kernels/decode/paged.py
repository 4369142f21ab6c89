"""Paged decode attention in Triton: one query token per sequence against a block-table KV cache.

Algorithm
---------
Each sequence ``b`` has one new query token with ``n_q_heads`` heads. Its keys and values sit in
a shared pool of fixed-size blocks ("pages") of ``block_size`` tokens; ``block_tables[b, j]`` is
the pool index of the sequence's ``j``-th logical block, so token ``t`` lives in page
``block_tables[b, t // block_size]`` at slot ``t % block_size``.

One program handles one (KV head, sequence, split). It loads the ``GROUP = n_q_heads //
n_kv_heads`` query heads that share the KV head as one ``[GROUP_PAD, HEAD_DIM]`` tile and walks
its share of the sequence ``BLOCK_N`` tokens at a time, so every K/V byte is read from HBM once
for the whole group and the two products are ``tl.dot``s (tensor cores):

    s   = (q @ k^T) * sm_scale * k_scale * log2(e)       # [GROUP_PAD, BLOCK_N], base-2 logits
    m   = max(m_i, rowmax(s));  p = exp2(s - m)            # online softmax (FlashAttention)
    acc = acc * exp2(m_i - m) + p @ v;  l_i = l_i * exp2(m_i - m) + rowsum(p)

Decode reads ~2 bytes of KV per FLOP, so it is bound by HBM bandwidth; the kernel's job is to
keep enough loads in flight on every SM. When ``batch * n_kv_heads`` programs are too few to
fill the GPU (batch 1 has 8 for Llama-3), the sequence is cut into ``num_splits`` parts; each
writes its normalised partial output and its log-sum-exp (base 2), and a second kernel merges
them: ``out = sum_s 2^{lse_s} o_s / sum_s 2^{lse_s}`` (FlashDecoding).

FP8 (e4m3) KV: values are stored as ``k_fp8 = k / k_scale``. No dequantised copy is ever
written: ``k_scale`` is folded into the softmax scale and ``v_scale`` into the final
normalisation (scales per tensor or per KV head, fp32). By default (``DecodeConfig.fp8_qk_dot``)
q.k^T is an e4m3 x e4m3 MMA: the query tile is quantised once per program (amax -> 448, undone
in the logit scale) and K goes to the tensor cores as stored. p.v runs in fp16: V is converted
e4m3 -> fp16 (a native conversion on Hopper; e4m3 -> bf16 is not, and was measured 0.6-1.05x the
bf16 kernel). An e4m3 p.v MMA needs V token-major per page (8-bit MMA operands must be K-major)
and p quantised to e4m3: measured slower (0.96-1.37x bf16) and outside the FP8 tolerance
(4.4e-2 and 5.5e-2 against 3e-2: p in e4m3 keeps 3 mantissa bits), so it is not offered. With
``fp8_qk_dot=False`` both products run in fp16, so a bf16 query must then lie within fp16 range
(|q| < 65504).

Split-KV merge (``DecodeConfig.merge``). By default a second, tiny kernel; on Hopper it goes out
as a programmatic dependent launch (``DecodeConfig.pdl``): the split kernel lets it start at once
and it waits on the device (``griddepcontrol.wait``) instead of behind the stream, which took an
eager batch-1 x 32K call from 0.135 to 0.066 ms and left graph replays unchanged.
``merge="inline"`` merges inside the split kernel instead: each split program stores its partial,
then takes a ticket from a per-(sequence, KV head) int32 counter (``atomic_add``, acq_rel at GPU
scope, after a CTA barrier so every thread's stores precede the release); the program that draws
``num_splits - 1`` is the last, reads every partial of its (sequence, KV head) (``.cg`` loads,
past the L1, which is not coherent across SMs), merges them ``MERGE_SPLITS`` at a time with a
running max (the same LSE weights as the merge kernel, reassociated) and resets the counter to 0
for the next call and the next graph replay (:func:`kernels.decode.launch.merge_counters`). A
first version (one split per step, then 32) was slower than two launches (batch 1 x 32K: 0.0526
ms against 0.0416). This one, measured on the H200, is 1.016x the merge kernel at 8 splits (B8
L32K 64/8) but 0.93x at 66 (batch 1 x 32K), where one program reads 66 partials in series; so
the default, ``merge="auto"``, merges inline up to ``INLINE_MERGE_MAX_SPLITS`` splits and in the
merge kernel beyond when a CUDA graph is being captured, and inline at every split count when
called eagerly, where the host's second launch costs more than the merge's GPU time
(on the H200 the inline merge won at 8 splits and lost at 66; eager, one launch fewer took batch
1 x 32K from 80.9 to 55.6 us).

Cache layout (chosen here; "HND" in FlashInfer's words)
------------------------------------------------------
``k_cache, v_cache: [num_blocks, n_kv_heads, block_size, head_dim]``, last dim contiguous.
One page of one head is then ``block_size * head_dim`` contiguous elements (4 KiB for 16 x 128
bf16), which keeps loads wide and coalesced. Other strides of the first three dims are allowed.

Safety: token offsets come from the block table as int32 and are widened to int64 before
they are multiplied by strides (a pool of 17 GB overflows int32 element offsets). Loads past a
sequence's end are masked with ``other=0`` and their logits set to ``-inf``, so slots never
written (which may hold NaN) cannot reach the output.

Sources: Kwon et al. 2023 (PagedAttention / vLLM); Dao et al. FlashAttention-2 (online
softmax); the FlashDecoding split-KV scheme; the Triton fused-attention tutorial.

Limits: one query token per sequence (no speculative/chunked prefill); head_dim a power of
two from 16 to 256; block_size any power of two from 1 to 256 (a tile of ``BLOCK_N`` tokens may
span several pages or part of one); query bf16 or fp16, KV the same
dtype or float8_e4m3fn. Under ``TRITON_INTERPRET=1`` the tiles are converted to fp32 before
the dots (the interpreter's bf16 arithmetic is wrong); on the GPU they stay in bf16/fp16 (an
fp32 dot would mean TF32).
"""

from __future__ import annotations

from functools import lru_cache

from kernels.runtime import ensure_triton_backend

ensure_triton_backend()  # must run before `import triton`: the interpreter is chosen at decoration

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from kernels.attention_span import FULL, Span, check_sinks, visible_bound  # noqa: E402
from kernels.decode.checks import (  # noqa: E402
    KV_DTYPES,
    SUPPORTED_HEAD_DIMS,
    check_shapes,
    check_strides,
    check_values,
)
from kernels.decode.config import (  # noqa: E402
    FP8_DTYPE, FULL_MIN_TILES, WINDOW_MIN_TILES, WINDOW_WHOLE_TILES, DecodeConfig, default_config, default_num_splits,
)
from kernels.decode.direct_launch import DirectLauncher  # noqa: E402
from kernels.reference.online_softmax import LOG2_E  # noqa: E402
from kernels.decode.launch import (  # noqa: E402
    SplitKernelArgs,
    SplitPlan,
    capturing,
    check_call_options,
    checked_once,
    fp8_scales,
    interpreted,
    planned_split,
    signature,
    split_buffers,
)
from kernels.decode.merge import (  # noqa: E402
    merge_if_last,
    choose_merge_plan,
    inline_counters,
    merge_constexprs,
    merge_splits,
    pdl_merge,
)

__all__ = [
    "DecodeConfig",
    "default_config",
    "default_num_splits",
    "triton_decode",
    "decode_num_splits",
    "SUPPORTED_HEAD_DIMS",
    "KV_DTYPES",
]

MIN_GROUP_PAD = 16  # tl.dot needs M >= 16; padded query rows are masked on load and store


# ----------------------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------------------


@triton.jit
def _split_range(seq_lens_ptr, seq, split, num_splits, span, BLOCK_N: tl.constexpr, SPAN: tl.constexpr = 0):
    """Tokens ``[start, end)`` of one split of one sequence and the first key the query sees,
    ``first`` (shared by the bf16/FP8 and the INT4 kernels). The splits cut the tiles from the
    one holding ``first`` to the end in whole BLOCK_N tiles, so only the visible range's first
    and last tiles are ragged and pages before ``first`` are never touched. ``SPAN`` as
    :data:`kernels.attention_span.SPAN_CODES`: 0 full, 1 sliding window of ``span`` tokens,
    2 chunks of ``span`` tokens."""
    seq_len = tl.load(seq_lens_ptr + seq)
    first = 0
    if SPAN == 1:
        first = tl.maximum(seq_len - span, 0)
    elif SPAN == 2:
        first = ((seq_len - 1) // span) * span
    first_tile = first // BLOCK_N
    tiles_per_split = tl.cdiv(tl.cdiv(seq_len, BLOCK_N) - first_tile, num_splits)
    start = (first_tile + split * tiles_per_split) * BLOCK_N
    return start, tl.minimum(start + tiles_per_split * BLOCK_N, seq_len), first


@triton.jit
def _paged_decode_kernel(
    q_ptr,  # [batch, n_q_heads, HEAD_DIM] query, bf16/fp16
    k_cache_ptr,  # [num_blocks, n_kv_heads, PAGE_SIZE, HEAD_DIM] key pool
    v_cache_ptr,  # [num_blocks, n_kv_heads, PAGE_SIZE, HEAD_DIM] value pool
    block_tables_ptr,  # [batch, max_blocks_per_seq] int32 pool indices
    seq_lens_ptr,  # [batch] int32 tokens per sequence
    k_scale_ptr,  # [n_kv_heads] fp32 dequantisation scales (read only when HAS_SCALES)
    v_scale_ptr,  # [n_kv_heads] fp32
    sinks_ptr,  # [n_q_heads] fp32 sink logits, natural log (read only when HAS_SINKS)
    span,  # sliding window or chunk in tokens (SPAN 1 or 2)
    out_ptr,  # [batch, n_q_heads, HEAD_DIM] final output (written when not SPLIT)
    part_out_ptr,  # [batch, n_q_heads, num_splits, HEAD_DIM] fp32 partial outputs (SPLIT)
    part_lse_ptr,  # [batch, n_q_heads, num_splits] fp32 base-2 log-sum-exp per split (SPLIT)
    counter_ptr,  # [>= batch * n_kv_heads] int32 tickets, zero between calls (INLINE_MERGE)
    qk_scale,  # sm_scale * log2(e): logits come out in base 2 for exp2
    num_splits,  # parts each sequence is cut into (grid dim 2)
    stride_qb, stride_qh,
    stride_kb, stride_kh, stride_kt,
    stride_vb, stride_vh, stride_vt,
    stride_btb,
    stride_ob, stride_oh,
    stride_pob, stride_poh, stride_pos,
    stride_plb, stride_plh,
    GROUP: tl.constexpr,  # query heads per KV head
    GROUP_PAD: tl.constexpr,  # GROUP rounded up to a power of two >= 16 (tl.dot minimum M)
    HEAD_DIM: tl.constexpr,
    PAGE_SIZE: tl.constexpr,  # tokens per cache block
    BLOCK_N: tl.constexpr,  # tokens per loop step (may span several pages or part of one)
    HAS_SCALES: tl.constexpr,  # FP8 cache: fold k_scale into the logits, v_scale into the output
    FP8_KV: tl.constexpr,  # FP8 cache: run the dots in fp16 (e4m3 -> fp16 is a native cvt)
    FP8_QK: tl.constexpr,  # FP8 cache: q.k^T as an e4m3 x e4m3 dot (query quantised per program)
    SPLIT: tl.constexpr,  # write partials + lse for the merge kernel instead of the output
    INTERPRET: tl.constexpr,  # Triton interpreter: do the dots in fp32 (its bf16 math is wrong)
    EARLY_MERGE_LAUNCH: tl.constexpr = False,  # let the merge kernel (a PDL dependent) start now
    INLINE_MERGE: tl.constexpr = False,  # SPLIT: the last split program of a KV head merges
    MERGE_GROUP: tl.constexpr = 1,  # GROUP rounded up to a power of two (the merge has no tl.dot)
    MERGE_SPLITS: tl.constexpr = 1,  # partials per merge step
    SPAN: tl.constexpr = 0,  # keys seen: 0 all, 1 the last `span`, 2 the query's `span`-token chunk
    HAS_SINKS: tl.constexpr = False,  # a learned logit per query head joins the denominator
):
    if EARLY_MERGE_LAUNCH:
        tl.extra.cuda.gdc_launch_dependents()
    kv_head = tl.program_id(0)
    seq = tl.program_id(1)
    split = tl.program_id(2)

    start, end, first = _split_range(seq_lens_ptr, seq, split, num_splits, span, BLOCK_N, SPAN)

    offs_g = tl.arange(0, GROUP_PAD)
    offs_d = tl.arange(0, HEAD_DIM)
    mask_g = offs_g < GROUP
    q_heads = kv_head * GROUP + offs_g
    q_ptrs = q_ptr + seq.to(tl.int64) * stride_qb + q_heads[:, None] * stride_qh + offs_d[None, :]
    q = tl.load(q_ptrs, mask=mask_g[:, None], other=0.0)

    scale = qk_scale
    if HAS_SCALES:
        scale = scale * tl.load(k_scale_ptr + kv_head)
    if INTERPRET:
        q = q.to(tl.float32)
    elif FP8_QK:
        # Quantise the query tile once: amax -> 448 (e4m3's largest), undone in the logit scale.
        q_f32 = q.to(tl.float32)
        q_amax = tl.max(tl.max(tl.abs(q_f32), 1), 0)
        q_scale = 448.0 / tl.maximum(q_amax, 1e-30)
        q = (q_f32 * q_scale).to(k_cache_ptr.dtype.element_ty)
        scale = scale / q_scale
    elif FP8_KV:
        # e4m3 -> fp16 is one hardware cvt per pair on sm_89+, e4m3 -> bf16 is a slow software
        # sequence that made the FP8 kernel compute-bound (measured: 0.6-1.05x the bf16 kernel).
        q = q.to(tl.float16)

    k_head_ptr = k_cache_ptr + kv_head.to(tl.int64) * stride_kh
    v_head_ptr = v_cache_ptr + kv_head.to(tl.int64) * stride_vh
    table_ptr = block_tables_ptr + seq.to(tl.int64) * stride_btb

    if HAS_SINKS:
        # Loaded now, used after the loop: its latency hides behind the first tile's loads.
        sink_row = mask_g & (split == 0)
        sink = tl.load(sinks_ptr + q_heads, mask=sink_row, other=0.0) * 1.4426950408889634  # natural -> base 2
    m_i = tl.full([GROUP_PAD], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([GROUP_PAD], dtype=tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], dtype=tl.float32)

    for start_n in range(start, end, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        mask_n = offs_n < end
        if SPAN != 0:
            mask_n = mask_n & (offs_n >= first)  # the visible range's first tile is ragged
        # Logical token -> (page, slot). The page index is int32 in the table: widen before the
        # stride multiply, a large pool's element offsets overflow int32.
        page = tl.load(table_ptr + offs_n // PAGE_SIZE, mask=mask_n, other=0).to(tl.int64)
        slot = offs_n % PAGE_SIZE
        k_ptrs = k_head_ptr + page[:, None] * stride_kb + slot[:, None] * stride_kt + offs_d[None, :]
        v_ptrs = v_head_ptr + page[:, None] * stride_vb + slot[:, None] * stride_vt + offs_d[None, :]
        # Masked with other=0: slots past the end may hold NaN and must not enter the dots.
        k = tl.load(k_ptrs, mask=mask_n[:, None], other=0.0)
        v = tl.load(v_ptrs, mask=mask_n[:, None], other=0.0)
        if INTERPRET:
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        elif FP8_QK:
            v = v.to(tl.float16)  # k stays e4m3 for the e4m3 x e4m3 dot
        else:
            k = k.to(q.dtype)  # FP8 -> fp16 for the tensor cores; a no-op otherwise
            v = v.to(q.dtype)

        s = tl.dot(q, tl.trans(k)) * scale
        s = tl.where(mask_n[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.math.exp2(m_i - m_new)  # 0 on the first step (m_i = -inf)
        p = tl.math.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        if INTERPRET:
            acc += tl.dot(p, v)
        else:
            acc += tl.dot(p.to(v.dtype), v)
        m_i = m_new

    if HAS_SINKS:
        # Unsplit or merged inline (the merge kernel folds sinks itself): the sink is a logit with
        # no value, and split 0 folds it into its softmax after its tokens (one more online-softmax
        # step: the running max and sum take it, the accumulator is rescaled), so it enters the
        # denominator once, through split 0's log-sum-exp, and a split 0 with no token still
        # carries it. Folding it in before the loop,
        # as the starting max, held every program on the sink's load: 7-13 % at batch 1 with
        # one tile a split on the H200.
        m_sink = tl.where(sink_row, tl.maximum(m_i, sink), m_i)
        alpha = tl.where(sink_row, tl.math.exp2(m_i - m_sink), 1.0)  # 0 when split 0 saw no token
        l_i = l_i * alpha + tl.where(sink_row, tl.math.exp2(sink - m_sink), 0.0)
        acc = acc * alpha[:, None]
        m_i = m_sink

    # A split past the sequence's end saw no token: l_i = 0. Emit zeros and lse = -inf so the
    # merge gives it zero weight.
    has_tokens = l_i > 0.0
    out = acc / tl.where(has_tokens, l_i, 1.0)[:, None]
    if HAS_SCALES:
        out = out * tl.load(v_scale_ptr + kv_head)

    _write_output(
        out, m_i, l_i, has_tokens, seq, split, q_heads, mask_g, offs_d,
        out_ptr, part_out_ptr, part_lse_ptr, counter_ptr, num_splits,
        stride_ob, stride_oh, stride_pob, stride_poh, stride_pos, stride_plb, stride_plh, SPLIT,
        INLINE_MERGE, GROUP, MERGE_GROUP, MERGE_SPLITS, HEAD_DIM,
    )


@triton.jit
def _write_output(
    out, m_i, l_i, has_tokens, seq, split, q_heads, mask_g, offs_d,
    out_ptr, part_out_ptr, part_lse_ptr, counter_ptr, num_splits,
    stride_ob, stride_oh, stride_pob, stride_poh, stride_pos, stride_plb, stride_plh,
    SPLIT: tl.constexpr, INLINE_MERGE: tl.constexpr, GROUP: tl.constexpr, MERGE_GROUP: tl.constexpr,
    MERGE_SPLITS: tl.constexpr, HEAD_DIM: tl.constexpr,
):
    """Store one program's normalised ``out`` [GROUP_PAD, HEAD_DIM]: the output itself, or a
    split's partial and its base-2 lse for the merge (shared by the bf16/FP8 and the INT4
    kernels); with INLINE_MERGE, the last split of the KV head then merges."""
    o_ptrs = out_ptr + seq.to(tl.int64) * stride_ob + q_heads[:, None] * stride_oh + offs_d[None, :]
    if SPLIT:
        lse = tl.where(has_tokens, m_i + tl.math.log2(tl.where(has_tokens, l_i, 1.0)), float("-inf"))
        po_base = part_out_ptr + seq.to(tl.int64) * stride_pob + q_heads[:, None] * stride_poh + offs_d[None, :]
        pl_base = part_lse_ptr + seq.to(tl.int64) * stride_plb + q_heads * stride_plh
        tl.store(po_base + split * stride_pos, out, mask=mask_g[:, None])
        tl.store(pl_base + split, lse, mask=mask_g)
        if INLINE_MERGE:
            merge_if_last(
                seq, num_splits, counter_ptr, part_out_ptr, part_lse_ptr, out_ptr,
                stride_ob, stride_oh, stride_pob, stride_poh, stride_pos, stride_plb, stride_plh,
                GROUP, MERGE_GROUP, MERGE_SPLITS, HEAD_DIM,
            )
    else:
        tl.store(o_ptrs, out.to(out_ptr.dtype.element_ty), mask=mask_g[:, None])


# ----------------------------------------------------------------------------------------------
# Public wrapper
# ----------------------------------------------------------------------------------------------


_launch_split_kernel = DirectLauncher(_paged_decode_kernel)  # eager calls are host-bound at batch 1


def triton_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    *,
    sm_scale: float | None = None,
    k_scale: float | torch.Tensor | None = None,
    v_scale: float | torch.Tensor | None = None,
    num_splits: int | None = None,
    config: DecodeConfig | None = None,
    validate: bool = True,
    span: Span = FULL,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """This module's kernel on a 16-bit or FP8 pool (arguments as
    :func:`kernels.decode.api.paged_decode_attention`, which is how callers reach it; ``span``
    from its ``sliding_window``/``chunk_size``)."""
    plan, args, constexprs, out, merge_sinks = _prepare(q, k_cache, v_cache, block_tables, seq_lens, sm_scale,
                                                        k_scale, v_scale, num_splits, config, validate, span=span,
                                                        sinks=sinks)
    _launch_split_kernel(plan.grid, args.values(), constexprs)
    if plan.split and not constexprs["INLINE_MERGE"]:
        merge_splits(args.part_out, args.part_lse, out, pdl=constexprs["EARLY_MERGE_LAUNCH"], sinks=merge_sinks)
    return out


def _prepare(q, k_cache, v_cache, block_tables, seq_lens, sm_scale, k_scale, v_scale, num_splits, config,
             validate: bool, *, in_graph: bool | None = None, span: Span = FULL,
             sinks: torch.Tensor | None = None) -> tuple:
    """Checks, the split plan, the kernel's arguments and compile-time values, the output, and
    the sinks the merge kernel folds in (None where the split kernel does, or there are none)
    (``in_graph``: plan as inside a CUDA graph capture or not; default: whether one is under way).
    A window or chunk plans its splits for the keys it sees, not the table's length."""
    key = signature(q, k_cache, v_cache, block_tables, seq_lens)
    checked_once(key, lambda: (check_shapes(q, k_cache, v_cache, block_tables, seq_lens),
                               check_strides(q, k_cache, v_cache, block_tables, seq_lens)))
    if config is not None and not isinstance(config, DecodeConfig):
        raise ValueError(f"config must be a DecodeConfig, got {type(config).__name__}")
    batch, n_q_heads, head_dim = q.shape
    num_blocks, n_kv_heads, block_size, _ = k_cache.shape
    sm_scale = check_call_options(sm_scale, num_splits, head_dim)
    ks = fp8_scales("k_scale", k_scale, k_cache.dtype, n_kv_heads, q.device)
    vs = fp8_scales("v_scale", v_scale, k_cache.dtype, n_kv_heads, q.device)
    sinks = None if sinks is None else check_sinks(sinks, n_q_heads, q.device)
    if validate:
        check_values(block_tables, seq_lens, num_blocks, block_size, span)
    config = config or default_config(head_dim, k_cache.dtype)
    # Keys one query can see, an upper bound known without a host sync; a window's first tile
    # may be ragged, so it can span one tile more than the window.
    max_len = block_tables.shape[1] * block_size
    if span.kind != "full":
        max_len = min(max_len, visible_bound(span, max_len) + config.block_n)
    # Splits are planned on the residency of the kernel without sinks: a sink adds no work per
    # split, yet the sinks variant's own compile held five programs per SM instead of four, and
    # the plan built on that ran 14 % slower on the H200 at batch 8 x 128K (64/8 heads) than the
    # no-sink plan, at which both variants run alike.
    planned_variant = (span.code, False)
    out = torch.empty_like(q)

    def args(plan: SplitPlan, inline: bool) -> SplitKernelArgs:
        part_out, part_lse, part_strides = split_buffers(plan, q, out)
        return SplitKernelArgs(
            inputs=(q, k_cache, v_cache, block_tables, seq_lens, ks if ks is not None else out,
                    vs if vs is not None else out, sinks if sinks is not None else out, span.size),
            out=out, part_out=part_out, part_lse=part_lse, counters=inline_counters(inline, plan, out),
            qk_scale=sm_scale * LOG2_E, num_splits=plan.num_splits,
            strides=(q.stride(0), q.stride(1), *k_cache.stride()[:3], *v_cache.stride()[:3], block_tables.stride(0),
                     out.stride(0), out.stride(1), *part_strides))

    def plan_for(inline: bool) -> SplitPlan:
        return planned_split((key, config, inline, planned_variant), batch, n_kv_heads, max_len, q.device,
                             num_splits, config.block_n, config.waves, lambda trial: _paged_decode_kernel.warmup(
                                 *args(trial, inline).values(), grid=trial.grid,
                                 **_constexprs(key, config, True, inline, planned_variant)),
                             **(dict(min_tiles=FULL_MIN_TILES) if span.kind == "full" else
                                dict(min_tiles=WINDOW_MIN_TILES, whole_tiles=WINDOW_WHOLE_TILES)))[0]

    plan, inline = choose_merge_plan(config, plan_for, in_graph=capturing(q.device) if in_graph is None else in_graph)
    # Where the merge kernel combines the splits it folds the sinks into each head's denominator,
    # and the split kernel is the one without sinks. Folded in split 0 instead, a 65-split call
    # (batch 1, a 4K window in one-tile splits) ran 1.05-1.13x the call without sinks on the H200.
    merge_sinks = sinks if plan.split and not inline else None
    variant = (span.code, sinks is not None and merge_sinks is None)  # compiled apart: other registers
    return plan, args(plan, inline), _constexprs(key, config, plan.split, inline, variant), out, merge_sinks


def decode_num_splits(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
                      seq_lens: torch.Tensor, *, config: DecodeConfig | None = None, in_graph: bool = False,
                      span: Span = FULL, sinks: torch.Tensor | None = None) -> int:
    """The split count :func:`kernels.decode.api.paged_decode_attention` would use for this
    16-bit or FP8 call on the Triton kernel, made eagerly or
    (``in_graph``) inside a CUDA graph capture, where "auto" may merge otherwise and so plan
    for another kernel variant (nothing is launched; on a GPU the split kernel is compiled, as
    the call itself would)."""
    plan = _prepare(q, k_cache, v_cache, block_tables, seq_lens, None, None, None, None, config, False,
                    in_graph=in_graph, span=span, sinks=sinks)[0]
    return plan.num_splits


@lru_cache(maxsize=256)
def _constexprs(key: tuple, config: DecodeConfig, split: bool, inline: bool, variant: tuple[int, bool]) -> dict:
    """The kernel's compile-time arguments for one call signature (``inline``: the split kernel
    merges, :func:`merges_inline`; ``variant``: the span's code and whether sinks are read)."""
    (_, device, (_, n_q_heads, head_dim), *_), (k_dtype, _, (_, n_kv_heads, block_size, _), *_) = key[:2]
    fp8 = k_dtype == FP8_DTYPE
    span_code, has_sinks = variant
    return dict(HAS_SCALES=fp8, FP8_KV=fp8, FP8_QK=fp8 and config.fp8_qk_dot and not interpreted(device),
                SPAN=span_code, HAS_SINKS=has_sinks,
                **split_kernel_constexprs(config, n_q_heads // n_kv_heads, head_dim, block_size, split, inline,
                                          device))


def split_kernel_constexprs(config, group: int, head_dim: int, block_size: int, split: bool, inline: bool,
                            device: torch.device) -> dict:
    """What this module's split kernel and the INT4 one (:mod:`kernels.decode.int4`) share
    among their compile-time values and launch options: the shape, the split and its merge
    (``inline`` from :func:`kernels.decode.merge.merges_inline`), the interpreter's fp32 dots, and
    the config's warps, stages and register cap."""
    interpret = interpreted(device)
    return dict(
        GROUP=group, GROUP_PAD=max(MIN_GROUP_PAD, triton.next_power_of_2(group)), HEAD_DIM=head_dim,
        PAGE_SIZE=block_size, BLOCK_N=config.block_n, SPLIT=split,
        EARLY_MERGE_LAUNCH=pdl_merge(config, split and not inline, device),
        **merge_constexprs(config, inline, group, head_dim),
        INTERPRET=interpret, num_warps=config.num_warps, num_stages=config.num_stages,
        **({} if config.maxnreg is None or interpret else {"maxnreg": config.maxnreg}),
    )

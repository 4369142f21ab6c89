"""Paged varlen attention in Triton: prefill chunks and decode rows of one batch in one launch.

What it computes
----------------
A serving step with chunked prefill is one batch of sequences, each with ``q_len`` new query
tokens (1 for a decode row, 16-4096 for a prompt chunk) and ``seq_len`` tokens in the paged KV
cache, the chunk's own K/V included (they are written before attention runs, as in vLLM).
Chunk token ``i`` sits at absolute position ``context + i`` with ``context = seq_len - q_len``
and attends to keys ``j <= context + i``: the whole cached prefix, causally inside the chunk.
Queries are packed: sequence ``b``'s tokens are rows ``cu_seqlens_q[b] .. cu_seqlens_q[b+1]``
of ``q [total_q, n_q_heads, head_dim]``. The cache is the pool ``kernels.decode.paged`` reads:
``[num_blocks, n_kv_heads, block_size, head_dim]`` with per-sequence block tables.

Work decomposition
------------------
One program owns one *tile* of one KV head: ``BLOCK_Q`` consecutive query tokens of one
sequence times the ``GROUP = n_q_heads / n_kv_heads`` query heads that share the KV head
(rows ``token * GROUP_PAD + head``), so every K/V tile it loads serves the whole group through
one ``tl.dot``. Two tile sizes live in the same kernel, picked per program at run time:

* prefill tiles: ``BLOCK_M = 128`` rows (e.g. 32 tokens x 4 heads), compute-bound like the
  dense forward (FlashAttention-2 loop, online softmax in base 2; 64 rows at d = 256);
* decode tiles: 16 rows (e.g. 1 token x 4 heads padded to 16, the ``tl.dot`` minimum), the
  decode kernel's shape: bound by reading the sequence's KV once.

Each tile's key range splits like the dense causal loop: keys ``< context + q0 + 1`` are seen
by every row of the tile (unmasked loop, no load masks), the rest up to the tile's last query
position is masked per row (``key <= position``, loads past ``seq_len`` masked to zero so NaN
in unwritten slots never reaches the dots).

The host builds the tile list once per batch (:func:`plan_batch`, like FlashInfer's
``plan``/``run`` split; a scheduler knows the lengths on the host). Tiles are ordered by the
number of keys they read, most first, and the KV head varies fastest, so the longest programs
start first and short ones fill the tail. Per key, a 128-row tile's matrix products and a decode
tile's KV read take about the same time on an H200 (~15 ns at d = 128 from 4.5 TFLOP/s and
34 GB/s per SM), which is why keys alone rank both kinds.

FP8 (e4m3) KV: ``k_scale`` is folded into the logit scale, ``v_scale`` into the output; the
tiles are converted to fp16 for the dots (a native conversion on Hopper), so a bf16 query must
lie within fp16 range. The log-sum-exp returned is natural log, as ``kernels.prefill.flash``.

Sources: Kwon et al. 2023 (PagedAttention); Dao 2023 (FlashAttention-2); Agrawal et al. 2024
(Sarathi-Serve, chunked prefill); vLLM's Triton unified attention (one kernel for mixed batches,
query heads of a KV head packed into the rows); FlashInfer's plan/run split.

Limits: head_dim a power of two 16-256; block_size a power of two 1-256; GROUP <= 64; no
split-KV, so a batch of a few long decode rows does not fill the GPU (the decode kernel's
job); forward only. Under ``TRITON_INTERPRET=1`` the tiles go to fp32 before the dots (the
interpreter's bf16 arithmetic is wrong); on the GPU they stay bf16/fp16.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from kernels.runtime import ensure_triton_backend, interpreter_active

ensure_triton_backend()  # must run before `import triton`: the interpreter is chosen at decoration

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from kernels.attention_span import FULL, Span, check_sinks, first_visible, span_of  # noqa: E402
from kernels.prefill.chunked_checks import (  # noqa: E402
    FP8_DTYPE,
    check_table_entries,
    check_varlen_inputs,
    scale_tensor,
)
from kernels.reference.online_softmax import LOG2_E  # noqa: E402

__all__ = ["VarlenConfig", "BatchPlan", "default_varlen_config", "plan_batch", "chunked_prefill_attention",
           "SUPPORTED_HEAD_DIMS", "MAX_GROUP"]

SUPPORTED_HEAD_DIMS = (16, 32, 64, 128, 256)  # tl.arange needs powers of two; 16 is the dot minimum
MAX_GROUP = 64  # query heads per KV head: a prefill tile must hold at least one token's group
MIN_DOT_ROWS = 16  # tl.dot needs M >= 16: decode tiles pad their rows up to this
TILE_FIELDS = 3  # (sequence, first query token, decode-sized?) per tile


# ----------------------------------------------------------------------------------------------
# Kernel
# ----------------------------------------------------------------------------------------------


@triton.jit
def _attend_keys(acc, l_i, m_i, q, lo, hi, pos, first_row, first_key, seq_len, table_ptr, k_head_ptr, v_head_ptr,
                 stride_kb, stride_kt, stride_vb, stride_vt, scale,
                 BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, PAGE_SIZE: tl.constexpr,
                 MASKED: tl.constexpr,  # False: every row sees every key of [lo, hi)
                 FP8_KV: tl.constexpr, INTERPRET: tl.constexpr, SPAN: tl.constexpr):
    """Online-softmax pass over keys ``[lo, hi)`` (``lo`` a multiple of BLOCK_N). Masked, a row
    sees keys ``first_row <= key <= pos`` inside the sequence, and nothing before ``first_key``
    (the tile's first visible key) is loaded, table entries included."""
    offs_d = tl.arange(0, HEAD_DIM)
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        if MASKED:
            in_seq = offs_n < seq_len
            if SPAN != 0:
                in_seq = in_seq & (offs_n >= first_key)  # earlier pages may be freed
            # The table is int32: widen before the stride multiply (a large pool overflows int32).
            page = tl.load(table_ptr + offs_n // PAGE_SIZE, mask=in_seq, other=0).to(tl.int64)
        else:
            page = tl.load(table_ptr + offs_n // PAGE_SIZE).to(tl.int64)
        slot = offs_n % PAGE_SIZE
        k_ptrs = k_head_ptr + page[:, None] * stride_kb + slot[:, None] * stride_kt + offs_d[None, :]
        v_ptrs = v_head_ptr + page[:, None] * stride_vb + slot[:, None] * stride_vt + offs_d[None, :]
        if MASKED:
            # Slots past the sequence may hold NaN: zeros instead (0 * NaN would reach acc).
            k = tl.load(k_ptrs, mask=in_seq[:, None], other=0.0)
            v = tl.load(v_ptrs, mask=in_seq[:, None], other=0.0)
        else:
            k = tl.load(k_ptrs)
            v = tl.load(v_ptrs)
        if INTERPRET:
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        elif FP8_KV:
            k = k.to(tl.float16)  # e4m3 -> fp16 is one native cvt on sm_89+
            v = v.to(tl.float16)
        s = tl.dot(q, tl.trans(k)) * scale
        if MASKED:
            visible = (offs_n[None, :] <= pos[:, None]) & in_seq[None, :]
            if SPAN != 0:
                visible = visible & (offs_n[None, :] >= first_row[:, None])
            s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        if SPAN != 0:
            # A windowed row can see no key of a step (m_new = -inf): exponents from 0 instead,
            # so alpha and p are 0, not NaN. Without a window every row sees key 0 first.
            m_new = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.math.exp2(m_i - m_new)
        p = tl.math.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _first_key(pos, span, SPAN: tl.constexpr):
    """The first key a query at ``pos`` sees (:mod:`kernels.attention_span`; SPAN 1 or 2)."""
    if SPAN == 1:
        return tl.maximum(pos - span + 1, 0)
    return (pos // span) * span


@triton.jit
def _tile(q_ptr, k_head_ptr, v_head_ptr, table_ptr, out_ptr, lse_ptr, sinks_ptr,
          q_start, q_len, seq_len, q0, kv_head, scale, v_scale, span,
          stride_qt, stride_qh, stride_kb, stride_kt, stride_vb, stride_vt, stride_ot, stride_oh, stride_lt,
          GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_N: tl.constexpr,
          HEAD_DIM: tl.constexpr, PAGE_SIZE: tl.constexpr, FP8_KV: tl.constexpr, INTERPRET: tl.constexpr,
          SPAN: tl.constexpr, HAS_SINKS: tl.constexpr):
    """One tile: ``BLOCK_Q`` query tokens from ``q0`` of one sequence x the KV head's GROUP heads."""
    rows = tl.arange(0, BLOCK_Q * GROUP_PAD)
    tok = q0 + rows // GROUP_PAD  # query token within the chunk
    head_in_group = rows % GROUP_PAD
    row_ok = (tok < q_len) & (head_in_group < GROUP)
    q_head = kv_head * GROUP + head_in_group
    offs_d = tl.arange(0, HEAD_DIM)
    q_row = (q_start + tok).to(tl.int64)
    q = tl.load(q_ptr + q_row[:, None] * stride_qt + q_head[:, None] * stride_qh + offs_d[None, :],
                mask=row_ok[:, None], other=0.0)
    if INTERPRET:
        q = q.to(tl.float32)
    elif FP8_KV:
        q = q.to(tl.float16)

    context = seq_len - q_len
    pos = context + tok  # absolute position: this row sees keys first_row..pos
    shared_end = ((context + q0 + 1) // BLOCK_N) * BLOCK_N  # whole steps every row sees
    kv_end = tl.minimum(seq_len, context + q0 + BLOCK_Q)  # past the tile's last query position
    # Keys before the steps every row sees: none without a window; with one, the steps from
    # the tile's first visible key up to the first step its last row sees whole.
    first_row = pos
    first_key = 0
    shared_start = 0
    if SPAN != 0:
        first_row = _first_key(pos, span, SPAN)
        first_key = _first_key(context + q0, span, SPAN)
        shared_start = tl.cdiv(_first_key(kv_end - 1, span, SPAN), BLOCK_N) * BLOCK_N
        shared_end = tl.maximum(shared_end, shared_start)

    if HAS_SINKS:  # the sink starts each row's softmax: running max the sink, sum 1
        sink = tl.load(sinks_ptr + q_head, mask=row_ok, other=0.0) * 1.4426950408889634  # natural -> base 2
        m_i = tl.where(row_ok, sink, float("-inf"))
        l_i = tl.where(row_ok, 1.0, 0.0)
    else:
        m_i = tl.full([BLOCK_Q * GROUP_PAD], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_Q * GROUP_PAD], dtype=tl.float32)
    acc = tl.zeros([BLOCK_Q * GROUP_PAD, HEAD_DIM], dtype=tl.float32)
    if SPAN != 0:
        acc, l_i, m_i = _attend_keys(acc, l_i, m_i, q, (first_key // BLOCK_N) * BLOCK_N, shared_start, pos,
                                     first_row, first_key, seq_len, table_ptr, k_head_ptr, v_head_ptr,
                                     stride_kb, stride_kt, stride_vb, stride_vt, scale,
                                     BLOCK_N, HEAD_DIM, PAGE_SIZE, True, FP8_KV, INTERPRET, SPAN)
    acc, l_i, m_i = _attend_keys(acc, l_i, m_i, q, shared_start, shared_end, pos, first_row, first_key, seq_len,
                                 table_ptr, k_head_ptr, v_head_ptr, stride_kb, stride_kt, stride_vb, stride_vt, scale,
                                 BLOCK_N, HEAD_DIM, PAGE_SIZE, False, FP8_KV, INTERPRET, SPAN)
    acc, l_i, m_i = _attend_keys(acc, l_i, m_i, q, shared_end, kv_end, pos, first_row, first_key, seq_len, table_ptr,
                                 k_head_ptr, v_head_ptr, stride_kb, stride_kt, stride_vb, stride_vt, scale,
                                 BLOCK_N, HEAD_DIM, PAGE_SIZE, True, FP8_KV, INTERPRET, SPAN)

    l_safe = tl.where(row_ok, l_i, 1.0)  # padding rows are never stored; keep them finite
    out = acc / l_safe[:, None] * v_scale
    lse = (m_i + tl.math.log2(l_safe)) * 0.6931471805599453  # base 2 -> natural log (ln 2)
    tl.store(out_ptr + q_row[:, None] * stride_ot + q_head[:, None] * stride_oh + offs_d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=row_ok[:, None])
    tl.store(lse_ptr + q_row * stride_lt + q_head, lse, mask=row_ok)


@triton.jit
def _chunked_prefill_kernel(
    q_ptr,  # [total_q, n_q_heads, HEAD_DIM] packed queries, bf16/fp16
    k_cache_ptr,  # [num_blocks, n_kv_heads, PAGE_SIZE, HEAD_DIM] key pool
    v_cache_ptr,  # [num_blocks, n_kv_heads, PAGE_SIZE, HEAD_DIM] value pool
    block_tables_ptr,  # [batch, max_blocks_per_seq] int32 pool indices
    cu_q_ptr,  # [batch + 1] int32 first packed query row of each sequence
    seq_lens_ptr,  # [batch] int32 cached tokens per sequence (the chunk included)
    tiles_ptr,  # [n_tiles, 3] int32 (sequence, first query token, 1 for a decode-sized tile)
    k_scale_ptr,  # [n_kv_heads] fp32 (read only when HAS_SCALES)
    v_scale_ptr,  # [n_kv_heads] fp32
    sinks_ptr,  # [n_q_heads] fp32 sink logits, natural log (read only when HAS_SINKS)
    span,  # sliding window or chunk in tokens (SPAN 1 or 2)
    out_ptr,  # [total_q, n_q_heads, HEAD_DIM], q's dtype
    lse_ptr,  # [total_q, n_q_heads] fp32 natural-log log-sum-exp
    qk_scale,  # sm_scale * log2(e)
    n_kv_heads,
    stride_qt, stride_qh,
    stride_kb, stride_kh, stride_kt,
    stride_vb, stride_vh, stride_vt,
    stride_btb,
    stride_ot, stride_oh, stride_lt,
    GROUP: tl.constexpr,  # query heads per KV head
    GROUP_PAD: tl.constexpr,  # GROUP rounded up to a power of two
    BIG_Q: tl.constexpr,  # query tokens of a prefill tile (BLOCK_M / GROUP_PAD)
    SMALL_Q: tl.constexpr,  # query tokens of a decode tile (max(16, GROUP_PAD) / GROUP_PAD)
    BIG_N: tl.constexpr,  # keys per step in prefill tiles
    SMALL_N: tl.constexpr,  # keys per step in decode tiles
    HEAD_DIM: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    HAS_SCALES: tl.constexpr,  # FP8 cache: scales folded into the logits and the output
    FP8_KV: tl.constexpr,  # FP8 cache: dots in fp16
    INTERPRET: tl.constexpr,  # Triton interpreter: dots in fp32 (its bf16 math is wrong)
    SPAN: tl.constexpr = 0,  # keys seen: 0 all, 1 the last `span`, 2 the query's `span`-token chunk
    HAS_SINKS: tl.constexpr = False,  # a learned logit per query head joins the denominator
):
    pid = tl.program_id(0)
    tile = pid // n_kv_heads  # KV head fastest: a heavy tile starts on every head at once
    kv_head = pid % n_kv_heads
    seq = tl.load(tiles_ptr + tile * 3)
    q0 = tl.load(tiles_ptr + tile * 3 + 1)
    small = tl.load(tiles_ptr + tile * 3 + 2)
    q_start = tl.load(cu_q_ptr + seq)
    q_len = tl.load(cu_q_ptr + seq + 1) - q_start
    seq_len = tl.load(seq_lens_ptr + seq)

    scale = qk_scale
    v_scale = 1.0
    if HAS_SCALES:
        scale = scale * tl.load(k_scale_ptr + kv_head)
        v_scale = tl.load(v_scale_ptr + kv_head)
    k_head_ptr = k_cache_ptr + kv_head.to(tl.int64) * stride_kh
    v_head_ptr = v_cache_ptr + kv_head.to(tl.int64) * stride_vh
    table_ptr = block_tables_ptr + seq.to(tl.int64) * stride_btb
    if small != 0:
        _tile(q_ptr, k_head_ptr, v_head_ptr, table_ptr, out_ptr, lse_ptr, sinks_ptr, q_start, q_len, seq_len, q0,
              kv_head, scale, v_scale, span, stride_qt, stride_qh, stride_kb, stride_kt, stride_vb, stride_vt,
              stride_ot, stride_oh, stride_lt,
              GROUP, GROUP_PAD, SMALL_Q, SMALL_N, HEAD_DIM, PAGE_SIZE, FP8_KV, INTERPRET, SPAN, HAS_SINKS)
    else:
        _tile(q_ptr, k_head_ptr, v_head_ptr, table_ptr, out_ptr, lse_ptr, sinks_ptr, q_start, q_len, seq_len, q0,
              kv_head, scale, v_scale, span, stride_qt, stride_qh, stride_kb, stride_kt, stride_vb, stride_vt,
              stride_ot, stride_oh, stride_lt,
              GROUP, GROUP_PAD, BIG_Q, BIG_N, HEAD_DIM, PAGE_SIZE, FP8_KV, INTERPRET, SPAN, HAS_SINKS)


# ----------------------------------------------------------------------------------------------
# Launch configuration and the per-batch plan
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class VarlenConfig:
    """Launch parameters: prefill-tile rows and key steps, decode-tile key step, warps, stages."""

    block_m: int = 128  # rows of a prefill tile: query tokens x GROUP_PAD
    block_n: int = 32  # keys per step in prefill tiles
    small_block_n: int = 128  # keys per step in decode tiles
    num_warps: int = 4
    num_stages: int = 3

    def __post_init__(self) -> None:
        for name in ("block_m", "block_n", "small_block_n"):
            val = getattr(self, name)
            if val < 16 or val & (val - 1):
                raise ValueError(f"{name} must be a power of two >= 16, got {val}")
        if self.num_warps not in (1, 2, 4, 8, 16):
            raise ValueError(f"num_warps must be 1, 2, 4, 8 or 16, got {self.num_warps}")
        if self.num_stages < 1:
            raise ValueError(f"num_stages must be >= 1, got {self.num_stages}")


def default_varlen_config(head_dim: int) -> VarlenConfig:
    """The launch table, measured on an H200 (eager medians of the mixed batches).

    d <= 128: 128-row tiles, 32-key steps, 4 warps, 3 stages; decode tiles step 128 keys (8 %
    faster than 64 on the busy batch, 1.76 against 1.92 ms; 32 was 25 % slower). With
    8 warps (the dense forward's choice) the decode-sized tiles, which share the launch's warp
    count, ran 1.5-1.7x slower and the whole mixed batch with them (1x2048 chunk + 256 decode
    rows over 4K: 1.95 ms against 1.15 ms with 4 warps). d = 256: a 128 x 256 fp32 accumulator
    over 4 warps would need 256 registers a thread, so 64-row tiles and 2 stages. Under the
    interpreter: small tiles, so tiny tests cross several tiles and steps."""
    if interpreter_active():
        return VarlenConfig(block_m=32, block_n=16, small_block_n=16, num_warps=4, num_stages=1)
    if head_dim >= 256:
        return VarlenConfig(block_m=64, block_n=32, small_block_n=32, num_warps=4, num_stages=2)
    return VarlenConfig()


@dataclass(frozen=True, kw_only=True)
class BatchPlan:
    """One batch's work list for :func:`chunked_prefill_attention` (built by :func:`plan_batch`).

    ``tiles`` is ``[n_tiles, 3]`` int32 on the device: (sequence, first query token of the
    tile, 1 if the tile is decode-sized); the launch runs ``n_tiles x n_kv_heads`` programs.
    """

    q_lens: tuple[int, ...]
    seq_lens: tuple[int, ...]
    n_q_heads: int
    n_kv_heads: int
    head_dim: int
    config: VarlenConfig
    cu_seqlens_q: torch.Tensor  # [batch + 1] int32
    seq_lens_t: torch.Tensor  # [batch] int32
    tiles: torch.Tensor  # [n_tiles, 3] int32
    n_small_tiles: int
    span: Span = FULL  # the keys each query sees (a window or chunks: the layer's attention kind)

    @property
    def batch(self) -> int:
        return len(self.q_lens)

    @property
    def total_q(self) -> int:
        return sum(self.q_lens)

    @property
    def group(self) -> int:
        return self.n_q_heads // self.n_kv_heads

    @property
    def group_pad(self) -> int:
        return triton.next_power_of_2(self.group)

    @property
    def big_q(self) -> int:
        """Query tokens per prefill tile."""
        return self.config.block_m // self.group_pad

    @property
    def small_q(self) -> int:
        """Query tokens per decode tile (sequences with at most this many go to one)."""
        return max(MIN_DOT_ROWS, self.group_pad) // self.group_pad

    @property
    def n_tiles(self) -> int:
        return self.tiles.shape[0]

    @property
    def programs(self) -> int:
        return self.n_tiles * self.n_kv_heads


def _check_lengths(q_lens: Sequence[int], seq_lens: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    ql, sl = tuple(int(n) for n in q_lens), tuple(int(n) for n in seq_lens)
    if not ql or len(ql) != len(sl):
        raise ValueError(f"q_lens and seq_lens must name the same sequences (>= 1), got {len(ql)} and {len(sl)}")
    bad = [b for b, (nq, nk) in enumerate(zip(ql, sl)) if not 1 <= nq <= nk]
    if bad:
        shown = [(b, ql[b], sl[b]) for b in bad[:8]]
        raise ValueError(f"each sequence needs 1 <= q_len <= seq_len; (sequence, q_len, seq_len) {shown}")
    return ql, sl


def plan_batch(q_lens: Sequence[int], seq_lens: Sequence[int], *, n_q_heads: int, n_kv_heads: int, head_dim: int,
               device: str | torch.device, config: VarlenConfig | None = None, sliding_window: int | None = None,
               chunk_size: int | None = None) -> BatchPlan:
    """Cut a batch into tiles, heaviest first (see the module docstring).

    Parameters
    ----------
    q_lens : sequence of int
        New query tokens per sequence (1 for a decode row).
    seq_lens : sequence of int
        Cached tokens per sequence, the new ones included (``q_len <= seq_len``).
    n_q_heads, n_kv_heads, head_dim : int
        The attention shape; ``n_q_heads`` a multiple of ``n_kv_heads``, group <= ``MAX_GROUP``.
    device : where the plan's tensors live (the cache's device).
    config : VarlenConfig, optional; default :func:`default_varlen_config`.
    sliding_window, chunk_size : int, optional (at most one)
        The keys each query sees (:mod:`kernels.attention_span`), for a layer of that kind; the
        tiles are ranked by the keys they read within it.
    """
    ql, sl = _check_lengths(q_lens, seq_lens)
    span = span_of(sliding_window, chunk_size)
    if n_kv_heads < 1 or n_q_heads % n_kv_heads:
        raise ValueError(f"n_q_heads ({n_q_heads}) must be a multiple of n_kv_heads ({n_kv_heads})")
    if n_q_heads // n_kv_heads > MAX_GROUP:
        raise ValueError(f"at most {MAX_GROUP} query heads per KV head, got {n_q_heads // n_kv_heads}")
    if head_dim not in SUPPORTED_HEAD_DIMS:
        raise ValueError(f"head_dim must be one of {SUPPORTED_HEAD_DIMS}, got {head_dim}")
    config = config or default_varlen_config(head_dim)
    group_pad = triton.next_power_of_2(n_q_heads // n_kv_heads)
    if group_pad > config.block_m:
        raise ValueError(f"block_m {config.block_m} cannot hold one token's {group_pad} (padded) query heads")
    small_q = max(MIN_DOT_ROWS, group_pad) // group_pad
    big_q = config.block_m // group_pad
    tiles: list[tuple[int, int, int, int]] = []  # (keys read, sequence, first token, small)
    for b, (nq, nk) in enumerate(zip(ql, sl)):
        context = nk - nq
        if nq <= small_q:
            tiles.append((nk - first_visible(span, context), b, 0, 1))
            continue
        for q0 in range(0, nq, big_q):
            tiles.append((min(nk, context + q0 + big_q) - first_visible(span, context + q0), b, q0, 0))
    tiles.sort(key=lambda t: (-t[0], t[3], t[1], t[2]))  # most keys first; prefill before decode on ties
    table = torch.tensor([t[1:] for t in tiles], dtype=torch.int32).reshape(-1, TILE_FIELDS)
    return BatchPlan(q_lens=ql, seq_lens=sl, n_q_heads=n_q_heads, n_kv_heads=n_kv_heads, head_dim=head_dim,
                     config=config, cu_seqlens_q=torch.tensor(_cumulative(ql), dtype=torch.int32, device=device),
                     seq_lens_t=torch.tensor(sl, dtype=torch.int32, device=device), tiles=table.to(device),
                     n_small_tiles=sum(t[3] for t in tiles), span=span)


def _cumulative(lens: tuple[int, ...]) -> list[int]:
    out = [0]
    for n in lens:
        out.append(out[-1] + n)
    return out


# ----------------------------------------------------------------------------------------------
# Public entry point
# ----------------------------------------------------------------------------------------------


def chunked_prefill_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    plan: BatchPlan,
    *,
    sm_scale: float | None = None,
    k_scale: float | torch.Tensor | None = None,
    v_scale: float | torch.Tensor | None = None,
    validate: bool = True,
    sinks: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of a mixed batch (prefill chunks and decode rows) over a paged KV cache, one launch.

    A plan made with a sliding window or chunks (:func:`plan_batch`) attends each query to its
    visible keys only and reads only their pages.

    Parameters
    ----------
    q : Tensor [total_q, n_q_heads, head_dim], bf16 or fp16, last dim contiguous
        Every sequence's new tokens, packed in batch order (sequence ``b`` owns rows
        ``cu_seqlens_q[b] .. cu_seqlens_q[b + 1]`` of the plan).
    k_cache, v_cache : Tensor [num_blocks, n_kv_heads, block_size, head_dim]
        The pool, the new tokens' K/V already written; ``q``'s dtype or ``float8_e4m3fn``.
    block_tables : Tensor [batch, max_blocks_per_seq] int32
        Pool index of each sequence's blocks; entries past a sequence's blocks are never read.
    plan : BatchPlan
        From :func:`plan_batch` with the batch's ``q_lens`` and ``seq_lens``.
    sm_scale : float, optional
        Softmax scale, default ``1 / sqrt(head_dim)``.
    k_scale, v_scale : float or Tensor [1] or [n_kv_heads], optional
        FP8 dequantisation scales (real value = stored x scale); FP8 caches only.
    validate : bool
        Check the used table entries against the pool (one host sync). Shapes, dtypes,
        strides and table capacity are always checked.
    sinks : Tensor [n_q_heads] (fp32, bf16 or fp16), optional
        One learned logit per query head (natural log) that joins each row's softmax
        denominator and carries no value (gpt-oss).

    Returns
    -------
    out : Tensor [total_q, n_q_heads, head_dim], q's dtype
    lse : Tensor [total_q, n_q_heads], float32, natural-log log-sum-exp of each row's scores
        (the sink's included)

    Raises
    ------
    ValueError
        For wrong dtypes, shapes, strides, devices, scales or table entries; before any launch.
    """
    check_varlen_inputs(q, k_cache, v_cache, block_tables, plan)
    num_blocks, n_kv_heads, block_size, head_dim = k_cache.shape
    ks = scale_tensor("k_scale", k_scale, k_cache.dtype, n_kv_heads, q.device)
    vs = scale_tensor("v_scale", v_scale, k_cache.dtype, n_kv_heads, q.device)
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(head_dim)
    elif not isinstance(sm_scale, (int, float)) or not math.isfinite(sm_scale) or sm_scale <= 0:
        raise ValueError(f"sm_scale must be a finite positive number, got {sm_scale!r}")
    sinks = None if sinks is None else check_sinks(sinks, q.shape[1], q.device)
    if validate:
        check_table_entries(block_tables, plan, num_blocks, block_size)
    out = torch.empty_like(q)
    lse = torch.empty(q.shape[0], q.shape[1], dtype=torch.float32, device=q.device)
    cfg = plan.config
    _chunked_prefill_kernel[(plan.programs,)](
        q, k_cache, v_cache, block_tables, plan.cu_seqlens_q, plan.seq_lens_t, plan.tiles,
        ks if ks is not None else lse, vs if vs is not None else lse, sinks if sinks is not None else lse,
        plan.span.size, out, lse,
        sm_scale * LOG2_E, n_kv_heads,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        block_tables.stride(0),
        out.stride(0), out.stride(1), lse.stride(0),
        GROUP=plan.group, GROUP_PAD=plan.group_pad, BIG_Q=plan.big_q, SMALL_Q=plan.small_q,
        BIG_N=cfg.block_n, SMALL_N=cfg.small_block_n, HEAD_DIM=head_dim, PAGE_SIZE=block_size,
        HAS_SCALES=ks is not None, FP8_KV=k_cache.dtype == FP8_DTYPE,
        INTERPRET=interpreter_active() or not q.is_cuda, SPAN=plan.span.code, HAS_SINKS=sinks is not None,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    return out, lse

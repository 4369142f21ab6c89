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
bf16 kernel). With ``fp8_qk_dot=False`` both products run in fp16, so a bf16 query must then lie
within fp16 range (|q| < 65504).

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
two from 16 to 256; block_size a power of two from 1 to 256; query bf16 or fp16, KV the same
dtype or float8_e4m3fn. Under ``TRITON_INTERPRET=1`` the tiles are converted to fp32 before
the dots (the interpreter's bf16 arithmetic is wrong); on the GPU they stay in bf16/fp16 (an
fp32 dot would mean TF32).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from kernels.runtime import ensure_triton_backend, interpreter_active

ensure_triton_backend()  # must run before `import triton`: the interpreter is chosen at decoration

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from units import cdiv  # noqa: E402

__all__ = [
    "DecodeConfig",
    "default_config",
    "default_num_splits",
    "paged_decode_attention",
    "merge_splits",
    "SUPPORTED_HEAD_DIMS",
    "KV_DTYPES",
]

LOG2_E = 1.4426950408889634  # log2(e): exp(x) = exp2(x * log2(e)), folded into the scale
SUPPORTED_HEAD_DIMS = (16, 32, 64, 128, 256)  # tl.arange needs powers of two; 16 is the dot minimum
Q_DTYPES = (torch.bfloat16, torch.float16)
FP8_DTYPE = torch.float8_e4m3fn
KV_DTYPES = (torch.bfloat16, torch.float16, FP8_DTYPE)
MAX_BLOCK_SIZE = 256
MAX_SPLITS = 128  # the merge kernel holds [SPLITS_PAD, HEAD_DIM] fp32 in registers
MIN_GROUP_PAD = 16  # tl.dot needs M >= 16; padded query rows are masked on load and store


# ----------------------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------------------


@triton.jit
def _paged_decode_kernel(
    q_ptr,  # [batch, n_q_heads, HEAD_DIM] query, bf16/fp16
    k_cache_ptr,  # [num_blocks, n_kv_heads, PAGE_SIZE, HEAD_DIM] key pool
    v_cache_ptr,  # [num_blocks, n_kv_heads, PAGE_SIZE, HEAD_DIM] value pool
    block_tables_ptr,  # [batch, max_blocks_per_seq] int32 pool indices
    seq_lens_ptr,  # [batch] int32 tokens per sequence
    k_scale_ptr,  # [n_kv_heads] fp32 dequantisation scales (read only when HAS_SCALES)
    v_scale_ptr,  # [n_kv_heads] fp32
    out_ptr,  # [batch, n_q_heads, HEAD_DIM] final output (written when not SPLIT)
    part_out_ptr,  # [batch, n_q_heads, num_splits, HEAD_DIM] fp32 partial outputs (SPLIT)
    part_lse_ptr,  # [batch, n_q_heads, num_splits] fp32 base-2 log-sum-exp per split (SPLIT)
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
):
    kv_head = tl.program_id(0)
    seq = tl.program_id(1)
    split = tl.program_id(2)

    seq_len = tl.load(seq_lens_ptr + seq)
    # This split's token range, in whole BLOCK_N tiles so only the sequence's last tile is ragged.
    tiles_per_split = tl.cdiv(tl.cdiv(seq_len, BLOCK_N), num_splits)
    start = split * tiles_per_split * BLOCK_N
    end = tl.minimum(start + tiles_per_split * BLOCK_N, seq_len)

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

    m_i = tl.full([GROUP_PAD], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([GROUP_PAD], dtype=tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], dtype=tl.float32)

    for start_n in range(start, end, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        mask_n = offs_n < end
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

    # A split past the sequence's end saw no token: l_i = 0. Emit zeros and lse = -inf so the
    # merge gives it zero weight.
    has_tokens = l_i > 0.0
    out = acc / tl.where(has_tokens, l_i, 1.0)[:, None]
    if HAS_SCALES:
        out = out * tl.load(v_scale_ptr + kv_head)

    if SPLIT:
        lse = tl.where(has_tokens, m_i + tl.math.log2(tl.where(has_tokens, l_i, 1.0)), float("-inf"))
        po_ptrs = (
            part_out_ptr + seq.to(tl.int64) * stride_pob + q_heads[:, None] * stride_poh
            + split * stride_pos + offs_d[None, :]
        )
        tl.store(po_ptrs, out, mask=mask_g[:, None])
        pl_ptrs = part_lse_ptr + seq.to(tl.int64) * stride_plb + q_heads * stride_plh + split
        tl.store(pl_ptrs, lse, mask=mask_g)
    else:
        o_ptrs = out_ptr + seq.to(tl.int64) * stride_ob + q_heads[:, None] * stride_oh + offs_d[None, :]
        tl.store(o_ptrs, out.to(out_ptr.dtype.element_ty), mask=mask_g[:, None])


@triton.jit
def _merge_splits_kernel(
    part_out_ptr,  # [batch, n_q_heads, num_splits, HEAD_DIM] fp32 normalised partial outputs
    part_lse_ptr,  # [batch, n_q_heads, num_splits] fp32 base-2 log-sum-exp (-inf: empty split)
    out_ptr,  # [batch, n_q_heads, HEAD_DIM]
    num_splits,
    stride_pob, stride_poh, stride_pos,
    stride_plb, stride_plh,
    stride_ob, stride_oh,
    SPLITS_PAD: tl.constexpr,  # num_splits rounded up to a power of two
    HEAD_DIM: tl.constexpr,
):
    seq = tl.program_id(0)
    head = tl.program_id(1)
    offs_s = tl.arange(0, SPLITS_PAD)
    offs_d = tl.arange(0, HEAD_DIM)
    mask_s = offs_s < num_splits
    lse = tl.load(
        part_lse_ptr + seq.to(tl.int64) * stride_plb + head * stride_plh + offs_s,
        mask=mask_s, other=float("-inf"),
    )
    m = tl.max(lse, 0)  # finite: split 0 always holds the sequence's first token
    w = tl.math.exp2(lse - m)  # exp2(-inf) = 0 for empty and padded splits
    po_ptrs = (
        part_out_ptr + seq.to(tl.int64) * stride_pob + head * stride_poh
        + offs_s[:, None] * stride_pos + offs_d[None, :]
    )
    parts = tl.load(po_ptrs, mask=mask_s[:, None], other=0.0)
    out = tl.sum(parts * w[:, None], 0) / tl.sum(w, 0)
    o_ptrs = out_ptr + seq.to(tl.int64) * stride_ob + head * stride_oh + offs_d
    tl.store(o_ptrs, out.to(out_ptr.dtype.element_ty))


# ----------------------------------------------------------------------------------------------
# Launch configuration
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class DecodeConfig:
    """Launch parameters of the split kernel (the heuristic's choice, or an explicit override).

    block_n: tokens per loop step; num_warps: warps per program; num_stages: software-pipelining
    depth (how many K/V tiles are in flight ahead of their use).
    """

    block_n: int = 64
    num_warps: int = 4
    num_stages: int = 3
    fp8_qk_dot: bool = False  # FP8 cache: q.k^T in e4m3 (query quantised per program) instead of fp16

    def __post_init__(self) -> None:
        if self.block_n < 16 or self.block_n & (self.block_n - 1):
            raise ValueError(f"block_n must be a power of two >= 16, got {self.block_n}")
        if self.num_warps not in (1, 2, 4, 8, 16):
            raise ValueError(f"num_warps must be 1, 2, 4, 8 or 16, got {self.num_warps}")
        if self.num_stages < 1:
            raise ValueError(f"num_stages must be >= 1, got {self.num_stages}")


def default_config(head_dim: int, kv_dtype: torch.dtype) -> DecodeConfig:
    """Heuristic table instead of ``@triton.autotune`` (which needs a GPU driver to run at all).

    Measured on the H200 (benchmarks/NOTES-decode.md, rounds 1-3): for bf16 KV at d = 128,
    64-token tiles, 4 warps, 3 stages are within 1 % of the best of 18 configurations at every
    shape with batch x context >= 128K. FP8 KV: 128-token tiles, 2 stages and the e4m3 q.k^T dot
    (1.38x the bf16 kernel against 1.09x for fp16 dots). The K and V tiles of one step are
    ``2 * block_n * head_dim * bytes`` and ``num_stages`` of them sit in shared memory (228 KiB
    per SM), so the tile shrinks for head_dim 256.
    """
    if head_dim >= 256:
        return DecodeConfig(block_n=32, num_warps=4, num_stages=3)
    if kv_dtype == FP8_DTYPE:
        return DecodeConfig(block_n=128, num_warps=4, num_stages=2, fp8_qk_dot=True)
    return DecodeConfig(block_n=64, num_warps=4, num_stages=3)


@lru_cache(maxsize=8)
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def default_num_splits(
    batch: int, n_kv_heads: int, max_len: int, block_n: int, sm_count: int
) -> int:
    """Parts to cut each sequence into so that the grid fills the GPU in whole waves.

    About two programs are resident per SM (3 stages of 64 x 128 bf16 K and V tiles take
    96 KiB of shared memory), so ``2 * sm_count`` programs make one wave. Measured on the H200
    (132 SMs): two full waves are best, a partial last wave costs up to 40 %: batch 8 x 8 KV
    heads at 32K ran 0.258 ms with 8 splits (512 programs, 1.94 waves) and 0.370 ms with 9
    (576, 2.2 waves); batch 32 ran 0.96 ms with 2 splits and 1.12 ms with 3. So aim for
    ``4 * sm_count`` programs, round the split count to the neighbour that wastes less of the
    last wave, keep at least 4 tiles per split, and do not split once ``batch * n_kv_heads``
    alone makes two waves.
    """
    programs = batch * n_kv_heads
    slots = 2 * sm_count  # programs resident at once
    target = 2 * slots  # two waves
    if programs >= target:
        return 1
    ideal = target / programs
    candidates = sorted({max(1, math.floor(ideal)), max(1, math.ceil(ideal))})

    def wave_efficiency(splits: int) -> float:
        total = programs * splits
        return total / (cdiv(total, slots) * slots)

    splits = max(candidates, key=lambda s: (round(wave_efficiency(s), 2), -s))
    tiles = cdiv(max_len, block_n)
    return max(1, min(splits, max(1, tiles // 4), MAX_SPLITS))


# ----------------------------------------------------------------------------------------------
# Input checks (before any launch; each names the argument and the offending values)
# ----------------------------------------------------------------------------------------------


def _check_tensor(name: str, t: object, ndim: int, dtypes: tuple[torch.dtype, ...]) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dims, got shape {tuple(t.shape)}")
    if t.dtype not in dtypes:
        allowed = ", ".join(str(d) for d in dtypes)
        raise ValueError(f"{name} dtype must be one of ({allowed}), got {t.dtype}")
    return t


def _check_shapes(q, k_cache, v_cache, block_tables, seq_lens) -> None:
    _check_tensor("q", q, 3, Q_DTYPES)
    _check_tensor("k_cache", k_cache, 4, KV_DTYPES)
    _check_tensor("v_cache", v_cache, 4, KV_DTYPES)
    _check_tensor("block_tables", block_tables, 2, (torch.int32,))
    _check_tensor("seq_lens", seq_lens, 1, (torch.int32,))
    if k_cache.shape != v_cache.shape:
        raise ValueError(
            f"k_cache and v_cache must have the same shape, got {tuple(k_cache.shape)} and "
            f"{tuple(v_cache.shape)}"
        )
    if k_cache.dtype != v_cache.dtype:
        raise ValueError(f"k_cache and v_cache dtypes differ: {k_cache.dtype} and {v_cache.dtype}")
    if k_cache.dtype != FP8_DTYPE and k_cache.dtype != q.dtype:
        raise ValueError(
            f"k_cache dtype {k_cache.dtype} must equal q dtype {q.dtype} (or be {FP8_DTYPE})"
        )
    batch, n_q_heads, head_dim = q.shape
    num_blocks, n_kv_heads, block_size, kv_head_dim = k_cache.shape
    if kv_head_dim != head_dim:
        raise ValueError(f"k_cache head_dim {kv_head_dim} differs from q head_dim {head_dim}")
    if head_dim not in SUPPORTED_HEAD_DIMS:
        raise ValueError(f"head_dim must be one of {SUPPORTED_HEAD_DIMS}, got {head_dim}")
    if block_size < 1 or block_size > MAX_BLOCK_SIZE or block_size & (block_size - 1):
        raise ValueError(
            f"k_cache block_size (dim 2) must be a power of two in 1..{MAX_BLOCK_SIZE}, got {block_size}"
        )
    if num_blocks < 1:
        raise ValueError(f"k_cache must hold at least one block, got shape {tuple(k_cache.shape)}")
    if n_kv_heads < 1 or n_q_heads % n_kv_heads:
        raise ValueError(
            f"n_q_heads ({n_q_heads}, q dim 1) must be a multiple of n_kv_heads "
            f"({n_kv_heads}, k_cache dim 1)"
        )
    if block_tables.shape[0] != batch:
        raise ValueError(f"block_tables has {block_tables.shape[0]} rows for a batch of {batch} (q dim 0)")
    if block_tables.shape[1] < 1:
        raise ValueError(f"block_tables must have at least one column, got shape {tuple(block_tables.shape)}")
    if seq_lens.shape[0] != batch:
        raise ValueError(f"seq_lens has {seq_lens.shape[0]} entries for a batch of {batch} (q dim 0)")
    devices = {t.device for t in (q, k_cache, v_cache, block_tables, seq_lens)}
    if len(devices) != 1:
        raise ValueError(f"q, k_cache, v_cache, block_tables, seq_lens must share one device, got {devices}")
    if not q.is_cuda and not interpreter_active():
        raise ValueError(f"q is on {q.device}: CPU tensors need the Triton interpreter (TRITON_INTERPRET=1)")


def _check_strides(q, k_cache, v_cache, block_tables, seq_lens) -> None:
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("block_tables", block_tables)):
        if t.stride(-1) != 1 and t.shape[-1] > 1:
            raise ValueError(f"{name} last dim must be contiguous (stride 1), got strides {t.stride()}")
    if seq_lens.stride(0) != 1 and seq_lens.shape[0] > 1:
        raise ValueError(f"seq_lens must be contiguous, got stride {seq_lens.stride()}")


def _check_scale(name: str, scale, kv_dtype: torch.dtype, n_kv_heads: int, device) -> torch.Tensor | None:
    """Normalise a k/v scale to a [n_kv_heads] fp32 tensor (None for non-FP8 caches)."""
    if scale is None:
        return None if kv_dtype != FP8_DTYPE else torch.ones(n_kv_heads, dtype=torch.float32, device=device)
    if kv_dtype != FP8_DTYPE:
        raise ValueError(f"{name} applies only to a {FP8_DTYPE} cache; the cache is {kv_dtype}")
    if isinstance(scale, (int, float)):
        if not math.isfinite(scale) or scale <= 0:
            raise ValueError(f"{name} must be a finite positive number, got {scale}")
        return torch.full((n_kv_heads,), float(scale), dtype=torch.float32, device=device)
    if not isinstance(scale, torch.Tensor):
        raise ValueError(f"{name} must be a float or a tensor, got {type(scale).__name__}")
    if scale.numel() not in (1, n_kv_heads):
        raise ValueError(
            f"{name} must have 1 (per tensor) or n_kv_heads={n_kv_heads} (per head) elements, "
            f"got shape {tuple(scale.shape)}"
        )
    if scale.device != torch.device(device):
        raise ValueError(f"{name} is on {scale.device}, the cache on {device}")
    return scale.reshape(-1).to(torch.float32).expand(n_kv_heads).contiguous()


def _check_values(block_tables, seq_lens, num_blocks: int, block_size: int) -> None:
    """Lengths within 1..table capacity; used table entries inside the pool (one host sync)."""
    lens = seq_lens.to(torch.int64)
    capacity = block_tables.shape[1] * block_size
    bad_len = (lens < 1) | (lens > capacity)
    blocks_used = (lens + block_size - 1) // block_size
    cols = torch.arange(block_tables.shape[1], device=block_tables.device)
    used = cols[None, :] < blocks_used[:, None]
    bad_entry = used & ((block_tables < 0) | (block_tables >= num_blocks))
    flags = torch.stack([bad_len.any(), bad_entry.any()]).tolist()
    if flags[0]:
        idx = torch.nonzero(bad_len).flatten()[:8].tolist()
        vals = [int(lens[i]) for i in idx]
        raise ValueError(
            f"seq_lens must be in 1..{capacity} (block_tables columns {block_tables.shape[1]} x "
            f"block_size {block_size}); sequences {idx} have lengths {vals}"
        )
    if flags[1]:
        where = torch.nonzero(bad_entry)[:8].tolist()
        vals = [int(block_tables[r, c]) for r, c in where]
        raise ValueError(
            f"block_tables entries must index the pool 0..{num_blocks - 1}; "
            f"(sequence, block) {[tuple(w) for w in where]} hold {vals}"
        )


# ----------------------------------------------------------------------------------------------
# Public wrapper
# ----------------------------------------------------------------------------------------------


def paged_decode_attention(
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
) -> torch.Tensor:
    """Decode attention of one query token per sequence over a paged KV cache.

    Parameters
    ----------
    q : Tensor [batch, n_q_heads, head_dim], bf16 or fp16, last dim contiguous
        The new token's query for every sequence.
    k_cache, v_cache : Tensor [num_blocks, n_kv_heads, block_size, head_dim]
        The pool of KV blocks; same dtype as ``q`` or ``torch.float8_e4m3fn``; last dim
        contiguous. ``n_q_heads`` must be a multiple of ``n_kv_heads`` (MHA, GQA, MQA).
    block_tables : Tensor [batch, max_blocks_per_seq], int32
        ``block_tables[b, j]`` is the pool index of sequence ``b``'s ``j``-th block. Entries past
        a sequence's last block are never read (any value, e.g. -1).
    seq_lens : Tensor [batch], int32
        Tokens in each sequence, ``1 <= seq_lens[b] <= max_blocks_per_seq * block_size``.
    sm_scale : float, optional
        Softmax scale; default ``1 / sqrt(head_dim)``.
    k_scale, v_scale : float or Tensor [1] or [n_kv_heads] (fp32), optional
        FP8 dequantisation scales (real value = stored value * scale); only for an FP8 cache,
        default 1.
    num_splits : int, optional
        Parts each sequence is cut into (split-KV); default from ``default_num_splits``.
    config : DecodeConfig, optional
        Launch parameters; default from ``default_config``.
    validate : bool
        Check table entries and lengths against the pool (costs one device-to-host sync). Shapes,
        dtypes and strides are always checked. The benchmark validates once, then times with False.

    Returns
    -------
    Tensor [batch, n_q_heads, head_dim], dtype of ``q``

    Raises
    ------
    ValueError
        For wrong dtypes, shapes, strides, devices, scales, table entries outside the pool,
        lengths beyond a table or head counts that do not divide; before any launch.
    """
    _check_shapes(q, k_cache, v_cache, block_tables, seq_lens)
    _check_strides(q, k_cache, v_cache, block_tables, seq_lens)
    batch, n_q_heads, head_dim = q.shape
    num_blocks, n_kv_heads, block_size, _ = k_cache.shape
    ks = _check_scale("k_scale", k_scale, k_cache.dtype, n_kv_heads, q.device)
    vs = _check_scale("v_scale", v_scale, k_cache.dtype, n_kv_heads, q.device)
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(head_dim)
    elif not isinstance(sm_scale, (int, float)) or not math.isfinite(sm_scale) or sm_scale <= 0:
        raise ValueError(f"sm_scale must be a finite positive number, got {sm_scale!r}")
    if config is None:
        config = default_config(head_dim, k_cache.dtype)
    if num_splits is None:
        sms = _sm_count(q.device.index or 0) if q.is_cuda else 4
        max_len = block_tables.shape[1] * block_size  # upper bound, known without a host sync
        num_splits = default_num_splits(batch, n_kv_heads, max_len, config.block_n, sms)
    elif not isinstance(num_splits, int) or not 1 <= num_splits <= MAX_SPLITS:
        raise ValueError(f"num_splits must be an int in 1..{MAX_SPLITS}, got {num_splits!r}")
    if validate:
        _check_values(block_tables, seq_lens, num_blocks, block_size)

    group = n_q_heads // n_kv_heads
    group_pad = max(MIN_GROUP_PAD, triton.next_power_of_2(group))
    out = torch.empty_like(q)
    split = num_splits > 1
    if split:
        part_out = torch.empty(batch, n_q_heads, num_splits, head_dim, dtype=torch.float32, device=q.device)
        part_lse = torch.empty(batch, n_q_heads, num_splits, dtype=torch.float32, device=q.device)
    else:  # unused by the kernel; any tensor satisfies the signature
        part_out, part_lse = out, out
    dummy_scale = ks if ks is not None else out
    interpret = interpreter_active() or not q.is_cuda

    grid = (n_kv_heads, batch, num_splits)
    _paged_decode_kernel[grid](
        q, k_cache, v_cache, block_tables, seq_lens,
        dummy_scale, vs if vs is not None else out,
        out, part_out, part_lse,
        sm_scale * LOG2_E, num_splits,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        block_tables.stride(0),
        out.stride(0), out.stride(1),
        part_out.stride(0) if split else 0, part_out.stride(1) if split else 0,
        part_out.stride(2) if split else 0,
        part_lse.stride(0) if split else 0, part_lse.stride(1) if split else 0,
        GROUP=group, GROUP_PAD=group_pad, HEAD_DIM=head_dim, PAGE_SIZE=block_size,
        BLOCK_N=config.block_n, HAS_SCALES=ks is not None, FP8_KV=k_cache.dtype == FP8_DTYPE,
        FP8_QK=k_cache.dtype == FP8_DTYPE and config.fp8_qk_dot and not interpret,
        SPLIT=split, INTERPRET=interpret,
        num_warps=config.num_warps, num_stages=config.num_stages,
    )
    if split:
        merge_splits(part_out, part_lse, out)
    return out


def merge_splits(part_out: torch.Tensor, part_lse: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Merge split-KV partial outputs into ``out`` (the second kernel of a split decode call).

    ``part_out`` is ``[batch, n_q_heads, num_splits, head_dim]`` fp32 normalised partial outputs
    (last dim contiguous), ``part_lse`` ``[batch, n_q_heads, num_splits]`` fp32 base-2
    log-sum-exps (last dim contiguous; ``-inf`` for an empty split, split 0 never empty), ``out``
    ``[batch, n_q_heads, head_dim]``. Public so the merge can be timed on its own.
    """
    batch, n_q_heads, num_splits, head_dim = part_out.shape
    _merge_splits_kernel[(batch, n_q_heads)](
        part_out, part_lse, out, num_splits,
        part_out.stride(0), part_out.stride(1), part_out.stride(2),
        part_lse.stride(0), part_lse.stride(1),
        out.stride(0), out.stride(1),
        SPLITS_PAD=triton.next_power_of_2(num_splits), HEAD_DIM=head_dim,
        num_warps=4,
    )
    return out

"""MLA paged decode in Triton, absorbed form: every query head of a sequence against one shared
latent cache (:mod:`kernels.cache.mla`; the algebra in :mod:`kernels.reference.mla`).

One program handles ``BLOCK_H`` query heads of one sequence and one split of its tokens. It walks
its tokens ``BLOCK_N`` at a time; each token's row of the pool (``rank`` latent values, then
``rope_dim`` rope values, contiguous) is loaded once for the program's heads, and both products
are ``tl.dot``s::

    s   = (q_lat @ c^T + q_pe @ k_pe^T) * sm_scale * log2(e)    # [BLOCK_H, BLOCK_N]
    acc = acc * exp2(m_i - m) + exp2(s - m) @ c                 # [BLOCK_H, rank]: V is the latent

Unlike grouped-query decode, where a program's heads are the few that share one KV head, here
every head shares the one latent, so the latent rows a program loads serve ``BLOCK_H`` heads and
the programs of one (sequence, split) (grid axis 0, launched together) read the same rows: all
but the first find them in L2. A sequence's tokens are cut into ``num_splits`` parts when
``batch * head tiles`` programs are too few to fill the GPU; the parts are merged by
:func:`kernels.decode.merge.merge_splits` (the same LSE merge as grouped-query decode, over a
head dim of ``rank``).

A token's page comes from the block table per token (``page = table[t // PAGE_SIZE]``), so any
block size 1-256 reads the same way; a page of 64 tokens (vLLM's MLA page) holds 64 rows of
1,152 bytes (bf16).

FP8 (e4m3) latent: one per-tensor scale, folded into the logit scale (for ``c`` and ``k_pe``)
and into the output (``c`` as V). The tiles are converted to fp16 for the dots, since e4m3 ->
fp16 is native on Hopper and e4m3 -> bf16 is not; the query is converted to fp16 once (it must
then lie within fp16's range, as the FP8 grouped-query kernel's does). Under ``TRITON_INTERPRET=1``
the dots run in fp32 (the interpreter's bf16 arithmetic is wrong).
"""

from __future__ import annotations

from dataclasses import dataclass

from kernels.runtime import ensure_triton_backend

ensure_triton_backend()  # must run before `import triton`: the interpreter is chosen at decoration

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from kernels.cache.mla import MlaLatentCache  # noqa: E402
from kernels.cache.paged import FP8_DTYPE  # noqa: E402
from kernels.decode.launch import (  # noqa: E402
    SplitPlan, check_call_options, interpreted, planned_split, signature, split_buffers,
)
from kernels.decode.merge import merge_splits  # noqa: E402
from kernels.decode.mla_gluon import gluon_mla_num_splits, routes_to_gluon  # noqa: E402
from kernels.reference.online_softmax import LOG2_E  # noqa: E402

__all__ = ["MlaConfig", "triton_mla_decode", "mla_num_splits", "default_mla_config", "MLA_HEAD_TILES",
           "check_mla_call"]

MLA_HEAD_TILES = (16, 32, 64)  # BLOCK_H choices: tl.dot needs at least 16 rows


@dataclass(frozen=True, kw_only=True)
class MlaConfig:
    """Launch shape of the MLA kernel: query heads and tokens per program tile, warps, stages,
    and the waves of resident programs the split count aims at."""

    block_h: int = 16
    block_n: int = 32
    num_warps: int = 4
    num_stages: int = 2
    waves: int = 2

    def __post_init__(self) -> None:
        if self.block_h not in MLA_HEAD_TILES:
            raise ValueError(f"block_h must be one of {MLA_HEAD_TILES}, got {self.block_h}")
        if self.block_n < 16 or self.block_n & (self.block_n - 1):
            raise ValueError(f"block_n must be a power of two >= 16, got {self.block_n}")
        if self.num_warps not in (1, 2, 4, 8):
            raise ValueError(f"num_warps must be 1, 2, 4 or 8, got {self.num_warps}")
        if self.num_stages < 1:
            raise ValueError(f"num_stages must be >= 1, got {self.num_stages}")
        if self.waves not in (1, 2):
            raise ValueError(f"waves must be 1 or 2, got {self.waves}")


def default_mla_config(n_heads: int) -> MlaConfig:
    """64 heads and 64 tokens a program on 8 warps from 64 query heads up: on the H200 at 128 heads
    (DeepSeek-V3's shape, bf16, page 64) it ran 190-225 TFLOP/s against 92-108 for 16 heads x 32
    tokens on 4 warps, the tile SGLang's Triton kernel uses; the ``[64, rank]`` fp32 accumulator is
    128 registers a thread over 8 warps, and two stages of a 64-token tile of 576 bf16 values take
    144 KiB. Fewer heads take the smallest tile that holds them (16 at least, tl.dot's minimum;
    16 heads is DeepSeek-V3 at TP 8) at 32 tokens on 4 warps.
    """
    if n_heads >= 64:
        return MlaConfig(block_h=64, block_n=64, num_warps=8, num_stages=2)
    return MlaConfig(block_h=16 if n_heads <= 16 else 32)


@triton.jit
def _mla_decode_kernel(
    q_lat_ptr,  # [batch, n_heads, RANK] 16-bit
    q_pe_ptr,  # [batch, n_heads, ROPE] 16-bit
    cache_ptr,  # [num_blocks, PAGE_SIZE, RANK + ROPE] 16-bit or e4m3
    tables_ptr,  # [batch, max_blocks] int32
    lens_ptr,  # [batch] int32
    scale_ptr,  # [1] fp32 (FP8 only)
    out_ptr,  # [batch, n_heads, RANK]
    part_out_ptr,  # [batch, n_heads, num_splits, RANK] fp32 (split calls)
    part_lse_ptr,  # [batch, n_heads, num_splits] fp32 base-2 (split calls)
    qk_scale, n_heads, num_splits,
    stride_qlb, stride_qlh, stride_qpb, stride_qph,
    stride_cb, stride_cs, stride_tb,
    stride_ob, stride_oh,
    stride_pob, stride_poh, stride_pos, stride_plb, stride_plh,
    RANK: tl.constexpr, ROPE: tl.constexpr, PAGE_SIZE: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
    SPLIT: tl.constexpr, FP8: tl.constexpr, INTERPRET: tl.constexpr,
):
    head_tile = tl.program_id(0)
    seq = tl.program_id(1)
    split = tl.program_id(2)
    length = tl.load(lens_ptr + seq)
    per_split = tl.cdiv(tl.cdiv(length, num_splits), BLOCK_N) * BLOCK_N  # whole tiles per split
    start = split * per_split
    end = tl.minimum(length, start + per_split)

    heads = head_tile * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_h = heads < n_heads
    offs_r = tl.arange(0, RANK)
    offs_p = tl.arange(0, ROPE)
    q_lat = tl.load(q_lat_ptr + seq.to(tl.int64) * stride_qlb + heads[:, None] * stride_qlh + offs_r[None, :],
                    mask=mask_h[:, None], other=0.0)
    q_pe = tl.load(q_pe_ptr + seq.to(tl.int64) * stride_qpb + heads[:, None] * stride_qph + offs_p[None, :],
                   mask=mask_h[:, None], other=0.0)
    if FP8:
        kv_scale = tl.load(scale_ptr)
        qk_scale = qk_scale * kv_scale
    if INTERPRET:
        q_lat = q_lat.to(tl.float32)
        q_pe = q_pe.to(tl.float32)
    elif FP8:
        q_lat = q_lat.to(tl.float16)
        q_pe = q_pe.to(tl.float16)

    m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, RANK], dtype=tl.float32)
    table = tables_ptr + seq.to(tl.int64) * stride_tb
    for first in range(start, end, BLOCK_N):
        offs_n = first + tl.arange(0, BLOCK_N)
        mask_n = offs_n < end
        page = tl.load(table + offs_n // PAGE_SIZE, mask=mask_n, other=0)
        rows = cache_ptr + page.to(tl.int64) * stride_cb + (offs_n % PAGE_SIZE) * stride_cs
        c = tl.load(rows[:, None] + offs_r[None, :], mask=mask_n[:, None], other=0.0)  # [BLOCK_N, RANK]
        k_pe = tl.load(rows[:, None] + RANK + offs_p[None, :], mask=mask_n[:, None], other=0.0)
        if INTERPRET:
            c = c.to(tl.float32)
            k_pe = k_pe.to(tl.float32)
        elif FP8:
            c = c.to(tl.float16)
            k_pe = k_pe.to(tl.float16)
        s = (tl.dot(q_lat, tl.trans(c)) + tl.dot(q_pe, tl.trans(k_pe))) * qk_scale
        s = tl.where(mask_n[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))  # finite: every tile holds a token
        alpha = tl.math.exp2(m_i - m_new)
        p = tl.math.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(c.dtype), c)
        m_i = m_new

    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]  # l_i is 0 only in an empty split
    if FP8:
        out = out * kv_scale
    if SPLIT:
        lse = tl.where(l_i > 0.0, m_i + tl.log2(tl.where(l_i > 0.0, l_i, 1.0)), float("-inf"))
        po = (part_out_ptr + seq.to(tl.int64) * stride_pob + heads[:, None] * stride_poh + split * stride_pos
              + offs_r[None, :])
        tl.store(po, out, mask=mask_h[:, None])
        tl.store(part_lse_ptr + seq.to(tl.int64) * stride_plb + heads * stride_plh + split, lse, mask=mask_h)
    else:
        o = out_ptr + seq.to(tl.int64) * stride_ob + heads[:, None] * stride_oh + offs_r[None, :]
        tl.store(o, out.to(out_ptr.dtype.element_ty), mask=mask_h[:, None])


def _check(q_latent: torch.Tensor, q_rope: torch.Tensor, cache: MlaLatentCache) -> None:
    """Refuse what the kernel cannot read, naming the argument."""
    if not isinstance(cache, MlaLatentCache):
        raise ValueError(f"cache must be an MlaLatentCache, got {type(cache).__name__}")
    lat = cache.latent
    if q_latent.dim() != 3 or q_rope.dim() != 3 or q_latent.shape[:2] != q_rope.shape[:2]:
        raise ValueError(f"q_latent [batch, n_heads, rank] and q_rope [batch, n_heads, rope_dim] must agree, "
                         f"got {tuple(q_latent.shape)} and {tuple(q_rope.shape)}")
    if q_latent.dtype not in (torch.bfloat16, torch.float16) or q_rope.dtype != q_latent.dtype:
        raise ValueError(f"q_latent and q_rope must both be bf16 or fp16, got {q_latent.dtype} and {q_rope.dtype}")
    if lat.dtype not in (q_latent.dtype, FP8_DTYPE):
        raise ValueError(f"the latent cache must be {q_latent.dtype} or float8_e4m3fn, got {lat.dtype}")
    if (lat.dtype == FP8_DTYPE) != (cache.scale is not None):
        raise ValueError("an FP8 latent cache needs its scale, and only an FP8 one has one")
    rank, rope = cache.kv_lora_rank, cache.rope_dim
    if q_latent.shape[2] != rank or q_rope.shape[2] != rope:
        raise ValueError(f"the cache holds rank {rank} + rope {rope}; the queries have {q_latent.shape[2]} "
                         f"and {q_rope.shape[2]}")
    for name, d in (("kv_lora_rank", rank), ("rope_dim", rope)):
        if d < 16 or d & (d - 1):
            raise ValueError(f"{name} must be a power of two >= 16 for the kernel's tiles, got {d}")
    if q_latent.shape[0] != cache.batch or cache.block_tables.shape[0] != cache.batch:
        raise ValueError(f"batch differs: q {q_latent.shape[0]}, tables {cache.block_tables.shape[0]}, "
                         f"seq_lens {cache.batch}")
    tensors = (q_latent, q_rope, lat, cache.block_tables, cache.seq_lens)
    if len({t.device for t in tensors}) != 1:
        raise ValueError("queries, latent cache, tables and lengths must be on one device")
    if q_latent.stride(2) != 1 or q_rope.stride(2) != 1 or not lat.is_contiguous():
        raise ValueError("queries need a contiguous last dim and the latent pool must be contiguous")
    if cache.block_tables.dtype != torch.int32 or cache.seq_lens.dtype != torch.int32:
        raise ValueError("block_tables and seq_lens must be int32")


def _check_values(cache: MlaLatentCache) -> None:
    """Lengths within the table and every used entry in the pool (one host sync)."""
    lens = cache.seq_lens.cpu()
    width = cache.block_tables.shape[1]
    if bool((lens < 1).any()) or bool((lens > width * cache.block_size).any()):
        raise ValueError(f"seq_lens must lie in 1..{width * cache.block_size} (table width x block size)")
    used = torch.arange(width)[None, :] < (lens[:, None] + cache.block_size - 1) // cache.block_size
    entries = cache.block_tables.cpu()[used]
    if bool(((entries < 0) | (entries >= cache.num_blocks)).any()):
        raise ValueError(f"block_tables entries of used blocks must lie in 0..{cache.num_blocks - 1}")


def _plan(q_latent: torch.Tensor, cache: MlaLatentCache, config: MlaConfig, num_splits: int | None) -> SplitPlan:
    batch, n_heads, _ = q_latent.shape
    head_tiles = triton.cdiv(n_heads, config.block_h)
    max_len = cache.block_tables.shape[1] * cache.block_size
    key = (signature(q_latent, cache.latent, cache.block_tables), config)
    # On a GPU without a given count, the split kernel is compiled once per key for its residency.
    return planned_split(key, batch, head_tiles, max_len, q_latent.device, num_splits, config.block_n, config.waves,
                         lambda trial: _compile(q_latent, cache, config, trial))[0]


def _launch(q_latent, q_rope, cache: MlaLatentCache, sm_scale: float, config: MlaConfig, plan: SplitPlan,
            out: torch.Tensor, warmup: bool = False):
    part_out, part_lse, part_strides = split_buffers(plan, q_latent, out)
    lat = cache.latent
    args = (q_latent, q_rope, lat, cache.block_tables, cache.seq_lens,
            cache.scale if cache.scale is not None else out, out, part_out, part_lse,
            sm_scale * LOG2_E, q_latent.shape[1], plan.num_splits,
            q_latent.stride(0), q_latent.stride(1), q_rope.stride(0), q_rope.stride(1),
            lat.stride(0), lat.stride(1), cache.block_tables.stride(0), out.stride(0), out.stride(1), *part_strides)
    constexprs = dict(RANK=cache.kv_lora_rank, ROPE=cache.rope_dim, PAGE_SIZE=cache.block_size,
                      BLOCK_H=config.block_h, BLOCK_N=config.block_n, SPLIT=plan.split,
                      FP8=lat.dtype == FP8_DTYPE, INTERPRET=interpreted(q_latent.device),
                      num_warps=config.num_warps, num_stages=config.num_stages)
    if warmup:
        return _mla_decode_kernel.warmup(*args, grid=plan.grid, **constexprs)
    _mla_decode_kernel[plan.grid](*args, **constexprs)
    return part_out, part_lse


def _compile(q_latent, cache, config, trial: SplitPlan):
    """Compile (not launch) the split variant, for its residency per SM."""
    out = torch.empty_like(q_latent)
    return _launch(q_latent, q_latent[..., :cache.rope_dim], cache, 1.0, config, trial, out, warmup=True)


def check_mla_call(q_latent: torch.Tensor, q_rope: torch.Tensor, cache: MlaLatentCache, *, sm_scale: float,
                   num_splits: int | None, config: MlaConfig | None, validate: bool) -> float:
    """Refuse an MLA decode call either kernel cannot take (naming the argument); the checked
    ``sm_scale``. ``validate``: also check lengths and table entries (one host sync)."""
    _check(q_latent, q_rope, cache)
    if config is not None and not isinstance(config, MlaConfig):
        raise ValueError(f"config must be an MlaConfig, got {type(config).__name__}")
    sm_scale = check_call_options(sm_scale, num_splits, cache.kv_lora_rank)
    if validate:
        _check_values(cache)
    return sm_scale


def triton_mla_decode(q_latent: torch.Tensor, q_rope: torch.Tensor, cache: MlaLatentCache, *,
                      sm_scale: float, num_splits: int | None = None, config: MlaConfig | None = None,
                      validate: bool = True) -> torch.Tensor:
    """Absorbed MLA decode (arguments as :func:`kernels.decode.api.mla_decode_attention`, which
    is how callers reach it); returns ``[batch, n_heads, rank]`` in the query's dtype."""
    sm_scale = check_mla_call(q_latent, q_rope, cache, sm_scale=sm_scale, num_splits=num_splits, config=config,
                              validate=validate)
    config = config or default_mla_config(q_latent.shape[1])
    plan = _plan(q_latent, cache, config, num_splits)
    out = torch.empty_like(q_latent)
    part_out, part_lse = _launch(q_latent, q_rope, cache, sm_scale, config, plan, out)
    if plan.split:
        merge_splits(part_out, part_lse, out)
    return out


def mla_num_splits(q_latent: torch.Tensor, cache: MlaLatentCache, *, config: MlaConfig | None = None) -> int:
    """The split count the call :func:`kernels.decode.api.mla_decode_attention` routes would use
    (the Gluon kernel's where it takes the call, else :func:`triton_mla_decode`'s; nothing is launched)."""
    if routes_to_gluon(q_latent, cache, config):
        return gluon_mla_num_splits(q_latent.shape[0], q_latent.shape[1],
                                    cache.block_tables.shape[1] * cache.block_size, q_latent.device)
    config = config or default_mla_config(q_latent.shape[1])
    return _plan(q_latent, cache, config, None).num_splits

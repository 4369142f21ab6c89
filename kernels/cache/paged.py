"""Paged KV-cache builder: a pool of fixed-size blocks, per-sequence block tables, random data.

What it builds (the layout ``kernels.decode.paged`` reads)::

    k_cache, v_cache  [num_blocks, n_kv_heads, block_size, head_dim]   the pool
    block_tables      [batch, max_blocks_per_seq] int32                 -1 past each sequence's blocks
    seq_lens          [batch] int32                                     tokens per sequence

Sequence ``b`` needs ``cdiv(seq_lens[b], block_size)`` blocks; only its last block can be partly
empty. Blocks are handed out in order (sequence 0 gets 0, 1, 2, ...) or shuffled over the pool
with an injected ``torch.Generator``, as an allocator serving many requests would leave them.
Slots no sequence uses (the tail of each last block, spare blocks) can be filled with NaN
("poisoned") so a kernel that reads past a sequence's end shows it in its output.

``append_token`` adds one token to one sequence the way a decode step does: it writes into the
current last block, or takes a free block when that one is full. The pool tensors are shared
and written in place; the returned cache has new tables and lengths (the old cache stays valid,
since the written slot lies past its lengths).

``quantize_fp8`` turns a bf16/fp16 cache into float8_e4m3fn values with per-tensor or per-head
scales (real value = stored value * scale); ``quantize_pool_fp8`` does the same to one bare pool
tensor (the benchmark's pools, which have no tables), one KV head at a time so that no float32
copy of a whole multi-GB pool is ever made. Every FP8 cache of the project is made by it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import torch

from units import cdiv

__all__ = [
    "PagedKVCache",
    "build_paged_cache",
    "paged_from_contiguous",
    "append_token",
    "quantize_fp8",
    "quantize_pool_fp8",
    "quantize_kv_fp8",
    "FP8_MAX",
    "FP8_DTYPE",
    "check_build_args",
    "layout_tables",
]

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0  # largest finite float8_e4m3fn value


@dataclass(frozen=True, kw_only=True)
class PagedKVCache:
    """A paged KV cache: the pool, the tables and the lengths (see the module docstring)."""

    k_cache: torch.Tensor  # [num_blocks, n_kv_heads, block_size, head_dim]
    v_cache: torch.Tensor  # same shape and dtype
    block_tables: torch.Tensor  # [batch, max_blocks_per_seq] int32, -1 where unused
    seq_lens: torch.Tensor  # [batch] int32
    k_scale: torch.Tensor | None = None  # [n_kv_heads] or [1] fp32, FP8 caches only
    v_scale: torch.Tensor | None = None

    @property
    def num_blocks(self) -> int:
        return self.k_cache.shape[0]

    @property
    def n_kv_heads(self) -> int:
        return self.k_cache.shape[1]

    @property
    def block_size(self) -> int:
        return self.k_cache.shape[2]

    @property
    def head_dim(self) -> int:
        return self.k_cache.shape[3]

    @property
    def batch(self) -> int:
        return self.block_tables.shape[0]

    @property
    def lengths(self) -> list[int]:
        return [int(x) for x in self.seq_lens.tolist()]

    @property
    def blocks_per_seq(self) -> list[int]:
        return [cdiv(n, self.block_size) for n in self.lengths]

    @property
    def used_blocks(self) -> list[int]:
        """Pool indices referenced by some sequence, sorted."""
        used: set[int] = set()
        tables = self.block_tables.tolist()
        for row, nblk in zip(tables, self.blocks_per_seq):
            used.update(row[:nblk])
        return sorted(used)

    @property
    def free_blocks(self) -> list[int]:
        used = set(self.used_blocks)
        return [i for i in range(self.num_blocks) if i not in used]

    @property
    def bytes_per_token(self) -> int:
        """K and V bytes of one token over all KV heads (one layer)."""
        return 2 * self.n_kv_heads * self.head_dim * self.k_cache.element_size()

    @property
    def pool_bytes(self) -> int:
        return 2 * self.k_cache.numel() * self.k_cache.element_size()

    @property
    def token_bytes(self) -> int:
        """Bytes holding real tokens (what a decode step must read)."""
        return sum(self.lengths) * self.bytes_per_token

    @property
    def slot_utilisation(self) -> float:
        """Tokens stored over slots in the blocks the sequences hold (1 - internal fragmentation)."""
        held = sum(self.blocks_per_seq) * self.block_size
        return sum(self.lengths) / held if held else 1.0


def check_build_args(seq_lens: Sequence[int], block_size: int, n_kv_heads: int, head_dim: int,
                      spare_blocks: int) -> list[int]:
    """``seq_lens`` as ints, after refusing an empty batch, empty sequences and a bad geometry."""
    lens = [int(n) for n in seq_lens]
    if not lens:
        raise ValueError("seq_lens must name at least one sequence")
    if any(n < 1 for n in lens):
        raise ValueError(f"seq_lens must be >= 1, got {lens}")
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    if n_kv_heads < 1 or head_dim < 1:
        raise ValueError(f"n_kv_heads and head_dim must be >= 1, got {n_kv_heads}, {head_dim}")
    if spare_blocks < 0:
        raise ValueError(f"spare_blocks must be >= 0, got {spare_blocks}")
    return lens


def layout_tables(lens: list[int], block_size: int, num_blocks: int, max_blocks_per_seq: int,
                   shuffle: bool, generator: torch.Generator | None) -> torch.Tensor:
    """Block tables: consecutive pool indices, or a random permutation of the pool."""
    need = [cdiv(n, block_size) for n in lens]
    if shuffle:
        if generator is None:
            raise ValueError("shuffle=True needs a torch.Generator (the RNG is injected, never global)")
        order = torch.randperm(num_blocks, generator=generator, device=generator.device).cpu()
    else:
        order = torch.arange(num_blocks)
    tables = torch.full((len(lens), max_blocks_per_seq), -1, dtype=torch.int32)
    offsets = [0]
    for n in need:
        offsets.append(offsets[-1] + n)
    for b, n in enumerate(need):
        tables[b, :n] = order[offsets[b]:offsets[b + 1]].to(torch.int32)
    return tables


def _poison_unused(cache: PagedKVCache) -> None:
    """Write NaN into every slot that holds no token of any sequence (in place)."""
    valid = torch.zeros(cache.num_blocks, cache.block_size, dtype=torch.bool)
    tables = cache.block_tables.cpu()
    for b, n in enumerate(cache.lengths):
        nblk = cdiv(n, cache.block_size)
        pos = torch.arange(nblk * cache.block_size)
        blocks = tables[b, pos // cache.block_size].long()
        valid[blocks[:n], pos[:n] % cache.block_size] = True
    invalid = (~valid).to(cache.k_cache.device)  # [num_blocks, block_size]
    mask = invalid[:, None, :, None].expand_as(cache.k_cache)
    for pool in (cache.k_cache, cache.v_cache):
        if pool.dtype == FP8_DTYPE:  # masked_fill has no fp8 kernel: write the NaN bit pattern
            pool.view(torch.uint8).masked_fill_(mask, 0x7F)  # e4m3fn NaN is S.1111.111
        else:
            pool.masked_fill_(mask, float("nan"))


def build_paged_cache(
    seq_lens: Sequence[int],
    *,
    block_size: int,
    n_kv_heads: int,
    head_dim: int,
    dtype: torch.dtype = torch.bfloat16,
    device: str | torch.device = "cpu",
    shuffle: bool = False,
    generator: torch.Generator | None = None,
    spare_blocks: int = 0,
    max_blocks_per_seq: int | None = None,
    poison_unused: bool = False,
) -> PagedKVCache:
    """A pool holding ``seq_lens`` tokens of random K/V, with its block tables.

    Parameters
    ----------
    seq_lens : sequence of int
        Tokens per sequence (each >= 1).
    block_size, n_kv_heads, head_dim : int
        Pool geometry: k_cache is ``[num_blocks, n_kv_heads, block_size, head_dim]``.
    dtype : torch.dtype
        bf16 or fp16 (use ``quantize_fp8`` for an FP8 cache).
    device : device the pool lives on.
    shuffle : bool
        Scatter the blocks over the pool in random order (needs ``generator``).
    generator : torch.Generator, optional
        Source of the random data and of the shuffle; its device is where data is drawn.
        Without one the data comes from a fresh generator seeded with 0.
    spare_blocks : int
        Free blocks beyond those the sequences need (room for ``append_token``).
    max_blocks_per_seq : int, optional
        Table width; default the longest sequence's block count.
    poison_unused : bool
        Fill slots that hold no token with NaN.

    Returns
    -------
    PagedKVCache
    """
    lens = check_build_args(seq_lens, block_size, n_kv_heads, head_dim, spare_blocks)
    need = [cdiv(n, block_size) for n in lens]
    width = max(need) if max_blocks_per_seq is None else max_blocks_per_seq
    if width < max(need):
        raise ValueError(f"max_blocks_per_seq={width} is below the {max(need)} blocks the longest sequence needs")
    num_blocks = sum(need) + spare_blocks
    if shuffle and generator is None:
        raise ValueError("shuffle=True needs a torch.Generator (the RNG is injected, never global)")
    if generator is None:
        generator = torch.Generator().manual_seed(0)
    shape = (num_blocks, n_kv_heads, block_size, head_dim)
    k = torch.randn(shape, generator=generator, device=generator.device, dtype=torch.float32)
    v = torch.randn(shape, generator=generator, device=generator.device, dtype=torch.float32)
    tables = layout_tables(lens, block_size, num_blocks, width, shuffle, generator)
    cache = PagedKVCache(
        k_cache=k.to(device=device, dtype=dtype),
        v_cache=v.to(device=device, dtype=dtype),
        block_tables=tables.to(device),
        seq_lens=torch.tensor(lens, dtype=torch.int32, device=device),
    )
    if poison_unused:
        _poison_unused(cache)
    return cache


def paged_from_contiguous(
    k: torch.Tensor,
    v: torch.Tensor,
    seq_lens: Sequence[int],
    *,
    block_size: int,
    shuffle: bool = False,
    generator: torch.Generator | None = None,
    spare_blocks: int = 0,
    poison_unused: bool = False,
) -> PagedKVCache:
    """Page a contiguous cache ``k, v: [batch, n_kv_heads, max_len, head_dim]`` into blocks.

    The same logical K/V paged with different block sizes must give the same attention output:
    this is how the tests check block-size invariance.
    """
    if k.shape != v.shape or k.dim() != 4:
        raise ValueError(f"k and v must both be [batch, n_kv_heads, max_len, head_dim], got {tuple(k.shape)}, {tuple(v.shape)}")
    batch, n_kv_heads, max_len, head_dim = k.shape
    lens = check_build_args(seq_lens, block_size, n_kv_heads, head_dim, spare_blocks)
    if len(lens) != batch or max(lens) > max_len:
        raise ValueError(f"seq_lens {lens} do not fit k of shape {tuple(k.shape)}")
    need = [cdiv(n, block_size) for n in lens]
    num_blocks = sum(need) + spare_blocks
    tables = layout_tables(lens, block_size, num_blocks, max(need), shuffle, generator)
    shape = (num_blocks, n_kv_heads, block_size, head_dim)
    k_cache = torch.zeros(shape, dtype=k.dtype, device=k.device)
    v_cache = torch.zeros(shape, dtype=v.dtype, device=v.device)
    for b, n in enumerate(lens):
        pos = torch.arange(n)
        blocks = tables[b, pos // block_size].long().to(k.device)
        slots = (pos % block_size).to(k.device)
        # k[b] is [n_kv_heads, max_len, head_dim]; pool slot [block, head, slot, :]
        k_cache[blocks, :, slots] = k[b, :, :n].transpose(0, 1)
        v_cache[blocks, :, slots] = v[b, :, :n].transpose(0, 1)
    cache = PagedKVCache(
        k_cache=k_cache, v_cache=v_cache, block_tables=tables.to(k.device),
        seq_lens=torch.tensor(lens, dtype=torch.int32, device=k.device),
    )
    if poison_unused:
        _poison_unused(cache)
    return cache


def append_token(cache: PagedKVCache, seq: int, k_new: torch.Tensor, v_new: torch.Tensor) -> PagedKVCache:
    """Append one token's K/V (each ``[n_kv_heads, head_dim]``) to sequence ``seq``.

    Writes into the sequence's last block, or into the lowest-numbered free block when that one
    is full (the table grows a column if needed). Raises ValueError when the pool is full.
    """
    if not 0 <= seq < cache.batch:
        raise ValueError(f"seq must be in 0..{cache.batch - 1}, got {seq}")
    want = (cache.n_kv_heads, cache.head_dim)
    for name, t in (("k_new", k_new), ("v_new", v_new)):
        if tuple(t.shape) != want:
            raise ValueError(f"{name} must have shape {want}, got {tuple(t.shape)}")
    length = cache.lengths[seq]
    block_idx, slot = divmod(length, cache.block_size)
    tables = cache.block_tables.clone()
    if slot == 0:  # the last block is full (or the sequence is empty): take a free block
        free = cache.free_blocks
        if not free:
            raise ValueError(f"the pool is full: all {cache.num_blocks} blocks are in use")
        if block_idx >= tables.shape[1]:
            pad = torch.full((tables.shape[0], 1), -1, dtype=tables.dtype, device=tables.device)
            tables = torch.cat([tables, pad], dim=1)
        tables[seq, block_idx] = free[0]
    block = int(tables[seq, block_idx])
    scale_k = cache.k_scale if cache.k_scale is not None else None
    scale_v = cache.v_scale if cache.v_scale is not None else None
    cache.k_cache[block, :, slot] = _to_cache_dtype(k_new, cache.k_cache.dtype, scale_k)
    cache.v_cache[block, :, slot] = _to_cache_dtype(v_new, cache.v_cache.dtype, scale_v)
    lens = cache.seq_lens.clone()
    lens[seq] += 1
    return replace(cache, block_tables=tables, seq_lens=lens)


def _to_cache_dtype(x: torch.Tensor, dtype: torch.dtype, scale: torch.Tensor | None) -> torch.Tensor:
    if dtype == FP8_DTYPE:
        s = scale.reshape(-1, 1).to(x.device) if scale is not None else 1.0
        return (x.float() / s).clamp(-FP8_MAX, FP8_MAX).to(dtype)
    return x.to(dtype)


def quantize_pool_fp8(pool: torch.Tensor, *, per_head: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """``pool`` ``[num_blocks, n_kv_heads, block_size, head_dim]`` in float8_e4m3fn, and its scales.

    Scales are ``amax / 448`` (e4m3's largest finite value) per KV head (``[n_kv_heads]``) or for
    the whole tensor (``[1]``), fp32. Head by head, so at most one head's float32 copy exists at a
    time. NaN-poisoned slots stay NaN (they are excluded from the amax).
    """
    if pool.dtype == FP8_DTYPE:
        raise ValueError("cache is already float8_e4m3fn")
    heads = range(pool.shape[1])
    amax = torch.stack([torch.nan_to_num(pool[:, h].float(), nan=0.0).abs().amax() for h in heads])
    if not per_head:
        amax = amax.amax().reshape(1)
    scale = (torch.clamp(amax, min=1e-12) / FP8_MAX).to(torch.float32)
    out = torch.empty(pool.shape, dtype=FP8_DTYPE, device=pool.device)
    for h in heads:
        xf = pool[:, h].float()
        q = (xf / scale[h if per_head else 0]).clamp(-FP8_MAX, FP8_MAX)
        q = torch.where(torch.isnan(xf), xf, q)  # clamp turned NaN into a number on some builds
        out[:, h] = q.to(FP8_DTYPE)
    return out, scale


def quantize_kv_fp8(k: torch.Tensor, v: torch.Tensor, *, per_head: bool = True
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A K and a V pool in float8_e4m3fn: ``(k8, v8, k_scale, v_scale)`` (see :func:`quantize_pool_fp8`)."""
    k8, ks = quantize_pool_fp8(k, per_head=per_head)
    v8, vs = quantize_pool_fp8(v, per_head=per_head)
    return k8, v8, ks, vs


def quantize_fp8(cache: PagedKVCache, *, per_head: bool = True) -> PagedKVCache:
    """The same cache in float8_e4m3fn with scales ``amax / 448`` per KV head or per tensor
    (see :func:`quantize_pool_fp8`). NaN-poisoned slots stay NaN."""
    k8, v8, ks, vs = quantize_kv_fp8(cache.k_cache, cache.v_cache, per_head=per_head)
    return replace(cache, k_cache=k8, v_cache=v8, k_scale=ks, v_scale=vs)

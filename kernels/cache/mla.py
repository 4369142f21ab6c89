"""Paged latent cache for multi-head latent attention (MLA: DeepSeek-V2/V3, Kimi-K2).

MLA stores no per-head K and V. Each token keeps one compressed latent ``c`` of
``kv_lora_rank`` values and one decoupled rope key ``k_pe`` of ``rope_dim`` values, shared by
every query head (DeepSeek-V3: 512 + 64 = 576 values a token, for all 128 heads). The pool is
the layout vLLM's MLA backends keep (one "head" of ``kv_lora_rank + rope_dim``)::

    latent        [num_blocks, block_size, kv_lora_rank + rope_dim]   c first, then k_pe
    block_tables  [batch, max_blocks_per_seq] int32                   -1 past each sequence's blocks
    seq_lens      [batch] int32

The tables are laid out as :func:`kernels.cache.paged.layout_tables` lays them out for the
ordinary pools (in order, or shuffled with an injected generator). An FP8 cache holds
float8_e4m3fn values with one per-tensor scale (real value = stored value * scale), made by the
same quantiser as the ordinary FP8 pools.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import torch

from kernels.cache.paged import FP8_DTYPE, check_build_args, layout_tables, quantize_pool_fp8
from units import cdiv

__all__ = ["MlaLatentCache", "build_mla_cache", "quantize_mla_fp8", "DEEPSEEK_V3_RANK", "DEEPSEEK_V3_ROPE"]

# DeepSeek-V3's config.json: kv_lora_rank 512, qk_rope_head_dim 64.
DEEPSEEK_V3_RANK = 512
DEEPSEEK_V3_ROPE = 64


@dataclass(frozen=True, kw_only=True)
class MlaLatentCache:
    """A paged MLA latent cache: the pool, the tables and the lengths (module docstring)."""

    latent: torch.Tensor  # [num_blocks, block_size, kv_lora_rank + rope_dim]
    block_tables: torch.Tensor  # [batch, max_blocks_per_seq] int32, -1 where unused
    seq_lens: torch.Tensor  # [batch] int32
    kv_lora_rank: int
    scale: torch.Tensor | None = None  # [1] fp32, FP8 caches only

    @property
    def rope_dim(self) -> int:
        return self.latent.shape[2] - self.kv_lora_rank

    @property
    def block_size(self) -> int:
        return self.latent.shape[1]

    @property
    def num_blocks(self) -> int:
        return self.latent.shape[0]

    @property
    def batch(self) -> int:
        return self.seq_lens.shape[0]

    @property
    def lengths(self) -> list[int]:
        return [int(n) for n in self.seq_lens.tolist()]

    @property
    def token_bytes(self) -> int:
        """Bytes one token's latent takes (DeepSeek-V3 bf16: 576 x 2 = 1,152, for all heads)."""
        return self.latent.shape[2] * self.latent.element_size()

    def sequence_latent(self, seq: int) -> torch.Tensor:
        """Sequence ``seq``'s latents in token order, ``[seq_len, kv_lora_rank + rope_dim]``, as stored."""
        n = self.lengths[seq]
        blocks = self.block_tables[seq, :cdiv(n, self.block_size)].long()
        return self.latent[blocks].reshape(-1, self.latent.shape[2])[:n]


def build_mla_cache(
    seq_lens: Sequence[int],
    *,
    block_size: int,
    kv_lora_rank: int = DEEPSEEK_V3_RANK,
    rope_dim: int = DEEPSEEK_V3_ROPE,
    dtype: torch.dtype = torch.bfloat16,
    device: str | torch.device = "cpu",
    shuffle: bool = False,
    generator: torch.Generator | None = None,
    spare_blocks: int = 0,
) -> MlaLatentCache:
    """A latent pool holding ``seq_lens`` tokens of random values (standard normal), with its
    tables; ``dtype`` bf16 or fp16 (:func:`quantize_mla_fp8` for FP8). The generator, when
    given, draws the data and the shuffle on its own device; without one a CPU generator seeded
    with 0 draws them."""
    lens = check_build_args(seq_lens, block_size, 1, kv_lora_rank + rope_dim, spare_blocks)
    if kv_lora_rank < 1 or rope_dim < 0:
        raise ValueError(f"kv_lora_rank must be >= 1 and rope_dim >= 0, got {kv_lora_rank}, {rope_dim}")
    need = [cdiv(n, block_size) for n in lens]
    num_blocks = sum(need) + spare_blocks
    if shuffle and generator is None:
        raise ValueError("shuffle=True needs a torch.Generator (the RNG is injected, never global)")
    if generator is None:
        generator = torch.Generator().manual_seed(0)
    latent = torch.randn((num_blocks, block_size, kv_lora_rank + rope_dim), generator=generator,
                         device=generator.device, dtype=torch.float32)
    tables = layout_tables(lens, block_size, num_blocks, max(need), shuffle, generator)
    return MlaLatentCache(latent=latent.to(device=device, dtype=dtype), block_tables=tables.to(device),
                          seq_lens=torch.tensor(lens, dtype=torch.int32, device=device), kv_lora_rank=kv_lora_rank)


def quantize_mla_fp8(cache: MlaLatentCache) -> MlaLatentCache:
    """The same cache in float8_e4m3fn with one scale ``amax / 448`` for the whole pool (the
    latent and the rope key share it, as one vLLM ``k_scale`` does)."""
    if cache.latent.dtype == FP8_DTYPE:
        raise ValueError("cache is already float8_e4m3fn")
    pool, scale = quantize_pool_fp8(cache.latent.unsqueeze(1), per_head=False)
    return replace(cache, latent=pool.squeeze(1), scale=scale)

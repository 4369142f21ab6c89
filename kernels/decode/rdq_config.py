"""Launch configurations of the register-dequant decode kernel (:mod:`kernels.decode.rdq`):
the config type, the candidates timed on the H200, and what a config implies for a call (whether
it prefetches into registers, how much shared memory its ring takes). Pure Python: importable
without Triton's Gluon.
"""

from __future__ import annotations

import dataclasses

__all__ = ["RdqConfig", "RDQ_CONFIGS", "RDQ_FORMATS", "MAX_RDQ_GROUP", "uses_register_prefetch", "rdq_shared_bytes"]

RDQ_FORMATS = ("int4", "fp8")
MAX_RDQ_GROUP = 16  # query heads per KV head: the MMA's 16 rows


@dataclasses.dataclass(frozen=True, kw_only=True)
class RdqConfig:
    """Launch configuration: ``block_n`` tokens per tile (a multiple of 16: one k-step of p.V),
    ``num_stages`` shared-memory ring slots of code tiles (``num_stages - 1`` tiles in flight
    ahead of the one in use), ``per_sm`` the programs per SM whose one wave the default split
    count fills at most (None: as many as fit, the compiled kernel's residency), ``maxnreg`` an
    optional register cap, ``swap_ab`` the swapped products (query heads as the MMA's N:
    :mod:`kernels.decode.rdq_swap`) instead of heads as its M, ``pdl`` the split merge as a
    programmatic dependent launch (Hopper), ``ring_scales`` (INT4, swapped) the scale words
    copied through the ring with their codes instead of loaded in the loop, ``reg_prefetch``
    (INT4, swapped, pages of at least a tile; the ring otherwise) no ring at all: each next
    tile's code and scale words loaded into registers while this one is computed
    (``num_stages`` then unused), ``bf16_partials`` (INT4) the split partials stored in bf16
    instead of fp32. One warp per program."""

    block_n: int = 32
    num_stages: int = 3
    per_sm: int | None = None
    maxnreg: int | None = None
    swap_ab: bool = False
    pdl: bool = True
    ring_scales: bool = False
    reg_prefetch: bool = False
    bf16_partials: bool = False

    def __post_init__(self) -> None:
        if self.block_n not in (16, 32, 64):
            raise ValueError(f"block_n must be 16, 32 or 64, got {self.block_n}")
        if not 2 <= self.num_stages <= 8:
            raise ValueError(f"num_stages must be in 2..8, got {self.num_stages}")
        if self.per_sm is not None and (isinstance(self.per_sm, bool) or not isinstance(self.per_sm, int)
                                        or not 1 <= self.per_sm <= 64):
            raise ValueError(f"per_sm must be None or an int in 1..64, got {self.per_sm!r}")
        if self.maxnreg is not None and not (isinstance(self.maxnreg, int) and 32 <= self.maxnreg <= 255):
            raise ValueError(f"maxnreg must be an int in 32..255 or None, got {self.maxnreg!r}")
        for flag in ("swap_ab", "pdl", "ring_scales", "reg_prefetch", "bf16_partials"):
            if not isinstance(getattr(self, flag), bool):
                raise ValueError(f"{flag} must be a bool, got {getattr(self, flag)!r}")

    @property
    def num_warps(self) -> int:
        return 1

    @property
    def name(self) -> str:
        return (f"rdq{' swap' if self.swap_ab else ''} {self.block_n}x{self.num_stages}st"
                + (f" {self.per_sm}/SM" if self.per_sm else "")
                + (f" r{self.maxnreg}" if self.maxnreg else "") + ("" if self.pdl else " nopdl")
                + (" ring-scales" if self.ring_scales else "") + (" reg-prefetch" if self.reg_prefetch else "")
                + (" bf16-partials" if self.bf16_partials else ""))


# Candidates to time on the H200 (harness variants, kernels.bench.variants): one entry per design worth
# timing again when the kernel or Triton changes. What each compiles to for sm_90 (registers,
# programs per SM) and how fast it ran are summarised in docs/kernels/DECODE.md. In short, x the bf16 kernel at the worst large shape (INT4 / FP8): the rows design
# (the first five) at best 1.64 / 1.60; the swapped design through the copy ring 2.28 / 1.77 (FP8 at
# 4 programs per SM, one wave); INT4 with its scale words in the ring 2.44; INT4 with each next
# tile's words prefetched into registers at a 128-register cap (16 programs per SM) 2.8, the
# default. Uncapped, ptxas sinks the prefetch to the end of the loop body (1.62); caps of 96-120
# registers spill (1.81-1.98). The last entry (bf16 partials) is kept to show it gains nothing.
RDQ_CONFIGS: tuple[RdqConfig, ...] = (
    RdqConfig(block_n=32, num_stages=3),
    RdqConfig(block_n=16, num_stages=4),
    RdqConfig(block_n=32, num_stages=4),
    RdqConfig(block_n=64, num_stages=2),
    RdqConfig(block_n=16, num_stages=3),
    RdqConfig(block_n=16, num_stages=4, swap_ab=True),
    RdqConfig(block_n=16, num_stages=3, swap_ab=True),
    RdqConfig(block_n=32, num_stages=3, swap_ab=True),
    RdqConfig(block_n=16, num_stages=6, swap_ab=True),
    RdqConfig(block_n=32, num_stages=3, swap_ab=True, per_sm=4),
    RdqConfig(block_n=16, num_stages=6, swap_ab=True, per_sm=4),
    RdqConfig(block_n=16, num_stages=3, swap_ab=True, ring_scales=True),
    RdqConfig(block_n=16, num_stages=4, swap_ab=True, ring_scales=True),
    RdqConfig(block_n=16, swap_ab=True, reg_prefetch=True, maxnreg=128),
    RdqConfig(block_n=16, swap_ab=True, reg_prefetch=True, maxnreg=128, bf16_partials=True),
)


def uses_register_prefetch(cfg: RdqConfig, fmt: str, block_size: int) -> bool:
    """Whether a call runs ``cfg``'s register prefetch: asked for, INT4, the swapped design and
    pages of at least a tile (a tile's words then come from one page); the ring otherwise."""
    return cfg.reg_prefetch and cfg.swap_ab and fmt == "int4" and block_size >= cfg.block_n


def rdq_shared_bytes(cfg: RdqConfig, head_dim: int, fmt: str, block_size: int) -> int:
    """Shared memory of the code ring (bytes): a K and a V tile of ``block_n`` code rows per stage
    (and with ``ring_scales``, INT4 swapped, their 4-byte scale words); none where the call
    prefetches into registers (:func:`uses_register_prefetch`)."""
    if uses_register_prefetch(cfg, fmt, block_size):
        return 0
    scales = 2 * 4 if cfg.ring_scales and cfg.swap_ab and fmt == "int4" else 0
    return 2 * cfg.num_stages * cfg.block_n * (head_dim // 2 if fmt == "int4" else head_dim) \
        + cfg.num_stages * cfg.block_n * scales

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


# Candidates to time on the H200 (scripts/tuning/h200_rdq_check.py). Compiled for sm_90 (d 128,
# block 16, GQA 4, Triton 3.6.0 and 3.7.1 within a few registers), INT4 / FP8 registers and
# programs per SM: 32x3st 176 / 167 regs, 11 / 7 programs; 16x4st 163 / 145, 12 / 10; 32x4st
# 174 / 163, 11 / 6; 64x2st 190-224 / 177-190, 9-10 / 6; no spills. FP8 at 32+ tokens is held to
# 6-7 programs by its 128-byte rows in the ring: the 16-token entries are its candidates. The
# rows design's 16x4st was timed fastest for both formats (1.64x / 1.60x the bf16 kernel).
# Swapped: 16x4st 112 / 95-98 regs, 18 / 12 programs (FP8: the ring's shared memory), 28.1 /
# 19.6 SASS per token against the rows design's 35.2 / 24.0; 16x3st 125-128 / 97-110, 16 / 15;
# 32x3st 127 / 124-126, 16 / 8; 16x6st 125-128 / 97-110, 16 / 8. Timed on the H200
# (benchmarks/NOTES-decode.md, rounds 15-16), worst large-shape x bf16: INT4 swap 16x3st 2.11-2.12
# (16x4st 1.90, 32x3st 2.03, 16x6st 1.92; register caps of 80-96 lost 3-16 %), FP8 swap 32x3st
# 1.725 twice (16x6st 1.69, 32x2st 1.68, 16x4st 1.66, 16x3st 1.65) — the defaults of
# kernels.decode.backends. With the per-tile scalar addressing and the skipped rescale (round 17):
# INT4 swap 16x3st 2.277 (16x4st 2.234, 16x6st 2.017), FP8 swap 32x3st 1.731 (16x6st 1.717).
# One wave (round 18): FP8 32x3st at 4 per SM 1.771 (full residency 1.729). INT4 scales through the
# ring (round 19): 16x3st 2.444 (16x4st 2.415, in the loop 2.297). Tile j + 1's q.k issued beside
# tile j's softmax and p.V (round 20, 152-164 registers, 12-13 programs per SM): 1.63-2.03, removed.
# Register prefetch (round 22): at a 128-register cap (16 programs per SM) 2.51, then 2.58 with the
# block-table entry read a tile earlier, 2.68 with vector output stores (the ring 2.44-2.45 in the
# same calls); uncapped (132 registers, 15 per SM) 1.62: ptxas sinks the next tile's loads to the
# end of the loop body. Unrolled by two at the cap it spills (48 bytes): not a candidate. bf16
# partials (the last entry, round 23): 2.810 against 2.802, and as called 92.4 against 92.2 us at
# batch 8 x 32K 64/8: no gain. Caps of 96-120 registers (17-21 programs per SM) spill: 1.81-1.98.
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

"""Launch configuration of the paged decode kernels: tile sizes, warps, stages and split count.

A heuristic table instead of ``@triton.autotune`` (which needs a GPU driver to run at all, so
the interpreter tests could not use it). Every entry is the fastest of the configurations timed
on the H200 at the shapes named in its docstring.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import torch

from units import cdiv

__all__ = ["DecodeConfig", "default_config", "default_num_splits", "sm_count", "MAX_SPLITS", "FP8_DTYPE",
           "FULL_MIN_TILES", "WINDOW_MIN_TILES", "WINDOW_WHOLE_TILES",
           "MERGE_MODES"]

FP8_DTYPE = torch.float8_e4m3fn
MAX_SPLITS = 128  # the merge holds [SPLITS_PAD, HEAD_DIM] fp32 in registers
# Fewest key tiles per split (default_num_splits): full attention's merge costs more than a split
# of fewer tiles saves. A window's keys are few: on the H200 at batch 1 a 1,024-token FP8 window
# (9 tiles with its ragged first one) took 14.8 us in 2 splits, 10.5 us in 4 (two tiles each) and
# 7.8 us in 9 (one each); but cutting a 128-token window (2 or 3 tiles) cost 17 % at batch 32 and
# 32 % at batch 1, so a window of at most WINDOW_WHOLE_TILES tiles stays whole.
FULL_MIN_TILES = 4
WINDOW_MIN_TILES = 1
WINDOW_WHOLE_TILES = 3
# Where split-KV partials are merged: "kernel", a second (tiny) kernel; "inline", inside the split
# kernel by the last split program of each (sequence, KV head) to finish (an atomic ticket);
# "auto", inline when called eagerly and, inside a CUDA graph, for few splits (the kernel for many;
# kernels.decode.merge.merges_inline).
MERGE_MODES = ("auto", "kernel", "inline")


@dataclass(frozen=True, kw_only=True)
class DecodeConfig:
    """Launch parameters of the split kernel (the heuristic's choice, or an explicit override).

    block_n: tokens per loop step; num_warps: warps per program; num_stages: software-pipelining
    depth (how many K/V tiles are in flight ahead of their use). merge: where split calls merge
    their partials, one of ``MERGE_MODES`` ("inline" keeps a per-device counter buffer, so two
    inline calls must not run concurrently on different streams of one device).
    """

    block_n: int = 64
    num_warps: int = 4
    num_stages: int = 3
    fp8_qk_dot: bool = False  # FP8 cache: q.k^T in e4m3 (query quantised per program) instead of fp16
    waves: int = 2  # waves of resident programs the split count aims at (see default_num_splits)
    pdl: bool = True  # launch the merge as a programmatic dependent launch (Hopper+) of the split kernel
    maxnreg: int | None = None  # register cap per thread (more programs resident per SM), or the compiler's choice
    merge: str = "auto"  # split calls: merge in a second kernel, "inline" in the last split program, or by count
    merge_splits: int | None = None  # inline merge: partials per step (a power of two), or the tile rule

    def __post_init__(self) -> None:
        if self.block_n < 16 or self.block_n & (self.block_n - 1):
            raise ValueError(f"block_n must be a power of two >= 16, got {self.block_n}")
        if self.num_warps not in (1, 2, 4, 8, 16):
            raise ValueError(f"num_warps must be 1, 2, 4, 8 or 16, got {self.num_warps}")
        if self.num_stages < 1:
            raise ValueError(f"num_stages must be >= 1, got {self.num_stages}")
        if self.waves not in (1, 2):
            raise ValueError(f"waves must be 1 or 2, got {self.waves}")
        if self.maxnreg is not None and not 24 <= self.maxnreg <= 255:
            raise ValueError(f"maxnreg must be None or in 24..255, got {self.maxnreg}")
        if self.merge not in MERGE_MODES:
            raise ValueError(f"merge must be one of {', '.join(map(repr, MERGE_MODES))}, got {self.merge!r}")
        if self.merge_splits is not None and (not 1 <= self.merge_splits <= MAX_SPLITS
                                              or self.merge_splits & (self.merge_splits - 1)):
            raise ValueError(f"merge_splits must be None or a power of two in 1..{MAX_SPLITS}, got {self.merge_splits}")


def default_config(head_dim: int, kv_dtype: torch.dtype) -> DecodeConfig:
    """Heuristic table instead of ``@triton.autotune`` (which needs a GPU driver to run at all).

    Measured on the H200: for bf16 KV at d = 128,
    64-token tiles, 4 warps, 3 stages are within 1 % of the best of 18 configurations at every
    shape with batch x context >= 128K. FP8 KV: 128-token tiles, 2 stages and the e4m3 q.k^T dot
    (1.38x the bf16 kernel against 1.09x for fp16 dots), split for one wave instead of two (FP8
    ran 1.24x bf16 at batch 8 x 32K with 5 splits against 1.12x with the bf16 rule's 8, and 1.22x
    against 1.13x at batch 1 x 128K with 34 against 66). The K and V tiles of one step are
    ``2 * block_n * head_dim * bytes`` and ``num_stages`` of them sit in shared memory (228 KiB
    per SM), so the tile shrinks for head_dim 256. At d = 64 (gpt-oss) the tile of d = 128's
    bytes, 128 tokens, reads 4.32-4.40 TB/s at batch 128-256 x 8K-32K (64/8 heads, sinks) where
    64-token tiles read 3.52-4.08, and 2.50 against 2.20 at batch 1 x 32K (3 % slower at
    batch 32 x 8K).
    """
    if head_dim >= 256:
        return DecodeConfig(block_n=32, num_warps=4, num_stages=3, waves=1)
    if kv_dtype == FP8_DTYPE:
        return DecodeConfig(block_n=128, num_warps=4, num_stages=2, fp8_qk_dot=True, waves=1)
    if head_dim <= 64:
        return DecodeConfig(block_n=128, num_warps=4, num_stages=3, waves=1)
    return DecodeConfig(block_n=64, num_warps=4, num_stages=3, waves=1)


@lru_cache(maxsize=8)
def sm_count(device_index: int) -> int:
    """Streaming multiprocessors of CUDA device ``device_index`` (cached: a driver query)."""
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def single_wave_splits(batch: int, n_kv_heads: int, max_len: int, block_n: int, sm_count: int, per_sm: int) -> int:
    """The most splits whose grid fits in one wave of ``per_sm`` programs per SM (at least 1, at
    most one per 4 tiles and ``MAX_SPLITS``).

    The rdq kernels' rule (one warp per program): on the
    H200 their fastest split count at every large shape and at batch 1 was the largest that
    stays within one wave — INT4 at its full residency (16 per SM: batch 8 x 32K 33 splits, 2.29x
    the bf16 kernel, against 2.06x at two waves), FP8 at 4 per SM, half its residency (batch 8 x
    32K 8 splits 1.76x, one full wave 1.71x, two 1.61x): its warps reach the bandwidth with fewer
    programs, and every split adds a partial to write and merge.
    """
    cap = max(1, min(cdiv(max_len, block_n) // FULL_MIN_TILES, MAX_SPLITS))
    return max(1, min(cap, per_sm * sm_count // (batch * n_kv_heads)))


def default_num_splits(
    batch: int, n_kv_heads: int, max_len: int, block_n: int, sm_count: int, waves: int = 2,
    resident: int = 2, min_tiles: int = FULL_MIN_TILES, whole_tiles: int = 0,
) -> int:
    """Parts to cut each sequence into so that the grid fills the GPU in whole waves.

    ``resident`` programs fit on an SM at once (the compiled kernel's registers and shared
    memory, :mod:`kernels.occupancy`), so ``resident * sm_count`` programs make one wave; a
    partial last wave costs up to 40 % on the H200 (132 SMs): the bf16 kernel (4 resident) at
    batch 8 x 8 KV heads x 32K ran 0.258 ms with 8 splits (512 programs, 0.97 of a wave) and
    0.370 ms with 9 (576, 1.09 waves); the FP8 kernel (3 resident) at batch 8 ran 0.199 ms with
    6 splits (384 programs, 0.97 of a wave) and 0.245 with 8 (1.29 waves). So aim for ``waves``
    whole waves (or the other of one and two, when that fills its last wave better), round the
    split count to the neighbour that wastes less of the last wave, keep at least ``min_tiles``
    tiles per split (4 for full attention, whose merge would otherwise cost more than the split
    saves; a window's few tiles are better spread one per split than left on a few SMs), leave a
    call of at most ``whole_tiles`` tiles unsplit (a short window), and do not split once ``batch * n_kv_heads`` alone fills them. Between equally full
    choices, the configured number of waves wins, then more splits for one wave and fewer for
    two: a third, nearly empty wave cost up to 40 % on the H200.
    """
    programs = batch * n_kv_heads
    slots = resident * sm_count  # programs resident at once
    if programs >= waves * slots:
        return 1
    tiles = cdiv(max_len, block_n)
    cap = 1 if tiles <= whole_tiles else max(1, min(tiles // min_tiles, MAX_SPLITS))

    def candidates(w: int) -> set[int]:
        ideal = w * slots / programs
        return {min(cap, max(1, math.floor(ideal))), min(cap, max(1, math.ceil(ideal)))}

    def wave_efficiency(splits: int) -> float:
        total = programs * splits
        return total / (cdiv(total, slots) * slots)

    preferred = candidates(waves)
    toward = 1 if waves == 1 else -1  # on a tie: more splits for one wave, fewer for two
    return max(preferred | candidates(3 - waves),
               key=lambda s: (round(wave_efficiency(s), 2), s in preferred, toward * s))

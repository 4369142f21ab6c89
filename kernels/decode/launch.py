"""Host-side plumbing shared by the paged decode wrappers, kept off the per-call path.

An eager decode call at batch 1 does ~50 us of GPU work; the first wrapper spent ~90 us of CPU
per call on checks, scale tensors and allocations, more than the kernels' GPU time. What depends only
on a call's shapes, dtypes, strides and device is therefore worked out once per signature and
cached: shape checks (:func:`checked_once`), the split plan (:func:`split_plan`) and unit FP8
scales.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import torch

from kernels.decode.checks import check_scale
from kernels.decode.config import (
    FP8_DTYPE, FULL_MIN_TILES, MAX_SPLITS, default_num_splits, single_wave_splits, sm_count,
)
from kernels.occupancy import resident_programs
from kernels.runtime import interpreter_active

__all__ = ["SplitPlan", "SplitKernelArgs", "signature", "checked_once", "split_plan", "split_buffers", "fp8_scales",
           "check_call_options", "capturing", "interpreted", "resident_per_sm", "planned_split", "DEFAULT_RESIDENT",
           "merge_counters", "MIN_MERGE_COUNTERS"]

# Signatures whose shape and stride checks passed (bounded: cleared when full).
_CHECKED: set[tuple] = set()
_MAX_CHECKED = 256


def signature(*tensors: object) -> tuple | None:
    """``(dtype, device, shape, strides, address mod 16)`` of each tensor; None when one is not a
    tensor. The address's place on the 16-byte grid is in because checks depend on it (the rdq
    kernel takes only pools on it), as Triton's own compile key does."""
    try:
        return tuple((t.dtype, t.device, tuple(t.shape), t.stride(), t.data_ptr() % 16) for t in tensors)
    except (AttributeError, TypeError):
        return None


def checked_once(key: tuple | None, check: Callable[[], None]) -> None:
    """Run ``check`` (which raises ValueError) unless a call with signature ``key`` passed it."""
    if key is not None and key in _CHECKED:
        return
    check()
    if key is not None:
        if len(_CHECKED) >= _MAX_CHECKED:
            _CHECKED.clear()
        _CHECKED.add(key)


def capturing(device: torch.device) -> bool:
    """True while the current CUDA stream is capturing a graph (a call then plans for replays,
    where launches cost no host time)."""
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def interpreted(device: torch.device) -> bool:
    """True when the kernels run under the Triton interpreter (dots in fp32 there)."""
    return interpreter_active() or device.type != "cuda"


@dataclass(frozen=True, kw_only=True)
class SplitPlan:
    """How one call cuts its sequences: grid ``(n_kv_heads, batch, num_splits)``."""

    grid: tuple[int, int, int]
    num_splits: int

    @property
    def split(self) -> bool:
        return self.num_splits > 1


@dataclass(frozen=True, kw_only=True, slots=True)
class SplitKernelArgs:
    """A split-KV decode kernel's runtime arguments by name; :meth:`values` lays them out in the
    order of the kernel's parameters for the launcher (every decode kernel here takes its inputs,
    then the outputs, then the scale and split count, then every stride).

    ``inputs``: query, pools (and their scales), block table, lengths, as the kernel lists them.
    ``part_out`` ``[batch, n_q_heads, num_splits, head_dim]`` and ``part_lse`` ``[batch,
    n_q_heads, num_splits]`` are the split partials (``out`` itself for an unsplit call);
    ``counters`` the inline merge's tickets (``None`` for a kernel without an inline merge);
    ``qk_scale`` is ``sm_scale * log2(e)``; ``strides`` every stride argument, the partials' last.
    """

    inputs: tuple
    out: torch.Tensor
    part_out: torch.Tensor
    part_lse: torch.Tensor
    counters: torch.Tensor | None
    qk_scale: float
    num_splits: int
    strides: tuple[int, ...]

    def values(self) -> tuple:
        tickets = () if self.counters is None else (self.counters,)
        return (*self.inputs, self.out, self.part_out, self.part_lse, *tickets, self.qk_scale, self.num_splits,
                *self.strides)


@lru_cache(maxsize=256)
def split_plan(batch: int, n_kv_heads: int, max_len: int, device: torch.device, num_splits: int | None,
               block_n: int, waves: int = 2, resident: int = 2, single_wave: bool = False,
               min_tiles: int = FULL_MIN_TILES, whole_tiles: int = 0) -> SplitPlan:
    """The split count (unless given: ``default_num_splits``' whole waves of ``resident``
    programs per SM, or with ``single_wave`` the most that fit in one, ``single_wave_splits``)
    and grid for a call."""
    if num_splits is None:
        sms = sm_count(device.index or 0) if device.type == "cuda" else 4
        num_splits = (single_wave_splits(batch, n_kv_heads, max_len, block_n, sms, resident) if single_wave
                      else default_num_splits(batch, n_kv_heads, max_len, block_n, sms, waves, resident, min_tiles,
                                         whole_tiles))
    return SplitPlan(grid=(n_kv_heads, batch, num_splits), num_splits=num_splits)


# Programs resident per SM of each compiled split kernel, by call signature and config.
_RESIDENT: dict[tuple, int] = {}
DEFAULT_RESIDENT = 2  # assumed where nothing is compiled (the interpreter)


def planned_split(cache_key: tuple, batch: int, n_kv_heads: int, max_len: int, device: torch.device,
                  num_splits: int | None, block_n: int, waves: int,
                  compile_split: Callable[[SplitPlan], object], *, single_wave_per_sm: int | None = None,
                  single_wave: bool = False, min_tiles: int = FULL_MIN_TILES,
                  whole_tiles: int = 0) -> tuple[SplitPlan, int]:
    """A call's split plan and the resident programs per SM it assumed.

    Without an explicit ``num_splits`` on a GPU, the split kernel is compiled once per
    ``cache_key`` (``compile_split(trial_plan)``, which must compile without launching) and the
    plan fills whole waves of its residency (``single_wave``: at most one wave, of at most
    ``single_wave_per_sm`` programs per SM when given); otherwise ``DEFAULT_RESIDENT`` is assumed.
    ``min_tiles``, ``whole_tiles``: the fewest ``block_n`` tiles a split may hold, and the most a
    call may hold and stay unsplit (``default_num_splits``).
    """
    resident = DEFAULT_RESIDENT
    if num_splits is None and not interpreted(device):
        trial = SplitPlan(grid=(n_kv_heads, batch, 2), num_splits=2)
        resident = resident_per_sm(cache_key, lambda: compile_split(trial))
    per_sm = min(resident, single_wave_per_sm) if single_wave and single_wave_per_sm else resident
    return (split_plan(batch, n_kv_heads, max_len, device, num_splits, block_n, waves, per_sm, single_wave,
                       min_tiles, whole_tiles), resident)


def resident_per_sm(cache_key: tuple, compile_kernel: Callable[[], object]) -> int:
    """Programs per SM of the kernel that ``compile_kernel()`` compiles (``JITFunction.warmup``:
    compiled, not launched), from its registers and shared memory; cached under ``cache_key``."""
    n = _RESIDENT.get(cache_key)
    if n is None:
        compiled = compile_kernel()
        compiled._init_handles()  # loads the binary: the register count is known from here
        n = resident_programs(registers_per_thread=compiled.n_regs, shared_bytes=compiled.metadata.shared,
                              num_warps=compiled.metadata.num_warps)
        if len(_RESIDENT) >= _MAX_CHECKED:
            _RESIDENT.clear()
        _RESIDENT[cache_key] = n
    return n


def check_call_options(sm_scale, num_splits, head_dim: int) -> float:
    """``sm_scale`` (default ``1 / sqrt(head_dim)``) after checking it and ``num_splits``."""
    if num_splits is not None and (isinstance(num_splits, bool) or not isinstance(num_splits, int)
                                   or not 1 <= num_splits <= MAX_SPLITS):
        raise ValueError(f"num_splits must be an int in 1..{MAX_SPLITS}, got {num_splits!r}")
    if sm_scale is None:
        return 1.0 / math.sqrt(head_dim)
    if isinstance(sm_scale, bool) or not isinstance(sm_scale, (int, float)) or not math.isfinite(sm_scale) \
            or sm_scale <= 0:
        raise ValueError(f"sm_scale must be a finite positive number, got {sm_scale!r}")
    return float(sm_scale)


def split_buffers(plan: SplitPlan, q: torch.Tensor, out: torch.Tensor, dtype: torch.dtype = torch.float32) -> tuple:
    """``(part_out, part_lse, their five strides)`` for a split call; for an unsplit one, ``out``
    twice and zero strides (the kernel's SPLIT branch never touches them).

    ``part_out`` is ``[batch, n_q_heads, num_splits, head_dim]`` of ``dtype`` (fp32; bf16 where a
    kernel's own error is far larger than its rounding), ``part_lse`` ``[batch, n_q_heads,
    num_splits]`` fp32.
    """
    if not plan.split:
        return out, out, (0, 0, 0, 0, 0)
    batch, n_q_heads, head_dim = q.shape
    part_out = torch.empty(batch, n_q_heads, plan.num_splits, head_dim, dtype=dtype, device=q.device)
    part_lse = torch.empty(batch, n_q_heads, plan.num_splits, dtype=torch.float32, device=q.device)
    return part_out, part_lse, (part_out.stride(0), part_out.stride(1), part_out.stride(2),
                                part_lse.stride(0), part_lse.stride(1))


# Per device: the inline merge's ticket counters, every buffer ever handed out (the newest last).
_COUNTERS: dict[torch.device, list[torch.Tensor]] = {}
MIN_MERGE_COUNTERS = 1 << 14  # batch 2,048 x 8 KV heads in 64 KiB: growth stays rare


def merge_counters(device: torch.device, count: int) -> torch.Tensor:
    """A zeroed int32 buffer of at least ``count`` ticket counters (one per (sequence, KV head))
    for the inline split-KV merge, cached per device: no allocation on the per-call path.

    The last split program of each (sequence, KV head) resets its counter to 0, so the buffer is
    all zeros between calls and across CUDA-graph replays. As with FlashInfer's and vLLM's
    workspaces, one buffer serves every call on the device: two inline-merge calls must not run
    concurrently on different streams. A larger need allocates a new buffer (outside graph
    capture only: a captured graph holds the address it saw), and the old ones stay alive for
    graphs that hold them.
    """
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())  # one key per GPU
    buffers = _COUNTERS.setdefault(device, [])
    if buffers and buffers[-1].numel() >= count:
        return buffers[-1]
    if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        raise ValueError(f"the inline merge needs {count} counters but holds "
                         f"{buffers[-1].numel() if buffers else 0} on {device}; run this call once "
                         "before capturing it in a CUDA graph")
    counters = torch.zeros(max(MIN_MERGE_COUNTERS, 1 << (count - 1).bit_length()), dtype=torch.int32, device=device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # zeroed before a call on any stream reads it
    buffers.append(counters)
    return counters


@lru_cache(maxsize=8)
def _unit_scales(device: torch.device, n_kv_heads: int) -> torch.Tensor:
    return torch.ones(n_kv_heads, dtype=torch.float32, device=device)


def fp8_scales(name: str, scale, kv_dtype: torch.dtype, n_kv_heads: int, device: torch.device):
    """A ``[n_kv_heads]`` fp32 scale tensor (None for non-FP8 caches without one).

    The common cases (no scale; already a per-head fp32 tensor) allocate nothing.
    """
    if kv_dtype != FP8_DTYPE and scale is None:
        return None
    if scale is None:
        return _unit_scales(device, n_kv_heads)
    if (kv_dtype == FP8_DTYPE and isinstance(scale, torch.Tensor) and scale.dtype == torch.float32
            and scale.dim() == 1 and scale.shape[0] == n_kv_heads and scale.stride(0) == 1
            and scale.device == device):
        return scale
    return check_scale(name, scale, kv_dtype, n_kv_heads, device)

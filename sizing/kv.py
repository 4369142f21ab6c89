"""KV-cache and memory arithmetic: bytes per token, per user, in total; weights; usable memory;
the reference page's GPU count; KV capacity of a budget in whole blocks.

Byte counts are exact :class:`~fractions.Fraction` s inside (quantisation scales make bytes per
value fractional) and are rounded up to whole bytes only where a result is reported. The
single rounding helper for counts is :func:`units.cdiv`.

per-token bytes = 2 × layers × KV heads × head dim × bytes per value   (MLA: layers × latent × bytes)

Only attention layers count in ``layers``; Mamba and linear-attention layers add a constant state
per sequence instead (state values × the state's own dtype bytes: vLLM keeps it in the model
dtype, not in the KV-cache dtype).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property

from hardware.gpus import GPU
from sizing.errors import SizingError
from sizing.models import ModelShape, check_int
from sizing.precisions import Precision
from units import cdiv

DEFAULT_USABLE_FRACTION = 0.9  # the reference page's planning assumption: 90 % of HBM for weights + KV
DEFAULT_BLOCK_SIZE = 16  # vLLM's default tokens per KV block
MAX_BLOCK_SIZE = 1 << 20  # tokens per block accepted: far beyond any engine's, rejects typos


def exact(value: float | int | Fraction, field: str = "value") -> Fraction:
    """A float as the exact decimal it was written as (0.9 → 9/10), so that ceilings are exact."""
    if isinstance(value, Fraction):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SizingError(field, f"must be a finite number, got {value!r}")
    return Fraction(repr(value)) if isinstance(value, float) else Fraction(value)


@dataclass(frozen=True, kw_only=True)
class KVCacheSpec:
    """How one model's KV cache is stored: shape, precision, tensor parallelism, block size.

    Properties give bytes for the whole model (all TP ranks' distinct heads) and per GPU.
    """

    model: ModelShape
    precision: Precision
    tp: int = 1
    block_size: int = DEFAULT_BLOCK_SIZE

    def __post_init__(self) -> None:
        self.model.check_tp(self.tp)
        check_int("block_size", self.block_size, high=MAX_BLOCK_SIZE)

    @property
    def values_per_token(self) -> int:
        """KV values per token, all layers (within any sliding window)."""
        return self.model.values_per_token

    @cached_property
    def bytes_per_token(self) -> Fraction:
        """Bytes per token for the whole model: values × bytes per value."""
        return self.values_per_token * self.precision.bytes_per_value

    @cached_property
    def bytes_per_token_per_gpu(self) -> Fraction:
        """Bytes per token on one TP rank (n_kv / TP heads, or one replicated head)."""
        return self.model.n_kv_layers * self.model.values_per_layer_per_token_per_gpu(self.tp) * self.precision.bytes_per_value

    @cached_property
    def state_bytes_per_sequence(self) -> int:
        """Recurrent-state bytes of one sequence, whole model (0 without Mamba / linear layers)."""
        return self.model.state_bytes_per_sequence

    @cached_property
    def state_bytes_per_sequence_per_gpu(self) -> int:
        """Recurrent-state bytes of one sequence on one TP rank (heads split over the ranks)."""
        return self.model.state_bytes_per_sequence_per_gpu(self.tp)

    @property
    def bytes_per_token_all_gpus(self) -> Fraction:
        """Per-GPU bytes × TP: equals :attr:`bytes_per_token` until heads are replicated, then grows."""
        return self.bytes_per_token_per_gpu * self.tp

    def sequence_bytes(self, tokens: int) -> Fraction:
        """Bytes of one sequence of ``tokens`` tokens, whole model (windows capped, state included)."""
        return self.model.values_for_tokens(tokens) * self.precision.bytes_per_value + self.state_bytes_per_sequence

    def sequence_bytes_per_gpu(self, tokens: int) -> Fraction:
        return (self.model.values_for_tokens_per_gpu(tokens, self.tp) * self.precision.bytes_per_value
                + self.state_bytes_per_sequence_per_gpu)

    def sequence_bytes_all_gpus(self, tokens: int) -> Fraction:
        """One sequence over all TP ranks, replicated heads included."""
        return self.sequence_bytes_per_gpu(tokens) * self.tp

    def total_bytes(self, tokens: int, users: int) -> Fraction:
        """All ``users`` sequences at ``tokens`` tokens, whole model."""
        return users * self.sequence_bytes(tokens)

    @property
    def block_bytes(self) -> Fraction:
        """One block of ``block_size`` tokens, whole model (vLLM's page size × TP)."""
        return self.block_size * self.bytes_per_token

    @property
    def block_bytes_per_gpu(self) -> Fraction:
        return self.block_size * self.bytes_per_token_per_gpu


def weights_bytes(params: int, precision: Precision) -> int:
    """Weight bytes: parameters × bytes per weight (scales included), rounded up."""
    return math.ceil(params * precision.bytes_per_value)


def usable_bytes(gpu: GPU, usable_fraction: float | Fraction = DEFAULT_USABLE_FRACTION) -> Fraction:
    """Memory of one GPU available for weights + KV: vendor bytes × fraction (80 GB × 0.9 = 72 GB)."""
    fraction = exact(usable_fraction, "usable_fraction")
    if not 0 < fraction <= 1:
        raise SizingError("usable_fraction", f"must be in (0, 1], got {float(fraction):g}")
    return gpu.memory_bytes * fraction


@dataclass(frozen=True, kw_only=True)
class GpuCount:
    """The reference page's count: total bytes ÷ usable bytes per GPU, and that rounded up."""

    ratio: float  # unrounded, e.g. 15.88
    count: int  # ceil(ratio), at least 1

    @property
    def label(self) -> str:
        """``"15.9 → 16"``, as the reference table writes it."""
        return f"{self.ratio:,.1f} → {self.count:,}"


def gpus_needed(total_bytes: int | Fraction, usable_per_gpu: int | Fraction) -> GpuCount:
    """GPUs to hold ``total_bytes`` when each offers ``usable_per_gpu`` (pooled, as the reference counts)."""
    ratio = Fraction(total_bytes) / Fraction(usable_per_gpu)
    return GpuCount(ratio=float(ratio), count=max(1, math.ceil(ratio)))


@dataclass(frozen=True, kw_only=True)
class KvCapacity:
    """What a KV budget holds, rounded to whole blocks as vLLM does: floor(budget / block bytes).

    A model with no per-token KV (state only) has no blocks; ``max_concurrency`` is then the
    sequence states the budget holds, at any context."""

    budget_bytes: int
    block_bytes: Fraction  # whole model, replicated heads included
    blocks: int
    tokens: int  # blocks × block size
    block_size: int
    context: int
    max_concurrency: float  # tokens ÷ context (vLLM's "maximum concurrency" for that context)

    @property
    def whole_requests(self) -> int:
        """Requests of ``context`` tokens that fit, each taking whole blocks."""
        return self.blocks // cdiv(self.context, self.block_size)


def kv_capacity(spec: KVCacheSpec, budget_bytes: int | Fraction, context: int) -> KvCapacity:
    """Tokens and blocks a KV budget (bytes, over all TP ranks) holds; negative budgets hold none.

    Each rank gets budget / TP and fits floor(that / per-GPU block bytes) blocks, which is
    floor(budget / (per-GPU block bytes × TP)).
    """
    check_int("context", context, high=1 << 40)
    block = spec.block_bytes_per_gpu * spec.tp
    if not block:
        # No layer caches per-token KV (a state-only model): no blocks; what the budget holds is
        # sequence states, whatever their length.
        states = max_users(spec, budget_bytes, context)
        return KvCapacity(budget_bytes=math.floor(budget_bytes), block_bytes=block, blocks=0, tokens=0,
                          block_size=spec.block_size, context=context, max_concurrency=float(states))
    blocks = max(0, math.floor(Fraction(budget_bytes) / block))
    tokens = blocks * spec.block_size
    return KvCapacity(
        budget_bytes=math.floor(budget_bytes), block_bytes=block, blocks=blocks, tokens=tokens,
        block_size=spec.block_size,
        context=context, max_concurrency=tokens / context,
    )


def max_users(spec: KVCacheSpec, budget_bytes: int | Fraction, context: int) -> int:
    """Most sequences of ``context`` tokens whose KV fits in ``budget_bytes`` (all TP ranks)."""
    per_user = spec.sequence_bytes_all_gpus(context)
    return max(0, math.floor(Fraction(budget_bytes) / per_user)) if per_user else 0


def max_context(spec: KVCacheSpec, budget_bytes: int | Fraction, users: int, limit: int = 1 << 40) -> int | None:
    """Longest context for ``users`` sequences within ``budget_bytes``, at most ``limit`` tokens.

    None means unbounded: every layer slides (or none caches per-token KV), so a sequence's
    memory stops growing and that fits.
    """
    check_int("users", users)
    budget = Fraction(budget_bytes)
    model = spec.model
    window = model.longest_window
    if window is not None and users * spec.sequence_bytes_all_gpus(window) <= budget:
        return None
    if not model.n_kv_layers and users * spec.sequence_bytes_all_gpus(1) <= budget:
        return None  # state only: a sequence's memory does not grow with its length
    # 0 when not one token fits (a recurrent state alone can exceed the budget).
    return largest_fitting(lambda tokens: users * spec.sequence_bytes_all_gpus(tokens) <= budget, limit)


def largest_fitting(fits: Callable[[int], bool], limit: int) -> int:
    """The largest ``n`` in ``1..limit`` with ``fits(n)``, for a ``fits`` true up to some point and
    false beyond it (memory grows with length); 0 when ``fits(1)`` is false. Bisection:
    ``O(log limit)`` calls."""
    if fits(limit):
        return limit
    if not fits(1):
        return 0
    low, high = 1, limit  # invariant: low fits, high does not
    while high - low > 1:
        mid = (low + high) // 2
        if fits(mid):
            low = mid
        else:
            high = mid
    return low


@dataclass(frozen=True, kw_only=True)
class LayerKindRow:
    """One group of layers (one kind, one window) in bytes: the sizer's per-kind table.

    ``*_per_gpu`` at the report's TP; whole-model figures at TP 1. State rows have no per-token
    bytes; attention rows no state."""

    kind: str
    count: int
    window: int | None
    bytes_per_token: Fraction  # all layers of the group, whole model
    bytes_per_token_per_gpu: Fraction
    state_bytes_per_sequence: int  # all layers of the group, whole model
    state_bytes_per_sequence_per_gpu: int
    bytes_at_context: Fraction  # one sequence of ``context`` tokens, whole model (windows capped)
    bytes_at_context_per_gpu: Fraction

    def as_record(self) -> dict[str, object]:
        """JSON-ready: bytes rounded up to whole bytes."""
        return {
            "kind": self.kind, "count": self.count, "window": self.window,
            "bytes_per_token": math.ceil(self.bytes_per_token),
            "bytes_per_token_per_gpu": math.ceil(self.bytes_per_token_per_gpu),
            "state_bytes_per_sequence": self.state_bytes_per_sequence,
            "state_bytes_per_sequence_per_gpu": self.state_bytes_per_sequence_per_gpu,
            "bytes_at_context": math.ceil(self.bytes_at_context),
            "bytes_at_context_per_gpu": math.ceil(self.bytes_at_context_per_gpu),
        }


def layer_kind_rows(model: ModelShape, precision: Precision, *, tp: int, context: int) -> tuple[LayerKindRow, ...]:
    """Bytes of each layer group: KV values × bytes per value (scales included), state values
    in their tensors' dtypes, at TP 1 and at ``tp``."""
    rows = []
    for whole, local in zip(model.layer_groups(1), model.layer_groups(tp), strict=True):
        per_value = precision.bytes_per_value
        state, state_gpu = whole.state_bytes, local.state_bytes
        rows.append(LayerKindRow(
            kind=str(whole.kind), count=whole.count, window=whole.window,
            bytes_per_token=whole.count * whole.kv_values_per_token * per_value,
            bytes_per_token_per_gpu=local.count * local.kv_values_per_token * per_value,
            state_bytes_per_sequence=state, state_bytes_per_sequence_per_gpu=state_gpu,
            bytes_at_context=whole.kv_values(context) * per_value + state,
            bytes_at_context_per_gpu=local.kv_values(context) * per_value + state_gpu,
        ))
    return tuple(rows)

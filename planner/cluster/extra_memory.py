"""Memory beyond the KV cache: LoRA adapter slots and the multimodal encoder cache (both taken out
of each GPU's KV budget), and the host memory of CPU offload tiers.

**LoRA** (vLLM ``--enable-lora``). At start-up every LoRA-wrapped linear layer preallocates
``--max-loras`` GPU slots at ``--max-lora-rank``, zero-filled, whatever rank the adapters really
have (``vllm/lora/layers/base_linear.py``, ``create_lora_weights``; ``LoRAModelManager.lora_slots
= max_loras``). Per slot and packed slice (q, k, v of ``qkv_proj``; gate, up of ``gate_up_proj``)::

    lora_a = max_rank × input features on this rank     lora_b = output features on this rank × max_rank

Column-parallel layers (``qkv_proj``, ``gate_up_proj``) keep the whole input and shard the output;
row-parallel ones (``o_proj``, ``down_proj``) shard the input and keep the whole output
(``row_parallel_linear.py``: ``input_size = input_size_per_partition``). KV-head slices are
replicated once TP exceeds the KV heads, as ``QKVParallelLinear`` does. The memory profile counts
these slots, so they come out of the KV budget. ``--max-cpu-loras`` adapters wait in host memory
(``LoRAModelManager.capacity``), each at its own rank and unsliced: every TP worker loads the
whole adapter and slices it when it moves into a GPU slot.

**Encoder cache** (multimodal models). vLLM keeps encoder outputs for ``encoder_cache_size``
embedding tokens: by default ``max_num_batched_encoder_embeds`` (itself defaulting to
``max_num_batched_tokens``), never less than the largest item (``vllm/v1/core/encoder_cache_manager.py``,
``compute_mm_encoder_budget``). Each entry is a language-model input embedding (hidden size, model
dtype), held whole on every TP rank; the profile run fills the cache, so it is taken from the KV budget.

**CPU offload tiers.** LMCache in vLLM's worker processes builds one allocator per TP rank, each of
``max_local_cpu_size`` "GB" — binary, × 1024**3 in LMCache — so TP 8 × 512 GB asks the host for
4 TiB; with MLA and ``save_only_first_rank`` only the first rank allocates. vLLM's native offloading
(``--kv-offloading-size``, GiB) is a total that the ranks share. A pinned buffer made through
PyTorch (``torch.empty(..., pin_memory=True)``, as LMCache's ``MixedMemoryAllocator`` did in
``lmcache/v1/memory_management.py``) goes through the caching host allocator, which rounds every
allocation up to a power of two (``aten/src/ATen/core/CachingHostAllocator.h``:
``PowerOf2Ceil(size)``); a buffer pinned directly (``cudaHostAlloc`` / ``cudaHostRegister``, as
later LMCache's ``alloc_pinned_ptr``) takes exactly its size.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction

from inputs.errors import InputError
from sizing.engine.pipeline import MAX_PP
from sizing.models import MAX_HEAD_DIM, MAX_HEADS, MAX_LAYERS, MAX_TOKENS, MAX_TP_RANKS, check_int
from units import GiB

MAX_FEATURES = 1 << 24  # widest linear layer input/output: far beyond any published model
MAX_LORA_RANK = 1 << 12
MAX_LORAS = 1 << 12
MAX_HOST_BYTES = 1 << 56  # 64 PiB of host memory: rejects unit mistakes (bytes typed as GB)


class Parallel(StrEnum):
    """How tensor parallelism splits a linear layer (vLLM's linear layer classes)."""

    COLUMN = "column"  # output split: qkv_proj, gate_up_proj
    ROW = "row"  # input split: o_proj, down_proj
    REPLICATED = "replicated"  # whole on every rank


@dataclass(frozen=True, kw_only=True)
class LoraSlice:
    """One packed output slice of a LoRA target (q, k or v of ``qkv_proj``).

    ``size`` is its output features over all ranks; ``heads`` > 0 when it is made of attention
    heads, which TP splits whole and replicates once TP exceeds them.
    """

    size: int
    heads: int = 0

    def __post_init__(self) -> None:
        check_int("output_size", self.size, high=MAX_FEATURES)
        check_int("heads", self.heads, low=0, high=MAX_HEADS)
        if self.heads and self.size % self.heads:
            raise InputError("heads", f"{self.size:,} output features do not split into {self.heads} heads")

    def per_rank(self, tp: int) -> int:
        """Output features of this slice on one rank at TP ``tp``."""
        if self.heads:
            return max(self.heads // tp, 1) * (self.size // self.heads)
        if self.size % tp:
            raise InputError("tp", f"TP {tp} does not split {self.size:,} output features evenly")
        return self.size // tp


@dataclass(frozen=True, kw_only=True)
class LoraTarget:
    """One LoRA-wrapped linear module of a decoder layer (input features over all ranks)."""

    name: str
    input_size: int
    slices: tuple[LoraSlice, ...]
    parallel: Parallel = Parallel.COLUMN

    def __post_init__(self) -> None:
        check_int("input_size", self.input_size, high=MAX_FEATURES)
        object.__setattr__(self, "parallel", Parallel(self.parallel))
        if not self.slices:
            raise InputError("slices", f"{self.name} needs at least one output slice")
        if self.parallel is not Parallel.COLUMN and len(self.slices) != 1:
            raise InputError("slices", f"a {self.parallel} layer has one output slice, "
                                       f"{self.name} has {len(self.slices)}")

    def values_per_slot(self, rank: int, tp: int) -> int:
        """LoRA A and B values of one slot of this module on one rank, all its slices."""
        if self.parallel is Parallel.ROW:
            if self.input_size % tp:
                raise InputError("tp", f"TP {tp} does not split {self.name}'s {self.input_size:,} inputs evenly")
            return rank * self.input_size // tp + self.slices[0].size * rank
        if self.parallel is Parallel.REPLICATED:
            return rank * self.input_size + self.slices[0].size * rank
        return sum(rank * self.input_size + piece.per_rank(tp) * rank for piece in self.slices)


def dense_lora_targets(*, hidden_size: int, q_heads: int, kv_heads: int, head_dim: int,
                       intermediate_size: int) -> tuple[LoraTarget, ...]:
    """A Llama-style decoder layer's default LoRA targets: ``qkv_proj``, ``o_proj``, ``gate_up_proj``
    and ``down_proj`` (vLLM's ``packed_modules_mapping`` for Llama, Qwen, Mistral …)."""
    check_int("hidden_size", hidden_size, high=MAX_FEATURES)
    check_int("q_heads", q_heads, high=MAX_HEADS)
    check_int("kv_heads", kv_heads, high=MAX_HEADS)
    check_int("head_dim", head_dim, high=MAX_HEAD_DIM)
    check_int("intermediate_size", intermediate_size, high=MAX_FEATURES)
    q, kv = q_heads * head_dim, kv_heads * head_dim
    return (
        LoraTarget(name="qkv_proj", input_size=hidden_size,
                   slices=(LoraSlice(size=q, heads=q_heads), LoraSlice(size=kv, heads=kv_heads),
                           LoraSlice(size=kv, heads=kv_heads))),
        LoraTarget(name="o_proj", input_size=q, slices=(LoraSlice(size=hidden_size),), parallel=Parallel.ROW),
        LoraTarget(name="gate_up_proj", input_size=hidden_size,
                   slices=(LoraSlice(size=intermediate_size), LoraSlice(size=intermediate_size))),
        LoraTarget(name="down_proj", input_size=intermediate_size, slices=(LoraSlice(size=hidden_size),),
                   parallel=Parallel.ROW),
    )


def _dtype_bytes(value: object, field: str) -> int:
    if isinstance(value, bool) or value not in (1, 2, 4):
        raise InputError(field, f"bytes per value must be 1, 2 or 4, got {value!r:.40}")
    return value


def lora_slot_bytes(targets: Sequence[LoraTarget], *, layers: int, rank: int, tp: int = 1,
                    dtype_bytes: int = 2) -> int:
    """Bytes of one LoRA slot on one GPU: all layers' targets at ``rank``. At TP 1 and an adapter's
    own rank this is also the adapter's size (every slice has its own A and B)."""
    check_int("layers", layers, high=MAX_LAYERS)
    check_int("max_lora_rank", rank, high=MAX_LORA_RANK)
    check_int("tp", tp, high=MAX_TP_RANKS)
    values = sum(target.values_per_slot(rank, tp) for target in targets)
    return layers * values * _dtype_bytes(dtype_bytes, "lora_dtype")


@dataclass(frozen=True, kw_only=True)
class LoraMemory:
    """LoRA memory per TP rank, bytes: preallocated GPU slots and the host adapter cache."""

    slot_bytes: int  # one GPU slot at max rank
    gpu_bytes: int  # max_loras slots: taken from the KV budget
    adapter_bytes: int  # one adapter at its own rank, unsliced
    host_bytes: int  # max_cpu_loras adapters in host memory


def lora_memory(targets: Sequence[LoraTarget], *, layers: int, max_loras: int, max_lora_rank: int,
                tp: int = 1, max_cpu_loras: int | None = None, adapter_rank: int | None = None,
                dtype_bytes: int = 2) -> LoraMemory:
    """GPU and host bytes of vLLM's LoRA slots on one rank. ``max_cpu_loras`` defaults to
    ``max_loras`` (vLLM's default) and may not be smaller; ``adapter_rank`` (default: the max rank)
    sizes the adapters waiting in host memory."""
    check_int("max_loras", max_loras, high=MAX_LORAS)
    check_int("max_lora_rank", max_lora_rank, high=MAX_LORA_RANK)
    cpu = max_loras if max_cpu_loras is None else check_int("max_cpu_loras", max_cpu_loras, high=MAX_LORAS)
    if cpu < max_loras:
        raise InputError("max_cpu_loras", f"must be at least max_loras ({max_loras}), got {cpu}")
    own = max_lora_rank if adapter_rank is None else check_int("adapter_rank", adapter_rank, high=max_lora_rank)
    slot = lora_slot_bytes(targets, layers=layers, rank=max_lora_rank, tp=tp, dtype_bytes=dtype_bytes)
    adapter = lora_slot_bytes(targets, layers=layers, rank=own, tp=1, dtype_bytes=dtype_bytes)
    return LoraMemory(slot_bytes=slot, gpu_bytes=max_loras * slot, adapter_bytes=adapter, host_bytes=cpu * adapter)


def encoder_cache_tokens(*, max_num_batched_tokens: int, max_tokens_per_mm_item: int,
                         encoder_cache_size: int | None = None,
                         max_num_batched_encoder_embeds: int | None = None) -> int:
    """The encoder cache budget in embedding tokens, as ``compute_mm_encoder_budget`` sets it."""
    batched = check_int("max_num_batched_tokens", max_num_batched_tokens, high=MAX_TOKENS)
    item = check_int("max_tokens_per_mm_item", max_tokens_per_mm_item, high=MAX_TOKENS)
    if max_num_batched_encoder_embeds is not None:
        batched = check_int("max_num_batched_encoder_embeds", max_num_batched_encoder_embeds, high=MAX_TOKENS)
    size = batched if encoder_cache_size is None else check_int("encoder_cache_size", encoder_cache_size,
                                                               high=MAX_TOKENS)
    return max(size, item)


def encoder_cache_bytes(tokens: int, *, hidden_size: int, dtype_bytes: int = 2) -> int:
    """Bytes of an encoder cache of ``tokens`` embeddings on one GPU (whole on every TP rank)."""
    check_int("encoder_cache_tokens", tokens, low=0, high=MAX_TOKENS)
    check_int("hidden_size", hidden_size, high=MAX_FEATURES)
    return tokens * hidden_size * _dtype_bytes(dtype_bytes, "dtype_bytes")


class PinnedAllocator(StrEnum):
    """How a pinned host buffer is obtained."""

    TORCH = "torch"  # torch.empty(pin_memory=True): the caching host allocator, rounded to a power of two
    DIRECT = "direct"  # cudaHostAlloc / cudaHostRegister of exactly the size asked


def pow2_ceil(n: int) -> int:
    """The smallest power of two ≥ ``n`` (0 for 0), as ``c10::llvm::PowerOf2Ceil``."""
    check_int("bytes", n, low=0, high=MAX_HOST_BYTES)
    return 0 if n == 0 else 1 << (n - 1).bit_length()


@dataclass(frozen=True, kw_only=True)
class OffloadTier:
    """A CPU offload tier's host memory, bytes.

    ``requested_per_rank`` is what each allocating rank asks for, ``allocated_per_rank`` what it
    gets pinned (rounded up by the PyTorch allocator), ``allocating_ranks`` how many ranks of the
    TP group allocate; ``host_bytes`` = allocated per rank × allocating ranks.
    """

    requested_per_rank: int
    allocated_per_rank: int
    allocating_ranks: int
    allocator: PinnedAllocator

    @property
    def host_bytes(self) -> int:
        return self.allocated_per_rank * self.allocating_ranks


def _tier(per_rank: int, ranks: int, allocator: PinnedAllocator | str, field: str) -> OffloadTier:
    try:
        allocator = PinnedAllocator(allocator)
    except ValueError:
        raise InputError("pinned_allocator",
                         f"must be one of {', '.join(PinnedAllocator)}, got {allocator!r:.40}") from None
    if ranks * per_rank > MAX_HOST_BYTES:
        raise InputError(field, f"{ranks} × {per_rank:,} B exceeds any host's memory")
    allocated = pow2_ceil(per_rank) if allocator is PinnedAllocator.TORCH else per_rank
    return OffloadTier(requested_per_rank=per_rank, allocated_per_rank=allocated, allocating_ranks=ranks,
                       allocator=allocator)


def _gib(value: object, field: str) -> int:
    """``value`` binary GB as whole bytes (LMCache and vLLM both multiply by 1024**3)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise InputError(field, f"must be a positive number of GiB, got {value!r:.40}")
    exact = Fraction(repr(value)) if isinstance(value, float) else Fraction(value)
    if exact * GiB > MAX_HOST_BYTES:
        raise InputError(field, f"{value:g} GiB exceeds any host's memory")
    return math.floor(exact * GiB)


def lmcache_cpu_tier(max_local_cpu_size: float, *, tp: int, first_rank_only: bool = False,
                     allocator: PinnedAllocator | str = PinnedAllocator.DIRECT) -> OffloadTier:
    """LMCache's local CPU tier inside vLLM's workers: ``max_local_cpu_size`` GiB per rank, on every
    TP rank (only the first with ``first_rank_only``, LMCache's MLA ``save_only_first_rank``)."""
    check_int("tp", tp, high=MAX_TP_RANKS)
    return _tier(_gib(max_local_cpu_size, "max_local_cpu_size"), 1 if first_rank_only else tp, allocator,
                 "max_local_cpu_size")


def vllm_cpu_tier(kv_offloading_size: float, *, tp: int, pp: int = 1,
                  allocator: PinnedAllocator | str = PinnedAllocator.DIRECT) -> OffloadTier:
    """vLLM's native CPU offloading: ``--kv-offloading-size`` GiB in all, shared by the TP × PP ranks."""
    check_int("tp", tp, high=MAX_TP_RANKS)
    check_int("pp", pp, high=MAX_PP)
    return _tier(_gib(kv_offloading_size, "kv_offloading_size") // (tp * pp), tp * pp, allocator, "kv_offloading_size")

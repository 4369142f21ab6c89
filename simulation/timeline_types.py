"""Settings and results of the over-time simulation (:mod:`simulation.timeline` runs it)."""


from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from inputs.errors import InputError
from simulation.allocators import AddressSpace
from simulation.memory import GIB, KvBudget, MemoryBreakdown
from simulation.policies import ReservationPolicy
from simulation.snapshot import DEFAULT_BLOCK_SIZE
from simulation.step_cost import StepCost
from simulation.workloads import Workload

MAX_CACHING_BLOCKS = 4_000_000  # ~0.5 GB of Python bookkeeping in the caching pool at most

# Swap throughput without a CPU tier: PCIe-class ~16 GB/s at 160 KiB per token ≈ 100k tokens/s
# (assumed).
DEFAULT_SWAP_TOKENS_PER_S = 100_000.0
# vLLM's long-standing max_num_seqs default: at most 256 sequences in a batch.
DEFAULT_MAX_NUM_SEQS = 256
# vLLM V1's max_num_batched_tokens for its OpenAI server on large GPUs: 8,192 tokens per step.
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192
# Host link of the CPU tier: PCIe Gen4 x16 moves ~25 GB/s one way in practice (assumed default).
DEFAULT_CPU_LINK_GBPS = 25.0
# Points kept in the plotted time series.
DEFAULT_SERIES_POINTS = 1_000
# Longest KV transfer delay a prefilled arrival may carry: an hour is far past any link.
MAX_TRANSFER_DELAY_S = 3600.0


class Allocation(str, enum.Enum):
    """The allocator of the over-time run (the CLI's ``--allocator``)."""

    CONTIGUOUS_MAX = "contiguous-max"
    CONTIGUOUS_POW2 = "contiguous-pow2"
    CONTIGUOUS_ORACLE = "contiguous-oracle"
    PAGED = "paged"

    @property
    def policy(self) -> ReservationPolicy | None:
        """The contiguous reservation policy, None for paging."""
        return None if self is Allocation.PAGED else ReservationPolicy(self.value.split("-")[1])


class Preemption(str, enum.Enum):
    """What happens to a paged request's KV when it is preempted."""

    RECOMPUTE = "recompute"
    SWAP = "swap"


@dataclass(frozen=True, kw_only=True)
class CpuTierConfig:
    """Host memory behind the GPU cache: ``gib`` GiB reached at ``link_gbps`` GB/s (10⁹ B/s)."""

    gib: float
    link_gbps: float = DEFAULT_CPU_LINK_GBPS

    def __post_init__(self) -> None:
        if not (math.isfinite(self.gib) and self.gib > 0):
            raise ValueError(f"the CPU tier needs a positive size in GiB, got {self.gib}")
        if not (math.isfinite(self.link_gbps) and self.link_gbps > 0):
            raise ValueError(f"the CPU link needs a positive bandwidth in GB/s, got {self.link_gbps}")

    def capacity_blocks(self, block_bytes: int) -> int:
        return int(self.gib * GIB) // block_bytes

    def seconds(self, tokens: int, per_token_bytes: int) -> float:
        """Time to move ``tokens`` tokens' KV over the link one way."""
        return tokens * per_token_bytes / (self.link_gbps * 1e9)


@dataclass(frozen=True, kw_only=True)
class TimelineConfig:
    """Settings of an over-time run (times in seconds, sizes in tokens).

    ``arrive_prefilled`` runs the decode pool of a disaggregated deployment: each request arrives
    ``transfer_delay_s`` after its arrival time with its prompt's KV computed elsewhere, so its
    first admission allocates the prompt's blocks at once and computes one token, the last prompt
    token, whose step yields the first output token (vLLM's decode side does the same:
    ``Scheduler._update_waiting_for_remote_kv`` in ``vllm/v1/core/sched/scheduler.py`` counts the
    received blocks as computed less one token, so the last one is recomputed for its logits).
    A request preempted afterwards is recomputed locally by prefill chunks, as vLLM does.
    Waits and TTFTs count from the arrival at the decode pool (after the delay).
    """

    budget: KvBudget
    max_context: int
    allocation: Allocation = Allocation.PAGED
    block_size: int = DEFAULT_BLOCK_SIZE
    address_space: AddressSpace = AddressSpace.BUDDY
    preemption: Preemption = Preemption.RECOMPUTE
    step_cost: StepCost = field(default_factory=StepCost.constant)
    swap_tokens_per_s: float = DEFAULT_SWAP_TOKENS_PER_S
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS
    chunked_prefill: bool = True
    prefix_caching: bool = False
    cpu_tier: CpuTierConfig | None = None
    series_points: int = DEFAULT_SERIES_POINTS
    arrive_prefilled: bool = False
    transfer_delay_s: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.arrive_prefilled, bool):
            raise InputError("arrive_prefilled", f"must be True or False, got {self.arrive_prefilled!r}")
        delay = self.transfer_delay_s
        if (isinstance(delay, bool) or not isinstance(delay, int | float) or not math.isfinite(delay)
                or not 0 <= delay <= MAX_TRANSFER_DELAY_S):
            raise InputError("transfer_delay_s", f"must be a number of seconds in [0, {MAX_TRANSFER_DELAY_S:g}], "
                                                 f"got {delay!r}")
        if delay and not self.arrive_prefilled:
            raise InputError("transfer_delay_s", "a KV transfer delay needs arrive_prefilled")
        if self.arrive_prefilled and (self.prefix_caching or self.cpu_tier is not None):
            # Received KV is written into fresh blocks; what it would share with the cache is not modelled.
            raise InputError("arrive_prefilled", "prefilled arrivals run without prefix caching and the CPU tier")
        if not (self.swap_tokens_per_s > 0 and math.isfinite(self.swap_tokens_per_s)):
            raise ValueError(f"swap_tokens_per_s must be a positive number, got {self.swap_tokens_per_s}")
        if self.block_size < 1:
            raise ValueError(f"block_size must be >= 1 token, got {self.block_size}")
        if self.max_context < 2:
            raise ValueError(f"max_context must be >= 2 tokens, got {self.max_context}")
        if self.max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be >= 1, got {self.max_num_seqs}")
        if self.max_num_batched_tokens < self.max_num_seqs:
            # vLLM refuses this too: every running sequence must be able to decode in one step.
            raise ValueError(f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= "
                             f"max_num_seqs ({self.max_num_seqs})")
        if not self.chunked_prefill and self.max_num_batched_tokens < self.max_context:
            raise ValueError(f"without chunked prefill max_num_batched_tokens ({self.max_num_batched_tokens}) "
                             f"must hold a whole prompt of max_context ({self.max_context}) tokens")
        object.__setattr__(self, "allocation", Allocation(self.allocation))
        object.__setattr__(self, "address_space", AddressSpace(self.address_space))
        object.__setattr__(self, "preemption", Preemption(self.preemption))
        paged = self.allocation is Allocation.PAGED
        if (self.prefix_caching or self.cpu_tier is not None) and not paged:
            raise ValueError("prefix caching and the CPU tier need the paged allocator")
        blocks = self.budget.tokens // self.block_size
        if (self.prefix_caching or self.cpu_tier is not None) and blocks > MAX_CACHING_BLOCKS:
            # The caching pool keeps a hash and a queue entry for every block it owns.
            raise InputError("kv_budget_tokens", f"prefix caching tracks every block: the KV budget holds "
                             f"{blocks:,} blocks of {self.block_size} tokens, at most {MAX_CACHING_BLOCKS:,} are "
                             "simulated; use larger blocks, a smaller budget or more bytes per token")
        if self.cpu_tier is not None:
            if self.budget.per_token_bytes is None:
                raise ValueError("the CPU tier needs the KV bytes per token (a budget in bytes)")
            if self.cpu_tier.capacity_blocks(self.block_bytes) < 1:
                raise ValueError("the CPU tier holds less than one block")

    @property
    def block_bytes(self) -> int:
        """Bytes of one block (needs ``budget.per_token_bytes``)."""
        return self.block_size * (self.budget.per_token_bytes or 0)


@dataclass(frozen=True, kw_only=True)
class TimelineSeries:
    """Sampled state over time; every array has shape (m,) with m ≤ ``series_points``.

    Memory arrays are token slots (figure-2 categories; ``cached`` is the part of ``free`` that
    still holds cached prefix blocks); ``queue_length`` counts requests that have arrived and are
    not running (preempted ones included); ``preemptions`` is cumulative; ``step_s`` is the
    length of the step in progress and ``batched_tokens`` the tokens it computes.
    """

    time_s: np.ndarray
    token_states: np.ndarray
    reservation: np.ndarray
    internal_fragmentation: np.ndarray
    external_fragmentation: np.ndarray
    free: np.ndarray
    cached: np.ndarray
    batch_size: np.ndarray
    queue_length: np.ndarray
    preemptions: np.ndarray
    step_s: np.ndarray
    batched_tokens: np.ndarray


@dataclass(frozen=True, kw_only=True)
class PrefixStats:
    """Prefix caching over a run (tokens; blocks where named).

    ``prompt_tokens`` and ``hit_tokens`` count first admissions only (a readmission after a
    preemption is counted in ``readmission_hit_tokens``); ``cpu_hit_tokens`` is the part of the
    hits copied back from the CPU tier; ``cpu_loaded_tokens`` counts every copy back (readmissions
    too) and ``cpu_transfer_s`` is their time on the link.
    """

    prompt_tokens: int
    hit_tokens: int
    cpu_hit_tokens: int
    readmission_hit_tokens: int
    evictions: int
    cached_blocks_peak: int
    cpu_stored_blocks: int
    cpu_dropped_blocks: int
    cpu_loaded_tokens: int
    cpu_transfer_s: float

    @property
    def hit_rate(self) -> float:
        """Cached prompt tokens over prompt tokens (0–1)."""
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def prefill_tokens_saved(self) -> int:
        return self.hit_tokens + self.readmission_hit_tokens


@dataclass(frozen=True, kw_only=True)
class TimelineResult:
    """Outcome of an over-time run.

    Attributes
    ----------
    completed, rejected : int
        Requests finished; requests that could never fit the budget (not run).
    duration_s : float
        Time of the last completion.
    mean_batch_size : float
        Time-averaged number of running requests over ``duration_s``.
    token_state_fraction : float
        Time-averaged share of the budget holding real tokens.
    breakdown : MemoryBreakdown
        Time-averaged slots in each figure-2 category.
    preemptions, recomputed_tokens, swapped_tokens : int
        Preemption count and its cost (tokens re-prefilled; tokens moved out plus in).
    preemption_stall_s : float
        Seconds the batch spent moving swapped KV (recompute costs prefill steps instead).
    wait_s, ttft_s, tpot_s : float64 arrays, shape (n,)
        Per request: arrival to first admission; arrival to first output token; mean time per
        later output token (NaN where not defined: rejected, or a single output token).
    mean_step_s : float
        Mean length of a step (time over steps).
    steps : int
    computed_tokens : int
        Tokens the steps computed, all steps together: prompt chunks (recomputes included) and
        one per decoding request per step.
    peak_allocated_tokens : int
        Most slots allocated at once (paged: the running requests' blocks × block size;
        contiguous: their chunks), taken after each step, before its completions free memory.
    mean_allocated_tokens : float
        Time-averaged slots allocated over ``duration_s``.
    prefix : PrefixStats or None
        With prefix caching.
    series : TimelineSeries
    """

    config: TimelineConfig
    completed: int
    rejected: int
    duration_s: float
    mean_batch_size: float
    token_state_fraction: float
    breakdown: MemoryBreakdown
    preemptions: int
    recomputed_tokens: int
    swapped_tokens: int
    preemption_stall_s: float
    wait_s: np.ndarray
    ttft_s: np.ndarray
    tpot_s: np.ndarray
    mean_step_s: float
    steps: int
    computed_tokens: int
    peak_allocated_tokens: int
    mean_allocated_tokens: float
    prefix: PrefixStats | None
    series: TimelineSeries

    @staticmethod
    def _mean(values: np.ndarray) -> float:
        finite = values[np.isfinite(values)]
        return float(finite.mean()) if finite.size else 0.0

    @property
    def mean_wait_s(self) -> float:
        return self._mean(self.wait_s)

    @property
    def mean_ttft_s(self) -> float:
        return self._mean(self.ttft_s)

    @property
    def mean_tpot_s(self) -> float:
        return self._mean(self.tpot_s)

    @property
    def throughput_per_s(self) -> float:
        """Requests completed per second of the run."""
        return self.completed / self.duration_s if self.duration_s > 0 else 0.0

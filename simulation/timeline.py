"""Over time: a discrete-event simulation of continuous batching on a KV budget.

Model (one engine, FCFS, iteration-level scheduling as in Orca and vLLM):

1. Requests arrive (trace timestamps or Poisson) and wait in a queue.
2. At each iteration the scheduler admits waiting requests in order while memory allows (no
   skipping: a blocked head blocks the queue). Admission allocates the prompt's KV: a contiguous
   chunk (reservation policy + buddy or first fit) or enough blocks for the prompt (paged, keeping
   vLLM's 1 % watermark of free blocks). Prefill costs ``tokens / prefill_tokens_per_s`` seconds,
   during which the batch stalls.
3. Every decode step (``decode_step_s`` seconds) adds one token to every running request. A
   contiguous request grows inside its chunk; a paged one takes a new block from the free list when
   its last block is full. A request that has produced its output finishes and frees its memory.
4. Paged only: when a step needs more blocks than are free, the most recently admitted requests are
   preempted (vLLM's policy) and put back at the front of the queue: by recompute (their KV is
   dropped and re-prefilled on readmission) or by swap (their KV goes to host memory and comes back
   at ``swap_tokens_per_s``). Contiguous requests reserve their whole chunk up front and never run
   out mid-flight; new ones queue instead.

Speed: between events (an arrival that can be admitted, a completion, a paged request running out
of blocks) nothing happens but decode steps, so the loop jumps over them and integrates the memory
figures in closed form (``_blocks_sum``); the work is O(events × batch) array operations.
"""

from __future__ import annotations

import enum
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from simulation.allocators import AddressSpace, chunk_sizes, make_allocator
from simulation.arith import paged_slots
from units import cdiv
from simulation.memory import KvBudget, MemoryBreakdown
from simulation.policies import ReservationPolicy, clip_to_context, reservation_tokens
from simulation.snapshot import DEFAULT_BLOCK_SIZE
from simulation.workloads import Workload

# Time-per-output-token of one decode iteration: ~25 ms is typical of a large model at moderate
# batch (an assumption; a setting).
DEFAULT_DECODE_STEP_S = 0.025
# Prefill throughput (assumed): a 70B model costs ~2 × 70e9 = 1.4e11 FLOP per prompt token; an
# 8×H100 node sustaining ~4e15 FLOP/s of dense BF16 prefill gives ~30k tokens/s.
DEFAULT_PREFILL_TOKENS_PER_S = 30_000.0
# Swap throughput: PCIe-class ~16 GB/s at 160 KiB per token ≈ 100k tokens/s (assumed).
DEFAULT_SWAP_TOKENS_PER_S = 100_000.0
# vLLM's max_num_seqs default: at most 256 sequences in a batch.
DEFAULT_MAX_BATCH = 256
# vLLM keeps 1 % of the blocks free at admission so that running sequences can grow.
PAGED_WATERMARK = 0.01
# Points kept in the plotted time series.
DEFAULT_SERIES_POINTS = 1_000
# Longest jump over decode steps; None = unlimited. Tests set it to 1 to check the closed-form jumps
# against plain step-by-step simulation.
_JUMP_LIMIT: int | None = None
# How often (in completed requests, as a share of all) the progress callback is called.
PROGRESS_EVERY = 0.01


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
class TimelineConfig:
    """Settings of an over-time run (times in seconds, sizes in tokens)."""

    budget: KvBudget
    max_context: int
    allocation: Allocation = Allocation.PAGED
    block_size: int = DEFAULT_BLOCK_SIZE
    address_space: AddressSpace = AddressSpace.BUDDY
    preemption: Preemption = Preemption.RECOMPUTE
    decode_step_s: float = DEFAULT_DECODE_STEP_S
    prefill_tokens_per_s: float = DEFAULT_PREFILL_TOKENS_PER_S
    swap_tokens_per_s: float = DEFAULT_SWAP_TOKENS_PER_S
    max_batch: int = DEFAULT_MAX_BATCH
    series_points: int = DEFAULT_SERIES_POINTS

    def __post_init__(self) -> None:
        for name in ("decode_step_s", "prefill_tokens_per_s", "swap_tokens_per_s"):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a positive number, got {value}")
        if self.block_size < 1:
            raise ValueError(f"block_size must be >= 1 token, got {self.block_size}")
        if self.max_context < 2:
            raise ValueError(f"max_context must be >= 2 tokens, got {self.max_context}")
        if self.max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {self.max_batch}")
        object.__setattr__(self, "allocation", Allocation(self.allocation))
        object.__setattr__(self, "address_space", AddressSpace(self.address_space))
        object.__setattr__(self, "preemption", Preemption(self.preemption))


@dataclass(frozen=True, kw_only=True)
class TimelineSeries:
    """Sampled state over time; every array has shape (m,) with m ≤ ``series_points``.

    Memory arrays are token slots (figure-2 categories); ``queue_length`` counts requests that
    have arrived and are not running (preempted ones included); ``preemptions`` is cumulative.
    """

    time_s: np.ndarray
    token_states: np.ndarray
    reservation: np.ndarray
    internal_fragmentation: np.ndarray
    external_fragmentation: np.ndarray
    free: np.ndarray
    batch_size: np.ndarray
    queue_length: np.ndarray
    preemptions: np.ndarray


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
        Seconds the batch stalled to recompute or swap.
    wait_s : float64 array, shape (n,)
        Each request's wait from arrival to first admission (NaN if rejected).
    mean_wait_s : float
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
    mean_wait_s: float
    series: TimelineSeries


def _slots_sum(upper: np.ndarray, block_size: int) -> np.ndarray:
    """S(n) = Σ_{m=1..n} B·⌈m/B⌉ (int64, element-wise): slots held summed over lengths 1..n."""
    q, r = np.divmod(upper, block_size)
    return block_size * block_size * q * (q + 1) // 2 + r * block_size * (q + 1)


def _paged_sums(length: np.ndarray, final: np.ndarray, steps: int, block_size: int) -> tuple[int, int]:
    """Over the next ``steps`` decode steps (lengths ``length + 1 .. length + steps``), summed over
    steps and requests: (slots held, slots held that the request will eventually fill).

    ``min(B·⌈m/B⌉, F)`` equals ``F`` once m is in the request's last block (m > F_b) and the slots
    held otherwise, so both sums are differences of ``_slots_sum``.
    """
    end = length + steps
    last_block_start = block_size * (cdiv(final, block_size) - 1)
    # One vectorised call for the four S(·) terms (per-event overhead dominates at small batches).
    terms = _slots_sum(np.concatenate([end, length, np.minimum(end, last_block_start),
                                       np.minimum(length, last_block_start)]), block_size)
    size = length.size
    held = terms[:size].sum() - terms[size:2 * size].sum()
    below = terms[2 * size:3 * size].sum() - terms[3 * size:].sum()
    in_last = np.maximum(0, end - np.maximum(length, last_block_start))
    return int(held), int(below + (final * in_last).sum())


class _Accumulator:
    """Time integrals of the memory figures and the batch size (slot·seconds, request·seconds)."""

    def __init__(self) -> None:
        self.tokens = 0.0
        self.filled = 0.0  # slots that their request will fill: tokens + reservation
        self.held = 0.0
        self.external = 0.0
        self.batch = 0.0


def run_timeline(workload: Workload, config: TimelineConfig, *,
                 progress: Callable[[float], None] | None = None) -> TimelineResult:
    """Simulate continuous batching of ``workload`` (which must have ``arrival_s``).

    Parameters
    ----------
    workload : Workload
        Requests with arrival times (seconds); lengths are cut to ``config.max_context``.
    config : TimelineConfig
    progress : callable, optional
        Called with the share of requests finished (0–1) about every 1 %.

    Returns
    -------
    TimelineResult
    """
    if workload.arrival_s is None:
        raise ValueError("the workload has no arrival times: add them (poisson_arrivals) or use a trace")
    return _Simulation(workload, config, progress).run()


class _Simulation:
    """State of one run. Running requests live in parallel int64 arrays (one slot per request)."""

    def __init__(self, workload: Workload, config: TimelineConfig,
                 progress: Callable[[float], None] | None) -> None:
        self.config = config
        self.progress = progress
        prompt, output, _ = clip_to_context(workload, config.max_context)
        self.prompt, self.final = prompt, prompt + output
        self.arrival = np.asarray(workload.arrival_s, dtype=np.float64)
        self.n = workload.size
        self.paged = config.allocation is Allocation.PAGED
        self.budget = config.budget.tokens
        block = config.block_size
        if self.paged:
            self.total_blocks = self.budget // block
            self.free_blocks = self.total_blocks
            self.watermark_blocks = int(PAGED_WATERMARK * self.total_blocks)
            fits = cdiv(self.final, block) <= self.total_blocks - self.watermark_blocks
            self.chunk = np.zeros(self.n, dtype=np.int64)
        else:
            self.allocator = make_allocator(config.address_space, self.budget)
            requested = reservation_tokens(config.allocation.policy, prompt, output, config.max_context)
            self.chunk = chunk_sizes(config.address_space, requested)
            largest_hole = int(self.allocator.hole_sizes().max())
            fits = self.chunk <= largest_hole
        self.rejected = ~fits
        self.order = np.flatnonzero(fits)  # requests to run, in arrival order (arrivals sorted)
        self.order_arrival = self.arrival[self.order]
        # Tokens held by a request when it is (re)admitted: the prompt, or all it had when preempted.
        self.resume_length = prompt.copy()
        self.swapped = np.zeros(self.n, dtype=bool)
        self.admitted_at = np.full(self.n, np.nan)
        self.queue: deque[int] = deque()
        self.next_arrival = 0  # index into self.order
        self.time = 0.0
        self.admissions = 0
        # Running set, parallel arrays.
        self.run_id = np.empty(0, dtype=np.int64)
        self.run_len = np.empty(0, dtype=np.int64)
        self.run_final = np.empty(0, dtype=np.int64)
        self.run_offset = np.empty(0, dtype=np.int64)
        self.run_seq = np.empty(0, dtype=np.int64)  # admission sequence number (LIFO preemption)
        self.completed = 0
        self.preemptions = 0
        self.recomputed_tokens = 0
        self.swapped_tokens = 0
        self.stall_s = 0.0
        self.acc = _Accumulator()
        self.samples: list[tuple[float, ...]] = []
        # Events are far more than plotted points: sample the state about 4× per plotted point of
        # the arrival span (the run lasts a little longer than its last arrival).
        span = float(self.order_arrival[-1]) if self.order.size else 0.0
        self.record_interval = span / (4 * config.series_points)
        self.next_record_time = 0.0
        self.last_progress = 0.0

    # ---- memory state -------------------------------------------------------------------------
    def _held(self) -> np.ndarray:
        """Slots held by each running request (int64, shape (b,))."""
        if self.paged:
            return paged_slots(self.run_len, self.config.block_size)
        return self.chunk[self.run_id]

    def _external(self) -> int:
        """Free slots that the next request in line cannot use."""
        if self.paged:
            return self.budget - self.total_blocks * self.config.block_size
        head = self.queue[0] if self.queue else (
            int(self.order[self.next_arrival]) if self.next_arrival < self.order.size else None)
        if head is None:
            return 0
        holes = self.allocator.hole_sizes()
        return int(holes[holes < self.chunk[head]].sum())

    def _memory(self) -> tuple[int, int, int, int]:
        """Slots now: (token states, filled eventually by their request, allocated, external)."""
        held = self._held()
        return (int(self.run_len.sum()), int(np.minimum(held, self.run_final).sum()), int(held.sum()),
                self._external())

    def _record(self, force: bool = False) -> None:
        if not force and self.time < self.next_record_time:
            return
        self.next_record_time = self.time + self.record_interval
        tokens, filled, allocated, external = self._memory()
        self.samples.append((self.time, tokens, filled - tokens, allocated - filled, external,
                             self.budget - allocated - external, self.run_id.size,
                             len(self.queue) + self._arrived_not_queued(), self.preemptions))

    def _arrived_not_queued(self) -> int:
        """Requests that have arrived by now but are not yet in the queue (lazily enqueued)."""
        return int(np.searchsorted(self.order_arrival, self.time, side="right")) - self.next_arrival

    def _integrate_constant(self, seconds: float) -> None:
        """Add ``seconds`` of the current (frozen) state to the time integrals."""
        if seconds <= 0:
            return
        tokens, filled, allocated, external = self._memory()
        self.acc.tokens += seconds * tokens
        self.acc.filled += seconds * filled
        self.acc.held += seconds * allocated
        self.acc.external += seconds * external
        self.acc.batch += seconds * self.run_id.size

    def _integrate_steps(self, steps: int) -> None:
        """Add ``steps`` decode steps (lengths growing by one each step) to the integrals."""
        step_s = self.config.decode_step_s
        lengths = self.run_len
        token_sum = steps * int(lengths.sum()) + lengths.size * steps * (steps + 1) // 2
        if self.paged:
            held_sum, filled_sum = _paged_sums(lengths, self.run_final, steps, self.config.block_size)
        else:
            held_sum = steps * int(self.chunk[self.run_id].sum())
            filled_sum = steps * int(self.run_final.sum())  # the chunk holds the whole final length
        self.acc.tokens += step_s * token_sum
        self.acc.filled += step_s * filled_sum
        self.acc.held += step_s * held_sum
        self.acc.external += step_s * steps * self._external()
        self.acc.batch += step_s * steps * lengths.size

    # ---- scheduling ---------------------------------------------------------------------------
    def _enqueue_arrivals(self) -> None:
        arrived = int(np.searchsorted(self.order_arrival, self.time, side="right"))
        if arrived > self.next_arrival:
            self.queue.extend(self.order[self.next_arrival:arrived].tolist())
            self.next_arrival = arrived

    def _admit(self) -> None:
        """Admit from the head of the queue while memory and the batch limit allow."""
        stall = 0.0
        admitted: list[tuple[int, int, int]] = []  # (request, length, offset)
        block = self.config.block_size
        batch = self.run_id.size
        while self.queue and batch + len(admitted) < self.config.max_batch:
            request = self.queue[0]
            length = int(self.resume_length[request])
            if self.paged:
                need = cdiv(length, block)
                if self.free_blocks - need < self.watermark_blocks:
                    break
                self.free_blocks -= need
                offset = -1
            else:
                offset = self.allocator.allocate(int(self.chunk[request]))
                if offset is None:
                    break
            self.queue.popleft()
            if self.swapped[request]:
                swap_in_s = length / self.config.swap_tokens_per_s
                stall += swap_in_s
                self.stall_s += swap_in_s
                self.swapped_tokens += length
                self.swapped[request] = False
            else:
                stall += length / self.config.prefill_tokens_per_s
                if length > self.prompt[request]:  # resumed after a recompute preemption
                    self.recomputed_tokens += length
                    self.stall_s += length / self.config.prefill_tokens_per_s
            if np.isnan(self.admitted_at[request]):
                self.admitted_at[request] = self.time
            admitted.append((request, length, offset))
        if not admitted:
            return
        ids, lengths, offsets = (np.asarray(column, dtype=np.int64) for column in zip(*admitted))
        seqs = np.arange(self.admissions, self.admissions + ids.size, dtype=np.int64)
        self.admissions += ids.size
        self.run_id = np.concatenate([self.run_id, ids])
        self.run_len = np.concatenate([self.run_len, lengths])
        self.run_final = np.concatenate([self.run_final, self.final[ids]])
        self.run_offset = np.concatenate([self.run_offset, offsets])
        self.run_seq = np.concatenate([self.run_seq, seqs])
        self._integrate_constant(stall)
        self.time += stall

    def _first_need(self) -> np.ndarray:
        """Steps until each running request's last block is full and its next token needs a new one."""
        return paged_slots(self.run_len, self.config.block_size) - self.run_len + 1

    def _blocks_needed(self, steps: int, first_need: np.ndarray | None = None) -> int:
        """New blocks the running requests need over the next ``steps`` steps (``first_need``:
        ``_first_need()``, when the caller already has it)."""
        if first_need is None:
            first_need = self._first_need()
        return int(np.maximum(0, (steps - first_need) // self.config.block_size + 1).sum())

    def _steps_until_out_of_blocks(self, cap: int) -> tuple[int, int]:
        """(k, blocks the next k steps need): the largest k ≤ cap (≥ 1, as the caller has
        preempted for the next step) whose blocks are free."""
        first_need = self._first_need()

        def needed(steps: int) -> int:
            return self._blocks_needed(steps, first_need)

        at_cap = needed(cap)
        if at_cap <= self.free_blocks:
            return cap, at_cap
        low, high = 1, cap  # needed(low) fits, needed(high) does not
        while high - low > 1:
            middle = (low + high) // 2
            if needed(middle) <= self.free_blocks:
                low = middle
            else:
                high = middle
        return low, needed(low)

    def _preempt_for_next_step(self) -> None:
        """Preempt the latest-admitted requests until the next step's blocks are free."""
        block = self.config.block_size
        stall = 0.0
        while self._blocks_needed(1) > self.free_blocks:
            victim = int(np.argmax(self.run_seq))
            request, length = int(self.run_id[victim]), int(self.run_len[victim])
            self.free_blocks += cdiv(length, block)
            self.resume_length[request] = length
            if self.config.preemption is Preemption.SWAP:
                self.swapped[request] = True
                self.swapped_tokens += length
                stall += length / self.config.swap_tokens_per_s
            self.queue.appendleft(request)
            self.preemptions += 1
            keep = np.arange(self.run_id.size) != victim
            self._keep(keep)
        self.stall_s += stall
        self._integrate_constant(stall)
        self.time += stall

    def _keep(self, mask: np.ndarray) -> None:
        self.run_id, self.run_len, self.run_final = self.run_id[mask], self.run_len[mask], self.run_final[mask]
        self.run_offset, self.run_seq = self.run_offset[mask], self.run_seq[mask]

    def _finish(self) -> None:
        done = self.run_len >= self.run_final
        if not done.any():
            return
        if self.paged:
            self.free_blocks += int(cdiv(self.run_len[done], self.config.block_size).sum())
        else:
            for offset in self.run_offset[done].tolist():
                self.allocator.release(offset)
        self.completed += int(done.sum())
        self._keep(~done)
        if self.progress is not None and self.completed / max(self.order.size, 1) - self.last_progress >= PROGRESS_EVERY:
            self.last_progress = self.completed / self.order.size
            self.progress(self.last_progress)

    def run(self) -> TimelineResult:
        step_s = self.config.decode_step_s
        total = self.order.size
        external = self._external()
        self.samples.append((0.0, 0, 0, 0, external, self.budget - external, 0, 0, 0))
        while self.completed < total:
            self._enqueue_arrivals()
            self._admit()
            if self.run_id.size == 0:
                # Idle (or blocked with nothing running, impossible after the size check): jump to
                # the next arrival, integrating the empty state.
                nxt = self.arrival[self.order[self.next_arrival]]
                self._integrate_constant(nxt - self.time)
                self.time = max(self.time, nxt)
                self._record()
                continue
            if self.paged and self._blocks_needed(1) > self.free_blocks:
                self._preempt_for_next_step()
            steps = int((self.run_final - self.run_len).min())
            if _JUMP_LIMIT is not None:
                steps = min(steps, _JUMP_LIMIT)
            if not self.queue and self.next_arrival < total:
                wait = self.arrival[self.order[self.next_arrival]] - self.time
                steps = min(steps, max(1, math.ceil(wait / step_s)))
            if self.paged:
                steps, needed = self._steps_until_out_of_blocks(steps)
                self.free_blocks -= needed
            self._integrate_steps(steps)
            self.run_len = self.run_len + steps
            self.time += steps * step_s
            self._finish()
            self._record()
        self._record(force=True)  # the final, empty state
        if self.progress is not None:
            self.progress(1.0)
        return self._result()

    def _result(self) -> TimelineResult:
        duration = self.time
        span = duration if duration > 0 else 1.0
        held, filled, tokens = self.acc.held / span, self.acc.filled / span, self.acc.tokens / span
        external = self.acc.external / span
        breakdown = MemoryBreakdown(
            token_states=tokens, reservation=filled - tokens, internal_fragmentation=held - filled,
            external_fragmentation=external, free=self.budget - held - external,
        )
        wait = self.admitted_at - self.arrival
        finished_wait = wait[~self.rejected]
        return TimelineResult(
            config=self.config, completed=self.completed, rejected=int(self.rejected.sum()),
            duration_s=duration, mean_batch_size=self.acc.batch / span,
            token_state_fraction=tokens / self.budget, breakdown=breakdown,
            preemptions=self.preemptions, recomputed_tokens=self.recomputed_tokens,
            swapped_tokens=self.swapped_tokens, preemption_stall_s=self.stall_s, wait_s=wait,
            mean_wait_s=float(finished_wait.mean()) if finished_wait.size else 0.0,
            series=self._series(),
        )

    def _series(self) -> TimelineSeries:
        samples = np.asarray(self.samples, dtype=np.float64)
        if samples.shape[0] > self.config.series_points:
            # The state at evenly spaced times (the last event at or before each).
            times = np.linspace(samples[0, 0], samples[-1, 0], self.config.series_points)
            rows = np.searchsorted(samples[:, 0], times, side="right") - 1
            samples = samples[rows]
        columns = samples.T
        return TimelineSeries(
            time_s=columns[0], token_states=columns[1], reservation=columns[2],
            internal_fragmentation=columns[3], external_fragmentation=columns[4], free=columns[5],
            batch_size=columns[6], queue_length=columns[7], preemptions=columns[8],
        )

"""The over-time engine: one run's state and its event loop (the model is in :mod:`simulation.timeline`).

The batch changes only at arrivals, admissions, chunk boundaries, completions and preemptions.
A step that prefills or admits is simulated on its own (``_one_step``); a stretch of pure decode
steps is jumped over in one go (``_decode_jump``) up to the next event: the first completion, the
step that reaches the next arrival (when it could be admitted), or the last step the free blocks
can feed. Running requests live in :class:`~simulation.engine_batch.Batch`, whose running totals
give every figure of a step or a jump without a pass over the batch; per-request state is in
Python lists indexed by request (a NumPy element read costs more than the arithmetic here).

Few requests prefill at a step boundary (the loop does not rely on it): a prompt that does not
finish in a step has taken the rest of the step's token budget, so nothing later is admitted in it.
"""

from __future__ import annotations

import heapq
import itertools
import math
from bisect import bisect_right
from collections import deque
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from simulation.allocators import chunk_sizes, make_allocator
from simulation.block_pool import CachingPool, CountingPool, CpuTier
from simulation.content import block_hashes, output_segment
from simulation.engine_batch import DECODING, Batch
from simulation.engine_cost import decode_seconds, steps_to_reach
from simulation.engine_result import engine_result
from simulation.engine_sums import Accumulator
from simulation.policies import clip_to_context, reservation_tokens
from simulation.run_budget import DEADLINE_EVERY, Deadline
from simulation.timeline_types import Allocation, Preemption, TimelineConfig, TimelineResult
from simulation.workloads import Workload
from units import cdiv

# vLLM keeps 1 % of the blocks free at admission so that running sequences can grow.
PAGED_WATERMARK = 0.01
# Longest jump over decode steps (None: unlimited; tests set 1 to check the closed forms step by step).
JUMP_LIMIT: int | None = None
# Tests set this to check the batch's running totals against sums over its requests at every step.
VERIFY_TOTALS = False
PROGRESS_EVERY = 0.01  # how often, in completed requests as a share of all, progress is reported


class _Admission(NamedTuple):
    """A waiting request the scheduler can admit now, and what admitting it takes."""

    request: int
    start: int  # tokens already there before the chunk (prefix hits), or the swapped length
    hit_blocks: list[int]  # cached GPU blocks reused
    cpu_blocks: int  # further blocks copied back from the CPU tier
    chunk: int  # prompt tokens computed this step
    new_len: int  # slots held after the step
    new_blocks: int  # blocks to allocate (paged)
    swap_in: bool


class Engine:
    """State of one run."""

    def __init__(self, workload: Workload, config: TimelineConfig, progress: Callable[[float], None] | None,
                 deadline: Deadline | None = None) -> None:
        self.config = c = config
        self.progress, self.deadline = progress, deadline
        prompt, output, _ = clip_to_context(workload, c.max_context)
        self.prompt, self.output, final = prompt, output, prompt + output
        self.final = final.tolist()
        self.n = n = workload.size
        self.arrival = np.array(workload.arrival_s, dtype=np.float64)
        content = workload.content
        parent = content.parent if content is not None else np.full(n, -1, dtype=np.int64)
        self.think = (content.think_s if content is not None else np.zeros(n)).tolist()
        self.segments = content.segments if content is not None else None
        self.children: dict[int, list[int]] = {}
        for child in np.flatnonzero(parent >= 0).tolist():
            self.children.setdefault(int(parent[child]), []).append(child)
        self.paged = c.allocation is Allocation.PAGED
        self.block = block = c.block_size
        self.budget = c.budget.tokens
        self.per_token_bytes = c.budget.per_token_bytes or 0
        self.cpu: CpuTier | None = None
        self.caching = False
        if self.paged:
            self.total_blocks = self.budget // block
            self.paged_external = self.budget - self.total_blocks * block  # the budget's remainder
            self.watermark = int(PAGED_WATERMARK * self.total_blocks)
            fits = cdiv(final, block) <= self.total_blocks - self.watermark
            if c.cpu_tier is not None:
                self.cpu = CpuTier(c.cpu_tier.capacity_blocks(c.block_bytes))
            self.caching = c.prefix_caching or self.cpu is not None
            self.pool = CachingPool(self.total_blocks, self.cpu) if self.caching else CountingPool(self.total_blocks)
            self.chunk = self.reserved = [0] * n
        else:
            self.allocator = make_allocator(c.address_space, self.budget)
            reserved = reservation_tokens(c.allocation.policy, prompt, output, c.max_context)
            chunk = chunk_sizes(c.address_space, reserved)
            fits = chunk <= int(self.allocator.hole_sizes().max())
            self.reserved, self.chunk = reserved.tolist(), chunk.tolist()
            self.filled_of = np.minimum(chunk, final).tolist()
        rejected = ~fits
        for child in np.flatnonzero(parent >= 0).tolist():  # a turn whose history never ran
            rejected[child] |= rejected[parent[child]]
        self.rejected = rejected
        self.to_run = int((~rejected).sum())
        roots = np.flatnonzero(~rejected & (parent < 0))
        roots = roots[np.argsort(self.arrival[roots], kind="stable")]
        self.roots, self.root_arrival = roots.tolist(), self.arrival[roots].tolist()
        self.next_root = 0
        self.released: list[tuple[float, int]] = []  # (arrival, request) of later turns, a heap
        self.queue: deque[int] = deque()
        self.resume_goal = prompt.tolist()
        self.prompt_list = self.resume_goal.copy()
        self.swapped = [False] * n
        self.admitted_at, self.first_token_at, self.finished_at = ([math.nan] * n for _ in range(3))
        self.blocks: dict[int, list[int]] = {}  # caching pool: each running request's blocks
        self.hashes: dict[int, list[int]] = {}
        self.registered: dict[int, int] = {}  # full blocks of a running request put in the cache
        self.time = 0.0
        self.steps = 0
        self.batch = Batch(self.final, block, self.paged)
        self.head_plan: _Admission | None = None  # what _decode_only found for the head of the queue
        self.offset: dict[int, int] = {}  # contiguous: each running request's chunk
        self.chunk_sum = self.reserved_sum = self.filled_sum = self.final_sum = 0  # contiguous, over the batch
        self.allocator_version = 0  # bumped at every contiguous allocation or release
        self.external_memo: tuple[int, int, int, int] = (-1, -1, 0, 0)  # (version, head chunk, external, largest)
        self.completed = self.preemptions = self.recomputed_tokens = self.swapped_tokens = 0
        self.stall_s = 0.0
        self.prefix_prompt = self.prefix_hits = self.prefix_cpu_hits = self.prefix_readmit_hits = 0
        self.cached_peak = 0
        self.cpu_transfer_s = 0.0
        self.cpu_loaded_tokens = 0
        self.acc = Accumulator()
        self.samples: list[tuple[float, ...]] = []
        span = self.root_arrival[-1] if self.roots else 0.0
        self.record_interval = span / (4 * c.series_points)
        self.next_record_time = 0.0
        self.last_progress = 0.0
        self.last_step = (0.0, 0)  # (seconds, tokens) of the latest step, for the series

    # ---- arrivals -----------------------------------------------------------------------------
    def _next_arrival(self) -> float:
        upcoming = self.root_arrival[self.next_root] if self.next_root < len(self.roots) else math.inf
        if self.released and self.released[0][0] < upcoming:
            return self.released[0][0]
        return upcoming

    def _enqueue_arrivals(self) -> None:
        first, time, arrival = self.next_root, self.time, self.root_arrival
        last = first
        while last < len(arrival) and arrival[last] <= time:
            last += 1
        new = [(arrival[i], self.roots[i]) for i in range(first, last)]
        self.next_root = last
        while self.released and self.released[0][0] <= time:
            new.append(heapq.heappop(self.released))
        if new:
            new.sort()
            self.queue.extend(request for _, request in new)

    def _arrived_not_queued(self) -> int:
        return (bisect_right(self.root_arrival, self.time) - self.next_root
                + sum(1 for time, _ in self.released if time <= self.time))

    # ---- memory state -------------------------------------------------------------------------
    def _duplicate_slots(self) -> int:
        """Slots counted twice when summing requests: shared (always full) cached blocks."""
        if not self.caching:
            return 0
        return (self.batch.held // self.block - (self.total_blocks - self.pool.free)) * self.block

    def _holes(self) -> tuple[int, int]:
        """Contiguous: (free slots in holes too small for the head of the line, largest hole)."""
        head = self.queue[0] if self.queue else (
            self.roots[self.next_root] if self.next_root < len(self.roots) else None)
        need = -1 if head is None else self.chunk[head]
        version, memo_need, external, largest = self.external_memo
        if version != self.allocator_version or memo_need != need:
            holes = self.allocator.hole_sizes().tolist()  # few holes: plain Python beats array reductions
            largest = max(holes, default=0)
            external = 0 if head is None else sum(hole for hole in holes if hole < need)
            self.external_memo = (self.allocator_version, need, external, largest)
        return external, largest

    def _external(self) -> int:
        """Free slots that cannot serve the next request: the paged remainder, or holes."""
        return self.paged_external if self.paged else self._holes()[0]

    def _memory(self) -> tuple[int, int, int, int, int, int]:
        """Slots now: (tokens, filled eventually, reserved, allocated, external, cached free)."""
        batch = self.batch
        if VERIFY_TOTALS:
            self._verify()
        decode_tokens = batch.base_sum + batch.decoding * batch.clock
        if not self.paged:
            return (decode_tokens + batch.pre_len, self.filled_sum, self.reserved_sum, self.chunk_sum,
                    self._holes()[0], 0)
        dup = self._duplicate_slots() if self.caching else 0
        held = decode_tokens + batch.tail + batch.pre_held - dup
        cached = self.pool.cached_free * self.block if self.caching else 0
        return (decode_tokens + batch.pre_len - dup, held - batch.excess + batch.pre_filled - batch.pre_held,
                held, held, self.paged_external, cached)

    def _verify(self) -> None:
        """The running totals against sums over the running requests."""
        self.batch.verify()
        if not self.paged:
            assert self.chunk_sum == sum(self.chunk[request] for request in self.batch.order)

    def _integrate(self, seconds: float, memory: tuple[int, ...] | None = None) -> None:
        if seconds > 0:
            self.acc.add(seconds, memory or self._memory(), len(self.batch.order))

    def _record(self, force: bool = False) -> None:
        if not force and self.time < self.next_record_time:
            return
        self.next_record_time = self.time + self.record_interval
        tokens, filled, reserved, allocated, external, cached = self._memory()
        self.samples.append((self.time, tokens, filled - tokens, reserved - filled,
                             allocated - reserved + external, self.budget - allocated - external, cached,
                             len(self.batch.order), len(self.queue) + self._arrived_not_queued(), self.preemptions,
                             *self.last_step))
        if self.caching:
            self.cached_peak = max(self.cached_peak, self.pool.cached)

    # ---- prefix caching -----------------------------------------------------------------------
    def _hashes(self, request: int) -> list[int]:
        """Hashes of every full block ``request`` will ever hold (prompt and output)."""
        if request not in self.hashes:
            count = self.final[request] // self.block
            if self.segments is None:
                stream = ((request, 0),)
            else:
                stream = self.segments[request] + ((output_segment(request), int(self.output[request])),)
            self.hashes[request] = block_hashes(stream, self.block, count)
        return self.hashes[request]

    def _register(self, request: int, computed: int) -> None:
        """Put ``request``'s full blocks of computed tokens in the cache."""
        full = computed // self.block
        done = self.registered.get(request, 0)
        if full > done:
            hashes, blocks = self._hashes(request), self.blocks[request]
            for index in range(done, full):
                self.pool.cache(blocks[index], hashes[index])
            self.registered[request] = full

    def _register_computed(self, requests: list[int]) -> None:
        """Register the computed full blocks of running ``requests`` (in admission order): after a
        step or a jump, those whose computed tokens may have filled a block. A decoding request
        fills one exactly when it takes a new block (its computed tokens are its length − 1)."""
        batch = self.batch
        for request in requests:
            length = batch.length(request)
            self._register(request, length - (length > batch.goal[request]))

    # ---- admission ----------------------------------------------------------------------------
    def _plan(self, request: int, budget: int) -> _Admission | None:
        """What admitting ``request`` with ``budget`` tokens left takes, or None if it cannot."""
        c, block = self.config, self.block
        goal = self.resume_goal[request]
        if self.swapped[request]:
            need = -(-goal // block)
            if need > self.pool.free - self.watermark:
                return None
            return _Admission(request, goal, [], 0, 0, goal, need, True)
        hits: list[int] = []
        cpu_blocks = 0
        if self.caching:
            wanted = self._hashes(request)[: (goal - 1) // block]  # the last token is never a hit
            hits = self.pool.lookup(wanted)
            if self.cpu is not None:
                cpu_blocks = sum(1 for _ in _takewhile_in(self.cpu.cached, wanted[len(hits):]))
        start = (len(hits) + cpu_blocks) * block
        chunk = min(goal - start, budget)
        if not c.chunked_prefill and chunk < goal - start:
            return None
        new_len = start + chunk + (start + chunk == goal)
        if not self.paged:
            if self._holes()[1] < self.chunk[request]:
                return None
            return _Admission(request, 0, [], 0, chunk, new_len, 0, False)
        new_blocks = -(-new_len // block) - len(hits)
        evictable = self.pool.evictable(hits) if self.caching else 0
        if new_blocks > self.pool.free - evictable - self.watermark:
            return None
        return _Admission(request, start, hits, cpu_blocks, chunk, new_len, new_blocks, False)

    def _still_admissible(self, plan: _Admission | None, grown: int) -> bool:
        """Whether ``plan`` (made before the running requests took ``grown`` blocks) still holds."""
        if plan is None or (grown and self.caching):
            return False  # a cached block the plan reuses may have been evicted
        return not grown or plan.new_blocks <= self.pool.free - self.watermark

    def _admit(self, plan: _Admission) -> float:
        """Take ``plan``'s memory and start running it; returns the stall seconds."""
        request, block = plan.request, self.block
        stall = 0.0
        first = math.isnan(self.admitted_at[request])
        if first:
            self.admitted_at[request] = self.time
        if not self.paged:
            self.offset[request] = self.allocator.allocate(self.chunk[request])
            self.allocator_version += 1
            self.chunk_sum += self.chunk[request]
            self.reserved_sum += self.reserved[request]
            self.filled_sum += self.filled_of[request]
            self.final_sum += self.final[request]
        elif self.caching:
            self.pool.touch(plan.hit_blocks)
            self.blocks[request] = plan.hit_blocks + self.pool.allocate(plan.new_blocks)
            self.registered[request] = len(plan.hit_blocks)
            if plan.cpu_blocks:
                hashes = self._hashes(request)
                loaded = self.cpu.hits(hashes[len(plan.hit_blocks):len(plan.hit_blocks) + plan.cpu_blocks])
                self._register(request, (len(plan.hit_blocks) + loaded) * block)
                seconds = self.config.cpu_tier.seconds(loaded * block, self.per_token_bytes)
                self.cpu_loaded_tokens += loaded * block
                self.cpu_transfer_s += seconds
                stall += seconds
        else:
            self.pool.take(plan.new_blocks)
        goal = self.resume_goal[request]
        if plan.swap_in:
            self.swapped[request] = False
            self.swapped_tokens += goal
            if self.cpu is not None:
                self.cpu.unpark(cdiv(goal, block))
            stall += self._swap_seconds(goal)
        else:
            hit_tokens = (len(plan.hit_blocks) + plan.cpu_blocks) * block
            if first:
                self.prefix_prompt += self.prompt_list[request]
                self.prefix_hits += hit_tokens
                self.prefix_cpu_hits += plan.cpu_blocks * block
            else:
                self.prefix_readmit_hits += hit_tokens
                self.recomputed_tokens += goal - hit_tokens
        return stall

    def _swap_seconds(self, tokens: int) -> float:
        if self.cpu is not None:
            return self.config.cpu_tier.seconds(tokens, self.per_token_bytes)
        return tokens / self.config.swap_tokens_per_s

    # ---- preemption ---------------------------------------------------------------------------
    def _preempt_latest(self) -> tuple[int, float]:
        """Preempt the latest admitted running request (paged); returns (the request, stall)."""
        batch = self.batch
        request = batch.latest()
        decoding = batch.state[request] == DECODING
        length = batch.remove(request)
        stall = 0.0
        blocks = -(-length // self.block)
        if self.caching:
            self.pool.release(self.blocks.pop(request))
            self.registered.pop(request, None)
        else:
            self.pool.give(blocks)
        swap = self.config.preemption is Preemption.SWAP and decoding
        if swap and self.cpu is not None:
            swap = self.cpu.park(blocks)
        if decoding:
            self.resume_goal[request] = length
        if swap:
            self.swapped[request] = True
            self.swapped_tokens += length
            stall = self._swap_seconds(length)
            self.stall_s += stall
        self.queue.appendleft(request)
        self.preemptions += 1
        return request, stall

    # ---- one step -----------------------------------------------------------------------------
    def _one_step(self) -> None:
        c, block, batch = self.config, self.block, self.batch
        budget = c.max_num_batched_tokens - batch.decoding
        chunks: dict[int, tuple[int, int, int]] = {}  # running prefills given a chunk: (length, chunk, new length)
        for request in batch.prefilling or ():  # admission order
            length = batch.base[request]
            left = batch.goal[request] - length
            take = min(left, budget)
            if take <= 0 or (not c.chunked_prefill and take < left):
                break
            chunks[request] = (length, take, length + take + (take == left))
            budget -= take
        stall = 0.0
        preempted = False
        grown = 0  # blocks the running requests take before admission
        touched = list(chunks)  # caching: running requests whose computed tokens may fill a block
        if self.paged:
            needs = {request: -(-new // block) + length // -block
                     for request, (length, _, new) in chunks.items()} if chunks else {}
            while (grown := batch.growth(1) + (sum(needs.values()) if needs else 0)) > self.pool.free:
                victim, seconds = self._preempt_latest()
                needs.pop(victim, None)
                chunks.pop(victim, None)
                stall += seconds
                preempted = True
            if self.caching and grown:
                clock, touched = batch.clock, []
                for request in batch.order:
                    count = (needs.get(request, 0) if batch.state[request] != DECODING
                             else (batch.base[request] + clock) % block == 0)
                    if count:
                        self.blocks[request] += self.pool.allocate(int(count))
                    if count or request in chunks:
                        touched.append(request)
            elif grown:
                self.pool.take(grown)
        context = pairs = batch.decode_tokens
        computed = batch.decoding
        for length, take, _ in chunks.values():
            context += length
            pairs += take * length + take * (take + 1) // 2
            computed += take
        # The head's plan from _decode_only still holds when nothing was allocated since.
        plan = self.head_plan if not chunks and self._still_admissible(self.head_plan, grown) else None
        self.head_plan = None
        admitted: list[_Admission] = []
        while (not preempted and self.queue and budget > 0
               and len(batch.order) + len(admitted) < c.max_num_seqs):
            if plan is None:
                plan = self._plan(self.queue[0], budget)
                if plan is None:
                    break
            self.queue.popleft()
            stall += self._admit(plan)
            budget -= plan.chunk
            if not plan.swap_in:
                context += plan.start
                pairs += plan.chunk * plan.start + plan.chunk * (plan.chunk + 1) // 2
                computed += plan.chunk
            admitted.append(plan)
            plan = None
        step_s = c.step_cost.seconds(context=context, computed=computed, pairs=pairs) + stall
        batch.advance(1, batch.growth(1) if self.paged else 0)
        first_tokens = [request for request, (_, _, new) in chunks.items() if batch.prefill_to(request, new)]
        for plan in admitted:
            goal = plan.new_len - 1 if plan.swap_in else self.resume_goal[plan.request]
            batch.admit(plan.request, plan.new_len, goal)
            if plan.new_len > goal:
                first_tokens.append(plan.request)
        self._integrate(step_s)
        self.time += step_s
        self.steps += 1
        self.last_step = (step_s, computed)
        for request in first_tokens:
            if math.isnan(self.first_token_at[request]):
                self.first_token_at[request] = self.time
        if self.caching:
            self._register_computed([request for request in touched if request in batch.order]
                                    + [plan.request for plan in admitted])

    # ---- a stretch of pure decode steps -------------------------------------------------------
    def _decode_only(self) -> bool:
        """True when the next step only decodes: nobody prefills and the head cannot be admitted."""
        batch = self.batch
        if not batch.order or batch.prefilling:
            return False
        if not self.queue:
            return True
        if len(batch.order) >= self.config.max_num_seqs:
            return True
        self.head_plan = self._plan(self.queue[0], self.config.max_num_batched_tokens - len(batch.order))
        return self.head_plan is None

    def _decode_jump(self) -> None:
        c, block, batch = self.config, self.block, self.batch
        # A step takes at most a block per decoding request: only a pool with fewer can run short.
        if self.paged and batch.decoding > self.pool.free and batch.growth(1) > self.pool.free:
            stall = 0.0
            while batch.order and batch.growth(1) > self.pool.free:
                stall += self._preempt_latest()[1]
            self._integrate(stall)
            self.time += stall
            return  # the preempted request may be admissible again: the loop decides
        size = len(batch.order)
        context = batch.decode_tokens
        steps = batch.min_remaining()
        if JUMP_LIMIT is not None:
            steps = min(steps, JUMP_LIMIT)
        if not self.queue and size < c.max_num_seqs:
            wait = self._next_arrival() - self.time
            if math.isfinite(wait):
                steps = min(steps, steps_to_reach(c.step_cost, size, context, wait, steps))
        blocks = 0
        if self.paged:
            blocks = batch.growth(steps)
            if blocks > self.pool.free:
                low, high = 1, steps  # growth(low) fits, growth(high) does not
                while high - low > 1:
                    middle = (low + high) // 2
                    low, high = (middle, high) if batch.growth(middle) <= self.pool.free else (low, middle)
                steps = low
                blocks = batch.growth(steps)
        seconds = decode_seconds(c.step_cost, size, context, steps)
        # Integrals over the steps, each counted at the mean step time (exact for a constant
        # step, a second-order error otherwise); memory figures summed over the steps.
        token_sum = steps * context + size * steps * (steps + 1) // 2
        if self.paged:
            held_sum = token_sum + batch.tail_integral(steps)
            excess = batch.excess * steps
            dup = self._duplicate_slots() * steps if self.caching else 0
            cached = self.pool.cached_free * block if self.caching else 0
            external = self.paged_external
            if self.caching:
                growing = batch.growing(steps)
                for request, count in growing:
                    self.blocks[request] += self.pool.allocate(count)
            else:
                self.pool.take(blocks)
            excess += batch.advance(steps, blocks)
            token_sum, held_sum = token_sum - dup, held_sum - dup
            memory = (token_sum, held_sum - excess, held_sum, held_sum, steps * external, steps * cached)
        else:
            memory = (token_sum, steps * self.final_sum, steps * self.reserved_sum, steps * self.chunk_sum,
                      steps * self._external(), 0)
            batch.advance(steps, 0)
        self.acc.add(seconds / steps, memory, steps * size)
        self.time += seconds
        self.steps += steps
        self.last_step = (seconds / steps, size)
        if self.caching:
            self._register_computed([request for request, _ in growing])

    # ---- completion ---------------------------------------------------------------------------
    def _finish(self) -> None:
        batch, block = self.batch, self.block
        done = batch.pop_done()
        for request in done:
            self.finished_at[request] = self.time
            if self.caching:
                self._register(request, self.final[request] - 1)
                self.pool.release(self.blocks.pop(request))
                self.registered.pop(request, None)
                self.hashes.pop(request, None)
            elif self.paged:
                self.pool.give(-(-self.final[request] // block))
            else:
                self.allocator.release(self.offset.pop(request))
                self.allocator_version += 1
                self.chunk_sum -= self.chunk[request]
                self.reserved_sum -= self.reserved[request]
                self.filled_sum -= self.filled_of[request]
                self.final_sum -= self.final[request]
            for child in self.children.get(request, ()):
                if not self.rejected[child]:
                    self.arrival[child] = self.time + self.think[child]
                    heapq.heappush(self.released, (self.arrival[child], child))
            batch.remove(request)
        self.completed += len(done)
        if self.progress is not None and self.completed / max(self.to_run, 1) - self.last_progress >= PROGRESS_EVERY:
            self.last_progress = self.completed / self.to_run
            self.progress(self.last_progress)

    # ---- the loop -----------------------------------------------------------------------------
    def run(self) -> TimelineResult:
        external = self._external()
        self.samples.append((0.0, 0, 0, 0, external, self.budget - external, 0, 0, 0, 0, 0.0, 0))
        batch, done_heap, arrival = self.batch, self.batch.done_heap, self.root_arrival
        loop = -1
        while self.completed < self.to_run:
            loop += 1
            if self.deadline is not None and loop % DEADLINE_EVERY == 0:
                self.deadline.check(self.completed / max(1, self.to_run))
            # The checks below are _enqueue_arrivals', _finish's and _record's own, inlined: most
            # events have nothing for them.
            if ((self.next_root < len(arrival) and arrival[self.next_root] <= self.time)
                    or (self.released and self.released[0][0] <= self.time)):
                self._enqueue_arrivals()
            if not batch.order and not self.queue:
                upcoming = self._next_arrival()
                if not math.isfinite(upcoming):
                    break  # nothing left that can arrive
                self._integrate(upcoming - self.time)
                self.time = max(self.time, upcoming)
                self._record()
                continue
            if self._decode_only():
                self._decode_jump()
            else:
                self._one_step()
            if done_heap and done_heap[0][0] <= batch.clock:
                self._finish()
            if self.time >= self.next_record_time:
                self._record()
        self._record(force=True)
        if self.progress is not None:
            self.progress(1.0)
        return engine_result(self)


def _takewhile_in(cached, hashes: list[int]):
    """The leading ``hashes`` present in ``cached`` (no side effects)."""
    return itertools.takewhile(cached.__contains__, hashes)

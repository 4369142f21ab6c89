"""The over-time engine: one run's state and its step loop (the model is in :mod:`simulation.timeline`).

Running requests live in parallel int64 arrays in admission order (``run_*``); per-request
arrays (``prompt``, ``final``, ``resume_goal`` …) are indexed by request. A running request
holds ``run_len`` token slots; it is prefilling while ``run_len ≤ run_goal`` (the tokens to
compute before it decodes again) and decoding after. A pure-decode stretch is jumped over in
one go (``_decode_jump``); every other step is simulated on its own (``_one_step``).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from simulation.allocators import chunk_sizes, make_allocator
from simulation.arith import paged_slots
from simulation.block_pool import CachingPool, CountingPool, CpuTier
from simulation.content import block_hashes, output_segment
from simulation.engine_sums import Accumulator, paged_sums, series_from_samples
from simulation.memory import MemoryBreakdown
from simulation.policies import clip_to_context, reservation_tokens
from simulation.run_budget import DEADLINE_EVERY, Deadline
from simulation.timeline_types import Allocation, Preemption, PrefixStats, TimelineConfig, TimelineResult
from simulation.workloads import Workload
from units import cdiv

# vLLM keeps 1 % of the blocks free at admission so that running sequences can grow.
PAGED_WATERMARK = 0.01
# Longest jump over decode steps (None: unlimited; tests set 1 to check the closed forms step by step).
JUMP_LIMIT: int | None = None
PROGRESS_EVERY = 0.01  # how often, in completed requests as a share of all, progress is reported


@dataclass(frozen=True, kw_only=True)
class _Admission:
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
        self.prompt, self.output, self.final = prompt, output, prompt + output
        self.n = n = workload.size
        self.arrival = np.array(workload.arrival_s, dtype=np.float64)
        content = workload.content
        self.parent = content.parent if content is not None else np.full(n, -1, dtype=np.int64)
        self.think = content.think_s if content is not None else np.zeros(n)
        self.segments = content.segments if content is not None else None
        self.children: dict[int, list[int]] = {}
        for child in np.flatnonzero(self.parent >= 0).tolist():
            self.children.setdefault(int(self.parent[child]), []).append(child)
        self.paged = c.allocation is Allocation.PAGED
        self.block = block = c.block_size
        self.budget = c.budget.tokens
        self.per_token_bytes = c.budget.per_token_bytes or 0
        self.cpu: CpuTier | None = None
        self.caching = False
        if self.paged:
            self.total_blocks = self.budget // block
            self.watermark = int(PAGED_WATERMARK * self.total_blocks)
            fits = cdiv(self.final, block) <= self.total_blocks - self.watermark
            if c.cpu_tier is not None:
                self.cpu = CpuTier(c.cpu_tier.capacity_blocks(c.block_bytes))
            self.caching = c.prefix_caching or self.cpu is not None
            self.pool = CachingPool(self.total_blocks, self.cpu) if self.caching else CountingPool(self.total_blocks)
            self.reserved = self.chunk = np.zeros(n, dtype=np.int64)
        else:
            self.allocator = make_allocator(c.address_space, self.budget)
            self.reserved = reservation_tokens(c.allocation.policy, prompt, output, c.max_context)
            self.chunk = chunk_sizes(c.address_space, self.reserved)
            fits = self.chunk <= int(self.allocator.hole_sizes().max())
        rejected = ~fits
        for child in np.flatnonzero(self.parent >= 0).tolist():  # a turn whose history never ran
            rejected[child] |= rejected[self.parent[child]]
        self.rejected = rejected
        self.to_run = int((~rejected).sum())
        roots = np.flatnonzero(~rejected & (self.parent < 0))
        self.roots = roots[np.argsort(self.arrival[roots], kind="stable")]
        self.root_arrival = self.arrival[self.roots]
        self.next_root = 0
        self.released: list[tuple[float, int]] = []  # (arrival, request) of later turns, a heap
        self.queue: deque[int] = deque()
        self.resume_goal = prompt.copy()
        self.swapped = np.zeros(n, dtype=bool)
        self.admitted_at = np.full(n, np.nan)
        self.first_token_at = np.full(n, np.nan)
        self.finished_at = np.full(n, np.nan)
        self.blocks: dict[int, list[int]] = {}  # caching pool: each running request's blocks
        self.hashes: dict[int, list[int]] = {}
        self.registered: dict[int, int] = {}  # full blocks of a running request put in the cache
        self.time = 0.0
        self.steps = 0
        self.admissions = 0
        self.run_id, self.run_len, self.run_goal, self.run_seq = (np.empty(0, dtype=np.int64) for _ in range(4))
        self.run_offset = np.empty(0, dtype=np.int64)
        self.completed = self.preemptions = self.recomputed_tokens = self.swapped_tokens = 0
        self.stall_s = 0.0
        self.prefix_prompt = self.prefix_hits = self.prefix_cpu_hits = self.prefix_readmit_hits = 0
        self.cached_peak = 0
        self.cpu_transfer_s = 0.0
        self.cpu_loaded_tokens = 0
        self.acc = Accumulator()
        self.samples: list[tuple[float, ...]] = []
        span = float(self.root_arrival[-1]) if self.roots.size else 0.0
        self.record_interval = span / (4 * c.series_points)
        self.next_record_time = 0.0
        self.last_progress = 0.0
        self.last_step = (0.0, 0)  # (seconds, tokens) of the latest step, for the series

    # ---- arrivals -----------------------------------------------------------------------------
    def _next_arrival(self) -> float:
        candidates = []
        if self.next_root < self.roots.size:
            candidates.append(self.root_arrival[self.next_root])
        if self.released:
            candidates.append(self.released[0][0])
        return min(candidates) if candidates else math.inf

    def _enqueue_arrivals(self) -> None:
        arrived = int(np.searchsorted(self.root_arrival, self.time, side="right"))
        new = [(self.root_arrival[i], int(self.roots[i])) for i in range(self.next_root, arrived)]
        self.next_root = max(self.next_root, arrived)
        while self.released and self.released[0][0] <= self.time:
            new.append(heapq.heappop(self.released))
        if new:
            new.sort()
            self.queue.extend(request for _, request in new)

    def _arrived_not_queued(self) -> int:
        return (int(np.searchsorted(self.root_arrival, self.time, side="right")) - self.next_root
                + sum(1 for time, _ in self.released if time <= self.time))

    # ---- memory state -------------------------------------------------------------------------
    def _held(self) -> np.ndarray:
        if self.paged:
            return paged_slots(self.run_len, self.block)
        return self.chunk[self.run_id]

    def _duplicate_slots(self) -> int:
        """Slots counted twice when summing requests: shared (always full) cached blocks."""
        if not self.caching:
            return 0
        own = int(cdiv(self.run_len, self.block).sum())
        return (own - (self.total_blocks - self.pool.free)) * self.block

    def _external(self) -> int:
        """Free slots that cannot serve the next request: the paged remainder, or holes."""
        if self.paged:
            return self.budget - self.total_blocks * self.block
        head = self.queue[0] if self.queue else (
            int(self.roots[self.next_root]) if self.next_root < self.roots.size else None)
        if head is None:
            return 0
        holes = self.allocator.hole_sizes()
        return int(holes[holes < self.chunk[head]].sum())

    def _memory(self) -> tuple[int, int, int, int, int, int]:
        """Slots now: (tokens, filled eventually, reserved, allocated, external, cached free)."""
        held = self._held()
        dup = self._duplicate_slots()
        tokens = int(self.run_len.sum()) - dup
        filled = int(np.minimum(held, self.final[self.run_id]).sum()) - dup
        allocated = int(held.sum()) - dup
        reserved = allocated if self.paged else int(self.reserved[self.run_id].sum())
        cached = self.pool.cached_free * self.block if self.caching else 0
        return tokens, filled, reserved, allocated, self._external(), cached

    def _integrate(self, seconds: float, memory: tuple[int, ...] | None = None) -> None:
        if seconds > 0:
            self.acc.add(seconds, memory or self._memory(), self.run_id.size)

    def _record(self, force: bool = False) -> None:
        if not force and self.time < self.next_record_time:
            return
        self.next_record_time = self.time + self.record_interval
        tokens, filled, reserved, allocated, external, cached = self._memory()
        self.samples.append((self.time, tokens, filled - tokens, reserved - filled,
                             allocated - reserved + external, self.budget - allocated - external, cached,
                             self.run_id.size, len(self.queue) + self._arrived_not_queued(), self.preemptions,
                             *self.last_step))
        if self.caching:
            self.cached_peak = max(self.cached_peak, self.pool.cached)

    # ---- prefix caching -----------------------------------------------------------------------
    def _hashes(self, request: int) -> list[int]:
        """Hashes of every full block ``request`` will ever hold (prompt and output)."""
        if request not in self.hashes:
            count = int(self.final[request]) // self.block
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

    # ---- admission ----------------------------------------------------------------------------
    def _plan(self, request: int, budget: int) -> _Admission | None:
        """What admitting ``request`` with ``budget`` tokens left takes, or None if it cannot."""
        c, block = self.config, self.block
        goal = int(self.resume_goal[request])
        if self.swapped[request]:
            need = cdiv(goal, block)
            if need > self.pool.free - self.watermark:
                return None
            return _Admission(request=request, start=goal, hit_blocks=[], cpu_blocks=0, chunk=0, new_len=goal,
                              new_blocks=need, swap_in=True)
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
            if int(self.allocator.hole_sizes().max(initial=0)) < self.chunk[request]:
                return None
            return _Admission(request=request, start=0, hit_blocks=[], cpu_blocks=0, chunk=chunk, new_len=new_len,
                              new_blocks=0, swap_in=False)
        new_blocks = cdiv(new_len, block) - len(hits)
        evictable = self.pool.evictable(hits) if self.caching else 0
        if new_blocks > self.pool.free - evictable - self.watermark:
            return None
        return _Admission(request=request, start=start, hit_blocks=hits, cpu_blocks=cpu_blocks, chunk=chunk,
                          new_len=new_len, new_blocks=new_blocks, swap_in=False)

    def _admit(self, plan: _Admission) -> tuple[int, float]:
        """Take ``plan``'s memory; returns (offset, stall seconds)."""
        request, block = plan.request, self.block
        offset, stall = -1, 0.0
        first = np.isnan(self.admitted_at[request])
        if first:
            self.admitted_at[request] = self.time
        if not self.paged:
            offset = self.allocator.allocate(int(self.chunk[request]))
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
        goal = int(self.resume_goal[request])
        if plan.swap_in:
            self.swapped[request] = False
            self.swapped_tokens += goal
            if self.cpu is not None:
                self.cpu.unpark(cdiv(goal, block))
            stall += self._swap_seconds(goal)
        else:
            hit_tokens = (len(plan.hit_blocks) + plan.cpu_blocks) * block
            if first:
                self.prefix_prompt += int(self.prompt[request])
                self.prefix_hits += hit_tokens
                self.prefix_cpu_hits += plan.cpu_blocks * block
            else:
                self.prefix_readmit_hits += hit_tokens
                self.recomputed_tokens += goal - hit_tokens
        return offset, stall

    def _swap_seconds(self, tokens: int) -> float:
        if self.cpu is not None:
            return self.config.cpu_tier.seconds(tokens, self.per_token_bytes)
        return tokens / self.config.swap_tokens_per_s

    # ---- preemption ---------------------------------------------------------------------------
    def _preempt_latest(self) -> tuple[int, float]:
        """Preempt the latest admitted running request; returns (its index before removal, stall)."""
        victim = int(np.argmax(self.run_seq))
        request, length = int(self.run_id[victim]), int(self.run_len[victim])
        decoding = length > self.run_goal[victim]
        stall = 0.0
        blocks = cdiv(length, self.block)
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
        self._keep(np.arange(self.run_id.size) != victim)
        return victim, stall

    def _keep(self, mask: np.ndarray) -> None:
        for name in ("run_id", "run_len", "run_goal", "run_seq", "run_offset"):
            setattr(self, name, getattr(self, name)[mask])

    # ---- one step -----------------------------------------------------------------------------
    def _one_step(self) -> None:
        c, block = self.config, self.block
        budget = c.max_num_batched_tokens
        decoding = self.run_len > self.run_goal
        new_len = self.run_len + decoding
        chunk = np.zeros(self.run_id.size, dtype=np.int64)
        budget -= int(decoding.sum())
        for index in np.flatnonzero(~decoding).tolist():  # running prefills, in admission order
            left = int(self.run_goal[index] - self.run_len[index])
            take = min(left, budget)
            if take <= 0 or (not c.chunked_prefill and take < left):
                break
            chunk[index] = take
            budget -= take
            new_len[index] = self.run_len[index] + take + (take == left)
        stall = 0.0
        preempted = False
        if self.paged:
            while True:
                need = cdiv(new_len, block) - cdiv(self.run_len, block)
                if int(need.sum()) <= self.pool.free:
                    break
                victim, seconds = self._preempt_latest()
                stall += seconds
                preempted = True
                keep = np.arange(new_len.size) != victim
                new_len, chunk, decoding, need = new_len[keep], chunk[keep], decoding[keep], need[keep]
            if self.caching:
                for request, count in zip(self.run_id.tolist(), need.tolist()):
                    if count:
                        self.blocks[request] += self.pool.allocate(count)
            else:
                self.pool.take(int(need.sum()))
        scheduled = decoding | (chunk > 0)
        context = int(self.run_len[scheduled].sum())
        pairs = int(self.run_len[decoding].sum()) + int((chunk * self.run_len + chunk * (chunk + 1) // 2).sum())
        computed = int(decoding.sum()) + int(chunk.sum())
        admitted: list[tuple[int, int, int, int]] = []  # (request, new length, goal, offset)
        while (not preempted and self.queue and budget > 0
               and self.run_id.size + len(admitted) < c.max_num_seqs):
            plan = self._plan(self.queue[0], budget)
            if plan is None:
                break
            self.queue.popleft()
            offset, seconds = self._admit(plan)
            stall += seconds
            budget -= plan.chunk
            if not plan.swap_in:
                context += plan.start
                pairs += plan.chunk * plan.start + plan.chunk * (plan.chunk + 1) // 2
                computed += plan.chunk
            goal = plan.new_len - 1 if plan.swap_in else int(self.resume_goal[plan.request])
            admitted.append((plan.request, plan.new_len, goal, offset))
        step_s = c.step_cost.seconds(context=context, computed=computed, pairs=pairs) + stall
        finished_prefill = (~decoding) & (new_len > self.run_goal)
        self.run_len = new_len
        if admitted:
            ids, lengths, goals, offsets = (np.asarray(col, dtype=np.int64) for col in zip(*admitted))
            seqs = np.arange(self.admissions, self.admissions + ids.size, dtype=np.int64)
            self.admissions += ids.size
            self.run_id = np.concatenate([self.run_id, ids])
            self.run_len = np.concatenate([self.run_len, lengths])
            self.run_goal = np.concatenate([self.run_goal, goals])
            self.run_seq = np.concatenate([self.run_seq, seqs])
            self.run_offset = np.concatenate([self.run_offset, offsets])
            finished_prefill = np.concatenate([finished_prefill, lengths > goals])
        self._integrate(step_s)
        self.time += step_s
        self.steps += 1
        self.last_step = (step_s, computed)
        newly = self.run_id[finished_prefill]
        unset = np.isnan(self.first_token_at[newly])
        self.first_token_at[newly[unset]] = self.time
        if self.caching:
            computed_tokens = self.run_len - (self.run_len > self.run_goal)
            for request, tokens in zip(self.run_id.tolist(), computed_tokens.tolist()):
                self._register(request, tokens)

    # ---- a stretch of pure decode steps -------------------------------------------------------
    def _decode_only(self) -> bool:
        """True when the next step only decodes: nobody prefills and the head cannot be admitted."""
        if self.run_id.size == 0 or np.any(self.run_len <= self.run_goal):
            return False
        if not self.queue:
            return True
        if self.run_id.size >= self.config.max_num_seqs:
            return True
        return self._plan(self.queue[0], self.config.max_num_batched_tokens - self.run_id.size) is None

    def _first_need(self) -> np.ndarray:
        return paged_slots(self.run_len, self.block) - self.run_len + 1

    def _blocks_needed(self, steps: int, first_need: np.ndarray) -> int:
        return int(np.maximum(0, (steps - first_need) // self.block + 1).sum())

    def _decode_jump(self) -> None:
        c, block = self.config, self.block
        if self.paged and self._blocks_needed(1, self._first_need()) > self.pool.free:
            stall = 0.0
            while self.run_id.size and self._blocks_needed(1, self._first_need()) > self.pool.free:
                stall += self._preempt_latest()[1]
            self._integrate(stall)
            self.time += stall
            return  # the preempted request may be admissible again: the loop decides
        batch = self.run_id.size
        context = int(self.run_len.sum())
        steps = int((self.final[self.run_id] - self.run_len).min())
        if JUMP_LIMIT is not None:
            steps = min(steps, JUMP_LIMIT)
        if not self.queue and batch < c.max_num_seqs:
            wait = self._next_arrival() - self.time
            if math.isfinite(wait):
                steps = min(steps, self._steps_to_reach(batch, context, wait, steps))
        first_need = self._first_need()
        if self.paged and self._blocks_needed(steps, first_need) > self.pool.free:
            low, high = 1, steps  # needed(low) fits, needed(high) does not
            while high - low > 1:
                middle = (low + high) // 2
                low, high = (middle, high) if self._blocks_needed(middle, first_need) <= self.pool.free else (low, middle)
            steps = low
        seconds = c.step_cost.decode_seconds(batch=batch, context=context, steps=steps)
        self._integrate_decode(steps, seconds)
        if self.paged:
            if self.caching:
                grow = cdiv(self.run_len + steps, block) - cdiv(self.run_len, block)
                for request, count in zip(self.run_id.tolist(), grow.tolist()):
                    if count:
                        self.blocks[request] += self.pool.allocate(count)
            else:
                self.pool.take(self._blocks_needed(steps, first_need))
        self.run_len = self.run_len + steps
        self.time += seconds
        self.steps += steps
        self.last_step = (seconds / steps, batch)
        if self.caching:
            for request, tokens in zip(self.run_id.tolist(), (self.run_len - 1).tolist()):
                self._register(request, tokens)

    def _steps_to_reach(self, batch: int, context: int, wait: float, cap: int) -> int:
        """Fewest decode steps (≥ 1, ≤ cap) whose total time reaches ``wait`` seconds."""
        cost = self.config.step_cost
        if cost.is_constant_decode:
            one = cost.decode_seconds(batch=batch, context=context, steps=1)
            return max(1, min(cap, math.ceil(wait / one)))
        counts = np.arange(1, cap + 1)
        total = cost.decode_seconds(batch=batch, context=context, steps=counts)
        return int(min(cap, max(1, np.searchsorted(total, wait) + 1)))

    def _integrate_decode(self, steps: int, seconds: float) -> None:
        """Integrals over ``steps`` decode steps lasting ``seconds`` together (each step counted at
        the mean step time: exact for a constant step, a second-order error otherwise)."""
        step_s = seconds / steps
        lengths, final = self.run_len, self.final[self.run_id]
        token_sum = steps * int(lengths.sum()) + lengths.size * steps * (steps + 1) // 2
        if self.paged:
            held_sum, filled_sum = paged_sums(lengths, final, steps, self.block)
            dup = self._duplicate_slots() * steps
            token_sum, held_sum, filled_sum = token_sum - dup, held_sum - dup, filled_sum - dup
            reserved_sum = held_sum
        else:
            held_sum = steps * int(self.chunk[self.run_id].sum())
            filled_sum = steps * int(final.sum())
            reserved_sum = steps * int(self.reserved[self.run_id].sum())
        cached = self.pool.cached_free * self.block if self.caching else 0
        self.acc.add(step_s, (token_sum, filled_sum, reserved_sum, held_sum, steps * self._external(),
                              steps * cached), steps * lengths.size)

    # ---- completion ---------------------------------------------------------------------------
    def _finish(self) -> None:
        done = self.run_len >= self.final[self.run_id]
        if not done.any():
            return
        for request in self.run_id[done].tolist():
            self.finished_at[request] = self.time
            if self.caching:
                self._register(request, int(self.final[request]) - 1)
                self.pool.release(self.blocks.pop(request))
                self.registered.pop(request, None)
                self.hashes.pop(request, None)
            for child in self.children.get(request, ()):
                if self.rejected[child]:
                    continue
                self.arrival[child] = self.time + self.think[child]
                heapq.heappush(self.released, (self.arrival[child], child))
        if self.paged and not self.caching:
            self.pool.give(int(cdiv(self.run_len[done], self.block).sum()))
        elif not self.paged:
            for offset in self.run_offset[done].tolist():
                self.allocator.release(offset)
        self.completed += int(done.sum())
        self._keep(~done)
        if self.progress is not None and self.completed / max(self.to_run, 1) - self.last_progress >= PROGRESS_EVERY:
            self.last_progress = self.completed / self.to_run
            self.progress(self.last_progress)

    # ---- the loop -----------------------------------------------------------------------------
    def run(self) -> TimelineResult:
        external = self._external()
        self.samples.append((0.0, 0, 0, 0, external, self.budget - external, 0, 0, 0, 0, 0.0, 0))
        for loop in itertools.takewhile(lambda _: self.completed < self.to_run, itertools.count()):
            if self.deadline is not None and loop % DEADLINE_EVERY == 0:
                self.deadline.check(self.completed / max(1, self.to_run))
            self._enqueue_arrivals()
            if self.run_id.size == 0 and not self.queue:
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
            self._finish()
            self._record()
        self._record(force=True)
        if self.progress is not None:
            self.progress(1.0)
        return self._result()

    def _result(self) -> TimelineResult:
        duration = self.time
        span = duration if duration > 0 else 1.0
        tokens, filled, reserved, held, external, _ = (value / span for value in self.acc.memory)
        breakdown = MemoryBreakdown(
            token_states=tokens, reservation=filled - tokens, internal_fragmentation=reserved - filled,
            external_fragmentation=held - reserved + external, free=self.budget - held - external,
        )
        wait = self.admitted_at - self.arrival
        ttft = self.first_token_at - self.arrival
        later = (self.output - 1).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot = np.where(later > 0, (self.finished_at - self.first_token_at) / later, np.nan)
        return TimelineResult(
            config=self.config, completed=self.completed, rejected=int(self.rejected.sum()),
            duration_s=duration, mean_batch_size=self.acc.batch / span,
            token_state_fraction=tokens / self.budget, breakdown=breakdown,
            preemptions=self.preemptions, recomputed_tokens=self.recomputed_tokens,
            swapped_tokens=self.swapped_tokens, preemption_stall_s=self.stall_s,
            wait_s=wait, ttft_s=ttft, tpot_s=tpot,
            mean_step_s=duration / self.steps if self.steps else 0.0, steps=self.steps,
            prefix=self._prefix_stats(), series=series_from_samples(self.samples, self.config.series_points),
        )

    def _prefix_stats(self) -> PrefixStats | None:
        if not self.caching:
            return None
        stats = self.cpu.stats if self.cpu is not None else None
        return PrefixStats(
            prompt_tokens=self.prefix_prompt, hit_tokens=self.prefix_hits, cpu_hit_tokens=self.prefix_cpu_hits,
            readmission_hit_tokens=self.prefix_readmit_hits, evictions=self.pool.evictions,
            cached_blocks_peak=self.cached_peak, cpu_stored_blocks=stats.stored if stats else 0,
            cpu_dropped_blocks=stats.dropped if stats else 0, cpu_loaded_tokens=self.cpu_loaded_tokens,
            cpu_transfer_s=self.cpu_transfer_s)


def _takewhile_in(cached, hashes: list[int]):
    """The leading ``hashes`` present in ``cached`` (no side effects)."""
    return itertools.takewhile(cached.__contains__, hashes)

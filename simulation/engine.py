"""The over-time engine: one run's state and its event loop (the model is in :mod:`simulation.timeline`).

The batch changes only at arrivals, admissions, chunk boundaries, completions and preemptions.
A step that prefills or admits is simulated on its own (``_one_step``); a stretch of pure decode
steps is jumped over in one go (``_decode_jump``) up to the next event: the first completion, the
step that reaches the next arrival (when it could be admitted), or the last step the free blocks
can feed. Running requests live in :class:`~simulation.engine_batch.Batch`, whose running totals
give every figure of a step or a jump without a pass over the batch; per-request state is in
Python lists indexed by request (a NumPy element read costs more than the arithmetic here).

On a paged pool the usual events (nobody prefilling, whole prompts admitted, no preemption) run
in :mod:`simulation.engine_lane`'s loop, which does what the methods here do with less
interpreter work; prefix caching without shared content keeps its blocks in runs
(:class:`~simulation.block_pool.OwnBlockPool`). Tests run every case with and without both and
compare every figure.

Few requests prefill at a step boundary (the loop does not rely on it): a prompt that does not
finish in a step has taken the rest of the step's token budget, so nothing later is admitted in it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from simulation.block_pool import CachingPool, CountingPool, CpuTier, OwnBlockPool
from simulation.engine_arrivals import Arrivals
from simulation.engine_batch import Batch
from simulation.engine_contiguous import ContiguousSpace
from simulation.engine_cost import constant_decode_step, decode_seconds, steps_to_reach
from simulation.engine_lane import run_lane
from simulation.engine_preempt import preempt_latest, swap_seconds
from simulation.engine_prefix import BlockTables
from simulation.engine_result import engine_result
from simulation.engine_sums import Accumulator
from simulation.policies import clip_to_context
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
# Tests set this to False to run prefix caching without shared content on the per-block pool.
OWN_BLOCK_POOL = True
# Tests set this to False to run every event through the general loop, not engine_lane's.
LANE = True
PROGRESS_EVERY = 0.01  # how often, in completed requests as a share of all, progress is reported


# A waiting request the scheduler can admit now, and what admitting it takes, as a plain tuple
# (a NamedTuple costs ~0.5 µs to build, paid at every admission):
#   (request, start, hits, hit_blocks, cpu_blocks, chunk, new_len, new_blocks, swap_in)
# start: tokens already there before the chunk (prefix hits), or the swapped length; hits: cached
# GPU blocks reused, hit_blocks: which ones (the per-block pool; () otherwise); cpu_blocks: further
# blocks copied back from the CPU tier; chunk: prompt tokens computed this step; new_len: slots
# held after the step; new_blocks: blocks to allocate (paged); swap_in: a swapped request returns.
_Admission = tuple[int, int, int, "tuple[int, ...] | list[int]", int, int, int, int, bool]


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
        content = workload.content
        parent = content.parent if content is not None else np.full(n, -1, dtype=np.int64)
        self.segments = content.segments if content is not None else None
        self.paged = c.allocation is Allocation.PAGED
        self.block = block = c.block_size
        self.budget = c.budget.tokens
        self.per_token_bytes = c.budget.per_token_bytes or 0
        self.cpu: CpuTier | None = None
        self.caching = self.own_blocks = False
        self.constant_decode = c.step_cost.is_constant_decode
        self.per_block = False  # prefix caching on the per-block pool (requests may share blocks)
        if self.paged:
            self.total_blocks = self.budget // block
            self.paged_external = self.budget - self.total_blocks * block  # the budget's remainder
            self.watermark = int(PAGED_WATERMARK * self.total_blocks)
            fits = cdiv(final, block) <= self.total_blocks - self.watermark
            if c.cpu_tier is not None:
                self.cpu = CpuTier(c.cpu_tier.capacity_blocks(c.block_bytes))
            self.caching = c.prefix_caching or self.cpu is not None
            # Without shared content a cached block only serves its own request again: runs of
            # blocks stand for the blocks (swap-in re-registers blocks whose copies are still
            # cached, which runs cannot say; the CPU tier keeps hashes one by one).
            self.own_blocks = (self.caching and OWN_BLOCK_POOL and self.segments is None and self.cpu is None
                               and c.preemption is Preemption.RECOMPUTE)
            self.per_block = self.caching and not self.own_blocks
            if self.own_blocks:
                self.pool = OwnBlockPool(self.total_blocks)
            elif self.caching:
                self.pool = CachingPool(self.total_blocks, self.cpu)
                self.tables = BlockTables(self.pool, self.cpu, block, self.final, output.tolist(), self.segments)
            else:
                self.pool = CountingPool(self.total_blocks)
        else:
            self.pool = None
            self.space = ContiguousSpace(c, prompt, output, final)
            fits = self.space.fits
        rejected = ~fits
        for child in np.flatnonzero(parent >= 0).tolist():  # a turn whose history never ran
            rejected[child] |= rejected[parent[child]]
        self.rejected = rejected
        self.to_run = int((~rejected).sum())
        self.arrival = np.array(workload.arrival_s, dtype=np.float64)  # later turns' set as they arrive
        think = content.think_s if content is not None else np.zeros(n)
        # Prefilled arrivals (a decode pool): the requests still to be admitted for the first time,
        # each arriving once its KV has crossed the link (a later turn's too).
        self.prefilled: list[bool] | None = None
        if c.arrive_prefilled:
            self.prefilled = [True] * n
            self.arrival += c.transfer_delay_s
            think = think + c.transfer_delay_s
        self.arrivals = Arrivals(self.arrival, parent, think, rejected)
        self.queue, self.children = self.arrivals.queue, self.arrivals.children
        self.resume_goal = prompt.tolist()
        self.prompt_list = self.resume_goal.copy()
        self.swapped = [False] * n
        self.admitted_at, self.first_token_at, self.finished_at = ([math.nan] * n for _ in range(3))
        self.time = 0.0
        self.steps = 0
        self.computed_tokens = 0  # tokens the steps computed
        self.peak_allocated = 0  # most slots allocated after a step
        self.batch = Batch(self.final, block, self.paged)
        self.head_plan: _Admission | None = None  # what _decode_only found for the head of the queue
        self.completed = self.preemptions = self.recomputed_tokens = self.swapped_tokens = 0
        self.stall_s = 0.0
        self.prefix_prompt = self.prefix_hits = self.prefix_cpu_hits = self.prefix_readmit_hits = 0
        self.cached_peak = 0
        self.cpu_transfer_s = 0.0
        self.cpu_loaded_tokens = 0
        self.acc = Accumulator(paged=self.paged)
        self.samples: list[tuple[float, ...]] = []
        self.record_interval = self.arrivals.last_first_turn / (4 * c.series_points)
        self.next_record_time = 0.0
        self.last_progress = 0.0
        self.last_step = (0.0, 0)  # (seconds, tokens) of the latest step, for the series

    # ---- memory state -------------------------------------------------------------------------
    def _duplicate_slots(self) -> int:
        """Slots counted twice when summing requests: shared (always full) cached blocks (none
        when no request shares a block: without caching, or with OwnBlockPool)."""
        if not self.per_block:
            return 0
        return (self.batch.held // self.block - (self.total_blocks - self.pool.free)) * self.block

    def _holes(self) -> tuple[int, int]:
        """Contiguous: (free slots in holes too small for the head of the line, largest hole)."""
        return self.space.holes(self.arrivals.head())

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
            space = self.space
            return (decode_tokens + batch.pre_len, space.filled_sum, space.reserved_sum, space.chunk_sum,
                    self._holes()[0], 0)
        dup = self._duplicate_slots() if self.per_block else 0
        held = decode_tokens + batch.tail + batch.pre_held - dup
        cached = self.pool.cached_free * self.block if self.caching else 0
        return (decode_tokens + batch.pre_len - dup, held - batch.excess + batch.pre_filled - batch.pre_held,
                held, held, self.paged_external, cached)

    def _verify(self) -> None:
        """The running totals against sums over the running requests."""
        self.batch.verify()
        if self.own_blocks:  # no request shares a block
            assert self.batch.held // self.block == self.total_blocks - self.pool.free
        if not self.paged:
            assert self.space.chunk_sum == sum(self.space.chunk[request] for request in self.batch.order)

    def _integrate(self, seconds: float, memory: tuple[int, ...] | None = None) -> None:
        if seconds > 0:
            self.acc.add(seconds, memory or self._memory(), len(self.batch.order))

    def _record(self, force: bool = False) -> None:
        if not force and self.time < self.next_record_time:
            return
        self.next_record_time = self.time + self.record_interval
        tokens, filled, reserved, allocated, external, cached = self._memory()
        waiting = len(self.queue) + self.arrivals.arrived_not_queued(self.time)
        self.samples.append((self.time, tokens, filled - tokens, reserved - filled,
                             allocated - reserved + external, self.budget - allocated - external, cached,
                             len(self.batch.order), waiting, self.preemptions, *self.last_step))
        if self.caching:
            self.cached_peak = max(self.cached_peak, self._cached_blocks())

    def _cached_blocks(self) -> int:
        """Blocks registered in the cache, in use or free."""
        if not self.own_blocks:
            return self.pool.cached
        # A running request has registered its computed full blocks: (length − 1) // B when
        # decoding, that is ⌈length / B⌉ − 1, and length // B while it prefills.
        batch, block = self.batch, self.block
        running = (batch.decode_tokens + batch.tail) // block - batch.decoding
        running += sum(batch.base[request] // block for request in batch.prefilling)
        return self.pool.cached_free + running

    # ---- admission ----------------------------------------------------------------------------
    def _plan(self, request: int, budget: int) -> _Admission | None:
        """What admitting ``request`` with ``budget`` tokens left takes, or None if it cannot."""
        c, block = self.config, self.block
        goal = self.resume_goal[request]
        if self.swapped[request]:
            need = -(-goal // block)
            if need > self.pool.free - self.watermark:
                return None
            return (request, goal, 0, (), 0, 0, goal, need, True)
        if self.prefilled is not None and self.prefilled[request]:
            return self._plan_prefilled(request, goal)
        hits, hit_blocks, cpu_blocks, evictable = 0, (), 0, 0
        if self.own_blocks:
            # All its cached blocks are free (it is not running); the last token is never a hit.
            hits = evictable = min(self.pool.cached_of(request), (goal - 1) // block)
        elif self.caching:  # the last token is never a hit
            hit_blocks, cpu_blocks, evictable = self.tables.lookup(request, (goal - 1) // block)
            hits = len(hit_blocks)
        start = (hits + cpu_blocks) * block
        chunk = min(goal - start, budget)
        if not c.chunked_prefill and chunk < goal - start:
            return None
        new_len = start + chunk + (start + chunk == goal)
        if not self.paged:
            if self._holes()[1] < self.space.chunk[request]:
                return None
            return (request, 0, 0, (), 0, chunk, new_len, 0, False)
        new_blocks = -(-new_len // block) - hits
        if new_blocks > self.pool.free - evictable - self.watermark:
            return None
        return (request, start, hits, hit_blocks, cpu_blocks, chunk, new_len, new_blocks, False)

    def _plan_prefilled(self, request: int, goal: int) -> _Admission | None:
        """A prefilled arrival's first admission (``goal``: its prompt): the KV of all but the
        last prompt token is there; the step computes that token, whose output is the first
        token, so the request holds ``goal + 1`` slots, allocated now."""
        if not self.paged:
            if self._holes()[1] < self.space.chunk[request]:
                return None
            return (request, goal - 1, 0, (), 0, 1, goal + 1, 0, False)
        new_blocks = -(-(goal + 1) // self.block)
        if new_blocks > self.pool.free - self.watermark:
            return None
        return (request, goal - 1, 0, (), 0, 1, goal + 1, new_blocks, False)

    def _still_admissible(self, plan: _Admission | None, grown: int) -> bool:
        """Whether ``plan`` (made before the running requests took ``grown`` blocks) still holds."""
        if plan is None:
            return False
        hits, new_blocks = plan[2], plan[7]
        if grown and self.caching and (hits or not self.own_blocks):
            # A cached block the plan reuses may have been evicted (or, with a CPU tier, a block
            # evicted to it may now be a hit); a plan with no hits on OwnBlockPool only counts blocks.
            return False
        return not grown or new_blocks <= self.pool.free - self.watermark

    def _admit(self, plan: _Admission) -> float:
        """Take ``plan``'s memory and start running it; returns the stall seconds."""
        request, _, hits, hit_blocks, cpu_blocks, _, _, new_blocks, swap_in = plan
        block, stall = self.block, 0.0
        first = math.isnan(self.admitted_at[request])
        if self.prefilled is not None:
            self.prefilled[request] = False  # a readmission after a preemption recomputes its KV here
        if first:
            self.admitted_at[request] = self.time
        if self.paged and not self.caching:
            self.pool.take(new_blocks)
        elif self.own_blocks:
            if hits:
                self.pool.touch(request, hits)
            self.pool.take(new_blocks)
        elif self.caching:
            loaded = self.tables.admit(request, hit_blocks, new_blocks, cpu_blocks)
            if cpu_blocks:
                seconds = self.config.cpu_tier.seconds(loaded * block, self.per_token_bytes)
                self.cpu_loaded_tokens += loaded * block
                self.cpu_transfer_s += seconds
                stall += seconds
        else:
            self.space.admit(request)
        goal = self.resume_goal[request]
        if swap_in:
            self.swapped[request] = False
            self.swapped_tokens += goal
            if self.cpu is not None:
                self.cpu.unpark(cdiv(goal, block))
            stall += swap_seconds(self, goal)
        else:
            hit_tokens = (hits + cpu_blocks) * block
            if first:
                self.prefix_prompt += self.prompt_list[request]
                self.prefix_hits += hit_tokens
                self.prefix_cpu_hits += cpu_blocks * block
            else:
                self.prefix_readmit_hits += hit_tokens
                self.recomputed_tokens += goal - hit_tokens
        return stall

    # ---- one step -----------------------------------------------------------------------------
    def _one_step(self) -> None:
        """A step that prefills or admits: running prefills take their chunks and the running
        requests their blocks (the latest admitted are preempted while the pool is short), then
        waiting requests are admitted in order while the token budget, ``max_num_seqs`` and
        memory allow."""
        c, batch = self.config, self.batch
        budget = c.max_num_batched_tokens - batch.decoding
        chunks: dict[int, tuple[int, int, int]] = {}  # running prefills given a chunk: (length, chunk, new length)
        stall, preempted, grown, decode_blocks, touched = 0.0, False, 0, 0, ()
        if batch.prefilling:
            chunks, budget = self._prefill_chunks(budget)
        if self.paged:
            if chunks or self.per_block or (decode_blocks := batch.growth(1)) > self.pool.free:
                stall, preempted, grown, decode_blocks, touched = self._step_blocks(chunks)
            elif decode_blocks:  # the usual step: only decoding requests take blocks, and they are free
                self.pool.take(decode_blocks)
                grown = decode_blocks
        context = pairs = batch.base_sum + batch.decoding * batch.clock
        computed = batch.decoding
        for length, take, _ in chunks.values():
            context += length
            pairs += take * length + take * (take + 1) // 2
            computed += take
        # The head's plan from _decode_only still holds when nothing was allocated since.
        plan, self.head_plan = self.head_plan, None
        if chunks or (grown and not self._still_admissible(plan, grown)):
            plan = None
        admitted: list[_Admission] = []
        queue, room = self.queue, c.max_num_seqs - len(batch.order)
        while not preempted and queue and budget > 0 and room > 0:
            if plan is None:
                plan = self._plan(queue[0], budget)
                if plan is None:
                    break
            queue.popleft()
            stall += self._admit(plan)
            _, start, _, _, _, chunk, _, _, swap_in = plan
            budget -= chunk
            if not swap_in:
                context += start
                pairs += chunk * start + chunk * (chunk + 1) // 2
                computed += chunk
            admitted.append(plan)
            room -= 1
            plan = None
        if self.constant_decode:  # StepCost.seconds with no context terms: 0.0 × context adds nothing
            fixed, compute = c.step_cost.fixed_s, c.step_cost.per_token_s * computed
            step_s = (compute if compute > fixed else fixed) + stall
        else:
            step_s = c.step_cost.seconds(context=context, computed=computed, pairs=pairs) + stall
        batch.advance(1, decode_blocks)
        self.time = time = self.time + step_s
        first_token_at = self.first_token_at  # the step that finishes a prompt yields its first token
        for request, (_, _, new) in chunks.items():
            if batch.prefill_to(request, new) and math.isnan(first_token_at[request]):
                first_token_at[request] = time
        for request, _, _, _, _, _, new_len, _, swap_in in admitted:
            goal = new_len - 1 if swap_in else self.resume_goal[request]
            batch.admit(request, new_len, goal)
            if new_len > goal and math.isnan(first_token_at[request]):
                first_token_at[request] = time
        memory = self._memory()
        if step_s > 0:
            self.acc.add(step_s, memory, len(batch.order))
        if memory[3] > self.peak_allocated:
            self.peak_allocated = memory[3]
        self.steps += 1
        self.computed_tokens += computed
        self.last_step = (step_s, computed)
        if self.per_block:
            order = batch.order
            self.tables.register_computed(batch, [request for request in touched if request in order]
                                          + [plan[0] for plan in admitted])

    def _prefill_chunks(self, budget: int) -> tuple[dict[int, tuple[int, int, int]], int]:
        """Chunks of the running prefills, in admission order while ``budget`` tokens last:
        ``{request: (length, chunk, new length)}`` and the tokens left."""
        batch, chunked = self.batch, self.config.chunked_prefill
        chunks: dict[int, tuple[int, int, int]] = {}
        for request in batch.prefilling:
            length = batch.base[request]
            left = batch.goal[request] - length
            take = min(left, budget)
            if take <= 0 or (not chunked and take < left):
                break
            chunks[request] = (length, take, length + take + (take == left))
            budget -= take
        return chunks, budget

    def _step_blocks(self, chunks: dict[int, tuple[int, int, int]]) -> tuple[float, bool, int, int, list[int]]:
        """Paged: give the running requests the blocks this step needs, preempting the latest
        admitted while the pool is short (their chunks leave ``chunks``). Returns (stall s,
        preempted, blocks taken, of which by decoding requests, the requests whose computed
        tokens may fill a block: per-block prefix caching registers them after the step)."""
        batch, block = self.batch, self.block
        touched = list(chunks)
        needs = {request: -(-new // block) + length // -block for request, (length, _, new) in chunks.items()}
        need = sum(needs.values())
        stall, preempted = 0.0, False
        while (decode := batch.growth(1)) + need > self.pool.free:
            victim, seconds = preempt_latest(self)
            need -= needs.pop(victim, 0)
            chunks.pop(victim, None)
            stall += seconds
            preempted = True
        grown = decode + need
        if self.per_block and grown:
            touched = self.tables.grow_step(batch, needs, chunks)
        elif grown:
            self.pool.take(grown)
        return stall, preempted, grown, decode, touched

    # ---- a stretch of pure decode steps -------------------------------------------------------
    def _decode_only(self) -> bool:
        """True when the next step only decodes: nobody prefills and the head cannot be admitted
        (its plan, when it can, is kept for the step)."""
        batch = self.batch
        size = len(batch.order)
        if not size or batch.prefilling:
            return False
        c, queue = self.config, self.queue
        if not queue or size >= c.max_num_seqs:
            return True
        self.head_plan = plan = self._plan(queue[0], c.max_num_batched_tokens - size)
        return plan is None

    def _decode_jump(self) -> None:
        """Run the pure decode steps up to the next event in one go: the first completion, the
        step that reaches the next arrival (when the batch could take it), or the last step the
        free blocks can feed (a pool too short for one step preempts instead)."""
        c, batch, pool = self.config, self.batch, self.pool
        paged = self.paged
        # A step takes at most a block per decoding request: only a pool with fewer can run short.
        if paged and batch.decoding > pool.free and batch.growth(1) > pool.free:
            self._preempt_for_decode()
            return  # the preempted request may be admissible again: the loop decides
        size = len(batch.order)
        context = batch.base_sum + batch.decoding * batch.clock
        steps = batch.min_remaining()
        if JUMP_LIMIT is not None:
            steps = min(steps, JUMP_LIMIT)
        if not self.queue and size < c.max_num_seqs:
            wait = self.arrivals.upcoming - self.time
            if math.isfinite(wait):
                steps = min(steps, steps_to_reach(c.step_cost, size, context, wait, steps))
        if self.constant_decode:
            seconds = constant_decode_step(c.step_cost, size) * steps
        if paged:
            blocks, tail_sum = batch.growth_and_tail(steps)
            if blocks > pool.free:
                steps = self._steps_fed(steps)
                blocks, tail_sum = batch.growth_and_tail(steps)
                if self.constant_decode:
                    seconds = constant_decode_step(c.step_cost, size) * steps
        if not self.constant_decode:
            seconds = decode_seconds(c.step_cost, size, context, steps)
        # Integrals over the steps, each counted at the mean step time (exact for a constant
        # step, a second-order error otherwise); memory figures summed over the steps.
        token_sum = steps * context + size * steps * (steps + 1) // 2
        growing = None  # per-block prefix caching: the requests that take blocks
        if paged:
            held_sum = token_sum + tail_sum
            excess = batch.excess * steps
            dup = self._duplicate_slots() * steps if self.per_block else 0
            cached = pool.cached_free * self.block if self.caching else 0
            if self.per_block:
                growing = batch.growing(steps)
                self.tables.grow(growing)
            elif blocks:
                pool.take(blocks)
            excess += batch.advance(steps, blocks)
            token_sum, held_sum = token_sum - dup, held_sum - dup
            memory = (token_sum, held_sum - excess, held_sum, held_sum, steps * self.paged_external, steps * cached)
        else:
            space = self.space
            memory = (token_sum, steps * space.final_sum, steps * space.reserved_sum, steps * space.chunk_sum,
                      steps * self._external(), 0)
            batch.advance(steps, 0)
        self.acc.add(seconds / steps, memory, steps * size)
        if paged:  # memory grows over a jump: its last step holds the most (contiguous chunks stay)
            held = batch.held - (self._duplicate_slots() if self.per_block else 0)
            if held > self.peak_allocated:
                self.peak_allocated = held
        self.time += seconds
        self.steps += steps
        self.computed_tokens += steps * size
        self.last_step = (seconds / steps, size)
        if growing:
            self.tables.register_computed(batch, [request for request, _ in growing])

    def _steps_fed(self, steps: int) -> int:
        """Most decode steps (< ``steps``, ≥ 1) the free blocks can feed."""
        batch, free = self.batch, self.pool.free
        low, high = 1, steps  # growth(low) fits, growth(high) does not
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (middle, high) if batch.growth(middle) <= free else (low, middle)
        return low

    def _preempt_for_decode(self) -> None:
        """Preempt the latest admitted until the pool feeds one decode step (swaps stall)."""
        batch, stall = self.batch, 0.0
        while batch.order and batch.growth(1) > self.pool.free:
            stall += preempt_latest(self)[1]
        self._integrate(stall)
        self.time += stall

    # ---- completion ---------------------------------------------------------------------------
    def _finish(self) -> None:
        """Finish the requests that reached their final length: free their memory and release
        the next turns of their conversations."""
        batch, block, time = self.batch, self.block, self.time
        done = batch.pop_done()
        for request in done:
            self.finished_at[request] = time
            final = self.final[request]
            if self.own_blocks:  # decoding at its final length: final − 1 tokens computed
                self.pool.release(request, -(-final // block), (final - 1) // block)
            elif self.caching:
                self.tables.finish(request)
            elif self.paged:
                self.pool.give(-(-final // block))
            else:
                self.space.release(request)
            if request in self.children:
                self.arrivals.release_children(request, time)
            batch.remove(request)
        self.completed += len(done)
        if self.progress is not None:
            self._report_progress()

    def _report_progress(self) -> None:
        """Call ``progress`` when another ``PROGRESS_EVERY`` of the requests has finished."""
        if self.completed / max(self.to_run, 1) - self.last_progress >= PROGRESS_EVERY:
            self.last_progress = self.completed / self.to_run
            self.progress(self.last_progress)

    # ---- the loop -----------------------------------------------------------------------------
    def run(self) -> TimelineResult:
        external = self._external()
        self.samples.append((0.0, 0, 0, 0, external, self.budget - external, 0, 0, 0, 0, 0.0, 0))
        batch, done_heap, arrivals = self.batch, self.batch.done_heap, self.arrivals
        # The usual events run in engine_lane's loop: a paged pool without a per-block cache, its
        # per-residue counts in a list.
        lane = LANE and self.paged and not self.per_block and batch.counts is not None
        loop = -1
        while self.completed < self.to_run:
            loop += 1
            if self.deadline is not None and loop % DEADLINE_EVERY == 0:
                self.deadline.check(self.completed / max(1, self.to_run))
            # The checks below are _finish's and _record's own, inlined: most events have nothing
            # for them.
            if arrivals.upcoming <= self.time:
                arrivals.enqueue(self.time)
            if lane and batch.order and not batch.prefilling:
                run_lane(self, JUMP_LIMIT, VERIFY_TOTALS)  # back at an iteration it leaves to us
                if self.completed >= self.to_run:
                    break
            if not batch.order and not self.queue:
                upcoming = arrivals.upcoming
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


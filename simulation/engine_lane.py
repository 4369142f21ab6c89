"""The over-time engine's usual events on a paged pool, run in one loop.

Most events of a long run are alike: nobody is prefilling, the batch decodes until the next
completion (or, with nobody waiting, the next arrival), a completion frees its blocks, and the
next step admits waiting requests whose prompts fit the step whole. :func:`run_lane` runs those
events in one loop with the engine's and the batch's bookkeeping written out in place. It does
the same operations, in the same order, as ``Engine._decode_only``/``_plan``/``_admit``/
``_one_step``, ``Engine._decode_jump``, ``Engine._finish`` and the
:class:`~simulation.engine_batch.Batch` methods they call, so every figure comes out bit for bit
the same (tests run each case both ways), in about half the time: in CPython the calls, tuples
and branches for rare cases cost more than an event's arithmetic.

It hands back to the engine's loop at the start of the first iteration it does not cover, before
anything has changed: an empty batch, a prefill that takes a chunk, a head that cannot be
admitted whole in the step (its prompt longer than the step's token budget, a swapped request, a
readmission that hits cached blocks), a preemption, or a jump the free blocks cut short. The
engine runs it only with a paged pool without a per-block prefix cache and blocks of at most
``DENSE_BLOCK`` tokens (per-residue counts in a list).
"""

from __future__ import annotations

import heapq
import math
from operator import mul
from typing import TYPE_CHECKING

from simulation.engine_batch import DECODING, IDLE
from simulation.engine_cost import constant_decode_step, decode_seconds, steps_to_reach
from simulation.run_budget import DEADLINE_EVERY

if TYPE_CHECKING:
    from simulation.engine import Engine


def run_lane(e: Engine, jump_limit: int | None, verify: bool) -> None:
    """Advance ``e`` while its events are the usual ones (see the module docstring);
    ``jump_limit`` and ``verify`` are the engine's test hooks (longest jump, check the running
    totals)."""
    b, c, pool = e.batch, e.config, e.pool
    block, own, caching = e.block, e.own_blocks, e.caching
    cost, constant = c.step_cost, e.constant_decode
    max_seqs, max_tokens, watermark, external = c.max_num_seqs, c.max_num_batched_tokens, e.watermark, e.paged_external
    queue, order, counts, memo = e.queue, b.order, b.counts, b.memo
    base, seqs, state, goals, in_last, final = b.base, b.seq, b.state, b.goal, b.in_last, b.final
    done_heap, last_heap, acc = b.done_heap, b.last_heap, e.acc
    totals = acc.totals
    resume_goal, swapped, prompt, prefilled = e.resume_goal, e.swapped, e.prompt_list, e.prefilled
    admitted_at, first_token_at, finished_at = e.admitted_at, e.first_token_at, e.finished_at
    own_runs = pool.runs if own else {}
    arrivals, children = e.arrivals, e.children
    full_step = constant_decode_step(cost, max_seqs) if constant else 0.0  # a full batch's decode step
    heappush, heappop, isnan = heapq.heappush, heapq.heappop, math.isnan
    admitted: list[tuple[int, int, int, int]] = []  # (request, goal, prompt chunk, blocks) of a step
    loop = 0
    while e.completed < e.to_run:
        # ---- the top of Engine.run's loop: the deadline, arrivals ----
        loop += 1
        if e.deadline is not None and loop % DEADLINE_EVERY == 0:
            e.deadline.check(e.completed / max(1, e.to_run))
        if arrivals.upcoming <= e.time:
            arrivals.enqueue(e.time)
        size = len(order)
        if not size or b.prefilling:
            return  # an empty batch waits or admits, a prefill takes its chunk: the engine's loop
        clock, free = b.clock, pool.free
        admitted.clear()
        if queue and size < max_seqs:
            # The plans of the heads the step admits whole, before anything changes
            # (_decode_only plans the head, _one_step the others; the head's plan must survive
            # the running requests' new blocks, as _still_admissible checks).
            budget = max_tokens - size  # nobody prefills: every running request decodes
            grow = counts[-clock % block]  # Batch.growth(1)
            room, left = max_seqs - size, free - grow
            for request in queue:
                if not room or budget <= 0:
                    break
                goal = resume_goal[request]
                if swapped[request] or (own and request in own_runs and (goal - 1) // block):
                    return  # a swap-in, or a readmission that hits its cached blocks
                if prefilled and prefilled[request]:
                    return  # a prefilled arrival computes one token of its prompt: Engine._plan_prefilled
                chunk = goal if goal <= budget else budget
                if chunk < goal:
                    return  # it would still prefill after the step
                blocks = -(-(goal + 1) // block)  # the prompt and the first output token
                if not admitted and blocks > free - watermark:
                    break  # _decode_only finds the head blocked: a jump instead
                if grow > free:
                    return  # _one_step preempts
                if blocks > left - watermark:
                    if not admitted:
                        return  # the step's own blocks leave too few for the head
                    break
                admitted.append((request, goal, chunk, blocks))
                left -= blocks
                budget -= chunk
                room -= 1
        if admitted:
            # ---- the step that admits them (_one_step) ----
            # Commit: the running requests' blocks, then each admission (Engine._admit).
            if grow:
                if own:
                    pool.take(grow)
                else:  # CountingPool.take: the plans above checked the count
                    pool.free -= grow
            time = e.time
            context = pairs = b.base_sum + b.decoding * clock
            computed = b.decoding
            for request, goal, chunk, blocks in admitted:
                queue.popleft()
                first = isnan(admitted_at[request])
                if first:
                    admitted_at[request] = time
                if own:
                    pool.take(blocks)
                else:
                    pool.free -= blocks
                if first:
                    e.prefix_prompt += prompt[request]
                else:
                    e.recomputed_tokens += goal
                pairs += chunk * (chunk + 1) // 2
                computed += chunk
            if constant:  # StepCost.seconds with no context terms (see _one_step)
                fixed, compute = cost.fixed_s, cost.per_token_s * computed
                step_s = (compute if compute > fixed else fixed) + 0.0
            else:
                step_s = cost.seconds(context=context, computed=computed, pairs=pairs) + 0.0
            # Batch.advance(1, grow): its partial last-block sum is not used by a step.
            clock += 1
            b.clock = clock
            b.tail += grow * block - b.decoding
            if last_heap and last_heap[0][0] <= clock:
                b.enter_last_blocks()
            e.time = time = time + step_s
            for request, goal, _, _ in admitted:  # Batch.admit, decoding from goal + 1 tokens
                length = goal + 1
                b.seq[request] = seq = b.admissions
                b.admissions = seq + 1
                goals[request] = goal
                order[request] = None
                end = final[request]
                start = length - clock
                state[request] = DECODING
                base[request] = start
                b.decoding += 1
                b.base_sum += start
                heappush(done_heap, (end - start, seq, request))
                counts[start % block] += 1
                b.tail += -length % block
                excess = -end % block
                if excess:
                    last_start = end + excess - block
                    if length > last_start:
                        b.excess += excess
                        in_last[request] = 1
                    else:
                        heappush(last_heap, (last_start + 1 - start, seq, request))
                if isnan(first_token_at[request]):
                    first_token_at[request] = time
            if step_s > 0:  # Accumulator.add of Engine._memory
                if verify:
                    e._verify()
                # Nobody prefills, so the batch's prefill sums (pre_len, pre_held, pre_filled) are 0.
                tokens = b.base_sum + b.decoding * clock
                held = tokens + b.tail
                cached = pool.cached_free * block if caching else 0
                totals[0] += step_s * tokens
                totals[1] += step_s * (held - b.excess)
                totals[2] += step_s * held
                if external:
                    totals[4] += step_s * external
                if cached:
                    totals[5] += step_s * cached
                acc.batch += step_s * len(order)
            held = b.base_sum + b.decoding * clock + b.tail  # Engine._one_step's peak
            if held > e.peak_allocated:
                e.peak_allocated = held
            e.steps += 1
            e.computed_tokens += computed
            e.last_step = (step_s, computed)
        else:
            # ---- a decode jump to the next completion, or arrival (_decode_jump) ----
            if b.decoding > free and counts[-clock % block] > free:
                return  # _decode_jump preempts
            context = b.base_sum + b.decoding * clock
            while True:  # Batch.min_remaining: stale entries dropped
                done, seq, request = done_heap[0]
                if seqs[request] == seq and state[request] == DECODING:
                    break
                heappop(done_heap)
            steps = done - clock
            if jump_limit is not None:
                steps = min(steps, jump_limit)
            if not queue and size < max_seqs:
                wait = arrivals.upcoming - e.time
                if math.isfinite(wait):
                    steps = min(steps, steps_to_reach(cost, size, context, wait, steps))
            tables = memo.get(steps * block + -clock % block) or b._tables(steps)
            blocks = sum(map(mul, counts, tables[0]))
            if blocks > free:
                return  # fewer steps than the completion: _decode_jump searches them
            tail_sum = sum(map(mul, counts, tables[1]))
            if constant:  # constant_decode_step
                if size == max_seqs:
                    seconds = full_step * steps
                else:
                    fixed, compute = cost.fixed_s, cost.per_token_s * size
                    seconds = (fixed if fixed >= compute else compute) * steps
            else:
                seconds = decode_seconds(cost, size, context, steps)
            token_sum = steps * context + size * steps * (steps + 1) // 2
            held_sum = token_sum + tail_sum
            excess = b.excess * steps
            cached = pool.cached_free * block if caching else 0
            if blocks:
                if own:
                    pool.take(blocks)
                else:  # CountingPool.take: checked above
                    pool.free -= blocks
            clock += steps  # Batch.advance(steps, blocks)
            b.clock = clock
            b.tail += blocks * block - steps * b.decoding
            if last_heap and last_heap[0][0] <= clock:
                excess += b.enter_last_blocks()
            mean = seconds / steps
            totals[0] += mean * token_sum
            totals[1] += mean * (held_sum - excess)
            totals[2] += mean * held_sum
            if external:
                totals[4] += mean * (steps * external)
            if cached:
                totals[5] += mean * (steps * cached)
            acc.batch += mean * (steps * size)
            held = b.base_sum + b.decoding * clock + b.tail  # Engine._decode_jump's peak
            if held > e.peak_allocated:
                e.peak_allocated = held
            e.time += seconds
            e.steps += steps
            e.computed_tokens += steps * size
            e.last_step = (seconds / steps, size)
        # ---- the completions at this clock (_finish, Batch.pop_done, Batch.remove), then a sample ----
        if done_heap and done_heap[0][0] <= clock:
            done = []
            while done_heap and done_heap[0][0] <= clock:
                _, seq, request = heappop(done_heap)
                if seqs[request] == seq and state[request] == DECODING:
                    done.append(request)
            if len(done) > 1:
                done.sort(key=seqs.__getitem__)
            time = e.time
            for request in done:
                finished_at[request] = time
                end = final[request]
                if own:  # final − 1 tokens computed
                    pool.release(request, -(-end // block), (end - 1) // block)
                else:  # CountingPool.give
                    pool.free += -(-end // block)
                if request in children:
                    arrivals.release_children(request, time)
                start = base[request]
                b.decoding -= 1
                b.base_sum -= start
                counts[start % block] -= 1
                b.tail -= -(start + clock) % block
                if in_last[request]:
                    b.excess -= -end % block
                    in_last[request] = 0
                state[request] = IDLE
                seqs[request] = -1
                del order[request]
            e.completed += len(done)
            if e.progress is not None:
                e._report_progress()
        if e.time >= e.next_record_time:
            e._record()

"""Preemption in the over-time engine (:class:`simulation.engine.Engine`): the latest admitted
request leaves the batch, its blocks go back (or to the CPU under swap), and it waits at the head
of the queue; and what moving KV to and from the CPU costs in seconds."""

from __future__ import annotations

from simulation.engine_batch import DECODING
from simulation.timeline_types import Preemption

__all__ = ["preempt_latest", "swap_seconds"]


def swap_seconds(engine, tokens: int) -> float:
    """Seconds to move ``tokens`` tokens of KV between the GPU and the CPU (swap or CPU tier)."""
    if engine.cpu is not None:
        return engine.config.cpu_tier.seconds(tokens, engine.per_token_bytes)
    return tokens / engine.config.swap_tokens_per_s


def preempt_latest(engine) -> tuple[int, float]:
    """Preempt the latest admitted running request (paged); returns (the request, stall)."""
    batch = engine.batch
    request = batch.latest()
    decoding = batch.state[request] == DECODING
    length = batch.remove(request)
    stall = 0.0
    blocks = -(-length // engine.block)
    if engine.own_blocks:  # its computed full blocks are registered: length − 1 tokens when decoding
        engine.pool.release(request, blocks, (length - decoding) // engine.block)
    elif engine.caching:
        engine.tables.release(request)
    else:
        engine.pool.give(blocks)
    swap = engine.config.preemption is Preemption.SWAP and decoding
    if swap and engine.cpu is not None:
        swap = engine.cpu.park(blocks)
    if decoding:
        engine.resume_goal[request] = length
    if swap:
        engine.swapped[request] = True
        engine.swapped_tokens += length
        stall = swap_seconds(engine, length)
        engine.stall_s += stall
    engine.queue.appendleft(request)
    engine.preemptions += 1
    return request, stall

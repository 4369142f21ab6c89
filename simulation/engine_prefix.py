"""Per-block prefix caching for the over-time engine: each running request's block table, the
hashes of its full blocks, and what it has registered in vLLM's cache
(:class:`~simulation.block_pool.CachingPool`, with an optional CPU tier).

Prompts that share content (a system prompt, a conversation's history) hit each other's blocks,
so every block is named. Without shared content the engine keeps runs of blocks instead
(:class:`~simulation.block_pool.OwnBlockPool`) and this module is not used.
"""

from __future__ import annotations

import itertools

from simulation.block_pool import CachingPool, CpuTier
from simulation.content import Segments, block_hashes, output_segment
from simulation.engine_batch import DECODING, Batch


class BlockTables:
    """Block tables of one run's requests (tokens; blocks of ``block``).

    ``final`` and ``output`` (lists, per request) are the final and output lengths, ``segments``
    the prompts' content (None: every prompt its own).
    """

    def __init__(self, pool: CachingPool, cpu: CpuTier | None, block: int, final: list[int], output: list[int],
                 segments: tuple[Segments, ...] | None) -> None:
        self.pool, self.cpu, self.block = pool, cpu, block
        self.final, self.output, self.segments = final, output, segments
        self.blocks: dict[int, list[int]] = {}  # each running request's blocks, in table order
        self.hashes: dict[int, list[int]] = {}
        self.registered: dict[int, int] = {}  # full blocks of a running request put in the cache

    def hashes_of(self, request: int) -> list[int]:
        """Hashes of every full block ``request`` will ever hold (prompt and output)."""
        if request not in self.hashes:
            count = self.final[request] // self.block
            if self.segments is None:
                stream: Segments = ((request, 0),)
            else:
                stream = self.segments[request] + ((output_segment(request), self.output[request]),)
            self.hashes[request] = block_hashes(stream, self.block, count)
        return self.hashes[request]

    def lookup(self, request: int, wanted: int) -> tuple[list[int], int, int]:
        """The hits among ``request``'s first ``wanted`` blocks: (GPU blocks hit, further blocks
        in the CPU tier, how many of the GPU hits are free, so leave the allocatable ones)."""
        hashes = self.hashes_of(request)[:wanted]
        hit_blocks = self.pool.lookup(hashes)
        cpu_blocks = 0
        if self.cpu is not None:
            cpu_blocks = sum(1 for _ in itertools.takewhile(self.cpu.cached.__contains__, hashes[len(hit_blocks):]))
        return hit_blocks, cpu_blocks, self.pool.evictable(hit_blocks)

    def admit(self, request: int, hit_blocks: list[int], new_blocks: int, cpu_blocks: int) -> int:
        """Start ``request``'s table: its hits, then ``new_blocks`` new blocks, the CPU tier's
        ``cpu_blocks`` copied back into the first new ones; returns the blocks copied back."""
        self.pool.touch(hit_blocks)
        self.blocks[request] = [*hit_blocks, *self.pool.allocate(new_blocks)]
        hits = self.registered[request] = len(hit_blocks)
        if not cpu_blocks:
            return 0
        loaded = self.cpu.hits(self.hashes_of(request)[hits:hits + cpu_blocks])
        self.register(request, (hits + loaded) * self.block)
        return loaded

    def register(self, request: int, computed: int) -> None:
        """Put ``request``'s full blocks of ``computed`` tokens in the cache."""
        full = computed // self.block
        done = self.registered.get(request, 0)
        if full > done:
            hashes, blocks = self.hashes_of(request), self.blocks[request]
            for index in range(done, full):
                self.pool.cache(blocks[index], hashes[index])
            self.registered[request] = full

    def register_computed(self, batch: Batch, requests: list[int]) -> None:
        """Register the computed full blocks of running ``requests`` (in admission order): after a
        step or a jump, those whose computed tokens may have filled a block. A decoding request
        fills one exactly when it takes a new block (its computed tokens are its length − 1)."""
        for request in requests:
            length = batch.length(request)
            self.register(request, length - (length > batch.goal[request]))

    def grow_step(self, batch: Batch, needs: dict[int, int], chunks: dict) -> list[int]:
        """One step's new blocks, in admission order: ``needs`` per prefilling request given a
        chunk, one for each decoding request whose length fills its last block. Returns the
        requests whose computed tokens may fill a block (those that grew or prefilled)."""
        clock, touched = batch.clock, []
        for request in batch.order:
            count = (needs.get(request, 0) if batch.state[request] != DECODING
                     else (batch.base[request] + clock) % self.block == 0)
            if count:
                self.blocks[request] += self.pool.allocate(int(count))
            if count or request in chunks:
                touched.append(request)
        return touched

    def grow(self, growing: list[tuple[int, int]]) -> None:
        """New blocks for a jump: ``growing`` is (request, blocks) in admission order."""
        for request, count in growing:
            self.blocks[request] += self.pool.allocate(count)

    def release(self, request: int) -> None:
        """A preempted ``request`` lets go of its blocks (those registered stay cached)."""
        self.pool.release(self.blocks.pop(request))
        self.registered.pop(request, None)

    def finish(self, request: int) -> None:
        """A finished ``request`` registers its last full blocks (final − 1 tokens computed) and
        lets go of them."""
        self.register(request, self.final[request] - 1)
        self.release(request)
        self.hashes.pop(request, None)

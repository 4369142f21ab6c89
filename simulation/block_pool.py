"""Paged KV block pools for the over-time simulation: counting only, or vLLM's prefix cache.

``CountingPool`` keeps the number of free blocks: enough when blocks are never shared.

``CachingPool`` follows vLLM V1's ``BlockPool`` (``vllm/v1/core/block_pool.py``):

- a block gets a hash only when it is full; the hash chains the parent block's hash and the
  block's tokens, so a hit on block i implies hits on blocks 0 … i − 1;
- free blocks wait in one queue in the order they were freed (a request frees its blocks last
  block first, so a sequence's tail is evicted before its head); allocation takes the queue's
  head and evicts the hash that block still carries: least recently freed goes first;
- a hit on a block in the free queue takes it out of the queue (reference count 0 → 1).

``OwnBlockPool`` is ``CachingPool`` for the case where a cached block can only ever serve the
request that computed it, after that request is preempted (prompts without shared content, no CPU
tier, preemption by recompute): the same queue, evictions and counts, kept as runs of blocks so
that every operation costs O(1) instead of O(blocks).

``CpuTier`` is a second, slower level (vLLM's CPU offloading connector, LMCache): blocks
evicted from the GPU cache keep their hash in CPU memory (LRU, ``capacity_blocks``); a later hit
there is copied back over the link. Preempted sequences may be parked there too (swap).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass

UNCACHED = -1  # owner of an OwnBlockPool run of blocks that carry no hash


class CountingPool:
    """Free-block count of a pool whose blocks are never shared."""

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = int(num_blocks)
        self.free = self.num_blocks

    def take(self, count: int) -> None:
        if count > self.free:
            raise RuntimeError(f"asked for {count} blocks with {self.free} free")
        self.free -= count

    def give(self, count: int) -> None:
        self.free += count


@dataclass
class CpuStats:
    """What went through the CPU tier (blocks)."""

    stored: int = 0      # GPU evictions written to CPU memory
    hits: int = 0        # blocks copied back for a prefix hit
    dropped: int = 0     # cached blocks pushed out of CPU memory (LRU)
    swapped_out: int = 0  # blocks of preempted sequences parked in CPU memory
    swapped_in: int = 0


class CpuTier:
    """CPU memory of ``capacity_blocks`` blocks: cached hashes (LRU) and parked sequences."""

    def __init__(self, capacity_blocks: int) -> None:
        self.capacity_blocks = int(capacity_blocks)
        self.cached: OrderedDict[int, None] = OrderedDict()  # hash → None, oldest first
        self.parked = 0  # blocks held by swapped-out sequences (pinned, never dropped)
        self.stats = CpuStats()

    @property
    def used_blocks(self) -> int:
        return len(self.cached) + self.parked

    def _make_room(self, count: int) -> bool:
        """Drop cached hashes (oldest first) until ``count`` blocks fit; False if they cannot."""
        if count > self.capacity_blocks - self.parked:
            return False
        while len(self.cached) + self.parked + count > self.capacity_blocks:
            self.cached.popitem(last=False)
            self.stats.dropped += 1
        return True

    def store(self, block_hash: int) -> None:
        """Keep an evicted GPU block's hash (its KV is copied over the link)."""
        if block_hash in self.cached:
            self.cached.move_to_end(block_hash)
            return
        if self._make_room(1):
            self.cached[block_hash] = None
            self.stats.stored += 1

    def hits(self, hashes: list[int]) -> int:
        """How many of ``hashes`` (in order) are in CPU memory before the first miss; each hit
        becomes the most recently used."""
        count = 0
        for block_hash in hashes:
            if block_hash not in self.cached:
                break
            self.cached.move_to_end(block_hash)
            count += 1
        self.stats.hits += count
        return count

    def park(self, count: int) -> bool:
        """Hold ``count`` blocks of a preempted sequence; False when CPU memory cannot."""
        if not self._make_room(count):
            return False
        self.parked += count
        self.stats.swapped_out += count
        return True

    def unpark(self, count: int) -> None:
        self.parked -= count
        self.stats.swapped_in += count


class CachingPool:
    """vLLM's block pool with prefix caching (see the module docstring)."""

    def __init__(self, num_blocks: int, cpu: CpuTier | None = None) -> None:
        self.num_blocks = int(num_blocks)
        self.ref = [0] * self.num_blocks
        self.block_hash: list[int | None] = [None] * self.num_blocks
        self.by_hash: dict[int, int] = {}
        # Free blocks in eviction order (head first). All blocks start free and uncached.
        self.queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(self.num_blocks))
        self.cpu = cpu
        self.evictions = 0  # cached blocks whose hash was dropped to reuse the block
        self._cached_free = 0  # free blocks that still carry a hash, kept as blocks move

    @property
    def free(self) -> int:
        """Blocks that can be handed out (free, cached or not)."""
        return len(self.queue)

    @property
    def cached_free(self) -> int:
        """Free blocks that still hold a cached prefix (memory the cache keeps warm)."""
        return self._cached_free

    def evictable(self, blocks: list[int]) -> int:
        """How many of ``blocks`` (cache hits) sit in the free queue: using them takes them
        out of what can be allocated."""
        return sum(1 for block in blocks if self.ref[block] == 0)

    @property
    def cached(self) -> int:
        """Blocks registered in the cache, in use or free."""
        return len(self.by_hash)

    def lookup(self, hashes: list[int]) -> list[int]:
        """The longest run of ``hashes`` (from the first) held on the GPU: their blocks."""
        found = []
        for block_hash in hashes:
            block = self.by_hash.get(block_hash)
            if block is None:
                break
            found.append(block)
        return found

    def touch(self, blocks: list[int]) -> None:
        """A request starts using cached ``blocks``: out of the free queue when unused."""
        for block in blocks:
            if self.ref[block] == 0:
                del self.queue[block]
                self._cached_free -= 1  # a hit block always carries its hash
            self.ref[block] += 1

    def allocate(self, count: int) -> list[int]:
        """``count`` blocks from the head of the free queue, their stale hashes evicted."""
        if count > len(self.queue):
            raise RuntimeError(f"asked for {count} blocks with {len(self.queue)} free")
        blocks = []
        for _ in range(count):
            block, _ = self.queue.popitem(last=False)
            stale = self.block_hash[block]
            if stale is not None:
                self._cached_free -= 1
                del self.by_hash[stale]
                self.block_hash[block] = None
                self.evictions += 1
                if self.cpu is not None:
                    self.cpu.store(stale)
            self.ref[block] = 1
            blocks.append(block)
        return blocks

    def cache(self, block: int, block_hash: int) -> None:
        """Register a full block under ``block_hash`` (a duplicate keeps the first copy)."""
        if block_hash not in self.by_hash and self.block_hash[block] is None:
            self.by_hash[block_hash] = block
            self.block_hash[block] = block_hash

    def release(self, blocks: list[int]) -> None:
        """A request lets go of ``blocks`` (in table order); they join the queue's tail last
        block first, so that a sequence's tail is evicted before its shared head."""
        for block in reversed(blocks):
            self.ref[block] -= 1
            if self.ref[block] == 0:
                self.queue[block] = None
                self._cached_free += self.block_hash[block] is not None


class OwnBlockPool:
    """:class:`CachingPool` when a request's cached blocks can only serve that request again.

    With prompts that share nothing, a block's hash names one request and one block index, and
    only that request (readmitted after a preemption by recompute) ever looks it up. Then, as
    ``CachingPool`` runs (tests compare the two):

    - a running request's first ``registered`` blocks carry hashes and the rest none, so its
      release puts on the free queue its uncached tail, then its cached blocks last one first;
    - eviction takes the queue's head, so the request's cached blocks left are always its first
      ones, all together, and a readmission hits every one of them (its lookup wants more).

    So the free queue is a deque of runs ``[owner, cached, uncached]``: one release, whose
    ``uncached`` blocks come off the queue before its ``cached`` ones (owner ``UNCACHED`` for
    blocks that never carried a hash). Nothing is per block: which physical block a request holds
    never changes a figure, so no block is named.
    """

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = int(num_blocks)
        self.free = self.num_blocks  # blocks in the free queue
        self.cached_free = 0  # free blocks that still carry a hash
        self.evictions = 0
        self.queue: deque[list[int]] = deque([[UNCACHED, 0, self.num_blocks]])  # head first
        self.runs: dict[int, list[int]] = {}  # request → its run, while it has cached blocks there

    def cached_of(self, request: int) -> int:
        """How many of ``request``'s first blocks are cached (free: it is not running)."""
        run = self.runs.get(request)
        return run[1] if run is not None else 0

    def touch(self, request: int, hits: int) -> None:
        """A readmitted ``request`` reuses its ``hits`` cached blocks: they leave the free queue
        (its uncached ones stay where they are)."""
        run = self.runs.pop(request)
        if run[1] != hits:
            raise RuntimeError(f"request {request} hits {hits} of its {run[1]} cached blocks")
        self.free -= hits
        self.cached_free -= hits
        run[1] = 0

    def take(self, count: int) -> None:
        """Allocate ``count`` blocks from the head of the free queue, evicting the hashes they carry."""
        if count > self.free:
            raise RuntimeError(f"asked for {count} blocks with {self.free} free")
        self.free -= count
        queue, evicted = self.queue, 0
        while count:
            run = queue[0]
            owner, cached, uncached = run
            if uncached:  # a run's uncached blocks leave first
                if uncached > count or (uncached == count and cached):
                    run[2] = uncached - count
                    break
                count -= uncached
                run[2] = 0
            if cached > count:
                run[1] = cached - count
                evicted += count
                break
            count -= cached  # the whole run goes
            evicted += cached
            queue.popleft()
            if cached:
                del self.runs[owner]
        self.evictions += evicted
        self.cached_free -= evicted

    def release(self, request: int, blocks: int, registered: int) -> None:
        """``request`` lets go of its ``blocks`` blocks, the first ``registered`` of them cached."""
        queue = self.queue
        if registered:
            run = [request, registered, blocks - registered]
            queue.append(run)
            self.runs[request] = run
        elif queue and queue[-1][1] == 0:  # nothing cached here or at the tail: one uncached run
            queue[-1][2] += blocks
        else:
            queue.append([UNCACHED, 0, blocks])
        self.free += blocks
        self.cached_free += registered

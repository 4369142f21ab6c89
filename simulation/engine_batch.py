"""The running batch of the over-time engine, kept so that every event costs O(1) (amortised)
instead of a pass over the batch.

Decoding requests all grow by one token per step, so their lengths are kept relative to a
decode clock: a decoding request of length ``L`` at clock ``T`` stores ``base = L − T`` and
needs no update while the clock runs. What the engine asks of the batch then has a closed form
in a few running totals:

* tokens: ``Σ base + n·T``;
* slots held in blocks of ``B``: tokens plus each request's empty tail ``(−L) mod B``, which
  depends only on ``base mod B``: requests are counted per residue, and ``k`` more steps add a
  block to the ``c`` requests of a residue whose tail is ``w`` that often: ``⌊(k − w − 1)/B⌋ + 1``;
* slots held that the request will fill (``min(held, final)``): held, less ``e = B·⌈F/B⌉ − F``
  for each request whose length has reached its last block; a heap says when each gets there;
* the next completion: a heap of ``final − base`` (the clock at which a request finishes).

Prefilling requests (at most a few, see :mod:`simulation.engine`) keep their length itself.
Heap entries carry the admission's sequence number and are dropped lazily once stale.
"""

from __future__ import annotations

import heapq
from operator import mul

IDLE, PREFILLING, DECODING = 0, 1, 2
DENSE_BLOCK = 256  # blocks up to this size count requests per residue in a list
MEMO_ENTRIES = 4096  # per-residue tables kept (each 2·B ints), by jump length and clock mod B


def tail_sum(tail: int, steps: int, block: int) -> int:
    """Σ_{j=1..steps} ((tail − j) mod B): a request's empty block tail over ``steps`` decode steps
    that starts at ``tail`` slots (the tail falls by one a step and jumps to B − 1 on a new block)."""
    periods, rest = divmod(steps, block)
    total = periods * (block * (block - 1) // 2)
    if rest <= tail:
        return total + rest * tail - rest * (rest + 1) // 2
    over = rest - tail  # steps past the tail's 0, from B − 1 down
    return total + tail * (tail - 1) // 2 + over * block - over * (over + 1) // 2


class Batch:
    """Running requests of one run in admission order (lengths in tokens, blocks of ``block``).

    ``final`` (list, per request) is each request's final length; ``paged`` turns on the block
    figures (``held``, ``filled``, :meth:`growth`).
    """

    def __init__(self, final: list[int], block: int, paged: bool) -> None:
        n = len(final)
        self.final, self.block, self.paged = final, block, paged
        self.state = bytearray(n)
        self.seq = [-1] * n  # admission sequence number of the running instance
        self.base = [0] * n  # decoding: length − clock; prefilling: the length
        self.goal = [0] * n  # tokens to compute before decoding (run_goal)
        self.in_last = bytearray(n)
        self.order: dict[int, None] = {}  # every running request, admission order
        self.prefilling: dict[int, None] = {}  # the prefilling ones, admission order
        self.admissions = 0
        self.clock = 0
        self.decoding = 0
        self.base_sum = 0
        # Decoding requests per residue of base mod B: a list for small blocks, else a dict of the
        # residues present (a block of 10⁵ tokens would make every sum a pass over 10⁵ residues).
        self.counts: list[int] | None = [0] * block if paged and block <= DENSE_BLOCK else None
        self.residues: dict[int, int] = {}
        self.memo: dict[int, tuple[list[int], list[int]]] = {}  # _tables by steps and clock mod B
        self.tail = 0  # Σ empty block tail of the decoding requests
        self.excess = 0  # Σ (held − final) of decoding requests in their last block
        self.done_heap: list[tuple[int, int, int]] = []  # (clock at completion, seq, request)
        self.last_heap: list[tuple[int, int, int]] = []  # (clock entering the last block, seq, request)
        self.pre_len = self.pre_held = self.pre_filled = 0

    # ---- lengths ------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.order)

    def length(self, request: int) -> int:
        return self.base[request] + self.clock if self.state[request] == DECODING else self.base[request]

    @property
    def decode_tokens(self) -> int:
        """Σ length of the decoding requests."""
        return self.base_sum + self.decoding * self.clock

    @property
    def tokens(self) -> int:
        return self.base_sum + self.decoding * self.clock + self.pre_len

    @property
    def held(self) -> int:
        """Slots held in blocks (paged)."""
        return self.base_sum + self.decoding * self.clock + self.tail + self.pre_held

    @property
    def filled(self) -> int:
        """Slots held that their request will fill by its end (paged)."""
        return self.base_sum + self.decoding * self.clock + self.tail - self.excess + self.pre_filled

    def verify(self) -> None:
        """Check the running totals against sums over the requests (a test hook: a pass over the batch)."""
        lengths = [self.length(request) for request in self.order]
        assert self.tokens == sum(lengths), (self.tokens, sum(lengths))
        if self.paged:
            held = [-(-length // self.block) * self.block for length in lengths]
            assert self.held == sum(held), (self.held, sum(held))
            filled = sum(min(slots, self.final[request]) for slots, request in zip(held, self.order))
            assert self.filled == filled, (self.filled, filled)

    def latest(self) -> int:
        """The latest admitted running request."""
        return next(reversed(self.order))

    # ---- membership ---------------------------------------------------------------------------
    def admit(self, request: int, length: int, goal: int) -> None:
        """Start running ``request`` at ``length`` tokens; it decodes once ``length > goal``."""
        self.seq[request] = seq = self.admissions
        self.admissions = seq + 1
        self.goal[request] = goal
        self.order[request] = None
        if length > goal:
            self._decode(request, length, seq)
        else:
            self.state[request] = PREFILLING
            self.base[request] = length
            self.prefilling[request] = None
            self._prefill_sums(request, length, 1)

    def remove(self, request: int) -> int:
        """Stop running ``request``; returns its length."""
        base = self.base[request]
        if self.state[request] == DECODING:
            length = base + self.clock
            self.decoding -= 1
            self.base_sum -= base
            if self.paged:
                block = self.block
                residue = base % block
                if self.counts is not None:
                    self.counts[residue] -= 1
                else:
                    left = self.residues[residue] - 1
                    if left:
                        self.residues[residue] = left
                    else:
                        del self.residues[residue]
                self.tail -= -length % block
                if self.in_last[request]:
                    self.excess -= -self.final[request] % self.block
                    self.in_last[request] = 0
        else:
            length = base
            del self.prefilling[request]
            self._prefill_sums(request, length, -1)
        self.state[request] = IDLE
        self.seq[request] = -1
        del self.order[request]
        return length

    def prefill_to(self, request: int, length: int) -> bool:
        """A prefilling request reaches ``length`` tokens; True when it now decodes."""
        self._prefill_sums(request, self.base[request], -1)
        if length > self.goal[request]:
            del self.prefilling[request]
            self._decode(request, length, self.seq[request])
            return True
        self.base[request] = length
        self._prefill_sums(request, length, 1)
        return False

    def _prefill_sums(self, request: int, length: int, sign: int) -> None:
        self.pre_len += sign * length
        if self.paged:
            held = -(-length // self.block) * self.block
            self.pre_held += sign * held
            self.pre_filled += sign * min(held, self.final[request])

    def _decode(self, request: int, length: int, seq: int) -> None:
        """``request`` (admission ``seq``) decodes from ``length`` tokens on."""
        block, final = self.block, self.final[request]
        base = length - self.clock
        self.state[request] = DECODING
        self.base[request] = base
        self.decoding += 1
        self.base_sum += base
        heapq.heappush(self.done_heap, (final - base, seq, request))
        if not self.paged:
            return
        residue = base % block
        if self.counts is not None:
            self.counts[residue] += 1
        else:
            self.residues[residue] = self.residues.get(residue, 0) + 1
        self.tail += -length % block
        excess = -final % block
        if excess:
            last_start = final + excess - block  # length before the last block: B·(⌈F/B⌉ − 1)
            if length > last_start:
                self.excess += excess
                self.in_last[request] = 1
            else:
                heapq.heappush(self.last_heap, (last_start + 1 - base, seq, request))

    # ---- decode steps -------------------------------------------------------------------------
    def _tables(self, steps: int) -> tuple[list[int], list[int]]:
        """Per residue of ``base mod B``: (blocks a request needs, Σ of its tail) over ``steps`` steps."""
        block, shift = self.block, -self.clock % self.block
        key = steps * block + shift
        tables = self.memo.get(key)
        if tables is None:
            if len(self.memo) >= MEMO_ENTRIES:
                self.memo.clear()
            tails = [(shift - residue) % block for residue in range(block)]
            tables = ([(steps - tail - 1) // block + 1 if steps > tail else 0 for tail in tails],
                      [tail_sum(tail, steps, block) for tail in tails])
            self.memo[key] = tables
        return tables

    def growth(self, steps: int) -> int:
        """Blocks the decoding requests need to run ``steps`` more steps (paged)."""
        block = self.block
        if steps == 1:
            return self.counts[-self.clock % block] if self.counts is not None else self.residues.get(-self.clock % block, 0)
        if self.counts is not None:
            return sum(map(mul, self.counts, self._tables(steps)[0]))
        total = 0
        for residue, count in self.residues.items():
            tail = (-self.clock - residue) % block
            if steps > tail:
                total += count * ((steps - tail - 1) // block + 1)
        return total

    def tail_integral(self, steps: int) -> int:
        """Σ over the next ``steps`` steps of the decoding requests' empty block tails (paged)."""
        if self.counts is not None:
            return sum(map(mul, self.counts, self._tables(steps)[1]))
        block, shift = self.block, -self.clock
        return sum(count * tail_sum((shift - residue) % block, steps, block) for residue, count in self.residues.items())

    def growth_and_tail(self, steps: int) -> tuple[int, int]:
        """(:meth:`growth`, :meth:`tail_integral`) over ``steps`` steps, from one table look-up."""
        if self.counts is None:
            return self.growth(steps), self.tail_integral(steps)
        blocks, tails = self._tables(steps)
        counts = self.counts
        return sum(map(mul, counts, blocks)), sum(map(mul, counts, tails))

    def growing(self, steps: int) -> list[tuple[int, int]]:
        """(request, blocks) of every decoding request that needs blocks in ``steps`` more steps,
        in admission order (paged; a pass over the batch)."""
        block, clock, base, state = self.block, self.clock, self.base, self.state
        grow = []
        for request in self.order:
            if state[request] == DECODING:
                length = base[request] + clock
                count = (length + steps + block - 1) // block - (length + block - 1) // block
                if count:
                    grow.append((request, count))
        return grow

    def advance(self, steps: int, blocks: int) -> int:
        """Run the decoding requests ``steps`` steps (taking ``blocks`` new blocks together);
        returns Σ e × steps spent in the last block by those that reach it now (paged)."""
        self.clock += steps
        if not self.paged:
            return 0
        self.tail += blocks * self.block - steps * self.decoding
        heap = self.last_heap
        return self.enter_last_blocks() if heap and heap[0][0] <= self.clock else 0

    def enter_last_blocks(self) -> int:
        """Count in ``excess`` the decoding requests whose length has reached its last block by
        the clock; returns Σ e × steps they have spent there (paged)."""
        heap, clock, partial = self.last_heap, self.clock, 0
        while heap and heap[0][0] <= clock:
            enter, seq, request = heapq.heappop(heap)
            if self.seq[request] == seq and self.state[request] == DECODING:
                excess = -self.final[request] % self.block
                self.excess += excess
                self.in_last[request] = 1
                partial += excess * (clock - enter + 1)
        return partial

    def min_remaining(self) -> int:
        """Fewest tokens any decoding request has left to produce (some request decodes)."""
        heap, seqs, state = self.done_heap, self.seq, self.state
        while True:  # drop the stale entries on top (removed or readmitted since)
            done, seq, request = heap[0]
            if seqs[request] == seq and state[request] == DECODING:
                return done - self.clock
            heapq.heappop(heap)

    def pop_done(self) -> list[int]:
        """The requests that have reached their final length, in admission order (not removed)."""
        heap, clock, seqs, state = self.done_heap, self.clock, self.seq, self.state
        done = []
        while heap and heap[0][0] <= clock:
            _, seq, request = heapq.heappop(heap)
            if seqs[request] == seq and state[request] == DECODING:
                done.append(request)
        if len(done) > 1:
            done.sort(key=seqs.__getitem__)
        return done

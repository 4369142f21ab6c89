"""Paged KV bookkeeping as vLLM does it: block tables, reference counts, copy-on-write.

A sequence's token at logical position p lives in logical block ``p // B`` at offset ``p % B``;
its block table maps the logical block to a physical block anywhere in the pool, so

    byte address = block_table[seq][p // B] × block_bytes + (p % B) × token_bytes.

A new block is taken from the free list only when the last one is full. Sequences may point at
the same physical block (forked samples and beams, a cached prefix); each block counts its
references, and a sequence about to write into a block that others share first copies it
(copy-on-write). This is pure Python bookkeeping, token by token, for explanation and for the
sharing figures; the over-time simulation counts blocks without naming them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from units import cdiv


class OutOfBlocks(RuntimeError):
    """The pool has no free block left."""


@dataclass(frozen=True, kw_only=True)
class TokenAddress:
    """Where one token's keys and values live.

    ``byte_address`` is None when the pool has no ``token_bytes``.
    """

    sequence: int
    position: int
    logical_block: int
    offset: int
    physical_block: int
    byte_address: int | None
    ref_count: int


@dataclass(frozen=True, kw_only=True)
class BlockEvent:
    """One step of bookkeeping, for the page's log.

    ``kind`` is "allocate" (a fresh block), "share" (a reference added), "copy" (copy-on-write:
    ``source`` copied into ``physical_block``) or "free" (the last reference dropped).
    """

    kind: str
    sequence: int
    logical_block: int
    physical_block: int
    source: int | None = None


class BlockManager:
    """A pool of ``num_blocks`` physical blocks of ``block_size`` tokens with per-sequence tables.

    Parameters
    ----------
    num_blocks, block_size : int
    token_bytes : int, optional
        Bytes of one token's KV (all layers), for byte addresses.
    rng : np.random.Generator, optional
        Shuffles the free list so that physical blocks are visibly scattered (as in a pool that
        has been in use); without it blocks are handed out in ascending order.
    record_events : bool
        Keep the :class:`BlockEvent` log (the page's demo shows it). Without it, forks and frees
        update the reference counts array-wise, so the sharing scenarios (thousands of forks of
        long tables) stay fast; blocks, counts and copies are the same either way.
    """

    def __init__(self, *, num_blocks: int, block_size: int, token_bytes: int | None = None,
                 rng: np.random.Generator | None = None, record_events: bool = True) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"need num_blocks >= 1 and block_size >= 1, got {num_blocks}, {block_size}")
        self.block_size = block_size
        self.token_bytes = token_bytes
        order = rng.permutation(num_blocks) if rng is not None else np.arange(num_blocks)
        # Popped from the end: reverse so that the first block handed out is order[0].
        self._free: list[int] = order[::-1].tolist()
        self.ref_count = np.zeros(num_blocks, dtype=np.int64)
        self.tables: dict[int, list[int]] = {}
        self.lengths: dict[int, int] = {}
        self.events: list[BlockEvent] = []
        self.record_events = record_events
        self.copies = 0

    @property
    def block_bytes(self) -> int | None:
        """Bytes of one block, or None without ``token_bytes``."""
        return None if self.token_bytes is None else self.block_size * self.token_bytes

    @property
    def used_blocks(self) -> int:
        """Physical blocks with at least one reference."""
        return int(np.count_nonzero(self.ref_count))

    def _take(self, sequence: int, logical_block: int, source: int | None = None) -> int:
        if not self._free:
            raise OutOfBlocks(f"no free block for sequence {sequence}, logical block {logical_block}")
        physical = self._free.pop()
        self.ref_count[physical] = 1
        if self.record_events:
            self.events.append(BlockEvent(kind="copy" if source is not None else "allocate",
                                          sequence=sequence, logical_block=logical_block,
                                          physical_block=physical, source=source))
        return physical

    def _release(self, sequence: int, logical_block: int, physical: int) -> None:
        self.ref_count[physical] -= 1
        if self.ref_count[physical] == 0:
            self._free.append(physical)
            self.events.append(BlockEvent(kind="free", sequence=sequence,
                                          logical_block=logical_block, physical_block=physical))

    def add_sequence(self, sequence: int, tokens: int) -> None:
        """A new sequence holding ``tokens`` tokens (a prompt): ⌈tokens / B⌉ fresh blocks."""
        if sequence in self.tables:
            raise ValueError(f"sequence {sequence} exists")
        self.tables[sequence] = []
        self.lengths[sequence] = 0
        for _ in range(tokens):
            self.append_token(sequence)

    def fork(self, parent: int, child: int) -> None:
        """``child`` shares every block of ``parent`` (parallel sampling, beam search)."""
        if child in self.tables:
            raise ValueError(f"sequence {child} exists")
        self.tables[child] = list(self.tables[parent])
        self.lengths[child] = self.lengths[parent]
        if not self.record_events:  # a table never holds a block twice: one fancy-index add
            self.ref_count[self.tables[child]] += 1
            return
        for logical, physical in enumerate(self.tables[child]):
            self.ref_count[physical] += 1
            self.events.append(BlockEvent(kind="share", sequence=child, logical_block=logical,
                                          physical_block=physical))

    def share_prefix(self, source: int, sequence: int, tokens: int) -> int:
        """Prefix caching: new ``sequence`` whose first ``tokens`` tokens equal ``source``'s.

        Only full blocks are shared (as vLLM's prefix cache does); the partial tail of the prefix
        is written into the new sequence's own block. Returns the number of shared blocks.
        """
        shared = min(tokens, self.lengths[source]) // self.block_size
        if sequence in self.tables:
            raise ValueError(f"sequence {sequence} exists")
        self.tables[sequence] = list(self.tables[source][:shared])
        self.lengths[sequence] = shared * self.block_size
        for logical, physical in enumerate(self.tables[sequence]):
            self.ref_count[physical] += 1
            self.events.append(BlockEvent(kind="share", sequence=sequence, logical_block=logical,
                                          physical_block=physical))
        for _ in range(tokens - shared * self.block_size):
            self.append_token(sequence)
        return shared

    def append_token(self, sequence: int) -> None:
        """Write one more token: a new block if the last is full, a copy if the last is shared."""
        table = self.tables[sequence]
        position = self.lengths[sequence]
        logical = position // self.block_size
        if logical == len(table):
            table.append(self._take(sequence, logical))
        elif self.ref_count[table[logical]] > 1:
            shared = table[logical]
            table[logical] = self._take(sequence, logical, source=shared)
            self.ref_count[shared] -= 1
            self.copies += 1
        self.lengths[sequence] = position + 1

    def free_sequence(self, sequence: int) -> None:
        """Drop a sequence; blocks whose last reference it held return to the free list."""
        table = self.tables.pop(sequence)
        del self.lengths[sequence]
        if not self.record_events and table:
            # Array-wise, freed blocks in table order: the free list ends as the loop leaves it.
            blocks = np.asarray(table, dtype=np.int64)
            self.ref_count[blocks] -= 1
            self._free.extend(blocks[self.ref_count[blocks] == 0].tolist())
            return
        for logical, physical in enumerate(table):
            self._release(sequence, logical, physical)

    def address(self, sequence: int, position: int) -> TokenAddress:
        """Logical block, offset, physical block and byte address of token ``position``."""
        length = self.lengths[sequence]
        if not 0 <= position < length:
            raise ValueError(f"position must be in [0, {length}) for sequence {sequence}, got {position}")
        logical, offset = divmod(position, self.block_size)
        physical = self.tables[sequence][logical]
        byte_address = (None if self.token_bytes is None
                        else physical * self.block_bytes + offset * self.token_bytes)
        return TokenAddress(sequence=sequence, position=position, logical_block=logical,
                            offset=offset, physical_block=physical, byte_address=byte_address,
                            ref_count=int(self.ref_count[physical]))


@dataclass(frozen=True, kw_only=True)
class BlockTableDemo:
    """State of the block-table demo after some decode steps.

    Attributes
    ----------
    tables : tuple of tuple of int
        Physical block of each logical block, one tuple per sequence.
    lengths : tuple of int
        Tokens per sequence.
    ref_count : int64 array, shape (num_blocks,)
    events : tuple of BlockEvent
        Everything that happened, in order.
    copies : int
        Copy-on-write copies made.
    """

    block_size: int
    token_bytes: int | None
    tables: tuple[tuple[int, ...], ...]
    lengths: tuple[int, ...]
    ref_count: np.ndarray
    events: tuple[BlockEvent, ...]
    copies: int
    manager: BlockManager


def demo_pool_blocks(*, block_size: int, prompt_tokens: int, sequences: int, steps: int,
                     row_blocks: int = 1) -> int:
    """Blocks in the demo's pool: room for every sequence unshared plus one spare block each,
    rounded up to whole rows of ``row_blocks`` (the page draws the pool as a grid)."""
    needed = sequences * (cdiv(prompt_tokens + steps, block_size) + 1)
    return row_blocks * cdiv(needed, row_blocks)


def block_table_demo(*, block_size: int, prompt_tokens: int, sequences: int, steps: int,
                     shared_prompt: bool, num_blocks: int, token_bytes: int | None,
                     rng: np.random.Generator) -> BlockTableDemo:
    """``sequences`` sequences on one prompt, each decoding ``steps`` tokens.

    With ``shared_prompt`` the first sequence is prefilled and the others fork from it (parallel
    sampling: shared blocks, reference counts, copy-on-write at the first write into the shared
    partial block); without, each sequence has its own copy of the prompt.
    """
    if sequences < 1 or prompt_tokens < 1 or steps < 0:
        raise ValueError(f"need sequences >= 1, prompt_tokens >= 1, steps >= 0; got "
                         f"{sequences}, {prompt_tokens}, {steps}")
    manager = BlockManager(num_blocks=num_blocks, block_size=block_size, token_bytes=token_bytes, rng=rng)
    manager.add_sequence(0, prompt_tokens)
    for sequence in range(1, sequences):
        if shared_prompt:
            manager.fork(0, sequence)
        else:
            manager.add_sequence(sequence, prompt_tokens)
    for _ in range(steps):
        for sequence in range(sequences):
            manager.append_token(sequence)
    return BlockTableDemo(
        block_size=block_size, token_bytes=token_bytes,
        tables=tuple(tuple(manager.tables[s]) for s in range(sequences)),
        lengths=tuple(manager.lengths[s] for s in range(sequences)),
        ref_count=manager.ref_count.copy(), events=tuple(manager.events), copies=manager.copies,
        manager=manager,
    )

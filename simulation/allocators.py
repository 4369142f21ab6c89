"""Contiguous address-space allocators for KV reservations: a buddy allocator and first fit.

Both manage ``capacity`` token slots (one slot = one token's keys and values, all layers) as one
address space and hand out contiguous chunks. Freed chunks leave holes between live ones; free
memory split into holes that are too small for the next request is external fragmentation.
Each operation is O(log capacity) (buddy) or O(holes) (first fit): plain Python, called once per
admission and completion, not per token.
"""

from __future__ import annotations

import bisect
import enum
from typing import Protocol

import numpy as np

from simulation.arith import next_power_of_two


class ContiguousAllocator(Protocol):
    """An allocator of contiguous chunks of token slots."""

    capacity: int

    def chunk_size(self, size: int) -> int:
        """Slots actually taken by a request for ``size`` slots (buddy: next power of two)."""
        ...

    def allocate(self, size: int) -> int | None:
        """Offset of a new chunk of ``chunk_size(size)`` slots, or None when no hole is big enough."""
        ...

    def release(self, offset: int) -> None:
        """Give back the chunk that starts at ``offset``."""
        ...

    @property
    def free_slots(self) -> int:
        """Free token slots in all holes together."""
        ...

    def hole_sizes(self) -> np.ndarray:
        """Size of every free hole, int64 slots, shape (holes,)."""
        ...


class BuddyAllocator:
    """Binary buddy allocator (the Orca baselines' allocator in the PagedAttention paper).

    A capacity that is not a power of two is split into power-of-two arenas (its binary digits,
    largest first, so each arena's base is a multiple of its size); buddies coalesce only within
    an arena. Requests are rounded up to a power of two: the rounding is internal fragmentation.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1 slot, got {capacity}")
        self.capacity = int(capacity)
        self._free: dict[int, set[int]] = {}  # order → offsets of free blocks of 2**order slots
        self._allocated: dict[int, int] = {}  # offset → order
        self._arena_bases: list[int] = []
        self._arena_orders: list[int] = []
        base = 0
        for order in range(self.capacity.bit_length() - 1, -1, -1):
            if self.capacity >> order & 1:
                self._arena_bases.append(base)
                self._arena_orders.append(order)
                self._free.setdefault(order, set()).add(base)
                base += 1 << order
        self._max_order = self._arena_orders[0]
        self._free_slots = self.capacity

    def chunk_size(self, size: int) -> int:
        return 1 << max(size - 1, 0).bit_length()

    def allocate(self, size: int) -> int | None:
        order = max(size - 1, 0).bit_length()
        for candidate in range(order, self._max_order + 1):
            blocks = self._free.get(candidate)
            if blocks:
                offset = min(blocks)  # lowest address first: deterministic and compact
                blocks.remove(offset)
                # Split down to the wanted order; the upper halves become free buddies.
                for split in range(candidate - 1, order - 1, -1):
                    self._free.setdefault(split, set()).add(offset + (1 << split))
                self._allocated[offset] = order
                self._free_slots -= 1 << order
                return offset
        return None

    def release(self, offset: int) -> None:
        order = self._allocated.pop(offset)
        self._free_slots += 1 << order
        arena = bisect.bisect_right(self._arena_bases, offset) - 1
        arena_base, arena_order = self._arena_bases[arena], self._arena_orders[arena]
        while order < arena_order:
            buddy = arena_base + ((offset - arena_base) ^ (1 << order))
            free_at_order = self._free.get(order)
            if not free_at_order or buddy not in free_at_order:
                break
            free_at_order.remove(buddy)
            offset = min(offset, buddy)
            order += 1
        self._free.setdefault(order, set()).add(offset)

    @property
    def free_slots(self) -> int:
        return self._free_slots

    def hole_sizes(self) -> np.ndarray:
        """Free blocks as the buddy system sees them (adjacent non-buddies are separate holes)."""
        sizes = [1 << order for order, offsets in self._free.items() for _ in offsets]
        return np.asarray(sizes, dtype=np.int64)


class FirstFitAllocator:
    """First fit over one address space: the lowest hole big enough; freed holes merge with
    their neighbours. No rounding, so no internal fragmentation from the allocator itself."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1 slot, got {capacity}")
        self.capacity = int(capacity)
        self._hole_offsets: list[int] = [0]  # sorted
        self._hole_sizes: list[int] = [self.capacity]
        self._allocated: dict[int, int] = {}  # offset → size
        self._free_slots = self.capacity

    def chunk_size(self, size: int) -> int:
        return size

    def allocate(self, size: int) -> int | None:
        for index, hole in enumerate(self._hole_sizes):
            if hole >= size:
                offset = self._hole_offsets[index]
                if hole == size:
                    del self._hole_offsets[index], self._hole_sizes[index]
                else:
                    self._hole_offsets[index] += size
                    self._hole_sizes[index] -= size
                self._allocated[offset] = size
                self._free_slots -= size
                return offset
        return None

    def release(self, offset: int) -> None:
        size = self._allocated.pop(offset)
        self._free_slots += size
        index = bisect.bisect_left(self._hole_offsets, offset)
        self._hole_offsets.insert(index, offset)
        self._hole_sizes.insert(index, size)
        # Merge with the following hole, then with the preceding one.
        if index + 1 < len(self._hole_offsets) and offset + size == self._hole_offsets[index + 1]:
            self._hole_sizes[index] += self._hole_sizes.pop(index + 1)
            del self._hole_offsets[index + 1]
        if index > 0 and self._hole_offsets[index - 1] + self._hole_sizes[index - 1] == offset:
            self._hole_sizes[index - 1] += self._hole_sizes.pop(index)
            del self._hole_offsets[index]

    @property
    def free_slots(self) -> int:
        return self._free_slots

    def hole_sizes(self) -> np.ndarray:
        return np.asarray(self._hole_sizes, dtype=np.int64)


class AddressSpace(str, enum.Enum):
    """Which contiguous allocator serves reservations."""

    BUDDY = "buddy"
    FIRST_FIT = "first-fit"


def make_allocator(kind: AddressSpace, capacity: int) -> BuddyAllocator | FirstFitAllocator:
    """A fresh allocator of ``kind`` over ``capacity`` slots."""
    return BuddyAllocator(capacity) if AddressSpace(kind) is AddressSpace.BUDDY else FirstFitAllocator(capacity)


def chunk_sizes(kind: AddressSpace, requested: np.ndarray) -> np.ndarray:
    """Slots taken by requests of ``requested`` slots (int64, shape (n,)): vectorised ``chunk_size``."""
    if AddressSpace(kind) is AddressSpace.BUDDY:
        return next_power_of_two(requested)
    return np.asarray(requested, dtype=np.int64)

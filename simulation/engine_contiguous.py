"""Contiguous reservations for the over-time engine: each running request's chunk of one address
space (buddy or first fit, :mod:`simulation.allocators`) and the batch's sums over them."""

from __future__ import annotations

import numpy as np

from simulation.allocators import chunk_sizes, make_allocator
from simulation.policies import reservation_tokens
from simulation.timeline_types import TimelineConfig


class ContiguousSpace:
    """The address space of one run (slots) and the sums over the running requests' chunks.

    ``prompt``, ``output`` and ``final`` (int64, shape (n,)) are the requests' lengths in tokens,
    already cut to the context.
    """

    def __init__(self, config: TimelineConfig, prompt: np.ndarray, output: np.ndarray, final: np.ndarray) -> None:
        self.allocator = make_allocator(config.address_space, config.budget.tokens)
        reserved = reservation_tokens(config.allocation.policy, prompt, output, config.max_context)
        chunk = chunk_sizes(config.address_space, reserved)
        self.fits = chunk <= int(self.allocator.hole_sizes().max())  # bool, shape (n,): can ever run
        self.reserved, self.chunk = reserved.tolist(), chunk.tolist()
        self.filled = np.minimum(chunk, final).tolist()  # slots of its chunk a request fills by its end
        self.final = final.tolist()
        self.offset: dict[int, int] = {}  # each running request's chunk
        self.chunk_sum = self.reserved_sum = self.filled_sum = self.final_sum = 0  # over the batch
        self.version = 0  # bumped at every allocation or release
        self.memo: tuple[int, int, int, int] = (-1, -1, 0, 0)  # (version, head chunk, external, largest)

    def holes(self, head: int | None) -> tuple[int, int]:
        """(free slots in holes too small for request ``head``, the largest hole); with no head,
        no hole is too small."""
        need = -1 if head is None else self.chunk[head]
        version, memo_need, external, largest = self.memo
        if version != self.version or memo_need != need:
            holes = self.allocator.hole_sizes().tolist()  # few holes: plain Python beats array reductions
            largest = max(holes, default=0)
            external = 0 if head is None else sum(hole for hole in holes if hole < need)
            self.memo = (self.version, need, external, largest)
        return external, largest

    def admit(self, request: int) -> None:
        """Allocate ``request``'s chunk (the caller checked that a hole holds it)."""
        self.offset[request] = self.allocator.allocate(self.chunk[request])
        self.version += 1
        self.chunk_sum += self.chunk[request]
        self.reserved_sum += self.reserved[request]
        self.filled_sum += self.filled[request]
        self.final_sum += self.final[request]

    def release(self, request: int) -> None:
        """Free ``request``'s chunk."""
        self.allocator.release(self.offset.pop(request))
        self.version += 1
        self.chunk_sum -= self.chunk[request]
        self.reserved_sum -= self.reserved[request]
        self.filled_sum -= self.filled[request]
        self.final_sum -= self.final[request]

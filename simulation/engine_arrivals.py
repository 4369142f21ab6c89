"""When requests join the over-time engine's queue: first turns at their arrival times, a
conversation's later turns their think time after the previous turn finishes."""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from collections import deque

import numpy as np


class Arrivals:
    """The requests still to arrive and the queue of those that have (seconds; requests by index).

    ``arrival`` (float64, shape (n,)) holds the first turns' times and gets each later turn's
    once its parent finishes; ``parent`` (int64, shape (n,)) is the previous turn or −1;
    ``think`` (float64, shape (n,)) the seconds from a parent's completion to its next turn;
    ``rejected`` (bool, shape (n,)) the requests that never run.
    """

    def __init__(self, arrival: np.ndarray, parent: np.ndarray, think: np.ndarray, rejected: np.ndarray) -> None:
        self.arrival, self.think, self.rejected = arrival, think.tolist(), rejected
        self.children: dict[int, list[int]] = {}  # request → its next turns
        for child in np.flatnonzero(parent >= 0).tolist():
            self.children.setdefault(int(parent[child]), []).append(child)
        roots = np.flatnonzero(~rejected & (parent < 0))
        roots = roots[np.argsort(arrival[roots], kind="stable")]
        self.roots, self.root_arrival = roots.tolist(), arrival[roots].tolist()
        self.next_root = 0
        self.released: list[tuple[float, int]] = []  # (arrival, request) of later turns, a heap
        self.queue: deque[int] = deque()
        self.upcoming = self.root_arrival[0] if self.roots else math.inf  # the next arrival's time

    @property
    def last_first_turn(self) -> float:
        """When the last first turn arrives (0 with none)."""
        return self.root_arrival[-1] if self.roots else 0.0

    def next_arrival(self) -> float:
        """Time of the next arrival not yet queued (inf when none is left)."""
        upcoming = self.root_arrival[self.next_root] if self.next_root < len(self.roots) else math.inf
        if self.released and self.released[0][0] < upcoming:
            return self.released[0][0]
        return upcoming

    def enqueue(self, time: float) -> None:
        """Queue every request that has arrived by ``time``, in (arrival, request) order."""
        first, arrival = self.next_root, self.root_arrival
        last = first
        while last < len(arrival) and arrival[last] <= time:
            last += 1
        self.next_root = last
        released = self.released
        if released and released[0][0] <= time:
            new = [(arrival[i], self.roots[i]) for i in range(first, last)]
            while released and released[0][0] <= time:
                new.append(heapq.heappop(released))
            new.sort()
            self.queue.extend(request for _, request in new)
        else:  # the roots are sorted by arrival, ties by request: already in queue order
            self.queue.extend(self.roots[first:last])
        self.upcoming = self.next_arrival()

    def arrived_not_queued(self, time: float) -> int:
        """Requests that have arrived by ``time`` but are not queued yet."""
        return (bisect_right(self.root_arrival, time) - self.next_root
                + sum(1 for arrival, _ in self.released if arrival <= time))

    def head(self) -> int | None:
        """The next request in line: the queue's head, else the next first turn (None: neither)."""
        if self.queue:
            return self.queue[0]
        return self.roots[self.next_root] if self.next_root < len(self.roots) else None

    def release_children(self, request: int, time: float) -> None:
        """``request`` finished at ``time``: its next turns arrive their think time later."""
        for child in self.children[request]:
            if not self.rejected[child]:
                self.arrival[child] = time + self.think[child]
                heapq.heappush(self.released, (self.arrival[child], child))
                self.upcoming = self.next_arrival()

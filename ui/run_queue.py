"""Simulation runs shared by every browser session of one server: one at a time, each result kept.

A Streamlit server runs each session's script in a thread of one process, and the simulator is
pure Python under one interpreter lock: two sessions simulating at once share the CPU and both
finish late (41 s each where one alone took 19 s), and neither says why. Through one gate they
run one after the other, so the first finishes in its own time, and the second says it waits
(:func:`queued_message`: "Queued behind another session's run, started 12 s ago").

The gate is :class:`ui.gpu_lock.GpuGate`: a lock with an owner label, a start time and a cancel
flag, which knows nothing of GPUs beyond its name and its own status text (not used here). The
simulator has its own instance, so a kernel run and a simulation never wait for each other.

:class:`ResultStore` keeps finished results for every session, the job ``st.cache_data`` does
for the quick views. A run is looked up before it queues and again once it holds the gate, so a
session queued behind the very same run takes its result instead of repeating it. It is a
store, not ``st.cache_data``, because a cached function may not draw on elements made outside
it, and the progress bar, the stale marking and the Cancel button are made before the run
starts (:mod:`ui.run_feedback`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

import streamlit as st

from ui.gpu_lock import GateStatus, GpuGate

__all__ = ["ResultStore", "queued_message", "simulation_gate", "result_store", "STORE_ENTRIES"]

# Finished runs kept: an over-time result holds its series (about 2,000 samples × 12 columns)
# and its per-request arrays (≤ 100,000 requests), a few MB; the four-allocator comparison
# of one view is four entries.
STORE_ENTRIES = 32


class ResultStore:
    """A bounded, thread-safe map from a run's key to its result; the least recently used
    entry goes first once ``entries`` are held."""

    def __init__(self, entries: int = STORE_ENTRIES) -> None:
        if isinstance(entries, bool) or not isinstance(entries, int) or entries < 1:
            raise ValueError(f"entries: must be a positive integer, got {entries!r:.40}")
        self._entries = entries
        self._items: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any | None:
        """The result stored under ``key``, or None."""
        with self._lock:
            if key not in self._items:
                return None
            self._items.move_to_end(key)
            return self._items[key]

    def put(self, key: Hashable, value: Any) -> None:
        if value is None:
            raise ValueError("value: None means 'not stored' and cannot be stored")
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self._entries:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)


def queued_message(status: GateStatus) -> str:
    """What a session waiting at the gate is told: whose run it waits for, and since when."""
    if not status.busy:
        return "Starting: the simulator is free."
    return (f"Queued behind another session's run, started {status.held_s:.0f} s ago "
            f"({status.owner}); this run starts when it ends.")


@st.cache_resource
def simulation_gate() -> GpuGate:
    """The server's one gate for simulations: every session's long run goes through it."""
    return GpuGate()


@st.cache_resource
def result_store() -> ResultStore:
    """The server's one store of finished simulations."""
    return ResultStore()

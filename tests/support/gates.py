"""Another session on the server's run gates, for page tests: one that holds a gate (its run
still going) until released, and one that asks the running run to cancel (as another tab may)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ui.gpu_lock import GpuGate

__all__ = ["held_by_another_session", "cancelled_by_another_session"]


@contextmanager
def held_by_another_session(gate: GpuGate, owner: str = "simulating over time", *,
                            hold_s: float = 10.0) -> Iterator[threading.Event]:
    """Hold ``gate`` from another thread as ``owner`` while the block runs (at most ``hold_s``);
    yields the event that releases it early (``threading.Timer(t, event.set)`` lets it go mid-run)."""
    holding, release = threading.Event(), threading.Event()

    def other_session() -> None:
        with gate.hold(owner):
            holding.set()
            release.wait(hold_s)

    thread = threading.Thread(target=other_session)
    thread.start()
    assert holding.wait(5), "the other session never got the gate"
    try:
        yield release
    finally:
        release.set()
        thread.join(5)


@contextmanager
def cancelled_by_another_session(gate: GpuGate) -> Iterator[None]:
    """While the block runs, ask ``gate`` to cancel the run that holds it, once one does."""
    stop = threading.Event()

    def cancel() -> None:
        while not stop.wait(0.001):
            if gate.status().busy and gate.request_cancel():
                return

    thread = threading.Thread(target=cancel)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)

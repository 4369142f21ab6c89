"""One GPU, many browser tabs: serialise benchmark runs, let them be cancelled, survive OOM.

A Streamlit server runs every browser session's script in its own thread of one process, so
a ``threading.Lock`` held for the length of a run serialises GPU work across tabs. The page
keeps exactly one :class:`GpuGate` per process in ``st.cache_resource``; this module never
imports streamlit and holds no global state itself.

* ``gate.hold(owner, on_wait=...)`` waits for the GPU, calling ``on_wait(status)`` every
  ``poll_s`` seconds so the waiting tab can say who is running ("waiting for the GPU ...").
  The wait gives up after ``wait_s`` seconds with :class:`GpuBusy` (the page never hangs).
* ``gate.request_cancel()`` (from any tab) sets a flag the running sweep reads between shapes:
  the handle's ``check()`` raises :class:`RunCancelled`, which the sweep's progress callback
  lets unwind, freeing its tensors on the way out.
* :func:`run_guarded` turns a CUDA out-of-memory error into a reported outcome and returns the
  cached blocks to the driver (``torch.cuda.empty_cache()``), so the next run starts clean.

Streamlit's own stop/rerun exceptions derive from ``BaseException`` and pass straight through
``run_guarded``; the lock is released by ``hold``'s ``finally`` either way.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["GpuGate", "GateStatus", "RunHandle", "GpuBusy", "RunCancelled", "RunOutcome", "run_guarded",
           "is_oom"]

T = TypeVar("T")


class GpuBusy(RuntimeError):
    """The GPU stayed busy for longer than the caller was willing to wait."""


class RunCancelled(RuntimeError):
    """A run was cancelled (from this tab or another) between two shapes."""


@dataclass(frozen=True, kw_only=True)
class GateStatus:
    busy: bool
    owner: str | None  # who holds the GPU (a short description of the run)
    held_s: float | None  # seconds it has been held
    cancel_requested: bool

    @property
    def message(self) -> str:
        if not self.busy:
            return "The GPU is free."
        return (f"Waiting for the GPU: another session is running {self.owner} "
                f"(for {self.held_s:.0f} s so far).")


class RunHandle:
    """Given to the holder of the gate; ``check()`` between shapes honours cancellation."""

    def __init__(self, cancel: threading.Event) -> None:
        self._cancel = cancel

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def check(self) -> None:
        if self._cancel.is_set():
            raise RunCancelled("run cancelled")


class GpuGate:
    """A process-wide lock around GPU runs, with an owner label and a cancel flag."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._meta = threading.Lock()  # guards owner/since, read by waiting tabs
        self._cancel = threading.Event()
        self._owner: str | None = None
        self._since: float | None = None
        self._clock = clock

    def status(self) -> GateStatus:
        with self._meta:
            owner, since = self._owner, self._since
        busy = owner is not None
        return GateStatus(busy=busy, owner=owner, held_s=(self._clock() - since) if busy else None,
                          cancel_requested=self._cancel.is_set())

    def request_cancel(self) -> bool:
        """Ask the running sweep to stop at its next shape; False when nothing runs."""
        if self.status().busy:
            self._cancel.set()
            return True
        return False

    @contextmanager
    def hold(self, owner: str, *, wait_s: float = 600.0, poll_s: float = 0.5,
             on_wait: Callable[[GateStatus], None] | None = None) -> Iterator[RunHandle]:
        """Hold the GPU for one run.

        Parameters
        ----------
        owner : str
            What runs, shown to the tabs that wait.
        wait_s : float
            Longest wait before :class:`GpuBusy`.
        poll_s : float
            How often ``on_wait`` is called while waiting (it may raise to abandon the wait).
        """
        deadline = self._clock() + wait_s
        while not self._lock.acquire(timeout=poll_s):
            status = self.status()
            if self._clock() >= deadline:
                raise GpuBusy(status.message + f" Gave up after {wait_s:.0f} s.")
            if on_wait is not None:
                on_wait(status)
        try:
            self._cancel.clear()  # a cancel aimed at the previous run must not stop this one
            with self._meta:
                self._owner, self._since = owner, self._clock()
            yield RunHandle(self._cancel)
        finally:
            with self._meta:
                self._owner, self._since = None, None
            self._cancel.clear()
            self._lock.release()


@dataclass(frozen=True, kw_only=True)
class RunOutcome(Generic[T]):
    status: str  # "ok" | "oom" | "cancelled" | "error"
    value: T | None = None
    message: str = ""


def is_oom(exc: BaseException) -> bool:
    """CUDA out-of-memory, whether raised as torch's OutOfMemoryError or a RuntimeError."""
    return type(exc).__name__ == "OutOfMemoryError" or "out of memory" in str(exc).lower()


def _free_gpu_memory() -> None:
    gc.collect()  # drop the unwound frames' tensors before asking the allocator to release them
    try:
        import torch
    except ImportError:
        return
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def run_guarded(fn: Callable[[], T]) -> RunOutcome[T]:
    """Call ``fn``; report OOM, cancellation and errors as outcomes instead of raising.

    GPU memory is released after any failure. ``BaseException``s that are not ``Exception``s
    (Streamlit's stop/rerun, KeyboardInterrupt) propagate unchanged.
    """
    try:
        return RunOutcome(status="ok", value=fn())
    except RunCancelled as exc:
        _free_gpu_memory()
        return RunOutcome(status="cancelled", message=str(exc))
    except Exception as exc:  # noqa: BLE001 - every failure becomes a message on the page
        _free_gpu_memory()
        if is_oom(exc):
            return RunOutcome(status="oom", message="GPU out of memory: " + " ".join(str(exc).split())[:300]
                              + " (memory released; try a smaller shape)")
        return RunOutcome(status="error", message=f"{type(exc).__name__}: {exc}")

"""Feedback for a run that takes seconds: progress where the user looks, the old figures marked
stale meanwhile, and a Cancel button.

Made at the top of a tab, :class:`RunFeedback` holds a strip that stays in view while the tab is
scrolled (CSS ``position: sticky``) and is empty until a run needs it. :meth:`RunFeedback.run`
looks the run's key up in the server's :class:`ui.run_queue.ResultStore` first; only a miss
queues at the simulation gate and runs. Once it has run :data:`SHOW_AFTER_S`, or as soon as it
waits behind another session's run, the strip shows

* a caption "Stale — recomputing" and a style rule that dims the tab's figure containers
  (:func:`results_key`): until the script reaches them again they still hold the previous
  run's figures, which would otherwise look current;
* a progress bar fed by the run's progress callback, or the queue's state;
* a Cancel button.

Cancel works through Streamlit's own interruption. A click on a widget outside any fragment asks
for a new script run, and Streamlit raises its rerun exception in the running script at its next
element update: the bar update in the progress callback, so the simulation stops between two of
its steps and ``GpuGate.hold`` releases the gate on the way out. The click's callback has marked
the tab cancelled, and the new script run keeps the last finished figures, dimmed, and says the
run was cancelled instead of starting it again; the cancelled key is remembered, so the run
starts again only when an input changes or "Run again" is pressed. A click inside an
``st.fragment`` interrupts nothing (Streamlit queues fragment reruns behind the running script),
so a tab with a Cancel button is not a fragment. A cancel asked of the gate
(``GpuGate.request_cancel``, from any thread) stops the run the same way, through
``RunHandle.check`` in the progress callback.

A run whose library function reports no progress shows the strip from its start, without a bar
or Cancel (nothing would stop it midway). A run expected to take a fraction of a second can skip
the gate (``queue=False``): waiting behind another session's run of tens of seconds would cost
its user far more than sharing the CPU with it for a moment.

Test hook (``st.session_state``): :data:`GATE_HOOK`, a ``GpuGate`` standing for the server's, so a
test can hold it from another thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Generic, TypeVar

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from ui.gpu_lock import GpuBusy, GpuGate, RunCancelled
from ui.run_queue import ResultStore, queued_message, result_store, simulation_gate
from ui.tables import percent_text

__all__ = ["RunFeedback", "Run", "Progress", "cancel_key", "results_key", "stale_css", "sticky_css", "SHOW_AFTER_S",
           "GATE_HOOK"]

T = TypeVar("T")
Progress = Callable[[float], None]  # share of the run done, 0 … 1
GATE_HOOK = "simulation_gate"
# A run that ends sooner shows nothing: no flash of "stale" over figures about to be replaced.
SHOW_AFTER_S = 0.8
STALE_OPACITY = 0.45  # the dimmed figures stay readable
WAIT_S = 600.0  # longest wait behind other sessions' runs (seconds each) before giving up
POLL_S = 0.5  # how often a queued session's strip updates (and a Cancel click is noticed)
# Streamlit's top bar (the page navigation) covers the window's top 3.75 rem: the strip sticks below it.
STICKY_TOP = "3.75rem"


def cancel_key(tab: str) -> str:
    """The ``st.session_state`` key a Cancel click's callback sets for ``tab``'s next script run."""
    return f"run.{tab}.cancel"


def results_key(tab: str, part: str) -> str:
    """The ``st.container`` key of a tab's figures of one ``part`` (what is dimmed when stale)."""
    return f"run-results-{tab}-{part}"


def stale_css(tab: str, parts: Sequence[str]) -> str:
    """A ``<style>`` dimming the figure containers of ``parts`` (no Streamlit needed to build it)."""
    selectors = ", ".join(f".st-key-{results_key(tab, part)}" for part in parts)
    return f"<style>{selectors} {{ opacity: {STALE_OPACITY}; transition: opacity 0.3s; }}</style>"


def sticky_css(tab: str, background: str) -> str:
    """A ``<style>`` keeping the tab's feedback strip at the top of the window while the tab is
    scrolled; opaque (``background``), so the figures pass under it unseen."""
    return (f'<style>[data-testid="stLayoutWrapper"]:has(> .st-key-run-feedback-{tab}) '
            f"{{ position: sticky; top: {STICKY_TOP}; z-index: 99; background-color: {background}; }}</style>")


def _background() -> str:
    """The theme's page colour (the strip must hide what scrolls under it)."""
    kind = st.context.theme.type or "light"
    return st.get_option(f"theme.{kind}.backgroundColor") or "Canvas"


@dataclass(frozen=True, kw_only=True)
class Run(Generic[T]):
    """What :meth:`RunFeedback.run` gives the page to draw.

    ``value``: the result for the key asked when ``fresh``, else the last finished one of this
    part (None before any); ``status``: ``"done"``, ``"cancelled"`` or ``"busy"`` (gave up queueing).
    """

    value: T | None
    fresh: bool
    status: str


def _set(key: str, value: object) -> None:
    st.session_state[key] = value


def _forget(key: str) -> None:
    st.session_state.pop(key, None)


class _Strip:
    """One run's lines in the tab's strip: drawn on first need, then only the status line moves."""

    def __init__(self, slot: DeltaGenerator, *, text: str, css: str, cancel: tuple[str, str] | None) -> None:
        self._slot, self._text, self._css, self._cancel = slot, text, css, cancel
        self._status: DeltaGenerator | None = None
        self.frame: DeltaGenerator | None = None

    def show(self, status: str, share: float | None) -> None:
        """``status`` beside a bar at ``share`` (0 … 1), or as a line when None (no progress known)."""
        if self.frame is None:
            self.frame = self._slot.container()
            self.frame.caption(self._text + "\n\n" + self._css, unsafe_allow_html=True)
            self._status = self.frame.empty()
            if self._cancel is not None:
                button_key, flag = self._cancel
                self.frame.button("Cancel", key=button_key, icon=":material/cancel:", on_click=_set, args=(flag, True))
        if share is None:
            self._status.caption(status)
        else:
            self._status.progress(min(max(share, 0.0), 1.0), text=status)

    def clear(self) -> None:
        self._slot.empty()


class RunFeedback:
    """Progress in view, stale marking and Cancel for the long runs of one tab (``tab``: a short
    name, unique on the page). Make it before the tab's widgets: its strip is the tab's top."""

    def __init__(self, tab: str, *, gate: GpuGate | None = None, store: ResultStore | None = None) -> None:
        self.tab = tab
        hooked = st.session_state.get(GATE_HOOK)
        self.gate = gate if gate is not None else hooked if hooked is not None else simulation_gate()
        self.store = store if store is not None else result_store()  # an empty store is falsy (len 0)
        self._top = st.container(key=f"run-feedback-{tab}")
        self._cancel_flag = cancel_key(tab)
        # Set by a Cancel click's callback before this script run started; read by this run only.
        self._cancel_asked = bool(st.session_state.pop(self._cancel_flag, False))

    def results(self, part: str = "main") -> DeltaGenerator:
        """The container for the figures of ``part``: draw them in it, so they can be dimmed."""
        return st.container(key=results_key(self.tab, part))

    def _key(self, part: str, what: str) -> str:
        return f"run.{self.tab}.{part}.{what}"

    def run(self, key: Hashable, what: str, compute: Callable[[Progress], T], *, part: str = "main",
            stale: Sequence[str] | None = None, reports_progress: bool = True, queue: bool = True) -> Run[T]:
        """The result of ``compute(progress)`` under ``key``: stored, or run through the gate with
        the strip's feedback.

        Parameters
        ----------
        key : hashable
            Everything the result depends on.
        what : str
            The run in a few words ("simulating over time"), shown here and to queued sessions.
        compute : callable
            Takes a progress callback (share done, 0 … 1) and returns the result (never None).
        part : str
            Which figures it draws (:meth:`results`); ``stale``: the parts dimmed while it runs
            (default: ``part`` only).
        reports_progress : bool
            False when ``compute`` never calls ``progress``: no bar and no Cancel.
        queue : bool
            False for a run expected to end within a fraction of a second: it runs at once,
            without the gate (never queued, and a cancel asked of the gate does not reach it);
            the strip and its Cancel button still work should it last longer.
        """
        last = self._key(part, "last")
        found = self.store.get(key)
        if found is not None:
            st.session_state[last] = found
            return Run(value=found, fresh=True, status="done")
        previous = st.session_state.get(last)
        parts = tuple(stale or (part,))
        cancelled = self._key(part, "cancelled")
        if self._cancel_asked or st.session_state.get(cancelled) == key:
            self._cancel_asked = False
            return self._cancelled(key, part, parts, previous)
        st.session_state.pop(cancelled, None)
        text = (":material/hourglass_top: **Stale — recomputing**: the figures below are from the previous "
                "settings until this run ends." if previous is not None else
                ":material/hourglass_top: Computing: the figures appear when this run ends.")
        slot = self._top.empty()
        strip = _Strip(slot, text=text, css=sticky_css(self.tab, _background()) + stale_css(self.tab, parts),
                       cancel=(self._key(part, "cancel_button"), self._cancel_flag) if reports_progress else None)
        try:
            value, waited = self._gated(key, what, compute, strip, reports_progress, self._key(part, "share"), queue)
        except RunCancelled:
            strip.clear()
            return self._cancelled(key, part, parts, previous)
        except GpuBusy:
            strip.clear()
            self._top.warning(f"The simulator stayed busy with other sessions' runs for {WAIT_S:.0f} s; "
                              "change nothing and rerun to queue again.", icon=":material/hourglass_disabled:")
            return Run(value=previous, fresh=False, status="busy")
        except Exception:
            strip.clear()  # the page shows the error; the strip must not stay "recomputing"
            raise
        strip.clear()
        if waited is not None:  # said after the run too: it is why the run took longer than usual
            self._top.caption(f":material/schedule: This run queued {waited:.1f} s behind another session's run.")
        self.store.put(key, value)
        st.session_state[last] = value
        return Run(value=value, fresh=True, status="done")

    def _gated(self, key: Hashable, what: str, compute: Callable[[Progress], T], strip: _Strip,
               reports_progress: bool, share_key: str, queue: bool) -> tuple[T, float | None]:
        """The result and the seconds it queued behind another session's run (None: no wait);
        without ``queue`` it runs outside the gate."""
        started = time.monotonic()
        st.session_state[share_key] = 0.0
        waited: list[bool] = []

        def on_wait(status) -> None:
            waited[:] = [True]
            strip.show(queued_message(status), None)

        held = self.gate.hold(what, wait_s=WAIT_S, poll_s=POLL_S, on_wait=on_wait) if queue else nullcontext()
        with held as handle:
            queued = time.monotonic() - started if waited else None
            found = self.store.get(key)  # the run queued ahead may have been this very one
            if found is not None:
                return found, queued
            label = what[:1].upper() + what[1:]

            def progress(share: float) -> None:
                if handle is not None:
                    handle.check()  # a cancel asked of the gate: stop between two steps
                st.session_state[share_key] = share
                if strip.frame is not None or time.monotonic() - started >= SHOW_AFTER_S:
                    strip.show(f"{label}: {percent_text(share, 0)}", share)  # Streamlit's rerun exception surfaces here

            if reports_progress:
                return compute(progress), queued
            strip.show("This run reports no progress, so it cannot be cancelled midway.", None)
            with strip.frame, st.spinner(label, show_time=True):
                return compute(progress), queued

    def _cancelled(self, key: Hashable, part: str, parts: Sequence[str], previous: object) -> Run:
        st.session_state[self._key(part, "cancelled")] = key
        share = st.session_state.get(self._key(part, "share"))
        at = f" at {percent_text(share, 0)}" if isinstance(share, float) and 0 < share < 1 else ""
        box = self._top.container()
        box.warning(f"Run cancelled{at}. " + ("The figures below are the last finished run's, not those of the "
                                             "settings above." if previous is not None else
                                             "It has no earlier result to show."), icon=":material/cancel:")
        box.caption("**Stale** until the run is done: change a setting, or run it again."
                    "\n\n" + sticky_css(self.tab, _background()) + stale_css(self.tab, parts), unsafe_allow_html=True)
        box.button("Run again", key=self._key(part, "again"), icon=":material/replay:", on_click=_forget,
                   args=(self._key(part, "cancelled"),))
        return Run(value=previous, fresh=False, status="cancelled")

"""Helpers for driving a Streamlit page in playwright: wait for reruns, move sliders, read text.

Streamlit reruns the page script after every widget change. A test must wait for *that* rerun
to finish before reading the screen: on a loaded 2-core machine the rerun can start well after
the key press, so "no run in progress" alone is not enough. :func:`goto` installs a counter of
finished script runs in the page; :func:`after_rerun` does an action and waits until the counter
has moved and the app is idle again.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

# stApp carries the script state ('initial', 'running', 'notRunning'); after a run ends,
# lazily loaded elements (metrics, charts) still show an stSkeleton placeholder for a moment.
_IDLE_JS = """() => {
  const app = document.querySelector('[data-testid="stApp"]');
  return !!app && app.getAttribute('data-test-script-state') === 'notRunning'
    && !document.querySelector('[data-testid="stSkeleton"], [data-testid="stAppSkeleton"]');
}"""
# Counts the transitions of stApp's script state out of 'running' (one per finished script run),
# from the mutation records' old values: reading the attribute in the callback instead misses a
# run that starts and ends between two callbacks (seen on CI: the slider's rerun had written the
# URL, the counter never moved).
_INSTALL_RUN_COUNTER_JS = """() => {
  if (window.__stRuns !== undefined) return;
  window.__stRuns = 0;
  const app = document.querySelector('[data-testid="stApp"]');
  new MutationObserver((records) => {
    for (const r of records) if (r.oldValue === 'running') window.__stRuns += 1;
  }).observe(app, {attributes: true, attributeOldValue: true, attributeFilter: ['data-test-script-state']});
}"""
# Quiet time that counts as idle: reruns queued by several quick key presses start within it.
_SETTLE_S = 0.6
_RERUN_TIMEOUT_S = 90.0  # from the action to the end of the run it causes
# A slider press whose value has not moved by then was lost, and is pressed again (at most
# _PRESS_RETRIES times): CI once waited out _RERUN_TIMEOUT_S on a seventh press whose value and
# URL never changed, after six that had.
_LOST_PRESS_S = 20.0
_PRESS_RETRIES = 2


def wait_idle(page, timeout_s: float = 90.0) -> float:
    """Block until the app has finished its script run and drawn every element; returns the
    ``time.monotonic()`` at which it became idle (before the quiet time that confirms it)."""
    deadline = time.monotonic() + timeout_s
    quiet_since = None
    while time.monotonic() < deadline:
        if not page.evaluate(_IDLE_JS):
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= _SETTLE_S:
            return quiet_since
        time.sleep(0.1)
    raise TimeoutError(f"app still running after {timeout_s} s")


def _runs(page) -> tuple[int, str]:
    """The finished-run count and the page's URL: a run that the count misses still shows in the
    URL when it writes the widget state there (every page of this app does)."""
    return tuple(page.evaluate("() => [window.__stRuns ?? 0, location.href]"))


def after_rerun(page, action: Callable[[], object], *, lost: Callable[[], bool] | None = None) -> float:
    """Do ``action`` (a widget change), then wait for the rerun it causes to finish; returns the
    seconds from the action to the rerun's last element drawn. The rerun counts as having
    happened when the finished-run count moves or the URL changes (CI once timed out on a pick
    whose rerun had written the new model into the URL while the count stood still: a run that
    starts and ends within one frame of a starved browser can leave the script-state attribute
    unchanged); :func:`wait_idle` then waits for it to end.

    ``lost``: tells, once ``_LOST_PRESS_S`` have passed without a rerun, whether the action had
    no effect at all (then it is done again, up to ``_PRESS_RETRIES`` times)."""
    page.evaluate(_INSTALL_RUN_COUNTER_JS)
    before = _runs(page)
    start = time.monotonic()
    action()
    retries = 0 if lost is None else _PRESS_RETRIES
    retry_at = time.monotonic() + _LOST_PRESS_S
    deadline = time.monotonic() + _RERUN_TIMEOUT_S
    while _runs(page) == before:
        now = time.monotonic()
        if now > deadline:
            raise TimeoutError(f"no rerun finished within {_RERUN_TIMEOUT_S} s of the action")
        if retries and now > retry_at and lost():
            action()
            retries -= 1
            retry_at = now + _LOST_PRESS_S
            deadline = now + _RERUN_TIMEOUT_S
        time.sleep(0.05)
    return wait_idle(page) - start


def goto(page, url: str) -> float:
    """Open ``url`` and wait until the first script run has finished and rendered; returns the
    seconds from the navigation to the first run's last element drawn."""
    start = time.monotonic()
    page.goto(url)
    # Every page starts with st.title: until its heading is drawn the app shows only a skeleton
    # (and no 'Running...' widget yet), which wait_idle alone would take for a finished run.
    page.wait_for_selector('[data-testid="stMainBlockContainer"] [data-testid="stHeading"]',
                           timeout=90_000)
    idle = wait_idle(page)
    page.evaluate(_INSTALL_RUN_COUNTER_JS)
    return idle - start


def slider_press(page, label: str, key: str = "ArrowRight", times: int = 1) -> float:
    """Focus the slider whose label matches ``label``, press ``key`` ``times`` times, waiting for
    each press's rerun before the next (every press must change the value).

    Streamlit sliders are ``role=slider`` thumbs that respond to arrow, Home and End keys. A press
    that lands while the previous one's rerun is still drawing can be lost on a loaded machine
    (CI once read step 3 after three presses from 1), hence one press per rerun; a press whose
    value has not moved after ``_LOST_PRESS_S`` is pressed again. Returns the seconds the reruns
    took to draw, summed (see :func:`after_rerun`).
    """
    slider = page.get_by_role("slider", name=re.compile(re.escape(label)))
    if slider.count() == 0:
        container = page.locator('[data-testid="stSlider"]').filter(has_text=label)
        slider = container.get_by_role("slider")
    thumb = slider.first

    def current() -> str:  # an <input type=range> in this Streamlit; an ARIA thumb elsewhere
        return thumb.evaluate("e => e.value ?? e.getAttribute('aria-valuenow')")

    def one_press() -> float:
        value = current()

        def press() -> None:
            thumb.focus()
            thumb.press(key)

        return after_rerun(page, press, lost=lambda: current() == value)

    return sum(one_press() for _ in range(times))


def fill_number(page, label: str, value: str) -> None:
    """Type ``value`` into the ``st.number_input`` labelled ``label`` and submit it."""
    field = page.get_by_label(label)

    def fill() -> None:
        field.fill(value)
        field.press("Enter")

    after_rerun(page, fill)


def select_option(page, label: str, option: str) -> None:
    """Open the ``st.selectbox`` whose label contains ``label`` and pick ``option``."""
    box = page.locator('[data-testid="stSelectbox"]').filter(has_text=label).first

    def pick() -> None:
        box.click()
        page.get_by_role("option", name=option, exact=True).click()

    after_rerun(page, pick)


def metric_value(page, label: str) -> str:
    """Text of the ``st.metric`` whose label contains ``label``."""
    metric = page.locator('[data-testid="stMetric"]').filter(has_text=label).first
    return metric.locator('[data-testid="stMetricValue"]').inner_text()

"""Helpers for driving a Streamlit page in playwright: wait for reruns, move sliders, read text."""

from __future__ import annotations

import re
import time

# stApp carries the script state ('initial', 'running', 'notRunning'); after a run ends,
# lazily loaded elements (metrics, charts) still show an stSkeleton placeholder for a moment.
_IDLE_JS = """() => {
  const app = document.querySelector('[data-testid="stApp"]');
  return !!app && app.getAttribute('data-test-script-state') === 'notRunning'
    && !document.querySelector('[data-testid="stSkeleton"], [data-testid="stAppSkeleton"]');
}"""
# A rerun triggered by a widget takes a moment to start: the page must stay idle this long.
_SETTLE_S = 0.6


def wait_idle(page, timeout_s: float = 90.0) -> None:
    """Block until the app has finished its script run and drawn every element."""
    deadline = time.monotonic() + timeout_s
    quiet_since = None
    while time.monotonic() < deadline:
        if not page.evaluate(_IDLE_JS):
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= _SETTLE_S:
            return
        time.sleep(0.1)
    raise TimeoutError(f"app still running after {timeout_s} s")


def goto(page, url: str) -> None:
    """Open ``url`` and wait until the first script run has finished and rendered."""
    page.goto(url)
    # Every page starts with st.title: until its heading is drawn the app shows only a skeleton
    # (and no 'Running...' widget yet), which wait_idle alone would take for a finished run.
    page.wait_for_selector('[data-testid="stMainBlockContainer"] [data-testid="stHeading"]',
                           timeout=90_000)
    wait_idle(page)


def slider_press(page, label: str, key: str = "ArrowRight", times: int = 1) -> None:
    """Focus the slider whose label matches ``label`` and press ``key`` ``times`` times.

    Streamlit sliders are ``role=slider`` thumbs that respond to arrow keys.
    """
    slider = page.get_by_role("slider", name=re.compile(re.escape(label)))
    if slider.count() == 0:
        container = page.locator('[data-testid="stSlider"]').filter(has_text=label)
        slider = container.get_by_role("slider")
    thumb = slider.first
    thumb.focus()
    for _ in range(times):
        thumb.press(key)
    wait_idle(page)


def metric_value(page, label: str) -> str:
    """Text of the ``st.metric`` whose label contains ``label``."""
    metric = page.locator('[data-testid="stMetric"]').filter(has_text=label).first
    return metric.locator('[data-testid="stMetricValue"]').inner_text()


def select_option(page, label: str, option: str) -> None:
    """Open the ``st.selectbox`` whose label contains ``label`` and pick ``option``."""
    box = page.locator('[data-testid="stSelectbox"]').filter(has_text=label).first
    box.click()
    page.get_by_role("option", name=option, exact=True).click()
    wait_idle(page)

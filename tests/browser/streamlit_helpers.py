"""Helpers for driving a Streamlit page in playwright: wait for reruns, move sliders, read text."""

from __future__ import annotations

import re
import time

# Streamlit shows this widget in the top-right corner while a script run is in progress.
_RUNNING_SELECTOR = '[data-testid="stStatusWidget"]'
# A rerun triggered by a widget can take a moment to show its status widget; wait this long
# for the page to settle so that a finished run is not mistaken for one not yet started.
_SETTLE_S = 0.6


def wait_idle(page, timeout_s: float = 90.0) -> None:
    """Block until the app has finished its current script run (no 'Running...' widget)."""
    deadline = time.monotonic() + timeout_s
    page.wait_for_selector('[data-testid="stApp"]', timeout=timeout_s * 1000)
    quiet_since = None
    while time.monotonic() < deadline:
        running = page.locator(_RUNNING_SELECTOR).count() > 0 and page.locator(
            _RUNNING_SELECTOR
        ).first.is_visible()
        if running:
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
    page.wait_for_selector('[data-testid="stMainBlockContainer"]', timeout=90_000)
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

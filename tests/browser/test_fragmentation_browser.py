"""The fragmentation explorer in headless Chromium: a slider move changes the figures on screen."""

import pytest

from support.browser import goto, metric_value, slider_press

pytestmark = pytest.mark.browser


def number(text: str) -> float:
    return float(text.replace(",", "").replace("%", "").split()[0])


def test_mean_length_slider_moves_the_paged_fit(app_url, page):
    goto(page, f"{app_url}/fragmentation")
    assert page.locator('[data-testid="stException"]').count() == 0
    # The reference page's problem 4 by default: 94 contiguous against about 1,500 paged.
    assert number(metric_value(page, "Requests that fit: contiguous")) == 94
    paged_before = number(metric_value(page, "Requests that fit: paged"))
    assert paged_before == pytest.approx(1500, rel=0.03)
    # Home takes the mean to its minimum (16 tokens): far more requests fit when paged, while
    # contiguous reservation still reserves the whole 32K context per request.
    slider_press(page, "Mean tokens per request", key="Home")
    paged_after = number(metric_value(page, "Requests that fit: paged"))
    assert paged_after > 10 * paged_before
    assert number(metric_value(page, "Requests that fit: contiguous")) == 94
    assert page.locator('[data-testid="stException"]').count() == 0
    # The state went into the URL, so the link reopens the same view.
    assert "mean=16" in page.url

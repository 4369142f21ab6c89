"""The sizer in a real browser: moving controls changes the figures on screen as it should."""

import pytest

from support.browser import fill_number, goto, metric_value, slider_press

pytestmark = pytest.mark.browser


def test_sizer_controls_move_the_numbers(app_url, page):
    goto(page, f"{app_url}/")
    assert metric_value(page, "KV per token") == "320 KiB"
    assert metric_value(page, "GPUs needed") == "16"

    # Usable 0.90 → 0.80: 1,144.3 GB over 64 GB per H100 = 17.9 → 18 GPUs.
    slider_press(page, "Usable fraction", key="ArrowLeft", times=10)
    assert metric_value(page, "GPUs needed") == "18"
    assert "usable=0.8" in page.url

    # 100 → 50 users halves the KV cache: 1,000 GiB → 500 GiB.
    fill_number(page, "Users (concurrent)", "50")
    assert metric_value(page, "KV, 50 users") == "500 GiB"


def test_shared_link_reopens_identically(app_url, page):
    goto(page, f"{app_url}/?kv=fp8&gpu=h200&units=GB+%28decimal%29")
    assert metric_value(page, "KV per token") == "163.8 KB"
    assert metric_value(page, "GPUs needed") == "5"

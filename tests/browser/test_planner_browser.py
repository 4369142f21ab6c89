"""Capacity planner in a real browser: opens from the router, a slider moves the numbers the right
way and into the URL, and the edge tab answers."""

from __future__ import annotations

import re

import pytest

from support.browser import goto, metric_value, slider_press, wait_idle

pytestmark = pytest.mark.browser

# Problem 4's set-up, every request at 2,048 tokens, datasheet rates, a 10 ms TPOT target:
# 539 sequences per TP-8 replica (hand figures in tests/planner/test_cli.py) = 67.4 per GPU.
REFERENCE_QUERY = ("model=llama-3.1-70b&kv=fp8&w=fp8&gpu=h100-sxm&tp=8&traffic=fixed&length=2048"
                   "&source=datasheet&tpot=10&maxctx=32768")


def _number(text: str) -> float:
    return float(text.replace(",", "").split()[0])


def test_tpot_slider_moves_users_per_replica(app_url, page):
    goto(page, f"{app_url}/planner?{REFERENCE_QUERY}")
    assert page.locator('[data-testid="stException"]').count() == 0
    assert metric_value(page, "Users per replica, paged") == "539"
    assert metric_value(page, "Users per replica, contiguous") == "94"

    # one step left: 10 → 5 ms; a tighter target admits a smaller batch
    slider_press(page, "TPOT target", "ArrowLeft")
    tighter = _number(metric_value(page, "Users per replica, paged"))
    assert 0 < tighter < 539
    assert re.search(r"[?&]tpot=5(&|$)", page.url)

    # two steps right: 15 ms; more users than at 10 ms, still at most the 1,506 that fit
    slider_press(page, "TPOT target", "ArrowRight", times=2)
    looser = _number(metric_value(page, "Users per replica, paged"))
    assert 539 < looser <= 1506
    assert page.locator('[data-testid="stException"]').count() == 0


def test_edge_tab_shows_history_against_the_control_step(app_url, page):
    goto(page, f"{app_url}/planner")
    page.get_by_role("tab", name=re.compile("Edge")).click()
    wait_idle(page)
    history = _number(metric_value(page, "History that fits"))
    assert history > 0
    slider_press(page, "Control rate", "ArrowRight", times=4)  # 5 → 7 Hz: a shorter budget
    assert metric_value(page, "Control-step budget") == "142.9 ms"  # 1 / 7 Hz
    assert page.locator('[data-testid="stException"]').count() == 0

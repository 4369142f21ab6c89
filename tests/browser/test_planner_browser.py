"""Capacity planner in a real browser: opens from the router, a slider moves the numbers the right
way and into the URL, and the edge tab answers."""

from __future__ import annotations

import re

import pytest

from hardware.gpus import get_gpu
from planner.step_model import ServingSetup, step_shape, step_time
from sizing.catalogue import get_entry
from support.browser import goto, metric_value, slider_press, wait_idle

pytestmark = pytest.mark.browser

# Problem 4's set-up, every request at 2,048 tokens, datasheet rates, a 10 ms TPOT target; the
# catalogue model is timed by the step model (its config at TP 8, FP8 weights and KV, vLLM with
# CUDA graphs), and memory holds 1,506 paged sequences (tests/planner/test_cli.py).
REFERENCE_QUERY = ("model=llama-3.1-70b&kv=fp8&w=fp8&gpu=h100-sxm&tp=8&traffic=fixed&length=2048"
                   "&source=datasheet&tpot=10&maxctx=32768")
H100 = get_gpu("h100-sxm")
SHAPE = step_shape(get_entry("llama-3.1-70b").config_bytes, tp=8, gpu=H100, weight_format="fp8", kv_bytes=1.0)


def _cap(target_ms: float) -> int:
    """The most sequences of 2,048 tokens whose step the step model keeps within ``target_ms``."""
    within = [b for b in range(1, 1507)
              if step_time(SHAPE, ServingSetup(gpu=H100), decode_batch=b, context=2048).total_s * 1e3 <= target_ms]
    return max(within, default=0)


def _number(text: str) -> float:
    return float(text.replace(",", "").split()[0])


def test_tpot_slider_moves_users_per_replica(app_url, page):
    goto(page, f"{app_url}/planner?{REFERENCE_QUERY}")
    assert page.locator('[data-testid="stException"]').count() == 0
    cap = _cap(10)
    assert metric_value(page, "Users per replica, paged") == f"{cap:,}"
    assert metric_value(page, "Users per replica, contiguous") == f"{min(cap, 94):,}"

    # one step left: 10 → 5 ms; a tighter target admits a smaller batch (none, if one step misses it)
    slider_press(page, "TPOT target", "ArrowLeft")
    tighter = _number(metric_value(page, "Users per replica, paged"))
    assert tighter == _cap(5) < cap
    assert re.search(r"[?&]tpot=5(&|$)", page.url)

    # two steps right: 15 ms; more users than at 10 ms, still at most the 1,506 that fit
    slider_press(page, "TPOT target", "ArrowRight", times=2)
    looser = _number(metric_value(page, "Users per replica, paged"))
    assert cap < looser == _cap(15) <= 1506
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

"""The cluster page in a real browser: a heavier load takes more GPUs and goes into the URL, and a
link opened in a fresh browser context shows the same plan."""

from __future__ import annotations

import re

import pytest

from planner.cluster.page_view import ClusterPageInputs, cluster_record
from support.browser import fill_number, goto, metric_value

pytestmark = pytest.mark.browser


def test_rate_moves_the_pools_and_the_link_carries_the_plan(app_url, page, browser):
    goto(page, f"{app_url}/cluster?model=llama-3.1-70b&gpu=h200&kv=bf16&rate=1.0")
    assert page.locator('[data-testid="stException"]').count() == 0
    one = cluster_record(ClusterPageInputs(model="llama-3.1-70b", gpu="h200", kv_dtype="bf16", rate=1.0))
    assert metric_value(page, "GPUs, aggregated") == f"{one['aggregated']['gpus']:,}"
    fill_number(page, "Arrival rate (requests/s)", "40")
    forty = cluster_record(ClusterPageInputs(model="llama-3.1-70b", gpu="h200", kv_dtype="bf16", rate=40.0))
    assert forty["aggregated"]["gpus"] > one["aggregated"]["gpus"]  # more load, more replicas
    assert metric_value(page, "GPUs, aggregated") == f"{forty['aggregated']['gpus']:,}"
    assert re.search(r"[?&]rate=40(\.0)?(&|$)", page.url)
    fresh = browser.new_context(viewport={"width": 1440, "height": 1000})
    try:
        tab = fresh.new_page()
        goto(tab, page.url)
        assert metric_value(tab, "GPUs, aggregated") == f"{forty['aggregated']['gpus']:,}"
    finally:
        fresh.close()

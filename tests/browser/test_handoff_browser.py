"""Cross-page flow in a real browser: the sizer's KV budget carries over to the explorer."""

import pytest

from support.browser import after_rerun, goto, metric_value, select_option

pytestmark = pytest.mark.browser


def test_sizer_budget_reaches_the_fragmentation_explorer(app_url, page):
    goto(page, f"{app_url}/")
    select_option(page, "KV precision", "FP8")
    assert metric_value(page, "KV per token") == "160 KiB"

    after_rerun(page, page.get_by_text("Open the fragmentation explorer").click)
    page.wait_for_url("**/fragmentation**")
    assert page.get_by_text("From the sizer").first.is_visible()
    # Reference problem 4 with the sizer's budget: 8 × 72 GB − 70.6 GB of FP8 weights = 505.4 GB;
    # contiguous 32K reservations of 5 GiB each: ⌊505.4e9 / 5,368,709,120⌋ = 94 requests.
    assert metric_value(page, "Requests that fit: contiguous") == "94"
    paged = int(metric_value(page, "Requests that fit: paged").replace(",", ""))
    assert 1_400 <= paged <= 1_600  # "≈ 1,500" on the reference page

"""Cross-page flow in a real browser: the sizer's KV budget carries over to the explorer."""

from urllib.parse import urljoin

import pytest

from support.browser import after_rerun, goto, metric_value, select_option

pytestmark = pytest.mark.browser


def test_sizer_budget_reaches_the_fragmentation_explorer(app_url, page):
    goto(page, f"{app_url}/")
    select_option(page, "KV precision", "FP8 (e4m3)")
    assert metric_value(page, "KV per token") == "160 KiB"

    after_rerun(page, page.get_by_text("Open the fragmentation explorer").click)
    page.wait_for_url("**/fragmentation**")
    assert page.get_by_text("From the sizer").first.is_visible()
    # Reference problem 4 with the sizer's budget: 8 × 72 GB − 70.6 GB of FP8 weights = 505.4 GB;
    # contiguous 32K reservations of 5 GiB each: ⌊505.4e9 / 5,368,709,120⌋ = 94 requests.
    assert metric_value(page, "Requests that fit: contiguous") == "94"
    paged = int(metric_value(page, "Requests that fit: paged").replace(",", ""))
    assert 1_400 <= paged <= 1_600  # "≈ 1,500" on the reference page


ANSWER_LABELS = ("GPUs to deploy", "Layout", "Requests per replica")


def _fresh_page(browser):
    """A new browser context: no session, no hand-off — only what the URL carries."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(60_000)
    return context, context.new_page()


def test_the_sizers_links_carry_the_answer_and_the_budget_to_a_fresh_browser(app_url, page, browser):
    # A new user's question: Llama-3.1-70B, FP8 KV and weights, 32K context, 100 users, H100 SXM.
    goto(page, f"{app_url}/?model=llama-3.1-70b&kv=fp8&w=fp8&ctx=32768&users=100&gpu=h100-sxm&tp=8&ngpu=8")
    answer = {label: metric_value(page, label) for label in ANSWER_LABELS}
    assert answer["GPUs to deploy"] == "12 × H100 SXM" and answer["Layout"] == "TP 4 × 3 replicas"
    planner_href = page.locator("a", has_text="open the planner").first.get_attribute("href")
    fragmentation_href = page.locator("a", has_text="Open the fragmentation explorer").first.get_attribute("href")

    context, fresh = _fresh_page(browser)
    try:
        goto(fresh, urljoin(f"{app_url}/", planner_href))
        assert {label: metric_value(fresh, label) for label in ANSWER_LABELS} == answer
        # Reference problem 4's budget as whole tokens: ⌊505.4 GB ÷ 160 KiB⌋; 94 contiguous 32K
        # reservations, as the session hand-off gives above.
        goto(fresh, urljoin(f"{app_url}/", fragmentation_href))
        assert metric_value(fresh, "Requests that fit: contiguous") == "94"
        assert 1_400 <= int(metric_value(fresh, "Requests that fit: paged").replace(",", "")) <= 1_600
    finally:
        context.close()

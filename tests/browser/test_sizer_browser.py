"""The sizer in a real browser: moving controls changes the figures on screen as it should."""

import pytest

from support.browser import after_rerun, fill_number, goto, metric_value, slider_press

pytestmark = pytest.mark.browser


def test_sizer_controls_move_the_numbers(app_url, page):
    goto(page, f"{app_url}/")
    assert metric_value(page, "KV per token") == "320 KiB"
    assert metric_value(page, "GPUs if pooled (lower bound)") == "16"

    # Usable 0.90 → 0.80: 1,144.3 GB over 64 GB per H100 = 17.9 → 18 GPUs.
    slider_press(page, "Usable fraction", key="ArrowLeft", times=10)
    assert metric_value(page, "GPUs if pooled (lower bound)") == "18"
    assert "usable=0.8" in page.url

    # 100 → 50 users halves the KV cache: 1,000 GiB → 500 GiB.
    fill_number(page, "Users (concurrent)", "50")
    assert metric_value(page, "KV, 50 users") == "500 GiB"


def test_shared_link_reopens_identically(app_url, page):
    goto(page, f"{app_url}/?kv=fp8&gpu=h200&units=GB+%28decimal%29")
    assert metric_value(page, "KV per token") == "163.8 KB"
    assert metric_value(page, "GPUs if pooled (lower bound)") == "5"


def test_catalogue_filters_as_you_type(app_url, page):
    goto(page, f"{app_url}/")

    # The list itself filters as one types into it: "qwen3-8" leaves Qwen models; pick Qwen3-8B.
    box = page.get_by_role("combobox", name="Model", exact=True)

    def pick() -> None:
        box.click()
        box.fill("qwen3-8")
        page.get_by_role("option").first.wait_for()
        options = page.get_by_role("option").all_inner_texts()
        assert options and all("qwen" in o.lower() for o in options), options  # only what matches
        page.get_by_role("option").filter(has_text=" · Qwen/Qwen3-8B · ").first.click()

    after_rerun(page, pick)
    # Qwen3-8B: 2 × 36 layers × 8 KV heads × 128 × 2 B = 147,456 B = 144 KiB per token.
    assert metric_value(page, "KV per token") == "144 KiB"
    assert "model=qwen3-8b" in page.url

    # The search box: every word must match (name, family or repo); the first match is picked.
    search = page.get_by_label("Search the catalogue")

    def search_for() -> None:
        search.fill("gemma 3 1b")
        search.press("Enter")

    after_rerun(page, search_for)
    # Gemma-3-1B: 26 layers × 1 KV head × 256 × 2 (K, V) × 2 B = 26 KiB per token.
    assert metric_value(page, "KV per token") == "26 KiB"
    assert "model=gemma-3-1b" in page.url

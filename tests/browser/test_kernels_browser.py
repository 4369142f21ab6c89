"""The live kernel page in a real browser without a GPU: banner, upload, walk-through slider, tab in the URL."""

from pathlib import Path

import pytest

from support.browser import after_rerun, goto, metric_value, slider_press

pytestmark = pytest.mark.browser

FIXTURE = Path(__file__).resolve().parents[1] / "data/kernels_bench_synthetic.json"


def test_no_gpu_view_upload_and_online_softmax(app_url, page):
    goto(page, f"{app_url}/kernels")
    assert page.locator('[data-testid="stException"]').count() == 0
    assert page.get_by_text("No CUDA GPU on this machine").first.is_visible()

    # A malformed upload gets a message, a harness JSON is drawn.
    page.locator('[data-testid="stExpander"]').filter(has_text="Upload a benchmark JSON").first.click()
    file_input = page.locator('[data-testid="stFileUploader"] input[type=file]').first
    after_rerun(page, lambda: file_input.set_input_files(
        files=[{"name": "broken.json", "mimeType": "application/json", "buffer": b"{nope"}]))
    assert page.get_by_text("not valid JSON").first.is_visible()
    after_rerun(page, lambda: file_input.set_input_files(str(FIXTURE)))
    page.get_by_text("synthetic fixture", exact=False).first.wait_for(timeout=60_000)
    assert metric_value(page, "Achieved TB/s") == "3.60"
    assert page.locator('[data-testid="stPlotlyChart"]').count() >= 1

    # Online-softmax walk-through: move the step slider and read the step counter.
    # Opening a tab reruns the page, which writes the tab into the URL; the walk-through's step too.
    after_rerun(page, lambda: page.get_by_role("tab", name="Online softmax").click())
    assert "tab=softmax" in page.url
    slider_press(page, "Step", times=3)
    page.get_by_text("Step 4 of 8").first.wait_for(timeout=30_000)
    assert float(metric_value(page, "Max |tiled − naive|")) < 1e-5
    assert "sm_step=4" in page.url

    # A shared link reopens the same tab and step.
    goto(page, page.url)
    page.get_by_text("Step 4 of 8").first.wait_for(timeout=60_000)
    assert page.get_by_role("tab", name="Online softmax").get_attribute("aria-selected") == "true"
    assert page.locator('[data-testid="stException"]').count() == 0

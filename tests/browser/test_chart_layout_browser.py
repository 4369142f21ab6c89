"""The fragmentation and planner pages' charts at 800 and 1440 px in headless Chromium, measured
from the DOM: no chart (its SVG or any text in it) reaches outside its container, no two x-axis
tick labels touch, no title sits on another title or on the legend.

At 800 px these pages keep their sidebar, which leaves the main area about 470 px wide, and the
fragmentation page's two side-by-side charts about 225 px each: the narrowest charts in the app.
One tab serves every view (resized between them), so the module loads four pages in all.
"""

from __future__ import annotations

import pytest

from support.browser import goto
from support.chart_geometry import measure_charts, overflow_problems, tick_problems, title_problems

pytestmark = pytest.mark.browser

WIDTHS = (800, 1440)
# Charts each page draws on its first tab: the fragmentation snapshot's picture, block-size
# sweep and memory breakdown; the planner's throughput/TPOT figure.
PAGES = {"fragmentation": 3, "planner": 1}
# A title each page must show, spaces dropped (Plotly draws each <br> line as its own tspan).
MUST_SHOW = {"fragmentation": "Wherethememorygoes", "planner": "ThroughputperGPU"}
VIEWS = [(width, name) for width in WIDTHS for name in PAGES]


@pytest.fixture(scope="module")
def tab(browser):
    context = browser.new_context(viewport={"width": WIDTHS[0], "height": 1000})
    context.set_default_timeout(60_000)
    try:
        yield context.new_page()
    finally:
        context.close()


@pytest.fixture(scope="module", params=VIEWS, ids=[f"{name}-{width}px" for width, name in VIEWS])
def charts(request, app_url, tab) -> list[dict]:
    width, name = request.param
    tab.set_viewport_size({"width": width, "height": 1000})
    goto(tab, f"{app_url}/{name}")
    assert tab.locator('[data-testid="stException"]').count() == 0
    found = measure_charts(tab)
    # What the checks read must be there, or they pass on nothing.
    assert len(found) == PAGES[name], [c["titles"] for c in found]
    assert all(len(c["xticks"]) >= 2 and c["svgs"] for c in found)
    titles = "".join(t["text"] for c in found for t in c["titles"]).replace(" ", "")
    assert MUST_SHOW[name] in titles
    return found


def test_no_chart_overflows_its_container(charts):
    problems = [p for c in charts for p in overflow_problems(c)]
    assert not problems, "\n".join(problems)


def test_no_x_tick_labels_run_together(charts):
    problems = [p for c in charts for p in tick_problems(c)]
    assert not problems, "\n".join(problems)


def test_titles_clear_each_other_and_the_legend(charts):
    problems = [p for c in charts for p in title_problems(c)]
    assert not problems, "\n".join(problems)

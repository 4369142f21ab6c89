"""Every chart on the sizer, fragmentation and planner pages, as the pages draw them: each axis
with tick labels has a title, a horizontal legend sits far enough below the plot to clear the
x-axis title, and each chart exports a PNG named after it."""

from __future__ import annotations

import json
import re

import pytest

from support.apptest import open_page

# (page, query) for each tab that draws charts.
VIEWS = [("1_sizer.py", {}), ("2_fragmentation.py", {}), ("2_fragmentation.py", {"tab": "timeline"}),
         ("2_fragmentation.py", {"tab": "prefix"}), ("2_fragmentation.py", {"tab": "paper"}),
         ("2_fragmentation.py", {"tab": "sharing"}), ("4_planner.py", {}), ("4_planner.py", {"tab": "edge"})]
# Plotly's defaults (plotly.js layout attributes): 450 px high, margins t = 100 and b = 80 px.
DEFAULT_HEIGHT, DEFAULT_TOP, DEFAULT_BOTTOM = 450, 100, 80
# Tick labels (~20 px) and an axis title (~25 px) below the plot, with room to spare.
CLEARANCE_PX = 70


def _charts(page: str, query: dict) -> list[tuple[dict, dict]]:
    at = open_page(page, query=query)
    found = [(json.loads(c.proto.spec), json.loads(c.proto.config)) for c in at.get("plotly_chart")]
    assert found, (page, query)
    return found


def _used_axes(figure: dict) -> set[str]:
    """Layout names of the axes some trace draws on (``xaxis``, ``yaxis2``, …)."""
    used = set()
    for trace in figure["data"]:
        for letter in ("x", "y"):
            ref = trace.get(f"{letter}axis", letter)
            used.add(f"{letter}axis{ref[1:]}")
    return used


def _title(axis: dict) -> str:
    title = axis.get("title", {})
    return title.get("text", "") if isinstance(title, dict) else str(title)


@pytest.mark.parametrize("script, query", VIEWS, ids=[f"{p}-{q.get('tab', 'first')}" for p, q in VIEWS])
def test_axes_are_titled_and_legends_clear_the_axis_titles(script, query):
    for figure, config in _charts(script, query):
        layout = figure["layout"]
        name = _title(layout.get("title", {})) or config["toImageButtonOptions"]["filename"]
        for axis_name in _used_axes(figure):
            axis = layout.get(axis_name, {})
            if axis.get("showticklabels") is False or axis.get("matches"):
                continue  # no tick labels, or the twin of a titled shared axis
            assert _title(axis), f"{script} {query}: {name}: {axis_name} has no title"
        legend = layout.get("legend", {})
        if legend.get("orientation") == "h" and any(t.get("showlegend", True) for t in figure["data"]):
            margin = layout.get("margin", {})
            plot_px = (layout.get("height", DEFAULT_HEIGHT) - margin.get("t", DEFAULT_TOP)
                       - margin.get("b", DEFAULT_BOTTOM))
            assert legend.get("yanchor") == "top" and legend["y"] < 0, f"{name}: legend inside or above the plot"
            assert -legend["y"] * plot_px >= CLEARANCE_PX, f"{name}: legend {-legend['y'] * plot_px:.0f} px below"
        options = config["toImageButtonOptions"]
        assert options["format"] == "png" and re.fullmatch(r"[a-z0-9_]+", options["filename"])


def test_every_contender_marker_is_a_plotly_symbol_plain_and_open():
    """The roofline draws each contender's marker with "-open" appended; both names must be ones
    plotly accepts (a style that was already "-open" crashed the kernels page's roofline)."""
    import plotly.graph_objects as go

    from ui.kernel_charts import CONTENDER_STYLE

    for contender, (_, symbol) in CONTENDER_STYLE.items():
        for name in (symbol, f"{symbol}-open"):
            go.scatter.Marker(symbol=name)  # raises ValueError on a name plotly does not know


def test_block_size_axes_label_every_other_power_of_two():
    """The sweep's nine block sizes 1 … 256 ran together ("128256") in a 225 px chart; five
    labels (1, 4, 16, 64, 256) read apart there."""
    from ui.fragmentation_charts import block_ticks

    assert block_ticks([2 ** k for k in range(9)]) == [1, 4, 16, 64, 256]
    assert block_ticks([8, 16, 32]) == [8, 16, 32]  # few enough to label all
    assert block_ticks([1, 2, 4, 8, 16, 32]) == [1, 4, 16]  # ceil(6 / 5) = every second


def test_long_titles_wrap_and_take_a_taller_top_margin():
    from ui.fragmentation_charts import titled, wrapped

    head = titled("Where the memory goes (paper's fig. 2)")
    assert head == {"title": "Where the memory goes<br>(paper's fig. 2)", "margin_top": 40 + 22}
    assert titled("Paged waste by block size") == {"title": "Paged waste by block size", "margin_top": 40}
    assert wrapped("contiguous oracle", 12) == "contiguous<br>oracle"
    assert wrapped("paged (B=16)", 12) == "paged (B=16)"  # exactly 12 characters: one line


def test_geometry_checks_on_boxes_measured_in_chromium():
    """Boxes (left, top, right, bottom) read at 800 px before the charts were fixed: "128" and
    "256" overlap by 0.3 px, "64" and "128" sit 2.7 px apart (under a space), "1" and "4"
    after the fix 24 px apart; the planner's two subplot titles overlapped by 103 px; the
    breakdown's title ended 53 px past its 226 px container."""
    from support.chart_geometry import inside, overflow_problems, tick_problems, title_problems

    def text(label, box):
        return {"text": label, "box": box}

    ticks = [text("64", (488.8, 2072.8, 500.7, 2088.8)), text("128", (503.4, 2072.8, 521.3, 2088.8)),
             text("256", (521.0, 2072.8, 539.0, 2088.8))]
    chart = {"container": (558, 1798.8, 784, 2178.8), "svgs": [(558, 1798.8, 784, 2178.8)], "xticks": ticks,
             "titles": [text("Throughput", (314, 3586, 631.6, 3607)), text("Time", (529, 3586, 858.4, 3607))],
             "legend": [], "all_text": [text("Where the memory goes", (562, 1802.8, 837.1, 1823.8))]}
    assert [p.split(":")[0] for p in tick_problems(chart)] == [
        "x ticks '64' and '128' run together", "x ticks '128' and '256' run together"]
    apart = {**chart, "xticks": [text("1", (386, 2073, 392, 2089)), text("4", (416, 2073, 422, 2089))]}
    assert tick_problems(apart) == []
    assert len(title_problems(chart)) == 1
    assert title_problems({**chart, "titles": chart["titles"][:1], "legend": [(520, 3600, 700, 3700)]}) != []
    assert len(overflow_problems(chart)) == 1 and "Where the memory goes" in overflow_problems(chart)[0]
    assert inside((558.5, 1800, 784.6, 1900), chart["container"])  # sub-pixel rounding at the edge
    assert not inside((558, 1800, 786, 1900), chart["container"])

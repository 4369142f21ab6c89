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

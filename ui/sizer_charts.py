"""Plotly figures for the sizer page, drawn from :mod:`sizing.report` chart data (no arithmetic
beyond unit conversion for the axis)."""

from __future__ import annotations

import plotly.graph_objects as go

from sizing.report_charts import CurveSeries, MemoryChart
from units import to_unit

# The reference page's colours: grey weights, blue KV, red total memory, dashed usable share.
WEIGHTS_GREY = "#9e9e9e"
KV_BLUE = "#1f77b4"
TOTAL_RED = "#d62728"
# Below the plot and clear of the x-axis title (a legend at plotly's default spot covers "GPUs").
LEGEND_BELOW = {"orientation": "h", "yanchor": "top", "y": -0.3, "x": 0}


HERE_BLACK = "#000000"
TITLE_MARGIN = {"t": 60}  # room for the title, which an exported PNG keeps


def memory_vs_gpus(chart: MemoryChart, unit: str, title: str = "") -> go.Figure:
    """Weights + KV (if every user reaches full context) against the memory of 1..n GPUs."""
    counts = list(chart.gpu_counts)
    figure = go.Figure()
    figure.add_bar(x=counts, y=[to_unit(chart.weights_bytes, unit)] * len(counts), name="Weights",
                   marker_color=WEIGHTS_GREY)
    figure.add_bar(x=counts, y=[to_unit(chart.kv_bytes, unit)] * len(counts), name="KV cache, all users",
                   marker_color=KV_BLUE)
    figure.add_scatter(x=counts, y=[to_unit(b, unit) for b in chart.total_memory_bytes],
                       name="Total GPU memory", mode="lines", line={"color": TOTAL_RED})
    figure.add_scatter(x=counts, y=[to_unit(b, unit) for b in chart.usable_bytes], name="Usable share",
                       mode="lines", line={"color": TOTAL_RED, "dash": "dash"})
    figure.add_vline(x=chart.gpus_needed, line={"color": "black", "dash": "dot"},
                     annotation_text=f"{chart.gpus_needed} GPUs if pooled")
    figure.update_layout(barmode="stack", xaxis_title="GPUs (count)", yaxis_title=f"memory ({unit})",
                         legend=LEGEND_BELOW, margin=TITLE_MARGIN, height=450, title=title or None)
    return figure


def gpus_curves(series: tuple[CurveSeries, ...], x_title: str, log_x: bool, *, here: float | None = None,
                here_label: str = "", title: str = "") -> go.Figure:
    """GPUs needed (step curve) against context or users, one line per KV precision, with a
    dotted "you are here" line at ``here`` (the context or users asked for).

    The line is a trace in data coordinates, so it stands at the same place on a log axis."""
    figure = go.Figure()
    for curve in series:
        figure.add_scatter(x=list(curve.x), y=list(curve.gpus_needed), name=curve.label,
                           mode="lines+markers", line={"shape": "hv"})
    if here is not None:
        top = max((max(curve.gpus_needed) for curve in series if curve.gpus_needed), default=1)
        figure.add_scatter(x=[here, here], y=[0, top], name=f"you are here: {here_label}", mode="lines",
                           line={"color": HERE_BLACK, "dash": "dot"})
    figure.update_layout(xaxis_title=x_title, yaxis_title="GPUs if pooled (lower bound)", legend=LEGEND_BELOW,
                         margin=TITLE_MARGIN, height=450, title=title or None)
    if log_x:
        figure.update_xaxes(type="log")
    return figure

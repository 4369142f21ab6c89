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


def memory_vs_gpus(chart: MemoryChart, unit: str) -> go.Figure:
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
                         legend=LEGEND_BELOW, margin={"t": 30}, height=450)
    return figure


def gpus_curves(series: tuple[CurveSeries, ...], x_title: str, log_x: bool) -> go.Figure:
    """GPUs needed (step curve) against context or users, one line per KV precision."""
    figure = go.Figure()
    for curve in series:
        figure.add_scatter(x=list(curve.x), y=list(curve.gpus_needed), name=curve.label,
                           mode="lines+markers", line={"shape": "hv"})
    figure.update_layout(xaxis_title=x_title, yaxis_title="GPUs if pooled (lower bound)", legend=LEGEND_BELOW,
                         margin={"t": 30}, height=450)
    if log_x:
        figure.update_xaxes(type="log")
    return figure

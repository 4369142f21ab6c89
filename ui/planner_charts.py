"""Plotly figures and the table of the capacity planner page: throughput and TPOT against batch
(server view), decode step against seconds of history (edge view), the allocators side by side."""

from __future__ import annotations

import math

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from glossary import allocator_label
from planner.capacity import CapacityPlan
from planner.edge import EdgePlan, HistoryPoint

CONTIGUOUS_COLOUR, PAGED_COLOUR = "#f5a623", "#d0021b"
LEGEND_BELOW = dict(orientation="h", yanchor="top", y=-0.3, x=0)  # clear of the x-axis titles
TWO_LINE_TOP_PX = 62  # top margin for two-line subplot titles: 40 px for one line, 22 per more


def fmt_ms(seconds: float | None) -> str:
    """Seconds as milliseconds for a metric, "—" when there is no figure."""
    return "—" if seconds is None else f"{seconds * 1e3:,.1f} ms"


ALLOCATOR_PERCENT = ("KV utilisation",)  # fractions 0–1, shown in percent (ui.tables.readable)
# What the table's user counts mean (the headers' tooltips, by their shown names).
ALLOCATOR_HELP = {
    "Users per GPU (whole)": "Whole users each GPU serves: a replica's operating batch over its TP GPUs, rounded "
                             "down (a fraction of a user cannot be served). The replica serves the whole batch.",
}


def allocator_rows(plan: CapacityPlan) -> list[dict]:
    """One table row per allocator, named as every page names it (:mod:`glossary`), with its
    setting: what fits, the operating batch and what binds it; user counts are whole users (see
    :data:`ALLOCATOR_HELP`)."""
    return [
        {"allocator": allocator_label(a.fit.allocator), "setting": a.fit.label, "sequences that fit": a.memory_batch,
         "KV utilisation": a.fit.utilisation, "operating batch": a.batch,
         "TPOT": fmt_ms(None if a.step is None else a.step.step_s),
         "tokens/s per GPU": round(a.tokens_per_s_per_gpu),
         "users per GPU (whole)": math.floor(a.users_per_gpu), "users per node": round(a.users_per_node),
         "binding limit": a.binding_limit}
        for a in (plan.contiguous, plan.paged)
    ]


def server_figure(plan: CapacityPlan) -> go.Figure:
    """Tokens/s per GPU and TPOT against batch, the allocators' operating points marked."""
    # Two-line subplot titles (the x-axis already says "batch"): in one line each they ran into
    # each other at 800 px, where each subplot is under 200 px wide.
    figure = make_subplots(rows=1, cols=2, subplot_titles=(
        f"Throughput per GPU<br>({plan.timing_model})", f"Time per output token<br>({plan.timing_model})"))
    batches = [p.batch for p in plan.curve]
    figure.add_trace(go.Scatter(x=batches, y=[p.tokens_per_s_per_gpu for p in plan.curve],
                                mode="lines+markers", name="tokens/s per GPU"), row=1, col=1)
    figure.add_trace(go.Scatter(x=batches, y=[p.tpot_s * 1e3 for p in plan.curve],
                                mode="lines+markers", name="TPOT (ms)"), row=1, col=2)
    for allocator, colour in ((plan.contiguous, CONTIGUOUS_COLOUR), (plan.paged, PAGED_COLOUR)):
        if allocator.batch >= 1:
            for col in (1, 2):
                figure.add_vline(x=allocator.batch, line_dash="dot", line_color=colour,
                                 row=1, col=col)
            figure.add_trace(go.Scatter(
                x=[allocator.batch], y=[allocator.tokens_per_s_per_gpu], mode="markers",
                marker=dict(size=12, color=colour), name=allocator_label(allocator.fit.allocator)),
                row=1, col=1)
    if plan.tpot_target_s is not None:
        figure.add_hline(y=plan.tpot_target_s * 1e3, line_dash="dash", line_color="red",
                         row=1, col=2)
    figure.update_xaxes(type="log", title_text="batch (sequences)")
    figure.update_yaxes(title_text="tokens/s per GPU", row=1, col=1)
    figure.update_yaxes(title_text="time per output token (ms)", row=1, col=2)
    figure.update_layout(height=440, legend=LEGEND_BELOW, margin=dict(t=TWO_LINE_TOP_PX))
    return figure


def edge_figure(edge: EdgePlan, curve: tuple[HistoryPoint, ...]) -> go.Figure:
    """Decode step (batch 1) against seconds of camera history, with the two limits."""
    figure = go.Figure()
    figure.add_trace(go.Scatter(x=[p.history_s for p in curve], y=[p.step_s * 1e3 for p in curve],
                                mode="lines", name="decode step (ms)"))
    figure.add_hline(y=edge.workload.control_step_s * 1e3, line_dash="dash",
                     line_color="red", annotation_text="control-step budget")
    figure.add_vline(x=edge.history_s, line_dash="dot", line_color="#4a90e2",
                     annotation_text="memory limit")
    figure.update_layout(height=380, xaxis_title="camera history kept (s)",
                         yaxis_title="decode step (ms)", legend=LEGEND_BELOW, margin=dict(t=40))
    return figure

"""What the sizer page shows for one :class:`~sizing.report.SizingReport`: headline metrics,
the bytes of each layer kind, the worked formula, charts, the comparison without GQA, the
deployment plan, the capacity of the deployed GPUs and the reference table. Drawing only:
every figure comes from the report.
"""

from __future__ import annotations

import streamlit as st
from streamlit.errors import StreamlitAPIException

from inputs.uploads import dumps_strict
from sizing.report import Handoff, SizingReport
from ui.handoff import fragmentation_query, planner_query
from ui import sizer_charts as charts
from ui.layer_kinds_view import render_layer_kinds
from ui.layout import chart, metric_row, page_tabs, tab_field
from ui.url_state import PageState
from ui.tables import percent_text, readable
# Amounts stop at GiB / GB as the reference page writes them (8,000 GiB, not 7.8 TiB).
from units import GIGA_UNIT, UnitSystem
from units import format_up_to_giga as fmt

POOLED_LABEL = "GPUs if pooled (lower bound)"
CHART_TABS = tab_field("chart", "chart_tab", {"memory": "Memory vs GPUs", "context": "GPUs vs context",
                                              "users": "GPUs vs users"})


def render_report(report: SizingReport, system: UnitSystem, state: PageState) -> None:
    """Every section of the results column, in reading order."""
    for warning in report.warnings:
        st.warning(f"**{warning.field}**: {warning.message}", icon=":material/warning:")
    _headline(report, system)
    render_layer_kinds(report, system)
    st.subheader("The formula, with your numbers")
    st.markdown("\n".join(f"1. {step.text}" for step in report.steps))
    _charts(report, GIGA_UNIT[system], state)
    _without_gqa(report, system)
    _plan(report, system)
    _capacity(report, system)
    st.subheader("KV precision × GPU")
    st.caption("GPU counts here pool memory, as the reference page does: lower bounds, not deployments.")
    st.dataframe(readable(report.table_records(), rename={"gpus_ratio": "GPUs (before rounding up)"}).shown,
                 hide_index=True, key="reference_table")
    st.download_button("Download CSV", report.table_csv(), file_name="kv_sizing.csv", mime="text/csv",
                       icon=":material/download:", key="download_table")
    st.download_button("Sizing as JSON (as `python -m sizing --json`)", dumps_strict(report.to_dict(), indent=2),
                       file_name="kv_sizing.json", mime="application/json", icon=":material/download:",
                       key="download_json")


def render_links(handoff: Handoff) -> None:
    """Links to the fragmentation explorer and the planner, carrying the hand-off in their URL."""
    try:
        st.page_link("pages/2_fragmentation.py", label="How much of this budget is really used? "
                     "Open the fragmentation explorer", icon=":material/view_module:",
                     query_params=fragmentation_query(handoff))
        st.page_link("pages/4_planner.py", label="Time per output token for this answer: open the planner",
                     icon=":material/speed:", query_params=planner_query(handoff))
    except StreamlitAPIException:
        pass  # the page runs on its own (outside app.py's navigation): nothing to link to


def _headline(report: SizingReport, system: UnitSystem) -> None:
    m = report.model
    st.markdown(f"**{m.name}** · {m.attention} · {m.layers} layers, {m.q_heads} query / {m.kv_heads} KV heads, "
                f"head dim {m.head_dim} · {report.kv_precision.label} KV · {report.gpu.name}")
    if not m.n_kv_layers:
        st.info("No layer of this model caches per-token KV: each sequence keeps a recurrent state of "
                f"{fmt(report.state_bytes_per_sequence, system)}, whatever its length.", icon=":material/info:")
    m1 = m2 = m3 = metric_row()
    m1.metric("KV per token", fmt(report.per_token_bytes, system))
    m2.metric(f"Per user at {report.context:,}", fmt(report.per_user_bytes, system))
    m3.metric(f"KV, {report.users:,} users", fmt(report.kv_bytes_total, system))
    m4 = m5 = m6 = metric_row()
    m4.metric("Weights", fmt(report.weights_bytes, system))
    m5.metric("Weights + KV", fmt(report.total_bytes, system))
    m6.metric(POOLED_LABEL, f"{report.gpus.count:,}",
              help=f"total ÷ usable per GPU = {report.gpus.label}: all memory counted as one pool, so no "
                   f"deployment needs fewer; the answer above places whole replicas")


def _charts(report: SizingReport, big_unit: str, state: PageState) -> None:
    tab_memory, tab_context, tab_users = page_tabs(state, CHART_TABS)
    where = f"{report.model.name} on {report.gpu.name}"
    if tab_memory.open:
        with tab_memory:
            chart(charts.memory_vs_gpus(report.charts.memory_vs_gpus, big_unit,
                                        title=f"Memory vs GPUs: {where}, {report.users:,} users × {report.context:,}"),
                  key="chart_memory", file_name="memory_vs_gpus")
    curves = ((tab_context, report.charts.gpus_vs_context, "Context (tokens)", report.context,
               f"{report.context:,} tokens", f"GPUs vs context: {where}, {report.users:,} users", "context"),
              (tab_users, report.charts.gpus_vs_users, "Users (concurrent)", report.users,
               f"{report.users:,} users", f"GPUs vs users: {where}, {report.context:,} tokens each", "users"))
    for tab, series, axis, here, here_label, title, name in curves:
        if tab.open:
            with tab:
                chart(charts.gpus_curves(series, axis, True, here=here, here_label=here_label, title=title),
                      key=f"chart_{name}", file_name=f"gpus_vs_{name}")


def _without_gqa(report: SizingReport, system: UnitSystem) -> None:
    gqa = report.without_gqa
    st.subheader("Without grouped-query attention")
    g1 = g2 = g3 = metric_row()
    g1.metric("KV per token without GQA", fmt(gqa.per_token_bytes, system), help="One KV head per query head.")
    g2.metric(f"KV, {report.users:,} users", fmt(gqa.kv_bytes_total, system))
    g3.metric(f"{POOLED_LABEL}, without GQA", f"{gqa.gpus.count:,}", delta=f"{gqa.factor:,.1f}× the KV bytes", delta_color="off")


def _plan(report: SizingReport, system: UnitSystem) -> None:
    st.subheader("The reference formula's TP plan")
    st.markdown(report.plan.summary)
    st.caption(f"Whole TP replicas by the reference formula: {percent_text(report.usable_fraction, 0)} of the vendor's GB per GPU "
               f"less each replica's weights. The answer above uses the engine's own per-GPU budget instead "
               f"(the driver-reported total, the weights, the activation peak and CUDA graphs come out of it), "
               f"so the two can differ; the pooled lower bound ({report.gpus.label}) counts memory as one pool.")
    st.markdown(
        f"At TP {report.tp}: {report.kv_heads_per_gpu} KV head(s) per GPU"
        + (f", each head replicated {report.kv_replication}×" if report.kv_replication > 1 else "")
        + f"; KV per token per GPU **{fmt(report.per_gpu_kv_bytes_per_token, system)}**; "
        f"KV for all users over the group's ranks **{fmt(report.kv_bytes_total_all_gpus, system)}**."
    )
    st.dataframe(readable(report.plan_records(GIGA_UNIT[system])).shown, hide_index=True, key="plan_table")


def _capacity(report: SizingReport, system: UnitSystem) -> None:
    st.subheader(f"On the {report.n_gpus:,} × {report.gpu.name} deployed")
    cap = report.capacity
    if report.max_users < report.users:
        st.warning(f"{report.users:,} users do not fit on {report.n_gpus:,} × {report.gpu.name} at "
                   f"{report.context:,} tokens: at most {report.max_users:,} by the reference formula. "
                   f"The answer above says how many GPUs serve them.", icon=":material/warning:")
    r1 = r2 = r3 = r4 = metric_row()
    r1.metric("KV budget", fmt(report.kv_budget_bytes, system))
    r2.metric(f"Most users at {report.context:,} tokens", f"{report.max_users:,}")
    r3.metric(f"Longest context for {report.users:,} users",
              "unbounded" if report.max_context is None else f"{report.max_context:,}")
    if not report.model.n_kv_layers:
        r4.metric("Sequence states held", f"{cap.max_concurrency:,.0f}",
                  help="No layer caches per-token KV: the budget holds whole recurrent states, at any context.")
        return
    r4.metric("KV capacity (whole blocks)", f"{cap.tokens:,} tokens",
              help=f"{cap.blocks:,} blocks of {cap.block_size} tokens; maximum concurrency at "
                   f"{cap.context:,} tokens: {cap.max_concurrency:,.2f}×")

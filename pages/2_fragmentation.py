"""Fragmentation explorer: contiguous reservation against paged KV blocks, as a snapshot and over time.

Thin page: widgets (``ui.fragmentation_controls``) → typed settings → one ``simulation.explorer``
call per tab (through ``@st.cache_data`` wrappers, or ``ui.run_feedback`` for the runs that take
seconds: ``ui.fragmentation_views``) → figures (``ui.fragmentation_charts``).
State lives in the URL so a link reopens the same view; the sizer's latest result
(``ui.handoff.latest``) is offered as the budget unless the URL names one.
"""

from __future__ import annotations

import streamlit as st

from glossary import allocator_label
from simulation.explorer import WorkloadSettings, build_workload, snapshot_view
from simulation.policies import ReservationPolicy
from simulation.snapshot import PICTURE_REQUESTS, SnapshotConfig
from simulation.timeline import TimelineConfig
from simulation.traces import TraceError
from simulation.workloads import Workload
from ui import fragmentation_charts as charts
from ui.fragmentation_controls import TABS, Sidebar, page_state, sidebar
from ui.fragmentation_views import (block_table_section, figure2_section, prefix_section, sharing_section,
                                    timeline_section)
from ui.layout import chart, metric_row, page_tabs
from ui.router import run_through_router
from ui.tables import counted, percent_text, readable, show
from ui.url_state import PageState, copy_link

DEFAULT_WORKLOAD = WorkloadSettings(kind="lognormal")
MAX, POW2, ORACLE = (allocator_label(p, short=True) for p in ("max", "pow2", "oracle"))
CATEGORY_WORDS = (
    "**Token states**: slots holding a token's keys and values now. "
    "**Reservation**: slots set aside for tokens the request will still produce. "
    f"**Internal fragmentation**: slots reserved beyond the request's final length ({MAX} reserves the whole "
    f"context, {POW2} up to twice the output, {ORACLE} nothing, paging at most the end of the last block). "
    "**External fragmentation & others**: what the allocator takes beyond the request (a buddy allocator's "
    "power-of-two rounding), free holes too small for the next request, and a budget remainder smaller than "
    "a block. **Free**: the rest (the paper's bars count it under 'others').")


# ---- cached library calls ------------------------------------------------------------------------
@st.cache_data(show_spinner=False, max_entries=16)
def cached_workload(settings: WorkloadSettings, upload: bytes | None) -> Workload:
    return build_workload(settings, upload)


@st.cache_data(show_spinner=False, max_entries=64)
def cached_snapshot(_workload: Workload, workload_key: tuple, config: SnapshotConfig, seed: int):
    return snapshot_view(_workload, config, seed)


# ---- workload ------------------------------------------------------------------------------------
def load_workload(chosen: Sidebar) -> tuple[Workload, tuple]:
    """The workload, or the last good one when an upload is refused (its error is shown)."""
    key = (chosen.workload, chosen.upload)
    if chosen.upload_error is not None:
        st.error(f":material/error: The trace was not used: {chosen.upload_error}")
        return _previous_workload()
    if chosen.workload.kind == "upload" and chosen.upload is None:
        st.info(":material/upload_file: Upload a trace CSV; showing the previous workload meanwhile.")
        return _previous_workload()
    try:
        workload = cached_workload(*key)
    except TraceError as err:
        st.error(f":material/error: The trace was not used: {err.message}")
        return _previous_workload()
    st.session_state["frag.last_good"] = (workload, key)
    return workload, key


def _previous_workload() -> tuple[Workload, tuple]:
    if "frag.last_good" in st.session_state:
        return st.session_state["frag.last_good"]
    key = (DEFAULT_WORKLOAD, None)
    return cached_workload(*key), key


# ---- tabs ----------------------------------------------------------------------------------------
@st.fragment
def snapshot_section(state: PageState, chosen: Sidebar, workload: Workload, key: tuple) -> None:
    left, right, third = st.columns(3)
    policy = left.radio("Contiguous reservation (Orca baselines)", tuple(p.value for p in ReservationPolicy),
                        key=state.key("policy"), format_func=allocator_label)
    random_moment = third.toggle("Random moment per request", key=state.key("random"))
    progress = right.slider("Output generated at the snapshot (%)", 0, 100, step=5, key=state.key("progress"),
                            disabled=random_moment)
    config = SnapshotConfig(budget=chosen.budget, max_context=chosen.max_context, block_size=chosen.block_size,
                            policy=policy, address_space=chosen.address_space,
                            progress=None if random_moment else progress / 100)
    view = cached_snapshot(workload, key, config, chosen.workload.seed)
    result = view.result
    row = metric_row()
    row.metric("Requests that fit: contiguous", f"{result.contiguous.fit:,}")
    row.metric("Requests that fit: paged", f"{result.paged.fit:,}", f"{result.paged_gain:,.1f}× more")
    row.metric("Utilisation: contiguous", percent_text(result.contiguous.utilisation),
               help="Slots holding a token over the slots reserved for the requests that fit.")
    row.metric("Utilisation: paged", percent_text(result.paged.utilisation))
    row = metric_row()
    row.metric("Empty slots per request: contiguous", f"{result.contiguous.waste_tokens_mean:,.1f}",
               help="Token slots reserved but holding no token, mean over the requests that fit.")
    row.metric("Empty slots per request: paged", f"{result.paged.waste_tokens_mean:,.1f}",
               help=f"At most B − 1 = {chosen.block_size - 1}; about B/2 on average.")
    if result.paged_waste_bytes_mean is not None:
        row.metric("Wasted per request: contiguous", charts.format_bytes(result.contiguous_waste_bytes_mean))
        row.metric("Wasted per request: paged", charts.format_bytes(result.paged_waste_bytes_mean))
    st.markdown(charts.why_paging_wins(result))
    notes = [f"{counted(result.requests, 'request')} from {workload.source}"]
    if result.clipped:
        notes.append(f"{result.clipped:,} cut to the {chosen.max_context:,}-token context")
    if result.sample_reused:
        notes.append("more requests fit than were drawn: the sample is reused in order")
    st.caption("; ".join(notes) + ". Budget: " + charts.budget_caption(chosen.budget) + ".")
    chart(charts.picture_figure(result), key="frag.chart.picture", file_name="requests_stored_both_ways")
    st.caption(f"The first {PICTURE_REQUESTS} requests on the same scale. Amber: reserved but empty; "
               "red: the partly empty last block.")
    left, right = st.columns(2)
    chart(charts.sweep_figure(view.sweep), key="frag.chart.sweep", file_name="paged_waste_by_block_size", parent=left)
    chart(charts.breakdown_figure([charts.scheme_label(r.name, short=True) for r in view.rows],
                                  [r.summary.breakdown for r in view.rows],
                                  "Where the memory goes (paper's fig. 2)"),
          key="frag.chart.breakdown", file_name="memory_breakdown", parent=right)
    table = charts.policy_table(view.rows)
    show(readable(table, percent=[c for c in table.columns
                                  if c not in ("scheme", "requests that fit", "empty slots per request")]),
         key="frag.table", file_name="fragmentation_summary.csv", label="Summary as CSV")
    st.caption(CATEGORY_WORDS + f" {POW2} and {ORACLE} differ only where the buddy allocator rounds their "
               f"reservations to different powers of two: here {percent_text(view.pow2_oracle_same_chunk, 0)} of "
               f"the requests get the same chunk under both, so they fit alike and only the split between internal "
               f"({POW2}'s reserve beyond the output) and external (rounding) changes.")
    st.download_button("Snapshot as JSON", charts.snapshot_json(result, workload.source), key="frag.download_json",
                       file_name="fragmentation_snapshot.json", mime="application/json", icon=":material/download:")
    state.sync()


def default_engine(chosen: Sidebar) -> TimelineConfig:
    """The prefix tab's engine: vLLM's defaults on the sidebar's budget and blocks."""
    return TimelineConfig(budget=chosen.budget, max_context=chosen.max_context, block_size=chosen.block_size)


def main() -> None:
    run_through_router()  # a deep link to /fragmentation as the first request still gets app.py's router
    st.title(":material/view_module: Fragmentation explorer")
    st.caption("How much KV memory holds tokens under contiguous reservation and under PagedAttention's "
               "blocks, on synthetic lengths and real traces.")
    state = page_state()
    state.seed()
    for notice in state.notices:
        st.caption(f":material/link_off: {notice}")
    chosen = sidebar(state)
    workload, key = load_workload(chosen)
    # Only the open tab runs (the others' simulations wait until they are opened).
    snapshot_tab, timeline_tab, prefix_tab, paper_tab, sharing_tab, table_tab = page_tabs(state, TABS)
    if snapshot_tab.open:
        with snapshot_tab:
            snapshot_section(state, chosen, workload, key)
    if timeline_tab.open:
        with timeline_tab:
            timeline_section(state, chosen, workload, key)
    if prefix_tab.open:
        with prefix_tab:
            prefix_section(state, chosen, default_engine(chosen), chosen.workload.seed)
    if paper_tab.open:
        with paper_tab:
            figure2_section()
    if sharing_tab.open:
        with sharing_tab:
            sharing_section(state, chosen)
    if table_tab.open:
        with table_tab:
            block_table_section(state, chosen)
    state.sync()
    copy_link()


main()

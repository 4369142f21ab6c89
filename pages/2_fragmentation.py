"""Fragmentation explorer: contiguous reservation against paged KV blocks, as a snapshot and over time.

Thin page: widgets (``ui.fragmentation_controls``) → typed settings → one ``simulation.explorer``
call per tab (through ``@st.cache_data`` wrappers) → figures (``ui.fragmentation_charts``).
State lives in the URL so a link reopens the same view; the sizer's latest result
(``ui.handoff.latest``) is offered as the budget unless the URL names one.
"""

from __future__ import annotations

import streamlit as st

from simulation.explorer import (SharingSettings, WorkloadSettings, allocator_configs, block_table_view,
                                 build_workload, sharing_view, snapshot_view, timeline_view, token_address)
from simulation.snapshot import PICTURE_REQUESTS, SnapshotConfig
from simulation.timeline import TimelineConfig
from simulation.traces import TraceError
from simulation.workloads import Workload
from ui import fragmentation_charts as charts
from ui.fragmentation_controls import (BATCH, Sidebar, block_table_settings, clamp_to, page_state, sharing_settings,
                                       sidebar)
from ui.router import run_through_router
from ui.url_state import PageState

DEFAULT_WORKLOAD = WorkloadSettings(kind="lognormal")
PERCENT = st.column_config.NumberColumn(format="percent")


# ---- cached library calls ------------------------------------------------------------------------
@st.cache_data(show_spinner=False, max_entries=16)
def cached_workload(settings: WorkloadSettings, upload: bytes | None) -> Workload:
    return build_workload(settings, upload)


@st.cache_data(show_spinner=False, max_entries=64)
def cached_snapshot(_workload: Workload, workload_key: tuple, config: SnapshotConfig, seed: int):
    return snapshot_view(_workload, config, seed)


@st.cache_data(show_spinner=False, max_entries=16)
def cached_timeline(_workload: Workload, workload_key: tuple, rate: float | None, seed: int,
                    config: TimelineConfig):
    # The bar is created here, not outside: cached functions may only update their own elements.
    bar = st.progress(0.0, text="Simulating over time")
    result = timeline_view(_workload, config, rate=rate, seed=seed,
                           progress=lambda share: bar.progress(share, text="Simulating over time"))
    bar.empty()
    return result


@st.cache_data(show_spinner=False, max_entries=32)
def cached_sharing(settings: SharingSettings, block_size: int, seed: int):
    return sharing_view(settings, block_size=block_size, seed=seed)


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
def snapshot_section(state: PageState, chosen: Sidebar, workload: Workload, key: tuple) -> None:
    left, right, third = st.columns(3)
    policy = left.radio("Contiguous reservation (Orca baselines)", ("max", "pow2", "oracle"),
                        key=state.key("policy"), horizontal=True,
                        format_func={"max": "Max", "pow2": "Pow2", "oracle": "Oracle"}.get)
    random_moment = third.toggle("Random moment per request", key=state.key("random"))
    progress = right.slider("Output generated at the snapshot (%)", 0, 100, step=5, key=state.key("progress"),
                            disabled=random_moment)
    config = SnapshotConfig(budget=chosen.budget, max_context=chosen.max_context, block_size=chosen.block_size,
                            policy=policy, address_space=chosen.address_space,
                            progress=None if random_moment else progress / 100)
    view = cached_snapshot(workload, key, config, chosen.workload.seed)
    result = view.result
    cols = st.columns(4)
    cols[0].metric("Requests that fit: contiguous", f"{result.contiguous.fit:,}")
    cols[1].metric("Requests that fit: paged", f"{result.paged.fit:,}", f"{result.paged_gain:,.1f}× more")
    cols[2].metric("Utilisation: contiguous", f"{result.contiguous.utilisation:.1%}")
    cols[3].metric("Utilisation: paged", f"{result.paged.utilisation:.1%}")
    cols = st.columns(4)
    cols[0].metric("Empty slots per request: contiguous", f"{result.contiguous.waste_tokens_mean:,.1f}")
    cols[1].metric("Empty slots per request: paged", f"{result.paged.waste_tokens_mean:,.1f}",
                   help=f"At most B − 1 = {chosen.block_size - 1}; about B/2 on average.")
    if result.paged_waste_bytes_mean is not None:
        cols[2].metric("Wasted per request: contiguous", charts.format_bytes(result.contiguous_waste_bytes_mean))
        cols[3].metric("Wasted per request: paged", charts.format_bytes(result.paged_waste_bytes_mean))
    notes = [f"{result.requests:,} requests from {workload.source}"]
    if result.clipped:
        notes.append(f"{result.clipped:,} cut to the {chosen.max_context:,}-token context")
    if result.sample_reused:
        notes.append("more requests fit than were drawn: the sample is reused in order")
    st.caption("; ".join(notes) + ". Budget: " + charts.budget_caption(chosen.budget) + ".")
    st.plotly_chart(charts.picture_figure(result), key="frag.chart.picture")
    st.caption(f"The first {PICTURE_REQUESTS} requests on the same scale. Amber: reserved but empty; "
               "red: the partly empty last block.")
    left, right = st.columns(2)
    with left:
        st.plotly_chart(charts.sweep_figure(view.sweep), key="frag.chart.sweep")
    with right:
        st.plotly_chart(charts.breakdown_figure([r.name for r in view.rows], [r.summary.breakdown for r in view.rows],
                                                "Where the memory goes (paper's fig. 2)"),
                        key="frag.chart.breakdown")
    table = charts.policy_table(view.rows)
    st.dataframe(table, hide_index=True, key="frag.table", column_config={
        "empty slots per request": st.column_config.NumberColumn(format="%.1f"),
        **{c: PERCENT for c in table.columns if c not in ("scheme", "requests that fit", "empty slots per request")}})
    st.download_button(":material/download: Summary as CSV", table.to_csv(index=False).encode(),
                       file_name="fragmentation_summary.csv", mime="text/csv", key="frag.download")


def timeline_section(state: PageState, chosen: Sidebar, workload: Workload, key: tuple) -> None:
    cols = st.columns(4)
    allocation = cols[0].selectbox("Allocator", ("contiguous-max", "contiguous-pow2", "contiguous-oracle", "paged"),
                                   key=state.key("allocator"))
    preemption = cols[1].radio("Preemption", ("recompute", "swap"), key=state.key("preempt"), horizontal=True)
    use_trace_arrivals = workload.arrival_s is not None and cols[2].toggle(
        "Trace's own arrivals", key=state.key("trace_arrivals"))
    rate = cols[3].number_input("Arrival rate (requests/s, Poisson)", 0.01, 10_000.0, key=state.key("rate"),
                                disabled=use_trace_arrivals)
    cols = st.columns(3)
    step_ms = cols[0].number_input("Decode step (ms)", 1.0, 1000.0, key=state.key("step_ms"))
    prefill = cols[1].number_input("Prefill (tokens/s)", 100.0, 10**7 * 1.0, key=state.key("prefill"))
    max_batch = int(cols[2].number_input("Largest batch", 1, BATCH.high, key=state.key("max_batch")))
    config = TimelineConfig(budget=chosen.budget, max_context=chosen.max_context, allocation=allocation,
                            block_size=chosen.block_size, preemption=preemption, address_space=chosen.address_space,
                            decode_step_s=step_ms / 1000, prefill_tokens_per_s=prefill, max_batch=max_batch)
    poisson_rate = None if use_trace_arrivals else rate  # None: the trace's own arrival times
    seed = chosen.workload.seed
    result = cached_timeline(workload, key, poisson_rate, seed, config)
    cols = st.columns(5)
    cols[0].metric("Completed", f"{result.completed:,}", help=f"{result.rejected:,} never fit the budget")
    cols[1].metric("Mean batch size", f"{result.mean_batch_size:,.1f}")
    cols[2].metric("Budget holding tokens (time average)", f"{result.token_state_fraction:.1%}")
    cols[3].metric("Preemptions", f"{result.preemptions:,}",
                   help=f"recomputed {result.recomputed_tokens:,} tokens, swapped {result.swapped_tokens:,}; "
                        f"stalls {result.preemption_stall_s:,.1f} s")
    cols[4].metric("Mean wait", f"{result.mean_wait_s:,.2f} s")
    memory, load, wait = charts.timeline_figures(result, chosen.budget.tokens)
    st.caption("Lower the KV budget in the sidebar to watch the pool fill: contiguous reservations "
               "queue new requests, paging preempts running ones.")
    st.plotly_chart(memory, key="frag.chart.memory")
    left, right = st.columns(2)
    with left:
        st.plotly_chart(load, key="frag.chart.load")
    with right:
        st.plotly_chart(wait, key="frag.chart.wait")
    if st.toggle("Compare all allocators on this workload (four runs)", key=state.key("compare")):
        runs = [(each.allocation.value, cached_timeline(workload, key, poisson_rate, seed, each))
                for each in allocator_configs(config)]
        st.plotly_chart(charts.breakdown_figure([name for name, _ in runs], [r.breakdown for _, r in runs],
                                                "Time-averaged memory per allocator (paper's fig. 2, over time)"),
                        key="frag.chart.compare")
        st.dataframe(charts.allocator_table(runs), hide_index=True, key="frag.compare_table",
                     column_config={"token share of used memory": PERCENT})


def sharing_section(state: PageState, chosen: Sidebar) -> None:
    results = cached_sharing(sharing_settings(state), chosen.block_size, chosen.workload.seed)
    table = charts.sharing_table(results)
    st.plotly_chart(charts.sharing_figure(table, chosen.block_size), key="frag.chart.sharing")
    st.dataframe(table, hide_index=True, key="frag.sharing_table", column_config={"saved": PERCENT})
    st.caption("Forked samples and beams share blocks (reference counts) and copy a shared block "
               "before writing into it; a cached prefix shares only its full blocks.")


def block_table_section(state: PageState, chosen: Sidebar) -> None:
    settings = block_table_settings(state)
    per_token = chosen.budget.per_token_bytes
    demo, pool_blocks = block_table_view(settings, token_bytes=per_token, seed=chosen.workload.seed,
                                         row_blocks=charts.POOL_COLUMNS)
    st.plotly_chart(charts.pool_figure(demo, pool_blocks), key="frag.chart.pool")
    st.caption("The physical pool (a shuffled free list, as in a pool that has been in use): grey "
               "blocks are free, coloured ones belong to one sequence, dark grey ones are shared; "
               "L is the logical block, ref the reference count.")
    cols = st.columns(2)
    clamp_to(state, "bt_seq", settings.sequences - 1)
    sequence = cols[0].selectbox("Sequence", range(settings.sequences), key=state.key("bt_seq"))
    length = demo.lengths[sequence]
    clamp_to(state, "bt_pos", length - 1)
    position = int(cols[1].number_input("Token position p", 0, length - 1, key=state.key("bt_pos")))
    address = token_address(demo, sequence, position)
    line = (f"p = {position}: logical block p // B = {address.logical_block}, offset p % B = {address.offset}, "
            f"physical block {address.physical_block} (ref count {address.ref_count})")
    if address.byte_address is not None:
        line += (f"; byte address = {address.physical_block} × {demo.manager.block_bytes:,} + {address.offset} × "
                 f"{per_token:,} = {address.byte_address:,}")
    st.markdown(line)
    st.dataframe(charts.block_tables(demo), hide_index=True, key="frag.bt_tables")
    st.caption(f"Copy-on-write copies so far: {demo.copies}. Last events:")
    st.dataframe(charts.event_log(demo), hide_index=True, key="frag.bt_log")


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
    snapshot_tab, timeline_tab, sharing_tab, table_tab = st.tabs(
        [":material/photo_camera: Snapshot", ":material/timeline: Over time", ":material/share: Sharing",
         ":material/table_chart: Block table"])
    with snapshot_tab:
        snapshot_section(state, chosen, workload, key)
    with timeline_tab:
        timeline_section(state, chosen, workload, key)
    with sharing_tab:
        sharing_section(state, chosen)
    with table_tab:
        block_table_section(state, chosen)
    state.sync()


main()

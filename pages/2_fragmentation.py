"""Fragmentation explorer: contiguous reservation against paged KV blocks, as a snapshot and over time.

Thin page: widgets (``ui.fragmentation_controls``) → typed settings → one ``simulation.explorer``
call per tab (through ``@st.cache_data`` wrappers) → figures (``ui.fragmentation_charts``).
State lives in the URL so a link reopens the same view; the sizer's latest result
(``ui.handoff.latest``) is offered as the budget unless the URL names one.
"""

from __future__ import annotations

from dataclasses import replace

import streamlit as st

from planner.step_time import shape_step_cost
from simulation.explorer import WorkloadSettings, allocator_configs, build_workload, snapshot_view, timeline_view
from simulation.snapshot import PICTURE_REQUESTS, SnapshotConfig
from simulation.step_cost import StepCost
from simulation.timeline import TimelineConfig
from simulation.traces import TraceError
from simulation.workloads import Workload
from sizing.presets import get_preset
from hardware.gpus import get_gpu
from ui import fragmentation_charts as charts
from ui.fragmentation_controls import (BATCH, BATCHED_TOKENS, STEP_SOURCES, TABS, Sidebar,
                                       page_state, sidebar, step_gpus, step_models)
from ui.fragmentation_views import block_table_section, figure2_section, prefix_section, sharing_section
from ui.layout import chart, metric_row, page_tabs
from ui.router import run_through_router
from ui.tables import counted, percent_text, readable, show
from ui.url_state import PageState, copy_link

DEFAULT_WORKLOAD = WorkloadSettings(kind="lognormal")
CATEGORY_WORDS = (
    "**Token states**: slots holding a token's keys and values now. "
    "**Reservation**: slots set aside for tokens the request will still produce. "
    "**Internal fragmentation**: slots reserved beyond the request's final length (Max reserves the whole "
    "context, Pow2 up to twice the output, Oracle nothing, paging at most the end of the last block). "
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
def cached_step_cost(model_id: str, gpu_id: str) -> StepCost:
    return shape_step_cost(get_preset(model_id).shape, gpu_id=gpu_id)


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
    chart(charts.breakdown_figure([r.name for r in view.rows], [r.summary.breakdown for r in view.rows],
                                  "Where the memory goes (paper's fig. 2)"),
          key="frag.chart.breakdown", file_name="memory_breakdown", parent=right)
    table = charts.policy_table(view.rows)
    show(readable(table, percent=[c for c in table.columns
                                  if c not in ("scheme", "requests that fit", "empty slots per request")]),
         key="frag.table", file_name="fragmentation_summary.csv", label="Summary as CSV")
    st.caption(CATEGORY_WORDS + f" Pow2 and Oracle differ only where the buddy allocator rounds their "
               f"reservations to different powers of two: here {percent_text(view.pow2_oracle_same_chunk, 0)} of the requests get "
               "the same chunk under both, so they fit alike and only the split between internal (Pow2's "
               "reserve beyond the output) and external (rounding) changes.")
    st.download_button("Snapshot as JSON", charts.snapshot_json(result, workload.source), key="frag.download_json",
                       file_name="fragmentation_snapshot.json", mime="application/json", icon=":material/download:")
    state.sync()


def engine_config(state: PageState, chosen: Sidebar) -> TimelineConfig:
    """The scheduler and step-time settings shared by the over-time and prefix-caching tabs."""
    cols = st.columns(4)
    source = cols[0].radio("Step time", tuple(STEP_SOURCES), format_func=STEP_SOURCES.get, key=state.key("step_source"))
    if source == "model":
        model = cols[1].selectbox("Model", step_models(), key=state.key("step_model"),
                                  format_func=lambda i: get_preset(i).name)
        gpu = cols[2].selectbox("GPU", step_gpus(), key=state.key("step_gpu"),
                                format_func=lambda i: get_gpu(i).label)
        cost = cached_step_cost(model, gpu)
        cols[3].caption(f"Roofline, BF16, datasheet rates: a step reads the weights ({cost.fixed_s * 1e3:.1f} ms) "
                        "and the batch's KV, or computes its tokens, whichever takes longer.")
    else:
        step_ms = cols[1].number_input("Decode step (ms)", 1.0, 1000.0, key=state.key("step_ms"))
        prefill = cols[2].number_input("Prefill (tokens/s)", 100.0, 10**7 * 1.0, key=state.key("prefill"))
        cost = StepCost.constant(decode_step_s=step_ms / 1000, prefill_tokens_per_s=prefill)
    cols = st.columns(3)
    max_seqs = int(cols[0].number_input("max_num_seqs", 1, BATCH.high, key=state.key("max_batch")))
    batched = int(cols[1].number_input("max_num_batched_tokens", max_seqs, BATCHED_TOKENS.high,
                                       key=state.key("max_batched_tokens")))
    chunked = cols[2].toggle("Chunked prefill", key=state.key("chunked"))
    if not chunked and batched < chosen.max_context:
        chunked = True
        cols[2].caption(f"Without chunking a step must hold a whole {chosen.max_context:,}-token prompt: kept on.")
    return TimelineConfig(budget=chosen.budget, max_context=chosen.max_context, block_size=chosen.block_size,
                          address_space=chosen.address_space, step_cost=cost, max_num_seqs=max_seqs,
                          max_num_batched_tokens=max(batched, max_seqs), chunked_prefill=chunked)


@st.fragment
def timeline_section(state: PageState, chosen: Sidebar, workload: Workload, key: tuple) -> None:
    cols = st.columns(4)
    allocation = cols[0].selectbox("Allocator", ("contiguous-max", "contiguous-pow2", "contiguous-oracle", "paged"),
                                   key=state.key("allocator"))
    preemption = cols[1].radio("Preemption", ("recompute", "swap"), key=state.key("preempt"), horizontal=True)
    use_trace_arrivals = workload.arrival_s is not None and cols[2].toggle(
        "Trace's own arrivals", key=state.key("trace_arrivals"))
    rate = cols[3].number_input("Arrival rate (requests/s, Poisson)", 0.01, 10_000.0, key=state.key("rate"),
                                disabled=use_trace_arrivals)
    base = engine_config(state, chosen)
    caching = allocation == "paged" and st.toggle("Prefix caching (each request's own blocks, after a preemption)",
                                                  key=state.key("prefix_caching"))
    config = replace(base, allocation=allocation, preemption=preemption, prefix_caching=caching)
    poisson_rate = None if use_trace_arrivals else rate  # None: the trace's own arrival times
    seed = chosen.workload.seed
    result = cached_timeline(workload, key, poisson_rate, seed, config)
    row = metric_row()
    row.metric("Completed", f"{result.completed:,}", help=f"{counted(result.rejected, 'request')} never fit the budget")
    row.metric("Mean batch size", f"{result.mean_batch_size:,.1f}")
    row.metric("Budget holding tokens", percent_text(result.token_state_fraction),
               help="Share of the KV budget holding a token's keys and values, averaged over time.")
    row.metric("Preemptions", f"{result.preemptions:,}",
               help=f"recomputed {result.recomputed_tokens:,} tokens, swapped {result.swapped_tokens:,}; "
                    f"swap stalls {result.preemption_stall_s:,.1f} s")
    row.metric("Mean wait", f"{result.mean_wait_s:,.2f} s")
    row.metric("Mean TTFT", f"{result.mean_ttft_s:,.2f} s")
    row.metric("Mean TPOT", f"{result.mean_tpot_s * 1e3:,.1f} ms", help=f"mean step {result.mean_step_s * 1e3:.1f} ms")
    memory, load, wait = charts.timeline_figures(result, chosen.budget.tokens)
    st.caption("Lower the KV budget in the sidebar to watch the pool fill: contiguous reservations "
               "queue new requests, paging preempts running ones.")
    chart(memory, key="frag.chart.memory", file_name="kv_memory_over_time")
    left, right = st.columns(2)
    chart(load, key="frag.chart.load", file_name="batch_and_queue", parent=left)
    chart(wait, key="frag.chart.wait", file_name="request_waits", parent=right)
    if st.toggle("Compare all allocators on this workload (four runs)", key=state.key("compare")):
        runs = [(each.allocation.value, cached_timeline(workload, key, poisson_rate, seed, each))
                for each in allocator_configs(config)]
        chart(charts.breakdown_figure([name for name, _ in runs], [r.breakdown for _, r in runs],
                                      "Time-averaged memory per allocator (paper's fig. 2, over time)"),
              key="frag.chart.compare", file_name="allocators_over_time")
        show(readable(charts.allocator_table(runs), percent=("token share of used memory",)),
             key="frag.compare_table", file_name="allocators_over_time.csv")
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

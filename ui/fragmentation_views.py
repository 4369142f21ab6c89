"""The fragmentation explorer's tabs beyond the snapshot and the over-time run: prefix caching,
the paper's figure 2, sharing and the block table. Each tab is a Streamlit fragment, so a widget
inside it reruns that tab only; each calls one cached library function."""

from __future__ import annotations

from dataclasses import replace

import streamlit as st

from planner.step_time import paper_step_cost
from simulation.explorer import (BlockTableSettings, SharingSettings, block_table_view, check_prefix_view, cpu_tier,
                                 prefix_view, sharing_view, token_address)
from simulation.paper_figure2 import NOTE_THRESHOLD_PP, Figure2Reproduction, reproduce_figure2
from simulation.prefix_workloads import PrefixScenario
from simulation.timeline import TimelineConfig
from ui import fragmentation_charts as charts
from ui.fragmentation_controls import Sidebar, block_table_settings, clamp_to, prefix_controls, sharing_settings
from ui.layout import chart, metric_row
from ui.tables import percent_text, readable, show
from ui.url_state import PageState


@st.cache_data(show_spinner=False, max_entries=4)
def cached_figure2() -> Figure2Reproduction:
    return reproduce_figure2(step_cost=paper_step_cost())


@st.cache_data(show_spinner=False, max_entries=16)
def cached_prefix(scenario: PrefixScenario, config: TimelineConfig, seed: int):
    return prefix_view(scenario, config, seed, deadline_field="Requests")


@st.cache_data(show_spinner=False, max_entries=32)
def cached_sharing(settings: SharingSettings, block_size: int, seed: int):
    return sharing_view(settings, block_size=block_size, seed=seed)


@st.fragment
def figure2_section() -> None:
    reproduction = cached_figure2()
    st.caption("The setting of the paper's §6.2: OPT-13B on one A100-40GB, 12 GiB of KV "
               f"({reproduction.budget.tokens:,} token slots), maximum length 2,048, ShareGPT-like lengths "
               f"(means 161 in, 338 out), {reproduction.requests:,} requests arriving faster than any system "
               f"serves them. Step times: {reproduction.step_cost_label}.")
    chart(charts.figure2_figure(reproduction), key="frag.chart.figure2", file_name="paper_figure2")
    show(readable(charts.figure2_table(reproduction)), key="frag.figure2_table", file_name="paper_figure2.csv")
    notes = [note for row in reproduction.rows for note in row.notes]
    st.caption(f"Categories off by more than {NOTE_THRESHOLD_PP:g} points, and why: "
               + (" ".join(f"**{row.system}** — " + " ".join(row.notes) for row in reproduction.rows if row.notes)
                  if notes else "none."))


@st.fragment
def prefix_section(state: PageState, chosen: Sidebar, engine: TimelineConfig, seed: int) -> None:
    controls = prefix_controls(state)
    tier = None
    if controls.cpu_gib > 0:
        if chosen.budget.per_token_bytes is None:
            st.warning(":material/warning: The CPU tier needs KV bytes per token: set the budget in GiB.")
        else:
            tier = cpu_tier(controls.cpu_gib, controls.link_gbps)
    try:
        config = replace(engine, cpu_tier=tier, prefix_caching=True, allocation="paged")
        check_prefix_view(controls.scenario, config, requests="Requests", turns="Turns per conversation",
                          block_size="Block size (tokens)")
        view = cached_prefix(controls.scenario, config, seed)
    except ValueError as err:
        st.error(f":material/error: {str(err).splitlines()[0]}")
        return
    prefix, result = view.result.prefix, view.result
    row = metric_row()
    row.metric("Prompt tokens from the cache", percent_text(prefix.hit_rate),
               help="Cached prompt tokens over prompt tokens, first admissions (vLLM's hit rate).")
    row.metric("Prefill tokens saved", f"{prefix.prefill_tokens_saved:,}")
    row.metric("Cached blocks (peak)", f"{prefix.cached_blocks_peak:,}",
               help=f"{prefix.cached_blocks_peak * chosen.block_size:,} token slots")
    row.metric("Evictions", f"{prefix.evictions:,}")
    st.caption(f"{controls.scenario.label}; block size {chosen.block_size}. Only full blocks are hashed and "
               "shared, a hit never covers a prompt's last token, and freed blocks are evicted least recently "
               "freed first (a sequence's tail before its head), as in vLLM.")
    chart(charts.prefix_sweep_figure(view), key="frag.chart.prefix_sweep", file_name="prefix_hit_rate")
    runs = [("as set", result)] + ([("without the CPU tier", view.without_cpu)] if view.without_cpu else [])
    show(readable(charts.latency_table(runs), percent=("hit rate",)), key="frag.prefix_table",
         file_name="prefix_caching.csv")
    state.sync()


@st.fragment
def sharing_section(state: PageState, chosen: Sidebar) -> None:
    results = cached_sharing(sharing_settings(state), chosen.block_size, chosen.workload.seed)
    table = charts.sharing_table(results)
    chart(charts.sharing_figure(table, chosen.block_size), key="frag.chart.sharing", file_name="sharing")
    show(readable(table, percent=("saved",)), key="frag.sharing_table", file_name="sharing.csv")
    st.caption("Forked samples and beams share blocks (reference counts) and copy a shared block "
               "before writing into it; a cached prefix shares only its full blocks.")
    state.sync()


@st.fragment
def block_table_section(state: PageState, chosen: Sidebar) -> None:
    settings: BlockTableSettings = block_table_settings(state)
    per_token = chosen.budget.per_token_bytes
    demo, pool_blocks = block_table_view(settings, token_bytes=per_token, seed=chosen.workload.seed,
                                         row_blocks=charts.POOL_COLUMNS)
    chart(charts.pool_figure(demo, pool_blocks), key="frag.chart.pool", file_name="block_pool")
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
    show(readable(charts.block_tables(demo)), key="frag.bt_tables", file_name="block_tables.csv",
         label="Block tables as CSV")
    st.caption(f"Copy-on-write copies so far: {demo.copies}. Last events:")
    show(readable(charts.event_log(demo)), key="frag.bt_log", file_name="block_events.csv", label="Events as CSV")
    state.sync()

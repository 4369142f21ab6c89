"""The fragmentation explorer's tabs beyond the snapshot: the over-time run, prefix caching, the
paper's figure 2, sharing and the block table.

The quick tabs (figure 2, the block table) are Streamlit fragments, so a widget inside one reruns
that tab only, and each calls one cached library function. The runs that can take over a second
(over time, the four allocators compared, prefix caching, sharing at its larger settings) go
through :class:`ui.run_feedback.RunFeedback`: progress at the top of the tab, the old figures
marked stale meanwhile, a Cancel button, one run at a time across sessions. Those tabs are
therefore not fragments: a click inside a fragment would wait for the running script instead of
interrupting it.
"""

from __future__ import annotations

from dataclasses import replace

import streamlit as st

from glossary import allocator_label
from hardware.gpus import get_gpu
from planner.step_time import paper_step_cost, shape_step_cost
from simulation.explorer import (BlockTableSettings, SharingSettings, allocator_configs, block_table_view,
                                 check_prefix_view, cpu_tier, prefix_view, prefix_view_runs, sharing_view,
                                 sharing_work, timeline_view, token_address)
from simulation.paper_figure2 import NOTE_THRESHOLD_PP, Figure2Reproduction, reproduce_figure2
from simulation.step_cost import StepCost
from simulation.timeline import Allocation, TimelineConfig
from simulation.workloads import Workload
from sizing.presets import get_preset
from ui import fragmentation_charts as charts
from ui.fragmentation_controls import (BATCH, BATCHED_TOKENS, STEP_SOURCES, Sidebar, block_table_settings, clamp_to,
                                       prefix_controls, sharing_settings, step_gpus, step_models)
from ui.layout import chart, metric_row
from ui.run_feedback import Progress, RunFeedback
from ui.run_queue import ResultStore
from ui.tables import counted, percent_text, readable, show
from ui.url_state import PageState


@st.cache_data(show_spinner=False, max_entries=4)
def cached_figure2() -> Figure2Reproduction:
    return reproduce_figure2(step_cost=paper_step_cost())


@st.cache_data(show_spinner=False, max_entries=32)
def cached_step_cost(model_id: str, gpu_id: str) -> StepCost:
    return shape_step_cost(get_preset(model_id).shape, gpu_id=gpu_id)


# Below this many block-manager calls (0.1-0.3 s here, :func:`simulation.explorer.sharing_work`) a
# sharing run skips the queue: its user would otherwise wait out another session's long run.
SHARING_QUEUE_CALLS = 200_000


@st.cache_resource
def sharing_store() -> ResultStore:
    """The server's finished sharing runs, apart from the long runs' store: a few numbers each,
    and many of them as inputs are tried, which must not push those out."""
    return ResultStore()


@st.fragment
def figure2_section() -> None:
    reproduction = cached_figure2()  # 0.2-0.5 s, once per server: no run feedback needed
    st.caption("The setting of the paper's §6.2: OPT-13B on one A100-40GB, 12 GiB of KV "
               f"({reproduction.budget.tokens:,} token slots), maximum length 2,048, ShareGPT-like lengths "
               f"(means 161 in, 338 out), {reproduction.requests:,} requests arriving faster than any system "
               f"serves them. Step times: {reproduction.step_cost_label}.")
    chart(charts.figure2_figure(reproduction), key="frag.chart.figure2", file_name="paper_figure2")
    show(readable(charts.figure2_table(reproduction)), key="frag.figure2_table", file_name="paper_figure2.csv")
    notes = [f"**{allocator_label(row.allocation.value)}** — " + " ".join(row.notes)
             for row in reproduction.rows if row.notes]
    st.caption(f"Categories off by more than {NOTE_THRESHOLD_PP:g} points, and why: "
               + (" ".join(notes) if notes else "none."))


def prefix_section(state: PageState, chosen: Sidebar, engine: TimelineConfig, seed: int) -> None:
    """The prefix-caching tab (not a fragment: its Cancel button must interrupt the running script)."""
    feedback = RunFeedback("prefix")
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
        run = feedback.run(("prefix", controls.scenario, config, seed),
                           f"simulating prefix caching ({prefix_view_runs(config)} runs)",
                           lambda progress: prefix_view(controls.scenario, config, seed, deadline_field="Requests",
                                                        progress=progress))
    except ValueError as err:
        st.error(f":material/error: {str(err).splitlines()[0]}")
        return
    if run.value is None:
        return
    with feedback.results():
        prefix_figures(run.value, controls, chosen)
    state.sync()


def prefix_figures(view, controls, chosen: Sidebar) -> None:
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


def sharing_section(state: PageState, chosen: Sidebar) -> None:
    """The sharing tab (not a fragment: its Cancel button must interrupt the running script)."""
    feedback = RunFeedback("sharing", store=sharing_store())
    settings: SharingSettings = sharing_settings(state)
    block, seed = chosen.block_size, chosen.workload.seed
    run = feedback.run(("sharing", settings, block, seed), "simulating block sharing",
                       lambda progress: sharing_view(settings, block_size=block, seed=seed, progress=progress),
                       queue=sum(sharing_work(settings, block_size=block)) >= SHARING_QUEUE_CALLS)
    if run.value is not None:
        with feedback.results():
            sharing_figures(run.value, chosen.block_size)
    state.sync()


def sharing_figures(results, block_size: int) -> None:
    table = charts.sharing_table(results)
    chart(charts.sharing_figure(table, block_size), key="frag.chart.sharing", file_name="sharing")
    show(readable(table, percent=("saved",)), key="frag.sharing_table", file_name="sharing.csv")
    st.caption("Forked samples and beams share blocks (reference counts) and copy a shared block "
               "before writing into it; a cached prefix shares only its full blocks.")


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


# ---- over time -----------------------------------------------------------------------------------
def engine_config(state: PageState, chosen: Sidebar) -> TimelineConfig:
    """The scheduler and step-time settings of the over-time tab."""
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


def timeline_section(state: PageState, chosen: Sidebar, workload: Workload, key: tuple) -> None:
    """The over-time tab (not a fragment: its Cancel button must interrupt the running script)."""
    feedback = RunFeedback("timeline")
    cols = st.columns(4)
    allocation = cols[0].selectbox("Allocator", tuple(a.value for a in Allocation), format_func=allocator_label,
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
    rate = None if use_trace_arrivals else rate  # None: the trace's own arrival times
    seed = chosen.workload.seed
    run = feedback.run(("timeline", key, rate, seed, config), "simulating over time",
                       lambda progress: timeline_view(workload, config, rate=rate, seed=seed, progress=progress),
                       stale=("main", "compare"))
    if run.value is not None:
        with feedback.results("main"):
            timeline_figures(run.value, chosen)
    if st.toggle("Compare all allocators on this workload (four runs)", key=state.key("compare")):
        if not run.fresh:
            st.caption("The comparison runs once the run above has.")
        else:
            compare_allocators(feedback, workload, key, rate, seed, config)
    state.sync()


def timeline_figures(result, chosen: Sidebar) -> None:
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


def compare_allocators(feedback: RunFeedback, workload: Workload, key: tuple, rate: float | None, seed: int,
                       config: TimelineConfig) -> None:
    """The four allocators on the same requests: each run is stored on its own (the one above is
    already), so a cancelled comparison keeps the allocators it finished."""
    configs = allocator_configs(config)
    keys = [("timeline", key, rate, seed, each) for each in configs]

    def compute(progress: Progress) -> tuple:
        runs = []
        for index, (run_key, each) in enumerate(zip(keys, configs)):
            result = feedback.store.get(run_key)
            if result is None:
                result = timeline_view(workload, each, rate=rate, seed=seed,
                                       progress=lambda share, i=index: progress((i + share) / len(configs)))
                feedback.store.put(run_key, result)
            runs.append((each.allocation.value, result))
        return tuple(runs)

    compared = feedback.run(("compare", *keys), "comparing the four allocators", compute, part="compare")
    if compared.value is None:
        return
    runs = list(compared.value)
    with feedback.results("compare"):
        chart(charts.breakdown_figure([allocator_label(name, short=True) for name, _ in runs],
                                      [r.breakdown for _, r in runs],
                                      "Time-averaged memory per allocator (paper's fig. 2, over time)"),
              key="frag.chart.compare", file_name="allocators_over_time")
        show(readable(charts.allocator_table(runs), percent=("token share of used memory",)),
             key="frag.compare_table", file_name="allocators_over_time.csv")

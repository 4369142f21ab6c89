"""The cluster page's over-time section, drawn from
:func:`planner.cluster.page_view.occupancy_record`: one DP rank of the disaggregated decode pool
beside one of the aggregated pool, run through the simulator on the plan's load — peak and mean
KV blocks in use, preemptions, and what each run saw.

Up to 20,000 requests a pool take seconds, so the run goes through
:class:`ui.run_feedback.RunFeedback`: its strip sits under the section's heading, by the toggle
the user has just pressed, and sticks below the top bar once the page scrolls past it, with a
progress bar over both pools, the previous figures dimmed as stale and a Cancel button; a run
queued behind another session's says so. The section is not a fragment, so that a Cancel click interrupts the running
script. Finished runs are kept for every session in :func:`occupancy_store`, not
``st.cache_data``: a cached function may not draw the progress bar made before it runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd
import streamlit as st

from inputs.errors import InputError
from planner.cluster.occupancy import MAX_REQUESTS
from planner.cluster.page_view import ClusterPageInputs, occupancy_record
from ui.field_labels import CLUSTER_LABELS, page_message
from ui.layout import metric_row
from ui.run_feedback import RunFeedback
from ui.run_queue import ResultStore

__all__ = ["OCCUPANCY_LABELS", "POOL_TITLES", "QUEUE_REQUESTS", "TAB", "occupancy_controls", "occupancy_error",
           "occupancy_frame", "occupancy_store", "render_occupancy", "show_occupancy"]

POOL_TITLES = {"decode": "Disaggregated decode pool", "aggregated": "Aggregated pool"}
# The section's own widgets, for refusals that name them (the plan's fields keep their labels).
OCCUPANCY_LABELS = {**CLUSTER_LABELS, "sim_requests": "Simulated requests per pool", "sim_seed": "Seed",
                    "decode_kv": "Decode pool", "aggregated_kv": "Aggregated pool",
                    "decode_replicas": "Decode pool", "aggregated_replicas": "Aggregated pool"}
TAB = "occupancy"  # the section's name in RunFeedback's keys (cancel flag, figure container)
# Below this many requests a pool, a run ends within a fraction of a second (both pools of the
# default plan: 0.08 s at 1,000, 1.1 s at 20,000) and skips the queue: its user would otherwise
# wait out another session's run of seconds for it.
QUEUE_REQUESTS = 2_000


@st.cache_resource
def occupancy_store() -> ResultStore:
    """The server's finished pool simulations, apart from the fragmentation page's long runs: a
    few numbers each, and many of them as plans are tried, which must not push those out."""
    return ResultStore()


def occupancy_controls(key: Callable[[str], str], *, seed_max: int) -> RunFeedback:
    """The section's heading, its run feedback strip and its controls: the toggle, the requests
    per pool (at most the CLI's ``--sim-requests`` cap) and the seed; ``key`` maps a field to its
    session key. Returns the feedback :func:`show_occupancy` runs through."""
    st.subheader("Over time: the decode pool beside the aggregated pool")
    feedback = RunFeedback(TAB, store=occupancy_store())
    toggle, requests, seed = st.columns([2, 1, 1])
    toggle.toggle("Simulate the decode pool", key=key("simulate"),
                  help="run one DP rank of the decode pool (its requests arrive prefilled) and one of the "
                       "aggregated pool through the simulator: KV blocks in use and preemptions")
    requests.number_input(OCCUPANCY_LABELS["sim_requests"], 1, MAX_REQUESTS, key=key("sim_requests"))
    seed.number_input(OCCUPANCY_LABELS["sim_seed"], 0, seed_max, key=key("sim_seed"))
    return feedback


def show_occupancy(feedback: RunFeedback, inputs: ClusterPageInputs, *, requests: int, seed: int,
                   current: bool) -> None:
    """The record of ``inputs``' pools over ``requests`` requests each (seeded), run through
    ``feedback`` and drawn, or its refusal; after a cancel, the last finished run's figures,
    marked stale. Nothing is run while the plan on screen is the last valid one (``current``
    False), since its inputs are not the widgets'."""
    if not current:
        st.caption(":material/info: Fix the plan's inputs above to simulate its pools.")
        return
    try:
        run = feedback.run(("cluster-occupancy", inputs, requests, seed), "simulating the decode and aggregated pools",
                           lambda progress: occupancy_record(inputs, requests=requests, seed=seed, progress=progress),
                           queue=requests >= QUEUE_REQUESTS)
    except InputError as exc:
        occupancy_error(exc)
        return
    if run.value is not None:
        with feedback.results():
            render_occupancy(run.value)


def occupancy_error(exc: InputError) -> None:
    """A refusal of the simulation, led by the widget (or pool) it names."""
    st.error(page_message(exc, OCCUPANCY_LABELS), icon=":material/error:")


def render_occupancy(record: dict[str, Any]) -> None:
    """Each simulated pool's metrics side by side, the runs' figures in one table, and why a
    pool was not simulated."""
    st.caption(f"One DP rank of each pool, {record['requests']:,} Poisson arrivals of the plan's load (seed "
               f"{record['seed']}). The decode pool's requests arrive prefilled, their KV shipped, the plan's TTFT "
               "after arrival; the aggregated pool prefills its own prompts. Means span the whole run, the "
               "ramp from an empty pool and the drain included.")
    pools = record["pools"]
    if pools:
        for column, pool in zip(st.columns(len(pools)), pools, strict=True):
            _pool_metrics(column, pool)
        st.dataframe(occupancy_frame(pools), hide_index=True, width="stretch")
    for skipped in record["skipped"]:
        st.caption(f":material/block: {POOL_TITLES[skipped['role']]} not simulated: {skipped['reason']}.")


def _pool_metrics(column: Any, pool: dict[str, Any]) -> None:
    role = pool["role"]
    name = "decode pool" if role == "decode" else "aggregated pool"
    with column:
        st.markdown(f"**{POOL_TITLES[role]}**")
        row = metric_row()
        row.metric(f"Peak KV blocks ({name})", f"{pool['peak_blocks']:,} of {pool['kv_blocks']:,}",
                   help=f"most blocks of {pool['block_size']} tokens in use at once: {pool['peak_share']:.1%} "
                        "of the rank's KV cache")
        row.metric(f"Mean KV blocks ({name})", f"{pool['mean_blocks']:,.1f}",
                   help=f"time-averaged blocks in use: {pool['mean_share']:.1%} of the rank's KV cache")
        row.metric(f"Preemptions ({name})", f"{pool['preemptions']:,}",
                   help="requests evicted and recomputed when the KV cache ran out")
        where = (f"{pool['rate_per_dp_rank']:,.3g} requests/s on one of {pool['replicas']:,} × DP {pool['dp']} "
                 f"ranks, at most {pool['max_num_seqs']:,} sequences")
        if role == "decode":
            where += f"; each request's KV arrives {pool['transfer_delay_s'] * 1e3:,.1f} ms after the request"
        st.caption(where)


def occupancy_frame(pools: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per simulated pool: its KV blocks, their peak and mean use, and the run's figures."""
    return pd.DataFrame({
        "Pool": [POOL_TITLES[p["role"]] for p in pools],
        "KV blocks": [f"{p['kv_blocks']:,}" for p in pools],
        "Peak in use": [f"{p['peak_blocks']:,} ({p['peak_share']:.1%})" for p in pools],
        "Mean in use": [f"{p['mean_blocks']:,.1f} ({p['mean_share']:.1%})" for p in pools],
        "Preemptions": [f"{p['preemptions']:,}" for p in pools],
        "Completed": [f"{p['completed']:,}" for p in pools],
        "Rejected": [f"{p['rejected']:,}" for p in pools],
        "Mean batch": [f"{p['mean_batch_size']:,.1f}" for p in pools],
        "Mean TPOT": [f"{p['mean_tpot_s'] * 1e3:,.2f} ms" for p in pools],
        "Duration": [f"{p['duration_s']:,.1f} s" for p in pools],
    })

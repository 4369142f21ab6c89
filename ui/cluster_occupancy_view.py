"""The cluster page's over-time section, drawn from
:func:`planner.cluster.page_view.occupancy_record`: one DP rank of the disaggregated decode pool
beside one of the aggregated pool, run through the simulator on the plan's load — peak and mean
KV blocks in use, preemptions, and what each run saw."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd
import streamlit as st

from inputs.errors import InputError
from planner.cluster.occupancy import MAX_REQUESTS
from ui.field_labels import CLUSTER_LABELS, page_message
from ui.layout import metric_row

__all__ = ["OCCUPANCY_LABELS", "POOL_TITLES", "occupancy_controls", "occupancy_error", "occupancy_frame",
           "render_occupancy", "show_occupancy"]

POOL_TITLES = {"decode": "Disaggregated decode pool", "aggregated": "Aggregated pool"}
# The section's own widgets, for refusals that name them (the plan's fields keep their labels).
OCCUPANCY_LABELS = {**CLUSTER_LABELS, "sim_requests": "Simulated requests per pool", "sim_seed": "Seed",
                    "decode_kv": "Decode pool", "aggregated_kv": "Aggregated pool",
                    "decode_replicas": "Decode pool", "aggregated_replicas": "Aggregated pool"}


def occupancy_controls(key: Callable[[str], str], *, seed_max: int) -> None:
    """The section's heading and its controls: the toggle, the requests per pool (at most the
    CLI's ``--sim-requests`` cap) and the seed; ``key`` maps a field to its session key."""
    st.subheader("Over time: the decode pool beside the aggregated pool")
    toggle, requests, seed = st.columns([2, 1, 1])
    toggle.toggle("Simulate the decode pool", key=key("simulate"),
                  help="run one DP rank of the decode pool (its requests arrive prefilled) and one of the "
                       "aggregated pool through the simulator: KV blocks in use and preemptions")
    requests.number_input(OCCUPANCY_LABELS["sim_requests"], 1, MAX_REQUESTS, key=key("sim_requests"))
    seed.number_input(OCCUPANCY_LABELS["sim_seed"], 0, seed_max, key=key("sim_seed"))


def show_occupancy(run: Callable[[], dict[str, Any]], *, current: bool) -> None:
    """``run()``'s record drawn, or its refusal; nothing is run while the plan on screen is the
    last valid one (``current`` False), since its inputs are not the widgets'."""
    if not current:
        st.caption(":material/info: Fix the plan's inputs above to simulate its pools.")
        return
    try:
        record = run()
    except InputError as exc:
        occupancy_error(exc)
        return
    render_occupancy(record)


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

"""Cluster plan page: widgets → ClusterPageInputs → planner.cluster (cached) → render.

Disaggregated prefill/decode pools beside the aggregated deployment for one load, each pool's
figures with their formulas, the role table with its launch commands, and the Pareto chart of
every layout; the same record ``python -m planner cluster --json --pareto`` prints. "Simulate the
decode pool" adds the record ``--simulate`` adds (one DP rank of the decode pool beside one of the
aggregated pool over time), with progress, stale marking and Cancel (:mod:`ui.cluster_occupancy_view`).
Every control is in the URL; a refusal names the widget and the last good plan stays on screen.
"""

from __future__ import annotations

import streamlit as st

from glossary import dtype_label
from hardware.gpus import DEFAULT_GPU, GPU_IDS, get_gpu
from hardware.links import LINK_IDS, MAX_NICS, get_link
from inputs.bounds import Bound
from inputs.errors import InputError
from planner.cluster import occupancy
from planner.cluster.budget import BUDGETS
from planner.cluster.launch import CONNECTORS
from planner.cluster.page_view import ClusterPageInputs, RoleLayout, cluster_record
from planner.cluster.replica import MAX_RATE
from sizing.precisions import PRECISION_NAMES
from sizing.presets import PRESET_IDS, get_preset
from ui.cluster_occupancy_view import occupancy_controls, show_occupancy
from ui.cluster_view import budget_select, render_cluster
from ui.field_labels import CLUSTER_LABELS, page_message
from ui.glossary_view import render_glossary
from ui.router import run_through_router
from ui.url_state import ChoiceField, FlagField, NumberField, PageState, copy_link

TP_CHOICES = (0, 1, 2, 4, 8)  # 0: the smallest layout that holds one sequence
PP_CHOICES = (1, 2, 3, 4)
DP_CHOICES = (1, 2, 4, 8)
WEIGHT_CHOICES = ("bf16", "fp8", "int8", "int4")
LAST_GOOD = "cluster.last_record"
# A browser's number input holds integers exactly up to 2⁵³ − 1, below the simulator's own seed cap.
SEED_MAX = min(occupancy.MAX_SEED, 2**53 - 1)


def _bound(field: str, low: float, high: float, integer: bool = False) -> Bound:
    return Bound(field=field, low=low, high=high, integer=integer)


def _role_fields(prefix: str) -> list:
    return [ChoiceField(f"{prefix}tp", f"{prefix}tp", 0, TP_CHOICES), ChoiceField(f"{prefix}pp", f"{prefix}pp", 1, PP_CHOICES),
            ChoiceField(f"{prefix}dp", f"{prefix}dp", 1, DP_CHOICES), FlagField(f"{prefix}ep", f"{prefix}ep", False)]


state = PageState("cluster", [
    ChoiceField("model", "model", "llama-3.1-70b", PRESET_IDS),
    ChoiceField("kv", "kv", "fp8", PRECISION_NAMES),
    ChoiceField("w", "w", "bf16", WEIGHT_CHOICES),
    ChoiceField("gpu", "gpu", DEFAULT_GPU, GPU_IDS),
    ChoiceField("budget", "budget", "engine", BUDGETS),
    ChoiceField("link", "link", "ib-ndr", LINK_IDS),
    NumberField("nics", "nics", 1, _bound("nics", 1, MAX_NICS, True)),
    NumberField("rate", "rate", 1.0, _bound("rate", 0.01, MAX_RATE)),
    NumberField("prompt", "prompt", 2048, _bound("prompt", 1, 1_000_000, True)),
    NumberField("output", "output", 256, _bound("output", 1, 1_000_000, True)),
    NumberField("tpot", "tpot_ms", 0, _bound("tpot", 0, 10_000, True)),
    NumberField("ttft", "ttft_ms", 0, _bound("ttft", 0, 100_000, True)),
    *_role_fields("p"), *_role_fields("d"),
    ChoiceField("conn", "connector", "nixl", tuple(CONNECTORS)),
    FlagField("sim", "simulate", False),
    NumberField("simn", "sim_requests", occupancy.DEFAULT_REQUESTS,
                _bound("sim_requests", 1, occupancy.MAX_REQUESTS, True)),
    NumberField("simseed", "sim_seed", 0, _bound("sim_seed", 0, SEED_MAX, True)),
])


@st.cache_data(show_spinner="Sweeping the layouts…", max_entries=64)
def _record(inputs: ClusterPageInputs) -> dict:
    return cluster_record(inputs)


def _role_controls(prefix: str, title: str) -> None:
    st.caption(title)
    c1, c2, c3 = st.columns(3)
    c1.selectbox("TP", TP_CHOICES, key=key(f"{prefix}tp"), format_func=lambda t: "auto" if t == 0 else str(t),
                 help="auto: the smallest layout whose GPUs hold one of this role's sequences")
    c2.selectbox("PP", PP_CHOICES, key=key(f"{prefix}pp"), disabled=value(f"{prefix}tp") == 0)
    c3.selectbox("DP", DP_CHOICES, key=key(f"{prefix}dp"), disabled=value(f"{prefix}tp") == 0)
    st.checkbox("Expert parallel (EP)", key=key(f"{prefix}ep"), disabled=value(f"{prefix}tp") == 0)


run_through_router()
st.title(":material/hub: Cluster plan")
st.caption("Prefill and decode on separate pools with the KV cache shipped between them, against one pool "
           "doing both, for a load you give: pool sizes, transfer, staging, launch commands and every "
           "layout's throughput per GPU against latency. Figures from `planner/cluster/`; the CLI is "
           "`python -m planner cluster`.")
state.seed()
for notice in state.notices:
    st.caption(f":material/link_off: {notice}")
key, value = state.key, state.value

with st.sidebar:
    st.subheader(":material/memory: Model and hardware")
    st.selectbox("Model", PRESET_IDS, key=key("model"), format_func=lambda i: get_preset(i).name)
    st.selectbox("KV precision", PRECISION_NAMES, key=key("kv"), format_func=dtype_label)
    st.selectbox("Weight precision", WEIGHT_CHOICES, key=key("w"), format_func=dtype_label)
    st.selectbox("GPU", GPU_IDS, key=key("gpu"), format_func=lambda i: get_gpu(i).label)
    budget_select(key("budget"))
    st.subheader(":material/cable: Link between the pools")
    st.selectbox("Link", LINK_IDS, key=key("link"), format_func=lambda i: get_link(i).name)
    st.number_input("NICs per GPU", 1, MAX_NICS, key=key("nics"))
    st.selectbox("KV connector", tuple(CONNECTORS), key=key("connector"))
    st.subheader(":material/view_column: Layouts")
    _role_controls("p", "Prefill pool")
    _role_controls("d", "Decode pool (and the aggregated pool)")

load_cols = st.columns(5)
load_cols[0].number_input("Arrival rate (requests/s)", 0.01, float(MAX_RATE), step=1.0, key=key("rate"))
load_cols[1].number_input("Prompt tokens", 1, 1_000_000, key=key("prompt"))
load_cols[2].number_input("Output tokens", 1, 1_000_000, key=key("output"))
load_cols[3].number_input("TPOT target (ms, 0: none)", 0, 10_000, key=key("tpot_ms"))
load_cols[4].number_input("TTFT target (ms, 0: none)", 0, 100_000, key=key("ttft_ms"))
state.sync()
copy_link()
render_glossary()


def _role(prefix: str) -> RoleLayout:
    return RoleLayout(tp=int(value(f"{prefix}tp")), pp=int(value(f"{prefix}pp")), dp=int(value(f"{prefix}dp")),
                      ep=bool(value(f"{prefix}ep")))


inputs = ClusterPageInputs(
    model=value("model"), gpu=value("gpu"), kv_dtype=value("kv"), weight_dtype=value("w"), link=value("link"),
    nics=int(value("nics")), rate=float(value("rate")), prompt_tokens=int(value("prompt")),
    output_tokens=int(value("output")), tpot_ms=float(value("tpot_ms")), ttft_ms=float(value("ttft_ms")),
    prefill=_role("p"), decode=_role("d"), connector=value("connector"), budget=value("budget"))
record, current = None, False
try:
    record = _record(inputs)
    st.session_state[LAST_GOOD] = record
    current = True
except InputError as exc:
    st.error(page_message(exc, CLUSTER_LABELS), icon=":material/error:")
    record = st.session_state.get(LAST_GOOD)
    if record is not None:
        st.caption(":material/history: Showing the last valid plan.")
if record is not None:
    st.caption(f"{record['model']} on {record['gpu']}; {record['bandwidth_label']}")
    render_cluster(record)

feedback = occupancy_controls(key, seed_max=SEED_MAX)
if value("simulate"):
    show_occupancy(feedback, inputs, requests=int(value("sim_requests")), seed=int(value("sim_seed")), current=current)

"""Capacity planner page: widgets → ServerInputs / EdgeInputs → planner (cached) → render.

Users served and time per output token for a model on a GPU, contiguous against paged KV, with
the limit that binds said in words; and an edge view for a robot's shared-memory module.
State lives in the URL; the sizer page's latest result (``ui.handoff``) seeds the model, the
precisions, the GPU, TP and the maximum context when the URL does not set them.
"""

from __future__ import annotations

import streamlit as st

from glossary import POLICY_LABELS, dtype_label
from hardware.gpus import DEFAULT_GPU, GPU_IDS, get_gpu
from inputs.bounds import Bound
from inputs.errors import InputError
from inputs.uploads import upload_bytes
from kernels.bench.records import MAX_BENCH_JSON_BYTES, BenchJsonError, BenchReport, parse_bench_json
from planner.bandwidth import SOURCES_IN_ORDER, BandwidthEstimate, datasheet_estimate
from planner.page_inputs import EDGE_DEVICE, EdgeInputs, ServerInputs, page_traffic, plan_edge_view, plan_server
from planner.plan import DEFAULT_MAX_CONTEXT
from simulation.traces import TRACES_DIR, shipped_trace_names
from sizing.errors import SizingError
from sizing.precisions import PRECISION_NAMES, WEIGHT_FORMAT_NAMES
from sizing.presets import DEFAULT_PRESET, PRESET_IDS, get_preset
from sizing.engine.groups import GroupingRule
from ui.answer_view import cached_answer, engine_settings_controls, render_answer
from ui.engine_view import BATCHED, SEQS, UTILIZATION
from ui.field_labels import PLANNER_LABELS, page_message
from ui.glossary_view import render_glossary
from ui.handoff import latest
from ui.layout import chart, identify_reference, metric_row, page_tabs, tab_field
from ui.planner_charts import edge_figure, fmt_ms
from ui.planner_view import render_server
from ui.router import run_through_router
from ui.url_state import ChoiceField, FlagField, NumberField, PageState, copy_link
from units import both, format_number

TP_CHOICES = (1, 2, 4, 8, 16, 32, 64)  # tensor-parallel groups come in powers of two
BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
TRAFFIC_KINDS = ("lognormal", "fixed", "preset", "trace")
TRAFFIC_LABELS = {"lognormal": "Log-normal lengths", "fixed": "Same length, all prompt but 1 output token",
                  "preset": "Published dataset", "trace": "Real trace (CSV)"}
SIM_PRESETS = ("ShareGPT", "Alpaca", "Reference page, problem 4")
POLICIES = POLICY_LABELS  # one name per allocator on every page and CLI
SOURCE_LABELS = {"measured": "Harness run on this GPU", "h200-results": "Shipped H200 results",
                 "datasheet": "Datasheet"}
# A harness run on this GPU: the uploaded document's bytes (kept across reruns), else the
# live-kernels page's BenchReports of this session.
BENCH_BYTES_KEY = "planner.bench_json"
KERNELS_RUNS_KEY = "kernels_session_runs"
MAX_TRACE_BYTES = 5 * 2**20  # an uploaded trace larger than this is refused, not parsed
SHIPPED_TRACES = shipped_trace_names()
TRACE_CHOICES = SHIPPED_TRACES or ("splitwise_conv.csv",)


def _bound(field: str, low: float, high: float, integer: bool = False) -> Bound:
    return Bound(field=field, low=low, high=high, integer=integer)


TABS = tab_field("tab", "tab", {"server": ":material/dns: Server",
                                "edge": ":material/precision_manufacturing: Edge (robot)"})
# Each control once: URL name, session key, default, and its widget's range as the URL's bound.
state = PageState("planner", [
    ChoiceField("model", "model", DEFAULT_PRESET, PRESET_IDS),
    ChoiceField("kv", "kv", "fp8", PRECISION_NAMES),
    ChoiceField("w", "w", "fp8", WEIGHT_FORMAT_NAMES),
    ChoiceField("gpu", "gpu", DEFAULT_GPU, GPU_IDS),
    ChoiceField("tp", "tp", 8, TP_CHOICES),
    NumberField("usable", "usable", 0.9, _bound("usable", 0.5, 1.0)),
    ChoiceField("traffic", "traffic", "lognormal", TRAFFIC_KINDS),
    NumberField("length", "length", 2048, _bound("length", 2, 1_000_000, True)),
    NumberField("mean", "mean", 2048, _bound("mean", 2, 1_000_000, True)),
    NumberField("sigma", "sigma", 0.8, _bound("sigma", 0.0, 2.0)),
    NumberField("prompt", "prompt_share", 0.5, _bound("prompt", 0.0, 1.0)),
    ChoiceField("preset", "preset", SIM_PRESETS[0], SIM_PRESETS),
    ChoiceField("trace", "trace", TRACE_CHOICES[0], TRACE_CHOICES),
    NumberField("maxctx", "max_context", DEFAULT_MAX_CONTEXT, _bound("maxctx", 2, 10_000_000, True)),
    ChoiceField("block", "block", 16, BLOCK_SIZES),
    ChoiceField("policy", "policy", "max", tuple(POLICIES)),
    NumberField("tpot", "tpot_ms", 50, _bound("tpot", 0, 500, True)),
    NumberField("ttft", "ttft_ms", 0, _bound("ttft", 0, 10_000, True)),
    NumberField("rate", "rate", 0.0, _bound("rate", 0.0, 1e6)),
    NumberField("users", "users", 100, _bound("users", 1, 10_000_000, True)),
    NumberField("gmu", "gpu_memory_utilization", 0.9, UTILIZATION),
    NumberField("mnbt", "max_num_batched_tokens", 8192, BATCHED),
    NumberField("mns", "max_num_seqs", 256, SEQS),
    ChoiceField("rule", "engine_rule", str(GroupingRule.HYBRID), tuple(GroupingRule)),
    FlagField("old", "vllm_before_021", False),
    ChoiceField("source", "source", "measured", SOURCES_IN_ORDER),
    FlagField("override", "override", False),
    NumberField("eff", "efficiency", 0.85, _bound("eff", 0.1, 1.0)),
    NumberField("os", "os_gb", 8.0, _bound("os", 0.0, 64.0)),
    NumberField("perc", "perception_gb", 8.0, _bound("perc", 0.0, 64.0)),
    ChoiceField("emodel", "edge_model", "llama-3.1-8b", PRESET_IDS),
    ChoiceField("ekv", "edge_kv", "bf16", PRECISION_NAMES),
    ChoiceField("ew", "edge_w", "bf16", PRECISION_NAMES),
    NumberField("ftok", "frame_tokens", 256, _bound("ftok", 1, 100_000, True)),
    NumberField("fps", "fps", 2.0, _bound("fps", 0.1, 120.0)),
    NumberField("instr", "instruction", 512, _bound("instr", 0, 1_000_000, True)),
    NumberField("hz", "control_hz", 5.0, _bound("hz", 1.0, 50.0)),
    TABS,
])


def _carried() -> dict:
    """The sizer's latest choices, for the fields the URL leaves unset."""
    handoff = latest()
    if handoff is None:
        return {}
    values = {"model": handoff.preset_id, "kv": handoff.kv_dtype, "w": handoff.weight_dtype,
              "gpu": handoff.gpu_id, "tp": handoff.tp, "max_context": handoff.max_context,
              "users": handoff.users or None, "usable": handoff.usable_fraction,
              "gpu_memory_utilization": handoff.gpu_memory_utilization,
              "max_num_batched_tokens": handoff.max_num_batched_tokens, "max_num_seqs": handoff.max_num_seqs,
              "engine_rule": handoff.engine_rule, "vllm_before_021": not handoff.cuda_graphs_profiled}
    return {key: value for key, value in values.items() if value not in (None, "")}


@st.cache_data(show_spinner=False, max_entries=64)
def _plan(inputs: ServerInputs, measured: BenchReport | None):
    return plan_server(inputs, measured)


@st.cache_data(show_spinner=False, max_entries=64)
def _edge(inputs: EdgeInputs, estimate: BandwidthEstimate):
    return plan_edge_view(inputs, estimate)


@st.cache_data(show_spinner=False, max_entries=8)
def _bench_report(data: bytes) -> BenchReport:
    """The uploaded harness report; cached so a rerun does not parse it again."""
    return parse_bench_json(data)


run_through_router()  # a deep link to /planner as the first request still gets app.py's router
st.title(":material/speed: Capacity planner")
st.caption("How many users this hardware serves and at what time per output token, with "
           "contiguous KV reservation and with paging: the sizer, the fragmentation snapshot "
           "and the measured kernels joined. Every figure comes from `sizing/` and `simulation/`.")
state.seed(carried=_carried())
for notice in state.notices:
    st.caption(f":material/link_off: {notice}")
key, value = state.key, state.value

# ---- widgets ------------------------------------------------------------------------------------
with st.sidebar:
    st.subheader(":material/memory: Model and hardware")
    st.selectbox("Model", PRESET_IDS, key=key("model"), format_func=lambda i: get_preset(i).name)
    st.selectbox("KV precision", PRECISION_NAMES, key=key("kv"), format_func=dtype_label)
    st.selectbox("Weight precision", WEIGHT_FORMAT_NAMES, key=key("w"), format_func=dtype_label)
    st.selectbox("GPU", GPU_IDS, key=key("gpu"), format_func=lambda i: get_gpu(i).label)
    st.select_slider("Tensor parallelism (GPUs per replica)", TP_CHOICES, key=key("tp"))
    st.slider("Usable share of GPU memory", 0.5, 1.0, step=0.01, key=key("usable"))
    st.subheader(":material/tune: Bandwidth source")
    st.radio("Preferred source", SOURCES_IN_ORDER, key=key("source"), format_func=SOURCE_LABELS.get,
             help="The first available source down this list is used and labelled.")
    uploaded_bench = st.file_uploader("Harness JSON (`python -m kernels.bench --json`)", type=["json"],
                                      key=key("bench_upload"), max_upload_size=MAX_BENCH_JSON_BYTES // 2**20)
    settings = engine_settings_controls(key, value)
    st.checkbox("Override bandwidth efficiency", key=key("override"))
    st.slider("Bandwidth efficiency", 0.1, 1.0, step=0.01, key=key("efficiency"),
              disabled=not value("override"))

traffic_col, allocator_col, target_col = st.columns(3)
with traffic_col:
    st.subheader(":material/timeline: Traffic")
    st.selectbox("Request lengths", TRAFFIC_KINDS, key=key("traffic"), format_func=TRAFFIC_LABELS.get)
    kind = value("traffic")
    trace_bytes, trace_name, trace_path = None, "uploaded trace", None
    if kind == "fixed":
        st.number_input("Tokens per request", 2, 1_000_000, key=key("length"),
                        help="Each request is this many tokens from the start: the prompt is all but one "
                             "token, and one output token is decoded (a full-length cache, as on the sizer).")
    elif kind == "lognormal":
        st.number_input("Mean tokens per request", 2, 1_000_000, key=key("mean"))
        st.slider("Sigma (log-space spread)", 0.0, 2.0, step=0.05, key=key("sigma"))
        st.slider("Prompt share of each request", 0.0, 1.0, step=0.05, key=key("prompt_share"))
    elif kind == "preset":
        st.selectbox("Dataset", SIM_PRESETS, key=key("preset"), format_func=identify_reference)
    else:
        if SHIPPED_TRACES:
            st.selectbox("Trace", SHIPPED_TRACES, key=key("trace"))
            trace_path = str(TRACES_DIR / value("trace"))
        upload = st.file_uploader("…or upload a CSV (prompt and output token columns)", type=["csv"],
                                  key=key("trace_upload"), max_upload_size=MAX_TRACE_BYTES // 2**20)
        if upload is not None:
            try:
                trace_bytes = upload_bytes(upload.getvalue(), MAX_TRACE_BYTES, field="trace")
                trace_name = upload.name
            except InputError as exc:
                st.error(f"Trace {upload.name}: {exc.message}; sample it first. Using the shipped trace.")
    st.number_input("Arrival rate (requests/s, 0: none)", 0.0, 1e6, step=1.0, key=key("rate"))
with allocator_col:
    st.subheader(":material/view_module: Allocator")
    st.selectbox("Contiguous policy", tuple(POLICIES), key=key("policy"), format_func=POLICIES.get,
                 help="Pow2: at most twice the output. Oracle: each output known ahead, a bound, not a server.")
    st.number_input("Maximum context (tokens)", 2, 10_000_000, key=key("max_context"),
                    help="The engine's max_model_len: the answer serves the users at this length.")
    st.number_input("Users (concurrent, for the answer)", 1, 10_000_000, key=key("users"))
    st.select_slider("Paged block size (tokens)", BLOCK_SIZES, key=key("block"))
with target_col:
    st.subheader(":material/timer: Targets")
    st.slider("TPOT target (ms, 0: none)", 0, 500, step=5, key=key("tpot_ms"))
    st.slider("TTFT target (ms, 0: none)", 0, 10_000, step=50, key=key("ttft_ms"))

# ---- the harness run on this GPU, if any ---------------------------------------------------------
if uploaded_bench is not None:
    st.session_state[BENCH_BYTES_KEY] = uploaded_bench.getvalue()
measured: BenchReport | None = None
if st.session_state.get(BENCH_BYTES_KEY) is not None:
    try:
        measured = _bench_report(st.session_state[BENCH_BYTES_KEY])
    except BenchJsonError as exc:
        st.sidebar.error(f"Harness JSON: {exc.message}. Falling back to the next source.",
                         icon=":material/error:")
elif st.session_state.get(KERNELS_RUNS_KEY):
    from kernels.bench.live import merge_reports  # needs torch and Triton: only once the kernel page ran

    measured = merge_reports(st.session_state[KERNELS_RUNS_KEY])

server_inputs = ServerInputs(
    model_id=value("model"), kv_dtype=value("kv"), weight_dtype=value("w"), gpu_id=value("gpu"),
    tp=int(value("tp")), usable=float(value("usable")),
    traffic=page_traffic(kind, length=value("length"), mean=value("mean"), sigma=value("sigma"),
                         prompt_share=value("prompt_share"), preset=value("preset"),
                         trace_path=trace_path, trace_bytes=trace_bytes, trace_name=trace_name),
    max_context=int(value("max_context")), block_size=int(value("block")), policy=value("policy"),
    source=value("source"), efficiency=float(value("efficiency")) if value("override") else None,
    tpot_ms=float(value("tpot_ms")), ttft_ms=float(value("ttft_ms")), rate_per_s=float(value("rate")),
    engine_settings=settings)

try:
    outcome = _plan(server_inputs, measured)
except InputError as exc:  # the sizer's refusals, and a refused trace's row or column (field "trace")
    st.error(page_message(exc, PLANNER_LABELS), icon=":material/error:")
    outcome = None
except ValueError as exc:
    st.error(f"{'Trace' if kind == 'trace' else 'Traffic'}: {exc}", icon=":material/error:")
    outcome = None
# Only the open tab is drawn; the edge tab uses the server plan's bandwidth source.
server_tab, edge_tab = page_tabs(state, TABS)

# ---- the answer, then the server view ------------------------------------------------------------
if server_tab.open:
    with server_tab:
        try:
            render_answer(cached_answer(server_inputs.sizing_request(int(value("users"))), settings), key="planner")
        except SizingError as exc:
            st.error(page_message(exc, PLANNER_LABELS), icon=":material/error:")
if server_tab.open and outcome is not None:
    with server_tab:
        render_server(outcome, source_label=SOURCE_LABELS[outcome.estimate.source], weight_dtype=value("w"))

# ---- edge view ----------------------------------------------------------------------------------
if edge_tab.open:
    with edge_tab:
        device = get_gpu(EDGE_DEVICE)
        st.markdown(f"**{device.label}**: {format_number(device.memory_gb)} GB shared by the OS, "
                    f"perception, weights and KV cache; {device.bandwidth_tbs * 1e3:g} GB/s.")
        left, right = st.columns(2)
        with left:
            st.selectbox("Model", PRESET_IDS, key=key("edge_model"), format_func=lambda i: get_preset(i).name)
            st.selectbox("KV precision", PRECISION_NAMES, key=key("edge_kv"), format_func=dtype_label)
            st.selectbox("Weight precision", PRECISION_NAMES, key=key("edge_w"), format_func=dtype_label)
            st.number_input("OS share (GB)", 0.0, 64.0, step=0.5, key=key("os_gb"))
            st.number_input("Perception share (GB)", 0.0, 64.0, step=0.5, key=key("perception_gb"))
        with right:
            st.number_input("Camera tokens per frame (all cameras)", 1, 100_000, key=key("frame_tokens"))
            st.number_input("Frames per second", 0.1, 120.0, step=0.5, key=key("fps"))
            st.number_input("Instruction tokens", 0, 1_000_000, key=key("instruction"))
            st.slider("Control rate (Hz)", 1.0, 50.0, step=0.5, key=key("control_hz"))
        # The server view's source applies here too (its efficiencies are ratios to the datasheet).
        edge_estimate = outcome.estimate if outcome is not None else datasheet_estimate()
        edge_inputs = EdgeInputs(
            model_id=value("edge_model"), kv_dtype=value("edge_kv"), weight_dtype=value("edge_w"),
            os_gb=float(value("os_gb")), perception_gb=float(value("perception_gb")),
            tokens_per_frame=int(value("frame_tokens")), fps=float(value("fps")),
            instruction_tokens=int(value("instruction")), control_hz=float(value("control_hz")))
        try:
            edge, history_curve = _edge(edge_inputs, edge_estimate)
        except ValueError as exc:
            text = page_message(exc, PLANNER_LABELS) if isinstance(exc, InputError) else str(exc)
            st.error(f"Edge view: {text}", icon=":material/error:")
            edge = None
        if edge is not None:
            row = metric_row()
            row.metric("History that fits", f"{edge.history_s:,.1f} s")
            row.metric("Decode step at that context", fmt_ms(None if edge.step is None else edge.step.step_s))
            row.metric("Control-step budget", fmt_ms(edge.workload.control_step_s))
            row.metric("Usable history", f"{edge.usable_history_s:,.1f} s")
            st.markdown(f"**What limits the robot:** {edge.explanation}")
            st.caption(f"KV budget {both(max(edge.kv_budget_bytes, 0))} = {edge.kv_tokens:,} tokens; "
                       f"bandwidth: {edge_estimate.label}.")
            chart(edge_figure(edge, history_curve), key="planner.edge_chart", file_name="edge_history")

state.sync()
copy_link()
render_glossary()

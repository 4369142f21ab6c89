"""Capacity planner page: widgets → PlanRequest → planner.plan (cached) → plotly.

Users served and time per output token for a model on a GPU, contiguous against paged KV, with
the limit that binds said in words; and an edge view for a robot's shared-memory module.
State lives in the URL; values the sizer page left in ``st.session_state`` ("sizer.*") are used
when the URL does not say otherwise.
"""

from __future__ import annotations

import sys
from pathlib import Path

import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

# Standalone `streamlit run pages/4_planner.py` puts pages/ on the path, not the project root.
_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from kernels.bench.records import report_to_json
from kernels.bench.live import merge_reports
from ui.router import run_through_router
from ui.url_state import UrlState
from planner.bandwidth import (
    SOURCES_IN_ORDER,
    BandwidthEstimate,
    BenchJsonError,
    datasheet_estimate,
    load_bench_json,
)
from planner.edge import EdgeWorkload
from sizing.errors import SizingError
from hardware.gpus import DEFAULT_GPU, GPU_IDS, get_gpu
from sizing.precisions import PRECISION_NAMES, get_precision
from sizing.presets import DEFAULT_PRESET, PRESET_IDS, get_preset
from planner.plan import (
    DEFAULT_MAX_CONTEXT,
    PlanRequest,
    TrafficSpec,
    run_edge_plan,
    run_plan,
)
from units import GB, both, format_bytes, format_number

TRACES_DIR = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "traces"
TP_CHOICES = (1, 2, 4, 8, 16, 32, 64)  # tensor-parallel groups come in powers of two
BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
TRAFFIC_KINDS = ("lognormal", "fixed", "preset", "trace")
TRAFFIC_LABELS = {"lognormal": "Log-normal lengths", "fixed": "Every request the same length",
                  "preset": "Published dataset", "trace": "Real trace (CSV)"}
SIM_PRESETS = ("ShareGPT", "Alpaca", "Reference page, problem 4")
SOURCE_LABELS = {"measured": "Harness run on this GPU", "h200-results": "Shipped H200 results",
                 "datasheet": "Datasheet"}
# Session-state keys of a harness run on this GPU: a JSON text (the uploader below, or any page
# that sets it) and the live-kernels page's list of this session's BenchReports.
BENCH_STATE_KEY = "kernels.bench_json"
KERNELS_RUNS_KEY = "kernels_session_runs"
EDGE_DEVICE = "jetson-agx-orin-64gb"
MAX_UPLOAD_BYTES = 5_000_000  # a trace or harness file larger than this is refused, not parsed


# ---- cached library calls ---------------------------------------------------------------------
@st.cache_data(show_spinner=False, max_entries=64)
def _plan(model_id: str, kv_dtype: str, weight_dtype: str, gpu_id: str, tp: int, usable: float,
          traffic: TrafficSpec, max_context: int, block_size: int, policy: str, source: str,
          efficiency: float | None, tpot_ms: float, ttft_ms: float, rate: float,
          measured_text: str | None):
    measured = None if measured_text is None else load_bench_json(measured_text)
    request = PlanRequest(
        model=get_preset(model_id).shape,
        kv_precision=get_precision(kv_dtype, field="kv_dtype"),
        weight_precision=get_precision(weight_dtype, field="weight_dtype"),
        gpu=get_gpu(gpu_id), tp=tp, usable_fraction=usable, traffic=traffic,
        max_context=max_context, block_size=block_size, policy=policy, bandwidth_source=source,
        efficiency=efficiency, tpot_target_s=tpot_ms / 1e3 if tpot_ms > 0 else None,
        ttft_target_s=ttft_ms / 1e3 if ttft_ms > 0 else None,
        arrival_rate_per_s=rate if rate > 0 else None,
    )
    return run_plan(request, measured=measured)


@st.cache_data(show_spinner=False, max_entries=64)
def _edge(model_id: str, kv_dtype: str, weight_dtype: str, os_gb: float, perception_gb: float,
          tokens_per_frame: int, fps: float, instruction_tokens: int, control_hz: float,
          estimate: BandwidthEstimate):
    workload = EdgeWorkload(os_bytes=os_gb * GB, perception_bytes=perception_gb * GB,
                            tokens_per_frame=tokens_per_frame, frames_per_s=fps,
                            instruction_tokens=instruction_tokens,
                            control_step_s=1.0 / control_hz)
    return run_edge_plan(model=get_preset(model_id).shape,
                         kv_precision=get_precision(kv_dtype, field="kv_dtype"),
                         weight_precision=get_precision(weight_dtype, field="weight_dtype"),
                         device=get_gpu(EDGE_DEVICE), workload=workload, estimate=estimate)


@st.cache_data(show_spinner=False, max_entries=8)
def _bench_json_error(text: str) -> str | None:
    """Why a harness JSON cannot be used, or None; cached so a rerun does not parse it again."""
    try:
        load_bench_json(text)
    except BenchJsonError as exc:
        return str(exc)
    return None


# ---- state: URL first, then the sizer page's carry-over, then defaults -------------------------
url = UrlState()


def _init(key: str, url_name: str, default, cast=str, choices=None, carry: str | None = None):
    """Seed widget ``key`` once per session: from the URL, else ``st.session_state[carry]``."""
    from_url = url.get(url_name, default, cast, choices)
    if key in st.session_state:
        return
    value = from_url
    if url_name not in st.query_params and carry is not None and carry in st.session_state:
        carried = st.session_state[carry]
        try:
            carried = cast(carried) if cast is not bool else bool(carried)
        except (TypeError, ValueError):
            carried = None
        if carried is not None and (choices is None or carried in choices):
            value = carried
    st.session_state[key] = value


def _p(name: str):
    return st.session_state[f"planner.{name}"]


run_through_router()  # a deep link to /planner as the first request still gets app.py's router
st.title(":material/speed: Capacity planner")
st.caption("How many users this hardware serves and at what time per output token, with "
           "contiguous KV reservation and with paging: the sizer, the fragmentation snapshot "
           "and the measured kernels joined. Every figure comes from `sizing/` and `simulation/`.")

_init("planner.model", "model", DEFAULT_PRESET, str, PRESET_IDS, carry="sizer.model_id")
_init("planner.kv", "kv", "fp8", str, PRECISION_NAMES, carry="sizer.kv_dtype")
_init("planner.w", "w", "fp8", str, PRECISION_NAMES, carry="sizer.weight_dtype")
_init("planner.gpu", "gpu", DEFAULT_GPU, str, GPU_IDS, carry="sizer.gpu_id")
_init("planner.tp", "tp", 8, int, TP_CHOICES, carry="sizer.tp")
_init("planner.usable", "usable", 0.9, float)
_init("planner.traffic", "traffic", "lognormal", str, TRAFFIC_KINDS)
_init("planner.length", "length", 2048, int)
_init("planner.mean", "mean", 2048, int)
_init("planner.sigma", "sigma", 0.8, float)
_init("planner.prompt_share", "prompt", 0.5, float)
_init("planner.preset", "preset", SIM_PRESETS[0], str, SIM_PRESETS)
_init("planner.trace", "trace", "splitwise_conv.csv", str)
_init("planner.max_context", "maxctx", DEFAULT_MAX_CONTEXT, int, carry="sizer.context")
_init("planner.block", "block", 16, int, BLOCK_SIZES)
_init("planner.policy", "policy", "max", str, ("max", "pow2", "oracle"))
_init("planner.tpot_ms", "tpot", 50, int)
_init("planner.ttft_ms", "ttft", 0, int)
_init("planner.rate", "rate", 0.0, float)
_init("planner.source", "source", "measured", str, SOURCES_IN_ORDER)
_init("planner.override", "override", False, bool)
_init("planner.efficiency", "eff", 0.85, float)
_init("planner.os_gb", "os", 8.0, float)
_init("planner.perception_gb", "perc", 8.0, float)
_init("planner.edge_model", "emodel", "llama-3.1-8b", str, PRESET_IDS)
_init("planner.edge_kv", "ekv", "bf16", str, PRECISION_NAMES)
_init("planner.edge_w", "ew", "bf16", str, PRECISION_NAMES)
_init("planner.frame_tokens", "ftok", 256, int)
_init("planner.fps", "fps", 2.0, float)
_init("planner.instruction", "instr", 512, int)
_init("planner.control_hz", "hz", 5.0, float)

# ---- widgets ------------------------------------------------------------------------------------
with st.sidebar:
    st.subheader(":material/memory: Model and hardware")
    st.selectbox("Model", PRESET_IDS, key="planner.model",
                 format_func=lambda i: get_preset(i).name)
    st.selectbox("KV precision", PRECISION_NAMES, key="planner.kv")
    st.selectbox("Weight precision", PRECISION_NAMES, key="planner.w")
    st.selectbox("GPU", GPU_IDS, key="planner.gpu", format_func=lambda i: get_gpu(i).label)
    st.select_slider("Tensor parallelism (GPUs per replica)", TP_CHOICES, key="planner.tp")
    st.slider("Usable share of GPU memory", 0.5, 1.0, step=0.01, key="planner.usable")
    st.subheader(":material/tune: Bandwidth source")
    st.radio("Preferred source", SOURCES_IN_ORDER, key="planner.source",
             format_func=SOURCE_LABELS.get,
             help="The first available source down this list is used and labelled.")
    uploaded_bench = st.file_uploader("Harness JSON (`python -m kernels.bench --json`)",
                                      type=["json"], key="planner.bench_upload")
    st.checkbox("Override bandwidth efficiency", key="planner.override")
    st.slider("Bandwidth efficiency", 0.1, 1.0, step=0.01, key="planner.efficiency",
              disabled=not _p("override"))

traffic_col, allocator_col, target_col = st.columns(3)
with traffic_col:
    st.subheader(":material/timeline: Traffic")
    st.selectbox("Request lengths", TRAFFIC_KINDS, key="planner.traffic",
                 format_func=TRAFFIC_LABELS.get)
    kind = _p("traffic")
    trace_bytes, trace_name, trace_path = None, "uploaded trace", None
    if kind == "fixed":
        st.number_input("Tokens per request", 2, 1_000_000, key="planner.length")
    elif kind == "lognormal":
        st.number_input("Mean tokens per request", 2, 1_000_000, key="planner.mean")
        st.slider("Sigma (log-space spread)", 0.0, 2.0, step=0.05, key="planner.sigma")
        st.slider("Prompt share of each request", 0.0, 1.0, step=0.05, key="planner.prompt_share")
    elif kind == "preset":
        st.selectbox("Dataset", SIM_PRESETS, key="planner.preset")
    else:
        shipped = sorted(p.name for p in TRACES_DIR.glob("*.csv")) if TRACES_DIR.is_dir() else []
        if shipped:
            if _p("trace") not in shipped:
                st.session_state["planner.trace"] = shipped[0]
            st.selectbox("Trace", shipped, key="planner.trace")
            trace_path = str(TRACES_DIR / _p("trace"))
        upload = st.file_uploader("…or upload a CSV (prompt and output token columns)",
                                  type=["csv"], key="planner.trace_upload")
        if upload is not None:
            if upload.size > MAX_UPLOAD_BYTES:
                st.error(f"Trace: {upload.name} is over {MAX_UPLOAD_BYTES / 1e6:g} MB; "
                         "sample it first. Using the shipped trace.")
            else:
                trace_bytes, trace_name = upload.getvalue(), upload.name
    st.number_input("Arrival rate (requests/s, 0: none)", 0.0, 1e6, step=1.0, key="planner.rate")
with allocator_col:
    st.subheader(":material/view_module: Allocator")
    st.selectbox("Contiguous policy", ("max", "pow2", "oracle"), key="planner.policy",
                 format_func={"max": "Orca-Max (reserve the maximum)",
                              "pow2": "Orca-Pow2 (≤ 2 × output)",
                              "oracle": "Orca-Oracle (exact, unrealisable)"}.get)
    st.number_input("Maximum context (tokens)", 2, 10_000_000, key="planner.max_context")
    st.select_slider("Paged block size (tokens)", BLOCK_SIZES, key="planner.block")
with target_col:
    st.subheader(":material/timer: Targets")
    st.slider("TPOT target (ms, 0: none)", 0, 500, step=5, key="planner.tpot_ms")
    st.slider("TTFT target (ms, 0: none)", 0, 10_000, step=50, key="planner.ttft_ms")

url.write({
    "model": _p("model"), "kv": _p("kv"), "w": _p("w"), "gpu": _p("gpu"), "tp": _p("tp"),
    "usable": _p("usable"), "traffic": kind, "length": _p("length"), "mean": _p("mean"),
    "sigma": _p("sigma"), "prompt": _p("prompt_share"), "preset": _p("preset"),
    "trace": _p("trace"), "maxctx": _p("max_context"), "block": _p("block"),
    "policy": _p("policy"), "tpot": _p("tpot_ms"), "ttft": _p("ttft_ms"), "rate": _p("rate"),
    "source": _p("source"), "override": _p("override"), "eff": _p("efficiency"),
    "os": _p("os_gb"), "perc": _p("perception_gb"), "emodel": _p("edge_model"),
    "ekv": _p("edge_kv"), "ew": _p("edge_w"), "ftok": _p("frame_tokens"), "fps": _p("fps"),
    "instr": _p("instruction"), "hz": _p("control_hz"),
})

# A harness run on this GPU: uploaded here, or this session's runs on the live-kernels page.
if uploaded_bench is not None:
    if uploaded_bench.size > MAX_UPLOAD_BYTES:
        st.sidebar.error("Harness JSON: file too large; ignored.")
    else:
        st.session_state[BENCH_STATE_KEY] = uploaded_bench.getvalue().decode("utf-8", "replace")
measured_text = st.session_state.get(BENCH_STATE_KEY)
if measured_text is None and st.session_state.get(KERNELS_RUNS_KEY):
    measured_text = report_to_json(merge_reports(st.session_state[KERNELS_RUNS_KEY]))
if measured_text is not None:
    bench_error = _bench_json_error(measured_text)
    if bench_error is not None:
        st.sidebar.error(f"Harness JSON: {bench_error}. Falling back to the next source.",
                         icon=":material/error:")
        measured_text = None


def _fmt_ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1e3:,.1f} ms"


server_tab, edge_tab = st.tabs([":material/dns: Server", ":material/precision_manufacturing: Edge (robot)"])

# ---- server view --------------------------------------------------------------------------------
with server_tab:
    traffic = TrafficSpec(kind=kind, length=int(_p("length")), mean=float(_p("mean")),
                          sigma=float(_p("sigma")), prompt_fraction=float(_p("prompt_share")),
                          preset=_p("preset"), trace_path=trace_path, trace_bytes=trace_bytes,
                          trace_name=trace_name)
    try:
        outcome = _plan(_p("model"), _p("kv"), _p("w"), _p("gpu"), int(_p("tp")),
                        float(_p("usable")), traffic, int(_p("max_context")), int(_p("block")),
                        _p("policy"), _p("source"),
                        float(_p("efficiency")) if _p("override") else None,
                        float(_p("tpot_ms")), float(_p("ttft_ms")), float(_p("rate")),
                        measured_text)
    except SizingError as exc:
        st.error(f"{exc.field}: {exc.message}", icon=":material/error:")
        outcome = None
    except ValueError as exc:  # a trace the simulator refuses names its row or column
        field = "Trace" if kind == "trace" else "Traffic"
        st.error(f"{field}: {exc}", icon=":material/error:")
        outcome = None

    if outcome is not None:
        plan = outcome.plan
        st.info(f"**Bandwidth source: {SOURCE_LABELS[outcome.estimate.source]}.** "
                f"{outcome.estimate.label}." + (
                    " Skipped: " + "; ".join(outcome.source_notes) + "." if outcome.source_notes
                    else ""), icon=":material/info:")
        paged, contiguous = plan.paged, plan.contiguous
        cols = st.columns(4)
        cols[0].metric("Users per GPU, paged", format_number(paged.users_per_gpu, 1),
                       help="Concurrent sequences at the operating point ÷ TP")
        cols[1].metric("Users per GPU, contiguous", format_number(contiguous.users_per_gpu, 1))
        cols[2].metric("Tokens/s per GPU, paged", format_number(paged.tokens_per_s_per_gpu, 0))
        cols[3].metric("Paging's throughput gain",
                       "—" if plan.paged_gain is None else f"{plan.paged_gain:.2f}×")
        cols = st.columns(4)
        cols[0].metric("Users per node, paged", format_number(paged.users_per_node, 0))
        cols[1].metric("TPOT at the paged batch", _fmt_ms(None if paged.step is None
                                                         else paged.step.step_s))
        cols[2].metric("Time to first token", _fmt_ms(plan.ttft_s))
        cols[3].metric("KV budget per GPU",
                       format_bytes(max(plan.kv_budget_bytes_per_gpu, 0), largest="GiB"),
                       help=both(max(plan.kv_budget_bytes_per_gpu, 0)))

        st.markdown(f"**What limits paging:** {paged.explanation}")
        st.markdown(f"**What limits contiguous allocation:** {contiguous.explanation}")
        st.markdown(f"**The paper's 2–4×:** {plan.paper_check()}")
        if plan.ttft_target_s is not None and plan.ttft_s > plan.ttft_target_s:
            st.warning(f"TTFT: prefill of the mean prompt takes {_fmt_ms(plan.ttft_s)}, over the "
                       f"{_fmt_ms(plan.ttft_target_s)} target.", icon=":material/warning:")
        if plan.gpus_needed is not None:
            st.markdown(f"**Arrival rate {plan.arrival_rate_per_s:g}/s** needs "
                        f"{plan.required_concurrency:,.0f} sequences in flight (Little's law): "
                        f"{plan.replicas_needed} paged replica(s) = {plan.gpus_needed} GPUs.")
        if outcome.fits.clipped:
            st.caption(f"{outcome.fits.clipped:,} requests were cut to the maximum context.")

        figure = make_subplots(rows=1, cols=2, subplot_titles=(
            "Throughput per GPU against batch", "Time per output token against batch"))
        batches = [p.batch for p in plan.curve]
        figure.add_trace(go.Scatter(x=batches, y=[p.tokens_per_s_per_gpu for p in plan.curve],
                                    mode="lines+markers", name="tokens/s per GPU"), row=1, col=1)
        figure.add_trace(go.Scatter(x=batches, y=[p.tpot_s * 1e3 for p in plan.curve],
                                    mode="lines+markers", name="TPOT (ms)"), row=1, col=2)
        for allocator, colour in ((contiguous, "#f5a623"), (paged, "#d0021b")):
            if allocator.batch >= 1:
                for col in (1, 2):
                    figure.add_vline(x=allocator.batch, line_dash="dot", line_color=colour,
                                     row=1, col=col)
                figure.add_trace(go.Scatter(
                    x=[allocator.batch], y=[allocator.tokens_per_s_per_gpu], mode="markers",
                    marker=dict(size=12, color=colour), name=allocator.fit.label), row=1, col=1)
        if plan.tpot_target_s is not None:
            figure.add_hline(y=plan.tpot_target_s * 1e3, line_dash="dash", line_color="red",
                             row=1, col=2)
        figure.update_xaxes(type="log", title_text="batch (sequences)")
        figure.update_yaxes(title_text="tokens/s per GPU", row=1, col=1)
        figure.update_yaxes(title_text="ms", row=1, col=2)
        figure.update_layout(height=420, legend=dict(orientation="h", y=-0.25))
        st.plotly_chart(figure, key="planner.chart")

        st.dataframe([
            {"allocator": a.fit.label, "sequences that fit": a.memory_batch,
             "KV utilisation": f"{a.fit.utilisation:.1%}", "operating batch": a.batch,
             "TPOT": _fmt_ms(None if a.step is None else a.step.step_s),
             "tokens/s per GPU": round(a.tokens_per_s_per_gpu),
             "users per GPU": round(a.users_per_gpu, 1), "users per node": round(a.users_per_node),
             "binding limit": a.binding_limit}
            for a in (contiguous, paged)
        ], hide_index=True, key="planner.table")
        st.caption(f"Traffic: {outcome.traffic_label}; mean {plan.context:,.0f} tokens per "
                   "request, counted at full length (so the step time is an upper bound). "
                   "Decode step = max(bytes read ÷ bandwidth, FLOPs ÷ matmul rate).")

# ---- edge view ----------------------------------------------------------------------------------
with edge_tab:
    device = get_gpu(EDGE_DEVICE)
    st.markdown(f"**{device.label}**: {format_number(device.memory_gb)} GB shared by the OS, "
                f"perception, weights and KV cache; {device.bandwidth_tbs * 1e3:g} GB/s.")
    left, right = st.columns(2)
    with left:
        st.selectbox("Model", PRESET_IDS, key="planner.edge_model",
                     format_func=lambda i: get_preset(i).name)
        st.selectbox("KV precision", PRECISION_NAMES, key="planner.edge_kv")
        st.selectbox("Weight precision", PRECISION_NAMES, key="planner.edge_w")
        st.number_input("OS share (GB)", 0.0, 64.0, step=0.5, key="planner.os_gb")
        st.number_input("Perception share (GB)", 0.0, 64.0, step=0.5, key="planner.perception_gb")
    with right:
        st.number_input("Camera tokens per frame (all cameras)", 1, 100_000,
                        key="planner.frame_tokens")
        st.number_input("Frames per second", 0.1, 120.0, step=0.5, key="planner.fps")
        st.number_input("Instruction tokens", 0, 1_000_000, key="planner.instruction")
        st.slider("Control rate (Hz)", 1.0, 50.0, step=0.5, key="planner.control_hz")
    # The server view's source applies here too (its efficiencies are ratios to the datasheet).
    edge_estimate = outcome.estimate if outcome is not None else datasheet_estimate()
    try:
        edge, history_curve = _edge(_p("edge_model"), _p("edge_kv"), _p("edge_w"),
                                    float(_p("os_gb")), float(_p("perception_gb")),
                                    int(_p("frame_tokens")), float(_p("fps")),
                                    int(_p("instruction")), float(_p("control_hz")),
                                    edge_estimate)
    except (SizingError, ValueError) as exc:
        st.error(f"Edge view: {exc}", icon=":material/error:")
        edge = None
    if edge is not None:
        cols = st.columns(4)
        cols[0].metric("History that fits", f"{edge.history_s:,.1f} s")
        cols[1].metric("Decode step at that context", _fmt_ms(None if edge.step is None
                                                              else edge.step.step_s))
        cols[2].metric("Control-step budget", _fmt_ms(edge.workload.control_step_s))
        cols[3].metric("Usable history", f"{edge.usable_history_s:,.1f} s")
        st.markdown(f"**What limits the robot:** {edge.explanation}")
        st.caption(f"KV budget {both(max(edge.kv_budget_bytes, 0))} = {edge.kv_tokens:,} tokens; "
                   f"bandwidth: {edge_estimate.label}.")
        edge_figure = go.Figure()
        edge_figure.add_trace(go.Scatter(x=[p.history_s for p in history_curve],
                                         y=[p.step_s * 1e3 for p in history_curve],
                                         mode="lines", name="decode step (ms)"))
        edge_figure.add_hline(y=edge.workload.control_step_s * 1e3, line_dash="dash",
                              line_color="red", annotation_text="control-step budget")
        edge_figure.add_vline(x=edge.history_s, line_dash="dot", line_color="#4a90e2",
                              annotation_text="memory limit")
        edge_figure.update_layout(height=380, xaxis_title="seconds of camera history",
                                  yaxis_title="decode step (ms)")
        st.plotly_chart(edge_figure, key="planner.edge_chart")

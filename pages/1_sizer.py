"""KV-cache sizer page: model shape, precisions, context, users, GPU → bytes and GPUs needed.

Thin by design: widgets (each URL-backed control declared once in :data:`FIELDS`) →
:class:`sizing.report.SizingRequest` → :func:`size_deployment` (cached) → :mod:`ui.sizer_view`.
An input the library refuses is reported next to its widget while the last valid results stay
on screen, so a typo never blanks the page.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import streamlit as st

from hardware.gpus import CUSTOM_BANDWIDTH_TBS, CUSTOM_MEMORY_GB, DEFAULT_GPU, GPU, GPU_IDS, custom_gpu, get_gpu
from inputs.errors import InputError
from sizing import fields as F
from sizing.models import ModelShape
from sizing.precisions import PRECISION_NAMES, WEIGHT_FORMAT_NAMES, get_precision
from sizing.presets import DEFAULT_PRESET
from sizing.report import SizingReport, SizingRequest, size_deployment
from sizing.weights import AUTO
from sizing.answer import EngineSettings
from ui.answer_view import cached_answer, render_answer, render_answer_strip
from ui.engine_view import ENGINE_FIELDS, engine_controls, engine_settings, render_engine
from ui.handoff import publish, with_engine
from ui.layout import stacking, sticky
from ui.model_picker import MODEL_FIELDS, model_controls, model_name, show_error
from ui.router import run_through_router
from ui.sizer_view import CHART_TABS, render_links, render_report
from ui.url_state import ChoiceField, FlagField, NumberField, PageState, copy_link
from units import UnitSystem

WEIGHT_CHOICES = (*WEIGHT_FORMAT_NAMES, AUTO)  # auto: the model's own format (and the Hub's safetensors total)
TP_CHOICES = (1, 2, 4, 8, 16, 32, 64)
BLOCK_CHOICES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
GROUP_CHOICES = (32, 64, 128, 256)
UNIT_SYSTEMS = {"GiB (binary)": UnitSystem.BINARY, "GB (decimal)": UnitSystem.DECIMAL}
GPU_CHOICES = (*GPU_IDS, "custom")
LAST_VALID = "sizer.last_valid_request"  # the request behind the results on screen
LAST_SETTINGS = "sizer.last_valid_engine_settings"

FIELDS = (
    *MODEL_FIELDS,
    ChoiceField("kv", "kv_dtype", "bf16", PRECISION_NAMES),
    ChoiceField("w", "weight_dtype", "fp8", WEIGHT_CHOICES),
    FlagField("scales", "scales", True),
    ChoiceField("group", "group", 128, GROUP_CHOICES),
    NumberField("ctx", "context", 32_768, F.CONTEXT),
    NumberField("users", "users", 100, F.USERS),
    ChoiceField("gpu", "gpu", DEFAULT_GPU, GPU_CHOICES),
    NumberField("mem", "custom_mem", 80.0, CUSTOM_MEMORY_GB),
    NumberField("bw", "custom_bw", 3.35, CUSTOM_BANDWIDTH_TBS),
    NumberField("usable", "usable", 0.90, F.USABLE_FRACTION),
    ChoiceField("tp", "tp", 8, TP_CHOICES),
    NumberField("ngpu", "n_gpus", 8, F.N_GPUS),
    ChoiceField("block", "block_size", 16, BLOCK_CHOICES),
    ChoiceField("units", "units", "GiB (binary)", tuple(UNIT_SYSTEMS)),
    *ENGINE_FIELDS,
    CHART_TABS,
)
DEFAULTS = {field.key: field.default for field in FIELDS}


@st.cache_data(show_spinner=False, max_entries=256)
def cached_report(request: SizingRequest) -> SizingReport:
    return size_deployment(request)


def build_request(model: ModelShape | str, gpu: GPU | str, v: Mapping[str, Any],
                  source: str | None = None) -> SizingRequest:
    """The library's request from the controls' values ``v``; numbers checked against their bounds."""
    group = v["group"] if v["scales"] else None
    return SizingRequest(
        model_source=source,
        model=model, kv_dtype=v["kv_dtype"], weight_dtype=v["weight_dtype"],
        kv_group_size=group, weight_group_size=group,
        context=F.CONTEXT.check(v["context"]), users=F.USERS.check(v["users"]), gpu=gpu,
        usable_fraction=F.USABLE_FRACTION.check(v["usable"]), tp=v["tp"], n_gpus=F.N_GPUS.check(v["n_gpus"]),
        block_size=v["block_size"],
    )


def last_valid() -> SizingRequest:
    """The request of the results last shown; the page's defaults before any."""
    return st.session_state.get(LAST_VALID) or build_request(DEFAULT_PRESET, DEFAULT_GPU, DEFAULTS)


def precision_controls(state: PageState) -> None:
    st.subheader("Precision")
    c1, c2 = st.columns(2)
    c1.selectbox("KV precision", PRECISION_NAMES, key=state.key("kv_dtype"),
                 format_func=lambda n: get_precision(n).label)
    c2.selectbox("Weight precision", WEIGHT_CHOICES, key=state.key("weight_dtype"),
                 format_func=lambda n: "The model's own" if n == AUTO else get_precision(n, field="weight_dtype").label,
                 help="The model's own: its quantization_config's format, and a Hub model's safetensors total.")
    st.toggle("Count scale bytes for int8/4-bit/2-bit (one FP16 scale per group)", key=state.key("scales"))
    st.select_slider("Scale group size (values)", GROUP_CHOICES, key=state.key("group"),
                     disabled=not state.value("scales"))


def workload_controls(state: PageState) -> Any:
    st.subheader("Workload")
    c1, c2 = st.columns(2)
    c1.number_input("Context (tokens)", step=1024, key=state.key("context"))
    c2.number_input("Users (concurrent)", step=10, key=state.key("users"))
    return st.empty()  # where an error in context or users is shown


def snap_usable(key: str) -> None:
    """Keep the slider's value on its 0.01 grid, so links read ``usable=0.8``, not 0.7999…"""
    st.session_state[key] = F.on_usable_grid(st.session_state[key])


def gpu_controls(state: PageState) -> GPU | str | None:
    """The GPU chosen (a catalogue id or a custom device); None when the custom figures are refused."""
    gpu_id = st.selectbox("GPU", GPU_CHOICES, key=state.key("gpu"),
                          format_func=lambda g: "Custom…" if g == "custom" else get_gpu(g).label)
    if gpu_id != "custom":
        if get_gpu(gpu_id).shared_memory:
            st.caption(f"{get_gpu(gpu_id).name}: memory is shared with the CPU; the usable share must also "
                       "leave room for the OS and other processes.")
        return gpu_id
    c1, c2 = st.columns(2)
    c1.number_input("Memory (GB)", key=state.key("custom_mem"))
    c2.number_input("Bandwidth (TB/s)", key=state.key("custom_bw"))
    try:
        return custom_gpu(state.value("custom_mem"), bandwidth_tbs=state.value("custom_bw"))
    except InputError as exc:
        show_error(st, exc)
        return None


def hardware_controls(state: PageState) -> tuple[GPU | str | None, Any]:
    st.subheader("Hardware")
    gpu = gpu_controls(state)
    usable_key = state.key("usable")
    st.slider("Usable fraction of memory", F.USABLE_FRACTION.low, F.USABLE_FRACTION.high, step=F.USABLE_STEP,
              key=usable_key, on_change=snap_usable, args=(usable_key,))
    c1, c2 = st.columns(2)
    c1.selectbox("Tensor parallel (TP)", TP_CHOICES, key=state.key("tp"))
    c2.number_input("GPUs deployed", step=state.value("tp"), key=state.key("n_gpus"),
                    help="For the KV budget and the reverse questions; whole TP groups.")
    slot = st.empty()  # where an error in usable, TP or GPUs deployed is shown
    c1, c2 = st.columns(2)
    c1.selectbox("Block size (tokens)", BLOCK_CHOICES, key=state.key("block_size"))
    c2.radio("Units", tuple(UNIT_SYSTEMS), key=state.key("units"))
    return gpu, slot


# ---- the page ---------------------------------------------------------------------------------
run_through_router()
st.title(":material/calculate: KV-cache sizer")
st.caption(
    "KV bytes = 2 × layers × KV heads × head dim × bytes per value × tokens × users. "
    "KV heads, never query heads; GB (10⁹) and GiB (2³⁰) labelled, never mixed."
)
state = PageState("sizer", FIELDS)
state.seed()
for notice in state.notices:
    st.info(notice, icon=":material/link_off:")
# Where the columns stack, the answer block lies below every control: this line stays in view.
strip = sticky("answer")
controls, results = stacking("sizer").columns([1, 2.3], gap="large")  # stacked below 1,100 px

with controls:
    choice = model_controls(state, model_name(last_valid().model))
    precision_controls(state)
    workload_slot = workload_controls(state)
    gpu, hardware_slot = hardware_controls(state)
    engine_controls(state)
state.sync()

# Each field the library may refuse, and the slot beside its widget.
slots = {"context": workload_slot, "users": workload_slot}
values = {field.key: state.value(field.key) for field in FIELDS}
request: SizingRequest | None = None
if choice.model is not None and gpu is not None:
    try:
        request = build_request(choice.model, gpu, values, choice.source)
        report = cached_report(request)
    except InputError as exc:
        show_error(slots.get(exc.field, hardware_slot), exc)
        request = None
if request is None:
    report = cached_report(last_valid())
try:
    settings = engine_settings(state, report.tp)
    st.session_state[LAST_SETTINGS] = settings
except InputError as exc:
    if not state.value("engine_mode"):  # engine mode shows it beside its own controls
        show_error(st, exc)
    settings = st.session_state.get(LAST_SETTINGS) or EngineSettings()
answer = cached_answer(request or last_valid(), settings)
handoff = with_engine(report.handoff, settings)
if request is not None:
    st.session_state[LAST_VALID] = request
    publish(handoff)

render_answer_strip(answer, strip, stale=request is None)
with results:
    copy_link(results)  # the page has no sidebar: the link sits above the answer
    if request is None:
        st.caption(":material/history: Showing the last valid results; correct the input marked in red "
                   "to update them.")
    render_answer(answer, key="sizer")
    render_report(report, UNIT_SYSTEMS[state.value("units")], state)
    render_engine(request or last_valid(), report, state)
    render_links(handoff)

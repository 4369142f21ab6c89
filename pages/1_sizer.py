"""KV-cache sizer page: model shape, precisions, context, users, GPU → bytes and GPUs needed.

Thin by design: widgets → :class:`sizing.report.SizingRequest` → :func:`size_deployment`
(cached) → render. Every figure shown comes from the report.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st
from streamlit.errors import StreamlitAPIException

from ui import sizer_charts as charts
from ui.router import run_through_router
from ui.url_state import UrlState
from sizing.errors import SizingError
from hardware.gpus import DEFAULT_GPU, GPU_IDS, custom_gpu, get_gpu
from sizing.hf_config import MAX_CONFIG_BYTES, parse_hf_config
from sizing.models import ModelShape
from sizing.precisions import PRECISION_NAMES, get_precision
from sizing.presets import DEFAULT_PRESET, PRESET_IDS, get_preset
from sizing.report import SizingReport, SizingRequest, size_deployment
# Amounts stop at GiB / GB as the reference page writes them (8,000 GiB, not 7.8 TiB).
from units import GIGA_UNIT, UnitSystem, to_unit
from units import format_up_to_giga as fmt

MODEL_SOURCES = ("Preset", "Manual", "config.json")
TP_CHOICES = (1, 2, 4, 8, 16, 32, 64)
BLOCK_CHOICES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
GROUP_CHOICES = (32, 64, 128, 256)
UNIT_CHOICES = ("GiB (binary)", "GB (decimal)")


@st.cache_data(show_spinner=False, max_entries=256)
def cached_report(request: SizingRequest) -> SizingReport:
    return size_deployment(request)


@st.cache_data(show_spinner=False, max_entries=32)
def cached_config_shape(data: bytes, params: int | None) -> ModelShape:
    return parse_hf_config(data, params=params)


run_through_router()
st.title(":material/calculate: KV-cache sizer")
st.caption(
    "KV bytes = 2 × layers × KV heads × head dim × bytes per value × tokens × users. "
    "KV heads, never query heads; GB (10⁹) and GiB (2³⁰) labelled, never mixed."
)
url = UrlState()
controls, results = st.columns([1, 2.3], gap="large")

# ---- model ------------------------------------------------------------------------------------
with controls:
    st.subheader("Model")
    source = st.radio("Model source", MODEL_SOURCES, horizontal=True, key="model_source",
                      index=MODEL_SOURCES.index(url.get("src", "Preset", str, MODEL_SOURCES)))
    preset_id = url.get("model", DEFAULT_PRESET, str, PRESET_IDS)
    model: ModelShape | str | None = None
    model_error: SizingError | None = None
    if source == "Preset":
        preset_id = st.selectbox("Preset", PRESET_IDS, index=PRESET_IDS.index(preset_id), key="preset",
                                 format_func=lambda pid: get_preset(pid).name)
        preset = get_preset(preset_id)
        st.caption(f"[config.json]({preset.source}) · {preset.params / 1e9:,.1f} B params "
                   f"({preset.params_source}) {preset.note}")
        model = preset_id
    elif source == "Manual":
        c1, c2 = st.columns(2)
        layers = c1.number_input("Layers", value=url.get("layers", 80, int), step=1, key="layers")
        head_dim = c2.number_input("Head dim", value=url.get("hd", 128, int), step=1, key="head_dim")
        q_heads = c1.number_input("Query heads", value=url.get("qh", 64, int), step=1, key="q_heads")
        kv_heads = c2.number_input("KV heads", value=url.get("kvh", 8, int), step=1, key="kv_heads")
        params_b = c1.number_input("Parameters (billions)", value=url.get("pb", 70.6, float), step=0.1,
                                   key="params_b", format="%.2f")
        window = c2.number_input("Sliding window (0 = none)", value=url.get("win", 0, int), step=1,
                                 key="window", help="Applied to every layer when set.")
        try:
            if params_b <= 0:
                raise SizingError("params", f"must be above 0 billion, got {params_b:g}")
            model = ModelShape(name="Manual", layers=int(layers), q_heads=int(q_heads),
                               kv_heads=int(kv_heads), head_dim=int(head_dim),
                               params=round(params_b * 1e9), sliding_window=int(window) or None)
        except SizingError as exc:
            model_error = exc
    else:
        uploaded = st.file_uploader("config.json", type=["json"], key="config_upload")
        pasted = st.text_area("…or paste it", key="config_text", height=120,
                              placeholder='{"num_hidden_layers": 32, "num_attention_heads": 32, ...}')
        params_b = st.number_input("Parameters (billions, 0 = estimate from the config)", min_value=0.0,
                                   value=0.0, step=0.1, key="config_params_b")
        data = uploaded.getvalue() if uploaded is not None else pasted.encode()
        # The config parser rejects anything larger; say so before reading the file.
        if uploaded is not None and uploaded.size > MAX_CONFIG_BYTES:
            model_error = SizingError("config.json", f"file is {uploaded.size:,} bytes; the limit is 1 MB")
        elif data.strip():
            try:
                model = cached_config_shape(data, round(params_b * 1e9) if params_b > 0 else None)
            except SizingError as exc:
                model_error = exc
        else:
            st.info("Upload or paste a Hugging Face config.json; until then the preset below is used.",
                    icon=":material/info:")
    if model_error is not None:
        st.error(f"**{model_error.field}**: {model_error.message}", icon=":material/error:")
    if model is None:
        # Keep the page working on the last good model; what was typed stays in the widgets.
        model = st.session_state.get("sizer.last_model", DEFAULT_PRESET)
        st.caption("Showing results for the last valid model.")
    else:
        st.session_state["sizer.last_model"] = model

    st.subheader("Precision")
    c1, c2 = st.columns(2)
    kv_dtype = c1.selectbox("KV precision", PRECISION_NAMES, key="kv_dtype",
                            index=PRECISION_NAMES.index(url.get("kv", "bf16", str, PRECISION_NAMES)),
                            format_func=lambda n: get_precision(n).label)
    weight_dtype = c2.selectbox("Weight precision", PRECISION_NAMES, key="weight_dtype",
                                index=PRECISION_NAMES.index(url.get("w", "fp8", str, PRECISION_NAMES)),
                                format_func=lambda n: get_precision(n).label)
    scales = st.toggle("Count scale bytes for int8/4-bit/2-bit (one FP16 scale per group)",
                       value=url.get("scales", True, bool), key="scales")
    group = st.select_slider("Scale group size (values)", GROUP_CHOICES, key="group",
                             value=url.get("group", 128, int, GROUP_CHOICES), disabled=not scales)

    st.subheader("Workload")
    c1, c2 = st.columns(2)
    context = c1.number_input("Context (tokens)", value=url.get("ctx", 32_768, int), step=1024,
                              key="context")
    users = c2.number_input("Users (concurrent)", value=url.get("users", 100, int), step=10, key="users")

    st.subheader("Hardware")
    gpu_choices = (*GPU_IDS, "custom")
    gpu_id = st.selectbox("GPU", gpu_choices, key="gpu",
                          index=gpu_choices.index(url.get("gpu", DEFAULT_GPU, str, gpu_choices)),
                          format_func=lambda g: "Custom…" if g == "custom" else get_gpu(g).label)
    gpu_error: SizingError | None = None
    gpu = gpu_id
    if gpu_id == "custom":
        c1, c2 = st.columns(2)
        memory_gb = c1.number_input("Memory (GB)", value=url.get("mem", 80.0, float), key="custom_mem")
        bandwidth = c2.number_input("Bandwidth (TB/s)", value=url.get("bw", 3.35, float), key="custom_bw")
        try:
            gpu = custom_gpu(float(memory_gb), bandwidth_tbs=float(bandwidth))
        except SizingError as exc:
            gpu_error, gpu = exc, DEFAULT_GPU
            st.error(f"**{exc.field}**: {exc.message}", icon=":material/error:")
    elif get_gpu(gpu_id).shared_memory:
        st.caption(f"{get_gpu(gpu_id).name}: memory is shared with the CPU; the usable share must also "
                   "leave room for the OS and other processes.")
    usable = st.slider("Usable fraction of memory", 0.10, 1.00, value=url.get("usable", 0.90, float),
                       step=0.01, key="usable")
    c1, c2 = st.columns(2)
    tp = c1.selectbox("Tensor parallel (TP)", TP_CHOICES, key="tp",
                      index=TP_CHOICES.index(url.get("tp", 8, int, TP_CHOICES)))
    n_gpus = c2.number_input("GPUs deployed", value=url.get("ngpu", 8, int), step=tp, key="n_gpus",
                             help="For the KV budget and the reverse questions; whole TP groups.")
    c1, c2 = st.columns(2)
    block_size = c1.selectbox("Block size (tokens)", BLOCK_CHOICES, key="block_size",
                              index=BLOCK_CHOICES.index(url.get("block", 16, int, BLOCK_CHOICES)))
    unit_label = c2.radio("Units", UNIT_CHOICES, key="units",
                          index=UNIT_CHOICES.index(url.get("units", UNIT_CHOICES[0], str, UNIT_CHOICES)))

system = UnitSystem.BINARY if unit_label.startswith("GiB") else UnitSystem.DECIMAL
big_unit = GIGA_UNIT[system]

url.write({
    "src": source, "model": preset_id, "kv": kv_dtype, "w": weight_dtype, "scales": scales,
    "group": group, "ctx": context, "users": users, "gpu": gpu_id, "usable": round(usable, 2),
    "tp": tp, "ngpu": n_gpus, "block": block_size, "units": unit_label,
    **({"layers": layers, "hd": head_dim, "qh": q_heads, "kvh": kv_heads, "pb": params_b, "win": window}
       if source == "Manual" else {}),
    **({"mem": memory_gb, "bw": bandwidth} if gpu_id == "custom" else {}),
})

# ---- results ----------------------------------------------------------------------------------
with results:
    try:
        request = SizingRequest(
            model=model, kv_dtype=kv_dtype, weight_dtype=weight_dtype,
            kv_group_size=group if scales else None, weight_group_size=group if scales else None,
            context=int(context), users=int(users), gpu=gpu, usable_fraction=float(usable),
            tp=int(tp), n_gpus=int(n_gpus), block_size=int(block_size),
        )
        report = cached_report(request)
    except SizingError as exc:
        st.error(f"**{exc.field}**: {exc.message}", icon=":material/error:")
        st.stop()

    for warning in report.warnings:
        st.warning(f"**{warning.field}**: {warning.message}", icon=":material/warning:")

    st.markdown(f"**{report.model.name}** · {report.model.attention} · {report.model.layers} layers, "
                f"{report.model.q_heads} query / {report.model.kv_heads} KV heads, head dim "
                f"{report.model.head_dim} · {report.kv_precision.label} KV · {report.gpu.name}")
    m1, m2, m3 = st.columns(3)
    m1.metric("KV per token", fmt(report.per_token_bytes, system))
    m2.metric(f"Per user at {report.context:,}", fmt(report.per_user_bytes, system))
    m3.metric(f"KV, {report.users:,} users", fmt(report.kv_bytes_total, system))
    m4, m5, m6 = st.columns(3)
    m4.metric("Weights", fmt(report.weights_bytes, system))
    m5.metric("Weights + KV", fmt(report.total_bytes, system))
    m6.metric("GPUs needed", f"{report.gpus.count:,}", help=f"total ÷ usable per GPU = {report.gpus.label}")

    st.subheader("The formula, with your numbers")
    st.markdown("\n".join(f"1. {step.text}" for step in report.steps))

    tab_memory, tab_context, tab_users = st.tabs(["Memory vs GPUs", "GPUs vs context", "GPUs vs users"])
    with tab_memory:
        st.plotly_chart(charts.memory_vs_gpus(report.charts.memory_vs_gpus, big_unit),
                        key="chart_memory")
    with tab_context:
        st.plotly_chart(charts.gpus_curves(report.charts.gpus_vs_context, "Context (tokens)", True),
                        key="chart_context")
    with tab_users:
        st.plotly_chart(charts.gpus_curves(report.charts.gpus_vs_users, "Users", True), key="chart_users")

    gqa = report.without_gqa
    st.subheader("Without grouped-query attention")
    g1, g2, g3 = st.columns(3)
    g1.metric("KV per token, one KV head per query head", fmt(gqa.per_token_bytes, system))
    g2.metric(f"KV, {report.users:,} users", fmt(gqa.kv_bytes_total, system))
    g3.metric("GPUs needed", f"{gqa.gpus.count:,}", delta=f"{gqa.factor:,.1f}× the KV bytes",
              delta_color="off")

    st.subheader("Deployment plan")
    plan = report.plan
    st.markdown(plan.summary)
    st.markdown(
        f"At TP {report.tp}: {report.kv_heads_per_gpu} KV head(s) per GPU"
        + (f", each head replicated {report.kv_replication}×" if report.kv_replication > 1 else "")
        + f"; KV per token per GPU **{fmt(report.per_gpu_kv_bytes_per_token, system)}**; "
        f"KV for all users over the group's ranks **{fmt(report.kv_bytes_total_all_gpus, system)}**."
    )
    options = pd.DataFrame([
        {"TP": o.tp, "KV heads / GPU": o.kv_heads_per_gpu, "replication": o.kv_replication,
         f"weights / GPU ({big_unit})": round(to_unit(o.weights_per_gpu_bytes, big_unit), 1),
         "users / replica": o.users_per_replica, "replicas": o.replicas, "GPUs": o.gpus,
         "spans nodes": o.spans_nodes}
        for o in plan.options
    ])
    st.dataframe(options, hide_index=True, key="plan_table")

    st.subheader(f"On {report.n_gpus} × {report.gpu.name}")
    cap = report.capacity
    r1, r2, r3, r4 = st.columns(4)
    r1.metric("KV budget", fmt(report.kv_budget_bytes, system))
    r2.metric(f"Most users at {report.context:,} tokens", f"{report.max_users:,}")
    r3.metric(f"Longest context for {report.users:,} users",
              "unbounded" if report.max_context is None else f"{report.max_context:,}")
    r4.metric("KV capacity (whole blocks)", f"{cap.tokens:,} tokens",
              help=f"{cap.blocks:,} blocks of {cap.block_size} tokens; maximum concurrency at "
                   f"{cap.context:,} tokens: {cap.max_concurrency:,.2f}×")

    st.subheader("KV precision × GPU")
    table = pd.DataFrame(report.table_records())
    st.dataframe(table, hide_index=True, key="reference_table")
    st.download_button("Download CSV", report.table_csv(), file_name="kv_sizing.csv", mime="text/csv",
                       icon=":material/download:", key="download_table")

    # Hand-off to the fragmentation explorer and the planner (plain values, read by those pages).
    handoff = report.handoff
    st.session_state.update({
        "sizer.kv_budget_bytes": handoff.kv_budget_bytes, "sizer.per_token_bytes": handoff.per_token_bytes,
        "sizer.max_context": handoff.max_context, "sizer.block_size": handoff.block_size,
        "sizer.summary": handoff.summary, "sizer.model_id": preset_id if source == "Preset" else None,
        "sizer.kv_dtype": kv_dtype, "sizer.weight_dtype": weight_dtype, "sizer.gpu_id": gpu_id,
        "sizer.tp": int(tp), "sizer.context": int(context),
    })
    try:
        st.page_link("pages/2_fragmentation.py", label="How much of this budget is really used? "
                     "Open the fragmentation explorer", icon=":material/view_module:")
    except StreamlitAPIException:
        pass  # the page runs on its own (outside app.py's navigation): nothing to link to

"""The sizer page's engine mode (vLLM V1's own figures per GPU) and its start-up-log explainer.

Controls are declared once in :data:`ENGINE_FIELDS` (URL-backed through the page's
:class:`~ui.url_state.PageState`); the library call is :func:`sizing.engine.capacity.plan_engine`
behind ``st.cache_data``; a refused input is shown beside the controls while the last valid
engine figures stay on screen.
"""

from __future__ import annotations

import streamlit as st

from inputs.bounds import Bound
from inputs.errors import InputError
from ui.field_labels import page_message
from sizing.engine.capacity import EngineReport, EngineRequest, plan_engine
from sizing.answer import EngineSettings, engine_request_as_asked
from sizing.engine.groups import GroupingRule
from sizing.report import SizingReport, SizingRequest
from ui.layout import metric_row
from ui.log_explainer_view import render_log_explainer
from ui.tables import column_config, readable
from ui.url_state import ChoiceField, FlagField, NumberField, PageState
from units import GiB

UTILIZATION = Bound(field="gpu_memory_utilization", low=0.05, high=1.0)
BATCHED = Bound(field="max_num_batched_tokens", low=16, high=1 << 20, integer=True, unit="tokens")
SEQS = Bound(field="max_num_seqs", low=1, high=1 << 16, integer=True, unit="sequences")
BUDGET = Bound(field="kv_budget_gib_per_gpu", low=0, high=100_000, unit="GiB (0 = estimate)")
ENGINE_FIELDS = (
    FlagField("eng", "engine_mode", False),
    NumberField("gmu", "gpu_memory_utilization", 0.9, UTILIZATION),
    NumberField("mnbt", "max_num_batched_tokens", 8192, BATCHED),
    NumberField("mns", "max_num_seqs", 256, SEQS),
    NumberField("kvg", "kv_budget_gib_per_gpu", 0.0, BUDGET),
    ChoiceField("rule", "engine_rule", str(GroupingRule.HYBRID), tuple(GroupingRule)),
    FlagField("old", "vllm_before_021", False),
)
LAST_ENGINE = "sizer.last_valid_engine_request"
OLD_VLLM_LABEL = "vLLM before 0.21 (CUDA graphs not subtracted)"
OLD_VLLM_HELP = "Before 0.21 vLLM sized the KV cache before capturing CUDA graphs, so their memory came out of the headroom."


@st.cache_data(show_spinner=False, max_entries=128)
def cached_engine(request: EngineRequest) -> EngineReport:
    return plan_engine(request)


def engine_controls(state: PageState) -> None:
    """The engine-mode switch and vLLM's settings, in the controls column."""
    st.subheader("Engine")
    st.toggle("Engine mode (vLLM V1 figures per GPU)", key=state.key("engine_mode"))
    if not state.value("engine_mode"):
        return
    c1, c2 = st.columns(2)
    c1.number_input("gpu_memory_utilization", step=0.01, key=state.key("gpu_memory_utilization"))
    c2.number_input("KV budget per GPU (GiB, 0 = estimate)", step=1.0, key=state.key("kv_budget_gib_per_gpu"),
                    help="vLLM's logged 'Available KV cache memory'; replaces the estimated profile.")
    c1.number_input("max_num_batched_tokens", step=1024, key=state.key("max_num_batched_tokens"))
    c2.number_input("max_num_seqs", step=16, key=state.key("max_num_seqs"))
    st.selectbox("KV-cache grouping (vLLM version)", tuple(GroupingRule), key=state.key("engine_rule"),
                 help="hybrid: vLLM ≥ 0.12; hybrid-min: 0.10–0.11; single: older versions")
    st.checkbox(OLD_VLLM_LABEL, key=state.key("vllm_before_021"), help=OLD_VLLM_HELP)


def _engine_request(sizing: SizingRequest, report: SizingReport, state: PageState) -> EngineRequest:
    """The asked TP's request, built as the answer builds its own (the engine's weights, the
    model's activation widths, the vLLM release), with the controls as given."""
    return engine_request_as_asked(report, engine_settings(state, report.tp))


def engine_settings(state: PageState, tp: int) -> EngineSettings:
    """The engine settings the answer follows, from the controls (their defaults when engine mode
    is off); a measured budget belongs to the asked TP. Raises :class:`InputError` naming the field."""
    budget = BUDGET.check(state.value("kv_budget_gib_per_gpu"))
    return EngineSettings(
        gpu_memory_utilization=UTILIZATION.check(state.value("gpu_memory_utilization")),
        max_num_batched_tokens=BATCHED.check(state.value("max_num_batched_tokens")),
        max_num_seqs=SEQS.check(state.value("max_num_seqs")), rule=state.value("engine_rule"),
        kv_budget_bytes_per_gpu=int(budget * GiB) if budget else None, measured_tp=tp,
        cuda_graphs_profiled=not state.value("vllm_before_021"))


def render_engine(sizing: SizingRequest, report: SizingReport, state: PageState) -> None:
    """Engine figures at the asked TP, the reverse answers and the log explainer (the commands
    are the answer's, above)."""
    if not state.value("engine_mode"):
        return
    st.subheader(f"What vLLM will print at TP {report.tp}, as asked (per GPU)")
    engine = None
    try:
        request = _engine_request(sizing, report, state)
        engine = cached_engine(request)
        st.session_state[LAST_ENGINE] = request
    except InputError as exc:
        st.error(page_message(exc), icon=":material/error:")
        previous = st.session_state.get(LAST_ENGINE)
        if previous is not None:
            st.caption(":material/history: Showing the last valid engine figures.")
            engine = cached_engine(previous)
    if engine is not None:
        _figures(engine, report)
    _explainer(sizing)


def _figures(engine: EngineReport, report: SizingReport) -> None:
    m1 = m2 = m3 = metric_row()
    m1.metric("Available KV cache memory", f"{engine.available_kv_bytes_per_gpu / GiB:,.2f} GiB")
    m2.metric("GPU KV cache size", f"{engine.kv_cache_tokens:,} tokens")
    m3.metric(f"Maximum concurrency at {engine.request.max_model_len:,}", f"{engine.max_concurrency:,.2f}×")
    terms = readable([{"term": t.name, "GiB": t.bytes / GiB, "estimated": t.estimated, "basis": t.basis}
                      for t in engine.profile.terms])
    st.dataframe(terms.shown, hide_index=True, key="engine_memory_table", column_config=column_config(terms.shown))
    layout = engine.layout
    st.markdown(f"**KV-cache groups** ({layout.rule}): " + ", ".join(g.label for g in layout.groups)
                + f" — {layout.layer_slots} layer slots of {layout.page_bytes:,} B pages.")
    for warning in layout.warnings:
        st.warning(warning.message, icon=":material/warning:")
    for note in engine.notes:
        st.info(note, icon=":material/info:")
    util = engine.required_gpu_memory_utilization
    st.markdown(
        f"- `gpu_memory_utilization` for {report.users:,} users of {engine.request.max_model_len:,} tokens: "
        + (f"**{util:g}**" if util is not None else "**none fits them in one replica at this TP** (the answer above adds replicas)")
        + f"\n- Largest `max_model_len` that fits: **{engine.max_model_len_fit:,}**"
        + f"\n- Smallest TP at which one replica holds all of them: **{engine.smallest_tp or 'none up to 64'}**"
        + (f"\n- Whole TP replicas for {report.users:,} users at this TP: **{engine.replicas_for_users} × TP "
           f"{engine.request.tp} = {engine.replicas_for_users * engine.request.tp} GPUs**"
           if engine.replicas_for_users else ""))


def _explainer(sizing: SizingRequest) -> None:
    """The start-up-log explainer, for the page's model, dtypes and TP (:mod:`ui.log_explainer_view`)."""
    render_log_explainer(sizing)

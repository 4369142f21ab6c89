"""The one answer (:class:`sizing.answer.Answer`) as the sizer and planner pages show it: what to
deploy, whether the users fit, the rule followed and the commands that launch it.

Both pages call :func:`render_answer` on the same object, so they show the same figures; the
metric labels are the ones the browser and page tests read. :func:`render_answer_strip` repeats
the headline of the same object in one line, for the top of a page whose answer block is below
its controls. The answer's time per output token (:func:`planner.plan.answer_timing`, the
planner's step model) is joined to it here, above the sizer, which cannot import the planner.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from planner.plan import answer_timing
from sizing.answer import Answer, EngineSettings, answer_for
from sizing.engine.groups import GroupingRule
from sizing.report import SizingRequest, size_deployment
from ui.engine_view import OLD_VLLM_HELP, OLD_VLLM_LABEL
from ui.layout import metric_row
from ui.tables import column_config, readable

ANSWER_GPUS = "GPUs to deploy"
ANSWER_LAYOUT = "Layout"
ANSWER_REQUESTS = "Requests per replica"
OPTION_HELP = "— : one replica of this layout cannot hold a single request of the context."


@st.cache_data(show_spinner=False, max_entries=256)
def cached_answer(request: SizingRequest, settings: EngineSettings) -> Answer:
    """The answer for the sizer's ``request`` under the engine ``settings`` (one call for both
    pages), with its TPOT from the step model when the model has a config."""
    report = size_deployment(request)
    answer = answer_for(report, settings)
    return replace(answer, timing=answer_timing(report, answer, settings))


def engine_settings_controls(key: Callable[[str], str], value: Callable[[str], Any]) -> EngineSettings:
    """The planner's engine settings for the answer, in an expander (its fields are declared on
    the page: gpu_memory_utilization, max_num_batched_tokens, max_num_seqs, engine_rule,
    vllm_before_021); the settings they hold."""
    with st.expander("Engine settings (for the answer and the step model)"):
        st.number_input("gpu_memory_utilization", 0.05, 1.0, step=0.01, key=key("gpu_memory_utilization"))
        st.number_input("max_num_batched_tokens", 16, 1 << 20, step=1024, key=key("max_num_batched_tokens"))
        st.number_input("max_num_seqs", 1, 1 << 16, step=16, key=key("max_num_seqs"))
        st.selectbox("KV-cache grouping (vLLM version)", tuple(GroupingRule), key=key("engine_rule"))
        st.checkbox(OLD_VLLM_LABEL, key=key("vllm_before_021"), help=OLD_VLLM_HELP)
    return EngineSettings(gpu_memory_utilization=float(value("gpu_memory_utilization")),
                          max_num_batched_tokens=int(value("max_num_batched_tokens")),
                          max_num_seqs=int(value("max_num_seqs")), rule=value("engine_rule"),
                          cuda_graphs_profiled=not value("vllm_before_021"))


def gpus_text(answer: Answer) -> str:
    """``20 × H100 SXM`` (``none`` when nothing holds one request): the answer's GPUs, as both
    the block and the strip show them."""
    return "none" if answer.gpus is None else f"{answer.gpus:,} × {answer.gpu_name}"


def render_answer_strip(answer: Answer, parent: DeltaGenerator, *, stale: bool = False) -> None:
    """The answer in one line inside ``parent`` (a :func:`ui.layout.sticky` container): the GPUs
    (the only bold text), the layout and whether the users fit. ``stale``: the figures are the last
    valid ones, an input being refused."""
    lead = (":material/history: Last valid answer: " if stale
            else ":material/task_alt: " if answer.fits else ":material/error: ")
    if answer.fits:
        verdict = (f":green[{answer.users:,} user{'s' if answer.users != 1 else ''} fit], "
                   f"{answer.load_per_replica:,} of {answer.requests_per_replica:,} requests per replica")
        parent.markdown(f"{lead}**{gpus_text(answer)}** · {answer.layout} · {verdict}")
    else:
        parent.markdown(f"{lead}**{gpus_text(answer)}** · :red[{answer.summary}]")


def render_answer(answer: Answer, *, key: str) -> None:
    """The answer block; ``key`` keeps the widgets of two pages apart."""
    st.subheader(":material/task_alt: The answer: what to deploy")
    if not answer.fits:
        st.error(answer.summary + ".", icon=":material/error:")
    a1 = a2 = a3 = metric_row()
    a1.metric(ANSWER_GPUS, gpus_text(answer),
              help="Whole replicas: each holds its own copy of the weights and its own runtime memory.")
    a2.metric(ANSWER_LAYOUT, answer.layout, help=f"{answer.nodes or 0} node(s) of {answer.gpus_per_node} GPUs")
    a3.metric(ANSWER_REQUESTS, f"{answer.load_per_replica:,} of {answer.requests_per_replica:,}",
              help=f"Each replica carries {answer.load_per_replica:,} of the {answer.users:,} users and holds up to "
                   f"{answer.requests_per_replica:,} requests of {answer.context:,} tokens.")
    if answer.fits:
        st.success(f"{answer.summary}.", icon=":material/check_circle:")
    st.caption(f"Rule: {answer.rule}.")
    if answer.timing is not None:
        st.caption(f":material/timer: {answer.timing.line}.")
    if answer.fits and answer.basis == "vllm":
        st.caption(f"`--gpu-memory-utilization {answer.planned_utilization:g}` planned; "
                   f"{answer.required_utilization:g} is what {answer.load_per_replica:,} requests per replica need.")
    for note in answer.notes:
        st.info(note, icon=":material/info:")
    if answer.vllm_command:
        st.code(answer.vllm_command, language="bash")
        st.code(answer.sglang_command, language="bash")
    with st.expander("Layouts considered"):
        # "—" where a layout holds no request (no replicas, no GPUs, no KV memory to quote).
        records = [{**o.as_record(), "kv_bytes_per_gpu": None if o.kv_bytes_per_gpu is None
                    else round(o.kv_bytes_per_gpu / 2**30, 2)} for o in answer.options]
        table = readable(records, rename={"tp": "TP", "pp": "PP", "gpus": "GPUs",
                                          "kv_bytes_per_gpu": "KV memory per GPU (GiB)", "reason": "Note"})
        st.dataframe(table.shown, hide_index=True, key=f"{key}_answer_options", column_config=column_config(
            table.shown, {"Replicas": OPTION_HELP, "GPUs": OPTION_HELP}))

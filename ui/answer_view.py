"""The one answer (:class:`sizing.answer.Answer`) as the sizer and planner pages show it: what to
deploy, whether the users fit, the rule followed and the commands that launch it.

Both pages call :func:`render_answer` on the same object, so they show the same figures; the
metric labels are the ones the browser and page tests read.
"""

from __future__ import annotations

import streamlit as st

from sizing.answer import Answer, EngineSettings, answer_for
from sizing.report import SizingRequest, size_deployment
from ui.layout import metric_row
from ui.tables import readable

ANSWER_GPUS = "GPUs to deploy"
ANSWER_LAYOUT = "Layout"
ANSWER_REQUESTS = "Requests per replica"


@st.cache_data(show_spinner=False, max_entries=256)
def cached_answer(request: SizingRequest, settings: EngineSettings) -> Answer:
    """The answer for the sizer's ``request`` under the engine ``settings`` (one call for both pages)."""
    return answer_for(size_deployment(request), settings)


def render_answer(answer: Answer, *, key: str) -> None:
    """The answer block; ``key`` keeps the widgets of two pages apart."""
    st.subheader(":material/task_alt: The answer: what to deploy")
    if not answer.fits:
        st.error(answer.summary + ".", icon=":material/error:")
    a1 = a2 = a3 = metric_row()
    a1.metric(ANSWER_GPUS, "none" if answer.gpus is None else f"{answer.gpus:,} × {answer.gpu_name}",
              help="Whole replicas: each holds its own copy of the weights and its own runtime memory.")
    a2.metric(ANSWER_LAYOUT, answer.layout, help=f"{answer.nodes or 0} node(s) of {answer.gpus_per_node} GPUs")
    a3.metric(ANSWER_REQUESTS, f"{answer.load_per_replica:,} of {answer.requests_per_replica:,}",
              help=f"Each replica carries {answer.load_per_replica:,} of the {answer.users:,} users and holds up to "
                   f"{answer.requests_per_replica:,} requests of {answer.context:,} tokens.")
    if answer.fits:
        st.success(f"{answer.summary}.", icon=":material/check_circle:")
    st.caption(f"Rule: {answer.rule}.")
    if answer.fits and answer.basis == "vllm":
        st.caption(f"`--gpu-memory-utilization {answer.planned_utilization:g}` planned; "
                   f"{answer.required_utilization:g} is what {answer.load_per_replica:,} requests per replica need.")
    for note in answer.notes:
        st.info(note, icon=":material/info:")
    if answer.vllm_command:
        st.code(answer.vllm_command, language="bash")
        st.code(answer.sglang_command, language="bash")
    with st.expander("Layouts considered"):
        records = [{**o.as_record(), "gpus": o.gpus or 0, "replicas": o.replicas or 0,
                    "kv_bytes_per_gpu": round((o.kv_bytes_per_gpu or 0) / 2**30, 2)} for o in answer.options]
        st.dataframe(readable(records, rename={"tp": "TP", "pp": "PP", "gpus": "GPUs (0: does not fit)",
                                               "replicas": "replicas (0: does not fit)",
                                               "kv_bytes_per_gpu": "KV memory per GPU (GiB)"}).shown,
                     hide_index=True, key=f"{key}_answer_options")

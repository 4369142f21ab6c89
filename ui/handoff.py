"""The sizer's result handed to the other pages: in the same session as a typed object, and in
the URL of the links to them, so that a link opened in a fresh browser shows the same figures.

The sizer publishes a :class:`sizing.report.Handoff` after every valid rerun; the
fragmentation explorer and the planner read it to offer "use the sizer's budget/model"
instead of re-checking loose session keys. :func:`fragmentation_query` and
:func:`planner_query` write the same hand-off as those pages' own URL parameters.
"""

from __future__ import annotations

from dataclasses import replace

import streamlit as st

from hardware.gpus import GPU_IDS
from sizing.answer import EngineSettings
from sizing.presets import PRESET_IDS
from sizing.report import Handoff

SESSION_KEY = "handoff.sizer"  # public so tests can hand a page a Handoff directly


def publish(handoff: Handoff) -> None:
    """Make ``handoff`` the sizer's latest result for this session."""
    st.session_state[SESSION_KEY] = handoff


def latest() -> Handoff | None:
    """The sizer's latest result in this session, or ``None`` if the sizer has not run."""
    handoff = st.session_state.get(SESSION_KEY)
    return handoff if isinstance(handoff, Handoff) else None


def with_engine(handoff: Handoff, settings: EngineSettings) -> Handoff:
    """``handoff`` carrying the engine settings the sizer's answer followed."""
    return replace(handoff, gpu_memory_utilization=float(settings.gpu_memory_utilization),
                   max_num_batched_tokens=settings.max_num_batched_tokens, max_num_seqs=settings.max_num_seqs,
                   engine_rule=str(settings.rule), cuda_graphs_profiled=settings.cuda_graphs_profiled)


def fragmentation_query(handoff: Handoff) -> dict[str, str]:
    """The explorer's URL for the sizer's budget: whole tokens of the budget (exactly the
    session hand-off's ``floor(budget ÷ bytes per token)``), its context and block size."""
    from ui.fragmentation_controls import BLOCK_SIZES, CONTEXTS

    query = {"budget": "tokens", "tokens": str(max(handoff.kv_budget_bytes, 0) // max(handoff.per_token_bytes, 1))}
    if handoff.max_context in CONTEXTS:
        query["ctx"] = str(handoff.max_context)
    if handoff.block_size in BLOCK_SIZES:
        query["block"] = str(handoff.block_size)
    return query


def planner_query(handoff: Handoff) -> dict[str, str]:
    """The planner's URL for the sizer's deployment and answer: model, precisions, GPU, TP,
    users at the context (the engine's max_model_len) and the engine settings."""
    query = {"kv": handoff.kv_dtype, "w": handoff.weight_dtype, "tp": str(handoff.tp),
             "maxctx": str(handoff.max_context), "users": str(handoff.users), "block": str(handoff.block_size),
             "usable": f"{handoff.usable_fraction:g}"}
    if handoff.preset_id in PRESET_IDS:
        query["model"] = handoff.preset_id
    if handoff.gpu_id in GPU_IDS:
        query["gpu"] = handoff.gpu_id
    engine = {"gmu": handoff.gpu_memory_utilization, "mnbt": handoff.max_num_batched_tokens,
              "mns": handoff.max_num_seqs, "rule": handoff.engine_rule or None,
              "old": None if handoff.cuda_graphs_profiled else "1"}
    query |= {name: (f"{value:g}" if isinstance(value, float) else str(value))
              for name, value in engine.items() if value is not None}
    return query

"""The sizer's result handed to the other pages of the same session, as a typed object.

The sizer publishes a :class:`sizing.report.Handoff` after every valid rerun; the
fragmentation explorer and the planner read it to offer "use the sizer's budget/model"
instead of re-checking loose session keys.
"""

from __future__ import annotations

from dataclasses import replace

import streamlit as st

from sizing.answer import EngineSettings
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
                   engine_rule=str(settings.rule))

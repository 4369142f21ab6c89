"""The sizer page's vLLM start-up-log explainer: read an uploaded or pasted log, say which model
it was run with against the page's model, and rebuild its figures for the model, TP and KV dtype
shown as editable fields (each defaulting to the log's value where it states one, else the page's).

The library calls are :func:`sizing.engine.vllm_log.parse_vllm_log`,
:func:`sizing.engine.log_model.identify_log_model` and
:func:`sizing.engine.explain.explain_log`; this module only lays them out.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pandas as pd
import streamlit as st

from inputs.errors import InputError
from inputs.uploads import upload_bytes
from sizing.catalogue import CatalogueEntry
from sizing.engine.explain import LogExplanation, explain_log, log_kv_dtype
from sizing.engine.log_model import LogModel, MatchKind, identify_log_model, match_log_model
from sizing.engine.memory import ActivationShape
from sizing.engine.vllm_log import MAX_LOG_BYTES, ParsedLog, parse_vllm_log
from sizing.models import ModelShape
from sizing.presets import get_preset
from sizing.report import SizingRequest
from ui.field_labels import page_message

PAGE_MODEL = "page"  # the radio value that keeps the page's model
_KV_DTYPES = ("bf16", "fp16", "fp8", "fp32")  # what vLLM's --kv-cache-dtype resolves to
_TP_MAX = 4096
_KEYS = ("engine_log_model", "engine_log_tp", "engine_log_kv_dtype")  # reset when another log comes in


def render_log_explainer(sizing: SizingRequest) -> None:
    """The explainer expander: upload or paste, the model notice, the fields, the checks."""
    with st.expander("Explain a vLLM start-up log", icon=":material/troubleshoot:"):
        uploaded = st.file_uploader("Log file", type=["log", "txt"], key="engine_log_upload",
                                    max_upload_size=MAX_LOG_BYTES // 2**20)
        pasted = st.text_area("…or paste it", key="engine_log_text", height=140)
        try:
            data = _log_bytes(uploaded, pasted)
            if not data.strip():
                st.caption("Paste the lines from start-up to 'Maximum concurrency'; the figures are rebuilt for "
                           "the model chosen above unless you pick the log's own.")
                return
            parsed = parse_vllm_log(data)
        except InputError as exc:
            st.error(page_message(exc), icon=":material/error:")
            return
        _reset_fields_for(data)
        identified = identify_log_model(parsed)
        page_name, page_entry = _page_model(sizing)
        choices = _choices(identified, page_entry)
        _model_notice(identified, page_name, page_entry)
        choice = PAGE_MODEL
        if len(choices) > 1:
            choice = st.radio("Rebuild the figures for", tuple(choices), format_func=choices.__getitem__,
                              key="engine_log_model", horizontal=True)
        entry = None if choice == PAGE_MODEL else get_preset(choice)
        tp, kv_dtype = _settings_fields(parsed, sizing, identified, entry)
        model = entry.shape if entry is not None else _page_shape(sizing)
        activation = _activation(entry, sizing)
        try:
            explanation = explain_log(parsed, model, activation=activation, tp=tp, kv_dtype=kv_dtype)
        except InputError as exc:
            st.error(page_message(exc), icon=":material/error:")
            return
        _render_explanation(explanation, entry.name if entry is not None else page_name)


def _log_bytes(uploaded: Any, pasted: str) -> bytes:
    # Refused by size before anything is copied or decoded: an upload by its reported size, a
    # paste by its length (a character is at least one byte).
    if uploaded is not None and uploaded.size > MAX_LOG_BYTES:
        raise InputError("log", f"the file is {uploaded.size:,} bytes, over the {MAX_LOG_BYTES:,}-byte limit")
    if uploaded is None and len(pasted) > MAX_LOG_BYTES:
        raise InputError("log", f"the paste is {len(pasted):,} characters, over the {MAX_LOG_BYTES:,}-byte limit")
    return upload_bytes(uploaded.getvalue(), MAX_LOG_BYTES, field="log") if uploaded else pasted.encode()


def _reset_fields_for(data: bytes) -> None:
    """A new log brings its own defaults: forget the fields set for the previous one."""
    digest = hashlib.sha256(data).hexdigest()
    if st.session_state.get("engine_log_digest") != digest:
        for key in _KEYS:
            st.session_state.pop(key, None)
        st.session_state["engine_log_digest"] = digest


def _page_model(sizing: SizingRequest) -> tuple[str, CatalogueEntry | None]:
    """The page's model in words, and its catalogue entry when it has one."""
    if isinstance(sizing.model, str):
        entry = get_preset(sizing.model)
        return entry.name, entry
    match = match_log_model(sizing.model.name)
    return sizing.model.name, match.entry if match.kind is MatchKind.REPOSITORY else None


def _page_shape(sizing: SizingRequest) -> ModelShape:
    return get_preset(sizing.model).shape if isinstance(sizing.model, str) else sizing.model


def _activation(entry: CatalogueEntry | None, sizing: SizingRequest) -> ActivationShape | None:
    if entry is not None:
        return ActivationShape.from_config(entry.config)
    return ActivationShape.from_config(get_preset(sizing.model).config) if isinstance(sizing.model, str) else None


def _choices(identified: LogModel, page_entry: CatalogueEntry | None) -> dict[str, str]:
    """Radio value → label: the page's model first, then the log's match or the candidates."""
    page_id = page_entry.id if page_entry is not None else None
    choices = {PAGE_MODEL: "the page's model"}
    if identified.match.entry is not None and identified.match.entry.id != page_id:
        choices[identified.match.entry.id] = f"the log's model ({identified.match.entry.name}, catalogue)"
    for candidate in identified.candidates:
        if candidate.entry.id != page_id and candidate.entry.id not in choices:
            choices[candidate.entry.id] = (f"{candidate.entry.name} (fits at TP {candidate.tp}, "
                                           f"{candidate.kv_dtype} KV)")
    return choices


def _model_notice(identified: LogModel, page_name: str, page_entry: CatalogueEntry | None) -> None:
    """Which model the log was run with against the page's, in words."""
    match = identified.match
    if match.entry is not None:
        if page_entry is not None and match.entry.id == page_entry.id:
            st.success(f"The log's model is {match.logged} — the page's model ({page_name}); {match.how}.",
                       icon=":material/check_circle:")
            return
        st.warning(f"The log's model is **{match.entry.repo}** ({match.how}); the page's model is **{page_name}**: "
                   "the figures below are rebuilt for the page's model unless you pick the log's below.",
                   icon=":material/compare_arrows:")
        return
    said = {MatchKind.NONE: "The log names no model",
            MatchKind.HUB_NOT_IN_CATALOGUE: f"The log's model is {match.logged}, which the catalogue does not ship",
            MatchKind.UNKNOWN: f"The log's model is {match.logged}, which no catalogue model matches"}[match.kind]
    text = f"{said}; the figures below are rebuilt for the page's model, **{page_name}**."
    if identified.candidates:
        names = ", ".join(f"{c.entry.name} (TP {c.tp}, {c.kv_dtype})" for c in identified.candidates)
        fits = page_entry is not None and any(c.entry.id == page_entry.id for c in identified.candidates)
        text += (f" Catalogue models whose KV bytes give the logged figures: {names}"
                 + (" — the page's model is among them." if fits else " — the page's model is not among them."))
    else:
        text += f" No catalogue model was matched by its KV bytes ({identified.basis})."
    st.info(text, icon=":material/help:")


def _settings_fields(parsed: ParsedLog, sizing: SizingRequest, identified: LogModel,
                     entry: CatalogueEntry | None) -> tuple[int, str]:
    """TP and KV dtype as editable fields: the log's where it states them, else the chosen
    candidate's, else the page's; each captioned with where its default came from."""
    candidate = next((c for c in identified.candidates if entry is not None and c.entry.id == entry.id), None)
    if parsed.tp is not None:
        tp_default, tp_from = parsed.tp, "the log"
    elif candidate is not None:
        tp_default, tp_from = candidate.tp, "the TP at which this model fits the log"
    else:
        tp_default, tp_from = min(max(sizing.tp, 1), _TP_MAX), "the page (the log states no TP)"
    logged = log_kv_dtype(parsed)
    if logged is not None:
        kv_default, kv_from = logged[0], "the " + logged[1]
    elif candidate is not None:
        kv_default, kv_from = candidate.kv_dtype, "the dtype at which this model fits the log"
    else:
        kv_default, kv_from = sizing.kv_dtype, "the page (the log states no KV dtype)"
    options = tuple(dict.fromkeys((*_KV_DTYPES, kv_default)))
    st.session_state.setdefault("engine_log_tp", tp_default)
    st.session_state.setdefault("engine_log_kv_dtype", kv_default)
    c1, c2 = st.columns(2)
    tp = c1.number_input("TP the log ran at", min_value=1, max_value=_TP_MAX, step=1, key="engine_log_tp",
                         help=f"Default from {tp_from}.")
    kv_dtype = c2.selectbox("KV-cache dtype the log ran with", options, key="engine_log_kv_dtype",
                            help=f"Default from {kv_from}.")
    st.caption(f"TP {tp_default} from {tp_from}; KV dtype {kv_default} from {kv_from}.")
    return int(tp), str(kv_dtype)


def _render_explanation(explanation: LogExplanation, model_name: str) -> None:
    rows: list[dict[str, Any]] = [
        {"figure": c.name, "vLLM": c.logged, "rebuilt": round(c.reconstructed, 4),
         "formula": None if c.formula is None else round(c.formula, 2), "matches": c.within, "why": c.why}
        for c in explanation.checks]
    if rows:
        st.dataframe(pd.DataFrame(rows), hide_index=True, key="engine_log_checks")
        missed = [c.name for c in explanation.checks if not c.within]
        if missed:
            st.caption(f":material/info: Rebuilt for {model_name}: {', '.join(missed)} do not match the log — "
                       "a different model, TP or dtype from the log's gives other figures.")
    if explanation.fix is not None:
        st.warning("\n".join(f"- {line}" for line in explanation.fix.lines()), icon=":material/build:")
    st.caption("Found: " + ", ".join(explanation.parsed.found_fields))
    for ignored in explanation.parsed.ignored:
        st.caption(f":material/block: line {ignored.line_no}: {ignored.reason} — not used")
    for missing in explanation.not_reconstructed:
        st.caption(f":material/help: {missing}")

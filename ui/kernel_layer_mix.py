"""The kernel page's "a model's layer mix" section: a catalogue model's attention layers at a batch,
context, KV format and TP degree — the sizer's bytes for each kind (any machine, no GPU), one
layer of each kind timed (the newest shipped run of ``python -m planner layer-mix``, or a run on
this GPU), the step's attention time and the share each kind takes.

Its controls live in the URL (``kernels.mix`` fields). Without a GPU the times come from the
shipped point of the same model and KV format nearest the request (said so in the caption).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import streamlit as st

from inputs.bounds import Bound
from inputs.errors import InputError
from kernels.bench.layer_mix_records import MAX_MIX_BATCH, MAX_MIX_CONTEXT, MIX_KV_FORMATS, LayerMixReport, MixRequest, MixResult
from kernels.bench.results_json import newest_readable
from kernels.bench.shipped import RESULTS_DIR
from planner.layer_mix import kinds_of, mix_job, read_checked_layer_mix
from sizing.catalogue import catalogue_ids, get_entry
from ui.field_labels import page_message
from ui.kernel_tables import us_text
from ui.tables import percent_text
from ui.url_state import ChoiceField, NumberField, PageState
from units import UnitSystem
from units import format_up_to_giga as fmt

__all__ = ["LAYER_MIX_DIR", "MIX_FIELDS", "newest_layer_mix", "nearest_result", "mix_frame", "layer_mix_section"]

LAYER_MIX_DIR = RESULTS_DIR / "layer_mix"
TP_CHOICES = (1, 2, 4, 8, 16)
LABELS = {"model": "Model (layer mix)", "batch": "Batch (sequences)", "context": "Context (tokens)",
          "kv": "KV format (layer mix)", "tp": "TP degree (layer mix)"}
MIX_FIELDS = (
    ChoiceField("mix_model", "model", "gpt-oss-120b", catalogue_ids()),
    NumberField("mix_b", "batch", 32, Bound(field="batch", low=1, high=MAX_MIX_BATCH, integer=True, unit="sequences")),
    NumberField("mix_L", "context", 32768, Bound(field="context", low=1, high=MAX_MIX_CONTEXT, integer=True,
                                                 unit="tokens")),
    ChoiceField("mix_kv", "kv", "bf16", MIX_KV_FORMATS),
    ChoiceField("mix_tp", "tp", 1, TP_CHOICES),
)
SESSION_RUNS = "kernels.mix.runs"


def newest_layer_mix(directory: Path = LAYER_MIX_DIR) -> tuple[LayerMixReport, str] | None:
    """The newest shipped layer-mix file that reads and matches the catalogue, with its name."""
    return newest_readable(directory, read_checked_layer_mix)


def nearest_result(report: LayerMixReport, request: MixRequest) -> MixResult | None:
    """The result for ``request`` itself, else the same model, KV format and TP nearest in
    log batch and log context; None when the run has no such point."""
    same = [r for r in report.for_model(request.model) if (r.request.kv, r.request.tp) == (request.kv, request.tp)]
    if not same:
        return None

    def distance(r: MixResult) -> float:
        return abs(math.log(r.request.batch / request.batch)) + abs(math.log(r.request.context / request.context))

    return min(same, key=distance)


def mix_frame(result: MixResult) -> pd.DataFrame:
    """One row per kind: layers, one GPU's heads, the sizer's KV bytes, bytes read, times, share."""
    rows = []
    for k in result.kinds:
        rows.append({
            "Layer kind": k.label, "Layers": f"{k.layers:,}", "Heads on one GPU (query / KV)": f"{k.q_heads} / {k.kv_heads}",
            "KV per token, one layer": f"{math.ceil(k.kv_bytes_per_token):,} B" if k.kv_bytes_per_token else "—",
            "Read by one layer a step": fmt(math.ceil(k.bytes_read), UnitSystem.DECIMAL),
            "µs per layer": us_text(k.layer_ms), "µs a step, all its layers": us_text(k.total_ms),
            "Share of attention time": percent_text(result.share(k)),
            "Note": k.reason or "",
        })
    return pd.DataFrame(rows)


def _request(state: PageState) -> MixRequest | None:
    cols = st.columns([3, 2, 2, 2, 2])
    cols[0].selectbox(LABELS["model"], catalogue_ids(), key=state.key("model"),
                      format_func=lambda m: get_entry(m).name)
    cols[1].number_input(LABELS["batch"], 1, MAX_MIX_BATCH, step=1, key=state.key("batch"))
    cols[2].number_input(LABELS["context"], 1, MAX_MIX_CONTEXT, step=1024, key=state.key("context"))
    cols[3].selectbox(LABELS["kv"], MIX_KV_FORMATS, key=state.key("kv"))
    cols[4].selectbox(LABELS["tp"], TP_CHOICES, key=state.key("tp"))
    state.sync()
    try:
        request = MixRequest(model=state.value("model"), batch=int(state.value("batch")),
                             context=int(state.value("context")), kv=state.value("kv"), tp=int(state.value("tp")))
        kinds_of(request)  # a TP the model's KV heads do not divide is named here
        return request
    except InputError as exc:
        st.error(page_message(exc, LABELS), icon=":material/error:")
        return None


def _run_live(request: MixRequest, gate) -> None:
    """Time the request on this GPU through the page's GPU gate (one run at a time, cancellable)."""
    from ui.gpu_lock import GpuBusy, run_guarded

    if not st.button("Time these layers on this GPU", key="k_mix_run", icon=":material/play_arrow:"):
        return
    bar = st.progress(0.0, text="waiting for the GPU")
    try:
        with gate.hold(f"layer mix of {request.model}") as handle:
            from kernels.bench.layer_mix import run_layer_mixes

            def progress(event) -> None:
                handle.check()
                bar.progress(min(event.done / max(event.total, 1), 1.0), text=event.message)

            outcome = run_guarded(lambda: run_layer_mixes((mix_job(request).as_tuple(),), progress=progress,
                                                          command="KV Cache Explorer, kernel page"))
    except GpuBusy as exc:
        st.error(str(exc), icon=":material/hourglass_disabled:")
        return
    if outcome.status == "ok":
        st.session_state.setdefault(SESSION_RUNS, []).append(outcome.value.results[0])
        bar.progress(1.0, text="done")
    else:
        st.warning(outcome.message or "Run cancelled; nothing was recorded.", icon=":material/cancel:")


def layer_mix_section(*, gpu: bool = False, gate=None) -> None:
    """The section: controls, the sizer's bytes, and times from this session or the shipped run."""
    st.subheader("A model's layer mix, timed")
    st.caption("One layer of each kind the model has, on one GPU's share of its heads, at your batch and context: "
               "its time, the step's attention time (each kind's time per layer × its layers) and the share each "
               "kind takes, beside the bytes the sizer counts for the same layers.")
    state = PageState("kernels.mix", MIX_FIELDS)
    state.seed()
    for notice in state.notices:
        st.warning(notice, icon=":material/link_off:")
    request = _request(state)
    if request is None:
        request = st.session_state.get("kernels.mix.last")
        if request is None:
            return
    st.session_state["kernels.mix.last"] = request
    if gpu and gate is not None:
        _run_live(request, gate)
    live = [r for r in st.session_state.get(SESSION_RUNS, []) if r.request == request]
    found = newest_layer_mix()
    result, source = (live[-1], "timed on this GPU in this session") if live else (None, "")
    if result is None and found is not None:
        report, name = found
        result = nearest_result(report, request)
        if result is not None:
            q, p = result.request, report.provenance
            exact = q == request
            source = (f"{'' if exact else 'nearest shipped point, '}B={q.batch} L={q.context:,} from `{name}` "
                      f"({p.device}, torch {p.torch}, triton {p.triton}, {p.date[:10]}, commit {p.commit})")
    if result is None:
        shipped = ", ".join(found[0].models) if found is not None else "none"
        st.info(f"No timing for {get_entry(request.model).name} at {request.kv} KV, TP {request.tp} here "
                f"(shipped: {shipped}). Time it on a GPU with `python -m planner layer-mix --model "
                f"{request.model} --tp {request.tp}`; the sizer's bytes are below.", icon=":material/info:")
        result = MixResult(request=request, model_name=get_entry(request.model).name, kinds=kinds_of(request))
    st.dataframe(mix_frame(result), hide_index=True, width="stretch")
    total = result.attention_ms
    if total is not None:
        read = result.bytes_read
        st.caption(f"Attention a step: **{total * 1e3:,.1f} µs** for {fmt(math.ceil(read), UnitSystem.DECIMAL)} read "
                   f"({result.read_tbps:,.2f} TB/s); {source}.")

"""The sizer's table of layer kinds: per-token KV bytes of each kind, the per-sequence state of
recurrent layers and one sequence at the chosen context, for the whole model and per GPU at
the report's TP — with a total row that equals the report's own figures.

:func:`layer_kind_records` builds the rows (plain text cells, readable headers, "—" where a
kind has no such figure) from :attr:`SizingReport.layer_kinds`; :func:`render_layer_kinds`
draws them. No arithmetic beyond adding the exact per-group bytes and formatting them.
"""

from __future__ import annotations

import math

import pandas as pd
import streamlit as st

from sizing.layers import LayerKind
from sizing.report import SizingReport
from units import UnitSystem
from units import format_up_to_giga as fmt

KIND_LABELS = {
    LayerKind.FULL: "Full attention", LayerKind.SLIDING: "Sliding window", LayerKind.CHUNKED: "Chunked local",
    LayerKind.MLA: "MLA latent", LayerKind.MAMBA: "Mamba (SSM state)", LayerKind.LINEAR: "Linear attention (state)",
}
NONE = "—"  # a figure a kind does not have (no window, no state, no per-token KV)


def _bytes(value, system: UnitSystem, *, shown_if_zero: bool = False) -> str:
    whole = math.ceil(value)
    return fmt(whole, system) if whole or shown_if_zero else NONE


def layer_kind_records(report: SizingReport, system: UnitSystem) -> list[dict[str, object]]:
    """One record per layer group, then the total over all layers (headers name the TP and context)."""
    tp, context = report.tp, f"{report.context:,}"
    headers = ("Layer kind", "Layers", "Window / chunk (tokens)", "KV per token", f"KV per token per GPU (TP {tp})",
               "State per sequence", f"State per sequence per GPU (TP {tp})", f"One sequence at {context} tokens",
               f"One sequence per GPU at {context} tokens")
    records = []
    for row in report.layer_kinds:
        cells = (KIND_LABELS[LayerKind(row.kind)], f"{row.count:,}", NONE if row.window is None else f"{row.window:,}",
                 _bytes(row.bytes_per_token, system), _bytes(row.bytes_per_token_per_gpu, system),
                 _bytes(row.state_bytes_per_sequence, system), _bytes(row.state_bytes_per_sequence_per_gpu, system),
                 _bytes(row.bytes_at_context, system, shown_if_zero=True),
                 _bytes(row.bytes_at_context_per_gpu, system, shown_if_zero=True))
        records.append(dict(zip(headers, cells, strict=True)))
    rows = report.layer_kinds
    total = ("All layers", f"{sum(r.count for r in rows):,}", NONE,
             _bytes(sum(r.bytes_per_token for r in rows), system, shown_if_zero=True),
             _bytes(sum(r.bytes_per_token_per_gpu for r in rows), system, shown_if_zero=True),
             _bytes(sum(r.state_bytes_per_sequence for r in rows), system),
             _bytes(sum(r.state_bytes_per_sequence_per_gpu for r in rows), system),
             _bytes(sum(r.bytes_at_context for r in rows), system, shown_if_zero=True),
             _bytes(sum(r.bytes_at_context_per_gpu for r in rows), system, shown_if_zero=True))
    records.append(dict(zip(headers, total, strict=True)))
    return records


def render_layer_kinds(report: SizingReport, system: UnitSystem) -> None:
    """The table, under a heading; recurrent layers get a line on what their state is."""
    st.subheader("By layer kind")
    st.dataframe(pd.DataFrame(layer_kind_records(report, system)), hide_index=True, key="layer_kinds_table")
    if report.state_bytes_per_sequence:
        state = report.model.state
        st.caption(f"{KIND_LABELS[state.kind]} layers keep a constant state per sequence (convolution + recurrent, "
                   f"{state.dtype_bytes} B per value), whatever its length: no per-token KV.")

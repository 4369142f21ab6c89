"""Plotly figures of benchmark records for the live kernel page (no streamlit here).

Everything takes the benchmark's records (``kernels.bench.records``), so a run made in this
session, the H200 results shipped in the repository and an uploaded JSON are drawn by the same
code. Rates are decimal (TB/s, TFLOP/s); memory in GiB (2^30); times in ms or µs as labelled.
Every axis carries its quantity and unit; :func:`plot_config` gives each chart plotly's own PNG
export under a file name that says what it shows.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from glossary import DTYPE_LABELS
from kernels.bench.records import BenchReport, Ceilings, DecodeResult, DecodeShape, MixedResult, PrefillResult
from kernels.reference.online_softmax import OnlineSoftmaxRun
from kernels.theory import (
    attainable_tflops, decode_contender_bytes, decode_flops, mixed_contender_bytes,
    prefill_contender_bytes, tflops,
)
from ui.kernel_theory import DTYPE_BYTES, hardware_from_ceilings
from ui.kernel_tables import CONTENDER_NAMES
from ui.kernel_tables import contender_name as _name

__all__ = ["roofline_rows", "roofline_figure", "roofline_points_frame", "decode_sweep_rows", "prefill_sweep_rows",
           "sweep_figure", "memory_figure", "softmax_step_figure", "shape_labels", "plot_config", "CONTENDER_STYLE",
           "ROOFLINE_FORMATS", "AXIS_TITLES"]

# One colour and marker per contender, so points at the same place stay apart by shape; keyed
# by the contender's shown name (:data:`ui.kernel_tables.CONTENDER_NAMES`), set here by its id.
_STYLE_BY_ID = {
    "triton_paged": ("#1f77b4", "circle"),
    "triton_paged_fp8": ("#ff7f0e", "diamond"),
    "triton_paged_int4": ("#9467bd", "star"),
    "gather_sdpa": ("#8c564b", "triangle-up"),
    "sdpa_flash": ("#2ca02c", "square"),
    "sdpa_cudnn": ("#d62728", "x"),
    "sdpa_efficient": ("#17becf", "cross"),
    "naive": ("#7f7f7f", "triangle-down"),
    "cudnn_paged": ("#e377c2", "hourglass"),
    "flashinfer_tc": ("#bcbd22", "hexagon"),
    "flashinfer_cuda": ("#dbdb8d", "bowtie"),
    "flashinfer_tc_fp8": ("#ffbb78", "diamond-wide"),
    "flashinfer_cuda_fp8": ("#c49c94", "diamond-tall"),
    "triton_flash": ("#1f77b4", "circle"),
    "triton_flash_tl": ("#aec7e8", "pentagon"),
    "triton_chunked": ("#1f77b4", "circle"),
    "triton_chunked_split": ("#ff7f0e", "diamond"),
}
CONTENDER_STYLE = {CONTENDER_NAMES[c]: style for c, style in _STYLE_BY_ID.items()}


def plot_config(name: str) -> dict:
    """``st.plotly_chart``'s config: the mode bar's camera saves a 2x PNG called ``name``."""
    filename = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")[:80] or "chart"
    return {"displaylogo": False,
            "toImageButtonOptions": {"format": "png", "filename": filename, "scale": 2}}


def shape_labels(records: tuple[DecodeResult, ...] | tuple[PrefillResult, ...]) -> list[str]:
    """One label per record of a report section, for the shape picker (dtypes by their glossary
    names; one the glossary does not know, from an uploaded file, as written)."""
    return [f"{r.shape.label} {DTYPE_LABELS.get(r.shape.dtype, r.shape.dtype)}" if getattr(r.shape, "dtype", None)
            else r.shape.label for r in records]


def roofline_rows(result: DecodeResult | PrefillResult) -> pd.DataFrame:
    """x = FLOPs per HBM byte (the contender's least traffic), y = achieved TFLOP/s."""
    rows = []
    for m in result.measurements:
        if m.status != "ok" or not m.median_ms:
            continue
        if isinstance(result, MixedResult):
            s = result.shape
            flops = result.flops
            nbytes = mixed_contender_bytes(m.contender, q_lens=s.q_lens, seq_lens=s.seq_lens, n_q_heads=s.n_q_heads,
                                           n_kv_heads=s.n_kv_heads, head_dim=s.head_dim,
                                           bytes_per_value=DTYPE_BYTES.get(s.dtype, 2))
        elif isinstance(result, DecodeResult):
            s = result.shape
            flops = decode_flops(s.batch, s.context, s.n_q_heads, s.head_dim)
            nbytes = decode_contender_bytes(m.contender, batch=s.batch, context=s.context,
                                            n_q_heads=s.n_q_heads, n_kv_heads=s.n_kv_heads, head_dim=s.head_dim,
                                            bytes_per_value=DTYPE_BYTES.get(s.dtype, 2))
        else:
            s = result.shape
            flops = result.flops
            nbytes = prefill_contender_bytes(m.contender, batch=s.batch, seq_len=s.seq_len, n_q_heads=s.n_q_heads,
                                             n_kv_heads=s.n_kv_heads, head_dim=s.head_dim,
                                             bytes_per_value=DTYPE_BYTES.get(s.dtype, 2))
        rows.append({"contender": _name(m.contender), "intensity": flops / nbytes,
                     "tflops": tflops(flops, m.median_ms), "median ms": m.median_ms})
    return pd.DataFrame(rows, columns=["contender", "intensity", "tflops", "median ms"])


def roofline_figure(result: DecodeResult | PrefillResult | MixedResult, ceilings: Ceilings) -> go.Figure:
    """Points per contender under the measured and datasheet roofs (log-log).

    Contenders on the same shape often share an intensity and land within a few percent of
    each other (all the contiguous SDPA backends read the same bytes), so each has its own
    colour and marker, drawn hollow and in decreasing sizes: coincident points show as rings.
    """
    pts = roofline_rows(result)
    lo = 0.3 if pts.empty else max(0.1, float(pts["intensity"].min()) / 3)
    hi = 3000.0 if pts.empty else max(3000.0, float(pts["intensity"].max()) * 3)
    xs = np.geomspace(lo, hi, 200)
    fig = go.Figure()
    for measured, dash in ((True, "solid"), (False, "dash")):
        hw = hardware_from_ceilings(ceilings, measured=measured)
        if hw is None:
            continue
        ys = [attainable_tflops(x, hbm_tbps=hw.hbm_tbps, tflops=hw.tflops) for x in xs]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line={"dash": dash, "color": "grey"},
                                 name=f"roof, {hw.name}: {hw.hbm_tbps:.2f} TB/s, {hw.tflops:.0f} TFLOP/s"))
    for i, row in enumerate(pts.itertuples()):
        color, symbol = CONTENDER_STYLE.get(row.contender, ("#c7c7c7", "asterisk"))
        fig.add_trace(go.Scatter(
            x=[row.intensity], y=[row.tflops], mode="markers", name=row.contender,
            marker={"size": max(10, 22 - 2 * i), "color": color, "symbol": f"{symbol}-open",
                    "line": {"width": 2.5, "color": color}},
            hovertemplate=f"{row.contender}<br>%{{x:.2f}} FLOP/B<br>%{{y:.2f}} TFLOP/s"
                          f"<br>{row._4 * 1e3:,.1f} µs<extra></extra>"))
    fig.update_layout(title=f"Roofline: {result.shape.label}", xaxis_title="arithmetic intensity (FLOP per HBM byte)",
                      yaxis_title="achieved rate (TFLOP/s)", xaxis_type="log", yaxis_type="log", height=480,
                      hovermode="closest", legend={"title": {"text": "contender (hollow markers)"}})
    return fig


def roofline_points_frame(result: DecodeResult | PrefillResult | MixedResult) -> pd.DataFrame:
    """The roofline's points as a readable table (points that overlap on the chart stay apart here)."""
    pts = roofline_rows(result)
    return pd.DataFrame({"Contender": pts["contender"], "FLOP per HBM byte": pts["intensity"],
                         "TFLOP/s": pts["tflops"], "Time (µs)": pts["median ms"] * 1e3})


ROOFLINE_FORMATS = {"FLOP per HBM byte": ",.2f", "TFLOP/s": ",.2f", "Time (µs)": ",.1f"}


def _same_heads(a: DecodeShape, b: DecodeShape) -> bool:
    return (a.n_q_heads, a.n_kv_heads, a.head_dim, a.block_size, a.dtype) == (
        b.n_q_heads, b.n_kv_heads, b.head_dim, b.block_size, b.dtype)


def decode_sweep_rows(report: BenchReport, shape: DecodeShape, axis: str) -> pd.DataFrame:
    """TB/s of every contender along ``axis`` ("context" at the shape's batch, or "batch" at its
    context), over the report's decode records with the same heads, head dim, block and dtype."""
    fixed = "batch" if axis == "context" else "context"
    rows = []
    for r in report.decode:
        if not _same_heads(r.shape, shape) or getattr(r.shape, fixed) != getattr(shape, fixed):
            continue
        for m in r.measurements:
            if m.status == "ok" and m.rate is not None:
                rows.append({axis: getattr(r.shape, axis), "contender": _name(m.contender), "TB/s": m.rate})
    return pd.DataFrame(rows, columns=[axis, "contender", "TB/s"]).sort_values([axis, "contender"])


def prefill_sweep_rows(report: BenchReport, causal: bool, head_dim: int, dtype: str) -> pd.DataFrame:
    rows = []
    for r in report.prefill:
        s = r.shape
        if s.causal != causal or s.head_dim != head_dim or s.dtype != dtype:
            continue
        for m in r.measurements:
            if m.status == "ok" and m.rate is not None:
                rows.append({"N": s.seq_len, "contender": _name(m.contender), "TFLOP/s": m.rate,
                             "heads": f"{s.n_q_heads}/{s.n_kv_heads}", "batch": s.batch})
    return pd.DataFrame(rows, columns=["N", "contender", "TFLOP/s", "heads", "batch"]).sort_values(["N", "contender"])


AXIS_TITLES = {"context": "context per sequence (tokens)", "batch": "batch (sequences)", "N": "N (tokens per sequence)",
               "TB/s": "KV read rate (TB/s)", "TFLOP/s": "achieved rate (TFLOP/s)"}


def sweep_figure(rows: pd.DataFrame, x: str, y: str, title: str) -> go.Figure:
    """Lines per contender (log-2 x axis: the sweeps double)."""
    fig = go.Figure()
    for contender, part in rows.groupby("contender", sort=False):
        part = part.groupby(x, as_index=False)[y].max()  # one point per x even if shapes repeat
        color, symbol = CONTENDER_STYLE.get(contender, (None, "circle"))
        fig.add_trace(go.Scatter(x=part[x], y=part[y], mode="lines+markers", name=contender,
                                 marker={"symbol": symbol, "size": 9}, line={"color": color}))
    fig.update_layout(title=title, xaxis_title=AXIS_TITLES.get(x, x), yaxis_title=AXIS_TITLES.get(y, y),
                      xaxis_type="log", height=420)
    fig.update_xaxes(dtick=np.log10(2) * 1)
    return fig


def memory_figure(rows: pd.DataFrame) -> go.Figure:
    """Peak memory and time against N, naive and tiled; failed points marked on the axis."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("peak memory above the inputs (GiB)", "median time (ms)"))
    for i, (contender, part) in enumerate(rows.groupby("Contender", sort=False)):
        ok = part[part["Status"] == "ok"]
        color = ["#d62728", "#1f77b4", "#2ca02c"][i % 3]
        for col, y in ((1, "Peak above inputs (GiB)"), (2, "Median (ms)")):
            fig.add_trace(go.Scatter(x=ok["N (tokens)"], y=ok[y], mode="lines+markers", name=contender,
                                     line={"color": color}, showlegend=col == 1), row=1, col=col)
        failed = part[part["Status"] != "ok"]
        if not failed.empty:
            fig.add_trace(go.Scatter(x=failed["N (tokens)"], y=[0.0] * len(failed), mode="markers+text",
                                     marker={"symbol": "x", "size": 14, "color": color},
                                     text=failed["Status"].str.upper(), textposition="top center",
                                     name=f"{contender}: {', '.join(sorted(set(failed['Status'])))}"),
                          row=1, col=1)
    fig.update_xaxes(type="log", title_text="N (tokens per sequence)")
    fig.update_yaxes(title_text="peak memory above the inputs (GiB)", row=1, col=1)
    fig.update_yaxes(title_text="median time (ms)", row=1, col=2)
    fig.update_layout(height=420, title="Naive against tiled attention as N grows")
    return fig


def softmax_step_figure(run: OnlineSoftmaxRun, step_index: int) -> go.Figure:
    """One step of the walk-through: the score tile, the running max and sum of its rows."""
    st_ = run.steps[step_index]
    fig = make_subplots(rows=1, cols=3, column_widths=[0.45, 0.275, 0.275],
                        subplot_titles=(f"S tile: rows {st_.rows[0]}–{st_.rows[1] - 1}, "
                                        f"keys {st_.cols[0]}–{st_.cols[1] - 1}",
                                        "running max m (old → new)", "running sum ℓ"))
    rows = list(range(*st_.rows))
    scores = np.where(np.isfinite(st_.scores), st_.scores, np.nan)
    # The colour bar lies under the heat map, horizontally: at its right it would cover the
    # next panel's y axis.
    fig.add_trace(go.Heatmap(z=scores, x=list(range(*st_.cols)), y=rows, colorscale="Viridis", name="S",
                             colorbar={"orientation": "h", "x": 0.225, "xanchor": "center", "y": -0.32,
                                       "len": 0.45, "thickness": 12, "title": {"text": "score q·k / √d",
                                                                              "side": "top"}}),
                  row=1, col=1)
    m_old = np.where(np.isfinite(st_.m_old), st_.m_old, np.nan)
    fig.add_trace(go.Bar(x=rows, y=m_old, name="m before"), row=1, col=2)
    fig.add_trace(go.Bar(x=rows, y=st_.m_new, name="m after"), row=1, col=2)
    fig.add_trace(go.Bar(x=rows, y=st_.l, name="ℓ after"), row=1, col=3)
    fig.update_yaxes(autorange="reversed", title_text="query row", row=1, col=1)
    fig.update_xaxes(title_text="key index", row=1, col=1)
    for col, what in ((2, "running max m (score units)"), (3, "running sum ℓ (Σ e^(s − m))")):
        fig.update_xaxes(title_text="query row", row=1, col=col)
        fig.update_yaxes(title_text=what, row=1, col=col)
    fig.update_layout(height=460, barmode="group", title=f"Step {step_index + 1} of {len(run.steps)}",
                      margin={"b": 110}, legend={"orientation": "h", "y": 1.18, "x": 1, "xanchor": "right"})
    return fig

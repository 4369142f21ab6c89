"""Tables and plotly figures of benchmark records for the live kernel page (no streamlit here).

Everything takes the benchmark's records (``kernels.bench.records``), so a run made in this
session, the H200 results shipped in the repository and an uploaded JSON are drawn by the same
code. Rates are decimal (TB/s, TFLOP/s); memory in GiB (2^30); times in ms or µs as labelled.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from kernels.bench.live import InterpreterCheck
from kernels.bench.records import BenchReport, Ceilings, DecodeResult, DecodeShape, MixedResult, PrefillResult
from kernels.online_softmax import OnlineSoftmaxRun
from kernels.theory import (
    Hardware, attainable_tflops, decode_contender_bytes, decode_flops, decode_model, mixed_contender_bytes,
    prefill_contender_bytes, prefill_model, tflops,
)

__all__ = ["CONTENDER_NAMES", "measurement_table", "roofline_rows", "roofline_figure", "decode_sweep_rows",
           "prefill_sweep_rows", "sweep_figure", "memory_rows", "memory_figure", "theory_rows",
           "softmax_step_figure", "hardware_from_ceilings", "DTYPE_BYTES", "target_rows", "interpreter_rows",
           "shape_labels", "mixed_rows"]

CONTENDER_NAMES = {
    "triton_paged": "Triton paged decode",
    "triton_paged_fp8": "Triton paged decode, FP8 KV",
    "gather_sdpa": "gather pages, then SDPA",
    "sdpa_flash": "SDPA FLASH (contiguous)",
    "sdpa_cudnn": "SDPA cuDNN (contiguous)",
    "sdpa_efficient": "SDPA EFFICIENT (contiguous)",
    "naive": "naive softmax(QKᵀ)V",
    "triton_flash": "Triton tiled forward",
    "triton_chunked": "Triton chunked prefill, one launch",
    "triton_chunked_split": "Triton chunked prefill, chunks and rows in two launches",
}
DTYPE_BYTES = {"bf16": 2, "fp16": 2}
GIB = 2**30


def _name(contender: str) -> str:
    return CONTENDER_NAMES.get(contender, contender)


def _pct(x: float | None) -> float | None:
    return None if x is None else 100.0 * x


def measurement_table(result: DecodeResult | PrefillResult) -> pd.DataFrame:
    """One row per contender of one shape: time, rate, shares of the ceilings, error, memory."""
    rows = []
    for m in result.measurements:
        rows.append({
            "contender": _name(m.contender),
            "status": m.status,
            "median ms": m.median_ms,
            f"rate ({m.unit or 'n/a'})": m.rate,
            "% of measured ceiling": _pct(m.share_of_measured),
            "% of datasheet": _pct(m.share_of_datasheet),
            "max abs error vs fp32 reference": m.max_abs_err,
            "extra memory MiB": None if m.peak_bytes is None else m.peak_bytes / 2**20,
            "note": m.note,
        })
    return pd.DataFrame(rows)


def target_rows(report: BenchReport) -> list[dict]:
    """The report's targets as table rows."""
    return [{"target": t.name, "measured": t.measured, "required": t.required, "met": t.met, "detail": t.detail}
            for t in report.targets]


def interpreter_rows(checks: tuple[InterpreterCheck, ...]) -> list[dict]:
    """The interpreter check's records as table rows."""
    return [{"kernel": c.kernel, "dtype": c.dtype, "shape": c.shape, "max abs error": c.max_abs_err,
             "tolerance": c.tolerance, "ok": c.ok, "seconds": round(c.seconds, 2)} for c in checks]


def shape_labels(records: tuple[DecodeResult, ...] | tuple[PrefillResult, ...]) -> list[str]:
    """One label per record of a report section, for the shape picker."""
    return [f"{r.shape.label} {getattr(r.shape, 'dtype', '')}" for r in records]


def hardware_from_ceilings(ceilings: Ceilings, *, measured: bool) -> Hardware | None:
    """The measured ceilings (None if not measured) or the datasheet's, as a ``Hardware``.

    The copy figure counts read + write bytes, which is the streaming bandwidth a kernel that
    reads one stream and writes another sees; it is used as the HBM bandwidth as it stands.
    """
    if measured:
        if ceilings.copy_tbps is None or ceilings.matmul_tflops is None:
            return None
        return Hardware(name="measured in this run", hbm_tbps=ceilings.copy_tbps, tflops=ceilings.matmul_tflops)
    return Hardware(name="datasheet", hbm_tbps=ceilings.datasheet_tbps, tflops=ceilings.datasheet_tflops)


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
            nbytes = decode_contender_bytes(m.contender, batch=s.batch, context=s.context, n_q_heads=s.n_q_heads,
                                            n_kv_heads=s.n_kv_heads, head_dim=s.head_dim,
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


def roofline_figure(result: DecodeResult | PrefillResult, ceilings: Ceilings) -> go.Figure:
    """Points per contender under the measured and datasheet roofs (log-log)."""
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
    for row in pts.itertuples():
        fig.add_trace(go.Scatter(x=[row.intensity], y=[row.tflops], mode="markers", marker={"size": 12},
                                 name=row.contender,
                                 hovertemplate=f"{row.contender}<br>%{{x:.2f}} FLOP/B<br>%{{y:.2f}} TFLOP/s"
                                               f"<br>{row._4:.3f} ms<extra></extra>"))
    fig.update_layout(title=f"Roofline: {result.shape.label}", xaxis_title="arithmetic intensity (FLOP per HBM byte)",
                      yaxis_title="achieved TFLOP/s", xaxis_type="log", yaxis_type="log", height=460)
    return fig


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


def mixed_rows(report: BenchReport) -> pd.DataFrame:
    """TFLOP/s and time of every contender on every mixed batch of a report."""
    rows = [{"batch": r.shape.label, "contender": _name(m.contender), "TFLOP/s": m.rate, "median ms": m.median_ms}
            for r in report.mixed for m in r.measurements if m.status == "ok" and m.rate is not None]
    return pd.DataFrame(rows, columns=["batch", "contender", "TFLOP/s", "median ms"])


def sweep_figure(rows: pd.DataFrame, x: str, y: str, title: str) -> go.Figure:
    """Lines per contender (log-2 x axis: the sweeps double)."""
    fig = go.Figure()
    for contender, part in rows.groupby("contender", sort=False):
        part = part.groupby(x, as_index=False)[y].max()  # one point per x even if shapes repeat
        fig.add_trace(go.Scatter(x=part[x], y=part[y], mode="lines+markers", name=contender))
    fig.update_layout(title=title, xaxis_title=x, yaxis_title=y, xaxis_type="log", height=420)
    fig.update_xaxes(dtick=np.log10(2) * 1)
    return fig


def memory_rows(report: BenchReport) -> pd.DataFrame:
    rows = [{"N": p.seq_len, "contender": _name(p.contender), "status": p.status,
             "peak GiB": None if p.peak_bytes is None else p.peak_bytes / GIB, "median ms": p.median_ms,
             "heads": p.n_heads, "head dim": p.head_dim, "note": p.note} for p in report.memory]
    return pd.DataFrame(rows, columns=["N", "contender", "status", "peak GiB", "median ms", "heads", "head dim",
                                       "note"])


def memory_figure(rows: pd.DataFrame) -> go.Figure:
    """Peak memory and time against N, naive and tiled; failed points marked on the axis."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("peak memory above the inputs (GiB)", "median time (ms)"))
    for i, (contender, part) in enumerate(rows.groupby("contender", sort=False)):
        ok = part[part["status"] == "ok"]
        color = ["#d62728", "#1f77b4", "#2ca02c"][i % 3]
        for col, y in ((1, "peak GiB"), (2, "median ms")):
            fig.add_trace(go.Scatter(x=ok["N"], y=ok[y], mode="lines+markers", name=contender,
                                     line={"color": color}, showlegend=col == 1), row=1, col=col)
        failed = part[part["status"] != "ok"]
        if not failed.empty:
            fig.add_trace(go.Scatter(x=failed["N"], y=[0.0] * len(failed), mode="markers+text",
                                     marker={"symbol": "x", "size": 14, "color": color},
                                     text=failed["status"].str.upper(), textposition="top center",
                                     name=f"{contender}: {', '.join(sorted(set(failed['status'])))}"),
                          row=1, col=1)
    fig.update_xaxes(type="log", title_text="N (tokens)")
    fig.update_layout(height=420, title="Naive against tiled attention as N grows")
    return fig


def theory_rows(result: DecodeResult | PrefillResult, ceilings: Ceilings) -> pd.DataFrame:
    """The reference page's model for this shape beside the measured times (µs)."""
    rows = []
    for measured in (True, False):
        hw = hardware_from_ceilings(ceilings, measured=measured)
        if hw is None:
            continue
        if isinstance(result, MixedResult):
            s = result.shape
            memory_s, compute_s = hw.seconds_to_move(result.hbm_bytes), hw.seconds_to_compute(result.flops)
            rows += [
                {"quantity": f"batch: sequences / query tokens / decode rows ({hw.name})",
                 "model": f"{len(s.q_lens)} / {sum(s.q_lens):,} / {s.n_decode}"},
                {"quantity": f"FLOPs of the visible (query, key) pairs / least HBM bytes ({hw.name})",
                 "model": f"{result.flops / 1e12:,.3f} TFLOP / {result.hbm_bytes / 1e9:,.3f} GB "
                          f"({result.flops / result.hbm_bytes:,.0f} FLOP/B)"},
                {"quantity": f"memory-bound / compute-bound time ({hw.name})",
                 "model": f"{memory_s * 1e6:,.1f} µs / {compute_s * 1e6:,.1f} µs → "
                          f"{'memory' if memory_s > compute_s else 'compute'}-bound"},
            ]
        elif isinstance(result, PrefillResult):
            s = result.shape
            model = prefill_model(seq_len=s.seq_len, head_dim=s.head_dim, n_heads=s.n_q_heads, batch=s.batch,
                                  bytes_per_value=DTYPE_BYTES.get(s.dtype, 2), hardware=hw, causal=s.causal)
            rows += [
                {"quantity": f"N×N matrix per head / whole shape ({hw.name})",
                 "model": f"{model.matrix_bytes_per_head / 2**20:,.1f} MiB / {model.matrix_bytes_layer / GIB:,.2f} GiB"},
                {"quantity": f"HBM traffic standard / tiled ({hw.name})",
                 "model": f"{model.standard_traffic_layer / 1e9:,.3f} GB / {model.tiled_traffic_layer / 1e9:,.4f} GB"
                          f" ({model.traffic_ratio:.0f}× less)"},
                {"quantity": f"standard: memory-bound / compute-bound time ({hw.name})",
                 "model": f"{model.standard_memory_s * 1e6:,.1f} µs / {model.compute_s * 1e6:,.1f} µs "
                          f"→ {model.standard_bound}-bound"},
                {"quantity": f"tiled: memory-bound / compute-bound time ({hw.name})",
                 "model": f"{model.tiled_memory_s * 1e6:,.2f} µs / {model.compute_s * 1e6:,.1f} µs "
                          f"→ {model.tiled_bound}-bound"},
            ]
        else:
            s = result.shape
            model = decode_model(batch=s.batch, context=s.context, n_q_heads=s.n_q_heads, n_kv_heads=s.n_kv_heads,
                                 head_dim=s.head_dim, bytes_per_value=DTYPE_BYTES.get(s.dtype, 2), hardware=hw)
            rows.append({"quantity": f"KV bytes ÷ bandwidth ({hw.name})",
                         "model": f"{model.kv_bytes / 1e9:,.3f} GB ÷ {hw.hbm_tbps:.2f} TB/s = "
                                  f"{model.memory_s * 1e6:,.1f} µs ({model.intensity:.0f} FLOP/B)"})
    for m in result.measurements:
        if m.status == "ok" and m.median_ms:
            rows.append({"quantity": f"measured: {_name(m.contender)}", "model": f"{m.median_ms * 1e3:,.1f} µs"})
    return pd.DataFrame(rows, columns=["quantity", "model"])


def softmax_step_figure(run: OnlineSoftmaxRun, step_index: int) -> go.Figure:
    """One step of the walk-through: the score tile, the running max and sum of its rows."""
    st_ = run.steps[step_index]
    fig = make_subplots(rows=1, cols=3, column_widths=[0.45, 0.275, 0.275],
                        subplot_titles=(f"S tile: rows {st_.rows[0]}–{st_.rows[1] - 1}, "
                                        f"keys {st_.cols[0]}–{st_.cols[1] - 1}",
                                        "running max m (old → new)", "running sum ℓ"))
    rows = list(range(*st_.rows))
    scores = np.where(np.isfinite(st_.scores), st_.scores, np.nan)
    fig.add_trace(go.Heatmap(z=scores, x=list(range(*st_.cols)), y=rows, colorscale="Viridis",
                             colorbar={"x": 0.42, "len": 0.9}, name="S"), row=1, col=1)
    m_old = np.where(np.isfinite(st_.m_old), st_.m_old, np.nan)
    fig.add_trace(go.Bar(x=rows, y=m_old, name="m before"), row=1, col=2)
    fig.add_trace(go.Bar(x=rows, y=st_.m_new, name="m after"), row=1, col=2)
    fig.add_trace(go.Bar(x=rows, y=st_.l, name="ℓ after"), row=1, col=3)
    fig.update_yaxes(autorange="reversed", row=1, col=1)
    fig.update_layout(height=380, barmode="group", title=f"Step {step_index + 1} of {len(run.steps)}")
    return fig

"""The live kernel page's tables: readable headers, words for statuses, rounding for the eye.

Each table comes twice: a numeric frame (what the CSV download holds: full precision, empty
cells where nothing was measured) and :func:`shown`, the same frame as text for the screen
(units in the headers, a dash where nothing was measured, digits a reader can compare).
No streamlit here; rates are decimal (TB/s, TFLOP/s), times in µs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import math
from collections.abc import Mapping

import pandas as pd

from glossary import dtype_label
from kernels.bench.records import (
    BenchReport, DecodeResult, Measurement, MixedResult, PrefillResult, measured_text, required_text,
)
from kernels.bench.target_notes import label_of, limit_of

if TYPE_CHECKING:  # the interpreter check needs Triton; these tables must not (the page's no-Triton view)
    from kernels.bench.live import InterpreterCheck

__all__ = ["CONTENDER_NAMES", "STATUS_WORDS", "MISSING", "contender_name", "shown", "measurement_frame",
           "measurement_formats", "target_frame", "interpreter_frame", "memory_frame",
           "mixed_frame", "theory_frame"]

FP8, INT4 = dtype_label("fp8"), dtype_label("int4")  # the formats by the names every page uses
CONTENDER_NAMES = {
    "triton_paged": "Triton paged decode",
    "triton_paged_fp8": f"Triton paged decode, {FP8} KV",
    "triton_paged_int4": f"Triton paged decode, {INT4} KV",
    "gather_sdpa": "gather pages, then SDPA",
    "sdpa_flash": "SDPA FLASH (contiguous)",
    "sdpa_cudnn": "SDPA cuDNN (contiguous)",
    "sdpa_efficient": "SDPA EFFICIENT (contiguous)",
    "cudnn_paged": "cuDNN paged SDPA",
    "flashinfer_tc": "FlashInfer decode, tensor cores",
    "flashinfer_cuda": "FlashInfer decode, CUDA cores",
    "flashinfer_tc_fp8": f"FlashInfer decode, tensor cores, {FP8} KV",
    "flashinfer_cuda_fp8": f"FlashInfer decode, CUDA cores, {FP8} KV",
    "naive": "naive softmax(QKᵀ)V",
    "triton_flash": "Triton tiled forward",
    "triton_flash_tl": "Triton tiled forward, triton.language kernel",
    "triton_chunked": "Triton chunked prefill, one launch",
    "triton_chunked_split": "Triton chunked prefill, chunks and rows in two launches",
}
STATUS_WORDS = {"ok": "ok", "oom": "out of memory", "unsupported": "unsupported", "error": "error",
                "not_available": "not available", "skipped": "skipped"}
MISSING = "—"  # what a cell shows where nothing was measured
# The bf16 kernel each kernel's "× Triton BF16" column compares with (the decode kernel's own dtype).
_OURS = {"decode": "triton_paged", "prefill": "triton_flash", "mixed": "triton_chunked"}


def us_text(ms: float | None) -> str:
    """Milliseconds as a microsecond cell (``0.2569`` → ``"256.9"``), :data:`MISSING` for none."""
    return MISSING if ms is None else f"{ms * 1e3:,.1f}"


def times_text(value: float | None) -> str:
    """A ratio cell (``23.17×``), :data:`MISSING` for none."""
    return MISSING if value is None else f"{value:,.2f}×"


def contender_name(contender: str) -> str:
    return CONTENDER_NAMES.get(contender, contender.replace("_", " "))


def _num(x: float | None) -> float:
    return math.nan if x is None else float(x)


def _cell(x: object, spec: str) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return MISSING
    if isinstance(x, str):
        return x or MISSING
    return format(x, spec)


def shown(frame: pd.DataFrame, formats: Mapping[str, str]) -> pd.DataFrame:
    """``frame`` as text: each column in ``formats`` with its format spec, missing cells a dash,
    other columns as they are (text columns' empty cells a dash too)."""
    out = pd.DataFrame(index=frame.index)
    for column in frame.columns:
        spec = formats.get(column, "")
        out[column] = [_cell(v, spec) for v in frame[column]]
    return out


def _graph_and_eager_us(m: Measurement) -> tuple[float, float]:
    """(CUDA-graph replay, eager call) in µs; a measurement timed eagerly has no graph figure."""
    if m.status != "ok":
        return math.nan, math.nan
    if m.timing == "cuda_graph":
        return _num(m.median_ms) * 1e3, _num(m.eager_ms) * 1e3
    return math.nan, _num(m.median_ms) * 1e3


def _speed_over(result, baseline: str, m: Measurement) -> float:
    """How many times faster ``m`` ran than ``baseline`` on the same shape (time ratio)."""
    base = result.get(baseline)
    if m.status != "ok" or not m.median_ms or base is None or base.status != "ok" or not base.median_ms:
        return math.nan
    return base.median_ms / m.median_ms


def _kind(result) -> str:
    return "mixed" if isinstance(result, MixedResult) else "prefill" if isinstance(result, PrefillResult) else "decode"


def measurement_frame(result: DecodeResult | PrefillResult | MixedResult) -> pd.DataFrame:
    """One row per contender of one shape: both times, rate, ratios to cuDNN and to our bf16
    kernel, shares of the ceilings, error and extra memory (NaN where not measured)."""
    unit = next((m.unit for m in result.measurements if m.unit), "TB/s")
    rows = []
    for m in result.measurements:
        graph_us, eager_us = _graph_and_eager_us(m)
        rows.append({
            "Contender": contender_name(m.contender),
            "Status": STATUS_WORDS.get(m.status, m.status),
            "CUDA-graph replay (µs)": graph_us,
            "Eager call (µs)": eager_us,
            f"Rate ({unit})": _num(m.rate) if m.status == "ok" else math.nan,
            "× cuDNN": _speed_over(result, "sdpa_cudnn", m),
            "× Triton BF16": _speed_over(result, _OURS[_kind(result)], m),
            "% of measured ceiling": 100 * _num(m.share_of_measured),
            "% of datasheet": 100 * _num(m.share_of_datasheet),
            "Max abs error vs fp32": _num(m.max_abs_err),
            "Extra memory (MiB)": math.nan if m.peak_bytes is None else m.peak_bytes / 2**20,
            "Note": m.note,
        })
    return pd.DataFrame(rows)


def measurement_formats(frame: pd.DataFrame) -> dict[str, str]:
    rate = next(c for c in frame.columns if c.startswith("Rate"))
    return {"CUDA-graph replay (µs)": ",.1f", "Eager call (µs)": ",.1f", rate: ",.2f", "× cuDNN": ".3f",
            "× Triton BF16": ".2f", "% of measured ceiling": ".0f", "% of datasheet": ".0f",
            "Max abs error vs fp32": ".1e", "Extra memory (MiB)": ",.0f"}


def target_frame(report: BenchReport) -> pd.DataFrame:
    """Every target of the report: its id and what it compares in plain words, measured, required
    (≥ or ≤), met, the worst shape and, for an unmet target, what limits it. Cells are text:
    ``Measured`` by :func:`kernels.bench.records.measured_text`."""
    rows = [{"Target": t.name,
             "In plain words": label_of(t.name),
             "Measured": measured_text(t),
             "Required": required_text(t),
             "Met": "yes" if t.met else "no",
             "Worst shape": t.detail,
             "What limits it": limit_of(t) or ""} for t in report.targets]
    return pd.DataFrame(rows, columns=["Target", "In plain words", "Measured", "Required", "Met", "Worst shape",
                                       "What limits it"])


def interpreter_frame(checks: tuple[InterpreterCheck, ...]) -> pd.DataFrame:
    """The interpreter check's records."""
    return pd.DataFrame([{"Kernel": c.kernel, "Dtype": c.dtype, "Shape": c.shape, "Max abs error": c.max_abs_err,
                          "Tolerance": c.tolerance, "Within tolerance": "yes" if c.ok else "no",
                          "Seconds": c.seconds} for c in checks],
                        columns=["Kernel", "Dtype", "Shape", "Max abs error", "Tolerance", "Within tolerance",
                                 "Seconds"])


INTERPRETER_FORMATS = {"Max abs error": ".1e", "Tolerance": ".1e", "Seconds": ".2f"}


def memory_frame(report: BenchReport) -> pd.DataFrame:
    """Naive against tiled peak memory and time, one row per (N, contender)."""
    rows = [{"N (tokens)": p.seq_len, "Contender": contender_name(p.contender),
             "Status": STATUS_WORDS.get(p.status, p.status),
             "Peak above inputs (GiB)": math.nan if p.peak_bytes is None else p.peak_bytes / 2**30,
             "Median (ms)": _num(p.median_ms), "Heads": p.n_heads, "Head dim": p.head_dim, "Note": p.note}
            for p in report.memory]
    return pd.DataFrame(rows, columns=["N (tokens)", "Contender", "Status", "Peak above inputs (GiB)", "Median (ms)",
                                       "Heads", "Head dim", "Note"])


MEMORY_FORMATS = {"N (tokens)": ",d", "Peak above inputs (GiB)": ",.2f", "Median (ms)": ",.3f"}


def mixed_frame(report: BenchReport) -> pd.DataFrame:
    """TFLOP/s and time of every contender on every mixed batch of a report."""
    rows = [{"Batch": r.shape.label, "Contender": contender_name(m.contender), "TFLOP/s": m.rate,
             "Median (ms)": m.median_ms}
            for r in report.mixed for m in r.measurements if m.status == "ok" and m.rate is not None]
    return pd.DataFrame(rows, columns=["Batch", "Contender", "TFLOP/s", "Median (ms)"])


MIXED_FORMATS = {"TFLOP/s": ",.1f", "Median (ms)": ",.3f"}


def theory_frame(rows: list[dict]) -> pd.DataFrame:
    """The theory rows (quantity, model) under readable headers."""
    return pd.DataFrame([{"Quantity": r["quantity"], "Model or measurement": r["model"]} for r in rows],
                        columns=["Quantity", "Model or measurement"])

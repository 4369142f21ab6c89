"""The measured anchor of the step model: whole decode steps of catalogue models timed on a GPU
(``benchmarks/bench_serving_anchor.py`` writes the file), read back strictly and set beside what
:func:`planner.step_model.step_time` predicts for the same model, GPU, batch and context.

A row is one (model, batch, context): a plain-PyTorch decoder with random bf16 weights and a
bf16 paged KV cache, one decode step (every layer, final norm, LM head, argmax) captured in a
CUDA graph and replayed. When the KV cache of every layer does not fit the GPU, the first
``layers_timed`` layers are timed and the layers' share is scaled to ``layers_total``::

    step_ms = head_ms + (step_ms_measured − head_ms) × layers_total ÷ layers_timed

where ``head_ms`` is the same graph with no layers (embedding, final norm, LM head, argmax).
A row that was not measured (memory, time budget, an error) has null figures and says why.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from hardware.gpus import GPU, get_gpu
from inputs.errors import InputError, shown
from kernels.bench.records import Provenance
from kernels.bench.results_json import parse_results, read_results_file, report_to_json, write_results_json
from planner.step_model import ServingSetup, StepShape, step_shape, step_time
from sizing.catalogue import find_entry

__all__ = ["SCHEMA", "SCHEMA_VERSION", "MAX_JSON_BYTES", "AnchorRow", "AnchorReport", "AnchorJsonError",
           "AnchorComparison", "parse_anchor_json", "read_anchor_file", "anchor_to_json", "write_anchor_json",
           "compare", "anchor_setup"]

SCHEMA = "kv-cache-explorer.planner.serving_anchor"
SCHEMA_VERSION = 1
MAX_JSON_BYTES = 4 * 2**20  # three models × 15 shapes is ~20 KB; the cap only refuses junk
MAX_JSON_DEPTH = 6
MAX_ROWS = 10_000
MAX_NOTE_CHARS = 2_000
WEIGHT_FORMATS = ("bf16",)  # what the benchmark builds; the comparison models the same
KV_DTYPES = ("bf16",)
KV_BYTES = {"bf16": 2.0}
_MAX_LAYERS, _MAX_BATCH, _MAX_CONTEXT = 1_000, 1 << 16, 1 << 24


@dataclass(frozen=True, kw_only=True)
class AnchorRow:
    """One timed (or skipped) decode step; times in milliseconds, null when not measured."""

    model: str  # catalogue id
    layers_timed: int  # decoder layers in the timed graph (0 when skipped before building)
    layers_total: int
    batch: int  # sequences decoding, one token each
    context: int  # tokens each sequence attends over, the new one included
    step_ms: float | None  # the whole model's step (scaled when layers_timed < layers_total)
    step_ms_measured: float | None  # the graph as timed
    head_ms: float | None  # embedding, final norm, LM head, argmax: the part not scaled
    replays: int  # timed replays the medians are of (0 when skipped)
    note: str  # how it was built and scaled, or why it was skipped


@dataclass(frozen=True, kw_only=True)
class AnchorReport:
    schema: str
    schema_version: int
    provenance: Provenance
    gpu: str  # hardware catalogue id the rows are compared on ("h200")
    weight_format: str
    kv_dtype: str
    block_size: int  # tokens per KV page
    method: str  # what the graph runs, how experts run, what is left out
    budget_s: float
    wall_s: float
    rows: tuple[AnchorRow, ...]


class AnchorJsonError(InputError):
    """An anchor file that cannot be read; the message names the part that is wrong."""

    def __init__(self, message: str) -> None:
        super().__init__("anchor_json", message)


def _positive_or_null(value: float | None, where: str) -> None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise ValueError(f"{where}: {value!r} is not a positive time")


def _check_row(row: AnchorRow, where: str) -> None:
    if find_entry(row.model) is None:
        raise ValueError(f"{where}.model: {shown(row.model)} is not a catalogue id")
    if not 1 <= row.layers_total <= _MAX_LAYERS:
        raise ValueError(f"{where}.layers_total: {row.layers_total} is outside 1..{_MAX_LAYERS}")
    if not 0 <= row.layers_timed <= row.layers_total:
        raise ValueError(f"{where}.layers_timed: {row.layers_timed} is outside 0..{row.layers_total}")
    if not 1 <= row.batch <= _MAX_BATCH:
        raise ValueError(f"{where}.batch: {row.batch} is outside 1..{_MAX_BATCH}")
    if not 1 <= row.context <= _MAX_CONTEXT:
        raise ValueError(f"{where}.context: {row.context} is outside 1..{_MAX_CONTEXT}")
    for name in ("step_ms", "step_ms_measured", "head_ms"):
        _positive_or_null(getattr(row, name), f"{where}.{name}")
    measured = row.step_ms is not None
    if measured != (row.step_ms_measured is not None) or measured != (row.head_ms is not None):
        raise ValueError(f"{where}.step_ms: step_ms, step_ms_measured and head_ms are all set or all null")
    if measured and (row.layers_timed < 1 or row.replays < 1):
        raise ValueError(f"{where}.replays: a measured row needs replays ≥ 1 and layers_timed ≥ 1")
    if not 0 <= row.replays <= 100_000:
        raise ValueError(f"{where}.replays: {row.replays} is outside 0..100000")
    if measured and row.layers_timed == row.layers_total and row.step_ms != row.step_ms_measured:
        raise ValueError(f"{where}.step_ms: every layer was timed, so it must equal step_ms_measured")
    if len(row.note) > MAX_NOTE_CHARS:
        raise ValueError(f"{where}.note: {len(row.note)} characters (at most {MAX_NOTE_CHARS})")


def _check_semantics(report: AnchorReport) -> None:
    try:
        get_gpu(report.gpu)
    except InputError:
        raise ValueError(f"gpu: {shown(report.gpu)} is not a GPU of the hardware catalogue") from None
    if report.weight_format not in WEIGHT_FORMATS:
        raise ValueError(f"weight_format: {shown(report.weight_format)} not in {WEIGHT_FORMATS}")
    if report.kv_dtype not in KV_DTYPES:
        raise ValueError(f"kv_dtype: {shown(report.kv_dtype)} not in {KV_DTYPES}")
    if not 1 <= report.block_size <= 4096:
        raise ValueError(f"block_size: {report.block_size} is outside 1..4096")
    for name in ("budget_s", "wall_s"):
        value = getattr(report, name)
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"{name}: {value!r} is not a duration")
    if len(report.rows) > MAX_ROWS:
        raise ValueError(f"rows: {len(report.rows)} rows (at most {MAX_ROWS})")
    for i, row in enumerate(report.rows):
        _check_row(row, f"rows[{i}]")


def parse_anchor_json(data: bytes | str) -> AnchorReport:
    """An anchor file's content (bytes or text, never a path), checked field by field.

    Raises
    ------
    AnchorJsonError
        When the content is over :data:`MAX_JSON_BYTES` or too deep, not strict JSON (NaN and
        infinity refused), another schema or version, or has a missing, extra, mistyped or
        out-of-range field (the message names its path, e.g. ``rows[3].batch``).
    """
    return parse_results(data, AnchorReport, error=AnchorJsonError, check=_check_semantics, label="serving anchor",
                         schema=SCHEMA, version=SCHEMA_VERSION, field="anchor_json", max_bytes=MAX_JSON_BYTES,
                         max_depth=MAX_JSON_DEPTH)


def read_anchor_file(path: str | Path) -> AnchorReport:
    """The anchor file at ``path``, read under the size cap."""
    return read_results_file(path, parse_anchor_json, error=AnchorJsonError, max_bytes=MAX_JSON_BYTES,
                             field="anchor_json")


def anchor_to_json(report: AnchorReport) -> str:
    """Strict JSON text (no NaN or infinity), fields in their declared order."""
    _check_semantics(report)
    return report_to_json(report)


def write_anchor_json(report: AnchorReport, path: str | Path) -> Path:
    _check_semantics(report)
    return write_results_json(report, path)


# ---------------------------------------------------------------------------------------------
# Against the step model
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class AnchorComparison:
    """One measured step beside the step model's prediction (ms); ``relative_error`` is
    (predicted − measured) ÷ measured: positive when the model is slower than the GPU."""

    model: str
    batch: int
    context: int
    measured_ms: float
    predicted_ms: float
    relative_error: float
    scaled: bool  # the measured figure was scaled from fewer layers


def anchor_setup(gpu: GPU) -> ServingSetup:
    """How the planner runs a replica on ``gpu`` for this comparison: vLLM with CUDA graphs
    (the plan's defaults), uniform routing (random router weights route about uniformly), and
    this project's decode kernel's read rates, since the anchor's attention is that kernel."""
    return ServingSetup(gpu=gpu, engine="vllm", cuda_graphs=True, attention_backend="kvx")


@lru_cache(maxsize=32)
def _shape(model: str, gpu_id: str, weight_format: str, kv_dtype: str) -> StepShape:
    entry = find_entry(model)
    if entry is None:
        raise InputError("model", f"{shown(model)} is not a catalogue id")
    # The benchmark builds every linear layer in bf16, so a quantised config (gpt-oss's MXFP4
    # experts) is modelled as bf16 too: the format given by hand converts every linear layer.
    return step_shape(entry.config_bytes, tp=1, gpu=get_gpu(gpu_id), weight_format=weight_format,
                      kv_bytes=KV_BYTES[kv_dtype], name=entry.name)


def compare(rows: Iterable[AnchorRow], *, gpu: str = "h200", weight_format: str = "bf16",
            kv_dtype: str = "bf16") -> tuple[AnchorComparison, ...]:
    """The measured rows (skipped ones left out) beside ``step_time`` at TP 1 on ``gpu``."""
    if weight_format not in WEIGHT_FORMATS:
        raise InputError("weight_format", f"{shown(weight_format)} not in {WEIGHT_FORMATS}")
    if kv_dtype not in KV_DTYPES:
        raise InputError("kv_dtype", f"{shown(kv_dtype)} not in {KV_DTYPES}")
    setup = anchor_setup(get_gpu(gpu))
    out = []
    for row in rows:
        if row.step_ms is None:
            continue
        shape = _shape(row.model, gpu, weight_format, kv_dtype)
        predicted = step_time(shape, setup, decode_batch=row.batch, context=row.context).total_s * 1e3
        out.append(AnchorComparison(model=row.model, batch=row.batch, context=row.context, measured_ms=row.step_ms,
                                    predicted_ms=predicted, relative_error=(predicted - row.step_ms) / row.step_ms,
                                    scaled=row.layers_timed < row.layers_total))
    return tuple(out)

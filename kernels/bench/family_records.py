"""Typed records of the attention-families run (sliding windows and sinks); its targets; JSON in and out.

One :class:`FamilyResult` per shape (batch, context, heads, KV pool format) holds the contenders
that attend the whole context (``full``, ``full_sinks``, ``full_auto``) and one
:class:`WindowResult` per sliding window ``W`` (``window_full``, ``sliding``, ``sliding_sinks``,
``sdpa_mask``); :mod:`kernels.bench.families` says what each contender runs. Every measurement is
the harness's own :class:`kernels.bench.records.Measurement`, its rate the bytes it reads::

    bytes read = 2 (K and V) x batch x tokens x n_kv_heads x head_dim x bytes per value
    tokens     = L for full attention, W for a window (the keys the query sees: the kernel never
                 loads a page before the window), and for sdpa_mask L from the pool plus L of the
                 16-bit copy that SDPA reads
    TB/s       = bytes / seconds / 1e12   (the text report shows GB/s: bytes / seconds / 1e9)

Targets (worst shape of the run; a shape with a figure missing leaves its target unmet):

* ``sliding_decode_vs_window_full`` (at most 1.15): sliding over L ÷ full attention over W;
* ``sliding_decode_vs_full`` (at least 3.0): full attention over L (the faster of ``full`` and
  ``full_auto``) ÷ sliding, at shapes with W / L <= 1/8;
* ``sinks_overhead`` (at most 1.03): ``sliding_sinks`` ÷ ``sliding`` and ``full_sinks`` ÷ ``full``.

The file is strict JSON (no NaN: a figure not measured is null) with the harness's provenance,
a schema name and version; :func:`parse_families_json` rebuilds the records with the harness's
typed loader (every field's type checked, unknown fields refused), under a size cap and a depth
limit, and raises :class:`FamiliesJsonError` naming the offending field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from inputs.errors import InputError, shown
from kernels.bench.record_ranges import check_ranges
from kernels.bench.records import STATUSES, Ceilings, Measurement, Provenance, Target, TargetSpec, worst_target
from kernels.bench.results_json import (
    check_target_names, parse_results, read_results_file, report_to_json, write_results_json,
)

__all__ = [
    "SCHEMA", "SCHEMA_VERSION", "KV_FORMATS", "FULL_CONTENDERS", "WINDOW_CONTENDERS", "FAMILY_TARGET_SPECS",
    "MAX_WINDOW_SHARE", "MAX_JSON_BYTES", "MAX_JSON_DEPTH", "FamilyShape", "WindowResult", "FamilyResult",
    "FamiliesReport", "ok_ms", "best_full_ms", "ratio", "compute_family_targets", "families_to_json",
    "write_families_json", "parse_families_json", "read_families_file", "FamiliesJsonError",
]

SCHEMA = "kv-cache-explorer.kernels.bench.families"
SCHEMA_VERSION = 1
KV_FORMATS = ("bf16", "fp8")  # the pool's format (kernels.cache.paged); the query stays 16-bit
FULL_CONTENDERS = ("full", "full_sinks", "full_auto")
WINDOW_CONTENDERS = ("window_full", "sliding", "sliding_sinks", "sdpa_mask")
# sliding_decode_vs_full reads only shapes whose window is at most this share of the context:
# there full attention reads >= 8x the bytes, so a 3x gain is the kernel keeping up with its read.
MAX_WINDOW_SHARE = 1 / 8
MAX_JSON_BYTES = 16 * 2**20  # a full run is a few hundred measurements, well under 1 MB
MAX_JSON_DEPTH = 16  # report → results → window → measurement → field

FAMILY_TARGET_SPECS = (
    TargetSpec(name="sliding_decode_vs_window_full", required=1.15, at_most=True,
               description="sliding-window decode over context L over full attention over a context of W "
                           "tokens (the same pages, the same batch), worst shape"),
    TargetSpec(name="sliding_decode_vs_full", required=3.0,
               description="full attention over L (its faster kernel) over sliding-window decode, worst "
                           "shape with W / L <= 1/8"),
    TargetSpec(name="sinks_overhead", required=1.03, at_most=True,
               description="with sinks over without: sliding_sinks / sliding and full_sinks / full, worst shape"),
)


@dataclass(frozen=True, kw_only=True)
class FamilyShape:
    """One shape of the families sweep: every sequence holds ``context`` tokens."""

    batch: int
    context: int  # tokens per sequence (L)
    n_q_heads: int
    n_kv_heads: int
    head_dim: int
    block_size: int
    kv: str  # the pool's format, one of KV_FORMATS
    dtype: str = "bf16"  # the query's (and the 16-bit pool's) dtype

    @property
    def label(self) -> str:
        return f"B={self.batch} L={self.context} H={self.n_q_heads}/{self.n_kv_heads} d={self.head_dim} {self.kv}"


class _Measured:
    measurements: tuple[Measurement, ...]

    def get(self, contender: str) -> Measurement | None:
        return next((m for m in self.measurements if m.contender == contender), None)


@dataclass(frozen=True, kw_only=True)
class WindowResult(_Measured):
    """The contenders of one sliding window ``W`` on a shape."""

    window: int  # tokens (W)
    num_splits: int | None  # split-KV parts of the sliding call as the timed calls plan it
    measurements: tuple[Measurement, ...]  # from WINDOW_CONTENDERS


@dataclass(frozen=True, kw_only=True)
class FamilyResult(_Measured):
    shape: FamilyShape
    tolerance: str  # the kernels.tolerances entry every max_abs_err is held to, "kernel dtype"
    atol: float  # its bound
    num_splits: int | None  # split-KV parts of the full call over L
    measurements: tuple[Measurement, ...]  # from FULL_CONTENDERS
    windows: tuple[WindowResult, ...]

    def error_misses(self) -> list[str]:
        """``"W=... contender err"`` for each measurement whose error passes ``atol`` or was not checked."""
        rows = [("", m) for m in self.measurements] + [(f"W={w.window} ", m) for w in self.windows
                                                       for m in w.measurements]
        return [f"{where}{m.contender} {'unchecked' if m.max_abs_err is None else f'{m.max_abs_err:.2e}'}"
                for where, m in rows if m.status == "ok" and (m.max_abs_err is None or m.max_abs_err > self.atol)]


@dataclass(frozen=True, kw_only=True)
class FamiliesReport:
    schema: str
    schema_version: int
    provenance: Provenance
    ceilings: Ceilings
    results: tuple[FamilyResult, ...] = ()
    targets: tuple[Target, ...] = ()
    wall_s: float | None = None  # seconds the whole run took (ceilings, pools, compiles and timing)


# ----------------------------------------------------------------------------------------------
# Targets
# ----------------------------------------------------------------------------------------------


def ok_ms(result: _Measured, contender: str) -> float | None:
    """The contender's milliseconds when it ran, else None."""
    m = result.get(contender)
    return m.median_ms if m is not None and m.status == "ok" and m.median_ms else None


def best_full_ms(result: FamilyResult) -> float | None:
    """Full attention over L at its fastest: ``full`` (the Triton kernel) or ``full_auto`` (what a
    plain call picks, where that is another kernel); None when ``full`` did not run."""
    full = ok_ms(result, "full")
    auto = ok_ms(result, "full_auto")
    return None if full is None else min(full, auto) if auto is not None else full


def ratio(num_ms: float | None, den_ms: float | None) -> float | None:
    """``num_ms / den_ms``, None unless both were measured."""
    return num_ms / den_ms if num_ms and den_ms else None


def compute_family_targets(results: tuple[FamilyResult, ...]) -> tuple[Target, ...]:
    """The three targets from the records of one run, each at its worst shape."""
    specs = {s.name: s for s in FAMILY_TARGET_SPECS}
    vs_window, vs_full, sinks = [], [], []
    for r in results:
        sinks.append((f"{r.shape.label} full", ratio(ok_ms(r, "full_sinks"), ok_ms(r, "full"))))
        for w in r.windows:
            label = f"{r.shape.label} W={w.window}"
            sliding = ok_ms(w, "sliding")
            vs_window.append((label, ratio(sliding, ok_ms(w, "window_full"))))
            sinks.append((f"{label} sliding", ratio(ok_ms(w, "sliding_sinks"), sliding)))
            if w.window <= MAX_WINDOW_SHARE * r.shape.context:
                vs_full.append((label, ratio(best_full_ms(r), sliding)))
    return (
        worst_target(vs_window, specs["sliding_decode_vs_window_full"], "no sliding window in this run", listed=4),
        worst_target(vs_full, specs["sliding_decode_vs_full"], "no shape with W / L <= 1/8 in this run", listed=4),
        worst_target(sinks, specs["sinks_overhead"], "no shape in this run", listed=4),
    )


# ----------------------------------------------------------------------------------------------
# JSON
# ----------------------------------------------------------------------------------------------


def families_to_json(report: FamiliesReport) -> str:
    """The report as strict JSON text (no NaN or infinity: a missing figure is null)."""
    return report_to_json(report)


def write_families_json(report: FamiliesReport, path: str | Path) -> Path:
    return write_results_json(report, path)


class FamiliesJsonError(InputError):
    """A families results file that cannot be read; the message says which part is wrong."""

    def __init__(self, message: str) -> None:
        super().__init__("families_json", message)


def _check_measurements(measured: _Measured, allowed: tuple[str, ...], where: str) -> None:
    names = [m.contender for m in measured.measurements]
    if len(set(names)) != len(names) or not set(names) <= set(allowed):
        raise ValueError(f"{where}.measurements: contenders must be distinct names from {allowed}, got {names}")
    for j, m in enumerate(measured.measurements):
        if m.status not in STATUSES:
            raise ValueError(f"{where}.measurements[{j}].status: {shown(m.status)} not in {STATUSES}")


def _check_semantics(report: FamiliesReport) -> None:
    check_ranges(report, "report")
    if report.wall_s is not None and not (math.isfinite(report.wall_s) and report.wall_s >= 0):
        raise ValueError(f"wall_s: {report.wall_s!r} is not a duration")
    for i, r in enumerate(report.results):
        where = f"results[{i}]"
        if r.shape.kv not in KV_FORMATS:
            raise ValueError(f"{where}.shape.kv: {shown(r.shape.kv)} not in {KV_FORMATS}")
        if not (math.isfinite(r.atol) and r.atol > 0):
            raise ValueError(f"{where}.atol: {r.atol!r} is not a positive bound")
        _check_measurements(r, FULL_CONTENDERS, where)
        for j, w in enumerate(r.windows):
            if not 1 <= w.window <= r.shape.context:
                raise ValueError(f"{where}.windows[{j}].window: {w.window} is outside 1..{r.shape.context}")
            _check_measurements(w, WINDOW_CONTENDERS, f"{where}.windows[{j}]")
    check_target_names(report.targets, FAMILY_TARGET_SPECS)


def parse_families_json(data: bytes | str) -> FamiliesReport:
    """A families results file's content (bytes or text, never a path), checked field by field.

    Raises
    ------
    FamiliesJsonError
        When the content is too large or deep, not JSON (NaN and infinity included), another
        schema or version, or has a missing, extra, mistyped or out-of-range field (the message
        names its path).
    """
    return parse_results(data, FamiliesReport, error=FamiliesJsonError, check=_check_semantics, label="families",
                         schema=SCHEMA, version=SCHEMA_VERSION, field="families_json", max_bytes=MAX_JSON_BYTES,
                         max_depth=MAX_JSON_DEPTH)


def read_families_file(path: str | Path) -> FamiliesReport:
    """The families results file at ``path``, read under the size cap."""
    return read_results_file(path, parse_families_json, error=FamiliesJsonError, max_bytes=MAX_JSON_BYTES,
                             field="families_json")

"""Typed records of a benchmark run: shapes, measurements, ceilings, targets; JSON in and out.

Everything that crosses a layer (harness -> CLI, harness -> app page, JSON file -> page) is one
of the frozen dataclasses below, never an untyped dict. The formulas behind every rate live in
:mod:`kernels.theory` (the traffic model's home) and are what fills these records, so a figure in
a table can be recomputed by hand:

* decode KV bytes  = 2 (K and V) x batch x context x n_kv_heads x head_dim x bytes per value
* decode FLOPs     = 4 x batch x n_q_heads x context x head_dim  (q.k and p.v, 2 FLOPs per MAC)
* prefill FLOPs    = 4 x batch x n_q_heads x N^2 x head_dim, halved when causal
* TB/s = bytes / seconds / 1e12;  TFLOP/s = FLOPs / seconds / 1e12 (decimal units, as datasheets)
* copy bandwidth counts bytes read plus bytes written (2 x the buffer size per copy)

``parse_bench_json`` accepts bytes or str content (``read_bench_file`` a path), checks the schema
name and version and every field's type, and raises :class:`BenchJsonError` (a ValueError) with
the offending field's path for anything else.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Union

from hardware.gpus import get_gpu
from inputs.errors import InputError, shown
# The formulas behind every rate live with the traffic model; imported here because the records
# are filled with them (and re-exported for callers that read both).
from kernels.theory import copy_tbps, decode_flops, decode_kv_bytes, prefill_flops, tbps, tflops
from inputs.uploads import loads_json, read_path_capped, upload_bytes

__all__ = [
    "SCHEMA", "SCHEMA_VERSION", "DATASHEET_TBPS", "DATASHEET_TFLOPS",
    "STATUSES", "DECODE_CONTENDERS", "PREFILL_CONTENDERS", "MEMORY_CONTENDERS", "TARGET_SPECS",
    "LARGE_DECODE_TOKENS", "MAX_BENCH_JSON_BYTES", "MAX_BENCH_JSON_DEPTH", "BenchJsonError",
    "Provenance", "Ceilings", "Measurement", "DecodeShape", "DecodeResult", "PrefillShape",
    "PrefillResult", "MemoryPoint", "Target", "BenchReport",
    "decode_kv_bytes", "decode_flops", "prefill_flops", "tbps", "tflops", "copy_tbps",
    "compute_targets", "report_to_json", "write_bench_json", "parse_bench_json", "read_bench_file", "format_report",
]

SCHEMA = "kv-cache-explorer.kernels.bench"
SCHEMA_VERSION = 1
# The datasheet ceilings a report is compared with: the H200 SXM's, from the GPU catalogue
# (HBM3e bandwidth, dense bf16 tensor rate without sparsity).
DATASHEET_TBPS = get_gpu("h200").bandwidth_tbs
DATASHEET_TFLOPS = float(get_gpu("h200").bf16_tflops)
# "Large" decode shapes for the targets: batch x context >= 256K tokens (KV >= 1 GiB at 8 KV heads).
LARGE_DECODE_TOKENS = 256 * 1024
# A full harness run is ~60 KB of JSON; anything past this is not one (and would stall a page).
MAX_BENCH_JSON_BYTES = 16 * 2**20
MAX_BENCH_JSON_DEPTH = 16  # a harness report nests 5 levels (report → section → record → field)

STATUSES = ("ok", "oom", "unsupported", "error", "not_available", "skipped")
DECODE_CONTENDERS = (
    "triton_paged",  # this package's kernel, KV in the shape's dtype
    "triton_paged_fp8",  # the same kernel on the FP8 (e4m3, per-head scales) copy of the cache
    "gather_sdpa",  # gather the pages into a contiguous tensor, then SDPA (default backend)
    "sdpa_flash", "sdpa_cudnn", "sdpa_efficient",  # SDPA on the same KV stored contiguously
    "naive",  # softmax(q k^T) v in the input dtype, KV heads expanded
)
PREFILL_CONTENDERS = ("triton_flash", "sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "naive")
MEMORY_CONTENDERS = ("naive", "triton_flash")


# ----------------------------------------------------------------------------------------------
# Records
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Provenance:
    """Where and how the figures were measured."""

    device: str  # torch.cuda.get_device_name, or "cpu (Triton interpreter)"
    sm_count: int
    driver: str  # NVIDIA driver version (nvidia-smi), "" when unknown
    cuda: str  # CUDA runtime torch was built with
    torch: str
    triton: str
    python: str
    date: str  # ISO 8601, UTC
    command: str  # the exact command line
    commit: str = ""  # git commit of the code measured (KVX_GIT_COMMIT or `git rev-parse`), "" if unknown


@dataclass(frozen=True, kw_only=True)
class Ceilings:
    """Limits measured in the same run (None when not measured) and the datasheet's."""

    copy_tbps: float | None  # streaming device-to-device copy, read + write bytes
    copy_buffer_bytes: int
    matmul_tflops: float | None  # bf16 matmul_n^3 through torch.matmul
    matmul_n: int
    datasheet_tbps: float = DATASHEET_TBPS
    datasheet_tflops: float = DATASHEET_TFLOPS


@dataclass(frozen=True, kw_only=True)
class Measurement:
    """One contender on one shape."""

    contender: str
    status: str  # one of STATUSES
    median_ms: float | None = None  # triton.testing.do_bench, return_mode="median" (see timing)
    timing: str = ""  # "cuda_graph": replays of a captured graph of the call(s); "eager": plain calls
    eager_ms: float | None = None  # the eager figure too (includes Python/launch overhead)
    unit: str = ""  # "TB/s" (decode: KV bytes read) or "TFLOP/s" (prefill)
    work: float | None = None  # bytes or FLOPs the rate counts (formula above)
    rate: float | None = None  # work / time in `unit`
    share_of_measured: float | None = None  # rate / measured ceiling
    share_of_datasheet: float | None = None  # rate / datasheet ceiling
    max_abs_err: float | None = None  # against the float32 reference (subset of the batch)
    peak_bytes: int | None = None  # extra device memory during one call, above the inputs
    note: str = ""  # error text, reference used, etc.


@dataclass(frozen=True, kw_only=True)
class DecodeShape:
    batch: int
    context: int  # tokens per sequence (all equal in the sweep)
    n_q_heads: int
    n_kv_heads: int
    head_dim: int
    block_size: int
    dtype: str = "bf16"  # query and KV dtype of the kernel and the baselines ("bf16" | "fp16")

    @property
    def tokens(self) -> int:
        return self.batch * self.context

    @property
    def label(self) -> str:
        return f"B={self.batch} L={self.context} H={self.n_q_heads}/{self.n_kv_heads} d={self.head_dim}"


@dataclass(frozen=True, kw_only=True)
class DecodeResult:
    shape: DecodeShape
    num_splits: int  # split-KV parts the kernel used
    kv_bytes: int  # decode_kv_bytes at 2 bytes per value
    measurements: tuple[Measurement, ...]

    def get(self, contender: str) -> Measurement | None:
        return next((m for m in self.measurements if m.contender == contender), None)


@dataclass(frozen=True, kw_only=True)
class PrefillShape:
    batch: int
    seq_len: int
    n_q_heads: int
    n_kv_heads: int
    head_dim: int
    causal: bool
    dtype: str = "bf16"

    @property
    def label(self) -> str:
        kind = "causal" if self.causal else "full"
        return f"B={self.batch} N={self.seq_len} H={self.n_q_heads}/{self.n_kv_heads} d={self.head_dim} {kind}"


@dataclass(frozen=True, kw_only=True)
class PrefillResult:
    shape: PrefillShape
    flops: int
    measurements: tuple[Measurement, ...]

    def get(self, contender: str) -> Measurement | None:
        return next((m for m in self.measurements if m.contender == contender), None)


@dataclass(frozen=True, kw_only=True)
class MemoryPoint:
    """Peak memory and time of one contender at one N (naive against tiled)."""

    seq_len: int
    batch: int
    n_heads: int
    head_dim: int
    contender: str
    status: str
    peak_bytes: int | None = None  # device memory above the inputs during one call
    median_ms: float | None = None
    note: str = ""


@dataclass(frozen=True, kw_only=True)
class Target:
    name: str
    measured: float | None
    required: float
    met: bool
    detail: str = ""  # which shape was worst, or why nothing was measured


@dataclass(frozen=True, kw_only=True)
class BenchReport:
    schema: str
    schema_version: int
    provenance: Provenance
    ceilings: Ceilings
    decode: tuple[DecodeResult, ...] = ()
    prefill: tuple[PrefillResult, ...] = ()
    memory: tuple[MemoryPoint, ...] = ()
    targets: tuple[Target, ...] = ()


# ----------------------------------------------------------------------------------------------
# Targets
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class TargetSpec:
    name: str
    required: float
    description: str


TARGET_SPECS = (
    TargetSpec(name="decode_large_tbps", required=4.0,
               description="paged decode bf16, TB/s of KV read, worst shape with batch x context >= 256K"),
    TargetSpec(name="decode_large_vs_cudnn", required=0.9,
               description="speed vs SDPA-CUDNN on the same KV stored contiguously, worst large shape"),
    TargetSpec(name="decode_large_vs_gather", required=3.0,
               description="speed vs gather-pages-then-SDPA, worst large shape"),
    TargetSpec(name="decode_b1_32k_vs_cudnn", required=1.0,
               description="speed vs SDPA-CUDNN contiguous at batch 1, context 32K (worst head config)"),
    TargetSpec(name="decode_fp8_vs_bf16", required=1.7,
               description="FP8-KV kernel tokens/s over the bf16 kernel's, worst large shape"),
    TargetSpec(name="prefill_vs_flash_causal", required=1.2,
               description="tiled forward vs SDPA-FLASH, causal, worst N >= 4K"),
    TargetSpec(name="prefill_vs_flash_noncausal", required=1.2,
               description="tiled forward vs SDPA-FLASH, non-causal, worst N >= 4K"),
    TargetSpec(name="prefill_vs_cudnn_causal", required=0.8,
               description="tiled forward vs SDPA-CUDNN, causal, worst N >= 4K"),
    TargetSpec(name="prefill_vs_cudnn_noncausal", required=0.8,
               description="tiled forward vs SDPA-CUDNN, non-causal, worst N >= 4K"),
)


def _ok_ms(result: DecodeResult | PrefillResult, contender: str) -> float | None:
    m = result.get(contender)
    return m.median_ms if m is not None and m.status == "ok" and m.median_ms else None


def _worst(pairs: list[tuple[str, float | None]], spec: TargetSpec, empty: str) -> Target:
    """Lowest measured value over the shapes; a shape with no figure makes the target unmet."""
    if not pairs:
        return Target(name=spec.name, measured=None, required=spec.required, met=False, detail=empty)
    missing = [label for label, v in pairs if v is None]
    if missing:
        return Target(name=spec.name, measured=None, required=spec.required, met=False,
                      detail=f"not measured at {', '.join(missing)}")
    label, value = min(pairs, key=lambda p: p[1])
    return Target(name=spec.name, measured=value, required=spec.required,
                  met=value >= spec.required, detail=f"worst: {label}")


def _ratio(num_ms: float | None, den_ms: float | None) -> float | None:
    """Speed of the second over the first: time(other) / time(ours)."""
    return num_ms / den_ms if num_ms and den_ms else None


def _speedup(result: DecodeResult | PrefillResult, baseline: str, ours: str) -> float | None:
    """How many times faster ``ours`` ran than ``baseline`` on one shape (None unless both ran)."""
    return _ratio(_ok_ms(result, baseline), _ok_ms(result, ours))


def compute_targets(decode: tuple[DecodeResult, ...], prefill: tuple[PrefillResult, ...]) -> tuple[Target, ...]:
    """The benchmark's targets from the records of one run (worst shape in each range)."""
    specs = {s.name: s for s in TARGET_SPECS}
    large = [r for r in decode if r.shape.tokens >= LARGE_DECODE_TOKENS]
    no_large = "no decode shape with batch x context >= 256K in this run"

    def kernel_tbps(r: DecodeResult) -> float | None:
        m = r.get("triton_paged")
        return m.rate if m is not None and m.status == "ok" else None

    out = [
        _worst([(r.shape.label, kernel_tbps(r)) for r in large], specs["decode_large_tbps"], no_large),
        _worst([(r.shape.label, _speedup(r, "sdpa_cudnn", "triton_paged")) for r in large],
               specs["decode_large_vs_cudnn"], no_large),
        _worst([(r.shape.label, _speedup(r, "gather_sdpa", "triton_paged")) for r in large],
               specs["decode_large_vs_gather"], no_large),
    ]
    b1 = [r for r in decode if r.shape.batch == 1 and r.shape.context == 32 * 1024]
    out.append(_worst([(r.shape.label, _speedup(r, "sdpa_cudnn", "triton_paged")) for r in b1],
                      specs["decode_b1_32k_vs_cudnn"], "no batch-1 context-32K decode shape in this run"))
    out.append(_worst([(r.shape.label, _speedup(r, "triton_paged", "triton_paged_fp8")) for r in large],
                      specs["decode_fp8_vs_bf16"], no_large))
    for causal in (True, False):
        rows = [r for r in prefill if r.shape.causal == causal and r.shape.seq_len >= 4096]
        kind = "causal" if causal else "noncausal"
        empty = f"no {kind} prefill shape with N >= 4K in this run"
        for base in ("flash", "cudnn"):
            pairs = [(r.shape.label, _speedup(r, f"sdpa_{base}", "triton_flash")) for r in rows]
            out.append(_worst(pairs, specs[f"prefill_vs_{base}_{kind}"], empty))
    order = [s.name for s in TARGET_SPECS]
    return tuple(sorted(out, key=lambda t: order.index(t.name)))


# ----------------------------------------------------------------------------------------------
# JSON
# ----------------------------------------------------------------------------------------------


def _to_jsonable(obj):
    if dataclasses.is_dataclass(obj):
        return {f.name: _to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [_to_jsonable(x) for x in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None  # JSON has no NaN/inf; a missing figure is null
    return obj


def report_to_json(report: BenchReport) -> str:
    """The report as JSON text (strict: no NaN, sorted by the record's field order)."""
    return json.dumps(_to_jsonable(report), indent=1, allow_nan=False)


def write_bench_json(report: BenchReport, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(report_to_json(report) + "\n")
    return path


def _build(tp, value, where: str):
    """Rebuild a value of type ``tp`` from parsed JSON, checking types all the way down."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _build(inner[0], value, where)
    if origin is tuple:
        if not isinstance(value, list):
            raise ValueError(f"{where}: expected a list, got {type(value).__name__}")
        item = typing.get_args(tp)[0]
        return tuple(_build(item, v, f"{where}[{i}]") for i, v in enumerate(value))
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ValueError(f"{where}: expected an object, got {type(value).__name__}")
        hints = typing.get_type_hints(tp)
        names = {f.name for f in dataclasses.fields(tp)}
        unknown = sorted(set(value) - names)
        if unknown:
            raise ValueError(f"{where}: unknown fields {unknown}")
        kwargs = {}
        for f in dataclasses.fields(tp):
            if f.name not in value:
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                    raise ValueError(f"{where}: missing field '{f.name}'")
                continue
            kwargs[f.name] = _build(hints[f.name], value[f.name], f"{where}.{f.name}")
        return tp(**kwargs)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is bool or tp is str:
        if not isinstance(value, tp):
            raise ValueError(f"{where}: expected {tp.__name__}, got {value!r}")
        return value
    raise TypeError(f"{where}: no loader for type {tp!r}")  # a bug in this module, not in the file


def _check_semantics(report: BenchReport) -> None:
    for kind, rows in (("decode", report.decode), ("prefill", report.prefill)):
        for i, r in enumerate(rows):
            for j, m in enumerate(r.measurements):
                if m.status not in STATUSES:
                    raise ValueError(f"{kind}[{i}].measurements[{j}].status: '{m.status}' not in {STATUSES}")
                if m.median_ms is not None and m.median_ms <= 0:
                    raise ValueError(f"{kind}[{i}].measurements[{j}].median_ms must be > 0, got {m.median_ms}")
    for i, p in enumerate(report.memory):
        if p.status not in STATUSES:
            raise ValueError(f"memory[{i}].status: '{p.status}' not in {STATUSES}")
    names = [t.name for t in report.targets]
    expected = [s.name for s in TARGET_SPECS]
    if sorted(names) != sorted(expected):
        raise ValueError(f"targets must be exactly {expected}, got {names}")


class BenchJsonError(InputError):
    """A harness JSON that cannot be read; ``field`` is ``"bench_json"`` and the message says
    which part is wrong (not JSON, another program's schema, a mistyped field, too large)."""

    def __init__(self, message: str) -> None:
        super().__init__("bench_json", message)


def parse_bench_json(data: bytes | str) -> BenchReport:
    """A JSON document written by ``python -m kernels.bench --json``, given as its content.

    ``data`` is the document itself (bytes or text), never a path: uploaded content is not a
    file name. At most :data:`MAX_BENCH_JSON_BYTES` bytes and :data:`MAX_BENCH_JSON_DEPTH`
    levels of nesting are read.

    Raises
    ------
    BenchJsonError
        When the input is too large or too deep, is not JSON, is another program's JSON
        (schema name), is a version this code cannot read, or has a missing/extra/mistyped
        field (the message names its path).
    """
    raw = data.encode() if isinstance(data, str) else bytes(data)
    try:
        upload_bytes(raw, MAX_BENCH_JSON_BYTES, field="bench_json")
        document = loads_json(raw, field="bench_json", max_depth=MAX_BENCH_JSON_DEPTH)
        return _report_from_document(document)
    except BenchJsonError:
        raise
    except (InputError, ValueError) as exc:  # InputError carries the field; keep only its message
        raise BenchJsonError(getattr(exc, "message", str(exc))) from None


def read_bench_file(path: str | Path) -> BenchReport:
    """The harness JSON at ``path`` (a CLI option or a shipped file), read with the size cap."""
    try:
        raw = read_path_capped(str(path), MAX_BENCH_JSON_BYTES, field="bench_json")
    except InputError as exc:
        raise BenchJsonError(exc.message) from None
    return parse_bench_json(raw)


def _report_from_document(data: object) -> BenchReport:
    if not isinstance(data, dict):
        raise ValueError(f"not a kernels.bench result: top level is a {type(data).__name__}, not an object")
    if data.get("schema") != SCHEMA:
        raise ValueError(
            f"not a kernels.bench result: schema is {shown(data.get('schema'))}, expected {SCHEMA!r}"
        )
    if data.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(
            f"unsupported kernels.bench schema_version {shown(data.get('schema_version'))} (this code reads {SCHEMA_VERSION})"
        )
    report = _build(BenchReport, data, "report")
    _check_semantics(report)
    return report


# ----------------------------------------------------------------------------------------------
# Readable table
# ----------------------------------------------------------------------------------------------


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def _row_cells(m: Measurement) -> str:
    if m.status != "ok":
        return f"{m.contender:<17} {m.status:<13} {m.note[:60]}"
    mark = "g" if m.timing == "cuda_graph" else " "
    return (
        f"{m.contender:<17} {_fmt(m.median_ms, '9.4f')} ms{mark} {_fmt(m.rate, '8.2f')} {m.unit:<7} "
        f"{_fmt(None if m.share_of_measured is None else 100 * m.share_of_measured, '5.1f')}% meas "
        f"{_fmt(None if m.share_of_datasheet is None else 100 * m.share_of_datasheet, '5.1f')}% sheet "
        f"err {_fmt(m.max_abs_err, '.1e')}"
    )


def format_report(report: BenchReport) -> str:
    """A readable multi-line table of a report (what the CLI prints without --json)."""
    p, c = report.provenance, report.ceilings
    lines = [
        f"device {p.device} ({p.sm_count} SMs), driver {p.driver or '?'}, CUDA {p.cuda or '-'}, "
        f"torch {p.torch}, triton {p.triton}, python {p.python}",
        f"date {p.date}  command: {p.command}",
        f"ceilings: copy {_fmt(c.copy_tbps, '.2f')} TB/s (read+write; datasheet {c.datasheet_tbps}), "
        f"bf16 {c.matmul_n}^3 matmul {_fmt(c.matmul_tflops, '.0f')} TFLOP/s (datasheet {c.datasheet_tflops:.0f})",
    ]
    for r in report.decode:
        lines.append(f"\ndecode {r.shape.label} block {r.shape.block_size} {r.shape.dtype}, "
                     f"KV {r.kv_bytes / 1e9:.3f} GB, splits {r.num_splits}")
        lines += ["  " + _row_cells(m) for m in r.measurements]
    for r in report.prefill:
        lines.append(f"\nprefill {r.shape.label} {r.shape.dtype}, {r.flops / 1e12:.2f} TFLOP")
        lines += ["  " + _row_cells(m) for m in r.measurements]
    if report.memory:
        lines.append("\npeak memory above inputs (naive vs tiled)")
        for m in report.memory:
            peak = "-" if m.peak_bytes is None else f"{m.peak_bytes / 2**30:8.3f} GiB"
            lines.append(f"  N={m.seq_len:<6} {m.contender:<13} {m.status:<13} {peak:>12} "
                         f"{_fmt(m.median_ms, '9.3f')} ms {m.note[:50]}")
    lines.append("\n(ms g: CUDA-graph replay; otherwise eager calls)\ntargets")
    for t in report.targets:
        mark = "MET " if t.met else "miss"
        lines.append(f"  [{mark}] {t.name:<28} {_fmt(t.measured, '7.3f')} (need >= {t.required})  {t.detail}")
    return "\n".join(lines)

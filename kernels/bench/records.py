"""Typed records of a benchmark run: shapes, measurements, ceilings, targets; JSON in and out.

Everything that crosses a layer (harness -> CLI, harness -> app page, JSON file -> page) is one
of the frozen dataclasses below, never an untyped dict. The formulas behind every rate live in
:mod:`kernels.theory` (the traffic model's home) and are what fills these records, so a figure in
a table can be recomputed by hand:

* decode KV bytes  = 2 (K and V) x batch x context x n_kv_heads x head_dim x bytes per value
* decode FLOPs     = 4 x batch x n_q_heads x context x head_dim  (q.k and p.v, 2 FLOPs per MAC)
* prefill FLOPs    = 4 x batch x n_q_heads x N^2 x head_dim, halved when causal
* mixed-batch FLOPs = 4 x n_q_heads x head_dim x sum over sequences of the (query, key) pairs
  each scores (``kernels.theory.varlen_flops``: a decode row seq_len, a chunk q (c + (q + 1) / 2))
* TB/s = bytes / seconds / 1e12;  TFLOP/s = FLOPs / seconds / 1e12 (decimal units, as datasheets)
* copy bandwidth counts bytes read plus bytes written (2 x the buffer size per copy)

``parse_bench_json`` accepts bytes or str content (``read_bench_file`` a path), checks the schema
name and version and every field's type, and raises :class:`BenchJsonError` (a ValueError) with
the offending field's path for anything else.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hardware.gpus import get_gpu
from inputs.errors import InputError
from kernels.bench.record_ranges import check_ranges
from kernels.bench.results_json import (
    build_typed, check_target_names, parse_results, read_results_file, report_to_json, to_jsonable, write_results_json,
)
# The formulas behind every rate live with the traffic model; imported here because the records
# are filled with them (and re-exported for callers that read both).
from kernels.theory import copy_tbps, decode_flops, decode_kv_bytes, prefill_flops, tbps, tflops, varlen_flops

__all__ = [
    "SCHEMA", "SCHEMA_VERSION", "DATASHEET_TBPS", "DATASHEET_TFLOPS",
    "STATUSES", "DECODE_CONTENDERS", "PAGED_PEERS", "FP8_PAGED_PEERS", "PREFILL_CONTENDERS", "MEMORY_CONTENDERS", "MIXED_CONTENDERS", "TARGET_SPECS",
    "LARGE_DECODE_TOKENS", "eager_target_shape", "required_text", "worst_target", "MAX_BENCH_JSON_BYTES", "MAX_BENCH_JSON_DEPTH", "BenchJsonError",
    "Provenance", "Ceilings", "Measurement", "DecodeShape", "DecodeResult", "PrefillShape",
    "PrefillResult", "MixedShape", "MixedResult", "MemoryPoint", "Target", "measured_text", "BenchReport",
    "decode_kv_bytes", "decode_flops", "prefill_flops", "varlen_flops", "tbps", "tflops", "copy_tbps",
    "compute_targets", "report_to_json", "write_bench_json", "parse_bench_json", "read_bench_file",
    "to_jsonable", "build_typed",
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
    "triton_paged_int4",  # the INT4 kernel on a 4-bit copy (fp16 scale per token and half head)
    "gather_sdpa",  # gather the pages into a contiguous tensor, then SDPA (default backend)
    "sdpa_flash", "sdpa_cudnn", "sdpa_efficient",  # SDPA on the same KV stored contiguously
    "cudnn_paged",  # cuDNN's paged SDPA graph on the same pool and tables
    "flashinfer_tc", "flashinfer_cuda",  # FlashInfer's paged decode: tensor-core and CUDA-core paths
    "flashinfer_tc_fp8", "flashinfer_cuda_fp8",  # the same on an e4m3 copy (one scale per tensor)
    "naive",  # softmax(q k^T) v in the input dtype, KV heads expanded
)
# The CUDA libraries' paged kernels (kernels.bench.peers) on the 16-bit cache and on an FP8 copy.
PAGED_PEERS = ("cudnn_paged", "flashinfer_tc", "flashinfer_cuda")
FP8_PAGED_PEERS = ("flashinfer_tc_fp8", "flashinfer_cuda_fp8")
PREFILL_CONTENDERS = ("triton_flash", "triton_flash_tl", "sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "naive")
MEMORY_CONTENDERS = ("naive", "triton_flash")
MIXED_CONTENDERS = (
    "triton_chunked",  # the paged varlen kernel: the whole mixed batch in one launch
    "triton_chunked_split",  # the same kernel, prefill chunks and decode rows in two launches
    "gather_sdpa",  # gather pages into padded tensors; one SDPA call for the chunks, one for the rows
    "triton_flash", "triton_flash_tl", "sdpa_cudnn",  # prefill-only batches: dense causal forward on contiguous KV
)


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
    eager_passes: int = 1  # eager passes at different times of the run; eager_ms is their least
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


class _Measured:
    """A result holding ``measurements``: one contender's record by name."""

    measurements: tuple[Measurement, ...]

    def get(self, contender: str) -> Measurement | None:
        return next((m for m in self.measurements if m.contender == contender), None)


@dataclass(frozen=True, kw_only=True)
class DecodeResult(_Measured):
    shape: DecodeShape
    num_splits: int  # split-KV parts the kernel used
    kv_bytes: int  # decode_kv_bytes at 2 bytes per value
    measurements: tuple[Measurement, ...]


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
class PrefillResult(_Measured):
    shape: PrefillShape
    flops: int
    measurements: tuple[Measurement, ...]


@dataclass(frozen=True, kw_only=True)
class MixedShape:
    """A mixed chunked-prefill batch: per sequence its new (query) tokens and its cached tokens."""

    name: str  # what the batch is, in words
    q_lens: tuple[int, ...]  # 1 for a decode row
    seq_lens: tuple[int, ...]  # cached tokens, the new ones included
    n_q_heads: int
    n_kv_heads: int
    head_dim: int
    block_size: int
    dtype: str = "bf16"

    @property
    def n_decode(self) -> int:
        return sum(1 for q in self.q_lens if q == 1)

    @property
    def prefill_only(self) -> bool:
        """Only chunks with no cached prefix: the dense forward can run the same batch."""
        return all(q == s and q > 1 for q, s in zip(self.q_lens, self.seq_lens))

    @property
    def label(self) -> str:
        return f"{self.name} H={self.n_q_heads}/{self.n_kv_heads} d={self.head_dim} block {self.block_size}"


@dataclass(frozen=True, kw_only=True)
class MixedResult(_Measured):
    shape: MixedShape
    flops: int  # varlen_flops of the batch, what every contender's TFLOP/s counts
    hbm_bytes: int  # least HBM bytes (cache once, queries and outputs)
    measurements: tuple[Measurement, ...]


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
    at_most: bool = False  # met when measured <= required (costs); otherwise measured >= required


def measured_text(target: Target, digits: int = 3) -> str | None:
    """``target.measured`` with ``digits`` decimals, or with as many more (up to 6) as it takes for
    the figure shown to read as what it is, met or not: 2.7996 against >= 2.8 shows as "2.7996",
    not "2.800" beside "missed". None when nothing was measured."""
    if target.measured is None:
        return None
    for places in range(digits, 7):
        text = f"{target.measured:.{places}f}"
        shown = float(text)
        if (shown <= target.required if target.at_most else shown >= target.required) == target.met:
            break
    return text


def required_text(target: Target) -> str:
    """What ``target`` asks for: ``"≥ 1.9"``, or ``"≤ 40"`` for a cost."""
    return f"{'≤' if target.at_most else '≥'} {target.required:g}"


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
    mixed: tuple[MixedResult, ...] = ()
    page_sizes: tuple[DecodeResult, ...] = ()  # the bf16 kernel at each block size (page-size study)


# ----------------------------------------------------------------------------------------------
# Targets
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class TargetSpec:
    name: str
    required: float
    description: str
    at_most: bool = False  # the measured figure must stay at or below `required` (a cost, not a speed)


TARGET_SPECS = (
    TargetSpec(name="decode_large_tbps", required=4.0,
               description="paged decode bf16, TB/s of KV read, worst shape with batch x context >= 256K"),
    TargetSpec(name="decode_vs_best_paged_peer", required=1.0,
               description="speed vs the fastest CUDA-library paged kernel on the same pool (cuDNN's paged "
                           "SDPA, FlashInfer's tensor-core and CUDA-core decode), worst decode shape"),
    TargetSpec(name="decode_large_vs_cudnn", required=0.98,
               description="speed vs SDPA-CUDNN on the same KV stored contiguously (no page table to "
                           "follow), worst large shape"),
    TargetSpec(name="decode_large_vs_gather", required=3.0,
               description="speed vs gather-pages-then-SDPA, worst large shape"),
    TargetSpec(name="decode_b1_32k_vs_cudnn", required=0.97,
               description="speed vs SDPA-CUDNN contiguous at batch 1, context 32K (worst head config)"),
    TargetSpec(name="decode_fp8_vs_bf16", required=1.9,
               description="FP8-KV kernel tokens/s over the bf16 kernel's, worst large shape (the byte limit is 2.0)"),
    TargetSpec(name="decode_fp8_b1_vs_bf16", required=1.75,
               description="FP8-KV kernel tokens/s over the bf16 kernel's at batch 1, context 32K (worst head "
                           "config)"),
    TargetSpec(name="decode_int4_vs_bf16", required=3.2,
               description="INT4-KV kernel tokens/s over the bf16 kernel's, worst large shape (the byte limit is "
                           "about 3.8: 4-bit codes and two fp16 scales per head vector)"),
    TargetSpec(name="decode_int4_b1_vs_bf16", required=2.4,
               description="INT4-KV kernel tokens/s over the bf16 kernel's at batch 1, context 32K (worst head "
                           "config)"),
    TargetSpec(name="decode_eager_overhead_us", required=40.0, at_most=True,
               description="eager call time minus CUDA-graph time of the bf16 kernel at batch 1, context 32K "
                           "(worst head config), microseconds"),
    TargetSpec(name="prefill_vs_flash_causal", required=1.2,
               description="tiled forward vs SDPA-FLASH, causal, worst N >= 4K"),
    TargetSpec(name="prefill_vs_flash_noncausal", required=1.2,
               description="tiled forward vs SDPA-FLASH, non-causal, worst N >= 4K"),
    TargetSpec(name="prefill_vs_cudnn_causal", required=0.95,
               description="tiled forward vs SDPA-CUDNN, causal, worst N >= 4K"),
    TargetSpec(name="prefill_vs_cudnn_noncausal", required=0.95,
               description="tiled forward vs SDPA-CUDNN, non-causal, worst N >= 4K"),
    TargetSpec(name="prefill_short_causal_vs_cudnn", required=0.95,
               description="tiled forward vs SDPA-CUDNN, causal, short prompts (N <= 1K at the run's head dim, "
                           "batch 16 at the default work)"),
    TargetSpec(name="prefill_d256_vs_cudnn", required=0.9,
               description="tiled forward vs SDPA-CUDNN at head dim 256, worst shape of either mask"),
    TargetSpec(name="mixed_vs_split_launches", required=1.0,
               description="mixed batch in one launch vs the same kernel on its chunks and its decode rows "
                           "in two launches, worst batch holding both"),
    TargetSpec(name="mixed_vs_gather_sdpa", required=2.0,
               description="mixed batch vs gather-pages-then-SDPA (padded), worst batch with decode rows"),
    TargetSpec(name="chunked_prefill_vs_dense", required=0.95,
               description="paged varlen kernel vs the dense tiled forward on the same prefill-only batch "
                           "(TFLOP/s of the same FLOPs), worst batch"),
)


def _ok_ms(result: DecodeResult | PrefillResult, contender: str) -> float | None:
    m = result.get(contender)
    return m.median_ms if m is not None and m.status == "ok" and m.median_ms else None


def worst_target(pairs: list[tuple[str, float | None]], spec: TargetSpec, empty: str, *,
                 listed: int | None = None) -> Target:
    """Worst measured value over the shapes (lowest speed, or highest cost for an ``at_most``
    target); a shape with no figure makes the target unmet (its detail names the first
    ``listed`` such shapes, all when None); ``empty`` is the detail when there is no shape."""
    common = dict(name=spec.name, required=spec.required, at_most=spec.at_most)
    if not pairs:
        return Target(measured=None, met=False, detail=empty, **common)
    missing = [label for label, v in pairs if v is None]
    if missing:
        return Target(measured=None, met=False, detail=f"not measured at {', '.join(missing[:listed])}", **common)
    label, value = (max if spec.at_most else min)(pairs, key=lambda p: p[1])
    met = value <= spec.required if spec.at_most else value >= spec.required
    return Target(measured=value, met=met, detail=f"worst: {label}", **common)


def eager_target_shape(shape: DecodeShape) -> bool:
    """The shapes ``decode_b1_32k_vs_cudnn`` and ``decode_eager_overhead_us`` read: batch 1 x 32K."""
    return shape.batch == 1 and shape.context == 32 * 1024


def _eager_overhead_us(result: DecodeResult) -> float | None:
    """Microseconds an eager call of the bf16 kernel costs above its CUDA-graph replay."""
    m = result.get("triton_paged")
    if m is None or m.status != "ok" or m.timing != "cuda_graph" or m.eager_ms is None or m.median_ms is None:
        return None
    return (m.eager_ms - m.median_ms) * 1e3


def _ratio(num_ms: float | None, den_ms: float | None) -> float | None:
    """Speed of the second over the first: time(other) / time(ours)."""
    return num_ms / den_ms if num_ms and den_ms else None


def _speedup(result: DecodeResult | PrefillResult, baseline: str, ours: str) -> float | None:
    """How many times faster ``ours`` ran than ``baseline`` on one shape (None unless both ran)."""
    return _ratio(_ok_ms(result, baseline), _ok_ms(result, ours))


def compute_targets(decode: tuple[DecodeResult, ...], prefill: tuple[PrefillResult, ...],
                    mixed: tuple[MixedResult, ...] = ()) -> tuple[Target, ...]:
    """The benchmark's targets from the records of one run (worst shape in each range)."""
    specs = {s.name: s for s in TARGET_SPECS}
    large = [r for r in decode if r.shape.tokens >= LARGE_DECODE_TOKENS]
    no_large = "no decode shape with batch x context >= 256K in this run"

    def kernel_tbps(r: DecodeResult) -> float | None:
        m = r.get("triton_paged")
        return m.rate if m is not None and m.status == "ok" else None

    def over_best_peer(r: DecodeResult) -> tuple[str, float | None] | None:
        peers = [ms for ms in (_ok_ms(r, p) for p in PAGED_PEERS) if ms]
        return (r.shape.label, _ratio(min(peers), _ok_ms(r, "triton_paged"))) if peers else None

    out = [
        worst_target([(r.shape.label, kernel_tbps(r)) for r in large], specs["decode_large_tbps"], no_large),
        worst_target([p for p in map(over_best_peer, decode) if p is not None], specs["decode_vs_best_paged_peer"],
               "no CUDA-library paged kernel ran in this run (scripts/peer_wheels.sh fetches them)"),
        worst_target([(r.shape.label, _speedup(r, "sdpa_cudnn", "triton_paged")) for r in large],
               specs["decode_large_vs_cudnn"], no_large),
        worst_target([(r.shape.label, _speedup(r, "gather_sdpa", "triton_paged")) for r in large],
               specs["decode_large_vs_gather"], no_large),
    ]
    b1 = [r for r in decode if eager_target_shape(r.shape)]
    no_b1 = "no batch-1 context-32K decode shape in this run"
    out.append(worst_target([(r.shape.label, _speedup(r, "sdpa_cudnn", "triton_paged")) for r in b1],
                      specs["decode_b1_32k_vs_cudnn"], no_b1))
    out.append(worst_target([(r.shape.label, _speedup(r, "triton_paged", "triton_paged_fp8")) for r in large],
                      specs["decode_fp8_vs_bf16"], no_large))
    out.append(worst_target([(r.shape.label, _speedup(r, "triton_paged", "triton_paged_int4")) for r in large],
                      specs["decode_int4_vs_bf16"], no_large))
    for kv in ("fp8", "int4"):
        out.append(worst_target([(r.shape.label, _speedup(r, "triton_paged", f"triton_paged_{kv}")) for r in b1],
                                specs[f"decode_{kv}_b1_vs_bf16"], no_b1))
    out.append(worst_target([(r.shape.label, _eager_overhead_us(r)) for r in b1], specs["decode_eager_overhead_us"],
                      no_b1))
    d256 = [r for r in prefill if r.shape.head_dim == 256]
    # The head-dim-256 shapes have their own target; a run made at head dim 256 alone keeps them in the others.
    prefill = [r for r in prefill if r.shape.head_dim != 256] or list(prefill)
    short = [r for r in prefill if r.shape.causal and r.shape.seq_len <= 1024]
    out.append(worst_target([(r.shape.label, _speedup(r, "sdpa_cudnn", "triton_flash")) for r in short],
                            specs["prefill_short_causal_vs_cudnn"], "no causal prefill shape with N <= 1K in this run"))
    out.append(worst_target([(r.shape.label, _speedup(r, "sdpa_cudnn", "triton_flash")) for r in d256],
                            specs["prefill_d256_vs_cudnn"], "no head-dim-256 prefill shape in this run"))
    for causal in (True, False):
        rows = [r for r in prefill if r.shape.causal == causal and r.shape.seq_len >= 4096]
        kind = "causal" if causal else "noncausal"
        empty = f"no {kind} prefill shape with N >= 4K in this run"
        for base in ("flash", "cudnn"):
            pairs = [(r.shape.label, _speedup(r, f"sdpa_{base}", "triton_flash")) for r in rows]
            out.append(worst_target(pairs, specs[f"prefill_vs_{base}_{kind}"], empty))
    both = [r for r in mixed if 0 < r.shape.n_decode < len(r.shape.q_lens)]
    with_decode = [r for r in mixed if r.shape.n_decode]
    dense = [r for r in mixed if r.shape.prefill_only]
    out += [
        worst_target([(r.shape.label, _speedup(r, "triton_chunked_split", "triton_chunked")) for r in both],
               specs["mixed_vs_split_launches"], "no mixed batch with both chunks and decode rows in this run"),
        worst_target([(r.shape.label, _speedup(r, "gather_sdpa", "triton_chunked")) for r in with_decode],
               specs["mixed_vs_gather_sdpa"], "no mixed batch with decode rows in this run"),
        worst_target([(r.shape.label, _speedup(r, "triton_flash", "triton_chunked")) for r in dense],
               specs["chunked_prefill_vs_dense"], "no prefill-only mixed batch in this run"),
    ]
    order = [s.name for s in TARGET_SPECS]
    return tuple(sorted(out, key=lambda t: order.index(t.name)))


# ----------------------------------------------------------------------------------------------
# JSON (the generic round trip: kernels.bench.results_json)
# ----------------------------------------------------------------------------------------------

write_bench_json = write_results_json  # the harness report's writer by its own name


def _check_semantics(report: BenchReport) -> None:
    check_ranges(report, "report")
    for kind, rows in (("decode", report.decode), ("prefill", report.prefill), ("mixed", report.mixed),
                       ("page_sizes", report.page_sizes)):
        for i, r in enumerate(rows):
            for j, m in enumerate(r.measurements):
                if m.status not in STATUSES:
                    raise ValueError(f"{kind}[{i}].measurements[{j}].status: '{m.status}' not in {STATUSES}")
    for i, p in enumerate(report.memory):
        if p.status not in STATUSES:
            raise ValueError(f"memory[{i}].status: '{p.status}' not in {STATUSES}")
    check_target_names(report.targets, TARGET_SPECS)


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
    return parse_results(data, BenchReport, error=BenchJsonError, check=_check_semantics, label="kernels.bench",
                         schema=SCHEMA, version=SCHEMA_VERSION, field="bench_json", max_bytes=MAX_BENCH_JSON_BYTES,
                         max_depth=MAX_BENCH_JSON_DEPTH)


def read_bench_file(path: str | Path) -> BenchReport:
    """The harness JSON at ``path`` (a CLI option or a shipped file), read with the size cap."""
    return read_results_file(path, parse_bench_json, error=BenchJsonError, max_bytes=MAX_BENCH_JSON_BYTES,
                             field="bench_json")

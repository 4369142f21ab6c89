"""Typed records of the MLA decode run, its two targets, and its JSON in and out.

One :class:`MlaResult` per shape (batch B, context L, query heads H, latent rank + rope dims,
block size, latent format) holds its contenders (:mod:`kernels.bench.mla_family` says what each
runs). Every measurement is the harness's :class:`kernels.bench.records.Measurement`, its rate in
TFLOP/s of the absorbed form's matmuls::

    FLOPs       = 2 x B x L x H x ((rank + rope) + rank)     # q·[c, k_pe]ᵀ, then p·c
    latent bytes = B x L x (rank + rope) x bytes per value   # each token's row read once
    bound       = max(latent bytes / copy ceiling, FLOPs / matmul ceiling)   # seconds, same run

DeepSeek-V3 (rank 512, rope 64, 128 heads) does 242 FLOPs per latent byte in bf16, more than the
H200's ~165 (714 TFLOP/s ÷ 4.3 TB/s measured): its decode is bound by the matmul rate, not by
HBM, unlike grouped-query decode. With 16 heads (TP 8) it is 30 FLOPs per byte: bound by the read.

Targets (worst shape of the run; a shape with a figure missing leaves its target unmet):

* ``mla_decode_vs_ceiling`` (at least 0.7): ``bound ÷ time`` of ``mla`` at 128 heads, bf16,
  B >= 64 and L >= 4K;
* ``mla_decode_vs_triton_peer`` (at least 1.5): the fastest SGLang Triton MLA call ÷ ``mla``, bf16.

The file is strict JSON with the harness's provenance, a schema name and version, read back
with the harness's typed loader under a size cap (:func:`parse_mla_json`, :class:`MlaJsonError`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from inputs.errors import InputError, shown
from kernels.bench.family_records import ok_ms, ratio
from kernels.bench.record_ranges import check_ranges
from kernels.bench.records import STATUSES, Ceilings, Measurement, Provenance, Target, TargetSpec, worst_target
from kernels.bench.results_json import check_target_names, parse_results, read_results_file, write_results_json

__all__ = ["SCHEMA", "SCHEMA_VERSION", "MLA_KV_FORMATS", "MLA_CONTENDERS", "PEER_CONTENDERS", "MLA_TARGET_SPECS",
           "CEILING_MIN_BATCH", "CEILING_MIN_CONTEXT", "CEILING_HEADS", "MlaShape", "MlaResult", "MlaReport",
           "mla_flops", "latent_bytes", "flops_per_latent_byte", "balance_flops_per_byte",
           "bound_ms", "best_peer_ms", "compute_mla_targets", "write_mla_json", "parse_mla_json",
           "read_mla_file", "MlaJsonError"]

SCHEMA = "kv-cache-explorer.kernels.bench.mla"
SCHEMA_VERSION = 1
MLA_KV_FORMATS = ("bf16", "fp8")
PEER_CONTENDERS = ("sglang_triton_8", "sglang_triton_16")  # SGLang's kernel at 8 (its default cap) and 16 splits
# "mla_triton": the Triton kernel on the same call, where "mla" runs the Gluon one (Hopper).
MLA_CONTENDERS = ("mla", "mla_triton", *PEER_CONTENDERS)
CEILING_MIN_BATCH, CEILING_MIN_CONTEXT, CEILING_HEADS = 64, 4096, 128  # where mla_decode_vs_ceiling reads
MAX_JSON_BYTES = 4 * 2**20
MAX_JSON_DEPTH = 16

MLA_TARGET_SPECS = (
    TargetSpec(name="mla_decode_vs_ceiling", required=0.7,
               description="MLA decode (128 heads, bf16 latent, B >= 64, L >= 4K) as a share of the bound the "
                           "run's copy and matmul ceilings set for its bytes and FLOPs, worst shape"),
    TargetSpec(name="mla_decode_vs_triton_peer", required=1.5,
               description="speed vs SGLang's Triton MLA decode (the faster of 8 and 16 splits) on the same "
                           "latent pool, bf16, worst shape"),
)


@dataclass(frozen=True, kw_only=True)
class MlaShape:
    batch: int
    context: int  # tokens per sequence (L)
    n_heads: int  # query heads on this GPU
    kv_lora_rank: int
    rope_dim: int
    block_size: int
    kv: str  # the latent pool's format, one of MLA_KV_FORMATS

    @property
    def label(self) -> str:
        return f"B={self.batch} L={self.context} H={self.n_heads} {self.kv}"


def mla_flops(shape: MlaShape) -> int:
    """The absorbed form's matmul FLOPs of one decode call (module docstring)."""
    return 2 * shape.batch * shape.context * shape.n_heads * (2 * shape.kv_lora_rank + shape.rope_dim)


def latent_bytes(shape: MlaShape) -> int:
    """Latent rows read by one call: every token's ``rank + rope`` values once."""
    return shape.batch * shape.context * (shape.kv_lora_rank + shape.rope_dim) * (1 if shape.kv == "fp8" else 2)


def flops_per_latent_byte(shape: MlaShape) -> float:
    """Arithmetic intensity of the absorbed form: FLOPs per latent byte read (batch and context
    cancel: both scale with B x L). DeepSeek-V3 bf16 at 128 heads: 242; at 16 heads: 30."""
    return mla_flops(shape) / latent_bytes(shape)


def balance_flops_per_byte(ceilings: Ceilings) -> float | None:
    """The intensity at which the run's matmul and copy ceilings take equally long (matmul
    TFLOP/s ÷ copy TB/s); a shape above it is bound by the matmul rate. None without both."""
    if not ceilings.copy_tbps or not ceilings.matmul_tflops:
        return None
    return ceilings.matmul_tflops / ceilings.copy_tbps


def bound_ms(shape: MlaShape, ceilings: Ceilings) -> float | None:
    """Milliseconds the run's ceilings allow at least (None without both ceilings)."""
    if not ceilings.copy_tbps or not ceilings.matmul_tflops:
        return None
    return max(latent_bytes(shape) / (ceilings.copy_tbps * 1e9), mla_flops(shape) / (ceilings.matmul_tflops * 1e9))


@dataclass(frozen=True, kw_only=True)
class MlaResult:
    shape: MlaShape
    tolerance: str  # the kernels.tolerances entry the errors are held to
    atol: float
    num_splits: int | None  # the parts our kernel cut each sequence into
    measurements: tuple[Measurement, ...]

    def get(self, contender: str) -> Measurement | None:
        return next((m for m in self.measurements if m.contender == contender), None)


@dataclass(frozen=True, kw_only=True)
class MlaReport:
    schema: str
    schema_version: int
    provenance: Provenance
    ceilings: Ceilings
    results: tuple[MlaResult, ...] = ()
    targets: tuple[Target, ...] = ()
    wall_s: float | None = None


def best_peer_ms(result: MlaResult) -> float | None:
    times = [t for t in (ok_ms(result, name) for name in PEER_CONTENDERS) if t]
    return min(times) if times else None


def compute_mla_targets(results: tuple[MlaResult, ...], ceilings: Ceilings) -> tuple[Target, ...]:
    specs = {s.name: s for s in MLA_TARGET_SPECS}
    vs_ceiling, vs_peer = [], []
    for r in results:
        s = r.shape
        if s.kv != "bf16":
            continue
        if s.n_heads == CEILING_HEADS and s.batch >= CEILING_MIN_BATCH and s.context >= CEILING_MIN_CONTEXT:
            ms, bound = ok_ms(r, "mla"), bound_ms(s, ceilings)
            vs_ceiling.append((s.label, bound / ms if ms and bound else None))
        vs_peer.append((s.label, ratio(best_peer_ms(r), ok_ms(r, "mla"))))
    return (
        worst_target(vs_ceiling, specs["mla_decode_vs_ceiling"], "no 128-head bf16 shape with B >= 64 and L >= 4K",
                     listed=4),
        worst_target(vs_peer, specs["mla_decode_vs_triton_peer"], "no bf16 shape in this run", listed=4),
    )


def write_mla_json(report: MlaReport, path: str | Path) -> Path:
    return write_results_json(report, path)


class MlaJsonError(InputError):
    """An MLA results file that cannot be read; the message says which part is wrong."""

    def __init__(self, message: str) -> None:
        super().__init__("mla_json", message)


def _check_semantics(report: MlaReport) -> None:
    check_ranges(report, "report")
    if report.wall_s is not None and not (math.isfinite(report.wall_s) and report.wall_s >= 0):
        raise ValueError(f"wall_s: {report.wall_s!r} is not a duration")
    for i, r in enumerate(report.results):
        where = f"results[{i}]"
        if r.shape.kv not in MLA_KV_FORMATS:
            raise ValueError(f"{where}.shape.kv: {shown(r.shape.kv)} not in {MLA_KV_FORMATS}")
        for name in ("batch", "context", "n_heads", "kv_lora_rank", "block_size"):
            if getattr(r.shape, name) < 1:
                raise ValueError(f"{where}.shape.{name}: must be at least 1")
        if not (math.isfinite(r.atol) and r.atol > 0):
            raise ValueError(f"{where}.atol: {r.atol!r} is not a positive bound")
        names = [m.contender for m in r.measurements]
        if len(set(names)) != len(names) or not set(names) <= set(MLA_CONTENDERS):
            raise ValueError(f"{where}.measurements: contenders must be distinct names from {MLA_CONTENDERS}, "
                             f"got {names}")
        for j, m in enumerate(r.measurements):
            if m.status not in STATUSES:
                raise ValueError(f"{where}.measurements[{j}].status: {shown(m.status)} not in {STATUSES}")
    check_target_names(report.targets, MLA_TARGET_SPECS)


def parse_mla_json(data: bytes | str) -> MlaReport:
    """An MLA results file's content (bytes or text, never a path), checked field by field;
    raises :class:`MlaJsonError` naming the offending part."""
    return parse_results(data, MlaReport, error=MlaJsonError, check=_check_semantics, label="mla", schema=SCHEMA,
                         version=SCHEMA_VERSION, field="mla_json", max_bytes=MAX_JSON_BYTES,
                         max_depth=MAX_JSON_DEPTH)


def read_mla_file(path: str | Path) -> MlaReport:
    return read_results_file(path, parse_mla_json, error=MlaJsonError, max_bytes=MAX_JSON_BYTES, field="mla_json")

"""The multi-GPU results file: typed records of one run, its provenance and targets; JSON in and out.

A run (``python -m kernels.multi_gpu --json PATH``) holds three sections, each measurement with
the planner's prediction beside it (``Prediction.ratio`` = measured ÷ predicted):

* ``tp_steps``: one attention layer's decode step at TP 1, 2, 4, 8 (kernels.multi_gpu.tp_step) on
  the harness's decode shapes: the step with its all-reduce, the same without it, and the
  all-reduce alone at the step's message size;
* ``all_reduce``: NCCL's sum all-reduce over the same message sizes, as nccl-tests reports it::

      algbw = bytes / time;   busbw = algbw × 2 (n − 1) / n      (n ranks; GB/s = 1e9 bytes/s)

  (the ring's per-rank traffic, which makes the figure comparable across rank counts);
* ``transfers``: one request's KV blocks from GPU 0 to GPU 1 (kernels.multi_gpu.transfer) at each
  prompt length, by NCCL send/recv and by a peer copy of the same pieces, beside a plain peer
  copy (``tensor.copy_`` of one contiguous buffer from ``cuda:0`` to ``cuda:1``) of as many
  bytes. Rates count the bytes moved once (one direction of the link).

Targets (worst case over the run):

* ``allreduce_in_step_vs_busbw`` (at most 1.5): the all-reduce as it lands in a decode step
  (step − step without it) over the sweep's all-reduce time at that size and rank count;
* ``transfer_vs_peer_copy_8k`` (at least 0.8): whole-block NCCL transfer rate over the plain
  peer-copy rate, prompts of 8K tokens or more.

The run's provenance is the harness's own (:class:`kernels.bench.records.Provenance`, filled by
:func:`kernels.bench.timing.environment`) plus what only a multi-GPU run has: the GPU count,
``nvidia-smi topo -m``, NCCL's version and the multicast-off variables. JSON is strict (no NaN;
null for a figure not measured), read back with the harness's typed loader, the size cap and
the depth limit; :class:`MultiGpuJsonError` names the offending field.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from inputs.errors import InputError, shown
from kernels.bench.records import DecodeShape, Provenance, Target, TargetSpec, worst_target
from kernels.bench.results_json import check_target_names, parse_results, read_results_file, write_results_json
from kernels.bench.results_json import report_to_json as generic_report_to_json

__all__ = ["SCHEMA", "SCHEMA_VERSION", "STATUSES", "TRANSFER_METHODS", "TARGET_SPECS", "PredictedTime", "Predictor",
           "Prediction", "MultiGpuProvenance", "TPStepResult", "AllReducePoint", "TransferResult", "MultiGpuReport",
           "bus_bandwidth_gbps", "ring_bytes_per_rank", "compute_targets", "with_predictions", "report_to_json",
           "write_report", "parse_report", "read_report", "MultiGpuJsonError", "MAX_JSON_BYTES", "MAX_JSON_DEPTH"]

SCHEMA = "kv-cache-explorer.kernels.multi_gpu"
SCHEMA_VERSION = 1
STATUSES = ("ok", "oom", "error", "skipped")
TRANSFER_METHODS = ("nccl", "peer_copy")  # kernels.multi_gpu.transfer.METHODS (this module imports no torch)
MAX_JSON_BYTES = 16 * 2**20  # a full run is a few hundred records, well under 1 MB
MAX_JSON_DEPTH = 16  # report → section → record → shape or prediction → field
TARGET_ALLREDUCE_IN_STEP = 1.5
TARGET_TRANSFER_VS_COPY = 0.8
TRANSFER_TARGET_MIN_PROMPT = 8 * 1024


@dataclass(frozen=True, kw_only=True)
class PredictedTime:
    """What a model predicts for one measurement: seconds, and which model said it, in words."""

    seconds: float
    model: str


class Predictor(Protocol):
    """Predictions for the three kinds of measurement. The planner implements this (the package
    sits below it and never imports it); a run without one records no prediction."""

    def tp_step(self, shape: DecodeShape, *, tp: int, hidden: int) -> PredictedTime: ...

    def all_reduce(self, n_bytes: int, *, ranks: int) -> PredictedTime: ...

    def transfer(self, result: TransferResult) -> PredictedTime: ...


@dataclass(frozen=True, kw_only=True)
class Prediction:
    """The prediction beside a measurement: milliseconds, measured ÷ predicted, and the model."""

    ms: float | None = None
    ratio: float | None = None
    model: str = ""

    @classmethod
    def of(cls, predicted: PredictedTime | None, measured_ms: float | None) -> Prediction:
        if predicted is None:
            return cls(model="no prediction in this run")
        ms = predicted.seconds * 1e3
        ratio = measured_ms / ms if measured_ms is not None and ms > 0 else None
        return cls(ms=ms, ratio=ratio, model=predicted.model)


@dataclass(frozen=True, kw_only=True)
class MultiGpuProvenance:
    run: Provenance  # device, driver, CUDA, torch, triton, python, date, command, commit
    gpu_count: int
    topology: str  # `nvidia-smi topo -m` as printed, "" when it could not run
    nccl: str  # torch.cuda.nccl.version() as "major.minor.patch", "" without NCCL
    backend: str  # "nccl" on GPUs, "gloo" on the CPU
    multicast_env: str  # NCCL_NVLS_ENABLE, TORCH_SYMM_MEM_DISABLE_MULTICAST, NVSHMEM_DISABLE_NVLS as the ranks ran
    peer_access: bool | None = None  # cuda:0 can address cuda:1's memory (None on the CPU)


@dataclass(frozen=True, kw_only=True)
class TPStepResult:
    shape: DecodeShape
    tp: int
    hidden: int  # n_q_heads × head_dim: the output projection's width
    allreduce_bytes: int  # batch × hidden × 2 (bf16)
    status: str
    step_ms: float | None = None  # attention + o_proj + all-reduce, slowest rank
    local_ms: float | None = None  # the same without the all-reduce
    allreduce_ms: float | None = None  # the all-reduce alone at allreduce_bytes (None at TP 1)
    timing: str = ""  # "cuda_graph" or "eager"
    max_abs_err: float | None = None  # reduced output vs the unsharded float32 layer (checked rows)
    prediction: Prediction = Prediction()
    note: str = ""

    @property
    def allreduce_in_step_ms(self) -> float | None:
        """What the all-reduce adds to the step (None at TP 1 or when either time is missing)."""
        if self.tp == 1 or self.step_ms is None or self.local_ms is None:
            return None
        return self.step_ms - self.local_ms


@dataclass(frozen=True, kw_only=True)
class AllReducePoint:
    ranks: int
    bytes: int
    status: str
    ms: float | None = None
    algbw_gbps: float | None = None
    busbw_gbps: float | None = None
    timing: str = ""
    prediction: Prediction = Prediction()
    note: str = ""


@dataclass(frozen=True, kw_only=True)
class TransferResult:
    model: str  # the catalogue model whose geometry the request copies ("" for a made-up one)
    layout: str  # "full", "sliding", "mla"
    mode: str  # "whole" or "per_layer"
    method: str  # "nccl" (send/recv between ranks) or "peer_copy" (one process, Tensor.to between GPUs)
    kv_dtype: str
    block_size: int
    prompt_tokens: int
    layers: int
    n_kv_heads: int
    head_dim: int
    window: int | None
    blocks: int  # per region
    messages: int
    bytes: int  # moved once, rank 0 → rank 1
    status: str
    ms: float | None = None  # pack + send/recv (or copy) + scatter into the receiver's pool, slower rank
    wire_ms: float | None = None  # the send/recv of the packed buffer alone (NCCL "whole" only)
    gbps: float | None = None  # bytes / ms
    copy_ms: float | None = None  # tensor.copy_ cuda:0 -> cuda:1 of the same bytes
    copy_gbps: float | None = None
    share_of_copy: float | None = None  # gbps / copy_gbps
    bit_exact: bool | None = None  # the receiver's blocks equal the sender's, byte for byte
    prediction: Prediction = Prediction()
    note: str = ""


@dataclass(frozen=True, kw_only=True)
class MultiGpuReport:
    schema: str
    schema_version: int
    provenance: MultiGpuProvenance
    tp_steps: tuple[TPStepResult, ...] = ()
    all_reduce: tuple[AllReducePoint, ...] = ()
    transfers: tuple[TransferResult, ...] = ()
    targets: tuple[Target, ...] = ()


# ----------------------------------------------------------------------------------------------
# Formulas and targets
# ----------------------------------------------------------------------------------------------


def ring_bytes_per_rank(n_bytes: int, ranks: int) -> float:
    """Bytes each rank sends in a ring all-reduce of ``n_bytes``: ``2 (n − 1) / n × bytes``
    (reduce-scatter, then all-gather, each ``(n − 1) / n`` of the message)."""
    return 2 * (ranks - 1) / ranks * n_bytes


def bus_bandwidth_gbps(n_bytes: int, ranks: int, ms: float) -> float:
    """nccl-tests' bus bandwidth of an all-reduce, GB/s: ``algbw × 2 (n − 1) / n``."""
    return ring_bytes_per_rank(n_bytes, ranks) / (ms * 1e-3) / 1e9


TARGET_SPECS = (
    TargetSpec(name="allreduce_in_step_vs_busbw", required=TARGET_ALLREDUCE_IN_STEP, at_most=True,
               description="the all-reduce inside a TP decode step (step minus the step without it) over "
                           "the all-reduce sweep's time at that size and rank count, worst step"),
    TargetSpec(name="transfer_vs_peer_copy_8k", required=TARGET_TRANSFER_VS_COPY,
               description="whole-block KV transfer rate (NCCL send/recv) over the peer-copy rate of as "
                           "many bytes, worst case with a prompt of 8K tokens or more"),
)


def _sweep_ms(points: tuple[AllReducePoint, ...], n_bytes: int, ranks: int) -> float | None:
    hit = next((p for p in points if p.ranks == ranks and p.bytes == n_bytes and p.status == "ok"), None)
    return None if hit is None else hit.ms


def compute_targets(tp_steps: tuple[TPStepResult, ...], all_reduce: tuple[AllReducePoint, ...],
                    transfers: tuple[TransferResult, ...]) -> tuple[Target, ...]:
    """The run's two targets, each at its worst case (a case with no figure leaves it unmet)."""
    specs = {s.name: s for s in TARGET_SPECS}
    steps = []
    for r in tp_steps:
        if r.tp == 1 or r.status == "skipped":
            continue
        sweep = _sweep_ms(all_reduce, r.allreduce_bytes, r.tp)
        in_step = r.allreduce_in_step_ms
        ratio = in_step / sweep if in_step is not None and sweep else None
        steps.append((f"TP {r.tp} {r.shape.label}", ratio))
    moved = [(f"{t.layout} {t.kv_dtype} block {t.block_size} L={t.prompt_tokens}", t.share_of_copy)
             for t in transfers
             if t.method == "nccl" and t.mode == "whole" and t.prompt_tokens >= TRANSFER_TARGET_MIN_PROMPT]
    return (
        worst_target(steps, specs["allreduce_in_step_vs_busbw"], "no TP step above TP 1 in this run", listed=4),
        worst_target(moved, specs["transfer_vs_peer_copy_8k"], "no whole-block transfer with a prompt >= 8K in this run",
                     listed=4),
    )


def with_predictions(report: MultiGpuReport, predictor: Predictor | None) -> MultiGpuReport:
    """``report`` with ``predictor``'s figure beside every measured record (a failed or skipped
    record keeps its empty prediction; no predictor: every record says so). Pure: a saved file
    can be predicted again for another GPU or link without touching a GPU."""
    def of(call, measured: float | None) -> Prediction:
        return Prediction.of(None if predictor is None else call(), measured)

    return replace(
        report,
        tp_steps=tuple(replace(r, prediction=of(lambda r=r: predictor.tp_step(r.shape, tp=r.tp, hidden=r.hidden),
                                                r.step_ms)) if r.status == "ok" else r for r in report.tp_steps),
        all_reduce=tuple(replace(p, prediction=of(lambda p=p: predictor.all_reduce(p.bytes, ranks=p.ranks), p.ms))
                         if p.status == "ok" else p for p in report.all_reduce),
        transfers=tuple(replace(t, prediction=of(lambda t=t: predictor.transfer(t), t.ms)) if t.status == "ok"
                        else t for t in report.transfers),
    )


# ----------------------------------------------------------------------------------------------
# JSON
# ----------------------------------------------------------------------------------------------


def report_to_json(report: MultiGpuReport) -> str:
    """The report as strict JSON text (no NaN or infinity: a missing figure is null)."""
    return generic_report_to_json(report)


def write_report(report: MultiGpuReport, path: str | Path) -> Path:
    return write_results_json(report, path)


class MultiGpuJsonError(InputError):
    """A multi-GPU results file that cannot be read; the message says which part is wrong."""

    def __init__(self, message: str) -> None:
        super().__init__("multi_gpu_json", message)


def _check_semantics(report: MultiGpuReport) -> None:
    for section in ("tp_steps", "all_reduce", "transfers"):
        for i, record in enumerate(getattr(report, section)):
            if record.status not in STATUSES:
                raise ValueError(f"{section}[{i}].status: {shown(record.status)} not in {STATUSES}")
    for i, t in enumerate(report.transfers):
        if t.method not in TRANSFER_METHODS:
            raise ValueError(f"transfers[{i}].method: {shown(t.method)} not in {TRANSFER_METHODS}")
    if report.provenance.gpu_count < 0:
        raise ValueError(f"provenance.gpu_count must be >= 0, got {report.provenance.gpu_count}")
    check_target_names(report.targets, TARGET_SPECS)


def parse_report(data: bytes | str) -> MultiGpuReport:
    """A results file's content (bytes or text, never a path), checked field by field.

    Raises
    ------
    MultiGpuJsonError
        When the content is too large or deep, not JSON, another schema or version, or has a
        missing, extra or mistyped field (the message names its path).
    """
    return parse_results(data, MultiGpuReport, error=MultiGpuJsonError, check=_check_semantics,
                         label="kernels.multi_gpu", schema=SCHEMA, version=SCHEMA_VERSION, field="multi_gpu_json",
                         max_bytes=MAX_JSON_BYTES, max_depth=MAX_JSON_DEPTH)


def read_report(path: str | Path) -> MultiGpuReport:
    """The results file at ``path``, read under the size cap."""
    return read_results_file(path, parse_report, error=MultiGpuJsonError, max_bytes=MAX_JSON_BYTES,
                             field="multi_gpu_json")

"""Typed records of a model's attention layer mix (:mod:`kernels.bench.layer_mix` times them)
and the results file's JSON in and out.

A request is a model (by name), a batch ``B``, a context ``L``, a KV format and a TP degree; its
kinds are the model's layer groups as one GPU holds them (:func:`planner.layer_mix.kinds_of`
makes them from the sizer's catalogue): for each, the layers, one GPU's query and KV heads, the
head dim, whether sinks join the softmax, the sizer's KV bytes per token for one layer, the keys
one decode query sees and the bytes one layer's step reads::

    bytes read = B x keys seen x KV bytes per token        (attention kinds)
    bytes read = B x state bytes per sequence               (recurrent-state kinds)

A timed :class:`MixResult` adds each kind's time per layer; the step's attention time is the sum
over kinds of time per layer x layers, and each kind's share is its part of that sum. Nothing
here needs torch: the kernel page reads a shipped file on any machine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from inputs.errors import InputError, shown
from kernels.bench.record_ranges import check_ranges
from kernels.bench.records import STATUSES, Ceilings, Measurement, Provenance
from kernels.bench.results_json import parse_results, read_results_file, write_results_json

__all__ = ["SCHEMA", "SCHEMA_VERSION", "KINDS", "TIMED_KINDS", "MIX_KV_FORMATS", "MAX_MIX_BATCH", "MAX_MIX_CONTEXT",
           "MixRequest", "KindTiming", "MixResult", "LayerMixReport", "LayerMixJsonError", "kind_label",
           "write_layer_mix_json", "parse_layer_mix_json", "read_layer_mix_file"]

SCHEMA = "kv-cache-explorer.kernels.bench.layer_mix"
SCHEMA_VERSION = 1
MAX_JSON_BYTES = 4 * 2**20
MAX_JSON_DEPTH = 16
# What a layer keeps: the span kinds of kernels.attention_span, the MLA latent, a recurrent state.
KINDS = {"full": "Full attention", "sliding": "Sliding window", "chunked": "Chunked local", "mla": "MLA latent",
         "state": "Recurrent state"}
TIMED_KINDS = ("full", "sliding", "chunked", "mla")  # a recurrent state has no kernel in this project
MIX_KV_FORMATS = ("bf16", "fp8")
MAX_MIX_BATCH = 256
MAX_MIX_CONTEXT = 262_144
MAX_MODEL_NAME = 100


def kind_label(kind: str, window: int | None, sinks: bool) -> str:
    """``"Sliding window 128 + sinks"``, ``"Full attention"``, ``"MLA latent"``."""
    words = KINDS[kind] + (f" {window:,}" if window is not None else "")
    return words + (" + sinks" if sinks else "")


def _whole(name: str, value: object, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise InputError(name, f"must be a whole number in 1..{high:,}, got {shown(value)}")


@dataclass(frozen=True, kw_only=True)
class MixRequest:
    """What to time: a model name, batch, context (tokens), KV format and TP degree."""

    model: str
    batch: int
    context: int
    kv: str = "bf16"
    tp: int = 1
    block_size: int = 16  # pages of the K/V pools; MLA uses kernels.bench.layer_mix.MLA_PAGE

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not 1 <= len(self.model) <= MAX_MODEL_NAME:
            raise InputError("model", f"must be a model name of 1..{MAX_MODEL_NAME} characters, got {shown(self.model)}")
        for name, high in (("batch", MAX_MIX_BATCH), ("context", MAX_MIX_CONTEXT), ("block_size", 256), ("tp", 64)):
            _whole(name, getattr(self, name), high)
        if self.kv not in MIX_KV_FORMATS:
            raise InputError("kv", f"must be one of {', '.join(MIX_KV_FORMATS)}, got {shown(self.kv)}")


@dataclass(frozen=True, kw_only=True)
class KindTiming:
    """One layer kind of the model on one GPU, the sizer's bytes, and the time of one layer's
    decode step (``measurement`` None when the kind is not timed: ``reason`` says why)."""

    kind: str  # a key of KINDS
    window: int | None  # sliding window or chunk (tokens)
    layers: int
    sinks: bool
    q_heads: int  # on one GPU
    kv_heads: int  # on one GPU (MLA: 1, the shared latent)
    head_dim: int  # values a K head caches (MLA: latent + rope values)
    latent_rank: int  # MLA: the latent's width (head_dim - latent_rank rope values); 0 otherwise
    sm_scale: float  # the logit scale, 1 / sqrt(the query-key head dim)
    kv_bytes_per_token: float  # one layer on one GPU, the sizer's figure (0 for state layers)
    state_bytes_per_sequence: int  # one layer on one GPU (recurrent kinds)
    keys_seen: int  # keys one decode query sees at the request's context
    bytes_read: float  # one layer's step: B x keys_seen x kv_bytes_per_token (state: B x state bytes)
    measurement: Measurement | None = None
    reason: str = ""

    @property
    def label(self) -> str:
        return kind_label(self.kind, self.window, self.sinks)

    @property
    def layer_ms(self) -> float | None:
        m = self.measurement
        return m.median_ms if m is not None and m.status == "ok" and m.median_ms else None

    @property
    def total_ms(self) -> float | None:
        return None if self.layer_ms is None else self.layer_ms * self.layers


@dataclass(frozen=True, kw_only=True)
class MixResult:
    """Every kind of one model at one request, with the step's attention time and shares."""

    request: MixRequest
    model_name: str
    kinds: tuple[KindTiming, ...]

    @property
    def timed(self) -> tuple[KindTiming, ...]:
        return tuple(k for k in self.kinds if k.total_ms is not None)

    @property
    def attention_ms(self) -> float | None:
        """Sum over the timed kinds of time per layer x layers (None when nothing was timed)."""
        return sum(k.total_ms for k in self.timed) if self.timed else None

    def share(self, kind: KindTiming) -> float | None:
        """The kind's part of :attr:`attention_ms` (0..1)."""
        total = self.attention_ms
        return None if total is None or kind.total_ms is None else kind.total_ms / total

    @property
    def complete(self) -> bool:
        """Every attention kind of the model was timed (state kinds never are)."""
        return all(k.total_ms is not None for k in self.kinds if k.kind in TIMED_KINDS)

    @property
    def bytes_read(self) -> float:
        """What one step reads over all layers: each kind's bytes a layer x its layers."""
        return sum(k.bytes_read * k.layers for k in self.kinds)

    @property
    def read_tbps(self) -> float | None:
        """The step's attention bytes over its attention time, TB/s (None when nothing was timed)."""
        total = self.attention_ms
        return None if total is None else self.bytes_read / (total * 1e-3) / 1e12


@dataclass(frozen=True, kw_only=True)
class LayerMixReport:
    """A layer-mix run: where it ran, the copy ceiling of the same run, one result per request."""

    schema: str
    schema_version: int
    provenance: Provenance
    ceilings: Ceilings
    results: tuple[MixResult, ...] = ()
    wall_s: float | None = None

    def for_model(self, model: str) -> tuple[MixResult, ...]:
        return tuple(r for r in self.results if r.request.model == model)

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.request.model for r in self.results))


def write_layer_mix_json(report: LayerMixReport, path: str | Path) -> Path:
    return write_results_json(report, path)


class LayerMixJsonError(InputError):
    """A layer-mix results file that cannot be read; the message says which part is wrong."""

    def __init__(self, message: str) -> None:
        super().__init__("layer_mix_json", message)


def _check_semantics(report: LayerMixReport) -> None:
    check_ranges(report, "report")
    if report.wall_s is not None and not (math.isfinite(report.wall_s) and report.wall_s >= 0):
        raise ValueError(f"wall_s: {report.wall_s!r} is not a duration")
    for i, r in enumerate(report.results):
        for j, k in enumerate(r.kinds):
            where = f"results[{i}].kinds[{j}]"
            if k.kind not in KINDS:
                raise ValueError(f"{where}.kind: {shown(k.kind)} not in {tuple(KINDS)}")
            if (k.window is not None) != (k.kind in ("sliding", "chunked")):
                raise ValueError(f"{where}.window: only sliding and chunked layers have one")
            for name in ("layers", "q_heads", "kv_heads", "head_dim", "keys_seen", "state_bytes_per_sequence"):
                if getattr(k, name) < (1 if name in ("layers", "q_heads", "kv_heads", "head_dim") else 0):
                    raise ValueError(f"{where}.{name}: {getattr(k, name)} is out of range")
            for name in ("sm_scale", "kv_bytes_per_token", "bytes_read"):
                if not (math.isfinite(getattr(k, name)) and getattr(k, name) >= 0):
                    raise ValueError(f"{where}.{name}: {getattr(k, name)!r} is not a size")
            m = k.measurement
            if m is not None and m.status not in STATUSES:
                raise ValueError(f"{where}.measurement.status: {shown(m.status)} not in {STATUSES}")


def parse_layer_mix_json(data: bytes | str, check=None) -> LayerMixReport:
    """A layer-mix results file's content (bytes or text, never a path), checked field by field
    (and by ``check(report)`` when given: the planner holds it against the catalogue); raises
    :class:`LayerMixJsonError` naming the offending part."""
    def checks(report: LayerMixReport) -> None:
        _check_semantics(report)
        if check is not None:
            check(report)

    return parse_results(data, LayerMixReport, error=LayerMixJsonError, check=checks, label="layer mix",
                         schema=SCHEMA, version=SCHEMA_VERSION, field="layer_mix_json", max_bytes=MAX_JSON_BYTES,
                         max_depth=MAX_JSON_DEPTH)


def read_layer_mix_file(path: str | Path, check=None) -> LayerMixReport:
    return read_results_file(path, lambda raw: parse_layer_mix_json(raw, check), error=LayerMixJsonError,
                             max_bytes=MAX_JSON_BYTES, field="layer_mix_json")

"""Typed records of a model's attention layer mix (:mod:`kernels.bench.layer_mix` times them),
the kinds a catalogue model has at a TP degree, and the results file's JSON in and out.

For a model of the sizer's catalogue (:mod:`sizing.catalogue`) at a batch ``B``, a context ``L``,
a KV format and a TP degree, :func:`kinds_of` lists every layer kind the model has — full, sliding
window, chunked local (Llama 4), MLA, and the recurrent-state kinds — with one GPU's heads, the
sizer's KV bytes per token for one layer on one GPU (:meth:`sizing.models.ModelShape.layer_groups`),
the keys one decode query sees (:mod:`kernels.attention_span`) and the bytes one layer's step reads::

    bytes read = B x keys seen x KV bytes per token        (attention kinds)
    bytes read = B x state bytes per sequence               (recurrent kinds)

A timed :class:`MixResult` adds each kind's time per layer; the step's attention time is the sum
over kinds of time per layer x layers, and each kind's share is its part of that sum. Nothing
here needs torch: the kernel page reads a shipped file on any machine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from inputs.errors import InputError, shown
from kernels.attention_span import first_visible, span_of
from kernels.bench.record_ranges import check_ranges
from kernels.bench.records import STATUSES, Ceilings, Measurement, Provenance
from kernels.bench.results_json import parse_results, read_results_file, write_results_json
from sizing.catalogue import get_entry
from sizing.layers import LayerGroup, LayerKind
from sizing.models import ModelShape
from sizing.precisions import get_precision

__all__ = ["SCHEMA", "SCHEMA_VERSION", "SINK_MODEL_TYPES", "MIX_KV_FORMATS", "MAX_MIX_BATCH", "MAX_MIX_CONTEXT",
           "STATE_KINDS", "MixRequest", "KindTiming", "MixResult", "LayerMixReport", "LayerMixJsonError", "kind_label",
           "kinds_of", "write_layer_mix_json", "parse_layer_mix_json", "read_layer_mix_file"]

SCHEMA = "kv-cache-explorer.kernels.bench.layer_mix"
SCHEMA_VERSION = 1
MAX_JSON_BYTES = 4 * 2**20
MAX_JSON_DEPTH = 16
# Architectures whose attention layers carry one learned sink logit per query head: gpt-oss
# (HF GptOssAttention.sinks, vLLM's gpt_oss.py passes them to the attention backend).
SINK_MODEL_TYPES = frozenset({"gpt_oss"})
MIX_KV_FORMATS = ("bf16", "fp8")
MAX_MIX_BATCH = 256
MAX_MIX_CONTEXT = 262_144
STATE_KINDS = frozenset({LayerKind.MAMBA, LayerKind.LINEAR})

_KIND_WORDS = {LayerKind.FULL: "Full attention", LayerKind.SLIDING: "Sliding window", LayerKind.CHUNKED: "Chunked local",
               LayerKind.MLA: "MLA latent", LayerKind.MAMBA: "Mamba state", LayerKind.LINEAR: "Linear-attention state"}


def kind_label(kind: str, window: int | None, sinks: bool) -> str:
    """``"Sliding window 128 + sinks"``, ``"Full attention"``, ``"MLA latent"``."""
    words = _KIND_WORDS[LayerKind(kind)] + (f" {window:,}" if window is not None else "")
    return words + (" + sinks" if sinks else "")


@dataclass(frozen=True, kw_only=True)
class MixRequest:
    """What to time: a catalogue model id, batch, context (tokens), KV format and TP degree."""

    model: str
    batch: int
    context: int
    kv: str = "bf16"
    tp: int = 1
    block_size: int = 16  # pages of the K/V pools; MLA uses MLA_PAGE

    def __post_init__(self) -> None:
        for name, value, high in (("batch", self.batch, MAX_MIX_BATCH), ("context", self.context, MAX_MIX_CONTEXT),
                                  ("block_size", self.block_size, 256)):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
                raise InputError(name, f"must be a whole number in 1..{high:,}, got {value!r:.40}")
        if self.kv not in MIX_KV_FORMATS:
            raise InputError("kv", f"must be one of {', '.join(MIX_KV_FORMATS)}, got {self.kv!r:.40}")
        get_entry(self.model).shape.check_tp(self.tp)  # SizingError naming "model" or "tp"


@dataclass(frozen=True, kw_only=True)
class KindTiming:
    """One attention kind of the model: its layers, one GPU's heads, the sizer's bytes and the time
    of one layer's decode step (``measurement`` None when the kind has no kernel: ``reason`` says)."""

    kind: str  # a LayerKind value
    window: int | None  # sliding window or chunk (tokens)
    layers: int
    sinks: bool
    q_heads: int  # on one GPU
    kv_heads: int  # on one GPU (MLA: 1, the shared latent)
    head_dim: int  # K head dim (MLA: latent + rope values)
    kv_bytes_per_token: float  # one layer on one GPU, the sizer's figure (0 for state layers)
    state_bytes_per_sequence: int  # one layer on one GPU (recurrent kinds)
    keys_seen: int  # keys one decode query sees at the request's context
    bytes_read: float  # one layer's step: B × keys_seen × kv_bytes_per_token (state: B × state bytes)
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
        """Sum over the timed kinds of time per layer × layers (None when nothing was timed)."""
        return sum(k.total_ms for k in self.timed) if self.timed else None

    def share(self, kind: KindTiming) -> float | None:
        """The kind's part of :attr:`attention_ms` (0..1)."""
        total = self.attention_ms
        return None if total is None or kind.total_ms is None else kind.total_ms / total

    @property
    def complete(self) -> bool:
        """Every attention kind of the model was timed (state kinds never are)."""
        return all(k.total_ms is not None for k in self.kinds if LayerKind(k.kind) not in STATE_KINDS)


def _keys_seen(group: LayerGroup, context: int) -> int:
    """Keys a decode query at position ``context - 1`` sees in this group's layers."""
    if group.kind is LayerKind.SLIDING:
        return context - first_visible(span_of(sliding_window=group.window), context - 1)
    if group.kind is LayerKind.CHUNKED:
        return context - first_visible(span_of(chunk_size=group.window), context - 1)
    return 0 if group.kind in STATE_KINDS else context


def kinds_of(request: MixRequest) -> tuple[KindTiming, ...]:
    """The model's layer groups at the request's TP as untimed kinds (no GPU needed)."""
    entry = get_entry(request.model)
    shape: ModelShape = entry.shape
    sinks = entry.config.get("model_type") in SINK_MODEL_TYPES
    value_bytes = float(get_precision(request.kv, field="kv_dtype").bytes_per_value)
    tp = request.tp
    out = []
    for group in shape.layer_groups(tp):
        mla = group.kind is LayerKind.MLA
        state = group.kind in STATE_KINDS
        seen = _keys_seen(group, request.context)
        per_token = group.kv_values_per_token * value_bytes
        out.append(KindTiming(
            kind=str(group.kind), window=group.window, layers=group.count, sinks=sinks and not (mla or state),
            q_heads=shape.q_heads // tp, kv_heads=1 if mla else shape.kv_heads_per_gpu(tp),
            head_dim=shape.kv_lora_rank + shape.qk_rope_head_dim if mla else shape.head_dim,
            kv_bytes_per_token=per_token, state_bytes_per_sequence=group.state_bytes_per_sequence, keys_seen=seen,
            bytes_read=request.batch * (group.state_bytes_per_sequence if state else seen * per_token),
            reason="recurrent-state layers have no kernel in this project" if state else ""))
    return tuple(out)


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
        expected = [(k.kind, k.window, k.layers) for k in kinds_of(r.request)]
        if [(k.kind, k.window, k.layers) for k in r.kinds] != expected:
            raise ValueError(f"results[{i}].kinds: not the layer groups of {shown(r.request.model)} at TP {r.request.tp}")
        for j, k in enumerate(r.kinds):
            m = k.measurement
            if m is not None and m.status not in STATUSES:
                raise ValueError(f"results[{i}].kinds[{j}].measurement.status: {shown(m.status)} not in {STATUSES}")


def parse_layer_mix_json(data: bytes | str) -> LayerMixReport:
    """A layer-mix results file's content (bytes or text, never a path), checked field by field
    and against the catalogue's layer groups; raises :class:`LayerMixJsonError` naming the part."""
    return parse_results(data, LayerMixReport, error=LayerMixJsonError, check=_check_semantics, label="layer mix",
                         schema=SCHEMA, version=SCHEMA_VERSION, field="layer_mix_json", max_bytes=MAX_JSON_BYTES,
                         max_depth=MAX_JSON_DEPTH)


def read_layer_mix_file(path: str | Path) -> LayerMixReport:
    return read_results_file(path, parse_layer_mix_json, error=LayerMixJsonError, max_bytes=MAX_JSON_BYTES,
                             field="layer_mix_json")

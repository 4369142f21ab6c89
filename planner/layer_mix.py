"""A catalogue model's layer mix as the decode kernels time it: the sizer's layer groups at a TP
degree turned into the kinds :mod:`kernels.bench.layer_mix` times, and a results file held
against the catalogue.

For a model of :mod:`sizing.catalogue` at a batch ``B``, a context ``L``, a KV format and a TP
degree, :func:`kinds_of` lists every layer group of the model (:meth:`sizing.models.ModelShape.
layer_groups`): full, sliding window, chunked local (Llama 4), MLA, and the recurrent-state kinds,
with one GPU's query and KV heads (KV heads split or replicated, the MLA latent replicated), the
sizer's KV bytes per token for one layer on one GPU, the keys one decode query at position
``L - 1`` sees (:func:`kernels.attention_span.first_visible`), and the bytes one layer's step reads
(``B × keys seen × bytes per token``; a state layer ``B × its state bytes``). Sinks join every
attention layer of the architectures in :data:`SINK_MODEL_TYPES`.
"""

from __future__ import annotations

from dataclasses import dataclass

from inputs.errors import InputError
from sizing.errors import SizingError
from kernels.attention_span import first_visible, span_of
from kernels.bench.layer_mix_records import KindTiming, LayerMixReport, MixRequest, read_layer_mix_file
from sizing.catalogue import get_entry
from sizing.layers import LayerGroup, LayerKind
from sizing.precisions import get_precision

__all__ = ["SINK_MODEL_TYPES", "DEFAULT_MODELS", "DEFAULT_SHAPES", "MixJob", "kinds_of", "mix_job", "default_jobs",
           "check_against_catalogue", "read_checked_layer_mix"]

# Architectures whose attention layers carry one learned sink logit per query head: gpt-oss
# (HF GptOssAttention.sinks; vLLM's gpt_oss.py hands them to the attention backend).
SINK_MODEL_TYPES = frozenset({"gpt_oss"})
# The shipped run: a model of each family the sizer sizes (Gemma-3's 5 sliding : 1 full, gpt-oss's
# alternating 128-token windows with sinks, Llama 4's chunks, DeepSeek-V3's MLA on one GPU's 128
# heads as under data-parallel attention) and Llama-3.1-8B's full attention to compare.
DEFAULT_MODELS = ("gemma-3-27b", "gpt-oss-120b", "llama-4-scout", "deepseek-v3", "llama-3.1-8b")
DEFAULT_SHAPES = ((1, 8192), (1, 32768), (32, 8192), (32, 32768))  # (batch, context)

_KIND = {LayerKind.FULL: "full", LayerKind.SLIDING: "sliding", LayerKind.CHUNKED: "chunked", LayerKind.MLA: "mla",
         LayerKind.MAMBA: "state", LayerKind.LINEAR: "state"}
_STATE = frozenset({LayerKind.MAMBA, LayerKind.LINEAR})
NO_STATE_KERNEL = "recurrent-state layers have no kernel in this project"


def _keys_seen(group: LayerGroup, context: int) -> int:
    """Keys a decode query at position ``context - 1`` sees in this group's layers."""
    if group.kind is LayerKind.SLIDING:
        return context - first_visible(span_of(sliding_window=group.window), context - 1)
    if group.kind is LayerKind.CHUNKED:
        return context - first_visible(span_of(chunk_size=group.window), context - 1)
    return 0 if group.kind in _STATE else context


def kinds_of(request: MixRequest) -> tuple[KindTiming, ...]:
    """The request's model as untimed kinds, one per layer group at its TP (no GPU needed).
    Raises :class:`sizing.errors.SizingError` naming ``model`` or ``tp``."""
    entry = get_entry(request.model)
    shape = entry.shape
    tp = shape.check_tp(request.tp)
    if shape.q_heads % tp:  # vLLM: the attention heads must split evenly over the TP ranks
        raise SizingError("tp", f"TP {tp} does not divide the {shape.q_heads} query heads")
    sinks = entry.config.get("model_type") in SINK_MODEL_TYPES
    value_bytes = float(get_precision(request.kv, field="kv_dtype").bytes_per_value)
    out = []
    for group in shape.layer_groups(tp):
        mla, state = group.kind is LayerKind.MLA, group.kind in _STATE
        seen = _keys_seen(group, request.context)
        per_token = group.kv_values_per_token * value_bytes
        out.append(KindTiming(
            kind=_KIND[group.kind], window=group.window, layers=group.count, sinks=sinks and not (mla or state),
            q_heads=shape.q_heads // tp, kv_heads=1 if mla else shape.kv_heads_per_gpu(tp),
            head_dim=shape.kv_lora_rank + shape.qk_rope_head_dim if mla else shape.head_dim,
            latent_rank=shape.kv_lora_rank if mla else 0,
            # 1 / sqrt(the query-key head dim): for MLA the no-rope plus rope dims (DeepSeek: 128 + 64).
            sm_scale=shape.head_dim ** -0.5, kv_bytes_per_token=per_token,
            state_bytes_per_sequence=group.state_bytes_per_sequence, keys_seen=seen,
            bytes_read=request.batch * (group.state_bytes_per_sequence if state else seen * per_token),
            reason=NO_STATE_KERNEL if state else ""))
    return tuple(out)


@dataclass(frozen=True)
class MixJob:
    """A request with its model's display name and kinds, as :func:`kernels.bench.layer_mix.run_layer_mixes` takes it."""

    request: MixRequest
    model_name: str
    kinds: tuple[KindTiming, ...]

    def as_tuple(self) -> tuple[MixRequest, str, tuple[KindTiming, ...]]:
        return self.request, self.model_name, self.kinds


def mix_job(request: MixRequest) -> MixJob:
    return MixJob(request, get_entry(request.model).name, kinds_of(request))


def default_jobs(models: tuple[str, ...] = DEFAULT_MODELS, shapes: tuple[tuple[int, int], ...] = DEFAULT_SHAPES,
                 kv_formats: tuple[str, ...] = ("bf16", "fp8"), tp: int = 1) -> tuple[MixJob, ...]:
    """Every model at every (batch, context) and KV format (InputError / SizingError naming the field)."""
    return tuple(mix_job(MixRequest(model=get_entry(m).id, batch=b, context=L, kv=kv, tp=tp))
                 for m in models for b, L in shapes for kv in kv_formats)


def check_against_catalogue(report: LayerMixReport) -> None:
    """Every result's model in the catalogue and its kinds the catalogue's layer groups at its TP
    (a file made for another model or config is not this program's); ValueError naming it."""
    for i, r in enumerate(report.results):
        try:
            expected = [(k.kind, k.window, k.layers) for k in kinds_of(r.request)]
        except InputError as exc:
            raise ValueError(f"results[{i}].request: {exc.message}") from None
        if [(k.kind, k.window, k.layers) for k in r.kinds] != expected:
            raise ValueError(f"results[{i}].kinds: not the layer groups of {r.request.model} at TP {r.request.tp}")


def read_checked_layer_mix(path) -> LayerMixReport:
    """A layer-mix file read under its caps and held against the catalogue (LayerMixJsonError)."""
    return read_layer_mix_file(path, check_against_catalogue)

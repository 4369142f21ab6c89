"""Pipeline parallelism as vLLM splits a model: which layers each stage holds.

vLLM's ``get_pp_indices`` (``vllm/distributed/utils.py``) gives every stage
``layers // pp`` layers and hands the remainder, one each, to the stages just before the last
(``partitions[-2]``, ``partitions[-3]``, …), so the last stage — which also holds the LM head and
runs the sampler — stays the lightest. DeepSeek-V2-Lite (27 layers) at PP 2: stage 0 holds
layers 0–13 (14), stage 1 layers 14–26 (13).

``VLLM_PP_LAYER_PARTITION`` ("16,32") replaces the default with the layers of each stage, in
stage order; vLLM requires one count per stage, each at least 1, adding up to the layers
(:func:`parse_layer_partition`).

Each stage's workers size their own KV cache from their own layers, so a start-up log of a
PP run prints figures per stage; :func:`pipeline_stage` is the model one stage's workers see.
"""

from __future__ import annotations

from dataclasses import replace

from sizing.errors import SizingError
from sizing.models import ModelShape, check_int

MAX_PP = 64


def parse_layer_partition(text: object, layers: int, pp: int) -> tuple[int, ...]:
    """``VLLM_PP_LAYER_PARTITION`` (comma-separated layers per stage) checked against the model's
    ``layers`` and ``pp``; errors name ``pp_layer_partition``."""
    field = "pp_layer_partition"
    if not isinstance(text, str) or len(text) > 8 * MAX_PP:
        raise SizingError(field, f"must be comma-separated layer counts, got {text!r:.40}")
    parts = [p.strip() for p in text.split(",")]
    if not all(p.isdigit() and len(p) <= 6 for p in parts):
        raise SizingError(field, f"must be comma-separated whole layer counts, got {text!r:.40}")
    counts = tuple(int(p) for p in parts)
    if len(counts) != pp:
        raise SizingError(field, f"gives {len(counts)} stages for PP {pp}")
    if min(counts) < 1 or sum(counts) != layers:
        raise SizingError(field, f"must give every stage at least one layer and add up to the {layers} layers "
                                 f"(adds up to {sum(counts)})")
    return counts


def stage_layer_counts(layers: int, pp: int, partition: tuple[int, ...] | None = None) -> tuple[int, ...]:
    """Layers per pipeline stage, in stage order: ``partition`` (checked) or vLLM's default."""
    check_int("layers", layers, high=1 << 16)
    check_int("pp", pp, high=MAX_PP)
    if partition is not None:
        return parse_layer_partition(",".join(str(c) for c in partition), layers, pp)
    if pp > layers:
        raise SizingError("pp", f"PP {pp} leaves some of the {pp} stages without one of the {layers} layers")
    counts = [layers // pp] * pp
    for i in range(2, layers % pp + 2):
        counts[-i] += 1
    return tuple(counts)


def stage_layers(layers: int, pp: int, stage: int, partition: tuple[int, ...] | None = None) -> range:
    """The layer indices stage ``stage`` (0-based) holds."""
    counts = stage_layer_counts(layers, pp, partition)
    check_int("pp_stage", stage, low=0, high=pp - 1)
    start = sum(counts[:stage])
    return range(start, start + counts[stage])


def pipeline_stage(model: ModelShape, pp: int, stage: int = 0, partition: tuple[int, ...] | None = None) -> ModelShape:
    """The part of ``model`` that stage ``stage`` of ``pp`` holds (``partition``: the layers per
    stage, else vLLM's default): its layers, their kinds and windows, and a proportional share of
    the parameters (embeddings are not placed exactly)."""
    if pp == 1:
        return model
    held = stage_layers(model.layers, pp, stage, partition)
    sliding = None
    if model.sliding_window is not None:
        sliding = tuple(i - held.start for i in model.sliding_layers if i in held)
    kinds = None if model.layer_kinds is None else tuple(model.layer_kinds[held.start:held.stop])
    params = max(1, model.params * len(held) // model.layers)
    active = None if model.active_params is None else max(1, min(params, model.active_params * len(held)
                                                                  // model.layers))
    quantized = None if model.quantized_params is None else min(params, model.quantized_params * len(held)
                                                                // model.layers)
    linear = None if model.linear_params is None else min(params, model.linear_params * len(held) // model.layers)
    return replace(model, layers=len(held), sliding_layers=sliding, layer_kinds=kinds, params=params,
                   active_params=active, quantized_params=quantized, linear_params=linear, safetensors_bytes=None,
                   name=f"{model.name} (PP stage {stage} of {pp}: layers {held.start}–{held.stop - 1})")


__all__ = ["MAX_PP", "parse_layer_partition", "pipeline_stage", "stage_layer_counts", "stage_layers"]

"""Pipeline parallelism as vLLM splits a model: which layers each stage holds, and how a vLLM
release checks that one request fits a pipeline's workers.

vLLM's ``get_pp_indices`` (``vllm/distributed/utils.py``, the same in v0.15.1 and v0.17.0) gives
every stage ``layers // pp`` layers and hands the remainder, one each, to the stages just before
the last (``partitions[-2]``, ``partitions[-3]``, …), so the last stage — which also holds the
LM head and runs the sampler — stays the lightest. DeepSeek-V2-Lite (27 layers) at PP 2: stage 0
holds layers 0–13 (14), stage 1 layers 14–26 (13); vLLM logs such a split as "Hidden layers were
unevenly partitioned: [14,13]".

``VLLM_PP_LAYER_PARTITION`` ("16,32", read by ``vllm/envs.py``) replaces the default with the
layers of each stage, in stage order. vLLM refuses a list whose count is not the PP size or
whose sum is not the model's layers; a stage of no layers (or fewer) is refused here as well,
since it would hold no KV cache to size (:func:`parse_layer_partition`).

Each stage's workers size their own KV cache from their own layers, so a start-up log of a PP
run prints figures per stage; :func:`pipeline_stage` is the model one stage's workers see.

The one-request check (``_check_enough_kv_cache_memory`` in ``vllm/v1/core/kv_cache_utils.py``,
"To serve at least one request with the models's max seq len …") is :func:`one_request_rule`:

* up to 0.13, ``get_kv_cache_configs`` checked each worker's own KV specs against its own memory;
* 0.14.0–0.16.0 (from vllm#29431, ``--max-model-len auto``) checked the KV-cache groups of every
  worker's specs merged — all the model's layers — against ``min(available_memory)``, the
  smallest worker's budget (the Qwen3-Coder-30B PP 2 refusal of vllm#34076: 24.0 GiB for 48
  layers against 3.18 GiB);
* from 0.17.0 (vllm#33698, fixing vllm#32105) it checks each worker's projection of the groups
  (``_project_kv_cache_groups_to_worker``) against that worker's memory.

The ranges are read from the released wheels' ``kv_cache_utils.py`` (0.13.0, 0.14.0, 0.15.1,
0.16.0 and 0.17.0).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from enum import StrEnum

from sizing.errors import SizingError
from sizing.models import ModelShape, check_int

MAX_PP = 64
MAX_PARTITION_CHARS = 8 * MAX_PP  # "16,32": up to 64 stages of up to six digits and a comma
PARTITION_FIELD = "pp_layer_partition"
# The releases whose one-request check merged every worker's layers: [0.14, 0.17).
MERGED_CHECK_SINCE = (0, 14)
WORKER_CHECK_SINCE = (0, 17)
_MAX_LOG_SCAN_CHARS = 1 << 23  # the log parser's own cap (8 MiB)
# "VLLM_PP_LAYER_PARTITION=16,32" (a pasted command line or environment), quoted or not, and
# vLLM's own note of an uneven default split, "Hidden layers were unevenly partitioned: [14,13]".
_LOG_PARTITION = re.compile(r"VLLM_PP_LAYER_PARTITION\s*[=:]\s*[\"']?(\d{1,6}(?:\s*,\s*\d{1,6}){0,63})"
                            r"|unevenly partitioned:\s*\[(\d{1,6}(?:\s*,\s*\d{1,6}){0,63})\]")


class OneRequestRule(StrEnum):
    """What a vLLM release checks one request of ``max_model_len`` against under PP."""

    MERGED = "merged"  # 0.14–0.16: every stage's layers, against the smallest worker's memory
    PER_WORKER = "per-worker"  # up to 0.13 and from 0.17: each worker's own layers and memory


def one_request_rule(release: tuple[int, int]) -> OneRequestRule:
    """The rule of ``release`` (``(major, minor)`` as :func:`sizing.engine.groups.vllm_release` reads it)."""
    return OneRequestRule.MERGED if MERGED_CHECK_SINCE <= release < WORKER_CHECK_SINCE else OneRequestRule.PER_WORKER


def partition_counts(value: object) -> tuple[int, ...]:
    """The layer counts of a ``VLLM_PP_LAYER_PARTITION`` value — text ("16,32") or a sequence of
    ints — in stage order, each at least 1; errors name ``pp_layer_partition``. Sizes are not
    checked here (see :func:`parse_layer_partition`)."""
    if isinstance(value, (tuple, list)):
        if not 1 <= len(value) <= MAX_PP:
            raise SizingError(PARTITION_FIELD, f"must give 1 to {MAX_PP} stages, got {len(value)}")
        for count in value:
            check_int(PARTITION_FIELD, count, high=1 << 16)
        return tuple(value)
    if not isinstance(value, str) or len(value) > MAX_PARTITION_CHARS:
        raise SizingError(PARTITION_FIELD, f"must be comma-separated layer counts, got {value!r:.40}")
    parts = [p.strip() for p in value.split(",")]
    if len(parts) > MAX_PP or not all(p.isdigit() and len(p) <= 6 for p in parts):
        raise SizingError(PARTITION_FIELD, f"must be up to {MAX_PP} comma-separated whole layer counts, "
                                           f"got {value!r:.40}")
    counts = tuple(int(p) for p in parts)
    if min(counts) < 1:
        raise SizingError(PARTITION_FIELD, f"must give every stage at least one layer, got {value!r:.40}")
    return counts


def parse_layer_partition(value: object, layers: int, pp: int) -> tuple[int, ...]:
    """``VLLM_PP_LAYER_PARTITION`` (comma-separated layers per stage, or their ints) checked as
    vLLM checks it against the model's ``layers`` and ``pp``; errors name ``pp_layer_partition``."""
    counts = partition_counts(value)
    if len(counts) != pp:
        raise SizingError(PARTITION_FIELD, f"gives {len(counts)} stages for PP {pp}")
    if sum(counts) != layers:
        raise SizingError(PARTITION_FIELD, f"must add up to the model's {layers} layers (adds up to {sum(counts)})")
    return counts


def log_layer_partition(text: str) -> str | None:
    """The layer split a log's text states — ``VLLM_PP_LAYER_PARTITION=…`` where a pasted command
    or environment shows it, else vLLM's "Hidden layers were unevenly partitioned: [a,b]" — as
    "a,b"; None when it states neither. The first ``_MAX_LOG_SCAN_CHARS`` characters are read."""
    if not isinstance(text, str):
        raise SizingError("log", f"expected the log's text, got {type(text).__name__}")
    match = _LOG_PARTITION.search(text[:_MAX_LOG_SCAN_CHARS])
    if match is None:
        return None
    return ",".join(p.strip() for p in (match.group(1) or match.group(2)).split(","))


def stage_layer_counts(layers: int, pp: int, partition: Sequence[int] | str | None = None) -> tuple[int, ...]:
    """Layers per pipeline stage, in stage order: ``partition`` (checked) or vLLM's default."""
    check_int("layers", layers, high=1 << 16)
    check_int("pp", pp, high=MAX_PP)
    if partition is not None:
        return parse_layer_partition(partition, layers, pp)
    if pp > layers:
        raise SizingError("pp", f"PP {pp} leaves some of the {pp} stages without one of the {layers} layers")
    counts = [layers // pp] * pp
    for i in range(2, layers % pp + 2):
        counts[-i] += 1
    return tuple(counts)


def stage_layers(layers: int, pp: int, stage: int, partition: Sequence[int] | str | None = None) -> range:
    """The layer indices stage ``stage`` (0-based) holds."""
    counts = stage_layer_counts(layers, pp, partition)
    check_int("pp_stage", stage, low=0, high=pp - 1)
    start = sum(counts[:stage])
    return range(start, start + counts[stage])


def pipeline_stage(model: ModelShape, pp: int, stage: int = 0,
                   partition: Sequence[int] | str | None = None) -> ModelShape:
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


__all__ = ["MAX_PP", "MERGED_CHECK_SINCE", "OneRequestRule", "PARTITION_FIELD", "WORKER_CHECK_SINCE",
           "log_layer_partition", "one_request_rule", "parse_layer_partition", "partition_counts",
           "pipeline_stage", "stage_layer_counts", "stage_layers"]

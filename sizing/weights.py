"""Weight bytes: from the safetensors total when the Hub states it, else from the parameter count
and the weight format, with the quantised modules (a config's ``quantization_config``) in that
format and the rest (embeddings, norms, excluded modules) in bf16.

``quantization_config`` selects the format:

* ``quant_method: mxfp4`` → ``mxfp4`` (gpt-oss: experts only; attention, router, embeddings and
  lm_head are listed in ``modules_to_not_convert``);
* ``fp8`` with ``weight_block_size`` → ``fp8_block`` (DeepSeek-V3, Kimi K2), without → ``fp8``;
* ``gptq`` / ``awq`` with ``bits: 4`` → ``gptq_int4`` / ``awq_int4``; 8 bits → ``int8``;
* ``compressed-tensors`` / ``modelopt`` naming FP4 / NVFP4 → ``nvfp4``, FP8 → ``fp8``.

Which modules stay in the checkpoint's 16-bit dtype is vLLM's rule, read from its quantisation
configs (``vllm/model_executor/layers/quantization/``): every method quantises only linear layers
(``LinearBase``) and fused experts, so ``VocabParallelEmbedding`` and ``ParallelLMHead`` keep
``UnquantizedEmbeddingMethod`` (``vocab_parallel_embedding.py``) — GPTQ's ``lm_head: true``
aside (``utils/gptq_utils.py``). A linear layer stays unquantised when the config names it, under
a key each method reads for itself: ``Fp8Config`` ``ignored_layers``, else
``modules_to_not_convert`` (``fp8.py``); AWQ ``modules_to_not_convert`` (``awq.py``,
``awq_marlin.py``); compressed-tensors ``ignore``; ModelOpt ``exclude_modules`` / ``ignore``;
bitsandbytes ``llm_int8_skip_modules``; GPTQ none of those, but a ``dynamic`` rule ``-:<regex>``
or a ``modules_in_block_to_quantize`` list that leaves the module out. ``Mxfp4Config`` holds
every linear layer unquantised (``mxfp4.py``): only the experts are MXFP4. Here a module named
under attention (``self_attn``, ``attn``) leaves all attention in 16 bits; 16-bit is 2 B a value
whatever the config's ``torch_dtype`` (vLLM loads an fp32 checkpoint in 16 bits by default).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sizing.errors import ConfigError
from sizing.models import ModelShape, check_int
from sizing.precisions import Precision, get_precision
from units import cdiv

AUTO = "auto"  # the model's own format (its quantisation config), bf16 when it has none
UNQUANTISED_BYTES = 2  # embeddings, norms and excluded modules stay in bf16


@dataclass(frozen=True, kw_only=True)
class QuantFormat:
    """The weight format a quantisation config names, and whether attention is left out of it."""

    name: str
    attention_quantised: bool


def _text(value: Any) -> str:
    return value.lower() if isinstance(value, str) else ""


# The keys under which a method's config names the modules it leaves unquantised (module notes);
# a method not listed here is read under every one of them.
_EXCLUDED_KEYS: dict[str, tuple[str, ...]] = {
    "fp8": ("ignored_layers", "modules_to_not_convert"),
    "awq": ("modules_to_not_convert",),
    "bitsandbytes": ("llm_int8_skip_modules",),
}
_ANY_EXCLUDED_KEYS = ("modules_to_not_convert", "ignore", "ignored_layers", "exclude_modules")
MAX_MODULE_NAMES = 100_000  # far more than any model's layers × projections


def _module_names(quant: Mapping[str, Any], key: str) -> list[str]:
    """The lower-cased module names (or patterns) under ``quant[key]``; nested lists are
    flattened (GPTQ's ``modules_in_block_to_quantize`` groups them); [] when absent."""
    value = quant.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConfigError("quantization_config", f"{key} must be a list of module names, got {type(value).__name__}")
    names = [name for item in value for name in (item if isinstance(item, list) else [item])]
    if len(names) > MAX_MODULE_NAMES:
        raise ConfigError("quantization_config", f"{key} names {len(names):,} modules; at most {MAX_MODULE_NAMES:,}")
    return [_text(name) for name in names]


def _names_attention(names: list[str]) -> bool:
    return any("attn" in name for name in names)  # self_attn, attn, cross_attn


def _attention_quantised(method: str, quant: Mapping[str, Any]) -> bool:
    """Whether vLLM loads the attention projections in the format (module notes)."""
    if method == "mxfp4":
        return False
    if method == "gptq":
        dynamic = quant.get("dynamic")
        if dynamic is not None and not isinstance(dynamic, Mapping):
            raise ConfigError("quantization_config", f"dynamic must be an object, got {type(dynamic).__name__}")
        skipped = [_text(rule) for rule in (dynamic or {}) if _text(rule).startswith("-:")]
        in_block = _module_names(quant, "modules_in_block_to_quantize")
        return not (_names_attention(skipped) or (in_block and not _names_attention(in_block)))
    lists = [_module_names(quant, key) for key in _EXCLUDED_KEYS.get(method, _ANY_EXCLUDED_KEYS)]
    if method == "fp8":  # modules_to_not_convert is read only when ignored_layers is empty
        return not _names_attention(next((names for names in lists if names), []))
    return not any(_names_attention(names) for names in lists)


def quant_format(cfg: Mapping[str, Any]) -> QuantFormat | None:
    """The format ``cfg["quantization_config"]`` selects (module docstring); None without one."""
    quant = cfg.get("quantization_config")
    if quant is None:
        return None
    if not isinstance(quant, Mapping):
        raise ConfigError("quantization_config", f"must be an object, got {type(quant).__name__}")
    method = _text(quant.get("quant_method"))
    bits = quant.get("bits")
    described = f"{method} {_text(quant.get('quant_algo'))} {_text(str(quant.get('config_groups', '')))}"
    if method == "mxfp4":
        name = "mxfp4"
    elif method == "fp8":
        name = "fp8_block" if quant.get("weight_block_size") else "fp8"
    elif method in ("gptq", "awq"):
        name = f"{method}_int4" if bits == 4 else "int8" if bits == 8 else None
    elif "fp4" in described:
        name = "nvfp4"
    elif "fp8" in described:
        name = "fp8"
    elif method == "bitsandbytes":
        name = "int4" if quant.get("load_in_4bit") else "int8"
    else:
        name = None
    if name is None:
        raise ConfigError("quantization_config", f"unknown quantisation {method or 'method'!r:.40} "
                                                 f"({bits!r} bits); give the weight format by hand")
    return QuantFormat(name=name, attention_quantised=_attention_quantised(method, quant))


def resolve_weight_precision(name: str, model: ModelShape, *, group_size: int | None) -> Precision:
    """``name``, or for ``"auto"`` the model's own format (bf16 when it has none)."""
    if isinstance(name, str) and name.lower() == AUTO:
        name = model.weight_format or "bf16"
    return get_precision(name, group_size=group_size, field="weight_dtype")


@dataclass(frozen=True, kw_only=True)
class WeightBytes:
    """Weight bytes of the whole model and where the figure comes from."""

    bytes: int
    source: str  # "safetensors" (the Hub's stated total) or "estimate"


def model_weight_bytes(model: ModelShape, precision: Precision, *, auto: bool = False) -> WeightBytes:
    """Bytes of the weights in ``precision``.

    With ``auto`` (the model's own format) and a stated safetensors total, that total; otherwise
    the parameters × bytes per weight, where a model whose config quantises only some modules
    keeps the others (``params − quantized_params``) in bf16.
    """
    if auto and model.safetensors_bytes:
        return WeightBytes(bytes=model.safetensors_bytes, source="safetensors")
    if model.quantized_params is not None and precision.name == model.weight_format:
        rest = model.params - model.quantized_params
        total = model.quantized_params * precision.bytes_per_value + rest * UNQUANTISED_BYTES
        return WeightBytes(bytes=math.ceil(total), source="estimate")
    return WeightBytes(bytes=math.ceil(model.params * precision.bytes_per_value), source="estimate")


def engine_weight_bytes(model: ModelShape, precision: Precision, *, auto: bool = False) -> WeightBytes:
    """Bytes of the weights as vLLM holds them in ``precision``, all ranks together (÷ TP is one
    GPU's share, plus :func:`vocab_padding_bytes`):

    * with ``auto`` and a stated safetensors total, that total;
    * in the checkpoint's own format, :func:`model_weight_bytes`'s: ``quantized_params`` (the
      linear layers the config does not exclude; MXFP4's experts) in it, the embeddings,
      ``lm_head`` (once when tied), norms and excluded attention 16-bit;
    * in another format below 16 bits (``--quantization fp8``, or a published AWQ / GPTQ / FP8 /
      FP4 checkpoint of a model the catalogue holds in bf16): the linear layers
      (``linear_params``) in it and the rest 16-bit, which no method quantises (module notes);
    * at 16 bits or more, parameters × bytes.

    The reference formula (params × bytes) is :func:`model_weight_bytes`'s, and stays the sizer's
    worked figure."""
    plain = model_weight_bytes(model, precision, auto=auto)
    own = precision.name == model.weight_format
    if plain.source == "safetensors" or own or model.linear_params is None or precision.bits >= 16:
        return plain
    rest = model.params - model.linear_params
    total = model.linear_params * precision.bytes_per_value + rest * UNQUANTISED_BYTES
    return WeightBytes(bytes=math.ceil(total), source="estimate")


VOCAB_PADDING = 64  # vLLM's DEFAULT_VOCAB_PADDING_SIZE (vocab_parallel_embedding.py)


def padded_vocab(vocab: int) -> int:
    """``vocab`` rounded up to a multiple of 64: the rows vLLM's ``VocabParallelEmbedding`` and
    ``ParallelLMHead`` allocate (``pad_vocab_size``) before splitting them evenly over TP."""
    check_int("vocab_size", vocab, high=1 << 24)
    return cdiv(vocab, VOCAB_PADDING) * VOCAB_PADDING


def vocab_padding_bytes(vocab: int, hidden: int, *, matrices: int) -> int:
    """Bytes vLLM holds beyond the checkpoint for ``matrices`` (0–2: the embedding, an untied
    ``lm_head``) 16-bit ``vocab × hidden`` matrices, over all TP ranks: the padded rows are split
    over TP with the others (TP a power of two up to 64 divides them), so ÷ TP is one GPU's share."""
    check_int("hidden", hidden, high=1 << 22)
    check_int("matrices", matrices, low=0, high=2)
    return (padded_vocab(vocab) - vocab) * hidden * UNQUANTISED_BYTES * matrices

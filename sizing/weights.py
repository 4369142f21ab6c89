"""Weight bytes: from the safetensors total when the Hub states it, else from the parameter count
and the weight format, with the quantised modules (a config's ``quantization_config``) in that
format and the rest (embeddings, norms, excluded modules) in bf16.

``quantization_config`` selects the format:

* ``quant_method: mxfp4`` → ``mxfp4`` (gpt-oss: experts only; attention, router, embeddings and
  lm_head are listed in ``modules_to_not_convert``);
* ``fp8`` with ``weight_block_size`` → ``fp8_block`` (DeepSeek-V3, Kimi K2), without → ``fp8``;
* ``gptq`` / ``awq`` with ``bits: 4`` → ``gptq_int4`` / ``awq_int4``; 8 bits → ``int8``;
* ``compressed-tensors`` / ``modelopt`` naming FP4 / NVFP4 → ``nvfp4``, FP8 → ``fp8``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sizing.errors import ConfigError
from sizing.models import ModelShape
from sizing.precisions import Precision, get_precision

AUTO = "auto"  # the model's own format (its quantisation config), bf16 when it has none
UNQUANTISED_BYTES = 2  # embeddings, norms and excluded modules stay in bf16


@dataclass(frozen=True, kw_only=True)
class QuantFormat:
    """The weight format a quantisation config names, and whether attention is left out of it."""

    name: str
    attention_quantised: bool


def _text(value: Any) -> str:
    return value.lower() if isinstance(value, str) else ""


def quant_format(cfg: Mapping[str, Any]) -> QuantFormat | None:
    """The format ``cfg["quantization_config"]`` selects (module docstring); None without one."""
    quant = cfg.get("quantization_config")
    if quant is None:
        return None
    if not isinstance(quant, Mapping):
        raise ConfigError("quantization_config", f"must be an object, got {type(quant).__name__}")
    method = _text(quant.get("quant_method"))
    excluded = quant.get("modules_to_not_convert") or quant.get("ignore") or []
    attention_out = isinstance(excluded, list) and any("self_attn" in _text(m) or "attn" in _text(m) for m in excluded)
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
    return QuantFormat(name=name, attention_quantised=not attention_out)


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
    """Bytes of the weights as an engine holds them in ``precision``: as :func:`model_weight_bytes`,
    except that a format the checkpoint is not stored in converts only the linear layers —
    embeddings, ``lm_head`` and norms stay 16-bit, as vLLM's ``--quantization fp8`` and every
    published AWQ / GPTQ / FP4 checkpoint keep them. The reference formula (params × bytes)
    is :func:`model_weight_bytes`'s, and stays the sizer's worked figure."""
    plain = model_weight_bytes(model, precision, auto=auto)
    own = precision.name == model.weight_format
    if plain.source == "safetensors" or own or model.linear_params is None or precision.bits >= 16:
        return plain
    rest = model.params - model.linear_params
    total = model.linear_params * precision.bytes_per_value + rest * UNQUANTISED_BYTES
    return WeightBytes(bytes=math.ceil(total), source="estimate")

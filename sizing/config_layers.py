"""Each layer's kind, window and recurrent state, read from a Hugging Face ``config.json``, and
the typed key readers every config reader here uses.

Conventions, in order of precedence:

* ``layer_types`` (one entry per layer): ``full_attention`` / ``attention``, ``sliding_attention``,
  ``chunked_attention``, ``linear_attention``, ``mamba``; any other entry is refused, never
  counted as full attention.
* Llama 4 (``llama4_text``): layers with RoPE attend within chunks of ``attention_chunk_size``;
  ``no_rope_layers`` marks them (1 = RoPE), by default every fourth layer is global (NoPE).
* Qwen3-Next (``qwen3_next``): every ``full_attention_interval``-th layer is full attention,
  the others gated delta nets.
* Nemotron-H (``hybrid_override_pattern``): ``M`` Mamba2, ``*`` attention, ``-`` / ``E`` an MLP
  or MoE block that caches nothing.
* Jamba (``jamba``): attention where ``i % attn_layer_period == attn_layer_offset``, Mamba
  elsewhere.
* Gemma-2 (alternating), Gemma-3 (``sliding_window_pattern``: every N-th layer global),
  Qwen2 (``max_window_layers``), Mistral / Phi-3 (a window on every layer).

Recurrent state sizes follow vLLM's ``MambaStateShapeCalculator``: Mamba2 conv
``(inner + 2·groups·state) × (kernel − 1)`` plus SSM ``heads × head_dim × state``; Mamba1 conv
``inner × (kernel − 1)`` plus ``inner × state``; gated delta net conv
``(2·key_dim + value_dim) × (kernel − 1)`` plus ``v_heads × k_dim × v_dim``. The state is
kept in the model's dtype (``torch_dtype``), as vLLM's ``mamba_cache_dtype="auto"`` does; a
gated delta net's recurrent state is kept in ``mamba_ssm_dtype`` when the config names one
(Qwen3.5 / 3.6: float32), which vLLM copies into ``mamba_ssm_cache_dtype`` while that is
``auto`` (``vllm/model_executor/models/config.py``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sizing.errors import ConfigError
from sizing.layers import LayerKind, RecurrentState

MAX_TOKENS = 1 << 40
MAX_LAYERS = 10_000
MAX_COUNT = 1 << 22  # heads, widths, state sizes: far above any real model

_LAYER_TYPES = {
    "full_attention": LayerKind.FULL, "attention": LayerKind.FULL, "global_attention": LayerKind.FULL,
    "sliding_attention": LayerKind.SLIDING, "chunked_attention": LayerKind.CHUNKED,
    "linear_attention": LayerKind.LINEAR, "mamba": LayerKind.MAMBA,
}
_PATTERN = {"M": LayerKind.MAMBA, "*": LayerKind.FULL, "-": None, "E": None}
_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "float": 4, "half": 2}


def get_int(cfg: Mapping[str, Any], keys: tuple[str, ...], *, default: Any = ..., low: int = 1, high: int) -> Any:
    """The first present key of ``keys`` as an int in [low, high]; ``default`` when all absent or null."""
    for key in keys:
        if key in cfg and cfg[key] is not None:
            value = cfg[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigError(key, f"must be an integer, got {type(value).__name__} {value!r:.40}")
            if isinstance(value, float):
                if not math.isfinite(value) or value != int(value):
                    raise ConfigError(key, f"must be a whole number, got {value!r}")
                value = int(value)
            if value < low:
                raise ConfigError(key, f"must be at least {low:,}, got {value:,}")
            if value > high:
                raise ConfigError(key, f"is implausibly large ({value:.3g}; at most {high:,})")
            return value
    if default is ...:
        raise ConfigError(keys[0], "is missing")
    return default


def get_bool(cfg: Mapping[str, Any], key: str, default: bool) -> bool:
    value = cfg.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ConfigError(key, f"must be true or false, got {value!r:.40}")
    return value


@dataclass(frozen=True, kw_only=True)
class ConfigLayers:
    """What a config says about its layers. ``kinds`` None: every layer full attention (or MLA)
    unless ``sliding_layers`` says otherwise (the older single-window conventions)."""

    kinds: tuple[LayerKind | None, ...] | None = None
    sliding_window: int | None = None
    sliding_layers: tuple[int, ...] | None = None
    chunk_size: int | None = None
    state: RecurrentState | None = None


def state_dtype_bytes(cfg: Mapping[str, Any]) -> int:
    """Bytes per recurrent-state value: the model dtype (bf16 unless the config says otherwise)."""
    dtype = cfg.get("torch_dtype", cfg.get("dtype", "bfloat16"))
    if not isinstance(dtype, str) or dtype.removeprefix("torch.") not in _DTYPE_BYTES:
        raise ConfigError("torch_dtype", f"unknown dtype {dtype!r:.40}")
    return _DTYPE_BYTES[dtype.removeprefix("torch.")]


def recurrent_state_dtype_bytes(cfg: Mapping[str, Any]) -> int | None:
    """Bytes per recurrent-state value from ``mamba_ssm_dtype``; None when absent or ``auto``
    (the state then keeps the convolution state's dtype)."""
    dtype = cfg.get("mamba_ssm_dtype")
    if dtype is None or dtype == "auto":
        return None
    if not isinstance(dtype, str) or dtype.removeprefix("torch.") not in _DTYPE_BYTES:
        raise ConfigError("mamba_ssm_dtype", f"unknown dtype {dtype!r:.40}; use one of {', '.join(_DTYPE_BYTES)}")
    return _DTYPE_BYTES[dtype.removeprefix("torch.")]


def _mamba_state(cfg: Mapping[str, Any], hidden: int, model_type: str) -> RecurrentState:
    dtype = state_dtype_bytes(cfg)
    if model_type == "jamba":  # Mamba1: inner channels, each with its own SSM state
        inner = get_int(cfg, ("mamba_expand",), default=2, high=64) * hidden
        return RecurrentState(kind=LayerKind.MAMBA, conv_kernel=get_int(cfg, ("mamba_d_conv",), default=4, high=64),
                              conv_channels=inner, heads=inner, dtype_bytes=dtype,
                              state_per_head=get_int(cfg, ("mamba_d_state",), default=16, high=MAX_COUNT))
    heads = get_int(cfg, ("mamba_num_heads", "mamba_n_heads"), high=MAX_COUNT)
    head_dim = get_int(cfg, ("mamba_head_dim", "mamba_d_head"), high=MAX_COUNT)
    state = get_int(cfg, ("ssm_state_size", "mamba_d_state"), high=MAX_COUNT)
    groups = get_int(cfg, ("n_groups", "mamba_n_groups", "mamba_num_groups"), default=1, high=MAX_COUNT)
    return RecurrentState(kind=LayerKind.MAMBA, conv_kernel=get_int(cfg, ("conv_kernel", "mamba_d_conv"), default=4, high=64),
                          conv_channels=heads * head_dim, heads=heads, state_per_head=head_dim * state,
                          groups=groups, group_channels=2 * state, dtype_bytes=dtype)


def _linear_state(cfg: Mapping[str, Any]) -> RecurrentState:
    k_heads = get_int(cfg, ("linear_num_key_heads",), high=MAX_COUNT)
    v_heads = get_int(cfg, ("linear_num_value_heads",), high=MAX_COUNT)
    k_dim = get_int(cfg, ("linear_key_head_dim",), high=MAX_COUNT)
    v_dim = get_int(cfg, ("linear_value_head_dim",), high=MAX_COUNT)
    return RecurrentState(kind=LayerKind.LINEAR, conv_kernel=get_int(cfg, ("linear_conv_kernel_dim",), default=4, high=64),
                          conv_channels=2 * k_heads * k_dim + v_heads * v_dim, heads=v_heads,
                          state_per_head=k_dim * v_dim, dtype_bytes=state_dtype_bytes(cfg),
                          recurrent_dtype_bytes=recurrent_state_dtype_bytes(cfg))


def _explicit_kinds(cfg: Mapping[str, Any], layers: int, model_type: str) -> tuple[LayerKind | None, ...] | None:
    """Per-layer kinds from whichever convention the config uses; None for the older ones."""
    layer_types = cfg.get("layer_types")
    if layer_types is not None:
        if not isinstance(layer_types, list) or not all(isinstance(t, str) for t in layer_types):
            raise ConfigError("layer_types", "must be a list of strings")
        if len(layer_types) != layers:
            raise ConfigError("layer_types", f"has {len(layer_types)} entries for {layers} layers")
        unknown = sorted({t for t in layer_types if t not in _LAYER_TYPES})
        if unknown:
            raise ConfigError("layer_types", f"unknown entry {unknown[0][:40]!r}; known: {', '.join(_LAYER_TYPES)}")
        return tuple(_LAYER_TYPES[t] for t in layer_types)
    pattern = cfg.get("hybrid_override_pattern")
    if pattern is not None:
        if not isinstance(pattern, str) or len(pattern) != layers or set(pattern) - set(_PATTERN):
            raise ConfigError("hybrid_override_pattern",
                              f"must be {layers} characters of M (Mamba), * (attention), - (MLP), E (MoE)")
        return tuple(_PATTERN[c] for c in pattern)
    if model_type == "qwen3_next":
        interval = get_int(cfg, ("full_attention_interval",), default=4, high=MAX_LAYERS)
        return tuple(LayerKind.FULL if (i + 1) % interval == 0 else LayerKind.LINEAR for i in range(layers))
    if model_type == "jamba":
        period = get_int(cfg, ("attn_layer_period",), default=8, high=MAX_LAYERS)
        offset = get_int(cfg, ("attn_layer_offset",), default=4, low=0, high=period - 1)
        return tuple(LayerKind.FULL if i % period == offset else LayerKind.MAMBA for i in range(layers))
    if model_type.startswith("llama4") and cfg.get("attention_chunk_size") is not None:
        no_rope = cfg.get("no_rope_layers") or [int((i + 1) % 4 != 0) for i in range(layers)]
        if not isinstance(no_rope, list) or len(no_rope) != layers or any(v not in (0, 1) for v in no_rope):
            raise ConfigError("no_rope_layers", f"must list 0 or 1 for each of the {layers} layers")
        return tuple(LayerKind.CHUNKED if v else LayerKind.FULL for v in no_rope)
    return None


def _older_sliding(cfg: Mapping[str, Any], layers: int, model_type: str, window: int | None):
    """(window, sliding layer indices) from the single-window conventions; (None, None) for none."""
    if window is None or not get_bool(cfg, "use_sliding_window", True):
        return None, None
    if model_type == "gemma2":
        # Gemma-2 alternates: even-indexed layers slide, odd ones attend globally.
        return window, tuple(range(0, layers, 2))
    if model_type.startswith("gemma3"):
        pattern = get_int(cfg, ("sliding_window_pattern",), default=6, high=MAX_LAYERS)
        # Every pattern-th layer is global, the rest slide.
        return window, tuple(i for i in range(layers) if (i + 1) % pattern)
    if "max_window_layers" in cfg and model_type.startswith("qwen"):
        # Qwen2: layers from max_window_layers onwards use the window.
        first = get_int(cfg, ("max_window_layers",), low=0, high=MAX_LAYERS)
        sliding = tuple(range(min(first, layers), layers))
        return (window, sliding) if sliding else (None, None)
    return window, None  # Mistral-7B-v0.1, Phi-3: every layer slides


def read_layers(cfg: Mapping[str, Any], *, layers: int, hidden: int, model_type: str) -> ConfigLayers:
    """The layer layout of a parsed config (see the module docstring); :class:`ConfigError` names the key."""
    if model_type == "falcon_h1":
        raise ConfigError("model_type", "falcon_h1 runs attention and Mamba side by side in every layer, "
                                        "which this sizer does not model yet; enter the layout by hand")
    window = get_int(cfg, ("sliding_window",), default=None, high=MAX_TOKENS)
    kinds = _explicit_kinds(cfg, layers, model_type)
    if kinds is None:
        window, sliding = _older_sliding(cfg, layers, model_type, window)
        return ConfigLayers(sliding_window=window, sliding_layers=sliding)
    present = set(kinds)
    if LayerKind.SLIDING in present and window is None:
        raise ConfigError("sliding_window", "missing, but layer_types has sliding_attention layers")
    chunk = None
    if LayerKind.CHUNKED in present:
        chunk = get_int(cfg, ("attention_chunk_size",), high=MAX_TOKENS)
    state = None
    if LayerKind.MAMBA in present:
        state = _mamba_state(cfg, hidden, model_type)
    if LayerKind.LINEAR in present:
        if state is not None:
            raise ConfigError("layer_types", "mixes mamba and linear_attention layers, which is not supported")
        state = _linear_state(cfg)
    return ConfigLayers(kinds=kinds, sliding_window=window if LayerKind.SLIDING in present else None,
                        chunk_size=chunk, state=state)

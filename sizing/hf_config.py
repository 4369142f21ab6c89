"""Read a Hugging Face ``config.json`` into a :class:`~sizing.models.ModelShape`.

Only the keys that size the cache and the weights are read. ``head_dim`` comes from the config
when present (Gemma-2-9B: 256, not hidden_size / heads = 224). The parameter count, when not
given, is estimated from the config: embeddings (tied or not), attention (standard or MLA),
MLP or MoE experts (routed and shared), and norms. Learned position embeddings and small biases
other than Qwen2's QKV bias are left out: they are well under 0.1 % of any model here.

Everything read is untrusted: input over 1 MB, non-JSON, a non-object, wrong types, bools where
integers belong, missing keys, negative or absurd numbers all raise :class:`ConfigError`
naming the key, never a crash.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sizing.errors import ConfigError, SizingError
from sizing.models import MAX_HEAD_DIM, MAX_HEADS, MAX_LAYERS, MAX_TOKENS, ModelShape

# Largest config accepted. Real config.json files are a few KB; 1 MB stops a pasted log or a
# hostile upload from reaching the JSON parser.
MAX_CONFIG_BYTES = 1_000_000
MAX_VOCAB = 1 << 24  # 16.7 M tokens: 60× the largest vocabularies in use
MAX_WIDTH = 1 << 22  # hidden / intermediate sizes: 4 M, far above any real model

# Architectures whose MLP is a plain up/down projection; all others are gated (SwiGLU/GeGLU:
# gate, up and down matrices).
_UNGATED_MODEL_TYPES = frozenset({"gpt2", "gpt_neox", "gptj", "opt", "bloom", "falcon", "gpt_bigcode", "phi", "starcoder2"})
# Architectures with a bias on the Q, K and V projections but no ``attention_bias`` key.
_QKV_BIAS_MODEL_TYPES = frozenset({"qwen2", "qwen2_moe"})
# Gemma-2/3 norm both sides of attention and of the MLP: four norms per layer instead of two.
_FOUR_NORM_MODEL_TYPES = frozenset({"gemma2", "gemma3", "gemma3_text"})


@dataclass(frozen=True, kw_only=True)
class ParamEstimate:
    """Parameter count estimated from a config, by part (counts of values, not bytes)."""

    embedding: int
    lm_head: int  # 0 when tied to the embedding
    attention: int
    mlp: int  # dense MLPs plus all experts, routers and shared experts
    norms: int
    active: int  # used per token (MoE: only the routed experts chosen, plus shared ones)

    @property
    def total(self) -> int:
        return self.embedding + self.lm_head + self.attention + self.mlp + self.norms


# ---- raw input -----------------------------------------------------------------------------
def load_config(data: bytes | str | Mapping[str, Any]) -> dict[str, Any]:
    """Decode ``data`` (bytes, str or an already parsed mapping) into a dict, with size and type checks.

    Multimodal configs keep the language model under ``text_config``; its keys are merged over
    the top level.
    """
    if isinstance(data, Mapping):
        config = dict(data)
    else:
        if isinstance(data, str):
            raw = data.encode("utf-8", errors="surrogatepass")
        elif isinstance(data, (bytes, bytearray, memoryview)):
            raw = bytes(data)
        else:
            raise ConfigError("config", f"expected bytes or text, got {type(data).__name__}")
        if len(raw) > MAX_CONFIG_BYTES:
            raise ConfigError("config", f"{len(raw):,} bytes is over the 1 MB limit ({MAX_CONFIG_BYTES:,} bytes)")
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise ConfigError("config", f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        try:
            config = json.loads(text, parse_constant=_reject_constant)
        except ConfigError:
            raise
        except json.JSONDecodeError as exc:
            raise ConfigError("config", f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
        except (ValueError, RecursionError) as exc:  # int too long to parse; nesting too deep
            raise ConfigError("config", f"not usable JSON: {str(exc)[:120]}") from None
        if not isinstance(config, dict):
            raise ConfigError("config", f"the top level must be a JSON object, got {type(config).__name__}")
    text_config = config.get("text_config")
    if isinstance(text_config, Mapping) and "num_hidden_layers" not in config:
        config = {**config, **text_config}
    return config


def _reject_constant(name: str) -> Any:
    raise ConfigError("config", f"{name} is not a number JSON allows")


def _get_int(cfg: Mapping[str, Any], keys: tuple[str, ...], *, default: Any = ..., low: int = 1, high: int) -> Any:
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


def _get_bool(cfg: Mapping[str, Any], key: str, default: bool) -> bool:
    value = cfg.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ConfigError(key, f"must be true or false, got {value!r:.40}")
    return value


# ---- the shape -----------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class _Dims:
    model_type: str
    layers: int
    hidden: int
    q_heads: int
    kv_heads: int
    head_dim: int
    v_head_dim: int | None
    intermediate: int
    vocab: int
    tied: bool
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    q_lora_rank: int
    experts: int
    experts_per_token: int
    moe_intermediate: int
    shared_experts: int
    shared_expert_intermediate: int
    dense_layers: int  # leading layers with a dense MLP in a MoE model


def _dims(cfg: Mapping[str, Any]) -> _Dims:
    model_type = cfg.get("model_type", "")
    if not isinstance(model_type, str):
        raise ConfigError("model_type", f"must be a string, got {model_type!r:.40}")
    layers = _get_int(cfg, ("num_hidden_layers", "n_layer", "num_layers"), high=MAX_LAYERS)
    hidden = _get_int(cfg, ("hidden_size", "n_embd", "d_model"), high=MAX_WIDTH)
    q_heads = _get_int(cfg, ("num_attention_heads", "n_head"), high=MAX_HEADS)
    if cfg.get("multi_query") is True:  # Falcon-7B style flag
        kv_default = 1
    else:
        kv_default = q_heads
    kv_heads = _get_int(cfg, ("num_key_value_heads", "num_kv_heads"), default=kv_default, high=MAX_HEADS)
    kv_lora_rank = _get_int(cfg, ("kv_lora_rank",), default=0, low=0, high=MAX_HEAD_DIM)
    qk_rope = _get_int(cfg, ("qk_rope_head_dim",), default=0, low=0, high=MAX_HEAD_DIM)
    qk_nope = _get_int(cfg, ("qk_nope_head_dim",), default=0, low=0, high=MAX_HEAD_DIM)
    v_head_dim = _get_int(cfg, ("v_head_dim",), default=None, high=MAX_HEAD_DIM)
    if kv_lora_rank:
        head_dim = qk_nope + qk_rope
        if head_dim == 0:
            raise ConfigError("qk_nope_head_dim", "MLA config needs qk_nope_head_dim + qk_rope_head_dim > 0")
    else:
        head_dim = _get_int(cfg, ("head_dim",), default=None, high=MAX_HEAD_DIM)
        if head_dim is None:
            if hidden % q_heads:
                raise ConfigError("head_dim", f"missing, and hidden_size {hidden} is not a multiple of {q_heads} heads")
            head_dim = hidden // q_heads
    intermediate = _get_int(cfg, ("intermediate_size", "n_inner", "ffn_hidden_size"), default=4 * hidden, high=MAX_WIDTH)
    experts = _get_int(cfg, ("num_local_experts", "n_routed_experts", "num_experts"), default=0, low=0, high=MAX_HEADS)
    return _Dims(
        model_type=model_type,
        layers=layers,
        hidden=hidden,
        q_heads=q_heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        v_head_dim=v_head_dim if kv_lora_rank else None,
        intermediate=intermediate,
        vocab=_get_int(cfg, ("vocab_size",), high=MAX_VOCAB),
        # Hugging Face's PretrainedConfig ties embeddings unless the config says otherwise.
        tied=_get_bool(cfg, "tie_word_embeddings", True),
        kv_lora_rank=kv_lora_rank,
        qk_rope_head_dim=qk_rope,
        qk_nope_head_dim=qk_nope,
        q_lora_rank=_get_int(cfg, ("q_lora_rank",), default=0, low=0, high=MAX_WIDTH),
        experts=experts,
        experts_per_token=_get_int(cfg, ("num_experts_per_tok",), default=min(experts, 2), low=0, high=max(experts, 0)),
        moe_intermediate=_get_int(cfg, ("moe_intermediate_size",), default=intermediate, high=MAX_WIDTH),
        shared_experts=_get_int(cfg, ("n_shared_experts",), default=0, low=0, high=MAX_HEADS),
        shared_expert_intermediate=_get_int(cfg, ("shared_expert_intermediate_size",), default=0, low=0, high=MAX_WIDTH),
        dense_layers=min(_get_int(cfg, ("first_k_dense_replace",), default=0, low=0, high=MAX_LAYERS), layers),
    )


def _sliding(cfg: Mapping[str, Any], dims: _Dims) -> tuple[int | None, tuple[int, ...] | None]:
    """(window, sliding layer indices) from the config's conventions; (None, None) for none."""
    window = _get_int(cfg, ("sliding_window",), default=None, high=MAX_TOKENS)
    layer_types = cfg.get("layer_types")
    if layer_types is not None:
        if not isinstance(layer_types, list) or not all(isinstance(t, str) for t in layer_types):
            raise ConfigError("layer_types", "must be a list of strings")
        if len(layer_types) != dims.layers:
            raise ConfigError("layer_types", f"has {len(layer_types)} entries for {dims.layers} layers")
        sliding = tuple(i for i, kind in enumerate(layer_types) if kind == "sliding_attention")
        if not sliding:
            return None, None
        if window is None:
            raise ConfigError("sliding_window", "missing, but layer_types has sliding_attention layers")
        return window, sliding
    if window is None or not _get_bool(cfg, "use_sliding_window", True):
        return None, None
    if dims.model_type == "gemma2":
        # Gemma-2 alternates: even-indexed layers slide, odd ones attend globally.
        return window, tuple(range(0, dims.layers, 2))
    if dims.model_type.startswith("gemma3"):
        pattern = _get_int(cfg, ("sliding_window_pattern",), default=6, high=MAX_LAYERS)
        # Every pattern-th layer is global, the rest slide.
        return window, tuple(i for i in range(dims.layers) if (i + 1) % pattern)
    if "max_window_layers" in cfg and dims.model_type.startswith("qwen"):
        # Qwen2: layers from max_window_layers onwards use the window.
        first = _get_int(cfg, ("max_window_layers",), low=0, high=MAX_LAYERS)
        sliding = tuple(range(min(first, dims.layers), dims.layers))
        return (window, sliding) if sliding else (None, None)
    return window, None  # Mistral-7B-v0.1, Phi-3: every layer slides


# ---- parameter count -----------------------------------------------------------------------
def _estimate(cfg: Mapping[str, Any], dims: _Dims) -> ParamEstimate:
    h = dims.hidden
    embedding = dims.vocab * h
    lm_head = 0 if dims.tied else dims.vocab * h
    if dims.kv_lora_rank:
        qk_dim = dims.qk_nope_head_dim + dims.qk_rope_head_dim
        v_dim = dims.v_head_dim or dims.qk_nope_head_dim
        if dims.q_lora_rank:
            q = h * dims.q_lora_rank + dims.q_lora_rank + dims.q_lora_rank * dims.q_heads * qk_dim
        else:
            q = h * dims.q_heads * qk_dim
        kv = h * (dims.kv_lora_rank + dims.qk_rope_head_dim) + dims.kv_lora_rank  # down-projection + its norm
        kv += dims.kv_lora_rank * dims.q_heads * (dims.qk_nope_head_dim + v_dim)
        attention_layer = q + kv + dims.q_heads * v_dim * h
    else:
        q_width = dims.q_heads * dims.head_dim
        kv_width = dims.kv_heads * dims.head_dim
        attention_layer = 2 * h * q_width + 2 * h * kv_width
        if _get_bool(cfg, "attention_bias", dims.model_type in _QKV_BIAS_MODEL_TYPES):
            attention_layer += q_width + 2 * kv_width
    matrices = 2 if dims.model_type in _UNGATED_MODEL_TYPES else 3  # up/down, plus gate when gated
    dense_mlp = matrices * h * dims.intermediate
    norms_per_layer = (4 if dims.model_type in _FOUR_NORM_MODEL_TYPES else 2) * h
    if dims.experts:
        expert = matrices * h * dims.moe_intermediate
        shared = dims.shared_experts * expert
        if dims.shared_expert_intermediate:  # Qwen-MoE: one wider shared expert with a gate
            shared += matrices * h * dims.shared_expert_intermediate + h
        router = h * dims.experts
        moe_layers = dims.layers - dims.dense_layers
        mlp = dims.dense_layers * dense_mlp + moe_layers * (dims.experts * expert + shared + router)
        mlp_active = dims.dense_layers * dense_mlp + moe_layers * (dims.experts_per_token * expert + shared + router)
    else:
        mlp = mlp_active = dims.layers * dense_mlp
    attention = dims.layers * attention_layer
    norms = dims.layers * norms_per_layer + h  # plus the final norm
    return ParamEstimate(
        embedding=embedding,
        lm_head=lm_head,
        attention=attention,
        mlp=mlp,
        norms=norms,
        active=embedding + lm_head + attention + mlp_active + norms,
    )


def _architecture(cfg: Mapping[str, Any]) -> Any:
    """The first class name in ``architectures`` (None when absent or empty); anything but a
    list there is refused, since Hugging Face always writes a list of class names."""
    architectures = cfg.get("architectures")
    if architectures is None:
        return None
    if not isinstance(architectures, list):
        raise ConfigError("architectures", f"must be a list of class names, got {type(architectures).__name__}")
    return architectures[0] if architectures else None


def estimate_params(data: bytes | str | Mapping[str, Any]) -> ParamEstimate:
    """Parameter count of the model described by a config (see the module docstring)."""
    cfg = load_config(data)
    return _estimate(cfg, _dims(cfg))


def parse_hf_config(
    data: bytes | str | Mapping[str, Any], *, name: str | None = None, params: int | None = None
) -> ModelShape:
    """A :class:`ModelShape` from a Hugging Face ``config.json`` (bytes, text or parsed mapping).

    ``params`` overrides the estimated parameter count (use the published figure when known).
    Raises :class:`ConfigError` naming the key for anything unusable.
    """
    cfg = load_config(data)
    dims = _dims(cfg)
    window, sliding_layers = _sliding(cfg, dims)
    estimate = _estimate(cfg, dims)
    if name is None:
        name = cfg.get("_name_or_path") or _architecture(cfg) or dims.model_type or "config.json"
        if not isinstance(name, str):
            name = "config.json"
    try:
        return ModelShape(
            name=name[:100],
            layers=dims.layers,
            q_heads=dims.q_heads,
            kv_heads=dims.kv_heads,
            head_dim=dims.head_dim,
            v_head_dim=dims.v_head_dim,
            params=params if params is not None else estimate.total,
            active_params=min(estimate.active, params or estimate.total) if dims.experts else None,
            kv_lora_rank=dims.kv_lora_rank,
            qk_rope_head_dim=dims.qk_rope_head_dim if dims.kv_lora_rank else 0,
            sliding_window=window,
            sliding_layers=sliding_layers,
            num_experts=dims.experts,
            experts_per_token=dims.experts_per_token,
            max_context=_get_int(cfg, ("max_position_embeddings", "n_positions"), default=None, high=MAX_TOKENS),
            tied_embeddings=dims.tied,
        )
    except ConfigError:
        raise
    except SizingError as exc:  # a combination the shape rejects (e.g. 7 KV heads for 32 query heads)
        key = {"kv_heads": "num_key_value_heads", "q_heads": "num_attention_heads", "layers": "num_hidden_layers"}
        raise ConfigError(key.get(exc.field, exc.field), exc.message) from None

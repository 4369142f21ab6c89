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
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sizing.config_layers import ConfigLayers, read_layers
from sizing.config_layers import get_bool as _get_bool
from sizing.config_layers import get_int as _get_int
from sizing.errors import ConfigError, SizingError
from sizing.layers import LayerKind, RecurrentState
from sizing.models import MAX_HEAD_DIM, MAX_HEADS, MAX_LAYERS, MAX_TOKENS, ModelShape
from sizing.weights import quant_format

# Largest config accepted. Real config.json files are a few KB; 1 MB stops a pasted log or a
# hostile upload from reaching the JSON parser.
MAX_CONFIG_BYTES = 1_000_000
MAX_VOCAB = 1 << 24  # 16.7 M tokens: 60× the largest vocabularies in use
MAX_WIDTH = 1 << 22  # hidden / intermediate sizes: 4 M, far above any real model

# Architectures whose MLP is a plain up/down projection; all others are gated (SwiGLU/GeGLU:
# gate, up and down matrices).
_UNGATED_MODEL_TYPES = frozenset({"gpt2", "gpt_neox", "gptj", "opt", "bloom", "falcon", "gpt_bigcode", "phi", "starcoder2",
                                  "nemotron_h"})
# Architectures with a bias on the Q, K and V projections but no ``attention_bias`` key.
_QKV_BIAS_MODEL_TYPES = frozenset({"qwen2", "qwen2_moe"})
# Keys some published configs leave to the model class's defaults: Gemma-3's text_config omits
# the vocabulary (and the 4B its head counts), relying on transformers' Gemma3TextConfig.
# Llama 4's configs omit tie_word_embeddings; transformers' Llama4Config defaults it to False.
_CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama4": {"tie_word_embeddings": False},
    "llama4_text": {"tie_word_embeddings": False},
    "gemma3_text": {"vocab_size": 262_208, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                    "sliding_window": 4096, "sliding_window_pattern": 6},
}
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
            config = json.loads(text, parse_constant=_non_finite)
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
    defaults = _CLASS_DEFAULTS.get(config.get("model_type")) if isinstance(config.get("model_type"), str) else None
    if defaults:
        config = {**defaults, **{k: v for k, v in config.items() if v is not None or k not in defaults}}
    return config


def _non_finite(name: str) -> float:
    """``Infinity``/``-Infinity``/``NaN`` as floats: published configs carry them in keys the sizer
    never reads (Nemotron-H's ``"time_step_limit": [0.0, Infinity]``); every key it does read is
    checked to be a finite integer, so they cannot reach a size."""
    return float(name.replace("Infinity", "inf"))


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
        head_dim = _get_int(cfg, ("head_dim", "attention_head_dim"), default=None, high=MAX_HEAD_DIM)
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


# ---- parameter count -----------------------------------------------------------------------
def _attention_params(cfg: Mapping[str, Any], dims: _Dims) -> int:
    """One attention block: Q, K, V, O projections (MLA: its low-rank projections and norms)."""
    h = dims.hidden
    if dims.kv_lora_rank:
        qk_dim = dims.qk_nope_head_dim + dims.qk_rope_head_dim
        v_dim = dims.v_head_dim or dims.qk_nope_head_dim
        if dims.q_lora_rank:
            q = h * dims.q_lora_rank + dims.q_lora_rank + dims.q_lora_rank * dims.q_heads * qk_dim
        else:
            q = h * dims.q_heads * qk_dim
        kv = h * (dims.kv_lora_rank + dims.qk_rope_head_dim) + dims.kv_lora_rank  # down-projection + its norm
        kv += dims.kv_lora_rank * dims.q_heads * (dims.qk_nope_head_dim + v_dim)
        return q + kv + dims.q_heads * v_dim * h
    q_width = dims.q_heads * dims.head_dim
    kv_width = dims.kv_heads * dims.head_dim
    # Qwen3-Next's full-attention layers project a gate next to each query (twice the Q width).
    q_out = 2 * q_width if dims.model_type == "qwen3_next" else q_width
    params = h * q_out + h * q_width + 2 * h * kv_width
    if _get_bool(cfg, "attention_bias", dims.model_type in _QKV_BIAS_MODEL_TYPES):
        params += q_width + 2 * kv_width
    return params


def _recurrent_params(cfg: Mapping[str, Any], dims: _Dims, state: RecurrentState) -> int:
    """One Mamba1 / Mamba2 mixer or gated delta net: projections, convolution, per-head terms."""
    h = dims.hidden
    conv_dim = state.conv_channels + state.groups * state.group_channels
    if state.kind is LayerKind.LINEAR:  # gated delta net: q, k, v, z and the b, a gates
        value_dim = _get_int(cfg, ("linear_num_value_heads",), high=MAX_HEADS) * _get_int(
            cfg, ("linear_value_head_dim",), high=MAX_WIDTH)
        return (h * (state.conv_channels + value_dim + 2 * state.heads) + conv_dim * state.conv_kernel
                + 2 * state.heads + value_dim // state.heads + value_dim * h)
    if dims.model_type == "jamba":  # Mamba1: in, x, dt and out projections, A and D per channel
        inner, d_state = state.conv_channels, state.state_per_head
        dt_rank = _get_int(cfg, ("mamba_dt_rank",), default=-(-h // 16), high=MAX_WIDTH)
        return (2 * h * inner + inner * (state.conv_kernel + 1) + inner * (dt_rank + 2 * d_state)
                + dt_rank * inner + inner + inner * d_state + inner + inner * h)
    inner = state.conv_channels  # Mamba2: in_proj gives z, x, B, C and dt
    return (h * (inner + conv_dim + state.heads) + conv_dim * (state.conv_kernel + 1)
            + 3 * state.heads + inner + inner * h)


def _block_types(cfg: Mapping[str, Any], dims: _Dims, layout: ConfigLayers) -> list[tuple[str, str]]:
    """(mixer, mlp) of each layer: mixer attention / recurrent / none, mlp dense / moe / none."""
    kinds = layout.kinds or (None,) * dims.layers
    pattern = cfg.get("hybrid_override_pattern") if isinstance(cfg.get("hybrid_override_pattern"), str) else None
    blocks = []
    for index in range(dims.layers):
        kind = kinds[index]
        mixer = "recurrent" if kind in (LayerKind.MAMBA, LayerKind.LINEAR) else "attention"
        if pattern is not None:  # Nemotron-H: each layer is one block, a mixer or an MLP
            char = pattern[index]
            blocks.append(("none", "moe" if char == "E" else "dense") if char in "-E" else (mixer, "none"))
            continue
        if not dims.experts or index < dims.dense_layers:
            mlp = "dense"
        elif dims.model_type.startswith("llama4"):
            step = _get_int(cfg, ("interleave_moe_layer_step",), default=1, high=MAX_LAYERS)
            mlp = "moe" if index % step == step - 1 else "dense"
        elif dims.model_type == "jamba":
            period = _get_int(cfg, ("expert_layer_period",), default=2, high=MAX_LAYERS)
            offset = _get_int(cfg, ("expert_layer_offset",), default=1, low=0, high=MAX_LAYERS)
            mlp = "moe" if index % period == offset else "dense"
        else:
            mlp = "moe"
        blocks.append((mixer, mlp))
    return blocks


def _vision_params(cfg: Mapping[str, Any], text_hidden: int) -> int:
    """A multimodal model's vision encoder (a ViT: attention + MLP per layer) and its projector.

    An estimate from ``vision_config`` alone: the patch embedding and position tables are left
    out (under 2 % of the encoder)."""
    vision = cfg.get("vision_config")
    if not isinstance(vision, Mapping):
        return 0
    hidden = _get_int(vision, ("hidden_size",), default=0, low=0, high=MAX_WIDTH)
    layers = _get_int(vision, ("num_hidden_layers", "depth"), default=0, low=0, high=MAX_LAYERS)
    intermediate = _get_int(vision, ("intermediate_size",), default=4 * hidden, low=0, high=MAX_WIDTH)
    return layers * (4 * hidden * hidden + 2 * hidden * intermediate + 9 * hidden) + hidden * text_hidden


def _estimate(cfg: Mapping[str, Any], dims: _Dims, layout: ConfigLayers) -> ParamEstimate:
    h = dims.hidden
    embedding = dims.vocab * h
    lm_head = 0 if dims.tied else dims.vocab * h
    attention_block = _attention_params(cfg, dims)
    recurrent_block = _recurrent_params(cfg, dims, layout.state) if layout.state else 0
    matrices = 2 if dims.model_type in _UNGATED_MODEL_TYPES else 3  # up/down, plus gate when gated
    dense_width = dims.intermediate
    if dims.model_type.startswith("llama4"):  # dense layers are wider than the experts
        dense_width = _get_int(cfg, ("intermediate_size_mlp",), default=dims.intermediate, high=MAX_WIDTH)
    dense_mlp = matrices * h * dense_width
    expert = matrices * h * dims.moe_intermediate
    shared = dims.shared_experts * expert
    if dims.shared_expert_intermediate:  # Qwen-MoE: one wider shared expert with a gate
        shared += matrices * h * dims.shared_expert_intermediate + h
    if dims.model_type.startswith("llama4"):  # one shared expert as wide as a routed one
        shared += expert
    router = h * dims.experts
    moe_total = dims.experts * expert + shared + router
    moe_active = dims.experts_per_token * expert + shared + router
    norms_per_layer = (4 if dims.model_type in _FOUR_NORM_MODEL_TYPES else 2) * h
    mixer_total = mlp = mlp_active = 0
    for mixer, block in _block_types(cfg, dims, layout):
        mixer_total += {"attention": attention_block, "recurrent": recurrent_block, "none": 0}[mixer]
        mlp += {"dense": dense_mlp, "moe": moe_total, "none": 0}[block]
        mlp_active += {"dense": dense_mlp, "moe": moe_active, "none": 0}[block]
    vision = _vision_params(cfg, h)
    norms = dims.layers * norms_per_layer + h  # plus the final norm
    return ParamEstimate(
        embedding=embedding,
        lm_head=lm_head,
        attention=mixer_total + vision,
        mlp=mlp,
        norms=norms,
        active=embedding + lm_head + mixer_total + vision + mlp_active + norms,
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
    dims = _dims(cfg)
    return _estimate(cfg, dims, read_layers(cfg, layers=dims.layers, hidden=dims.hidden, model_type=dims.model_type))


def parse_hf_config(
    data: bytes | str | Mapping[str, Any], *, name: str | None = None, params: int | None = None,
    safetensors_bytes: int | None = None,
) -> ModelShape:
    """A :class:`ModelShape` from a Hugging Face ``config.json`` (bytes, text or parsed mapping).

    ``params`` overrides the estimated parameter count (use the published figure when known).
    Raises :class:`ConfigError` naming the key for anything unusable.
    """
    cfg = load_config(data)
    dims = _dims(cfg)
    layout = read_layers(cfg, layers=dims.layers, hidden=dims.hidden, model_type=dims.model_type)
    estimate = _estimate(cfg, dims, layout)
    quant = quant_format(cfg)
    total = params if params is not None else estimate.total
    quantized = None
    if quant is not None:  # linear layers in the format; embeddings, norms (and excluded attention) bf16
        share = (estimate.attention if quant.attention_quantised else 0) + estimate.mlp
        quantized = min(total, round(share * total / estimate.total))
    linear = min(total, round((estimate.attention + estimate.mlp) * total / estimate.total)) if estimate.total else None
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
            sliding_window=layout.sliding_window,
            sliding_layers=layout.sliding_layers,
            layer_kinds=layout.kinds,
            chunk_size=layout.chunk_size,
            state=layout.state,
            weight_format=quant.name if quant else None,
            quantized_params=quantized,
            linear_params=linear,
            safetensors_bytes=safetensors_bytes,
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

"""Model presets: the sizing-relevant keys of each model's published ``config.json``, copied
as published, plus the parameter count from its model card or Hub page.

Shapes are built from these configs by :mod:`sizing.hf_config`, the same path an uploaded
config takes, so the presets also exercise the parser.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from sizing.errors import SizingError
from sizing.hf_config import parse_hf_config
from sizing.models import ModelShape

_HF = "https://huggingface.co"


@dataclass(frozen=True, kw_only=True, eq=False)
class ModelPreset:
    """A published model: its config keys, published parameter count, and where both come from."""

    id: str  # CLI / URL id, e.g. "llama-3.1-70b"
    name: str  # display name
    repo: str  # Hugging Face repository the config comes from
    config: Mapping[str, Any]
    params: int  # published total parameter count
    params_source: str  # where the count is stated
    note: str = ""

    @property
    def source(self) -> str:
        """URL of the published config.json."""
        return f"{_HF}/{self.repo}/blob/main/config.json"

    @property
    def shape(self) -> ModelShape:
        return _shape(self.id)

    @property
    def params_billions(self) -> float:
        """The published parameter count in billions, as model cards quote it."""
        return self.params / 1e9


def _llama(hidden: int, intermediate: int, heads: int, layers: int, kv: int, vocab: int, max_pos: int) -> dict[str, Any]:
    return {
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_attention_heads": heads,
        "num_hidden_layers": layers,
        "num_key_value_heads": kv,
        "vocab_size": vocab,
        "max_position_embeddings": max_pos,
        "tie_word_embeddings": False,
    }


_PRESETS: tuple[ModelPreset, ...] = (
    ModelPreset(
        id="llama-2-70b", name="Llama-2-70B", repo="meta-llama/Llama-2-70b-hf",
        config=_llama(8192, 28672, 64, 80, 8, 32000, 4096),
        params=68_980_000_000, params_source="Hugging Face Hub safetensors metadata (69.0 B; model card: 70B)",
    ),
    ModelPreset(
        id="llama-3.1-8b", name="Llama-3.1-8B", repo="meta-llama/Llama-3.1-8B",
        config=_llama(4096, 14336, 32, 32, 8, 128256, 131072),
        params=8_030_000_000, params_source="Llama 3.1 model card (8.03 B)",
    ),
    ModelPreset(
        id="llama-3.1-70b", name="Llama-3.1-70B", repo="meta-llama/Llama-3.1-70B",
        config=_llama(8192, 28672, 64, 80, 8, 128256, 131072),
        params=70_600_000_000, params_source="Llama 3.1 model card (70.6 B)",
    ),
    ModelPreset(
        id="llama-3.1-405b", name="Llama-3.1-405B", repo="meta-llama/Llama-3.1-405B",
        config=_llama(16384, 53248, 128, 126, 8, 128256, 131072),
        params=405_000_000_000, params_source="Llama 3.1 model card (405 B)",
    ),
    ModelPreset(
        id="mistral-7b", name="Mistral-7B-v0.1", repo="mistralai/Mistral-7B-v0.1",
        config={
            "model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
            "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
            "vocab_size": 32000, "max_position_embeddings": 32768, "sliding_window": 4096,
            "tie_word_embeddings": False,
        },
        params=7_240_000_000, params_source="Hugging Face Hub (7.24 B)",
        note="v0.1 caps every layer's cache at its 4,096-token sliding window; v0.2+ dropped the window",
    ),
    ModelPreset(
        id="mixtral-8x7b", name="Mixtral-8x7B-v0.1", repo="mistralai/Mixtral-8x7B-v0.1",
        config={
            "model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
            "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
            "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000,
            "max_position_embeddings": 32768, "sliding_window": None, "tie_word_embeddings": False,
        },
        params=46_700_000_000, params_source="Mixtral of Experts announcement (46.7 B total, 12.9 B active)",
    ),
    ModelPreset(
        id="qwen2.5-7b", name="Qwen2.5-7B", repo="Qwen/Qwen2.5-7B",
        config={
            "model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944,
            "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
            "vocab_size": 152064, "max_position_embeddings": 131072, "sliding_window": 131072,
            "use_sliding_window": False, "max_window_layers": 28, "tie_word_embeddings": False,
        },
        params=7_610_000_000, params_source="Qwen2.5-7B model card (7.61 B)",
    ),
    ModelPreset(
        id="qwen2.5-72b", name="Qwen2.5-72B", repo="Qwen/Qwen2.5-72B",
        config={
            "model_type": "qwen2", "hidden_size": 8192, "intermediate_size": 29568,
            "num_attention_heads": 64, "num_hidden_layers": 80, "num_key_value_heads": 8,
            "vocab_size": 152064, "max_position_embeddings": 131072, "sliding_window": 131072,
            "use_sliding_window": False, "max_window_layers": 80, "tie_word_embeddings": False,
        },
        params=72_700_000_000, params_source="Qwen2.5-72B model card (72.7 B)",
    ),
    ModelPreset(
        id="gemma-2-9b", name="Gemma-2-9B", repo="google/gemma-2-9b",
        config={
            "model_type": "gemma2", "hidden_size": 3584, "intermediate_size": 14336,
            "num_attention_heads": 16, "num_hidden_layers": 42, "num_key_value_heads": 8,
            "head_dim": 256, "vocab_size": 256000, "max_position_embeddings": 8192,
            "sliding_window": 4096,
        },
        params=9_240_000_000, params_source="Hugging Face Hub (9.24 B)",
        note="head_dim 256 (not hidden/heads = 224); 4,096-token window on alternating layers",
    ),
    ModelPreset(
        id="gemma-2-27b", name="Gemma-2-27B", repo="google/gemma-2-27b",
        config={
            "model_type": "gemma2", "hidden_size": 4608, "intermediate_size": 36864,
            "num_attention_heads": 32, "num_hidden_layers": 46, "num_key_value_heads": 16,
            "head_dim": 128, "vocab_size": 256000, "max_position_embeddings": 8192,
            "sliding_window": 4096,
        },
        params=27_200_000_000, params_source="Hugging Face Hub (27.2 B)",
    ),
    ModelPreset(
        id="deepseek-v3", name="DeepSeek-V3", repo="deepseek-ai/DeepSeek-V3",
        config={
            "model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
            "moe_intermediate_size": 2048, "num_attention_heads": 128, "num_key_value_heads": 128,
            "num_hidden_layers": 61, "first_k_dense_replace": 3, "n_routed_experts": 256,
            "n_shared_experts": 1, "num_experts_per_tok": 8, "q_lora_rank": 1536,
            "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
            "vocab_size": 129280, "max_position_embeddings": 163840, "tie_word_embeddings": False,
        },
        params=671_000_000_000,
        params_source="DeepSeek-V3 technical report (671 B total, 37 B active; the Hub's 685 B adds the 14 B MTP module)",
        note="MLA: caches one 512 + 64 latent per layer and token, replicated on every TP rank",
    ),
    ModelPreset(
        id="phi-3-mini", name="Phi-3-mini-4k-instruct", repo="microsoft/Phi-3-mini-4k-instruct",
        config={
            "model_type": "phi3", "hidden_size": 3072, "intermediate_size": 8192,
            "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
            "vocab_size": 32064, "max_position_embeddings": 4096, "sliding_window": 2047,
            "tie_word_embeddings": False,
        },
        params=3_820_000_000, params_source="Phi-3 technical report / Hub (3.8 B)",
        note="config sets a 2,047-token sliding window on every layer",
    ),
)

PRESET_IDS: tuple[str, ...] = tuple(p.id for p in _PRESETS)
DEFAULT_PRESET = "llama-3.1-70b"


def presets() -> tuple[ModelPreset, ...]:
    """All presets, in display order."""
    return _PRESETS


def get_preset(preset_id: str) -> ModelPreset:
    """The preset with this id (case-insensitive); :class:`SizingError` on ``"model"`` otherwise."""
    key = preset_id.lower() if isinstance(preset_id, str) else preset_id
    for preset in _PRESETS:
        if preset.id == key:
            return preset
    raise SizingError("model", f"unknown model {preset_id!r}; choose one of {', '.join(PRESET_IDS)}")


def preset_shape(preset_id: str) -> ModelShape:
    """The :class:`ModelShape` of a preset (parsed once, then cached)."""
    return get_preset(preset_id).shape


@cache
def _shape(preset_id: str) -> ModelShape:
    preset = get_preset(preset_id)
    return parse_hf_config(preset.config, name=preset.name, params=preset.params)

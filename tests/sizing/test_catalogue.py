"""The shipped catalogue: every entry's per-token bytes by hand from its published config, the
parameter estimate against the published count, layer patterns and recurrent state by hand."""

from __future__ import annotations

import json

import pytest

from sizing.catalogue import CATALOGUE_DIR, catalogue, catalogue_ids, find_entry, get_entry, search_catalogue
from sizing.errors import SizingError
from sizing.hf_config import estimate_params
from sizing.kv import KVCacheSpec
from sizing.layers import LayerKind
from sizing.precisions import get_precision

BF16 = get_precision("bf16")

# BF16 bytes per token, written out from each published config: 2 (K and V) × attention layers ×
# num_key_value_heads × head_dim × 2 bytes; MLA: layers × (kv_lora_rank + qk_rope_head_dim) × 2 bytes.
# head_dim is hidden_size / num_attention_heads where the config has no head_dim.
HAND_BYTES_PER_TOKEN = {
    "llama-2-70b": 2 * 80 * 8 * 128 * 2,
    "llama-3.1-8b": 2 * 32 * 8 * 128 * 2,
    "llama-3.1-70b": 2 * 80 * 8 * 128 * 2,
    "llama-3.1-405b": 2 * 126 * 8 * 128 * 2,
    "llama-3.2-1b": 2 * 16 * 8 * 64 * 2,
    "llama-3.2-3b": 2 * 28 * 8 * 128 * 2,
    "llama-4-scout": 2 * 48 * 8 * 128 * 2,  # 36 chunked + 12 global layers, same heads
    "llama-4-maverick": 2 * 48 * 8 * 128 * 2,
    "qwen2.5-3b": 2 * 36 * 2 * (2048 // 16) * 2,
    "qwen2.5-7b": 2 * 28 * 4 * (3584 // 28) * 2,
    "qwen2.5-14b": 2 * 48 * 8 * (5120 // 40) * 2,
    "qwen2.5-32b": 2 * 64 * 8 * (5120 // 40) * 2,
    "qwen2.5-72b": 2 * 80 * 8 * (8192 // 64) * 2,
    "qwen3-0.6b": 2 * 28 * 8 * 128 * 2,
    "qwen3-1.7b": 2 * 28 * 8 * 128 * 2,
    "qwen3-4b": 2 * 36 * 8 * 128 * 2,
    "qwen3-8b": 2 * 36 * 8 * 128 * 2,
    "qwen3-14b": 2 * 40 * 8 * 128 * 2,
    "qwen3-32b": 2 * 64 * 8 * 128 * 2,
    "qwen3-30b-a3b": 2 * 48 * 4 * 128 * 2,
    "qwen3-235b-a22b": 2 * 94 * 4 * 128 * 2,
    "qwen3-next-80b-a3b": 2 * 12 * 2 * 256 * 2,  # only the 12 full-attention layers cache KV
    "gpt-oss-20b": 2 * 24 * 8 * 64 * 2,
    "gpt-oss-120b": 2 * 36 * 8 * 64 * 2,
    "gemma-2-9b": 2 * 42 * 8 * 256 * 2,
    "gemma-2-27b": 2 * 46 * 16 * 128 * 2,
    "gemma-3-1b": 2 * 26 * 1 * 256 * 2,
    "gemma-3-4b": 2 * 34 * 4 * 256 * 2,  # heads from Gemma3TextConfig's defaults (8 q / 4 KV, d 256)
    "gemma-3-12b": 2 * 48 * 8 * 256 * 2,
    "gemma-3-27b": 2 * 62 * 16 * 128 * 2,
    "mistral-7b": 2 * 32 * 8 * 128 * 2,
    "mistral-small-24b": 2 * 40 * 8 * 128 * 2,
    "ministral-8b": 2 * 36 * 8 * 128 * 2,
    "mixtral-8x7b": 2 * 32 * 8 * 128 * 2,
    "mixtral-8x22b": 2 * 56 * 8 * (6144 // 48) * 2,
    "phi-3-mini": 2 * 32 * 32 * (3072 // 32) * 2,
    "phi-4": 2 * 40 * 10 * (5120 // 40) * 2,
    "deepseek-v2-lite": 27 * (512 + 64) * 2,
    "deepseek-v3": 61 * (512 + 64) * 2,
    "deepseek-r1": 61 * (512 + 64) * 2,
    "kimi-k2": 61 * (512 + 64) * 2,
    "glm-4.5": 2 * 92 * 8 * 128 * 2,
    "nemotron-nano-9b-v2": 2 * 4 * 8 * 128 * 2,  # 4 attention layers ("*" in the pattern)
}
ESTIMATE_TOLERANCE = 0.02


def test_catalogue_has_every_family_the_sizer_needs():
    assert len(catalogue()) >= 40
    assert set(HAND_BYTES_PER_TOKEN) == set(catalogue_ids())
    kinds = {kind for e in catalogue() for kind in e.shape.kinds}
    assert kinds >= {LayerKind.FULL, LayerKind.SLIDING, LayerKind.CHUNKED, LayerKind.MLA, LayerKind.MAMBA,
                     LayerKind.LINEAR}
    assert any("text_config" in json.loads(e.config_bytes) for e in catalogue())  # a multimodal text tower


@pytest.mark.parametrize("model_id", sorted(HAND_BYTES_PER_TOKEN))
def test_bytes_per_token_by_hand(model_id):
    spec = KVCacheSpec(model=get_entry(model_id).shape, precision=BF16)
    assert spec.bytes_per_token == HAND_BYTES_PER_TOKEN[model_id]


@pytest.mark.parametrize("model_id", sorted(HAND_BYTES_PER_TOKEN))
def test_param_estimate_within_two_percent_of_published(model_id):
    entry = get_entry(model_id)
    estimate = estimate_params(entry.config_bytes).total
    assert estimate == pytest.approx(entry.params, rel=ESTIMATE_TOLERANCE)


@pytest.mark.parametrize("entry", catalogue(), ids=lambda e: e.id)
def test_every_entry_names_its_sources(entry):
    assert entry.source == f"https://huggingface.co/{entry.repo}/blob/main/config.json"
    assert entry.params_source and entry.copied_from
    assert (CATALOGUE_DIR / entry.file).is_file()
    assert entry.id in (CATALOGUE_DIR / "README.md").read_text()


def test_gemma3_five_sliding_to_one_global():
    shape = get_entry("gemma-3-27b").shape
    # sliding_window_pattern 6 (Gemma3TextConfig default): layers 5, 11, ..., 59 are global.
    full = tuple(i for i in range(62) if (i + 1) % 6 == 0)
    assert tuple(i for i, k in enumerate(shape.kinds) if k is LayerKind.FULL) == full and len(full) == 10
    assert shape.sliding_window == 1024 and shape.n_sliding_layers == 52
    # One sequence of 32,768 tokens: 10 × 32,768 + 52 × 1,024 layer-tokens × 2 × 16 × 128 × 2 B.
    spec = KVCacheSpec(model=shape, precision=BF16)
    assert spec.sequence_bytes(32_768) == (10 * 32_768 + 52 * 1024) * 2 * 16 * 128 * 2


def test_gpt_oss_alternates_sliding_and_full():
    shape = get_entry("gpt-oss-120b").shape
    assert shape.kinds == (LayerKind.SLIDING, LayerKind.FULL) * 18 and shape.sliding_window == 128
    spec = KVCacheSpec(model=shape, precision=BF16)
    assert spec.sequence_bytes(32_768) == (18 * 32_768 + 18 * 128) * 2 * 8 * 64 * 2


def test_llama4_chunked_layers():
    shape = get_entry("llama-4-scout").shape
    # no_rope_layers is empty, so transformers' default applies: every 4th layer is NoPE (global).
    assert tuple(i for i, k in enumerate(shape.kinds) if k is LayerKind.FULL) == tuple(range(3, 48, 4))
    assert shape.chunk_size == 8192
    spec = KVCacheSpec(model=shape, precision=BF16)
    assert spec.sequence_bytes(32_768) == (12 * 32_768 + 36 * 8192) * 2 * 8 * 128 * 2


def test_qwen3_next_linear_layers_hold_state_not_kv():
    shape = get_entry("qwen3-next-80b-a3b").shape
    linear = [g for g in shape.layer_groups() if g.kind is LayerKind.LINEAR]
    assert len(linear) == 1 and linear[0].count == 36 and linear[0].kv_values_per_token == 0
    # Per layer: conv (2 × 16 × 128 + 32 × 128) × (4 − 1) + recurrent 32 × 128 × 128 values, bf16.
    per_layer = (2 * 16 * 128 + 32 * 128) * 3 + 32 * 128 * 128
    spec = KVCacheSpec(model=shape, precision=BF16)
    assert spec.state_bytes_per_sequence == 36 * per_layer * 2 == 39_518_208
    # The state does not grow with the context; the 12 attention layers do.
    assert spec.sequence_bytes(1000) - spec.sequence_bytes(0) == 1000 * 2 * 12 * 2 * 256 * 2
    # TP 2: KV heads 2 → 1 per GPU, and the 32 value heads split 16 / 16.
    assert KVCacheSpec(model=shape, precision=BF16, tp=2).state_bytes_per_sequence_per_gpu == 36 * per_layer


def test_nemotron_h_mamba_layers_hold_state_not_kv():
    shape = get_entry("nemotron-nano-9b-v2").shape
    pattern = "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-"
    assert shape.n_state_layers == pattern.count("M") == 27 and shape.n_kv_layers == pattern.count("*") == 4
    # Mamba2: inner 128 × 80 = 10,240; conv (10,240 + 2 × 8 × 128) × 3; SSM 128 × 80 × 128; bf16.
    per_layer = (10_240 + 2 * 8 * 128) * 3 + 128 * 80 * 128
    assert KVCacheSpec(model=shape, precision=BF16).state_bytes_per_sequence == 27 * per_layer * 2 == 72_769_536
    # FP8 KV does not touch the state: vLLM keeps it in the model dtype.
    fp8 = KVCacheSpec(model=shape, precision=get_precision("fp8"))
    assert fp8.state_bytes_per_sequence == 72_769_536 and fp8.bytes_per_token == 2 * 4 * 8 * 128


def test_lookup_by_id_repo_and_search():
    assert find_entry("Qwen/Qwen3-32B").id == "qwen3-32b" and find_entry("QWEN3-32B").id == "qwen3-32b"
    assert [e.id for e in search_catalogue("gemma 3")][:1] == ["gemma-3-1b"]
    assert {e.id for e in search_catalogue("gpt-oss")} == {"gpt-oss-20b", "gpt-oss-120b"}
    assert search_catalogue("no such model") == ()
    with pytest.raises(SizingError, match="did you mean") as info:
        get_entry("qwen3-33b")
    assert info.value.field == "model"

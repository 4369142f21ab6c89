"""The shipped catalogue: every entry's per-token bytes by hand from its published config, the
parameter estimate against the published count, layer patterns and recurrent state by hand, and
the verified flag that separates copied configs from unconfirmed sizing keys."""

from __future__ import annotations

import json
import re

import pytest

from sizing.catalogue import (CATALOGUE_DIR, catalogue, catalogue_ids, catalogue_records, find_entry, get_entry,
                              search_catalogue)
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
    "mixtral-8x22b": 2 * 56 * 8 * (6144 // 48) * 2,  # vocab_size is 32,000 as published, not 32,768
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


# The Llama 4 copies omit tie_word_embeddings; the parser applies transformers' Llama4Config
# default (untied), so the output head's 202,048 × 5,120 = 1,034,485,760 values are counted.
UNTIED_BY_CLASS = {"llama-4-scout", "llama-4-maverick"}


@pytest.mark.parametrize("model_id", sorted(HAND_BYTES_PER_TOKEN))
def test_param_estimate_within_two_percent_of_published(model_id):
    entry = get_entry(model_id)
    config = json.loads(entry.config_bytes)
    if model_id in UNTIED_BY_CLASS:
        assert "tie_word_embeddings" not in config and "tie_word_embeddings" not in config["text_config"]
    estimate = estimate_params(config).total
    assert estimate == pytest.approx(entry.params, rel=ESTIMATE_TOLERANCE)


def test_llama4_scout_estimate_by_hand():
    # Text tower of the published config: 48 layers, each MoE with 16 routed experts and one shared
    # expert of 3 × 5,120 × 8,192, a 16-way router, attention q/o 5,120 × 5,120 and k/v 5,120 × 1,024,
    # two norms; embedding and untied head 202,048 × 5,120; a final norm. The vision tower
    # (about 0.9 B of the card's 109 B) is not in the copied file.
    expert = 3 * 5120 * 8192
    layer = (16 + 1) * expert + 5120 * 16 + 2 * 5120 * 5120 + 2 * 5120 * 1024 + 2 * 5120
    by_hand = 48 * layer + 2 * 202_048 * 5120 + 5120
    config = json.loads(get_entry("llama-4-scout").config_bytes)
    assert estimate_params(config).total == pytest.approx(by_hand, rel=1e-3)
    assert by_hand == pytest.approx(109e9, rel=ESTIMATE_TOLERANCE)


@pytest.mark.parametrize("entry", catalogue(), ids=lambda e: e.id)
def test_every_entry_names_its_sources(entry):
    assert entry.source == f"https://huggingface.co/{entry.repo}/blob/main/config.json"
    assert entry.params_source and entry.copied_from
    assert (CATALOGUE_DIR / entry.file).is_file()
    assert entry.id in (CATALOGUE_DIR / "README.md").read_text()


def _readme_row(model_id: str) -> str:
    rows = [line for line in (CATALOGUE_DIR / "README.md").read_text().splitlines() if line.startswith(f"| `{model_id}` |")]
    assert len(rows) == 1, model_id
    return rows[0]


@pytest.mark.parametrize("entry", catalogue(), ids=lambda e: e.id)
def test_verified_entries_cite_a_commit_and_unverified_ones_say_so(entry):
    assert isinstance(entry.verified, bool) and isinstance(entry.complete, bool)
    row = _readme_row(entry.id)
    if entry.verified:
        assert re.search(r"commit [0-9a-f]{7}", entry.copied_from) and "unverified" not in entry.copied_from
        assert ("verified, complete" if entry.complete else "verified, subset of keys") in row
    else:
        assert not entry.complete and entry.copied_from.startswith("sizing keys, unverified")
        assert "**sizing keys, unverified**" in row


def test_the_verified_flag_reaches_the_cli_listing():
    records = {r["id"]: r for r in catalogue_records()}
    assert records["llama-3.1-70b"]["verified"] is True and records["llama-3.1-70b"]["complete_config"] is True
    assert records["phi-4"]["verified"] is False
    assert {i for i, r in records.items() if not r["verified"]} == {e.id for e in catalogue() if not e.verified}


def test_the_readable_listing_marks_unverified_entries(capsys):
    from sizing.cli import models_main

    assert models_main(["--search", "phi"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert lines["phi-4"].endswith("(sizing keys, unverified)")
    assert models_main(["--search", "llama 3.1 70b"]) == 0
    assert "unverified" not in capsys.readouterr().out


def test_search_matches_the_architecture():
    # Nemotron-H is found by its architecture (model_type nemotron_h), not only by its name.
    assert "nemotron-nano-9b-v2" in {e.id for e in search_catalogue("nemotron_h")}


def test_the_issue_list_is_covered_and_mostly_verified():
    required = {"llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "llama-3.2-1b", "llama-3.2-3b", "llama-4-scout",
                "llama-4-maverick", "qwen2.5-7b", "qwen2.5-72b", "qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-8b",
                "qwen3-14b", "qwen3-32b", "qwen3-30b-a3b", "qwen3-235b-a22b", "qwen3-next-80b-a3b", "gpt-oss-20b",
                "gpt-oss-120b", "gemma-2-9b", "gemma-2-27b", "gemma-3-1b", "gemma-3-4b", "gemma-3-12b", "gemma-3-27b",
                "mistral-7b", "mistral-small-24b", "ministral-8b", "mixtral-8x7b", "mixtral-8x22b", "phi-3-mini",
                "phi-4", "deepseek-v2-lite", "deepseek-v3", "deepseek-r1", "kimi-k2", "glm-4.5", "nemotron-nano-9b-v2"}
    assert required <= set(catalogue_ids())
    unverified = {e.id for e in catalogue() if not e.verified}
    assert unverified == {"llama-2-70b", "qwen2.5-72b", "gemma-3-4b", "gemma-3-12b", "gemma-3-27b", "mistral-small-24b",
                          "ministral-8b", "phi-3-mini", "phi-4", "glm-4.5", "nemotron-nano-9b-v2"}
    # A multimodal text tower among the verified files (Llama 4 keeps its layers under text_config).
    assert any(e.verified and "text_config" in json.loads(e.config_bytes) for e in catalogue())


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
    # The copy has no no_rope_layers, so transformers' default applies: every 4th layer is NoPE (global).
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

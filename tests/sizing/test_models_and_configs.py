"""Presets against their published config.json values, config parsing, parameter estimates
against published counts, and hostile configs (a ConfigError naming the key, never a crash)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inputs.errors import InputError
from sizing.errors import ConfigError, SizingError
from sizing.hf_config import MAX_CONFIG_BYTES, estimate_params, parse_hf_config
from sizing.kv import KVCacheSpec
from sizing.models import AttentionKind, ModelShape
from sizing.precisions import get_precision
from sizing.presets import PRESET_IDS, get_preset, preset_shape
from sizing.report import SizingRequest, size_deployment

# (layers, q heads, KV heads, head dim) as published in each config.json.
PUBLISHED_SHAPES = {
    "llama-2-70b": (80, 64, 8, 128),
    "llama-3.1-8b": (32, 32, 8, 128),
    "llama-3.1-70b": (80, 64, 8, 128),
    "llama-3.1-405b": (126, 128, 8, 128),
    "mistral-7b": (32, 32, 8, 128),
    "mixtral-8x7b": (32, 32, 8, 128),
    "qwen2.5-7b": (28, 28, 4, 128),
    "qwen2.5-72b": (80, 64, 8, 128),
    "gemma-2-9b": (42, 16, 8, 256),
    "gemma-2-27b": (46, 32, 16, 128),
    "phi-3-mini": (32, 32, 32, 96),
}
# Published total parameter counts (model cards / technical reports), independent of the estimate.
PUBLISHED_PARAMS = {
    "llama-2-70b": 69.0e9, "llama-3.1-8b": 8.03e9, "llama-3.1-70b": 70.6e9, "llama-3.1-405b": 405e9,
    "mistral-7b": 7.24e9, "mixtral-8x7b": 46.7e9, "qwen2.5-7b": 7.61e9, "qwen2.5-72b": 72.7e9,
    "gemma-2-9b": 9.24e9, "gemma-2-27b": 27.2e9, "deepseek-v3": 671e9, "phi-3-mini": 3.82e9,
}
ESTIMATE_TOLERANCE = 0.01  # the estimate leaves out biases and similar: under 1 % for all of these


def test_every_preset_listed():
    # The first twelve preset ids stay valid (old URLs and scripts); the catalogue adds more.
    assert set(PUBLISHED_PARAMS) <= set(PRESET_IDS)
    for preset_id in PRESET_IDS:
        assert get_preset(preset_id).source.startswith("https://huggingface.co/")
        assert get_preset(preset_id).params_source


@pytest.mark.parametrize("preset_id", sorted(PUBLISHED_SHAPES))
def test_preset_shapes(preset_id):
    s = preset_shape(preset_id)
    assert (s.layers, s.q_heads, s.kv_heads, s.head_dim) == PUBLISHED_SHAPES[preset_id]


@pytest.mark.parametrize("preset_id", sorted(PUBLISHED_PARAMS))
def test_param_estimate_matches_published(preset_id):
    estimate = estimate_params(get_preset(preset_id).config).total
    assert estimate == pytest.approx(PUBLISHED_PARAMS[preset_id], rel=ESTIMATE_TOLERANCE)


def test_moe_active_params():
    assert estimate_params(get_preset("mixtral-8x7b").config).active == pytest.approx(12.9e9, rel=0.01)
    assert estimate_params(get_preset("deepseek-v3").config).active == pytest.approx(37e9, rel=0.03)
    assert preset_shape("mixtral-8x7b").is_moe


def test_gemma2_head_dim_from_config_not_hidden_over_heads():
    s = preset_shape("gemma-2-9b")
    assert s.head_dim == 256 and 3584 // 16 == 224
    # 4,096-token window on every other layer (21 of 42).
    assert s.sliding_window == 4096 and s.sliding_layers == tuple(range(0, 42, 2))


def test_deepseek_v3_mla():
    s = preset_shape("deepseek-v3")
    assert s.attention is AttentionKind.MLA
    assert s.layers == 61
    assert s.values_per_token == 61 * (512 + 64)  # no factor 2
    bf16 = KVCacheSpec(model=s, precision=get_precision("bf16"), tp=8)
    assert bf16.bytes_per_token == 61 * 576 * 2 == 70_272
    assert bf16.bytes_per_token_per_gpu == 70_272  # replicated on every TP rank
    assert bf16.bytes_per_token_all_gpus == 8 * 70_272


def test_sliding_window_caps_the_cache():
    s = preset_shape("gemma-2-9b")
    per_layer = 2 * 8 * 256
    assert s.values_for_tokens(1000) == 42 * per_layer * 1000
    assert s.values_for_tokens(8192) == per_layer * (21 * 8192 + 21 * 4096)
    mistral = preset_shape("mistral-7b")  # v0.1: every layer slides
    assert mistral.values_for_tokens(32_768) == mistral.values_for_tokens(4096)


def test_attention_kinds():
    assert preset_shape("phi-3-mini").attention is AttentionKind.MHA
    assert preset_shape("llama-3.1-8b").attention is AttentionKind.GQA
    mqa = ModelShape(layers=2, q_heads=8, kv_heads=1, head_dim=64, params=10**6)
    assert mqa.attention is AttentionKind.MQA


def test_qwen_sliding_window_off():
    assert preset_shape("qwen2.5-7b").sliding_window is None


def test_layer_types_and_text_config():
    cfg = {"text_config": {"num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4,
                           "num_key_value_heads": 2, "vocab_size": 100, "sliding_window": 16,
                           "layer_types": ["sliding_attention", "full_attention"] * 2}}
    s = parse_hf_config(json.dumps(cfg))
    assert s.sliding_layers == (0, 2) and s.head_dim == 16 and s.kv_heads == 2


def test_bytes_str_and_mapping_agree():
    cfg = dict(get_preset("llama-3.1-8b").config)
    text = json.dumps(cfg)
    assert parse_hf_config(text) == parse_hf_config(text.encode()) == parse_hf_config(cfg)


def test_params_override():
    assert parse_hf_config(get_preset("llama-3.1-8b").config, params=8 * 10**9).params == 8 * 10**9


BASE = {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
        "vocab_size": 32000, "intermediate_size": 14336}


@pytest.mark.parametrize(("change", "field"), [
    ({"num_hidden_layers": "32"}, "num_hidden_layers"),
    ({"num_hidden_layers": True}, "num_hidden_layers"),
    ({"num_hidden_layers": -1}, "num_hidden_layers"),
    ({"num_hidden_layers": 0}, "num_hidden_layers"),
    ({"num_hidden_layers": 10**30}, "num_hidden_layers"),
    ({"num_hidden_layers": 3.5}, "num_hidden_layers"),
    ({"num_hidden_layers": None, "n_layer": None}, "num_hidden_layers"),
    ({"hidden_size": [4096]}, "hidden_size"),
    ({"num_key_value_heads": 7}, "num_key_value_heads"),
    ({"num_key_value_heads": 64}, "num_key_value_heads"),
    ({"head_dim": {"a": 1}}, "head_dim"),
    ({"vocab_size": 10**12}, "vocab_size"),
    ({"tie_word_embeddings": "yes"}, "tie_word_embeddings"),
    ({"sliding_window": -4}, "sliding_window"),
    ({"layer_types": "all"}, "layer_types"),
    ({"hidden_size": 4095}, "head_dim"),
])
def test_bad_fields_are_named(change, field):
    cfg = {**BASE, **change}
    if change.get("num_hidden_layers", 1) is None:
        del cfg["num_hidden_layers"]
    with pytest.raises(ConfigError) as info:
        parse_hf_config(json.dumps(cfg))
    assert info.value.field == field
    assert field in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("data", [
    b"not json", b"", b"[1, 2]", b"42", b"null", b'{"a": NaN}', b"\xff\xfe\x00", "{" * 100_000,
    b'{"num_hidden_layers": 1' + b"1" * 5000 + b"}", b" " * (MAX_CONFIG_BYTES + 1),
])
def test_malformed_configs(data):
    with pytest.raises(ConfigError) as info:
        parse_hf_config(data)
    assert info.value.field


def test_missing_key_named():
    cfg = dict(BASE)
    del cfg["vocab_size"]
    with pytest.raises(ConfigError, match="vocab_size"):
        parse_hf_config(cfg)


def test_not_bytes_or_text():
    with pytest.raises(ConfigError):
        parse_hf_config(12345)  # type: ignore[arg-type]


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-10**20, 10**20) | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=20,
)
_keys = st.sampled_from(["num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
                         "vocab_size", "head_dim", "intermediate_size", "sliding_window", "layer_types",
                         "kv_lora_rank", "num_local_experts", "num_experts_per_tok", "tie_word_embeddings",
                         "model_type", "text_config", "use_sliding_window", "max_position_embeddings"])


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_keys, _json, max_size=8))
def test_random_configs_never_crash(overrides):
    cfg = {**BASE, **overrides}
    try:
        shape = parse_hf_config(json.dumps(cfg))
    except ConfigError as exc:
        assert exc.field
    else:
        assert shape.values_per_token > 0 and shape.params > 0


def test_shape_validation_names_field():
    good = preset_shape("llama-3.1-8b")
    for field, value in (("layers", 0), ("kv_heads", -1), ("head_dim", True), ("params", 1.5),
                         ("sliding_window", 0), ("kv_heads", 5)):
        with pytest.raises(SizingError) as info:
            replace(good, **{field: value})
        assert info.value.field == field


@pytest.mark.parametrize("architectures", [{"a": 1}, 5, "LlamaForCausalLM", None, [], [5], ["LlamaForCausalLM"]])
def test_architectures_must_be_a_list(architectures):
    cfg = {"num_hidden_layers": 32, "num_attention_heads": 32, "hidden_size": 4096, "vocab_size": 32000,
           "intermediate_size": 11008, "architectures": architectures}
    if architectures is None or isinstance(architectures, list):
        name = parse_hf_config(json.dumps(cfg)).name
        assert name == ("LlamaForCausalLM" if architectures == ["LlamaForCausalLM"] else "config.json")
    else:
        with pytest.raises(ConfigError) as info:
            parse_hf_config(json.dumps(cfg))
        assert info.value.field == "architectures"


def test_sizing_errors_are_input_errors():
    assert issubclass(SizingError, InputError) and issubclass(ConfigError, SizingError)
    with pytest.raises(SizingError) as info:  # the catalogue's error, re-raised as the sizer's
        size_deployment(SizingRequest(gpu="tpu-v9"))
    assert info.value.field == "gpu"


def test_non_finite_constants_in_unread_keys_are_accepted_but_never_sized():
    # Nemotron-H's published config.json carries "time_step_limit": [0.0, Infinity].
    base = {"model_type": "llama", "hidden_size": 512, "intermediate_size": 1024, "num_attention_heads": 8,
            "num_hidden_layers": 2, "num_key_value_heads": 2, "vocab_size": 1000}
    text = json.dumps(base)[:-1] + ', "time_step_limit": [0.0, Infinity]}'
    assert parse_hf_config(text).layers == 2
    with pytest.raises(SizingError, match="num_hidden_layers"):
        parse_hf_config(json.dumps(base).replace('"num_hidden_layers": 2', '"num_hidden_layers": Infinity'))

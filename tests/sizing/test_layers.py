"""Layer kinds and layer groups: the values each kind caches, grouped per GPU, by hand."""

from __future__ import annotations

import pytest

from sizing.errors import SizingError
from sizing.kv import KVCacheSpec
from sizing.layers import LayerGroup, LayerKind, RecurrentState
from sizing.models import ModelShape
from sizing.precisions import get_precision
from sizing.presets import preset_shape

BF16 = get_precision("bf16")


def test_cached_tokens_per_kind():
    full = LayerGroup(kind=LayerKind.FULL, layer_indices=(0, 1), kv_values_per_token=2048)
    sliding = LayerGroup(kind=LayerKind.SLIDING, layer_indices=(2,), window=4096, kv_values_per_token=2048)
    chunked = LayerGroup(kind=LayerKind.CHUNKED, layer_indices=(3,), window=8192, kv_values_per_token=2048)
    mla = LayerGroup(kind=LayerKind.MLA, layer_indices=(4,), kv_values_per_token=576)
    mamba = LayerGroup(kind=LayerKind.MAMBA, layer_indices=(5, 7), state_values_per_sequence=1000,
                       state_bytes_per_sequence=2000)
    assert [g.cached_tokens(10_000) for g in (full, sliding, chunked, mla, mamba)] == [10_000, 4096, 8192, 10_000, 0]
    assert [g.cached_tokens(100) for g in (full, sliding, chunked, mla, mamba)] == [100, 100, 100, 100, 0]
    assert full.count == 2 and mamba.count == 2
    # 2 layers × 2,048 values × 10,000 tokens; the Mamba pair holds 2 × 1,000 state values.
    assert full.kv_values(10_000) == 40_960_000 and mamba.kv_values(10_000) == 0 and mamba.state_values == 2000
    assert sliding.label == "1 × sliding_window(4,096)"


@pytest.mark.parametrize("kwargs, field", [
    ({"kind": LayerKind.SLIDING, "layer_indices": (0,), "kv_values_per_token": 8}, "window"),
    ({"kind": LayerKind.FULL, "layer_indices": (0,), "window": 8, "kv_values_per_token": 8}, "window"),
    ({"kind": LayerKind.FULL, "layer_indices": (), "kv_values_per_token": 8}, "layer_indices"),
    ({"kind": LayerKind.FULL, "layer_indices": (2, 1), "kv_values_per_token": 8}, "layer_indices"),
    ({"kind": LayerKind.FULL, "layer_indices": (-1,), "kv_values_per_token": 8}, "layer_indices"),
    ({"kind": LayerKind.MAMBA, "layer_indices": (0,), "kv_values_per_token": 8}, "kv_values_per_token"),
    ({"kind": LayerKind.MAMBA, "layer_indices": (0,), "state_values_per_sequence": 8}, "state_values_per_sequence"),
    ({"kind": LayerKind.FULL, "layer_indices": (0,), "state_values_per_sequence": 8, "state_bytes_per_sequence": 16},
     "state_values_per_sequence"),
    ({"kind": "mystery", "layer_indices": (0,)}, None),
])
def test_bad_layer_groups_are_refused(kwargs, field):
    with pytest.raises(ValueError) as info:
        LayerGroup(**kwargs)
    if field is not None:
        assert isinstance(info.value, SizingError) and info.value.field == field


def test_mamba2_state_matches_vllms_shapes_by_hand():
    # A Mamba2 mixer (Nemotron-H-8B's sizes): 128 heads × head dim 64, state 128, 8 groups,
    # conv kernel 4, inner width 128 × 64 = 8,192. vLLM: conv (conv_dim / TP, kernel − 1) with
    # conv_dim = 8,192 + 2 × 8 × 128 = 10,240; SSM (128 / TP, 64, 128).
    state = RecurrentState(kind=LayerKind.MAMBA, conv_kernel=4, conv_channels=8192, heads=128,
                           state_per_head=64 * 128, groups=8, group_channels=2 * 128)
    assert state.values_per_gpu(1) == 3 * 10_240 + 128 * 64 * 128 == 1_079_296
    # TP 4: 2 groups per rank; conv (10,240 / 4 = 2,560) × 3, SSM 32 × 64 × 128.
    assert state.values_per_gpu(4) == 3 * 2560 + 32 * 64 * 128
    # TP 16: 8 groups do not split 16 ways, vLLM pads to 16 (one group per rank):
    # conv_dim = 8,192 + 2 × 16 × 128 = 12,288 → 768 per rank.
    assert state.values_per_gpu(16) == 3 * 768 + 8 * 64 * 128
    with pytest.raises(SizingError, match="TP 3"):
        state.values_per_gpu(3)


def test_gated_delta_net_state_matches_vllms_shapes_by_hand():
    # Qwen3-Next's linear layers: 16 key heads and 32 value heads of 128, conv kernel 4.
    # conv_dim = 128 × 16 × 2 + 128 × 32 = 8,192; recurrent (32 / TP, 128, 128).
    state = RecurrentState(kind=LayerKind.LINEAR, conv_kernel=4, conv_channels=8192, heads=32,
                           state_per_head=128 * 128)
    assert state.values_per_gpu(1) == 3 * 8192 + 32 * 128 * 128 == 548_864
    assert state.values_per_gpu(2) == 548_864 // 2


def test_recurrent_state_keeps_a_dtype_per_tensor():
    # Qwen3.5-style gated delta net at TP 2: conv 8,192 / 2 = 4,096 channels × 3 inputs in bf16,
    # recurrent 32 / 2 = 16 heads × 128 × 128 in fp32 (mamba_ssm_dtype).
    state = RecurrentState(kind=LayerKind.LINEAR, conv_kernel=4, conv_channels=8192, heads=32,
                           state_per_head=128 * 128, dtype_bytes=2, recurrent_dtype_bytes=4)
    assert state.recurrent_bytes_per_value == 4
    assert state.bytes_per_gpu(2) == 4096 * 3 * 2 + 16 * 128 * 128 * 4 == 24_576 + 1_048_576
    # Three speculative tokens lengthen the convolution state to 3 + 3 inputs (vLLM's num_spec).
    assert state.conv_values_per_gpu(2, speculative_tokens=3) == 4096 * 6
    assert state.bytes_per_gpu(2, speculative_tokens=3) == 4096 * 6 * 2 + 1_048_576
    # Without recurrent_dtype_bytes both tensors take dtype_bytes, as before.
    plain = RecurrentState(kind=LayerKind.LINEAR, conv_kernel=4, conv_channels=8192, heads=32, state_per_head=16384)
    assert plain.bytes_per_gpu(1) == 548_864 * 2
    shape = _mixed([LayerKind.LINEAR, LayerKind.FULL] * 2, state=state)
    linear = shape.layer_groups(tp=2)[0]
    assert linear.state_bytes_per_sequence == 1_073_152 and linear.state_bytes == 2 * 1_073_152
    assert KVCacheSpec(model=shape, precision=BF16, tp=2).state_bytes_per_sequence_per_gpu == 2 * 1_073_152


@pytest.mark.parametrize("kwargs, field", [
    ({"recurrent_dtype_bytes": 3}, "recurrent_state_dtype"),
    ({"recurrent_dtype_bytes": True}, "recurrent_state_dtype"),
    ({"dtype_bytes": 8}, "state_dtype"),
])
def test_bad_state_dtypes_are_refused(kwargs, field):
    with pytest.raises(SizingError) as info:
        RecurrentState(kind=LayerKind.LINEAR, conv_kernel=4, conv_channels=64, heads=2, state_per_head=16, **kwargs)
    assert info.value.field == field


@pytest.mark.parametrize("tokens", [-1, 65, 1.5])
def test_speculative_tokens_are_bounded(tokens):
    state = RecurrentState(kind=LayerKind.LINEAR, conv_kernel=4, conv_channels=64, heads=2, state_per_head=16)
    with pytest.raises(SizingError) as info:
        state.bytes_per_gpu(1, speculative_tokens=tokens)
    assert info.value.field == "speculative_tokens"


def _mixed(kinds, **extra):
    return ModelShape(name="mixed", layers=len(kinds), q_heads=32, kv_heads=8, head_dim=128, params=10**9,
                      layer_kinds=tuple(kinds), **extra)


def test_mixed_layout_groups_in_order_of_first_layer():
    gdn = RecurrentState(kind=LayerKind.LINEAR, conv_kernel=4, conv_channels=8192, heads=32, state_per_head=16384)
    kinds = [LayerKind.LINEAR, LayerKind.LINEAR, LayerKind.LINEAR, LayerKind.FULL] * 2
    shape = _mixed(kinds, state=gdn)
    linear, full = shape.layer_groups(tp=2)
    assert linear.kind is LayerKind.LINEAR and linear.layer_indices == (0, 1, 2, 4, 5, 6)
    assert linear.state_values_per_sequence == 548_864 // 2 and linear.state_bytes_per_sequence == 548_864
    # 8 KV heads over 2 ranks: 4 × (128 + 128) values per token and layer.
    assert full.layer_indices == (3, 7) and full.kv_values_per_token == 4 * 256
    assert shape.n_kv_layers == 2 and shape.n_state_layers == 6
    spec = KVCacheSpec(model=shape, precision=BF16)
    # 2 attention layers × 2,048 values × 2 B per token; 6 × 548,864 × 2 B of state per sequence.
    assert spec.bytes_per_token == 8192
    assert spec.state_bytes_per_sequence == 6_586_368
    assert spec.sequence_bytes(1000) == 8_192_000 + 6_586_368


def test_chunked_and_sliding_windows_and_cache_free_layers():
    kinds = [LayerKind.CHUNKED] * 3 + [LayerKind.FULL] + [LayerKind.SLIDING, None]
    shape = _mixed(kinds, chunk_size=8192, sliding_window=1024)
    groups = shape.layer_groups()
    assert [(g.kind, g.window, g.count) for g in groups] == [
        (LayerKind.CHUNKED, 8192, 3), (LayerKind.FULL, None, 1), (LayerKind.SLIDING, 1024, 1)]
    # 3 × 8,192 + 1 × 100,000 + 1 × 1,024 layer-tokens at 100K tokens.
    assert shape.cached_layer_tokens(100_000) == 3 * 8192 + 100_000 + 1024
    assert shape.sliding_layers == (4,) and shape.n_full_layers == 1


def test_unknown_or_inconsistent_layer_kinds_are_refused():
    with pytest.raises(SizingError, match="unknown layer kind") as info:
        _mixed(["full", "attention_sink"])
    assert info.value.field == "layer_kinds"
    with pytest.raises(SizingError) as info:
        _mixed([LayerKind.SLIDING, LayerKind.FULL])
    assert info.value.field == "sliding_window"
    with pytest.raises(SizingError) as info:
        _mixed([LayerKind.MAMBA, LayerKind.FULL])
    assert info.value.field == "state"
    with pytest.raises(SizingError) as info:
        ModelShape(name="x", layers=4, q_heads=8, kv_heads=8, head_dim=8, params=1, layer_kinds=("full",))
    assert info.value.field == "layer_kinds"


# The presets from before per-layer kinds existed: their groups must agree with the older fields.
SINGLE_WINDOW_PRESETS = ("llama-2-70b", "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "mistral-7b", "mixtral-8x7b",
                         "qwen2.5-7b", "qwen2.5-72b", "gemma-2-9b", "gemma-2-27b", "deepseek-v3", "phi-3-mini")


@pytest.mark.parametrize("preset_id", SINGLE_WINDOW_PRESETS)
@pytest.mark.parametrize("tp", [1, 2, 8])
def test_groups_agree_with_the_sliding_and_mla_fields(preset_id, tp):
    shape = preset_shape(preset_id)
    groups = shape.layer_groups(tp)
    sliding = set(shape.sliding_layers)
    for group in groups:
        for index in group.layer_indices:
            expected = LayerKind.SLIDING if index in sliding else (LayerKind.MLA if shape.kv_lora_rank else LayerKind.FULL)
            assert group.kind is expected
        assert group.window == (shape.sliding_window if group.kind is LayerKind.SLIDING else None)
        # The per-GPU values, written out: MLA latent replicated; else KV heads / TP (at least one) × (K + V).
        if shape.kv_lora_rank:
            assert group.kv_values_per_token == shape.kv_lora_rank + shape.qk_rope_head_dim
        else:
            assert group.kv_values_per_token == max(shape.kv_heads // tp, 1) * 2 * shape.head_dim
    assert sum(g.count for g in groups) == shape.layers
    tokens = 50_000
    window = shape.sliding_window or tokens
    by_hand = (shape.layers - len(sliding)) * tokens + len(sliding) * min(tokens, window)
    assert shape.cached_layer_tokens(tokens) == by_hand


@pytest.mark.parametrize(("value", "expected"), [(None, None), ("auto", None), ("float32", 4), ("bfloat16", 2)])
def test_mamba_ssm_dtype_sets_the_recurrent_dtype(value, expected):
    from sizing.config_layers import recurrent_state_dtype_bytes

    cfg = {} if value is None else {"mamba_ssm_dtype": value}
    assert recurrent_state_dtype_bytes(cfg) == expected


@pytest.mark.parametrize("value", ["float8", 4, ["float32"]])
def test_bad_mamba_ssm_dtype_names_the_key(value):
    from sizing.config_layers import recurrent_state_dtype_bytes
    from sizing.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        recurrent_state_dtype_bytes({"mamba_ssm_dtype": value})
    assert info.value.field == "mamba_ssm_dtype"

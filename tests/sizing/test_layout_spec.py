"""Mixed layouts typed by hand: the two forms, the kinds and their windows, the MLA and state
sizes, and refusals that name the field. Byte figures are worked out by hand in each test."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sizing.catalogue import get_entry
from sizing.errors import SizingError
from sizing.kv import KVCacheSpec, layer_kind_rows
from sizing.layers import LayerKind
from sizing.layout_spec import MAX_LAYOUT_CHARS, layout_shape, parse_layout, parse_state, recurrent_state
from sizing.precisions import get_precision

BF16 = get_precision("bf16")
FULL, SLIDING, CHUNKED, MLA, MAMBA, LINEAR = (LayerKind.FULL, LayerKind.SLIDING, LayerKind.CHUNKED, LayerKind.MLA,
                                              LayerKind.MAMBA, LayerKind.LINEAR)


def test_plus_lists_each_term_once_in_order():
    layout = parse_layout("18 full + 18 sliding(128)")
    assert layout.kinds == (FULL,) * 18 + (SLIDING,) * 18 and layout.sliding_window == 128
    assert not layout.repeating and layout.layers == 36
    shape = layout_shape(layout, q_heads=32, kv_heads=8, head_dim=128, params=8 * 10**9)
    # Per layer 2 × 8 × 128 values × 2 B = 4,096 B per token; at 1,000 tokens the 18 sliding
    # layers hold 128 tokens, the 18 full layers all 1,000.
    spec = KVCacheSpec(model=shape, precision=BF16)
    assert spec.bytes_per_token == 36 * 4096
    assert spec.sequence_bytes(1000) == 18 * 4096 * 1000 + 18 * 4096 * 128


def test_colon_period_repeats_and_matches_gemma3_27b():
    # Gemma-3-27B: 62 layers, every sixth global (layer i global when (i + 1) % 6 == 0), window 1,024.
    layout = parse_layout("5 sliding(1,024) : 1 full", layers=62)
    assert layout.repeating and layout.layers == 62
    assert [i for i, kind in enumerate(layout.kinds) if kind is FULL] == [i for i in range(62) if (i + 1) % 6 == 0]
    gemma = get_entry("gemma-3-27b").shape
    typed = layout_shape(layout, q_heads=gemma.q_heads, kv_heads=gemma.kv_heads, head_dim=gemma.head_dim,
                         params=gemma.params)
    assert typed.kinds == gemma.kinds and typed.sliding_window == gemma.sliding_window == 1024
    # Same bytes as the published config: 52 layers capped at 1,024 tokens, 10 over all 32,768.
    for tokens in (100, 1024, 32_768):
        assert (KVCacheSpec(model=typed, precision=BF16).sequence_bytes(tokens)
                == KVCacheSpec(model=gemma, precision=BF16).sequence_bytes(tokens)
                == 2 * 16 * 128 * 2 * (52 * min(tokens, 1024) + 10 * tokens))


def test_chunked_layers_and_spellings():
    layout = parse_layout("3 × chunked(8192) : 1 global", layers=48)  # Llama 4: every fourth layer global
    assert layout.chunk_size == 8192 and layout.kinds.count(CHUNKED) == 36 and layout.kinds.count(FULL) == 12
    assert parse_layout("2 SWA(4096) + 2 x GQA").kinds == (SLIDING, SLIDING, FULL, FULL)
    assert parse_layout("4 full + 2 mlp").kinds == (FULL,) * 4 + (None,) * 2


def test_mla_latent_is_one_vector_per_layer_replicated_under_tp():
    layout = parse_layout("61 mla")
    shape = layout_shape(layout, q_heads=128, kv_heads=128, head_dim=192, params=671 * 10**9,
                         kv_lora_rank=512, qk_rope_head_dim=64)
    # DeepSeek-V3: (512 + 64) values × 2 B × 61 layers = 70,272 B per token, the same on each of 8 GPUs.
    assert KVCacheSpec(model=shape, precision=BF16, tp=8).bytes_per_token_per_gpu == 576 * 2 * 61 == 70_272
    with pytest.raises(SizingError) as info:
        layout_shape(layout, q_heads=128, kv_heads=128, head_dim=192, params=10**9, kv_lora_rank=0)
    assert info.value.field == "kv_lora_rank"


def test_recurrent_layers_hold_state_not_kv():
    # Nemotron-H-style Mamba2 layer: conv (4 − 1) × (8,192 + 8 × 256) = 30,720 values,
    # SSM 128 heads × 64 × 128 = 1,048,576 values; bf16 → 2,158,592 B per layer and sequence.
    state = parse_state("kernel=4 channels=8192 heads=128 per_head=8192 groups=8 group_channels=256", MAMBA)
    assert state.values_per_gpu(1) == 30_720 + 1_048_576
    layout = parse_layout("1 full : 3 mamba", layers=48)
    shape = layout_shape(layout, q_heads=32, kv_heads=8, head_dim=128, params=9 * 10**9, state=state)
    rows = {row.kind: row for row in layer_kind_rows(shape, BF16, tp=1, context=8192)}
    assert rows["mamba"].bytes_per_token == 0 and rows["mamba"].state_bytes_per_sequence == 36 * 2_158_592
    assert rows["full"].bytes_per_token == 12 * 4096
    # At TP 2: heads and channels split (64 heads, 4,096 + 4 × 256 channels): half the state.
    rows_tp2 = {row.kind: row for row in layer_kind_rows(shape, BF16, tp=2, context=8192)}
    assert rows_tp2["mamba"].state_bytes_per_sequence_per_gpu == 36 * 2 * (3 * (4096 + 4 * 256) + 64 * 8192)


def test_state_dtype_and_gated_delta_net():
    # Qwen3-Next's gated delta net: conv 3 × (2 × 16 × 128 + 32 × 128), 32 value heads × 128 × 128.
    state = recurrent_state("linear_attention", conv_kernel=4, conv_channels=8192, heads=32, state_per_head=16_384,
                            dtype="fp32")
    assert state.values_per_gpu(1) == 3 * 8192 + 32 * 16_384 and state.dtype_bytes == 4
    qwen_next = get_entry("qwen3-next-80b-a3b").shape
    assert qwen_next.state.values_per_gpu(1) == state.values_per_gpu(1)


@pytest.mark.parametrize(("text", "layers", "message"), [
    ("", None, "is empty"), ("   ", None, "is empty"), (42, None, "must be text"),
    ("4 foo", None, "unknown layer kind 'foo'"), ("4 sliding", None, "need their window"),
    ("4 full(512)", None, "take no window"), ("0 full", None, "from 1 to 10,000"),
    ("10001 full", None, "from 1 to 10,000"), ("4 sliding(0)", None, "window must be"),
    ("4 sliding(1e9)", None, "not COUNT KIND"), ("1 full : 1 sliding(8) + 1 full", 4, "not both"),
    ("2 sliding(512) + 2 sliding(4096)", None, "one sliding window per model"),
    ("2 chunked(512) + 2 chunked(8192)", None, "one chunk size per model"),
    ("2 full + 2 mla", None, "one attention shape"), ("2 mamba + 2 linear", None, "one recurrent state"),
    ("4 mlp", None, "no layer caches anything"), ("18 full + 18 sliding(128)", 80, "lists 36 layers"),
    ("5 sliding(1024) : 1 full", None, "needs the number of layers"),
    ("x" * (MAX_LAYOUT_CHARS + 1), None, "at most 400"), ("+".join(["1 mla"] * 65), None, "at most 64"),
    ("9999 full : 9999 full", 10, "one period has 19,998 layers"), ("../../etc/passwd", None, "not COUNT KIND"),
    ("18 full, 18 sliding(128)", None, "not COUNT KIND"),
])
def test_bad_layouts_name_the_field(text, layers, message):
    with pytest.raises(SizingError, match=message) as info:
        parse_layout(text, layers=layers)
    assert info.value.field == "layout" and len(str(info.value)) < 300


@pytest.mark.parametrize(("text", "message"), [
    ("kernel=4", "missing conv_channels"), ("kernel=4 channels=8 heads=1 per_head=1 dtype=fp64", "state_dtype"),
    ("kernel=4 kernel=5 channels=8 heads=1 per_head=1", "given twice"), ("colour=red", "not KEY=VALUE"),
    ("kernel=nan channels=8 heads=1 per_head=1", "kernel"), ("kernel=4 channels=1e30 heads=1 per_head=1", "channels"),
    ("x" * 500, "at most"), (None, "KEY=VALUE"),
])
def test_bad_state_sizes_name_the_field(text, message):
    with pytest.raises(SizingError, match=message) as info:
        parse_state(text, MAMBA)
    assert info.value.field in ("state", "state_dtype")


def test_state_must_match_the_layout():
    layout = parse_layout("1 full : 1 mamba", layers=4)
    with pytest.raises(SizingError, match="need their state sizes") as info:
        layout_shape(layout, q_heads=8, kv_heads=8, head_dim=64, params=10**9)
    assert info.value.field == "state"
    linear = recurrent_state(LINEAR, conv_kernel=4, conv_channels=64, heads=2, state_per_head=16)
    with pytest.raises(SizingError, match="the layout has mamba"):
        layout_shape(layout, q_heads=8, kv_heads=8, head_dim=64, params=10**9, state=linear)
    with pytest.raises(SizingError) as info:
        recurrent_state(FULL, conv_kernel=4, conv_channels=64, heads=2, state_per_head=16)
    assert info.value.field == "state"


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=80), layers=st.one_of(st.none(), st.integers(-5, 20_000)))
def test_any_text_parses_or_is_refused_by_field(text, layers):
    try:
        layout = parse_layout(text, layers=layers)
    except SizingError as exc:
        assert exc.field == "layout"
    else:
        assert 1 <= layout.layers <= 10_000 and (layers is None or layout.layers == layers)


@settings(max_examples=100, deadline=None)
@given(terms=st.lists(st.tuples(st.integers(1, 50), st.sampled_from(["full", "sliding(256)", "chunked(1024)", "mlp"])),
                      min_size=1, max_size=6))
def test_plus_layouts_count_every_term(terms):
    text = " + ".join(f"{count} {kind}" for count, kind in terms)
    if all(kind == "mlp" for _, kind in terms):
        with pytest.raises(SizingError):
            parse_layout(text)
        return
    layout = parse_layout(text)
    assert layout.layers == sum(count for count, _ in terms)
    for kind, word in ((FULL, "full"), (SLIDING, "sliding(256)"), (CHUNKED, "chunked(1024)"), (None, "mlp")):
        assert layout.kinds.count(kind) == sum(c for c, k in terms if k == word)

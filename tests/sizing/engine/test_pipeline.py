"""vLLM's split of layers over pipeline stages: the default (remainder to the stages before the
last) and VLLM_PP_LAYER_PARTITION."""

from __future__ import annotations

import pytest

from sizing.engine.pipeline import parse_layer_partition, pipeline_stage, stage_layer_counts, stage_layers
from sizing.errors import SizingError
from sizing.presets import get_preset


def test_the_default_split_gives_the_remainder_to_the_stages_before_the_last():
    # DeepSeek-V2-Lite's 27 layers at PP 2: 14 + 13 (the last stage, which holds the LM head, is lighter).
    assert stage_layer_counts(27, 2) == (14, 13)
    # 48 layers at PP 5: 9 each and 3 left over, one each to stages 3, 2 and 1.
    assert stage_layer_counts(48, 5) == (9, 10, 10, 10, 9)


def test_a_partition_replaces_the_default():
    # The Qwen3-Coder-30B PP 2 run of the cited log: VLLM_PP_LAYER_PARTITION=16,32 over 48 layers.
    counts = parse_layer_partition("16,32", 48, 2)
    assert counts == (16, 32) and stage_layers(48, 2, 1, counts) == range(16, 48)
    stage = pipeline_stage(get_preset("qwen3-30b-a3b").shape, 2, 0, counts)
    assert stage.layers == 16 and stage.params == get_preset("qwen3-30b-a3b").shape.params * 16 // 48


@pytest.mark.parametrize("text", ["16,31", "16", "16,32,0", "0,48", "a,b", "16;32", "-16,64", "1" * 50, 16])
def test_a_partition_vllm_would_refuse_is_named(text):
    with pytest.raises(SizingError) as info:
        parse_layer_partition(text, 48, 2)
    assert info.value.field == "pp_layer_partition"

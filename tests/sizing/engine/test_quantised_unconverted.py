"""Quantised checkpoints as vLLM loads them: embeddings, ``lm_head`` and the modules the config
leaves out stay 16-bit, and the vocabulary is padded to a multiple of 64 before TP splits it.

The small configs are Llama-shaped (hidden 1,024, 4 layers, 8 query and 2 KV heads of 128, MLP
2,816, vocabulary 32,001, untied), so every count is exact:

* embeddings and lm_head: 2 × 32,001 × 1,024 = 65,538,048 values;
* attention: 4 × (2 × 1,024 × 1,024 + 2 × 1,024 × 256) = 10,485,760;
* MLP: 4 × 3 × 1,024 × 2,816 = 34,603,008;
* norms: 4 × 2 × 1,024 + 1,024 = 9,216; 110,636,032 in all;
* padding: 32,001 → 32,064 rows, 63 × 1,024 × 2 B × 2 matrices = 258,048 B, 129,024 a GPU at TP 2.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from sizing.engine.capacity import EngineRequest, plan_engine
from sizing.engine.memory import ActivationShape
from sizing.errors import ConfigError
from sizing.hf_config import parse_hf_config
from sizing.precisions import get_precision
from sizing.presets import get_preset
from sizing.weights import engine_weight_bytes, model_weight_bytes, padded_vocab, quant_format
from units import GiB

ATTENTION, MLP, TOTAL = 10_485_760, 34_603_008, 110_636_032
PADDING_TP2 = 63 * 1024 * 2 * 2 // 2
INT4_G128 = (133, 256)  # 4 bits + an fp16 scale and a 4-bit zero per 128 values: 133/256 B


def _config(quant: dict | None = None, **keys) -> dict:
    config = {"model_type": "llama", "hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 8,
              "num_key_value_heads": 2, "head_dim": 128, "intermediate_size": 2816, "vocab_size": 32_001,
              "tie_word_embeddings": False, "torch_dtype": "bfloat16", **keys}
    if quant is not None:
        config["quantization_config"] = quant
    return config


def _per_gpu(config: dict, weight_dtype: str, tp: int = 2, **request) -> int:
    report = plan_engine(EngineRequest(model=parse_hf_config(config), activation=ActivationShape.from_config(config),
                                       tp=tp, weight_dtype=weight_dtype, max_model_len=4096, **request))
    return report.profile.weights.bytes


def _int4(values: int) -> int:
    return values * INT4_G128[0] // INT4_G128[1]


def test_qwen3_235b_fp8_keeps_embeddings_and_lm_head_16_bit_at_tp4():
    # Qwen/Qwen3-235B-A22B-FP8 (the catalogue's bf16 shape served from the FP8 block-wise checkpoint):
    # 2 × 151,936 × 4,096 = 1,244,659,712 embedding and lm_head values at 2 B instead of 1 B + block
    # scales; at TP 4 that is 1,244,659,712 × (1 − 1/4,096) / 4 = 311,088,960 B = 0.29 GiB a GPU more
    # than params × fp8_block / 4.
    shape, fp8 = get_preset("qwen3-235b-a22b").shape, get_precision("fp8_block")
    assert padded_vocab(151_936) == 151_936  # 64 × 2,374: no padding
    engine = plan_engine(EngineRequest(model="qwen3-235b-a22b", tp=4, weight_dtype="fp8_block", max_model_len=40_960,
                                       max_num_seqs=1024)).profile.weights.bytes
    reference = math.ceil(model_weight_bytes(shape, fp8).bytes / 4)
    embeddings = 2 * 151_936 * 4096
    assert abs((engine - reference) - embeddings * 4095 / 4096 / 4) < 0.001 * embeddings / 4  # + norms
    assert round((engine - reference) / GiB, 2) == 0.29
    assert round(engine / GiB, 2) == 55.02  # 235 B × 4,097/4,096 / 4 = 54.73 GiB, + 0.29
    # docs/ENGINE-LOGS.md's row of the cited log holds the same weights.
    from scripts.engine_log_cases import case
    from scripts.engine_log_table import compare

    assert compare(case("cited/qwen3-235b-a22b-fp8-h100-tp4-vllm21348.log")).weights * GiB == engine


def test_an_index_total_is_taken_as_given():
    # A safetensors index total wins over the estimate; the vocabulary needs no padding, so the
    # engine's weights are the total ÷ TP exactly.
    shape = replace(get_preset("qwen3-235b-a22b").shape, safetensors_bytes=236_000_000_000)
    fp8 = get_precision("fp8_block")
    held = engine_weight_bytes(shape, fp8, auto=True)
    assert (held.bytes, held.source) == (236_000_000_000, "safetensors")
    engine = plan_engine(EngineRequest(model="qwen3-235b-a22b", tp=4, weight_dtype="fp8_block", max_model_len=40_960,
                                       weights_total_bytes=held.bytes))
    assert engine.profile.weights.bytes == 59_000_000_000


def test_fp8_block_without_exclusions_quantises_every_linear_layer():
    # (attention + MLP) × 4,097/4,096 + the rest × 2 B = 45,099,776 + 131,094,528 = 176,194,304 B.
    quant = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
    assert _per_gpu(_config(quant), "fp8_block") == 176_194_304 // 2 + PADDING_TP2


@pytest.mark.parametrize("key", ["ignored_layers", "modules_to_not_convert"])
def test_fp8_attention_named_in_its_config_stays_16_bit(key):
    # vLLM's Fp8Config reads ignored_layers, else modules_to_not_convert: attention then 16-bit,
    # MLP × 4,097/4,096 + the rest × 2 B = 34,611,456 + 152,066,048 = 186,677,504 B.
    quant = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128],
             key: ["lm_head", "model.layers.0.self_attn.q_proj"]}
    assert _per_gpu(_config(quant), "fp8_block") == 186_677_504 // 2 + PADDING_TP2


def test_awq_modules_to_not_convert():
    base = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}
    rest = (TOTAL - ATTENTION - MLP) * 2
    # A vision tower left out leaves the text attention in the format: 23,425,024 + 131,094,528.
    assert _per_gpu(_config({**base, "modules_to_not_convert": ["visual"]}), "awq_int4") == (
        _int4(ATTENTION + MLP) + rest) // 2 + PADDING_TP2
    # Attention left out: 17,977,344 + 152,066,048 = 170,043,392 B.
    excluded = _per_gpu(_config({**base, "modules_to_not_convert": ["self_attn"]}), "awq_int4")
    assert excluded == (_int4(MLP) + rest + ATTENTION * 2) // 2 + PADDING_TP2 == 170_043_392 // 2 + PADDING_TP2


def test_gptq_keeps_embeddings_and_lm_head_16_bit_and_skips_only_by_its_own_rules():
    base = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True}
    # Every linear layer in GPTQ int4: 23,425,024 + 131,094,528 = 154,519,552 B; vLLM's GPTQ config
    # does not read modules_to_not_convert, so naming attention there changes nothing.
    plain = _per_gpu(_config(base), "gptq_int4")
    assert plain == 154_519_552 // 2 + PADDING_TP2
    assert _per_gpu(_config({**base, "modules_to_not_convert": ["self_attn"]}), "gptq_int4") == plain
    # A negative dynamic rule or a block list without attention leaves it 16-bit: 170,043,392 B.
    skipped = 170_043_392 // 2 + PADDING_TP2
    assert _per_gpu(_config({**base, "dynamic": {r"-:.*self_attn.*": {}}}), "gptq_int4") == skipped
    in_block = [["mlp.gate_proj", "mlp.up_proj"], ["mlp.down_proj"]]
    assert _per_gpu(_config({**base, "modules_in_block_to_quantize": in_block}), "gptq_int4") == skipped


def test_mxfp4_holds_every_linear_layer_unquantised():
    # vLLM's Mxfp4Config quantises only fused experts, whatever modules_to_not_convert names.
    assert not quant_format({"quantization_config": {"quant_method": "mxfp4"}}).attention_quantised


def test_tied_embeddings_are_counted_once_and_padded_once():
    # Tied: 32,001 × 1,024 values (no lm_head), 110,636,032 − 32,769,024 = 77,867,008 in all; one
    # padded matrix: 63 × 1,024 × 2 B = 129,024 B, 64,512 a GPU.
    quant = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
    rest = 77_867_008 - ATTENTION - MLP
    total = (ATTENTION + MLP) * 4097 // 4096 + rest * 2
    assert _per_gpu(_config(quant, tie_word_embeddings=True), "fp8_block") == total // 2 + 64_512


def test_pipeline_stages_pad_the_embedding_first_and_lm_head_last():
    # bf16 at TP 2, two stages of two layers: each holds half the 221,272,064 B (110,636,032 × 2),
    # 55,318,016 a GPU, plus its one padded matrix, 64,512 B a GPU.
    config = _config()
    for stage in (0, 1):
        assert _per_gpu(config, "bf16", pp_layer_partition="2,2", pp_stage=stage) == 55_318_016 + 64_512


def test_assumed_widths_add_no_padding():
    shape = parse_hf_config(_config())
    report = plan_engine(EngineRequest(model=shape, tp=2, max_model_len=4096))  # widths assumed: vocabulary unknown
    assert report.profile.weights.bytes == TOTAL * 2 // 2


@pytest.mark.parametrize(("quant", "message"), [
    ({"quant_method": "fp8", "activation_scheme": "dynamic", "ignored_layers": "lm_head"}, "ignored_layers must be a list"),
    ({"quant_method": "gptq", "bits": 4, "dynamic": ["-:.*"]}, "dynamic must be an object"),
    ({"quant_method": "awq", "bits": 4, "modules_to_not_convert": ["x"] * 100_001}, "at most 100,000"),
])
def test_malformed_exclusion_lists_name_the_config_key(quant, message):
    with pytest.raises(ConfigError) as info:
        quant_format({"quantization_config": quant})
    assert info.value.field == "quantization_config" and message in info.value.message

"""Real vLLM start-up logs (tests/data/vllm_logs, sources in its README) reproduced from the
models' published shapes: tokens within the rounding of the logged GiB, concurrency within
0.5 %, the activation estimate within 25 % wherever a log prints the peak."""

from __future__ import annotations

import pytest

from sizing.engine.explain import ACTIVATION_TOLERANCE, RATIO_TOLERANCE, explain_log
from sizing.engine.memory import ActivationShape
from sizing.engine.pipeline import stage_layer_counts
from sizing.engine.vllm_log import parse_vllm_log
from sizing.models import ModelShape
from sizing.presets import get_preset
from support.paths import ROOT

LOGS = ROOT / "tests" / "data" / "vllm_logs"

# google/gemma-3-1b-it config.json: 26 layers, 4 query / 1 KV head, head_dim 256, a 512-token
# window on every layer but each sixth (sliding_window_pattern 6): 22 sliding + 4 full.
GEMMA3_1B = ModelShape(name="gemma-3-1b-it", layers=26, q_heads=4, kv_heads=1, head_dim=256, params=999_885_952,
                       sliding_window=512, sliding_layers=tuple(i for i in range(26) if (i + 1) % 6))
# Qwen/Qwen3-14B config.json: 40 layers, 40 query / 8 KV heads, head_dim 128.
QWEN3_14B = ModelShape(name="Qwen3-14B", layers=40, q_heads=40, kv_heads=8, head_dim=128, params=14_800_000_000)
# The fp8 log's figures all fit 48 layers × 4 KV heads × 128 (Qwen3-30B-A3B's shape): 48 KiB/token in fp8.
SHAPE_48x4x128 = ModelShape(name="48×4×128", layers=48, q_heads=32, kv_heads=4, head_dim=128, params=30_500_000_000)
# Llama-3(.1)-8B / 70B configs: 32 / 80 layers, 8 KV heads, head_dim 128.
LLAMA3_8B = ModelShape(name="Llama-3-8B", layers=32, q_heads=32, kv_heads=8, head_dim=128, params=8_030_000_000)
LLAMA31_70B = ModelShape(name="Llama-3.1-70B", layers=80, q_heads=64, kv_heads=8, head_dim=128, params=70_600_000_000)
LLAMA3_8B_WIDTHS = ActivationShape(hidden=4096, intermediate=14336, vocab=128256)
# deepseek-ai/DeepSeek-V2-Lite config.json (data/models): 27 MLA layers caching 512 + 64 values.
DEEPSEEK_V2_LITE = get_preset("deepseek-v2-lite").shape
# openai/gpt-oss-120b config.json (data/models): 36 layers, sliding (128) and full alternating, 8 × 64.
GPT_OSS_120B = get_preset("gpt-oss-120b").shape

CASES = {
    # 5:1 sliding pattern with 2 padding layers, vLLM 0.13: 25.39 GiB, 950,864 tokens, 461.21× at 2,048.
    "gemma3-1b-v0.13-rtx.log": (GEMMA3_1B, {}),
    # Same model on a MIG slice: 1.40 GiB, 52,608 tokens, 7.64× at 32,768 (tokens ÷ context: 1.61).
    "gemma3-1b-gke-mig.log": (GEMMA3_1B, {"max_num_batched_tokens": 2048}),
    "qwen3-14b-lmcache.log": (QWEN3_14B, {}),  # dense GQA, TP 1
    "fp8-kv-vllm25350.log": (SHAPE_48x4x128, {"kv_dtype": "fp8"}),
    "fp8-kv-vllm25350-too-long.log": (SHAPE_48x4x128, {"kv_dtype": "fp8"}),
    "llama3-8b-tp1-vllm10511.log": (LLAMA3_8B, {"max_model_len": 8192}),
    "llama3-8b-tp2-vllm10511.log": (LLAMA3_8B, {"tp": 2, "max_model_len": 8192}),
    # V1 before the hybrid allocator: one group, concurrency = tokens ÷ max_model_len.
    "llama3.1-70b-w8a8-vllm12569.log": (LLAMA31_70B, {"rule": "single"}),
    "llama3.1-8b-rtx3090-vllm10517.log": (LLAMA3_8B, {"rule": "single"}),
    # MLA at TP 2 × PP 2: the log states both; stage 0's 14 layers × 1,152 B on 12.13 GiB.
    "deepseek-v2-lite-tp2-pp2-vllm20665.log": (DEEPSEEK_V2_LITE, {}),
    # Alternating sliding windows, vLLM 0.11.2: two groups of 18 layers, no padding.
    "gpt-oss-120b-v0.11.2-blog.log": (GPT_OSS_120B, {}),
}


def _explain(name: str):
    model, options = CASES[name]
    widths = LLAMA3_8B_WIDTHS if model is LLAMA3_8B else None
    return explain_log(parse_vllm_log((LOGS / name).read_bytes()), model, activation=widths, **options)


def test_every_log_file_is_a_case_and_has_a_source():
    readme = (LOGS / "README.md").read_text()
    assert {p.name for p in LOGS.glob("*.log")} == set(CASES)
    for name in CASES:
        assert f"`{name}`" in readme


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_logged_figure_is_reproduced(name):
    explanation = _explain(name)
    assert explanation.checks, "every log states at least one figure to check"
    for check in explanation.checks:
        assert check.within, check
        if check.name.startswith("Maximum concurrency"):
            assert check.relative_error <= RATIO_TOLERANCE
        if check.name.startswith("activation"):
            assert check.relative_error <= ACTIVATION_TOLERANCE


def test_gemma3_padding_and_reservation_explain_the_gap():
    explanation = _explain("gemma3-1b-gke-mig.log")
    layout = explanation.layout
    assert layout.layer_slots == 28 and layout.padding_layers == 2 and len(layout.groups) == 7
    concurrency = next(c for c in explanation.checks if c.name.startswith("Maximum concurrency"))
    # The formula (tokens ÷ context) says 52,608 / 32,768 = 1.61; vLLM says 7.64 because each
    # of the 6 sliding groups reserves cdiv(511 + 2,048, 16) + 1 = 161 blocks, the full group 2,048.
    assert concurrency.formula == pytest.approx(52_608 / 32_768, rel=1e-3)
    assert layout.blocks_per_request(32_768, 2048) == 2048 + 6 * 161
    tokens = next(c for c in explanation.checks if c.name.startswith("GPU KV cache size"))
    assert tokens.formula > tokens.reconstructed * 1.03  # padding + per-group counting: 3–7 % below


def test_fp8_log_max_model_len_search_matches_vllm():
    explanation = _explain("fp8-kv-vllm25350-too-long.log")
    names = {c.name: c for c in explanation.checks}
    needed = names["KV cache needed for 221,000 tokens (GiB)"]
    # 48 layers × cdiv(221,000, 16) blocks × 16 tokens × 1,024 B = 10,862,788,608 B = 10.12 GiB.
    assert needed.reconstructed * 2**30 == 48 * 13_813 * 16 * 1024
    assert names["estimated maximum model length"].within


def test_partial_log_says_what_could_not_be_rebuilt():
    explanation = _explain("llama3-8b-tp2-vllm10511.log")
    assert any("Available KV cache memory is not in the log" in m for m in explanation.not_reconstructed)
    assert [c.name for c in explanation.checks] == ["activation peak (GiB)"]


def test_mla_log_at_tp2_pp2_is_stage_zero_of_the_latent_cache():
    explanation = _explain("deepseek-v2-lite-tp2-pp2-vllm20665.log")
    parsed, layout = explanation.parsed, explanation.layout
    assert (parsed.tp, parsed.pp) == (2, 2)
    # vLLM's get_pp_indices puts the odd layer on the first stage: 27 = 14 + 13.
    assert stage_layer_counts(27, 2) == (14, 13) and layout.layer_slots == 14
    # Rank 0's 12.13 GiB is used although rank 3 printed first; the latent is not split by TP:
    # one page is 16 tokens × (512 + 64) values × 2 B on every rank.
    assert parsed.available_gib == 12.13 and dict(parsed.available_by_rank)[3] == 11.33
    assert layout.page_bytes == 16 * 576 * 2 and [str(g.kind) for g in layout.groups] == ["mla"]
    tokens = next(c for c in explanation.checks if c.name.startswith("GPU KV cache size"))
    # 12.13 GiB // (18,432 B × 14) = 50,473 blocks by the printed figure; the printed 807,792
    # tokens (50,487 blocks) lie within the ±0.005 GiB its rounding allows.
    assert tokens.reconstructed == 50_473 * 16 and tokens.low <= 807_792 <= tokens.high
    concurrency = next(c for c in explanation.checks if c.name.startswith("Maximum concurrency"))
    assert concurrency.reconstructed == pytest.approx(50_487 / 64)  # cdiv(1,024, 16) blocks each
    assert any("ranks report 11.33–12.13 GiB" in m for m in explanation.not_reconstructed)


def test_alternating_sliding_log_counts_tokens_once_per_group():
    explanation = _explain("gpt-oss-120b-v0.11.2-blog.log")
    layout = explanation.layout
    assert [len(g.layer_indices) for g in layout.groups] == [18, 18] and layout.padding_layers == 0
    assert {g.window for g in layout.groups} == {128, None}
    tokens = next(c for c in explanation.checks if c.name.startswith("GPU KV cache size"))
    # 8.99 GiB // (32,768 B pages × 18 slots) = 16,365 blocks; two groups share them, so vLLM
    # reports 16,365 // 2 × 16 = 130,912 tokens (the log: 130,960, inside the rounding).
    assert tokens.reconstructed == 16_365 // 2 * 16 and tokens.low <= 130_960 <= tokens.high
    assert explanation.parsed.max_num_batched_tokens == 2048 and explanation.parsed.max_num_seqs == 6


def test_pipeline_stages_keep_each_layers_kind():
    from sizing.engine.pipeline import pipeline_stage

    # gpt-oss-120b's 36 layers alternate sliding and full: each PP-2 stage keeps 9 of each, and
    # the stages together hold every layer once (5 over 3 stages: 2 + 2 + 1, the last lightest).
    stages = [pipeline_stage(GPT_OSS_120B, 2, s) for s in (0, 1)]
    assert [len(s.sliding_layers) for s in stages] == [9, 9] and sum(s.layers for s in stages) == 36
    assert stage_layer_counts(5, 3) == (2, 2, 1)

"""The fix for a refused start-up: the utilisation, max_model_len and TP that would start it,
checked against hand calculations from the logged figures."""

from __future__ import annotations

import pytest

from sizing.engine.explain import explain_log
from sizing.engine.startup_fix import startup_fix
from sizing.engine.groups import kv_cache_layout
from sizing.engine.vllm_log import ParsedLog, parse_vllm_log
from sizing.models import ModelShape
from sizing.precisions import get_precision
from sizing.presets import get_preset
from support.paths import ROOT

LOGS = ROOT / "tests" / "data" / "vllm_logs"
# MiniMaxAI/MiniMax-M2 config.json: 62 full-attention layers, 48 query / 8 KV heads of 128.
MINIMAX_M2 = ModelShape(name="MiniMax-M2", layers=62, q_heads=48, kv_heads=8, head_dim=128, params=230_000_000_000,
                        num_experts=256, experts_per_token=8)


def _parsed(name: str):
    return parse_vllm_log((LOGS / name).read_bytes())


def test_fix_from_a_wrapped_refusal_with_its_profile():
    fix = startup_fix(_parsed("forms/refusal-wrapped-main.log"))
    # 3.0 GiB needed, 0.18 available on a 22.49 GiB GPU at 0.5: 0.5 + 2.82 / 22.49 = 0.6254 → 0.63.
    assert fix.gpu_memory_utilization == 0.63 and "0.6254" in fix.utilization_basis
    assert fix.max_model_len == 976  # vLLM's own estimate, as logged
    # TP 2: 1.5 GiB a GPU against 0.18 + 9.38 × (1 − 1/2) = 4.87 GiB.
    assert fix.tp == 2 and "4.87 GiB" in fix.tp_basis and "TP 1 assumed" in fix.tp_basis
    lines = fix.lines()
    assert lines[0].startswith("vLLM refused to start") and "3.00 GiB" in lines[0] and "0.18 GiB" in lines[0]
    assert any(line.startswith("--gpu-memory-utilization 0.63 would start it") for line in lines)


def test_no_fix_without_a_refusal():
    assert startup_fix(_parsed("qwen3-14b-lmcache.log")) is None


def test_utilisation_above_one_is_no_fix():
    parsed = ParsedLog(needed_gib=40.0, available_gib=2.0, total_gib=23.5, gpu_memory_utilization=0.9,
                       refused=True, max_model_len=131_072)
    fix = startup_fix(parsed)
    # 0.9 + 38 / 23.5 = 2.52: no utilisation holds it; TP 32 (40 / 32 = 1.25 ≤ 2).
    assert fix.gpu_memory_utilization is None and "above 1.0" in fix.utilization_basis
    assert fix.tp == 32


def test_default_utilisation_and_total_from_requested():
    parsed = ParsedLog(needed_gib=10.12, available_gib=5.59, requested_gib=72.0, refused=True)
    fix = startup_fix(parsed)
    # Utilisation not logged: 0.9 assumed, total = 72 / 0.9 = 80 GiB; 0.9 + 4.53 / 80 = 0.9566 → 0.96.
    assert fix.gpu_memory_utilization == 0.96 and "default 0.9 assumed" in fix.utilization_basis


def test_v0_refusal_in_tokens():
    parsed = _parsed("cited/r1-distill-qwen-14b-rtx4090-tp2-vllm13061.log")
    fix = startup_fix(parsed, tp=2)
    assert fix.max_model_len == 81_536  # V0 refuses a max_model_len above the tokens the cache holds
    # 131,072 tokens wanted, 81,536 held at TP 2: at TP 4 the cache holds about twice as many.
    assert fix.tp == 4 and fix.gpu_memory_utilization is None


def test_v0_refusal_rebuilt_for_the_model():
    # DeepSeek-R1-Distill-Qwen-14B is a Qwen2.5-14B: 48 layers × 8 KV heads × 128, 4 heads a GPU at TP 2:
    # 98,304 B a token; 81,536 tokens = 7.46 GiB held, 131,072 tokens = 12.0 GiB needed.
    shape = get_preset("qwen2.5-14b").shape
    explanation = explain_log(_parsed("cited/r1-distill-qwen-14b-rtx4090-tp2-vllm13061.log"), shape, tp=2)
    fix = explanation.fix
    assert fix.needed_gib == pytest.approx(12.0) and fix.available_gib == pytest.approx(7.4648, abs=1e-4)
    layout4 = kv_cache_layout(shape, get_precision("bf16"), tp=4)
    assert layout4.request_bytes(131_072, 8192) / 2**30 == pytest.approx(6.0)
    # TP 4: 6.0 GiB a GPU against 7.46 + 13.9476 × (1 − 2/4) = 14.44 GiB.
    assert fix.tp == 4 and "14.44 GiB" in fix.tp_basis
    assert explanation.as_dict()["startup_fix"]["max_model_len"] == 81_536


def test_fix_for_a_cited_refusal_rebuilt_for_its_model():
    explanation = explain_log(_parsed("cited/minimax-m2.7-awq-dgx-spark-tp2-spark396.log"), MINIMAX_M2, tp=2,
                              max_model_len=196_608)
    fix = explanation.fix
    # TP 4: 62 layers × 2 KV heads a GPU × 128 × 2 × 2 B = 63,488 B a token × 196,608 = 11.625 GiB ≤ 22.5.
    assert (fix.needed_gib, fix.available_gib, fix.max_model_len, fix.tp) == (23.25, 22.5, 190_272, 4)
    assert "11.62 GiB" in fix.tp_basis or "11.63 GiB" in fix.tp_basis


def test_a_negative_available_memory_is_explained_not_raised():
    explanation = explain_log(ParsedLog(available_gib=-1.25, kv_tokens=0), get_preset("qwen3-8b").shape)
    assert any("no KV block fits" in m for m in explanation.not_reconstructed)

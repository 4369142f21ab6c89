"""Which catalogue model a log was run with: by its name (exact repository, path tail, variant
suffixes dropped), else by the KV bytes its figures imply (hand calculations in the tests)."""

from __future__ import annotations

import pytest

from sizing.engine.log_model import MatchKind, identify_log_model, kv_candidates, match_log_model, variant_base
from sizing.engine.vllm_log import ParsedLog, parse_vllm_log
from support.paths import ROOT

LOGS = ROOT / "tests" / "data" / "vllm_logs"


@pytest.mark.parametrize(("logged", "kind", "entry"), [
    ("Qwen/Qwen3-8B", MatchKind.REPOSITORY, "qwen3-8b"),
    ("qwen/qwen3-8b", MatchKind.REPOSITORY, "qwen3-8b"),
    ("llama-3.1-8b", MatchKind.REPOSITORY, "llama-3.1-8b"),  # a catalogue id
    ("/models/Qwen/Qwen3-14B", MatchKind.PATH_TAIL, "qwen3-14b"),
    ("/models/google/gemma-3-27b-it", MatchKind.VARIANT, "gemma-3-27b"),  # the catalogue ships -pt
    ("RedHatAI/Meta-Llama-3.1-70B-Instruct-FP8", MatchKind.VARIANT, "llama-3.1-70b"),
    ("meta-llama/Llama-3.1-8B-Instruct", MatchKind.VARIANT, "llama-3.1-8b"),
    ("/data/ckpt/Qwen3-4B-AWQ/", MatchKind.VARIANT, "qwen3-4b"),
    ("Qwen/Qwen3-Next-80B-A3B-Instruct", MatchKind.VARIANT, "qwen3-next-80b-a3b"),  # catalogue: -Thinking
    ("mistralai/Mistral-Small-24B-Instruct-2501", MatchKind.VARIANT, "mistral-small-24b"),
])
def test_names_match_the_catalogue(logged, kind, entry):
    match = match_log_model(logged)
    assert (match.kind, match.entry.id) == (kind, entry)
    assert match.how


@pytest.mark.parametrize(("logged", "kind"), [
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-14B", MatchKind.HUB_NOT_IN_CATALOGUE),  # not DeepSeek-R1
    ("Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8", MatchKind.HUB_NOT_IN_CATALOGUE),
    ("/kaggle/input/gpt-oss-120b/transformers/default/1", MatchKind.UNKNOWN),
    (None, MatchKind.NONE),
    ("   ", MatchKind.NONE),
])
def test_names_outside_the_catalogue_say_so(logged, kind):
    match = match_log_model(logged)
    assert match.kind is kind and match.entry is None
    if kind is MatchKind.HUB_NOT_IN_CATALOGUE:
        assert "does not ship" in match.how and "not fetched" in match.how


def test_variant_base_drops_suffixes_in_any_order():
    assert variant_base("Llama-3.1-8B-Instruct-GPTQ-INT4") == "llama-3.1-8b"
    assert variant_base("gemma-3-27b-PT") == "gemma-3-27b"
    assert variant_base("it") == "it"  # a name that is only a suffix keeps it


def test_candidates_by_kv_bytes_from_hand_figures():
    # Qwen3-8B: 36 layers × 8 KV heads × 128 × 2 (K, V) × 2 B = 147,456 B a token, 2,359,296 B a
    # 16-token block. 12.5 GiB = 13,421,772,800 B → 5,688 blocks → 91,008 tokens (12.495–12.505
    # GiB: 5,686–5,691 blocks). Llama-3.1-8B's 131,072 B a token gives 102,400: not a candidate.
    parsed = ParsedLog(available_gib=12.5, kv_tokens=91_008, tp=1, dtype="bfloat16", kv_cache_dtype="auto")
    candidates, basis = kv_candidates(parsed)
    ids = [c.entry.id for c in candidates]
    assert "qwen3-8b" in ids and "llama-3.1-8b" not in ids
    hit = candidates[ids.index("qwen3-8b")]
    assert (hit.tp, hit.kv_dtype, hit.low, hit.high) == (1, "bf16", 5686 * 16, 5691 * 16)
    assert "12.5 GiB" in basis and "91,008 tokens" in basis


def test_candidates_for_a_real_log_without_a_name():
    # The LMCache issue's Qwen3-14B log names no model and no TP: TP 1, 2, 4, 8 and bf16/fp8 are tried.
    parsed = parse_vllm_log((LOGS / "qwen3-14b-lmcache.log").read_bytes())
    identified = identify_log_model(parsed)
    assert identified.match.kind is MatchKind.NONE
    qwen = next(c for c in identified.candidates if c.entry.id == "qwen3-14b")
    assert (qwen.tp, qwen.kv_dtype) == (1, "bf16")
    assert "TP not in the log" in identified.basis


def test_no_candidates_without_the_two_figures():
    assert kv_candidates(ParsedLog(kv_tokens=1000))[0] == ()
    assert "Available KV cache memory" in kv_candidates(ParsedLog(kv_tokens=1000))[1]
    assert "GPU KV cache size" in kv_candidates(ParsedLog(available_gib=3.0))[1]
    assert kv_candidates(ParsedLog(available_gib=-1.0, kv_tokens=0))[0] == ()


def test_a_named_log_needs_no_candidates():
    parsed = parse_vllm_log((LOGS / "forms" / "padded-qwen3-8b.log").read_bytes())
    identified = identify_log_model(parsed)
    assert identified.match.kind is MatchKind.PATH_TAIL and identified.match.entry.id == "qwen3-8b"
    assert identified.candidates == () and identified.as_dict()["model_match"]["repo"] == "Qwen/Qwen3-8B"

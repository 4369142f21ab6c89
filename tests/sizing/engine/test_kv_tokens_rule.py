"""vLLM's "GPU KV cache size" by version (num_blocks // groups × block before 0.24,
int(max_concurrency × max_model_len) from 0.24), and the hybrid options of the engine CLI."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from inputs.errors import InputError
from sizing.cli import main
from sizing.engine.explain import explain_log
from sizing.engine.groups import kv_cache_layout, tokens_from_concurrency, vllm_release
from sizing.engine.vllm_log import parse_vllm_log
from sizing.errors import SizingError
from sizing.layers import LayerKind
from sizing.models import ModelShape
from sizing.precisions import get_precision
from tests.sizing.engine.test_cited_logs import QWEN36_35B_VLLM

DENSE = ModelShape(name="dense", layers=2, q_heads=8, kv_heads=2, head_dim=128, params=10**9)


def test_qwen3_6_35b_hand_calculation():
    # 5.98 GiB // 2,146,304 B pages // 10 slots = 299 blocks; a request holds cdiv(131,072, 2,096)
    # = 63 attention blocks + 3 delta-net groups × 2 "align" pages = 69.
    # 0.24: int(299 / 69 × 131,072) = int(567,978.43…) = 567,978; before: 299 // 4 × 2,096 = 155,104.
    layout = kv_cache_layout(QWEN36_35B_VLLM, get_precision("fp8"), state_blocks=2)
    assert layout.blocks_per_request(131_072, 8192) == 69
    assert layout.concurrency_tokens(299, 131_072, 8192) == 567_978
    assert layout.tokens(299) == 155_104


def test_dense_rules_part_where_the_context_is_not_whole_blocks():
    layout = kv_cache_layout(DENSE, get_precision("bf16"))
    # 1,000 blocks of 16: 16,000 tokens before 0.24; from 0.24 1,000 / cdiv(1,000, 16) = 1,000 / 63
    # requests of 1,000 tokens: int(15.873… × 1,000) = 15,873.
    assert layout.tokens(1000) == 16_000
    assert layout.concurrency_tokens(1000, 1000, 8192) == 15_873
    # Whole blocks agree: 1,000 / 64 × 1,024 = 16,000.
    assert layout.concurrency_tokens(1000, 1024, 8192) == 16_000
    # vLLM's float product truncates: 1 / 49 × 784 is 15.999… in binary, so it prints 15, not 16.
    assert layout.concurrency_tokens(1, 784, 8192) == 15


@pytest.mark.parametrize(("text", "release", "new_rule"), [
    ("0.24.0", (0, 24), True), ("v0.19.1rc2", (0, 19), False), ("0.23.9+cu128", (0, 23), False),
    ("1.0", (1, 0), True), (" 0.25.1 ", (0, 25), True),
])
def test_versions_and_the_rule_they_follow(text, release, new_rule):
    assert vllm_release(text) == release and tokens_from_concurrency(text) is new_rule


@pytest.mark.parametrize("text", ["0.1.dev7548+g1234", "banana", "", "0", "9" * 80, None, 24])
def test_versions_that_are_not_releases_are_refused(text):
    with pytest.raises(SizingError) as info:
        vllm_release(text)
    assert info.value.field == "vllm_version"


_LOG = ("INFO [gpu_worker.py:508] Available KV cache memory: 5.98 GiB\n"
        "INFO [kv_cache_utils.py:2146] GPU KV cache size: 567,978 tokens\n"
        "INFO [kv_cache_utils.py:2147] Maximum concurrency for 131,072 tokens per request: 4.33x\n"
        "INFO non-default args: {'max_model_len': 131072, 'kv_cache_dtype': 'fp8', 'enable_prefix_caching': True, "
        "'max_num_batched_tokens': 8192}\n")


def test_prefix_caching_and_speculation_are_read_but_alone_make_no_log():
    parsed = parse_vllm_log(_LOG + "INFO speculative_config {'method': 'mtp', 'num_speculative_tokens': 3}\n")
    assert parsed.prefix_caching is True and parsed.speculative_tokens == 3
    assert parse_vllm_log("EngineCore enable_prefix_caching=False\n" + _LOG).prefix_caching is False
    with pytest.raises(InputError):
        parse_vllm_log("vllm serve x --speculative-config {'num_speculative_tokens': 3, 'enable_prefix_caching': True}")


def test_explain_log_takes_the_hybrid_settings():
    parsed = parse_vllm_log(_LOG)
    plain = explain_log(parsed, QWEN36_35B_VLLM, vllm_version="0.24.0")
    assert all(c.within for c in plain.checks)
    # Prefix caching turned off: 1 state page a request, 63 + 3 = 66, and the 4.33x misses.
    off = explain_log(parsed, QWEN36_35B_VLLM, vllm_version="0.24.0", prefix_caching=False)
    assert off.layout.blocks_per_request(131_072, 8192) == 66 and not all(c.within for c in off.checks)
    # CUTLASS MLA's 128-token step: 128 × cdiv(2,146,304, 128 × 1,024) = 2,176-token blocks.
    mla = explain_log(parsed, QWEN36_35B_VLLM, attention_backend="cutlass_mla")
    assert next(g.block_size for g in mla.layout.groups if g.kind is LayerKind.FULL) == 2176
    aligned = explain_log(parsed, QWEN36_35B_VLLM, kernel_block_alignment=128)
    assert aligned.layout.page_bytes == mla.layout.page_bytes
    # 3 speculative tokens: conv 8,192 × 6 × 2 B = 98,304 + 2,097,152 = 2,195,456 B, 2 + 3 pages.
    spec = explain_log(parsed, QWEN36_35B_VLLM, speculative_tokens=3)
    assert spec.layout.state_blocks == 5 and spec.layout.page_bytes == 16 * 134 * 1024 == 2_195_456
    settings = {s.name: s.source for s in spec.settings}
    assert settings["speculative_tokens"] == "given" and settings["prefix_caching"] == "log"


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"vllm_version": "latest"}, "vllm_version"), ({"speculative_tokens": -1}, "speculative_tokens"),
    ({"speculative_tokens": 65}, "speculative_tokens"), ({"attention_backend": "xformers"}, "attention_backend"),
    ({"kernel_block_alignment": 0}, "kernel_block_alignment"), ({"prefix_caching": "yes"}, "prefix_caching"),
])
def test_explain_log_refuses_bad_settings_by_name(kwargs, field):
    with pytest.raises(SizingError) as info:
        explain_log(parse_vllm_log(_LOG), QWEN36_35B_VLLM, **kwargs)
    assert info.value.field == field


def _run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


_BASE = ["--json", "--engine", "vllm", "--model", "qwen3-next-80b-a3b", "--gpu", "h200", "--context", "8192",
         "--kv-budget-gib-per-gpu", "10"]


@pytest.mark.parametrize(("extra", "block"), [
    # Qwen3-Next at TP 1, bf16: state 8,192 × 3 × 2 B + 32 × 128 × 128 × 2 B = 1,097,728 B; one
    # attention layer 2 × 2 × 256 × 2 B = 2,048 B a token.
    ([], 544),                                        # 16 × cdiv(1,097,728, 32,768) = 16 × 34
    (["--attention-backend", "cutlass_mla"], 640),    # 128 × cdiv(1,097,728, 262,144) = 128 × 5
    (["--kernel-block-alignment", "256"], 768),       # 256 × cdiv(1,097,728, 524,288) = 256 × 3
    (["--speculative-tokens", "3"], 560),             # conv × 6 inputs: 1,146,880 B = 16 × 35 × 2,048
])
def test_engine_cli_hybrid_options(extra, block):
    code, out, _ = _run(_BASE + extra)
    assert code == 0
    groups = json.loads(out)["kv_cache_groups"]
    assert {g["block_size"] for g in groups["groups"]} == {block} and groups["page_bytes"] == block * 2048


@pytest.mark.parametrize(("extra", "option"), [
    (["--attention-backend", "xformers"], "--attention-backend"),
    (["--kernel-block-alignment", "0"], "--kernel-block-alignment"),
    (["--kernel-block-alignment", "4097"], "--kernel-block-alignment"),
    (["--speculative-tokens", "-1"], "--speculative-tokens"),
    (["--speculative-tokens", "65"], "--speculative-tokens"),
    (["--speculative-tokens", "1.5"], "--speculative-tokens"),
])
def test_engine_cli_refuses_bad_hybrid_options_in_one_line(extra, option):
    code, out, err = _run(_BASE + extra)
    assert code == 2 and out == "" and option in err and len(err.strip().splitlines()) == 1

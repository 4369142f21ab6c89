"""``python -m sizing explain-log`` without a model: every figure parsed, the catalogue models
that fit, what a reconstruction needs, the fix for a refusal; exit 0, never only an error."""

from __future__ import annotations

import contextlib
import io
import json

from sizing.explain_cli import explain_main
from support.paths import ROOT

LOGS = ROOT / "tests" / "data" / "vllm_logs"


def _run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = explain_main(argv)
    return code, out.getvalue(), err.getvalue()


def test_a_log_naming_no_model_still_reports_its_figures():
    code, out, err = _run([str(LOGS / "qwen3-14b-lmcache.log")])
    assert code == 0 and err == ""
    data = json.loads(out)
    assert (data["parsed"]["available_gib"], data["parsed"]["kv_tokens"]) == (6.51, 42_656)
    assert data["needs"][0].startswith("a model shape: --model") and any("--tp" in n for n in data["needs"])
    assert data["model_match"]["kind"] == "none"
    assert {"id": "qwen3-14b", "tp": 1, "kv_dtype": "bf16"}.items() <= next(
        c for c in data["candidates"] if c["id"] == "qwen3-14b").items()
    assert data["checks"] == [] and data["startup_fix"] is None


def test_a_log_whose_path_names_a_catalogue_model_is_explained_for_it():
    code, out, _ = _run([str(LOGS / "forms" / "padded-qwen3-8b.log")])
    data = json.loads(out)
    assert code == 0 and data["model_match"]["kind"] == "path-tail" and data["model_match"]["id"] == "qwen3-8b"
    assert data["all_within"] and {c["name"] for c in data["checks"]} >= {"GPU KV cache size (tokens)"}


def test_a_hub_id_outside_the_catalogue_and_a_refusal():
    code, out, _ = _run([str(LOGS / "cited" / "r1-distill-qwen-14b-rtx4090-tp2-vllm13061.log")])
    data = json.loads(out)
    assert code == 0 and data["parsed"]["kv_tokens"] == 81_536
    assert data["startup_fix"]["max_model_len"] == 81_536
    code, out, _ = _run([str(LOGS / "forms" / "refusal-wrapped-main.log")])
    data = json.loads(out)
    assert data["startup_fix"]["gpu_memory_utilization"] == 0.63 and data["startup_fix"]["tp"] == 2


def test_absurd_figures_are_listed_not_raised():
    code, out, err = _run([str(LOGS / "forms" / "absurd-figures.log")])
    assert code == 0 and err == ""
    ignored = json.loads(out)["parsed"]["ignored"]
    assert [i["field"] for i in ignored][:2] == ["kv_tokens", "concurrency_len, concurrency"]


def test_a_given_model_still_reports_the_logs_own():
    code, out, _ = _run([str(LOGS / "forms" / "padded-qwen3-8b.log"), "--model", "llama-3.1-8b"])
    data = json.loads(out)
    assert code == 0 and data["model_match"]["id"] == "qwen3-8b" and not data["all_within"]


def test_the_release_and_hybrid_options_are_taken_and_bounded():
    log = str(LOGS / "cited" / "qwen3.6-35b-a3b-nvfp4-rtx5090-club3090-612.log")
    code, out, _ = _run([log, "--vllm-version", "v0.24.1", "--attention-backend", "flashinfer",
                         "--speculative-tokens", "3"])
    assert code == 0 and json.loads(out)["parsed"]["kv_tokens"] == 567_978
    for argv, option in ((["--vllm-version", "banana"], "--vllm-version"),
                         (["--speculative-tokens", "65"], "--speculative-tokens"),
                         (["--kernel-block-alignment", "0"], "--kernel-block-alignment"),
                         (["--attention-backend", "nope"], "--attention-backend")):
        code, _, err = _run([log, *argv])
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and f"argument {option}:" in lines[0], (argv, err)

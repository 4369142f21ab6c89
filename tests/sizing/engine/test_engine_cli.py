"""The engine CLI contract: ``python -m sizing --json --engine vllm`` keys and ``explain-log``."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys

from sizing.cli import build_parser, main
from sizing.explain_cli import explain_main
from support.paths import ROOT
from units import GiB

LOGS = ROOT / "tests" / "data" / "vllm_logs"
KEYS = ("engine_available_kv_bytes_per_gpu", "engine_memory", "kv_cache_groups", "engine_kv_cache_tokens",
        "engine_max_concurrency", "required_gpu_memory_utilization", "engine_max_model_len", "launch_command",
        "launch_command_sglang")


def _run(fn, argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = fn(argv)
    return code, out.getvalue(), err.getvalue()


def test_engine_json_has_every_contract_key_and_the_sizer_keys():
    code, out, _ = _run(main, ["--json", "--engine", "vllm", "--model", "llama-3.1-8b", "--gpu", "h200",
                               "--context", "8192", "--users", "32", "--gpu-memory-utilization", "0.8",
                               "--activation-gib", "1.5", "--non-torch-gib", "0.25", "--cuda-graph-gib", "0.5"])
    assert code == 0
    data = json.loads(out)
    assert all(key in data for key in KEYS) and "per_token_bytes" in data
    terms = {t["name"]: t for t in data["engine_memory"]["terms"]}
    assert terms["activation peak"]["bytes"] == int(1.5 * GiB) and terms["activation peak"]["estimated"] is False
    assert terms["weights"]["estimated"] is True
    # 150,109,880,320 B × 0.8 − 16.06 GB weights − 1.5 − 0.25 − 0.5 GiB, floored as vLLM does.
    expected = int(150_109_880_320 * 0.8) - 16_060_000_000 - int(2.25 * GiB)
    assert data["engine_available_kv_bytes_per_gpu"] == expected
    assert data["engine_kv_cache_tokens"] == expected // (4096 * 16) // 32 * 16
    assert "--gpu-memory-utilization 0.8" in data["launch_command"]
    # The answer for 32 users: one TP-1 replica (the H200's KV pool holds them all), launched at
    # the utilisation asked, with --max-num-seqs the users it carries.
    answer = data["answer"]
    assert (answer["tp"], answer["pp"], answer["replicas"], answer["gpus"]) == (1, 1, 1, 1)
    assert answer["vllm_command"].startswith("vllm serve meta-llama/Llama-3.1-8B --tensor-parallel-size 1 ")
    assert "--gpu-memory-utilization 0.8 " in answer["vllm_command"] and "--max-num-seqs 32 " in answer["vllm_command"]


def test_per_gpu_budget_replaces_the_profile_and_help_says_which_budget_is_which():
    code, out, _ = _run(main, ["--json", "--engine", "vllm", "--model", "llama-3.1-8b",
                               "--kv-budget-gib-per-gpu", "10"])
    assert code == 0 and json.loads(out)["engine_available_kv_bytes_per_gpu"] == 10 * GiB
    text = " ".join(build_parser().format_help().split())
    assert "over the whole TP group" in text and "on ONE GPU" in text


def test_a_budget_without_room_for_a_block_is_one_line_naming_the_option():
    code, out, err = _run(main, ["--json", "--engine", "vllm", "--kv-budget-gib-per-gpu", "0.000001"])
    assert code == 2 and out == "" and "--kv-budget-gib-per-gpu" in err and len(err.strip().splitlines()) == 1


def test_explain_log_reads_a_file_and_standard_input():
    code, out, _ = _run(explain_main, [str(LOGS / "gemma3-1b-gke-mig.log"), "--layers", "26", "--q-heads", "4",
                                       "--kv-heads", "1", "--head-dim", "256", "--params", "1B",
                                       "--max-num-batched-tokens", "2048"])
    assert code == 0
    data = json.loads(out)
    # A manual shape has no sliding layers, so the explainer says the padding does not match.
    assert data["parsed"]["kv_tokens"] == 52_608 and not data["all_within"]
    piped = subprocess.run([sys.executable, "-m", "sizing", "explain-log", "-", "--layers", "40", "--q-heads", "40",
                            "--kv-heads", "8", "--head-dim", "128", "--params", "14.8B"],
                           input=(LOGS / "qwen3-14b-lmcache.log").read_bytes(), capture_output=True, cwd=ROOT)
    assert piped.returncode == 0 and json.loads(piped.stdout)["all_within"]


def test_explain_log_refuses_what_it_cannot_use_and_explains_what_it_can():
    code, _, err = _run(explain_main, [str(LOGS / "README.md"), "--model", "llama-3.1-8b"])
    assert code == 2 and "not a vLLM start-up log" in err
    # The log names no model and none was given: its figures, and what would rebuild the rest.
    code, out, _ = _run(explain_main, [str(LOGS / "qwen3-14b-lmcache.log")])
    data = json.loads(out)
    assert code == 0 and data["needs"] and data["parsed"]["available_gib"] is not None
    code, _, err = _run(explain_main, ["/nonexistent/log.txt", "--model", "llama-3.1-8b"])
    assert code == 2 and "cannot read" in err


def test_a_100_mb_paste_is_refused_by_size_after_reading_only_the_cap(tmp_path):
    # Standard input is read in chunks up to one byte past the 8 MiB cap, then refused; the
    # rest of the 100 MB is never read (the pipe is closed under the writer).
    piped = subprocess.run([sys.executable, "-m", "sizing", "explain-log", "-", "--model", "llama-3.1-8b"],
                           input=b"INFO vllm " * (10 * 2**20), capture_output=True, cwd=ROOT, timeout=60)
    err = piped.stderr.decode()
    assert piped.returncode == 2 and "limit" in err and len(err.strip().splitlines()) == 1
    big = tmp_path / "big.log"
    with big.open("wb") as out:
        out.truncate(100 * 2**20)  # a sparse 100 MB file
    code, _, err = _run(explain_main, [str(big), "--model", "llama-3.1-8b"])
    assert code == 2 and "limit" in err


def test_a_tp_that_cannot_hold_the_weights_is_reported_and_a_tp_recommended():
    # Llama-3.1-70B in bf16 (the CLI's default weights): 70.6e9 × 2 B = 141.2 GB, more than one
    # H100's 79.22 GiB × 0.9 = 71.3 GiB, so the default TP 1 holds no KV block. That is the question
    # the recommendation answers, not a usage error.
    code, out, err = _run(main, ["--json", "--engine", "vllm", "--model", "llama-3.1-70b", "--kv-dtype", "fp8",
                                 "--users", "100"])
    assert code == 0 and err == ""
    data = json.loads(out)
    assert data["engine_fits_at_tp"] is False and data["engine_refused_at_tp"].startswith("TP 1 cannot serve")
    best = data["answer"]
    # At TP 2 the weights take 70.6 GB = 65.75 GiB per GPU, leaving under 4 GiB after the profile:
    # one 32K request (32,768 × 80 layers × 4 KV heads × 128 × 2 × 1 B = 2.5 GiB), so 100 replicas.
    # TP 4 leaves about 38 GiB, 15 requests or more per replica: far fewer GPUs.
    assert best["tp"] > 1 and best["gpus"] == best["tp"] * best["replicas"]
    assert best["replicas"] * best["requests_per_replica"] >= 100
    assert f"--tensor-parallel-size {best['tp']} " in best["vllm_command"]
    assert any(n.startswith("TP 1, as asked, cannot serve one request") for n in best["notes"])
    code, out, _ = _run(main, ["--engine", "vllm", "--model", "llama-3.1-70b", "--kv-dtype", "fp8", "--users", "100"])
    assert code == 0 and "TP 1 cannot serve" in out and out.index("Answer: ") < out.index("Engine (vLLM")


def test_a_given_budget_that_holds_no_block_is_still_an_error():
    code, _, err = _run(main, ["--engine", "vllm", "--model", "llama-3.1-8b", "--kv-budget-gib-per-gpu", "0"])
    assert code == 2 and "--kv-budget-gib-per-gpu" in err


def test_engine_weights_in_the_cli_are_the_engines_not_the_reference_formulas():
    # Llama-3.1-70B with FP8 weights at TP 4: vLLM quantises the linear layers only, so the
    # embedding and the untied lm_head (2 × 128,256 × 8,192 = 2,101,346,304 values) stay 16-bit,
    # one byte each above the reference formula's 70.6 GB (70.6 B params × 1 B); ÷ 4 ranks that is
    # at least 525,336,576 B more a GPU. The norms (80 × 2 × 8,192 + 8,192 = 1,318,912 values)
    # add 329,728 B more a GPU, so the term lies within a few MB of 18,175,666,304 B.
    code, out, _ = _run(main, ["--json", "--engine", "vllm", "--model", "llama-3.1-70b", "--weight-dtype", "fp8",
                               "--tp", "4", "--gpu", "h100-sxm", "--context", "32768", "--users", "100"])
    assert code == 0
    data = json.loads(out)
    terms = {t["name"]: t["bytes"] for t in data["engine_memory"]["terms"]}
    assert data["weights_bytes"] == 70_600_000_000  # the reference formula's figure stays in the report
    assert 18_175_666_304 <= terms["weights"] <= 18_175_666_304 + 2_000_000

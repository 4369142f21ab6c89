"""``python -m planner bench-like``: the step model's figures under ``vllm bench serve``'s names,
equal to the library's for published runs, strict JSON, the engines' defaults as the recorded
runs used them, and one-line refusals naming the option (exit 2)."""

from __future__ import annotations

import json

import pytest

from hardware.gpus import get_gpu
from planner import bench_like, cli as planner_cli
from planner.serving import VALIDATION, BenchmarkSpec, predict_benchmark
from planner.step_model import ServingSetup, step_shape
from sizing.catalogue import get_entry
from support.paths import FIXTURES

RUNS = {run["id"]: run for run in json.loads((FIXTURES / "serving_runs.json").read_text())["runs"]}
KV_BYTES = {"bf16": 2.0, "fp8": 1.0}
SMALL = ["--model", "llama-3.1-8b", "--gpu", "h100-sxm"]


def _refuse_constant(name: str):
    raise AssertionError(f"{name} is not JSON")


def _json(capsys, *argv: str) -> dict:
    assert bench_like.main(["--json", *argv]) == 0
    return json.loads(capsys.readouterr().out, parse_constant=_refuse_constant)


def _run_args(run: dict) -> list[str]:
    """The run's own benchmark and server options, as its page gives them."""
    load = (["--max-concurrency", str(run["concurrency"])] if run["concurrency"]
            else ["--request-rate", str(run["request_rate"])])
    return ["--model", run["model"], "--gpu", run["gpu"], "--tp", str(run["tp"]), "--engine", run["engine"],
            "--kv-dtype", run["kv_dtype"], "--random-input-len", str(run["input_len"]),
            "--random-output-len", str(run["output_len"]), "--num-prompts", str(run["num_prompts"]), *load]


def _library(run: dict, *, chunk_tokens: int | None = None):
    """The library's prediction for the run, from its fields (as test_serving_validation does)."""
    entry, gpu = get_entry(run["model"]), get_gpu(run["gpu"])
    shape = step_shape(entry.config_bytes, tp=run["tp"], gpu=gpu, weight_format=run["weight_format"],
                       kv_bytes=KV_BYTES[run["kv_dtype"]], name=entry.name)
    closed = run["concurrency"] is not None
    spec = BenchmarkSpec(input_len=run["input_len"], output_len=run["output_len"], concurrency=run["concurrency"],
                         request_rate=run["request_rate"], chunk_tokens=chunk_tokens or run["chunk_tokens"],
                         num_prompts=run["num_prompts"] if closed else None)
    return predict_benchmark(shape, ServingSetup(gpu=gpu, engine=run["engine"], cuda_graphs=run["cuda_graphs"]), spec)


def test_a_published_closed_loop_run_gets_the_librarys_figures(capsys):
    run = RUNS["qwen2.5-72b-2xh100-tp2-vllm-c1"]  # 8 prompts of 1024 → 128 tokens, one at a time
    result, expected = _json(capsys, *_run_args(run)), _library(run)
    assert result["mean_tpot_ms"] == expected.tpot_s * 1e3 == result["mean_itl_ms"]
    assert result["mean_ttft_ms"] == expected.ttft_s * 1e3
    assert result["output_throughput"] == pytest.approx(expected.output_tokens_per_s, rel=1e-12)
    assert result["decode_step"] == {**expected.decode_step.as_record(), "kernels": expected.decode_step.kernels,
                                     "experts_touched": 0.0, "notes": []}
    # One request at a time: 8 requests back to back, each its TTFT and 127 decode steps.
    e2e = expected.ttft_s + 127 * expected.tpot_s
    assert result["duration"] == pytest.approx(8 * e2e, rel=1e-12)
    assert result["mean_e2el_ms"] == pytest.approx(e2e * 1e3, rel=1e-12)
    assert (result["completed"], result["total_input_tokens"], result["total_output_tokens"]) == (8, 8192, 1024)
    assert result["request_throughput"] == pytest.approx(8 / result["duration"], rel=1e-12)
    assert result["total_token_throughput"] == pytest.approx(9216 / result["duration"], rel=1e-12)
    # The figure docs/planner/VALIDATION.md prints beside the run's measured 31 ms.
    assert round(result["mean_tpot_ms"], 2) == 28.16
    assert result["max_num_batched_tokens"] == 8192 and result["arrival"] == "burst"


def test_a_published_poisson_run_lasts_until_its_last_request_is_done(capsys):
    run = RUNS["qwen3-0.6b-h100-vllm-rate16"]  # 500 prompts of 512 → 128 tokens at 16 req/s
    result, expected = _json(capsys, *_run_args(run)), _library(run)
    assert result["mean_tpot_ms"] == expected.tpot_s * 1e3 and result["mean_ttft_ms"] == expected.ttft_s * 1e3
    assert result["steady_output_tokens_per_s"] == 16 * 128
    # The 500th request is sent 499 gaps of 1/16 s after the first, then takes its own latency.
    duration = 499 / 16 + expected.ttft_s + 127 * expected.tpot_s
    assert result["duration"] == pytest.approx(duration, rel=1e-12)
    assert result["output_throughput"] == pytest.approx(500 * 128 / duration, rel=1e-12)
    assert result["request_rate"] == 16.0 and result["arrival"] == "poisson" and result["notes"] == []


@pytest.mark.parametrize("run", RUNS.values(), ids=lambda r: r["id"])
def test_the_default_step_budget_is_the_one_each_run_had(run):
    """vLLM's and SGLang's token budget per step on the run's GPU, as each run's record gives it."""
    assert bench_like.default_batched_tokens(get_gpu(run["gpu"]), run["engine"]) == run["chunk_tokens"]


@pytest.mark.parametrize("engine,eager", [("sglang", False), ("vllm", True)])
def test_engine_and_eager_reach_the_library(capsys, engine, eager):
    run = {**RUNS["llama3.1-8b-a100-40gb-vllm-c1"], "gpu": "h100-sxm", "engine": engine, "cuda_graphs": not eager,
           "concurrency": 16, "num_prompts": 64}
    args = _run_args(run) + (["--enforce-eager"] if eager else [])
    result, expected = _json(capsys, *args), _library(run, chunk_tokens=8192)
    assert result["mean_tpot_ms"] == expected.tpot_s * 1e3 and result["mean_ttft_ms"] == expected.ttft_s * 1e3
    assert result["engine"] == engine and result["cuda_graphs"] is not eager
    assert (result["decode_step"]["host_s"] > 0) is eager


def test_a_config_file_gives_the_catalogue_models_figures(capsys, tmp_path):
    path = tmp_path / "config.json"
    path.write_bytes(get_entry("llama-3.1-8b").config_bytes)
    by_id = _json(capsys, *SMALL, "--num-prompts", "16")
    by_file = _json(capsys, "--config", str(path), "--gpu", "h100-sxm", "--num-prompts", "16")
    assert by_file["mean_tpot_ms"] == by_id["mean_tpot_ms"] and by_file["duration"] == by_id["duration"]


def test_request_rate_inf_sends_every_prompt_at_once(capsys):
    result = _json(capsys, *SMALL, "--num-prompts", "32")
    assert result["request_rate"] == "inf" and result["in_flight"] == 32 and result["arrival"] == "burst"
    # A range ratio staggers requests only across waves; one wave still starts together.
    assert _json(capsys, *SMALL, "--num-prompts", "32", "--random-range-ratio", "0.5")["arrival"] == "burst"
    assert _json(capsys, *SMALL, "--num-prompts", "64", "--max-concurrency", "32",
                 "--random-range-ratio", "0.5")["arrival"] == "staggered"


def test_text_is_vllm_bench_serves_block_with_the_error_band(capsys):
    assert bench_like.main([*SMALL, "--num-prompts", "16", "--max-concurrency", "4"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("Predicted by the step model, not measured: Llama-3.1-8B on 1 × H100 SXM")
    assert lines[1] == "============ Serving Benchmark Result ============"
    labels = [line[:40].rstrip() for line in lines if line[:40].rstrip().endswith(":")]
    assert labels == ["Successful requests:", "Maximum request concurrency:", "Benchmark duration (s):",
                      "Total input tokens:", "Total generated tokens:", "Request throughput (req/s):",
                      "Output token throughput (tok/s):", "Total Token throughput (tok/s):", "Mean TTFT (ms):",
                      "Mean TPOT (ms):", "Mean ITL (ms):"]
    assert "Successful requests:                     16        " in lines
    result = _json(capsys, *SMALL, "--num-prompts", "16", "--max-concurrency", "4")
    assert f"Mean TPOT (ms):                          {result['mean_tpot_ms']:<10.2f}" in lines
    band = lines[-1]
    assert band.startswith("Error band (docs/planner/VALIDATION.md, 18 published runs")
    assert f"TPOT median {VALIDATION.tpot_median_error * 100:.1f} %, max {VALIDATION.tpot_max_error * 100:.0f} %" in band
    assert "TTFT short on all 9 runs" in band


def test_the_route_through_python_m_planner(capsys):
    assert planner_cli.main(["bench-like", "--json", *SMALL, "--num-prompts", "8"]) == 0
    routed = capsys.readouterr().out
    assert bench_like.main(["--json", *SMALL, "--num-prompts", "8"]) == 0
    assert routed == capsys.readouterr().out


def _refused(capsys, argv: list[str]) -> str:
    assert bench_like.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1
    return captured.err


@pytest.mark.parametrize("argv,option", [
    (["--random-input-len", "0"], "--random-input-len"),
    (["--random-output-len", "1"], "--random-output-len"),
    (["--random-range-ratio", "1"], "--random-range-ratio"),
    (["--random-range-ratio", "-0.1"], "--random-range-ratio"),
    (["--num-prompts", "0"], "--num-prompts"),
    (["--max-concurrency", "0"], "--max-concurrency"),
    (["--max-concurrency", "2.5"], "--max-concurrency"),
    (["--request-rate", "0"], "--request-rate"),
    (["--request-rate", "nan"], "--request-rate"),
    (["--request-rate", "1e308"], "--request-rate"),
    (["--tp", "3"], "--tp"),
    (["--tp", "0"], "--tp"),
    (["--gpu", "h999"], "--gpu"),
    (["--engine", "trtllm"], "--engine"),
    (["--kv-dtype", "int3"], "--kv-dtype"),
    (["--weight-dtype", "fp7"], "--weight-dtype"),
    (["--max-num-batched-tokens", "0"], "--max-num-batched-tokens"),
    (["--max-num-seqs", "-1"], "--max-num-seqs"),
    (["--gpu-memory-utilization", "0"], "--gpu-memory-utilization"),
])
def test_bad_arguments_exit_2_naming_the_option(capsys, argv, option):
    assert f"error: argument {option}" in _refused(capsys, [*SMALL, *argv])


@pytest.mark.parametrize("argv,option,words", [
    (["--model", "llama-3.1-8b", "--max-concurrency", "4", "--request-rate", "2"], "--request-rate",
     "not allowed with argument --max-concurrency"),
    (["--model", "llama-3.1-8b", "--config", "c.json"], "--config", "not allowed with argument --model"),
    ([], "--model", "one of the arguments --model --config is required"),
])
def test_options_that_exclude_each_other(capsys, argv, option, words):
    err = _refused(capsys, argv)
    assert option in err and words in err


def test_a_model_the_step_model_cannot_time_is_refused(capsys, tmp_path):
    err = _refused(capsys, ["--model", "acme/unknown-7b"])
    assert "argument --model: 'acme/unknown-7b' is not in the catalogue" in err and "--config" in err
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
                                  "head_dim": 64}))
    assert "argument --config: the step model cannot read this config: hidden_size" in _refused(
        capsys, ["--config", str(config)])


def test_loads_the_model_cannot_answer_are_refused(capsys):
    # 70B in bf16 is 141.2 GB of weights: more than one H100 holds.
    assert "argument --tp: the weights (131.5 GiB = 141.2 GB, bf16)" in _refused(capsys, ["--model", "llama-3.1-70b"])
    # vLLM runs at most 256 sequences on an A100 (1,024 on an H100); the queue behind is not modelled.
    a100 = ["--model", "llama-3.1-8b", "--gpu", "a100-80gb"]
    assert "argument --num-prompts: with --request-rate inf all 1,000 requests" in _refused(capsys, a100)
    assert "argument --max-concurrency: vLLM runs at most 256" in _refused(capsys, [*a100, "--max-concurrency", "300"])
    assert _json(capsys, *a100, "--max-concurrency", "300", "--max-num-seqs", "512",
                 "--num-prompts", "300", "--random-input-len", "64")["in_flight"] == 300
    # Llama 3.1 reads 131,072 tokens; vLLM refuses a longer request outright.
    assert "beyond Llama-3.1-8B's context of 131,072" in _refused(capsys, [*SMALL, "--random-input-len", "131000"])
    assert "argument --request-rate: at 1000 req/s" in _refused(capsys, [*SMALL, "--request-rate", "1000",
                                                                         "--num-prompts", "100"])


def test_a_kv_cache_too_small_for_the_load_is_noted(capsys):
    result = _json(capsys, "--model", "llama-3.1-8b", "--gpu", "a100-80gb", "--max-concurrency", "256",
                   "--num-prompts", "256", "--random-input-len", "8000")
    assert len(result["notes"]) == 1 and "fewer than the 256 in flight" in result["notes"][0]

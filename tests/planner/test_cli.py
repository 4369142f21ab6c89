"""``python -m planner`` (and ``python -m sizing plan``): the contract's keys, the exact datasheet formula, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
import pytest

from planner import cli as planner_cli
from support.paths import ROOT, TRACES
CONTRACT_KEYS = ("decode_step_s", "tokens_per_s", "max_batch_paged", "max_batch_contiguous",
                 "binding_limit")
REFERENCE = ["--model", "llama-3.1-70b", "--kv-dtype", "fp8", "--weight-dtype", "fp8",
             "--gpu", "h100-sxm", "--tp", "8"]
# The same Llama-3.1-70B typed by hand (80 layers, 64 query and 8 KV heads of 128, 70.6 B
# parameters): no config, so the roofline times it and its figures are the datasheet formula.
HAND = ["--layers", "80", "--q-heads", "64", "--kv-heads", "8", "--head-dim", "128", "--params", "70.6e9",
        "--kv-dtype", "fp8", "--weight-dtype", "fp8", "--gpu", "h100-sxm", "--tp", "8"]


def _run(capsys, *argv: str) -> dict:
    assert planner_cli.main(["--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_datasheet_efficiency_one_is_exactly_bytes_over_bandwidth(capsys):
    result = _run(capsys, *HAND, "--batch", "64", "--context", "8192",
                  "--bandwidth-source", "datasheet", "--efficiency", "1")
    # weights per GPU: 70.6e9 params × 1 B ÷ 8 = 8,825,000,000 B
    # KV per GPU: 64 × 8,192 tokens × (2 × 80 layers × 1 KV head × 128 × 1 B = 20,480 B)
    #           = 10,737,418,240 B;  step = 19,562,418,240 B ÷ 3.35e12 B/s = 5.8395 ms
    assert result["decode_step_s"] == (8_825_000_000 + 64 * 8192 * 20_480) / 3.35e12
    assert result["tokens_per_s"] == 64 / result["decode_step_s"]
    assert result["binding_limit"] == "bandwidth"
    assert result["timing_model"] == "roofline" and result["timing_label"].startswith("roofline: datasheet")
    assert result["serving"] is None and result["answer_tpot"] is None
    # budget 0.9 × 80e9 − 8.825e9 = 63.175e9 B = 3,084,716 slots of 20,480 B:
    # paged 8,192-token sequences (whole 16-token blocks): 3,084,716 // 8,192 = 376;
    # contiguous reserving 32,768: 3,084,716 // 32,768 = 94
    assert result["max_batch_paged"] == 376
    assert result["max_batch_contiguous"] == 94
    for key in CONTRACT_KEYS:
        assert key in result


def test_efficiency_divides_the_step(capsys):
    full = _run(capsys, *HAND, "--batch", "64", "--context", "8192",
                "--bandwidth-source", "datasheet", "--efficiency", "1")
    half = _run(capsys, *HAND, "--batch", "64", "--context", "8192",
                "--bandwidth-source", "datasheet", "--efficiency", "0.5")
    assert half["decode_step_s"] == pytest.approx(2 * full["decode_step_s"], rel=1e-12)


def test_batch_beyond_memory_says_memory(capsys):
    result = _run(capsys, *REFERENCE, "--batch", "400", "--context", "8192",
                  "--bandwidth-source", "datasheet")
    assert result["binding_limit"] == "memory"


def test_default_batch_is_the_operating_point_and_tpot_can_bind(capsys):
    result = _run(capsys, *HAND, "--context", "2048", "--bandwidth-source", "datasheet",
                  "--tpot-ms", "10")
    # 10 ms target: compute allows 0.01 × 989e12 ÷ (2 × 8.825e9 + 4 × 80 × 8 × 128 × 2,048)
    # = 539.8 → 539 sequences, fewer than the 1,506 that fit
    assert result["batch"] == 539 and result["max_batch_tpot"] == 539
    assert result["binding_limit"] == "latency"
    assert result["max_batch_paged"] == 1506 and result["max_batch_contiguous"] == 94


def test_trace_traffic(capsys):
    result = _run(capsys, *REFERENCE, "--trace", str(TRACES / "splitwise_conv.csv"),
                  "--bandwidth-source", "datasheet")
    assert result["traffic"] == "splitwise_conv.csv"
    assert result["max_batch_paged"] > 10 * result["max_batch_contiguous"]


@pytest.mark.parametrize("argv, option", [
    (["--tp", "0"], "--tp"),
    (["--tp", "3"], "--tp"),
    (["--batch", "x"], "--batch"),
    (["--efficiency", "0"], "--efficiency"),
    (["--efficiency", "1.5"], "--efficiency"),
    (["--bandwidth-source", "guess"], "--bandwidth-source"),
    (["--bandwidth-source", "measured"], "--bench-json"),
    (["--gpu", "nope"], "--gpu"),
    (["--model", "nope"], "--model"),
    (["--context", "1"], "--context"),
    (["--trace", "/nonexistent/trace.csv"], "--trace"),
])
def test_bad_arguments_exit_2_with_one_line_naming_them(capsys, argv, option):
    assert planner_cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and option in err


def test_bad_bench_json_is_named(tmp_path, capsys):
    path = tmp_path / "run.json"
    path.write_text("{}")
    assert planner_cli.main(["--bench-json", str(path)]) == 2
    assert "--bench-json" in capsys.readouterr().err


def test_python_m_sizing_plan_is_the_contract_entry_point():
    completed = subprocess.run(
        [sys.executable, "-m", "sizing", "plan", "--json", *HAND, "--batch", "64",
         "--context", "8192", "--bandwidth-source", "datasheet", "--efficiency", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr
    result = json.loads(completed.stdout)
    assert result["decode_step_s"] == (8_825_000_000 + 64 * 8192 * 20_480) / 3.35e12
    bad = subprocess.run([sys.executable, "-m", "sizing", "plan", "--efficiency", "abc"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--efficiency" in bad.stderr


@pytest.mark.parametrize("argv, option", [
    (["--context", "1e30"], "--context"),
    (["--context", "1e308"], "--context"),
    (["--rate", "1e308"], "--rate"),
    (["--rate", "nan"], "--rate"),
    (["--tpot-ms", "-5"], "--tpot-ms"),
    (["--ttft-ms", "inf"], "--ttft-ms"),
    (["--sigma", "0"], "--sigma"),
    (["--mean", "1e300"], "--mean"),
    (["--batch", "1e9"], "--batch"),
    (["--max-context", "1"], "--max-context"),
    (["--usable", "5"], "--usable"),
    (["--tp", "2048"], "--tp"),
    (["--block-size", "0"], "--block-size"),
])
def test_out_of_range_values_exit_2_with_one_short_line(capsys, argv, option):
    assert planner_cli.main(["--json", *argv]) == 2
    captured = capsys.readouterr()
    line = captured.err.strip()
    assert captured.out == "" and "\n" not in line and len(line) < 300 and option in line


@pytest.mark.parametrize("option", ["--bench-json", "--trace"])
def test_endless_files_are_refused_at_the_size_cap(capsys, option):
    assert planner_cli.main([option, "/dev/zero"]) == 2
    line = capsys.readouterr().err.strip()
    assert "\n" not in line and option in line and "limit" in line


def test_a_rate_no_replica_can_serve_is_refused_not_printed_as_infinity(capsys):
    argv = ["--json", "--model", "llama-3.1-405b", "--weight-dtype", "bf16", "--gpu", "l4",
            "--rate", "10"]
    assert planner_cli.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "--rate" in captured.err


def test_help_states_the_ranges(capsys):
    with pytest.raises(SystemExit):
        planner_cli.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "1,000,000 requests/s" in text and "2 to 10,000,000 tokens" in text


# --- the step model on the command line -----------------------------------------------------------
LLAMA8 = ["--model", "llama-3.1-8b", "--kv-dtype", "bf16", "--weight-dtype", "bf16", "--gpu", "h100-sxm",
          "--tp", "1", "--context", "4096", "--tpot-ms", "15", "--bandwidth-source", "datasheet"]


def _strict(text: str) -> dict:
    """JSON that refuses NaN and Infinity, as the CLI promises."""
    def refuse(name):
        raise AssertionError(f"{name} in the JSON")
    return json.loads(text, parse_constant=refuse)


def test_a_catalogue_models_json_carries_the_librarys_step_model_figures(capsys):
    from hardware.gpus import get_gpu
    from planner.plan import PlanRequest, TrafficSpec, run_plan
    from planner.step_model import ServingSetup, step_shape, step_time
    from sizing.catalogue import get_entry
    from sizing.precisions import get_precision

    assert planner_cli.main(["--json", *LLAMA8]) == 0
    result = _strict(capsys.readouterr().out)
    entry, h100, bf16 = get_entry("llama-3.1-8b"), get_gpu("h100-sxm"), get_precision("bf16")
    outcome = run_plan(PlanRequest(model=entry.shape, kv_precision=bf16, weight_precision=bf16, gpu=h100,
                                   traffic=TrafficSpec(kind="fixed", length=4096), bandwidth_source="datasheet",
                                   tpot_target_s=0.015, config=entry.config_bytes, max_num_seqs=256))
    plan = outcome.plan
    assert result["timing_model"] == "step model" and result["timing_label"] == plan.timing_label
    assert result["batch"] == plan.paged.batch and result["max_batch_tpot"] == plan.paged.latency_batch
    assert result["decode_step_s"] == plan.paged.step.step_s and result["ttft_s"] == plan.ttft_s
    assert result["paged"]["tpot_s"] == plan.paged.step.step_s
    # and the step model's own step at that batch, recomputed here
    shape = step_shape(entry.config_bytes, tp=1, gpu=h100, kv_bytes=2.0)
    own = step_time(shape, ServingSetup(gpu=h100), decode_batch=result["batch"], context=4096)
    assert result["decode_step_s"] == own.total_s and result["decode_step_terms"] == own.as_record()
    serving = result["serving"]
    assert serving["arrival"] == "burst" and serving["concurrency"] == plan.paged.batch
    assert serving["mean_tpot_s"] == outcome.serving.tpot_s and serving["p90_ttft_s"] == outcome.serving.p90_ttft_s
    assert result["validation"]["doc"] == "docs/planner/VALIDATION.md"
    assert result["answer_tpot"]["tpot_s"] > 0 and result["answer_tpot"]["label"].startswith("step model: vllm")


def test_a_distribution_has_no_burst_percentiles_and_prints_null(capsys):
    assert planner_cli.main(["--json", *LLAMA8, "--mean", "2048"]) == 0
    serving = _strict(capsys.readouterr().out)["serving"]
    assert serving["arrival"] == "staggered" and serving["p90_tpot_s"] is None


def test_a_shape_typed_by_hand_says_roofline_in_json_and_text(capsys):
    result = _run(capsys, *HAND, "--bandwidth-source", "datasheet")
    assert result["timing_model"] == "roofline" and result["timing_label"].startswith("roofline: datasheet")
    assert planner_cli.main([*HAND, "--bandwidth-source", "datasheet"]) == 0
    text = capsys.readouterr().out
    assert "timing model" in text and "roofline: datasheet" in text and "TPOT at the answer's batch" not in text


def test_the_table_shows_the_step_model_the_serving_figures_and_the_answers_tpot(capsys):
    assert planner_cli.main(LLAMA8) == 0
    text = capsys.readouterr().out
    assert "step model: vllm, CUDA graphs, BF16 weights on H100 SXM, TP 1" in text
    assert "serving at " in text and "(burst)" in text and "Error band" in text
    assert "TPOT at the answer's batch: " in text


def test_engine_eager_and_step_budget_reach_the_step_model(capsys):
    graphs = _run(capsys, *LLAMA8, "--batch", "8")
    eager = _run(capsys, *LLAMA8, "--batch", "8", "--enforce-eager", "--engine", "sglang",
                 "--max-num-batched-tokens", "2048")
    assert (eager["engine"], eager["cuda_graphs"], eager["max_num_batched_tokens"]) == ("sglang", False, 2048)
    assert "sglang, eager (no CUDA graphs)" in eager["timing_label"]
    assert eager["decode_step_s"] >= graphs["decode_step_s"]  # the host launches every kernel
    # 4,095 prompt tokens in chunks of 2,048: 2 steps to the first token instead of 1
    assert eager["ttft_s"] > graphs["ttft_s"]


@pytest.mark.parametrize("argv, option", [
    (["--engine", "trt"], "--engine"),
    (["--max-num-batched-tokens", "0"], "--max-num-batched-tokens"),
    (["--max-num-batched-tokens", str((1 << 24) + 1)], "--max-num-batched-tokens"),
    (["--max-num-batched-tokens", "nan"], "--max-num-batched-tokens"),
])
def test_bad_engine_options_exit_2_naming_them(capsys, argv, option):
    assert planner_cli.main(["--json", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "\n" not in captured.err.strip() and option in captured.err


def test_an_edited_preset_keeps_the_roofline(capsys):
    # --kv-heads changes the shape, so the preset's config no longer describes it
    result = _run(capsys, *REFERENCE, "--kv-heads", "64", "--bandwidth-source", "datasheet")
    assert result["timing_model"] == "roofline"


def test_a_config_file_is_timed_by_the_step_model(tmp_path, capsys):
    from sizing.catalogue import get_entry

    path = tmp_path / "config.json"
    path.write_bytes(get_entry("llama-3.1-8b").config_bytes)
    by_file = _run(capsys, "--config", str(path), *LLAMA8[2:])
    by_id = _run(capsys, *LLAMA8)
    assert by_file["timing_model"] == "step model"
    assert by_file["decode_step_s"] == by_id["decode_step_s"] and by_file["batch"] == by_id["batch"]

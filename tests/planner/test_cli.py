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


def _run(capsys, *argv: str) -> dict:
    assert planner_cli.main(["--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_datasheet_efficiency_one_is_exactly_bytes_over_bandwidth(capsys):
    result = _run(capsys, *REFERENCE, "--batch", "64", "--context", "8192",
                  "--bandwidth-source", "datasheet", "--efficiency", "1")
    # weights per GPU: 70.6e9 params × 1 B ÷ 8 = 8,825,000,000 B
    # KV per GPU: 64 × 8,192 tokens × (2 × 80 layers × 1 KV head × 128 × 1 B = 20,480 B)
    #           = 10,737,418,240 B;  step = 19,562,418,240 B ÷ 3.35e12 B/s = 5.8395 ms
    assert result["decode_step_s"] == (8_825_000_000 + 64 * 8192 * 20_480) / 3.35e12
    assert result["tokens_per_s"] == 64 / result["decode_step_s"]
    assert result["binding_limit"] == "bandwidth"
    # budget 0.9 × 80e9 − 8.825e9 = 63.175e9 B = 3,084,716 slots of 20,480 B:
    # paged 8,192-token sequences (whole 16-token blocks): 3,084,716 // 8,192 = 376;
    # contiguous reserving 32,768: 3,084,716 // 32,768 = 94
    assert result["max_batch_paged"] == 376
    assert result["max_batch_contiguous"] == 94
    for key in CONTRACT_KEYS:
        assert key in result


def test_efficiency_divides_the_step(capsys):
    full = _run(capsys, *REFERENCE, "--batch", "64", "--context", "8192",
                "--bandwidth-source", "datasheet", "--efficiency", "1")
    half = _run(capsys, *REFERENCE, "--batch", "64", "--context", "8192",
                "--bandwidth-source", "datasheet", "--efficiency", "0.5")
    assert half["decode_step_s"] == pytest.approx(2 * full["decode_step_s"], rel=1e-12)


def test_batch_beyond_memory_says_memory(capsys):
    result = _run(capsys, *REFERENCE, "--batch", "400", "--context", "8192",
                  "--bandwidth-source", "datasheet")
    assert result["binding_limit"] == "memory"


def test_default_batch_is_the_operating_point_and_tpot_can_bind(capsys):
    result = _run(capsys, *REFERENCE, "--context", "2048", "--bandwidth-source", "datasheet",
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
        [sys.executable, "-m", "sizing", "plan", "--json", *REFERENCE, "--batch", "64",
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

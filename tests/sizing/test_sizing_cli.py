"""The ``python -m sizing`` contract: options, JSON keys, exit status 2 with one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sizing.cli import main
from hardware.gpus import GPU_IDS
from sizing.presets import PRESET_IDS, get_preset
from units import GB, GiB, KiB

ROOT = Path(__file__).resolve().parents[2]


def run_json(capsys, *args: str) -> dict:
    assert main(["--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_contract_keys_and_reference_values(capsys):
    out = run_json(capsys, "--model", "llama-3.1-70b", "--kv-dtype", "fp8", "--weight-dtype", "fp8",
                   "--context", "32768", "--users", "100", "--gpu", "h100-sxm", "--usable", "0.9", "--tp", "8",
                   "--block-size", "16", "--kv-budget-gib", "100")
    assert out["per_token_bytes"] == 160 * KiB
    assert out["kv_bytes_total"] == 500 * GiB
    assert out["weights_bytes"] == 70_600_000_000
    assert out["gpus_needed"] == 9  # 607.5 GB ÷ 72 GB = 8.4 → 9
    assert out["per_gpu_kv_bytes_per_token"] == 20 * KiB
    # 100 GiB ÷ 2.5 MiB blocks = 40,960 blocks × 16 = 655,360 tokens; ÷ 32,768 = 20.
    assert out["kv_capacity_tokens"] == 655_360 and out["max_concurrency"] == 20


def test_manual_shape(capsys):
    out = run_json(capsys, "--layers", "80", "--q-heads", "64", "--kv-heads", "8", "--head-dim", "128",
                   "--params", "70e9", "--kv-dtype", "bf16", "--weight-dtype", "fp8", "--gpu", "h200")
    assert out["per_token_bytes"] == 327_680 and out["weights_bytes"] == 70 * GB and out["gpus_needed"] == 10


def test_preset_override_without_gqa(capsys):
    out = run_json(capsys, "--model", "llama-3.1-70b", "--kv-heads", "64")
    assert out["per_token_bytes"] == 2621440  # 2.5 MiB


def test_config_file(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(get_preset("gemma-2-9b").config)))
    out = run_json(capsys, "--config", str(path), "--kv-dtype", "bf16", "--context", "1000", "--users", "1")
    assert out["per_token_bytes"] == 2 * 42 * 8 * 256 * 2  # head_dim 256 from the config


def test_int4_scales_switchable(capsys):
    plain = run_json(capsys, "--kv-dtype", "int4", "--kv-group-size", "0")
    scaled = run_json(capsys, "--kv-dtype", "int4", "--kv-group-size", "64")
    assert plain["per_token_bytes"] == 80 * KiB and scaled["per_token_bytes"] == 80 * KiB + 163_840 * 2 // 64


def test_table_output(capsys):
    assert main(["--model", "llama-3.1-8b"]) == 0
    text = capsys.readouterr().out
    assert "2 × 32 × 8 × 128 = 65,536 values" in text and "GPUs needed" in text


def test_help_lists_ids(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    for name in (*PRESET_IDS, *GPU_IDS, "--kv-budget-gib", "--block-size", "--config"):
        assert name in text


@pytest.mark.parametrize(("args", "option"), [
    (["--users", "0"], "--users"), (["--users", "many"], "--users"), (["--context", "-1"], "--context"),
    (["--model", "gpt-9"], "--model"), (["--gpu", "tpu-v5"], "--gpu"), (["--kv-dtype", "fp4"], "--kv-dtype"),
    (["--weight-dtype", "int3"], "--weight-dtype"), (["--usable", "1.2"], "--usable"), (["--usable", "nan"], "--usable"),
    (["--tp", "3"], "--tp"), (["--tp", "0"], "--tp"), (["--block-size", "x"], "--block-size"),
    (["--kv-budget-gib", "-4"], "--kv-budget-gib"), (["--params", "lots"], "--params"),
    (["--layers", "80"], "--q-heads"), (["--model", "llama-3.1-8b", "--config", "c.json"], "--config"),
    (["--config", "/does/not/exist.json"], "--config"), (["--model", "llama-3.1-8b", "--kv-heads", "7"], "--kv-heads"),
    (["--gpus", "12", "--tp", "8"], "--gpus"), (["--bogus"], "--bogus"),
])
def test_bad_arguments_one_line_exit_2(capsys, args, option):
    assert main(["--json", *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and option in lines[0]
    assert "Traceback" not in captured.err and "usage:" not in captured.err


def test_hostile_config_file(tmp_path, capsys):
    for content in (b"\x00\x01binary", b'{"num_hidden_layers": "eighty"}', b"[]", b"{" * 50_000):
        path = tmp_path / "bad.json"
        path.write_bytes(content)
        assert main(["--json", "--config", str(path)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--config" in err[0]
    big = tmp_path / "big.json"
    big.write_bytes(b" " * 2_000_000)
    assert main(["--config", str(big)]) == 2
    assert "1,000,000-byte limit" in capsys.readouterr().err
    assert main(["--config", "/dev/zero"]) == 2  # read up to the cap only, not forever
    assert "--config" in capsys.readouterr().err


@pytest.mark.parametrize(("args", "option"), [
    (["--context", "1e30"], "--context"), (["--context", "nan"], "--context"),
    (["--users", "1e308"], "--users"), (["--tp", "2048"], "--tp"), (["--tp", "6"], "--tp"),
    (["--layers", "1e9"], "--layers"), (["--params", "1e30"], "--params"),
    (["--kv-group-size", "-1"], "--kv-group-size"), (["--kv-budget-gib", "inf"], "--kv-budget-gib"),
    (["--gpu-memory-gb", "0"], "--gpu-memory-gb"), (["--block-size", "1e6"], "--block-size"),
    (["--gpus-per-node", "0"], "--gpus-per-node"),
])
def test_out_of_range_values_one_short_line(capsys, args, option):
    assert main(["--json", *args]) == 2
    captured = capsys.readouterr()
    line = captured.err.strip()
    assert captured.out == "" and "\n" not in line and len(line) < 300 and option in line


def test_help_states_the_ranges(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "1 to 10,000,000 tokens" in text and "0.01 to 1" in text


def test_subprocess_exit_codes():
    ok = subprocess.run([sys.executable, "-m", "sizing", "--json", "--model", "mixtral-8x7b"],
                        cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and json.loads(ok.stdout)["per_token_bytes"] == 2 * 32 * 8 * 128 * 2
    bad = subprocess.run([sys.executable, "-m", "sizing", "--json", "--tp", "banana"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.count("\n") == 1 and "--tp" in bad.stderr

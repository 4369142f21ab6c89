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


# ---- model sources: catalogue id, Hub repo, manual layouts ----------------------------------
@pytest.fixture
def hub_env(tmp_path, monkeypatch):
    """A local Hub (HF_ENDPOINT) serving Qwen3-8B's config and index under a repo the catalogue lacks."""
    from support.hub_server import HubServer

    index = json.dumps({"metadata": {"total_size": 16_381_470_720}, "weight_map": {}}).encode()
    files = {("someorg/qwen3-8b-copy", "config.json"): get_preset("qwen3-8b").config_bytes,
             ("someorg/qwen3-8b-copy", "model.safetensors.index.json"): index}
    with HubServer(files, gated={"someorg/gated"}) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub-cache"))
        yield server


def test_model_id_from_the_catalogue_and_from_the_hub(capsys, hub_env):
    shipped = run_json(capsys, "--model-id", "Qwen/Qwen3-8B")
    assert shipped["model_source"] == "catalogue" and hub_env.requests == []
    # 2 × 36 layers × 8 KV heads × 128 × 2 B = 147,456 B per token, whichever source.
    assert shipped["per_token_bytes"] == 147_456 and shipped["weights_source"] == "estimate"
    fetched = run_json(capsys, "--model-id", "someorg/qwen3-8b-copy")
    assert fetched["model_source"] == "hub" and fetched["model"] == "someorg/qwen3-8b-copy"
    assert fetched["per_token_bytes"] == 147_456
    # Weights "auto" with --model-id: the index's stated total, not an estimate.
    assert (fetched["weights_bytes"], fetched["weights_source"]) == (16_381_470_720, "safetensors")
    assert sum("config.json" in p for p in hub_env.requests) >= 1


@pytest.mark.parametrize(("model_id", "message"), [
    ("someorg/gated", "gated"), ("someorg/missing", "not found, or is private"),
    ("https://huggingface.co/Qwen/Qwen3-8B", "not a Hugging Face repo id"), ("../../etc/passwd", "not a Hugging Face"),
    ("qwen3-9b", "did you mean"),
])
def test_model_id_refusals_name_the_option(capsys, hub_env, model_id, message):
    assert main(["--json", "--model-id", model_id]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "argument --model-id" in err and message in err


def test_unreachable_hub_names_the_option(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:1")  # refused at once
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    assert main(["--json", "--model-id", "someorg/not-shipped"]) == 2
    assert "argument --model-id: the Hub is unreachable" in capsys.readouterr().err


def test_layout_sums_bytes_per_kind(capsys):
    out = run_json(capsys, "--layout", "18 full + 18 sliding(128)", "--q-heads", "32", "--kv-heads", "8",
                   "--head-dim", "128", "--params", "8B", "--context", "1000", "--users", "1")
    assert out["model_source"] == "manual"
    # Per layer 2 × 8 × 128 × 2 B = 4,096 B per token; 18 layers of each kind.
    rows = {row["kind"]: row for row in out["layer_kinds"]}
    assert rows["full"]["bytes_per_token"] == rows["sliding_window"]["bytes_per_token"] == 18 * 4096
    assert (rows["sliding_window"]["window"], rows["full"]["count"]) == (128, 18)
    # At 1,000 tokens: full layers hold all 1,000, sliding ones 128.
    assert out["per_user_bytes"] == 18 * 4096 * 1000 + 18 * 4096 * 128


def test_repeating_layout_like_gemma3(capsys):
    # Gemma-3-27B's pattern, 62 layers: 10 periods of 5 local + 1 global, then 2 local layers.
    out = run_json(capsys, "--layout", "5 sliding(1024) : 1 full", "--layers", "62", "--q-heads", "32",
                   "--kv-heads", "16", "--head-dim", "128", "--params", "27B")
    rows = {row["kind"]: row for row in out["layer_kinds"]}
    assert (rows["sliding_window"]["count"], rows["full"]["count"]) == (52, 10)
    assert out["per_token_bytes"] == 62 * 2 * 16 * 128 * 2


def test_layout_with_mla_and_recurrent_state(capsys):
    mla = run_json(capsys, "--layout", "61 mla", "--q-heads", "128", "--head-dim", "192", "--params", "671B",
                   "--kv-lora-rank", "512", "--qk-rope-head-dim", "64", "--tp", "8")
    # DeepSeek-V3's latent: (512 + 64) × 2 B × 61 layers, replicated on every rank.
    assert mla["per_token_bytes"] == mla["per_gpu_kv_bytes_per_token"] == 576 * 2 * 61
    hybrid = run_json(capsys, "--layout", "1 full : 3 linear", "--layers", "48", "--q-heads", "16", "--kv-heads", "2",
                      "--head-dim", "256", "--params", "80B",
                      "--state", "kernel=4 channels=8192 heads=32 per_head=16384")
    # Each linear layer: conv 3 × 8,192 + 32 heads × 16,384 = 548,864 values × 2 B; 36 of them.
    assert hybrid["state_bytes_per_sequence"] == 36 * 548_864 * 2
    assert hybrid["per_token_bytes"] == 12 * 2 * 2 * 256 * 2


def test_layout_overrides_a_presets_layers(capsys):
    out = run_json(capsys, "--model", "llama-3.1-8b", "--layout", "3 sliding(4096) : 1 full")
    rows = {row["kind"]: row["count"] for row in out["layer_kinds"]}
    assert rows == {"sliding_window": 24, "full": 8}


@pytest.mark.parametrize(("args", "option", "message"), [
    (["--layout", "12 foo", "--q-heads", "8", "--kv-heads", "8", "--head-dim", "64", "--params", "1B"], "--layout",
     "unknown layer kind"),
    (["--layout", "5 sliding(1024) : 1 full", "--q-heads", "8", "--kv-heads", "8", "--head-dim", "64",
      "--params", "1B"], "--layout", "needs the number of layers"),
    (["--model", "llama-3.1-8b", "--layout", "10 full + 10 sliding(64)"], "--layout", "lists 20 layers"),
    (["--layout", "4 full"], "--q-heads", "required with --layout"),
    (["--layout", "4 mla", "--q-heads", "8", "--head-dim", "64", "--params", "1B"], "--kv-lora-rank", "required"),
    (["--layout", "1 full : 1 mamba", "--layers", "4", "--q-heads", "8", "--kv-heads", "8", "--head-dim", "64",
      "--params", "1B"], "--state", "need their state sizes"),
    (["--layout", "1 full : 1 mamba", "--layers", "4", "--q-heads", "8", "--kv-heads", "8", "--head-dim", "64",
      "--params", "1B", "--state", "kernel=4 channels=nan heads=2 per_head=4"], "--state", "channels"),
    (["--layout", "x" * 5000], "--layout", "at most 400"),
])
def test_layout_refusals_name_the_option(capsys, args, option, message):
    assert main(["--json", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"argument {option}" in err and message in err, err


def test_readme_model_source_examples_run(capsys, monkeypatch, tmp_path):
    import shlex

    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:1")  # the examples need no network
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    readme = (ROOT / "README.md").read_text()
    block = readme.split("Models come from four sources", 1)[1].split("```text", 1)[1].split("```", 1)[0]
    examples = [shlex.split(line) for line in block.strip().splitlines()]
    assert len(examples) == 3 and all(argv[:3] == ["python", "-m", "sizing"] for argv in examples)
    sources = [run_json(capsys, *argv[3:])["model_source"] for argv in examples]
    assert sources == ["catalogue", "manual", "manual"]


@pytest.mark.parametrize(("args", "option"), [
    (["--kv-lora-rank", "512"], "--kv-lora-rank"), (["--state", "kernel=4"], "--state"),
    (["--layout", "4 full", "--q-heads", "8", "--kv-heads", "8", "--head-dim", "64", "--params", "1B",
      "--qk-rope-head-dim", "64"], "--qk-rope-head-dim"),
    (["--layout", "4 mla", "--q-heads", "8", "--head-dim", "64", "--params", "1B", "--kv-lora-rank", "64",
      "--state", "kernel=4 channels=8 heads=1 per_head=1"], "--state"),
])
def test_latent_and_state_options_need_layers_to_size(capsys, args, option):
    assert main(["--json", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"argument {option}" in err and "layout" in err, err

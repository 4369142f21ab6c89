"""Models with no KV-holding layer: pure Mamba or linear-attention layouts, a Nemotron-H pattern
without attention, a Qwen3-Next attention interval longer than the model. Each is sized as a
state-only model (the recurrent state per sequence, no per-token KV, no division by it) by the
CLI in every mode, by the answer and on the page — never a traceback."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from sizing.cli import main
from sizing.kv import KVCacheSpec, kv_capacity, max_context, max_users
from sizing.precisions import get_precision
from sizing.presets import get_preset
from support.apptest import metric_text, open_page

STATE = "kernel=4 channels=8192 heads=128 per_head=64 groups=8 group_channels=128"
MANUAL = ["--layers", "48", "--q-heads", "32", "--kv-heads", "8", "--head-dim", "128", "--params", "9B"]


def _config(preset: str, tmp_path, **changes) -> str:
    config = dict(get_preset(preset).config) | changes
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


def _cases(tmp_path):
    return {
        "48 mamba": [*MANUAL, "--layout", "48 mamba", "--state", STATE],
        "48 linear": [*MANUAL, "--layout", "48 linear", "--state", STATE],
        "nemotron-h pattern without attention": [
            "--config", _config("nemotron-nano-9b-v2", tmp_path, hybrid_override_pattern="M-" * 28)],
        "qwen3-next interval past the last layer": [
            "--config", _config("qwen3-next-80b-a3b", tmp_path, num_hidden_layers=3)],
    }


def _run(argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("name", ["48 mamba", "48 linear", "nemotron-h pattern without attention",
                                  "qwen3-next interval past the last layer"])
@pytest.mark.parametrize("mode", [[], ["--engine", "vllm"], ["--tp", "2", "--gpus", "4"]])
def test_state_only_models_are_sized_in_every_mode(name, mode, tmp_path):
    argv = _cases(tmp_path)[name]
    code, out, err = _run([*argv, *mode, "--json"])
    assert code == 0 and err == "", err
    data = json.loads(out)
    assert data["per_token_bytes"] == 0 and data["per_user_bytes"] > 0  # the state, at any context
    assert data["answer"]["fits"] and data["answer"]["gpus"] >= 1
    code, out, err = _run([*argv, *mode])
    assert code == 0 and "capacity (state only)" in out and "no layer's memory grows" in out


def test_a_state_only_budget_holds_whole_states():
    # One Mamba-2 layer's state at TP 1 (bf16): the convolution keeps (kernel − 1) × (channels +
    # groups × group channels) = 3 × (8,192 + 8 × 128) = 27,648 values, the SSM 128 heads × 64 =
    # 8,192 values; 48 layers × 35,840 values × 2 B = 3,440,640 B per sequence.
    from sizing.layout_spec import layout_shape, parse_layout, parse_state

    model = layout_shape(parse_layout("48 mamba"), q_heads=32, kv_heads=8, head_dim=128,
                         params=9_000_000_000, state=parse_state(STATE, "mamba"))
    spec = KVCacheSpec(model=model, precision=get_precision("bf16"))
    assert spec.state_bytes_per_sequence == 3_440_640
    budget = 10 * 3_440_640 + 5
    capacity = kv_capacity(spec, budget, 32_768)
    assert (capacity.blocks, capacity.tokens, capacity.max_concurrency) == (0, 0, 10.0)
    assert max_users(spec, budget, 1_000_000) == 10  # any context
    assert max_context(spec, budget, 10) is None and max_context(spec, budget, 11) == 0


def test_the_page_shows_the_state_only_answer():
    at = open_page("1_sizer.py", {"src": "Manual", "lay": "48 mamba", "layers": "48"})
    assert not at.exception and not at.error
    assert metric_text(at, "KV per token") == "0 B" and metric_text(at, "Longest context for 100 users") == "unbounded"
    assert int(metric_text(at, "Sequence states held").replace(",", "")) > 100
    assert any("No layer of this model caches per-token KV" in i.value for i in at.info)
    assert metric_text(at, "GPUs to deploy").endswith("× H100 SXM")

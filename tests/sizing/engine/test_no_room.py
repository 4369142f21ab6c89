"""When vLLM's memory profile leaves no room for one KV block, the error names the term that
takes the memory and the input that drives it — never a utilisation nobody gave."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from sizing.cli import main
from sizing.engine.capacity import EngineRequest, plan_engine
from sizing.errors import NoKVRoom
from units import GiB


def _run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def _refusal(**request) -> NoKVRoom:
    with pytest.raises(NoKVRoom) as info:
        plan_engine(EngineRequest(**request))
    return info.value


def test_the_forward_pass_of_a_huge_batch_names_max_num_batched_tokens():
    # Llama-3.1-8B's forward peak: 16,000,000 tokens × 2 B × (2 × 4,096 + 3 × 14,336) = 1,638.4 GB
    # = 1,525.88 GiB, far above the 71.30 GiB that 0.9 of an H100 asks for.
    error = _refusal(model="llama-3.1-8b", max_num_batched_tokens=16_000_000)
    assert error.field == "max_num_batched_tokens" and not error.measured
    assert "1,525.88 GiB" in error.message and "forward pass of 16,000,000 tokens" in error.message


def test_the_sampler_of_huge_max_num_seqs_names_it():
    # 10 vocab-wide fp32 tensors × 1,000,000 rows × 128,256 × 4 B = 5.13 TB = 4,777.9 GiB.
    error = _refusal(model="llama-3.1-8b", max_num_seqs=1_000_000, max_num_batched_tokens=1_000_000)
    assert error.field == "max_num_seqs" and "sampler over 1,000,000 rows" in error.message
    assert f"{10 * 1_000_000 * 128_256 * 4 / GiB:,.2f} GiB" in error.message


def test_weights_that_fill_the_gpu_name_the_utilisation_and_the_tp():
    error = _refusal(model="llama-3.1-70b", tp=1)
    assert error.field == "gpu_memory_utilization" and "the weights take" in error.message
    assert "a larger TP splits them" in error.message


def test_a_measured_term_is_the_users_figure_and_is_refused_by_its_option():
    error = _refusal(model="llama-3.1-8b", activation_bytes=100 * GiB)
    assert (error.field, error.measured) == ("activation_bytes", True)
    code, out, err = _run(["--engine", "vllm", "--model", "llama-3.1-8b", "--activation-gib", "100"])
    assert code == 2 and out == "" and err.count("\n") == 1 and "argument --activation-gib" in err


@pytest.mark.parametrize(("option", "value", "field"), [("--max-num-batched-tokens", "16000000", "max_num_batched_tokens"),
                                                         ("--max-num-seqs", "1000000", "max_num_seqs")])
def test_the_cli_reports_the_driving_input_at_the_asked_tp_and_still_answers(option, value, field):
    # The sampler needs as many rows in a step as sequences: max_num_batched_tokens ≥ max_num_seqs.
    code, out, err = _run(["--engine", "vllm", "--model", "llama-3.1-8b", "--json", option, value,
                           *(["--max-num-batched-tokens", value] if option == "--max-num-seqs" else [])])
    assert code == 0 and err == ""
    data = json.loads(out)
    assert data["engine_fits_at_tp"] is False and f"({field})" in data["engine_refused_at_tp"]
    assert "gpu_memory_utilization 0.9 asks for" in data["engine_refused_at_tp"]
    assert not data["answer"]["fits"] and field in data["answer"]["notes"][0]


def test_only_the_last_pipeline_stage_runs_the_sampler():
    from sizing.engine.memory import ActivationShape, activation_peak_bytes
    from sizing.presets import get_preset

    shape = ActivationShape.from_config(get_preset("deepseek-v2-lite").config)
    # Forward at TP 2, at the widest MLP — the dense first layer's 10,944 (wider than 6 routed
    # experts × 1,408): 8,192 tokens × 2 B × (2 × 2,048 + 3 × 10,944 / 2) = 336,068,608 B; the
    # sampler: 10 × 256 rows × 102,400 × 4 B = 1,048,576,000 B, on the last stage only.
    kwargs = dict(tp=2, max_num_batched_tokens=8192, max_num_seqs=256)
    assert activation_peak_bytes(shape, sampler=False, **kwargs) == 8192 * 2 * (2 * 2048 + 3 * 10_944 // 2)
    assert activation_peak_bytes(shape, **kwargs) == 10 * 256 * 102_400 * 4
    first = plan_engine(EngineRequest(model="deepseek-v2-lite", tp=2, last_pp_stage=False))
    last = plan_engine(EngineRequest(model="deepseek-v2-lite", tp=2))
    assert first.profile.available_bytes - last.profile.available_bytes == 10 * 256 * 102_400 * 4 - 336_068_608
    assert "last pipeline stage" in first.profile.activation.basis

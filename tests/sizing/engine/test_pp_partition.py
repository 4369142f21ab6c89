"""VLLM_PP_LAYER_PARTITION through the explainer, engine mode and both CLIs, and the one-request
check by vLLM release under pipeline parallelism (merged stages in 0.14-0.16, each worker's own
layers before and after)."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from sizing.cli import main
from sizing.engine.capacity import EngineRequest, plan_engine
from sizing.engine.explain import explain_log
from sizing.engine.pipeline import OneRequestRule, log_layer_partition, one_request_rule, partition_counts
from sizing.engine.vllm_log import parse_vllm_log
from sizing.errors import SizingError
from sizing.explain_cli import explain_main
from sizing.presets import get_preset
from support.paths import ROOT
from units import GiB

QWEN3_30B = get_preset("qwen3-30b-a3b").shape  # 48 layers, 4 KV heads of 128: 2 KiB a layer and token (bf16)
QWEN_LOG = ROOT / "tests" / "data" / "vllm_logs" / "cited" / "qwen3-coder-30b-a3b-fp8-pp2-vllm34076.log"


def _refusal(needed: str, available: str, estimated: int) -> str:
    return (f"(EngineCore_DP0 pid=7) ValueError: To serve at least one request with the models's max seq len (262144), "
            f"({needed} GiB KV cache is needed, which is larger than the available KV cache memory ({available} GiB). "
            f"Based on the available memory, the estimated maximum model length is {estimated}. Try increasing "
            "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.")


def _run(fn, argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = fn(argv)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(("release", "rule"), [((0, 13), OneRequestRule.PER_WORKER), ((0, 14), OneRequestRule.MERGED),
                                               ((0, 16), OneRequestRule.MERGED), ((0, 17), OneRequestRule.PER_WORKER),
                                               ((1, 0), OneRequestRule.PER_WORKER)])
def test_the_merged_check_is_vllm_0_14_to_0_16(release, rule):
    assert one_request_rule(release) is rule


def test_a_log_states_the_partition_in_a_pasted_command_or_in_vllms_uneven_split_line():
    assert log_layer_partition("$ VLLM_PP_LAYER_PARTITION='16, 32' vllm serve Qwen/Qwen3-Coder") == "16,32"
    line = ("INFO [utils.py:101] Hidden layers were unevenly partitioned: [14,13]. This can be manually "
            "overridden using the VLLM_PP_LAYER_PARTITION environment variable")
    assert log_layer_partition(line) == "14,13"
    assert log_layer_partition(QWEN_LOG.read_text()) is None
    assert log_layer_partition("VLLM_PP_LAYER_PARTITION=" + "1," * 10_000) == ",".join(["1"] * 64)
    with pytest.raises(SizingError):
        log_layer_partition(b"VLLM_PP_LAYER_PARTITION=16,32")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"pp_layer_partition": "16,31"}, "add up to the model's 48 layers"),
    ({"pp": 3, "pp_layer_partition": "16,32"}, "gives 2 stages for PP 3"),
    ({"pp_layer_partition": [16, 0, 32]}, "at least 1"),
    ({"pp_layer_partition": "16,,32"}, "comma-separated"),
    ({"pp_layer_partition": 48}, "comma-separated"),
])
def test_a_partition_vllm_would_refuse_is_named_by_the_explainer(kwargs, message):
    parsed = parse_vllm_log(QWEN_LOG.read_bytes())
    with pytest.raises(SizingError) as info:
        explain_log(parsed, QWEN3_30B, **kwargs)
    assert info.value.field == "pp_layer_partition" and message in info.value.message


def test_a_refusal_of_the_larger_stage_is_read_by_the_per_worker_rule():
    # vLLM 0.17, partition 16,32, the 32-layer stage refusing on its 3.18 GiB: 32 x 2 KiB x
    # 262,144 = 16.0 GiB; [3.175, 3.185] GiB hold [3,251, 3,261] blocks of 32 x 32 KiB: 52,016 to
    # 52,176 tokens (3.18 GiB itself 3,256 blocks, 52,096 tokens).
    parsed = parse_vllm_log(_refusal("16.0", "3.18", 52_096))
    explanation = explain_log(parsed, QWEN3_30B, pp_layer_partition="16,32", vllm_version="0.17.0")
    needed, estimated = explanation.checks
    assert needed.within and needed.reconstructed == 32 * 2048 * 262_144 / GiB == 16.0
    assert estimated.within and (estimated.low, estimated.high) == (3_251 * 16, 3_261 * 16)
    assert "stage 1's 32" in needed.why
    # The same figures under vLLM 0.15's rule count all 48 layers (24.0 GiB) and do not match.
    merged = explain_log(parsed, QWEN3_30B, pp_layer_partition="16,32", vllm_version="0.15.1")
    assert not any(check.within for check in merged.checks) and merged.checks[0].reconstructed == 24.0


def test_engine_mode_plans_a_partitioned_stage_and_checks_one_request_by_release():
    base = dict(model="qwen3-30b-a3b", max_model_len=65_536, pp_layer_partition="16,32",
                kv_budget_bytes_per_gpu=10 * GiB, weights_total_bytes=48 * 2**30)
    first = plan_engine(EngineRequest(**base, pp_stage=0))
    # Stage 0: 16 layers, a third of the 48 GiB of weights, no sampler; one request of 65,536
    # tokens is 16 x 2 KiB x 65,536 = 2 GiB of its 10 GiB under the per-worker rule (0.29).
    assert first.model.layers == 16 and first.profile.weights.bytes == 16 * 2**30
    assert first.request_bytes == 2 * GiB and first.fits_one_request
    assert "VLLM_PP_LAYER_PARTITION=16,32 vllm serve" in first.launch_command
    assert "--pipeline-parallel-size 2" in first.launch_command
    last = plan_engine(EngineRequest(**base, pp_stage=1))
    assert last.profile.activation.bytes > first.profile.activation.bytes  # the sampler runs on the last stage
    # Without a stage the one that holds the fewest requests: 10 GiB / 4 GiB (32 layers) per request.
    binding = plan_engine(EngineRequest(**base))
    assert binding.request.pp_stage == 1 and binding.max_concurrency == pytest.approx(2.5)
    # vLLM 0.15 counts every stage's layers: 48 x 2 KiB x 65,536 = 6 GiB, and at 2^18 tokens 24 GiB.
    merged = plan_engine(EngineRequest(**{**base, "max_model_len": 262_144}, pp_stage=0, vllm_version="0.15.1"))
    assert merged.request_bytes == 24 * GiB and not merged.fits_one_request
    assert merged.max_model_len_fit == 40_960  # 10 GiB / 1.5 MiB a block = 6,826 blocks > the preset's 40,960
    assert any("merged" in note for note in merged.notes)
    with pytest.raises(SizingError) as info:
        plan_engine(EngineRequest(**base, pp_stage=2))
    assert info.value.field == "pp_stage"


def test_the_sizer_and_explain_clis_take_the_partition_and_name_it_when_wrong():
    code, out, err = _run(main, ["--json", "--engine", "vllm", "--model", "qwen3-30b-a3b", "--context", "65536",
                                 "--kv-budget-gib-per-gpu", "10", "--pp-layer-partition", "16,32"])
    data = json.loads(out)
    assert code == 0 and err == "" and data["launch_command"].startswith("VLLM_PP_LAYER_PARTITION=16,32 ")
    assert (data["engine_pp_layer_partition"], data["engine_pp_stage"]) == ("16,32", 1)
    for argv in (["--engine", "vllm", "--pp-layer-partition", "16,31"], ["--pp-layer-partition", "16,32"],
                 ["--engine", "vllm", "--pp-layer-partition", "16;32"]):
        code, out, err = _run(main, ["--model", "qwen3-30b-a3b", *argv])
        assert code == 2 and out == "" and "argument --pp-layer-partition:" in err and len(err.splitlines()) == 1
    code, out, _ = _run(explain_main, [str(QWEN_LOG), "--model", "qwen3-30b-a3b", "--pp-layer-partition", "16,32",
                                       "--vllm-version", "0.15.1"])
    data = json.loads(out)
    assert code == 0 and data["all_within"]
    assert {"name": "pp", "value": 2, "source": "pp_layer_partition"} in data["settings"]
    code, _, err = _run(explain_main, [str(QWEN_LOG), "--model", "qwen3-30b-a3b", "--pp", "3",
                                       "--pp-layer-partition", "16,32"])
    assert code == 2 and "argument --pp-layer-partition: gives 2 stages for PP 3" in err


def test_explain_log_reads_the_partition_from_a_pasted_command(tmp_path):
    log = tmp_path / "pp.log"
    log.write_text("$ VLLM_PP_LAYER_PARTITION=16,32 vllm serve Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8 -pp 2\n"
                   + _refusal("16.0", "3.18", 52_096))
    code, out, _ = _run(explain_main, [str(log), "--model", "qwen3-30b-a3b", "--vllm-version", "0.17.0"])
    data = json.loads(out)
    assert code == 0 and data["all_within"]
    assert {"name": "pp_layer_partition", "value": "16,32", "source": "given"} in data["settings"]
    assert partition_counts("16, 32") == (16, 32)

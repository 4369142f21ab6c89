"""The recommended deployment: whole TP replicas from the engine's own figures."""

from __future__ import annotations

import math

import pytest

from sizing.engine.capacity import EngineRequest, plan_engine
from sizing.engine.deployment import recommend_deployment
from sizing.errors import SizingError
from units import GiB


def test_each_option_is_floor_concurrency_capped_by_max_num_seqs():
    request = EngineRequest(model="llama-3.1-8b", gpu="h100-sxm", max_model_len=8192, users=300)
    deployment = recommend_deployment(request)
    for option in deployment.options:
        if option.report is None:
            continue
        expected = min(math.floor(option.report.max_concurrency), 256)
        assert option.users_per_replica == expected and option.replicas == math.ceil(300 / expected)
    # TP 1: 54 per replica → 6 replicas = 6 GPUs; TP 2: 124 → 3 replicas = 6 GPUs: a tie, and the
    # smaller TP (less communication) is chosen, as the sizer's pooled plan does.
    by_tp = {o.tp: o for o in deployment.options}
    assert (by_tp[1].gpus, by_tp[2].gpus) == (6, 6) and deployment.best.tp == 1
    # TP 8 would hold 539 requests by memory, but vLLM runs at most max_num_seqs = 256 at once.
    assert by_tp[8].users_per_replica == 256
    # The report on screen is one replica's: its utilisation and --max-num-seqs are for 300 / 6 users.
    assert deployment.report.request.users == 50 and "--max-num-seqs 50" in deployment.report.launch_command


def test_refused_tp_sizes_say_why():
    deployment = recommend_deployment(EngineRequest(model="llama-3.1-70b", gpu="h200", max_model_len=32_768,
                                                    users=40))
    by_tp = {o.tp: o for o in deployment.options}
    assert by_tp[1].report is None and "no KV block" in by_tp[1].reason  # 141 GB of bf16 weights on one GPU
    qwen = recommend_deployment(EngineRequest(model="qwen2.5-7b", gpu="l4", max_model_len=4096, users=5))
    assert "28 attention heads" in {o.tp: o for o in qwen.options}[8].reason


def test_a_measured_budget_applies_only_at_its_own_tp():
    request = EngineRequest(model="llama-3.1-8b", gpu="h100-sxm", tp=2, max_model_len=8192, users=10,
                            kv_budget_bytes_per_gpu=5 * GiB)
    by_tp = {o.tp: o for o in recommend_deployment(request).options}
    assert by_tp[2].report.available_kv_bytes_per_gpu == 5 * GiB
    assert by_tp[1].report.available_kv_bytes_per_gpu == plan_engine(
        EngineRequest(model="llama-3.1-8b", gpu="h100-sxm", max_model_len=8192)).available_kv_bytes_per_gpu


@pytest.mark.parametrize("utilization", [0.0, 1.5, float("nan")])
def test_absurd_utilization_is_named(utilization):
    with pytest.raises(SizingError) as info:
        recommend_deployment(EngineRequest(model="llama-3.1-8b", gpu_memory_utilization=utilization))
    assert info.value.field == "gpu_memory_utilization"

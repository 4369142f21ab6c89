"""The sizer's engine-mode recommendation and the planner's plan agree for the same inputs.

Both are given one GPU's KV budget (vLLM's "Available KV cache memory" as engine mode
computes it) and requests of a fixed length. Engine mode counts whole KV-cache blocks per
request with vLLM's group arithmetic; the planner runs the simulator's paged allocator on the
same budget. The requests one replica holds, the replicas and the GPUs must be equal at every
TP, and the planner's cheapest option must be the recommendation.
"""

from __future__ import annotations

import pytest

from hardware.gpus import get_gpu
from planner.plan import PlanRequest, TrafficSpec, run_plan
from sizing.engine.capacity import EngineRequest
from sizing.engine.deployment import recommend_deployment
from sizing.precisions import get_precision
from sizing.presets import get_preset

BF16 = get_precision("bf16")


@pytest.mark.parametrize(("model", "gpu", "context", "users"), [
    ("llama-3.1-8b", "h100-sxm", 8192, 300),
    ("llama-3.1-70b", "h200", 32_768, 40),
    ("qwen2.5-7b", "l4", 4096, 50),
])
def test_engine_recommendation_and_planner_agree(model, gpu, context, users):
    deployment = recommend_deployment(EngineRequest(model=model, gpu=gpu, max_model_len=context, users=users))
    planned = {}
    for option in deployment.options:
        if option.report is None:
            continue
        plan = run_plan(PlanRequest(
            model=get_preset(model).shape, kv_precision=BF16, weight_precision=BF16, gpu=get_gpu(gpu),
            tp=option.tp, traffic=TrafficSpec(kind="fixed", length=context), max_context=context,
            kv_budget_bytes_per_gpu=option.report.available_kv_bytes_per_gpu)).plan
        # vLLM runs at most max_num_seqs requests at once; the planner has no such cap.
        per_replica = min(plan.paged.batch, option.report.request.max_num_seqs)
        assert per_replica == option.users_per_replica, option.tp
        replicas = -(-users // per_replica) if per_replica else None
        assert replicas == option.replicas
        if replicas is not None:
            planned[option.tp] = replicas * option.tp
    cheapest = min(planned, key=lambda tp: (planned[tp], tp))
    assert deployment.best.tp == cheapest and deployment.gpus == planned[cheapest]


def test_recommended_replica_is_what_its_launch_command_starts():
    deployment = recommend_deployment(EngineRequest(model="qwen2.5-7b", gpu="l4", max_model_len=4096, users=50))
    # On a 24 GB L4, TP 1 holds 18 requests (3 replicas = 3 GPUs); TP 2 holds 100 (1 replica = 2 GPUs).
    assert (deployment.best.tp, deployment.best.replicas, deployment.gpus) == (2, 1, 2)
    command = deployment.report.launch_command
    assert "--tensor-parallel-size 2" in command and "--max-num-seqs 50" in command
    assert deployment.report.request.tp == 2 and deployment.report.max_concurrency >= 50

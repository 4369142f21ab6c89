"""The answer's requests per replica and the planner's paged batch agree for the same inputs.

Both are given one GPU's KV budget (vLLM's "Available KV cache memory", as the answer's engine
profile computes it at each TP) and requests of a fixed length. The answer counts whole
KV-cache blocks per request with vLLM's group arithmetic; the planner runs the simulator's
paged allocator on the same budget. The requests one replica holds, the replicas and the GPUs
must be equal at every TP, and the planner's cheapest option must be the answer.
"""

from __future__ import annotations

import pytest

from hardware.gpus import get_gpu
from planner.plan import PlanRequest, TrafficSpec, run_plan
from sizing.answer import answer_for
from sizing.precisions import get_precision
from sizing.presets import get_preset
from sizing.report import SizingRequest, size_deployment

BF16 = get_precision("bf16")


def _answer(model, gpu, context, users):
    return answer_for(size_deployment(SizingRequest(model=model, gpu=gpu, context=context, users=users,
                                                    kv_dtype="bf16", weight_dtype="bf16")))


@pytest.mark.parametrize(("model", "gpu", "context", "users"), [
    ("llama-3.1-8b", "h100-sxm", 8192, 300),
    ("llama-3.1-70b", "h200", 32_768, 40),
    ("qwen2.5-7b", "l4", 4096, 50),
])
def test_answer_and_planner_agree(model, gpu, context, users):
    answer = _answer(model, gpu, context, users)
    planned = {}
    for option in answer.options:
        if option.kv_bytes_per_gpu is None:
            continue
        plan = run_plan(PlanRequest(
            model=get_preset(model).shape, kv_precision=BF16, weight_precision=BF16, gpu=get_gpu(gpu),
            tp=option.tp, traffic=TrafficSpec(kind="fixed", length=context), max_context=context,
            kv_budget_bytes_per_gpu=option.kv_bytes_per_gpu)).plan
        # vLLM runs at most max_num_seqs (256) requests at once; the planner has no such cap.
        per_replica = min(plan.paged.batch, 256)
        assert per_replica == option.requests_per_replica, option.tp
        replicas = -(-users // per_replica) if per_replica else None
        assert replicas == option.replicas
        if replicas is not None:
            planned[option.tp] = replicas * option.tp
    cheapest = min(planned, key=lambda tp: (planned[tp], tp))
    assert answer.tp == cheapest and answer.gpus == planned[cheapest]


def test_the_answer_launches_the_replica_it_counts():
    answer = _answer("qwen2.5-7b", "l4", 4096, 50)
    # On a 24 GB L4, TP 1 holds 16 requests (4 replicas = 4 GPUs); TP 2 holds 97 (1 replica = 2 GPUs).
    assert (answer.tp, answer.replicas, answer.gpus) == (2, 1, 2)
    assert "--tensor-parallel-size 2 " in answer.vllm_command and "--max-num-seqs 50 " in answer.vllm_command
    assert answer.engine.request.tp == 2 and answer.engine.max_concurrency >= 50

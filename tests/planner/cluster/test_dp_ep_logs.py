"""The cluster layout's per-GPU KV figures against published vLLM logs of expert-parallel
deployments (tests/data/cluster_logs/, sources in its README), given the available memory each
log prints. Figures are hand-derived in the comments; the logs' own numbers are read from the files.

No published data-parallel-attention log that prints both the available KV memory and the KV size
of a DP rank was found; these two runs are TP + EP, whose attention is split as plain TP."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from planner.cluster.parallel import ParallelLayout, parallel_memory
from sizing.presets import get_preset
from sizing.precisions import get_precision
from units import GiB

LOGS = Path(__file__).resolve().parents[2] / "data" / "cluster_logs"
BF16 = get_precision("bf16")  # kv_cache_dtype=auto on a bfloat16 model: the KV is BF16
FP8 = get_precision("fp8_block")  # the checkpoints' weights; no figure here depends on them
HALF_STEP = 0.005  # GiB: vLLM prints the available memory to two decimals
BLOCK = 16  # tokens a KV block holds (vLLM's default block size for FlashAttention)
CONTEXT = 32_768  # --max-model-len 32K in both runs


def _log(name: str) -> str:
    return (LOGS / name).read_text()


def _numbers(pattern: str, text: str) -> list[float]:
    return [float(m.replace(",", "")) for m in re.findall(pattern, text)]


def _by_rank(pattern: str, text: str) -> dict[int, float]:
    """``{TP rank: value}`` from the lines of each ``(Worker_TP<r>_EP<r> ...)`` worker."""
    return {int(rank): float(value) for rank, value in re.findall(r"\(Worker_TP(\d+)_EP\d+ pid=\d+\)" + pattern, text)}


def _whole_blocks(budget_bytes: int, per_token: int) -> int:
    """Tokens of the whole blocks a budget holds: vLLM's num_blocks × block size."""
    return budget_bytes // (BLOCK * per_token) * BLOCK


def test_new_logs_have_a_source():
    readme = (LOGS / "README.md").read_text()
    for name in (QWEN235_LOG, QWEN30_LOG):
        assert f"`{name}`" in readme
        assert _log(name).startswith("# Source: https://github.com/tim-roethig/ai-platform/blob/")


# ---- Qwen3-235B-A22B-Instruct-2507-FP8, TP 8 + EP on 8 × L40S, vLLM 0.10.2 ------------------------
# 94 layers, 4 KV heads of 128, BF16 KV. TP 8 > 4 KV heads, so each GPU keeps one head (every head
# on two GPUs): 94 × 2 (K, V) × 1 × 128 × 2 B = 48,128 B a token on each GPU. EP 8 = TP 8 × DP 1
# spreads the 128 routed experts whole, 16 a GPU (the log: "Local/global number of experts: 16/128").
# vLLM 0.10.2 sizes each worker from its own available memory, printing one "GPU KV cache size" a
# worker in rank order (get_kv_cache_config over the workers), then gives every worker the smallest
# block count (unify_kv_cache_configs). Each worker's gpu_worker.py:391 line prints its budget in
# bytes ("Current kv cache memory in use"), the figure its "Available KV cache memory" rounds:
#   TP0 11,465,081,548 B ÷ (16 × 48,128 B) = 14,888.8 → 14,888 blocks = 238,208 tokens (logged)
#   TP2 11,423,138,508 B ÷ 770,048 B = 14,834.3 → 237,344 tokens; 7.24x for 32,768 tokens
QWEN235_LOG = "qwen3-235b-a22b-fp8-tp8-ep-ai-platform.log"
QWEN235_PER_TOKEN = 94 * 2 * 1 * 128 * 2


def _qwen235(budget_bytes: int):
    return parallel_memory(get_preset("qwen3-235b-a22b").shape, ParallelLayout(tp=8, ep=True), kv_precision=BF16,
                           weight_precision=FP8, context=CONTEXT, kv_budget_bytes_per_gpu=budget_bytes)


def _qwen235_log() -> dict[str, object]:
    text = _log(QWEN235_LOG)
    return {
        "budget_bytes": {r: int(v) for r, v in _by_rank(r".*Current kv cache memory in use is (\d+) bytes", text).items()},
        "available_gib": _by_rank(r".*Available KV cache memory: ([\d.]+) GiB", text),
        "tokens": [int(t) for t in _numbers(r"GPU KV cache size: ([\d,]+) tokens", text)],
        "concurrency": _numbers(r"Maximum concurrency for 32,768 tokens per request: ([\d.]+)x", text),
        "experts": re.findall(r"\[EP Rank 0/(\d+)\].*Local/global number of experts: (\d+)/(\d+)", text),
    }


def test_qwen235_ep8_holds_16_whole_experts_and_one_kv_head_per_gpu():
    log = _qwen235_log()
    assert log["experts"] == [("8", "16", "128")]
    memory = _qwen235(min(log["budget_bytes"].values()))
    shape = get_preset("qwen3-235b-a22b").shape
    assert memory.layout.ep_size == 8 and shape.num_experts // memory.layout.ep_size == 16
    assert memory.stages[0].kv_bytes_per_token_per_gpu == QWEN235_PER_TOKEN == 48_128


def test_qwen235_every_worker_reproduces_its_logged_kv_size_and_concurrency():
    log = _qwen235_log()
    budgets, printed = log["budget_bytes"], log["available_gib"]
    assert sorted(budgets) == sorted(printed) == list(range(8))
    # The exact budgets are what the "Available KV cache memory" lines round (10.64, 10.65, 10.68 GiB).
    assert all(round(budgets[r] / GiB, 2) == printed[r] for r in range(8))
    assert len(log["tokens"]) == len(log["concurrency"]) == 8
    for rank in range(8):
        memory = _qwen235(budgets[rank])
        per_token = int(memory.stages[0].kv_bytes_per_token_per_gpu)
        assert _whole_blocks(budgets[rank], per_token) == log["tokens"][rank]
        # The layout's sequences per DP rank, unrounded, print as the engine's figure for the worker.
        assert round(float(memory.concurrency_per_dp_rank), 2) == log["concurrency"][rank]


def test_qwen235_the_engine_holds_the_smallest_workers_blocks():
    # TP2 and TP5 have the least memory (11,423,138,508 B); every worker gets their 14,834 blocks.
    log = _qwen235_log()
    smallest = min(log["budget_bytes"].values())
    assert smallest == 11_423_138_508
    memory = _qwen235(smallest)
    assert _whole_blocks(smallest, QWEN235_PER_TOKEN) == min(log["tokens"]) == 237_344
    assert float(memory.concurrency_per_dp_rank) == pytest.approx(smallest / (CONTEXT * QWEN235_PER_TOKEN), rel=1e-12)
    assert memory.users_per_dp_rank == 7 and min(log["concurrency"]) == 7.24


# ---- Qwen3-30B-A3B-Instruct-2507-FP8, TP 2 + EP on 2 × L40S, vLLM 0.10.2 --------------------------
# 48 layers, 4 KV heads of 128, BF16 KV; TP 2 splits the heads, two a GPU:
#   48 × 2 × 2 × 128 × 2 B = 49,152 B a token. 25.91 GiB ÷ 49,152 B = 566,012.6 tokens; the logged
#   566,016 (35,376 whole blocks of 16) takes 27,820,818,432 B = 25.9102 GiB, so the worker had a
#   little more than the printed 25.91, inside the print's rounding: [25.905, 25.915] GiB ÷ 49,152 B
#   = [565,903, 566,122] tokens. 25.91 GiB ÷ (32,768 × 49,152 B) = 17.273 sequences (logged 17.27x).
QWEN30_LOG = "qwen3-30b-a3b-fp8-tp2-ep-ai-platform.log"
QWEN30_PER_TOKEN = 48 * 2 * 2 * 128 * 2


def test_qwen30_tp2_ep_reproduces_the_logged_kv_size_and_concurrency():
    text = _log(QWEN30_LOG)
    [available] = _numbers(r"Available KV cache memory: ([\d.]+) GiB", text)
    [tokens] = _numbers(r"GPU KV cache size: ([\d,]+) tokens", text)
    [concurrency] = _numbers(r"Maximum concurrency for 32,768 tokens per request: ([\d.]+)x", text)
    memory = parallel_memory(get_preset("qwen3-30b-a3b").shape, ParallelLayout(tp=2, ep=True), kv_precision=BF16,
                             weight_precision=FP8, context=CONTEXT, kv_budget_bytes_per_gpu=available * GiB)
    assert memory.layout.ep_size == 2
    per_token = memory.stages[0].kv_bytes_per_token_per_gpu
    assert per_token == QWEN30_PER_TOKEN == 49_152
    low, high = ((available + sign * HALF_STEP) * GiB / per_token for sign in (-1, 1))
    assert available == 25.91 and tokens == 566_016 and low <= tokens <= high and tokens % BLOCK == 0
    c_low, c_high = ((available + sign * HALF_STEP) * GiB / (CONTEXT * per_token) for sign in (-1, 1))
    assert concurrency == 17.27 and c_low <= concurrency <= c_high
    assert round(float(memory.concurrency_per_dp_rank), 2) == concurrency

"""The planner joined to the sizer's presets and catalogue and the simulator's snapshot,
checked against the reference page's figures, worked by hand."""

from __future__ import annotations

import numpy as np
import pytest

from simulation.workloads import Workload
from planner.bandwidth import datasheet_estimate
from hardware.gpus import get_gpu
from planner.capacity import decode_step, kv_budget_bytes_per_gpu, plan_capacity
from planner.plan import allocator_fits, fixed_context_workload, gpu_spec, model_cost
from sizing.precisions import get_precision
from sizing.presets import preset_shape

FP8 = get_precision("fp8")
BF16 = get_precision("bf16")


def _llama70_fp8(tp: int = 8):
    return model_cost(preset_shape("llama-3.1-70b"), kv_precision=FP8, weight_precision=FP8, tp=tp)


def test_model_cost_of_llama_70b_fp8_at_tp8():
    cost = _llama70_fp8()
    assert cost.kv_bytes_per_token == 163_840  # 2 × 80 × 8 × 128 × 1 B = 160 KiB
    assert cost.kv_bytes_per_token_per_gpu == 20_480  # one KV head per GPU: 20 KiB
    assert cost.weight_bytes == 70_600_000_000  # 70.6 B published params × 1 B
    assert cost.attention_flops_per_context_token_per_gpu == 4 * 80 * 8 * 128


def test_kv_heads_replicate_beyond_tp8():
    # TP 16 > 8 KV heads: still one head per GPU, so 20 KiB per token per GPU, not 10
    assert _llama70_fp8(tp=16).kv_bytes_per_token_per_gpu == 20_480


def test_gpu_spec_from_catalogue():
    h100 = gpu_spec(get_gpu("h100-sxm"))
    assert (h100.memory_bytes, h100.bandwidth_bytes_per_s, h100.bf16_flops_per_s) == (
        80e9, 3.35e12, 989e12)


def test_reference_page_94_against_1500_through_the_simulator():
    cost, h100 = _llama70_fp8(), gpu_spec(get_gpu("h100-sxm"))
    budget = kv_budget_bytes_per_gpu(cost, h100, 0.9)
    fits = allocator_fits(fixed_context_workload(2048), budget_bytes=budget,
                          kv_bytes_per_token_per_gpu=cost.kv_bytes_per_token_per_gpu,
                          max_context=32_768, block_size=16)
    # 63.175e9 B // 20,480 B = 3,084,716 slots; // 32,768 = 94; // 2,048 = 1,506 (page: ≈ 1,500)
    assert fits.budget_tokens == 3_084_716
    assert fits.contiguous.sequences == 94
    assert fits.paged.sequences == 1506
    assert fits.contiguous.utilisation == pytest.approx(2048 / 32768)  # the page's 6 %


def test_lognormal_like_traffic_gives_paging_its_gain():
    # requests uniform 1,024–3,072 tokens (mean ≈ 2,048), admitted in order while they fit; paged
    # each holds whole 16-token blocks (≈ 7.5 slots of waste), so ≈ 3,084,716 / 2,055 ≈ 1,500 fit
    rng = np.random.default_rng(0)
    totals = rng.integers(1024, 3072, size=4000, endpoint=True)
    workload = Workload(prompt_tokens=totals // 2, output_tokens=totals - totals // 2)
    cost, h100 = _llama70_fp8(), gpu_spec(get_gpu("h100-sxm"))
    fits = allocator_fits(workload, budget_bytes=kv_budget_bytes_per_gpu(cost, h100, 0.9),
                          kv_bytes_per_token_per_gpu=20_480, max_context=32_768, block_size=16)
    blocks_slots = np.ceil(totals / 16) * 16
    assert fits.paged.sequences == np.searchsorted(np.cumsum(blocks_slots), 3_084_716, side="right")
    assert fits.paged.sequences == pytest.approx(1500, rel=0.02)
    assert fits.contiguous.sequences == 94
    plan = plan_capacity(cost, h100, datasheet_estimate(), contiguous=fits.contiguous,
                         paged=fits.paged, context=fits.mean_tokens)
    assert plan.paged.batch > 10 * plan.contiguous.batch


def test_cli_contract_formula_with_real_presets():
    # python -m sizing plan --model llama-3.1-70b --kv-dtype fp8 --weight-dtype fp8 --gpu h100-sxm
    #   --tp 8 --batch 64 --context 8192 --bandwidth-source datasheet --efficiency 1
    step = decode_step(_llama70_fp8(), gpu_spec(get_gpu("h100-sxm")), datasheet_estimate(),
                       batch=64, context=8192)
    # (8,825,000,000 + 64 × 8,192 × 20,480) / 3.35e12 = 19,562,418,240 / 3.35e12 = 5.84 ms
    assert step.memory_s == 19_562_418_240 / 3.35e12


def test_sliding_window_lowers_the_mean_bytes_per_token():
    # Gemma-2-9B: half its 42 layers keep a 4,096-token window. At 8,192 tokens the windowed
    # layers hold 4,096, so the mean per-token cost is (21 × 8,192 + 21 × 4,096) / (42 × 8,192) = 3/4
    shape = preset_shape("gemma-2-9b")
    full = model_cost(shape, kv_precision=BF16, weight_precision=BF16, tp=1)
    long = model_cost(shape, kv_precision=BF16, weight_precision=BF16, tp=1, context=8192)
    assert long.kv_bytes_per_token_per_gpu == pytest.approx(0.75 * full.kv_bytes_per_token_per_gpu)

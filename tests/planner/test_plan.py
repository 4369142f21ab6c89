"""The planner joined to the sizer's presets and catalogue and the simulator's snapshot,
checked against the reference page's figures, worked by hand; and a catalogue model's plan
against the step model's own steps, recomputed here."""

from __future__ import annotations

import numpy as np
import pytest

from simulation.workloads import Workload
from planner.bandwidth import datasheet_estimate
from hardware.gpus import GPU, get_gpu
from planner.capacity import decode_step, kv_budget_bytes_per_gpu, plan_capacity
from planner.plan import (PlanRequest, TrafficSpec, allocator_fits, answer_timing, fixed_context_workload, gpu_spec,
                          model_cost, run_plan)
from planner.serving import BenchmarkSpec, predict_benchmark, prefill_seconds
from planner.step_model import ServingSetup, step_shape, step_time
from sizing.answer import answer_for
from sizing.catalogue import get_entry
from sizing.models import ModelShape
from sizing.precisions import get_precision
from sizing.presets import preset_shape
from sizing.report import SizingRequest, size_deployment

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


# --- the step model behind a catalogue model's plan ----------------------------------------------
H100: GPU = get_gpu("h100-sxm")
LLAMA8 = get_entry("llama-3.1-8b")


def _request(**fields) -> PlanRequest:
    # Llama-3.1-8B in BF16 on one H100, every request 4,096 tokens (4,095 prompt, 1 output)
    values = dict(model=LLAMA8.shape, kv_precision=BF16, weight_precision=BF16, gpu=H100, tp=1,
                  traffic=TrafficSpec(kind="fixed", length=4096), bandwidth_source="datasheet",
                  tpot_target_s=0.015, config=LLAMA8.config_bytes)
    return PlanRequest(**{**values, **fields})


def test_a_catalogue_model_is_timed_by_the_step_model_at_its_operating_point():
    outcome = run_plan(_request())
    plan = outcome.plan
    shape = step_shape(LLAMA8.config_bytes, tp=1, gpu=H100, kv_bytes=2.0)  # the config's own bf16
    setup = ServingSetup(gpu=H100)  # vLLM, CUDA graphs

    def step(batch: int) -> float:
        return step_time(shape, setup, decode_batch=batch, context=4096).total_s

    # the 15 ms target binds before memory: the batch is the last one within it, walking up
    batch = plan.paged.batch
    assert plan.paged.binding_limit == "latency" and batch < plan.paged.memory_batch
    assert batch == max(b for b in range(1, plan.paged.memory_batch + 1) if step(b) <= 0.015)
    assert plan.paged.step.step_s == step(batch)
    assert plan.paged.tokens_per_s == batch / step(batch)
    assert plan.contiguous.step.step_s == step(plan.contiguous.batch)
    assert all(p.tpot_s == step(p.batch) for p in plan.curve)
    # TTFT: the mean prompt alone, one chunk of vLLM's 8,192-token budget
    assert plan.ttft_s == prefill_seconds(shape, setup, prompt_tokens=4095, chunk_tokens=8192)
    assert plan.timing_model == "step model"
    assert plan.timing_label == "step model: vllm, CUDA graphs, BF16 weights on H100 SXM, TP 1"
    # the serving prediction at the paged batch: equal lengths start in waves (burst), with P90s
    expected = predict_benchmark(shape, setup, BenchmarkSpec(input_len=4095, output_len=2, concurrency=batch))
    assert outcome.serving == expected and outcome.serving.arrival == "burst"
    assert outcome.serving.p90_tpot_s is not None and outcome.serving.p90_ttft_s >= outcome.serving.ttft_s


def test_a_shape_typed_by_hand_keeps_the_roofline():
    hand = ModelShape(name="custom", layers=32, q_heads=32, kv_heads=8, head_dim=128, params=8_030_000_000)
    outcome = run_plan(_request(model=hand, config=None))
    assert outcome.plan.timing_model == "roofline" and outcome.plan.timing_label.startswith("roofline: ")
    assert outcome.timing is None and outcome.serving is None and outcome.timing_note == ""
    step = outcome.plan.paged.step
    assert step.modelled_s is None and step.step_s == max(step.memory_s, step.compute_s)


def test_the_engine_settings_reach_the_step_model():
    eager = run_plan(_request(cuda_graphs=False, engine="sglang", tpot_target_s=None))
    assert eager.plan.timing_label == "step model: sglang, eager (no CUDA graphs), BF16 weights on H100 SXM, TP 1"
    shape = step_shape(LLAMA8.config_bytes, tp=1, gpu=H100, kv_bytes=2.0)
    setup = ServingSetup(gpu=H100, engine="sglang", cuda_graphs=False)
    batch = eager.plan.paged.batch
    assert eager.plan.paged.step.step_s == step_time(shape, setup, decode_batch=batch, context=4096).total_s
    assert "eager launches of" in eager.plan.paged.explanation


def test_a_format_other_than_the_configs_own_converts_every_layer():
    gpt_oss = get_entry("gpt-oss-20b")
    own = run_plan(_request(model=gpt_oss.shape, config=gpt_oss.config_bytes,
                            weight_precision=get_precision("mxfp4"), tpot_target_s=None))
    assert own.timing.shape == step_shape(gpt_oss.config_bytes, tp=1, gpu=H100, kv_bytes=2.0, name=gpt_oss.name)
    assert own.timing.shape.dense_bytes == 2.0  # gpt-oss keeps attention in bf16 (its quantization_config)
    bf16 = run_plan(_request(model=gpt_oss.shape, config=gpt_oss.config_bytes, tpot_target_s=None))
    assert bf16.timing.shape.weight_format == "bf16" and "BF16 weights" in bf16.plan.timing_label


def test_a_config_the_step_model_cannot_read_falls_back_to_the_roofline_and_says_why():
    outcome = run_plan(_request(config=b'{"model_type": "llama"}'))
    assert outcome.timing is None and outcome.plan.timing_model == "roofline"
    assert outcome.timing_note.startswith("the step model cannot read this config")


@pytest.mark.parametrize("fields, field", [
    (dict(engine="trt"), "engine"), (dict(cuda_graphs=1), "cuda_graphs"),
    (dict(chunk_tokens=0), "chunk_tokens"), (dict(chunk_tokens=(1 << 24) + 1), "chunk_tokens"),
    (dict(chunk_tokens=True), "chunk_tokens"), (dict(max_num_seqs=0), "max_num_seqs"),
    (dict(config="{}"), "config"),
])
def test_bad_engine_fields_are_named(fields, field):
    with pytest.raises(ValueError, match=f"^{field}: "):
        _request(**fields)


def test_the_answers_tpot_is_the_step_model_at_its_load_per_replica():
    report = size_deployment(SizingRequest(model="llama-3.1-8b", kv_dtype="bf16", weight_dtype="bf16",
                                           context=8192, users=100, gpu="h100-sxm", tp=1))
    answer = answer_for(report)
    timing = answer_timing(report, answer)
    shape = step_shape(LLAMA8.config_bytes, tp=answer.tp, gpu=H100, kv_bytes=2.0)
    assert timing.batch == answer.load_per_replica and timing.context == 8192
    assert timing.tpot_s == step_time(shape, ServingSetup(gpu=H100), decode_batch=answer.load_per_replica,
                                      context=8192).total_s
    assert timing.line.startswith(f"TPOT at the answer's batch: {timing.tpot_s * 1e3:.2f} ms (step model: vllm, ")
    # a shape typed by hand has no config to time
    hand = ModelShape(name="custom", layers=32, q_heads=32, kv_heads=8, head_dim=128, params=8_030_000_000)
    manual = size_deployment(SizingRequest(model=hand, context=8192, users=100, gpu="h100-sxm"))
    assert answer_timing(manual, answer_for(manual)) is None


def test_pipeline_stages_are_not_timed_and_say_so():
    # 405B in BF16 (810 GB) does not fit one 8 × H100 node: the answer adds pipeline stages
    report = size_deployment(SizingRequest(model="llama-3.1-405b", kv_dtype="bf16", weight_dtype="bf16",
                                           context=32_768, users=10, gpu="h100-sxm", tp=8))
    answer = answer_for(report)
    assert answer.pp > 1
    timing = answer_timing(report, answer)
    assert timing.tpot_s is None and "pipeline stages are not in the step model" in timing.line

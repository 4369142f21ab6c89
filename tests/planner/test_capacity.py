"""Capacity planner equations against hand calculations written out here.

The running example is the reference page's problem 4: Llama-3.1-70B (80 layers, 8 KV heads,
head dim 128, 70.6 B parameters), FP8 weights and FP8 KV, 8 × H100 SXM (80 GB, 3.35 TB/s,
989 dense bf16 TFLOP/s) at TP 8, 90 % usable.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.bandwidth import BandwidthEstimate, datasheet_estimate
from planner.capacity import (
    AllocatorFit,
    GpuSpec,
    ModelCost,
    binding_limit_at,
    decode_step,
    kv_budget_bytes_per_gpu,
    largest_batch_within_tpot,
    plan_capacity,
    prefill_seconds,
)

# --- the worked example, by hand -----------------------------------------------------------------
WEIGHTS_FP8 = 70_600_000_000  # 70.6 B params × 1 B
WEIGHTS_PER_GPU = 8_825_000_000  # ÷ 8
KV_PER_TOKEN = 2 * 80 * 8 * 128 * 1  # 163,840 B = 160 KiB FP8
KV_PER_TOKEN_PER_GPU = 2 * 80 * 1 * 128 * 1  # one KV head per GPU at TP 8: 20,480 B = 20 KiB
ATTN_FLOPS_PER_GPU = 4 * 80 * (64 // 8) * 128  # QKᵀ and PV over 8 query heads per GPU = 327,680
H100_BW = 3.35e12
H100_FLOPS = 989e12
H100_BYTES = 80e9

LLAMA70_FP8_TP8 = ModelCost(
    name="llama-70b fp8", weight_bytes=WEIGHTS_FP8, params=70.6e9, kv_bytes_per_token=KV_PER_TOKEN,
    kv_bytes_per_token_per_gpu=KV_PER_TOKEN_PER_GPU,
    attention_flops_per_context_token_per_gpu=ATTN_FLOPS_PER_GPU, tp=8,
)
H100 = GpuSpec(name="H100 SXM", memory_bytes=H100_BYTES, bandwidth_bytes_per_s=H100_BW,
               bf16_flops_per_s=H100_FLOPS)
DATASHEET = datasheet_estimate()

# A toy model with round numbers, where the hand arithmetic is obvious.
TOY = ModelCost(name="toy", weight_bytes=1e9, params=1e9, kv_bytes_per_token=1_000,
                kv_bytes_per_token_per_gpu=1_000, tp=1)
TOY_GPU = GpuSpec(name="toy gpu", memory_bytes=10e9, bandwidth_bytes_per_s=1e12,
                  bf16_flops_per_s=1e14)


def test_memory_bound_decode_step_is_exactly_bytes_over_bandwidth():
    # B = 32 sequences of L = 4,096 tokens: 8,825,000,000 + 32 × 4,096 × 20,480 = 11,509,354,560 B
    step = decode_step(LLAMA70_FP8_TP8, H100, DATASHEET, batch=32, context=4096)
    assert step.bytes_read == 11_509_354_560
    assert step.memory_s == 11_509_354_560 / 3.35e12  # ≈ 3.436 ms, exact: efficiency 1
    assert step.bound == "bandwidth"
    assert step.step_s == step.memory_s
    assert step.tokens_per_s == 32 / (11_509_354_560 / 3.35e12)  # ≈ 9,314 tokens/s per replica
    # compute: 32 × (2 × 8.825e9 + 327,680 × 4,096) = 6.1e11 FLOPs → 0.61 ms, well under
    assert step.compute_s == pytest.approx(32 * (2 * 8.825e9 + 327_680 * 4096) / 989e12)
    assert step.compute_s < step.memory_s


def test_efficiency_scales_the_bandwidth():
    half = BandwidthEstimate(source="h200-results", bandwidth_efficiency=0.5,
                             compute_efficiency=1.0, label="test")
    step = decode_step(LLAMA70_FP8_TP8, H100, half, batch=32, context=4096)
    assert step.memory_s == pytest.approx(2 * 11_509_354_560 / 3.35e12, rel=1e-12)


def test_compute_bound_step_takes_the_matmul_time():
    # 1,000 sequences of 100 tokens: memory (1e9 + 1e8) / 1e12 = 1.1 ms;
    # compute 1,000 × 2 × 1e9 / 1e14 = 20 ms → compute-bound, 50,000 tokens/s.
    step = decode_step(TOY, TOY_GPU, DATASHEET, batch=1000, context=100)
    assert step.memory_s == pytest.approx(1.1e-3)
    assert step.compute_s == pytest.approx(0.02)
    assert step.bound == "compute"
    assert step.tokens_per_s == pytest.approx(50_000)


def test_kv_budget_per_gpu_matches_the_reference_page():
    # 0.9 × 80 GB − 70.6 GB / 8 = 72 − 8.825 = 63.175 GB per GPU; × 8 = 505.4 GB ≈ the page's 506 GB
    assert kv_budget_bytes_per_gpu(LLAMA70_FP8_TP8, H100, 0.9) == pytest.approx(63.175e9)


@pytest.mark.parametrize("flops, expected", [
    # memory: (0.002 × 1e12 − 1e9) / (1,000 tokens × 1,000 B) = 1,000;
    # compute: 0.002 × 1e14 / 2e9 = 100 → compute binds
    (1e14, 100),
    # compute: 0.002 × 1e16 / 2e9 = 10,000 → memory binds at exactly 1,000 (step = 2 ms, on target)
    (1e16, 1000),
])
def test_largest_batch_within_tpot(flops, expected):
    gpu = GpuSpec(name="g", memory_bytes=10e9, bandwidth_bytes_per_s=1e12, bf16_flops_per_s=flops)
    batch = largest_batch_within_tpot(TOY, gpu, DATASHEET, context=1000, tpot_s=0.002)
    assert batch == expected


def test_no_batch_meets_a_target_shorter_than_reading_the_weights():
    # the weights alone take 1e9 / 1e12 = 1 ms
    assert largest_batch_within_tpot(TOY, TOY_GPU, DATASHEET, context=1000, tpot_s=0.0009) == 0


def test_prefill_time_from_the_matmul_rate():
    # 1,000 prompt tokens: 1,000 × 2 × 1e9 + 1e5 × 1,000² / 2 = 2.05e12 FLOPs at 1e14 → 20.5 ms
    model = ModelCost(name="toy", weight_bytes=1e9, params=1e9, kv_bytes_per_token=1_000,
                      kv_bytes_per_token_per_gpu=1_000,
                      attention_flops_per_context_token_per_gpu=1e5, tp=1)
    assert prefill_seconds(model, TOY_GPU, DATASHEET, prompt_tokens=1000) == pytest.approx(0.0205)
    # one token: the weight read (1 ms) is longer than 2e9 FLOPs (20 µs)
    assert prefill_seconds(model, TOY_GPU, DATASHEET, prompt_tokens=1) == pytest.approx(1e-3)


def _reference_fits() -> tuple[AllocatorFit, AllocatorFit]:
    # 63.175e9 // 20,480 = 3,084,716 token slots per GPU;
    # contiguous 32K each: 3,084,716 // 32,768 = 94; paged 2,048 each (whole blocks): // 2,048 = 1,506
    contiguous = AllocatorFit(allocator="contiguous-max", label="contiguous 32K",
                              sequences=3_084_716 // 32_768, utilisation=2048 / 32768)
    paged = AllocatorFit(allocator="paged", label="paged 16", sequences=3_084_716 // 2048,
                         utilisation=1.0)
    assert (contiguous.sequences, paged.sequences) == (94, 1506)
    return contiguous, paged


def test_plan_without_target_runs_each_allocator_at_its_memory_limit():
    contiguous, paged = _reference_fits()
    plan = plan_capacity(LLAMA70_FP8_TP8, H100, DATASHEET, contiguous=contiguous, paged=paged,
                         context=2048)
    assert plan.contiguous.batch == 94 and plan.paged.batch == 1506
    assert plan.contiguous.binding_limit == "memory" and plan.paged.binding_limit == "memory"
    # contiguous at 94: (8.825e9 + 94 × 2,048 × 20,480) / 3.35e12 = 3.811 ms → 24,664 tokens/s
    contiguous_s = (8.825e9 + 94 * 2048 * 20480) / 3.35e12
    assert plan.contiguous.tokens_per_s == pytest.approx(94 / contiguous_s)
    # paged at 1,506: compute 1,506 × (2 × 8.825e9 + 327,680 × 2,048) / 989e12 = 27.9 ms
    paged_s = 1506 * (2 * 8.825e9 + 327_680 * 2048) / 989e12
    assert plan.paged.step.bound == "compute"
    assert plan.paged.tokens_per_s == pytest.approx(1506 / paged_s)
    assert plan.paged_gain == pytest.approx((1506 / paged_s) / (94 / contiguous_s))


def test_tpot_target_caps_the_paged_batch_and_says_so():
    contiguous, paged = _reference_fits()
    plan = plan_capacity(LLAMA70_FP8_TP8, H100, DATASHEET, contiguous=contiguous, paged=paged,
                         context=2048, tpot_target_s=0.010)
    # memory bound of the 10 ms target: (0.01 × 3.35e12 − 8.825e9) / (2,048 × 20,480) = 588.3
    # compute bound: 0.01 × 989e12 / (2 × 8.825e9 + 327,680 × 2,048) = 539.8 → 539
    assert plan.paged.latency_batch == 539
    assert plan.paged.batch == 539
    assert plan.paged.binding_limit == "latency"
    assert "10 ms TPOT target caps the batch at 539" in plan.paged.explanation
    assert plan.contiguous.batch == 94 and plan.contiguous.binding_limit == "memory"
    # users: 539 per replica of 8 GPUs → 67.4 per GPU, one replica per node → 539 per node
    assert plan.paged.users_per_gpu == pytest.approx(539 / 8)
    assert plan.paged.users_per_node == 539
    # paged 539 / 9.985 ms = 53,981 tokens/s against 24,664: 2.19×, inside the paper's 2–4×
    paged_s = 539 * (2 * 8.825e9 + 327_680 * 2048) / 989e12
    contiguous_s = (8.825e9 + 94 * 2048 * 20480) / 3.35e12
    assert plan.paged_gain == pytest.approx((539 / paged_s) / (94 / contiguous_s))
    assert 2 <= plan.paged_gain <= 4 and "within the paper's 2–4×" in plan.paper_check()


def test_weights_that_do_not_fit_leave_no_kv_and_say_memory():
    # 70.6 B params in BF16 = 141.2 GB on one 80 GB H100 at TP 1: 72 − 141.2 < 0
    bf16 = ModelCost(name="70b bf16", weight_bytes=141.2e9, params=70.6e9,
                     kv_bytes_per_token=327_680, kv_bytes_per_token_per_gpu=327_680, tp=1)
    fit = AllocatorFit(allocator="paged", label="paged", sequences=5, utilisation=1.0)
    plan = plan_capacity(bf16, H100, DATASHEET, contiguous=fit, paged=fit, context=2048)
    assert plan.kv_budget_bytes_per_gpu == pytest.approx(72e9 - 141.2e9)
    assert plan.paged.batch == 0 and plan.paged.binding_limit == "memory"
    assert "weights alone" in plan.paged.explanation
    assert plan.paged_gain is None


def test_binding_limit_at_a_given_batch():
    # 2,000 sequences do not fit where 1,506 do
    assert binding_limit_at(LLAMA70_FP8_TP8, H100, DATASHEET, batch=2000, context=2048,
                            memory_batch=1506)[0] == "memory"
    # 32 × 4K fits and is bandwidth-bound (see the exact test above)
    assert binding_limit_at(LLAMA70_FP8_TP8, H100, DATASHEET, batch=32, context=4096,
                            memory_batch=1506)[0] == "bandwidth"
    # the same step (3.44 ms) misses a 3 ms target
    limit, words = binding_limit_at(LLAMA70_FP8_TP8, H100, DATASHEET, batch=32, context=4096,
                                    memory_batch=1506, tpot_target_s=0.003)
    assert limit == "latency" and "3 ms" in words
    # toy at 1,000 × 100 tokens is compute-bound (20 ms against 1.1 ms of reads)
    assert binding_limit_at(TOY, TOY_GPU, DATASHEET, batch=1000, context=100,
                            memory_batch=10**6)[0] == "compute"


def test_users_per_node_when_a_replica_spans_nodes():
    fit = AllocatorFit(allocator="paged", label="paged", sequences=100, utilisation=1.0)
    model = ModelCost(name="big", weight_bytes=1e9, params=1e9, kv_bytes_per_token=1,
                      kv_bytes_per_token_per_gpu=1, tp=16)
    plan = plan_capacity(model, H100, DATASHEET, contiguous=fit, paged=fit, context=10)
    # 100 sequences on 16 GPUs: 6.25 per GPU, 50 per 8-GPU node
    assert plan.paged.users_per_gpu == 6.25 and plan.paged.users_per_node == 50


def test_little_law_concurrency_and_gpus_needed():
    contiguous, paged = _reference_fits()
    plan = plan_capacity(LLAMA70_FP8_TP8, H100, DATASHEET, contiguous=contiguous, paged=paged,
                         context=2048, prompt_tokens=1024, tpot_target_s=0.010,
                         arrival_rate_per_s=100, mean_output_tokens=1024)
    tpot = 539 * (2 * 8.825e9 + 327_680 * 2048) / 989e12
    # concurrency = 100 requests/s × (TTFT + 1,024 × TPOT)
    assert plan.required_concurrency == pytest.approx(100 * (plan.ttft_s + 1024 * tpot))
    assert plan.replicas_needed == math.ceil(plan.required_concurrency / 539)
    assert plan.gpus_needed == plan.replicas_needed * 8


def test_curve_reaches_the_operating_points_and_marks_what_fits():
    contiguous, paged = _reference_fits()
    plan = plan_capacity(LLAMA70_FP8_TP8, H100, DATASHEET, contiguous=contiguous, paged=paged,
                         context=2048)
    batches = [p.batch for p in plan.curve]
    assert batches[0] == 1 and 94 in batches and 1506 in batches and batches == sorted(batches)
    by_batch = {p.batch: p for p in plan.curve}
    assert by_batch[94].fits_contiguous and not by_batch[128].fits_contiguous
    assert by_batch[1506].fits_paged and batches[-1] == 1506  # no point plotted past the memory limit


@pytest.mark.parametrize("bad", [
    dict(batch=0, context=10), dict(batch=1, context=-1), dict(batch=1.5, context=10),
])
def test_bad_decode_inputs_name_the_field(bad):
    with pytest.raises(ValueError, match="batch|context"):
        decode_step(TOY, TOY_GPU, DATASHEET, **bad)


def test_bad_model_and_gpu_fields_are_named():
    with pytest.raises(ValueError, match="tp"):
        ModelCost(name="x", weight_bytes=1, params=1, kv_bytes_per_token=1,
                  kv_bytes_per_token_per_gpu=1, tp=0)
    with pytest.raises(ValueError, match="bandwidth_bytes_per_s"):
        GpuSpec(name="x", memory_bytes=1, bandwidth_bytes_per_s=0, bf16_flops_per_s=1)
    with pytest.raises(ValueError, match="usable_fraction"):
        kv_budget_bytes_per_gpu(TOY, TOY_GPU, 1.5)
    with pytest.raises(ValueError, match="tpot_s"):
        largest_batch_within_tpot(TOY, TOY_GPU, DATASHEET, context=1, tpot_s=0)


@settings(max_examples=60, deadline=None)
@given(batch=st.integers(1, 5000), context=st.integers(0, 200_000),
       extra=st.integers(1, 1000))
def test_step_grows_with_batch_and_context_and_throughput_never_falls(batch, context, extra):
    base = decode_step(LLAMA70_FP8_TP8, H100, DATASHEET, batch=batch, context=context)
    more_batch = decode_step(LLAMA70_FP8_TP8, H100, DATASHEET, batch=batch + extra, context=context)
    longer = decode_step(LLAMA70_FP8_TP8, H100, DATASHEET, batch=batch, context=context + extra)
    assert more_batch.step_s >= base.step_s and longer.step_s >= base.step_s
    assert more_batch.tokens_per_s >= base.tokens_per_s * (1 - 1e-12)


@settings(max_examples=60, deadline=None)
@given(context=st.integers(1, 100_000), tpot_ms=st.floats(1.0, 500.0))
def test_largest_batch_meets_the_target_and_one_more_misses(context, tpot_ms):
    tpot = tpot_ms / 1e3
    batch = largest_batch_within_tpot(LLAMA70_FP8_TP8, H100, DATASHEET, context=context,
                                      tpot_s=tpot)
    if batch >= 1:
        assert decode_step(LLAMA70_FP8_TP8, H100, DATASHEET, batch=batch,
                           context=context).step_s <= tpot
    assert decode_step(LLAMA70_FP8_TP8, H100, DATASHEET, batch=batch + 1,
                       context=context).step_s > tpot


@settings(max_examples=60, deadline=None)
@given(contiguous_fit=st.integers(0, 3000), extra=st.integers(0, 3000),
       context=st.integers(2, 65_536), tpot_ms=st.one_of(st.none(), st.floats(1.0, 200.0)))
def test_operating_points_respect_memory_and_target_and_paging_never_loses(
        contiguous_fit, extra, context, tpot_ms):
    contiguous = AllocatorFit(allocator="contiguous-max", label="c", sequences=contiguous_fit,
                              utilisation=0.5)
    paged = AllocatorFit(allocator="paged", label="p", sequences=contiguous_fit + extra,
                         utilisation=0.99)
    plan = plan_capacity(LLAMA70_FP8_TP8, H100, DATASHEET, contiguous=contiguous, paged=paged,
                         context=context, tpot_target_s=None if tpot_ms is None else tpot_ms / 1e3)
    for allocator in (plan.contiguous, plan.paged):
        assert allocator.batch <= allocator.memory_batch
        if allocator.step is not None and plan.tpot_target_s is not None:
            assert allocator.step.step_s <= plan.tpot_target_s
        assert allocator.binding_limit in ("memory", "latency")
    # more sequences held never lowers throughput: B / (a + bB) grows with B
    assert plan.paged.tokens_per_s >= plan.contiguous.tokens_per_s * (1 - 1e-12)


# --- a step model in place of the roofline -------------------------------------------------------
class HandTiming:
    """A :class:`planner.timing.StepTiming` written out by hand: 4 ms plus 1 ns per cached token
    read (``batch × context``), and 1 µs per prompt token."""

    label = "hand step: 4 ms + 1 ns per cached token"

    def step_s(self, batch: int, context: float) -> float:
        return 0.004 + batch * context * 1e-9

    def prefill_s(self, prompt_tokens: float) -> float:
        return prompt_tokens * 1e-6

    def describe(self, batch: int, context: float) -> str:
        return f"{self.step_s(batch, context) * 1e3:.3f} ms by the hand formula."


def test_a_step_timing_sets_the_tpot_cap_the_steps_and_the_curve():
    contiguous = AllocatorFit(allocator="contiguous-max", label="c", sequences=100, utilisation=0.5)
    paged = AllocatorFit(allocator="paged", label="p", sequences=10_000, utilisation=0.99)
    plan = plan_capacity(TOY, TOY_GPU, DATASHEET, contiguous=contiguous, paged=paged, context=1000,
                         prompt_tokens=500, tpot_target_s=0.0100005, timing=HandTiming())
    # the cap: (0.0100005 − 0.004) ÷ (1,000 tokens × 1e-9) = 6,000.5 → 6,000 sequences, under the 10,000 that fit
    assert plan.paged.latency_batch == 6000 and plan.paged.batch == 6000
    assert plan.paged.binding_limit == "latency"
    assert plan.paged.step.step_s == 0.004 + 6000 * 1000 * 1e-9  # 10 ms
    assert plan.paged.tokens_per_s == 6000 / plan.paged.step.step_s
    assert "caps the batch at 6000" in plan.paged.explanation and "by the hand formula" in plan.paged.explanation
    # contiguous: memory's 100 sequences, 4 + 0.1 ms
    assert plan.contiguous.batch == 100 and plan.contiguous.step.step_s == 0.004 + 100 * 1000 * 1e-9
    # TTFT: 500 prompt tokens × 1 µs
    assert plan.ttft_s == 500e-6
    assert plan.timing_model == "step model" and plan.timing_label == HandTiming.label
    # the curve: 1, 2, 4, … up to 8,192 (the plotted top) and the contiguous operating point, each timed by hand
    assert [p.batch for p in plan.curve] == sorted({2**k for k in range(14)} | {100})
    for point in plan.curve:
        assert point.tpot_s == 0.004 + point.batch * 1000 * 1e-9
        assert point.tokens_per_s == point.batch / point.tpot_s and point.timing_model == "step model"
    # the bytes and FLOPs stay the roofline's: (1e9 + 6,000 × 1,000 × 1,000 B) ÷ 1e12 B/s = 7 ms
    assert plan.paged.step.memory_s == pytest.approx(7e-3)


def test_a_step_timing_that_misses_the_target_at_one_sequence_says_its_step():
    fit = AllocatorFit(allocator="paged", label="p", sequences=50, utilisation=1.0)
    plan = plan_capacity(TOY, TOY_GPU, DATASHEET, contiguous=fit, paged=fit, context=1000,
                         tpot_target_s=0.003, timing=HandTiming())
    # batch 1: 4 ms + 1 µs > 3 ms
    assert plan.paged.batch == 0 and plan.paged.binding_limit == "latency"
    assert "its step alone takes 4.00 ms by the step model" in plan.paged.explanation


def test_the_roofline_says_so_when_it_times_the_plan():
    fit = AllocatorFit(allocator="paged", label="p", sequences=50, utilisation=1.0)
    plan = plan_capacity(TOY, TOY_GPU, DATASHEET, contiguous=fit, paged=fit, context=1000)
    assert plan.timing_model == "roofline" and plan.timing_label == f"roofline: {DATASHEET.label}"
    assert all(p.timing_model == "roofline" for p in plan.curve)

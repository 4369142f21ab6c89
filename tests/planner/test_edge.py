"""Edge view: Jetson AGX Orin 64 GB, shared memory, camera history against a control step."""

from __future__ import annotations

import pytest

from planner.bandwidth import datasheet_estimate
from planner.edge import EdgeWorkload, plan_edge
from hardware.gpus import get_gpu
from planner.capacity import GpuSpec, ModelCost
from planner.plan import gpu_spec, model_cost
from sizing.precisions import get_precision
from sizing.presets import preset_shape

GB = 10**9
# Llama-3.1-8B, BF16: 2 × 32 layers × 8 KV heads × 128 × 2 B = 131,072 B = 128 KiB per token
# (the reference page's "8B shape in BF16 (128 KiB per token)").
KV_8B_BF16 = 131_072
ORIN = GpuSpec(name="Orin", memory_bytes=64e9, bandwidth_bytes_per_s=204.8e9,
               bf16_flops_per_s=42.5e12)


def _robot(**overrides) -> EdgeWorkload:
    values = dict(os_bytes=8 * GB, perception_bytes=8 * GB, tokens_per_frame=256,
                  frames_per_s=2, instruction_tokens=512, control_step_s=0.2)
    values.update(overrides)
    return EdgeWorkload(**values)


def test_catalogue_orin_and_8b_preset_match_the_hand_figures():
    cost = model_cost(preset_shape("llama-3.1-8b"), kv_precision=get_precision("bf16"),
                      weight_precision=get_precision("bf16"), tp=1)
    assert cost.kv_bytes_per_token_per_gpu == KV_8B_BF16
    orin = gpu_spec(get_gpu("jetson-agx-orin-64gb"))
    assert (orin.memory_bytes, orin.bandwidth_bytes_per_s) == (64e9, 204.8e9)


def test_history_that_fits_and_step_against_the_control_budget():
    # 8B BF16 weights taken as 16 GB: KV budget = 64 − 8 − 8 − 16 = 32 GB
    model = ModelCost(name="8b", weight_bytes=16e9, params=8e9, kv_bytes_per_token=KV_8B_BF16,
                      kv_bytes_per_token_per_gpu=KV_8B_BF16, tp=1)
    plan = plan_edge(model, ORIN, datasheet_estimate(), _robot())
    # 32e9 // 131,072 = 244,140 tokens; minus 512 of instruction = 243,628 tokens of camera,
    # at 256 × 2 = 512 tokens/s → 475.8 s of history
    assert plan.kv_tokens == 244_140
    assert plan.history_s == pytest.approx(243_628 / 512)
    # a step at 244,140 tokens reads 16e9 + 244,140 × 131,072 = 48.0e9 B → 234 ms at 204.8 GB/s,
    # over the 200 ms budget: the control step binds
    assert plan.step.memory_s == pytest.approx((16e9 + 244_140 * 131_072) / 204.8e9)
    assert not plan.meets_control_step
    assert plan.binding_limit == "control-step"
    # longest context within 200 ms: (0.2 × 204.8e9 − 16e9) / 131,072 = 190,430 tokens
    # → (190,430 − 512) / 512 = 370.9 s
    assert plan.control_history_s == pytest.approx((0.2 * 204.8e9 - 16e9) / 131_072 / 512 - 1,
                                                   rel=1e-9)
    assert plan.usable_history_s == pytest.approx(plan.control_history_s)


def test_memory_binds_when_the_control_budget_is_generous():
    model = ModelCost(name="8b", weight_bytes=16e9, params=8e9, kv_bytes_per_token=KV_8B_BF16,
                      kv_bytes_per_token_per_gpu=KV_8B_BF16, tp=1)
    plan = plan_edge(model, ORIN, datasheet_estimate(), _robot(control_step_s=1.0))
    assert plan.binding_limit == "memory" and plan.meets_control_step
    assert "475.8 s of history fit" in plan.explanation


def test_shares_that_fill_the_memory_leave_no_history():
    model = ModelCost(name="8b", weight_bytes=16e9, params=8e9, kv_bytes_per_token=KV_8B_BF16,
                      kv_bytes_per_token_per_gpu=KV_8B_BF16, tp=1)
    plan = plan_edge(model, ORIN, datasheet_estimate(), _robot(perception_bytes=45 * GB))
    assert plan.kv_budget_bytes == pytest.approx(64e9 - 8e9 - 45e9 - 16e9)
    assert plan.history_s == 0 and plan.step is None and plan.binding_limit == "memory"


@pytest.mark.parametrize("field", ["tokens_per_frame", "frames_per_s", "control_step_s"])
def test_zero_rates_are_rejected_by_name(field):
    with pytest.raises(ValueError, match=field):
        _robot(**{field: 0})


def test_edge_needs_a_single_gpu():
    model = ModelCost(name="8b", weight_bytes=16e9, params=8e9, kv_bytes_per_token=1,
                      kv_bytes_per_token_per_gpu=1, tp=2)
    with pytest.raises(ValueError, match="tp"):
        plan_edge(model, ORIN, datasheet_estimate(), _robot())


def test_step_against_history_grows_linearly_with_history():
    from planner.edge import step_against_history

    model = ModelCost(name="8b", weight_bytes=16e9, params=8e9, kv_bytes_per_token=KV_8B_BF16,
                      kv_bytes_per_token_per_gpu=KV_8B_BF16, tp=1)
    curve = step_against_history(model, ORIN, datasheet_estimate(), _robot(), max_history_s=100,
                                 points=4)
    assert [p.history_s for p in curve] == [0, 25, 50, 75, 100]
    # 25 s at 512 tokens/s = 12,800 tokens: each adds 12,800 × 131,072 B ÷ 204.8e9 B/s = 8.19 ms
    steps = [p.step_s for p in curve]
    assert steps[0] == pytest.approx((16e9 + 512 * 131_072) / 204.8e9)
    assert steps[1] - steps[0] == pytest.approx(12_800 * 131_072 / 204.8e9)
    assert all(p.fits_memory for p in curve)  # 100 s ≪ the 475.8 s that fit

"""The layout sweep: each point against the hand formulas, the front against a brute-force
dominance check written here, the binding limits, and the time a full sweep takes.

The toy model and its figures (A = 2 ms, B, C, T_s, the 2,064,384-byte transfer) are
tests/support/cluster_toy.py's; the load is 1,000 + 100 tokens with TPOT ≤ 5 ms and a mean TTFT ≤ 60 ms.
"""

from __future__ import annotations

import time
from functools import partial

import pytest

from hardware.gpus import get_gpu
from inputs.errors import InputError
from planner.bandwidth import datasheet_estimate
from planner.cluster.parallel import ParallelLayout, routed_expert_params
from planner.cluster.pareto import layouts, sweep
from planner.cluster.replica import ClusterSpec, Load
from sizing.catalogue import get_entry
from sizing.precisions import get_precision

from support.cluster_toy import A, B, C, LOAD, T_S, TOY, TRANSFER
from support.cluster_toy import toy_spec

# The toy's figures are worked on the reference formula's budget (0.9 × 10 GB − 2 GB = 7 GB);
# the default budget, vLLM's memory profile, is checked in test_budget.py.
_spec = partial(toy_spec, budget="formula")

ONE = ParallelLayout()


def _points(result, mode, layout=ONE):
    return {p.batch: p for p in result.points if p.mode == mode and p.layout == layout}


def test_one_layout_points_are_the_hand_formulas():
    result = sweep(_spec(), LOAD, max_tp=1, max_pp=1)
    aggregated, split = _points(result, "aggregated"), _points(result, "disaggregated")
    # Batches: powers of two up to the cap of 249 (⌊5 ms ÷ C⌋), and the cap itself.
    assert sorted(aggregated) == sorted(split) == [1, 2, 4, 8, 16, 32, 64, 128, 249]

    b = 64
    step = max(A + B * b, C * b)
    r = b / (100 * step + b * T_S)  # requests/s one aggregated replica carries at batch b
    u = r * T_S
    point = aggregated[b]
    assert point.tpot_s == pytest.approx(step / (1 - u), rel=1e-9)
    assert point.ttft_s == pytest.approx(T_S + u * T_S / (2 * (1 - u)), rel=1e-9)
    assert point.tokens_per_s_per_gpu == pytest.approx(r * 100, rel=1e-9)

    # Disaggregated: the TP-1 prefill runs at the utilisation the TTFT target allows,
    # x = T_s ÷ ρ_max prefill GPUs per request/s, and its TTFT is the target itself.
    slack = 0.06 - T_S - TRANSFER
    rho_max = 2 * slack / (T_S + 2 * slack)
    r = b / (100 * step)
    point = split[b]
    assert point.prefill_layout == ONE and point.prefill_limit == "ttft_target"
    assert point.tpot_s == pytest.approx(step, rel=1e-12)
    assert point.ttft_s == pytest.approx(0.06, rel=1e-9)
    assert point.tokens_per_s_per_gpu == pytest.approx(r * 100 / (1 + r * T_S / rho_max), rel=1e-9)


def test_binding_limits_are_named():
    result = sweep(_spec(), LOAD, max_tp=1, max_pp=1)
    aggregated, split = _points(result, "aggregated"), _points(result, "disaggregated")
    # The cap of 249 comes from the TPOT target, not the 3,107 sequences the KV holds.
    assert split[249].binding_limit == "tpot_target" and split[249].meets_targets
    # Below it the step: A + B·b ≥ C·b until b = 2 ms ÷ (C − B) = 112.5.
    assert split[64].binding_limit == "bandwidth" and split[128].binding_limit == "compute"
    # Aggregated at b = 128 prefills for u = 0.909 of every second: the queue's mean wait is
    # u·T ÷ 2(1 − u) ≈ 100 ms and TTFT misses its 60 ms target.
    assert aggregated[128].binding_limit == "ttft_target" and not aggregated[128].meets_targets


def _dominated(p, others, latency):
    return any(q.meets_targets and getattr(q, latency) <= getattr(p, latency)
               and q.tokens_per_s_per_gpu >= p.tokens_per_s_per_gpu
               and (getattr(q, latency) < getattr(p, latency) or q.tokens_per_s_per_gpu > p.tokens_per_s_per_gpu)
               for q in others)


@pytest.mark.parametrize("latency,flag", [("tpot_s", "on_front"), ("ttft_s", "on_ttft_front")])
def test_fronts_are_the_undominated_points_that_meet_the_targets(latency, flag):
    result = sweep(_spec(), LOAD, max_tp=2, max_pp=2)
    assert {p.layout for p in result.points} == {ParallelLayout(tp=t, pp=s) for t in (1, 2) for s in (1, 2)}
    expected = {id(p) for p in result.points if p.meets_targets and not _dominated(p, result.points, latency)}
    assert {id(p) for p in result.points if getattr(p, flag)} == expected
    assert expected and not any(getattr(p, flag) and not p.meets_targets for p in result.points)


def test_layouts_swept_for_a_dense_model_and_a_mixture_of_experts():
    # Dense, 4 query heads: TP 1, 2, 4 × PP 1, 2 (the toy has 2 layers); no DP, no EP.
    assert layouts(TOY) == tuple(ParallelLayout(tp=t, pp=s) for s in (1, 2) for t in (1, 2, 4))
    # DeepSeek-V3 (128 query heads, 256 experts): TP × DP within a node of 8, EP beside each.
    found = layouts(get_entry("deepseek-v3").shape)
    assert ParallelLayout(tp=1, dp=8, ep=True) in found and ParallelLayout(tp=8, pp=4, ep=True) in found
    assert all(p.tp * p.dp <= 8 and p.pp <= 4 for p in found) and len(found) == 4 * (4 + 3 + 2 + 1) * 2 - 4


def test_a_full_sweep_of_a_mixture_of_experts_takes_under_two_seconds():
    entry = get_entry("deepseek-v3")
    spec = ClusterSpec(model=entry.shape, kv_precision=get_precision("fp8"),
                       weight_precision=get_precision("fp8_block"), gpu=get_gpu("h200"),
                       estimate=datasheet_estimate(), routed_params=routed_expert_params(entry.config))
    load = Load(rate_per_s=10, prompt_tokens=8192, output_tokens=1024, tpot_target_s=0.05, ttft_target_s=2)
    start = time.perf_counter()
    result = sweep(spec, load)
    elapsed = time.perf_counter() - start
    assert elapsed < 2, f"{elapsed:.2f} s"
    assert len(result.points) > 500 and result.front
    # TP 1 × DP 1 cannot hold DeepSeek-V3's weights on one H200: it is left out with the reason.
    assert any(layout == ParallelLayout() and "no KV room" in why for layout, why in result.skipped)


def test_unknown_mode_is_refused():
    with pytest.raises(InputError) as info:
        sweep(_spec(), LOAD, modes=("mixed",))
    assert info.value.field == "mode"

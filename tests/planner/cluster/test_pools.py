"""Disaggregated and aggregated pool sizes on a toy model, against hand calculations written here
(the toy and its per-GPU figures: tests/support/cluster_toy.py)."""

from __future__ import annotations

import math
from functools import partial

import pytest

from inputs.errors import InputError
from planner.cluster.parallel import ParallelLayout
from planner.cluster.pools import compare, plan_aggregated, plan_disaggregated
from planner.cluster.replica import Load, max_utilisation, md1_wait_s, replica
from support.cluster_toy import A, B, C, CONTEXT, KV_PER_TOKEN, LOAD, T_S, TRANSFER
from support.cluster_toy import toy_spec

# The toy's figures are worked on the reference formula's budget (0.9 × 10 GB − 2 GB = 7 GB);
# the default budget, vLLM's memory profile, is checked in test_budget.py.
_spec = partial(toy_spec, budget="formula")

ONE = ParallelLayout()


def test_replica_figures_are_the_hand_roofline():
    rep = replica(_spec(), ONE, context=CONTEXT, prompt_tokens=1000)
    assert rep.fixed_s == pytest.approx(A, rel=1e-12)
    assert rep.per_sequence_memory_s == pytest.approx(B, rel=1e-9)
    assert rep.per_sequence_compute_s == pytest.approx(C, rel=1e-12)
    assert rep.stage_prefill_s == pytest.approx(T_S, rel=1e-12)
    assert rep.prefill_bound == "compute"
    assert rep.users_per_dp_rank == math.floor(7e9 / (CONTEXT * KV_PER_TOKEN)) == 3107


def test_pipeline_stages_floor_the_batch_at_one_micro_batch_each():
    # With PP 2 one sequence still takes two stage slots: TPOT(1) = TPOT(2).
    rep = replica(_spec(), ParallelLayout(pp=2), context=CONTEXT, prompt_tokens=1000)
    assert rep.tpot_s(1) == rep.tpot_s(2) < rep.tpot_s(3)


def test_md1_wait_and_its_inverse():
    # Pollaczek–Khinchine, fixed service T: W = ρT ÷ 2(1 − ρ); at ρ = ½, W = T/2.
    assert md1_wait_s(0.5, 1.0) == 0.5
    rho = max_utilisation(0.04, 0.02)  # 2 × 40 ÷ (20 + 80) = 0.8
    assert rho == pytest.approx(0.8)
    assert md1_wait_s(rho, 0.02) == pytest.approx(0.04)
    assert max_utilisation(-0.001, 0.02) == 0.0


def test_disaggregated_prefill_from_throughput_and_the_ttft_target():
    plan = plan_disaggregated(_spec(), LOAD, prefill=ONE, decode=ONE)
    prefill, decode = plan.pools
    # Throughput alone: ⌈2,000 × 20.01 ms⌉ = ⌈40.02⌉ = 41 replicas. The TTFT target leaves
    # s = 60 − 20.01 − 0.041 ms for the queue, so ρ ≤ 2s ÷ (T + 2s) and 2,000 × T ÷ ρ replicas.
    slack = 0.06 - T_S - TRANSFER
    rho_max = 2 * slack / (T_S + 2 * slack)
    assert math.ceil(2000 * T_S) == 41
    assert prefill.replicas == math.ceil(2000 * T_S / rho_max) == 51
    assert prefill.binding_limit == "ttft_target"
    rho = 2000 * T_S / 51
    assert plan.ttft_s == pytest.approx(T_S + TRANSFER + rho * T_S / (2 * (1 - rho)), rel=1e-9)
    assert plan.ttft_s <= 0.06 and plan.ttft_includes_queueing
    # Decode: r = 2,000 ÷ N per replica, k = 100 r, n = kA ÷ (1 − kB) while kC ≤ 1. Four replicas
    # need k = 50,000 > 1 ÷ C = 49,944 tokens/s: the matmuls saturate; five hold n = 87.9 ≤ 249.
    assert 50_000 * C > 1 and 40_000 * C < 1
    n = 40_000 * A / (1 - 40_000 * B)
    assert decode.replicas == 5 and decode.binding_limit == "compute"
    assert decode.sequences_per_dp_rank == pytest.approx(n, rel=1e-9)
    assert plan.tpot_s == pytest.approx(A + B * n, rel=1e-9)
    # The TPOT target caps a batch at min(3,107 in KV, ⌊5 ms ÷ C⌋ = 249 by compute).
    assert decode.batch_cap_per_dp_rank == math.floor(0.005 / C) == 249
    assert plan.gpus == 56 and plan.feasible


def test_aggregated_replicas_for_the_same_load_by_a_search_written_here():
    def meets(replicas: int) -> bool:
        r = 2000 / replicas
        u = r * T_S  # share of every second spent prefilling
        if u >= 1:
            return False
        k = r * 100 / (1 - u)
        if k * B >= 1 or k * C > 1:
            return False
        n = k * A / (1 - k * B)
        tpot = (A + B * n) / (1 - u)
        ttft = T_S + u * T_S / (2 * (1 - u))
        return n <= 249 and tpot <= 0.005 and ttft <= 0.06

    expected = next(n for n in range(1, 10_000) if meets(n))
    plan = plan_aggregated(_spec(), LOAD, layout=ONE)
    assert expected == 68
    assert plan.pools[0].replicas == expected and plan.gpus == 68
    assert plan.binding_limit == "tpot_target"  # 67 replicas would stretch TPOT past 5 ms
    assert not meets(67)


def test_side_by_side_names_the_gpu_ratio():
    both = compare(_spec(), LOAD, prefill=ONE, decode=ONE)
    assert (both.disaggregated.gpus, both.aggregated.gpus) == (56, 68)
    ratio = next(t for t in both.terms if t.name.startswith("GPUs"))
    assert ratio.value == pytest.approx(56 / 68) and "56 ÷ 68" in ratio.formula


def test_decode_from_kv_capacity():
    # A 3 GB GPU keeps 0.9 × 3 − 2 = 0.7 GB of KV: ⌊0.7e9 ÷ (110,000 × 2,048 B)⌋ = 3 sequences.
    # 1 request/s of 100,000 + 10,000 tokens: k = 10,000 ÷ N, kB = 2.2528 ÷ N (B = 225.28 µs),
    # n = 20 ÷ (N − 2.2528): N = 8 holds 3.48 > 3, N = 9 holds 2.96.
    load = Load(rate_per_s=1, prompt_tokens=100_000, output_tokens=10_000)
    plan = plan_disaggregated(_spec(3), load, prefill=ONE, decode=ONE)
    decode = plan.pools[1]
    assert decode.batch_cap_per_dp_rank == math.floor(0.7e9 / (110_000 * KV_PER_TOKEN)) == 3
    assert decode.replicas == 9 and decode.binding_limit == "memory"
    assert decode.sequences_per_dp_rank == pytest.approx(20 / (9 - 2.2528), rel=1e-6)
    assert not plan.ttft_includes_queueing  # no TTFT target: queueing-free


def test_host_staging_is_a_copy_of_the_decode_kv_cache():
    plan = plan_disaggregated(_spec(kv_buffer_device="cpu"), LOAD, prefill=ONE, decode=ONE)
    assert plan.staging.gpu_bytes == 0
    assert plan.staging.host_bytes == 7_000_000_000  # 0.9 × 10 GB − 2 GB of weights
    cuda = plan_disaggregated(_spec(), LOAD, prefill=ONE, decode=ONE)
    assert (cuda.staging.gpu_bytes, cuda.staging.host_bytes) == (0, 0)


def test_a_ttft_target_below_prefill_and_transfer_is_met_by_no_count():
    load = Load(rate_per_s=10, prompt_tokens=1000, output_tokens=100, ttft_target_s=0.015)  # T_s is 20 ms
    plan = plan_disaggregated(_spec(), load, prefill=ONE, decode=ONE)
    assert plan.pools[0].replicas is None and not plan.feasible
    assert plan.binding_limit == "ttft_target" and "TTFT target" in plan.explanation
    joint = plan_aggregated(_spec(), load, layout=ONE)
    assert joint.pools[0].replicas is None and joint.binding_limit == "ttft_target"


def test_every_figure_carries_its_formula():
    plan = plan_disaggregated(_spec(), LOAD, prefill=ONE, decode=ONE)
    terms = [*plan.terms, *(t for p in plan.pools for t in p.terms)]
    assert len(terms) > 10
    for term in terms:
        assert term.formula and f"{term.formula} = " in term.text


def test_a_layout_the_model_refuses_names_its_role():
    with pytest.raises(InputError) as info:
        plan_disaggregated(_spec(), LOAD, prefill=ONE, decode=ParallelLayout(tp=3))
    assert info.value.field == "decode_tp" and "does not divide the 4 query heads" in info.value.message
    with pytest.raises(InputError) as info:
        plan_aggregated(_spec(), LOAD, layout=ParallelLayout(tp=2, ep=True))
    assert info.value.field == "aggregated_ep" and "routed experts" in info.value.message

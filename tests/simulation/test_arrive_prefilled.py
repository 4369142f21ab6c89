"""Prefilled arrivals (a disaggregated decode pool) in the over-time engine: small runs worked by
hand, the step cost of a prefilled run, and the CLI's options."""

import json
import math

import numpy as np
import pytest

import simulation.engine as engine
from inputs.errors import InputError
from simulation.cli import main
from simulation.memory import KvBudget
from simulation.step_cost import StepCost
from simulation.timeline import TimelineConfig, run_timeline
from simulation.workloads import Workload

# One second a step whatever it computes (10⁶ tokens/s: a step of ≤ 13 tokens stays at 1 s).
ONE_SECOND = StepCost.constant(decode_step_s=1.0, prefill_tokens_per_s=1e6)
# Three requests of known lengths: (prompt, output, arrival s).
PROMPT, OUTPUT, ARRIVAL = [5, 8, 3], [3, 2, 4], [0.0, 0.0, 1.5]
BLOCK = 4


def _three(**config):
    workload = Workload(prompt_tokens=np.array(PROMPT), output_tokens=np.array(OUTPUT), arrival_s=np.array(ARRIVAL))
    # 1,000 slots = 250 blocks of 4 (no remainder): the budget never binds.
    config = TimelineConfig(budget=KvBudget(tokens=1000), max_context=64, block_size=BLOCK, step_cost=ONE_SECOND,
                            **config)
    return run_timeline(workload, config)


def _blocks_at_samples(result):
    """{time: blocks in use} from the series (a paged budget with no remainder: in use = budget − free)."""
    s = result.series
    return {float(t): int(1000 - free) // BLOCK for t, free in zip(s.time_s, s.free)}


def test_three_prefilled_requests_by_hand(monkeypatch):
    # Every jump one step, so the series samples every step's end (after its completions).
    monkeypatch.setattr(engine, "JUMP_LIMIT", 1)
    result = _three(arrive_prefilled=True, transfer_delay_s=0.5)
    # The KV arrives 0.5 s late: r0 and r1 at 0.5 s, r2 at 2.0 s.
    # Step [0.5, 1.5): r0 and r1 admitted, each computes its last prompt token (its first output):
    #   r0 5 + 1 = 6 slots → ⌈6/4⌉ = 2 blocks, r1 8 + 1 = 9 → 3 blocks: 5 blocks.
    # Step [1.5, 2.5): r0 → 7 (2 blocks), r1 → 10 = its final 8 + 2: done, 3 blocks freed → 2.
    # Step [2.5, 3.5): r2 (arrived 2.0) admitted, 3 + 1 = 4 slots (1 block); r0 → 8, done → 1.
    # Steps to 4.5, 5.5, 6.5: r2 → 5, 6, 7 slots (2 blocks); 7 = 3 + 4 is its final: 0 at 6.5.
    assert _blocks_at_samples(result) == {0.0: 0, 0.5: 0, 1.5: 5, 2.5: 2, 3.5: 1, 4.5: 2, 5.5: 2, 6.5: 0}
    assert result.completed == 3 and result.duration_s == 6.5 and result.steps == 6
    # Held after each step, before its completions: 5, 5, 3, 2, 2, 2 blocks × 4 slots.
    assert result.peak_allocated_tokens == 5 * BLOCK
    assert result.mean_allocated_tokens == pytest.approx((20 + 20 + 12 + 8 + 8 + 8) / 6.5)
    # Waits and TTFTs count from the KV's arrival: r2 waits for the step in flight (2.0 → 2.5).
    np.testing.assert_allclose(result.wait_s, [0.0, 0.0, 0.5])
    np.testing.assert_allclose(result.ttft_s, [1.0, 1.0, 1.5])
    np.testing.assert_allclose(result.tpot_s, [1.0, 1.0, 1.0])
    assert result.preemptions == 0 and result.recomputed_tokens == 0


def test_the_same_requests_prefilled_on_the_pool_itself_by_hand():
    result = _three()
    # Step [0, 1): r0 and r1 prefill whole (5 + 8 tokens), then hold 6 and 9 slots: 5 blocks.
    # [1, 2): r1 done (2 blocks left); [2, 3): r2 (arrived 1.5) prefills 3, r0 done; r2 to 6.0.
    assert result.duration_s == 6.0 and result.peak_allocated_tokens == 5 * BLOCK
    np.testing.assert_allclose(result.ttft_s, [1.0, 1.0, 1.5])
    # Every prompt token is computed, the last with the first output token: Σ (P + O − 1) = 7 + 9 + 6.
    assert result.computed_tokens == 22


def test_a_prefilled_run_computes_one_token_per_output_token_and_no_prompt():
    prefilled = _three(arrive_prefilled=True, transfer_delay_s=0.5)
    # One token per output token: the first is the recomputed last prompt token; no prefill chunk.
    assert prefilled.computed_tokens == sum(OUTPUT) == 9
    # Every step's tokens are its batch: one per running request.
    steps = prefilled.series.batched_tokens > 0
    assert steps.any() and prefilled.computed_tokens == prefilled.steps + 3  # 6 steps: 2 + 2 + 2 + 1 + 1 + 1


def test_contiguous_reservations_take_their_chunk_at_a_prefilled_admission():
    result = _three(arrive_prefilled=True, transfer_delay_s=0.5, allocation="contiguous-max")
    # Max reserves the whole context, 64 slots a request (a power of two: the buddy chunk too);
    # r0 and r1 run together, r2 joins r0 at 2.5: two chunks at the peak.
    assert result.peak_allocated_tokens == 2 * 64 and result.computed_tokens == 9
    assert result.duration_s == 6.5


def test_a_readmission_after_preemption_recomputes_its_kv_by_prefill():
    # 20 slots = 5 blocks of 4, the 1 % watermark rounds to 0; two prompts of 7 take 2 blocks each
    # at admission and grow a block every 4 tokens: the later admitted is preempted.
    workload = Workload(prompt_tokens=np.array([7, 7]), output_tokens=np.array([10, 10]),
                        arrival_s=np.array([0.0, 0.0]))
    config = TimelineConfig(budget=KvBudget(tokens=20), max_context=32, block_size=4, step_cost=ONE_SECOND,
                            arrive_prefilled=True)
    result = run_timeline(workload, config)
    assert result.completed == 2 and result.preemptions >= 1
    # The preempted request's KV is gone: its length at preemption is prefilled again, so the
    # run computes more than one token per output token, by exactly the recomputed tokens.
    assert result.recomputed_tokens > 0
    assert result.computed_tokens == 20 + result.recomputed_tokens - result.preemptions


@pytest.mark.parametrize("lane", [True, False])
def test_prefilled_runs_keep_the_engines_running_totals(monkeypatch, lane):
    rng = np.random.default_rng(3)
    workload = Workload(prompt_tokens=rng.integers(1, 300, 200), output_tokens=rng.integers(1, 200, 200),
                        arrival_s=np.sort(rng.uniform(0, 10, 200)))
    config = TimelineConfig(budget=KvBudget(tokens=3000), max_context=512, max_num_seqs=12, arrive_prefilled=True,
                            transfer_delay_s=0.25)
    monkeypatch.setattr(engine, "VERIFY_TOTALS", True)  # every step checks the batch's sums
    monkeypatch.setattr(engine, "LANE", lane)
    result = run_timeline(workload, config)
    assert result.completed == 200 and result.preemptions > 0
    assert result.computed_tokens == int(workload.output_tokens.sum()) + result.recomputed_tokens - result.preemptions
    assert float(np.nanmin(result.wait_s)) >= 0


def test_prefilled_runs_are_the_same_with_or_without_the_lane(monkeypatch):
    rng = np.random.default_rng(5)
    workload = Workload(prompt_tokens=rng.integers(1, 300, 200), output_tokens=rng.integers(1, 200, 200),
                        arrival_s=np.sort(rng.uniform(0, 10, 200)))
    config = TimelineConfig(budget=KvBudget(tokens=40_000), max_context=512, max_num_seqs=12, arrive_prefilled=True)
    fast = run_timeline(workload, config)
    monkeypatch.setattr(engine, "LANE", False)
    general = run_timeline(workload, config)
    for name in ("steps", "duration_s", "computed_tokens", "peak_allocated_tokens", "mean_allocated_tokens",
                 "mean_batch_size", "preemptions"):
        assert getattr(fast, name) == getattr(general, name), name
    np.testing.assert_array_equal(fast.ttft_s, general.ttft_s)


@pytest.mark.parametrize("settings, field", [
    (dict(transfer_delay_s=1.0), "transfer_delay_s"),
    (dict(arrive_prefilled=True, transfer_delay_s=-1.0), "transfer_delay_s"),
    (dict(arrive_prefilled=True, transfer_delay_s=math.inf), "transfer_delay_s"),
    (dict(arrive_prefilled=True, transfer_delay_s=1e9), "transfer_delay_s"),
    (dict(arrive_prefilled=True, prefix_caching=True), "arrive_prefilled"),
    (dict(arrive_prefilled="yes"), "arrive_prefilled"),
])
def test_prefilled_settings_are_bounded(settings, field):
    with pytest.raises(InputError) as caught:
        TimelineConfig(budget=KvBudget(tokens=1000), max_context=64, **settings)
    assert caught.value.field == field


def _cli(capsys, *args):
    code = main(["timeline", "--json", "--dist", "fixed", "--length", "400", "--rate", "4", "--n", "100",
                 "--kv-budget-tokens", "50000", "--max-context", "1024", *args])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else err)


def test_cli_arrive_prefilled_reports_the_decode_pool(capsys):
    code, plain = _cli(capsys)
    assert code == 0 and "arrive_prefilled" not in plain  # the other modes print what they printed
    code, report = _cli(capsys, "--arrive-prefilled", "--transfer-delay-s", "0.2")
    assert code == 0 and report["arrive_prefilled"] is True and report["transfer_delay_s"] == 0.2
    # 100 requests of 200 prompt + 200 output tokens (prompt fraction 0.5): 200 tokens computed each.
    assert report["completed"] == 100 and report["computed_tokens"] == 100 * 200
    assert report["peak_allocated_tokens"] % 16 == 0 and report["peak_allocated_tokens"] <= 50_000


@pytest.mark.parametrize("args, option", [
    (("--transfer-delay-s", "0.2"), "--transfer-delay-s"),
    (("--arrive-prefilled", "--transfer-delay-s", "-1"), "--transfer-delay-s"),
    (("--arrive-prefilled", "--transfer-delay-s", "nan"), "--transfer-delay-s"),
    (("--arrive-prefilled", "--transfer-delay-s", "4000"), "--transfer-delay-s"),
    (("--arrive-prefilled", "--prefix-caching"), "--arrive-prefilled"),
])
def test_cli_refusals_name_the_option(capsys, args, option):
    code, err = _cli(capsys, *args)
    assert code == 2 and f"argument {option}:" in err and len(err.strip().splitlines()) == 1

"""The decode pool and the aggregated pool of a cluster plan over time (planner.cluster.occupancy)
on the toy of tests/support/cluster_toy.py, against figures worked out here, and the CLI's
``--simulate`` output."""

from __future__ import annotations

import json
import math
from functools import partial

import pytest

from inputs.errors import InputError
from planner.cluster import cli as cluster_cli
from planner.cluster.occupancy import kv_slots_per_dp_rank, simulate_occupancy
from planner.cluster.parallel import ParallelLayout
from planner.cluster.pools import compare
from planner.cluster.replica import Load, replica
from support.cluster_toy import KV_PER_TOKEN, LOAD
from support.cluster_toy import toy_spec

# The toy's figures are worked on the reference formula's budget (0.9 × 10 GB − 2 GB = 7 GB);
# the default budget, vLLM's memory profile, is checked in test_budget.py.
_spec = partial(toy_spec, budget="formula")

ONE = ParallelLayout()
REQUESTS = 400


@pytest.fixture(scope="module")
def occupancy():
    return simulate_occupancy(_spec(), compare(_spec(), LOAD, prefill=ONE, decode=ONE), requests=REQUESTS, seed=7)


def test_a_dp_rank_holds_its_budget_over_the_bytes_of_a_token():
    # 0.9 × 10 GB − 2 GB of weights = 7 GB over 2,048 B a token: 3,417,968 slots, 213,623 blocks of 16.
    rep = replica(_spec(), ONE, context=1100, prompt_tokens=1000)
    assert kv_slots_per_dp_rank(rep) == math.floor(7e9 / KV_PER_TOKEN) == 3_417_968


def test_both_pools_are_simulated_on_the_plans_counts(occupancy):
    decode, aggregated = occupancy.pool("decode"), occupancy.pool("aggregated")
    # The plan: 5 decode replicas, 68 aggregated ones (tests/planner/cluster/test_pools.py), DP 1,
    # so each rank takes 2,000 ÷ 5 = 400 and 2,000 ÷ 68 = 29.4 requests/s.
    assert (decode.replicas, aggregated.replicas) == (5, 68)
    assert decode.rate_per_dp_rank == 400 and aggregated.rate_per_dp_rank == pytest.approx(2000 / 68)
    assert decode.kv_blocks == aggregated.kv_blocks == 3_417_968 // 16
    # The launch command's --max-num-seqs: the batch cap of 249 (the TPOT target's).
    assert decode.max_num_seqs == aggregated.max_num_seqs == 249
    assert decode.completed == aggregated.completed == REQUESTS and decode.rejected == 0
    assert decode.preemptions == aggregated.preemptions == 0  # 0.05 % of the blocks at most


def test_the_decode_pool_computes_no_prompt(occupancy):
    # Prefilled arrivals: one token a step per output token (the first is the last prompt token,
    # recomputed); the aggregated pool prefills every prompt: 1,000 + 100 − 1 tokens a request.
    assert occupancy.pool("decode").computed_tokens == REQUESTS * 100
    assert occupancy.pool("aggregated").computed_tokens == REQUESTS * 1099


def test_mean_blocks_are_the_mean_batch_times_a_sequences_mean_blocks(occupancy):
    # A decoding sequence of a 1,000-token prompt holds ⌈(1,000 + k) ÷ 16⌉ blocks after its k-th
    # output token, one step each for k = 1..100: 6,612 ÷ 100 = 66.12 blocks on average (8 lengths
    # in block 63, 16 in each of 64–68, 12 in 69). With steps of about one
    # length, the time-averaged blocks are the mean batch times that (the aggregated pool's
    # prefill steps are longer, so only the decode pool is held to it tightly).
    per_sequence = sum(math.ceil((1000 + k) / 16) for k in range(1, 101)) / 100
    assert per_sequence == 66.12
    decode = occupancy.pool("decode")
    assert decode.mean_blocks == pytest.approx(decode.mean_batch_size * per_sequence, rel=0.01)
    # Peak: at most the batch cap's sequences, each at most ⌈1,100 ÷ 16⌉ = 69 blocks.
    for pool in occupancy.pools:
        assert pool.mean_blocks < pool.peak_blocks <= pool.max_num_seqs * 69


def test_the_decode_rank_holds_littles_law_sequences(occupancy):
    # Over the run, Little's law: mean batch = requests × time each spends in the batch ÷ the
    # run's length, and a prefilled request spends 100 steps there (its first, the recomputed
    # prompt token, is a step like the others): 400 × 100 × TPOT ÷ duration.
    decode = occupancy.pool("decode")
    expected = REQUESTS * 100 * decode.mean_tpot_s / decode.duration_s
    assert decode.mean_batch_size == pytest.approx(expected, rel=0.02)


def test_the_decode_pool_arrives_the_plans_ttft_late(occupancy):
    plan = compare(_spec(), LOAD, prefill=ONE, decode=ONE).disaggregated
    assert occupancy.pool("decode").transfer_delay_s == pytest.approx(plan.ttft_s)
    assert occupancy.pool("aggregated").transfer_delay_s == 0


def test_a_pool_with_no_count_is_skipped_with_the_plans_reason():
    # A TTFT target below one prefill: no aggregated count serves it (test_pools.py); the decode
    # pool is still sized (the prefill pool fails), so it alone is simulated.
    load = Load(rate_per_s=10, prompt_tokens=1000, output_tokens=100, ttft_target_s=0.015)
    result = simulate_occupancy(_spec(), compare(_spec(), load, prefill=ONE, decode=ONE), requests=50)
    assert [p.role for p in result.pools] == ["decode"]
    assert [role for role, _ in result.skipped] == ["aggregated"] and "TTFT" in result.skipped[0][1]


@pytest.mark.parametrize("requests, seed, field", [(0, 0, "sim_requests"), (10**6, 0, "sim_requests"),
                                                   (10, -1, "sim_seed"), (True, 0, "sim_requests")])
def test_bad_settings_name_their_field(requests, seed, field):
    with pytest.raises(InputError) as caught:
        simulate_occupancy(_spec(), compare(_spec(), LOAD, prefill=ONE, decode=ONE), requests=requests, seed=seed)
    assert caught.value.field == field


def test_seeded_runs_repeat():
    both = compare(_spec(), LOAD, prefill=ONE, decode=ONE)
    first, again = (simulate_occupancy(_spec(), both, requests=100, seed=3).as_record() for _ in range(2))
    assert first == again


# ---- progress --------------------------------------------------------------------------------------
class _Stop(Exception):
    """What a caller's progress callback raises to stop the run (the page's Cancel does so)."""


def test_progress_covers_both_pools_and_changes_no_figure(occupancy):
    shares = []
    again = simulate_occupancy(_spec(), compare(_spec(), LOAD, prefill=ONE, decode=ONE), requests=REQUESTS, seed=7,
                               progress=shares.append)
    assert again.as_record() == occupancy.as_record()
    # Two pools, each half the run: the decode pool's end is reported as 0.5, the aggregated one's as 1.
    assert shares == sorted(shares) and 0 < shares[0] and shares[-1] == 1.0 and 0.5 in shares
    # About every 1 % of a pool's 400 requests (4 completions), its end reported once more: at most
    # 101 reports a pool.
    assert 2 < len(shares) <= 2 * 101


def test_what_the_callback_raises_stops_the_run():
    both = compare(_spec(), LOAD, prefill=ONE, decode=ONE)
    seen = []

    def stop_in_the_aggregated_pool(share: float) -> None:
        seen.append(share)
        if share > 0.5:
            raise _Stop

    with pytest.raises(_Stop):
        simulate_occupancy(_spec(), both, requests=REQUESTS, seed=7, progress=stop_in_the_aggregated_pool)
    # The decode pool ran to its end (0.5); the aggregated pool's first report was the last.
    assert 0.5 in seen and [s for s in seen if s > 0.5] == seen[-1:]
    with pytest.raises(TypeError, match="progress"):
        simulate_occupancy(_spec(), both, requests=10, progress=0.5)


# ---- python -m planner cluster --simulate ---------------------------------------------------------
TOY_ARGS = ["--layers", "2", "--q-heads", "4", "--kv-heads", "4", "--head-dim", "64", "--params", "1e9",
            "--kv-dtype", "bf16", "--weight-dtype", "bf16", "--gpu-memory-gb", "10", "--gpu-bandwidth-tbs", "1",
            "--bandwidth-source", "datasheet", "--rate", "2000", "--prompt-tokens", "1000", "--output-tokens", "100",
            "--tpot-ms", "5", "--ttft-ms", "60", "--budget", "formula"]  # the toy's 7 GB budget, as _spec


def test_cli_json_carries_the_occupancy_key(capsys):
    assert cluster_cli.main(["--json", *TOY_ARGS, "--simulate", "--sim-requests", "100", "--sim-seed", "3"]) == 0
    record = json.loads(capsys.readouterr().out)
    occupancy = record["occupancy"]
    assert (occupancy["requests"], occupancy["seed"]) == (100, 3)
    assert [p["role"] for p in occupancy["pools"]] == ["decode", "aggregated"]
    decode = occupancy["pools"][0]
    assert decode["computed_tokens"] == 100 * 100 and decode["kv_blocks"] == 3_417_968 // 16
    assert cluster_cli.main(["--json", *TOY_ARGS]) == 0
    assert "occupancy" not in json.loads(capsys.readouterr().out)  # only when asked


def test_cli_text_prints_both_pools(capsys):
    assert cluster_cli.main([*TOY_ARGS, "--simulate", "--sim-requests", "100"]) == 0
    out = capsys.readouterr().out
    assert "occupancy over time (one DP rank per pool, 100 requests, seed 0):" in out
    assert "  decode: peak " in out and "  aggregated: peak " in out and "of 213,623 blocks" in out


@pytest.mark.parametrize("args, option", [(["--sim-requests", "0"], "--sim-requests"),
                                          (["--sim-requests", "30000"], "--sim-requests"),
                                          (["--sim-seed", "-3"], "--sim-seed")])
def test_cli_refusals_name_the_option(capsys, args, option):
    assert cluster_cli.main([*TOY_ARGS, "--simulate", *args]) == 2
    err = capsys.readouterr().err
    assert f"argument {option}:" in err and len(err.strip().splitlines()) == 1


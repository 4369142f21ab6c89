"""Options each in range, together out of bounds: the simulator refuses them before it starts,
naming the input that drives the cost, in one line and well inside a few seconds."""

from __future__ import annotations

import contextlib
import io
import time

import pytest

from simulation import cli
from simulation.prefix_workloads import PrefixScenario, prefix_workload
from simulation.run_budget import RunBudgetExceeded, check_estimate, prefix_estimate, workload_estimate

CASES = [
    # block size 1, short turns, long conversations: 10^8 segments
    (["prefix", "--block-size", "1", "--user-tokens", "1", "--output-tokens", "1", "--requests", "100000",
      "--turns", "1000"], "--turns"),
    # many long turns over 100,000 requests
    (["prefix", "--requests", "100000", "--turns", "1000", "--user-tokens", "100000", "--output-tokens", "10000"],
     "--turns"),
    # every token its own cache block
    (["prefix", "--requests", "100000", "--user-tokens", "1000", "--block-size", "1"], "--block-size"),
    # a million requests over time with prefix caching swapping preempted ones: minutes of events
    (["timeline", "--n", "1000000", "--rate", "100", "--prefix-caching", "--preempt", "swap"], "--n"),
    # two million: past the option's own bound (a million)
    (["timeline", "--n", "2000000", "--rate", "100"], "--n"),
]


@pytest.mark.parametrize("argv, field", CASES, ids=[" ".join(c[0][:3]) for c in CASES])
def test_joint_budgets_refuse_at_once_naming_the_input(argv, field):
    err = io.StringIO()
    start = time.monotonic()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        assert cli.main(argv) == 2
    assert time.monotonic() - start < 5
    lines = err.getvalue().strip().splitlines()
    assert len(lines) == 1 and f"argument {field}:" in lines[0], lines


@pytest.mark.parametrize("requests, turns", [(30, 1), (30, 4), (31, 4), (7, 10)])
def test_the_closed_form_counts_what_the_workload_builds(requests, turns):
    import numpy as np

    scenario = PrefixScenario(requests=requests, system_tokens=50, user_tokens=7, output_tokens=3, turns=turns)
    w = prefix_workload(scenario, np.random.default_rng(0))
    est = prefix_estimate(requests=requests, turns=turns, system_tokens=50, user_tokens=7, output_tokens=3,
                          block_size=1)
    assert est.segments == sum(map(len, w.content.segments))
    assert est.prompt_blocks == int(w.prompt_tokens.sum())


def test_runs_together_are_held_to_one_budget():
    est = prefix_estimate(requests=2000, turns=20, system_tokens=8192, user_tokens=4096, output_tokens=2048,
                          block_size=16)
    # 2,000 requests x 0.3 ms, plus ~8.3 million prompt blocks x 6 us: the blocks dominate.
    assert est.prompt_blocks > 8_000_000 and 40 < est.seconds < 60
    check_estimate(est, requests="Requests", turns="Turns", block_size="Block size", max_seconds=1.5 * est.seconds)
    with pytest.raises(RunBudgetExceeded, match="Block size: 2 runs of 2,000 requests"):
        check_estimate(est, requests="Requests", turns="Turns", block_size="Block size", runs=2,
                       max_seconds=1.5 * est.seconds)


def test_a_request_costs_what_the_run_does_with_it():
    import numpy as np

    prompts = np.full(1_000_000, 1024)
    plain = workload_estimate(prompts, segments=0, block_size=16, prefix_caching=False)
    cached = workload_estimate(prompts, segments=0, block_size=16, prefix_caching=True)
    swapped = workload_estimate(prompts[:100_000], segments=0, block_size=16, prefix_caching=True, swap=True)
    # 1,000,000 x 30 us = 30 s (measured: 8.8 s at 50 requests/s); x 55 us = 55 s; 100,000 x 250 us = 25 s.
    assert (plain.seconds, cached.seconds, swapped.seconds) == pytest.approx((30.0, 55.0, 25.0))
    check_estimate(plain, requests="--n")
    with pytest.raises(RunBudgetExceeded, match="about 55 s"):
        check_estimate(cached, requests="--n")

"""`python -m simulation`: the contract's options, JSON fields, and one-line errors with exit 2."""

import json
import subprocess
import sys

import pytest

from support.paths import ROOT, trace


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "simulation", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_snapshot_json_reproduces_problem_4():
    done = run_cli("snapshot", "--json", "--dist", "uniform", "--low", "1024", "--high", "3072",
                   "--max-context", "32768", "--block-size", "16", "--kv-budget-gib", "471.25",
                   "--per-token-bytes", str(160 * 1024), "--policy", "max", "--n", "50000", "--seed", "1")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    for key in ("contiguous_fit", "paged_fit", "contiguous_utilisation", "paged_utilisation",
                "paged_waste_tokens_mean"):
        assert key in report
    assert report["contiguous_fit"] == 94
    assert report["paged_fit"] == pytest.approx(1500, rel=0.025)
    assert report["paged_utilisation"] == pytest.approx(0.996, abs=0.001)
    assert report["paged_waste_tokens_mean"] == pytest.approx(7.5, abs=1.0)


def test_snapshot_fixed_and_lognormal_and_trace():
    fixed = json.loads(run_cli("snapshot", "--json", "--dist", "fixed", "--length", "2048",
                               "--kv-budget-tokens", "15728", "--max-context", "2048").stdout)
    assert fixed["contiguous_fit"] == 7 and fixed["paged_fit"] == 7  # 15,728 // 2,048
    lognormal = run_cli("snapshot", "--json", "--mean", "500", "--sigma", "1", "--kv-budget-tokens", "100000",
                        "--max-context", "4096", "--policy", "pow2")
    assert json.loads(lognormal.stdout)["policy"] == "pow2"
    traced = json.loads(run_cli("snapshot", "--json", "--trace", str(trace("splitwise_code.csv")),
                                "--kv-budget-tokens", "1000000", "--max-context", "8192").stdout)
    assert traced["requests"] == 8819


def test_timeline_json_on_a_trace_and_on_poisson():
    done = run_cli("timeline", "--json", "--trace", str(trace("splitwise_code.csv")), "--n", "2000",
                   "--kv-budget-tokens", "60000", "--block-size", "16", "--allocator", "paged",
                   "--preempt", "swap")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    for key in ("completed", "mean_batch_size", "token_state_fraction", "preemptions", "mean_wait_s"):
        assert key in report
    assert report["completed"] == 2000
    poisson = json.loads(run_cli("timeline", "--json", "--dist", "uniform", "--low", "100", "--high", "900",
                                 "--rate", "5", "--n", "300", "--kv-budget-tokens", "20000",
                                 "--allocator", "contiguous-max", "--max-context", "1024").stdout)
    assert poisson["completed"] == 300 and poisson["preemptions"] == 0


def test_lognormal_by_median_and_p90():
    # Fixed-length equivalent: median = P90 = 1,000 means sigma 0, every request 1,000 tokens.
    report = json.loads(run_cli("snapshot", "--json", "--median", "1000", "--p90", "1000",
                                "--kv-budget-tokens", "16128", "--max-context", "1024").stdout)
    # 1,000 tokens take 63 blocks = 1,008 slots (8 empty); 16,128 slots hold 16 of them.
    assert report["paged_fit"] == 16 and report["paged_waste_tokens_mean"] == 8


def test_table_output_without_json():
    done = run_cli("snapshot", "--dist", "fixed", "--length", "100", "--kv-budget-tokens", "1000")
    assert done.returncode == 0
    assert "paged_fit" in done.stdout and "{" not in done.stdout


@pytest.mark.parametrize("args, argument", [
    (["snapshot", "--n", "0"], "--n"),
    (["snapshot", "--n", "many"], "--n"),
    (["snapshot", "--policy", "greedy"], "--policy"),
    (["snapshot", "--dist", "uniform", "--low", "10"], "--high"),
    (["snapshot", "--dist", "uniform", "--low", "10", "--high", "5"], "--high"),
    (["snapshot", "--dist", "fixed"], "--length"),
    (["snapshot", "--dist", "fixed", "--length", "5", "--mean", "3"], "--mean"),
    (["snapshot", "--kv-budget-gib", "10"], "--per-token-bytes"),
    (["snapshot", "--kv-budget-tokens", "-5"], "--kv-budget-tokens"),
    (["snapshot", "--max-context", "1"], "--max-context"),
    (["snapshot", "--progress", "1.5"], "--progress"),
    (["snapshot", "--trace", "/no/such.csv"], "--trace"),
    (["timeline", "--dist", "fixed", "--length", "100"], "--rate"),
    (["timeline", "--rate", "-1"], "--rate"),
    (["timeline", "--allocator", "slab"], "--allocator"),
    (["timeline", "--preempt", "never"], "--preempt"),
    (["snapshot", "--sigma", "nan"], "--sigma"),
    (["snapshot", "--median", "100"], "--p90"),
    (["snapshot", "--median", "300", "--p90", "100"], "--p90"),
    (["snapshot", "--mean", "300", "--median", "200", "--p90", "400"], "--median"),
])
def test_bad_arguments_exit_2_with_one_line(args, argument):
    assert_one_line_error(run_cli(*args), argument)


def assert_one_line_error(done: subprocess.CompletedProcess, expected: str) -> None:
    """Exit 2, nothing on stdout, one line under 300 characters on stderr containing ``expected``."""
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and len(lines[0]) < 300, done.stderr
    assert expected in lines[0] and "Traceback" not in done.stderr


def test_bad_trace_content_names_row_and_column(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,10,5\n1,-4,5\n")
    done = run_cli("snapshot", "--trace", str(bad))
    assert done.returncode == 2
    assert "--trace" in done.stderr and "row 2, column num_prefill_tokens" in done.stderr


@pytest.mark.parametrize("args, argument", [
    (["snapshot", "--block-size", "1e30"], "--block-size"),
    (["snapshot", "--max-context", "1e308"], "--max-context"),
    (["snapshot", "--dist", "fixed", "--length", "1e30"], "--length"),
    (["snapshot", "--sigma", "1e308"], "--sigma"),
    (["snapshot", "--median", "100", "--p90", "1e308"], "--p90"),
    (["snapshot", "--kv-budget-gib", "1e30", "--per-token-bytes", "100"], "--kv-budget-gib"),
    (["snapshot", "--kv-budget-tokens", "1e30"], "--kv-budget-tokens"),
    (["snapshot", "--n", "1000000000000"], "--n"),
    (["snapshot", "--seed", "-1"], "--seed"),
    (["snapshot", "--prompt-fraction", "2"], "--prompt-fraction"),
    (["snapshot", "--per-token-bytes", "1e308"], "--per-token-bytes"),
    (["timeline", "--rate", "1e308"], "--rate"),
    (["timeline", "--rate", "5", "--decode-step-s", "1e308"], "--decode-step-s"),
    (["timeline", "--rate", "5", "--prefill-tokens-per-s", "1e-300"], "--prefill-tokens-per-s"),
    (["timeline", "--rate", "5", "--max-batch", "1e30"], "--max-batch"),
    (["snapshot", "--trace", "/dev/zero"], "--trace"),
])
def test_out_of_range_values_exit_2_with_one_short_line(args, argument):
    assert_one_line_error(run_cli(*args), argument)


def test_help_shows_every_range():
    done = run_cli("timeline", "--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    for shown in ("1 to 65,536 tokens", "2 to 10,000,000 tokens", "1 to 1,000,000 requests", "0 to 3",
                  "1e-06 to 60 s"):
        assert shown in text


def test_trace_with_huge_tokens_or_long_field_names_row_and_column(tmp_path):
    huge = tmp_path / "huge.csv"
    huge.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,10,5\n1,1e30,5\n")
    long_field = tmp_path / "long.csv"
    long_field.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0," + "x" * 1_000_000 + ",5\n")
    for path, expected in ((huge, "row 2, column num_prefill_tokens"), (long_field, "row 1, column num_prefill_tokens")):
        done = subprocess.run([sys.executable, "-W", "error", "-m", "simulation", "snapshot", "--trace", str(path)],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert_one_line_error(done, expected)


BREAKDOWN_KEYS = {"token_states", "reservation", "internal_fragmentation", "external_fragmentation", "free"}


def test_snapshot_and_timeline_print_the_papers_breakdown():
    # Fixed 1,000-token requests (500 prompt + 500 output), Orca-Oracle, buddy: each reserves
    # 1,000 and takes 1,024; 16,384 slots hold 16 of them: 24 rounding slots each are external.
    snapshot = json.loads(run_cli("snapshot", "--json", "--dist", "fixed", "--length", "1000", "--policy", "oracle",
                                  "--kv-budget-tokens", "16384", "--max-context", "2048").stdout)
    assert set(snapshot["breakdown"]) == BREAKDOWN_KEYS
    assert snapshot["breakdown"]["internal_fragmentation"] == 0
    assert snapshot["breakdown"]["external_fragmentation"] == pytest.approx(16 * 24 / 16384, abs=1e-6)
    assert snapshot["breakdown"]["token_states"] == pytest.approx(16 * 1000 / 16384, abs=1e-6)
    timeline = json.loads(run_cli("timeline", "--json", "--dist", "uniform", "--low", "100", "--high", "900",
                                  "--rate", "5", "--n", "200", "--kv-budget-tokens", "20000", "--max-num-seqs", "8",
                                  "--max-num-batched-tokens", "512", "--max-context", "1024").stdout)
    assert set(timeline["breakdown"]) == BREAKDOWN_KEYS
    assert sum(timeline["breakdown"].values()) == pytest.approx(1.0, abs=1e-5)
    assert timeline["completed"] == 200 and timeline["mean_batch_size"] <= 8
    assert timeline["max_num_batched_tokens"] == 512


def test_prefix_command_hand_calculations():
    done = run_cli("prefix", "--json", "--system-prompt-tokens", "1000", "--user-tokens", "50", "--requests", "30",
                   "--block-size", "16", "--kv-budget-tokens", "200000", "--max-context", "4096")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    for key in ("hit_rate", "prefill_tokens_saved", "cached_blocks_peak", "evictions"):
        assert key in report
    assert report["prefill_tokens_saved"] == 29 * 992  # 62 full blocks of the 1,000-token prompt
    assert report["hit_rate"] == pytest.approx(29 * 992 / (30 * 1050), abs=1e-6)
    assert report["evictions"] == 0
    none = json.loads(run_cli("prefix", "--json", "--system-prompt-tokens", "240", "--user-tokens", "20",
                              "--requests", "10", "--block-size", "784", "--kv-budget-tokens", "100000",
                              "--max-context", "4096").stdout)
    assert none["hit_rate"] == 0 and none["prefill_tokens_saved"] == 0
    turns = json.loads(run_cli("prefix", "--json", "--system-prompt-tokens", "500", "--user-tokens", "100",
                               "--requests", "40", "--turns", "4", "--block-size", "16", "--kv-budget-tokens",
                               "6000", "--max-context", "4096", "--cpu-tier-gib", "4", "--per-token-bytes",
                               "163840").stdout)
    assert turns["evictions"] > 0 and turns["hit_rate"] > 0.5


@pytest.mark.parametrize("args, argument", [
    (["timeline", "--rate", "5", "--max-num-seqs", "300", "--max-num-batched-tokens", "256"],
     "--max-num-batched-tokens"),
    (["timeline", "--rate", "5", "--kv-budget-tokens", "10000", "--cpu-tier-gib", "10"], "--cpu-tier-gib"),
    (["timeline", "--rate", "5", "--allocator", "contiguous-max", "--prefix-caching"], "--prefix-caching"),
    (["timeline", "--rate", "5", "--cpu-link-gbps", "0"], "--cpu-link-gbps"),
    (["timeline", "--rate", "5", "--no-chunked-prefill", "--max-num-batched-tokens", "2048"],
     "--max-num-batched-tokens"),
    (["prefix", "--requests", "0"], "--requests"),
    (["prefix", "--turns", "1e9"], "--turns"),
    (["prefix", "--system-prompt-tokens", "-1"], "--system-prompt-tokens"),
    (["prefix"], "--user-tokens"),
    (["prefix", "--user-tokens", "10", "--trace", "/no/such.csv"], "--trace"),
])
def test_new_options_refuse_bad_values_in_one_line(args, argument):
    assert_one_line_error(run_cli(*args), argument)

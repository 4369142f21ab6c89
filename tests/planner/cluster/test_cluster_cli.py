"""``python -m planner cluster``: strict JSON equal to the library's figures, one-line refusals
naming the option (exit 2), and invalid layouts refused naming the constraint."""

from __future__ import annotations

import json
from functools import partial

import pytest

from planner.cluster import cli as cluster_cli
from planner.cluster.parallel import ParallelLayout
from planner.cluster.pareto import sweep
from planner.cluster.pools import compare
from sizing.models import ModelShape
from support.cluster_toy import LOAD, TOY, toy_spec

# The toy's figures are worked on the reference formula's budget (0.9 × 10 GB − 2 GB = 7 GB);
# the default budget, vLLM's memory profile, is checked in test_budget.py.
_toy = partial(toy_spec, budget="formula")

# The toy (tests/support/cluster_toy.py) typed as a manual shape on a custom GPU, on the formula's budget.
TOY_ARGS = ["--layers", "2", "--q-heads", "4", "--kv-heads", "4", "--head-dim", "64", "--params", "1e9",
            "--kv-dtype", "bf16", "--weight-dtype", "bf16", "--gpu-memory-gb", "10", "--gpu-bandwidth-tbs", "1",
            "--bandwidth-source", "datasheet", "--budget", "formula"]
LOAD_ARGS = ["--rate", "2000", "--prompt-tokens", "1000", "--output-tokens", "100", "--tpot-ms", "5",
             "--ttft-ms", "60"]
CUSTOM = ModelShape(**{**TOY.__dict__, "name": "custom"})  # the sizer names a manual shape "custom"


def _refuse_constant(name: str):
    raise AssertionError(f"{name} is not JSON")


def _json(capsys, *argv: str) -> dict:
    assert cluster_cli.main(["--json", *argv]) == 0
    return json.loads(capsys.readouterr().out, parse_constant=_refuse_constant)


def _figures(record):
    """A record as the JSON round trip gives it (tuples to lists, floats as printed)."""
    return json.loads(json.dumps(record, allow_nan=False))


def test_json_is_strict_and_is_the_librarys_figures(capsys):
    result = _json(capsys, *TOY_ARGS, *LOAD_ARGS, "--decode-tp", "2")
    spec = _toy(model=CUSTOM)
    both = compare(spec, LOAD, prefill=ParallelLayout(), decode=ParallelLayout(tp=2))
    assert result["disaggregated"] == _figures(both.disaggregated.as_record())
    assert result["aggregated"] == _figures(both.aggregated.as_record())
    # The hand figures of test_pools: 51 prefill GPUs at TP 1; the TP-2 decode and aggregated pools.
    assert result["disaggregated"]["pools"][0]["replicas"] == 51
    assert result["disaggregated"]["pools"][0]["binding_limit"] == "ttft_target"
    assert [r["role"] for r in result["roles"]["disaggregated"]] == ["prefill", "decode"]
    assert result["roles"]["aggregated"][0]["layout"]["tp"] == 2  # the decode layout, by default
    assert "--tensor-parallel-size 2" in result["roles"]["aggregated"][0]["vllm"]


def test_pareto_json_is_the_sweeps(capsys):
    result = _json(capsys, *TOY_ARGS, *LOAD_ARGS, "--pareto")
    expected = sweep(_toy(model=CUSTOM), LOAD).as_record()
    assert result["pareto"] == _figures(expected)
    assert any(p["on_front"] for p in result["pareto"]["points"])


def test_the_aggregated_pool_can_have_its_own_layout(capsys):
    result = _json(capsys, *TOY_ARGS, *LOAD_ARGS, "--aggregated-tp", "4", "--aggregated-pp", "2")
    assert result["aggregated"]["pools"][0]["layout"]["gpus"] == 8


def test_text_output_names_both_deployments(capsys):
    assert cluster_cli.main([*TOY_ARGS, *LOAD_ARGS]) == 0
    out = capsys.readouterr().out
    assert "disaggregated: 56 GPUs, feasible" in out and "aggregated: 68 GPUs, feasible" in out
    assert "vllm serve custom" in out


@pytest.mark.parametrize("argv,option", [
    (["--rate", "0"], "--rate"),
    (["--rate", "2e6"], "--rate"),
    (["--prompt-tokens", "0"], "--prompt-tokens"),
    (["--output-tokens", "1e8"], "--output-tokens"),
    (["--tpot-ms", "nan"], "--tpot-ms"),
    (["--ttft-ms", "-1"], "--ttft-ms"),
    (["--decode-tp", "5000"], "--decode-tp"),
    (["--prefill-pp", "0"], "--prefill-pp"),
    (["--aggregated-dp", "2000"], "--aggregated-dp"),
    (["--nics", "65"], "--nics"),
    (["--efficiency", "2"], "--efficiency"),
    (["--link", "carrier-pigeon"], "--link"),
    (["--connector", "p2p"], "--connector"),
    (["--gpus", "8"], "--gpus"),
])
def test_out_of_range_options_give_one_line_naming_them(capsys, argv, option):
    assert cluster_cli.main([*TOY_ARGS, *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"python -m planner cluster: error: argument {option}:")


@pytest.mark.parametrize("argv,option,constraint", [
    (["--decode-ep"], "--decode-ep", "expert parallelism needs routed experts"),
    (["--prefill-tp", "3"], "--prefill-tp", "does not divide the 4 query heads"),
])
def test_invalid_layouts_name_the_constraint(capsys, argv, option, constraint):
    assert cluster_cli.main([*TOY_ARGS, *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert f"argument {option}:" in err and constraint in err


def test_pools_whose_tps_do_not_divide_are_refused(capsys):
    # 12 heads take TP 2 and TP 3, but a decode rank must map onto whole prefill ranks.
    argv = ["--layers", "2", "--q-heads", "12", "--kv-heads", "12", "--head-dim", "64", "--params", "1e9",
            "--prefill-tp", "2", "--decode-tp", "3", "--bandwidth-source", "datasheet"]
    assert cluster_cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "argument --decode-tp:" in err and "one must divide the other" in err


def test_a_role_given_no_tp_gets_the_smallest_that_holds_its_sequences(capsys):
    # Llama-3.1-70B in bf16: 70.6e9 params x 2 B = 141.2e9 B = 131.5 GiB of weights, more than the
    # 125.8 GiB vLLM's profile asks of an H200 (its CUDA total of 139.8 GiB x 0.9), so TP 1 holds no
    # sequence; TP 2 halves the weights to 65.8 GiB a GPU, leaving 58.3 GiB of KV.
    record = _json(capsys, "--model", "llama-3.1-70b", "--gpu", "h200")
    for role in record["disaggregated"]["pools"]:
        assert role["layout"]["tp"] == 2 and role["layout"]["pp"] == 1, role["layout"]
    assert record["disaggregated"]["feasible"] and record["aggregated"]["feasible"]
    # Asked for TP 1, the plan keeps it and says why it cannot serve.
    asked = _json(capsys, "--model", "llama-3.1-70b", "--gpu", "h200", "--tp", "1")
    assert not asked["aggregated"]["feasible"]


def test_the_planner_cli_routes_the_cluster_subcommand(capsys):
    from planner.cli import main

    assert main(["cluster", "--json", *TOY_ARGS, *LOAD_ARGS]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == "custom"

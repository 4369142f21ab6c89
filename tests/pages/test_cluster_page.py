"""The cluster page: the CLI's record on screen (one computation), the controls in the URL, and
refusals that name the widget while the last good plan stays."""

from __future__ import annotations

import json
import threading

from planner.cluster import cli as cluster_cli
from planner.cluster.page_view import ClusterPageInputs, RoleLayout, cluster_record
from support.apptest import figures, metric_text, open_page, texts
from support.gates import cancelled_by_another_session, held_by_another_session
from ui.cluster_occupancy_view import QUEUE_REQUESTS, TAB
from ui.gpu_lock import GpuGate
from ui.run_feedback import GATE_HOOK, cancel_key

PAGE = "5_cluster.py"


def _cli_json(capsys, *argv: str) -> dict:
    assert cluster_cli.main(["--json", "--pareto", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_page_record_is_the_clis_json(capsys):
    # The same choices through the page's inputs and through the CLI's options: equal records.
    page = cluster_record(ClusterPageInputs(model="qwen3-30b-a3b", gpu="h100-sxm", kv_dtype="fp8", rate=5.0,
                                            prompt_tokens=4096, output_tokens=512, tpot_ms=40,
                                            decode=RoleLayout(tp=2, dp=2, ep=True)))
    cli = _cli_json(capsys, "--model", "qwen3-30b-a3b", "--gpu", "h100-sxm", "--kv-dtype", "fp8", "--rate", "5",
                    "--prompt-tokens", "4096", "--output-tokens", "512", "--tpot-ms", "40", "--decode-tp", "2",
                    "--decode-dp", "2", "--decode-ep", "--prefill-tp", "1")
    page_json = json.loads(json.dumps(page, allow_nan=False))
    # The CLI's --prefill-tp 1 is what the page's "auto" picks for this prompt (30B in bf16 fits one H100).
    assert page_json["disaggregated"]["pools"][0]["layout"]["tp"] == 1
    assert page_json == cli


def test_page_shows_the_record_and_keeps_its_controls_in_the_url():
    at = open_page(PAGE, {"model": "llama-3.1-70b", "gpu": "h200", "kv": "bf16", "rate": "1.0"})
    record = cluster_record(ClusterPageInputs(model="llama-3.1-70b", gpu="h200", kv_dtype="bf16"))
    assert metric_text(at, "GPUs, disaggregated") == f"{record['disaggregated']['gpus']:,}"
    assert metric_text(at, "GPUs, aggregated") == f"{record['aggregated']['gpus']:,}"
    assert metric_text(at, "TPOT, aggregated") == f"{record['aggregated']['tpot_s'] * 1e3:,.1f} ms"
    # Two Pareto charts, each with its axis titles and a front.
    charts = [f for f in figures(at) if f["layout"]["title"]["text"].startswith("Tokens/s per GPU")]
    assert len(charts) == 2 and all(any("Pareto front" in t["name"] for t in f["data"]) for f in charts)
    at.selectbox(key="cluster.dtp").set_value(4).run()
    assert at.query_params["dtp"] == "4"
    at.number_input(key="cluster.rate").set_value(20.0).run()
    assert at.query_params["rate"] == "20" and not at.exception


def _budget_rows(at) -> list[str]:
    """The "How" of every KV budget row in the pools' figure tables."""
    return [how for frame in at.dataframe if "Figure" in frame.value
            for name, how in zip(frame.value["Figure"], frame.value["How"], strict=True)
            if name == "KV budget per GPU"]


def test_the_budget_control_names_its_rule_in_every_pool_and_goes_into_the_url(capsys):
    at = open_page(PAGE, {"model": "llama-3.1-70b", "gpu": "h200", "kv": "bf16"})
    assert at.selectbox(key="cluster.budget").value == "engine"  # vLLM's memory profile by default
    rows = _budget_rows(at)
    assert rows and all("vLLM's memory profile at TP" in how for how in rows)
    at.selectbox(key="cluster.budget").set_value("formula").run()
    assert at.query_params["budget"] == "formula" and not at.exception
    rows = _budget_rows(at)
    assert rows and all("reference formula: 0.9 × the vendor's 141 GB" in how for how in rows)
    # The page's formula plan is the CLI's --budget formula plan.
    record = cluster_record(ClusterPageInputs(model="llama-3.1-70b", gpu="h200", kv_dtype="bf16", budget="formula"))
    cli = _cli_json(capsys, "--model", "llama-3.1-70b", "--gpu", "h200", "--kv-dtype", "bf16", "--budget", "formula")
    assert json.loads(json.dumps(record, allow_nan=False)) == cli
    assert metric_text(at, "GPUs, aggregated") == f"{record['aggregated']['gpus']:,}"


def test_an_invalid_layout_names_the_widget_and_keeps_the_last_plan():
    at = open_page(PAGE, {"model": "llama-3.1-70b", "gpu": "h200"})
    before = metric_text(at, "GPUs, aggregated")
    at.selectbox(key="cluster.dtp").set_value(2).run()
    at.checkbox(key="cluster.dep").check().run()  # expert parallelism on a dense model
    errors = [e.value for e in at.error]
    assert any(e.startswith("**Decode pool: Expert parallel (EP)**") and "dense" in e for e in errors), errors
    assert "Showing the last valid plan" in texts(at.caption)
    assert metric_text(at, "GPUs, aggregated") == before  # the last valid plan, not blank


def test_a_bad_url_value_is_ignored_with_a_notice():
    at = open_page(PAGE, {"dtp": "3", "rate": "-1"})
    assert "dtp" in texts(at.caption) and "rate" in texts(at.caption)
    assert at.selectbox(key="cluster.dtp").value == 0


def test_formats_go_by_their_glossary_names():
    at = open_page(PAGE, {"kv": "int4", "w": "fp8"})
    assert at.selectbox(key="cluster.w").options == ["BF16", "FP8 (e4m3)", "INT8", "INT4"]
    assert at.selectbox(key="cluster.kv").value == "int4"  # the option value stays the URL's and the code's
    assert any(e.label == "Glossary" for e in at.sidebar.expander)


def _cli_occupancy(capsys, *argv: str) -> dict:
    assert cluster_cli.main(["--json", "--simulate", *argv]) == 0
    return json.loads(capsys.readouterr().out)["occupancy"]


def _pool_metrics(at, name: str) -> tuple[str, str, str]:
    return tuple(metric_text(at, f"{figure} KV blocks ({name})") for figure in ("Peak", "Mean")) + (
        metric_text(at, f"Preemptions ({name})"),)


def test_simulating_shows_the_clis_decode_pool_beside_the_aggregated_pool(capsys):
    at = open_page(PAGE, {"model": "llama-3.1-70b", "gpu": "h200", "kv": "bf16", "sim": "1", "simn": "200"})
    # The same plan through the CLI: its options, not the page's inputs, build the run.
    cli = _cli_occupancy(capsys, "--model", "llama-3.1-70b", "--gpu", "h200", "--kv-dtype", "bf16",
                         "--sim-requests", "200")
    assert [p["role"] for p in cli["pools"]] == ["decode", "aggregated"] and not cli["skipped"]
    for pool, name in zip(cli["pools"], ("decode pool", "aggregated pool"), strict=True):
        assert _pool_metrics(at, name) == (f"{pool['peak_blocks']:,} of {pool['kv_blocks']:,}",
                                           f"{pool['mean_blocks']:,.1f}", f"{pool['preemptions']:,}")
        # Every request of a run this light finishes: 200 arrivals, none turned away.
        assert pool["completed"] == 200 and pool["rejected"] == 0
    table = at.dataframe[-1].value
    assert list(table["Pool"]) == ["Disaggregated decode pool", "Aggregated pool"]
    assert list(table["Completed"]) == ["200", "200"]
    assert at.query_params["sim"] == "1" and at.query_params["simn"] == "200"


def test_the_toggle_runs_the_simulation_and_keeps_its_controls_in_the_url():
    at = open_page(PAGE, {"model": "llama-3.1-70b", "gpu": "h200"})
    assert not [m for m in at.metric if "KV blocks" in m.label]  # nothing is simulated until asked
    at.number_input(key="cluster.sim_requests").set_value(100)
    at.number_input(key="cluster.sim_seed").set_value(7)
    at.toggle(key="cluster.simulate").set_value(True).run()
    assert not at.exception
    assert (at.query_params["sim"], at.query_params["simn"], at.query_params["simseed"]) == ("1", "100", "7")
    peak, _, blocks = metric_text(at, "Peak KV blocks (decode pool)").partition(" of ")
    assert 0 < int(peak.replace(",", "")) <= int(blocks.replace(",", ""))  # in use at some moment, within the cache
    assert "100 Poisson arrivals" in texts(at.caption) and "seed 7" in texts(at.caption)
    assert list(at.dataframe[-1].value["Completed"]) == ["100", "100"]


def test_a_request_count_past_the_clis_cap_is_ignored_and_a_broken_plan_is_not_simulated():
    at = open_page(PAGE, {"simn": "20001", "simseed": "-1"})
    assert "simn" in texts(at.caption) and "simseed" in texts(at.caption)
    assert at.number_input(key="cluster.sim_requests").value == 1000  # the CLI's --sim-requests default
    at.selectbox(key="cluster.dtp").set_value(2).run()
    at.checkbox(key="cluster.dep").check()  # expert parallelism on a dense model: the plan is refused
    at.toggle(key="cluster.simulate").set_value(True).run()
    assert "Fix the plan's inputs above" in texts(at.caption)
    assert not [m for m in at.metric if "KV blocks" in m.label]


# ---- the simulation's run feedback: cancel, stale marking, the queue ------------------------------
# Each test runs seeds of its own: finished runs are kept for the whole server (every test here).
SIM = {"model": "llama-3.1-70b", "gpu": "h200", "sim": "1", "simn": "200"}


def _cancelled(at) -> str:
    return next(w.value for w in at.warning if "Run cancelled" in w.value)


def _stale(at) -> str:
    return next(c.value for c in at.caption if "**Stale**" in c.value)


def test_a_cancelled_simulation_keeps_the_last_figures_marked_stale():
    at = open_page(PAGE, {**SIM, "simseed": "301"})
    before = _pool_metrics(at, "decode pool") + _pool_metrics(at, "aggregated pool")
    # A Cancel click asks for a new script run and sets this flag on the way in (its callback);
    # Streamlit stops the running simulation at its next progress call.
    at.session_state[cancel_key(TAB)] = True
    at.number_input(key="cluster.sim_seed").set_value(302).run()
    assert not at.exception
    assert "last finished run's" in _cancelled(at)
    assert _pool_metrics(at, "decode pool") + _pool_metrics(at, "aggregated pool") == before
    assert "seed 301)" in texts(at.caption)  # seed 301's figures, still there
    assert "run-results-occupancy-main" in _stale(at) and "opacity: 0.45" in _stale(at)  # and dimmed
    at.run()  # any other rerun leaves the cancelled run cancelled
    assert _cancelled(at) and "seed 301)" in texts(at.caption)
    at.button(key="run.occupancy.main.again").click().run()
    assert not any("Run cancelled" in w.value for w in at.warning)
    assert "seed 302)" in texts(at.caption) and list(at.dataframe[-1].value["Completed"]) == ["200", "200"]


def test_a_cancel_asked_of_the_gate_stops_the_simulation_between_steps():
    gate = GpuGate()
    at = open_page(PAGE, {**SIM, "simn": str(2 * QUEUE_REQUESTS), "simseed": "311"}, session={GATE_HOOK: gate})
    before = _pool_metrics(at, "decode pool")
    with cancelled_by_another_session(gate):
        at.number_input(key="cluster.sim_seed").set_value(312).run()
    assert not at.exception and not gate.status().busy  # stopped through its progress calls, the gate freed
    assert "last finished run's" in _cancelled(at)
    assert _pool_metrics(at, "decode pool") == before and "seed 311)" in texts(at.caption)
    assert "run-results-occupancy-main" in _stale(at)


def test_a_long_simulation_queues_behind_another_session_and_a_short_one_does_not():
    gate = GpuGate()
    with held_by_another_session(gate) as release:
        at = open_page(PAGE, {**SIM, "simseed": "321"}, session={GATE_HOOK: gate})
        # 200 requests a pool take milliseconds: they run at once, beside the other session's run.
        assert gate.status().busy and "behind another session's run" not in texts(at.caption)
        assert list(at.dataframe[-1].value["Completed"]) == ["200", "200"]
        at.number_input(key="cluster.sim_requests").set_value(QUEUE_REQUESTS)
        threading.Timer(1.0, release.set).start()  # the page reaches its run well within this, then queues
        at.run()
    assert not at.exception
    queued = next(c.value for c in at.caption if "behind another session's run" in c.value)
    assert "This run queued" in queued
    assert f"{QUEUE_REQUESTS:,} Poisson arrivals" in texts(at.caption)
    assert list(at.dataframe[-1].value["Completed"]) == [f"{QUEUE_REQUESTS:,}"] * 2

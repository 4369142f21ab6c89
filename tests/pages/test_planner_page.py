"""Capacity planner page under Streamlit's AppTest: opens cleanly, numbers move the right way,
the URL reopens the same state, the sizer's values carry over, bad input is named."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from kernels.bench.records import (
    TARGET_SPECS,
    BenchReport,
    Ceilings,
    Provenance,
    Target,
    report_to_json,
)
from hardware.gpus import get_gpu
from planner.step_model import ServingSetup, step_shape, step_time
from sizing.catalogue import get_entry
from sizing.report import Handoff
from support.apptest import figures, metric_text, open_page, texts

PAGE = "4_planner.py"
HANDOFF_KEY = "handoff.sizer"  # where ui.handoff.publish keeps the sizer's latest result

# The reference page's problem 4 set-up with every sequence at 2,048 tokens and the datasheet:
# 3,084,716 KV slots per GPU (see tests/planner/test_cli.py) → 94 contiguous (32K each),
# 1,506 paged. The catalogue model is timed by the step model: its Llama-3.1-70B config at TP 8,
# every linear layer in FP8, 1-byte KV, vLLM with CUDA graphs (the page's engine defaults).
REFERENCE_URL = {"model": "llama-3.1-70b", "kv": "fp8", "w": "fp8", "gpu": "h100-sxm", "tp": "8",
                 "traffic": "fixed", "length": "2048", "source": "datasheet", "tpot": "10",
                 "maxctx": "32768"}
H100 = get_gpu("h100-sxm")
LLAMA70_FP8_TP8 = step_shape(get_entry("llama-3.1-70b").config_bytes, tp=8, gpu=H100, weight_format="fp8",
                             kv_bytes=1.0)
VLLM_GRAPHS = ServingSetup(gpu=H100)


def _step_ms(batch: int) -> float:
    """The step model's decode step of ``batch`` sequences of 2,048 tokens, in ms."""
    return step_time(LLAMA70_FP8_TP8, VLLM_GRAPHS, decode_batch=batch, context=2048).total_s * 1e3


def _open(query: dict[str, str] | None = None, state: dict | None = None) -> AppTest:
    return open_page(PAGE, query, state)


_metric = metric_text


def _number(text: str) -> float:
    return float(text.replace(",", "").rstrip("×").split()[0])


def test_opens_with_defaults_and_shows_both_allocators():
    at = _open()
    assert _number(_metric(at, "Users per replica, paged")) > _number(
        _metric(at, "Users per replica, contiguous"))
    assert len(at.get("plotly_chart")) == 1  # the server tab only: the edge tab runs when opened
    assert at.title[0].value.endswith("Capacity planner")
    edge = _open({"tab": "edge"})
    assert len(edge.get("plotly_chart")) == 1 and not any(m.label == "Users per replica, paged" for m in edge.metric)


def test_reference_url_reproduces_hand_figures():
    memory = _open({**REFERENCE_URL, "tpot": "0"})  # no target: memory alone caps each batch
    assert _metric(memory, "Users per replica, contiguous") == "94"  # 11.75 per GPU of the TP-8 replica
    assert _metric(memory, "Users per replica, paged") == "1,506"
    assert _metric(memory, "TPOT at the paged batch") == f"{_step_ms(1506):,.1f} ms"
    # 10 ms: every batch the step model keeps within it, found by walking up from one sequence
    cap = max(b for b in range(1, 1507) if _step_ms(b) <= 10.0)
    at = _open(REFERENCE_URL)
    assert _metric(at, "Users per replica, paged") == f"{cap:,}"
    assert _metric(at, "Users per replica, contiguous") == f"{min(94, cap):,}"
    assert _metric(at, "Users per node, paged") == f"{cap:,}"  # one TP-8 replica per node
    assert _metric(at, "TPOT at the paged batch") == f"{_step_ms(cap):,.1f} ms"
    paging = next(md.value for md in at.markdown if md.value.startswith("**What limits paging"))
    assert f"caps the batch at {cap} " in paging
    label = "step model: vllm, CUDA graphs, FP8 (e4m3) weights on H100 SXM, TP 8"
    assert f"TPOT and TTFT timed by the {label}" in texts(at.caption)
    assert label in next(m for m in at.metric if m.label == "TPOT at the paged batch").help


def test_the_serving_prediction_is_shown_at_the_paged_batch():
    from planner.serving import BenchmarkSpec, predict_benchmark

    at = _open({**REFERENCE_URL, "length": "1024", "tpot": "0"})
    paged = int(_number(_metric(at, "Users per replica, paged")))
    # same-length requests of 1,023 prompt tokens and 1 output (decoded as 2: TPOT needs two), in waves
    expected = predict_benchmark(LLAMA70_FP8_TP8, VLLM_GRAPHS,
                                 BenchmarkSpec(input_len=1023, output_len=2, concurrency=paged))
    assert _metric(at, "Mean TPOT (serving)") == f"{expected.tpot_s * 1e3:,.1f} ms"
    assert _metric(at, "Mean TTFT (serving)") == f"{expected.ttft_s * 1e3:,.1f} ms"
    ttft = next(m for m in at.metric if m.label == "Mean TTFT (serving)")
    assert ttft.help == f"P90 {expected.p90_ttft_s * 1e3:,.1f} ms"
    assert "decode 2 (TPOT needs two)" in texts(at.caption)


def test_tighter_tpot_serves_fewer_users_and_looser_more():
    at = _open(REFERENCE_URL)
    before = _number(_metric(at, "Users per replica, paged"))
    at.slider(key="planner.tpot_ms").set_value(5).run()
    tighter = _number(_metric(at, "Users per replica, paged"))
    assert tighter < before
    at.slider(key="planner.tpot_ms").set_value(0).run()  # no target: memory caps at 1,506
    assert _metric(at, "Users per replica, paged") == "1,506"  # memory's cap, whole sequences
    assert at.query_params["tpot"] == ["0"] or at.query_params["tpot"] == "0"


def test_bf16_kv_halves_what_fits():
    at = _open({**REFERENCE_URL, "tpot": "0"})
    at.selectbox(key="planner.kv").set_value("bf16").run()
    # 63.175e9 // 40,960 B = 1,542,358 slots: // 32,768 = 47 contiguous (5.9 per GPU of TP 8)
    assert _metric(at, "Users per replica, contiguous") == "47"
    # // 2,048 = 753 paged (94.1 per GPU)
    assert _metric(at, "Users per replica, paged") == "753"


def test_url_written_by_one_session_reopens_identically():
    first = _open(REFERENCE_URL)
    first.slider(key="planner.tpot_ms").set_value(20).run()
    first.select_slider(key="planner.block").set_value(64).run()
    query = {name: (value[0] if isinstance(value, list) else value)
             for name, value in first.query_params.items()}
    assert query["tpot"] == "20" and query["block"] == "64"
    second = _open(query)
    for label in ("Users per replica, paged", "Users per replica, contiguous", "Tokens/s per GPU, paged",
                  "TPOT at the paged batch"):
        assert _metric(second, label) == _metric(first, label)
    edge = _open({**query, "tab": "edge"})
    first.session_state["planner.tab"] = ":material/precision_manufacturing: Edge (robot)"
    first.run()
    assert _metric(edge, "History that fits") == _metric(first, "History that fits")


def _handoff(**fields) -> Handoff:
    values = dict(kv_budget_bytes=10**10, per_token_bytes=131_072, max_context=8192,
                  block_size=16, summary="Llama 3.1 8B", model_name="Llama 3.1 8B",
                  kv_dtype="bf16", gpu_id="h200", n_gpus=1, tp=1, preset_id="llama-3.1-8b",
                  weight_dtype="bf16")
    return Handoff(**{**values, **fields})


def test_sizer_values_carry_over_unless_the_url_says_otherwise():
    at = _open(state={HANDOFF_KEY: _handoff()})
    assert at.selectbox(key="planner.model").value == "llama-3.1-8b"
    assert at.selectbox(key="planner.gpu").value == "h200"
    assert at.select_slider(key="planner.tp").value == 1
    assert at.selectbox(key="planner.kv").value == "bf16"
    assert at.number_input(key="planner.max_context").value == 8192
    url_wins = _open({"model": "qwen2.5-72b"}, state={HANDOFF_KEY: _handoff()})
    assert url_wins.selectbox(key="planner.model").value == "qwen2.5-72b"
    # a manual shape in the sizer (no preset) leaves the planner's own model choice
    manual = _open(state={HANDOFF_KEY: _handoff(preset_id=None, tp=3)})
    assert manual.selectbox(key="planner.model").value == "llama-3.1-70b"
    assert manual.select_slider(key="planner.tp").value == 8


def test_malformed_url_values_fall_back_to_defaults():
    at = _open({"tp": "3", "model": "nope", "tpot": "abc"})
    assert at.select_slider(key="planner.tp").value == 8
    assert at.selectbox(key="planner.model").value == "llama-3.1-70b"


@pytest.mark.parametrize("name, raw, key, default", [
    ("usable", "5", "planner.usable", 0.9),
    ("sigma", "-1", "planner.sigma", 0.8),
    ("prompt", "1e30", "planner.prompt_share", 0.5),
    ("tpot", "nan", "planner.tpot_ms", 50),
    ("ttft", "-5", "planner.ttft_ms", 0),
    ("eff", "7", "planner.efficiency", 0.85),
    ("hz", "0", "planner.control_hz", 5.0),
    ("maxctx", "1e308", "planner.max_context", 32_768),
    ("rate", "inf", "planner.rate", 0.0),
])
def test_hostile_url_values_show_a_notice_and_the_default(name, raw, key, default):
    at = _open({name: raw})  # _open asserts the run raised nothing
    assert at.session_state[key] == default
    assert f"`{name}` ignored" in texts(at.caption)


def test_weights_that_do_not_fit_are_explained_not_crashed():
    at = _open({"model": "llama-3.1-405b", "w": "bf16", "gpu": "l4", "tp": "1"})
    assert _metric(at, "Users per replica, paged") == "0"
    assert any("weights alone" in md.value for md in at.markdown)


def test_bad_harness_json_is_named_and_the_page_falls_back():
    at = _open(state={"planner.bench_json": b"{not json"})
    assert any("Harness JSON" in e.value for e in at.sidebar.error)
    assert any("Datasheet" in info.value or "Shipped" in info.value for info in at.info)


def _valid_bench_json(decode_tbps: float) -> str:
    report = BenchReport(
        schema="kv-cache-explorer.kernels.bench", schema_version=1,
        provenance=Provenance(device="NVIDIA H200", sm_count=132, driver="", cuda="12.8",
                              torch="2.11", triton="3.6.0", python="3.12", date="2025-01-01",
                              command="python -m kernels.bench --json x"),
        ceilings=Ceilings(copy_tbps=4.25, copy_buffer_bytes=2**30, matmul_tflops=700.0,
                          matmul_n=8192),
        targets=tuple(Target(name=s.name, measured=decode_tbps if s.name == "decode_large_tbps"
                             else 1.0, required=s.required, met=True) for s in TARGET_SPECS))
    return report_to_json(report)


def test_a_harness_run_in_session_state_is_used_and_labelled():
    # Reading at half the datasheet's speed slows the edge view's roofline step; the server view's
    # catalogue model is timed by the step model, whose rates are its own measured ones.
    query = {**REFERENCE_URL, "tpot": "0"}
    bench = {"planner.bench_json": _valid_bench_json(2.4).encode()}  # 2.4 / 4.8 = 0.5
    fast, slow = _open({**query, "source": "datasheet"}), _open({**query, "source": "measured"}, state=bench)
    assert any("Harness run on this GPU" in info.value for info in slow.info)
    assert _metric(slow, "TPOT at the paged batch") == _metric(fast, "TPOT at the paged batch")
    fast_edge = _open({**query, "source": "datasheet", "tab": "edge"})
    slow_edge = _open({**query, "source": "measured", "tab": "edge"}, state=bench)
    assert _number(_metric(slow_edge, "Decode step at that context")) > _number(
        _metric(fast_edge, "Decode step at that context"))


def test_edge_view_more_perception_memory_means_less_history():
    at = _open({"tab": "edge"})
    before = _number(_metric(at, "History that fits"))
    at.number_input(key="planner.perception_gb").set_value(20.0).run()
    after = _number(_metric(at, "History that fits"))
    # 12 GB less KV at 128 KiB per token (8B, BF16) and 512 tokens/s:
    # 12e9 / 131,072 / 512 = 178.8 s less history
    assert before - after == pytest.approx(12e9 / 131_072 / 512, abs=0.2)


def test_edge_view_faster_control_loop_binds_first():
    at = _open({"hz": "1", "tab": "edge"})
    assert any("What limits the robot:** memory" in md.value for md in at.markdown)
    at.slider(key="planner.control_hz").set_value(10.0).run()
    assert any("What limits the robot:** control step" in md.value for md in at.markdown)


def test_the_live_kernels_pages_runs_count_as_measured():
    from kernels.bench.records import parse_bench_json

    report = parse_bench_json(_valid_bench_json(2.4))
    at = _open({**REFERENCE_URL, "source": "measured"},
               state={"kernels_session_runs": [report]})
    assert any("Harness run on this GPU" in info.value for info in at.info)


def test_the_table_reads_in_words_and_downloads_as_csv_and_json():
    at = _open(REFERENCE_URL)
    table = at.dataframe[0].value
    assert not any("_" in column for column in table.columns)
    assert "None" not in table.astype(str).to_numpy()
    labels = {b.proto.label for b in at.get("download_button")}
    assert {"Table as CSV", "Plan as JSON (as `python -m planner --json`)"} <= labels


def test_same_length_traffic_says_it_means_one_output_token():
    at = _open(REFERENCE_URL)
    assert "1 output token" in at.selectbox(key="planner.traffic").format_func("fixed")
    assert "one output token" in at.number_input(key="planner.length").help


def test_users_gain_beyond_the_throughput_gain_is_explained():
    # No TPOT target: both allocators run their whole memory batch, the KV reads fill each step
    # and tokens/s hardly moves while paging holds 16× the sequences.
    at = _open({**REFERENCE_URL, "tpot": "0"})
    paged, contiguous = (_number(_metric(at, f"Users per replica, {k}")) for k in ("paged", "contiguous"))
    gain = _number(_metric(at, "Paging's throughput gain"))
    assert paged / contiguous > 10 and gain < 3
    why = next(md.value for md in at.markdown if md.value.startswith("**Why "))
    # 1,506 paged against 94 contiguous sequences per TP-8 replica: 16.0×.
    assert f"{1506 / 94:,.1f}× the users but {gain:.2f}× the tokens/s" in why
    assert _metric(at, "TPOT at the paged batch") in why


def test_the_step_caption_names_the_step_model_not_the_roofline():
    # A catalogue model's steps come from the step model, which times FP8 GEMMs on their own
    # curve: the roofline's caveat about BF16-rate matmuls does not apply.
    for weights in ("fp8", "bf16"):
        text = " ".join(c.value for c in _open({**REFERENCE_URL, "w": weights}).caption)
        assert "Decode step = the step model's kernels" in text and "costed at the BF16 rate" not in text


def test_the_active_tab_is_in_the_url():
    at = _open()
    at.session_state["planner.tab"] = ":material/precision_manufacturing: Edge (robot)"
    at.run()
    assert at.query_params["tab"] == "edge"
    assert any(m.label == "History that fits" for m in at.metric)


def test_the_gain_note_asks_for_a_target_only_when_none_is_set():
    loose = _open({**REFERENCE_URL, "tpot": "100"})  # 100 ms: far above both memory batches' steps
    why = next(md.value for md in loose.markdown if md.value.startswith("**Why "))
    assert "Set a TPOT target" not in why
    assert "100.0 ms target is looser than both steps" in why
    unset = _open({**REFERENCE_URL, "tpot": "0"})
    assert "Set a TPOT target" in next(md.value for md in unset.markdown if md.value.startswith("**Why "))


def test_both_pages_show_the_answers_tpot_from_the_step_model():
    from planner.plan import answer_timing
    from sizing.answer import answer_for
    from sizing.report import SizingRequest, size_deployment

    report = size_deployment(SizingRequest(model="llama-3.1-70b", kv_dtype="fp8", weight_dtype="fp8", context=32_768,
                                           users=100, gpu="h100-sxm", tp=8))
    line = answer_timing(report, answer_for(report)).line
    assert line.startswith("TPOT at the answer's batch: ") and "step model: vllm" in line
    assert line in texts(_open(REFERENCE_URL).caption)
    sizer = open_page("1_sizer.py", {"model": "llama-3.1-70b", "kv": "fp8", "w": "fp8", "ctx": "32768",
                                     "users": "100", "gpu": "h100-sxm", "tp": "8", "ngpu": "8"})
    assert line in texts(sizer.caption)


def test_the_table_counts_whole_users_per_gpu_and_says_what_the_figure_means():
    import json

    at = _open({**REFERENCE_URL, "tpot": "0"})
    element = next(e for e in at.dataframe if "Operating batch" in e.value.columns)
    table = element.value.set_index("Operating batch")
    # No TPOT target: each allocator runs its memory batch at TP 8, 94 contiguous and 1,506 paged;
    # 94 / 8 = 11.75 and 1,506 / 8 = 188.25 users per GPU, of which whole users: 11 and 188.
    assert table.loc["94", "Users per GPU (whole)"] == "11"
    assert table.loc["1,506", "Users per GPU (whole)"] == "188"
    assert "rounded down" in json.loads(element.proto.columns)["Users per GPU (whole)"]["help"]
    # Shares are in percent like every other table: 2,048 of 32,768 reserved slots hold tokens.
    assert float(table.loc["94", "KV utilisation (%)"]) == pytest.approx(100 * 2048 / 32768, abs=0.1)


@pytest.mark.parametrize("content, message", [
    (b"prompt_tokens,output_tokens\n10,-5\n", "row 1, column output_tokens: negative value (-5)"),
    (b"a,b\n1,2\n", "missing prompt column"),
])
def test_a_refused_trace_upload_names_the_widget_not_the_field(content, message):
    at = _open({"traffic": "trace"})
    at.file_uploader(key="planner.trace_upload").set_value(("bad.csv", content, "text/csv")).run()
    errors = [e.value for e in at.error]
    # The simulator refuses it under its field "trace"; the page says "Trace", once.
    assert len(errors) == 1 and errors[0].startswith(f"**Trace**: {message}"), errors
    assert "trace:" not in errors[0]


def test_allocators_and_formats_go_by_their_glossary_names():
    at = _open(REFERENCE_URL)
    table = next(d.value for d in at.dataframe if "Allocator" in d.value.columns).set_index("Allocator")
    # The names every page uses, each beside the setting it ran with (max context 32,768, blocks of 16).
    assert table.loc["Contiguous, reserve the maximum (Orca-Max)", "Setting"] == \
        "contiguous, reserving 32,768 tokens (Orca-Max)"
    assert table.loc["Paged (vLLM blocks)", "Setting"] == "paged, 16-token blocks"
    chart = next(f for f in figures(at) if len(f["data"]) > 2)
    assert {t["name"] for t in chart["data"] if t["mode"] == "markers"} == {
        "Contiguous, reserve the maximum (Orca-Max)", "Paged (vLLM blocks)"}
    weights = at.selectbox(key="planner.w").options
    assert {"BF16", "FP8 (e4m3)", "FP8 (e4m3, 128 × 128 blocks)", "INT4 (GPTQ, g128)"} <= set(weights)
    assert "Oracle" in at.selectbox(key="planner.policy").help

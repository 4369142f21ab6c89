"""AppTest of the fragmentation explorer: reference figures, widgets that move them, bad uploads,
the URL round trip and the sizer hand-off."""

import base64
import json
import threading
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from glossary import ALLOCATOR_LABELS, POLICY_LABELS
from simulation.explorer import PrefixView
from sizing.report import Handoff
from support import apptest
from support.apptest import figures as charts
from support.apptest import metric_number as metric
from support.gates import cancelled_by_another_session, held_by_another_session
from ui.fragmentation_charts import prefix_sweep_figure
from ui.gpu_lock import GpuGate
from ui.run_feedback import GATE_HOOK, cancel_key

PAGE = "2_fragmentation.py"
GOOD_TRACE = b"arrived_at,num_prefill_tokens,num_decode_tokens\n" + b"".join(
    b"%d,%d,%d\n" % (i, 1000 + 37 * i, 50 + i) for i in range(200))


def open_page(query: dict | None = None, session: dict | None = None) -> AppTest:
    return apptest.open_page(PAGE, query=query, session=session)


def table(at: AppTest, column: str) -> pd.DataFrame:
    """The table on screen with ``column``; its text cells read back as numbers where they are."""
    frame = next(df.value for df in at.dataframe if column in df.value.columns)
    return frame.apply(lambda col: pd.to_numeric(col.str.replace(",", ""), errors="coerce").fillna(col)
                       if col.dtype == object else col)


def array(values) -> np.ndarray:
    """Plotly 7 ships numeric arrays as {"dtype", "bdata" (base64)}; plain lists otherwise."""
    if isinstance(values, dict):
        # Plotly picks the narrowest dtype (int16 here): widen before doing arithmetic.
        return np.frombuffer(base64.b64decode(values["bdata"]), dtype=values["dtype"]).astype(np.float64)
    return np.asarray(values)


def test_defaults_show_the_reference_page_figures():
    at = open_page()
    # Problem 4: 471.25 GiB, 160 KiB per token, 32K context, requests averaging 2,048 tokens.
    assert metric(at, "Requests that fit: contiguous") == 94
    assert metric(at, "Requests that fit: paged") == pytest.approx(1500, rel=0.03)
    assert metric(at, "Utilisation: contiguous") == pytest.approx(6.25, abs=0.5)
    assert metric(at, "Utilisation: paged") == pytest.approx(99.6, abs=0.1)
    assert metric(at, "Empty slots per request: paged") == pytest.approx(7.5, abs=1.0)
    figures = charts(at)
    assert len(figures) == 3  # the snapshot tab only: the other tabs run when they are opened
    picture = figures[0]
    assert len(picture["data"]) == 4 and all(array(trace["x"]).size == 40 for trace in picture["data"])
    tokens, reserved_empty, _, last_block_empty = (array(trace["x"]) for trace in picture["data"])
    # Contiguous: every request reserves the 32,768-token context; paged red slivers are ≤ B − 1 = 15.
    np.testing.assert_array_equal(tokens + reserved_empty, 32_768)
    assert last_block_empty.max() <= 15 and last_block_empty.min() >= 0


def test_mean_slider_and_block_size_move_the_numbers():
    at = open_page()
    paged_at_2048 = metric(at, "Requests that fit: paged")
    at.slider(key="frag.mean").set_value(1024).run()
    assert not at.exception
    # Half the tokens per request: about twice as many fit when paged; contiguous is unchanged.
    assert metric(at, "Requests that fit: paged") / paged_at_2048 == pytest.approx(2.0, rel=0.05)
    assert metric(at, "Requests that fit: contiguous") == 94
    at.select_slider(key="frag.block").set_value(256).run()
    # 256-token blocks leave about 127.5 empty slots per sequence.
    assert metric(at, "Empty slots per request: paged") == pytest.approx(127.5, rel=0.1)
    at.radio(key="frag.policy").set_value("oracle").run()
    oracle_buddy = metric(at, "Requests that fit: contiguous")
    assert oracle_buddy > 1000
    # First fit reserves exactly prompt + output: no power-of-two rounding, so more fit than with
    # the buddy allocator (whose chunks average ~1.4× the request for spread-out lengths).
    at.radio(key="frag.space").set_value("first-fit").run()
    assert metric(at, "Requests that fit: contiguous") > 1.2 * oracle_buddy
    assert metric(at, "Utilisation: contiguous") == 100


def test_lognormal_by_median_and_p90():
    at = open_page(query={"src": "Log-normal (median, P90)", "median": "2048", "p90": "2048"})
    # Median = P90: sigma 0, every request exactly 2,048 tokens (a multiple of 16): no paged waste.
    assert metric(at, "Empty slots per request: paged") == 0
    assert metric(at, "Utilisation: paged") == 100
    # The page's default budget: 471.25 GiB / 160 KiB = 3,088,384 slots; // 2,048 = 1,508.
    assert 471.25 * 2**30 // (160 * 1024) == 3_088_384
    assert metric(at, "Requests that fit: paged") == 3_088_384 // 2048 == 1508


def test_upload_good_then_bad_keeps_previous_results():
    at = open_page()
    at.selectbox(key="frag.source").set_value("Upload a CSV").run()
    at.file_uploader(key="frag.upload").set_value(("trace.csv", GOOD_TRACE, "text/csv")).run()
    assert not at.exception and not at.error
    fit_before = metric(at, "Requests that fit: paged")
    utilisation_before = metric(at, "Utilisation: paged")
    bad = b"arrived_at,num_prefill_tokens,num_decode_tokens\n0,10,5\n1,-4,5\n"
    at.file_uploader(key="frag.upload").set_value(("bad.csv", bad, "text/csv")).run()
    assert not at.exception
    assert len(at.error) == 1 and "row 2, column num_prefill_tokens" in at.error[0].value
    assert metric(at, "Requests that fit: paged") == fit_before
    assert metric(at, "Utilisation: paged") == utilisation_before
    for content, message in [(b"\x00\x01binary", "not a CSV"), (b"a,b\n1,2\n", "missing prompt column"),
                             (b"prompt_tokens,output_tokens\n5,x\n", "row 1, column output_tokens")]:
        at.file_uploader(key="frag.upload").set_value(("x.csv", content, "text/csv")).run()
        assert message in at.error[0].value
        assert metric(at, "Requests that fit: paged") == fit_before


def test_url_reopens_identically():
    at = open_page()
    at.slider(key="frag.mean").set_value(4096).run()
    at.select_slider(key="frag.block").set_value(32).run()
    at.radio(key="frag.policy").set_value("pow2").run()
    query = dict(at.query_params)
    assert query["mean"] == "4096" and query["block"] == "32" and query["policy"] == "pow2"
    again = open_page(query={k: v for k, v in query.items()})
    for label in ("Requests that fit: contiguous", "Requests that fit: paged", "Utilisation: paged"):
        assert metric(again, label) == metric(at, label)
    assert again.slider(key="frag.mean").value == 4096


def test_sizer_hand_off_is_used_and_named():
    # The paper's Orca-Max case handed over by the sizer: 12 GiB at 800 KiB per token, 2,048 max.
    session = {"handoff.sizer": Handoff(kv_budget_bytes=12 * 2**30, per_token_bytes=800 * 1024, max_context=2048,
                                        block_size=16, summary="OPT-13B, 12 GiB of KV")}
    at = open_page(session=session)
    assert any("From the sizer: OPT-13B, 12 GiB of KV" in info.value for info in at.info)
    assert metric(at, "Requests that fit: contiguous") == 7
    # An explicit budget in the URL wins over the hand-off.
    explicit = open_page(query={"budget": "tokens", "tokens": "65536", "ctx": "2048"}, session=session)
    assert not any("From the sizer" in info.value for info in explicit.info)
    assert metric(explicit, "Requests that fit: contiguous") == 32


def test_over_time_contiguous_max_queues_where_paging_does_not():
    at = open_page(query={"budget": "tokens", "tokens": "200000", "n": "2000", "rate": "5", "tab": "timeline"})
    assert metric(at, "Completed") == 2000
    paged_wait = metric(at, "Mean wait")
    paged_batch = metric(at, "Mean batch size")
    at.selectbox(key="frag.allocator").set_value("contiguous-max").run()
    assert not at.exception
    # 200,000 slots hold six 32,768-slot reservations: the batch is capped and requests queue.
    assert metric(at, "Mean batch size") <= 6
    assert metric(at, "Mean batch size") < paged_batch
    assert metric(at, "Mean wait") > paged_wait
    assert metric(at, "Preemptions") == 0
    at.radio(key="frag.space").set_value("first-fit").run()
    assert not at.exception and metric(at, "Completed") == 2000
    assert at.query_params["space"] == "first-fit"
    memory = charts(at)[0]
    at.toggle(key="frag.compare").set_value(True).run()
    assert not at.exception
    compared = table(at, "Allocator")
    named = dict(zip(compared["Allocator"], compared["Token share of used memory (%)"]))
    shares = {value: named[label] for value, label in ALLOCATOR_LABELS.items()}
    # Over time, as in the paper's figure 2: paging keeps most used memory in token states,
    # reserving the maximum context wastes most of it (shown to one decimal of a percent).
    assert shares["paged"] > 90 > 30 > shares["contiguous-max"]
    assert shares["contiguous-max"] < shares["contiguous-pow2"] <= shares["contiguous-oracle"] + 0.1
    assert {trace["name"] for trace in memory["data"]} >= {"token states", "internal fragmentation", "free"}


def test_sharing_and_block_table_by_hand():
    at = open_page(query={"tab": "sharing"})
    sampling = table(at, "Blocks with sharing").iloc[0]
    # Prompt 500, B = 16, 4 samples of 200: 31 shared blocks + 4 × ⌈(4 + 200)/16⌉ = 83 against
    # 4 × ⌈700/16⌉ = 176 unshared.
    assert sampling["Blocks with sharing"] == 83 and sampling["Blocks without sharing"] == 176
    at = open_page(query={"tab": "blocks"})
    labels = [b.proto.label for b in at.get("download_button")]
    assert len(labels) == len(set(labels)), labels  # two tables, two buttons that say which is which
    assert {"Block tables as CSV", "Events as CSV"} <= set(labels)
    events = table(at, "Logical block")  # the event log's fields in words, not logical_block
    assert not any("_" in column for column in events.columns)
    at.number_input(key="frag.bt_pos").set_value(9).run()
    text = " ".join(md.value for md in at.markdown)
    # Default block-table view: B = 4, so p = 9 is logical block 2, offset 1.
    assert "logical block p // B = 2, offset p % B = 1" in text


@pytest.mark.parametrize("name, value", [
    ("n", "50"), ("mean", "-1"), ("sigma", "nan"), ("bts", "99999999999"), ("btq", "-1"),
    ("sout", "10000"), ("n", "200000"),
])
def test_hostile_link_parameters_fall_back_with_a_notice(name, value):
    at = open_page(query={name: value})
    notices = [c.value for c in at.caption if "Link parameter" in c.value]
    assert len(notices) == 1 and f"`{name}`" in notices[0], notices
    # The default view is shown instead: the reference page's problem 4.
    assert metric(at, "Requests that fit: contiguous") == 94
    assert name not in at.query_params


def test_oversized_upload_is_refused_with_a_short_error():
    at = open_page()
    at.selectbox(key="frag.source").set_value("Upload a CSV").run()
    long_field = b"arrived_at,num_prefill_tokens,num_decode_tokens\n0," + b"7" * 1_000_000 + b",5\n"
    at.file_uploader(key="frag.upload").set_value(("long.csv", long_field, "text/csv")).run()
    assert not at.exception
    assert len(at.error) == 1 and "row 1, column num_prefill_tokens" in at.error[0].value
    assert len(at.error[0].value) < 300


def test_paper_figure2_tab_shows_the_published_and_simulated_bars():
    at = open_page(query={"tab": "paper"})
    paper = table(at, "System")
    # The paper's Orca (Max), (Pow2), (Oracle) and vLLM, by the names the rest of the page gives them.
    assert list(paper["System"]) == list(ALLOCATOR_LABELS.values())
    # The published figures (the paper's figure 2) sit beside the simulated ones, within 8 points.
    assert list(paper["Token states (paper)"]) == [20.4, 26.8, 38.2, 96.3]
    assert (abs(paper["Token states (sim.)"] - paper["Token states (paper)"]) <= 8).all()
    assert paper.loc[2, "Internal fragmentation (sim.)"] == 0  # Oracle
    assert "None" not in paper.astype(str).to_numpy()  # vLLM's unpublished categories read "—"
    captions = " ".join(c.value for c in open_page().caption)
    assert "Internal fragmentation" in captions and "Orca-Pow2 and Orca-Oracle differ only where" in captions


def test_prefix_tab_by_hand_and_block_size_in_the_url():
    at = open_page(query={"budget": "tokens", "tokens": "400000", "pfs": "1000", "pfu": "50", "pfn": "20",
                          "pfo": "20", "tab": "prefix"})
    # 19 later requests each take 62 full blocks (992 tokens) of the 1,000-token prefix from the cache.
    assert metric(at, "Prefill tokens saved") == 19 * 992
    assert metric(at, "Prompt tokens from the cache") == pytest.approx(100 * 19 * 992 / (20 * 1050), abs=0.1)
    at.select_slider(key="frag.block").set_value(256).run()
    assert not at.exception
    # 1,000 // 256 = 3 full blocks = 768 tokens per later request.
    assert metric(at, "Prefill tokens saved") == 19 * 768
    assert at.query_params["block"] == "256" and at.query_params["pfu"] == "50"


def test_over_time_with_a_model_step_time_and_scheduler_limits():
    at = open_page(query={"budget": "tokens", "tokens": "200000", "n": "1000", "rate": "5", "stepsrc": "model",
                          "smodel": "llama-3.1-8b", "sgpu": "h100-sxm", "batch": "16", "mbt": "512",
                          "tab": "timeline"})
    assert not at.exception
    assert metric(at, "Completed") == 1000
    assert metric(at, "Mean batch size") <= 16
    # Llama-3.1-8B in BF16 on an H100 SXM: ≥ 16 GB of weights read per step at 3.35 TB/s ≥ 4.8 ms.
    assert metric(at, "Mean TPOT") >= 4.8


def test_the_active_tab_is_in_the_url_and_reopens():
    at = open_page()
    assert "tab" not in at.query_params  # the default tab leaves the link short
    at.session_state["frag.tab"] = ":material/timeline: Over time"
    at.run()
    assert at.query_params["tab"] == "timeline"
    assert any(m.label == "Completed" for m in at.metric)
    again = open_page(query={"tab": "timeline"})
    assert any(m.label == "Completed" for m in again.metric)
    assert not any(m.label == "Requests that fit: paged" for m in again.metric)
    refused = open_page(query={"tab": "nonsense"})
    assert any("`tab`" in c.value for c in refused.caption)
    assert metric(refused, "Requests that fit: contiguous") == 94


def test_why_paging_wins_is_said_in_the_snapshots_own_numbers():
    at = open_page()
    why = next(md.value for md in at.markdown if "Why paging wins here" in md.value)
    fit_contiguous = f"{metric(at, 'Requests that fit: contiguous'):,.0f} requests fit"
    fit_paged = f"{metric(at, 'Requests that fit: paged'):,.0f} requests fit"
    assert fit_contiguous in why and fit_paged in why
    assert "at most B − 1 = 15" in why and "Max reserves the whole context" in why


def test_snapshot_offers_csv_json_and_png_downloads():
    at = open_page()
    labels = {b.proto.label for b in at.get("download_button")}
    assert {"Summary as CSV", "Snapshot as JSON"} <= labels
    for chart in at.get("plotly_chart"):  # plotly's own export: a PNG named after the chart
        options = json.loads(chart.proto.config)["toImageButtonOptions"]
        assert options["format"] == "png" and options["filename"]


def test_shares_read_in_one_style_beside_the_tables_percent_headers():
    at = open_page()
    texts = {m.label: m.value for m in at.metric}
    # Problem 4: paged 16-token blocks hold 99.6 % of their slots; written "99.6 %", as the
    # kernel page's "96 %" and the tables' "(%)" headers, not "99.6%".
    assert texts["Utilisation: paged"] == "99.6 %"
    assert texts["Utilisation: contiguous"].endswith(" %")
    why = next(md.value for md in at.markdown if "Why paging wins here" in md.value)
    assert "99.6 % holds tokens" in why and "%" not in why.replace(" %", "")


# ---- long runs: stale marking, cancel, the queue -------------------------------------------------
SMALL_RUN = {"budget": "tokens", "tokens": "200000", "n": "2000", "rate": "5", "tab": "timeline"}


def test_a_cancelled_run_keeps_the_last_results_marked_stale():
    at = open_page(query={**SMALL_RUN, "seed": "101"})
    wait_before = metric(at, "Mean wait")
    # A Cancel click asks for a new script run and sets this flag on the way in (its callback);
    # Streamlit stops the running simulation at its next progress call (the browser test).
    at.session_state[cancel_key("timeline")] = True
    at.number_input(key="frag.seed").set_value(102).run()
    assert not at.exception
    assert "Run cancelled" in at.warning[0].value and "last finished run's" in at.warning[0].value
    assert metric(at, "Mean wait") == wait_before and len(charts(at)) == 3  # seed 101's figures, still there
    stale = next(c.value for c in at.caption if "**Stale**" in c.value)
    assert "opacity: 0.45" in stale and "run-results-timeline-main" in stale  # the figures are dimmed
    at.run()  # any other rerun leaves the cancelled run cancelled
    assert "Run cancelled" in at.warning[0].value and metric(at, "Mean wait") == wait_before
    at.button(key="run.timeline.main.again").click().run()
    assert not at.warning and metric(at, "Completed") == 2000
    assert metric(at, "Mean wait") != wait_before  # seed 102's arrivals now


def test_a_cancel_asked_of_the_gate_stops_the_comparison_between_steps():
    gate = GpuGate()
    at = open_page(query={**SMALL_RUN, "seed": "103"}, session={GATE_HOOK: gate})
    with cancelled_by_another_session(gate):
        at.toggle(key="frag.compare").set_value(True).run()
    assert not at.exception
    assert "Run cancelled" in at.warning[0].value and "no earlier result" in at.warning[0].value
    assert not any("Allocator" in df.value.columns for df in at.dataframe)  # no comparison half drawn
    assert metric(at, "Completed") == 2000  # the run above it stands
    assert not gate.status().busy


def test_a_run_queued_behind_another_session_says_so():
    gate = GpuGate()
    holding = threading.Event()

    def other_session():
        with gate.hold("comparing the four allocators"):
            holding.set()
            threading.Event().wait(1.5)  # the page reaches its run well within this, then queues

    thread = threading.Thread(target=other_session)
    thread.start()
    assert holding.wait(5)
    at = open_page(query={**SMALL_RUN, "seed": "104"}, session={GATE_HOOK: gate})
    thread.join(5)
    queued = next(c.value for c in at.caption if "queued" in c.value)
    assert "behind another session's run" in queued and metric(at, "Completed") == 2000


PREFIX_RUN = {"budget": "tokens", "tokens": "400000", "pfs": "1000", "pfu": "50", "pfn": "20", "pfo": "20",
              "tab": "prefix"}


def test_the_prefix_run_stops_between_steps_and_keeps_the_last_figures_marked_stale():
    gate = GpuGate()
    at = open_page(query={**PREFIX_RUN, "seed": "201"}, session={GATE_HOOK: gate})
    assert metric(at, "Prefill tokens saved") == 19 * 992  # 62 full 16-token blocks of the 1,000-token prefix
    with cancelled_by_another_session(gate):
        at.number_input(key="frag.pf_requests").set_value(30).run()  # 29 later requests: 28,768 tokens
    assert not at.exception and not gate.status().busy
    assert "Run cancelled" in at.warning[0].value and "last finished run's" in at.warning[0].value
    assert metric(at, "Prefill tokens saved") == 19 * 992  # the 20-request run's figures, still there
    stale = next(c.value for c in at.caption if "**Stale**" in c.value)
    assert "run-results-prefix-main" in stale and "opacity: 0.45" in stale
    at.button(key="run.prefix.main.again").click().run()
    assert not at.warning and metric(at, "Prefill tokens saved") == 29 * 992


def _set_large_sharing(at: AppTest) -> None:
    """100 requests of a 2,000-token system prompt and 1,000 own tokens at B = 1: about 300,000
    block-manager calls, over the threshold below which a sharing run skips the queue."""
    at.number_input(key="frag.share_requests").set_value(100)
    at.number_input(key="frag.user").set_value(1000)
    at.number_input(key="frag.system").set_value(2000)
    at.select_slider(key="frag.block").set_value(1)


def test_a_large_sharing_run_stops_between_steps_and_keeps_the_last_figures():
    gate = GpuGate()
    at = open_page(query={"tab": "sharing", "seed": "211"}, session={GATE_HOOK: gate})
    assert table(at, "Blocks with sharing").iloc[0]["Blocks with sharing"] == 83  # 31 + 4 × 13 at B = 16
    with cancelled_by_another_session(gate):
        _set_large_sharing(at)
        at.run()
    assert not at.exception and not gate.status().busy
    assert "Run cancelled" in at.warning[0].value and "last finished run's" in at.warning[0].value
    assert table(at, "Blocks with sharing").iloc[0]["Blocks with sharing"] == 83
    assert "run-results-sharing-main" in next(c.value for c in at.caption if "**Stale**" in c.value)


def test_a_large_sharing_run_queues_behind_another_session_and_a_small_one_does_not():
    gate = GpuGate()
    with held_by_another_session(gate) as release:
        at = open_page(query={"tab": "sharing", "seed": "212"}, session={GATE_HOOK: gate})
        # The default scenarios take milliseconds: they run at once, beside the other session's run.
        assert gate.status().busy and not any("queued" in c.value for c in at.caption)
        assert table(at, "Blocks with sharing").iloc[0]["Blocks with sharing"] == 83
        _set_large_sharing(at)
        threading.Timer(1.0, release.set).start()  # the page reaches its run well within this, then queues
        at.run()
    queued = next(c.value for c in at.caption if "queued" in c.value)
    assert "behind another session's run" in queued
    # B = 1: 500 + 4 × 200 = 1,300 blocks shared against 4 × 700 = 2,800.
    assert table(at, "Blocks with sharing").iloc[0]["Blocks with sharing"] == 1300


# ---- the sidebar follows the open tab --------------------------------------------------------------
SIDEBAR = {"frag.source": "selectbox", "frag.mean": "slider", "frag.sigma": "slider",
           "frag.prompt_share": "slider", "frag.n": "number_input", "frag.seed": "number_input",
           "frag.budget_mode": "radio", "frag.gib": "number_input", "frag.ptb": "number_input",
           "frag.context": "select_slider", "frag.block": "select_slider", "frag.space": "radio"}
WORKLOAD = {"frag.source", "frag.mean", "frag.sigma", "frag.prompt_share", "frag.n"}


@pytest.mark.parametrize("tab, unused", [
    ("snapshot", set()),
    # Figure 2 is the paper's fixed setting: nothing in the sidebar reaches it.
    ("paper", set(SIDEBAR)),
    # Prefix caching draws its own conversations and runs paged.
    ("prefix", WORKLOAD | {"frag.space"}),
    # The block table has its own block size; it reads the seed and the bytes per token.
    ("blocks", WORKLOAD | {"frag.gib", "frag.context", "frag.block", "frag.space"}),
    ("sharing", WORKLOAD | {"frag.budget_mode", "frag.gib", "frag.ptb", "frag.context", "frag.space"}),
])
def test_sidebar_controls_the_open_tab_does_not_read_are_disabled(tab, unused):
    at = open_page(query={"tab": tab})
    disabled = {key for key, kind in SIDEBAR.items() if getattr(at, kind)(key=key).disabled}
    assert disabled == unused
    notes = " ".join(c.value for c in at.sidebar.caption)
    assert ("apply here" in notes) == bool(unused)


# ---- one look per line, one name per allocator -------------------------------------------------
def test_prefix_lines_that_coincide_are_drawn_apart_and_said_to_coincide():
    at = open_page(query={"tab": "prefix"})
    sweep = next(f for f in charts(at) if "Hit rate against block size" in str(f["layout"]["title"]))
    lines = sweep["data"]
    # 400 requests of a 1,000-token prefix: a quarter of the 3,088,378-slot budget evicts nothing
    # either, so both budgets give the same hit rate at every block size.
    assert len(lines) == 2
    np.testing.assert_array_equal(array(lines[0]["y"]), array(lines[1]["y"]))
    assert lines[0]["line"]["dash"] != lines[1]["line"]["dash"]
    assert lines[0]["marker"]["symbol"] != lines[1]["marker"]["symbol"]
    assert lines[1]["marker"]["size"] > lines[0]["marker"]["size"]  # an open ring round the other's dot
    assert "The lines coincide" in sweep["layout"]["title"]["subtitle"]["text"]


def test_prefix_lines_that_differ_carry_no_coincidence_note():
    # A quarter budget that evicts: 20 % and 10 % of prompt tokens from the cache against 80 % and 60 %.
    view = PrefixView(result=None, without_cpu=None, sweep_blocks=(16, 64), sweep_budgets=(1000, 4000),
                      sweep_hit_rate=np.array([[0.2, 0.1], [0.8, 0.6]]), sweep_evictions=np.zeros((2, 2)))
    assert not prefix_sweep_figure(view).layout.title.subtitle.text
    same = replace(view, sweep_hit_rate=np.array([[0.8, 0.6], [0.8, 0.6]]))
    assert prefix_sweep_figure(same).layout.title.subtitle.text.startswith("The lines coincide")


def test_each_allocator_has_one_name_on_the_page():
    at = open_page(query={"tab": "timeline", **{k: SMALL_RUN[k] for k in ("budget", "tokens", "n")}})
    assert at.selectbox(key="frag.allocator").options == list(ALLOCATOR_LABELS.values())
    snapshot = open_page()
    assert snapshot.radio(key="frag.policy").options == list(POLICY_LABELS.values())
    assert list(table(snapshot, "Scheme")["Scheme"]) == list(ALLOCATOR_LABELS.values())

"""AppTest of the live kernel page in both modes.

No-GPU mode: the page says so, shows the shipped results (here the synthetic fixture in
tests/data, whose figures are invented round numbers) with their provenance, validates uploads,
and runs the kernels under the Triton interpreter. GPU mode: CI has no GPU, so the kernel layer
is substituted through ``st.session_state["kernels_backend"]`` by a backend that returns the
recorded fixture; the page's run, progress, OOM and cancellation paths are the real ones.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

from kernels.bench.live import Backend
from kernels.bench.records import read_bench_file
from kernels.bench.shipped import RESULTS_DIR
from kernels.runtime import interpreter_active
from support.apptest import figures as _figures
from support.apptest import metric_text as _metric
from support.apptest import open_page
from support.apptest import texts as _texts
from support.paths import FIXTURES
from support.gates import held_by_another_session
from ui.gpu_lock import GpuGate

FIXTURE = FIXTURES / "kernels_bench_synthetic.json"


def _download_labels(at) -> list[str]:
    return [b.proto.label for b in at.get("download_button")]


def _refuse(plan, progress):
    raise AssertionError("the no-GPU page must not try to time anything")


CPU = Backend(gpu=False, device="cpu (Triton interpreter)", run=_refuse)


def _app(backend: Backend, shipped_dir: Path = FIXTURE.parent, **state) -> AppTest:
    session = {"kernels_backend": backend, "kernels_shipped_dir": str(shipped_dir), **state}
    return open_page("3_kernels.py", session=session, timeout=180, run=False)


# ---------------------------------------------------------------------------------- no GPU


def test_no_gpu_says_so_and_shows_shipped_results_with_provenance():
    at = _app(CPU).run()
    assert not at.exception
    assert "No CUDA GPU on this machine" in _texts(at.info)
    assert "synthetic fixture" in _texts(at.markdown)  # provenance of the shipped file
    assert at.radio(key="k_source").value.startswith("Shipped: kernels_bench_synthetic.json")
    # The default shape B=8 L=32K is not in the fixture: the nearest (same heads, B=1 L=32K) is
    # shown with a caption; the fixture's kernel runs at 3.6 TB/s there.
    assert "not in these results" in _texts(at.caption)
    assert at.selectbox(key="k_pick_decode").value == 1
    assert _metric(at, "Achieved TB/s") == "3.60"
    assert _metric(at, "Share of measured ceiling") == "90 %"  # 3.6 of the fixture's 4.0 TB/s


def test_shipped_run_names_its_software_and_hides_the_run_machines_paths():
    at = _app(CPU, shipped_dir=RESULTS_DIR).run()
    assert not at.exception
    shown = _texts(at.markdown) + _texts(at.caption)
    assert "command `python -m kernels.bench --json " in shown
    assert "/root/" not in shown and "/opt/" not in shown
    # This machine's torch is not the H200 run's 2.11: the page says which versions the figures ran on.
    assert "these results ran on torch 2.11.0+cu130, triton 3.6.0" in shown
    assert not [e for e in at.expander if "not harness results" in e.label]


def test_roofline_places_decode_at_its_intensity():
    at = _app(CPU).run()
    roof = next(f for f in _figures(at) if f["layout"]["title"]["text"].startswith("Roofline"))
    kernel = next(t for t in roof["data"] if t["name"] == "Triton paged decode")
    # 32 query heads on 8 KV heads in bf16: 4 FLOP per KV byte; 3.6 TB/s × 4 = 14.4 TFLOP/s.
    assert kernel["x"][0] == pytest.approx(4.0)
    assert kernel["y"][0] == pytest.approx(14.4, rel=1e-3)
    gather = next(t for t in roof["data"] if t["name"] == "gather pages, then SDPA")
    assert gather["x"][0] == pytest.approx(4.0 / 3)  # reads pages, writes and re-reads the copy
    roofs = [t for t in roof["data"] if t["name"].startswith("roof")]
    assert len(roofs) == 2  # measured and datasheet


def test_sweep_and_memory_views_from_shipped_results():
    at = _app(CPU)
    at.query_params["batch"] = "1"
    at.query_params["len"] = "4096"
    at.run()
    titles = [f["layout"]["title"]["text"] for f in _figures(at)]
    assert any("against context (batch 1)" in t for t in titles)
    assert any("against batch (context 4096)" in t for t in titles)
    mem = next(f for f in _figures(at) if f["layout"]["title"]["text"].startswith("Naive against tiled"))
    assert any("out of memory" in t["name"] for t in mem["data"])  # naive's OOM is drawn, not crashed on
    assert "N = 32,768: naive softmax(QKᵀ)V → out of memory" in _texts(at.warning)


def test_theory_beside_measurement_for_prefill():
    at = _app(CPU)
    at.query_params["kernel"] = "prefill"
    at.query_params["len"] = "4096"
    at.query_params["hkv"] = "32"
    at.query_params["batch"] = "4"
    at.run()
    assert not at.exception
    assert at.radio(key="kernels.kernel").value == "prefill"
    table = at.dataframe[1].value  # theory beside measurement
    text = " ".join(table["Model or measurement"])
    # N = 4096 → S is 4096² × 2 B = 32 MiB per head; 4 × 32 heads → 4 GiB for the shape.
    assert "32.0 MiB / 4.00 GiB" in text
    assert "memory-bound" in text and "compute-bound" in text
    assert any(q.startswith("measured: Triton tiled forward") for q in table["Quantity"])


def test_no_shipped_results_and_uploads(tmp_path):
    at = _app(CPU, shipped_dir=tmp_path).run()
    assert "no shipped results were found" in _texts(at.info)
    at.file_uploader(key="k_upload").upload("broken.json", b"{not json", "application/json").run()
    assert "is not a readable kernels.bench result: not valid JSON" in _texts(at.error)
    at.file_uploader(key="k_upload").set_value(
        ("foreign.json", json.dumps({"schema": "someone-else", "rows": []}).encode(), "application/json")).run()
    assert "schema is 'someone-else'" in _texts(at.error)
    at.file_uploader(key="k_upload").set_value(("mine.json", FIXTURE.read_bytes(), "application/json")).run()
    assert not at.error
    assert at.radio(key="k_source").value == "Uploaded: mine.json"
    assert _metric(at, "Achieved TB/s") == "3.60"


@pytest.mark.skipif(not interpreter_active(), reason="the toy run is the no-GPU path: Triton "
                    "compiles for the GPU in a process that has one (seen failing on the H200)")
def test_interpreter_run_at_toy_size():
    at = _app(CPU).run()
    at.button(key="k_interp").click().run()
    assert not at.exception
    rows = at.dataframe[-1].value  # the correctness tab is drawn last
    assert set(rows["Kernel"]) == {"paged decode", "tiled forward", "chunked prefill"}
    assert (rows["Within tolerance"] == "yes").all()
    assert (rows["Max abs error"].astype(float) > 0).all()  # a real low-precision computation, not a copy
    assert "checks within tolerance" in _texts(at.success)


def test_online_softmax_walkthrough():
    at = _app(CPU).run()
    slider = at.slider(key="kernels.view.sm_step")
    # N 32, query tile 16, key tile 8: 2 query blocks × 4 key tiles.
    assert slider.max == 8
    slider.set_value(8).run()
    assert float(_metric(at, "Max |tiled − naive|")) < 1e-5
    # (4Nd + 4N²) × 2 B at N = 32, d = 16; tiled: (2Nd + 2·2·Nd) × 2 B with 2 query blocks.
    assert _metric(at, "HBM bytes, naive (FP16)") == "12,288"
    assert _metric(at, "HBM bytes, tiled (FP16)") == "6,144"
    assert "last tile of this block" in _texts(at.markdown)


def test_bad_head_ratio_is_reported():
    at = _app(CPU)
    at.query_params["hq"] = "8"
    at.query_params["hkv"] = "16"  # falls through: 8 % 16 != 0
    at.run()
    assert not at.exception
    assert "cannot share 16 KV heads evenly" in _texts(at.error)


def test_link_values_outside_the_options_are_ignored_with_a_notice():
    at = _app(CPU)
    at.query_params["batch"] = "3"  # not one of the batch options
    at.query_params["kernel"] = "prefill"
    at.query_params["dtype"] = "fp8"  # a decode-only dtype
    at.run()
    assert not at.exception
    notices = _texts(at.warning)
    assert "Link parameter `batch` ignored" in notices and "Link parameter `dtype` ignored" in notices
    assert at.selectbox(key="kernels.batch").value == 8 and at.selectbox(key="kernels.dtype_prefill").value == "bf16"


def test_switching_kernel_drops_the_other_kernels_link_values_silently():
    at = _app(CPU)
    at.query_params["dtype"] = "fp8"
    at.run()
    assert at.selectbox(key="kernels.dtype_decode").value == "fp8"
    at.radio(key="kernels.kernel").set_value("prefill").run()
    assert not at.exception
    assert at.selectbox(key="kernels.dtype_prefill").value == "bf16"
    assert "ignored" not in _texts(at.warning)


# ---------------------------------------------------------------------------------- GPU mode


def _recorded_backend(calls: list) -> Backend:
    report = read_bench_file(FIXTURE)

    def run(plan, progress):
        calls.append(plan)
        progress(type("Ev", (), {"done": 1, "total": 2, "message": plan.label})())
        return report

    return Backend(gpu=True, device="recorded H200 (fixture)", run=run)


def test_gpu_mode_runs_and_shows_measured_figures():
    calls: list = []
    at = _app(_recorded_backend(calls)).run()
    assert "GPU: **recorded H200 (fixture)**" in _texts(at.success)
    assert "Download this session's runs (harness JSON)" not in _download_labels(at)  # nothing run yet
    at.toggle(key="kernels.sweep").set_value(True).run()
    at.button(key="k_run").click().run()
    assert not at.exception
    assert len(calls) == 1 and calls[0].kernel == "decode" and calls[0].sweep
    assert calls[0].decode.batch == 8 and calls[0].decode.context == 32768  # the page opens on B=8 x 32K
    assert at.radio(key="k_source").value == "This session's runs"
    assert _metric(at, "Achieved TB/s") == "3.60"
    assert "Download this session's runs (harness JSON)" in _download_labels(at)
    assert any(f["layout"]["title"]["text"].startswith("Roofline") for f in _figures(at))


def test_gpu_mode_fp8_plan():
    calls: list = []
    at = _app(_recorded_backend(calls)).run()
    at.selectbox(key="kernels.dtype_decode").set_value("fp8").run()
    at.button(key="k_run").click().run()
    assert calls[-1].fp8 and calls[-1].decode.dtype == "bf16"  # FP8 KV, bf16 query


def test_gpu_oom_is_reported_not_crashed():
    def oom(plan, progress):
        raise RuntimeError("CUDA out of memory. Tried to allocate 80.00 GiB")

    at = _app(Backend(gpu=True, device="fake", run=oom)).run()
    at.button(key="k_run").click().run()
    assert not at.exception
    assert "GPU out of memory" in _texts(at.error)
    assert "This session's runs" not in at.radio(key="k_source").options


def test_gpu_cancel_between_shapes():
    gate = GpuGate()

    def cancelled_midway(plan, progress):
        gate.request_cancel()  # as if another tab pressed Cancel
        progress(type("Ev", (), {"done": 1, "total": 3, "message": "next shape"})())
        raise AssertionError("the sweep must stop at the progress call")

    at = _app(Backend(gpu=True, device="fake", run=cancelled_midway), kernels_gate=gate).run()
    at.button(key="k_run").click().run()
    assert not at.exception
    assert "Run cancelled" in _texts(at.warning)
    assert not gate.status().busy  # released for the next session


def test_other_session_holding_the_gpu_is_shown():
    gate = GpuGate()
    with held_by_another_session(gate, "decode B=128 L=32768 (another tab)", hold_s=30):
        at = _app(Backend(gpu=True, device="fake", run=_refuse), kernels_gate=gate).run()
        assert "Waiting for the GPU: another session is running decode B=128 L=32768 (another tab)" in _texts(
            at.warning)


# ---------------------------------------------------------------------------------- mixed batches


def _mixed_backend(calls: list) -> Backend:
    """Returns the fixture plus one mixed batch with invented round figures for the chosen preset."""
    import dataclasses

    from kernels.bench.records import Measurement, MixedResult, compute_targets

    def run(plan, progress):
        calls.append(plan)
        s = plan.mixed
        flops, nbytes = 10**12, 4 * 10**9  # 1 TFLOP over 4 GB: 250 FLOP/B
        ms = {"triton_chunked": 2.0, "triton_chunked_split": 2.5, "gather_sdpa": 20.0}
        result = MixedResult(shape=s, flops=flops, hbm_bytes=nbytes, measurements=tuple(
            Measurement(contender=c, status="ok", median_ms=t, timing="cuda_graph", unit="TFLOP/s", work=flops,
                        rate=flops / (t * 1e-3) / 1e12, share_of_measured=None, share_of_datasheet=0.5,
                        max_abs_err=0.01) for c, t in ms.items()))
        base = read_bench_file(FIXTURE)
        return dataclasses.replace(base, mixed=(result,),
                                   targets=compute_targets(base.decode, base.prefill, (result,)))

    return Backend(gpu=True, device="recorded H200 (fixture)", run=run)


def test_mixed_kernel_without_mixed_records_says_so():
    at = _app(CPU)
    at.query_params["kernel"] = "mixed"
    at.run()
    assert not at.exception
    assert "These results hold no chunked prefill (mixed batch) shapes." in _texts(at.info)


def test_gpu_mode_runs_a_mixed_batch_with_theory_beside_measurement():
    calls: list = []
    at = _app(_mixed_backend(calls))
    at.query_params["kernel"] = "mixed"
    at.query_params["mix"] = "one_chunk"
    at.run()
    assert at.selectbox(key="kernels.batch").disabled and not at.selectbox(key="kernels.mix").disabled
    at.button(key="k_run").click().run()
    assert not at.exception
    plan = calls[0]
    assert plan.kernel == "mixed" and plan.mixed.q_lens == (2048,) + (1,) * 256
    assert _metric(at, "Achieved TFLOP/s") == "500.00"  # 1 TFLOP in 2.0 ms
    theory = at.dataframe[1].value  # results table, then theory beside measurement
    quantities = " ".join(theory["Quantity"])
    assert "FLOPs of the visible (query, key) pairs" in quantities
    assert "1.000 TFLOP / 4.000 GB (250 FLOP/B)" in " ".join(theory["Model or measurement"])
    roof = next(f for f in _figures(at) if f["layout"]["title"]["text"].startswith("Roofline"))
    ours = next(t for t in roof["data"] if t["name"] == "Triton chunked prefill, one launch")
    # x: the record's FLOPs over the least bytes of the preset's sequences, by hand: K and V
    # 2 x (2048 + 256 x 4096) tokens x 8 heads x 128 x 2 B = 4,303,355,904 B; Q and O 2 x 2304
    # tokens x 32 heads x 128 x 2 B = 37,748,736 B; 1e12 / 4,341,104,640 = 230.36 FLOP/B.
    # y: 1 TFLOP in 2 ms = 500 TFLOP/s.
    assert ours["x"][0] == pytest.approx(1e12 / 4_341_104_640)
    assert ours["y"][0] == pytest.approx(500.0)
    targets = {r["Target"]: r for r in at.dataframe[2].value.to_dict("records")}
    assert targets["mixed_vs_split_launches"]["Measured"] == "1.250"
    assert targets["mixed_vs_gather_sdpa"]["Measured"] == "10.000"


# ---------------------------------------------------------------------------------- shipped H200 run


def test_sidebar_shape_is_followed_after_the_first_render():
    """Changing the sidebar's batch after the first render shows that shape (it is in the results)."""
    at = _app(CPU, shipped_dir=RESULTS_DIR)
    at.query_params["batch"] = "32"
    at.query_params["len"] = "16384"
    at.run()
    # Shipped run (h200-2026-12-04.json), B=32 L=16K 32/8 d=128: 0.508768 ms by CUDA-graph replay.
    assert _metric(at, "Kernel median time") == "508.8 µs"
    at.selectbox(key="kernels.batch").set_value(8).run()
    assert not at.exception
    # B=8 L=16K: 0.136656 ms; KV 2 x 8 x 16384 x 8 x 128 x 2 B = 536,870,912 B / 136.656 µs = 3.93 TB/s.
    assert _metric(at, "Kernel median time") == "136.7 µs"
    assert _metric(at, "Achieved TB/s") == "3.93"
    assert "not in these results" not in _texts(at.caption)


def _shipped_app(**query) -> AppTest:
    at = _app(CPU, shipped_dir=RESULTS_DIR)
    for k, v in query.items():
        at.query_params[k] = v
    return at.run()


def test_opens_on_batch_8_by_32k_with_every_ratio_and_no_raw_cells():
    at = _shipped_app()
    assert not at.exception
    # Shipped run, B=8 L=32K 32/8 d=128: 0.263424 ms replayed; 1,073,741,824 B / 263.424 µs = 4.076 TB/s,
    # 95 % (95.4) of the run's 4.2745 TB/s copy (h200-2026-12-04.json).
    assert _metric(at, "Kernel median time") == "263.4 µs"
    assert _metric(at, "Achieved TB/s") == "4.08"
    assert _metric(at, "Share of measured ceiling") == "95 %"
    assert "not in these results" not in _texts(at.caption) and "launch-bound" not in _texts(at.info)
    table = at.dataframe[0].value.set_index("Contender")
    ours = table.loc["Triton paged decode"]
    # The run's row: eager 0.262944 ms, cuDNN 0.260304 / 0.263424 = 0.988 x, and the rdq kernels' FP8
    # 0.263424 / 0.143344 = 1.84 x and INT4 0.263424 / 0.090528 = 2.91 x the bf16 kernel.
    assert (ours["CUDA-graph replay (µs)"], ours["Eager call (µs)"], ours["× cuDNN"]) == ("263.4", "262.9", "0.988")
    assert table.loc["Triton paged decode, FP8 (e4m3) KV", "× Triton BF16"] == "1.84"
    assert table.loc["Triton paged decode, INT4 KV", "× Triton BF16"] == "2.91"
    assert table.loc["SDPA EFFICIENT (contiguous)", "Status"] == "unsupported"
    assert table.loc["naive softmax(QKᵀ)V", "CUDA-graph replay (µs)"] == "—"  # timed eagerly only
    for frame in (d.value for d in at.dataframe):
        assert not any(re.fullmatch(r"[a-z]+(_[a-z0-9]+)+", str(c)) for c in frame.columns), list(frame.columns)
        assert not frame.isin(["None", "nan", None]).any().any()


def test_targets_are_shown_with_what_limits_the_unmet_ones():
    at = _shipped_app()
    targets = at.dataframe[2].value.set_index("Target")
    # h200-2026-12-04.json: 1.8274 at B=8 L=32K 64/8, under the raised bar of 1.9: unmet.
    assert targets.loc["decode_fp8_vs_bf16", "Measured"] == "1.827"
    assert targets.loc["decode_fp8_vs_bf16", "Required"] == "≥ 1.9"
    assert targets.loc["decode_fp8_vs_bf16", "Met"] == "no"
    assert targets.loc["decode_eager_overhead_us", "Required"] == "≤ 40"
    # B=1 L=32K 64/8: eager 0.070176 - replay 0.041776 ms = 28.400 µs.
    assert targets.loc["decode_eager_overhead_us", "Measured"] == "28.400"
    assert targets.loc["decode_eager_overhead_us", "Met"] == "yes"
    # 0.99472 / 0.351328 = 2.83131 at B=32 L=32K 64/8, the worst large shape: under the raised 3.2.
    assert targets.loc["decode_int4_vs_bf16", "Met"] == "no"
    assert targets.loc["decode_int4_vs_bf16", "Measured"] == "2.831"
    # B=4 N=4096 causal: cuDNN 0.918528 / ours 0.990336 ms = 0.927, under 0.95; full attention is met
    # (B=1 N=16K: 0.979).
    assert targets.loc["prefill_vs_cudnn_causal", "Met"] == "no"
    assert targets.loc["prefill_vs_cudnn_noncausal", "Met"] == "yes"
    text = _texts(at.markdown)
    # Met: decode_large_tbps, decode_large_vs_gather, decode_eager_overhead_us, prefill_vs_flash (both),
    # prefill_vs_cudnn_noncausal, mixed_vs_split_launches, mixed_vs_gather_sdpa.
    assert "**8 of 19 met**" in text
    # B=1 L=32K 64/8: cuDNN 0.040046 / ours 0.041776 = 0.959; B=32 L=16K 32/8: 0.495552 / 0.508768 = 0.974;
    # B=1 L=1K 64/8 against cuDNN's paged graph: 0.0087825 / 0.0123373 = 0.712.
    assert "`decode_b1_32k_vs_cudnn` (0.959, needs ≥ 0.97" in text and "`decode_large_vs_cudnn` (0.974, needs ≥ 0.98" in text
    assert "`decode_vs_best_paged_peer` (0.712, needs ≥ 1" in text
    assert "`decode_fp8_vs_bf16` (1.827, needs ≥ 1.9" in text and "`decode_int4_vs_bf16` (2.831, needs ≥ 3.2" in text
    assert "`prefill_vs_cudnn_causal` (0.927, needs ≥ 0.95" in text
    unmet_part = text.partition("What limits the unmet ones")[2]
    for met in ("`decode_large_tbps`", "`decode_eager_overhead_us`", "`prefill_vs_cudnn_noncausal`",
                "`mixed_vs_split_launches`"):
        assert met not in unmet_part


def test_small_shape_says_it_is_launch_bound():
    at = _shipped_app(batch="1", len="4096")
    # 2 x 4096 x 8 x 128 x 2 B = 16,777,216 B; at the run's 4.2746 TB/s copy: 3.92 µs; the call 12.74 µs.
    note = _texts(at.info)
    assert "This shape is launch-bound" in note
    assert "16.8 MB of KV take 3.9 µs" in note and "the call takes 12.7 µs" in note


def test_share_above_100_percent_is_explained():
    at = _shipped_app(batch="128", len="32768")
    # 4.4465 TB/s over the 4.2746 TB/s copy = 104 %; over the datasheet's 4.8 = 93 %.
    assert _metric(at, "Share of measured ceiling") == "104 %"
    assert "Over 100 % of the measured ceiling" in _texts(at.info) and "(93 % of it here)" in _texts(at.info)


def test_picking_a_shape_writes_it_into_the_sidebar_and_the_url():
    at = _shipped_app()
    labels = at.selectbox(key="k_pick_decode").options
    at.selectbox(key="k_pick_decode").set_value(next(i for i, lab in enumerate(labels)
                                                      if lab.startswith("B=128 L=4096 H=32/8"))).run()
    assert not at.exception
    assert at.selectbox(key="kernels.batch").value == 128 and at.selectbox(key="kernels.len").value == 4096
    assert at.query_params["batch"] == "128" and at.query_params["len"] == "4096"
    assert _metric(at, "Kernel median time") == "499.4 µs"  # 0.499408 ms in h200-2026-12-04.json


def test_page_size_chart_from_the_shipped_run_beside_the_simulated_waste():
    at = _shipped_app(ps_work="Preset: Reference page, problem 4")
    fig = next(f for f in _figures(at) if f["layout"]["title"]["text"].startswith("Which page size"))
    lines = {t["name"]: t for t in fig["data"] if t["name"].startswith("kernel TB/s")}
    assert set(lines) == {"kernel TB/s, batch 8 × 32,768", "kernel TB/s, batch 128 × 4,096"}
    # h200-2026-12-04.json page_sizes: B=8 L=32K 4.01 / 4.05 / 4.07 / 4.10 / 4.09 / 4.11 / 4.10 TB/s at blocks 1 ... 256.
    assert fig["data"][0]["x"] == ["1", "8", "16", "32", "64", "128", "256"]
    assert [round(y, 2) for y in lines["kernel TB/s, batch 8 × 32,768"]["y"]] == [4.01, 4.05, 4.07, 4.10, 4.09,
                                                                                  4.11, 4.10]
    waste = next(t for t in fig["data"] if t["name"] == "waste per sequence, simulated")
    # Lengths uniform over 1,024-3,072 are spread evenly modulo every block: waste ≈ (B - 1) / 2.
    assert waste["y"][0] == 0.0
    assert waste["y"][-1] == pytest.approx(127.5, rel=0.03)
    assert fig["layout"]["yaxis2"]["title"]["text"] == "waste per sequence (tokens)"
    answer = _texts(at.markdown)
    # Widest spread: batch 8's 4.1085 / 4.0087 = 1.025 (blocks 128 and 1; batch 128's is 4.3614 / 4.2785
    # = 1.019). Lengths uniform over 1,024-3,072 (mean ~2,048) leave (B - 1)/2 tokens per sequence:
    # utilisation 2048 / (2048 + (B - 1)/2) times the mean relative rate (h200-2026-12-04.json's rates,
    # block 128 the fastest at both shapes) scores block 8 0.99829 x 0.98308 = 0.9814, block 16
    # 0.99635 x 0.98997 = 0.9864, block 32 0.99249 x 0.99627 = 0.9888, block 64 0.98485 x 0.99571 = 0.9806.
    assert "at most 2.5 % apart" in answer and "**Block 32** gives the most sequences times read speed" in answer
    assert at.query_params["ps_work"] == "Preset: Reference page, problem 4"


def test_page_size_study_by_hand():
    """Every request 1,000 tokens: waste B·⌈1000/B⌉ − 1000 is 0, 0, 8, 24, 24, 24, 24 tokens."""
    import numpy as np

    from simulation.workloads import Workload
    from planner.page_size import page_size_study

    report = read_bench_file(RESULTS_DIR / "h200-2026-12-03.json")
    same = Workload(prompt_tokens=np.full(50, 600), output_tokens=np.full(50, 400), source="fixed 1,000")
    study = page_size_study(report, same, max_context=32768)
    assert study.block_sizes == (1, 8, 16, 32, 64, 128, 256)
    assert study.waste_tokens == (0.0, 0.0, 8.0, 24.0, 24.0, 24.0, 24.0)
    assert study.utilisation[2] == pytest.approx(1000 / 1008)
    # Score = utilisation x mean relative rate (h200-2026-12-03.json's rates, above; block 128 the
    # fastest at both shapes, 4.1569 and 4.3476 TB/s): block 1 scores (4.0461/4.1569 + 4.2525/4.3476)/2 = 0.9757, block 8
    # (4.0835/4.1569 + 4.2728/4.3476)/2 = 0.9826, block 16 0.99206 x (4.1131/4.1569 + 4.3024/4.3476)/2
    # = 0.9817, block 32 0.97656 x 0.99609 = 0.9727 and block 128 0.97656 x 1 = 0.9766; the widest
    # spread is batch 8's 4.1569 / 4.0461 (blocks 128 and 1).
    assert study.best_block == 8
    assert study.rate_spread == pytest.approx(4.1569 / 4.0461 - 1, abs=1e-4)


def test_whole_view_state_round_trips_through_the_url():
    at = _shipped_app(tab="pagesize", sm_n="64", sm_tq="8", sm_step="5", sweep="1")
    assert not at.exception
    assert at.session_state["kernels.view.tab"] == "pagesize"
    assert at.session_state["k_tabs"] == ":material/grid_view: Page size"
    assert at.selectbox(key="kernels.view.sm_n").value == 64 and at.slider(key="kernels.view.sm_step").value == 5
    assert at.toggle(key="kernels.sweep").value is True
    at.session_state["k_tabs"] = ":material/show_chart: Roofline"  # as if the user opened that tab
    at.selectbox(key="kernels.view.sm_d").set_value(64).run()
    assert at.query_params["tab"] == "roofline" and at.query_params["sm_d"] == "64"
    at = _shipped_app(tab="nope", sm_step="9999")
    notices = _texts(at.warning)
    assert "Link parameter `tab` ignored" in notices and "Link parameter `sm_step` ignored" in notices


def test_charts_have_axis_titles_png_export_and_apart_markers():
    at = _shipped_app(batch="1", len="4096")
    for fig in _figures(at):
        for name, axis in fig["layout"].items():
            if re.fullmatch(r"[xy]axis\d*", name) and fig["data"]:
                assert axis.get("title", {}).get("text"), (fig["layout"]["title"]["text"], name)
    for chart in at.get("plotly_chart"):
        assert json.loads(chart.proto.config)["toImageButtonOptions"]["format"] == "png"
    roof = next(f for f in _figures(at) if f["layout"]["title"]["text"].startswith("Roofline"))
    points = [t for t in roof["data"] if t["mode"] == "markers"]
    styles = {(t["marker"]["symbol"], t["marker"]["color"]) for t in points}
    assert len(styles) == len(points)  # at batch 1 several sit at 4 FLOP/B: each keeps its own marker
    from ui.kernel_charts import CONTENDER_STYLE
    from ui.kernel_tables import CONTENDER_NAMES

    assert set(CONTENDER_NAMES.values()) <= set(CONTENDER_STYLE)  # the peers too: no shared fallback
    assert len(set(CONTENDER_STYLE[n] for n in CONTENDER_NAMES.values() if "decode" in n or "SDPA" in n
                   or "naive" in n or "gather" in n)) == 13  # the decode contenders' 13 styles are apart
    heat = next(f for f in _figures(at) if f["layout"]["title"]["text"].startswith("Step "))
    bar = heat["data"][0]["colorbar"]
    # Horizontal, under the heat map: it ends before the second panel's y axis begins.
    assert bar["orientation"] == "h" and bar["x"] + bar["len"] / 2 <= heat["layout"]["xaxis2"]["domain"][0]
    labels = _download_labels(at)
    assert "Download these results (harness JSON)" in labels and "Download the measurements (CSV)" in labels
    assert "Download the page-size study (CSV)" in labels


def test_the_shipped_families_run_is_shown_without_a_gpu():
    from ui.kernel_families import newest_families

    at = _shipped_app()
    report, name = newest_families()
    assert name == "families-h200-2026-12-04.json"
    frame = next(d.value for d in at.dataframe if "Sliding + sinks (µs)" in d.value.columns)
    row = frame[(frame["Shape"] == "B=8 L=32768 H=64/8 d=128 bf16") & (frame["Window W (tokens)"] == "128")].iloc[0]
    # The run's B=8 L=32K W=128 row: full over L 0.256976 ms, sliding 0.011264 ms: 22.81x.
    assert row["Full over L (µs)"] == "257.0" and row["Full over L ÷ sliding"] == "22.81×"
    targets = next(d.value for d in at.dataframe if "Target" in d.value.columns
                   and "sinks_overhead" in set(d.value["Target"])).set_index("Target")
    assert targets.loc["sinks_overhead", "Met"] == "no" and targets.loc["sliding_decode_vs_full", "Met"] == "no"
    assert targets.loc["sliding_decode_vs_window_full", "Met"] == "yes"


def test_the_shipped_layer_mix_is_shown_without_a_gpu():
    at = _shipped_app()
    assert not at.exception
    # The default: gpt-oss-120b, B=32 L=32K, bf16 KV, TP 1, a point of the shipped run (commit 5da5e96):
    # 18 sliding layers at 0.0112 ms and 18 full ones at 0.510144 ms, both with sinks.
    frame = next(d.value for d in at.dataframe if "Share of attention time" in d.value.columns).set_index("Layer kind")
    sliding, full = frame.loc["Sliding window 128 + sinks"], frame.loc["Full attention + sinks"]
    assert (sliding["Layers"], sliding["Heads on one GPU (query / KV)"]) == ("18", "64 / 8")
    assert sliding["µs per layer"] == "11.2" and full["µs per layer"] == "510.1"
    assert sliding["µs a step, all its layers"] == f"{18 * 11.2:,.1f}" and full["µs a step, all its layers"] == "9,182.6"
    total = 18 * 0.0112 + 18 * 0.510144  # ms
    assert full["Share of attention time"] == f"{100 * 18 * 0.510144 / total:.1f} %" == "97.9 %"
    # Bytes the sizer counts: 8 KV heads x (64 + 64) x 2 B = 2,048 B a token; 32 x 128 tokens x 2,048 B.
    assert sliding["KV per token, one layer"] == "2,048 B" and sliding["Read by one layer a step"] == "8.4 MB"  # 8,388,608 B
    caption = _texts(at.caption)
    assert f"{total * 1e3:,.1f} µs" in caption and "commit 5da5e96" in caption
    # At TP 4 the shipped run has no point: the sizer's bytes for one GPU's 16 / 2 heads, untimed.
    at.selectbox(key="kernels.mix.tp").set_value(4).run()
    frame = next(d.value for d in at.dataframe if "Share of attention time" in d.value.columns)
    assert set(frame["Heads on one GPU (query / KV)"]) == {"16 / 2"} and set(frame["µs per layer"]) == {"—"}
    assert "No timing for gpt-oss-120b at bf16 KV, TP 4" in _texts(at.info)
    # Qwen2.5-7B's 28 query heads do not split over 8 ranks: refused naming the widget.
    at.selectbox(key="kernels.mix.model").set_value("qwen2.5-7b")
    at.selectbox(key="kernels.mix.tp").set_value(8).run()
    assert "**TP degree (layer mix)**: TP 8 does not divide the 28 query heads" in _texts(at.error)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal where no CUDA device exists")
def test_a_live_layer_mix_goes_through_the_gpu_gate_and_reports_a_failure():
    # With a GPU backend the section offers a run; here (no CUDA device) the kernels refuse, and
    # the page says why, keeps the shipped figures and leaves the gate free for the next session.
    gate = GpuGate()
    at = _app(Backend(gpu=True, device="fake", run=_refuse), shipped_dir=RESULTS_DIR, kernels_gate=gate).run()
    at.button(key="k_mix_run").click().run()
    assert not at.exception
    assert "needs a CUDA GPU" in _texts(at.warning) and not gate.status().busy
    frame = next(d.value for d in at.dataframe if "Share of attention time" in d.value.columns).set_index("Layer kind")
    assert frame.loc["Full attention + sinks", "µs per layer"] == "510.1"  # still the shipped point


def test_the_shipped_mla_run_is_shown_without_a_gpu():
    shipped = RESULTS_DIR / "mla" / "mla-h200-2026-12-04.json"
    raw = json.loads(shipped.read_text())
    at = _shipped_app()
    assert not at.exception
    frame = next(d.value for d in at.dataframe if "SGLang Triton best (µs)" in d.value.columns)
    assert len(frame) == len(raw["results"])  # 24 shapes: 6 batch x context, 128 and 16 heads, bf16 and FP8
    row = frame[(frame["Shape"] == "B=64 L=4096 H=128") & (frame["Latent"] == "bf16")].iloc[0]
    # Expected cells from the file by hand: bound = max(latent bytes / copy, FLOPs / matmul), with
    # bytes = B x L x (512 + 64) x 2 and FLOPs = 2 x B x L x H x (2 x 512 + 64).
    r = next(r for r in raw["results"] if r["shape"] == {"batch": 64, "context": 4096, "n_heads": 128,
                                                          "kv_lora_rank": 512, "rope_dim": 64, "block_size": 64,
                                                          "kv": "bf16"})
    ms = {m["contender"]: m["median_ms"] for m in r["measurements"]}
    c = raw["ceilings"]
    bound_ms = max(64 * 4096 * 576 * 2 / (c["copy_tbps"] * 1e9),
                   2 * 64 * 4096 * 128 * 1088 / (c["matmul_tflops"] * 1e9))
    peer_ms = min(ms["sglang_triton_8"], ms["sglang_triton_16"])
    rate = next(m["rate"] for m in r["measurements"] if m["contender"] == "mla")
    assert row["Ours (µs)"] == f"{ms['mla'] * 1e3:,.1f}" == "144.3"
    assert row["TFLOP/s"] == f"{rate:,.0f}" == "506"
    assert row["Share of bound"] == f"{bound_ms / ms['mla']:.2f}" == "0.65"
    assert row["SGLang Triton best (µs)"] == f"{peer_ms * 1e3:,.1f}" == "1,216.3"
    assert row["Ours ÷ SGLang (speed)"] == f"{peer_ms / ms['mla']:.2f}×" == "8.43×"
    # The Triton kernel on the same call, which the Gluon kernel replaced on Hopper: 382.6 µs.
    assert row["Triton kernel (µs)"] == f"{ms['mla_triton'] * 1e3:,.1f}" == "382.6"
    assert row["Ours ÷ Triton kernel (speed)"] == f"{ms['mla_triton'] / ms['mla']:.2f}×" == "2.65×"
    fp8 = frame[(frame["Shape"] == "B=64 L=4096 H=128") & (frame["Latent"] == "fp8")].iloc[0]
    assert fp8["SGLang Triton best (µs)"] == "—" and fp8["Ours ÷ SGLang (speed)"] == "—"  # the peer skipped FP8
    targets = next(d.value for d in at.dataframe if "Where" in d.value.columns).set_index("Target")
    met = dict(zip(targets.index, targets["Met"]))
    assert met == {"Share of the ceilings' bound, 128 heads, bf16 latent, B ≥ 64, L ≥ 4K (worst shape)": "no",
                   "Speed vs SGLang's Triton MLA decode, best of 8 and 16 splits, bf16 (worst shape)": "yes"}
    text = _texts(at.caption)
    # 2 x 128 x 1088 FLOPs over 576 x 2 B = 241.8 per byte; 773.58 TFLOP/s / 4.2493 TB/s = 182.0.
    per_byte, balance = 2 * 128 * 1088 / (576 * 2), c["matmul_tflops"] / c["copy_tbps"]
    assert f"does {per_byte:.0f} FLOPs per bf16 latent byte, past the {balance:.0f}" in text
    assert "242 FLOPs" in text and "the 182 this GPU" in text and "at 16 heads it does 30" in text
    assert "driver 580.159.04" in text and "commit a5af746" in text
    assert "`python -m kernels.bench --mla --json mla-h200-2026-12-04.json`" in text and "/root/" not in text


def _widths(element) -> dict[str, int]:
    return {c: s["width"] for c, s in json.loads(element.proto.columns or "{}").items() if s.get("width")}


def test_cells_past_the_grids_measured_rows_and_short_headers_are_not_cut():
    at = _shipped_app()
    table = at.dataframe[0]
    names = list(table.value["Contender"])
    # The grid sizes a column from rows 0-9 and the last; the shipped decode shape has 13 rows,
    # and "FlashInfer decode, tensor cores, FP8 (e4m3) KV" (46 characters) is row 10, longer than any it
    # measures.
    longest = max(names, key=len)
    assert names.index(longest) == 10 and len(longest) > max(len(n) for n in names[:10] + names[-1:])
    assert _widths(table)["Contender"] >= 7.5 * len(longest)
    # The interpreter check's "Seconds" is longer than its cells ("0.52"): sized to its cells it read "Secon…".
    at.button(key="k_interp").click().run()
    seconds = at.dataframe[-1]
    assert all(len(v) < len("Seconds") for v in seconds.value["Seconds"])
    assert _widths(seconds)["Seconds"] >= 7.5 * len("Seconds") + 28


# ------------------------------------------------------------- names, link and glossary


def test_targets_carry_their_plain_words_beside_the_id():
    at = _shipped_app()
    targets = at.dataframe[2].value.set_index("Target")
    words = targets["In plain words"]
    assert words["decode_large_vs_cudnn"] == "Paged decode vs cuDNN on contiguous KV, large shapes"
    assert targets.loc["decode_fp8_vs_bf16", "In plain words"] == "FP8 KV vs bf16, tokens per second, large shapes"
    assert not (targets["In plain words"] == targets.index).any()  # every shipped target has words, not its id
    # The shipped run misses decode_large_vs_cudnn: its line under the table names it in both ways.
    unmet = next(m.value for m in at.markdown if m.value.startswith("**What limits the unmet ones**"))
    assert "- Paged decode vs cuDNN on contiguous KV, large shapes, `decode_large_vs_cudnn` (" in unmet


def test_dtypes_and_contenders_use_the_glossary_names():
    at = _shipped_app()
    assert at.selectbox(key="kernels.dtype_decode").options == ["BF16", "FP16", "FP8 (e4m3) KV, BF16 query"]
    contenders = set(at.dataframe[0].value["Contender"])
    assert {"Triton paged decode, FP8 (e4m3) KV", "FlashInfer decode, tensor cores, FP8 (e4m3) KV"} <= contenders
    assert all(label.endswith((" BF16", " FP16")) for label in at.selectbox(key="k_pick_decode").options)
    glossary = next(e for e in at.sidebar.expander if e.label == "Glossary")
    shown = "\n".join(m.value for m in glossary.markdown)
    assert "FP8 (e4m3) (`fp8`)" in shown and "**Sinks**" in shown


def _sidebar_link(at) -> str:
    links = [c.value for c in at.sidebar.code if "?" in c.value]
    assert len(links) == 1, links
    return links[0]


def test_copy_link_holds_the_shape_the_open_tab_and_the_tabs_controls():
    at = _shipped_app(batch="128", len="4096", tab="softmax")
    link = _sidebar_link(at)
    assert "batch=128" in link and "len=4096" in link and "tab=softmax" in link
    # A control changed on the page reaches the link on the same rerun, a tab's own control too.
    at.selectbox(key="kernels.hq").set_value(16).run()
    at.selectbox(key="kernels.view.sm_n").set_value(64).run()
    link = _sidebar_link(at)
    assert "hq=16" in link and "sm_n=64" in link and "batch=128" in link
    assert "hkv=" not in link  # a value at its default stays out of the link

"""AppTest of the live kernel page in both modes.

No-GPU mode: the page says so, shows the shipped results (here the synthetic fixture in
tests/data, whose figures are invented round numbers) with their provenance, validates uploads,
and runs the kernels under the Triton interpreter. GPU mode: CI has no GPU, so the kernel layer
is substituted through ``st.session_state["kernels_backend"]`` by a backend that returns the
recorded fixture; the page's run, progress, OOM and cancellation paths are the real ones.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from kernels.bench.live import Backend
from kernels.bench.records import read_bench_file
from kernels.runtime import interpreter_active
from support.apptest import figures as _figures
from support.apptest import metric_text as _metric
from support.apptest import open_page
from support.apptest import texts as _texts
from support.paths import FIXTURES
from ui.gpu_lock import GpuGate

FIXTURE = FIXTURES / "kernels_bench_synthetic.json"


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
    # Default shape B=1 L=4096 32/8 d=128 is in the fixture; its kernel runs at 3.6 TB/s there.
    assert _metric(at, "Achieved TB/s") == "3.60"
    assert _metric(at, "Share of measured ceiling") == "90 %"  # 3.6 of the fixture's 4.0 TB/s


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
    at = _app(CPU).run()
    titles = [f["layout"]["title"]["text"] for f in _figures(at)]
    assert any("against context (batch 1)" in t for t in titles)
    assert any("against batch (context 4096)" in t for t in titles)
    mem = next(f for f in _figures(at) if f["layout"]["title"]["text"].startswith("Naive against tiled"))
    assert any("oom" in t["name"] for t in mem["data"])  # naive's OOM is drawn, not crashed on
    assert "N = 32,768: naive softmax(QKᵀ)V → oom" in _texts(at.warning)


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
    text = " ".join(table["model"])
    # N = 4096 → S is 4096² × 2 B = 32 MiB per head; 4 × 32 heads → 4 GiB for the shape.
    assert "32.0 MiB / 4.00 GiB" in text
    assert "memory-bound" in text and "compute-bound" in text
    assert any(q.startswith("measured: Triton tiled forward") for q in table["quantity"])


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
    assert set(rows["kernel"]) == {"paged decode", "tiled forward", "chunked prefill"}
    assert (rows["max abs error"] <= rows["tolerance"]).all()
    assert (rows["max abs error"] > 0).all()  # a real low-precision computation, not a copy
    assert "checks within tolerance" in _texts(at.success)


def test_online_softmax_walkthrough():
    at = _app(CPU).run()
    slider = at.slider(key="k_sm_step")
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
    assert at.selectbox(key="kernels.batch").value == 1 and at.selectbox(key="kernels.dtype_prefill").value == "bf16"


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
    assert not at.get("download_button")  # nothing to download before a run
    at.toggle(key="k_sweep").set_value(True).run()
    at.button(key="k_run").click().run()
    assert not at.exception
    assert len(calls) == 1 and calls[0].kernel == "decode" and calls[0].sweep
    assert calls[0].decode.batch == 1 and calls[0].decode.context == 4096
    assert at.radio(key="k_source").value == "This session's runs"
    assert _metric(at, "Achieved TB/s") == "3.60"
    assert at.get("download_button")
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
    holding, release = threading.Event(), threading.Event()

    def other_session():
        with gate.hold("decode B=128 L=32768 (another tab)"):
            holding.set()
            release.wait(30)

    thread = threading.Thread(target=other_session)
    thread.start()
    try:
        holding.wait(10)
        at = _app(Backend(gpu=True, device="fake", run=_refuse), kernels_gate=gate).run()
        assert "Waiting for the GPU: another session is running decode B=128 L=32768 (another tab)" in _texts(
            at.warning)
    finally:
        release.set()
        thread.join()


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
    quantities = " ".join(theory["quantity"])
    assert "FLOPs of the visible (query, key) pairs" in quantities
    assert "1.000 TFLOP / 4.000 GB (250 FLOP/B)" in " ".join(theory["model"])
    roof = next(f for f in _figures(at) if f["layout"]["title"]["text"].startswith("Roofline"))
    ours = next(t for t in roof["data"] if t["name"] == "Triton chunked prefill, one launch")
    # x: the record's FLOPs over the least bytes of the preset's sequences, by hand: K and V
    # 2 x (2048 + 256 x 4096) tokens x 8 heads x 128 x 2 B = 4,303,355,904 B; Q and O 2 x 2304
    # tokens x 32 heads x 128 x 2 B = 37,748,736 B; 1e12 / 4,341,104,640 = 230.36 FLOP/B.
    # y: 1 TFLOP in 2 ms = 500 TFLOP/s.
    assert ours["x"][0] == pytest.approx(1e12 / 4_341_104_640)
    assert ours["y"][0] == pytest.approx(500.0)
    targets = {r["target"]: r for r in at.dataframe[2].value.to_dict("records")}
    assert targets["mixed_vs_split_launches"]["measured"] == pytest.approx(1.25)
    assert targets["mixed_vs_gather_sdpa"]["measured"] == pytest.approx(10.0)

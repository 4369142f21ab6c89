"""Live kernels: the Triton paged-decode, tiled-forward and chunked-prefill kernels timed on this GPU.

Thin page: widgets → ``kernels.bench.live.KernelRequest`` → its ``RunPlan`` → the sweep
functions (through an injectable backend) → records → ``ui.kernel_*`` tables and figures.
Without a GPU it shows the results shipped in ``benchmarks/results/`` (or an uploaded benchmark
JSON) in the same charts and runs the kernels under the Triton interpreter at a toy size.

The whole state lives in the URL (``ui.kernel_controls``: the sidebar's shape and toggles, the
open tab, the walk-through's widgets, the page-size workload); a link value outside the allowed
options is ignored with a notice. The shape picker follows the sidebar and writes back into it.

Test hooks (``st.session_state``, set before the first run):
``kernels_backend``: a ``kernels.bench.live.Backend`` (AppTest substitutes recorded results for the GPU);
``kernels_shipped_dir``: where to look for shipped JSON files;
``kernels_gate``: a ``ui.gpu_lock.GpuGate`` standing for another session's hold on the GPU.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from kernels.runtime import ensure_triton_backend, interpreter_active, triton_installed
from ui.router import run_through_router

if not triton_installed():  # macOS, Windows: no Triton wheels; say what is unavailable, show what can be
    from ui.kernel_offline import offline_page

    run_through_router()
    offline_page()
    st.stop()

ensure_triton_backend()  # before any kernel module: Triton reads TRITON_INTERPRET at decoration

from kernels.bench.live import Backend, default_backend, merge_reports  # noqa: E402
from kernels.bench.records import MAX_BENCH_JSON_BYTES, BenchJsonError, parse_bench_json, report_to_json  # noqa: E402
from kernels.bench.shipped import RESULTS_DIR, find_shipped_results  # noqa: E402
from ui.glossary_view import render_glossary  # noqa: E402
from ui.gpu_lock import GpuBusy, GpuGate, run_guarded  # noqa: E402
from ui.kernel_controls import sidebar, tabs, view_state  # noqa: E402
from ui.kernel_families import families_section  # noqa: E402
from ui.kernel_layer_mix import layer_mix_section  # noqa: E402
from ui.kernel_mla import mla_section  # noqa: E402
from ui.kernel_results import results_tab  # noqa: E402
from ui.kernel_tabs import check_tab, memory_tab, page_size_tab, roofline_tab, softmax_tab, sweep_tab  # noqa: E402
from ui.kernel_theory import REFERENCE_PAGE  # noqa: E402
from ui.url_state import copy_link  # noqa: E402

SESSION_RUNS = "kernels_session_runs"  # the planner page reads this session's runs too
SESSION_SOURCE = "This session's runs"


@st.cache_resource
def _gate() -> GpuGate:
    """One gate per server process: every browser tab's run goes through it."""
    return GpuGate()


@st.cache_resource
def _backend() -> Backend:
    return default_backend()


@st.cache_data(show_spinner=False)
def _shipped(directory: str):
    return find_shipped_results(Path(directory))


@st.cache_data(show_spinner=False, max_entries=4)
def _uploaded(data: bytes):
    """Parse an uploaded benchmark JSON once, not on every rerun (a ValueError is not cached)."""
    return parse_bench_json(data)


def _run_on_gpu(plan, runs: list) -> None:
    """The Run and Cancel buttons; a run goes through the process-wide GPU gate."""
    gate: GpuGate = st.session_state.get("kernels_gate") or _gate()
    b1, b2, _ = st.columns([1, 1, 4])
    run_clicked = b1.button("Run", key="k_run", icon=":material/play_arrow:", type="primary", disabled=plan is None)
    if b2.button("Cancel the running sweep", key="k_cancel", icon=":material/cancel:"):
        st.toast("Cancel requested" if gate.request_cancel() else "Nothing is running")
    status = gate.status()
    if status.busy and not run_clicked:
        st.warning(status.message, icon=":material/hourglass_top:")
    if not (run_clicked and plan is not None):
        return
    wait_box = st.empty()
    bar = st.progress(0.0, text="waiting for the GPU")
    try:
        with gate.hold(plan.label, on_wait=lambda s: wait_box.warning(s.message, icon=":material/hourglass_top:")) as handle:
            wait_box.empty()

            def progress(event) -> None:
                handle.check()  # cancellation requested from any tab: stop between shapes
                bar.progress(min(event.done / max(event.total, 1), 1.0), text=f"{event.done}/{event.total} {event.message}")

            outcome = run_guarded(lambda: backend.run(plan, progress))
    except GpuBusy as exc:
        st.error(str(exc), icon=":material/hourglass_disabled:")
        return
    if outcome.status == "ok":
        runs.append(outcome.value)
        st.session_state["k_source"] = SESSION_SOURCE  # show what was just measured
        bar.progress(1.0, text="done")
    elif outcome.status == "cancelled":
        st.warning("Run cancelled; nothing was recorded.", icon=":material/cancel:")
    else:
        st.error(outcome.message, icon=":material/error:")


def _sources(runs: list):
    """Which results the views can draw: this session's runs, the newest shipped file, an upload."""
    shipped = _shipped(str(st.session_state.get("kernels_shipped_dir", RESULTS_DIR)))
    session_report = merge_reports(runs)  # None before the first run
    sources: dict[str, object] = {}
    if session_report is not None:
        sources[SESSION_SOURCE] = session_report
    if shipped.newest is not None:
        sources[f"Shipped: {shipped.newest.path.name}"] = shipped.newest.report
    with st.expander("Upload a benchmark JSON (`python -m kernels.bench --json PATH`)", icon=":material/upload_file:",
                     expanded=not backend.gpu and shipped.newest is None):
        upload = st.file_uploader("Benchmark JSON", type=["json"], key="k_upload",
                                  max_upload_size=MAX_BENCH_JSON_BYTES // 2**20)
        if upload is not None:
            try:
                sources[f"Uploaded: {upload.name}"] = _uploaded(upload.getvalue())
                if st.session_state.get("k_upload_seen") != upload.file_id:
                    # A file just uploaded is what the user wants to see: select it once.
                    st.session_state["k_upload_seen"] = upload.file_id
                    st.session_state["k_source"] = f"Uploaded: {upload.name}"
            except BenchJsonError as exc:
                st.error(f"**{upload.name}** is not a readable kernels.bench result: {exc.message}", icon=":material/error:")
    if shipped.rejected:  # e.g. tuning logs kept beside the benchmark results: listed, not shown
        with st.expander(f"{len(shipped.rejected)} other file(s) in benchmarks/results are not harness results",
                         icon=":material/draft:"):
            for path, why in shipped.rejected:
                st.caption(f"{path.name}: {why}")
    return sources, session_report


# ---------------------------------------------------------------- the page
backend: Backend = st.session_state.get("kernels_backend") or _backend()
run_through_router()  # a deep link to /kernels as the first request still gets app.py's router
st.title(":material/speed: Live kernels")
st.caption("Triton paged-decode, tiled (FlashAttention-style) and chunked-prefill attention, timed against PyTorch's "
           f"baselines and the traffic model of the reference page ({REFERENCE_PAGE}).")
if backend.gpu:
    st.success(f"GPU: **{backend.device}**. Runs below are timed on it, one browser session at a time.",
               icon=":material/memory:")
else:
    st.info("**No CUDA GPU on this machine**, so nothing can be timed here. Shown instead: the benchmark "
            "results shipped with the repository (or a JSON you upload), and the kernels run under the "
            "Triton interpreter at a toy size to show they compute the right answer.",
            icon=":material/info:")

request, notices = sidebar()
view = view_state()
view.seed()  # the open tab and the tabs' own controls
for notice in notices + view.notices:
    st.warning(notice, icon=":material/link_off:")
if request.problem:
    st.error(request.problem, icon=":material/error:")
plan = request.plan()
runs = st.session_state.setdefault(SESSION_RUNS, [])
if backend.gpu:
    _run_on_gpu(plan, runs)
sources, session_report = _sources(runs)
if not sources:
    st.info("No results to show yet: " + ("press **Run**." if backend.gpu else
            "no shipped results were found in benchmarks/results/; upload a JSON."), icon=":material/info:")
    report, source = None, None
else:
    source = st.radio("Results shown", list(sources), key="k_source", horizontal=True)
    report = sources[source]
if session_report is not None:
    st.download_button("Download this session's runs (harness JSON)", report_to_json(session_report),
                       file_name="kernels_session.json", mime="application/json", key="k_download",
                       icon=":material/download:", on_click="ignore")

tab_res, tab_roof, tab_sweep, tab_pages, tab_mem, tab_softmax, tab_check = tabs()
result = None
if report is not None:
    with tab_res:
        result = results_tab(report, source, request.kernel, plan)
    with tab_pages:
        page_size_tab(report)
    with tab_mem:
        memory_tab(report)
if result is not None:
    with tab_roof:
        roofline_tab(result, report.ceilings)
    with tab_sweep:
        sweep_tab(report, result, request.kernel)
with tab_res:
    families_section()  # from the shipped families run, on any machine
    mla_section()  # from the shipped MLA decode run, on any machine
    layer_mix_section(gpu=backend.gpu, gate=st.session_state.get("kernels_gate") or _gate())
with tab_softmax:
    softmax_tab()
with tab_check:
    check_tab(gpu=backend.gpu, interpreting=interpreter_active())
copy_link()  # last: the sidebar, the open tab and every tab's controls are in the URL by now
render_glossary()

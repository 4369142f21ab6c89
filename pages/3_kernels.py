"""Live kernels: the Triton paged-decode, tiled-forward and chunked-prefill kernels timed on this GPU.

Thin page: widgets → ``kernels.bench.live.KernelRequest`` → its ``RunPlan`` → the sweep
functions (through an injectable backend) → records → ``ui.kernel_charts`` tables and figures.
Without a GPU it shows the results shipped in ``benchmarks/results/`` (or an uploaded benchmark
JSON) in the same charts and runs the kernels under the Triton interpreter at a toy size.

The sidebar's shape lives in the URL (``ui.url_state.PageState``); a link value outside the
allowed options is ignored with a notice.

Test hooks (``st.session_state``, set before the first run):
``kernels_backend``: a ``kernels.bench.live.Backend`` (AppTest substitutes recorded results for the GPU);
``kernels_shipped_dir``: where to look for shipped JSON files;
``kernels_gate``: a ``ui.gpu_lock.GpuGate`` standing for another session's hold on the GPU.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from kernels.runtime import ensure_triton_backend, interpreter_active

ensure_triton_backend()  # before any kernel module: Triton reads TRITON_INTERPRET at decoration

from kernels.bench.live import Backend, KernelRequest, default_backend, merge_reports  # noqa: E402
from kernels.bench.mixed import MIXED_PRESETS, mixed_batch  # noqa: E402
from kernels.bench.records import BenchJsonError, parse_bench_json, report_to_json  # noqa: E402
from kernels.bench.shipped import RESULTS_DIR, find_shipped_results, provenance_lines  # noqa: E402
from ui.gpu_lock import GpuBusy, GpuGate, run_guarded  # noqa: E402
from ui.kernel_charts import measurement_table, roofline_figure, shape_labels, target_rows, theory_rows  # noqa: E402
from ui.kernel_tabs import check_tab, memory_tab, softmax_tab, sweep_tab  # noqa: E402
from ui.router import run_through_router  # noqa: E402
from ui.url_state import ChoiceField, FlagField, PageState  # noqa: E402

SESSION_RUNS = "kernels_session_runs"  # the planner page reads this session's runs too
SESSION_SOURCE = "This session's runs"
KERNELS = {"decode": "Paged decode", "prefill": "Tiled forward (prefill)", "mixed": "Chunked prefill (mixed batch)"}
DTYPES = {"decode": ("bf16", "fp16", "fp8"), "prefill": ("bf16", "fp16"), "mixed": ("bf16", "fp16")}
HEAD_DIMS = {"decode": (64, 128, 256), "prefill": (64, 128, 256), "mixed": (64, 128, 256)}
MIXES = {p: mixed_batch(p).name for p in MIXED_PRESETS}  # the harness's mixed batches
MAIN = {"decode": "triton_paged", "prefill": "triton_flash", "mixed": "triton_chunked"}
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)
LENGTHS = (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
HEADS = (1, 2, 4, 8, 16, 32, 64)
BLOCKS = (16, 32, 64)

shape_state = PageState("kernels", [
    ChoiceField("kernel", "kernel", "decode", tuple(KERNELS)),
    ChoiceField("batch", "batch", 1, BATCHES),
    ChoiceField("len", "len", 4096, LENGTHS),
    ChoiceField("hq", "hq", 32, HEADS),
    ChoiceField("hkv", "hkv", 8, HEADS),
    ChoiceField("block", "block", 16, BLOCKS),
    FlagField("causal", "causal", True),
    ChoiceField("mix", "mix", MIXED_PRESETS[0], MIXED_PRESETS),
])


def _kernel_state(kernel: str) -> PageState:
    """The controls whose options depend on the kernel; each kernel keeps its own choice."""
    return PageState("kernels", [ChoiceField("dtype", f"dtype_{kernel}", "bf16", DTYPES[kernel]),
                                 ChoiceField("d", f"d_{kernel}", 128, HEAD_DIMS[kernel])])


def _on_kernel_change() -> None:
    """Drop link values the new kernel cannot use (fp8 outside decode): they belonged to
    the other kernel's controls, so the new kernel starts from its defaults, without a notice."""
    for field in _kernel_state(st.session_state[shape_state.key("kernel")]).fields:
        raw = st.query_params.get(field.url_name)
        if raw is not None and raw not in {str(o) for o in field.options}:
            del st.query_params[field.url_name]


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





def _sidebar() -> KernelRequest:
    """The kernel and shape controls (URL-backed), as one request."""
    shape_state.seed()
    with st.sidebar:
        st.header("Kernel and shape")
        kernel = st.radio("Kernel", list(KERNELS), format_func=KERNELS.get, key=shape_state.key("kernel"),
                          on_change=_on_kernel_change)
        kernel_state = _kernel_state(kernel)
        kernel_state.seed()
        dtype = st.selectbox("Dtype", DTYPES[kernel], key=kernel_state.key(f"dtype_{kernel}"),
                             format_func=lambda d: "FP8 (e4m3) KV, bf16 query" if d == "fp8" else d)
        mix = st.selectbox("Mixed batch", MIXED_PRESETS, format_func=MIXES.get, key=shape_state.key("mix"),
                           disabled=kernel != "mixed")
        batch = st.selectbox("Batch", BATCHES, key=shape_state.key("batch"), disabled=kernel == "mixed")
        length = st.selectbox("Context (decode) / N (prefill), tokens", LENGTHS, key=shape_state.key("len"),
                              disabled=kernel == "mixed")
        c1, c2 = st.columns(2)
        hq = c1.selectbox("Query heads", HEADS, key=shape_state.key("hq"))
        hkv = c2.selectbox("KV heads", HEADS, key=shape_state.key("hkv"))
        d = st.selectbox("Head dim", HEAD_DIMS[kernel], key=kernel_state.key(f"d_{kernel}"))
        block = st.selectbox("Block size (paged)", BLOCKS, key=shape_state.key("block"), disabled=kernel == "prefill")
        causal = st.toggle("Causal (prefill)", key=shape_state.key("causal"), disabled=kernel != "prefill")
        sweep = st.toggle("Add the sweep (context and batch / N)", key="k_sweep", value=False)
        memory = st.toggle("Add naive vs tiled memory as N grows", key="k_memory", value=False)
    shape_state.sync()
    kernel_state.sync()
    for notice in shape_state.notices + kernel_state.notices:
        st.warning(notice, icon=":material/link_off:")
    return KernelRequest(kernel=kernel, dtype=dtype, batch=batch, length=length, n_q_heads=hq, n_kv_heads=hkv,
                         head_dim=d, block_size=block, causal=causal, sweep=sweep, memory=memory, mix=mix)


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
        upload = st.file_uploader("Benchmark JSON", type=["json"], key="k_upload")
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


def _results_tab(report, source: str, kernel: str, plan):
    """Provenance, the picked shape's figures and tables; returns the picked record (or None)."""
    with st.container(border=True):
        st.markdown("\n\n".join(provenance_lines(report, source)))
    records = {"decode": report.decode, "prefill": report.prefill, "mixed": report.mixed}[kernel]
    if not records:
        st.info(f"These results hold no {KERNELS[kernel].lower()} shapes.", icon=":material/info:")
        return None
    labels = shape_labels(records)
    wanted = plan.shape if plan else None
    default = next((i for i, r in enumerate(records) if r.shape == wanted), 0)
    pick = st.selectbox("Shape from these results", range(len(records)), format_func=labels.__getitem__,
                        index=default, key=f"k_pick_{kernel}")
    result = records[pick]
    if wanted is not None and result.shape != wanted:
        st.caption("The shape chosen in the sidebar is not in these results; showing the one picked here.")
    main = result.get(MAIN[kernel])
    if main is not None and main.status == "ok":
        m1, m2, m3, m4 = st.columns(4)
        m1.metric("Kernel median time", f"{main.median_ms * 1e3:,.1f} µs")
        m2.metric(f"Achieved {main.unit}", f"{main.rate:,.2f}")
        m3.metric("Share of measured ceiling",
                  "n/a" if main.share_of_measured is None else f"{100 * main.share_of_measured:.0f} %")
        m4.metric("Max abs error vs reference", "n/a" if main.max_abs_err is None else f"{main.max_abs_err:.1e}")
    elif main is not None:
        st.error(f"Kernel: {main.status}. {main.note}", icon=":material/error:")
    st.dataframe(measurement_table(result), hide_index=True, key=f"k_table_{kernel}")
    st.subheader("Theory beside measurement")
    st.dataframe(theory_rows(result, report.ceilings), hide_index=True)
    with st.expander("Targets of this report", icon=":material/flag:"):
        st.dataframe(target_rows(report), hide_index=True)
    return result


# ---------------------------------------------------------------- the page
backend: Backend = st.session_state.get("kernels_backend") or _backend()
run_through_router()  # a deep link to /kernels as the first request still gets app.py's router
st.title(":material/speed: Live kernels")
st.caption("Triton paged-decode, tiled (FlashAttention-style) and chunked-prefill attention, timed against PyTorch's "
           "baselines and the reference page's traffic model.")
if backend.gpu:
    st.success(f"GPU: **{backend.device}**. Runs below are timed on it, one browser session at a time.",
               icon=":material/memory:")
else:
    st.info("**No CUDA GPU on this machine**, so nothing can be timed here. Shown instead: the benchmark "
            "results shipped with the repository (or a JSON you upload), and the kernels run under the "
            "Triton interpreter at a toy size to show they compute the right answer.",
            icon=":material/info:")

request = _sidebar()
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
    st.download_button("Download this session's results (harness JSON)", report_to_json(session_report),
                       file_name="kernels_session.json", mime="application/json", key="k_download",
                       icon=":material/download:")

tab_res, tab_roof, tab_sweep, tab_mem, tab_softmax, tab_check = st.tabs(
    [":material/table_chart: Results", ":material/show_chart: Roofline", ":material/timeline: Sweep",
     ":material/memory: Naive vs tiled", ":material/stairs: Online softmax", ":material/verified: Correctness"])
if report is not None:
    with tab_res:
        result = _results_tab(report, source, request.kernel, plan)
    if result is not None:
        with tab_roof:
            st.plotly_chart(roofline_figure(result, report.ceilings), key="k_roofline")
            st.caption("x: FLOPs per byte the contender must move through HBM (gather-then-SDPA writes and "
                       "re-reads the gathered copy; naive prefill moves S and P). Solid roof: ceilings measured "
                       "in the same run; dashed: datasheet.")
        with tab_sweep:
            sweep_tab(report, result, request.kernel)
    with tab_mem:
        memory_tab(report)
with tab_softmax:
    softmax_tab()
with tab_check:
    check_tab(gpu=backend.gpu, interpreting=interpreter_active())

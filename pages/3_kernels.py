"""Live kernels: the Triton paged-decode and tiled-forward kernels timed on this machine's GPU.

Thin page: widgets → ``kernels.bench.live.RunPlan`` → the harness (through an injectable backend) →
records → ``ui.kernel_charts`` tables and figures. Without a GPU it shows the results shipped
in ``benchmarks/results/`` (or an uploaded harness JSON) in the same charts and runs the kernels
under the Triton interpreter at a toy size.

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

from kernels.bench.records import BenchJsonError, DecodeShape, PrefillShape, parse_bench_json, report_to_json  # noqa: E402
from ui.gpu_lock import GpuBusy, GpuGate, run_guarded  # noqa: E402
from kernels.bench.live import (  # noqa: E402
    MEMORY_NS, Backend, RunPlan, default_backend, interpreter_check, merge_reports,
)
from ui.kernel_charts import (  # noqa: E402
    decode_sweep_rows, measurement_table, memory_figure, memory_rows, prefill_sweep_rows, roofline_figure,
    softmax_step_figure, sweep_figure, theory_rows,
)
from kernels.online_softmax import online_softmax_attention, random_head  # noqa: E402
from kernels.bench.shipped import RESULTS_DIR, find_shipped_results, provenance_lines  # noqa: E402
from ui.router import run_through_router  # noqa: E402

try:
    from ui.url_state import UrlState
except ImportError:  # run standalone from inside pages/
    from _url_state import UrlState  # type: ignore[no-redef]

SESSION_RUNS = "kernels_session_runs"
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
    """Parse an uploaded harness JSON once, not on every rerun (a ValueError is not cached)."""
    return parse_bench_json(data)


@st.cache_data(show_spinner="Running the kernels under the Triton interpreter...")
def _interpreter_check():
    return interpreter_check()


@st.cache_data(show_spinner=False)
def _softmax_run(n: int, d: int, tile_q: int, tile_k: int, causal: bool, seed: int):
    import numpy as np

    q, k, v = random_head(n, d, np.random.default_rng(seed), spread=2.0)
    return online_softmax_attention(q, k, v, tile_q=tile_q, tile_k=tile_k, causal=causal)


backend: Backend = st.session_state.get("kernels_backend") or _backend()
url = UrlState()

run_through_router()  # a deep link to /kernels as the first request still gets app.py's router
st.title(":material/speed: Live kernels")
st.caption("Triton paged-decode and tiled (FlashAttention-style) attention, timed against PyTorch's "
           "baselines and the reference page's traffic model.")
if backend.gpu:
    st.success(f"GPU: **{backend.device}**. Runs below are timed on it, one browser session at a time.",
               icon=":material/memory:")
else:
    st.info("**No CUDA GPU on this machine**, so nothing can be timed here. Shown instead: the benchmark "
            "results shipped with the repository (or a JSON you upload), and the kernels run under the "
            "Triton interpreter at a toy size to show they compute the right answer.",
            icon=":material/info:")

# ---------------------------------------------------------------- shape
KERNELS = {"decode": "Paged decode", "prefill": "Tiled forward (prefill)"}
with st.sidebar:
    st.header("Kernel and shape")
    kernel = st.radio("Kernel", list(KERNELS), format_func=KERNELS.get, key="k_kernel",
                      index=list(KERNELS).index(url.get("kernel", "decode", str, tuple(KERNELS))))
    dtypes = ("bf16", "fp16", "fp8") if kernel == "decode" else ("bf16", "fp16")
    dtype = st.selectbox("Dtype", dtypes, key=f"k_dtype_{kernel}",
                         format_func=lambda d: "FP8 (e4m3) KV, bf16 query" if d == "fp8" else d,
                         index=dtypes.index(url.get("dtype", "bf16", str, dtypes)))
    batch = st.selectbox("Batch", (1, 2, 4, 8, 16, 32, 64, 128), key="k_batch",
                         index=(1, 2, 4, 8, 16, 32, 64, 128).index(url.get("batch", 1, int, (1, 2, 4, 8, 16, 32, 64, 128))))
    lengths = (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
    length = st.selectbox("Context (decode) / N (prefill), tokens", lengths, key="k_len",
                          index=lengths.index(url.get("len", 4096, int, lengths)))
    c1, c2 = st.columns(2)
    heads = (1, 2, 4, 8, 16, 32, 64)
    hq = c1.selectbox("Query heads", heads, key="k_hq", index=heads.index(url.get("hq", 32, int, heads)))
    hkv = c2.selectbox("KV heads", heads, key="k_hkv", index=heads.index(url.get("hkv", 8, int, heads)))
    dims = (64, 128, 256) if kernel == "decode" else (64, 128)
    d = st.selectbox("Head dim", dims, key=f"k_d_{kernel}", index=dims.index(url.get("d", 128, int, dims)))
    block = st.selectbox("Block size (decode)", (16, 32, 64), key="k_block", disabled=kernel != "decode",
                         index=(16, 32, 64).index(url.get("block", 16, int, (16, 32, 64))))
    causal = st.toggle("Causal (prefill)", key="k_causal", value=url.get("causal", True, bool),
                       disabled=kernel != "prefill")
    sweep = st.toggle("Add the sweep (context and batch / N)", key="k_sweep", value=False)
    memory = st.toggle("Add naive vs tiled memory as N grows", key="k_memory", value=False)
url.write({"kernel": kernel, "dtype": dtype, "batch": batch, "len": length, "hq": hq, "hkv": hkv, "d": d,
           "block": block, "causal": causal})

shape_error = None if hq % hkv == 0 else f"{hq} query heads cannot share {hkv} KV heads evenly."
if shape_error:
    st.error(shape_error, icon=":material/error:")
base_dtype = "bf16" if dtype == "fp8" else dtype
plan = None
if not shape_error:
    if kernel == "decode":
        plan = RunPlan(kernel="decode", fp8=dtype == "fp8", sweep=sweep,
                       memory_ns=MEMORY_NS if memory else (),
                       decode=DecodeShape(batch=batch, context=length, n_q_heads=hq, n_kv_heads=hkv, head_dim=d,
                                          block_size=block, dtype=base_dtype))
    else:
        plan = RunPlan(kernel="prefill", sweep=sweep, memory_ns=MEMORY_NS if memory else (),
                       prefill=PrefillShape(batch=batch, seq_len=length, n_q_heads=hq, n_kv_heads=hkv, head_dim=d,
                                            causal=causal, dtype=base_dtype))

# ---------------------------------------------------------------- run (GPU) or sources (no GPU)
runs = st.session_state.setdefault(SESSION_RUNS, [])
if backend.gpu:
    gate: GpuGate = st.session_state.get("kernels_gate") or _gate()
    b1, b2, _ = st.columns([1, 1, 4])
    run_clicked = b1.button("Run", key="k_run", icon=":material/play_arrow:", type="primary", disabled=plan is None)
    if b2.button("Cancel the running sweep", key="k_cancel", icon=":material/cancel:"):
        st.toast("Cancel requested" if gate.request_cancel() else "Nothing is running")
    status = gate.status()
    if status.busy and not run_clicked:
        st.warning(status.message, icon=":material/hourglass_top:")
    if run_clicked and plan is not None:
        wait_box = st.empty()
        bar = st.progress(0.0, text="waiting for the GPU")
        try:
            with gate.hold(plan.label, on_wait=lambda s: wait_box.warning(s.message, icon=":material/hourglass_top:")) as handle:
                wait_box.empty()

                def progress(event) -> None:
                    handle.check()  # cancellation requested from any tab: stop between shapes
                    bar.progress(min(event.done / max(event.total, 1), 1.0),
                                 text=f"{event.done}/{event.total} {event.message}")

                outcome = run_guarded(lambda: backend.run(plan, progress))
        except GpuBusy as exc:
            outcome = None
            st.error(str(exc), icon=":material/hourglass_disabled:")
        if outcome is not None:
            if outcome.status == "ok":
                runs.append(outcome.value)
                st.session_state["k_source"] = SESSION_SOURCE  # show what was just measured
                bar.progress(1.0, text="done")
            elif outcome.status == "cancelled":
                st.warning("Run cancelled; nothing was recorded.", icon=":material/cancel:")
            else:
                st.error(outcome.message, icon=":material/error:")

# Which results the views below draw.
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
if shipped.rejected:  # e.g. tuning logs kept beside the harness results: listed, not shown
    with st.expander(f"{len(shipped.rejected)} other file(s) in benchmarks/results are not harness results",
                     icon=":material/draft:"):
        for path, why in shipped.rejected:
            st.caption(f"{path.name}: {why}")

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

# ---------------------------------------------------------------- views
tab_res, tab_roof, tab_sweep, tab_mem, tab_softmax, tab_check = st.tabs(
    [":material/table_chart: Results", ":material/show_chart: Roofline", ":material/timeline: Sweep",
     ":material/memory: Naive vs tiled", ":material/stairs: Online softmax", ":material/verified: Correctness"])

result = None
if report is not None:
    with tab_res:
        with st.container(border=True):
            st.markdown("\n\n".join(provenance_lines(report, source)))
        records = report.decode if kernel == "decode" else report.prefill
        if not records:
            st.info(f"These results hold no {KERNELS[kernel].lower()} shapes.", icon=":material/info:")
        else:
            labels = [f"{r.shape.label} {getattr(r.shape, 'dtype', '')}" for r in records]
            wanted = plan.shape if plan else None
            default = next((i for i, r in enumerate(records) if r.shape == wanted), 0)
            pick = st.selectbox("Shape from these results", range(len(records)), format_func=labels.__getitem__,
                                index=default, key=f"k_pick_{kernel}")
            result = records[pick]
            if wanted is not None and result.shape != wanted:
                st.caption("The shape chosen in the sidebar is not in these results; showing the one picked here.")
            main = result.get("triton_paged" if kernel == "decode" else "triton_flash")
            if main is not None and main.status == "ok":
                m1, m2, m3, m4 = st.columns(4)
                m1.metric("Kernel median time", f"{main.median_ms * 1e3:,.1f} µs")
                m2.metric(f"Achieved {main.unit}", f"{main.rate:,.2f}")
                m3.metric("Share of measured ceiling",
                          "n/a" if main.share_of_measured is None else f"{100 * main.share_of_measured:.0f} %")
                m4.metric("Max abs error vs reference",
                          "n/a" if main.max_abs_err is None else f"{main.max_abs_err:.1e}")
            elif main is not None:
                st.error(f"Kernel: {main.status}. {main.note}", icon=":material/error:")
            st.dataframe(measurement_table(result), hide_index=True, key=f"k_table_{kernel}")
            st.subheader("Theory beside measurement")
            st.dataframe(theory_rows(result, report.ceilings), hide_index=True)
            with st.expander("Targets of this report", icon=":material/flag:"):
                st.dataframe([{"target": t.name, "measured": t.measured, "required": t.required, "met": t.met,
                               "detail": t.detail} for t in report.targets], hide_index=True)
    with tab_roof:
        if result is not None:
            st.plotly_chart(roofline_figure(result, report.ceilings), key="k_roofline")
            st.caption("x: FLOPs per byte the contender must move through HBM (gather-then-SDPA writes and "
                       "re-reads the gathered copy; naive prefill moves S and P). Solid roof: ceilings measured "
                       "in the same run; dashed: datasheet.")
    with tab_sweep:
        if result is not None and kernel == "decode":
            for axis in ("context", "batch"):
                rows = decode_sweep_rows(report, result.shape, axis)
                fixed = f"batch {result.shape.batch}" if axis == "context" else f"context {result.shape.context}"
                if rows[axis].nunique() > 1:
                    st.plotly_chart(sweep_figure(rows, axis, "TB/s", f"Decode KV read rate against {axis} ({fixed})"),
                                    key=f"k_sweep_{axis}")
                else:
                    st.caption(f"Fewer than two {axis} points at {fixed} in these results.")
        elif result is not None:
            rows = prefill_sweep_rows(report, result.shape.causal, result.shape.head_dim, result.shape.dtype)
            st.plotly_chart(sweep_figure(rows, "N", "TFLOP/s", "Prefill rate against N "
                                         f"({'causal' if result.shape.causal else 'non-causal'})"),
                            key="k_sweep_n")
    with tab_mem:
        mem = memory_rows(report)
        if mem.empty:
            st.caption("No naive-vs-tiled memory points in these results.")
        else:
            st.plotly_chart(memory_figure(mem), key="k_memory_fig")
            failed = mem[mem["status"] != "ok"]
            for row in failed.itertuples():
                st.warning(f"N = {row.N:,}: {row.contender} → {row.status} {row.note}", icon=":material/warning:")
            st.dataframe(mem, hide_index=True)

# ---------------------------------------------------------------- online softmax walk-through
with tab_softmax:
    st.markdown("The tiled loop of the reference page for **one head** in NumPy: per key tile the running "
                "max *m* and sum *ℓ* are updated and the partial output rescaled by e^(m − m_new).")
    c1, c2, c3, c4 = st.columns(4)
    sn = c1.selectbox("N (tokens)", (16, 32, 64, 128), index=1, key="k_sm_n")
    sd = c2.selectbox("Head dim", (8, 16, 64), index=1, key="k_sm_d")
    tq = c3.selectbox("Query tile Br", (4, 8, 16, 32, 128), index=2, key="k_sm_tq")
    tk = c4.selectbox("Key tile Bc", (4, 8, 16, 32), index=1, key="k_sm_tk")
    s_causal = st.toggle("Causal", key="k_sm_causal", value=False)
    sm = _softmax_run(sn, sd, tq, tk, s_causal, 0)
    step = st.slider("Step", 1, len(sm.steps), 1, key="k_sm_step")
    cur = sm.steps[step - 1]
    st.plotly_chart(softmax_step_figure(sm, step - 1), key="k_sm_fig")
    r0 = cur.rows[0]
    st.markdown(f"Query block {cur.q_block}, key tile {cur.k_block}. Row {r0}: m {cur.m_old[0]:.3f} → "
                f"{cur.m_new[0]:.3f}, rescale e^(m − m_new) = {cur.rescale[0]:.4f}, ℓ = {cur.l[0]:.4f}"
                + (" — last tile of this block: O / ℓ is final." if cur.last_for_block else "."))
    t = sm.traffic
    m1, m2, m3 = st.columns(3)
    m1.metric("Max |tiled − naive|", f"{sm.max_abs_err:.1e}", help="must stay below 1e-5")
    m2.metric("HBM bytes, naive (FP16)", f"{t.naive_bytes:,}")
    m3.metric("HBM bytes, tiled (FP16)", f"{t.tiled_bytes:,}", f"{t.ratio:.1f}× less", delta_color="off")
    st.caption(f"Naive: 4Nd + 4N² values (S and P written and read). Tiled: Q and O once, K and V once per "
               f"query block ({t.n_q_blocks} blocks). One step's on-chip working set: {t.sram_bytes:,} B.")

# ---------------------------------------------------------------- correctness under the interpreter
with tab_check:
    st.markdown("Every measurement carries its own max error against the float32 reference (column "
                "*max abs error vs fp32 reference* of the results table).")
    if not backend.gpu and interpreter_active():
        st.markdown("Both kernels at a toy size on the CPU (Triton interpreter) against the float32 references.")
        if st.button("Run the kernels under the interpreter", key="k_interp", icon=":material/play_circle:"):
            st.session_state["k_interp_done"] = True
        if st.session_state.get("k_interp_done"):
            outcome = run_guarded(_interpreter_check)
            if outcome.status != "ok":
                st.error(outcome.message, icon=":material/error:")
            else:
                st.dataframe([{"kernel": c.kernel, "dtype": c.dtype, "shape": c.shape, "max abs error": c.max_abs_err,
                               "tolerance": c.tolerance, "ok": c.ok, "seconds": round(c.seconds, 2)}
                              for c in outcome.value], hide_index=True, key="k_interp_table")
                bad = [c for c in outcome.value if not c.ok]
                if bad:
                    st.error(f"{len(bad)} check(s) above tolerance.", icon=":material/error:")
                else:
                    worst = max(c.max_abs_err for c in outcome.value)
                    st.success(f"All {len(outcome.value)} checks within tolerance (worst max error {worst:.1e}).",
                               icon=":material/check_circle:")

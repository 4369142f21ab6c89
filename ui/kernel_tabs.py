"""The live kernel page's other tabs: roofline, sweep, page size, memory, online softmax, correctness.

Streamlit rendering only; the tables and figures come from :mod:`ui.kernel_charts`,
:mod:`ui.kernel_tables` and :mod:`ui.kernel_pagesize`, the numbers from :mod:`kernels` and
:mod:`simulation`. Every chart saves as PNG from its own mode bar; every table has a CSV download.
"""

from __future__ import annotations

import numpy as np
import streamlit as st

from kernels.bench.live import interpreter_check
from kernels.bench.records import BenchReport
from kernels.reference.online_softmax import online_softmax_attention, random_head
from simulation.explorer import WorkloadSettings, build_workload
from ui.gpu_lock import run_guarded
from ui.layout import metric_row
from ui.kernel_charts import (
    ROOFLINE_FORMATS, decode_sweep_rows, memory_figure, plot_config, prefill_sweep_rows, roofline_figure,
    roofline_points_frame, softmax_step_figure, sweep_figure,
)
from ui.kernel_controls import page_size_controls, softmax_controls
from planner.page_size import page_size_study
from ui.kernel_pagesize import PAGE_SIZE_FORMATS, page_size_answer, page_size_figure, page_size_frame
from ui.kernel_results import download_csv, grid
from ui.kernel_tables import (
    INTERPRETER_FORMATS, MEMORY_FORMATS, MIXED_FORMATS, interpreter_frame, memory_frame, mixed_frame, shown,
)

__all__ = ["roofline_tab", "sweep_tab", "page_size_tab", "memory_tab", "softmax_tab", "check_tab"]

PS_REQUESTS = 10_000  # requests drawn from a preset for the page-size study (seed 0)


@st.cache_data(show_spinner="Running the kernels under the Triton interpreter...")
def _interpreter_check():
    return interpreter_check()


@st.cache_data(show_spinner=False)
def _softmax_run(n: int, d: int, tile_q: int, tile_k: int, causal: bool, seed: int):
    q, k, v = random_head(n, d, np.random.default_rng(seed), spread=2.0)
    return online_softmax_attention(q, k, v, tile_q=tile_q, tile_k=tile_k, causal=causal)


@st.cache_data(show_spinner=False, max_entries=8)
def _workload(choice: str):
    kind, _, name = choice.partition(": ")
    settings = WorkloadSettings(kind="trace" if kind == "Trace" else "preset", name=name, n=PS_REQUESTS, seed=0)
    return build_workload(settings)


def _chart(fig, key: str, name: str) -> None:
    st.plotly_chart(fig, key=key, config=plot_config(name))


def roofline_tab(result, ceilings) -> None:
    _chart(roofline_figure(result, ceilings), "k_roofline", f"roofline_{result.shape.label}")
    st.caption("x: FLOPs per byte the contender must move through HBM (gather-then-SDPA writes and re-reads the "
               "gathered copy; naive prefill moves S and P; FP8 and INT4 KV read fewer bytes). Solid roof: "
               "ceilings measured in the same run; dashed: datasheet. Hollow markers of different shapes and "
               "sizes keep contenders at the same point apart; the table lists every point.")
    points = roofline_points_frame(result)
    grid(shown(points, ROOFLINE_FORMATS), key="k_roof_points")
    download_csv(points, f"roofline_{result.shape.label}", key="k_roof_csv", label="Download the points (CSV)")


def sweep_tab(report: BenchReport, result, kernel: str) -> None:
    if kernel == "mixed":
        st.markdown("Every mixed batch of these results: one launch against two launches, gather-then-SDPA "
                    "and, for prefill-only batches, the dense forward and cuDNN on the same tokens.")
        rows = mixed_frame(report)
        grid(shown(rows, MIXED_FORMATS), key="k_mixed_rows")
        download_csv(rows, "mixed_batches", key="k_mixed_csv", label="Download the mixed batches (CSV)")
        return
    if kernel == "decode":
        for axis in ("context", "batch"):
            rows = decode_sweep_rows(report, result.shape, axis)
            fixed = f"batch {result.shape.batch}" if axis == "context" else f"context {result.shape.context}"
            if rows[axis].nunique() > 1:
                _chart(sweep_figure(rows, axis, "TB/s", f"Decode KV read rate against {axis} ({fixed})"),
                       f"k_sweep_{axis}", f"decode_sweep_{axis}_{fixed}")
            else:
                st.caption(f"Fewer than two {axis} points at {fixed} in these results.")
        return
    rows = prefill_sweep_rows(report, result.shape.causal, result.shape.head_dim, result.shape.dtype)
    kind = "causal" if result.shape.causal else "non-causal"
    _chart(sweep_figure(rows, "N", "TFLOP/s", f"Prefill rate against N ({kind})"), "k_sweep_n", f"prefill_sweep_{kind}")


def page_size_tab(report: BenchReport) -> None:
    """Which page size: the kernel's TB/s per block size beside the waste on the user's workload."""
    st.markdown("The reference page's first open problem: *page size trades fragmentation against gather "
                "overhead*. The kernel's side comes from these results' page-size study (the same kernel, only "
                "the block size changes, block tables shuffled); the memory side from the simulator, each "
                "request paged at its final length.")
    work, ctx = page_size_controls()
    try:
        workload = _workload(work)
    except ValueError as exc:
        st.error(f"The workload could not be read: {exc}", icon=":material/error:")
        return
    study = page_size_study(report, workload, max_context=ctx)
    if study is None:
        st.info("These results hold no page-size study (`BenchReport.page_sizes`); the shipped H200 run has one.",
                icon=":material/info:")
        return
    _chart(page_size_figure(study), "k_pagesize", f"page_size_{work}")
    st.markdown(page_size_answer(study))
    frame = page_size_frame(study)
    grid(shown(frame, {**PAGE_SIZE_FORMATS, **{c: ".2f" for c in frame.columns if c.startswith("TB/s")}}),
         key="k_pagesize_table")
    download_csv(frame, f"page_size_{work}", key="k_pagesize_csv", label="Download the page-size study (CSV)")


def memory_tab(report: BenchReport) -> None:
    mem = memory_frame(report)
    if mem.empty:
        st.caption("No naive-vs-tiled memory points in these results.")
        return
    _chart(memory_figure(mem), "k_memory_fig", "naive_vs_tiled_memory")
    for row in mem[mem["Status"] != "ok"].to_dict("records"):
        st.warning(f"N = {row['N (tokens)']:,}: {row['Contender']} → {row['Status']} {row['Note']}",
                   icon=":material/warning:")
    grid(shown(mem, MEMORY_FORMATS), key="k_memory_table")
    download_csv(mem, "naive_vs_tiled_memory", key="k_memory_csv", label="Download the memory points (CSV)")


def softmax_tab() -> None:
    """The reference page's tiled loop for one head in NumPy, one key tile per step."""
    st.markdown("The tiled loop of the reference page for **one head** in NumPy: per key tile the running "
                "max *m* and sum *ℓ* are updated and the partial output rescaled by e^(m − m_new).")
    n, d, tq, tk, causal, step = softmax_controls(lambda *a: len(_softmax_run(*a, 0).steps))
    sm = _softmax_run(n, d, tq, tk, causal, 0)
    cur = sm.steps[step - 1]
    _chart(softmax_step_figure(sm, step - 1), "k_sm_fig", f"online_softmax_N{n}_step{step}")
    r0 = cur.rows[0]
    st.markdown(f"Query block {cur.q_block}, key tile {cur.k_block}. Row {r0}: m {cur.m_old[0]:.3f} → "
                f"{cur.m_new[0]:.3f}, rescale e^(m − m_new) = {cur.rescale[0]:.4f}, ℓ = {cur.l[0]:.4f}"
                + (" — last tile of this block: O / ℓ is final." if cur.last_for_block else "."))
    t = sm.traffic
    m1 = m2 = m3 = metric_row()  # wraps at narrow widths instead of cutting values to "…"
    m1.metric("Max |tiled − naive|", f"{sm.max_abs_err:.1e}", help="must stay below 1e-5")
    m2.metric("HBM bytes, naive (FP16)", f"{t.naive_bytes:,}")
    m3.metric("HBM bytes, tiled (FP16)", f"{t.tiled_bytes:,}", f"{t.ratio:.1f}× less", delta_color="off")
    st.caption(f"Naive: 4Nd + 4N² values (S and P written and read). Tiled: Q and O once, K and V once per "
               f"query block ({t.n_q_blocks} blocks). One step's on-chip working set: {t.sram_bytes:,} B.")


def check_tab(*, gpu: bool, interpreting: bool) -> None:
    """Every measurement's own error, and without a GPU the kernels run under the interpreter."""
    st.markdown("Every measurement carries its own max error against the float32 reference (column "
                "*Max abs error vs fp32* of the results table).")
    if gpu or not interpreting:
        return
    st.markdown("The kernels at a toy size on the CPU (Triton interpreter) against the float32 references.")
    if st.button("Run the kernels under the interpreter", key="k_interp", icon=":material/play_circle:"):
        st.session_state["k_interp_done"] = True
    if not st.session_state.get("k_interp_done"):
        return
    outcome = run_guarded(_interpreter_check)
    if outcome.status != "ok":
        st.error(outcome.message, icon=":material/error:")
        return
    frame = interpreter_frame(outcome.value)
    grid(shown(frame, INTERPRETER_FORMATS), key="k_interp_table")
    download_csv(frame, "interpreter_check", key="k_interp_csv", label="Download the checks (CSV)")
    bad = [c for c in outcome.value if not c.ok]
    if bad:
        st.error(f"{len(bad)} check(s) above tolerance.", icon=":material/error:")
    else:
        worst = max(c.max_abs_err for c in outcome.value)
        st.success(f"All {len(outcome.value)} checks within tolerance (worst max error {worst:.1e}).",
                   icon=":material/check_circle:")

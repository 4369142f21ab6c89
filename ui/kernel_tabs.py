"""The live kernel page's tabs that need no run of their own: sweep, memory, online softmax, correctness.

Streamlit rendering only; the tables and figures come from :mod:`ui.kernel_charts`, the
numbers from :mod:`kernels`. Widget keys keep the page's ``k_`` prefix.
"""

from __future__ import annotations

import numpy as np
import streamlit as st

from kernels.bench.live import interpreter_check
from kernels.online_softmax import online_softmax_attention, random_head
from ui.gpu_lock import run_guarded
from ui.kernel_charts import (
    decode_sweep_rows, interpreter_rows, memory_figure, memory_rows, mixed_rows, prefill_sweep_rows,
    softmax_step_figure, sweep_figure,
)

__all__ = ["sweep_tab", "memory_tab", "softmax_tab", "check_tab"]


@st.cache_data(show_spinner="Running the kernels under the Triton interpreter...")
def _interpreter_check():
    return interpreter_check()


@st.cache_data(show_spinner=False)
def _softmax_run(n: int, d: int, tile_q: int, tile_k: int, causal: bool, seed: int):
    q, k, v = random_head(n, d, np.random.default_rng(seed), spread=2.0)
    return online_softmax_attention(q, k, v, tile_q=tile_q, tile_k=tile_k, causal=causal)


def sweep_tab(report, result, kernel: str) -> None:
    if kernel == "mixed":
        st.markdown("Every mixed batch of these results: one launch against two launches, gather-then-SDPA "
                    "and, for prefill-only batches, the dense forward and cuDNN on the same tokens.")
        st.dataframe(mixed_rows(report), hide_index=True, key="k_mixed_rows")
        return
    if kernel == "decode":
        for axis in ("context", "batch"):
            rows = decode_sweep_rows(report, result.shape, axis)
            fixed = f"batch {result.shape.batch}" if axis == "context" else f"context {result.shape.context}"
            if rows[axis].nunique() > 1:
                st.plotly_chart(sweep_figure(rows, axis, "TB/s", f"Decode KV read rate against {axis} ({fixed})"),
                                key=f"k_sweep_{axis}")
            else:
                st.caption(f"Fewer than two {axis} points at {fixed} in these results.")
        return
    rows = prefill_sweep_rows(report, result.shape.causal, result.shape.head_dim, result.shape.dtype)
    kind = "causal" if result.shape.causal else "non-causal"
    st.plotly_chart(sweep_figure(rows, "N", "TFLOP/s", f"Prefill rate against N ({kind})"), key="k_sweep_n")


def memory_tab(report) -> None:
    mem = memory_rows(report)
    if mem.empty:
        st.caption("No naive-vs-tiled memory points in these results.")
        return
    st.plotly_chart(memory_figure(mem), key="k_memory_fig")
    for row in mem[mem["status"] != "ok"].itertuples():
        st.warning(f"N = {row.N:,}: {row.contender} → {row.status} {row.note}", icon=":material/warning:")
    st.dataframe(mem, hide_index=True)


def softmax_tab() -> None:
    """The reference page's tiled loop for one head in NumPy, one key tile per step."""
    st.markdown("The tiled loop of the reference page for **one head** in NumPy: per key tile the running "
                "max *m* and sum *ℓ* are updated and the partial output rescaled by e^(m − m_new).")
    c1, c2, c3, c4 = st.columns(4)
    sn = c1.selectbox("N (tokens)", (16, 32, 64, 128), index=1, key="k_sm_n")
    sd = c2.selectbox("Head dim", (8, 16, 64), index=1, key="k_sm_d")
    tq = c3.selectbox("Query tile Br", (4, 8, 16, 32, 128), index=2, key="k_sm_tq")
    tk = c4.selectbox("Key tile Bc", (4, 8, 16, 32), index=1, key="k_sm_tk")
    sm = _softmax_run(sn, sd, tq, tk, st.toggle("Causal", key="k_sm_causal", value=False), 0)
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


def check_tab(*, gpu: bool, interpreting: bool) -> None:
    """Every measurement's own error, and without a GPU the kernels run under the interpreter."""
    st.markdown("Every measurement carries its own max error against the float32 reference (column "
                "*max abs error vs fp32 reference* of the results table).")
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
    st.dataframe(interpreter_rows(outcome.value), hide_index=True, key="k_interp_table")
    bad = [c for c in outcome.value if not c.ok]
    if bad:
        st.error(f"{len(bad)} check(s) above tolerance.", icon=":material/error:")
    else:
        worst = max(c.max_abs_err for c in outcome.value)
        st.success(f"All {len(outcome.value)} checks within tolerance (worst max error {worst:.1e}).",
                   icon=":material/check_circle:")

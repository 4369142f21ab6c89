"""The live kernel page's Results tab: provenance, the picked shape's figures, its tables and
the report's targets, each table with its CSV download (streamlit rendering only).

The tables come from :mod:`ui.kernel_tables` (numeric for the download, :func:`shown` for the
screen), the sentences from :mod:`ui.kernel_theory` and :mod:`kernels.bench.target_notes`.
"""

from __future__ import annotations

import re

import pandas as pd
import streamlit as st

from glossary import dtype_label
from kernels.bench.records import BenchReport, report_to_json
from kernels.bench.shipped import installed_versions, provenance_lines
from ui.kernel_charts import shape_labels
from ui.layout import metric_row
from ui.kernel_controls import KERNELS, follow_sidebar
from ui.kernel_tables import (
    measurement_formats, measurement_frame, shown, target_frame,
)
from ui.tables import column_widths
from ui.kernel_theory import REFERENCE_PAGE, ceiling_note, launch_bound_note, theory_frame

__all__ = ["results_tab", "grid", "download_csv", "download_report", "MAIN"]

MAIN = {"decode": "triton_paged", "prefill": "triton_flash", "mixed": "triton_chunked"}
SHARE_HELP = ("The kernel's rate over the device-to-device copy bandwidth measured in the same run (its reads "
              "and writes counted). A kernel that only reads can pass 100 %; the datasheet is the hard limit.")


def _file_name(text: str, suffix: str) -> str:
    return (re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")[:80] or "kernels") + suffix


def grid(frame: pd.DataFrame, key: str) -> None:
    """A text frame from :func:`ui.kernel_tables.shown` as a table with no cell cut to "…"."""
    st.dataframe(frame, hide_index=True, key=key, column_config=column_widths(frame))


def download_csv(frame: pd.DataFrame, name: str, key: str, label: str = "Download the table (CSV)") -> None:
    """A CSV download of ``frame`` at full precision (empty cells where nothing was measured)."""
    st.download_button(label, frame.to_csv(index=False), file_name=_file_name(name, ".csv"), mime="text/csv",
                       key=key, icon=":material/download:", on_click="ignore")


def download_report(report: BenchReport, source: str, key: str) -> None:
    """The results shown, as the harness JSON (readable back by the upload box and the CLI)."""
    st.download_button("Download these results (harness JSON)", report_to_json(report),
                       file_name=_file_name(source.partition(": ")[2] or source, ".json").replace(".json.json", ".json"),
                       mime="application/json", key=key, icon=":material/download:", on_click="ignore")


def _metrics(result, report: BenchReport, kernel: str) -> None:
    main = result.get(MAIN[kernel])
    if main is None:
        return
    if main.status != "ok":
        st.error(f"Kernel: {main.status}. {main.note}", icon=":material/error:")
        return
    row = metric_row()  # wraps at narrow widths instead of cutting values to "…"
    m1 = m2 = m3 = m4 = row
    m1.metric("Kernel median time", f"{main.median_ms * 1e3:,.1f} µs",
              help="CUDA-graph replay where the run has one, else eager calls (both are in the table).")
    m2.metric(f"Achieved {main.unit}", f"{main.rate:,.2f}")
    m3.metric("Share of measured ceiling",
              "n/a" if main.share_of_measured is None else f"{100 * main.share_of_measured:.0f} %", help=SHARE_HELP)
    m4.metric("Max abs error vs reference", "n/a" if main.max_abs_err is None else f"{main.max_abs_err:.1e}")
    for note in (ceiling_note(main, report.ceilings), launch_bound_note(result, report.ceilings)):
        if note:
            st.info(note, icon=":material/lightbulb:")


def _targets(report: BenchReport, key: str) -> None:
    st.subheader("Targets of this report")
    frame = target_frame(report)
    if frame.empty:
        st.caption("These results carry no targets.")
        return
    met = int((frame["Met"] == "yes").sum())
    st.markdown(f"**{met} of {len(frame)} met** (worst shape in each range, as the harness computes them).")
    grid(shown(frame.drop(columns=["What limits it"]), {}), key=f"{key}_table")
    unmet = frame[frame["Met"] == "no"]
    if not unmet.empty:
        lines = []
        for row in unmet.to_dict("records"):
            measured = "not measured" if row["Measured"] is None else row["Measured"]
            lines.append(f"- {row['In plain words']}, `{row['Target']}` ({measured}, needs {row['Required']}; "
                         f"{row['Worst shape']}): {row['What limits it'] or 'no figure in this run.'}")
        st.markdown("**What limits the unmet ones**\n\n" + "\n".join(lines))
    download_csv(frame, "kernel_targets", key=f"{key}_csv", label="Download the targets (CSV)")


def results_tab(report: BenchReport, source: str, kernel: str, plan):
    """Provenance, the picked shape's figures and tables, the targets; returns the picked record."""
    with st.container(border=True):
        st.markdown("\n\n".join(provenance_lines(report, source, installed_versions())))
    download_report(report, source, key="k_download_shown")
    records = {"decode": report.decode, "prefill": report.prefill, "mixed": report.mixed}[kernel]
    if not records:
        st.info(f"These results hold no {KERNELS[kernel].lower()} shapes.", icon=":material/info:")
        _targets(report, key="k_targets")
        return None
    wanted = plan.shape if plan else None
    result, matched = follow_sidebar(records, wanted, kernel, shape_labels(records))
    if wanted is not None and not matched:
        st.caption("The shape chosen in the sidebar is not in these results; showing the one picked here.")
    _metrics(result, report, kernel)
    table = measurement_frame(result)
    grid(shown(table, measurement_formats(table)), key=f"k_table_{kernel}")
    st.caption(f"Rates count each contender's own bytes or FLOPs ({dtype_label('fp8')} KV one byte per value, "
               f"{dtype_label('int4')} its codes and scales); × cuDNN and × Triton BF16 are time ratios on this "
               "shape (above 1: faster).")
    download_csv(table, f"kernel_{result.shape.label}", key="k_table_csv", label="Download the measurements (CSV)")
    st.subheader("Theory beside measurement")
    st.caption(f"The traffic model of the reference page ({REFERENCE_PAGE}, which this app is built from): "
               "bytes over bandwidth for decode, FLOPs over the tensor-core rate for prefill.")
    theory = theory_frame(result, report.ceilings)
    grid(shown(theory, {}), key="k_theory")
    download_csv(theory, f"kernel_theory_{result.shape.label}", key="k_theory_csv", label="Download the theory (CSV)")
    _targets(report, key="k_targets")
    return result

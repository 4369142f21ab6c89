"""The live-kernels page where Triton cannot be installed (macOS, Windows): what is unavailable,
and the shipped H200 results that need no kernel to show (targets and the page-size study).

Imports nothing that imports Triton: ``kernels.bench.records`` / ``shipped`` / ``target_notes``,
``ui.kernel_tables``, ``ui.kernel_pagesize`` and ``planner.page_size`` are plain Python and pandas.
"""

from __future__ import annotations

import platform

import streamlit as st

from kernels.bench.shipped import RESULTS_DIR, find_shipped_results, installed_versions, provenance_lines
from simulation.explorer import WorkloadSettings, build_workload
from simulation.workloads import PRESETS
from planner.page_size import page_size_study
from ui.kernel_pagesize import PAGE_SIZE_FORMATS, page_size_answer, page_size_figure, page_size_frame
from ui.kernel_tables import shown, target_frame
from ui.tables import column_widths

__all__ = ["offline_page", "UNAVAILABLE"]

UNAVAILABLE = ("timing the kernels on a GPU", "running them under the Triton interpreter (the correctness check)",
               "the online-softmax walk-through (it runs a Triton kernel)")
_REQUESTS = 10_000  # requests drawn from the first preset for the page-size study (seed 0)


def offline_page(results_dir=RESULTS_DIR) -> None:
    """Say what needs Triton, then show the newest shipped run's targets and page-size study."""
    st.title(":material/speed: Live kernels")
    st.warning(f"**Triton is not installed** ({platform.system() or 'this platform'}: Triton publishes wheels for "
               "Linux only, so requirements.txt installs it there alone). Unavailable here: "
               + "; ".join(UNAVAILABLE) + ". The results shipped with the repository are shown below.",
               icon=":material/extension_off:")
    shipped = find_shipped_results(results_dir)
    if shipped.newest is None:
        st.info("No shipped results were found in benchmarks/results/.", icon=":material/info:")
        return
    report = shipped.newest.report
    st.caption(" · ".join(provenance_lines(report, shipped.newest.path.name, installed_versions())))
    st.subheader("Targets")
    targets = shown(target_frame(report), {})
    st.dataframe(targets, hide_index=True, key="k_offline_targets", column_config=column_widths(targets))
    preset = PRESETS[0]
    study = page_size_study(report, build_workload(WorkloadSettings(kind="preset", name=preset.name, n=_REQUESTS,
                                                                    seed=0)), max_context=32768)
    if study is not None:
        st.subheader(f"Which page size (workload: {preset.name})")
        st.plotly_chart(page_size_figure(study), key="k_offline_pagesize")
        st.markdown(page_size_answer(study))
        frame = page_size_frame(study)
        table = shown(frame, {**PAGE_SIZE_FORMATS, **{c: ".2f" for c in frame.columns if c.startswith("TB/s")}})
        st.dataframe(table, hide_index=True, key="k_offline_pagesize_table", column_config=column_widths(table))

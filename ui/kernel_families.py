"""The kernel page's attention-families section: the newest shipped families run
(``benchmarks/results/families/``, written by ``python -m kernels.bench --families``), shown on
any machine: per shape and window, full attention over the context and over the window,
sliding, sliding with sinks, and the targets."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from kernels.bench.family_records import FamiliesReport, ok_ms, ratio, read_families_file
from kernels.bench.records import measured_text, required_text
from kernels.bench.results_json import newest_readable
from kernels.bench.shipped import RESULTS_DIR
from kernels.bench.target_notes import label_of
from ui.kernel_tables import times_text, us_text

__all__ = ["FAMILIES_DIR", "newest_families", "families_frame", "families_section"]

FAMILIES_DIR = RESULTS_DIR / "families"


def newest_families(directory: Path = FAMILIES_DIR) -> tuple[FamiliesReport, str] | None:
    """The newest valid families file and its name, or None (:func:`kernels.bench.results_json.newest_readable`)."""
    return newest_readable(directory, read_families_file)


def families_frame(report: FamiliesReport) -> pd.DataFrame:
    """One row per shape and window: the contenders' CUDA-graph µs and the two ratios."""
    rows = []
    for result in report.results:
        full = ok_ms(result, "full")
        for w in result.windows:
            sliding = ok_ms(w, "sliding")
            rows.append({
                "Shape": result.shape.label, "Window W (tokens)": f"{w.window:,}",
                "Full over L (µs)": us_text(full), "Full over W (µs)": us_text(ok_ms(w, "window_full")),
                "Sliding (µs)": us_text(sliding), "Sliding + sinks (µs)": us_text(ok_ms(w, "sliding_sinks")),
                "Full over L ÷ sliding": times_text(ratio(full, sliding)),
                "Sinks ÷ sliding": times_text(ratio(ok_ms(w, "sliding_sinks"), sliding)),
            })
    return pd.DataFrame(rows)


def _targets_frame(report: FamiliesReport) -> pd.DataFrame:
    return pd.DataFrame({"Target": [t.name for t in report.targets],
                         "In plain words": [label_of(t.name) for t in report.targets],
                         "Measured": [measured_text(t) or "—" for t in report.targets],
                         "Required": [required_text(t) for t in report.targets],
                         "Met": ["yes" if t.met else "no" for t in report.targets]})


def families_section() -> None:
    """The section, or one line saying no families run is shipped."""
    found = newest_families()
    st.subheader("Sliding windows and sinks (Gemma, gpt-oss)")
    if found is None:
        st.caption("No families run is shipped (`python -m kernels.bench --families --json …` writes one).")
        return
    report, name = found
    p = report.provenance
    st.caption(f"Shipped run `{name}`: {p.device}, torch {p.torch}, triton {p.triton}, {p.date[:10]}, "
               f"commit {p.commit}. The same paged decode kernel reads only the pages a window can see; "
               "a sink is one extra logit per query head in the softmax.")
    st.dataframe(families_frame(report), hide_index=True, width="stretch")
    st.dataframe(_targets_frame(report), hide_index=True, width="stretch")

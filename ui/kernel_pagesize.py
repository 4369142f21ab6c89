"""Which page size, drawn: the study's table, figure and the sentence that answers the question.

The numbers come from :func:`planner.page_size.page_size_study` (the decode kernel's read rate per
block size from a report's page-size study, beside the simulator's waste for the user's
workload). No streamlit here.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from planner.page_size import PageSizeStudy
from simulation.snapshot import DEFAULT_BLOCK_SIZE

__all__ = ["page_size_frame", "page_size_figure", "page_size_answer", "PAGE_SIZE_FORMATS", "FLAT_RATE"]

# Below this spread of the kernel's rate over the block sizes the kernel does not pick the page size.
FLAT_RATE = 0.05
VLLM_DEFAULT_BLOCK = DEFAULT_BLOCK_SIZE  # vLLM's default, the block a reader compares with


def page_size_frame(study: PageSizeStudy) -> pd.DataFrame:
    """One row per block size: the kernel's rate per shape, the waste, the score."""
    data: dict[str, list] = {"Block size (tokens)": list(study.block_sizes)}
    for shape, row in zip(study.shapes, study.tbps):
        data[f"TB/s at {shape}"] = list(row)
    data["Waste per sequence, simulated (tokens)"] = list(study.waste_tokens)
    data["Waste per sequence, (B − 1) / 2 (tokens)"] = list(study.waste_expected)
    data["Cache holding tokens (%)"] = [100 * u for u in study.utilisation]
    data["Score (best = 1)"] = list(study.score)
    return pd.DataFrame(data)


PAGE_SIZE_FORMATS = {"Block size (tokens)": ",d", "Waste per sequence, simulated (tokens)": ",.1f",
                     "Waste per sequence, (B − 1) / 2 (tokens)": ",.1f", "Cache holding tokens (%)": ".2f",
                     "Score (best = 1)": ".4f"}


def page_size_figure(study: PageSizeStudy) -> go.Figure:
    """TB/s per block size (lines, left axis) beside the waste per sequence (bars, right axis)."""
    x = [str(b) for b in study.block_sizes]  # categories: the sizes double, evenly spaced
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    for shape, row in zip(study.shapes, study.tbps):
        fig.add_trace(go.Scatter(x=x, y=list(row), mode="lines+markers", name=f"kernel TB/s, {shape}",
                                 hovertemplate="block %{x}: %{y:.2f} TB/s<extra>" + shape + "</extra>"),
                      secondary_y=False)
    fig.add_trace(go.Bar(x=x, y=list(study.waste_tokens), name="waste per sequence, simulated", opacity=0.45,
                         marker={"color": "#d62728"},
                         customdata=[100 * (1 - u) for u in study.utilisation],
                         hovertemplate="block %{x}: %{y:.1f} tokens (%{customdata:.2f} % of the cache)<extra></extra>"),
                  secondary_y=True)
    fig.add_trace(go.Scatter(x=x, y=list(study.waste_expected), mode="lines", name="waste expected, (B − 1) / 2",
                             line={"dash": "dot", "color": "#d62728"}), secondary_y=True)
    best = str(study.best_block)
    fig.add_vline(x=x.index(best), line={"dash": "dash", "color": "grey"})
    fig.add_annotation(x=best, y=1.06, yref="paper", text=f"best: block {best}", showarrow=False)
    fig.update_xaxes(title_text="block size (tokens per page)", type="category")
    fig.update_yaxes(title_text="decode KV read rate (TB/s)", secondary_y=False)
    fig.update_yaxes(title_text="waste per sequence (tokens)", secondary_y=True, showgrid=False)
    fig.update_layout(title=f"Which page size: kernel rate and waste on {study.workload}", height=460,
                      legend={"orientation": "h", "y": -0.25}, barmode="overlay")
    return fig


def page_size_answer(study: PageSizeStudy) -> str:
    """The study's answer in the user's numbers (markdown, one paragraph)."""
    i = study.block_sizes.index(study.best_block)
    lo, hi = study.block_sizes[0], study.block_sizes[-1]
    rates = ", ".join(f"{min(row):.2f}–{max(row):.2f} TB/s at {shape}" for shape, row in zip(study.shapes, study.tbps))
    best_rates = " and ".join(f"{row[i]:.2f}" for row in study.tbps)
    text = (f"On **{study.workload}** ({study.n_requests:,} requests, {study.mean_tokens:,.0f} tokens per sequence "
            f"on average, clipped at {study.max_context:,}), the kernel reads {rates} from block {lo} to {hi} "
            f"(at most {100 * study.rate_spread:.1f} % apart), while the waste grows from "
            f"{study.waste_tokens[0]:,.1f} to {study.waste_tokens[-1]:,.1f} tokens per sequence "
            f"({100 * (1 - study.utilisation[-1]):.2f} % of the cache at block {hi}). "
            f"**Block {study.best_block}** gives the most sequences times read speed: "
            f"{study.waste_tokens[i]:,.1f} tokens wasted per sequence ({100 * (1 - study.utilisation[i]):.2f} % of "
            f"the cache) at {best_rates} TB/s.")
    if VLLM_DEFAULT_BLOCK in study.block_sizes and study.best_block != VLLM_DEFAULT_BLOCK:
        j = study.block_sizes.index(VLLM_DEFAULT_BLOCK)
        text += (f" vLLM's default, block {VLLM_DEFAULT_BLOCK}, scores {100 * study.score[j]:.1f} % of that "
                 f"({study.waste_tokens[j]:,.1f} tokens wasted per sequence); the score leaves out the block "
                 "table and the allocator's bookkeeping, which grow as the blocks shrink.")
    if study.rate_spread < FLAT_RATE:
        text += (f" The kernel's rate moves by less than {100 * FLAT_RATE:.0f} %, so the page size is a memory "
                 "choice, not a kernel one: choose it for fragmentation, block-table size and how finely "
                 "prefixes can be shared.")
    return text

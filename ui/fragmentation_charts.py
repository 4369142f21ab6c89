"""Plotly figures and tables of the fragmentation explorer (drawing only; the numbers come from
:mod:`simulation.explorer`)."""

from __future__ import annotations

import math
import textwrap
from dataclasses import asdict

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from glossary import allocator_label
from simulation.block_table import BlockTableDemo
from simulation.explorer import PrefixView
from simulation.paper_figure2 import CATEGORIES, Figure2Reproduction
from simulation.memory import GIB, KvBudget, MemoryBreakdown
from simulation.sharing import SharingResult
from simulation.snapshot import BlockSizeSweep, PolicyRow, SnapshotResult
from simulation.timeline import TimelineResult
from inputs.uploads import dumps_strict, finite_or_none
from ui.tables import percent_text
from units import best_unit, to_unit

POOL_COLUMNS = 16  # blocks per row in the block-table view's picture of the pool
POOL_FREE_COLOUR, POOL_SHARED_COLOUR = "#eeeeee", "#7f7f7f"
SEQUENCE_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728")  # one per demo sequence (≤ 4)
# Figure-2 colours: tokens blue, reservation amber, internal red, external purple, free grey.
COLOURS = {"token_states": "#1f77b4", "reservation": "#f0a202", "internal_fragmentation": "#d62728",
           "external_fragmentation": "#9467bd", "free": "#d9d9d9"}
# Horizontal legends sit below the plot, clear of the x-axis title (tests/ui/test_chart_layout.py
# checks the gap in pixels), never over a chart's title.
LEGEND_BELOW = dict(orientation="h", yanchor="top", y=-0.3, x=0)
# Charts drawn side by side are about 225 px wide in an 800 px window with the sidebar open
# (tests/browser/test_chart_layout_browser.py measures them): a 17 px title fits about 28
# characters on a line there, a bar label beside its axis about 12.
TITLE_CHARS, CATEGORY_CHARS = 28, 12
TITLE_LINE_PX, TOP_MARGIN_PX = 22, 40  # one line of Plotly's title font; the margin for one line
# Tick labels a log block-size axis names at most: 9 powers of two from 1 to 256 ran together as
# "128256" in a 225 px chart; every other one (1, 4, 16, 64, 256) reads apart there.
MAX_BLOCK_TICKS = 5
LABELS = {"token_states": "token states", "reservation": "reservation",
          "internal_fragmentation": "internal fragmentation",
          "external_fragmentation": "external fragmentation", "free": "free"}


def wrapped(text: str, chars: int) -> str:
    """``text`` broken at spaces into lines of at most ``chars`` characters, joined by Plotly's
    ``<br>`` (Plotly never wraps a title or a tick label itself)."""
    return "<br>".join(textwrap.wrap(text, chars)) or text


def titled(text: str) -> dict:
    """A figure title wrapped to :data:`TITLE_CHARS`, and the top margin (px) its lines need:
    ``{"title": ..., "margin_top": ...}``."""
    title = wrapped(text, TITLE_CHARS)
    return {"title": title, "margin_top": TOP_MARGIN_PX + TITLE_LINE_PX * title.count("<br>")}


def block_ticks(sizes) -> list[int]:
    """Every k-th of the swept block sizes from the first, k the smallest step that leaves at
    most :data:`MAX_BLOCK_TICKS` (evenly spaced on a log axis of powers of two); the markers
    still show every size."""
    sizes = [int(s) for s in sizes]
    return sizes[::max(1, math.ceil(len(sizes) / MAX_BLOCK_TICKS))]


def picture_figure(result: SnapshotResult) -> go.Figure:
    """The first requests stored both ways, on the same scale (the reference page's picture)."""
    picture = result.picture
    rows = np.arange(1, picture.tokens.size + 1)
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.03,
                        subplot_titles=("Contiguous: reserve the context", "Paged: blocks as needed"))
    fig.add_bar(y=rows, x=picture.tokens, orientation="h", name="tokens", marker_color=COLOURS["token_states"],
                row=1, col=1)
    fig.add_bar(y=rows, x=picture.contiguous_slots - picture.tokens, orientation="h",
                name="reserved but empty", marker_color=COLOURS["reservation"], row=1, col=1)
    fig.add_bar(y=rows, x=picture.tokens, orientation="h", name="tokens", showlegend=False,
                marker_color=COLOURS["token_states"], row=1, col=2)
    fig.add_bar(y=rows, x=picture.paged_slots - picture.tokens, orientation="h",
                name="empty end of last block", marker_color=COLOURS["internal_fragmentation"], row=1, col=2)
    top = float(picture.contiguous_slots.max())
    fig.update_xaxes(range=[0, top], title_text="token slots")  # the same scale both ways
    fig.update_yaxes(autorange="reversed", title_text="request", row=1, col=1)
    fig.update_layout(barmode="stack", height=520, margin=dict(t=40, b=10),
                      legend=LEGEND_BELOW)
    return fig


def sweep_figure(sweep: BlockSizeSweep) -> go.Figure:
    """Simulated paged waste against block size, beside the (B − 1)/2 expectation."""
    fig = go.Figure()
    fig.add_scatter(x=sweep.block_sizes, y=sweep.waste_tokens_mean, mode="lines+markers", name="simulated")
    fig.add_scatter(x=sweep.block_sizes, y=sweep.waste_tokens_expected, mode="lines",
                    line=dict(dash="dash"), name="expected (B − 1)/2 ≈ B/2")
    fig.update_xaxes(type="log", title_text="block size B (tokens)", tickvals=block_ticks(sweep.block_sizes),
                     tickangle=0)
    fig.update_yaxes(title_text="empty slots per sequence (tokens)")
    head = titled("Paged waste by block size")
    fig.update_layout(height=380, margin=dict(t=head["margin_top"], b=10), title=head["title"],
                      legend=LEGEND_BELOW)
    return fig


def breakdown_figure(names: list[str], breakdowns: list[MemoryBreakdown], title: str) -> go.Figure:
    """Stacked shares of the budget per scheme, in the paper's figure-2 categories. The title and
    the scheme names are wrapped to fit a half-width chart at 800 px."""
    fig = go.Figure()
    shares = [asdict(b.fractions()) for b in breakdowns]
    for part, colour in COLOURS.items():
        fig.add_bar(y=names, x=[100 * s[part] for s in shares], orientation="h", name=LABELS[part],
                    marker_color=colour)
    head = titled(title)
    fig.update_layout(barmode="stack", height=420, title=head["title"], margin=dict(t=head["margin_top"], b=10),
                      xaxis_title="% of the KV budget", yaxis_title="scheme", legend=LEGEND_BELOW)
    # The names stay the categories (what hovering shows); only their tick labels are wrapped.
    fig.update_yaxes(tickvals=names, ticktext=[wrapped(n, CATEGORY_CHARS) for n in names])
    return fig


def timeline_figures(result: TimelineResult, budget_tokens: int) -> tuple[go.Figure, go.Figure, go.Figure]:
    """Memory over time, batch/queue/preemptions, and the histogram of waits."""
    series = result.series
    memory = go.Figure()
    for part in COLOURS:
        memory.add_scatter(x=series.time_s, y=100 * getattr(series, part) / budget_tokens, name=LABELS[part],
                           stackgroup="memory", mode="none", fillcolor=COLOURS[part])
    memory.update_layout(height=360, margin=dict(t=30, b=10), xaxis_title="time (s)",
                         yaxis_title="% of the KV budget", title="KV memory over time")
    load = make_subplots(specs=[[{"secondary_y": True}]])
    load.add_scatter(x=series.time_s, y=series.batch_size, name="running batch")
    load.add_scatter(x=series.time_s, y=series.queue_length, name="queue")
    load.add_scatter(x=series.time_s, y=series.preemptions, name="preemptions (cumulative)",
                     line=dict(dash="dot"), secondary_y=True)
    load.add_scatter(x=series.time_s, y=1e3 * series.step_s, name="step time (ms)", line=dict(dash="dash"),
                     secondary_y=True)
    load.update_layout(height=360, margin=dict(t=30, b=10), title="Batch, queue and preemptions",
                       legend=LEGEND_BELOW)
    load.update_xaxes(title_text="time (s)")
    load.update_yaxes(title_text="requests", rangemode="tozero", secondary_y=False)
    load.update_yaxes(title_text="preemptions / step ms", rangemode="tozero", secondary_y=True)
    wait = go.Figure(go.Histogram(x=result.wait_s[np.isfinite(result.wait_s)], nbinsx=60))
    wait.update_layout(height=300, margin=dict(t=30, b=10), title="Each request's wait",
                       xaxis_title="wait from arrival to admission (s)", yaxis_title="requests")
    return memory, load, wait


def pool_figure(demo: BlockTableDemo, pool_blocks: int) -> go.Figure:
    """The physical pool as a grid: free, held by one sequence (its colour), or shared."""
    columns = POOL_COLUMNS
    sequences = len(demo.tables)
    # Categories: 0 free, 1..n the sequence holding the block alone, n + 1 shared.
    category = np.zeros(pool_blocks)
    text = ["free"] * pool_blocks
    for sequence, table in enumerate(demo.tables):
        for logical, physical in enumerate(table):
            shared = demo.ref_count[physical] > 1
            category[physical] = sequences + 1 if shared else sequence + 1
            owner = "shared" if shared else f"seq {sequence}"
            text[physical] = f"#{physical}<br>{owner} L{logical}<br>ref {demo.ref_count[physical]}"
    colours = [POOL_FREE_COLOUR, *SEQUENCE_COLOURS[:sequences], POOL_SHARED_COLOUR]
    steps = len(colours)
    scale = [stop for i, colour in enumerate(colours) for stop in ((i / steps, colour), ((i + 1) / steps, colour))]
    fig = go.Figure(go.Heatmap(
        z=category.reshape(-1, columns), text=np.asarray(text, dtype=object).reshape(-1, columns),
        texttemplate="%{text}", showscale=False, colorscale=scale, zmin=-0.5, zmax=steps - 0.5,
        hoverinfo="text", xgap=2, ygap=2))
    fig.update_yaxes(autorange="reversed", showticklabels=False)
    fig.update_xaxes(showticklabels=False)
    fig.update_layout(height=70 * (pool_blocks // columns) + 40, margin=dict(t=10, b=10))
    return fig


def sharing_figure(table: pd.DataFrame, block_size: int) -> go.Figure:
    """Peak blocks per scenario, without and with sharing."""
    fig = go.Figure()
    fig.add_bar(x=table["scenario"], y=table["blocks without sharing"], name="without sharing",
                marker_color=COLOURS["free"])
    fig.add_bar(x=table["scenario"], y=table["blocks with sharing"], name="with sharing",
                marker_color=COLOURS["token_states"])
    fig.update_layout(barmode="group", height=340, margin=dict(t=30, b=10), xaxis_title="scenario",
                      yaxis_title=f"peak blocks of {block_size} tokens", legend=LEGEND_BELOW)
    return fig


# ---- tables and captions -------------------------------------------------------------------------
def scheme_label(name: str, *, short: bool = False) -> str:
    """The glossary's name for a snapshot comparison row: ``"contiguous max"`` → ``"Contiguous,
    reserve the maximum (Orca-Max)"``, ``"paged (B=16)"`` → ``"Paged (vLLM blocks)"`` (``short``:
    the legend names, ``"Orca-Max"``, ``"Paged"``); any other name as it is."""
    kind, _, rest = name.partition(" ")
    if kind == "contiguous":
        return allocator_label(rest, short=short)
    return allocator_label("paged", short=short) if kind == "paged" else name


def policy_table(rows: tuple[PolicyRow, ...]) -> pd.DataFrame:
    """One row per scheme of the snapshot's policy comparison."""
    return pd.DataFrame([{
        "scheme": scheme_label(r.name), "requests that fit": r.summary.fit, "utilisation": r.summary.utilisation,
        "empty slots per request": r.summary.waste_tokens_mean,
        **{LABELS[k]: v for k, v in asdict(r.summary.breakdown.fractions()).items()},
        "token share of used memory": r.summary.breakdown.token_share_of_used,
    } for r in rows])


def allocator_table(runs: list[tuple[str, TimelineResult]]) -> pd.DataFrame:
    """One row per allocator (``name``: its option value) of the over-time comparison."""
    return pd.DataFrame([{
        "allocator": allocator_label(name), "completed": r.completed, "mean batch": r.mean_batch_size,
        "token share of used memory": r.breakdown.token_share_of_used,
        "preemptions": r.preemptions, "mean wait (s)": r.mean_wait_s} for name, r in runs])


def sharing_table(results: tuple[SharingResult, ...]) -> pd.DataFrame:
    """One row per sharing scenario."""
    return pd.DataFrame([{"scenario": r.scenario, "blocks without sharing": r.blocks_without_sharing,
                          "blocks with sharing": r.blocks_with_sharing, "saved": r.saved_fraction,
                          "copy-on-write copies": r.copies_on_write} for r in results])


def block_tables(demo: BlockTableDemo) -> pd.DataFrame:
    """Each demo sequence's block table and reference counts."""
    return pd.DataFrame([{"sequence": s, "tokens": demo.lengths[s],
                          "block table (logical → physical)": " ".join(f"{i}→{b}" for i, b in enumerate(t)),
                          "ref counts": " ".join(str(demo.ref_count[b]) for b in t)}
                         for s, t in enumerate(demo.tables)])


def event_log(demo: BlockTableDemo, last: int = 12) -> pd.DataFrame:
    """The demo's last ``last`` bookkeeping events."""
    return pd.DataFrame([asdict(e) for e in demo.events[-last:]])


POLICY_WORDS = {policy: f"{allocator_label(policy, short=True)} {words}" for policy, words in (
    ("max", "reserves the whole context for every request"),
    ("pow2", "reserves up to twice each request's output"),
    ("oracle", "reserves exactly each request's final length"))}


def why_paging_wins(result: SnapshotResult) -> str:
    """Why paging fits more requests here, in this snapshot's own figures."""
    contiguous, paged, config = result.contiguous, result.paged, result.config
    block = config.block_size
    text = ("**Why paging wins here:** contiguous allocation sets memory aside before the tokens exist "
            f"({POLICY_WORDS[config.policy.value]})"
            + (", and the buddy allocator rounds each reservation up to a power of two" if
               config.address_space.value == "buddy" else "") + ": "
            f"{contiguous.waste_tokens_mean:,.0f} of the slots a request holds are empty on average, so "
            f"{percent_text(contiguous.utilisation)} of the reserved memory holds tokens and {contiguous.fit:,} requests fit. "
            f"Paging hands out {block}-token blocks as tokens arrive and only a request's last block is partly "
            f"empty ({paged.waste_tokens_mean:,.1f} slots on average, at most B − 1 = {block - 1}), so "
            f"{percent_text(paged.utilisation)} holds tokens and {paged.fit:,} requests fit"
            + (f": {result.paged_gain:,.1f}× as many." if contiguous.fit else ", where contiguous fits none."))
    if contiguous.fit and result.paged_gain < 1.05:
        text += (" Here the two are close: the reservations are already tight, so paging has little "
                 "empty space to give back.")
    return text


def snapshot_json(result: SnapshotResult, source: str) -> bytes:
    """The snapshot's figures as strict JSON (the page's download)."""
    config = result.config

    def summary(allocation) -> dict:
        return {"requests_fit": allocation.fit, "utilisation": finite_or_none(allocation.utilisation),
                "empty_slots_per_request_mean": finite_or_none(allocation.waste_tokens_mean),
                "empty_slots_per_request_max": allocation.waste_tokens_max,
                "breakdown_slots": asdict(allocation.breakdown)}

    document = {
        "workload": source, "requests": result.requests, "clipped_to_context": result.clipped,
        "budget_tokens": config.budget.tokens, "budget_bytes": config.budget.bytes,
        "max_context": config.max_context, "block_size": config.block_size,
        "policy": config.policy.value, "address_space": config.address_space.value,
        "contiguous": summary(result.contiguous), "paged": summary(result.paged),
        "paged_gain": finite_or_none(result.paged_gain),  # null when contiguous fits none
    }
    return dumps_strict(document, indent=2).encode()


def format_bytes(count: float) -> str:
    """Bytes in the largest binary unit that keeps the number ≥ 1 (at most GiB), two decimals."""
    unit = best_unit(count, largest="GiB")
    return f"{count:,.0f} B" if unit == "B" else f"{to_unit(count, unit):,.2f} {unit}"


def budget_caption(budget: KvBudget) -> str:
    """The budget in slots, and in GiB and GB when bytes per token are known."""
    if budget.bytes is None:
        return f"{budget.tokens:,} token slots"
    return f"{budget.tokens:,} token slots = {budget.bytes / GIB:,.2f} GiB ({budget.bytes / 1e9:,.1f} GB)"


# ---- the paper's figure 2 and prefix caching -----------------------------------------------------
PAPER_COLOURS = ("#1f77b4", "#f0a202", "#d62728", "#9467bd")


def figure2_figure(reproduction: Figure2Reproduction) -> go.Figure:
    """Simulated time averages beside the published bars, per system, in the paper's categories."""
    fig = go.Figure()
    names = [f"{allocator_label(row.allocation.value, short=True)}: {kind}" for row in reproduction.rows
             for kind in ("published", "simulated")]
    for index, (category, colour) in enumerate(zip(CATEGORIES, PAPER_COLOURS)):
        values = []
        for row in reproduction.rows:
            published = row.published[index]
            values += [published if published is not None else None, row.simulated[index]]
        fig.add_bar(y=names, x=values, orientation="h", name=category, marker_color=colour)
    fig.update_layout(barmode="stack", height=420, margin=dict(t=40, b=10), xaxis_title="% of the KV memory", yaxis_title="system",
                      title="PagedAttention figure 2: published against simulated",
                      legend=LEGEND_BELOW)
    fig.update_yaxes(autorange="reversed")
    return fig


def figure2_table(reproduction: Figure2Reproduction) -> pd.DataFrame:
    return pd.DataFrame([{"system": allocator_label(row.allocation.value),
                          **{f"{c} (sim.)": s for c, s in zip(CATEGORIES, row.simulated)},
                          **{f"{c} (paper)": p for c, p in zip(CATEGORIES, row.published)}}
                         for row in reproduction.rows])


# One look per budget of the prefix sweep: where the budgets' hit rates are equal (a budget large
# enough that nothing is evicted) the lines lie on each other, and only the dash and the open,
# larger marker of the one below still show it.
SWEEP_LINES = (dict(dash="solid", width=2), dict(dash="dash", width=3), dict(dash="dot", width=3))
SWEEP_MARKERS = (dict(symbol="circle", size=7), dict(symbol="diamond-open", size=13, line=dict(width=2)),
                 dict(symbol="square-open", size=17, line=dict(width=2)))
COINCIDE_NOTE = "The lines coincide: each budget gives the same hit rate."


def prefix_sweep_figure(view: PrefixView) -> go.Figure:
    """Hit rate against block size at each budget of the sweep; lines that coincide are drawn
    apart (dash and marker) and said to coincide."""
    fig = go.Figure()
    for index, (tokens, rates) in enumerate(zip(view.sweep_budgets, view.sweep_hit_rate)):
        look = index % len(SWEEP_LINES)
        fig.add_scatter(x=view.sweep_blocks, y=100 * rates, mode="lines+markers", name=f"{tokens:,} slots",
                        line=SWEEP_LINES[look], marker=SWEEP_MARKERS[look])
    rates = np.asarray(view.sweep_hit_rate, dtype=float)
    coincide = len(rates) > 1 and np.allclose(rates, rates[0], rtol=0, atol=1e-9)
    title = dict(text="Hit rate against block size and KV budget")
    if coincide:  # said under the title, where it cannot sit on a line or the legend
        title["subtitle"] = dict(text=COINCIDE_NOTE)
    fig.update_xaxes(type="log", title_text="block size (tokens)", tickvals=block_ticks(view.sweep_blocks))
    fig.update_yaxes(title_text="prompt tokens from the cache (%)", rangemode="tozero")
    fig.update_layout(height=340 + 20 * coincide, margin=dict(t=40 + 30 * coincide, b=10), title=title,
                      legend=LEGEND_BELOW)
    return fig


def latency_table(runs: list[tuple[str, TimelineResult]]) -> pd.DataFrame:
    """Requests served and what they wait, per run (with and without the CPU tier)."""
    return pd.DataFrame([{"run": name, "completed": r.completed, "requests/s": r.throughput_per_s,
                          "mean TTFT (s)": r.mean_ttft_s, "mean TPOT (ms)": 1e3 * r.mean_tpot_s,
                          "hit rate": r.prefix.hit_rate if r.prefix else 0.0,
                          "CPU transfer (s)": r.prefix.cpu_transfer_s if r.prefix else 0.0} for name, r in runs])

"""Fragmentation explorer: contiguous reservation against paged KV blocks, as a snapshot and over time.

Thin page: widgets → configs → ``simulation`` (through ``@st.cache_data`` wrappers) → plotly.
State lives in the URL (``st.query_params``) so a link reopens the same view; a budget handed over
by the sizer page (``st.session_state["sizer.*"]``) is offered unless the URL names one.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # standalone `streamlit run pages/2_fragmentation.py`
    sys.path.insert(0, str(ROOT))

from ui.router import run_through_router  # noqa: E402
from ui.url_state import UrlState  # noqa: E402
from simulation.allocators import AddressSpace  # noqa: E402
from simulation.block_table import block_table_demo, demo_pool_blocks  # noqa: E402
from simulation.memory import GIB, KvBudget, MemoryBreakdown  # noqa: E402
from simulation.policies import ReservationPolicy  # noqa: E402
from simulation.sharing import beam_search, parallel_sampling, prefix_caching  # noqa: E402
from simulation.snapshot import (PICTURE_REQUESTS, SnapshotConfig, compare_policies,  # noqa: E402
                                 run_snapshot, sweep_block_sizes)
from simulation.timeline import Allocation, Preemption, TimelineConfig, run_timeline  # noqa: E402
from simulation.traces import DEFAULT_MAX_ROWS, TraceError, load_trace_csv  # noqa: E402
from simulation.workloads import (PRESETS, Fixed, LogNormal, TotalLengthSpec, Uniform,  # noqa: E402
                                  Workload, poisson_arrivals, preset)

TRACES_DIR = ROOT.parent / "shared" / "data" / "traces"
SYNTHETIC = ("Log-normal", "Log-normal (median, P90)", "Uniform", "Fixed")
UPLOAD = "Upload a CSV"
# Defaults: the reference page's problem 4 (506 GB of KV at 160 KiB per token ≈ 471.25 GiB).
DEFAULT_GIB = 471.25
DEFAULT_PER_TOKEN_BYTES = 160 * 1024
CONTEXTS = tuple(1 << k for k in range(10, 18))  # 1K … 128K tokens
BLOCK_SIZES = tuple(1 << k for k in range(9))   # 1 … 256 tokens
POOL_COLUMNS = 16  # blocks per row in the block-table view's picture of the pool
POOL_FREE_COLOUR, POOL_SHARED_COLOUR = "#eeeeee", "#7f7f7f"
SEQUENCE_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728")  # one per demo sequence (≤ 4)
# Figure-2 colours: tokens blue, reservation amber, internal red, external purple, free grey.
COLOURS = {"token_states": "#1f77b4", "reservation": "#f0a202", "internal_fragmentation": "#d62728",
           "external_fragmentation": "#9467bd", "free": "#d9d9d9"}
LABELS = {"token_states": "token states", "reservation": "reservation",
          "internal_fragmentation": "internal fragmentation",
          "external_fragmentation": "external fragmentation", "free": "free"}


# ---- cached library calls ------------------------------------------------------------------------
def _trace_files() -> tuple[str, ...]:
    return tuple(sorted(p.name for p in TRACES_DIR.glob("*.csv"))) if TRACES_DIR.is_dir() else ()


@st.cache_data(show_spinner=False, max_entries=16)
def cached_workload(source: str, mean: float, sigma: float, low: int, high: int, length: int,
                    prompt_share: float, n: int, seed: int, upload: bytes | None) -> Workload:
    rng = np.random.default_rng(seed)
    if source == UPLOAD:
        return load_trace_csv(upload or b"", name="uploaded trace")
    if source.startswith("Trace: "):
        return load_trace_csv(TRACES_DIR / source.removeprefix("Trace: "))
    if source.startswith("Preset: "):
        return preset(source.removeprefix("Preset: ")).spec.generate(n, rng)
    lengths = {"Log-normal": lambda: LogNormal(mean=mean, sigma=sigma),
               # Median and P90 travel in the low/high slots of the key for this source.
               "Log-normal (median, P90)": lambda: LogNormal.from_median_p90(median=low, p90=max(low, high)),
               "Uniform": lambda: Uniform(low=low, high=max(low, high)),
               "Fixed": lambda: Fixed(length=length)}[source]()
    return TotalLengthSpec(lengths=lengths, prompt_fraction=prompt_share).generate(n, rng)


@st.cache_data(show_spinner=False, max_entries=64)
def cached_snapshot(_workload: Workload, workload_key: tuple, config: SnapshotConfig, seed: int):
    # The moments' draw (random progress) is seeded apart from the workload's, and identically for
    # the headline figures and the policy comparison so that both describe the same instant.
    return (run_snapshot(_workload, config, np.random.default_rng(seed + 1)),
            compare_policies(_workload, config, np.random.default_rng(seed + 1)),
            sweep_block_sizes(_workload, max_context=config.max_context))


@st.cache_data(show_spinner=False, max_entries=16)
def cached_timeline(_workload: Workload, workload_key: tuple, rate: float | None, seed: int,
                    config: TimelineConfig):
    workload = _workload
    if rate is not None:
        workload = workload.with_arrivals(poisson_arrivals(workload.size, rate, np.random.default_rng(seed + 2)))
    # The bar is created here, not outside: cached functions may only update their own elements.
    bar = st.progress(0.0, text="Simulating over time")
    result = run_timeline(workload, config, progress=lambda share: bar.progress(share, text="Simulating over time"))
    bar.empty()
    return result


@st.cache_data(show_spinner=False, max_entries=32)
def cached_sharing(prompt: int, samples: int, output: int, width: int, steps: int, system: int,
                   requests: int, user: int, block: int, seed: int):
    return (parallel_sampling(prompt_tokens=prompt, output_tokens=np.full(samples, output), block_size=block),
            beam_search(prompt_tokens=prompt, width=width, steps=steps, block_size=block,
                        rng=np.random.default_rng(seed)),
            prefix_caching(system_prompt_tokens=system, user_tokens=np.full(requests, user), block_size=block))


# ---- controls ------------------------------------------------------------------------------------
def sizer_handoff() -> dict | None:
    """The sizer page's budget, when it left one in the session."""
    state = st.session_state
    keys = ("sizer.kv_budget_bytes", "sizer.per_token_bytes", "sizer.max_context", "sizer.block_size")
    if all(isinstance(state.get(k), int) and not isinstance(state.get(k), bool) for k in keys):
        return {"bytes": state[keys[0]], "per_token": state[keys[1]], "max_context": state[keys[2]],
                "block_size": state[keys[3]], "summary": str(state.get("sizer.summary", ""))}
    return None


def read_controls(url: UrlState) -> dict:
    handoff = sizer_handoff()
    url_has_budget = any(k in st.query_params for k in ("budget", "tokens", "gib", "ptb"))
    sources = SYNTHETIC + tuple(f"Preset: {p.name}" for p in PRESETS) + tuple(
        f"Trace: {name}" for name in _trace_files()) + (UPLOAD,)
    with st.sidebar:
        st.header(":material/dataset: Workload")
        source = st.selectbox("Request lengths", sources, key="frag.source",
                              index=sources.index(url.get("src", "Log-normal", str, sources)))
        values = {"source": source, "mean": 2048.0, "sigma": 0.5, "low": 1024, "high": 3072, "length": 2048,
                  "prompt_share": 0.5, "upload": None}
        if source == "Log-normal":
            values["mean"] = float(st.slider("Mean tokens per request", 16, 32_768, step=16, key="frag.mean",
                                             value=url.get("mean", 2048, int)))
            values["sigma"] = st.slider("Spread (log-normal sigma)", 0.0, 2.0, step=0.05, key="frag.sigma",
                                        value=url.get("sigma", 0.5, float))
        elif source == "Log-normal (median, P90)":
            values["low"], values["high"] = st.slider("Median and P90 tokens per request", 1, 32_768,
                                                      key="frag.quantiles",
                                                      value=(url.get("median", 1412, int), url.get("p90", 3000, int)))
        elif source == "Uniform":
            values["low"], values["high"] = st.slider("Tokens per request (range)", 1, 32_768, step=1,
                                                      key="frag.range", value=(url.get("low", 1024, int),
                                                                               url.get("high", 3072, int)))
        elif source == "Fixed":
            values["length"] = st.slider("Tokens per request", 1, 32_768, key="frag.length",
                                         value=url.get("length", 2048, int))
        elif source.startswith("Preset: "):
            chosen = preset(source.removeprefix("Preset: "))
            st.caption(f"{chosen.source}; {chosen.assumption}.")
        elif source == UPLOAD:
            file = st.file_uploader(f"Trace CSV (prompt and output token columns, optional arrival "
                                    f"times; at most {DEFAULT_MAX_ROWS:,} rows)", type=None,
                                    key="frag.upload")
            values["upload"] = file.getvalue() if file is not None else None
        if source in SYNTHETIC:
            values["prompt_share"] = st.slider("Prompt share of each request", 0.05, 0.95, step=0.05,
                                               key="frag.prompt_share", value=url.get("prompt", 0.5, float),
                                               help="An assumption: synthetic lengths are totals.")
        synthetic = source in SYNTHETIC or source.startswith("Preset: ")
        values["n"] = int(st.number_input("Requests to draw", 100, 200_000, step=1000, key="frag.n",
                                          value=url.get("n", 10_000, int), disabled=not synthetic))
        values["seed"] = int(st.number_input("Seed", 0, 2**31 - 1, key="frag.seed", value=url.get("seed", 0, int)))

        st.header(":material/memory: KV budget")
        modes = (("sizer",) if handoff else ()) + ("gib", "tokens")
        mode_labels = {"sizer": "From the sizer", "gib": "GiB and bytes per token", "tokens": "Tokens"}
        default_mode = "sizer" if handoff and not url_has_budget else "gib"
        mode = st.radio("Budget", modes, format_func=mode_labels.get, key="frag.budget_mode",
                        index=modes.index(url.get("budget", default_mode, str, modes)))
        if mode == "sizer":
            st.info(f":material/input: From the sizer: {handoff['summary']}")
            budget = KvBudget.from_bytes(total_bytes=handoff["bytes"], per_token_bytes=handoff["per_token"])
        elif mode == "gib":
            gib = st.number_input("KV budget (GiB)", 0.001, 100_000.0, key="frag.gib",
                                  value=url.get("gib", DEFAULT_GIB, float), format="%.3f")
            per_token = int(st.number_input("KV bytes per token (all layers)", 1, 100 * 2**20, key="frag.ptb",
                                            value=url.get("ptb", DEFAULT_PER_TOKEN_BYTES, int)))
            budget = KvBudget.from_bytes(total_bytes=max(int(gib * GIB), per_token), per_token_bytes=per_token)
        else:
            tokens = int(st.number_input("KV budget (tokens)", 1, 10**10, key="frag.tokens",
                                         value=url.get("tokens", 3_088_378, int)))
            budget = KvBudget(tokens=tokens)
        sizer_context = handoff["max_context"] if handoff and handoff["max_context"] in CONTEXTS else 32_768
        sizer_block = handoff["block_size"] if handoff and handoff["block_size"] in BLOCK_SIZES else 16
        max_context = st.select_slider("Maximum context (tokens)", CONTEXTS, key="frag.context",
                                       value=url.get("ctx", sizer_context, int, CONTEXTS))
        block_size = st.select_slider("Block size (tokens)", BLOCK_SIZES, key="frag.block",
                                      value=url.get("block", sizer_block, int, BLOCK_SIZES))
        spaces = [a.value for a in AddressSpace]
        address_space = st.radio("Contiguous allocator", spaces, key="frag.space", horizontal=True,
                                 index=spaces.index(url.get("space", "buddy", str, spaces)),
                                 format_func={"buddy": "Buddy", "first-fit": "First fit"}.get,
                                 help="Buddy (the PagedAttention paper's Orca baselines) rounds each "
                                      "reservation up to a power of two; first fit does not.")
    values.update(mode=mode, budget=budget, max_context=max_context, block_size=block_size,
                  address_space=address_space)
    return values


def load_workload(values: dict) -> tuple[Workload, tuple]:
    """The workload, or the last good one when an upload is refused (its error is shown)."""
    key = (values["source"], values["mean"], values["sigma"], values["low"], values["high"],
           values["length"], values["prompt_share"], values["n"], values["seed"], values["upload"])
    if values["source"] == UPLOAD and values["upload"] is None:
        st.info(":material/upload_file: Upload a trace CSV; showing the previous workload meanwhile.")
        return _previous_workload()
    try:
        workload = cached_workload(*key)
    except TraceError as err:
        st.error(f":material/error: The trace was not used: {err}")
        return _previous_workload()
    st.session_state["frag.last_good"] = (workload, key)
    return workload, key


def _previous_workload() -> tuple[Workload, tuple]:
    if "frag.last_good" in st.session_state:
        return st.session_state["frag.last_good"]
    key = ("Log-normal", 2048.0, 0.5, 1024, 3072, 2048, 0.5, 10_000, 0, None)
    return cached_workload(*key), key


# ---- charts --------------------------------------------------------------------------------------
def picture_figure(result) -> go.Figure:
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
                      legend=dict(orientation="h", y=-0.12))
    return fig


def sweep_figure(sweep) -> go.Figure:
    fig = go.Figure()
    fig.add_scatter(x=sweep.block_sizes, y=sweep.waste_tokens_mean, mode="lines+markers", name="simulated")
    fig.add_scatter(x=sweep.block_sizes, y=sweep.waste_tokens_expected, mode="lines",
                    line=dict(dash="dash"), name="expected (B − 1)/2 ≈ B/2")
    fig.update_xaxes(type="log", title_text="block size B (tokens)", tickvals=sweep.block_sizes, tickangle=0)
    fig.update_yaxes(title_text="empty slots per sequence (tokens)")
    fig.update_layout(height=380, margin=dict(t=40, b=10), title="Paged waste against block size",
                      legend=dict(orientation="h", y=-0.3))
    return fig


def breakdown_figure(names: list[str], breakdowns: list[MemoryBreakdown], title: str) -> go.Figure:
    fig = go.Figure()
    shares = [asdict(b.fractions()) for b in breakdowns]
    for part, colour in COLOURS.items():
        fig.add_bar(y=names, x=[100 * s[part] for s in shares], orientation="h", name=LABELS[part],
                    marker_color=colour)
    fig.update_layout(barmode="stack", height=380, title=title, margin=dict(t=40, b=10),
                      xaxis_title="% of the KV budget", legend=dict(orientation="h", y=-0.3))
    return fig


def timeline_figures(result, budget_tokens: int) -> tuple[go.Figure, go.Figure, go.Figure]:
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
    load.update_layout(height=360, margin=dict(t=30, b=10), title="Batch, queue and preemptions",
                       legend=dict(orientation="h", y=-0.3))
    load.update_xaxes(title_text="time (s)")
    load.update_yaxes(title_text="requests", rangemode="tozero", secondary_y=False)
    load.update_yaxes(title_text="preemptions", rangemode="tozero", secondary_y=True)
    wait = go.Figure(go.Histogram(x=result.wait_s[np.isfinite(result.wait_s)], nbinsx=60))
    wait.update_layout(height=300, margin=dict(t=30, b=10), title="Each request's wait",
                       xaxis_title="wait from arrival to admission (s)", yaxis_title="requests")
    return memory, load, wait


def pool_figure(demo, pool_blocks: int) -> go.Figure:
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


def format_bytes(count: float) -> str:
    """Bytes in the largest binary unit that keeps the number ≥ 1 (KiB, MiB, GiB)."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= size:
            return f"{count / size:,.2f} {unit}"
    return f"{count:,.0f} B"


# ---- sections ------------------------------------------------------------------------------------
def snapshot_section(url: UrlState, values: dict, workload: Workload, key: tuple) -> dict:
    left, right, third = st.columns(3)
    policies = [p.value for p in ReservationPolicy]
    policy = left.radio("Contiguous reservation (Orca baselines)", policies, key="frag.policy", horizontal=True,
                        index=policies.index(url.get("policy", "max", str, policies)),
                        format_func={"max": "Max", "pow2": "Pow2", "oracle": "Oracle"}.get)
    random_moment = third.toggle("Random moment per request", key="frag.random",
                                 value=url.get("random", False, bool))
    progress = right.slider("Output generated at the snapshot (%)", 0, 100, step=5, key="frag.progress",
                            value=url.get("progress", 100, int), disabled=random_moment)
    config = SnapshotConfig(budget=values["budget"], max_context=values["max_context"],
                            block_size=values["block_size"], policy=policy,
                            address_space=values["address_space"],
                            progress=None if random_moment else progress / 100)
    result, rows, sweep = cached_snapshot(workload, key, config, values["seed"])
    cols = st.columns(4)
    cols[0].metric("Requests that fit: contiguous", f"{result.contiguous.fit:,}")
    cols[1].metric("Requests that fit: paged", f"{result.paged.fit:,}", f"{result.paged_gain:,.1f}× more")
    cols[2].metric("Utilisation: contiguous", f"{result.contiguous.utilisation:.1%}")
    cols[3].metric("Utilisation: paged", f"{result.paged.utilisation:.1%}")
    cols = st.columns(4)
    cols[0].metric("Empty slots per request: contiguous", f"{result.contiguous.waste_tokens_mean:,.1f}")
    cols[1].metric("Empty slots per request: paged", f"{result.paged.waste_tokens_mean:,.1f}",
                   help=f"At most B − 1 = {values['block_size'] - 1}; about B/2 on average.")
    if result.paged_waste_bytes_mean is not None:
        cols[2].metric("Wasted per request: contiguous", format_bytes(result.contiguous_waste_bytes_mean))
        cols[3].metric("Wasted per request: paged", format_bytes(result.paged_waste_bytes_mean))
    notes = [f"{result.requests:,} requests from {workload.source}"]
    if result.clipped:
        notes.append(f"{result.clipped:,} cut to the {values['max_context']:,}-token context")
    if result.sample_reused:
        notes.append("more requests fit than were drawn: the sample is reused in order")
    st.caption("; ".join(notes) + ". Budget: " + budget_caption(values["budget"]) + ".")
    st.plotly_chart(picture_figure(result), key="frag.chart.picture")
    st.caption(f"The first {PICTURE_REQUESTS} requests on the same scale. Amber: reserved but empty; "
               "red: the partly empty last block.")
    left, right = st.columns(2)
    with left:
        st.plotly_chart(sweep_figure(sweep), key="frag.chart.sweep")
    with right:
        st.plotly_chart(breakdown_figure([r.name for r in rows], [r.summary.breakdown for r in rows],
                                         "Where the memory goes (paper's fig. 2)"),
                        key="frag.chart.breakdown")
    table = pd.DataFrame([{
        "scheme": r.name, "requests that fit": r.summary.fit, "utilisation": r.summary.utilisation,
        "empty slots per request": r.summary.waste_tokens_mean,
        **{LABELS[k]: v for k, v in asdict(r.summary.breakdown.fractions()).items()},
        "token share of used memory": r.summary.breakdown.token_share_of_used,
    } for r in rows])
    st.dataframe(table, hide_index=True, key="frag.table", column_config={
        "empty slots per request": st.column_config.NumberColumn(format="%.1f"),
        **{c: st.column_config.NumberColumn(format="percent") for c in table.columns
           if c not in ("scheme", "requests that fit", "empty slots per request")}})
    st.download_button(":material/download: Summary as CSV", table.to_csv(index=False).encode(),
                       file_name="fragmentation_summary.csv", mime="text/csv", key="frag.download")
    return {"policy": policy, "progress": progress, "random": random_moment}


def budget_caption(budget: KvBudget) -> str:
    if budget.bytes is None:
        return f"{budget.tokens:,} token slots"
    return f"{budget.tokens:,} token slots = {budget.bytes / GIB:,.2f} GiB ({budget.bytes / 1e9:,.1f} GB)"


def timeline_section(url: UrlState, values: dict, workload: Workload, key: tuple) -> dict:
    allocations = [a.value for a in Allocation]
    cols = st.columns(4)
    allocation = cols[0].selectbox("Allocator", allocations, key="frag.allocator",
                                   index=allocations.index(url.get("alloc", "paged", str, allocations)))
    preemptions = [p.value for p in Preemption]
    preemption = cols[1].radio("Preemption", preemptions, key="frag.preempt", horizontal=True,
                               index=preemptions.index(url.get("preempt", "recompute", str, preemptions)))
    has_arrivals = workload.arrival_s is not None
    use_trace_arrivals = has_arrivals and cols[2].toggle("Trace's own arrivals", key="frag.trace_arrivals",
                                                         value=url.get("tarr", True, bool))
    rate = cols[3].number_input("Arrival rate (requests/s, Poisson)", 0.01, 10_000.0, key="frag.rate",
                                value=url.get("rate", 5.0, float), disabled=use_trace_arrivals)
    cols = st.columns(3)
    step_ms = cols[0].number_input("Decode step (ms)", 1.0, 1000.0, key="frag.step_ms",
                                   value=url.get("step", 25.0, float))
    prefill = cols[1].number_input("Prefill (tokens/s)", 100.0, 10**7 * 1.0, key="frag.prefill",
                                   value=url.get("prefill", 30_000.0, float))
    max_batch = int(cols[2].number_input("Largest batch", 1, 4096, key="frag.max_batch",
                                         value=url.get("batch", 256, int)))
    config = TimelineConfig(budget=values["budget"], max_context=values["max_context"], allocation=allocation,
                            block_size=values["block_size"], preemption=preemption,
                            address_space=values["address_space"], decode_step_s=step_ms / 1000,
                            prefill_tokens_per_s=prefill, max_batch=max_batch)
    poisson_rate = None if use_trace_arrivals else rate  # None: the trace's own arrival times
    result = cached_timeline(workload, key, poisson_rate, values["seed"], config)
    cols = st.columns(5)
    cols[0].metric("Completed", f"{result.completed:,}", help=f"{result.rejected:,} never fit the budget")
    cols[1].metric("Mean batch size", f"{result.mean_batch_size:,.1f}")
    cols[2].metric("Budget holding tokens (time average)", f"{result.token_state_fraction:.1%}")
    cols[3].metric("Preemptions", f"{result.preemptions:,}",
                   help=f"recomputed {result.recomputed_tokens:,} tokens, swapped {result.swapped_tokens:,}; "
                        f"stalls {result.preemption_stall_s:,.1f} s")
    cols[4].metric("Mean wait", f"{result.mean_wait_s:,.2f} s")
    memory, load, wait = timeline_figures(result, values["budget"].tokens)
    st.caption("Lower the KV budget in the sidebar to watch the pool fill: contiguous reservations "
               "queue new requests, paging preempts running ones.")
    st.plotly_chart(memory, key="frag.chart.memory")
    left, right = st.columns(2)
    with left:
        st.plotly_chart(load, key="frag.chart.load")
    with right:
        st.plotly_chart(wait, key="frag.chart.wait")
    compare = st.toggle("Compare all allocators on this workload (four runs)", key="frag.compare",
                        value=url.get("compare", False, bool))
    if compare:
        runs = [(choice, cached_timeline(workload, key, poisson_rate, values["seed"],
                                         replace(config, allocation=choice)))
                for choice in Allocation]
        st.plotly_chart(breakdown_figure([choice.value for choice, _ in runs], [r.breakdown for _, r in runs],
                                         "Time-averaged memory per allocator (paper's fig. 2, over time)"),
                        key="frag.chart.compare")
        st.dataframe(pd.DataFrame([{
            "allocator": choice.value, "completed": r.completed, "mean batch": r.mean_batch_size,
            "token share of used memory": r.breakdown.token_share_of_used,
            "preemptions": r.preemptions, "mean wait (s)": r.mean_wait_s} for choice, r in runs]),
            hide_index=True, key="frag.compare_table",
            column_config={"token share of used memory": st.column_config.NumberColumn(format="percent")})
    state = {"alloc": allocation, "preempt": preemption, "rate": rate, "step": step_ms,
             "prefill": prefill, "batch": max_batch, "compare": compare}
    if has_arrivals:
        state["tarr"] = use_trace_arrivals
    return state


def sharing_section(url: UrlState, values: dict) -> dict:
    cols = st.columns(4)
    prompt = int(cols[0].number_input("Prompt tokens", 1, 100_000, key="frag.share_prompt",
                                      value=url.get("sprompt", 500, int)))
    samples = int(cols[1].number_input("Parallel samples n", 1, 64, key="frag.samples", value=url.get("n_out", 4, int)))
    output = int(cols[2].number_input("Output tokens per sample", 1, 10_000, key="frag.share_output",
                                      value=url.get("sout", 200, int)))
    width = int(cols[3].number_input("Beam width k", 1, 32, key="frag.beam", value=url.get("beam", 4, int)))
    cols = st.columns(3)
    system = int(cols[0].number_input("Shared system prompt tokens", 1, 100_000, key="frag.system",
                                      value=url.get("system", 1000, int)))
    requests = int(cols[1].number_input("Requests sharing it", 1, 1000, key="frag.share_requests",
                                        value=url.get("sreq", 20, int)))
    user = int(cols[2].number_input("Own tokens per request", 0, 100_000, key="frag.user",
                                    value=url.get("user", 300, int)))
    results = cached_sharing(prompt, samples, output, width, output, system, requests, user,
                             values["block_size"], values["seed"])
    table = pd.DataFrame([{"scenario": r.scenario, "blocks without sharing": r.blocks_without_sharing,
                           "blocks with sharing": r.blocks_with_sharing, "saved": r.saved_fraction,
                           "copy-on-write copies": r.copies_on_write} for r in results])
    fig = go.Figure()
    fig.add_bar(x=table["scenario"], y=table["blocks without sharing"], name="without sharing",
                marker_color=COLOURS["free"])
    fig.add_bar(x=table["scenario"], y=table["blocks with sharing"], name="with sharing",
                marker_color=COLOURS["token_states"])
    fig.update_layout(barmode="group", height=340, margin=dict(t=30, b=10),
                      yaxis_title=f"peak blocks of {values['block_size']} tokens")
    st.plotly_chart(fig, key="frag.chart.sharing")
    st.dataframe(table, hide_index=True, key="frag.sharing_table",
                 column_config={"saved": st.column_config.NumberColumn(format="percent")})
    st.caption("Forked samples and beams share blocks (reference counts) and copy a shared block "
               "before writing into it; a cached prefix shares only its full blocks.")
    return {"sprompt": prompt, "n_out": samples, "sout": output, "beam": width, "system": system,
            "sreq": requests, "user": user}


def block_table_section(url: UrlState, values: dict) -> dict:
    cols = st.columns(5)
    block = cols[0].select_slider("Block size", (2, 4, 8, 16), key="frag.bt_block",
                                  value=url.get("btb", 4, int, (2, 4, 8, 16)))
    sequences = cols[1].slider("Sequences", 1, 4, key="frag.bt_sequences", value=url.get("bts", 3, int))
    prompt = cols[2].slider("Prompt tokens", 1, 40, key="frag.bt_prompt", value=url.get("btp", 10, int))
    steps = cols[3].slider("Decode steps so far", 0, 40, key="frag.bt_steps", value=url.get("btt", 3, int))
    shared = cols[4].toggle("Share the prompt (fork)", key="frag.bt_shared", value=url.get("btsh", True, bool))
    per_token = values["budget"].per_token_bytes
    pool_blocks = demo_pool_blocks(block_size=block, prompt_tokens=prompt, sequences=sequences, steps=steps,
                                   row_blocks=POOL_COLUMNS)
    demo = block_table_demo(block_size=block, prompt_tokens=prompt, sequences=sequences, steps=steps,
                            shared_prompt=shared, num_blocks=pool_blocks, token_bytes=per_token,
                            rng=np.random.default_rng(values["seed"]))
    st.plotly_chart(pool_figure(demo, pool_blocks), key="frag.chart.pool")
    st.caption("The physical pool (a shuffled free list, as in a pool that has been in use): grey "
               "blocks are free, coloured ones belong to one sequence, dark grey ones are shared; "
               "L is the logical block, ref the reference count.")
    cols = st.columns(2)
    sequence = cols[0].selectbox("Sequence", range(sequences), key="frag.bt_seq",
                                 index=min(url.get("btq", 0, int), sequences - 1))
    length = demo.lengths[sequence]
    position = int(cols[1].number_input("Token position p", 0, length - 1, key="frag.bt_pos",
                                        value=min(url.get("btpos", 0, int), length - 1)))
    address = demo.manager.address(sequence, position)
    line = (f"p = {position}: logical block p // B = {address.logical_block}, offset p % B = {address.offset}, "
            f"physical block {address.physical_block} (ref count {address.ref_count})")
    if address.byte_address is not None:
        line += (f"; byte address = {address.physical_block} × {demo.manager.block_bytes:,} + {address.offset} × "
                 f"{per_token:,} = {address.byte_address:,}")
    st.markdown(line)
    tables = pd.DataFrame([{"sequence": s, "tokens": demo.lengths[s],
                            "block table (logical → physical)": " ".join(f"{i}→{b}" for i, b in enumerate(t)),
                            "ref counts": " ".join(str(demo.ref_count[b]) for b in t)}
                           for s, t in enumerate(demo.tables)])
    st.dataframe(tables, hide_index=True, key="frag.bt_tables")
    log = pd.DataFrame([asdict(e) for e in demo.events[-12:]])
    st.caption(f"Copy-on-write copies so far: {demo.copies}. Last events:")
    st.dataframe(log, hide_index=True, key="frag.bt_log")
    return {"btb": block, "bts": sequences, "btp": prompt, "btt": steps, "btsh": shared,
            "btq": sequence, "btpos": position}


def main() -> None:
    run_through_router()  # a deep link to /fragmentation as the first request still gets app.py's router
    st.title(":material/view_module: Fragmentation explorer")
    st.caption("How much KV memory holds tokens under contiguous reservation and under PagedAttention's "
               "blocks, on synthetic lengths and real traces.")
    url = UrlState()
    values = read_controls(url)
    workload, key = load_workload(values)
    snapshot_tab, timeline_tab, sharing_tab, table_tab = st.tabs(
        [":material/photo_camera: Snapshot", ":material/timeline: Over time", ":material/share: Sharing",
         ":material/table_chart: Block table"])
    state = {"src": values["source"], "n": values["n"], "seed": values["seed"], "budget": values["mode"],
             "ctx": values["max_context"], "block": values["block_size"], "space": values["address_space"]}
    if values["source"] == "Log-normal":
        state.update(mean=int(values["mean"]), sigma=values["sigma"])
    elif values["source"] == "Uniform":
        state.update(low=values["low"], high=values["high"])
    elif values["source"] == "Log-normal (median, P90)":
        state.update(median=values["low"], p90=values["high"])
    elif values["source"] == "Fixed":
        state.update(length=values["length"])
    if values["source"] in SYNTHETIC:
        state["prompt"] = values["prompt_share"]
    if values["mode"] == "gib":
        state.update(gib=st.session_state["frag.gib"], ptb=st.session_state["frag.ptb"])
    elif values["mode"] == "tokens":
        state.update(tokens=values["budget"].tokens)
    with snapshot_tab:
        state.update(snapshot_section(url, values, workload, key))
    with timeline_tab:
        state.update(timeline_section(url, values, workload, key))
    with sharing_tab:
        state.update(sharing_section(url, values))
    with table_tab:
        state.update(block_table_section(url, values))
    url.write(state)


main()

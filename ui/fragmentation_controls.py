"""The fragmentation explorer's URL-backed controls: every field with its range, and the sidebar.

Each range is also the widget's range, and it is chosen so that the slowest view any link can ask
for (the over-time run, four allocators compared, the token-by-token sharing scenarios) still
renders in a couple of seconds: a link is input like any other.
"""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from hardware.gpus import gpus
from inputs.bounds import Bound
from inputs.errors import InputError
from inputs.uploads import upload_bytes
from simulation.allocators import AddressSpace
from simulation.explorer import BlockTableSettings, SharingSettings, WorkloadSettings, budget_from_gib
from simulation.prefix_workloads import PrefixScenario
from simulation.memory import KvBudget
from simulation.policies import ReservationPolicy
from simulation.timeline import Allocation, Preemption
from simulation.traces import DEFAULT_MAX_BYTES, DEFAULT_MAX_ROWS, shipped_trace_names
from simulation.workloads import PRESETS, preset
from sizing.presets import presets
from ui.handoff import latest
from ui.layout import identify_reference, tab_field
from ui.url_state import ChoiceField, FlagField, NumberField, PageState

PAGE = "frag"
SYNTHETIC = {"Log-normal": "lognormal", "Log-normal (median, P90)": "lognormal-quantiles",
             "Uniform": "uniform", "Fixed": "fixed"}
UPLOAD = "Upload a CSV"
# Defaults: the reference page's problem 4 (506 GB of KV at 160 KiB per token ≈ 471.25 GiB).
DEFAULT_GIB = 471.25
DEFAULT_PER_TOKEN_BYTES = 160 * 1024
CONTEXTS = tuple(1 << k for k in range(10, 18))  # 1K … 128K tokens
BLOCK_SIZES = tuple(1 << k for k in range(9))   # 1 … 256 tokens
DEMO_BLOCK_SIZES = (2, 4, 8, 16)
MAX_LENGTH = 32_768  # tokens per request of the synthetic distributions
# Requests drawn: the snapshot of 100,000 takes ~30 ms, and the over-time run takes them all
# (100,000 paged in ~1.3 s on a 2-core machine; a contiguous allocator 3-4 s).
MAX_REQUESTS = 100_000
# The sharing scenarios run token by token: at these caps and 1-token blocks they take ~1 s.
MAX_SHARE_TOKENS = 2_000  # prompt and system prompt tokens
MAX_SHARE_OWN = 1_000  # own tokens per request sharing the system prompt
MAX_SHARE_OUTPUT = 500  # output tokens per sample, and beam-search steps
BUDGET_MODES = {"sizer": "From the sizer", "gib": "GiB and bytes per token", "tokens": "Tokens"}
# The tabs, by the name a link gives them (tab=timeline).
TABS = tab_field("tab", "tab", {
    "snapshot": ":material/photo_camera: Snapshot", "timeline": ":material/timeline: Over time",
    "prefix": ":material/cached: Prefix caching", "paper": ":material/menu_book: Paper's figure 2",
    "sharing": ":material/share: Sharing", "blocks": ":material/table_chart: Block table"})


# Which sidebar controls each tab reads; the others are drawn disabled there (their values kept
# for the tabs that read them) and the sidebar says why. The prefix-caching tab draws its own
# conversations and runs paged; the paper's figure 2 has the paper's own setting; sharing and the
# block table have their own prompts (and the block table its own block size), the block table
# reading only the bytes per token, for its byte addresses.
SIDEBAR_GROUPS = frozenset({"workload", "seed", "budget", "bytes", "context", "block", "space"})
SIDEBAR_USE: dict[str, frozenset[str]] = {
    "snapshot": SIDEBAR_GROUPS, "timeline": SIDEBAR_GROUPS,
    "prefix": frozenset({"seed", "budget", "bytes", "context", "block"}),
    "paper": frozenset(),
    "sharing": frozenset({"seed", "block"}),
    "blocks": frozenset({"seed", "bytes"}),
}
SIDEBAR_NOTES = {
    "prefix": "Prefix caching draws its own conversations (the tab's settings) and runs paged: the request "
              "lengths and the contiguous allocator do not apply here.",
    "paper": "The paper's figure 2 keeps the paper's own setting (OPT-13B, 12 GiB of KV, 2,048 tokens): "
             "none of the sidebar's controls apply here.",
    "sharing": "Sharing has its own prompts and samples: only the block size and the seed apply here.",
    "blocks": "The block table has its own block size and sequences: only the seed and the KV bytes per "
              "token (for its byte addresses) apply here.",
}


def _tokens(field: str, high: int, low: int = 1) -> Bound:
    return Bound(field=field, low=low, high=high, integer=True, unit="tokens")


MEAN = Bound(field="mean", low=16, high=MAX_LENGTH, integer=True, unit="tokens")
SIGMA = Bound(field="sigma", low=0, high=2)
LENGTH = _tokens("length", MAX_LENGTH)
PROMPT_SHARE = Bound(field="prompt", low=0.05, high=0.95)
REQUESTS = Bound(field="n", low=100, high=MAX_REQUESTS, integer=True, unit="requests")
SEED = Bound(field="seed", low=0, high=2**31 - 1, integer=True)
GIB = Bound(field="gib", low=0.001, high=100_000, unit="GiB")
PER_TOKEN = Bound(field="ptb", low=1, high=100 * 2**20, integer=True, unit="bytes")
TOKENS = _tokens("tokens", 10**10)
PROGRESS = Bound(field="progress", low=0, high=100, integer=True, unit="%")
RATE = Bound(field="rate", low=0.01, high=10_000, unit="requests/s")
STEP_MS = Bound(field="step", low=1, high=1000, unit="ms")
PREFILL = Bound(field="prefill", low=100, high=10**7, unit="tokens/s")
BATCH = Bound(field="batch", low=1, high=4096, integer=True, unit="requests")
BATCHED_TOKENS = Bound(field="mbt", low=1, high=65_536, integer=True, unit="tokens")
# Prefix-caching tab: every run is token-level bookkeeping of blocks, repeated for the sweep, so
# requests and turns stop where the tab still renders in about a second.
PREFIX_TOKENS = _tokens("pfs", 8192, low=0)
PREFIX_USER = _tokens("pfu", 4096, low=0)
PREFIX_OUTPUT = _tokens("pfo", 2048)
PREFIX_REQUESTS = Bound(field="pfn", low=1, high=2000, integer=True, unit="requests")
PREFIX_TURNS = Bound(field="pft", low=1, high=20, integer=True, unit="turns")
PREFIX_COUNT = Bound(field="pfp", low=1, high=100, integer=True, unit="prefixes")
PREFIX_RATE = Bound(field="pfr", low=0.01, high=1000, unit="conversations/s")
THINK = Bound(field="pfk", low=0, high=600, unit="s")
CPU_GIB = Bound(field="cpu", low=0, high=4096, unit="GiB")
LINK_GBPS = Bound(field="link", low=0.1, high=1000, unit="GB/s")
STEP_SOURCES = {"own": "My own step time", "model": "A model on a GPU (planner's roofline)"}
SHARE_PROMPT = _tokens("sprompt", MAX_SHARE_TOKENS)
SAMPLES = Bound(field="n_out", low=1, high=64, integer=True)
SHARE_OUTPUT = _tokens("sout", MAX_SHARE_OUTPUT)
BEAM = Bound(field="beam", low=1, high=16, integer=True)
SYSTEM = _tokens("system", MAX_SHARE_TOKENS)
SHARE_REQUESTS = Bound(field="sreq", low=1, high=100, integer=True, unit="requests")
USER = _tokens("user", MAX_SHARE_OWN, low=0)
BT_SEQUENCES = Bound(field="bts", low=1, high=4, integer=True)
BT_PROMPT = _tokens("btp", 40)
BT_STEPS = Bound(field="btt", low=0, high=40, integer=True)
BT_SEQUENCE = Bound(field="btq", low=0, high=BT_SEQUENCES.high - 1, integer=True)
BT_POSITION = Bound(field="btpos", low=0, high=BT_PROMPT.high + BT_STEPS.high - 1, integer=True)


def step_models() -> tuple[str, ...]:
    """Model presets the step-time model can use (ids of the sizer's presets)."""
    return tuple(p.id for p in presets())


def step_gpus() -> tuple[str, ...]:
    return tuple(g.id for g in gpus())


def sources() -> tuple[str, ...]:
    """Every workload source the selectbox offers."""
    return (tuple(SYNTHETIC) + tuple(f"Preset: {p.name}" for p in PRESETS)
            + tuple(f"Trace: {name}" for name in shipped_trace_names()) + (UPLOAD,))


def page_state() -> PageState:
    """The page's fields; the budget, context and block defaults follow the sizer's hand-off
    unless the URL names a budget."""
    handoff = latest()
    url_has_budget = any(k in st.query_params for k in ("budget", "tokens", "gib", "ptb"))
    modes = (("sizer",) if handoff else ()) + ("gib", "tokens")
    context = handoff.max_context if handoff and handoff.max_context in CONTEXTS else 32_768
    block = handoff.block_size if handoff and handoff.block_size in BLOCK_SIZES else 16
    n, f, c = NumberField, FlagField, ChoiceField
    return PageState(PAGE, [
        c("src", "source", "Log-normal", sources()), n("mean", "mean", 2048, MEAN), n("sigma", "sigma", 0.5, SIGMA),
        n("median", "median", 1412, LENGTH), n("p90", "p90", 3000, LENGTH), n("low", "low", 1024, LENGTH),
        n("high", "high", 3072, LENGTH), n("length", "length", 2048, LENGTH),
        n("prompt", "prompt_share", 0.5, PROMPT_SHARE), n("n", "n", 10_000, REQUESTS), n("seed", "seed", 0, SEED),
        c("budget", "budget_mode", "sizer" if handoff and not url_has_budget else "gib", modes),
        n("gib", "gib", DEFAULT_GIB, GIB), n("ptb", "ptb", DEFAULT_PER_TOKEN_BYTES, PER_TOKEN),
        n("tokens", "tokens", 3_088_378, TOKENS), c("ctx", "context", context, CONTEXTS),
        c("block", "block", block, BLOCK_SIZES), c("space", "space", "buddy", [a.value for a in AddressSpace]),
        c("policy", "policy", "max", [p.value for p in ReservationPolicy]), f("random", "random", False),
        n("progress", "progress", 100, PROGRESS),
        c("alloc", "allocator", "paged", [a.value for a in Allocation]),
        c("preempt", "preempt", "recompute", [p.value for p in Preemption]), f("tarr", "trace_arrivals", True),
        n("rate", "rate", 5.0, RATE), n("step", "step_ms", 25.0, STEP_MS), n("prefill", "prefill", 30_000.0, PREFILL),
        n("batch", "max_batch", 256, BATCH), f("compare", "compare", False),
        n("mbt", "max_batched_tokens", 8192, BATCHED_TOKENS), f("chunk", "chunked", True),
        f("pcache", "prefix_caching", False),
        c("stepsrc", "step_source", "own", tuple(STEP_SOURCES)), c("smodel", "step_model", step_models()[0], step_models()),
        c("sgpu", "step_gpu", "h100-sxm", step_gpus()),
        n("pfs", "pf_system", 1000, PREFIX_TOKENS), n("pfu", "pf_user", 200, PREFIX_USER),
        n("pfo", "pf_output", 200, PREFIX_OUTPUT), n("pfn", "pf_requests", 400, PREFIX_REQUESTS),
        n("pft", "pf_turns", 1, PREFIX_TURNS), n("pfp", "pf_prefixes", 1, PREFIX_COUNT),
        n("pfr", "pf_rate", 5.0, PREFIX_RATE), n("pfk", "pf_think", 5.0, THINK),
        n("cpu", "cpu_gib", 0.0, CPU_GIB), n("link", "link_gbps", 25.0, LINK_GBPS),
        n("sprompt", "share_prompt", 500, SHARE_PROMPT), n("n_out", "samples", 4, SAMPLES),
        n("sout", "share_output", 200, SHARE_OUTPUT), n("beam", "beam", 4, BEAM), n("system", "system", 1000, SYSTEM),
        n("sreq", "share_requests", 20, SHARE_REQUESTS), n("user", "user", 300, USER),
        c("btb", "bt_block", 4, DEMO_BLOCK_SIZES), n("bts", "bt_sequences", 3, BT_SEQUENCES),
        n("btp", "bt_prompt", 10, BT_PROMPT), n("btt", "bt_steps", 3, BT_STEPS), f("btsh", "bt_shared", True),
        n("btq", "bt_seq", 0, BT_SEQUENCE), n("btpos", "bt_pos", 0, BT_POSITION), TABS,
    ])


@dataclass(frozen=True, kw_only=True)
class Sidebar:
    """What the sidebar chose: the workload, the upload's bytes, the budget and the geometry."""

    source: str
    workload: WorkloadSettings
    upload: bytes | None
    upload_error: str | None
    budget: KvBudget
    max_context: int
    block_size: int
    address_space: str


def _number(state: PageState, label: str, name: str, bound: Bound, **kwargs):
    """A number input over ``bound``'s range (ints for whole-number bounds, floats otherwise)."""
    kind = int if bound.integer else float
    return st.number_input(label, kind(bound.low), kind(bound.high), key=state.key(name), **kwargs)


def _range_slider(state: PageState, label: str, key: str, low: str, high: str,
                  disabled: bool = False) -> tuple[int, int]:
    """A two-ended slider whose ends are the URL fields ``low`` and ``high``."""
    if state.key(key) not in st.session_state:
        st.session_state[state.key(key)] = (state.value(low), state.value(high))
    chosen = st.slider(label, 1, MAX_LENGTH, key=state.key(key), disabled=disabled)
    st.session_state[state.key(low)], st.session_state[state.key(high)] = chosen
    return chosen


def _workload_controls(state: PageState, use: frozenset[str]) -> tuple[str, WorkloadSettings, bytes | None, str | None]:
    off = "workload" not in use
    source = st.selectbox("Request lengths", sources(), key=state.key("source"), format_func=identify_reference,
                          disabled=off)
    kind = SYNTHETIC.get(source) or ("preset" if source.startswith("Preset: ")
                                     else "trace" if source.startswith("Trace: ") else "upload")
    chosen: dict = {"kind": kind, "name": source.partition(": ")[2] if kind in ("preset", "trace") else ""}
    upload = error = None
    if kind == "lognormal":
        chosen["mean"] = float(st.slider("Mean tokens per request", MEAN.low, MEAN.high, step=16, key=state.key("mean"),
                                         disabled=off))
        chosen["sigma"] = st.slider("Spread (log-normal sigma)", 0.0, 2.0, step=0.05, key=state.key("sigma"),
                                    disabled=off)
    elif kind == "lognormal-quantiles":
        chosen["low"], chosen["high"] = _range_slider(state, "Median and P90 tokens per request", "quantiles",
                                                      "median", "p90", off)
    elif kind == "uniform":
        chosen["low"], chosen["high"] = _range_slider(state, "Tokens per request (range)", "range", "low", "high", off)
    elif kind == "fixed":
        chosen["length"] = st.slider("Tokens per request", 1, MAX_LENGTH, key=state.key("length"), disabled=off)
    elif kind == "preset":
        chosen_preset = preset(chosen["name"])
        st.caption(identify_reference(f"{chosen_preset.source}; {chosen_preset.assumption}."))
    elif kind == "upload":
        file = st.file_uploader(f"Trace CSV (prompt and output token columns, optional arrival "
                                f"times; at most {DEFAULT_MAX_ROWS:,} rows)", type=None, key=state.key("upload"),
                                max_upload_size=DEFAULT_MAX_BYTES // 2**20, disabled=off)
        try:  # the uploader's bytes only, capped: an upload is never a path
            upload = upload_bytes(file.getvalue(), DEFAULT_MAX_BYTES, field="trace") if file else None
        except InputError as err:
            error = err.message
    if kind in SYNTHETIC.values():
        chosen["prompt_share"] = st.slider("Prompt share of each request", 0.05, 0.95, step=0.05,
                                           key=state.key("prompt_share"), disabled=off,
                                           help="An assumption: synthetic lengths are totals.")
    chosen["n"] = int(_number(state, "Requests to draw", "n", REQUESTS, step=1000,
                              disabled=off or kind in ("trace", "upload")))
    chosen["seed"] = int(_number(state, "Seed", "seed", SEED, disabled="seed" not in use))
    return source, WorkloadSettings(**chosen), upload, error


def _budget_controls(state: PageState, use: frozenset[str]) -> KvBudget:
    handoff = latest()
    modes = (("sizer",) if handoff else ()) + ("gib", "tokens")
    off = "budget" not in use
    mode = st.radio("Budget", modes, format_func=BUDGET_MODES.get, key=state.key("budget_mode"),
                    disabled=off and "bytes" not in use)
    if mode == "sizer":
        st.info(f":material/input: From the sizer: {handoff.summary}")
        return KvBudget.from_bytes(total_bytes=handoff.kv_budget_bytes, per_token_bytes=handoff.per_token_bytes)
    if mode == "gib":
        gib = _number(state, "KV budget (GiB)", "gib", GIB, format="%.3f", disabled=off)
        per_token = int(_number(state, "KV bytes per token (all layers)", "ptb", PER_TOKEN,
                                disabled="bytes" not in use))
        return budget_from_gib(gib, per_token)
    return KvBudget(tokens=int(_number(state, "KV budget (tokens)", "tokens", TOKENS, disabled=off)))


def sidebar(state: PageState) -> Sidebar:
    """Draw the sidebar and return its choices; the controls the open tab does not read are
    disabled (:data:`SIDEBAR_USE`)."""
    tab = TABS.format(state.value(TABS.key))
    use = SIDEBAR_USE[tab]
    with st.sidebar:
        if tab in SIDEBAR_NOTES:
            st.caption(f":material/info: {SIDEBAR_NOTES[tab]}")
        st.header(":material/dataset: Workload")
        source, workload, upload, error = _workload_controls(state, use)
        st.header(":material/memory: KV budget")
        budget = _budget_controls(state, use)
        max_context = st.select_slider("Maximum context (tokens)", CONTEXTS, key=state.key("context"),
                                       disabled="context" not in use)
        block_size = st.select_slider("Block size (tokens)", BLOCK_SIZES, key=state.key("block"),
                                      disabled="block" not in use)
        address_space = st.radio("Contiguous allocator", [a.value for a in AddressSpace], key=state.key("space"),
                                 horizontal=True, format_func={"buddy": "Buddy", "first-fit": "First fit"}.get,
                                 disabled="space" not in use,
                                 help="Buddy (the PagedAttention paper's Orca baselines) rounds each "
                                      "reservation up to a power of two; first fit does not.")
    return Sidebar(source=source, workload=workload, upload=upload, upload_error=error, budget=budget,
                   max_context=max_context, block_size=block_size, address_space=address_space)


def sharing_settings(state: PageState) -> SharingSettings:
    """The sharing tab's inputs."""
    cols = st.columns(4)
    prompt = int(cols[0].number_input("Prompt tokens", 1, SHARE_PROMPT.high, key=state.key("share_prompt")))
    samples = int(cols[1].number_input("Parallel samples n", 1, SAMPLES.high, key=state.key("samples")))
    output = int(cols[2].number_input("Output tokens per sample", 1, SHARE_OUTPUT.high, key=state.key("share_output")))
    width = int(cols[3].number_input("Beam width k", 1, BEAM.high, key=state.key("beam")))
    cols = st.columns(3)
    system = int(cols[0].number_input("Shared system prompt tokens", 1, SYSTEM.high, key=state.key("system")))
    requests = int(cols[1].number_input("Requests sharing it", 1, SHARE_REQUESTS.high, key=state.key("share_requests")))
    user = int(cols[2].number_input("Own tokens per request", 0, USER.high, key=state.key("user")))
    return SharingSettings(prompt=prompt, samples=samples, output=output, width=width, system=system,
                           requests=requests, user=user)


def block_table_settings(state: PageState) -> BlockTableSettings:
    """The block-table tab's demo inputs."""
    cols = st.columns(5)
    block = cols[0].select_slider("Block size", DEMO_BLOCK_SIZES, key=state.key("bt_block"))
    sequences = cols[1].slider("Sequences", 1, BT_SEQUENCES.high, key=state.key("bt_sequences"))
    prompt = cols[2].slider("Prompt tokens", 1, BT_PROMPT.high, key=state.key("bt_prompt"))
    steps = cols[3].slider("Decode steps so far", 0, BT_STEPS.high, key=state.key("bt_steps"))
    shared = cols[4].toggle("Share the prompt (fork)", key=state.key("bt_shared"))
    return BlockTableSettings(block_size=block, sequences=sequences, prompt=prompt, steps=steps, shared=shared)


def clamp_to(state: PageState, name: str, highest: int) -> None:
    """Lower field ``name`` to ``highest`` before its widget is drawn (its range depends on others)."""
    if state.value(name) > highest:
        st.session_state[state.key(name)] = highest


@dataclass(frozen=True, kw_only=True)
class PrefixControls:
    """The prefix-caching tab's inputs."""

    scenario: PrefixScenario
    cpu_gib: float
    link_gbps: float


def prefix_controls(state: PageState) -> PrefixControls:
    """The prefix-caching tab's widgets."""
    cols = st.columns(4)
    system = int(cols[0].number_input("Shared prefix tokens", 0, PREFIX_TOKENS.high, key=state.key("pf_system")))
    user = int(cols[1].number_input("Own tokens per turn", 0, PREFIX_USER.high, key=state.key("pf_user")))
    output = int(cols[2].number_input("Output tokens", 1, PREFIX_OUTPUT.high, key=state.key("pf_output")))
    requests = int(cols[3].number_input("Requests", 1, PREFIX_REQUESTS.high, key=state.key("pf_requests")))
    cols = st.columns(4)
    turns = int(cols[0].number_input("Turns per conversation", 1, PREFIX_TURNS.high, key=state.key("pf_turns")))
    prefixes = int(cols[1].number_input("Distinct prefixes (few-shot tasks)", 1, PREFIX_COUNT.high,
                                        key=state.key("pf_prefixes")))
    rate = cols[2].number_input("Conversations per second", float(PREFIX_RATE.low), float(PREFIX_RATE.high),
                           key=state.key("pf_rate"))
    think = cols[3].number_input("Think time between turns (s)", 0.0, float(THINK.high), key=state.key("pf_think"))
    cols = st.columns(2)
    cpu_gib = cols[0].number_input("CPU tier (GiB, 0 = none)", 0.0, float(CPU_GIB.high), key=state.key("cpu_gib"),
                                   help="Evicted prefix blocks and swapped sequences go to host memory.")
    link = cols[1].number_input("CPU link (GB/s)", float(LINK_GBPS.low), float(LINK_GBPS.high),
                                key=state.key("link_gbps"))
    if system + user < 1:
        system = 1  # a prompt needs a token; the widget allows both at 0
    return PrefixControls(scenario=PrefixScenario(requests=requests, system_tokens=system, user_tokens=user,
                                                  output_tokens=output, prefixes=prefixes, turns=turns, rate=rate,
                                                  think_s=think),
                          cpu_gib=float(cpu_gib), link_gbps=float(link))

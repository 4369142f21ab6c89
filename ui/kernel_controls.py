"""The live kernel page's controls, each declared once with its URL name (``ui.url_state``).

Three groups of URL-backed state:

* the sidebar's kernel and shape (page ``kernels``), which :func:`sidebar` turns into one
  ``kernels.bench.live.KernelRequest``; the dtype and head dim are kept per kernel;
* the view (page ``kernels.view``): the open tab, the online-softmax walk-through's widgets
  and the page-size study's workload;
* the shape picker over a report's records, which never holds state of its own: it follows the
  sidebar, and picking a record writes that shape back into the sidebar (so into the URL).

The page opens on batch 8 × 32K (1 GiB of KV at 32/8 heads, d = 128): big enough that the
kernels run at the memory's speed. At batch 1 × 4K the 17 MB of KV take ~4 µs to read, less
than the launches cost, so every kernel there measures its launch overhead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import streamlit as st

from glossary import dtype_label
from inputs.bounds import Bound
from kernels.bench.live import KernelRequest
from kernels.bench.mixed import MIXED_PRESETS, mixed_batch
from simulation.traces import shipped_trace_names
from simulation.workloads import PRESETS
from ui.url_state import ChoiceField, FlagField, NumberField, PageState

__all__ = ["KERNELS", "DTYPES", "HEAD_DIMS", "BATCHES", "LENGTHS", "HEADS", "BLOCKS", "TABS", "SHAPE_FIELDS",
           "VIEW_FIELDS", "shape_state",
           "view_state", "kernel_state", "dtype_text", "sidebar", "tabs", "follow_sidebar", "softmax_controls",
           "page_size_controls", "PS_CONTEXTS"]

KERNELS = {"decode": "Paged decode", "prefill": "Tiled forward (prefill)", "mixed": "Chunked prefill (mixed batch)"}
DTYPES = {"decode": ("bf16", "fp16", "fp8"), "prefill": ("bf16", "fp16"), "mixed": ("bf16", "fp16")}
HEAD_DIMS = {"decode": (64, 128, 256), "prefill": (64, 128, 256), "mixed": (64, 128, 256)}
MIXES = {p: mixed_batch(p).name for p in MIXED_PRESETS}  # the harness's mixed batches
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)
LENGTHS = (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
HEADS = (1, 2, 4, 8, 16, 32, 64)
BLOCKS = (1, 8, 16, 32, 64, 128, 256)  # the kernels take any power of two from 1 to 256
# Tab id (URL value) → label.
TABS = {"results": ":material/table_chart: Results", "roofline": ":material/show_chart: Roofline",
        "sweep": ":material/timeline: Sweep", "pagesize": ":material/grid_view: Page size",
        "memory": ":material/memory: Naive vs tiled", "softmax": ":material/stairs: Online softmax",
        "check": ":material/verified: Correctness"}
TABS_KEY = "k_tabs"  # the st.tabs widget's own key (it holds the label)
SM_NS, SM_DS, SM_TQ, SM_TK = (16, 32, 64, 128), (8, 16, 64), (4, 8, 16, 32, 128), (4, 8, 16, 32)
# The walk-through's most steps: N 128 in query tiles of 4 and key tiles of 4 (32 × 32 tiles).
SM_STEP = Bound(field="sm_step", low=1, high=(128 // 4) ** 2, integer=True, unit="")
PS_WORKLOADS = tuple(f"Preset: {p.name}" for p in PRESETS) + tuple(f"Trace: {n}" for n in shipped_trace_names())
PS_CONTEXTS = (2048, 4096, 8192, 16384, 32768, 131072)

SHAPE_FIELDS = (
    ChoiceField("kernel", "kernel", "decode", tuple(KERNELS)),
    ChoiceField("batch", "batch", 8, BATCHES),
    ChoiceField("len", "len", 32768, LENGTHS),
    ChoiceField("hq", "hq", 32, HEADS),
    ChoiceField("hkv", "hkv", 8, HEADS),
    ChoiceField("block", "block", 16, BLOCKS),
    FlagField("causal", "causal", True),
    ChoiceField("mix", "mix", MIXED_PRESETS[0], MIXED_PRESETS),
    FlagField("sweep", "sweep", False),
    FlagField("mem", "memory", False),
)
VIEW_FIELDS = (
    ChoiceField("tab", "tab", "results", tuple(TABS)),
    ChoiceField("sm_n", "sm_n", 32, SM_NS),
    ChoiceField("sm_d", "sm_d", 16, SM_DS),
    ChoiceField("sm_tq", "sm_tq", 16, SM_TQ),
    ChoiceField("sm_tk", "sm_tk", 8, SM_TK),
    FlagField("sm_causal", "sm_causal", False),
    NumberField("sm_step", "sm_step", 1, SM_STEP),
    ChoiceField("ps_work", "ps_work", PS_WORKLOADS[0], PS_WORKLOADS),
    ChoiceField("ps_ctx", "ps_ctx", 32768, PS_CONTEXTS),
)


def dtype_text(dtype: str) -> str:
    """A kernel dtype by its glossary name; FP8 is the cache's format, the query staying 16-bit."""
    return f"{dtype_label('fp8')} KV, {dtype_label('bf16')} query" if dtype == "fp8" else dtype_label(dtype)


def shape_state() -> PageState:
    """The sidebar's URL-backed fields, fresh each rerun (its notices are that rerun's)."""
    return PageState("kernels", SHAPE_FIELDS)


def view_state() -> PageState:
    """The view's URL-backed fields (tab, walk-through, page-size workload), fresh each rerun."""
    return PageState("kernels.view", VIEW_FIELDS)


def kernel_state(kernel: str) -> PageState:
    """The controls whose options depend on the kernel; each kernel keeps its own choice."""
    return PageState("kernels", [ChoiceField("dtype", f"dtype_{kernel}", "bf16", DTYPES[kernel]),
                                 ChoiceField("d", f"d_{kernel}", 128, HEAD_DIMS[kernel])])


def _on_kernel_change() -> None:
    """Drop link values the new kernel cannot use (fp8 outside decode): they belonged to
    the other kernel's controls, so the new kernel starts from its defaults, without a notice."""
    for field in kernel_state(st.session_state[shape_state().key("kernel")]).fields:
        raw = st.query_params.get(field.url_name)
        if raw is not None and raw not in {str(o) for o in field.options}:
            del st.query_params[field.url_name]


def sidebar() -> tuple[KernelRequest, list[str]]:
    """The kernel and shape controls (URL-backed), as one request, and the link notices."""
    shape = shape_state()
    shape.seed()
    key = shape.key
    with st.sidebar:
        st.header("Kernel and shape")
        kernel = st.radio("Kernel", list(KERNELS), format_func=KERNELS.get, key=key("kernel"),
                          on_change=_on_kernel_change)
        state = kernel_state(kernel)
        state.seed()
        dtype = st.selectbox("Dtype", DTYPES[kernel], key=state.key(f"dtype_{kernel}"),
                             format_func=dtype_text)
        mix = st.selectbox("Mixed batch", MIXED_PRESETS, format_func=MIXES.get, key=key("mix"),
                           disabled=kernel != "mixed")
        batch = st.selectbox("Batch", BATCHES, key=key("batch"), disabled=kernel == "mixed",
                             help="Small shapes (batch 1 × 4K) are launch-bound: reading their KV takes less "
                                  "time than launching the kernels, so they measure the launches; the Results "
                                  "tab says so in the shape's own numbers.")
        length = st.selectbox("Context (decode) / N (prefill), tokens", LENGTHS, key=key("len"),
                              disabled=kernel == "mixed")
        c1, c2 = st.columns(2)
        hq = c1.selectbox("Query heads", HEADS, key=key("hq"))
        hkv = c2.selectbox("KV heads", HEADS, key=key("hkv"))
        d = st.selectbox("Head dim", HEAD_DIMS[kernel], key=state.key(f"d_{kernel}"))
        block = st.selectbox("Block size (paged), tokens", BLOCKS, key=key("block"), disabled=kernel == "prefill")
        causal = st.toggle("Causal (prefill)", key=key("causal"), disabled=kernel != "prefill")
        sweep = st.toggle("Add the sweep (context and batch / N)", key=key("sweep"))
        memory = st.toggle("Add naive vs tiled memory as N grows", key=key("memory"))
    shape.sync()
    state.sync()
    request = KernelRequest(kernel=kernel, dtype=dtype, batch=batch, length=length, n_q_heads=hq, n_kv_heads=hkv,
                            head_dim=d, block_size=block, causal=causal, sweep=sweep, memory=memory, mix=mix)
    return request, shape.notices + state.notices


def tabs() -> Sequence:
    """The page's tabs, opened on the tab the URL names; the tab the user opens goes back to the URL.
    ``view_state().seed()`` must have run in this rerun."""
    view = view_state()
    open_id = view.value("tab")
    containers = st.tabs(list(TABS.values()), default=TABS[open_id], key=TABS_KEY, on_change="rerun")
    label = st.session_state.get(TABS_KEY, TABS[open_id])
    st.session_state[view.key("tab")] = next((i for i, lab in TABS.items() if lab == label), open_id)
    view.sync()
    return containers


# ---------------------------------------------------------------- the shape picker


def _sidebar_values(kernel: str, shape) -> dict[str, object] | None:
    """The sidebar's session values that describe ``shape``; None when a value is not offered."""
    key = shape_state().key
    values: dict[str, object] = {key("hq"): shape.n_q_heads, key("hkv"): shape.n_kv_heads,
                                 f"kernels.d_{kernel}": shape.head_dim}
    if kernel == "mixed":
        mix = next((p for p, name in MIXES.items() if name == shape.name), None)
        values[key("mix")] = mix
        values[key("block")] = shape.block_size
    elif kernel == "decode":
        values.update({key("batch"): shape.batch, key("len"): shape.context, key("block"): shape.block_size})
    else:
        values.update({key("batch"): shape.batch, key("len"): shape.seq_len, key("causal"): shape.causal})
    offered = {key("hq"): HEADS, key("hkv"): HEADS, f"kernels.d_{kernel}": HEAD_DIMS[kernel], key("mix"): MIXED_PRESETS,
               key("block"): BLOCKS, key("batch"): BATCHES, key("len"): LENGTHS, key("causal"): (True, False)}
    if any(v not in offered[k] for k, v in values.items()):
        return None
    dtype_key = f"kernels.dtype_{kernel}"
    current = st.session_state.get(dtype_key, "bf16")
    if (current if current != "fp8" else "bf16") != shape.dtype:  # an fp8 choice reads bf16 records
        values[dtype_key] = shape.dtype
    return values


def _to_sidebar(kernel: str, records: Sequence, pick_key: str) -> None:
    """The picker's callback: the picked record's shape becomes the sidebar's (and the URL's)."""
    values = _sidebar_values(kernel, records[st.session_state[pick_key]].shape)
    for k, v in (values or {}).items():
        st.session_state[k] = v


def _nearest(records: Sequence, wanted) -> int:
    """The record closest to ``wanted``: same heads and head dim first, then the nearest size."""
    def distance(r) -> tuple:
        s = r.shape
        same = (s.n_q_heads, s.n_kv_heads, s.head_dim) == (wanted.n_q_heads, wanted.n_kv_heads, wanted.head_dim)
        size = abs(getattr(s, "batch", 1) - getattr(wanted, "batch", 1)) + abs(
            getattr(s, "context", getattr(s, "seq_len", 0)) - getattr(wanted, "context", getattr(wanted, "seq_len", 0)))
        return (not same, size)
    return min(range(len(records)), key=lambda i: distance(records[i]))


def follow_sidebar(records: Sequence, wanted, kernel: str, labels: Sequence[str],
                   selectbox: Callable = st.selectbox):
    """The shape picker over ``records``: it shows the sidebar's shape when the records hold it
    (on every rerun, not only the first), else keeps its own pick (at first the nearest record).
    Returns (the picked record, whether it is the sidebar's shape)."""
    pick_key = f"k_pick_{kernel}"
    match = next((i for i, r in enumerate(records) if r.shape == wanted), None)
    if match is not None:
        st.session_state[pick_key] = match
    elif st.session_state.get(pick_key) is None or st.session_state[pick_key] >= len(records):
        st.session_state[pick_key] = _nearest(records, wanted) if wanted is not None else 0
    pick = selectbox("Shape from these results", range(len(records)), format_func=labels.__getitem__,
                     key=pick_key, on_change=_to_sidebar, args=(kernel, records, pick_key),
                     help="Picking a shape here sets the sidebar to it.")
    return records[pick], match is not None


# ---------------------------------------------------------------- tabs' own controls


def softmax_controls(steps_of: Callable[[int, int, int, int, bool], int]) -> tuple[int, int, int, int, bool, int]:
    """The walk-through's N, head dim, tiles, causal flag and step (URL-backed); ``steps_of``
    gives the number of steps of a setting, so the step is clamped before its slider draws."""
    view = view_state()
    key = view.key
    c1, c2, c3, c4 = st.columns(4)
    n = c1.selectbox("N (tokens)", SM_NS, key=key("sm_n"))
    d = c2.selectbox("Head dim", SM_DS, key=key("sm_d"))
    tq = c3.selectbox("Query tile Br", SM_TQ, key=key("sm_tq"))
    tk = c4.selectbox("Key tile Bc", SM_TK, key=key("sm_tk"))
    causal = st.toggle("Causal", key=key("sm_causal"))
    total = steps_of(n, d, tq, tk, causal)
    if not 1 <= st.session_state[key("sm_step")] <= total:
        st.session_state[key("sm_step")] = min(max(1, int(st.session_state[key("sm_step")])), total)
    step = st.slider("Step", 1, max(total, 2), key=key("sm_step"), disabled=total < 2)
    view.sync()
    return n, d, tq, tk, causal, min(step, total)


def page_size_controls() -> tuple[str, int]:
    """The page-size study's workload (a preset or a shipped trace) and its longest context."""
    view = view_state()
    key = view.key
    c1, c2 = st.columns([2, 1])
    work = c1.selectbox("Workload for the waste", PS_WORKLOADS, key=key("ps_work"))
    ctx = c2.selectbox("Longest context (tokens)", PS_CONTEXTS, key=key("ps_ctx"), format_func="{:,}".format)
    view.sync()
    return work, ctx

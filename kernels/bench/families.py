"""The attention families on the paged decode kernel: sliding windows and sinks against full
attention, on the same pool and block tables, in one run; its shapes, contenders, checks and report.

Per shape (batch B, context L, query:KV heads, head dim, block size) one pool of random bf16 K/V
is built (rotated over copies up to 1 GB, as the decode section does: :func:`kernels.bench.timing.rotations`),
timed, then quantised to FP8 (e4m3, per-head scales: :func:`kernels.cache.paged.quantize_kv_fp8`)
and timed again. Contenders, all through :func:`kernels.decode.api.paged_decode_attention` but
``sdpa_mask``:

==============  ===================================================================================
full            full attention over the L tokens
full_sinks      the same with sinks (one float32 logit per query head)
full_auto       full attention as a plain call runs it, timed only where that is another kernel
                than the Triton one (FP8 on Hopper: the register-dequant kernel). Windows and sinks
                run on the Triton kernel only, so every other row names ``backend="triton"``: the
                ratios compare one kernel with itself
window_full     full attention over W tokens: the table entries of the pages the window lies in,
                lengths W (aligned L and W: the window's own keys)
sliding         ``sliding_window=W`` over L
sliding_sinks   the same with sinks
sdpa_mask       the baseline a user would write: gather each sequence's whole context into
                contiguous [B, Hkv, L, d] (FP8: dequantised to the query's dtype), then torch SDPA
                with a boolean mask keeping the window; skipped where that copy would pass
                :data:`SDPA_GATHER_LIMIT_BYTES`
==============  ===================================================================================

Timing is the harness's (:func:`kernels.bench.timing.measure`: do_bench medians of CUDA-graph
replays, the eager figure beside them); bytes read and the targets are in
:mod:`kernels.bench.family_records`. Each output is checked on the first and last sequence
against the float32 reference (:func:`kernels.reference.paged.paged_attention_reference` with the
same window and sinks; FP8 on the dequantised stored values), its max abs error held to the
``paged_decode`` entry of :mod:`kernels.tolerances` for the pool's format.

On the CPU (tests) the kernels run under the Triton interpreter and each call is timed once with
``time.perf_counter``: those figures only show that the run works end to end. Nothing runs at import.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from itertools import product

from kernels.runtime import ensure_triton_backend

ensure_triton_backend()  # before the kernel modules: the interpreter is chosen at decoration

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from inputs.errors import InputError  # noqa: E402
from kernels.bench.contenders import DTYPES, random_paged_tensors  # noqa: E402
from kernels.bench.family_records import (  # noqa: E402
    KV_FORMATS, SCHEMA, SCHEMA_VERSION, FamiliesReport, FamilyResult, FamilyShape, WindowResult, best_full_ms,
    compute_family_targets, ok_ms, ratio,
)
from kernels.bench.records import Ceilings, Measurement, measured_text  # noqa: E402
from kernels.bench.sweeps import ProgressEvent, ProgressFn  # noqa: E402
from kernels.bench.timing import (  # noqa: E402
    Rotation, environment, free_cuda_memory, is_oom, measure, measure_ceilings, rotations,
)
from kernels.cache.paged import quantize_kv_fp8  # noqa: E402
from kernels.decode.api import decode_plan, paged_decode_attention  # noqa: E402
from kernels.reference.paged import gather_kv_padded, paged_attention_reference  # noqa: E402
from kernels.theory import decode_kv_bytes  # noqa: E402
from kernels.tolerances import tolerance  # noqa: E402
from units import GiB, cdiv  # noqa: E402

__all__ = ["FamilyConfig", "SDPA_GATHER_LIMIT_BYTES", "family_config", "family_groups", "bench_family_group",
           "run_families", "format_families"]

# The gathered bf16 K+V of sdpa_mask: past this the copy (and SDPA's math path, which repeats
# each KV head for its query heads: up to 8x more) costs more memory and time than a baseline should.
SDPA_GATHER_LIMIT_BYTES = 2 * GiB
ERR_CHECK_ROWS = 2  # sequences checked against the reference: the first and the last
SINK_SCALE = 2.0  # sinks ~ N(0, 2^2): logits of the size gpt-oss learns, large enough to move the output
UNIT = "TB/s"  # of the bytes read (family_records); the text report shows GB/s


@dataclass(frozen=True, kw_only=True)
class FamilyConfig:
    """Which shapes the families run times, and how (defaults: the full H200 run, ~2-3 minutes).

    ``shapes`` are (batch, context) pairs; every window runs at every shape and must be shorter
    than every context. Defaults: contexts 8K-128K (128K for batch <= 8), windows of gpt-oss (128),
    Gemma-3 (1024) and Gemma-2 / Mistral-7B (4096); every default shape has a window of at most
    1/8 of its context, which ``sliding_decode_vs_full`` reads. About 470 measurements of ~0.12 s
    each (4 do_bench calls of 5 + 20 ms) plus the kernels' compiles.
    """

    shapes: tuple[tuple[int, int], ...] = ((1, 8192), (1, 32768), (1, 131072), (8, 32768), (8, 131072),
                                           (32, 8192), (32, 32768), (128, 8192), (128, 32768))
    windows: tuple[int, ...] = (128, 1024, 4096)
    heads: tuple[tuple[int, int], ...] = ((32, 8), (64, 8))  # Llama-3-8B, Llama-3-70B (query, KV)
    head_dim: int = 128
    block_size: int = 16
    kv_formats: tuple[str, ...] = KV_FORMATS
    dtype: str = "bf16"
    sdpa: bool = True
    sdpa_limit_bytes: int = SDPA_GATHER_LIMIT_BYTES
    warmup_ms: float = 5.0
    rep_ms: float = 20.0  # per do_bench call; measure makes 4 (3 eager passes and the graph)
    cuda_graphs: bool = True
    device: str = "cuda"  # "cpu": the interpreter, one perf_counter call per contender (tests)
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.shapes or not self.windows or not self.heads or not self.kv_formats:
            raise InputError("families", "needs at least one shape, window, head pair and KV format")
        if not set(self.kv_formats) <= set(KV_FORMATS) or self.device not in ("cuda", "cpu"):
            raise InputError("families", f"KV formats come from {KV_FORMATS} and the device is cuda or cpu, "
                                         f"got {self.kv_formats} on {self.device!r}")
        shortest = min(context for _, context in self.shapes)
        for w in self.windows:
            if not 1 <= w < shortest:
                raise InputError("window", f"each window must be 1 token or more and shorter than every context "
                                           f"(the shortest is {shortest}), got {w}")

    @classmethod
    def quick(cls) -> FamilyConfig:
        """A short run: two shapes, gpt-oss's and Gemma-2's windows, 32/8 heads."""
        return cls(shapes=((1, 32768), (8, 32768)), windows=(128, 4096), heads=((32, 8),), rep_ms=15.0)

    @property
    def batches(self) -> tuple[int, ...]:
        return tuple(dict.fromkeys(b for b, _ in self.shapes))

    @property
    def contexts(self) -> tuple[int, ...]:
        return tuple(dict.fromkeys(L for _, L in self.shapes))


def family_config(*, quick: bool = False, batches: tuple[int, ...] | None = None,
                  contexts: tuple[int, ...] | None = None, windows: tuple[int, ...] | None = None,
                  heads: tuple[tuple[int, int], ...] | None = None, block_size: int | None = None,
                  rep_ms: float | None = None, fp8: bool = True, cuda_graphs: bool = True) -> FamilyConfig:
    """The default (or quick) config narrowed by the CLI's options (None keeps the default).
    Batches or contexts given make the shapes every pair of the two lists.

    Raises InputError (``window``) when a window is not shorter than every context."""
    cfg = FamilyConfig.quick() if quick else FamilyConfig()
    changes: dict[str, object] = {}
    if batches or contexts:
        changes["shapes"] = tuple(product(batches or cfg.batches, contexts or cfg.contexts))
    for name, value in (("windows", windows), ("heads", heads), ("block_size", block_size), ("rep_ms", rep_ms)):
        if value:
            changes[name] = value
    if not fp8:
        changes["kv_formats"] = ("bf16",)
    if not cuda_graphs:
        changes["cuda_graphs"] = False
    return replace(cfg, **changes)


def family_groups(config: FamilyConfig) -> tuple[tuple[int, int, int, int], ...]:
    """``(batch, context, n_q_heads, n_kv_heads)`` of each pool the run builds (one per group,
    every KV format of it made from the same values)."""
    return tuple((b, L, hq, hkv) for hq, hkv in config.heads for b, L in config.shapes)


# ----------------------------------------------------------------------------------------------
# Inputs and contenders
# ----------------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class _Pool:
    """One group's tensors in one KV format, shared by every contender.

    ``q`` is ``[rotations, B, Hq, d]``, ``tables`` ``[rotations, B, cdiv(L, block)]`` (every
    rotation a slice of one permutation of the pool: pages scattered as a busy allocator leaves
    them), ``sinks`` ``[Hq]`` float32; ``rows`` the sequences checked against the reference.
    """

    shape: FamilyShape
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    tables: torch.Tensor
    lens: torch.Tensor
    sinks: torch.Tensor
    rot: Rotation
    rows: list[int]
    k_scale: torch.Tensor | None = None
    v_scale: torch.Tensor | None = None
    scales: dict = field(default_factory=dict)  # k_scale / v_scale for an FP8 pool's calls

    def reference(self, tables: torch.Tensor, lens: torch.Tensor, **span) -> torch.Tensor:
        """Float32 attention of the checked rows of rotation 0 (``tables`` [B, blocks])."""
        r = self.rows
        return paged_attention_reference(self.q[0, r], self.k, self.v, tables[r], lens[r], k_scale=self.k_scale,
                                         v_scale=self.v_scale, **span)

    def err(self, out: torch.Tensor, ref: torch.Tensor) -> float:
        s = self.shape
        return float((out.reshape(s.batch, s.n_q_heads, s.head_dim)[self.rows].float() - ref).abs().max())


def _new_pool(shape: FamilyShape, device: torch.device, seed: int) -> _Pool:
    """Random bf16/fp16 K/V for a group, rotated over enough copies to read >= 1 GB per timed call."""
    b = shape.batch
    kv_bytes = decode_kv_bytes(b, shape.context, shape.n_kv_heads, shape.head_dim, 2)
    n_rot = rotations(kv_bytes, torch.cuda.mem_get_info()[0]) if device.type == "cuda" else 1
    gen = torch.Generator(device=device).manual_seed(seed)
    q, k, v, tables, lens = random_paged_tensors(b, shape.context, shape.n_q_heads, shape.n_kv_heads,
                                                 shape.head_dim, shape.block_size, DTYPES[shape.dtype], n_rot, gen)
    sinks = torch.randn(shape.n_q_heads, device=device, generator=gen) * SINK_SCALE
    return _Pool(shape=shape, q=q, k=k, v=v, tables=tables, lens=lens, sinks=sinks, rot=Rotation(n_rot),
                 rows=sorted({0, b - 1})[:ERR_CHECK_ROWS])


def _as_fp8(x: _Pool) -> _Pool:
    """The same values quantised to e4m3 with per-head scales (the 16-bit pool is let go)."""
    k8, v8, ks, vs = quantize_kv_fp8(x.k, x.v)
    return replace(x, shape=replace(x.shape, kv="fp8"), k=k8, v=v8, k_scale=ks, v_scale=vs,
                   scales=dict(k_scale=ks, v_scale=vs))


@dataclass(frozen=True, kw_only=True)
class _Contender:
    """One timed call: ``run`` (the next rotation), ``check`` (rotation 0 against the reference:
    error, note) and the bytes it reads."""

    name: str
    run: Callable[[], object]
    check: Callable[[], tuple[float, str]]
    work: int


def _span_text(span: dict) -> str:
    parts = [f"sliding_window={span['sliding_window']}"] if span.get("sliding_window") else []
    return ", ".join(parts + (["sinks"] if span.get("sinks") is not None else [])) or "full"


def _ours(x: _Pool, name: str, *, tables: torch.Tensor, lens: torch.Tensor, tokens: int, backend: str = "triton",
          kernel: str = "triton", **span) -> _Contender:
    """Our decode over ``tables`` [rotations, B, blocks] and ``lens`` with ``span`` (window, sinks)."""
    q, k, v, rot, scales = x.q, x.k, x.v, x.rot, x.scales
    ref = x.reference(tables[0], lens, **span)
    fmt = " on the dequantised FP8 cache" if x.k_scale is not None else ""

    def check() -> tuple[float, str]:
        # The one validated call: the tables' values are checked against the pool once; the
        # harness built them, so the timed calls skip it.
        out = paged_decode_attention(q[0], k, v, tables[0], lens, backend=backend, **scales, **span)
        return x.err(out, ref), f"{kernel} kernel; vs fp32 reference ({_span_text(span)}){fmt}, sequences {x.rows}"

    return _Contender(name=name, check=check, work=_bytes(x.shape, tokens),
                      run=lambda: paged_decode_attention(q[(i := rot.next())], k, v, tables[i], lens, backend=backend,
                                                         validate=False, **scales, **span))


def _sdpa_mask(x: _Pool, window: int, ref: torch.Tensor) -> _Contender:
    """Gather the whole context, dequantise an FP8 pool, then SDPA with a boolean window mask."""
    s, q4, rot = x.shape, x.q.unsqueeze(3), x.rot  # q4 [rotations, B, Hq, 1, d]
    L, dtype = s.context, x.q.dtype
    keep = (torch.arange(L, device=x.q.device) >= L - window)[None, None, None, :]  # [1, 1, 1, L]

    def kv(i: int) -> tuple[torch.Tensor, torch.Tensor]:
        kg, vg = gather_kv_padded(x.k, x.tables[i], L), gather_kv_padded(x.v, x.tables[i], L)
        if x.k_scale is None:
            return kg, vg
        return (kg.to(dtype) * x.k_scale.to(dtype).view(1, -1, 1, 1),
                vg.to(dtype) * x.v_scale.to(dtype).view(1, -1, 1, 1))

    def attend(i: int) -> torch.Tensor:
        return F.scaled_dot_product_attention(q4[i], *kv(i), attn_mask=keep, enable_gqa=True)

    def check() -> tuple[float, str]:
        return x.err(attend(0), ref), f"vs fp32 reference (sliding_window={window}), sequences {x.rows}"

    return _Contender(name="sdpa_mask", run=lambda: attend(rot.next()), check=check, work=_sdpa_bytes(s))


def _bytes(shape: FamilyShape, tokens: int) -> int:
    """K and V bytes of ``tokens`` per sequence in the shape's pool format (family_records)."""
    return decode_kv_bytes(shape.batch, tokens, shape.n_kv_heads, shape.head_dim, 1 if shape.kv == "fp8" else 2)


def _sdpa_bytes(shape: FamilyShape) -> int:
    """What sdpa_mask reads: the pool's L tokens and the 16-bit copy SDPA attends (the gather's
    write not counted)."""
    return _bytes(shape, shape.context) + decode_kv_bytes(shape.batch, shape.context, shape.n_kv_heads,
                                                          shape.head_dim, 2)


def _sdpa_skipped(x: _Pool, config: FamilyConfig) -> str:
    """Why sdpa_mask does not run at this shape ("" when it does)."""
    if not config.sdpa:
        return "not asked for in this run"
    s = x.shape
    copy = decode_kv_bytes(s.batch, s.context, s.n_kv_heads, s.head_dim, 2)
    if copy > config.sdpa_limit_bytes:
        return (f"the gathered K/V would be {copy / 1e9:.1f} GB, over the {config.sdpa_limit_bytes / 1e9:.1f} GB "
                "this baseline is given")
    return ""


# ----------------------------------------------------------------------------------------------
# Timing
# ----------------------------------------------------------------------------------------------


def _failed(name: str, exc: Exception, work: int, doing: str) -> Measurement:
    return Measurement(contender=name, status="oom" if is_oom(exc) else "error", unit=UNIT, work=work,
                       note=f"{doing}: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}")


def _cpu_measure(c: _Contender, datasheet_tbps: float) -> Measurement:
    """The interpreter's figure: the check, then one timed call (perf_counter)."""
    try:
        err, note = c.check()
        begin = time.perf_counter()
        c.run()
        ms = (time.perf_counter() - begin) * 1e3
    except Exception as exc:  # noqa: BLE001 - each failure becomes this contender's record
        return _failed(c.name, exc, c.work, "running it")
    rate = c.work / (ms * 1e-3) / 1e12
    return Measurement(contender=c.name, status="ok", median_ms=ms, timing="eager", eager_ms=ms, unit=UNIT,
                       work=c.work, rate=rate, share_of_datasheet=rate / datasheet_tbps, max_abs_err=err, note=note)


def _timed(build: Callable[[], _Contender], name: str, work: int, x: _Pool, config: FamilyConfig,
           ceilings: Ceilings) -> Measurement:
    """Build a contender (its reference) and time it; a failure at either step is its record."""
    try:
        c = build()
    except Exception as exc:  # noqa: BLE001 - usually out of memory
        free_cuda_memory()
        return _failed(name, exc, work, "building it")
    if config.device == "cpu":
        return _cpu_measure(c, ceilings.datasheet_tbps)
    # Building the contender computed its float32 reference, whose GBs of gathered K/V now sit
    # in the caching allocator; a graph captured next replayed 12-14 % slower on the H200 at
    # batch 8 x 128K than one captured after they went back to the driver (either contender,
    # whichever was built first), so every contender is timed on an emptied cache.
    free_cuda_memory()
    return measure(c.name, c.run, unit=UNIT, work=c.work, check=c.check, measured_ceiling=ceilings.copy_tbps,
                   datasheet_ceiling=ceilings.datasheet_tbps, warmup_ms=config.warmup_ms, rep_ms=config.rep_ms,
                   graph_calls=x.rot.n if config.cuda_graphs else 0)


def _splits(x: _Pool, config: FamilyConfig, **kw) -> tuple[str, int]:
    """The kernel and split count a call plans, as the timed calls (graph replays or eager) do."""
    plan = decode_plan(x.q[0], x.k, x.v, x.tables[0], x.lens, in_graph=config.cuda_graphs and config.device == "cuda",
                       **kw)
    return plan.kernel, plan.num_splits


def _bench_pool(x: _Pool, config: FamilyConfig, ceilings: Ceilings) -> FamilyResult:
    """Every contender on one pool: full attention over L, then each window."""
    s, L, bs = x.shape, x.shape.context, x.shape.block_size
    tol_key = ("paged_decode", s.kv)
    full_kw = dict(tables=x.tables, lens=x.lens, tokens=L)
    _, splits = _splits(x, config, backend="triton")
    auto_kernel, _ = _splits(x, config)
    calls = [("full", {}), ("full_sinks", dict(sinks=x.sinks))]
    if auto_kernel != "triton":
        calls.append(("full_auto", dict(backend="auto", kernel=auto_kernel)))
    full = [_timed(lambda n=n, kw=kw: _ours(x, n, **full_kw, **kw), n, _bytes(s, L), x, config, ceilings)
            for n, kw in calls]
    windows = []
    for w in config.windows:
        first = (L - w) // bs  # the page holding the window's first key
        w_tables = x.tables[:, :, first:first + cdiv(w, bs)].contiguous()
        w_lens = torch.full_like(x.lens, w)
        slide_kw = dict(tables=x.tables, lens=x.lens, tokens=w, sliding_window=w)
        rows = [
            _timed(lambda: _ours(x, "window_full", tables=w_tables, lens=w_lens, tokens=w), "window_full",
                   _bytes(s, w), x, config, ceilings),
            _timed(lambda: _ours(x, "sliding", **slide_kw), "sliding", _bytes(s, w), x, config, ceilings),
            _timed(lambda: _ours(x, "sliding_sinks", **slide_kw, sinks=x.sinks), "sliding_sinks", _bytes(s, w), x,
                   config, ceilings),
        ]
        why_not = _sdpa_skipped(x, config)
        if why_not:
            rows.append(Measurement(contender="sdpa_mask", status="skipped", unit=UNIT, work=_sdpa_bytes(s),
                                    note=why_not))
        else:
            rows.append(_timed(lambda: _sdpa_mask(x, w, x.reference(x.tables[0], x.lens, sliding_window=w)),
                               "sdpa_mask", _sdpa_bytes(s), x, config, ceilings))
        windows.append(WindowResult(window=w, num_splits=_splits(x, config, sliding_window=w)[1],
                                    measurements=tuple(rows)))
    return FamilyResult(shape=s, tolerance=" ".join(tol_key), atol=tolerance(*tol_key).atol, num_splits=splits,
                        measurements=tuple(full), windows=tuple(windows))


def _group_failed(shape: FamilyShape, config: FamilyConfig, exc: Exception) -> FamilyResult:
    """A group whose pool could not be built: every contender carries the reason."""
    def rows(names: tuple[str, ...], tokens: int) -> tuple[Measurement, ...]:
        return tuple(_failed(n, exc, _bytes(shape, tokens), "building the pool") for n in names)

    tol_key = ("paged_decode", shape.kv)
    return FamilyResult(shape=shape, tolerance=" ".join(tol_key), atol=tolerance(*tol_key).atol, num_splits=None,
                        measurements=rows(("full", "full_sinks"), shape.context),
                        windows=tuple(WindowResult(window=w, num_splits=None, measurements=rows(
                            ("window_full", "sliding", "sliding_sinks"), w)) for w in config.windows))


def bench_family_group(batch: int, context: int, n_q_heads: int, n_kv_heads: int, ceilings: Ceilings, *,
                       config: FamilyConfig = FamilyConfig(), seed: int = 0) -> tuple[FamilyResult, ...]:
    """Every contender of one group, one :class:`FamilyResult` per KV format of ``config`` (the
    FP8 pool is the 16-bit one quantised, so both hold the same values)."""
    device = torch.device(config.device)
    shapes = [FamilyShape(batch=batch, context=context, n_q_heads=n_q_heads, n_kv_heads=n_kv_heads,
                          head_dim=config.head_dim, block_size=config.block_size, kv=kv, dtype=config.dtype)
              for kv in config.kv_formats]
    results: list[FamilyResult] = []
    x = None
    try:
        x = _new_pool(replace(shapes[0], kv="bf16"), device, seed)
        for s in shapes:
            if s.kv == "fp8":
                x = _as_fp8(x)
            results.append(_bench_pool(x, config, ceilings))
    except Exception as exc:  # noqa: BLE001 - building a pool failed (out of memory): the rest say so
        x = None
        free_cuda_memory()
        results += [_group_failed(s, config, exc) for s in shapes[len(results):]]
    finally:
        x = None
        free_cuda_memory()
    return tuple(results)


def run_families(config: FamilyConfig = FamilyConfig(), *, progress: ProgressFn | None = None,
                 command: str = "kernels.bench.families.run_families()") -> FamiliesReport:
    """The copy-bandwidth ceiling, then every group of ``config``; the report with its targets.

    ``progress`` is called before each step with a ``ProgressEvent``; it may raise to cancel.
    """
    if config.device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("the families run needs a CUDA GPU (or FamilyConfig(device='cpu') for the interpreter)")
    begin = time.perf_counter()
    groups = family_groups(config)

    def tick(done: int, message: str) -> None:
        if progress is not None:
            progress(ProgressEvent(done=done, total=1 + len(groups), message=message))

    tick(0, "ceilings: copy bandwidth")
    ceilings = measure_ceilings()  # all None on the CPU
    results: list[FamilyResult] = []
    for i, (b, L, hq, hkv) in enumerate(groups):
        tick(1 + i, f"families B={b} L={L} H={hq}/{hkv} ({', '.join(config.kv_formats)})")
        results += bench_family_group(b, L, hq, hkv, ceilings, config=config, seed=config.seed + i)
    tick(1 + len(groups), "done")
    results_t = tuple(results)
    return FamiliesReport(schema=SCHEMA, schema_version=SCHEMA_VERSION, provenance=environment(command),
                          ceilings=ceilings, results=results_t, targets=compute_family_targets(results_t),
                          wall_s=time.perf_counter() - begin)


# ----------------------------------------------------------------------------------------------
# Text report
# ----------------------------------------------------------------------------------------------


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def _row(m: Measurement, ratios: str = "") -> str:
    if m.status != "ok":
        return f"    {m.contender:<14} {m.status:<11} {m.note[:90]}"
    mark = "g" if m.timing == "cuda_graph" else " "
    gbps = None if m.rate is None else m.rate * 1e3
    return (f"    {m.contender:<14} {_fmt(m.median_ms, '9.4f')} ms{mark} {_fmt(gbps, '7.0f')} GB/s  "
            f"{m.work / 1e6:9.1f} MB  err {_fmt(m.max_abs_err, '.1e')}  {ratios}").rstrip()


def _ratio_text(pairs: list[tuple[str, float | None]]) -> str:
    return "  ".join(f"{name} {_fmt(value, '.3f')}x" for name, value in pairs)


def format_families(report: FamiliesReport) -> str:
    """The run as text: every shape's times, GB/s of the bytes read, ratios and errors; the targets."""
    p, c = report.provenance, report.ceilings
    lines = [
        f"device {p.device} ({p.sm_count} SMs), driver {p.driver or '?'}, CUDA {p.cuda or '-'}, torch {p.torch}, "
        f"triton {p.triton}, python {p.python}, commit {p.commit or '?'}",
        f"date {p.date}  command: {p.command}",
        f"copy ceiling {_fmt(c.copy_tbps, '.2f')} TB/s (read + write; datasheet {c.datasheet_tbps} TB/s)",
        "ms g: CUDA-graph replay (otherwise eager); MB: the bytes each contender reads (family_records); "
        "GB/s: those bytes per second",
    ]
    misses = []
    for r in report.results:
        s = r.shape
        lines.append(f"\n{s.label} block {s.block_size}: full splits {r.num_splits or '-'}, "
                     f"errors held to {r.tolerance} (atol {r.atol:g})")
        full = ok_ms(r, "full")
        for m in r.measurements:
            ratios = [] if m.contender == "full" else [("/ full", ratio(ok_ms(r, m.contender), full))]
            lines.append(_row(m, _ratio_text(ratios)))
        for w in r.windows:
            lines.append(f"  W={w.window} (W/L {w.window / s.context:.4f}, sliding splits {w.num_splits or '-'})")
            sliding = ok_ms(w, "sliding")
            for m in w.measurements:
                ratios = {
                    "sliding": [("/ window_full", ratio(sliding, ok_ms(w, "window_full"))),
                                ("full /", ratio(best_full_ms(r), sliding))],
                    "sliding_sinks": [("/ sliding", ratio(ok_ms(w, "sliding_sinks"), sliding))],
                    "sdpa_mask": [("/ sliding", ratio(ok_ms(w, "sdpa_mask"), sliding))],
                }.get(m.contender, [])
                lines.append(_row(m, _ratio_text(ratios)))
        misses += [f"{s.label} {miss}" for miss in r.error_misses()]
    checked = "every output within its tolerance" if not misses else f"over tolerance: {'; '.join(misses)}"
    lines.append(f"\nchecks (first and last sequence vs the float32 reference): {checked}")
    lines.append(f"run took {_fmt(report.wall_s, '.0f')} s\ntargets")
    for t in report.targets:
        need = "<=" if t.at_most else ">="
        lines.append(f"  [{'MET ' if t.met else 'MISS'}] {t.name:<30} {measured_text(t) or '-':>7} "
                     f"(need {need} {t.required})  {t.detail}")
    return "\n".join(lines)

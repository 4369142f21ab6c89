"""A model's attention layer mix timed on this project's decode kernels: one layer of each
attention kind of the request (:class:`kernels.bench.layer_mix_records.KindTiming`, made from the
sizer's catalogue by :func:`planner.layer_mix.kinds_of`), at the request's batch, context, KV
format and one GPU's share of the heads (records, bytes and shares in the records module).

Kernels: full attention runs as a plain call of :func:`kernels.decode.api.paged_decode_attention`
(the register-dequant kernel for FP8 on Hopper); windows, chunks and sinks run the Triton kernel,
the only one that takes them; MLA runs :func:`kernels.decode.api.mla_decode_attention` on a latent
pool of ``kv_lora_rank + qk_rope_head_dim`` values a token in pages of :data:`MLA_PAGE` tokens.
Timing is the harness's (:func:`kernels.bench.timing.measure`: CUDA-graph replays, the eager
figure beside them); every output is checked on the first and last sequence against the
float32 reference and held to the kernel's tolerance. Under the interpreter (``device="cpu"``,
tests) each call is timed once with ``time.perf_counter``.

Shapes: ``q [rotations, B, Hq, d]``, K/V pools ``[blocks, Hkv, block_size, d]`` (random values,
pages scattered); MLA queries ``[rotations, B, H, rank]`` and ``[rotations, B, H, rope]``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from kernels.runtime import ensure_triton_backend

ensure_triton_backend()  # before the kernel modules: the interpreter is chosen at decoration

import torch  # noqa: E402

from kernels.bench.contenders import DTYPES, random_paged_tensors  # noqa: E402
from kernels.bench.layer_mix_records import (  # noqa: E402
    SCHEMA, SCHEMA_VERSION, KindTiming, LayerMixReport, MixRequest, MixResult,
)
from kernels.bench.records import Ceilings, Measurement  # noqa: E402
from kernels.bench.sweeps import ProgressEvent, ProgressFn  # noqa: E402
from kernels.bench.timing import environment, free_cuda_memory, is_oom, measure, measure_ceilings, rotations  # noqa: E402
from kernels.cache.mla import build_mla_cache, quantize_mla_fp8  # noqa: E402
from kernels.cache.paged import quantize_kv_fp8  # noqa: E402
from kernels.decode.api import mla_decode_attention, paged_decode_attention  # noqa: E402
from kernels.reference.mla import mla_decode_reference  # noqa: E402
from kernels.reference.paged import paged_attention_reference  # noqa: E402
from kernels.tolerances import tolerance  # noqa: E402

__all__ = ["MLA_PAGE", "time_layer_mix", "run_layer_mixes", "format_layer_mixes"]

MLA_PAGE = 64  # tokens per page: vLLM's block size for MLA backends
ERR_CHECK_ROWS = 2  # sequences checked against the reference: the first and the last
SINK_SCALE = 2.0  # sink logits ~ N(0, 2^2), the size gpt-oss learns
UNIT = "TB/s"  # of the bytes a layer's step reads


@dataclass(frozen=True, kw_only=True)
class _Call:
    run: Callable[[], object]  # the next rotation
    check: Callable[[], tuple[float, str]]  # rotation 0 against the reference


@dataclass(kw_only=True)
class _GqaPool:
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    tables: torch.Tensor
    lens: torch.Tensor
    sinks: torch.Tensor
    rows: list[int]
    scales: dict = field(default_factory=dict)
    i: int = 0

    @property
    def rotations(self) -> int:
        return self.q.shape[0]


def _gqa_pool(request: MixRequest, kind: KindTiming, device: torch.device, gen: torch.Generator) -> _GqaPool:
    b, d = request.batch, kind.head_dim
    n_rot = 1
    if device.type == "cuda":
        n_rot = rotations(2 * b * request.context * kind.kv_heads * d * 2, torch.cuda.mem_get_info()[0])
    dtype = DTYPES["bf16"] if device.type == "cuda" else torch.float16  # the interpreter's bf16 is wrong
    q, k, v, tables, lens = random_paged_tensors(b, request.context, kind.q_heads, kind.kv_heads, d,
                                                 request.block_size, dtype, n_rot, gen)
    sinks = torch.randn(kind.q_heads, device=device, generator=gen) * SINK_SCALE
    x = _GqaPool(q=q, k=k, v=v, tables=tables, lens=lens, sinks=sinks, rows=sorted({0, b - 1})[:ERR_CHECK_ROWS])
    if request.kv == "fp8":
        k8, v8, ks, vs = quantize_kv_fp8(k, v)
        x.k, x.v, x.scales = k8, v8, dict(k_scale=ks, v_scale=vs)
    return x


def _gqa_call(x: _GqaPool, kind: KindTiming) -> _Call:
    opts: dict = {}
    if kind.kind == "sliding":
        opts["sliding_window"] = kind.window
    elif kind.kind == "chunked":
        opts["chunk_size"] = kind.window
    if kind.sinks:
        opts["sinks"] = x.sinks
    backend = "triton" if opts else "auto"  # windows, chunks and sinks run on the Triton kernel only
    opts["sm_scale"] = kind.sm_scale
    r = x.rows
    ref = paged_attention_reference(x.q[0, r], x.k, x.v, x.tables[0, r], x.lens[r], **x.scales, **opts)

    def check() -> tuple[float, str]:
        out = paged_decode_attention(x.q[0], x.k, x.v, x.tables[0], x.lens, backend=backend, **x.scales, **opts)
        return float((out[r].float() - ref).abs().max()), f"vs fp32 reference, sequences {r}"

    def run() -> object:
        x.i = (x.i + 1) % x.rotations
        return paged_decode_attention(x.q[x.i], x.k, x.v, x.tables[x.i], x.lens, backend=backend, validate=False,
                                      **x.scales, **opts)

    return _Call(run=run, check=check)


def _mla_call(request: MixRequest, kind: KindTiming, device: torch.device, gen: torch.Generator) -> _Call:
    b, rank = request.batch, kind.latent_rank
    rope = kind.head_dim - rank
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float16
    cache = build_mla_cache([request.context] * b, block_size=MLA_PAGE, kv_lora_rank=rank, rope_dim=rope, dtype=dtype,
                            device=device, shuffle=True, generator=gen)
    if request.kv == "fp8":
        cache = quantize_mla_fp8(cache)
    n_rot = rotations(b * request.context * (rank + rope) * 2, torch.cuda.mem_get_info()[0]) \
        if device.type == "cuda" else 1
    q_lat = torch.randn(n_rot, b, kind.q_heads, rank, device=device, generator=gen).to(dtype)
    q_rope = torch.randn(n_rot, b, kind.q_heads, rope, device=device, generator=gen).to(dtype)
    sm_scale = kind.sm_scale
    rows = sorted({0, b - 1})
    checked = replace(cache, block_tables=cache.block_tables[rows], seq_lens=cache.seq_lens[rows])
    ref = mla_decode_reference(q_lat[0, rows], q_rope[0, rows], checked, sm_scale=sm_scale)
    state = {"i": 0}

    def check() -> tuple[float, str]:
        out = mla_decode_attention(q_lat[0], q_rope[0], cache, sm_scale=sm_scale)
        return float((out[rows].float() - ref).abs().max()), f"vs fp32 reference, sequences {rows}"

    def run() -> object:
        state["i"] = (state["i"] + 1) % n_rot
        return mla_decode_attention(q_lat[state["i"]], q_rope[state["i"]], cache, sm_scale=sm_scale, validate=False)

    return _Call(run=run, check=check)


def _failed(exc: Exception, work: float, doing: str) -> Measurement:
    return Measurement(contender="layer", status="oom" if is_oom(exc) else "error", unit=UNIT, work=work,
                       note=f"{doing}: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}")


def _time(call: _Call, kind: KindTiming, tol: float, device: torch.device, ceilings: Ceilings,
          warmup_ms: float, rep_ms: float, graph_calls: int) -> Measurement:
    if device.type == "cpu":
        try:
            err, note = call.check()
            begin = time.perf_counter()
            call.run()
            ms = (time.perf_counter() - begin) * 1e3
        except Exception as exc:  # noqa: BLE001 - a kernel that refuses the shape is this kind's record
            return _failed(exc, kind.bytes_read, "running it")
        return Measurement(contender="layer", status="ok", median_ms=ms, timing="eager", eager_ms=ms, unit=UNIT,
                           work=kind.bytes_read, rate=kind.bytes_read / (ms * 1e-3) / 1e12, max_abs_err=err,
                           note=f"{note}; held to {tol:g}")
    # The reference's gathered float32 K/V sit in the caching allocator until returned; a graph
    # captured on top of them replayed 12-14 % slower on the H200 (kernels.bench.families).
    free_cuda_memory()
    m = measure("layer", call.run, unit=UNIT, work=kind.bytes_read, check=call.check,
                measured_ceiling=ceilings.copy_tbps, datasheet_ceiling=ceilings.datasheet_tbps, warmup_ms=warmup_ms,
                rep_ms=rep_ms, graph_calls=graph_calls)
    return m


def time_layer_mix(request: MixRequest, model_name: str, kinds: tuple[KindTiming, ...], ceilings: Ceilings, *,
                   device: str = "cuda", warmup_ms: float = 5.0, rep_ms: float = 20.0, seed: int = 0) -> MixResult:
    """Time one layer of each attention kind of ``kinds`` (a kind with a ``reason`` is kept
    untimed); a kind whose kernel refuses the shape (a head dim or group no kernel takes) or runs
    out of memory carries the reason in its measurement and stays out of the sums."""
    dev = torch.device(device)
    gen = torch.Generator(device=dev).manual_seed(seed)
    out = []
    pool = None
    for kind in kinds:
        if kind.reason:
            out.append(kind)
            continue
        mla = kind.kind == "mla"
        tol = tolerance("mla_decode" if mla else "paged_decode", request.kv).atol
        try:
            if mla:
                call, graph_calls = _mla_call(request, kind, dev, gen), 1
            else:
                pool = pool or _gqa_pool(request, kind, dev, gen)
                call, graph_calls = _gqa_call(pool, kind), pool.rotations
        except Exception as exc:  # noqa: BLE001 - out of memory, or a shape the kernel refuses
            if dev.type == "cuda":
                free_cuda_memory()
            out.append(_with(kind, _failed(exc, kind.bytes_read, "building it")))
            continue
        m = _time(call, kind, tol, dev, ceilings, warmup_ms, rep_ms, graph_calls)
        if m.status == "ok" and m.max_abs_err is not None and m.max_abs_err > tol:
            m = Measurement(contender="layer", status="error", unit=UNIT, work=kind.bytes_read, max_abs_err=m.max_abs_err,
                            note=f"max abs error {m.max_abs_err:.3g} over the {tol:g} tolerance")
        out.append(_with(kind, m))
    pool = None
    if dev.type == "cuda":
        free_cuda_memory()
    return MixResult(request=request, model_name=model_name, kinds=tuple(out))


def _with(kind: KindTiming, m: Measurement) -> KindTiming:
    return replace(kind, measurement=m, reason="" if m.status == "ok" else m.note)


def run_layer_mixes(jobs: tuple[tuple[MixRequest, str, tuple[KindTiming, ...]], ...], *, device: str = "cuda",
                    progress: ProgressFn | None = None, rep_ms: float = 20.0,
                    command: str = "kernels.bench.layer_mix.run_layer_mixes()") -> LayerMixReport:
    """The copy ceiling, then every ``(request, model name, kinds)`` in order; ``progress`` is
    called before each and may raise to cancel."""
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("timing a layer mix needs a CUDA GPU (or device='cpu' for the interpreter)")
    begin = time.perf_counter()
    ceilings = measure_ceilings()  # all None on the CPU
    results = []
    for i, (r, name, kinds) in enumerate(jobs):
        if progress is not None:
            progress(ProgressEvent(done=i, total=len(jobs), message=f"{r.model} B={r.batch} L={r.context} {r.kv}"))
        results.append(time_layer_mix(r, name, kinds, ceilings, device=device, rep_ms=rep_ms, seed=i))
    if progress is not None:
        progress(ProgressEvent(done=len(jobs), total=len(jobs), message="done"))
    return LayerMixReport(schema=SCHEMA, schema_version=SCHEMA_VERSION, provenance=environment(command),
                          ceilings=ceilings, results=tuple(results), wall_s=time.perf_counter() - begin)


def format_layer_mixes(report: LayerMixReport) -> str:
    """The run as text: per model and request, each kind's µs per layer, layers, µs in all, share."""
    p = report.provenance
    lines = [f"layer mixes on {p.device} (torch {p.torch}, triton {p.triton}), {p.date[:10]}: {p.command}"]
    for r in report.results:
        q = r.request
        total = r.attention_ms
        lines.append(f"{q.model} B={q.batch} L={q.context:,} KV {q.kv} TP {q.tp}: attention "
                     + (f"{total * 1e3:,.1f} us a step" if total is not None else "not timed"))
        for k in r.kinds:
            if k.layer_ms is None:
                lines.append(f"  {k.label:34s} {k.layers:3d} layers  not timed: {k.reason}")
                continue
            lines.append(f"  {k.label:34s} {k.layers:3d} layers  {k.layer_ms * 1e3:9.2f} us/layer "
                         f"{k.total_ms * 1e3:10.1f} us  {r.share(k) * 100:5.1f} %  "
                         f"{k.bytes_read / 1e6:9.2f} MB read a layer")
    return "\n".join(lines)

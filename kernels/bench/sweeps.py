"""Benchmark sweeps: which shapes run, one shape's contenders, the memory series, the whole run.

The app's live page calls the same functions (``bench_decode_shape``, ``bench_prefill_shape``,
``bench_memory_point``, ``measure_ceilings``) with a progress callback and renders the frozen
records they return; ``python -m kernels.bench`` runs :func:`run_sweep`.

Every contender gets the same shape in the same run; its output is checked against the
float32 reference on a subset of the batch (max abs error recorded). Nothing runs at import.
The progress callback may raise to cancel a sweep; memory is freed as the exception unwinds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from kernels.runtime import ensure_triton_backend

ensure_triton_backend()  # before the kernel modules: the interpreter is chosen at decoration

import torch  # noqa: E402

from kernels.bench.contenders import (  # noqa: E402
    DECODE, DTYPES, PREFILL, SDPA_BACKENDS, DecodeContender, DecodeInputs, PrefillInputs, random_paged_tensors,
    variant_contender,
)
from kernels.bench.variants import DECODE_VARIANTS  # noqa: E402
from kernels.bench import peers  # noqa: E402
from kernels.bench.mixed import bench_mixed_shape, mixed_batches  # noqa: E402
from kernels.bench.records import (  # noqa: E402
    FP8_PAGED_PEERS, PAGED_PEERS, SCHEMA, SCHEMA_VERSION, BenchReport, Ceilings, DecodeResult, DecodeShape, Measurement, MemoryPoint,
    MixedResult, PrefillResult, PrefillShape, compute_targets, eager_target_shape,
)
from kernels.bench.timing import (  # noqa: E402
    Rotation, eager_ms, environment, free_cuda_memory, is_oom, measure, measure_ceilings, rotations,
)
from kernels.prefill.flash import flash_attention_forward  # noqa: E402
from kernels.decode.api import decode_plan  # noqa: E402
from kernels.reference.dense import naive_attention, naive_attention_native  # noqa: E402
from kernels.theory import decode_kv_bytes, prefill_flops  # noqa: E402
from units import cdiv  # noqa: E402

__all__ = ["SweepConfig", "ProgressEvent", "ProgressFn", "decode_shapes", "prefill_shapes", "bench_decode_shape",
           "bench_prefill_shape", "bench_memory_point", "naive_memory_skipped", "run_sweep", "measure_ceilings",
           "environment"]

ERR_CHECK_SEQS = 2  # sequences (first and last of the batch) checked against the fp32 reference


@dataclass(frozen=True, kw_only=True)
class SweepConfig:
    """Which shapes and contenders a sweep runs (defaults: the full benchmark sweep)."""

    decode_batches: tuple[int, ...] = (1, 8, 32, 128)
    decode_contexts: tuple[int, ...] = (1024, 4096, 16384, 32768)
    b1_long_contexts: tuple[int, ...] = (131072,)  # extra contexts for batch 1 only
    decode_heads: tuple[tuple[int, int], ...] = ((32, 8), (64, 8))  # Llama-3-8B, Llama-3-70B
    head_dim: int = 128
    block_size: int = 16
    dtype: str = "bf16"
    decode_fp8: bool = True
    decode_int4: bool = True
    # Page-size study: the bf16 kernel alone at each block size, on these (batch, context) shapes.
    page_sizes: tuple[int, ...] = (1, 8, 16, 32, 64, 128, 256)
    page_shapes: tuple[tuple[int, int], ...] = ((8, 32768), (128, 4096))
    run_page_sizes: bool = True
    prefill_ns: tuple[int, ...] = (1024, 4096, 8192, 16384)
    prefill_heads: tuple[int, int] = (32, 32)  # query, KV heads
    prefill_tokens: int = 16384  # batch = max(1, prefill_tokens // N): same work per N
    prefill_causal: tuple[bool, ...] = (True, False)
    # Head dim 256 (Gemma-2/3's global layers): these N at the same work per N, both masks.
    prefill_d256_ns: tuple[int, ...] = (4096,)
    memory_ns: tuple[int, ...] = (1024, 2048, 4096, 8192, 16384, 32768)
    memory_heads: int = 32
    naive: bool = True
    run_decode: bool = True
    run_prefill: bool = True
    run_memory: bool = True
    run_mixed: bool = True  # mixed chunked-prefill batches (kernels.bench.mixed.mixed_batches)
    mixed_heads: tuple[int, int] = (32, 8)  # query, KV heads of the mixed batches
    mixed_quick: bool = False  # only the two smaller mixed batches
    warmup_ms: float = 10.0
    rep_ms: float = 40.0
    cuda_graphs: bool = True  # decode: time CUDA-graph replays (eager figure kept alongside)
    peers: bool = True  # decode: the CUDA libraries' paged kernels (kernels.bench.peers), where they import
    variants: tuple[str, ...] = ()  # decode: tuning variants timed after the table (kernels.bench.variants)

    @classmethod
    def quick(cls) -> "SweepConfig":
        """A short sweep for the app: a few decode shapes, two prefill sizes, no 32K memory point."""
        return cls(decode_batches=(1, 32), decode_contexts=(4096, 32768), b1_long_contexts=(),
                   decode_heads=((32, 8),), prefill_ns=(1024, 4096), prefill_d256_ns=(), memory_ns=(1024, 4096, 8192),
                   mixed_quick=True, page_sizes=(16, 256), page_shapes=((8, 32768),), rep_ms=25.0)


@dataclass(frozen=True, kw_only=True)
class ProgressEvent:
    done: int  # steps finished
    total: int
    message: str  # what runs next (or "done")


ProgressFn = Callable[[ProgressEvent], None]


def decode_shapes(config: SweepConfig) -> tuple[DecodeShape, ...]:
    shapes = []
    for hq, hkv in config.decode_heads:
        for batch in config.decode_batches:
            contexts = config.decode_contexts + (config.b1_long_contexts if batch == 1 else ())
            for ctx in contexts:
                shapes.append(DecodeShape(batch=batch, context=ctx, n_q_heads=hq, n_kv_heads=hkv,
                                          head_dim=config.head_dim, block_size=config.block_size,
                                          dtype=config.dtype))
    return tuple(shapes)


def page_size_shapes(config: SweepConfig) -> tuple[DecodeShape, ...]:
    """The page-size study's decode shapes: each (batch, context) at each block size."""
    hq, hkv = config.decode_heads[0]
    return tuple(DecodeShape(batch=b, context=L, n_q_heads=hq, n_kv_heads=hkv, head_dim=config.head_dim,
                             block_size=bs, dtype=config.dtype)
                 for b, L in config.page_shapes for bs in config.page_sizes)


def prefill_shapes(config: SweepConfig) -> tuple[PrefillShape, ...]:
    """Every N of ``prefill_ns`` at the run's head dim, then ``prefill_d256_ns`` at head dim 256
    (none twice when the run's head dim is 256), each causal and not."""
    hq, hkv = config.prefill_heads
    sizes = [(n, config.head_dim) for n in config.prefill_ns]
    if config.head_dim != 256:
        sizes += [(n, 256) for n in config.prefill_d256_ns]
    return tuple(
        PrefillShape(batch=max(1, config.prefill_tokens // n), seq_len=n, n_q_heads=hq, n_kv_heads=hkv,
                     head_dim=d, causal=causal, dtype=config.dtype)
        for causal in config.prefill_causal for n, d in sizes
    )


# ----------------------------------------------------------------------------------------------
# Decode
# ----------------------------------------------------------------------------------------------


def _decode_inputs(shape: DecodeShape, n_rot: int, seed: int) -> DecodeInputs:
    """Random KV in one pool, ``n_rot`` sets of queries and tables, and the fp32 reference."""
    gen = torch.Generator(device=torch.device("cuda")).manual_seed(seed)
    q, k, v, tables, lens = random_paged_tensors(shape.batch, shape.context, shape.n_q_heads, shape.n_kv_heads,
                                                 shape.head_dim, shape.block_size, DTYPES[shape.dtype], n_rot, gen)
    x = DecodeInputs(shape=shape, q=q, k=k, v=v, tables=tables, lens=lens, rot=Rotation(n_rot),
                     check_rows=sorted({0, shape.batch - 1})[:ERR_CHECK_SEQS])
    x.ref = x.reference(k, v)
    return x


def _decode_rotations(shape: DecodeShape) -> tuple[int, int]:
    """``(bf16 KV bytes, input copies to rotate over)`` of a decode shape, from the free memory now."""
    kv_bytes = decode_kv_bytes(shape.batch, shape.context, shape.n_kv_heads, shape.head_dim, 2)
    return kv_bytes, rotations(kv_bytes, torch.cuda.mem_get_info()[0])


def _bench_decode_contender(c: DecodeContender, x: DecodeInputs, m_args: dict) -> Measurement:
    """Prepare (if needed), build and time one contender; a failed preparation is its record."""
    work = c.work(x.shape)
    if c.needs and not peers.available(c.needs):
        return Measurement(contender=c.name, status="not_available", unit="TB/s", work=work,
                           note=f"needs {c.needs} (scripts/peer_wheels.sh fetches it for the GPU machine)")
    prepared = None
    if c.prepare is not None:
        try:
            prepared = c.prepare(x)
        except Exception as exc:  # noqa: BLE001 - usually out of memory: this contender's record
            free_cuda_memory()
            return Measurement(contender=c.name, status="oom" if is_oom(exc) else "error", unit="TB/s", work=work,
                               note=f"building {c.prepares}: {type(exc).__name__}: {str(exc)[:200]}")
    timed = c.build(x, prepared)
    args = m_args if c.graph else dict(m_args, graph_calls=0)
    return measure(c.name, timed.run, work=work, check=timed.check, **args)


def bench_decode_shape(shape: DecodeShape, ceilings: Ceilings, *, config: SweepConfig = SweepConfig(),
                       contenders: Sequence[str] | None = None, seed: int = 0) -> DecodeResult:
    """Time every decode contender on one shape (same KV values for all of them)."""
    wanted = set(contenders) if contenders is not None else {
        "triton_paged", "gather_sdpa", *SDPA_BACKENDS, *(("triton_paged_fp8",) if config.decode_fp8 else ()),
        *(("triton_paged_int4",) if config.decode_int4 else ()),
        *(("naive",) if config.naive else ()), *(PAGED_PEERS if config.peers else ()),
        *(FP8_PAGED_PEERS if config.peers and config.decode_fp8 else ())}
    kv_bytes, n_rot = _decode_rotations(shape)
    m_args = dict(measured_ceiling=ceilings.copy_tbps, datasheet_ceiling=ceilings.datasheet_tbps,
                  warmup_ms=config.warmup_ms, rep_ms=config.rep_ms, unit="TB/s",
                  graph_calls=n_rot if config.cuda_graphs else 0)
    results: list[Measurement] = []
    x = None
    splits = 0
    try:
        x = _decode_inputs(shape, n_rot, seed)
        # The bf16 kernel's split count, as the timed calls plan it (graph replays plan apart).
        splits = decode_plan(x.q[0], x.k, x.v, x.tables[0], x.lens, in_graph=config.cuda_graphs).num_splits
        for name, contender in DECODE.items():  # the table's order is the report's
            if name in wanted:
                results.append(_bench_decode_contender(contender, x, m_args))
        for name in config.variants:
            results.append(_bench_decode_contender(variant_contender(DECODE_VARIANTS[name]), x, m_args))
    finally:
        if x is not None:
            x.state.clear()
        x = None
        free_cuda_memory()
    return DecodeResult(shape=shape, num_splits=splits, kv_bytes=kv_bytes, measurements=tuple(results))


def recheck_eager(result: DecodeResult, config: SweepConfig, seed: int = 0) -> DecodeResult:
    """``result`` with the bf16 kernel's eager figure timed once more, now, and the least of the
    passes kept (``eager_passes`` counts them; the note gives each pass's figure). What an eager
    call costs above its GPU work is the host's, and a burst of host load only ever adds to it
    (:mod:`kernels.bench.timing`). A pass that fails leaves the figure as it was and says why in
    the note."""
    m = result.get("triton_paged")
    if m is None or m.status != "ok" or m.eager_ms is None:
        return result
    shape, x = result.shape, None
    try:
        x = _decode_inputs(shape, _decode_rotations(shape)[1], seed)
        again = eager_ms(DECODE["triton_paged"].build(x, None).run, config.warmup_ms, config.rep_ms)
        new = replace(m, eager_ms=min(m.eager_ms, again), eager_passes=m.eager_passes + 1,
                      note=f"{m.note}; eager passes {m.eager_ms:.4f} and {again:.4f} ms".lstrip("; "))
    except Exception as exc:  # noqa: BLE001 - the first pass stands
        new = replace(m, note=f"{m.note}; second eager pass failed ({type(exc).__name__})".lstrip("; "))
    finally:
        x = None
        free_cuda_memory()
    return replace(result, measurements=tuple(new if mm is m else mm for mm in result.measurements))


# ----------------------------------------------------------------------------------------------
# Prefill and memory
# ----------------------------------------------------------------------------------------------


def bench_prefill_shape(shape: PrefillShape, ceilings: Ceilings, *, config: SweepConfig = SweepConfig(),
                        contenders: Sequence[str] | None = None, seed: int = 0) -> PrefillResult:
    """Time the tiled forward kernel, the SDPA backends and naive attention on one prefill shape."""
    wanted = list(contenders) if contenders is not None else [
        "triton_flash", "triton_flash_tl", *SDPA_BACKENDS, *(("naive",) if config.naive else ())]
    dev = torch.device("cuda")
    dtype = DTYPES[shape.dtype]
    b, n, hq, hkv, d = shape.batch, shape.seq_len, shape.n_q_heads, shape.n_kv_heads, shape.head_dim
    flops = prefill_flops(b, n, hq, d, shape.causal)
    m_args = dict(measured_ceiling=ceilings.matmul_tflops, datasheet_ceiling=ceilings.datasheet_tflops,
                  warmup_ms=config.warmup_ms, rep_ms=config.rep_ms, unit="TFLOP/s")
    gen = torch.Generator(device=dev).manual_seed(seed)
    results: list[Measurement] = []
    try:
        x = PrefillInputs(shape=shape, q=torch.randn(b, hq, n, d, device=dev, dtype=dtype, generator=gen),
                          k=torch.randn(b, hkv, n, d, device=dev, dtype=dtype, generator=gen),
                          v=torch.randn(b, hkv, n, d, device=dev, dtype=dtype, generator=gen))
        # fp32 reference on the first batch entry and up to 2 query heads (N x N fp32 per head)
        heads = min(2, hq)
        kv_heads = cdiv(heads, hq // hkv)
        ref = naive_attention(x.q[:1, :heads], x.k[:1, :kv_heads], x.v[:1, :kv_heads], causal=shape.causal)

        def err_of(out: torch.Tensor) -> tuple[float, str]:
            return float((out[:1, :heads].float() - ref).abs().max()), f"vs fp32 naive, batch 0 heads 0..{heads - 1}"

        for c in wanted:
            run = (lambda c=c: PREFILL[c].run(x))
            results.append(measure(c, run, work=flops, check=lambda run=run: err_of(run()), **m_args))
    finally:
        x = None
        free_cuda_memory()
    return PrefillResult(shape=shape, flops=flops, measurements=tuple(results))


def bench_memory_point(seq_len: int, contender: str, *, n_heads: int = 32, head_dim: int = 128,
                       batch: int = 1, dtype: str = "bf16", warmup_ms: float = 5.0,
                       rep_ms: float = 30.0) -> MemoryPoint:
    """Peak device memory above the inputs, and time, of naive or tiled attention at one N."""
    fn = naive_attention_native if contender == "naive" else flash_attention_forward
    common = dict(seq_len=seq_len, batch=batch, n_heads=n_heads, head_dim=head_dim, contender=contender)
    dev, dt = torch.device("cuda"), DTYPES[dtype]
    try:
        q = torch.randn(batch, n_heads, seq_len, head_dim, device=dev, dtype=dt)
        k, v = torch.randn_like(q), torch.randn_like(q)
        m = measure(contender, lambda: fn(q, k, v, causal=False), unit="", work=0.0, measured_ceiling=None,
                    datasheet_ceiling=1.0, warmup_ms=warmup_ms, rep_ms=rep_ms)
    except Exception as exc:  # noqa: BLE001 - allocating the inputs themselves failed
        m = Measurement(contender=contender, status="oom" if is_oom(exc) else "error", note=str(exc)[:200])
    finally:
        q = k = v = None
        free_cuda_memory()
    return MemoryPoint(status=m.status, peak_bytes=m.peak_bytes, median_ms=m.median_ms, note=m.note, **common)


def naive_memory_skipped(seq_len: int, *, n_heads: int, head_dim: int) -> MemoryPoint:
    """The record of a naive memory point not run because naive ran out at a smaller N."""
    return MemoryPoint(seq_len=seq_len, batch=1, n_heads=n_heads, head_dim=head_dim, contender="naive",
                       status="skipped", note="out of memory at a smaller N")


# ----------------------------------------------------------------------------------------------
# Sweep
# ----------------------------------------------------------------------------------------------


class _Steps:
    """Counts the steps of a run and reports each to the progress callback before it starts."""

    def __init__(self, total: int, progress: ProgressFn | None) -> None:
        self.total, self.done, self.progress = total, 0, progress

    def tick(self, message: str) -> None:
        if self.progress is not None:
            self.progress(ProgressEvent(done=self.done, total=self.total, message=message))
        self.done += 1

    def finish(self) -> None:
        if self.progress is not None:
            self.progress(ProgressEvent(done=self.total, total=self.total, message="done"))


def _memory_series(points: list[tuple[int, str]], config: SweepConfig, steps: _Steps) -> tuple[MemoryPoint, ...]:
    memory: list[MemoryPoint] = []
    naive_oom = False
    for n, c in points:
        steps.tick(f"memory N={n} {c}")
        if c == "naive" and naive_oom:  # it ran out at a smaller N already
            memory.append(naive_memory_skipped(n, n_heads=config.memory_heads, head_dim=config.head_dim))
            continue
        point = bench_memory_point(n, c, n_heads=config.memory_heads, head_dim=config.head_dim, dtype=config.dtype)
        naive_oom |= c == "naive" and point.status == "oom"
        memory.append(point)
    return tuple(memory)


def run_sweep(config: SweepConfig = SweepConfig(), *, progress: ProgressFn | None = None,
              command: str = "kernels.bench.run_sweep()") -> BenchReport:
    """Ceilings, then every decode shape, prefill shape, mixed batch and memory point of ``config``.

    ``progress`` is called before each step with a ``ProgressEvent``; it may raise to cancel.
    """
    if not torch.cuda.is_available():
        raise RuntimeError("the benchmark needs a CUDA GPU (kernels run under the interpreter otherwise)")
    dshapes = decode_shapes(config) if config.run_decode else ()
    pshapes = prefill_shapes(config) if config.run_prefill else ()
    mpoints = [(n, c) for n in config.memory_ns for c in ("naive", "triton_flash")] if config.run_memory else []
    xshapes = mixed_batches(n_q_heads=config.mixed_heads[0], n_kv_heads=config.mixed_heads[1],
                            head_dim=config.head_dim, block_size=config.block_size, dtype=config.dtype,
                            quick=config.mixed_quick) if config.run_mixed else ()
    page_points = page_size_shapes(config) if config.run_page_sizes else ()
    # The eager target's shapes get a second eager pass at the end (recheck_eager).
    recheck = [i for i, s in enumerate(dshapes) if config.cuda_graphs and eager_target_shape(s)]
    steps = _Steps(1 + len(dshapes) + len(pshapes) + len(xshapes) + len(mpoints) + len(page_points) + len(recheck),
                   progress)
    steps.tick("ceilings: copy bandwidth and bf16 matmul")
    ceilings = measure_ceilings()
    decode: list[DecodeResult] = []
    for s in dshapes:
        steps.tick(f"decode {s.label}")
        decode.append(bench_decode_shape(s, ceilings, config=config))
    prefill: list[PrefillResult] = []
    for s in pshapes:
        steps.tick(f"prefill {s.label}")
        prefill.append(bench_prefill_shape(s, ceilings, config=config))
    mixed: list[MixedResult] = []
    for s in xshapes:
        steps.tick(f"mixed {s.label}")
        mixed.append(bench_mixed_shape(s, ceilings, warmup_ms=config.warmup_ms, rep_ms=config.rep_ms,
                                       cuda_graphs=config.cuda_graphs))
    memory = _memory_series(mpoints, config, steps)
    page_sizes: list[DecodeResult] = []
    for s in page_points:
        steps.tick(f"page size {s.block_size}: decode {s.label}")
        page_sizes.append(bench_decode_shape(s, ceilings, config=config, contenders=("triton_paged",)))
    for i in recheck:
        steps.tick(f"eager again: decode {dshapes[i].label}")
        decode[i] = recheck_eager(decode[i], config)
    steps.finish()
    decode_t, prefill_t, mixed_t = tuple(decode), tuple(prefill), tuple(mixed)
    return BenchReport(schema=SCHEMA, schema_version=SCHEMA_VERSION, provenance=environment(command),
                       ceilings=ceilings, decode=decode_t, prefill=prefill_t, memory=memory, mixed=mixed_t,
                       page_sizes=tuple(page_sizes),
                       targets=compute_targets(decode_t, prefill_t, mixed_t))

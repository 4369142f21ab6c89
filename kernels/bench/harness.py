"""Benchmark harness: the Triton kernels against PyTorch's best on the same GPU, in one run.

``python -m kernels.bench`` prints a readable table; ``--json PATH`` also writes the records
(``kernels.bench.records``), with provenance and the issue's targets. The app's live page calls
the same library functions (``run_sweep``, ``bench_decode_shape``, ``bench_prefill_shape``,
``bench_memory_point``) with a progress callback and renders the frozen records they return.

What is measured, in one process:

* Ceilings: a streaming device-to-device copy (bytes read + written) and a bf16 8192^3 matmul.
* Decode (one query token per sequence, paged KV, block 16 by default, bf16, d = 128): this
  package's kernel on bf16 and on an FP8 (e4m3, per-head scales) copy of the cache; gather the
  pages then SDPA; SDPA with each backend (FLASH, CUDNN, EFFICIENT via ``sdpa_kernel``) on the
  same KV stored contiguously; naive attention. Rate: TB/s of KV read (``decode_kv_bytes`` at the
  contender's bytes per value; gather-then-SDPA is credited with the bf16 KV bytes only).
* Prefill (``kernels.flash_forward``, imported lazily: "not_available" until it exists) against
  the SDPA backends and naive attention, causal and not. Rate: TFLOP/s (``prefill_flops``).
* Peak memory of naive attention against the tiled kernel as N grows, until naive runs out.

Method: ``triton.testing.do_bench(..., return_mode="median")`` (it also flushes the L2 before
every call). Decode contenders (all but naive) are timed on replays of a CUDA graph of the
call, as serving engines run decode, because a batch-1 call lasts ~50 us and the Python and
launch overhead of an eager call (~100-150 us measured for the Triton wrapper on the H200 host)
would otherwise be what is timed; the eager figure is kept in ``eager_ms``. Inputs of small shapes are rotated over several copies so that one timed call's
working set is >= 1 GB where memory allows (the H200's L2 is ~50 MB); every contender gets the
same shape in the same run; the kernel's output is checked against the float32 reference on a
subset of the batch (max abs error recorded). A CUDA out-of-memory error is caught per
contender and shape, reported as status "oom", and the sweep goes on.

Nothing runs at import. The progress callback may raise to cancel a sweep; memory is freed as
the exception unwinds.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import gc
import math
import os
import platform
import shlex
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

from kernels.runtime import ensure_triton_backend

ensure_triton_backend()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from kernels.bench.records import (  # noqa: E402
    SCHEMA, SCHEMA_VERSION, BenchReport, Ceilings, DecodeResult, DecodeShape, Measurement,
    MemoryPoint, PrefillResult, PrefillShape, Provenance, compute_targets, copy_tbps,
    decode_kv_bytes, format_report, prefill_flops, tflops, write_bench_json,
)

__all__ = [
    "SweepConfig", "ProgressEvent", "environment", "measure_ceilings", "decode_shapes",
    "prefill_shapes", "bench_decode_shape", "bench_prefill_shape", "bench_memory_point",
    "run_sweep", "fp8_per_head_pool", "main",
]

GB = 10**9
ROTATE_TARGET_BYTES = 1 * GB  # one timed call's inputs span >= this (L2 is ~50 MB)
MAX_ROTATIONS = 64  # cap on copies for tiny shapes (launch overhead dominates there anyway)
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
SDPA_BACKENDS = {"sdpa_flash": "FLASH_ATTENTION", "sdpa_cudnn": "CUDNN_ATTENTION",
                 "sdpa_efficient": "EFFICIENT_ATTENTION"}
ERR_CHECK_SEQS = 2  # sequences (first and last of the batch) checked against the fp32 reference


@dataclass(frozen=True, kw_only=True)
class SweepConfig:
    """Which shapes and contenders a sweep runs (defaults: the issue's full sweep)."""

    decode_batches: tuple[int, ...] = (1, 8, 32, 128)
    decode_contexts: tuple[int, ...] = (1024, 4096, 16384, 32768)
    b1_long_contexts: tuple[int, ...] = (131072,)  # extra contexts for batch 1 only
    decode_heads: tuple[tuple[int, int], ...] = ((32, 8), (64, 8))  # Llama-3-8B, Llama-3-70B
    head_dim: int = 128
    block_size: int = 16
    dtype: str = "bf16"
    decode_fp8: bool = True
    prefill_ns: tuple[int, ...] = (1024, 4096, 8192, 16384)
    prefill_heads: tuple[int, int] = (32, 32)  # query, KV heads
    prefill_tokens: int = 16384  # batch = max(1, prefill_tokens // N): same work per N
    prefill_causal: tuple[bool, ...] = (True, False)
    memory_ns: tuple[int, ...] = (1024, 2048, 4096, 8192, 16384, 32768)
    memory_heads: int = 32
    naive: bool = True
    run_decode: bool = True
    run_prefill: bool = True
    run_memory: bool = True
    warmup_ms: float = 10.0
    rep_ms: float = 40.0
    cuda_graphs: bool = True  # decode: time CUDA-graph replays (eager figure kept alongside)

    @classmethod
    def quick(cls) -> "SweepConfig":
        """A short sweep for the app: a few decode shapes, two prefill sizes, no 32K memory point."""
        return cls(decode_batches=(1, 32), decode_contexts=(4096, 32768), b1_long_contexts=(),
                   decode_heads=((32, 8),), prefill_ns=(1024, 4096), memory_ns=(1024, 4096, 8192),
                   rep_ms=25.0)


@dataclass(frozen=True, kw_only=True)
class ProgressEvent:
    done: int  # steps finished
    total: int
    message: str  # what runs next (or "done")


ProgressFn = Callable[[ProgressEvent], None]


# ----------------------------------------------------------------------------------------------
# Environment and ceilings
# ----------------------------------------------------------------------------------------------


def _driver_version() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True)
        return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return ""


def _code_commit() -> str:
    """The git commit of the code being measured.

    The GPU machine gets a copy of the working tree without ``.git``, so the launcher passes the
    commit in ``KVX_GIT_COMMIT``; a checkout answers ``git rev-parse`` itself.
    """
    if os.environ.get("KVX_GIT_COMMIT"):
        return os.environ["KVX_GIT_COMMIT"]
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10,
                             check=True, cwd=Path(__file__).resolve().parent)
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def environment(command: str) -> Provenance:
    """Device, driver and library versions, the date and the command, for the report."""
    import triton

    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        device, sms = props.name, props.multi_processor_count
    else:
        device, sms = "cpu (Triton interpreter)", 0
    return Provenance(
        device=device, sm_count=sms, driver=_driver_version(), cuda=torch.version.cuda or "",
        torch=torch.__version__, triton=triton.__version__, python=platform.python_version(),
        date=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), command=command,
        commit=_code_commit(),
    )


def _do_bench(fn: Callable[[], object], warmup_ms: float, rep_ms: float) -> float:
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))


def measure_ceilings(*, copy_bytes: int = 2 * 2**30, matmul_n: int = 8192,
                     warmup_ms: float = 10.0, rep_ms: float = 100.0) -> Ceilings:
    """Measured copy bandwidth (read + write) and bf16 matmul rate on random data."""
    if not torch.cuda.is_available():
        return Ceilings(copy_tbps=None, copy_buffer_bytes=copy_bytes, matmul_tflops=None, matmul_n=matmul_n)
    src = torch.empty(copy_bytes, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    copy_ms = _do_bench(lambda: dst.copy_(src), warmup_ms, rep_ms)
    del src, dst
    a = torch.randn(matmul_n, matmul_n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(matmul_n, matmul_n, device="cuda", dtype=torch.bfloat16)
    mm_ms = _do_bench(lambda: a @ b, warmup_ms, rep_ms)
    del a, b
    torch.cuda.empty_cache()
    return Ceilings(copy_tbps=copy_tbps(copy_bytes, copy_ms), copy_buffer_bytes=copy_bytes,
                    matmul_tflops=tflops(2 * matmul_n**3, mm_ms), matmul_n=matmul_n)


# ----------------------------------------------------------------------------------------------
# Shapes
# ----------------------------------------------------------------------------------------------


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


def prefill_shapes(config: SweepConfig) -> tuple[PrefillShape, ...]:
    hq, hkv = config.prefill_heads
    return tuple(
        PrefillShape(batch=max(1, config.prefill_tokens // n), seq_len=n, n_q_heads=hq, n_kv_heads=hkv,
                     head_dim=config.head_dim, causal=causal, dtype=config.dtype)
        for causal in config.prefill_causal for n in config.prefill_ns
    )


# ----------------------------------------------------------------------------------------------
# One contender: time it, catch OOM and refusals, fill the record
# ----------------------------------------------------------------------------------------------


def _is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc).lower()


def _graph_ms(fn: Callable[[], object], calls: int, warmup_ms: float, rep_ms: float) -> float:
    """Median time of one call, from replays of a CUDA graph holding ``calls`` consecutive calls.

    Decode calls on small shapes last ~10-50 us, less than their Python and launch overhead; a
    serving engine runs decode inside CUDA graphs for that reason, so the graph replay is the
    figure that measures the GPU work. ``calls`` > 1 captures a whole rotation of input sets.
    """
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capture stream (library handles, workspaces)
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    try:
        return _do_bench(graph.replay, warmup_ms, rep_ms) / calls
    finally:
        del graph


def _measure(contender: str, fn: Callable[[], object], *, unit: str, work: float,
             measured_ceiling: float | None, datasheet_ceiling: float,
             warmup_ms: float, rep_ms: float, check: Callable[[], tuple[float, str]] | None = None,
             graph_calls: int = 0) -> Measurement:
    """Run ``fn`` once (peak memory, error check), then time it; never raises for OOM/refusals.

    With ``graph_calls`` > 0 the reported time is the CUDA-graph figure (``_graph_ms``) and the
    eager one is kept in ``eager_ms``; if capture fails the eager figure is reported.
    """
    try:
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fn()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
        err, note = check() if check is not None else (None, "")
        eager = _do_bench(fn, warmup_ms, rep_ms)
    except Exception as exc:  # noqa: BLE001 - each failure becomes this shape's record
        status = "oom" if _is_oom(exc) else (
            "unsupported" if isinstance(exc, RuntimeError) and "No available kernel" in str(exc) else "error")
        msg = " ".join(str(exc).split())[:300]
        gc.collect()
        torch.cuda.empty_cache()
        return Measurement(contender=contender, status=status, unit=unit, work=work,
                           note=f"{type(exc).__name__}: {msg}")
    ms, timing = eager, "eager"
    if graph_calls:
        try:
            ms, timing = _graph_ms(fn, graph_calls, warmup_ms, rep_ms), "cuda_graph"
        except Exception as exc:  # noqa: BLE001 - fall back to the eager figure, say why
            torch.cuda.synchronize()
            gc.collect()
            torch.cuda.empty_cache()
            note = f"{note}; graph capture failed ({type(exc).__name__}), eager time".lstrip("; ")
    rate = work / (ms * 1e-3) / 1e12
    return Measurement(
        contender=contender, status="ok", median_ms=ms, timing=timing, eager_ms=eager, unit=unit,
        work=work, rate=rate, share_of_measured=rate / measured_ceiling if measured_ceiling else None,
        share_of_datasheet=rate / datasheet_ceiling, max_abs_err=err, peak_bytes=int(peak), note=note,
    )


class _Rotation:
    """Cycle through n input sets, one per call, so consecutive calls touch different memory."""

    def __init__(self, n: int) -> None:
        self.n, self.i = n, 0

    def next(self) -> int:
        self.i = (self.i + 1) % self.n
        return self.i


def _rotations(bytes_per_set: int, free_bytes: int) -> int:
    want = max(1, math.ceil(ROTATE_TARGET_BYTES / max(bytes_per_set, 1)))
    fit = max(1, int(free_bytes * 0.25 // max(bytes_per_set, 1)))  # leave room for the baselines
    return int(min(want, fit, MAX_ROTATIONS))


def _sdpa_ctx(backend_name: str):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([getattr(SDPBackend, backend_name)])


def _naive():
    try:
        from kernels.reference import naive_attention_native
        return naive_attention_native
    except ImportError:
        return None


# ----------------------------------------------------------------------------------------------
# Decode
# ----------------------------------------------------------------------------------------------


def bench_decode_shape(shape: DecodeShape, ceilings: Ceilings, *, config: SweepConfig = SweepConfig(),
                       contenders: Sequence[str] | None = None, seed: int = 0) -> DecodeResult:
    """Time every decode contender on one shape (same KV values for all of them)."""
    from kernels.paged_decode import default_config, default_num_splits, paged_decode_attention
    from kernels.paged_reference import gather_kv_padded, paged_attention_reference

    wanted = set(contenders) if contenders is not None else {
        "triton_paged", "gather_sdpa", *SDPA_BACKENDS, *(("triton_paged_fp8",) if config.decode_fp8 else ()),
        *(("naive",) if config.naive else ())}
    dev = torch.device("cuda")
    dtype = DTYPES[shape.dtype]
    b, L, hq, hkv, d, bs = (shape.batch, shape.context, shape.n_q_heads, shape.n_kv_heads,
                            shape.head_dim, shape.block_size)
    kv_bytes = decode_kv_bytes(b, L, hkv, d, 2)
    blocks_per_seq = -(-L // bs)
    free, _ = torch.cuda.mem_get_info()
    n_rot = _rotations(kv_bytes, free)
    gen = torch.Generator(device=dev).manual_seed(seed)
    m_args = dict(measured_ceiling=ceilings.copy_tbps, datasheet_ceiling=ceilings.datasheet_tbps,
                  warmup_ms=config.warmup_ms, rep_ms=config.rep_ms, unit="TB/s",
                  graph_calls=n_rot if config.cuda_graphs else 0)
    cfg = default_config(d, dtype)
    splits = default_num_splits(b, hkv, blocks_per_seq * bs, cfg.block_n,
                                torch.cuda.get_device_properties(dev).multi_processor_count)
    results: list[Measurement] = []
    state: dict[str, torch.Tensor] = {}
    try:
        num_blocks = n_rot * b * blocks_per_seq
        state["k"] = torch.randn(num_blocks, hkv, bs, d, device=dev, dtype=dtype, generator=gen)
        state["v"] = torch.randn(num_blocks, hkv, bs, d, device=dev, dtype=dtype, generator=gen)
        # Every rotation's tables are a random slice of one permutation of the pool: blocks of a
        # sequence are scattered, as an allocator serving many requests leaves them.
        perm = torch.randperm(num_blocks, device=dev, generator=gen).to(torch.int32)
        tables = perm.reshape(n_rot, b, blocks_per_seq)
        lens = torch.full((b,), L, dtype=torch.int32, device=dev)
        q = torch.randn(n_rot, b, hq, d, device=dev, dtype=dtype, generator=gen)
        rot = _Rotation(n_rot)
        k, v = state["k"], state["v"]
        check_rows = sorted({0, b - 1})[:ERR_CHECK_SEQS]

        def ref_for(kc, vc, ks=None, vs=None) -> torch.Tensor:
            return paged_attention_reference(q[0, check_rows], kc, vc, tables[0, check_rows], lens[check_rows],
                                             k_scale=ks, v_scale=vs)

        ref = ref_for(k, v)

        def err_of(out: torch.Tensor, reference: torch.Tensor = ref) -> tuple[float, str]:
            o = out.reshape(b, hq, d)[check_rows].float()
            return float((o - reference).abs().max()), f"vs fp32 paged reference, sequences {check_rows}"

        if "triton_paged" in wanted:
            paged_decode_attention(q[0], k, v, tables[0], lens)  # validated call (values checked once)
            run = lambda: paged_decode_attention(q[(i := rot.next())], k, v, tables[i], lens,  # noqa: E731
                                                 validate=False)
            results.append(_measure("triton_paged", run, work=kv_bytes,
                                    check=lambda: err_of(paged_decode_attention(q[0], k, v, tables[0], lens)),
                                    **m_args))
        if "triton_paged_fp8" in wanted:
            results.append(_bench_fp8(shape, q, k, v, tables, lens, rot, ref_for, err_of, m_args))
        if "gather_sdpa" in wanted:
            q4 = q.unsqueeze(3)  # [rot, B, Hq, 1, D]

            def gather_then_sdpa() -> torch.Tensor:
                i = rot.next()
                kg = gather_kv_padded(k, tables[i], L)
                vg = gather_kv_padded(v, tables[i], L)
                return F.scaled_dot_product_attention(q4[i], kg, vg, enable_gqa=True)

            def check_gather() -> tuple[float, str]:
                out = F.scaled_dot_product_attention(q4[0], gather_kv_padded(k, tables[0], L),
                                                     gather_kv_padded(v, tables[0], L), enable_gqa=True)
                return err_of(out)

            results.append(_measure("gather_sdpa", gather_then_sdpa, work=kv_bytes, check=check_gather,
                                    **m_args))
        contiguous = [c for c in (*SDPA_BACKENDS, "naive") if c in wanted]
        if contiguous:
            results += _bench_contiguous(shape, q, k, v, tables, rot, contiguous, err_of, m_args, state)
    finally:
        state.clear()
        gc.collect()
        torch.cuda.empty_cache()
    order = {c: i for i, c in enumerate(("triton_paged", "triton_paged_fp8", "gather_sdpa",
                                         *SDPA_BACKENDS, "naive"))}
    results.sort(key=lambda m: order[m.contender])
    return DecodeResult(shape=shape, num_splits=splits, kv_bytes=kv_bytes, measurements=tuple(results))


def fp8_per_head_pool(k: torch.Tensor, v: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """e4m3 copies of a K and V pool ``[blocks, n_kv_heads, block, d]`` and their per-head scales.

    Scales are amax / 448 (e4m3's largest value), computed and applied head by head so no fp32
    copy of the whole pool is made. Returns ``(k8, v8, k_scale, v_scale)``.
    """
    ks = k.abs().amax(dim=(0, 2, 3)).float() / 448.0
    vs = v.abs().amax(dim=(0, 2, 3)).float() / 448.0
    k8 = torch.empty(k.shape, dtype=torch.float8_e4m3fn, device=k.device)
    v8 = torch.empty_like(k8)
    for h in range(k.shape[1]):
        k8[:, h] = (k[:, h].float() / ks[h]).to(torch.float8_e4m3fn)
        v8[:, h] = (v[:, h].float() / vs[h]).to(torch.float8_e4m3fn)
    return k8, v8, ks, vs


def _bench_fp8(shape, q, k, v, tables, lens, rot, ref_for, err_of, m_args) -> Measurement:
    from kernels.paged_decode import paged_decode_attention

    fp8_bytes = decode_kv_bytes(shape.batch, shape.context, shape.n_kv_heads, shape.head_dim, 1)
    try:
        k8, v8, ks, vs = fp8_per_head_pool(k, v)
    except Exception as exc:  # noqa: BLE001
        gc.collect()
        torch.cuda.empty_cache()
        status = "oom" if _is_oom(exc) else "error"
        return Measurement(contender="triton_paged_fp8", status=status, unit="TB/s", work=fp8_bytes,
                           note=f"building the FP8 cache: {type(exc).__name__}: {str(exc)[:200]}")
    ref8 = ref_for(k8, v8, ks, vs)
    run = lambda: paged_decode_attention(q[(i := rot.next())], k8, v8, tables[i], lens,  # noqa: E731
                                         k_scale=ks, v_scale=vs, validate=False)

    def check() -> tuple[float, str]:
        out = paged_decode_attention(q[0], k8, v8, tables[0], lens, k_scale=ks, v_scale=vs)
        err, _ = err_of(out, ref8)
        return err, "vs fp32 reference on the dequantised FP8 cache"

    m = _measure("triton_paged_fp8", run, work=fp8_bytes, check=check, **m_args)
    del k8, v8
    return m


def _bench_contiguous(shape, q, k, v, tables, rot, contenders, err_of, m_args, state) -> list[Measurement]:
    """SDPA per backend and naive attention on the same KV stored contiguously [B, Hkv, L, D]."""
    from kernels.paged_reference import gather_kv_padded

    n_rot, b, hq, d = q.shape
    L, hkv = shape.context, shape.n_kv_heads
    kv_bytes = decode_kv_bytes(b, L, hkv, d, 2)
    out: list[Measurement] = []
    try:
        kc = torch.empty(n_rot, b, hkv, L, d, dtype=k.dtype, device=k.device)
        vc = torch.empty_like(kc)
        for i in range(n_rot):
            kc[i] = gather_kv_padded(k, tables[i], L)
            vc[i] = gather_kv_padded(v, tables[i], L)
        state["kc"], state["vc"] = kc, vc
    except Exception as exc:  # noqa: BLE001
        gc.collect()
        torch.cuda.empty_cache()
        status = "oom" if _is_oom(exc) else "error"
        return [Measurement(contender=c, status=status, unit="TB/s", work=kv_bytes,
                            note=f"building the contiguous KV: {type(exc).__name__}: {str(exc)[:200]}")
                for c in contenders]
    q4 = q.unsqueeze(3)  # [rot, B, Hq, 1, D]
    for c in contenders:
        if c == "naive":
            naive = _naive()
            if naive is None:
                out.append(Measurement(contender=c, status="not_available", unit="TB/s",
                                       note="kernels.reference.naive_attention_native not importable"))
                continue
            run = lambda: naive(q4[(i := rot.next())], kc[i], vc[i])  # noqa: E731
            eager_args = dict(m_args, graph_calls=0)  # milliseconds per call: launch overhead is noise
            out.append(_measure(c, run, work=kv_bytes, check=lambda: err_of(naive(q4[0], kc[0], vc[0])),
                                **eager_args))
            continue
        backend = SDPA_BACKENDS[c]

        def run(backend=backend) -> torch.Tensor:
            i = rot.next()
            with _sdpa_ctx(backend):  # a fresh context each call: sdpa_kernel is single-use
                return F.scaled_dot_product_attention(q4[i], kc[i], vc[i], enable_gqa=True)

        def check(backend=backend) -> tuple[float, str]:
            with _sdpa_ctx(backend):
                return err_of(F.scaled_dot_product_attention(q4[0], kc[0], vc[0], enable_gqa=True))

        out.append(_measure(c, run, work=kv_bytes, check=check, **m_args))
    return out


# ----------------------------------------------------------------------------------------------
# Prefill and memory
# ----------------------------------------------------------------------------------------------


def _flash():
    try:
        from kernels.flash_forward import flash_attention_forward
        return flash_attention_forward
    except ImportError:
        return None


def bench_prefill_shape(shape: PrefillShape, ceilings: Ceilings, *, config: SweepConfig = SweepConfig(),
                        contenders: Sequence[str] | None = None, seed: int = 0) -> PrefillResult:
    """Time the tiled forward kernel, the SDPA backends and naive attention on one prefill shape."""
    wanted = list(contenders) if contenders is not None else [
        "triton_flash", *SDPA_BACKENDS, *(("naive",) if config.naive else ())]
    dev = torch.device("cuda")
    dtype = DTYPES[shape.dtype]
    b, n, hq, hkv, d = shape.batch, shape.seq_len, shape.n_q_heads, shape.n_kv_heads, shape.head_dim
    flops = prefill_flops(b, n, hq, d, shape.causal)
    m_args = dict(measured_ceiling=ceilings.matmul_tflops, datasheet_ceiling=ceilings.datasheet_tflops,
                  warmup_ms=config.warmup_ms, rep_ms=config.rep_ms, unit="TFLOP/s")
    gen = torch.Generator(device=dev).manual_seed(seed)
    results: list[Measurement] = []
    try:
        q = torch.randn(b, hq, n, d, device=dev, dtype=dtype, generator=gen)
        k = torch.randn(b, hkv, n, d, device=dev, dtype=dtype, generator=gen)
        v = torch.randn(b, hkv, n, d, device=dev, dtype=dtype, generator=gen)
        from kernels.reference import naive_attention

        # fp32 reference on the first batch entry and up to 2 query heads (N x N fp32 per head)
        heads = min(2, hq)
        group = hq // hkv
        ref = naive_attention(q[:1, :heads], k[:1, : -(-heads // group)], v[:1, : -(-heads // group)],
                              causal=shape.causal)

        def err_of(out: torch.Tensor) -> tuple[float, str]:
            return float((out[:1, :heads].float() - ref).abs().max()), f"vs fp32 naive, batch 0 heads 0..{heads - 1}"

        for c in wanted:
            if c == "triton_flash":
                flash = _flash()
                if flash is None:
                    results.append(Measurement(contender=c, status="not_available", unit="TFLOP/s", work=flops,
                                               note="kernels.flash_forward not importable yet"))
                    continue
                run = lambda: flash(q, k, v, causal=shape.causal)[0]  # noqa: E731
            elif c == "naive":
                naive = _naive()
                if naive is None:
                    results.append(Measurement(contender=c, status="not_available", unit="TFLOP/s", work=flops))
                    continue
                run = lambda: naive(q, k, v, causal=shape.causal)  # noqa: E731
            else:
                def run(backend=SDPA_BACKENDS[c]) -> torch.Tensor:
                    with _sdpa_ctx(backend):  # a fresh context each call: sdpa_kernel is single-use
                        return F.scaled_dot_product_attention(q, k, v, is_causal=shape.causal,
                                                              enable_gqa=hq != hkv)
            results.append(_measure(c, run, work=flops, check=lambda run=run: err_of(run()), **m_args))
    finally:
        gc.collect()
        torch.cuda.empty_cache()
    return PrefillResult(shape=shape, flops=flops, measurements=tuple(results))


def bench_memory_point(seq_len: int, contender: str, *, n_heads: int = 32, head_dim: int = 128,
                       batch: int = 1, dtype: str = "bf16", warmup_ms: float = 5.0,
                       rep_ms: float = 30.0) -> MemoryPoint:
    """Peak device memory above the inputs, and time, of naive or tiled attention at one N."""
    fn = _naive() if contender == "naive" else _flash()
    common = dict(seq_len=seq_len, batch=batch, n_heads=n_heads, head_dim=head_dim, contender=contender)
    if fn is None:
        return MemoryPoint(status="not_available", **common)
    dev, dt = torch.device("cuda"), DTYPES[dtype]
    try:
        q = torch.randn(batch, n_heads, seq_len, head_dim, device=dev, dtype=dt)
        k, v = torch.randn_like(q), torch.randn_like(q)
        run = lambda: fn(q, k, v, causal=False)  # noqa: E731
        m = _measure(contender, run, unit="", work=0.0, measured_ceiling=None, datasheet_ceiling=1.0,
                     warmup_ms=warmup_ms, rep_ms=rep_ms)
    except Exception as exc:  # noqa: BLE001 - allocating the inputs themselves failed
        m = Measurement(contender=contender, status="oom" if _is_oom(exc) else "error", note=str(exc)[:200])
    finally:
        q = k = v = None
        gc.collect()
        torch.cuda.empty_cache()
    return MemoryPoint(status=m.status, peak_bytes=m.peak_bytes, median_ms=m.median_ms, note=m.note, **common)


# ----------------------------------------------------------------------------------------------
# Sweep
# ----------------------------------------------------------------------------------------------


def run_sweep(config: SweepConfig = SweepConfig(), *, progress: ProgressFn | None = None,
              command: str = "kernels.bench.run_sweep()") -> BenchReport:
    """Ceilings, then every decode shape, prefill shape and memory point of ``config``.

    ``progress`` is called before each step with a ``ProgressEvent``; it may raise to cancel.
    """
    if not torch.cuda.is_available():
        raise RuntimeError("the benchmark needs a CUDA GPU (kernels run under the interpreter otherwise)")
    dshapes = decode_shapes(config) if config.run_decode else ()
    pshapes = prefill_shapes(config) if config.run_prefill else ()
    mpoints = [(n, c) for n in config.memory_ns for c in ("naive", "triton_flash")] if config.run_memory else []
    total = 1 + len(dshapes) + len(pshapes) + len(mpoints)
    step = 0

    def tick(message: str) -> None:
        nonlocal step
        if progress is not None:
            progress(ProgressEvent(done=step, total=total, message=message))
        step += 1

    tick("ceilings: copy bandwidth and bf16 matmul")
    ceilings = measure_ceilings()
    decode: list[DecodeResult] = []
    for s in dshapes:
        tick(f"decode {s.label}")
        decode.append(bench_decode_shape(s, ceilings, config=config))
    prefill: list[PrefillResult] = []
    for s in pshapes:
        tick(f"prefill {s.label}")
        prefill.append(bench_prefill_shape(s, ceilings, config=config))
    memory: list[MemoryPoint] = []
    naive_oom = False
    for n, c in mpoints:
        tick(f"memory N={n} {c}")
        if c == "naive" and naive_oom:  # it ran out at a smaller N already
            memory.append(MemoryPoint(seq_len=n, batch=1, n_heads=config.memory_heads, head_dim=config.head_dim,
                                      contender=c, status="skipped", note="out of memory at a smaller N"))
            continue
        point = bench_memory_point(n, c, n_heads=config.memory_heads, head_dim=config.head_dim, dtype=config.dtype)
        naive_oom |= c == "naive" and point.status == "oom"
        memory.append(point)
    if progress is not None:
        progress(ProgressEvent(done=total, total=total, message="done"))
    decode_t, prefill_t = tuple(decode), tuple(prefill)
    return BenchReport(schema=SCHEMA, schema_version=SCHEMA_VERSION, provenance=environment(command),
                       ceilings=ceilings, decode=decode_t, prefill=prefill_t, memory=tuple(memory),
                       targets=compute_targets(decode_t, prefill_t))


# ----------------------------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one line naming the argument, exit status 2 (no usage block)."""

    def error(self, message: str):  # noqa: D401 - argparse's hook
        print(f"{self.prog}: error: {' '.join(message.split())}", file=sys.stderr)
        raise SystemExit(2)


def _positive(text: str, value: float) -> None:
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")


def _ints(text: str, *, allow_zero: bool = False) -> tuple[int, ...]:
    """Comma-separated token counts with an optional k (x 1024): ``1k,32k`` -> (1024, 32768)."""
    out = []
    for part in text.split(","):
        part = part.strip().lower()
        mult = 1024 if part.endswith("k") else 1
        try:
            value = int(part.removesuffix("k")) * mult
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected whole numbers such as 1k,32k, got {text!r}") from None
        if value < 0 or (value == 0 and not allow_zero):
            raise argparse.ArgumentTypeError(f"expected positive numbers, got {part!r} in {text!r}")
        out.append(value)
    return tuple(out)


def _ints_or_zero(text: str) -> tuple[int, ...]:
    return _ints(text, allow_zero=True)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    _positive(text, value)
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    _positive(text, value)
    return value


def _heads(text: str) -> tuple[tuple[int, int], ...]:
    """Comma-separated ``query:KV`` head pairs whose query count is a multiple of the KV count."""
    pairs = []
    for part in text.split(","):
        try:
            hq, hkv = (int(x) for x in part.split(":"))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected query:KV pairs such as 32:8, got {part!r}") from None
        if hq < 1 or hkv < 1 or hq % hkv:
            raise argparse.ArgumentTypeError(f"{part!r}: query heads must be a positive multiple of KV heads")
        pairs.append((hq, hkv))
    return tuple(pairs)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m kernels.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", metavar="PATH", help="also write the records as JSON to PATH")
    p.add_argument("--only", choices=("all", "decode", "prefill", "memory"), default="all")
    p.add_argument("--quick", action="store_true", help="a short sweep (SweepConfig.quick)")
    p.add_argument("--batch", type=_ints, help="decode batches, e.g. 1,8,32")
    p.add_argument("--context", type=_ints, help="decode contexts, e.g. 1k,32k")
    p.add_argument("--long-context", type=_ints_or_zero, help="extra batch-1 contexts (default 128k; 0 for none)")
    p.add_argument("--heads", type=_heads, help="decode query:KV heads, e.g. 32:8,64:8")
    p.add_argument("--block-size", type=_positive_int, help="decode KV block size (default 16)")
    p.add_argument("--prefill-n", type=_ints, help="prefill sequence lengths, e.g. 1k,4k")
    p.add_argument("--memory-n", type=_ints, help="naive-vs-tiled memory sweep lengths")
    p.add_argument("--no-naive", action="store_true", help="skip naive attention in decode/prefill")
    p.add_argument("--no-fp8", action="store_true", help="skip the FP8-KV decode contender")
    p.add_argument("--rep-ms", type=_positive_float, help="do_bench repetition time per measurement")
    p.add_argument("--eager", action="store_true", help="decode: time plain calls, no CUDA graphs")
    return p


def config_from_args(args: argparse.Namespace) -> SweepConfig:
    cfg = SweepConfig.quick() if args.quick else SweepConfig()
    changes: dict[str, object] = {}
    if args.only != "all":
        changes.update(run_decode=args.only == "decode", run_prefill=args.only == "prefill",
                       run_memory=args.only == "memory")
    if args.batch:
        changes["decode_batches"] = args.batch
    if args.context:
        changes["decode_contexts"] = args.context
    if args.long_context is not None:
        changes["b1_long_contexts"] = tuple(c for c in args.long_context if c > 0)
    if args.heads:
        changes["decode_heads"] = args.heads
    if args.block_size:
        changes["block_size"] = args.block_size
    if args.prefill_n:
        changes["prefill_ns"] = args.prefill_n
    if args.memory_n:
        changes["memory_ns"] = args.memory_n
    if args.no_naive:
        changes["naive"] = False
    if args.no_fp8:
        changes["decode_fp8"] = False
    if args.rep_ms:
        changes["rep_ms"] = args.rep_ms
    if args.eager:
        changes["cuda_graphs"] = False
    return replace(cfg, **changes)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    if not torch.cuda.is_available():
        print("kernels.bench: no CUDA GPU here; the benchmark needs one (tests run the kernels "
              "under the Triton interpreter instead).", file=sys.stderr)
        return 2
    command = shlex.join([sys.executable, "-m", "kernels.bench", *argv])

    def show(ev: ProgressEvent) -> None:
        print(f"[{ev.done}/{ev.total}] {ev.message}", file=sys.stderr, flush=True)

    report = run_sweep(config_from_args(args), progress=show, command=command)
    print(format_report(report))
    if args.json:
        path = write_bench_json(report, args.json)
        print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())

"""How the benchmark times a call and where it ran: do_bench, CUDA-graph replays, provenance.

Method: ``triton.testing.do_bench(..., return_mode="median")`` (it also flushes the L2 before
every call). Decode contenders (all but naive) are timed on replays of a CUDA graph of the
call, as serving engines run decode, because a batch-1 call lasts ~50 us and the Python and
launch overhead of an eager call (~100-150 us measured for the Triton wrapper on the H200 host)
would otherwise be what is timed; the eager figure is kept in ``eager_ms``, the least of
``EAGER_REPEATS`` medians (an eager call's time is the wrapper's host path plus whatever else the
host is doing, which only ever adds: at batch 1 x 32K one median read 29 us above the graph time
on one lent machine and 90 on another, the same code; and within one run a burst of host load
lifted every batch-1 eager figure for a minute, cuDNN's too). So the sweep times the bf16
kernel's eager figure at the shapes its target reads once more at the end of the run, and keeps
the least of the two passes (``Measurement.eager_passes``). Inputs of small
shapes are rotated over several copies (:class:`Rotation`) so that one timed call's working set
is >= 1 GB where memory allows (the H200's L2 is ~50 MB). A CUDA out-of-memory error is caught
per contender and shape by :func:`measure` and reported as status "oom".
"""

from __future__ import annotations

import datetime as _dt
import gc
import os
import platform
import statistics
import subprocess
from collections.abc import Callable
from pathlib import Path

from kernels.runtime import ensure_triton_backend

ensure_triton_backend()  # before triton is imported: the interpreter is chosen at decoration

import torch  # noqa: E402

from kernels.bench.records import Ceilings, Measurement, Provenance  # noqa: E402
from kernels.theory import copy_tbps, tflops  # noqa: E402
from units import GB, cdiv  # noqa: E402

__all__ = ["environment", "do_bench", "eager_ms", "graph_ms", "replay_median_s", "measure", "measure_ceilings", "is_oom", "Rotation",
           "rotations", "sdpa_context", "free_cuda_memory", "ROTATE_TARGET_BYTES", "MAX_ROTATIONS"]

ROTATE_TARGET_BYTES = 1 * GB  # one timed call's inputs span >= this (L2 is ~50 MB)
MAX_ROTATIONS = 64  # cap on copies for tiny shapes (launch overhead dominates there anyway)


# ----------------------------------------------------------------------------------------------
# Provenance
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


# ----------------------------------------------------------------------------------------------
# Timing
# ----------------------------------------------------------------------------------------------


EAGER_REPEATS = 3  # eager medians per measurement; the least is reported (see the module docstring)


def eager_ms(fn: Callable[[], object], warmup_ms: float, rep_ms: float) -> float:
    """The eager figure of ``fn``: the least of ``EAGER_REPEATS`` do_bench medians (ms)."""
    return min(do_bench(fn, warmup_ms, rep_ms) for _ in range(EAGER_REPEATS))


def do_bench(fn: Callable[[], object], warmup_ms: float, rep_ms: float) -> float:
    """Median milliseconds of ``fn`` (L2 flushed before every call)."""
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))


def measure_ceilings(*, copy_bytes: int = 2 * 2**30, matmul_n: int = 8192,
                     warmup_ms: float = 10.0, rep_ms: float = 100.0) -> Ceilings:
    """Measured copy bandwidth (read + write) and bf16 matmul rate on random data."""
    if not torch.cuda.is_available():
        return Ceilings(copy_tbps=None, copy_buffer_bytes=copy_bytes, matmul_tflops=None, matmul_n=matmul_n)
    src = torch.empty(copy_bytes, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    copy_ms = do_bench(lambda: dst.copy_(src), warmup_ms, rep_ms)
    del src, dst
    a = torch.randn(matmul_n, matmul_n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(matmul_n, matmul_n, device="cuda", dtype=torch.bfloat16)
    mm_ms = do_bench(lambda: a @ b, warmup_ms, rep_ms)
    del a, b
    torch.cuda.empty_cache()
    return Ceilings(copy_tbps=copy_tbps(copy_bytes, copy_ms), copy_buffer_bytes=copy_bytes,
                    matmul_tflops=tflops(2 * matmul_n**3, mm_ms), matmul_n=matmul_n)


def is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc).lower()


def free_cuda_memory() -> None:
    """Drop unreachable tensors and return cached blocks (after a failure or a shape)."""
    gc.collect()
    torch.cuda.empty_cache()


def graph_ms(fn: Callable[[], object], calls: int, warmup_ms: float, rep_ms: float) -> float:
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
        return do_bench(graph.replay, warmup_ms, rep_ms) / calls
    finally:
        del graph


def replay_median_s(fn: Callable[[], object], replays: int, *, eager_warmups: int = 3) -> float:
    """Median seconds of one replay of a CUDA graph that runs ``fn`` once, timed replay by replay
    with CUDA events (no L2 flush: a whole model step, or a step term, as the engine replays it).
    ``eager_warmups`` calls off the capture stream first compile kernels and make workspaces
    (cuBLAS, autotuning), then three replays warm the graph."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(eager_warmups):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    try:
        for _ in range(3):
            graph.replay()
        times = []
        for _ in range(replays):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        return statistics.median(times)
    finally:
        del graph


def _failure(contender: str, exc: Exception, *, unit: str, work: float) -> Measurement:
    """The record of a contender that could not run: out of memory, refused, or failed."""
    status = "oom" if is_oom(exc) else (
        "unsupported" if isinstance(exc, RuntimeError) and "No available kernel" in str(exc) else "error")
    msg = " ".join(str(exc).split())[:300]
    free_cuda_memory()
    return Measurement(contender=contender, status=status, unit=unit, work=work,
                       note=f"{type(exc).__name__}: {msg}")


def _first_call(fn: Callable[[], object], check: Callable[[], tuple[float, str]] | None
                ) -> tuple[int, float | None, str]:
    """Run ``fn`` once: its peak memory above what was allocated before, and the error check."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    # A call that frees more than it allocates (a library dropping a workspace it cached) peaks
    # at what was there: 0 bytes above it, never a negative count (FlashInfer's tensor-core
    # wrapper read -1,024 at six large shapes on the H200 when this was unclamped).
    peak = max(0, torch.cuda.max_memory_allocated() - base)
    err, note = check() if check is not None else (None, "")
    return peak, err, note


def measure(contender: str, fn: Callable[[], object], *, unit: str, work: float,
            measured_ceiling: float | None, datasheet_ceiling: float,
            warmup_ms: float, rep_ms: float, check: Callable[[], tuple[float, str]] | None = None,
            graph_calls: int = 0) -> Measurement:
    """Run ``fn`` once (peak memory, error check), then time it; never raises for OOM/refusals.

    With ``graph_calls`` > 0 the reported time is the CUDA-graph figure (:func:`graph_ms`) and
    the eager one is kept in ``eager_ms``; if capture fails the eager figure is reported.
    """
    try:
        peak, err, note = _first_call(fn, check)
        eager = eager_ms(fn, warmup_ms, rep_ms)
    except Exception as exc:  # noqa: BLE001 - each failure becomes this shape's record
        return _failure(contender, exc, unit=unit, work=work)
    ms, timing = eager, "eager"
    if graph_calls:
        try:
            ms, timing = graph_ms(fn, graph_calls, warmup_ms, rep_ms), "cuda_graph"
        except Exception as exc:  # noqa: BLE001 - fall back to the eager figure, say why
            torch.cuda.synchronize()
            free_cuda_memory()
            note = f"{note}; graph capture failed ({type(exc).__name__}), eager time".lstrip("; ")
    rate = work / (ms * 1e-3) / 1e12
    return Measurement(
        contender=contender, status="ok", median_ms=ms, timing=timing, eager_ms=eager, unit=unit,
        work=work, rate=rate, share_of_measured=rate / measured_ceiling if measured_ceiling else None,
        share_of_datasheet=rate / datasheet_ceiling, max_abs_err=err, peak_bytes=int(peak), note=note,
    )


class Rotation:
    """Cycle through n input sets, one per call, so consecutive calls touch different memory."""

    def __init__(self, n: int) -> None:
        self.n, self.i = n, 0

    def next(self) -> int:
        self.i = (self.i + 1) % self.n
        return self.i


def rotations(bytes_per_set: int, free_bytes: int) -> int:
    """Input sets to rotate over: enough to span ``ROTATE_TARGET_BYTES``, a quarter of free memory at most."""
    want = max(1, int(cdiv(ROTATE_TARGET_BYTES, max(bytes_per_set, 1))))
    fit = max(1, int(free_bytes * 0.25 // max(bytes_per_set, 1)))  # leave room for the baselines
    return int(min(want, fit, MAX_ROTATIONS))


def sdpa_context(backend_name: str):
    """``sdpa_kernel`` restricted to one backend (a fresh context each call: it is single-use)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([getattr(SDPBackend, backend_name)])

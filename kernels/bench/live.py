"""What the live kernel page runs: one shape plus its sweeps on the GPU, or a toy check on the CPU.

* :class:`RunPlan` is what the page's widgets describe: the kernel (paged decode, tiled
  prefill, or chunked prefill over a mixed batch of chunks and decode rows), the shape, the dtype (FP8 KV for decode adds the FP8 contender), and which sweeps
  to add (decode: context and batch; prefill: N; naive-vs-tiled memory as N grows).
* :func:`run_plan_on_gpu` runs a plan through the sweep functions the CLI uses
  (``kernels.bench.sweeps.bench_decode_shape`` and friends) and returns a ``BenchReport``,
  so the page, the CLI and the shipped JSON share one record type.
  The progress callback is called before every step and may raise to cancel.
* :func:`merge_reports` joins a session's runs into one report (for the download).
* :func:`interpreter_check` runs both kernels under the Triton interpreter at toy sizes and
  compares them with the float32 references (what the page shows without a GPU).

``ensure_triton_backend()`` runs before any kernel module is imported (here and in the modules
themselves), because Triton reads ``TRITON_INTERPRET`` when a kernel is decorated.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from kernels.runtime import ensure_triton_backend

ensure_triton_backend()  # before the kernel modules: the interpreter is chosen at decoration

import torch  # noqa: E402

from kernels.bench import sweeps as bench  # noqa: E402
from kernels.bench.mixed import bench_mixed_shape, mixed_batch  # noqa: E402
from kernels.bench.records import (  # noqa: E402
    SCHEMA, SCHEMA_VERSION, BenchReport, Ceilings, DecodeResult, DecodeShape, MemoryPoint, MixedResult,
    MixedShape, PrefillResult, PrefillShape, Provenance, compute_targets,
)
from kernels.prefill.chunked import chunked_prefill_attention, plan_batch  # noqa: E402
from kernels.prefill.flash import flash_attention_forward  # noqa: E402
from kernels.cache.paged import build_paged_cache, quantize_fp8  # noqa: E402
from kernels.decode.api import paged_decode_attention  # noqa: E402
from kernels.reference.paged import paged_attention_reference  # noqa: E402
from kernels.reference.dense import naive_attention  # noqa: E402
from kernels.tolerances import tolerance  # noqa: E402
from kernels.reference.varlen import varlen_attention_reference  # noqa: E402

__all__ = ["Backend", "default_backend", "KernelRequest", "RunPlan", "Step", "plan_steps", "run_plan_on_gpu", "merge_reports", "InterpreterCheck",
           "interpreter_check", "DECODE_SWEEP_CONTEXTS", "DECODE_SWEEP_BATCHES", "PREFILL_SWEEP_NS",
           "MEMORY_NS", "SWEEP_DECODE_CONTENDERS", "SWEEP_PREFILL_CONTENDERS", "INTERPRETER_TOLERANCE"]

# The live page's sweep axes (decode: context at the chosen batch, batch at the chosen context).
DECODE_SWEEP_CONTEXTS = (1024, 4096, 16384, 32768)
DECODE_SWEEP_BATCHES = (1, 8, 32, 128)
PREFILL_SWEEP_NS = (1024, 2048, 4096, 8192)
# Up to 64K: naive's S and P at 32 heads are 2 x 64 GiB at 32K (they fit in an H200's 141 GB,
# measured) and 2 x 256 GiB at 64K, so the series reaches naive's out-of-memory point.
MEMORY_NS = (1024, 2048, 4096, 8192, 16384, 32768, 65536)
# Sweep points time the kernel and the strongest baselines only; the chosen shape gets all.
SWEEP_DECODE_CONTENDERS = ("triton_paged", "gather_sdpa", "sdpa_flash", "sdpa_cudnn")
SWEEP_PREFILL_CONTENDERS = ("triton_flash", "sdpa_flash", "sdpa_cudnn")


@dataclass(frozen=True, kw_only=True)
class RunPlan:
    """One press of the page's Run button."""

    kernel: str  # "decode" | "prefill" | "mixed"
    decode: DecodeShape | None = None
    prefill: PrefillShape | None = None
    mixed: MixedShape | None = None
    fp8: bool = False  # decode: also time the kernel on an FP8 (e4m3) copy of the cache
    naive: bool = True  # include naive attention among the chosen shape's baselines
    sweep: bool = False  # add the sweep points (see the constants above)
    memory_ns: tuple[int, ...] = ()  # naive against tiled peak memory, stops after naive's OOM
    rep_ms: float = 25.0  # do_bench repetition time per measurement

    def __post_init__(self) -> None:
        if self.kernel not in ("decode", "prefill", "mixed"):
            raise ValueError(f"kernel must be 'decode', 'prefill' or 'mixed', got {self.kernel!r}")
        shapes = {"decode": self.decode, "prefill": self.prefill, "mixed": self.mixed}
        if any((kind == self.kernel) != (shape is not None) for kind, shape in shapes.items()):
            raise ValueError(f"a {self.kernel} plan needs exactly its own shape")

    @property
    def shape(self) -> DecodeShape | PrefillShape | MixedShape:
        """The chosen shape (the plan's one non-None shape)."""
        return {"decode": self.decode, "prefill": self.prefill, "mixed": self.mixed}[self.kernel]

    @property
    def label(self) -> str:
        return f"{self.kernel} {self.shape.label}"


@dataclass(frozen=True, kw_only=True)
class KernelRequest:
    """What the page's sidebar asks for, before it is checked: one kernel, one shape, the extras.

    ``dtype`` "fp8" (decode only) means an FP8 (e4m3) KV cache with a bf16 query. A "mixed"
    request takes its sequences from the preset ``mix`` (``kernels.bench.mixed.MIXED_PRESETS``);
    batch and length do not apply to it.
    """

    kernel: str  # "decode" | "prefill" | "mixed"
    dtype: str  # "bf16" | "fp16" | "fp8"
    batch: int
    length: int  # context (decode) or N (prefill), tokens
    n_q_heads: int
    n_kv_heads: int
    head_dim: int
    block_size: int = 16  # decode only
    causal: bool = True  # prefill only
    sweep: bool = False
    memory: bool = False  # add the naive-vs-tiled memory series (MEMORY_NS)
    mix: str = "busy"  # mixed only: which of the harness's mixed batches

    @property
    def problem(self) -> str | None:
        """Why no plan can be made from this request, or None."""
        if self.n_q_heads % self.n_kv_heads:
            return f"{self.n_q_heads} query heads cannot share {self.n_kv_heads} KV heads evenly."
        group = self.n_q_heads // self.n_kv_heads
        if self.kernel == "mixed" and group > 64:
            return f"The chunked-prefill kernel takes at most 64 query heads per KV head, not {group}."
        return None

    def plan(self) -> RunPlan | None:
        """The run this request describes; None when :attr:`problem` says it cannot be made."""
        if self.problem:
            return None
        base = "bf16" if self.dtype == "fp8" else self.dtype
        memory_ns = MEMORY_NS if self.memory else ()
        if self.kernel == "decode":
            shape = DecodeShape(batch=self.batch, context=self.length, n_q_heads=self.n_q_heads,
                                n_kv_heads=self.n_kv_heads, head_dim=self.head_dim, block_size=self.block_size,
                                dtype=base)
            return RunPlan(kernel="decode", fp8=self.dtype == "fp8", sweep=self.sweep, memory_ns=memory_ns,
                           decode=shape)
        if self.kernel == "mixed":
            shape = mixed_batch(self.mix, n_q_heads=self.n_q_heads, n_kv_heads=self.n_kv_heads,
                                head_dim=self.head_dim, block_size=self.block_size, dtype=base)
            return RunPlan(kernel="mixed", mixed=shape)
        shape = PrefillShape(batch=self.batch, seq_len=self.length, n_q_heads=self.n_q_heads,
                             n_kv_heads=self.n_kv_heads, head_dim=self.head_dim, causal=self.causal, dtype=base)
        return RunPlan(kernel="prefill", sweep=self.sweep, memory_ns=memory_ns, prefill=shape)


@dataclass(frozen=True, kw_only=True)
class Step:
    kind: str  # "decode" | "prefill" | "mixed" | "memory"
    label: str
    decode: DecodeShape | None = None
    prefill: PrefillShape | None = None
    mixed: MixedShape | None = None
    contenders: tuple[str, ...] | None = None  # None: every contender of the kind
    seq_len: int = 0  # memory steps
    contender: str = ""  # memory steps


def plan_steps(plan: RunPlan) -> tuple[Step, ...]:
    """The ordered steps of a plan: the chosen shape first, then sweep points, then memory."""
    steps: list[Step] = []
    if plan.kernel == "mixed":
        steps.append(Step(kind="mixed", label=f"mixed {plan.mixed.label}", mixed=plan.mixed))
    elif plan.kernel == "decode":
        s = plan.decode
        main = ["triton_paged", *(("triton_paged_fp8",) if plan.fp8 else ()), "gather_sdpa",
                "sdpa_flash", "sdpa_cudnn", "sdpa_efficient", *(("naive",) if plan.naive else ())]
        steps.append(Step(kind="decode", label=f"decode {s.label}", decode=s, contenders=tuple(main)))
        if plan.sweep:
            seen = {(s.batch, s.context)}
            points = [(s.batch, c) for c in DECODE_SWEEP_CONTEXTS] + [(b, s.context) for b in DECODE_SWEEP_BATCHES]
            for b, c in points:
                if (b, c) in seen:
                    continue
                seen.add((b, c))
                shape = replace(s, batch=b, context=c)
                steps.append(Step(kind="decode", label=f"decode sweep {shape.label}", decode=shape,
                                  contenders=SWEEP_DECODE_CONTENDERS))
    else:
        s = plan.prefill
        main = ["triton_flash", "triton_flash_tl", "sdpa_flash", "sdpa_cudnn", "sdpa_efficient",
                *(("naive",) if plan.naive else ())]
        steps.append(Step(kind="prefill", label=f"prefill {s.label}", prefill=s, contenders=tuple(main)))
        if plan.sweep:
            for n in PREFILL_SWEEP_NS:
                if n != s.seq_len:
                    shape = replace(s, seq_len=n)
                    steps.append(Step(kind="prefill", label=f"prefill sweep {shape.label}", prefill=shape,
                                      contenders=SWEEP_PREFILL_CONTENDERS))
    for n in plan.memory_ns:
        for c in ("naive", "triton_flash"):
            steps.append(Step(kind="memory", label=f"memory N={n} {c}", seq_len=n, contender=c))
    return tuple(steps)


def run_plan_on_gpu(plan: RunPlan, progress: Callable[[object], None], *,
                    ceilings: Ceilings | None = None) -> BenchReport:
    """Run a plan with the sweep functions; ``progress`` gets ``bench.ProgressEvent``s.

    ``ceilings`` measured earlier in this process may be passed to skip re-measuring them.
    OOM of one contender is recorded as status "oom" and the run goes on; the naive
    memory series stops (status "skipped") after its first OOM.
    """
    steps = plan_steps(plan)
    total = len(steps) + 1
    progress(bench.ProgressEvent(done=0, total=total, message="ceilings: copy bandwidth and bf16 matmul"))
    if ceilings is None:
        ceilings = bench.measure_ceilings()
    config = bench.SweepConfig(rep_ms=plan.rep_ms, decode_fp8=plan.fp8, naive=plan.naive)
    decode: list[DecodeResult] = []
    prefill: list[PrefillResult] = []
    mixed: list[MixedResult] = []
    memory: list[MemoryPoint] = []
    naive_oom = False
    for i, step in enumerate(steps, start=1):
        progress(bench.ProgressEvent(done=i, total=total, message=step.label))
        if step.kind == "decode":
            decode.append(bench.bench_decode_shape(step.decode, ceilings, config=config, contenders=step.contenders))
        elif step.kind == "prefill":
            prefill.append(bench.bench_prefill_shape(step.prefill, ceilings, config=config,
                                                     contenders=step.contenders))
        elif step.kind == "mixed":
            mixed.append(bench_mixed_shape(step.mixed, ceilings, rep_ms=plan.rep_ms))
        else:
            shape = plan.shape
            heads = shape.n_q_heads
            if step.contender == "naive" and naive_oom:
                memory.append(bench.naive_memory_skipped(step.seq_len, n_heads=heads, head_dim=shape.head_dim))
                continue
            point = bench.bench_memory_point(step.seq_len, step.contender, n_heads=heads,
                                             head_dim=min(shape.head_dim, 128), dtype=shape.dtype)
            naive_oom |= step.contender == "naive" and point.status == "oom"
            memory.append(point)
    progress(bench.ProgressEvent(done=total, total=total, message="done"))
    d, p, x = tuple(decode), tuple(prefill), tuple(mixed)
    return BenchReport(schema=SCHEMA, schema_version=SCHEMA_VERSION,
                       provenance=bench.environment(f"KV Cache Explorer live page: {plan.label}"),
                       ceilings=ceilings, decode=d, prefill=p, memory=tuple(memory), mixed=x,
                       targets=compute_targets(d, p, x))


def merge_reports(reports: list[BenchReport] | tuple[BenchReport, ...]) -> BenchReport | None:
    """One report holding every run of a session: latest provenance and ceilings, all records.

    Targets are recomputed over the union (they are "worst shape" figures, so they depend on
    every record). The command field lists how many runs were merged.
    """
    if not reports:
        return None
    last = reports[-1]
    decode = tuple(r for rep in reports for r in rep.decode)
    prefill = tuple(r for rep in reports for r in rep.prefill)
    memory = tuple(m for rep in reports for m in rep.memory)
    mixed = tuple(r for rep in reports for r in rep.mixed)
    commands = "; ".join(dict.fromkeys(rep.provenance.command for rep in reports))
    provenance: Provenance = replace(last.provenance, command=f"{len(reports)} run(s): {commands}")
    return replace(last, provenance=provenance, decode=decode, prefill=prefill, memory=memory, mixed=mixed,
                   targets=compute_targets(decode, prefill, mixed))


@dataclass(frozen=True, kw_only=True)
class Backend:
    """What the page runs plans on. Tests substitute one that returns recorded results."""

    gpu: bool  # True: plans can be timed; False: the page shows shipped/uploaded results only
    device: str
    run: Callable[[RunPlan, Callable[[object], None]], BenchReport]


def default_backend() -> Backend:
    """The attached GPU through the sweep functions, or a CPU backend that refuses to time anything."""
    if ensure_triton_backend():
        return Backend(gpu=True, device=torch.cuda.get_device_name(0), run=run_plan_on_gpu)

    def refuse(plan: RunPlan, progress: Callable[[object], None]) -> BenchReport:
        raise RuntimeError("no CUDA GPU: timing needs one (the interpreter is for correctness only)")

    return Backend(gpu=False, device="cpu (Triton interpreter)", run=refuse)


# ----------------------------------------------------------------------------------------------
# Interpreter check (no GPU)
# ----------------------------------------------------------------------------------------------

# Max abs error allowed against the float32 reference, by kernel and what the output is rounded
# to: the project's one tolerance table (``kernels.tolerances``), where the reasons are.
INTERPRETER_TOLERANCE = {
    ("paged decode", dtype): tolerance("paged_decode", dtype).atol for dtype in ("fp16", "bf16", "fp8 KV (fp16 q)")
} | {("tiled forward", dtype): tolerance("flash_forward", dtype).atol for dtype in ("fp16", "bf16")
      } | {("chunked prefill", dtype): tolerance("chunked_prefill", dtype).atol for dtype in ("fp16", "bf16")}


@dataclass(frozen=True, kw_only=True)
class InterpreterCheck:
    kernel: str
    shape: str
    dtype: str
    max_abs_err: float
    tolerance: float
    seconds: float

    @property
    def ok(self) -> bool:
        return self.max_abs_err <= self.tolerance


def _compare(kernel: str, shape: str, dtype: str, got, ref, started: float) -> InterpreterCheck:
    """One check's record: max abs error of ``got`` against the float32 ``ref``, time since ``started``."""
    return InterpreterCheck(kernel=kernel, shape=shape, dtype=dtype, max_abs_err=float((got.float() - ref).abs().max()),
                            tolerance=INTERPRETER_TOLERANCE[(kernel, dtype)], seconds=time.perf_counter() - started)


def interpreter_check(seed: int = 0) -> tuple[InterpreterCheck, ...]:
    """The kernels at toy sizes on CPU tensors (Triton interpreter) against the references.

    Decode: two sequences of 5 and 37 tokens (partial blocks), block 16, shuffled tables,
    unused slots poisoned with NaN, 8 query heads on 2 KV heads (GQA 4), head dim 64.
    Prefill: one sequence of 100 tokens (a masked tail), 4 query heads on 2 KV heads, causal.
    Chunked prefill: a 20-token chunk over 25 cached tokens and two decode rows, decode's cache setup.
    A second or two in all on two CPU cores.
    """
    gen = torch.Generator().manual_seed(seed)
    out: list[InterpreterCheck] = []
    lens, bs, hq, hkv, d = [5, 37], 16, 8, 2, 64
    decode_label = f"B=2 L={lens} H={hq}/{hkv} d={d} block {bs}, shuffled, NaN in unused slots"
    for name, dt in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        t0 = time.perf_counter()
        cache = build_paged_cache(lens, block_size=bs, n_kv_heads=hkv, head_dim=d, dtype=dt, shuffle=True,
                                  generator=gen, poison_unused=True)
        q = torch.randn(len(lens), hq, d, generator=gen).to(dt)
        got = paged_decode_attention(q, cache.k_cache, cache.v_cache, cache.block_tables, cache.seq_lens)
        ref = paged_attention_reference(q, cache.k_cache, cache.v_cache, cache.block_tables, cache.seq_lens)
        out.append(_compare("paged decode", decode_label, name, got, ref, t0))
        if name == "fp16":
            t0 = time.perf_counter()
            c8 = quantize_fp8(cache)
            got = paged_decode_attention(q, c8.k_cache, c8.v_cache, c8.block_tables, c8.seq_lens,
                                         k_scale=c8.k_scale, v_scale=c8.v_scale)
            ref = paged_attention_reference(q, c8.k_cache, c8.v_cache, c8.block_tables, c8.seq_lens,
                                            k_scale=c8.k_scale, v_scale=c8.v_scale)
            out.append(_compare("paged decode", decode_label + ", per-head scales", "fp8 KV (fp16 q)", got, ref, t0))
    n, fq, fkv = 100, 4, 2
    for name, dt in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        t0 = time.perf_counter()
        q = torch.randn(1, fq, n, d, generator=gen).to(dt)
        k = torch.randn(1, fkv, n, d, generator=gen).to(dt)
        v = torch.randn(1, fkv, n, d, generator=gen).to(dt)
        got, _ = flash_attention_forward(q, k, v, causal=True)
        ref = naive_attention(q, k, v, causal=True)
        out.append(_compare("tiled forward", f"B=1 N={n} H={fq}/{fkv} d={d} causal", name, got, ref, t0))
    q_lens, seq_lens = [20, 1, 1], [45, 5, 37]
    mixed_label = (f"chunk of {q_lens[0]} over {seq_lens[0] - q_lens[0]} cached + decode rows over "
                   f"{seq_lens[1:]}, H={hq}/{hkv} d={d} block {bs}, shuffled, NaN in unused slots")
    for name, dt in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        t0 = time.perf_counter()
        cache = build_paged_cache(seq_lens, block_size=bs, n_kv_heads=hkv, head_dim=d, dtype=dt, shuffle=True,
                                  generator=gen, poison_unused=True)
        q = torch.randn(sum(q_lens), hq, d, generator=gen).to(dt)
        plan = plan_batch(q_lens, seq_lens, n_q_heads=hq, n_kv_heads=hkv, head_dim=d, device="cpu")
        got, _ = chunked_prefill_attention(q, cache.k_cache, cache.v_cache, cache.block_tables, plan)
        ref, _ = varlen_attention_reference(q, cache.k_cache, cache.v_cache, cache.block_tables, q_lens, seq_lens)
        out.append(_compare("chunked prefill", mixed_label, name, got, ref, t0))
    return tuple(out)

"""MLA paged decode timed against its ceilings and SGLang's Triton MLA decode, in one run.

Per shape (batch B, context L, query heads H; DeepSeek-V3's latent: rank 512 + rope 64; vLLM's MLA
page of 64 tokens) one latent pool of random bf16 values is built (rows scattered through a
shuffled table, rotated over copies up to 1 GB as the decode section does), timed, then quantised
to FP8 (one per-tensor scale, :func:`kernels.cache.mla.quantize_mla_fp8`) and timed again.
Contenders:

==================  ===============================================================================
mla                 :func:`kernels.decode.api.mla_decode_attention` at its default config (on Hopper
                    at 64+ heads and a 16-bit latent the Gluon kernel, else the Triton one)
mla_triton          the same entry with the Triton kernel's default config (the Triton kernel)
sglang_triton_8     SGLang's Triton MLA decode (:mod:`kernels.bench.triton_peers`) at 8 splits a
                    sequence, its ``--triton-attention-num-kv-splits`` default; bf16 only
sglang_triton_16    the same at 16 splits (faster at small batches); bf16 only
==================  ===============================================================================

Timing is the harness's (:func:`kernels.bench.timing.measure`: medians of CUDA-graph replays, the
eager figure beside them). Each output is checked on the first and last sequence against the
float32 absorbed reference (:func:`kernels.reference.mla.mla_decode_reference`), held to the
``mla_decode`` entry of :mod:`kernels.tolerances`. The peer's source is not in the repository;
without it (``scripts/peer_sources.sh``) its rows say so. Nothing runs at import.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from kernels.runtime import ensure_triton_backend

ensure_triton_backend()  # before the kernel modules: the interpreter is chosen at decoration

import torch  # noqa: E402

from inputs.errors import InputError  # noqa: E402
from kernels.bench.mla_records import (  # noqa: E402
    MLA_CONTENDERS, MLA_KV_FORMATS, PEER_CONTENDERS, SCHEMA, SCHEMA_VERSION, MlaReport, MlaResult, MlaShape, bound_ms,
    compute_mla_targets, mla_flops,
)
from kernels.bench.records import Ceilings, Measurement, measured_text  # noqa: E402
from kernels.bench.sweeps import ProgressEvent, ProgressFn  # noqa: E402
from kernels.bench.timing import environment, free_cuda_memory, is_oom, measure, measure_ceilings, rotations  # noqa: E402
from kernels.bench.triton_peers import load_sglang_decode, sglang_mla_call  # noqa: E402
from kernels.cache.mla import DEEPSEEK_V3_RANK, DEEPSEEK_V3_ROPE, MlaLatentCache, build_mla_cache, quantize_mla_fp8  # noqa: E402
from kernels.decode.api import mla_decode_attention  # noqa: E402
from kernels.decode.mla import default_mla_config, mla_num_splits  # noqa: E402
from kernels.reference.mla import mla_decode_reference  # noqa: E402
from kernels.tolerances import tolerance  # noqa: E402

__all__ = ["MlaRunConfig", "MLA_PAGE", "run_mla", "format_mla"]

MLA_PAGE = 64  # tokens per page: vLLM's block size for MLA backends
SM_SCALE = 192 ** -0.5  # DeepSeek-V3: 1 / sqrt(qk_nope_head_dim + qk_rope_head_dim)
UNIT = "TFLOP/s"


@dataclass(frozen=True, kw_only=True)
class MlaRunConfig:
    """Which shapes the MLA run times (defaults: the H200 run, about a minute).

    ``heads``: query heads on one GPU: 128 is DeepSeek-V3 on one GPU's share under data-parallel
    attention, 16 the same model at TP 8.
    """

    shapes: tuple[tuple[int, int], ...] = ((1, 32768), (8, 8192), (64, 4096), (64, 16384), (128, 4096),
                                           (128, 16384))
    heads: tuple[int, ...] = (128, 16)
    kv_lora_rank: int = DEEPSEEK_V3_RANK
    rope_dim: int = DEEPSEEK_V3_ROPE
    block_size: int = MLA_PAGE
    kv_formats: tuple[str, ...] = MLA_KV_FORMATS
    peers: bool = True
    warmup_ms: float = 5.0
    rep_ms: float = 20.0
    device: str = "cuda"  # "cpu": the interpreter, one perf_counter call per contender (tests)
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.shapes or not self.heads or not self.kv_formats:
            raise InputError("mla", "needs at least one shape, head count and latent format")
        if not set(self.kv_formats) <= set(MLA_KV_FORMATS) or self.device not in ("cuda", "cpu"):
            raise InputError("mla", f"latent formats come from {MLA_KV_FORMATS} and the device is cuda or cpu")
        if any(h < 1 or h > 256 for h in self.heads):
            raise InputError("heads", f"query heads must lie in 1..256, got {self.heads}")


@dataclass(frozen=True, kw_only=True)
class _Pool:
    shape: MlaShape
    cache: MlaLatentCache
    q_latent: torch.Tensor  # [rotations, B, H, rank]
    q_rope: torch.Tensor  # [rotations, B, H, rope]
    rows: list[int]
    reference: torch.Tensor  # float32 [len(rows), H, rank] of rotation 0

    @property
    def rotations(self) -> int:
        return self.q_latent.shape[0]


def _new_pool(shape: MlaShape, config: MlaRunConfig, seed: int) -> _Pool:
    device = torch.device(config.device)
    gen = torch.Generator(device=device).manual_seed(seed)
    # fp16 under the interpreter, whose bf16 arithmetic is wrong; both kernels take either.
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float16
    cache = build_mla_cache([shape.context] * shape.batch, block_size=shape.block_size,
                            kv_lora_rank=shape.kv_lora_rank, rope_dim=shape.rope_dim, dtype=dtype, device=device,
                            shuffle=True, generator=gen)
    if shape.kv == "fp8":
        cache = quantize_mla_fp8(cache)
    row_bytes = shape.kv_lora_rank + shape.rope_dim
    n_rot = rotations(shape.batch * shape.context * row_bytes * 2, torch.cuda.mem_get_info()[0]) \
        if device.type == "cuda" else 1
    q_latent = torch.randn(n_rot, shape.batch, shape.n_heads, shape.kv_lora_rank, device=device, generator=gen,
                           dtype=torch.float32).to(dtype)
    q_rope = torch.randn(n_rot, shape.batch, shape.n_heads, shape.rope_dim, device=device, generator=gen,
                         dtype=torch.float32).to(dtype)
    rows = sorted({0, shape.batch - 1})
    checked = replace(cache, block_tables=cache.block_tables[rows], seq_lens=cache.seq_lens[rows])
    reference = mla_decode_reference(q_latent[0, rows], q_rope[0, rows], checked, sm_scale=SM_SCALE)
    return _Pool(shape=shape, cache=cache, q_latent=q_latent, q_rope=q_rope, rows=rows, reference=reference)


def _contenders(x: _Pool, config: MlaRunConfig) -> list[tuple[str, object, str]]:
    """``(name, call(i) or the reason it does not run, note)`` of each contender on this pool."""
    triton_config = default_mla_config(x.shape.n_heads)
    calls: list[tuple[str, object, str]] = [(
        "mla", lambda i: mla_decode_attention(x.q_latent[i], x.q_rope[i], x.cache, sm_scale=SM_SCALE,
                                              validate=False), "this project's kernel, default config"),
        ("mla_triton", lambda i: mla_decode_attention(x.q_latent[i], x.q_rope[i], x.cache, sm_scale=SM_SCALE,
                                                      config=triton_config, validate=False),
         "this project's Triton kernel, its default config")]
    if not config.peers:
        return calls + [(name, "not asked for in this run", "") for name in PEER_CONTENDERS]
    if x.shape.kv != "bf16":
        return calls + [(name, "SGLang's FP8 path quantises the query too: another computation", "")
                        for name in PEER_CONTENDERS]
    try:
        module = load_sglang_decode()
    except FileNotFoundError as exc:
        return calls + [(name, str(exc), "") for name in PEER_CONTENDERS]
    for name in PEER_CONTENDERS:
        splits = int(name.rsplit("_", 1)[1])
        calls.append((name, sglang_mla_call(module, x.q_latent, x.q_rope, x.cache, sm_scale=SM_SCALE,
                                            kv_splits=splits), f"SGLang Triton decode_attention_fwd, {splits} splits"))
    return calls


def _time(name: str, call, note: str, x: _Pool, config: MlaRunConfig, ceilings: Ceilings) -> Measurement:
    work = mla_flops(x.shape)
    if isinstance(call, str):
        return Measurement(contender=name, status="skipped", unit=UNIT, work=work, note=call)
    tol = tolerance("mla_decode", x.shape.kv).atol

    def check() -> tuple[float, str]:
        out = call(0)
        return float((out[x.rows].float() - x.reference).abs().max()), f"{note}; vs fp32 reference, rows {x.rows}"

    if config.device == "cpu":
        try:
            err, words = check()
            begin = time.perf_counter()
            call(0)
            ms = (time.perf_counter() - begin) * 1e3
        except Exception as exc:  # noqa: BLE001 - a failure is this contender's record
            return Measurement(contender=name, status="error", unit=UNIT, work=work,
                               note=f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}")
        return Measurement(contender=name, status="ok", median_ms=ms, timing="eager", eager_ms=ms, unit=UNIT,
                           work=work, rate=work / (ms * 1e-3) / 1e12, share_of_datasheet=None, max_abs_err=err,
                           note=words + f"; held to {tol:g}")
    state = {"i": 0}

    def run() -> object:
        state["i"] = (state["i"] + 1) % x.rotations
        return call(state["i"])

    return measure(name, run, unit=UNIT, work=work, check=check, measured_ceiling=ceilings.matmul_tflops,
                   datasheet_ceiling=ceilings.datasheet_tflops, warmup_ms=config.warmup_ms, rep_ms=config.rep_ms,
                   graph_calls=x.rotations)


def _bench_shape(shape: MlaShape, config: MlaRunConfig, ceilings: Ceilings, seed: int) -> MlaResult:
    tol_key = ("mla_decode", shape.kv)
    common = dict(shape=shape, tolerance=" ".join(tol_key), atol=tolerance(*tol_key).atol)
    x = None
    try:
        x = _new_pool(shape, config, seed)
        splits = mla_num_splits(x.q_latent[0], x.cache)
        rows = tuple(_time(name, call, note, x, config, ceilings) for name, call, note in _contenders(x, config))
        return MlaResult(num_splits=splits, measurements=rows, **common)
    except Exception as exc:  # noqa: BLE001 - the pool could not be built (out of memory): every row says so
        status = "oom" if is_oom(exc) else "error"
        words = f"building the pool: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        return MlaResult(num_splits=None, measurements=tuple(
            Measurement(contender=name, status=status, unit=UNIT, work=mla_flops(shape), note=words)
            for name in MLA_CONTENDERS), **common)
    finally:
        x = None
        if config.device == "cuda":
            free_cuda_memory()


def run_mla(config: MlaRunConfig = MlaRunConfig(), *, progress: ProgressFn | None = None,
            command: str = "kernels.bench.mla_family.run_mla()") -> MlaReport:
    """The copy and matmul ceilings, then every shape of ``config``; the report with its targets."""
    if config.device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("the MLA run needs a CUDA GPU (or MlaRunConfig(device='cpu') for the interpreter)")
    begin = time.perf_counter()
    shapes = [MlaShape(batch=b, context=L, n_heads=h, kv_lora_rank=config.kv_lora_rank, rope_dim=config.rope_dim,
                       block_size=config.block_size, kv=kv)
              for h in config.heads for b, L in config.shapes for kv in config.kv_formats]
    total = 1 + len(shapes)
    if progress is not None:
        progress(ProgressEvent(done=0, total=total, message="ceilings: copy bandwidth and matmul"))
    ceilings = measure_ceilings()
    results = []
    for i, s in enumerate(shapes):
        if progress is not None:
            progress(ProgressEvent(done=1 + i, total=total, message=f"mla {s.label}"))
        results.append(_bench_shape(s, config, ceilings, config.seed + i))
    results_t = tuple(results)
    return MlaReport(schema=SCHEMA, schema_version=SCHEMA_VERSION, provenance=environment(command),
                     ceilings=ceilings, results=results_t, targets=compute_mla_targets(results_t, ceilings),
                     wall_s=time.perf_counter() - begin)


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def format_mla(report: MlaReport) -> str:
    """The run as text: per shape each contender's time, TFLOP/s, share of the bound, error."""
    p, c = report.provenance, report.ceilings
    lines = [f"device {p.device}, driver {p.driver or '?'}, torch {p.torch}, triton {p.triton}, commit {p.commit or '?'}",
             f"date {p.date}  command: {p.command}",
             f"ceilings: copy {_fmt(c.copy_tbps, '.2f')} TB/s, bf16 matmul {_fmt(c.matmul_tflops, '.0f')} TFLOP/s",
             "ms g: CUDA-graph replay; of bound: the ceilings' least time for the bytes and FLOPs over the time"]
    for r in report.results:
        bound = bound_ms(r.shape, c)
        lines.append(f"\n{r.shape.label} rank {r.shape.kv_lora_rank}+{r.shape.rope_dim} page {r.shape.block_size}: "
                     f"splits {r.num_splits or '-'}, bound {_fmt(bound, '.4f')} ms, held to {r.tolerance}")
        for m in r.measurements:
            if m.status != "ok":
                lines.append(f"    {m.contender:<17} {m.status:<8} {m.note[:100]}")
                continue
            share = bound / m.median_ms if bound and m.median_ms else None
            mark = "g" if m.timing == "cuda_graph" else " "
            lines.append(f"    {m.contender:<17} {_fmt(m.median_ms, '9.4f')} ms{mark} {_fmt(m.rate, '6.0f')} TFLOP/s  "
                         f"of bound {_fmt(share, '.2f')}  err {_fmt(m.max_abs_err, '.1e')}")
    lines.append(f"\nrun took {_fmt(report.wall_s, '.0f')} s\ntargets")
    for t in report.targets:
        lines.append(f"  [{'MET ' if t.met else 'MISS'}] {t.name:<26} {measured_text(t) or '-':>7} "
                     f"(need >= {t.required})  {t.detail}")
    return "\n".join(lines)

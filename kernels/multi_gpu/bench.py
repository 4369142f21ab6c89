"""The multi-GPU harness: the TP decode step, the all-reduce sweep and the KV transfer, timed on
every rank in lockstep, gathered on rank 0 and joined with a :class:`~kernels.multi_gpu.records.Predictor`.

Timing. ``triton.testing.do_bench`` picks its repetition count from a first estimate, so two
ranks could run different numbers of calls and deadlock in a collective; here every rank runs
the same fixed count: ``warmup`` calls, then ``trials`` timings of ``iters`` calls each, between
CUDA events (``time.perf_counter`` on the CPU), the median trial divided by ``iters``. The TP step
and the all-reduce are captured in a CUDA graph of ``iters`` calls and replayed where NCCL allows
it (falling back to plain calls, noted); the transfers run as plain calls (milliseconds each, so
launch overhead does not count). Each figure is the slowest rank's: a collective ends when its
last rank does. Unlike the single-GPU harness the L2 is not flushed between calls, so a decode
shape whose KV fits the L2 (~50 MB) reads faster than HBM allows; the larger shapes are unaffected.

Every rank builds the same full-size layer from the same seed, cuts its own shard
(:func:`kernels.multi_gpu.tp_step.shard_layer`) and checks the reduced output against the
unsharded float32 layer on ``check_rows`` sequences before timing. The receiver of a transfer
rebuilds the sender's request from the sender's seed and compares the blocks it received with
it byte for byte; the peer copy (rank 0 alone, into its own copy of the receiver's pools on
cuda:1) is compared the same way. Ranks agree that a case was built and a shard cut (out of
memory on one rank makes a record on all) before any collective, so one rank's failure cannot
leave the others waiting; anything else that stalls a rank ends at the process group's timeout
(:mod:`kernels.multi_gpu.env`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta

import torch
import torch.distributed as dist

from kernels.bench.records import DecodeShape
from kernels.bench.timing import is_oom
from kernels.multi_gpu.records import (
    SCHEMA, SCHEMA_VERSION, AllReducePoint, MultiGpuProvenance, MultiGpuReport, Predictor, TPStepResult,
    TransferResult, bus_bandwidth_gbps, compute_targets, with_predictions,
)
from kernels.multi_gpu.tp_step import (
    allreduce_bytes, build_layer, local_partial, reference_output, shard_layer, tp_decode_step,
)
from kernels.multi_gpu.transfer import (
    METHODS, TransferCase, build_request, copy_request, empty_request, recv_request, request_bytes, send_request,
)
from kernels.multi_gpu import env

__all__ = ["TransferModel", "TRANSFER_MODELS", "PROMPTS", "BenchConfig", "bench_worker", "run_bench"]

SEED = 1234
PROMPTS = (1024, 2048, 4096, 8192, 16384, 32768)


@dataclass(frozen=True, kw_only=True)
class TransferModel:
    """One layout's request geometry, named after the catalogue model it copies (data/models/)."""

    model: str  # catalogue id, for the planner's prediction
    layout: str
    layers: int
    n_kv_heads: int
    head_dim: int
    window: int | None = None


# Published config.json figures (data/models/): Llama-3.1-8B 32 layers × 8 KV heads × 128;
# Mistral-7B-v0.1 the same with sliding_window 4096 on every layer; DeepSeek-V3 61 MLA layers of
# kv_lora_rank 512 + qk_rope_head_dim 64 = 576 values a token.
TRANSFER_MODELS = (
    TransferModel(model="llama-3.1-8b", layout="full", layers=32, n_kv_heads=8, head_dim=128),
    TransferModel(model="mistral-7b", layout="sliding", layers=32, n_kv_heads=8, head_dim=128, window=4096),
    TransferModel(model="deepseek-v3", layout="mla", layers=61, n_kv_heads=1, head_dim=576),
)


@dataclass(frozen=True, kw_only=True)
class BenchConfig:
    """What one run measures and how (defaults: the full run on GPUs)."""

    decode_shapes: tuple[DecodeShape, ...]
    tp_sizes: tuple[int, ...] = (1, 2, 4, 8)  # those above the world size are dropped
    transfer_models: tuple[TransferModel, ...] = TRANSFER_MODELS
    prompts: tuple[int, ...] = PROMPTS
    kv_dtypes: tuple[str, ...] = ("bf16", "fp8")
    block_sizes: tuple[int, ...] = (16, 64)
    modes: tuple[str, ...] = ("whole", "per_layer")
    methods: tuple[str, ...] = METHODS  # NCCL send/recv, and the peer copy where the GPUs allow it
    attention: str = "kernel"  # "reference" on the CPU, where the interpreter is too slow to time
    device: str = "cuda"
    warmup: int = 3
    iters: int = 10
    trials: int = 5
    cuda_graphs: bool = True
    check_rows: int = 2  # sequences of each batch checked against the unsharded reference
    run_tp: bool = True
    run_all_reduce: bool = True
    run_transfer: bool = True


# ----------------------------------------------------------------------------------------------
# Timing in lockstep
# ----------------------------------------------------------------------------------------------


def _slowest(ms: float, group: dist.ProcessGroup | None, device: torch.device) -> float:
    t = torch.tensor([ms], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return float(t.item())


def _agree(ok: bool, group: dist.ProcessGroup | None, device: torch.device) -> bool:
    """True on every rank of ``group`` when it is true on all of them."""
    t = torch.tensor([1 if ok else 0], dtype=torch.int32, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN, group=group)
    return bool(t.item())


def _trial_ms(run: Callable[[], object], iters: int, device: torch.device) -> float:
    """Milliseconds per call of ``run`` (which makes ``iters`` calls): CUDA events, or the host clock."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / iters
    begin = time.perf_counter()
    run()
    return (time.perf_counter() - begin) * 1e3 / iters


def _calls(fn: Callable[[], object], cfg: BenchConfig) -> Callable[[], None]:
    """``cfg.iters`` calls of ``fn``: one timed trial."""
    def calls() -> None:
        for _ in range(cfg.iters):
            fn()

    return calls


def _graphed(fn: Callable[[], object], cfg: BenchConfig) -> tuple[Callable[[], object] | None, str]:
    """A CUDA graph of ``cfg.iters`` calls of ``fn`` (its replay), or None and why capture failed."""
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()  # NCCL and the kernel set up outside the capture
        torch.cuda.current_stream().wait_stream(side)
        captured = torch.cuda.CUDAGraph()
        with torch.cuda.graph(captured):
            _calls(fn, cfg)()
        return captured.replay, ""
    except Exception as exc:  # noqa: BLE001 - NCCL or the kernel refused capture: time plain calls
        torch.cuda.synchronize()
        return None, f"graph capture failed ({type(exc).__name__}), eager time"


def _median_ms(run: Callable[[], object], cfg: BenchConfig, device: torch.device) -> float:
    """The median of ``cfg.trials`` trials of ``run`` (``cfg.iters`` calls each), ms per call."""
    return statistics.median(_trial_ms(run, cfg.iters, device) for _ in range(cfg.trials))


def _time(fn: Callable[[], object], cfg: BenchConfig, device: torch.device, group: dist.ProcessGroup | None,
          graph: bool) -> tuple[float, str, str]:
    """(ms per call on the slowest rank of ``group``, "cuda_graph" or "eager", a note). Every rank
    of ``group`` calls it with the same ``cfg``: the same number of calls of ``fn`` on each."""
    for _ in range(cfg.warmup):
        fn()
    run, timing, note = _calls(fn, cfg), "eager", ""
    if graph and cfg.cuda_graphs and device.type == "cuda":
        replay, note = _graphed(fn, cfg)
        # Capture is per rank: if one rank fell back, all time plain calls (the same call count).
        if _agree(replay is not None, group, device):
            run, timing = replay, "cuda_graph"
    return _slowest(_median_ms(run, cfg, device), group, device), timing, note


def _failure_status(exc: BaseException) -> str:
    return "oom" if is_oom(exc) else "error"


def _short(exc: BaseException) -> str:
    """The exception in one line of at most about 200 characters, for a record's note."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"


def _free(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()


# ----------------------------------------------------------------------------------------------
# The three sections (every rank runs them; rank 0 keeps the records)
# ----------------------------------------------------------------------------------------------


def _tp_fits(shape: DecodeShape, tp: int) -> str:
    """Why ``tp`` cannot shard ``shape`` ("" when it can)."""
    if shape.n_q_heads % tp:
        return f"TP {tp} does not divide {shape.n_q_heads} query heads"
    kv = shape.n_kv_heads
    if (tp <= kv and kv % tp) or (tp > kv and tp % kv):
        return f"TP {tp} and {kv} KV heads: neither divides the other"
    return ""


def _tp_steps(rank: int, cfg: BenchConfig, tps: tuple[int, ...], groups: dict, device: torch.device) -> list:
    rows = []
    for shape in cfg.decode_shapes:
        hidden = shape.n_q_heads * shape.head_dim
        message = allreduce_bytes(shape.batch, hidden)
        common = dict(shape=shape, hidden=hidden, allreduce_bytes=message)
        try:
            generator = torch.Generator(device=device).manual_seed(SEED)
            full = build_layer([shape.context] * shape.batch, n_q_heads=shape.n_q_heads, n_kv_heads=shape.n_kv_heads,
                               head_dim=shape.head_dim, hidden=hidden, block_size=shape.block_size,
                               dtype=shape.dtype, device=device, generator=generator)
            rows_checked = sorted({0, shape.batch - 1})[:max(cfg.check_rows, 1)]
            reference = reference_output(full, rows_checked)
            built, failure = True, None
        except Exception as exc:  # noqa: BLE001 - this shape becomes a failure record on every rank
            built, failure, full = False, exc, None
            _free(device)
        if not _agree(built, None, device):
            note = "" if failure is None else _short(failure)
            status = "error" if failure is None else _failure_status(failure)
            rows += [TPStepResult(tp=tp, status=status, note=note or "another rank failed to build", **common)
                     for tp in tps]
            continue
        for tp in tps:
            why = _tp_fits(shape, tp)
            if why:
                rows.append(TPStepResult(tp=tp, status="skipped", note=why, **common))
                continue
            if rank < tp:
                rows.append(_one_step(full, reference, rows_checked, tp, rank, groups[tp], cfg, device, common))
            dist.barrier()
        del full, reference
        _free(device)
    return rows


def _one_step(full, reference, rows_checked, tp, rank, group, cfg, device, common) -> TPStepResult:
    try:
        shard, failure = shard_layer(full, tp=tp, rank=rank), None
    except Exception as exc:  # noqa: BLE001 - out of memory on one rank: a record on all of them
        shard, failure = None, exc
        _free(device)
    if not _agree(failure is None, group, device):
        status = "error" if failure is None else _failure_status(failure)
        note = "another rank failed to cut its shard" if failure is None else _short(failure)
        return TPStepResult(tp=tp, status=status, note=note, **common)
    out = tp_decode_step(shard, group=group, attention=cfg.attention)
    err = (out[rows_checked].float() - reference).abs().max()
    err = _slowest(float(err), group, device) if tp > 1 else float(err)
    local_ms, timing, note = _time(lambda: local_partial(shard, attention=cfg.attention, validate=False),
                                   cfg, device, group, graph=True)
    step_ms, step_timing, step_note = _time(
        lambda: tp_decode_step(shard, group=group, attention=cfg.attention, validate=False), cfg, device, group,
        graph=True)
    allreduce_ms = None
    if tp > 1:
        message = torch.zeros(out.shape, dtype=out.dtype, device=device)
        allreduce_ms, _, _ = _time(lambda: dist.all_reduce(message, group=group), cfg, device, group, graph=True)
    timing = timing if timing == step_timing else "mixed"
    return TPStepResult(tp=tp, status="ok", step_ms=step_ms, local_ms=local_ms, allreduce_ms=allreduce_ms,
                        timing=timing, max_abs_err=err, note="; ".join(n for n in (note, step_note) if n), **common)


def _all_reduce_sweep(rank: int, cfg: BenchConfig, tps: tuple[int, ...], groups: dict, device: torch.device) -> list:
    sizes = sorted({allreduce_bytes(s.batch, s.n_q_heads * s.head_dim) for s in cfg.decode_shapes})
    points = []
    for ranks in (t for t in tps if t > 1):
        for n_bytes in sizes:
            if rank < ranks:
                buffer = torch.zeros(n_bytes // 2, dtype=torch.bfloat16, device=device)
                ms, timing, note = _time(lambda: dist.all_reduce(buffer, group=groups[ranks]), cfg, device,
                                         groups[ranks], graph=True)
                points.append(AllReducePoint(ranks=ranks, bytes=n_bytes, status="ok", ms=ms,
                                             algbw_gbps=n_bytes / (ms * 1e-3) / 1e9,
                                             busbw_gbps=bus_bandwidth_gbps(n_bytes, ranks, ms), timing=timing,
                                             note=note))
            dist.barrier()
    return points


def _next_device(device: torch.device) -> torch.device:
    """The receiver's device as rank 0 sees it: cuda:1 from cuda:0 (the CPU stays the CPU)."""
    return torch.device("cuda", device.index + 1) if device.type == "cuda" else device


def _peer_access(device: torch.device) -> bool | None:
    """Whether ``device`` can address the next GPU's memory directly (None on the CPU)."""
    if device.type != "cuda":
        return None
    return bool(torch.cuda.can_device_access_peer(device, _next_device(device)))


def _peer_copy_ms(n_bytes: int, cfg: BenchConfig, device: torch.device) -> float:
    """``tensor.copy_`` of one contiguous buffer of ``n_bytes`` from this rank's device to the
    next one (rank 0: cuda:0 to cuda:1, peer to peer where allowed; on the CPU, between two host
    buffers), ms: the rate a transfer is held against. PyTorch issues a copy between GPUs on the
    source's current stream, which the CUDA events time."""
    src = torch.empty(n_bytes, dtype=torch.uint8, device=device)
    dst = torch.empty(n_bytes, dtype=torch.uint8, device=_next_device(device))
    copy = _calls(lambda: dst.copy_(src), cfg)
    copy()  # warm: peer access enabled, buffers touched
    return _median_ms(copy, cfg, device)


def _transfers(rank: int, cfg: BenchConfig, pair: dist.ProcessGroup | None, device: torch.device) -> list:
    rows = []
    for geometry in cfg.transfer_models:
        for kv_dtype in cfg.kv_dtypes:
            for block_size in cfg.block_sizes:
                for prompt in cfg.prompts:
                    case = TransferCase(layout=geometry.layout, layers=geometry.layers,
                                        n_kv_heads=geometry.n_kv_heads, head_dim=geometry.head_dim,
                                        prompt_tokens=prompt, block_size=block_size, kv_dtype=kv_dtype,
                                        window=geometry.window)
                    if rank < 2:
                        rows += _one_transfer(case, geometry.model, rank, cfg, pair, device)
                    dist.barrier()
    return rows


def _transfer_record(case: TransferCase, model: str, mode: str, method: str, *, note: str = "",
                     **fields) -> TransferResult:
    """The record of ``case`` moved in ``mode`` by ``method``."""
    return TransferResult(model=model, layout=case.layout, mode=mode, method=method, kv_dtype=case.kv_dtype,
                          block_size=case.block_size, prompt_tokens=case.prompt_tokens, layers=case.layers,
                          n_kv_heads=case.n_kv_heads, head_dim=case.head_dim, window=case.window, blocks=case.blocks,
                          messages=case.messages(mode), bytes=case.wire_bytes, note=note, **fields)


def _one_transfer(case: TransferCase, model: str, rank: int, cfg: BenchConfig, pair, device) -> list:
    """Every mode and method of one case, on ranks 0 (sender) and 1 (receiver); records on rank 0."""
    peer_copy = rank == 0 and "peer_copy" in cfg.methods and _peer_access(device) is not False
    try:
        generator = torch.Generator(device=device).manual_seed(SEED + rank)
        req = (build_request(case, generator=generator, device=device) if rank == 0
               else empty_request(case, generator=generator, device=device))
        expected = (request_bytes(build_request(case, generator=torch.Generator(device=device).manual_seed(SEED),
                                                device=device)) if rank == 1 else None)
        # Rank 0's own copy of the receiver's pools on the next GPU, for the peer copy.
        peer = (empty_request(case, generator=torch.Generator(device=device).manual_seed(SEED + 1),
                              device=_next_device(device)) if peer_copy else None)
        copy_ms = _peer_copy_ms(case.wire_bytes, cfg, device) if rank == 0 else 0.0
        built, failure = True, None
    except Exception as exc:  # noqa: BLE001 - the case becomes a failure record
        built, failure, req, peer = False, exc, None, None
        _free(device)
    if not _agree(built, pair, device):
        status = "error" if failure is None else _failure_status(failure)
        note = "another rank failed to build" if failure is None else _short(failure)
        return [_transfer_record(case, model, mode, method, status=status, note=note)
                for mode in cfg.modes for method in cfg.methods]
    copy_ms = _slowest(copy_ms, pair, device)  # rank 0's figure, on both ranks
    rate = dict(copy_ms=copy_ms, copy_gbps=case.wire_bytes / (copy_ms * 1e-3) / 1e9)
    rows = []
    for mode in cfg.modes:
        for method in cfg.methods:
            if method == "nccl":
                rows.append(_nccl_transfer(case, model, mode, req, expected, rank, cfg, pair, device, rate))
            elif peer_copy:
                rows.append(_peer_transfer(case, model, mode, req, peer, cfg, device, rate))
            else:
                rows.append(_transfer_record(case, model, mode, method, status="skipped",
                                             note="no peer access from cuda:0 to cuda:1"))
    del req, expected, peer
    _free(device)
    return rows


def _nccl_transfer(case, model, mode, req, expected, rank, cfg, pair, device, rate) -> TransferResult:
    """send/recv of the request's pieces: timed, the bare wire alone ("whole"), then checked."""
    move = ((lambda: send_request(req, mode=mode, dst=1, group=pair)) if rank == 0
            else (lambda: recv_request(req, mode=mode, src=0, group=pair)))
    ms, _, _ = _time(move, cfg, device, pair, graph=False)
    wire_ms = _wire_ms(case, rank, cfg, pair, device) if mode == "whole" else None
    exact = _checked_transfer(req, mode, rank, expected, pair, device)
    gbps = case.wire_bytes / (ms * 1e-3) / 1e9
    return _transfer_record(case, model, mode, "nccl", status="ok", ms=ms, wire_ms=wire_ms, gbps=gbps,
                            share_of_copy=gbps / rate["copy_gbps"], bit_exact=exact, **rate)


def _peer_transfer(case, model, mode, req, peer, cfg, device, rate) -> TransferResult:
    """Rank 0 alone: the request's pieces copied into its copy of the receiver's pools on the
    next GPU (:func:`kernels.multi_gpu.transfer.copy_request`), timed, then checked."""
    move = lambda: copy_request(req, peer, mode=mode)  # noqa: E731 - the timed call
    for _ in range(cfg.warmup):
        move()
    ms = _median_ms(_calls(move, cfg), cfg, device)
    for pool in peer.regions:
        pool.view(torch.uint8).zero_()
    move()
    exact = bool(torch.equal(request_bytes(peer).to(device), request_bytes(req)))
    gbps = case.wire_bytes / (ms * 1e-3) / 1e9
    return _transfer_record(case, model, mode, "peer_copy", status="ok", ms=ms, gbps=gbps,
                            share_of_copy=gbps / rate["copy_gbps"], bit_exact=exact, **rate)


def _wire_ms(case: TransferCase, rank: int, cfg: BenchConfig, pair, device) -> float:
    """The send/recv of a buffer of the request's size alone: no packing, no scatter."""
    buffer = torch.empty(case.wire_bytes, dtype=torch.uint8, device=device)
    move = (lambda: dist.send(buffer, 1, group=pair)) if rank == 0 else (lambda: dist.recv(buffer, 0, group=pair))
    return _time(move, cfg, device, pair, graph=False)[0]


def _checked_transfer(req, mode: str, rank: int, expected, pair, device) -> bool:
    """One more transfer into zeroed pools, then the receiver's blocks against the sender's,
    rebuilt from its seed: True on both ranks when every byte matches."""
    if rank == 0:
        send_request(req, mode=mode, dst=1, group=pair)
        return _agree(True, pair, device)
    for pool in req.regions:
        pool.view(torch.uint8).zero_()
    recv_request(req, mode=mode, src=0, group=pair)
    return _agree(bool(torch.equal(request_bytes(req), expected)), pair, device)


def bench_worker(rank: int, world_size: int, cfg: BenchConfig) -> dict:
    """One rank of a run (the :func:`kernels.multi_gpu.env.launch` target): the multicast-off
    variables as this rank saw them, and on rank 0 the records by section and whether its GPU
    has peer access to the next."""
    device = torch.device("cuda", rank) if cfg.device == "cuda" else torch.device("cpu")
    tps = tuple(t for t in cfg.tp_sizes if t <= world_size)
    # Every rank creates every group, members or not (torch.distributed requires it). TP 1 has
    # its one-rank group too: its timing agrees and takes the slowest rank within that group,
    # never the world, whose other ranks are not there (they wait at the next barrier).
    groups = {t: dist.new_group(list(range(t))) for t in tps}
    pair = dist.new_group([0, 1]) if world_size >= 2 else None
    out = {
        "tp_steps": _tp_steps(rank, cfg, tps, groups, device) if cfg.run_tp else [],
        "all_reduce": _all_reduce_sweep(rank, cfg, tps, groups, device) if cfg.run_all_reduce else [],
        "transfers": _transfers(rank, cfg, pair, device) if cfg.run_transfer and pair is not None else [],
    }
    seen = {"multicast_env": env.rank_multicast_env(rank, world_size)}
    return {**out, **seen, "peer_access": _peer_access(device)} if rank == 0 else seen


# ----------------------------------------------------------------------------------------------
# The run
# ----------------------------------------------------------------------------------------------


def run_bench(cfg: BenchConfig, *, world_size: int, provenance: MultiGpuProvenance, predictor: Predictor | None,
              start_method: str = "spawn", timeout: timedelta = env.GROUP_TIMEOUT,
              deadline_s: float = env.RUN_DEADLINE_S) -> MultiGpuReport:
    """Run ``cfg`` on ``world_size`` ranks (NCCL on ``cuda:0..n-1``, or gloo on the CPU when
    ``cfg.device == "cpu"``) and return the report: records, predictions, targets. The
    provenance's ``multicast_env`` becomes what the ranks ran with (every distinct line of them;
    one line when all agree, as :func:`kernels.multi_gpu.env.launch` makes them), and its
    ``peer_access`` what rank 0 found."""
    backend = "nccl" if cfg.device == "cuda" else "gloo"
    ranks = env.launch(bench_worker, world_size, cfg, backend=backend, start_method=start_method,
                       timeout=timeout, deadline_s=deadline_s)
    seen = "; ".join(dict.fromkeys(r["multicast_env"] for r in ranks))
    provenance = replace(provenance, multicast_env=seen, peer_access=ranks[0]["peer_access"])
    sections = {name: tuple(ranks[0][name]) for name in ("tp_steps", "all_reduce", "transfers")}
    targets = compute_targets(sections["tp_steps"], sections["all_reduce"], sections["transfers"])
    report = MultiGpuReport(schema=SCHEMA, schema_version=SCHEMA_VERSION, provenance=provenance, targets=targets,
                            **sections)
    return with_predictions(report, predictor)


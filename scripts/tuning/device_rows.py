"""Shared parts of the H200 check-and-time scripts: rows written by child processes, and the
harness's inputs for a decode shape.

Each script runs its rows in child processes (``python -m <script> --child <part> --items ...
--rows <file>``) that append one JSON line per row and announce each row before running it
(``{"event": "start", "item": ...}``): a row that faults (an illegal address poisons the whole
CUDA context) is recorded as crashed, the child is restarted without it, and a faulting
configuration is not tried again.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Container
from pathlib import Path

from inputs.uploads import dumps_strict

__all__ = ["finite", "error_text", "emit", "run_rows", "add_child_options", "run_child", "decode_shape_inputs",
           "quantized_pools", "next_inputs", "cudnn_call", "config_row", "write_report", "parts_main", "ROOT"]

ROOT = Path(__file__).resolve().parents[2]  # the repository: where ``-m scripts...`` resolves


def finite(x: float) -> float | str:
    """A float for the JSON report: non-finite values (a NaN error) as their name."""
    return x if math.isfinite(x) else repr(x)


def error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"


def emit(out, **row) -> None:
    """One row (or a ``start`` event) as a JSON line, flushed at once: a crash loses nothing."""
    out.write(dumps_strict(row) + "\n")
    out.flush()


def run_rows(module: str, part: str, items: list[list], deadline: float, *, baselines: Container,
             print_row: Callable[[dict], None]) -> list[dict]:
    """Rows of ``items`` (``[case or shape, contender]``), each from a child of ``module``; a child
    that dies takes only its row, and a non-baseline contender that faulted is skipped after."""
    rows: list[dict] = []
    todo = [list(it) for it in items]
    while todo:
        with tempfile.NamedTemporaryFile("r", suffix=".jsonl", delete=False) as f:
            path = f.name
        cmd = [sys.executable, "-m", module, "--child", part, "--items", json.dumps(todo), "--deadline",
               repr(deadline), "--rows", path]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT,
                                  timeout=max(30.0, deadline - time.time() + 60))
            rc, tail = done.returncode, " ".join((done.stderr or "").split())[-400:]
        except subprocess.TimeoutExpired:
            rc, tail = -1, "child timed out"
        with open(path) as f:
            lines = [json.loads(line) for line in f if line.strip()]
        os.unlink(path)
        started = None
        for line in lines:
            if line.get("event") == "start":
                started = line["item"]
                continue
            started = None
            rows.append(line)
            todo.remove(line["item"])
            print_row(line)
        if rc == 0 and not todo:
            break
        if started is None:  # died outside a row (inputs, imports): nothing left can run
            rows += [dict(part=part, item=it, error=f"child exited {rc} before the row: {tail}") for it in todo]
            break
        rows.append(dict(part=part, item=started, crashed=True, error=f"process died (exit {rc}) in this row: {tail}"))
        print_row(rows[-1])
        todo.remove(started)
        if started[1] not in baselines:  # a faulting configuration would poison the next child too
            for it in [it for it in todo if it[1] == started[1]]:
                rows.append(dict(part=part, item=it, crashed=True, error="skipped: this configuration faulted earlier"))
                todo.remove(it)
    return rows


def add_child_options(parser, parts: tuple[str, ...]) -> None:
    """The hidden options :func:`run_rows` starts a child with (``--child part --items ...
    --deadline ... --rows file``), ``part`` one of ``parts``."""
    import argparse

    parser.add_argument("--child", choices=parts, help=argparse.SUPPRESS)
    parser.add_argument("--items", help=argparse.SUPPRESS)
    parser.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--rows", help=argparse.SUPPRESS)


def run_child(args, parts: dict[str, Callable]) -> None:
    """A child's side of :func:`run_rows`: ``parts[args.child](items, deadline, out)`` appending
    its rows to ``args.rows``."""
    with open(args.rows, "a") as out:
        parts[args.child](json.loads(args.items), args.deadline, out)


def decode_shape_inputs(batch: int, context: int, n_q_heads: int, memory_share: int) -> tuple:
    """``(label, bf16 KV bytes, DecodeInputs)`` of a harness decode shape (8 KV heads, d 128,
    block 16, bf16), rotated over as many copies as fit in ``1 / memory_share`` of free memory
    (at most 8), as the harness builds them."""
    import torch

    from kernels.bench.records import DecodeShape
    from kernels.bench.sweeps import _decode_inputs
    from kernels.bench.timing import rotations
    from kernels.theory import decode_kv_bytes

    shape = DecodeShape(batch=batch, context=context, n_q_heads=n_q_heads, n_kv_heads=8, head_dim=128,
                        block_size=16, dtype="bf16")
    kv_bytes = decode_kv_bytes(batch, context, 8, 128, 2)
    free, _ = torch.cuda.mem_get_info()
    n_rot = min(rotations(kv_bytes, free // memory_share), 8)
    return f"B{batch} L{context // 1024}K {n_q_heads}/8", kv_bytes, _decode_inputs(shape, n_rot, 0)


def quantized_pools(fmt: str, k16, v16) -> tuple:
    """``(k, v, kwargs)``: a bf16 pool pair quantised to ``fmt`` ("int4": ``Int4Pool`` pairs; "fp8":
    e4m3 pools, with their per-head scales in ``kwargs`` as the decode wrappers take them)."""
    from kernels.cache.int4 import quantize_pool_int4
    from kernels.cache.paged import quantize_kv_fp8

    if fmt == "int4":
        return quantize_pool_int4(k16), quantize_pool_int4(v16), {}
    k, v, ks, vs = quantize_kv_fp8(k16, v16)
    return k, v, dict(k_scale=ks, v_scale=vs)


def next_inputs(x, k=None, v=None, tables=None) -> tuple:
    """``(q, k, v, tables)`` of the next rotation of ``x`` (a ``DecodeInputs``; its bf16 pools and
    tables unless ``k``, ``v``, ``tables`` — ``[rotations, batch, blocks]`` — are given): each call
    reads another copy's tables, so a small shape's KV is not served from the L2."""
    i = x.rot.next()
    return x.q[i], x.k if k is None else k, x.v if v is None else v, (x.tables if tables is None else tables)[i]


def cudnn_call(x):
    """SDPA-cuDNN on the contiguous copy of ``x``'s KV, as the harness's contender times it."""
    from kernels.bench.contenders import DECODE

    cudnn = DECODE["sdpa_cudnn"]
    return cudnn.build(x, cudnn.prepare(x)).run


def config_row(part: str, label: str, x, cfg, splits: int | None, cudnn_ms: float) -> dict:
    """One bf16 decode config on ``x`` (a ``DecodeInputs``) at ``splits`` (None: its own split
    rule inside a CUDA graph), CUDA-graph median against ``cudnn_ms``: a row of ``part``, printed;
    a config that does not compile or fit is a row with its error, not the end of the call."""
    from kernels.bench.timing import graph_ms
    from kernels.decode.paged import decode_num_splits, paged_decode_attention

    name = f"{cfg.block_n}/{cfg.num_warps}/{cfg.num_stages}"
    try:
        used = splits or decode_num_splits(x.q[0], x.k, x.v, x.tables[0], x.lens, config=cfg, in_graph=True)

        def call():
            return paged_decode_attention(*next_inputs(x), x.lens, validate=False, config=cfg, num_splits=splits)
        ms = graph_ms(call, x.rot.n, 5.0, 30.0)
    except Exception as exc:  # noqa: BLE001 - a config that does not fit is a row, not the end
        print(f"  {name:<10} splits {splits}: {type(exc).__name__}", flush=True)
        return dict(part=part, shape=label, config=name, splits=splits, error=str(exc)[:200])
    print(f"  {name:<10} splits {used:>3}{'!' if splits else ' '} {ms * 1e3:7.1f} us {cudnn_ms / ms:.3f}x cuDNN",
          flush=True)
    return dict(part=part, shape=label, config=name, splits=used, forced=splits is not None, ms=ms, cudnn_ms=cudnn_ms,
                x_cudnn=cudnn_ms / ms)


def write_report(path: str, module: str, rows: list[dict], **extra) -> None:
    """A script's rows as strict JSON at ``path``, with the provenance of ``python3 -m module``
    (and any ``extra`` top-level entries)."""
    import dataclasses

    from kernels.bench.timing import environment

    with open(path, "w") as f:
        f.write(dumps_strict({"provenance": dataclasses.asdict(environment(f"python3 -m {module}")), "rows": rows,
                              **extra}, indent=1))


def parts_main(doc: str, module: str, parts: dict[str, Callable[[], list[dict]]], default: str,
               argv: list[str] | None = None) -> int:
    """The command line of a script made of named parts (each a function returning rows):
    ``--parts`` picks them (comma-separated, run in ``parts``' order), ``--json`` writes their rows
    with :func:`write_report` as ``python3 -m module``; ``doc``'s first line describes it."""
    import argparse

    import torch

    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--json", metavar="PATH", help="write the rows as JSON to PATH")
    p.add_argument("--parts", default=default, help="comma-separated: " + ", ".join(parts))
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        p.error("needs a CUDA GPU")
    chosen = args.parts.split(",")
    unknown = sorted(set(chosen) - set(parts))
    if unknown:
        p.error(f"unknown parts: {', '.join(unknown)}")
    rows = [row for name, part_rows in parts.items() if name in chosen for row in part_rows()]
    if args.json:
        write_report(args.json, module, rows)
    return 0

"""One GPU call: check and time every Gluon INT4 decode configuration against the Triton kernels.

Run on the H200 (the device lease is short, so one call checks and times everything, in well
under 140 s from a cold start, first compiles included):

    python3 -m scripts.tuning.h200_gluon_int4_check --json $OUT/gint4.json

1. Correctness: each ``GLUON_INT4_DECODE_CONFIGS`` entry on real-size INT4 pools
   (:func:`kernels.int4_cache.quantize_int4`: tails 1/17/97/1025/20000, block sizes 1/16/64/256,
   GQA 1/4/8, a bf16 and an fp16 query, head dim 64 and 128, split counts from the wave rule and
   forced 5 and 66, shuffled tables, NaN scales in every unused slot): max abs error against the
   float32 paged reference on the dequantised pools, printed beside ``tolerance("paged_decode",
   "int4")``.
2. Speed: CUDA-graph medians (``kernels.bench.timing.graph_ms`` over a rotation of inputs, the
   harness's method) of each configuration, of the Triton INT4 kernel (``paged_decode_int4``, its
   defaults, on the same pools) and of the Triton bf16 kernel on the bf16 KV the pools were
   quantised from, at B1 L32K 32/8, B8 L32K 32/8, B32 L16K 64/8, B128 L4K 32/8 (d 128, block 16).
   TB/s is each contender's own KV bytes over its time (``kernels.theory``: 68 B per token and
   head for INT4 at d 128, 256 for bf16). The summary prints each INT4 contender's speed over the
   bf16 kernel's (the ``decode_int4_vs_bf16`` ratio: the worst over the shapes with batch x
   context >= 256K; target 2.8) and over the Triton INT4 kernel's.

Each part runs in a child process that reports one JSON line per row and names the row it is
about to run: a configuration that faults (an illegal address poisons the whole CUDA context)
is recorded as an error row and the child is restarted without it. Past ``--budget`` seconds
the remaining rows are skipped, and say so. ``--configs 0,2`` limits the run to those entries.
Nothing runs at import.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from inputs.uploads import dumps_strict
from kernels.paged_decode_gluon_int4 import GLUON_INT4_DECODE_CONFIGS
from scripts.tuning.h200_gluon_decode_check import _emit, _error, _finite

# (batch, context, query heads); 8 KV heads, d 128, block 16.
SHAPES = [(1, 32768, 32), (8, 32768, 32), (32, 16384, 64), (128, 4096, 32)]
LARGE_TOKENS = 256 * 1024  # the decode targets' "large shape": batch x context at least this

# (label, lengths, block size, query heads, KV heads, head dim, query dtype, forced splits)
CHECKS = [
    ("tails 32/8 block 16", [1, 17, 97, 1025, 20000], 16, 32, 8, 128, "bf16", None),
    ("17-97 32/8 block 16", [17, 33, 61, 97], 16, 32, 8, 128, "bf16", None),
    ("20000+3 64/8 block 256, 5 splits", [20000, 3], 256, 64, 8, 128, "bf16", 5),
    ("1027+4096 8/8 block 1 fp16 q, 66 splits", [1027, 4096], 1, 8, 8, 128, "fp16", 66),
    ("3+333+4099 16/4 d64 block 32", [3, 333, 4099], 32, 16, 4, 64, "bf16", None),
    ("B1 32K 32/8 block 64", [32768], 64, 32, 8, 128, "bf16", None),
]
BASELINES = ("triton bf16", "triton int4")
ROOT = Path(__file__).resolve().parents[2]  # the repository: where ``-m scripts...`` resolves


def _name(who) -> str:
    return who if who in BASELINES else f"int4 {GLUON_INT4_DECODE_CONFIGS[who].name}"


# ---------------------------------------------------------------------------- child side


def _child_check(items: list[list[int]], deadline: float, out) -> None:
    from kernels.int4_cache import dequantize_int4, quantize_int4
    from kernels.paged_cache import build_paged_cache
    from kernels.paged_decode_gluon_int4 import gluon_int4_decode_plan, gluon_paged_decode_int4
    from kernels.paged_reference import paged_attention_reference
    from kernels.tolerances import tolerance

    tol = tolerance("paged_decode", "int4").atol
    for case in sorted({c for c, _ in items}):
        label, lens, bs, hq, hkv, d, q_dtype, splits = CHECKS[case]
        g = torch.Generator(device="cuda").manual_seed(len(lens) * 1000 + bs)
        c16 = build_paged_cache(lens, block_size=bs, n_kv_heads=hkv, head_dim=d, dtype=torch.bfloat16,
                                device="cuda", shuffle=True, generator=g, spare_blocks=5, poison_unused=True)
        c = quantize_int4(c16)
        del c16
        q = torch.randn(len(lens), hq, d, device="cuda", generator=g).to(
            {"bf16": torch.bfloat16, "fp16": torch.float16}[q_dtype])
        ref = paged_attention_reference(q, dequantize_int4(c.k), dequantize_int4(c.v), c.block_tables, c.seq_lens)
        for i in [i for cc, i in items if cc == case]:
            cfg = GLUON_INT4_DECODE_CONFIGS[i]
            row = dict(part="check", item=[case, i], check=label, config=_name(i), tol=tol)
            if time.time() > deadline:
                _emit(out, **row, error="skipped: time budget")
                continue
            _emit(out, event="start", item=[case, i])
            try:
                used = splits if splits is not None else gluon_int4_decode_plan(
                    q, c.k, c.v, c.block_tables, c.seq_lens, config=cfg)[0]
                got = gluon_paged_decode_int4(q, c.k, c.v, c.block_tables, c.seq_lens, num_splits=splits, config=cfg)
                err = float((got.float() - ref).abs().max())  # NaN anywhere makes this NaN
                _emit(out, **row, err=_finite(err), splits=used, ok=bool(err <= tol))
            except Exception as exc:  # noqa: BLE001 - a failed configuration is a row of the report
                _emit(out, **row, error=_error(exc))


def _child_speed(items: list[list], deadline: float, out) -> None:
    for s in sorted({s for s, _ in items}):
        _speed_shape(s, [who for ss, who in items if ss == s], deadline, out)
        torch.cuda.empty_cache()  # the shape's inputs died with the call


def _speed_shape(s: int, contenders: list, deadline: float, out) -> None:
    """The rows of shape ``SHAPES[s]``: the same KV for every contender (INT4: quantised from it)."""
    from kernels.bench.records import DecodeShape
    from kernels.bench.sweeps import _decode_inputs
    from kernels.bench.timing import graph_ms, rotations
    from kernels.int4_cache import dequantize_int4, quantize_pool_int4
    from kernels.paged_decode import paged_decode_attention
    from kernels.paged_decode_gluon_int4 import gluon_int4_decode_plan, gluon_paged_decode_int4
    from kernels.paged_decode_int4 import paged_decode_int4
    from kernels.theory import decode_int4_kv_bytes, decode_kv_bytes

    batch, ctx, hq = SHAPES[s]
    label = f"B{batch} L{ctx // 1024}K {hq}/8"
    shape = DecodeShape(batch=batch, context=ctx, n_q_heads=hq, n_kv_heads=8, head_dim=128, block_size=16,
                        dtype="bf16")
    bf16_bytes = decode_kv_bytes(batch, ctx, 8, 128, 2)
    free, _ = torch.cuda.mem_get_info()
    n_rot = min(rotations(bf16_bytes, free // 3), 8)
    x = _decode_inputs(shape, n_rot, 0)
    q, k, v, tables, lens, rot = x.q, x.k, x.v, x.tables, x.lens, x.rot
    k4, v4 = quantize_pool_int4(k), quantize_pool_int4(v)
    ref4 = x.reference(dequantize_int4(k4), dequantize_int4(v4))
    for who in contenders:  # the baselines first
        kv_bytes = bf16_bytes if who == "triton bf16" else decode_int4_kv_bytes(batch, ctx, 8, 128)
        row = dict(part="speed", item=[s, who], shape=label, large=batch * ctx >= LARGE_TOKENS,
                   contender=_name(who), rotations=n_rot, kv_bytes=kv_bytes)
        if time.time() > deadline:
            _emit(out, **row, error="skipped: time budget")
            continue
        _emit(out, event="start", item=[s, who])
        try:
            extra = {}
            if who == "triton bf16":
                def run():
                    i = rot.next()
                    return paged_decode_attention(q[i], k, v, tables[i], lens, validate=False)
                extra["err"] = x.err_of(paged_decode_attention(q[0], k, v, tables[0], lens))[0]
            elif who == "triton int4":
                def run():
                    i = rot.next()
                    return paged_decode_int4(q[i], k4, v4, tables[i], lens, validate=False)
                extra["err"] = x.err_of(paged_decode_int4(q[0], k4, v4, tables[0], lens), ref4)[0]
            else:
                cfg = GLUON_INT4_DECODE_CONFIGS[who]

                def run(cfg=cfg):
                    i = rot.next()
                    return gluon_paged_decode_int4(q[i], k4, v4, tables[i], lens, validate=False, config=cfg)
                extra["err"] = x.err_of(gluon_paged_decode_int4(q[0], k4, v4, tables[0], lens, config=cfg), ref4)[0]
                extra["splits"], extra["resident_per_sm"] = gluon_int4_decode_plan(q[0], k4, v4, tables[0], lens,
                                                                                   config=cfg)
            run()
            torch.cuda.synchronize()
            ms = graph_ms(run, n_rot, 5.0, 30.0)
            extra["err"] = _finite(extra["err"])
            _emit(out, **row, **extra, ms=ms, tbps=kv_bytes / (ms * 1e-3) / 1e12)
        except Exception as exc:  # noqa: BLE001 - a failed contender is a row of the report
            _emit(out, **row, error=_error(exc))


# ---------------------------------------------------------------------------- parent side


def _run_part(part: str, items: list[list], deadline: float) -> list[dict]:
    """Rows of ``items`` (check: [case, config]; speed: [shape, contender]), each from a child
    process; a child that dies takes only the row it was running, and the Gluon configuration
    in it is dropped from the rest of the part."""
    rows: list[dict] = []
    todo = [list(it) for it in items]
    while todo:
        with tempfile.NamedTemporaryFile("r", suffix=".jsonl", delete=False) as f:
            path = f.name
        cmd = [sys.executable, "-m", "scripts.tuning.h200_gluon_int4_check", "--child", part,
               "--items", json.dumps(todo), "--deadline", repr(deadline), "--rows", path]
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
            _print_row(line)
        if rc == 0 and not todo:
            break
        if started is None:  # died outside a row (inputs, imports): nothing left can run
            rows += [dict(part=part, item=it, error=f"child exited {rc} before the row: {tail}") for it in todo]
            break
        rows.append(dict(part=part, item=started, crashed=True, error=f"process died (exit {rc}) in this row: {tail}"))
        _print_row(rows[-1])
        todo.remove(started)
        if started[1] not in BASELINES:  # a faulting configuration would poison the next child too
            for it in [it for it in todo if it[1] == started[1]]:
                rows.append(dict(part=part, item=it, crashed=True, error="skipped: this configuration faulted earlier"))
                todo.remove(it)
    return rows


def _print_row(r: dict) -> None:
    what = r.get("check") or r.get("shape") or r["item"]
    name = r.get("config") or r.get("contender") or r["item"][1]
    if "error" in r:
        print(f"  {r['part']:<5} {str(what):<40} {str(name):<22} {r['error']}", flush=True)
    elif r["part"] == "check":
        print(f"  check {what:<40} {name:<22} err {r['err']} (tol {r['tol']:.0e}) splits {r['splits']} "
              f"{'ok' if r['ok'] else 'FAIL'}", flush=True)
    else:
        extra = f" splits {r['splits']} resident {r['resident_per_sm']}" if "splits" in r else ""
        print(f"  speed {what:<40} {name:<22} {r['ms']:.4f} ms {r['tbps']:.2f} TB/s err {r['err']}{extra}",
              flush=True)


def _ratios(rows: list[dict]) -> list[str]:
    """Each INT4 row's speed over the bf16 kernel's and the Triton INT4 kernel's on its shape, and
    each INT4 contender's worst ratio over bf16 on the large shapes (the target's figure)."""
    lines, worst = [], {}
    for shape in dict.fromkeys(r["shape"] for r in rows if "shape" in r):
        here = [r for r in rows if r.get("shape") == shape and "ms" in r]
        base = {r["contender"]: r["ms"] for r in here if r["contender"] in BASELINES}
        for r in here:
            if r["contender"] == "triton bf16":
                continue
            if "triton bf16" in base:
                r["x_bf16"] = base["triton bf16"] / r["ms"]
                if r["large"]:
                    worst[r["contender"]] = min(worst.get(r["contender"], math.inf), r["x_bf16"])
            if "triton int4" in base and r["contender"] != "triton int4":
                r["x_triton_int4"] = base["triton int4"] / r["ms"]
        lines.append(f"{shape}: " + " | ".join(
            f"{r['contender']} {r['ms']:.4f} ms" + (f" x bf16 {r['x_bf16']:.3f}" if "x_bf16" in r else "")
            + (f" x triton int4 {r['x_triton_int4']:.3f}" if "x_triton_int4" in r else "") for r in here))
    lines += [f"decode_int4_vs_bf16 (worst large shape) {name}: {ratio:.3f}" for name, ratio in worst.items()]
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", metavar="PATH", help="write the figures as JSON to PATH")
    p.add_argument("--configs", help="comma-separated indices into GLUON_INT4_DECODE_CONFIGS (default: all)")
    p.add_argument("--budget", type=float, default=105.0, help="seconds after which rows are skipped (default 105)")
    p.add_argument("--child", choices=("check", "speed"), help=argparse.SUPPRESS)
    p.add_argument("--items", help=argparse.SUPPRESS)
    p.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    p.add_argument("--rows", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        p.error("needs a CUDA GPU")
    if args.child:
        with open(args.rows, "a") as out:
            (_child_check if args.child == "check" else _child_speed)(json.loads(args.items), args.deadline, out)
        return 0
    indices = list(range(len(GLUON_INT4_DECODE_CONFIGS)))
    if args.configs:
        try:
            indices = sorted({int(i) for i in args.configs.split(",")})
            [GLUON_INT4_DECODE_CONFIGS[i] for i in indices]
        except (ValueError, IndexError):
            p.error(f"--configs: expected indices 0..{len(GLUON_INT4_DECODE_CONFIGS) - 1}, got {args.configs!r}")
    if not 1 <= args.budget <= 3600:
        p.error(f"--budget must be in 1..3600 seconds, got {args.budget}")
    from kernels.bench.timing import environment

    t0 = time.time()
    deadline = t0 + args.budget
    report: dict = {"provenance": dataclasses.asdict(environment("python3 -m scripts.tuning.h200_gluon_int4_check")),
                    "configs": [dict(dataclasses.asdict(GLUON_INT4_DECODE_CONFIGS[i]), index=i, name=_name(i))
                                for i in indices]}
    for part in ("check", "speed"):
        print(f"== {part} [{time.time() - t0:.0f} s]", flush=True)
        if part == "check":
            items = [[c, i] for c in range(len(CHECKS)) for i in indices]
        else:  # a configuration that faulted in the checks is not timed
            faulted = {r["item"][1] for r in report["check"] if r.get("crashed")}
            items = [[s, who] for s in range(len(SHAPES)) for who in (*BASELINES, *indices) if who not in faulted]
        report[part] = _run_part(part, items, deadline)
        if part == "speed":
            report["summary"] = _ratios(report["speed"])
        if args.json:  # after every part: a call cut short still returns what was measured
            with open(args.json, "w") as f:
                f.write(dumps_strict(report, indent=1))
    print("\n".join(report["summary"]))
    bad = [r for r in report["check"] if not r.get("ok")]
    print(f"done in {time.time() - t0:.0f} s; {len(bad)} check rows failed or skipped", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

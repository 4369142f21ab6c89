"""One GPU call: check and time every Gluon decode configuration against the Triton kernel and cuDNN.

Run on the H200 (the device lease is short, so one call checks and times everything, in well
under 140 s from a cold start, first compiles included):

    python3 -m scripts.tuning.h200_gluon_decode_check --json $OUT/gdecode.json

1. Correctness: each ``GLUON_DECODE_CONFIGS`` entry on four real-size paged caches (tails
   1/17/97/1025/20000, block sizes 1/16/64/256, GQA 1/4/8, bf16 and fp16, split counts from the
   wave rule and forced 5 and 66, shuffled tables, NaN in every unused slot): max abs error
   against the float32 paged reference, printed beside the tolerance.
2. Speed: CUDA-graph medians (``kernels.bench.timing.graph_ms`` over a rotation of inputs, the
   harness's method) of each configuration, of ``paged_decode_attention`` (the Triton kernel,
   its defaults) and of SDPA with the cuDNN backend on the same KV gathered contiguous, at
   B1 L32K 32/8, B1 L128K 32/8, B8 L32K 64/8, B32 L16K 64/8, B128 L4K 32/8 (d 128, block 16,
   bf16). TB/s is KV bytes read (``kernels.theory.decode_kv_bytes``) over the time.

Each part runs in a child process that reports one JSON line per row and names the row it is
about to run: a configuration that faults (an illegal address poisons the whole CUDA context)
is recorded as an error row and the child is restarted without it, so the others go on. Past
``--budget`` seconds the remaining rows are skipped, and say so. ``--configs 0,2`` limits the
run to those entries. Nothing runs at import.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import torch

from inputs.uploads import dumps_strict
from kernels.decode.gluon import GLUON_DECODE_CONFIGS
from scripts.tuning.device_rows import (add_child_options, decode_shape_inputs, emit, error_text, finite,
                                       run_child, run_rows)

# (label, lengths, block size, query heads, KV heads, dtype, forced split count or None)
CHECKS = [
    ("tails 32/8 block 16", [1, 17, 97, 1025, 20000], 16, 32, 8, "bf16", None),
    ("20000+3 64/8 block 256, 5 splits", [20000, 3], 256, 64, 8, "bf16", 5),
    ("1027+4096 8/8 block 1 fp16, 66 splits", [1027, 4096], 1, 8, 8, "fp16", 66),
    ("B1 32K 32/8 block 64", [32768], 64, 32, 8, "bf16", None),
]
# (batch, context, query heads); 8 KV heads, d 128, block 16, bf16.
SHAPES = [(1, 32768, 32), (1, 131072, 32), (8, 32768, 64), (32, 16384, 64), (128, 4096, 32)]
BASELINES = ("triton", "cudnn")


def _child_check(items: list[list[int]], deadline: float, out) -> None:
    from kernels.cache.paged import build_paged_cache
    from kernels.decode.gluon import gluon_decode_plan, gluon_paged_decode
    from kernels.reference.paged import paged_attention_reference
    from kernels.tolerances import tolerance

    for case in sorted({c for c, _ in items}):
        label, lens, bs, hq, hkv, dtype_name, splits = CHECKS[case]
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype_name]
        tol = tolerance("paged_decode", dtype_name).atol
        g = torch.Generator(device="cuda").manual_seed(len(lens) * 1000 + bs)
        c = build_paged_cache(lens, block_size=bs, n_kv_heads=hkv, head_dim=128, dtype=dtype, device="cuda",
                              shuffle=True, generator=g, spare_blocks=5, poison_unused=True)
        q = torch.randn(len(lens), hq, 128, device="cuda", generator=g).to(dtype)
        ref = paged_attention_reference(q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens)
        for i in [i for cc, i in items if cc == case]:
            cfg = GLUON_DECODE_CONFIGS[i]
            row = dict(part="check", item=[case, i], check=label, config=cfg.name, tol=tol)
            if time.time() > deadline:
                emit(out, **row, error="skipped: time budget")
                continue
            emit(out, event="start", item=[case, i])
            try:
                used = splits if splits is not None else gluon_decode_plan(
                    q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens, config=cfg)[0]
                got = gluon_paged_decode(q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens, num_splits=splits,
                                         config=cfg)
                err = float((got.float() - ref).abs().max())  # NaN anywhere makes this NaN
                emit(out, **row, err=finite(err), splits=used, ok=bool(err <= tol))
            except Exception as exc:  # noqa: BLE001 - a failed configuration is a row of the report
                emit(out, **row, error=error_text(exc))


def _child_speed(items: list[list], deadline: float, out) -> None:
    for s in sorted({s for s, _ in items}):
        _speed_shape(s, [who for ss, who in items if ss == s], deadline, out)
        torch.cuda.empty_cache()  # the shape's inputs died with the call


def _cudnn_run(x, sdpa_context):
    """SDPA (cuDNN backend) on the rotation's KV gathered contiguous: the copy lives as long as
    the closure (and in ``x.state``)."""
    import torch.nn.functional as F

    kc, vc = x.contiguous()
    q4, rot = x.q.unsqueeze(3), x.rot

    def run():
        i = rot.next()
        with sdpa_context("CUDNN_ATTENTION"):
            return F.scaled_dot_product_attention(q4[i], kc[i], vc[i], enable_gqa=True)
    return run


def _speed_shape(s: int, contenders: list, deadline: float, out) -> None:
    """The rows of shape ``SHAPES[s]``: the same KV for every contender."""
    from kernels.bench.timing import graph_ms, sdpa_context
    from kernels.decode.paged import paged_decode_attention
    from kernels.decode.gluon import gluon_decode_plan, gluon_paged_decode

    label, kv_bytes, x = decode_shape_inputs(*SHAPES[s], memory_share=3)
    n_rot = x.rot.n
    q, k, v, tables, lens, rot = x.q, x.k, x.v, x.tables, x.lens, x.rot
    for who in contenders:  # the baselines first, the contiguous copy freed before the Gluon rows
        row = dict(part="speed", item=[s, who], shape=label, contender=who if who in BASELINES
                   else GLUON_DECODE_CONFIGS[who].name, rotations=n_rot, kv_bytes=kv_bytes)
        if time.time() > deadline:
            emit(out, **row, error="skipped: time budget")
            continue
        emit(out, event="start", item=[s, who])
        try:
            extra = {}
            if who == "triton":
                def run():
                    i = rot.next()
                    return paged_decode_attention(q[i], k, v, tables[i], lens, validate=False)
                extra["err"] = x.err_of(paged_decode_attention(q[0], k, v, tables[0], lens))[0]
            elif who == "cudnn":
                run = _cudnn_run(x, sdpa_context)
            else:
                x.state.clear()
                cfg = GLUON_DECODE_CONFIGS[who]

                def run(cfg=cfg):
                    i = rot.next()
                    return gluon_paged_decode(q[i], k, v, tables[i], lens, validate=False, config=cfg)
                extra["err"] = x.err_of(gluon_paged_decode(q[0], k, v, tables[0], lens, config=cfg))[0]
                extra["splits"], extra["resident_per_sm"] = gluon_decode_plan(q[0], k, v, tables[0], lens,
                                                                              config=cfg)
            run()
            torch.cuda.synchronize()
            ms = graph_ms(run, n_rot, 5.0, 30.0)
            if "err" in extra:
                extra["err"] = finite(extra["err"])
            emit(out, **row, **extra, ms=ms, tbps=kv_bytes / (ms * 1e-3) / 1e12)
        except Exception as exc:  # noqa: BLE001 - a failed contender is a row of the report
            emit(out, **row, error=error_text(exc))
    x.state.clear()


# ---------------------------------------------------------------------------- parent side


def _print_row(r: dict) -> None:
    what = r.get("check") or r.get("shape") or r["item"]
    name = r.get("config") or r.get("contender") or r["item"][1]
    if "error" in r:
        print(f"  {r['part']:<5} {str(what):<38} {str(name):<18} {r['error']}", flush=True)
    elif r["part"] == "check":
        print(f"  check {what:<38} {name:<18} err {r['err']} (tol {r['tol']:.0e}) splits {r['splits']} "
              f"{'ok' if r['ok'] else 'FAIL'}", flush=True)
    else:
        extra = f" err {r['err']}" if "err" in r else ""
        extra += f" splits {r['splits']} resident {r['resident_per_sm']}" if "splits" in r else ""
        print(f"  speed {what:<38} {name:<18} {r['ms']:.4f} ms {r['tbps']:.2f} TB/s{extra}", flush=True)


def _ratios(rows: list[dict]) -> list[str]:
    """Each timed row's speed against the Triton kernel and cuDNN on its shape; the summary lines."""
    lines = []
    for shape in dict.fromkeys(r["shape"] for r in rows if "shape" in r):
        here = [r for r in rows if r.get("shape") == shape and "ms" in r]
        base = {r["contender"]: r["ms"] for r in here if r["contender"] in BASELINES}
        for r in here:
            for name in BASELINES:
                if name in base:
                    r[f"x_{name}"] = base[name] / r["ms"]
        lines.append(f"{shape}: " + " | ".join(
            f"{r['contender']} {r['tbps']:.2f} TB/s" + "".join(
                f" x {n} {r[f'x_{n}']:.3f}" for n in BASELINES if f"x_{n}" in r and r["contender"] != n)
            for r in here))
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", metavar="PATH", help="write the figures as JSON to PATH")
    p.add_argument("--configs", help="comma-separated indices into GLUON_DECODE_CONFIGS (default: all)")
    p.add_argument("--budget", type=float, default=105.0, help="seconds after which rows are skipped (default 105)")
    add_child_options(p, ("check", "speed"))
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        p.error("needs a CUDA GPU")
    if args.child:
        run_child(args, {"check": _child_check, "speed": _child_speed})
        return 0
    indices = list(range(len(GLUON_DECODE_CONFIGS)))
    if args.configs:
        try:
            indices = sorted({int(i) for i in args.configs.split(",")})
            [GLUON_DECODE_CONFIGS[i] for i in indices]
        except (ValueError, IndexError):
            p.error(f"--configs: expected indices 0..{len(GLUON_DECODE_CONFIGS) - 1}, got {args.configs!r}")
    if not 1 <= args.budget <= 3600:
        p.error(f"--budget must be in 1..3600 seconds, got {args.budget}")
    from kernels.bench.timing import environment

    t0 = time.time()
    deadline = t0 + args.budget
    report: dict = {"provenance": dataclasses.asdict(environment("python3 -m scripts.tuning.h200_gluon_decode_check")),
                    "configs": [dict(dataclasses.asdict(GLUON_DECODE_CONFIGS[i]), index=i,
                                     name=GLUON_DECODE_CONFIGS[i].name) for i in indices]}
    for part in ("check", "speed"):
        print(f"== {part} [{time.time() - t0:.0f} s]", flush=True)
        if part == "check":
            items = [[c, i] for c in range(len(CHECKS)) for i in indices]
        else:  # a configuration that faulted in the checks is not timed
            faulted = {r["item"][1] for r in report["check"] if r.get("crashed")}
            items = [[s, who] for s in range(len(SHAPES)) for who in (*BASELINES, *indices) if who not in faulted]
        report[part] = run_rows("scripts.tuning.h200_gluon_decode_check", part, items, deadline,
                                baselines=BASELINES, print_row=_print_row)
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

"""One GPU call: check and time the register-dequant warp-MMA decode kernel (INT4 and FP8 KV).

Run on the H200 (one call: the swapped design's four configs against the rows design's 16x4st,
the swapped 16x4st running every check, the Triton bf16 kernel the only baseline; five configs
and all four baselines took 118 s cold in the first run):

    python3 -m scripts.tuning.h200_rdq_check --configs 5,1,6,7,8 --baselines "triton bf16" \
        --budget 140 --json $OUT/rdq.json

(all configs and baselines: no ``--configs``/``--baselines``, ``--budget 300``).

1. Correctness: each ``RDQ_CONFIGS`` entry, both formats, on real-size pools (tails
   1/17/97/1025/20000, block sizes 1/16/256, GQA 1/4/8/16, bf16 and fp16 queries, head dim 64
   and 128, split counts from the wave rule and forced 5 and 66, shuffled tables, NaN in every
   unused slot): max abs error against the float32 paged reference on the dequantised pools,
   beside ``tolerance("paged_decode", "int4")`` / ``("paged_decode", "fp8 fp16 dots")``. The
   first config named runs every case, the others the first two (compiles dominate a cold call).
2. Speed: CUDA-graph medians (``kernels.bench.timing.graph_ms`` over a rotation of inputs) of
   every config and format, the Triton bf16 kernel on the bf16 KV the pools were quantised
   from, the Triton INT4 and FP8 kernels and the Gluon ``wgmma`` INT4 (and FP8, where its module
   is present) kernels, at B1 L32K 32/8, B8 L32K 32/8, B32 L16K 64/8, B128 L4K 32/8 (d 128,
   block 16). TB/s is each contender's own KV bytes over its time (``kernels.theory``). The
   summary prints x-bf16 ratios and each contender's worst ratio over the shapes with batch x
   context >= 256K (targets: INT4 2.8, FP8 1.7).

Rows run in child processes (a faulting configuration poisons its CUDA context): a child that
dies takes only its row, and that configuration is dropped from the rest of the part. Past
``--budget`` seconds the remaining rows are skipped, and say so. Nothing runs at import.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time

import torch

from inputs.uploads import dumps_strict
from kernels.decode.rdq import RDQ_CONFIGS
from scripts.tuning.device_rows import (add_child_options, decode_shape_inputs, emit, error_text, finite,
                                       quantized_pools, run_child, run_rows)

# (label, lengths, block size, query heads, KV heads, head dim, query dtype, forced splits)
CHECKS = [
    ("tails 32/8 block 16", [1, 17, 97, 1025, 20000], 16, 32, 8, 128, "bf16", None),
    ("20000+3 64/4 (GQA 16) block 256, 5 splits", [20000, 3], 256, 64, 4, 128, "bf16", 5),
    ("1027+4096 8/8 block 1 fp16 q, 66 splits", [1027, 4096], 1, 8, 8, 128, "fp16", 66),
    ("3+333+4099 16/4 d64 block 32", [3, 333, 4099], 32, 16, 4, 64, "bf16", None),
    ("B1 32K 32/8 block 64", [32768], 64, 32, 8, 128, "bf16", None),
]
# B8 L32K 64/8 (GQA 8) is the harness's worst FP8/INT4 shape (in full harness runs on the H200).
SHAPES = [(1, 32768, 32), (8, 32768, 32), (8, 32768, 64), (32, 16384, 64), (128, 4096, 32)]
LARGE_TOKENS = 256 * 1024  # batch x context of the shapes the targets are stated over
BASELINES = ("triton bf16", "triton int4", "triton fp8")
FORMATS = ("int4", "fp8")


def _rdq(who: str) -> tuple[str, int] | None:
    """``("int4" | "fp8", config index)`` of an rdq contender name, None for a baseline."""
    if who in BASELINES:
        return None
    _, fmt, index = who.split()
    return fmt, int(index)


def _name(who: str) -> str:
    got = _rdq(who)
    return who if got is None else f"{got[0]} {RDQ_CONFIGS[got[1]].name}"


def _pools(fmt: str, k16, v16):
    """``(k, v, kwargs, dequantised k, dequantised v)`` of a bf16 pool pair in ``fmt``."""
    from kernels.cache.int4 import dequantize_int4

    k, v, kw = quantized_pools(fmt, k16, v16)
    if fmt == "int4":
        return k, v, kw, dequantize_int4(k), dequantize_int4(v)
    ks, vs = kw["k_scale"], kw["v_scale"]
    return k, v, kw, k.float() * ks.view(1, -1, 1, 1), v.float() * vs.view(1, -1, 1, 1)


# ---------------------------------------------------------------------------- child side


def _child_check(items: list[list], deadline: float, out) -> None:
    from kernels.cache.paged import build_paged_cache
    from kernels.decode.rdq import rdq_paged_decode, rdq_plan
    from kernels.reference.paged import paged_attention_reference
    from kernels.tolerances import tolerance

    tols = {"int4": tolerance("paged_decode", "int4").atol, "fp8": tolerance("paged_decode", "fp8 fp16 dots").atol}
    for case in sorted({c for c, _ in items}):
        label, lens, bs, hq, hkv, d, q_dtype, splits = CHECKS[case]
        g = torch.Generator(device="cuda").manual_seed(len(lens) * 1000 + bs)
        c16 = build_paged_cache(lens, block_size=bs, n_kv_heads=hkv, head_dim=d, dtype=torch.bfloat16,
                                device="cuda", shuffle=True, generator=g, spare_blocks=5, poison_unused=True)
        q = torch.randn(len(lens), hq, d, device="cuda", generator=g).to(
            {"bf16": torch.bfloat16, "fp16": torch.float16}[q_dtype])
        for fmt in FORMATS:
            whos = [who for cc, who in items if cc == case and _rdq(who)[0] == fmt]
            if not whos:
                continue
            k, v, kw, kd, vd = _pools(fmt, c16.k_cache, c16.v_cache)
            ref = paged_attention_reference(q, kd, vd, c16.block_tables, c16.seq_lens)
            for who in whos:
                cfg = RDQ_CONFIGS[_rdq(who)[1]]
                row = dict(part="check", item=[case, who], check=label, config=_name(who), tol=tols[fmt])
                if time.time() > deadline:
                    emit(out, **row, error="skipped: time budget")
                    continue
                emit(out, event="start", item=[case, who])
                try:
                    used = splits if splits is not None else rdq_plan(q, k, v, c16.block_tables, c16.seq_lens,
                                                                      config=cfg)[0]
                    got = rdq_paged_decode(q, k, v, c16.block_tables, c16.seq_lens, num_splits=splits, config=cfg,
                                           **kw)
                    err = float((got.float() - ref).abs().max())  # NaN anywhere makes this NaN
                    emit(out, **row, err=finite(err), splits=used, ok=bool(err <= tols[fmt]))
                except Exception as exc:  # noqa: BLE001 - a failed configuration is a row of the report
                    emit(out, **row, error=error_text(exc))


def _child_speed(items: list[list], deadline: float, out) -> None:
    for s in sorted({s for s, _ in items}):
        _speed_shape(s, [who for ss, who in items if ss == s], deadline, out)
        torch.cuda.empty_cache()


def _contender(who: str, q, k16, v16, tables, lens, pools: dict):
    """``(call(i), extra row fields)`` of one contender on rotation ``i`` of the inputs."""
    from kernels.decode.paged import paged_decode_attention
    from kernels.decode.int4 import paged_decode_int4
    from kernels.decode.rdq import rdq_paged_decode, rdq_plan

    if who == "triton bf16":
        return lambda i: paged_decode_attention(q[i], k16, v16, tables[i], lens, validate=False), {}
    fmt = _rdq(who)[0] if _rdq(who) else ("fp8" if who.endswith("fp8") else "int4")
    k, v, kw = pools[fmt][:3]
    if who == "triton int4":
        return lambda i: paged_decode_int4(q[i], k, v, tables[i], lens, validate=False, backend="triton"), {}
    if who == "triton fp8":
        return lambda i: paged_decode_attention(q[i], k, v, tables[i], lens, validate=False, backend="triton",
                                                **kw), {}
    cfg = RDQ_CONFIGS[_rdq(who)[1]]
    splits, resident = rdq_plan(q[0], k, v, tables[0], lens, config=cfg)
    return (lambda i: rdq_paged_decode(q[i], k, v, tables[i], lens, validate=False, config=cfg, **kw),
            dict(splits=splits, resident_per_sm=resident))


def _speed_shape(s: int, contenders: list, deadline: float, out) -> None:
    """The rows of shape ``SHAPES[s]``: the same KV for every contender (quantised from it)."""
    from kernels.bench.timing import graph_ms
    from kernels.theory import decode_int4_kv_bytes, decode_kv_bytes

    batch, ctx, _ = SHAPES[s]
    label, bf16_bytes, x = decode_shape_inputs(*SHAPES[s], memory_share=4)
    n_rot = x.rot.n
    pools = {fmt: _pools(fmt, x.k, x.v) for fmt in FORMATS}
    refs = {fmt: x.reference(p[3], p[4]) for fmt, p in pools.items()}
    pools = {fmt: p[:3] for fmt, p in pools.items()}  # the dequantised copies are not needed past here
    kv_bytes = {"bf16": bf16_bytes, "int4": decode_int4_kv_bytes(batch, ctx, 8, 128),
                "fp8": decode_kv_bytes(batch, ctx, 8, 128, 1)}
    for who in contenders:  # the baselines first
        fmt = "bf16" if who == "triton bf16" else (_rdq(who)[0] if _rdq(who) else who.split()[1])
        row = dict(part="speed", item=[s, who], shape=label, large=batch * ctx >= LARGE_TOKENS, fmt=fmt,
                   contender=_name(who), rotations=n_rot, kv_bytes=kv_bytes[fmt])
        if time.time() > deadline:
            emit(out, **row, error="skipped: time budget")
            continue
        emit(out, event="start", item=[s, who])
        try:
            call, extra = _contender(who, x.q, x.k, x.v, x.tables, x.lens, pools)
            first = call(0)
            extra["err"] = finite(x.err_of(first)[0] if fmt == "bf16" else x.err_of(first, refs[fmt])[0])
            rot = x.rot

            def run(call=call, rot=rot):
                return call(rot.next())
            torch.cuda.synchronize()
            ms = graph_ms(run, n_rot, 5.0, 30.0)
            emit(out, **row, **extra, ms=ms, tbps=kv_bytes[fmt] / (ms * 1e-3) / 1e12)
        except Exception as exc:  # noqa: BLE001 - a failed contender is a row of the report
            emit(out, **row, error=error_text(exc))


# ---------------------------------------------------------------------------- parent side




def _print_row(r: dict) -> None:
    what = r.get("check") or r.get("shape") or r["item"]
    name = r.get("config") or r.get("contender") or r["item"][1]
    if "error" in r:
        print(f"  {r['part']:<5} {str(what):<42} {str(name):<24} {r['error']}", flush=True)
    elif r["part"] == "check":
        print(f"  check {what:<42} {name:<24} err {r['err']} (tol {r['tol']:.0e}) splits {r['splits']} "
              f"{'ok' if r['ok'] else 'FAIL'}", flush=True)
    else:
        extra = f" splits {r['splits']} resident {r['resident_per_sm']}" if "splits" in r else ""
        print(f"  speed {what:<42} {name:<24} {r['ms']:.4f} ms {r['tbps']:.2f} TB/s err {r['err']}{extra}", flush=True)


def _ratios(rows: list[dict]) -> list[str]:
    """x-bf16 per row, the worst large-shape ratio per contender, and the fastest rdq config per
    format with the TB/s of its own bytes."""
    lines, worst = [], {}
    for shape in dict.fromkeys(r["shape"] for r in rows if "shape" in r):
        here = [r for r in rows if r.get("shape") == shape and "ms" in r]
        base = next((r["ms"] for r in here if r["contender"] == "triton bf16"), None)
        for r in here:
            if base is not None and r["contender"] != "triton bf16":
                r["x_bf16"] = base / r["ms"]
                if r["large"]:
                    worst[r["contender"]] = min(worst.get(r["contender"], math.inf), r["x_bf16"])
        lines.append(f"{shape}: " + " | ".join(
            f"{r['contender']} {r['ms']:.4f} ms" + (f" x{r['x_bf16']:.2f}" if "x_bf16" in r else "") for r in here))
    lines += [f"worst large-shape x bf16 {name}: {ratio:.3f}" for name, ratio in sorted(worst.items(), key=lambda x: -x[1])]
    for fmt in FORMATS:
        mine = {n: x for n, x in worst.items() if n.startswith(f"{fmt} rdq")}
        if mine:
            best = max(mine, key=mine.get)
            tb = [f"{r['shape']} {r['tbps']:.2f}" for r in rows if r.get("contender") == best and "tbps" in r]
            lines.append(f"fastest {fmt}: {best} (worst large x bf16 {mine[best]:.3f}); TB/s of its bytes: "
                         + ", ".join(tb))
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", metavar="PATH", help="write the figures as JSON to PATH")
    p.add_argument("--configs", help="comma-separated indices into RDQ_CONFIGS, the first running every check "
                                     "(default: all, in order)")
    p.add_argument("--formats", default="int4,fp8", help="comma-separated KV formats to check and time (default both)")
    p.add_argument("--baselines", help=f"comma-separated baselines to time (default: all of {', '.join(BASELINES)})")
    p.add_argument("--budget", type=float, default=125.0, help="seconds after which rows are skipped (default 125)")
    add_child_options(p, ("check", "speed"))
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        p.error("needs a CUDA GPU")
    if args.child:
        run_child(args, {"check": _child_check, "speed": _child_speed})
        return 0
    indices = list(range(len(RDQ_CONFIGS)))
    if args.configs:
        try:
            indices = list(dict.fromkeys(int(i) for i in args.configs.split(",")))  # as named, once each
            if not all(0 <= i < len(RDQ_CONFIGS) for i in indices):
                raise ValueError
        except ValueError:
            p.error(f"--configs: expected indices 0..{len(RDQ_CONFIGS) - 1}, got {args.configs!r}")
    baselines = list(BASELINES)
    if args.baselines is not None:
        baselines = list(dict.fromkeys(b.strip() for b in args.baselines.split(",") if b.strip()))
        if not set(baselines) <= set(BASELINES) or "triton bf16" not in baselines:
            p.error(f"--baselines: expected names from {', '.join(BASELINES)} including 'triton bf16' (the "
                    f"reference of every ratio), got {args.baselines!r}")
    formats = list(dict.fromkeys(f.strip() for f in args.formats.split(",") if f.strip()))
    if not formats or not set(formats) <= set(FORMATS):
        p.error(f"--formats: expected names from {', '.join(FORMATS)}, got {args.formats!r}")
    if not 1 <= args.budget <= 3600:
        p.error(f"--budget must be in 1..3600 seconds, got {args.budget}")
    from kernels.bench.timing import environment

    t0 = time.time()
    deadline = t0 + args.budget
    mine = [f"rdq {fmt} {i}" for fmt in formats for i in indices]
    report: dict = {"provenance": dataclasses.asdict(environment("python3 -m scripts.tuning.h200_rdq_check")),
                    "configs": [dict(dataclasses.asdict(RDQ_CONFIGS[i]), index=i, name=RDQ_CONFIGS[i].name)
                                for i in indices]}
    for part in ("check", "speed"):
        print(f"== {part} [{time.time() - t0:.0f} s]", flush=True)
        if part == "check":  # the first config on every case, the others on the first two
            items = [[c, who] for c in range(len(CHECKS)) for who in mine
                     if c < 2 or _rdq(who)[1] == indices[0]]
        else:  # a configuration that faulted in the checks is not timed
            faulted = {r["item"][1] for r in report["check"] if r.get("crashed")}
            items = [[s, who] for s in range(len(SHAPES)) for who in (*baselines, *mine) if who not in faulted]
        report[part] = run_rows("scripts.tuning.h200_rdq_check", part, items, deadline, baselines=BASELINES,
                                print_row=_print_row)
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

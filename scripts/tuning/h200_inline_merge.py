"""One GPU call: the split-KV merge inline (last split program merges) against the merge kernel.

Run on the H200 (one call checks and times everything, well under 120 s from a cold start,
first compiles included):

    python3 -m scripts.tuning.h200_inline_merge --json $OUT/inline_merge.json

1. Correctness: ``DecodeConfig(merge="inline")`` against the default two-kernel merge on real
   sizes (tails 1/17/97/1025/20000, block sizes 1/16/64/256, GQA 1/4/8, bf16/fp16, FP8 and
   INT4 KV, split counts from the wave rule and forced 5 and 66; shuffled tables, NaN in every
   unused slot): max abs difference between the merges, each one's error against the float32
   paged reference beside the tolerance, and whether every ticket counter is 0 afterwards. Then
   one inline call captured in a CUDA graph and replayed three times (counters reset between
   replays: every replay must equal the eager output).
2. Speed: at B1 L32K 32/8, B1 L128K 32/8, B8 L32K 64/8, B8 L32K 32/8, B32 L16K 64/8 (d 128,
   block 16, bf16), CUDA-graph medians (``kernels.bench.timing.graph_ms`` over a rotation of
   inputs, the harness's method) and eager call times (``do_bench`` of the plain call) of the
   merge kernel and of the inline merge at the default step and at 1 and 4 partials per step,
   each with its split count and programs resident per SM; SDPA with the cuDNN backend on the
   same KV gathered contiguous, as the harness's ``sdpa_cudnn`` contender runs it. Printed with
   TB/s (``kernels.theory.decode_kv_bytes`` over the time) and ratios x cuDNN and x the merge
   kernel.

Past ``--budget`` seconds the remaining rows are skipped, and say so. Nothing runs at import.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time

import torch

from inputs.uploads import dumps_strict
from scripts.tuning.device_rows import decode_shape_inputs

# (label, lengths, block size, query heads, KV heads, cache: bf16 | fp16 | fp8 | int4, forced splits)
CHECKS = [
    ("tails 32/8 block 16", [1, 17, 97, 1025, 20000], 16, 32, 8, "bf16", None),
    ("20000+3 64/8 block 256, 5 splits", [20000, 3], 256, 64, 8, "bf16", 5),
    ("1027+4096 8/8 block 1 fp16, 66 splits", [1027, 4096], 1, 8, 8, "fp16", 66),
    ("B1 32K 32/8 block 64", [32768], 64, 32, 8, "bf16", None),
    ("fp8 4096+999+17 32/8 block 16", [4096, 999, 17], 16, 32, 8, "fp8", None),
    ("fp8 20000 64/8 block 16, 66 splits", [20000], 16, 64, 8, "fp8", 66),
    ("int4 4096+999 32/8 block 16", [4096, 999], 16, 32, 8, "int4", None),
]
# (batch, context, query heads); 8 KV heads, d 128, block 16, bf16.
SHAPES = [(1, 32768, 32), (1, 131072, 32), (8, 32768, 64), (8, 32768, 32), (32, 16384, 64)]
# Inline variants timed beside the merge kernel: partials per merge step (None: the tile rule).
INLINE_STEPS = {"inline": None, "inline x1": 1, "inline x4": 4}


def _finite(x: float) -> float | str:
    return x if math.isfinite(x) else repr(x)


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"


def _counters_zero() -> bool:
    from kernels.decode.launch import merge_counters

    return not bool(merge_counters(torch.device("cuda"), 1).any())


def _configs(base) -> dict:
    """The merge kernel (``base`` with ``merge="kernel"``) and each inline variant of it."""
    return {"kernel": dataclasses.replace(base, merge="kernel"), **{name: dataclasses.replace(base, merge="inline", merge_splits=step)
                               for name, step in INLINE_STEPS.items()}}


# ---------------------------------------------------------------------------- correctness


def _check_case(case: tuple) -> dict:
    from kernels.decode.config import default_config
    from kernels.cache.int4 import dequantize_int4, quantize_int4
    from kernels.cache.paged import build_paged_cache, quantize_fp8
    from kernels.decode.paged import paged_decode_attention
    from kernels.decode.int4 import default_int4_config, paged_decode_int4
    from kernels.reference.paged import paged_attention_reference
    from kernels.tolerances import tolerance

    label, lens, bs, hq, hkv, cache, splits = case
    dtype = torch.float16 if cache == "fp16" else torch.bfloat16
    g = torch.Generator(device="cuda").manual_seed(len(lens) * 1000 + bs)
    c = build_paged_cache(lens, block_size=bs, n_kv_heads=hkv, head_dim=128, dtype=dtype, device="cuda",
                          shuffle=True, generator=g, spare_blocks=5, poison_unused=True)
    q = torch.randn(len(lens), hq, 128, device="cuda", generator=g).to(dtype)
    if cache == "int4":
        c4 = quantize_int4(c)
        ref = paged_attention_reference(q, dequantize_int4(c4.k), dequantize_int4(c4.v), c4.block_tables,
                                        c4.seq_lens)
        base = default_int4_config(128)

        def run(cfg):
            return paged_decode_int4(q, c4.k, c4.v, c4.block_tables, c4.seq_lens, num_splits=splits, config=cfg)
    else:
        if cache == "fp8":
            c = quantize_fp8(c, per_head=True)
        ref = paged_attention_reference(q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens,
                                        k_scale=c.k_scale, v_scale=c.v_scale)
        base = default_config(128, c.k_cache.dtype)

        def run(cfg):
            return paged_decode_attention(q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens, k_scale=c.k_scale,
                                          v_scale=c.v_scale, num_splits=splits, config=cfg)
    tol = tolerance("paged_decode", cache).atol
    outs = {name: run(cfg) for name, cfg in _configs(base).items()}
    torch.cuda.synchronize()
    row = dict(check=label, tol=tol, counters_zero=_counters_zero(),
               err={name: _finite(float((o.float() - ref).abs().max())) for name, o in outs.items()},
               vs_kernel={name: _finite(float((o.float() - outs["kernel"].float()).abs().max()))
                          for name, o in outs.items() if name != "kernel"})
    row["ok"] = bool(row["counters_zero"] and all(isinstance(e, float) and e <= tol for e in row["err"].values()))
    return row


def _graph_check() -> dict:
    """One inline call captured in a CUDA graph: every replay equals the eager output."""
    from kernels.decode.config import default_config
    from kernels.cache.paged import build_paged_cache
    from kernels.decode.paged import paged_decode_attention

    g = torch.Generator(device="cuda").manual_seed(7)
    c = build_paged_cache([20000, 4096, 999], block_size=16, n_kv_heads=8, head_dim=128, dtype=torch.bfloat16,
                          device="cuda", shuffle=True, generator=g, spare_blocks=5, poison_unused=True)
    q = torch.randn(3, 32, 128, device="cuda", generator=g).to(torch.bfloat16)
    cfg = dataclasses.replace(default_config(128, torch.bfloat16), merge="inline")

    def run():
        return paged_decode_attention(q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens, num_splits=12,
                                      config=cfg, validate=False)
    eager = run()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = run()
    same = []
    for _ in range(3):
        captured.zero_()
        graph.replay()
        torch.cuda.synchronize()
        same.append(bool(torch.equal(captured, eager)))
    return dict(check="CUDA graph, 3 replays, 12 splits", replays_equal_eager=same, counters_zero=_counters_zero(),
                ok=all(same) and _counters_zero())


# ---------------------------------------------------------------------------- speed


def _speed_shape(shape_index: int, deadline: float) -> list[dict]:
    import torch.nn.functional as F

    from kernels.bench.timing import do_bench, graph_ms, sdpa_context
    from kernels.decode.config import default_config
    from kernels.decode.launch import _RESIDENT, signature
    from kernels.decode.paged import decode_num_splits, paged_decode_attention

    label, kv_bytes, x = decode_shape_inputs(*SHAPES[shape_index], memory_share=3)
    n_rot = x.rot.n
    q, k, v, tables, lens, rot = x.q, x.k, x.v, x.tables, x.lens, x.rot
    rows = []
    for name, cfg in (("cudnn", None), *_configs(default_config(128, torch.bfloat16)).items()):
        row = dict(shape=label, contender=name, rotations=n_rot, kv_bytes=kv_bytes)
        if time.time() > deadline:
            rows.append(dict(row, error="skipped: time budget"))
            continue
        try:
            if cfg is None:  # as the harness's sdpa_cudnn contender: SDPA on the KV gathered contiguous
                kc, vc = x.contiguous()
                q4 = q.unsqueeze(3)

                def run():
                    i = rot.next()
                    with sdpa_context("CUDNN_ATTENTION"):
                        return F.scaled_dot_product_attention(q4[i], kc[i], vc[i], enable_gqa=True)
                row["err"] = _finite(x.err_of(run())[0])
            else:
                def run(cfg=cfg):
                    i = rot.next()
                    return paged_decode_attention(q[i], k, v, tables[i], lens, validate=False, config=cfg)
                row["err"] = _finite(x.err_of(paged_decode_attention(q[0], k, v, tables[0], lens, config=cfg))[0])
                row["splits"] = decode_num_splits(q[0], k, v, tables[0], lens, config=cfg)
                row["resident_per_sm"] = _RESIDENT.get((signature(q[0], k, v, tables[0], lens), cfg))
            run()
            torch.cuda.synchronize()
            row["eager_ms"] = do_bench(run, 5.0, 30.0)
            row["ms"] = graph_ms(run, n_rot, 5.0, 30.0)
            row["tbps"] = kv_bytes / (row["ms"] * 1e-3) / 1e12
            if cfg is not None:
                row["counters_zero"] = _counters_zero()
        except Exception as exc:  # noqa: BLE001 - a failed contender is a row of the report
            row["error"] = _error(exc)
        rows.append(row)
    x.state.clear()
    del x
    torch.cuda.empty_cache()
    base = {r["contender"]: r["ms"] for r in rows if "ms" in r}
    for r in rows:
        if "ms" in r:
            for ref in ("cudnn", "kernel"):
                if ref in base:
                    r[f"x_{ref}"] = base[ref] / r["ms"]
    return rows


def _print_speed(r: dict) -> None:
    if "error" in r:
        print(f"  {r['shape']:<16} {r['contender']:<10} {r['error']}", flush=True)
        return
    extra = f" splits {r['splits']} resident {r['resident_per_sm']}" if "splits" in r else ""
    print(f"  {r['shape']:<16} {r['contender']:<10} graph {r['ms']:.4f} ms {r['tbps']:.2f} TB/s "
          f"eager {r['eager_ms']:.4f} ms x cudnn {r.get('x_cudnn', float('nan')):.3f} "
          f"x kernel {r.get('x_kernel', float('nan')):.3f} err {r['err']}{extra}", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", metavar="PATH", help="write the figures as JSON to PATH")
    p.add_argument("--budget", type=float, default=105.0, help="seconds after which rows are skipped (default 105)")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        p.error("needs a CUDA GPU")
    if not 1 <= args.budget <= 3600:
        p.error(f"--budget must be in 1..3600 seconds, got {args.budget}")
    from kernels.bench.timing import environment

    t0 = time.time()
    deadline = t0 + args.budget
    report: dict = {"provenance": dataclasses.asdict(environment("python3 -m scripts.tuning.h200_inline_merge")),
                    "inline_steps": INLINE_STEPS, "check": [], "speed": []}

    def save() -> None:  # after every part: a call cut short still returns what was measured
        if args.json:
            with open(args.json, "w") as f:
                f.write(dumps_strict(report, indent=1))

    print(f"== check [{time.time() - t0:.0f} s]", flush=True)
    for case in CHECKS:
        try:
            row = _check_case(case) if time.time() < deadline else dict(check=case[0], error="skipped: time budget")
        except Exception as exc:  # noqa: BLE001 - a failed check is a row of the report
            row = dict(check=case[0], error=_error(exc))
        report["check"].append(row)
        print(f"  {row}", flush=True)
    try:
        row = _graph_check()
    except Exception as exc:  # noqa: BLE001
        row = dict(check="CUDA graph", error=_error(exc))
    report["check"].append(row)
    print(f"  {row}", flush=True)
    save()
    print(f"== speed [{time.time() - t0:.0f} s]", flush=True)
    for s in range(len(SHAPES)):
        for r in _speed_shape(s, deadline):
            report["speed"].append(r)
            _print_speed(r)
        save()
    bad = [r for r in report["check"] if not r.get("ok")]
    print(f"done in {time.time() - t0:.0f} s; {len(bad)} check rows failed or skipped", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

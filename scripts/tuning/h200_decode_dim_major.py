"""One-call GPU check: head-dim-major V pages for FP8/INT4, the PDL merge, direct launches.

Run on the device machine: ``python -m scripts.tuning.h200_decode_dim_major [--out DIR]``.
Prints (and writes ``decode_dim_major.json`` under ``--out``):

1. correctness at real sizes of every variant (bf16 / FP8 / INT4, V row- or dim-major, PDL
   merge on and off; block sizes 1..256, tails, GQA 1/4/8, NaN in unused slots);
2. host microseconds per eager call (no sync) with and without direct launches, PDL;
3. per shape, CUDA-graph medians of each variant beside SDPA-cuDNN on contiguous KV, the
   ratios the targets use, and the eager time of the bf16 default.

Not imported by the app or the tests.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from kernels.bench.records import DecodeShape
from kernels.bench.sweeps import _decode_inputs
from kernels.bench.timing import do_bench, graph_ms, rotations, sdpa_context
from kernels.int4_cache import Int4Pool, dequantize_int4, quantize_int4, quantize_pool_int4
from kernels.paged_cache import build_paged_cache, dim_major_pages, quantize_fp8, quantize_kv_fp8
from kernels.paged_decode import default_config, paged_decode_attention
from kernels.paged_decode_int4 import default_int4_config, paged_decode_int4
from kernels.paged_reference import paged_attention_reference
from kernels.theory import decode_kv_bytes
from kernels.tolerances import tolerance

# (lens, block, hq, hkv, d, dtype, kind, splits)
CASES = [
    ([1, 17, 97, 1025, 1027], 16, 32, 8, 128, "bf16", "bf16", None),
    ([300, 1000], 1, 8, 1, 128, "bf16", "fp8", 3),
    ([5000, 77], 256, 32, 8, 128, "bf16", "fp8", 4),
    ([20000], 16, 32, 8, 128, "bf16", "fp8", 40),
    ([4096, 3000, 1], 128, 64, 8, 128, "bf16", "fp8", None),
    ([2049, 777], 32, 8, 8, 64, "fp16", "fp8", 7),
    ([4096, 999, 33], 16, 32, 8, 128, "bf16", "int4", None),
    ([20000, 5], 1, 32, 8, 128, "bf16", "int4", 9),
    ([3000], 256, 16, 16, 64, "fp16", "int4", None),
    ([5000, 17], 64, 32, 8, 128, "bf16", "int4", 5),
]


def _int4_dim_major(pool: Int4Pool) -> Int4Pool:
    return Int4Pool(data=dim_major_pages(pool.data), scales=pool.scales)


def correctness() -> list[dict]:
    rows = []
    g = torch.Generator(device="cuda").manual_seed(0)
    for lens, bs, hq, hkv, d, dt, kind, splits in CASES:
        dtype = torch.bfloat16 if dt == "bf16" else torch.float16
        c = build_paged_cache(lens, block_size=bs, n_kv_heads=hkv, head_dim=d, dtype=dtype, device="cuda",
                              shuffle=True, generator=g, spare_blocks=5, poison_unused=True)
        q = torch.randn(len(lens), hq, d, device="cuda", generator=g).to(dtype)
        errs = {}
        if kind == "int4":
            c = quantize_int4(c)
            ref = paged_attention_reference(q, dequantize_int4(c.k), dequantize_int4(c.v), c.block_tables, c.seq_lens)
            tol = tolerance("paged_decode", "int4").atol
            for name, v in (("row", c.v), ("dim-major", _int4_dim_major(c.v))):
                out = paged_decode_int4(q, c.k, v, c.block_tables, c.seq_lens, num_splits=splits)
                errs[name] = (out.float() - ref).abs().max().item()
        else:
            tol = tolerance("paged_decode", "bf16" if dtype == torch.bfloat16 else "fp16").atol
            if kind == "fp8":
                c = quantize_fp8(c)
                tol = tolerance("paged_decode", "fp8").atol
            ref = paged_attention_reference(q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens,
                                            k_scale=c.k_scale, v_scale=c.v_scale)
            base = default_config(d, c.k_cache.dtype)
            for name, v, cfg in (("row", c.v_cache, base), ("dim-major", dim_major_pages(c.v_cache), base),
                                 ("row pdl", c.v_cache, dataclasses.replace(base, pdl=True)),
                                 ("row jit", c.v_cache, dataclasses.replace(base, direct_launch=False))):
                for _ in range(2):  # the second call takes the direct-launch path
                    out = paged_decode_attention(q, c.k_cache, v, c.block_tables, c.seq_lens, k_scale=c.k_scale,
                                                 v_scale=c.v_scale, num_splits=splits, config=cfg)
                errs[name] = (out.float() - ref).abs().max().item()
        ok = all(e <= tol and e == e for e in errs.values())
        print(f"check {kind:5} lens={lens} block={bs} {hq}/{hkv} d{d} {dt} splits={splits}: "
              + " ".join(f"{k} {v:.2e}" for k, v in errs.items()) + f" (tol {tol:.0e}) {'OK' if ok else 'FAIL'}",
              flush=True)
        rows.append(dict(lens=lens, block=bs, kind=kind, errs=errs, tol=tol, ok=ok))
    return rows


def _host_us(fn, n=400) -> float:
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    host = (time.perf_counter() - t0) / n * 1e6
    torch.cuda.synchronize()
    return host


def host_cost() -> dict:
    """CPU microseconds per eager call (no sync) at batch 1 x 512 (GPU work ~5 us, so the host
    is what is measured), for each launch path."""
    c = build_paged_cache([512], block_size=16, n_kv_heads=8, head_dim=128, device="cuda",
                          generator=torch.Generator(device="cuda").manual_seed(1))
    q = torch.randn(1, 32, 128, device="cuda", dtype=torch.bfloat16)
    base = default_config(128, torch.bfloat16)
    out = {}
    for name, cfg, splits in (("direct, split", base, 4), ("jit, split", dataclasses.replace(base, direct_launch=False), 4),
                              ("direct+pdl, split", dataclasses.replace(base, pdl=True), 4),
                              ("direct, unsplit", base, 1),
                              ("jit, unsplit", dataclasses.replace(base, direct_launch=False), 1)):
        out[name] = _host_us(lambda cfg=cfg, splits=splits: paged_decode_attention(
            q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens, validate=False, config=cfg, num_splits=splits))
    x = torch.empty(1, 32, 128, device="cuda", dtype=torch.bfloat16)
    out["torch.empty_like"] = _host_us(lambda: torch.empty_like(x))
    for k, v in out.items():
        print(f"host us per call: {k:22} {v:7.1f}", flush=True)
    return out


def _time(fn, n_rot, *, eager=False):
    fn()
    torch.cuda.synchronize()
    g = graph_ms(fn, n_rot, 5.0, 30.0)
    e = do_bench(fn, 5.0, 30.0) if eager else None
    return g, e


SHAPES = [(1, 32768, 32), (1, 131072, 32), (8, 32768, 32), (32, 16384, 64), (128, 4096, 32), (128, 32768, 32)]


def timing(shapes) -> list[dict]:
    rows = []
    for b, L, hq in shapes:
        shape = DecodeShape(batch=b, context=L, n_q_heads=hq, n_kv_heads=8, head_dim=128, block_size=16, dtype="bf16")
        kv_bytes = decode_kv_bytes(b, L, 8, 128, 2)
        free, _ = torch.cuda.mem_get_info()
        n_rot = min(rotations(kv_bytes, free // 3), 8)
        x = _decode_inputs(shape, n_rot, 0)
        q, k, v, tables, lens, rot = x.q, x.k, x.v, x.tables, x.lens, x.rot
        res = {}

        def add(name, fn, eager=False, bytes_per_value=2.0):
            try:
                g, e = _time(fn, n_rot, eager=eager)
                res[name] = dict(graph_ms=g, eager_ms=e, tbps=kv_bytes * bytes_per_value / 2 / (g * 1e-3) / 1e12)
            except Exception as exc:  # noqa: BLE001
                res[name] = dict(error=f"{type(exc).__name__}: {str(exc)[:300]}")
            torch.cuda.synchronize()

        base = default_config(128, torch.bfloat16)
        add("bf16", lambda: paged_decode_attention(q[(i := rot.next())], k, v, tables[i], lens, validate=False),
            eager=True)
        add("bf16 pdl", lambda: paged_decode_attention(q[(i := rot.next())], k, v, tables[i], lens, validate=False,
                                                       config=dataclasses.replace(base, pdl=True)), eager=True)
        add("bf16 jit", lambda: paged_decode_attention(q[(i := rot.next())], k, v, tables[i], lens, validate=False,
                                                       config=dataclasses.replace(base, direct_launch=False)),
            eager=True)
        for splits in {1: (48, 80, 132), 8: (4, 6, 16), 32: (1, 3, 4), 128: ()}.get(b, ()):
            add(f"bf16 s{splits}", lambda splits=splits: paged_decode_attention(
                q[(i := rot.next())], k, v, tables[i], lens, validate=False, num_splits=splits,
                config=dataclasses.replace(base, pdl=True)))
        try:
            kc, vc = x.contiguous()
            q4 = q.unsqueeze(3)

            def cudnn():
                i = rot.next()
                with sdpa_context("CUDNN_ATTENTION"):
                    return F.scaled_dot_product_attention(q4[i], kc[i], vc[i], enable_gqa=True)
            add("cudnn", cudnn)
            del kc, vc
            x.state.clear()
        except Exception as exc:  # noqa: BLE001
            res["cudnn"] = dict(error=str(exc)[:200])
        torch.cuda.empty_cache()
        k8, v8, ks, vs = quantize_kv_fp8(k, v)
        v8t = dim_major_pages(v8)
        fp8 = default_config(128, torch.float8_e4m3fn)
        add("fp8 row", lambda: paged_decode_attention(q[(i := rot.next())], k8, v8, tables[i], lens,
                                                      k_scale=ks, v_scale=vs, validate=False), bytes_per_value=1)
        for bn, w, st, waves in ((128, 4, 2, 1), (128, 4, 3, 1), (64, 4, 3, 1), (128, 4, 2, 2), (128, 8, 2, 1),
                                 (64, 4, 4, 2)):
            cfg = dataclasses.replace(fp8, block_n=bn, num_warps=w, num_stages=st, waves=waves, pdl=True)
            add(f"fp8 dim {bn}/{w}/{st} w{waves}", lambda cfg=cfg: paged_decode_attention(
                q[(i := rot.next())], k8, v8t, tables[i], lens, k_scale=ks, v_scale=vs, validate=False, config=cfg),
                bytes_per_value=1)
        del k8, v8, v8t
        torch.cuda.empty_cache()
        k4, v4 = quantize_pool_int4(k), quantize_pool_int4(v)
        v4t = _int4_dim_major(v4)
        del x
        i4 = default_int4_config(128)
        add("int4 row", lambda: paged_decode_int4(q[(i := rot.next())], k4, v4, tables[i], lens, validate=False),
            bytes_per_value=68 / 256 * 2)
        for bn, w, st, waves in ((128, 4, 3, 2), (64, 4, 3, 2), (64, 4, 4, 2), (128, 4, 2, 1), (64, 4, 3, 1),
                                 (128, 8, 3, 2)):
            cfg = dataclasses.replace(i4, block_n=bn, num_warps=w, num_stages=st, waves=waves)
            add(f"int4 dim {bn}/{w}/{st} w{waves}", lambda cfg=cfg: paged_decode_int4(
                q[(i := rot.next())], k4, v4t, tables[i], lens, validate=False, config=cfg),
                bytes_per_value=68 / 256 * 2)
        del k4, v4, v4t, k, v
        torch.cuda.empty_cache()
        bf = res["bf16"].get("graph_ms")
        cud = res.get("cudnn", {}).get("graph_ms")
        print(f"\nshape B={b} L={L} ({hq}/8, d128, block 16), rotations {n_rot}", flush=True)
        for name, r in res.items():
            if "error" in r:
                print(f"  {name:26} ERROR {r['error']}")
                continue
            extra = f" eager {r['eager_ms']:.4f}" if r.get("eager_ms") else ""
            ratio = f" x bf16 {bf / r['graph_ms']:.3f}" if bf else ""
            vc_ = f" x cudnn {cud / r['graph_ms']:.3f}" if cud else ""
            print(f"  {name:26} {r['graph_ms']:.4f} ms {r['tbps']:.2f} TB/s{ratio}{vc_}{extra}", flush=True)
        rows.append(dict(batch=b, context=L, n_q_heads=hq, rotations=n_rot, results=res))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--skip-check", action="store_true")
    args = ap.parse_args()
    t0 = time.time()
    import triton
    report = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__}
    if not args.skip_check:
        report["correctness"] = correctness()
        print(f"[{time.time() - t0:.0f} s] correctness done", flush=True)
    report["host_us"] = host_cost()
    report["timing"] = timing(SHAPES)
    print(f"[{time.time() - t0:.0f} s] done", flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "decode_dim_major.json").write_text(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main()

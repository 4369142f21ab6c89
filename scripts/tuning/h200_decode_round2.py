"""One-call GPU check for the decode kernels' second round: fused merge, FP8 p.V, INT4, eager cost.

Run on the device machine: ``python -m scripts.tuning.h200_decode_round2 [--out DIR] [--quick]``.
Prints (and writes ``decode_round2.json`` under ``--out``):

1. correctness at real sizes: the bf16 kernel fused and unfused (block sizes 1..256, tails,
   GQA 1/4/8, NaN in unused slots), FP8 with V in both layouts, INT4 with both dequantisers;
2. per shape, CUDA-graph medians of each variant beside SDPA-cuDNN on contiguous KV, and the
   ratios the targets use (x cuDNN, FP8 / INT4 tokens/s against bf16);
3. the eager call's time and host cost at batch 1 x 32K, fused against unfused.

Not imported by the app or the tests.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from kernels.bench.sweeps import _decode_inputs
from kernels.bench.records import DecodeShape
from kernels.bench.timing import do_bench, graph_ms, rotations, sdpa_context
from kernels.cache.int4 import dequantize_int4, quantize_int4, quantize_pool_int4
from kernels.cache.paged import build_paged_cache, quantize_fp8, quantize_kv_fp8
from kernels.decode.paged import DecodeConfig, paged_decode_attention
from kernels.decode.int4 import paged_decode_int4
from kernels.reference.paged import paged_attention_reference
from kernels.theory import decode_kv_bytes
from kernels.tolerances import tolerance

# (lens, block, hq, hkv, d, dtype, kind, splits); kind: bf16 | fp8 | fp8t (token-major V) | int4
CASES = [
    ([1, 17, 97, 1025, 1027], 16, 32, 8, 128, "bf16", "bf16", None),
    ([300, 1000], 1, 8, 1, 128, "bf16", "bf16", 3),
    ([5000, 77], 256, 32, 8, 128, "bf16", "bf16", 4),
    ([20000], 16, 32, 8, 128, "bf16", "bf16", 40),
    ([4096, 3000, 1], 128, 64, 8, 128, "bf16", "bf16", None),
    ([2049, 777], 32, 8, 8, 64, "fp16", "bf16", 7),
    ([5000], 64, 16, 2, 256, "bf16", "bf16", None),
    ([4096, 999], 16, 32, 8, 128, "bf16", "fp8", None),
    ([4096, 999, 33], 16, 32, 8, 128, "bf16", "int4", None),
    ([20000, 5], 1, 32, 8, 128, "bf16", "int4", 9),
    ([3000], 256, 16, 16, 64, "fp16", "int4", None),
]


def _run_case(c, q, kind, splits, *, dequant=1, k_as_a=False):
    cfg = None
    if kind == "int4":
        return paged_decode_int4(q, c.k, c.v, c.block_tables, c.seq_lens, num_splits=splits, dequant=dequant,
                                 k_as_a=k_as_a)
    return paged_decode_attention(q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens, k_scale=c.k_scale,
                                  v_scale=c.v_scale, num_splits=splits, config=cfg)


def correctness() -> list[dict]:
    rows = []
    g = torch.Generator(device="cuda").manual_seed(0)
    for lens, bs, hq, hkv, d, dt, kind, splits in CASES:
        dtype = torch.bfloat16 if dt == "bf16" else torch.float16
        c = build_paged_cache(lens, block_size=bs, n_kv_heads=hkv, head_dim=d, dtype=dtype, device="cuda",
                              shuffle=True, generator=g, spare_blocks=5, poison_unused=True)
        q = torch.randn(len(lens), hq, d, device="cuda", generator=g).to(dtype)
        if kind == "int4":
            c = quantize_int4(c)
            ref = paged_attention_reference(q, dequantize_int4(c.k), dequantize_int4(c.v), c.block_tables, c.seq_lens)
            variants = {"dequant=0": dict(dequant=0), "dequant=1": dict(dequant=1), "dequant=2": dict(dequant=2),
                        "dequant=2 kA": dict(dequant=2, k_as_a=True), "dequant=1 kA": dict(dequant=1, k_as_a=True)}
            tol = tolerance("paged_decode", "int4").atol
        else:
            if kind.startswith("fp8"):
                c = quantize_fp8(c)
            ref = paged_attention_reference(q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens,
                                            k_scale=c.k_scale, v_scale=c.v_scale)
            variants = {"default": {}}
            tol = tolerance("paged_decode", "fp8" if kind.startswith("fp8") else dt).atol
        for name, kw in variants.items():
            try:
                out = _run_case(c, q, kind, splits, **kw)
                torch.cuda.synchronize()
                err = float((out.float() - ref).abs().max())
                ok = bool(torch.isfinite(out).all()) and err <= tol
                note = ""
            except Exception as exc:  # noqa: BLE001 - report and go on
                err, ok, note = float("nan"), False, f"{type(exc).__name__}: {str(exc)[:300]}"
            rows.append(dict(lens=lens, block=bs, heads=f"{hq}/{hkv}", d=d, dtype=dt, kind=kind, variant=name,
                             splits=splits, err=err, tol=tol, ok=ok, note=note))
            print(f"check {kind:5} {name:10} block {bs:3} {hq}/{hkv} d{d} {dt} lens {lens[:3]} splits {splits}: "
                  f"err {err:.2e} (tol {tol:.0e}) {'ok' if ok else 'FAIL'} {note}", flush=True)
    return rows


def _time(fn, n_rot, *, eager=False):
    fn()
    torch.cuda.synchronize()
    g = graph_ms(fn, n_rot, 5.0, 30.0)
    e = do_bench(fn, 5.0, 30.0) if eager else None
    return g, e


def timing(shapes) -> list[dict]:
    rows = []
    for b, L in shapes:
        shape = DecodeShape(batch=b, context=L, n_q_heads=32, n_kv_heads=8, head_dim=128, block_size=16, dtype="bf16")
        kv_bytes = decode_kv_bytes(b, L, 8, 128, 2)
        free, _ = torch.cuda.mem_get_info()
        n_rot = min(rotations(kv_bytes, free), 8)
        x = _decode_inputs(shape, n_rot, 0)
        q, k, v, tables, lens, rot = x.q, x.k, x.v, x.tables, x.lens, x.rot
        res = {}

        def add(name, fn, eager=False, bytes_per_value=2.0):
            try:
                g, e = _time(fn, n_rot, eager=eager)
                res[name] = dict(graph_ms=g, eager_ms=e, tbps=decode_kv_bytes(b, L, 8, 128, 2) * bytes_per_value / 2
                                 / (g * 1e-3) / 1e12)
            except Exception as exc:  # noqa: BLE001
                res[name] = dict(error=f"{type(exc).__name__}: {str(exc)[:200]}")
            torch.cuda.synchronize()

        add("bf16", lambda: paged_decode_attention(q[(i := rot.next())], k, v, tables[i], lens, validate=False),
            eager=True)
        for splits in ((33, 48, 56, 80) if b == 1 else ()):
            add(f"bf16 splits {splits}", lambda splits=splits: paged_decode_attention(
                q[(i := rot.next())], k, v, tables[i], lens, validate=False, num_splits=splits), eager=True)
        for bn, st in ((64, 3), (128, 3), (64, 4), (32, 4)):
            if (bn, st) != (64, 3):
                add(f"bf16 {bn}/4/{st}", lambda bn=bn, st=st: paged_decode_attention(
                    q[(i := rot.next())], k, v, tables[i], lens, validate=False,
                    config=DecodeConfig(block_n=bn, num_stages=st)))
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
        add("fp8 (V fp16 cvt)", lambda: paged_decode_attention(q[(i := rot.next())], k8, v8, tables[i], lens,
                                                                k_scale=ks, v_scale=vs, validate=False),
            bytes_per_value=1)
        del k8, v8
        torch.cuda.empty_cache()
        k4, v4 = quantize_pool_int4(k), quantize_pool_int4(v)
        del x
        for deq, ka in ((1, False), (2, False), (1, True), (2, True)):
            for bn, st, w in ((128, 3, 4), (64, 3, 4), (128, 3, 8)):
                add(f"int4 d{deq}{' kA' if ka else ''} {bn}/{w}/{st}", lambda bn=bn, st=st, w=w, deq=deq, ka=ka:
                    paged_decode_int4(q[(i := rot.next())], k4, v4, tables[i], lens, validate=False, dequant=deq,
                                      k_as_a=ka, config=DecodeConfig(block_n=bn, num_stages=st, num_warps=w)),
                    bytes_per_value=68 / 256 * 2)
        del k4, v4, k, v
        torch.cuda.empty_cache()
        base = res["bf16"].get("graph_ms")
        cud = res.get("cudnn", {}).get("graph_ms")
        print(f"\nshape B={b} L={L} (32/8, d128, block 16), rotations {n_rot}", flush=True)
        for name, r in res.items():
            if "error" in r:
                print(f"  {name:24} ERROR {r['error']}")
                continue
            extra = f" eager {r['eager_ms']:.4f}" if r.get("eager_ms") else ""
            ratio = f" x bf16 {base / r['graph_ms']:.3f}" if base else ""
            vc_ = f" x cudnn(ours/cudnn speed) {cud / r['graph_ms']:.3f}" if cud else ""
            print(f"  {name:24} {r['graph_ms']:.4f} ms {r['tbps']:.2f} TB/s{ratio}{vc_}{extra}", flush=True)
        rows.append(dict(batch=b, context=L, rotations=n_rot, results=res))
    return rows


def host_cost() -> dict:
    """CPU microseconds per eager call (no sync), batch 1 x 32K, fused and unfused."""
    c = build_paged_cache([32768], block_size=16, n_kv_heads=8, head_dim=128, device="cuda",
                          generator=torch.Generator(device="cuda").manual_seed(1))
    q = torch.randn(1, 32, 128, device="cuda", dtype=torch.bfloat16)
    out = {}
    for name, cfg in (("default", None),):
        fn = lambda cfg=cfg: paged_decode_attention(q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens,  # noqa: E731
                                                    validate=False, config=cfg)
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(300):
            fn()
        host = (time.perf_counter() - t0) / 300 * 1e6
        torch.cuda.synchronize()
        out[name] = host
        print(f"host cost per eager call ({name}): {host:.1f} us", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    t0 = time.time()
    report = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}
    import triton
    report["triton"] = triton.__version__
    report["correctness"] = correctness()
    print(f"[{time.time() - t0:.0f} s] correctness done", flush=True)
    report["host_us"] = host_cost()
    shapes = [(1, 32768), (8, 32768)] if args.quick else [(1, 32768), (1, 131072), (8, 32768), (32, 32768),
                                                           (128, 32768)]
    report["timing"] = timing(shapes)
    print(f"[{time.time() - t0:.0f} s] done", flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "decode_round2.json").write_text(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main()

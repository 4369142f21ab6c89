"""One-call GPU check for the paged decode kernel: correctness at real sizes, then launch variants.

Run on the device machine: ``python -m scripts.tuning.h200_check [--out DIR] [--tune]``. Prints one
line per correctness case (max abs error against the float32 paged reference) and, with
``--tune``, a table of median times / TB/s for launch configurations and split counts next to
SDPA-CUDNN on contiguous KV, so one lease call decides the heuristic table in kernels/decode/config.py.
Writes ``decode_check.json`` under ``--out``. Not imported by the app or the tests.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F

from kernels.cache.paged import build_paged_cache, quantize_fp8, quantize_kv_fp8
from kernels.decode.merge import merge_splits
from kernels.decode.paged import DecodeConfig, default_config, default_num_splits, paged_decode_attention
from kernels.reference.paged import gather_kv_padded, paged_attention_reference
from kernels.theory import decode_kv_bytes, tbps
from kernels.tolerances import tolerance

# (lens, block, hq, hkv, d, dtype, fp8, splits)
CASES = [
    ([1, 17, 97, 1025, 1027], 16, 32, 8, 128, "bf16", None, None),
    ([4096, 3000, 1], 16, 64, 8, 128, "bf16", None, None),
    ([2049, 777], 32, 8, 8, 64, "fp16", None, 7),
    ([5000], 64, 16, 2, 256, "bf16", None, None),
    ([300, 1000], 1, 8, 1, 128, "bf16", None, 3),
    ([20000], 16, 32, 8, 128, "bf16", None, 40),
    ([4096, 999], 16, 32, 8, 128, "bf16", "head", None),
    ([4096, 999], 16, 32, 8, 128, "bf16", "tensor", 5),
    ([3000], 64, 16, 4, 256, "fp16", "head", None),
]


def correctness() -> list[dict]:
    rows = []
    g = torch.Generator(device="cuda").manual_seed(0)
    for lens, bs, hq, hkv, d, dt, fp8, splits in CASES:
        dtype = torch.bfloat16 if dt == "bf16" else torch.float16
        c = build_paged_cache(lens, block_size=bs, n_kv_heads=hkv, head_dim=d, dtype=dtype, device="cuda",
                              shuffle=True, generator=g, spare_blocks=5, poison_unused=True)
        if fp8:
            c = quantize_fp8(c, per_head=fp8 == "head")
        q = torch.randn(len(lens), hq, d, device="cuda", generator=g).to(dtype)
        out = paged_decode_attention(q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens,
                                     k_scale=c.k_scale, v_scale=c.v_scale, num_splits=splits)
        ref = paged_attention_reference(q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens,
                                        k_scale=c.k_scale, v_scale=c.v_scale)
        err = float((out.float() - ref).abs().max())
        tol = tolerance("paged_decode", "fp8" if fp8 else dt).atol
        ok = bool(torch.isfinite(out).all()) and err <= tol
        rows.append(dict(lens=lens, block=bs, heads=f"{hq}/{hkv}", d=d, dtype=dt, fp8=fp8, splits=splits,
                         err=err, tol=tol, ok=ok))
        print(f"{'OK ' if ok else 'BAD'} lens={lens} bs={bs} H={hq}/{hkv} d={d} {dt} fp8={fp8} "
              f"splits={splits} err={err:.2e} (tol {tol})", flush=True)
    return rows


def _bench(fn, rep=30):
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=5, rep=rep, return_mode="median"))


def tune() -> list[dict]:
    rows = []
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    shapes = [(1, 32768, 32, 8), (1, 131072, 32, 8), (8, 32768, 32, 8), (32, 16384, 64, 8),
              (128, 4096, 32, 8), (128, 32768, 32, 8)]
    configs = [DecodeConfig(block_n=n, num_warps=w, num_stages=s)
               for n in (32, 64, 128) for w in (4, 8) for s in (2, 3, 4)
               if not (n == 128 and s == 4)]
    for b, L, hq, hkv in shapes:
        d = 128
        k, v, bt, lens = _pool(b, L, hkv, d)
        q = torch.randn(b, hq, d, device="cuda", dtype=torch.bfloat16)
        kvb = decode_kv_bytes(b, L, hkv, d, 2)
        kc = gather_kv_padded(k, bt, L)
        vc = gather_kv_padded(v, bt, L)
        q4 = q.unsqueeze(2)
        from torch.nn.attention import SDPBackend, sdpa_kernel

        try:
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                cud = _bench(lambda: F.scaled_dot_product_attention(q4, kc, vc, enable_gqa=True))
        except RuntimeError as exc:
            cud = math.nan
            print("cudnn failed", str(exc)[:200])
        del kc, vc
        label = f"B={b} L={L} H={hq}/{hkv}"
        print(f"\n{label}: KV {kvb / 1e9:.2f} GB  cudnn {cud:.4f} ms = {tbps(kvb, cud):.2f} TB/s", flush=True)
        best = None
        split_opts = sorted({default_num_splits(b, hkv, L, 64, sms), 1, *(
            [4, 8, 16, 33, 66] if b * hkv < 2 * sms else [2])})
        for cfg in configs:
            for sp in split_opts:
                try:
                    ms = _bench(lambda: paged_decode_attention(q, k, v, bt, lens, config=cfg, num_splits=sp,
                                                               validate=False))
                except Exception as exc:  # noqa: BLE001
                    print(f"  {cfg} splits={sp}: {type(exc).__name__} {str(exc)[:120]}")
                    continue
                r = dict(shape=label, block_n=cfg.block_n, warps=cfg.num_warps, stages=cfg.num_stages,
                         splits=sp, ms=ms, tbps=tbps(kvb, ms), cudnn_ms=cud)
                rows.append(r)
                if best is None or ms < best["ms"]:
                    best = r
        # fp8 on the same shape, a few configs
        if kvb < 20e9:
            k8, v8, ks, vs = quantize_kv_fp8(k, v)
            for cfg in (DecodeConfig(block_n=64, num_warps=4, num_stages=3),
                        DecodeConfig(block_n=128, num_warps=4, num_stages=3),
                        DecodeConfig(block_n=128, num_warps=8, num_stages=3),
                        DecodeConfig(block_n=64, num_warps=4, num_stages=4)):
                sp = default_num_splits(b, hkv, L, cfg.block_n, sms)
                ms = _bench(lambda: paged_decode_attention(q, k8, v8, bt, lens, k_scale=ks, v_scale=vs,
                                                           config=cfg, num_splits=sp, validate=False))
                rows.append(dict(shape=label, fp8=True, block_n=cfg.block_n, warps=cfg.num_warps,
                                 stages=cfg.num_stages, splits=sp, ms=ms, bf16_best_ms=best["ms"]))
                print(f"  fp8 {cfg.block_n}/{cfg.num_warps}/{cfg.num_stages} splits={sp}: {ms:.4f} ms "
                      f"-> {best['ms'] / ms:.2f}x bf16 best", flush=True)
            del k8, v8
        top = sorted([r for r in rows if r["shape"] == label and "tbps" in r], key=lambda r: r["ms"])[:5]
        dflt = default_config(128, torch.bfloat16)
        for r in top:
            print(f"  top: n={r['block_n']} w={r['warps']} s={r['stages']} splits={r['splits']} "
                  f"{r['ms']:.4f} ms {r['tbps']:.2f} TB/s  vs cudnn {cud / r['ms']:.2f}x", flush=True)
        d_rows = [r for r in rows if r["shape"] == label and "tbps" in r and r["block_n"] == dflt.block_n
                  and r["warps"] == dflt.num_warps and r["stages"] == dflt.num_stages]
        for r in d_rows:
            print(f"  default cfg splits={r['splits']}: {r['ms']:.4f} ms {r['tbps']:.2f} TB/s", flush=True)
        del k, v
        torch.cuda.empty_cache()
    return rows


def _pool(b, L, hkv, d=128, bs=16):
    nblk = L // bs
    k = torch.randn(b * nblk, hkv, bs, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    bt = torch.randperm(b * nblk, device="cuda").to(torch.int32).reshape(b, nblk)
    lens = torch.full((b,), L, dtype=torch.int32, device="cuda")
    return k, v, bt, lens


def tune2() -> list[dict]:
    """Small-batch configs/splits against CUDNN, the merge kernel's cost, FP8 via fp16 dots."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    rows = []
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for b, L, hq, hkv in [(1, 32768, 32, 8), (1, 32768, 64, 8), (1, 131072, 32, 8), (8, 32768, 32, 8)]:
        k, v, bt, lens = _pool(b, L, hkv)
        q = torch.randn(b, hq, 128, device="cuda", dtype=torch.bfloat16)
        kvb = decode_kv_bytes(b, L, hkv, 128, 2)
        kc, vc = gather_kv_padded(k, bt, L), gather_kv_padded(v, bt, L)
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            cud = _bench(lambda: F.scaled_dot_product_attention(q.unsqueeze(2), kc, vc, enable_gqa=True))
        del kc, vc
        label = f"B={b} L={L} H={hq}/{hkv}"
        print(f"\n{label}: cudnn {cud:.4f} ms = {tbps(kvb, cud):.2f} TB/s", flush=True)
        res = []
        for n in (16, 32, 64):
            for w in (2, 4):
                for st in (2, 3, 4):
                    cfg = DecodeConfig(block_n=n, num_warps=w, num_stages=st)
                    for sp in (33, 66, 99, 128) if b == 1 else (4, 8, 16):
                        ms = _bench(lambda: paged_decode_attention(q, k, v, bt, lens, config=cfg,
                                                                   num_splits=sp, validate=False))
                        res.append((ms, n, w, st, sp))
        res.sort()
        for ms, n, w, st, sp in res[:6]:
            print(f"  n={n} w={w} s={st} splits={sp}: {ms:.4f} ms {tbps(kvb, ms):.2f} TB/s "
                  f"{cud / ms:.3f}x cudnn", flush=True)
            rows.append(dict(shape=label, block_n=n, warps=w, stages=st, splits=sp, ms=ms, cudnn_ms=cud))
        ms, n, w, st, sp = res[0]
        po = torch.randn(b, hq, sp, 128, device="cuda")
        pl = torch.randn(b, hq, sp, device="cuda")
        o = torch.empty(b, hq, 128, device="cuda", dtype=torch.bfloat16)
        merge = _bench(lambda: merge_splits(po, pl, o))
        print(f"  merge kernel alone at splits={sp}: {merge:.4f} ms", flush=True)
        rows.append(dict(shape=label, merge_ms=merge, splits=sp))
        del k, v
        torch.cuda.empty_cache()
    for b, L, hq, hkv in [(8, 32768, 32, 8), (32, 16384, 64, 8), (128, 32768, 32, 8), (1, 32768, 32, 8)]:
        k, v, bt, lens = _pool(b, L, hkv)
        q = torch.randn(b, hq, 128, device="cuda", dtype=torch.bfloat16)
        k8, v8, ks, vs = quantize_kv_fp8(k, v)
        bf = _bench(lambda: paged_decode_attention(q, k, v, bt, lens, validate=False))
        label = f"B={b} L={L} H={hq}/{hkv}"
        print(f"\nfp8 {label}: bf16 default {bf:.4f} ms", flush=True)
        res = []
        for n in (64, 128, 256):
            for w in (4, 8):
                for st in (2, 3, 4):
                    cfg = DecodeConfig(block_n=n, num_warps=w, num_stages=st)
                    sps = sorted({default_num_splits(b, hkv, L, n, sms), 1 if b > 8 else 66})
                    for sp in sps:
                        try:
                            ms = _bench(lambda: paged_decode_attention(
                                q, k8, v8, bt, lens, k_scale=ks, v_scale=vs, config=cfg, num_splits=sp,
                                validate=False))
                        except Exception as exc:  # noqa: BLE001
                            print(f"  n={n} w={w} s={st}: {type(exc).__name__}")
                            continue
                        res.append((ms, n, w, st, sp))
        res.sort()
        for ms, n, w, st, sp in res[:5]:
            print(f"  fp8 n={n} w={w} s={st} splits={sp}: {ms:.4f} ms -> {bf / ms:.2f}x bf16", flush=True)
            rows.append(dict(shape=label, fp8=True, block_n=n, warps=w, stages=st, splits=sp, ms=ms, bf16_ms=bf))
        del k, v, k8, v8
        torch.cuda.empty_cache()
    return rows


def tune3() -> list[dict]:
    """Why batch 1 is slower inside the benchmark (rotation over a 1 GB pool? CPU?), and
    FP8 variants (num_stages 1: no smem staging of fp8 tiles; e4m3 q.k^T dot)."""
    import time

    rows = []
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    b, L, hq, hkv, d, bs = 1, 32768, 32, 8, 128, 16
    nblk = L // bs
    for n_rot, scatter in ((1, "pool"), (8, "pool"), (8, "chunk"), (32, "chunk")):
        nb = n_rot * nblk
        k = torch.randn(nb, hkv, bs, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        if scatter == "pool":  # the benchmark: one permutation of the whole pool
            tables = torch.randperm(nb, device="cuda").to(torch.int32).reshape(n_rot, 1, nblk)
        else:  # each rotation's blocks shuffled within its own 134 MB chunk
            tables = torch.stack([torch.randperm(nblk, device="cuda") + r * nblk for r in range(n_rot)])
            tables = tables.to(torch.int32).reshape(n_rot, 1, nblk)
        lens = torch.full((1,), L, dtype=torch.int32, device="cuda")
        q = torch.randn(n_rot, 1, hq, d, device="cuda", dtype=torch.bfloat16)
        state = {"i": 0}

        def rot():
            state["i"] = (state["i"] + 1) % n_rot
            return state["i"]

        fixed = _bench(lambda: paged_decode_attention(q[0], k, v, tables[0], lens, validate=False))
        rotating = _bench(lambda: paged_decode_attention(q[(i := rot())], k, v, tables[i], lens,
                                                         validate=False))
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(300):
            paged_decode_attention(q[0], k, v, tables[0], lens, validate=False)
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        cpu_us = (t1 - t0) / 300 * 1e6
        print(f"B=1 L=32K n_rot={n_rot} {scatter}: fixed {fixed:.4f} ms, rotating {rotating:.4f} ms, "
              f"enqueue {cpu_us:.1f} us/call", flush=True)
        rows.append(dict(n_rot=n_rot, scatter=scatter, fixed_ms=fixed, rotating_ms=rotating, cpu_us=cpu_us))
        del k, v
        torch.cuda.empty_cache()
    for b, L, hq, hkv in [(128, 32768, 32, 8), (8, 32768, 32, 8), (32, 16384, 64, 8)]:
        k, v, bt, lens = _pool(b, L, hkv)
        q = torch.randn(b, hq, 128, device="cuda", dtype=torch.bfloat16)
        k8, v8, ks, vs = quantize_kv_fp8(k, v)
        bf = _bench(lambda: paged_decode_attention(q, k, v, bt, lens, validate=False))
        ref = paged_decode_attention(q, k, v, bt, lens).float()
        label = f"B={b} L={L} H={hq}/{hkv}"
        print(f"\nfp8 {label}: bf16 default {bf:.4f} ms", flush=True)
        res = []
        for qk in (False, True):
            for n in (64, 128):
                for w in (4,):  # 8 warps lost in every earlier FP8 measurement
                    for st in (1, 2, 3):
                        cfg = DecodeConfig(block_n=n, num_warps=w, num_stages=st, fp8_qk_dot=qk)
                        sp = default_num_splits(b, hkv, L, n, sms)
                        try:
                            f = lambda: paged_decode_attention(q, k8, v8, bt, lens, k_scale=ks, v_scale=vs,  # noqa: E731
                                                               config=cfg, num_splits=sp, validate=False)
                            err = float((f().float() - ref).abs().max())
                            ms = _bench(f)
                        except Exception as exc:  # noqa: BLE001
                            print(f"  qk8={qk} n={n} w={w} s={st}: {type(exc).__name__} {str(exc)[:100]}")
                            continue
                        res.append((ms, qk, n, w, st, sp, err))
        res.sort()
        for ms, qk, n, w, st, sp, err in res[:8]:
            print(f"  fp8 qk8={qk} n={n} w={w} s={st} splits={sp}: {ms:.4f} ms -> {bf / ms:.2f}x bf16, "
                  f"err vs bf16 out {err:.1e}", flush=True)
            rows.append(dict(shape=label, fp8=True, qk8=qk, block_n=n, warps=w, stages=st, splits=sp, ms=ms,
                             bf16_ms=bf, err=err))
        del k, v, k8, v8
        torch.cuda.empty_cache()
    return rows


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=".")
    p.add_argument("--tune", action="store_true")
    p.add_argument("--tune2", action="store_true")
    p.add_argument("--tune3", action="store_true")
    p.add_argument("--skip-correctness", action="store_true")
    args = p.parse_args()
    print(torch.cuda.get_device_name(0), torch.__version__, flush=True)
    res = {"correctness": [] if args.skip_correctness else correctness()}
    if args.tune:
        res["tune"] = tune()
    if args.tune2:
        res["tune2"] = tune2()
    if args.tune3:
        res["tune3"] = tune3()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "decode_check.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()

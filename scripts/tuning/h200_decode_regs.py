"""One-call GPU check: register caps for more resident decode programs, and FP8 with fp16 queries.

Run on the device machine: ``python -m scripts.tuning.h200_decode_regs [--out DIR]``.

The FP8 kernel's e4m3 q.k dot (query quantised per program) runs at 168 registers, three programs
per SM; with the query kept in fp16 the same kernel takes 209 (two per SM), which is what made
it slower, not the arithmetic (on Hopper Triton upcasts both e4m3 operands to fp16 for mma.sync).
A 168-register cap gives the fp16-query kernel three programs per SM (12 bytes of spills in the
local sm_90 compile) at the fp16 dots' accuracy. The bf16 kernel at two stages holds 96 registers
(five per SM). Prints (and writes ``decode_regs.json`` under ``--out``): errors against the
dequantised reference by sequence length, then CUDA-graph medians per shape with each variant's
split count (the wave rule at its compiled kernel's resident programs) and ratios to bf16 and
SDPA-cuDNN. Not imported by the app or the tests.
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
from kernels.bench.timing import graph_ms, rotations, sdpa_context
from kernels.decode.launch import _RESIDENT
from kernels.cache.paged import build_paged_cache, quantize_fp8, quantize_kv_fp8
from kernels.decode.paged import DecodeConfig, decode_num_splits, default_config, paged_decode_attention
from kernels.reference.paged import paged_attention_reference
from kernels.theory import decode_kv_bytes

FP8_QK = default_config(128, torch.float8_e4m3fn)
FP8 = {
    "fp8 e4m3 q.k (default)": FP8_QK,
    "fp8 fp16 q": dataclasses.replace(FP8_QK, fp8_qk_dot=False),
    "fp8 fp16 q r168": dataclasses.replace(FP8_QK, fp8_qk_dot=False, maxnreg=168),
    "fp8 fp16 q r160": dataclasses.replace(FP8_QK, fp8_qk_dot=False, maxnreg=160),
}
BF16 = {
    "bf16 64/4/3 (default)": default_config(128, torch.bfloat16),
    "bf16 64/4/2": DecodeConfig(block_n=64, num_warps=4, num_stages=2, waves=1),
    "bf16 64/4/2 w2": DecodeConfig(block_n=64, num_warps=4, num_stages=2, waves=2),
    "bf16 64/4/3 r96": DecodeConfig(block_n=64, num_warps=4, num_stages=3, waves=1, maxnreg=96),
}


def fp8_errors() -> list[dict]:
    rows = []
    for lens in ([1, 17, 97], [1025, 1027], [4096, 999]):
        worst = dict.fromkeys(FP8, 0.0)
        for seed in range(4):
            g = torch.Generator(device="cuda").manual_seed(100 + seed)
            c = quantize_fp8(build_paged_cache(lens, block_size=16, n_kv_heads=8, head_dim=128, dtype=torch.bfloat16,
                                               device="cuda", shuffle=True, generator=g, poison_unused=True))
            q = torch.randn(len(lens), 32, 128, device="cuda", generator=g).to(torch.bfloat16)
            ref = paged_attention_reference(q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens,
                                            k_scale=c.k_scale, v_scale=c.v_scale)
            for name, cfg in FP8.items():
                out = paged_decode_attention(q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens, k_scale=c.k_scale,
                                             v_scale=c.v_scale, config=cfg)
                worst[name] = max(worst[name], (out.float() - ref).abs().max().item())
        print(f"fp8 error lens={lens}: " + " | ".join(f"{k} {v:.2e}" for k, v in worst.items()), flush=True)
        rows.append(dict(lens=lens, worst=worst))
    return rows


SHAPES = [(1, 32768, 32), (1, 131072, 32), (8, 32768, 32), (32, 16384, 64), (128, 4096, 32), (128, 32768, 32)]


def timing() -> list[dict]:
    rows = []
    for b, L, hq in SHAPES:
        shape = DecodeShape(batch=b, context=L, n_q_heads=hq, n_kv_heads=8, head_dim=128, block_size=16, dtype="bf16")
        kv_bytes = decode_kv_bytes(b, L, 8, 128, 2)
        free, _ = torch.cuda.mem_get_info()
        n_rot = min(rotations(kv_bytes, free // 3), 8)
        x = _decode_inputs(shape, n_rot, 0)
        q, k, v, tables, lens, rot = x.q, x.k, x.v, x.tables, x.lens, x.rot
        res = {}

        def add(name, fn, bytes_per_value=2.0):
            try:
                fn()
                torch.cuda.synchronize()
                g = graph_ms(fn, n_rot, 5.0, 30.0)
                res[name] = dict(graph_ms=g, tbps=kv_bytes * bytes_per_value / 2 / (g * 1e-3) / 1e12)
            except Exception as exc:  # noqa: BLE001
                res[name] = dict(error=f"{type(exc).__name__}: {str(exc)[:300]}")
            torch.cuda.synchronize()

        for name, cfg in BF16.items():
            s = decode_num_splits(q[0], k, v, tables[0], lens, config=cfg)
            add(f"{name} (s{s})", lambda cfg=cfg: paged_decode_attention(q[(i := rot.next())], k, v, tables[i], lens,
                                                                         validate=False, config=cfg))
        kc, vc = x.contiguous()
        q4 = q.unsqueeze(3)

        def cudnn():
            i = rot.next()
            with sdpa_context("CUDNN_ATTENTION"):
                return F.scaled_dot_product_attention(q4[i], kc[i], vc[i], enable_gqa=True)
        add("cudnn", cudnn)
        del kc, vc
        x.state.clear()
        del x
        k8, v8, ks, vs = quantize_kv_fp8(k, v)
        del k, v
        torch.cuda.empty_cache()
        for name, cfg in FP8.items():
            s = decode_num_splits(q[0], k8, v8, tables[0], lens, config=cfg)
            add(f"{name} (s{s})", lambda cfg=cfg: paged_decode_attention(
                q[(i := rot.next())], k8, v8, tables[i], lens, k_scale=ks, v_scale=vs, validate=False, config=cfg),
                1.0)
        del k8, v8
        torch.cuda.empty_cache()
        bf = next(iter(res.values())).get("graph_ms")
        cud = res.get("cudnn", {}).get("graph_ms")
        print(f"\nshape B={b} L={L} ({hq}/8, d128, block 16), rotations {n_rot}", flush=True)
        for name, r in res.items():
            if "error" in r:
                print(f"  {name:30} ERROR {r['error']}")
                continue
            print(f"  {name:30} {r['graph_ms']:.4f} ms {r['tbps']:.2f} TB/s x bf16 {bf / r['graph_ms']:.3f}"
                  f" x cudnn {cud / r['graph_ms']:.3f}", flush=True)
        rows.append(dict(batch=b, context=L, n_q_heads=hq, rotations=n_rot, results=res))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    t0 = time.time()
    import triton
    report = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__}
    report["fp8_errors"] = fp8_errors()
    report["timing"] = timing()
    report["resident"] = sorted({(repr(k[1]), v) for k, v in _RESIDENT.items()})
    for cfg, n in report["resident"]:
        print(f"resident per SM {n}: {cfg}", flush=True)
    print(f"[{time.time() - t0:.0f} s] done", flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "decode_regs.json").write_text(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main()

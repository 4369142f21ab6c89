"""One GPU call: check and time every Gluon forward configuration against Triton and cuDNN.

Run on the H200 (the device lease is short, so one call checks and times everything):

    python3 -m scripts.tuning.h200_gluon_check --json $OUT/gluon.json

1. Correctness: each ``GLUON_CONFIGS`` entry at N = 1027 (query and key tails), 32/8 heads,
   bf16, causal and not: max abs error of the output against the float32 reference.
2. Speed: TFLOP/s (``kernels.theory.prefill_flops``: 4·B·Hq·N²·D, halved for causal) of each
   configuration, of ``flash_attention_forward`` (the Triton kernel, its tuned table) and of
   SDPA with the cuDNN backend on the same tensors: B1 N4K, B4 N4K, B2 N8K, B1 N16K at 32/8
   heads and B4 N4K at 32/32, D = 128, causal and not. Medians of ``triton.testing.do_bench``
   (warmup 10 ms, rep 40 ms).

A configuration that fails to compile or run is reported as an error row; the others go on.
``--configs 0,2`` limits the run to those entries of ``GLUON_CONFIGS``. Nothing runs at import.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import torch

from kernels.bench.timing import environment, sdpa_context
from kernels.prefill.flash import flash_attention_forward
from kernels.prefill.flash_gluon import GLUON_CONFIGS, gluon_attention_forward
from kernels.reference.dense import naive_attention_lse
from kernels.theory import prefill_flops, tflops

# (batch, N, Hq, Hkv): the target shapes.
SHAPES = [(1, 4096, 32, 8), (4, 4096, 32, 8), (2, 8192, 32, 8), (1, 16384, 32, 8), (4, 4096, 32, 32)]
HEAD_DIM = 128


def _bench(fn) -> float:
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median"))


def _try(fn) -> dict:
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - a failed variant is a row of the report
        return {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"}


def _cudnn(q, k, v, causal):
    def run():
        with sdpa_context("CUDNN_ATTENTION"):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    return run


def check_part(configs) -> list[dict]:
    rows = []
    g = torch.Generator(device="cuda").manual_seed(1027)
    q, k, v = (torch.randn(1, h, 1027, HEAD_DIM, device="cuda", dtype=torch.bfloat16, generator=g)
               for h in (32, 8, 8))
    for causal in (False, True):
        ref, ref_lse = naive_attention_lse(q, k, v, causal=causal)
        for cfg in configs:
            def one(cfg=cfg):
                out, lse = gluon_attention_forward(q, k, v, causal=causal, config=cfg)
                return {"err": float((out.float() - ref).abs().max()),
                        "lse_err": float((lse - ref_lse).abs().max())}
            rows.append({"check": f"N1027 32/8 {'causal' if causal else 'full'}", "config": cfg.name, **_try(one)})
            print(rows[-1], flush=True)
    return rows


def speed_part(configs) -> list[dict]:
    rows = []
    for batch, n, hq, hkv in SHAPES:
        g = torch.Generator(device="cuda").manual_seed(n + hkv)
        q, k, v = (torch.randn(batch, h, n, HEAD_DIM, device="cuda", dtype=torch.bfloat16, generator=g)
                   for h in (hq, hkv, hkv))
        for causal in (False, True):
            flops = prefill_flops(batch, n, hq, HEAD_DIM, causal)
            label = f"B{batch} N{n // 1024}K {hq}/{hkv} {'causal' if causal else 'full'}"
            contenders = [("cudnn", _cudnn(q, k, v, causal)),
                          ("triton", lambda: flash_attention_forward(q, k, v, causal=causal))]
            contenders += [(cfg.name, lambda cfg=cfg: gluon_attention_forward(q, k, v, causal=causal, config=cfg))
                           for cfg in configs]
            cudnn_ms = None
            for name, fn in contenders:
                row = {"shape": label, "config": name, **_try(lambda fn=fn: {"ms": _bench(fn)})}
                if "ms" in row:
                    row["tflops"] = tflops(flops, row["ms"])
                    if name == "cudnn":
                        cudnn_ms = row["ms"]
                    elif cudnn_ms is not None:
                        row["vs_cudnn"] = cudnn_ms / row["ms"]
                rows.append(row)
        del q, k, v
    return rows


def _table(rows: list[dict]) -> str:
    """shape x contender grid of TFLOP/s (ratio to cuDNN in brackets)."""
    shapes = list(dict.fromkeys(r["shape"] for r in rows))
    names = list(dict.fromkeys(r["config"] for r in rows))
    cell = {(r["shape"], r["config"]): r for r in rows}
    lines = ["shape | " + " | ".join(names)]
    for s in shapes:
        parts = []
        for name in names:
            r = cell.get((s, name), {})
            if "tflops" not in r:
                parts.append("err" if "error" in r else "-")
            else:
                parts.append(f"{r['tflops']:.0f}" + (f" ({r['vs_cudnn']:.3f})" if "vs_cudnn" in r else ""))
        lines.append(f"{s} | " + " | ".join(parts))
    worst = []
    for name in names[1:]:
        for mask in ("full", "causal"):
            ratios = [cell[(s, name)].get("vs_cudnn") for s in shapes if s.endswith(mask) and (s, name) in cell]
            if ratios and all(r is not None for r in ratios):
                worst.append(f"{name} {mask}: worst {min(ratios):.3f}")
    return "\n".join(lines + worst)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", metavar="PATH", help="write the figures as JSON to PATH")
    p.add_argument("--configs", help="comma-separated indices into GLUON_CONFIGS (default: all)")
    args = p.parse_args(argv)
    configs = list(GLUON_CONFIGS)
    if args.configs:
        try:
            configs = [GLUON_CONFIGS[int(i)] for i in args.configs.split(",")]
        except (ValueError, IndexError):
            p.error(f"--configs: expected indices 0..{len(GLUON_CONFIGS) - 1}, got {args.configs!r}")
    if not torch.cuda.is_available():
        p.error("needs a CUDA GPU")
    report: dict = {"provenance": dataclasses.asdict(environment("python3 -m scripts.tuning.h200_gluon_check"))}
    for key, fn in (("check", lambda: check_part(configs)), ("speed", lambda: speed_part(configs))):
        t0 = time.perf_counter()
        report[key] = _try(lambda fn=fn: {"rows": fn()})
        print(f"== {key} ({time.perf_counter() - t0:.1f} s)", flush=True)
        if args.json:  # after every part: a call cut short still returns what was measured
            with open(args.json, "w") as f:
                json.dump(report, f, indent=1)
    for row in report["check"].get("rows", []):
        print(f"{row['check']:<22} {row['config']:<24} err {row.get('err', row.get('error'))}")
    if "rows" in report["speed"]:
        print(_table(report["speed"]["rows"]))
    else:
        print(report["speed"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

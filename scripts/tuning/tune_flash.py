"""Check and time the tiled forward kernel's launch configurations against PyTorch's SDPA backends.

Run on the GPU machine, one call does everything (the device lease is short):

    python3 -m scripts.tuning.tune_flash --json $OUT/tune_flash.json

1. Correctness of every candidate configuration against :func:`kernels.reference.dense.naive_attention_lse`
   at a real size with a masked tail (B=1, Hq=32, Hkv=8, N=1027, D=128, bf16), causal and not.
2. Tuning: every candidate timed at the tuning shapes; the fastest correct one per
   (head dim, causal) is reported (and is what ``_GPU_CONFIGS`` in kernels/prefill/flash.py should hold).
3. Sweep: the table configuration and the fastest candidate against SDPA's FLASH_ATTENTION,
   CUDNN_ATTENTION and EFFICIENT_ATTENTION backends on the same tensors, for B in 1, 2, 4,
   Hq=32 with Hkv=8 (and 32), N = 1K, 4K, 8K, 16K, causal and not, D=128, bf16.

FLOPs: non-causal ``4 · B · Hq · N² · D`` (two matmuls, 2 FLOPs per multiply-add); causal counts
half of that (the work a causal kernel must do), as FlashAttention's benchmarks do.
Times are medians of ``triton.testing.do_bench``. Nothing runs at import.

``--smoke`` runs the same code paths at tiny sizes on the CPU under the Triton interpreter
(wall-clock timing, SDPA GPU backends reported as unavailable), to check the script itself.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import time
import traceback

import torch

from kernels.prefill.flash import FlashConfig, flash_attention_forward, pick_config
from kernels.reference.dense import naive_attention_lse
from kernels.tolerances import tolerance

# Candidates for D=128 on Hopper: pointer loads vs TMA descriptors, 64/128-key tiles, 4/8 warps,
# 2-4 pipeline stages, warp specialisation. BLOCK_M=128 matches two m64 wgmma warpgroups.
CANDIDATES: dict[str, FlashConfig] = {
    # Best of calls 1-3 for D = 128 (the table's choice is the TMA one).
    "ptr_128x64_w8_s3": FlashConfig(block_m=128, block_n=64, num_warps=8, num_stages=3),
    "ptr_128x128_w8_s3": FlashConfig(block_m=128, block_n=128, num_warps=8, num_stages=3),
    "tma_128x128_w8_s3": FlashConfig(block_m=128, block_n=128, num_warps=8, num_stages=3, use_tma=True),
    "tma_ws_128x128_w8_s3": FlashConfig(
        block_m=128, block_n=128, num_warps=8, num_stages=3, use_tma=True, warp_specialize=True
    ),
}
# Slower, and left out (docs/kernels/PREFILL.md, "Tried and lost"): ptr_128x128_w8_s2/s3, tma_128x64_w4_s3,
# tma_128x64_w8_s3, tma_128x128_w8_s4 (out of shared memory), tma_256x64_w8_s3,
# tma_ws_128x128_w8_s3 (warp_specialize: no change on triton 3.6 / Hopper), ptr_128x64_w8_s4,
# next-Q·Kᵀ-before-softmax software pipelining (4 variants, all slower), packed bf16x2/f16x2 exp2
# (ptxas splits each into two MUFU ops: no gain, lse error 3.5e-3), half the exp2 by an FMA-pipe
# polynomial (FlashAttention-4's trick): 1-9 % slower. None of them is in the kernel.

SDPA_BACKENDS = ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION")

# Output tolerance against the float32 reference for bf16: the project's table (kernels.tolerances).
BF16_ATOL = tolerance("flash_forward", "bf16").atol
LSE_ATOL = tolerance("flash_forward_lse", "fp32").atol


@dataclasses.dataclass(frozen=True, kw_only=True)
class Shape:
    batch: int
    hq: int
    hkv: int
    n: int
    d: int
    causal: bool
    dtype: str = "bfloat16"

    @property
    def flops(self) -> float:
        """4·B·Hq·N²·D for the two matmuls; causal does half."""
        f = 4.0 * self.batch * self.hq * self.n * self.n * self.d
        return f / 2 if self.causal else f

    def label(self) -> str:
        c = "causal" if self.causal else "full"
        return f"B{self.batch} H{self.hq}/{self.hkv} N{self.n} D{self.d} {c} {self.dtype}"


def _inputs(s: Shape, device: str):
    dt = getattr(torch, s.dtype)
    q = torch.randn(s.batch, s.hq, s.n, s.d, device=device, dtype=dt)
    k = torch.randn(s.batch, s.hkv, s.n, s.d, device=device, dtype=dt)
    v = torch.randn(s.batch, s.hkv, s.n, s.d, device=device, dtype=dt)
    return q, k, v


def _timer(device: str):
    """Median ms of fn: do_bench on the GPU, one wall-clock call under the interpreter."""
    if device == "cuda":
        import triton.testing

        def bench(fn):
            return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))

        return bench

    def bench_cpu(fn):
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3

    return bench_cpu


def _sdpa_fn(backend: str, q, k, v, causal: bool):
    """A closure running SDPA restricted to one backend; GQA through enable_gqa, else expanded KV."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    be = getattr(SDPBackend, backend)
    group = q.shape[1] // k.shape[1]

    def run_gqa():
        with sdpa_kernel([be]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=group > 1)

    try:
        run_gqa()
        return run_gqa, "enable_gqa" if group > 1 else "mha"
    except Exception:  # noqa: BLE001 - backend refuses GQA here: give it expanded heads
        ke = k.repeat_interleave(group, 1)
        ve = v.repeat_interleave(group, 1)

        def run_expanded():
            with sdpa_kernel([be]):
                return F.scaled_dot_product_attention(q, ke, ve, is_causal=causal)

        run_expanded()  # raises if the backend cannot run this shape at all
        return run_expanded, "expanded_kv"


def check_config(cfg: FlashConfig, s: Shape, device: str) -> dict:
    """Max abs errors of out and lse against the float32 reference; finite-output check."""
    q, k, v = _inputs(s, device)
    out, lse = flash_attention_forward(q, k, v, causal=s.causal, config=cfg)
    ref_out, ref_lse = naive_attention_lse(q, k, v, causal=s.causal)
    err = (out.float() - ref_out).abs().max().item()
    lse_err = (lse - ref_lse).abs().max().item()
    finite = bool(torch.isfinite(out).all().item())
    return {"out_err": err, "lse_err": lse_err, "finite": finite, "ok": finite and err < BF16_ATOL and lse_err < LSE_ATOL}


def time_ours(cfg: FlashConfig | None, s: Shape, device: str, bench) -> float:
    q, k, v = _inputs(s, device)
    return bench(lambda: flash_attention_forward(q, k, v, causal=s.causal, config=cfg))


def matmul_ceiling(device: str, bench) -> float | None:
    """bf16 8192³ matmul TFLOP/s on random data, measured in the same run."""
    if device != "cuda":
        return None
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    ms = bench(lambda: a @ b)
    return 2 * 8192**3 / (ms * 1e-3) / 1e12


def _dump(path: str | None, obj: dict) -> None:
    """Write results so far (a run cut off by the lease's time limit keeps what it measured)."""
    if path:
        with open(path, "w") as fh:
            json.dump(obj, fh, indent=1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", help="write the full results here")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes under the interpreter (CPU)")
    ap.add_argument("--candidates", default="all", help="comma-separated candidate names, or all")
    ap.add_argument("--no-sweep", action="store_true", help="skip the SDPA sweep")
    args = ap.parse_args(argv)

    device = "cuda" if torch.cuda.is_available() and not args.smoke else "cpu"
    bench = _timer(device)
    torch.manual_seed(0)
    import triton

    result: dict = {
        "device": torch.cuda.get_device_name() if device == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "flop_formula": "4*B*Hq*N^2*D, halved for causal",
    }
    result["matmul_bf16_tflops"] = matmul_ceiling(device, bench)

    names = list(CANDIDATES) if args.candidates == "all" else args.candidates.split(",")
    if args.smoke:
        cands = {n: dataclasses.replace(CANDIDATES[n], block_m=32, block_n=16) for n in names[:2]}
        check_shape = dict(batch=1, hq=4, hkv=1, n=37, d=128)
        tune_shapes = [dict(batch=1, hq=4, hkv=1, n=64, d=128)]
        sweep = [dict(batch=1, hq=4, hkv=1, n=64, d=128)]
    else:
        cands = {n: CANDIDATES[n] for n in names}
        check_shape = dict(batch=1, hq=32, hkv=8, n=1027, d=128)
        tune_shapes = [dict(batch=1, hq=32, hkv=8, n=4096, d=128), dict(batch=2, hq=32, hkv=8, n=16384, d=128)]
        sweep = [
            dict(batch=b, hq=32, hkv=hkv, n=n, d=128)
            for b in (1, 2, 4)
            for hkv in ((8, 32) if b == 1 else (8,))
            for n in (1024, 4096, 8192, 16384)
        ] + [dict(batch=2, hq=32, hkv=8, n=8192, d=64)]  # head dim 64: one shape, for the record

    # 1 + 2: correctness and tuning of every candidate -----------------------------------
    tune_rows = []
    best: dict[bool, tuple[str, float]] = {}
    for causal in (False, True):
        for name, cfg in cands.items():
            row = {"name": name, "causal": causal, "config": dataclasses.asdict(cfg)}
            try:
                t0 = time.perf_counter()
                row.update(check_config(cfg, Shape(causal=causal, **check_shape), device))
                row["compile_and_check_s"] = round(time.perf_counter() - t0, 2)
                tflops = []
                for ts in tune_shapes:
                    s = Shape(causal=causal, **ts)
                    ms = time_ours(cfg, s, device, bench)
                    tflops.append(s.flops / (ms * 1e-3) / 1e12)
                    row[f"tflops_{s.label()}"] = round(tflops[-1], 1)
                row["min_tflops"] = round(min(tflops), 1)
                if row["ok"] and (causal not in best or row["min_tflops"] > best[causal][1]):
                    best[causal] = (name, row["min_tflops"])
            except Exception as exc:  # noqa: BLE001 - a config that fails to compile is a result
                row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
                traceback.print_exc(limit=2, file=sys.stderr)
            tune_rows.append(row)
            print(json.dumps(row), flush=True)
            _dump(args.json, result | {"tune": tune_rows})
    result["tune"] = tune_rows
    result["best"] = {("causal" if c else "full"): v for c, v in best.items()}

    # 3: sweep against SDPA backends ----------------------------------------------------
    sweep_rows = []
    if not args.no_sweep:
        for causal in (False, True):
            best_cfg = cands[best[causal][0]] if causal in best else None
            for sh in sweep:
                s = Shape(causal=causal, **sh)
                row = {"shape": s.label(), **dataclasses.asdict(s), "flops": s.flops}
                try:
                    q, k, v = _inputs(s, device)
                    table_cfg = pick_config(head_dim=s.d, causal=causal, n_ctx=s.n)
                    ms = bench(lambda: flash_attention_forward(q, k, v, causal=causal))
                    row["ours_table_ms"] = ms
                    row["ours_table_cfg"] = dataclasses.asdict(table_cfg)
                    if best_cfg is not None:
                        ms_b = bench(lambda: flash_attention_forward(q, k, v, causal=causal, config=best_cfg))
                        row["ours_best_ms"] = ms_b
                    for be in SDPA_BACKENDS:
                        try:
                            fn, how = _sdpa_fn(be, q, k, v, causal)
                            row[f"{be}_ms"] = bench(fn)
                            row[f"{be}_gqa"] = how
                        except Exception as exc:  # noqa: BLE001 - backend unavailable for this shape
                            row[f"{be}_error"] = f"{type(exc).__name__}"
                    del q, k, v
                except torch.cuda.OutOfMemoryError:
                    row["error"] = "out of memory"
                for key in list(row):
                    if key.endswith("_ms"):
                        row[key.replace("_ms", "_tflops")] = round(s.flops / (row[key] * 1e-3) / 1e12, 1)
                sweep_rows.append(row)
                _dump(args.json, result | {"sweep": sweep_rows})
                if device == "cuda":
                    torch.cuda.empty_cache()
        result["sweep"] = sweep_rows

        # Targets: worst ratio over N >= 4K, Hq/Hkv = 32/8, d=128 bf16 (the benchmark's prefill targets).
        targets = {}
        for causal in (False, True):
            rows = [r for r in sweep_rows if r["causal"] == causal and r["n"] >= 4096 and r["hkv"] == 8 and r["d"] == 128]
            for be, need in (("FLASH_ATTENTION", 1.2), ("CUDNN_ATTENTION", 0.8)):
                for which in ("ours_table", "ours_best"):
                    ratios = [r[f"{be}_ms"] / r[f"{which}_ms"] for r in rows if f"{be}_ms" in r and f"{which}_ms" in r]
                    if ratios:
                        targets[f"{which}_vs_{be}_{'causal' if causal else 'full'}"] = {
                            "worst": round(min(ratios), 3), "required": need, "met": min(ratios) >= need
                        }
        result["targets"] = targets

    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)

    # Short tables last (the device reply carries the end of the output).
    print(f"\n{result['device']} torch {result['torch']} triton {result['triton']}  "
          f"matmul bf16 {result['matmul_bf16_tflops']} TFLOP/s")
    print(f"{'candidate':24s} {'causal':6s} {'err':>8s} {'minTF':>7s}")
    for r in tune_rows:
        print(f"{r['name']:24s} {str(r['causal']):6s} {r.get('out_err', float('nan')):8.1e} "
              f"{r.get('min_tflops', float('nan')):7.1f} {r.get('error', '')[:60]}")
    if sweep_rows:
        print(f"\n{'shape':36s} {'table':>7s} {'best':>7s} {'FLASH':>7s} {'CUDNN':>7s} {'EFF':>7s}  TFLOP/s")
        for r in sweep_rows:
            vals = [r.get(k, float("nan")) for k in ("ours_table_tflops", "ours_best_tflops",
                    "FLASH_ATTENTION_tflops", "CUDNN_ATTENTION_tflops", "EFFICIENT_ATTENTION_tflops")]
            print(f"{r['shape']:36s} " + " ".join(f"{x:7.1f}" for x in vals))
        for name, t in result.get("targets", {}).items():
            print(f"{name:44s} worst {t['worst']:.3f} need {t['required']} met {t['met']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""One GPU call: check and time the chunked-prefill kernel's and the dense forward's variants.

Run on the GPU machine (the device lease is short, so one call does everything):

    python3 -m scripts.tuning.h200_chunked_check --json $OUT/chunked.json

1. Mixed batches (``kernels.bench.mixed.mixed_batches``, 32/8 heads, d = 128, block 16, bf16):
   every harness contender through ``bench_mixed_shape`` (errors against the fp32 reference
   included), then each candidate ``VarlenConfig`` of the chunked kernel on the same batches.
2. The chunked kernel at d = 256 and with an FP8 cache on the one-chunk batch: max error.
3. Dense forward, d = 128 and 256: candidate ``FlashConfig``s (the table's, register-capped
   variants that let two programs share an SM) at the target shapes, against SDPA-cuDNN and
   SDPA-FLASH on the same tensors; errors against the fp32 reference at N = 1027.

``--smoke`` runs every code path at toy sizes on the CPU (Triton interpreter, wall-clock times,
cuDNN/FLASH reported unavailable) to check the script before spending device time.
Times: medians of ``triton.testing.do_bench``. Nothing runs at import.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
import traceback

import torch

from kernels.bench.mixed import bench_mixed_shape, mixed_batches, mixed_inputs
from kernels.bench.records import Ceilings, MixedShape
from kernels.bench.timing import environment, measure_ceilings, sdpa_context
from kernels.prefill.chunked import VarlenConfig, chunked_prefill_attention, plan_batch
from kernels.prefill.flash import FlashConfig, flash_attention_forward, pick_config
from kernels.cache.paged import quantize_kv_fp8
from kernels.reference.dense import naive_attention_lse
from kernels.theory import prefill_flops, tflops, varlen_flops
from kernels.reference.varlen import varlen_attention_reference

VARLEN_CANDIDATES = {
    "default": None,  # default_varlen_config: m128 n32 w4 s3, decode tiles n128
    "m128_n32_w4_s4_sn128": VarlenConfig(block_m=128, block_n=32, small_block_n=128, num_warps=4, num_stages=4),
    "m128_n64_w8_s3_sn64": VarlenConfig(block_m=128, block_n=64, small_block_n=64, num_warps=8, num_stages=3),
}
# Slower, and left out (docs/kernels/PREFILL.md, "Tried and lost"): m128_n64_w8_s3 / _s2, m128_n32_w4_s3,
# m64_n64_w4_s3, small_block_n 32 / 64 / 128 / 256, m64_n32_w4_s3, m128_n64_w4_s2, m128_n32_w4_s2,
# stages 2 / 4, and a conditional (lazy) rescale of the accumulator.
FLASH_CANDIDATES = {
    128: {
        "table": None,  # non-causal ptr 128x64 w8 s2 maxnreg 128; causal tma 64x64 w4 s3
        "tma_64x64_w4_s3": FlashConfig(block_m=64, block_n=64, num_warps=4, num_stages=3, use_tma=True),
        "ptr_128x64_w8_s2_r128": FlashConfig(block_m=128, block_n=64, num_warps=8, num_stages=2, maxnreg=128),
        "tma_128x128_w8_s3": FlashConfig(block_m=128, block_n=128, num_warps=8, num_stages=3, use_tma=True),
    },
    256: {"table": None},  # tma 128x64 w8 s2
}
# Slower, and left out: tma_128x64_w8_s2_r128, tma_128x128_w8_s2_r128 (spills: 48 TFLOP/s); at d = 256
# tma_128x32_w8_s3, ptr_128x64_w8_s2, tma_64x64_w4_s2, tma_64x32_w4_s3_r168, ptr_64x64_w4_s3 (all slower
# than tma 128x64 w8 s2); the lazy rescale on four configurations (1-35 % slower: the block-wide max
# and the branch cost more than the rescale).
# (batch, N, causal): the target's worst shapes at d = 128 (Hq/Hkv 32/8); d = 256 at 16/8 heads.
FLASH_SHAPES = {128: [(1, 4096, False), (4, 4096, False), (1, 4096, True), (2, 8192, True), (4, 4096, True)],
                256: [(2, 4096, False), (2, 4096, True)]}
HEADS = {128: (32, 8), 256: (16, 8)}


def _timer(device: str):
    if device == "cuda":
        import triton.testing

        return lambda fn: float(triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median"))

    def wall(fn):
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3

    return wall


def _try(fn):
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - a failed variant is a row of the report
        return {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"}


def mixed_part(shapes, device: str, bench) -> dict:
    out: dict = {"harness": [], "variants": []}
    if device == "cuda":
        ceilings = measure_ceilings(copy_bytes=2**30, rep_ms=40)
        out["ceilings"] = dataclasses.asdict(ceilings)
        for s in shapes:
            r = bench_mixed_shape(s, ceilings)
            out["harness"].append({"batch": s.label, "tflop": r.flops / 1e12, "rows": [
                {"contender": m.contender, "status": m.status, "ms": m.median_ms, "tflops": m.rate,
                 "timing": m.timing, "err": m.max_abs_err, "note": m.note[:120]} for m in r.measurements]})
    for s in shapes:
        x = mixed_inputs(s, seed=0, device=device)
        flops = varlen_flops(s.q_lens, s.seq_lens, s.n_q_heads, s.head_dim)
        for name, cfg in VARLEN_CANDIDATES.items():
            def one(cfg=cfg):
                plan = plan_batch(s.q_lens, s.seq_lens, n_q_heads=s.n_q_heads, n_kv_heads=s.n_kv_heads,
                                  head_dim=s.head_dim, device=device, config=cfg)  # None: the default
                err, _ = x.err_of(chunked_prefill_attention(x.q, x.k, x.v, x.tables, plan)[0])
                ms = bench(lambda: chunked_prefill_attention(x.q, x.k, x.v, x.tables, plan, validate=False))
                return {"ms": ms, "tflops": tflops(flops, ms), "err": err, "programs": plan.programs}
            out["variants"].append({"batch": s.label, "config": name, **_try(one)})
        del x
    return out


def special_cases(shape: MixedShape, device: str) -> list[dict]:
    """The one-chunk batch at d = 256 (bf16) and with an FP8 cache (d = 128): max errors."""
    rows = []
    for d, fp8 in ((256, False), (128, True)):
        s = dataclasses.replace(shape, head_dim=d)

        def one(s=s, fp8=fp8):
            x = mixed_inputs(s, seed=3, device=device)
            plan = plan_batch(s.q_lens, s.seq_lens, n_q_heads=s.n_q_heads, n_kv_heads=s.n_kv_heads,
                              head_dim=s.head_dim, device=device)
            if not fp8:
                return {"err": x.err_of(chunked_prefill_attention(x.q, x.k, x.v, x.tables, plan)[0])[0]}
            k8, v8, ks, vs = quantize_kv_fp8(x.k, x.v)
            out, _ = chunked_prefill_attention(x.q, k8, v8, x.tables, plan, k_scale=ks, v_scale=vs)
            sub = x.check_seqs
            ref, _ = varlen_attention_reference(x.q[x.rows_of(sub)], k8, v8, x.tables[sub],
                                                [s.q_lens[b] for b in sub], [s.seq_lens[b] for b in sub],
                                                k_scale=ks, v_scale=vs)
            return {"err": float((out[x.rows_of(sub)].float() - ref).abs().max())}
        rows.append({"batch": s.label, "fp8": fp8, **_try(one)})
    return rows


def _sdpa(backend: str, q, k, v, causal: bool):
    def run():
        with sdpa_context(backend):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    return run


def flash_part(device: str, bench, smoke: bool) -> list[dict]:
    rows = []
    for d, candidates in FLASH_CANDIDATES.items():
        hq, hkv = HEADS[d]
        for batch, n, causal in FLASH_SHAPES[d]:
            if smoke:
                batch, n, hq, hkv = 1, 40, 2, 1
            g = torch.Generator(device=device).manual_seed(n + d)
            q, k, v = (torch.randn(batch, h, n, d, device=device, dtype=torch.bfloat16, generator=g)
                       for h in (hq, hkv, hkv))
            flops = prefill_flops(batch, n, hq, d, causal)
            label = f"B{batch} N{n} {hq}/{hkv} d{d} {'causal' if causal else 'full'}"
            base = {}
            for backend in (("CUDNN_ATTENTION", "FLASH_ATTENTION") if device == "cuda" else ()):
                base[backend] = _try(lambda b=backend: bench(_sdpa(b, q, k, v, causal)))
            for name, cfg in candidates.items():
                def one(cfg=cfg):
                    c = cfg or pick_config(head_dim=d, causal=causal, n_ctx=n)
                    ms = bench(lambda: flash_attention_forward(q, k, v, causal=causal, config=c))
                    row = {"ms": ms, "tflops": tflops(flops, ms)}
                    cudnn = base.get("CUDNN_ATTENTION")
                    if isinstance(cudnn, float):
                        row["vs_cudnn"] = cudnn / ms
                    return row
                rows.append({"shape": label, "config": name, **_try(one)})
            for backend, ms in base.items():
                rows.append({"shape": label, "config": backend,
                             **({"ms": ms, "tflops": tflops(flops, ms)} if isinstance(ms, float) else ms)})
            del q, k, v
        # Correctness of every candidate at a masked tail (N = 1027, or 33 in the smoke run).
        n = 33 if smoke else 1027
        g = torch.Generator(device=device).manual_seed(d)
        q, k, v = (torch.randn(1, h, n, d, device=device, dtype=torch.bfloat16, generator=g)
                   for h in (2 if smoke else hq, 1 if smoke else hkv, 1 if smoke else hkv))
        for causal in (False, True):
            ref, _ = naive_attention_lse(q, k, v, causal=causal)
            for name, cfg in candidates.items():
                def check(cfg=cfg, causal=causal):
                    c = cfg or pick_config(head_dim=d, causal=causal, n_ctx=n)
                    out, _ = flash_attention_forward(q, k, v, causal=causal, config=c)
                    return {"err": float((out.float() - ref).abs().max())}
                rows.append({"shape": f"check N{n} d{d} {'causal' if causal else 'full'}", "config": name,
                             **_try(check)})
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", metavar="PATH", help="write the figures as JSON to PATH")
    p.add_argument("--smoke", action="store_true", help="toy sizes on the CPU (interpreter) to test the script")
    p.add_argument("--skip-flash", action="store_true", help="only the mixed-batch part")
    args = p.parse_args(argv)
    device = "cpu" if args.smoke else "cuda"
    bench = _timer(device)
    if args.smoke:
        shapes = (MixedShape(name="smoke", q_lens=(20, 1, 1), seq_lens=(45, 17, 30), n_q_heads=4, n_kv_heads=2,
                             head_dim=32, block_size=16),)
    else:
        shapes = mixed_batches()
    report: dict = {"provenance": dataclasses.asdict(environment("python3 -m scripts.tuning.h200_chunked_check"))}
    for key, fn in (("mixed", lambda: mixed_part(shapes, device, bench)),
                    ("special", lambda: special_cases(shapes[-1] if args.smoke else mixed_batches()[1], device)),
                    ("flash", lambda: [] if args.skip_flash else flash_part(device, bench, args.smoke))):
        t0 = time.perf_counter()
        try:
            report[key] = fn()
        except Exception:  # noqa: BLE001 - keep what the other parts measured
            report[key] = {"error": traceback.format_exc()[-2000:]}
        print(f"== {key} ({time.perf_counter() - t0:.1f} s)\n{json.dumps(report[key], indent=1)}", flush=True)
        if args.json:  # after every part: a call cut short still returns what was measured
            with open(args.json, "w") as f:
                json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

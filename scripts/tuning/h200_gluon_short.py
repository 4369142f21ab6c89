"""One GPU call: where the Gluon forward should take over from the Triton one (short prompts).

Run on the device machine: ``python3 -m scripts.tuning.h200_gluon_short --json $OUT/short.json``.

``flash_attention_forward(backend="auto")`` runs the Gluon kernel from ``GLUON_MIN_TOKENS``
tokens; the Gluon tuning shapes all had N >= 4K. This times both kernels and SDPA-cuDNN at
N = 512 .. 4096 (16K tokens per batch, 32/8 and 32/32 heads, D 128, bf16, causal and not;
``triton.testing.do_bench`` medians, eager, so the host descriptors are inside the time), and
the harness's prefill-only mixed batch (4 x 2048 first chunks) with the chunked kernel against
both dense kernels (CUDA-graph replays, ``kernels.bench.mixed.bench_mixed_shape``).
"""

from __future__ import annotations

import argparse
import json

import torch
import triton.testing

from kernels.bench.mixed import bench_mixed_shape, mixed_batch
from kernels.bench.records import Ceilings
from kernels.bench.timing import sdpa_context
from kernels.prefill.flash import flash_attention_forward
from kernels.theory import prefill_flops, tflops

SHAPES = [(32, 512), (16, 1024), (8, 2048), (4, 4096)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default="short.json")
    args = ap.parse_args()
    rows = []
    for hkv in (8, 32):
        for b, n in SHAPES:
            for causal in (False, True):
                g = torch.Generator(device="cuda").manual_seed(n)
                q = torch.randn(b, 32, n, 128, device="cuda", dtype=torch.bfloat16, generator=g)
                k = torch.randn(b, hkv, n, 128, device="cuda", dtype=torch.bfloat16, generator=g)
                v = torch.randn(b, hkv, n, 128, device="cuda", dtype=torch.bfloat16, generator=g)
                flops = prefill_flops(b, n, 32, 128, causal)

                def cudnn():
                    with sdpa_context("CUDNN_ATTENTION"):
                        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                                                enable_gqa=hkv != 32)
                row = dict(batch=b, n=n, hkv=hkv, causal=causal)
                for name, fn in (("gluon", lambda: flash_attention_forward(q, k, v, causal=causal, backend="gluon")),
                                 ("triton", lambda: flash_attention_forward(q, k, v, causal=causal, backend="triton")),
                                 ("cudnn", cudnn)):
                    fn()
                    torch.cuda.synchronize()
                    ms = triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median")
                    row[name] = tflops(flops, ms)
                print(f"B{b} N{n} 32/{hkv} {'causal' if causal else 'full  '}: gluon {row['gluon']:6.1f}  "
                      f"triton {row['triton']:6.1f}  cudnn {row['cudnn']:6.1f}  gluon/triton "
                      f"{row['gluon'] / row['triton']:.3f}  gluon/cudnn {row['gluon'] / row['cudnn']:.3f}", flush=True)
                rows.append(row)
    ceilings = Ceilings(copy_tbps=None, copy_buffer_bytes=0, matmul_tflops=None, matmul_n=0)
    mixed = bench_mixed_shape(mixed_batch("prefill_only"), ceilings,
                              contenders=("triton_chunked", "triton_flash", "triton_flash_tl", "sdpa_cudnn"))
    for m in mixed.measurements:
        print(f"mixed prefill-only {m.contender:18} {m.median_ms:.4f} ms {m.rate:.1f} TFLOP/s err {m.max_abs_err}",
              flush=True)
    with open(args.json, "w") as f:
        json.dump(dict(prefill=rows, mixed=[dict(c=m.contender, ms=m.median_ms, rate=m.rate)
                                            for m in mixed.measurements]), f, indent=1)


if __name__ == "__main__":
    main()

"""Run the decode kernels a few times on one shape, for Nsight Compute to profile.

Run on the device machine under ``ncu`` (clock control off, as the device notes ask), e.g.::

    ncu --clock-control none --kernel-name regex:_paged_decode --launch-skip 3 --launch-count 3 \\
        --section WarpStateStats --section Occupancy --section LaunchStats --section SpeedOfLight \\
        python3 -m scripts.tuning.h200_decode_profile --batch 32 --context 16384

Each kernel (bf16, FP8, INT4 Triton; ``rdq-int4`` and ``rdq-fp8``, the Gluon kernels at their
default configs and ``--splits`` if given; ``cudnn``, SDPA's cuDNN backend on KV of the same
size laid out contiguous, ``[batch, KV heads, context, d]``, as the harness's contender reads
it) is called ``--calls`` times on the same batch (``--heads``/8 heads, d 128, block 16, blocks
a random permutation of the pool). Not imported by the app or the tests.
"""

from __future__ import annotations

import argparse

import torch

from kernels.cache.int4 import quantize_pool_int4
from kernels.cache.paged import quantize_kv_fp8
from kernels.decode.paged import paged_decode_attention
from kernels.decode.int4 import paged_decode_int4


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--context", type=int, default=16384)
    ap.add_argument("--calls", type=int, default=4)
    ap.add_argument("--kinds", default="bf16,fp8,int4")
    ap.add_argument("--heads", type=int, default=32, help="query heads (8 KV heads)")
    ap.add_argument("--splits", type=int, default=None, help="split count of the rdq kinds")
    args = ap.parse_args()
    b, L, hq, hkv, d, bs = args.batch, args.context, args.heads, 8, 128, 16
    g = torch.Generator(device="cuda").manual_seed(0)
    blocks = b * L // bs
    k = torch.randn(blocks, hkv, bs, d, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(blocks, hkv, bs, d, device="cuda", dtype=torch.bfloat16, generator=g)
    tables = torch.randperm(blocks, device="cuda", generator=g).to(torch.int32).reshape(b, L // bs)
    lens = torch.full((b,), L, dtype=torch.int32, device="cuda")
    q = torch.randn(b, hq, d, device="cuda", dtype=torch.bfloat16, generator=g)
    kinds = args.kinds.split(",")
    if "bf16" in kinds:
        for _ in range(args.calls):
            paged_decode_attention(q, k, v, tables, lens, validate=False)
    if "fp8" in kinds:
        k8, v8, ks, vs = quantize_kv_fp8(k, v)
        for _ in range(args.calls):
            paged_decode_attention(q, k8, v8, tables, lens, k_scale=ks, v_scale=vs, validate=False)
    if "int4" in kinds:
        k4, v4 = quantize_pool_int4(k), quantize_pool_int4(v)
        for _ in range(args.calls):
            paged_decode_int4(q, k4, v4, tables, lens, validate=False)
    for fmt in ("int4", "fp8"):
        if f"rdq-{fmt}" in kinds:
            from kernels.decode.backends import default_rdq_config
            from kernels.decode.rdq import rdq_paged_decode
            from scripts.tuning.device_rows import quantized_pools

            kq, vq, kw = quantized_pools(fmt, k, v)
            for _ in range(args.calls):
                rdq_paged_decode(q, kq, vq, tables, lens, validate=False, config=default_rdq_config(fmt),
                                 num_splits=args.splits, **kw)
    if "cudnn" in kinds:
        import torch.nn.functional as F

        from kernels.bench.timing import sdpa_context

        kc = torch.randn(b, hkv, L, d, device="cuda", dtype=torch.bfloat16, generator=g)
        vc = torch.randn_like(kc)
        with sdpa_context("CUDNN_ATTENTION"):
            for _ in range(args.calls):
                F.scaled_dot_product_attention(q.unsqueeze(2), kc, vc, enable_gqa=True)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()

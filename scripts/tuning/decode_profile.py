"""Run the decode kernels a few times on one shape, for Nsight Compute to profile.

Run on the device machine under ``ncu`` (clock control off, as the device notes ask), e.g.::

    ncu --clock-control none --kernel-name regex:_paged_decode --launch-skip 3 --launch-count 3 \\
        --section WarpStateStats --section Occupancy --section LaunchStats --section SpeedOfLight \\
        python3 -m scripts.tuning.decode_profile --batch 32 --context 16384

Each kind (bf16, FP8, INT4 through ``backend="auto"``, the kernel a caller gets; ``triton-fp8``
and ``triton-int4`` forced onto the Triton kernels; ``--splits`` if given; ``cudnn``, SDPA's cuDNN backend on KV of the same
size laid out contiguous, ``[batch, KV heads, context, d]``, as the harness's contender reads
it) is called ``--calls`` times on the same batch (``--heads``/8 heads, d 128, block 16, blocks
a random permutation of the pool). Not imported by the app or the tests.
"""

from __future__ import annotations

import argparse

import torch

from kernels.cache.int4 import quantize_pool_int4
from kernels.cache.paged import quantize_kv_fp8
from kernels.decode.api import paged_decode_attention


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--context", type=int, default=16384)
    ap.add_argument("--calls", type=int, default=4)
    ap.add_argument("--kinds", default="bf16,fp8,int4")
    ap.add_argument("--heads", type=int, default=32, help="query heads (8 KV heads)")
    ap.add_argument("--splits", type=int, default=None, help="split count (default: the kernel's plan)")
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
    pools = {"bf16": (k, v, {})}
    if {"fp8", "triton-fp8"} & set(kinds):
        k8, v8, ks, vs = quantize_kv_fp8(k, v)
        pools["fp8"] = (k8, v8, dict(k_scale=ks, v_scale=vs))
    if {"int4", "triton-int4"} & set(kinds):
        pools["int4"] = (quantize_pool_int4(k), quantize_pool_int4(v), {})
    for kind in kinds:
        if kind == "cudnn":
            continue
        fmt = kind.removeprefix("triton-")
        if fmt not in pools:
            raise SystemExit(f"--kinds: unknown kind {kind!r}")
        kp, vp, scales = pools[fmt]
        backend = "triton" if kind.startswith("triton-") else "auto"
        for _ in range(args.calls):
            paged_decode_attention(q, kp, vp, tables, lens, validate=False, num_splits=args.splits, backend=backend,
                                   **scales)
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

"""One GPU call: what the bf16 decode kernel's last few percent to cuDNN are made of.

    python3 -m scripts.tuning.h200_bf16_gap --parts pattern,large --json $OUT/gap.json

* ``pattern``: whether the bf16 kernel's gap to cuDNN is its access pattern or its code. The
  same kernel at the large shapes (and batch 1 x 32K) over one KV in seven arrangements: the
  harness's shuffled block-16 tables, the same pool read in order, shuffled only within runs of
  2 MiB (the GPU's large page) and of 64 MiB, a head-major pool read in order (each head's
  sequence one contiguous run, as cuDNN reads it), and block 256 shuffled and head-major in
  order; cuDNN on the contiguous copy beside (CUDA-graph medians).
* ``large``: the bf16 kernel at the large shapes and batch 1 with deeper pipelines (5-8 stages:
  two or three K/V tiles in flight per program, where 2-4 stages give one) and cuDNN's own plan
  (Nsight Compute: one 4-warp CTA per (KV head, sequence), 128-token tiles, two per SM, no split
  at batch 32), each at the split count its residency gives at two waves (``DecodeConfig``'s
  default) and at forced ones (CUDA-graph medians).

Nothing runs at import.
"""

from __future__ import annotations

import torch

from scripts.tuning.device_rows import config_row, cudnn_call, decode_shape_inputs, next_inputs, parts_main

PATTERN_SHAPES = [(32, 16384, 64), (8, 32768, 64), (1, 32768, 32)]


def _head_major(pool: torch.Tensor) -> torch.Tensor:
    """``pool`` ``[blocks, heads, slots, d]`` copied head-major: the same indices, each head's blocks
    one contiguous run (a ``[heads, blocks, slots, d]`` tensor seen through a permuted view)."""
    return pool.permute(1, 0, 2, 3).contiguous().permute(1, 0, 2, 3)


def _shuffled_within(tables: torch.Tensor, run: int) -> torch.Tensor:
    """``tables`` with its entries permuted only inside aligned runs of ``run`` consecutive pool
    blocks (a block of 8 heads x 16 tokens x d 128 in bf16 is 32 KiB: 64 of them are 2 MiB, the
    GPU's large page). Every sequence still reads its blocks out of order, but they stay near."""
    flat = tables.flatten()
    n = flat.numel() // run * run
    g = torch.Generator(device=flat.device).manual_seed(run)
    keys = torch.rand(n, device=flat.device, generator=g) + (torch.arange(n, device=flat.device) // run)
    out = flat.clone()
    out[:n] = flat[:n][torch.argsort(keys)]
    return out.reshape(tables.shape)


def pattern_rows() -> list[dict]:
    from kernels.bench.timing import graph_ms
    from kernels.decode.paged import paged_decode_attention

    rows = []
    for batch, ctx, hq in PATTERN_SHAPES:
        label, kv_bytes, x = decode_shape_inputs(batch, ctx, hq, memory_share=6)
        n_rot, bps = x.rot.n, x.tables.shape[2]
        ref = graph_ms(cudnn_call(x), n_rot, 5.0, 30.0)
        x.state.clear()
        in_order = torch.arange(x.k.shape[0], dtype=torch.int32, device="cuda").reshape(n_rot, batch, bps)
        k256 = torch.randn(x.k.shape[0] // 16, 8, 256, 128, device="cuda", dtype=torch.bfloat16)
        v256 = torch.randn_like(k256)
        t256 = in_order[:, :, ::16] // 16
        perm256 = torch.randperm(k256.shape[0], device="cuda").to(torch.int32).reshape(t256.shape)
        arrangements = [("block 16 shuffled", lambda: (x.k, x.v, x.tables)),
                        ("block 16 in order", lambda: (x.k, x.v, in_order)),
                        ("block 16 shuffled within 2 MiB", lambda: (x.k, x.v, _shuffled_within(in_order, 64))),
                        ("block 16 shuffled within 64 MiB", lambda: (x.k, x.v, _shuffled_within(in_order, 2048))),
                        ("block 16 head-major in order", lambda: (_head_major(x.k), _head_major(x.v), in_order)),
                        ("block 256 shuffled", lambda: (k256, v256, perm256)),
                        ("block 256 head-major in order", lambda: (_head_major(k256), _head_major(v256), t256))]
        print(f"{label:<16} cudnn {ref * 1e3:.1f} us ({kv_bytes / ref / 1e9:.2f} TB/s)", flush=True)
        for name, build in arrangements:
            try:
                k, v, tables = build()

                def call(k=k, v=v, tables=tables):
                    return paged_decode_attention(*next_inputs(x, k, v, tables), x.lens, validate=False)
                ms = graph_ms(call, n_rot, 5.0, 30.0)
            except Exception as exc:  # noqa: BLE001 - one arrangement that fails is a row, not the end
                rows.append(dict(part="pattern", shape=label, arrangement=name, error=str(exc)[:200]))
                print(f"  {name:<30} {type(exc).__name__}: {str(exc)[:120]}", flush=True)
                continue
            tbps = kv_bytes / (ms * 1e-3) / 1e12
            rows.append(dict(part="pattern", shape=label, arrangement=name, ms=ms, tbps=tbps, cudnn_ms=ref,
                             x_cudnn=ref / ms))
            print(f"  {name:<30} {ms * 1e3:7.1f} us {tbps:.2f} TB/s {ref / ms:.3f}x cuDNN", flush=True)
            k = v = tables = None
            torch.cuda.empty_cache()
        x = k256 = v256 = None
        torch.cuda.empty_cache()
    return rows


# ``large``: (batch, context, query heads) and the split counts timed for each config.
LARGE_SHAPES = [((32, 16384, 64), (None, 1, 2, 3)), ((8, 32768, 64), (None, 4, 8, 12)), ((128, 4096, 64), (None, 1)),
                ((1, 32768, 32), (None, 32, 66)), ((1, 131072, 32), (None, 32, 66))]
# Triton's pipeliner double-buffers the K/V tiles only from 5 stages (triple from 8): with the
# table lookup in the chain, 2-4 stages leave one tile in flight.
LARGE_CONFIGS = ((64, 4, 3), (64, 4, 5), (64, 4, 8), (32, 4, 6), (32, 4, 8), (32, 2, 8), (64, 8, 5), (128, 4, 5))


def large_rows() -> list[dict]:
    from kernels.bench.timing import graph_ms
    from kernels.decode.config import DecodeConfig

    rows = []
    for (batch, ctx, hq), split_counts in LARGE_SHAPES:
        label, _, x = decode_shape_inputs(batch, ctx, hq, memory_share=4)
        ref = graph_ms(cudnn_call(x), x.rot.n, 5.0, 30.0)
        x.state.clear()
        print(f"{label:<16} cudnn {ref * 1e3:.1f} us", flush=True)
        rows += [config_row("large", label, x, DecodeConfig(block_n=n, num_warps=w, num_stages=st), splits, ref)
                 for n, w, st in LARGE_CONFIGS for splits in split_counts]
        x = None
        torch.cuda.empty_cache()
    return rows


PARTS = {"pattern": pattern_rows, "large": large_rows}


def main(argv: list[str] | None = None) -> int:
    return parts_main(__doc__, "scripts.tuning.h200_bf16_gap", PARTS, "pattern,large", argv)


if __name__ == "__main__":
    raise SystemExit(main())

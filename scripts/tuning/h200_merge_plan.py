"""One GPU call: the bf16 decode kernel's split count and speed with each merge planned for its
own kernel variant (``kernels.decode.paged.choose_merge_plan``).

    python3 -m scripts.tuning.h200_merge_plan --json $OUT/merge_plan.json

For batch 8 x 32K at blocks 1 and 16 (32/8 and 64/8 heads) and batch 1 x 32K: the split count and
whether the call merges inline (default ``merge="auto"``), against ``merge="kernel"``; CUDA-graph
medians (``kernels.bench.timing.graph_ms``, one call per graph over a rotation of 4 query sets),
TB/s of the KV read, and the max abs error against the float32 paged reference. Nothing runs at
import.
"""

from __future__ import annotations

import argparse
import dataclasses

import torch

from scripts.tuning.device_rows import write_report

# (batch, context, query heads, block size); 8 KV heads, d 128.
SHAPES = [(8, 32768, 32, 1), (8, 32768, 32, 16), (8, 32768, 64, 16), (1, 32768, 32, 16)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", metavar="PATH", help="write the rows as JSON to PATH")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        p.error("needs a CUDA GPU")
    from kernels.bench.timing import graph_ms
    from kernels.decode.config import default_config
    from kernels.cache.paged import build_paged_cache
    from kernels.decode.paged import _prepare, paged_decode_attention
    from kernels.reference.paged import paged_attention_reference

    rows = []
    for batch, context, hq, bs in SHAPES:
        g = torch.Generator(device="cuda").manual_seed(batch * 1000 + bs)
        c = build_paged_cache([context] * batch, block_size=bs, n_kv_heads=8, head_dim=128, device="cuda",
                              shuffle=True, generator=g)
        qs = [torch.randn(batch, hq, 128, device="cuda", generator=g).to(torch.bfloat16) for _ in range(4)]
        ref = paged_attention_reference(qs[0], c.k_cache, c.v_cache, c.block_tables, c.seq_lens)
        kv_bytes = 2 * batch * context * 8 * 128 * 2
        for merge in ("auto", "kernel"):
            cfg = dataclasses.replace(default_config(128, torch.bfloat16), merge=merge)
            out = paged_decode_attention(qs[0], c.k_cache, c.v_cache, c.block_tables, c.seq_lens, config=cfg)
            plan, _, constexprs, _ = _prepare(qs[0], c.k_cache, c.v_cache, c.block_tables, c.seq_lens, None, None,
                                              None, None, cfg, False)
            i = iter(range(10**9))
            ms = graph_ms(lambda: paged_decode_attention(qs[next(i) % 4], c.k_cache, c.v_cache, c.block_tables,
                                                         c.seq_lens, config=cfg, validate=False), 1, 20, 200)
            row = dict(shape=f"B{batch} L{context} {hq}/8 block {bs}", merge=merge, splits=plan.num_splits,
                       inline=bool(constexprs["INLINE_MERGE"]), graph_ms=ms, tbps=kv_bytes / (ms * 1e-3) / 1e12,
                       err=float((out.float() - ref).abs().max()))
            rows.append(row)
            print("  ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()), flush=True)
    if args.json:
        write_report(args.json, "scripts.tuning.h200_merge_plan", rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

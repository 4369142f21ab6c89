"""One-call GPU check: split counts for the FP8 decode kernel (and a few batch-1 bf16 configs).

Run on the device machine: ``python -m scripts.tuning.h200_fp8_splits``. For each shape (32/8
heads, d 128, block 16) it times the FP8 kernel (default config) at several split counts and the
bf16 kernel at the default, on CUDA-graph replays, and prints the FP8/bf16 ratio per split
count. Not imported by the app or the tests.
"""

from __future__ import annotations

import torch

from kernels.bench.records import DecodeShape
from kernels.bench.sweeps import _decode_inputs
from kernels.bench.timing import graph_ms, rotations
from kernels.decode.config import default_config, default_num_splits
from kernels.cache.paged import quantize_kv_fp8
from kernels.decode.paged import DecodeConfig, paged_decode_attention
from kernels.theory import decode_kv_bytes

SHAPES = ((1, 32768), (1, 131072), (8, 32768), (8, 16384), (32, 32768), (32, 16384), (128, 4096))


def main() -> None:
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for b, L in SHAPES:
        shape = DecodeShape(batch=b, context=L, n_q_heads=32, n_kv_heads=8, head_dim=128, block_size=16, dtype="bf16")
        free, _ = torch.cuda.mem_get_info()
        n_rot = min(rotations(decode_kv_bytes(b, L, 8, 128, 2), free), 8)
        x = _decode_inputs(shape, n_rot, 0)
        q, k, v, tables, lens, rot = x.q, x.k, x.v, x.tables, x.lens, x.rot
        bf16 = graph_ms(lambda: paged_decode_attention(q[(i := rot.next())], k, v, tables[i], lens, validate=False),
                        n_rot, 5.0, 30.0)
        if b == 1:
            for bn, w, st in ((64, 8, 3), (128, 8, 2), (64, 4, 2)):
                ms = graph_ms(lambda bn=bn, w=w, st=st: paged_decode_attention(
                    q[(i := rot.next())], k, v, tables[i], lens, validate=False,
                    config=DecodeConfig(block_n=bn, num_warps=w, num_stages=st)), n_rot, 5.0, 30.0)
                print(f"B={b} L={L} bf16 {bn}/{w}/{st}: {ms:.4f} ms (default {bf16:.4f})", flush=True)
        k8, v8, ks, vs = quantize_kv_fp8(k, v)
        del x
        cfg = default_config(128, k8.dtype)
        base = default_num_splits(b, 8, L, cfg.block_n, sms)
        one_wave = max(1, round(2 * sms / (b * 8)))
        cands = sorted({base, one_wave, max(1, one_wave - 1), one_wave + 1, max(1, base // 2), 1})
        row = []
        for s in cands:
            if s > 128:
                continue
            ms = graph_ms(lambda s=s: paged_decode_attention(q[(i := rot.next())], k8, v8, tables[i], lens,
                                                              k_scale=ks, v_scale=vs, validate=False, num_splits=s),
                          n_rot, 5.0, 30.0)
            row.append(f"{s}: {ms:.4f} ms ({bf16 / ms:.3f}x)")
        print(f"B={b} L={L} bf16 {bf16:.4f} ms (splits {default_num_splits(b, 8, L, 64, sms)}); "
              f"fp8 by splits (default {base}): " + ", ".join(row), flush=True)
        del k8, v8, k, v, q
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

"""One GPU call: the bf16 paged decode kernel with its K and V pages copied by the tensor-memory
accelerator (TMA descriptors) instead of per-thread loads, against the shipped kernel and cuDNN.

    python3 -m scripts.tuning.h200_tma_decode --json $OUT/tma.json

An experiment, not a library kernel: the pool must be the HND layout, contiguous, so that one
page of one head (``block_size`` rows of ``head_dim``) is one box of a 2-D descriptor over
``[num_blocks * n_kv_heads * block_size, head_dim]``; a ``BLOCK_N`` tile is ``BLOCK_N /
CHUNK`` such boxes (``CHUNK = min(block_size, BLOCK_N)``), each its own q.k^T and p.V dot.
Whole tiles go through the descriptors unmasked; the sequence's ragged last tile (whose slots
past the end may hold NaN) through masked pointer loads. The split kernel writes partials and
the shipped merge kernel merges them.

1. Correctness against the float32 paged reference (shuffled tables, NaN in unused slots,
   tails, GQA 1/4/8, blocks 16/64/256).
2. Speed at B1 L32K 32/8, B1 L128K 32/8, B8 L32K 64/8, B32 L16K 64/8 (block 16; and B8 at
   block 64): CUDA-graph medians of cuDNN (contiguous), the shipped kernel (default and with the
   merge kernel), and the TMA kernel over tiles, warps, stages and split counts.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time

import torch

from inputs.uploads import dumps_strict
from kernels.runtime import ensure_triton_backend

ensure_triton_backend()

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from kernels.paged_decode import LOG2_E, MIN_GROUP_PAD, _split_range, _write_output  # noqa: E402


@triton.jit
def _chunk(k_desc, v_desc, table_ptr, tok, n_kv_heads, kv_head, PAGE_SIZE: tl.constexpr):
    """One page chunk's K and V tiles through the descriptors (whole chunks only)."""
    page = tl.load(table_ptr + tok // PAGE_SIZE)
    row = (page * n_kv_heads + kv_head) * PAGE_SIZE + tok % PAGE_SIZE
    return k_desc.load([row, 0]), v_desc.load([row, 0])


@triton.jit
def _update(q, k0, v0, k1, v1, k2, v2, k3, v3, m_i, l_i, acc, scale, SUB: tl.constexpr):
    """One tile's online-softmax step over its SUB (1, 2 or 4) chunks, one max per tile."""
    s0 = tl.dot(q, tl.trans(k0)) * scale
    m_new = tl.maximum(m_i, tl.max(s0, 1))
    if SUB >= 2:
        s1 = tl.dot(q, tl.trans(k1)) * scale
        m_new = tl.maximum(m_new, tl.max(s1, 1))
    if SUB == 4:
        s2 = tl.dot(q, tl.trans(k2)) * scale
        s3 = tl.dot(q, tl.trans(k3)) * scale
        m_new = tl.maximum(m_new, tl.maximum(tl.max(s2, 1), tl.max(s3, 1)))
    alpha = tl.math.exp2(m_i - m_new)
    p0 = tl.math.exp2(s0 - m_new[:, None])
    l_new = tl.sum(p0, 1)
    o = tl.dot(p0.to(v0.dtype), v0)
    if SUB >= 2:
        p1 = tl.math.exp2(s1 - m_new[:, None])
        l_new += tl.sum(p1, 1)
        o = tl.dot(p1.to(v1.dtype), v1, o)
    if SUB == 4:
        p2 = tl.math.exp2(s2 - m_new[:, None])
        p3 = tl.math.exp2(s3 - m_new[:, None])
        l_new += tl.sum(p2, 1) + tl.sum(p3, 1)
        o = tl.dot(p2.to(v2.dtype), v2, o)
        o = tl.dot(p3.to(v3.dtype), v3, o)
    return m_new, l_i * alpha + l_new, acc * alpha[:, None] + o


@triton.jit
def _masked_update(q, k, v, mask_n, m_i, l_i, acc, scale):
    """The ragged tile's step (k, v: [BLOCK_N, D] loaded masked; mask_n: live tokens)."""
    s = tl.dot(q, tl.trans(k)) * scale
    s = tl.where(mask_n[None, :], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    alpha = tl.math.exp2(m_i - m_new)
    p = tl.math.exp2(s - m_new[:, None])
    return m_new, l_i * alpha + tl.sum(p, 1), acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)


@triton.jit
def _tma_decode_kernel(
    q_ptr, k_desc, v_desc, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr,
    out_ptr, part_out_ptr, part_lse_ptr, qk_scale, num_splits, n_kv_heads,
    stride_qb, stride_qh, stride_btb, stride_ob, stride_oh, stride_pob, stride_poh, stride_pos,
    stride_plb, stride_plh,
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr, PAGE_SIZE: tl.constexpr,
    BLOCK_N: tl.constexpr, CHUNK: tl.constexpr,
):
    kv_head = tl.program_id(0)
    seq = tl.program_id(1)
    split = tl.program_id(2)
    start, end = _split_range(seq_lens_ptr, seq, split, num_splits, BLOCK_N)

    offs_g = tl.arange(0, GROUP_PAD)
    offs_d = tl.arange(0, HEAD_DIM)
    mask_g = offs_g < GROUP
    q_heads = kv_head * GROUP + offs_g
    q = tl.load(q_ptr + seq.to(tl.int64) * stride_qb + q_heads[:, None] * stride_qh + offs_d[None, :],
                mask=mask_g[:, None], other=0.0)
    table_ptr = block_tables_ptr + seq.to(tl.int64) * stride_btb

    m_i = tl.full([GROUP_PAD], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([GROUP_PAD], dtype=tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], dtype=tl.float32)
    SUB: tl.constexpr = BLOCK_N // CHUNK
    n_full = tl.maximum(end - start, 0) // BLOCK_N
    for t in range(n_full):
        tile = start + t * BLOCK_N
        k0, v0 = _chunk(k_desc, v_desc, table_ptr, tile, n_kv_heads, kv_head, PAGE_SIZE)
        k1, v1 = k0, v0
        k2, v2 = k0, v0
        k3, v3 = k0, v0
        if SUB >= 2:
            k1, v1 = _chunk(k_desc, v_desc, table_ptr, tile + CHUNK, n_kv_heads, kv_head, PAGE_SIZE)
        if SUB == 4:
            k2, v2 = _chunk(k_desc, v_desc, table_ptr, tile + 2 * CHUNK, n_kv_heads, kv_head, PAGE_SIZE)
            k3, v3 = _chunk(k_desc, v_desc, table_ptr, tile + 3 * CHUNK, n_kv_heads, kv_head, PAGE_SIZE)
        m_i, l_i, acc = _update(q, k0, v0, k1, v1, k2, v2, k3, v3, m_i, l_i, acc, qk_scale, SUB)
    # The ragged last tile, a chunk at a time: masked pointer loads (slots past the end may hold NaN).
    tail = start + n_full * BLOCK_N
    for c in range(tail, end, CHUNK):
        offs_n = c + tl.arange(0, CHUNK)
        mask_n = offs_n < end
        page = tl.load(table_ptr + offs_n // PAGE_SIZE, mask=mask_n, other=0).to(tl.int64)
        rows = (page * n_kv_heads + kv_head) * PAGE_SIZE + offs_n % PAGE_SIZE
        k = tl.load(k_cache_ptr + rows[:, None] * HEAD_DIM + offs_d[None, :], mask=mask_n[:, None], other=0.0)
        v = tl.load(v_cache_ptr + rows[:, None] * HEAD_DIM + offs_d[None, :], mask=mask_n[:, None], other=0.0)
        m_i, l_i, acc = _masked_update(q, k, v, mask_n, m_i, l_i, acc, qk_scale)

    has_tokens = l_i > 0.0
    out = acc / tl.where(has_tokens, l_i, 1.0)[:, None]
    _write_output(
        out, m_i, l_i, has_tokens, seq, split, q_heads, mask_g, offs_d,
        out_ptr, part_out_ptr, part_lse_ptr, part_lse_ptr, num_splits,
        stride_ob, stride_oh, stride_pob, stride_poh, stride_pos, stride_plb, stride_plh, True,
        False, GROUP, 1, 1, HEAD_DIM,
    )


@dataclasses.dataclass(frozen=True)
class TmaConfig:
    block_n: int = 32
    num_warps: int = 4
    num_stages: int = 6

    @property
    def name(self) -> str:
        return f"tma {self.block_n}/{self.num_warps}/{self.num_stages}"


def tma_decode(q, k_cache, v_cache, block_tables, seq_lens, num_splits: int, cfg: TmaConfig = TmaConfig()):
    """The experiment's wrapper: HND contiguous bf16/fp16 pools, any power-of-two block >= 16."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    from kernels.decode_merge import merge_splits

    batch, n_q_heads, d = q.shape
    num_blocks, n_kv, bs, _ = k_cache.shape
    assert k_cache.is_contiguous() and v_cache.is_contiguous() and bs >= 16
    chunk = min(bs, cfg.block_n)
    k_desc = TensorDescriptor.from_tensor(k_cache.view(-1, d), [chunk, d])
    v_desc = TensorDescriptor.from_tensor(v_cache.view(-1, d), [chunk, d])
    out = torch.empty_like(q)
    part_out = torch.empty(batch, n_q_heads, num_splits, d, device=q.device, dtype=torch.float32)
    part_lse = torch.empty(batch, n_q_heads, num_splits, device=q.device, dtype=torch.float32)
    group = n_q_heads // n_kv
    _tma_decode_kernel[(n_kv, batch, num_splits)](
        q, k_desc, v_desc, k_cache, v_cache, block_tables, seq_lens, out, part_out, part_lse,
        LOG2_E / math.sqrt(d), num_splits, n_kv, q.stride(0), q.stride(1), block_tables.stride(0),
        out.stride(0), out.stride(1), part_out.stride(0), part_out.stride(1), part_out.stride(2),
        part_lse.stride(0), part_lse.stride(1),
        GROUP=group, GROUP_PAD=max(MIN_GROUP_PAD, triton.next_power_of_2(group)), HEAD_DIM=d, PAGE_SIZE=bs,
        BLOCK_N=cfg.block_n, CHUNK=chunk, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    merge_splits(part_out, part_lse, out, pdl=False)
    return out


# (label, lengths, block size, query heads, KV heads, forced splits)
CHECKS = [
    ("tails 32/8 block 16", [1, 17, 97, 1025, 20000], 16, 32, 8, 4),
    ("20000+3 64/8 block 256, 5 splits", [20000, 3], 256, 64, 8, 5),
    ("1027+4096 8/8 block 64, 66 splits", [1027, 4096], 64, 8, 8, 66),
    ("B1 32K 32/8 block 16", [32768], 16, 32, 8, 66),
    ("4096+999+17 8/1 block 16 (MQA)", [4096, 999, 17], 16, 8, 1, 3),
]
CHECK_CONFIGS = [TmaConfig(32, 4, 6), TmaConfig(64, 4, 5), TmaConfig(16, 1, 8)]
# (batch, context, query heads, block size): 8 KV heads, d 128, bf16.
SHAPES = [(32, 16384, 64, 16), (8, 32768, 64, 16), (1, 32768, 32, 16), (1, 131072, 32, 16)]
SPEED_CONFIGS = [TmaConfig(32, 4, 6), TmaConfig(32, 4, 8), TmaConfig(32, 4, 4), TmaConfig(64, 4, 5), TmaConfig(16, 1, 8),
                 TmaConfig(16, 2, 8)]


def _finite(x: float) -> float | str:
    return x if math.isfinite(x) else repr(x)


def check_rows() -> list[dict]:
    from kernels.paged_cache import build_paged_cache
    from kernels.paged_reference import paged_attention_reference
    from kernels.tolerances import tolerance

    rows = []
    tol = tolerance("paged_decode", "bf16").atol
    for label, lens, bs, hq, hkv, splits in CHECKS:
        g = torch.Generator(device="cuda").manual_seed(len(lens) * 1000 + bs)
        c = build_paged_cache(lens, block_size=bs, n_kv_heads=hkv, head_dim=128, dtype=torch.bfloat16,
                              device="cuda", shuffle=True, generator=g, spare_blocks=5, poison_unused=True)
        q = torch.randn(len(lens), hq, 128, device="cuda", generator=g).to(torch.bfloat16)
        ref = paged_attention_reference(q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens)
        for cfg in CHECK_CONFIGS:
            try:
                err = float((tma_decode(q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens, splits, cfg).float()
                             - ref).abs().max())
                row = dict(part="check", check=label, config=cfg.name, err=_finite(err), tol=tol, ok=err <= tol)
            except Exception as exc:  # noqa: BLE001 - a config that fails is a row
                row = dict(part="check", check=label, config=cfg.name, ok=False, error=str(exc)[:300])
            rows.append(row)
            print(f"{label:<36} {cfg.name:<14} {'ok ' if row['ok'] else 'BAD'} {row.get('err', row.get('error'))}",
                  flush=True)
    return rows


def _shape_inputs(batch: int, ctx: int, hq: int, bs: int):
    """The harness's inputs at block 16 (``decode_shape_inputs``); at another block size the same
    construction (one shuffled pool, rotated tables) built here."""
    from kernels.bench.records import DecodeShape
    from kernels.bench.sweeps import _decode_inputs
    from kernels.bench.timing import rotations
    from kernels.theory import decode_kv_bytes

    shape = DecodeShape(batch=batch, context=ctx, n_q_heads=hq, n_kv_heads=8, head_dim=128, block_size=bs,
                        dtype="bf16")
    kv_bytes = decode_kv_bytes(batch, ctx, 8, 128, 2)
    n_rot = min(rotations(kv_bytes, torch.cuda.mem_get_info()[0] // 4), 8)
    return f"B{batch} L{ctx // 1024}K {hq}/8 block {bs}", kv_bytes, _decode_inputs(shape, n_rot, 0)


def speed_rows(deadline: float) -> list[dict]:
    from kernels.bench.contenders import DECODE
    from kernels.bench.timing import graph_ms
    from kernels.decode_config import default_config
    from kernels.paged_decode import decode_num_splits, paged_decode_attention

    rows = []
    for batch, ctx, hq, bs in SHAPES:
        label, kv_bytes, x = _shape_inputs(batch, ctx, hq, bs)
        base = default_config(128, torch.bfloat16)
        kernel_merge = dataclasses.replace(base, merge="kernel")
        splits = decode_num_splits(x.q[0], x.k, x.v, x.tables[0], x.lens, config=base, in_graph=True)
        cudnn = DECODE["sdpa_cudnn"]
        cudnn_run = cudnn.build(x, cudnn.prepare(x)).run
        # (name, call on rotation i, splits): rows are timed over the rotation, checked on rotation 0.
        contenders = [("cudnn", lambda i: cudnn_run(), None)]
        for name, cfg in (("triton", base), ("triton merge kernel", kernel_merge)):
            contenders.append((name, lambda i, cfg=cfg: paged_decode_attention(
                x.q[i], x.k, x.v, x.tables[i], x.lens, validate=False, config=cfg), splits))
        split_options = sorted({splits, max(1, splits // 2), splits * 2} if batch < 32 else {splits, 1, 4})
        for cfg in SPEED_CONFIGS:
            for s in split_options if cfg == SPEED_CONFIGS[0] else [splits]:
                contenders.append((cfg.name, lambda i, cfg=cfg, s=s: tma_decode(
                    x.q[i], x.k, x.v, x.tables[i], x.lens, s, cfg), s))
        cudnn_ms = None
        for name, call, s in contenders:
            row = dict(part="speed", shape=label, contender=name, splits=s)
            if time.time() > deadline:
                rows.append(dict(row, error="skipped: time budget"))
                continue
            try:
                row["err"] = None if name == "cudnn" else _finite(x.err_of(call(0))[0])

                def run(call=call):
                    return call(x.rot.next())
                ms = graph_ms(run, x.rot.n, 5.0, 30.0)
                row.update(ms=ms, tbps=kv_bytes / (ms * 1e-3) / 1e12)
                if name == "cudnn":
                    cudnn_ms = ms
                    x.state.clear()
                row["x_cudnn"] = cudnn_ms / ms if cudnn_ms else None
            except Exception as exc:  # noqa: BLE001 - a failed contender is a row
                row["error"] = f"{type(exc).__name__}: {str(exc)[:240]}"
            rows.append(row)
            if "ms" in row:
                print(f"{label:<24} {name:<20} s{s!s:<4} {row['ms'] * 1e3:8.1f} us {row['tbps']:.3f} TB/s "
                      f"{row['x_cudnn'] or 0:.3f}x cuDNN err {row.get('err')}", flush=True)
            else:
                print(f"{label:<24} {name:<20} s{s!s:<4} {row['error']}", flush=True)
        x = contenders = None
        torch.cuda.empty_cache()
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--budget", type=float, default=240.0, help="seconds for the speed rows")
    p.add_argument("--skip-check", action="store_true")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        p.error("needs a CUDA GPU")
    from kernels.bench.timing import environment

    rows = [] if args.skip_check else check_rows()
    rows += speed_rows(time.time() + args.budget)
    if args.json:
        with open(args.json, "w") as f:
            f.write(dumps_strict({"provenance": dataclasses.asdict(environment("python3 -m scripts.tuning.h200_tma_decode")),
                                  "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

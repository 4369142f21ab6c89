"""One GPU call: how fast can *any* kernel read a decode shape's paged KV, against cuDNN's whole
attention on the contiguous copy?

    python3 -m scripts.tuning.h200_read_floor --json $OUT/floor.json

The two unmet bf16 targets ask the paged kernel to match cuDNN on contiguous KV. A kernel that
only reads the KV (each K and V word loaded once, XOR-folded in registers, one word stored per
program: nothing the compiler can drop, nothing to wait on but the loads) bounds every paged
decode kernel from above. It runs here over the harness's inputs (block 16, shuffled tables,
rotated copies) with the decode kernel's grid (one program per KV head, sequence and split), over
a grid of tile sizes, warps, pipeline depths and split counts, and over two arrangements of the
same values: the harness's shuffled pages and a head-major pool read in order (cuDNN's pattern).
Beside it in the same call: cuDNN, the shipped bf16 kernel, and a flat read of the same number of
bytes (the card's read ceiling). CUDA-graph medians.

If the best paged read is slower than cuDNN's attention, no paged kernel meets the targets at
that shape; if it is faster, the difference is the room a kernel has for its arithmetic.

Nothing runs at import.
"""

from __future__ import annotations

import argparse

import torch
import triton
import triton.language as tl

from scripts.tuning.device_rows import cudnn_call, decode_shape_inputs, next_inputs, write_report

SHAPES = [(32, 16384, 64), (8, 32768, 64), (128, 4096, 64), (1, 32768, 64), (1, 131072, 32)]
# (tokens per tile, warps, pipeline stages); 1 stage: no software pipelining.
CONFIGS = ((64, 4, 3), (64, 4, 2), (64, 4, 1), (64, 4, 5), (32, 4, 3), (32, 2, 4), (128, 4, 3), (128, 8, 3),
           (64, 8, 3), (16, 2, 4), (16, 1, 4))
# Split counts per shape: the shipped kernel's (first) and more programs.
SPLITS = {1: (66, 132, 264), 8: (8, 16, 33), 32: (2, 4, 8), 128: (1, 2)}


@triton.jit
def _paged_read_kernel(k_ptr, v_ptr, tables_ptr, out_ptr, seq_len, tokens_per_split,
                       s_kb, s_kh, s_ks, s_tb,
                       PAGE: tl.constexpr, BLOCK_N: tl.constexpr, WORDS: tl.constexpr, STAGES: tl.constexpr):
    """Program (KV head, sequence, split) XOR-folds its tokens' K and V words (int32 views of the
    ``[blocks, heads, PAGE, WORDS]`` pools) and stores one int32 at ``out[seq, head, split]``."""
    head, seq, split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    start = split * tokens_per_split
    end = tl.minimum(start + tokens_per_split, seq_len)
    offs_n = tl.arange(0, BLOCK_N)
    offs_w = tl.arange(0, WORDS)
    acc = tl.zeros([BLOCK_N, WORDS], tl.int32)
    for t0 in tl.range(start, end, BLOCK_N, num_stages=STAGES):
        tok = t0 + offs_n
        live = tok < end
        blk = tl.load(tables_ptr + seq * s_tb + tok // PAGE, mask=live, other=0)
        row = blk.to(tl.int64) * s_kb + head * s_kh + (tok % PAGE) * s_ks
        ptr = row[:, None] + offs_w[None, :]
        k = tl.load(k_ptr + ptr, mask=live[:, None], other=0)
        v = tl.load(v_ptr + ptr, mask=live[:, None], other=0)
        acc = acc ^ k ^ v
    n_heads, n_splits = tl.num_programs(0), tl.num_programs(2)
    tl.store(out_ptr + (seq * n_heads + head) * n_splits + split, tl.xor_sum(tl.xor_sum(acc, 1), 0))


@triton.jit
def _flat_read_kernel(x_ptr, out_ptr, n_words, words_per_program, BLOCK: tl.constexpr, STAGES: tl.constexpr):
    """Program ``p`` XOR-folds words ``[p w, (p + 1) w)`` of a flat int32 buffer, ``BLOCK`` a step."""
    pid = tl.program_id(0)
    start = pid.to(tl.int64) * words_per_program
    end = tl.minimum(start + words_per_program, n_words)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.int32)
    for i in tl.range(start, end, BLOCK, num_stages=STAGES):
        acc = acc ^ tl.load(x_ptr + i + offs, mask=i + offs < end, other=0)
    tl.store(out_ptr + pid, tl.xor_sum(acc, 0))


def paged_read(k: torch.Tensor, v: torch.Tensor, tables: torch.Tensor, seq_len: int, splits: int, cfg: tuple,
               out: torch.Tensor | None = None) -> torch.Tensor:
    """Launch the paged read over bf16 pools ``k``, ``v`` ``[blocks, heads, page, d]`` (any strides
    with a contiguous last dim) and ``tables`` ``[batch, blocks per sequence]``: ``[batch, heads,
    splits]`` int32 XOR folds."""
    block_n, warps, stages = cfg
    kw, vw = k.view(torch.int32), v.view(torch.int32)
    batch, heads = tables.shape[0], k.shape[1]
    per_split = triton.cdiv(triton.cdiv(seq_len, splits), block_n) * block_n
    out = torch.empty(batch, heads, splits, dtype=torch.int32, device=k.device) if out is None else out
    assert kw.stride() == vw.stride() and kw.stride(3) == 1
    _paged_read_kernel[(heads, batch, splits)](kw, vw, tables, out, seq_len, per_split, kw.stride(0), kw.stride(1),
                                               kw.stride(2), tables.stride(0), PAGE=k.shape[2], BLOCK_N=block_n,
                                               WORDS=kw.shape[3], STAGES=stages, num_warps=warps)
    return out


def flat_read(x: torch.Tensor, programs: int, out: torch.Tensor, block: int = 4096, stages: int = 3,
              warps: int = 8) -> torch.Tensor:
    """XOR-fold the contiguous ``x`` as int32 words over ``programs`` programs into ``out``."""
    w = x.view(torch.int32).view(-1)
    per = triton.cdiv(triton.cdiv(w.numel(), programs), block) * block
    _flat_read_kernel[(programs,)](w, out, w.numel(), per, BLOCK=block, STAGES=stages, num_warps=warps)
    return out


def expected_fold(k: torch.Tensor, v: torch.Tensor, tables: torch.Tensor, seq_len: int) -> torch.Tensor:
    """The XOR of every K and V word of each (sequence, head) over its ``seq_len`` tokens (a whole
    number of pages), in torch: ``[batch, heads]`` int32, what the paged read's splits fold to."""
    page = k.shape[2]
    assert seq_len % page == 0
    blocks = tables[:, :seq_len // page].long()
    words = torch.cat([k.view(torch.int32)[blocks], v.view(torch.int32)[blocks]], 1)  # [b, 2 nb, h, page, w]
    return xor_rows(words.transpose(1, 2).reshape(tables.shape[0], k.shape[1], -1))


def xor_rows(x: torch.Tensor) -> torch.Tensor:
    """XOR along the last dim of an int32 tensor, by halving."""
    while x.shape[-1] > 1:
        if x.shape[-1] % 2:
            x = torch.cat([x, torch.zeros_like(x[..., :1])], -1)
        half = x.shape[-1] // 2
        x = x[..., :half] ^ x[..., half:]
    return x[..., 0]


def _head_major(pool: torch.Tensor) -> torch.Tensor:
    """``pool`` ``[blocks, heads, slots, d]`` copied head-major (each head's blocks one contiguous
    run) and seen through the same index order."""
    return pool.permute(1, 0, 2, 3).contiguous().permute(1, 0, 2, 3)


def _time(fn, n_rot: int) -> float:
    from kernels.bench.timing import graph_ms

    return graph_ms(fn, n_rot, 5.0, 30.0)


def floor_rows(check: bool = True) -> list[dict]:
    """``floor``: the paged read over the grid of configs and split counts, both arrangements."""
    from kernels.paged_decode import paged_decode_attention

    rows = []
    for batch, ctx, hq in SHAPES:
        label, kv_bytes, x = decode_shape_inputs(batch, ctx, hq, memory_share=6)
        n_rot, bps = x.rot.n, x.tables.shape[2]
        ref = _time(cudnn_call(x), n_rot)
        x.state.clear()
        ours = _time(lambda: paged_decode_attention(*next_inputs(x), x.lens, validate=False), n_rot)
        line = dict(part="floor", shape=label, kv_bytes=kv_bytes, cudnn_ms=ref, shipped_ms=ours)
        rows.append(dict(line, what="shipped kernel", ms=ours, x_cudnn=ref / ours))
        print(f"{label:<16} cudnn {ref * 1e3:.1f} us ({kv_bytes / ref / 1e9:.2f} TB/s) | shipped {ours * 1e3:.1f} us"
              f" {ref / ours:.3f}x", flush=True)
        flat_buf = torch.empty(kv_bytes // 2, dtype=torch.bfloat16, device="cuda").view(-1, 2, 64)
        flat_buf.zero_()
        flat_out = torch.empty(132 * 16, dtype=torch.int32, device="cuda")
        for programs in (132 * 2, 132 * 4, 132 * 8, 132 * 16):
            def flat_call(programs=programs):
                flat_read(flat_buf, programs, flat_out)
                return flat_read(flat_buf, programs, flat_out)  # K and V: the same bytes twice over
            ms = _time(flat_call, 1)
            rows.append(dict(line, what=f"flat read {programs} programs", ms=ms, x_cudnn=ref / ms,
                             tbps=kv_bytes / ms / 1e9))
            print(f"  flat read, {programs} programs {ms * 1e3:7.1f} us {kv_bytes / ms / 1e9:.2f} TB/s "
                  f"{ref / ms:.3f}x cuDNN", flush=True)
        flat_buf = None
        in_order = torch.arange(x.k.shape[0], dtype=torch.int32, device="cuda").reshape(n_rot, batch, bps)
        arrangements = (("shuffled", x.k, x.v, x.tables), ("head-major in order", _head_major(x.k),
                                                             _head_major(x.v), in_order))
        for name, k, v, tables in arrangements:
            if check:
                got = paged_read(k, v, tables[0, :2], ctx, SPLITS[batch][0], CONFIGS[0])
                want = expected_fold(k, v, tables[0, :2], ctx)
                folded = xor_rows(got)
                if not torch.equal(folded, want):
                    raise AssertionError(f"{label} {name}: the paged read's folds differ from torch's")
            for cfg in CONFIGS:
                for splits in SPLITS[batch]:
                    outs = [torch.empty(batch, 8, splits, dtype=torch.int32, device="cuda") for _ in range(n_rot)]
                    state = {"i": 0}

                    def call(k=k, v=v, tables=tables, splits=splits, cfg=cfg, outs=outs, state=state):
                        i = state["i"] = (state["i"] + 1) % n_rot
                        return paged_read(k, v, tables[i], ctx, splits, cfg, outs[i])
                    tag = f"{cfg[0]}/{cfg[1]}/{cfg[2]} x{splits}"
                    try:
                        ms = _time(call, n_rot)
                    except Exception as exc:  # noqa: BLE001 - a config that does not compile is a row
                        rows.append(dict(line, what=f"paged read {name}", config=tag, error=str(exc)[:200]))
                        print(f"  {name:<20} {tag:<14} {type(exc).__name__}", flush=True)
                        continue
                    rows.append(dict(line, what=f"paged read {name}", config=tag, ms=ms, x_cudnn=ref / ms,
                                     x_shipped=ours / ms, tbps=kv_bytes / ms / 1e9))
                    print(f"  {name:<20} {tag:<14} {ms * 1e3:7.1f} us {kv_bytes / ms / 1e9:.2f} TB/s "
                          f"{ref / ms:.3f}x cuDNN {ours / ms:.3f}x shipped", flush=True)
            k = v = tables = None
        x = in_order = arrangements = None
        torch.cuda.empty_cache()
    return rows


# ``splits``: more programs than the split rules give (the floor rose with them at every large
# shape), for the paged read and for the attention kernel; (batch, context, query heads) -> counts.
MORE_SPLITS = [((32, 16384, 64), (2, 4, 8, 16, 32)), ((8, 32768, 64), (8, 16, 33, 66, 132)),
               ((128, 4096, 64), (1, 2, 4, 8))]
SPLIT_FLOOR_CONFIGS = ((64, 4, 3), (64, 8, 3), (16, 1, 4), (64, 4, 1))
SPLIT_KERNEL_CONFIGS = ((64, 4, 3), (64, 4, 2), (32, 4, 3), (64, 8, 3))


def split_rows() -> list[dict]:
    from kernels.decode_config import DecodeConfig
    from scripts.tuning.device_rows import config_row

    rows = []
    for (batch, ctx, hq), counts in MORE_SPLITS:
        label, kv_bytes, x = decode_shape_inputs(batch, ctx, hq, memory_share=4)
        n_rot = x.rot.n
        ref = _time(cudnn_call(x), n_rot)
        x.state.clear()
        print(f"{label:<16} cudnn {ref * 1e3:.1f} us", flush=True)
        for cfg in SPLIT_FLOOR_CONFIGS:
            for splits in counts:
                ms = _time(_rotating_read(x.k, x.v, x.tables, ctx, splits, cfg, batch, n_rot), n_rot)
                rows.append(dict(part="splits", shape=label, what="paged read shuffled", splits=splits,
                                 config="%d/%d/%d" % cfg, ms=ms, cudnn_ms=ref, x_cudnn=ref / ms))
                print(f"  read {'%d/%d/%d' % cfg:<9} x{splits:<4} {ms * 1e3:7.1f} us {ref / ms:.3f}x cuDNN", flush=True)
        for n, w, st in SPLIT_KERNEL_CONFIGS:
            cfg = DecodeConfig(block_n=n, num_warps=w, num_stages=st, waves=1)
            rows += [dict(config_row("splits", label, x, cfg, splits, ref), what="attention")
                     for splits in (None, *counts)]
        x = None
        torch.cuda.empty_cache()
    return rows


def _rotating_read(k, v, tables, ctx, splits, cfg, batch, n_rot):
    """A paged-read call that reads the next rotation's tables each time (as the decode calls do)."""
    outs = [torch.empty(batch, k.shape[1], splits, dtype=torch.int32, device=k.device) for _ in range(n_rot)]
    state = {"i": 0}

    def call():
        i = state["i"] = (state["i"] + 1) % n_rot
        return paged_read(k, v, tables[i], ctx, splits, cfg, outs[i])
    return call


# ``b1``: the attention kernel at batch 1 without software pipelining (the paged read's fastest
# batch-1 configs had none), and the split kernel alone (no merge) for the shipped config.
B1_SHAPES = [(1, 32768, 64), (1, 32768, 32), (1, 131072, 32)]
B1_CONFIGS = ((64, 4, 3), (64, 4, 1), (32, 4, 1), (16, 2, 1), (64, 8, 1), (128, 4, 1), (32, 2, 1), (16, 1, 1),
              (16, 2, 2), (32, 4, 2))
B1_SPLITS = (66, 132)


def b1_rows() -> list[dict]:
    from kernels.decode_config import DecodeConfig
    from kernels.paged_decode import _launch_split_kernel, _prepare
    from scripts.tuning.device_rows import config_row

    rows = []
    for batch, ctx, hq in B1_SHAPES:
        label, _, x = decode_shape_inputs(batch, ctx, hq, memory_share=4)
        ref = _time(cudnn_call(x), x.rot.n)
        x.state.clear()
        print(f"{label:<16} cudnn {ref * 1e3:.1f} us", flush=True)
        for n, w, st in B1_CONFIGS:
            cfg = DecodeConfig(block_n=n, num_warps=w, num_stages=st, waves=1)
            rows += [dict(config_row("b1", label, x, cfg, splits, ref), what="attention")
                     for splits in (None, *B1_SPLITS)]
            try:
                def split_only(cfg=cfg):
                    plan, args, constexprs, out = _prepare(*next_inputs(x), x.lens, None, None, None, None, cfg, False,
                                                           in_graph=True)
                    _launch_split_kernel(plan.grid, args, constexprs)
                    return out
                ms = _time(split_only, x.rot.n)
                rows.append(dict(part="b1", shape=label, what="split kernel alone", config=f"{n}/{w}/{st}", ms=ms,
                                 cudnn_ms=ref, x_cudnn=ref / ms))
                print(f"  {n}/{w}/{st} split kernel alone {ms * 1e3:7.1f} us {ref / ms:.3f}x cuDNN", flush=True)
            except Exception as exc:  # noqa: BLE001 - a config that does not fit is a row
                rows.append(dict(part="b1", shape=label, what="split kernel alone", config=f"{n}/{w}/{st}",
                                 error=str(exc)[:200]))
        x = None
        torch.cuda.empty_cache()
    return rows


PARTS = {"floor": floor_rows, "splits": split_rows, "b1": b1_rows}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--parts", default="floor", help="comma-separated: " + ", ".join(PARTS))
    p.add_argument("--json", help="write the rows here (strict JSON)")
    args = p.parse_args(argv)
    parts = args.parts.split(",")
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        p.error(f"unknown parts: {unknown}")
    rows = [row for name, part_rows in PARTS.items() if name in parts for row in part_rows()]
    if args.json:
        write_report(args.json, "scripts.tuning.h200_read_floor", rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

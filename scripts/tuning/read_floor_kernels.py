"""Read-only kernels over a paged KV cache: the floor every paged decode kernel stands on.

Each kernel loads every K and V word of its tokens once (int32 views of the bf16 pools),
XOR-folds them in registers and stores one word per program — nothing the compiler can drop,
nothing to wait on but the loads — with the decode kernels' grid and block-table lookup:

* :func:`paged_read`: one program per (KV head, sequence, split), ``BLOCK_N`` tokens of one head a
  step (4 KiB runs at block 16 and d 128, as the decode kernels read them); optionally with the
  decode kernels' start (each sequence's length read from memory before its range is known) and
  end (a partial-sized tile stored per program).
* :func:`paged_read_wide`: one program per (sequence, split), whole pages a step (every head of a
  block: 32 KiB runs at 8 heads).

:func:`expected_fold` is the same fold in torch, the check that every word was read once.
Run on the GPU machine, ``python3 -m scripts.tuning.read_floor_kernels --batch 32 --context 16384``
times the paged read at the decode kernel's own tile and split count against the decode kernel
and cuDNN's SDPA on the same KV stored contiguously (CUDA-graph medians): what share of the
kernel's time is the read itself. Nothing runs at import.
"""

from __future__ import annotations

from kernels.runtime import ensure_triton_backend

ensure_triton_backend()  # before `import triton`: the interpreter is chosen at decoration

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

__all__ = ["paged_read", "paged_read_wide", "expected_fold", "xor_rows", "head_major"]


@triton.jit
def _paged_read_kernel(k_ptr, v_ptr, tables_ptr, out_ptr, seq_len, tokens_per_split,
                       s_kb, s_kh, s_ks, s_tb, lens_ptr, part_ptr,
                       PAGE: tl.constexpr, BLOCK_N: tl.constexpr, WORDS: tl.constexpr, STAGES: tl.constexpr,
                       LEN_FROM_MEMORY: tl.constexpr = False, PARTIAL: tl.constexpr = False):
    """Program (KV head, sequence, split) XOR-folds its tokens' K and V words (int32 views of the
    ``[blocks, heads, PAGE, WORDS]`` pools) and stores one int32 at ``out[seq, head, split]``."""
    head, seq, split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    if LEN_FROM_MEMORY:  # as the decode kernels: the length, then the split's range, from memory
        seq_len = tl.load(lens_ptr + seq)
        tokens_per_split = tl.cdiv(tl.cdiv(seq_len, BLOCK_N), tl.num_programs(2)) * BLOCK_N
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
    pid = (seq * n_heads + head) * n_splits + split
    tl.store(out_ptr + pid, tl.xor_sum(tl.xor_sum(acc, 1), 0))
    if PARTIAL:  # as a split partial: a [16, WORDS] fp32 tile (4 KiB at d 128) and 16 row values
        row = tl.xor_sum(acc, 0).to(tl.float32)
        offs_r = tl.arange(0, 16)
        tl.store(part_ptr + pid * 16 * WORDS + offs_r[:, None] * WORDS + offs_w[None, :],
                 tl.broadcast_to(row[None, :], [16, WORDS]))
        tl.store(part_ptr + n_heads * tl.num_programs(1) * n_splits * 16 * WORDS + pid * 16 + offs_r,
                 tl.sum(row, 0) + offs_r.to(tl.float32))


@triton.jit
def _paged_read_wide_kernel(k_ptr, v_ptr, tables_ptr, out_ptr, n_pages, pages_per_split, s_kb, s_tb,
                            CHUNK: tl.constexpr, PAGES: tl.constexpr, STAGES: tl.constexpr):
    """Program (sequence, split) XOR-folds whole pages — every KV head's slots of a block, one
    contiguous ``CHUNK`` of int32 words per page and pool — ``PAGES`` pages a step, and stores
    one int32 at ``out[seq, split]``."""
    seq, split = tl.program_id(0), tl.program_id(1)
    start = split * pages_per_split
    end = tl.minimum(start + pages_per_split, n_pages)
    offs_p = tl.arange(0, PAGES)
    offs_c = tl.arange(0, CHUNK)
    acc = tl.zeros([PAGES, CHUNK], tl.int32)
    for p0 in tl.range(start, end, PAGES, num_stages=STAGES):
        pages = p0 + offs_p
        live = pages < end
        blk = tl.load(tables_ptr + seq * s_tb + pages, mask=live, other=0)
        ptr = blk.to(tl.int64)[:, None] * s_kb + offs_c[None, :]
        acc = acc ^ tl.load(k_ptr + ptr, mask=live[:, None], other=0) ^ tl.load(v_ptr + ptr, mask=live[:, None], other=0)
    tl.store(out_ptr + seq * tl.num_programs(1) + split, tl.xor_sum(tl.xor_sum(acc, 1), 0))


def paged_read_wide(k: torch.Tensor, v: torch.Tensor, tables: torch.Tensor, seq_len: int, splits: int, cfg: tuple,
                    out: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`paged_read` by whole pages (all heads of a block, contiguous pools): ``cfg`` is
    ``(pages a step, warps, stages)``; ``[batch, splits]`` int32 folds."""
    pages, warps, stages = cfg
    assert k.is_contiguous() and v.is_contiguous() and seq_len % k.shape[2] == 0
    kw, vw = k.view(torch.int32), v.view(torch.int32)
    n_pages = seq_len // k.shape[2]
    per_split = triton.cdiv(triton.cdiv(n_pages, splits), pages) * pages
    out = torch.empty(tables.shape[0], splits, dtype=torch.int32, device=k.device) if out is None else out
    _paged_read_wide_kernel[(tables.shape[0], splits)](kw, vw, tables, out, n_pages, per_split, kw.stride(0),
                                                       tables.stride(0), CHUNK=kw[0].numel(), PAGES=pages,
                                                       STAGES=stages, num_warps=warps)
    return out


def paged_read(k: torch.Tensor, v: torch.Tensor, tables: torch.Tensor, seq_len: int, splits: int, cfg: tuple,
               out: torch.Tensor | None = None, *, lens: torch.Tensor | None = None,
               partials: torch.Tensor | None = None) -> torch.Tensor:
    """Launch the paged read over bf16 pools ``k``, ``v`` ``[blocks, heads, page, d]`` (any strides
    with a contiguous last dim) and ``tables`` ``[batch, blocks per sequence]``: ``[batch, heads,
    splits]`` int32 XOR folds. ``lens`` ``[batch]`` int32: each sequence's length (and so its
    splits' ranges) read from memory, as the decode kernels do; ``partials`` (fp32, at least
    ``batch * heads * splits * 17 * d / 2`` elements): also store a partial-sized tile per program."""
    block_n, warps, stages = cfg
    kw, vw = k.view(torch.int32), v.view(torch.int32)
    batch, heads = tables.shape[0], k.shape[1]
    per_split = triton.cdiv(triton.cdiv(seq_len, splits), block_n) * block_n
    out = torch.empty(batch, heads, splits, dtype=torch.int32, device=k.device) if out is None else out
    assert kw.stride() == vw.stride() and kw.stride(3) == 1
    _paged_read_kernel[(heads, batch, splits)](kw, vw, tables, out, seq_len, per_split, kw.stride(0), kw.stride(1),
                                               kw.stride(2), tables.stride(0), out if lens is None else lens,
                                               out if partials is None else partials, PAGE=k.shape[2],
                                               BLOCK_N=block_n, WORDS=kw.shape[3], STAGES=stages, num_warps=warps,
                                               LEN_FROM_MEMORY=lens is not None, PARTIAL=partials is not None)
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


def head_major(pool: torch.Tensor) -> torch.Tensor:
    """``pool`` ``[blocks, heads, slots, d]`` copied head-major (each head's blocks one contiguous
    run) and seen through the same index order."""
    return pool.permute(1, 0, 2, 3).contiguous().permute(1, 0, 2, 3)


def main() -> None:
    import argparse

    import torch.nn.functional as F

    from kernels.bench.timing import graph_ms, sdpa_context
    from kernels.decode.api import decode_plan, paged_decode_attention

    ap = argparse.ArgumentParser(description="the paged-read floor against the decode kernel and cuDNN")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--context", type=int, default=16384)
    ap.add_argument("--heads", type=int, default=32, help="query heads (8 KV heads, d 128, block 16)")
    args = ap.parse_args()
    b, L, hq, hkv, d, bs = args.batch, args.context, args.heads, 8, 128, 16
    g = torch.Generator(device="cuda").manual_seed(0)
    blocks = b * L // bs
    k = torch.randn(blocks, hkv, bs, d, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn_like(k)
    tables = torch.randperm(blocks, device="cuda", generator=g).to(torch.int32).reshape(b, L // bs)
    lens = torch.full((b,), L, dtype=torch.int32, device="cuda")
    q = torch.randn(b, hq, d, device="cuda", dtype=torch.bfloat16, generator=g)
    plan = decode_plan(q, k, v, tables, lens, in_graph=True)
    splits, cfg = plan.num_splits, plan.config
    folds = paged_read(k, v, tables, L, splits, (cfg.block_n, cfg.num_warps, cfg.num_stages))
    assert torch.equal(xor_rows(folds), expected_fold(k, v, tables, L)), "the read missed a word"
    kc = torch.stack([torch.cat([k[tables[i].long(), h] for h in range(hkv)]).reshape(hkv, L, d) for i in range(b)])
    vc = torch.stack([torch.cat([v[tables[i].long(), h] for h in range(hkv)]).reshape(hkv, L, d) for i in range(b)])

    def cudnn() -> torch.Tensor:
        with sdpa_context("CUDNN_ATTENTION"):
            return F.scaled_dot_product_attention(q.unsqueeze(2), kc, vc, enable_gqa=True)

    times = {"paged read": graph_ms(lambda: paged_read(k, v, tables, L, splits, (cfg.block_n, cfg.num_warps,
                                                                                cfg.num_stages), folds), 1, 10, 40),
             "decode kernel": graph_ms(lambda: paged_decode_attention(q, k, v, tables, lens, validate=False), 1, 10, 40),
             "cuDNN contiguous": graph_ms(cudnn, 1, 10, 40)}
    for name, ms in times.items():
        print(f"{name:18s} {ms * 1e3:9.1f} us   read / this {times['paged read'] / ms:.3f}")


if __name__ == "__main__":
    main()

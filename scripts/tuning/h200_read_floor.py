"""One GPU call: how fast can *any* kernel read a decode shape's paged KV, against cuDNN's whole
attention on the contiguous copy?

    python3 -m scripts.tuning.h200_read_floor --parts floor,splits,wide,b1parts,b1 --json $OUT/floor.json

The two unmet bf16 targets ask the paged kernel to match cuDNN on contiguous KV. A kernel that
only reads the KV (:mod:`scripts.tuning.read_floor_kernels`) bounds every paged decode kernel
from above. Each part runs it over the harness's inputs (block 16, shuffled tables, rotated
copies), with cuDNN timed in the same call (CUDA-graph medians):

* ``floor``: one head's tokens a program, over tiles, warps, pipeline depths and split counts,
  on the harness's shuffled pages and on a head-major pool read in order (cuDNN's own pattern),
  beside the shipped bf16 kernel.
* ``splits``: more programs than the decode split rules give, for the read and for the bf16
  decode kernel (whose partials and merge grow with them).
* ``wide``: whole pages a program step (all 8 heads of a block, 32 KiB runs) against one head's.
* ``b1parts``: at batch 1, the read with the decode kernels' start (the sequence's length read
  from memory before its range is known) and end (a partial stored per program) added.
* ``b1``: the bf16 decode kernel at batch 1 over more configs at 66 splits, and its split kernel
  alone (without the merge).

If the best read is slower than cuDNN's attention, no paged kernel meets the targets at that
shape; if it is faster, the difference is the room a kernel has for its arithmetic.

Nothing runs at import.
"""

from __future__ import annotations

import torch

from scripts.tuning.device_rows import cudnn_call, decode_shape_inputs, next_inputs, parts_main
from scripts.tuning.read_floor_kernels import expected_fold, head_major, paged_read, paged_read_wide, xor_rows

SHAPES = [(32, 16384, 64), (8, 32768, 64), (128, 4096, 64), (1, 32768, 64), (1, 131072, 32)]
# (tokens per tile, warps, pipeline stages); 1 stage: no software pipelining.
CONFIGS = ((64, 4, 3), (64, 4, 2), (64, 4, 1), (64, 4, 5), (32, 4, 3), (32, 2, 4), (128, 4, 3), (128, 8, 3),
           (64, 8, 3), (16, 2, 4), (16, 1, 4))
# Split counts per batch: the shipped kernel's (first) and more programs.
SPLITS = {1: (66, 132, 264), 8: (8, 16, 33), 32: (2, 4, 8), 128: (1, 2)}


def _time(fn, n_rot: int) -> float:
    from kernels.bench.timing import graph_ms

    return graph_ms(fn, n_rot, 5.0, 30.0)


def _rotating(read, k, v, tables, ctx: int, splits: int, cfg: tuple, out_shape: tuple, **kw):
    """A call of ``read`` (:func:`paged_read` or :func:`paged_read_wide`) that reads the next
    rotation's tables each time, as the decode calls do, into its own ``out_shape`` output."""
    n_rot = tables.shape[0]
    outs = [torch.empty(out_shape, dtype=torch.int32, device=k.device) for _ in range(n_rot)]
    state = {"i": 0}

    def call():
        i = state["i"] = (state["i"] + 1) % n_rot
        return read(k, v, tables[i], ctx, splits, cfg, outs[i], **kw)
    return call


def _read_row(call, n_rot: int, row: dict, ref: float, kv_bytes: int) -> dict:
    """Time ``call``: ``row`` with its median, x cuDNN (``ref`` ms) and TB/s, printed; a config
    that does not compile or fit is a row with its error."""
    label = f"  {row.get('what', ''):<28} {row.get('config', ''):<14}"
    try:
        ms = _time(call, n_rot)
    except Exception as exc:  # noqa: BLE001 - one config that does not fit is a row, not the end
        print(f"{label} {type(exc).__name__}", flush=True)
        return dict(row, error=str(exc)[:200])
    print(f"{label} {ms * 1e3:7.2f} us {kv_bytes / ms / 1e9:.2f} TB/s {ref / ms:.3f}x cuDNN", flush=True)
    return dict(row, ms=ms, cudnn_ms=ref, x_cudnn=ref / ms, tbps=kv_bytes / ms / 1e9)


def _check(read, k, v, tables, ctx: int, splits: int, cfg: tuple, label: str) -> None:
    """Refuse to time a read whose folds of two sequences differ from torch's."""
    got, want = xor_rows(read(k, v, tables[0, :2], ctx, splits, cfg)), expected_fold(k, v, tables[0, :2], ctx)
    if got.dim() == 1:  # the whole-page read folds every head of a sequence together
        want = xor_rows(want)
    if not torch.equal(got, want):
        raise AssertionError(f"{label}: the paged read's folds differ from torch's")


def _shape(batch: int, ctx: int, hq: int, memory_share: int = 4) -> tuple:
    """``(label, kv_bytes, inputs, cuDNN ms)`` of a harness decode shape."""
    label, kv_bytes, x = decode_shape_inputs(batch, ctx, hq, memory_share=memory_share)
    ref = _time(cudnn_call(x), x.rot.n)
    x.state.clear()
    print(f"{label:<16} cudnn {ref * 1e3:.1f} us ({kv_bytes / ref / 1e9:.2f} TB/s)", flush=True)
    return label, kv_bytes, x, ref


def floor_rows() -> list[dict]:
    """``floor``: one head's tokens a program, both arrangements, beside the shipped kernel."""
    from kernels.decode.paged import paged_decode_attention

    rows = []
    for batch, ctx, hq in SHAPES:
        label, kv_bytes, x, ref = _shape(batch, ctx, hq, memory_share=6)
        n_rot, bps = x.rot.n, x.tables.shape[2]
        ours = _time(lambda: paged_decode_attention(*next_inputs(x), x.lens, validate=False), n_rot)
        rows.append(dict(part="floor", shape=label, what="shipped kernel", ms=ours, cudnn_ms=ref, x_cudnn=ref / ours))
        print(f"  shipped kernel {ours * 1e3:.1f} us {ref / ours:.3f}x cuDNN", flush=True)
        in_order = torch.arange(x.k.shape[0], dtype=torch.int32, device="cuda").reshape(n_rot, batch, bps)
        for name, k, v, tables in (("shuffled", x.k, x.v, x.tables),
                                   ("head-major in order", head_major(x.k), head_major(x.v), in_order)):
            _check(paged_read, k, v, tables, ctx, SPLITS[batch][0], CONFIGS[0], f"{label} {name}")
            for cfg in CONFIGS:
                for splits in SPLITS[batch]:
                    call = _rotating(paged_read, k, v, tables, ctx, splits, cfg, (batch, 8, splits))
                    rows.append(_read_row(call, n_rot, dict(part="floor", shape=label, what=f"read, {name}",
                                                            config="%d/%d/%d x%d" % (*cfg, splits)), ref, kv_bytes))
        x = in_order = None
        torch.cuda.empty_cache()
    return rows


# ``splits``: (batch, context, query heads) -> split counts past the decode rules' (the read rose
# with them at every large shape), for the read and for the bf16 decode kernel.
MORE_SPLITS = [((32, 16384, 64), (2, 4, 8, 16, 32)), ((8, 32768, 64), (8, 16, 33, 66, 132)),
               ((128, 4096, 64), (1, 2, 4, 8))]
SPLIT_READ_CONFIGS = ((64, 4, 3), (64, 8, 3), (16, 1, 4), (64, 4, 1))
SPLIT_KERNEL_CONFIGS = ((64, 4, 3), (64, 4, 2), (32, 4, 3), (64, 8, 3))


def split_rows() -> list[dict]:
    """``splits``: more programs, for the read and for the decode kernel."""
    from kernels.decode.config import DecodeConfig
    from scripts.tuning.device_rows import config_row

    rows = []
    for (batch, ctx, hq), counts in MORE_SPLITS:
        label, kv_bytes, x, ref = _shape(batch, ctx, hq)
        for cfg in SPLIT_READ_CONFIGS:
            for splits in counts:
                call = _rotating(paged_read, x.k, x.v, x.tables, ctx, splits, cfg, (batch, 8, splits))
                rows.append(_read_row(call, x.rot.n, dict(part="splits", shape=label, what="read, shuffled",
                                                          config="%d/%d/%d x%d" % (*cfg, splits)), ref, kv_bytes))
        for n, w, st in SPLIT_KERNEL_CONFIGS:
            cfg = DecodeConfig(block_n=n, num_warps=w, num_stages=st, waves=1)
            rows += [dict(config_row("splits", label, x, cfg, splits, ref), what="decode kernel")
                     for splits in (None, *counts)]
        x = None
        torch.cuda.empty_cache()
    return rows


# ``wide``: (batch, context, query heads) -> split counts; (pages a step, warps, stages).
WIDE_SHAPES = [((32, 16384, 64), (8, 16, 32, 64)), ((8, 32768, 64), (33, 66, 132, 264)),
               ((128, 4096, 64), (1, 2, 4, 8)), ((1, 32768, 64), (132, 264, 528, 1024)),
               ((1, 131072, 32), (264, 528, 1056))]
WIDE_CONFIGS = ((1, 4, 3), (1, 8, 3), (1, 4, 2), (2, 8, 2), (1, 8, 4), (1, 4, 1), (1, 8, 1))
HEAD_CONFIGS = ((64, 8, 3), (16, 2, 4), (64, 4, 3))


def wide_rows() -> list[dict]:
    """``wide``: whole-page reads against one-head reads."""
    rows = []
    for (batch, ctx, hq), counts in WIDE_SHAPES:
        label, kv_bytes, x, ref = _shape(batch, ctx, hq)
        _check(paged_read_wide, x.k, x.v, x.tables, ctx, counts[0], WIDE_CONFIGS[0], f"{label} whole pages")
        trials = [(paged_read_wide, "whole pages", c, n, (batch, n)) for c in WIDE_CONFIGS for n in counts]
        trials += [(paged_read, "one head", c, n, (batch, 8, n)) for c in HEAD_CONFIGS
                   for n in SPLITS[batch] + (SPLITS[batch][-1] * 2,)]
        for read, what, cfg, splits, out_shape in trials:
            call = _rotating(read, x.k, x.v, x.tables, ctx, splits, cfg, out_shape)
            rows.append(_read_row(call, x.rot.n, dict(part="wide", shape=label, what=f"read, {what}",
                                                      config="%d/%d/%d x%d" % (*cfg, splits)), ref, kv_bytes))
        x = None
        torch.cuda.empty_cache()
    return rows


B1_SHAPES = [(1, 32768, 64), (1, 32768, 32), (1, 131072, 32)]
# ``b1parts``: read configs at batch 1.
B1_PART_CONFIGS = ((64, 4, 3), (32, 4, 3), (16, 2, 4), (64, 4, 2))


def b1_part_rows() -> list[dict]:
    """``b1parts``: the read with the decode kernels' start and end added, one at a time."""
    rows = []
    for batch, ctx, hq in B1_SHAPES[:2]:
        label, kv_bytes, x, ref = _shape(batch, ctx, hq)
        for cfg in B1_PART_CONFIGS:
            for splits in (66, 132):
                parts = torch.empty(batch * 8 * splits * 17 * 64, dtype=torch.float32, device="cuda")
                for what, kw in (("read", {}), ("length from memory", dict(lens=x.lens)),
                                 ("partial stored", dict(partials=parts)),
                                 ("both", dict(lens=x.lens, partials=parts))):
                    call = _rotating(paged_read, x.k, x.v, x.tables, ctx, splits, cfg, (batch, 8, splits), **kw)
                    rows.append(_read_row(call, x.rot.n, dict(part="b1parts", shape=label, what=what,
                                                              config="%d/%d/%d x%d" % (*cfg, splits)), ref, kv_bytes))
        x = None
        torch.cuda.empty_cache()
    return rows


# ``b1``: decode-kernel configs (tokens, warps, stages) at batch 1, each at its own split rule and
# at 66; the 1-stage configs because the read's fastest batch-1 configs had no pipelining.
B1_CONFIGS = ((64, 4, 3), (64, 4, 2), (32, 4, 3), (32, 4, 2), (16, 2, 4), (16, 2, 2), (32, 2, 4), (64, 4, 1),
              (32, 4, 1), (16, 2, 1), (128, 4, 1))


def b1_rows() -> list[dict]:
    """``b1``: the decode kernel at batch 1, as called and its split kernel alone."""
    from kernels.decode.config import DecodeConfig
    from kernels.decode.paged import _launch_split_kernel, _prepare
    from scripts.tuning.device_rows import config_row

    rows = []
    for batch, ctx, hq in B1_SHAPES:
        label, kv_bytes, x, ref = _shape(batch, ctx, hq)
        for n, w, st in B1_CONFIGS:
            cfg = DecodeConfig(block_n=n, num_warps=w, num_stages=st, waves=1)
            rows += [dict(config_row("b1", label, x, cfg, splits, ref), what="decode kernel") for splits in (None, 66)]

            def split_only(cfg=cfg):
                plan, args, constexprs, out = _prepare(*next_inputs(x), x.lens, None, None, None, None, cfg, False,
                                                       in_graph=True)
                _launch_split_kernel(plan.grid, args, constexprs)
                return out
            rows.append(_read_row(split_only, x.rot.n, dict(part="b1", shape=label, what="split kernel alone",
                                                            config=f"{n}/{w}/{st}"), ref, kv_bytes))
        x = None
        torch.cuda.empty_cache()
    return rows


PARTS = {"floor": floor_rows, "splits": split_rows, "wide": wide_rows, "b1parts": b1_part_rows, "b1": b1_rows}


def main(argv: list[str] | None = None) -> int:
    return parts_main(__doc__, "scripts.tuning.h200_read_floor", PARTS, "floor", argv)


if __name__ == "__main__":
    raise SystemExit(main())

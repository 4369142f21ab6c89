"""One GPU call: where the quantised kernels lose at GQA 8, and where an eager call's time goes.

    python3 -m scripts.tuning.h200_decode_diag --json $OUT/diag.json

* ``gqa``: the rdq INT4 and FP8 kernels at 32/8 and 64/8 heads (batch 8 x 32K, batch 32 x 16K),
  their default split count and a sweep of others (CUDA-graph medians), with the split and merge
  kernels' own GPU times from the profiler; the bf16 Triton kernel as the baseline.
* ``splits``: both rdq formats over split counts at every large shape and batch 1 (64/8 heads).
* ``fixed``: a call's fixed cost. The INT4 rdq kernel at batch 8, 64/8 heads, 33 splits (its
  batch 8 x 32K plan) over contexts of 1-8 tiles of 128 tokens per split, with the merge kernel as
  a PDL dependent and without, and the merge kernel alone on those partials; the bf16 kernel
  against cuDNN at batch 1 over contexts 8K-128K (32/8). Time against context is a line: its
  intercept is the cost that does not scale with the tokens.
* ``dispatch``: what a grid costs before any work. An empty kernel (one store per program) at
  64-4224 programs of 1 and 4 warps; and the INT4 rdq kernel at batch 8, 64/8, over split counts
  at 128 and 1024 tokens per split, so the intercept per split count shows whether the fixed
  cost grows with the programs.
* ``b1``: the bf16 kernel's tile, warps and stages at batch 1 (32K and 128K), each with its own
  default split count, and the default config over split counts; cuDNN (contiguous) beside.
* ``nomerge``: what the partials and their merge cost the INT4 rdq kernel at batch 8 (33 splits,
  the B8 L32K plan, and 8 at B32 L16K): the same grid timed as called, without the merge kernel,
  and with every split writing the output instead of a partial (a wrong result, timed only);
  then with each merge-kernel launch of ``MERGE_VARIANTS`` (head dims per program, warps) after
  it, and each of those alone on a call's partials; with fp32 partials (the default) and bf16.
* ``b1merge``: batch 1 (32K and 128K, where a call's merge has the fewest programs), the bf16
  and INT4 calls as called with each merge launch of ``B1_MERGE_VARIANTS`` forced, the policy's
  own (``kernels.decode.merge.merge_launch``), and cuDNN beside.
* ``host``: the host time of each piece of an eager call (the wrapper, the JIT launch, a direct
  launch of the compiled kernel).
* ``eager``: batch 1 x 32K, per decode path: the host time of one call (synchronised before it,
  not after: what the wrapper costs the CPU), the eager median the harness reports (least of
  three do_bench medians), the CUDA-graph median, and a cProfile of the bf16 wrapper.

Nothing runs at import.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import io
import pstats
import statistics
import time

import torch

from scripts.tuning.device_rows import config_row, cudnn_call, next_inputs, quantized_pools, write_report

GQA_SHAPES = [(8, 32768, 32), (8, 32768, 64), (32, 16384, 32), (32, 16384, 64)]
EAGER_SHAPES = [(1, 32768, 32), (1, 32768, 64)]
SPLIT_SWEEP = (4, 8, 12, 16, 24, 32, 48)
# ``splits``: (batch, context, query heads) and the split counts timed for both rdq formats.
SPLIT_SHAPES = [((8, 32768, 64), (6, 8, 10, 12, 16, 24, 32, 33)), ((32, 16384, 64), (1, 2, 3, 4, 6, 8)),
                ((32, 32768, 64), (1, 2, 3, 4, 6, 8)), ((128, 4096, 64), (1, 2, 3, 4)),
                ((128, 32768, 64), (1, 2, 4)), ((1, 32768, 64), (16, 24, 32, 48, 64, 66, 96, 128)),
                ((1, 131072, 64), (32, 48, 64, 66, 96, 128))]


def _kernel_times(fn, calls: int = 20) -> dict[str, float]:
    """Mean GPU microseconds per call of each kernel ``fn`` launches (profiler device times)."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    out: dict[str, float] = {}
    for e in prof.key_averages():
        if e.device_type.name == "CUDA" or getattr(e, "self_device_time_total", 0):
            t = getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)
            if t:
                out[e.key[:60]] = t / calls
    return out


def gqa_rows() -> list[dict]:
    from kernels.bench.timing import graph_ms
    from kernels.decode.backends import default_rdq_config
    from kernels.decode.paged import paged_decode_attention
    from kernels.decode.rdq import rdq_paged_decode, rdq_plan
    from scripts.tuning.device_rows import decode_shape_inputs

    rows = []
    for batch, ctx, hq in GQA_SHAPES:
        label, bf16_bytes, x = decode_shape_inputs(batch, ctx, hq, memory_share=4)
        def bf16():
            return paged_decode_attention(*next_inputs(x), x.lens, validate=False)
        bf = graph_ms(bf16, x.rot.n, 5.0, 30.0)
        rows.append(dict(part="gqa", shape=label, fmt="bf16", splits=None, ms=bf, kernels_us=_kernel_times(bf16)))
        print(f"{label:<16} bf16 {bf:.4f} ms {rows[-1]['kernels_us']}", flush=True)
        for fmt in ("int4", "fp8"):
            k, v, kw = quantized_pools(fmt, x.k, x.v)
            cfg = default_rdq_config(fmt)
            default, resident = rdq_plan(x.q[0], k, v, x.tables[0], x.lens, config=cfg)
            for splits in [default] + [s for s in SPLIT_SWEEP if s != default]:
                def call(splits=splits):
                    return rdq_paged_decode(*next_inputs(x, k, v), x.lens, validate=False, config=cfg,
                                            num_splits=splits, **kw)
                ms = graph_ms(call, x.rot.n, 5.0, 30.0)
                row = dict(part="gqa", shape=label, fmt=fmt, splits=splits, default=splits == default,
                           resident=resident, ms=ms, x_bf16=bf / ms)
                if splits == default:
                    row["kernels_us"] = _kernel_times(call)
                rows.append(row)
                print(f"{label:<16} {fmt} splits {splits:>3}{'*' if splits == default else ' '} {ms:.4f} ms "
                      f"{bf / ms:.3f}x bf16 {row.get('kernels_us', '')}", flush=True)
        torch.cuda.empty_cache()
    return rows


def split_rows() -> list[dict]:
    from kernels.bench.timing import graph_ms
    from kernels.decode.backends import default_rdq_config
    from kernels.decode.paged import paged_decode_attention
    from kernels.decode.rdq import rdq_paged_decode, rdq_plan
    from scripts.tuning.device_rows import decode_shape_inputs

    rows = []
    for (batch, ctx, hq), counts in SPLIT_SHAPES:
        label, _, x = decode_shape_inputs(batch, ctx, hq, memory_share=4)
        bf = graph_ms(lambda: paged_decode_attention(*next_inputs(x), x.lens, validate=False), x.rot.n, 5.0, 30.0)
        rows.append(dict(part="splits", shape=label, fmt="bf16", splits=None, ms=bf))
        print(f"{label:<16} bf16 {bf:.4f} ms", flush=True)
        for fmt in ("int4", "fp8"):
            k, v, kw = quantized_pools(fmt, x.k, x.v)
            cfg = default_rdq_config(fmt)
            default, resident = rdq_plan(x.q[0], k, v, x.tables[0], x.lens, config=cfg)
            line = []
            for splits in sorted(set(counts) | {default}):
                def call(splits=splits):
                    return rdq_paged_decode(*next_inputs(x, k, v), x.lens, validate=False, config=cfg,
                                            num_splits=splits, **kw)
                ms = graph_ms(call, x.rot.n, 5.0, 30.0)
                rows.append(dict(part="splits", shape=label, fmt=fmt, splits=splits, default=splits == default,
                                 resident=resident, ms=ms, x_bf16=bf / ms))
                line.append(f"{splits}{'*' if splits == default else ''}:{bf / ms:.3f}")
            print(f"{label:<16} {fmt} x bf16 by splits  " + "  ".join(line), flush=True)
        x = None
        torch.cuda.empty_cache()
    return rows


FIXED_CONTEXTS = (4224, 8448, 16896, 33792)  # 33 splits x 128 x 1, 2, 4, 8 tokens
FIXED_SPLITS = 33
B1_CONTEXTS = (8192, 16384, 32768, 65536, 131072)


def _line(xs, ys) -> tuple[float, float]:
    """Least-squares ``(intercept, slope)`` of ``ys`` against ``xs``."""
    slope, intercept = statistics.linear_regression(xs, ys)
    return intercept, slope


def _fits(rows: list[dict], names, label: str = "") -> list[dict]:
    """Per variant name, the line through its rows' ``(context, us)`` points: the intercept is the
    cost that does not shrink with the tokens (printed, and returned as rows)."""
    fits = []
    for name in names:
        pts = [(r["context"], r["ms"] * 1e3) for r in rows if r.get("variant") == name and "context" in r]
        a, b = _line(*zip(*pts))
        fits.append(dict(part="fixed", variant=f"{label}{name}", intercept_us=a, us_per_1k_tokens=b * 1024))
        print(f"{label}{name}: intercept {a:.1f} us, {b * 1024:.3f} us per 1K tokens of context", flush=True)
    return fits


def fixed_rows() -> list[dict]:
    from kernels.bench.timing import graph_ms
    from kernels.decode.backends import default_rdq_config
    from kernels.decode.merge import merge_splits
    from kernels.decode.paged import paged_decode_attention
    from kernels.decode.rdq import rdq_paged_decode
    from scripts.tuning.device_rows import decode_shape_inputs

    rows = []
    base = default_rdq_config("int4")
    variants = {"int4 pdl merge": base, "int4 stream merge": dataclasses.replace(base, pdl=False)}
    for ctx in FIXED_CONTEXTS:
        label, _, x = decode_shape_inputs(8, ctx, 64, memory_share=4)
        k, v, kw = quantized_pools("int4", x.k, x.v)
        for name, cfg in variants.items():
            def call(cfg=cfg):
                return rdq_paged_decode(*next_inputs(x, k, v), x.lens, validate=False, config=cfg,
                                        num_splits=FIXED_SPLITS, **kw)
            ms = graph_ms(call, x.rot.n, 5.0, 30.0)
            rows.append(dict(part="fixed", shape=label, context=ctx, variant=name, ms=ms, kernels_us=_kernel_times(call)))
            print(f"{label:<16} {name:<18} {ms * 1e3:8.1f} us {rows[-1]['kernels_us']}", flush=True)
        x = k = v = None
        torch.cuda.empty_cache()
    rows += _fits(rows, variants)
    part = torch.randn(8, 64, FIXED_SPLITS, 128, device="cuda")
    lse = torch.randn(8, 64, FIXED_SPLITS, device="cuda")
    out = torch.empty(8, 64, 128, device="cuda", dtype=torch.bfloat16)
    ms = graph_ms(lambda: merge_splits(part, lse, out), 1, 5.0, 30.0)
    rows.append(dict(part="fixed", variant="merge kernel alone", shape="8 x 64 x 33 x 128", ms=ms))
    print(f"merge kernel alone [8, 64, 33, 128]: {ms * 1e3:.1f} us", flush=True)
    for ctx in B1_CONTEXTS:
        label, _, x = decode_shape_inputs(1, ctx, 32, memory_share=4)
        def bf16():
            return paged_decode_attention(*next_inputs(x), x.lens, validate=False)
        for name, fn in (("bf16", bf16), ("cudnn", cudnn_call(x))):
            ms = graph_ms(fn, x.rot.n, 5.0, 30.0)
            rows.append(dict(part="fixed", shape=label, context=ctx, variant=name, ms=ms,
                             kernels_us=_kernel_times(fn)))
            print(f"{label:<16} {name:<6} {ms * 1e3:8.1f} us {rows[-1]['kernels_us']}", flush=True)
        x = None
        torch.cuda.empty_cache()
    return rows + _fits(rows, ("bf16", "cudnn"), "B1 ")


DISPATCH_GRIDS = (64, 528, 1056, 2112, 4224)
DISPATCH_SPLITS = (1, 4, 8, 16, 33)


def dispatch_rows() -> list[dict]:
    import triton
    import triton.language as tl

    from kernels.bench.timing import graph_ms
    from kernels.decode.backends import default_rdq_config
    from kernels.decode.rdq import rdq_paged_decode
    from scripts.tuning.device_rows import decode_shape_inputs

    @triton.jit
    def _one_store(out_ptr):
        tl.store(out_ptr + tl.program_id(0), 1.0)

    rows = []
    out = torch.empty(max(DISPATCH_GRIDS), device="cuda")
    for warps in (1, 4):
        for n in DISPATCH_GRIDS:
            ms = graph_ms(lambda n=n, warps=warps: _one_store[(n,)](out, num_warps=warps), 20, 5.0, 30.0)
            rows.append(dict(part="dispatch", kernel="one store", programs=n, warps=warps, us=ms * 1e3))
            print(f"one store: {n:>5} programs x {warps} warps {ms * 1e3:6.2f} us", flush=True)
    cfg = default_rdq_config("int4")
    for splits in DISPATCH_SPLITS:
        pts = []
        for per_split in (128, 1024):
            label, _, x = decode_shape_inputs(8, splits * per_split, 64, memory_share=4)
            k, v, kw = quantized_pools("int4", x.k, x.v)
            def call(splits=splits):
                return rdq_paged_decode(*next_inputs(x, k, v), x.lens, validate=False, config=cfg, num_splits=splits, **kw)
            us = graph_ms(call, x.rot.n, 5.0, 30.0) * 1e3
            pts.append((per_split, us))
            rows.append(dict(part="dispatch", kernel="int4 rdq", shape=label, splits=splits, programs=64 * splits,
                             tokens_per_split=per_split, us=us))
            x = k = v = None
        a, b = _line(*zip(*pts))
        rows.append(dict(part="dispatch", kernel="int4 rdq fit", splits=splits, programs=64 * splits, intercept_us=a,
                         us_per_1k_tokens=b * 1024))
        print(f"int4 rdq B8 64/8 {splits:>2} splits ({64 * splits:>4} programs): 128 tok/split {pts[0][1]:6.1f} us, "
              f"1024: {pts[1][1]:6.1f} us; intercept {a:5.1f} us, {b * 1024:5.2f} us per 1K tokens per split",
              flush=True)
        torch.cuda.empty_cache()
    return rows


B1_SHAPES = [(1, 32768, 32), (1, 32768, 64), (1, 131072, 32)]
B1_CONFIGS = ((64, 4, 3), (64, 4, 2), (64, 4, 4), (32, 4, 3), (32, 4, 4), (32, 2, 3), (32, 2, 4), (64, 8, 3),
              (128, 4, 2), (128, 8, 2), (128, 8, 3), (16, 2, 4))  # (block_n, num_warps, num_stages)
B1_SPLITS = (33, 44, 88, 132)


def b1_rows() -> list[dict]:
    from kernels.bench.timing import graph_ms
    from kernels.decode.config import DecodeConfig
    from scripts.tuning.device_rows import decode_shape_inputs

    rows = []
    for batch, ctx, hq in B1_SHAPES:
        label, _, x = decode_shape_inputs(batch, ctx, hq, memory_share=4)
        ref = graph_ms(cudnn_call(x), x.rot.n, 5.0, 30.0)
        x.state.clear()
        print(f"{label:<16} cudnn {ref * 1e3:.1f} us", flush=True)
        trials = [(DecodeConfig(block_n=n, num_warps=w, num_stages=st, waves=1), None) for n, w, st in B1_CONFIGS]
        trials += [(trials[0][0], s) for s in B1_SPLITS]
        rows += [config_row("b1", label, x, cfg, splits, ref) for cfg, splits in trials]
        x = None
        torch.cuda.empty_cache()
    return rows


NOMERGE_SHAPES = [(8, 32768, 64), (8, 32768, 32), (32, 16384, 64)]


# ``nomerge``: merge-kernel launches (head dims per program, warps).
MERGE_VARIANTS = ((128, 4), (64, 2), (64, 1), (32, 1), (32, 2), (16, 1))
# ``b1merge``: bf16 and INT4 calls at batch 1 (many splits, few merge programs), as called with
# each merge launch forced on every kernel's merge.
B1_MERGE_SHAPES = [(1, 32768, 32), (1, 32768, 64), (1, 131072, 32)]
B1_MERGE_VARIANTS = ((128, 4), (64, 2), (32, 1), (16, 1), (16, 2), (8, 1))


def b1merge_rows() -> list[dict]:
    import kernels.decode.merge as decode_merge
    from kernels.bench.timing import graph_ms
    from kernels.decode.backends import default_rdq_config
    from kernels.decode.paged import paged_decode_attention
    from kernels.decode.rdq import rdq_paged_decode
    from scripts.tuning.device_rows import decode_shape_inputs

    rows, policy = [], decode_merge.merge_launch
    try:
        for batch, ctx, hq in B1_MERGE_SHAPES:
            label, _, x = decode_shape_inputs(batch, ctx, hq, memory_share=4)
            k, v, kw = quantized_pools("int4", x.k, x.v)
            paths = {"bf16": lambda: paged_decode_attention(*next_inputs(x), x.lens, validate=False),
                     "int4": lambda: rdq_paged_decode(*next_inputs(x, k, v), x.lens, validate=False,
                                                      config=default_rdq_config("int4"), **kw),
                     "cudnn": cudnn_call(x)}
            line = []
            for dc, nw in B1_MERGE_VARIANTS + ((None, None),):
                decode_merge.merge_launch = policy if dc is None else (lambda *a, dc=dc, nw=nw: (dc, nw))
                for name, fn in paths.items():
                    if name == "cudnn" and dc is not None:
                        continue
                    us = graph_ms(fn, x.rot.n, 5.0, 30.0) * 1e3
                    tag = "policy" if dc is None else f"{dc}/{nw}w"
                    rows.append(dict(part="b1merge", shape=label, path=name, merge=tag, us=us))
                    line.append(f"{name} {tag} {us:.1f}")
            print(f"{label:<16} " + " | ".join(line), flush=True)
            x = k = v = None
            torch.cuda.empty_cache()
    finally:
        decode_merge.merge_launch = policy
    return rows


def nomerge_rows() -> list[dict]:
    from kernels.decode.backends import default_rdq_config

    rows = []
    default = default_rdq_config("int4")
    for cname, cfg in (("fp32 partials", default), ("bf16 partials", dataclasses.replace(default, bf16_partials=True))):
        rows += _nomerge_config_rows(cname, cfg)
    return rows


def _nomerge_config_rows(cname: str, cfg) -> list[dict]:
    """:func:`nomerge_rows` for one rdq config, each row labelled ``cname``."""
    from kernels.bench.timing import graph_ms
    from kernels.decode.merge import merge_splits
    from kernels.decode.rdq import (_kernel_args, _launch_kwargs, _launch_rdq_kernel, _prepare,
                                          partial_dtype, rdq_paged_decode)
    from kernels.decode.launch import check_call_options
    from kernels.reference.online_softmax import LOG2_E
    from scripts.tuning.device_rows import decode_shape_inputs

    rows = []
    for batch, ctx, hq in NOMERGE_SHAPES:
        label, _, x = decode_shape_inputs(batch, ctx, hq, memory_share=4)
        k, v, kw = quantized_pools("int4", x.k, x.v)

        def split_kernel(partials: bool = True):
            """The split kernel of one call on the next inputs, without its merge: ``(plan, args,
            constexprs, out)``; ``partials`` off, every split writes the output instead."""
            q, kk, vv, t = next_inputs(x, k, v)
            c, fmt, plan, out, pools, constexprs = _prepare(q, kk, vv, t, x.lens, None, None, None, cfg, False)
            args = _kernel_args(q, *pools, t, x.lens, out, plan, check_call_options(None, None, q.shape[2]) * LOG2_E,
                                partial_dtype(c, fmt))
            if not partials:
                shape = dict(fmt=fmt, group=q.shape[1] // kk.data.shape[1], head_dim=q.shape[2],
                             block_size=kk.data.shape[2])
                constexprs = _launch_kwargs(c, **shape, split=False, early_merge=False)
            _launch_rdq_kernel(plan.grid, args, constexprs)
            return plan, args, constexprs, out

        def variant(kind: str):
            def call():
                if kind == "as called":
                    q, kk, vv, t = next_inputs(x, k, v)
                    return rdq_paged_decode(q, kk, vv, t, x.lens, validate=False, config=cfg)
                return split_kernel(partials=kind != "outputs, no partials")[3]  # "partials, no merge"
            return call

        def merged(d_chunk, warps):
            def call():
                _, args, constexprs, out = split_kernel()
                return merge_splits(args[8], args[9], out, pdl=constexprs["EARLY_MERGE_LAUNCH"], d_chunk=d_chunk,
                                    num_warps=warps)
            return call

        line = []
        kinds = [(kind, variant(kind)) for kind in ("as called", "partials, no merge", "outputs, no partials")]
        kinds += [(f"merge {dc} dims {nw}w", merged(dc, nw)) for dc, nw in MERGE_VARIANTS]
        for kind, fn in kinds:
            us = graph_ms(fn, x.rot.n, 5.0, 30.0) * 1e3
            rows.append(dict(part="nomerge", config=cname, shape=label, variant=kind, us=us))
            line.append(f"{kind} {us:.1f} us")
        print(f"{cname} {label:<16} " + " | ".join(line), flush=True)
        plan, args, _, out = split_kernel()
        if plan.split:
            ref = merge_splits(args[8], args[9], torch.empty_like(out), d_chunk=out.shape[2], num_warps=4)
            line = []
            for dc, nw in MERGE_VARIANTS:
                mine = merge_splits(args[8], args[9], torch.empty_like(out), d_chunk=dc, num_warps=nw)
                err = (mine.float() - ref.float()).abs().max().item()
                us = graph_ms(lambda dc=dc, nw=nw: merge_splits(args[8], args[9], out, d_chunk=dc, num_warps=nw),
                              1, 5.0, 30.0) * 1e3
                rows.append(dict(part="nomerge", config=cname, shape=label, variant=f"merge alone {dc} dims {nw}w",
                                 us=us, splits=plan.num_splits, max_abs_diff=err))
                line.append(f"{dc}/{nw}w {us:.1f} us (diff {err:.1e})")
            print(f"{cname} {label:<16} merge alone, {plan.num_splits} splits: " + " | ".join(line), flush=True)
        x = k = v = None
        torch.cuda.empty_cache()
    return rows


def _or_error(build):
    """``build()``, or a call that raises what building raised (reported as that piece's row)."""
    try:
        return build()
    except Exception as exc:  # noqa: BLE001
        def fail(exc=exc):
            raise exc
        return fail


def host_rows() -> list[dict]:
    """Host microseconds of the pieces of one eager call at batch 1 x 32K 32/8: the whole call,
    the wrapper's preparation, the JIT launch with prepared arguments, and a direct launch of the
    compiled kernel with the same arguments (no binding, no cache lookup)."""
    import kernels.decode.paged as pd
    import kernels.decode.rdq as rdq
    from kernels.decode.backends import default_rdq_config
    from scripts.tuning.device_rows import decode_shape_inputs

    label, _, x = decode_shape_inputs(1, 32768, 32, memory_share=4)
    q, k, v, t = next_inputs(x)
    rows = []

    def direct(jit, grid, args, constexprs, options):
        compiled = jit.warmup(*args, grid=grid, **constexprs, **options)
        compiled._init_handles()
        values = list(args) + [constexprs[n] if n in constexprs else jit.params[i].default
                               for i, n in enumerate(jit.arg_names) if i >= len(args)]
        launch = compiled[grid]
        return lambda: launch(*values)

    plan, args, constexprs, out = pd._prepare(q, k, v, t, x.lens, None, None, None, None, None, False)
    opts = {n: constexprs[n] for n in ("num_warps", "num_stages", "maxnreg") if n in constexprs}
    cx = {n: val for n, val in constexprs.items() if n not in opts}
    pieces = {
        "bf16 whole call": lambda: pd.paged_decode_attention(q, k, v, t, x.lens, validate=False),
        "bf16 _prepare": lambda: pd._prepare(q, k, v, t, x.lens, None, None, None, None, None, False),
        "bf16 jit launch": lambda: pd._paged_decode_kernel[plan.grid](*args, **constexprs),
        "bf16 direct launch": _or_error(lambda: direct(pd._paged_decode_kernel, plan.grid, args, cx, opts)),
        "torch.empty_like(q)": lambda: torch.empty_like(q),
    }
    f8k, f8v, kw = quantized_pools("fp8", x.k, x.v)
    cfg = default_rdq_config("fp8")
    _, _, rplan, rout, pools, rcx = rdq._prepare(q, f8k, f8v, t, x.lens, kw["k_scale"], kw["v_scale"], None, cfg,
                                                 False)
    rargs = rdq._kernel_args(q, *pools, t, x.lens, rout, rplan, 0.1275)
    pieces.update({
        "fp8 rdq whole call": lambda: pd.paged_decode_attention(q, f8k, f8v, t, x.lens, validate=False, **kw),
        "fp8 rdq _prepare": lambda: rdq._prepare(q, f8k, f8v, t, x.lens, kw["k_scale"], kw["v_scale"], None, cfg,
                                                 False),
        "fp8 rdq jit launch": lambda: rdq._rdq_decode_kernel[rplan.grid](*rargs, **rcx),
        "fp8 rdq direct launch": _or_error(lambda: direct(rdq._rdq_decode_kernel, rplan.grid, rargs, rcx, {})),
        "merge_splits launch": lambda: rdq.merge_splits(rargs[8], rargs[9], rout, pdl=False),
    })
    for name, fn in pieces.items():
        try:
            fn()
            us = _host_us(fn, 300)
        except Exception as exc:  # noqa: BLE001 - a piece that cannot run is a row of the report
            rows.append(dict(part="host", shape=label, piece=name, error=f"{type(exc).__name__}: {exc}"[:300]))
            print(f"{label:<16} host {name:<24} {rows[-1]['error']}", flush=True)
            continue
        rows.append(dict(part="host", shape=label, piece=name, host_us=us))
        print(f"{label:<16} host {name:<24} {us:7.1f} us", flush=True)
    return rows


def _host_us(fn, n: int = 200) -> float:
    """Median host microseconds of one call that starts on an idle GPU."""
    times = []
    for _ in range(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


def eager_rows() -> tuple[list[dict], str]:
    from kernels.bench.timing import EAGER_REPEATS, do_bench, graph_ms
    from kernels.decode.config import default_config
    from kernels.decode.paged import paged_decode_attention
    from kernels.decode.int4 import paged_decode_int4
    from scripts.tuning.device_rows import decode_shape_inputs

    rows, profile_text = [], ""
    for batch, ctx, hq in EAGER_SHAPES:
        label, _, x = decode_shape_inputs(batch, ctx, hq, memory_share=4)
        i4k, i4v, _ = quantized_pools("int4", x.k, x.v)
        f8k, f8v, f8kw = quantized_pools("fp8", x.k, x.v)
        base = default_config(128, torch.bfloat16)
        paths = {
            "bf16 auto": lambda: paged_decode_attention(*next_inputs(x), x.lens,
                                                        validate=False),
            "bf16 inline": lambda: paged_decode_attention(*next_inputs(x), x.lens,
                                                          validate=False,
                                                          config=dataclasses.replace(base, merge="inline")),
            "bf16 kernel-merge no pdl": lambda: paged_decode_attention(
                *next_inputs(x), x.lens, validate=False,
                config=dataclasses.replace(base, merge="kernel", pdl=False)),
            "int4 rdq": lambda: paged_decode_int4(*next_inputs(x, i4k, i4v), x.lens, validate=False),
            "fp8 rdq": lambda: paged_decode_attention(*next_inputs(x, f8k, f8v), x.lens,
                                                      validate=False, **f8kw),
        }
        for name, fn in paths.items():
            fn()
            host = _host_us(fn)
            eager = min(do_bench(fn, 25, 100) for _ in range(EAGER_REPEATS))
            graph = graph_ms(fn, x.rot.n, 5.0, 30.0)
            rows.append(dict(part="eager", shape=label, path=name, host_us=host, eager_ms=eager, graph_ms=graph,
                             overhead_us=(eager - graph) * 1e3))
            print(f"{label:<16} {name:<26} host {host:7.1f} us  eager {eager * 1e3:7.1f} us  graph "
                  f"{graph * 1e3:7.1f} us  overhead {(eager - graph) * 1e3:6.1f} us", flush=True)
        if not profile_text:
            fn = paths["bf16 auto"]
            pr = cProfile.Profile()
            pr.enable()
            for _ in range(300):
                fn()
            pr.disable()
            torch.cuda.synchronize()
            s = io.StringIO()
            pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(25)
            profile_text = s.getvalue()
            print(profile_text, flush=True)
        torch.cuda.empty_cache()
    return rows, profile_text


# The parts that return rows only (``eager`` also returns a profile), in the order they run.
PARTS = {"host": host_rows, "gqa": gqa_rows, "splits": split_rows, "fixed": fixed_rows, "dispatch": dispatch_rows,
         "b1": b1_rows, "nomerge": nomerge_rows, "b1merge": b1merge_rows}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", metavar="PATH", help="write the rows as JSON to PATH")
    p.add_argument("--parts", default="host,eager,splits",
                   help="comma-separated: host, eager, gqa, splits, fixed, dispatch, b1, nomerge, b1merge")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        p.error("needs a CUDA GPU")
    rows, profile_text = [], ""
    parts = args.parts.split(",")
    if "eager" in parts:
        r, profile_text = eager_rows()
        rows += r
    for name, part_rows in PARTS.items():
        if name in parts:
            rows += part_rows()
    if args.json:
        write_report(args.json, "scripts.tuning.h200_decode_diag", rows, profile=profile_text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

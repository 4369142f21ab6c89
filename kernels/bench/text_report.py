"""A benchmark report as the readable table ``python -m kernels.bench`` prints."""

from __future__ import annotations

from kernels.bench.records import BenchReport, Measurement, measured_text

__all__ = ["format_report"]


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def _row_cells(m: Measurement, cudnn_ms: float | None = None) -> str:
    """One contender's row; with ``cudnn_ms`` its speed over SDPA-cuDNN's and its eager time too."""
    if m.status != "ok":
        return f"{m.contender:<21} {m.status:<13} {m.note[:60]}"
    mark = "g" if m.timing == "cuda_graph" else " "
    extra = ""
    if cudnn_ms is not None:
        ratio = cudnn_ms / m.median_ms if m.median_ms else None
        eager = m.eager_ms if m.timing == "cuda_graph" else None
        extra = f"  {_fmt(ratio, '5.3f')}x cuDNN  eager {_fmt(eager, '8.4f')} ms"
    return (
        f"{m.contender:<21} {_fmt(m.median_ms, '9.4f')} ms{mark} {_fmt(m.rate, '8.2f')} {m.unit:<7} "
        f"{_fmt(None if m.share_of_measured is None else 100 * m.share_of_measured, '5.1f')}% meas "
        f"{_fmt(None if m.share_of_datasheet is None else 100 * m.share_of_datasheet, '5.1f')}% sheet "
        f"err {_fmt(m.max_abs_err, '.1e')}{extra}"
    )


def format_report(report: BenchReport) -> str:
    """A readable multi-line table of a report (what the CLI prints without --json)."""
    p, c = report.provenance, report.ceilings
    lines = [
        f"device {p.device} ({p.sm_count} SMs), driver {p.driver or '?'}, CUDA {p.cuda or '-'}, "
        f"torch {p.torch}, triton {p.triton}, python {p.python}",
        f"date {p.date}  command: {p.command}",
        f"ceilings: copy {_fmt(c.copy_tbps, '.2f')} TB/s (read+write; datasheet {c.datasheet_tbps}), "
        f"bf16 {c.matmul_n}^3 matmul {_fmt(c.matmul_tflops, '.0f')} TFLOP/s (datasheet {c.datasheet_tflops:.0f})",
    ]
    for r in report.decode:
        lines.append(f"\ndecode {r.shape.label} block {r.shape.block_size} {r.shape.dtype}, "
                     f"KV {r.kv_bytes / 1e9:.3f} GB, splits {r.num_splits}")
        cudnn = r.get("sdpa_cudnn")
        cudnn_ms = cudnn.median_ms if cudnn is not None and cudnn.status == "ok" else None
        lines += ["  " + _row_cells(m, cudnn_ms) for m in r.measurements]
    for r in report.prefill:
        lines.append(f"\nprefill {r.shape.label} {r.shape.dtype}, {r.flops / 1e12:.2f} TFLOP")
        lines += ["  " + _row_cells(m) for m in r.measurements]
    for r in report.mixed:
        s = r.shape
        lines.append(f"\nmixed {s.label} {s.dtype}: {len(s.q_lens)} sequences, {sum(s.q_lens)} query tokens, "
                     f"{r.flops / 1e12:.2f} TFLOP, {r.hbm_bytes / 1e9:.3f} GB")
        lines += ["  " + _row_cells(m) for m in r.measurements]
    if report.page_sizes:
        lines.append("\npage-size study (bf16 kernel, TB/s of KV read)")
        for r in report.page_sizes:
            m = r.get("triton_paged")
            rate = "-" if m is None or m.rate is None else f"{m.rate:6.2f} TB/s"
            lines.append(f"  block {r.shape.block_size:<4} B={r.shape.batch:<4} L={r.shape.context:<6} {rate}")
    if report.memory:
        lines.append("\npeak memory above inputs (naive vs tiled)")
        for m in report.memory:
            peak = "-" if m.peak_bytes is None else f"{m.peak_bytes / 2**30:8.3f} GiB"
            lines.append(f"  N={m.seq_len:<6} {m.contender:<13} {m.status:<13} {peak:>12} "
                         f"{_fmt(m.median_ms, '9.3f')} ms {m.note[:50]}")
    lines.append("\n(ms g: CUDA-graph replay; otherwise eager calls)\ntargets")
    for t in report.targets:
        mark = "MET " if t.met else "miss"
        need = "<=" if t.at_most else ">="
        lines.append(f"  [{mark}] {t.name:<28} {measured_text(t) or '-':>7} (need {need} {t.required})  {t.detail}")
    return "\n".join(lines)

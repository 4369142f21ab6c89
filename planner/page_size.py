"""Which page size: the decode kernel's read rate per block size beside the waste it causes.

A report's page-size study (``BenchReport.page_sizes``: the bf16 kernel at block sizes 1–256
on a few shapes, same run) gives the kernel's side; :func:`simulation.snapshot.sweep_block_sizes`
gives the memory side for the user's workload (each request paged at its final length: the last
block's empty slots, ≈ (B − 1) / 2 tokens per sequence). It joins kernel results and the
simulation, so it lives here, above both.

Which block "fits the most": with memory full, the sequences that fit scale with the share of
the cache that holds tokens (the utilisation), and the time of a decode step with the kernel's
read rate; their product, each relative to its best, is the score the study ranks by.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kernels.bench.records import BenchReport
from simulation.policies import clip_to_context
from simulation.snapshot import sweep_block_sizes
from simulation.workloads import Workload

__all__ = ["PageSizeStudy", "page_size_study"]


@dataclass(frozen=True, kw_only=True)
class PageSizeStudy:
    """The page-size study of one report against one workload.

    Attributes
    ----------
    block_sizes : tuple of int, shape (k,)
        Block sizes measured in every shape of the study, ascending (tokens per page).
    shapes : tuple of str, shape (s,)
        One label per measured shape ("batch 8 × 32,768").
    tbps : tuple of tuple of float, shape (s, k)
        The kernel's KV read rate, TB/s.
    waste_tokens : tuple of float, shape (k,)
        Simulated mean of B·⌈L/B⌉ − L over the workload's requests, tokens per sequence.
    waste_expected : tuple of float, shape (k,)
        (B − 1) / 2, the analytic expectation.
    utilisation : tuple of float, shape (k,)
        Σ L / Σ B·⌈L/B⌉: the share of the paged cache that holds tokens.
    score : tuple of float, shape (k,)
        Utilisation × mean relative rate, over its best (1.0 at the best block).
    """

    workload: str
    n_requests: int
    mean_tokens: float
    max_context: int
    block_sizes: tuple[int, ...]
    shapes: tuple[str, ...]
    tbps: tuple[tuple[float, ...], ...]
    waste_tokens: tuple[float, ...]
    waste_expected: tuple[float, ...]
    utilisation: tuple[float, ...]
    score: tuple[float, ...]

    @property
    def best_block(self) -> int:
        return self.block_sizes[int(np.argmax(self.score))]

    @property
    def rate_spread(self) -> float:
        """Largest (fastest / slowest − 1) over the shapes: how much the block size moves the kernel."""
        return max(max(row) / min(row) - 1.0 for row in self.tbps)


def _rates(report: BenchReport) -> tuple[tuple[int, ...], dict[tuple[int, int], dict[int, float]]]:
    """Block sizes present in every shape, and each shape's TB/s per block size."""
    by_shape: dict[tuple[int, int], dict[int, float]] = {}
    for r in report.page_sizes:
        m = r.get("triton_paged")
        if m is not None and m.status == "ok" and m.rate:
            by_shape.setdefault((r.shape.batch, r.shape.context), {})[r.shape.block_size] = m.rate
    common = set.intersection(*(set(v) for v in by_shape.values())) if by_shape else set()
    return tuple(sorted(common)), by_shape


def page_size_study(report: BenchReport, workload: Workload, *, max_context: int) -> PageSizeStudy | None:
    """The study of ``report`` against ``workload`` (requests clipped to ``max_context`` tokens);
    None when the report has no page-size records with at least two common block sizes."""
    blocks, by_shape = _rates(report)
    if len(blocks) < 2:
        return None
    sweep = sweep_block_sizes(workload, max_context=max_context, block_sizes=blocks)
    keys = sorted(by_shape)
    tbps = np.array([[by_shape[k][b] for b in blocks] for k in keys])       # (s, k)
    relative = (tbps / tbps.max(axis=1, keepdims=True)).mean(axis=0)        # (k,)
    raw = sweep.utilisation * relative
    prompt, output, _ = clip_to_context(workload, max_context)
    lengths = prompt + output
    return PageSizeStudy(
        workload=workload.source or "workload", n_requests=int(lengths.size), mean_tokens=float(lengths.mean()),
        max_context=max_context, block_sizes=blocks, shapes=tuple(f"batch {b} × {c:,}" for b, c in keys),
        tbps=tuple(tuple(float(x) for x in row) for row in tbps),
        waste_tokens=tuple(float(x) for x in sweep.waste_tokens_mean),
        waste_expected=tuple(float(x) for x in sweep.waste_tokens_expected),
        utilisation=tuple(float(x) for x in sweep.utilisation),
        score=tuple(float(x) for x in raw / raw.max()),
    )

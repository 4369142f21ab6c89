"""Paged-decode KV read rates by batch and context, per attention backend, as measured on the H200.

The step model's decode attention reads ``batch × context`` tokens of KV per layer; how fast depends
on the batch and the context separately (a batch of one long sequence splits it across the SMs and
merges the parts; a large batch of short ones fills the GPU with whole sequences), and on the kernel.
The shipped H200 harness run (``benchmarks/results/h200-*.json``, the newest; ``python -m
kernels.bench``) times every paged-decode kernel on one grid: batch 1, 8, 32, 128 × context 1K, 4K,
16K, 32K (and 128K at batch 1), 32 or 64 query heads over 8 KV heads of 128, bf16, pages of 16. Two of
its contenders are backends the step model needs:

=============  =====================  ==========================================================
backend        contender              what runs it
=============  =====================  ==========================================================
``flashinfer``  ``flashinfer_tc``     vLLM's and SGLang's decode on Hopper (FlashInfer's tensor-core
                                      decode; FlashAttention's reads the same pages at the same rate)
``kvx``         ``triton_paged``      this project's Triton kernel (the serving anchor's attention)
=============  =====================  ==========================================================

:func:`read_efficiency` is the measured rate ÷ the datasheet bandwidth the run records, at the
nearest grid points: piecewise linear in log context within each batch's row, then in log batch
between rows, clamped at the grid's edges (the mean of the 32- and 64-head rows, which differ by
at most a few per cent). As every H200 figure here, it carries to another GPU as that fraction of
its own datasheet.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from statistics import mean
from typing import Literal

from kernels.bench.shipped import RESULTS_DIR
from planner.efficiency import interp_clamped

__all__ = ["AttentionBackend", "ATTENTION_BACKENDS", "RateGrid", "rate_grid", "read_efficiency"]

AttentionBackend = Literal["flashinfer", "kvx"]
ATTENTION_BACKENDS: dict[str, str] = {"flashinfer": "flashinfer_tc", "kvx": "triton_paged"}
_MAX_FILE_BYTES = 4 * 2**20


@dataclass(frozen=True, kw_only=True)
class RateGrid:
    """One backend's measured read rates: ``rows[batch]`` is ``((context, TB/s), ...)`` by context."""

    backend: str
    rows: dict[int, tuple[tuple[int, float], ...]]
    datasheet_tbps: float
    source: str  # the file, its GPU, commit and date


def _newest_run(directory: Path) -> Path:
    runs = sorted(directory.glob("h200-*.json"))
    if not runs:
        raise FileNotFoundError(f"no shipped H200 harness run (h200-*.json) in {directory}")
    return runs[-1]


@lru_cache(maxsize=8)
def rate_grid(backend: AttentionBackend, directory: Path = RESULTS_DIR) -> RateGrid:
    """The backend's grid from the newest shipped H200 run (read once; the repository's own file,
    still size-capped and checked field by field)."""
    if backend not in ATTENTION_BACKENDS:
        raise ValueError(f"attention backend must be one of {tuple(ATTENTION_BACKENDS)}, got {backend!r}")
    path = _newest_run(directory)
    raw = path.read_bytes()
    if len(raw) > _MAX_FILE_BYTES:
        raise ValueError(f"{path.name} is larger than {_MAX_FILE_BYTES} bytes")
    data = json.loads(raw)
    contender = ATTENTION_BACKENDS[backend]
    found: dict[int, dict[int, list[float]]] = {}
    for result in data["decode"]:
        shape = result["shape"]
        if shape["head_dim"] != 128 or shape["n_kv_heads"] != 8 or shape.get("dtype", "bf16") != "bf16":
            continue
        for m in result["measurements"]:
            rate = m.get("rate")
            if m["contender"] == contender and m["status"] == "ok" and isinstance(rate, (int, float)) and rate > 0:
                found.setdefault(int(shape["batch"]), {}).setdefault(int(shape["context"]), []).append(float(rate))
    if not found:
        raise ValueError(f"{path.name} has no {contender} decode rows")
    rows = {b: tuple(sorted((c, mean(v)) for c, v in by_context.items())) for b, by_context in found.items()}
    p = data["provenance"]
    source = (f"{contender} paged decode, {path.name} ({p['device']}, commit {p.get('commit') or '?'}, "
              f"{str(p['date'])[:10]})")
    return RateGrid(backend=backend, rows=rows, datasheet_tbps=float(data["ceilings"]["datasheet_tbps"]),
                    source=source)


def _interp_log(x: float, points: tuple[tuple[float, float], ...]) -> float:
    """Piecewise linear in log x through ``points`` (sorted by x), clamped at both ends."""
    return interp_clamped(math.log(x), tuple(math.log(p[0]) for p in points), tuple(p[1] for p in points))


def read_efficiency(backend: AttentionBackend, batch: float, context: float) -> float:
    """Measured KV read rate ÷ datasheet for a decode call of ``batch`` sequences of ``context``
    tokens on ``backend`` (dimensionless; module docstring)."""
    grid = rate_grid(backend)
    per_batch = tuple((float(b), _interp_log(max(context, 1.0), grid.rows[b])) for b in sorted(grid.rows))
    return _interp_log(max(batch, 1.0), per_batch) / grid.datasheet_tbps

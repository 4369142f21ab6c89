"""Series for the sizer's charts and rows of its reference table (KV precision × GPU).

Every KV amount here is :meth:`sizing.kv.KVCacheSpec.total_bytes` of the model at one
precision, so the charts and the table can never disagree with the headline figures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from sizing.kv import GpuCount, KVCacheSpec, gpus_needed, usable_bytes
from sizing.request import Resolved
from units import GB, to_unit

# Chart resolution: enough points for smooth step curves, few enough to stay well under 20 ms.
_CHART_MAX_POINTS = 48


@dataclass(frozen=True, kw_only=True)
class CurveSeries:
    """GPUs needed along one axis, for one KV precision."""

    kv_dtype: str
    label: str
    x: tuple[int, ...]
    gpus_needed: tuple[int, ...]
    ratio: tuple[float, ...]


@dataclass(frozen=True, kw_only=True)
class MemoryChart:
    """The reference chart: memory if every user reaches full context, against GPU count.
    Weights and KV are constant bars; total and usable GPU memory grow with the count."""

    gpu_counts: tuple[int, ...]
    weights_bytes: int
    kv_bytes: int
    total_memory_bytes: tuple[int, ...]  # red line
    usable_bytes: tuple[int, ...]  # dashed line
    gpus_needed: int


@dataclass(frozen=True, kw_only=True)
class ChartData:
    memory_vs_gpus: MemoryChart
    gpus_vs_context: tuple[CurveSeries, ...]
    gpus_vs_users: tuple[CurveSeries, ...]


@dataclass(frozen=True, kw_only=True)
class TableRow:
    """One cell group of the reference table: a KV precision on a GPU, weights as requested."""

    kv_dtype: str
    kv_label: str
    gpu_id: str
    gpu_name: str
    kv_all_users_bytes: int
    weights_bytes: int
    total_bytes: int
    usable_per_gpu_bytes: int
    gpus: GpuCount

    def as_record(self) -> dict[str, Any]:
        """Flat dict for a DataFrame / CSV: GB and GiB columns, both labelled."""
        return {
            "kv_precision": self.kv_label,
            "gpu": self.gpu_name,
            "kv_all_users_GB": round(self.kv_all_users_bytes / GB, 1),
            "kv_all_users_GiB": round(to_unit(self.kv_all_users_bytes, "GiB"), 1),
            "weights_GB": round(self.weights_bytes / GB, 1),
            "total_GB": round(self.total_bytes / GB, 1),
            "usable_per_gpu_GB": round(self.usable_per_gpu_bytes / GB, 1),
            "gpus_ratio": round(self.gpus.ratio, 2),
            "gpus_needed": self.gpus.count,
        }


def _one_two_five(limit: int) -> list[int]:
    """1, 2, 5, 10, 20, 50, … up to the first value ≥ ``limit``."""
    out, base = [], 1
    while True:
        for f in (1, 2, 5):
            out.append(f * base)
            if f * base >= limit:
                return out
        base *= 10


def _thin(values: list[int]) -> tuple[int, ...]:
    values = sorted(set(values))
    if len(values) <= _CHART_MAX_POINTS:
        return tuple(values)
    step = len(values) / _CHART_MAX_POINTS
    return tuple(sorted({values[int(i * step)] for i in range(_CHART_MAX_POINTS)} | {values[-1]}))


def _memory_chart(inp: Resolved, weights: int, usable: Fraction, count: GpuCount, kv_total: Fraction) -> MemoryChart:
    top = max(8, math.ceil(count.count * 1.25) + 1)
    # Evenly spaced counts from 1 to ``top`` without building the whole range (top may be 10**6).
    counts = _thin([1 + (top - 1) * i // (_CHART_MAX_POINTS - 1) for i in range(_CHART_MAX_POINTS)] + [count.count])
    return MemoryChart(
        gpu_counts=counts, weights_bytes=weights, kv_bytes=math.ceil(kv_total),
        total_memory_bytes=tuple(n * inp.gpu.memory_bytes for n in counts),
        usable_bytes=tuple(math.floor(n * usable) for n in counts), gpus_needed=count.count,
    )


def _curve(spec: KVCacheSpec, xs: tuple[int, ...], kv_bytes: list[Fraction], weights: int,
           usable: Fraction) -> CurveSeries:
    ratio = [Fraction(weights + kv) / usable for kv in kv_bytes]
    return CurveSeries(kv_dtype=spec.precision.name, label=spec.precision.label, x=xs,
                       gpus_needed=tuple(max(1, math.ceil(r)) for r in ratio),
                       ratio=tuple(float(r) for r in ratio))


def chart_data(inp: Resolved, weights: int, usable: Fraction, count: GpuCount, kv_total: Fraction) -> ChartData:
    """The memory chart, and GPUs needed against context and against users per KV precision."""
    m, context, users = inp.model, inp.context, inp.users
    ctx_top = max(context, m.max_context or 0, 4096)
    contexts = _thin([1 << k for k in range(10, 41) if (1 << k) <= ctx_top] + [context])
    user_counts = _thin(_one_two_five(max(2 * users, 10)) + [users])
    by_context, by_users = [], []
    for precision in inp.compare_kv:
        spec = KVCacheSpec(model=m, precision=precision)
        by_context.append(_curve(spec, contexts, [spec.total_bytes(t, users) for t in contexts], weights, usable))
        by_users.append(_curve(spec, user_counts, [spec.total_bytes(context, u) for u in user_counts],
                               weights, usable))
    return ChartData(memory_vs_gpus=_memory_chart(inp, weights, usable, count, kv_total),
                     gpus_vs_context=tuple(by_context), gpus_vs_users=tuple(by_users))


def reference_table(inp: Resolved, weights: int) -> tuple[TableRow, ...]:
    """Every compared KV precision on every compared GPU, weights as requested."""
    rows = []
    for precision in inp.compare_kv:
        kv_total = KVCacheSpec(model=inp.model, precision=precision).total_bytes(inp.context, inp.users)
        for g in inp.compare_gpus:
            usable = usable_bytes(g, inp.usable)
            rows.append(TableRow(
                kv_dtype=precision.name, kv_label=precision.label, gpu_id=g.id, gpu_name=g.name,
                kv_all_users_bytes=math.ceil(kv_total), weights_bytes=weights,
                total_bytes=math.ceil(weights + kv_total), usable_per_gpu_bytes=math.floor(usable),
                gpus=gpus_needed(weights + kv_total, usable),
            ))
    return tuple(rows)

"""The ranges a harness results file's figures must lie in, checked at load by field name.

A file can pass the schema with a 1e-300 TB/s ceiling or a zero-head shape; every figure the
pages and the planner divide by or scale with must be positive, finite and of a size a GPU run
can give, and a file that says otherwise is refused with the field's path.
"""

from __future__ import annotations

import dataclasses
import math

RANGES: dict[str, tuple[float, float]] = {  # inclusive bounds, by field name
    "batch": (1, 1_000_000), "context": (1, 1 << 24), "seq_len": (1, 1 << 24), "n_q_heads": (1, 4096),
    "n_kv_heads": (1, 4096), "n_heads": (1, 4096), "head_dim": (1, 4096), "block_size": (1, 1 << 16),
    "num_splits": (1, 1 << 16), "sm_count": (0, 1 << 16), "kv_bytes": (0, 1e18), "flops": (0, 1e21),
    "hbm_bytes": (0, 1e18), "work": (0, 1e21), "copy_tbps": (1e-3, 1e3), "datasheet_tbps": (1e-3, 1e3),
    "matmul_tflops": (1e-3, 1e6), "datasheet_tflops": (1e-3, 1e6), "copy_buffer_bytes": (1, 1 << 50),
    "matmul_n": (1, 1 << 20), "median_ms": (1e-6, 1e7), "eager_ms": (1e-6, 1e7), "eager_passes": (1, 1000),
    "rate": (0, 1e7), "share_of_measured": (0, 1e3), "share_of_datasheet": (0, 1e3), "peak_bytes": (0, 1 << 50),
    "max_abs_err": (0, 1e30), "q_lens": (1, 1 << 24), "seq_lens": (1, 1 << 24),
}


def check_ranges(obj: object, where: str) -> None:
    """Every bounded field of ``obj`` (and of the dataclasses inside it) within :data:`RANGES`;
    :class:`ValueError` naming the path otherwise."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        path = f"{where}.{f.name}"
        if dataclasses.is_dataclass(value):
            check_ranges(value, path)
        elif isinstance(value, tuple):
            for i, item in enumerate(value):
                if dataclasses.is_dataclass(item):
                    check_ranges(item, f"{path}[{i}]")
                elif f.name in RANGES:
                    _in_range(f.name, item, f"{path}[{i}]")
        elif f.name in RANGES and value is not None:
            _in_range(f.name, value, path)


def _in_range(name: str, value: float, path: str) -> None:
    low, high = RANGES[name]
    if not (math.isfinite(value) and low <= value <= high):
        raise ValueError(f"{path}: {value!r} is outside {low:g}..{high:g}")


__all__ = ["RANGES", "check_ranges"]

"""Integer helpers shared by the allocators and simulations (one definition of each).

Ceiling division is :func:`units.cdiv`, shared with the other libraries.
"""

from __future__ import annotations

import numpy as np

from units import cdiv


def next_power_of_two(values: np.ndarray) -> np.ndarray:
    """Smallest power of two ≥ each value (values ≥ 1), as int64; shape preserved.

    Computed on integers (bit length), not with float ``log2``, so that exact powers of two
    stay themselves even beyond 2**53.
    """
    values = np.asarray(values, dtype=np.int64)
    if values.size and values.min() < 1:
        raise ValueError(f"next_power_of_two needs values >= 1, got {values.min()}")
    # bit_length(v - 1) is the exponent of the next power of two; frexp gives it exactly for
    # integers below 2**53, far above any token count.
    _, exponent = np.frexp((values - 1).astype(np.float64))
    return np.left_shift(np.int64(1), exponent.astype(np.int64))


def paged_slots(lengths: np.ndarray, block_size: int | np.ndarray) -> np.ndarray:
    """Token slots held by sequences of ``lengths`` tokens in blocks of ``block_size``: B·⌈L/B⌉
    (``block_size`` may be an array that broadcasts against ``lengths``)."""
    return cdiv(np.asarray(lengths, dtype=np.int64), block_size) * block_size

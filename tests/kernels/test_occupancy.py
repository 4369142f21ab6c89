"""Resident programs per SM against Nsight Compute's "Block Limit" figures on the H200.

The three kernels were profiled on the H200 (``ncu --section Occupancy``, batch 32 x 16K): bf16 decode 106 registers / 39.17 KiB dynamic shared memory / 4 warps -> block limit
registers 4, shared memory 4 (on a 168 KiB carveout); FP8 168 / 40.96 KiB -> 3 and 3 (135 KiB
carveout); INT4 240 / 29.18 KiB -> 2 and 4. The calculation here uses the full 228 KiB, so its
shared-memory limit can be higher than ncu's carveout figure; the resident count is the minimum.
"""

from __future__ import annotations

import pytest

from kernels.occupancy import HOPPER, resident_programs


@pytest.mark.parametrize("regs,shared,expected", [
    (106, int(39.17 * 1024), 4),  # bf16 decode: register-bound at 4 (112 x 32 x 4 = 14,336 a program)
    (168, int(40.96 * 1024), 3),  # FP8: 168 x 32 x 4 = 21,504 -> 3 in 65,536
    (240, int(29.18 * 1024), 2),  # INT4: 30,720 -> 2
])
def test_matches_nsight_compute_on_the_h200(regs, shared, expected):
    assert resident_programs(registers_per_thread=regs, shared_bytes=shared, num_warps=4) == expected


def test_each_limit_binds():
    # Shared memory: 100 KiB programs -> 233,472 // (102,400 + 1,024) = 2.
    assert resident_programs(registers_per_thread=32, shared_bytes=100 * 1024, num_warps=4) == 2
    # Warps: 16-warp programs with few registers -> 64 // 16 = 4.
    assert resident_programs(registers_per_thread=32, shared_bytes=0, num_warps=16) == 4
    # Blocks: 1-warp programs -> capped at 32.
    assert resident_programs(registers_per_thread=16, shared_bytes=0, num_warps=1) == HOPPER.blocks
    # Register rounding: 105 registers still take 112 per thread (3,584 a warp): 4, not 4.87.
    assert resident_programs(registers_per_thread=105, shared_bytes=0, num_warps=4) == 4
    # Never below one, even when a program alone exceeds a limit.
    assert resident_programs(registers_per_thread=255, shared_bytes=300 * 1024, num_warps=8) == 1

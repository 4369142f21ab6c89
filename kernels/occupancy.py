"""How many programs (thread blocks) of a compiled kernel an SM holds at once, and the registers
and spills a compiled kernel uses (read from its cubin without a GPU).

The split-KV decode kernels cut short batches into enough programs to fill the GPU in whole
waves; a partial last wave costs up to 40 % (H200, batch 8 x 32K at 2.2 waves). A wave is the number
of programs resident at once, which depends on each compiled kernel's registers and shared
memory: on the H200, Nsight Compute reported 4 resident programs for the bf16 kernel (106
registers, 39.2 KiB), 3 for FP8 (168, 41.0 KiB) and 2 for INT4 (240, 29.2 KiB), the limits
computed here.

Rules (NVIDIA's occupancy calculation for compute capability 9.0): registers are allocated per
warp in units of 256 (a thread's count rounded up to a multiple of 8), 64K per SM; each block
reserves 1 KiB of shared memory on top of its own, from 228 KiB per SM; at most 64 warps and 32
blocks per SM.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SmLimits", "HOPPER", "resident_programs", "cubin_resources"]


@dataclass(frozen=True, kw_only=True)
class SmLimits:
    """Per-SM resources of one GPU generation."""

    registers: int  # 32-bit registers per SM
    shared_bytes: int  # shared memory a kernel may use per SM
    reserved_shared_per_block: int  # bytes the runtime keeps per resident block
    warps: int  # resident warps per SM
    blocks: int  # resident blocks per SM
    warp_size: int = 32
    register_unit: int = 256  # registers are allocated per warp in multiples of this


HOPPER = SmLimits(registers=65536, shared_bytes=233472, reserved_shared_per_block=1024, warps=64, blocks=32)


def resident_programs(*, registers_per_thread: int, shared_bytes: int, num_warps: int,
                      limits: SmLimits = HOPPER) -> int:
    """Programs of one kernel resident per SM (at least 1).

    Parameters
    ----------
    registers_per_thread : int
        From the compiled kernel (``n_regs``).
    shared_bytes : int
        Shared memory per program (the compiled kernel's ``metadata.shared``), bytes.
    num_warps : int
        Warps per program.
    """
    per_warp = -(-registers_per_thread * limits.warp_size // limits.register_unit) * limits.register_unit
    by_registers = limits.registers // max(1, per_warp * num_warps)
    by_shared = limits.shared_bytes // (shared_bytes + limits.reserved_shared_per_block)
    by_warps = limits.warps // num_warps
    return max(1, min(by_registers, by_shared, by_warps, limits.blocks))


def cubin_resources(cubin: bytes) -> tuple[int, int]:
    """``(registers per thread, spill bytes per thread)`` of a compiled kernel, read with the
    ``cuobjdump`` that Triton bundles (no GPU needed); spills are its stack frame plus local
    memory, 0 when ptxas spilled nothing."""
    import re
    import subprocess
    import tempfile
    from pathlib import Path

    import triton.backends.nvidia as nvidia_backend

    cuobjdump = Path(nvidia_backend.__file__).parent / "bin" / "cuobjdump"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        usage = subprocess.run([str(cuobjdump), "--dump-resource-usage", str(path)],
                               capture_output=True, text=True, check=True, timeout=60).stdout
    fields = dict(re.findall(r"(REG|STACK|LOCAL):(\d+)", usage))
    return int(fields["REG"]), int(fields["STACK"]) + int(fields["LOCAL"])


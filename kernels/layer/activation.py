"""SiLU-and-mul in one kernel, as vLLM's ``silu_and_mul`` runs a SwiGLU MLP's activation.

Algorithm
---------
``x`` [rows, 2·width] holds the gate then the up projection of each row::

    out[r, j] = silu(x[r, j]) · x[r, width + j],   silu(g) = g · sigmoid(g)

in float32, stored in ``x``'s dtype. One read of ``x`` and one write of ``out`` where the PyTorch
expression launches two kernels and writes the SiLU in between.
"""

from __future__ import annotations

from kernels.runtime import ensure_triton_backend

ensure_triton_backend()  # before triton is imported: the interpreter is chosen at decoration

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

__all__ = ["silu_and_mul"]

BLOCK = 1024  # columns a program handles: the widths run 1K–30K, so rows × ⌈width ÷ 1024⌉ programs


@triton.jit
def _silu_and_mul_kernel(
    x_ptr, out_ptr,  # [rows, 2 · width], [rows, width]
    width, stride_x, stride_out,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < width
    gate = tl.load(x_ptr + row * stride_x + offs, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * stride_x + width + offs, mask=mask, other=0.0).to(tl.float32)
    act = gate / (1.0 + tl.exp(-gate))
    tl.store(out_ptr + row * stride_out + offs, (act * up).to(out_ptr.dtype.element_ty), mask=mask)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """``silu(gate) · up`` of ``x`` [rows, 2·width] (gate columns first): [rows, width], ``x``'s dtype."""
    if x.dim() != 2 or x.stride(-1) != 1 or x.shape[1] % 2:
        raise ValueError(f"x: a [rows, 2·width] tensor, last dimension contiguous, got {tuple(x.shape)}")
    if x.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"x: a floating dtype, got {x.dtype}")
    rows, width = x.shape[0], x.shape[1] // 2
    out = torch.empty((rows, width), device=x.device, dtype=x.dtype)
    if rows and width:
        _silu_and_mul_kernel[(rows, triton.cdiv(width, BLOCK))](x, out, width, x.stride(0), out.stride(0),
                                                                BLOCK=BLOCK)
    return out

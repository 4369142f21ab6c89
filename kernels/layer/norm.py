"""Residual add and RMSNorm in one kernel, as vLLM's ``fused_add_rms_norm`` runs them.

Algorithm
---------
One program per row of ``x`` [rows, hidden]::

    stream = x + residual                      (or x alone for the first layer)
    out    = stream · rsqrt(mean(stream²) + eps) · weight

in float32, with ``stream`` stored back in the activations' dtype: it is the residual stream the
next layer adds to, kept in 16 bits as the engines keep it. One read of ``x`` and ``residual``,
one write of each output, where the PyTorch chain launches six to eight kernels.

Limits: ``hidden`` ≤ 65,536 (one tile a row).
"""

from __future__ import annotations

from kernels.runtime import ensure_triton_backend

ensure_triton_backend()  # before triton is imported: the interpreter is chosen at decoration

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

__all__ = ["add_rms_norm", "MAX_HIDDEN"]

MAX_HIDDEN = 1 << 16


@triton.jit
def _add_rms_norm_kernel(
    x_ptr, res_ptr, w_ptr,  # [rows, hidden], [rows, hidden] (unused without HAS_RESIDUAL), [hidden]
    out_ptr, stream_ptr,  # [rows, hidden] each: the normalised rows, the residual stream
    hidden, eps,
    stride_x, stride_res, stride_out, stride_stream,
    HAS_RESIDUAL: tl.constexpr,
    BLOCK: tl.constexpr,  # next power of two ≥ hidden
):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < hidden
    x = tl.load(x_ptr + row * stride_x + offs, mask=mask, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        x += tl.load(res_ptr + row * stride_res + offs, mask=mask, other=0.0).to(tl.float32)
        # Rounded as stored, so the norm reads what the next layer will add to.
        x = x.to(stream_ptr.dtype.element_ty).to(tl.float32)
        tl.store(stream_ptr + row * stride_stream + offs, x.to(stream_ptr.dtype.element_ty), mask=mask)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / hidden + eps)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_out + offs, (x * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)


def add_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float,
                 residual: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm of ``x + residual`` (of ``x`` when ``residual`` is None).

    Parameters
    ----------
    x, residual : [rows, hidden], one 16-bit dtype, last dimension contiguous
    weight : [hidden]
    eps : the norm's epsilon (> 0)

    Returns
    -------
    (normed, stream) : [rows, hidden] each, ``x``'s dtype; ``stream`` is ``x + residual`` (``x``
    itself when there is no residual), the residual stream the next add starts from.
    """
    _check(x, weight, eps, residual)
    rows, hidden = x.shape
    out = torch.empty_like(x)
    stream = x if residual is None else torch.empty_like(x)
    if rows:
        res = x if residual is None else residual
        _add_rms_norm_kernel[(rows,)](
            x, res, weight, out, stream, hidden, float(eps),
            x.stride(0), res.stride(0), out.stride(0), stream.stride(0),
            HAS_RESIDUAL=residual is not None, BLOCK=triton.next_power_of_2(hidden))
    return out, stream


def _check(x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None) -> None:
    if x.dim() != 2 or x.stride(-1) != 1:
        raise ValueError(f"x: a [rows, hidden] tensor with a contiguous last dimension, got {tuple(x.shape)}")
    if x.dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"x: bfloat16 or float16, got {x.dtype}")
    if not 1 <= x.shape[1] <= MAX_HIDDEN:
        raise ValueError(f"x: hidden size {x.shape[1]} is outside 1..{MAX_HIDDEN}")
    if weight.shape != (x.shape[1],):
        raise ValueError(f"weight: shape {tuple(weight.shape)}, expected ({x.shape[1]},)")
    if not eps > 0:
        raise ValueError(f"eps: {eps!r} must be > 0")
    if residual is not None and (residual.shape != x.shape or residual.dtype != x.dtype or residual.stride(-1) != 1):
        raise ValueError(f"residual: {tuple(residual.shape)} {residual.dtype}, expected {tuple(x.shape)} {x.dtype}, "
                         "last dimension contiguous")

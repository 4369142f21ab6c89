"""The fused residual-add RMSNorm and SiLU-and-mul against their PyTorch definitions (float32 from
the same 16-bit inputs), on the interpreter in CI and on the GPU where there is one."""

from __future__ import annotations

import pytest
import torch

from kernels.layer.activation import silu_and_mul
from kernels.layer.norm import add_rms_norm

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# One bf16 rounding of a unit-scale output is 2⁻⁸ relative; the kernel rounds once, the
# float32 definition never, so 2 roundings of |x| ≤ ~4 bound the difference.
ATOL = 0.04


def _rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


@pytest.mark.parametrize("rows, hidden", [(1, 64), (3, 97), (5, 2880)])
def test_add_rms_norm_equals_its_definition(rows, hidden):
    gen = torch.Generator().manual_seed(rows)
    x, res = (torch.randn(rows, hidden, generator=gen).to(DEVICE, torch.bfloat16) for _ in range(2))
    w = (1 + 0.1 * torch.randn(hidden, generator=gen)).to(DEVICE, torch.bfloat16)
    out, stream = add_rms_norm(x, w, 1e-5, res)
    want_stream = (x.float() + res.float())
    assert (stream.float() - want_stream).abs().max().item() < ATOL
    assert (out.float() - _rms(want_stream, w.float(), 1e-5)).abs().max().item() < ATOL
    # Without a residual the stream is x itself and the norm is of x.
    out0, stream0 = add_rms_norm(x, w, 1e-5)
    assert stream0 is x
    assert (out0.float() - _rms(x.float(), w.float(), 1e-5)).abs().max().item() < ATOL


def test_add_rms_norm_reads_strided_rows():
    x = torch.randn(4, 128).to(DEVICE, torch.bfloat16)[:, :64]  # row stride 128, 64 columns used
    w = torch.ones(64, device=DEVICE, dtype=torch.bfloat16)
    out, _ = add_rms_norm(x, w, 1e-6)
    assert (out.float() - _rms(x.float(), 1.0, 1e-6)).abs().max().item() < ATOL


def test_add_rms_norm_refuses_bad_arguments_naming_them():
    x = torch.zeros(2, 8, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="weight"):
        add_rms_norm(x, torch.ones(7, dtype=torch.bfloat16), 1e-6)
    with pytest.raises(ValueError, match="eps"):
        add_rms_norm(x, torch.ones(8, dtype=torch.bfloat16), 0.0)
    with pytest.raises(ValueError, match="residual"):
        add_rms_norm(x, torch.ones(8, dtype=torch.bfloat16), 1e-6, torch.zeros(2, 8, dtype=torch.float16))
    with pytest.raises(ValueError, match="x: bfloat16 or float16"):
        add_rms_norm(x.float(), torch.ones(8), 1e-6)


@pytest.mark.parametrize("rows, width", [(1, 8), (3, 1500)])
def test_silu_and_mul_equals_its_definition(rows, width):
    x = torch.randn(rows, 2 * width, generator=torch.Generator().manual_seed(width)).to(DEVICE, torch.bfloat16)
    gate, up = x.float().chunk(2, dim=-1)
    want = torch.nn.functional.silu(gate) * up
    got = silu_and_mul(x)
    assert got.shape == (rows, width) and got.dtype == torch.bfloat16
    assert (got.float() - want).abs().max().item() < ATOL


def test_silu_and_mul_refuses_an_odd_width():
    with pytest.raises(ValueError, match=r"2·width"):
        silu_and_mul(torch.zeros(2, 7))

"""The direct launcher: the JIT's specialisation rule, the interpreter path, and on a GPU direct
launches that equal JIT launches (aligned and misaligned arguments, inside a CUDA graph)."""

from __future__ import annotations

from kernels.runtime import ensure_triton_backend

ensure_triton_backend()

import pytest  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from kernels.decode.direct_launch import DirectLauncher, _specialisation  # noqa: E402

ON_GPU = torch.cuda.is_available()
DEVICE = "cuda" if ON_GPU else "cpu"


@triton.jit
def _scaled_add(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr, NEGATE: tl.constexpr = False):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    z = tl.load(x_ptr + offs, mask=mask) * alpha + tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, -z if NEGATE else z, mask=mask)


def _args(x, y, out, alpha=2.0):
    return (x, y, out, x.numel(), alpha)


def test_specialisation_follows_what_the_jit_specialises_on():
    """A tensor: dtype and 16-byte alignment; an int: width, == 1, divisible by 16; else the type."""
    base = torch.zeros(8, dtype=torch.float32)
    assert _specialisation(base) == (torch.float32, True)
    assert _specialisation(base[1:]) == (torch.float32, False)  # 4 bytes in
    assert _specialisation(base[4:]) == (torch.float32, True)  # 16 bytes in
    assert [_specialisation(n) for n in (1, 16, 17, 2**31, -2**31)] == [
        (True, True, False), (True, False, True), (True, False, False), (False, False, True), (True, False, True)]
    assert _specialisation(True) == (bool, True) and _specialisation(1) != _specialisation(True)
    assert _specialisation(0.5) is float and _specialisation(1.0) == _specialisation(2.0)


def test_every_call_goes_through_the_jit_under_the_interpreter():
    if ON_GPU:
        pytest.skip("the interpreter path: CPU only")
    launch = DirectLauncher(_scaled_add)
    x, y = torch.arange(40.0), torch.ones(40)
    kwargs = dict(BLOCK=16)
    for _ in range(2):
        out = torch.empty(40)
        launch((3,), _args(x, y, out), kwargs)
        assert torch.equal(out, 2 * x + 1)
    assert launch._compiled == {}


gpu = pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")


@pytest.mark.gpu
@gpu
def test_gpu_direct_launches_equal_jit_launches():
    """The first call compiles and remembers; later calls launch directly and give the JIT's
    output; a misaligned view, another n and another variant dict are separate entries; a
    default compile-time value left out of the dict is passed in its place."""
    launch = DirectLauncher(_scaled_add)
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(1001, device="cuda", generator=g)
    y = torch.randn(1001, device="cuda", generator=g)
    kwargs, negate = dict(BLOCK=128, num_warps=4), dict(BLOCK=128, NEGATE=True, num_warps=4)
    for xs, ys, n in ((x, y, 1000), (x[1:], y[1:], 1000), (x, y, 16)):
        for kw, sign in ((kwargs, 1.0), (negate, -1.0)):
            for _ in range(3):
                out = torch.full((n,), float("nan"), device="cuda")
                launch((triton.cdiv(n, 128),), (xs, ys, out, n, 0.5), kw)
                torch.testing.assert_close(out, sign * (0.5 * xs[:n] + ys[:n]), rtol=0, atol=0)
    assert len(launch._compiled) == 6  # (aligned, misaligned, n=16) x two variants


@pytest.mark.gpu
@gpu
def test_gpu_direct_launch_inside_a_cuda_graph():
    launch = DirectLauncher(_scaled_add)
    x = torch.arange(300.0, device="cuda")
    y = torch.ones(300, device="cuda")
    out = torch.zeros(300, device="cuda")
    kwargs = dict(BLOCK=64)
    launch((5,), _args(x, y, out), kwargs)  # compiled and remembered outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch((5,), _args(x, y, out, alpha=3.0), kwargs)
    out.zero_()
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, 3 * x + 1)

"""Where the Triton kernels run: the GPU when one is present, the Triton interpreter otherwise.

Triton picks between compiling a ``@triton.jit`` function and interpreting it on CPU tensors
when the function is *decorated*, from the ``TRITON_INTERPRET`` environment variable. So the
choice has to be made before the first kernel module of this package is imported:
``ensure_triton_backend()`` sets ``TRITON_INTERPRET=1`` when no CUDA device is visible and
leaves an explicit setting alone. The kernel modules call it before ``import triton``; the app
calls it (or ``gpu_available()``) to decide which page to show.

It is also the one home of the capability checks the kernels dispatch on: whether Triton's
Gluon imports, whether the GPU is a Hopper (sm_90) one, whether it has programmatic dependent
launch. Nothing here compiles, allocates or benchmarks.
"""

from __future__ import annotations

import os
from functools import lru_cache

__all__ = ["gpu_available", "ensure_triton_backend", "interpreter_active", "triton_installed", "gluon_importable",
           "hopper_gluon_available", "pdl_supported"]

_INTERPRET_ENV = "TRITON_INTERPRET"


def gpu_available() -> bool:
    """True when PyTorch sees a CUDA device and the Triton interpreter is not forced on."""
    import torch

    return bool(torch.cuda.is_available()) and not interpreter_active()


def triton_installed() -> bool:
    """True when the ``triton`` package can be imported (requirements.txt installs it on Linux
    only: it has no wheels for macOS or Windows)."""
    import importlib.util

    try:
        return importlib.util.find_spec("triton") is not None
    except (ImportError, ValueError):
        return False


def interpreter_active() -> bool:
    """True when ``TRITON_INTERPRET`` asks for the interpreter (Triton's own truthy spellings)."""
    return os.environ.get(_INTERPRET_ENV, "0").strip().lower() in ("1", "true", "on", "yes")


def ensure_triton_backend() -> bool:
    """Make Triton interpret kernels on CPU tensors when there is no GPU.

    Sets ``TRITON_INTERPRET=1`` when the variable is unset and PyTorch sees no CUDA device.
    An explicit value is kept (so a GPU machine can still be told to interpret).

    Returns
    -------
    bool
        True when kernels will be compiled for the GPU, False when they will be interpreted.
    """
    if _INTERPRET_ENV not in os.environ:
        import torch

        if not torch.cuda.is_available():
            os.environ[_INTERPRET_ENV] = "1"
    return gpu_available()


@lru_cache(maxsize=1)
def gluon_importable() -> bool:
    """True when Triton's Gluon and the Hopper and Ampere parts the kernels use import (Gluon is
    experimental: absent on old Tritons, and its API moves between releases), once
    :func:`ensure_triton_backend` has chosen the backend (this calls it first)."""
    ensure_triton_backend()
    try:
        from triton.experimental import gluon  # noqa: F401
        from triton.experimental.gluon.language.nvidia.ampere import async_copy, mma_v2  # noqa: F401
        from triton.experimental.gluon.language.nvidia.hopper import tma, warpgroup_mma  # noqa: F401
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor  # noqa: F401
    except ImportError:  # pragma: no cover - depends on the installed Triton
        return False
    return True


def hopper_gluon_available() -> bool:
    """True where the Gluon kernels run: Gluon imports, a CUDA device of capability 9.x is
    present, and Triton is not interpreting (Gluon kernels have no CPU path)."""
    if interpreter_active() or not gluon_importable():
        return False
    import torch

    return bool(torch.cuda.is_available()) and torch.cuda.get_device_capability()[0] == 9


@lru_cache(maxsize=8)
def pdl_supported(device) -> bool:
    """Whether ``device`` (a CUDA ``torch.device``) can start a kernel before the previous one
    ends (programmatic dependent launch: sm_90 and later)."""
    import torch

    return torch.cuda.get_device_capability(device)[0] >= 9

"""Where the Triton kernels run: the GPU when one is present, the Triton interpreter otherwise.

Triton picks between compiling a ``@triton.jit`` function and interpreting it on CPU tensors
when the function is *decorated*, from the ``TRITON_INTERPRET`` environment variable. So the
choice has to be made before the first kernel module of this package is imported:
``ensure_triton_backend()`` sets ``TRITON_INTERPRET=1`` when no CUDA device is visible and
leaves an explicit setting alone. The kernel modules call it before ``import triton``; the app
calls it (or ``gpu_available()``) to decide which page to show.

Nothing here compiles, allocates or benchmarks.
"""

from __future__ import annotations

import os

__all__ = ["gpu_available", "ensure_triton_backend", "interpreter_active", "triton_installed"]

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

"""Launch an already-compiled Triton kernel without the JIT's per-call argument binding.

``kernel[grid](*args, **constexprs)`` binds every argument, recomputes the specialisation key
(alignment of each pointer, divisibility of each integer) and looks the compiled kernel up on
every call. On the H200 host that path, twice per split decode call, cost 30-60 us of Python
per call (benchmarks/NOTES-decode.md), as much as the GPU work of a batch-1 decode step. Here
the first call of a *launch key* goes through the JIT (which compiles and launches it), and
later calls with the same key hand the arguments straight to the compiled kernel's launcher.

The key is the caller's: it must determine everything Triton specialises on. The decode
wrappers use the call signature (dtypes, shapes, strides, device), the launch configuration,
the split count and the 16-byte alignment of every pointer argument (:func:`aligned`);
integer arguments are strides, shapes or the split count, all inside that key.

When a launch hook is installed (a profiler) or under the interpreter, every call takes the
JIT path, so hooks still see each launch.
"""

from __future__ import annotations

import torch

__all__ = ["launch", "aligned", "clear"]

_COMPILED: dict[tuple, tuple] = {}  # launch key -> (compiled kernel, trailing constexpr values)
_MAX_ENTRIES = 512


def aligned(*tensors: torch.Tensor) -> tuple[bool, ...]:
    """Whether each tensor's data pointer is 16-byte aligned (Triton specialises on it)."""
    return tuple(t.data_ptr() % 16 == 0 for t in tensors)


def clear() -> None:
    """Forget every compiled entry (the next call of each key goes through the JIT again)."""
    _COMPILED.clear()


def _trailing(kernel, n_positional: int, constexprs: dict) -> tuple:
    """Values of the kernel parameters after the positional ones, in declaration order."""
    values = []
    for param in kernel.params[n_positional:]:
        if param.name in constexprs:
            values.append(constexprs[param.name])
        else:
            values.append(param.default)
    return tuple(values)


def launch(kernel, grid: tuple[int, int, int], key: tuple | None, args: tuple, constexprs: dict,
           *, direct: bool = True) -> None:
    """Launch ``kernel[grid](*args, **constexprs)``; through the compiled launcher once ``key``
    has been compiled (``key=None`` or ``direct=False``: always through the JIT).

    ``constexprs`` holds the compile-time parameters and launch options (``num_warps``,
    ``num_stages``, ``launch_pdl`` ...); ``args`` the runtime ones, in declaration order.
    """
    from triton import knobs
    from triton.runtime import driver

    hooked = knobs.runtime.launch_enter_hook is not None or knobs.runtime.launch_exit_hook is not None
    entry = _COMPILED.get(key) if direct and key is not None and not hooked else None
    if entry is None:
        compiled = kernel[grid](*args, **constexprs)
        if direct and key is not None and not hooked and compiled is not None and hasattr(compiled, "run"):
            if len(_COMPILED) >= _MAX_ENTRIES:
                _COMPILED.clear()
            _COMPILED[key] = (compiled, _trailing(kernel, len(args), constexprs))
        return
    compiled, trailing = entry
    stream = driver.active.get_current_stream(driver.active.get_current_device())
    compiled.run(grid[0], grid[1], grid[2], stream, compiled.function, compiled.packed_metadata, None, None, None,
                 *args, *trailing)

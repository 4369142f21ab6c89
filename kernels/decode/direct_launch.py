"""Launching compiled Triton and Gluon kernels without the JIT's per-call binding.

An eager decode call at batch 1 is bound by the host, not the GPU. On the H200 host the JIT
launch of the bf16 split kernel cost 51.5 us with its arguments already prepared, and a direct
launch of the same compiled kernel 19.1 us; the rdq kernel's 60.7 and 18.3 (host time on the
H200's machine). On every call the JIT re-derives what the call's shapes already
fix: each argument's specialisation, the cache key, the compiled kernel and, for Gluon, the
layout constexprs' keys.

:class:`DirectLauncher` does that once per *variant* (one dict of compile-time values and
options, which the caller keeps and passes again: its identity is the key) and *argument
specialisation*, then launches the compiled kernel itself. The specialisation is recomputed on every call, as the JIT does it: a tensor's
dtype and whether its address is 16-byte aligned, an integer's width and whether it is 1 or a
multiple of 16. So a call whose arguments would compile to another kernel gets that kernel. Under
the Triton interpreter every call goes through the JIT.
"""

from __future__ import annotations

from typing import Any

import torch

from kernels.runtime import interpreter_active

__all__ = ["DirectLauncher", "MAX_VARIANTS"]

MAX_VARIANTS = 256  # compiled kernels kept per launcher (cleared when full)
_INT32 = 2**31


def _specialisation(arg: Any) -> Any:
    """What the JIT specialises a runtime argument on (triton 3.x): a tensor's dtype and 16-byte
    alignment; an int's 32/64-bit width, equality to 1 and divisibility by 16; a float's type."""
    if isinstance(arg, torch.Tensor):
        return arg.dtype, arg.data_ptr() % 16 == 0
    if isinstance(arg, bool):
        return bool, arg
    if isinstance(arg, int):
        return -_INT32 <= arg < _INT32, arg == 1, arg % 16 == 0
    return type(arg)


class DirectLauncher:
    """``launcher(grid, args, kwargs)`` runs ``fn[grid](*args, **kwargs)``.

    ``args`` are the kernel's leading runtime arguments, in order; ``kwargs`` its compile-time
    values and launch options (``num_warps``, ``num_stages``, ``maxnreg``, ``launch_pdl``), as
    one dict object per variant that the caller reuses (an ``lru_cache``'d dict): the cache is
    keyed on its identity, and each entry holds the dict, so the identity cannot be reused by
    another dict while the entry lives. A new dict with equal contents only costs a JIT launch
    and an entry. The first call of a variant and specialisation goes through the JIT (compiling
    if needed) and keeps the compiled kernel; later ones launch it directly on the current
    stream (inside a CUDA graph capture too).
    """

    def __init__(self, fn) -> None:
        self.fn = fn
        self._compiled: dict[tuple, tuple] = {}

    def __call__(self, grid: tuple, args: tuple, kwargs: dict) -> None:
        if interpreter_active():
            self.fn[grid](*args, **kwargs)
            return
        key = (id(kwargs), tuple(map(_specialisation, args)))
        entry = self._compiled.get(key)
        if entry is None or entry[0] is not kwargs:
            self.fn[grid](*args, **kwargs)
            self._remember(key, grid, args, kwargs)
            return
        _, compiled, tail = entry
        compiled[grid if len(grid) == 3 else (*grid, 1, 1)[:3]](*args, *tail)  # it indexes three dims

    def _remember(self, key: tuple, grid: tuple, args: tuple, kwargs: dict) -> None:
        compiled = self.fn.warmup(*args, grid=grid, **kwargs)  # the JIT's cache: nothing is recompiled
        compiled._init_handles()
        # The launcher takes every parameter in order, compile-time ones included (it skips them).
        tail = tuple(kwargs[name] if name in kwargs else self.fn.params[i].default
                     for i, name in enumerate(self.fn.arg_names) if i >= len(args))
        if len(self._compiled) >= MAX_VARIANTS:
            self._compiled.clear()
        self._compiled[key] = (kwargs, compiled, tail)

"""Which decode kernel a :func:`kernels.decode.api.paged_decode_attention` call runs: the one
home of the dispatch rules and the defaults they were measured with.

Two kernels serve quantised KV (H200 CUDA-graph medians, tokens/s over the Triton bf16 kernel
at the worst shape with batch x context >= 256K):

* the Triton kernels of :mod:`kernels.decode.paged` (FP8: 1.39x) and
  :mod:`kernels.decode.int4` (0.84x) run everywhere, the interpreter included;
* the register-dequant warp-MMA kernel (:mod:`kernels.decode.rdq`, with the query heads as
  the MMA's N: INT4 2.46-2.83x, FP8 1.77-1.96x) on Hopper, at every timed shape the faster. (A
  Gluon ``wgmma`` INT4 kernel, 1.01x, was measured and removed.)

A 16-bit cache always runs the Triton kernel (a Gluon ``wgmma`` kernel for it ran at 0.99-1.02x
and was removed).

``backend="auto"`` takes the rdq kernel where it runs and was timed (head dim 128; 64 is checked
for correctness on the GPU but untimed), the Triton kernel elsewhere. Other backend names force
a kernel; the forced kernel refuses inputs it cannot take with a ``ValueError``.
"""

from __future__ import annotations

from functools import lru_cache

import torch

from kernels.decode.config import FP8_DTYPE
from kernels.decode.checks import on_16_byte_grid
from kernels.cache.int4 import Int4Pool
from kernels.runtime import hopper_gluon_available
from kernels.decode.rdq_config import MAX_RDQ_GROUP, RdqConfig

__all__ = ["BACKENDS", "RDQ_TIMED_HEAD_DIMS", "choose_kernel", "rdq_preferred", "default_rdq_config"]

BACKENDS = ("auto", "triton", "rdq")
RDQ_TIMED_HEAD_DIMS = (128,)


def choose_kernel(q: torch.Tensor, k, v, *, backend: str, config: object, dequant: int | None) -> str:
    """The kernel a :func:`kernels.decode.api.paged_decode_attention` call runs, ``"triton"`` or
    ``"rdq"``: the forced one for ``backend="triton"`` or ``"rdq"``; for ``"auto"`` the one the
    call's options belong to (an :class:`RdqConfig`: rdq; a ``DecodeConfig`` or ``dequant=0``:
    Triton), else rdq where :func:`rdq_preferred` holds. Options of the other kernel than the
    forced one are refused with a ``ValueError``."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    triton_options = (config is not None and not isinstance(config, RdqConfig)) or dequant not in (None, 1)
    if isinstance(config, RdqConfig) and backend == "triton":
        raise ValueError("an RdqConfig is the rdq kernel's; backend='triton' takes a DecodeConfig")
    if triton_options and backend == "rdq":
        raise ValueError("a DecodeConfig and dequant are the Triton kernels' options; backend='rdq' takes an RdqConfig")
    if backend != "auto":
        return backend
    if isinstance(config, RdqConfig):
        return "rdq"
    return "rdq" if not triton_options and rdq_preferred(q, k, v) else "triton"


def rdq_preferred(q: torch.Tensor, k: torch.Tensor | Int4Pool, v: torch.Tensor | Int4Pool) -> bool:
    """Whether ``backend="auto"`` takes the rdq kernel for these (shape-checked) inputs: an FP8 or
    INT4 cache on the 16-byte grid the kernel copies by (:func:`kernels.decode.checks.on_16_byte_grid`;
    the Triton kernel reads any view), a timed head dim, at most 16 query heads per KV head, and a
    Hopper GPU with Gluon."""
    if isinstance(k, Int4Pool) and isinstance(v, Int4Pool):
        pools = (k.data, v.data)
    elif isinstance(k, torch.Tensor) and k.dtype == FP8_DTYPE:
        pools = (k, v)
    else:
        return False
    n_kv_heads = pools[0].shape[1]
    if q.shape[2] not in RDQ_TIMED_HEAD_DIMS or q.shape[1] // n_kv_heads > MAX_RDQ_GROUP:
        return False
    if not on_16_byte_grid(*pools):
        return False
    return hopper_gluon_available()


@lru_cache(maxsize=None)  # on every call's path: one frozen config per format
def default_rdq_config(fmt: str):
    """The rdq configuration ``backend="auto"`` uses for ``fmt`` ("int4" or "fp8"): the swapped
    design (query heads as the MMA's N), timed fastest at the worst large shape on the H200
    (ratios are tokens/s over the bf16 Triton kernel in the same call). Both split for
    at most one wave of their residency.

    * FP8: 32-token tiles through a 3-stage copy ring, 4 programs per SM (1.73x; 16x6st 1.72x).
    * INT4: 16-token tiles with no ring: each next tile's code and scale words are loaded into
      registers, at a 128-register cap that keeps 16 programs per SM (2.83-2.84x, 2.80-2.82x in
      full harness runs, against 2.57x for the best ring design, 16 tokens x 3 stages with the
      scale words in the ring). Caps of 96-120 registers spill (1.8-2.0x); bf16 partials gain
      nothing."""
    if fmt not in ("int4", "fp8"):
        raise ValueError(f"fmt must be 'int4' or 'fp8', got {fmt!r}")
    return RdqConfig(block_n=16, swap_ab=True, reg_prefetch=True, maxnreg=128) if fmt == "int4" else \
        RdqConfig(block_n=32, num_stages=3, swap_ab=True, per_sm=4)

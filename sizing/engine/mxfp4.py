"""MXFP4 mixture-of-experts weights as vLLM holds them once loaded: the checkpoint's experts at
the padded shapes of the MoE kernel vLLM picks for the GPU.

vLLM allocates each MoE layer's experts at padded sizes before the checkpoint is copied in, and
"Model loading took X GiB" counts what is allocated after ``process_weights_after_loading``
(``Mxfp4MoEMethod.create_weights`` in ``vllm/model_executor/layers/quantization/mxfp4.py``; since
the MoE refactor ``mxfp4_round_up_hidden_size_and_intermediate_size`` in
``vllm/model_executor/layers/fused_moe/oracle/mxfp4.py``; read at vLLM commits 007d500 and 001eda3).
Per backend, the intermediate size is that of one tensor-parallel rank:

=====================  ======================  =================  ============
backend                intermediate            hidden             expert bias
=====================  ======================  =================  ============
Marlin                 round_up(·, 128)        round_up(·, 256)   bf16
FlashInfer TRT-LLM     round_up(·, 256)        round_up(·, 256)   fp32
FlashInfer CUTLASS     round_up(·, 128)        round_up(·, 128)   bf16
ROCm (AITER / Triton)  round_up(·, 256)        round_up(·, 256)   fp32
Triton (CUDA)          round_up(·, 64)         as is              fp32
=====================  ======================  =================  ============

A layer of ``E`` experts holds ``w13`` (gate and up: ``2I × H/2`` bytes of FP4 pairs, ``2I ×
H/32`` E8M0 scales, ``2I`` biases) and ``w2`` (``H × I/2``, ``H × I/32``, ``H`` biases). Marlin
repacks the same bits and keeps the scales one byte each (``prepare_moe_mxfp4_layer_for_marlin``,
``vllm/model_executor/layers/quantization/utils/marlin_utils_fp4.py``). Triton on Hopper
swizzles both into triton_kernels' MMA layouts (``_swizzle_mxfp4`` in
``vllm/model_executor/layers/quantization/utils/mxfp4_utils.py``), which pad again:
``HopperMXValueLayout`` the packed values to 64 bytes along the scaled axis and 256 across it,
``HopperMXScaleLayout`` the scale rows to ``2 × num_warps × 2 × 8`` = 256 (8 warps) and its
columns to 2 (triton-lang/triton ``python/triton_kernels/triton_kernels/tensor_details/
layout_details/hopper_value.py`` and ``hopper_scale.py``, commits 000df03 and 14dd7a1).

Which backend vLLM picks (``select_mxfp4_moe_backend``, its priority list): FlashInfer TRT-LLM on
SM 10.x; Triton on SM 9.0 (triton_kernels runs only on 9.0 ≤ capability < 11.0); Marlin on
SM 8.x and 12.x, where neither FlashInfer's MXFP4 kernels nor triton_kernels run; ROCm pads as
above. A vLLM without triton_kernels falls back to Marlin on SM 9.0 too (the cited 0.10.1 H100 log
warns "Weight-only FP4 compression will be used leveraging the Marlin kernel", and a 0.11.2 start-up
of the same model loads the same 65.97 GiB): pass the backend by name there. MXFP4 needs capability 8.0
(``Mxfp4Config.get_min_capability``).

gpt-oss-120b (36 layers of 128 experts, hidden and intermediate 2,880) on Marlin is held at
3,072 × 2,944: 1,847,263,232 B a layer against the checkpoint's 1,694,269,440, +5.13 GiB.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction

from sizing.errors import SizingError
from sizing.models import check_int
from units import cdiv

MXFP4_BLOCK = 32  # values per E8M0 scale
CHECKPOINT_BIAS_BYTES = 2  # gpt-oss stores the expert biases in bf16
HOPPER_NUM_WARPS = 8  # the warps vLLM's _swizzle_mxfp4 lays the scales out for (standard MoE)
AUTO = "auto"


class Mxfp4Backend(StrEnum):
    """vLLM's MXFP4 MoE kernels, by the padding and layout they hold the experts in."""

    MARLIN = "marlin"
    TRITON = "triton"
    FLASHINFER_TRTLLM = "flashinfer-trtllm"
    FLASHINFER_CUTLASS = "flashinfer-cutlass"
    ROCM = "rocm"


MXFP4_BACKEND_CHOICES: tuple[str, ...] = (AUTO, *Mxfp4Backend)

# Compute capability of the catalogue's NVIDIA GPUs (NVIDIA's "CUDA GPUs" table,
# https://developer.nvidia.com/cuda-gpus), and its AMD ones, which vLLM runs through ROCm.
COMPUTE_CAPABILITY: dict[str, tuple[int, int]] = {
    "h100-sxm": (9, 0), "h100-pcie": (9, 0), "h100-nvl": (9, 0), "h200": (9, 0), "h20": (9, 0),
    "gh200-96gb": (9, 0), "gh200-144gb": (9, 0),
    "a100-40gb": (8, 0), "a100-80gb": (8, 0),
    "a10": (8, 6), "a10g": (8, 6), "rtx-a5000": (8, 6), "rtx-a6000": (8, 6), "rtx-3090": (8, 6),
    "jetson-agx-orin-64gb": (8, 7),
    "l4": (8, 9), "l40": (8, 9), "l40s": (8, 9), "rtx-4090": (8, 9),
    "b200": (10, 0),
    "rtx-5090": (12, 0),
}
ROCM_GPUS = frozenset({"mi300x", "mi325x"})
MIN_CAPABILITY = (8, 0)


def default_backend(gpu_id: str) -> Mxfp4Backend | None:
    """The backend current vLLM picks on catalogue GPU ``gpu_id`` (module notes); None for a GPU
    whose capability the catalogue does not know (a custom one)."""
    if gpu_id in ROCM_GPUS:
        return Mxfp4Backend.ROCM
    capability = COMPUTE_CAPABILITY.get(gpu_id)
    if capability is None:
        return None
    if capability < MIN_CAPABILITY:
        raise SizingError("weight_dtype", f"vLLM runs MXFP4 on compute capability 8.0 and newer; {gpu_id} is "
                                          f"{capability[0]}.{capability[1]}")
    if capability[0] == 10:
        return Mxfp4Backend.FLASHINFER_TRTLLM
    if capability == (9, 0):
        return Mxfp4Backend.TRITON
    return Mxfp4Backend.MARLIN


def check_backend_name(name: str) -> str:
    """``name`` lower-cased when it is one of :data:`MXFP4_BACKEND_CHOICES`; else the error naming the field."""
    if not isinstance(name, str) or name.lower() not in MXFP4_BACKEND_CHOICES:
        raise SizingError("mxfp4_backend", f"expected one of {', '.join(MXFP4_BACKEND_CHOICES)}; got {name!r:.40}")
    return name.lower()


def resolve_backend(name: str, gpu_id: str) -> Mxfp4Backend | None:
    """``name`` (one of :data:`MXFP4_BACKEND_CHOICES`), ``auto`` being :func:`default_backend`."""
    name = check_backend_name(name)
    return default_backend(gpu_id) if name == AUTO else Mxfp4Backend(name)


def _round_up(value: int, step: int) -> int:
    return cdiv(value, step) * step


def padded_sizes(backend: Mxfp4Backend, hidden: int, intermediate: int) -> tuple[int, int]:
    """``(hidden, intermediate)`` as ``backend`` allocates them (the table of the module notes);
    ``intermediate`` is one tensor-parallel rank's."""
    if backend is Mxfp4Backend.MARLIN:
        return _round_up(hidden, 256), _round_up(intermediate, 128)
    if backend in (Mxfp4Backend.FLASHINFER_TRTLLM, Mxfp4Backend.ROCM):
        return _round_up(hidden, 256), _round_up(intermediate, 256)
    if backend is Mxfp4Backend.FLASHINFER_CUTLASS:
        return _round_up(hidden, 128), _round_up(intermediate, 128)
    return hidden, _round_up(intermediate, 64)


@dataclass(frozen=True, kw_only=True)
class ExpertShape:
    """The MXFP4 experts of a model: ``layers`` MoE layers of ``experts`` experts, each a
    ``hidden`` → ``intermediate`` gated MLP (whole sizes, before tensor parallelism)."""

    layers: int
    experts: int
    hidden: int
    intermediate: int

    def __post_init__(self) -> None:
        check_int("layers", self.layers, high=1 << 12)
        check_int("num_experts", self.experts, high=1 << 16)
        check_int("hidden", self.hidden, high=1 << 20)
        check_int("moe_intermediate", self.intermediate, high=1 << 20)

    def checkpoint_bytes(self) -> int:
        """The experts' bytes in the checkpoint (FP4 pairs, E8M0 scales, bf16 biases), all ranks."""
        return self.layers * self.experts * _layer_bytes(self.hidden, self.intermediate, CHECKPOINT_BIAS_BYTES)

    def loaded_bytes_per_gpu(self, backend: Mxfp4Backend, tp: int) -> int:
        """The experts' bytes on one GPU at tensor parallelism ``tp`` once ``backend`` has them."""
        check_int("tp", tp, high=4096)
        hidden, inter = padded_sizes(backend, self.hidden, cdiv(self.intermediate, tp))
        if backend is Mxfp4Backend.TRITON:
            per_expert = _hopper_swizzled_bytes(hidden, inter)
        else:
            bias = 4 if backend in (Mxfp4Backend.FLASHINFER_TRTLLM, Mxfp4Backend.ROCM) else 2
            per_expert = _layer_bytes(hidden, inter, bias)
        return self.layers * self.experts * per_expert

    def padding_bytes_per_gpu(self, backend: Mxfp4Backend, tp: int) -> int:
        """What one GPU holds beyond its ``1/tp`` share of the checkpoint's experts (≥ 0)."""
        return max(0, self.loaded_bytes_per_gpu(backend, tp) - cdiv(Fraction(self.checkpoint_bytes(), tp), 1))


def _layer_bytes(hidden: int, inter: int, bias_bytes: int) -> int:
    """One expert in the plain layout: w13 then w2, values, scales and biases."""
    w13 = 2 * inter * (hidden // 2 + cdiv(hidden, MXFP4_BLOCK) + bias_bytes)
    w2 = hidden * (inter // 2 + cdiv(inter, MXFP4_BLOCK) + bias_bytes)
    return w13 + w2


def _hopper_swizzled_bytes(hidden: int, inter: int) -> int:
    """One expert in triton_kernels' Hopper layouts (module notes), biases in fp32: the scaled
    axis (K, FP4 pairs) padded to 64 bytes and the other to 256; scale rows to 256, columns to 2."""
    rows = 2 * HOPPER_NUM_WARPS * 2 * 8

    def matrix(n: int, k: int) -> int:  # an n × k weight scaled along k
        values = _round_up(k // 2, 64) * _round_up(n, 256)
        scales = _round_up(n, rows) * _round_up(cdiv(k, MXFP4_BLOCK), 2)
        return values + scales + n * 4

    return matrix(2 * inter, hidden) + matrix(hidden, inter)


__all__ = ["AUTO", "COMPUTE_CAPABILITY", "MXFP4_BACKEND_CHOICES", "ExpertShape", "Mxfp4Backend", "check_backend_name",
           "default_backend", "padded_sizes", "resolve_backend"]

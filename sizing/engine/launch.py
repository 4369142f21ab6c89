"""Launch commands for a plan: ``vllm serve`` and SGLang's ``launch_server``, with SGLang's own
token-capacity rule.

SGLang (``python/sglang/srt/model_executor/model_runner.py``, ``profile_max_num_token``) sizes
its pool from the free memory left after the weights load, less ``(1 − mem_fraction_static)``
of the total, divided by the bytes one token costs on one rank over all layers::

    max_total_num_tokens = (free_after_weights − total × (1 − mem_fraction_static)) // cell_size
    cell_size = kv_heads/TP × head_dim × layers × 2 × dtype bytes   (MLA: (rank + rope) × layers × bytes)

With ``free_after_weights ≈ total − weights`` this is ``(total × fraction − weights) // cell``:
activations, CUDA graphs and NCCL must fit in the ``1 − fraction`` left over, so the fraction
is chosen to leave them that room.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass
from fractions import Fraction

from sizing.models import ModelShape

_VLLM_KV = {"bf16": "auto", "fp16": "auto", "fp32": "auto", "fp8": "fp8"}
_SGLANG_KV = {"bf16": "auto", "fp16": "auto", "fp32": "auto", "fp8": "fp8_e4m3"}


@dataclass(frozen=True, kw_only=True)
class LaunchPlan:
    """What both commands need: the model's repository and the engine settings of the plan.

    ``quantization`` / ``dtype``: the load-time conversion the weights need (``fp8``;
    ``float16``), None for the checkpoint as it is stored.
    """

    model_repo: str
    tp: int
    kv_dtype: str
    max_model_len: int
    gpu_memory_utilization: float
    max_num_seqs: int
    block_size: int | None  # None: the engine's own (a hybrid's attention block, which vLLM derives)
    max_num_batched_tokens: int
    pp: int = 1
    quantization: str | None = None
    dtype: str | None = None


def _load_flags(plan: LaunchPlan) -> list[str]:
    flags = []
    if plan.quantization is not None:
        flags += ["--quantization", plan.quantization]
    if plan.dtype is not None:
        flags += ["--dtype", plan.dtype]
    return flags


def vllm_command(plan: LaunchPlan) -> str:
    """``vllm serve MODEL --tensor-parallel-size … --block-size …`` (shell-quoted; PP and the load
    conversion only when the plan has them)."""
    args = ["vllm", "serve", plan.model_repo,
            "--tensor-parallel-size", str(plan.tp),
            *(["--pipeline-parallel-size", str(plan.pp)] if plan.pp > 1 else []),
            *_load_flags(plan),
            "--kv-cache-dtype", _VLLM_KV.get(plan.kv_dtype, plan.kv_dtype),
            "--max-model-len", str(plan.max_model_len),
            "--gpu-memory-utilization", f"{plan.gpu_memory_utilization:g}",
            "--max-num-seqs", str(plan.max_num_seqs),
            "--max-num-batched-tokens", str(plan.max_num_batched_tokens),
            *(["--block-size", str(plan.block_size)] if plan.block_size is not None else [])]
    return shlex.join(args)


def sglang_mem_fraction(total_bytes: int, weights_bytes: int, non_kv_runtime_bytes: int, kv_bytes: int) -> float:
    """The ``--mem-fraction-static`` that leaves ``non_kv_runtime_bytes`` (activations, graphs,
    NCCL) outside the static pool while the pool holds ``weights + kv_bytes``; rounded down to
    0.01 and kept within [0.05, 0.95]."""
    fraction = Fraction(weights_bytes + kv_bytes, total_bytes)
    ceiling = 1 - Fraction(non_kv_runtime_bytes, total_bytes)
    chosen = min(fraction, ceiling)
    return float(min(max(Fraction(math.floor(chosen * 100), 100), Fraction(5, 100)), Fraction(95, 100)))


def sglang_max_total_tokens(*, total_bytes: int, weights_bytes: int, mem_fraction_static: float,
                            model: ModelShape, tp: int, kv_bytes_per_value: Fraction) -> int:
    """SGLang's ``max_total_num_tokens`` on one rank (see the module notes)."""
    cell = model.n_kv_layers * model.values_per_layer_per_token_per_gpu(tp) * kv_bytes_per_value
    rest = total_bytes * Fraction(repr(mem_fraction_static)) - weights_bytes
    return max(0, math.floor(rest / cell)) if cell else 0


def sglang_command(plan: LaunchPlan, mem_fraction_static: float) -> str:
    """``python -m sglang.launch_server --model-path MODEL --tp … --max-running-requests …``."""
    args = ["python", "-m", "sglang.launch_server", "--model-path", plan.model_repo,
            "--tp", str(plan.tp),
            *(["--pp-size", str(plan.pp)] if plan.pp > 1 else []),
            *_load_flags(plan),
            "--mem-fraction-static", f"{mem_fraction_static:g}",
            "--kv-cache-dtype", _SGLANG_KV.get(plan.kv_dtype, plan.kv_dtype),
            "--context-length", str(plan.max_model_len),
            "--max-running-requests", str(plan.max_num_seqs),
            "--chunked-prefill-size", str(plan.max_num_batched_tokens)]
    return shlex.join(args)

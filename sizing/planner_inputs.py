"""Builds the planner's inputs from the rest of the project: the sizer's model shapes, precisions
and GPU catalogue, and the simulator's snapshot fits on a workload.

Kept apart from ``planner.py`` so that the planner's equations depend on plain numbers only (and
its tests on hand calculations), while this module follows the other libraries' APIs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sizing.gpus import GPU
from sizing.kv import KVCacheSpec, weights_bytes
from sizing.models import ModelShape
from sizing.planner import AllocatorFit, GpuSpec, ModelCost
from sizing.precisions import Precision
from sizing.units import TB

# FLOPs per cached token per query head per layer at decode, MHA/GQA/MQA: q·k (2 × head_dim)
# and p·v (2 × head_dim).
ATTENTION_FLOPS_PER_HEAD_DIM = 4
TFLOPS = 10**12  # FLOP/s in one TFLOP/s


@dataclass(frozen=True, kw_only=True)
class TrafficFits:
    """The simulator's snapshot on one workload, as the planner consumes it."""

    contiguous: AllocatorFit
    paged: AllocatorFit
    mean_tokens: float  # mean final length of a request (prompt + output, clipped), tokens
    mean_prompt_tokens: float
    mean_output_tokens: float
    budget_tokens: int  # KV slots of one GPU's budget
    clipped: int  # requests cut to the maximum context


def model_cost(shape: ModelShape, *, kv_precision: Precision, weight_precision: Precision,
               tp: int, context: int | None = None) -> ModelCost:
    """The planner's view of a model at tensor parallelism ``tp``.

    With sliding-window layers the KV bytes per token depend on the context (windowed layers stop
    growing), so ``context`` turns them into the mean bytes per token of a ``context``-long
    sequence; without windows it does not matter. MoE models read all experts' weights once a
    batch is large (every expert is hit), so weights count in full, while FLOPs use the active
    parameters.
    """
    spec = KVCacheSpec(model=shape, precision=kv_precision, tp=tp)
    per_gpu = spec.bytes_per_token_per_gpu
    whole = spec.bytes_per_token
    layer_share = 1.0
    if context and shape.sliding_window:
        per_gpu = spec.sequence_bytes_per_gpu(context) / context
        whole = spec.sequence_bytes(context) / context
        layer_share = shape.cached_layer_tokens(context) / (shape.layers * context)
    return ModelCost(
        name=shape.name,
        weight_bytes=float(weights_bytes(shape.params, weight_precision)),
        params=float(shape.active_params or shape.params),
        kv_bytes_per_token=float(whole),
        kv_bytes_per_token_per_gpu=float(per_gpu),
        attention_flops_per_context_token_per_gpu=_attention_flops(shape, tp) * layer_share,
        tp=tp,
    )


def gpu_spec(gpu: GPU) -> GpuSpec:
    """The planner's view of a catalogue GPU (memory in bytes, rates per second)."""
    return GpuSpec(name=gpu.name, memory_bytes=float(gpu.memory_bytes),
                   bandwidth_bytes_per_s=gpu.bandwidth_tbs * TB,
                   bf16_flops_per_s=gpu.bf16_tflops * TFLOPS)


def allocator_fits(workload, *, budget_bytes: float, kv_bytes_per_token_per_gpu: float,
                   max_context: int, block_size: int, policy: str = "max") -> TrafficFits:
    """Sequences that fit one GPU's KV budget, contiguous (``policy``) and paged, by the simulator.

    ``workload`` is a ``simulation.workloads.Workload``. The budget is turned into token slots of
    one GPU (every GPU of a replica holds the same tokens, its share of the heads); requests are
    counted at their final length, as the reference page does.
    """
    from simulation.memory import KvBudget
    from simulation.policies import ReservationPolicy, clip_to_context
    from simulation.snapshot import SnapshotConfig, run_snapshot

    prompt, output, clipped = clip_to_context(workload, max_context)
    totals = prompt + output
    policy_label = {
        "max": f"contiguous, reserving {max_context:,} tokens (Orca-Max)",
        "pow2": "contiguous, output rounded up to a power of two (Orca-Pow2)",
        "oracle": "contiguous, exact length known ahead (Orca-Oracle)",
    }[ReservationPolicy(policy).value]
    budget_tokens = int(budget_bytes // kv_bytes_per_token_per_gpu) if budget_bytes > 0 else 0
    if budget_tokens < 1:
        contiguous = AllocatorFit(allocator=f"contiguous-{policy}", label=policy_label,
                                  sequences=0, utilisation=0.0)
        paged = AllocatorFit(allocator="paged", label=f"paged, {block_size}-token blocks",
                             sequences=0, utilisation=0.0)
    else:
        result = run_snapshot(workload, SnapshotConfig(
            budget=KvBudget(tokens=budget_tokens), max_context=max_context,
            block_size=block_size, policy=ReservationPolicy(policy)))
        contiguous = AllocatorFit(allocator=f"contiguous-{policy}", label=policy_label,
                                  sequences=int(result.contiguous.fit),
                                  utilisation=float(result.contiguous.utilisation))
        paged = AllocatorFit(allocator="paged", label=f"paged, {block_size}-token blocks",
                             sequences=int(result.paged.fit),
                             utilisation=float(result.paged.utilisation))
    return TrafficFits(contiguous=contiguous, paged=paged, mean_tokens=float(np.mean(totals)),
                       mean_prompt_tokens=float(np.mean(prompt)),
                       mean_output_tokens=float(np.mean(output)),
                       budget_tokens=budget_tokens, clipped=int(clipped))


def fixed_context_workload(context: int):
    """One request of ``context`` tokens (``context − 1`` prompt, 1 output), reused by the
    snapshot: the CLI's "every sequence holds ``--context`` tokens"."""
    from simulation.workloads import Workload

    if context < 2:
        raise ValueError(f"context must be at least 2 tokens (one prompt, one output), got {context}")
    return Workload(prompt_tokens=np.array([context - 1], dtype=np.int64),
                    output_tokens=np.array([1], dtype=np.int64), source=f"fixed {context}")


def _attention_flops(shape: ModelShape, tp: int) -> float:
    """Decode attention FLOPs per cached token on one GPU, all layers (query heads split by TP)."""
    heads_per_gpu = shape.q_heads / tp
    if shape.kv_lora_rank:
        # MLA with the projections absorbed: scores against the latent and its RoPE part
        # (2 × (rank + rope)), then the weighted sum of latents (2 × rank), per query head.
        per_head = 2 * (shape.kv_lora_rank + shape.qk_rope_head_dim) + 2 * shape.kv_lora_rank
    else:
        per_head = ATTENTION_FLOPS_PER_HEAD_DIM * shape.head_dim
    return shape.layers * heads_per_gpu * per_head

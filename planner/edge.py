"""Edge view: a robot's single shared memory pool and a control loop that must finish on time.

On an embedded module (the Jetson AGX Orin preset) the CPU and GPU share one memory; the
operating system, the perception pipeline and the weights come out of it first, and the KV cache
gets what is left (reference page, "Why it matters for robotics")::

    KV budget (bytes)   = memory − OS share − perception share − weight bytes
    KV tokens           = KV budget ÷ KV bytes per token
    history (seconds)   = (KV tokens − instruction tokens) ÷ (camera tokens per frame × frames/s)
    decode step (s)     = planner.decode_step at batch 1 and that context

and the step is compared with the control-step budget (one action per control period). The
longest history the control budget allows follows from the same roofline:
``context ≤ (budget × bandwidth − weight bytes) ÷ KV bytes per token`` (and the compute bound).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from planner.bandwidth import BandwidthEstimate
from planner.capacity import (
    FLOPS_PER_PARAM_PER_TOKEN,
    DecodeStep,
    GpuSpec,
    ModelCost,
    check_non_negative,
    check_positive,
    decode_step,
    effective_flops,
    largest_batch_within_tpot,
    spare_bytes_within,
)

EdgeLimit = Literal["memory", "control-step"]


@dataclass(frozen=True, kw_only=True)
class EdgeWorkload:
    """What the robot feeds the model and how fast it must answer.

    Attributes
    ----------
    os_bytes, perception_bytes : memory set aside before the model, bytes.
    tokens_per_frame : vision tokens per camera frame, all cameras together.
    frames_per_s : frames added to the context per second.
    instruction_tokens : the task instruction (and system prompt), kept for the whole episode.
    control_step_s : time allowed for one decode step (one control period), seconds.
    """

    os_bytes: float
    perception_bytes: float
    tokens_per_frame: int
    frames_per_s: float
    instruction_tokens: int
    control_step_s: float

    def __post_init__(self) -> None:
        for name in ("os_bytes", "perception_bytes", "instruction_tokens"):
            check_non_negative(name, getattr(self, name))
        for name in ("tokens_per_frame", "frames_per_s", "control_step_s"):
            check_positive(name, getattr(self, name))

    @property
    def tokens_per_s(self) -> float:
        """Context growth, tokens per second of history."""
        return self.tokens_per_frame * self.frames_per_s


@dataclass(frozen=True, kw_only=True)
class EdgePlan:
    """How much history fits, and whether a step at that context meets the control budget."""

    device: GpuSpec
    workload: EdgeWorkload
    kv_budget_bytes: float  # negative when the shares and weights already exceed the memory
    kv_tokens: int  # whole tokens the KV budget holds (0 if none)
    history_s: float  # seconds of camera history that fit after the instruction (0 if none)
    context_tokens: int  # instruction + that history
    step: DecodeStep | None  # batch 1 at ``context_tokens``; None if no token fits
    control_history_s: float  # longest history whose decode step meets the control budget
    binding_limit: EdgeLimit
    explanation: str

    @property
    def meets_control_step(self) -> bool:
        return self.step is not None and self.step.step_s <= self.workload.control_step_s

    @property
    def usable_history_s(self) -> float:
        """History the robot can actually use: within memory and within the control budget."""
        return max(0.0, min(self.history_s, self.control_history_s))


def plan_edge(model: ModelCost, device: GpuSpec, estimate: BandwidthEstimate,
              workload: EdgeWorkload) -> EdgePlan:
    """Seconds of history that fit, and the decode step at that context against the control step.

    ``model`` must be built for one device (``tp = 1``): an edge module has one GPU.
    """
    if model.tp != 1:
        raise ValueError(f"an edge device has one GPU: tp must be 1, got {model.tp}")
    budget = (device.memory_bytes - workload.os_bytes - workload.perception_bytes
              - model.weight_bytes)
    kv_tokens = max(0, int(budget // model.kv_bytes_per_token_per_gpu)) if budget > 0 else 0
    history_tokens = max(0, kv_tokens - workload.instruction_tokens)
    history_s = history_tokens / workload.tokens_per_s
    context = workload.instruction_tokens + history_tokens if kv_tokens else 0
    step = (decode_step(model, device, estimate, batch=1, context=context)
            if kv_tokens > workload.instruction_tokens else None)
    control_context = _longest_context_within(model, device, estimate, workload.control_step_s)
    control_history_s = max(0.0, (control_context - workload.instruction_tokens)
                            / workload.tokens_per_s)
    limit, words = _edge_limit(budget=budget, kv_tokens=kv_tokens, history_s=history_s,
                               control_history_s=control_history_s, step=step,
                               workload=workload)
    return EdgePlan(device=device, workload=workload, kv_budget_bytes=budget, kv_tokens=kv_tokens,
                    history_s=history_s, context_tokens=context, step=step,
                    control_history_s=control_history_s, binding_limit=limit, explanation=words)


def _longest_context_within(model: ModelCost, device: GpuSpec, estimate: BandwidthEstimate,
                            step_s: float) -> float:
    """Tokens of context one sequence may hold with its decode step within ``step_s``.

    The planner's batch solver answers "how many sequences of length L"; at batch 1 the step is
    linear in the context instead, so solve for it directly with the same two bounds.
    """
    if largest_batch_within_tpot(model, device, estimate, context=0, tpot_s=step_s) < 1:
        return 0.0  # the weights alone take longer than the control step
    by_memory = spare_bytes_within(model, device, estimate, step_s) / model.kv_bytes_per_token_per_gpu
    attention = model.attention_flops_per_context_token_per_gpu
    by_compute = (math.inf if attention == 0 else
                  (step_s * effective_flops(device, estimate)
                   - FLOPS_PER_PARAM_PER_TOKEN * model.params_per_gpu) / attention)
    return max(0.0, min(by_memory, by_compute))


def _edge_limit(*, budget: float, kv_tokens: int, history_s: float, control_history_s: float,
                step: DecodeStep | None, workload: EdgeWorkload) -> tuple[EdgeLimit, str]:
    if budget <= 0:
        return "memory", ("memory: the OS, perception and weights already fill the shared memory; "
                          "no room for any KV cache.")
    if kv_tokens <= workload.instruction_tokens:
        return "memory", (f"memory: the KV budget holds {kv_tokens:,} tokens, not even the "
                          f"{workload.instruction_tokens:,}-token instruction.")
    assert step is not None
    budget_ms = workload.control_step_s * 1e3
    if control_history_s < history_s:
        return "control-step", (
            f"control step: memory holds {history_s:.1f} s of history, but a decode step at that "
            f"context takes {step.step_s * 1e3:.1f} ms, over the {budget_ms:g} ms budget; "
            f"{control_history_s:.1f} s of history keeps the step on time.")
    return "memory", (
        f"memory: {history_s:.1f} s of history fit ({kv_tokens:,} tokens of KV); a decode step "
        f"at that context takes {step.step_s * 1e3:.1f} ms, within the {budget_ms:g} ms budget.")


@dataclass(frozen=True, kw_only=True)
class HistoryPoint:
    """The decode step (batch 1) when the context holds ``history_s`` seconds of camera tokens."""

    history_s: float
    context_tokens: int
    step_s: float
    fits_memory: bool


def step_against_history(model: ModelCost, device: GpuSpec, estimate: BandwidthEstimate,
                         workload: EdgeWorkload, *, max_history_s: float,
                         points: int = 40) -> tuple[HistoryPoint, ...]:
    """Decode step time at ``points`` evenly spaced histories from 0 to ``max_history_s``."""
    if not (max_history_s > 0 and math.isfinite(max_history_s)):
        raise ValueError(f"max_history_s must be a positive number, got {max_history_s!r}")
    plan = plan_edge(model, device, estimate, workload)
    result = []
    for index in range(points + 1):
        history = max_history_s * index / points
        context = workload.instruction_tokens + int(history * workload.tokens_per_s)
        step = decode_step(model, device, estimate, batch=1, context=context)
        result.append(HistoryPoint(history_s=history, context_tokens=context, step_s=step.step_s,
                                   fits_memory=context <= plan.kv_tokens))
    return tuple(result)

"""The memory one GPU of a cluster replica has for its weights and KV cache, stage by stage.

:attr:`ClusterSpec.budget <planner.cluster.replica.ClusterSpec>` names the rule:

``"engine"`` (the default) — vLLM V1's memory profile of one GPU (:mod:`sizing.engine.memory`),
the computation behind the sizer's answer: :func:`sizing.engine.capacity.plan_engine` of one
:class:`~sizing.engine.capacity.EngineRequest` per pipeline stage, built as ``sizing.answer``
builds its own — the stage's part of the model at the layout's TP, the engine's weights
(:func:`sizing.weights.engine_weight_bytes`, a stage's share of them) ÷ TP with the MXFP4
experts' padding, the model's activation widths, the sampler on the last stage only::

    KV budget = total × u − weights − activation peak − non-torch − CUDA graphs

``total`` is the driver-reported memory (:attr:`hardware.gpus.GPU.engine_total_bytes`; the
vendor's GB, labelled, for a GPU without one), ``u`` the spec's ``usable_fraction`` read as
``--gpu-memory-utilization`` (the plan's commands carry the same), and the activation peak is at
vLLM's default ``--max-num-batched-tokens`` (8,192) and ``--max-num-seqs`` (256), as the
commands' batch tokens are; a command's smaller ``--max-num-seqs`` only shrinks the sampler's
share, so the budget errs low. The weights themselves are the layout's
(:mod:`planner.cluster.parallel`): the memory handed to it is the profile's "Available KV cache
memory" plus the TP split's weights, so a TP × PP layout's budget is the engine's figure exactly.

``"formula"`` — the reference formula: the vendor's GB × ``usable_fraction`` − the weights, the
same memory on every stage.

What the engine rule approximates:

* **DP attention and expert parallelism.** The weights per GPU are the layout's (dense ÷ TP,
  routed experts ÷ TP × DP); the activation peak, non-torch memory and CUDA graphs are the
  profile's at the stage's TP. So the MoE activation width is the TP split's, not EP's whole
  experts, NCCL's non-torch memory grows with the TP ranks only (not with the DP or EP group),
  and MXFP4 padding is the TP split's (:mod:`sizing.engine.mxfp4`).
* **A TP split that cannot hold its weights** (DeepSeek-V3 on one H200, which DP 8 × EP makes
  fit): the profile is taken with no weights for its runtime terms, and MXFP4 padding is not
  counted; the budget's formula says so.
* **A KV dtype vLLM cannot cache** (int8, int4, int2) has no engine profile: the formula's
  budget answers, labelled, as the sizer's answer falls back to the formula.
"""

from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction
from functools import lru_cache
from typing import TYPE_CHECKING, Literal

from inputs.errors import InputError, shown
from planner.cluster.parallel import ParallelLayout, UsableForStage, UsableMemory
from sizing.engine.capacity import ENGINE_KV_DTYPES, EngineRequest, plan_engine
from sizing.engine.memory import ActivationShape, MemoryProfile
from sizing.errors import NoKVRoom
from sizing.kv import usable_bytes
from sizing.models import ModelShape
from sizing.weights import engine_weight_bytes
from units import format_number, format_up_to_giga

if TYPE_CHECKING:
    from planner.cluster.replica import ClusterSpec

Budget = Literal["engine", "formula"]
BUDGETS: tuple[Budget, ...] = ("engine", "formula")
BUDGET_LABELS = {"engine": "vLLM's memory profile", "formula": "reference formula (vendor GB × usable)"}


def check_budget(value: object) -> Budget:
    """``value`` if it names a rule, else an :class:`InputError` naming ``budget``."""
    if not isinstance(value, str) or value not in BUDGETS:
        raise InputError("budget", f"must be one of {', '.join(BUDGETS)}, got {shown(value)}")
    return value


def usable_for_stages(spec: ClusterSpec, layout: ParallelLayout) -> UsableForStage:
    """Each stage's weights + KV memory per GPU under ``spec.budget`` (module docstring), as
    :func:`~planner.cluster.parallel.parallel_memory` takes it."""
    fraction = Fraction(repr(spec.usable_fraction))
    kv = spec.kv_precision.name
    if spec.budget == "formula" or kv not in ENGINE_KV_DTYPES:
        why = "" if spec.budget == "formula" else (
            f"; vLLM caches KV as {', '.join(ENGINE_KV_DTYPES)}, not {kv}, so no engine profile")
        formula = UsableMemory(bytes=usable_bytes(spec.gpu, fraction),
                               basis=f"reference formula: {format_number(float(fraction), 3)} × the vendor's "
                                     f"{format_number(spec.gpu.memory_gb, 2)} GB{why}")
        return lambda stage, part: formula
    return lambda stage, part: _engine_usable(spec, layout, stage, part)


def _engine_usable(spec: ClusterSpec, layout: ParallelLayout, stage: int, part: ModelShape) -> UsableMemory:
    model, tp = spec.model, layout.tp
    total = engine_weight_bytes(model, spec.weight_precision).bytes
    share = Fraction(part.layers, model.layers)
    # The TP split's weights per GPU, as parallel.py places a stage's share of them.
    split = total * share / tp
    precision = spec.weight_precision
    shape = spec.activation or ActivationShape.assumed_for(model)
    request = EngineRequest(
        model=part, gpu=spec.gpu, tp=tp, kv_dtype=spec.kv_precision.name, weight_dtype=precision.name,
        weight_group_size=precision.group_size, block_size=spec.block_size,
        weights_total_bytes=total if layout.pp == 1 else math.ceil(total * share),
        gpu_memory_utilization=float(spec.usable_fraction),
        activation=shape, last_pp_stage=stage == layout.pp - 1)
    profiled = _profile(request)
    if profiled is not None:
        profile, padded = profiled
        extra = f" − {format_up_to_giga(profile.weights.bytes - split)} MXFP4 padding" if padded else ""
        return UsableMemory(bytes=profile.available_bytes + split, basis=_words(profile, tp, shape, extra))
    bare = _profile(replace(request, weights_bytes_per_gpu=0))
    if bare is None:
        raise InputError("usable_fraction", f"vLLM's memory profile at TP {tp} on {spec.gpu.name} leaves no memory "
                                            f"for the weights at gpu_memory_utilization {spec.usable_fraction:g}: "
                                            f"its activation peak, non-torch memory and CUDA graphs take it all")
    padding = " (MXFP4 padding not counted)" if precision.name == "mxfp4" and model.num_experts else ""
    return UsableMemory(bytes=Fraction(bare[0].available_bytes),
                        basis=_words(bare[0], tp, shape, "") + f"; the TP split's weights leave no KV block, so the "
                                                        f"profile's runtime terms are taken without them{padding}")


def _profile(request: EngineRequest) -> tuple[MemoryProfile, bool] | None:
    """The engine's profile of ``request`` and whether it counts MXFP4 padding; None when it
    leaves no room for a KV block. A sweep asks the same few stages at every context and role,
    and the profile depends on neither, hence the cache (skipped for a request that cannot be
    hashed)."""
    try:
        hash(request)
    except TypeError:
        return _uncached_profile(request)
    return _cached_profile(request)


def _uncached_profile(request: EngineRequest) -> tuple[MemoryProfile, bool] | None:
    try:
        report = plan_engine(request)
    except NoKVRoom:
        return None
    return report.profile, report.mxfp4_backend is not None


_cached_profile = lru_cache(maxsize=1024)(_uncached_profile)


def _words(profile: MemoryProfile, tp: int, shape: ActivationShape, extra: str) -> str:
    """``vLLM's memory profile at TP 2: 0.9 × 179.1 GiB (driver-reported) − 1.2 GiB activation
    peak − 148.4 MiB non-torch − 409.6 MiB CUDA graphs``."""
    total = profile.total
    where = "driver-reported" if not total.estimated else "vendor GB: no driver figure known"
    assumed = " (widths assumed from the attention shape)" if shape.assumed else ""
    return (f"vLLM's memory profile at TP {tp}: {format_number(profile.utilization, 3)} × "
            f"{format_up_to_giga(total.bytes)} ({where}) − {format_up_to_giga(profile.activation.bytes)} "
            f"activation peak{assumed} − {format_up_to_giga(profile.non_torch.bytes)} non-torch − "
            f"{format_up_to_giga(profile.cuda_graph.bytes)} CUDA graphs{extra}")


__all__ = ["BUDGETS", "BUDGET_LABELS", "Budget", "check_budget", "usable_for_stages"]

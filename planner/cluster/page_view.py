"""The cluster page's question in plain values, and its answer as the CLI's record.

A page holds what the user picked (catalogue ids, names, numbers); :func:`cluster_record` turns
them into the library's :class:`~planner.cluster.replica.ClusterSpec`, :class:`Load` and
layouts, and returns the record ``python -m planner cluster --json --pareto`` prints for the
same choices (:func:`planner.cluster.launch.plan_record`), so the page and the CLI show one
computation. A layout field of 0 means "choose": a role given no TP gets the smallest layout
that holds one of its sequences (:func:`~planner.cluster.replica.fitting_layout`). ``budget`` is
the CLI's ``--budget``: ``"engine"`` (vLLM's memory profile, with the catalogue config's
activation widths) or ``"formula"`` (vendor GB × usable − weights).

:func:`occupancy_record` runs the same plan's decode pool beside its aggregated pool through the
over-time simulator (:mod:`planner.cluster.occupancy`), the record
``python -m planner cluster --simulate --json`` prints under ``"occupancy"``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hardware.gpus import get_gpu
from planner.bandwidth import choose_estimate
from planner.cluster import occupancy
from planner.cluster.launch import plan_record
from planner.cluster.parallel import ParallelLayout, routed_expert_params
from planner.cluster.pools import compare
from planner.cluster.replica import ClusterSpec, Load, fitting_layout
from sizing.checkpoints import Launchable, checkpoint_for
from sizing.engine.memory import ActivationShape
from sizing.precisions import get_precision
from sizing.presets import get_preset

__all__ = ["RoleLayout", "ClusterPageInputs", "cluster_record", "occupancy_record"]


@dataclass(frozen=True)
class RoleLayout:
    """One role's layout as a page holds it; ``tp`` 0 lets the plan choose the whole layout."""

    tp: int = 0
    pp: int = 1
    dp: int = 1
    ep: bool = False


@dataclass(frozen=True)
class ClusterPageInputs:
    """Everything the cluster view asks (catalogue ids and names as the CLI options take them)."""

    model: str
    gpu: str
    kv_dtype: str = "fp8"
    weight_dtype: str = "bf16"
    link: str = "ib-ndr"
    nics: int = 1
    usable: float = 0.9
    budget: str = "engine"  # the KV budget per GPU: "engine" or "formula" (planner.cluster.budget)
    block_size: int = 16
    rate: float = 1.0
    prompt_tokens: int = 2048
    output_tokens: int = 256
    tpot_ms: float = 0.0  # 0: no target
    ttft_ms: float = 0.0
    prefill: RoleLayout = RoleLayout()
    decode: RoleLayout = RoleLayout()
    connector: str = "nixl"
    kv_buffer_device: str = "cuda"
    bandwidth_source: str = "h200-results"


def _layout(spec: ClusterSpec, load: Load, role: str, given: RoleLayout) -> ParallelLayout:
    if given.tp == 0:
        return fitting_layout(spec, load, role)
    return ParallelLayout(tp=given.tp, pp=given.pp, dp=given.dp, ep=given.ep)


@dataclass(frozen=True)
class _Plan:
    """The library's inputs for one page question."""

    spec: ClusterSpec
    load: Load
    prefill: ParallelLayout
    decode: ParallelLayout
    launchable: Launchable
    notes: tuple[str, ...]


def _plan(inputs: ClusterPageInputs) -> _Plan:
    entry = get_preset(inputs.model)
    model = entry.shape
    estimate, notes = choose_estimate(inputs.bandwidth_source)
    kv = get_precision(inputs.kv_dtype, field="kv_dtype")
    weights = get_precision(inputs.weight_dtype, field="weight_dtype")
    spec = ClusterSpec(model=model, kv_precision=kv, weight_precision=weights, gpu=get_gpu(inputs.gpu),
                       estimate=estimate, link=inputs.link, nics=inputs.nics, usable_fraction=inputs.usable,
                       block_size=inputs.block_size, kv_buffer_device=inputs.kv_buffer_device,
                       routed_params=routed_expert_params(entry.config) if model.is_moe else None,
                       budget=inputs.budget, activation=ActivationShape.from_config(entry.config))
    load = Load(rate_per_s=inputs.rate, prompt_tokens=inputs.prompt_tokens, output_tokens=inputs.output_tokens,
                tpot_target_s=inputs.tpot_ms / 1e3 if inputs.tpot_ms else None,
                ttft_target_s=inputs.ttft_ms / 1e3 if inputs.ttft_ms else None)
    launchable = checkpoint_for(repo=entry.repo, own_format=model.weight_format, weight_format=weights.name,
                                preset_id=entry.id)
    return _Plan(spec=spec, load=load, prefill=_layout(spec, load, "prefill", inputs.prefill),
                 decode=_layout(spec, load, "decode", inputs.decode), launchable=launchable, notes=tuple(notes))


def cluster_record(inputs: ClusterPageInputs, *, pareto: bool = True) -> dict[str, Any]:
    """The CLI's record for these choices (with the Pareto sweep unless ``pareto`` is False);
    a refusal is an :class:`~inputs.errors.InputError` naming its field (``decode_tp``, ``rate``)."""
    plan = _plan(inputs)
    return plan_record(plan.spec, plan.load, prefill=plan.prefill, decode=plan.decode, aggregated=None,
                       launchable=plan.launchable, connector=inputs.connector, notes=plan.notes, pareto=pareto)


def occupancy_record(inputs: ClusterPageInputs, *, requests: int = occupancy.DEFAULT_REQUESTS,
                     seed: int = 0, progress: Callable[[float], None] | None = None) -> dict[str, Any]:
    """The decode pool and the aggregated pool of these choices over time, one DP rank each over
    ``requests`` requests (at most :data:`~planner.cluster.occupancy.MAX_REQUESTS`, as the CLI's
    ``--sim-requests``), seeded: :meth:`~planner.cluster.occupancy.Occupancy.as_record`. Refusals
    name ``sim_requests`` or ``sim_seed`` (a run past its wall-clock budget names ``sim_requests``).
    ``progress``: the share of both pools' runs done (0–1), as
    :func:`~planner.cluster.occupancy.simulate_occupancy` calls it; what it raises stops the run."""
    plan = _plan(inputs)
    comparison = compare(plan.spec, plan.load, prefill=plan.prefill, decode=plan.decode)
    return occupancy.simulate_occupancy(plan.spec, comparison, requests=requests, seed=seed,
                                        deadline=occupancy.Deadline(field="sim_requests"),
                                        progress=progress).as_record()

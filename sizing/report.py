"""One call per page rerun: :func:`size_deployment` turns a :class:`SizingRequest` (what the
widgets hold) into a frozen :class:`SizingReport` with every figure, the worked formula,
chart data, the reference table, warnings and the hand-off to the other pages.

Pattern (SciPy style): the public function orchestrates, :func:`sizing.request.resolve`
normalises and rejects input with errors naming the field, the result is a frozen dataclass.
The parts live beside this module: :mod:`sizing.formula` (worked answer),
:mod:`sizing.report_charts` (chart series, reference table), :mod:`sizing.report_warnings`.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from hardware.gpus import GPU
from sizing.formula import FormulaStep, formula_steps
from sizing.kv import GpuCount, KVCacheSpec, KvCapacity, gpus_needed, kv_capacity, max_context, max_users
from sizing.kv import DEFAULT_USABLE_FRACTION, LayerKindRow, layer_kind_rows, usable_bytes
from sizing.models import ModelShape
from sizing.plan import DeploymentPlan, plan_deployment
from sizing.precisions import PRECISION_NAMES, Precision
from sizing.report_charts import ChartData, CurveSeries, MemoryChart, TableRow, chart_data, reference_table
from sizing.report_warnings import SizingWarning, sizing_warnings
from sizing.request import MAX_USERS, REFERENCE_GPUS, REFERENCE_KV_DTYPES, Resolved, SizingRequest, resolve
from sizing.weights import model_weight_bytes
from units import UnitSystem, format_bytes, to_unit


@dataclass(frozen=True, kw_only=True)
class GqaComparison:
    """The same model with one KV head per query head (the cost GQA/MQA/MLA avoids)."""

    per_token_bytes: int
    kv_bytes_total: int
    gpus: GpuCount
    factor: float  # MHA bytes ÷ this model's bytes per token


@dataclass(frozen=True, kw_only=True)
class Handoff:
    """What the sizer hands to the other pages: for the fragmentation page a KV budget, bytes
    per token (over all TP ranks, replication included), the maximum context, the block size
    and a one-line summary; for the planner the model, precisions, GPU and TP.

    ``preset_id`` is the preset the model came from, or ``None`` for a manual shape or an
    uploaded config (the planner then keeps its own model choice)."""

    kv_budget_bytes: int
    per_token_bytes: int
    max_context: int
    block_size: int
    summary: str
    model_name: str = ""
    kv_dtype: str = ""
    gpu_id: str = ""
    n_gpus: int = 1
    tp: int = 1
    preset_id: str | None = None
    weight_dtype: str = ""
    users: int = 0
    usable_fraction: float = DEFAULT_USABLE_FRACTION
    # The engine settings the sizer's answer followed (set by the page): the planner's answer
    # follows the same ones.
    gpu_memory_utilization: float | None = None
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    engine_rule: str = ""
    cuda_graphs_profiled: bool = True


@dataclass(frozen=True, kw_only=True)
class SizingReport:
    """Everything the sizer shows. Byte counts are whole bytes (rounded up); counts are ints."""

    model: ModelShape
    gpu: GPU
    kv_precision: Precision
    weight_precision: Precision
    context: int
    users: int
    tp: int
    n_gpus: int
    block_size: int
    usable_fraction: float
    values_per_token: int
    per_token_bytes: int  # whole model
    per_user_bytes: int  # one sequence at full context (sliding windows capped)
    kv_bytes_total: int  # all users at full context
    weights_bytes: int
    total_bytes: int  # weights + KV
    usable_bytes_per_gpu: int
    gpus: GpuCount  # the reference page's count
    per_gpu_kv_bytes_per_token: int  # at ``tp``
    kv_heads_per_gpu: int
    kv_replication: int
    kv_bytes_total_all_gpus: int  # KV over the TP group's ranks, replicated heads included
    plan: DeploymentPlan
    kv_budget_bytes: int
    kv_budget_given: bool
    capacity: KvCapacity
    max_users: int  # at ``context`` on ``n_gpus``
    max_context: int | None  # for ``users`` on ``n_gpus``; None: unbounded (all layers slide)
    steps: tuple[FormulaStep, ...]
    charts: ChartData
    table: tuple[TableRow, ...]
    without_gqa: GqaComparison
    warnings: tuple[SizingWarning, ...]
    handoff: Handoff
    _spec: KVCacheSpec = field(repr=False)
    weights_source: str = "estimate"  # "safetensors" (the Hub's stated total) or "estimate"
    model_source: str = "catalogue"  # catalogue | hub | config | manual
    layer_kinds: tuple[LayerKindRow, ...] = ()
    state_bytes_per_sequence: int = 0  # recurrent state of one sequence, whole model
    state_bytes_per_sequence_per_gpu: int = 0  # at ``tp``

    @property
    def gpus_needed(self) -> int:
        return self.gpus.count

    @property
    def gpus_ratio(self) -> float:
        return self.gpus.ratio

    def table_records(self) -> list[dict[str, Any]]:
        """The reference table as records (``pandas.DataFrame(report.table_records())``)."""
        return [row.as_record() for row in self.table]

    def table_csv(self) -> str:
        """The reference table as CSV text (header included)."""
        records = self.table_records()
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=list(records[0]) if records else [])
        writer.writeheader()
        writer.writerows(records)
        return out.getvalue()

    def plan_records(self, unit: str) -> list[dict[str, Any]]:
        """The TP options considered, as records; weights per GPU in ``unit`` (``"GiB"``, ``"GB"``)."""
        return [
            {"TP": o.tp, "KV heads / GPU": o.kv_heads_per_gpu, "replication": o.kv_replication,
             f"weights / GPU ({unit})": round(to_unit(o.weights_per_gpu_bytes, unit), 1),
             "users / replica": o.users_per_replica, "replicas": o.replicas, "GPUs": o.gpus,
             "spans nodes": o.spans_nodes}
            for o in self.plan.options
        ]

    def to_dict(self) -> dict[str, Any]:
        """The figures as a JSON-ready dict (bytes as integers); the CLI prints this."""
        cap = self.capacity
        plan = self.plan
        return {
            "model": self.model.name,
            "attention": str(self.model.attention),
            "gpu": self.gpu.id,
            "kv_dtype": self.kv_precision.name,
            "kv_group_size": self.kv_precision.group_size,
            "weight_dtype": self.weight_precision.name,
            "weight_group_size": self.weight_precision.group_size,
            "context": self.context,
            "users": self.users,
            "tp": self.tp,
            "n_gpus": self.n_gpus,
            "usable_fraction": self.usable_fraction,
            "block_size": self.block_size,
            "values_per_token": self.values_per_token,
            "kv_bytes_per_value": float(self.kv_precision.bytes_per_value),
            "per_token_bytes": self.per_token_bytes,
            "per_user_bytes": self.per_user_bytes,
            "kv_bytes_total": self.kv_bytes_total,
            "weights_bytes": self.weights_bytes,
            "total_bytes": self.total_bytes,
            "usable_bytes_per_gpu": self.usable_bytes_per_gpu,
            "gpus_ratio": self.gpus.ratio,
            "gpus_needed": self.gpus.count,
            "per_gpu_kv_bytes_per_token": self.per_gpu_kv_bytes_per_token,
            "kv_heads_per_gpu": self.kv_heads_per_gpu,
            "kv_replication": self.kv_replication,
            "kv_bytes_total_all_gpus": self.kv_bytes_total_all_gpus,
            "kv_budget_bytes": self.kv_budget_bytes,
            "kv_budget_given": self.kv_budget_given,
            "kv_capacity_blocks": cap.blocks,
            "kv_capacity_tokens": cap.tokens,
            "max_concurrency": cap.max_concurrency,
            "max_users": self.max_users,
            "max_context": self.max_context,
            "plan": None if plan.best is None else {
                "tp": plan.best.tp,
                "replicas": plan.best.replicas,
                "gpus": plan.gpus,
                "nodes": plan.nodes,
                "users_per_replica": plan.best.users_per_replica,
                "kv_heads_per_gpu": plan.best.kv_heads_per_gpu,
                "summary": plan.summary,
            },
            "without_gqa_per_token_bytes": self.without_gqa.per_token_bytes,
            "without_gqa_kv_bytes_total": self.without_gqa.kv_bytes_total,
            "warnings": [{"code": w.code, "field": w.field, "message": w.message} for w in self.warnings],
            "model_source": self.model_source,
            "weights_source": self.weights_source,
            "layer_kinds": [row.as_record() for row in self.layer_kinds],
            "state_bytes_per_sequence": self.state_bytes_per_sequence,
            "state_bytes_per_sequence_per_gpu": self.state_bytes_per_sequence_per_gpu,
        }


# ---- the orchestrator ----------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class _Memory:
    """The request's memory figures, exact: weights, one user's KV, all users', usable per GPU."""

    spec: KVCacheSpec
    weights: int
    per_user: Fraction
    kv_total: Fraction
    usable: Fraction
    count: GpuCount
    budget: Fraction  # KV budget over the deployed GPUs; negative when the weights do not fit


def _memory(inp: Resolved) -> _Memory:
    request = inp.request
    spec = KVCacheSpec(model=inp.model, precision=inp.kv, tp=request.tp, block_size=request.block_size)
    weights = model_weight_bytes(inp.model, inp.weights, auto=inp.weights_auto).bytes
    per_user = spec.sequence_bytes(request.context)
    kv_total = request.users * per_user
    usable = usable_bytes(inp.gpu, inp.usable)
    if request.kv_budget_bytes is not None:
        budget = Fraction(request.kv_budget_bytes)
    else:  # every GPU's usable share, less one copy of the weights per TP group
        budget = inp.n_gpus * usable - (inp.n_gpus // request.tp) * weights
    return _Memory(spec=spec, weights=weights, per_user=per_user, kv_total=kv_total, usable=usable,
                   count=gpus_needed(weights + kv_total, usable), budget=budget)


def _without_gqa(inp: Resolved, mem: _Memory) -> GqaComparison:
    mha = KVCacheSpec(model=inp.model.without_gqa(), precision=inp.kv)
    mha_total = mha.total_bytes(inp.context, inp.users)
    return GqaComparison(
        per_token_bytes=math.ceil(mha.bytes_per_token),
        kv_bytes_total=math.ceil(mha_total),
        gpus=gpus_needed(mem.weights + mha_total, mem.usable),
        # Without per-token KV (state only) GQA changes nothing: the factor is 1.
        factor=float(mha.bytes_per_token / mem.spec.bytes_per_token) if mem.spec.bytes_per_token else 1.0,
    )


def _handoff(inp: Resolved, mem: _Memory) -> Handoff:
    budget = max(mem.budget, 0)
    summary = (
        f"{inp.model.name} · {inp.kv.label} KV · {inp.n_gpus} × {inp.gpu.name} at {float(inp.usable):.0%}: "
        f"KV budget {format_bytes(budget, UnitSystem.DECIMAL)} = {format_bytes(budget)}, "
        f"{format_bytes(mem.spec.bytes_per_token_all_gpus)} per token"
    )
    return Handoff(
        kv_budget_bytes=math.floor(budget),
        per_token_bytes=math.ceil(mem.spec.bytes_per_token_all_gpus),
        max_context=inp.context,
        block_size=inp.request.block_size,
        summary=summary,
        model_name=inp.model.name, kv_dtype=inp.kv.name, gpu_id=inp.gpu.id, n_gpus=inp.n_gpus, tp=inp.tp,
        preset_id=inp.preset_id, weight_dtype=inp.weights.name, users=inp.users,
        usable_fraction=float(inp.usable),
    )


def size_deployment(request: SizingRequest) -> SizingReport:
    """Every figure of the sizer for one request (see :class:`SizingReport`)."""
    inp = resolve(request)
    mem = _memory(inp)
    model, spec, tp = inp.model, mem.spec, request.tp
    plan = plan_deployment(
        model=model, kv_precision=inp.kv, weights_bytes=mem.weights, gpu=inp.gpu, context=request.context,
        users=request.users, usable_fraction=inp.usable, gpus_per_node=request.gpus_per_node,
    )
    return SizingReport(
        model=model, gpu=inp.gpu, kv_precision=inp.kv, weight_precision=inp.weights,
        context=request.context, users=request.users, tp=tp, n_gpus=inp.n_gpus,
        block_size=request.block_size, usable_fraction=float(inp.usable),
        values_per_token=spec.values_per_token,
        per_token_bytes=math.ceil(spec.bytes_per_token),
        per_user_bytes=math.ceil(mem.per_user),
        kv_bytes_total=math.ceil(mem.kv_total),
        weights_bytes=mem.weights,
        total_bytes=math.ceil(mem.weights + mem.kv_total),
        usable_bytes_per_gpu=math.floor(mem.usable),
        gpus=mem.count,
        per_gpu_kv_bytes_per_token=math.ceil(spec.bytes_per_token_per_gpu),
        kv_heads_per_gpu=model.kv_heads_per_gpu(tp),
        kv_replication=model.kv_replication(tp),
        kv_bytes_total_all_gpus=math.ceil(request.users * spec.sequence_bytes_all_gpus(request.context)),
        plan=plan,
        kv_budget_bytes=math.floor(mem.budget),
        kv_budget_given=request.kv_budget_bytes is not None,
        capacity=kv_capacity(spec, mem.budget, request.context),
        max_users=max_users(spec, mem.budget, request.context),
        max_context=max_context(spec, mem.budget, request.users),
        steps=formula_steps(spec, inp, mem.weights, mem.count, mem.usable, mem.per_user),
        charts=chart_data(inp, mem.weights, mem.usable, mem.count, mem.kv_total),
        table=reference_table(inp, mem.weights),
        without_gqa=_without_gqa(inp, mem),
        warnings=sizing_warnings(inp, mem.weights, mem.usable),
        handoff=_handoff(inp, mem),
        weights_source=model_weight_bytes(model, inp.weights, auto=inp.weights_auto).source,
        model_source=inp.model_source,
        layer_kinds=layer_kind_rows(model, inp.kv, tp=tp, context=request.context),
        state_bytes_per_sequence=spec.state_bytes_per_sequence,
        state_bytes_per_sequence_per_gpu=spec.state_bytes_per_sequence_per_gpu,
        _spec=spec,
    )


__all__ = [
    "CurveSeries", "ChartData", "FormulaStep", "GqaComparison", "Handoff", "MAX_USERS", "MemoryChart",
    "PRECISION_NAMES", "REFERENCE_GPUS", "REFERENCE_KV_DTYPES", "SizingReport", "SizingRequest",
    "SizingWarning", "TableRow", "size_deployment",
]

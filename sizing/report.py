"""One call per page rerun: :func:`size_deployment` turns a :class:`SizingRequest` (what the
widgets hold) into a frozen :class:`SizingReport` with every figure, the worked formula,
chart data, the reference table, warnings and the hand-off to the fragmentation page.

Pattern (SciPy style): the public function orchestrates, :func:`_validate` normalises and
rejects input with errors naming the field, the result is a frozen dataclass.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from sizing.errors import SizingError
from hardware.gpus import DEFAULT_GPU, GPU, get_gpu
from sizing.kv import (
    DEFAULT_BLOCK_SIZE, DEFAULT_USABLE_FRACTION, GpuCount, KVCacheSpec, KvCapacity, exact, gpus_needed,
    kv_capacity, max_context, max_users, usable_bytes, weights_bytes,
)
from sizing.models import MAX_TOKENS, AttentionKind, ModelShape, check_int
from sizing.plan import GPUS_PER_NODE, DeploymentPlan, plan_deployment
from sizing.precisions import DEFAULT_GROUP_SIZE, PRECISION_NAMES, Precision, get_precision
from sizing.presets import DEFAULT_PRESET, get_preset, presets
from units import GB, GIGA_UNIT, UnitSystem, best_unit, format_bytes, format_number, format_up_to_giga, to_unit

# The reference page's table: BF16, FP8 and 4-bit KV on the H100 SXM and the H200.
REFERENCE_KV_DTYPES = ("bf16", "fp8", "int4")
REFERENCE_GPUS = ("h100-sxm", "h200")
MAX_USERS = 1 << 30  # a billion concurrent sequences: beyond any deployment, rejects typos
# Chart resolution: enough points for smooth step curves, few enough to stay well under 20 ms.
_CHART_MAX_POINTS = 48


@dataclass(frozen=True, kw_only=True)
class SizingRequest:
    """What the sizer page's widgets hold. ``model`` and ``gpu`` take a preset id or an object.

    ``kv_group_size`` / ``weight_group_size``: values per fp16 scale for integer formats
    (None: no scale bytes). ``n_gpus``: GPUs deployed, for the KV budget and the reverse
    questions (default: one TP group, ``tp``). ``kv_budget_bytes`` replaces the derived budget.
    """

    model: ModelShape | str = DEFAULT_PRESET
    kv_dtype: str = "bf16"
    weight_dtype: str = "bf16"
    kv_group_size: int | None = DEFAULT_GROUP_SIZE
    weight_group_size: int | None = DEFAULT_GROUP_SIZE
    context: int = 32_768
    users: int = 100
    gpu: GPU | str = DEFAULT_GPU
    usable_fraction: float = DEFAULT_USABLE_FRACTION
    tp: int = 1
    n_gpus: int | None = None
    block_size: int = DEFAULT_BLOCK_SIZE
    kv_budget_bytes: int | None = None
    gpus_per_node: int = GPUS_PER_NODE
    compare_kv_dtypes: tuple[str, ...] = REFERENCE_KV_DTYPES
    compare_gpus: tuple[str, ...] = REFERENCE_GPUS


@dataclass(frozen=True, kw_only=True)
class FormulaStep:
    """One line of the worked answer: ``label``, ``expression`` with the numbers substituted,
    ``value`` in ``unit``; ``value_bytes`` when it is an amount of memory (to re-render in other
    units), ``note`` for the same amount in the other unit system."""

    label: str
    expression: str
    value: float
    unit: str
    value_bytes: int | None = None
    note: str = ""

    @property
    def text(self) -> str:
        tail = f" ({self.note})" if self.note else ""
        return f"{self.label}: {self.expression} = {format_number(self.value)} {self.unit}{tail}"


@dataclass(frozen=True, kw_only=True)
class CurveSeries:
    """GPUs needed along one axis, for one KV precision."""

    kv_dtype: str
    label: str
    x: tuple[int, ...]
    gpus_needed: tuple[int, ...]
    ratio: tuple[float, ...]


@dataclass(frozen=True, kw_only=True)
class MemoryChart:
    """The reference chart: memory if every user reaches full context, against GPU count.
    Weights and KV are constant bars; total and usable GPU memory grow with the count."""

    gpu_counts: tuple[int, ...]
    weights_bytes: int
    kv_bytes: int
    total_memory_bytes: tuple[int, ...]  # red line
    usable_bytes: tuple[int, ...]  # dashed line
    gpus_needed: int


@dataclass(frozen=True, kw_only=True)
class ChartData:
    memory_vs_gpus: MemoryChart
    gpus_vs_context: tuple[CurveSeries, ...]
    gpus_vs_users: tuple[CurveSeries, ...]


@dataclass(frozen=True, kw_only=True)
class TableRow:
    """One cell group of the reference table: a KV precision on a GPU, weights as requested."""

    kv_dtype: str
    kv_label: str
    gpu_id: str
    gpu_name: str
    kv_all_users_bytes: int
    weights_bytes: int
    total_bytes: int
    usable_per_gpu_bytes: int
    gpus: GpuCount

    def as_record(self) -> dict[str, Any]:
        """Flat dict for a DataFrame / CSV: GB and GiB columns, both labelled."""
        return {
            "kv_precision": self.kv_label,
            "gpu": self.gpu_name,
            "kv_all_users_GB": round(self.kv_all_users_bytes / GB, 1),
            "kv_all_users_GiB": round(to_unit(self.kv_all_users_bytes, "GiB"), 1),
            "weights_GB": round(self.weights_bytes / GB, 1),
            "total_GB": round(self.total_bytes / GB, 1),
            "usable_per_gpu_GB": round(self.usable_per_gpu_bytes / GB, 1),
            "gpus_ratio": round(self.gpus.ratio, 2),
            "gpus_needed": self.gpus.count,
        }


@dataclass(frozen=True, kw_only=True)
class GqaComparison:
    """The same model with one KV head per query head (the cost GQA/MQA/MLA avoids)."""

    per_token_bytes: int
    kv_bytes_total: int
    gpus: GpuCount
    factor: float  # MHA bytes ÷ this model's bytes per token


@dataclass(frozen=True, kw_only=True)
class SizingWarning:
    """An input that looks like one of the common mistakes; ``field`` names the widget."""

    code: str
    field: str
    message: str


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
        }


# ---- validation ----------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class _Inputs:
    model: ModelShape
    gpu: GPU
    kv: Precision
    weights: Precision
    usable: Fraction
    n_gpus: int
    compare_kv: tuple[Precision, ...]
    compare_gpus: tuple[GPU, ...]


def _validate(request: SizingRequest) -> _Inputs:
    """Resolve ids, check ranges; every error is a :class:`SizingError` naming the field."""
    model = get_preset(request.model).shape if isinstance(request.model, str) else request.model
    if not isinstance(model, ModelShape):
        raise SizingError("model", f"expected a preset id or ModelShape, got {type(model).__name__}")
    gpu = get_gpu(request.gpu) if isinstance(request.gpu, str) else request.gpu
    if not isinstance(gpu, GPU):
        raise SizingError("gpu", f"expected a GPU id or GPU, got {type(gpu).__name__}")
    kv = get_precision(request.kv_dtype, group_size=request.kv_group_size, field="kv_dtype")
    weights = get_precision(request.weight_dtype, group_size=request.weight_group_size, field="weight_dtype")
    check_int("context", request.context, high=MAX_TOKENS)
    check_int("users", request.users, high=MAX_USERS)
    check_int("block_size", request.block_size, high=1 << 20)
    check_int("gpus_per_node", request.gpus_per_node, high=1 << 10)
    model.check_tp(request.tp)
    usable = exact(request.usable_fraction, "usable_fraction")
    if not 0 < usable <= 1:
        raise SizingError("usable_fraction", f"must be above 0 and at most 1, got {float(usable):g}")
    n_gpus = request.tp if request.n_gpus is None else check_int("n_gpus", request.n_gpus, high=1 << 20)
    if n_gpus % request.tp:
        raise SizingError("n_gpus", f"{n_gpus} GPUs do not form whole TP groups of {request.tp}")
    if request.kv_budget_bytes is not None:
        check_int("kv_budget_bytes", request.kv_budget_bytes, low=0, high=1 << 60)
    compare_kv = tuple(get_precision(name, group_size=request.kv_group_size, field="compare_kv_dtypes")
                       for name in dict.fromkeys((*request.compare_kv_dtypes, kv.name)))
    compare_gpus = tuple(dict.fromkeys((*(get_gpu(g) for g in request.compare_gpus), gpu)))
    return _Inputs(model=model, gpu=gpu, kv=kv, weights=weights, usable=usable, n_gpus=n_gpus,
                   compare_kv=compare_kv, compare_gpus=compare_gpus)


# ---- the orchestrator ----------------------------------------------------------------------
def size_deployment(request: SizingRequest) -> SizingReport:
    """Every figure of the sizer for one request (see :class:`SizingReport`)."""
    inp = _validate(request)
    model, gpu, tp = inp.model, inp.gpu, request.tp
    spec = KVCacheSpec(model=model, precision=inp.kv, tp=tp, block_size=request.block_size)
    weights = weights_bytes(model.params, inp.weights)
    per_user = spec.sequence_bytes(request.context)
    kv_total = request.users * per_user
    total = weights + kv_total
    usable = usable_bytes(gpu, inp.usable)
    count = gpus_needed(total, usable)

    replicas = inp.n_gpus // tp
    if request.kv_budget_bytes is not None:
        budget: Fraction = Fraction(request.kv_budget_bytes)
    else:
        budget = inp.n_gpus * usable - replicas * weights
    capacity = kv_capacity(spec, budget, request.context)

    plan = plan_deployment(
        model=model, kv_precision=inp.kv, weights_bytes=weights, gpu=gpu, context=request.context,
        users=request.users, usable_fraction=inp.usable, gpus_per_node=request.gpus_per_node,
    )
    mha = KVCacheSpec(model=model.without_gqa(), precision=inp.kv)
    mha_total = request.users * mha.sequence_bytes(request.context)
    without_gqa = GqaComparison(
        per_token_bytes=math.ceil(mha.bytes_per_token),
        kv_bytes_total=math.ceil(mha_total),
        gpus=gpus_needed(weights + mha_total, usable),
        factor=float(mha.bytes_per_token / spec.bytes_per_token),
    )
    summary = (
        f"{model.name} · {inp.kv.label} KV · {inp.n_gpus} × {gpu.name} at {float(inp.usable):.0%}: "
        f"KV budget {format_bytes(max(budget, 0), UnitSystem.DECIMAL)} = {format_bytes(max(budget, 0))}, "
        f"{format_bytes(spec.bytes_per_token_all_gpus)} per token"
    )
    return SizingReport(
        model=model, gpu=gpu, kv_precision=inp.kv, weight_precision=inp.weights,
        context=request.context, users=request.users, tp=tp, n_gpus=inp.n_gpus,
        block_size=request.block_size, usable_fraction=float(inp.usable),
        values_per_token=spec.values_per_token,
        per_token_bytes=math.ceil(spec.bytes_per_token),
        per_user_bytes=math.ceil(per_user),
        kv_bytes_total=math.ceil(kv_total),
        weights_bytes=weights,
        total_bytes=math.ceil(total),
        usable_bytes_per_gpu=math.floor(usable),
        gpus=count,
        per_gpu_kv_bytes_per_token=math.ceil(spec.bytes_per_token_per_gpu),
        kv_heads_per_gpu=model.kv_heads_per_gpu(tp),
        kv_replication=model.kv_replication(tp),
        kv_bytes_total_all_gpus=math.ceil(request.users * spec.sequence_bytes_all_gpus(request.context)),
        plan=plan,
        kv_budget_bytes=math.floor(budget),
        kv_budget_given=request.kv_budget_bytes is not None,
        capacity=capacity,
        max_users=max_users(spec, budget, request.context),
        max_context=max_context(spec, budget, request.users),
        steps=_steps(spec, inp, request, weights, count, usable, per_user),
        charts=_charts(inp, request, weights, usable, count, kv_total),
        table=_table(inp, request, weights),
        without_gqa=without_gqa,
        warnings=_warnings(inp, request, weights, usable),
        handoff=Handoff(
            kv_budget_bytes=max(0, math.floor(budget)),
            per_token_bytes=math.ceil(spec.bytes_per_token_all_gpus),
            max_context=request.context,
            block_size=request.block_size,
            summary=summary,
            model_name=model.name, kv_dtype=inp.kv.name, gpu_id=gpu.id, n_gpus=inp.n_gpus, tp=tp,
        ),
        _spec=spec,
    )


# ---- worked formula ------------------------------------------------------------------------
# Worked-answer amounts stop at GiB / GB, as the reference page writes them (1,073.7 GB, not 1.1 TB).
_fmt = format_up_to_giga


def _bytes_step(label: str, expression: str, n_bytes: Fraction | int, system: UnitSystem) -> FormulaStep:
    unit = best_unit(n_bytes, system, largest=GIGA_UNIT[system])
    other = UnitSystem.DECIMAL if system is UnitSystem.BINARY else UnitSystem.BINARY
    return FormulaStep(
        label=label, expression=expression, value=round(to_unit(n_bytes, unit), 3), unit=unit,
        value_bytes=math.ceil(n_bytes), note=f"= {_fmt(n_bytes, other)}",
    )


def _bpv_text(p: Precision) -> str:
    if p.group_size:
        return f"({format_number(float(p.data_bytes_per_value), 3)} + 2/{p.group_size}) B"
    return f"{format_number(float(p.bytes_per_value), 3)} B"


def _steps(spec: KVCacheSpec, inp: _Inputs, req: SizingRequest, weights: int, count: GpuCount,
           usable: Fraction, per_user: Fraction) -> tuple[FormulaStep, ...]:
    m, kv = inp.model, inp.kv
    b, d = UnitSystem.BINARY, UnitSystem.DECIMAL
    if m.attention is AttentionKind.MLA:
        values_expr = f"{m.layers} × ({m.kv_lora_rank} + {m.qk_rope_head_dim})"
        values_label = "KV values per token = layers × (latent + RoPE key), no factor 2 (MLA)"
    elif m.v_head_dim and m.v_head_dim != m.head_dim:
        values_expr = f"{m.layers} × {m.kv_heads} × ({m.head_dim} + {m.v_head_dim})"
        values_label = "KV values per token = layers × KV heads × (K dim + V dim)"
    else:
        values_expr = f"2 × {m.layers} × {m.kv_heads} × {m.head_dim}"
        values_label = "KV values per token = 2 (K and V) × layers × KV heads × head dim"
    steps = [
        FormulaStep(label=values_label, expression=values_expr, value=spec.values_per_token, unit="values"),
        _bytes_step(f"Bytes per token ({kv.label})", f"{spec.values_per_token:,} × {_bpv_text(kv)}",
                    spec.bytes_per_token, b),
    ]
    t = req.context
    if m.sliding_window is not None and t > m.sliding_window:
        per_layer = spec.bytes_per_token / m.layers
        parts = []
        if m.n_full_layers:
            parts.append(f"{_fmt(per_layer * m.n_full_layers)} × {t:,}")
        parts.append(f"{_fmt(per_layer * m.n_sliding_layers)} × {m.sliding_window:,} (window)")
        user_expr = " + ".join(parts)
    else:
        user_expr = f"{_fmt(spec.bytes_per_token)} × {t:,}"
    steps.append(_bytes_step(f"Per user at {t:,} tokens", user_expr, per_user, b))
    kv_total = req.users * per_user
    steps.append(_bytes_step(f"All {req.users:,} users", f"{_fmt(per_user)} × {req.users:,}", kv_total, b))
    steps.append(_bytes_step(
        f"Weights ({inp.weights.label})",
        f"{format_number(m.params / 1e9, 2)} B params × {_bpv_text(inp.weights)}", weights, d))
    steps.append(_bytes_step("Total, weights + KV",
                             f"{_fmt(kv_total, d)} + {_fmt(weights, d)}", weights + kv_total, d))
    steps.append(_bytes_step(f"Usable per GPU ({inp.gpu.name})",
                             f"{_fmt(inp.gpu.memory_bytes, d)} × {float(inp.usable):g}", usable, d))
    steps.append(FormulaStep(
        label="GPUs needed (total ÷ usable, rounded up)",
        expression=f"⌈{_fmt(weights + kv_total, d)} ÷ {_fmt(usable, d)}⌉ = ⌈{count.ratio:,.1f}⌉",
        value=count.count, unit="GPUs"))
    tp = req.tp
    if tp > 1:
        heads = m.kv_heads_per_gpu(tp)
        if m.attention is AttentionKind.MLA:
            expr = f"{_fmt(spec.bytes_per_token)} (the latent is replicated on all {tp} ranks, not split)"
        elif tp <= m.kv_heads:
            expr = f"{_fmt(spec.bytes_per_token)} ÷ {tp} ({heads} of {m.kv_heads} KV heads per GPU)"
        else:
            expr = (f"{_fmt(spec.bytes_per_token)} ÷ {m.kv_heads} (TP {tp} > {m.kv_heads} KV heads: "
                    f"1 head per GPU, {m.kv_replication(tp)} copies each)")
        steps.append(_bytes_step(f"KV per token per GPU at TP {tp}", expr, spec.bytes_per_token_per_gpu, b))
    return tuple(steps)


# ---- charts, table -------------------------------------------------------------------------
def _one_two_five(limit: int) -> list[int]:
    """1, 2, 5, 10, 20, 50, … up to the first value ≥ ``limit``."""
    out, base = [], 1
    while True:
        for f in (1, 2, 5):
            out.append(f * base)
            if f * base >= limit:
                return out
        base *= 10


def _thin(values: list[int]) -> tuple[int, ...]:
    values = sorted(set(values))
    if len(values) <= _CHART_MAX_POINTS:
        return tuple(values)
    step = len(values) / _CHART_MAX_POINTS
    return tuple(sorted({values[int(i * step)] for i in range(_CHART_MAX_POINTS)} | {values[-1]}))


def _charts(inp: _Inputs, req: SizingRequest, weights: int, usable: Fraction, count: GpuCount,
            kv_total: Fraction) -> ChartData:
    m = inp.model
    top = max(8, math.ceil(count.count * 1.25) + 1)
    # Evenly spaced counts from 1 to ``top`` without building the whole range (top may be 10**6).
    counts = _thin([1 + (top - 1) * i // (_CHART_MAX_POINTS - 1) for i in range(_CHART_MAX_POINTS)] + [count.count])
    memory = MemoryChart(
        gpu_counts=counts, weights_bytes=weights, kv_bytes=math.ceil(kv_total),
        total_memory_bytes=tuple(n * inp.gpu.memory_bytes for n in counts),
        usable_bytes=tuple(math.floor(n * usable) for n in counts), gpus_needed=count.count,
    )
    ctx_top = max(req.context, m.max_context or 0, 4096)
    contexts = [1 << k for k in range(10, 41) if (1 << k) <= ctx_top] + [req.context]
    contexts = list(_thin(contexts))
    users = list(_thin(_one_two_five(max(2 * req.users, 10)) + [req.users]))
    # Tokens held per layer depend on the shape only; compute them once for every x.
    layer_tokens_ctx = [m.cached_layer_tokens(t) for t in contexts]
    layer_tokens_user = m.cached_layer_tokens(req.context)
    per_layer_values = m.values_per_layer_per_token
    by_context, by_users = [], []
    for p in inp.compare_kv:
        bpv = p.bytes_per_value
        c_ratio = [Fraction(weights + req.users * per_layer_values * lt * bpv) / usable for lt in layer_tokens_ctx]
        u_ratio = [Fraction(weights + u * per_layer_values * layer_tokens_user * bpv) / usable for u in users]
        by_context.append(CurveSeries(kv_dtype=p.name, label=p.label, x=tuple(contexts),
                                      gpus_needed=tuple(max(1, math.ceil(r)) for r in c_ratio),
                                      ratio=tuple(float(r) for r in c_ratio)))
        by_users.append(CurveSeries(kv_dtype=p.name, label=p.label, x=tuple(users),
                                    gpus_needed=tuple(max(1, math.ceil(r)) for r in u_ratio),
                                    ratio=tuple(float(r) for r in u_ratio)))
    return ChartData(memory_vs_gpus=memory, gpus_vs_context=tuple(by_context), gpus_vs_users=tuple(by_users))


def _table(inp: _Inputs, req: SizingRequest, weights: int) -> tuple[TableRow, ...]:
    rows = []
    layer_tokens = inp.model.cached_layer_tokens(req.context)
    for p in inp.compare_kv:
        kv_total = req.users * inp.model.values_per_layer_per_token * layer_tokens * p.bytes_per_value
        for g in inp.compare_gpus:
            usable = usable_bytes(g, inp.usable)
            rows.append(TableRow(
                kv_dtype=p.name, kv_label=p.label, gpu_id=g.id, gpu_name=g.name,
                kv_all_users_bytes=math.ceil(kv_total), weights_bytes=weights,
                total_bytes=math.ceil(weights + kv_total), usable_per_gpu_bytes=math.floor(usable),
                gpus=gpus_needed(weights + kv_total, usable),
            ))
    return tuple(rows)


# ---- warnings ------------------------------------------------------------------------------
def _warnings(inp: _Inputs, req: SizingRequest, weights: int, usable: Fraction) -> tuple[SizingWarning, ...]:
    m, out = inp.model, []
    if m.attention is AttentionKind.MHA:
        for p in presets():
            s = p.shape
            if (s.attention is AttentionKind.GQA and (s.layers, s.q_heads, s.head_dim) == (m.layers, m.q_heads, m.head_dim)):
                out.append(SizingWarning(
                    code="query_heads_as_kv_heads", field="kv_heads",
                    message=(f"{m.kv_heads} KV heads equals the query heads, but {p.name} with this shape has "
                             f"{s.kv_heads} KV heads (GQA): using query heads overestimates the cache "
                             f"{m.kv_heads // s.kv_heads}×."),
                ))
                break
    if m.attention is not AttentionKind.MLA and req.tp > m.kv_heads:
        out.append(SizingWarning(
            code="tp_beyond_kv_heads", field="tp",
            message=(f"TP {req.tp} exceeds the {m.kv_heads} KV heads: each GPU keeps one head, "
                     f"replicated {req.tp // m.kv_heads}×, so per-GPU KV stops shrinking."),
        ))
    if m.attention is AttentionKind.MLA and req.tp > 1:
        out.append(SizingWarning(
            code="mla_replicated", field="tp",
            message=f"MLA's latent is not split by TP: all {req.tp} GPUs hold the full cache.",
        ))
    if inp.usable >= 1:
        out.append(SizingWarning(
            code="usable_fraction_full", field="usable_fraction",
            message="A usable fraction of 1.0 leaves nothing for activations, the CUDA context and the engine; "
                    "plan with headroom (0.9 is the usual figure).",
        ))
    if weights / req.tp > usable:
        out.append(SizingWarning(
            code="weights_exceed_gpu", field="tp",
            message=(f"The weights per GPU at TP {req.tp} ({format_bytes(Fraction(weights, req.tp), UnitSystem.DECIMAL)}) "
                     f"exceed one {inp.gpu.name}'s usable {format_bytes(usable, UnitSystem.DECIMAL)}."),
        ))
    if m.max_context is not None and req.context > m.max_context:
        out.append(SizingWarning(
            code="context_beyond_model", field="context",
            message=f"{req.context:,} tokens exceed the model's maximum context of {m.max_context:,}.",
        ))
    if req.tp > req.gpus_per_node:
        out.append(SizingWarning(
            code="tp_spans_nodes", field="tp",
            message=f"TP {req.tp} spans nodes of {req.gpus_per_node} GPUs: all-reduces cross the slower inter-node network.",
        ))
    if inp.gpu.shared_memory:
        out.append(SizingWarning(
            code="shared_memory", field="gpu",
            message=f"{inp.gpu.name} shares its memory with the CPU: lower the usable fraction for the OS and other work.",
        ))
    return tuple(out)


__all__ = [
    "CurveSeries", "ChartData", "FormulaStep", "GqaComparison", "Handoff", "MemoryChart", "PRECISION_NAMES",
    "SizingReport", "SizingRequest", "SizingWarning", "TableRow", "size_deployment",
]

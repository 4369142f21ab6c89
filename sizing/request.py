"""What the sizer is asked: :class:`SizingRequest` (what the widgets or CLI options hold) and
:func:`resolve`, which turns it into checked objects or raises an error naming the field.

Kept apart from :mod:`sizing.report` so that the formula, chart and warning builders can take
the resolved request without importing the orchestrator.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from hardware.gpus import DEFAULT_GPU, GPU, get_gpu
from inputs.errors import InputError
from sizing.errors import SizingError
from sizing.kv import DEFAULT_BLOCK_SIZE, DEFAULT_USABLE_FRACTION, MAX_BLOCK_SIZE, exact
from sizing.models import MAX_TOKENS, ModelShape, check_int
from sizing.plan import GPUS_PER_NODE
from sizing.precisions import DEFAULT_GROUP_SIZE, Precision, get_precision
from sizing.presets import DEFAULT_PRESET, get_preset
from sizing.weights import AUTO, resolve_weight_precision

# The reference page's table: BF16, FP8 and 4-bit KV on the H100 SXM and the H200.
REFERENCE_KV_DTYPES = ("bf16", "fp8", "int4")
REFERENCE_GPUS = ("h100-sxm", "h200")
MODEL_SOURCES = ("catalogue", "hub", "config", "manual")
MAX_USERS = 1 << 30  # a billion concurrent sequences: beyond any deployment, rejects typos


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
    model_source: str | None = None  # catalogue | hub | config | manual; None: catalogue for an id, else manual


@dataclass(frozen=True, kw_only=True)
class Resolved:
    """A checked request: ids resolved to objects, the usable fraction exact."""

    request: SizingRequest
    model: ModelShape
    preset_id: str | None  # the preset the model came from; None for a shape given directly
    gpu: GPU
    kv: Precision
    weights: Precision
    usable: Fraction
    n_gpus: int
    compare_kv: tuple[Precision, ...]
    compare_gpus: tuple[GPU, ...]
    weights_auto: bool = False  # weight_dtype "auto": the model's own format (and safetensors total)
    model_source: str = "catalogue"

    @property
    def context(self) -> int:
        return self.request.context

    @property
    def users(self) -> int:
        return self.request.users

    @property
    def tp(self) -> int:
        return self.request.tp


def _catalogue_gpu(gpu_id: str) -> GPU:
    """A catalogue GPU, its lookup error re-raised as the sizer's own (callers catch SizingError)."""
    try:
        return get_gpu(gpu_id)
    except SizingError:
        raise
    except InputError as exc:
        raise SizingError(exc.field, exc.message) from None


def _model(request: SizingRequest) -> tuple[ModelShape, str | None]:
    if isinstance(request.model, str):
        preset = get_preset(request.model)
        return preset.shape, preset.id
    if not isinstance(request.model, ModelShape):
        raise SizingError("model", f"expected a preset id or ModelShape, got {type(request.model).__name__}")
    return request.model, None


def _check_workload(request: SizingRequest, model: ModelShape) -> Fraction:
    """Context, users, block size, TP checked; the usable fraction returned exact."""
    check_int("context", request.context, high=MAX_TOKENS)
    check_int("users", request.users, high=MAX_USERS)
    check_int("block_size", request.block_size, high=MAX_BLOCK_SIZE)
    check_int("gpus_per_node", request.gpus_per_node, high=1 << 10)
    model.check_tp(request.tp)
    usable = exact(request.usable_fraction, "usable_fraction")
    if not 0 < usable <= 1:
        raise SizingError("usable_fraction", f"must be above 0 and at most 1, got {float(usable):g}")
    return usable


def _check_deployment(request: SizingRequest) -> int:
    """GPUs deployed (whole TP groups) and a given KV budget checked; the GPUs deployed returned."""
    n_gpus = request.tp if request.n_gpus is None else check_int("n_gpus", request.n_gpus, high=1 << 20)
    if n_gpus % request.tp:
        raise SizingError("n_gpus", f"{n_gpus} GPUs do not form whole TP groups of {request.tp}")
    if request.kv_budget_bytes is not None:
        check_int("kv_budget_bytes", request.kv_budget_bytes, low=0, high=1 << 60)
    return n_gpus


def resolve(request: SizingRequest) -> Resolved:
    """Resolve ids, check ranges; every error is a :class:`SizingError` naming the field."""
    model, preset_id = _model(request)
    gpu = _catalogue_gpu(request.gpu) if isinstance(request.gpu, str) else request.gpu
    if not isinstance(gpu, GPU):
        raise SizingError("gpu", f"expected a GPU id or GPU, got {type(gpu).__name__}")
    kv = get_precision(request.kv_dtype, group_size=request.kv_group_size, field="kv_dtype")
    weights = resolve_weight_precision(request.weight_dtype, model, group_size=request.weight_group_size)
    weights_auto = isinstance(request.weight_dtype, str) and request.weight_dtype.lower() == AUTO
    source = request.model_source or ("catalogue" if preset_id else "manual")
    if source not in MODEL_SOURCES:
        raise SizingError("model_source", f"must be one of {', '.join(MODEL_SOURCES)}, got {source!r:.40}")
    usable = _check_workload(request, model)
    n_gpus = _check_deployment(request)
    compare_kv = tuple(get_precision(name, group_size=request.kv_group_size, field="compare_kv_dtypes")
                       for name in dict.fromkeys((*request.compare_kv_dtypes, kv.name)))
    compare_gpus = tuple(dict.fromkeys((*(_catalogue_gpu(g) for g in request.compare_gpus), gpu)))
    return Resolved(request=request, model=model, preset_id=preset_id, gpu=gpu, kv=kv, weights=weights,
                    usable=usable, n_gpus=n_gpus, compare_kv=compare_kv, compare_gpus=compare_gpus,
                    weights_auto=weights_auto, model_source=source)

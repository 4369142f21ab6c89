"""The planner page's values as two frozen, hashable requests, and the one call each makes.

The page fills :class:`ServerInputs` and :class:`EdgeInputs` with what its widgets show (preset
ids, milliseconds, vendor GB, hertz, 0 for "no target"); the conversions to the library's units
(seconds, bytes, ``None``) happen here, once, so the page only draws and renders and its cache
keys on one object per view. The picked model's config.json goes with the server request, so the
step model times it as ``python -m planner --model`` does, under the engine settings the answer
follows (CUDA graphs unless ``enforce_eager``, ``max_num_batched_tokens``, ``max_num_seqs``).
"""

from __future__ import annotations

from dataclasses import dataclass

from hardware.gpus import get_gpu
from kernels.bench.records import BenchReport
from planner.bandwidth import BandwidthEstimate
from planner.edge import EdgePlan, EdgeWorkload, HistoryPoint
from planner.plan import (
    DEFAULT_MAX_CONTEXT,
    PlanOutcome,
    PlanRequest,
    TrafficKind,
    TrafficSpec,
    run_edge_plan,
    run_plan,
)
from sizing.answer import EngineSettings
from sizing.kv import DEFAULT_BLOCK_SIZE, DEFAULT_USABLE_FRACTION
from sizing.precisions import get_precision
from sizing.request import SizingRequest
from sizing.presets import get_preset
from units import GB

EDGE_DEVICE = "jetson-agx-orin-64gb"  # the robot's module: one GPU sharing memory with the CPU
MS_PER_S = 1e3


@dataclass(frozen=True, kw_only=True)
class ServerInputs:
    """The server view's controls, in the page's units (targets in ms, 0 meaning none)."""

    model_id: str
    kv_dtype: str
    weight_dtype: str
    gpu_id: str
    tp: int = 1
    usable: float = DEFAULT_USABLE_FRACTION
    traffic: TrafficSpec = TrafficSpec()
    max_context: int = DEFAULT_MAX_CONTEXT
    block_size: int = DEFAULT_BLOCK_SIZE
    policy: str = "max"
    source: str = "measured"
    efficiency: float | None = None  # None: the source's own
    tpot_ms: float = 0.0
    ttft_ms: float = 0.0
    rate_per_s: float = 0.0
    engine_settings: EngineSettings = EngineSettings()  # the answer's vLLM settings, also the step model's

    def sizing_request(self, users: int) -> SizingRequest:
        """The sizer's request for the same deployment, for the answer: ``users`` requests of
        ``max_context`` tokens (the engine's ``max_model_len``)."""
        return SizingRequest(model=self.model_id, kv_dtype=self.kv_dtype, weight_dtype=self.weight_dtype,
                             context=self.max_context, users=users, gpu=self.gpu_id, usable_fraction=self.usable,
                             tp=self.tp, block_size=self.block_size)

    def to_request(self) -> PlanRequest:
        """The :class:`PlanRequest` these values describe (ms → s; 0 → no target or rate), with
        the preset's config.json for the step model."""
        preset, engine = get_preset(self.model_id), self.engine_settings
        return PlanRequest(
            model=preset.shape, config=preset.config_bytes, cuda_graphs=not engine.enforce_eager,
            chunk_tokens=engine.max_num_batched_tokens, max_num_seqs=engine.max_num_seqs,
            kv_precision=get_precision(self.kv_dtype, field="kv_dtype"),
            weight_precision=get_precision(self.weight_dtype, field="weight_dtype"),
            gpu=get_gpu(self.gpu_id), tp=self.tp, usable_fraction=self.usable,
            traffic=self.traffic, max_context=self.max_context, block_size=self.block_size,
            policy=self.policy, bandwidth_source=self.source, efficiency=self.efficiency,
            tpot_target_s=self.tpot_ms / MS_PER_S if self.tpot_ms > 0 else None,
            ttft_target_s=self.ttft_ms / MS_PER_S if self.ttft_ms > 0 else None,
            arrival_rate_per_s=self.rate_per_s if self.rate_per_s > 0 else None,
        )


def page_traffic(kind: TrafficKind, *, length: int, mean: float, sigma: float,
                 prompt_share: float, preset: str, trace_path: str | None,
                 trace_bytes: bytes | None, trace_name: str) -> TrafficSpec:
    """The traffic the page's "Request lengths" controls describe."""
    return TrafficSpec(kind=kind, length=int(length), mean=float(mean), sigma=float(sigma),
                       prompt_fraction=float(prompt_share), preset=preset, trace_path=trace_path,
                       trace_bytes=trace_bytes, trace_name=trace_name)


def plan_server(inputs: ServerInputs, measured: BenchReport | None = None) -> PlanOutcome:
    """The capacity plan of the server view (``measured``: a harness run on this GPU)."""
    return run_plan(inputs.to_request(), measured=measured)


@dataclass(frozen=True, kw_only=True)
class EdgeInputs:
    """The edge view's controls: memory shares in vendor GB, frames/s, the control rate in Hz."""

    model_id: str
    kv_dtype: str
    weight_dtype: str
    os_gb: float
    perception_gb: float
    tokens_per_frame: int
    fps: float
    instruction_tokens: int
    control_hz: float
    device_id: str = EDGE_DEVICE

    def workload(self) -> EdgeWorkload:
        """The :class:`EdgeWorkload` in bytes and seconds (one decode step per control period)."""
        return EdgeWorkload(os_bytes=self.os_gb * GB, perception_bytes=self.perception_gb * GB,
                            tokens_per_frame=int(self.tokens_per_frame), frames_per_s=self.fps,
                            instruction_tokens=int(self.instruction_tokens),
                            control_step_s=1.0 / self.control_hz)


def plan_edge_view(inputs: EdgeInputs, estimate: BandwidthEstimate
                   ) -> tuple[EdgePlan, tuple[HistoryPoint, ...]]:
    """The edge plan and its step-against-history curve for the edge view's values."""
    return run_edge_plan(model=get_preset(inputs.model_id).shape,
                         kv_precision=get_precision(inputs.kv_dtype, field="kv_dtype"),
                         weight_precision=get_precision(inputs.weight_dtype, field="weight_dtype"),
                         device=get_gpu(inputs.device_id), workload=inputs.workload(),
                         estimate=estimate)

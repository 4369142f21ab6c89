"""The planner's predictions beside the multi-GPU measurements (``python -m kernels.multi_gpu``).

The kernels package measures and sits below the planner, so it takes its predictions through
:class:`kernels.multi_gpu.records.Predictor`; this module is that predictor, and the command's
entry (``kernels/multi_gpu/__main__.py`` forwards here by module name). Each prediction is a
planner function as the plan uses it, at datasheet figures (efficiency 1, so measured ÷
predicted ≥ 1 is the expected reading):

* **TP step** (one attention layer at TP ``n``): :func:`planner.capacity.decode_step` of the layer
  as :func:`planner.plan.model_cost` sees it (one layer, its output projection's ``hidden × n_q ×
  d`` weights, KV heads split or replicated), plus, for ``n > 1``, the ring all-reduce below.
* **all-reduce** of ``B`` bytes over ``n`` GPUs: :func:`planner.cluster.transfer.transfer_time` of
  the ``2 (n − 1) / n × B`` bytes each rank sends in a ring, over the link.
* **KV transfer**: :func:`planner.cluster.transfer.kv_transfer` of the catalogue model the request
  copies (TP 1 to TP 1: its wire bytes, whole blocks) and ``transfer_time`` of those bytes.

NVLink publishes no latency, so the link's latency counts as zero there (a lower bound on time).

A saved run can be predicted again for another GPU or link, without a GPU:
``with_predictions(read_report(path), PlannerPredictor(gpu_id, link_id))`` (both from
:mod:`kernels.multi_gpu.records`).
"""

from __future__ import annotations

import math
import sys

from hardware.gpus import get_gpu
from hardware.links import get_link
from kernels.bench.records import DecodeShape
from kernels.multi_gpu.records import PredictedTime, TransferResult, ring_bytes_per_rank
from planner.bandwidth import datasheet_estimate
from planner.capacity import decode_step
from planner.cluster.transfer import kv_transfer, transfer_time
from planner.plan import gpu_spec, model_cost
from sizing.catalogue import find_entry
from sizing.models import ModelShape
from sizing.precisions import get_precision

__all__ = ["PlannerPredictor", "planner_predictor", "layer_shape", "transfer_shape"]


def layer_shape(shape: DecodeShape, hidden: int) -> ModelShape:
    """One attention layer of ``shape`` with its output projection (``hidden × n_q × d``
    parameters: the only weights the TP step reads)."""
    return ModelShape(name=f"one layer, {shape.label}", layers=1, q_heads=shape.n_q_heads,
                      kv_heads=shape.n_kv_heads, head_dim=shape.head_dim,
                      params=hidden * shape.n_q_heads * shape.head_dim)


def transfer_shape(result: TransferResult) -> ModelShape:
    """The model a transfer's request copies: the catalogue's, when the record names one whose KV
    geometry it matches; otherwise a shape built from the record (an MLA latent as its rank)."""
    entry = find_entry(result.model) if result.model else None
    if entry is not None:
        s = entry.shape
        latent = s.kv_lora_rank + s.qk_rope_head_dim
        heads, dim = (1, latent) if s.kv_lora_rank else (s.kv_heads, s.head_dim)
        if (s.layers, heads, dim, s.sliding_window) == (result.layers, result.n_kv_heads, result.head_dim,
                                                         result.window):
            return s
    mla = result.layout == "mla"
    return ModelShape(name=result.model or f"custom {result.layout}", layers=result.layers,
                      q_heads=result.n_kv_heads, kv_heads=result.n_kv_heads, params=1,
                      head_dim=result.head_dim, kv_lora_rank=result.head_dim if mla else 0,
                      sliding_window=result.window)


class PlannerPredictor:
    """:class:`kernels.multi_gpu.records.Predictor` from the planner's models, for one catalogue
    GPU and one catalogue link between GPUs."""

    def __init__(self, gpu_id: str = "h200", link_id: str = "nvlink4") -> None:
        self.gpu = gpu_spec(get_gpu(gpu_id))
        self.link = get_link(link_id)
        self.estimate = datasheet_estimate()

    def _ring(self, n_bytes: int, ranks: int) -> tuple[float, str]:
        sent = math.ceil(ring_bytes_per_rank(n_bytes, ranks))
        t = transfer_time(sent, self.link)
        latency = "" if t.latency_published else ", no published latency"
        return float(t.seconds), f"transfer_time of 2(n-1)/n x {n_bytes:,} B over {self.link.id}{latency}"

    def all_reduce(self, n_bytes: int, *, ranks: int) -> PredictedTime:
        seconds, words = self._ring(n_bytes, ranks)
        return PredictedTime(seconds=seconds, model=words)

    def tp_step(self, shape: DecodeShape, *, tp: int, hidden: int) -> PredictedTime:
        bf16 = get_precision(shape.dtype)
        cost = model_cost(layer_shape(shape, hidden), kv_precision=bf16, weight_precision=bf16, tp=tp)
        step = decode_step(cost, self.gpu, self.estimate, batch=shape.batch, context=shape.context)
        words = f"capacity.decode_step, one layer on {self.gpu.name} (datasheet, {step.bound}-bound)"
        if tp == 1:
            return PredictedTime(seconds=step.step_s, model=words)
        ring, ring_words = self._ring(int(shape.batch * hidden * bf16.bytes_per_value), tp)
        return PredictedTime(seconds=step.step_s + ring, model=f"{words} + {ring_words}")

    def transfer(self, result: TransferResult) -> PredictedTime:
        shape = transfer_shape(result)
        plan = kv_transfer(shape, get_precision(result.kv_dtype), prompt_tokens=result.prompt_tokens,
                           block_size=result.block_size)
        wire = plan.wire_bytes_per_decode_rank
        t = transfer_time(wire, self.link)
        words = f"kv_transfer of {shape.name} ({wire:,} B on the wire) + transfer_time over {self.link.id}"
        if wire != result.bytes:
            words += f"; the run moved {result.bytes:,} B"
        return PredictedTime(seconds=float(t.seconds), model=words)


def planner_predictor(gpu_id: str, link_id: str) -> PlannerPredictor:
    """The predictor ``python -m kernels.multi_gpu`` runs with (its ``--gpu`` and ``--link``)."""
    return PlannerPredictor(gpu_id, link_id)


if __name__ == "__main__":
    from kernels.multi_gpu.cli import main

    sys.exit(main(predictor_factory=planner_predictor))

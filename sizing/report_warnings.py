"""Inputs that look like one of the common sizing mistakes, each named by the widget to fix.

A warning never stops the report: the figures are right for what was entered, but what was
entered is probably not what was meant (query heads typed as KV heads, TP past the KV heads,
a usable fraction of 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from sizing.models import AttentionKind
from sizing.presets import presets
from sizing.request import Resolved
from units import UnitSystem, format_bytes


@dataclass(frozen=True, kw_only=True)
class SizingWarning:
    """An input that looks like one of the common mistakes; ``field`` names the widget."""

    code: str
    field: str
    message: str


def _query_heads_as_kv_heads(inp: Resolved) -> SizingWarning | None:
    """An MHA shape that matches a GQA preset in everything but the KV heads."""
    m = inp.model
    if m.attention is not AttentionKind.MHA:
        return None
    for p in presets():
        s = p.shape
        if s.attention is AttentionKind.GQA and (s.layers, s.q_heads, s.head_dim) == (m.layers, m.q_heads, m.head_dim):
            return SizingWarning(
                code="query_heads_as_kv_heads", field="kv_heads",
                message=(f"{m.kv_heads} KV heads equals the query heads, but {p.name} with this shape has "
                         f"{s.kv_heads} KV heads (GQA): using query heads overestimates the cache "
                         f"{m.kv_heads // s.kv_heads}×."),
            )
    return None


def _parallelism(inp: Resolved, weights: int, usable: Fraction) -> list[SizingWarning]:
    m, tp, out = inp.model, inp.tp, []
    if m.attention is not AttentionKind.MLA and tp > m.kv_heads:
        out.append(SizingWarning(
            code="tp_beyond_kv_heads", field="tp",
            message=(f"TP {tp} exceeds the {m.kv_heads} KV heads: each GPU keeps one head, "
                     f"replicated {tp // m.kv_heads}×, so per-GPU KV stops shrinking."),
        ))
    if m.attention is AttentionKind.MLA and tp > 1:
        out.append(SizingWarning(
            code="mla_replicated", field="tp",
            message=f"MLA's latent is not split by TP: all {tp} GPUs hold the full cache.",
        ))
    if inp.usable >= 1:
        out.append(SizingWarning(
            code="usable_fraction_full", field="usable_fraction",
            message="A usable fraction of 1.0 leaves nothing for activations, the CUDA context and the engine; "
                    "plan with headroom (0.9 is the usual figure).",
        ))
    if weights / tp > usable:
        out.append(SizingWarning(
            code="weights_exceed_gpu", field="tp",
            message=(f"The weights per GPU at TP {tp} ({format_bytes(Fraction(weights, tp), UnitSystem.DECIMAL)}) "
                     f"exceed one {inp.gpu.name}'s usable {format_bytes(usable, UnitSystem.DECIMAL)}."),
        ))
    return out


def _context_and_hardware(inp: Resolved, gpus_per_node: int) -> list[SizingWarning]:
    m, out = inp.model, []
    if m.max_context is not None and inp.context > m.max_context:
        out.append(SizingWarning(
            code="context_beyond_model", field="context",
            message=f"{inp.context:,} tokens exceed the model's maximum context of {m.max_context:,}.",
        ))
    window = max((g.window for g in m.layer_groups() if g.window is not None), default=None)
    if window is not None and window >= inp.context:
        out.append(SizingWarning(
            code="window_beyond_context", field="context",
            message=f"The model's {window:,}-token window is not shorter than the {inp.context:,}-token context: "
                    "its windowed layers hold the whole context, as full-attention layers would.",
        ))
    if inp.tp > gpus_per_node:
        out.append(SizingWarning(
            code="tp_spans_nodes", field="tp",
            message=f"TP {inp.tp} spans nodes of {gpus_per_node} GPUs: all-reduces cross the slower inter-node network.",
        ))
    if inp.gpu.shared_memory:
        out.append(SizingWarning(
            code="shared_memory", field="gpu",
            message=f"{inp.gpu.name} shares its memory with the CPU: lower the usable fraction for the OS and other work.",
        ))
    return out


def sizing_warnings(inp: Resolved, weights: int, usable: Fraction) -> tuple[SizingWarning, ...]:
    """Every warning that applies, in a fixed order (shape, parallelism, memory, context, hardware)."""
    gpus_per_node = inp.request.gpus_per_node
    first = _query_heads_as_kv_heads(inp)
    return (*([first] if first else []), *_parallelism(inp, weights, usable),
            *_context_and_hardware(inp, gpus_per_node))

"""The worked answer: each step of the sizing formula with the request's numbers substituted.

Amounts stop at GiB / GB, as the reference page writes them (1,073.7 GB, not 1.1 TB).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from sizing.kv import GpuCount, KVCacheSpec
from sizing.models import AttentionKind, ModelShape
from sizing.precisions import Precision
from sizing.request import Resolved
from units import GIGA_UNIT, UnitSystem, best_unit, format_number, to_unit
from units import format_up_to_giga as _fmt


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


def _values_step(m: ModelShape, spec: KVCacheSpec) -> FormulaStep:
    layers = m.n_kv_layers  # Mamba / linear-attention layers keep a state instead (the per-user step)
    if not layers:
        return FormulaStep(label="KV values per token: none (no layer caches per-token KV)",
                           expression=f"0 of {m.layers} layers hold attention; each sequence keeps a recurrent "
                                      f"state instead", value=0, unit="values")
    if m.attention is AttentionKind.MLA:
        expression = f"{layers} × ({m.kv_lora_rank} + {m.qk_rope_head_dim})"
        label = "KV values per token = layers × (latent + RoPE key), no factor 2 (MLA)"
    elif m.v_head_dim and m.v_head_dim != m.head_dim:
        expression = f"{layers} × {m.kv_heads} × ({m.head_dim} + {m.v_head_dim})"
        label = "KV values per token = layers × KV heads × (K dim + V dim)"
    else:
        expression = f"2 × {layers} × {m.kv_heads} × {m.head_dim}"
        label = "KV values per token = 2 (K and V) × layers × KV heads × head dim"
    if m.n_state_layers:
        label = label.replace("× layers", "× attention layers").replace("= layers", "= attention layers")
    return FormulaStep(label=label, expression=expression, value=spec.values_per_token, unit="values")


def _per_user_expression(m: ModelShape, spec: KVCacheSpec, tokens: int) -> str:
    """Bytes per token × tokens, split into full and sliding-window layers past the window, plus
    the recurrent state of Mamba / linear-attention layers."""
    state = f" + {_fmt(spec.state_bytes_per_sequence)} of recurrent state" if spec.state_bytes_per_sequence else ""
    if m.sliding_window is None or tokens <= m.sliding_window:
        return f"{_fmt(spec.bytes_per_token)} × {tokens:,}{state}"
    per_layer = spec.bytes_per_token / m.n_kv_layers
    parts = []
    if m.n_full_layers:
        parts.append(f"{_fmt(per_layer * m.n_full_layers)} × {tokens:,}")
    parts.append(f"{_fmt(per_layer * m.n_sliding_layers)} × {m.sliding_window:,} (window)")
    return " + ".join(parts) + state


def _tp_step(m: ModelShape, spec: KVCacheSpec, tp: int) -> FormulaStep:
    heads = m.kv_heads_per_gpu(tp)
    if m.attention is AttentionKind.MLA:
        expression = f"{_fmt(spec.bytes_per_token)} (the latent is replicated on all {tp} ranks, not split)"
    elif tp <= m.kv_heads:
        expression = f"{_fmt(spec.bytes_per_token)} ÷ {tp} ({heads} of {m.kv_heads} KV heads per GPU)"
    else:
        expression = (f"{_fmt(spec.bytes_per_token)} ÷ {m.kv_heads} (TP {tp} > {m.kv_heads} KV heads: "
                      f"1 head per GPU, {m.kv_replication(tp)} copies each)")
    return _bytes_step(f"KV per token per GPU at TP {tp}", expression, spec.bytes_per_token_per_gpu,
                       UnitSystem.BINARY)


def formula_steps(spec: KVCacheSpec, inp: Resolved, weights: int, count: GpuCount, usable: Fraction,
                  per_user: Fraction) -> tuple[FormulaStep, ...]:
    """Values per token → bytes per token → per user → all users → weights → total → usable per
    GPU → GPUs needed, and per-GPU bytes per token when TP splits the cache."""
    m, kv, t, users = inp.model, inp.kv, inp.context, inp.users
    b, d = UnitSystem.BINARY, UnitSystem.DECIMAL
    kv_total = users * per_user
    steps = [
        _values_step(m, spec),
        _bytes_step(f"Bytes per token, {kv.label}", f"{spec.values_per_token:,} × {_bpv_text(kv)}",
                    spec.bytes_per_token, b),
        _bytes_step(f"Per user at {t:,} tokens", _per_user_expression(m, spec, t), per_user, b),
        _bytes_step(f"All {users:,} users", f"{_fmt(per_user)} × {users:,}", kv_total, b),
        _bytes_step(f"Weights, {inp.weights.label}",
                    f"{format_number(m.params / 1e9, 2)} B params × {_bpv_text(inp.weights)}", weights, d),
        _bytes_step("Total, weights + KV", f"{_fmt(kv_total, d)} + {_fmt(weights, d)}", weights + kv_total, d),
        _bytes_step(f"Usable per GPU ({inp.gpu.name})",
                    f"{_fmt(inp.gpu.memory_bytes, d)} × {float(inp.usable):g}", usable, d),
        FormulaStep(
            label="GPUs needed (total ÷ usable, rounded up)",
            expression=f"⌈{_fmt(weights + kv_total, d)} ÷ {_fmt(usable, d)}⌉ = ⌈{count.ratio:,.1f}⌉",
            value=count.count, unit="GPUs"),
    ]
    if inp.tp > 1:
        steps.append(_tp_step(m, spec, inp.tp))
    return tuple(steps)

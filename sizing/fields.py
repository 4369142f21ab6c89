"""The sizer's inputs as a page or CLI enters them: the allowed range of each (a
:class:`~inputs.bounds.Bound`, written once) and the conversions from entered units to the
library's (billions of parameters → a count, window 0 → none).

A widget value or a URL parameter is checked against these before it reaches
:class:`~sizing.request.SizingRequest`, so NaN, infinities and out-of-range numbers are refused
with an :class:`~inputs.errors.InputError` naming the field instead of failing deeper down.
"""

from __future__ import annotations

from inputs.bounds import Bound
from sizing.models import MAX_HEAD_DIM, MAX_HEADS, MAX_LAYERS, MAX_PARAMS, MAX_TOKENS, ModelShape
from sizing.request import MAX_USERS

BILLION = 10**9
MAX_GPUS = 1 << 20  # a million GPUs deployed: beyond any cluster, rejects typos

CONTEXT = Bound(field="context", low=1, high=MAX_TOKENS, integer=True, unit="tokens")
USERS = Bound(field="users", low=1, high=MAX_USERS, integer=True, unit="users")
N_GPUS = Bound(field="n_gpus", low=1, high=MAX_GPUS, integer=True, unit="GPUs")
USABLE_FRACTION = Bound(field="usable_fraction", low=0.10, high=1.0)  # the page's slider range
USABLE_STEP = 0.01
LAYERS = Bound(field="layers", low=1, high=MAX_LAYERS, integer=True)
HEAD_DIM = Bound(field="head_dim", low=1, high=MAX_HEAD_DIM, integer=True)
Q_HEADS = Bound(field="q_heads", low=1, high=MAX_HEADS, integer=True)
KV_HEADS = Bound(field="kv_heads", low=1, high=MAX_HEADS, integer=True)
PARAMS_BILLIONS = Bound(field="params", low=0, low_open=True, high=MAX_PARAMS / BILLION, unit="billion")
# 0 means "estimate from the config" for an uploaded config.json.
CONFIG_PARAMS_BILLIONS = Bound(field="params", low=0, high=MAX_PARAMS / BILLION, unit="billion")
SLIDING_WINDOW = Bound(field="sliding_window", low=0, high=MAX_TOKENS, integer=True, unit="tokens (0 = none)")


def on_usable_grid(fraction: float) -> float:
    """``fraction`` on the :data:`USABLE_STEP` grid (a slider's 0.7999999 → 0.8), so links stay short."""
    return round(fraction, 2)


def params_from_billions(billions: float) -> int:
    """A parameter count from billions as entered (70.6 → 70,600,000,000)."""
    return round(PARAMS_BILLIONS.check(billions) * BILLION)


def config_params(billions: float) -> int | None:
    """The parameter count entered beside a config.json; None (estimate it) for 0."""
    return None if CONFIG_PARAMS_BILLIONS.check(billions) == 0 else params_from_billions(billions)


def manual_shape(*, layers: int, q_heads: int, kv_heads: int, head_dim: int, params_billions: float,
                 window: int, name: str = "Manual") -> ModelShape:
    """A shape typed in by hand: every count checked, ``window`` 0 for no sliding window
    (otherwise applied to every layer)."""
    return ModelShape(
        name=name, layers=LAYERS.check(layers), q_heads=Q_HEADS.check(q_heads),
        kv_heads=KV_HEADS.check(kv_heads), head_dim=HEAD_DIM.check(head_dim),
        params=params_from_billions(params_billions), sliding_window=SLIDING_WINDOW.check(window) or None,
    )

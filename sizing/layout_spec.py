"""Mixed layer layouts and recurrent-state sizes typed by hand, parsed into a :class:`ModelShape`.

A layout lists layer kinds with their counts, in one of two forms:

* ``"18 full + 18 sliding(128)"`` — terms joined by ``+`` are laid out once each, in order;
  their counts add up to the number of layers.
* ``"5 sliding(1024) : 1 full"`` — terms joined by ``:`` form one period that repeats until the
  model's ``layers`` are filled (Gemma-3's five local layers, then one global), the last
  period cut short when ``layers`` is not a multiple of it.

A term is ``COUNT KIND`` or ``COUNT KIND(TOKENS)``; ``×`` or ``x`` may stand between the count and
the kind, and ``1,024`` may carry thousands separators. Kinds: ``full`` (GQA / MQA / MHA),
``sliding(W)`` (the last ``W`` tokens), ``chunked(C)`` (Llama 4's local chunks of ``C``), ``mla``
(one latent of ``kv_lora_rank + qk_rope_head_dim``), ``mamba`` and ``linear`` (a constant state
per sequence, whose sizes come from :func:`recurrent_state`), and ``mlp`` for a layer that caches
nothing (Nemotron-H's MLP-only blocks).

The sizer keeps one attention shape, one sliding window, one chunk size and one recurrent kind
per model (as :class:`~sizing.models.ModelShape` does), so a layout that mixes two windows or
``full`` with ``mla`` is refused with a message saying so. Every error is an
:class:`~sizing.errors.SizingError` naming the field: ``layout`` for the text, the state's own
field names (``conv_kernel``, ``heads``, ...) for its sizes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from inputs.bounds import Bound
from inputs.errors import InputError, shown
from sizing.errors import SizingError
from sizing.layers import STATE_KINDS, WINDOWED_KINDS, LayerKind, RecurrentState
from sizing.models import MAX_HEAD_DIM, MAX_LAYERS, MAX_TOKENS, ModelShape

MAX_LAYOUT_CHARS = 400  # "5 sliding(1024) : 1 full" is 24; a layout of 60 distinct terms fits
MAX_TERMS = 64
MAX_STATE_SIZE = 1 << 22  # heads, channels, values per head: far above any published model

# What a user may type for each kind; the canonical names are LayerKind's values.
KIND_WORDS: dict[str, LayerKind | None] = {
    "full": LayerKind.FULL, "global": LayerKind.FULL, "attention": LayerKind.FULL, "gqa": LayerKind.FULL,
    "sliding": LayerKind.SLIDING, "sliding_window": LayerKind.SLIDING, "swa": LayerKind.SLIDING,
    "local": LayerKind.SLIDING,
    "chunked": LayerKind.CHUNKED, "chunked_local": LayerKind.CHUNKED,
    "mla": LayerKind.MLA,
    "mamba": LayerKind.MAMBA, "ssm": LayerKind.MAMBA,
    "linear": LayerKind.LINEAR, "linear_attention": LayerKind.LINEAR, "deltanet": LayerKind.LINEAR,
    "mlp": None, "none": None,
}
_KINDS_HELP = "full, sliding(W), chunked(C), mla, mamba, linear or mlp"
_TERM = re.compile(r"(\d[\d,_]*)\s*[x×*]?\s*([a-z_]+)\s*(?:\(\s*(\d[\d,_]*)\s*\))?")

LAYOUT_LAYERS = Bound(field="layout", low=1, high=MAX_LAYERS, integer=True, unit="layers")
WINDOW = Bound(field="layout", low=1, high=MAX_TOKENS, integer=True, unit="tokens")
# The MLA latent and the recurrent-state sizes, as a page or CLI enters them.
KV_LORA_RANK = Bound(field="kv_lora_rank", low=1, high=MAX_HEAD_DIM, integer=True, unit="values")
QK_ROPE_HEAD_DIM = Bound(field="qk_rope_head_dim", low=0, high=MAX_HEAD_DIM, integer=True, unit="values")
CONV_KERNEL = Bound(field="conv_kernel", low=1, high=1024, integer=True, unit="taps")
CONV_CHANNELS = Bound(field="conv_channels", low=1, high=MAX_STATE_SIZE, integer=True, unit="channels")
STATE_HEADS = Bound(field="heads", low=1, high=MAX_STATE_SIZE, integer=True, unit="heads")
STATE_PER_HEAD = Bound(field="state_per_head", low=1, high=MAX_STATE_SIZE, integer=True, unit="values")
STATE_GROUPS = Bound(field="groups", low=0, high=MAX_STATE_SIZE, integer=True, unit="groups")
GROUP_CHANNELS = Bound(field="group_channels", low=0, high=MAX_STATE_SIZE, integer=True, unit="channels")
STATE_DTYPES = {"bf16": 2, "fp16": 2, "fp32": 4}  # vLLM keeps the state in the model dtype by default


@dataclass(frozen=True, kw_only=True)
class LayoutTerm:
    """``count`` layers of ``kind`` (None: caches nothing), with the window or chunk of windowed kinds."""

    kind: LayerKind | None
    count: int
    window: int | None = None


@dataclass(frozen=True, kw_only=True)
class Layout:
    """A parsed layout: each layer's kind and the one window / chunk size the windowed kinds use."""

    kinds: tuple[LayerKind | None, ...]
    sliding_window: int | None
    chunk_size: int | None
    repeating: bool  # a ``:`` period repeated over the layers, not a ``+`` list

    @property
    def layers(self) -> int:
        return len(self.kinds)

    @property
    def present(self) -> frozenset[LayerKind]:
        return frozenset(kind for kind in self.kinds if kind is not None)

    @property
    def state_kind(self) -> LayerKind | None:
        """``mamba`` or ``linear_attention`` when the layout has recurrent layers, else None."""
        return next(iter(self.present & STATE_KINDS), None)

    @property
    def has_mla(self) -> bool:
        return LayerKind.MLA in self.present


def _checked(bound: Bound, value: object) -> int:
    """``value`` within ``bound``, refused as this library's own error (naming the bound's field)."""
    try:
        return bound.check(value)
    except SizingError:
        raise
    except InputError as exc:
        raise SizingError(exc.field, exc.message) from None


def _number(text: str, bound: Bound, what: str) -> int:
    try:
        return bound.parse(text)
    except InputError:
        raise SizingError("layout", f"{what} must be {bound.describe()}, got {shown(text)}") from None


def _term(text: str) -> LayoutTerm:
    match = _TERM.fullmatch(text.strip().lower())
    if match is None:
        raise SizingError("layout", f"{shown(text.strip())} is not COUNT KIND or COUNT KIND(TOKENS), "
                                    f"e.g. 18 full or 5 sliding(1024)")
    count_text, word, window_text = match.groups()
    if word not in KIND_WORDS:
        raise SizingError("layout", f"unknown layer kind {shown(word)}; use {_KINDS_HELP}")
    kind = KIND_WORDS[word]
    count = _number(count_text, LAYOUT_LAYERS, f"the count of {word}")
    if kind in WINDOWED_KINDS:
        if window_text is None:
            raise SizingError("layout", f"{word} layers need their window in tokens, e.g. {word}(4096)")
        return LayoutTerm(kind=kind, count=count, window=_number(window_text, WINDOW, f"the {word} window"))
    if window_text is not None:
        raise SizingError("layout", f"{word} layers take no window (only sliding and chunked do)")
    return LayoutTerm(kind=kind, count=count)


def parse_terms(text: object) -> tuple[tuple[LayoutTerm, ...], bool]:
    """The terms of a layout and whether they repeat (``:``), syntax only; :class:`SizingError` on ``layout``."""
    if not isinstance(text, str):
        raise SizingError("layout", f"must be text, got {type(text).__name__}")
    if len(text) > MAX_LAYOUT_CHARS:
        raise SizingError("layout", f"{len(text):,} characters; at most {MAX_LAYOUT_CHARS}")
    if not text.strip():
        raise SizingError("layout", "is empty; e.g. 18 full + 18 sliding(128) or 5 sliding(1024) : 1 full")
    if "+" in text and ":" in text:
        raise SizingError("layout", "use + (each term once) or : (a repeating period), not both")
    repeating = ":" in text
    parts = text.split(":" if repeating else "+")
    if len(parts) > MAX_TERMS:
        raise SizingError("layout", f"{len(parts)} terms; at most {MAX_TERMS}")
    return tuple(_term(part) for part in parts), repeating


def _one_value(terms: tuple[LayoutTerm, ...], kind: LayerKind, word: str) -> int | None:
    values = sorted({t.window for t in terms if t.kind is kind})
    if len(values) > 1:
        raise SizingError("layout", f"one {word} per model, got {' and '.join(f'{v:,}' for v in values)}")
    return values[0] if values else None


def parse_layout(text: object, *, layers: int | None = None) -> Layout:
    """The layout ``text`` describes (module docstring), over ``layers`` layers when given.

    A ``+`` list must add up to ``layers`` (when given); a ``:`` period needs ``layers`` to
    know how often it repeats.
    """
    terms, repeating = parse_terms(text)
    period = [term.kind for term in terms for _ in range(term.count)]
    if repeating:
        if layers is None:
            raise SizingError("layout", "a repeating period (:) needs the number of layers")
        layers = _checked(LAYOUT_LAYERS, layers)
        if len(period) > MAX_LAYERS:
            raise SizingError("layout", f"one period has {len(period):,} layers; at most {MAX_LAYERS:,}")
        kinds = tuple(period[i % len(period)] for i in range(layers))
    else:
        if len(period) > MAX_LAYERS:
            raise SizingError("layout", f"{len(period):,} layers; at most {MAX_LAYERS:,}")
        if layers is not None and layers != len(period):
            raise SizingError("layout", f"lists {len(period):,} layers, but the model has {layers:,}")
        kinds = tuple(period)
    present = {kind for kind in kinds if kind is not None}
    if not present:
        raise SizingError("layout", "no layer caches anything (every layer is mlp)")
    if {LayerKind.FULL, LayerKind.MLA} <= present:
        raise SizingError("layout", "full and mla layers in one model: the sizer takes one attention shape per model")
    if len(present & STATE_KINDS) > 1:
        raise SizingError("layout", "mamba and linear layers in one model: one recurrent state per model")
    return Layout(kinds=kinds, sliding_window=_one_value(terms, LayerKind.SLIDING, "sliding window"),
                  chunk_size=_one_value(terms, LayerKind.CHUNKED, "chunk size"), repeating=repeating)


def recurrent_state(kind: LayerKind | str, *, conv_kernel: int, conv_channels: int, heads: int, state_per_head: int,
                    groups: int = 0, group_channels: int = 0, dtype: str = "bf16",
                    ssm_dtype: str | None = None) -> RecurrentState:
    """The per-sequence state of one ``kind`` layer from sizes as entered, each checked against its bound.

    Parameters
    ----------
    conv_kernel : causal-convolution width (its state keeps ``conv_kernel − 1`` inputs).
    conv_channels : convolution channels split over TP (Mamba2: the inner width).
    heads, state_per_head : recurrent-state heads and values per head
        (Mamba2 ``head_dim × state_size``; gated delta net ``k_dim × v_dim``).
    groups, group_channels : Mamba2 B/C groups and their channels (``2 × state_size``); 0 for none.
    dtype : ``bf16``, ``fp16`` or ``fp32``: the convolution state's (and the recurrent state's
        unless ``ssm_dtype`` is given).
    ssm_dtype : the recurrent state's dtype (vLLM's ``mamba_ssm_cache_dtype``); None: ``dtype``.
    """
    if dtype not in STATE_DTYPES:
        raise SizingError("state_dtype", f"must be one of {', '.join(STATE_DTYPES)}, got {shown(dtype)}")
    if ssm_dtype is not None and (not isinstance(ssm_dtype, str) or ssm_dtype not in STATE_DTYPES):
        raise SizingError("ssm_dtype", f"must be one of {', '.join(STATE_DTYPES)}, got {shown(ssm_dtype)}")
    if kind not in set(LayerKind) or LayerKind(kind) not in STATE_KINDS:
        raise SizingError("state", f"a recurrent state belongs to mamba or linear layers, not {kind}")
    return RecurrentState(
        kind=LayerKind(kind), conv_kernel=_checked(CONV_KERNEL, conv_kernel),
        conv_channels=_checked(CONV_CHANNELS, conv_channels), heads=_checked(STATE_HEADS, heads),
        state_per_head=_checked(STATE_PER_HEAD, state_per_head), groups=_checked(STATE_GROUPS, groups),
        group_channels=_checked(GROUP_CHANNELS, group_channels),
        dtype_bytes=STATE_DTYPES[dtype],
        recurrent_dtype_bytes=None if ssm_dtype is None else STATE_DTYPES[ssm_dtype],
    )


# The CLI's --state text: KEY=VALUE pairs, names as recurrent_state's parameters (short forms too).
_STATE_KEYS = {"kernel": "conv_kernel", "conv_kernel": "conv_kernel", "channels": "conv_channels",
               "conv_channels": "conv_channels", "heads": "heads", "per_head": "state_per_head",
               "state_per_head": "state_per_head", "groups": "groups", "group_channels": "group_channels",
               "dtype": "dtype", "ssm_dtype": "ssm_dtype"}
_STATE_BOUNDS = {"conv_kernel": CONV_KERNEL, "conv_channels": CONV_CHANNELS, "heads": STATE_HEADS,
                 "state_per_head": STATE_PER_HEAD, "groups": STATE_GROUPS, "group_channels": GROUP_CHANNELS}
_STATE_REQUIRED = ("conv_kernel", "conv_channels", "heads", "state_per_head")


def parse_state(text: object, kind: LayerKind | str) -> RecurrentState:
    """``"kernel=4 channels=8192 heads=128 per_head=8192 groups=8 group_channels=256 dtype=bf16"``
    → the :class:`RecurrentState` of one ``kind`` layer; errors name ``state``."""
    if not isinstance(text, str) or len(text) > MAX_LAYOUT_CHARS:
        raise SizingError("state", f"must be KEY=VALUE pairs of at most {MAX_LAYOUT_CHARS} characters")
    sizes: dict[str, int | str] = {}
    for pair in text.replace(",", " ").split():
        key, sep, value = pair.partition("=")
        name = _STATE_KEYS.get(key.strip().lower())
        if not sep or name is None:
            raise SizingError("state", f"{shown(pair)} is not KEY=VALUE with KEY one of "
                                       f"kernel, channels, heads, per_head, groups, group_channels, dtype, ssm_dtype")
        if name in sizes:
            raise SizingError("state", f"{key} is given twice")
        if name in ("dtype", "ssm_dtype"):
            sizes[name] = value.strip().lower()
            continue
        try:
            sizes[name] = _STATE_BOUNDS[name].parse(value)
        except InputError as exc:
            raise SizingError("state", f"{key}: {exc.message}") from None
    missing = [name for name in _STATE_REQUIRED if name not in sizes]
    if missing:
        raise SizingError("state", f"missing {', '.join(missing)} "
                                   "(e.g. kernel=4 channels=8192 heads=128 per_head=8192)")
    return recurrent_state(kind, **sizes)


def layout_shape(layout: Layout, *, q_heads: int, kv_heads: int, head_dim: int, params: int,
                 kv_lora_rank: int = 0, qk_rope_head_dim: int = 0, state: RecurrentState | None = None,
                 name: str = "Manual") -> ModelShape:
    """A :class:`ModelShape` with ``layout``'s layers; the latent sizes are used only by ``mla``
    layouts and ``state`` only by recurrent ones (it must then be given, for that kind)."""
    if layout.has_mla:
        kv_lora_rank = _checked(KV_LORA_RANK, kv_lora_rank)
        qk_rope_head_dim = _checked(QK_ROPE_HEAD_DIM, qk_rope_head_dim)
    else:
        kv_lora_rank = qk_rope_head_dim = 0
    if layout.state_kind is None:
        state = None
    elif state is None:
        raise SizingError("state", f"{layout.state_kind} layers need their state sizes")
    elif state.kind is not layout.state_kind:
        raise SizingError("state", f"the state is for {state.kind} layers, the layout has {layout.state_kind}")
    return ModelShape(
        name=name, layers=layout.layers, q_heads=q_heads, kv_heads=kv_heads, head_dim=head_dim, params=params,
        kv_lora_rank=kv_lora_rank, qk_rope_head_dim=qk_rope_head_dim, layer_kinds=layout.kinds,
        sliding_window=layout.sliding_window, chunk_size=layout.chunk_size, state=state,
    )

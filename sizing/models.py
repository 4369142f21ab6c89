"""Model shape: what decides the KV cache (layers, KV heads, head dim, attention kind, windows)
and the weights (parameter count).

KV values cached per token and layer:

* MHA / GQA / MQA: ``2 × kv_heads × head_dim`` (a key and a value vector per KV head; query
  heads do not count: under GQA several query heads share one KV head).
* MLA (DeepSeek-V2/V3): one compressed latent of ``kv_lora_rank + qk_rope_head_dim`` values,
  no factor 2, and the same latent is replicated on every tensor-parallel rank.

Sliding-window layers keep at most ``sliding_window`` tokens, so a sequence of ``T`` tokens costs
``min(T, window)`` tokens on those layers and ``T`` on the others; chunked-local layers hold at
most one ``chunk_size`` chunk. Mamba and linear-attention layers cache no per-token KV: each
holds a constant ``state`` per sequence. ``layer_kinds`` gives each layer's kind (None for a
layer that caches nothing, such as Nemotron-H's MLP-only layers); :meth:`ModelShape.layer_groups`
groups the layers by kind and window for the byte arithmetic in :mod:`sizing.kv`.
"""

from __future__ import annotations

import functools

from dataclasses import dataclass, replace
from enum import StrEnum

from sizing.errors import SizingError
from sizing.layers import ATTENTION_KINDS, STATE_KINDS, LayerGroup, LayerKind, RecurrentState

# Upper bounds that no real model approaches; they reject hostile or mistyped input (a config
# with 10**30 layers) before it reaches arithmetic or charts.
MAX_LAYERS = 10_000
MAX_HEADS = 100_000
MAX_HEAD_DIM = 1 << 16
MAX_PARAMS = 10**15  # a quadrillion parameters: 1,000× today's largest published models
MAX_TOKENS = 1 << 40  # ~10**12 tokens: far beyond any context window
MAX_TP_RANKS = 4096  # ranks one parallel group may have: far beyond any deployment, rejects typos


class AttentionKind(StrEnum):
    """How keys and values are stored."""

    MHA = "MHA"  # one KV head per query head
    GQA = "GQA"  # groups of query heads share a KV head
    MQA = "MQA"  # all query heads share one KV head
    MLA = "MLA"  # one low-rank latent per token and layer (DeepSeek)


def check_int(name: str, value: object, *, low: int = 1, high: int | None = None) -> int:
    """``value`` as an int in ``[low, high]``; bools and non-integers raise :class:`SizingError`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise SizingError(name, f"must be an integer, got {value!r}")
    if value < low:
        raise SizingError(name, f"must be at least {low:,}, got {value:,}")
    if high is not None and value > high:
        raise SizingError(name, f"must be at most {high:,}, got {value:,}")
    return value


@dataclass(frozen=True, kw_only=True)
class ModelShape:
    """The parts of a transformer that size its KV cache and weights.

    Counts are plain integers; ``params`` is the total parameter count (all experts of a MoE),
    which with the weight precision gives the weight bytes.
    """

    layers: int
    q_heads: int
    kv_heads: int
    head_dim: int  # per head, values (not bytes); for MLA the K head dim (nope + rope)
    params: int
    name: str = "custom"
    v_head_dim: int | None = None  # when V heads are narrower than K heads (MLA); None: head_dim
    kv_lora_rank: int = 0  # MLA latent width; 0: not MLA
    qk_rope_head_dim: int = 0  # MLA: decoupled RoPE key, cached next to the latent
    sliding_window: int | None = None  # tokens kept by sliding-window layers
    sliding_layers: tuple[int, ...] | None = None  # their indices; None with a window: all layers
    num_experts: int = 0  # routed experts per MoE layer; 0: dense
    experts_per_token: int = 0
    active_params: int | None = None  # per token, for MoE
    max_context: int | None = None  # max_position_embeddings, when known
    tied_embeddings: bool | None = None  # informational
    # Per-layer kinds when the model mixes them; None: derived from the sliding and MLA fields.
    # Full and MLA entries follow kv_lora_rank (one attention shape per model).
    layer_kinds: tuple[LayerKind | None, ...] | None = None
    chunk_size: int | None = None  # tokens per attention chunk of chunked-local layers
    state: RecurrentState | None = None  # per-sequence state of the mamba / linear layers
    weight_format: str | None = None  # the format the config's quantization_config selects
    quantized_params: int | None = None  # parameters stored in that format (the rest bf16)
    linear_params: int | None = None  # parameters in linear layers (what a quantiser converts; from the config)
    safetensors_bytes: int | None = None  # the Hub's safetensors total, when known

    def __post_init__(self) -> None:
        check_int("layers", self.layers, high=MAX_LAYERS)
        check_int("q_heads", self.q_heads, high=MAX_HEADS)
        check_int("kv_heads", self.kv_heads, high=MAX_HEADS)
        check_int("head_dim", self.head_dim, high=MAX_HEAD_DIM)
        check_int("params", self.params, high=MAX_PARAMS)
        if self.v_head_dim is not None:
            check_int("v_head_dim", self.v_head_dim, high=MAX_HEAD_DIM)
        check_int("kv_lora_rank", self.kv_lora_rank, low=0, high=MAX_HEAD_DIM)
        check_int("qk_rope_head_dim", self.qk_rope_head_dim, low=0, high=MAX_HEAD_DIM)
        if self.kv_lora_rank == 0:
            # GQA needs whole groups of query heads per KV head.
            if self.kv_heads > self.q_heads:
                raise SizingError("kv_heads", f"{self.kv_heads} KV heads exceed {self.q_heads} query heads")
            if self.q_heads % self.kv_heads:
                raise SizingError(
                    "kv_heads", f"{self.q_heads} query heads do not split into groups of {self.kv_heads} KV heads"
                )
        check_int("num_experts", self.num_experts, low=0, high=MAX_HEADS)
        check_int("experts_per_token", self.experts_per_token, low=0, high=max(self.num_experts, 0))
        if self.active_params is not None:
            check_int("active_params", self.active_params, high=self.params)
        if self.max_context is not None:
            check_int("max_context", self.max_context, high=MAX_TOKENS)
        if self.quantized_params is not None:
            check_int("quantized_params", self.quantized_params, low=0, high=self.params)
        if self.linear_params is not None:
            check_int("linear_params", self.linear_params, low=0, high=self.params)
        if self.safetensors_bytes is not None:
            check_int("safetensors_bytes", self.safetensors_bytes, high=8 * MAX_PARAMS)
        if self.layer_kinds is not None:
            self._check_layer_kinds()
        if self.sliding_window is None:
            if self.sliding_layers:
                raise SizingError("sliding_window", "sliding layers are given but no window")
            object.__setattr__(self, "sliding_layers", ())
        else:
            check_int("sliding_window", self.sliding_window, high=MAX_TOKENS)
            layers = tuple(range(self.layers)) if self.sliding_layers is None else tuple(self.sliding_layers)
            for index in layers:
                check_int("sliding_layers", index, low=0, high=self.layers - 1)
            if len(set(layers)) != len(layers):
                raise SizingError("sliding_layers", "layer indices repeat")
            object.__setattr__(self, "sliding_layers", tuple(sorted(layers)))

    def _check_layer_kinds(self) -> None:
        """Validate explicit ``layer_kinds`` and derive ``sliding_layers`` from them."""
        kinds = tuple(self.layer_kinds)
        if len(kinds) != self.layers:
            raise SizingError("layer_kinds", f"has {len(kinds)} entries for {self.layers} layers")
        try:
            kinds = tuple(None if kind is None else LayerKind(kind) for kind in kinds)
        except ValueError:
            bad = next(k for k in kinds if k is not None and k not in set(LayerKind))
            raise SizingError("layer_kinds", f"unknown layer kind {bad!r:.40}; use one of "
                                             f"{', '.join(LayerKind)}") from None
        object.__setattr__(self, "layer_kinds", kinds)
        present = set(kinds)
        if not present & ATTENTION_KINDS and not present & STATE_KINDS:
            raise SizingError("layer_kinds", "no layer caches anything")
        sliding = tuple(i for i, kind in enumerate(kinds) if kind is LayerKind.SLIDING)
        if sliding and self.sliding_window is None:
            raise SizingError("sliding_window", "missing, but some layers use a sliding window")
        if not sliding:
            object.__setattr__(self, "sliding_window", None)
        elif self.sliding_layers is not None and tuple(sorted(self.sliding_layers)) != sliding:
            raise SizingError("sliding_layers", "disagree with the sliding layers of layer_kinds")
        object.__setattr__(self, "sliding_layers", sliding or None)
        if LayerKind.CHUNKED in present:
            check_int("chunk_size", self.chunk_size, high=MAX_TOKENS)
        else:
            object.__setattr__(self, "chunk_size", None)
        if present & STATE_KINDS:
            if not isinstance(self.state, RecurrentState):
                raise SizingError("state", "mamba / linear-attention layers need their state sizes")
            if len(present & STATE_KINDS) > 1 or self.state.kind not in present:
                raise SizingError("state", f"the state is for {self.state.kind} layers, "
                                           f"the layers are {', '.join(sorted(present & STATE_KINDS))}")
        else:
            object.__setattr__(self, "state", None)

    # ---- layer kinds -------------------------------------------------------------------------
    @property
    def kinds(self) -> tuple[LayerKind | None, ...]:
        """Each decoder layer's kind (None: caches nothing)."""
        attention = LayerKind.MLA if self.kv_lora_rank else LayerKind.FULL
        if self.layer_kinds is None:
            sliding = set(self.sliding_layers or ())
            return tuple(LayerKind.SLIDING if i in sliding else attention for i in range(self.layers))
        return tuple(attention if kind in (LayerKind.FULL, LayerKind.MLA) else kind for kind in self.layer_kinds)

    def _window(self, kind: LayerKind) -> int | None:
        if kind is LayerKind.SLIDING:
            return self.sliding_window
        if kind is LayerKind.CHUNKED:
            return self.chunk_size
        return None

    def layer_groups(self, tp: int = 1) -> tuple[LayerGroup, ...]:
        """The layers grouped by (kind, window), in order of first layer index, at TP ``tp``.

        Attention groups carry the KV values one layer caches per token on one rank (KV heads
        split or replicated as :meth:`kv_heads_per_gpu`; the MLA latent replicated); recurrent
        groups carry the state one layer holds per sequence on one rank (split by heads).
        Computed once per shape and TP: the charts ask for them hundreds of times per rerun.
        """
        self.check_tp(tp)
        return _layer_groups(self, tp)

    @property
    def n_kv_layers(self) -> int:
        """Layers that cache per-token KV (attention of any kind)."""
        return sum(kind in ATTENTION_KINDS for kind in self.kinds)

    @property
    def n_state_layers(self) -> int:
        """Mamba / linear-attention layers (a constant state per sequence each)."""
        return sum(kind in STATE_KINDS for kind in self.kinds)

    def state_values_per_sequence_per_gpu(self, tp: int = 1) -> int:
        """Recurrent-state values one sequence holds on one rank, over all state layers."""
        if self.state is None or not self.n_state_layers:
            return 0
        return self.n_state_layers * self.state.values_per_gpu(tp)

    def state_bytes_per_sequence_per_gpu(self, tp: int = 1) -> int:
        """Recurrent-state bytes one sequence holds on one rank, over all state layers (each state
        tensor in its own dtype)."""
        if self.state is None or not self.n_state_layers:
            return 0
        return self.n_state_layers * self.state.bytes_per_gpu(tp)

    @property
    def state_bytes_per_sequence(self) -> int:
        """Recurrent-state bytes of one sequence, whole model (TP 1)."""
        return self.state_bytes_per_sequence_per_gpu(1)

    # ---- attention kind and per-token values -------------------------------------------------
    @property
    def attention(self) -> AttentionKind:
        """MLA when a latent is cached, else MHA / MQA / GQA from the head counts."""
        if self.kv_lora_rank:
            return AttentionKind.MLA
        if self.kv_heads == self.q_heads:
            return AttentionKind.MHA
        if self.kv_heads == 1:
            return AttentionKind.MQA
        return AttentionKind.GQA

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def values_per_layer_per_token(self) -> int:
        """KV values one layer caches for one token (K and V for MHA/GQA/MQA; one latent for MLA)."""
        if self.kv_lora_rank:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return self.kv_heads * (self.head_dim + (self.v_head_dim or self.head_dim))

    @property
    def values_per_token(self) -> int:
        """KV values per token over all attention layers, while the context is within every window."""
        return self.n_kv_layers * self.values_per_layer_per_token

    @property
    def n_sliding_layers(self) -> int:
        return len(self.sliding_layers or ())

    @property
    def n_chunked_layers(self) -> int:
        return sum(kind is LayerKind.CHUNKED for kind in self.kinds)

    @property
    def n_full_layers(self) -> int:
        """Attention layers whose cache grows with the whole sequence (full or MLA)."""
        return sum(kind in (LayerKind.FULL, LayerKind.MLA) for kind in self.kinds)

    def cached_layer_tokens(self, tokens: int) -> int:
        """Σ over attention layers of tokens held for a ``tokens``-long sequence (windows capped)."""
        return sum(group.count * group.cached_tokens(tokens) for group in self.layer_groups() if group.is_attention)

    @property
    def longest_window(self) -> int | None:
        """Tokens after which no layer's cache grows: the largest window when every attention
        layer is windowed, None when some layer keeps everything."""
        if self.n_full_layers:
            return None
        windows = [g.window for g in self.layer_groups() if g.window is not None]
        return max(windows, default=0)

    def values_for_tokens(self, tokens: int) -> int:
        """KV values cached for one sequence of ``tokens`` tokens (sliding windows capped)."""
        return self.values_per_layer_per_token * self.cached_layer_tokens(tokens)

    # ---- tensor parallelism ------------------------------------------------------------------
    def check_tp(self, tp: int) -> int:
        """``tp`` validated against the KV heads (vLLM's rule: one must divide the other)."""
        check_int("tp", tp, high=MAX_TP_RANKS)
        if self.state is not None:
            self.state.check_tp(tp)
        if self.kv_lora_rank or self.kv_heads % tp == 0 or tp % self.kv_heads == 0:
            return tp
        raise SizingError("tp", f"TP {tp} neither divides nor is a multiple of the {self.kv_heads} KV heads")

    def kv_heads_per_gpu(self, tp: int) -> int:
        """KV heads each TP rank stores: n_kv / TP while TP ≤ n_kv, else one (replicated)."""
        self.check_tp(tp)
        if self.kv_lora_rank:
            return 1  # the latent is not split into heads
        return max(self.kv_heads // tp, 1)

    def kv_replication(self, tp: int) -> int:
        """How many ranks hold a copy of each KV head (of the latent, for MLA)."""
        self.check_tp(tp)
        if self.kv_lora_rank:
            return tp
        return max(tp // self.kv_heads, 1)

    def values_per_layer_per_token_per_gpu(self, tp: int) -> int:
        """KV values one rank caches per token and layer at tensor parallelism ``tp``."""
        if self.kv_lora_rank:
            self.check_tp(tp)
            return self.values_per_layer_per_token  # replicated on every rank
        return self.kv_heads_per_gpu(tp) * (self.head_dim + (self.v_head_dim or self.head_dim))

    def values_for_tokens_per_gpu(self, tokens: int, tp: int) -> int:
        return self.values_per_layer_per_token_per_gpu(tp) * self.cached_layer_tokens(tokens)

    # ---- comparisons -------------------------------------------------------------------------
    def without_gqa(self) -> ModelShape:
        """The same model with one KV head per query head (MHA): the "without GQA" comparison.

        For MLA this is the MHA the latent replaces (K of head_dim, V of v_head_dim per head).
        """
        return replace(self, name=f"{self.name} (MHA)", kv_heads=self.q_heads, kv_lora_rank=0, qk_rope_head_dim=0)

    @property
    def layout(self) -> str:
        """The layer kinds in order of first layer: ``"5 × sliding_window(1,024) + 1 × full …"``."""
        return " + ".join(group.label for group in self.layer_groups())

    @property
    def summary(self) -> str:
        """One line: ``80 layers · 64 q / 8 KV heads · d 128 · GQA · 70.6 B params``."""
        parts = [f"{self.layers} layers"]
        if self.kv_lora_rank:
            parts.append(f"{self.q_heads} heads · MLA latent {self.kv_lora_rank}+{self.qk_rope_head_dim}")
        else:
            parts.append(f"{self.q_heads} q / {self.kv_heads} KV heads · d {self.head_dim} · {self.attention}")
        if self.sliding_window:
            parts.append(f"window {self.sliding_window:,} on {self.n_sliding_layers}/{self.layers} layers")
        if self.chunk_size:
            parts.append(f"chunks of {self.chunk_size:,} on {self.n_chunked_layers}/{self.layers} layers")
        if self.n_state_layers:
            parts.append(f"{self.state.kind} state on {self.n_state_layers}/{self.layers} layers")
        if self.num_experts:
            parts.append(f"MoE {self.experts_per_token}/{self.num_experts} experts")
        parts.append(f"{self.params / 1e9:,.1f} B params")
        return " · ".join(parts)




@functools.lru_cache(maxsize=512)
def _layer_groups(model: ModelShape, tp: int) -> tuple[LayerGroup, ...]:
    members: dict[tuple[LayerKind, int | None], list[int]] = {}
    for index, kind in enumerate(model.kinds):
        if kind is not None:
            members.setdefault((kind, model._window(kind)), []).append(index)
    groups = []
    for (kind, window), indices in members.items():
        if kind in STATE_KINDS:
            groups.append(LayerGroup(kind=kind, layer_indices=tuple(indices),
                                     state_values_per_sequence=model.state.values_per_gpu(tp),
                                     state_bytes_per_sequence=model.state.bytes_per_gpu(tp)))
        else:
            groups.append(LayerGroup(kind=kind, layer_indices=tuple(indices), window=window,
                                     kv_values_per_token=model.values_per_layer_per_token_per_gpu(tp)))
    return tuple(groups)

"""Model shape: what decides the KV cache (layers, KV heads, head dim, attention kind, windows)
and the weights (parameter count).

KV values cached per token and layer:

* MHA / GQA / MQA: ``2 × kv_heads × head_dim`` (a key and a value vector per KV head; query
  heads do not count: under GQA several query heads share one KV head).
* MLA (DeepSeek-V2/V3): one compressed latent of ``kv_lora_rank + qk_rope_head_dim`` values,
  no factor 2, and the same latent is replicated on every tensor-parallel rank.

Sliding-window layers keep at most ``sliding_window`` tokens, so a sequence of ``T`` tokens costs
``min(T, window)`` tokens on those layers and ``T`` on the others.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from sizing.errors import SizingError

# Upper bounds that no real model approaches; they reject hostile or mistyped input (a config
# with 10**30 layers) before it reaches arithmetic or charts.
MAX_LAYERS = 10_000
MAX_HEADS = 100_000
MAX_HEAD_DIM = 1 << 16
MAX_PARAMS = 10**15  # a quadrillion parameters: 1,000× today's largest published models
MAX_TOKENS = 1 << 40  # ~10**12 tokens: far beyond any context window


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
        """KV values per token over all layers, while the context is within every window."""
        return self.layers * self.values_per_layer_per_token

    @property
    def n_sliding_layers(self) -> int:
        return len(self.sliding_layers or ())

    @property
    def n_full_layers(self) -> int:
        return self.layers - self.n_sliding_layers

    def cached_layer_tokens(self, tokens: int) -> int:
        """Σ over layers of tokens held for a ``tokens``-long sequence (windows capped)."""
        if self.sliding_window is None:
            return self.layers * tokens
        return self.n_full_layers * tokens + self.n_sliding_layers * min(tokens, self.sliding_window)

    def values_for_tokens(self, tokens: int) -> int:
        """KV values cached for one sequence of ``tokens`` tokens (sliding windows capped)."""
        return self.values_per_layer_per_token * self.cached_layer_tokens(tokens)

    # ---- tensor parallelism ------------------------------------------------------------------
    def check_tp(self, tp: int) -> int:
        """``tp`` validated against the KV heads (vLLM's rule: one must divide the other)."""
        check_int("tp", tp, high=4096)
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
    def summary(self) -> str:
        """One line: ``80 layers · 64 q / 8 KV heads · d 128 · GQA · 70.6 B params``."""
        parts = [f"{self.layers} layers"]
        if self.kv_lora_rank:
            parts.append(f"{self.q_heads} heads · MLA latent {self.kv_lora_rank}+{self.qk_rope_head_dim}")
        else:
            parts.append(f"{self.q_heads} q / {self.kv_heads} KV heads · d {self.head_dim} · {self.attention}")
        if self.sliding_window:
            parts.append(f"window {self.sliding_window:,} on {self.n_sliding_layers}/{self.layers} layers")
        if self.num_experts:
            parts.append(f"MoE {self.experts_per_token}/{self.num_experts} experts")
        parts.append(f"{self.params / 1e9:,.1f} B params")
        return " · ".join(parts)



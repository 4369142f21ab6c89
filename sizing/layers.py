"""What each decoder layer caches: its kind, and the values it holds per token or per sequence.

Attention layers cache keys and values (or one latent) per token; recurrent layers hold a
constant state per sequence, whatever its length:

* ``full`` — full causal attention (MHA / GQA / MQA): every token, ``2 × kv_heads × head_dim``
  values per token.
* ``sliding_window`` — the last ``window`` tokens only (Mistral-7B-v0.1, Gemma-2/3, gpt-oss).
* ``chunked_local`` — attention inside fixed chunks of ``window`` tokens (Llama 4's
  ``attention_chunk_size``); up to a whole chunk is held, so ``min(tokens, window)`` is the
  worst case.
* ``mla`` — one compressed latent of ``kv_lora_rank + qk_rope_head_dim`` values per token
  (DeepSeek-V2/V3, Kimi K2), no factor 2, replicated on every tensor-parallel rank.
* ``mamba`` — a Mamba/SSM layer: a causal-convolution state plus a recurrent SSM state.
* ``linear_attention`` — linear attention such as the gated delta net (Qwen3-Next): a
  convolution state plus a ``k_dim × v_dim`` matrix per head.

:class:`LayerGroup` is the unit callers size with: layers of one kind and one window that cache
the same number of values per GPU. :class:`RecurrentState` gives the state size of one
recurrent layer, split over tensor parallelism as vLLM shards it (by heads and channels).
Byte counts (precision, scales) are not made here; :mod:`sizing.kv` turns values into bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from sizing.errors import SizingError


class LayerKind(StrEnum):
    """How one decoder layer keeps its context."""

    FULL = "full"  # full causal attention, GQA / MQA / MHA
    SLIDING = "sliding_window"  # the last ``window`` tokens
    CHUNKED = "chunked_local"  # attention within chunks of ``window`` tokens (Llama 4)
    MLA = "mla"  # one low-rank latent per token (DeepSeek)
    MAMBA = "mamba"  # Mamba / SSM: conv state + SSM state per sequence
    LINEAR = "linear_attention"  # gated delta net etc.: conv state + a matrix state per head


ATTENTION_KINDS = frozenset({LayerKind.FULL, LayerKind.SLIDING, LayerKind.CHUNKED, LayerKind.MLA})
STATE_KINDS = frozenset({LayerKind.MAMBA, LayerKind.LINEAR})
WINDOWED_KINDS = frozenset({LayerKind.SLIDING, LayerKind.CHUNKED})
STATE_VALUE_BYTES = (1, 2, 4)  # fp8, bf16 / fp16, fp32
MAX_SPECULATIVE_TOKENS = 64  # draft tokens per step; vLLM's MTP / EAGLE runs use a handful


def _count(field: str, value: object, *, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SizingError(field, f"must be an integer, got {value!r:.40}")
    if value < low:
        raise SizingError(field, f"must be at least {low:,}, got {value:,}")
    return value


@dataclass(frozen=True, kw_only=True)
class LayerGroup:
    """Layers of one kind and one window that cache the same amount per GPU.

    Attributes
    ----------
    kind : LayerKind
    layer_indices : tuple of int
        0-based decoder-layer indices, ascending.
    window : int or None
        Sliding window or attention chunk, tokens (windowed kinds only; None otherwise).
    kv_values_per_token : int
        K + V values (or the MLA latent) one layer caches per token on one GPU at the TP the
        group was made for; 0 for ``mamba`` / ``linear_attention``.
    state_values_per_sequence : int
        Convolution + recurrent state values one layer holds per sequence on one GPU; 0 for
        attention kinds.
    state_bytes_per_sequence : int
        Bytes of those values, each tensor in its own dtype
        (:meth:`RecurrentState.bytes_per_gpu`); 0 for attention kinds.
    """

    kind: LayerKind
    layer_indices: tuple[int, ...]
    window: int | None = None
    kv_values_per_token: int = 0
    state_values_per_sequence: int = 0
    state_bytes_per_sequence: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", LayerKind(self.kind))
        indices = tuple(self.layer_indices)
        for index in indices:
            _count("layer_indices", index)
        if not indices or list(indices) != sorted(set(indices)):
            raise SizingError("layer_indices", "must be distinct, ascending and not empty")
        object.__setattr__(self, "layer_indices", indices)
        if self.kind in WINDOWED_KINDS:
            _count("window", self.window, low=1)
        elif self.window is not None:
            raise SizingError("window", f"{self.kind} layers have no window")
        _count("kv_values_per_token", self.kv_values_per_token)
        _count("state_values_per_sequence", self.state_values_per_sequence)
        _count("state_bytes_per_sequence", self.state_bytes_per_sequence)
        if self.kind in STATE_KINDS:
            if self.kv_values_per_token:
                raise SizingError("kv_values_per_token", f"{self.kind} layers cache no per-token KV")
            if not self.state_values_per_sequence or not self.state_bytes_per_sequence:
                raise SizingError("state_values_per_sequence", f"{self.kind} layers need a state and its bytes")
        elif self.state_values_per_sequence or self.state_bytes_per_sequence:
            raise SizingError("state_values_per_sequence", f"{self.kind} layers hold no recurrent state")

    @property
    def count(self) -> int:
        """Layers in the group."""
        return len(self.layer_indices)

    @property
    def is_attention(self) -> bool:
        return self.kind in ATTENTION_KINDS

    def cached_tokens(self, tokens: int) -> int:
        """Tokens one layer of this group holds for a sequence of ``tokens`` tokens.

        Full / MLA: all of them; sliding: at most the window; chunked: at most one chunk (the
        worst case, just before a chunk boundary); recurrent kinds: none (their state is
        per sequence).
        """
        _count("tokens", tokens)
        if self.kind in STATE_KINDS:
            return 0
        if self.kind in WINDOWED_KINDS:
            return min(tokens, self.window)
        return tokens

    def kv_values(self, tokens: int) -> int:
        """KV values the whole group caches on one GPU for one sequence of ``tokens`` tokens."""
        return self.count * self.kv_values_per_token * self.cached_tokens(tokens)

    @property
    def state_values(self) -> int:
        """State values the whole group holds on one GPU per sequence."""
        return self.count * self.state_values_per_sequence

    @property
    def state_bytes(self) -> int:
        """State bytes the whole group holds on one GPU per sequence."""
        return self.count * self.state_bytes_per_sequence

    @property
    def label(self) -> str:
        """``"22 × sliding_window(512)"``, ``"40 × full"``."""
        window = f"({self.window:,})" if self.window is not None else ""
        return f"{self.count} × {self.kind}{window}"


@dataclass(frozen=True, kw_only=True)
class RecurrentState:
    """The constant per-sequence state of one Mamba or linear-attention layer, before TP.

    vLLM keeps two tensors per layer and sequence: the causal-convolution state, shaped
    ``(conv channels, conv_kernel − 1)``, and the recurrent state, shaped ``(heads, …)`` with
    ``state_per_head`` values per head. Under tensor parallelism both are split by heads and
    channels; Mamba2's B/C groups, when fewer than the ranks, are replicated so that each rank
    holds one group.

    Each tensor has its own dtype (``MambaStateDtypeCalculator`` in vLLM's
    ``model_executor/layers/mamba/mamba_utils.py``): the convolution state in
    ``mamba_cache_dtype`` (``auto``: the model dtype), the recurrent state in
    ``mamba_ssm_cache_dtype`` (``auto``: the convolution state's), which Qwen3.5-family configs
    set through ``mamba_ssm_dtype`` (float32). With speculative decoding the convolution state of
    a gated delta net or Mamba2 layer keeps ``num_speculative_tokens`` more inputs
    (``MambaStateShapeCalculator``: ``conv_kernel − 1 + num_spec``).

    Attributes
    ----------
    kind : LayerKind
        ``mamba`` or ``linear_attention``.
    conv_kernel : int
        Width of the causal convolution; its state keeps ``conv_kernel − 1`` past inputs.
    conv_channels : int
        Convolution channels split evenly over TP (Mamba: the inner width; gated delta net:
        ``2 × key_dim + value_dim``).
    groups : int
        Mamba2 B/C groups (0: none); each adds ``group_channels`` convolution channels.
    group_channels : int
        Convolution channels per group (Mamba2: ``2 × ssm_state_size``).
    heads : int
        Recurrent-state heads, split over TP (Mamba2 heads; gated-delta-net value heads;
        Mamba1 inner channels).
    state_per_head : int
        Recurrent values per head (Mamba2 ``head_dim × state_size``; gated delta net
        ``head_k_dim × head_v_dim``; Mamba1 ``state_size``).
    dtype_bytes : int
        Bytes per convolution-state value (the model dtype, as vLLM's ``mamba_cache_dtype="auto"``),
        and per recurrent-state value unless ``recurrent_dtype_bytes`` says otherwise.
    recurrent_dtype_bytes : int or None
        Bytes per recurrent-state value (vLLM's ``mamba_ssm_cache_dtype``); None: ``dtype_bytes``.
    """

    kind: LayerKind
    conv_kernel: int
    conv_channels: int
    heads: int
    state_per_head: int
    groups: int = 0
    group_channels: int = 0
    dtype_bytes: int = 2
    recurrent_dtype_bytes: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", LayerKind(self.kind))
        if self.kind not in STATE_KINDS:
            raise SizingError("state", f"a recurrent state belongs to mamba or linear_attention layers, not {self.kind}")
        _count("conv_kernel", self.conv_kernel, low=1)
        _count("conv_channels", self.conv_channels, low=1)
        _count("heads", self.heads, low=1)
        _count("state_per_head", self.state_per_head, low=1)
        _count("groups", self.groups)
        _count("group_channels", self.group_channels)
        if isinstance(self.dtype_bytes, bool) or self.dtype_bytes not in STATE_VALUE_BYTES:
            raise SizingError("state_dtype", f"bytes per state value must be 1, 2 or 4, got {self.dtype_bytes!r:.40}")
        if self.recurrent_dtype_bytes is not None and (isinstance(self.recurrent_dtype_bytes, bool)
                                                   or self.recurrent_dtype_bytes not in STATE_VALUE_BYTES):
            raise SizingError("recurrent_state_dtype", "bytes per recurrent-state value must be 1, 2 or 4, "
                                                       f"got {self.recurrent_dtype_bytes!r:.40}")

    @property
    def recurrent_bytes_per_value(self) -> int:
        """Bytes per recurrent-state value: ``recurrent_dtype_bytes``, else ``dtype_bytes``."""
        return self.dtype_bytes if self.recurrent_dtype_bytes is None else self.recurrent_dtype_bytes

    def check_tp(self, tp: int) -> int:
        """``tp`` if the heads and channels split evenly over it (vLLM asserts the same)."""
        _count("tp", tp, low=1)
        if self.heads % tp or self.conv_channels % tp:
            raise SizingError("tp", f"TP {tp} does not split the {self.heads} recurrent-state heads "
                                    f"and {self.conv_channels} convolution channels evenly")
        return tp

    def groups_per_gpu(self, tp: int) -> int:
        """B/C groups on one rank: split when they divide, else one replicated group per rank."""
        if not self.groups:
            return 0
        return self.groups // tp if self.groups % tp == 0 else 1

    def conv_values_per_gpu(self, tp: int, *, speculative_tokens: int = 0) -> int:
        """Convolution-state values of one layer and sequence on one rank: ``conv_kernel − 1``
        past inputs, plus ``speculative_tokens`` with speculative decoding."""
        self.check_tp(tp)
        _count("speculative_tokens", speculative_tokens)
        if speculative_tokens > MAX_SPECULATIVE_TOKENS:
            raise SizingError("speculative_tokens", f"must be at most {MAX_SPECULATIVE_TOKENS}, "
                                                    f"got {speculative_tokens:,}")
        channels = self.conv_channels // tp + self.groups_per_gpu(tp) * self.group_channels
        return (self.conv_kernel - 1 + speculative_tokens) * channels

    def recurrent_values_per_gpu(self, tp: int) -> int:
        """Recurrent-state values (SSM state or delta-net matrices) of one layer on one rank."""
        self.check_tp(tp)
        return self.heads // tp * self.state_per_head

    def values_per_gpu(self, tp: int = 1, *, speculative_tokens: int = 0) -> int:
        """All state values one layer holds per sequence on one rank at tensor parallelism ``tp``."""
        return self.conv_values_per_gpu(tp, speculative_tokens=speculative_tokens) + self.recurrent_values_per_gpu(tp)

    def bytes_per_gpu(self, tp: int = 1, *, speculative_tokens: int = 0) -> int:
        """State bytes of one layer and sequence on one rank, each tensor in its own dtype (vLLM's
        ``MambaSpec.page_size_bytes`` before padding: Σ prod(shape) × dtype size)."""
        conv = self.conv_values_per_gpu(tp, speculative_tokens=speculative_tokens) * self.dtype_bytes
        return conv + self.recurrent_values_per_gpu(tp) * self.recurrent_bytes_per_value

"""What a query attends to — which cached tokens (full causal attention, a sliding window, or
chunked local attention) and whether a sink logit joins its softmax — one definition for the
kernels, their references and their tests.

A query at absolute position ``p`` (0-based; a decode query of a sequence of ``L`` tokens sits
at ``p = L - 1``) sees the keys ``j <= p`` with

* full: ``j >= 0``;
* sliding (``sliding_window = W``, Mistral, Gemma-2/3, gpt-oss): ``j >= p - W + 1``, the ``W``
  tokens ending at the query itself — vLLM passes FlashAttention ``window_size = (W - 1, 0)``
  and HF's sliding-window mask keeps the same ``W`` positions;
* chunked (``chunk_size = C``, Llama 4's local layers): ``j >= (p // C) * C``, the query's own
  chunk up to the query.

Attention sinks (gpt-oss): one learned logit per query head joins the softmax denominator
and carries no value, ``out = Σ e^{s_j} v_j / (e^{sink} + Σ e^{s_j})``.

The sizer holds the same two fields under the same names (``sizing.models.ModelShape``):
``sliding_window`` tokens kept by sliding layers, ``chunk_size`` tokens per chunk.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["Span", "FULL", "span_of", "first_visible", "visible_bound", "check_sinks", "MAX_SPAN"]

MAX_SPAN = 1 << 30  # tokens; a window beyond any table the kernels index (int32 token offsets)
SPAN_CODES = {"full": 0, "sliding": 1, "chunked": 2}  # the kernels' compile-time SPAN value


@dataclass(frozen=True)
class Span:
    """The keys a query sees: ``kind`` in ``SPAN_CODES``, ``size`` the window or chunk in tokens
    (0 for full attention)."""

    kind: str
    size: int

    @property
    def code(self) -> int:
        return SPAN_CODES[self.kind]


FULL = Span("full", 0)


def span_of(sliding_window: int | None = None, chunk_size: int | None = None) -> Span:
    """The span of a kernel call's ``sliding_window`` / ``chunk_size`` options (at most one),
    each an int in 1..``MAX_SPAN``; ``ValueError`` naming the option otherwise."""
    if sliding_window is not None and chunk_size is not None:
        raise ValueError("give sliding_window or chunk_size, not both (a layer is one or the other)")
    for name, value, kind in (("sliding_window", sliding_window, "sliding"), ("chunk_size", chunk_size, "chunked")):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SPAN:
            raise ValueError(f"{name} must be an int in 1..{MAX_SPAN} tokens, got {value!r}")
        return Span(kind, value)
    return FULL


def first_visible(span: Span, position: int) -> int:
    """The first key position a query at ``position`` sees (keys run to ``position`` itself)."""
    if span.kind == "sliding":
        return max(0, position - span.size + 1)
    if span.kind == "chunked":
        return (position // span.size) * span.size
    return 0


def visible_bound(span: Span, max_len: int) -> int:
    """The most keys one decode query of a sequence of at most ``max_len`` tokens sees."""
    return max_len if span.kind == "full" else min(max_len, span.size)


def check_sinks(sinks: object, n_q_heads: int, device) -> torch.Tensor:
    """Attention sinks as the kernels read them: [n_q_heads] float32 contiguous (one learned
    logit per query head, natural log, as gpt-oss stores them; bf16/fp16 are widened)."""
    if not isinstance(sinks, torch.Tensor):
        raise ValueError(f"sinks must be a torch.Tensor, got {type(sinks).__name__}")
    if sinks.dim() != 1 or sinks.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"sinks must be 1-D float32, bfloat16 or float16, got shape {tuple(sinks.shape)} "
                         f"dtype {sinks.dtype}")
    if sinks.shape[0] != n_q_heads:
        raise ValueError(f"sinks must have n_q_heads={n_q_heads} elements (one per query head), "
                         f"got shape {tuple(sinks.shape)}")
    if sinks.device != torch.device(device):
        raise ValueError(f"sinks is on {sinks.device}, the query on {device}")
    return sinks.to(torch.float32).contiguous()

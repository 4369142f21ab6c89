"""How long one engine step takes: a roofline of memory traffic and arithmetic, as numbers.

One step runs a batch of ``computed`` new tokens (one per decoding sequence, a chunk per
prefilling one) over ``context`` cached tokens, and costs::

    memory_s  = fixed_s + per_context_token_s × context          (weights read once, then the KV)
    compute_s = per_token_s × computed + per_attention_pair_s × pairs   (matmuls, attention)
    step_s    = max(memory_s, compute_s)

``pairs`` counts (new token, cached token) attention products. The simulation takes this model
as data (it never imports the planner): ``StepCost.constant`` is the user's own step time, and
``planner.step_time`` builds one from a model's bytes and FLOPs on a GPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# Time-per-output-token of one decode iteration: ~25 ms is typical of a large model at moderate
# batch (an assumption; a setting).
DEFAULT_DECODE_STEP_S = 0.025
# Prefill throughput (assumed): a 70B model costs ~2 × 70e9 = 1.4e11 FLOP per prompt token; an
# 8×H100 node sustaining ~4e15 FLOP/s of dense BF16 prefill gives ~30k tokens/s.
DEFAULT_PREFILL_TOKENS_PER_S = 30_000.0


@dataclass(frozen=True, kw_only=True)
class StepCost:
    """Coefficients of the step-time roofline (seconds, seconds per token, per pair).

    Attributes
    ----------
    fixed_s : float
        Memory time of every step whatever the batch (reading the weights once), > 0.
    per_context_token_s : float
        Memory time per cached token a step reads (its KV bytes over the bandwidth).
    per_token_s : float
        Compute time per new token (2 × parameters FLOPs over the matmul rate).
    per_attention_pair_s : float
        Compute time per (new token, cached token) attention product.
    label : str
        Where the numbers come from, for the page and the CLI.
    """

    fixed_s: float
    per_context_token_s: float = 0.0
    per_token_s: float = 0.0
    per_attention_pair_s: float = 0.0
    label: str = ""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.fixed_s) and self.fixed_s > 0):
            raise ValueError(f"fixed_s must be a positive number of seconds, got {self.fixed_s}")
        for name in ("per_context_token_s", "per_token_s", "per_attention_pair_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {value}")

    @classmethod
    def constant(cls, *, decode_step_s: float = DEFAULT_DECODE_STEP_S,
                 prefill_tokens_per_s: float = DEFAULT_PREFILL_TOKENS_PER_S) -> "StepCost":
        """The user's own figures: a decode step of ``decode_step_s`` whatever the batch, and
        ``prefill_tokens_per_s`` for every token a step computes (a step that prefills more than
        ``decode_step_s × prefill_tokens_per_s`` tokens takes longer)."""
        for name, value in (("decode_step_s", decode_step_s), ("prefill_tokens_per_s", prefill_tokens_per_s)):
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number, got {value}")
        return cls(fixed_s=decode_step_s, per_token_s=1.0 / prefill_tokens_per_s,
                   label=f"{decode_step_s * 1e3:g} ms per decode step, {prefill_tokens_per_s:,.0f} prefill tokens/s")

    @property
    def is_constant_decode(self) -> bool:
        """True when a pure-decode step's time does not depend on the cached tokens."""
        return self.per_context_token_s == 0 and self.per_attention_pair_s == 0

    def seconds(self, *, context: float, computed: float, pairs: float) -> float:
        """One step over ``context`` cached tokens computing ``computed`` tokens (``pairs``
        attention products)."""
        memory = self.fixed_s + self.per_context_token_s * context
        compute = self.per_token_s * computed + self.per_attention_pair_s * pairs
        return max(memory, compute)

    def decode_seconds(self, *, batch: int, context: float, steps: np.ndarray | int) -> np.ndarray | float:
        """Total time of the first ``steps`` pure-decode steps of ``batch`` sequences that hold
        ``context`` tokens together before the first; each step adds ``batch`` tokens.

        Step j (0-based) reads ``context + j·batch`` tokens and computes ``batch`` tokens, each
        attending to its own cache, so both terms are affine in j: the sum of their maximum is
        the sum over the two pieces on either side of the crossing, in closed form. ``steps``
        may be an array (for searching the step that reaches a time).
        """
        k = np.asarray(steps, dtype=np.float64)
        # memory(j) = m0 + m1·j ; compute(j) = c0 + c1·j
        m0 = self.fixed_s + self.per_context_token_s * context
        m1 = self.per_context_token_s * batch
        c0 = self.per_token_s * batch + self.per_attention_pair_s * context
        c1 = self.per_attention_pair_s * batch
        total = _affine_max_sum(m0, m1, c0, c1, k)
        return float(total) if np.ndim(steps) == 0 else total


def _affine_sum(a0: float, a1: float, start: np.ndarray, stop: np.ndarray) -> np.ndarray:
    """Σ_{j=start}^{stop-1} (a0 + a1·j), element-wise over ``start``/``stop`` (float arrays)."""
    count = np.maximum(stop - start, 0)
    return a0 * count + a1 * (stop * (stop - 1) - start * (start - 1)) / 2 * (count > 0)


def _affine_max_sum(m0: float, m1: float, c0: float, c1: float, k: np.ndarray) -> np.ndarray:
    """Σ_{j=0}^{k-1} max(m0 + m1·j, c0 + c1·j): the two lines cross at most once."""
    zero = np.zeros_like(k)
    if m1 == c1:
        return _affine_sum(m0 if m0 >= c0 else c0, m1, zero, k)
    # j* = first integer j at which the line that starts lower has caught up.
    with np.errstate(over="ignore"):  # a near-zero slope gap sends the crossing to ±inf: clipped
        crossing = np.float64(c0 - m0) / np.float64(m1 - c1)
    split = np.clip(np.ceil(crossing), 0, k)
    first, second = ((c0, c1), (m0, m1)) if m1 > c1 else ((m0, m1), (c0, c1))
    # Before j*, the line with the smaller slope is on top (it started higher); after, the other.
    return _affine_sum(*first, zero, split) + _affine_sum(*second, split, k)

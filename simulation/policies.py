"""Contiguous reservation policies (the PagedAttention paper's Orca baselines) and context clipping."""

from __future__ import annotations

import enum

import numpy as np

from simulation.arith import next_power_of_two
from simulation.workloads import Workload


class ReservationPolicy(str, enum.Enum):
    """How many slots a contiguous allocator reserves for a request at admission.

    - ``MAX``: the model's maximum context, whatever the request (Orca-Max);
    - ``POW2``: the prompt plus the true output rounded up to a power of two, so at most twice the
      output (Orca-Pow2: "if the true output length is 25, it reserves 32");
    - ``ORACLE``: exactly prompt + true output (Orca-Oracle, an unrealisable lower bound).

    All are capped at the maximum context.
    """

    MAX = "max"
    POW2 = "pow2"
    ORACLE = "oracle"


def clip_to_context(workload: Workload, max_context: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Prompt and output tokens cut so that each request fits ``max_context`` tokens.

    A model cannot hold more than its maximum context: longer prompts are truncated to leave one
    output token, and outputs stop at the limit.

    Returns
    -------
    prompt, output : int64 arrays, shape (n,)
    clipped : int
        How many requests were cut.
    """
    if max_context < 2:
        raise ValueError(f"max_context must be >= 2 tokens (one prompt, one output), got {max_context}")
    prompt = np.minimum(workload.prompt_tokens, max_context - 1)
    output = np.minimum(workload.output_tokens, max_context - prompt)
    clipped = int(np.count_nonzero((prompt != workload.prompt_tokens)
                                   | (output != workload.output_tokens)))
    return prompt, output, clipped


def reservation_tokens(policy: ReservationPolicy, prompt: np.ndarray, output: np.ndarray,
                       max_context: int) -> np.ndarray:
    """Slots each request asks for at admission under ``policy`` (int64, shape (n,)).

    ``prompt`` and ``output`` must already be clipped to ``max_context``.
    """
    policy = ReservationPolicy(policy)
    if policy is ReservationPolicy.MAX:
        return np.full(prompt.shape, max_context, dtype=np.int64)
    if policy is ReservationPolicy.POW2:
        return np.minimum(prompt + next_power_of_two(output), max_context)
    return prompt + output

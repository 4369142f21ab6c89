"""Workloads whose prompts share prefixes: a system prompt, few-shot prefixes, conversations.

Each builder returns a :class:`~simulation.workloads.Workload` with
:class:`~simulation.content.PromptContent`, so that the over-time simulation's prefix cache
(vLLM's rules) can tell which blocks two prompts share.

- system prompt: every request = one shared prefix of ``system_tokens`` + its own
  ``user_tokens``;
- few-shot: ``prefixes`` distinct prefixes (one per task), each request using one at random;
- multi-turn: conversations of ``turns`` turns; each turn's prompt is the previous turn's
  prompt and answer plus ``user_tokens`` new tokens, and it arrives ``think_s`` seconds after
  the previous answer is complete;
- a trace with conversation ids: each turn's prompt shares the previous turn's prompt and
  answer when its length says so (a replay at the trace's own times).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from simulation.content import PromptContent, output_segment
from simulation.workloads import Workload, check_request_count, poisson_arrivals


@dataclass(frozen=True, kw_only=True)
class PrefixScenario:
    """A synthetic prefix-sharing workload (tokens; rate in conversations per second)."""

    requests: int
    system_tokens: int
    user_tokens: int
    output_tokens: int
    prefixes: int = 1
    turns: int = 1
    rate: float = 10.0
    think_s: float = 5.0

    def __post_init__(self) -> None:
        check_request_count(self.requests)
        if self.system_tokens < 0 or self.user_tokens < 0 or self.system_tokens + self.user_tokens < 1:
            raise ValueError("a prompt needs at least one token (system + user tokens >= 1)")
        if self.output_tokens < 1:
            raise ValueError(f"output_tokens must be >= 1, got {self.output_tokens}")
        if self.prefixes < 1 or self.turns < 1:
            raise ValueError(f"prefixes and turns must be >= 1, got {self.prefixes}, {self.turns}")
        if not (math.isfinite(self.think_s) and self.think_s >= 0):
            raise ValueError(f"think_s must be a finite number >= 0, got {self.think_s}")

    @property
    def label(self) -> str:
        shared = f"{self.system_tokens:,}-token shared prefix" + (f" (1 of {self.prefixes})" if self.prefixes > 1 else "")
        turns = f", {self.turns} turns per conversation" if self.turns > 1 else ""
        return f"{shared} + {self.user_tokens:,} own tokens, {self.output_tokens:,} out{turns}"


def prefix_workload(scenario: PrefixScenario, rng: np.random.Generator) -> Workload:
    """The requests of ``scenario``: conversation by conversation, turn by turn."""
    s = scenario
    conversations = -(-s.requests // s.turns)
    starts = poisson_arrivals(conversations, s.rate, rng)
    chosen_prefix = rng.integers(0, s.prefixes, size=conversations)
    segments, parents, think, arrival, prompts = [], [], [], [], []
    user_id = s.prefixes  # segment ids 0 … prefixes − 1 are the shared prefixes
    for conversation in range(conversations):
        history: tuple[tuple[int, int], ...] = ()
        if s.system_tokens:
            history = ((int(chosen_prefix[conversation]), s.system_tokens),)
        for turn in range(min(s.turns, s.requests - conversation * s.turns)):
            request = len(segments)
            own = ((user_id, s.user_tokens),) if s.user_tokens else ()
            user_id += 1
            prompt = history + own
            segments.append(prompt)
            prompts.append(sum(tokens for _, tokens in prompt))
            parents.append(request - 1 if turn else -1)
            think.append(s.think_s if turn else 0.0)
            arrival.append(starts[conversation])
            history = prompt + ((output_segment(request), s.output_tokens),)
    n = len(segments)
    content = PromptContent(segments=tuple(segments), parent=np.asarray(parents, dtype=np.int64),
                            think_s=np.asarray(think, dtype=np.float64))
    return Workload(prompt_tokens=np.asarray(prompts, dtype=np.int64),
                    output_tokens=np.full(n, s.output_tokens, dtype=np.int64),
                    arrival_s=np.asarray(arrival, dtype=np.float64), source=s.label, content=content)


def with_shared_prefix(workload: Workload, system_tokens: int) -> Workload:
    """``workload`` (a trace) with one shared system prompt of ``system_tokens`` before every
    prompt, and, when the trace names conversations, each turn sharing its previous turn's
    prompt and answer where its prompt is long enough to contain them."""
    n = workload.size
    conversation = workload.conversation
    segments: list[tuple[tuple[int, int], ...]] = []
    last: dict[int, int] = {}  # conversation → its latest request
    system = ((0, system_tokens),) if system_tokens else ()
    for request in range(n):
        own_tokens = int(workload.prompt_tokens[request])
        prefix = system
        if conversation is not None:
            previous = last.get(int(conversation[request]))
            if previous is not None:
                history = segments[previous] + ((output_segment(previous), int(workload.output_tokens[previous])),)
                history_tokens = sum(tokens for _, tokens in history) - system_tokens
                if own_tokens >= history_tokens:
                    prefix, own_tokens = history, own_tokens - history_tokens
            last[int(conversation[request])] = request
        segments.append(prefix + (((1 + request, own_tokens),) if own_tokens else ()))
    content = PromptContent(segments=tuple(segments), parent=np.full(n, -1, dtype=np.int64), think_s=np.zeros(n))
    prompts = np.asarray([sum(tokens for _, tokens in s) for s in segments], dtype=np.int64)
    return Workload(prompt_tokens=prompts, output_tokens=workload.output_tokens, arrival_s=workload.arrival_s,
                    source=f"{workload.source} + {system_tokens:,}-token shared prefix", content=content)

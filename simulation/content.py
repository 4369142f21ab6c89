"""What each request's prompt is made of, so that prefix caching can tell shared blocks apart.

A prompt is a list of segments ``(segment id, tokens)``: two prompts share their first k tokens
exactly when their segment lists agree that far. A request's output is one more segment, of id
``-(request + 1)`` (unique), so a conversation's next turn, whose prompt repeats the previous
context, shares the blocks its previous turn generated.

Block hashes follow vLLM's ``hash_request_tokens``: only full blocks get one, and each hash
chains its parent's hash with the block's own tokens (here: the runs of segment tokens in it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

Segments = tuple[tuple[int, int], ...]


@dataclass(frozen=True, kw_only=True)
class PromptContent:
    """Prompt segments and conversation links of a workload's requests.

    Attributes
    ----------
    segments : tuple of n tuples of (segment id ≥ 0, tokens ≥ 1)
        Each request's prompt; the tokens add up to its prompt length.
    parent : int64 array, shape (n,)
        The request whose completion releases this one (the previous turn), or −1.
    think_s : float64 array, shape (n,)
        Seconds between the parent's completion and this request's arrival (0 without parent).
    """

    segments: tuple[Segments, ...]
    parent: np.ndarray
    think_s: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.segments)
        if self.parent.shape != (n,) or self.think_s.shape != (n,):
            raise ValueError(f"parent {self.parent.shape} and think_s {self.think_s.shape} must be ({n},)")
        if n and np.any(self.parent >= np.arange(n)):
            raise ValueError("a request's parent must come before it")

    def head(self, n: int) -> "PromptContent":
        return replace(self, segments=self.segments[:n], parent=self.parent[:n], think_s=self.think_s[:n])

    def prompt_tokens(self) -> np.ndarray:
        """Prompt length of each request (int64, shape (n,))."""
        return np.asarray([sum(tokens for _, tokens in s) for s in self.segments], dtype=np.int64)


def unique_content(n: int) -> PromptContent:
    """Prompts that share nothing (one segment per request): only a request's own blocks can hit,
    after it was preempted."""
    return PromptContent(segments=tuple(((request, 0),) for request in range(n)),
                         parent=np.full(n, -1, dtype=np.int64), think_s=np.zeros(n))


def output_segment(request: int) -> int:
    """The segment id of ``request``'s generated tokens (negative: never a prompt segment id)."""
    return -(request + 1)


def block_hashes(segments: Segments, block_size: int, count: int) -> list[int]:
    """Chained hashes of the first ``count`` full blocks of the token stream ``segments``.

    A segment of 0 tokens stands for "as long as needed" (a request's unique prompt or output
    whose length only the caller knows); it must be the last segment.
    """
    hashes: list[int] = []
    parent = 0
    runs: list[tuple[int, int, int]] = []  # (segment, first offset, tokens) inside the block
    room = block_size
    for segment, tokens in segments:
        offset = 0
        remaining = tokens if tokens > 0 else count * block_size
        while remaining > 0 and len(hashes) < count:
            take = min(room, remaining)
            runs.append((segment, offset, take))
            offset += take
            remaining -= take
            room -= take
            if room == 0:
                parent = hash((parent, tuple(runs)))
                hashes.append(parent)
                runs, room = [], block_size
        if len(hashes) >= count:
            break
    return hashes

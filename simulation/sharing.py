"""Memory saved by sharing KV blocks: parallel sampling, beam search, a cached system prompt.

Each scenario is played on a ``BlockManager`` (reference counts, copy-on-write) and against the
same requests without sharing; the figures are peak blocks held. Closed forms for the simple cases
are in the docstrings and checked by the tests.

Each takes an optional ``progress``: called with the share of its steps done (0–1) each time
another :data:`PROGRESS_EVERY` of them is done, and at its end; what it raises stops the scenario.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from units import cdiv
from simulation.block_table import BlockManager

PROGRESS_EVERY = 0.01  # share of a scenario's steps between two progress calls (a bar's 1 %)


@dataclass(frozen=True, kw_only=True)
class SharingResult:
    """Peak physical blocks with and without sharing.

    Attributes
    ----------
    blocks_without_sharing, blocks_with_sharing : int
    copies_on_write : int
        Blocks copied because a sequence wrote into a shared block.
    """

    scenario: str
    blocks_without_sharing: int
    blocks_with_sharing: int
    copies_on_write: int

    @property
    def saved_blocks(self) -> int:
        return self.blocks_without_sharing - self.blocks_with_sharing

    @property
    def saved_fraction(self) -> float:
        """Share of the unshared peak that sharing saves (0–1)."""
        return self.saved_blocks / self.blocks_without_sharing if self.blocks_without_sharing else 0.0


def _reporter(progress: Callable[[float], None] | None, steps: int) -> Callable[[int], None]:
    """A callable taking the steps done so far (1 … ``steps``) that calls ``progress`` with their
    share of ``steps`` every ⌈``steps`` × ``PROGRESS_EVERY``⌉ steps and at the last one."""
    stride = max(1, math.ceil(steps * PROGRESS_EVERY))

    def report(done: int) -> None:
        if progress is not None and (done % stride == 0 or done >= steps):
            progress(min(done / max(steps, 1), 1.0))

    return report


def _pool_for(tokens: int, block_size: int) -> int:
    """Blocks enough for ``tokens`` tokens of unshared sequences (no pool pressure here)."""
    return cdiv(tokens, block_size) + 1


def parallel_sampling(*, prompt_tokens: int, output_tokens: np.ndarray, block_size: int,
                      progress: Callable[[float], None] | None = None) -> SharingResult:
    """``n`` samples of one prompt (``output_tokens``: int64, shape (n,), each sample's length).

    Samples decode in lockstep and free their blocks when done. Without sharing each holds its own
    prompt. With sharing, at the end of the shortest sample (before any frees) the pool holds
    ``⌊P/B⌋ + Σ_j ⌈(P mod B + o_j)/B⌉`` blocks when every sample writes past the shared part.
    """
    output_tokens = np.asarray(output_tokens, dtype=np.int64)
    samples = output_tokens.size
    if samples < 1 or prompt_tokens < 1 or output_tokens.min() < 1:
        raise ValueError("need prompt_tokens >= 1 and at least one sample with >= 1 output token")
    without = _peak_unshared(np.full(samples, prompt_tokens), output_tokens, block_size)
    pool = _pool_for(int((prompt_tokens + output_tokens).sum()), block_size) + samples
    manager = BlockManager(num_blocks=pool, block_size=block_size, record_events=False)
    manager.add_sequence(0, prompt_tokens)
    for sample in range(1, samples):
        manager.fork(0, sample)
    report = _reporter(progress, int(output_tokens.max()))
    peak = _decode_lockstep(manager, list(range(samples)), output_tokens, report)
    return SharingResult(scenario=f"parallel sampling, n={samples}", blocks_without_sharing=without,
                         blocks_with_sharing=peak, copies_on_write=manager.copies)


def _peak_unshared(prompt: np.ndarray, output: np.ndarray, block_size: int) -> int:
    """Peak blocks of independent sequences decoding in lockstep, freed when done (vectorised)."""
    steps = np.arange(int(output.max()) + 1)[:, None]           # (T+1, 1)
    length = prompt[None, :] + np.minimum(steps, output[None, :])  # (T+1, n)
    alive = steps < output[None, :]
    alive[0] = True
    blocks = np.where(alive | (steps == output[None, :]), cdiv(length, block_size), 0)
    return int(blocks.sum(axis=1).max())


def _decode_lockstep(manager: BlockManager, sequences: list[int], output: np.ndarray,
                     report: Callable[[int], None]) -> int:
    """Append tokens to ``sequences`` in lockstep; free each when its output is done. Peak blocks.
    ``report`` gets the steps done after each step."""
    peak = manager.used_blocks
    live = list(zip(sequences, output.tolist()))
    step = 0
    while live:
        step += 1
        for sequence, _ in live:
            manager.append_token(sequence)
        peak = max(peak, manager.used_blocks)
        for sequence, length in live:
            if length == step:
                manager.free_sequence(sequence)
        live = [(s, length) for s, length in live if length > step]
        report(step)
    return peak


def beam_search(*, prompt_tokens: int, width: int, steps: int, block_size: int,
                rng: np.random.Generator, progress: Callable[[float], None] | None = None) -> SharingResult:
    """Beam search of ``width`` beams for ``steps`` tokens.

    Each step, every new beam extends a surviving parent (parents drawn by ``rng``: some beams
    are extended several times, others dropped, as a beam's top-k does), forks share the parent's
    blocks and copy-on-write separates them at the first write into a shared block. Without
    sharing each beam keeps a full private copy: ``width × ⌈(P + t)/B⌉`` blocks at step t.
    """
    if width < 1 or steps < 1 or prompt_tokens < 1:
        raise ValueError(f"need width, steps, prompt_tokens >= 1; got {width}, {steps}, {prompt_tokens}")
    blocks_per_beam = cdiv(prompt_tokens + steps, block_size)  # a full private copy at the last step
    without = width * blocks_per_beam
    pool = width * (blocks_per_beam + 2)
    manager = BlockManager(num_blocks=pool, block_size=block_size, record_events=False)
    manager.add_sequence(0, prompt_tokens)
    beams = [0]
    next_id = 1
    peak = manager.used_blocks
    report = _reporter(progress, steps)
    for step in range(steps):
        parents = np.sort(rng.integers(0, len(beams), size=width))
        children = []
        for parent in parents.tolist():
            manager.fork(beams[parent], next_id)
            children.append(next_id)
            next_id += 1
        for beam in beams:
            manager.free_sequence(beam)
        for child in children:
            manager.append_token(child)
        beams = children
        peak = max(peak, manager.used_blocks)
        report(step + 1)
    return SharingResult(scenario=f"beam search, width {width}", blocks_without_sharing=without,
                         blocks_with_sharing=peak, copies_on_write=manager.copies)


def prefix_caching(*, system_prompt_tokens: int, user_tokens: np.ndarray, block_size: int,
                   progress: Callable[[float], None] | None = None) -> SharingResult:
    """Requests that all start with the same system prompt (``user_tokens``: int64, shape (m,),
    the rest of each request), held at once.

    Only the prompt's full blocks are shared: with S system tokens the cache saves
    ``(m − 1) × ⌊S/B⌋`` blocks; the partial block is recomputed per request.
    """
    user_tokens = np.asarray(user_tokens, dtype=np.int64)
    if user_tokens.size < 1 or system_prompt_tokens < 1 or user_tokens.min() < 0:
        raise ValueError("need system_prompt_tokens >= 1 and at least one request with >= 0 tokens")
    totals = system_prompt_tokens + user_tokens
    without = int(cdiv(totals, block_size).sum())
    manager = BlockManager(num_blocks=without + 1, block_size=block_size, record_events=False)
    manager.add_sequence(0, int(totals[0]))
    report = _reporter(progress, user_tokens.size)
    report(1)
    for request in range(1, user_tokens.size):
        manager.share_prefix(0, request, system_prompt_tokens)
        for _ in range(int(user_tokens[request])):
            manager.append_token(request)
        report(request + 1)
    return SharingResult(scenario=f"shared system prompt, {user_tokens.size} requests",
                         blocks_without_sharing=without, blocks_with_sharing=manager.used_blocks,
                         copies_on_write=manager.copies)

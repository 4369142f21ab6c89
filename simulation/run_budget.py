"""Joint budgets of one simulation: options each in range can still ask for a run too large to
finish. What a run will cost is estimated before it starts, and refused past its bound by the
input that drives it; a wall-clock deadline stops whatever the estimate could not foresee.

What grows, and with what:

* prompt segments: each turn of a conversation carries its whole history (every earlier turn's
  prompt and answer), so a synthetic prefix workload holds ``turns × (turns + 1)`` segments per
  conversation (quadratic in ``turns``; at 1,000 turns and 100,000 requests, 10⁸ entries, several GB);
* prompt blocks: prefix caching over prompts with shared content hashes every full block of
  every prompt and keeps the hashes (``Σ prompt / block_size``: a block of one token makes each
  token a cache entry); prompts that share nothing need no hashes (the engine keeps runs of
  blocks), so they cost per request;
* requests: the engine handles each arrival, admission and finish as events.

Wall time follows the engine's events, a few per request. On a 2-core x86 machine (the CI
class), 20,000 requests of the CLI's default workload (arrivals at 1, 5, 100 and 1,000
requests/s; the 506 GB budget and a 100,000-token one that preempts; each allocator; prefix
caching and swap) took 10-52 µs a request, the most with prefix caching on the tight budget
(~7,000 preemptions); the default settings take 10-15 µs. With shared content each prompt block
hashed and looked up added ~6 µs under the step-by-step engine that came before (1-2.3 µs
measured with the event engine; the bound is kept). So the cost a request is estimated at
depends on what the run does; measured over 100,000 requests of the CLI's default workload
(wall time with the interpreter's start): without prefix caching 4-25 µs a request (the most:
swap preemption on a 100,000-token budget at 1,000 requests/s, 3.0 s), with prefix caching 11-28
µs recomputing preempted requests and 205 µs swapping them (20.5 s on that budget). A run
estimated past ``MAX_ESTIMATED_SECONDS`` is refused before it starts.

The other bounds are set where a run still fits well under a GB: 4 million segments (a
5-million-segment workload peaked at 0.86 GB) and 20 million prompt blocks. A deadline
(``MAX_RUN_SECONDS`` of wall time) stops a run the estimate misjudged.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from inputs.errors import InputError

__all__ = ["MAX_SEGMENTS", "MAX_PROMPT_BLOCKS", "SECONDS_PER_REQUEST", "PREFIX_SECONDS_PER_REQUEST",
           "PREFIX_SWAP_SECONDS_PER_REQUEST", "MAX_ESTIMATED_SECONDS", "MAX_RUN_SECONDS", "DEADLINE_EVERY", "RunEstimate", "RunBudgetExceeded",
           "prefix_estimate", "workload_estimate", "check_estimate", "Deadline"]

MAX_SEGMENTS = 4_000_000
MAX_PROMPT_BLOCKS = 20_000_000
# Seconds a request at most (see the module notes), the most seen of each kind rounded up.
SECONDS_PER_REQUEST = 30e-6  # no prefix caching: 25 µs
PREFIX_SECONDS_PER_REQUEST = 55e-6  # prefix caching, preempted requests recomputed: 52 µs (the earlier notes)
PREFIX_SWAP_SECONDS_PER_REQUEST = 250e-6  # prefix caching with swap preemption: 205 µs
SECONDS_PER_PROMPT_BLOCK = 6e-6  # measured under the step-by-step engine; an upper bound now
MAX_ESTIMATED_SECONDS = 45.0
MAX_RUN_SECONDS = 60.0
DEADLINE_EVERY = 64  # engine loop turns between deadline checks (a clock read: far below a step's cost)


@dataclass(frozen=True, kw_only=True)
class RunEstimate:
    """What a run will hold and walk through (counts, before anything is built)."""

    requests: int
    segments: int  # prompt segments of the workload's content (0 without content)
    prompt_blocks: int  # full prompt blocks prefix caching hashes (0 without caching or shared content)
    seconds_per_request: float = PREFIX_SECONDS_PER_REQUEST  # by what the run does (module notes)

    @property
    def seconds(self) -> float:
        """Wall time the run is expected to take at most on a 2-core machine (see the module notes)."""
        return self.requests * self.seconds_per_request + self.prompt_blocks * SECONDS_PER_PROMPT_BLOCK


class RunBudgetExceeded(InputError):
    """A run past its budget; ``field`` names the input that drives the cost (the CLI option or
    the page's widget, as the caller labels it)."""


def prefix_estimate(*, requests: int, turns: int, system_tokens: int, user_tokens: int, output_tokens: int,
                    block_size: int) -> RunEstimate:
    """The cost of a synthetic prefix workload (:class:`simulation.prefix_workloads.PrefixScenario`)
    in closed form. Turn ``t`` (from 0) of a conversation has ``t + 1`` user segments, ``t``
    answers and the system prompt, so ``2t + 2`` segments, and a prompt of ``system + (t + 1) ×
    user + t × output`` tokens."""
    turns = max(1, min(turns, requests))
    full, last = divmod(requests, turns)
    segments = prompt_tokens = 0
    for count, length in ((full, turns), (1 if last else 0, last)):
        t_sum = length * (length - 1) // 2  # Σ t over the turns of one conversation
        segments += count * (2 * t_sum + 2 * length)
        prompt_tokens += count * (length * (system_tokens + user_tokens) + t_sum * (user_tokens + output_tokens))
    return RunEstimate(requests=requests, segments=segments, prompt_blocks=prompt_tokens // max(1, block_size))


def workload_estimate(prompt_tokens: np.ndarray, *, segments: int, block_size: int, prefix_caching: bool,
                      per_block: bool | None = None, swap: bool = False) -> RunEstimate:
    """The cost of a built workload: its requests (each at the cost of what the run does:
    prefix caching, and ``swap`` preemption with it), its content's segments and, when prefix
    caching hashes every block, its full prompt blocks. ``per_block`` says whether it does: with
    shared content (``segments`` > 0), a CPU tier or swap preemption; None: with content."""
    per_block = segments > 0 if per_block is None else per_block
    hashed = prefix_caching and per_block
    blocks = int(np.sum(np.asarray(prompt_tokens, dtype=np.int64) // max(1, block_size))) if hashed else 0
    per_request = (SECONDS_PER_REQUEST if not prefix_caching else
                   PREFIX_SWAP_SECONDS_PER_REQUEST if swap else PREFIX_SECONDS_PER_REQUEST)
    return RunEstimate(requests=int(np.asarray(prompt_tokens).size), segments=segments, prompt_blocks=blocks,
                       seconds_per_request=per_request)


def check_estimate(estimate: RunEstimate, *, requests: str, turns: str | None = None,
                   block_size: str | None = None, runs: int = 1, max_seconds: float = MAX_ESTIMATED_SECONDS) -> None:
    """Refuse ``estimate`` past a bound, naming the input to change (``requests``, ``turns``,
    ``block_size``: the caller's labels for them, e.g. ``"--turns"`` or ``"Turns per conversation"``);
    ``runs`` runs of it must fit ``max_seconds`` together."""
    if estimate.segments > MAX_SEGMENTS:
        raise RunBudgetExceeded(turns or requests, (
            f"{estimate.requests:,} requests carrying their conversations' history make "
            f"{estimate.segments:,} prompt segments to track, more than {MAX_SEGMENTS:,} (the quadratic cost of "
            f"long conversations); use fewer turns or requests"))
    if estimate.prompt_blocks > MAX_PROMPT_BLOCKS:
        raise RunBudgetExceeded(block_size or requests, (
            f"prefix caching would hash {estimate.prompt_blocks:,} prompt blocks, more than {MAX_PROMPT_BLOCKS:,}; "
            f"use larger blocks, shorter prompts or fewer requests"))
    seconds = runs * estimate.seconds
    if seconds > max_seconds:
        blocks = runs * estimate.prompt_blocks * SECONDS_PER_PROMPT_BLOCK
        field = block_size if block_size and blocks > seconds / 2 else requests
        what = f"{runs} runs of {estimate.requests:,} requests" if runs > 1 else f"{estimate.requests:,} requests"
        raise RunBudgetExceeded(field, (
            f"{what} would take about {seconds:,.0f} s to simulate, more than {max_seconds:g} s; "
            + ("use larger blocks or shorter prompts" if field == block_size else "simulate fewer requests")))


class Deadline:
    """A wall-clock bound on one run: :meth:`check` raises once ``seconds`` have passed since it
    was made, naming ``field`` and how far the run got."""

    def __init__(self, seconds: float = MAX_RUN_SECONDS, *, field: str = "requests") -> None:
        self.seconds, self.field = seconds, field
        self.end = time.monotonic() + seconds

    def check(self, share_done: float) -> None:
        if time.monotonic() > self.end:
            raise RunBudgetExceeded(self.field, (
                f"the simulation passed its {self.seconds:g} s budget with {share_done:.0%} of the requests "
                f"finished; simulate fewer requests or a lighter load"))

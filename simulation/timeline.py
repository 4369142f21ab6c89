"""Over time: continuous batching on a KV budget, step by step as vLLM's V1 scheduler runs it.

Model (one engine, FCFS, iteration-level scheduling as in Orca and vLLM):

1. Requests arrive (trace timestamps, Poisson, or a conversation's previous turn finishing plus
   a think time) and wait in a queue.
2. Each step has a budget of ``max_num_batched_tokens`` tokens: every decoding request takes one,
   prefilling requests take chunks of their prompt (chunked prefill; without it a prompt must fit
   the step whole), then waiting requests are admitted in order while the budget, the
   ``max_num_seqs`` limit and memory allow (no skipping: a blocked head blocks the queue).
   Admission allocates a contiguous chunk (reservation policy, buddy or first fit) or the blocks of
   the first chunk (paged, keeping vLLM's 1 % watermark of free blocks; with prefix caching the
   cached full blocks of the prompt are reused, the last prompt token never).
3. The step's time comes from a :class:`~simulation.step_cost.StepCost` (memory and compute
   roofline, or the user's constant). The step that finishes a prompt also yields the request's
   first output token; each later step adds one token. A request that has produced its output
   finishes and frees its memory.
4. Paged only: when a step needs more blocks than are free, the latest admitted requests are
   preempted (vLLM's policy) and put back at the front of the queue: by recompute (their KV is
   dropped; with prefix caching its full blocks stay cached) or by swap (to host memory, or to
   the CPU tier when one is configured and has room). Contiguous requests reserve their whole
   chunk up front and never run out mid-flight; new ones queue instead.
5. A disaggregated deployment's decode pool (``arrive_prefilled``): requests arrive a KV transfer
   delay late with their prompt's KV, so the first admission allocates the prompt's blocks and
   computes only the last prompt token (no prefill chunks); the rest is as above.

Memory is split into the PagedAttention paper's figure-2 categories
(:class:`~simulation.memory.MemoryBreakdown`) and integrated over time. Between events (an
admission, a completion, a paged request running out of blocks, an arrival that can be admitted)
nothing happens but decode steps, so the engine jumps over them and integrates in closed form.
"""

from __future__ import annotations

from collections.abc import Callable

from simulation.engine import Engine
from simulation.run_budget import Deadline
from simulation.timeline_types import (DEFAULT_CPU_LINK_GBPS, DEFAULT_MAX_NUM_BATCHED_TOKENS, DEFAULT_MAX_NUM_SEQS,
                                       DEFAULT_SERIES_POINTS, DEFAULT_SWAP_TOKENS_PER_S, Allocation, CpuTierConfig,
                                       Preemption, PrefixStats, TimelineConfig, TimelineResult, TimelineSeries)
from simulation.workloads import Workload

__all__ = ["Allocation", "CpuTierConfig", "Preemption", "PrefixStats", "TimelineConfig", "TimelineResult",
           "TimelineSeries", "run_timeline", "DEFAULT_CPU_LINK_GBPS", "DEFAULT_MAX_NUM_BATCHED_TOKENS",
           "DEFAULT_MAX_NUM_SEQS", "DEFAULT_SERIES_POINTS", "DEFAULT_SWAP_TOKENS_PER_S"]


def run_timeline(workload: Workload, config: TimelineConfig, *,
                 progress: Callable[[float], None] | None = None, deadline: Deadline | None = None) -> TimelineResult:
    """Simulate continuous batching of ``workload`` (which must have ``arrival_s``).

    Parameters
    ----------
    workload : Workload
        Requests with arrival times (seconds); lengths are cut to ``config.max_context``. With
        ``workload.content`` the prompts' segments decide which blocks prefix caching shares, and
        a request with a parent arrives its think time after the parent finishes.
    config : TimelineConfig
    progress : callable, optional
        Called with the share of requests finished (0–1) about every 1 %.
    deadline : Deadline, optional
        A wall-clock bound (:class:`simulation.run_budget.Deadline`): past it the run stops with
        :class:`simulation.run_budget.RunBudgetExceeded`.
    """
    if workload.arrival_s is None:
        raise ValueError("the workload has no arrival times: add them (poisson_arrivals) or use a trace")
    return Engine(workload, config, progress, deadline).run()

"""What the fragmentation explorer computes, one call per view, from typed settings.

The page turns its widgets into the settings below and draws what these functions return; every
number it shows is computed here (seeding included, so that a link reproduces a view exactly).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from simulation.block_table import BlockTableDemo, TokenAddress, block_table_demo, demo_pool_blocks
from simulation.allocators import chunk_sizes
from simulation.memory import GIB, KvBudget
from simulation.sharing import SharingResult, beam_search, parallel_sampling, prefix_caching
from simulation.snapshot import (BlockSizeSweep, PolicyRow, SnapshotConfig, SnapshotResult,
                                 compare_policies, run_snapshot, sweep_block_sizes)
from simulation.policies import ReservationPolicy, clip_to_context, reservation_tokens
from simulation.prefix_workloads import PrefixScenario, prefix_workload
from simulation.run_budget import Deadline, RunBudgetExceeded, check_estimate, prefix_estimate
from simulation.timeline import Allocation, CpuTierConfig, TimelineConfig, TimelineResult, run_timeline
from simulation.traces import TRACES_DIR, load_trace_csv, shipped_trace_names
from simulation.workloads import Fixed, LogNormal, TotalLengthSpec, Uniform, Workload, poisson_arrivals, preset

# Kinds of workload source: four synthetic length distributions, a preset, a shared trace, an upload.
SYNTHETIC_KINDS = ("lognormal", "lognormal-quantiles", "uniform", "fixed")


@dataclass(frozen=True, kw_only=True)
class WorkloadSettings:
    """Where the requests come from. ``low``/``high`` are the uniform range, or the median and P90
    for ``lognormal-quantiles``; ``name`` is the preset's or the shared trace's."""

    kind: str
    mean: float = 2048.0
    sigma: float = 0.5
    low: int = 1024
    high: int = 3072
    length: int = 2048
    prompt_share: float = 0.5
    n: int = 10_000
    seed: int = 0
    name: str = ""


def build_workload(settings: WorkloadSettings, upload: bytes | None = None) -> Workload:
    """The requests ``settings`` describe (``upload``: the CSV's bytes for kind ``upload``)."""
    rng = np.random.default_rng(settings.seed)
    if settings.kind == "upload":
        return load_trace_csv(upload or b"", name="uploaded trace")
    if settings.kind == "trace":
        if settings.name not in shipped_trace_names():  # only a listed file, never a typed path
            raise ValueError(f"unknown trace {settings.name[:40]!r}")
        return load_trace_csv(TRACES_DIR / settings.name)
    if settings.kind == "preset":
        return preset(settings.name).spec.generate(settings.n, rng)
    lengths = {"lognormal": lambda: LogNormal(mean=settings.mean, sigma=settings.sigma),
               "lognormal-quantiles": lambda: LogNormal.from_median_p90(
                   median=settings.low, p90=max(settings.low, settings.high)),
               "uniform": lambda: Uniform(low=settings.low, high=max(settings.low, settings.high)),
               "fixed": lambda: Fixed(length=settings.length)}[settings.kind]()
    return TotalLengthSpec(lengths=lengths, prompt_fraction=settings.prompt_share).generate(settings.n, rng)


def budget_from_gib(gib: float, per_token_bytes: int) -> KvBudget:
    """The slots of ``gib`` GiB at ``per_token_bytes`` (at least one token's worth)."""
    return KvBudget.from_bytes(total_bytes=max(int(gib * GIB), per_token_bytes), per_token_bytes=per_token_bytes)


@dataclass(frozen=True, kw_only=True)
class SnapshotView:
    """The snapshot tab: the headline comparison, every policy, and the block-size sweep.

    ``pow2_oracle_same_chunk`` is the share of requests whose buddy chunk is the same under Pow2
    and Oracle (then both admit them alike, and only the split of the chunk differs).
    """

    result: SnapshotResult
    rows: tuple[PolicyRow, ...]
    sweep: BlockSizeSweep
    pow2_oracle_same_chunk: float


def snapshot_view(workload: Workload, config: SnapshotConfig, seed: int) -> SnapshotView:
    """Snapshot figures for the explorer. The moments' draw (random progress) is seeded apart from
    the workload's, and identically for the headline figures and the policy comparison, so that
    both describe the same instant."""
    prompt, output, _ = clip_to_context(workload, config.max_context)
    pow2, oracle = (chunk_sizes(config.address_space, reservation_tokens(policy, prompt, output, config.max_context))
                    for policy in (ReservationPolicy.POW2, ReservationPolicy.ORACLE))
    return SnapshotView(result=run_snapshot(workload, config, np.random.default_rng(seed + 1)),
                        rows=compare_policies(workload, config, np.random.default_rng(seed + 1)),
                        sweep=sweep_block_sizes(workload, max_context=config.max_context),
                        pow2_oracle_same_chunk=float(np.mean(pow2 == oracle)))


def timeline_view(workload: Workload, config: TimelineConfig, *, rate: float | None, seed: int,
                  progress: Callable[[float], None] | None = None) -> TimelineResult:
    """The over-time run: Poisson arrivals at ``rate`` (seeded apart from the workload), or the
    trace's own arrival times when ``rate`` is None."""
    if rate is not None:
        workload = workload.with_arrivals(poisson_arrivals(workload.size, rate, np.random.default_rng(seed + 2)))
    return run_timeline(workload, config, progress=progress)


def allocator_configs(config: TimelineConfig) -> tuple[TimelineConfig, ...]:
    """``config`` once per allocator, for the side-by-side comparison."""
    return tuple(replace(config, allocation=allocation) for allocation in Allocation)


@dataclass(frozen=True, kw_only=True)
class SharingSettings:
    """The sharing tab's scenarios (tokens); beams decode as many steps as each sample's output."""

    prompt: int = 500
    samples: int = 4
    output: int = 200
    width: int = 4
    system: int = 1000
    requests: int = 20
    user: int = 300


def sharing_view(settings: SharingSettings, *, block_size: int, seed: int) -> tuple[SharingResult, ...]:
    """Parallel sampling, beam search and a shared system prompt, with and without sharing."""
    return (parallel_sampling(prompt_tokens=settings.prompt, output_tokens=np.full(settings.samples, settings.output),
                              block_size=block_size),
            beam_search(prompt_tokens=settings.prompt, width=settings.width, steps=settings.output,
                        block_size=block_size, rng=np.random.default_rng(seed)),
            prefix_caching(system_prompt_tokens=settings.system, user_tokens=np.full(settings.requests, settings.user),
                           block_size=block_size))


@dataclass(frozen=True, kw_only=True)
class BlockTableSettings:
    """The block-table demo: sequences on one prompt after some decode steps."""

    block_size: int = 4
    sequences: int = 3
    prompt: int = 10
    steps: int = 3
    shared: bool = True


def block_table_view(settings: BlockTableSettings, *, token_bytes: int | None, seed: int,
                     row_blocks: int) -> tuple[BlockTableDemo, int]:
    """The demo and its pool size (whole rows of ``row_blocks`` blocks, as the page draws it)."""
    pool_blocks = demo_pool_blocks(block_size=settings.block_size, prompt_tokens=settings.prompt,
                                   sequences=settings.sequences, steps=settings.steps, row_blocks=row_blocks)
    demo = block_table_demo(block_size=settings.block_size, prompt_tokens=settings.prompt,
                            sequences=settings.sequences, steps=settings.steps, shared_prompt=settings.shared,
                            num_blocks=pool_blocks, token_bytes=token_bytes, rng=np.random.default_rng(seed))
    return demo, pool_blocks


def token_address(demo: BlockTableDemo, sequence: int, position: int) -> TokenAddress:
    """Where token ``position`` of ``sequence`` lives in the demo's pool."""
    return demo.manager.address(sequence, position)


# Block sizes and budget shares of the prefix-caching sweep (the chosen ones are added).
PREFIX_SWEEP_BLOCKS = (16, 64, 256)
PREFIX_SWEEP_BUDGET_SHARES = (0.25, 1.0)


@dataclass(frozen=True, kw_only=True)
class PrefixView:
    """The prefix-caching tab: the run as set, the same without the CPU tier (when one is set),
    and the hit rate against block size at each of a few budgets."""

    result: TimelineResult
    without_cpu: TimelineResult | None
    sweep_blocks: tuple[int, ...]
    sweep_budgets: tuple[int, ...]
    sweep_hit_rate: np.ndarray  # (budgets, blocks)
    sweep_evictions: np.ndarray  # (budgets, blocks)


# The prefix tab's runs together must finish in a page's few seconds.
PREFIX_VIEW_SECONDS = 12.0


def prefix_view_runs(config: TimelineConfig) -> int:
    """Runs :func:`prefix_view` makes: the run as set, the same without the CPU tier, the sweep."""
    blocks = set(PREFIX_SWEEP_BLOCKS) | {config.block_size}
    return 1 + (config.cpu_tier is not None) + len(blocks) * len(PREFIX_SWEEP_BUDGET_SHARES)


def check_prefix_view(scenario: PrefixScenario, config: TimelineConfig, *, requests: str, turns: str,
                      block_size: str) -> None:
    """Refuse a prefix tab whose runs would not finish in ``PREFIX_VIEW_SECONDS``, naming the
    input that drives the cost by the caller's labels (:func:`simulation.run_budget.check_estimate`)."""
    estimate = prefix_estimate(requests=scenario.requests, turns=scenario.turns, system_tokens=scenario.system_tokens,
                               user_tokens=scenario.user_tokens, output_tokens=scenario.output_tokens,
                               block_size=config.block_size)
    check_estimate(estimate, requests=requests, turns=turns, block_size=block_size, runs=prefix_view_runs(config),
                   max_seconds=PREFIX_VIEW_SECONDS)


def prefix_view(scenario: PrefixScenario, config: TimelineConfig, seed: int, *,
                deadline_field: str = "requests") -> PrefixView:
    """Prefix caching over time on ``scenario``'s requests under ``config`` (paged, caching on);
    all its runs share one deadline (:class:`simulation.run_budget.Deadline`, naming
    ``deadline_field``)."""
    deadline = Deadline(2 * PREFIX_VIEW_SECONDS, field=deadline_field)
    workload = prefix_workload(scenario, np.random.default_rng(seed))
    config = replace(config, allocation=Allocation.PAGED, prefix_caching=True)
    result = run_timeline(workload, config, deadline=deadline)
    without = None if config.cpu_tier is None else run_timeline(workload, replace(config, cpu_tier=None),
                                                                 deadline=deadline)
    blocks = tuple(sorted(set(PREFIX_SWEEP_BLOCKS) | {config.block_size}))
    budgets = tuple(sorted({max(1, int(share * config.budget.tokens)) for share in PREFIX_SWEEP_BUDGET_SHARES}))
    rates = np.zeros((len(budgets), len(blocks)))
    evictions = np.zeros_like(rates)
    for i, tokens in enumerate(budgets):
        for j, block in enumerate(blocks):
            budget = replace(config.budget, tokens=tokens)
            if tokens // block < 2:
                continue  # not even two blocks: nothing to cache
            try:
                run = run_timeline(workload, replace(config, budget=budget, block_size=block, cpu_tier=None),
                                   deadline=deadline)
            except RunBudgetExceeded:
                raise
            except ValueError:
                continue
            rates[i, j], evictions[i, j] = run.prefix.hit_rate, run.prefix.evictions
    return PrefixView(result=result, without_cpu=without, sweep_blocks=blocks, sweep_budgets=budgets,
                      sweep_hit_rate=rates, sweep_evictions=evictions)


def cpu_tier(gib: float, link_gbps: float) -> CpuTierConfig | None:
    """The CPU tier the page asks for (None at 0 GiB)."""
    return None if gib <= 0 else CpuTierConfig(gib=gib, link_gbps=link_gbps)

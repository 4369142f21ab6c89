"""What the fragmentation explorer computes, one call per view, from typed settings.

The page turns its widgets into the settings below and draws what these functions return; every
number it shows is computed here (seeding included, so that a link reproduces a view exactly).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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


def sharing_work(settings: SharingSettings, *, block_size: int) -> tuple[float, float, float]:
    """Rough cost of :func:`sharing_view`'s three scenarios, in block-manager calls (each ~1 µs).

    A call is a token appended, a fork, a free or a prefix entry shared; the block-table entries a
    fork or free copies count as 1/40 of a call each (array operations: about 40 ns an entry
    against about 1 µs a Python-level call). Measured at the caps with B = 1 (1.4 s, beam
    search's forks of 2,000-block tables 1.0 s of it) each scenario took 0.9-1.2 µs a call;
    over other settings 0.3-1.6 µs. Good enough to weight the scenarios' progress, and to tell
    a run of milliseconds from one of a second.
    """
    prompt_blocks = settings.prompt / block_size
    sampling = settings.samples * (settings.output + 2) + settings.samples * (
        2 * prompt_blocks + settings.output / block_size) / 40
    # Every step forks, frees and extends each beam; its table holds (P + t) / B entries at step t.
    beams = 3 * settings.width * settings.output + 2 * settings.width * settings.output * (
        prompt_blocks + settings.output / (2 * block_size)) / 40
    shared = settings.requests * (settings.user + settings.system / block_size + 1)
    return float(sampling), float(beams), float(shared)


def sharing_view(settings: SharingSettings, *, block_size: int, seed: int,
                 progress: Callable[[float], None] | None = None) -> tuple[SharingResult, ...]:
    """Parallel sampling, beam search and a shared system prompt, with and without sharing.

    ``progress`` (optional) is called with the share done (0–1, each scenario weighted by
    :func:`sharing_work`) between steps of each scenario; what it raises stops the run.
    """
    part = _parts(progress, sharing_work(settings, block_size=block_size))
    return (parallel_sampling(prompt_tokens=settings.prompt, output_tokens=np.full(settings.samples, settings.output),
                              block_size=block_size, progress=part(0)),
            beam_search(prompt_tokens=settings.prompt, width=settings.width, steps=settings.output,
                        block_size=block_size, rng=np.random.default_rng(seed), progress=part(1)),
            prefix_caching(system_prompt_tokens=settings.system, user_tokens=np.full(settings.requests, settings.user),
                           block_size=block_size, progress=part(2)))


def _parts(progress: Callable[[float], None] | None,
           weights: Sequence[float]) -> Callable[[int], Callable[[float], None] | None]:
    """Progress of one part of a run of ``len(weights)`` parts: part ``i``'s share done (0–1)
    becomes the whole run's, the parts before it counted done (None without ``progress``)."""
    total = float(sum(weights)) or 1.0
    starts = np.concatenate(([0.0], np.cumsum(weights)))

    def part(index: int) -> Callable[[float], None] | None:
        if progress is None:
            return None
        return lambda share: progress(float(starts[index] + share * weights[index]) / total)

    return part


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


def prefix_view(scenario: PrefixScenario, config: TimelineConfig, seed: int, *, deadline_field: str = "requests",
                progress: Callable[[float], None] | None = None) -> PrefixView:
    """Prefix caching over time on ``scenario``'s requests under ``config`` (paged, caching on);
    all its runs share one deadline (:class:`simulation.run_budget.Deadline`, naming
    ``deadline_field``).

    ``progress`` (optional) is called with the share done (0–1, each run an equal part, at its
    ~1 % steps and at its end, a skipped sweep point counted done at once); what it raises stops
    the run, even where a sweep point's ``ValueError`` would only skip that point.
    """
    deadline = Deadline(2 * PREFIX_VIEW_SECONDS, field=deadline_field)
    workload = prefix_workload(scenario, np.random.default_rng(seed))
    config = replace(config, allocation=Allocation.PAGED, prefix_caching=True)
    blocks = tuple(sorted(set(PREFIX_SWEEP_BLOCKS) | {config.block_size}))
    budgets = tuple(sorted({max(1, int(share * config.budget.tokens)) for share in PREFIX_SWEEP_BUDGET_SHARES}))
    raised: list[BaseException] = []  # what progress raised: never swallowed as a sweep point's error
    runs = 1 + (config.cpu_tier is not None) + len(budgets) * len(blocks)
    part = _parts(None if progress is None else _noting(progress, raised), (1.0,) * runs)
    result = run_timeline(workload, config, deadline=deadline, progress=part(0))
    without = None if config.cpu_tier is None else run_timeline(workload, replace(config, cpu_tier=None),
                                                                 deadline=deadline, progress=part(1))
    done = 1 + (without is not None)
    rates = np.zeros((len(budgets), len(blocks)))
    evictions = np.zeros_like(rates)
    for i, tokens in enumerate(budgets):
        for j, block in enumerate(blocks):
            report, done = part(done), done + 1
            budget = replace(config.budget, tokens=tokens)
            if tokens // block < 2:
                if report is not None:
                    report(1.0)
                continue  # not even two blocks: nothing to cache
            try:
                run = run_timeline(workload, replace(config, budget=budget, block_size=block, cpu_tier=None),
                                   deadline=deadline, progress=report)
            except RunBudgetExceeded:
                raise
            except ValueError:
                if raised:
                    raise
                if report is not None:
                    report(1.0)
                continue
            rates[i, j], evictions[i, j] = run.prefix.hit_rate, run.prefix.evictions
    return PrefixView(result=result, without_cpu=without, sweep_blocks=blocks, sweep_budgets=budgets,
                      sweep_hit_rate=rates, sweep_evictions=evictions)


def _noting(progress: Callable[[float], None], raised: list[BaseException]) -> Callable[[float], None]:
    """``progress``, appending to ``raised`` what it raises (then raising it on)."""
    def call(share: float) -> None:
        try:
            progress(share)
        except BaseException as err:
            raised.append(err)
            raise
    return call


def cpu_tier(gib: float, link_gbps: float) -> CpuTierConfig | None:
    """The CPU tier the page asks for (None at 0 GiB)."""
    return None if gib <= 0 else CpuTierConfig(gib=gib, link_gbps=link_gbps)

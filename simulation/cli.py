"""Command line: ``python -m simulation snapshot|timeline|prefix [options] [--json]``.

Bad arguments end with exit code 2 and one line that names the argument, never a traceback:
every numeric option parses through a :class:`~inputs.bounds.Bound` (its range is in ``--help``),
and errors raised by the library name their field, mapped back to the option.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace

import numpy as np

from glossary import allocator_label
from inputs.bounds import Bound
from inputs.cli import OneLineParser, UsageError, arg_type, choice, help_range, run_cli
from inputs.errors import InputError
from simulation.run_budget import Deadline, RunEstimate, check_estimate, prefix_estimate, workload_estimate
from inputs.uploads import dumps_strict
from simulation.allocators import AddressSpace
from simulation.memory import GIB, KvBudget, MemoryBreakdown
from simulation.policies import ReservationPolicy
from simulation.prefix_workloads import PrefixScenario, prefix_workload, with_shared_prefix
from simulation.snapshot import DEFAULT_BLOCK_SIZE, SnapshotConfig, run_snapshot
from simulation.step_cost import DEFAULT_DECODE_STEP_S, DEFAULT_PREFILL_TOKENS_PER_S, StepCost
from simulation.timeline import (DEFAULT_CPU_LINK_GBPS, DEFAULT_MAX_NUM_BATCHED_TOKENS, DEFAULT_MAX_NUM_SEQS,
                                 Allocation, CpuTierConfig, Preemption, TimelineConfig, TimelineResult, run_timeline)
from simulation.timeline_types import MAX_TRANSFER_DELAY_S
from simulation.traces import load_trace_csv
from simulation.workloads import (MAX_REQUESTS, Fixed, LogNormal, TotalLengthSpec, Uniform, Workload,
                                  poisson_arrivals)

PROG = "python -m simulation"
# Defaults reproduce the reference page's problem 4: 8 × H100 80 GB at 90 % minus 70 GB of FP8
# weights = 506 GB of KV, at 160 KiB per token (Llama-style 70B, FP8 KV), 32K maximum context.
DEFAULT_BUDGET_BYTES = 506 * 10**9
DEFAULT_PER_TOKEN_BYTES = 160 * 1024
DEFAULT_MAX_CONTEXT = 32_768
DEFAULT_MEAN_TOKENS = 2_048.0
DEFAULT_SIGMA = 0.5  # assumed spread of the log-normal default
DEFAULT_SNAPSHOT_REQUESTS = 10_000
DEFAULT_TIMELINE_REQUESTS = 2_000

# Ranges of the numeric options. Token counts stop at ten million (beyond any model's context);
# the rest keep every product the simulator forms (tokens × seconds, bytes) finite and exact.
MAX_TOKENS = 10**7
TOKENS = dict(low=1, high=MAX_TOKENS, unit="tokens")
MEAN = Bound(field="--mean", **TOKENS)
SIGMA = Bound(field="--sigma", low=0, high=3)  # exp(3 · z) already spans ~10⁴ between P1 and P99
MEDIAN = Bound(field="--median", **TOKENS)
P90 = Bound(field="--p90", **TOKENS)
LOW = Bound(field="--low", integer=True, **TOKENS)
HIGH = Bound(field="--high", integer=True, **TOKENS)
LENGTH = Bound(field="--length", integer=True, **TOKENS)
PROMPT_FRACTION = Bound(field="--prompt-fraction", low=0, high=1)
REQUESTS = Bound(field="--n", low=1, high=MAX_REQUESTS, integer=True, unit="requests")
SEED = Bound(field="--seed", low=0, high=2**63 - 1, integer=True)
BUDGET_TOKENS = Bound(field="--kv-budget-tokens", low=1, high=10**12, integer=True, unit="tokens")
BUDGET_GIB = Bound(field="--kv-budget-gib", low=0, high=10**6, low_open=True, unit="GiB")
PER_TOKEN_BYTES = Bound(field="--per-token-bytes", low=1, high=2**30, integer=True, unit="bytes")
MAX_CONTEXT = Bound(field="--max-context", low=2, high=MAX_TOKENS, integer=True, unit="tokens")
BLOCK_SIZE = Bound(field="--block-size", low=1, high=65_536, integer=True, unit="tokens")
PROGRESS = Bound(field="--progress", low=0, high=1)
RATE = Bound(field="--rate", low=1e-6, high=10**6, unit="requests/s")
DECODE_STEP_S = Bound(field="--decode-step-s", low=1e-6, high=60, unit="s")
PREFILL_TOKENS_PER_S = Bound(field="--prefill-tokens-per-s", low=1, high=10**9, unit="tokens/s")
MAX_NUM_SEQS = Bound(field="--max-num-seqs", low=1, high=65_536, integer=True, unit="requests")
MAX_NUM_BATCHED_TOKENS = Bound(field="--max-num-batched-tokens", low=1, high=MAX_TOKENS, integer=True, unit="tokens")
CPU_TIER_GIB = Bound(field="--cpu-tier-gib", low=0, high=10**5, low_open=True, unit="GiB")
CPU_LINK_GBPS = Bound(field="--cpu-link-gbps", low=0.001, high=10**4, unit="GB/s")
TRANSFER_DELAY_S = Bound(field="--transfer-delay-s", low=0, high=MAX_TRANSFER_DELAY_S, unit="s")
# The prefix command's scenario: tokens per part, requests, turns (each turn repeats the history,
# so turns × (user + output) stays far below any context).
SYSTEM_PROMPT_TOKENS = Bound(field="--system-prompt-tokens", low=0, high=10**6, integer=True, unit="tokens")
USER_TOKENS = Bound(field="--user-tokens", low=0, high=10**6, integer=True, unit="tokens")
OUTPUT_TOKENS = Bound(field="--output-tokens", low=1, high=10**6, integer=True, unit="tokens")
PREFIX_REQUESTS = Bound(field="--requests", low=1, high=100_000, integer=True, unit="requests")
TURNS = Bound(field="--turns", low=1, high=1000, integer=True, unit="turns")
PREFIXES = Bound(field="--prefixes", low=1, high=10_000, integer=True, unit="prefixes")
THINK_S = Bound(field="--think-s", low=0, high=10**5, unit="s")
DEFAULT_PREFIX_OUTPUT_TOKENS = 100
DEFAULT_PREFIX_RATE = 10.0  # conversations per second
DEFAULT_THINK_S = 5.0
DISTRIBUTIONS = ("lognormal", "uniform", "fixed")


def _bad(option: str, message: str) -> UsageError:
    return UsageError(f"argument {option}: {message}")


def _progress(text: str) -> float | None:
    if text == "random":
        return None
    return arg_type(PROGRESS)(text)


def _number(group, option: str, bound: Bound, text: str, **kwargs) -> None:
    """A numeric option parsed by ``bound``, its range appended to ``text`` in ``--help``."""
    group.add_argument(option, type=arg_type(bound), help=f"{text} ({help_range(bound)})", **kwargs)


def _options(group, option: str, options: Sequence[str], text: str, default: str) -> None:
    """A choice among ``options`` (case-insensitive), listed in ``--help``."""
    group.add_argument(option, type=choice(tuple(options)), default=default, metavar="{" + ",".join(options) + "}",
                       help=f"{text} (default {default})")


def _add_workload_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("workload")
    _options(group, "--dist", DISTRIBUTIONS, "total tokens per request", "lognormal")
    _number(group, "--mean", MEAN, f"log-normal mean tokens (default {DEFAULT_MEAN_TOKENS:g})")
    _number(group, "--sigma", SIGMA, f"log-normal sigma (default {DEFAULT_SIGMA})")
    _number(group, "--median", MEDIAN, "log-normal by median tokens (with --p90)")
    _number(group, "--p90", P90, "log-normal 90th percentile tokens (with --median)")
    _number(group, "--low", LOW, "uniform: fewest tokens")
    _number(group, "--high", HIGH, "uniform: most tokens")
    _number(group, "--length", LENGTH, "fixed: tokens per request")
    _number(group, "--prompt-fraction", PROMPT_FRACTION,
            "share of each synthetic request that is prompt (default 0.5, assumed)", default=0.5)
    group.add_argument("--trace", help="CSV with prompt and output token columns (and arrival times)")
    _number(group, "--n", REQUESTS, "requests (synthetic) or first rows (trace)")
    _number(group, "--seed", SEED, "random seed (default 0)", default=0)


def _add_budget_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("KV budget (default: the reference page's 506 GB at 160 KiB/token)")
    _number(group, "--kv-budget-tokens", BUDGET_TOKENS, "budget in token slots")
    _number(group, "--kv-budget-gib", BUDGET_GIB, "budget in GiB (needs --per-token-bytes)")
    _number(group, "--per-token-bytes", PER_TOKEN_BYTES, "KV bytes per token, all layers")
    _number(parser, "--max-context", MAX_CONTEXT, f"model's maximum context, tokens (default {DEFAULT_MAX_CONTEXT})",
            default=DEFAULT_MAX_CONTEXT)
    _number(parser, "--block-size", BLOCK_SIZE, f"paged block size, tokens (default {DEFAULT_BLOCK_SIZE})",
            default=DEFAULT_BLOCK_SIZE)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def build_parser() -> argparse.ArgumentParser:
    """The CLI's parser (subcommands ``snapshot`` and ``timeline``)."""
    parser = OneLineParser(prog=PROG, description="KV-cache fragmentation: contiguous reservation against paged blocks.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    snapshot = commands.add_parser("snapshot", help="requests that fit a budget, utilisation, waste")
    _add_workload_options(snapshot)
    _add_budget_options(snapshot)
    _options(snapshot, "--policy", [p.value for p in ReservationPolicy],
             "contiguous reservation (Orca baselines)", "max")
    _options(snapshot, "--address-space", [a.value for a in AddressSpace], "contiguous allocator", "buddy")
    snapshot.add_argument("--progress", type=_progress, default=1.0,
                          help="share of each output generated at the snapshot, "
                               f"{help_range(PROGRESS)}, or 'random' (default 1)")
    timeline = commands.add_parser("timeline", help="continuous batching over time")
    _add_workload_options(timeline)
    _add_budget_options(timeline)
    _number(timeline, "--rate", RATE, "Poisson arrivals (default: the trace's own arrival times)")
    _options(timeline, "--allocator", [a.value for a in Allocation], "allocator", "paged")
    _options(timeline, "--address-space", [a.value for a in AddressSpace], "contiguous allocators only", "buddy")
    _options(timeline, "--preempt", [p.value for p in Preemption], "paged preemption", "recompute")
    _add_engine_options(timeline)
    timeline.add_argument("--prefix-caching", action="store_true",
                          help="vLLM's automatic prefix caching (paged only)")
    timeline.add_argument("--arrive-prefilled", action="store_true",
                          help="a disaggregated decode pool: prompts arrive with their KV computed (blocks "
                               "allocated at admission, the last prompt token recomputed), no prefill chunks")
    _number(timeline, "--transfer-delay-s", TRANSFER_DELAY_S,
            "with --arrive-prefilled: seconds from a request's arrival to its KV reaching the pool (default 0)",
            default=0.0)
    prefix = commands.add_parser("prefix", help="prefix caching over time: hit rate, prefill saved, evictions")
    _number(prefix, "--system-prompt-tokens", SYSTEM_PROMPT_TOKENS, "shared prefix of every prompt", default=0)
    _number(prefix, "--user-tokens", USER_TOKENS, "each request's (each turn's) own tokens", default=0)
    _number(prefix, "--output-tokens", OUTPUT_TOKENS, f"tokens generated per request (default "
            f"{DEFAULT_PREFIX_OUTPUT_TOKENS})", default=DEFAULT_PREFIX_OUTPUT_TOKENS)
    _number(prefix, "--requests", PREFIX_REQUESTS, "requests (all turns together)", default=None)
    _number(prefix, "--turns", TURNS, "turns per conversation: each prompt repeats the previous turn", default=1)
    _number(prefix, "--prefixes", PREFIXES, "distinct shared prefixes (few-shot: one per task)", default=1)
    _number(prefix, "--rate", RATE, f"conversations per second (default {DEFAULT_PREFIX_RATE:g})",
            default=DEFAULT_PREFIX_RATE)
    _number(prefix, "--think-s", THINK_S, f"seconds between an answer and the next turn (default "
            f"{DEFAULT_THINK_S:g})", default=DEFAULT_THINK_S)
    prefix.add_argument("--trace", help="CSV of requests (prompt, output, arrival; optional conversation_id); "
                                        "the shared prefix is put before each prompt")
    _number(prefix, "--seed", SEED, "random seed (default 0)", default=0)
    _add_budget_options(prefix)
    _add_engine_options(prefix)
    return parser


def _add_engine_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("engine (vLLM V1 scheduler)")
    _number(group, "--decode-step-s", DECODE_STEP_S, f"seconds per decode step (default {DEFAULT_DECODE_STEP_S:g})",
            default=DEFAULT_DECODE_STEP_S)
    _number(group, "--prefill-tokens-per-s", PREFILL_TOKENS_PER_S,
            f"tokens a step computes per second (default {DEFAULT_PREFILL_TOKENS_PER_S:,.0f})",
            default=DEFAULT_PREFILL_TOKENS_PER_S)
    group.add_argument("--max-batch", "--max-num-seqs", dest="max_num_seqs", type=arg_type(MAX_NUM_SEQS),
                       default=DEFAULT_MAX_NUM_SEQS,
                       help=f"sequences per step (default {DEFAULT_MAX_NUM_SEQS}; {help_range(MAX_NUM_SEQS)})")
    _number(group, "--max-num-batched-tokens", MAX_NUM_BATCHED_TOKENS,
            f"tokens per step (default {DEFAULT_MAX_NUM_BATCHED_TOKENS:,})", default=DEFAULT_MAX_NUM_BATCHED_TOKENS)
    group.add_argument("--no-chunked-prefill", dest="chunked_prefill", action="store_false",
                       help="a prompt must fit one step whole")
    _number(group, "--cpu-tier-gib", CPU_TIER_GIB, "CPU memory for evicted prefix blocks and swapped sequences "
            "(needs bytes per token)", default=None)
    _number(group, "--cpu-link-gbps", CPU_LINK_GBPS, f"CPU link, GB/s (default {DEFAULT_CPU_LINK_GBPS:g})",
            default=DEFAULT_CPU_LINK_GBPS)


def _workload(args: argparse.Namespace, default_n: int, rng: np.random.Generator) -> Workload:
    if args.trace is not None:
        workload = load_trace_csv(args.trace)  # its TraceError names the field "trace": --trace
        return workload.head(args.n) if args.n else workload
    given = {name for name in ("mean", "sigma", "median", "p90", "low", "high", "length")
             if getattr(args, name) is not None}
    allowed = {"lognormal": {"mean", "sigma", "median", "p90"}, "uniform": {"low", "high"},
               "fixed": {"length"}}[args.dist]
    if stray := sorted(given - allowed):
        raise _bad(f"--{stray[0]}", f"not used with --dist {args.dist}")
    by_quantiles = args.median is not None or args.p90 is not None
    if args.dist == "lognormal" and by_quantiles:
        if args.mean is not None or args.sigma is not None:
            raise _bad("--median", "give --mean/--sigma or --median/--p90, not both")
        if args.median is None or args.p90 is None:
            raise _bad("--p90" if args.p90 is None else "--median", "--median and --p90 go together")
        if args.p90 < args.median:
            raise _bad("--p90", f"must be >= --median ({args.median:g}), got {args.p90:g}")
        lengths = LogNormal.from_median_p90(median=args.median, p90=args.p90)
    elif args.dist == "lognormal":
        lengths = LogNormal(mean=args.mean or DEFAULT_MEAN_TOKENS,
                            sigma=DEFAULT_SIGMA if args.sigma is None else args.sigma)
    elif args.dist == "uniform":
        if args.low is None or args.high is None:
            raise _bad("--low" if args.low is None else "--high", "--dist uniform needs --low and --high")
        if args.low > args.high:
            raise _bad("--high", f"must be >= --low ({args.low}), got {args.high}")
        lengths = Uniform(low=args.low, high=args.high)
    else:
        if args.length is None:
            raise _bad("--length", "--dist fixed needs --length")
        lengths = Fixed(length=args.length)
    spec = TotalLengthSpec(lengths=lengths, prompt_fraction=args.prompt_fraction)
    return spec.generate(args.n or default_n, rng)


def _budget(args: argparse.Namespace) -> KvBudget:
    if args.kv_budget_tokens is not None:
        if args.kv_budget_gib is not None:
            raise _bad("--kv-budget-gib", "give either --kv-budget-tokens or --kv-budget-gib, not both")
        return KvBudget(tokens=args.kv_budget_tokens, per_token_bytes=args.per_token_bytes)
    if args.kv_budget_gib is not None:
        if args.per_token_bytes is None:
            raise _bad("--per-token-bytes", "--kv-budget-gib needs --per-token-bytes")
        budget_bytes = int(args.kv_budget_gib * GIB)
        if budget_bytes < args.per_token_bytes:
            raise _bad("--kv-budget-gib", "the budget holds less than one token")
        return KvBudget.from_bytes(total_bytes=budget_bytes, per_token_bytes=args.per_token_bytes)
    per_token = args.per_token_bytes or DEFAULT_PER_TOKEN_BYTES
    return KvBudget.from_bytes(total_bytes=DEFAULT_BUDGET_BYTES, per_token_bytes=per_token)


def _breakdown_json(breakdown: MemoryBreakdown) -> dict[str, float]:
    return {name: round(value, 6) for name, value in asdict(breakdown.fractions()).items()}


def _snapshot(args: argparse.Namespace) -> dict[str, object]:
    rng = np.random.default_rng(args.seed)
    workload = _workload(args, DEFAULT_SNAPSHOT_REQUESTS, rng)
    config = SnapshotConfig(budget=_budget(args), max_context=args.max_context,
                            block_size=args.block_size, policy=args.policy,
                            address_space=args.address_space, progress=args.progress)
    result = run_snapshot(workload, config, rng)
    return {
        "workload": workload.source, "requests": result.requests, "clipped": result.clipped,
        "budget_tokens": config.budget.tokens, "budget_bytes": config.budget.bytes,
        "max_context": config.max_context, "block_size": config.block_size,
        "policy": config.policy.value, "address_space": config.address_space.value,
        "contiguous_fit": result.contiguous.fit, "paged_fit": result.paged.fit,
        "contiguous_utilisation": round(result.contiguous.utilisation, 6),
        "paged_utilisation": round(result.paged.utilisation, 6),
        "contiguous_waste_tokens_mean": round(result.contiguous.waste_tokens_mean, 3),
        "paged_waste_tokens_mean": round(result.paged.waste_tokens_mean, 3),
        "paged_waste_tokens_max": result.paged.waste_tokens_max,
        "breakdown": _breakdown_json(result.contiguous.breakdown),
        "contiguous_breakdown": _breakdown_json(result.contiguous.breakdown),
        "paged_breakdown": _breakdown_json(result.paged.breakdown),
        "sample_reused": result.sample_reused,
    }


def _engine_config(args: argparse.Namespace, *, allocation: str, preemption: str,
                   prefix_caching: bool) -> TimelineConfig:
    if args.max_num_batched_tokens < args.max_num_seqs:
        raise _bad("--max-num-batched-tokens", f"must be >= --max-num-seqs ({args.max_num_seqs}), "
                                               f"got {args.max_num_batched_tokens}")
    if not args.chunked_prefill and args.max_num_batched_tokens < args.max_context:
        raise _bad("--max-num-batched-tokens", f"without chunked prefill it must hold a whole prompt of "
                                               f"--max-context ({args.max_context}) tokens")
    budget = _budget(args)
    cpu_tier = None
    if args.cpu_tier_gib is not None:
        if allocation != Allocation.PAGED.value:
            raise _bad("--cpu-tier-gib", "the CPU tier needs --allocator paged")
        if budget.per_token_bytes is None:
            raise _bad("--cpu-tier-gib", "needs --per-token-bytes (to turn GiB into blocks)")
        if int(args.cpu_tier_gib * GIB) < args.block_size * budget.per_token_bytes:
            raise _bad("--cpu-tier-gib", "holds less than one block")
        cpu_tier = CpuTierConfig(gib=args.cpu_tier_gib, link_gbps=args.cpu_link_gbps)
    if prefix_caching and allocation != Allocation.PAGED.value:
        raise _bad("--prefix-caching", "prefix caching needs --allocator paged")
    return TimelineConfig(
        budget=budget, max_context=args.max_context, allocation=allocation, block_size=args.block_size,
        address_space=getattr(args, "address_space", "buddy"), preemption=preemption,
        step_cost=StepCost.constant(decode_step_s=args.decode_step_s, prefill_tokens_per_s=args.prefill_tokens_per_s),
        max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
        chunked_prefill=args.chunked_prefill, prefix_caching=prefix_caching, cpu_tier=cpu_tier)


def _engine_report(result: TimelineResult) -> dict[str, object]:
    """What every over-time command prints about the run itself."""
    return {
        "completed": result.completed, "rejected": result.rejected,
        "duration_s": round(result.duration_s, 3), "throughput_requests_per_s": round(result.throughput_per_s, 4),
        "mean_batch_size": round(result.mean_batch_size, 3), "mean_step_s": round(result.mean_step_s, 6),
        "mean_wait_s": round(result.mean_wait_s, 4), "mean_ttft_s": round(result.mean_ttft_s, 4),
        "mean_tpot_s": round(result.mean_tpot_s, 6),
        "preemptions": result.preemptions, "recomputed_tokens": result.recomputed_tokens,
        "swapped_tokens": result.swapped_tokens, "preemption_stall_s": round(result.preemption_stall_s, 3),
    }


def _prefix_report(result: TimelineResult) -> dict[str, object]:
    prefix = result.prefix
    if prefix is None:
        return {}
    return {
        "hit_rate": round(prefix.hit_rate, 6), "prompt_tokens": prefix.prompt_tokens,
        "prefill_tokens_saved": prefix.prefill_tokens_saved, "hit_tokens": prefix.hit_tokens,
        "cpu_hit_tokens": prefix.cpu_hit_tokens, "cached_blocks_peak": prefix.cached_blocks_peak,
        "evictions": prefix.evictions, "cpu_stored_blocks": prefix.cpu_stored_blocks,
        "cpu_transfer_s": round(prefix.cpu_transfer_s, 4),
    }


def _estimate(workload: Workload, config: TimelineConfig) -> RunEstimate:
    segments = sum(map(len, workload.content.segments)) if workload.content is not None else 0
    return workload_estimate(workload.prompt_tokens, segments=segments, block_size=config.block_size,
                             prefix_caching=config.prefix_caching, swap=config.preemption == "swap")


def _timeline(args: argparse.Namespace) -> dict[str, object]:
    rng = np.random.default_rng(args.seed)
    workload = _workload(args, DEFAULT_TIMELINE_REQUESTS, rng)
    if args.rate is not None:
        workload = workload.with_arrivals(poisson_arrivals(workload.size, args.rate, rng))
    elif workload.arrival_s is None:
        raise _bad("--rate", "the workload has no arrival times: give --rate (requests/s)")
    if args.transfer_delay_s and not args.arrive_prefilled:
        raise _bad("--transfer-delay-s", "needs --arrive-prefilled (the delay is the KV's trip to a decode pool)")
    if args.arrive_prefilled and args.prefix_caching:
        raise _bad("--arrive-prefilled", "prefilled arrivals run without --prefix-caching")
    if args.arrive_prefilled and args.cpu_tier_gib is not None:
        raise _bad("--arrive-prefilled", "prefilled arrivals run without --cpu-tier-gib")
    config = _engine_config(args, allocation=args.allocator, preemption=args.preempt,
                            prefix_caching=args.prefix_caching)
    if args.arrive_prefilled:
        config = replace(config, arrive_prefilled=True, transfer_delay_s=args.transfer_delay_s)
    check_estimate(_estimate(workload, config), requests="--n", block_size="--block-size")
    result = run_timeline(workload, config, deadline=Deadline(field="--n"))
    return {
        "workload": workload.source, "requests": workload.size, "budget_tokens": config.budget.tokens,
        "allocator": config.allocation.value, "preempt": config.preemption.value,
        "block_size": config.block_size, "max_context": config.max_context,
        "max_num_seqs": config.max_num_seqs, "max_num_batched_tokens": config.max_num_batched_tokens,
        "chunked_prefill": config.chunked_prefill, "prefix_caching": config.prefix_caching,
        **_prefilled_report(result),
        **_engine_report(result),
        "token_state_fraction": round(result.token_state_fraction, 6),
        "breakdown": _breakdown_json(result.breakdown),
        **_prefix_report(result),
    }


def _prefilled_report(result: TimelineResult) -> dict[str, object]:
    """A decode pool's own figures (the other modes print none, so their reports stay as they were)."""
    config = result.config
    if not config.arrive_prefilled:
        return {}
    return {
        "arrive_prefilled": True, "transfer_delay_s": config.transfer_delay_s,
        "computed_tokens": result.computed_tokens,
        "peak_allocated_tokens": result.peak_allocated_tokens,
        "mean_allocated_tokens": round(result.mean_allocated_tokens, 3),
    }


def _prefix(args: argparse.Namespace) -> dict[str, object]:
    rng = np.random.default_rng(args.seed)
    if args.trace is not None:
        workload = load_trace_csv(args.trace)
        if args.requests:
            workload = workload.head(args.requests)
        if workload.arrival_s is None:
            workload = workload.with_arrivals(poisson_arrivals(workload.size, args.rate, rng))
        workload = with_shared_prefix(workload, args.system_prompt_tokens)
    else:
        if args.system_prompt_tokens + args.user_tokens < 1:
            raise _bad("--user-tokens", "a prompt needs a token: give --system-prompt-tokens or --user-tokens")
        check_estimate(prefix_estimate(requests=args.requests or DEFAULT_TIMELINE_REQUESTS, turns=args.turns,
                                       system_tokens=args.system_prompt_tokens, user_tokens=args.user_tokens,
                                       output_tokens=args.output_tokens, block_size=args.block_size),
                       requests="--requests", turns="--turns", block_size="--block-size")
        scenario = PrefixScenario(requests=args.requests or DEFAULT_TIMELINE_REQUESTS,
                                  system_tokens=args.system_prompt_tokens, user_tokens=args.user_tokens,
                                  output_tokens=args.output_tokens, prefixes=args.prefixes, turns=args.turns,
                                  rate=args.rate, think_s=args.think_s)
        workload = prefix_workload(scenario, rng)
    config = _engine_config(args, allocation=Allocation.PAGED.value, preemption=Preemption.RECOMPUTE.value,
                            prefix_caching=True)
    check_estimate(_estimate(workload, config), requests="--requests", turns="--turns", block_size="--block-size")
    result = run_timeline(workload, config, deadline=Deadline(field="--requests"))
    return {
        "workload": workload.source, "requests": workload.size, "budget_tokens": config.budget.tokens,
        "block_size": config.block_size, **_prefix_report(result), **_engine_report(result),
        "breakdown": _breakdown_json(result.breakdown),
    }


# Rows whose value is an allocator's option value: the table names it as every page does, the
# option value kept in brackets (what to pass back); the JSON keeps the bare value.
_ALLOCATOR_ROWS = ("policy", "allocator")


def _table(report: dict[str, object]) -> str:
    rows = []
    for key, value in report.items():
        if key in _ALLOCATOR_ROWS and isinstance(value, str):
            value = f"{allocator_label(value)} [{value}]"
        elif isinstance(value, dict):
            value = ", ".join(f"{k} {v:.1%}" for k, v in value.items())
        elif isinstance(value, float):
            value = f"{value:,.4g}"
        elif isinstance(value, int) and not isinstance(value, bool):
            value = f"{value:,}"
        rows.append((key, str(value)))
    width = max(len(key) for key, _ in rows)
    return "\n".join(f"{key:<{width}}  {value}" for key, value in rows)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0, or 2 for bad arguments)."""

    def body() -> int:
        args = build_parser().parse_args(argv)
        report = {"snapshot": _snapshot, "timeline": _timeline, "prefix": _prefix}[args.command](args)
        try:
            text = dumps_strict(report, indent=2) if args.json else _table(report)
        except ValueError:  # NaN or infinity: bounded options should never get here
            raise UsageError("the result is not finite; use less extreme options") from None
        print(text)
        return 0

    return run_cli(PROG, lambda: _refusals_as_usage(body))


def _refusals_as_usage(body: Callable[[], int]) -> int:
    """``body()``, with a combination the library refuses (a plain ValueError, whose message names
    the value) turned into a usage error; field-named InputErrors pass through to ``run_cli``."""
    try:
        return body()
    except InputError:
        raise
    except ValueError as err:
        raise UsageError(str(err).splitlines()[0] if str(err) else "invalid arguments") from None

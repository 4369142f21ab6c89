"""Snapshot: how many requests fit in a KV budget, contiguous against paged, and what is wasted.

The reference page's demo made exact. Requests are admitted in arrival order until the next one
does not fit (first come, first served, no skipping). At the snapshot moment each admitted request
holds ``prompt + progress · output`` tokens.

Contiguous reservations (``policies.py``) are placed by a buddy allocator or first fit. With no
request freed yet, a buddy allocator admits a chunk exactly when the free total is at least the
chunk: free memory is always a set of blocks, one per set bit of the free total, so taking
2**k from the smallest free block ≥ 2**k leaves ``free − 2**k`` in the same form. Placement in a
snapshot therefore reduces to a running sum, which is why no loop is needed here (tests check this
against the real ``BuddyAllocator``). The memory is split as the PagedAttention paper's figure 2
does (:class:`~simulation.memory.MemoryBreakdown`): a buddy allocator's rounding is external
fragmentation, not internal; holes between live chunks need frees and appear over time
(``timeline.py``).

If every sampled request fits, the sample is reused in order (as if more requests of the same
distribution arrived), so the fit counts do not depend on the sample size once it is
representative.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulation.allocators import AddressSpace, chunk_sizes
from simulation.arith import paged_slots
from simulation.memory import KvBudget, MemoryBreakdown
from simulation.policies import ReservationPolicy, clip_to_context, reservation_tokens
from simulation.workloads import Workload

# vLLM's default block size, tokens.
DEFAULT_BLOCK_SIZE = 16
# Block sizes of the waste sweep: powers of two from 1 to 256 tokens (the reference page's range).
SWEEP_BLOCK_SIZES = tuple(1 << k for k in range(9))
# Requests drawn in the reference page's picture.
PICTURE_REQUESTS = 40


@dataclass(frozen=True, kw_only=True)
class SnapshotConfig:
    """What to simulate.

    Attributes
    ----------
    budget : KvBudget
        KV memory, token slots.
    max_context : int
        Model's maximum context, tokens; longer requests are cut to it.
    block_size : int
        Paged block size B, tokens per block.
    policy : ReservationPolicy
        Contiguous reservation policy (Orca Max / Pow2 / Oracle).
    address_space : AddressSpace
        Contiguous allocator: buddy (the paper's baselines) or first fit.
    progress : float or None
        Share of each request's output generated at the snapshot moment, in [0, 1]; 1 counts every
        request at its final length (as the reference page does); None draws each request's moment
        uniformly (a batch caught mid-flight), which needs an ``rng``.
    """

    budget: KvBudget
    max_context: int
    block_size: int = DEFAULT_BLOCK_SIZE
    policy: ReservationPolicy = ReservationPolicy.MAX
    address_space: AddressSpace = AddressSpace.BUDDY
    progress: float | None = 1.0

    def __post_init__(self) -> None:
        if self.block_size < 1:
            raise ValueError(f"block_size must be >= 1 token, got {self.block_size}")
        if self.max_context < 2:
            raise ValueError(f"max_context must be >= 2 tokens, got {self.max_context}")
        if self.progress is not None and not 0.0 <= self.progress <= 1.0:
            raise ValueError(f"progress must be in [0, 1] or None, got {self.progress}")
        object.__setattr__(self, "policy", ReservationPolicy(self.policy))
        object.__setattr__(self, "address_space", AddressSpace(self.address_space))


@dataclass(frozen=True, kw_only=True)
class AllocationSummary:
    """One allocation scheme's figures over the requests that fit.

    Attributes
    ----------
    fit : int
        Requests admitted before the first that does not fit.
    utilisation : float
        Token states over slots allocated to the admitted requests (0–1).
    waste_tokens_mean, waste_tokens_max : float, int
        Allocated but empty slots per admitted request (tokens).
    breakdown : MemoryBreakdown
        The whole budget split into the figure-2 categories, slots.
    """

    fit: int
    utilisation: float
    waste_tokens_mean: float
    waste_tokens_max: int
    breakdown: MemoryBreakdown


@dataclass(frozen=True, kw_only=True)
class RequestPicture:
    """The first requests stored both ways (the reference page's picture), tokens, shape (k,)."""

    tokens: np.ndarray
    contiguous_slots: np.ndarray
    paged_slots: np.ndarray


@dataclass(frozen=True, kw_only=True)
class SnapshotResult:
    """Contiguous (``config.policy``) against paged, for one workload and budget.

    Attributes
    ----------
    contiguous, paged : AllocationSummary
    picture : RequestPicture
        The first ``PICTURE_REQUESTS`` requests.
    requests : int
        Requests in the sample.
    clipped : int
        Requests cut to the maximum context.
    sample_reused : bool
        True when more requests fit than the sample holds (the sample was reused in order).
    """

    config: SnapshotConfig
    contiguous: AllocationSummary
    paged: AllocationSummary
    picture: RequestPicture
    requests: int
    clipped: int
    sample_reused: bool

    @property
    def contiguous_waste_bytes_mean(self) -> float | None:
        """Mean empty bytes per contiguous request, None without bytes per token."""
        per_token = self.config.budget.per_token_bytes
        return None if per_token is None else self.contiguous.waste_tokens_mean * per_token

    @property
    def paged_waste_bytes_mean(self) -> float | None:
        """Mean empty bytes per paged request, None without bytes per token."""
        per_token = self.config.budget.per_token_bytes
        return None if per_token is None else self.paged.waste_tokens_mean * per_token

    @property
    def paged_gain(self) -> float:
        """Paged requests that fit per contiguous one (inf when none fits contiguously)."""
        return self.paged.fit / self.contiguous.fit if self.contiguous.fit else float("inf")


@dataclass(frozen=True, kw_only=True)
class _Lengths:
    """Per-request lengths at the snapshot moment, int64 tokens, shape (n,)."""

    prompt: np.ndarray   # prompt tokens (clipped to the context)
    output: np.ndarray   # true output tokens (clipped to the context)
    current: np.ndarray  # tokens held now
    final: np.ndarray    # tokens at completion
    clipped: int


def _lengths(workload: Workload, config: SnapshotConfig, rng: np.random.Generator | None) -> _Lengths:
    if workload.size == 0:
        raise ValueError("the workload has no requests")
    prompt, output, clipped = clip_to_context(workload, config.max_context)
    if config.progress is None:
        if rng is None:
            raise ValueError("progress=None (random moments) needs an rng")
        share = rng.random(workload.size)
    else:
        share = np.full(workload.size, config.progress)
    generated = np.rint(share * output).astype(np.int64)
    return _Lengths(prompt=prompt, output=output, current=prompt + generated,
                    final=prompt + output, clipped=clipped)


def _admitted_counts(footprint: np.ndarray, capacity: int) -> tuple[int, int]:
    """(full passes over the sample, requests of the next pass) admitted in order.

    ``footprint`` (slots, shape (n,)) is consumed in order, restarting at the beginning when the
    sample is exhausted, until the next request does not fit in ``capacity`` slots.
    """
    per_pass = int(footprint.sum())
    full_passes = capacity // per_pass if per_pass > 0 else 0
    remaining = capacity - full_passes * per_pass
    partial = int(np.searchsorted(np.cumsum(footprint), remaining, side="right"))
    return full_passes, partial


def _admitted_sum(values: np.ndarray, counts: tuple[int, int]) -> int:
    """Sum of ``values`` over the admitted requests (see ``_admitted_counts``)."""
    full_passes, partial = counts
    return int(full_passes * values.sum() + values[:partial].sum())


def _summarise(*, footprint: np.ndarray, reserved: np.ndarray, lengths: _Lengths, capacity: int, budget: int,
               unusable: int) -> AllocationSummary:
    """Figures of one scheme: ``footprint`` slots taken per request, of which ``reserved`` were
    asked for by the reservation policy (the rest is the allocator's rounding); ``capacity``
    usable slots of ``budget``; ``unusable`` slots that can never be handed out (paged remainder)."""
    counts = _admitted_counts(footprint, capacity)
    fit = counts[0] * footprint.size + counts[1]
    allocated = _admitted_sum(footprint, counts)
    asked = _admitted_sum(reserved, counts)
    tokens = _admitted_sum(lengths.current, counts)
    # Slots still to be filled by this request's own future tokens; the rest is never used.
    filled_eventually = _admitted_sum(np.minimum(reserved, lengths.final), counts)
    waste = footprint - lengths.current
    admitted_waste = waste if counts[0] > 0 else waste[: counts[1]]
    breakdown = MemoryBreakdown(
        token_states=tokens, reservation=filled_eventually - tokens,
        internal_fragmentation=asked - filled_eventually,
        external_fragmentation=allocated - asked + unusable, free=budget - unusable - allocated,
    )
    return AllocationSummary(
        fit=fit, utilisation=tokens / allocated if allocated else 0.0,
        waste_tokens_mean=(allocated - tokens) / fit if fit else 0.0,
        waste_tokens_max=int(admitted_waste.max()) if admitted_waste.size else 0,
        breakdown=breakdown,
    )


def _contiguous(lengths: _Lengths, config: SnapshotConfig,
                policy: ReservationPolicy) -> tuple[np.ndarray, AllocationSummary]:
    reserved = reservation_tokens(policy, lengths.prompt, lengths.output, config.max_context)
    footprint = chunk_sizes(config.address_space, reserved)
    budget = config.budget.tokens
    return footprint, _summarise(footprint=footprint, reserved=reserved, lengths=lengths, capacity=budget,
                                 budget=budget, unusable=0)


def _paged(lengths: _Lengths, config: SnapshotConfig) -> tuple[np.ndarray, AllocationSummary]:
    footprint = paged_slots(lengths.current, config.block_size)
    budget = config.budget.tokens
    # Slots past the last whole block can never form a block: unusable from the start.
    remainder = budget % config.block_size
    return footprint, _summarise(footprint=footprint, reserved=footprint, lengths=lengths,
                                 capacity=budget - remainder, budget=budget, unusable=remainder)


def run_snapshot(workload: Workload, config: SnapshotConfig,
                 rng: np.random.Generator | None = None) -> SnapshotResult:
    """Requests that fit, utilisation and waste under contiguous reservation and under paging.

    Parameters
    ----------
    workload : Workload
        Requests in arrival order (n ≥ 1).
    config : SnapshotConfig
    rng : np.random.Generator, optional
        Needed only when ``config.progress`` is None.

    Notes
    -----
    Vectorised: O(n) array operations, no per-request Python loop.
    """
    lengths = _lengths(workload, config, rng)
    contiguous_footprint, contiguous = _contiguous(lengths, config, config.policy)
    paged_footprint, paged = _paged(lengths, config)
    shown = slice(0, PICTURE_REQUESTS)
    return SnapshotResult(
        config=config, contiguous=contiguous, paged=paged,
        picture=RequestPicture(tokens=lengths.current[shown],
                               contiguous_slots=contiguous_footprint[shown],
                               paged_slots=paged_footprint[shown]),
        requests=workload.size, clipped=lengths.clipped,
        sample_reused=max(contiguous.fit, paged.fit) > workload.size,
    )


@dataclass(frozen=True, kw_only=True)
class PolicyRow:
    """One row of the policy comparison: a scheme's name and its figures."""

    name: str
    summary: AllocationSummary


def compare_policies(workload: Workload, config: SnapshotConfig,
                     rng: np.random.Generator | None = None) -> tuple[PolicyRow, ...]:
    """Orca-Max, Orca-Pow2, Orca-Oracle (``config.address_space``) and paging on the same
    requests at the same moments (one draw of ``rng`` when ``config.progress`` is None)."""
    lengths = _lengths(workload, config, rng)
    rows = [PolicyRow(name=f"contiguous {policy.value}", summary=_contiguous(lengths, config, policy)[1])
            for policy in ReservationPolicy]
    rows.append(PolicyRow(name=f"paged (B={config.block_size})", summary=_paged(lengths, config)[1]))
    return tuple(rows)


@dataclass(frozen=True, kw_only=True)
class BlockSizeSweep:
    """Paged waste against block size, simulated beside the analytic expectation.

    Attributes
    ----------
    block_sizes : int64 array, shape (k,)
    waste_tokens_mean : float64 array, shape (k,)
        Simulated mean of B·⌈L/B⌉ − L over all requests, tokens per sequence.
    waste_tokens_expected : float64 array, shape (k,)
        (B − 1) / 2: the mean when lengths are spread evenly modulo B (≈ B/2).
    utilisation : float64 array, shape (k,)
        Σ L / Σ B·⌈L/B⌉.
    """

    block_sizes: np.ndarray
    waste_tokens_mean: np.ndarray
    waste_tokens_expected: np.ndarray
    utilisation: np.ndarray


def sweep_block_sizes(workload: Workload, *, max_context: int,
                      block_sizes: tuple[int, ...] = SWEEP_BLOCK_SIZES) -> BlockSizeSweep:
    """Waste of paging each request at its final length, for every block size (vectorised)."""
    prompt, output, _ = clip_to_context(workload, max_context)
    lengths = (prompt + output)[:, None]                       # (n, 1)
    sizes = np.asarray(block_sizes, dtype=np.int64)[None, :]   # (1, k)
    held = paged_slots(lengths, sizes)                         # (n, k) slots
    waste = (held - lengths).mean(axis=0)
    return BlockSizeSweep(
        block_sizes=sizes[0], waste_tokens_mean=waste,
        waste_tokens_expected=(sizes[0] - 1) / 2.0,
        utilisation=lengths.sum() / held.sum(axis=0),
    )

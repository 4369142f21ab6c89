"""Shared value types: the KV budget and the figure-2 breakdown of KV memory."""

from __future__ import annotations

from dataclasses import dataclass

from units import GiB

GIB = GiB  # cache arithmetic is in binary units: a GB-for-GiB mix-up is a 7 % error


@dataclass(frozen=True, kw_only=True)
class KvBudget:
    """KV-cache memory available for requests.

    Attributes
    ----------
    tokens : int
        Token slots (one slot holds one token's keys and values for all layers).
    per_token_bytes : int or None
        Bytes per slot, when known; only used to report bytes.
    """

    tokens: int
    per_token_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.tokens < 1:
            raise ValueError(f"the KV budget must hold at least 1 token, got {self.tokens}")
        if self.per_token_bytes is not None and self.per_token_bytes < 1:
            raise ValueError(f"per_token_bytes must be >= 1, got {self.per_token_bytes}")

    @classmethod
    def from_bytes(cls, *, total_bytes: int, per_token_bytes: int) -> "KvBudget":
        """The whole token slots that ``total_bytes`` hold (rounded down)."""
        if per_token_bytes < 1:
            raise ValueError(f"per_token_bytes must be >= 1, got {per_token_bytes}")
        return cls(tokens=int(total_bytes) // int(per_token_bytes), per_token_bytes=int(per_token_bytes))

    @classmethod
    def from_gib(cls, *, gib: float, per_token_bytes: int) -> "KvBudget":
        """The whole token slots in ``gib`` GiB (2**30 bytes)."""
        return cls.from_bytes(total_bytes=int(gib * GIB), per_token_bytes=per_token_bytes)

    @property
    def bytes(self) -> int | None:
        """Bytes of the token slots, or None without ``per_token_bytes``."""
        return None if self.per_token_bytes is None else self.tokens * self.per_token_bytes


@dataclass(frozen=True, kw_only=True)
class MemoryBreakdown:
    """KV memory split as in the PagedAttention paper's figure 2 (Kwon et al., 2023), in token slots.

    The five parts add up to the budget:

    - ``token_states``: slots holding a token's keys and values now;
    - ``reservation``: slots allocated to a request for tokens it will still generate;
    - ``internal_fragmentation``: slots reserved beyond the request's final length, i.e.
      over-reservation for a length it never reaches (Orca-Max: the maximum context; Orca-Pow2:
      up to twice the output; Orca-Oracle: none; paging: the end of the last block);
    - ``external_fragmentation``: the paper's "external fragmentation & others": slots taken by
      the allocator beyond what the request asked for (a buddy allocator's power-of-two rounding),
      free holes too small for the next request in line, and for paging the budget's remainder
      smaller than one block;
    - ``free``: the rest. The paper's bars have no free part (its systems ran saturated), so
      compare its "external & others" with ``external_fragmentation + free``.

    Values are floats because over-time figures are time averages.
    """

    token_states: float
    reservation: float
    internal_fragmentation: float
    external_fragmentation: float
    free: float

    @property
    def total(self) -> float:
        """The budget, slots."""
        return (self.token_states + self.reservation + self.internal_fragmentation
                + self.external_fragmentation + self.free)

    @property
    def allocated(self) -> float:
        """Slots handed to requests: token states + reservation + internal fragmentation."""
        return self.token_states + self.reservation + self.internal_fragmentation

    def fractions(self) -> "MemoryBreakdown":
        """The same breakdown as shares of the budget (sums to 1)."""
        total = self.total or 1.0
        return MemoryBreakdown(
            token_states=self.token_states / total, reservation=self.reservation / total,
            internal_fragmentation=self.internal_fragmentation / total,
            external_fragmentation=self.external_fragmentation / total, free=self.free / total,
        )

    @property
    def token_share_of_used(self) -> float:
        """Token states over memory not free (the paper's figure-2 percentage), 0 when idle."""
        used = self.total - self.free
        return self.token_states / used if used > 0 else 0.0

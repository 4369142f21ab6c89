"""Request workloads: prompt and output lengths (tokens) and arrival times (seconds).

Lengths come from a synthetic distribution (log-normal, uniform, fixed), from a preset with
published statistics, or from a trace file (see ``traces.py``). Every random draw goes through the
caller's ``np.random.Generator``: the same seed gives the same workload.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from inputs.errors import InputError
from simulation.content import PromptContent

# z-score of the 90th percentile of a standard normal: P90 = median · exp(Z_P90 · sigma).
Z_P90 = 1.2815515655446004
# Every request has at least one prompt token and one output token, so that prefill and decode
# both exist and a total length is never zero.
MIN_PROMPT_TOKENS = 1
MIN_OUTPUT_TOKENS = 1
# Most requests one workload may draw: a million requests already take a few 8-byte arrays of
# 8 MB each (and the block-size sweep nine times that); larger draws are refused before allocating.
MAX_REQUESTS = 1_000_000


def check_request_count(n: int) -> int:
    """``n`` when it is a usable number of requests to draw (1 to :data:`MAX_REQUESTS`), else
    :class:`~inputs.errors.InputError` of field ``n``."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= MAX_REQUESTS:
        raise InputError("n", f"requests must be a whole number from 1 to {MAX_REQUESTS:,}, got {n!r}")
    return int(n)


@dataclass(frozen=True, kw_only=True)
class Workload:
    """A list of requests.

    Attributes
    ----------
    prompt_tokens : int64 array, shape (n,)
        Prompt (prefill) length of each request, tokens, ≥ 1.
    output_tokens : int64 array, shape (n,)
        True output (decode) length of each request, tokens, ≥ 1.
    arrival_s : float64 array, shape (n,), or None
        Arrival time of each request, seconds from the start, non-decreasing; None when the
        source has none (then arrivals are drawn, e.g. ``poisson_arrivals``).
    source : str
        Where the requests come from, for labels ("lognormal mean 2048 sigma 0.5", a file name).
    conversation : int64 array, shape (n,), or None
        The conversation each request belongs to, when the source says (a trace column).
    content : PromptContent or None
        What the prompts are made of (shared prefixes, conversation turns), for prefix caching;
        None when every prompt is its own.
    """

    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    arrival_s: np.ndarray | None = None
    source: str = ""
    conversation: np.ndarray | None = None
    content: PromptContent | None = None

    def __post_init__(self) -> None:
        if self.prompt_tokens.shape != self.output_tokens.shape or self.prompt_tokens.ndim != 1:
            raise ValueError(
                f"prompt_tokens {self.prompt_tokens.shape} and output_tokens "
                f"{self.output_tokens.shape} must be 1-D of the same length"
            )
        if self.arrival_s is not None and self.arrival_s.shape != self.prompt_tokens.shape:
            raise ValueError(f"arrival_s {self.arrival_s.shape} must match {self.prompt_tokens.shape}")
        if self.conversation is not None and self.conversation.shape != self.prompt_tokens.shape:
            raise ValueError(f"conversation {self.conversation.shape} must match {self.prompt_tokens.shape}")
        if self.content is not None and len(self.content.segments) != self.size:
            raise ValueError(f"content describes {len(self.content.segments)} prompts, not {self.size}")

    @property
    def size(self) -> int:
        """Number of requests."""
        return int(self.prompt_tokens.shape[0])

    @property
    def total_tokens(self) -> np.ndarray:
        """Final length of each request (prompt + output), int64 tokens, shape (n,)."""
        return self.prompt_tokens + self.output_tokens

    def head(self, n: int) -> "Workload":
        """The first ``n`` requests."""
        return replace(self, prompt_tokens=self.prompt_tokens[:n], output_tokens=self.output_tokens[:n],
                       arrival_s=None if self.arrival_s is None else self.arrival_s[:n],
                       conversation=None if self.conversation is None else self.conversation[:n],
                       content=None if self.content is None else self.content.head(n))

    def with_arrivals(self, arrival_s: np.ndarray) -> "Workload":
        """The same requests with the given arrival times (seconds, shape (n,))."""
        return replace(self, arrival_s=np.asarray(arrival_s, dtype=np.float64))


class LengthDistribution(Protocol):
    """A distribution of token counts."""

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` integer lengths (int64, shape (n,), ≥ 1 token)."""
        ...

    @property
    def label(self) -> str:
        """Short description for legends and tables."""
        ...


@dataclass(frozen=True, kw_only=True)
class LogNormal:
    """Log-normal lengths with the given arithmetic ``mean`` (tokens) and log-space ``sigma``.

    ``mu = ln(mean) − sigma²/2`` so that the mean of the draws is ``mean``; draws are rounded to
    integers and floored at 1 token.
    """

    mean: float
    sigma: float

    def __post_init__(self) -> None:
        if not (self.mean >= 1 and math.isfinite(self.mean)):
            raise ValueError(f"mean must be a finite number of tokens >= 1, got {self.mean}")
        if not (self.sigma >= 0 and math.isfinite(self.sigma)):
            raise ValueError(f"sigma must be finite and >= 0, got {self.sigma}")

    @classmethod
    def from_median_p90(cls, *, median: float, p90: float) -> "LogNormal":
        """The log-normal whose median and 90th percentile are given (tokens, p90 ≥ median)."""
        if not (median >= 1 and p90 >= median):
            raise ValueError(f"need 1 <= median <= p90, got median={median}, p90={p90}")
        sigma = math.log(p90 / median) / Z_P90
        return cls(mean=median * math.exp(sigma**2 / 2), sigma=sigma)

    @property
    def mu(self) -> float:
        """Mean of the underlying normal (log tokens)."""
        return math.log(self.mean) - self.sigma**2 / 2

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        draws = rng.lognormal(mean=self.mu, sigma=self.sigma, size=n)
        return np.maximum(np.rint(draws), 1).astype(np.int64)

    @property
    def label(self) -> str:
        return f"log-normal mean {self.mean:g} sigma {self.sigma:g}"


@dataclass(frozen=True, kw_only=True)
class Uniform:
    """Integer lengths uniform on [low, high] tokens (both included)."""

    low: int
    high: int

    def __post_init__(self) -> None:
        if not (1 <= self.low <= self.high):
            raise ValueError(f"need 1 <= low <= high, got low={self.low}, high={self.high}")

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return rng.integers(self.low, self.high, size=n, endpoint=True, dtype=np.int64)

    @property
    def label(self) -> str:
        return f"uniform {self.low}–{self.high}"


@dataclass(frozen=True, kw_only=True)
class Fixed:
    """Every request has exactly ``length`` tokens."""

    length: int

    def __post_init__(self) -> None:
        if self.length < 1:
            raise ValueError(f"length must be >= 1 token, got {self.length}")

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return np.full(n, self.length, dtype=np.int64)

    @property
    def label(self) -> str:
        return f"fixed {self.length}"


@dataclass(frozen=True, kw_only=True)
class TotalLengthSpec:
    """Total tokens per request from one distribution, split into prompt and output.

    ``prompt_fraction`` of each total (rounded, at least 1 token, leaving at least 1 output
    token) is the prompt; the rest is output. The split is an assumption the caller states.
    """

    lengths: LengthDistribution
    prompt_fraction: float = 0.5

    def __post_init__(self) -> None:
        if not 0.0 <= self.prompt_fraction <= 1.0:
            raise ValueError(f"prompt_fraction must be in [0, 1], got {self.prompt_fraction}")

    def generate(self, n: int, rng: np.random.Generator) -> Workload:
        check_request_count(n)
        # Totals below 2 cannot hold one prompt and one output token.
        total = np.maximum(self.lengths.sample(n, rng), MIN_PROMPT_TOKENS + MIN_OUTPUT_TOKENS)
        prompt = np.clip(np.rint(total * self.prompt_fraction).astype(np.int64),
                         MIN_PROMPT_TOKENS, total - MIN_OUTPUT_TOKENS)
        return Workload(prompt_tokens=prompt, output_tokens=total - prompt,
                        source=f"{self.lengths.label}, prompt {self.prompt_fraction:.0%}")


@dataclass(frozen=True, kw_only=True)
class PromptOutputSpec:
    """Prompt and output lengths drawn independently from their own distributions."""

    prompt: LengthDistribution
    output: LengthDistribution
    label: str = ""

    def generate(self, n: int, rng: np.random.Generator) -> Workload:
        check_request_count(n)
        prompt = self.prompt.sample(n, rng)
        output = self.output.sample(n, rng)
        return Workload(prompt_tokens=prompt, output_tokens=output,
                        source=self.label or f"prompt {self.prompt.label}; output {self.output.label}")


@dataclass(frozen=True, kw_only=True)
class Preset:
    """A named workload with its source and the assumptions added to the published figures."""

    name: str
    spec: PromptOutputSpec | TotalLengthSpec
    source: str
    assumption: str = ""


# The PagedAttention paper (Kwon et al., 2023, §6.1 / fig. 11) publishes only the means of its
# datasets; the log-space sigmas are our assumption (ShareGPT's lengths are long-tailed, Alpaca's
# instructions are short and even), labelled as such.
PRESETS: tuple[Preset, ...] = (
    Preset(
        name="ShareGPT",
        spec=PromptOutputSpec(prompt=LogNormal(mean=161, sigma=1.0),
                              output=LogNormal(mean=338, sigma=1.0), label="ShareGPT-like"),
        source="PagedAttention paper (Kwon et al., 2023): mean prompt 161, mean output 338 tokens",
        assumption="log-normal with sigma 1.0 (assumed)",
    ),
    Preset(
        name="Alpaca",
        spec=PromptOutputSpec(prompt=LogNormal(mean=19, sigma=0.5),
                              output=LogNormal(mean=58, sigma=0.5), label="Alpaca-like"),
        source="PagedAttention paper (Kwon et al., 2023): mean prompt 19, mean output 58 tokens",
        assumption="log-normal with sigma 0.5 (assumed)",
    ),
    Preset(
        name="Reference page, problem 4",
        spec=TotalLengthSpec(lengths=Uniform(low=1024, high=3072), prompt_fraction=0.5),
        source="KV-cache reference page, problem 4: requests averaging 2,048 tokens",
        assumption="uniform 1,024–3,072 total tokens, half prompt (assumed)",
    ),
)


def preset(name: str) -> Preset:
    """The preset called ``name`` (case-insensitive)."""
    for candidate in PRESETS:
        if candidate.name.lower() == name.lower():
            return candidate
    raise ValueError(f"unknown preset {name!r}; known: {', '.join(p.name for p in PRESETS)}")


def poisson_arrivals(n: int, rate_per_s: float, rng: np.random.Generator) -> np.ndarray:
    """Arrival times (seconds, float64, shape (n,)) of a Poisson process at ``rate_per_s``.

    The first request arrives at 0; gaps are exponential with mean ``1 / rate_per_s``.
    """
    if not (rate_per_s > 0 and math.isfinite(rate_per_s)):
        raise ValueError(f"rate must be a positive number of requests per second, got {rate_per_s}")
    check_request_count(n)
    gaps = rng.exponential(1.0 / rate_per_s, size=n)
    gaps[0] = 0.0
    return np.cumsum(gaps)

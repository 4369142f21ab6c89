"""Mean TPOT, TTFT and output tokens/s of a serving benchmark (``vllm bench serve``,
``sglang.bench_serving``) from :mod:`planner.step_model`'s step time.

A benchmark sends ``num_prompts`` requests of ``input_len`` prompt and ``output_len`` generated
tokens (``--ignore-eos``), either with at most ``concurrency`` in flight (closed loop) or at a
Poisson ``request_rate``. The engine's scheduler (vLLM V1, SGLang) runs every running sequence's
decode and, in the same step, prompt chunks of at most ``chunk_tokens`` tokens (chunked prefill).
How a prompt shares the GPU with decoding is the engine's: vLLM V1 always runs chunked
prefill mixed into the decode step (a prompt's chunk and every running sequence's next token
in one batch); SGLang runs prompts as their own prefill batches between decode steps
(``enable_mixed_chunk`` is off by default, ``python/sglang/srt/server_args.py``). A prompt of
``input_len`` tokens takes ``⌈input ÷ chunk⌉`` steps either way. Three arrival patterns follow:

* **burst** — closed loop with equal lengths: the benchmark starts ``concurrency`` requests at
  once and, their lengths being equal, they finish together, so every wave's prompts arrive
  together. The wave's ``n = ⌈concurrency × input ÷ chunk⌉`` chunk steps run first; request *j*
  gets its first token after chunk ``c_j = ⌈j × input ÷ chunk⌉`` and then decodes through the
  ``n − c_j`` chunks still left::

      TTFT = mean(c_j) × t_chunk
      TPOT = (mean(n − c_j) × t_chunk + (output − 1 − mean(n − c_j)) × t_decode) / (output − 1)
      tokens/s = concurrency × output ÷ (n × t_chunk + (output − 1) × t_decode)

* **staggered** — closed loop with lengths that vary (InferenceX's range ratio 0.8): requests
  drift apart and start at ``concurrency ÷ output`` per step on average, each prompt arriving
  whole in one step (or its chunks): with vLLM that fraction of steps carries a prompt beside
  the decodes, ``TPOT = (1 − f) t_decode + f t_mixed``; with SGLang each prompt adds its own
  prefill step, ``TPOT = t_decode + f t_prefill``. A new request waits half a step, then its
  own prefill. The benchmark's first ``concurrency`` requests still start together, so with
  ``num_prompts`` known, TTFT and TPOT weigh that first burst wave by its share of requests.
* **poisson** — open loop at ``request_rate``: concurrency = rate × (TTFT + (output − 1) × TPOT)
  (Little's law), solved by fixed-point iteration; ``f = rate × step`` prompts per step.

The decode contexts are the mean over a request's life, ``input + output / 2``. Prompt
attention is causal: ``input² / 2`` query–key pairs per prompt. Percentiles (P90, as the
benchmarks print them, NumPy's linear interpolation) come from the burst wave, where requests
differ by the chunk their prompt finished in: TTFT_j, TPOT_j and the pooled inter-token gaps
(``t_chunk`` while prompts are still chunked, ``t_decode`` after). Not modelled: the client's
HTTP and tokenisation time, queueing behind a full KV cache, and the spread of staggered and
Poisson arrivals (their percentiles are None).

:class:`StepModelTiming` hands the same step time to the capacity planner
(:class:`planner.timing.StepTiming`), so the planner's TPOT, its TPOT cap and the figures here
come from one function.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from glossary import dtype_label
from planner.step_model import ServingSetup, StepShape, StepTerms, step_time

Arrival = Literal["burst", "staggered", "poisson"]
POISSON_ITERATIONS = 30  # the fixed point settles to < 0.1 % in a handful of iterations


@dataclass(frozen=True, kw_only=True)
class ValidationSummary:
    """How far the predictions fell from published, measured benchmark runs, as the absolute
    relative error ``|predicted ÷ measured − 1|`` over the runs that report each figure."""

    runs: int  # runs with a measured mean (or median) TPOT
    tpot_median_error: float
    tpot_max_error: float
    tpot_within_10_percent: int  # runs
    ttft_runs: int
    ttft_median_error: float
    ttft_all_low: bool  # every prediction shorter than the measured TTFT
    tokens_runs: int
    tokens_median_error: float  # output tokens/s


# The table "What it reaches" of docs/planner/VALIDATION.md, rounded as it prints them; the runs
# and the prediction beside each are on that page, and tests/planner/test_serving_validation.py
# recomputes these figures from tests/data/serving_runs.json and holds them equal. Nothing was
# fitted to the runs.
VALIDATION = ValidationSummary(runs=18, tpot_median_error=0.081, tpot_max_error=0.64, tpot_within_10_percent=11,
                               ttft_runs=9, ttft_median_error=0.75, ttft_all_low=True,
                               tokens_runs=16, tokens_median_error=0.109)


@dataclass(frozen=True, kw_only=True)
class BenchmarkSpec:
    """A benchmark run's load. Exactly one of ``concurrency`` and ``request_rate`` is given."""

    input_len: float  # mean prompt tokens
    output_len: float  # mean generated tokens
    concurrency: int | None = None
    request_rate: float | None = None  # requests per second (Poisson)
    lengths_vary: bool = False  # closed loop only: staggered instead of burst waves
    chunk_tokens: int = 8192  # the engine's token budget per step (vLLM: max_num_batched_tokens)
    num_prompts: int | None = None  # closed loop: weighs the first, burst wave of a staggered run

    def __post_init__(self) -> None:
        if (self.concurrency is None) == (self.request_rate is None):
            raise ValueError("give exactly one of concurrency and request_rate")
        if self.input_len < 1 or self.output_len < 2:
            raise ValueError("input_len must be ≥ 1 and output_len ≥ 2 (TPOT needs two tokens)")
        if self.concurrency is not None and self.concurrency < 1:
            raise ValueError(f"concurrency must be ≥ 1, got {self.concurrency}")
        if self.request_rate is not None and not (self.request_rate > 0 and math.isfinite(self.request_rate)):
            raise ValueError(f"request_rate must be a positive number, got {self.request_rate}")

    @property
    def arrival(self) -> Arrival:
        if self.request_rate is not None:
            return "poisson"
        return "staggered" if self.lengths_vary else "burst"


@dataclass(frozen=True, kw_only=True)
class ServingPrediction:
    """What the benchmark would print: means over requests, seconds and tokens per second."""

    tpot_s: float
    ttft_s: float
    output_tokens_per_s: float
    decode_step: StepTerms  # the steady decode step, term by term
    concurrency: float  # sequences decoding together (Little's law for Poisson runs)
    arrival: Arrival
    p90_tpot_s: float | None = None  # burst waves only (see the module docstring)
    p90_ttft_s: float | None = None
    p90_itl_s: float | None = None

    @property
    def itl_s(self) -> float:
        """Mean inter-token latency: with equal output lengths, the mean gap over all tokens = TPOT."""
        return self.tpot_s


def predict_benchmark(shape: StepShape, setup: ServingSetup, spec: BenchmarkSpec) -> ServingPrediction:
    """The benchmark's mean TPOT, mean TTFT and output tokens/s on one replica."""
    if spec.arrival == "poisson":
        return _poisson(shape, setup, spec)
    concurrency = int(spec.concurrency)
    burst = _burst(shape, setup, spec, concurrency)
    if spec.arrival == "burst":
        return burst
    steady = _staggered(shape, setup, spec, concurrency)
    if spec.num_prompts is None or spec.num_prompts <= concurrency:
        return steady
    first = concurrency / spec.num_prompts  # the share of requests in the first, burst wave
    ttft = first * burst.ttft_s + (1 - first) * steady.ttft_s
    tpot = first * burst.tpot_s + (1 - first) * steady.tpot_s
    e2e = ttft + (spec.output_len - 1) * tpot
    return ServingPrediction(tpot_s=tpot, ttft_s=ttft, output_tokens_per_s=concurrency * spec.output_len / e2e,
                             decode_step=steady.decode_step, concurrency=concurrency, arrival="staggered")


def _context(spec: BenchmarkSpec) -> float:
    return spec.input_len + spec.output_len / 2


def _prompt_step(shape: StepShape, setup: ServingSetup, spec: BenchmarkSpec, *, decode_batch: int,
                 prompt_tokens: float) -> float:
    """A step carrying ``prompt_tokens`` of prompts: beside ``decode_batch`` decodes (vLLM), or
    alone (SGLang's prefill batch; its decodes run in their own step)."""
    requests = max(1, round(prompt_tokens / spec.input_len))
    rows = decode_batch if mixes_prefill(setup) else 0
    return step_time(shape, setup, decode_batch=rows, context=_context(spec), prefill_tokens=prompt_tokens,
                     prefill_pairs=prompt_tokens * spec.input_len / 2, prefill_requests=requests).total_s


def mixes_prefill(setup: ServingSetup) -> bool:
    """Whether the engine runs prompt chunks inside the decode step (vLLM V1) or apart (SGLang)."""
    return setup.engine == "vllm"


def _burst(shape: StepShape, setup: ServingSetup, spec: BenchmarkSpec, concurrency: int) -> ServingPrediction:
    chunks = max(1, math.ceil(concurrency * spec.input_len / spec.chunk_tokens))
    # c_j for j = 1 … concurrency, rising with j; an array, since a plan may run 10⁵ sequences.
    done_after = np.ceil(np.arange(1, concurrency + 1) * spec.input_len / spec.chunk_tokens)
    mean_chunk = float(done_after.mean())
    left = chunks - mean_chunk  # chunks a request decodes through after its first token
    # While a wave's prompts are chunked, the requests already past their chunk decode beside them.
    t_chunk = _prompt_step(shape, setup, spec, decode_batch=concurrency * (chunks - 1) // (2 * chunks),
                           prompt_tokens=concurrency * spec.input_len / chunks)
    decode = step_time(shape, setup, decode_batch=concurrency, context=_context(spec))
    steps = spec.output_len - 1
    overlap = min(left, steps)
    tpot = (overlap * t_chunk + (steps - overlap) * decode.total_s) / steps
    wave = chunks * t_chunk + steps * decode.total_s
    # Request j: first token after chunk c_j, then min(n − c_j, steps) gaps of a chunk step.
    chunk_gaps = np.minimum(chunks - done_after, steps)
    tpots = (chunk_gaps * t_chunk + (steps - chunk_gaps) * decode.total_s) / steps
    gaps_in_chunks = float(chunk_gaps.sum())
    return ServingPrediction(tpot_s=tpot, ttft_s=mean_chunk * t_chunk,
                             output_tokens_per_s=concurrency * spec.output_len / wave,
                             decode_step=decode, concurrency=concurrency, arrival="burst",
                             p90_tpot_s=_p90_in_order(tpots), p90_ttft_s=_p90_in_order(done_after * t_chunk),
                             p90_itl_s=_p90_of_two(decode.total_s, concurrency * steps - gaps_in_chunks,
                                                   t_chunk, gaps_in_chunks))


def _p90_in_order(values: np.ndarray) -> float:
    """P90 (NumPy's linear interpolation) of values already in order, rising or falling — each
    burst figure is monotone in c_j — without sorting them: position 0.9 × (n − 1) of the rising order."""
    rising = values if values[0] <= values[-1] else values[::-1]
    position = 0.9 * (len(rising) - 1)
    low = int(position)
    high = min(low + 1, len(rising) - 1)
    return float(rising[low] + (position - low) * (rising[high] - rising[low]))


def _p90_of_two(low: float, low_count: float, high: float, high_count: float) -> float:
    """P90 (linear interpolation, NumPy's default) of ``low_count`` gaps of ``low`` seconds and
    ``high_count`` of ``high``, without building the list: position 0.9 × (n − 1) of the sorted gaps."""
    first, second = sorted(((low, low_count), (high, high_count)))
    n = first[1] + second[1]
    position = 0.9 * (n - 1)
    if position <= first[1] - 1:
        return first[0]
    if position >= first[1]:
        return second[0]
    return first[0] + (position - (first[1] - 1)) * (second[0] - first[0])


def _with_prompts(shape: StepShape, setup: ServingSetup, spec: BenchmarkSpec, batch: int,
                  prompts_per_step: float) -> tuple[float, StepTerms]:
    """Mean step time when ``prompts_per_step`` prompts start per decode step on average."""
    decode = step_time(shape, setup, decode_batch=batch, context=_context(spec))
    steps_per_prompt = max(1, math.ceil(spec.input_len / spec.chunk_tokens))
    piece = spec.input_len / steps_per_prompt
    share = prompts_per_step * steps_per_prompt  # steps that carry a prompt piece
    if not mixes_prefill(setup):
        return decode.total_s + share * _prompt_step(shape, setup, spec, decode_batch=0, prompt_tokens=piece), decode
    if share <= 1:
        mixed = _prompt_step(shape, setup, spec, decode_batch=batch, prompt_tokens=piece)
        return (1 - share) * decode.total_s + share * mixed, decode
    tokens = min(prompts_per_step * spec.input_len, spec.chunk_tokens)
    return _prompt_step(shape, setup, spec, decode_batch=batch, prompt_tokens=tokens), decode


def _own_prefill(shape: StepShape, setup: ServingSetup, spec: BenchmarkSpec, batch: int) -> float:
    """A new prompt's own prefill: its chunks, each in a step with the running decodes (vLLM)
    or in a prefill batch of its own (SGLang)."""
    chunks = max(1, math.ceil(spec.input_len / spec.chunk_tokens))
    return chunks * _prompt_step(shape, setup, spec, decode_batch=batch, prompt_tokens=spec.input_len / chunks)


def _staggered(shape: StepShape, setup: ServingSetup, spec: BenchmarkSpec, concurrency: int) -> ServingPrediction:
    tpot, decode = _with_prompts(shape, setup, spec, concurrency, concurrency / spec.output_len)
    ttft = tpot / 2 + _own_prefill(shape, setup, spec, concurrency)
    e2e = ttft + (spec.output_len - 1) * tpot
    return ServingPrediction(tpot_s=tpot, ttft_s=ttft, output_tokens_per_s=concurrency * spec.output_len / e2e,
                             decode_step=decode, concurrency=concurrency, arrival="staggered")


def _poisson(shape: StepShape, setup: ServingSetup, spec: BenchmarkSpec) -> ServingPrediction:
    rate = float(spec.request_rate)
    concurrency, tpot = 1.0, 0.0
    for _ in range(POISSON_ITERATIONS):
        batch = max(1, round(concurrency))
        base = step_time(shape, setup, decode_batch=batch, context=_context(spec)).total_s
        tpot, decode = _with_prompts(shape, setup, spec, batch, rate * (tpot or base))
        ttft = tpot / 2 + _own_prefill(shape, setup, spec, batch - 1)
        concurrency = rate * (ttft + (spec.output_len - 1) * tpot)
    return ServingPrediction(tpot_s=tpot, ttft_s=ttft, output_tokens_per_s=rate * spec.output_len,
                             decode_step=decode, concurrency=concurrency, arrival="poisson")


def prefill_seconds(shape: StepShape, setup: ServingSetup, *, prompt_tokens: float, chunk_tokens: int) -> float:
    """One prompt of ``prompt_tokens`` prefilled alone, in ``⌈prompt ÷ chunk⌉`` steps of the
    engine's token budget, its causal pairs shared evenly among them: the time to first token
    with nothing else running (seconds). Every step samples one row, as vLLM V1 computes the
    logits of each scheduled request and drops those of a prompt not yet whole."""
    if not (prompt_tokens >= 0 and math.isfinite(prompt_tokens)):
        raise ValueError(f"prompt_tokens must be a finite number ≥ 0, got {prompt_tokens!r}")
    if prompt_tokens == 0:
        return 0.0
    chunks = max(1, math.ceil(prompt_tokens / chunk_tokens))
    return chunks * step_time(shape, setup, decode_batch=0, context=prompt_tokens,
                              prefill_tokens=prompt_tokens / chunks,
                              prefill_pairs=prompt_tokens * prompt_tokens / 2 / chunks, prefill_requests=1).total_s


# The step's terms as the planner's sentence names them, in StepTerms' order.
_TERM_WORDS = (("attention_gemms_s", "attention GEMMs"), ("attention_s", "attention"), ("mlp_gemms_s", "MLP GEMMs"),
               ("experts_s", "routed experts"), ("small_kernels_s", "small kernels"), ("allreduce_s", "all-reduce"),
               ("lm_head_s", "LM head"), ("sampling_s", "sampling"))


@dataclass(frozen=True, kw_only=True)
class StepModelTiming:
    """The step model as the capacity planner's :class:`planner.timing.StepTiming`: decode steps
    of :func:`planner.step_model.step_time` and prefill of :func:`prefill_seconds`. Plain values
    only, so a plan that holds its figures can be pickled (the page caches plans)."""

    shape: StepShape
    setup: ServingSetup
    chunk_tokens: int = 8192  # the engine's tokens per step, which a long prompt is chunked into

    def __post_init__(self) -> None:
        if isinstance(self.chunk_tokens, bool) or not isinstance(self.chunk_tokens, int) or self.chunk_tokens < 1:
            raise ValueError(f"chunk_tokens must be a whole number ≥ 1, got {self.chunk_tokens!r}")

    @property
    def label(self) -> str:
        graphs = "CUDA graphs" if self.setup.cuda_graphs else "eager (no CUDA graphs)"
        return (f"step model: {self.setup.engine}, {graphs}, {dtype_label(self.shape.weight_format)} weights on "
                f"{self.setup.gpu.name}, TP {self.shape.tp}")

    def terms(self, batch: int, context: float) -> StepTerms:
        return step_time(self.shape, self.setup, decode_batch=batch, context=context)

    def step_s(self, batch: int, context: float) -> float:
        return self.terms(batch, context).total_s

    def prefill_s(self, prompt_tokens: float) -> float:
        return prefill_seconds(self.shape, self.setup, prompt_tokens=prompt_tokens, chunk_tokens=self.chunk_tokens)

    def describe(self, batch: int, context: float) -> str:
        terms = self.terms(batch, context)
        parts = sorted(((getattr(terms, name), words) for name, words in _TERM_WORDS if getattr(terms, name) > 0),
                       reverse=True)
        gpu = ", ".join(f"{words} {seconds * 1e3:.2f}" for seconds, words in parts)
        text = f"{terms.total_s * 1e3:.2f} ms on each GPU by the step model ({gpu} ms"
        if not self.setup.cuda_graphs:
            bound = "they bind" if terms.host_s > terms.gpu_s else "the GPU's work binds"
            text += f"; eager launches of {terms.kernels:,} kernels take {terms.host_s * 1e3:.2f} ms, {bound}"
        return text + ")."

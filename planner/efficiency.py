"""What a serving step's kernels really reach, per GPU family, precision and engine, each figure
with its source: the numbers :mod:`planner.step_model` multiplies and adds.

A :class:`Figure` is one number, its unit, where it comes from, and ``estimate=True`` where no
measurement or publication for that GPU exists and a figure from another GPU is carried over
(the label says which). Four kinds of source appear:

* **measured here** — ``python3 benchmarks/bench_step_overheads.py`` on the lent H200 (torch 2.11,
  CUDA 13.0, 2026-12-03; medians of 15 CUDA-graph replays; the run's figures are
  ``benchmarks/results/planner/step-overheads-h200-2026-12-03.json``): weight-read
  GEMMs at decode token counts, the per-kernel floor inside a CUDA graph, one eager op's host
  cost, the bf16 matmul ceiling;
* **the project's H200 runs** (the shipped harness run read by ``planner.decode_rates``, and
  docs/kernels/DECODE.md): paged decode attention by batch and context, per backend;
* **published kernel benchmarks**: FlashMLA's README, SGLang's all-reduce test (PR #2904),
  vLLM's and SGLang's ``benchmark_moe`` outputs, FlashAttention-3;
* **estimates**, labelled, where none of these covers a GPU.

Nothing here is fitted to the serving runs the planner is validated against
(``tests/data/serving_runs.json``).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Literal

from hardware.gpus import GPU

Family = Literal["hopper", "ampere", "cdna3", "other"]
Engine = Literal["vllm", "sglang"]

MiB = 1 << 20
_US = 1e-6
_STEP_OVERHEADS = ("measured here: python3 benchmarks/bench_step_overheads.py on the lent H200 "
                   "(torch 2.11, CUDA 13.0, 2026-12-03; benchmarks/results/planner/step-overheads-h200-2026-12-03.json)")


@dataclass(frozen=True, kw_only=True)
class Figure:
    """One efficiency or cost, with its unit and source; ``estimate`` marks a carried figure."""

    value: float
    unit: str
    source: str
    estimate: bool = False

    @property
    def label(self) -> str:
        return f"{self.value:g} {self.unit} ({'estimate: ' if self.estimate else ''}{self.source})"


# ---------------------------------------------------------------------------------------------
# GPU families
# ---------------------------------------------------------------------------------------------

_FAMILY_OF: dict[str, Family] = {
    **dict.fromkeys(("h100-sxm", "h100-pcie", "h100-nvl", "h200", "h20", "gh200-96gb", "gh200-144gb"),
                    "hopper"),
    **dict.fromkeys(("a100-40gb", "a100-80gb"), "ampere"),
    **dict.fromkeys(("mi300x", "mi325x"), "cdna3"),
}

# The lent H200's datasheet bandwidth: the measured curves below are on it (hardware/gpus.py).
H200_BANDWIDTH_BYTES_PER_S = 4.8e12


def gpu_family(gpu: GPU) -> Family:
    """The family whose table row applies to ``gpu`` ("other": Hopper's figures, labelled)."""
    return _FAMILY_OF.get(gpu.id, "other")


# ---------------------------------------------------------------------------------------------
# Weight reads (the GEMMs of a decode step), measured on the H200
# ---------------------------------------------------------------------------------------------

# y = x @ Wᵀ with cuBLAS (bf16) or torch._scaled_mm (FP8, per-tensor scales) inside CUDA graphs,
# microseconds per matmul, launch gaps included; rows: weight MiB, columns: tokens (M).
_GRID_MIB = (1, 4, 16, 64, 256, 512)
_BF16_TOKENS = (1, 8, 32, 64, 128, 256)
_BF16_US = (
    (6.99, 7.03, 7.35, 7.37, 7.53, 7.62),
    (7.44, 7.53, 7.71, 7.85, 8.04, 8.50),
    (9.38, 9.42, 9.72, 9.98, 10.33, 10.54),
    (21.62, 22.23, 22.96, 24.34, 26.48, 29.87),
    (64.03, 64.48, 65.07, 66.02, 69.50, 92.35),
    (125.28, 126.50, 127.36, 129.82, 134.43, 181.25),
)
# _scaled_mm wants the token count padded to 16, so FP8's first column is M = 32 (used below it).
_FP8_TOKENS = (32, 64, 128, 256)
_FP8_US = (
    (5.76, 5.79, 5.79, 5.98),
    (5.94, 6.09, 6.20, 7.00),
    (7.42, 7.66, 8.79, 10.37),
    (20.11, 22.56, 22.15, 28.06),
    (69.25, 70.43, 75.18, 108.58),
    (150.82, 138.02, 145.98, 197.70),
)
# The smallest measured time of each format: what a GEMM costs when it reads almost nothing.
GEMM_FLOOR_S = {"bf16": 6.99 * _US, "fp8": 5.76 * _US}

# HBM read rate of a large decode GEMM ÷ datasheet bandwidth, per family.
READ_EFFICIENCY: dict[Family, Figure] = {
    "hopper": Figure(value=round(512 * MiB / (125.28 * _US) / H200_BANDWIDTH_BYTES_PER_S, 3), unit="× datasheet",
                     source=f"a 512 MiB bf16 GEMV at 4.29 TB/s of 4.8, {_STEP_OVERHEADS}; H100 carries "
                            "the H200's ratio (same HBM3 controller family)"),
    "ampere": Figure(value=0.88, unit="× datasheet",
                     source="A100 80GB SXM read kernel at 1.80 of 2.04 TB/s, NCU-confirmed: "
                            "https://forums.developer.nvidia.com/t/trouble-to-reach-peak-bandwidth-of-a100/339083"),
    "cdna3": Figure(value=0.88, unit="× datasheet", estimate=True,
                    source="no MI300X read measurement in the stored material; the A100's ratio carried"),
    "other": Figure(value=0.89, unit="× datasheet", estimate=True, source="Hopper's measured ratio carried"),
}


def interp_clamped(x: float, xs: tuple[float, ...], ys: tuple[float, ...]) -> float:
    """Piecewise-linear ``y(x)``, clamped at both ends."""
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    i = bisect.bisect_right(xs, x)
    t = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
    return ys[i - 1] + t * (ys[i] - ys[i - 1])


def _h200_gemm_us(weight_bytes: float, tokens: float, fmt: Literal["bf16", "fp8"]) -> float:
    """The measured grid, interpolated in log(weight bytes) and in tokens; weights above the
    grid extend at the largest matrix's rate, tokens above it are left to the compute bound."""
    token_axis, table = (_BF16_TOKENS, _BF16_US) if fmt == "bf16" else (_FP8_TOKENS, _FP8_US)
    mib = weight_bytes / MiB
    logs = tuple(math.log(m) for m in _GRID_MIB)
    column = [interp_clamped(tokens, token_axis, row) for row in table]
    if mib <= _GRID_MIB[-1]:
        return interp_clamped(math.log(max(mib, _GRID_MIB[0])), logs, tuple(column))
    # Beyond 512 MiB: the time per extra byte of the 256 → 512 MiB step.
    slope = (column[-1] - column[-2]) / (_GRID_MIB[-1] - _GRID_MIB[-2])
    return column[-1] + (mib - _GRID_MIB[-1]) * slope


def gemm_seconds(weight_bytes: float, values: float, tokens: float, *, grid: Literal["bf16", "fp8"],
                 gpu: GPU, flops_per_s: float) -> float:
    """One decode GEMM reading ``weight_bytes`` (``values`` weights) for ``tokens`` rows on ``gpu``.

    ``grid`` picks the measured curve: ``"fp8"`` for FP8 weights on a GPU with FP8 tensor cores,
    ``"bf16"`` otherwise (bf16 weights, and weights that a kernel dequantises to bf16: FP8 on
    Ampere, 4-bit AWQ/GPTQ/MXFP4 through Marlin — see :data:`W4A16_NOTE`). The H200 measurement
    moves to another GPU by keeping its floor (launch and tail) and scaling the rest by the two
    GPUs' effective read rates; the result is never below the compute bound
    ``2 × tokens × values ÷ flops_per_s`` (seconds).
    """
    floor = GEMM_FLOOR_S[grid]
    measured = _h200_gemm_us(weight_bytes, tokens, grid) * _US
    h200_rate = H200_BANDWIDTH_BYTES_PER_S * READ_EFFICIENCY["hopper"].value
    memory = floor + max(measured - floor, 0.0) * h200_rate / read_rate(gpu)
    return max(memory, 2 * tokens * values / flops_per_s)


def read_rate(gpu: GPU) -> float:
    """Bytes per second a large weight read reaches on ``gpu``: datasheet × its family's ratio."""
    return gpu.bandwidth_bytes_per_s * READ_EFFICIENCY[gpu_family(gpu)].value


W4A16_NOTE = ("4-bit weights (AWQ/GPTQ/MXFP4 through Marlin) timed on the measured bf16 curve at "
              "their own bytes (Marlin: Frantar et al. 2024, near-ideal 4-bit read speed at batch ≤ 32)")


# ---------------------------------------------------------------------------------------------
# Compute rates
# ---------------------------------------------------------------------------------------------

MATMUL_EFFICIENCY: dict[Family, Figure] = {
    "hopper": Figure(value=0.81, unit="× datasheet bf16",
                     source=f"bf16 8192³ at 800 of 989 TFLOP/s, {_STEP_OVERHEADS} (earlier H200 runs: 672–790)"),
    "ampere": Figure(value=0.81, unit="× datasheet bf16", estimate=True, source="Hopper's measured ratio carried"),
    "cdna3": Figure(value=0.81, unit="× datasheet bf16", estimate=True, source="Hopper's measured ratio carried"),
    "other": Figure(value=0.81, unit="× datasheet bf16", estimate=True, source="Hopper's measured ratio carried"),
}
# FP8 tensor cores run twice the bf16 rate on Hopper (H100/H200 datasheets: 1,979 vs 989 dense)
# and on CDNA3 (MI300X: 2,615 vs 1,307); Ampere has none, so FP8 weights multiply in bf16 there.
FP8_RATE_MULTIPLIER: dict[Family, float] = {"hopper": 2.0, "cdna3": 2.0, "ampere": 1.0, "other": 1.0}


def matmul_flops_per_s(gpu: GPU, *, fp8: bool = False) -> float:
    """Dense matmul FLOP/s on ``gpu``: bf16, or FP8 where the GPU has FP8 tensor cores."""
    family = gpu_family(gpu)
    rate = gpu.bf16_tflops * 1e12 * MATMUL_EFFICIENCY[family].value
    return rate * FP8_RATE_MULTIPLIER[family] if fp8 else rate


def has_fp8(gpu: GPU) -> bool:
    """Whether FP8 weights multiply natively (else a kernel dequantises them to bf16)."""
    return FP8_RATE_MULTIPLIER[gpu_family(gpu)] > 1


# ---------------------------------------------------------------------------------------------
# Small kernels and the host
# ---------------------------------------------------------------------------------------------

KERNEL_FLOOR = Figure(value=0.92, unit="µs per kernel in a CUDA graph",
                      source=f"400 in-place adds of 4,096 bf16 values in one graph, {_STEP_OVERHEADS}")
EAGER_OP = Figure(value=6.9, unit="µs of host time per eager op",
                  source=f"2,000 torch.add launches without a graph, {_STEP_OVERHEADS}; an engine's own "
                         "Python per layer comes on top and is not counted")

# ---------------------------------------------------------------------------------------------
# Attention
# ---------------------------------------------------------------------------------------------

# Paged decode's read rate by batch and context and per backend is the measured grid of
# planner/decode_rates.py; below it, a call costs at least what FlashInfer's tensor-core decode
# took for one sequence of 1K on the H200, where nothing is left to read (docs/kernels/DECODE.md).
DECODE_ATTENTION_FLOOR = Figure(value=10.1, unit="µs per call",
                                source="FlashInfer TC decode, B 1 × 1K on the H200 (docs/kernels/DECODE.md)")
# FlashMLA README (deepseek-ai/FlashMLA): dense MLA decode up to 3,000 GB/s memory-bound and
# 660 TFLOPS compute-bound on H800 SXM5 (3.35 TB/s, 989 dense bf16 TFLOP/s), CUDA 12.8.
MLA_DECODE_BANDWIDTH = Figure(value=round(3.0 / 3.35, 3), unit="× datasheet", source="FlashMLA README, H800 SXM5")
MLA_DECODE_COMPUTE = Figure(value=round(660 / 989, 3), unit="× datasheet bf16", source="FlashMLA README, H800 SXM5")
# Prefill attention: FlashAttention-3 at ~620–650 TFLOP/s bf16, d = 128 on H100 (Shah et al.,
# 2024; 4K–16K tokens — shorter prompts run lower).
PREFILL_ATTENTION = Figure(value=round(635 / 989, 3), unit="× datasheet bf16",
                           source="FlashAttention-3 on H100, bf16, d 128 (Shah et al., 2024)")


# ---------------------------------------------------------------------------------------------
# Mixture of experts: the fused MoE kernel
# ---------------------------------------------------------------------------------------------

# The fused MoE call (top-k, align, two grouped GEMMs, activation, sum) as published kernel
# benchmarks time it, split as  t = fixed + experts touched × (per-expert + expert bytes ÷ rate):
# the fixed part and the per-expert part are read off three published runs of benchmark_moe at
# the rate measured here (READ_EFFICIENCY) — vLLM PR #24700 (H100: Mixtral-8x7B bf16 TP 2,
# 144 µs at batch 1, +57–62 µs per 176 MB expert; Qwen3-30B-A3B FP8 TP 1, 44.5 µs at batch 1,
# +1.7–2.3 µs per 4.7 MB expert) and SGLang PR #11730 (H200: Qwen3-235B-A22B FP8 TP 8, 31.7 µs
# at batch 1, +0.65–1.4 µs per 2.4 MB expert slice).
MOE_FIXED = Figure(value=27.0, unit="µs per MoE layer",
                   source="benchmark_moe batch-1 times less their experts' reads: 26 (Mixtral), 30 "
                          "(Qwen3-30B), 25 (Qwen3-235B) µs, mean 27 — vLLM #24700, SGLang #11730")
MOE_PER_EXPERT = Figure(value=0.28, unit="µs per expert touched",
                        source="the same benchmarks' per-expert increments beyond the expert's bytes "
                               "at the measured read rate")


def moe_seconds(experts_touched: float, expert_bytes: float, gpu: GPU) -> float:
    """One MoE layer's routed experts on one GPU: ``experts_touched`` slices of ``expert_bytes``."""
    return MOE_FIXED.value * _US + experts_touched * (MOE_PER_EXPERT.value * _US + expert_bytes / read_rate(gpu))


# ---------------------------------------------------------------------------------------------
# Tensor-parallel all-reduce
# ---------------------------------------------------------------------------------------------

# SGLang PR #2904 (H100, NVLink, no CUDA graph): latency of one all-reduce of fp32 tensors of
# 512 … 262,144 elements (2 KiB … 1 MiB; the test allocates float32), vLLM's custom all-reduce
# and SGLang's (TensorRT-LLM-derived) kernel, at TP 2 / 4 / 8. Without a graph each call also
# pays its launch, so inside a graph these are upper bounds.
_AR_BYTES = (2_048, 16_384, 131_072, 1_048_576, 2_097_152, 4_194_304)
_AR_US: dict[Engine, dict[int, tuple[float, ...]]] = {
    "vllm": {2: (9.5, 8.8, 8.7, 12.9, 17.7, 26.6), 4: (9.1, 8.5, 9.2, 20.6, 26.9, 40.2),
             8: (10.1, 9.3, 11.8, 24.1, 30.4, 45.0)},
    "sglang": {2: (3.7, 3.9, 4.5, 7.9, 12.5, 19.9), 4: (4.8, 3.7, 4.8, 13.9, 20.2, 31.1),
               8: (5.9, 5.7, 7.8, 16.7, 22.1, 33.8)},
}
ALLREDUCE_SOURCE = ("SGLang PR #2904 custom all-reduce test on H100 NVLink (vLLM's and SGLang's kernels, "
                    "TP 2/4/8, 2 KiB–4 MiB, without CUDA graphs)")


def allreduce_seconds(message_bytes: float, tp: int, engine: Engine) -> tuple[float, bool]:
    """One all-reduce of ``message_bytes`` over ``tp`` GPUs, and whether the figure is carried
    (a TP degree outside 2/4/8 takes the nearest measured one; sizes beyond 4 MiB extend at the
    2 → 4 MiB slope)."""
    if tp <= 1:
        return 0.0, False
    measured = min(_AR_US[engine], key=lambda k: abs(math.log2(k) - math.log2(tp)))
    row = _AR_US[engine][measured]
    if message_bytes > _AR_BYTES[-1]:
        slope = (row[-1] - row[-2]) / (_AR_BYTES[-1] - _AR_BYTES[-2])
        us = row[-1] + (message_bytes - _AR_BYTES[-1]) * slope
    else:
        logs = tuple(math.log(b) for b in _AR_BYTES)
        us = interp_clamped(math.log(max(message_bytes, _AR_BYTES[0])), logs, row)
    return us * _US, measured != tp


def table() -> tuple[tuple[str, Figure], ...]:
    """Every scalar figure with its name, for the docs and the CLI."""
    rows: list[tuple[str, Figure]] = []
    for family in ("hopper", "ampere", "cdna3"):
        rows.append((f"weight read, {family}", READ_EFFICIENCY[family]))
        rows.append((f"matmul, {family}", MATMUL_EFFICIENCY[family]))
    rows += [("kernel floor in a graph", KERNEL_FLOOR), ("eager op", EAGER_OP),
             ("decode attention floor", DECODE_ATTENTION_FLOOR),
             ("MLA decode bandwidth", MLA_DECODE_BANDWIDTH), ("MLA decode compute", MLA_DECODE_COMPUTE),
             ("prefill attention", PREFILL_ATTENTION), ("MoE fixed", MOE_FIXED),
             ("MoE per expert", MOE_PER_EXPERT)]
    return tuple(rows)

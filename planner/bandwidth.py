"""Where the capacity planner's bandwidth and matmul efficiency come from, labelled.

The planner multiplies the chosen GPU's datasheet figures by two efficiencies:

* ``bandwidth_efficiency``: HBM bytes per second a decode step really achieves ÷ datasheet bandwidth;
* ``compute_efficiency``: bf16 matmul FLOP/s really achieved ÷ datasheet dense bf16 rate.

Sources, in order of preference (a measurement on the user's own GPU beats one on another GPU,
which beats the vendor's promise):

1. ``measured``: a run of ``python -m kernels.bench --json`` on this GPU (the page keeps it in
   session state; the CLI reads it from ``--bench-json``);
2. ``h200-results``: the shipped H200 run in ``benchmarks/results/*.json``;
3. ``datasheet``: the vendor's figures, efficiency 1 (an upper bound, never reached).

An efficiency is a ratio, so an H200 measurement carries over to another GPU as "this fraction
of its datasheet", which is the honest transfer; the label says so.

Every source is a typed :class:`~kernels.bench.records.BenchReport`. Its target
``decode_large_tbps`` is the worst paged-decode KV read rate over shapes with batch × context
≥ 256K tokens: what a decode step reads at serving batch sizes, so it gives the bandwidth. The
matmul efficiency comes from the report's measured bf16 matmul ceiling.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from kernels.bench.records import DATASHEET_TBPS, DATASHEET_TFLOPS, BenchReport
from kernels.bench.shipped import find_shipped_results

BandwidthSource = Literal["measured", "h200-results", "datasheet"]
SOURCES_IN_ORDER: tuple[BandwidthSource, ...] = ("measured", "h200-results", "datasheet")

# The target in the bench report whose measurement is the decode KV read rate at serving sizes.
DECODE_TARGET_NAME = "decode_large_tbps"

RESULTS_DIR = Path(__file__).resolve().parent.parent / "benchmarks" / "results"


class UnusableReport(ValueError):
    """A valid bench report that cannot give an efficiency; the message says which field is missing."""


@dataclass(frozen=True, kw_only=True)
class BandwidthEstimate:
    """Efficiencies applied to a GPU's datasheet bandwidth and matmul rate, with their origin.

    Attributes
    ----------
    source : one of ``SOURCES_IN_ORDER``.
    bandwidth_efficiency : achieved HBM read rate ÷ datasheet bandwidth (dimensionless, > 0).
    compute_efficiency : achieved bf16 matmul rate ÷ datasheet dense rate (dimensionless, > 0).
    label : a sentence for the page and the CLI: where the numbers came from.
    """

    source: BandwidthSource
    bandwidth_efficiency: float
    compute_efficiency: float
    label: str

    def __post_init__(self) -> None:
        for name in ("bandwidth_efficiency", "compute_efficiency"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number, got {value!r}")

    def with_bandwidth_efficiency(self, efficiency: float) -> BandwidthEstimate:
        """The same source with the bandwidth factor overridden (the CLI's ``--efficiency``)."""
        return BandwidthEstimate(
            source=self.source,
            bandwidth_efficiency=efficiency,
            compute_efficiency=self.compute_efficiency,
            label=f"{self.label}; bandwidth efficiency set to {efficiency:g}",
        )


def datasheet_estimate() -> BandwidthEstimate:
    """Vendor figures taken at face value: efficiency 1 (an upper bound on speed)."""
    return BandwidthEstimate(
        source="datasheet",
        bandwidth_efficiency=1.0,
        compute_efficiency=1.0,
        label="datasheet bandwidth and matmul rate (an upper bound: real kernels reach less)",
    )


def estimate_from_bench(
    report: BenchReport,
    *,
    source: BandwidthSource,
    datasheet_bandwidth_tbps: float | None = None,
    datasheet_bf16_tflops: float | None = None,
) -> BandwidthEstimate:
    """Efficiencies from one bench report.

    Parameters
    ----------
    report : a run of ``python -m kernels.bench --json``, parsed by ``kernels.bench.records``.
    source : ``"measured"`` (run on this GPU) or ``"h200-results"`` (the shipped run).
    datasheet_bandwidth_tbps, datasheet_bf16_tflops : the measured device's datasheet figures
        (TB/s, TFLOP/s); default: those the report states for its own device.

    Raises
    ------
    UnusableReport : no target ``decode_large_tbps`` with a positive measurement and no
        measured copy ceiling to fall back on.
    """
    ceilings = report.ceilings
    bandwidth_tbps = datasheet_bandwidth_tbps or _positive(ceilings.datasheet_tbps) or DATASHEET_TBPS
    peak_tflops = datasheet_bf16_tflops or _positive(ceilings.datasheet_tflops) or DATASHEET_TFLOPS
    try:
        read_tbps, what = _decode_target_tbps(report), "paged decode"
    except UnusableReport:
        # No decode figure: the streaming copy ceiling is the next best (a copy moves as many
        # bytes as it reads and writes, and its rate counts both, so it estimates read speed).
        copy = _positive(ceilings.copy_tbps)
        if copy is None:
            raise
        read_tbps, what = copy, "streaming copy"
    matmul_tflops = _positive(ceilings.matmul_tflops)
    compute_efficiency = 1.0 if matmul_tflops is None else matmul_tflops / peak_tflops
    where = "harness run on this GPU" if source == "measured" else "shipped H200 results"
    matmul_text = (
        "matmul at datasheet rate (not in the JSON)"
        if matmul_tflops is None
        else f"bf16 matmul {matmul_tflops:.0f} of {peak_tflops:.0f} TFLOP/s = {compute_efficiency:.2f}"
    )
    return BandwidthEstimate(
        source=source,
        bandwidth_efficiency=read_tbps / bandwidth_tbps,
        compute_efficiency=compute_efficiency,
        label=(
            f"{where} ({report.provenance.device}): {what} {read_tbps:.2f} of {bandwidth_tbps:g} TB/s "
            f"= {read_tbps / bandwidth_tbps:.2f} of datasheet; {matmul_text}"
        ),
    )


def choose_estimate(
    preferred: BandwidthSource,
    *,
    measured: BenchReport | None = None,
    measured_datasheet_tbps: float | None = None,
    measured_datasheet_tflops: float | None = None,
    results_dir: Path = RESULTS_DIR,
) -> tuple[BandwidthEstimate, list[str]]:
    """The preferred source, or the next one down the list when it is not available.

    Returns the estimate and a list of notes saying which sources were skipped and why, so the
    page can show "no harness run yet: using the shipped H200 results".
    """
    notes: list[str] = []
    start = SOURCES_IN_ORDER.index(preferred)
    for source in SOURCES_IN_ORDER[start:]:
        if source == "measured":
            if measured is None:
                notes.append("no harness run on this GPU yet")
                continue
            try:
                return estimate_from_bench(
                    measured, source="measured",
                    datasheet_bandwidth_tbps=measured_datasheet_tbps,
                    datasheet_bf16_tflops=measured_datasheet_tflops,
                ), notes
            except UnusableReport as exc:
                notes.append(f"harness run unusable: {exc}")
                continue
        if source == "h200-results":
            estimate, note = _shipped_estimate(results_dir)
            if estimate is not None:
                return estimate, notes
            notes.append(note)
    return datasheet_estimate(), notes


def _shipped_estimate(results_dir: Path) -> tuple[BandwidthEstimate | None, str]:
    """The estimate from the shipped results, or None and why there is none."""
    shipped = find_shipped_results(results_dir)
    found = len(shipped.results) + len(shipped.rejected)
    if not found:
        return None, "no shipped H200 results in benchmarks/results/"
    # The folder also holds other runs (kernel tuning logs), which the loader rejects; of the
    # harness reports, the newest run that has a decode or copy figure is used.
    for result in shipped.results:
        try:
            return estimate_from_bench(result.report, source="h200-results"), ""
        except UnusableReport:
            continue
    return None, f"no harness report among the {found} file(s) in benchmarks/results/"


def _decode_target_tbps(report: BenchReport) -> float:
    for target in report.targets:
        if target.name == DECODE_TARGET_NAME:
            value = _positive(target.measured)
            if value is None:
                raise UnusableReport(f"target '{DECODE_TARGET_NAME}' has no positive 'measured'")
            return value
    raise UnusableReport(f"no target named '{DECODE_TARGET_NAME}' in 'targets'")


def _positive(value: float | None) -> float | None:
    if isinstance(value, (int, float)) and math.isfinite(value) and value > 0:
        return float(value)
    return None

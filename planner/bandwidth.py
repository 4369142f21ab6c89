"""Where the capacity planner's bandwidth and matmul efficiency come from, labelled.

The planner multiplies the chosen GPU's datasheet figures by two efficiencies:

* ``bandwidth_efficiency``: HBM bytes per second a decode step really achieves ÷ datasheet bandwidth;
* ``compute_efficiency``: bf16 matmul FLOP/s really achieved ÷ datasheet dense bf16 rate.

Sources, in order of preference (issue 6):

1. ``measured``: a run of ``python -m kernels.bench --json`` on this GPU (the page keeps it in
   session state; the CLI reads it from ``--bench-json``);
2. ``h200-results``: the shipped H200 run in ``benchmarks/results/*.json``;
3. ``datasheet``: the vendor's figures, efficiency 1 (an upper bound, never reached).

An efficiency is a ratio, so an H200 measurement carries over to another GPU as "this fraction
of its datasheet", which is the honest transfer; the label says so.

The bench JSON contract (issue 4) guarantees a ``targets`` list of ``{name, measured, required,
met}`` with ``decode_large_tbps`` = worst paged-decode KV read rate over shapes with
batch × context ≥ 256K tokens. That is the figure used for bandwidth: it is what a decode step
reads at serving batch sizes. The matmul ceiling's key is not fixed by the contract, so it is
searched for (any numeric field whose name mentions ``matmul`` and ``tflops``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

BandwidthSource = Literal["measured", "h200-results", "datasheet"]
SOURCES_IN_ORDER: tuple[BandwidthSource, ...] = ("measured", "h200-results", "datasheet")

# Datasheet figures of the H200 (NVIDIA product page), used only to turn the shipped H200 run's
# absolute TB/s and TFLOP/s into ratios when the bench JSON does not state its own datasheet.
H200_DATASHEET_BANDWIDTH_TBPS = 4.8
H200_DATASHEET_BF16_TFLOPS = 989.0  # dense; NVIDIA's 1,979 figure assumes 2:4 sparsity

# The target in the bench JSON whose measurement is the decode KV read rate at serving sizes.
DECODE_TARGET_NAME = "decode_large_tbps"

RESULTS_DIR = Path(__file__).resolve().parent.parent / "benchmarks" / "results"


class BenchJsonError(ValueError):
    """A bench JSON that cannot give an efficiency; the message says which field is wrong."""


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
    data: Mapping[str, Any],
    *,
    source: BandwidthSource,
    datasheet_bandwidth_tbps: float | None = None,
    datasheet_bf16_tflops: float | None = None,
) -> BandwidthEstimate:
    """Efficiencies from one bench JSON (already parsed).

    Parameters
    ----------
    data : the JSON object written by ``python -m kernels.bench --json``.
    source : ``"measured"`` (run on this GPU) or ``"h200-results"`` (the shipped run).
    datasheet_bandwidth_tbps, datasheet_bf16_tflops : the measured device's datasheet figures
        (TB/s, TFLOP/s); default: the H200's, the only device the shipped results come from.

    Raises
    ------
    BenchJsonError : no ``targets`` entry ``decode_large_tbps`` with a positive ``measured``.
    """
    ceilings = data.get("ceilings") if isinstance(data.get("ceilings"), Mapping) else {}
    bandwidth_tbps = (datasheet_bandwidth_tbps or _positive(ceilings.get("datasheet_tbps"))
                      or H200_DATASHEET_BANDWIDTH_TBPS)
    peak_tflops = (datasheet_bf16_tflops or _positive(ceilings.get("datasheet_tflops"))
                   or H200_DATASHEET_BF16_TFLOPS)
    try:
        read_tbps, what = _decode_target_tbps(data), "paged decode"
    except BenchJsonError:
        # No decode figure: the streaming copy ceiling is the next best (a copy moves as many
        # bytes as it reads and writes, and its rate counts both, so it estimates read speed).
        copy = _positive(ceilings.get("copy_tbps"))
        if copy is None:
            raise
        read_tbps, what = copy, "streaming copy"
    matmul_tflops = _find_matmul_tflops(data)
    compute_efficiency = 1.0 if matmul_tflops is None else matmul_tflops / peak_tflops
    device = _device_name(data)
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
            f"{where} ({device}): {what} {read_tbps:.2f} of {bandwidth_tbps:g} TB/s "
            f"= {read_tbps / bandwidth_tbps:.2f} of datasheet; {matmul_text}"
        ),
    )


def shipped_results_paths(results_dir: Path = RESULTS_DIR) -> list[Path]:
    """The shipped bench JSON files, newest name last (sorted), empty when none are present."""
    if not results_dir.is_dir():
        return []
    return sorted(results_dir.glob("*.json"))


def load_bench_json(source: Path | str | bytes) -> Mapping[str, Any]:
    """A bench JSON validated by the kernels owner's loader, as plain data: ``source`` is the
    document's content (bytes or text, never taken for a path) or a :class:`~pathlib.Path`
    from a CLI option or the shipped results.

    ``kernels.bench.records`` checks the schema and every field and returns a typed
    ``BenchReport``; it is flattened back to dicts so that ``estimate_from_bench`` reads one
    shape whatever produced it.
    """
    from kernels.bench.records import parse_bench_json, read_bench_file

    try:
        report = read_bench_file(source) if isinstance(source, Path) else parse_bench_json(source)
    except ValueError as exc:
        raise BenchJsonError(getattr(exc, "message", str(exc))) from exc
    return dataclasses.asdict(report)


def choose_estimate(
    preferred: BandwidthSource,
    *,
    measured: Mapping[str, Any] | None = None,
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
            except BenchJsonError as exc:
                notes.append(f"harness run unusable: {exc}")
                continue
        if source == "h200-results":
            paths = shipped_results_paths(results_dir)
            if not paths:
                notes.append("no shipped H200 results in benchmarks/results/")
                continue
            # The folder also holds other runs (kernel tuning logs): use the last file, by name,
            # that is a valid harness report.
            for path in reversed(paths):
                try:
                    data = load_bench_json(path)
                    return estimate_from_bench(data, source="h200-results"), notes
                except BenchJsonError:
                    continue
            notes.append(f"no harness report among the {len(paths)} file(s) in benchmarks/results/")
    return datasheet_estimate(), notes


def _decode_target_tbps(data: Mapping[str, Any]) -> float:
    targets = data.get("targets")
    if not isinstance(targets, (list, tuple)):
        raise BenchJsonError("field 'targets' missing or not a list")
    for target in targets:
        if isinstance(target, Mapping) and target.get("name") == DECODE_TARGET_NAME:
            value = target.get("measured")
            if isinstance(value, (int, float)) and math.isfinite(value) and value > 0:
                return float(value)
            raise BenchJsonError(f"target '{DECODE_TARGET_NAME}' has no positive 'measured'")
    raise BenchJsonError(f"no target named '{DECODE_TARGET_NAME}' in 'targets'")


def _find_matmul_tflops(data: Any) -> float | None:
    """First positive number under a key naming both a matmul and TFLOP/s, depth-first."""
    for key, value in _walk(data):
        lowered = key.lower()
        if "matmul" in lowered and "tflop" in lowered and isinstance(value, (int, float)):
            if math.isfinite(value) and value > 0:
                return float(value)
    return None


def _positive(value: Any) -> float | None:
    if isinstance(value, (int, float)) and math.isfinite(value) and value > 0:
        return float(value)
    return None


def _device_name(data: Mapping[str, Any]) -> str:
    provenance = data.get("provenance")
    if isinstance(provenance, Mapping) and isinstance(provenance.get("device"), str):
        return provenance["device"]
    for key in ("device", "device_name", "gpu"):
        value = data.get(key)
        if isinstance(value, str):
            return value
        if isinstance(value, Mapping) and isinstance(value.get("name"), str):
            return value["name"]
    return "device not stated"


def _walk(data: Any, depth: int = 0) -> Iterator[tuple[str, Any]]:
    # Depth-limited: bench JSONs are shallow, and a hostile file must not recurse forever.
    if depth > 6:
        return
    if isinstance(data, Mapping):
        for key, value in data.items():
            yield str(key), value
            yield from _walk(value, depth + 1)
    elif isinstance(data, (list, tuple)):
        for item in data[:1000]:
            yield from _walk(item, depth + 1)

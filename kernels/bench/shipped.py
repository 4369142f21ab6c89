"""The benchmark results shipped in the repository (``benchmarks/results/*.json``), newest first.

Every file goes through ``kernels.bench.records.read_bench_file`` (schema, version and types
checked); a file that fails is listed with its reason instead of being shown. "Newest" is the
run date recorded in the file's provenance (file modification times are those of the checkout,
not of the run); the file name breaks ties.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path, PurePosixPath

from kernels.bench.records import BenchReport, read_bench_file

__all__ = ["RESULTS_DIR", "ShippedResult", "ShippedResults", "find_shipped_results", "provenance_lines",
           "shown_command", "installed_versions"]

RESULTS_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


@dataclass(frozen=True, kw_only=True)
class ShippedResult:
    path: Path
    report: BenchReport


@dataclass(frozen=True, kw_only=True)
class ShippedResults:
    results: tuple[ShippedResult, ...]  # valid files, newest run first
    rejected: tuple[tuple[Path, str], ...]  # (file, why it was not loaded)

    @property
    def newest(self) -> ShippedResult | None:
        return self.results[0] if self.results else None


def find_shipped_results(directory: Path = RESULTS_DIR) -> ShippedResults:
    """Load every ``*.json`` under ``directory`` (not recursive)."""
    ok: list[ShippedResult] = []
    rejected: list[tuple[Path, str]] = []
    for path in sorted(Path(directory).glob("*.json")):
        try:
            ok.append(ShippedResult(path=path, report=read_bench_file(path)))
        except ValueError as exc:
            rejected.append((path, str(exc)))
    ok.sort(key=lambda r: (r.report.provenance.date, r.path.name), reverse=True)
    return ShippedResults(results=tuple(ok), rejected=tuple(rejected))


def shown_command(command: str) -> str:
    """``command`` as a reader would type it: the interpreter as ``python`` and every absolute
    path as its file name (the file keeps the exact command; the paths are the run machine's)."""
    try:
        words = shlex.split(command)
    except ValueError:  # unbalanced quotes: show it as recorded
        return command
    if not words or not PurePosixPath(words[0]).name.startswith("python"):
        return command  # not one harness command (a merged run's label): as recorded
    return shlex.join(["python", *(PurePosixPath(w).name if w.startswith("/") else w for w in words[1:])])


def installed_versions() -> dict[str, str | None]:
    """Versions of torch and triton installed here (None where a package is absent)."""
    found: dict[str, str | None] = {}
    for package in ("torch", "triton"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = None
    return found


def _base_version(version: str) -> str:
    return version.split("+", 1)[0]


def provenance_lines(report: BenchReport, source: str, installed: dict[str, str | None] | None = None) -> list[str]:
    """Human-readable provenance of a report: where it came from and how it was measured.

    ``installed`` (package -> version, :func:`installed_versions`) adds a line when the run's torch
    or triton release differs from the one installed here (local build tags such as ``+cu130``
    are not a difference)."""
    p, c = report.provenance, report.ceilings
    copy = "not measured" if c.copy_tbps is None else f"{c.copy_tbps:.2f} TB/s"
    mm = "not measured" if c.matmul_tflops is None else f"{c.matmul_tflops:.0f} TFLOP/s"
    lines = [
        f"Source: {source}",
        f"Device: {p.device} ({p.sm_count} SMs), driver {p.driver or 'unknown'}, CUDA {p.cuda or '-'}",
        f"Software: torch {p.torch}, triton {p.triton}, Python {p.python}",
        f"Run: {p.date}, command `{shown_command(p.command)}`" + (f", code at commit {p.commit[:12]}" if p.commit else ""),
        f"Measured ceilings: copy {copy} (datasheet {c.datasheet_tbps} TB/s), "
        f"bf16 {c.matmul_n}³ matmul {mm} (datasheet {c.datasheet_tflops:.0f} TFLOP/s)",
    ]
    ran = {"torch": p.torch, "triton": p.triton}
    differ = [f"{name} {version or 'not installed'}" for name, version in (installed or {}).items()
              if name in ran and (version is None or _base_version(version) != _base_version(ran[name]))]
    if differ:
        lines.append(f"Installed here: {', '.join(differ)} — these results ran on torch {p.torch}, triton {p.triton}")
    return lines

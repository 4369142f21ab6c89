"""Where the shared traces live: ../shared/data/traces relative to the project root.

Tests fail (not skip) when a trace is missing: CI has shared/ beside the checkout.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT.parent / "shared" / "data" / "traces"


def trace(name: str) -> Path:
    path = TRACES / name
    assert path.is_file(), f"trace {path} not found: shared/ must sit beside the checkout"
    return path

"""Where the tests find the project and its fixtures."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = ROOT / "pages"
FIXTURES = ROOT / "tests" / "data"
TRACES = ROOT / "data" / "traces"  # the real request traces the project ships


def trace(name: str) -> Path:
    """A shipped trace by file name; fails (not skips) when it is missing."""
    path = TRACES / name
    assert path.is_file(), f"trace {path} not found: data/traces/ ships with the repository"
    return path

"""Where the tests find the project and its fixtures."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = ROOT / "pages"
FIXTURES = ROOT / "tests" / "data"
# Reference copies of the request traces beside the checkout (tests may read them; the app never does).
SHARED_TRACES = ROOT.parent / "shared" / "data" / "traces"

"""Screenshots of every page for the README.

Starts ``streamlit run app.py`` on 127.0.0.1 and a free port with the browser tests' own
helpers (``tests/support``), opens each page in Debian's headless chromium and saves
``docs/screenshots/<page>.png``.

Usage: ``.venv/bin/python scripts/take_screenshots.py [page ...]``
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # run as a file: the project and its test helpers

from support.browser import goto  # noqa: E402
from support.server import CHROMIUM_ARGS, chromium_path, running_app  # noqa: E402

# url_path of each page; the sizer is the default page, served at the root.
PAGES = {"sizer": "", "fragmentation": "fragmentation", "kernels": "kernels", "planner": "planner"}
OUT_DIR = ROOT / "docs" / "screenshots"


def main(pages: list[str]) -> None:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as scratch, running_app(Path(scratch) / "server.log") as url:
        OUT_DIR.mkdir(parents=True, exist_ok=True)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium_path(), headless=True, args=CHROMIUM_ARGS)
            tab = browser.new_page(viewport={"width": 1400, "height": 1000})
            for name in pages or PAGES:
                goto(tab, f"{url}/{PAGES[name]}")
                tab.screenshot(path=str(OUT_DIR / f"{name}.png"), full_page=False)
                print(f"saved {OUT_DIR / f'{name}.png'}")
            browser.close()


if __name__ == "__main__":
    main(sys.argv[1:])

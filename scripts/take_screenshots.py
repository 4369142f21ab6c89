"""Screenshots of every page for the README.

Starts ``streamlit run app.py`` on 127.0.0.1 and a free port (the same way the browser tests
do), opens each page in Debian's headless chromium and saves ``docs/screenshots/<page>.png``.

Usage: ``.venv/bin/python scripts/take_screenshots.py [page ...]``
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.browser.streamlit_helpers import goto  # noqa: E402
from tests.conftest import CHROMIUM_ARGS, _chromium_path, _free_port, _wait_healthy  # noqa: E402

# url_path of each page; the sizer is the default page, served at the root.
PAGES = {"sizer": "", "fragmentation": "fragmentation", "kernels": "kernels", "planner": "planner"}
OUT_DIR = ROOT / "docs" / "screenshots"


def main(pages: list[str]) -> None:
    from playwright.sync_api import sync_playwright

    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.address", "127.0.0.1",
         "--server.port", str(port), "--server.headless", "true", "--browser.gatherUsageStats", "false"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, server, 90)
        OUT_DIR.mkdir(parents=True, exist_ok=True)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=_chromium_path(), headless=True,
                                                 args=CHROMIUM_ARGS)
            tab = browser.new_page(viewport={"width": 1400, "height": 1000})
            for name in pages or PAGES:
                goto(tab, f"{url}/{PAGES[name]}")
                tab.screenshot(path=str(OUT_DIR / f"{name}.png"), full_page=False)
                print(f"saved {OUT_DIR / f'{name}.png'}")
            browser.close()
    finally:
        os.killpg(server.pid, signal.SIGTERM)


if __name__ == "__main__":
    main(sys.argv[1:])

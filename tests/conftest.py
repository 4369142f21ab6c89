"""Shared pytest fixtures: Triton backend selection, the running app, and a headless browser.

The browser fixtures follow DESIGN.md's verified recipe: Debian's chromium driven by the
``playwright`` package (no ``playwright install``), the app started with ``streamlit run`` on
127.0.0.1 and a free port, health-polled, and stopped by its PID.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Triton reads TRITON_INTERPRET when it is first imported, so the choice must be made here,
# before any test module imports kernels/. Without a CUDA device the kernels run on CPU
# tensors through the interpreter; on the GPU machine the real compiler is used.
if "TRITON_INTERPRET" not in os.environ:
    import torch

    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"

# Seconds to wait for `streamlit run` to answer its health check; a cold start of
# streamlit + torch on a 2-core machine takes ~10 s.
APP_START_TIMEOUT_S = 90
CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
# Flags from the environment notes: without the background-networking ones Chromium's
# connections are refused by the closed network, many at a time.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited early with code {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"streamlit did not become healthy at {url} within {timeout_s} s")


@pytest.fixture(scope="session")
def app_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Base URL (``http://127.0.0.1:PORT``) of ``streamlit run app.py``, one server per session."""
    port = _free_port()
    log_path = tmp_path_factory.mktemp("streamlit") / "server.log"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"),
                "--server.address", "127.0.0.1",
                "--server.port", str(port),
                "--server.headless", "true",
                "--browser.gatherUsageStats", "false",
                "--server.fileWatcherType", "none",
            ],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env,
            start_new_session=True,  # so that stopping it also stops its children
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc, APP_START_TIMEOUT_S)
        yield url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        server_log = log_path.read_text(errors="replace")
        if "Traceback" in server_log:
            print(server_log[-5000:])


def _chromium_path() -> str:
    for candidate in CHROMIUM_CANDIDATES:
        if Path(candidate).exists():
            return candidate
    found = shutil.which("chromium")
    if found:
        return found
    # Not a skip: the README's test command installs chromium, so its absence is a failure.
    raise RuntimeError("Debian's chromium is not installed: apt-get install -y chromium")


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(
            executable_path=_chromium_path(), headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield instance
        finally:
            instance.close()


@pytest.fixture
def page(browser) -> Iterator[object]:
    """A fresh playwright Page with a desktop-sized viewport; closed after the test."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(60_000)
    tab = context.new_page()
    try:
        yield tab
    finally:
        context.close()


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """On a failed browser test, save a screenshot of the page next to the test log."""
    outcome = yield
    report = outcome.get_result()
    tab = item.funcargs.get("page") if hasattr(item, "funcargs") else None
    if report.when == "call" and report.failed and tab is not None:
        shots = ROOT / ".pytest_cache" / "screenshots"
        shots.mkdir(parents=True, exist_ok=True)
        try:
            tab.screenshot(path=str(shots / f"{item.name}.png"), full_page=True)
        except Exception as exc:  # a closed page must not hide the test's own failure
            print(f"screenshot failed: {exc}")

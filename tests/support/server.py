"""Starting ``streamlit run app.py`` on 127.0.0.1 and a free port, and Debian's chromium for it."""

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
from contextlib import contextmanager
from pathlib import Path

from support.paths import ROOT

# Seconds to wait for `streamlit run` to answer its health check; a cold start of
# streamlit + torch on a 2-core machine takes ~10 s.
APP_START_TIMEOUT_S = 90
CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
# Without the background-networking flags Chromium's connections are refused by a closed
# network, many at a time.
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


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float) -> None:
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


@contextmanager
def running_app(log_path: Path) -> Iterator[str]:
    """``streamlit run app.py`` for the duration of the block; yields its base URL."""
    port = free_port()
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
        wait_healthy(url, proc, APP_START_TIMEOUT_S)
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


def chromium_path() -> str:
    for candidate in CHROMIUM_CANDIDATES:
        if Path(candidate).exists():
            return candidate
    found = shutil.which("chromium")
    if found:
        return found
    # Not a skip: the README's test command installs chromium, so its absence is a failure.
    raise RuntimeError("Debian's chromium is not installed: apt-get install -y chromium")

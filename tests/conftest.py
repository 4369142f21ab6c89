"""Shared pytest fixtures: Triton backend selection, the running app, and a headless browser.

The browser fixtures drive Debian's chromium through the ``playwright`` package (no
``playwright install``); the app is started by :func:`support.server.running_app`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kernels.runtime import ensure_triton_backend
from support.paths import ROOT
from support.server import CHROMIUM_ARGS, chromium_path, running_app

# Triton reads TRITON_INTERPRET when it is first imported, so the choice is made here, before
# any test module imports a kernel: the interpreter without a CUDA device, the compiler with one.
ensure_triton_backend()


@pytest.fixture(scope="session")
def app_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Base URL (``http://127.0.0.1:PORT``) of ``streamlit run app.py``, one server per session."""
    with running_app(tmp_path_factory.mktemp("streamlit") / "server.log") as url:
        yield url


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=chromium_path(), headless=True, args=CHROMIUM_ARGS)
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

"""Streamlit AppTest helpers used by every page test: open a page, read metrics, texts and figures."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from streamlit.testing.v1 import AppTest

from support.paths import PAGES, ROOT

APP = str(ROOT / "app.py")
DEFAULT_TIMEOUT_S = 120  # a cold page with torch and plotly imports on a loaded 2-core machine


def page_path(name: str) -> str:
    """Absolute path of ``pages/<name>`` (e.g. ``"1_sizer.py"``); AppTest needs it absolute."""
    return str(PAGES / name)


def open_page(name: str, query: Mapping[str, str] | None = None, session: Mapping[str, Any] | None = None,
              *, timeout: float = DEFAULT_TIMEOUT_S, run: bool = True, allow_exception: bool = False) -> AppTest:
    """AppTest of ``pages/<name>`` with URL ``query`` and ``session`` state set, run once
    (unless ``run=False``); asserts the run raised nothing unless ``allow_exception``."""
    at = AppTest.from_file(page_path(name), default_timeout=timeout)
    for key, value in (query or {}).items():
        at.query_params[key] = value
    for key, value in (session or {}).items():
        at.session_state[key] = value
    if run:
        at.run()
        if not allow_exception:
            assert_no_exception(at)
    return at


def assert_no_exception(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def metric_text(at: AppTest, label: str) -> str:
    """The value shown by the metric labelled ``label`` (fails listing the labels there are)."""
    for item in at.metric:
        if item.label == label:
            return item.value
    raise AssertionError(f"no metric {label!r}: {[m.label for m in at.metric]}")


def metric_number(at: AppTest, label: str) -> float:
    """The leading number of metric ``label``, with thousands separators, %, × and units stripped."""
    text = metric_text(at, label).replace(",", "").replace("%", "").replace("×", "")
    return float(text.split()[0])


def texts(elements: Iterable[Any]) -> str:
    """The values of ``elements`` (``at.markdown``, ``at.error``, ...) joined by newlines."""
    return "\n".join(str(e.value) for e in elements)


def figures(at: AppTest) -> list[dict]:
    """Every plotly figure on the page, as its JSON spec."""
    return [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]

"""The whole app through its router: starts on the sizer with sensible defaults, and every
page registered in app.py opens without an exception (on this machine, GPU or not)."""

import pytest
from streamlit.testing.v1 import AppTest

from support.apptest import APP, assert_no_exception, metric_text

PAGE_FILES = ("pages/1_sizer.py", "pages/2_fragmentation.py", "pages/3_kernels.py", "pages/4_planner.py")


def test_app_starts_on_the_sizer_with_reference_defaults():
    at = AppTest.from_file(APP, default_timeout=120).run()
    assert_no_exception(at)
    assert "KV-cache sizer" in at.title[0].value
    # Reference problem 3's model and GPU by default: 320 KiB per token, 16 H100s.
    assert metric_text(at, "KV per token") == "320 KiB"


@pytest.mark.parametrize("page_file", PAGE_FILES)
def test_every_registered_page_opens(page_file):
    at = AppTest.from_file(APP, default_timeout=180).run()
    at.switch_page(page_file).run()
    assert_no_exception(at)
    assert at.title, f"{page_file} drew no title"


def test_requested_path_and_the_unknown_path_notice():
    from ui.router import requested_path, unknown_path_notice

    assert requested_path("http://127.0.0.1:8501/planner") == "planner"
    assert requested_path("http://host/app/planner/", base_path="app") == "planner"
    assert requested_path("http://host/") == "" and requested_path(None) == ""
    known = ["", "fragmentation", "planner", "sizer"]
    assert unknown_path_notice("planner", known, "KV-cache sizer") is None
    assert unknown_path_notice("", known, "KV-cache sizer") is None
    notice = unknown_path_notice("nonsense", known, "KV-cache sizer")
    assert notice.startswith("There is no page at `/nonsense`: showing the KV-cache sizer")
    assert "`/planner`" in notice and "`/fragmentation`" in notice


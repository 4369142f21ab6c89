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

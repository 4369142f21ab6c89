"""Every page of the router opens in a real browser without an exception and shows a title."""

import pytest

from support.browser import goto

pytestmark = pytest.mark.browser

# url_path of each st.Page in app.py, with a phrase its page must show. The default page (the
# sizer) lives at the root: st.navigation serves it at "/" whatever its url_path.
PAGES = {
    "": "KV-cache sizer",
    "fragmentation": "Fragmentation",
    "kernels": "Live kernels",
    "planner": "Capacity planner",
    "cluster": "Cluster plan",
}


@pytest.mark.parametrize("url_path, heading", PAGES.items())
def test_page_opens_without_exception(app_url, page, url_path, heading):
    goto(page, f"{app_url}/{url_path}")
    assert page.locator('[data-testid="stException"]').count() == 0
    assert page.get_by_text(heading).first.is_visible()


def test_navigation_lists_every_page(app_url, page):
    goto(page, app_url)
    # In the top bar (app.py's position="top"), so a page without sidebar controls has no sidebar.
    nav = page.locator('[data-testid="stTopNav"]')
    for heading in PAGES.values():
        assert nav.get_by_text(heading).count() >= 1
    assert page.locator('[data-testid="stSidebar"]').count() == 0

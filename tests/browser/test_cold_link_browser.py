"""A deep link as a fresh server's first request: ``/kernels`` never shows Streamlit's legacy
``pages/`` navigation (a sidebar listing the file names "app", "sizer", …) before app.py's router.

Streamlit treats a process as a legacy ``pages/`` app until some script calls ``st.navigation``;
on that first run it draws its own sidebar navigation from the file names. The test needs its own
server (the session's ``app_url`` has served other pages already) and watches the DOM from before
the first byte of the page: a MutationObserver records every sidebar navigation and the moment
the page's title is drawn.
"""

from __future__ import annotations

import pytest

from support.server import running_app

pytestmark = pytest.mark.browser

# Streamlit's v1 page names for pages/1_sizer.py … (the number prefix dropped); app.py's router
# titles its pages "KV-cache sizer", "Live kernels", …
LEGACY_NAMES = ("app", "sizer", "fragmentation", "kernels", "planner", "cluster")
WATCH_S = 3.0  # watched on after the title: the legacy sidebar, where drawn, came before it

# Installed before the page's own scripts; records each stSidebarNav's text with the time it was
# seen, and the first time that the page's h1 carries the title (ms since navigation start).
_WATCH_JS = """(() => {
  window.__legacyNav = [];
  window.__titleAt = null;
  const look = () => {
    for (const nav of document.querySelectorAll('[data-testid="stSidebarNav"]'))
      window.__legacyNav.push([performance.now(), nav.innerText]);
    if (window.__titleAt === null) {
      const h1 = document.querySelector('[data-testid="stMainBlockContainer"] h1');
      if (h1 && h1.innerText.includes('Live kernels')) window.__titleAt = performance.now();
    }
  };
  new MutationObserver(look).observe(document, {childList: true, subtree: true, characterData: true});
})();"""


def test_cold_deep_link_never_shows_the_legacy_navigation(browser, tmp_path):
    with running_app(tmp_path / "server.log") as url:
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        context.add_init_script(_WATCH_JS)
        tab = context.new_page()
        try:
            tab.goto(f"{url}/kernels")
            tab.wait_for_function("() => window.__titleAt !== null", timeout=90_000)
            tab.wait_for_timeout(WATCH_S * 1000)  # a late legacy run would draw its sidebar now
            seen = tab.evaluate("() => window.__legacyNav")
            title_at_s = tab.evaluate("() => window.__titleAt") / 1000
            top_nav = tab.locator('[data-testid="stTopNav"]').inner_text()
            navs = tab.evaluate("() => [...document.querySelectorAll('[data-testid=\"stSidebarNav\"]')]"
                                ".map(n => n.innerText)")
        finally:
            context.close()
    print(f"\ncold /kernels: title drawn {title_at_s:.1f} s after navigation start")
    legacy = [(at, text) for at, text in seen if any(name in text.lower().split() for name in LEGACY_NAMES)]
    assert not legacy, (f"legacy sidebar navigation drawn from {legacy[0][0] / 1000:.1f} s to "
                        f"{legacy[-1][0] / 1000:.1f} s (title at {title_at_s:.1f} s): {legacy[0][1]!r}")
    assert not seen and navs == []  # no sidebar navigation at all: app.py's is in the top bar
    assert "Live kernels" in top_nav and "KV-cache sizer" in top_nav  # the router's, by its titles

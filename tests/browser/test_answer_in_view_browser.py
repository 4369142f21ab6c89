"""The sizer's answer stays in view where its columns stack (1,100 px and below): after a control
change, the answer strip's GPU figure is inside the window, below the page header, and equals the
answer block's; it stays there with the page scrolled to its end; a control scrolled to the top
comes to rest below the strip, not under it; in the light and the dark theme the strip is drawn
on the page's own background."""

from __future__ import annotations

import pytest

from support.browser import fill_number, goto, metric_value

pytestmark = pytest.mark.browser

HEIGHT = 900
HEADER_PX = 60  # Streamlit's header (3.75rem), which holds the top navigation
STRIP = ".st-key-sticky-answer"

# Leaf elements in the main area whose whole text is ``text``, as rectangles in the window.
_FIND_JS = """(text) => [...document.querySelectorAll('[data-testid="stMain"] *')]
  .filter(e => e.children.length === 0 && e.innerText && e.innerText.trim() === text)
  .map(e => e.getBoundingClientRect())"""
_IN_VIEW_JS = f"""(text) => ({_FIND_JS})(text)
  .some(r => r.height > 0 && r.top >= {HEADER_PX} && r.bottom <= innerHeight && r.left >= 0 && r.right <= innerWidth)"""
_WHERE_JS = f"""(text) => ({_FIND_JS})(text).map(r => `y = ${{Math.round(r.top)}} px of ${{innerHeight}}`)"""
_SCROLL_TO_END_JS = """() => { const main = document.querySelector('[data-testid="stMain"]');
  main.scrollTop = main.scrollHeight; return main.scrollTop; }"""
# Colours as the browser computes them: the app's background and the strip's.
_BACKGROUNDS_JS = """(sel) => [getComputedStyle(document.querySelector('[data-testid="stApp"]')).backgroundColor,
                           getComputedStyle(document.querySelector(sel)).backgroundColor]"""


def _in_view(tab, text: str) -> None:
    assert tab.evaluate(_IN_VIEW_JS, text), (f"{text!r} is nowhere in the {HEIGHT} px window: "
                                             f"{tab.evaluate(_WHERE_JS, text)}")


@pytest.mark.parametrize("width, scheme", [(1100, "light"), (800, "dark")])
def test_the_answer_strip_shows_the_answer_after_a_change(app_url, browser, width, scheme):
    context = browser.new_context(viewport={"width": width, "height": HEIGHT}, color_scheme=scheme)
    context.set_default_timeout(20_000)
    tab = context.new_page()
    try:
        goto(tab, f"{app_url}/")
        # 100 → 50 users: a TP-4 replica holds 21 requests of 32,768 tokens (the block's
        # "Requests per replica"), so ⌈50 / 21⌉ = 3 replicas × TP 4 = 12 GPUs. The field lies
        # below the fold: typing into it scrolls it to the window's foot, the block stays far below.
        fill_number(tab, "Users (concurrent)", "50")
        block = metric_value(tab, "GPUs to deploy")
        assert block == "12 × H100 SXM"
        _in_view(tab, block)
        assert tab.locator(STRIP).count() == 1
        figure = tab.locator(f"{STRIP} strong").first
        box = figure.bounding_box()
        assert HEADER_PX <= box["y"] and box["y"] + box["height"] <= HEIGHT, box
        assert figure.inner_text() == block
        assert "50 users" in tab.locator(STRIP).inner_text()

        # Sticky: at the page's end (far past where the strip sits unscrolled) it is still there.
        assert tab.evaluate(_SCROLL_TO_END_JS) > 2_000
        box = figure.bounding_box()
        assert HEADER_PX <= box["y"] and box["y"] + box["height"] <= HEIGHT, box

        # A control scrolled to the top rests below the strip (scroll padding), so it stays usable.
        field = tab.get_by_role("spinbutton", name="Users (concurrent)")
        field.evaluate("e => e.scrollIntoView({block: 'start'})")
        strip, at = tab.locator(STRIP).bounding_box(), field.bounding_box()
        assert at["y"] >= strip["y"] + strip["height"], (at, strip)

        # Opaque, on the theme's own background (so the theme's text contrast holds on the strip).
        app_bg, strip_bg = tab.evaluate(_BACKGROUNDS_JS, STRIP)
        assert app_bg == ("rgb(255, 255, 255)" if scheme == "light" else "rgb(15, 18, 24)")  # config.toml
        assert strip_bg == app_bg
    finally:
        context.close()

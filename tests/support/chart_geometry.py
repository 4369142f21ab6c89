"""Where a page's Plotly charts put their text, read from the browser's layout, and the checks a
reader would make by eye: the chart stays inside its container, x-axis tick labels do not run
together, titles and the legend do not sit on one another.

Rectangles are ``(left, top, right, bottom)`` in CSS pixels of the viewport, as
``getBoundingClientRect`` gives them.
"""

from __future__ import annotations

import time

Rect = tuple[float, float, float, float]

# Two labels closer than this read as one word ("128" and "256" 0 px apart read "128256"); a
# space in the 12 px tick font is about 3 px wide.
MIN_TICK_GAP_PX = 3.0
# Sub-pixel rounding of text boxes against their container's edge.
EDGE_SLACK_PX = 1.0
_SETTLE_S, _SETTLE_TIMEOUT_S = 0.3, 10.0

# For each chart: its container, Plotly's SVG layers, the x-axis tick labels of every subplot
# (g.xtick, g.x2tick, …), the titles (figure title, axis titles, annotations: subplot titles are
# annotations), the legend and every other piece of SVG text. Elements Plotly hides (ticks
# culled at the range's end, display: none) have an empty box and are left out.
_MEASURE_JS = r"""() => {
  const box = e => { const b = e.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; };
  const shown = e => { const b = e.getBoundingClientRect(); return b.width > 0 && b.height > 0; };
  const texts = (root, sel) => Array.from(root.querySelectorAll(sel)).filter(shown)
    .map(e => ({text: e.textContent.trim(), box: box(e)}));
  return Array.from(document.querySelectorAll('[data-testid="stPlotlyChart"]')).map(c => ({
    container: box(c),
    svgs: Array.from(c.querySelectorAll('svg.main-svg')).filter(shown).map(box),
    xticks: texts(c, '.xaxislayer-above > g[class$="tick"] > text'),
    titles: texts(c, '.gtitle, [class^="g-x"][class$="title"] text, [class^="g-y"][class$="title"] text, '
                   + '.annotation-text'),
    legend: Array.from(c.querySelectorAll('g.legend')).filter(shown).map(box),
    all_text: texts(c, 'svg text'),
  }));
}"""


def measure_charts(page) -> list[dict]:
    """Every Plotly chart on ``page`` once their layout has stopped moving (Plotly redraws after
    the container's width is known). Each: ``container`` and ``svgs`` (rects), ``xticks``,
    ``titles`` and ``all_text`` (lists of ``{"text", "box"}``), ``legend`` (rects)."""
    page.wait_for_selector('[data-testid="stPlotlyChart"] svg.main-svg', timeout=60_000)
    deadline = time.monotonic() + _SETTLE_TIMEOUT_S
    before = page.evaluate(_MEASURE_JS)
    while True:
        time.sleep(_SETTLE_S)
        now = page.evaluate(_MEASURE_JS)
        if now == before or time.monotonic() > deadline:
            return now
        before = now


def _gap(a: Rect, b: Rect) -> tuple[float, float]:
    """Horizontal and vertical gap between two rects (negative where they overlap)."""
    return max(a[0], b[0]) - min(a[2], b[2]), max(a[1], b[1]) - min(a[3], b[3])


def overlaps(a: Rect, b: Rect, min_gap: float = 0.0) -> bool:
    """Whether ``a`` and ``b`` share area, or sit side by side less than ``min_gap`` px apart."""
    dx, dy = _gap(a, b)
    return dx < min_gap and dy < 0


def inside(inner: Rect, outer: Rect, slack: float = EDGE_SLACK_PX) -> bool:
    return (inner[0] >= outer[0] - slack and inner[1] >= outer[1] - slack
            and inner[2] <= outer[2] + slack and inner[3] <= outer[3] + slack)


def overflow_problems(chart: dict) -> list[str]:
    """The chart's SVG, or text drawn in it, reaching outside its container (cut off on screen)."""
    container = chart["container"]
    found = [f"svg {svg} outside its container {container}" for svg in chart["svgs"] if not inside(svg, container)]
    found += [f"text {t['text']!r} {t['box']} outside its container {container}"
              for t in chart["all_text"] if not inside(t["box"], container)]
    return found


def tick_problems(chart: dict) -> list[str]:
    """X-axis tick labels touching or overlapping another (on the same line)."""
    ticks = chart["xticks"]
    return [f"x ticks {a['text']!r} and {b['text']!r} run together: {a['box']} {b['box']}"
            for i, a in enumerate(ticks) for b in ticks[i + 1:]
            if overlaps(a["box"], b["box"], MIN_TICK_GAP_PX)]


def title_problems(chart: dict) -> list[str]:
    """Titles (figure, axis, subplot) on top of one another or of the legend."""
    titles = chart["titles"]
    found = [f"titles {a['text']!r} and {b['text']!r} overlap: {a['box']} {b['box']}"
             for i, a in enumerate(titles) for b in titles[i + 1:] if overlaps(a["box"], b["box"])]
    found += [f"title {t['text']!r} under the legend: {t['box']} {legend}"
              for t in titles for legend in chart["legend"] if overlaps(t["box"], legend)]
    return found

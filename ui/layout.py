"""Layout that works from 800 px to wide screens: side-by-side panels that stack on narrow
windows, rows of metrics that wrap instead of cutting their figures off, charts with a named
PNG export, and tabs whose active tab is in the URL.

Streamlit stacks ``st.columns`` only below 640 px of window width; at 800 px a page's controls
column would be 200 px wide. A container whose key starts with ``stack-`` gets a style rule
(through ``st.html``, Streamlit's way of adding CSS, and its ``st-key-<key>`` class) that gives
each of its own columns the whole width below :data:`STACK_BELOW_PX`. Where they stack, a
container whose key starts with ``sticky-`` stays under the page header while the main area
scrolls (``position: sticky``), so a page's answer stays in view above the controls below it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from inputs.errors import InputError, shown
from ui.url_state import ChoiceField, PageState

STACK_BELOW_PX = 1100  # the sizer's controls + results need about 1,000 px side by side
HEADER_REM = 3.75  # Streamlit's header, which holds the top navigation: a sticky strip rests below it
# Header plus a strip of up to two lines: where a control scrolled into view (keyboard focus, a
# link to a heading) comes to rest, so that the strip never hides it.
SCROLL_PADDING_REM = HEADER_REM + 5.5
_COLUMNS = ('[class*="st-key-stack-"] > [data-testid="stLayoutWrapper"] > [data-testid="stHorizontalBlock"]')
_STICKY = '[class*="st-key-sticky-"]'
# A keyed container sits alone in a wrapper of its own height; the wrapper is what can stick
# within the page's block.
_STICKY_WRAPPER = f'[data-testid="stLayoutWrapper"]:has(> {_STICKY})'
LAYOUT_CSS = f"""<style>
@media (max-width: {STACK_BELOW_PX}px) {{
  {_COLUMNS} {{ flex-wrap: wrap; }}
  {_COLUMNS} > [data-testid="stColumn"] {{ min-width: calc(100% - 1.8rem); }}
}}
{_STICKY_WRAPPER} {{ position: sticky; top: {HEADER_REM}rem; z-index: 99; }}
/* Opaque in either theme: only the app's root paints the theme's background, so the blocks that
   hold the strip, and the strip, take it over instead of being transparent. */
[data-testid="stApp"] :has({_STICKY}), {_STICKY} {{ background-color: inherit; }}
{_STICKY} {{ padding: 0.35rem 0 0.5rem; border-bottom: 1px solid rgba(128, 128, 128, 0.45); }}
[data-testid="stMain"]:has({_STICKY}) {{ scroll-padding-top: {SCROLL_PADDING_REM}rem; }}
/* Side by side the answer is beside the controls already. */
@media (width > {STACK_BELOW_PX}px) {{ {_STICKY_WRAPPER} {{ display: none; }} }}
</style>"""


def apply_layout_css() -> None:
    """Add the stacking and sticky rules to the page (app.py calls it once per run)."""
    st.html(LAYOUT_CSS)


def stacking(name: str) -> DeltaGenerator:
    """A container whose direct ``st.columns`` stack below :data:`STACK_BELOW_PX`."""
    return st.container(key=f"stack-{name}")


def sticky(name: str) -> DeltaGenerator:
    """A container at :data:`STACK_BELOW_PX` and below that stays under the page header while the
    page scrolls, on the theme's background; hidden on wider windows. Keep it to a line or two:
    what it covers is what :data:`SCROLL_PADDING_REM` keeps controls out of."""
    return st.container(key=f"sticky-{name}")


def metric_row(parent: DeltaGenerator | None = None) -> DeltaGenerator:
    """A row for ``st.metric``s that wraps onto the next line when the figures do not fit.

    Each metric keeps at least the width of its own label and value, so none is cut to "…".
    """
    return (parent or st).container(horizontal=True, gap="medium")


def chart_config(file_name: str) -> dict:
    """Plotly's own export (the camera button) as a PNG named after the chart, at twice the size."""
    return {"displaylogo": False,
            "toImageButtonOptions": {"format": "png", "filename": file_name, "scale": 2}}


def chart(figure, *, key: str, file_name: str, parent: DeltaGenerator | None = None) -> None:
    """``st.plotly_chart`` with the PNG export named ``file_name``."""
    (parent or st).plotly_chart(figure, key=key, config=chart_config(file_name))


@dataclass(frozen=True)
class TabField(ChoiceField):
    """The active tab as a URL parameter: ``options`` are the tab labels (what ``st.tabs`` keeps in
    the session), ``names`` the short words the URL carries (``tab=timeline``)."""

    names: tuple[str, ...] = ()

    def parse(self, raw: str) -> str:
        for name, label in zip(self.names, self.options):
            if raw in (name, label):
                return label
        raise InputError(self.url_name, f"must be one of {', '.join(self.names)}; got {shown(raw)}")

    def format(self, value: Any) -> str:
        return self.names[list(self.options).index(value)]


def tab_field(url_name: str, key: str, tabs: Mapping[str, str]) -> TabField:
    """A :class:`TabField` from ``{url name: label}``; the first tab is the default."""
    labels = tuple(tabs.values())
    return TabField(url_name, key, labels[0], labels, names=tuple(tabs))


def page_tabs(state: PageState, field: TabField) -> Sequence[Any]:
    """``st.tabs`` whose active tab lives in ``state`` (so in the URL). Switching reruns the page
    and only the open tab's ``.open`` is true, so a page draws only the tab being read."""
    return st.tabs(list(field.options), key=state.key(field.key), on_change="rerun")


REFERENCE_PAGE = "the course page “KV cache, PagedAttention and FlashAttention”"


def identify_reference(text: str) -> str:
    """Name the reference page where a label only says "Reference page" (option labels, sources)."""
    return text.replace("Reference page", REFERENCE_PAGE[0].upper() + REFERENCE_PAGE[1:]).replace(
        "reference page", REFERENCE_PAGE)

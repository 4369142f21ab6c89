"""Page state in the URL, each control declared once.

A page lists its controls as fields (URL name, session key, default, and how to parse a URL
value: a :class:`~inputs.bounds.Bound` or a tuple of choices), seeds the session from the URL
before drawing widgets, and mirrors the widgets back after::

    state = PageState("sizer", [
        NumberField("ctx", "context", 32_768, CONTEXT),
        ChoiceField("gpu", "gpu", DEFAULT_GPU, GPU_IDS),
        FlagField("scales", "scales", True),
    ])
    state.seed()                                   # URL → st.session_state (once per session)
    st.number_input("Context", key=state.key("context"), ...)
    state.sync()                                   # st.session_state → URL (non-defaults only)
    for notice in state.notices: st.caption(notice)

A URL value that does not parse or lies outside its field's range is ignored with a notice
naming the parameter and the allowed values: a shared link is input like any other, so it
never raises in a page. Only values that differ from the default are written, so links stay short.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import streamlit as st

from inputs.bounds import Bound
from inputs.errors import InputError, shown


@dataclass(frozen=True)
class NumberField:
    """A number input or slider: the URL value must satisfy ``bound``."""

    url_name: str
    key: str
    default: int | float
    bound: Bound

    def parse(self, raw: str) -> int | float:
        return self.bound.parse(raw)

    def format(self, value: Any) -> str:
        if isinstance(value, float) and value.is_integer():
            return str(int(value))
        return str(value)


@dataclass(frozen=True)
class ChoiceField:
    """A selectbox or radio: the URL value must be one of ``options`` (compared as text)."""

    url_name: str
    key: str
    default: Any
    options: Sequence[Any]

    def parse(self, raw: str) -> Any:
        for option in self.options:
            if str(option) == raw:
                return option
        listed = ", ".join(str(o) for o in list(self.options)[:12])
        more = ", …" if len(self.options) > 12 else ""
        raise InputError(self.url_name, f"must be one of {listed}{more}; got {shown(raw)}")

    def format(self, value: Any) -> str:
        return str(value)


@dataclass(frozen=True)
class FlagField:
    """A checkbox or toggle: ``1`` or ``0`` in the URL."""

    url_name: str
    key: str
    default: bool

    def parse(self, raw: str) -> bool:
        if raw not in ("0", "1"):
            raise InputError(self.url_name, f"must be 0 or 1; got {shown(raw)}")
        return raw == "1"

    def format(self, value: Any) -> str:
        return "1" if value else "0"


Field = NumberField | ChoiceField | FlagField

# Every page's declared fields, by page name: lets the tests fuzz each page's URL parameters
# within and beyond their bounds without a second list of them.
DECLARED: dict[str, tuple[Field, ...]] = {}


class PageState:
    """The URL-backed controls of one page; session keys are ``"<page>.<key>"``."""

    def __init__(self, page: str, fields: Sequence[Field]) -> None:
        self.page = page
        self.fields = tuple(fields)
        self.notices: list[str] = []
        # Merged by URL name: a page may declare its controls in several PageStates (the kernel
        # page's shape and its per-kernel dtype / head dim), and the fuzz tests need all of them.
        DECLARED[page] = tuple({f.url_name: f for f in (*DECLARED.get(page, ()), *self.fields)}.values())

    def key(self, name: str) -> str:
        """The ``st.session_state`` key of field ``name`` (pass it as the widget's ``key=``)."""
        return f"{self.page}.{name}"

    def value(self, name: str) -> Any:
        """The current value of field ``name``."""
        return st.session_state[self.key(name)]

    def seed(self, carried: dict[str, Any] | None = None) -> None:
        """Give each field a session value once per session: the URL's when it is valid, else
        ``carried[name]`` (a value handed over by another page), else the default.

        Invalid URL values are collected in :attr:`notices`, never raised. A value the user
        typed is kept even when out of range, so the page can name the error beside it; only a
        choice that is no longer among the options is reset.
        """
        carried = carried or {}
        for field in self.fields:
            session_key = self.key(field.key)
            raw = st.query_params.get(field.url_name)
            from_url = None
            if raw is not None:
                try:
                    from_url = field.parse(raw)
                except InputError as exc:
                    self.notices.append(f"Link parameter `{field.url_name}` ignored: {exc.message}.")
            if session_key in st.session_state and _kept(field, st.session_state[session_key]):
                continue
            if from_url is not None:
                st.session_state[session_key] = from_url
            elif field.key in carried and _still_valid(field, carried[field.key]):
                st.session_state[session_key] = carried[field.key]
            else:
                st.session_state[session_key] = field.default

    def sync(self) -> None:
        """Mirror the fields' session values into the URL, dropping those equal to the default."""
        for field in self.fields:
            value = st.session_state.get(self.key(field.key), field.default)
            if value == field.default:
                if field.url_name in st.query_params:
                    del st.query_params[field.url_name]
            elif st.query_params.get(field.url_name) != (text := field.format(value)):
                st.query_params[field.url_name] = text  # written only on change: each write updates the URL


COPY_LINK_LABEL = "Copy link"


def page_link_text() -> str:
    """This view's address: the page's URL (without its old query) and the query as now synced."""
    base = (st.context.url or "").split("?", 1)[0]
    query = urlencode(st.query_params.to_dict())
    return f"{base}?{query}" if query else base or "?"


def copy_link(parent: Any = None) -> None:
    """A "Copy link" popover holding this view's URL (``st.code`` has a copy button), so a view
    can be shared with every choice in it; in ``parent`` (default: the sidebar). Pages draw it
    once, after the URL is synced."""
    with (parent or st.sidebar).popover(COPY_LINK_LABEL, icon=":material/link:"):
        st.code(page_link_text(), language=None)


def _kept(field: Field, value: Any) -> bool:
    """Whether a session value survives a rerun: everything but a choice no longer offered."""
    return not isinstance(field, ChoiceField) or value in field.options


def _still_valid(field: Field, value: Any) -> bool:
    if isinstance(field, ChoiceField):
        return value in field.options
    if isinstance(field, FlagField):
        return isinstance(value, bool)
    try:
        field.bound.check(value)
    except InputError:
        return False
    return True


"""Page state in the URL: widgets start from ``st.query_params`` and write their values back.

A configuration can then be shared as a link and reopens identically. Usage in a page::

    url = UrlState(prefix="")
    users = st.slider("Users", 1, 1000, key="users", value=url.get("users", 100, int))
    ...
    url.write({"users": users, ...})

Only values that differ from the default are written, so links stay short.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import streamlit as st


class UrlState:
    """Reads defaults from and writes values to ``st.query_params``."""

    def __init__(self) -> None:
        self._defaults: dict[str, Any] = {}

    def get(self, name: str, default: Any, cast: Callable[[str], Any] = str,
            choices: tuple | list | None = None) -> Any:
        """The URL's value for ``name`` cast by ``cast``; ``default`` when absent or unusable.

        A malformed value (``?users=abc``) or one outside ``choices`` falls back to the default
        rather than crashing the page: links are user input too.
        """
        self._defaults[name] = default
        raw = st.query_params.get(name)
        if raw is None:
            return default
        try:
            value = _cast(raw, cast)
        except (TypeError, ValueError):
            return default
        if choices is not None and value not in choices:
            return default
        return value

    def write(self, values: dict[str, Any]) -> None:
        """Mirror ``values`` into the URL, dropping those equal to their defaults."""
        for name, value in values.items():
            if value == self._defaults.get(name, object()):
                if name in st.query_params:
                    del st.query_params[name]
            elif st.query_params.get(name) != (text := _format(value)):
                st.query_params[name] = text  # written only on change: each write updates the URL


def _cast(raw: str, cast: Callable[[str], Any]) -> Any:
    if cast is bool:
        if raw not in ("0", "1"):
            raise ValueError(raw)
        return raw == "1"
    if cast is int:  # "40" and "40.0" are both 40; "2.5" is not a count
        number = float(raw)
        if not number.is_integer():
            raise ValueError(raw)
        return int(number)
    return cast(raw)


def _format(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)

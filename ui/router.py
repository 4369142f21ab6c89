"""The router's guards: every page runs inside app.py's ``st.navigation``, ``/sizer`` reaches the
sizer, and a path that names no page says so.

Streamlit decides per process whether an app is a legacy "pages/ directory" app: until a script
calls ``st.navigation`` it assumes so, and a first request for ``/sizer`` then runs
``pages/1_sizer.py`` on its own (no page config, every module in pages/ listed as a page).
The pages stay in ``pages/`` (so each one is also a runnable script), so each page calls
:func:`run_through_router` first: it clears that flag and reruns, so app.py's router runs.
Until then that legacy run would draw a sidebar of file names ("app", "sizer", …);
``client.showSidebarNavigation = false`` in ``.streamlit/config.toml`` keeps it from drawing any.

Streamlit serves the default page at ``/`` only, so the sizer's own name needs an alias page
(:func:`alias_page`), and for an unknown path it runs the default page with a dismissable dialog
that does not name the page shown: :func:`unknown_path_notice` says it on the page itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import unquote, urlsplit

import streamlit as st
from streamlit.runtime.pages_manager import PagesManager


def run_through_router() -> None:
    """Rerun through app.py's navigation if Streamlit started this page in legacy mode."""
    # Private flag, checked by Streamlit's script runner on every run (streamlit 1.67).
    if PagesManager.uses_pages_directory:
        PagesManager.uses_pages_directory = False
        st.rerun()


def alias_page(target: st.Page, url_path: str) -> st.Page:
    """A hidden page at ``/<url_path>`` that switches to ``target``, keeping the link's query."""

    def switch() -> None:
        st.switch_page(target, query_params=st.query_params.to_dict())

    switch.__name__ = f"alias_{url_path}"  # Streamlit names a callable page after its function
    return st.Page(switch, title=target.title, url_path=url_path, visibility="hidden")


def requested_path(url: str | None, base_path: str = "") -> str:
    """The page path the browser asked for (``"planner"``), without the server's base path.

    ``url`` is ``st.context.url`` (scheme, host and path; no query); None outside a browser.
    """
    if not url:
        return ""
    path = unquote(urlsplit(url).path).strip("/")
    base = base_path.strip("/")
    if base and (path == base or path.startswith(base + "/")):
        path = path[len(base):].strip("/")
    return path


def unknown_path_notice(path: str, known: Iterable[str], shown: str) -> str | None:
    """What to say when ``path`` names none of the ``known`` page paths; None when it does."""
    known = sorted(p for p in known if p)
    if not path or path in known:
        return None
    listed = ", ".join(f"`/{p}`" for p in known)
    return (f"There is no page at `/{path[:80]}`: showing the {shown} instead. "
            f"The pages are `/` (the {shown}), {listed}.")

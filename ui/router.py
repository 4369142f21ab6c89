"""Make sure a page runs inside app.py's ``st.navigation``, even when it is the first URL opened.

Streamlit decides per process whether an app is a legacy "pages/ directory" app: until a script
calls ``st.navigation`` it assumes so, and a first request for ``/sizer`` then runs
``pages/1_sizer.py`` on its own (no page config, every module in pages/ listed as a page).
The pages stay in ``pages/`` (so each one is also a runnable script), so each page calls
:func:`run_through_router` first: it clears that flag and reruns, so app.py's router runs.
"""

import streamlit as st
from streamlit.runtime.pages_manager import PagesManager


def run_through_router() -> None:
    """Rerun through app.py's navigation if Streamlit started this page in legacy mode."""
    # Private flag, checked by Streamlit's script runner on every run (streamlit 1.67).
    if PagesManager.uses_pages_directory:
        PagesManager.uses_pages_directory = False
        st.rerun()

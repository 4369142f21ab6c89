"""KV Cache Explorer: the router. Page config and navigation only; each page lives in pages/."""

import streamlit as st

st.set_page_config(page_title="KV Cache Explorer", page_icon=":material/memory:", layout="wide")

navigation = st.navigation(
    [
        st.Page("pages/1_sizer.py", title="KV-cache sizer", icon=":material/calculate:",
                url_path="sizer", default=True),
        st.Page("pages/2_fragmentation.py", title="Fragmentation explorer",
                icon=":material/view_module:", url_path="fragmentation"),
    ]
)
navigation.run()

"""KV Cache Explorer: the router. Page config and navigation only; each page lives in pages/."""

import streamlit as st

st.set_page_config(page_title="KV Cache Explorer", page_icon=":material/memory:", layout="wide")

navigation = st.navigation(
    [
        st.Page("pages/1_sizer.py", title="KV-cache sizer", icon=":material/calculate:",
                url_path="sizer", default=True),
        st.Page("pages/2_fragmentation.py", title="Fragmentation explorer",
                icon=":material/view_module:", url_path="fragmentation"),
        st.Page("pages/3_kernels.py", title="Live kernels", icon=":material/speed:", url_path="kernels"),
        st.Page("pages/4_planner.py", title="Capacity planner", icon=":material/insights:",
                url_path="planner"),
    ]
)
navigation.run()

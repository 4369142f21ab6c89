"""KV Cache Explorer: the router. Page config and navigation only; each page lives in pages/."""

import streamlit as st

from ui.layout import apply_layout_css
from ui.router import alias_page, requested_path, unknown_path_notice

st.set_page_config(page_title="KV Cache Explorer", page_icon=":material/memory:", layout="wide")
apply_layout_css()

# The default page is served at "/"; its url_path is only its internal name ("/sizer" is the alias).
sizer = st.Page("pages/1_sizer.py", title="KV-cache sizer", icon=":material/calculate:",
                url_path="kv-cache-sizer", default=True)
pages = [
    sizer,
    st.Page("pages/2_fragmentation.py", title="Fragmentation explorer", icon=":material/view_module:",
            url_path="fragmentation"),
    st.Page("pages/3_kernels.py", title="Live kernels", icon=":material/speed:", url_path="kernels"),
    st.Page("pages/4_planner.py", title="Capacity planner", icon=":material/insights:", url_path="planner"),
    st.Page("pages/5_cluster.py", title="Cluster plan", icon=":material/hub:", url_path="cluster"),
    alias_page(sizer, "sizer"),
]
# In the top bar, so that a page without sidebar controls (the sizer) has the whole width at 800 px.
navigation = st.navigation(pages, position="top")
notice = unknown_path_notice(requested_path(st.context.url, st.get_option("server.baseUrlPath")),
                             [page.url_path for page in pages], sizer.title)
if notice:
    st.warning(notice, icon=":material/link_off:")
navigation.run()

"""Page plumbing shared by the pages: URL state, routing, chart builders, GPU-run serialisation.

Only pages import this package; it may import streamlit and plotly, the libraries never do."""

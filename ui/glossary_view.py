"""The glossary (:mod:`glossary`) as a collapsed sidebar section, the same on every page that draws it:
the terms in one sentence each, then the names the pages and CLIs give formats and allocators."""

from __future__ import annotations

from typing import Any

import streamlit as st

from glossary import ALLOCATOR_LABELS, DTYPE_LABELS, TERMS

__all__ = ["GLOSSARY_LABEL", "glossary_markdown", "render_glossary"]

GLOSSARY_LABEL = "Glossary"
# The formats the KV cache can take, the ones a reader meets first; weight-only formats follow.
_KV_FORMATS = ("bf16", "fp16", "fp32", "fp8", "int8", "int4", "int2")


def glossary_markdown() -> str:
    """The glossary as Markdown: terms, then formats and allocators with their option values."""
    terms = "\n".join(f"- **{term}**: {text}" for term, text in TERMS)
    kv = ", ".join(f"{DTYPE_LABELS[n]} (`{n}`)" for n in _KV_FORMATS)
    weights = ", ".join(f"{label} (`{n}`)" for n, label in DTYPE_LABELS.items() if n not in _KV_FORMATS)
    allocators = "\n".join(f"- {label} (`{n}`)" for n, label in ALLOCATOR_LABELS.items())
    return (f"{terms}\n\n**Number formats** (option value in brackets): {kv}; weights only: {weights}.\n\n"
            f"**Allocators**:\n{allocators}")


def render_glossary(parent: Any = None) -> None:
    """The glossary in a collapsed expander in ``parent`` (default: the sidebar)."""
    with (parent or st.sidebar).expander(GLOSSARY_LABEL, icon=":material/menu_book:"):
        st.markdown(glossary_markdown())

"""Tables a reader can read: headers in words with their units, no ``None`` cells, figures
rounded to what they mean, no index column, and a CSV of the same rows at full precision.

Every page draws its tables through :func:`show`::

    show(readable(records, percent=("utilisation",)), key="frag.table", file_name="summary.csv")

Cells are formatted to text for the screen (``1,542,352``, ``6.5 %``, ``—`` for no value): a
table here has a handful of rows, read rather than sorted, and a numeric column holding a
``None`` would otherwise print the word. The CSV keeps the numbers.

Figures in sentences and metrics take the same formats: :func:`number_text` and
:func:`counted` for counts (thousands separators), :func:`percent_text` for shares ("6.5 %",
a space before the sign, as the tables' headers write it).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any

import pandas as pd
import streamlit as st

MISSING = "—"
# Words written in capitals (or with their own capitalisation) wherever they appear in a header.
WORDS = {"kv": "KV", "gpu": "GPU", "gpus": "GPUs", "tp": "TP", "pp": "PP", "ttft": "TTFT", "tpot": "TPOT",
         "id": "ID", "csv": "CSV", "json": "JSON", "hbm": "HBM", "cpu": "CPU", "fp8": "FP8", "bf16": "BF16",
         "mla": "MLA", "gqa": "GQA", "ref": "ref"}
# A header's last word that is a unit becomes "(unit)".
UNITS = ("B", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB", "ms", "us", "s", "tokens", "pct")
_SNAKE = re.compile(r"^[A-Za-z0-9]+(_[A-Za-z0-9]+)+$")


def header(name: str) -> str:
    """``"kv_all_users_GB"`` → ``"KV all users (GB)"``, ``"gpu"`` → ``"GPU"``; the first letter a capital."""
    snake = bool(_SNAKE.match(name))
    words = name.split("_") if snake else name.split(" ")
    unit = words.pop() if snake and len(words) > 1 and words[-1] in UNITS else None
    text = " ".join(WORDS.get(word.lower(), word) if word.lower() in WORDS else word for word in words)
    text = text[:1].upper() + text[1:]
    return f"{text} ({'%' if unit == 'pct' else unit})" if unit else text


def number_text(value: float) -> str:
    """A figure rounded to what it means: whole numbers with separators, one decimal from 10 up,
    three significant digits below 10."""
    if isinstance(value, Integral) or float(value).is_integer() and abs(value) >= 1:
        return f"{int(value):,}"
    size = abs(value)
    if size >= 10:
        return f"{value:,.1f}"
    if size == 0:
        return "0"
    return f"{value:.3g}"


def percent_text(fraction: float, digits: int = 1) -> str:
    """A share 0–1 as a percentage with ``digits`` decimals: ``0.0625`` → ``"6.2 %"``; ``—`` for none."""
    if fraction is None or math.isnan(fraction):
        return MISSING
    return f"{100 * fraction:,.{digits}f} %"


# Streamlit's grid sizes a column from its header and its first 10 rows and its last, up to
# 500 px, leaving no room for the header's menu icon: a longer cell elsewhere, or a header longer
# than its cells, is cut to "…" ("unsupp…", "Secon…"). These estimate widths in its 14 px font.
GRID_SAMPLED_ROWS = 10
GRID_AUTO_WIDTH_PX = 500
GRID_MAX_WIDTH_PX = 1000  # the widest a column may be set
CHAR_PX = 7.5  # an upper estimate of one character's advance (digits are 7 px)
CELL_PADDING_PX = 20  # 8 px each side, and rounding
HEADER_ICON_PX = 28  # the header's sort and menu icon


def _text_px(text: str) -> int:
    return math.ceil(CHAR_PX * len(text)) + CELL_PADDING_PX


def column_widths(shown: pd.DataFrame) -> dict[str, Any]:
    """Column settings for ``st.dataframe(shown, column_config=...)``: a width in px for each
    column the grid's own sizing would cut (a long cell past the rows it samples, one over its
    500 px cap, or a header longer than the cells); other columns keep the grid's sizing."""
    config: dict[str, Any] = {}
    rows = len(shown)
    sampled = sorted(set(range(min(rows, GRID_SAMPLED_ROWS))) | ({rows - 1} if rows else set()))
    for column in shown.columns:
        cells = ["" if v is None else str(v) for v in shown[column].tolist()]
        title = _text_px(str(column))
        needed = max([title + HEADER_ICON_PX] + [_text_px(c) for c in cells])
        auto = min(max([title] + [_text_px(cells[i]) for i in sampled]), GRID_AUTO_WIDTH_PX)
        if needed > auto:
            config[str(column)] = st.column_config.Column(width=min(needed, GRID_MAX_WIDTH_PX))
    return config


def cell_text(value: Any, percent: bool = False) -> str:
    """One cell for the screen: ``—`` for no value, numbers rounded, percentages from fractions."""
    if value is None or isinstance(value, float) and math.isnan(value):
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, Real):
        if percent:
            return f"{100 * float(value):.1f}"
        if isinstance(value, float) and math.isinf(value):
            return "∞" if value > 0 else "−∞"
        return number_text(value)
    return str(value)


@dataclass(frozen=True, kw_only=True)
class Table:
    """One table: ``shown`` (text cells, readable headers) and ``data`` (the numbers, same headers)."""

    shown: pd.DataFrame
    data: pd.DataFrame

    def csv(self) -> bytes:
        return self.data.to_csv(index=False).encode()


def readable(records: Iterable[Mapping[str, Any]] | pd.DataFrame, *, rename: Mapping[str, str] | None = None,
             percent: Iterable[str] = ()) -> Table:
    """``records`` as a :class:`Table`: each header renamed (``rename``, else :func:`header`),
    cells as text; the columns named in ``percent`` (fractions 0–1, original names) in percent."""
    frame = records.copy() if isinstance(records, pd.DataFrame) else pd.DataFrame(list(records))
    rename, percent = dict(rename or {}), set(percent) & set(frame.columns)
    names = {column: rename.get(column, header(str(column))) + (" (%)" if column in percent else "")
             for column in frame.columns}
    shown = pd.DataFrame({names[c]: [cell_text(v, c in percent) for v in frame[c].tolist()] for c in frame.columns})
    data = frame.astype({c: float for c in percent})
    data[list(percent)] = 100 * data[list(percent)]  # the CSV in percent too, as its header says
    return Table(shown=shown, data=data.rename(columns=names))


def show(table: Table, *, key: str, file_name: str, label: str = "Table as CSV",
         help: Mapping[str, str] | None = None) -> None:
    """The table (no index, the page's width, no cell cut) and a download of its CSV below it;
    ``help`` maps a shown header to what its figures mean (the header's tooltip)."""
    st.dataframe(table.shown, hide_index=True, key=key, column_config=column_config(table.shown, help))
    st.download_button(label, table.csv(), file_name=file_name, mime="text/csv", icon=":material/download:",
                       key=f"{key}.csv")


def column_config(shown: pd.DataFrame, help: Mapping[str, str] | None = None) -> dict[str, Any]:
    """:func:`column_widths` of ``shown`` with each header in ``help`` given its tooltip."""
    config = column_widths(shown)
    for column, text in (help or {}).items():
        if column not in shown.columns:
            raise KeyError(f"help for a column the table does not have: {column!r}")
        width = config[column]["width"] if column in config else None
        config[column] = st.column_config.Column(width=width, help=text)
    return config


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``"1 request"``, ``"2 requests"``, ``"1,000 requests"``: the noun agrees with the count."""
    return f"{count:,} {noun if count == 1 else plural or noun + 's'}"

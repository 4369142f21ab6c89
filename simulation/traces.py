"""Request traces from CSV: prompt and output token columns, optional arrival times.

Accepts the layout of the vidur processed traces (``arrived_at``, ``num_prefill_tokens``,
``num_decode_tokens``) and plain names (``prompt_tokens``, ``output_tokens``, ``arrival_s``).
Anything a user uploads is validated here; every problem raises ``TraceError`` (a ValueError) with
a message that names the row or column, so a page can show it as is.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pandas as pd

from simulation.workloads import Workload

# Uploads beyond this many rows are refused: 200k requests already take seconds over time, and the
# limit keeps a mistaken multi-gigabyte upload from exhausting the server.
DEFAULT_MAX_ROWS = 200_000
# Accepted spellings of each column, first match wins.
PROMPT_COLUMNS = ("num_prefill_tokens", "prompt_tokens", "input_tokens", "prompt")
OUTPUT_COLUMNS = ("num_decode_tokens", "output_tokens", "completion_tokens", "output")
ARRIVAL_COLUMNS = ("arrived_at", "arrival_s", "arrival_time", "timestamp")


class TraceError(ValueError):
    """A trace file that cannot be used; the message names the row or column at fault."""


def load_trace_csv(source: str | Path | bytes | BinaryIO, *, max_rows: int = DEFAULT_MAX_ROWS,
                   name: str | None = None) -> Workload:
    """Read and validate a trace CSV.

    Parameters
    ----------
    source : path, raw bytes or binary file object
        The CSV. Header row required.
    max_rows : int
        Row limit; a longer file raises ``TraceError``.
    name : str, optional
        Label for the workload (defaults to the file name).

    Returns
    -------
    Workload
        Prompt and output tokens (int64, shape (n,)); ``arrival_s`` (float64 seconds, shifted to
        start at 0 and sorted with the requests) when the file has an arrival column.

    Raises
    ------
    TraceError
        Not a CSV, a missing column, a value that is negative, missing (NaN), not a number or not a
        whole number of tokens, no rows, or more than ``max_rows`` rows. Rows are numbered from 1
        for the first data row (the file's line 2).
    """
    label = name or (Path(source).name if isinstance(source, (str, Path)) else "uploaded trace")
    frame = _read_frame(source, max_rows)
    if len(frame) == 0:
        raise TraceError("the trace has a header but no rows")
    if len(frame) > max_rows:
        raise TraceError(f"the trace has more than {max_rows:,} rows (the limit); split it or sample it")
    columns = {str(c).strip().lower(): c for c in frame.columns}
    prompt_col = _find_column(columns, PROMPT_COLUMNS, "prompt")
    output_col = _find_column(columns, OUTPUT_COLUMNS, "output")
    arrival_col = next((columns[c] for c in ARRIVAL_COLUMNS if c in columns), None)

    prompt = _token_column(frame[prompt_col], str(prompt_col))
    output = _token_column(frame[output_col], str(output_col))
    if (bad := np.flatnonzero(prompt < 1)).size:
        raise TraceError(f"row {bad[0] + 1}, column {prompt_col!s}: a prompt needs at least 1 token")
    if (bad := np.flatnonzero(output < 1)).size:
        raise TraceError(f"row {bad[0] + 1}, column {output_col!s}: an output needs at least 1 token")
    arrival = None
    if arrival_col is not None:
        arrival = _number_column(frame[arrival_col], str(arrival_col))
        # Traces are usually sorted; sort stably if not, so requests keep their order among ties.
        order = np.argsort(arrival, kind="stable")
        prompt, output, arrival = prompt[order], output[order], arrival[order] - arrival[order[0]]
    return Workload(prompt_tokens=prompt, output_tokens=output, arrival_s=arrival, source=label)


def _read_frame(source: str | Path | bytes | BinaryIO, max_rows: int) -> pd.DataFrame:
    if isinstance(source, (str, Path)):
        raw = Path(source).read_bytes()
    elif isinstance(source, bytes):
        raw = source
    else:
        raw = source.read()
    if b"\x00" in raw[:4096]:
        raise TraceError("not a CSV file: it contains binary data")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise TraceError(f"not a CSV file: not UTF-8 text (byte {err.start})") from None
    try:
        # One row over the limit is enough to know the file is too long.
        frame = pd.read_csv(io.StringIO(text), nrows=max_rows + 1, dtype=str,
                            keep_default_na=False, skipinitialspace=True)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else "empty file"
        raise TraceError(f"not a CSV file: {first_line}") from None
    if frame.shape[1] < 2:
        raise TraceError("not a CSV file with prompt and output columns: found "
                         f"{frame.shape[1]} column ({', '.join(map(str, frame.columns))})")
    return frame


def _find_column(columns: dict[str, object], accepted: tuple[str, ...], what: str) -> object:
    for candidate in accepted:
        if candidate in columns:
            return columns[candidate]
    raise TraceError(f"missing {what} column: expected one of {', '.join(accepted)}; "
                     f"found {', '.join(map(str, columns.values()))}")


def _number_column(values: pd.Series, column: str) -> np.ndarray:
    """Parse a text column as finite, non-negative floats, naming the first bad row."""
    text = values.astype(str).str.strip()
    if (empty := np.flatnonzero((text == "").to_numpy())).size:
        raise TraceError(f"row {empty[0] + 1}, column {column}: empty value")
    numbers = pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64)
    lowered = text.str.lower().to_numpy()
    nan_text = np.isin(lowered, ("nan", "na", "n/a", "null", "none"))
    if (bad := np.flatnonzero(nan_text)).size:
        raise TraceError(f"row {bad[0] + 1}, column {column}: missing value ({text.iloc[bad[0]]!r})")
    if (bad := np.flatnonzero(np.isnan(numbers))).size:
        raise TraceError(f"row {bad[0] + 1}, column {column}: not a number ({text.iloc[bad[0]]!r})")
    if (bad := np.flatnonzero(~np.isfinite(numbers))).size:
        raise TraceError(f"row {bad[0] + 1}, column {column}: infinite value")
    if (bad := np.flatnonzero(numbers < 0)).size:
        raise TraceError(f"row {bad[0] + 1}, column {column}: negative value ({text.iloc[bad[0]]})")
    return numbers


def _token_column(values: pd.Series, column: str) -> np.ndarray:
    """Parse a token-count column: whole, non-negative numbers, int64."""
    numbers = _number_column(values, column)
    if (bad := np.flatnonzero(numbers != np.floor(numbers))).size:
        raise TraceError(f"row {bad[0] + 1}, column {column}: not a whole number of tokens "
                         f"({values.iloc[bad[0]]})")
    return numbers.astype(np.int64)

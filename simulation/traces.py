"""Request traces from CSV: prompt and output token columns, optional arrival times.

Accepts the layout of the vidur processed traces (``arrived_at``, ``num_prefill_tokens``,
``num_decode_tokens``) and plain names (``prompt_tokens``, ``output_tokens``, ``arrival_s``).
Anything a user uploads is validated here; every problem raises ``TraceError`` (an
:class:`~inputs.errors.InputError` of field ``trace``) with a short message that names the row or
column, so a page can show it as is and a CLI can name its ``--trace`` option.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pandas as pd

from inputs.errors import InputError, clip, shown
from inputs.uploads import decode_text, read_capped, read_path_capped, upload_bytes
from simulation.workloads import Workload

# The real request traces the project ships (data/traces/README.md gives their source and
# licence); one place names the location, and the pages, CLIs and benchmarks list them from here.
TRACES_DIR = Path(__file__).resolve().parents[1] / "data" / "traces"
# Uploads beyond this many rows are refused: 200k requests already take seconds over time, and the
# limit keeps a mistaken multi-gigabyte upload from exhausting the server.
DEFAULT_MAX_ROWS = 200_000
# Bytes read at most: 200k rows of three ~15-character fields, with room to spare. The read stops
# one byte past the cap, so an endless file (``/dev/zero``) is refused after reading the cap.
DEFAULT_MAX_BYTES = 16 * 2**20
# Largest token count of one request field: far above any model's context, and low enough that
# sums over 200k requests stay exact in int64 and float64.
MAX_TRACE_TOKENS = 10**9
# Latest arrival time accepted (seconds, ~32 years): keeps time integrals finite.
MAX_ARRIVAL_S = 1e9
# Most columns a trace may have: the readers need four at most, and published traces carry under a
# dozen; a header of 100k columns within the byte cap would make the parser build 100k columns.
MAX_TRACE_COLUMNS = 256
_SHOWN_COLUMN_CHARS = 40  # a column name quoted in an error
# Accepted spellings of each column, first match wins.
PROMPT_COLUMNS = ("num_prefill_tokens", "prompt_tokens", "input_tokens", "prompt")
OUTPUT_COLUMNS = ("num_decode_tokens", "output_tokens", "completion_tokens", "output")
ARRIVAL_COLUMNS = ("arrived_at", "arrival_s", "arrival_time", "timestamp")
# Optional: which conversation a request continues (whole numbers), for prefix caching.
CONVERSATION_COLUMNS = ("conversation_id", "conversation", "session_id", "conv_id")
MAX_CONVERSATION_ID = 2**53  # exact as a float64 parsed from text
FIELD = "trace"


class TraceError(InputError):
    """A trace file that cannot be used; the message names the row or column at fault."""

    def __init__(self, message: str) -> None:
        super().__init__(FIELD, message)



def shipped_trace_names() -> tuple[str, ...]:
    """File names of the shipped CSV traces, sorted (empty when the folder is absent)."""
    if not TRACES_DIR.is_dir():
        return ()
    return tuple(sorted(path.name for path in TRACES_DIR.glob("*.csv")))

def load_trace_csv(source: str | Path | bytes | BinaryIO, *, max_rows: int = DEFAULT_MAX_ROWS,
                   max_bytes: int = DEFAULT_MAX_BYTES, name: str | None = None) -> Workload:
    """Read and validate a trace CSV.

    Parameters
    ----------
    source : path, raw bytes or binary file object
        The CSV. Header row required.
    max_rows : int
        Row limit; a longer file raises ``TraceError``.
    max_bytes : int
        Size limit; a larger file (or stream) raises ``TraceError`` after reading at most
        ``max_bytes + 1`` bytes.
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
        Not a CSV, a missing column, a value that is negative, missing (NaN), not a number, too
        large or not a whole number of tokens, no rows, more than ``max_rows`` rows,
        ``MAX_TRACE_COLUMNS`` columns or ``max_bytes`` bytes. Rows are numbered from 1
        for the first data row (the file's line 2).
    """
    label = name or (Path(source).name if isinstance(source, (str, Path)) else "uploaded trace")
    frame = _read_frame(_read_bytes(source, max_bytes), max_rows)
    if len(frame) == 0:
        raise TraceError("the trace has a header but no rows")
    if len(frame) > max_rows:
        raise TraceError(f"the trace has more than {max_rows:,} rows (the limit); split it or sample it")
    columns = {str(c).strip().lower(): c for c in frame.columns}
    prompt_col = _find_column(columns, PROMPT_COLUMNS, "prompt")
    output_col = _find_column(columns, OUTPUT_COLUMNS, "output")
    arrival_col = next((columns[c] for c in ARRIVAL_COLUMNS if c in columns), None)
    conversation_col = next((columns[c] for c in CONVERSATION_COLUMNS if c in columns), None)

    prompt = _token_column(frame[prompt_col], _column_name(prompt_col))
    output = _token_column(frame[output_col], _column_name(output_col))
    if (bad := np.flatnonzero(prompt < 1)).size:
        raise TraceError(f"row {bad[0] + 1}, column {_column_name(prompt_col)}: a prompt needs at least 1 token")
    if (bad := np.flatnonzero(output < 1)).size:
        raise TraceError(f"row {bad[0] + 1}, column {_column_name(output_col)}: an output needs at least 1 token")
    conversation = None
    if conversation_col is not None:
        numbers = _number_column(frame[conversation_col], _column_name(conversation_col), MAX_CONVERSATION_ID, "as an id")
        if (bad := np.flatnonzero(numbers != np.floor(numbers))).size:
            raise TraceError(f"row {bad[0] + 1}, column {_column_name(conversation_col)}: "
                             "a conversation id must be a whole number")
        conversation = numbers.astype(np.int64)
    arrival = None
    if arrival_col is not None:
        arrival = _number_column(frame[arrival_col], _column_name(arrival_col), MAX_ARRIVAL_S, "seconds")
        # Traces are usually sorted; sort stably if not, so requests keep their order among ties.
        order = np.argsort(arrival, kind="stable")
        prompt, output, arrival = prompt[order], output[order], arrival[order] - arrival[order[0]]
        conversation = None if conversation is None else conversation[order]
    return Workload(prompt_tokens=prompt, output_tokens=output, arrival_s=arrival, source=label,
                    conversation=conversation)


def _read_bytes(source: str | Path | bytes | BinaryIO, max_bytes: int) -> bytes:
    """The file's bytes, at most ``max_bytes`` of them (a path, bytes or a binary stream)."""
    try:
        if isinstance(source, (str, Path)):
            return read_path_capped(str(source), max_bytes, field=FIELD)
        if isinstance(source, (bytes, bytearray, memoryview)):
            return upload_bytes(source, max_bytes, field=FIELD)
        return read_capped(source, max_bytes, field=FIELD)
    except InputError as err:
        raise TraceError(err.message) from None


def _read_frame(raw: bytes, max_rows: int) -> pd.DataFrame:
    if b"\x00" in raw[:4096]:
        raise TraceError("not a CSV file: it contains binary data")
    try:
        text = decode_text(raw, field=FIELD)
    except InputError as err:
        raise TraceError(f"not a CSV file: {err.message}") from None
    if (n_columns := _header_columns(text)) > MAX_TRACE_COLUMNS:
        raise TraceError(f"the trace's header has {n_columns:,} columns, more than {MAX_TRACE_COLUMNS} (the limit); "
                         "keep the prompt, output and optional arrival and conversation columns")
    try:
        # One row over the limit is enough to know the file is too long.
        frame = pd.read_csv(io.StringIO(text), nrows=max_rows + 1, dtype=str,
                            keep_default_na=False, skipinitialspace=True)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else "empty file"
        raise TraceError(f"not a CSV file: {clip(first_line, 120)}") from None
    if frame.shape[1] < 2:
        raise TraceError("not a CSV file with prompt and output columns: found "
                         f"{frame.shape[1]} column ({_column_list(frame.columns)})")
    return frame


def _header_columns(text: str) -> int:
    """Columns in the first record of ``text``: its commas plus one, as the parser splits it
    (quoted commas counted exactly, and only when the plain count is over the limit)."""
    end = text.find("\n")
    first_line = text if end < 0 else text[:end]
    plain = first_line.count(",") + 1
    if plain <= MAX_TRACE_COLUMNS:
        return plain
    try:
        return len(next(csv.reader(io.StringIO(text)), []))
    except csv.Error:
        return plain


def _find_column(columns: dict[str, object], accepted: tuple[str, ...], what: str) -> object:
    for candidate in accepted:
        if candidate in columns:
            return columns[candidate]
    raise TraceError(f"missing {what} column: expected one of {', '.join(accepted)}; "
                     f"found {_column_list(columns.values())}")


def _column_name(column: object) -> str:
    """A column's name as an error quotes it: at most a few dozen characters."""
    return clip(str(column), _SHOWN_COLUMN_CHARS)


def _column_list(columns) -> str:
    """Column names for an error: the first few, each clipped."""
    names = [_column_name(c) for c in columns]
    return ", ".join(names[:6]) + (f", … ({len(names)} columns)" if len(names) > 6 else "")


def _number_column(values: pd.Series, column: str, largest: float, unit: str) -> np.ndarray:
    """Parse a text column as finite numbers in ``[0, largest]``, naming the first bad row."""
    text = values.astype(str).str.strip()
    if (empty := np.flatnonzero((text == "").to_numpy())).size:
        raise TraceError(f"row {empty[0] + 1}, column {column}: empty value")
    numbers = pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64)
    lowered = text.str.lower().to_numpy()
    nan_text = np.isin(lowered, ("nan", "na", "n/a", "null", "none"))
    if (bad := np.flatnonzero(nan_text)).size:
        raise TraceError(f"row {bad[0] + 1}, column {column}: missing value ({shown(text.iloc[bad[0]])})")
    if (bad := np.flatnonzero(np.isnan(numbers))).size:
        raise TraceError(f"row {bad[0] + 1}, column {column}: not a number ({shown(text.iloc[bad[0]])})")
    if (bad := np.flatnonzero(~np.isfinite(numbers))).size:
        raise TraceError(f"row {bad[0] + 1}, column {column}: infinite value")
    if (bad := np.flatnonzero(numbers < 0)).size:
        raise TraceError(f"row {bad[0] + 1}, column {column}: negative value ({clip(text.iloc[bad[0]], 40)})")
    if (bad := np.flatnonzero(numbers > largest)).size:
        raise TraceError(f"row {bad[0] + 1}, column {column}: {clip(text.iloc[bad[0]], 40)} is more than "
                         f"the {largest:,.0f} {unit} allowed")
    return numbers


def _token_column(values: pd.Series, column: str) -> np.ndarray:
    """Parse a token-count column: whole, non-negative numbers, int64."""
    numbers = _number_column(values, column, MAX_TRACE_TOKENS, "tokens")
    if (bad := np.flatnonzero(numbers != np.floor(numbers))).size:
        raise TraceError(f"row {bad[0] + 1}, column {column}: not a whole number of tokens "
                         f"({clip(str(values.iloc[bad[0]]).strip(), 40)})")
    return numbers.astype(np.int64)

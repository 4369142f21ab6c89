"""Files from users, read as bytes with a cap; JSON in with a depth limit, JSON out strict.

Uploaded content is only ever bytes: nothing here turns text into a path. Paths come only from a
CLI's own path options, through :func:`read_path_capped`, which reads at most ``cap + 1`` bytes
so ``/dev/zero`` or an endless FIFO costs no more memory than the cap.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, BinaryIO

from inputs.errors import InputError, clip

DEFAULT_MAX_JSON_DEPTH = 64  # every JSON this project reads nests at most 6 levels
_CHUNK_BYTES = 1 << 20
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')  # a JSON string, escapes included
_BRACKET = re.compile(r"[\[\]{}]")


def read_capped(stream: BinaryIO, cap: int, *, field: str) -> bytes:
    """At most ``cap`` bytes of ``stream``; :class:`InputError` if it holds more.

    Reads in chunks and stops one byte past the cap, so an endless stream ends the read.
    """
    chunks: list[bytes] = []
    total = 0
    while total <= cap:
        chunk = stream.read(min(_CHUNK_BYTES, cap + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    if total > cap:
        raise InputError(field, f"larger than the {cap:,}-byte limit")
    return b"".join(chunks)


def read_path_capped(path: str, cap: int, *, field: str) -> bytes:
    """The bytes of the file at ``path`` (a CLI path option), at most ``cap`` of them."""
    try:
        with open(path, "rb") as stream:
            return read_capped(stream, cap, field=field)
    except OSError as exc:
        raise InputError(field, f"cannot read {clip(str(path), 80)!r}: {exc.strerror or exc}") from None


def upload_bytes(data: bytes | bytearray | memoryview, cap: int, *, field: str) -> bytes:
    """An upload already in memory (Streamlit's uploader), refused when over ``cap``."""
    if len(data) > cap:
        raise InputError(field, f"larger than the {cap:,}-byte limit")
    return bytes(data)


def decode_text(data: bytes, *, field: str) -> str:
    """UTF-8 text of ``data`` (a leading byte-order mark dropped); :class:`InputError` otherwise."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(field, f"not UTF-8 text (byte {exc.start})") from None


def loads_json(data: bytes | str, *, field: str, max_depth: int = DEFAULT_MAX_JSON_DEPTH) -> Any:
    """Parse JSON that nests at most ``max_depth`` arrays/objects and has no NaN/Infinity.

    The depth is checked by one linear scan before parsing, so a document nested 10⁵ deep is
    refused in milliseconds instead of exhausting the recursion limit.
    """
    text = decode_text(data, field=field) if isinstance(data, (bytes, bytearray)) else data
    depth = json_depth(text)
    if depth > max_depth:
        raise InputError(field, f"JSON nested {depth} levels deep; at most {max_depth} are allowed")
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise InputError(field, f"not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
    except ValueError as exc:
        raise InputError(field, str(exc)) from None


def json_depth(text: str) -> int:
    """Deepest nesting of ``[``/``{`` in ``text``, ignoring brackets inside strings."""
    # Strings are removed first (by a regular expression, so the scan runs in C); what is left
    # is a sequence of brackets whose running count is the depth.
    brackets = _BRACKET.findall(_STRING.sub("", text))
    depth = deepest = 0
    for bracket in brackets:
        depth += 1 if bracket in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def dumps_strict(obj: Any, **kwargs: Any) -> str:
    """``json.dumps`` that refuses NaN and ±Infinity (which are not JSON) instead of printing them."""
    return json.dumps(obj, allow_nan=False, **kwargs)


def finite_or_none(value: float | None) -> float | None:
    """``value`` when finite, else ``None`` (JSON ``null``)."""
    return value if value is not None and math.isfinite(value) else None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")

"""Hostile values and files shared by the fuzz tests."""

from __future__ import annotations

import json
import math

from inputs.bounds import Bound

MAX_ERROR_CHARS = 300  # a refusal is one readable line
MAX_CLI_RSS_BYTES = 300 * 2**20  # peak resident memory of a CLI run on hostile input

# Text no bounded option may accept silently, whatever its range.
# ("--" is left out: argparse itself drops it from "--opt=--" and uses the option's default.)
HOSTILE_TEXT = ("nan", "NaN", "inf", "-inf", "Infinity", "1e308", "-1e308", "1e30", "-1", "0x10", "",
                " ", "abc", "1e", "9" * 400, "1" * 5000, "0.5.5", "½", "１２", "\x00", "1e-400")


def beyond(bound: Bound) -> list[str]:
    """Values just and far outside ``bound``, and a fraction for an integer bound."""
    values = [repr(bound.high * 10 + 1), repr(bound.high + 1 if bound.integer else bound.high * 1.0001 + 1e-9)]
    if bound.low_open:
        values.append(repr(bound.low))
    if math.isfinite(bound.low) and bound.low > -1e300:
        values.append(repr(bound.low - 1))
    if bound.integer:
        middle = min((bound.low + bound.high) / 2, 2.0**40)  # a float still holds the .5 there
        values.append(repr(math.floor(middle) + 0.5))
    return values


def strict_json(text: str) -> object:
    """``json.loads`` that refuses NaN and ±Infinity, which are not JSON."""
    def refuse(name: str):
        raise AssertionError(f"{name} in JSON output")
    return json.loads(text, parse_constant=refuse)


def assert_one_line_naming(stderr: str, *names: str) -> None:
    """A refusal: exactly one line, short, naming one of ``names``."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr[:600]
    assert len(lines[0]) < MAX_ERROR_CHARS, lines[0][:600]
    assert "Traceback" not in stderr
    if names:
        assert any(name in lines[0] for name in names), (names, lines[0])


# Files: (name, content) — written to disk for CLI path options and uploaded as bytes on pages.
NESTED = b"[" * 100_000 + b"]" * 100_000
HOSTILE_JSON_FILES = {
    "not-json.json": b"hello world",
    "a-path.json": b"/etc/passwd",
    "list.json": b"[1, 2, 3]",
    "nested.json": NESTED,
    "nan.json": b'{"num_hidden_layers": NaN, "schema": NaN}',
    "huge-numbers.json": b'{"num_hidden_layers": 1e400, "num_attention_heads": 99999999999999999999999}',
    "wrong-types.json": b'{"num_hidden_layers": "eighty", "architectures": {"a": 1}, "schema": 5}',
    "non-utf8.json": b"\xff\xfe{\x00}",
    "empty.json": b"",
}
HOSTILE_CSV_FILES = {
    "bom-crlf.csv": b"\xef\xbb\xbfnum_prefill_tokens,num_decode_tokens\r\n10,20\r\n",
    "non-utf8.csv": b"num_prefill_tokens,num_decode_tokens\n\xff\xfe,1\n",
    "huge-field.csv": b"num_prefill_tokens,num_decode_tokens\n" + b"1" * 1_000_000 + b",2\n",
    "huge-tokens.csv": b"num_prefill_tokens,num_decode_tokens\n1e30,5\n",
    "nan.csv": b"num_prefill_tokens,num_decode_tokens\nnan,5\n",
    "negative.csv": b"num_prefill_tokens,num_decode_tokens\n-5,5\n",
    "no-header.csv": b"1,2\n3,4\n",
    "json-instead.csv": b'{"a": 1}',
    "empty.csv": b"",
    "wide-header.csv": b",".join(b"c%d" % i for i in range(100_000)) + b"\n" + b",".join([b"1"] * 100_000) + b"\n",
}

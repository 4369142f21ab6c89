"""Allowed ranges of numeric inputs, written once and used at every boundary.

A :class:`Bound` parses text (a CLI option, a URL parameter) or checks a number (a widget
value, a library argument) and refuses anything outside its range, NaN and infinities, with
one line that names the field and the range::

    CONTEXT = Bound(field="context", low=1, high=10**7, integer=True, unit="tokens")
    CONTEXT.parse("1e308")  # InputError: context: must be a whole number from 1 to 10,000,000 tokens, got '1e308'
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from inputs.errors import InputError, shown

_MAX_TEXT_CHARS = 64  # no number a user means is longer; longer text is refused unparsed


@dataclass(frozen=True, kw_only=True)
class Bound:
    """A closed range ``[low, high]`` (``low`` excluded when ``low_open``) of ints or floats.

    ``unit`` is appended to the range in messages (``"tokens"``, ``"GiB"``).
    """

    field: str
    low: float
    high: float
    integer: bool = False
    low_open: bool = False
    unit: str = ""

    def __post_init__(self) -> None:
        if not self.low <= self.high:
            raise ValueError(f"Bound {self.field}: low {self.low} above high {self.high}")

    def describe(self) -> str:
        """The range in words: ``"a whole number from 1 to 1,024"``, ``"a number above 0 and at most 1"``."""
        kind = "a whole number" if self.integer else "a number"
        low, high = _figure(self.low), _figure(self.high)
        unit = f" {self.unit}" if self.unit else ""
        if self.low_open:
            return f"{kind} above {low} and at most {high}{unit}"
        return f"{kind} from {low} to {high}{unit}"

    def parse(self, text: str) -> int | float:
        """``text`` as a number in range. Accepts ``1_000``, ``1,000`` and, for whole numbers,
        ``2e3`` or ``40.0``; refuses anything else with :class:`InputError`."""
        raw = str(text).strip().replace("_", "").replace(",", "")
        if len(raw) > _MAX_TEXT_CHARS or not raw.isascii():  # float() would take "１２" or "٣"
            raise self._error(text)
        try:
            value = float(raw)
        except ValueError:
            raise self._error(text) from None
        if self.integer:
            if not (math.isfinite(value) and value.is_integer()):
                raise self._error(text)
            # Exact for integers written out in full (float() would round 2**60 + 1).
            number: int | float = int(raw) if raw.lstrip("+-").isdigit() else int(value)
        else:
            number = value
        return self.check(number, shown_as=text)

    def check(self, value: int | float, *, shown_as: object = None) -> int | float:
        """``value`` itself when it is in range (and whole, for integer bounds); else
        :class:`InputError`. ``shown_as`` is what the message quotes (default: ``value``)."""
        quoted = value if shown_as is None else shown_as
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self._error(quoted)
        if isinstance(value, float) and not math.isfinite(value):
            raise self._error(quoted)
        if self.integer and not float(value).is_integer():
            raise self._error(quoted)
        above_low = value > self.low if self.low_open else value >= self.low
        if not (above_low and value <= self.high):
            raise self._error(quoted)
        return int(value) if self.integer else float(value)

    def clamp(self, value: float) -> int | float:
        """``value`` moved into the range (for sliders whose data-driven maximum may exceed it)."""
        low = self.low if not self.low_open else math.nextafter(self.low, math.inf)
        result = min(max(value, low), self.high)
        return int(result) if self.integer else float(result)

    def _error(self, got: object) -> InputError:
        return InputError(self.field, f"must be {self.describe()}, got {shown(got)}")


def _figure(x: float) -> str:
    """A bound's endpoint for a message: ``1,000,000``, ``0.5``, ``1e+30``."""
    if float(x).is_integer() and abs(x) < 1e15:
        return f"{int(x):,}"
    return f"{x:g}"

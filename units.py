"""Units and integer arithmetic shared by every library: byte units, in one place: binary (KiB, MiB, GiB, TiB; powers of 2**10) and decimal
(KB, MB, GB, TB; powers of 10**3).

Vendors quote HBM in decimal GB; cache arithmetic lands on binary GiB. Mixing the two is a
7 % error at the GiB scale, so every formatted amount carries its unit label and a formatted
string never mixes systems. :func:`both` gives the two side by side.
"""

from __future__ import annotations

from enum import StrEnum
from fractions import Fraction
from numbers import Real

def cdiv(numerator, denominator):
    """Ceiling division ``ceil(numerator / denominator)`` of non-negative ints, exact
    :class:`~fractions.Fraction` s, or NumPy integer arrays (element-wise, broadcasting)."""
    if isinstance(numerator, Fraction) or isinstance(denominator, Fraction):
        return -(-Fraction(numerator) // Fraction(denominator))
    return -(-numerator // denominator)


KiB = 2**10
MiB = 2**20
GiB = 2**30
TiB = 2**40
KB = 10**3
MB = 10**6
GB = 10**9
TB = 10**12


class UnitSystem(StrEnum):
    """Which family of units a formatted amount uses."""

    BINARY = "binary"  # KiB, MiB, GiB, TiB
    DECIMAL = "decimal"  # KB, MB, GB, TB


# Largest first, so formatting picks the biggest unit the amount reaches.
_UNITS: dict[UnitSystem, tuple[tuple[str, int], ...]] = {
    UnitSystem.BINARY: (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB), ("B", 1)),
    UnitSystem.DECIMAL: (("TB", TB), ("GB", GB), ("MB", MB), ("KB", KB), ("B", 1)),
}
UNIT_SIZES: dict[str, int] = {name: size for units in _UNITS.values() for name, size in units}


def to_unit(n_bytes: Real | Fraction, unit: str) -> float:
    """``n_bytes`` expressed in ``unit`` (one of ``B, KiB, MiB, GiB, TiB, KB, MB, GB, TB``)."""
    try:
        size = UNIT_SIZES[unit]
    except KeyError:
        raise ValueError(f"unit: unknown unit {unit!r}; use one of {', '.join(UNIT_SIZES)}") from None
    return float(Fraction(n_bytes) / size)


def best_unit(n_bytes: Real | Fraction, system: UnitSystem | str = UnitSystem.BINARY, *, largest: str | None = None) -> str:
    """The largest unit of ``system`` in which ``n_bytes`` is at least 1 (``"B"`` for small amounts).

    ``largest`` caps the choice (``"GiB"`` keeps 1,000 GiB rather than 0.98 TiB).
    """
    value = abs(Fraction(n_bytes))
    cap = UNIT_SIZES[largest] if largest else None
    for name, size in _UNITS[UnitSystem(system)]:
        if cap is not None and size > cap:
            continue
        if value >= size:
            return name
    return "B"


def format_number(value: float, digits: int = 1) -> str:
    """Thousands separators, at most ``digits`` decimals, trailing zeros dropped: 1,073.7 / 72 / 2.5."""
    text = f"{value:,.{digits}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def format_bytes(
    n_bytes: Real | Fraction,
    system: UnitSystem | str = UnitSystem.BINARY,
    *,
    unit: str | None = None,
    largest: str | None = None,
    digits: int = 1,
) -> str:
    """``n_bytes`` as a labelled string in one unit system, e.g. ``"320 KiB"`` or ``"1,073.7 GB"``.

    ``unit`` forces a unit (it must belong to ``system``); otherwise the largest one reached,
    at most ``largest``.
    """
    system = UnitSystem(system)
    names = {name for name, _ in _UNITS[system]}
    if unit is None:
        unit = best_unit(n_bytes, system, largest=largest)
    elif unit not in names:
        raise ValueError(f"unit: {unit!r} is not a {system.value} unit ({', '.join(sorted(names))})")
    return f"{format_number(to_unit(n_bytes, unit), digits)} {unit}"


# Amounts stop at GiB / GB, as the reference page writes them (1,073.7 GB, not 1.1 TB).
GIGA_UNIT: dict[UnitSystem, str] = {UnitSystem.BINARY: "GiB", UnitSystem.DECIMAL: "GB"}


def format_up_to_giga(n_bytes: Real | Fraction, system: UnitSystem | str = UnitSystem.BINARY) -> str:
    """:func:`format_bytes` in at most GiB / GB: ``"8,000 GiB"`` rather than ``"7.8 TiB"``."""
    system = UnitSystem(system)
    return format_bytes(n_bytes, system, largest=GIGA_UNIT[system])


def both(n_bytes: Real | Fraction, *, digits: int = 1, largest_g: bool = True) -> str:
    """Binary and decimal side by side: ``"1,000 GiB = 1,073.7 GB"`` (capped at GiB/GB unless
    ``largest_g`` is False)."""
    binary = format_bytes(n_bytes, UnitSystem.BINARY, digits=digits,
                          largest=GIGA_UNIT[UnitSystem.BINARY] if largest_g else None)
    decimal = format_bytes(n_bytes, UnitSystem.DECIMAL, digits=digits,
                           largest=GIGA_UNIT[UnitSystem.DECIMAL] if largest_g else None)
    return f"{binary} = {decimal}"

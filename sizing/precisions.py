"""Number formats for the KV cache and for the weights, with bytes per value as exact fractions.

Integer formats (int8, int4, int2) need a scale to map integers back to real values. Here each
group of ``group_size`` consecutive values shares one fp16 scale (symmetric quantisation, as in
group-wise schemes such as KIVI for KV and GPTQ/AWQ for weights), so the cost per value is
``bits / 8 + 2 / group_size`` bytes. ``group_size=None`` drops the scales, as the reference page
does when it quotes 4-bit KV as exactly a quarter of BF16 ("+ a little for scales").
FP8 uses one scale per tensor (per layer), a few bytes in gigabytes: it is counted as zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from glossary import dtype_label
from sizing.errors import SizingError

# Bytes of one scale: fp16, the usual storage type for group scales.
SCALE_BYTES = 2
# Group size used when none is given: 128 values per scale is the GPTQ/AWQ default and a
# common KV-quantisation group (one scale per 128-wide head vector).
DEFAULT_GROUP_SIZE = 128

# name -> (bits per value, needs group scales)
_FORMATS: dict[str, tuple[int, bool]] = {
    "fp32": (32, False),
    "bf16": (16, False),
    "fp16": (16, False),
    "fp8": (8, False),
    "int8": (8, True),
    "int4": (4, True),
    "int2": (2, True),
}
PRECISION_NAMES: tuple[str, ...] = tuple(_FORMATS)

# Weight-only formats, each with its published scale layout (bytes of scale per value, exact):
#   fp8_block  FP8 E4M3 with one fp32 scale per 128 × 128 block (DeepSeek-V3's weight_block_size).
#   mxfp4      OCP microscaling FP4: one E8M0 (1-byte) scale per 32 values (gpt-oss's experts).
#   nvfp4      NVIDIA FP4: one FP8 E4M3 scale per 16 values, plus a per-tensor fp32 (counted as 0).
#   gptq_int4  GPTQ 4-bit: per group of 128, an fp16 scale and a packed 4-bit zero point.
#   awq_int4   AWQ 4-bit: per group of 128, an fp16 scale and a packed 4-bit zero point.
_WEIGHT_FORMATS: dict[str, tuple[int, Fraction]] = {
    "fp8_block": (8, Fraction(4, 128 * 128)),
    "mxfp4": (4, Fraction(1, 32)),
    "nvfp4": (4, Fraction(1, 16)),
    "gptq_int4": (4, Fraction(2, 128) + Fraction(1, 2 * 128)),
    "awq_int4": (4, Fraction(2, 128) + Fraction(1, 2 * 128)),
}
WEIGHT_FORMAT_NAMES: tuple[str, ...] = (*PRECISION_NAMES, *_WEIGHT_FORMATS)


@dataclass(frozen=True, kw_only=True)
class Precision:
    """A storage format. ``group_size`` is the number of values per fp16 scale (None: no scales)."""

    name: str
    bits: int
    group_size: int | None = None
    fixed_scale_bytes: Fraction | None = None  # a named format's own scale layout (overrides group_size)

    @property
    def data_bytes_per_value(self) -> Fraction:
        """Bytes of the value itself, without scales (2 for bf16, 1/2 for int4)."""
        return Fraction(self.bits, 8)

    @property
    def scale_bytes_per_value(self) -> Fraction:
        """Scale bytes amortised over a group (2/128 B for one fp16 scale per 128 values)."""
        if self.fixed_scale_bytes is not None:
            return self.fixed_scale_bytes
        if self.group_size is None:
            return Fraction(0)
        return Fraction(SCALE_BYTES, self.group_size)

    @property
    def bytes_per_value(self) -> Fraction:
        """Total bytes per stored value, exact: data plus amortised scales."""
        return self.data_bytes_per_value + self.scale_bytes_per_value

    @property
    def label(self) -> str:
        """Display name, the one every page and CLI shows (:func:`glossary.dtype_label`):
        ``"BF16"``, ``"FP8 (e4m3)"``, ``"INT4 (g128)"``, ``"INT4 (GPTQ, g128)"``."""
        return dtype_label(self.name, self.group_size)


def get_precision(name: str, *, group_size: int | None = DEFAULT_GROUP_SIZE, field: str = "precision") -> Precision:
    """The :class:`Precision` called ``name``; ``group_size`` applies to integer formats only.

    ``group_size`` None or 0 means no scale bytes. Errors name ``field`` (e.g. ``"kv_dtype"``).
    """
    weights = "kv" not in field  # weight-only formats are not offered for the KV cache
    if weights and isinstance(name, str) and name.lower() in _WEIGHT_FORMATS:
        bits, scales = _WEIGHT_FORMATS[name.lower()]
        return Precision(name=name.lower(), bits=bits, fixed_scale_bytes=scales)
    if not isinstance(name, str) or name.lower() not in _FORMATS:
        names = WEIGHT_FORMAT_NAMES if weights else PRECISION_NAMES
        raise SizingError(field, f"unknown precision {name!r:.40}; choose one of {', '.join(names)}")
    key = name.lower()
    bits, scaled = _FORMATS[key]
    if not scaled or not group_size:
        return Precision(name=key, bits=bits, group_size=None)
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise SizingError(f"{field}_group_size", f"must be a positive integer, got {group_size!r}")
    return Precision(name=key, bits=bits, group_size=group_size)

"""Errors raised by the sizing library.

Every error is a :class:`ValueError` subclass that names the offending field, so a page can show
the message next to the widget and a CLI can map it to the option that was wrong.
"""

from __future__ import annotations


class SizingError(ValueError):
    """An input the sizer cannot use. ``field`` names it (``"kv_heads"``, ``"context"``, ...)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class ConfigError(SizingError):
    """A Hugging Face ``config.json`` that cannot be read; ``field`` is the JSON key (or ``"config"``)."""

"""Errors raised by the sizing library.

Every error is an :class:`inputs.errors.InputError` (a :class:`ValueError`) that names the
offending field, so a page can show the message next to the widget and a CLI can map it to the
option that was wrong. Errors from the layers below (the GPU catalogue) are plain
:class:`~inputs.errors.InputError` s; catch that to handle both.
"""

from __future__ import annotations

from inputs.errors import InputError


class SizingError(InputError):
    """An input the sizer cannot use. ``field`` names it (``"kv_heads"``, ``"context"``, ...)."""


class ConfigError(SizingError):
    """A Hugging Face ``config.json`` that cannot be read; ``field`` is the JSON key (or ``"config"``)."""


class NoKVRoom(SizingError):
    """The memory profile leaves no room for one KV block. ``field`` names the input that drives
    the term taking the memory; ``measured`` is True when that input is a figure the user gave
    (a KV budget or a measured term), which is then what is wrong, not the deployment."""

    def __init__(self, field: str, message: str, *, measured: bool = False) -> None:
        super().__init__(field, message)
        self.measured = measured

"""The error every input boundary raises: a :class:`ValueError` that names its field."""

from __future__ import annotations

MAX_MESSAGE_CHARS = 240  # an error line stays readable however long the input that caused it
_SHOWN_INPUT_CHARS = 40  # how much of an offending value an error repeats


class InputError(ValueError):
    """An input that cannot be used. ``field`` names it (``"context"``, ``"--block-size"``, ...);
    ``message`` says what is wrong and what is allowed, in under :data:`MAX_MESSAGE_CHARS`."""

    def __init__(self, field: str, message: str) -> None:
        message = clip(message, MAX_MESSAGE_CHARS)
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, marked with an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def shown(value: object) -> str:
    """``repr(value)``, short enough to quote in an error message."""
    return clip(repr(value), _SHOWN_INPUT_CHARS)

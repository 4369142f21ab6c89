"""argparse plumbing shared by every CLI: bounded option types, one-line errors, exit status 2.

Each CLI builds its parser from :class:`OneLineParser`, gives numeric options
``type=arg_type(SOME_BOUND)`` (the bound's range is also what ``--help`` shows, through
:func:`help_range`), and wraps its body in :func:`run_cli`, so a bad value anywhere — argparse,
the library's own checks, an unreadable file — ends as one line ``prog: error: argument --x: ...``
and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from inputs.bounds import Bound
from inputs.errors import MAX_MESSAGE_CHARS, InputError, clip, shown

EXIT_USAGE = 2  # argparse's own status for bad arguments


class UsageError(Exception):
    """A bad command line; the message is the one line printed after ``prog: error:``."""


class OneLineParser(argparse.ArgumentParser):
    """argparse whose errors are one short line (no usage block), raised as :class:`UsageError`."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(clip(" ".join(message.split()), MAX_MESSAGE_CHARS))


MAX_LIST_CHARS = 4096  # a list option longer than this is not a list of sizes


def token_list(bound: Bound) -> Callable[[str], tuple[int, ...]]:
    """An argparse ``type``: comma-separated whole numbers with an optional k (x 1024), each in
    ``bound``: ``1k,32k`` -> (1024, 32768)."""

    def parse(text: str) -> tuple[int, ...]:
        if len(text) > MAX_LIST_CHARS:
            raise argparse.ArgumentTypeError(f"expected whole numbers such as 1k,32k, got {len(text)} characters")
        out = []
        for part in text.split(","):
            part = part.strip().lower()
            digits = part.removesuffix("k")
            if not digits.isdigit():
                raise argparse.ArgumentTypeError(f"expected whole numbers such as 1k,32k, got {shown(text)}")
            try:
                out.append(int(bound.check(int(digits) * (1024 if part.endswith("k") else 1), shown_as=part)))
            except InputError as exc:
                raise argparse.ArgumentTypeError(exc.message) from None
        return tuple(out)

    parse.__name__ = bound.field
    return parse


def arg_type(bound: Bound) -> Callable[[str], int | float]:
    """An argparse ``type`` that parses with ``bound`` (argparse prefixes the option's name)."""

    def parse(text: str) -> int | float:
        try:
            return bound.parse(text)
        except InputError as exc:
            raise argparse.ArgumentTypeError(exc.message) from None

    parse.__name__ = bound.field  # argparse names the type in some messages
    parse.bound = bound  # so --help text and the fuzz tests can read each option's range
    return parse


def choice(options: Sequence[str]) -> Callable[[str], str]:
    """An argparse ``type`` for a case-insensitive choice among ``options``."""

    def parse(text: str) -> str:
        key = text.lower()
        if key not in options:
            raise argparse.ArgumentTypeError(f"unknown value {shown(text)}; choose one of {', '.join(options)}")
        return key

    parse.__name__ = "choice"
    return parse


def help_range(bound: Bound) -> str:
    """The range as ``--help`` text: ``"1 to 10,000,000 tokens"``."""
    return bound.describe().removeprefix("a whole number ").removeprefix("a number ").removeprefix("from ")


def run_cli(prog: str, body: Callable[[], int], *,
            option_for_field: Callable[[str], str] | None = None) -> int:
    """Run ``body``; bad input of any kind becomes one line on stderr and :data:`EXIT_USAGE`.

    ``option_for_field`` maps a library field (``"kv_heads"``) to the option that set it
    (``"--kv-heads"``), so an error raised deep in a library still names what the user typed.
    """
    try:
        return body()
    except UsageError as exc:
        return fail(prog, str(exc))
    except InputError as exc:
        option = (option_for_field or _default_option)(exc.field)
        return fail(prog, f"argument {option}: {exc.message}")


def fail(prog: str, message: str) -> int:
    """Print ``prog: error: message`` (one line, clipped) and return :data:`EXIT_USAGE`."""
    line = clip(" ".join(str(message).split()), MAX_MESSAGE_CHARS)
    print(f"{prog}: error: {line}", file=sys.stderr)
    return EXIT_USAGE


def _default_option(field: str) -> str:
    return field if field.startswith("-") else f"--{field.replace('_', '-')}"

"""Every bounded option of every CLI, given hostile and out-of-range text: exit status 2 with one
short line naming the option, or (for a value that is in fact valid) strict JSON — never a
traceback, NaN or Infinity.

The options and their ranges are read from the parsers themselves (``inputs.cli.arg_type``
leaves each option's :class:`~inputs.bounds.Bound` on its type), so a new option is fuzzed
without being listed here.
"""

from __future__ import annotations

import argparse
import contextlib
import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz.hostile import HOSTILE_TEXT, assert_one_line_naming, beyond, strict_json
from inputs.bounds import Bound


@dataclass(frozen=True)
class Surface:
    """One CLI entry: how to build its parser, run it, and a cheap valid base command."""

    name: str
    module: str
    base: tuple[str, ...]  # options every run of this surface gets (e.g. --json)
    subcommand: str | None = None

    def load(self) -> tuple[argparse.ArgumentParser, Callable[[list[str]], int]]:
        import importlib

        module = importlib.import_module(self.module)
        return module.build_parser(), module.main


SURFACES = (
    Surface("sizing", "sizing.cli", ("--json",)),
    Surface("sizing engine", "sizing.cli", ("--json", "--engine", "vllm", "--model", "llama-3.1-8b", "--gpu", "h200",
                                            "--context", "8192")),
    Surface("planner", "planner.cli", ("--json",)),
    Surface("simulation snapshot", "simulation.cli", ("--json",), subcommand="snapshot"),
    Surface("simulation timeline", "simulation.cli", ("--json", "--rate", "5"), subcommand="timeline"),
    Surface("kernels.bench", "kernels.bench.cli", ()),
)
# Small workloads where the fuzzed option leaves the size to the base, so accepted values run fast.
SMALL_WORKLOAD = {"simulation snapshot": ("--n", "300"), "simulation timeline": ("--n", "60")}
NO_GPU = "no CUDA GPU"


def _bounded_options(parser: argparse.ArgumentParser, subcommand: str | None) -> dict[str, Bound]:
    if subcommand is not None:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[subcommand]
    return {action.option_strings[-1]: action.type.bound for action in parser._actions
            if action.option_strings and getattr(action.type, "bound", None) is not None}


def _run(main: Callable[[list[str]], int], argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # --help or argparse's own exit
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue(), err.getvalue()


def _argv(surface: Surface, option: str, value: str) -> list[str]:
    argv = [surface.subcommand] if surface.subcommand else []
    small = [] if option in SMALL_WORKLOAD.get(surface.name, ()) else list(SMALL_WORKLOAD.get(surface.name, ()))
    return argv + [*small, *surface.base, f"{option}={value}"]


def _check(surface: Surface, main, option: str, value: str, *, refused_here: bool = True) -> int:
    """Run one case and check its outcome; returns the exit status. ``refused_here``: the value
    is invalid for ``option`` itself, so a refusal must name it (a valid value may instead be
    refused in combination, naming whichever option is wrong)."""
    code, out, err = _run(main, _argv(surface, option, value))
    assert code in (0, 2), (option, value, code, err[-600:])
    if code == 2:
        assert out == ""
        names = (option,) if refused_here else ("argument --",)
        names += (NO_GPU,) if surface.name == "kernels.bench" else ()
        assert_one_line_naming(err, *names)
    elif "--json" in surface.base:
        strict_json(out)
    return code


def _cases() -> Iterator[tuple[Surface, str, str]]:
    for surface in SURFACES:
        parser, _ = surface.load()
        for option, bound in _bounded_options(parser, surface.subcommand).items():
            for value in (*HOSTILE_TEXT, *beyond(bound)):
                yield surface, option, value


CASES = list(_cases())


def test_every_surface_has_bounded_options():
    counts = {s.name: len(_bounded_options(*[s.load()[0], s.subcommand])) for s in SURFACES}
    assert all(n >= 2 for n in counts.values()), counts  # kernels.bench: --block-size and --rep-ms


@pytest.mark.parametrize("surface_name", [s.name for s in SURFACES])
def test_hostile_and_out_of_range_values_are_refused_in_one_line(surface_name):
    surface = next(s for s in SURFACES if s.name == surface_name)
    _, main = surface.load()
    cases = [(o, v) for s, o, v in CASES if s is surface]
    assert cases
    for option, value in cases:
        # 1e-400 underflows to 0, which a range starting at 0 rightly accepts.
        assert _check(surface, main, option, value) == 2 or value == "1e-400", (option, value)


_SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("surface_name", [s.name for s in SURFACES])
@_SETTINGS
@given(data=st.data())
def test_random_values_never_crash(surface_name, data):
    surface = next(s for s in SURFACES if s.name == surface_name)
    parser, main = surface.load()
    options = _bounded_options(parser, surface.subcommand)
    option = data.draw(st.sampled_from(sorted(options)), label="option")
    bound = options[option]
    in_range = (st.integers(int(bound.low), int(min(bound.high, bound.low + 4096))) if bound.integer
                else st.floats(bound.low, min(bound.high, bound.low + 1e4), exclude_min=bound.low_open))
    value = data.draw(st.one_of(
        in_range.map(str),
        st.floats(allow_nan=True, allow_infinity=True).map(repr),
        st.integers(-(10**30), 10**30).map(str),
        st.text(max_size=30),
    ), label="value")
    _check(surface, main, option, value.replace("\x00", ""), refused_here=False)

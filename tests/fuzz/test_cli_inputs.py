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
    Surface("simulation prefix", "simulation.cli", ("--json", "--user-tokens", "10"), subcommand="prefix"),
    Surface("kernels.bench", "kernels.bench.cli", ()),
    Surface("planner cluster", "planner.cluster.cli", ("--json",)),
    Surface("planner bench-like", "planner.bench_like", ("--json", "--model", "llama-3.1-8b", "--gpu", "h100-sxm")),
)
# Small workloads where the fuzzed option leaves the size to the base, so accepted values run fast.
SMALL_WORKLOAD = {"simulation snapshot": ("--n", "300"), "simulation timeline": ("--n", "60"),
                  "simulation prefix": ("--requests", "30")}
NO_GPU = {"kernels.bench": "no CUDA GPU"}  # what a valid run says on a machine without one


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
        names += (NO_GPU[surface.name],) if surface.name in NO_GPU else ()
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
    # In-range draws stay near the low end: each one runs the command, and a large valid --n is a
    # long valid run (the joint-budget tests cover the top of each range).
    in_range = (st.integers(int(bound.low), int(min(bound.high, bound.low + 1024))) if bound.integer
                else st.floats(bound.low, min(bound.high, bound.low + 1e4), exclude_min=bound.low_open))
    value = data.draw(st.one_of(
        in_range.map(str),
        st.floats(allow_nan=True, allow_infinity=True).map(repr),
        st.integers(-(10**30), 10**30).map(str),
        st.text(max_size=30),
    ), label="value")
    _check(surface, main, option, value.replace("\x00", ""), refused_here=False)


# ---- the sizer's text options: model ids, layouts, recurrent-state sizes, weight formats -----
# Options whose value is text rather than a bounded number, each with values it must refuse
# (naming the option) and values it must accept. The Hub is pointed at a port nothing listens
# on, so no case reaches the network and a well-formed unknown repo id is refused as unreachable.
UNREACHABLE_HUB = "http://127.0.0.1:1"
MANUAL = ("--q-heads", "8", "--kv-heads", "8", "--head-dim", "64", "--params", "1B")
TEXT_OPTIONS = {
    "--model-id": (("qwen3-8b", "Qwen/Qwen3-8B", "google/gemma-3-27b-pt"),
                   (*HOSTILE_TEXT, "https://huggingface.co/Qwen/Qwen3-8B", "../../etc/passwd", "Qwen/../x", "a/b/c",
                    "org/x?y=1", "org/" + "x" * 300, "someorg/not-shipped", "file:///etc/passwd", "C:\\x\\y")),
    "--layout": (("4 full", "2 full + 2 sliding(128)", "1 full : 1 sliding(4,096)", "4 × chunked(8192)"),
                 (*HOSTILE_TEXT, "4 foo", "4 sliding", "4 full(5)", "2 full + 2 mla", "1 full : 1 full + 1 full",
                  "0 full", "99999 full", "4 sliding(1e308)", "4 sliding(-1)", "4 mlp", "x" * 5000, "4 full" * 200)),
    "--weight-dtype": (("auto", "bf16", "fp8", "int4", "mxfp4", "nvfp4", "fp8_block", "gptq_int4", "awq_int4"),
                       (*HOSTILE_TEXT, "int3", "fp8;rm -rf", "BF16 ")),
}
# Layouts with --layers 4 so that a ":" period is defined; --state with a layout that needs it.
TEXT_BASE = {"--model-id": (), "--layout": (*MANUAL, "--layers", "4"), "--weight-dtype": ("--model", "llama-3.1-8b")}
STATE_BASE = ("--layout", "1 full : 1 mamba", "--layers", "4", *MANUAL)
STATE_GOOD = ("kernel=4 channels=64 heads=8 per_head=128", "kernel=4,channels=64,heads=8,per_head=128,groups=1,"
              "group_channels=32,dtype=fp32")
STATE_BAD = (*HOSTILE_TEXT, "kernel=4", "kernel=nan channels=64 heads=8 per_head=128",
             "kernel=4 channels=64 heads=8 per_head=128 dtype=fp64", "kernel=4 kernel=4 channels=1 heads=1 per_head=1",
             "kernel=4 channels=1e308 heads=8 per_head=1", "x" * 5000, "=", "kernel=")


@pytest.fixture
def no_hub(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_ENDPOINT", UNREACHABLE_HUB)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))


def _sizing(argv: list[str]) -> tuple[int, str, str]:
    from sizing.cli import main

    return _run(main, ["--json", *argv])


def _assert_text_case(base: tuple[str, ...], option: str, value: str, *, valid: bool | None) -> None:
    code, out, err = _sizing([*base, f"{option}={value}"])
    assert code in (0, 2), (option, value, code, err[-600:])
    if valid is not None:
        assert (code == 0) is valid, (option, value, err[-300:])
    if code == 2:
        assert out == ""
        assert_one_line_naming(err, option if valid is False else "argument --")
    else:
        strict_json(out)


@pytest.mark.parametrize("option", sorted(TEXT_OPTIONS))
def test_text_options_refuse_hostile_values_in_one_line(no_hub, option):
    good, bad = TEXT_OPTIONS[option]
    for value in good:
        _assert_text_case(TEXT_BASE[option], option, value, valid=True)
    for value in bad:
        _assert_text_case(TEXT_BASE[option], option, value, valid=False)


def test_state_option_refuses_hostile_values_in_one_line(no_hub):
    for value in STATE_GOOD:
        _assert_text_case(STATE_BASE, "--state", value, valid=True)
    for value in STATE_BAD:
        _assert_text_case(STATE_BASE, "--state", value, valid=False)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(option=st.sampled_from([*sorted(TEXT_OPTIONS), "--state"]), value=st.text(max_size=60))
def test_random_text_options_never_crash(no_hub, option, value):
    base = STATE_BASE if option == "--state" else TEXT_BASE[option]
    _assert_text_case(base, option, value.replace("\x00", ""), valid=None)


@pytest.mark.parametrize("text", [*HOSTILE_TEXT, "qwen a3b", "../../etc/passwd", "x" * 100_000, "\u202e", "a " * 500])
def test_models_search_prints_a_json_list_for_any_text(text):
    from sizing.cli import models_main

    code, out, err = _run(models_main, ["--json", f"--search={text}"])
    assert code == 0, err[-300:]
    records = strict_json(out)
    assert isinstance(records, list)
    if text == "qwen a3b":  # every word must match: the Qwen models with 3 B active, and only they
        assert records and all("qwen" in r["id"] for r in records)

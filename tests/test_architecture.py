"""The layout's rules, checked from the code itself (docs/ARCHITECTURE.md states them)."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

from support.paths import ROOT

# Which project packages each package may import; standard library and third-party modules
# are checked separately (streamlit/plotly only above the libraries).
ALLOWED = {
    "inputs": set(),
    "units": set(),
    "glossary": set(),  # display names: a leaf, like units
    "hardware": {"inputs", "units"},
    "sizing": {"hardware", "inputs", "units", "glossary"},
    "simulation": {"inputs", "units", "glossary"},
    "kernels": {"hardware", "inputs", "units"},
    "planner": {"sizing", "simulation", "kernels", "hardware", "inputs", "units", "glossary"},
    "ui": {"sizing", "simulation", "kernels", "planner", "hardware", "inputs", "units", "glossary"},
    "pages": {"ui", "sizing", "simulation", "kernels", "planner", "hardware", "inputs", "units", "glossary"},
}
PROJECT = set(ALLOWED) | {"scripts", "benchmarks", "tests", "support"}
LIBRARIES = ("inputs", "units", "glossary", "hardware", "sizing", "simulation", "kernels", "planner")
MAX_MODULE_LINES = 600
MAX_PAGE_LINES = 300


def _code_files() -> list[Path]:
    files = [ROOT / "app.py", ROOT / "units.py", ROOT / "glossary.py"]
    for package in ALLOWED:
        if (ROOT / package).is_dir():
            files += sorted((ROOT / package).rglob("*.py"))
    files += sorted((ROOT / "scripts").rglob("*.py")) + sorted((ROOT / "benchmarks").rglob("*.py"))
    return files


def _package(path: Path) -> str:
    relative = path.relative_to(ROOT)
    return relative.parts[0].removesuffix(".py")


def _imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


CODE_FILES = _code_files()


@pytest.mark.parametrize("path", [p for p in CODE_FILES if _package(p) in ALLOWED], ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_down_the_layers(path):
    package = _package(path)
    project_imports = (_imported_roots(path) & PROJECT) - {package}
    assert project_imports <= ALLOWED[package], f"{package} may not import {project_imports - ALLOWED[package]}"
    if package in LIBRARIES:
        assert not _imported_roots(path) & {"streamlit", "plotly"}, "libraries never import streamlit or plotly"


@pytest.mark.parametrize("path", CODE_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_modules_stay_small(path):
    lines = len(path.read_text().splitlines())
    limit = MAX_PAGE_LINES if _package(path) == "pages" and not path.name.startswith("_") else MAX_MODULE_LINES
    assert lines <= limit, f"{lines} lines (at most {limit})"


_HISTORY = re.compile(r"\b[Ii]ssue \d+|\bsession \d+|DESIGN\.md|\.\./shared|\bshared/data\b")


def _comments_matching(path: Path, pattern: re.Pattern) -> list[str]:
    """The comments and strings (docstrings included) of ``path`` that ``pattern`` finds, cut short."""
    source = path.read_text()
    texts = [tok.string for tok in tokenize.generate_tokens(io.StringIO(source).readline)
             if tok.type in (tokenize.COMMENT, tokenize.STRING)]
    return [t.strip()[:80] for t in texts if pattern.search(t)]


@pytest.mark.parametrize("path", CODE_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_comments_say_why_not_where_from(path):
    """No comment or docstring names an issue, a session or a file outside the repository."""
    offenders = _comments_matching(path, _HISTORY)
    assert not offenders, offenders


@pytest.mark.parametrize("path", [p for p in CODE_FILES if _package(p) not in ("scripts", "benchmarks")],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_no_sys_path_edits_in_the_app_or_libraries(path):
    assert "sys.path" not in path.read_text()


# kernels/ by job (docs/ARCHITECTURE.md, "kernels/ by job"): each module lives in the subpackage of
# its job, or is one of the few shared modules at the top.
KERNEL_SUBPACKAGES = ("decode", "prefill", "cache", "reference", "layer", "bench", "multi_gpu")
KERNEL_TOP_MODULES = {"__init__", "runtime", "tolerances", "occupancy", "theory", "attention_span"}
_SHARED = {"runtime", "tolerances", "occupancy", "attention_span"}
# Which parts of kernels/ each part may import (its own part always): references and pools stay
# below every kernel, so a kernel's test can trust them; the cost models stand alone.
KERNELS_MAY_IMPORT = {
    "runtime": set(), "tolerances": set(), "occupancy": set(), "theory": set(), "attention_span": set(),
    "cache": _SHARED,
    "reference": _SHARED | {"cache"},
    "decode": _SHARED | {"cache", "reference"},
    "prefill": _SHARED | {"cache", "reference"},
    # A layer's kernels around attention stand beside the attention kernels, importing none.
    "layer": _SHARED,
    "bench": _SHARED | {"theory", "cache", "reference", "decode", "prefill"},
    # The multi-GPU harness: the decode entry on sharded pools, and the harness's records and timing.
    "multi_gpu": _SHARED | {"cache", "reference", "decode", "bench"},
}
KERNEL_FILES = sorted((ROOT / "kernels").rglob("*.py"))


def _kernel_part(parts: tuple[str, ...]) -> str:
    """The part of kernels/ that a module path (``("decode", "paged")`` or ``("theory",)``) is in."""
    return parts[0].removesuffix(".py")


def test_kernels_are_laid_out_by_job():
    for name in KERNEL_SUBPACKAGES:
        assert (ROOT / "kernels" / name / "__init__.py").is_file(), f"kernels/{name}/ is a package"
    top = {p.stem for p in (ROOT / "kernels").glob("*.py")}
    assert top == KERNEL_TOP_MODULES, f"modules at the top of kernels/ beyond the shared ones: {top - KERNEL_TOP_MODULES}"
    folders = {p.name for p in (ROOT / "kernels").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == set(KERNEL_SUBPACKAGES), f"kernels/ holds folders {folders}"
    for path in KERNEL_FILES:
        parts = path.relative_to(ROOT / "kernels").parts
        assert len(parts) <= 2, f"{path.relative_to(ROOT)}: one level of subpackages"


def _kernel_imports(path: Path) -> set[str]:
    """The parts of kernels/ that ``path`` imports, lazily or not."""
    tree = ast.parse(path.read_text(), filename=str(path))
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.add(node.module)
            if node.module == "kernels":
                modules |= {f"kernels.{alias.name}" for alias in node.names}
    return {_kernel_part(tuple(m.split(".")[1:])) for m in modules if m.startswith("kernels.")}


@pytest.mark.parametrize("path", KERNEL_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_inside_kernels_point_down(path):
    part = _kernel_part(path.relative_to(ROOT / "kernels").parts)
    if part == "__init__":
        return
    imported = _kernel_imports(path) - {part}
    assert imported <= KERNELS_MAY_IMPORT[part], f"kernels/{part} may not import {imported - KERNELS_MAY_IMPORT[part]}"


_TUNING_ROUND = re.compile(r"\brounds? \d+", re.IGNORECASE)
_ROUND_FILES = KERNEL_FILES + sorted((ROOT / "scripts").rglob("*.py")) + sorted((ROOT / "benchmarks").glob("*.py"))


@pytest.mark.parametrize("path", _ROUND_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_comments_name_no_tuning_round(path):
    """Code says what was measured and why it decides; which round measured it is the notes' job
    (docs/kernels/)."""
    offenders = _comments_matching(path, _TUNING_ROUND)
    assert not offenders, offenders


# The kernel notes are kept by state in docs/kernels/; the dated logs behind them are an archive
# that code never points at (a comment states the fact it relies on, or points at the state notes).
# Spelled in pieces so that this file does not name them either (a plain grep finds nothing).
_NOTES_LOG_NAMES = ("NOTES-" + "decode", "NOTES-" + "prefill", "docs/kernels/" + "archive")
_NOTES_SCAN_DIRS = ("kernels", "scripts", "benchmarks", "ui", "pages", "tests")


def test_no_code_cites_the_notes_logs():
    this = Path(__file__).resolve()
    offenders = []
    for folder in _NOTES_SCAN_DIRS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.resolve() == this:
                continue
            text = path.read_text()
            offenders += [f"{path.relative_to(ROOT)}: {name}" for name in _NOTES_LOG_NAMES if name in text]
    assert not offenders, offenders


@pytest.mark.parametrize("name", ["DECODE.md", "PREFILL.md"])
def test_the_kernel_state_notes_exist_and_stay_short(name):
    path = ROOT / "docs" / "kernels" / name
    assert path.is_file(), f"{path.relative_to(ROOT)} is missing"
    lines = len(path.read_text().splitlines())
    assert lines <= 220, f"{path.relative_to(ROOT)} has {lines} lines (at most 220)"


# One public entry per job: outside kernels/decode/, code reaches a decode kernel only through
# kernels.decode.api (the kernels' own launchers are for the entry and the kernels' tests).
_DECODE_LAUNCHERS = ("triton_decode", "triton_int4_decode", "rdq_decode", "triton_mla_decode", "gluon_mla_decode")
_APP_AND_LIBRARY_DIRS = ("kernels", "ui", "pages", "planner", "sizing", "simulation", "scripts", "benchmarks")


def test_decode_has_one_public_entry():
    import kernels.decode.api as api

    assert api.__all__ == ["paged_decode_attention", "DecodePlan", "decode_plan", "mla_decode_attention"]
    offenders = []
    for folder in _APP_AND_LIBRARY_DIRS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.parent == ROOT / "kernels" / "decode":
                continue
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kernels.decode"):
                    offenders += [f"{path.relative_to(ROOT)}: {a.name}" for a in node.names if a.name in _DECODE_LAUNCHERS]
    assert not offenders, offenders


def test_capability_checks_have_one_home():
    """Which GPU and Triton features are present is asked in kernels/runtime.py only (the GPU's
    capability, whether Gluon imports); kernel modules read its answers."""
    gluon_probe = re.compile(r"try:[^\n]*\n(?:[ \t]+[^\n]*\n){0,4}?[ \t]+(?:from|import) triton\.experimental")
    offenders = [str(p.relative_to(ROOT)) for p in KERNEL_FILES
                 if p.name != "runtime.py" and ("get_device_capability" in p.read_text()
                                                or gluon_probe.search(p.read_text()))]
    assert not offenders, offenders


def test_tuning_keeps_at_most_three_diagnostic_scripts_on_public_apis():
    scripts = sorted(p for p in (ROOT / "scripts" / "tuning").glob("*.py") if p.name != "__init__.py")
    assert len(scripts) <= 3, [p.name for p in scripts]
    for path in scripts:
        tree = ast.parse(path.read_text(), filename=str(path))
        private = [a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                   and (node.module or "").startswith("kernels") for a in node.names if a.name.startswith("_")]
        assert not private, f"{path.relative_to(ROOT)} imports private names {private}"

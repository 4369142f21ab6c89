"""Hostile files given to every CLI path option: refused with exit status 2 and one short line,
within a bounded memory (peak RSS) and time — endless streams included.

Content hostility (not JSON, nesting 10⁵ deep, NaN literals, non-UTF-8, ...) runs in-process;
the unbounded sources (``/dev/zero``, a FIFO fed forever, a 109 MB file) run as real processes
so their peak resident memory can be measured.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import threading
import time

import pytest

from fuzz.hostile import (HOSTILE_CSV_FILES, HOSTILE_JSON_FILES, MAX_CLI_RSS_BYTES, assert_one_line_naming,
                          strict_json)
from support.paths import ROOT

# (surface, argv before the path, the option that takes the path, which corpus it reads)
PATH_OPTIONS = (
    ("sizing", ["-m", "sizing", "--json"], "--config", HOSTILE_JSON_FILES),
    ("planner", ["-m", "planner", "--json", "--bandwidth-source", "measured"], "--bench-json", HOSTILE_JSON_FILES),
    ("simulation", ["-m", "simulation", "snapshot", "--json"], "--trace", HOSTILE_CSV_FILES),
)
MAX_SECONDS = 30  # a refusal of an endless stream must not wait for the stream to end


def _in_process(argv: list[str]) -> tuple[int, str, str]:
    import importlib

    module = importlib.import_module({"sizing": "sizing.cli", "planner": "planner.cli",
                                      "simulation": "simulation.cli"}[argv[1]])
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = module.main(argv[2:])
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("surface, prefix, option, corpus", PATH_OPTIONS, ids=[p[0] for p in PATH_OPTIONS])
def test_hostile_content_is_refused_in_one_line(tmp_path, surface, prefix, option, corpus):
    for name, content in corpus.items():
        path = tmp_path / name
        path.write_bytes(content)
        code, out, err = _in_process([*prefix, option, str(path)])
        if code == 0:  # e.g. a BOM + CRLF CSV is a valid trace: its JSON must be strict
            strict_json(out)
            continue
        assert code == 2, (name, code, err[-400:])
        assert out == ""
        assert_one_line_naming(err, option)


def _fed_forever(path: str, stop: threading.Event) -> None:
    """Write zeros into the FIFO at ``path`` until the reader goes away."""
    with contextlib.suppress(OSError), open(path, "wb") as fifo:
        chunk = b"0" * 65536
        while not stop.is_set():
            fifo.write(chunk)


# Runs the CLI as its child and prints the child's peak RSS (KiB). A small wrapper is needed:
# a child forked straight from pytest (torch loaded) would count pytest's pages in its peak.
_RSS_WRAPPER = """
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(done.returncode)
"""


def _peak_rss_run(argv: list[str]) -> tuple[int, str, int, float]:
    """Run ``python argv`` from the project root; (exit code, stderr, peak RSS bytes, seconds)."""
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", _RSS_WRAPPER, sys.executable, *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=MAX_SECONDS,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    rss_kib = int(done.stdout.strip().splitlines()[-1])
    return done.returncode, done.stderr, rss_kib * 1024, time.monotonic() - start


@pytest.fixture
def endless_sources(tmp_path):
    """/dev/zero, a FIFO fed forever, and a 109 MB file (sparse: zeros)."""
    fifo = tmp_path / "endless.fifo"
    os.mkfifo(fifo)
    stop = threading.Event()
    writer = threading.Thread(target=_fed_forever, args=(str(fifo), stop), daemon=True)
    writer.start()
    big = tmp_path / "big.csv"
    with open(big, "wb") as f:
        f.truncate(109 * 10**6)
    yield {"/dev/zero": "/dev/zero", "fifo": str(fifo), "109 MB": str(big)}
    stop.set()
    with contextlib.suppress(OSError):  # unblock the writer if nothing ever opened the FIFO
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))


@pytest.mark.parametrize("surface, prefix, option, corpus", PATH_OPTIONS, ids=[p[0] for p in PATH_OPTIONS])
def test_endless_and_huge_files_cost_bounded_memory(endless_sources, surface, prefix, option, corpus):
    for label, path in endless_sources.items():
        code, stderr, rss, seconds = _peak_rss_run([*prefix, option, path])
        assert code == 2, (label, code, stderr[-400:])
        assert_one_line_naming(stderr, option)
        assert rss <= MAX_CLI_RSS_BYTES, f"{label}: peak RSS {rss / 2**20:.0f} MiB"
        assert seconds < MAX_SECONDS

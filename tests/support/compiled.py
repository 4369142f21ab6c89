"""Compile Gluon kernels for sm_90 in a child process, from a suite that runs under the Triton
interpreter (whose objects Gluon cannot compile)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from support.paths import ROOT


def rows_from_child(script: str, *args: str) -> list[dict]:
    """Run ``script`` (Python source that prints its rows as one JSON line last) with
    ``TRITON_INTERPRET=0`` and ``args`` as ``sys.argv[1:]``; its rows."""
    env = {**os.environ, "TRITON_INTERPRET": "0", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])

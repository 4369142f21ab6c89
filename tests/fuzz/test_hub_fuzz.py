"""Random lies from a Hub endpoint (headers, statuses, bodies, timing), with a fixed seed: every
fetch ends within 10 s as a sized model or one refusal line on ``model_id``, and nothing is
written outside the cache folder."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

from fuzz.hostile import MAX_ERROR_CHARS
from sizing.catalogue import get_entry
from sizing.errors import SizingError
from sizing.hub import fetch_hub_model
from support.hub_server import COMMIT, Hostile, HubServer

SEED = 20260107
CASES = 16
TIMEOUT_S = 1.0  # the fetch's deadline here (production: 10 s)
MAX_WALL_S = 10.0
QWEN = get_entry("qwen3-8b").config_bytes
FILES = ("config.json", "model.safetensors.index.json")


def _choices(world: Path, other: str) -> dict[str, list]:
    """What each part of an answer may be; None in a header list drops that header."""
    return {
        "ETag": ['"' + "a" * 64 + '"', 'W/"abc123"', "abc-1.2_3", f'"{world}/secret/config.json"', '"../../escaped"', '"a/b"',
                 '"a\\\\b"', '"..."', '"x\x00y"', '""', "x" * 300, None],
        "X-Repo-Commit": [COMMIT, COMMIT.upper(), f"{world}/made", "../..", "0" * 39, COMMIT + "/x", "", None],
        "Content-Length": [str(len(QWEN)), "abc", "-5", "9" * 20, "1e3", "0", None],
        "status": [200, 200, 200, 200, 200, 301, 307, 404, 429, 500, 206, 418],
        "location": [None, None, None, None, None, "{self}", f"{other}/fuzz/x/resolve/main/config.json", "/fuzz/elsewhere",
                     "javascript:alert(1)", "http://[::1", ""],
        "body": ["file", "file", "file", "file", "endless", "gzip", "short", "trickle", "stall"],
        "methods": [frozenset({"HEAD", "GET"}), frozenset({"GET"}), frozenset({"HEAD"})],
    }


def _lie(rng: random.Random, choices: dict[str, list]) -> Hostile:
    headers = tuple((name, rng.choice(choices[name])) for name in ("ETag", "X-Repo-Commit", "Content-Length")
                    if rng.random() < 0.3)
    body = rng.choice(choices["body"])
    return Hostile(status=rng.choice(choices["status"]), headers=headers, location=rng.choice(choices["location"]),
                   endless=body == "endless", gzip_bytes=(16 << 20) if body == "gzip" else 0,
                   body=b"{" if body == "short" else None, trickle_s=0.05 if body == "trickle" else 0.0,
                   stall_s=30.0 if body == "stall" else 0.0, methods=rng.choice(choices["methods"]))


def _tree(root: Path, skip: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.lstat().st_size for p in root.rglob("*")
            if p != skip and skip not in p.parents}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz-world")
    (root / "secret").mkdir()
    (root / "secret" / "config.json").write_bytes(get_entry("llama-3.1-70b").config_bytes)
    return root


def test_random_lies_end_on_time_as_a_model_or_one_line(world):
    rng = random.Random(SEED)
    with HubServer({("fuzz/x", "config.json"): get_entry("llama-3.1-70b").config_bytes}) as other:
        choices = _choices(world, other.endpoint)
        files, hostile = {}, {}
        for case in range(CASES):
            repo = f"fuzz/case-{case:02d}"
            files[(repo, "config.json")] = QWEN
            for filename in FILES:
                if filename == "config.json" or rng.random() < 0.3:
                    hostile[(repo, filename)] = _lie(rng, choices)
        with HubServer(files, hostile=hostile) as hub:
            for case in range(CASES):
                repo = f"fuzz/case-{case:02d}"
                cache = world / f"cache-{case:02d}"
                before = _tree(world, skip=cache)
                start = time.monotonic()
                try:
                    model = fetch_hub_model(repo, endpoint=hub.endpoint, cache_dir=str(cache), timeout=TIMEOUT_S)
                except SizingError as exc:
                    assert exc.field == "model_id", (repo, exc)
                    assert "\n" not in exc.message and len(exc.message) < MAX_ERROR_CHARS, (repo, exc.message)
                else:  # an answer that passed every check is the served config, never a file on disk
                    assert model.source == "hub" and model.shape.layers == 36, (repo, model)
                elapsed = time.monotonic() - start
                assert elapsed < MAX_WALL_S, (repo, hostile.get((repo, "config.json")), elapsed)
                assert _tree(world, skip=cache) == before, repo
                for path in cache.rglob("*") if cache.exists() else ():
                    assert os.path.realpath(path).startswith(os.path.realpath(cache)), (repo, path)
        assert other.requests == []

"""A Hub endpoint that lies (a mirror or proxy the user does not control), against the real
client path: nothing lands outside the cache folder, no local file is read as the model, each
lie ends within the deadline with its own one-line refusal on ``model_id``, memory stays bounded."""

from __future__ import annotations

import os
import re
import time
import tracemalloc
from pathlib import Path

import pytest

from sizing.catalogue import get_entry
from sizing.errors import SizingError
from sizing.hub import fetch_hub_model
from support.hub_server import COMMIT, ENDLESS_LIMIT_BYTES, Hostile, HubServer, gzip_of_zeros

QWEN = get_entry("qwen3-8b").config_bytes  # 36 layers: what the endpoint serves
SECRET = get_entry("llama-3.1-70b").config_bytes  # 80 layers: a file already on the user's disk
TIMEOUT_S = 1.0  # the tests' deadline (production: 10 s)
SLACK_S = 1.5  # the deadline plus this is "on time": the watchdog, the server's own pauses
BOMB_BYTES = 64 << 20  # decodes to 64 MiB from about 64 KiB
MAX_PEAK_BYTES = 24 << 20  # Python allocations during one fetch: the 5 MB cap and chunks, not the body
CONFIG = "config.json"
INDEX = "model.safetensors.index.json"
GET_ONLY = frozenset({"GET"})


def _hostile(world: Path, other: str) -> dict[str, tuple[str, Hostile, str]]:
    """{repo: (file, lie, expected message)}; ``world`` holds the files a lie may name."""
    own = "/evil/redirect-relative-loop/resolve/main/config.json"
    declared = f"than the {len(QWEN):,} bytes it declared"
    return {
        "evil/etag-absolute": (CONFIG, Hostile(headers=(("ETag", f'"{world}/outside/blob"'),)), "bad ETag header"),
        "evil/etag-dotdot": (CONFIG, Hostile(headers=(("ETag", '"../../../escaped"'),)), "bad ETag header"),
        "evil/etag-existing": (CONFIG, Hostile(headers=(("ETag", f'"{world}/secret/config.json"'),
                                                        ("Content-Length", str(len(SECRET))))), "bad ETag header"),
        "evil/etag-backslash": (CONFIG, Hostile(headers=(("ETag", '"..\\\\x"'),)), "bad ETag header"),
        "evil/etag-missing": (CONFIG, Hostile(headers=(("ETag", None),)), "no ETag header"),
        "evil/commit-path": (CONFIG, Hostile(headers=(("X-Repo-Commit", str(world / "made-200")),)),
                             "bad X-Repo-Commit header"),
        "evil/commit-missing": (CONFIG, Hostile(headers=(("X-Repo-Commit", None),)), "no X-Repo-Commit header"),
        "evil/length-bad": (CONFIG, Hostile(headers=(("Content-Length", "12abc"),)), "bad Content-Length header"),
        "evil/endless": (CONFIG, Hostile(endless=True, methods=GET_ONLY), declared),
        "evil/endless-undeclared": (CONFIG, Hostile(endless=True, headers=(("Content-Length", None),)),
                                    "over the 1,000,000-byte limit"),
        "evil/shorter": (CONFIG, Hostile(body=b"{}", methods=GET_ONLY), "sent 2 bytes of .*not the"),
        "evil/bomb": (CONFIG, Hostile(gzip_bytes=BOMB_BYTES, methods=GET_ONLY), declared),
        "evil/bomb-undeclared": (CONFIG, Hostile(gzip_bytes=BOMB_BYTES, headers=(("Content-Length", None),)),
                                 "over the 1,000,000-byte limit"),
        "evil/trickle": (CONFIG, Hostile(trickle_s=0.05), "too slow .*within 1 s"),
        "evil/trickle-body": (CONFIG, Hostile(trickle_s=0.05, methods=GET_ONLY), "too slow"),
        "evil/stall": (CONFIG, Hostile(stall_s=30, methods=GET_ONLY), "too slow"),
        "evil/stall-head": (CONFIG, Hostile(stall_s=30), "too slow"),
        "evil/redirect-loop": (CONFIG, Hostile(location="{self}"), "redirected .* more than 3 times"),
        "evil/redirect-relative-loop": (CONFIG, Hostile(location=own, status=307), "more than 3 times"),
        # As the Hub redirects a large file to its CDN: the size of what is there, and the place.
        "evil/redirect-off-host": (CONFIG, Hostile(location=f"{other}/evil/x/resolve/main/config.json",
                                                   headers=(("X-Linked-Size", str(len(SECRET))),)), "to another host"),
        "evil/redirect-no-location": (CONFIG, Hostile(status=302, headers=(("Location", None),)), "no Location"),
        "evil/rate-limited": (CONFIG, Hostile(status=429, headers=(("Retry-After", "30"),)),
                              r"rate limiting requests \(HTTP 429, retry after 30 s\)"),
        "evil/rate-limited-date": (CONFIG, Hostile(status=429, headers=(("Retry-After", "9" * 80),)),
                                   r"rate limiting requests \(HTTP 429\)"),
        "evil/teapot": (CONFIG, Hostile(status=418), "HTTP 418"),
        "evil/partial": (CONFIG, Hostile(status=206), "HTTP 206"),
    }


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """The lying endpoint, a second host a redirect may point at, and the world the lies name:
    a secret config on disk and an empty folder."""
    world = tmp_path_factory.mktemp("world")
    (world / "secret").mkdir()
    (world / "secret" / "config.json").write_bytes(SECRET)
    (world / "outside").mkdir()
    gzip_of_zeros(BOMB_BYTES)  # built once, before any memory is measured
    with HubServer({("evil/x", CONFIG): SECRET}) as other:
        lies = _hostile(world, other.endpoint)
        files = {(repo, CONFIG): QWEN for repo in lies}
        files[("evil/commit-404", CONFIG)] = QWEN
        files[("evil/poisoned", CONFIG)] = QWEN
        hostile = {(repo, filename): lie for repo, (filename, lie, _) in lies.items()}
        hostile[("evil/commit-404", INDEX)] = Hostile(status=404, headers=(
            ("X-Error-Code", "EntryNotFound"), ("X-Repo-Commit", str(world / "made-404"))))
        hostile[("evil/unavailable", CONFIG)] = Hostile(status=503)
        with HubServer(files, hostile=hostile) as hub:
            yield hub, other, world, lies


@pytest.fixture
def cache(servers, tmp_path):
    """A fresh cache folder's place per test, inside the world."""
    hub, other, world, _ = servers
    hub.requests.clear()
    other.requests.clear()
    (world / tmp_path.name).mkdir()
    return world / tmp_path.name / "cache"


def _tree(root: Path, skip: Path | None = None) -> dict[str, tuple[bool, int]]:
    """Every path under ``root`` (``skip`` and below left out): is it a folder, its size."""
    found = {}
    for path in root.rglob("*"):
        if skip is not None and (path == skip or skip in path.parents):
            continue
        info = path.lstat()
        found[str(path.relative_to(root))] = (path.is_dir(), info.st_size)
    return found


def _fetch(hub: HubServer, repo: str, cache: Path):
    start = time.monotonic()
    try:
        return fetch_hub_model(repo, endpoint=hub.endpoint, cache_dir=str(cache), timeout=TIMEOUT_S), \
            time.monotonic() - start
    except SizingError as exc:
        return exc, time.monotonic() - start


def _assert_cache_names_are_plain(cache: Path) -> None:
    for path in cache.rglob("*"):
        assert os.path.realpath(path).startswith(os.path.realpath(cache)), path
        assert ".." not in path.name and "\\" not in path.name


REPOS = sorted(_hostile(Path("/w"), "http://h").keys())


@pytest.mark.parametrize("repo", REPOS)
def test_each_lie_is_refused_on_time_with_its_own_message(servers, cache, repo):
    hub, other, world, lies = servers
    _, _, expected = lies[repo]
    before = _tree(world, skip=cache)
    result, elapsed = _fetch(hub, repo, cache)
    assert isinstance(result, SizingError), result
    assert result.field == "model_id" and "\n" not in result.message and len(result.message) < 300
    assert re.search(expected, result.message), result.message
    assert elapsed < TIMEOUT_S + SLACK_S, elapsed
    # Nothing outside the cache folder was made or changed, and nothing the server named exists.
    assert _tree(world, skip=cache) == before
    assert not (world / "outside" / "blob").exists() and not (cache.parent / "escaped").exists()
    assert not (world / "made-200").exists()
    if cache.exists():
        _assert_cache_names_are_plain(cache)
    assert other.requests == []  # a redirect to another host is never followed


def test_a_lie_about_a_missing_file_creates_nothing(servers, cache):
    """A 404 whose X-Repo-Commit is a path: the model is sized without the index, no folder made."""
    hub, _, world, _ = servers
    model, elapsed = _fetch(hub, "evil/commit-404", cache)
    assert model.source == "hub" and model.shape.layers == 36 and model.safetensors_bytes is None
    assert not (world / "made-404").exists()
    _assert_cache_names_are_plain(cache)


def test_an_existing_file_is_never_read_as_the_model(servers, cache):
    """A cache whose snapshot links out (written by a client that trusted a lie) is not read."""
    hub, _, world, _ = servers
    snapshot = cache / "models--evil--poisoned" / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (snapshot / CONFIG).symlink_to(world / "secret" / "config.json")
    model, _ = _fetch(hub, "evil/poisoned", cache)
    assert model.source == "hub" and model.shape.layers == 36  # the served config, not the 80-layer secret
    assert (world / "secret" / "config.json").read_bytes() == SECRET
    assert os.path.realpath(snapshot / CONFIG).startswith(os.path.realpath(cache))
    # The second time the cached copy is used, and it is the served one.
    hub.hostile[("evil/poisoned", CONFIG)] = Hostile(methods=frozenset({"GET"}), body=b"never asked")
    try:
        again, _ = _fetch(hub, "evil/poisoned", cache)
    finally:
        del hub.hostile[("evil/poisoned", CONFIG)]
    assert again.shape.layers == 36


def test_offline_reads_the_cache_and_only_inside_it(servers, cache, monkeypatch):
    hub, _, world, _ = servers
    _fetch(hub, "evil/poisoned", cache)  # fills the cache: the config, and that there is no index
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub.requests.clear()
    offline, _ = _fetch(hub, "evil/poisoned", cache)
    assert offline.source == "hub" and offline.shape.layers == 36 and offline.safetensors_bytes is None
    assert hub.requests == []
    # A snapshot that links out of the cache is not read offline either.
    pointer = cache / "models--evil--poisoned" / "snapshots" / COMMIT / CONFIG
    pointer.unlink()
    pointer.symlink_to(world / "secret" / "config.json")
    result, _ = _fetch(hub, "evil/poisoned", cache)
    assert isinstance(result, SizingError) and result.field == "model_id"
    assert "offline mode is on" in result.message and "not in the shipped catalogue" in result.message


@pytest.mark.parametrize("repo", ["evil/bomb", "evil/bomb-undeclared", "evil/endless-undeclared"])
def test_memory_stays_bounded(servers, cache, repo):
    hub, *_ = servers
    sent = hub.bytes_sent
    tracemalloc.start()
    try:
        result, _ = _fetch(hub, repo, cache)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert isinstance(result, SizingError)
    assert peak < MAX_PEAK_BYTES, peak
    assert hub.bytes_sent - sent < ENDLESS_LIMIT_BYTES // 4  # the client hung up long before the server's stop


def test_a_cache_folder_that_is_a_file_is_named(servers, cache):
    hub, *_ = servers
    cache.write_text("not a folder")
    result, _ = _fetch(hub, "evil/poisoned", cache)
    assert isinstance(result, SizingError) and result.field == "model_id"
    assert "cache folder" in result.message and "cannot be used" in result.message
    assert hub.requests == []  # refused before any request


def test_no_retry_storm(servers, cache):
    """A 503 and a 429 are asked once each: one attempt per request, no back-off loop."""
    hub, *_ = servers
    for repo in ("evil/unavailable", "evil/rate-limited"):
        hub.requests.clear()
        result, elapsed = _fetch(hub, repo, cache)
        assert isinstance(result, SizingError) and "not in the shipped catalogue" in result.message
        assert len(hub.requests) == 1 and elapsed < 1.0, (hub.requests, elapsed)


def test_an_endpoint_that_is_not_a_url_is_refused(tmp_path):
    for endpoint in ("file:///etc", "ftp://x", "http://", "http://h:port", "http://h/?q=1", "http://a b"):
        with pytest.raises(SizingError, match="not an http") as info:
            fetch_hub_model("org/x", endpoint=endpoint, cache_dir=str(tmp_path / "cache"))
        assert info.value.field == "model_id"


def test_urllib3s_header_warning_is_not_printed_beside_the_one_line_message(caplog):
    import logging

    import sizing.hub_fetch  # noqa: F401  (installs the filter)

    logger = logging.getLogger("urllib3.connection")
    with caplog.at_level(logging.WARNING, logger="urllib3.connection"):
        logger.warning("Failed to parse headers (url=%s): %s", "http://127.0.0.1/x", "bad", exc_info=False)
        logger.warning("another urllib3 warning")
    assert [r.getMessage() for r in caplog.records] == ["another urllib3 warning"]

"""The Hub path through the real huggingface_hub client against a local server in the Hub's URL
layout (the endpoint parameter, since the client reads HF_ENDPOINT only at import)."""

from __future__ import annotations

import json

import pytest

from sizing.catalogue import get_entry
from sizing.errors import SizingError
from sizing.hub import check_repo_id, fetch_hub_model, resolve_model_id
from sizing.kv import KVCacheSpec
from sizing.precisions import get_precision
from sizing.weights import model_weight_bytes
from support.hub_server import HubServer

QWEN = get_entry("qwen3-8b").config_bytes
# Qwen3-8B's published index: 8,190,735,360 parameters in bf16 = 16,381,470,720 bytes.
INDEX = json.dumps({"metadata": {"total_size": 16_381_470_720}, "weight_map": {}}).encode()
FILES = {("Qwen/Qwen3-8B", "config.json"): QWEN, ("Qwen/Qwen3-8B", "model.safetensors.index.json"): INDEX,
         ("org/single-file", "config.json"): QWEN, ("org/not-json", "config.json"): b"<html>oops</html>",
         ("org/huge", "config.json"): b" " * 1_100_000, ("org/empty", "README.md"): b"hi",
         ("org/huge-index", "config.json"): QWEN, ("org/huge-index", "model.safetensors.index.json"): b" " * 5_000_001,
         ("org/bad-key", "config.json"): b'{"num_hidden_layers": "eighty", "num_attention_heads": 8}'}
REFUSED = "http://127.0.0.1:1"  # nothing listens on port 1: the connection is refused at once


@pytest.fixture(scope="module")
def server():
    # One server for the module: shutting one down waits out its 0.5 s poll interval.
    with HubServer(FILES, gated={"meta-llama/Llama-3.1-8B"}, slow={"Qwen/Qwen3-32B", "org/slow"}, delay_s=1) as hub:
        yield hub


@pytest.fixture
def hub(server, tmp_path):
    server.requests.clear()
    return server, str(tmp_path / "cache")


def test_config_and_safetensors_total_through_the_client(hub):
    server, cache = hub
    model = fetch_hub_model("Qwen/Qwen3-8B", endpoint=server.endpoint, cache_dir=cache)
    assert model.source == "hub" and model.safetensors_bytes == 16_381_470_720 and model.catalogue_id is None
    # Same shape as the shipped config: 2 × 36 × 8 × 128 × 2 B per token.
    assert KVCacheSpec(model=model.shape, precision=get_precision("bf16")).bytes_per_token == 2 * 36 * 8 * 128 * 2
    weights = model_weight_bytes(model.shape, get_precision("bf16", field="weight_dtype"), auto=True)
    assert (weights.bytes, weights.source) == (16_381_470_720, "safetensors")
    assert any(p.endswith("/Qwen/Qwen3-8B/resolve/main/config.json") for p in server.requests)
    single = fetch_hub_model("org/single-file", endpoint=server.endpoint, cache_dir=cache)
    assert single.safetensors_bytes is None


def test_endpoint_and_cache_are_read_from_the_environment_when_called(hub, monkeypatch):
    server, cache = hub
    monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
    monkeypatch.setenv("HF_HUB_CACHE", cache)
    assert fetch_hub_model("org/single-file").source == "hub"
    assert server.requests


@pytest.mark.parametrize(("repo", "message"), [
    ("org/missing", "not found, or is private"),
    ("meta-llama/Llama-3.1-8B", "gated"),
    ("org/empty", "no config.json"),
])
def test_hub_errors_say_what_happened(hub, repo, message):
    server, cache = hub
    with pytest.raises(SizingError, match=message) as info:
        fetch_hub_model(repo, endpoint=server.endpoint, cache_dir=cache)
    assert info.value.field == "model_id"


def test_not_json_and_bad_keys_are_named_after_the_repo(hub):
    server, cache = hub
    with pytest.raises(SizingError) as info:
        fetch_hub_model("org/not-json", endpoint=server.endpoint, cache_dir=cache)
    assert info.value.field == "model_id" and "org/not-json's config.json: config: not valid JSON" in info.value.message
    with pytest.raises(SizingError, match="num_hidden_layers: must be an integer") as info:
        fetch_hub_model("org/bad-key", endpoint=server.endpoint, cache_dir=cache)


@pytest.mark.parametrize(("repo", "filename", "size"), [("org/huge", "config.json", 1_100_000),
                                                        ("org/huge-index", "model.safetensors.index.json", 5_000_001)])
def test_oversize_files_are_refused_before_they_are_downloaded(hub, repo, filename, size):
    server, cache = hub
    with pytest.raises(SizingError, match=f"{size:,} bytes, over the") as info:
        fetch_hub_model(repo, endpoint=server.endpoint, cache_dir=cache)
    assert info.value.field == "model_id"
    # One request for it, the size probe: the client's own HEAD and GET never followed.
    assert sum(p.endswith(filename) for p in server.requests) == 1


def test_slow_hub_falls_back_to_the_catalogue_and_says_so(hub):
    server, cache = hub
    model = fetch_hub_model("Qwen/Qwen3-32B", endpoint=server.endpoint, cache_dir=cache, timeout=0.3)
    assert model.source == "catalogue" and "too slow" in model.notice and model.catalogue_id == "qwen3-32b"
    assert model.shape is get_entry("qwen3-32b").shape
    with pytest.raises(SizingError, match="not in the shipped catalogue"):
        fetch_hub_model("org/slow", endpoint=server.endpoint, cache_dir=cache, timeout=0.3)


def test_refused_connection_falls_back_to_the_catalogue(tmp_path):
    model = fetch_hub_model("meta-llama/Llama-3.1-8B", endpoint=REFUSED, cache_dir=str(tmp_path))
    assert model.source == "catalogue" and "ConnectionError" in model.notice
    assert model.shape is get_entry("llama-3.1-8b").shape
    with pytest.raises(SizingError, match="unreachable .* not in the shipped catalogue") as info:
        fetch_hub_model("org/not-shipped", endpoint=REFUSED, cache_dir=str(tmp_path))
    assert info.value.field == "model_id"
    # Offline, the message says how the model can still be sized, and keeps to one readable line.
    assert "Manual" in info.value.message and "config.json" in info.value.message
    assert not info.value.message.endswith("…")


def test_resolve_reads_the_catalogue_first_without_a_request(hub):
    server, cache = hub
    for text in ("qwen3-8b", "Qwen/Qwen3-8B", "QWEN3-8B"):
        model = resolve_model_id(text, endpoint=server.endpoint, cache_dir=cache)
        assert (model.source, model.catalogue_id, model.repo_id) == ("catalogue", "qwen3-8b", "Qwen/Qwen3-8B")
    assert server.requests == []
    # Preferring the Hub (the page's Hub box), a shipped repo is fetched, with its safetensors total.
    fetched = resolve_model_id("Qwen/Qwen3-8B", prefer_hub=True, endpoint=server.endpoint, cache_dir=cache)
    assert fetched.source == "hub" and fetched.safetensors_bytes == 16_381_470_720
    other = resolve_model_id("org/single-file", endpoint=server.endpoint, cache_dir=cache)
    assert other.source == "hub" and other.shape.layers == 36
    with pytest.raises(SizingError, match="neither a catalogue id nor a Hub repo id") as info:
        resolve_model_id("qwen3-9b", endpoint=server.endpoint, cache_dir=cache)
    assert info.value.field == "model_id"


@pytest.mark.parametrize("bad", ["https://huggingface.co/Qwen/Qwen3-8B", "../../etc/passwd", "Qwen/../x", "a/b/c",
                                 "Qwen3-9B", "", "org/na me", "org/x?y=1", 42, "org/" + "x" * 200, "org/a--b"])
def test_bad_repo_ids_are_refused_before_any_request(hub, bad):
    server, cache = hub
    with pytest.raises(SizingError) as info:
        fetch_hub_model(bad, endpoint=server.endpoint, cache_dir=cache)
    assert info.value.field == "model_id"
    with pytest.raises(SizingError) as info:
        resolve_model_id(bad, endpoint=server.endpoint, cache_dir=cache)
    assert info.value.field == "model_id" and server.requests == []
    with pytest.raises(SizingError):
        check_repo_id(bad)

"""The Hub path through the real huggingface_hub client against a local server in the Hub's URL
layout (the endpoint parameter, since the client reads HF_ENDPOINT only at import)."""

from __future__ import annotations

import json

import pytest

from sizing.catalogue import get_entry
from sizing.errors import SizingError
from sizing.hub import check_repo_id, fetch_hub_model
from sizing.kv import KVCacheSpec
from sizing.precisions import get_precision
from sizing.weights import model_weight_bytes
from support.hub_server import HubServer

QWEN = get_entry("qwen3-8b").config_bytes
INDEX = json.dumps({"metadata": {"total_size": 16_381_470_720}, "weight_map": {}}).encode()


@pytest.fixture
def hub(tmp_path):
    files = {("Qwen/Qwen3-8B", "config.json"): QWEN, ("Qwen/Qwen3-8B", "model.safetensors.index.json"): INDEX,
             ("org/single-file", "config.json"): QWEN, ("org/not-json", "config.json"): b"<html>oops</html>",
             ("org/huge", "config.json"): b" " * 1_100_000, ("org/empty", "README.md"): b"hi"}
    with HubServer(files, gated={"meta-llama/Llama-3.1-8B"}, slow={"Qwen/Qwen3-32B", "org/slow"}, delay_s=1) as server:
        yield server, str(tmp_path / "cache")


def test_config_and_safetensors_total_through_the_client(hub):
    server, cache = hub
    model = fetch_hub_model("Qwen/Qwen3-8B", endpoint=server.endpoint, cache_dir=cache)
    assert model.source == "hub" and model.safetensors_bytes == 16_381_470_720
    # Same shape as the shipped config: 2 × 36 × 8 × 128 × 2 B per token.
    assert KVCacheSpec(model=model.shape, precision=get_precision("bf16")).bytes_per_token == 2 * 36 * 8 * 128 * 2
    weights = model_weight_bytes(model.shape, get_precision("bf16", field="weight_dtype"), auto=True)
    assert (weights.bytes, weights.source) == (16_381_470_720, "safetensors")
    assert any(p.endswith("/Qwen/Qwen3-8B/resolve/main/config.json") for p in server.requests)
    single = fetch_hub_model("org/single-file", endpoint=server.endpoint, cache_dir=cache)
    assert single.safetensors_bytes is None


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


def test_not_json_and_oversize_answers_are_refused(hub):
    server, cache = hub
    with pytest.raises(SizingError) as info:
        fetch_hub_model("org/not-json", endpoint=server.endpoint, cache_dir=cache)
    assert info.value.field == "config" and "not valid JSON" in info.value.message
    with pytest.raises(ValueError, match="limit"):
        fetch_hub_model("org/huge", endpoint=server.endpoint, cache_dir=cache)


def test_slow_hub_falls_back_to_the_catalogue_and_says_so(hub):
    server, cache = hub
    model = fetch_hub_model("Qwen/Qwen3-32B", endpoint=server.endpoint, cache_dir=cache, timeout=0.3)
    assert model.source == "catalogue" and "unreachable" in model.notice
    assert model.shape is get_entry("qwen3-32b").shape
    with pytest.raises(SizingError, match="not in the shipped catalogue"):
        fetch_hub_model("org/slow", endpoint=server.endpoint, cache_dir=cache, timeout=0.3)


@pytest.mark.parametrize("bad", ["https://huggingface.co/Qwen/Qwen3-8B", "../../etc/passwd", "Qwen/../x", "a/b/c",
                                 "Qwen3-8B", "", "org/na me", "org/x?y=1", 42, "org/" + "x" * 200])
def test_bad_repo_ids_are_refused_before_any_request(hub, bad):
    server, cache = hub
    with pytest.raises(SizingError) as info:
        fetch_hub_model(bad, endpoint=server.endpoint, cache_dir=cache)
    assert info.value.field == "model_id" and server.requests == []
    with pytest.raises(SizingError):
        check_repo_id(bad)

"""A model by its Hugging Face repo id, through the real ``huggingface_hub`` client (its cache,
``HF_TOKEN`` for gated models, ``HF_ENDPOINT`` or ``endpoint=`` for a mirror).

Fetched: ``config.json`` (capped at :data:`~sizing.hf_config.MAX_CONFIG_BYTES`, parsed like an
upload) and, when present, ``model.safetensors.index.json``, whose ``metadata.total_size`` is the
exact weight bytes. A repo id is checked before any request: ``org/name`` of letters, digits,
``._-``; a URL, a path with ``..`` or anything else is refused. The endpoint's answers are not
trusted (it may be a mirror or proxy the user does not control): :mod:`sizing.hub_fetch` asks
for each file's metadata, checks it (commit, ETag, size, redirects on the endpoint's host only)
and reads the body with a byte cap, all under one deadline, before anything reaches the cache.
An unavailable Hub (no network, offline mode without a cached copy, too slow, a 5xx answer, a
rate limit) falls back to the shipped catalogue when it has the model, and says why; a private
or gated repo without a token is reported as such, not as "not found"; a lying answer is refused
with what was wrong.

:func:`resolve_model_id` is the one entry for an id typed by a user: a catalogue id or a repo the
catalogue ships is read from the catalogue (offline, exact published counts) unless the Hub is
preferred; any other ``org/name`` goes to the Hub.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from sizing.catalogue import find_entry
from sizing.errors import ConfigError, SizingError
from sizing.hf_config import MAX_CONFIG_BYTES, parse_hf_config
from sizing.hub_fetch import HubFetch, HubUnavailable, check_repo_id
from sizing.models import ModelShape

MAX_INDEX_BYTES = 5_000_000  # a safetensors index of a 1 T model is ~2 MB of tensor names
DEFAULT_TIMEOUT_S = 10.0  # one deadline over every request for a model, however its answers arrive
SOURCES = ("catalogue", "hub")
__all__ = ["DEFAULT_TIMEOUT_S", "MAX_INDEX_BYTES", "SOURCES", "HubModel", "check_repo_id", "fetch_hub_model",
           "resolve_model_id"]


@dataclass(frozen=True, kw_only=True)
class HubModel:
    """A model resolved from an id: its shape, where it came from, and any notice to show.

    ``source`` is ``"hub"`` (fetched now) or ``"catalogue"`` (the shipped copy: asked for by a
    catalogue id, or the Hub gave no usable answer, which ``notice`` then says). ``catalogue_id`` is
    the catalogue entry the shape came from, else None.
    """

    repo_id: str
    shape: ModelShape
    source: str
    safetensors_bytes: int | None
    notice: str = ""
    catalogue_id: str | None = None


def _safetensors_total(hub: HubFetch, repo_id: str) -> int | None:
    raw = hub.read(repo_id, "model.safetensors.index.json", cap=MAX_INDEX_BYTES)
    if raw is None:
        return None  # a single-file checkpoint: no index
    try:
        total = json.loads(raw).get("metadata", {}).get("total_size")
    except (ValueError, AttributeError, RecursionError):
        raise SizingError("model_id", f"{repo_id}'s model.safetensors.index.json is not valid JSON") from None
    if isinstance(total, bool) or not isinstance(total, int) or total <= 0:
        return None
    return total


def _fallback(repo_id: str, problem: str) -> HubModel:
    """The catalogue's copy of ``repo_id``, whose notice gives ``problem`` (why the Hub did not answer)."""
    entry = find_entry(repo_id)
    if entry is None:
        # Offline, a model the catalogue lacks can still be sized from its shape or its config.json.
        raise SizingError("model_id", f"{problem} and {repo_id} is not in the shipped catalogue; enter its shape "
                                      "(Manual source; --layers etc.) or its config.json (--config)")
    return HubModel(repo_id=repo_id, shape=entry.shape, source="catalogue", safetensors_bytes=entry.safetensors_bytes,
                    notice=f"{problem}: showing the shipped catalogue's {entry.name}", catalogue_id=entry.id)


def fetch_hub_model(repo_id: str, *, endpoint: str | None = None, token: str | None = None,
                    timeout: float = DEFAULT_TIMEOUT_S, cache_dir: str | None = None) -> HubModel:
    """The model at ``repo_id`` (see the module docstring); errors name ``model_id``.

    ``endpoint`` and ``cache_dir`` default to ``HF_ENDPOINT`` and ``HF_HUB_CACHE`` as they are
    when called (the client itself reads them once, at import). ``timeout`` (seconds) bounds the
    whole fetch, both files included.
    """
    from huggingface_hub import constants
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

    repo_id = check_repo_id(repo_id)
    endpoint = endpoint or os.environ.get("HF_ENDPOINT") or constants.ENDPOINT
    cache_dir = cache_dir or os.environ.get("HF_HUB_CACHE") or constants.HF_HUB_CACHE
    try:
        with HubFetch(endpoint=endpoint, cache_dir=cache_dir, token=token, timeout_s=timeout) as hub:
            config = hub.read(repo_id, "config.json", cap=MAX_CONFIG_BYTES)
            if config is None:
                raise SizingError("model_id", f"{repo_id} has no config.json")
            total = _safetensors_total(hub, repo_id)
    except HubUnavailable as exc:
        return _fallback(repo_id, exc.problem)
    except GatedRepoError:
        raise SizingError("model_id", f"{repo_id} is gated: accept its licence on the Hub and set HF_TOKEN") from None
    except RepositoryNotFoundError:
        raise SizingError("model_id", f"{repo_id} was not found, or is private (set HF_TOKEN if you have "
                                      "access)") from None
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else 0
        raise SizingError("model_id", f"the Hub answered HTTP {status or '?'} for {repo_id}") from None
    try:
        shape = parse_hf_config(config, name=repo_id, safetensors_bytes=total)
    except ConfigError as exc:  # named after the repo, so the user knows it is the Hub's file
        raise SizingError("model_id", f"{repo_id}'s config.json: {exc}") from None
    return HubModel(repo_id=repo_id, shape=shape, source="hub", safetensors_bytes=total)


def resolve_model_id(text: object, *, prefer_hub: bool = False, **hub_options) -> HubModel:
    """The model an id names: a catalogue id or shipped repo from the catalogue (unless
    ``prefer_hub`` and ``text`` is a repo id), anything else from the Hub.

    ``hub_options`` are :func:`fetch_hub_model`'s keywords. Errors name ``model_id``.
    """
    entry = find_entry(text) if isinstance(text, str) else None
    if entry is not None and not (prefer_hub and "/" in text):
        return HubModel(repo_id=entry.repo, shape=entry.shape, source="catalogue",
                        safetensors_bytes=entry.safetensors_bytes, catalogue_id=entry.id)
    if isinstance(text, str) and "/" not in text:
        raise SizingError("model_id", f"{text[:60]!r} is neither a catalogue id nor a Hub repo id (org/name); "
                                      "see `python -m sizing models`")
    return fetch_hub_model(text, **hub_options)

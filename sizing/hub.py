"""A model by its Hugging Face repo id, through the real ``huggingface_hub`` client (its cache,
``HF_TOKEN`` for gated models, ``HF_ENDPOINT`` or ``endpoint=`` for a mirror).

Fetched: ``config.json`` (capped at :data:`~sizing.hf_config.MAX_CONFIG_BYTES`, parsed like an
upload) and, when present, ``model.safetensors.index.json``, whose ``metadata.total_size`` is the
exact weight bytes. A repo id is checked before any request: ``org/name`` of letters, digits,
``._-``; a URL, a path with ``..`` or anything else is refused. Each file's size is asked first
(one request without the client's retry back-off) and a file over its cap is refused before it
is downloaded. An unreachable Hub (no network, offline mode, a timeout, a 5xx answer) falls
back to the shipped catalogue when it has the model, and says so; a private or gated repo
without a token is reported as such, not as "not found".

:func:`resolve_model_id` is the one entry for an id typed by a user: a catalogue id or a repo the
catalogue ships is read from the catalogue (offline, exact published counts) unless the Hub is
preferred; any other ``org/name`` goes to the Hub.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from inputs.uploads import read_path_capped
from sizing.catalogue import find_entry
from sizing.errors import ConfigError, SizingError
from sizing.hf_config import MAX_CONFIG_BYTES, parse_hf_config
from sizing.models import ModelShape

_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
MAX_INDEX_BYTES = 5_000_000  # a safetensors index of a 1 T model is ~2 MB of tensor names
DEFAULT_TIMEOUT_S = 10.0
SOURCES = ("catalogue", "hub")


@dataclass(frozen=True, kw_only=True)
class HubModel:
    """A model resolved from an id: its shape, where it came from, and any notice to show.

    ``source`` is ``"hub"`` (fetched now) or ``"catalogue"`` (the shipped copy: asked for by a
    catalogue id, or the Hub was unreachable, which ``notice`` then says). ``catalogue_id`` is
    the catalogue entry the shape came from, else None.
    """

    repo_id: str
    shape: ModelShape
    source: str
    safetensors_bytes: int | None
    notice: str = ""
    catalogue_id: str | None = None


class _Unreachable(Exception):
    """The Hub did not answer usefully (network, timeout, 5xx): the caller may fall back."""


def check_repo_id(text: object) -> str:
    """``text`` if it is a Hub repo id (``org/name``); :class:`SizingError` on ``model_id`` otherwise."""
    if not isinstance(text, str) or not _REPO_ID.fullmatch(text) or ".." in text or "--" in text:
        raise SizingError("model_id", f"{str(text)[:60]!r} is not a Hugging Face repo id (org/name; "
                                      "no URLs or paths)")
    return text


def _probe_size(repo_id: str, filename: str, *, endpoint: str | None, token: str | None, timeout: float) -> int | None:
    """The file's size from one HEAD request (None when the answer gives none or is an error the
    download will name); :class:`_Unreachable` on network errors, timeouts and 5xx answers."""
    from huggingface_hub import hf_hub_url
    from huggingface_hub.errors import OfflineModeIsEnabled
    from huggingface_hub.utils import build_hf_headers, get_session
    from requests.exceptions import RequestException

    headers = build_hf_headers(token=token, headers={"Accept-Encoding": "identity"})
    try:
        response = get_session().head(hf_hub_url(repo_id, filename, endpoint=endpoint), headers=headers,
                                      timeout=timeout, allow_redirects=False)
    except OfflineModeIsEnabled:
        return None  # the client's cache may still hold the file; the download says if not
    except (RequestException, OSError) as exc:
        raise _Unreachable(type(exc).__name__) from None
    if response.status_code >= 500:
        raise _Unreachable(f"HTTP {response.status_code}")
    size = response.headers.get("X-Linked-Size") or response.headers.get("Content-Length")
    return int(size) if response.status_code < 400 and size and size.isdigit() else None


def _download(repo_id: str, filename: str, *, endpoint: str | None, token: str | None, timeout: float,
              cache_dir: str | None, cap: int) -> bytes:
    from huggingface_hub import hf_hub_download

    size = _probe_size(repo_id, filename, endpoint=endpoint, token=token, timeout=timeout)
    if size is not None and size > cap:
        raise SizingError("model_id", f"{repo_id}'s {filename} is {size:,} bytes, over the {cap:,}-byte limit")
    path = hf_hub_download(repo_id, filename, endpoint=endpoint, token=token, etag_timeout=timeout,
                           cache_dir=cache_dir)
    return read_path_capped(path, cap, field="model_id")


def _safetensors_total(repo_id: str, **kwargs) -> int | None:
    from huggingface_hub.errors import EntryNotFoundError

    try:
        raw = _download(repo_id, "model.safetensors.index.json", cap=MAX_INDEX_BYTES, **kwargs)
    except EntryNotFoundError:
        return None  # a single-file checkpoint: no index (or, offline, none cached)
    try:
        total = json.loads(raw).get("metadata", {}).get("total_size")
    except (ValueError, AttributeError, RecursionError):
        raise SizingError("model_id", f"{repo_id}'s model.safetensors.index.json is not valid JSON") from None
    if isinstance(total, bool) or not isinstance(total, int) or total <= 0:
        return None
    return total


def _fallback(repo_id: str, why: str) -> HubModel:
    entry = find_entry(repo_id)
    if entry is None:
        raise SizingError("model_id", f"the Hub is unreachable ({why}) and {repo_id} is not in the shipped catalogue")
    return HubModel(repo_id=repo_id, shape=entry.shape, source="catalogue", safetensors_bytes=entry.safetensors_bytes,
                    notice=f"the Hub is unreachable ({why}): showing the shipped catalogue's {entry.name}",
                    catalogue_id=entry.id)


def fetch_hub_model(repo_id: str, *, endpoint: str | None = None, token: str | None = None,
                    timeout: float = DEFAULT_TIMEOUT_S, cache_dir: str | None = None) -> HubModel:
    """The model at ``repo_id`` (see the module docstring); errors name ``model_id``.

    ``endpoint`` and ``cache_dir`` default to ``HF_ENDPOINT`` and ``HF_HUB_CACHE`` as they are
    when called (the client itself reads them once, at import).
    """
    from huggingface_hub.errors import (EntryNotFoundError, GatedRepoError, HfHubHTTPError,
                                        LocalEntryNotFoundError, RepositoryNotFoundError)
    from requests.exceptions import RequestException

    repo_id = check_repo_id(repo_id)
    endpoint = endpoint or os.environ.get("HF_ENDPOINT") or None
    cache_dir = cache_dir or os.environ.get("HF_HUB_CACHE") or None
    options = {"endpoint": endpoint, "token": token, "timeout": timeout, "cache_dir": cache_dir}
    try:
        config = _download(repo_id, "config.json", cap=MAX_CONFIG_BYTES, **options)
        total = _safetensors_total(repo_id, **options)
    except _Unreachable as exc:
        return _fallback(repo_id, str(exc))
    except LocalEntryNotFoundError:  # before EntryNotFoundError, its base class
        return _fallback(repo_id, "offline, and not in the client's cache")
    except GatedRepoError:
        raise SizingError("model_id", f"{repo_id} is gated: accept its licence on the Hub and set HF_TOKEN") from None
    except RepositoryNotFoundError:
        raise SizingError("model_id", f"{repo_id} was not found, or is private (set HF_TOKEN if you have "
                                      "access)") from None
    except EntryNotFoundError:
        raise SizingError("model_id", f"{repo_id} has no config.json") from None
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else 0
        if status >= 500:
            return _fallback(repo_id, f"HTTP {status}")
        raise SizingError("model_id", f"the Hub answered HTTP {status or '?'} for {repo_id}") from None
    except (RequestException, OSError) as exc:
        return _fallback(repo_id, type(exc).__name__)
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

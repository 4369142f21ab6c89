"""A model by its Hugging Face repo id, through the real ``huggingface_hub`` client (its cache,
``HF_TOKEN`` for gated models, ``HF_ENDPOINT`` or ``endpoint=`` for a mirror).

Fetched: ``config.json`` (capped at :data:`~sizing.hf_config.MAX_CONFIG_BYTES`, parsed like an
upload) and, when present, ``model.safetensors.index.json``, whose ``metadata.total_size`` is the
exact weight bytes. A repo id is checked before any request: ``org/name`` of letters, digits,
``._-``; a URL, a path with ``..`` or anything else is refused. An unreachable Hub falls back
to the shipped catalogue when it has the model, and says so; a private or gated repo without a
token is reported as such, not as "not found".
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from inputs.uploads import read_path_capped
from sizing.catalogue import find_entry
from sizing.errors import SizingError
from sizing.hf_config import MAX_CONFIG_BYTES, parse_hf_config
from sizing.models import ModelShape

_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
MAX_INDEX_BYTES = 5_000_000  # a safetensors index of a 1 T model is ~2 MB of tensor names
DEFAULT_TIMEOUT_S = 10.0


@dataclass(frozen=True, kw_only=True)
class HubModel:
    """A model resolved from a repo id: its shape, where it came from, and any notice to show."""

    repo_id: str
    shape: ModelShape
    source: str  # "hub", or "catalogue" when the Hub was unreachable
    safetensors_bytes: int | None
    notice: str = ""


def check_repo_id(text: object) -> str:
    """``text`` if it is a Hub repo id (``org/name``); :class:`SizingError` on ``model_id`` otherwise."""
    if not isinstance(text, str) or not _REPO_ID.fullmatch(text) or ".." in text or "--" in text:
        raise SizingError("model_id", f"{str(text)[:60]!r} is not a Hugging Face repo id (org/name; "
                                      "no URLs or paths)")
    return text


def _download(repo_id: str, filename: str, *, endpoint: str | None, token: str | None, timeout: float,
              cache_dir: str | None, cap: int) -> bytes:
    from huggingface_hub import hf_hub_download

    path = hf_hub_download(repo_id, filename, endpoint=endpoint, token=token, etag_timeout=timeout,
                           cache_dir=cache_dir)
    return read_path_capped(path, cap, field="model_id")


def _safetensors_total(repo_id: str, **kwargs) -> int | None:
    from huggingface_hub.errors import EntryNotFoundError

    try:
        raw = _download(repo_id, "model.safetensors.index.json", cap=MAX_INDEX_BYTES, **kwargs)
    except EntryNotFoundError:
        return None  # a single-file checkpoint: no index
    try:
        total = json.loads(raw).get("metadata", {}).get("total_size")
    except (ValueError, AttributeError, RecursionError):
        raise SizingError("model_id", "model.safetensors.index.json is not valid JSON") from None
    if isinstance(total, bool) or not isinstance(total, int) or total <= 0:
        return None
    return total


def fetch_hub_model(repo_id: str, *, endpoint: str | None = None, token: str | None = None,
                    timeout: float = DEFAULT_TIMEOUT_S, cache_dir: str | None = None) -> HubModel:
    """The model at ``repo_id`` (see the module docstring); errors name ``model_id``."""
    from huggingface_hub.errors import (EntryNotFoundError, GatedRepoError, HfHubHTTPError,
                                        LocalEntryNotFoundError, RepositoryNotFoundError)
    from requests.exceptions import ConnectionError as RequestsConnectionError
    from requests.exceptions import Timeout

    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import get_session

    repo_id = check_repo_id(repo_id)
    options = {"endpoint": endpoint, "token": token, "timeout": timeout, "cache_dir": cache_dir}
    try:
        # One probe through the client's own session, without its retry back-off (which waits
        # ~25 s on a hung Hub): a timeout here is "unreachable" at once.
        get_session().head(hf_hub_url(repo_id, "config.json", endpoint=endpoint), timeout=timeout)
        config = _download(repo_id, "config.json", cap=MAX_CONFIG_BYTES, **options)
        total = _safetensors_total(repo_id, **options)
    except GatedRepoError:
        raise SizingError("model_id", f"{repo_id} is gated: accept its licence on the Hub and set HF_TOKEN") from None
    except RepositoryNotFoundError:
        raise SizingError("model_id", f"{repo_id} was not found, or is private (set HF_TOKEN if you have "
                                      "access)") from None
    except EntryNotFoundError:
        raise SizingError("model_id", f"{repo_id} has no config.json") from None
    except (LocalEntryNotFoundError, RequestsConnectionError, Timeout, OSError) as exc:
        entry = find_entry(repo_id)
        if entry is None:
            raise SizingError("model_id", f"the Hub is unreachable ({type(exc).__name__}) and {repo_id} is "
                                          "not in the shipped catalogue") from None
        return HubModel(repo_id=repo_id, shape=entry.shape, source="catalogue", safetensors_bytes=None,
                        notice=f"the Hub is unreachable: showing the shipped catalogue's {entry.name}")
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else "?"
        raise SizingError("model_id", f"the Hub answered HTTP {status} for {repo_id}") from None
    shape = parse_hf_config(config, name=repo_id, safetensors_bytes=total)
    return HubModel(repo_id=repo_id, shape=shape, source="hub", safetensors_bytes=total)

"""The shipped model catalogue: published ``config.json`` files under ``data/models/`` with the
published parameter count of each and where both come from (``data/models/README.md``).

``index.json`` lists the entries; each config file is read with a size cap and parsed by
:mod:`sizing.hf_config`, the same path an uploaded config or a Hub download takes.
:func:`search_catalogue` is the page's type-to-filter and the CLI's ``models`` listing.
"""

from __future__ import annotations

import json
from difflib import get_close_matches
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from inputs.uploads import read_path_capped
from sizing.errors import SizingError
from sizing.hf_config import MAX_CONFIG_BYTES, load_config, parse_hf_config
from sizing.models import ModelShape

CATALOGUE_DIR = Path(__file__).resolve().parents[1] / "data" / "models"
_INDEX_BYTES = 200_000  # the index is ~15 KB; the cap only guards against a corrupted checkout
_HF = "https://huggingface.co"


@dataclass(frozen=True, kw_only=True, eq=False)
class CatalogueEntry:
    """One published model: its config as shipped, published parameter count, and sources.

    ``complete`` is True when the file is the whole published config.json as its mirror holds it.
    ``verified`` is True when every key in the file was copied from a cited copy of the published
    config (``copied_from`` names the mirror and commit); False marks sizing keys that no stored
    copy could confirm, which pages and the CLI caption as unverified.
    """

    id: str  # CLI / URL id, e.g. "llama-3.1-70b"
    name: str
    repo: str  # Hugging Face repository the config comes from
    file: str
    params: int  # published total parameter count
    params_source: str
    complete: bool
    verified: bool
    copied_from: str
    active_params: int | None = None
    safetensors_bytes: int | None = None  # the Hub index's metadata.total_size, when recorded
    note: str = ""

    @property
    def source(self) -> str:
        """URL of the published config.json."""
        return f"{_HF}/{self.repo}/blob/main/config.json"

    @property
    def config_bytes(self) -> bytes:
        return read_path_capped(str(CATALOGUE_DIR / self.file), MAX_CONFIG_BYTES, field="catalogue")

    @property
    def config(self) -> Mapping[str, Any]:
        """The config as parsed (``text_config`` merged for multimodal models)."""
        return _config(self.id)

    @property
    def shape(self) -> ModelShape:
        return _shape(self.id)

    @property
    def params_billions(self) -> float:
        """The published parameter count in billions, as model cards quote it."""
        return self.params / 1e9

    @property
    def searchable(self) -> str:
        """What a search matches: id, name, repository and the architecture (``model_type``)."""
        model_type = self.config.get("model_type", "")
        return f"{self.id} {self.name} {self.repo} {model_type if isinstance(model_type, str) else ''}".lower()


def _entry(record: Mapping[str, Any]) -> CatalogueEntry:
    fields = {k: record[k] for k in ("id", "name", "repo", "file", "params", "params_source", "complete", "verified",
                                     "copied_from")}
    return CatalogueEntry(**fields, active_params=record.get("active_params"),
                          safetensors_bytes=record.get("safetensors_bytes"), note=record.get("note", ""))


@cache
def catalogue() -> tuple[CatalogueEntry, ...]:
    """Every shipped model, in display order."""
    raw = read_path_capped(str(CATALOGUE_DIR / "index.json"), _INDEX_BYTES, field="catalogue")
    return tuple(_entry(record) for record in json.loads(raw))


@cache
def _by_id() -> dict[str, CatalogueEntry]:
    return {entry.id: entry for entry in catalogue()}


def catalogue_ids() -> tuple[str, ...]:
    return tuple(entry.id for entry in catalogue())


def find_entry(model_id: str) -> CatalogueEntry | None:
    """The entry whose id (case-insensitive) or Hub repository is ``model_id``; None otherwise."""
    if not isinstance(model_id, str):
        return None
    key = model_id.strip().lower()
    entry = _by_id().get(key)
    if entry is not None:
        return entry
    return next((e for e in catalogue() if e.repo.lower() == key), None)


def get_entry(model_id: str) -> CatalogueEntry:
    """The entry called ``model_id``; :class:`SizingError` on ``"model"`` naming near matches otherwise."""
    entry = find_entry(model_id)
    if entry is None:
        text = model_id.strip().lower()[:100] if isinstance(model_id, str) else ""
        near = [e.id for e in search_catalogue(text)[:5]] or get_close_matches(text, catalogue_ids(), n=3, cutoff=0.75)
        hint = f"; did you mean {', '.join(near)}?" if near else "; see `python -m sizing models`"
        raise SizingError("model", f"unknown model {str(model_id)[:60]!r}{hint}")
    return entry


def search_catalogue(text: str) -> tuple[CatalogueEntry, ...]:
    """Entries matching every word of ``text`` (id, name or repository; case-insensitive)."""
    words = str(text).lower().replace("/", " ").split()[:10]
    return tuple(e for e in catalogue() if all(w in e.searchable for w in words))


@cache
def _config(model_id: str) -> Mapping[str, Any]:
    return load_config(get_entry(model_id).config_bytes)


@cache
def _shape(model_id: str) -> ModelShape:
    entry = get_entry(model_id)
    return parse_hf_config(entry.config_bytes, name=entry.name, params=entry.params)


def catalogue_records() -> list[dict[str, Any]]:
    """The catalogue as JSON-ready records (``python -m sizing models --json``)."""
    return [
        {"id": e.id, "name": e.name, "repo": e.repo, "source": e.source, "params": e.params,
         "params_source": e.params_source, "active_params": e.active_params, "complete_config": e.complete,
         "verified": e.verified,
         "layout": e.shape.layout, "attention": str(e.shape.attention), "note": e.note}
        for e in catalogue()
    ]

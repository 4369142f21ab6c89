"""Model presets: the shipped catalogue (:mod:`sizing.catalogue`) under the names the pages,
CLIs and URLs use. Every catalogue id is a preset id; the first twelve presets' ids are kept as
they were, so old links and scripts still work.

Shapes are built from the published configs by :mod:`sizing.hf_config`, the same path an
uploaded config takes, so the presets also exercise the parser.
"""

from __future__ import annotations

from sizing.catalogue import CatalogueEntry, catalogue, catalogue_ids, get_entry
from sizing.models import ModelShape

ModelPreset = CatalogueEntry  # a preset is a catalogue entry: id, name, repo, config, params, sources

PRESET_IDS: tuple[str, ...] = catalogue_ids()
DEFAULT_PRESET = "llama-3.1-70b"


def presets() -> tuple[ModelPreset, ...]:
    """All presets, in display order."""
    return catalogue()


def get_preset(preset_id: str) -> ModelPreset:
    """The preset with this id (case-insensitive) or Hub repository; :class:`SizingError` on ``"model"`` otherwise."""
    return get_entry(preset_id)


def preset_shape(preset_id: str) -> ModelShape:
    """The :class:`ModelShape` of a preset (parsed once, then cached)."""
    return get_preset(preset_id).shape

"""Which catalogue model a vLLM start-up log was run with: by the name it prints, else by the
KV bytes its figures imply. Pure: nothing is fetched; a Hub id the catalogue does not ship is
reported as such.

By name (:func:`match_log_model`), first match wins:

1. the whole name is a catalogue repository or id (``Qwen/Qwen3-8B``);
2. the last two parts of a path are one (``/models/Qwen/Qwen3-8B``);
3. the last part with the usual variant suffixes dropped (:data:`VARIANT_SUFFIXES`, a
   trailing ``-YYMM`` release tag, and Meta's old ``Meta-`` prefix, case-insensitive) is a
   catalogue model's repository name treated the same way (``google/gemma-3-27b-it`` →
   ``gemma-3-27b`` ← ``google/gemma-3-27b-pt``).

By figures (:func:`kv_candidates`): with the logged "Available KV cache memory" (per GPU, GiB
rounded to 0.01) and "GPU KV cache size" (tokens) or "# GPU blocks", each catalogue model's
vLLM layout (:func:`sizing.engine.groups.kv_cache_layout`) at the log's TP and KV dtype —
every power of two up to 8 and both bf16 and fp8 where the log states none — gives a range of
token counts over the rounding of the printed GiB; the models whose range holds the logged
count are candidates.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction
from typing import Any

from sizing.catalogue import CatalogueEntry
from sizing.engine.explain import log_kv_dtype
from sizing.engine.groups import GroupingRule, kv_cache_layout
from sizing.engine.pipeline import pipeline_stage
from sizing.engine.vllm_log import ParsedLog
from sizing.errors import SizingError
from sizing.precisions import get_precision
from sizing.presets import presets
from units import GiB

# Suffixes that name a variant of one architecture: tuning, packaging or weight format. The KV
# cache of each is its base model's (a quantised checkpoint keeps the KV heads and layers).
VARIANT_SUFFIXES = ("-instruct", "-it", "-pt", "-base", "-chat", "-thinking", "-hf", "-fp8", "-fp8-dynamic",
                    "-awq", "-gptq", "-int4", "-int8", "-w8a8", "-w4a16", "-quantized.w8a8", "-quantized.w4a16",
                    "-nvfp4", "-mxfp4", "-bnb-4bit")
_RELEASE_TAG = re.compile(r"-\d{4}$")  # Mistral's and Qwen's -2501 / -2507 release tags
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
_HALF_STEP_GIB = Fraction(1, 200)  # vLLM prints GiB with two decimals
_TRIED_TPS = (1, 2, 4, 8)  # where the log states no TP: one node's powers of two
_TRIED_KV_DTYPES = ("bf16", "fp8")  # where the log states no dtype
MAX_CANDIDATES = 10


class MatchKind(StrEnum):
    """How the log's model name was matched to the catalogue."""

    REPOSITORY = "repository"  # the name is a catalogue repository or id
    PATH_TAIL = "path-tail"  # the last two parts of a path are a repository
    VARIANT = "variant"  # the name without variant suffixes is a catalogue model's
    HUB_NOT_IN_CATALOGUE = "hub-id-not-in-catalogue"  # a Hub id the catalogue does not ship
    UNKNOWN = "unknown"  # a local path or a name the catalogue has no model for
    NONE = "none"  # the log names no model


@dataclass(frozen=True, kw_only=True)
class ModelMatch:
    """The log's model name and the catalogue entry it names (None when it names none)."""

    logged: str | None
    kind: MatchKind
    entry: CatalogueEntry | None
    how: str  # in words

    def as_dict(self) -> dict[str, Any]:
        return {"logged": self.logged, "kind": str(self.kind), "id": self.entry.id if self.entry else None,
                "repo": self.entry.repo if self.entry else None, "how": self.how}


@dataclass(frozen=True, kw_only=True)
class KVCandidate:
    """A catalogue model whose vLLM layout gives the logged count from the logged memory.

    ``low``/``high`` bound the count over the rounding of the printed GiB; ``counted`` is
    ``"tokens"`` or ``"blocks"``, whichever the log printed.
    """

    entry: CatalogueEntry
    tp: int
    kv_dtype: str
    rule: GroupingRule
    counted: str
    logged: int
    low: int
    high: int

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.entry.id, "repo": self.entry.repo, "tp": self.tp, "kv_dtype": self.kv_dtype,
                "rule": str(self.rule), "counted": self.counted, "logged": self.logged, "low": self.low,
                "high": self.high}


@dataclass(frozen=True, kw_only=True)
class LogModel:
    """The name match, and the candidates by KV bytes where the name names no catalogue model."""

    match: ModelMatch
    candidates: tuple[KVCandidate, ...]
    basis: str  # what the candidates were compared on, or why none could be

    def as_dict(self) -> dict[str, Any]:
        return {"model_match": self.match.as_dict(), "candidates": [c.as_dict() for c in self.candidates],
                "candidates_basis": self.basis}


def variant_base(name: str) -> str:
    """``name``'s last path part, lower case, without variant suffixes, release tag or ``meta-``."""
    base = name.strip().replace("\\", "/").rstrip("/").rsplit("/", 1)[-1].lower()
    changed = True
    while changed:
        changed = False
        for suffix in sorted(VARIANT_SUFFIXES, key=len, reverse=True):
            if base.endswith(suffix) and len(base) > len(suffix):
                base, changed = base[: -len(suffix)], True
                break
        if not changed and _RELEASE_TAG.search(base):
            base, changed = _RELEASE_TAG.sub("", base), True
    # meta-llama renamed "Meta-Llama-3.1-70B" to "Llama-3.1-70B"; re-publishers keep the old name.
    return base.removeprefix("meta-") if base.startswith("meta-llama") else base


def match_log_model(logged: str | None, entries: tuple[CatalogueEntry, ...] | None = None) -> ModelMatch:
    """The catalogue entry ``logged`` (a Hub id, a path, a name) names, and how it was matched."""
    entries = presets() if entries is None else entries
    if logged is None or not logged.strip():
        return ModelMatch(logged=None, kind=MatchKind.NONE, entry=None, how="the log names no model")
    name = logged.strip()[:300]
    by_key = {e.repo.lower(): e for e in entries} | {e.id.lower(): e for e in entries}
    if name.lower() in by_key:
        entry = by_key[name.lower()]
        return ModelMatch(logged=name, kind=MatchKind.REPOSITORY, entry=entry,
                          how=f"the log's model is the catalogue's {entry.repo}")
    parts = [p for p in name.replace("\\", "/").split("/") if p]
    if len(parts) > 2 and "/".join(parts[-2:]).lower() in by_key:
        entry = by_key["/".join(parts[-2:]).lower()]
        return ModelMatch(logged=name, kind=MatchKind.PATH_TAIL, entry=entry,
                          how=f"the path ends in {entry.repo}, a catalogue repository")
    base = variant_base(name)
    same = [e for e in entries if base and base in (variant_base(e.repo), variant_base(e.id))]
    if same:
        entry = same[0]
        others = f" (also {', '.join(e.id for e in same[1:])})" if len(same) > 1 else ""
        return ModelMatch(logged=name, kind=MatchKind.VARIANT, entry=entry,
                          how=f"{parts[-1] if parts else name} is a variant of the catalogue's {entry.repo} "
                              f"(both read {base!r} without variant suffixes){others}")
    if _HUB_ID.fullmatch(name):
        return ModelMatch(logged=name, kind=MatchKind.HUB_NOT_IN_CATALOGUE, entry=None,
                          how=f"{name} is a Hugging Face id the catalogue does not ship (not fetched here: load it "
                              "by id, or give its config.json or a manual shape)")
    return ModelMatch(logged=name, kind=MatchKind.UNKNOWN, entry=None,
                      how="a local path or name that no catalogue model matches")


def kv_candidates(parsed: ParsedLog, entries: tuple[CatalogueEntry, ...] | None = None,
                  *, limit: int = MAX_CANDIDATES) -> tuple[tuple[KVCandidate, ...], str]:
    """Catalogue models whose KV layout turns the logged memory into the logged count, and the
    basis of the comparison (or why there is none). At most ``limit``, in catalogue order."""
    entries = presets() if entries is None else entries
    if parsed.available_gib is None or parsed.available_gib <= 0:
        return (), "needs a positive 'Available KV cache memory' in the log"
    if parsed.kv_tokens is None and parsed.gpu_blocks is None:
        return (), "needs 'GPU KV cache size' (tokens) or '# GPU blocks' in the log"
    counted, logged = ("tokens", parsed.kv_tokens) if parsed.kv_tokens is not None else ("blocks", parsed.gpu_blocks)
    stated = log_kv_dtype(parsed)
    dtypes = (stated[0],) if stated else _TRIED_KV_DTYPES
    tps = (parsed.tp,) if parsed.tp else _TRIED_TPS
    block = parsed.block_size or 16
    available = Fraction(repr(parsed.available_gib)) * GiB
    low_b, high_b = available - _HALF_STEP_GIB * GiB, available + _HALF_STEP_GIB * GiB
    found: list[KVCandidate] = []
    for entry in entries:
        hit = _fit(entry, parsed, dtypes, tps, block, counted, logged, low_b, high_b)
        if hit is not None:
            found.append(hit)
    basis = (f"{parsed.available_gib:g} GiB available → {logged:,} {counted} at TP "
             f"{'/'.join(map(str, tps))}, KV {'/'.join(dtypes)}, block {block} "
             f"({'from the log' if parsed.tp else 'TP not in the log: each tried'})")
    if len(found) > limit:
        basis += f"; {len(found)} fit, the first {limit} shown"
    return tuple(found[:limit]), basis


def _fit(entry: CatalogueEntry, parsed: ParsedLog, dtypes, tps, block: int, counted: str, logged: int,
         low_b: Fraction, high_b: Fraction) -> KVCandidate | None:
    """The first (TP, dtype, rule) at which ``entry`` gives ``logged``; None if none does."""
    try:
        shape = entry.shape
        if parsed.pp and parsed.pp > 1:
            shape = pipeline_stage(shape, parsed.pp, 0)
    except (SizingError, ValueError):
        return None
    for tp in tps:
        for dtype in dtypes:
            for rule in (GroupingRule.HYBRID, GroupingRule.SINGLE):
                try:
                    layout = kv_cache_layout(shape, get_precision(dtype, field="kv_dtype"), tp=tp, block_size=block,
                                             rule=rule)
                except (SizingError, ValueError):
                    continue
                low, high = layout.num_blocks(low_b), layout.num_blocks(high_b)
                if counted == "tokens":
                    low, high = layout.tokens(low), layout.tokens(high)
                if low <= logged <= high:
                    return KVCandidate(entry=entry, tp=tp, kv_dtype=dtype, rule=rule, counted=counted,
                                       logged=logged, low=low, high=high)
    return None


def identify_log_model(parsed: ParsedLog, entries: tuple[CatalogueEntry, ...] | None = None) -> LogModel:
    """The log's model by name, and by KV bytes when the name names no catalogue model."""
    match = match_log_model(parsed.model, entries)
    if match.entry is not None:
        return LogModel(match=match, candidates=(), basis="the name matched; candidates by KV bytes not needed")
    candidates, basis = kv_candidates(parsed, entries)
    return LogModel(match=match, candidates=candidates, basis=basis)


__all__ = ["KVCandidate", "LogModel", "MatchKind", "ModelMatch", "VARIANT_SUFFIXES", "identify_log_model",
           "kv_candidates", "match_log_model", "variant_base"]

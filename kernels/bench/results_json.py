"""The round trip every results file of the harness shares (the harness's own, the families
section's, the multi-GPU one): records to strict JSON and back, typed all the way down.

A report is a tree of frozen dataclasses. :func:`report_to_json` writes it with each record's
fields in their declared order and a non-finite figure as null; :func:`parse_results` reads a
file's bytes back under a size and depth cap, checks its schema name and version, rebuilds every
field with its declared type (:func:`build_typed`) and runs the file's own semantic check.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from pathlib import Path
from typing import Union

from inputs.errors import InputError, shown
from inputs.uploads import loads_json, read_path_capped, upload_bytes

__all__ = ["to_jsonable", "report_to_json", "write_results_json", "typed_document", "parse_results",
           "read_results_file", "check_target_names", "build_typed"]


def to_jsonable(obj):
    """``obj`` as JSON values: a record becomes an object in field order, a tuple a list, a
    non-finite float null. With :func:`build_typed`, the round trip every results file shares."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(x) for x in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None  # JSON has no NaN/inf; a missing figure is null
    return obj


def report_to_json(report) -> str:
    """A results file's report (this harness's or a sibling's) as JSON text: strict (no NaN or
    infinity: a missing figure is null), each record's fields in their declared order."""
    return json.dumps(to_jsonable(report), indent=1, allow_nan=False)


def write_results_json(report, path: str | Path) -> Path:
    """Write any results report as :func:`report_to_json` gives it; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(report_to_json(report) + "\n")
    return path


def typed_document(raw: bytes, tp, *, label: str, schema: str, version: int, field: str, max_bytes: int,
                   max_depth: int):
    """A results file's bytes as a record of type ``tp``: at most ``max_bytes`` and
    ``max_depth`` levels, strict JSON, the schema's name and version, every field typed
    (:func:`build_typed`). ``label`` names the program in the messages ("kernels.bench").
    Raises ValueError or :class:`InputError` naming what is wrong."""
    upload_bytes(raw, max_bytes, field=field)
    document = loads_json(raw, field=field, max_depth=max_depth)
    if not isinstance(document, dict):
        raise ValueError(f"not a {label} result: top level is a {type(document).__name__}, not an object")
    if document.get("schema") != schema:
        raise ValueError(f"not a {label} result: schema is {shown(document.get('schema'))}, expected {schema!r}")
    if document.get("schema_version") != version:
        raise ValueError(f"unsupported {label} schema_version {shown(document.get('schema_version'))} "
                         f"(this code reads {version})")
    return build_typed(tp, document, "report")


def parse_results(data: bytes | str, tp, *, error: type[InputError], check, **document):
    """A results file's content (bytes or text, never a path) as a checked record: the
    :func:`typed_document` of ``document``'s keywords, then ``check(report)`` for what types cannot
    say; any refusal becomes ``error(message)`` (the message names the part that is wrong)."""
    raw = data.encode() if isinstance(data, str) else bytes(data)
    try:
        report = typed_document(raw, tp, **document)
        check(report)
        return report
    except (InputError, ValueError) as exc:  # InputError carries the field; keep only its message
        raise error(getattr(exc, "message", str(exc))) from None


def read_results_file(path: str | Path, parse, *, error: type[InputError], max_bytes: int, field: str):
    """``parse`` of the file at ``path`` (a CLI option or a shipped file), read under ``max_bytes``."""
    try:
        raw = read_path_capped(str(path), max_bytes, field=field)
    except InputError as exc:
        raise error(exc.message) from None
    return parse(raw)


def newest_readable(directory: str | Path, read) -> tuple[object, str] | None:
    """The newest file in ``directory`` that ``read(path)`` accepts and its name (file names carry
    the date, so the last in name order is the newest), or None: a file the reader refuses (an
    InputError) is passed over, not shown."""
    for path in sorted(Path(directory).glob("*.json"), reverse=True):
        try:
            return read(path), path.name
        except InputError:
            continue
    return None


def check_target_names(targets, specs) -> None:
    """Targets distinct and among ``specs``' (a file from before a target existed lacks it; an
    unknown or repeated one is not this program's)."""
    names = [t.name for t in targets]
    expected = [s.name for s in specs]
    if len(set(names)) != len(names) or not set(names) <= set(expected):
        raise ValueError(f"targets must be distinct names from {expected}, got {names}")


def build_typed(tp, value, where: str):
    """Rebuild a value of type ``tp`` from parsed JSON, checking types all the way down; a
    ValueError's message starts with the offending path (``where`` and the fields below it)."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return build_typed(inner[0], value, where)
    if origin is tuple:
        if not isinstance(value, list):
            raise ValueError(f"{where}: expected a list, got {type(value).__name__}")
        item = typing.get_args(tp)[0]
        return tuple(build_typed(item, v, f"{where}[{i}]") for i, v in enumerate(value))
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ValueError(f"{where}: expected an object, got {type(value).__name__}")
        hints = typing.get_type_hints(tp)
        names = {f.name for f in dataclasses.fields(tp)}
        unknown = sorted(set(value) - names)
        if unknown:
            raise ValueError(f"{where}: unknown fields {unknown}")
        kwargs = {}
        for f in dataclasses.fields(tp):
            if f.name not in value:
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                    raise ValueError(f"{where}: missing field '{f.name}'")
                continue
            kwargs[f.name] = build_typed(hints[f.name], value[f.name], f"{where}.{f.name}")
        return tp(**kwargs)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is bool or tp is str:
        if not isinstance(value, tp):
            raise ValueError(f"{where}: expected {tp.__name__}, got {value!r}")
        return value
    raise TypeError(f"{where}: no loader for type {tp!r}")  # a bug in this module, not in the file

"""Find, load and validate hardware description files (TOML) of every kind.

A file's ``meta.kind`` names its schema (:data:`KINDS`): ``cim`` crossbar
chips (:mod:`tvm_cim.hardware.schema`) and ``pim`` bank-level PIM DRAM
(:mod:`tvm_pim.hardware.schema`).  Validation is pydantic's, on the schema's
field types; every error names the file, the dotted key and what was
expected, e.g.::

    HardwareDescriptionError: targets/my_chip.toml: key 'crossbar.rows':
    expected a positive integer, got '128x'

Presets are the ``*.toml`` files of the package data ``tvm_cim.targets``
(the repository's ``targets/`` folder, installed with the package), after
the folders in ``$TVM_CIM_TARGETS``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.resources
import json
import os
import tomllib
import types
import typing
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import pydantic
from annotated_types import Ge, Gt

# kind -> "module:class" of its schema (imported on first use, so that either
# backend can read every file without importing the other)
KINDS: dict[str, str] = {
    "cim": "tvm_cim.hardware.schema:CIMHardware",
    "pim": "tvm_pim.hardware.schema:PIMHardware",
}


class HardwareDescriptionError(ValueError):
    """A hardware description file is unreadable or does not match the schema."""


class UnknownHardwareError(ValueError):
    """A hardware name is neither a preset nor a readable file."""


def schema_of(kind: str) -> type:
    """The root schema class of a kind (``cim`` or ``pim``)."""
    module, _, cls = KINDS[kind].partition(":")
    return getattr(importlib.import_module(module), cls)


def not_modelled(kind: str) -> dict[str, str]:
    """Keys of a kind's files that the model does not read, with the reason."""
    module = KINDS[kind].partition(":")[0]
    return dict(getattr(importlib.import_module(module), "NOT_MODELLED", {}))


# --------------------------------------------------------------------------- presets
def targets_dirs() -> list[Path]:
    """Folders searched for preset files, in order: ``$TVM_CIM_TARGETS`` (``os.pathsep``-separated),
    then the presets installed with the package."""
    dirs = [Path(p) for p in os.environ.get("TVM_CIM_TARGETS", "").split(os.pathsep) if p]
    dirs.append(Path(str(importlib.resources.files("tvm_cim.targets"))))
    return [d for d in dirs if d.is_dir()]


def preset_files(kind: str | None = None) -> dict[str, Path]:
    """Map preset name -> file for every preset found, optionally of one kind."""
    found: dict[str, Path] = {}
    for d in targets_dirs():
        for p in sorted(d.glob("*.toml")):
            if p.stem in found:
                continue
            if kind is not None and _kind_of_file(str(p), p.stat().st_mtime) != kind:
                continue
            found[p.stem] = p
    return found


@lru_cache(maxsize=256)
def _kind_of_file(path: str, mtime: float) -> str | None:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh).get("meta", {}).get("kind")
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return None


def known_presets(kind: str | None = None) -> list[str]:
    """Names of the presets of a kind ('cim', 'pim' or None for all)."""
    return sorted(preset_files(kind))


def resolve(name_or_path: str | os.PathLike, kind: str | None = None) -> Path:
    """Turn a preset name or a file path into a file path.

    Raises
    ------
    UnknownHardwareError
        If it is neither; the message lists the known presets.
    """
    s = str(name_or_path)
    presets = preset_files(kind)
    if s in presets:
        return presets[s]
    p = Path(s).expanduser()
    if p.suffix == ".toml" or os.sep in s or p.exists():
        if not p.is_file():
            raise UnknownHardwareError(
                f"hardware file '{s}' does not exist. Known {kind or ''} presets: "
                f"{', '.join(sorted(presets))}".replace("  ", " ")
            )
        return p.resolve()
    raise UnknownHardwareError(
        f"unknown {kind.upper() + ' ' if kind else ''}hardware '{s}'. "
        f"Known presets: {', '.join(sorted(presets))}. "
        "Or give the path of a .toml hardware description file."
    )


# --------------------------------------------------------------------------- messages
def _fields(tp) -> dict:
    return getattr(tp, "__pydantic_fields__", {}) if isinstance(tp, type) else {}


def _describe(tp, metadata=()) -> str:
    """What a value of a schema type looks like, for error messages."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        base, *extra = typing.get_args(tp)
        return _describe(base, tuple(metadata) + tuple(extra))
    if origin in (typing.Union, types.UnionType):  # an optional key: what it is when given
        given = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(given) == 1:
            return _describe(given[0], metadata) + " (or the key left out)"
    meta = []
    for m in metadata:
        meta += list(getattr(m, "metadata", ())) + [m]
    positive = any(isinstance(m, Gt) and m.gt == 0 for m in meta)
    nonneg = any(isinstance(m, Ge) and m.ge == 0 for m in meta)
    sign = "a positive " if positive else "a non-negative " if nonneg else None
    if tp is bool:
        return "true or false"
    if tp is int:
        return (sign + "integer") if sign else "an integer"
    if tp is float:
        return (sign + "number") if sign else "a number"
    if tp is str:
        return "a string"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin is list:
        return f"a list of {_describe(typing.get_args(tp)[0]).removeprefix('a ').removeprefix('an ')}s"
    if origin is dict:
        return f"a table of {typing.get_args(tp)[1].__name__} entries"
    if _fields(tp):
        return f"a table [{tp.__name__}]"
    return str(tp)


def _field_at(cls, loc: tuple) -> tuple[Any, Any, str]:
    """Follow an error location through the schema: (owning class, field info or None, type)."""
    tp, owner, info = cls, cls, None
    for part in loc:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
            origin = typing.get_origin(tp)
        if isinstance(part, int) and origin is list:
            tp, info = typing.get_args(tp)[0], None
        elif origin is dict:
            if part == "[key]":
                return owner, None, typing.get_args(tp)[0]
            tp, info = typing.get_args(tp)[1], None
        elif part in _fields(tp):
            owner, info = tp, _fields(tp)[part]
            tp = info.annotation if not info.metadata else typing.Annotated[(info.annotation, *info.metadata)]
        else:
            return tp, None, None
    return owner, info, tp


def _message(cls, err: dict, where: str) -> str:
    loc = tuple(err["loc"])
    dotted = ".".join(str(p) for p in loc if p != "[key]")
    kind = err["type"]
    if kind in ("unexpected_keyword_argument", "extra_forbidden"):
        owner, _, _ = _field_at(cls, loc[:-1])
        names = sorted(n for n in _fields(owner) if n != "source_path")
        return f"{where}: key '{dotted}': unknown key; expected one of {', '.join(names)}"
    owner, info, tp = _field_at(cls, loc)
    if loc and loc[-1] == "[key]":
        return f"{where}: key '{dotted}': expected a name, {_describe(tp)}, got {loc[-2]!r}"
    expected = _describe(tp) if tp is not None else err["msg"]
    if kind == "finite_number":
        expected = "a finite number"
    if kind == "missing":
        doc = f" ({info.description})" if info is not None and info.description else ""
        return f"{where}: key '{dotted}': missing; expected {expected}{doc}"
    return f"{where}: key '{dotted}': expected {expected}, got {err['input']!r}"


# --------------------------------------------------------------------------- loading
def parse(data: dict, where: str = "<hardware>"):
    """Validate a decoded description (a dict as read from TOML or JSON).

    Returns
    -------
    CIMHardware or PIMHardware
    """
    if not isinstance(data, dict):
        raise HardwareDescriptionError(f"{where}: expected a table at top level, got {type(data).__name__}")
    meta = data.get("meta")
    if not isinstance(meta, dict) or "kind" not in meta:
        raise HardwareDescriptionError(f"{where}: key 'meta.kind': missing; expected one of 'cim', 'pim'")
    kind = meta["kind"]
    if kind not in KINDS:
        raise HardwareDescriptionError(f"{where}: key 'meta.kind': expected one of 'cim', 'pim', got {kind!r}")
    cls = schema_of(kind)
    data = {k: v for k, v in data.items() if k != "source_path"}
    try:
        hw = pydantic.TypeAdapter(cls).validate_python(data)
    except pydantic.ValidationError as e:
        raise HardwareDescriptionError(_message(cls, e.errors()[0], where)) from None
    for k, expected, got in hw.problems():
        raise HardwareDescriptionError(f"{where}: key '{k}': expected {expected}, got {got!r}")
    return dataclasses.replace(hw, source_path=where)


@lru_cache(maxsize=64)
def _load_file(path: str, mtime: float):
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as e:
        raise HardwareDescriptionError(f"{path}: cannot read hardware file: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise HardwareDescriptionError(f"{path}: not valid TOML: {e}") from None
    except UnicodeDecodeError as e:
        raise HardwareDescriptionError(f"{path}: not valid TOML: not UTF-8 text ({e.reason} at byte {e.start})") from None
    return parse(data, path)


def load(name_or_path: str | os.PathLike, kind: str | None = None):
    """Load a hardware description by preset name or file path.

    Parameters
    ----------
    name_or_path : str or os.PathLike
        A preset name (see :func:`known_presets`) or the path of a TOML file.
    kind : {'cim', 'pim', None}
        If given, the description must be of this kind.

    Returns
    -------
    CIMHardware or PIMHardware
        The validated description.

    Raises
    ------
    UnknownHardwareError
        Unknown preset name; the message lists the known presets.
    HardwareDescriptionError
        Unreadable or malformed file; the message names the file, the key and
        what was expected.
    """
    path = resolve(name_or_path, kind)
    hw = _load_file(str(path), path.stat().st_mtime)
    if kind is not None and hw.meta.kind != kind:
        raise HardwareDescriptionError(
            f"{path}: key 'meta.kind': expected {kind!r} for a {kind} target, got {hw.meta.kind!r}"
        )
    return hw


def to_dict(hw) -> dict:
    """The description as plain data (the inverse of :func:`parse`)."""
    d = dataclasses.asdict(hw)
    d.pop("source_path", None)
    return d


def to_json(hw) -> str:
    """Serialise a description to compact JSON (embedded in built executables)."""
    return json.dumps(to_dict(hw), sort_keys=True, separators=(",", ":"))


@lru_cache(maxsize=64)
def from_json(text: str):
    """Inverse of :func:`to_json`."""
    return parse(json.loads(text), "<embedded hardware description>")


def digest(hw) -> str:
    """A short hash of everything a description says (keys caches and tuned databases)."""
    return hashlib.sha256(to_json(hw).encode()).hexdigest()[:16]


def describe_schema(kind: str = "cim") -> str:
    """Human-readable listing of every key of a kind's schema, with units and meaning, and what is not modelled."""
    lines: list[str] = []

    def walk(cls, prefix, depth):
        for name, info in _fields(cls).items():
            if name == "source_path":
                continue
            tp = info.annotation
            dotted = f"{prefix}{name}"
            extra = info.json_schema_extra or {}
            unit = f" [{extra['unit']}]" if isinstance(extra, dict) and extra.get("unit") else ""
            req = " (required)" if info.is_required() else ""
            full = typing.Annotated[(tp, *info.metadata)] if info.metadata else tp
            lines.append(f"{'  ' * depth}{dotted}{unit}{req}: {info.description or _describe(full)}")
            if _fields(tp):
                walk(tp, dotted + ".", depth + 1)
            elif typing.get_origin(tp) is dict and _fields(typing.get_args(tp)[1]):
                walk(typing.get_args(tp)[1], dotted + ".<name>.", depth + 1)

    walk(schema_of(kind), "", 0)
    skipped = not_modelled(kind)
    if skipped:
        lines.append("")
        lines.append("Not modelled (accepted, not read by the compiler or simulator):")
        lines += [f"  {k}: {why}" for k, why in sorted(skipped.items())]
    return "\n".join(lines)

"""Load and validate hardware description files (TOML) against the schema.

Every error names the file, the dotted key and what was expected, e.g.::

    HardwareDescriptionError: targets/my_chip.toml: key 'crossbar.rows':
    expected a positive integer, got '128x'
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tomllib
import typing
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from . import schema

_POSITIVE_HINT = {
    # keys that must be strictly positive; everything numeric must be >= 0
    "rows", "cols", "rows_active", "cell_bits", "dac_bits", "adc_bits", "adcs", "weight_bits",
    "input_bits", "crossbars", "cores", "frequency_mhz", "capacity_kb", "bandwidth_bits",
    "ops_per_cycle", "stacks", "channels_per_stack", "bank_groups", "banks_per_bank_group",
    "banks_per_core", "simd_lanes", "grf_entries", "row_bytes", "column_bytes", "rows_per_bank",
    "tck_ns", "register_bits", "bandwidth_gbs", "tflops_fp16", "host_bus_bandwidth_gbs",
    "link_bandwidth_bits", "offchip_bandwidth_bits",
}


class HardwareDescriptionError(ValueError):
    """A hardware description file is unreadable or does not match the schema."""


class UnknownHardwareError(ValueError):
    """A hardware name is neither a preset nor a readable file."""


def targets_dirs() -> list[Path]:
    """Directories searched for preset files, in order.

    ``$TVM_CIM_TARGETS`` (``os.pathsep``-separated) comes first, then the
    repository's ``targets/`` directory, then the copy installed with the
    package under ``<prefix>/share/tvm_cim/targets``.
    """
    import sys

    dirs = [Path(p) for p in os.environ.get("TVM_CIM_TARGETS", "").split(os.pathsep) if p]
    dirs.append(Path(__file__).resolve().parents[2] / "targets")
    dirs.append(Path(sys.prefix) / "share" / "tvm_cim" / "targets")
    return [d for d in dirs if d.is_dir()]


def preset_files(kind: str | None = None) -> dict[str, Path]:
    """Map preset name -> file for every preset found, optionally of one kind."""
    found: dict[str, Path] = {}
    for d in targets_dirs():
        for p in sorted(d.glob("*.toml")):
            name = p.stem
            if name in found:
                continue
            if kind is not None:
                try:
                    with open(p, "rb") as fh:
                        file_kind = tomllib.load(fh).get("meta", {}).get("kind")
                except (OSError, tomllib.TOMLDecodeError):
                    continue
                if file_kind != kind:
                    continue
            found[name] = p
    return found


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


# --------------------------------------------------------------------------- validation
def _describe(tp) -> str:
    origin = typing.get_origin(tp)
    if tp is bool:
        return "true or false"
    if tp is int:
        return "an integer"
    if tp is float:
        return "a number"
    if tp is str:
        return "a string"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin is list:
        return f"a list of {_describe(typing.get_args(tp)[0]).removeprefix('a ').removeprefix('an ')}s"
    if origin is dict:
        return f"a table of {typing.get_args(tp)[1].__name__} entries"
    if dataclasses.is_dataclass(tp):
        return f"a table [{tp.__name__}]"
    return str(tp)


def _convert(tp, value: Any, key: str, where: str):
    def fail(expected: str | None = None):
        raise HardwareDescriptionError(
            f"{where}: key '{key}': expected {expected or _describe(tp)}, got {value!r}"
        )

    origin = typing.get_origin(tp)
    leaf = key.rsplit(".", 1)[-1]
    if tp is bool:
        if not isinstance(value, bool):
            fail()
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            fail("a positive integer" if leaf in _POSITIVE_HINT else "a non-negative integer")
        if value < 0 or (leaf in _POSITIVE_HINT and value <= 0):
            fail("a positive integer" if leaf in _POSITIVE_HINT else "a non-negative integer")
        return value
    if tp is float:
        if isinstance(value, float) and not math.isfinite(value):
            fail("a finite number")
        if isinstance(value, bool) or not isinstance(value, int | float):
            fail("a positive number" if leaf in _POSITIVE_HINT else "a non-negative number")
        if value < 0 or (leaf in _POSITIVE_HINT and value <= 0):
            fail("a positive number" if leaf in _POSITIVE_HINT else "a non-negative number")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            fail()
        return value
    if origin is Literal:
        if value not in typing.get_args(tp):
            fail()
        return value
    if origin is list:
        if not isinstance(value, list):
            fail()
        (elem,) = typing.get_args(tp)
        return [_convert(elem, v, f"{key}[{i}]", where) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            fail()
        _, elem = typing.get_args(tp)
        return {k: _convert(elem, v, f"{key}.{k}", where) for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            fail()
        return _build(tp, value, key, where)
    raise TypeError(f"unsupported schema type {tp}")  # pragma: no cover - schema bug


@lru_cache(maxsize=None)
def _hints(cls) -> dict[str, Any]:
    return typing.get_type_hints(cls, vars(schema))


def _build(cls, table: dict, prefix: str, where: str):
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name != "source_path"}
    unknown = sorted(set(table) - set(fields))
    if unknown:
        k = f"{prefix}.{unknown[0]}" if prefix else unknown[0]
        raise HardwareDescriptionError(
            f"{where}: key '{k}': unknown key; expected one of {', '.join(sorted(fields))}"
        )
    kwargs = {}
    for name, f in fields.items():
        key = f"{prefix}.{name}" if prefix else name
        if name not in table:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise HardwareDescriptionError(
                    f"{where}: key '{key}': missing; expected {_describe(hints[name])}"
                    + (f" ({f.metadata['doc']})" if f.metadata.get("doc") else "")
                )
            continue
        kwargs[name] = _convert(hints[name], table[name], key, where)
    return cls(**kwargs)


def _check_consistency(hw, where: str) -> None:
    def fail(key, expected, got):
        raise HardwareDescriptionError(f"{where}: key '{key}': expected {expected}, got {got!r}")

    if isinstance(hw, schema.CIMHardware):
        unknown_ops = sorted(set(hw.ops) - set(schema.CIM_OPS))
        if unknown_ops:
            fail(f"ops.{unknown_ops[0]}", "an operation name, one of " + ", ".join(schema.CIM_OPS), unknown_ops[0])
        xb = hw.crossbar
        if xb.rows_active > xb.rows:
            fail("crossbar.rows_active", f"at most crossbar.rows ({xb.rows})", xb.rows_active)
        if xb.dac_bits > xb.input_bits:
            fail("crossbar.dac_bits", f"at most crossbar.input_bits ({xb.input_bits})", xb.dac_bits)
        if xb.cell_bits > xb.weight_bits:
            fail("crossbar.cell_bits", f"at most crossbar.weight_bits ({xb.weight_bits})", xb.cell_bits)
        if hw.dual_mode.switchable_arrays > hw.total_crossbars:
            fail(
                "dual_mode.switchable_arrays",
                f"at most the chip's crossbars ({hw.total_crossbars})",
                hw.dual_mode.switchable_arrays,
            )
    else:
        if hw.group.bank_groups * hw.group.banks_per_bank_group % hw.core.banks_per_core:
            fail(
                "core.banks_per_core",
                "a divisor of the banks per group "
                f"({hw.group.bank_groups * hw.group.banks_per_bank_group})",
                hw.core.banks_per_core,
            )


def parse(data: dict, where: str = "<hardware>") -> schema.HardwareDescription:
    """Validate a decoded description (a dict as read from TOML or JSON)."""
    if not isinstance(data, dict):
        raise HardwareDescriptionError(f"{where}: expected a table at top level, got {type(data).__name__}")
    meta = data.get("meta")
    if not isinstance(meta, dict) or "kind" not in meta:
        raise HardwareDescriptionError(f"{where}: key 'meta.kind': missing; expected one of 'cim', 'pim'")
    kind = meta["kind"]
    cls = {"cim": schema.CIMHardware, "pim": schema.PIMHardware}.get(kind)
    if cls is None:
        raise HardwareDescriptionError(f"{where}: key 'meta.kind': expected one of 'cim', 'pim', got {kind!r}")
    data = {k: v for k, v in data.items() if k != "source_path"}
    hw = _build(cls, data, "", where)
    _check_consistency(hw, where)
    return dataclasses.replace(hw, source_path=where)


@lru_cache(maxsize=64)
def _load_file(path: str, mtime: float) -> schema.HardwareDescription:
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


def load(name_or_path: str | os.PathLike, kind: str | None = None) -> schema.HardwareDescription:
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


def to_dict(hw: schema.HardwareDescription) -> dict:
    """The description as plain data (the inverse of :func:`parse`)."""
    d = dataclasses.asdict(hw)
    d.pop("source_path", None)
    return d


def to_json(hw: schema.HardwareDescription) -> str:
    """Serialise a description to compact JSON (embedded in built executables)."""
    return json.dumps(to_dict(hw), sort_keys=True, separators=(",", ":"))


@lru_cache(maxsize=64)
def from_json(text: str) -> schema.HardwareDescription:
    """Inverse of :func:`to_json`."""
    return parse(json.loads(text), "<embedded hardware description>")


def describe_schema(kind: str = "cim") -> str:
    """Human-readable listing of every key of the schema, with units and meaning."""
    cls = schema.CIMHardware if kind == "cim" else schema.PIMHardware
    lines: list[str] = []

    def walk(c, prefix, depth):
        hints = _hints(c)
        for f in dataclasses.fields(c):
            if f.name == "source_path":
                continue
            tp = hints[f.name]
            key = f"{prefix}{f.name}"
            unit = f" [{f.metadata['unit']}]" if f.metadata.get("unit") else ""
            req = "" if (f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING) else " (required)"
            lines.append(f"{'  ' * depth}{key}{unit}{req}: {f.metadata.get('doc', '') or _describe(tp)}")
            if dataclasses.is_dataclass(tp):
                walk(tp, key + ".", depth + 1)
            elif typing.get_origin(tp) is dict and dataclasses.is_dataclass(typing.get_args(tp)[1]):
                walk(typing.get_args(tp)[1], key + ".<name>.", depth + 1)

    walk(cls, "", 0)
    return "\n".join(lines)

"""Tests for the hardware presets in ``targets/`` and the description loader.

Covers: every preset loads with the right kind, provenance and file name; the
exact preset sets; computing modes; every class of malformed file produces a
:class:`HardwareDescriptionError` (or :class:`UnknownHardwareError`) naming the
file, the dotted key and what was expected; unknown preset names list the
known presets; user-written files load by path; JSON round trips.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import pathlib
import tomllib

import pytest

from tvm_cim.common import hardware as loader
from tvm_cim.common.hardware import HardwareDescriptionError, UnknownHardwareError
from tvm_cim.hardware.schema import CIMHardware
from tvm_pim.hardware.schema import PIMHardware

REPO = pathlib.Path(__file__).resolve().parents[1]
TARGETS = REPO / "targets"

CIM_PRESETS = {"prime", "isaac", "puma", "dynaplasia", "jia21", "jain21", "miredo", "pimcomp-a", "pimcomp-b", "pimcomp-c"}
PIM_PRESETS = {"hbm-pim", "hbm-pim-hbm3", "attacc", "attacc-unconstrained"}
ALL_PRESETS = sorted(CIM_PRESETS | PIM_PRESETS)


@pytest.fixture(autouse=True)
def _only_repo_targets(monkeypatch):
    """Search only the repository's targets/ (no user overrides) and start with a cold cache."""
    monkeypatch.delenv("TVM_CIM_TARGETS", raising=False)
    loader._load_file.cache_clear()
    yield
    loader._load_file.cache_clear()


# --------------------------------------------------------------------------- helpers
def _toml_key(k: str) -> str:
    bare = k and all(c.isalnum() or c in "-_" for c in k)
    return k if bare else json.dumps(k)


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string is a valid TOML basic string
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(type(v))


def dump_toml(data: dict) -> str:
    """Minimal TOML writer: one [table] per top-level table, inline tables below."""
    lines = []
    for top, table in data.items():
        if not isinstance(table, dict):
            lines.append(f"{_toml_key(top)} = {_toml_value(table)}")
    for top, table in data.items():
        if isinstance(table, dict):
            lines.append(f"\n[{_toml_key(top)}]")
            lines.extend(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in table.items())
    return "\n".join(lines) + "\n"


def preset_data(name: str) -> dict:
    with open(TARGETS / f"{name}.toml", "rb") as fh:
        return tomllib.load(fh)


def write(tmp_path: pathlib.Path, data: dict, filename: str = "chip.toml") -> pathlib.Path:
    path = tmp_path / filename
    path.write_text(dump_toml(data))
    return path


def set_key(data: dict, dotted: str, value) -> dict:
    data = copy.deepcopy(data)
    *parents, leaf = dotted.split(".")
    node = data
    for p in parents:
        node = node[p]
    node[leaf] = value
    return data


def del_key(data: dict, dotted: str) -> dict:
    data = copy.deepcopy(data)
    *parents, leaf = dotted.split(".")
    node = data
    for p in parents:
        node = node[p]
    del node[leaf]
    return data


def assert_names(message: str, path: pathlib.Path, key: str | None):
    assert str(path) in message, message
    if key is not None:
        assert f"'{key}'" in message, message
        assert "expected" in message, message


# --------------------------------------------------------------------------- presets
def test_dump_toml_round_trips_every_preset():
    # The helper used to write malformed files must reproduce a preset exactly.
    for name in ALL_PRESETS:
        data = preset_data(name)
        assert tomllib.loads(dump_toml(data)) == data


def test_preset_sets_are_exact():
    assert set(loader.known_presets("cim")) == CIM_PRESETS
    assert set(loader.known_presets("pim")) == PIM_PRESETS
    assert set(loader.known_presets()) == CIM_PRESETS | PIM_PRESETS


@pytest.mark.parametrize("name", ALL_PRESETS)
def test_preset_loads_with_provenance(name):
    hw = loader.load(name)
    expected_kind = "cim" if name in CIM_PRESETS else "pim"
    assert hw.meta.kind == expected_kind
    assert isinstance(hw, CIMHardware if expected_kind == "cim" else PIMHardware)
    assert hw.meta.name == name
    assert loader.preset_files()[name].stem == hw.meta.name
    assert pathlib.Path(hw.source_path).name == f"{name}.toml"
    assert hw.meta.sources and all(s.strip() for s in hw.meta.sources)
    assert hw.meta.description.strip()
    # the kind filter agrees with the file
    assert loader.load(name, kind=expected_kind) == hw


@pytest.mark.parametrize("name", ALL_PRESETS)
def test_preset_states_its_assumptions(name):
    # every preset takes at least one figure that is not published; it must say so
    hw = loader.load(name)
    assert hw.meta.assumptions and all(a.strip() for a in hw.meta.assumptions)


@pytest.mark.parametrize("name", sorted(PIM_PRESETS))
def test_pim_preset_is_consistent(name):
    hw = loader.load(name)
    assert hw.banks_per_group % hw.core.banks_per_core == 0
    assert hw.cores_per_group * hw.core.banks_per_core == hw.banks_per_group
    assert hw.commands, "a PIM preset must list its command set"
    for cmd in ("ACT", "PRE", "RD", "WR"):
        assert cmd in hw.commands
    assert hw.dram.timing.trc >= hw.dram.timing.tras


def test_computing_modes():
    assert loader.load("jia21").chip.computing_mode == "core"
    assert loader.load("jain21").chip.computing_mode == "wordline"
    assert loader.load("isaac").chip.computing_mode == "crossbar"
    assert loader.load("puma").chip.computing_mode == "crossbar"
    assert loader.load("dynaplasia").chip.computing_mode == "crossbar"


def test_main_figures():
    isaac = loader.load("isaac")
    assert (isaac.chip.cores, isaac.core.crossbars) == (768, 16)
    assert (isaac.crossbar.rows, isaac.crossbar.cols, isaac.crossbar.rows_active) == (128, 128, 8)
    assert (isaac.crossbar.cell_bits, isaac.crossbar.dac_bits, isaac.crossbar.adc_bits) == (2, 1, 8)
    assert isaac.chip.alu.ops_per_cycle == isaac.core.alu.ops_per_cycle == 1024
    assert isaac.chip.global_buffer.bandwidth_bits == 384
    assert isaac.core.local_buffer.bandwidth_bits == 8192
    assert isaac.crossbar.weight_encoding == "offset"
    assert isaac.crossbar.device.type == "reram"

    puma = loader.load("puma")
    assert (puma.chip.cores, puma.core.crossbars) == (138, 128)
    assert puma.chip.frequency_mhz == 1000.0
    assert puma.core.local_buffer.capacity_kb == 64.0

    dyn = loader.load("dynaplasia")
    assert dyn.total_crossbars == 96 == dyn.dual_mode.switchable_arrays
    assert (dyn.crossbar.rows, dyn.crossbar.cols) == (320, 320)
    assert dyn.dual_mode.to_memory_cycles == dyn.dual_mode.to_compute_cycles == 1
    assert dyn.core.local_buffer.capacity_kb * dyn.chip.cores == 80.0
    assert dyn.crossbar.device.type == "edram"

    jia = loader.load("jia21")
    assert jia.total_crossbars == 16
    assert (jia.crossbar.rows, jia.crossbar.cols, jia.crossbar.rows_active) == (1152, 256, 1152)
    assert jia.crossbar.device.type == "sram" and jia.crossbar.adc_bits == 8

    jain = loader.load("jain21")
    assert (jain.chip.cores, jain.core.crossbars) == (4, 2)
    assert (jain.crossbar.rows, jain.crossbar.cols, jain.crossbar.rows_active) == (256, 64, 32)
    assert jain.crossbar.device.type == "sram"

    hbm = loader.load("hbm-pim")
    assert (hbm.group.level, hbm.system.channels_per_stack) == ("pseudo_channel", 16)
    assert hbm.banks_per_group == 16 and hbm.core.banks_per_core == 2
    assert (hbm.core.simd_lanes, hbm.core.grf_entries, hbm.core.crf_entries) == (16, 16, 32)
    assert hbm.core.frequency_mhz == 300.0
    t = hbm.dram.timing
    assert (t.trcd, t.trp, t.tras, t.trc, t.tccd_l) == (14, 14, 33, 47, 4)
    for op in ("ADD", "MUL", "MAC", "MAD", "MOV", "FILL", "NOP", "JUMP", "EXIT"):
        assert hbm.commands[op].latency_cycles == t.tccd_l
    assert hbm.system.host.tflops_fp16 == 312.0 and hbm.system.host.bandwidth_gbs == 2039.0

    att = loader.load("attacc")
    assert att.system.stacks == 5 and att.system.channels_per_stack == 16
    assert att.banks_per_group == 64 and att.cores_per_group == 64
    assert att.group.softmax_unit and not hbm.group.softmax_unit
    assert att.system.host_bus_bandwidth_gbs == 670.4
    t = att.dram.timing
    # tCK = 1 / (5.2 GT/s / 4): the AttAcc simulator derives it from the data rate (QDR pins)
    assert (t.tck_ns, t.tcl, t.trcd, t.trp, t.tccd_l) == (0.769, 19, 19, 19, 4)
    assert t.tck_ns == pytest.approx(4 / 5.2, rel=1e-3) and (t.tccd_ab, t.tccd_sb) == (6, 6)
    assert att.group.pseudo_channels == 2
    assert "MAC_AB" in att.commands and "SFM" in att.commands


# --------------------------------------------------------------------------- malformed files
@pytest.mark.parametrize(
    "preset, key",
    [
        ("isaac", "crossbar.rows"),
        ("isaac", "chip.global_buffer.bandwidth_bits"),
        ("isaac", "crossbar.device.read_latency_ns"),
        ("hbm-pim", "dram.timing.trcd"),
        ("attacc", "system.host.tflops_fp16"),
    ],
)
def test_missing_required_key(tmp_path, preset, key):
    path = write(tmp_path, del_key(preset_data(preset), key))
    with pytest.raises(HardwareDescriptionError) as e:
        loader.load(path)
    assert_names(str(e.value), path, key)
    assert "missing" in str(e.value)


@pytest.mark.parametrize(
    "preset, key, value",
    [
        ("isaac", "crossbar.rows", "128x"),
        ("isaac", "crossbar.rows", 128.5),
        ("isaac", "chip.frequency_mhz", "fast"),
        ("isaac", "chip.global_buffer.double_buffer", "yes"),
        ("isaac", "meta.sources", "one string instead of a list"),
        ("isaac", "ops.add.latency_cycles", "one"),
        ("hbm-pim", "core.simd_lanes", True),
        ("attacc", "commands.MAC_AB.latency_cycles", 4.5),
    ],
)
def test_wrong_type(tmp_path, preset, key, value):
    path = write(tmp_path, set_key(preset_data(preset), key, value))
    with pytest.raises(HardwareDescriptionError) as e:
        loader.load(path)
    assert_names(str(e.value), path, key)


@pytest.mark.parametrize(
    "preset, key, value",
    [
        ("isaac", "chip.frequency_mhz", -1.0),
        ("isaac", "crossbar.rows", -128),
        ("isaac", "crossbar.rows", 0),  # must be strictly positive
        ("isaac", "crossbar.device.read_energy_pj", -30.0),
        ("hbm-pim", "dram.timing.trcd", -14),
        ("attacc", "dram.act_energy_pj", -1.0),
    ],
)
def test_negative_number(tmp_path, preset, key, value):
    path = write(tmp_path, set_key(preset_data(preset), key, value))
    with pytest.raises(HardwareDescriptionError) as e:
        loader.load(path)
    assert_names(str(e.value), path, key)
    assert "positive" in str(e.value) or "non-negative" in str(e.value)


@pytest.mark.parametrize(
    "preset, key",
    [
        ("isaac", "crossbar.rowz"),
        ("isaac", "chip.frequncy_mhz"),
        ("isaac", "crossbar.device.read_latency"),
        ("hbm-pim", "dram.timing.trcdd"),
        ("attacc", "system.hosts"),
        ("isaac", "chips"),
    ],
)
def test_unknown_key(tmp_path, preset, key):
    path = write(tmp_path, set_key(preset_data(preset), key, 1))
    with pytest.raises(HardwareDescriptionError) as e:
        loader.load(path)
    assert_names(str(e.value), path, key)
    assert "unknown key" in str(e.value)


@pytest.mark.parametrize(
    "preset, key, value",
    [
        ("isaac", "chip.computing_mode", "xbar"),
        ("isaac", "crossbar.device.type", "rram"),
        ("isaac", "crossbar.adc_mode", "round"),
        ("isaac", "crossbar.weight_encoding", "twos_complement"),
        ("isaac", "chip.noc.topology", "torus"),
        ("isaac", "meta.kind", "gpu"),
        ("hbm-pim", "group.level", "bank"),
        ("attacc", "core.dtype", "fp16"),
    ],
)
def test_bad_literal(tmp_path, preset, key, value):
    path = write(tmp_path, set_key(preset_data(preset), key, value))
    with pytest.raises(HardwareDescriptionError) as e:
        loader.load(path)
    assert_names(str(e.value), path, key)
    assert repr(value) in str(e.value)


@pytest.mark.parametrize("value", [0, "8", 2.5])
def test_a_bad_optional_key_says_what_it_takes(tmp_path, value):
    """An optional key (``dataflow.output_bits``: absent means psum_bits) given a bad value: the message names the
    file, the key and what it takes, not the schema's type expression."""
    path = write(tmp_path, set_key(preset_data("miredo"), "dataflow.output_bits", value))
    with pytest.raises(HardwareDescriptionError) as e:
        loader.load(path)
    assert_names(str(e.value), path, "dataflow.output_bits")
    assert "expected a positive integer (or the key left out)" in str(e.value) and repr(value) in str(e.value)


@pytest.mark.parametrize(
    "preset, changes, key",
    [
        ("isaac", {"crossbar.rows_active": 129}, "crossbar.rows_active"),
        ("jain21", {"crossbar.rows_active": 257}, "crossbar.rows_active"),
        ("isaac", {"crossbar.dac_bits": 32}, "crossbar.dac_bits"),
        ("isaac", {"crossbar.cell_bits": 32}, "crossbar.cell_bits"),
        ("dynaplasia", {"dual_mode.switchable_arrays": 97}, "dual_mode.switchable_arrays"),
        ("hbm-pim", {"core.banks_per_core": 3}, "core.banks_per_core"),
    ],
)
def test_inconsistent_values(tmp_path, preset, changes, key):
    data = preset_data(preset)
    for k, v in changes.items():
        data = set_key(data, k, v)
    path = write(tmp_path, data)
    with pytest.raises(HardwareDescriptionError) as e:
        loader.load(path)
    assert_names(str(e.value), path, key)


def test_rows_active_may_equal_rows(tmp_path):
    path = write(tmp_path, set_key(preset_data("isaac"), "crossbar.rows_active", 128))
    assert loader.load(path).crossbar.rows_active == 128


@pytest.mark.parametrize(
    "text",
    [
        "[chip\ncores = 1\n",
        "[meta]\nname = \"x\nkind = \"cim\"\n",
        "[meta]\nname = 'x'\nname = 'y'\n",
        "this is not toml\n",
    ],
)
def test_invalid_toml_syntax(tmp_path, text):
    path = tmp_path / "broken.toml"
    path.write_text(text)
    with pytest.raises(HardwareDescriptionError) as e:
        loader.load(path)
    assert str(path) in str(e.value)
    assert "TOML" in str(e.value)


def test_missing_kind(tmp_path):
    path = write(tmp_path, del_key(preset_data("isaac"), "meta.kind"))
    with pytest.raises(HardwareDescriptionError) as e:
        loader.load(path)
    assert_names(str(e.value), path, "meta.kind")


def test_kind_mismatch(tmp_path):
    path = write(tmp_path, preset_data("isaac"))
    with pytest.raises(HardwareDescriptionError) as e:
        loader.load(path, kind="pim")
    assert_names(str(e.value), path, "meta.kind")


def test_nonexistent_path(tmp_path):
    path = tmp_path / "no_such_chip.toml"
    with pytest.raises(UnknownHardwareError) as e:
        loader.load(path)
    assert str(path) in str(e.value)
    nested = tmp_path / "missing_dir" / "chip.toml"
    with pytest.raises(UnknownHardwareError) as e:
        loader.load(str(nested))
    assert str(nested) in str(e.value)


def test_directory_is_not_a_hardware_file(tmp_path):
    path = tmp_path / "looks_like.toml"
    path.mkdir()
    with pytest.raises(UnknownHardwareError) as e:
        loader.load(path)
    assert str(path) in str(e.value)


def test_unreadable_file(tmp_path, monkeypatch):
    path = write(tmp_path, preset_data("isaac"))

    def deny(file, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(file))

    # the loader calls the builtin open(); shadow it inside the loader module only
    monkeypatch.setattr(loader, "open", deny, raising=False)
    with pytest.raises(HardwareDescriptionError) as e:
        loader.load(path)
    assert str(path) in str(e.value)
    assert "cannot read" in str(e.value)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root can read any file")
def test_unreadable_file_permissions(tmp_path):
    path = write(tmp_path, preset_data("isaac"))
    path.chmod(0)
    try:
        with pytest.raises(HardwareDescriptionError) as e:
            loader.load(path)
        assert str(path) in str(e.value)
    finally:
        path.chmod(0o644)


# --------------------------------------------------------------------------- names and user files
def test_unknown_preset_lists_known_presets():
    with pytest.raises(UnknownHardwareError) as e:
        loader.load("no-such-chip")
    msg = str(e.value)
    assert "no-such-chip" in msg
    for name in ALL_PRESETS:
        assert name in msg


def test_unknown_preset_of_a_kind_lists_that_kind():
    with pytest.raises(UnknownHardwareError) as e:
        loader.load("no-such-chip", kind="pim")
    msg = str(e.value)
    for name in PIM_PRESETS:
        assert name in msg
    with pytest.raises(UnknownHardwareError) as e:
        loader.load("no-such-chip", kind="cim")
    for name in CIM_PRESETS:
        assert name in str(e.value)


def test_user_file_loads_from_its_path(tmp_path):
    src = TARGETS / "isaac.toml"
    text = src.read_text()
    assert "rows_active = 8\n" in text
    path = tmp_path / "my_isaac.toml"
    path.write_text(text.replace("rows_active = 8\n", "rows_active = 16\n"))
    hw = loader.load(path)
    assert hw.crossbar.rows_active == 16
    assert hw.chip.cores == 768
    assert pathlib.Path(hw.source_path) == path.resolve()
    # the preset itself is unchanged
    assert loader.load("isaac").crossbar.rows_active == 8
    # and a string path works as well
    assert loader.load(str(path)) == hw


def test_user_file_with_its_own_name(tmp_path):
    data = set_key(preset_data("hbm-pim"), "meta.name", "my-pim")
    data = set_key(data, "system.stacks", 1)
    path = write(tmp_path, data, "my-pim.toml")
    hw = loader.load(path, kind="pim")
    assert hw.name == "my-pim" and hw.system.stacks == 1 and hw.groups == 16


def test_edited_file_is_reloaded(tmp_path):
    path = write(tmp_path, preset_data("jain21"))
    assert loader.load(path).crossbar.rows_active == 32
    path.write_text(dump_toml(set_key(preset_data("jain21"), "crossbar.rows_active", 16)))
    os.utime(path, (1, 1))  # make sure the mtime differs even on coarse clocks
    assert loader.load(path).crossbar.rows_active == 16


# --------------------------------------------------------------------------- serialisation
@pytest.mark.parametrize("name", ALL_PRESETS)
def test_json_round_trip(name):
    hw = loader.load(name)
    text = loader.to_json(hw)
    back = loader.from_json(text)
    assert type(back) is type(hw)
    assert loader.to_dict(back) == loader.to_dict(hw)
    assert loader.to_json(back) == text
    # equal as objects once the (non-serialised) source path is aligned
    assert dataclasses.replace(back, source_path=hw.source_path) == hw


@pytest.mark.parametrize("name", ALL_PRESETS)
def test_to_dict_parses_back(name):
    hw = loader.load(name)
    again = loader.parse(loader.to_dict(hw), hw.source_path)
    assert again == hw


# --------------------------------------------------------------------------- loader regressions
# Loader and schema bugs found while writing the presets, kept as
# regressions of loader bugs found while writing the presets.
def test_json_round_trip_is_plain_equal():
    hw = loader.load("prime")
    assert loader.from_json(loader.to_json(hw)) == hw


def test_nan_is_rejected(tmp_path):
    path = write(tmp_path, set_key(preset_data("isaac"), "chip.frequency_mhz", float("nan")))
    with pytest.raises(HardwareDescriptionError):
        loader.load(path)


def test_non_utf8_file_is_a_description_error(tmp_path):
    path = tmp_path / "latin1.toml"
    path.write_bytes(b"[meta]\nname = \"caf\xe9\"\nkind = \"cim\"\n")
    with pytest.raises(HardwareDescriptionError):
        loader.load(path)


def test_unknown_op_name_is_rejected(tmp_path):
    path = write(tmp_path, set_key(preset_data("isaac"), "ops.shift_ad", {"latency_cycles": 1, "energy_pj": 0.1}))
    with pytest.raises(HardwareDescriptionError) as e:
        loader.load(path)
    assert str(path) in str(e.value) and "ops.shift_ad" in str(e.value) and "expected" in str(e.value)


# --------------------------------------------------------------------------- every key is modelled or says why not
def _code_names():
    """Attribute names and string constants the model reads (outside validation of the schema)."""
    import ast

    attrs, strings = set(), set()
    for pkg in ("tvm_cim", "tvm_pim"):
        for path in (REPO / pkg).rglob("*.py"):
            if path.parts[-2:] == ("common", "hardware.py"):
                continue
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                if isinstance(node, ast.FunctionDef) and node.name == "problems":
                    node.body = []  # consistency checks validate keys; they do not model them
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute):
                    attrs.add(node.attr)
                elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                    strings.add(node.value)
    return attrs, strings


def _keys(table, prefix=""):
    for k, v in table.items():
        if isinstance(v, dict):
            yield from _keys(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}"


@pytest.mark.parametrize("name", ALL_PRESETS)
def test_every_preset_key_is_read_or_listed_as_not_modelled(name):
    kind = "cim" if name in CIM_PRESETS else "pim"
    skipped = loader.not_modelled(kind)
    attrs, strings = _code_names()
    unread = []
    for key in _keys({k: v for k, v in preset_data(name).items() if k != "meta"}):
        parts = key.split(".")
        if any(".".join(parts[:i]) in skipped for i in range(1, len(parts) + 1)):
            continue
        read = parts[-1] in attrs
        if parts[0] == "ops":  # per-operation costs are looked up by name
            read = read and parts[1] in strings
        if not read:
            unread.append(key)
    assert not unread, f"{name}: keys neither read by the model nor listed in NOT_MODELLED: {unread}"
    for key, why in skipped.items():
        assert why.strip(), key


def test_schema_listing_says_what_is_not_modelled():
    text = loader.describe_schema("cim")
    assert "Not modelled" in text and "crossbar.device.endurance_writes" in text


@pytest.mark.parametrize("name, chips, cores, xbs, size, mib", [
    ("pimcomp-a", 1, 168, 96, (128, 128), 63), ("pimcomp-b", 1, 138, 128, (128, 128), 69),
    ("pimcomp-c", 16, 4, 8, (512, 1024), 64)])
def test_pimcomp_presets_follow_table_5(name, chips, cores, xbs, size, mib):
    """PIMCOMP Table V: chips x cores x physical arrays of 2-bit cells; the capacity it states; 1 GHz, 16-bit."""
    hw = loader.load(name, kind="cim")
    assert (hw.system.chips, hw.chip.cores, hw.core.crossbars) == (chips, cores, xbs)
    assert (hw.crossbar.rows, hw.crossbar.cols, hw.crossbar.cell_bits) == (*size, 2)
    assert hw.cores == chips * cores and hw.total_crossbars == chips * cores * xbs
    cap_mib = hw.total_crossbars * size[0] * size[1] * 2 / 8 / 2**20
    assert round(cap_mib) == mib  # Table V: 63 / 69 / 64 MB
    assert hw.chip.frequency_mhz == 1000.0 and hw.crossbar.weight_bits == 16
    # a 16-bit weight takes 8 two-bit cells: one logical array = 8 physical ones (Table V counts physical)
    assert hw.cols_per_weight(16) == 8


def test_several_chips_are_used_by_the_cost_model():
    """Arch-C's chips: more crossbars, pooled global-buffer port, inputs over the slower inter-chip link."""
    from tvm_cim.hardware import cost

    c = loader.load("pimcomp-c", kind="cim")
    one = dataclasses.replace(c, system=dataclasses.replace(c.system, chips=1))
    assert c.total_crossbars == 16 * one.total_crossbars
    # 1 MB of input codes: the inter-chip link (51 b/cycle) is slower than the NoC link (64 b/cycle)
    assert cost.scatter(c, 1 << 20)[0] == pytest.approx(math.ceil(8 * (1 << 20) / 51))
    assert cost.scatter(one, 1 << 20)[0] == pytest.approx(math.ceil(8 * (1 << 20) / 64))
    assert cost.scatter(c, 1000)[1] > cost.scatter(one, 1000)[1]  # link energy
    assert cost.load_store(c, 1 << 20, False)[0] == pytest.approx(math.ceil(8 * (1 << 20) / (16 * 512)))
    assert cost.leakage_mw(c) == pytest.approx(16 * cost.leakage_mw(one))


def test_dynaplasia_dual_mode_figures_follow_table_2():
    """Memory-mode capacity is the array's cells, switches one cycle; costs come from the primitives."""
    from tvm_cim.hardware import cost

    dyn = loader.load("dynaplasia", kind="cim")
    assert dyn.memory_capacity_bytes == 320 * 320 // 8 == 12800
    assert cost.switchable(dyn, range(96)) and not cost.switchable(dyn, [96])
    ns, e = cost.switch(dyn, 10, to_memory=True)
    assert ns == dyn.cycle_ns and e == 10 * dyn.dual_mode.to_memory_energy_pj
    # 4 arrays at 32 b/cycle move 1000 bytes in ceil(8000 / 128) cycles
    ns, e = cost.memory_access(dyn, 1000, 4, write=False)
    assert ns == 63 * dyn.cycle_ns and e["xbmem"] == 8000 * dyn.dual_mode.memory_read_energy_pj_per_bit
    assert cost.write_rounds(dyn, 96) == 1
    ported = dataclasses.replace(dyn, dual_mode=dataclasses.replace(dyn.dual_mode, write_ports=8))
    assert cost.write_rounds(ported, 20) == 3

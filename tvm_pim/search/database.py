"""Tuned schedule databases and trained predictors: where they live, and how records are keyed.

Locations
---------
user
    ``$TVM_PIM_CACHE``, else ``~/.cache/tvm_pim``: one folder per device name
    holding the user's tuning output (a meta-schedule JSON database,
    ``database_workload.json`` and ``database_tuning_record.json``) and the
    trained predictor (``predictor.ubj``).  A root given explicitly
    (``--database DIR``, ``offload_options(database=DIR)``,
    ``tune(..., database=DIR)``) replaces it for databases.
shipped
    The package data ``tvm_pim.schedules`` (the repository's ``schedules/``),
    one folder per preset: read-only defaults, consulted after the user's
    database.  ``$TVM_PIM_SCHEDULES`` names another folder in its place (the
    tests point it at an empty one).  Refreshing it is an explicit maintainer
    command: ``python -m tvm_pim tune ... --update-shipped``.

Keys
----
A record stores a simulated time, which depends on the device description
and on the simulator's timing model.  So every record's workload is the
kernel's PrimFunc carrying the attribute ``pim.record_key`` =
:func:`record_key` (a hash of the description's digest and
:data:`tvm_pim.simulator.timing.TIMING_MODEL_VERSION`), and meta-schedule's
structural matching of workloads only finds records of this very device and
timing model.  A record of the same kernel under another key (an edited
hardware file, a newer timing model, or a database from before keys) is
*stale*: :func:`lookup` ignores it and reports it with a
:class:`StaleRecordWarning`.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import os
import warnings
from functools import lru_cache
from pathlib import Path

import tvm
from tvm.s_tir import meta_schedule as ms

from tvm_cim.common import hardware as loader
from tvm_cim.common.target import register_hardware

from ..compiler.kernels import KernelSpec, spec_of
from ..compiler.space import Draft, InfeasibleDraft, check_draft, draft_of
from ..cost.predictor import Predictor
from ..hardware.view import PimView
from ..simulator import timing

KEY_ATTR = "pim.record_key"
WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"
PREDICTOR_FILE = "predictor.ubj"


class StaleRecordWarning(UserWarning):
    """A tuned record made for another hardware description or timing model was ignored."""


# ============================================================================ locations
def user_root() -> Path:
    """The user's cache: ``$TVM_PIM_CACHE``, else ``~/.cache/tvm_pim``."""
    return Path(os.environ.get("TVM_PIM_CACHE") or Path.home() / ".cache" / "tvm_pim")


def shipped_root() -> Path:
    """The read-only databases installed with the package (``$TVM_PIM_SCHEDULES`` replaces them)."""
    env = os.environ.get("TVM_PIM_SCHEDULES")
    return Path(env) if env else Path(str(importlib.resources.files("tvm_pim.schedules")))


def user_folder(hw_name: str, database: str | os.PathLike | None = None) -> Path:
    """Where the user's tuning output for a device goes: ``<database or user root>/<hw>``."""
    return Path(database if database else user_root()) / hw_name


def folders(hw_name: str, database: str | os.PathLike | None = None) -> list[Path]:
    """The database folders consulted for a device, in order: the user's, then the shipped one."""
    out = [user_folder(hw_name, database), shipped_root() / hw_name]
    return [f for i, f in enumerate(out) if f.resolve() not in {g.resolve() for g in out[:i]}]


def _stamp(folder: Path) -> tuple | None:
    """What identifies the current content of a database folder (None if it has no database)."""
    files = [folder / WORKLOAD_FILE, folder / RECORD_FILE]
    try:
        return tuple((st.st_mtime_ns, st.st_size) for st in (f.stat() for f in files))
    except OSError:
        return None


def state(hw_name: str, database: str | os.PathLike | None = None) -> tuple:
    """The content of every database and of the predictor a device's choices depend on (a cache key)."""
    files = [f for d in folders(hw_name, database) for f in (d / WORKLOAD_FILE, d / RECORD_FILE)]
    files.append(predictor_path(hw_name))
    return tuple((str(f), f.stat().st_mtime_ns if f.exists() else None) for f in files)


# ============================================================================ keys
def record_key(view: PimView) -> str:
    """The key of a device's records: a hash of its description and of the timing model's version."""
    return hashlib.sha256(f"{view.digest}/timing-model-{timing.TIMING_MODEL_VERSION}".encode()).hexdigest()[:16]


def keyed_workload(spec: KernelSpec, view: PimView) -> tvm.IRModule:
    """The workload under which a kernel's records are kept for a device (:data:`KEY_ATTR` set)."""
    return tvm.IRModule({"main": spec.prim_func().with_attr(KEY_ATTR, record_key(view))})


def key_of(mod: tvm.IRModule) -> str | None:
    """The record key a workload carries (None for a database written before keys)."""
    attrs = mod["main"].attrs
    return str(attrs[KEY_ATTR]) if attrs is not None and KEY_ATTR in attrs else None


def target_of(view: PimView) -> tvm.target.Target:
    """The target records of a device are committed with (its preset name, or its file)."""
    presets = loader.known_presets("pim")
    is_preset = view.name in presets and PimView(loader.load(view.name, kind="pim")).digest == view.digest
    return tvm.target.Target(register_hardware("pim", view.name if is_preset else view.hw.source_path))


# ============================================================================ reading
@lru_cache(maxsize=32)
def _open(folder: str, stamp: tuple):
    """A read-only handle on a database folder (reopened whenever its files change)."""
    d = Path(folder)
    return ms.database.JSONDatabase(str(d / WORKLOAD_FILE), str(d / RECORD_FILE), allow_missing=False,
                                    module_equality="structural")


@lru_cache(maxsize=32)
def _keys_by_kernel(folder: str, stamp: tuple) -> dict[str, frozenset]:
    """Kernel (spec JSON) -> the record keys a database holds records under."""
    out: dict[str, set] = {}
    for rec in _open(folder, stamp).get_all_tuning_records():
        mod = rec.workload.mod
        out.setdefault(spec_of(mod).to_json(), set()).add(key_of(mod))
    return {k: frozenset(v) for k, v in out.items()}


def _best_draft(db, mod: tvm.IRModule) -> Draft | None:
    if not db.has_workload(mod):
        return None
    recs = db.get_top_k(db.commit_workload(mod), 1)
    if not recs:
        return None
    sch = tvm.s_tir.Schedule(mod)
    recs[0].trace.apply_to_schedule(sch, remove_postproc=True)
    return draft_of(sch)


def stale_keys(folder: Path, spec: KernelSpec, view: PimView) -> list[str]:
    """Keys of records of ``spec`` in a folder that are not this device's current key."""
    stamp = _stamp(folder)
    if stamp is None:
        return []
    keys = _keys_by_kernel(str(folder), stamp).get(spec.to_json(), frozenset())
    return sorted(str(k) for k in keys if k != record_key(view))


def lookup(spec: KernelSpec, view: PimView, database: str | os.PathLike | None = None) -> Draft | None:
    """The tuned draft of a kernel on a device: the user's record, else the shipped one, else None.

    Records of the kernel made for another description or timing model are
    ignored, with a :class:`StaleRecordWarning`.

    Parameters
    ----------
    spec : KernelSpec
    view : PimView
    database : str or os.PathLike, optional
        A database root to consult instead of the user's cache.

    Returns
    -------
    Draft or None
    """
    mod = keyed_workload(spec, view)
    for folder in folders(view.name, database):
        stamp = _stamp(folder)
        if stamp is None:
            continue
        d = _best_draft(_open(str(folder), stamp), mod)
        if d is not None:
            try:
                check_draft(spec, view, d)
            except InfeasibleDraft:
                continue
            return d
        stale = stale_keys(folder, spec, view)
        if stale:
            warnings.warn(
                f"{folder}: ignored the tuned record of {spec.name}: it was made for another hardware "
                f"description or timing model (record key {', '.join(map(str, stale))}; {view.name} now has "
                f"{record_key(view)}). Re-tune it with python -m tvm_pim tune.",
                StaleRecordWarning,
                stacklevel=2,
            )
    return None


# ============================================================================ writing
def save_record(view: PimView, spec: KernelSpec, record, folder: Path) -> bool:
    """Keep ``record`` as the best of its kernel for this device in a database folder.

    Parameters
    ----------
    view : PimView
    spec : KernelSpec
    record : meta_schedule.database.TuningRecord
        A record of ``spec`` (its trace and measured time are kept).
    folder : pathlib.Path
        The database folder (created if needed).

    Returns
    -------
    bool
        Whether the record was added (False: the folder holds a record at least as fast).
    """
    folder.mkdir(parents=True, exist_ok=True)
    db = ms.database.JSONDatabase(str(folder / WORKLOAD_FILE), str(folder / RECORD_FILE), allow_missing=True,
                                  module_equality="structural")
    wl = db.commit_workload(keyed_workload(spec, view))
    old = db.get_top_k(wl, 1)
    new_secs = float(record.run_secs[0]) if record.run_secs else float("inf")
    if old and old[0].run_secs and float(old[0].run_secs[0]) <= new_secs:
        return False
    db.commit_tuning_record(ms.database.TuningRecord(record.trace, wl, record.run_secs, target_of(view),
                                                     record.args_info))
    return True


# ============================================================================ predictors
def predictor_path(hw_name: str) -> Path:
    """Where ``python -m tvm_pim predictor`` keeps a device's trained predictor (user cache)."""
    return user_root() / hw_name / PREDICTOR_FILE


@lru_cache(maxsize=8)
def _load_predictor(path: str, mtime_ns: int) -> Predictor | None:
    try:
        return Predictor.load(path)
    except ValueError:  # trained on another feature encoding
        return None


def load_predictor(hw_name: str) -> Predictor | None:
    """The trained predictor of a device, if there is one of this feature version.

    See :data:`tvm_pim.cost.features.FEATURE_VERSION`.
    """
    p = predictor_path(hw_name)
    if not p.exists():
        return None
    return _load_predictor(str(p), p.stat().st_mtime_ns)

"""Tuned databases: where they live, how records are keyed, and that stale records are never applied."""

from __future__ import annotations

import dataclasses
import importlib.resources
import warnings
from pathlib import Path

import numpy as np
import pytest
from tvm.s_tir import meta_schedule as ms

from tvm_pim import load
from tvm_pim.compiler import space
from tvm_pim.compiler.codegen import DCC, contract_plan, generate
from tvm_pim.compiler.kernels import KernelSpec
from tvm_pim.cost import features
from tvm_pim.cost.measure import evaluate
from tvm_pim.hardware.view import PimView
from tvm_pim.search import database
from tvm_pim.simulator import Simulator, timing

HBM = PimView(load("hbm-pim"))
SPEC = KernelSpec.make("gemv", b=1, m=1, n=512, k=256)


def _record(spec, view, draft):
    """A tuning record of one draft, measured on the simulator (what tuning would commit)."""
    ns = evaluate(spec, view, draft)[1]
    trace = space.schedule_of(spec, view, draft).trace
    wl = ms.database.Workload(database.keyed_workload(spec, view))
    return ms.database.TuningRecord(trace, wl, [ns * 1e-9], database.target_of(view),
                                    ms.arg_info.ArgInfo.from_prim_func(spec.prim_func()))


def _two_drafts(spec, view):
    drafts, _ = space.enumerate_drafts(spec, view)
    return drafts[0], drafts[-1]


def _edited(view: PimView) -> PimView:
    """The same device name with another DRAM timing (an edited hardware file)."""
    hw = view.hw
    tm = dataclasses.replace(hw.dram.timing, trcd=hw.dram.timing.trcd + 3)
    return PimView(dataclasses.replace(hw, dram=dataclasses.replace(hw.dram, timing=tm)))


def test_a_record_is_found_only_for_its_description_and_timing_model(tmp_path, monkeypatch):
    monkeypatch.setenv("TVM_PIM_CACHE", str(tmp_path))
    d, _ = _two_drafts(SPEC, HBM)
    assert database.save_record(HBM, SPEC, _record(SPEC, HBM, d), database.user_folder("hbm-pim"))
    assert (tmp_path / "hbm-pim" / "database_tuning_record.json").exists()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a current record raises no warning
        assert database.lookup(SPEC, HBM) == d
    # an edited hardware file under the same name: the record is stale, ignored and reported
    other = _edited(HBM)
    assert other.name == HBM.name and database.record_key(other) != database.record_key(HBM)
    with pytest.warns(database.StaleRecordWarning, match="ignored the tuned record"):
        assert database.lookup(SPEC, other) is None
    # a new timing model: the same
    monkeypatch.setattr(timing, "TIMING_MODEL_VERSION", timing.TIMING_MODEL_VERSION + 1)
    with pytest.warns(database.StaleRecordWarning, match="timing model"):
        assert database.lookup(SPEC, HBM) is None


def test_the_users_database_comes_before_the_shipped_one(tmp_path, monkeypatch):
    monkeypatch.setenv("TVM_PIM_CACHE", str(tmp_path / "user"))
    monkeypatch.setenv("TVM_PIM_SCHEDULES", str(tmp_path / "shipped"))
    d_shipped, d_user = _two_drafts(SPEC, HBM)
    assert d_shipped != d_user
    database.save_record(HBM, SPEC, _record(SPEC, HBM, d_shipped), tmp_path / "shipped" / "hbm-pim")
    assert database.lookup(SPEC, HBM) == d_shipped
    # a slower record is still the user's choice: each database keeps its own best
    database.save_record(HBM, SPEC, _record(SPEC, HBM, d_user), tmp_path / "user" / "hbm-pim")
    assert database.lookup(SPEC, HBM) == d_user
    # an explicit database root replaces the user's cache
    assert database.lookup(SPEC, HBM, database=tmp_path / "empty") == d_shipped
    assert database.folders("hbm-pim", tmp_path / "x") == [tmp_path / "x" / "hbm-pim", tmp_path / "shipped" / "hbm-pim"]


def test_a_database_keeps_the_faster_record(tmp_path):
    drafts, _ = space.enumerate_drafts(SPEC, HBM)
    times = [evaluate(SPEC, HBM, d)[1] for d in drafts[:6]]
    slow, fast = drafts[int(np.argmax(times))], drafts[int(np.argmin(times))]
    folder = tmp_path / "hbm-pim"
    assert database.save_record(HBM, SPEC, _record(SPEC, HBM, fast), folder)
    assert not database.save_record(HBM, SPEC, _record(SPEC, HBM, slow), folder)
    assert database.lookup(SPEC, HBM, database=tmp_path) == fast


@pytest.mark.parametrize("hw", ["hbm-pim", "attacc"])
def test_shipped_databases_are_package_data_and_current(hw, monkeypatch):
    """The databases installed as tvm_pim.schedules hold only records of today's presets and timing model."""
    monkeypatch.delenv("TVM_PIM_SCHEDULES")
    root = database.shipped_root()
    assert root == Path(str(importlib.resources.files("tvm_pim.schedules")))
    view = PimView(load(hw))
    db = ms.database.JSONDatabase(str(root / hw / database.WORKLOAD_FILE), str(root / hw / database.RECORD_FILE),
                                  allow_missing=False, module_equality="structural")
    records = db.get_all_tuning_records()
    assert len(records) >= 20
    assert {database.key_of(r.workload.mod) for r in records} == {database.record_key(view)}


def test_predictor_features_follow_the_description_not_the_object():
    """The static part of the features is cached by the description's digest."""
    d = space.default_draft(SPEC, HBM)
    same = PimView(dataclasses.replace(HBM.hw))  # another object, equal description
    assert same.hw is not HBM.hw and same.digest == HBM.digest
    assert np.array_equal(features.features(SPEC, d, same), features.features(SPEC, d, HBM))
    other = _edited(HBM)
    assert not np.array_equal(features.features(SPEC, d, other), features.features(SPEC, d, HBM))


@pytest.mark.parametrize("dev", ["hbm-pim", "attacc"])
@pytest.mark.parametrize("sizes", [dict(b=1, m=4, n=4000, k=4096), dict(b=8, m=1, n=1000, k=128), dict(b=1, m=16, n=3072, k=1024)])
def test_plan_counts_are_the_commands_the_simulator_counts(dev, sizes):
    """The predictor's plan features count, without building the stream, the row activations and compute
    column commands that the generated stream issues (the simulator's command counts, per core)."""
    view = PimView(load(dev))
    spec = KernelSpec.make("gemv", **sizes)
    checked = 0
    for d, c, res in _simulated_plans(spec, view, seed=0):
        act = view.command("act", "group") or view.require("act")
        comp = view.command(view.contraction, "group") or view.require(view.contraction)
        units = d.groups_used  # group-wide commands: one issue per group reaches all its cores
        assert res.command_counts[act] == c["acts"] * units
        assert res.command_counts[comp] == c["compute_cols"] * units
        _check_moves(view, d, c, res)
        checked += 1
    assert checked >= 6


def _simulated_plans(spec, view, seed):
    """Up to 12 seeded drafts of ``spec``: each feasible one with its plan counts and its simulated stream."""
    drafts, _ = space.enumerate_drafts(spec, view)
    rng = np.random.default_rng(seed)
    for i in rng.choice(len(drafts), 12, replace=False):
        d = drafts[int(i)]
        try:
            c = features.plan_counts(spec, d, view)
        except space.InfeasibleDraft:
            continue
        yield d, c, Simulator(view.hw).run(generate(spec, d, view, DCC), functional=False)


def _check_moves(view, d, c, res):
    """Result moves to the group buffer: every core's columns, one command each (AttAcc's MVSB)."""
    mv = view.command("to_group")
    if c["move_cols"]:
        assert res.command_counts[mv] == c["move_cols"] * d.cores_used * d.groups_used
    else:
        assert mv is None or mv not in res.command_counts


@pytest.mark.parametrize("dev", ["hbm-pim", "attacc"])
@pytest.mark.parametrize("sizes", [dict(b=2, n=512, k=512), dict(b=8, n=768, k=768)])
def test_plan_counts_of_reductions(dev, sizes):
    """RED drafts that split k over cores: activations, compute columns, result moves and (AttAcc, a dot
    product against ones) the ones vector written once per group by broadcast, as the simulator counts them."""
    view = PimView(load(dev))
    spec = KernelSpec.make("red", resident=("A",), **sizes)
    checked = 0
    for d, c, res in _simulated_plans(spec, view, seed=1):
        act = view.command("act", "group") or view.require("act")
        role = contract_plan(spec, d, view).op_role  # (HBM-PIM reduces with ADD, AttAcc with dot products)
        comp = view.command(role, "group") or view.require(role)
        assert res.command_counts[act] == c["acts"] * d.groups_used
        assert res.command_counts[comp] == c["compute_cols"] * d.groups_used
        _check_moves(view, d, c, res)
        if view.contraction == "dot":
            assert res.command_counts[view.command("reg_write", "group")] == c["x_cols"] * d.groups_used
        checked += 1
    assert checked >= 6

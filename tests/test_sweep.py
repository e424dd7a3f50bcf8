"""Sweeps on a local Ray: the table agrees with single runs, the cache serves re-runs, failures are recorded."""

import csv
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

import tvm_cim
from tvm_cim.common import sweep
from tvm_cim.evaluate import evaluate

from .onnx_models import small_cnn

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("ray")


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("m") / "small.onnx"
    onnx.save(small_cnn(), str(path))
    return str(path)


def test_sweep_table_matches_single_runs_and_is_cached(model_file, tmp_path):
    out = tmp_path / "out"
    args = ["sweep", "--model", model_file, "--hw", "isaac", "--strategy", "none", "cim-mlc",
            "--set", "crossbar.rows_active=16", "--out", out, "--quiet"]
    p = subprocess.run([sys.executable, "-m", "tvm_cim", *map(str, args)], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = list(csv.DictReader(open(out / "sweep.csv")))
    assert len(rows) == 2 and all(r["error"] == "" for r in rows)
    assert [(r["strategy"], r["crossbar.rows_active"]) for r in rows] == [("none", "16"), ("cim-mlc", "16")]
    for name in ("sweep_points.png", "sweep_pareto.png", "sweep_speedup.png"):
        assert (out / name).is_file()
    # every row equals the same point run on its own, here
    base = tvm_cim.load("isaac")
    for r in rows:
        hw = sweep.with_overrides(base, {"crossbar.rows_active": int(r["crossbar.rows_active"])})
        rep, _, _ = evaluate(model_file, hw, r["strategy"])
        assert float(r["latency_ns"]) == pytest.approx(rep["latency_ns"], rel=1e-12)
        assert float(r["energy_pj"]) == pytest.approx(rep["energy_pj"], rel=1e-12)
        assert float(r["cosine"]) == pytest.approx(rep["cosine"], rel=1e-12)
    # a re-run computes nothing new
    p = subprocess.run([sys.executable, "-m", "tvm_cim", *map(str, args)], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    assert all(r["cached"] == "True" for r in csv.DictReader(open(out / "sweep.csv")))


def test_a_failed_point_is_recorded_and_the_others_finish(model_file, tmp_path):
    points = [sweep.Point({"model": model_file, "hw": "isaac", "strategy": s, "timing_only": 1})
              for s in ("none", "no-such-strategy")]
    rows = sweep.run(points, "tvm_cim.sweep:evaluate_point", "cim", tmp_path / "cache", progress=False)
    assert rows[0]["error"] == "" and rows[0]["latency_ns"] > 0
    assert "no-such-strategy" in rows[1]["error"]


def test_bad_axes_fail_before_any_work(tmp_path):
    for axis, needle in (("crossbar.rowz=1,2", "rowz"), ("crossbar.rows=0", "crossbar.rows")):
        p = subprocess.run([sys.executable, "-m", "tvm_cim", "sweep", "--model", "zoo:resnet18", "--set", axis,
                            "--out", str(tmp_path)], capture_output=True, text=True, cwd=ROOT)
        assert p.returncode == 2 and needle in p.stderr and "Traceback" not in p.stderr

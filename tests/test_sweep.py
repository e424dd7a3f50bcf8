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


def test_a_point_may_compare_with_onnxruntime(model_file, tmp_path):
    """A point's ``reference`` option: its cosine is the one ``run --reference onnxruntime`` reports, and the
    CLI's ``--reference`` reaches every point (a bad choice exits 2)."""
    point = sweep.Point({"model": model_file, "hw": "isaac", "strategy": "none", "reference": "onnxruntime"})
    (row,) = sweep.run([point], "tvm_cim.sweep:evaluate_point", "cim", tmp_path / "cache", progress=False)
    rep, _, _ = evaluate(model_file, "isaac", "none", reference="onnxruntime")
    assert row["error"] == "" and row["reference"] == "onnxruntime"
    assert float(row["cosine"]) == pytest.approx(rep["cosine"], rel=1e-12)
    p = subprocess.run([sys.executable, "-m", "tvm_cim", "sweep", "--model", str(model_file), "--reference", "nope",
                        "--out", str(tmp_path)], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 2 and "--reference" in p.stderr


def test_plots_of_one_strategy_are_the_points_and_the_front(tmp_path):
    """A sweep of one strategy has no speedup bars: the two other plots are written and listed (the CLI prints
    them; it raised a TypeError here)."""
    rows = [{"model": "m", "hw": h, "strategy": "none", "latency_ns": lat, "energy_pj": e, "error": ""}
            for h, lat, e in (("a", 2e6, 3e9), ("b", 1e6, 5e9), ("c", 3e6, 4e9))]
    files = sweep.plot(rows, tmp_path, ["model", "hw", "strategy"])
    assert [Path(f).name for f in files] == ["sweep_points.png", "sweep_pareto.png"]
    assert all(Path(f).stat().st_size > 0 for f in files)


def test_bad_axes_fail_before_any_work(tmp_path):
    for axis, needle in (("crossbar.rowz=1,2", "rowz"), ("crossbar.rows=0", "crossbar.rows")):
        p = subprocess.run([sys.executable, "-m", "tvm_cim", "sweep", "--model", "zoo:resnet18", "--set", axis,
                            "--out", str(tmp_path)], capture_output=True, text=True, cwd=ROOT)
        assert p.returncode == 2 and needle in p.stderr and "Traceback" not in p.stderr


def test_pim_sweep_matches_direct_timing(tmp_path):
    from tvm_pim.hardware.view import PimView
    from tvm_pim.search.strategy import choose
    from tvm_pim.simulator.engine import Simulator
    from tvm_pim.workloads import parse_kernel

    kernel = "gemv:b=1,m=1,n=1024,k=1024"
    p = subprocess.run([sys.executable, "-m", "tvm_pim", "sweep", "--model", kernel, "--hw", "attacc",
                        "--strategy", "default", "simulate", "--out", str(tmp_path), "--quiet"],
                       capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = list(csv.DictReader(open(tmp_path / "sweep.csv")))
    assert [r["strategy"] for r in rows] == ["default", "simulate"] and all(r["error"] == "" for r in rows)
    view = PimView(tvm_cim.load("attacc", kind="pim"))
    for r in rows:
        ch = choose(parse_kernel(kernel), view, r["strategy"])
        assert float(r["latency_ns"]) == pytest.approx(Simulator(view.hw).run(ch.stream, functional=False).latency_ns)
    assert float(rows[1]["latency_ns"]) <= float(rows[0]["latency_ns"])  # the searched draft is no slower

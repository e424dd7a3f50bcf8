"""``python -m tvm_pim``: run / tune / predictor, JSON reports and bad-input handling."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

from tvm_pim import cli, load
from tvm_pim.simulator import Simulator

REPO = pathlib.Path(__file__).resolve().parents[1]


def test_run_decode_layer_reports_pim_and_gpu_latency(tmp_path, capsys):
    rep = tmp_path / "r.json"
    emit = tmp_path / "streams.txt"
    code = cli.main([
        "run", "zoo:gpt_decode?batch=2,ctx=128,hidden=512,heads=4,ffn=2048", "--hw", "attacc",
        "--resident", "k_cache,v_cache", "--report", str(rep), "--emit", str(emit),
    ])
    assert code == 0
    out = capsys.readouterr().out
    assert "GPU only" in out and "speedup" in out
    r = json.loads(rep.read_text())
    for key in ("latency_ns", "gpu_latency_ns", "kernels", "decisions", "host_ops", "energy_pj", "cosine"):
        assert key in r
    assert r["latency_ns"] > 0 and r["gpu_latency_ns"] > 0
    assert r["cosine"] > 0.9999
    kinds = {k["kind"] for k in r["kernels"]}
    assert "gemv" in kinds
    text = emit.read_text()
    assert text.startswith("pimstream 1") and "MAC_AB" in text
    # the emitted streams, simulated on their own, take the PIM time the run reports
    streams = ["pimstream 1" + t for t in text.split("pimstream 1")[1:]]
    assert len(streams) == len(r["kernels"])
    sim = Simulator(load("attacc"))
    assert sum(sim.run(t, functional=False).latency_ns for t in streams) == pytest.approx(r["pim_kernels_ns"])
    # the GPU-only graph runs every operator the host keeps, plus the offloaded ones
    assert r["gpu_latency_ns"] > r["host_ops_ns"]
    offloaded = [d for d in r["decisions"] if d["offloaded"]]
    assert offloaded and all(d["predicted_pim_ns"] < d["host_ns"] for d in offloaded)


@pytest.mark.usefixtures("metaschedule_ready")
def test_tune_kernel_prints_table_and_json(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TVM_PIM_CACHE", str(tmp_path / "cache"))
    rep = tmp_path / "t.json"
    code = cli.main([
        "tune", "--hw", "hbm-pim", "--kernel", "red:b=4,n=1024,k=1024,resident=A", "--trials", "16",
        "--report", str(rep),
    ])
    assert code == 0
    r = json.loads(rep.read_text())
    (k,) = r["kernels"]
    assert k["best_ns"] <= k["first_candidate_ns"]
    assert k["space"]["after_rule3"] < k["space"]["total"]
    assert (tmp_path / "cache" / "hbm-pim" / "database_tuning_record.json").exists()
    assert "best draft" in capsys.readouterr().out


@pytest.mark.usefixtures("metaschedule_ready")
def test_tune_writes_where_it_is_told(tmp_path, monkeypatch):
    """The user's cache by default, --database DIR, or the shipped databases with --update-shipped."""
    monkeypatch.setenv("TVM_PIM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("TVM_PIM_SCHEDULES", str(tmp_path / "shipped"))
    base = ["tune", "--hw", "hbm-pim", "--kernel", "gemv:b=1,m=1,n=256,k=256", "--trials", "16"]
    record = "hbm-pim/database_tuning_record.json"
    assert cli.main(base + ["--database", str(tmp_path / "mine")]) == 0
    assert (tmp_path / "mine" / record).exists() and not (tmp_path / "cache" / record).exists()
    assert cli.main(base + ["--update-shipped"]) == 0
    assert (tmp_path / "shipped" / record).exists() and not (tmp_path / "cache" / record).exists()
    assert cli.main(base) == 0
    assert (tmp_path / "cache" / record).exists()
    assert cli.main(base + ["--update-shipped", "--database", str(tmp_path)]) == 2


@pytest.mark.parametrize(
    "argv,msg",
    [
        (["run", "zoo:gpt_decode", "--hw", "nosuch"], "Known presets"),
        (["run", "missing.onnx", "--hw", "attacc"], "does not exist"),
        (["run", "zoo:gpt_decode?hidden=100,heads=3", "--hw", "attacc"], "divisible"),
        (["run", "zoo:gpt_decode?batch=1,ctx=8,hidden=64,heads=2,ffn=64", "--resident", "nope"], "not graph inputs"),
        (["tune", "--hw", "attacc"], "nothing to tune"),
        (["tune", "--hw", "attacc", "--kernel", "gemv:b=1,n=4"], "missing"),
        (["tune", "--hw", "attacc", "--kernel", "va:b=1,i=64"], "cannot run"),
        (["tune", "--hw", "attacc", "--kernel", "gemv:b=1,m=1,n=64,k=x"], "invalid literal"),
    ],
)
def test_bad_input_exits_2_with_a_message(argv, msg, capsys):
    try:
        code = cli.main(argv)
    except ValueError as e:  # int('x') from the kernel parser is reported, not raised
        pytest.fail(f"raised {e!r}")
    assert code == 2
    assert msg in capsys.readouterr().err


def test_module_entry_point():
    p = subprocess.run([sys.executable, "-m", "tvm_pim", "--help"], capture_output=True, text=True,
                       env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert p.returncode == 0 and "run" in p.stdout and "tune" in p.stdout

"""A batch of inputs through the pipeline: makespan, steady-state interval, throughput in the report."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tvm_cim
from tvm_cim.common import zoo
from tvm_cim.common.onnx_io import import_onnx
from tvm_cim.report import simulate_timing
from tvm_cim.simulator.batch import schedule_batch
from tvm_cim.simulator.timeline import Events

ROOT = Path(__file__).resolve().parents[1]


def stage(dur, res, write=False):
    """A region of one operation on one resource that loads its whole input and stores its whole output."""
    ev = Events()
    i = ev.add(dur, (res,), (), 1.0, False, "CIM.write_xb" if write else "CIM.read_xb")
    ev.inputs.append((i, 0.0, 1.0))
    ev.outputs.append((i, 0.0, 1.0))
    return ev


@pytest.mark.parametrize("pipeline", [False, True])
@pytest.mark.parametrize("durs", [(5.0, 3.0, 7.0), (2.0, 2.0), (1.0, 10.0, 1.0, 4.0)])
def test_stage_chain_is_a_textbook_pipeline(durs, pipeline):
    """Stages on their own units: first result after the sum, then one per slowest stage."""
    regions = [(f"s{i}", stage(d, f"u{i}"), 0) for i, d in enumerate(durs)]
    prods = {f"s{i}": [f"s{i - 1}"] for i in range(1, len(durs))}
    n = 6
    bt = schedule_batch(regions, prods, pipeline, n)
    assert bt.finish_ns[0] == pytest.approx(sum(durs))
    assert bt.interval_ns == pytest.approx(max(durs))
    assert bt.makespan_ns == pytest.approx(sum(durs) + (n - 1) * max(durs))
    assert bt.throughput_per_s == pytest.approx(1e9 / max(durs))


def test_shared_unit_serialises_inputs():
    """Two stages on the same unit: no overlap between inputs is possible."""
    regions = [("a", stage(4.0, "u"), 0), ("b", stage(6.0, "u"), 0)]
    bt = schedule_batch(regions, {"b": ["a"]}, True, 5)
    assert bt.makespan_ns == pytest.approx(5 * 10.0)


def test_rewritten_crossbars_wait_for_the_previous_input():
    """A region that writes its crossbars each inference does not overtake the previous input's use."""
    w = Events()
    i = w.add(3.0, ("xb:0",), (), 1.0, False, "CIM.write_xb")
    j = w.add(2.0, ("xb:0",), (i,), 1.0, True, "CIM.read_xb")
    w.inputs.append((j, 0.0, 1.0))
    w.outputs.append((j, 0.0, 1.0))
    bt = schedule_batch([("w", w, 0)], {}, True, 4)
    assert np.allclose(bt.finish_ns, [5.0, 10.0, 15.0, 20.0])


def test_segments_run_input_after_input():
    regions = [("a", stage(4.0, "u0"), 0), ("b", stage(6.0, "u1"), 1)]
    bt = schedule_batch(regions, {"b": ["a"]}, True, 3)
    assert bt.makespan_ns == pytest.approx(3 * 10.0)


def test_bad_batch():
    with pytest.raises(ValueError, match="batch"):
        schedule_batch([("a", stage(1.0, "u"), 0)], {}, True, 0)


@pytest.mark.parametrize("strategy", ["none", "greedy", "puma", "cim-mlc"])
def test_batch_of_a_network(strategy):
    """One input alone is the single-inference timeline; more inputs never finish sooner than the busiest
    resource allows, never later than inputs one after another, and in input order."""
    mod = import_onnx(zoo.build_model("resnet18", image_size=32), "r18")[0]
    _, info = tvm_cim.offload(mod, tvm_cim.load("pimcomp-a"), strategy=strategy)
    stats, tl = simulate_timing(info)
    regions = [(s.name, s.events, s.segment) for s in stats]
    pipe = info.schedule.options.pipeline
    one = schedule_batch(regions, info.producers, pipe, 1)
    assert one.makespan_ns == pytest.approx(tl.latency_ns)
    n = 4
    bt = schedule_batch(regions, info.producers, pipe, n)
    busy: dict = {}
    for _, ev, _ in regions:
        for d, rs in zip(ev.dur, ev.res):
            for r in rs:
                busy[r] = busy.get(r, 0.0) + d
    assert bt.makespan_ns >= n * max(busy.values()) - 1e-6
    assert bt.makespan_ns <= n * tl.latency_ns + 1e-6
    assert np.all(np.diff(bt.finish_ns) >= -1e-6)
    assert bt.throughput_per_s >= 1e9 / tl.latency_ns * (1 - 1e-9)


def cli(*args):
    return subprocess.run([sys.executable, "-m", "tvm_cim", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT)


def test_cli_batch(tmp_path):
    p = cli("run", "zoo:resnet18?image_size=32", "--hw", "pimcomp-a", "--strategy", "greedy", "--timing-only",
            "--batch", "4", "--report", tmp_path / "r.json")
    assert p.returncode == 0, p.stderr
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["batch"]["inputs"] == 4
    assert rep["throughput_per_s"] == rep["batch"]["throughput_per_s"] > 1e9 / rep["latency_ns"]
    assert rep["batch"]["makespan_ns"] > rep["latency_ns"]
    assert "throughput" in p.stdout
    bad = cli("run", "zoo:resnet18?image_size=32", "--hw", "pimcomp-a", "--batch", "0")
    assert bad.returncode == 2 and "--batch" in bad.stderr and "Traceback" not in bad.stderr

"""python -m tvm_cim: the run command, its report and its handling of bad input."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tvm_cim.program import parse_programs

from .onnx_models import small_cnn

ROOT = Path(__file__).resolve().parents[1]


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "tvm_cim", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd or ROOT)


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("m") / "small.onnx"
    onnx.save(small_cnn(), str(path))
    return path


@pytest.fixture(scope="module")
def run_result(model_file, tmp_path_factory):
    d = tmp_path_factory.mktemp("run")
    rng = np.random.default_rng(5)
    np.savez(d / "in.npz", x=rng.standard_normal((1, 3, 16, 16)).astype("float32"))
    p = cli("run", model_file, "--hw", "isaac", "--report", d / "r.json", "--inputs", d / "in.npz",
            "--outputs", d / "out.npz", "--emit", d / "prog.txt", "--strategy", "cim-mlc")
    return p, d


def test_run_writes_report(run_result):
    p, d = run_result
    assert p.returncode == 0, p.stderr
    rep = json.loads((d / "r.json").read_text())
    for key in ("hw", "latency_cycles", "latency_ns", "energy_pj", "regions", "host_ops", "max_abs_err",
                "cosine", "metaop_counts", "peak_power_mw", "utilisation"):
        assert key in rep
    assert rep["hw"] == "isaac" and rep["strategy"] == "cim-mlc"
    assert rep["latency_ns"] > 0 and rep["energy_pj"] > 0 and rep["latency_cycles"] > 0
    assert 0.99 < rep["cosine"] <= 1.0 + 1e-6
    assert len(rep["regions"]) == 3 and all(r["latency_ns"] > 0 for r in rep["regions"])
    assert "relax.nn.softmax" in rep["host_ops"] and "Softmax" in rep["onnx_ops_on_host"]
    assert rep["metaop_counts"]["CIM.read_xb"] > 0
    assert "latency" in p.stdout and "cosine" in p.stdout  # readable summary


def test_outputs_and_program(run_result):
    p, d = run_result
    out = np.load(d / "out.npz")
    assert list(out.keys()) == ["y"] and out["y"].shape == (1, 10)
    progs = parse_programs((d / "prog.txt").read_text())
    assert len(progs) == 3 and all(any(o.opcode == "CIM.read_xb" for o in pr.ops()) for pr in progs)


def test_inputs_are_used(model_file, tmp_path):
    rng = np.random.default_rng(9)
    outs = []
    for i, x in enumerate([rng.standard_normal((1, 3, 16, 16)), rng.standard_normal((1, 3, 16, 16))]):
        np.savez(tmp_path / f"in{i}.npz", x=x.astype("float32"))
        p = cli("run", model_file, "--hw", "isaac", "--inputs", tmp_path / f"in{i}.npz", "--outputs", tmp_path / f"o{i}.npz")
        assert p.returncode == 0, p.stderr
        outs.append(np.load(tmp_path / f"o{i}.npz")["y"])
    assert not np.allclose(outs[0], outs[1])
    p = cli("run", model_file, "--hw", "isaac", "--inputs", tmp_path / "in0.npz", "--outputs", tmp_path / "again.npz")
    np.testing.assert_array_equal(np.load(tmp_path / "again.npz")["y"], outs[0])


def test_zoo_model_spec(tmp_path):
    p = cli("run", "zoo:resnet18?image_size=32", "--hw", "jain21", "--report", tmp_path / "r.json")
    assert p.returncode == 0, p.stderr
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["mapping"]["segments"] > 1  # 8 crossbars: segmented, not rejected
    assert rep["cosine"] > 0.99


def test_unknown_hardware_lists_presets(model_file):
    p = cli("run", model_file, "--hw", "nonesuch")
    assert p.returncode == 2
    for name in ("prime", "isaac", "puma", "dynaplasia", "jia21", "jain21"):
        assert name in p.stderr


def test_bad_nonideal_option(model_file):
    p = cli("run", model_file, "--hw", "isaac", "--nonideal", "conductance=-1")
    assert p.returncode == 2 and "--nonideal" in p.stderr and "Traceback" not in p.stderr


def test_malformed_hardware_file(model_file, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text((ROOT / "targets" / "prime.toml").read_text().replace("cell_bits = 4", "cell_bits = -4"))
    p = cli("run", model_file, "--hw", bad)
    assert p.returncode == 2
    assert str(bad) in p.stderr and "crossbar.cell_bits" in p.stderr and "expected" in p.stderr


@pytest.mark.parametrize("content", [None, b"\x00\x01garbage\xff" * 10])
def test_missing_or_corrupt_model(tmp_path, content):
    path = tmp_path / "m.onnx"
    if content is not None:
        path.write_bytes(content)
    p = cli("run", path, "--hw", "prime")
    assert p.returncode == 2 and "error:" in p.stderr and str(path) in p.stderr
    assert "Traceback" not in p.stderr


def test_operator_tvm_cannot_import(tmp_path):
    node = helper.make_node("FancyOp", ["x"], ["y"], domain="com.example")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.example", 1)])
    path = tmp_path / "fancy.onnx"
    onnx.save(model, str(path))
    p = cli("run", path, "--hw", "prime")
    assert p.returncode == 2 and "FancyOp" in p.stderr and "Traceback" not in p.stderr


def test_presets_listing():
    p = cli("presets")
    assert p.returncode == 0
    for name in ("prime", "isaac", "puma", "dynaplasia", "jia21", "jain21", "hbm-pim", "attacc"):
        assert name in p.stdout
    s = cli("presets", "--schema", "cim")
    assert "crossbar.rows_active" in s.stdout and "dual_mode.switchable_arrays" in s.stdout


@pytest.mark.parametrize("spec", ["zoo:resnet18?image_size=abc", "zoo:resnet18?image_size", "zoo:nosuchnet"])
def test_bad_zoo_spec(spec):
    from tvm_cim import cli as tcli

    with pytest.raises(tcli.UserError) as e:
        tcli.load_onnx(spec)
    assert spec.split("?")[-1].split("=")[0] in str(e.value) or "nosuchnet" in str(e.value)


def test_compile_only_emits_the_programs_run_compiles(model_file, run_result, tmp_path):
    """``compile`` compiles as ``run`` does (same programs, byte for byte) and reports its time per pass."""
    _, d = run_result
    p = cli("compile", model_file, "--hw", "isaac", "--strategy", "cim-mlc", "--report", tmp_path / "c.json",
            "--emit", tmp_path / "prog.txt")
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "prog.txt").read_text() == (d / "prog.txt").read_text()
    rep = json.loads((tmp_path / "c.json").read_text())
    assert rep["hw"] == "isaac" and rep["regions"] == 3 and rep["segments"] >= 1
    assert rep["cpu_s"]["compile"] > 0 and rep["timing_s"]["compile"] > 0
    for name in ("FindRegions", "Calibrate", "GenerateMetaOps", "LowerToRuntime"):
        assert rep["compile_phases_s"][name]["cpu_s"] >= 0
    assert "GenerateMetaOps" in p.stdout
    bad = cli("compile", model_file, "--hw", "no_such_chip")
    assert bad.returncode == 2 and "no_such_chip" in bad.stderr


def test_onnxruntime_reference_compares_the_same_outputs_with_the_onnx_model(monkeypatch):
    """``--reference onnxruntime``: the simulated outputs are the same; they are compared with onnxruntime on
    the ONNX model, whose outputs agree with TVM's llvm build to float rounding; a bad choice exits 2 and a
    missing onnxruntime is a clear error."""
    from tvm_cim.common.cli import UserError
    from tvm_cim.common.onnx_io import import_onnx, load_onnx
    from tvm_cim.common.report import onnxruntime_outputs, reference_outputs
    from tvm_cim.evaluate import evaluate

    spec = "zoo:vgg8"
    a, outs_a, _ = evaluate(spec, "prime", "cim-mlc")
    b, outs_b, _ = evaluate(spec, "prime", "cim-mlc", reference="onnxruntime")
    assert len(outs_a) == len(outs_b) and all(np.array_equal(x, y) for x, y in zip(outs_a, outs_b))
    assert "onnxruntime" in b["reference"] and "TVM" in a["reference"]
    assert b["cosine"] == pytest.approx(a["cosine"], abs=1e-6) and a["cosine"] < 1.0
    assert b["max_abs_err"] == pytest.approx(a["max_abs_err"], rel=1e-3, abs=1e-6)

    model = load_onnx(spec, seed=3)
    mod, shapes, dtypes = import_onnx(model, spec)
    x = {k: np.random.default_rng(3).standard_normal(s).astype(dtypes[k]) for k, s in shapes.items()}
    (ort,), (tvm_ref,) = onnxruntime_outputs(model, x, 1), reference_outputs(mod, x, list(shapes))
    assert ort.shape == tvm_ref.shape and np.abs(tvm_ref).max() > 0
    np.testing.assert_allclose(ort, tvm_ref, rtol=1e-4, atol=1e-5 * float(np.abs(tvm_ref).max()))

    p = cli("run", spec, "--hw", "prime", "--reference", "nope")
    assert p.returncode == 2 and "--reference" in p.stderr
    x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y_info = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    bad = helper.make_model(helper.make_graph([helper.make_node("NoSuchOp", ["x"], ["y"])], "g", [x_info], [y_info]))
    with pytest.raises(UserError, match="onnxruntime cannot run the model.*NoSuchOp"):
        onnxruntime_outputs(bad, {"x": np.zeros((1, 4), np.float32)}, 1)
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # not installed
    with pytest.raises(UserError, match="pip install onnxruntime"):
        onnxruntime_outputs(model, x, 1)

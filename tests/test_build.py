"""relax.build with cim targets: presets, user files, strategies, export/load, host fallback."""

import dataclasses
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_cim
from tvm_cim.common import zoo
from tvm_cim.common.onnx_io import import_onnx
from tvm_cim.compiler import strategies
from tvm_cim.simulator.timeline import schedule_graph

from .onnx_models import small_cnn

ROOT = Path(__file__).resolve().parents[1]
R = dataclasses.replace
CIM_PRESETS = ["prime", "isaac", "puma", "dynaplasia", "jia21", "jain21", "miredo"]


@pytest.fixture(scope="module")
def cnn():
    mod = import_onnx(small_cnn(), "small")[0]
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype("float32")
    ref = relax.VirtualMachine(relax.build(mod, target="llvm"), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    return mod, x, ref


def run_vm(ex, x):
    return relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()


def cosine(a, b):
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.mark.parametrize("name", CIM_PRESETS)
def test_every_preset_builds_and_runs(cnn, name):
    """Lossless ADCs leave only int8 quantisation error; on lossy ones the default error budget (ADC-aware
    mapping) keeps the network as usable: cosine >= 0.99 against the float reference on a new input."""
    from tvm_cim.hardware import crossbar

    mod, x, ref = cnn
    ex = relax.build(mod, target=f"cim -hw={name}")
    info = tvm_cim.last_compile_info()
    assert info.hw.name == name and len(info.regions) == 3
    with tvm_cim.runtime.collect() as stats:
        y = run_vm(ex, x)
    assert y.shape == ref.shape and np.all(np.isfinite(y))
    assert cosine(y, ref) > 0.99
    if crossbar.is_lossless(info.hw):
        assert not any(s.adc_error for s in stats) and info.accuracy == {}
    else:  # the mapping keeps the error measured on the calibration sample within the default budget
        assert info.accuracy["met"] and info.accuracy["max_error"] == 0.005
        lossy_reads = [s for s in stats if s.adc_error]  # reads the ADC can alter: their error is measured
        assert all(s.adc_error["sum_sq_ref"] > 0 for s in lossy_reads)
    # the same model with the preset's ADC made lossless is accurate
    lossless = R(info.hw, crossbar=R(info.hw.crossbar, adc_bits=24, adc_mode="clip"))
    lowered, _ = tvm_cim.offload(mod, lossless)
    assert cosine(run_vm(relax.build(lowered, target="llvm"), x), ref) > 0.99


def test_target_string_and_keys():
    t = tvm.target.Target("cim -hw=prime")
    assert "cim" in t.keys and str(t.attrs["model"]) == "prime"
    import tvm_pim

    for name in ("hbm-pim", "hbm-pim-hbm3", "attacc", "attacc-unconstrained"):
        t = tvm.target.Target(f"pim -hw={name}")
        assert "pim" in t.keys and str(t.attrs["model"]) == name
    assert set(tvm_pim.known_presets()) == {"hbm-pim", "hbm-pim-hbm3", "attacc", "attacc-unconstrained"}


def test_unknown_preset_lists_known_ones():
    with pytest.raises(tvm_cim.UnknownHardwareError) as e:
        tvm.target.Target("cim -hw=nope")
    for name in CIM_PRESETS:
        assert name in str(e.value)


def test_user_hardware_file(cnn, tmp_path):
    mod, x, ref = cnn
    text = (ROOT / "targets" / "isaac.toml").read_text().replace('name = "isaac"', 'name = "my-chip"')
    text = text.replace("cores = 768", "cores = 4")
    path = tmp_path / "my-chip.toml"
    path.write_text(text)
    ex = relax.build(mod, target=f"cim -hw={path}")
    info = tvm_cim.last_compile_info()
    assert info.hw.name == "my-chip" and info.hw.chip.cores == 4
    assert cosine(run_vm(ex, x), ref) > 0.99


def test_malformed_user_file_fails_naming_file_and_key(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text((ROOT / "targets" / "isaac.toml").read_text().replace("rows = 128", 'rows = "many"'))
    with pytest.raises(tvm_cim.HardwareDescriptionError) as e:
        tvm.target.Target(f"cim -hw={path}")
    assert str(path) in str(e.value) and "crossbar.rows" in str(e.value) and "expected" in str(e.value)


def test_llvm_build_unchanged_by_import(cnn):
    """The same float model built for llvm in a process that never imports tvm_cim."""
    mod, x, ref = cnn
    code = textwrap.dedent(f"""
        import sys, numpy as np, tvm
        sys.path.insert(0, {str(ROOT)!r})
        from tvm import relax
        from tvm.relax.frontend.onnx import from_onnx
        from tests.onnx_models import small_cnn
        mod = from_onnx(small_cnn())
        assert not any(m.startswith("tvm_cim") for m in sys.modules)
        x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype("float32")
        y = relax.VirtualMachine(relax.build(mod, target="llvm"), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
        np.save(sys.argv[1], y)
    """)
    out = Path(__import__("tempfile").mkdtemp()) / "y.npy"
    subprocess.run([sys.executable, "-c", code, str(out)], check=True, cwd=ROOT)
    np.testing.assert_array_equal(np.load(out), ref)


def test_export_and_load_in_fresh_process(cnn, tmp_path):
    mod, x, _ = cnn
    ex = relax.build(mod, target="cim -hw=isaac")
    y = run_vm(ex, x)
    lib = tmp_path / "model.so"
    ex.export_library(str(lib))
    np.save(tmp_path / "x.npy", x)
    code = textwrap.dedent(f"""
        import sys, numpy as np, tvm
        sys.path.insert(0, {str(ROOT)!r})
        import tvm_cim
        from tvm import relax
        m = tvm.runtime.load_module({str(lib)!r})
        x = np.load({str(tmp_path / 'x.npy')!r})
        y = relax.VirtualMachine(m, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
        np.save({str(tmp_path / 'y.npy')!r}, y)
    """)
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path)
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), y)


def test_host_fallback_is_reported(cnn):
    mod, x, _ = cnn
    relax.build(mod, target="cim -hw=prime")
    ops = tvm_cim.last_compile_info().host_ops
    assert "relax.nn.softmax" in ops and "relax.nn.max_pool2d" in ops and "relax.nn.relu" in ops
    assert not any("conv2d" in k or k == "relax.matmul" for k in ops)


def test_strategies_give_identical_integer_results_and_order_latency():
    """Scheduling changes where and when, never what: outputs are bit-identical."""
    mod = import_onnx(zoo.build_model("resnet18", image_size=32), "r18")[0]
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype("float32")
    hw = tvm_cim.load("isaac")
    outs, lat = {}, {}
    for strategy in strategies.names():
        lowered, info = tvm_cim.offload(mod, hw, strategy=strategy)
        ex = relax.build(lowered, target="llvm")
        with tvm_cim.runtime.collect() as stats:
            outs[strategy] = run_vm(ex, x)
        tl = schedule_graph([(s.name, s.events, s.segment) for s in stats], info.producers, info.schedule.options.pipeline)
        lat[strategy] = tl.latency_ns
        # the optimisers' analytical estimate follows the simulator's timeline, layer by layer and end to end
        assert abs(info.schedule.estimate_ns / tl.latency_ns - 1) < 0.05
        for s in stats:
            assert abs(info.schedule.estimate_regions_ns[s.name] / s.latency_ns - 1) < 0.05, s.name
    for s in strategies.names():
        np.testing.assert_array_equal(outs[s], outs["none"])
    assert lat["cim-mlc"] < lat["greedy"] < lat["none"]
    assert lat["puma"] < lat["none"]


def test_model_larger_than_chip_is_segmented(cnn):
    mod, x, ref = cnn
    hw = tvm_cim.load("isaac")
    tiny = R(hw, chip=R(hw.chip, cores=1), core=R(hw.core, crossbars=1))
    lowered, info = tvm_cim.offload(mod, tiny, strategy="cim-mlc")
    assert info.chip_map.segments > 1 and not info.chip_map.weight_stationary
    y = run_vm(relax.build(lowered, target="llvm"), x)
    assert cosine(y, ref) > 0.99


@pytest.mark.parametrize("name,kw", [
    ("bert_layer", dict(seq_len=16, hidden=64, heads=4, ffn=128)),
    ("llama_layer", dict(seq_len=16, hidden=64, heads=4, ffn=128)),
])
def test_transformer_layers_offload_attention(name, kw):
    model = zoo.build_model(name, **kw)
    mod = import_onnx(model, name)[0]
    x = np.random.default_rng(0).standard_normal((1, 16, 64)).astype("float32")
    ref = run_vm(relax.build(mod, target="llvm"), x)
    hw = tvm_cim.load("isaac")
    lowered, info = tvm_cim.offload(mod, hw)
    kinds = [r.kind for r in info.regions]
    assert kinds.count("dmatmul") == 2 and kinds.count("matmul") >= 6
    assert "relax.nn.softmax" in info.host_ops
    assert cosine(run_vm(relax.build(lowered, target="llvm"), x), ref) > 0.999


def test_builds_with_other_schedules_never_share_crossbar_contents(cnn):
    """Weights stay in crossbars between runs by program name: another schedule, chip or calibration
    must give other names, or a second build in the same process would read the first one's weights."""
    mod, x, _ = cnn
    hw = tvm_cim.load("isaac")
    names = {}
    for key, kw in {
        "none": dict(strategy="none"),
        "cim-mlc": dict(strategy="cim-mlc"),
        "cim-mlc again": dict(strategy="cim-mlc"),
        "other chip": dict(strategy="cim-mlc", hw=R(hw, chip=R(hw.chip, cores=64))),
        "other calibration": dict(strategy="cim-mlc", calib=tvm_cim.compiler.quantize.CalibrationConfig(seed=9)),
    }.items():
        kw.setdefault("hw", hw)
        names[key] = {p.name for p in tvm_cim.offload(mod, **kw)[1].programs}
    assert names["cim-mlc"] == names["cim-mlc again"]
    for other in ("none", "other chip", "other calibration"):
        assert not names[other] & names["cim-mlc"], other


def test_cim_host_code_computes_the_bits_of_the_default_build():
    """cim targets build the operators left on the host at LLVM opt-level 1 (common.target.HOST_LLVM): a
    transformer layer (layer norm, softmax, GELU, matrix products) built so and with TVM's default llvm
    target gives the same bits."""
    from tvm_cim.common.target import HOST_LLVM

    mod = import_onnx(zoo.build_model("bert_layer", seq_len=16, hidden=64, heads=2, ffn=128), "bert")[0]
    rng = np.random.default_rng(5)
    args = [tvm.runtime.tensor(rng.standard_normal([int(s) for s in p.ty.shape]).astype(str(p.ty.dtype)))
            for p in mod["main"].params]
    outs = [relax.VirtualMachine(relax.build(mod, target=tvm.target.Target(t)), tvm.cpu())["main"](*args).numpy()
            for t in ("llvm", {"kind": "llvm", **HOST_LLVM["cim"]})]
    assert outs[0].dtype == np.float32 and np.isfinite(outs[0]).all() and HOST_LLVM["cim"]["opt-level"] < 3
    np.testing.assert_array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))

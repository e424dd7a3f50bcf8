"""MIREDO (paper 001): preset, loop-nest cost model, flexible factorisation, per-layer MIP, strategy."""

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_cim
from tvm_cim.common.onnx_io import import_onnx
from tvm_cim.compiler import strategies
from tvm_cim.hardware.schema import NOT_MODELLED

from .onnx_models import small_cnn


def run_vm(ex, x):
    return relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()


# --------------------------------------------------------------------------- preset
def test_preset_has_the_dataflow_view():
    hw = tvm_cim.load("miredo")
    df = hw.dataflow
    assert [n for n, _ in sorted(df.levels.items(), key=lambda kv: kv[1].order)] == \
        ["dram", "gbuf", "obuf", "ibuf", "macro"]
    assert df.levels["ibuf"].operands == ["I"] and df.levels["obuf"].operands == ["O"]
    assert df.levels["macro"].operands == ["W"] and not df.levels["macro"].bypass
    assert df.spatial["rows"].size == hw.crossbar.rows and df.spatial["cols"].size == hw.logical_cols(8)
    assert df.spatial["cores"].size == hw.chip.cores
    # the macro level stores the core's compartments
    assert df.levels["macro"].capacity_bits == hw.core.crossbars * hw.crossbar.rows * hw.crossbar.cols
    assert not any(k.startswith("dataflow") for k in NOT_MODELLED)


def test_dataflow_consistency_is_checked(tmp_path):
    from tvm_cim.common import hardware as loader

    text = loader.resolve("miredo").read_text().replace('[dataflow.levels.dram]\norder = 0\noperands = ["I", "W", "O"]',
                                                        '[dataflow.levels.dram]\norder = 0\noperands = ["I", "W"]')
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(tvm_cim.HardwareDescriptionError) as e:
        loader.load(path)
    assert "dataflow.levels" in str(e.value)


@pytest.fixture(scope="module")
def cnn():
    mod = import_onnx(small_cnn(), "small")[0]
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype("float32")
    return mod, x


def test_every_strategy_runs_on_the_miredo_preset_bit_identically(cnn):
    mod, x = cnn
    hw = tvm_cim.load("miredo")
    outs = {}
    for name in strategies.names():
        lowered, info = tvm_cim.offload(mod, hw, strategy=name)
        outs[name] = run_vm(relax.build(lowered, target="llvm"), x)
    for name in strategies.names():
        np.testing.assert_array_equal(outs[name], outs["none"])

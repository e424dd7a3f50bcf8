"""relax.build for ``pim -hw=...`` targets: offload decisions, numerics, database use, export."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_pim
from tvm_cim.common.onnx_io import import_onnx, load_onnx
from tvm_pim.compiler.kernels import KernelSpec
from tvm_pim.hardware.view import PimView
from tvm_pim.search import tuning

REPO = pathlib.Path(__file__).resolve().parents[1]
U = 2.0**-11


def _run(ex, inputs):
    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(a) for a in inputs])
    if isinstance(out, tvm.runtime.Tensor):
        return [out.numpy()]
    return [o.numpy() for o in out]


def _fp16_ok(got, ref, mag, chain):
    """|got - ref| <= gamma_chain * mag + u|ref| (+ input rounding to FP16, 2 more roundings)."""
    n = chain + 2
    gamma = n * U / (1 - n * U)
    return np.all(np.abs(got - ref) <= gamma * mag + U * np.abs(ref) + 1e-6)


def _decode_module(hidden=4096, rows=128, out2=256, seed=0):
    rng = np.random.default_rng(seed)
    W1 = (rng.standard_normal((hidden, hidden)) * 0.02).astype("float32")
    W2 = (rng.standard_normal((hidden, out2)) * 0.02).astype("float32")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 1, hidden), "float32"))
    X = relax.Var("X", relax.TensorType((rows, hidden), "float32"))
    with bb.function("main", [x, X]):
        with bb.dataflow():
            y = bb.emit(relax.op.matmul(x, relax.const(W1)))
            Y = bb.emit(relax.op.matmul(X, relax.const(W2)))
            gv = bb.emit_output(relax.Tuple([y, Y]))
        bb.emit_func_output(gv)
    return bb.get(), W1, W2


@pytest.mark.parametrize("hw", ["hbm-pim", "attacc"])
def test_gemv_goes_to_pim_and_gemm_stays_on_host(hw):
    mod, W1, W2 = _decode_module()
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 1, 4096)).astype("float32")
    X = rng.standard_normal((128, 4096)).astype("float32")
    ex = relax.build(mod, target=f"pim -hw={hw}")
    info = tvm_pim.last_compile_info()
    by_kind = {(k.spec.kind, k.spec.dims.get("m")): k for k in info.kernels}
    gemv = by_kind[("gemv", 1)]
    gemm = by_kind[("gemv", 128)]
    assert gemv.offloaded and gemv.pim_ns < gemv.host_ns
    assert not gemm.offloaded and gemm.host_ns <= gemm.pim_ns  # compute-bound: the GPU wins
    assert info.host_ops.get("relax.matmul") == 1
    assert info.gpu_latency_ns > 0
    with tvm_pim.runtime.collect() as stats:
        y, Y = _run(ex, [x, X])
    assert len(stats) == 1 and stats[0]["kind"] == "gemv"
    ref = x @ W1
    mag = np.abs(x) @ np.abs(W1)
    assert _fp16_ok(y, ref, mag, 4096 // 16 + 3)
    assert np.abs(y - ref).max() > 0  # computed in FP16, not float32
    np.testing.assert_allclose(Y, X @ W2, rtol=1e-4, atol=1e-3)  # host path, float32


def _all_ops_module(B=2, H=4, N=96, D=32, I=300, seed=0):
    rng = np.random.default_rng(seed)
    W = (rng.standard_normal((D * H, 200)) * 0.05).astype("float32")
    bb = relax.BlockBuilder()
    a = relax.Var("a", relax.TensorType((B, I), "float32"))
    b = relax.Var("b", relax.TensorType((B, I), "float32"))
    x = relax.Var("x", relax.TensorType((1, D * H), "float32"))
    q = relax.Var("q", relax.TensorType((B, H, 1, D), "float32"))
    kT = relax.Var("kT", relax.TensorType((B, H, D, N), "float32"))
    v = relax.Var("v", relax.TensorType((B, H, N, D), "float32"))
    with bb.function("main", [a, b, x, q, kT, v]):
        with bb.dataflow():
            s = bb.emit(relax.op.add(a, b))
            r = bb.emit(relax.op.nn.relu(s))
            t = bb.emit(relax.op.sum(r, axis=[-1]))
            y = bb.emit(relax.op.matmul(x, relax.const(W)))
            sc = bb.emit(relax.op.matmul(q, kT))
            sc2 = bb.emit(relax.op.multiply(sc, relax.const(np.float32(1.0 / np.sqrt(D)))))
            p = bb.emit(relax.op.nn.softmax(sc2, axis=-1))
            o = bb.emit(relax.op.matmul(p, v))
            gv = bb.emit_output(relax.Tuple([s, r, t, y, o]))
        bb.emit_func_output(gv)
    args = [
        rng.standard_normal((B, I)).astype("float32"),
        rng.standard_normal((B, I)).astype("float32"),
        rng.standard_normal((1, D * H)).astype("float32"),
        rng.standard_normal((B, H, 1, D)).astype("float32"),
        rng.standard_normal((B, H, D, N)).astype("float32"),
        rng.standard_normal((B, H, N, D)).astype("float32"),
    ]
    return bb.get(), W, args


def _numpy_refs(W, args, D):
    a, b, x, q, kT, v = args
    s = a + b
    r = np.maximum(s, 0)
    t = r.sum(-1)
    y = x @ W
    sc = (q @ kT) / np.sqrt(D)
    p = np.exp(sc - sc.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    o = p @ v
    # magnitudes through which FP16 errors propagate (a + b is rounded before ReLU and the sum)
    ab_ = np.abs(a) + np.abs(b)
    return [s, r, t, y, o], [ab_, ab_, ab_.sum(-1), np.abs(x) @ np.abs(W), None]


@pytest.mark.parametrize("hw", ["hbm-pim", "attacc"])
def test_every_pattern_is_numerically_right(hw):
    D = 32
    mod, W, args = _all_ops_module(D=D)
    with tvm_pim.offload_options(policy="always", strategy="default"):
        ex = relax.build(mod, target=f"pim -hw={hw}")
    info = tvm_pim.last_compile_info()
    kinds = {k.pattern for k in info.kernels if k.offloaded}
    view = PimView(tvm_pim.load(hw))
    if hw == "hbm-pim":
        assert kinds == {"va", "relu", "red", "gemv", "bgemv"}  # no softmax unit: QK^T and PV separately
        assert info.host_ops.get("relax.nn.softmax") == 1
    else:
        assert kinds == {"red", "gemv", "attn"}  # AttAcc: whole attention, but no VA / RELU units
        assert not view.supports("va") and "relax.nn.softmax" not in info.host_ops
    with tvm_pim.runtime.collect() as stats:
        outs = _run(ex, args)
    assert len(stats) == len([k for k in info.kernels if k.offloaded])
    refs, mags = _numpy_refs(W, args, D)
    for i, (got, ref, mag) in enumerate(zip(outs, refs, mags)):
        assert got.shape == ref.shape
        if mag is None:  # attention output: a convex combination of V rows
            assert np.abs(got - ref).max() <= 0.02 * np.abs(args[5]).max()
        else:
            # t accumulates 300 FP16 terms; the others at most a few hundred
            assert _fp16_ok(got, ref, mag, 300 // 16 + 8), f"output {i}"


def test_policy_never_keeps_the_graph_on_the_host():
    mod, W, args = _all_ops_module()
    with tvm_pim.offload_options(policy="never"):
        ex = relax.build(mod, target="pim -hw=hbm-pim")
    info = tvm_pim.last_compile_info()
    assert not any(k.offloaded for k in info.kernels)
    assert info.host_op_ns == pytest.approx(info.gpu_latency_ns)
    with tvm_pim.runtime.collect() as stats:
        _run(ex, args)
    assert stats == []


def test_llvm_build_unchanged_by_import():
    mod, W, args = _all_ops_module()
    ex = relax.build(mod, target="llvm")
    outs = _run(ex, args)
    refs, _ = _numpy_refs(W, args, 32)
    for got, ref in zip(outs, refs):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_unknown_preset_lists_known_ones():
    with pytest.raises(Exception, match="hbm-pim"):
        tvm.target.Target("pim -hw=nosuchpim")


@pytest.mark.usefixtures("metaschedule_ready")
def test_tuned_database_is_applied_by_relax_build(tmp_path, monkeypatch):
    monkeypatch.setenv("TVM_PIM_CACHE", str(tmp_path))
    view = PimView(tvm_pim.load("hbm-pim"))
    spec = KernelSpec.make("gemv", b=1, m=1, n=1024, k=2048, resident=("A",))
    res = tuning.tune(spec, view, trials=16, per_iter=16, seed=3, save=True)
    rng = np.random.default_rng(0)
    W = (rng.standard_normal((2048, 1024)) * 0.02).astype("float32")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 2048), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            gv = bb.emit_output(relax.op.matmul(x, relax.const(W)))
        bb.emit_func_output(gv)
    with tvm_pim.offload_options(strategy="database", policy="always"):
        ex = relax.build(bb.get(), target="pim -hw=hbm-pim")
    k = tvm_pim.last_compile_info().kernels[0]
    assert k.choice.strategy == "database"
    assert k.choice.draft == res.best
    xv = rng.standard_normal((1, 2048)).astype("float32")
    (y,) = _run(ex, [xv])
    assert _fp16_ok(y, xv @ W, np.abs(xv) @ np.abs(W), 2048 // 16 + 3)


def test_exported_library_runs_in_a_fresh_process(tmp_path):
    mod, W, args = _all_ops_module()
    with tvm_pim.offload_options(policy="always", strategy="default"):
        ex = relax.build(mod, target="pim -hw=attacc")
    lib = tmp_path / "m.so"
    ex.export_library(str(lib))
    np.savez(tmp_path / "in.npz", *args)
    code = f"""
import numpy as np, tvm, tvm_pim
from tvm import relax
ex = tvm.runtime.load_module({str(lib)!r})
vm = relax.VirtualMachine(ex, tvm.cpu())
d = np.load({str(tmp_path / 'in.npz')!r})
args = [d[f'arr_{{i}}'] for i in range(6)]
with tvm_pim.runtime.collect() as st:
    out = vm['main'](*[tvm.runtime.tensor(a) for a in args])
print(len(st), float(out[3].numpy().sum()))
"""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    n, total = p.stdout.split()
    assert int(n) == 3
    assert abs(float(total) - float((args[2] @ W).sum())) < 0.05 * np.abs(args[2] @ W).sum() + 0.5


@pytest.mark.parametrize("hw", ["hbm-pim", "attacc"])
def test_shipped_schedules_cover_the_readme_decode_layer(hw, monkeypatch):
    """The databases committed under schedules/ are valid and relax.build applies them."""
    monkeypatch.delenv("TVM_PIM_SCHEDULES")  # the package data tvm_pim.schedules
    mod = import_onnx(load_onnx("zoo:gpt_decode"), "gpt")[0]
    with tvm_pim.offload_options(strategy="database", policy="always", resident=("k_cache", "v_cache")):
        relax.build(mod, target=f"pim -hw={hw}")
    kernels = [k for k in tvm_pim.last_compile_info().kernels if k.choice is not None]
    assert kernels
    assert all(k.choice.strategy == "database" for k in kernels), [(k.name, k.choice.strategy) for k in kernels]

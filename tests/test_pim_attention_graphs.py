"""Decode attention as the PyTorch / Hugging Face exporters write it, with a resident KV cache.

Layout operators on the resident caches (K transposed, head split, grouped-query
repeat) must be folded into the kernel's binding: the attention is offloaded whole
with K and V resident, and the outputs match onnxruntime.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from tvm import relax

import tvm_pim
from tvm_cim.common.onnx_io import import_onnx
from tvm_cim.common.report import run_vm
from tvm_pim.attention_graphs import attention_block
from tvm_pim.compiler.kernels import KernelSpec

ort = pytest.importorskip("onnxruntime")

B, T, H, D = 2, 256, 4, 64


def _inputs(model, seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for i in model.graph.input:
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        if i.name == "attention_mask":  # padding: the first tokens of sequence 0 masked out
            m = np.zeros(shape, np.float32)
            m[0, ..., :5] = -1e4
            out[i.name] = m
        else:
            out[i.name] = rng.standard_normal(shape).astype(np.float32)
    return out


def _build_and_compare(model, hw, strategy="default", policy="cost"):
    inputs = _inputs(model)
    names = [i.name for i in model.graph.input]
    mod = import_onnx(model, "attention")[0]
    with tvm_pim.offload_options(strategy=strategy, resident=("k_cache", "v_cache"), policy=policy):
        ex = relax.build(mod, target=f"pim -hw={hw}")
    info = tvm_pim.last_compile_info()
    with tvm_pim.runtime.collect() as stats:
        outs = run_vm(ex, inputs, names)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    refs = sess.run([o.name for o in model.graph.output], inputs)
    for name, got, ref in zip([o.name for o in model.graph.output], outs, refs):
        assert got.shape == ref.shape, name
        # FP16 on PIM (inputs, weights, scores, softmax); a wrong layout gives O(1) relative errors
        err = np.abs(got - ref).max()
        assert err <= 0.01 * np.abs(ref).max() + 1e-3, (name, err, np.abs(ref).max())
    return info, stats


@pytest.mark.parametrize("style,mask", [("gpt2", "none"), ("gpt2", "zeros"), ("sdpa", "none"), ("sdpa", "zeros"),
                                        ("split", "none"), ("llama", "zeros")])
def test_exported_attention_offloads_whole_with_resident_cache(style, mask):
    model = attention_block(style, batch=B, ctx=T, heads=H, head_dim=D, mask=mask)
    info, stats = _build_and_compare(model, "attacc")
    attn = [k for k in info.kernels if k.pattern == "attn"]
    assert len(attn) == 1 and attn[0].offloaded, [(k.name, k.reason) for k in info.kernels]
    # the same kernel as a graph storing K pre-transposed: nothing streamed, the scale folded
    ref = KernelSpec.make("attn", b=B * H, n=T, k=D, resident=("K", "V"), scale=1 / math.sqrt(D))
    assert (attn[0].spec.sizes, attn[0].spec.resident) == (ref.sizes, ref.resident)
    assert attn[0].spec.scale == pytest.approx(ref.scale, rel=1e-6)  # sdpa: sqrt(scale) twice, in float32
    # no softmax, scale, mask or transpose of the cache left on the host: only q's head split and the merge
    assert "relax.nn.softmax" not in info.host_ops
    assert info.host_ops.get("relax.permute_dims", 0) == 2
    assert not any(op in info.host_ops for op in ("relax.broadcast_to", "relax.expand_dims", "relax.where",
                                                    "relax.divide"))
    run = [s for s in stats if s["kind"] == "attn"]
    assert len(run) == 1 and run[0]["latency_ns"] == pytest.approx(attn[0].pim_ns)


def test_runtime_mask_offloads_both_matmuls_with_resident_cache():
    """AttAcc's softmax unit takes no mask: QK^T and PV run as GEMVs on the resident cache."""
    model = attention_block("gpt2", batch=B, ctx=T, heads=H, head_dim=D, mask="input")
    info, _ = _build_and_compare(model, "attacc", strategy="auto")
    assert not [k for k in info.kernels if k.pattern == "attn"]
    assert info.host_ops.get("relax.nn.softmax") == 1
    bg = {k.spec for k in info.kernels if k.pattern == "bgemv" and k.offloaded}
    assert KernelSpec.make("gemv", b=B * H, m=1, n=T, k=D, resident=("A",)) in bg  # q K^T, K resident
    assert KernelSpec.make("gemv", b=B * H, m=1, n=D, k=T, resident=("A",)) in bg  # P V, V resident


def test_transposed_cache_is_resident_on_hbm_pim():
    """Without a softmax unit: QK^T reads K resident through the transpose."""
    model = attention_block("gpt2", batch=B, ctx=T, heads=H, head_dim=D)
    info, stats = _build_and_compare(model, "hbm-pim", policy="always")
    qk = [k for k in info.kernels if k.pattern == "bgemv" and k.spec.dims["n"] == T]
    assert qk and qk[0].offloaded and qk[0].spec.resident == ("A",)
    assert len(stats) == len(info.kernels)
    assert info.host_ops.get("relax.permute_dims", 0) == 2


def test_transpose_used_elsewhere_is_not_folded():
    """A layout operator whose result the graph also uses elsewhere stays on the host."""
    from onnx import helper

    model = attention_block("gpt2", batch=1, ctx=64, heads=2, head_dim=32)
    kT = next(n for n in model.graph.node if n.op_type == "Transpose" and n.input[0] == "k_cache").output[0]
    model.graph.node.append(helper.make_node("ReduceSum", [kT], ["k_sum"], keepdims=0))
    model.graph.output.append(helper.make_tensor_value_info("k_sum", 1, [1, 2]))
    inputs = _inputs(model)
    mod = import_onnx(model, "attention")[0]
    with tvm_pim.offload_options(strategy="default", resident=("k_cache", "v_cache"), policy="always"):
        ex = relax.build(mod, target="pim -hw=attacc")
    info = tvm_pim.last_compile_info()
    attn = [k for k in info.kernels if k.pattern == "attn"]
    assert attn and attn[0].spec.resident == ("V",)  # K^T is computed on the host and streamed
    outs = run_vm(ex, inputs, [i.name for i in model.graph.input])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = sess.run(["y"], inputs)[0]
    assert np.abs(outs[0] - ref).max() <= 0.01 * np.abs(ref).max() + 1e-3

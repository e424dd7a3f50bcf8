"""LLM decode-step layers (ONNX) and their operator lists, for PIM experiments.

:func:`decode_layer` builds one transformer decoder layer processing one new
token per sequence against a KV cache given as graph inputs
(``k_cache`` ``(B, heads, D, L)``, already transposed; ``v_cache``
``(B, heads, L, D)``), in GPT-3 style (LayerNorm, GELU MLP) or LLaMA style
(RMSNorm, SwiGLU MLP).  The cache holds the context; appending the new
token's K/V (also graph outputs) is outside the graph.

:func:`decode_ops` lists the same layer's operators as sizes, so that
end-to-end decode latency can be evaluated per kernel without building
multi-gigabyte weights.

Shapes from shared/notes/hardware-reference.md: GPT3-13B (40 layers, hidden
5120, 40 heads of 128, FFN 4x) and LLaMA2-33B (60 layers, hidden 6656, 52
heads of 128, FFN 17920).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

LLMS = {
    "gpt3-13b": dict(layers=40, hidden=5120, heads=40, ffn=20480, arch="gpt"),
    "llama2-33b": dict(layers=60, hidden=6656, heads=52, ffn=17920, arch="llama"),
}


def decode_layer(batch: int = 1, ctx: int = 128, hidden: int = 512, heads: int = 4, ffn: int = 2048,
                 arch: str = "gpt", seed: int = 0):
    """One decoder layer for one new token (ONNX ModelProto).

    Parameters
    ----------
    batch, ctx, hidden, heads, ffn : int
        Sequences, cached tokens, hidden size, heads, MLP width.
    arch : {'gpt', 'llama'}
    seed : int
        Seed of the weights.

    Returns
    -------
    onnx.ModelProto
        Inputs ``x`` (B, 1, hidden), ``k_cache``, ``v_cache``; outputs ``y``,
        ``k_new``, ``v_new``.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    for k, v in dict(batch=batch, ctx=ctx, hidden=hidden, heads=heads, ffn=ffn).items():
        if not isinstance(v, int) or v <= 0:
            raise ValueError(f"decode_layer: {k} must be a positive integer, got {v!r}")
    if hidden % heads:
        raise ValueError(f"decode_layer: hidden ({hidden}) must be divisible by heads ({heads})")
    if arch not in ("gpt", "llama"):
        raise ValueError(f"decode_layer: arch must be 'gpt' or 'llama', got {arch!r}")
    D = hidden // heads
    rng = np.random.default_rng(seed)
    inits, nodes = [], []
    cnt = [0]

    def w(name, shape, std):
        a = (rng.standard_normal(shape) * std).astype(np.float32)
        inits.append(numpy_helper.from_array(a, name))
        return name

    def c(value, dtype=np.float32):
        cnt[0] += 1
        name = f"c{cnt[0]}"
        inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def op(t, ins, **attrs):
        cnt[0] += 1
        out = f"t{cnt[0]}"
        nodes.append(helper.make_node(t, ins, [out], name=f"{t}_{cnt[0]}", **attrs))
        return out

    def norm(x, name):
        if arch == "gpt":
            return op("LayerNormalization", [x, c(np.ones(hidden)), c(np.zeros(hidden))], axis=-1, epsilon=1e-5)
        sq = op("Mul", [x, x])
        ms = op("ReduceMean", [sq], axes=[-1], keepdims=1)
        r = op("Sqrt", [op("Add", [ms, c(1e-6)])])
        return op("Mul", [op("Div", [x, r]), c(np.ones(hidden))])

    std = 0.02
    h = norm("x", "ln1")
    qkv = op("MatMul", [h, w("w_qkv", (hidden, 3 * hidden), std)])
    q, kn, vn = (op("Slice", [qkv, c([i * hidden], np.int64), c([(i + 1) * hidden], np.int64), c([-1], np.int64)]) for i in range(3))
    nodes.append(helper.make_node("Identity", [kn], ["k_new"]))
    nodes.append(helper.make_node("Identity", [vn], ["v_new"]))
    qh = op("Transpose", [op("Reshape", [q, c([batch, 1, heads, D], np.int64)])], perm=[0, 2, 1, 3])
    s = op("MatMul", [qh, "k_cache"])
    s = op("Mul", [s, c(1.0 / math.sqrt(D))])
    p = op("Softmax", [s], axis=-1)
    o = op("MatMul", [p, "v_cache"])
    o = op("Reshape", [op("Transpose", [o], perm=[0, 2, 1, 3]), c([batch, 1, hidden], np.int64)])
    o = op("MatMul", [o, w("w_o", (hidden, hidden), std)])
    x1 = op("Add", ["x", o])
    h2 = norm(x1, "ln2")
    if arch == "gpt":
        u = op("MatMul", [h2, w("w_fc1", (hidden, ffn), std)])
        u = op("Mul", [u, op("Sigmoid", [op("Mul", [u, c(1.702)])])])  # GELU (sigmoid approximation)
    else:
        g = op("MatMul", [h2, w("w_gate", (hidden, ffn), std)])
        up = op("MatMul", [h2, w("w_up", (hidden, ffn), std)])
        u = op("Mul", [op("Mul", [g, op("Sigmoid", [g])]), up])
    d = op("MatMul", [u, w("w_fc2", (ffn, hidden), std)])
    nodes.append(helper.make_node("Add", [x1, d], ["y"]))
    graph = helper.make_graph(
        nodes,
        f"{arch}_decode_layer",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 1, hidden]),
            helper.make_tensor_value_info("k_cache", TensorProto.FLOAT, [batch, heads, D, ctx]),
            helper.make_tensor_value_info("v_cache", TensorProto.FLOAT, [batch, heads, ctx, D]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 1, hidden]),
            helper.make_tensor_value_info("k_new", TensorProto.FLOAT, [batch, 1, hidden]),
            helper.make_tensor_value_info("v_new", TensorProto.FLOAT, [batch, 1, hidden]),
        ],
        inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


@dataclass(frozen=True)
class LayerOp:
    """One operator of a decode layer: a PIM-capable kernel or a host-only op."""

    name: str
    phase: str  # qkv, attention, projection, ffn, other
    kernel: object | None  # KernelSpec for PIM-capable ops
    bytes: float = 0.0
    flops: float = 0.0


def decode_ops(model: str, batch: int, ctx: int) -> list[LayerOp]:
    """Operators of one decode layer of an LLM (for one new token per sequence)."""
    from .kernels import KernelSpec

    cfg = LLMS[model]
    H, heads, F = cfg["hidden"], cfg["heads"], cfg["ffn"]
    D = H // heads
    B = batch
    e = 2.0  # FP16 bytes
    ops = [
        LayerOp("norm1", "other", None, bytes=2 * B * H * e, flops=5 * B * H),
        LayerOp("qkv", "qkv", KernelSpec.make("gemv", b=1, m=B, n=3 * H, k=H, resident=("A",))),
        LayerOp("attention", "attention", KernelSpec.make("attn", b=B * heads, n=ctx, k=D)),
        LayerOp("projection", "projection", KernelSpec.make("gemv", b=1, m=B, n=H, k=H, resident=("A",))),
        LayerOp("residual1", "other", None, bytes=3 * B * H * e, flops=B * H),
        LayerOp("norm2", "other", None, bytes=2 * B * H * e, flops=5 * B * H),
    ]
    if cfg["arch"] == "gpt":
        ops.append(LayerOp("ffn1", "ffn", KernelSpec.make("gemv", b=1, m=B, n=F, k=H, resident=("A",))))
        ops.append(LayerOp("gelu", "other", None, bytes=2 * B * F * e, flops=8 * B * F))
    else:
        ops.append(LayerOp("ffn_gate_up", "ffn", KernelSpec.make("gemv", b=1, m=B, n=2 * F, k=H, resident=("A",))))
        ops.append(LayerOp("silu_mul", "other", None, bytes=3 * B * F * e, flops=6 * B * F))
    ops.append(LayerOp("ffn2", "ffn", KernelSpec.make("gemv", b=1, m=B, n=H, k=F, resident=("A",))))
    ops.append(LayerOp("residual2", "other", None, bytes=3 * B * H * e, flops=B * H))
    return ops

"""Decode attention as ONNX exporters write it (for tests and ``benchmarks/pim_kernels.py``).

Each builder returns one attention block of a decode step (one new token per
sequence) against a KV cache held in graph inputs ``k_cache`` / ``v_cache``,
shaped and ordered as the exporter leaves it:

==============  ===============================================================
style           what the exported graph does
==============  ===============================================================
``gpt2``        Hugging Face GPT-2 (eager attention): ``c_attn`` MatMul + bias,
                Split, head split of q (Reshape + ``Transpose[0,2,1,3]``),
                ``MatMul(q, Transpose(k_cache, perm=[0,1,3,2]))``, ``Div`` by
                ``sqrt(d)``, Softmax, ``MatMul(., v_cache)``, head merge
                (``Transpose[0,2,1,3]`` + Reshape), ``c_proj``.  Caches
                ``(B, H, T, D)``.
``sdpa``        PyTorch's ``scaled_dot_product_attention`` export: q and the
                transposed k each multiplied by ``sqrt(scale)`` before the
                MatMul.  Caches ``(B, H, T, D)``.
``split``       caches stored unsplit, ``(B, T, H*D)``: the head split
                (Reshape + Transpose) is applied to the cache in the graph.
``llama``       Hugging Face LLaMA with grouped-query heads: caches
                ``(B, Hkv, T, D)`` repeated per query head by ``repeat_kv``
                (Unsqueeze, Expand, Reshape), ``Mul`` by ``d**-0.5``.
==============  ===============================================================

``mask``: ``none``; ``zeros`` (the causal mask of a one-token decode step as
exporters fold it: a constant of zeros added to the scores, or for GPT-2 a
``Where`` on an all-true constant); ``input`` (a run-time additive
``attention_mask`` input ``(B, 1, 1, T)``).

The new token's K and V are outputs (``k_new``, ``v_new``); appending them to
the cache is the caller's business, as in ``zoo:gpt_decode``.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper

from tvm_cim.common.zoo import GraphParts

STYLES = ("gpt2", "sdpa", "split", "llama")
MASKS = ("none", "zeros", "input")


def attention_block(style: str = "gpt2", batch: int = 1, ctx: int = 128, heads: int = 4, head_dim: int = 32,
                    kv_heads: int | None = None, mask: str = "none", seed: int = 0) -> onnx.ModelProto:
    """One decode attention block as an exporter writes it (see the module docstring).

    Parameters
    ----------
    style : {'gpt2', 'sdpa', 'split', 'llama'}
    batch, ctx, heads, head_dim : int
        Sequences, cached tokens, query heads, head size.
    kv_heads : int, optional
        Key/value heads of ``llama`` (grouped-query attention; default ``heads // 2``
        when ``heads`` is even).
    mask : {'none', 'zeros', 'input'}
    seed : int
        Seed of the projection weights.

    Returns
    -------
    onnx.ModelProto
        Inputs ``x`` ``(B, 1, H*D)``, ``k_cache``, ``v_cache`` (and ``attention_mask``);
        outputs ``y``, ``k_new``, ``v_new``.
    """
    if style not in STYLES:
        raise ValueError(f"unknown style {style!r}; known: {', '.join(STYLES)}")
    if mask not in MASKS:
        raise ValueError(f"unknown mask {mask!r}; known: {', '.join(MASKS)}")
    B, T, H, D = batch, ctx, heads, head_dim
    Hkv = H if style != "llama" else (kv_heads or (H // 2 if H % 2 == 0 else H))
    if H % Hkv:
        raise ValueError(f"heads ({H}) must be a multiple of kv_heads ({Hkv})")
    hidden = H * D
    rng = np.random.default_rng(seed)
    g = GraphParts("c")
    inits, nodes, c, op = g.inits, g.nodes, g.const, g.op

    def i64(v):
        return c(v, np.int64)

    kvw = Hkv * D
    w_qkv = c(rng.standard_normal((hidden, hidden + 2 * kvw)) * 0.05)
    qkv = op("Add", [op("MatMul", ["x", w_qkv]), c(rng.standard_normal(hidden + 2 * kvw) * 0.02)])
    q, kn, vn = (op("Slice", [qkv, i64([a]), i64([b]), i64([-1])])
                 for a, b in ((0, hidden), (hidden, hidden + kvw), (hidden + kvw, hidden + 2 * kvw)))
    nodes.append(helper.make_node("Identity", [kn], ["k_new"]))
    nodes.append(helper.make_node("Identity", [vn], ["v_new"]))
    qh = op("Transpose", [op("Reshape", [q, i64([B, 1, H, D])])], perm=[0, 2, 1, 3])  # (B, H, 1, D)
    if style == "split":
        k = op("Transpose", [op("Reshape", ["k_cache", i64([B, T, H, D])])], perm=[0, 2, 1, 3])
        v = op("Transpose", [op("Reshape", ["v_cache", i64([B, T, H, D])])], perm=[0, 2, 1, 3])
    elif style == "llama":
        rep = H // Hkv

        def repeat_kv(t):
            e = op("Expand", [op("Unsqueeze", [t, i64([2])]), i64([B, Hkv, rep, T, D])])
            return op("Reshape", [e, i64([B, H, T, D])])

        k, v = repeat_kv("k_cache"), repeat_kv("v_cache")
    else:
        k, v = "k_cache", "v_cache"
    kT = op("Transpose", [k], perm=[0, 1, 3, 2])
    if style == "sdpa":
        s2 = c(math.sqrt(1.0 / math.sqrt(D)))
        s = op("MatMul", [op("Mul", [qh, s2]), op("Mul", [kT, s2])])
    elif style == "gpt2":
        s = op("Div", [op("MatMul", [qh, kT]), c(math.sqrt(D))])
    else:
        s = op("Mul", [op("MatMul", [qh, kT]), c(D ** -0.5)])
    if mask == "zeros":
        if style == "gpt2":
            s = op("Where", [c(np.ones((1, 1, 1, T), bool), bool), s, c(np.finfo(np.float32).min)])
        else:
            s = op("Add", [s, c(np.zeros((1, 1, 1, T)))])
    elif mask == "input":
        s = op("Add", [s, "attention_mask"])
    p = op("Softmax", [s], axis=-1)
    o = op("MatMul", [p, v])
    o = op("Reshape", [op("Transpose", [o], perm=[0, 2, 1, 3]), i64([B, 1, hidden])])
    nodes.append(helper.make_node("MatMul", [o, c(rng.standard_normal((hidden, hidden)) * 0.05)], ["y"]))
    cache = [B, T, hidden] if style == "split" else [B, Hkv, T, D]
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, 1, hidden]),
        helper.make_tensor_value_info("k_cache", TensorProto.FLOAT, cache),
        helper.make_tensor_value_info("v_cache", TensorProto.FLOAT, cache),
    ]
    if mask == "input":
        inputs.append(helper.make_tensor_value_info("attention_mask", TensorProto.FLOAT, [B, 1, 1, T]))
    graph = helper.make_graph(
        nodes, f"{style}_decode_attention", inputs,
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [B, 1, w]) for n, w in
         (("y", hidden), ("k_new", kvw), ("v_new", kvw))],
        inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m

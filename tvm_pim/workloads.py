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

from dataclasses import dataclass

LLMS = {
    "gpt3-13b": dict(layers=40, hidden=5120, heads=40, ffn=20480, arch="gpt"),
    "llama2-33b": dict(layers=60, hidden=6656, heads=52, ffn=17920, arch="llama"),
}


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

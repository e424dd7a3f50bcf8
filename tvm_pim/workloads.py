"""Kernel workloads: the sizes of DCC's evaluation and LLM decode layers as kernels.

=======================  ========================================================
name                     what it lists
=======================  ========================================================
:func:`paper_kernels`    the kernel workloads of ``benchmarks/pim_kernels.py`` (small
                         scale), tuned by ``python -m tvm_pim tune --paper``
:func:`default_workloads` training workloads of the coupled predictor, per kind
                         (``python -m tvm_pim predictor``)
:data:`LLMS`,            GPT3-13B and LLaMA2-33B, and one decode layer of either as
:func:`decode_ops`       PIM-capable kernels plus host-only operators with their
                         bytes and flops, so that end-to-end decode latency can be
                         evaluated per kernel without building multi-gigabyte weights
=======================  ========================================================

The decode layers as ONNX models (``zoo:gpt_decode``, ``zoo:llama_decode``)
are in :mod:`tvm_cim.common.zoo`.  Shapes from
shared/notes/hardware-reference.md: GPT3-13B (40 layers, hidden 5120, 40
heads of 128, FFN 4x) and LLaMA2-33B (60 layers, hidden 6656, 52 heads of
128, FFN 17920).
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm_cim.common import onnx_io
from tvm_cim.common.cli import UserError

from .compiler.kernels import KernelShapeError, KernelSpec
from .hardware.view import PimView


def paper_kernels(view: PimView) -> list[KernelSpec]:
    """The kernel workloads of ``benchmarks/pim_kernels.py`` (small scale) that the device can run.

    ``python -m tvm_pim tune --paper`` tunes them.
    """
    out = []
    for bt in (1, 4, 16):
        for n in (1024, 2048, 4096):
            out.append(KernelSpec.make("gemv", b=32 * bt, m=1, n=n, k=128))
            out.append(KernelSpec.make("red", b=bt, n=n, k=n, resident=("A",)))
            out.append(KernelSpec.make("va", b=bt, i=n * n, resident=("A", "B")))
            out.append(KernelSpec.make("relu", b=bt, i=n * n, resident=("A",)))
            out.append(KernelSpec.make("attn", b=32 * bt, n=n, k=128))
    return [s for s in out if view.supports(s.kind)]


def default_workloads(view: PimView, kind: str, scale: str = "small") -> list[KernelSpec]:
    """Workloads of a kind like DCC's evaluation (batch x heads, head size 128, LLM sizes)."""
    out: list[KernelSpec] = []
    if kind == "gemv":
        sizes = [512, 1024, 2048, 4096] if scale != "tiny" else [256, 1024]
        batches = [1, 4, 16, 32] if scale != "tiny" else [1, 8]
        for b in batches:
            for n in sizes:
                out.append(KernelSpec.make("gemv", b=b, m=1, n=n, k=128))
        for n, k in ((4096, 4096), (5120, 5120), (15360, 5120), (6656, 6656)) if scale != "tiny" else ((1024, 1024),):
            out.append(KernelSpec.make("gemv", b=1, m=1, n=n, k=k))
    elif kind == "red":
        for b in ([1, 4, 16] if scale != "tiny" else [1, 4]):
            for n in ([1024, 2048, 4096] if scale != "tiny" else [256, 1024]):
                out.append(KernelSpec.make("red", b=b, n=n, k=n, resident=("A",)))
    elif kind in ("va", "relu"):
        for b in ([1, 4, 16] if scale != "tiny" else [1, 4]):
            for n in ([1024, 2048, 4096] if scale != "tiny" else [256, 1024]):
                res = ("A", "B") if kind == "va" else ("A",)
                out.append(KernelSpec.make(kind, b=b, i=n * n // 4 if scale != "tiny" else n * 16, resident=res))
    elif kind == "attn":
        for b in ([4, 16, 32] if scale != "tiny" else [4, 8]):
            for n in ([512, 1024, 2048] if scale != "tiny" else [128, 512]):
                out.append(KernelSpec.make("attn", b=b, n=n, k=128))
    return [w for w in out if view.supports(w.kind)]


LLMS = {
    "gpt3-13b": dict(layers=40, hidden=5120, heads=40, ffn=20480, arch="gpt"),
    "llama2-33b": dict(layers=60, hidden=6656, heads=52, ffn=17920, arch="llama"),
}


@dataclass(frozen=True)
class LayerOp:
    """One operator of a decode layer: a PIM-capable kernel or a host-only op."""

    name: str
    phase: str  # qkv, attention, projection, ffn, other
    kernel: KernelSpec | None  # None for host-only ops
    bytes: float = 0.0
    flops: float = 0.0


def decode_ops(model: str, batch: int, ctx: int) -> list[LayerOp]:
    """Operators of one decode layer of an LLM (for one new token per sequence)."""
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


def parse_kernel(text: str) -> KernelSpec:
    """``gemv:b=32,m=1,n=1024,k=128[,resident=A+x]`` -> KernelSpec.

    Raises
    ------
    UserError
        Unknown kind, missing or non-integer size, impossible residency.
    """
    kind, _, rest = text.partition(":")
    items = rest.split(",")
    resident = [i.partition("=")[2] for i in items if i.startswith("resident=")]
    sizes = onnx_io.parse_options(",".join(i for i in items if not i.startswith("resident=")), text,
                                  example="gemv:b=1,m=1,n=4096,k=4096,resident=A")
    try:
        return KernelSpec.make(kind, resident=tuple(filter(None, resident[-1].split("+"))) if resident else None,
                               **sizes)
    except KernelShapeError as e:
        raise UserError(f"kernel '{text}': {e}") from None

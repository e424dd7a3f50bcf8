"""The host (GPU) as a roofline: DCC's GPU-only baseline and the host side of a graph.

``time = max(bytes / bandwidth, flops / peak) + launch overhead``, with the
bandwidth, FP16 peak and launch overhead of the hardware file's
``[system.host]`` table (an A100 80 GB by default).  The bandwidth is the one
at which the host reaches the PIM stacks, which are its memory
(:attr:`tvm_pim.abstraction.PimView.host_bw_gbs`): the host can exceed
neither its own memory interface nor the stacks' buses.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .abstraction import ELEM_BYTES, PimView
from .kernels import KernelSpec


@dataclass(frozen=True)
class HostTime:
    """Roofline time of one host kernel."""

    ns: float
    memory_ns: float
    compute_ns: float
    launch_ns: float
    bytes: float
    flops: float

    @property
    def bound(self) -> str:
        return "memory" if self.memory_ns >= self.compute_ns else "compute"


def roofline(view: PimView, nbytes: float, flops: float, launches: int = 1) -> HostTime:
    """Roofline time of a host kernel moving ``nbytes`` and doing ``flops``."""
    h = view.hw.system.host
    mem = nbytes / view.host_bw_gbs  # bytes / (GB/s) = ns
    comp = flops / (h.tflops_fp16 * 1e3)  # flops / (TFLOP/s) = ps -> /1e3 ns
    launch = launches * h.launch_overhead_us * 1e3
    return HostTime(max(mem, comp) + launch, mem, comp, launch, nbytes, flops)


def kernel_time(view: PimView, spec: KernelSpec) -> HostTime:
    """GPU-only time of a PIM kernel (every tensor read or written once, FP16)."""
    return roofline(view, spec.bytes(ELEM_BYTES), spec.flops())


def relax_op_cost(call) -> tuple[float, float]:
    """(bytes, flops) of one Relax operator call at FP16, from its argument and result shapes."""
    from tvm import relax

    def size(expr) -> int:
        ty = getattr(expr, "ty", None)
        shape = getattr(ty, "shape", None)
        if shape is None:
            fields = getattr(ty, "fields", None)
            return sum(size_of_ty(f) for f in fields) if fields else 0
        try:
            return int(np.prod([int(s) for s in shape]))
        except (TypeError, ValueError):
            return 0

    def size_of_ty(ty) -> int:
        shape = getattr(ty, "shape", None)
        try:
            return int(np.prod([int(s) for s in shape])) if shape is not None else 0
        except (TypeError, ValueError):
            return 0

    args = [a for a in call.args if isinstance(a, relax.Expr)]
    nbytes = (sum(size(a) for a in args) + size(call)) * ELEM_BYTES
    name = call.op.name if hasattr(call.op, "name") else ""
    out = size(call)
    if name == "relax.matmul" and len(args) == 2:
        a_shape = [int(s) for s in args[0].ty.shape]
        k = a_shape[-1]
        flops = 2.0 * out * k
    elif name == "relax.nn.conv2d":
        w = [int(s) for s in args[1].ty.shape]
        flops = 2.0 * out * int(np.prod(w[1:]))
    else:
        flops = float(max(out, sum(size(a) for a in args)))
    return float(nbytes), flops

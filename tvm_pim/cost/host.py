"""The host (GPU) as a roofline: DCC's GPU-only baseline and the host side of a graph.

``time = max(bytes / bandwidth, flops / peak) + launch overhead``, with the
bandwidth, FP16 peak and launch overhead of the hardware file's
``[system.host]`` table (an A100 80 GB by default).  The bandwidth is the one
at which the host reaches the PIM stacks, which are its memory
(:attr:`tvm_pim.hardware.view.PimView.host_bw_gbs`): the host can exceed
neither its own memory interface nor the stacks' buses.

:func:`relax_op_cost` sizes one Relax operator call (FP16 bytes and flops
from its shapes); :func:`graph_ns` sums the roofline over the operators a
Relax module leaves on the host (view operators are free).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tvm
from tvm import relax

from tvm_cim.common.relax_utils import callers, shape_of

from ..compiler.kernels import KernelSpec
from ..hardware.schema import HostModel
from ..hardware.view import ELEM_BYTES, PimView

# operators that only reinterpret a tensor: free on the host
VIEW_OPS = frozenset({"relax.reshape", "relax.squeeze", "relax.expand_dims", "relax.flatten"})
# calls that are not host operators: offloaded kernels and TIR functions the frontend made
_NOT_TIMED = frozenset({"relax.call_dps_packed", "relax.call_pure_packed", "relax.call_tir"})


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
        """``'memory'`` or ``'compute'``: which roof the kernel hits."""
        return "memory" if self.memory_ns >= self.compute_ns else "compute"


def roofline(view: PimView, nbytes: float, flops: float, launches: int = 1, host: HostModel | None = None,
             launch_us: float | None = None) -> HostTime:
    """Roofline time of a host kernel moving ``nbytes`` and doing ``flops``.

    Parameters
    ----------
    view : PimView
    nbytes, flops : float
    launches : int
        Kernel launches charged.
    host : HostModel, optional
        The roofline (default: ``hw.system.host``; or one of ``hw.system.baselines``), with its
        bandwidth and compute derating (``bandwidth_utilisation``, ``compute_utilisation``).
    launch_us : float, optional
        Launch overhead per kernel (default: the host's ``launch_overhead_us``).
    """
    h = view.hw.system.host if host is None else host
    mem = nbytes / view.host_bandwidth(h)  # bytes / (GB/s) = ns
    comp = flops / (h.tflops_fp16 * h.compute_utilisation * 1e3)  # flops / (TFLOP/s) = ps -> /1e3 ns
    launch = launches * (h.launch_overhead_us if launch_us is None else launch_us) * 1e3
    return HostTime(max(mem, comp) + launch, mem, comp, launch, nbytes, flops)


def kernel_time(view: PimView, spec: KernelSpec, host: HostModel | None = None,
                launch_us: float | None = None) -> HostTime:
    """GPU-only time of a PIM kernel (every tensor read or written once, FP16); ``host`` and
    ``launch_us`` as in :func:`roofline`."""
    return roofline(view, spec.bytes(ELEM_BYTES), spec.flops(), host=host, launch_us=launch_us)


def _type_elements(ty) -> int:
    """Elements of a tensor type (0 when its shape is unknown or symbolic)."""
    shape = getattr(ty, "shape", None)
    try:
        return int(np.prod([int(s) for s in shape])) if shape is not None else 0
    except (TypeError, ValueError):
        return 0


def _elements(expr) -> int:
    """Elements of a tensor-typed expression, or of every field of a tuple-typed one."""
    shape = shape_of(expr)
    if shape is not None:
        return int(np.prod(shape))
    fields = getattr(getattr(expr, "ty", None), "fields", None)
    return sum(_type_elements(f) for f in fields) if fields else 0


def relax_op_cost(call: relax.Call) -> tuple[float, float]:
    """(bytes, flops) of one Relax operator call at FP16, from its argument and result shapes."""
    args = [a for a in call.args if isinstance(a, relax.Expr)]
    nbytes = (sum(_elements(a) for a in args) + _elements(call)) * ELEM_BYTES
    name = getattr(call.op, "name", "")
    out = _elements(call)
    if name == "relax.matmul" and len(args) == 2:
        flops = 2.0 * out * shape_of(args[0])[-1]
    elif name == "relax.nn.conv2d":
        flops = 2.0 * out * int(np.prod(shape_of(args[1])[1:]))
    else:
        flops = float(max(out, sum(_elements(a) for a in args)))
    return float(nbytes), flops


def _operand_transpose(call, users: dict) -> bool:
    """A ``permute_dims`` that swaps the last two axes and feeds only matmuls: a BLAS
    transposed-operand flag on the GPU, not a kernel."""
    if call.op.name != "relax.permute_dims":
        return False
    axes = call.attrs.axes
    nd = len(shape_of(call) or ())
    if axes is None or nd < 2:
        return False
    if [int(a) for a in axes] != list(range(nd - 2)) + [nd - 1, nd - 2]:
        return False
    us = users.get(call, [])
    return bool(us) and all(getattr(u.op, "name", "") == "relax.matmul" for u in us)


def graph_ns(mod: tvm.IRModule, view: PimView) -> float:
    """Roofline time of the operators a Relax module runs on the host, one kernel each.

    View operators (reshape and friends) are free, and so is a transpose of a
    matmul operand's last two axes (the GEMM reads it transposed); offloaded
    calls are not host operators.
    """
    ns = 0.0
    for _, f in callers(mod):
        var2val = relax.analysis.get_var2val(f)
        calls: list = []
        relax.analysis.post_order_visit(
            f.body, lambda e: calls.append(e) if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op) else None)
        users: dict = {}
        for c in calls:
            for a in c.args:
                if isinstance(a, relax.Var) and a in var2val:
                    users.setdefault(var2val[a], []).append(c)
        for call in calls:
            name = call.op.name
            if name in VIEW_OPS or name in _NOT_TIMED or _operand_transpose(call, users):
                continue
            ns += roofline(view, *relax_op_cost(call)).ns
    return ns

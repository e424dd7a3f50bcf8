"""Relax helpers both offloads use: shapes, composites, call sites, caller rewrites, host census."""

from __future__ import annotations

from collections import Counter
from typing import Callable

import numpy as np
import tvm
from tvm import relax


def shape_of(expr) -> tuple[int, ...] | None:
    """The static shape of a Relax expression, or None (unknown or symbolic shape)."""
    shape = getattr(getattr(expr, "ty", None), "shape", None)
    if shape is None:
        return None
    try:
        return tuple(int(s) for s in shape)
    except (TypeError, ValueError):
        return None


def dtype_of(expr) -> str | None:
    """The dtype of a tensor-typed Relax expression."""
    return getattr(getattr(expr, "ty", None), "dtype", None)


def is_const(expr) -> bool:
    """Whether an expression is a constant tensor."""
    return isinstance(expr, tvm.ir.GenericConst)


def const_value(expr) -> np.ndarray:
    """The value of a constant tensor."""
    return expr.value.numpy()


def composite_name(func, prefix: str = "") -> str | None:
    """The ``Composite`` attribute of a function if it starts with ``prefix``, else None."""
    attrs = getattr(func, "attrs", None)
    if attrs is None or "Composite" not in attrs:
        return None
    name = str(attrs["Composite"])
    return name if name.startswith(prefix) else None


def composites(mod: tvm.IRModule, prefix: str) -> dict[str, relax.Function]:
    """Composite functions of a module whose name starts with ``prefix``, by global name."""
    return {gv.name_hint: f for gv, f in mod.functions.items()
            if isinstance(f, relax.Function) and composite_name(f, prefix)}


def callers(mod: tvm.IRModule):
    """``(GlobalVar, Function)`` of every Relax function that is not a composite."""
    return [(gv, f) for gv, f in mod.functions.items() if isinstance(f, relax.Function) and not composite_name(f)]


def rewrite_callers(mod: tvm.IRModule, mutator) -> tvm.IRModule:
    """Apply a ``PyExprMutator`` to every function that is not a composite.

    Returns
    -------
    tvm.IRModule
        The mutator's builder module after the rewrite.
    """
    for gv, f in callers(mod):
        mutator.builder_.update_func(gv, mutator.visit_expr(f))
    return mutator.builder_.get()


def call_order(mod: tvm.IRModule, prefix: str) -> list[str]:
    """Global names of the ``prefix`` composites in the order the callers call them."""
    order: list[str] = []

    def visit(e):
        if isinstance(e, relax.Call) and isinstance(e.op, relax.GlobalVar):
            f = mod[e.op]
            if composite_name(f, prefix) and e.op.name_hint not in order:
                order.append(e.op.name_hint)

    for _, f in callers(mod):
        relax.analysis.post_order_visit(f.body, visit)
    return order


def operator_calls(mod: tvm.IRModule) -> list[relax.Call]:
    """Every operator call (``tvm.ir.Op``) in the functions that are not composites, in post order."""
    calls: list = []

    def visit(e):
        if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op):
            calls.append(e)

    for _, f in callers(mod):
        relax.analysis.post_order_visit(f.body, visit)
    return calls


def host_ops(mod: tvm.IRModule) -> dict[str, int]:
    """Relax operator name -> count of the operators left on the host.

    Operators the frontend lowered to TIR count as ``tir.<function>``; the
    packed calls of offloaded regions are not operators.
    """
    counts: Counter = Counter()
    for e in operator_calls(mod):
        name = e.op.name
        if name == "relax.call_tir":
            counts["tir." + str(e.args[0].name_hint).rstrip("0123456789")] += 1
        elif name not in ("relax.call_dps_packed", "relax.call_pure_packed"):
            counts[name] += 1
    return dict(sorted(counts.items()))


def has_op(mod: tvm.IRModule, name: str) -> bool:
    """Whether any Relax function of the module calls operator ``name``."""
    found = []

    def visit(e):
        if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op) and e.op.name == name:
            found.append(e)

    for _, f in mod.functions.items():
        if isinstance(f, relax.Function):
            relax.analysis.post_order_visit(f.body, visit)
    return bool(found)


@relax.expr_functor.mutator
class UniqueCallSites(relax.PyExprMutator):
    """Give every call of a ``prefix`` composite its own function.

    Structurally identical operators (attention's ``QK^T`` and ``x V`` at the
    same shapes, the repeated blocks of a network) share one composite after
    ``FuseOpsByPattern``; each call site must be its own region with its own
    hardware, program and statistics.
    """

    def __init__(self, mod, prefix: str):
        super().__init__(mod)
        self.mod_ = mod
        self.prefix = prefix
        self.seen: dict[str, int] = {}

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if isinstance(call.op, relax.GlobalVar) and composite_name(self.mod_[call.op], self.prefix):
            name = call.op.name_hint
            k = self.seen.get(name, 0)
            self.seen[name] = k + 1
            if k:
                func = self.mod_[call.op].with_attr("call_site", k)
                gv = self.builder_.add_func(func, f"{name}_site{k}")
                return relax.Call(gv, call.args, call.attrs)
        return call


@relax.expr_functor.mutator
class LowerComposites(relax.PyExprMutator):
    """Replace calls of chosen composites with what ``lowered[name](args, ty)`` builds
    (a ``call_dps_packed`` of the device runtime)."""

    def __init__(self, mod, lowered: dict[str, Callable]):
        super().__init__(mod)
        self.lowered = lowered

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if isinstance(call.op, relax.GlobalVar) and call.op.name_hint in self.lowered:
            return self.lowered[call.op.name_hint](list(call.args), call.ty)
        return call


def lower_composites(mod: tvm.IRModule, lowered: dict[str, Callable]) -> tvm.IRModule:
    """Apply :class:`LowerComposites` to the callers, then drop the composites no longer called."""
    return relax.transform.DeadCodeElimination()(rewrite_callers(mod, LowerComposites(mod, lowered)))

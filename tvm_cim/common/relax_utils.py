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


# ============================================================================ constant folding in numpy
def _np_reshape(x, shape):
    return np.reshape(x, tuple(int(s) for s in shape.values))


def _np_permute(x, axes):
    return np.transpose(x, None if axes is None else tuple(int(a) for a in axes))


# Relax operators folded in numpy: elementwise IEEE operations (correctly rounded, as TVM's kernels
# compute them) and layout changes; anything else is left to TVM's FoldConstant.
_NUMPY_FOLD = {
    "relax.add": lambda c, a: np.add(a[0], a[1]),
    "relax.subtract": lambda c, a: np.subtract(a[0], a[1]),
    "relax.multiply": lambda c, a: np.multiply(a[0], a[1]),
    "relax.divide": lambda c, a: np.divide(a[0], a[1]),
    "relax.sqrt": lambda c, a: np.sqrt(a[0]),
    "relax.negative": lambda c, a: np.negative(a[0]),
    "relax.reshape": lambda c, a: _np_reshape(a[0], c.args[1]),
    "relax.permute_dims": lambda c, a: _np_permute(a[0], c.attrs.axes),
}


def _const_arg(e, values):
    if isinstance(e, tvm.ir.GenericConst):
        return const_value(e)
    if isinstance(e, relax.Var) and e in values:
        return values[e]
    if isinstance(e, (tvm.tirx.FloatImm, tvm.tirx.IntImm)):  # a scalar operand (Relax prim value)
        return np.asarray(e.value, dtype=str(e.ty).replace("T.", ""))
    if isinstance(e, relax.ShapeExpr):
        return e
    return None


@relax.expr_functor.mutator
class _ReplaceFolded(relax.PyExprMutator):
    def __init__(self, mod, values):
        super().__init__(mod)
        self.values = values

    def visit_var_(self, var):
        if var in self.values:
            return relax.const(self.values[var])
        return super().visit_var_(var)

    def visit_dataflow_var_(self, var):
        if var in self.values:
            return relax.const(self.values[var])
        return super().visit_dataflow_var_(var)


def fold_constants_numpy(mod: tvm.IRModule) -> tvm.IRModule:
    """Fold constant subexpressions of elementwise arithmetic and layout changes with numpy.

    What a BatchNorm folded into a convolution leaves (``w * gamma /
    sqrt(var + eps)``) and transposed Gemm weights, without building a TVM
    kernel per expression as ``relax.transform.FoldConstant`` does; the
    results are the same IEEE operations.  Run ``FoldConstant`` after it for
    whatever else is constant.
    """
    for gv, f in callers(mod):
        values: dict = {}
        for blk in f.body.blocks:
            for b in blk.bindings:
                v = b.value
                if not (isinstance(v, relax.Call) and isinstance(v.op, tvm.ir.Op) and v.op.name in _NUMPY_FOLD):
                    continue
                args = [_const_arg(a, values) for a in v.args]
                if any(a is None for a in args):
                    continue
                dtype = dtype_of(b.var)
                out = _NUMPY_FOLD[v.op.name](v, args)
                if dtype is None or shape_of(b.var) != tuple(np.shape(out)):
                    continue
                values[b.var] = np.ascontiguousarray(out, dtype=str(dtype))
        if values:
            mut = _ReplaceFolded(mod, values)
            mod.update_func(gv, mut.visit_expr(f))
    return relax.transform.DeadCodeElimination()(mod)


@tvm.transform.module_pass(opt_level=0, name="FoldConstantsNumpy")
def FoldConstantsNumpy(mod: tvm.IRModule, ctx) -> tvm.IRModule:  # noqa: N802 - TVM pass naming
    """:func:`fold_constants_numpy` as a module pass."""
    return fold_constants_numpy(mod)


# ============================================================================ host kernels shared across channel counts
#: Host operators whose kernel is the same arithmetic at every channel count (per element, or per channel
#: with per-channel constants): at a symbolic channel count one kernel serves them all.  Each element is
#: computed by the same float operations in the same order as at a static count (no reduction runs over
#: channels), so the bits do not change (``tests/test_passes.py`` checks it on zoo models).
SHARED_CHANNEL_OPS = ("relax.nn.batch_norm", "relax.nn.relu", "relax.concat")


def _channel_data(value) -> list | None:
    """The NCHW tensor arguments of a call that :data:`SHARED_CHANNEL_OPS` may share, or None."""
    if not (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and value.op.name in SHARED_CHANNEL_OPS):
        return None
    name = value.op.name
    if name == "relax.concat":
        if int(value.attrs.axis) != 1 or not isinstance(value.args[0], relax.Tuple):
            return None
        data = list(value.args[0].fields)
    elif name == "relax.nn.batch_norm" and (int(value.attrs.axis) != 1 or bool(value.attrs.training)):
        return None
    else:
        data = [value.args[0]]
    for d in data:
        shape = getattr(d.ty, "shape", None)
        if not isinstance(d, relax.Var) or shape is None or len(shape) != 4:
            return None
    return data


@relax.expr_functor.mutator
class _ShareChannelKernels(relax.PyExprMutator):
    """Give :data:`SHARED_CHANNEL_OPS` symbolic channel counts (``R.match_cast``), back to static where
    another operator, a region or the function's result reads them."""

    def __init__(self, mod: tvm.IRModule):
        super().__init__(mod)
        self.symbolic: dict = {}  # a rewritten var -> its symbolic-channel version
        self.static_use: set = set()  # original vars read by something other than a shared op's data

    def analyse(self, func: relax.Function) -> None:
        """Which vars something other than a shared operator's data argument reads."""
        shared: set = set()
        for blk in func.body.blocks:
            for b in blk.bindings:
                v = b.value
                data = None
                if isinstance(b.var, relax.DataflowVar):
                    data = _channel_data(v)
                    if data is None and isinstance(v, relax.TupleGetItem) and v.tuple_value in shared:
                        data = [v.tuple_value]
                if data is not None:
                    shared.add(b.var)
                self.static_use.update(u for u in relax.analysis.free_vars(v)
                                       if data is None or not any(u.same_as(d) for d in data))
        self.static_use.update(relax.analysis.free_vars(func.body.body))

    def _symbolic(self, var):
        """The symbolic-channel version of a (rewritten) 4-D tensor var: one channel var of its own."""
        var = self.symbolic.get(var, var)
        if isinstance(var.ty.shape[1], tvm.tirx.Var):
            return var
        n, _, h, w = var.ty.shape
        return self.builder_.match_cast(var, relax.TensorType([n, tvm.tirx.Var("c", "int64"), h, w], var.ty.dtype))

    def _bind(self, old, new) -> None:
        static = self.builder_.match_cast(new, old.ty) if old in self.static_use else new
        self.set_var_remap(old, static)
        self.symbolic[static] = new

    def visit_var_binding_(self, binding):
        value = binding.value
        if isinstance(binding.var, relax.DataflowVar):
            data = _channel_data(value)
            if data is not None:
                if value.op.name == "relax.concat":
                    args = [relax.Tuple([self._symbolic(self.visit_expr(d)) for d in data])]
                else:
                    x = self._symbolic(self.visit_expr(data[0]))
                    rest = [self.visit_expr(a) for a in value.args[1:]]
                    if value.op.name == "relax.nn.batch_norm":  # per-channel constants at the same count
                        c = x.ty.shape[1]
                        rest = [self.builder_.match_cast(p, relax.TensorType([c], p.ty.dtype)) for p in rest]
                    args = [x] + rest
                self._bind(binding.var, self.builder_.emit(relax.Call(value.op, args, value.attrs)))
                return
            if isinstance(value, relax.TupleGetItem):
                t = self.visit_expr(value.tuple_value)
                if t in self.symbolic:
                    self._bind(binding.var, self.builder_.emit(relax.TupleGetItem(self.symbolic[t], value.index)))
                    return
        super().visit_var_binding_(binding)


@tvm.transform.module_pass(opt_level=0, name="ShareHostKernels")
def ShareHostKernels(mod: tvm.IRModule, ctx) -> tvm.IRModule:  # noqa: N802 - TVM pass naming
    """Let host operators that differ only in their channel count share one compiled kernel.

    A DenseNet calls batch norm and ReLU at 58 channel counts and concatenates
    at 54: TVM's LLVM build compiles a kernel for each (127 host functions, most
    of the build and JIT time).  This pass gives :data:`SHARED_CHANNEL_OPS` a
    symbolic channel count (``R.match_cast`` to ``(n, c, h, w)``, and back to the
    static shape where anything else reads the result), so legalization makes
    one kernel per operator and spatial size (23 for DenseNet-121).  Every
    element is computed by the same float operations, so the bits are those
    of the static build.

    Parameters
    ----------
    mod : tvm.IRModule
        A Relax module before legalization (composites are left as they are).

    Returns
    -------
    tvm.IRModule
    """
    if not any(_channel_data(e) is not None for e in operator_calls(mod)):
        return mod
    out = mod.clone()
    for gv, f in callers(mod):
        mutator = _ShareChannelKernels(out)
        mutator.analyse(f)
        out[gv] = mutator.visit_expr(f)
    return relax.transform.DeadCodeElimination()(out)

"""Relax offload to bank-level PIM: patterns, the cost decision and lowering.

:func:`OffloadToPIM` is a ``tvm.transform`` module pass (``relax.build``
runs it for ``pim -hw=...`` targets, see :mod:`tvm_cim.common.target`):

1. ``FoldConstant``, then ``FuseOpsByPattern`` with dpl patterns of the
   memory-bound operators PIM runs (:func:`pim_patterns`):

   * ``pim.attn`` (devices with a group softmax unit, i.e. AttAcc):
     ``matmul(q, kT) [* scale] -> softmax -> matmul(., v)`` with one query row;
   * ``pim.gemv``: ``matmul(x, W)`` with a constant 2-D weight (GEMV with the
     ``m`` rows of ``x`` sharing the weight, as in LLM decode);
   * ``pim.bgemv``: batched / per-head ``matmul(a, b)`` of two run-time
     operands (``QK^T``, ``P V`` on devices without a softmax unit);
   * ``pim.red``: ``sum(x, axis=-1)``; ``pim.va``: ``add(a, b)`` of equal
     shapes; ``pim.relu``: ``nn.relu(x)``.

2. Each match is kept only if its predicted PIM time -- the simulated time of
   the draft the schedule strategy picks, data rearrangement included -- beats
   the host (GPU roofline, :mod:`tvm_pim.cost.host`).  Compute-bound operators (a
   matmul with many rows) lose that comparison and stay on the host.

3. Every offloaded call becomes ``relax.call_dps_packed("tvm_pim.run_kernel",
   [operands..., constants..., hw_json, stream_text, binding_json], out_ty)``;
   the command stream travels inside the executable.

Constant operands (weights) are *resident*: laid out in PIM memory once
(the stream's ``setup`` phase, reported apart).  Run-time operands are
rearranged on every call unless named in ``offload_options(resident=...)``
(e.g. a KV cache kept in PIM memory between decode steps).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from dataclasses import dataclass, field

import numpy as np
import tvm
from tvm import relax
from tvm.relax.dpl import is_const, is_op, wildcard
from tvm.relax.transform import FusionPattern

from tvm_cim.common import hardware as loader
from tvm_cim.common.relax_utils import composites, const_value, dtype_of, host_ops, lower_composites, shape_of
from tvm_cim.common.relax_utils import is_const as is_const_expr
from tvm_cim.common.target import offload_pass

from .compiler.kernels import KernelSpec
from .cost.host import graph_ns, relax_op_cost, roofline
from .cost.measure import lower_bound_ns
from .hardware.schema import PIMHardware
from .hardware.view import PimView, UnsupportedOnDevice
from .program.text import print_stream
from .runtime import RUN_KERNEL
from .search.strategy import STRATEGIES, Choice, choose

PREFIX = "pim."


# ============================================================================ options
@dataclass
class OffloadOptions:
    """How the offload pass decides (see :func:`offload_options`)."""

    strategy: str = "auto"  # one of tvm_pim.search.strategy.STRATEGIES
    policy: str = "cost"  # cost | always | never
    resident: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ("attn", "gemv", "bgemv", "red", "va", "relu")
    database: str | os.PathLike | None = None  # a database root consulted before the shipped ones


_STATE = threading.local()


def current_options() -> OffloadOptions:
    """The options set by the innermost :func:`offload_options` block of this thread (or the defaults)."""
    return getattr(_STATE, "opts", None) or OffloadOptions()


@contextlib.contextmanager
def offload_options(**kwargs):
    """Set how builds inside the block offload to PIM.

    Parameters
    ----------
    strategy : {'auto', 'database', 'predictor', 'simulate', 'default'}
        How a kernel's tiling draft is chosen (:mod:`tvm_pim.search.strategy`):
        the tuned databases (the user's, then the shipped ones), the XGBoost
        predictor, exhaustive simulation of the pruned space, or the
        backend's fixed tiling; ``auto`` tries the first three in that order.
    policy : {'cost', 'always', 'never'}
        Offload when PIM is predicted faster (default), always, or never.
    resident : list of str
        Names of graph inputs that live in PIM memory between runs.
    kinds : list of str
        Pattern kinds to consider.
    database : str or os.PathLike, optional
        A database root (``<root>/<hw>/``) consulted instead of the user's
        cache, before the shipped databases.
    """
    prev = current_options()
    opts = OffloadOptions(**{**prev.__dict__, **kwargs})
    if opts.strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {opts.strategy!r}; known: {', '.join(STRATEGIES)}")
    if opts.policy not in ("cost", "always", "never"):
        raise ValueError(f"unknown policy {opts.policy!r}")
    opts.resident = tuple(opts.resident)
    _STATE.opts = opts
    try:
        yield opts
    finally:
        _STATE.opts = prev


# ============================================================================ compile info
@dataclass
class KernelInfo:
    """One matched operator and what was decided for it."""

    name: str
    pattern: str
    spec: KernelSpec
    offloaded: bool
    pim_ns: float
    host_ns: float
    choice: Choice | None = None
    reason: str = ""

    def as_dict(self) -> dict:
        """The decision as plain data (the report's ``decisions`` entries)."""
        return {
            "name": self.name,
            "pattern": self.pattern,
            "kernel": self.spec.name,
            "offloaded": self.offloaded,
            "predicted_pim_ns": self.pim_ns,
            "host_ns": self.host_ns,
            "strategy": self.choice.strategy if self.choice else None,
            "draft": str(self.choice.draft) if self.choice else None,
            "reason": self.reason,
        }


@dataclass
class CompileInfo:
    """What :func:`offload` decided (for reports)."""

    hw: PIMHardware
    kernels: list[KernelInfo] = field(default_factory=list)
    host_ops: dict[str, int] = field(default_factory=dict)
    host_op_ns: float = 0.0
    gpu_latency_ns: float = 0.0
    streams: dict[str, str] = field(default_factory=dict)

    def stream_text(self) -> str:
        """Every offloaded kernel's command stream, concatenated (what ``--emit`` writes)."""
        return "".join(self.streams.values())


def last_compile_info() -> CompileInfo | None:
    """The :class:`CompileInfo` of the most recent PIM build in this thread."""
    return getattr(_STATE, "info", None)


# ============================================================================ analysis of matches
@dataclass
class Match:
    """A pattern match reduced to a kernel: spec, operand bindings, constants."""

    pattern: str
    spec: KernelSpec
    tensors: dict  # kernel tensor -> ("arg", expr, perm, shape[, layout steps]) | ("const", array)
    out_shape: tuple[int, ...]
    calls: tuple = ()  # the matched Relax calls (their host cost is the alternative)


def _prod(xs) -> int:
    return int(np.prod(xs)) if len(xs) else 1


# layout operators folded into a kernel operand's binding (no data moved on the device: the
# operand's PIM layout is chosen at setup for the tensor the kernel sees)
LAYOUT_OPS = frozenset({"relax.permute_dims", "relax.reshape", "relax.expand_dims", "relax.broadcast_to"})
_LAYOUT_DEPTH = 5  # layout operators a pattern takes in front of a matmul operand


def _bound_value(e, bound: dict):
    """The call an expression stands for: itself, or the value bound to it inside the match."""
    if isinstance(e, relax.Var):
        return bound.get(e)
    return e


def _op_name(v) -> str:
    return v.op.name if isinstance(v, relax.Call) and isinstance(v.op, tvm.ir.Op) else ""


def _scalar(e) -> float | None:
    """The value of a one-element constant, or None."""
    if not is_const_expr(e):
        return None
    val = const_value(e)
    return float(val.reshape(-1)[0]) if val.size == 1 else None


def peel_layout(e, bound: dict):
    """Follow a matmul operand back through layout operators and scalar scales inside a match.

    Parameters
    ----------
    e : relax.Expr
        The operand as the matmul sees it.
    bound : dict
        Var -> bound value of the bindings inside the match (or composite).

    Returns
    -------
    tuple or None
        ``(leaf, steps, scale)``: the expression the chain starts from, the
        layout steps that turn it into ``e`` (``["permute", axes]``,
        ``["reshape", shape]``, ``["broadcast", shape]``, first applied first)
        and the product of the scalar constants it was multiplied by; None if
        the chain holds a non-scalar multiply.
    """
    steps: list = []
    scale = 1.0
    while True:
        v = _bound_value(e, bound)
        name = _op_name(v)
        if name == "relax.multiply":
            c = _scalar(v.args[1])
            if c is None:
                return None
            scale *= c
        elif name == "relax.permute_dims":
            axes = v.attrs.axes
            nd = len(shape_of(v.args[0]) or ())
            steps.append(["permute", [int(a) for a in axes] if axes is not None else list(range(nd))[::-1]])
        elif name in ("relax.reshape", "relax.expand_dims"):
            steps.append(["reshape", list(shape_of(v))])
        elif name == "relax.broadcast_to":
            steps.append(["broadcast", list(shape_of(v))])
        else:
            return e, steps[::-1], scale
        e = v.args[0]


def _scores_scale(e, qk, bound: dict) -> float | None:
    """Scale between ``qk`` and the softmax input ``e``: scalar multiplies / divides, and masks that
    change nothing (an added constant of zeros, a ``where`` on an all-true constant); None otherwise."""
    scale = 1.0
    while True:
        v = _bound_value(e, bound)
        if v is None:
            return None
        if v.same_as(qk):
            return scale
        name = _op_name(v)
        if name in ("relax.multiply", "relax.divide"):
            c = _scalar(v.args[1])
            if c is None or c == 0:
                return None
            scale = scale * c if name == "relax.multiply" else scale / c
        elif name == "relax.add":
            c = v.args[1]
            if not is_const_expr(c) or np.any(const_value(c) != 0) or shape_of(v) != shape_of(v.args[0]):
                return None
        elif name == "relax.where":
            c = v.args[0]
            if not is_const_expr(c) or not np.all(const_value(c)) or shape_of(v) != shape_of(v.args[1]):
                return None
            e = v.args[1]
            continue
        else:
            return None
        e = v.args[0]


def host_alternative(root, bound: dict) -> tuple:
    """The operator calls of a match the host would run instead (layout operators excluded: the GPU
    folds them into its kernels' strides)."""
    out: list = []
    seen: list = []

    def walk(e):
        v = _bound_value(e, bound)
        if not isinstance(v, relax.Call) or not isinstance(v.op, tvm.ir.Op) or any(v.same_as(s) for s in seen):
            return
        seen.append(v)
        if v.op.name not in LAYOUT_OPS:
            out.append(v)
        for a in v.args:
            walk(a)

    walk(root)
    return tuple(out)


def analyse(pattern: str, exprs: dict, resident: set[str], bound: dict | None = None) -> Match | None:
    """Kernel of a match from its annotated expressions (None if unsupported).

    ``bound`` maps the variables bound inside the match to their values; layout
    operators and scalar scales found there are folded into the kernel
    (:func:`peel_layout`).
    """
    bound = bound or {}

    def res(e) -> bool:
        return isinstance(e, relax.Var) and str(e.name) in resident

    if pattern == "gemv":
        mm = exprs["root"]
        x, w = mm.args
        xs, ws = shape_of(x), shape_of(w)
        if xs is None or ws is None or len(ws) != 2 or not is_const_expr(w) or len(xs) < 1:
            return None
        K, N = ws
        M = _prod(xs[:-1])
        spec = KernelSpec.make("gemv", b=1, m=M, n=N, k=K, resident=("A",))
        A = const_value(w).T.reshape(1, N, K)
        return Match(pattern, spec, {"A": ("const", A), "x": ("arg", x, None, (1, M, K))}, shape_of(mm))
    if pattern == "bgemv":
        mm = exprs["root"]
        a, b = mm.args
        as_, bs = shape_of(a), shape_of(b)
        if as_ is None or bs is None or len(as_) < 3 or len(as_) != len(bs) or as_[:-2] != bs[:-2]:
            return None
        peeled = peel_layout(b, bound)
        if is_const_expr(a) or peeled is None or peeled[2] != 1.0 or is_const_expr(peeled[0]):
            return None
        b_leaf, b_steps = peeled[:2]
        B = _prod(as_[:-2])
        M, K = as_[-2:]
        N = bs[-1]
        perm = list(range(len(bs) - 2)) + [len(bs) - 1, len(bs) - 2]
        spec = KernelSpec.make("gemv", b=B, m=M, n=N, k=K, resident=("A",) if res(b_leaf) else ())
        return Match(pattern, spec, {"A": ("arg", b_leaf, perm, (B, N, K), b_steps), "x": ("arg", a, None, (B, M, K))},
                     shape_of(mm))
    if pattern == "attn":
        qk, pv = exprs["qk"], exprs["root"]
        q, kT = qk.args
        p, v = pv.args
        qs, ks, vs = shape_of(q), shape_of(kT), shape_of(v)
        if None in (qs, ks, vs) or len(qs) < 3 or qs[-2] != 1 or qs[:-2] != ks[:-2] or vs[:-2] != qs[:-2]:
            return None
        B = _prod(qs[:-2])
        D, N = ks[-2:]
        if vs[-2:] != (N, D):
            return None
        sm = exprs["softmax"]
        if int(sm.attrs.axis) not in (-1, len(qs) - 1):
            return None
        q_v = _bound_value(q, bound)
        q_scale = 1.0
        if _op_name(q_v) == "relax.multiply" and _scalar(q_v.args[1]) is not None:
            q_scale, q = _scalar(q_v.args[1]), q_v.args[0]
        k_peel, v_peel = peel_layout(kT, bound), peel_layout(v, bound)
        s_scale = _scores_scale(sm.args[0], qk, bound)
        if k_peel is None or v_peel is None or v_peel[2] != 1.0 or s_scale is None:
            return None
        scale = q_scale * k_peel[2] * s_scale
        if scale <= 0 or any(is_const_expr(e) for e in (q, k_peel[0], v_peel[0])):
            return None
        perm = list(range(len(ks) - 2)) + [len(ks) - 1, len(ks) - 2]
        resid = tuple(t for t, e in (("K", k_peel[0]), ("V", v_peel[0])) if res(e))
        spec = KernelSpec.make("attn", b=B, n=N, k=D, resident=resid, scale=scale)
        return Match(
            pattern,
            spec,
            {"K": ("arg", k_peel[0], perm, (B, N, D), k_peel[1]), "V": ("arg", v_peel[0], None, (B, N, D), v_peel[1]),
             "q": ("arg", q, None, (B, D))},
            shape_of(pv),
        )
    if pattern == "red":
        s = exprs["root"]
        x = s.args[0]
        xs = shape_of(x)
        axis = s.attrs.axis
        if xs is None or axis is None or len(axis) != 1 or int(axis[0]) not in (-1, len(xs) - 1) or is_const_expr(x):
            return None
        K = xs[-1]
        N = xs[-2] if len(xs) >= 2 else 1
        B = _prod(xs[:-2])
        spec = KernelSpec.make("red", b=B, n=N, k=K, resident=("A",) if res(x) else ())
        return Match(pattern, spec, {"A": ("arg", x, None, (B, N, K))}, shape_of(s))
    if pattern == "va":
        s = exprs["root"]
        a, b = s.args
        as_, bs = shape_of(a), shape_of(b)
        if as_ is None or as_ != bs or is_const_expr(a) or is_const_expr(b) or len(as_) < 1:
            return None
        I = as_[-1]
        B = _prod(as_[:-1])
        resid = tuple(t for t, e in (("A", a), ("B", b)) if res(e))
        spec = KernelSpec.make("va", b=B, i=I, resident=resid)
        return Match(pattern, spec, {"A": ("arg", a, None, (B, I)), "B": ("arg", b, None, (B, I))}, shape_of(s))
    if pattern == "relu":
        s = exprs["root"]
        x = s.args[0]
        xs = shape_of(x)
        if xs is None or is_const_expr(x) or len(xs) < 1:
            return None
        spec = KernelSpec.make("relu", b=_prod(xs[:-1]), i=xs[-1], resident=("A",) if res(x) else ())
        return Match(pattern, spec, {"A": ("arg", x, None, (_prod(xs[:-1]), xs[-1]))}, shape_of(s))
    return None


def _float(*exprs) -> bool:
    return all(dtype_of(e) in ("float32", "float16") for e in exprs)


# ============================================================================ decisions
class _Decider:
    """Chooses drafts and decides offloading, with a cache per kernel."""

    def __init__(self, view: PimView, opts: OffloadOptions):
        self.view, self.opts = view, opts
        self.cache: dict = {}

    def decide(self, m: Match) -> KernelInfo:
        """Whether a match runs on PIM: its best draft's simulated time against the host's roofline."""
        host = roofline(self.view, m.spec.bytes(), m.spec.flops()).ns
        if m.calls:
            # the alternative is the matched operators as the host runs them (one kernel each)
            host = 0.0
            for cl in m.calls:
                nb, fl = relax_op_cost(cl)
                host += roofline(self.view, nb, fl).ns
        key = (m.spec, round(host, 3))
        if key in self.cache:
            c = self.cache[key]
            return KernelInfo("", m.pattern, m.spec, c.offloaded, c.pim_ns, c.host_ns, c.choice, c.reason)
        info = KernelInfo("", m.pattern, m.spec, False, float("inf"), host)
        if not self.view.supports(m.spec.kind):
            info.reason = f"{self.view.name} has no units for {m.spec.kind.upper()}"
        elif self.opts.policy == "never":
            info.reason = "policy=never"
        elif self.opts.policy == "cost" and (lb := lower_bound_ns(m.spec, self.view)) >= host:
            info.pim_ns = lb
            info.reason = f"host {host:.0f} ns <= PIM lower bound {lb:.0f} ns (not searched)"
        else:
            try:
                ch = choose(m.spec, self.view, self.opts.strategy, self.opts.database)
            except UnsupportedOnDevice as e:
                info.reason = str(e)
                ch = None
            if ch is not None:
                info.choice = ch
                info.pim_ns = ch.latency_ns
                if self.opts.policy == "always":
                    info.offloaded, info.reason = True, "policy=always"
                elif ch.latency_ns < host:
                    info.offloaded, info.reason = True, f"PIM {ch.latency_ns:.0f} ns < host {host:.0f} ns"
                else:
                    info.reason = f"host {host:.0f} ns <= PIM {ch.latency_ns:.0f} ns"
        self.cache[key] = info
        return info


# ============================================================================ patterns
def layout_chain(depth: int = _LAYOUT_DEPTH):
    """A dpl pattern: an operand behind up to ``depth`` layout operators or scalar multiplies
    (greedy: the longest chain is taken into the match, see :func:`peel_layout`)."""
    p = wildcard()
    for _ in range(depth):
        inner = p
        p = (is_op("relax.permute_dims")(inner) | is_op("relax.reshape")(inner, wildcard())
             | is_op("relax.expand_dims")(inner) | is_op("relax.broadcast_to")(inner, wildcard())
             | is_op("relax.multiply")(inner, is_const()) | wildcard())
    return p


def _self_contained(ctx) -> bool:
    """Whether no value computed inside the match (but its root) is used outside it."""
    inside = set(ctx.matched_bindings.keys())
    root_vars = {v for v in inside if ctx.matched_bindings[v].same_as(ctx.matched_expr)}
    for v in inside - root_vars:
        if any(u not in inside for u in ctx.var_usages.get(v, [])):
            return False
    return True


def pim_patterns(view: PimView, decider: _Decider, opts: OffloadOptions) -> list[FusionPattern]:
    """The fusion patterns of PIM-executable operators, highest priority first.

    Each pattern's check analyses the match into a kernel and keeps it only
    if the decision is to offload.
    """
    resident = set(opts.resident)
    x, w = wildcard(), is_const()
    mm_const = is_op("relax.matmul")(x, w)
    mm = is_op("relax.matmul")(wildcard(), layout_chain())
    mm_plain = is_op("relax.matmul")(wildcard(), wildcard())
    # decode attention as exporters write it: optional scalar scale of q (and of K^T, in its chain),
    # optional scale of the scores (multiply / divide), an optional mask that changes nothing
    q = is_op("relax.multiply")(wildcard(), is_const()) | wildcard()

    def attention(operand):
        qk = is_op("relax.matmul")(q, operand())
        scaled = is_op("relax.multiply")(qk, is_const()) | is_op("relax.divide")(qk, is_const()) | qk
        masked = is_op("relax.add")(scaled, is_const()) | is_op("relax.where")(is_const(), scaled, is_const()) | scaled
        sm = is_op("relax.nn.softmax")(masked)
        pv = is_op("relax.matmul")(sm, operand())
        return pv, {"root": pv, "qk": qk, "softmax": sm}

    red = is_op("relax.sum")(wildcard())
    va = is_op("relax.add")(wildcard(), wildcard())
    relu = is_op("relax.nn.relu")(wildcard())

    def check(kind):
        def f(ctx) -> bool:
            ex = dict(ctx.annotated_expr)
            root = ex["root"]
            if not _float(root) or not _self_contained(ctx):
                return False
            bound = dict(ctx.matched_bindings.items())
            m = analyse(kind, ex, resident, bound)
            if m is None:
                return False
            m.calls = host_alternative(root, bound)
            return decider.decide(m).offloaded

        return f

    pats = []
    if "attn" in opts.kinds and view.supports("attn"):
        # with the layout operators of K and V folded; without them if their results are used elsewhere
        for operand in (layout_chain, wildcard):
            pats.append(FusionPattern(PREFIX + "attn", *attention(operand), check("attn")))
    if "gemv" in opts.kinds:
        pats.append(FusionPattern(PREFIX + "gemv", mm_const, {"root": mm_const}, check("gemv")))
    if "bgemv" in opts.kinds:
        pats.append(FusionPattern(PREFIX + "bgemv", mm, {"root": mm}, check("bgemv")))
        pats.append(FusionPattern(PREFIX + "bgemv", mm_plain, {"root": mm_plain}, check("bgemv")))
    if "red" in opts.kinds:
        pats.append(FusionPattern(PREFIX + "red", red, {"root": red}, check("red")))
    if "va" in opts.kinds:
        pats.append(FusionPattern(PREFIX + "va", va, {"root": va}, check("va")))
    if "relu" in opts.kinds:
        pats.append(FusionPattern(PREFIX + "relu", relu, {"root": relu}, check("relu")))
    return pats


def _annotations_of(func) -> tuple[str, dict]:
    """Re-find the pattern's annotated expressions inside a composite function."""
    kind = str(func.attrs["Composite"])[len(PREFIX):]
    calls: list = []

    def visit(e):
        if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op):
            calls.append(e)

    relax.analysis.post_order_visit(func.body, visit)
    by = {}
    for cl in calls:
        by.setdefault(cl.op.name, []).append(cl)
    ex: dict = {}
    if kind == "attn":
        mms = by["relax.matmul"]
        ex["qk"], ex["root"] = mms[0], mms[-1]
        ex["softmax"] = by["relax.nn.softmax"][0]
    else:
        op = {"gemv": "relax.matmul", "bgemv": "relax.matmul", "red": "relax.sum", "va": "relax.add", "relu": "relax.nn.relu"}[kind]
        ex["root"] = by[op][-1]
    return kind, ex


# ============================================================================ the pass
def offload(mod: tvm.IRModule, hw: PIMHardware, opts: OffloadOptions | None = None) -> tuple[tvm.IRModule, CompileInfo]:
    """Run the whole PIM offload flow on a module.

    Parameters
    ----------
    mod : tvm.IRModule
        A Relax module (e.g. from the ONNX frontend).
    hw : PIMHardware
    opts : OffloadOptions, optional
        Defaults to the options set by :func:`offload_options`.

    Returns
    -------
    tvm.IRModule, CompileInfo
    """
    opts = opts or current_options()
    view = PimView(hw)
    info = CompileInfo(hw=hw)
    mod = relax.transform.ConvertToDataflow(min_size=1)(relax.transform.FoldConstant()(mod))
    info.gpu_latency_ns = graph_ns(mod, view)
    decider = _Decider(view, opts)
    mod = relax.transform.FuseOpsByPattern(
        pim_patterns(view, decider, opts), bind_constants=True, annotate_codegen=False
    )(mod)
    hw_json = loader.to_json(hw)
    lowered = {}
    for i, (name, f) in enumerate(sorted(composites(mod, PREFIX).items())):
        kind, ex = _annotations_of(f)
        bound = dict(relax.analysis.get_var2val(f).items())
        m = analyse(kind, ex, set(opts.resident), bound)
        if m is None:  # cannot happen: the pattern check accepted it
            raise RuntimeError(f"PIM composite {name} no longer analyses")
        m.calls = host_alternative(ex["root"], bound)
        ki = decider.decide(m)
        ki.name = f"k{i:03d}_{kind}_{m.spec.name}"
        info.kernels.append(ki)
        stream_text = print_stream(ki.choice.stream)
        info.streams[ki.name] = stream_text
        params = list(f.params)
        consts = []
        binding = {"tensors": {}, "out_shape": list(m.out_shape), "name": ki.name}
        for t, desc in m.tensors.items():
            if desc[0] == "const":
                binding["tensors"][t] = {"arg": None, "perm": None, "shape": list(desc[1].shape)}
                consts.append((t, desc[1].astype(np.float32)))
            else:
                _, expr, perm, shape, *steps = desc
                idx = [j for j, p in enumerate(params) if p.same_as(expr)]
                if not idx:
                    raise RuntimeError(f"{name}: operand of {t} is not a parameter of the composite")
                binding["tensors"][t] = {"arg": idx[0], "steps": steps[0] if steps else [], "perm": perm,
                                         "shape": list(shape)}
        for j, (t, _arr) in enumerate(consts):
            binding["tensors"][t]["arg"] = len(params) + j

        def build(args, out_ty, consts=consts, binding=binding, stream_text=stream_text):
            allargs = list(args) + [relax.const(a) for _, a in consts]
            allargs += [tvm.ir.StringImm(hw_json), tvm.ir.StringImm(stream_text), tvm.ir.StringImm(json.dumps(binding))]
            return relax.call_dps_packed(RUN_KERNEL, allargs, out_ty)

        lowered[name] = build
    info.kernels += [k for k in _rejected(decider, info)]
    mod = lower_composites(mod, lowered)
    info.host_ops, info.host_op_ns = host_ops(mod), graph_ns(mod, view)
    _STATE.info = info
    return mod, info


def _rejected(decider: _Decider, info: CompileInfo):
    seen = {k.spec for k in info.kernels}
    for i, ((spec, _host), k) in enumerate(decider.cache.items()):
        if spec not in seen and not k.offloaded:
            yield KernelInfo(f"host{i:03d}_{spec.kind}", k.pattern, spec, False, k.pim_ns, k.host_ns, k.choice, k.reason)


def OffloadToPIM(hw: PIMHardware | str | None = None) -> tvm.transform.Pass:  # noqa: N802
    """The PIM offload as a module pass.

    Parameters
    ----------
    hw : PIMHardware or str, optional
        The device; by default read from the current target
        (``Target.current()``), which is how ``relax.build`` with a
        ``pim -hw=...`` target runs it.

    Returns
    -------
    tvm.transform.Pass
    """
    return offload_pass("OffloadToPIM", "pim", hw, offload)

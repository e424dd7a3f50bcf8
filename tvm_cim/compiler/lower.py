"""The CIM offload pass: partition, calibrate, quantise, map, generate, lower.

:func:`OffloadToCIM` is a ``tvm.transform`` module pass.  After it, every
offloaded region is a ``relax.call_dps_packed("tvm_cim.run_region", ...)``
whose arguments are the region's inputs, its constants (int8 weights, scales,
bias), the hardware description (JSON) and the meta-operator program (text).
Both strings travel inside the built executable, so an exported library runs
in a fresh process that imports :mod:`tvm_cim`.
"""

from __future__ import annotations

import hashlib
import threading
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import tvm
import tvm_ffi
from tvm import relax

from ..hardware import loader
from ..hardware.schema import CIMHardware
from ..program import Program, print_program
from . import codegen, mapping, schedule
from .partition import PartitionForCIM, composite_name, rewrite_callers
from .quantize import CalibrationConfig, calibrate, describe_composite, make_region
from .region import Region

RUN_REGION = "tvm_cim.run_region"


@dataclass
class CompileInfo:
    """What the offload pass decided, for reports and ``--emit``.

    Attributes
    ----------
    hw : CIMHardware
    regions : list of Region
    programs : list of Program
    chip_map : mapping.ChipMap
    host_ops : dict
        Relax operator name -> count of operators left on the host.
    schedule : schedule.Schedule
        Replicas, segments, options and the analytical latency estimate.
    producers : dict
        Region name -> regions whose outputs feed its inputs (through host operators).
    """

    hw: CIMHardware
    regions: list[Region] = field(default_factory=list)
    programs: list[Program] = field(default_factory=list)
    chip_map: mapping.ChipMap | None = None
    host_ops: dict[str, int] = field(default_factory=dict)
    schedule: "schedule.Schedule | None" = None
    producers: dict[str, list[str]] = field(default_factory=dict)

    def program_text(self) -> str:
        return "".join(print_program(p) for p in self.programs)


_STATE = threading.local()


def last_compile_info() -> CompileInfo | None:
    """The :class:`CompileInfo` of the most recent CIM build in this thread."""
    return getattr(_STATE, "info", None)


def calibration_config() -> CalibrationConfig:
    """The calibration settings in force (see :func:`tvm_cim.calibration`)."""
    return getattr(_STATE, "calib", None) or CalibrationConfig()


def set_calibration_config(cfg: CalibrationConfig | None) -> None:
    _STATE.calib = cfg


def scheduling() -> tuple[str, "schedule.Options | None"]:
    """The scheduling strategy (and technique overrides) in force."""
    return getattr(_STATE, "sched", ("cim-mlc", None))


def set_scheduling(strategy: str, options: "schedule.Options | None" = None) -> None:
    if strategy not in schedule.STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {', '.join(schedule.STRATEGIES)}")
    _STATE.sched = (strategy, options)


def _producers(mod: tvm.IRModule, names: dict[str, str]) -> dict[str, list[str]]:
    """For every region, the regions whose outputs reach its inputs through host operators."""
    main = mod["main"]
    reach: dict = {}
    result: dict[str, list[str]] = {}

    def vars_in(e):
        found = []
        relax.analysis.post_order_visit(e, lambda x: found.append(x) if isinstance(x, relax.Var) else None)
        return found

    for blk in main.body.blocks:
        for b in blk.bindings:
            val = b.value
            src = set()
            for v in vars_in(val):
                src |= reach.get(v, set())
            if isinstance(val, relax.Call) and isinstance(val.op, relax.GlobalVar) and val.op.name_hint in names:
                region = names[val.op.name_hint]
                result[region] = sorted(src)
                reach[b.var] = {region}
            else:
                reach[b.var] = src
    return result

def _host_ops(mod: tvm.IRModule) -> dict[str, int]:
    counts: Counter = Counter()

    def visit(e):
        if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op):
            name = e.op.name
            if name == "relax.call_tir":  # operators the frontend lowered to TIR (e.g. Clip)
                counts["tir." + str(e.args[0].name_hint).rstrip("0123456789")] += 1
            elif name not in ("relax.call_dps_packed", "relax.call_pure_packed"):
                counts[name] += 1

    for gv, f in mod.functions.items():
        if isinstance(f, relax.Function) and not composite_name(f):
            relax.analysis.post_order_visit(f.body, visit)
    return dict(sorted(counts.items()))


@relax.expr_functor.mutator
class _LowerRegions(relax.PyExprMutator):
    """Replace calls of ``cim.*`` composites with ``call_dps_packed`` of their programs."""

    def __init__(self, mod, lowered: dict[str, relax.Expr]):
        super().__init__(mod)
        self.mod_ = mod
        self.lowered = lowered  # composite name -> (program text, consts, hw json)

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if isinstance(call.op, relax.GlobalVar) and call.op.name_hint in self.lowered:
            text, consts, hw_json = self.lowered[call.op.name_hint]
            args = list(call.args) + [relax.const(c) for c in consts]
            args += [tvm.ir.StringImm(hw_json), tvm.ir.StringImm(text)]
            return relax.call_dps_packed(RUN_REGION, args, call.ty)
        return call


@relax.expr_functor.mutator
class _UniqueCallSites(relax.PyExprMutator):
    """Give every call of a ``cim.*`` composite its own function.

    Structurally identical regions (e.g. attention's ``QK^T`` and ``x V`` at the
    same shapes) share one composite after ``FuseOpsByPattern``; each call site
    must be its own region with its own crossbars, program and statistics.
    """

    def __init__(self, mod):
        super().__init__(mod)
        self.mod_ = mod
        self.seen: dict[str, int] = {}

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if isinstance(call.op, relax.GlobalVar) and composite_name(self.mod_[call.op]):
            name = call.op.name_hint
            k = self.seen.get(name, 0)
            self.seen[name] = k + 1
            if k:
                func = self.mod_[call.op].with_attr("cim.call_site", k)
                gv = self.builder_.add_func(func, f"{name}_site{k}")
                return relax.Call(gv, call.args, call.attrs)
        return call


def _unique_call_sites(mod: tvm.IRModule) -> tvm.IRModule:
    return rewrite_callers(mod, _UniqueCallSites(mod))


def _call_order(mod: tvm.IRModule) -> list[str]:
    """Composite function names in the order main calls them."""
    order: list[str] = []

    def visit(e):
        if isinstance(e, relax.Call) and isinstance(e.op, relax.GlobalVar):
            f = mod[e.op]
            if composite_name(f) and e.op.name_hint not in order:
                order.append(e.op.name_hint)

    for gv, f in mod.functions.items():
        if isinstance(f, relax.Function) and not composite_name(f):
            relax.analysis.post_order_visit(f.body, visit)
    return order


def _build_uid(mod: tvm.IRModule, hw: CIMHardware, calib: CalibrationConfig, strategy: str, options) -> str:
    """Digest of everything that decides a region's weights and placement.

    Program names carry it, and the simulator keeps a program's weights in
    crossbars between runs by name: two builds of the same model with another
    schedule, chip or calibration must never share a name, or the second
    would read the first one's crossbars.
    """
    h = hashlib.sha256()
    h.update(str(tvm_ffi.structural_hash(mod)).encode())
    h.update(repr(hw).encode())
    h.update(repr((strategy, options, calib.samples, calib.seed)).encode())
    for sample in calib.inputs or []:
        for k in sorted(sample):
            h.update(k.encode())
            h.update(np.ascontiguousarray(sample[k]).tobytes())
    return h.hexdigest()[:8]


def offload(mod: tvm.IRModule, hw: CIMHardware, calib: CalibrationConfig | None = None,
            strategy: str | None = None, options: "schedule.Options | None" = None) -> tuple[tvm.IRModule, CompileInfo]:
    """Run the whole CIM offload flow on a module.

    Parameters
    ----------
    mod : tvm.IRModule
        A float Relax module (e.g. from the ONNX frontend).
    hw : CIMHardware
        The target chip.
    calib : CalibrationConfig, optional
        Calibration settings; defaults to :func:`calibration_config`.
    strategy : str, optional
        Scheduling strategy (``none``, ``greedy``, ``puma``, ``cim-mlc``);
        defaults to :func:`scheduling` (``cim-mlc``).
    options : schedule.Options, optional
        Technique overrides for ablations.

    Returns
    -------
    tvm.IRModule
        The module with offloaded regions lowered to ``call_dps_packed``.
    CompileInfo
    """
    calib = calib or calibration_config()
    if strategy is None:
        strategy, default_opts = scheduling()
        options = options or default_opts
    mod = relax.transform.FoldBatchnormToConv2D()(mod) if _has_bn_after_conv(mod) else mod
    mod = _unique_call_sites(PartitionForCIM()(mod))
    order = _call_order(mod)
    uid = _build_uid(mod, hw, calib, strategy, options)
    names = {gname: f"m{uid}.r{i:03d}_{str(composite_name(mod[gname])).split('.')[1]}" for i, gname in enumerate(order)}
    info = CompileInfo(hw=hw)
    if not order:
        info.host_ops = _host_ops(mod)
        _STATE.info = info
        return mod, info
    # calibration depends on the model and the samples only: observe under build-independent names
    # (so that builds for other chips or schedules reuse it), then key the ranges by program name
    short = {g: n.split(".", 1)[1] for g, n in names.items()}
    full = {short[g]: names[g] for g in names}
    observed = calibrate(mod, short, calib)
    ranges = {f"{full[k.rsplit(':', 1)[0]]}:{k.rsplit(':', 1)[1]}": v for k, v in observed.items()}
    infos = {g: describe_composite(mod[g]) for g in order}
    regions = [
        make_region(names[g], infos[g], ranges, mapping.precision(hw)[1], mapping.precision(hw)[0]) for g in order
    ]
    producers = _producers(mod, names)
    wbits, ibits = mapping.precision(hw)
    sched = schedule.schedule(regions, hw, strategy, options, producers, wbits, ibits)
    cmap = mapping.allocate(regions, hw, sched)
    hw_json = loader.to_json(hw)
    lowered = {}
    for g, r in zip(order, regions):
        prog = codegen.generate(r, cmap.placements[r.name], hw, sched.options, strategy)
        consts = codegen.region_constants(r)
        const_names = [d.name for d in prog.decl("const")]
        lowered[g] = (print_program(prog), [consts[n] for n in const_names], hw_json)
        info.programs.append(prog)
    info.regions, info.chip_map, info.schedule, info.producers = regions, cmap, sched, producers
    mod = relax.transform.DeadCodeElimination()(rewrite_callers(mod, _LowerRegions(mod, lowered)))
    info.host_ops = _host_ops(mod)
    _STATE.info = info
    return mod, info


def _has_bn_after_conv(mod: tvm.IRModule) -> bool:
    found = []

    def visit(e):
        if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op) and e.op.name == "relax.nn.batch_norm":
            found.append(e)

    for _, f in mod.functions.items():
        if isinstance(f, relax.Function):
            relax.analysis.post_order_visit(f.body, visit)
    return bool(found)


def OffloadToCIM(hw: CIMHardware | str | None = None) -> tvm.transform.Pass:  # noqa: N802
    """The CIM offload as a module pass.

    Parameters
    ----------
    hw : CIMHardware or str, optional
        The chip.  By default it is read from the current target
        (``Target.current().attrs['model']``), which is how ``relax.build``
        with a ``cim -hw=...`` target runs it.

    Returns
    -------
    tvm.transform.Pass
    """

    from ..target import offload_pass

    return offload_pass("OffloadToCIM", "cim", hw, offload)

"""The CIM compilation pipeline as Relax passes, each usable on its own.

``relax.build(mod, target="cim -hw=prime")`` runs :func:`CIMPipeline`, a
``tvm.transform.Sequential`` of these module passes (exposed as
``tvm_cim.transform.<Name>``), then TVM's own pipeline for the host part:

=====================  =============================================================================
pass                   what it decides, and where it writes it
=====================  =============================================================================
``FindRegions``        dpl patterns + ``FuseOpsByPattern``: ``cim.*`` composite functions, one per
                       call site, named in call order (``cim.region``)
``Calibrate``          input ranges observed on calibration samples through TVM's ``llvm`` build
                       (``cim.range``)
``Quantize``           activation scales and signedness, precision (``cim.x_scale``, ``cim.x_zero``,
                       ``cim.x_signed``, ``cim.y_scale``, ``cim.weight_bits``, ``cim.input_bits``);
                       weights are quantised per output channel from the function's constants; where
                       activations are quantised (``cim.quant_at_producer``, ``cim.requant_out``: at
                       the producing regions' cores, else the chip ALU)
``MapCrossbars``       per layer, the fastest crossbar mapping within the error budget: weight and input
                       encoding, rows driven per read step, programmed ADC range (``cim.weight_encoding``,
                       ``cim.input_encoding``, ``cim.rows_per_step``, ``cim.adc_lsb[_cols]``,
                       ``cim.accuracy``)
``Segment``            the strategy and its techniques (module attributes ``cim.strategy``,
                       ``cim.options``); segment of every region and whether weights stay resident
                       (``cim.segment``, ``cim.resident``)
``DuplicateWeights``   replicas and tile rows (``cim.replicas``, ``cim.tile_rows``, ``cim.passes``)
``AllocateArrayModes`` dual-mode strategies (CMSwitch): per segment, copies in compute mode and
                       memory-mode arrays for outputs (``cim.replicas``, ``cim.mem_out``,
                       ``cim.mem_xbs``, ``cim.mem_in_xbs``, ``cim.switch_tom``, ``cim.switch_toc``;
                       module: ``cim.modes``); nothing for the others
``Place``              crossbars of every replica (``cim.xbs``)
``GenerateMetaOps``    the meta-operator program of every region (``cim.program``) and the network
                       of segments (module attribute ``cim.network``)
``LowerToRuntime``     calls of regions become ``call_dps_packed("tvm_cim.run_region", ...)``; the
                       analytical estimate (module attribute ``cim.estimate_ns``)
``ShareHostKernels``   host batch norm, ReLU and channel concatenation at a symbolic channel count
                       (``R.match_cast``), so TVM's LLVM build compiles one kernel per operator and
                       spatial size instead of one per channel count (same bits)
=====================  =============================================================================

Every decision is an attribute of the region functions (or of the module),
so ``mod.script()`` shows it between passes, and later passes read the
attributes: edit one (``cim.replicas`` of a layer, say) and the program
follows it.  Passes that need the chip take it as an argument or read it from
the target in scope (``cim -hw=...``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import threading
import time
import warnings
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
import tvm
import tvm_ffi
from tqdm import tqdm
from tvm import relax

from ..common import hardware as loader
from ..common.relax_utils import (
    ShareHostKernels,
    UniqueCallSites,
    call_order,
    composite_name,
    has_op,
    host_ops,
    lower_composites,
    rewrite_callers,
)
from ..common.runtime import gc_paused
from ..common.target import hardware_of, options_of
from ..hardware import loopnest as LN
from ..hardware.schema import CIMHardware
from ..program import Network, Program, parse_network, parse_program, print_network, print_program, verify_network
from ..program import Segment as NetSegment
from ..simulator.engine import heap_peak
from . import accuracy, codegen, dataflow, mapping, schedule, strategies
from .estimate import Estimator
from .partition import PREFIX, PartitionForCIM
from .plan import pass_ranges
from .quantize import CalibrationConfig, activation_params, describe_composite, observation, observe, quantize_weights
from .region import CONV2D, DMATMUL, MATMUL, Region, unfold_conv_weight
from .strategies import modes, replication

RUN_REGION = "tvm_cim.run_region"
A = "cim."  # prefix of every attribute the passes write


# ============================================================================ build settings
_STATE = threading.local()


def calibration_config() -> CalibrationConfig:
    """The calibration settings in force (see :func:`calibration`)."""
    return getattr(_STATE, "calib", None) or CalibrationConfig()


@contextlib.contextmanager
def calibration(samples: int = 1, seed: int = 0, inputs=None):
    """Set how builds inside the block calibrate activations.

    Parameters
    ----------
    samples : int
        Seeded random samples when ``inputs`` is not given.
    seed : int
        Seed of those samples.
    inputs : list of dict, optional
        Calibration inputs (graph input name -> array).
    """
    prev = getattr(_STATE, "calib", None)
    _STATE.calib = CalibrationConfig(samples=samples, seed=seed, inputs=inputs)
    try:
        yield
    finally:
        _STATE.calib = prev


def current_scheduling() -> tuple[str, strategies.Options | None]:
    """The scheduling strategy (and technique overrides) in force."""
    return getattr(_STATE, "sched", (strategies.DEFAULT, None))


@contextlib.contextmanager
def scheduling(strategy: str = strategies.DEFAULT, options: strategies.Options | None = None):
    """Set the scheduling strategy of builds inside the block.

    Parameters
    ----------
    strategy : str
        A registered strategy (:func:`tvm_cim.compiler.strategies.names`):
        ``cim-mlc`` (default) is the multi-level method of CIM-MLC.
    options : tvm_cim.compiler.strategies.Options, optional
        Switch individual techniques (ablations).
    """
    strategies.get(strategy)  # unknown names fail here, with the known ones
    prev = current_scheduling()
    _STATE.sched = (strategy, options)
    try:
        yield
    finally:
        _STATE.sched = prev


def current_max_error() -> float | None:
    """The error budget in force (see :func:`accuracy`); None means the default."""
    return getattr(_STATE, "max_error", None)


@contextlib.contextmanager
def accuracy_budget(max_error: float | None = None):
    """Set the error budget of builds inside the block.

    Parameters
    ----------
    max_error : float, optional
        Largest ``1 - cosine`` between the network's outputs and the float
        reference on the calibration samples (default
        :data:`tvm_cim.compiler.accuracy.DEFAULT_MAX_ERROR`, 0.005); the
        compiler picks per layer the fastest crossbar mapping that keeps the
        measured error within it.  1 or more: no constraint (fastest mappings).
    """
    if max_error is not None and not max_error >= 0:
        raise ValueError(f"max_error must be >= 0, got {max_error}")
    prev = current_max_error()
    _STATE.max_error = max_error
    try:
        yield
    finally:
        _STATE.max_error = prev


@dataclass
class CompileInfo:
    """What the CIM passes decided, for reports and ``--emit`` (:func:`last_compile_info`).

    Attributes
    ----------
    hw : CIMHardware
    regions : list of Region
    programs : list of Program
    network : Network
        Segments, their order and what runs between them.
    chip_map : mapping.ChipMap
    host_ops : dict
        Relax operator name -> count of operators left on the host.
    schedule : schedule.Schedule
        Replicas, segments, options and the analytical latency estimate.
    producers : dict
        Region name -> regions whose outputs feed its inputs (through host operators).
    accuracy : dict
        The error budget and what ``MapCrossbars`` chose per region (:func:`accuracy_of`).
    modes : list of dict
        Per segment, the array modes ``AllocateArrayModes`` chose (empty when every array computes).
    replication : list of dict
        Per segment, PIMCOMP's GA replication and our DP on the same problem (``pimcomp-*`` strategies).
    """

    hw: CIMHardware
    regions: list[Region] = field(default_factory=list)
    programs: list[Program] = field(default_factory=list)
    network: Network | None = None
    chip_map: mapping.ChipMap | None = None
    host_ops: dict[str, int] = field(default_factory=dict)
    schedule: schedule.Schedule | None = None
    producers: dict[str, list[str]] = field(default_factory=dict)
    accuracy: dict = field(default_factory=dict)
    modes: list = field(default_factory=list)
    replication: list = field(default_factory=list)

    def program_text(self) -> str:
        """The network and every program, as ``--emit`` writes them."""
        head = print_network(self.network) if self.network else ""
        return head + "".join(print_program(p) for p in self.programs)


def last_compile_info() -> CompileInfo | None:
    """The :class:`CompileInfo` of the most recent CIM build in this thread."""
    return getattr(_STATE, "info", None)


# ============================================================================ reading the module
def _resolve_hw(hw) -> CIMHardware:
    if hw is None:
        target = tvm.target.Target.current(allow_none=True)
        if target is None:
            raise ValueError("no chip: pass hw= to the pass, or run it inside `with tvm.target.Target('cim -hw=...')`")
        return hardware_of(target)
    if isinstance(hw, str):
        return loader.load(hw, kind="cim")
    return hw


def region_functions(mod: tvm.IRModule) -> list[tuple[str, relax.Function]]:
    """``(global name, function)`` of every region, in the order the model calls them."""
    return [(g, mod[g]) for g in call_order(mod, PREFIX) if A + "region" in (mod[g].attrs or {})]


def _attr(func, key: str, default=None):
    attrs = func.attrs
    return attrs[A + key] if attrs is not None and A + key in attrs else default


def _with_attrs(mod: tvm.IRModule, updates: dict[str, dict]) -> tvm.IRModule:
    """A copy of the module with attributes set on region functions: ``{global name: {key: value}}``."""
    mod = mod.clone()
    for g, kv in updates.items():
        f = mod[g]
        for k, v in kv.items():
            f = f.with_attr(A + k, v)
        mod.update_func(mod.get_global_var(g), f)
    return mod


def _need(func, key: str, pass_name: str):
    v = _attr(func, key)
    if v is None:
        raise ValueError(f"region {_attr(func, 'region')}: attribute cim.{key} is missing; run {pass_name} first")
    return v


_BUILD = [0]  # counts CIMPipeline runs: what the memos below keep of earlier builds is bounded by size


class _BodyMemo:
    """A memo keyed by a Relax function body, which each entry keeps alive (its float weights with it).

    Everything the current build (:data:`_BUILD`) used is kept; of earlier builds at most ``kept_bytes``
    bytes of weights, oldest dropped first; at most ``count`` entries in all.  Bounded by count alone, the
    two memos held every build's weights (ResNet-18: about 58 MB per build, int8 and the body's float32).
    """

    def __init__(self, count: int, kept_bytes: int):
        self.count, self.kept_bytes = count, kept_bytes
        self._d: OrderedDict = OrderedDict()  # key -> (body, build, bytes, value)
        self._bytes = self._current = 0  # bytes in all, and of the current build's entries
        self._build = _BUILD[0]

    def __len__(self) -> int:
        return len(self._d)

    def _sync(self) -> None:
        if self._build != _BUILD[0]:
            self._build, self._current = _BUILD[0], 0

    def get(self, key, body):
        """The value memoised for ``key`` if it was made from this very ``body``; else None."""
        hit = self._d.get(key)
        if hit is None or not hit[0].same_as(body):
            return None
        self._sync()
        self._d.move_to_end(key)
        if hit[1] != self._build:
            self._d[key] = (hit[0], self._build, hit[2], hit[3])
            self._current += hit[2]
        return hit[3]

    def put(self, key, body, value, nbytes: int) -> None:
        self._sync()
        old = self._d.pop(key, None)
        if old is not None:
            self._bytes -= old[2]
            self._current -= old[2] if old[1] == self._build else 0
        self._d[key] = (body, self._build, nbytes, value)
        self._bytes += nbytes
        self._current += nbytes
        while len(self._d) > self.count or self._bytes - self._current > self.kept_bytes:
            k, (_, b, n, _) = next(iter(self._d.items()))
            if b == self._build and len(self._d) <= self.count:
                break  # only the current build's entries are left
            del self._d[k]
            self._bytes -= n
            self._current -= n if b == self._build else 0

    def clear(self) -> None:
        self._d.clear()
        self._bytes = self._current = 0


MEMO_KEPT = (1024, 1 << 28)  # entries in all; bytes of weights kept from earlier builds
_REGIONS = _BodyMemo(*MEMO_KEPT)  # (body, quantisation attrs) -> Region
MAPPING_KEYS = ("rows_per_step", "adc_lsb", "adc_lsb_cols", "weight_encoding", "input_encoding")  # MapCrossbars


def _mapped(r: Region, func) -> None:
    """Set a region's crossbar mapping from its attributes (``MapCrossbars``, or a hand edit)."""
    rp, lsb, cols, wenc, ienc = (_attr(func, k) for k in MAPPING_KEYS)
    r.rows_per_step = None if rp is None else int(rp)
    r.adc_lsb = None if lsb is None else int(lsb)
    r.adc_lsb_cols = None if cols is None else accuracy.lsb_cols_parse(str(cols))
    r.weight_encoding = None if wenc is None else str(wenc)
    r.input_encoding = None if ienc is None else str(ienc)


_WEIGHTS = _BodyMemo(*MEMO_KEPT)  # (body, name, weight bits) -> (w_int, w_scale)


def _held_bytes(info, w_int: np.ndarray | None) -> int:
    """Bytes a memo entry keeps alive: the integer weights and the body's float weights."""
    return (0 if w_int is None else w_int.nbytes) + (0 if info.weight is None else int(info.weight.nbytes))


def _quantised_weights(func: relax.Function, name: str, info, wbits: int) -> tuple[np.ndarray, np.ndarray]:
    """The integer weights (``K x N``, read-only) and scales of a region (memoised per body and bit width).

    The passes change a region's attributes many times (quantisation, mapping,
    placement), each a new :class:`Region`; its weights depend on the body and
    the bit width only, so they are quantised once and shared (read-only, so
    no pass can change them under the others).
    """
    key = (hash(func.body), name, wbits)
    hit = _WEIGHTS.get(key, func.body)
    if hit is not None:
        return hit
    if info.kind == CONV2D:
        wq, s = quantize_weights(info.weight, wbits, axis=0)
        w_int = unfold_conv_weight(wq, info.conv["groups"])
    else:
        w_int, s = quantize_weights(info.weight, wbits, axis=1)
    w_int.flags.writeable = False
    s.flags.writeable = False
    _WEIGHTS.put(key, func.body, (w_int, s), _held_bytes(info, w_int))
    return w_int, s


def region_of(func: relax.Function) -> Region:
    """The quantised :class:`Region` a region function describes (memoised).

    Shapes and float weights come from the function body; quantisation from
    its attributes (``Quantize``).  Weights are quantised symmetrically per
    output channel to ``cim.weight_bits``.
    """
    name = str(_need(func, "region", "FindRegions"))
    qkeys = ("x_scale", "x_zero", "x_signed", "y_scale", "weight_bits", "input_bits") + MAPPING_KEYS + (
        "quant_at_producer", "requant_out")
    q = tuple(_attr(func, k) for k in qkeys)
    if q[0] is None:
        raise ValueError(f"region {name}: not quantised; run Quantize first")
    key = (hash(func.body), name, q)
    hit = _REGIONS.get(key, func.body)
    if hit is not None:
        return hit
    info = describe_composite(func)
    x_scale, x_zero, x_signed, y_scale, wbits = q[:5]
    r = Region(name, info.kind, info.in_shapes, info.out_shape, x_scale=float(x_scale), x_zero=int(x_zero),
               x_signed=bool(x_signed), y_scale=float(y_scale), conv=dict(info.conv))
    if info.kind in (CONV2D, MATMUL):
        r.w_int, r.w_scale = _quantised_weights(func, name, info, int(wbits))
    if info.bias is not None:
        r.bias = info.bias.astype(np.float32)
    _mapped(r, func)
    r.quant_at_producer, r.requant_out = bool(q[-2] or False), bool(q[-1] or False)
    _REGIONS.put(key, func.body, r, _held_bytes(info, r.w_int))
    return r


def regions_of(mod: tvm.IRModule) -> list[tuple[str, Region]]:
    """``(global name, Region)`` of every region, in call order."""
    return [(g, region_of(f)) for g, f in region_functions(mod)]


def producers_of(mod: tvm.IRModule) -> dict[str, list[str]]:
    """For every region, the regions whose outputs reach its inputs through host operators."""
    return {r: sorted(set().union(*ops)) if ops else [] for r, ops in operand_producers_of(mod).items()}


def quantised_by_producers(mod: tvm.IRModule) -> tuple[set[str], set[str]]:
    """Where quantisation happens (CIM-MLC, PUMA: at the producing core).

    Returns
    -------
    inputs : set of str
        Regions whose first input other regions' outputs compute (their
        producers' cores quantise it).
    outputs : set of str
        Regions whose output reaches such an input (their cores quantise it).
    """
    inputs, outputs = set(), set()
    for r, srcs in operand_producers_of(mod).items():
        if srcs and srcs[0]:
            inputs.add(r)
            outputs |= set(srcs[0])
    return inputs, outputs


def operand_producers_of(mod: tvm.IRModule) -> dict[str, list[list[str]]]:
    """For every region, per operand (a ``dmatmul``'s second is its run-time weight), the regions whose
    outputs reach it through host operators."""
    names = {g: str(_attr(f, "region")) for g, f in region_functions(mod)}
    reach: dict = {}
    result: dict[str, list[list[str]]] = {}

    def vars_in(e):
        found = []
        relax.analysis.post_order_visit(e, lambda x: found.append(x) if isinstance(x, relax.Var) else None)
        return found

    for blk in mod["main"].body.blocks:
        for b in blk.bindings:
            val = b.value
            if isinstance(val, relax.Call) and isinstance(val.op, relax.GlobalVar) and val.op.name_hint in names:
                region = names[val.op.name_hint]
                result[region] = [sorted(set().union(*[reach.get(v, set()) for v in vars_in(a)])) for a in val.args]
                reach[b.var] = {region}
            else:
                src = set()
                for v in vars_in(val):
                    src |= reach.get(v, set())
                reach[b.var] = src
    return result


def module_options(mod: tvm.IRModule) -> tuple[str, strategies.Options]:
    """The strategy and techniques ``Segment`` recorded on the module."""
    attrs = mod.attrs
    if attrs is None or A + "strategy" not in attrs:
        raise ValueError("the module has no scheduling strategy; run Segment first")
    return str(attrs[A + "strategy"]), strategies.Options.from_attrs(attrs[A + "options"])


def plans_of(mod: tvm.IRModule, hw: CIMHardware, est: Estimator, latency: bool = True) -> dict[str, schedule.RegionPlan]:
    """The plan of every region from its attributes (``Segment`` and ``DuplicateWeights``).

    ``latency``: also estimate each region alone (the plans' ``latency_ns``).
    """
    plans = {}
    fs = [(region_of(f), f) for _, f in region_functions(mod)]
    # memory-mode arrays (AllocateArrayModes): the region holding each input, shares of the arrays' bandwidth
    held = {str(_attr(f, "mem_xbs")): r.name for r, f in fs if _attr(f, "mem_xbs")}
    source = {r.name: held[str(_attr(f, "mem_in_xbs"))] for r, f in fs if _attr(f, "mem_in_xbs")}
    memory = {r.name: _xbs_count(_attr(f, "mem_xbs")) for r, f in fs}
    seg_of = {r.name: int(_need(f, "segment", "Segment")) for r, f in fs}
    eff = (modes.effective_arrays([r for r, _ in fs], est, memory, source, seg_of)
           if source or any(memory.values()) else {})
    for r, f in fs:
        sw = _xbs_count(_attr(f, "switch_tom")), _xbs_count(_attr(f, "switch_toc"))
        m_in, m_out = eff.get(r.name, (0, 0))
        plans[r.name] = schedule.make_plan(
            r, est, int(_need(f, "replicas", "DuplicateWeights")), int(_need(f, "tile_rows", "DuplicateWeights")),
            int(_need(f, "segment", "Segment")), bool(_need(f, "resident", "Segment")), latency=latency,
            mem_in=m_in, mem_out=m_out,
            switch_ns=modes.switch_ns(hw, *sw) if _attr(f, "switch_in_run", False) else 0.0,
            mem_wb=memory[r.name] if _attr(f, "mem_writeback", False) else 0,
            pass_xbs=int(_attr(f, "pass_xbs", 0) or 0),
            inplace_xbs=tuple(_xbs_parse(str(_attr(f, "inplace_xbs")))[0]) if _attr(f, "inplace_xbs") else (),
            compute_xbs=tuple(tuple(x) for x in _xbs_parse(str(_attr(f, "compute_xbs"))))
            if _attr(f, "compute_xbs") else (), mem_ring=int(_attr(f, "mem_ring", 0) or 0))
    return plans


def _estimator(hw: CIMHardware, wbits: int, ibits: int, opts: strategies.Options) -> Estimator:
    """The fast estimate of a schedule's options; inside one run of :func:`CIMPipeline` its passes share one
    (and its memos: ``DuplicateWeights`` estimates every region at many replica counts, ``Place`` and
    ``LowerToRuntime`` ask again for the chosen ones).  A pass run on its own gets a fresh one."""
    memo = getattr(_STATE, "estimators", None)
    if memo is None:
        return Estimator.of(hw, wbits, ibits, opts)
    key = (id(hw), wbits, ibits, opts)
    hit = memo.get(key)
    if hit is None or hit[0] is not hw:  # hw kept in the entry: its id stays its own
        hit = memo[key] = (hw, Estimator.of(hw, wbits, ibits, opts))
    return hit[1]


def _precision(mod: tvm.IRModule) -> tuple[int, int]:
    fs = region_functions(mod)
    if not fs:
        return 8, 8
    return int(_need(fs[0][1], "weight_bits", "Quantize")), int(_need(fs[0][1], "input_bits", "Quantize"))


def _xbs_text(replicas: list[list[int]]) -> str:
    """Crossbars of every replica, compactly: ``0:12 12:24`` (ranges joined by ``+`` when not contiguous)."""
    out = []
    for xbs in replicas:
        parts, start, prev = [], xbs[0], xbs[0]
        for x in xbs[1:]:
            if x != prev + 1:
                parts.append(f"{start}:{prev + 1}")
                start = x
            prev = x
        parts.append(f"{start}:{prev + 1}")
        out.append("+".join(parts))
    return " ".join(out)


def _cores_text(cores: list[list[int]]) -> str:
    """An AG layout (per replica, the core of each AG unit) as ``3,3,4 5,5,5`` (``cim.ag_cores``)."""
    return " ".join(",".join(str(int(c)) for c in rep) for rep in cores)


def _cores_parse(text: str) -> list[list[int]]:
    return [[int(c) for c in rep.split(",")] for rep in str(text).split()]


def _xbs_count(text) -> int:
    """Arrays named by an attribute written by :func:`_xbs_text` (0 when absent or empty)."""
    return 0 if text is None or not str(text).strip() else sum(len(r) for r in _xbs_parse(str(text)))


def _xbs_parse(text: str) -> list[list[int]]:
    reps = []
    for rep in str(text).split():
        ids: list[int] = []
        for part in rep.split("+"):
            a, b = part.split(":")
            ids.extend(range(int(a), int(b)))
        reps.append(ids)
    return reps


# ============================================================================ the passes
@tvm.transform.module_pass(opt_level=0, name="FindRegions")
class FindRegions:
    """Group what a crossbar runs into ``cim.*`` composite functions (dpl patterns), one per call site.

    BatchNorm after a convolution is folded into it first.  Each region is
    named in call order, ``r<index>_<operator>`` (attribute ``cim.region``).
    """

    def transform_module(self, mod: tvm.IRModule, ctx) -> tvm.IRModule:
        if has_op(mod, "relax.nn.batch_norm"):
            mod = relax.transform.FoldBatchnormToConv2D()(mod)
        mod = PartitionForCIM()(mod)
        mod = rewrite_callers(mod, UniqueCallSites(mod, PREFIX))
        names = {g: f"r{i:03d}_{str(composite_name(mod[g], PREFIX)).split('.')[1]}"
                 for i, g in enumerate(call_order(mod, PREFIX))}
        return _with_attrs(mod, {g: {"region": n} for g, n in names.items()})


@tvm.transform.module_pass(opt_level=0, name="Calibrate")
class Calibrate:
    """Observe the range of every region's inputs on calibration samples (``cim.range``).

    The float model runs through TVM's ``llvm`` build with the regions
    replaced by float observers.

    Parameters
    ----------
    samples, seed : int, optional
        Seeded random samples; default: :func:`calibration`'s settings.
    inputs : list of dict, optional
        User samples (graph input name -> array) instead of random ones.
    """

    def __init__(self, samples: int | None = None, seed: int | None = None, inputs=None):
        base = calibration_config()
        self.config = CalibrationConfig(samples=base.samples if samples is None else samples,
                                        seed=base.seed if seed is None else seed,
                                        inputs=base.inputs if inputs is None else inputs)

    def transform_module(self, mod: tvm.IRModule, ctx) -> tvm.IRModule:
        fs = region_functions(mod)
        if not fs:
            return mod
        obs, token = observe(mod, {g: str(_attr(f, "region")) for g, f in fs}, self.config)
        observed = obs.ranges
        updates = {}
        for g, f in fs:
            name = str(_attr(f, "region"))
            rng = [observed.get(f"{name}:0", (-1.0, 1.0))]
            if len(f.params) > 1:
                rng.append(observed.get(f"{name}:1", (-1.0, 1.0)))
            updates[g] = {"range": [float(v) for lohi in rng for v in lohi]}
        c = self.config
        where = "user inputs" if c.inputs is not None else f"{c.samples} seeded sample(s), seed {c.seed}"
        return _with_attrs(mod, updates).with_attr(A + "calibration", where).with_attr(A + "calibration_id", token)


@tvm.transform.module_pass(opt_level=0, name="Quantize")
class Quantize:
    """Choose every region's quantisation: int8 (capped by the chip), activation scales from the ranges.

    Non-negative inputs use unsigned codes; signed ones symmetric codes
    applied in two unsigned phases; a ``dmatmul``'s run-time right operand
    is a signed per-tensor weight.

    Parameters
    ----------
    hw : CIMHardware or str, optional
        The chip (default: the target in scope).
    """

    def __init__(self, hw=None):
        self.hw = hw

    def transform_module(self, mod: tvm.IRModule, ctx) -> tvm.IRModule:
        hw = _resolve_hw(self.hw)
        wbits, ibits = mapping.precision(hw)
        updates = {}
        for g, f in region_functions(mod):
            rng = [float(v) for v in _need(f, "range", "Calibrate")]
            x_scale, x_signed = activation_params(rng[0], rng[1], ibits)
            y_scale = 1.0
            if len(rng) > 2:
                y_scale = max(abs(rng[2]), abs(rng[3]), 1e-12) / (2 ** (wbits - 1) - 1)
            updates[g] = {"x_scale": float(x_scale), "x_zero": 0, "x_signed": bool(x_signed),
                          "y_scale": float(y_scale), "weight_bits": wbits, "input_bits": ibits}
        q_in, q_out = quantised_by_producers(mod)  # quantisation at the producing cores
        for g, f in region_functions(mod):
            name = str(_attr(f, "region"))
            updates[g].update(quant_at_producer=name in q_in, requant_out=name in q_out)
        return _with_attrs(mod, updates)


@tvm.transform.module_pass(opt_level=0, name="MapCrossbars")
class MapCrossbars:
    """Choose every layer's crossbar mapping under the error budget (ADC-aware mapping).

    Per layer: rows driven per read step and, where the chip can program it,
    the ADC range calibrated on the partial sums of the calibration samples
    (``cim.rows_per_step``, ``cim.adc_lsb`` or ``cim.adc_lsb_cols``): the
    fastest mapping whose measured error keeps the network within
    ``max_error`` (:mod:`tvm_cim.compiler.accuracy`).  What was measured and
    the fastest alternative go to ``cim.accuracy`` (region and module).  On a
    chip whose ADC is lossless and not programmable there is nothing to
    decide and the module is unchanged.

    Parameters
    ----------
    hw : CIMHardware or str, optional
        The chip (default: the target in scope).
    max_error : float, optional
        Default: the target's ``-max_error`` (``cim -hw=prime -max_error=0.01``), else
        :func:`accuracy_budget`'s, else :data:`tvm_cim.compiler.accuracy.DEFAULT_MAX_ERROR`.
    """

    def __init__(self, hw=None, max_error: float | None = None):
        self.hw, self.max_error = hw, max_error

    def transform_module(self, mod: tvm.IRModule, ctx) -> tvm.IRModule:
        hw = _resolve_hw(self.hw)
        fs = region_functions(mod)
        budget = self.max_error
        if budget is None:  # the target's -max_error, else the accuracy_budget() in force
            budget = options_of(tvm.target.Target.current(allow_none=True)).get("max_error", current_max_error())
        if not fs or not accuracy.needs_mapping(hw):
            return mod
        token = (mod.attrs or {}).get(A + "calibration_id")
        obs = observation(str(token)) if token is not None else None
        if obs is None:
            raise ValueError("no calibration record for this module; run Calibrate first (in this process)")
        wbits, ibits = _precision(mod)
        regions = [accuracy.apply(region_of(f), None) for _, f in fs]
        res = accuracy.map_layers(regions, obs, hw, wbits, ibits, budget, lambda: accuracy.int8_network_error(
            {r.name: r for r in regions}, obs, wbits, ibits))
        if not res.met:
            warnings.warn(f"{hw.name}: int8 quantisation alone has error {res.int8_error:.3g} on the calibration "
                          f"samples, above the budget {res.max_error:.3g}; every layer uses its most accurate mapping",
                          stacklevel=2)
        updates = {}
        for (g, f), c in zip(fs, res.choices):
            kv = dict(c.chosen.mapping.attrs())
            kv["accuracy"] = json.dumps({
                "mapping": c.chosen.mapping.describe(), "error": c.chosen.error, "ns": c.chosen.ns,
                "fastest": c.fastest.mapping.describe(), "fastest_error": c.fastest.error,
                "fastest_ns": c.fastest.ns, "candidates": c.tried})
            updates[g] = kv
        summary = {"max_error": res.max_error, "int8_error": res.int8_error,
                   "predicted_error": res.predicted_error, "met": res.met}
        return _with_attrs(mod, updates).with_attr(A + "accuracy", json.dumps(summary))


def accuracy_of(mod: tvm.IRModule) -> dict:
    """The budget and the per-region mapping report ``MapCrossbars`` recorded (empty if it decided nothing)."""
    attrs = mod.attrs or {}
    if A + "accuracy" not in attrs:
        return {}
    out = json.loads(str(attrs[A + "accuracy"]))
    out["regions"] = {str(_attr(f, "region")): json.loads(str(_attr(f, "accuracy")))
                      for _, f in region_functions(mod) if _attr(f, "accuracy") is not None}
    return out


def _resolve_options(strategy, options, hw) -> tuple[str, strategies.Options]:
    ctx_strategy, ctx_options = current_scheduling()
    name = strategy or ctx_strategy
    opts = options or (ctx_options if strategy is None else None) or strategies.get(name).options(hw)
    return name, opts


@tvm.transform.module_pass(opt_level=0, name="Segment")
class Segment:
    """Cut the network into segments that fit the chip (``cim.segment``, ``cim.resident``).

    Records the strategy and its techniques on the module (``cim.strategy``,
    ``cim.options``) for the later passes.

    Parameters
    ----------
    hw : CIMHardware or str, optional
        The chip (default: the target in scope).
    strategy : str, optional
        A registered strategy (default: :func:`scheduling`'s).
    options : Options, optional
        Technique overrides (ablations).
    """

    def __init__(self, hw=None, strategy: str | None = None, options: strategies.Options | None = None):
        self.hw, self.strategy, self.options = hw, strategy, options

    def transform_module(self, mod: tvm.IRModule, ctx) -> tvm.IRModule:
        hw = _resolve_hw(self.hw)
        name, opts = _resolve_options(self.strategy, self.options, hw)
        wbits, ibits = _precision(mod)
        est = _estimator(hw, wbits, ibits, opts)
        items = regions_of(mod)
        producers = producers_of(mod)
        seg_of, resident = schedule.segment([r for _, r in items], hw, opts, est, producers)
        if opts.modes == "dual":  # the mode allocation reuses what the segmentation allocated
            modes.hand_over(est, [r for _, r in items], producers)
        mod = _with_attrs(mod, {g: {"segment": s, "resident": resident} for (g, _), s in zip(items, seg_of)})
        return mod.with_attr(A + "strategy", name).with_attr(A + "options", opts.as_attrs())


@tvm.transform.module_pass(opt_level=0, name="DuplicateWeights")
class DuplicateWeights:
    """Choose replicas and tile rows of every region, segment by segment (``cim.replicas``, ``cim.tile_rows``).

    Runs the strategy's duplication pieces: graph-level (DP or greedy),
    crossbar-level (Eq. 1), wordline remapping.

    Parameters
    ----------
    hw : CIMHardware or str, optional
        The chip (default: the target in scope).
    """

    def __init__(self, hw=None):
        self.hw = hw

    def transform_module(self, mod: tvm.IRModule, ctx) -> tvm.IRModule:
        hw = _resolve_hw(self.hw)
        _, opts = module_options(mod)
        wbits, ibits = _precision(mod)
        est = _estimator(hw, wbits, ibits, opts)
        fs = region_functions(mod)
        regions = [region_of(f) for _, f in fs]
        seg_of = [int(_need(f, "segment", "Segment")) for _, f in fs]
        resident = all(bool(_need(f, "resident", "Segment")) for _, f in fs)
        summary: list = []
        plans = schedule.duplicate(regions, seg_of, resident, hw, opts, est, producers_of(mod), summary)
        mod = _with_attrs(mod, {g: {"replicas": plans[r.name].replicas, "tile_rows": plans[r.name].tile_rows,
                                    "passes": plans[r.name].passes,
                                    **({"ag_cores": _cores_text(plans[r.name].ag_cores)}
                                       if plans[r.name].ag_cores else {})}
                                for (g, _), r in zip(fs, regions)})
        return mod.with_attr(A + "replication", json.dumps(summary)) if summary else mod


@tvm.transform.module_pass(opt_level=0, name="AllocateArrayModes")
class AllocateArrayModes:
    """CMSwitch's per-segment allocation of dual-mode arrays (strategies whose ``modes`` is ``dual``).

    For every segment, a MIP (:func:`tvm_cim.compiler.solvers.arrays.allocate`,
    HiGHS, time limit per solve) chooses the copies of every region's weights
    (compute mode) and the arrays in memory mode that hold its output for its
    consumers in the segment; then the physical memory arrays (top of the
    switchable range) and the ``CM.switch`` lists at the segment's start.
    Writes ``cim.replicas``, ``cim.mem_out``, ``cim.mem_xbs``, ``cim.mem_in_xbs``
    (the producer's arrays it loads from), ``cim.mem_writeback`` (its output is
    needed after the segment: written back from the arrays), ``cim.mem_ring`` (bytes of the rolling line
    buffer its output is kept in, when its arrays cannot hold it whole; 0: whole), ``cim.switch_tom`` /
    ``cim.switch_toc`` / ``cim.switch_in_run`` on a segment's first region,
    and the module attribute ``cim.modes`` (JSON: per segment the
    allocation, the switches and the solver's status and time).  Other
    strategies pass through unchanged.

    Parameters
    ----------
    hw : CIMHardware or str, optional
        The chip (default: the target in scope).
    time_limit : float
        Seconds per MIP solve.
    """

    def __init__(self, hw=None, time_limit: float = modes.TIME_LIMIT_S):
        self.hw, self.time_limit = hw, time_limit

    def transform_module(self, mod: tvm.IRModule, ctx) -> tvm.IRModule:
        hw = _resolve_hw(self.hw)
        _, opts = module_options(mod)
        if opts.modes != "dual":
            return mod
        wbits, ibits = _precision(mod)
        fs = region_functions(mod)
        regions = [region_of(f) for _, f in fs]
        seg_of = [int(_need(f, "segment", "Segment")) for _, f in fs]
        resident = all(bool(_need(f, "resident", "Segment")) for _, f in fs)
        operands = operand_producers_of(mod)
        producers = {r: sorted(set().union(*ops)) if ops else [] for r, ops in operands.items()}
        est = modes.take_over(hw, wbits, ibits, opts, regions, producers) or Estimator.of(hw, wbits, ibits, opts)
        plans, summary = schedule.allocate_modes(regions, seg_of, resident, est, producers, self.time_limit,
                                                 operands=operands)
        out_xbs = {n: xs for seg in summary for n, xs in seg["memory_xbs"].items()}
        for seg in summary:  # keys in place: the producer stores into the dmatmul's arrays
            for q, kp in seg["keys_in_place"].items():
                out_xbs[kp["keys_from"]] = kp["xbs"]
        first = {seg["regions"][0]: seg for seg in summary}
        updates = {}
        for (g, _), r in zip(fs, regions):
            p = plans[r.name]
            kv = {"replicas": p.replicas, "mem_out": p.mem_out, "pass_xbs": p.pass_xbs, "passes": p.passes,
                  "inplace_xbs": _xbs_text([p.inplace_xbs]) if p.inplace_xbs else "",
                  "mem_tom_run": bool(p.inplace_xbs) and r.kind != DMATMUL,
                  "mem_xbs": _xbs_text([out_xbs[r.name]]) if r.name in out_xbs else "",
                  "mem_writeback": bool(p.mem_wb),
                  "compute_xbs": _xbs_text([list(x) for x in p.compute_xbs]) if p.compute_xbs else ""}
            if p.mem_ring:
                kv["mem_ring"] = int(p.mem_ring)
            seg = summary[p.segment]
            src = seg["allocation"][r.name]["input_from"]
            kv["mem_in_xbs"] = _xbs_text([out_xbs[src]]) if src else ""
            if r.name in first:
                sw = first[r.name]["switch"]
                kv["switch_tom"] = _xbs_text([sw["TOM"]]) if sw["TOM"] else ""
                kv["switch_toc"] = _xbs_text([sw["TOC"]]) if sw["TOC"] else ""
                kv["switch_in_run"] = len(summary) > 1  # one segment: switched once, with the weights
            updates[g] = kv
        return _with_attrs(mod, updates).with_attr(A + "modes", json.dumps(summary))


def replication_of(mod: tvm.IRModule) -> list[dict]:
    """Per segment, what PIMCOMP's GA chose (``DuplicateWeights`` with ``duplication='ga'``) and our DP on the
    same problem; empty for other strategies."""
    attrs = mod.attrs
    return json.loads(str(attrs[A + "replication"])) if attrs is not None and A + "replication" in attrs else []


def modes_of(mod: tvm.IRModule) -> list[dict]:
    """The per-segment allocation ``AllocateArrayModes`` recorded (empty for single-mode strategies)."""
    attrs = mod.attrs or {}
    return json.loads(str(attrs[A + "modes"])) if A + "modes" in attrs else []


def _memory_of(f) -> dict | None:
    """What a region's program does with dual-mode arrays (``AllocateArrayModes``), for the code generator."""
    keys = ("mem_xbs", "mem_in_xbs", "switch_tom", "switch_toc", "inplace_xbs")
    if all(not _attr(f, k) for k in keys):
        return None
    xs = {k: tuple(x for rep in _xbs_parse(str(_attr(f, k))) for x in rep) if _attr(f, k) else () for k in keys}
    return {"out": xs["mem_xbs"], "in": xs["mem_in_xbs"], "tom": xs["switch_tom"], "toc": xs["switch_toc"],
            "in_run": bool(_attr(f, "switch_in_run", False)), "writeback": bool(_attr(f, "mem_writeback", False)),
            "inplace": xs["inplace_xbs"] if region_of(f).kind == DMATMUL else (),
            "tom_run": bool(_attr(f, "mem_tom_run", False)), "ring": int(_attr(f, "mem_ring", 0))}


@tvm.transform.module_pass(opt_level=0, name="Place")
class Place:
    """Assign chip crossbars to every replica of every region (``cim.xbs``).

    Replicas are packed onto consecutive crossbars, or, for a region with an
    AG layout (``cim.ag_cores``, PIMCOMP's GA), each AG unit of each replica
    goes to the crossbars of the core the layout names.  Fails with a clear
    message when a segment's replicas (as edited, say) do not fit the chip;
    never lowers them silently.

    Parameters
    ----------
    hw : CIMHardware or str, optional
        The chip (default: the target in scope).
    """

    def __init__(self, hw=None):
        self.hw = hw

    def transform_module(self, mod: tvm.IRModule, ctx) -> tvm.IRModule:
        hw = _resolve_hw(self.hw)
        _, opts = module_options(mod)
        wbits, ibits = _precision(mod)
        est = _estimator(hw, wbits, ibits, opts)
        fs = region_functions(mod)
        regions = [region_of(f) for _, f in fs]
        cmap = mapping.allocate(regions, hw, plans_of(mod, hw, est, latency=False))
        nxt: dict[int, dict] = {}  # segment -> core -> next free crossbar of the core
        laid: dict[int, set] = {}
        for (_, f), r in zip(fs, regions):
            text = _attr(f, "ag_cores")
            if not text:
                continue
            pl = cmap.placements[r.name]
            cores = _cores_parse(text)
            if len(cores) != len(pl.replicas):
                raise mapping.PlacementError(f"region {r.name}: cim.ag_cores lays out {len(cores)} replicas, "
                                             f"cim.replicas asks for {len(pl.replicas)}; edit both or drop cim.ag_cores")
            try:
                pl.replicas = replication.crossbars(pl.tiles, cores, hw.core.crossbars, nxt.setdefault(pl.segment, {}))
            except ValueError as e:
                raise mapping.PlacementError(f"region {r.name}: {e}") from None
            laid.setdefault(pl.segment, set()).add(r.name)
        for seg, names in laid.items():  # a segment is laid out whole, or its packed regions would collide
            others = [n for n, pl in cmap.placements.items() if pl.segment == seg and n not in names]
            if others:
                raise mapping.PlacementError(f"segment {seg}: regions {', '.join(others)} have no cim.ag_cores "
                                             "while others of the segment do; lay out all or none")
        return _with_attrs(mod, {g: {"xbs": _xbs_text(cmap.placements[r.name].replicas)}
                                 for (g, _), r in zip(fs, regions)})


@tvm.transform.module_pass(opt_level=0, name="PlanDataflow")
class PlanDataflow:
    """Choose every region's MIREDO dataflow (``cim.dataflow``) when the strategy asks for it.

    With ``Options.dataflow == 'miredo'`` on a chip with a ``[dataflow]``
    table, each convolution and constant-weight matrix product gets the loop
    nest of :func:`tvm_cim.compiler.dataflow.plan` (MIP per layer, cached by
    shape): a JSON attribute with the ``CIM.loopnest`` operands, the
    optimiser's latency (``predicted_cycles``), its solve time and status.
    Otherwise the module is returned unchanged.

    Parameters
    ----------
    hw : CIMHardware or str, optional
        The chip (default: the target in scope).
    """

    def __init__(self, hw=None):
        self.hw = hw

    def transform_module(self, mod: tvm.IRModule, ctx) -> tvm.IRModule:
        hw = _resolve_hw(self.hw)
        _, opts = module_options(mod)
        if opts.dataflow != "miredo" or not hw.dataflow.levels:
            return mod
        updates = {}
        fs = region_functions(mod)
        dataflow.plan_all([region_of(f) for _, f in fs], hw)  # distinct shapes in parallel, then cached
        for g, f in fs:
            got = dataflow.plan(region_of(f), hw)
            if got is None:
                continue
            layer, res = got
            ops = LN.encode(layer, res.mapping)
            ops["predicted_cycles"] = float(res.cost.cycles)
            updates[g] = {"dataflow": json.dumps({"op": ops, "seconds": res.seconds, "status": res.status,
                                                  "mip_cycles": res.mip_cycles})}
        return _with_attrs(mod, updates)


def _chip_map(mod: tvm.IRModule, hw: CIMHardware, regions: list[Region]) -> mapping.ChipMap:
    """The placement ``Place`` recorded, as a :class:`mapping.ChipMap`."""
    fs = region_functions(mod)
    cap = hw.total_crossbars
    cmap = mapping.ChipMap(crossbars_available=cap)
    stationary = True
    for (_, f), r in zip(fs, regions):
        m, k, n = r.mkn
        ts = mapping.tile_matrix(k, n, r.chip(hw), r.w_int if r.kind != DMATMUL else None,
                                 tile_rows=int(_need(f, "tile_rows", "DuplicateWeights")))
        cmap.crossbars_needed += len(ts)
        reps = _xbs_parse(_need(f, "xbs", "Place"))
        seg = int(_need(f, "segment", "Segment"))
        resident = bool(_need(f, "resident", "Segment"))
        stationary = stationary and resident
        serial = int(_attr(f, "pass_xbs", 0) or 0)  # CMSwitch: its segment's regions run one at a time
        if len(ts) > cap or serial:
            passes = [list(rg) for rg in pass_ranges(len(ts), serial or cap)]
            cmap.placements[r.name] = mapping.Placement(ts, reps, passes, resident=False, segment=seg)
        else:
            cmap.placements[r.name] = mapping.Placement(ts, reps, [list(range(len(ts)))],
                                                        resident=resident and r.kind != DMATMUL, segment=seg)
    cmap.segments = max((p.segment for p in cmap.placements.values()), default=0) + 1
    cmap.weight_stationary = stationary and cmap.segments == 1
    return cmap


def _build_uid(mod: tvm.IRModule, hw: CIMHardware) -> str:
    """Digest of everything that decides a region's weights and placement.

    Program names carry it, and the simulator keeps a program's weights in
    crossbars between runs by name: two builds of the same model with another
    schedule, chip or calibration must never share a name, or the second
    would read the first one's crossbars.
    """
    h = hashlib.sha256()
    h.update(str(tvm_ffi.structural_hash(_without_timings(mod))).encode())
    h.update(loader.to_json(hw).encode())
    return h.hexdigest()[:8]


_TIMINGS = ("seconds", "cpu_seconds")  # solver run times the reports carry: they decide nothing


def _drop_timings(v):
    if isinstance(v, dict):
        return {k: _drop_timings(x) for k, x in v.items() if k not in _TIMINGS}
    if isinstance(v, list):
        return [_drop_timings(x) for x in v]
    return v


def _timing_free(value):
    """``value`` (an attribute) without the solvers' run times, or None when it records none."""
    if not isinstance(value, str) or not value.startswith(("{", "[")):
        return None
    try:
        doc = json.loads(value)
    except json.JSONDecodeError:
        return None
    clean = _drop_timings(doc)
    return json.dumps(clean, sort_keys=True) if clean != doc else None


def _without_timings(mod: tvm.IRModule) -> tvm.IRModule:
    """The module with the solvers' run times left out of its JSON attributes (module and region
    functions): two builds that decide the same differ only there, and must get the same name."""
    out = mod
    for k, v in (mod.attrs or {}).items():
        clean = _timing_free(v)
        if clean is not None:
            out = out.with_attr(k, clean)
    updates = {}
    for g, f in region_functions(mod):
        kv = {k: c for k, v in (f.attrs or {}).items() if (c := _timing_free(v)) is not None}
        if kv:
            updates[g] = kv
    if updates:
        out = out.clone()
        for g, kv in updates.items():
            f = out[g]
            for k, c in kv.items():
                f = f.with_attr(k, c)
            out.update_func(out.get_global_var(g), f)
    return out


@tvm.transform.module_pass(opt_level=0, name="GenerateMetaOps")
class GenerateMetaOps:
    """Generate the meta-operator program of every region (``cim.program``) and the network above them.

    Programs are verified against the meta-operator definitions and the
    chip.  The module gets the network (``cim.network``: segments, their
    order, what runs between them).

    Parameters
    ----------
    hw : CIMHardware or str, optional
        The chip (default: the target in scope).
    """

    def __init__(self, hw=None):
        self.hw = hw

    def transform_module(self, mod: tvm.IRModule, ctx) -> tvm.IRModule:
        hw = _resolve_hw(self.hw)
        strategy, opts = module_options(mod)
        fs = region_functions(mod)
        if not fs:
            return mod
        uid = _build_uid(mod, hw)
        regions = [region_of(f) for _, f in fs]
        cmap = _chip_map(mod, hw, regions)
        cap = int(hw.core.local_buffer.capacity_kb * 1024) if opts.local_memory else 0
        progs = []
        for (g, f), r in zip(fs, regions):
            df = _attr(f, "dataflow")
            nest = json.loads(str(df))["op"] if df is not None else None
            progs.append(codegen.generate(r, cmap.placements[r.name], hw, opts, strategy, name=f"m{uid}.{r.name}",
                                          loopnest=nest, memory=_memory_of(f), local_bytes=cap))
        if cap and opts.local_heap == "region":  # two passes: each region's peak with a whole core's memory decides its share
            share = _local_shares(cmap, hw, {r.name: heap_peak(hw, p) for r, p in zip(regions, progs)})
            progs = [dataclasses.replace(p, attrs=tuple((k, share.get(r.name, 0) if k == "local_bytes" else v)
                                                        for k, v in p.attrs if k != "local_bytes" or share.get(r.name)))
                     for r, p in zip(regions, progs)]
        updates, names, segs = {}, [], {}
        for (g, f), r, prog in zip(fs, regions, progs):
            text = print_program(prog)
            _remember(prog, text)
            updates[g] = {"program": text}
            names.append(prog.name)
            segs.setdefault(cmap.placements[r.name].segment, []).append(prog.name)
        net = Network(f"m{uid}", (("hw", hw.name), ("strategy", strategy)),
                      tuple(NetSegment(i, (), tuple(rs)) for i, rs in sorted(segs.items())))
        verify_network(net, {n: None for n in names}, hw.total_crossbars)
        return _with_attrs(mod, updates).with_attr(A + "network", print_network(net))


def _local_shares(cmap: mapping.ChipMap, hw: CIMHardware, demand: dict[str, int]) -> dict[str, int]:
    """Per region, the bytes of its cores' local memories its buffers may use (PIMCOMP's low-latency heap).

    The regions of a segment run at once (element pipeline), so a core's local
    memory is divided among the regions with crossbars on it, by measured
    need: ``demand`` is the peak of bytes a region's buffers hold over time
    when it runs alone with a whole core's memory (the first pass,
    :func:`~tvm_cim.simulator.engine.heap_peak`).  On each core the regions
    are admitted smallest demand first while their demands fit, and get them
    (they run as with a whole memory); the bytes left are divided among the
    others in proportion to their demands, or evenly among all when every
    demand fits.  A region gets its
    smallest share over its cores, so the shares on a core never exceed its
    memory.

    Parameters
    ----------
    cmap : mapping.ChipMap
        The placements.
    hw : CIMHardware
        The chip.
    demand : dict
        Region name -> bytes.

    Returns
    -------
    dict
        Region name -> bytes.
    """
    per_core = hw.core.crossbars
    users: dict[tuple[int, int], list] = {}
    cores_of: dict[str, set] = {}
    for name, pl in cmap.placements.items():
        cs = {xb // per_core for rep in pl.replicas for xb in rep}
        cores_of[name] = cs
        for c in sorted(cs):
            users.setdefault((pl.segment, c), []).append(name)
    cap = int(hw.core.local_buffer.capacity_kb * 1024)
    alloc: dict[tuple, dict[str, int]] = {}
    for key, names in users.items():
        need = {n: max(1, int(demand.get(n, 0))) for n in names}
        got, left = {n: 0 for n in names}, cap
        for n in sorted(names, key=lambda n: (need[n], n)):
            if need[n] > left:
                break
            got[n], left = need[n], left - need[n]
        rest = [n for n in names if not got[n]]
        if rest:  # what is left goes to those that do not fit, in proportion to their demands
            total = sum(need[n] for n in rest)
            alloc[key] = {n: got[n] or left * need[n] // total for n in names}
        else:  # all fit: the spare bytes evenly
            alloc[key] = {n: got[n] + left // len(names) for n in names}
    return {n: min(alloc[(cmap.placements[n].segment, c)][n] for c in cs) for n, cs in cores_of.items() if cs}


_PROGRAMS: OrderedDict = OrderedDict()  # program name -> (text, Program): lowering need not re-parse the text
# What the cache keeps of earlier builds: at most this many programs and characters of their text (a Program
# object takes about ten bytes per character).  The newest build's programs are always kept whole, however large:
# its lowering reads them.  Bounded by count alone, the cache held about 340 MB after two ResNet-18 builds at the
# paper's pipeline granularity (Options.pipeline_vectors, 100 k-340 k operations each) and grew to 17 GB over the
# CIM-MLC benchmark.
PROGRAMS_KEPT = (4096, 1 << 24)
_PROGRAM_CHARS = [0]  # characters of text in _PROGRAMS


def _build_of(name: str) -> str:
    return name.partition(".")[0]  # codegen names programs "m<build id>.<region>"


def _remember(prog: Program, text: str) -> None:
    old = _PROGRAMS.pop(prog.name, None)
    if old is not None:
        _PROGRAM_CHARS[0] -= len(old[0])
    _PROGRAMS[prog.name] = (text, prog)
    _PROGRAM_CHARS[0] += len(text)
    count, chars = PROGRAMS_KEPT
    newest = _build_of(prog.name)
    while len(_PROGRAMS) > count or _PROGRAM_CHARS[0] > chars:
        name, (t, _) = next(iter(_PROGRAMS.items()))
        if _build_of(name) == newest:
            break  # only the newest build's programs are left
        del _PROGRAMS[name]
        _PROGRAM_CHARS[0] -= len(t)


def compiled_program(text: str) -> Program:
    """The program of a ``cim.program`` attribute (parsed, unless this process generated that very text)."""
    name = text[len('program "'):text.index('"', len('program "'))]
    hit = _PROGRAMS.get(name)
    if hit is not None and hit[0] == text:
        return hit[1]
    p = parse_program(text)
    _remember(p, text)
    return p


@tvm.transform.module_pass(opt_level=0, name="LowerToRuntime")
class LowerToRuntime:
    """Replace calls of regions with ``call_dps_packed("tvm_cim.run_region", ...)``.

    The arguments are the region's inputs, its constants (int8 weights,
    scales, bias), the hardware description (JSON) and the program (text);
    both strings travel inside the built executable.  Records what the
    passes decided for :func:`last_compile_info`.

    Parameters
    ----------
    hw : CIMHardware or str, optional
        The chip (default: the target in scope).
    """

    def __init__(self, hw=None):
        self.hw = hw

    def transform_module(self, mod: tvm.IRModule, ctx) -> tvm.IRModule:
        hw = _resolve_hw(self.hw)
        fs = region_functions(mod)
        info = CompileInfo(hw=hw)
        if not fs:
            info.host_ops = host_ops(mod)
            _STATE.info = info
            return mod
        strategy, opts = module_options(mod)
        regions = [region_of(f) for _, f in fs]
        texts = [str(_need(f, "program", "GenerateMetaOps")) for _, f in fs]  # one copy of each in Python
        programs = [compiled_program(t) for t in texts]
        hw_json = loader.to_json(hw)
        lowered = {}
        for (g, f), r, prog, text in zip(fs, regions, programs, texts):
            consts = codegen.region_constants(r)
            args_c = [relax.const(consts[d.name]) for d in prog.decl("const")]

            def build(args, out_ty, args_c=args_c, text=text):
                extra = [tvm.ir.StringImm(hw_json), tvm.ir.StringImm(text)]
                return relax.call_dps_packed(RUN_REGION, list(args) + args_c + extra, out_ty)

            lowered[g] = build
        info.producers = producers_of(mod)
        wbits, ibits = _precision(mod)
        est = _estimator(hw, wbits, ibits, opts)
        plans = plans_of(mod, hw, est)
        sched = schedule.Schedule(strategy, opts, plans, segments=max(p.segment for p in plans.values()) + 1)
        sched.estimate_ns, sched.estimate_regions_ns = est.graph_ns(regions, plans, opts.pipeline, info.producers)
        nests = {r.name: [o for o in p.ops("run") if o.opcode == "CIM.loopnest"] for r, p in zip(regions, programs)}
        if any(nests.values()):
            # MIREDO regions: the optimiser's loop-nest latency; the simulator runs them one after another
            for k, ops in nests.items():
                if ops:
                    sched.estimate_regions_ns[k] = float(ops[0]["predicted_cycles"]) * hw.cycle_ns
            sched.estimate_ns = float(sum(sched.estimate_regions_ns.values()))
        uid_names = {r.name: p.name for r, p in zip(regions, programs)}
        sched.plans = {uid_names[k]: v for k, v in plans.items()}
        sched.estimate_regions_ns = {uid_names[k]: v for k, v in sched.estimate_regions_ns.items()}
        info.producers = {uid_names[k]: [uid_names[q] for q in v] for k, v in info.producers.items()}
        cmap = _chip_map(mod, hw, regions)
        cmap.placements = {uid_names[k]: v for k, v in cmap.placements.items()}
        info.regions = [_renamed(r, uid_names[r.name]) for r in regions]
        info.accuracy = accuracy_of(mod)
        if info.accuracy:
            info.accuracy["regions"] = {uid_names[k]: v for k, v in info.accuracy["regions"].items()}
        info.programs, info.chip_map, info.schedule = programs, cmap, sched
        info.network = parse_network(str(mod.attrs[A + "network"]))
        info.modes = modes_of(mod)
        info.replication = replication_of(mod)
        for seg in info.replication:
            seg["layers"] = {uid_names.get(n, n): v for n, v in seg["layers"].items()}
        for seg in info.modes:
            seg["regions"] = [uid_names.get(n, n) for n in seg["regions"]]
        mod = lower_composites(mod, lowered)
        info.host_ops = host_ops(mod)
        _STATE.info = info
        return mod.with_attr(A + "estimate_ns", float(sched.estimate_ns))


def _renamed(r: Region, name: str) -> Region:
    return dataclasses.replace(r, name=name)


# ============================================================================ the pipeline
def CIMPipeline(hw=None, strategy: str | None = None, options: strategies.Options | None = None,  # noqa: N802
                calibration: CalibrationConfig | None = None, max_error: float | None = None) -> tvm.transform.Pass:
    """The whole CIM compilation as a ``tvm.transform.Sequential`` of the passes above.

    Parameters
    ----------
    hw : CIMHardware or str, optional
        The chip (default: the target in scope).
    strategy : str, optional
        A registered strategy (default: :func:`scheduling`'s).
    options : Options, optional
        Technique overrides (ablations).
    calibration : CalibrationConfig, optional
        Default: :func:`calibration`'s settings.
    max_error : float, optional
        Error budget of the crossbar mapping (default: the target's ``-max_error``, else
        :func:`accuracy_budget`'s, else 0.005).

    Returns
    -------
    tvm.transform.Pass
    """
    c = calibration
    passes = [
            FindRegions(),
            Calibrate(c.samples, c.seed, c.inputs) if c else Calibrate(),
            Quantize(hw),
            MapCrossbars(hw, max_error),
            Segment(hw, strategy, options),
            DuplicateWeights(hw),
            AllocateArrayModes(hw),
            Place(hw),
            PlanDataflow(hw),
            GenerateMetaOps(hw),
            LowerToRuntime(hw),
            ShareHostKernels,
    ]
    bar: list = []  # one progress bar per run of the pipeline (shown on terminals only)
    timed = [_Timed(p, bar, i == 0, i == len(passes) - 1, len(passes)) for i, p in enumerate(passes)]
    return tvm.transform.Sequential(timed, name="CIMPipeline")


def last_compile_phases() -> dict[str, dict[str, float]]:
    """Wall and CPU seconds of every pass of the most recent CIM build in this thread.

    Returns
    -------
    dict
        Pass name -> ``{"wall_s": ..., "cpu_s": ...}``, in pipeline order.
    """
    return dict(getattr(_STATE, "phases", {}))


@tvm.transform.module_pass(opt_level=0, name="CIMTimed")
class _Timed:
    """Run one pass of :func:`CIMPipeline`, time it (:func:`last_compile_phases`) and advance the progress bar."""

    def __init__(self, inner, bar: list, first: bool, last: bool, total: int):
        self.inner, self.bar, self.first, self.last, self.total = inner, bar, first, last, total
        self.name = inner.info.name

    def transform_module(self, mod: tvm.IRModule, ctx) -> tvm.IRModule:
        if self.first:
            _STATE.phases = {}
            _STATE.estimators = {}  # shared by this run's passes (_estimator)
            _BUILD[0] += 1
            self.bar[:] = [tqdm(total=self.total, desc="compiling", unit="pass", disable=None, leave=False)]
        bar = self.bar[0] if self.bar else None
        if bar is not None:
            bar.set_postfix_str(self.name)
        w, c = time.perf_counter(), time.process_time()
        try:
            with gc_paused():  # the passes allocate millions of acyclic objects: collections would dominate
                out = self.inner(mod)
        except BaseException:
            _STATE.estimators = None
            if bar is not None:
                bar.close()
            raise
        if self.last:
            _STATE.estimators = None
        phases = getattr(_STATE, "phases", None)
        if phases is not None:
            phases[self.name] = {"wall_s": time.perf_counter() - w, "cpu_s": time.process_time() - c}
        if bar is not None:
            bar.update(1)
            if self.last:
                bar.close()
        return out


def offload(mod: tvm.IRModule, hw: CIMHardware, calib: CalibrationConfig | None = None,
            strategy: str | None = None, options: strategies.Options | None = None,
            max_error: float | None = None) -> tuple[tvm.IRModule, CompileInfo]:
    """Run the whole CIM pipeline on a module.

    Parameters
    ----------
    mod : tvm.IRModule
        A float Relax module (e.g. from the ONNX frontend).
    hw : CIMHardware
        The target chip.
    calib : CalibrationConfig, optional
        Calibration settings; defaults to :func:`calibration`'s.
    strategy : str, optional
        Scheduling strategy; defaults to :func:`scheduling`'s (``cim-mlc``).
    options : Options, optional
        Technique overrides for ablations.
    max_error : float, optional
        Error budget of the crossbar mapping (:class:`MapCrossbars`).

    Returns
    -------
    tvm.IRModule
        The module with offloaded regions lowered to ``call_dps_packed``.
    CompileInfo
    """
    out = CIMPipeline(hw, strategy, options, calib, max_error)(mod)
    return out, last_compile_info()

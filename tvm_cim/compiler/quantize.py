"""Int8 quantisation of offloaded regions, calibrated on seeded sample inputs.

* Weights: symmetric, per output channel, ``2^(weight_bits-1) - 1`` levels
  each side.
* Activations: per tensor, from the range observed on calibration inputs:
  non-negative tensors (after ReLU) use unsigned codes ``[0, 2^b - 1]``;
  signed tensors use symmetric codes whose positive and negative parts are
  applied to the crossbars in two phases and subtracted (the DACs only drive
  unsigned values, and small magnitudes keep bit-serial sums sparse).
* The run-time right operand of a ``dmatmul`` is a signed per-tensor weight.

Calibration runs the float model once per sample: host operators through
TVM's ``llvm`` build, offloaded regions through a float observer
(``tvm_cim.calibrate_region``, numpy im2col and BLAS) that records the range of
their inputs.
"""

from __future__ import annotations

import hashlib
import threading
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
import tvm
import tvm_ffi
from tvm import relax

from ..common.layout import im2col
from ..common.relax_utils import ShareHostKernels, composite_name, rewrite_callers
from .partition import PREFIX
from .region import CONV2D, DMATMUL, MATMUL, Region, unfold_conv_weight

_OBSERVED: dict[str, list[float]] = {}
_SAMPLED: dict[str, list[dict]] = {}  # region -> per calibration sample, a seeded sample of its input vectors
_LOCK = threading.Lock()
# (module hash, samples, seed) -> observation, for seeded calibration.  Bounded: an observation holds the
# model's llvm build (every weight) and its samples, so an unbounded cache grows by a model per entry.
_CACHE: OrderedDict = OrderedDict()
_CACHE_SIZE = 4
_COUNTER = [0]
_RECORDS: OrderedDict = OrderedDict()  # observation id (module attribute cim.calibration_id) -> Observation

# Input vectors of every region kept per calibration sample (what ADC-aware mapping measures errors on).
SAMPLE_VECTORS = 64

_FLOAT_REGIONS: dict[str, "CompositeInfo"] = {}


@dataclass
class Observation:
    """What calibration saw: input ranges, sampled input vectors, and the float model's inputs and outputs.

    Attributes
    ----------
    ranges : dict
        ``"<region>:<input index>" -> (min, max)``.
    vectors : dict
        Region -> one :func:`sample_vectors` dict per calibration sample.
    inputs : list of dict
        The calibration samples (graph input name -> array).
    outputs : list of list of np.ndarray
        The float model's outputs on each sample.
    runner : RegionRunner
        The model with its regions replaced by Python functions (to run it again).
    """

    ranges: dict
    vectors: dict
    inputs: list
    outputs: list
    runner: "RegionRunner"


def forget_calibrations() -> None:
    """Drop every kept calibration (observations, their llvm builds and samples, region descriptions)
    and the buffers the Relax VM's pooled allocator keeps for reuse.

    For long sweeps over large models: the float runs of calibration leave
    their largest intermediates (attention scores: heads x seq^2 floats) in
    the VM's memory pool, which never shrinks otherwise.  A module compiled
    before loses its calibration record (``observation`` returns None) and
    is calibrated again if it is compiled again.  Call it with no VM running.
    """
    with _LOCK:
        _CACHE.clear()
        _RECORDS.clear()
        _OBSERVED.clear()
        _SAMPLED.clear()
        _FLOAT_REGIONS.clear()
    tvm.get_global_func("vm.builtin.memory_manager.clear")()


def observation(token: str) -> Observation | None:
    """The calibration record a module's ``cim.calibration_id`` attribute names (None if gone)."""
    return _RECORDS.get(token)


def _keep(obs: Observation, key) -> str:
    """Keep an observation under an id: a digest of its calibration key (seeded samples), else a counter."""
    if key is None:
        with _LOCK:
            _COUNTER[0] += 1
            token = f"user{_COUNTER[0]}"
    else:
        token = "c" + hashlib.sha256(repr(key).encode()).hexdigest()[:12]
    _RECORDS[token] = obs
    _RECORDS.move_to_end(token)
    while len(_RECORDS) > 8:
        _RECORDS.popitem(last=False)
    return token


def sample_vectors(info: "CompositeInfo", args: list[np.ndarray], rng: np.random.Generator,
                   n: int = SAMPLE_VECTORS) -> dict:
    """A seeded sample of the input vectors a region's crossbars see (float, before quantisation).

    Returns ``{"x": (V, K)}``; a ``dmatmul`` also gives ``"y"`` (the run-time
    right operands, ``(B, K, N)``) and ``"b"`` (which of them each vector meets).
    """
    x = args[0]
    if info.kind == CONV2D:
        c = info.conv
        cols = im2col(x, c["kernel"], c["strides"], c["padding"], c["dilation"], 0)
        idx = np.sort(rng.choice(len(cols), min(n, len(cols)), replace=False))
        return {"x": cols[idx].astype(np.float32)}
    if info.kind == MATMUL:
        flat = x.reshape(-1, x.shape[-1])
        idx = np.sort(rng.choice(len(flat), min(n, len(flat)), replace=False))
        return {"x": flat[idx].astype(np.float32)}
    y = args[1]
    bshape = np.broadcast_shapes(x.shape[:-2], y.shape[:-2])
    xb = np.broadcast_to(x, bshape + x.shape[-2:]).reshape(-1, *x.shape[-2:])
    yb = np.broadcast_to(y, bshape + y.shape[-2:]).reshape(-1, *y.shape[-2:])
    heads = np.sort(rng.choice(len(xb), min(4, len(xb)), replace=False))
    per = max(1, n // len(heads))
    rows, which = [], []
    for i, h in enumerate(heads):
        r = np.sort(rng.choice(xb.shape[1], min(per, xb.shape[1]), replace=False))
        rows.append(xb[h, r])
        which += [i] * len(r)
    return {"x": np.concatenate(rows).astype(np.float32), "y": yb[heads].astype(np.float32), "b": np.array(which)}


def _record(key: str, a: np.ndarray) -> None:
    with _LOCK:
        lo, hi = _OBSERVED.get(key, [np.inf, -np.inf])
        _OBSERVED[key] = [min(lo, float(a.min(initial=np.inf))), max(hi, float(a.max(initial=-np.inf)))]


def float_reference(info: "CompositeInfo", args: list[np.ndarray]) -> np.ndarray:
    """The float result of a composite (numpy, float32 BLAS), used during calibration."""
    if info.kind == CONV2D:
        c = info.conv
        x = args[0]
        n = x.shape[0]
        _, oc, oh, ow = info.out_shape
        cols = im2col(x, c["kernel"], c["strides"], c["padding"], c["dilation"], 0)
        y = cols @ unfold_conv_weight(info.weight, c["groups"])
        if info.bias is not None:
            y = y + info.bias
        return y.reshape(n, oh, ow, oc).transpose(0, 3, 1, 2)
    if info.kind == MATMUL:
        y = np.matmul(args[0], info.weight)
        return y + info.bias if info.bias is not None else y
    return np.matmul(args[0], args[1])


_HANDLER = threading.local()  # what tvm_cim.calibrate_region does in this thread (see RegionRunner.run)


def _calibrate(region: str, xs: list[np.ndarray]) -> np.ndarray:
    """Record a region's input ranges and a sample of its input vectors; return its float result."""
    for i, a in enumerate(xs):
        _record(f"{region}:{i}", a)
    info = _FLOAT_REGIONS[region]
    with _LOCK:
        got = _SAMPLED.setdefault(region, [])
        rng = np.random.default_rng([zlib.crc32(region.encode()), len(got)])
    got.append(sample_vectors(info, xs, rng))
    return float_reference(info, xs)


@tvm.register_global_func("tvm_cim.calibrate_region", override=True)
def _calibrate_region(*args):
    out, region = args[-1], str(args[-2])
    handler = getattr(_HANDLER, "fn", None) or _calibrate
    y = handler(region, [a.numpy() for a in args[:-2]])
    out.copyfrom(np.ascontiguousarray(y, dtype=np.float32))


@dataclass
class CalibrationConfig:
    """How activations are calibrated.

    Attributes
    ----------
    samples : int
        Number of seeded random input samples.
    seed : int
        Seed of the sample generator.
    inputs : list of dict, optional
        User-provided samples (name -> array); replaces the random ones.
    """

    samples: int = 1
    seed: int = 0
    inputs: list[dict[str, np.ndarray]] | None = None


@dataclass
class CompositeInfo:
    """What a ``cim.*`` composite function computes."""

    kind: str
    in_shapes: list[tuple]
    out_shape: tuple
    weight: np.ndarray | None = None
    bias: np.ndarray | None = None
    conv: dict = field(default_factory=dict)


def _np(const) -> np.ndarray:
    """A constant's values: a read-only view of the module's own tensor (no copy; a VGG-19's weights are
    574 MB, and calibration and every region description read them)."""
    a = np.from_dlpack(const.value)
    a.flags.writeable = False
    return a


def _channel_vector(bias: np.ndarray | None, n: int) -> np.ndarray | None:
    """A per-channel bias constant (checked by the pattern) as a length-n vector."""
    if bias is None:
        return None
    return np.broadcast_to(bias.reshape(-1), (n,)).astype(np.float32)


def describe_composite(func) -> CompositeInfo:
    """Read the operator, attributes and constants out of a composite function."""
    name = composite_name(func, PREFIX)
    in_shapes = [tuple(int(s) for s in p.ty.shape) for p in func.params]
    out_shape = tuple(int(s) for s in func.ret_ty.shape) if hasattr(func, "ret_ty") else None
    bindings = [b for blk in func.body.blocks for b in blk.bindings]
    calls = {b.value.op.name: b.value for b in bindings if isinstance(b.value, relax.Call) and hasattr(b.value.op, "name")}
    if out_shape is None:
        out_shape = tuple(int(s) for s in func.body.body.ty.shape)
    bias = None
    if "relax.add" in calls:
        bias = _np(calls["relax.add"].args[1])
    if name.startswith("cim.conv2d"):
        c = calls["relax.nn.conv2d"]
        a = c.attrs
        w = _np(c.args[1])
        bias = _channel_vector(bias, w.shape[0])
        conv = dict(
            kernel=tuple(int(k) for k in w.shape[2:]),
            strides=tuple(int(s) for s in a.strides),
            padding=tuple(int(p) for p in a.padding),
            dilation=tuple(int(d) for d in a.dilation),
            groups=int(a.groups),
        )
        return CompositeInfo(CONV2D, in_shapes, out_shape, w, bias, conv)
    if name.startswith("cim.matmul"):
        w = _np(calls["relax.matmul"].args[1])
        bias = _channel_vector(bias, w.shape[1])
        return CompositeInfo(MATMUL, in_shapes, out_shape, w, bias)
    if name == "cim.dmatmul":
        return CompositeInfo(DMATMUL, in_shapes, out_shape)
    raise ValueError(f"unknown composite {name}")


# --------------------------------------------------------------------------- calibration
@relax.expr_functor.mutator
class _InsertObservers(relax.PyExprMutator):
    """Run every ``cim.*`` region through ``tvm_cim.calibrate_region`` (a float observer by default)."""

    def __init__(self, mod: tvm.IRModule):
        super().__init__(mod)
        self.mod_ = mod
        self.names: dict[str, str] = {}

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if isinstance(call.op, relax.GlobalVar) and composite_name(self.mod_[call.op], PREFIX):
            region = self.names[call.op.name_hint]
            _FLOAT_REGIONS[region] = describe_composite(self.mod_[call.op])
            return relax.call_dps_packed(
                "tvm_cim.calibrate_region", list(call.args) + [tvm.ir.StringImm(region)], call.ty
            )
        return call


#: Target of the calibration build: LLVM at optimisation level 1.  Without fast-math flags LLVM keeps
#: IEEE semantics at every level, so the host operators compute the same bits as the default (level 3)
#: build (``tests/test_passes.py`` checks it on zoo models); code generation takes about half the time
#: and the host operators run as fast (level 0 halves it again but runs them about 3x slower).
CALIBRATION_TARGET = {"kind": "llvm", "opt-level": 1}


class RegionRunner:
    """The model built once for ``llvm`` with every region replaced by a Python function.

    Host operators run through TVM's ``llvm`` build (kernels shared across
    channel counts, :func:`~tvm_cim.common.relax_utils.ShareHostKernels`, as
    in the final build); each region call goes to the handler given to
    :meth:`run` (the float observer of calibration by default).

    Parameters
    ----------
    mod : tvm.IRModule
        The partitioned module.
    region_names : dict
        Composite function name -> region name.
    """

    def __init__(self, mod: tvm.IRModule, region_names: dict[str, str]):
        mutator = _InsertObservers(mod)
        mutator.names = region_names
        cmod = ShareHostKernels(relax.transform.DeadCodeElimination()(rewrite_callers(mod, mutator)))
        ex = relax.build(cmod, target=tvm.target.Target(CALIBRATION_TARGET))
        self.vm = relax.VirtualMachine(ex, tvm.cpu(), memory_cfg="naive")  # (the pooled allocator keeps its buffers)
        self.params = list(mod["main"].params)

    def run(self, samples: list[dict], handler=None) -> list[list[np.ndarray]]:
        """The model's outputs on every sample, regions computed by ``handler(region, inputs) -> output``."""
        params = self.params
        outs = []
        prev = getattr(_HANDLER, "fn", None)
        _HANDLER.fn = handler
        try:
            for s in samples:
                missing = [p.name for p in params if p.name not in s]
                if missing:
                    raise ValueError(f"calibration sample lacks inputs {missing}; "
                                     f"the model's inputs are {[p.name for p in params]}")
                y = self.vm["main"](*[tvm.runtime.tensor(np.asarray(s[p.name], dtype=str(p.ty.dtype))) for p in params])
                outs.append(_flatten_outputs(y))
        finally:
            _HANDLER.fn = prev
        return outs


def _flatten_outputs(y) -> list[np.ndarray]:
    if hasattr(y, "numpy"):
        return [y.numpy()]
    return [a for item in y for a in _flatten_outputs(item)]


def observe(mod: tvm.IRModule, region_names: dict[str, str], config: CalibrationConfig) -> tuple[Observation, str]:
    """Run the calibration samples through the float model, recording what the regions see.

    Returns
    -------
    Observation
    str
        Its id (the ``Calibrate`` pass writes it as ``cim.calibration_id``).
    """
    key = None
    if config.inputs is None:
        key = (tvm_ffi.structural_hash(mod), tuple(sorted(region_names.items())), config.samples, config.seed)
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key], _keep(_CACHE[key], key)
    params = list(mod["main"].params)
    samples = config.inputs
    if samples is None:
        rng = np.random.default_rng(config.seed)
        samples = [
            {p.name: rng.standard_normal(tuple(int(s) for s in p.ty.shape)).astype(str(p.ty.dtype)) for p in params}
            for _ in range(config.samples)
        ]
    with _LOCK:
        _OBSERVED.clear()
        _SAMPLED.clear()
    runner = RegionRunner(mod, region_names)
    outs = runner.run(samples)
    with _LOCK:
        obs = Observation({k: (v[0], v[1]) for k, v in _OBSERVED.items()}, dict(_SAMPLED), list(samples), outs,
                          runner)
    if key is not None:
        _CACHE[key] = obs
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return obs, _keep(obs, key)


def calibrate(mod: tvm.IRModule, region_names: dict[str, str], config: CalibrationConfig) -> dict[str, tuple[float, float]]:
    """Observe the range of every offloaded region's inputs on sample data.

    Parameters
    ----------
    mod : tvm.IRModule
        The partitioned module (``cim.*`` composite functions not yet lowered).
    region_names : dict
        Composite function name -> region name.
    config : CalibrationConfig

    Returns
    -------
    dict
        ``"<region>:<input index>" -> (min, max)``.
    """
    return dict(observe(mod, region_names, config)[0].ranges)


# --------------------------------------------------------------------------- quantisation
def activation_params(lo: float, hi: float, bits: int) -> tuple[float, bool]:
    """Scale and signedness of an activation tensor with observed range [lo, hi].

    Non-negative tensors use unsigned codes ``[0, 2^b - 1]``; others symmetric
    signed codes, applied to the crossbars as two unsigned phases.
    """
    if lo >= 0:
        return max(hi, 1e-12) / (2**bits - 1), False
    return max(abs(lo), abs(hi), 1e-12) / (2 ** (bits - 1) - 1), True


def quantize_weights(w: np.ndarray, bits: int, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-channel quantisation along ``axis`` (the output channels)."""
    lim = 2 ** (bits - 1) - 1
    red = tuple(i for i in range(w.ndim) if i != axis % w.ndim)
    scale = np.maximum(w.max(axis=red), -w.min(axis=red)) / lim  # the largest magnitude, without a copy of |w|
    scale = np.where(scale > 0, scale, 1.0).astype(np.float32)
    shape = [1] * w.ndim
    shape[axis] = -1
    q = np.divide(w, scale.reshape(shape))  # rounded and clipped in place (the same values, fewer copies)
    np.rint(q, out=q)
    np.clip(q, -lim, lim, out=q)
    return q.astype(np.int8), scale


def make_region(name: str, info: CompositeInfo, ranges: dict, input_bits: int, weight_bits: int) -> Region:
    """Quantise one composite into a :class:`Region`."""
    lo, hi = ranges.get(f"{name}:0", (-1.0, 1.0))
    x_scale, x_signed = activation_params(lo, hi, input_bits)
    r = Region(name, info.kind, info.in_shapes, info.out_shape, x_scale=x_scale, x_signed=x_signed, conv=dict(info.conv))
    if info.kind == CONV2D:
        q, s = quantize_weights(info.weight, weight_bits, axis=0)
        r.w_int = unfold_conv_weight(q, info.conv["groups"])
        r.w_scale = s
    elif info.kind == MATMUL:
        q, s = quantize_weights(info.weight, weight_bits, axis=1)
        r.w_int, r.w_scale = q, s
    else:
        lo2, hi2 = ranges.get(f"{name}:1", (-1.0, 1.0))
        r.y_scale = max(abs(lo2), abs(hi2), 1e-12) / (2 ** (weight_bits - 1) - 1)
    if info.bias is not None:
        r.bias = info.bias.astype(np.float32)
    return r

"""One model on one chip: compile, simulate, compare with the float reference, report.

What ``python -m tvm_cim run`` does, and what every point of a sweep does
(:mod:`tvm_cim.sweep`).  With ``timing_only`` the programs run on a
timing-only chip (no values: latency, energy, power and utilisation only),
which the report states.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time

import onnx
from tvm import relax

from . import report as R
from . import runtime
from .common.onnx_io import host_onnx_ops, import_onnx, load_onnx, model_inputs, without_weights
from .common.report import REFERENCES, compare, onnxruntime_outputs, reference_outputs, run_vm
from .common.runtime import compiled_heap, gc_paused, settle, workers_default
from .common.target import register_hardware
from .compiler.transform import (
    accuracy_budget,
    calibration,
    last_compile_info,
    last_compile_phases,
    offload,
    scheduling,
)

# ONNX operators a crossbar region can run, and the Relax operators they become
# (BatchNormalization is folded into the convolution before it).
CIM_ONNX_OPS = {"Conv": ("relax.nn.conv2d",), "Gemm": ("relax.matmul", "relax.linear"),
                "MatMul": ("relax.matmul",), "BatchNormalization": ("relax.nn.batch_norm",)}


#: ``bitwise`` argument -> the simulator's ``Options.exact_shortcut``.
_SHORTCUT = {False: True, True: "tile", "tile": "tile", "all": False}


def evaluate(spec: str, hw, strategy: str, *, seed: int = 0, calib_samples: int = 1, inputs_path: str | None = None,
             bitwise: bool | str = False, timing_only: bool = False, hw_name: str | None = None,
             max_error: float | None = None, nonideal=None, batch: int = 1,
             reference: str = "tvm") -> tuple[dict, list, object]:
    """Compile a model for a chip, simulate it and report.

    Parameters
    ----------
    spec : str
        ONNX file or ``zoo:NAME[?k=v,...]``.
    hw : str or CIMHardware
        A preset name or file (built through ``relax.build`` with its target), or a
        description object (built with the same passes, :func:`tvm_cim.offload`).
    strategy : str
        A registered strategy.
    seed, calib_samples : int
        Seed of the inputs, zoo weights and calibration samples; calibration samples.
    inputs_path : str, optional
        ``.npz`` of inputs (default: seeded random).
    bitwise : bool or str
        Send every MVM through the bit-level crossbar model.  ``True`` or
        ``"tile"``: the bitlines of a tile whose conversions a bound on its
        inputs proves unaltered by the ADC are summed as one integer product,
        the others are converted bit-serially; ``"all"``: every conversion
        bit-serially.  The results are the same.
    timing_only : bool
        Skip the numerics (and the reference): latency, energy and power only.
    hw_name : str, optional
        Name in the report (default: the preset name or the description's).
    max_error : float, optional
        Error budget of the crossbar mapping (:func:`tvm_cim.accuracy_budget`; default 0.005).
    nonideal : tvm_cim.hardware.crossbar.Nonideal, optional
        Seeded device non-idealities the simulator applies (the compiler maps for the ideal device);
        reported under ``nonideal``.
    batch : int
        Inputs run through the compiled pipeline on one timeline: the report's
        ``throughput_per_s`` and ``batch`` section (``latency_ns`` stays that of one input).
    reference : str
        The float reference the outputs are compared with (:data:`~tvm_cim.common.report.REFERENCES`):
        ``"tvm"``, TVM's ``llvm`` build of the imported module, or ``"onnxruntime"``, onnxruntime on the
        ONNX model's file (a zoo model is saved to a temporary file: its weights are not held in memory
        while the model compiles and runs).

    Returns
    -------
    report : dict
    outputs : list of numpy.ndarray
        Empty with ``timing_only``.
    model : onnx.ModelProto
        Its graph (operators, inputs, outputs); the initializers are dropped once imported.
    """
    if reference not in REFERENCES:
        raise ValueError(f"reference must be one of {', '.join(REFERENCES)}, got {reference!r}")
    ort = reference == "onnxruntime" and not timing_only
    # onnxruntime reads the model's file: a zoo model's is written to a temporary directory
    with tempfile.TemporaryDirectory(prefix="tvm_cim_") if ort and spec.startswith("zoo:") \
            else contextlib.nullcontext() as scratch:
        with compiled_heap():
            return _evaluate(spec, hw, strategy, seed, calib_samples, inputs_path, bitwise, timing_only, hw_name,
                             max_error, nonideal, batch, reference, ort, scratch)


def _evaluate(spec, hw, strategy, seed, calib_samples, inputs_path, bitwise, timing_only, hw_name, max_error,
              nonideal, batch, reference, ort, scratch) -> tuple[dict, list, object]:
    if int(batch) < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    t0, c0 = time.perf_counter(), time.process_time()
    model = load_onnx(spec, seed=seed)
    mod, shapes, dtypes = import_onnx(model, spec)
    ort_model = None  # --reference onnxruntime: the model's file (a zoo model's saved to a temporary one)
    if ort:
        ort_model = spec
        if scratch is not None:
            ort_model = os.path.join(scratch, "model.onnx")
            # weights as external data: onnxruntime maps the file rather than copying it (VGG-19: 0.65 GB
            # more at the reference instead of 1.0 GB)
            onnx.save(model, ort_model, save_as_external_data=True, all_tensors_to_one_file=True,
                      location="weights.bin", size_threshold=1024)
    model = without_weights(model)  # the module holds the weights; the graph still names operators and outputs
    inputs = model_inputs(inputs_path, shapes, dtypes, seed)
    t1, c1 = time.perf_counter(), time.process_time()
    ex, info = _compile(mod, hw, strategy, seed, calib_samples, max_error, build=not timing_only)
    settle()  # compilation's garbage collected, the compiled programs out of later collections
    t2, c2 = time.perf_counter(), time.process_time()
    phases = last_compile_phases()
    order = list(shapes)
    outs, ref = [], []
    if timing_only:
        stats, _ = R.simulate_timing(info, schedule=False)  # build_report schedules the timeline
    else:
        runtime.reset()
        runtime.set_options(exact_shortcut=_SHORTCUT[bitwise], nonideal=nonideal)
        # one collector pause over all regions (each region's run pauses it too; its scan then runs once)
        with runtime.collect() as stats, runtime.progress(len(info.programs)), gc_paused():
            outs = run_vm(ex, inputs, order)
    t3, c3 = time.perf_counter(), time.process_time()
    if not timing_only:
        ex = None  # the executable and the simulated chips' crossbars are freed before the reference runs
        runtime.reset()
        if ort_model is not None:
            ref = onnxruntime_outputs(ort_model, inputs, workers_default())
        else:
            ref = reference_outputs(mod, inputs, order)
    t4, c4 = time.perf_counter(), time.process_time()
    rep = R.build_report(info, stats, hw_name or (hw if isinstance(hw, str) else info.hw.name), batch=int(batch))
    rep["model"] = spec
    if timing_only:
        rep["simulation"] = "timing only: values not computed, no comparison with the reference"
        twins = sum(1 for s in stats if s.twin_of)
        if twins:
            rep["simulation"] += (f"; {twins} of {len(stats)} regions, the same program as an earlier one but for "
                                  "their quantisation scales, took its figures (twin_of)")
    else:
        rep.update(compare(outs, ref))
        rep["reference"] = ("onnxruntime on the ONNX model" if reference == "onnxruntime"
                            else "TVM llvm build of the same float model")
        rep["simulation"] = {False: "exact shortcut where the ADC is lossless",
                             "all": "bitwise: every conversion bit-serially"}.get(
            bitwise, "bitwise: bit-serial except bitlines a bound proves unaltered by the ADC (summed exactly)")
        rep["outputs"] = {o.name: list(a.shape) for o, a in zip(model.graph.output, outs)}
    rep["onnx_ops_on_host"] = host_onnx_ops(model, CIM_ONNX_OPS, info.host_ops)
    if nonideal is not None and nonideal.active:
        rep["nonideal"] = nonideal.describe()
        rep["simulation"] += "; device non-idealities applied (see nonideal)"
    rep["timing_s"] = {"import": t1 - t0, "compile": t2 - t1, "simulate": t3 - t2, "reference": t4 - t3}
    rep["cpu_s"] = {"import": c1 - c0, "compile": c2 - c1, "simulate": c3 - c2, "reference": c4 - c3}
    rep["compile_phases_s"] = phases  # per CIM pass: wall and CPU seconds
    return rep, outs, model


def _compile(mod, hw, strategy: str, seed: int, calib_samples: int, max_error, build: bool = True):
    """``(executable, CompileInfo)`` of a model for a preset (``relax.build``) or a description (``offload``)."""
    with calibration(samples=calib_samples, seed=seed + 1), scheduling(strategy), accuracy_budget(max_error):
        if isinstance(hw, str):
            ex = relax.build(mod, target=register_hardware("cim", hw))
            return ex, last_compile_info()
        lowered, info = offload(mod, hw)
        return (relax.build(lowered, target="llvm") if build else None), info


def compile_only(spec: str, hw, strategy: str, *, seed: int = 0, calib_samples: int = 1,
                 max_error: float | None = None) -> tuple[dict, object]:
    """Compile a model for a chip as :func:`evaluate` does, without simulating it; the compile times.

    Parameters
    ----------
    spec, hw, strategy, seed, calib_samples, max_error
        As for :func:`evaluate`.

    Returns
    -------
    report : dict
        ``model``, ``hw``, ``strategy``, ``regions``, ``segments``, ``timing_s`` and ``cpu_s``
        (``import``, ``compile``: wall and CPU seconds, calibration included) and
        ``compile_phases_s`` (wall and CPU seconds of every CIM pass).
    info : tvm_cim.compiler.transform.CompileInfo
        What the passes decided (programs, placement).
    """
    t0, c0 = time.perf_counter(), time.process_time()
    mod, _, _ = import_onnx(load_onnx(spec, seed=seed), spec)
    t1, c1 = time.perf_counter(), time.process_time()
    _, info = _compile(mod, hw, strategy, seed, calib_samples, max_error)
    t2, c2 = time.perf_counter(), time.process_time()
    rep = {"model": spec, "hw": hw if isinstance(hw, str) else info.hw.name, "strategy": strategy,
           "regions": len(info.programs), "segments": info.chip_map.segments if info.chip_map is not None else None,
           "timing_s": {"import": t1 - t0, "compile": t2 - t1}, "cpu_s": {"import": c1 - c0, "compile": c2 - c1},
           "compile_phases_s": last_compile_phases()}
    return rep, info

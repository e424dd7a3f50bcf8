"""Sweeps over bank-level PIM designs (``python -m tvm_pim sweep``): the evaluation of one point.

The grid, Ray, the cache, the table and the plots are shared with the CIM
backend (:mod:`tvm_cim.common.sweep`).  A PIM point's ``model`` is a kernel
(``gemv:b=1,m=1,n=4096,k=4096``, as ``tune --kernel`` takes it: its draft is
chosen by the point's ``strategy`` and timed on the simulator, beside the GPU
roofline) or a model (ONNX file or ``zoo:NAME``: compiled, simulated
functionally and compared with the float reference), on a preset whose keys
may be overridden (``dram.timing.tccd_l=2,4``, ``system.stacks=1,5``).
"""

from __future__ import annotations

import time

from tvm import relax

from tvm_cim.common import onnx_io
from tvm_cim.common.hardware import load
from tvm_cim.common.report import add_outputs, run_with_reference
from tvm_cim.common.sweep import Point, with_overrides

from . import report, runtime
from .compiler.kernels import KINDS
from .cost.host import kernel_time
from .hardware.view import PimView
from .offload import offload, offload_options
from .search.strategy import choose
from .simulator.engine import Simulator
from .workloads import parse_kernel

FIGURES = ("latency_ns", "energy_pj", "gpu_latency_ns", "speedup_over_gpu", "cosine", "max_abs_err")


def is_kernel(model: str) -> bool:
    """Whether a sweep's ``model`` value names a PIM kernel (``KIND:k=v,...``) rather than a model."""
    return model.partition(":")[0] in KINDS


def evaluate_point(point: Point) -> dict:
    """Time one kernel (or compile and run one model) on one device; the figures, flat.

    The point's options: ``strategy`` (draft choice, default ``auto``), and for
    models ``resident`` (``+``-separated graph inputs kept in PIM memory),
    ``policy`` and ``seed``.
    """
    opts = point.options
    view = PimView(with_overrides(load(point.hw, kind="pim"), point.hw_overrides))
    strategy = str(opts.get("strategy", "auto"))
    if is_kernel(point.model):
        spec = parse_kernel(point.model)
        t0 = time.perf_counter()
        ch = choose(spec, view, strategy)
        res = Simulator(view.hw).run(ch.stream, functional=False)
        gpu = kernel_time(view, spec).ns
        return {"latency_ns": res.latency_ns, "energy_pj": res.energy_pj, "gpu_latency_ns": gpu,
                "speedup_over_gpu": gpu / res.latency_ns, "draft": str(ch.draft), "chosen_by": ch.strategy,
                "rearrangement_ns": res.rearrangement_ns, "compute_ns": res.compute_ns,
                "choose_s": time.perf_counter() - t0}
    seed = int(opts.get("seed", 0))
    model = onnx_io.load_onnx(point.model, seed=seed)
    mod, shapes, dtypes = onnx_io.import_onnx(model, point.model)
    inputs = onnx_io.model_inputs(None, shapes, dtypes, seed)
    resident = tuple(r for r in str(opts.get("resident", "")).split("+") if r)
    with offload_options(strategy=strategy, policy=str(opts.get("policy", "cost")), resident=resident):
        lowered, info = offload(mod, view.hw)
    outs, stats, ref, _ = run_with_reference(relax.build(lowered, target="llvm"), mod, inputs, list(shapes),
                                            runtime.collect)
    rep = add_outputs(report.build_report(info, stats, point.hw), point.model, model, outs, ref, "llvm")
    return {k: rep[k] for k in FIGURES if k in rep}

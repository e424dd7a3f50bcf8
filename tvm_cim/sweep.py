"""Sweeps over CIM designs (``python -m tvm_cim sweep``): the evaluation of one point.

The grid, Ray, the cache, the table and the plots are shared with the PIM
backend (:mod:`tvm_cim.common.sweep`); a CIM point is a model compiled with a
strategy for a preset whose keys may be overridden, simulated (fully, or
timing only) and reported::

    from tvm_cim.common import sweep
    points = [sweep.Point(v) for v in sweep.grid({"model": ["zoo:resnet18?image_size=32"],
                                                  "hw": ["prime", "isaac"], "strategy": ["none", "cim-mlc"],
                                                  "crossbar.rows": [128, 256]})]
    rows = sweep.run(points, "tvm_cim.sweep:evaluate_point", "cim", "sweep/cache")
"""

from __future__ import annotations

from .common import hardware
from .common.sweep import Point, with_overrides
from .compiler import strategies
from .evaluate import evaluate

FIGURES = ("latency_ns", "latency_cycles", "energy_pj", "average_power_mw", "peak_power_mw", "cosine",
           "max_abs_err")


def evaluate_point(point: Point) -> dict:
    """Compile and simulate one point; the report's figures, flat.

    The point's options: ``strategy`` (default ``cim-mlc``), ``timing_only``,
    ``seed``, ``calib_samples``, ``reference`` (``tvm`` or ``onnxruntime``, as ``run --reference``).
    """
    opts = point.options
    hw = with_overrides(hardware.load(point.hw, kind="cim"), point.hw_overrides)
    strategy = str(opts.get("strategy", strategies.DEFAULT))
    rep, _, _ = evaluate(point.model, hw, strategy, seed=int(opts.get("seed", 0)),
                         calib_samples=int(opts.get("calib_samples", 1)),
                         timing_only=bool(opts.get("timing_only", False)), hw_name=point.hw,
                         reference=str(opts.get("reference", "tvm")))
    row = {k: rep[k] for k in FIGURES if k in rep}
    row["segments"] = rep["mapping"]["segments"]
    row["crossbars_used"] = rep["utilisation"]["crossbars_used"]
    row["estimate_ns"] = rep["schedule"]["estimate_ns"]
    row["regions"] = len(rep["regions"])
    row["compile_s"] = rep["timing_s"]["compile"]
    row["simulate_s"] = rep["timing_s"]["simulate"]
    row["simulation"] = rep["simulation"]
    return row

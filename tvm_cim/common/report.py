"""Report plumbing both backends share: comparison with a reference, units, output files.

The report itself (what a run measured) is built by each backend
(:mod:`tvm_cim.report`, :mod:`tvm_pim.report`); this module compares outputs
with a float reference (TVM's ``llvm`` build, or onnxruntime), formats quantities and writes the report's
JSON, the outputs and the terminal summary.
"""

from __future__ import annotations

import json
import resource
import time
from pathlib import Path

import numpy as np
import tvm
from tvm import relax

from .cli import UserError
from .onnx_io import outputs_list


def compare(outputs: list[np.ndarray], reference: list[np.ndarray]) -> dict:
    """Max absolute error and cosine similarity of outputs against a reference."""
    a = np.concatenate([np.asarray(o, np.float64).ravel() for o in outputs])
    b = np.concatenate([np.asarray(r, np.float64).ravel() for r in reference])
    denom = float(np.linalg.norm(a) * np.linalg.norm(b))
    cos = float(a @ b / denom) if denom > 0 else (1.0 if np.array_equal(a, b) else 0.0)
    return {
        "max_abs_err": float(np.abs(a - b).max(initial=0.0)),
        "cosine": cos,
        "ref_max_abs": float(np.abs(b).max(initial=0.0)),
    }


def run_vm(ex, inputs: dict[str, np.ndarray], order: list[str]) -> list[np.ndarray]:
    """Run an executable's ``main`` on named inputs (in graph order); outputs flattened.

    With TVM's naive allocator: the pooled one keeps every buffer it handed out for the rest of the process
    (VGG-19's float reference left 390 MB behind)."""
    vm = relax.VirtualMachine(ex, tvm.cpu(), memory_cfg="naive")
    return outputs_list(vm["main"](*[tvm.runtime.tensor(inputs[k]) for k in order]))


def reference_outputs(mod: tvm.IRModule, inputs: dict[str, np.ndarray], order: list[str]) -> list[np.ndarray]:
    """The float reference: TVM's ``llvm`` build of the same Relax module."""
    return run_vm(relax.build(mod, target="llvm"), inputs, order)


#: The float references a run may compare against (``--reference``): TVM's ``llvm`` build of the imported
#: Relax module (default), or onnxruntime on the ONNX model itself (an implementation that shares nothing with
#: the compiler, not even the importer; about 4x faster on VGG-19, whose untuned TVM kernels take 30 s).
REFERENCES = ("tvm", "onnxruntime")


def onnxruntime_outputs(model, inputs: dict[str, np.ndarray], threads: int) -> list[np.ndarray]:
    """The float reference by onnxruntime: the ONNX model (with its weights; a ``ModelProto`` or the path of
    its file, which onnxruntime reads without a Python copy) on the named inputs, outputs in graph order.

    Raises
    ------
    UserError
        onnxruntime is not installed, or cannot run the model.
    """
    try:
        import onnxruntime as ort  # optional: only this reference needs it
    except ImportError:
        raise UserError("--reference onnxruntime needs the onnxruntime package (pip install onnxruntime); "
                        "or use --reference tvm") from None
    so = ort.SessionOptions()
    so.intra_op_num_threads = int(threads)
    so.add_session_config_entry("session.disable_prepacking", "1")  # one run: no packed copies of the weights
    src = str(model) if isinstance(model, (str, Path)) else model.SerializeToString()
    try:
        sess = ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
        del src
        return [np.asarray(y) for y in sess.run(None, {i.name: inputs[i.name] for i in sess.get_inputs()})]
    except Exception as e:  # onnxruntime's own errors (unsupported operator or opset, bad graph)
        raise UserError(f"onnxruntime cannot run the model: {type(e).__name__}: {e}; use --reference tvm") from None


def run_with_reference(ex, mod: tvm.IRModule, inputs: dict[str, np.ndarray], order: list[str], collect):
    """Run an executable while a backend collects its statistics, then TVM's float reference.

    Parameters
    ----------
    ex : relax.Executable
    mod : tvm.IRModule
        The float module the executable was built from.
    inputs : dict
        Graph input name -> array.
    order : list of str
        Graph input names in order.
    collect : callable
        The backend's ``runtime.collect`` (a context manager yielding a list).

    Returns
    -------
    outs, stats, ref : list
        Outputs, collected statistics and reference outputs.
    seconds : dict
        Wall time of ``simulate`` and ``reference``.
    """
    t0 = time.perf_counter()
    with collect() as stats:
        outs = run_vm(ex, inputs, order)
    t1 = time.perf_counter()
    ref = reference_outputs(mod, inputs, order)
    return outs, stats, ref, {"simulate": t1 - t0, "reference": time.perf_counter() - t1}


def add_outputs(rep: dict, spec: str, model, outs: list[np.ndarray], ref: list[np.ndarray], reference: str) -> dict:
    """Record a run's model, its comparison with the reference (:func:`compare`) and output shapes in a report."""
    rep["model"] = spec
    rep.update(compare(outs, ref))
    rep["reference"] = reference
    rep["outputs"] = {o.name: list(a.shape) for o, a in zip(model.graph.output, outs)}
    return rep


def pareto(points: np.ndarray) -> np.ndarray:
    """Indices of the points not dominated in both coordinates (lower is better), sorted by the first."""
    order = np.lexsort((points[:, 1], points[:, 0]))
    front, best = [], np.inf
    for i in order:
        if points[i, 1] < best:
            front.append(i)
            best = points[i, 1]
    return np.asarray(front, dtype=int)


def si(v: float, unit: str) -> str:
    """A quantity with an SI prefix and three significant digits (``1.57 ms``)."""
    for f, p in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1, ""), (1e-3, "m"), (1e-6, "u"), (1e-9, "n")):
        if abs(v) >= f:
            return f"{v / f:.3g} {p}{unit}"
    return f"{v:.3g} {unit}"


def write_json(rep: dict, path: str | Path) -> None:
    """Write a report as indented JSON."""
    Path(path).write_text(json.dumps(rep, indent=2))


def finish_run(rep: dict, summary, args, model, outs: list, emitted: str) -> int:
    """Print the summary of a run, write its JSON report, outputs and emitted code paths.

    Parameters
    ----------
    rep : dict
        The report (``peak_rss_mb`` is added).
    summary : callable
        ``rep -> str``, the terminal summary.
    args : argparse.Namespace
        With ``report``, ``outputs`` and ``emit``.
    model : onnx.ModelProto
        For the output names.
    outs : list of numpy.ndarray
    emitted : str
        What ``--emit`` wrote (``program`` or ``streams``).

    Returns
    -------
    int
        0.
    """
    rep["peak_rss_mb"] = peak_rss_mb()
    print(summary(rep))
    if args.report:
        write_json(rep, args.report)
        print(f"report        {args.report}")
    if args.outputs:
        np.savez(args.outputs, **{o.name: a for o, a in zip(model.graph.output, outs)})
        print(f"outputs       {args.outputs}")
    if getattr(args, "emit", None):
        print(f"{emitted:13s} {args.emit}")
    return 0


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MB (Linux: ``ru_maxrss`` is in KB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def finish_benchmark(res: dict, plots: list[str], json_path: str | None, t0: float) -> int:
    """End a benchmark script: list its plots, write its results as JSON, print its wall time.

    Parameters
    ----------
    res : dict
        The results (``wall_s`` is added).
    plots : list of str
        Files the script drew.
    json_path : str, optional
        Where to write ``res`` (parent folders are created).
    t0 : float
        ``time.perf_counter()`` at the start.

    Returns
    -------
    int
        0, the script's exit code.
    """
    res["wall_s"] = time.perf_counter() - t0
    for f in plots:
        print(f"plot          {f}")
    if json_path:
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(json.dumps(res, indent=1))
        print(f"json          {json_path}")
    print(f"wall time     {res['wall_s']:.0f}s")
    return 0

"""Command line: ``python -m tvm_cim run MODEL.onnx --hw NAME --report out.json``.

Sub-commands
------------
run      compile an ONNX model (or ``zoo:<name>``) for a CIM chip, simulate it,
         compare with the float reference (TVM llvm build), print a summary
         and write a JSON report.
zoo      export a model of the built-in zoo to ONNX.
presets  list the hardware presets (or describe the schema with --schema).

Exit codes: 0 success, 2 bad input (unknown hardware, malformed hardware
file, unreadable model, unsupported model), 1 internal error.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np


class UserError(Exception):
    """Bad input: reported as one clear message with exit code 2."""


# ----------------------------------------------------------------------------- model loading
def load_onnx(spec: str, seed: int = 0):
    """Read an ONNX model from a file, or build ``zoo:<name>`` from the zoo."""
    import onnx

    if spec.startswith("zoo:"):
        from .models import zoo

        name, _, kv = spec[4:].partition("?")
        kwargs = {}
        for item in filter(None, kv.split(",")):
            k, eq, v = item.partition("=")
            try:
                if not eq:
                    raise ValueError("expected key=value")
                kwargs[k] = int(v)
            except ValueError as e:
                raise UserError(f"zoo model option '{item}' in '{spec}': {e} (options are integers, e.g. "
                                "zoo:bert_layer?seq_len=128,hidden=768)") from None
        try:
            return zoo.build_model(name, seed=seed, **kwargs)
        except (ValueError, TypeError) as e:
            raise UserError(str(e)) from None
    path = Path(spec)
    if not path.is_file():
        raise UserError(f"model file '{spec}' does not exist (or use zoo:<name>, e.g. zoo:resnet18)")
    try:
        model = onnx.load(str(path))
    except Exception as e:  # protobuf DecodeError and friends
        raise UserError(f"model file '{spec}' is not a readable ONNX model: {type(e).__name__}: {e}") from None
    if not model.graph.node:
        raise UserError(f"model file '{spec}' is not a readable ONNX model: the graph has no nodes")
    return model


def import_onnx(model, spec: str):
    """ONNX -> Relax with static shapes; symbolic dimensions become 1."""
    import onnx
    from tvm.relax.frontend.onnx import from_onnx
    from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map

    known = _get_convert_map()
    unsupported = sorted({n.op_type for n in model.graph.node if n.op_type not in known})
    if unsupported:
        raise UserError(
            f"model '{spec}' uses ONNX operators that TVM's ONNX frontend cannot import: "
            f"{', '.join(unsupported)}. Operators it imports but a crossbar cannot run are "
            "executed on the host automatically; these cannot be imported at all."
        )
    inits = {i.name for i in model.graph.initializer}
    shapes, dtypes = {}, {}
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        t = inp.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1 for d in t.shape.dim]
        shapes[inp.name] = dims
        dtypes[inp.name] = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).name
    try:
        mod = from_onnx(model, shape_dict=shapes, dtype_dict=dtypes)
    except Exception as e:
        raise UserError(f"model '{spec}' could not be imported: {type(e).__name__}: {e}") from None
    return mod, shapes, dtypes


def onnx_host_ops(model, host_ops: dict | None = None) -> list[str]:
    """ONNX operator types that run on the host.

    Parameters
    ----------
    model : onnx.ModelProto
    host_ops : dict, optional
        The Relax operators the build left on the host
        (``CompileInfo.host_ops``).  With it, BatchNormalization folded into
        convolutions is not listed, and Conv / Gemm / MatMul are listed when
        some of them stayed on the host.

    Returns
    -------
    list of str
    """
    cim_capable = {"Conv": ("relax.nn.conv2d",), "Gemm": ("relax.matmul", "relax.linear"),
                   "MatMul": ("relax.matmul",), "BatchNormalization": ("relax.nn.batch_norm",)}
    types = {n.op_type for n in model.graph.node}
    if host_ops is None:
        return sorted(t for t in types if t not in cim_capable or t == "BatchNormalization")
    left = set(host_ops)
    return sorted(t for t in types if t not in cim_capable or any(r in left for r in cim_capable[t]))


# ----------------------------------------------------------------------------- run
def model_inputs(path: str | None, shapes: dict, dtypes: dict, seed: int) -> dict[str, np.ndarray]:
    """The graph inputs of a run: from an ``.npz`` keyed by input name, or seeded random normals.

    Raises
    ------
    UserError
        The file is unreadable, lacks an input or has one of the wrong shape.
    """
    if not path:
        rng = np.random.default_rng(seed)
        return {k: rng.standard_normal(shapes[k]).astype(dtypes[k]) for k in shapes}
    try:
        data = dict(np.load(path))
    except Exception as e:
        raise UserError(f"inputs file '{path}' is not a readable .npz: {e}") from None
    missing = sorted(set(shapes) - set(data))
    if missing:
        raise UserError(f"inputs file '{path}' lacks {missing}; the model's inputs are {sorted(shapes)}")
    inputs = {}
    for k in shapes:
        a = np.asarray(data[k], dtype=dtypes[k])
        if list(a.shape) != list(shapes[k]):
            raise UserError(f"input '{k}' has shape {list(a.shape)}, the model expects {shapes[k]}")
        inputs[k] = a
    return inputs


def outputs_list(res) -> list:
    """The numpy arrays of a VM result (a tensor or nested tuples of them), flattened."""
    import tvm

    if isinstance(res, tvm.runtime.Tensor):
        return [res.numpy()]
    out = []
    for r in res:
        out += outputs_list(r)
    return out


def cmd_run(args) -> int:
    import tvm
    from tvm import relax

    import tvm_cim

    from . import report as R
    from .runtime import collect

    t0 = time.perf_counter()
    try:
        tvm_cim.load(args.hw, kind="cim")  # validate early: bad hardware exits 2 before any work
    except (tvm_cim.UnknownHardwareError, tvm_cim.HardwareDescriptionError) as e:
        raise UserError(str(e)) from None
    model = load_onnx(args.model, seed=args.seed)
    mod, shapes, dtypes = import_onnx(model, args.model)

    inputs = model_inputs(args.inputs, shapes, dtypes, args.seed)

    target = tvm_cim.target.register_hardware("cim", args.hw)
    t1 = time.perf_counter()
    with tvm_cim.calibration(samples=args.calib_samples, seed=args.seed + 1), tvm_cim.scheduling(args.strategy):
        ex = relax.build(mod, target=target)
    info = tvm_cim.last_compile_info()
    t2 = time.perf_counter()
    if args.emit:
        Path(args.emit).write_text(info.program_text())

    order = list(shapes)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    tvm_cim.runtime.reset()
    tvm_cim.runtime.set_options(exact_shortcut=not args.bitwise)
    with collect() as stats:
        outs = outputs_list(vm["main"](*[tvm.runtime.tensor(inputs[k]) for k in order]))
    t3 = time.perf_counter()

    ref_ex = relax.build(mod, target="llvm")
    ref = outputs_list(relax.VirtualMachine(ref_ex, tvm.cpu())["main"](*[tvm.runtime.tensor(inputs[k]) for k in order]))
    t4 = time.perf_counter()

    rep = R.build_report(info, stats, args.hw)
    rep["model"] = args.model
    rep.update(R.compare(outs, ref))
    rep["reference"] = "TVM llvm build of the same float model"
    rep["onnx_ops_on_host"] = onnx_host_ops(model, info.host_ops)
    rep["outputs"] = {o.name: list(a.shape) for o, a in zip(model.graph.output, outs)}
    rep["timing_s"] = {
        "import": t1 - t0,
        "compile": t2 - t1,
        "simulate": t3 - t2,
        "reference": t4 - t3,
    }
    rep["simulation_path"] = "bitwise" if args.bitwise else "exact shortcut where the ADC is lossless"
    return finish_run(rep, R.summary, args, model, outs, "program")


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
    rep["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(summary(rep))
    if args.report:
        Path(args.report).write_text(json.dumps(rep, indent=2))
        print(f"report        {args.report}")
    if args.outputs:
        np.savez(args.outputs, **{o.name: a for o, a in zip(model.graph.output, outs)})
        print(f"outputs       {args.outputs}")
    if args.emit:
        print(f"{emitted:13s} {args.emit}")
    return 0


def cmd_zoo(args) -> int:
    from .models import zoo

    if args.list or not args.name:
        print("\n".join(sorted(zoo.MODELS)))
        return 0
    try:
        path = zoo.export(args.name, args.output or f"{args.name}.onnx", seed=args.seed)
    except ValueError as e:
        raise UserError(str(e)) from None
    print(path)
    return 0


def cmd_presets(args) -> int:
    from .hardware import loader

    if args.schema:
        print(loader.describe_schema(args.schema))
        return 0
    for kind in ("cim", "pim"):
        for name in loader.known_presets(kind):
            hw = loader.load(name)
            print(f"{kind}  {name:12s} {hw.meta.description}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m tvm_cim``."""
    p = argparse.ArgumentParser(prog="python -m tvm_cim", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    r = sub.add_parser("run", help="compile, simulate and report a model")
    r.add_argument("model", help="ONNX file, or zoo:<name> (e.g. zoo:resnet18)")
    r.add_argument("--hw", default="prime", help="hardware preset name or .toml file (default: prime)")
    r.add_argument("--report", help="write the JSON report here")
    r.add_argument("--inputs", help=".npz of inputs keyed by graph input name (default: seeded random)")
    r.add_argument("--outputs", help="save outputs to this .npz, keyed by graph output name")
    r.add_argument("--emit", help="write the meta-operator program text here")
    r.add_argument("--seed", type=int, default=0, help="seed of random inputs, zoo weights and calibration")
    r.add_argument(
        "--strategy",
        default="cim-mlc",
        choices=["none", "greedy", "puma", "cim-mlc"],
        help="scheduling: cim-mlc (multi-level duplication + pipelines, default), greedy "
        "(Poly-Schedule's greedy duplication, batch pipeline), puma (inter-layer pipeline only), none",
    )
    r.add_argument("--calib-samples", type=int, default=1, help="seeded calibration samples (default 1)")
    r.add_argument(
        "--bitwise",
        action="store_true",
        help="simulate every MVM bit-serially even where the ADC provably cannot alter a conversion "
        "(same results, slower; by default such MVMs are computed as one exact integer product)",
    )
    r.set_defaults(func=cmd_run)

    z = sub.add_parser("zoo", help="export a zoo model to ONNX")
    z.add_argument("name", nargs="?")
    z.add_argument("-o", "--output")
    z.add_argument("--seed", type=int, default=0)
    z.add_argument("--list", action="store_true")
    z.set_defaults(func=cmd_zoo)

    s = sub.add_parser("presets", help="list hardware presets")
    s.add_argument("--schema", choices=["cim", "pim"], help="describe every key of the hardware schema")
    s.set_defaults(func=cmd_presets)

    args = p.parse_args(argv)
    try:
        return args.func(args)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

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
import time
from pathlib import Path

from tvm import relax

from . import report as R
from . import runtime
from .common import hardware, zoo
from .common.cli import UserError, add_run_io, dispatch, load_hardware
from .common.onnx_io import host_onnx_ops, import_onnx, load_onnx, model_inputs
from .common.report import finish_run, reference_outputs, run_vm
from .common.target import register_hardware
from .compiler import strategies
from .compiler.accuracy import DEFAULT_MAX_ERROR
from .compiler.transform import accuracy_budget, calibration, last_compile_info, scheduling

# ONNX operators a crossbar region can run, and the Relax operators they become
# (BatchNormalization is folded into the convolution before it).
CIM_ONNX_OPS = {"Conv": ("relax.nn.conv2d",), "Gemm": ("relax.matmul", "relax.linear"),
                "MatMul": ("relax.matmul",), "BatchNormalization": ("relax.nn.batch_norm",)}


def cmd_run(args) -> int:
    t0 = time.perf_counter()
    load_hardware(args.hw, "cim")  # validate early: bad hardware exits 2 before any work
    model = load_onnx(args.model, seed=args.seed)
    mod, shapes, dtypes = import_onnx(model, args.model)
    inputs = model_inputs(args.inputs, shapes, dtypes, args.seed)
    target = register_hardware("cim", args.hw)
    t1 = time.perf_counter()
    if args.max_error is not None and not args.max_error >= 0:
        raise UserError(f"--max-error must be >= 0, got {args.max_error}")
    with calibration(samples=args.calib_samples, seed=args.seed + 1), scheduling(args.strategy), \
            accuracy_budget(args.max_error):
        ex = relax.build(mod, target=target)
    info = last_compile_info()
    t2 = time.perf_counter()
    if args.emit:
        Path(args.emit).write_text(info.program_text())
    order = list(shapes)
    runtime.reset()
    runtime.set_options(exact_shortcut=not args.bitwise)
    with runtime.collect() as stats:
        outs = run_vm(ex, inputs, order)
    t3 = time.perf_counter()
    ref = reference_outputs(mod, inputs, order)
    t4 = time.perf_counter()

    rep = R.build_report(info, stats, args.hw)
    rep["model"] = args.model
    rep.update(R.compare(outs, ref))
    rep["reference"] = "TVM llvm build of the same float model"
    rep["onnx_ops_on_host"] = host_onnx_ops(model, CIM_ONNX_OPS, info.host_ops)
    rep["outputs"] = {o.name: list(a.shape) for o, a in zip(model.graph.output, outs)}
    rep["timing_s"] = {"import": t1 - t0, "compile": t2 - t1, "simulate": t3 - t2, "reference": t4 - t3}
    rep["simulation_path"] = "bitwise" if args.bitwise else "exact shortcut where the ADC is lossless"
    return finish_run(rep, R.summary, args, model, outs, "program")


def cmd_zoo(args) -> int:
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
    if args.schema:
        print(hardware.describe_schema(args.schema))
        return 0
    for kind in ("cim", "pim"):
        for name in hardware.known_presets(kind):
            hw = hardware.load(name)
            print(f"{kind}  {name:12s} {hw.meta.description}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m tvm_cim``."""
    p = argparse.ArgumentParser(prog="python -m tvm_cim", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    r = sub.add_parser("run", help="compile, simulate and report a model")
    r.add_argument("model", help="ONNX file, or zoo:<name> (e.g. zoo:resnet18)")
    r.add_argument("--hw", default="prime", help="hardware preset name or .toml file (default: prime)")
    add_run_io(r)
    r.add_argument("--emit", help="write the meta-operator program text here")
    r.add_argument("--strategy", default=strategies.DEFAULT, choices=strategies.names(),
                   help="scheduling: " + "; ".join(f"{s.name}: {s.doc}" for s in strategies.all_strategies()))
    r.add_argument("--calib-samples", type=int, default=1, help="seeded calibration samples (default 1)")
    r.add_argument("--max-error", type=float, default=None,
                   help="error budget: largest 1 - cosine against the float reference on the calibration samples; "
                   "per layer the fastest crossbar mapping (rows per read step, programmed ADC range) within it "
                   f"(default {DEFAULT_MAX_ERROR}; 1 = fastest mappings, no constraint)")
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
    s.add_argument("--schema", choices=sorted(hardware.KINDS), help="describe every key of the hardware schema")
    s.set_defaults(func=cmd_presets)
    return dispatch(p, argv)

"""Command line: ``python -m tvm_cim run MODEL.onnx --hw NAME --report out.json``.

Sub-commands
------------
run      compile an ONNX model (or ``zoo:<name>``) for a CIM chip, simulate it,
         compare with the float reference (TVM llvm build), print a summary
         and write a JSON report.
compile  compile only: the compile time (wall and CPU, per pass), no simulation.
sweep    compile and simulate a grid of models, presets, strategies and hardware keys
         on Ray; a table, plots and a cache.
zoo      export a model of the built-in zoo to ONNX.
presets  list the hardware presets (or describe the schema with --schema).

Exit codes: 0 success, 2 bad input (unknown hardware, malformed hardware
file, unreadable model, unsupported model), 1 internal error.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from . import report as R
from .common import hardware, sweep, zoo
from .common.cli import UserError, add_run_io, dispatch, load_hardware
from .common.onnx_io import load_onnx  # noqa: F401  (part of the CLI's API: zoo specs)
from .common.report import REFERENCES, finish_run, peak_rss_mb, write_json
from .compiler import dataflow, strategies
from .compiler.accuracy import DEFAULT_MAX_ERROR
from .compiler.transform import last_compile_info
from .evaluate import compile_only, evaluate
from .hardware.crossbar import Nonideal


def _check_workers() -> None:
    """``$TVM_CIM_WORKERS`` (the dataflow solve's processes, the numerics' threads) checked before any work:
    exit 2 with its message."""
    try:
        dataflow.workers_default()
    except ValueError as e:
        raise UserError(str(e)) from None


def cmd_run(args) -> int:
    load_hardware(args.hw, "cim")  # validate early: bad hardware exits 2 before any work
    _check_workers()
    if args.max_error is not None and not args.max_error >= 0:
        raise UserError(f"--max-error must be >= 0, got {args.max_error}")
    if args.batch < 1:
        raise UserError(f"--batch must be >= 1, got {args.batch}")
    rep, outs, model = evaluate(args.model, args.hw, args.strategy, seed=args.seed, calib_samples=args.calib_samples,
                                inputs_path=args.inputs, bitwise=args.bitwise, timing_only=args.timing_only,
                                max_error=args.max_error, nonideal=_nonideal(args.nonideal), batch=args.batch,
                                reference=args.reference)
    if args.emit:
        Path(args.emit).write_text(last_compile_info().program_text())
    if args.timing_only and args.outputs:
        raise UserError("--outputs needs the values: drop --timing-only")
    return finish_run(rep, R.summary, args, model, outs, "program")


def cmd_compile(args) -> int:
    load_hardware(args.hw, "cim")
    _check_workers()
    rep, info = compile_only(args.model, args.hw, args.strategy, seed=args.seed, calib_samples=args.calib_samples,
                             max_error=args.max_error)
    rep["peak_rss_mb"] = peak_rss_mb()
    if args.emit:
        Path(args.emit).write_text(info.program_text())
    t, c = rep["timing_s"], rep["cpu_s"]
    print(f"{args.model} on {rep['hw']} ({args.strategy}): {rep['regions']} regions, {rep['segments']} segments; "
          f"compile {t['compile']:.2f} s wall, {c['compile']:.2f} s CPU (import {t['import']:.2f} s)")
    for name, ph in rep["compile_phases_s"].items():
        print(f"  {name:20s} {ph['wall_s']:8.2f} s wall {ph['cpu_s']:8.2f} s CPU")
    if args.report:
        write_json(rep, args.report)
    return 0


def _nonideal(text):
    if not text:
        return None
    try:
        return Nonideal.parse(text)
    except ValueError as e:
        raise UserError(f"--nonideal: {e}") from None


def cmd_sweep(args) -> int:
    return sweep.cli_sweep(args, "cim", "tvm_cim.sweep:evaluate_point",
                           {"model": ["zoo:resnet18?image_size=32"], "hw": ["prime"], "strategy": [strategies.DEFAULT]},
                           ["latency_ns", "energy_pj", "cosine", "segments"],
                           {k: v for k, v in (("timing_only", args.timing_only), ("reference", args.reference))
                            if v and v != "tvm"} or None)


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
    r.add_argument("--batch", type=int, default=1,
                   help="inputs run through the compiled pipeline on one timeline: the report gives latency_ns "
                   "(one input, first in to last out) and throughput_per_s (steady state over the batch)")
    r.add_argument("--calib-samples", type=int, default=1, help="seeded calibration samples (default 1)")
    r.add_argument("--max-error", type=float, default=None,
                   help="error budget: largest 1 - cosine against the float reference on the calibration samples; "
                   "per layer the fastest crossbar mapping (encodings, rows per read step, programmed ADC range) "
                   "within it "
                   f"(default {DEFAULT_MAX_ERROR}; 1 = fastest mappings, no constraint)")
    r.add_argument(
        "--bitwise",
        nargs="?",
        const="tile",
        default=False,
        choices=["tile", "all"],
        help="send every MVM through the bit-level crossbar model even where the hardware setting's ADC provably "
        "cannot alter a conversion (same results, slower; by default such MVMs are one exact integer product). "
        "'tile' (the default of --bitwise): the bitlines of a tile whose conversions a bound on its inputs proves "
        "unaltered are summed as one integer product, the others converted bit-serially; 'all': every conversion "
        "bit-serially",
    )
    r.add_argument("--timing-only", action="store_true",
                   help="skip the numerics: latency, energy, power and utilisation only (for sweeps); "
                   "no outputs, no comparison with the reference")
    r.add_argument("--reference", choices=REFERENCES, default="tvm",
                   help="the float reference the outputs are compared with: 'tvm' (TVM's llvm build of the imported "
                   "model) or 'onnxruntime' (the ONNX model itself, independent of TVM's importer; about 4x "
                   "faster on large CNNs; needs the onnxruntime package)")
    r.add_argument("--nonideal", default=None, metavar="K=V,...",
                   help="seeded device non-idealities the simulator applies (off by default; reported): "
                   "conductance=<relative sigma>,ir_drop=<attenuation per row>,adc_offset=<sigma in LSBs>,seed=<int>")
    r.set_defaults(func=cmd_run)

    c = sub.add_parser("compile", help="compile a model only (no simulation): compile time per pass")
    c.add_argument("model", help="ONNX file, or zoo:<name> (e.g. zoo:resnet18)")
    c.add_argument("--hw", default="prime", help="hardware preset name or .toml file (default: prime)")
    c.add_argument("--strategy", default=strategies.DEFAULT, choices=strategies.names())
    c.add_argument("--calib-samples", type=int, default=1, help="seeded calibration samples (default 1)")
    c.add_argument("--max-error", type=float, default=None, help="error budget (as for run)")
    c.add_argument("--seed", type=int, default=0, help="seed of zoo weights and calibration")
    c.add_argument("--report", help="write the JSON report (times per pass) here")
    c.add_argument("--emit", help="write the meta-operator program text here")
    c.set_defaults(func=cmd_compile)

    w = sweep.add_parser(sub, "cim", "prime", "compile and simulate a grid of models x presets x strategies x "
                         "hardware keys", "Each point is one compile + simulation")
    w.add_argument("--timing-only", action="store_true", help="timing-only simulation of every point (faster)")
    w.add_argument("--reference", choices=REFERENCES, default="tvm",
                   help="the float reference of every point's cosine (as for run; 'onnxruntime' is much faster "
                   "on large CNNs)")
    w.set_defaults(func=cmd_sweep)

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

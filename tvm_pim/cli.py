"""Command line: ``python -m tvm_pim run|tune|predictor ...``.

Sub-commands
------------
run        compile a model (ONNX file, ``zoo:<name>`` including the decode
           layers ``zoo:gpt_decode`` / ``zoo:llama_decode``) for a PIM device,
           simulate it, compare with the float reference (TVM llvm build),
           print a summary and write a JSON report.
tune       meta-schedule tuning of PIM kernels (given sizes, every PIM kernel
           of a model, or the paper's workloads); records go to the user's
           database (``$TVM_PIM_CACHE``, default ``~/.cache/tvm_pim``, or
           ``--database DIR``); ``--update-shipped`` refreshes the databases
           installed with the package instead (a maintainer's command).
predictor  train the coupled XGBoost predictor for a device and save it
           in the user cache, where the ``predictor`` schedule strategy finds it.
sweep      time a grid of kernels or models, presets, draft strategies and
           hardware keys on Ray; a table, plots and a cache.

Exit codes: 0 success, 2 bad input (unknown hardware, malformed hardware
file, unreadable model, bad kernel description), 1 internal error.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from tqdm import tqdm
from tvm import relax

from tvm_cim.common import onnx_io, sweep
from tvm_cim.common.cli import UserError, add_run_command, dispatch, load_hardware
from tvm_cim.common.report import add_outputs, finish_run, run_with_reference
from tvm_cim.common.target import register_hardware

from . import report, runtime
from .compiler.kernels import KINDS, KernelSpec
from .compiler.space import default_draft, enumerate_drafts
from .cost.host import kernel_time
from .cost.measure import evaluate
from .cost.predictor import OBJECTIVES, Predictor, active_samples, generate_samples
from .hardware.view import PimView
from .offload import last_compile_info, offload, offload_options
from .search import database
from .search.strategy import STRATEGIES
from .search.tuning import tune
from .sweep import is_kernel
from .workloads import default_workloads, paper_kernels, parse_kernel


def _resident(text: str | None) -> list[str]:
    return [r for r in (text or "").split(",") if r]


# ----------------------------------------------------------------------------- run
def cmd_run(args) -> int:
    """``run``: compile a model for a PIM device, simulate it, report against the float reference."""
    t0 = time.perf_counter()
    load_hardware(args.hw, "pim")  # validate early: bad hardware exits 2 before any work
    model = onnx_io.load_onnx(args.model, seed=args.seed)
    mod, shapes, dtypes = onnx_io.import_onnx(model, args.model)
    inputs = onnx_io.model_inputs(args.inputs, shapes, dtypes, args.seed)
    resident = _resident(args.resident)
    unknown = sorted(set(resident) - set(shapes))
    if unknown:
        raise UserError(f"--resident names {unknown} that are not graph inputs ({sorted(shapes)})")
    target = register_hardware("pim", args.hw)
    t1 = time.perf_counter()
    with offload_options(strategy=args.strategy, policy=args.policy, resident=resident, database=args.database):
        ex = relax.build(mod, target=target)
    info = last_compile_info()
    t2 = time.perf_counter()
    if args.emit:
        Path(args.emit).write_text(info.stream_text())
    outs, stats, ref, seconds = run_with_reference(ex, mod, inputs, list(shapes), runtime.collect)
    rep = add_outputs(report.build_report(info, stats, args.hw), args.model, model, outs, ref,
                      "TVM llvm build of the same float32 model")
    rep["strategy"], rep["policy"], rep["resident"] = args.strategy, args.policy, resident
    rep["timing_s"] = {"import": t1 - t0, "compile": t2 - t1, **seconds}
    return finish_run(rep, report.summary, args, model, outs, "streams")


# ----------------------------------------------------------------------------- tune
def model_kernels(spec: str, view: PimView, seed: int, resident=()) -> list[KernelSpec]:
    """The distinct PIM kernels of a model (every pattern match offloaded, default tiling)."""
    model = onnx_io.load_onnx(spec, seed=seed)
    mod, _, _ = onnx_io.import_onnx(model, spec)
    unknown = sorted(set(resident) - {str(v.name) for v in mod["main"].params})
    if unknown:
        raise UserError(f"--resident names {unknown} that are not graph inputs of {spec}")
    with offload_options(policy="always", strategy="default", resident=tuple(resident)):
        _, info = offload(mod, view.hw)
    out = []
    for k in info.kernels:
        if k.spec not in out and view.supports(k.spec.kind):
            out.append(k.spec)
    return out


def cmd_tune(args) -> int:
    """``tune``: meta-schedule tuning of kernels; records go to the user's, a given, or the shipped database."""
    for key in ("trials", "per_iter"):
        if getattr(args, key) <= 0:
            raise UserError(f"--{key.replace('_', '-')} must be positive")
    if args.update_shipped and args.database:
        raise UserError("--update-shipped and --database name two different places; give one")
    view = PimView(load_hardware(args.hw, "pim"))
    specs = [parse_kernel(k) for k in (args.kernel or [])]
    if args.model:
        specs += model_kernels(args.model, view, args.seed, _resident(args.resident))
    if args.paper:
        specs += [s for s in paper_kernels(view) if s not in specs]
    if not specs:
        raise UserError("nothing to tune: give --kernel KIND:k=v,..., --model MODEL and/or --paper")
    bad = [s.name for s in specs if not view.supports(s.kind)]
    if bad:
        raise UserError(f"{view.name} cannot run {', '.join(bad)} (its command set lacks the units)")
    root = database.shipped_root() if args.update_shipped else args.database
    rows = []
    t0 = time.perf_counter()
    for s in tqdm(specs, desc="tuning kernels", unit="kernel"):
        res = tune(s, view, trials=args.trials, per_iter=args.per_iter, seed=args.seed, save=not args.no_save,
                   database=root)
        _, st = enumerate_drafts(s, view)
        default_ns = evaluate(s, view, default_draft(s, view))[1]
        gpu = kernel_time(view, s).ns
        rows.append({**res.as_dict(), "default_ns": default_ns, "gpu_ns": gpu, "space": st.as_dict()})
    wall = time.perf_counter() - t0
    print("(first = the search's first measured candidate; default = the backend's fixed tiling with DCC's code optimiser)")
    print(f"{'kernel':34s} {'trials':>6s} {'first':>10s} {'best':>10s} {'gain':>6s} {'default':>10s} {'GPU':>10s}  best draft")
    for r in rows:
        print(
            f"{r['kernel'][:34]:34s} {r['trials']:6d} {r['first_candidate_ns'] / 1e3:9.2f}u {r['best_ns'] / 1e3:9.2f}u "
            f"{r['improvement']:5.2f}x {r['default_ns'] / 1e3:9.2f}u {r['gpu_ns'] / 1e3:9.2f}u  {r['best_draft']}"
        )
    where = "not saved (--no-save)" if args.no_save else str(database.user_folder(view.name, root))
    print(f"records       {where} (key {database.record_key(view)})")
    print(f"wall time     {wall:.1f}s")
    if args.report:
        Path(args.report).write_text(
            json.dumps({"hw": args.hw, "kernels": rows, "wall_s": wall, "saved_to": where,
                        "record_key": database.record_key(view)}, indent=2)
        )
        print(f"report        {args.report}")
    return 0


# ----------------------------------------------------------------------------- predictor
def cmd_predictor(args) -> int:
    """``predictor``: train the coupled XGBoost predictor of a device and save it in the user cache."""
    view = PimView(load_hardware(args.hw, "pim"))
    kinds = [k for k in KINDS if view.supports(k)]
    workloads = [w for k in kinds for w in default_workloads(view, k, args.scale)]
    t0 = time.perf_counter()
    if args.drafts <= 0 or args.trees <= 0 or args.rounds < 0 or args.per_round <= 0:
        raise UserError("--drafts, --trees and --per-round must be positive, --rounds not negative")
    samples = generate_samples(workloads, view, args.drafts, seed=args.seed)
    t1 = time.perf_counter()
    pr, samples = active_samples(lambda: Predictor(n_estimators=args.trees, seed=args.seed, objective=args.objective),
                                 samples, workloads, view, rounds=args.rounds, per_round=args.per_round)
    pr.meta.update({"device": view.name, "hw_digest": view.digest, "workloads": len(workloads),
                    "drafts_per_workload": args.drafts, "active_rounds": args.rounds, "active_per_round": args.per_round,
                    "samples": len(samples)})
    out = Path(args.output) if args.output else database.predictor_path(view.name)
    pr.save(out)
    print(f"samples       {len(samples)} drafts of {len(workloads)} workloads ({args.drafts} random each, simulated "
          f"in {t1 - t0:.1f}s, then {args.rounds} rounds of {args.per_round} the model ranks best)")
    print(f"training      {time.perf_counter() - t1:.1f}s with active sampling ({args.trees} trees, {args.objective})")
    print(f"model         {out} ({out.stat().st_size / 1024:.0f} KiB)")
    return 0


def cmd_sweep(args) -> int:
    """``sweep``: kernels or models x presets x strategies x hardware keys, on Ray."""
    for m in args.model or []:
        if is_kernel(m):
            parse_kernel(m)  # a bad kernel fails before any work
    return sweep.cli_sweep(args, "pim", "tvm_pim.sweep:evaluate_point",
                           {"model": ["gemv:b=1,m=1,n=4096,k=4096"], "hw": ["attacc"], "strategy": ["default"]},
                           ["latency_ns", "energy_pj", "speedup_over_gpu"])


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m tvm_pim``."""
    p = argparse.ArgumentParser(prog="python -m tvm_pim", description="TVM for bank-level PIM DRAM (HBM-PIM, AttAcc)")
    sub = p.add_subparsers(dest="cmd", required=True)

    r = add_run_command(sub, "attacc", "ONNX file, or zoo:<name> (e.g. zoo:gpt_decode?batch=4,ctx=1024, zoo:llama_decode)",
                        "write the PIM command streams here")
    r.add_argument("--strategy", default="auto", choices=STRATEGIES,
                   help="how drafts are chosen (default auto: database, predictor, simulation)")
    r.add_argument("--policy", default="cost", choices=["cost", "always", "never"],
                   help="offload when PIM is predicted faster (cost), always or never")
    r.add_argument("--resident", help="comma-separated graph inputs kept in PIM memory (e.g. k_cache,v_cache)")
    r.add_argument("--database", help="database root consulted before the shipped databases (default: the user cache)")
    r.set_defaults(func=cmd_run)

    t = sub.add_parser("tune", help="meta-schedule tuning of PIM kernels")
    t.add_argument("--hw", default="attacc")
    t.add_argument("--kernel", action="append", help="KIND:b=..,m=..,n=..,k=..[,resident=A+B] (repeatable)")
    t.add_argument("--model", help="tune every PIM kernel of this model")
    t.add_argument("--paper", action="store_true", help="tune the kernel workloads of benchmarks/pim_kernels.py")
    t.add_argument("--resident", help="with --model: comma-separated graph inputs kept in PIM memory")
    t.add_argument("--trials", type=int, default=64)
    t.add_argument("--per-iter", type=int, default=16)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--database", help="save records under this root (<DIR>/<hw>/) instead of the user cache")
    t.add_argument("--update-shipped", action="store_true",
                   help="maintainers: save records into the databases installed with the package (tvm_pim.schedules)")
    t.add_argument("--no-save", action="store_true", help="do not save records")
    t.add_argument("--report", help="write the JSON report here")
    t.set_defaults(func=cmd_tune)

    q = sub.add_parser("predictor", help="train and save the coupled predictor")
    q.add_argument("--hw", default="attacc")
    q.add_argument("--scale", default="tiny", choices=["tiny", "small"])
    q.add_argument("--drafts", type=int, default=60, help="sampled drafts per workload")
    q.add_argument("--trees", type=int, default=300)
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("--objective", default="rank:pairwise", choices=OBJECTIVES,
                   help="per-workload ranking (default) or the paper's log-latency regression")
    q.add_argument("--rounds", type=int, default=3, help="rounds of active sampling (drafts the model ranks best)")
    q.add_argument("--per-round", type=int, default=8, help="drafts added per workload and round")
    q.add_argument("-o", "--output", help="model file (default <$TVM_PIM_CACHE or ~/.cache/tvm_pim>/<hw>/predictor.ubj)")
    q.set_defaults(func=cmd_predictor)

    w = sweep.add_parser(sub, "pim", "attacc", "time a grid of kernels (or models) x presets x draft strategies x "
                         "hardware keys", "Each point is one kernel timed with its chosen draft (or one model "
                         "compiled and simulated; --model takes kernels such as gemv:b=1,m=1,n=4096,k=4096 as well "
                         "as models)")
    w.set_defaults(func=cmd_sweep)
    return dispatch(p, argv)

"""Command line: ``python -m tvm_pim run|tune|predictor ...``.

Sub-commands
------------
run        compile a model (ONNX file, ``zoo:<tvm_cim zoo model>``, or
           ``zoo:gpt_decode`` / ``zoo:llama_decode`` decode layers) for a PIM
           device, simulate it, compare with the float reference (TVM llvm
           build), print a summary and write a JSON report.
tune       meta-schedule tuning of PIM kernels (given sizes, or every PIM
           kernel of a model); records go to ``schedules/<hw>/``.
predictor  train the coupled XGBoost predictor for a device and save it
           in the user cache (``$TVM_PIM_CACHE``, default ``~/.cache/tvm_pim``),
           where the ``predictor`` schedule strategy finds it.

Exit codes: 0 success, 2 bad input (unknown hardware, malformed hardware
file, unreadable model, bad kernel description), 1 internal error.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from tvm_cim.common import onnx_io
from tvm_cim.common.cli import UserError
from tvm_cim.common.report import finish_run, reference_outputs


# ----------------------------------------------------------------------------- inputs
def _load_hw(name: str):
    import tvm_pim
    from tvm_cim.common.hardware import HardwareDescriptionError, UnknownHardwareError

    try:
        return tvm_pim.load(name)
    except (UnknownHardwareError, HardwareDescriptionError) as e:
        raise UserError(str(e)) from None


def _kv(text: str, spec: str) -> dict:
    out = {}
    for item in filter(None, text.split(",")):
        k, sep, v = item.partition("=")
        if not sep:
            raise UserError(f"'{spec}': expected key=value items, got {item!r}")
        out[k] = v
    return out


def load_model(spec: str, seed: int = 0):
    """ONNX model from a file or the zoo (decode layers ``zoo:gpt_decode`` / ``zoo:llama_decode`` included)."""
    return onnx_io.load_onnx(spec, seed=seed)


def parse_kernel(text: str):
    """``gemv:b=32,m=1,n=1024,k=128[,resident=A]`` -> KernelSpec."""
    from .kernels import KernelShapeError, KernelSpec

    kind, _, rest = text.partition(":")
    items = _kv(rest, text)
    resident = tuple(filter(None, items.pop("resident", "").split("+"))) if "resident" in items else None
    try:
        return KernelSpec.make(kind, resident=resident, **{k: int(v) for k, v in items.items()})
    except (KernelShapeError, ValueError) as e:
        raise UserError(f"kernel '{text}': {e}") from None


# ----------------------------------------------------------------------------- run
def cmd_run(args) -> int:
    import tvm
    from tvm import relax

    import tvm_pim
    from tvm_cim.common.report import compare

    from . import report as R

    t0 = time.perf_counter()
    _load_hw(args.hw)
    model = load_model(args.model, seed=args.seed)
    mod, shapes, dtypes = onnx_io.import_onnx(model, args.model)
    inputs = onnx_io.model_inputs(args.inputs, shapes, dtypes, args.seed)
    resident = [r for r in (args.resident or "").split(",") if r]
    unknown = sorted(set(resident) - set(shapes))
    if unknown:
        raise UserError(f"--resident names {unknown} that are not graph inputs ({sorted(shapes)})")
    from tvm_cim.common.target import register_hardware

    target = register_hardware("pim", args.hw)
    t1 = time.perf_counter()
    with tvm_pim.offload_options(strategy=args.strategy, policy=args.policy, resident=resident):
        ex = relax.build(mod, target=target)
    info = tvm_pim.last_compile_info()
    t2 = time.perf_counter()
    if args.emit:
        Path(args.emit).write_text(info.stream_text())
    order = list(shapes)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    with tvm_pim.runtime.collect() as stats:
        outs = onnx_io.outputs_list(vm["main"](*[tvm.runtime.tensor(inputs[k]) for k in order]))
    t3 = time.perf_counter()
    ref = reference_outputs(mod, inputs, order)
    t4 = time.perf_counter()
    rep = R.build_report(info, stats, args.hw)
    rep["model"] = args.model
    rep.update(compare(outs, ref))
    rep["reference"] = "TVM llvm build of the same float32 model"
    rep["strategy"], rep["policy"], rep["resident"] = args.strategy, args.policy, resident
    rep["outputs"] = {o.name: list(a.shape) for o, a in zip(model.graph.output, outs)}
    rep["timing_s"] = {"import": t1 - t0, "compile": t2 - t1, "simulate": t3 - t2, "reference": t4 - t3}
    return finish_run(rep, R.summary, args, model, outs, "streams")


# ----------------------------------------------------------------------------- tune
def _model_kernels(spec: str, hw, seed: int, resident=()):
    import tvm_pim
    from tvm_pim.offload import offload

    model = load_model(spec, seed=seed)
    mod, _, _ = onnx_io.import_onnx(model, spec)
    unknown = sorted(set(resident) - {str(v.name) for v in mod["main"].params})
    if unknown:
        raise UserError(f"--resident names {unknown} that are not graph inputs of {spec}")
    with tvm_pim.offload_options(policy="always", strategy="default", resident=tuple(resident)):
        _, info = offload(mod, hw)
    out = []
    for k in info.kernels:
        if k.spec not in out and PimViewOf(hw).supports(k.spec.kind):
            out.append(k.spec)
    return out


def PimViewOf(hw):  # noqa: N802
    from .abstraction import PimView

    return PimView(hw)


def paper_kernels(view) -> list:
    """The kernel workloads of ``benchmarks/pim_kernels.py`` (small scale) that the device can run."""
    from .kernels import KernelSpec

    out = []
    for bt in (1, 4, 16):
        for n in (1024, 2048, 4096):
            out.append(KernelSpec.make("gemv", b=32 * bt, m=1, n=n, k=128))
            out.append(KernelSpec.make("red", b=bt, n=n, k=n, resident=("A",)))
            out.append(KernelSpec.make("va", b=bt, i=n * n, resident=("A", "B")))
            out.append(KernelSpec.make("relu", b=bt, i=n * n, resident=("A",)))
            out.append(KernelSpec.make("attn", b=32 * bt, n=n, k=128))
    return [s for s in out if view.supports(s.kind)]


def cmd_tune(args) -> int:
    from tqdm import tqdm

    from .host import kernel_time
    from .schedule import evaluate
    from .space import default_draft, enumerate_drafts
    from .tuning import schedules_dir, tune

    hw = _load_hw(args.hw)
    view = PimViewOf(hw)
    specs = [parse_kernel(k) for k in (args.kernel or [])]
    if args.model:
        specs += _model_kernels(args.model, hw, args.seed, [r for r in (args.resident or "").split(",") if r])
    if args.paper:
        specs += [s for s in paper_kernels(view) if s not in specs]
    if not specs:
        raise UserError("nothing to tune: give --kernel KIND:k=v,..., --model MODEL and/or --paper")
    bad = [s.name for s in specs if not view.supports(s.kind)]
    if bad:
        raise UserError(f"{view.name} cannot run {', '.join(bad)} (its command set lacks the units)")
    rows = []
    t0 = time.perf_counter()
    for s in tqdm(specs, desc="tuning kernels", unit="kernel"):
        res = tune(s, view, trials=args.trials, per_iter=args.per_iter, seed=args.seed, save=not args.no_save)
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
    where = "not saved (--no-save)" if args.no_save else str(schedules_dir(view.name))
    print(f"records       {where}")
    print(f"wall time     {wall:.1f}s")
    if args.report:
        Path(args.report).write_text(
            json.dumps({"hw": args.hw, "kernels": rows, "wall_s": wall, "saved_to": where}, indent=2)
        )
        print(f"report        {args.report}")
    return 0


# ----------------------------------------------------------------------------- predictor
def cmd_predictor(args) -> int:
    from .predictor import Predictor, default_workloads, generate_samples

    hw = _load_hw(args.hw)
    view = PimViewOf(hw)
    kinds = [k for k in ("gemv", "red", "va", "relu", "attn") if view.supports(k)]
    workloads = [w for k in kinds for w in default_workloads(view, k, args.scale)]
    t0 = time.perf_counter()
    samples = generate_samples(workloads, view, args.drafts, seed=args.seed)
    t1 = time.perf_counter()
    pr = Predictor(n_estimators=args.trees, seed=args.seed).fit(samples)
    pr.meta.update({"device": view.name, "workloads": len(workloads), "drafts_per_workload": args.drafts})
    out = Path(args.output) if args.output else Predictor.path_for(view)
    pr.save(out)
    print(f"samples       {len(samples)} drafts of {len(workloads)} workloads, simulated in {t1 - t0:.1f}s")
    print(f"training      {pr.train_seconds:.1f}s ({args.trees} trees)")
    print(f"model         {out} ({out.stat().st_size / 1024:.0f} KiB)")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m tvm_pim``."""
    p = argparse.ArgumentParser(prog="python -m tvm_pim", description="TVM for bank-level PIM DRAM (HBM-PIM, AttAcc)")
    sub = p.add_subparsers(dest="cmd", required=True)

    r = sub.add_parser("run", help="compile, simulate and report a model")
    r.add_argument("model", help="ONNX file, zoo:<name> (tvm_cim zoo), zoo:gpt_decode?batch=..,ctx=.. or zoo:llama_decode")
    r.add_argument("--hw", default="attacc", help="PIM preset or .toml file (default: attacc)")
    r.add_argument("--report", help="write the JSON report here")
    r.add_argument("--inputs", help=".npz of inputs keyed by graph input name (default: seeded random)")
    r.add_argument("--outputs", help="save outputs to this .npz")
    r.add_argument("--emit", help="write the PIM command streams here")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--strategy", default="auto", choices=["auto", "database", "predictor", "simulate", "default"],
                   help="how drafts are chosen (default auto: database, predictor, simulation)")
    r.add_argument("--policy", default="cost", choices=["cost", "always", "never"],
                   help="offload when PIM is predicted faster (cost), always or never")
    r.add_argument("--resident", help="comma-separated graph inputs kept in PIM memory (e.g. k_cache,v_cache)")
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
    t.add_argument("--no-save", action="store_true", help="do not write schedules/<hw>/")
    t.add_argument("--report", help="write the JSON report here")
    t.set_defaults(func=cmd_tune)

    q = sub.add_parser("predictor", help="train and save the coupled predictor")
    q.add_argument("--hw", default="attacc")
    q.add_argument("--scale", default="tiny", choices=["tiny", "small"])
    q.add_argument("--drafts", type=int, default=60, help="sampled drafts per workload")
    q.add_argument("--trees", type=int, default=300)
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("-o", "--output", help="model file (default ~/.cache/tvm_pim/<hw>/predictor.ubj or $TVM_PIM_CACHE)")
    q.set_defaults(func=cmd_predictor)

    args = p.parse_args(argv)
    for key in ("trials", "per_iter"):
        if hasattr(args, key) and getattr(args, key) <= 0:
            print(f"error: --{key.replace('_', '-')} must be positive", file=sys.stderr)
            return 2
    try:
        return args.func(args)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

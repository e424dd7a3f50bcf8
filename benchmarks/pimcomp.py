"""PIMCOMP experiments (paper 004 sec. VIII) on the ``pimcomp-a``, ``pimcomp-b``, ``pimcomp-c`` presets.

1. High throughput (Fig. 10-11): ``pimcomp-ht`` against ``none`` (SongC-like:
   layer by layer, one copy), ``puma`` (inter-layer pipeline, no
   replication), ``greedy`` (Poly-Schedule, the polyhedral baseline: greedy
   replication, sample pipeline) and ``cim-mlc``: inferences per second in
   the steady state of a batch (the simulator's timeline of ``--batch``
   inputs, :mod:`tvm_cim.simulator.batch`) and energy per input (paper:
   149.5x over SongC, 3.3x over Polyhedral).  SongC deploys one sample at a
   time (paper sec. II); ``none`` at ``--batch`` lets a later input start a
   layer whose crossbars the earlier input has left, a sample pipeline
   bounded by its slowest layer, so the table also gives ``none`` one input
   at a time (throughput 1 / latency, energy of one input: exact, as the
   inputs share nothing).  Both keep their weights resident: SongC's
   weight movement (storage-computation-disentangled) is not modelled.
2. Low latency (Fig. 12-13): ``pimcomp-ll`` against the same, latency and
   energy of one input (paper: 21.8x / 9.8x / 5.4x over SongC / PUMA /
   Polyhedral).
3. GA against our DP duplication on the same problem: the objective each
   reaches (pipeline cycle for HT, one input's latency for LL, both on the
   shared estimate) and the seconds each takes (paper's GA: 19.2 min on
   average, Table VI).
4. Compile time per model and strategy (Table VI).

Every configuration runs the GA twice: seeded with our DP's answer (the
strategies' default) and alone (``/ga-alone``, the paper's method).

Models: vgg8 on 1x28x28 (the paper's MNIST model), resnet18, resnet34 and
googlenet on 3x224x224 (the paper's resnet18 is an MNIST model; the public
JSON and this benchmark use ImageNet size), ``--quick``: 32x32 and two
models, small batch.  HT batch 128 as in the paper (``--batch``);
``--saturation`` also runs one point's HT at several batches to show where
throughput saturates.  Latency, throughput and energy come from the
simulator's resource timeline in timing-only mode (the strategies'
bit-exactness is covered by ``tests/test_exactness.py`` and
``tests/test_build.py``).  The JSON is written after every point
(``--resume`` skips the points it already holds).

    python benchmarks/pimcomp.py --json pimcomp.json  # all models, all three architectures, batch 128
    python benchmarks/pimcomp.py --quick              # vgg8 and resnet18, Arch-A, batch 4
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tvm_cim  # noqa: E402
from tvm_cim.common import zoo  # noqa: E402
from tvm_cim.common.onnx_io import import_onnx  # noqa: E402
from tvm_cim.compiler import strategies  # noqa: E402
from tvm_cim.compiler.transform import last_compile_phases, offload  # noqa: E402
from tvm_cim.hardware import cost  # noqa: E402
from tvm_cim.report import build_report, simulate_timing  # noqa: E402

R = dataclasses.replace
BASELINES = ["none", "puma", "greedy", "cim-mlc"]
LABEL = {"none": "SongC-like", "puma": "PUMA", "greedy": "Polyhedral", "cim-mlc": "CIM-MLC"}
PAPER = {"ht_vs_songc": 149.5, "ht_vs_polyhedral": 3.3, "polyhedral_vs_songc": 44.7,
         "ll_vs_songc": 21.8, "ll_vs_puma": 9.8, "ll_vs_polyhedral": 5.4,
         "ll_energy_vs": {"none": 5.6, "puma": 2.0, "greedy": 2.3}, "ga_minutes": 19.2}
MODELS = {  # name -> zoo kwargs (full size)
    "vgg8": dict(image_size=28),
    "resnet18": dict(image_size=224),
    "resnet34": dict(image_size=224),
    "googlenet": dict(image_size=224),
}
BIG = ("resnet18", "resnet34", "googlenet")


def model_kwargs(name: str, quick: bool, image: int | None) -> dict:
    kw = dict(MODELS[name])
    if image is not None and name in BIG:
        kw["image_size"] = image
    elif quick and name in BIG:
        kw["image_size"] = 32
    return kw


# ablations of the PIMCOMP strategies: name -> (strategy, option overrides)
GA_ALONE = {
    "pimcomp-ht/ga-alone": ("pimcomp-ht", {"ga_seed_dp": False}),
    "pimcomp-ll/ga-alone": ("pimcomp-ll", {"ga_seed_dp": False}),
}
ABLATIONS = {
    **GA_ALONE,
    # the HT rule compares the load volume the program executes, equal for every executable format, and
    # then takes the fewest array groups: im2col on every layer, so this row equals pimcomp-ht (it would
    # differ once the input reuse of (IK,O,K) / (I,O,K2) is executed: tvm_cim/compiler/unfold.py)
    "pimcomp-ht/im2col": ("pimcomp-ht", {"unfolding": "im2col"}),
    "pimcomp-ll/no-heap": ("pimcomp-ll", {"local_memory": False}),
    "pimcomp-ll/send-each": ("pimcomp-ll", {"send_batch": 1}),
}
LOW_LATENCY = ("pimcomp-ll",)  # judged by one input's latency: no batch run


def run_point(mod, hw, strategy: str, batch: int, ga_time: float | None) -> tuple[dict, dict]:
    """Compile and simulate one (model, chip, strategy): latency, throughput, energy, compile time, GA/DP."""
    strategy, extra = ABLATIONS.get(strategy, (strategy, {}))
    opts = R(strategies.get(strategy).options(hw), **extra)
    if opts.duplication == "ga" and ga_time is not None:
        opts = R(opts, ga_time_limit=ga_time)
    t0, c0 = time.perf_counter(), time.process_time()
    _, info = offload(mod, hw, strategy=strategy, options=opts)
    t1, c1 = time.perf_counter(), time.process_time()
    phases = last_compile_phases()
    stats, _ = simulate_timing(info)
    rep = build_report(info, stats, hw.name, batch=1 if strategy in LOW_LATENCY else batch)
    t2 = time.perf_counter()
    b = rep["batch"]
    row = {"latency_ns": rep["latency_ns"], "energy_pj": rep["energy_pj"], "batch": b["inputs"],
           "throughput_per_s": b["throughput_per_s"], "batch_throughput_per_s": b["batch_throughput_per_s"],
           "energy_per_input_pj": b["energy_per_input_pj"], "makespan_ns": b["makespan_ns"],
           "crossbar_fraction": rep["utilisation"]["crossbar_fraction"],
           "segments": rep["schedule"]["segments"], "compile_s": t1 - t0, "compile_cpu_s": c1 - c0, "simulate_s": t2 - t1,
           "phases_s": {k: v["wall_s"] for k, v in phases.items()}}
    # the energy of one input by term (static power x latency in "leakage") and the chip's static power, so the
    # HT energy per input (static power x makespan / batch) splits the same way: --energy-terms
    row["energy_terms_pj"] = dict(rep["energy_breakdown_pj"])
    row["leakage_terms_mw"] = cost.leakage_terms_mw(hw)
    if rep.get("local_memory"):
        row["local_memory"] = {k: v for k, v in rep["local_memory"].items() if k != "per_region"}
    ga = {}
    for seg in info.replication:
        ga = {"objective": seg["objective"], "ga_ns": seg["ga"]["fitness_ns"], "ga_s": seg["ga"]["seconds"],
              "ga_cpu_s": seg["ga"].get("cpu_seconds"), "ga_evaluations": seg["ga"].get("evaluations"),
              "ga_generations": seg["ga"]["generations"], "ga_stopped": seg["ga"]["stopped"],
              "ga_seeded": seg["ga"]["seeded_with_dp"], "cores_used": seg["cores_used"],
              "dp_ns": seg["dp"]["fitness_ns"], "dp_s": seg["dp"]["seconds"], "dp_packs": seg["dp"]["packs"],
              "dp_counts_ns": seg["dp"]["counts_ns"],
              "unfolding": {f: sum(1 for v in seg["layers"].values() if v["unfolding"] == f)
                            for f in {v["unfolding"] for v in seg["layers"].values()}}}
        break  # one segment: every paper model fits every architecture
    return row, ga


def save(res: dict, path: str | None) -> None:
    """Write the results so far (a killed run loses at most the point in progress)."""
    if path:
        tmp = Path(path).with_suffix(".tmp")
        tmp.write_text(json.dumps(res, indent=1))
        tmp.replace(path)


def geomean(xs):
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="vgg8 and resnet18 at 32x32 on Arch-A, batch 4")
    ap.add_argument("--models", nargs="+", choices=list(MODELS), default=None)
    ap.add_argument("--hw", nargs="+", default=None, help="presets (default pimcomp-a pimcomp-b pimcomp-c)")
    ap.add_argument("--batch", type=int, default=None, help="HT batch (default 128 as the paper; --quick 4)")
    ap.add_argument("--saturation", nargs="*", type=int, default=None,
                    help="HT throughput of pimcomp-ht and greedy on the first point at these batches")
    ap.add_argument("--resume", action="store_true", help="keep the points the --json file already holds")
    ap.add_argument("--baselines", nargs="+", choices=BASELINES, default=BASELINES,
                    help="baselines to run (cim-mlc's MVM-grained batch timeline is the slowest to simulate)")
    ap.add_argument("--image", type=int, default=None, help="image size of resnet34 and googlenet")
    ap.add_argument("--ga-time", type=float, default=None,
                    help="GA wall-clock safety net per model, seconds (default: the strategy's; the GA stops on its "
                         "deterministic budget of evaluations, ga_evaluations)")
    ap.add_argument("--ablations", action="store_true",
                    help="also pimcomp-ht with im2col unfolding, pimcomp-ll without the heap and sending each result")
    ap.add_argument("--only", nargs="+", default=None,
                    help="run only these strategies now (e.g. the baselines first; --resume adds the rest later)")
    ap.add_argument("--energy-terms", action="store_true",
                    help="print (and save) every point's energy by term: dynamic terms, static power x time")
    ap.add_argument("--json", help="write every figure here")
    ap.add_argument("--plots", help="directory for plots")
    args = ap.parse_args(argv)
    models = args.models or (["vgg8", "resnet18"] if args.quick else list(MODELS))
    hws = args.hw or (["pimcomp-a"] if args.quick else ["pimcomp-a", "pimcomp-b", "pimcomp-c"])
    batch = args.batch or (4 if args.quick else 128)
    ga_time = args.ga_time
    if batch < 2:
        print("--batch must be >= 2 (throughput is the interval between results)", file=sys.stderr)
        return 2
    res: dict = {"batch": batch, "ga_time_limit_s": ga_time, "paper": PAPER, "points": {}}
    if args.resume and args.json and Path(args.json).exists():
        old = json.loads(Path(args.json).read_text())
        if old.get("batch") == batch:  # the GA's result no longer depends on its time limit
            res = old
    bases = args.baselines
    strats = bases + ["pimcomp-ht", "pimcomp-ll"] + list(ABLATIONS if args.ablations else GA_ALONE)
    for hw_name in hws:
        hw = tvm_cim.load(hw_name)
        for name in models:
            kw = model_kwargs(name, args.quick, args.image)
            key = f"{name}@{hw_name}"
            pt = res["points"].setdefault(key, {"model": name, "model_kwargs": kw, "hw": hw_name,
                                                "strategies": {}, "ga_vs_dp": {}})
            todo = [s for s in strats if s not in pt["strategies"] and (args.only is None or s in args.only)]
            if not todo:
                continue
            mod = import_onnx(zoo.build_model(name, **kw), name)[0]
            rows, ga = pt["strategies"], pt["ga_vs_dp"]
            for s in todo:
                rows[s], g = run_point(mod, hw, s, batch, ga_time)
                if g:
                    ga[s] = g
                print(f"  {key:22s} {s:20s} latency {rows[s]['latency_ns'] / 1e3:10.1f} us  throughput "
                      f"{rows[s]['throughput_per_s']:10.4g}/s (batch {rows[s]['batch']})  energy/input "
                      f"{rows[s]['energy_per_input_pj'] / 1e6:9.3f} uJ  compile {rows[s]['compile_s']:6.1f} s",
                      flush=True)
                save(res, args.json)
    if args.saturation:
        name, hw_name = models[0], hws[0]
        hw = tvm_cim.load(hw_name)
        kw = model_kwargs(name, args.quick, args.image)
        mod = import_onnx(zoo.build_model(name, **kw), name)[0]
        sat = res.setdefault("saturation", {"point": f"{name}@{hw_name}", "strategies": {}})
        print(f"\n[6] HT throughput against batch ({name}@{hw_name})")
        for s in ("pimcomp-ht", "greedy"):
            for b in args.saturation:
                if str(b) in sat["strategies"].get(s, {}):
                    continue
                row, _ = run_point(mod, hw, s, b, ga_time)
                sat["strategies"].setdefault(s, {})[str(b)] = {
                    k: row[k] for k in ("throughput_per_s", "batch_throughput_per_s", "makespan_ns", "simulate_s")}
                print(f"  {s:11s} batch {b:4d}: steady {row['throughput_per_s']:10.4g}/s, over the batch "
                      f"{row['batch_throughput_per_s']:10.4g}/s  (simulated in {row['simulate_s']:.0f} s)", flush=True)
                save(res, args.json)
    # ---- tables
    # the ratio tables use the points that have the baselines and both modes (the ablation rows are optional)
    main = bases + ["pimcomp-ht", "pimcomp-ll"]
    pts = [p for p in res["points"].values() if all(s in p["strategies"] for s in main)]
    print(f"\ntables over {len(pts)} points: {', '.join(k for k, p in res['points'].items() if p in pts)}")
    if not pts:
        print("no point has every strategy yet (--only): tables skipped")
        save(res, args.json)
        return 0

    def ratio(p, num, den, metric, inverse=False):
        a, b = p["strategies"][num][metric], p["strategies"][den][metric]
        return (b / a) if inverse else (a / b)

    print(f"\n[1] High throughput (batch {batch}): pimcomp-ht throughput over each baseline; energy per input ratio")
    ht = {}
    for base in bases:
        th = [ratio(p, "pimcomp-ht", base, "throughput_per_s") for p in pts]
        en = [ratio(p, "pimcomp-ht", base, "energy_per_input_pj", inverse=True) for p in pts]
        ht[base] = {"throughput_geomean": geomean(th), "energy_geomean": geomean(en), "per_point": th}
        print(f"  vs {LABEL[base]:11s} throughput x{geomean(th):7.2f} (min {min(th):.2f}, max {max(th):.2f})   "
              f"energy x{geomean(en):6.2f}")
    # SongC runs one sample at a time, layer by layer (paper sec. II): no input overlaps another, so its
    # throughput is 1 / latency and its energy per input that of one input.  Our none at --batch N lets inputs
    # overlap wherever its crossbars are free (a sample pipeline, which SongC does not have).
    th = [p["strategies"]["pimcomp-ht"]["throughput_per_s"] * p["strategies"]["none"]["latency_ns"] / 1e9
          for p in pts]
    en = [p["strategies"]["none"]["energy_pj"] / p["strategies"]["pimcomp-ht"]["energy_per_input_pj"] for p in pts]
    ht["none-sequential"] = {"throughput_geomean": geomean(th), "energy_geomean": geomean(en), "per_point": th}
    print(f"  vs {'none, inputs in sequence (SongC: one sample at a time)':11s}\n     {'':11s} throughput "
          f"x{geomean(th):7.2f} (min {min(th):.2f}, max {max(th):.2f})   energy x{geomean(en):6.2f}")
    print(f"  paper: x{PAPER['ht_vs_songc']} over SongC, x{PAPER['ht_vs_polyhedral']} over Polyhedral")
    print("\n[2] Low latency (one input): pimcomp-ll latency and energy gain over each baseline")
    ll = {}
    for base in bases:
        la = [ratio(p, "pimcomp-ll", base, "latency_ns", inverse=True) for p in pts]
        en = [ratio(p, "pimcomp-ll", base, "energy_pj", inverse=True) for p in pts]
        ll[base] = {"latency_geomean": geomean(la), "energy_geomean": geomean(en), "per_point": la}
        print(f"  vs {LABEL[base]:11s} latency x{geomean(la):7.2f} (min {min(la):.2f}, max {max(la):.2f})   "
              f"energy x{geomean(en):6.2f}")
    print(f"  paper: x{PAPER['ll_vs_songc']} / x{PAPER['ll_vs_puma']} / x{PAPER['ll_vs_polyhedral']} "
          "over SongC / PUMA / Polyhedral")
    # points in one order, architecture by architecture (a resumed JSON holds them in the order they were run)
    order = sorted(res["points"].items(), key=lambda kv: (kv[1]["hw"], list(MODELS).index(kv[1]["model"])
                                                          if kv[1]["model"] in MODELS else len(MODELS)))
    print("\n[3] GA vs DP on the same problem (objective on the shared estimate; lower is better)")
    for key, p in order:
        for s, g in sorted(p["ga_vs_dp"].items()):
            print(f"  {key:22s} {s:20s} GA {g['ga_ns'] / 1e3:10.2f} us in {g.get('ga_cpu_s') or 0:5.1f} CPU s "
                  f"({g['ga_generations']} gen, {g.get('ga_evaluations')} evaluations, {g['ga_stopped']})   DP {g['dp_ns'] / 1e3:10.2f} us in {g['dp_s']:5.2f} s   GA/DP "
                  f"{g['ga_ns'] / g['dp_ns']:.3f}")
    print("\n[5] Ablations (geometric means over the points)")
    for a, (base, _) in (ABLATIONS if args.ablations else GA_ALONE).items():
        have = [p for p in pts if a in p["strategies"]]
        if not have:
            continue
        th = geomean([ratio(p, a, base, "throughput_per_s") for p in have])
        la = geomean([ratio(p, a, base, "latency_ns", inverse=True) for p in have])
        en = geomean([ratio(p, a, base, "energy_per_input_pj", inverse=True) for p in have])
        print(f"  {a:20s} vs {base}: throughput x{th:.3f}, latency gain x{la:.3f}, energy gain x{en:.3f} "
              f"({len(have)} points)")
    print("\n[4] Compile time (s, calibration included; paper Table VI: 19.2 min on average)")
    comp = []
    for key, p in order:
        print(f"  {key:22s} " + "  ".join(f"{s} {r['compile_s']:.1f} ({r.get('compile_cpu_s', 0):.1f} CPU)"
                                          for s, r in p["strategies"].items()))
        comp += [r.get("compile_cpu_s", r["compile_s"]) for s, r in p["strategies"].items() if s in ("pimcomp-ht", "pimcomp-ll")]
    if comp:
        print(f"  pimcomp-ht / pimcomp-ll mean {sum(comp) / len(comp):.1f} CPU s over {len(comp)} compilations")
    res["summary"] = {"ht": ht, "ll": ll}
    if args.energy_terms:
        res["energy_terms"] = energy_terms(order, bases)
    if args.plots:
        res["plots"] = plots(res, Path(args.plots))
    save(res, args.json)
    return 0


# the paper's energy ratios with its time ratios, if both strategies spend the same dynamic energy (as the paper
# says of HT: "the computational workload ... remains constant"): (T_b x + 1) / (x + 1) = E_b with x the PIMCOMP
# run's static energy over its dynamic energy, T_b and E_b the time and energy ratios over baseline b
PAPER_X = {"pimcomp-ht vs SongC": (PAPER["ht_vs_songc"], 9.0), "pimcomp-ll vs SongC": (PAPER["ll_vs_songc"], 5.6),
           "pimcomp-ll vs PUMA": (PAPER["ll_vs_puma"], 2.0), "pimcomp-ll vs Polyhedral": (PAPER["ll_vs_polyhedral"], 2.3)}
# the paper's HT energy over SongC is 9.0 on Arch-A (7.7 on B, 3.9 on C): Arch-A's figure is used for every point
DYNAMIC = ("crossbar", "adc", "dac", "alu", "noc+buffer")  # the main dynamic terms; the rest are summed as "other"


def implied_static_mw(rows: dict) -> dict:
    """The static power (mW) that gives the paper's energy ratio with our time ratio, both runs spending
    PIMCOMP's dynamic energy: ``x = (E - 1) / (T - E)``, ``P = x x dynamic / time`` (none when T <= E)."""
    out = {}
    runs = {"pimcomp-ll vs SongC": ("pimcomp-ll", "none", "latency_ns"), "pimcomp-ll vs PUMA": ("pimcomp-ll", "puma", "latency_ns"),
            "pimcomp-ll vs Polyhedral": ("pimcomp-ll", "greedy", "latency_ns"),
            "pimcomp-ht vs SongC": ("pimcomp-ht", "none", None)}
    for name, (ours, base, _) in runs.items():
        a, b = rows.get(ours), rows.get(base)
        if not a or not b or "energy_terms_pj" not in a:
            continue
        ns = a["latency_ns"] if ours == "pimcomp-ll" else a["makespan_ns"] / a["batch"]
        t = b["latency_ns"] / ns  # SongC: one input at a time
        e = PAPER_X[name][1]
        dyn = sum(v for k, v in a["energy_terms_pj"].items() if k != "leakage")
        if t > e:
            out[name] = (e - 1) / (t - e) * dyn / ns
    return out


def energy_terms(order, bases) -> dict:
    """Print every point's energy per input by term; return them (the JSON's ``energy_terms``).

    One input for the low-latency run and the baselines' single input; per input of the batch for HT (the
    dynamic energy of one input plus static power x makespan / batch, as the report's energy per input).
    ``x``: static over dynamic energy, what decides how far a shorter run saves energy.
    """
    print("\n[7] Energy per input by term (uJ): dynamic terms, static power x time ('static'); x = static / dynamic")
    for name, (t, e) in PAPER_X.items():
        print(f"  paper, {name}: time x{t}, energy x{e} -> x = {(e - 1) / (t - e):.3f} for PIMCOMP's run "
              "(same dynamic energy assumed)")
    out = {}
    for key, p in order:
        rows = {}
        for s in bases + ["pimcomp-ht", "pimcomp-ll"]:
            r = p["strategies"].get(s)
            if not r or "energy_terms_pj" not in r:
                continue
            terms = {k: v for k, v in r["energy_terms_pj"].items() if k != "leakage"}
            dyn = sum(terms.values())
            for mode, ns in (("one input", r["latency_ns"]),
                             ("per input of the batch", r["makespan_ns"] / r["batch"])):
                if mode != "one input" and (s == "pimcomp-ll" or r["batch"] == 1):
                    continue
                static = sum(r["leakage_terms_mw"].values()) * ns
                row = {"time_ns": ns, **{k: terms.get(k, 0.0) for k in DYNAMIC},
                       "other": dyn - sum(terms.get(k, 0.0) for k in DYNAMIC), "dynamic": dyn,
                       "static": static, "static_crossbars": r["leakage_terms_mw"]["crossbars"] * ns,
                       "total": dyn + static, "x": static / dyn if dyn else 0.0}
                rows[f"{s} ({mode})"] = row
        if not rows:
            continue
        out[key] = rows
        leak = next(iter(p["strategies"].values())).get("leakage_terms_mw", {})
        print(f"  {key}: static power " + ", ".join(f"{k} {v:.1f}" for k, v in leak.items()) + " mW")
        implied = implied_static_mw(p["strategies"])
        if implied:
            print("    static power (mW) the paper's ratio would need on these schedules: "
                  + ", ".join(f"{k} {v:.0f}" for k, v in implied.items()))
        print(f"    {'strategy':38s} {'time us':>10s} " + " ".join(f"{k:>10s}" for k in DYNAMIC)
              + f" {'other':>8s} {'dynamic':>10s} {'static':>10s} {'total':>10s} {'x':>7s}")
        for s, row in rows.items():
            print(f"    {s:38s} {row['time_ns'] / 1e3:10.1f} " + " ".join(f"{row[k] / 1e6:10.1f}" for k in DYNAMIC)
                  + f" {row['other'] / 1e6:8.1f} {row['dynamic'] / 1e6:10.1f} {row['static'] / 1e6:10.1f} "
                  f"{row['total'] / 1e6:10.1f} {row['x']:7.3f}")
        if implied:
            rows["implied_static_mw"] = implied
    return out


def plots(res: dict, out: Path) -> list[str]:
    """Bar charts of HT throughput and LL latency per point, normalised to the SongC-like baseline."""
    from matplotlib.figure import Figure

    out.mkdir(parents=True, exist_ok=True)
    keys = list(res["points"])
    paths = []
    for metric, title, fname, inv in (("throughput_per_s", "HT throughput / SongC-like", "pimcomp_ht.png", False),
                                      ("latency_ns", "LL speedup over SongC-like", "pimcomp_ll.png", True)):
        fig = Figure(figsize=(max(6, 1.2 * len(keys)), 3.5))
        ax = fig.subplots()
        strats = [s for s in next(iter(res["points"].values()))["strategies"]
                  if all(s in p["strategies"] for p in res["points"].values())]
        w = 0.8 / len(strats)
        for i, s in enumerate(strats):
            vals = []
            for k in keys:
                st = res["points"][k]["strategies"]
                v = st[s][metric] / st["none"][metric]
                vals.append(1 / v if inv else v)
            ax.bar([j + i * w for j in range(len(keys))], vals, w, label=s)
        ax.set_xticks([j + 0.4 - w / 2 for j in range(len(keys))], keys, rotation=30, ha="right", fontsize=7)
        ax.set_yscale("log")
        ax.set_title(title)
        ax.legend(fontsize=6)
        fig.tight_layout()
        path = out / fname
        fig.savefig(path, dpi=120)
        paths.append(str(path))
    return paths


if __name__ == "__main__":
    sys.exit(main())

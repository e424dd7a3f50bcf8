"""Compiler and simulator speed and memory on large CIM models (issue 15, section 1).

Every point runs ``python -m tvm_cim run`` in its own process, so the peak
resident memory is that of one model on one chip.  Per model x preset it
prints compile and simulation time (wall and CPU: the goals are judged on wall
time, what a user waits for -- the numerics run on threads, so CPU seconds exceed
it -- and other processes sharing the cores inflate it), the peak RSS, the time of the ``--timing-only``
simulation and its ratio to the full one, and the size of the work (meta-
operators executed, passes of layers larger than the chip), with the machine's
load average before and after the point (CPU seconds rise with it).  Then: the
bit-accurate ResNet-18 (``--bitwise``) per preset, and compile time against
the number of layers (ResNet-18/34/50/101, ``cim-mlc``, calibration included)
with the pass that dominates.  The goals of the issue are printed next to the
figures; they are not asserted.

    python benchmarks/scale.py                              # the issue's table: every model x every CIM preset
    python benchmarks/scale.py --models vgg19 --hw jain21   # one point
    python benchmarks/scale.py --quick --json out.json      # ResNet-18 at 32x32 on isaac (seconds)
    python benchmarks/scale.py --compile-only               # compile time only: every model (and DenseNet-121)
                                                            # x every preset, and against the number of layers
    python benchmarks/scale.py --models vgg19 --repeat 3    # each point three times: median times, largest RSS

Single runs on a shared 2-core machine spread by about 20 %; ``--repeat N`` runs every point N times and
prints the median of each time (every run's figures are kept in the JSON, ``repeats``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tvm_cim.common.hardware import known_presets  # noqa: E402

MODELS = {"vgg19": "zoo:vgg19", "zfnet": "zoo:zfnet", "alexnet": "zoo:alexnet", "resnet18": "zoo:resnet18"}
#: Compile-only rows: the issue's models and DenseNet-121 (its compile-time case).
COMPILE_MODELS = {**MODELS, "densenet121": "zoo:densenet121"}
GROWTH_MODELS = ["resnet18", "resnet34", "resnet50", "resnet101", "densenet121"]
GOAL_TOTAL_S, GOAL_RSS_MB, GOAL_BITWISE_S, GOAL_COMPILE_S, GOAL_R50_S, GOAL_RATIO = 60, 4096, 10, 30, 10, 10


def _cli(verb: str, spec: str, hw: str, strategy: str | None, *flags: str) -> tuple[dict | None, float, str]:
    """``python -m tvm_cim VERB`` in its own process: (report or None, wall seconds, error line)."""
    with tempfile.TemporaryDirectory() as d:
        rep_path = Path(d) / "r.json"
        cmd = [sys.executable, "-m", "tvm_cim", verb, spec, "--hw", hw, "--report", str(rep_path), *flags]
        if strategy:
            cmd += ["--strategy", strategy]
        t = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - t
        if p.returncode != 0:
            tail = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}"
            return None, wall, tail
        return json.loads(rep_path.read_text()), wall, ""


def run_point(spec: str, hw: str, strategy: str | None = None, *flags: str) -> dict:
    """One ``python -m tvm_cim run`` in its own process; the report's figures, and the machine's 1-minute load
    average before and after it (other processes share the cores: CPU seconds rise with the load)."""
    load0 = os.getloadavg()[0]
    rep, wall, err = _cli("run", spec, hw, strategy, *flags)
    load = (load0, os.getloadavg()[0])
    if rep is None:
        return {"error": err, "process_wall_s": wall, "load_avg": load}
    regions = rep["regions"]
    phases = rep.get("compile_phases_s", {})
    return {
        "compile_s": rep["timing_s"]["compile"],
        "compile_cpu_s": rep["cpu_s"]["compile"],
        "simulate_s": rep["timing_s"]["simulate"],
        "simulate_cpu_s": rep["cpu_s"]["simulate"],
        "peak_rss_mb": rep["peak_rss_mb"],
        "process_wall_s": wall,
        "latency_ns": rep["latency_ns"],
        "energy_pj": rep["energy_pj"],
        "regions": len(regions),
        "metaops": int(sum(sum(r["metaop_counts"].values()) for r in regions)),
        "passes": int(sum(r["passes"] for r in regions)),
        "max_passes": int(max((r["passes"] for r in regions), default=0)),
        "segments": rep["schedule"]["segments"],
        "phases": phases,
        "load_avg": load,
    }


#: What ``--repeat`` takes the median of (the simulated figures are deterministic, checked).
_TIMES = ("compile_s", "compile_cpu_s", "simulate_s", "simulate_cpu_s", "import_s", "process_wall_s")


def repeated(point, n: int, *args) -> dict:
    """``point(*args)`` (:func:`run_point` or :func:`compile_point`) ``n`` times: the median of each time, the
    largest peak RSS, the load average from before the first run to after the last, the other figures from the
    first run; ``repeats``: every run's times and RSS; ``differs``: figures that changed between runs (they
    should not: the simulation is deterministic).  An error in any run is the point's error."""
    if n < 1:
        raise ValueError(f"repeated: n must be at least 1, got {n}")
    runs = [point(*args) for _ in range(n)]
    bad = next((r for r in runs if "error" in r), None)
    if bad is not None or len(runs) == 1:
        return bad or runs[0]
    out = dict(runs[0])
    kept = [k for k in (*_TIMES, "peak_rss_mb") if k in out]
    out["repeats"] = [{k: r[k] for k in kept} for r in runs]
    for k in _TIMES:
        if k in out:
            out[k] = statistics.median(r[k] for r in runs)
    out["peak_rss_mb"] = max(r["peak_rss_mb"] for r in runs)
    for key in ("load_avg", "loadavg"):
        if key in out:
            out[key] = type(out[key])([runs[0][key][0], runs[-1][key][1]])
    differs = [k for k in ("latency_ns", "energy_pj", "metaops", "regions", "segments")
               if k in out and any(r[k] != out[k] for r in runs)]
    if differs:
        out["differs"] = differs
    return out


def dominant(phases: dict, compile_cpu_s: float | None = None) -> tuple[str, float]:
    """The pass with the most CPU time and its share of the compile CPU time.

    With ``compile_cpu_s`` (the whole ``relax.build``), what the CIM passes do
    not account for counts as one more phase, ``TVM host build`` (Relax
    pipeline, legalisation and the LLVM build of the host operators).
    """
    if not phases:
        return "-", 0.0
    cpu = {k: v["cpu_s"] for k, v in phases.items()}
    if compile_cpu_s is not None:
        cpu["TVM host build"] = max(0.0, compile_cpu_s - sum(cpu.values()))
    name = max(cpu, key=cpu.get)
    tot = compile_cpu_s if compile_cpu_s else (sum(cpu.values()) or 1.0)
    return name, cpu[name] / tot


def _load(r: dict) -> str:
    """The load average before and after a compile point, as printed beside it (empty if not measured)."""
    return f"  load {r['loadavg'][0]:.1f}-{r['loadavg'][1]:.1f}" if "loadavg" in r else ""


def compile_point(spec: str, hw: str, strategy: str | None = None) -> dict:
    """One ``python -m tvm_cim compile`` in its own process: compile wall / CPU seconds and per pass."""
    load0 = os.getloadavg()[0]  # the machine is shared: CPU seconds of a loaded machine are noisier
    rep, wall, err = _cli("compile", spec, hw, strategy)
    load = [round(load0, 2), round(os.getloadavg()[0], 2)]
    if rep is None:
        return {"error": err, "process_wall_s": wall, "loadavg": load}
    return {"compile_s": rep["timing_s"]["compile"], "compile_cpu_s": rep["cpu_s"]["compile"],
            "import_s": rep["timing_s"]["import"], "peak_rss_mb": rep["peak_rss_mb"], "process_wall_s": wall,
            "regions": rep["regions"], "segments": rep["segments"], "phases": rep["compile_phases_s"],
            "loadavg": load}


def compile_table(models: list[str], presets: list[str], image: int, out: dict, json_path: str | None,
                  repeat: int = 1) -> None:
    """Compile-only rows (default strategy) of models x presets, each point ``repeat`` times (:func:`repeated`);
    the JSON is rewritten after every row."""
    for m, h in tqdm([(m, h) for m in models for h in presets], desc="compile model x preset"):
        row = {"model": m, "hw": h, **repeated(compile_point, repeat, f"{COMPILE_MODELS[m]}?image_size={image}", h)}
        if "error" not in row:
            row["dominant_phase"], row["dominant_share"] = dominant(row["phases"], row["compile_cpu_s"])
        out["compile"].append(row)
        if json_path:
            Path(json_path).write_text(json.dumps(out, indent=1))
    med = f"; median of {repeat} runs" if repeat > 1 else ""
    print(f"\nCompile only at {image}x{image} (python -m tvm_cim compile, default strategy; wall / CPU seconds{med}; "
          f"goal: wall < {GOAL_COMPILE_S} s)")
    for r in out["compile"]:
        if "error" in r:
            print(f"  {r['model']:11s} {r['hw']:11s} ERROR {r['error']}")
            continue
        print(f"  {r['model']:11s} {r['hw']:11s} {r['regions']:4d} layers  compile {r['compile_s']:6.1f} / "
              f"{r['compile_cpu_s']:6.1f} s  RSS {r['peak_rss_mb']:6.0f} MB  dominant {r['dominant_phase']} "
              f"({100 * r['dominant_share']:.0f}%)  {'met' if r['compile_s'] < GOAL_COMPILE_S else 'NOT met'}"
              f"{_load(r)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="*", default=None, choices=sorted(MODELS), help="default: all four")
    ap.add_argument("--hw", nargs="*", default=None, help="presets (default: every CIM preset)")
    ap.add_argument("--image", type=int, default=224, help="input image size (default 224)")
    ap.add_argument("--no-runs", action="store_true", help="skip the model x preset table")
    ap.add_argument("--no-timing-only", action="store_true", help="skip the --timing-only runs")
    ap.add_argument("--no-bitwise", action="store_true", help="skip the bit-accurate ResNet-18 runs")
    ap.add_argument("--no-compile", action="store_true", help="skip compile time against the number of layers")
    ap.add_argument("--compile-only", action="store_true",
                    help="compile time only (python -m tvm_cim compile): the models and DenseNet-121 x the presets, "
                    "then against the number of layers; no simulation")
    ap.add_argument("--compile-models", nargs="*", default=None, choices=sorted(COMPILE_MODELS),
                    help="models of the compile-only table (default: all five)")
    ap.add_argument("--growth-models", nargs="*", default=None, choices=GROWTH_MODELS,
                    help="models of compile time against the number of layers, on isaac (default: all five)")
    ap.add_argument("--quick", action="store_true", help="ResNet-18 at 32x32 on isaac only (a few seconds)")
    ap.add_argument("--repeat", type=int, default=1, metavar="N",
                    help="run every point N times and report the median times and the largest RSS (default 1)")
    ap.add_argument("--json", help="write every figure to this file")
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error(f"--repeat must be at least 1, got {args.repeat}")
    presets = args.hw or known_presets("cim")
    models = args.models or list(MODELS)
    image = args.image
    growth_models = list(args.growth_models if args.growth_models is not None else GROWTH_MODELS)
    growth_image = 224
    if args.quick:
        presets, models, image, growth_models, growth_image = ["isaac"], ["resnet18"], 32, ["resnet18"], 32
    out: dict = {"image": image, "repeat": args.repeat, "runs": [], "bitwise": [], "compile_growth": [], "compile": []}
    if args.compile_only:
        args.no_runs = args.no_bitwise = True
        compile_table(args.compile_models or list(COMPILE_MODELS), presets, image, out, args.json, args.repeat)

    jobs = [] if args.no_runs else [(m, h) for m in models for h in presets]
    for m, h in tqdm(jobs, desc="model x preset"):
        spec = f"{MODELS[m]}?image_size={image}"
        row = {"model": m, "hw": h, **repeated(run_point, args.repeat, spec, h)}
        if "error" not in row and not args.no_timing_only:
            t = repeated(run_point, args.repeat, spec, h, None, "--timing-only")
            row["timing_only_s"] = t.get("simulate_s")
            row["timing_only_cpu_s"] = t.get("simulate_cpu_s")
            row["timing_only_rss_mb"] = t.get("peak_rss_mb")
            if t.get("simulate_cpu_s"):
                row["timing_only_ratio_cpu"] = row["simulate_cpu_s"] / t["simulate_cpu_s"]
            if t.get("simulate_s"):
                row["timing_only_ratio"] = row["simulate_s"] / t["simulate_s"]  # wall: what a sweep waits for
            if "error" in t:
                row["timing_only_error"] = t["error"]
            row["timing_only_load_avg"] = t.get("load_avg")
        out["runs"].append(row)
        if args.json:  # one point at a time: a killed run loses little
            Path(args.json).write_text(json.dumps(out, indent=1))
    if not args.no_bitwise:
        for h in tqdm(presets, desc="ResNet-18 --bitwise"):
            r = repeated(run_point, args.repeat, f"zoo:resnet18?image_size={image}", h, None, "--bitwise")
            out["bitwise"].append({"hw": h, **r})
            if args.json:
                Path(args.json).write_text(json.dumps(out, indent=1))
    if args.quick and not args.no_compile:  # the compile phases of the run above
        out["compile_growth"] = [{**r} for r in out["runs"] if "error" not in r]
    elif not args.no_compile:
        hw = "isaac"
        for m in tqdm(growth_models, desc="compile growth"):
            r = repeated(compile_point, args.repeat, f"zoo:{m}?image_size={growth_image}", hw, "cim-mlc")
            out["compile_growth"].append({"model": m, "hw": hw, **r})
            if args.json:
                Path(args.json).write_text(json.dumps(out, indent=1))

    # ---- print
    med = f"; median of {args.repeat} runs" if args.repeat > 1 else ""
    print(f"\nCompile + simulation at {image}x{image} (python -m tvm_cim run; wall / CPU seconds{med}; "
          f"goals: total < {GOAL_TOTAL_S} s, RSS < {GOAL_RSS_MB} MB, timing-only >= {GOAL_RATIO}x faster)")
    print(f"{'model':9s} {'preset':11s} {'compile':>13s} {'simulate':>15s} {'total':>7s} {'RSS MB':>7s} "
          f"{'t-only':>13s} {'ratio':>6s} {'metaops':>9s} {'passes':>7s} {'us/op':>6s} {'load':>9s}  goals")
    for r in out["runs"]:
        if "error" in r:
            print(f"{r['model']:9s} {r['hw']:11s} ERROR {r['error']}")
            continue
        tot = r["compile_s"] + r["simulate_s"]
        tot_cpu = r["compile_cpu_s"] + r["simulate_cpu_s"]
        ok = [tot < GOAL_TOTAL_S, r["peak_rss_mb"] < GOAL_RSS_MB, r["compile_s"] < GOAL_COMPILE_S]
        ratio = r.get("timing_only_ratio")
        if ratio is not None:
            ok.append(ratio >= GOAL_RATIO)
        t_only = f"{r['timing_only_s']:5.1f}/{r['timing_only_cpu_s']:5.1f}" if r.get("timing_only_s") is not None else "-"
        us_op = 1e6 * r["simulate_cpu_s"] / max(1, r["metaops"])
        print(f"{r['model']:9s} {r['hw']:11s} {r['compile_s']:6.1f}/{r['compile_cpu_s']:6.1f} "
              f"{r['simulate_s']:7.1f}/{r['simulate_cpu_s']:7.1f} {tot:7.1f} {r['peak_rss_mb']:7.0f} {t_only:>13s} "
              f"{(f'{ratio:6.1f}' if ratio else '     -')} {r['metaops']:9d} {r['passes']:7d} {us_op:6.1f} "
              f"{r['load_avg'][0]:4.1f}-{r['load_avg'][1]:<4.1f}  "
              f"{'met' if all(ok) else 'NOT met'} (CPU total {tot_cpu:.1f} s)")
        if r.get("differs"):
            print(f"  WARNING: {', '.join(r['differs'])} changed between the repeated runs")
    ok_runs = [r for r in out["runs"] if "error" not in r and r["metaops"]]
    if len(ok_runs) > 1:  # how the simulation cost grows: CPU seconds per executed meta-operator
        per = sorted(1e6 * r["simulate_cpu_s"] / r["metaops"] for r in ok_runs)
        big = max(ok_runs, key=lambda r: r["metaops"])
        out["growth"] = {"us_per_metaop_min": per[0], "us_per_metaop_median": per[len(per) // 2],
                         "us_per_metaop_max": per[-1], "largest_metaops": big["metaops"],
                         "largest_passes": big["passes"]}
        print(f"simulation cost per executed meta-operator: {per[0]:.1f} .. {per[-1]:.1f} us (median "
              f"{per[len(per) // 2]:.1f}); the largest run executes {big['metaops']} meta-operators "
              f"({big['model']} on {big['hw']}, {big['passes']} passes)")
    if out["bitwise"]:
        print(f"\nResNet-18 {image}x{image} --bitwise (goal: simulate < {GOAL_BITWISE_S} s{med})")
        for r in out["bitwise"]:
            if "error" in r:
                print(f"  {r['hw']:11s} ERROR {r['error']}")
                continue
            print(f"  {r['hw']:11s} simulate {r['simulate_s']:6.1f} s wall / {r['simulate_cpu_s']:6.1f} s CPU, "
                  f"RSS {r['peak_rss_mb']:.0f} MB  {'met' if r['simulate_s'] < GOAL_BITWISE_S else 'NOT met'}")
    if out["compile_growth"]:
        print(f"\nCompile time against the number of layers ({growth_image}x{growth_image}, cim-mlc, calibration "
              f"included; goal ResNet-50 < {GOAL_R50_S} s{med})")
        for r in out["compile_growth"]:
            if "error" in r:
                print(f"  {r['model']:10s} ERROR {r['error']}")
                continue
            name, share = dominant(r["phases"], r["compile_cpu_s"])
            r["dominant_phase"], r["dominant_share"] = name, share
            print(f"  {r['model']:10s} {r['regions']:4d} layers  compile {r['compile_s']:6.1f} s wall / "
                  f"{r['compile_cpu_s']:6.1f} s CPU ({1e3 * r['compile_cpu_s'] / max(1, r['regions']):.0f} ms CPU "
                  f"per layer); dominant pass {name} ({100 * share:.0f}%){_load(r)}")
        for r in out["compile_growth"]:
            if "error" not in r:
                ph = ", ".join(f"{k} {v['cpu_s']:.1f}" for k, v in r["phases"].items())
                print(f"    {r['model']}: {ph}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

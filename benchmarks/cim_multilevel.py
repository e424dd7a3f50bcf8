"""Multi-level scheduling experiments (CIM-MLC, paper 003 Fig. 20-22).

1. ISAAC-like preset, ResNet-18/34/50/101: speedup over ``none`` of graph-level
   duplication, pipeline, both, then adding the crossbar level, then the
   wordline level (the preset run in wordline computing mode).
   Also the peak computing power of each level against PUMA's schedule
   (the ``puma`` strategy) and, for ResNet-18, the speedup against the
   pipeline granularity (chunks per replica).
2. PUMA preset, VGG-16: peak computing power of ``cim-mlc`` (with and without
   the MVM-grained pipeline) against PUMA's schedule (the ``puma`` strategy).
3. ISAAC-like preset, ResNet-18: ``cim-mlc`` against ``greedy`` (Poly-Schedule),
   the ratio split into duplication policy, pipeline and crossbar level
   (also with one bit-serial pass for signed inputs).
4. ViT-Base on the ISAAC-like preset with 128x256 crossbars: sensitivity to
   cores, crossbars per core, crossbar size and parallel rows.
5. Accuracy of the analytical estimate against the simulator's timeline,
   layer by layer, for ResNet-18, ResNet-50 and VGG-16.
6. Compile time of ResNet-50 on the ISAAC-like preset with every optimisation
   (cold: calibration included).
7. ResNet-18 on the ISAAC-like preset: latency against a peak-power cap
   (time-division activation of crossbars, :func:`tvm_cim.report.timeline`).
8. The critical path of graph-P&D and +crossbar on the ISAAC-like preset
   (``--decompose NET``, ResNet-50 by default): per pipelined stage, its
   replicas, its span, and its time on the path as running its own chunks
   and as queued behind earlier chunks on its own crossbars
   (:func:`tvm_cim.simulator.critical.critical_path`); waiting for a
   producer is the producer's time on the path.
9. ResNet-18 on the ISAAC-like preset: graph-P&D's speedup over ``none``
   split into factors measured on the timeline (``--only 9``): the layer
   times of ``none``, the perfect pipeline at P&D's replicas (the slowest
   stage), how far the run is from it, and the bound of all crossbars busy;
   on the preset and on a variant with one bit-serial pass for signed
   inputs (the offset encoding; the paper's 8-bit inputs take one pass).

Latency and power come from the simulator's resource timeline run in
timing-only mode (values are not computed; correctness of every strategy is
covered by the test suite).  Prints tables, saves plots, ``--json`` writes the
figures (rewritten after every model), and ``--before`` prints an earlier run's figures beside these.

    python benchmarks/cim_multilevel.py                   # full size (about 20-30 min)
    python benchmarks/cim_multilevel.py --quick           # small inputs, a few minutes
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tvm_cim  # noqa: E402
from tvm_cim.common import zoo  # noqa: E402
from tvm_cim.common.onnx_io import import_onnx  # noqa: E402
from tvm_cim.compiler import mapping, plan, quantize, strategies  # noqa: E402
from tvm_cim.compiler.estimate import Estimator  # noqa: E402
from tvm_cim.compiler.strategies import Options  # noqa: E402
from tvm_cim.compiler.transform import offload  # noqa: E402
from tvm_cim.report import simulate_timing, timeline  # noqa: E402
from tvm_cim.simulator.critical import critical_path  # noqa: E402

R = dataclasses.replace
ROUNDS = strategies.PIPELINE_ROUNDS  # cim-mlc's pipeline granularity (chunks per replica at least)
VECTORS = strategies.PIPELINE_VECTORS  # ... and output vectors per chunk at most (the paper's sliding window)
_PD = Options(segmentation="refine", duplication="dp", pipeline=True, pipeline_rounds=ROUNDS, pipeline_vectors=VECTORS)
CONFIGS = {
    "none": Options(),
    "graph-dup": Options(segmentation="refine", duplication="dp"),
    "graph-pipe": Options(pipeline=True),
    "graph-P&D": _PD,
    "+xbar Eq.1": R(_PD, crossbar_dup=True, mvm_pipeline=True),  # Eq. 1 only
    "+crossbar": R(_PD, crossbar_dup=True, crossbar_dp=True, mvm_pipeline=True),  # Eq. 1, then the DP on crossbars
    "+wordline": R(_PD, crossbar_dup=True, crossbar_dp=True, mvm_pipeline=True, remap=True),
}
# with --joint: the wordline level with the crossbar DP's cost curve the better of full-height and remapped copies
JOINT = {"+wordline joint": R(CONFIGS["+wordline"], remap_joint=True)}
# the configurations of the previous version of this benchmark (before issue 14): same names, older columns
# (used for a --before file written by that version, i.e. one without '+xbar Eq.1')
BEFORE_NAMES = {"+xbar Eq.1": "+crossbar"}
PAPER = {  # paper 003, Fig. 21 (a)-(c): speedup of P&D over none, crossbar level over P&D, wordline over crossbar
    "graph-P&D": "up to 123x", "xbar/P&D": "1.8x (R-50), 1.4x (R-101)", "wl/xbar": "~1.1x (R-50)",
    "graph-dup": "25.4x (R-18) .. 3.1x (R-101)", "graph-pipe": "2.3x (R-18) .. 4.7x (R-101)",
}
_MODS: dict = {}


def one_pass(hw):
    """The chip with one bit-serial pass for signed inputs (offset encoding; the paper's 8-bit inputs take one)."""
    return R(hw, crossbar=R(hw.crossbar, input_encoding="offset"))


def relax_module(name: str, **kw):
    key = (name, tuple(sorted(kw.items())))
    if key not in _MODS:
        _MODS[key] = import_onnx(zoo.build_model(name, seed=0, **kw), name)[0]
    return _MODS[key]


def measure(mod, hw, strategy: str, options: Options | None) -> dict:
    """Compile with a strategy, run the programs on a timing-only chip, schedule the timeline."""
    t0 = time.perf_counter()
    _, info = offload(mod, hw, strategy=strategy, options=options)
    compile_s = time.perf_counter() - t0
    stats, tl = simulate_timing(info)
    est = Estimator.of(hw, *mapping.precision(hw), info.schedule.options)
    by_name = {r.name: r for r in info.regions}
    linear = []
    for s in stats:  # the MIP form of the cost (Estimator.linear_terms) at the plan's replicas
        pl = info.schedule.plans[s.name]
        linear.append(float(est.linear_terms(by_name[s.name], pl.tile_rows, pl.resident).latency_ns(pl.replicas)))
    return {
        "latency_ns": tl.latency_ns,
        "estimate_ns": info.schedule.estimate_ns,
        "region_linear_ns": linear,
        "region_replicas": [info.schedule.plans[s.name].replicas for s in stats],
        "peak_power_mw": tl.peak_power_mw,
        "segments": info.schedule.segments,
        "compile_s": compile_s,
        "region_sim_ns": [s.latency_ns for s in stats],
        "region_est_ns": [info.schedule.estimate_regions_ns[s.name] for s in stats],
        "crossbars": sum(len(pl.tiles) * len(pl.replicas) for pl in info.chip_map.placements.values()),
        "region_tiles": [len(info.chip_map.placements[s.name].tiles) for s in stats],
    }


def exp1(nets, image, isaac, before: dict, save, joint: bool = False) -> dict:
    wl = R(isaac, chip=R(isaac.chip, computing_mode="wordline"))
    out = {}
    for net in tqdm(nets, desc="exp1 ResNets on ISAAC"):
        mod = relax_module(net, image_size=image)
        row = {}
        for cfg, o in {**CONFIGS, **(JOINT if joint else {})}.items():
            row[cfg] = measure(mod, wl if cfg.startswith("+wordline") else isaac, "cim-mlc", o)
        row["puma"] = measure(mod, isaac, "puma", None)  # the peak-power baseline (PUMA's schedule)
        out[net] = row
        save("exp1", out)
    cols = list(CONFIGS)[1:]
    print("\n[1] ISAAC-like preset: speedup over 'none' (simulated latency); 'was': before issue 14")
    print(f"{'network':10s} " + " ".join(f"{c:>11s}" for c in cols) + f" {'xbar/P&D':>9s} {'wl/xbar':>8s}")
    for net, row in out.items():
        base = row["none"]["latency_ns"]
        sp = {c: base / row[c]["latency_ns"] for c in CONFIGS}
        print(f"{net:10s} " + " ".join(f"{sp[c]:10.2f}x" for c in cols)
              + f" {sp['+crossbar'] / sp['graph-P&D']:8.2f}x {sp['+wordline'] / sp['+crossbar']:7.2f}x")
        old = before.get(net)
        if old:
            ob = old["none"]["latency_ns"]
            names = {} if "+xbar Eq.1" in old else BEFORE_NAMES  # a run of this version keeps its own names
            osp = {c: ob / old[names.get(c, c)]["latency_ns"] for c in cols if names.get(c, c) in old}
            print(f"{'  was':10s} " + " ".join(f"{osp[c]:10.2f}x" if c in osp else f"{'':>11s}" for c in cols)
                  + f" {osp['+crossbar'] / osp['graph-P&D']:8.2f}x {osp['+wordline'] / osp['+crossbar']:7.2f}x")
    for net, row in out.items():  # the wordline level acts only where a region's crossbars hold a remapped copy
        xb = row["+crossbar"]
        for cfg in ("+wordline", "+wordline joint"):
            if cfg in row:
                rem = sum(a != b for a, b in zip(xb["region_tiles"], row[cfg]["region_tiles"]))
                print(f"  {net}: {cfg} remaps {rem} of {len(xb['region_tiles'])} regions; at +crossbar "
                      f"{sum(d == 1 for d in xb['region_replicas'])} regions hold one copy, "
                      f"{xb['crossbars']} of {isaac.total_crossbars} crossbars in use")
        if "+wordline joint" in row:
            print(f"  {net}: +wordline with remap_joint {row['none']['latency_ns'] / row['+wordline joint']['latency_ns']:.2f}x "
                  f"over none, {row['+crossbar']['latency_ns'] / row['+wordline joint']['latency_ns']:.2f}x over +crossbar")
    print("  paper (Fig. 21): " + "; ".join(f"{k} {v}" for k, v in PAPER.items()))
    print(f"  graph-P&D and beyond pipeline {VECTORS} output vector(s) at a time (at most {plan.MAX_CHUNKS} chunks "
          f"per region; before issue 14 s6: output rows) and at least {ROUNDS} chunks per replica; "
          "'+xbar Eq.1' fills the cores an operator holds (Eq. 1, the old '+crossbar'); '+crossbar' then re-runs "
          "the DP at crossbar granularity")
    print("\n[1b] ISAAC-like preset: peak computing power (crossbars, DACs, ADCs active at once), W; "
          "normalised to PUMA's schedule ('puma': pipeline, no duplication)")
    print(f"{'network':10s} {'puma W':>9s} {'graph-P&D':>10s} {'+crossbar':>10s} {'xbar vs P&D':>12s}")
    for net, row in out.items():
        pp = row["puma"]["peak_power_mw"]
        pd, xb = row["graph-P&D"]["peak_power_mw"], row["+crossbar"]["peak_power_mw"]
        print(f"{net:10s} {pp / 1e3:9.3f} {pd / pp:9.2f}x {xb / pp:9.2f}x {100 * (xb / pd - 1):+11.1f}%")
    print("  paper (Fig. 21 d): CG-level raises peak power 5x to 16x; the MVM-grained level lowers it by up to 85% (R-101)")
    return out


def exp1_rounds(image, isaac, save) -> dict:
    """ResNet-18 graph-level P&D at several pipeline granularities: output rows with at least k chunks per
    replica, then at most v output vectors per chunk (8 per replica at least)."""
    mod = relax_module("resnet18", image_size=image)
    base = measure(mod, isaac, "cim-mlc", CONFIGS["none"])["latency_ns"]
    out = {}
    grains = [(f"rows, {k}/replica", R(_PD, pipeline_rounds=k, pipeline_vectors=0)) for k in (1, 8)]
    grains += [(f"{v} vector{'s' if v > 1 else ''}", R(_PD, pipeline_vectors=v)) for v in (16, 4, 1)]
    for name, o in grains:
        m = measure(mod, isaac, "cim-mlc", o)
        out[name] = {"latency_ns": m["latency_ns"], "estimate_ns": m["estimate_ns"], "speedup": base / m["latency_ns"]}
        save("exp1_rounds", out)
    print("\n[1c] ResNet-18 (ISAAC-like), graph-level P&D against the pipeline granularity (chunks)")
    for k, r in out.items():
        print(f"  {k:16s}: {r['latency_ns'] / 1e6:7.3f} ms  speedup {r['speedup']:6.1f}x  "
              f"(estimate {r['estimate_ns'] / 1e6:7.3f} ms)")
    return out


def exp2(image, puma, before: dict) -> dict:
    mod = relax_module("vgg16", image_size=image)
    base = measure(mod, puma, "puma", None)  # PUMA's own schedule, the paper's baseline
    on = measure(mod, puma, "cim-mlc", None)
    off = measure(mod, puma, "cim-mlc", R(strategies.get("cim-mlc").options(puma), mvm_pipeline=False))
    print("\n[2] PUMA preset, VGG-16: peak computing power against PUMA's schedule ('puma' strategy)")
    for name, r in (("puma (baseline)", base), ("cim-mlc without MVM pipeline", off), ("cim-mlc", on)):
        print(f"  {name:30s} {r['peak_power_mw'] / 1e3:9.3f} W  ({100 * (r['peak_power_mw'] / base['peak_power_mw'] - 1):+6.1f}%)"
              f"   latency {r['latency_ns'] / 1e6:8.3f} ms")
    if before:
        print(f"  was: cim-mlc {before['with']['peak_power_mw'] / 1e3:.3f} W, {before['with']['latency_ns'] / 1e6:.3f} ms; "
              f"without MVM pipeline {before['without']['latency_ns'] / 1e6:.3f} ms")
    print("  paper (Fig. 20 b): -75% against PUMA's schedule")
    caps = cap_sweep(mod, puma, base["peak_power_mw"])
    print("  cim-mlc under a peak-power cap (time-division activation of crossbars):")
    print_caps(caps)
    return {"with": on, "without": off, "puma": base, "caps": caps}


def cap_sweep(mod, hw, ref_mw: float, fracs=(0.75, 0.5, 0.25, 0.1, 0.05)) -> dict:
    """``cim-mlc`` compiled once, its timeline scheduled under peak-power caps (fractions of its own peak)."""
    _, info = offload(mod, hw, strategy="cim-mlc")
    stats, free = simulate_timing(info)
    out = {"puma_peak_mw": ref_mw, "uncapped": {"latency_ns": free.latency_ns, "peak_power_mw": free.peak_power_mw},
           "caps": []}
    for frac in fracs:
        tl = timeline(info, stats, power_cap_mw=frac * free.peak_power_mw)
        out["caps"].append({"cap_mw": frac * free.peak_power_mw, "fraction": frac, "latency_ns": tl.latency_ns,
                            "peak_power_mw": tl.peak_power_mw})
    return out


def print_caps(out: dict) -> None:
    free, ref = out["uncapped"], out["puma_peak_mw"]
    print(f"  uncapped: peak {free['peak_power_mw'] / 1e3:8.3f} W  latency {free['latency_ns'] / 1e6:7.3f} ms   "
          f"(PUMA's schedule: peak {ref / 1e3:.3f} W)")
    for c in out["caps"]:
        print(f"  cap {c['cap_mw'] / 1e3:8.3f} W ({100 * c['fraction']:3.0f}%, {100 * (c['cap_mw'] / ref - 1):+5.0f}% vs puma): "
              f"peak {c['peak_power_mw'] / 1e3:8.3f} W  latency {c['latency_ns'] / 1e6:7.3f} ms "
              f"({c['latency_ns'] / free['latency_ns']:5.2f}x)")


def exp7(image, isaac, save) -> dict:
    """Latency against a peak-power cap (time-division activation of crossbars), ResNet-18, ISAAC-like."""
    mod = relax_module("resnet18", image_size=image)
    out = cap_sweep(mod, isaac, measure(mod, isaac, "puma", None)["peak_power_mw"])
    print("\n[7] ResNet-18 (ISAAC-like), cim-mlc under a peak-power cap (time-division activation of crossbars)")
    print_caps(out)
    return out


def exp8(net: str, image, isaac, save) -> dict:
    """The critical path of graph-P&D and +crossbar, stage by stage (what the crossbar level can shorten)."""
    mod = relax_module(net, image_size=image)
    out = {}
    for cfg in ("graph-P&D", "+crossbar"):
        _, info = offload(mod, isaac, strategy="cim-mlc", options=CONFIGS[cfg])
        stats, tl = simulate_timing(info)
        cp = critical_path([(s.name, s.events, s.segment) for s in stats if s.events is not None], info.producers,
                           bool(info.schedule.options.pipeline), tl)
        chunks = {p.name: int(p.attr("chunks")) for p in info.programs}
        stages = []
        for s in stats:
            r = cp["regions"][s.name]
            stages.append({"name": s.name, "replicas": len(info.chip_map.placements[s.name].replicas),
                           "tiles": len(info.chip_map.placements[s.name].tiles),
                           "chunks": chunks.get(s.name, 0), **{k: v for k, v in r.items() if k != "entered"},
                           "entered": sorted(set(r["entered"]))})
        held = {x // isaac.core.crossbars for pl in info.chip_map.placements.values() for rep in pl.replicas for x in rep}
        out[cfg] = {"latency_ns": tl.latency_ns, "path_ns": cp["path_ns"], "edges_ns": cp["edges"], "stages": stages,
                    "crossbars": sum(len(pl.tiles) * len(pl.replicas) for pl in info.chip_map.placements.values()),
                    "cores_held": len(held), "segments": info.schedule.segments}
        save("exp8", out)
    print(f"\n[8] {net} ({image}x{image}, ISAAC-like, signed inputs {isaac.crossbar.input_encoding}): critical path per pipelined stage, us "
          "(run: its own chunks on the path; queue: earlier chunks ahead on its own crossbars)")
    pd, xb = out["graph-P&D"], out["+crossbar"]
    print(f"{'stage':24s} {'P&D rep':>7s} {'chunks':>6s} {'span':>8s} {'run':>7s} {'queue':>7s} |"
          f" {'+xb rep':>7s} {'chunks':>6s} {'span':>8s} {'run':>7s} {'queue':>7s}")
    for a, b in zip(pd["stages"], xb["stages"]):
        print(f"{a['name'].split('.')[-1]:24s} {a['replicas']:7d} {a['chunks']:6d} {a['span_ns'] / 1e3:8.1f} "
              f"{a['run_ns'] / 1e3:7.1f} {a['queue_ns'] / 1e3:7.1f} | {b['replicas']:7d} {b['chunks']:6d} "
              f"{b['span_ns'] / 1e3:8.1f} {b['run_ns'] / 1e3:7.1f} {b['queue_ns'] / 1e3:7.1f}")
    for cfg, r in out.items():
        run = sum(st["run_ns"] for st in r["stages"])
        queue = sum(st["queue_ns"] for st in r["stages"])
        on = sum(st["path_ns"] > 0 for st in r["stages"])
        print(f"  {cfg:10s} latency {r['latency_ns'] / 1e3:9.1f} us = path {r['path_ns'] / 1e3:9.1f} us over {on} stages: "
              f"run {run / 1e3:8.1f} us, queue on own crossbars {queue / 1e3:8.1f} us; edges "
              + ", ".join(f"{k} {v / 1e3:.1f}" for k, v in sorted(r["edges_ns"].items())) + f"; crossbars {r['crossbars']}"
              f" of {isaac.total_crossbars} in {r['cores_held']} of {isaac.chip.cores} cores")
    print(f"  crossbar over P&D {pd['latency_ns'] / xb['latency_ns']:.2f}x (paper 1.8x on ResNet-50, 1.4x on ResNet-101)")
    gain = sorted(zip(pd["stages"], xb["stages"]), key=lambda ab: ab[1]["path_ns"] - ab[0]["path_ns"])[:3]
    print(f"  path shortened by {(pd['latency_ns'] - xb['latency_ns']) / 1e3:.1f} us; most on: " + ", ".join(
        f"{a['name'].split('.')[-1]} {a['path_ns'] / 1e3:.1f} -> {b['path_ns'] / 1e3:.1f} us ({a['tiles']} crossbars "
        f"per copy, replicas {a['replicas']} -> {b['replicas']})" for a, b in gain))
    return out


def exp9(image, isaac, save) -> dict:
    """Graph-P&D's speedup over ``none`` on ResNet-18, in factors measured on the timeline.

    ``speedup = none / P&D = (none / stage) x (stage / P&D)``: ``stage`` is the
    perfect pipeline at P&D's replicas (the slowest region's ``none`` time over
    its replicas: what duplication allows), ``stage / P&D`` how close the run
    comes to it.  ``work`` is the bound of every crossbar of the chip busy
    (sum over regions of ``none`` time x crossbars of one copy, over the
    chip's crossbars).  ``graph-pipe`` runs at P&D's granularity here.
    """
    mod = relax_module("resnet18", image_size=image)
    variants = {"isaac": isaac,  # signed inputs (the first convolution's) in two unsigned phases (the preset)
                "isaac, signed inputs in one pass": one_pass(isaac)}
    cfgs = {"none": CONFIGS["none"], "graph-dup": CONFIGS["graph-dup"],
            "graph-pipe": R(_PD, segmentation=CONFIGS["none"].segmentation, duplication="none"),
            "graph-P&D": CONFIGS["graph-P&D"],
            "graph-P&D, row chunks": R(_PD, pipeline_vectors=0)}  # before issue 14 s6: output rows per chunk
    out = {}
    for name, hw in variants.items():
        row = {c: measure(mod, hw, "cim-mlc", o) for c, o in cfgs.items()}
        t = np.array(row["none"]["region_sim_ns"])
        reps = np.array(row["graph-P&D"]["region_replicas"])
        stage = float((t / reps).max())
        work = float((t * np.array(row["none"]["region_tiles"])).sum() / hw.total_crossbars)
        none, pd = row["none"]["latency_ns"], row["graph-P&D"]["latency_ns"]
        out[name] = {"latency_ns": {c: r["latency_ns"] for c, r in row.items()}, "stage_ns": stage, "work_ns": work,
                     "first_layer_share": float(t[0] / none), "slowest_stage": int((t / reps).argmax()),
                     "crossbars_pd": row["graph-P&D"]["crossbars"], "crossbars_one_copy": row["none"]["crossbars"],
                     "chip_crossbars": hw.total_crossbars, "speedup": none / pd, "dup_bound": none / stage,
                     "pipe_efficiency": stage / pd, "work_bound": none / work,
                     "pipe_efficiency_rows": stage / row["graph-P&D, row chunks"]["latency_ns"],
                     "region_none_ns": t.tolist(), "region_replicas_pd": reps.tolist()}
        save("exp9", out)
    print(f"\n[9] ResNet-18 ({image}x{image}), graph-P&D over none = (none / perfect-pipeline stage) x "
          "(stage / P&D); paper (Fig. 21 a): up to 123x, graph-dup 25.4x, graph-pipe 2.3x")
    for name, r in out.items():
        lat = r["latency_ns"]
        print(f"  {name}: none {lat['none'] / 1e6:8.2f} ms (first convolution {100 * r['first_layer_share']:4.1f}%), "
              f"graph-dup {lat['none'] / lat['graph-dup']:6.1f}x, graph-pipe {lat['none'] / lat['graph-pipe']:5.2f}x, "
              f"P&D {lat['graph-P&D'] / 1e6:6.3f} ms = {r['speedup']:6.1f}x = {r['dup_bound']:6.1f}x "
              f"(none / slowest stage {r['stage_ns'] / 1e6:.3f} ms, region {r['slowest_stage']}) x "
              f"{r['pipe_efficiency']:.3f} (stage / P&D); all {r['chip_crossbars']} crossbars busy: "
              f"{r['work_bound']:6.1f}x; P&D holds {r['crossbars_pd']} crossbars (one copy {r['crossbars_one_copy']}); "
              f"P&D with output-row chunks {lat['none'] / lat['graph-P&D, row chunks']:6.1f}x "
              f"(stage / P&D {r['pipe_efficiency_rows']:.3f})")
    return out


def exp3(image, isaac, before: dict, save=None) -> dict:
    """``cim-mlc`` against ``greedy`` (Poly-Schedule) on ResNet-18, and the ratio split into measured factors.

    ``greedy / cim-mlc = (greedy / dp-dup) x (dp-dup / P&D) x (P&D / cim-mlc)``:
    the duplication policy (Poly-Schedule's greedy against CIM-MLC's DP, both
    layer after layer), the inter-layer pipeline (``cim-mlc``'s graph level at
    its own granularity) and the crossbar level (Eq. 1, the DP on crossbars,
    the MVM pipeline).  ``greedy+pipe`` is the other order: greedy's replicas
    pipelined.  Greedy's latency is set against the serial sum of its layer
    times and its slowest layer.  The same on the variant with one bit-serial
    pass for signed inputs (experiment 9).  Paper (Fig. 20 d): Poly-Schedule
    cuts 84% of the cycles of no optimisation (6.25x), CIM-MLC up to 95%
    (20x), 3.2x between them.
    """
    mod = relax_module("resnet18", image_size=image)
    res = {s: measure(mod, isaac, s, None) for s in ("none", "greedy", "puma", "cim-mlc")}
    base = res["none"]["latency_ns"]
    print("\n[3] ISAAC-like preset, ResNet-18: strategies")
    for s, r in res.items():
        was = f"   (was {before[s]['latency_ns'] / 1e6:9.3f} ms)" if s in before else ""
        print(f"  {s:8s} latency {r['latency_ns'] / 1e6:9.3f} ms  speedup over none {base / r['latency_ns']:7.2f}x{was}")
    was = (f" (was {before['greedy']['latency_ns'] / before['cim-mlc']['latency_ns']:.2f}x)"
           if "greedy" in before and "cim-mlc" in before else "")
    print(f"  cim-mlc over greedy: {res['greedy']['latency_ns'] / res['cim-mlc']['latency_ns']:.2f}x{was} (paper: 3.2x)")
    variants = {"isaac": isaac, "isaac, signed inputs in one pass": one_pass(isaac)}
    cim = strategies.get("cim-mlc").options(isaac)
    steps = {"none": ("none", None), "greedy": ("greedy", None),
             "greedy+pipe": ("greedy", R(strategies.get("greedy").options(isaac), pipeline=True,
                                         pipeline_rounds=cim.pipeline_rounds, pipeline_vectors=cim.pipeline_vectors)),
             "dp-dup": ("cim-mlc", CONFIGS["graph-dup"]),
             "P&D": ("cim-mlc", R(cim, crossbar_dup=False, crossbar_dp=False, mvm_pipeline=False, remap=False)),
             "cim-mlc": ("cim-mlc", None)}
    dec = {}
    for name, hw in variants.items():
        row = {k: (res[k] if hw is isaac and k in res else measure(mod, hw, s, o)) for k, (s, o) in steps.items()}
        lat = {k: r["latency_ns"] for k, r in row.items()}
        g = np.array(row["greedy"]["region_sim_ns"])
        dec[name] = {"latency_ns": lat, "ratio": lat["greedy"] / lat["cim-mlc"],
                     "dup_policy": lat["greedy"] / lat["dp-dup"], "pipeline": lat["dp-dup"] / lat["P&D"],
                     "crossbar_level": lat["P&D"] / lat["cim-mlc"],
                     "greedy_pipe": lat["greedy"] / lat["greedy+pipe"], "rest": lat["greedy+pipe"] / lat["cim-mlc"],
                     "greedy_serial_ns": float(g.sum()), "greedy_slowest_ns": float(g.max()),
                     "greedy_slowest_region": int(g.argmax()), "greedy_first_share": float(g[0] / lat["greedy"]),
                     "greedy_replicas": row["greedy"]["region_replicas"], "dp_replicas": row["dp-dup"]["region_replicas"],
                     "crossbars": {k: r["crossbars"] for k, r in row.items()}}
        if save:
            save("exp3", {**res, "decomposition": dec})
    print("  greedy / cim-mlc = (greedy / dp-dup: duplication policy) x (dp-dup / P&D: pipeline) x "
          "(P&D / cim-mlc: crossbar level)")
    for name, d in dec.items():
        lat = d["latency_ns"]
        print(f"  {name}: none {lat['none'] / 1e6:8.2f} ms, greedy {lat['greedy'] / 1e6:7.3f} ms "
              f"({lat['none'] / lat['greedy']:5.1f}x over none, paper 6.25x; serial sum of its layers "
              f"{d['greedy_serial_ns'] / 1e6:7.3f} ms, slowest layer {d['greedy_slowest_ns'] / 1e6:6.3f} ms "
              f"(region {d['greedy_slowest_region']}), first convolution {100 * d['greedy_first_share']:4.1f}%), "
              f"cim-mlc {lat['cim-mlc'] / 1e6:6.3f} ms ({lat['none'] / lat['cim-mlc']:6.1f}x over none, paper 20x)")
        print(f"    cim-mlc over greedy {d['ratio']:5.2f}x = {d['dup_policy']:5.2f} x {d['pipeline']:5.2f} x "
              f"{d['crossbar_level']:5.2f}; other order: greedy+pipe {d['greedy_pipe']:5.2f}x over greedy, "
              f"cim-mlc {d['rest']:5.2f}x over greedy+pipe; crossbars " +
              ", ".join(f"{k} {v}" for k, v in d["crossbars"].items()))
    res["decomposition"] = dec
    return res


def exp4(isaac, vit_kw, quick: bool) -> dict:
    base_hw = R(isaac, crossbar=R(isaac.crossbar, cols=256))
    mod = relax_module("vit_base", **vit_kw)
    sweeps = {
        "cores": [("cores", v) for v in ([256, 512, 768, 1024] if not quick else [256, 768])],
        "crossbars_per_core": [("crossbars", v) for v in ([8, 16, 32] if not quick else [8, 16])],
        "crossbar_size": [("size", v) for v in ([(64, 512), (128, 256), (256, 128), (512, 64)] if not quick else [(128, 256), (256, 128)])],
        "parallel_rows": [("rows_active", v) for v in ([8, 16, 32, 64, 128] if not quick else [8, 32])],
    }
    levels = {"none": CONFIGS["none"], "graph": CONFIGS["graph-P&D"], "+crossbar": CONFIGS["+crossbar"], "+wordline": CONFIGS["+wordline"]}
    out = {}
    jobs = [(k, p) for k, ps in sweeps.items() for p in ps]
    for k, (field, val) in tqdm(jobs, desc="exp4 ViT sensitivity"):
        hw = base_hw
        if field == "cores":
            hw = R(hw, chip=R(hw.chip, cores=val))
        elif field == "crossbars":
            hw = R(hw, core=R(hw.core, crossbars=val))
        elif field == "size":
            hw = R(hw, crossbar=R(hw.crossbar, rows=val[0], cols=val[1], rows_active=min(hw.crossbar.rows_active, val[0])))
        else:
            hw = R(hw, crossbar=R(hw.crossbar, rows_active=val))
        row = {}
        for lvl, o in levels.items():
            h = R(hw, chip=R(hw.chip, computing_mode="wordline")) if lvl == "+wordline" else hw
            row[lvl] = measure(mod, h, "cim-mlc", o)["latency_ns"]
        out.setdefault(k, []).append({"value": val, **{lvl: row["none"] / row[lvl] for lvl in levels}})
    print("\n[4] ViT-Base on ISAAC-like (128x256 crossbars): speedup over 'none'")
    for k, rows in out.items():
        print(f"  {k}:")
        for r in rows:
            print(f"    {str(r['value']):12s} graph {r['graph']:8.2f}x  +crossbar {r['+crossbar']:8.2f}x  +wordline {r['+wordline']:8.2f}x")
    return out


def exp5(image, isaac) -> dict:
    out = {}
    print("\n[5] analytical estimate vs simulator timeline, per layer (accuracy = 1 - |est - sim| / sim)")
    for net in tqdm(["resnet18", "resnet50", "vgg16"], desc="exp5 estimate accuracy"):
        mod = relax_module(net, image_size=image)
        row = {}
        for strat in ("none", "cim-mlc"):
            m = measure(mod, isaac, strat, None)
            sim, est = np.array(m["region_sim_ns"]), np.array(m["region_est_ns"])
            acc = 1 - np.abs(est - sim) / sim
            lin = np.abs(np.array(m["region_linear_ns"]) - sim) / sim  # MIP-form (linearised) cost vs simulator
            dup = np.array(m["region_replicas"]) > 1
            row[strat] = {
                "layer_accuracy_mean": float(acc.mean()),
                "layer_accuracy_min": float(acc.min()),
                "end_to_end_accuracy": float(1 - abs(m["estimate_ns"] - m["latency_ns"]) / m["latency_ns"]),
                "linear_error_mean": float(lin.mean()),
                "linear_error_max": float(lin.max()),
                "linear_error_mean_replicated": float(lin[dup].mean()) if dup.any() else None,
            }
            dup_text = f"{100 * lin[dup].mean():5.1f}% on {int(dup.sum())} replicated" if dup.any() else "none replicated"
            print(f"  {net:9s} {strat:8s} per-layer mean {100 * acc.mean():5.1f}%  worst {100 * acc.min():5.1f}%  "
                  f"end-to-end {100 * row[strat]['end_to_end_accuracy']:5.1f}%  | linear terms: error mean "
                  f"{100 * lin.mean():5.1f}%, max {100 * lin.max():5.1f}% ({dup_text})")
        out[net] = row
    print("  MIREDO reports 95.5% for its model")
    return out


def exp6(image, isaac) -> dict:
    from tvm import relax

    mod = relax_module("resnet50", image_size=image)
    quantize._CACHE.clear()  # cold: calibration included
    t0 = time.perf_counter()
    offload(mod, isaac, strategy="cim-mlc")
    s_offload = time.perf_counter() - t0
    quantize._CACHE.clear()
    t0 = time.perf_counter()
    with tvm_cim.scheduling("cim-mlc"):
        relax.build(mod, target="cim -hw=isaac")  # the whole build: offload pass, TVM pipeline, llvm host code
    s = time.perf_counter() - t0
    print(f"\n[6] compile time, ResNet-50 ({image}x{image}) on ISAAC-like, cim-mlc, cold: relax.build {s:.1f} s "
          f"(target < 30 s); the CIM offload pass alone, measured separately: {s_offload:.1f} s")
    return {"compile_s": s, "offload_s": s_offload}


def plots(res: dict, out_dir: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    if "exp1" in res:
        fig, ax = plt.subplots(figsize=(8, 4))
        nets = list(res["exp1"])
        cfgs = [c for c in CONFIGS if c != "none"]
        w = 0.8 / len(cfgs)
        for i, c in enumerate(cfgs):
            ax.bar(np.arange(len(nets)) + i * w, [res["exp1"][n]["none"]["latency_ns"] / res["exp1"][n][c]["latency_ns"] for n in nets], w, label=c)
        ax.set_xticks(np.arange(len(nets)) + 0.4 - w / 2, nets)
        ax.set_yscale("log")
        ax.set_ylabel("speedup over none")
        ax.legend(fontsize=8)
        ax.set_title("CIM-MLC levels on the ISAAC-like preset")
        f = out_dir / "cim_multilevel_speedup.png"
        fig.tight_layout()
        fig.savefig(f, dpi=120)
        files.append(str(f))
    if "exp7" in res:
        fig, ax = plt.subplots(figsize=(5, 3.5))
        caps = res["exp7"]["caps"]
        free = res["exp7"]["uncapped"]
        ax.plot([free["peak_power_mw"] / 1e3] + [c["cap_mw"] / 1e3 for c in caps],
                [free["latency_ns"] / 1e6] + [c["latency_ns"] / 1e6 for c in caps], marker="o")
        ax.axvline(res["exp7"]["puma_peak_mw"] / 1e3, ls="--", c="gray", label="puma schedule's peak")
        ax.set_xscale("log")
        ax.set_xlabel("peak-power cap (W)")
        ax.set_ylabel("latency (ms)")
        ax.set_title("ResNet-18, ISAAC-like, cim-mlc")
        ax.legend(fontsize=8)
        f = out_dir / "cim_multilevel_power_cap.png"
        fig.tight_layout()
        fig.savefig(f, dpi=120)
        files.append(str(f))
    if "exp4" in res:
        fig, axs = plt.subplots(1, len(res["exp4"]), figsize=(14, 3.5))
        for ax, (k, rows) in zip(np.atleast_1d(axs), res["exp4"].items()):
            xs = [str(r["value"]) for r in rows]
            for lvl in ("graph", "+crossbar", "+wordline"):
                ax.plot(xs, [r[lvl] for r in rows], marker="o", label=lvl)
            ax.set_title(k)
            ax.set_ylabel("speedup over none")
            ax.tick_params(axis="x", labelrotation=30)
        np.atleast_1d(axs)[0].legend(fontsize=8)
        fig.tight_layout()
        f = out_dir / "cim_multilevel_vit_sensitivity.png"
        fig.savefig(f, dpi=120)
        files.append(str(f))
    return files


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small inputs and fewer sweep points")
    ap.add_argument("--only", nargs="*", type=int, help="experiment numbers to run")
    ap.add_argument("--image", type=int, help="image size of the CNNs (default 224, 64 with --quick)")
    ap.add_argument("--json", help="write all figures to this file (rewritten after every model)")
    ap.add_argument("--before", help="a JSON of an earlier run: its figures are printed beside these")
    ap.add_argument("--plots", help="folder for the PNG plots (none are written without it)")
    ap.add_argument("--decompose", default="resnet50", help="network of experiment 8 (critical path)")
    ap.add_argument("--one-pass", action="store_true", help="experiment 8 on the variant with one bit-serial pass "
                    "for signed inputs (the offset encoding, as experiment 9's)")
    ap.add_argument("--nets", nargs="*", help="networks of experiment 1 (default ResNet-18/34/50/101; the "
                    "granularity sweep runs when ResNet-18 is among them)")
    ap.add_argument("--joint", action="store_true", help="experiment 1 also runs +wordline with remap_joint")
    args = ap.parse_args()
    image = args.image or (64 if args.quick else 224)
    nets = args.nets or (["resnet18", "resnet50"] if args.quick else ["resnet18", "resnet34", "resnet50", "resnet101"])
    unknown = sorted(set(nets) - set(zoo.MODELS))
    if unknown:
        ap.error(f"unknown networks {unknown}")
    vit_kw = dict(image_size=64, patch_size=16, depth=4) if args.quick else {}
    isaac, puma = tvm_cim.load("isaac"), tvm_cim.load("puma")
    before = json.loads(Path(args.before).read_text()) if args.before else {}
    todo = set(args.only or range(1, 8))  # 8 (the critical path) and 9 (P&D's factors) run when asked for
    res = {}

    def save(key, value):
        res[key] = value
        if args.json:
            Path(args.json).write_text(json.dumps(res, indent=2, default=str))

    if 6 in todo:
        save("exp6", exp6(image, isaac))
    if 1 in todo:
        save("exp1", exp1(nets, image, isaac, before.get("exp1", {}), save, args.joint))
        if "resnet18" in nets:
            save("exp1_rounds", exp1_rounds(image, isaac, save))
    if 2 in todo:
        save("exp2", exp2(image, puma, before.get("exp2", {})))
    if 3 in todo:
        save("exp3", exp3(image, isaac, before.get("exp3", {}), save))
    if 7 in todo:
        save("exp7", exp7(image, isaac, save))
    if 5 in todo:
        save("exp5", exp5(image, isaac))
    if 8 in todo:
        save("exp8", exp8(args.decompose, image, one_pass(isaac) if args.one_pass else isaac, save))
    if 9 in todo:
        save("exp9", exp9(image, isaac, save))
    if 4 in todo:
        save("exp4", exp4(isaac, vit_kw, args.quick))
    if args.plots:
        out_dir = Path(args.plots)
        out_dir.mkdir(parents=True, exist_ok=True)
        for f in plots(res, out_dir):
            print(f"plot: {f}")
    if args.json:
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Dual-mode CIM experiments (CMSwitch, paper 000 sec. 5) on the ``dynaplasia`` preset.

1. Fig. 14: latency speedup of ``cmswitch`` over ``cim-mlc``, ``puma`` and
   ``none`` on the paper's seven models: MobileNetV2, ResNet-18, VGG-16
   (ImageNet size), BERT-large, LLaMA2-7B, OPT-6.7B and OPT-13B (prefill of
   64 tokens, batch 1); geometric mean and maximum over ``cim-mlc`` (paper:
   1.31x average, 2.03x maximum); an ablation runs ``cmswitch`` with no
   switchable array (its segmentation and duplication alone) to separate
   what memory mode adds; the estimate's error against the simulator.
2. Switch overhead: time share of mode switches, weight rewrites (fetch +
   programming) and write-backs in ``cmswitch``'s run (paper: switches
   3-5%).
3. Fig. 15: arrays in compute and memory mode per segment.
4. Compile time of ``cmswitch`` against ``cim-mlc`` (paper: 2.8-6.3x),
   calibration excluded (warm).
5. Sensitivity: speedup over ``cim-mlc`` on ResNet-18 as the off-chip
   bandwidth grows and as the array write latency grows (Table 2 gives
   neither; the preset assumes 64 b/cycle and 5 ns per row).
6. Scalability: the BERT-large layer on the ``prime`` preset (paper sec. 5.5: 1.48x).
7. ``--seq-sweep``: the four transformers at other sequence lengths (Fig. 16).
7b. ``--batches``: Fig. 14 at several batch sizes.  The paper's per-model
   ranges and its 1.31x average are over batch sizes ("consistently showing
   advantages across various batch sizes", sec. 5.2; the sizes are not
   given): per model the range and the mean over the batches, over all
   points the arithmetic and geometric means, as the paper's protocol; the
   batch-1 table [1] stays the headline of one configuration.
8. ``--bound``: per model, a latency no allocation of the chip can beat
   (:func:`tvm_cim.compiler.estimate.latency_lower_bound`: the off-chip link
   busy with every non-resident weight and every activation no memory-mode
   allocation can hold, the arrays busy with every read and
   rewrite), the speedup over ``cim-mlc`` it allows, and the link's busy time
   by operation kind (weight fetches, activation loads/stores off-chip).

Transformers are timed as one layer (weights of that layer only: 12.6 M to
315 M) with the whole model's latency the layer's times the layer count
(24, 32, 32, 40), so the speedup is the layer's.  This is exact for the
single-mode strategies: every layer streams its weights (one layer exceeds
the chip's 1.2 M), segments run one after another, and a layer's last
operator and the next layer's first each exceed the chip, so no segment
spans a layer boundary.  ``cmswitch`` splits such operators into passes
over a serial segment, which may span the boundary (the next layer's first
weights fetched while the last pass computes): the whole model is then a
little faster than L x one layer, so the speedup printed errs against
``cmswitch`` (by 0.26% on the small 3-layer model of
``tests/test_cmswitch.py::test_one_layer_times_layer_count_equals_the_whole_model``,
which checks both; the benchmark checks the layer streams).
OPT layers use ``bert_layer`` with OPT's sizes: the crossbar regions (Q, K,
V, QK^T, AV, output projection, two FFN matrices) are the same; LayerNorm
placement and the activation run on the host, which is not timed.

Latency comes from the simulator's resource timeline in timing-only mode
(values are not computed; bit-exactness of ``cmswitch`` against the other
strategies is covered by ``tests/test_cmswitch.py``).  Prints tables, saves
plots, ``--json`` writes every figure.

    python benchmarks/cmswitch.py                 # full size (ImageNet 224, transformers at seq 64)
    python benchmarks/cmswitch.py --quick         # 32x32 images, small transformer layers
    python benchmarks/cmswitch.py --models llama2_7b_layer --no-sweep --seq-sweep 64 256 1024 2048
    python benchmarks/cmswitch.py --merge f14_*.json --bound   # the bounds of earlier --json runs
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import math
import resource
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tvm_cim  # noqa: E402
from tvm_cim.common import zoo  # noqa: E402
from tvm_cim.common.onnx_io import import_onnx  # noqa: E402
from tvm_cim.compiler import quantize  # noqa: E402
from tvm_cim.compiler.estimate import latency_lower_bound  # noqa: E402
from tvm_cim.compiler.transform import offload  # noqa: E402
from tvm_cim.report import build_report, simulate_timing  # noqa: E402

R = dataclasses.replace
STRATEGIES = ["none", "puma", "cim-mlc", "cmswitch"]
PAPER = {"geomean_vs_cim_mlc": 1.31, "max_vs_cim_mlc": 2.03, "switch_share": (0.03, 0.05),
         "compile_ratio": (2.8, 6.3), "prime_bert": 1.48,
         "fig14_ranges": {"mobilenetv2": (1.06, 1.23), "resnet18": (1.07, 1.23), "vgg16": (1.32, 1.48),
                          "bert_large_layer": (1.02, 1.25), "llama2_7b_layer": (1.13, 1.30),
                          "opt_13b_layer": (1.20, 2.03), "opt_6.7b_layer": (1.23, 1.50)},  # OPT-6.7B: Fig. 16
         "fig16_llama2_7b": (1.25, 1.08)}
_MODS: dict = {}


LLM_SEQ = 64


def transformer_models(quick: bool, seq: int = LLM_SEQ) -> dict:
    """The paper's transformers, one layer each (prefill of ``seq`` tokens, batch 1) and their layer count.

    Name -> (zoo model, its arguments, layers of the whole model).
    """
    if quick:
        return {
            "bert_large_layer": ("bert_layer", dict(seq_len=seq, hidden=512, heads=4, ffn=2048), 24),
            "llama2_7b_layer": ("llama_layer", dict(seq_len=seq, hidden=512, heads=4, ffn=1376), 32),
        }
    return {
        "bert_large_layer": ("bert_layer", dict(seq_len=seq, hidden=1024, heads=16, ffn=4096), 24),
        "llama2_7b_layer": ("llama_layer", dict(seq_len=seq, hidden=4096, heads=32, ffn=11008), 32),
        "opt_6.7b_layer": ("bert_layer", dict(seq_len=seq, hidden=4096, heads=32, ffn=16384), 32),
        "opt_13b_layer": ("bert_layer", dict(seq_len=seq, hidden=5120, heads=40, ffn=20480), 40),
    }


def models(quick: bool) -> dict:
    """Name -> (zoo model, its arguments, layers the reported model repeats): the paper's seven."""
    img = 32 if quick else 224
    return {
        "mobilenetv2": ("mobilenetv2", dict(image_size=img), 1),
        "resnet18": ("resnet18", dict(image_size=img), 1),
        "vgg16": ("vgg16", dict(image_size=img), 1),
    } | transformer_models(quick, 16 if quick else LLM_SEQ)


def forget() -> None:
    """Drop the models and calibrations kept so far (one LLM layer's weights and llvm build are GBs)."""
    _MODS.clear()
    quantize.forget_calibrations()
    gc.collect()


def relax_module(name: str, **kw):
    key = (name, tuple(sorted(kw.items())))
    if key not in _MODS:
        _MODS[key] = import_onnx(zoo.build_model(name, seed=0, **kw), name)[0]
    return _MODS[key]


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# where the time goes: per category, the meta-operator kinds and whether they use the off-chip link
# (None: either); shares are unions of intervals over the latency, so they overlap
BREAKDOWN = {
    "compute": (("CIM.read_xb", "CIM.read_core", "CIM.read_row"), None),
    "fetch": (("DMOV.fetch",), True),
    "link loads": (("DMOV.load",), True),
    "link stores": (("DMOV.store",), True),
    "write-back": (("DMOV.writeback",), None),
    "rewrite": (("CIM.write_xb",), None),
    "switch": (("CM.switch",), None),
    "link (any)": (None, True),
}


def time_breakdown(stats: list, tl) -> dict:
    """Per :data:`BREAKDOWN` category, the time (ns) during which at least one of its operations runs."""
    offchip = np.array([any("offchip" in x for x in res) for st in stats if st.events is not None
                        for res in st.events.res], dtype=bool)
    kinds = np.asarray(tl.kinds)
    out = {}
    for name, (ks, link) in BREAKDOWN.items():
        sel = np.ones(len(kinds), dtype=bool) if ks is None else np.isin(kinds, list(ks))
        if link is not None:
            sel &= offchip == link
        sel &= tl.finish > tl.start
        order = np.argsort(tl.start[sel], kind="stable")
        st, fi = tl.start[sel][order], tl.finish[sel][order]
        before = np.maximum.accumulate(np.concatenate([[-np.inf], fi[:-1]])) if len(fi) else fi
        busy = float(np.sum(np.clip(fi - np.maximum(st, before), 0.0, None)))
        out[name] = busy
    return out


def measure(mod, hw, strategy: str, layers: int = 1) -> dict:
    """Compile, run on a timing-only chip, report latency, overhead shares and the allocation.

    ``bound``: :func:`tvm_cim.compiler.estimate.latency_lower_bound` of the compiled regions for a
    model of ``layers`` such layers, per layer (no allocation of ``hw`` beats it).
    """
    t0 = time.perf_counter()
    _, info = offload(mod, hw, strategy=strategy)
    compile_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    stats, tl = simulate_timing(info)
    sim_s = time.perf_counter() - t1
    rep = build_report(info, stats, hw.name)
    dm = rep["dual_mode"]
    bits = hw.crossbar
    link: dict = {}  # off-chip link busy time by operation kind: what the bound's link term leaves out
    for st in stats:
        for d, res, k in zip(st.events.dur, st.events.res, st.events.kind):
            if "offchip" in res:
                link[k] = link.get(k, 0.0) + d
    return {
        "link_busy_ns": link,
        "time_union_ns": time_breakdown(stats, tl),
        "bound": latency_lower_bound(hw, info.regions, bits.weight_bits, bits.input_bits, layers,
                                     producers=info.producers),
        "latency_ns": tl.latency_ns,
        "estimate_ns": info.schedule.estimate_ns,
        "segments": info.schedule.segments,
        "streamed": not all(p.resident for p in info.schedule.plans.values()),
        "compile_s": compile_s,
        "simulate_s": sim_s,
        "energy_pj": rep["energy_pj"],
        "time_share": dm["time_share"],
        "switches": dm["switches"],
        "modes": [{k: s[k] for k in ("segment", "compute_arrays", "memory_arrays", "idle_arrays")}
                  | {"solver": s["solver"]["status"], "solve_s": s["solver"]["seconds"]} for s in dm["segments"]],
    }


def geomean(xs) -> float:
    return float(math.exp(np.mean(np.log(xs)))) if len(xs) else float("nan")


def exp_main(nets: dict, hw) -> dict:
    res = {}
    jobs = [(n, s) for n in nets for s in STRATEGIES]
    for net, s in tqdm(jobs, desc="fig14 strategies on dynaplasia"):
        zname, kw, layers = nets[net]
        mod = relax_module(zname, **kw)
        if s == STRATEGIES[0]:
            offload(mod, hw, strategy="none")  # warm the calibration cache: compile times exclude it
        row = res.setdefault(net, {})
        row[s] = measure(mod, hw, s, layers)
        if layers > 1 and not row[s]["streamed"]:
            raise RuntimeError(f"{net}: one layer fits the chip; latency x {layers} layers would miss the rewrites")
        if s == "cmswitch":  # ablation: the same DP and MIP with no array allowed to switch to memory mode
            row["cmswitch-no-memory"] = measure(mod, R(hw, dual_mode=R(hw.dual_mode, switchable_arrays=0)), s, layers)
        if s == STRATEGIES[-1]:
            forget()  # one model's weights at a time (LLM layers hold GBs)
            row["peak_rss_mb"] = peak_rss_mb()
    return res


def exp_sensitivity(hw, kw: dict, bws: list[int], writes: list[float]) -> dict:
    """ResNet-18: cmswitch over cim-mlc as the off-chip bandwidth and the array write latency change."""
    mod = relax_module("resnet18", **kw)
    out = {"offchip": [], "write": []}
    points = [("offchip", bw, R(hw, chip=R(hw.chip, offchip_bandwidth_bits=bw))) for bw in bws]
    points += [("write", w, R(hw, crossbar=R(hw.crossbar, device=R(hw.crossbar.device, write_latency_ns=w))))
               for w in writes]
    for kind, x, h in tqdm(points, desc="off-chip bandwidth / write latency sweep"):
        a, b = measure(mod, h, "cim-mlc"), measure(mod, h, "cmswitch")
        out[kind].append({"value": x, "cim-mlc_ns": a["latency_ns"], "cmswitch_ns": b["latency_ns"],
                          "speedup": a["latency_ns"] / b["latency_ns"], "rewrite_share": b["time_share"]["rewrite"]})
    forget()
    return out


def exp_prime(nets: dict) -> dict:
    prime = tvm_cim.load("prime")
    zname, kw, _ = nets["bert_large_layer"]
    mod = relax_module(zname, **kw)
    a, b = measure(mod, prime, "cim-mlc"), measure(mod, prime, "cmswitch")
    forget()
    return {"cim-mlc_ns": a["latency_ns"], "cmswitch_ns": b["latency_ns"], "speedup": a["latency_ns"] / b["latency_ns"],
            "streamed": b["streamed"]}


def exp_seq_sweep(hw, quick: bool, names: list[str], seqs: list[int]) -> list[dict]:
    """Fig. 16: each transformer layer at every sequence length, cmswitch over cim-mlc."""
    rows = []
    for seq in seqs:  # every model at one length before the next length
        for name in tqdm(names, desc=f"sequence-length sweep (seq {seq})"):
            zname, kw, layers = transformer_models(quick, seq)[name]
            t0 = time.perf_counter()
            mod = relax_module(zname, **kw)
            a, b = measure(mod, hw, "cim-mlc"), measure(mod, hw, "cmswitch")
            forget()
            rows.append({"model": name, "seq": seq, "cim-mlc_ns": a["latency_ns"], "cmswitch_ns": b["latency_ns"],
                         "speedup": a["latency_ns"] / b["latency_ns"],
                         "memory_share": float(np.mean([m["memory_arrays"] / hw.total_crossbars for m in b["modes"]])),
                         "wall_s": time.perf_counter() - t0, "peak_rss_mb": peak_rss_mb(),
                         "compile_s": {"cim-mlc": a["compile_s"], "cmswitch": b["compile_s"]},
                         "simulate_s": {"cim-mlc": a["simulate_s"], "cmswitch": b["simulate_s"]}})
            print(f"  {name} seq {seq}: speedup {rows[-1]['speedup']:.3f}x, {rows[-1]['wall_s']:.0f} s, "
                  f"peak {rows[-1]['peak_rss_mb']:.0f} MB", flush=True)
    return rows


def exp_batches(nets: dict, hw, batches: list[int], fig14: dict | None) -> dict:
    """Fig. 14 at every batch size: cim-mlc and cmswitch latency (whole model) and the speedup, per model.

    Batch 1 is taken from ``fig14`` when it was measured there (the same module and strategies).
    """
    out: dict = {}
    jobs = [(n, b) for n in nets for b in batches]
    for net, b in tqdm(jobs, desc="Fig. 14 by batch size (cim-mlc, cmswitch)"):
        zname, kw, layers = nets[net]
        if b == 1 and fig14 and net in fig14:
            lat = {s: fig14[net][s]["latency_ns"] for s in ("cim-mlc", "cmswitch")}
        else:
            mod = relax_module(zname, batch=b, **kw)
            lat = {s: measure(mod, hw, s, layers)["latency_ns"] for s in ("cim-mlc", "cmswitch")}
            forget()
        out.setdefault(net, {})[str(b)] = {f"{s}_ns": v * layers for s, v in lat.items()} | {
            "speedup": lat["cim-mlc"] / lat["cmswitch"]}
    return out


def summarise_batches(rows: dict) -> dict:
    """Per model the range and mean speedup over its batch sizes; over all points the arithmetic and geometric
    means (the paper's "average"), and the geometric mean of the per-model means."""
    per = {n: [r["speedup"] for r in row.values()] for n, row in rows.items()}
    pts = [x for v in per.values() for x in v]
    return {"per_model": {n: {"min": min(v), "max": max(v), "mean": float(np.mean(v))} for n, v in per.items()},
            "arith_mean_all": float(np.mean(pts)), "geomean_all": geomean(pts),
            "geomean_of_model_means": geomean([np.mean(v) for v in per.values()]), "points": len(pts)}


def print_batches(res: dict) -> None:
    rows = res["batches"]
    s = summarise_batches(rows)
    sizes = sorted({int(b) for row in rows.values() for b in row})
    print("\n[1b] Fig. 14 by batch size: cmswitch over cim-mlc (the paper's ranges and average are over batch sizes)")
    print(f"{'model':18s} " + " ".join(f"{'B=' + str(b):>7s}" for b in sizes) + "    range          mean   paper")
    for net, row in rows.items():
        lo, hi = PAPER["fig14_ranges"].get(net, (float("nan"),) * 2)
        pm = s["per_model"][net]
        print(f"{net:18s} " + " ".join(f"{row[str(b)]['speedup']:6.3f}x" if str(b) in row else f"{'-':>7s}"
                                       for b in sizes)
              + f"   {pm['min']:.3f}-{pm['max']:.3f}x  {pm['mean']:6.3f}x  {lo:.2f}-{hi:.2f}x")
    print(f"over all {s['points']} points: arithmetic mean {s['arith_mean_all']:.3f}x, geomean {s['geomean_all']:.3f}x; "
          f"geomean of the per-model means {s['geomean_of_model_means']:.3f}x (paper: average "
          f"{PAPER['geomean_vs_cim_mlc']}x, max {PAPER['max_vs_cim_mlc']}x)")


def print_tables(res: dict, bound: bool = False) -> None:
    if "fig14" in res:
        print_fig14(res)
        if bound:
            print_bound(res)
    if "batches" in res:
        print_batches(res)
    print_sweeps(res)


def bound_of(row: dict) -> dict:
    """The lower bound on the regions ``cmswitch`` compiled (its encodings) and the speedup over cim-mlc it allows."""
    b = row["cmswitch"]["bound"]
    mlc = row["cim-mlc"]["latency_ns"]
    return b | {"max_speedup_vs_cim_mlc": mlc / b["bound_ns"], "speedup_vs_cim_mlc": mlc / row["cmswitch"]["latency_ns"]}


def print_bound(res: dict) -> None:
    """``--bound``: the speedup over cim-mlc no allocation of the chip can exceed, per model, and ours."""
    rows = {net: bound_of(row) for net, row in res["fig14"].items() if "bound" in row["cmswitch"]}
    if not rows:
        print("\n[bound] the JSON files hold no bounds (written before --bound existed)")
        return
    print("\n[bound] latency lower bound of any allocation on this chip (per layer): max(off-chip link busy with "
          "the non-resident weights and the activations no memory-mode allocation holds, arrays busy with every "
          "read and rewrite), and the speedup over cim-mlc it allows")
    print(f"{'model':18s} {'cim-mlc':>10s} {'cmswitch':>10s} {'link LB':>10s} {'arrays LB':>10s}  "
          f"{'bound':>7s} {'ours':>7s}  headroom used")
    for net, b in rows.items():
        row = res["fig14"][net]
        if "link_busy_ns" in row["cmswitch"]:
            busy = {s: {k: v / 1e6 for k, v in row[s]["link_busy_ns"].items()} for s in ("cim-mlc", "cmswitch")}
            print("  link busy (ms): " + "; ".join(f"{s} " + ", ".join(f"{k} {v:.3f}" for k, v in sorted(b_.items()))
                                                   for s, b_ in busy.items()))
        if "activations_link_ns" in b:
            print(f"  link LB = weights {b['weights_link_ns'] / 1e6:.3f} ms + forced activations "
                  f"{b['activations_link_ns'] / 1e6:.3f} ms")
        print(f"{net:18s} {row['cim-mlc']['latency_ns'] / 1e6:8.3f}ms {row['cmswitch']['latency_ns'] / 1e6:8.3f}ms "
              f"{b['link_ns'] / 1e6:8.3f}ms {b['arrays_ns'] / 1e6:8.3f}ms  {b['max_speedup_vs_cim_mlc']:6.3f}x "
              f"{b['speedup_vs_cim_mlc']:6.3f}x  {(b['speedup_vs_cim_mlc'] - 1) / (b['max_speedup_vs_cim_mlc'] - 1):6.1%}")
    g = geomean([b["max_speedup_vs_cim_mlc"] for b in rows.values()])
    verdict = "unreachable on this chip (proven)" if g < PAPER["geomean_vs_cim_mlc"] else "not excluded by the bound"
    print(f"geomean of the bounds {g:.3f}x over {len(rows)} models: the paper's {PAPER['geomean_vs_cim_mlc']}x is "
          f"{verdict}")
    goal = PAPER["geomean_vs_cim_mlc"] ** len(rows)
    ours = {net: b["speedup_vs_cim_mlc"] for net, b in rows.items()}
    print("to reach the goal alone, with every other model at today's speedup, a model would need (its bound):")
    for net, b in rows.items():
        need = goal / math.prod(v for k, v in ours.items() if k != net)
        print(f"{net:18s} {need:7.3f}x ({b['max_speedup_vs_cim_mlc']:.3f}x){'  beyond its bound' if need > b['max_speedup_vs_cim_mlc'] else ''}")


def print_fig14(res: dict) -> None:
    main = res["fig14"]
    print("\n[1] Fig. 14: latency on dynaplasia (timing-only simulator; transformers: one layer x layer count), "
          "speedup of cmswitch over each strategy")
    print(f"{'model':18s} " + " ".join(f"{s:>12s}" for s in STRATEGIES) + "   vs none  vs puma  vs cim-mlc  paper")
    for net, row in main.items():
        layers = res["models"][net]["layers"]
        lat = {s: row[s]["latency_ns"] * layers for s in STRATEGIES}
        sp = {s: lat[s] / lat["cmswitch"] for s in STRATEGIES}
        lo, hi = PAPER["fig14_ranges"].get(net, (float("nan"),) * 2)
        print(f"{net:18s} " + " ".join(f"{lat[s] / 1e6:10.3f}ms" for s in STRATEGIES)
              + f"   {sp['none']:6.2f}x {sp['puma']:6.2f}x {sp['cim-mlc']:8.3f}x   {lo:.2f}-{hi:.2f}x")
    s = res["summary"]
    print(f"geomean over cim-mlc {s['geomean_vs_cim_mlc']:.3f}x (arithmetic mean {s['arith_mean_vs_cim_mlc']:.3f}x), max {s['max_vs_cim_mlc']:.3f}x "
          f"(paper {PAPER['geomean_vs_cim_mlc']}x / {PAPER['max_vs_cim_mlc']}x)")
    print("ablation: cmswitch with no switchable array (its DP segmentation and MIP duplication only)")
    for net, row in main.items():
        a, b, c = (row[k]["latency_ns"] for k in ("cim-mlc", "cmswitch-no-memory", "cmswitch"))
        print(f"{net:18s} no-memory {b * res['models'][net]['layers'] / 1e6:10.3f}ms  speedup over cim-mlc {a / b:6.3f}x; "
              f"memory mode adds {b / c:6.3f}x")
    print(f"geomean: segmentation + duplication {s['geomean_no_memory_vs_cim_mlc']:.3f}x, "
          f"memory mode on top {s['geomean_memory_gain']:.3f}x")
    print("estimate vs simulator (the DP and MIP decide on the estimate):")
    for net, row in main.items():
        print(f"{net:18s} " + "  ".join(f"{k} {100 * (row[k]['estimate_ns'] / row[k]['latency_ns'] - 1):+.1f}%"
                                         for k in ("cim-mlc", "cmswitch")))
    print("\n[2] cmswitch time shares (union of intervals / latency): switches, weight rewrites, write-backs")
    for net, row in main.items():
        t = row["cmswitch"]["time_share"]
        print(f"{net:18s} switch {100 * t['switch']:7.4f}%  rewrite {100 * t['rewrite']:6.2f}%  "
              f"write-back {100 * t['write_back']:.2f}%  ({row['cmswitch']['switches']} CM.switch, "
              f"{row['cmswitch']['segments']} segments)")
    print("\n[2b] where the time goes (union of intervals / latency, they overlap): cim-mlc -> cmswitch")
    for net, row in main.items():
        if "time_union_ns" not in row["cmswitch"]:
            continue
        parts = []
        for k in BREAKDOWN:
            a, b = (row[s_]["time_union_ns"][k] / row[s_]["latency_ns"] for s_ in ("cim-mlc", "cmswitch"))
            parts.append(f"{k} {100 * a:.1f}->{100 * b:.1f}%")
        print(f"{net:18s} " + ", ".join(parts))
    print("\n[3] Fig. 15: arrays per segment in compute / memory mode (cmswitch)")
    for net, row in main.items():
        segs = row["cmswitch"]["modes"]
        txt = " ".join(f"{m['compute_arrays']}/{m['memory_arrays']}" for m in segs[:24])
        print(f"{net:18s} {txt}{' ...' if len(segs) > 24 else ''}")
    print("\n[4] compile time (CIM passes, warm calibration)")
    for net, row in main.items():
        a, b = row["cim-mlc"]["compile_s"], row["cmswitch"]["compile_s"]
        worst = max((m["solve_s"] for m in row["cmswitch"]["modes"]), default=0.0)
        print(f"{net:18s} cim-mlc {a:7.2f} s  cmswitch {b:7.2f} s  ratio {b / a:5.2f}x  "
              f"(slowest allocation solve {worst * 1e3:.1f} ms; paper 2.8-6.3x)")


def print_sweeps(res: dict) -> None:
    if "sensitivity" in res:
        print("\n[5] ResNet-18: cmswitch over cim-mlc as the off-chip bandwidth / the array row-write latency change")
        for r in res["sensitivity"]["offchip"]:
            print(f"  off-chip {r['value']:6d} b/cycle  speedup {r['speedup']:.3f}x  "
                  f"(rewrite share of cmswitch's run {100 * r['rewrite_share']:.1f}%)")
        for r in res["sensitivity"]["write"]:
            print(f"  row write {r['value']:6.1f} ns      speedup {r['speedup']:.3f}x  "
                  f"(rewrite share of cmswitch's run {100 * r['rewrite_share']:.1f}%)")
    if "seq_sweep" in res:
        print("\n[7] Fig. 16: transformer layers, cmswitch over cim-mlc by sequence length "
              "(paper: BERT 1.19->1.0x, LLaMA2-7B 1.25->1.08x, OPT-6.7B 1.50->1.23x, OPT-13B 1.76->1.32x)")
        for r in res["seq_sweep"]:
            print(f"  {r['model']:16s} seq {r['seq']:5d}  cim-mlc {r['cim-mlc_ns'] / 1e6:9.3f} ms  cmswitch "
                  f"{r['cmswitch_ns'] / 1e6:9.3f} ms  speedup {r['speedup']:.3f}x  memory-mode share "
                  f"{100 * r['memory_share']:.1f}%  ({r['wall_s']:.0f} s, peak {r['peak_rss_mb']:.0f} MB)")
    if "prime" in res:
        p = res["prime"]
        print(f"\n[6] prime, BERT layer: cim-mlc {p['cim-mlc_ns'] / 1e6:.3f} ms, cmswitch {p['cmswitch_ns'] / 1e6:.3f} ms, "
              f"speedup {p['speedup']:.3f}x (paper {PAPER['prime_bert']}x)")


def plots(res: dict, out_dir: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    files = []
    if "batches" in res:  # Fig. 14 by batch size: bars per model and batch, the paper's range as a line
        rows = res["batches"]
        nets = list(rows)
        sizes = sorted({int(b) for row in rows.values() for b in row})
        fig = Figure(figsize=(9, 4))
        ax = fig.subplots()
        w = 0.8 / len(sizes)
        for i, b in enumerate(sizes):
            ax.bar(np.arange(len(nets)) + i * w, [rows[n].get(str(b), {}).get("speedup", np.nan) for n in nets], w,
                   label=f"batch {b}")
        for j, n in enumerate(nets):
            lo, hi = PAPER["fig14_ranges"].get(n, (np.nan, np.nan))
            ax.plot([j - w / 2, j + 0.8 - w / 2], [lo, lo], "k:", lw=0.8)
            ax.plot([j - w / 2, j + 0.8 - w / 2], [hi, hi], "k:", lw=0.8)
        ax.axhline(PAPER["geomean_vs_cim_mlc"], ls="--", color="k", lw=0.8, label="paper: 1.31x average")
        ax.set_xticks(np.arange(len(nets)) + 0.4 - w / 2, nets, fontsize=8)
        ax.set_ylabel("cmswitch / cim-mlc")
        ax.set_title("Fig. 14 by batch size (dotted: the paper's range per model)")
        ax.legend(fontsize=8)
        fig.tight_layout()
        f = out_dir / "cmswitch_batches.png"
        fig.savefig(f, dpi=120)
        files.append(str(f))
    if "fig14" not in res:
        return files
    main = res["fig14"]
    nets = list(main)
    fig = Figure(figsize=(8, 4))
    ax = fig.subplots()
    base = [s for s in STRATEGIES if s != "cmswitch"]
    w = 0.8 / len(base)
    for i, s in enumerate(base):
        ax.bar(np.arange(len(nets)) + i * w, [main[n][s]["latency_ns"] / main[n]["cmswitch"]["latency_ns"]
                                              for n in nets], w, label=f"over {s}")
    ax.axhline(PAPER["geomean_vs_cim_mlc"], ls="--", color="k", lw=0.8, label="paper: 1.31x over CIM-MLC")
    ax.set_xticks(np.arange(len(nets)) + 0.4 - w / 2, nets)
    ax.set_yscale("log")
    ax.set_ylabel("cmswitch speedup")
    ax.legend(fontsize=8)
    ax.set_title("CMSwitch on dynaplasia (Fig. 14)")
    fig.tight_layout()
    f = out_dir / "cmswitch_speedup.png"
    fig.savefig(f, dpi=120)
    files.append(str(f))
    fig = Figure(figsize=(10, 3 * len(nets)))
    axs = np.atleast_1d(fig.subplots(len(nets), 1))
    for ax, n in zip(axs, nets):
        segs = main[n]["cmswitch"]["modes"]
        x = np.arange(len(segs))
        c = np.array([m["compute_arrays"] for m in segs])
        mm = np.array([m["memory_arrays"] for m in segs])
        idle = np.array([m["idle_arrays"] for m in segs])
        ax.bar(x, c, label="compute")
        ax.bar(x, mm, bottom=c, label="memory")
        ax.bar(x, idle, bottom=c + mm, label="idle", color="0.85")
        ax.set_title(f"{n}: arrays per segment (Fig. 15)")
        ax.set_xlabel("segment")
        ax.set_ylabel("arrays")
    axs[0].legend(fontsize=8)
    fig.tight_layout()
    f = out_dir / "cmswitch_modes.png"
    fig.savefig(f, dpi=120)
    files.append(str(f))
    if "sensitivity" in res:
        fig = Figure(figsize=(9, 3.5))
        axs = fig.subplots(1, 2)
        for ax, kind, label in ((axs[0], "offchip", "off-chip bandwidth (bit/cycle)"),
                                (axs[1], "write", "row write latency (ns)")):
            rows = res["sensitivity"][kind]
            ax.plot([r["value"] for r in rows], [r["speedup"] for r in rows], marker="o")
            ax.set_xscale("log", base=2)
            ax.set_xlabel(label)
            ax.set_ylabel("cmswitch / cim-mlc speedup")
        fig.suptitle("ResNet-18 on dynaplasia")
        fig.tight_layout()
        f = out_dir / "cmswitch_sensitivity.png"
        fig.savefig(f, dpi=120)
        files.append(str(f))
    return files


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="32x32 images, small transformer layers, fewer sweep points")
    ap.add_argument("--models", nargs="*", help="subset of: mobilenetv2 resnet18 vgg16 bert_large_layer "
                    "llama2_7b_layer opt_6.7b_layer opt_13b_layer (default: all seven)")
    ap.add_argument("--seq-sweep", nargs="*", type=int, metavar="SEQ",
                    help="the transformer layers among --models at these sequence lengths (Fig. 16)")
    ap.add_argument("--batches", nargs="+", type=int, metavar="B",
                    help="Fig. 14 (cim-mlc and cmswitch) also at these batch sizes, e.g. 1 4 8 16 (the paper's "
                         "ranges and average are over batch sizes it does not name)")
    ap.add_argument("--no-fig14", action="store_true", help="skip the Fig. 14 table (with --seq-sweep or --batches)")
    ap.add_argument("--no-sweep", action="store_true", help="skip the sensitivity sweeps and the prime run")
    ap.add_argument("--merge", nargs="+", metavar="JSON",
                    help="only combine the --json files of earlier runs (say one process per model, so that no "
                         "run holds several LLM layers) and print their tables")
    ap.add_argument("--bound", action="store_true",
                    help="print the latency lower bound of any allocation and the speedup over cim-mlc it allows")
    ap.add_argument("--json", help="write all figures to this file")
    ap.add_argument("--plots", help="folder for the PNG plots (none are written without it)")
    args = ap.parse_args()
    if args.merge:
        res = merge([json.loads(Path(f).read_text()) for f in args.merge])
        return report(res, args)
    if args.batches and min(args.batches) < 1:
        ap.error(f"--batches: batch sizes are positive integers, got {args.batches}")
    nets = models(args.quick)
    if args.models:
        unknown = sorted(set(args.models) - set(nets))
        if unknown:
            ap.error(f"unknown models {unknown}; choose from {sorted(nets)}")
        nets = {k: v for k, v in nets.items() if k in args.models}
    hw = tvm_cim.load("dynaplasia")
    res: dict = {"hw": hw.name, "quick": args.quick, "paper": PAPER,
                 "models": {k: {"zoo": z, "args": kw, "layers": n} for k, (z, kw, n) in nets.items()}}
    if not args.no_fig14:
        res["fig14"] = exp_main(nets, hw)
        res["summary"] = summarise(res["fig14"])
    if args.batches:
        res["batches"] = exp_batches(nets, hw, args.batches, res.get("fig14"))
        res["batches_summary"] = summarise_batches(res["batches"])
    if args.seq_sweep:
        names = [n for n in transformer_models(args.quick) if n in nets]
        res["seq_sweep"] = exp_seq_sweep(hw, args.quick, names, args.seq_sweep)
    if not args.no_sweep:
        kw = {"image_size": 32 if args.quick else 224}
        res["sensitivity"] = exp_sensitivity(hw, kw, [64, 512] if args.quick else [16, 64, 256, 1024, 4096],
                                             [5.0, 50.0] if args.quick else [1.0, 5.0, 20.0, 80.0])
        if "bert_large_layer" in nets:
            res["prime"] = exp_prime(nets)
    return report(res, args)


def summarise(fig14: dict) -> dict:
    """Geometric and arithmetic means, maximum, the ablation's shares and the compile-time ratios."""
    rows = fig14.values()
    sp = [row["cim-mlc"]["latency_ns"] / row["cmswitch"]["latency_ns"] for row in rows]
    nm = [row["cim-mlc"]["latency_ns"] / row["cmswitch-no-memory"]["latency_ns"] for row in rows]
    gain = [row["cmswitch-no-memory"]["latency_ns"] / row["cmswitch"]["latency_ns"] for row in rows]
    bounds = [bound_of(row)["max_speedup_vs_cim_mlc"] for row in rows if "bound" in row["cmswitch"]]
    return {"geomean_vs_cim_mlc": geomean(sp), "geomean_bound_vs_cim_mlc": geomean(bounds), "arith_mean_vs_cim_mlc": float(np.mean(sp)),
            "max_vs_cim_mlc": float(max(sp)),
            "geomean_no_memory_vs_cim_mlc": geomean(nm), "geomean_memory_gain": geomean(gain),
            "compile_ratio": {n: row["cmswitch"]["compile_s"] / row["cim-mlc"]["compile_s"]
                              for n, row in fig14.items()}}


def merge(parts: list[dict]) -> dict:
    """One result from several runs' JSON (models, Fig. 14 rows, sweeps); later files win on conflicts."""
    res: dict = {"hw": parts[0]["hw"], "quick": parts[0]["quick"], "paper": PAPER, "models": {}}
    for p in parts:
        res["models"].update(p.get("models", {}))
        if "fig14" in p:
            res.setdefault("fig14", {}).update(p["fig14"])
        for k in ("sensitivity", "prime"):
            if k in p:
                res[k] = p[k]
        if "seq_sweep" in p:
            res.setdefault("seq_sweep", []).extend(p["seq_sweep"])
        for net, row in p.get("batches", {}).items():
            res.setdefault("batches", {}).setdefault(net, {}).update(row)
    if "fig14" in res:
        res["summary"] = summarise(res["fig14"])
    if "batches" in res:
        res["batches_summary"] = summarise_batches(res["batches"])
    return res


def report(res: dict, args) -> int:
    """Print the tables, save the plots and (``--json``) the figures."""
    print_tables(res, getattr(args, "bound", False))
    if args.plots:
        out_dir = Path(args.plots)
        out_dir.mkdir(parents=True, exist_ok=True)
        for f in plots(res, out_dir):
            print(f"plot: {f}")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2, default=str))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Dual-mode CIM experiments (CMSwitch, paper 000 sec. 5) on the ``dynaplasia`` preset.

1. Fig. 14: latency speedup of ``cmswitch`` over ``cim-mlc``, ``puma`` and
   ``none`` for MobileNetV2, ResNet-18, VGG-16 (ImageNet size) and one
   BERT-large encoder layer (sequence 64; the whole model is 24 such layers
   run one after another, so its speedup is the layer's); geometric mean
   and maximum over ``cim-mlc`` (paper: 1.31x average, 2.03x maximum); an
   ablation runs ``cmswitch`` with no switchable array (its segmentation and
   duplication alone) to separate what memory mode adds; the estimate's
   error against the simulator for both methods.
2. Switch overhead: time share of mode switches, weight rewrites (fetch +
   programming) and write-backs in ``cmswitch``'s run (paper: switches
   3-5%).
3. Fig. 15: arrays in compute and memory mode per segment (VGG-16).
4. Compile time of ``cmswitch`` against ``cim-mlc`` (paper: 2.8-6.3x),
   calibration excluded (warm).
5. Sensitivity: speedup over ``cim-mlc`` on ResNet-18 as the off-chip
   bandwidth grows (Table 2 does not give it; the preset assumes 64 b/cycle).
6. Scalability: the BERT layer on the ``prime`` preset (paper sec. 5.5: 1.48x).
7. With ``--llm``: one decoder layer of LLaMA2-7B, OPT-6.7B and OPT-13B
   (prefill of 64 tokens) in the Fig. 14 table; ``--seq-sweep`` runs the
   LLaMA2-7B layer at other sequence lengths (Fig. 16).

Latency comes from the simulator's resource timeline in timing-only mode
(values are not computed; bit-exactness of ``cmswitch`` against the other
strategies is covered by ``tests/test_cmswitch.py``).  Prints tables, saves
plots, ``--json`` writes every figure.

    python benchmarks/cmswitch.py                 # full size (ImageNet 224, BERT-large seq 64)
    python benchmarks/cmswitch.py --quick         # 32x32 images, a small BERT layer (a minute or two)
    python benchmarks/cmswitch.py --llm --models llama2_7b_layer opt_6.7b_layer opt_13b_layer \
        --no-sweep --seq-sweep 64 256     # the LLM layers (seq 1024 and 2048 were killed here, memory)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tvm_cim  # noqa: E402
from tvm_cim.common import zoo  # noqa: E402
from tvm_cim.common.onnx_io import import_onnx  # noqa: E402
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


def llm_models(quick: bool, seq: int = LLM_SEQ) -> dict:
    """The paper's generative models, one decoder layer each (prefill of ``seq`` tokens, batch 1).

    Weights are materialised for one layer; the model is that layer repeated (32 or 40 times), run
    one after another, so its latency is the layer's times the layer count and its speedup the
    layer's.  OPT layers use ``bert_layer`` with OPT's sizes: the crossbar regions (QKV, QK^T, AV,
    output projection, two FFN matrices) are the same; LayerNorm placement and the activation run
    on the host, which is not timed.
    """
    if quick:
        return {"llama2_7b_layer": ("llama_layer", dict(seq_len=16, hidden=256, heads=4, ffn=688), 32)}
    return {
        "llama2_7b_layer": ("llama_layer", dict(seq_len=seq, hidden=4096, heads=32, ffn=11008), 32),
        "opt_6.7b_layer": ("bert_layer", dict(seq_len=seq, hidden=4096, heads=32, ffn=16384), 32),
        "opt_13b_layer": ("bert_layer", dict(seq_len=seq, hidden=5120, heads=40, ffn=20480), 40),
    }


def models(quick: bool) -> dict:
    """Name -> (zoo model, its arguments, layers the reported model repeats)."""
    img = 32 if quick else 224
    bert = dict(seq_len=16, hidden=128, heads=4, ffn=512) if quick else dict(seq_len=64, hidden=1024, heads=16,
                                                                            ffn=4096)
    return {
        "mobilenetv2": ("mobilenetv2", dict(image_size=img), 1),
        "resnet18": ("resnet18", dict(image_size=img), 1),
        "vgg16": ("vgg16", dict(image_size=img), 1),
        "bert_large_layer": ("bert_layer", bert, 24),
    }


def relax_module(name: str, **kw):
    key = (name, tuple(sorted(kw.items())))
    if key not in _MODS:
        _MODS[key] = import_onnx(zoo.build_model(name, seed=0, **kw), name)[0]
    return _MODS[key]


def measure(mod, hw, strategy: str) -> dict:
    """Compile, run on a timing-only chip, report latency, overhead shares and the allocation."""
    t0 = time.perf_counter()
    _, info = offload(mod, hw, strategy=strategy)
    compile_s = time.perf_counter() - t0
    stats, tl = simulate_timing(info)
    rep = build_report(info, stats, hw.name)
    dm = rep["dual_mode"]
    return {
        "latency_ns": tl.latency_ns,
        "estimate_ns": info.schedule.estimate_ns,
        "segments": info.schedule.segments,
        "compile_s": compile_s,
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
        zname, kw, _ = nets[net]
        mod = relax_module(zname, **kw)
        if s == STRATEGIES[0]:
            offload(mod, hw, strategy="none")  # warm the calibration cache: compile times exclude it
        res.setdefault(net, {})[s] = measure(mod, hw, s)
        if s == "cmswitch":  # ablation: the same DP and MIP with no array allowed to switch to memory mode
            res[net]["cmswitch-no-memory"] = measure(mod, R(hw, dual_mode=R(hw.dual_mode, switchable_arrays=0)), s)
        if s == STRATEGIES[-1]:
            _MODS.clear()  # one model's weights at a time (LLM layers hold over a GB)
    return res


def exp_sensitivity(hw, kw: dict, bws: list[int]) -> list[dict]:
    mod = relax_module("resnet18", **kw)
    rows = []
    for bw in tqdm(bws, desc="off-chip bandwidth sweep"):
        h = R(hw, chip=R(hw.chip, offchip_bandwidth_bits=bw))
        a, b = measure(mod, h, "cim-mlc"), measure(mod, h, "cmswitch")
        rows.append({"offchip_bits": bw, "cim-mlc_ns": a["latency_ns"], "cmswitch_ns": b["latency_ns"],
                     "speedup": a["latency_ns"] / b["latency_ns"], "rewrite_share": b["time_share"]["rewrite"]})
    return rows


def exp_prime(nets: dict) -> dict:
    prime = tvm_cim.load("prime")
    zname, kw, _ = nets["bert_large_layer"]
    mod = relax_module(zname, **kw)
    a, b = measure(mod, prime, "cim-mlc"), measure(mod, prime, "cmswitch")
    return {"cim-mlc_ns": a["latency_ns"], "cmswitch_ns": b["latency_ns"], "speedup": a["latency_ns"] / b["latency_ns"]}


def print_tables(res: dict) -> None:
    main = res["fig14"]
    print("\n[1] Fig. 14: latency on dynaplasia (timing-only simulator), speedup of cmswitch over each strategy")
    print(f"{'model':18s} " + " ".join(f"{s:>12s}" for s in STRATEGIES) + "   vs none  vs puma  vs cim-mlc  paper")
    for net, row in main.items():
        lat = {s: row[s]["latency_ns"] for s in STRATEGIES}
        sp = {s: lat[s] / lat["cmswitch"] for s in STRATEGIES}
        lo, hi = PAPER["fig14_ranges"].get(net, (float("nan"),) * 2)
        print(f"{net:18s} " + " ".join(f"{lat[s] / 1e6:10.3f}ms" for s in STRATEGIES)
              + f"   {sp['none']:6.2f}x {sp['puma']:6.2f}x {sp['cim-mlc']:8.3f}x   {lo:.2f}-{hi:.2f}x")
    s = res["summary"]
    print(f"geomean over cim-mlc {s['geomean_vs_cim_mlc']:.3f}x, max {s['max_vs_cim_mlc']:.3f}x "
          f"(paper {PAPER['geomean_vs_cim_mlc']}x / {PAPER['max_vs_cim_mlc']}x)")
    print("ablation: cmswitch with no switchable array (its DP segmentation and MIP duplication only)")
    for net, row in main.items():
        a, b, c = (row[k]["latency_ns"] for k in ("cim-mlc", "cmswitch-no-memory", "cmswitch"))
        print(f"{net:18s} no-memory {b / 1e6:10.3f}ms  speedup over cim-mlc {a / b:6.3f}x; "
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
              f"(slowest MIP solve {worst * 1e3:.1f} ms; paper 2.8-6.3x)")
    if "sensitivity" in res:
        print("\n[5] ResNet-18: cmswitch over cim-mlc as off-chip bandwidth grows")
        for r in res["sensitivity"]:
            print(f"  {r['offchip_bits']:6d} b/cycle  speedup {r['speedup']:.3f}x  "
                  f"(rewrite share of cmswitch's run {100 * r['rewrite_share']:.1f}%)")
    if "seq_sweep" in res:
        print("\n[7] Fig. 16: LLaMA2-7B layer, cmswitch over cim-mlc by sequence length (paper 1.25x -> 1.08x)")
        for r in res["seq_sweep"]:
            print(f"  seq {r['seq']:5d}  cim-mlc {r['cim-mlc_ns'] / 1e6:9.3f} ms  cmswitch {r['cmswitch_ns'] / 1e6:9.3f} ms"
                  f"  speedup {r['speedup']:.3f}x  mean memory-mode share {100 * r['memory_share']:.1f}%")
    if "prime" in res:
        p = res["prime"]
        print(f"\n[6] prime, BERT layer: cim-mlc {p['cim-mlc_ns'] / 1e6:.3f} ms, cmswitch {p['cmswitch_ns'] / 1e6:.3f} ms, "
              f"speedup {p['speedup']:.3f}x (paper {PAPER['prime_bert']}x)")


def plots(res: dict, out_dir: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    files = []
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
        fig = Figure(figsize=(5, 3.5))
        ax = fig.subplots()
        rows = res["sensitivity"]
        ax.plot([r["offchip_bits"] for r in rows], [r["speedup"] for r in rows], marker="o")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("off-chip bandwidth (bit/cycle)")
        ax.set_ylabel("cmswitch / cim-mlc speedup")
        ax.set_title("ResNet-18 on dynaplasia")
        fig.tight_layout()
        f = out_dir / "cmswitch_offchip_sweep.png"
        fig.savefig(f, dpi=120)
        files.append(str(f))
    return files


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="32x32 images, a small BERT layer, fewer sweep points")
    ap.add_argument("--models", nargs="*", help="subset of: mobilenetv2 resnet18 vgg16 bert_large_layer "
                    "(and, with --llm, llama2_7b_layer opt_6.7b_layer opt_13b_layer)")
    ap.add_argument("--llm", action="store_true", help="add one decoder layer of LLaMA2-7B, OPT-6.7B, OPT-13B")
    ap.add_argument("--seq-sweep", nargs="*", type=int, metavar="SEQ",
                    help="LLaMA2-7B layer: cmswitch over cim-mlc at these sequence lengths (Fig. 16)")
    ap.add_argument("--no-sweep", action="store_true", help="skip the off-chip bandwidth sweep and the prime run")
    ap.add_argument("--json", help="write all figures to this file")
    ap.add_argument("--plots", default=".", help="folder for the PNG plots")
    args = ap.parse_args()
    nets = models(args.quick)
    if args.llm:
        nets.update(llm_models(args.quick))
    if args.models:
        unknown = sorted(set(args.models) - set(nets))
        if unknown:
            ap.error(f"unknown models {unknown}; choose from {sorted(nets)}")
        nets = {k: v for k, v in nets.items() if k in args.models}
    hw = tvm_cim.load("dynaplasia")
    res: dict = {"hw": hw.name, "quick": args.quick, "paper": PAPER,
                 "models": {k: {"zoo": z, "args": kw, "layers": n} for k, (z, kw, n) in nets.items()}}
    res["fig14"] = exp_main(nets, hw)
    sp = [row["cim-mlc"]["latency_ns"] / row["cmswitch"]["latency_ns"] for row in res["fig14"].values()]
    nm = [row["cim-mlc"]["latency_ns"] / row["cmswitch-no-memory"]["latency_ns"] for row in res["fig14"].values()]
    gain = [row["cmswitch-no-memory"]["latency_ns"] / row["cmswitch"]["latency_ns"] for row in res["fig14"].values()]
    res["summary"] = {"geomean_vs_cim_mlc": geomean(sp), "max_vs_cim_mlc": float(max(sp)),
                      "geomean_no_memory_vs_cim_mlc": geomean(nm), "geomean_memory_gain": geomean(gain),
                      "compile_ratio": {n: row["cmswitch"]["compile_s"] / row["cim-mlc"]["compile_s"]
                                        for n, row in res["fig14"].items()}}
    if args.seq_sweep:
        rows = []
        for seq in tqdm(args.seq_sweep, desc="sequence-length sweep (LLaMA2-7B layer)"):
            zname, kw, _ = llm_models(args.quick, seq)["llama2_7b_layer"]
            kw = dict(kw, seq_len=seq)
            mod = relax_module(zname, **kw)
            a, b = measure(mod, hw, "cim-mlc"), measure(mod, hw, "cmswitch")
            rows.append({"seq": seq, "cim-mlc_ns": a["latency_ns"], "cmswitch_ns": b["latency_ns"],
                         "speedup": a["latency_ns"] / b["latency_ns"],
                         "memory_share": float(np.mean([m["memory_arrays"] / hw.total_crossbars
                                                        for m in b["modes"]]))})
            _MODS.clear()  # one LLM layer's weights at a time
        res["seq_sweep"] = rows
    if not args.no_sweep:
        kw = {"image_size": 32 if args.quick else 224}
        res["sensitivity"] = exp_sensitivity(hw, kw, [64, 512] if args.quick else [64, 256, 1024, 4096, 16384])
        if "bert_large_layer" in nets:
            res["prime"] = exp_prime(nets)
    print_tables(res)
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

"""Bank-PIM kernel and LLM-decode performance (DCC, paper 002 Fig. 6, 7, 8, 10).

Experiments (``--experiment``):

``kernels``   for every kernel of each device (GEMV, RED, VA, RELU on HBM-PIM;
              GEMV, RED, ATTN on AttAcc) over batch and tensor sizes: the
              simulated time of DCC's best draft (exhaustive simulation of the
              pruned space, DCC code optimiser on), of the backend's default
              fixed tiling (AttAcc's distribution, the backend's plain copy)
              and the GPU-only roofline; speedups, the Fig. 10 breakdown into
              data rearrangement and compute, and how far pruning shrinks the
              space.
``fig10``     the ``kernels`` experiment on the size-4096 workloads only (the Fig. 10 rows),
              with the measured breakdown: for default and DCC, each phase's time, the
              resource bounding it on the busiest channel (command path, busiest core,
              bank group, data bus, activation window, rank, host link), whether the
              default's copy runs channel after channel, and the command counts by class.
``decode``    one decode step of GPT3-13B and LLaMA2-33B on AttAcc, end to
              end (all layers), for GPU only, AttAcc-Base (attention on PIM,
              default tiling), AttAcc-Full (attention and FFN on PIM, default
              tiling) and DCC (every PIM-capable operator where DCC's draft
              beats the GPU).
``simspeed``  wall time of simulating one 4096x4096 GEMV draft (every draft of its pruned space).
``graphs``    decode graphs as exporters write them, compiled and simulated end to end on
              ``attacc`` with ``--resident k_cache,v_cache`` semantics: ``zoo:gpt_decode`` /
              ``zoo:llama_decode`` (K stored pre-transposed), the same layers with K stored
              ``(B, H, T, D)`` and transposed in the graph, and the attention blocks of
              :mod:`tvm_pim.attention_graphs` (GPT-2 / SDPA / head-split / LLaMA GQA exports).

RED, VA and RELU run in two residency scenarios: inputs already in PIM
memory (``resident``; what the paper's speedups require, see the README) and
inputs produced by the host in host layout (``streamed``, rearranged on every
call).  GEMV matrices and ATTN's KV cache are resident in both.

Every time includes the host's kernel-launch overhead (5 us in the hardware
files) on both sides; the ``excl. launch`` columns subtract it from both, and
the launch tables re-price it at 0, 1.5 and 5 us per kernel (both sides).

Devices: ``hbm-pim`` (Samsung's HBM2 part), ``hbm-pim-hbm3`` (HBM-PIM units on
DCC's HBM3 organisation), ``attacc`` (AttAcc's default, power-constrained) and
``attacc-unconstrained``.  GPU baselines: the A100 datasheet roofline (the
compiler's host, ``GPU``) and the paper's platform (``paper``: the GPU reading
the five PIM stacks with the AttAcc simulator's derating), speedups over both.

Usage::

    python benchmarks/pim_kernels.py [--experiment all] [--scale small|full]
                                     [--json out.json] [--plots out/pim]
    python benchmarks/pim_kernels.py --quick   # one small size of everything, seconds (a test runs it)
    python benchmarks/pim_kernels.py --summarise out.json   # the kernels tables of an earlier run again
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import helper
from tvm import relax, te

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tqdm import tqdm  # noqa: E402

import tvm_pim  # noqa: E402
from tvm_cim.common.onnx_io import import_onnx, load_onnx, model_inputs  # noqa: E402
from tvm_cim.common.report import finish_benchmark, run_vm, write_json  # noqa: E402
from tvm_pim import report  # noqa: E402
from tvm_pim.attention_graphs import attention_block  # noqa: E402
from tvm_pim.compiler.codegen import DCC, CodegenOptions, generate  # noqa: E402
from tvm_pim.compiler.kernels import KernelSpec  # noqa: E402
from tvm_pim.compiler.space import default_draft, enumerate_drafts, rule1_on_func, rule_shrinkage  # noqa: E402
from tvm_pim.cost.host import kernel_time, roofline  # noqa: E402
from tvm_pim.cost.measure import best_by_simulation  # noqa: E402
from tvm_pim.hardware.view import PimView  # noqa: E402
from tvm_pim.simulator import Simulator  # noqa: E402
from tvm_pim.workloads import LLMS, decode_ops  # noqa: E402

BASELINE = CodegenOptions(staging=False, hierarchical=True)  # the backend's plain copy, native broadcast
FLAT_DCC = CodegenOptions(staging=True, hierarchical=False)  # DCC's optimiser without hierarchical commands
FLAT_BASELINE = CodegenOptions(staging=False, hierarchical=False)
DEVICES = ("hbm-pim", "hbm-pim-hbm3", "attacc", "attacc-unconstrained")
LAUNCH_US = (0.0, 1.5, 5.0)  # launch overhead per kernel the tables re-price
# batch multipliers and tensor sizes per scale
SCALES = {"quick": ([1], [256]), "small": ([1, 4, 16], [1024, 2048, 4096]), "full": ([1, 2, 4, 8, 16], [512, 1024, 2048, 4096])}


def _sim(spec, view, draft, opts):
    return Simulator(view.hw).run(generate(spec, draft, view, opts), functional=False)


def kernel_workloads(scale: str) -> dict[str, list[tuple[str, KernelSpec, str]]]:
    """(device -> [(kernel label, spec, scenario)])."""
    batches, sizes = SCALES[scale]
    heads = 32
    out: dict[str, list] = {d: [] for d in DEVICES}
    for dev in out:
        has_eltwise = PimView(tvm_pim.load(dev)).supports("va")
        has_attn = PimView(tvm_pim.load(dev)).supports("attn")
        for bt in batches:
            for n in sizes:
                out[dev].append(("GEMV", KernelSpec.make("gemv", b=heads * bt, m=1, n=n, k=128), "resident"))
                for scen in ("resident", "streamed"):
                    res = ("A",) if scen == "resident" else ()
                    out[dev].append(("RED", KernelSpec.make("red", b=bt, n=n, k=n, resident=res), scen))
                    if has_eltwise:
                        out[dev].append(("VA", KernelSpec.make("va", b=bt, i=n * n, resident=("A", "B") if res else ()), scen))
                        out[dev].append(("RELU", KernelSpec.make("relu", b=bt, i=n * n, resident=res), scen))
                if has_attn:
                    out[dev].append(("ATTN", KernelSpec.make("attn", b=heads * bt, n=n, k=128), "resident"))
    return out


def run_kernels(scale: str, only_fig10: bool = False) -> dict:
    rows = []
    work = kernel_workloads(scale)
    jobs = [(dev, lab, spec, scen) for dev, lst in work.items() for lab, spec, scen in lst
            if not only_fig10 or _fig10({"sizes": dict(spec.sizes)})]
    for dev, lab, spec, scen in tqdm(jobs, desc="kernels (exhaustive over pruned drafts)", unit="workload"):
        view = PimView(tvm_pim.load(dev))
        launch = view.hw.system.host.launch_overhead_us * 1e3
        drafts, st = enumerate_drafts(spec, view)
        t0 = time.perf_counter()
        best_d, _, best_ns = best_by_simulation(spec, view, drafts)
        search_s = time.perf_counter() - t0
        dcc = _sim(spec, view, best_d, DCC)
        d0 = default_draft(spec, view)
        base = _sim(spec, view, d0, BASELINE)
        base_opt = _sim(spec, view, d0, DCC)
        d_lit = default_draft(spec, view, literal=True)
        lit = base if d_lit == d0 else _sim(spec, view, d_lit, BASELINE)
        dcc_flat = _sim(spec, view, best_d, FLAT_DCC)
        base_flat = _sim(spec, view, d0, FLAT_BASELINE)
        gpu = kernel_time(view, spec).ns
        hosts = {h: {f"{L:g}us": kernel_time(view, spec, host=hm, launch_us=L).ns for L in LAUNCH_US}
                 for h, hm in view.hosts.items()}
        pim_at = {f"{L:g}us": {"dcc": dcc.latency_ns - launch + L * 1e3, "default": base.latency_ns - launch + L * 1e3}
                  for L in LAUNCH_US}
        rows.append(
            {
                "device": dev,
                "kernel": lab,
                "scenario": scen,
                "workload": spec.name,
                "sizes": dict(spec.sizes),
                "gpu_ns": gpu,
                "default_ns": base.latency_ns,
                "default_with_dcc_optimiser_ns": base_opt.latency_ns,
                "dcc_ns": dcc.latency_ns,
                "default_literal_ns": lit.latency_ns,
                "dcc_no_hierarchical_ns": dcc_flat.latency_ns,
                "default_no_hierarchical_ns": base_flat.latency_ns,
                "dcc_draft": str(best_d),
                "default_draft": str(d0),
                "default_literal_draft": str(d_lit),
                "speedup_dcc_vs_gpu": gpu / dcc.latency_ns,
                "speedup_default_vs_gpu": gpu / base.latency_ns,
                "speedup_dcc_vs_default": base.latency_ns / dcc.latency_ns,
                "speedup_dcc_vs_gpu_excl_launch": (gpu - launch) / (dcc.latency_ns - launch),
                "gpu_ns_by_host_launch": hosts,
                "speedup_by_host_launch": {
                    h: {L: {v: t / pim_at[L][v] for v in ("dcc", "default")} for L, t in per.items()}
                    for h, per in hosts.items()
                },
                "speedup_default_vs_gpu_excl_launch": (gpu - launch) / (base.latency_ns - launch),
                "breakdown": {
                    "default": {"rearrangement_ns": base.rearrangement_ns, "compute_ns": base.compute_ns, "host_ns": base.host_ns},
                    "dcc": {"rearrangement_ns": dcc.rearrangement_ns, "compute_ns": dcc.compute_ns, "host_ns": dcc.host_ns},
                },
                # the simulator's counters behind the breakdown: per phase, each resource's busy time on the
                # busiest channel and the bound; command counts by class
                "measured": {"default": _measured(base), "dcc": _measured(dcc)},
                "space": st.as_dict(),
                "rules_alone": rule_shrinkage(spec, view),
                "search_s": search_s,
            }
        )
    return {"rows": rows, "summary": summarise(rows), "baselines": baseline_summary(rows), "rule1": rule1_demo(),
            "fig10_breakdown": fig10_breakdown(rows)}


def _measured(res) -> dict:
    """Phase times, their binding resources and command counts of one simulation (Fig. 10 breakdown)."""
    return {"phases": res.extra.get("resources", {}), "commands": dict(res.command_counts), "host_bytes": res.host_bytes}


def fig10_breakdown(rows) -> list[dict]:
    """Default vs DCC per Fig. 10 row (size 4096), from the simulator's counters: each phase's time and
    the resource that bounds it, and the commands by class (host-link columns, register writes, row
    activations, compute columns, result moves)."""
    out = []
    for r in rows:
        if not _fig10(r) or "measured" not in r:
            continue
        e = {"device": r["device"], "kernel": r["kernel"], "scenario": r["scenario"], "workload": r["workload"],
             "default_draft": r["default_draft"], "dcc_draft": r["dcc_draft"]}
        for v in ("default", "dcc"):
            m = r["measured"][v]
            e[v] = {
                "phases": {ph: {"ns": d["ns"], "bound": d["bound"], "bound_ns": d["terms_ns"].get(d["bound"], 0.0),
                                "host_ns": d["host_ns"], "channels": d["channels"], "serial": d["serial"],
                                "rounds": d["rounds"],
                                "host_data_share": d["host_data_share_of_command_path"]}
                           for ph, d in m["phases"].items() if ph != "setup"},
                "commands": m["commands"],
                "host_bytes": m["host_bytes"],
                "rearrangement_ns": r["breakdown"][v]["rearrangement_ns"],
                "compute_ns": r["breakdown"][v]["compute_ns"],
            }
        out.append(e)
    return out


def print_fig10_breakdown(entries):
    print("\n== Fig. 10 measured: per phase, time (us) and the resource bounding it on the busiest channel; "
          "default -> DCC ==")
    for e in entries:
        print(f"{e['device']} {e['kernel']} {e['scenario']} {e['workload']}: default {e['default_draft']} -> DCC {e['dcc_draft']}")
        for v in ("default", "dcc"):
            ph = e[v]["phases"]
            parts = [f"{n} {d['ns'] / 1e3:.2f}us [{d['bound']}, {d['channels']} ch"
                     + (", channel after channel" if d.get("serial") else "")
                     + (f", {d['rounds']} staged rounds" if d.get("rounds", 1) > 1 else "")
                     + (f", host-data {100 * d['host_data_share']:.0f}% of cmd path" if n == "compute" else "") + "]"
                     for n, d in ph.items()]
            c = e[v]["commands"]
            cmds = ", ".join(f"{k} {n:,}" for k, n in sorted(c.items(), key=lambda kv: -kv[1])[:6])
            print(f"  {v:7s} rearr {e[v]['rearrangement_ns'] / 1e3:9.2f}us compute {e[v]['compute_ns'] / 1e3:9.2f}us | "
                  + "; ".join(parts))
            print(f"  {'':7s} commands: {cmds}")


def _fig10(r) -> bool:
    """The rows of the Fig. 10 breakdown (tensor size 4096)."""
    sz = r["sizes"]
    return max(sz.get("n", 0), int(math.isqrt(sz.get("i", 0)))) == 4096


def _fig10_gains(rows) -> dict:
    """Default / DCC time of data rearrangement and of compute over the Fig. 10 rows (size 4096): all, and
    per scenario (resident operands, or streamed from the host)."""
    out = {}
    for scen in ("all", "resident", "streamed"):
        big = [r for r in rows if _fig10(r) and scen in ("all", r["scenario"])]
        b = [r["breakdown"] for r in big]
        rea = [x["default"]["rearrangement_ns"] / x["dcc"]["rearrangement_ns"] for x in b
               if x["dcc"]["rearrangement_ns"] > 0 and x["default"]["rearrangement_ns"] > 0]
        com = [x["default"]["compute_ns"] / x["dcc"]["compute_ns"] for x in b if x["dcc"]["compute_ns"] > 0]
        out[scen] = {"rearrangement": _stats(rea) if rea else None, "compute": _stats(com) if com else None}
    return out


def baseline_summary(rows) -> dict:
    """Per device: DCC over the adjusted and the literal default tiling, hierarchical commands on / off,
    and the Fig. 10 gains (:func:`_fig10_gains`)."""
    out = {}
    for dev in sorted({r["device"] for r in rows}):
        sel = [r for r in rows if r["device"] == dev]
        out[dev] = {
            "dcc_vs_default_adjusted": _stats([r["default_ns"] / r["dcc_ns"] for r in sel]),
            "dcc_vs_default_literal": _stats([r["default_literal_ns"] / r["dcc_ns"] for r in sel]),
            "hierarchical_gain_dcc": _stats([r["dcc_no_hierarchical_ns"] / r["dcc_ns"] for r in sel]),
            "hierarchical_gain_default": _stats([r["default_no_hierarchical_ns"] / r["default_ns"] for r in sel]),
            "fig10": _fig10_gains(sel),
        }
    out["ALL"] = {"fig10": _fig10_gains(rows)}
    return out


def rule1_demo() -> dict:
    """Rule 1 where it matters: a batched 1-D convolution ``y[b, n] = sum_r x[b, n + r] * w[b, r]``, whose
    dimension set {n, r} has members indexed by three different functions, against a GEMV."""
    view = PimView(tvm_pim.load("hbm-pim"))
    B, N, R = 8, 1024, 16
    x = te.placeholder((B, N + R - 1), "float16", name="x")
    w = te.placeholder((B, R), "float16", name="w")
    r = te.reduce_axis((0, R), "r")
    y = te.compute((B, N), lambda b, n: te.sum(x[b, n + r] * w[b, r], axis=r), name="y")
    conv = rule1_on_func(te.create_prim_func([x, w, y]), "y", view)
    spec = KernelSpec.make("gemv", b=B, m=1, n=N, k=R)
    gemv = rule1_on_func(spec.prim_func(), spec.block_name, view)
    return {"device": view.name, "conv1d_b8_n1024_r16": conv, spec.name: gemv}


def _stats(vals):
    v = np.asarray(vals, float)
    return {"mean": float(v.mean()), "geomean": float(np.exp(np.log(v).mean())), "max": float(v.max()), "min": float(v.min()), "n": int(v.size)}


def summarise(rows):
    out = {}
    keys = sorted({(r["device"], r["kernel"], r["scenario"]) for r in rows})
    for dev, k, scen in keys:
        sel = [r for r in rows if (r["device"], r["kernel"], r["scenario"]) == (dev, k, scen)]
        out[f"{dev}/{k}/{scen}"] = {
            m: _stats([r[m] for r in sel])
            for m in ("speedup_dcc_vs_gpu", "speedup_default_vs_gpu", "speedup_dcc_vs_default", "speedup_dcc_vs_gpu_excl_launch")
        }
    for dev in DEVICES:
        for scen in ("resident", "streamed"):
            sel = [r for r in rows if r["device"] == dev and (r["scenario"] == scen or r["kernel"] in ("GEMV", "ATTN"))]
            if not sel:
                continue
            out[f"{dev}/ALL/{scen}"] = {
                m: _stats([r[m] for r in sel])
                for m in ("speedup_dcc_vs_gpu", "speedup_default_vs_gpu", "speedup_dcc_vs_default", "speedup_dcc_vs_gpu_excl_launch")
            }
            out[f"{dev}/ALL/{scen}"]["by_host_launch"] = {
                h: {L: {v: _stats([r["speedup_by_host_launch"][h][L][v] for r in sel]) for v in ("dcc", "default")}
                    for L in sel[0]["speedup_by_host_launch"][h]}
                for h in sel[0]["speedup_by_host_launch"]
            }
    return out


def print_kernels(res):
    rows = res["rows"]
    print("\n== Kernels: DCC (best simulated draft of the pruned space) vs default tiling vs GPU roofline ==")
    print("(default = the backend's fixed tiling and plain copy; def+opt = the same tiling with DCC's code optimiser)")
    print(f"{'device':20s} {'kernel':5s} {'scen':9s} {'workload':34s} {'GPU':>9s} {'default':>9s} {'def+opt':>9s} {'DCC':>9s} "
          f"{'DCC/GPU':>8s} {'def/GPU':>8s} {'DCC/def':>8s} {'excl.launch':>11s}  DCC draft")
    for r in rows:
        print(
            f"{r['device']:20s} {r['kernel']:5s} {r['scenario']:9s} {r['workload'][:34]:34s} {r['gpu_ns'] / 1e3:8.1f}u "
            f"{r['default_ns'] / 1e3:8.1f}u {r['default_with_dcc_optimiser_ns'] / 1e3:8.1f}u {r['dcc_ns'] / 1e3:8.1f}u {r['speedup_dcc_vs_gpu']:7.2f}x "
            f"{r['speedup_default_vs_gpu']:7.2f}x {r['speedup_dcc_vs_default']:7.2f}x {r['speedup_dcc_vs_gpu_excl_launch']:10.2f}x  {r['dcc_draft']}"
        )
    print("\n== Summary (arithmetic mean / max over workloads; paper: HBM-PIM 2.7x avg, 7.68x max; AttAcc 5.75x avg, 13.17x max over GPU) ==")
    print(f"{'device/kernel/scenario':28s} {'DCC/GPU':>16s} {'default/GPU':>16s} {'DCC/default':>16s} {'DCC/GPU excl.launch':>20s}")
    for k, s in res["summary"].items():
        f = lambda m: f"{s[m]['mean']:6.2f} / {s[m]['max']:6.2f}"  # noqa: E731
        print(f"{k:36s} {f('speedup_dcc_vs_gpu'):>16s} {f('speedup_default_vs_gpu'):>16s} {f('speedup_dcc_vs_default'):>16s} "
              f"{f('speedup_dcc_vs_gpu_excl_launch'):>20s}")
    print("\n== DCC speedup over each GPU baseline and launch overhead (mean / max over workloads; "
          "GPU = A100 datasheet roofline, paper-gpu = the GPU on the five stacks, derated) ==")
    first = next((s for s in res["summary"].values() if "by_host_launch" in s), None)
    if first:
        cols = [(h, L) for h in first["by_host_launch"] for L in first["by_host_launch"][h]]
        print(f"{'device/ALL/scenario':36s} " + " ".join(f"{h[:9] + '@' + L:>17s}" for h, L in cols))
        for k, s in res["summary"].items():
            if "by_host_launch" in s:
                print(f"{k:36s} " + " ".join(
                    f"{s['by_host_launch'][h][L]['dcc']['mean']:7.2f} / {s['by_host_launch'][h][L]['dcc']['max']:6.2f}"
                    for h, L in cols))
    print("\n== Fig. 10: time breakdown (normalised to the default implementation) ==")
    print(f"{'device':20s} {'kernel':5s} {'scen':9s} {'workload':30s} {'def rearr':>9s} {'def comp':>9s} {'DCC rearr':>9s} {'DCC comp':>9s} {'speedup':>8s}")
    for r in rows:
        sz = r["sizes"]
        big = max(sz.get("n", 0), int(math.isqrt(sz.get("i", 0))))
        if big != 4096:
            continue
        b = r["breakdown"]
        tot = r["default_ns"]
        print(
            f"{r['device']:20s} {r['kernel']:5s} {r['scenario']:9s} {r['workload'][:30]:30s} "
            f"{b['default']['rearrangement_ns'] / tot:9.3f} {b['default']['compute_ns'] / tot:9.3f} "
            f"{b['dcc']['rearrangement_ns'] / tot:9.3f} {b['dcc']['compute_ns'] / tot:9.3f} {r['speedup_dcc_vs_default']:7.2f}x"
        )
    print("\n== Baselines (mean / max over workloads): DCC over the default tiling as adjusted (leftover channels "
          "split the first dimension) and as AttAcc writes it (literal); hierarchical commands off / on ==")
    print("(Fig. 10 gains: default / DCC time of data rearrangement and of compute, size-4096 rows; "
          "paper: rearrangement 1.79x, compute 1.73x)")
    print(f"{'device':22s} {'DCC/adjusted':>15s} {'DCC/literal':>17s} {'hier. gain DCC':>15s} {'hier. gain def':>15s} "
          f"{'rearr. gain res':>16s} {'rearr. str':>16s} {'compute res':>15s} {'compute str':>15s}")
    f2 = lambda v: f"{v['mean']:6.2f} / {v['max']:7.2f}" if v else "-"  # noqa: E731
    for dev, b in res["baselines"].items():
        g = b["fig10"]
        tail = (f"{f2(g['resident']['rearrangement']):>16s} {f2(g['streamed']['rearrangement']):>16s} "
                f"{f2(g['resident']['compute']):>15s} {f2(g['streamed']['compute']):>15s}")
        if dev == "ALL":
            print(f"{'ALL':22s} {'':>15s} {'':>17s} {'':>15s} {'':>15s} " + tail)
            continue
        print(f"{dev:22s} {f2(b['dcc_vs_default_adjusted']):>15s} {f2(b['dcc_vs_default_literal']):>17s} "
              f"{f2(b['hierarchical_gain_dcc']):>15s} {f2(b['hierarchical_gain_default']):>15s} " + tail)
    print("\n== Pruning (DCC's three rules): cumulative, and rules 2 and 3 each alone on the rule-1 space ==")
    seen = set()
    print(f"{'device':8s} {'workload':34s} {'total':>9s} {'rule 1':>8s} {'rule 2':>8s} {'rule 3':>8s} {'kept':>8s} "
          f"{'2 alone':>8s} {'3 alone':>8s}")
    for r in rows:
        key = (r["device"], r["workload"])
        if key in seen:
            continue
        seen.add(key)
        s = r["space"]
        a = r["rules_alone"]
        print(f"{r['device'][:8]:8s} {r['workload'][:34]:34s} {s['total']:9d} {s['after_rule1']:8d} {s['after_rule2']:8d} "
              f"{s['after_rule3']:8d} {100 * s['kept_fraction']:7.3f}% {a['rule2_alone']:8d} {a['rule3_alone']:8d}")
    sh = [(r["rules_alone"]["rule1"], r["rules_alone"]) for r in rows]
    print("geomean shrinkage on the rule-1 space: rule 2 alone "
          f"{np.exp(np.mean([np.log(n / a['rule2_alone']) for n, a in sh])):.2f}x, rule 3 alone "
          f"{np.exp(np.mean([np.log(n / a['rule3_alone']) for n, a in sh])):.2f}x, rules 2+3 "
          f"{np.exp(np.mean([np.log(n / a['rules23']) for n, a in sh])):.2f}x")
    d = res["rule1"]
    print(f"\n== Rule 1 where dimension-set members index differently ({d['device']}) ==")
    for name, v in d.items():
        if name == "device":
            continue
        print(f"{name:22s} sets {v['sets']}: {v['total']} drafts -> {v['after_rule1']} after rule 1")


# ============================================================================ decode
# Decode experiment: AttAcc preset -> key of its results in the JSON.
DECODE_DEVICES = {"attacc": "decode", "attacc-unconstrained": "decode_unconstrained"}
DECODE_VARIANTS = ("gpu", "attacc_base", "attacc_full", "attacc_base_fb", "attacc_full_fb", "attacc_full_lit",
                   "attacc_full_lit_fb", "dcc")


def _gpu_attention(view, d, host, L):
    """The GPU runs attention as its four operators (QK^T, scale, softmax, x V), one kernel each."""
    nbh = d["b"] * d["n"]
    return (
        roofline(view, (d["b"] * d["k"] + 2 * nbh * d["k"] // 2 + nbh) * 2, 2 * nbh * d["k"], host=host, launch_us=L).ns
        + roofline(view, 2 * nbh * 2, nbh, host=host, launch_us=L).ns
        + roofline(view, 2 * nbh * 2, 5 * nbh, host=host, launch_us=L).ns
        + roofline(view, (nbh + nbh * d["k"] + d["b"] * d["k"]) * 2, 2 * nbh * d["k"], host=host, launch_us=L).ns
    )


def run_decode(scale: str, device: str = "attacc", on_row=None) -> dict:
    """One decode step per (model, batch, context) on ``device``, for every GPU baseline and launch overhead.

    ``on_row(rows)``, if given, is called after every configuration (the script saves its JSON there, so a
    killed run keeps the steps done).  Variants: GPU only; AttAcc-Base (attention on PIM with the default tiling) and AttAcc-Full (attention
    and FFN), each as the paper defines them (always on PIM) and with the per-operator GPU fallback DCC
    gets (``_fb``: an operator runs where it is faster); DCC (best draft, per-operator fallback).
    """
    view = PimView(tvm_pim.load(device))
    L0 = view.hw.system.host.launch_overhead_us
    batches = [1] if scale == "quick" else [1, 4, 16]
    ctxs = {"quick": [256], "small": [512, 1024, 2048]}.get(scale, [256, 512, 1024, 2048, 4096])
    models = list(LLMS)[:1] if scale == "quick" else list(LLMS)
    cache: dict = {}

    def pim(spec, how):
        key = (spec, how)
        if key not in cache:
            if how in ("default", "literal"):
                d = default_draft(spec, view, literal=how == "literal")
                cache[key] = _sim(spec, view, d, BASELINE).latency_ns
            else:
                drafts, _ = enumerate_drafts(spec, view)
                cache[key] = best_by_simulation(spec, view, drafts)[2]
        return cache[key]

    rows = []
    jobs = [(m, b, c) for m in models for b in batches for c in ctxs]
    for model, B, ctx in tqdm(jobs, desc=f"decode steps ({device})", unit="config"):
        layers = LLMS[model]["layers"]
        ops = decode_ops(model, B, ctx)
        by = {}
        for hname, host in view.hosts.items():
            for L in LAUNCH_US:
                per = {v: {} for v in DECODE_VARIANTS}
                for op in ops:
                    if op.kernel is None:
                        t = roofline(view, op.bytes, op.flops, host=host, launch_us=L).ns
                        for v in per:
                            per[v][op.phase] = per[v].get(op.phase, 0.0) + t
                        continue
                    if op.phase == "attention":
                        gpu = _gpu_attention(view, op.kernel.dims, host, L)
                    else:
                        gpu = kernel_time(view, op.kernel, host=host, launch_us=L).ns
                    dflt = pim(op.kernel, "default") + (L - L0) * 1e3
                    lit = pim(op.kernel, "literal") + (L - L0) * 1e3
                    dcc = pim(op.kernel, "dcc") + (L - L0) * 1e3
                    on_b = op.phase == "attention"
                    on_f = op.phase in ("attention", "ffn")
                    times = {
                        "gpu": gpu,
                        "attacc_base": dflt if on_b else gpu,
                        "attacc_full": dflt if on_f else gpu,
                        "attacc_base_fb": min(dflt, gpu) if on_b else gpu,
                        "attacc_full_fb": min(dflt, gpu) if on_f else gpu,
                        "attacc_full_lit": lit if on_f else gpu,
                        "attacc_full_lit_fb": min(lit, gpu) if on_f else gpu,
                        "dcc": min(dcc, gpu),
                    }
                    for v, t in times.items():
                        per[v][op.phase] = per[v].get(op.phase, 0.0) + t
                tot = {v: layers * sum(p.values()) for v, p in per.items()}
                by[f"{hname}@{L:g}us"] = {"per_layer_phase_ns": per, "step_ns": tot}
        main = by[f"host@{L0:g}us"]
        tot = main["step_ns"]
        rows.append(
            {
                "device": device,
                "model": model,
                "batch": B,
                "ctx": ctx,
                "layers": layers,
                "per_layer_phase_ns": main["per_layer_phase_ns"],
                "step_ns": tot,
                "by_host_launch": {k: v["step_ns"] for k, v in by.items()},
                "speedup_dcc_vs_gpu": tot["gpu"] / tot["dcc"],
                "speedup_dcc_vs_attacc_base": tot["attacc_base"] / tot["dcc"],
                "speedup_dcc_vs_attacc_full": tot["attacc_full"] / tot["dcc"],
                "speedup_dcc_vs_attacc_base_fb": tot["attacc_base_fb"] / tot["dcc"],
                "speedup_dcc_vs_attacc_full_fb": tot["attacc_full_fb"] / tot["dcc"],
                "speedup_attacc_full_vs_gpu": tot["gpu"] / tot["attacc_full"],
                "speedup_dcc_vs_attacc_full_lit": tot["attacc_full_lit"] / tot["dcc"],
                "speedup_dcc_vs_attacc_full_lit_fb": tot["attacc_full_lit_fb"] / tot["dcc"],
            }
        )
        if on_row:
            on_row(rows)
    metrics = ("speedup_dcc_vs_gpu", "speedup_dcc_vs_attacc_base", "speedup_dcc_vs_attacc_full",
               "speedup_dcc_vs_attacc_base_fb", "speedup_dcc_vs_attacc_full_fb", "speedup_attacc_full_vs_gpu",
               "speedup_dcc_vs_attacc_full_lit", "speedup_dcc_vs_attacc_full_lit_fb")
    summ = {m: _stats([r[m] for r in rows]) for m in metrics}
    summ["by_host_launch"] = {
        k: {f"dcc_vs_{v}": _stats([r["by_host_launch"][k][v] / r["by_host_launch"][k]["dcc"] for r in rows])
            for v in DECODE_VARIANTS if v != "dcc"}
        for k in rows[0]["by_host_launch"]
    }
    return {"device": device, "rows": rows, "summary": summ}


def print_decode(res):
    print(f"\n== LLM decode step on {res['device']} (all layers, A100 datasheet host, launch as in the file; "
          "paper: DCC 4.88x avg over GPU, 1.86x avg over AttAcc-Full) ==")
    print("(A-B / A-F: AttAcc-Base / -Full as defined, always on PIM; A-B fb / A-F fb: with the per-operator GPU "
          "fallback DCC gets; A-F lit: AttAcc-Full with the literal default tiling, leftover channels idle)")
    print(f"{'model':11s} {'B':>3s} {'ctx':>5s} {'GPU':>9s} {'AttAcc-B':>9s} {'AttAcc-F':>9s} {'A-F fb':>9s} {'DCC':>9s} "
          f"{'DCC/GPU':>8s} {'DCC/A-B':>8s} {'DCC/A-F':>8s} {'DCC/A-Bfb':>9s} {'DCC/A-Ffb':>9s} {'DCC/A-Flit':>10s} "
          f"{'DCC/A-Flitfb':>12s}")
    for r in res["rows"]:
        t = r["step_ns"]
        print(
            f"{r['model']:11s} {r['batch']:3d} {r['ctx']:5d} {t['gpu'] / 1e6:8.3f}m {t['attacc_base'] / 1e6:8.3f}m "
            f"{t['attacc_full'] / 1e6:8.3f}m {t['attacc_full_fb'] / 1e6:8.3f}m {t['dcc'] / 1e6:8.3f}m "
            f"{r['speedup_dcc_vs_gpu']:7.2f}x {r['speedup_dcc_vs_attacc_base']:7.2f}x {r['speedup_dcc_vs_attacc_full']:7.2f}x "
            f"{r['speedup_dcc_vs_attacc_base_fb']:8.2f}x {r['speedup_dcc_vs_attacc_full_fb']:8.2f}x "
            f"{r['speedup_dcc_vs_attacc_full_lit']:9.2f}x {r['speedup_dcc_vs_attacc_full_lit_fb']:11.2f}x"
        )
    s = res["summary"]
    print("mean (max): " + ", ".join(f"{k} {v['mean']:.2f}x ({v['max']:.2f}x)" for k, v in s.items() if k != "by_host_launch"))
    print(f"\n== {res['device']} decode: DCC speedup (mean / max over configs) per GPU baseline and launch overhead ==")
    keys = [k for k in next(iter(s["by_host_launch"].values()))]
    print(f"{'host@launch':18s} " + " ".join(f"{k[7:]:>17s}" for k in keys))
    for hl, m in s["by_host_launch"].items():
        print(f"{hl:18s} " + " ".join(f"{m[k]['mean']:7.2f} / {m[k]['max']:6.2f}" for k in keys))


# ============================================================================ simulation speed
def run_simspeed(size: int = 4096) -> dict:
    out = {}
    for dev in ("hbm-pim", "attacc"):
        view = PimView(tvm_pim.load(dev))
        spec = KernelSpec.make("gemv", b=1, m=1, n=size, k=size)
        drafts, _ = enumerate_drafts(spec, view)
        sim = Simulator(view.hw)
        gen_t, sim_t = [], []
        for d in drafts:
            t0 = time.perf_counter()
            try:
                st = generate(spec, d, view)
            except Exception:  # drafts that do not fit the banks are skipped by every driver
                continue
            t1 = time.perf_counter()
            sim.run(st, functional=False)
            t2 = time.perf_counter()
            gen_t.append(t1 - t0)
            sim_t.append(t2 - t1)
        best, st, _ = best_by_simulation(spec, view, drafts)
        inputs = spec.random_inputs(0)
        t0 = time.perf_counter()
        sim.run(st, inputs, functional=True)
        func_s = time.perf_counter() - t0
        out[dev] = {
            "size": size,
            "drafts": len(drafts),
            "timing_ms_mean": 1e3 * float(np.mean(sim_t)),
            "timing_ms_max": 1e3 * float(np.max(sim_t)),
            "codegen_ms_mean": 1e3 * float(np.mean(gen_t)),
            "functional_ms_best_draft": 1e3 * func_s,
        }
    return out


def print_simspeed(res):
    for dev, r in res.items():
        if dev == next(iter(res)):
            print(f"\n== Simulating one {r['size']}x{r['size']} GEMV draft (timing: codegen + simulator) ==")
        print(
            f"{dev:8s} {r['drafts']} drafts: timing {r['timing_ms_mean']:.2f} ms mean, {r['timing_ms_max']:.2f} ms max; "
            f"code generation {r['codegen_ms_mean']:.2f} ms; functional FP16 run of the chosen draft {r['functional_ms_best_draft']:.0f} ms"
        )


# ============================================================================ exported graphs
def standard_k(model):
    """A zoo decode layer with K stored ``(B, H, T, D)`` and transposed in the graph, as exporters write it."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    inp = next(i for i in m.graph.input if i.name == "k_cache")
    dims = inp.type.tensor_type.shape.dim
    d2, d3 = dims[2].dim_value, dims[3].dim_value
    dims[2].dim_value, dims[3].dim_value = d3, d2
    for n in m.graph.node:
        n.input[:] = ["k_cache_T" if i == "k_cache" else i for i in n.input]
    m.graph.node.insert(0, helper.make_node("Transpose", ["k_cache"], ["k_cache_T"], perm=[0, 1, 3, 2]))
    onnx.checker.check_model(m)
    return m


def graph_cases(scale: str) -> list[tuple[str, object]]:
    """(label, ONNX model) of the ``graphs`` experiment."""
    if scale == "quick":
        lay, blk = "batch=1,ctx=128,hidden=256,heads=2,ffn=512", dict(batch=1, ctx=128, heads=2, head_dim=128)
    else:
        lay, blk = "batch=4,ctx=1024,hidden=1024,heads=8,ffn=4096", dict(batch=4, ctx=1024, heads=8, head_dim=128)
    out = []
    for arch in ("gpt", "llama"):
        m = load_onnx(f"zoo:{arch}_decode?{lay}")
        out.append((f"zoo:{arch}_decode K pre-transposed", m))
        out.append((f"zoo:{arch}_decode K transposed in graph", standard_k(m)))
    for style, mask in (("gpt2", "none"), ("gpt2", "zeros"), ("sdpa", "none"), ("split", "none"), ("llama", "zeros"),
                        ("gpt2", "input")):
        out.append((f"attention {style} mask={mask}", attention_block(style, mask=mask, **blk)))
    return out


def run_graphs(scale: str, device: str = "attacc", on_row=None) -> dict:
    """Compile and simulate each exported graph with the KV cache resident (``--resident k_cache,v_cache``).

    ``on_row(rows)``, if given, is called after every graph (as in :func:`run_decode`).
    """
    rows = []
    for label, model in tqdm(graph_cases(scale), desc=f"exported graphs ({device})", unit="graph"):
        mod, shapes, dtypes = import_onnx(model, label)
        inputs = model_inputs(None, shapes, dtypes, 0)
        with tvm_pim.offload_options(resident=("k_cache", "v_cache")):
            ex = relax.build(mod, target=f"pim -hw={device}")
        info = tvm_pim.last_compile_info()
        with tvm_pim.runtime.collect() as stats:
            run_vm(ex, inputs, list(shapes))
        rep = report.build_report(info, stats, device)
        attn = [k for k in info.kernels if k.pattern == "attn"]
        rows.append({
            "graph": label,
            "latency_ns": rep["latency_ns"],
            "gpu_latency_ns": rep["gpu_latency_ns"],
            "speedup_over_gpu": rep["speedup_over_gpu"],
            "attention": (f"attn on PIM, resident {','.join(attn[0].spec.resident) or '-'}" if attn and attn[0].offloaded
                          else "attn on host" if attn else
                          "QK^T/PV as GEMV: " + ", ".join(f"{k.spec.name}{'' if k.offloaded else ' (host)'}"
                                                          for k in info.kernels if k.pattern == "bgemv")),
            "host_ops": info.host_ops,
        })
        if on_row:
            on_row(rows)
    return {"device": device, "rows": rows}


def print_graphs(res):
    print(f"\n== Exported decode graphs on {res['device']}, KV cache resident (A100 datasheet host) ==")
    print(f"{'graph':44s} {'PIM+host':>10s} {'GPU only':>10s} {'speedup':>8s}  attention")
    for r in res["rows"]:
        print(f"{r['graph']:44s} {r['latency_ns'] / 1e3:9.1f}u {r['gpu_latency_ns'] / 1e3:9.1f}u "
              f"{r['speedup_over_gpu']:7.2f}x  {r['attention']}")


# ============================================================================ plots
def plot(res: dict, outdir: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    outdir.mkdir(parents=True, exist_ok=True)
    files = []
    if "kernels" in res:
        rows = res["kernels"]["rows"]
        for dev in ("hbm-pim", "attacc"):
            sel = [r for r in rows if r["device"] == dev and r["scenario"] in ("resident",)]
            if not sel:
                continue
            fig, ax = plt.subplots(figsize=(max(8, len(sel) * 0.35), 4))
            x = np.arange(len(sel))
            ax.bar(x - 0.2, [r["speedup_default_vs_gpu"] for r in sel], 0.4, label="default tiling")
            ax.bar(x + 0.2, [r["speedup_dcc_vs_gpu"] for r in sel], 0.4, label="DCC")
            ax.axhline(1.0, color="k", lw=0.8)
            ax.set_xticks(x)
            ax.set_xticklabels([f"{r['kernel']} {r['workload'].split('_', 1)[1]}" for r in sel], rotation=90, fontsize=6)
            ax.set_ylabel("speedup over GPU")
            ax.set_yscale("log")
            ax.set_title(f"{dev}: kernels (resident operands)")
            ax.legend()
            fig.tight_layout()
            f = outdir / f"kernels_{dev}.png"
            fig.savefig(f, dpi=120)
            plt.close(fig)
            files.append(str(f))
        big = [r for r in rows if max(r["sizes"].get("n", 0), int(math.isqrt(r["sizes"].get("i", 0)))) == 4096]
        if big:
            fig, ax = plt.subplots(figsize=(max(8, len(big) * 0.5), 4))
            x = np.arange(len(big))
            for off, key, lab in ((-0.2, "default", "default"), (0.2, "dcc", "DCC")):
                re = [r["breakdown"][key]["rearrangement_ns"] / r["default_ns"] for r in big]
                co = [r["breakdown"][key]["compute_ns"] / r["default_ns"] for r in big]
                ho = [r["breakdown"][key]["host_ns"] / r["default_ns"] for r in big]
                ax.bar(x + off, re, 0.4, label=f"{lab}: data rearrangement", hatch="//" if key == "dcc" else None)
                ax.bar(x + off, co, 0.4, bottom=re, label=f"{lab}: compute", hatch="//" if key == "dcc" else None)
                ax.bar(x + off, ho, 0.4, bottom=np.add(re, co), label=f"{lab}: host", hatch="//" if key == "dcc" else None)
            ax.set_xticks(x)
            ax.set_xticklabels([f"{r['device']} {r['kernel']} {r['scenario']} {r['workload'].split('_')[1]}" for r in big],
                               rotation=90, fontsize=6)
            ax.set_ylabel("time / default time")
            ax.set_title("Fig. 10-style breakdown (size 4096)")
            ax.legend(fontsize=6)
            fig.tight_layout()
            f = outdir / "breakdown.png"
            fig.savefig(f, dpi=120)
            plt.close(fig)
            files.append(str(f))
    if "decode" in res:
        rows = res["decode"]["rows"]
        fig, ax = plt.subplots(figsize=(max(8, len(rows) * 0.6), 4))
        phases = ["qkv", "attention", "projection", "ffn", "other"]
        x = np.arange(len(rows))
        for i, (v, lab) in enumerate((("gpu", "GPU"), ("attacc_base", "AttAcc-Base"), ("attacc_full", "AttAcc-Full"), ("dcc", "DCC"))):
            bottom = np.zeros(len(rows))
            for j, ph in enumerate(phases):
                vals = np.array([r["per_layer_phase_ns"][v].get(ph, 0.0) / sum(r["per_layer_phase_ns"]["gpu"].values()) for r in rows])
                ax.bar(x + (i - 1.5) * 0.2, vals, 0.2, bottom=bottom, color=f"C{j}", label=ph if i == 0 else None,
                       edgecolor="k", linewidth=0.3)
                bottom += vals
        ax.set_xticks(x)
        ax.set_xticklabels([f"{r['model']} B{r['batch']} L{r['ctx']}" for r in rows], rotation=90, fontsize=7)
        ax.set_ylabel("time / GPU time (bars: GPU, AttAcc-B, AttAcc-F, DCC)")
        ax.legend(fontsize=7)
        ax.set_title("LLM decode step on AttAcc")
        fig.tight_layout()
        f = outdir / "decode.png"
        fig.savefig(f, dpi=120)
        plt.close(fig)
        files.append(str(f))
    return files


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--experiment", default="all", choices=["all", "kernels", "fig10", "decode", "simspeed", "graphs"],
                   help="fig10: the kernels experiment on the size-4096 workloads only, with the measured breakdown")
    p.add_argument("--scale", default="small", choices=["small", "full"])
    p.add_argument("--quick", action="store_true", help="one small size per kernel and decode step (seconds)")
    p.add_argument("--json", help="write all results here")
    p.add_argument("--plots", default="out/pim_kernels", help="directory for PNG plots")
    p.add_argument("--decode-devices", nargs="+", default=list(DECODE_DEVICES), choices=DECODE_DEVICES,
                   help="AttAcc presets of the decode experiment (one per process keeps memory down)")
    p.add_argument("--summarise", metavar="JSON", help="re-summarise and print the kernels table of an earlier --json")
    args = p.parse_args(argv)
    if args.summarise:
        try:
            old = json.loads(Path(args.summarise).read_text())["kernels"]
        except (OSError, KeyError, ValueError) as e:
            print(f"error: {args.summarise}: no kernels results ({e})", file=sys.stderr)
            return 2
        old["summary"], old["baselines"] = summarise(old["rows"]), baseline_summary(old["rows"])
        old.setdefault("rule1", rule1_demo())
        print_kernels(old)
        print_fig10_breakdown(fig10_breakdown(old["rows"]))
        return 0
    if args.quick:
        args.scale = "quick"
    t0 = time.perf_counter()
    res: dict = {"scale": args.scale}

    def partial(key: str, device: str):
        """Save ``res`` with the rows of an unfinished experiment, so a killed run keeps what is done."""
        def save(rows):
            if args.json:
                write_json({**res, key: {"device": device, "rows": rows, "partial": True}}, args.json)
        return save

    def checkpoint():
        if args.json:
            write_json(res, args.json)

    if args.experiment in ("all", "simspeed"):
        res["simspeed"] = run_simspeed(512 if args.quick else 4096)
        print_simspeed(res["simspeed"])
        checkpoint()
    if args.experiment in ("all", "kernels", "fig10"):
        res["kernels"] = run_kernels(args.scale, only_fig10=args.experiment == "fig10")
        print_kernels(res["kernels"])
        print_fig10_breakdown(res["kernels"]["fig10_breakdown"])
        checkpoint()
    if args.experiment in ("all", "decode"):
        for dev in args.decode_devices:
            key = DECODE_DEVICES[dev]
            res[key] = run_decode(args.scale, dev, on_row=partial(key, dev))
            print_decode(res[key])
            checkpoint()
    if args.experiment in ("all", "graphs"):
        res["graphs"] = run_graphs(args.scale, on_row=partial("graphs", "attacc"))
        print_graphs(res["graphs"])
    return finish_benchmark(res, plot(res, Path(args.plots)), args.json, t0)


if __name__ == "__main__":
    sys.exit(main())

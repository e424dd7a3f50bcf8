"""MIREDO (paper 001): per-layer dataflow by MIP against weight-stationary and a ZigZag-like heuristic.

For every convolution and fully connected layer of ResNet-18, VGG-16 and
MobileNetV2 on the ``miredo`` preset (8-core digital SRAM CIM), four mappers
choose the layer's dataflow with the cost primitives of
:mod:`tvm_cim.hardware.loopnest`:

* ``miredo``: the MIP (HiGHS, per-solve node limit, started from the best
  heuristic mapping: as its incumbent on dense windowed layers, as an upper
  bound elsewhere) -- :func:`tvm_cim.compiler.dataflow.optimise`;
* ``ws``: the same MIP with the weight-stationary constraints;
* ``zigzag``: the ZigZag/LOMA-like heuristic (loop orders x greedy level fill),
  choosing by the same stall-aware model as miredo (the strongest form of the
  baseline: the headline ratio);
* ``zigzag-roofline``: the same search choosing by the max-of-levels latency
  (every transfer overlapped: the busiest port or the MVMs), the model the
  paper describes prior analytical tools by (001, sec. III-B).  Reported
  beside the other: what the paper's ZigZag-inspired baseline chose by is
  not published; these are two plausible readings of it.

All four minimise the energy-delay product by default (``--objective
edp``: the issue's and the paper's figure of merit is EDP; the MIP runs the
epsilon-constraint sweep of :mod:`tvm_cim.compiler.solvers.dataflow_mip`,
the heuristic keeps its smallest-EDP order); ``--objective latency`` is
the paper's own MIP objective (minimal latency, then least energy within
0.1 %).  Every chosen mapping is
*executed* by the event-level loop-nest simulator
(:mod:`tvm_cim.simulator.loopnest`), which gives the latency and energy
reported.  Reported: per-layer latency and EDP, network EDP ratios
(``EDP(baseline) / EDP(miredo)``, network EDP = total latency x total
energy), the accuracy of the MIP's own latency and of the analytical model
against the execution (``1 - |pred - sim| / sim``, mean over layers), and
solve time per layer and per network.  Layers of the same shape are solved
once (the network solve time counts each shape once).  The distinct shapes
are solved in ``--workers`` processes (default: every CPU;
:func:`tvm_cim.compiler.dataflow.optimise_all`): the mappings do not depend
on it; the network's solve is reported as CPU seconds (the sum over its
shapes) and as elapsed seconds, start to end over the workers.

    python benchmarks/miredo.py                  # the three CNNs at 224x224 (about 15-20 min on 2 cores)
    python benchmarks/miredo.py --quick          # ResNet-18 at 32x32, short limits (a minute)
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
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tvm_cim  # noqa: E402
from tvm_cim.common import zoo  # noqa: E402
from tvm_cim.compiler import dataflow as DF  # noqa: E402
from tvm_cim.hardware import loopnest as LN  # noqa: E402
from tvm_cim.simulator.loopnest import simulate  # noqa: E402

METHODS = DF.METHODS
BASELINES = METHODS[1:]
PAPER = {"edp_gain_vs_heuristic": (1.6, 3.2), "model_accuracy_resnet18": 0.955, "solver_cap_s": 300}


def layers_of(model: onnx.ModelProto) -> list[LN.Layer]:
    """Convolutions and Gemm/MatMul layers with constant weights, in graph order (shapes by ONNX inference)."""
    m = onnx.shape_inference.infer_shapes(model)
    shapes = {}
    for vi in list(m.graph.value_info) + list(m.graph.input) + list(m.graph.output):
        shapes[vi.name] = [d.dim_value for d in vi.type.tensor_type.shape.dim]
    inits = {i.name: list(i.dims) for i in m.graph.initializer}
    out = []
    for k, node in enumerate(m.graph.node):
        at = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type == "Conv" and node.input[1] in inits:
            n, c, _, _ = shapes[node.input[0]]
            _, oc, oh, ow = shapes[node.output[0]]
            g = int(at.get("group", 1))
            kh, kw = inits[node.input[1]][2:]
            out.append(LN.Layer.conv(f"{k}:{node.name or 'conv'}", n, oc // g, c // g, oh, ow, kh, kw, g,
                                     tuple(at.get("strides", (1, 1))), tuple(at.get("dilations", (1, 1)))))
        elif node.op_type in ("Gemm", "MatMul") and node.input[1] in inits:
            x = shapes[node.input[0]]
            w = inits[node.input[1]]
            kin = x[-1]
            nout = w[0] if (node.op_type == "Gemm" and at.get("transB", 0)) else w[-1]
            mrows = int(np.prod(x[:-1]))
            out.append(LN.Layer.conv(f"{k}:{node.name or 'fc'}", 1, nout, kin, mrows, 1, 1, 1))
    return out


def _shape_key(layer: LN.Layer) -> tuple:
    return tuple(sorted(layer.bounds.items())), layer.stride, layer.dilation


def _sim_row(layer: LN.Layer, hier: LN.Hierarchy, r: DF.Result, mapping: LN.Mapping, cost: LN.Cost) -> dict:
    """One mapper's figures of one layer: the mapping simulated, its model cost, the solve."""
    sim = simulate(layer, hier, mapping)
    row = {"cycles_sim": sim.cycles, "energy_pj_sim": sim.total_energy_pj,
           "cycles_model": cost.cycles, "energy_pj_model": cost.energy_pj,
           "cycles_roofline": LN.roofline_latency(layer, hier, mapping),
           "cycles_mip": None if math.isnan(r.mip_cycles) or mapping != r.mapping else r.mip_cycles,
           "solve_s": r.seconds, "solve_cpu_s": r.cpu_seconds, "status": r.status,
           "time_limit_hit": r.time_limit_hit, "mapping": mapping.text(),
           "stall_share": sim.stall_cycles / sim.cycles}
    row["edp_sim"] = row["cycles_sim"] * hier.cycle_ns * row["energy_pj_sim"]
    return row


def network_choice(layers: list, results: dict) -> dict:
    """miredo's mapping per distinct shape for the least network EDP (model): :func:`DF.choose_network` over
    every shape's front (``Result.front``), each shape counted as often as it occurs.  ``{shape key: index}``."""
    keys = list(results)
    counts = [sum(_shape_key(x) == k for x in layers) for k in keys]
    fronts = [[(c.cycles, c.energy_pj) for _, c in results[k].front] for k in keys]
    return dict(zip(keys, DF.choose_network(fronts, counts)))


def _totals(rs: list, solved: list, hier: LN.Hierarchy) -> dict:
    """Network figures of one mapper's rows (``solved``: the first occurrence of each shape)."""
    lat = sum(r["cycles_sim"] for r in rs) * hier.cycle_ns
    en = sum(r["energy_pj_sim"] for r in rs)
    acc_mip = [1 - abs(r["cycles_mip"] - r["cycles_sim"]) / r["cycles_sim"] for r in rs if r["cycles_mip"] is not None]
    return {
        "latency_ns": lat, "energy_pj": en, "edp": lat * en,
        "solve_s_network": sum(r["solve_s"] for r, f in zip(rs, solved) if f),
        "solve_cpu_s_network": sum(r["solve_cpu_s"] for r, f in zip(rs, solved) if f),
        "time_limit_hits": sum(bool(r["time_limit_hit"]) for r, f in zip(rs, solved) if f),
        "solve_s_max_layer": max(r["solve_s"] for r in rs),
        "model_accuracy": float(np.mean([1 - abs(r["cycles_model"] - r["cycles_sim"]) / r["cycles_sim"] for r in rs])),
        "mip_accuracy": float(np.mean(acc_mip)) if acc_mip else None,
    }


def run_network(name: str, layers: list, hier: LN.Hierarchy, settings: dict, objective: str,
                progress=None, choice: str = "network", workers: int = 1) -> dict:
    """Every mapper on every distinct layer shape; per-layer rows and network totals.

    ``progress(rows)``, when given, is called after every layer (partial results of a long run).
    ``choice``: ``layer`` takes miredo's mapping of least EDP per layer; ``network`` (default) the point of every
    layer's front that gives the least network EDP in the model (:func:`network_choice`), simulated; the totals of
    the per-layer choice are kept too (``totals['miredo_layer_choice']``).
    """
    shapes: dict = {}  # every distinct shape once, solved by each mapper over workers processes
    for layer in layers:
        shapes.setdefault(_shape_key(layer), layer)
    # one pool for every mapper's solves, miredo's first (the workers take the jobs in order): a mapper's elapsed
    # solve time runs from the start of its first shape's solve (its end less its wall time) to the end of its last
    jobs = [(meth, key, x) for meth in METHODS for key, x in shapes.items()]
    span: dict = {}

    def finished(i, res):
        end = time.perf_counter()
        lo, hi = span.get(jobs[i][0], (math.inf, -math.inf))
        span[jobs[i][0]] = (min(lo, end - res.seconds), max(hi, end))

    rs = DF.optimise_all([(x, dict(method=meth, objective=objective, **settings)) for meth, _, x in jobs], hier,
                         workers, desc=f"{name} solves ({len(shapes)} shapes x {len(METHODS)} mappers)",
                         done=finished)
    elapsed = {meth: hi - lo for meth, (lo, hi) in span.items()}
    solved_by: dict = {meth: {} for meth in METHODS}
    for (meth, key, _), r in zip(jobs, rs):
        solved_by[meth][key] = r
    cache: dict = {}
    mi_res: dict = {}
    rows = []
    for layer in tqdm(layers, desc=f"{name} layers (simulated)", leave=False):
        key = _shape_key(layer)
        if key not in cache:
            res = {}
            for meth in METHODS:
                r = solved_by[meth][key]
                # miredo's CPU time includes the ws solve it takes its candidate from (solved once)
                res[meth] = _sim_row(layer, hier, r, r.mapping, r.cost)
                if meth == "miredo":
                    mi_res[key] = r
            cache[key] = (res, True)
        res, first = cache[key]
        rows.append({"layer": layer.name, "bounds": layer.bounds, "stride": list(layer.stride), "macs": layer.macs,
                     "solved": first, **{m: res[m] for m in METHODS}})
        cache[key] = (res, False)
        if progress is not None:
            progress(rows)
    layer_choice = [r["miredo"] for r in rows]
    if choice == "network" and objective == "edp":
        picked, simmed = network_choice(layers, mi_res), {}
        for layer, row in zip(layers, rows):
            key = _shape_key(layer)
            r = mi_res[key]
            m, c = r.front[picked[key]]
            if m != r.mapping:
                if key not in simmed:
                    simmed[key] = _sim_row(layer, hier, r, m, c)
                row["miredo"] = {**simmed[key], "status": "network choice (" + r.status + ")"}
    solved = [r["solved"] for r in rows]
    tot = {meth: {**_totals([r[meth] for r in rows], solved, hier), "solve_elapsed_s": elapsed[meth],
                  "workers": min(workers, len(jobs))} for meth in METHODS}
    tot["miredo_layer_choice"] = _totals(layer_choice, solved, hier)
    gains = {b: tot[b]["edp"] / tot["miredo"]["edp"] for b in BASELINES}
    gains["zigzag_over_layer_choice"] = tot["zigzag"]["edp"] / tot["miredo_layer_choice"]["edp"]
    speed = {b: tot[b]["latency_ns"] / tot["miredo"]["latency_ns"] for b in BASELINES}
    per_layer = {b: [r[b]["edp_sim"] / r["miredo"]["edp_sim"] for r in rows] for b in BASELINES}
    return {"layers": rows, "totals": tot, "edp_gain": gains, "latency_speedup": speed,
            "edp_gain_per_layer_range": {b: [min(v), max(v)] for b, v in per_layer.items()}}


def bounds_network(layers: list, hier: LN.Hierarchy, nodes: int, settings: dict) -> list:
    """Per distinct shape: the MIP's proven lower bounds per spatial candidate and zigzag's model EDP.

    ``max_gain`` = zigzag's EDP / the smallest EDP lower bound over the six spatial candidates
    (the spatial unrollings MIREDO and zigzag search): no mapping of that space beats zigzag by more.
    """
    rows, seen = [], set()
    for layer in layers:
        if _shape_key(layer) in seen:
            continue
        seen.add(_shape_key(layer))
        _, zc = DF.zigzag(layer, hier, "edp", seed=settings["seed"], max_orders=settings["max_orders"],
                      spatial_top=settings["zigzag_spatial"])
        per = []
        for sp in DF.spatial_candidates(layer, hier, top=6):
            b = DF.dataflow_mip.lower_bounds(layer, hier, sp, node_limit=nodes, seed=settings["seed"])
            per.append({"spatial": str(sp), **b})
        low = min(p["edp_lower"] for p in per)
        rows.append({"layer": layer.name, "bounds": layer.bounds, "zigzag_edp_model": zc.edp, "edp_lower": low,
                     "max_gain": zc.edp / low, "per_spatial": per})
        print(f"{layer.name[:24]:<25} zigzag EDP {zc.edp:.3e}  EDP lower bound {low:.3e}  max gain "
              f"{zc.edp / low:.2f}x  (latency bounds {min(p['cycles']['lower'] for p in per):.0f} cycles, "
              f"energy bounds {min(p['energy_pj']['lower'] for p in per):.3e} pJ)", flush=True)
    return rows


def _edp(c: LN.Cost) -> float:
    return c.edp


SWEEP_LAYERS = {  # representative layer classes: (network, layer name) at 224 px
    "1x1 s1": ("mobilenetv2", "features.5.conv.2"),
    "1x1 s2": ("resnet18", "layer3.0.downsample.0"),
    "3x3 s1": ("resnet18", "layer2.0.conv2"),
    "3x3 s2": ("resnet18", "layer3.0.conv1"),
    "depthwise": ("mobilenetv2", "features.5.conv.1.0"),
    "fc": ("resnet18", "fc"),
}


def sweep_layer(layer: LN.Layer, hier: LN.Hierarchy, nodes: int, ratio: float, settings: dict,
                spatial_top: int = 6) -> dict:
    """The least energy under a ladder of latency caps (epsilon-constraint), per spatial candidate.

    Per spatial unrolling (the six zigzag and miredo search): the MIP's proven
    latency and energy bounds, then the least energy under caps from the
    latency bound upwards in steps of ``ratio`` up to the latency above which
    no mapping can beat zigzag's EDP (``EDP(zigzag) / least energy``).  Gives
    the EDP lower bound of the space (``edp_lower``: no mapping of these
    spatial unrollings with Alg. 1 factors beats it) and the best EDP found
    (every point of the sweep evaluated exactly), against zigzag's and
    miredo's model EDP.
    """
    _, zc = DF.zigzag(layer, hier, "edp", seed=settings["seed"], max_orders=settings["max_orders"],
                      spatial_top=settings["zigzag_spatial"])
    mi = DF.optimise(layer, hier, "miredo", "edp", **settings)
    per, best = [], (None, None)
    for sp in DF.spatial_candidates(layer, hier, top=spatial_top):
        def ladder(l_low, e_low):
            top = zc.edp / (hier.cycle_ns * max(e_low, 1e-30))
            caps, cap = [], max(l_low, 1.0) * ratio
            while cap < top * ratio and len(caps) < 40:
                caps.append(cap)
                cap *= ratio
            return caps
        c0 = time.process_time()
        b = DF.dataflow_mip.lower_bounds(layer, hier, sp, node_limit=nodes, seed=settings["seed"], ladder=ladder)
        found = [s["mapping"] for s in b.get("ladder", []) if s["mapping"] is not None]
        found += [b[k]["mapping"] for k in ("cycles", "energy_pj") if "mapping" in b[k]]
        pts = []
        for m in found:
            if LN.check(layer, hier, m):
                continue
            c = LN.evaluate(layer, hier, m)
            pts.append((c.edp, c.cycles, c.energy_pj))
            if best[1] is None or c.edp < best[1].edp:
                best = (m, c)
        low = b.get("edp_lower_ladder", b["edp_lower"])
        per.append({"spatial": str(sp), "edp_lower": low, "edp_lower_simple": b["edp_lower"],
                    "cycles_lower": b["cycles"]["lower"], "energy_lower": b["energy_pj"]["lower"],
                    "caps": len(b.get("ladder", [])), "best_edp_found": min(pts)[0] if pts else math.nan,
                    "points": pts, "cpu_s": time.process_time() - c0})
    # both are lower bounds of every spatial candidate's space: the tighter (larger) of the MIP's and the
    # analytic floor's (dataflow.edp_floor) per candidate, then the least over the candidates
    for p_, sp in zip(per, DF.spatial_candidates(layer, hier, top=spatial_top)):
        p_["edp_floor"] = DF.edp_floor(layer, hier, sp)["edp"]
        p_["edp_lower"] = max(p_["edp_lower"], p_["edp_floor"])
    low = min(p["edp_lower"] for p in per)
    pol = DF.polish(layer, hier, best[0], _edp, 2000) if best[0] is not None else (None, None)
    return {"layer": layer.name, "bounds": layer.bounds, "stride": list(layer.stride),
            "zigzag_edp": zc.edp, "miredo_edp": mi.cost.edp, "edp_lower": low,
            "best_found_edp": best[1].edp if best[1] else math.nan,
            "best_found_polished_edp": pol[1].edp if pol[1] else math.nan,
            "best_found_mapping": pol[0].text() if pol[0] else None,
            "max_gain_vs_zigzag": zc.edp / low, "miredo_gain_vs_zigzag": zc.edp / mi.cost.edp,
            "left_vs_miredo": mi.cost.edp / low, "per_spatial": per}


def floor_layer(layer: LN.Layer, hier: LN.Hierarchy, settings: dict, spatial_top: int = 6) -> dict:
    """The analytic EDP floor (:func:`tvm_cim.compiler.dataflow.edp_floor`) over the six spatial candidates,
    against zigzag's and miredo's model EDP: no mapping of that space beats zigzag by more than ``max_gain``."""
    _, zc = DF.zigzag(layer, hier, "edp", seed=settings["seed"], max_orders=settings["max_orders"],
                      spatial_top=settings["zigzag_spatial"])
    mi = DF.optimise(layer, hier, "miredo", "edp", **settings)
    fl = [DF.edp_floor(layer, hier, sp) for sp in DF.spatial_candidates(layer, hier, top=spatial_top)]
    low = min(f["edp"] for f in fl)
    return {"layer": layer.name, "bounds": layer.bounds, "stride": list(layer.stride), "zigzag_edp": zc.edp,
            "miredo_edp": mi.cost.edp, "edp_floor": low, "max_gain_vs_zigzag": zc.edp / low,
            "miredo_gain_vs_zigzag": zc.edp / mi.cost.edp, "per_spatial": fl}


def floor_network(layers: list, hier: LN.Hierarchy, settings: dict, spatial_top: int = 6) -> dict:
    """The network-level EDP ceiling over zigzag: no mapping of every layer beats zigzag's network EDP by more.

    Network EDP, as :func:`run_network` defines it: (sum over layers of latency) x (sum of energy), every layer
    counted (repeated shapes too).  The floor is :func:`tvm_cim.compiler.dataflow.network_edp_floor` (the least
    over every choice of one spatial candidate per layer of (sum of the chosen latency floors) x (sum of their
    energy floors)); ``max_gain`` = zigzag's network EDP (its model, and as simulated) / that floor;
    ``max_gain_loose_*`` the same against the earlier, looser floor (least latency and least energy floors taken
    independently); ``*_vs_zigzag-roofline_*`` the same for the ``zigzag-roofline`` baseline.
    """
    cache: dict = {}
    for layer in layers:
        key = _shape_key(layer)
        if key not in cache:
            cache[key] = {}
            for meth, model in DF.ZIGZAG_METHODS.items():
                zm, zc = DF.zigzag(layer, hier, "edp", seed=settings["seed"], max_orders=settings["max_orders"],
                                   spatial_top=settings["zigzag_spatial"], model=model)
                zs = simulate(layer, hier, zm)
                cache[key][meth] = {"cycles_model": zc.cycles, "energy_pj_model": zc.energy_pj,
                                    "cycles_sim": zs.cycles, "energy_pj_sim": zs.total_energy_pj}
    fl = DF.network_edp_floor(layers, hier, spatial_top)
    rows = [{"layer": x.name, **cache[_shape_key(x)], "floor_cycles": c, "floor_energy_pj": e}
            for x, c, e in zip(layers, fl["cycles"], fl["energy_pj"])]
    for r, ps in zip(rows, fl["pairs"]):
        r["floor_pairs"] = ps
    out = {"layers": rows, "floor_edp": fl["edp"], "floor_latency_ns": fl["latency_ns"],
           "floor_energy_pj": fl["energy_pj_total"], "floor_edp_loose": fl["edp_loose"],
           "front_size": fl["front_size"]}
    for meth in DF.ZIGZAG_METHODS:
        zig = {k: (sum(r[meth]["cycles_" + k] for r in rows) * hier.cycle_ns,
                   sum(r[meth]["energy_pj_" + k] for r in rows)) for k in ("model", "sim")}
        for k, (lat, en) in zig.items():
            out[f"max_gain_loose_vs_{meth}_{k}"] = lat * en / fl["edp_loose"]
            out.update({f"{meth}_{q}_{k}": v for q, v in (("latency_ns", lat), ("energy_pj", en), ("edp", lat * en))})
            out[f"max_gain_vs_{meth}_{k}"] = lat * en / fl["edp"]
    return out


def print_network(name: str, res: dict) -> None:
    print(f"\n== {name}: {len(res['layers'])} layers")
    print(f"{'layer':<22}{'MACs':>12}" + "".join(f"{m + ' us':>12}{m + ' EDP':>13}" for m in METHODS)
          + f"{'acc(model)':>11}{'acc(mip)':>10}{'solve s':>9}")
    for r in res["layers"]:
        mi = r["miredo"]
        am = 1 - abs(mi["cycles_model"] - mi["cycles_sim"]) / mi["cycles_sim"]
        ap = "" if mi["cycles_mip"] is None else f"{1 - abs(mi['cycles_mip'] - mi['cycles_sim']) / mi['cycles_sim']:.3f}"
        line = f"{r['layer'][:21]:<22}{r['macs']:>12}"
        for m in METHODS:
            line += f"{r[m]['cycles_sim'] * 2e-3:>12.1f}{r[m]['edp_sim']:>13.3e}"
        print(line + f"{am:>11.3f}{ap:>10}{mi['solve_s'] if r['solved'] else 0:>9.1f}")
    t = res["totals"]
    for m in METHODS + ("miredo_layer_choice",):
        acc = "" if t[m]["mip_accuracy"] is None else f", MIP latency accuracy {t[m]['mip_accuracy']:.3f}"
        el = f", {t[m]['solve_elapsed_s']:.1f} s elapsed over {t[m]['workers']} worker(s)" if m in METHODS else ""
        print(f"  {m:<19} latency {t[m]['latency_ns'] / 1e3:10.1f} us  energy {t[m]['energy_pj'] / 1e6:9.2f} uJ  "
              f"EDP {t[m]['edp']:.3e} pJ.ns  solve {t[m]['solve_s_network']:.1f} s wall, "
              f"{t[m]['solve_cpu_s_network']:.1f} s CPU{el} (max layer "
              f"{t[m]['solve_s_max_layer']:.1f} s, safety-net hits {t[m]['time_limit_hits']})  "
              f"model accuracy {t[m]['model_accuracy']:.3f}{acc}")
    g = res["edp_gain"]
    print(f"  network EDP over miredo: zigzag {g['zigzag']:.3f}x, zigzag-roofline {g['zigzag-roofline']:.3f}x, "
          f"ws {g['ws']:.3f}x "
          f"(zigzag over miredo's per-layer choice {g['zigzag_over_layer_choice']:.3f}x)")
    print(f"  EDP gain of miredo: vs zigzag {res['edp_gain']['zigzag']:.2f}x, vs ws {res['edp_gain']['ws']:.2f}x "
          f"(paper vs heuristic: {PAPER['edp_gain_vs_heuristic'][0]}-{PAPER['edp_gain_vs_heuristic'][1]}x); "
          f"latency speedup vs zigzag {res['latency_speedup']['zigzag']:.2f}x, vs ws {res['latency_speedup']['ws']:.2f}x")
    print(f"  against the zigzag search choosing by the max-of-levels latency (zigzag-roofline): EDP gain "
          f"{g['zigzag-roofline']:.2f}x, latency speedup {res['latency_speedup']['zigzag-roofline']:.2f}x")


def plots(results: dict, folder: Path) -> list[str]:
    """Per-layer EDP of the four mappers, and model accuracy per layer (matplotlib Figure API)."""
    from matplotlib.figure import Figure

    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for name, res in results.items():
        rows = res["layers"]
        x = np.arange(len(rows))
        fig = Figure(figsize=(max(6, len(rows) * 0.35), 6))
        ax1, ax2 = fig.subplots(2, 1, sharex=True)
        w = 0.8 / len(METHODS)
        for i, m in enumerate(METHODS):
            ax1.bar(x + (i - (len(METHODS) - 1) / 2) * w, [r[m]["edp_sim"] for r in rows], w, label=m)
        ax1.set_yscale("log")
        ax1.set_ylabel("EDP (pJ x ns, executed)")
        ax1.legend()
        ax1.set_title(f"{name}: per-layer EDP on the miredo preset")
        for m in METHODS:
            ax2.plot(x, [1 - abs(r[m]["cycles_model"] - r[m]["cycles_sim"]) / r[m]["cycles_sim"] for r in rows],
                     marker="o", label=m)
        ax2.axhline(PAPER["model_accuracy_resnet18"], ls="--", c="k", lw=0.8, label="paper 95.5 %")
        ax2.set_ylabel("model accuracy")
        ax2.set_xlabel("layer")
        ax2.legend()
        f = folder / f"miredo_{name}.png"
        fig.savefig(f, dpi=110)
        files.append(str(f))
    return files


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="ResNet-18 at 32x32 with short solver limits")
    ap.add_argument("--nets", nargs="*", help="zoo models (default resnet18 vgg16 mobilenetv2)")
    ap.add_argument("--image", type=int, help="input size (default 224, 32 with --quick)")
    ap.add_argument("--objective", choices=DF.OBJECTIVES, default=DF.DEFAULT_OBJECTIVE,
                    help=f"what every mapper minimises (default {DF.DEFAULT_OBJECTIVE}: EDP is the figure of merit; "
                    "latency is the paper's MIP objective)")
    ap.add_argument("--node-limit", type=int, help="branch-and-bound nodes per HiGHS solve, the deterministic limit "
                    f"(default {DF.dataflow_mip.NODE_LIMIT})")
    ap.add_argument("--time-limit", type=float, help="seconds per HiGHS solve, a safety net only, reported when hit "
                    f"(default {DF.dataflow_mip.SAFETY_TIME_LIMIT:g})")
    ap.add_argument("--warm", choices=("off", "on", "auto"), default="auto",
                    help="miredo's MIP starts from the best heuristic mapping as HiGHS's incumbent: off (cold, its latency "
                    "an upper bound), on, or auto (default: on dense layers with a window; dataflow.warm_start)")
    ap.add_argument("--hw", default="miredo", help="a preset or file with a [dataflow] table")
    ap.add_argument("--layers", type=int, help="only the first N layers of every network")
    ap.add_argument("--only", nargs="*", metavar="NAME",
                    help="only the layers with these names (e.g. layer2.0.conv2 layer3.0.conv1; with --node-limit, a "
                    "larger solve budget on chosen layers)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int,
                    help="processes the distinct layer shapes are solved in (default: $TVM_CIM_WORKERS, else every "
                         "CPU); the results do not depend on it, only the elapsed solve time")
    ap.add_argument("--ws-point", action="store_true",
                    help="miredo also takes the ws baseline's MIP point as a candidate (never loses to ws; slower)")
    ap.add_argument("--bounds", type=int, metavar="NODES",
                    help="instead of the mappers: per distinct layer shape, the latency, energy and EDP lower bounds "
                    "the MIP proves in NODES branch-and-bound nodes over the six spatial candidates, against the zigzag "
                    "baseline's model EDP (the largest gain any mapping of that space can have)")
    ap.add_argument("--sweep", type=int, metavar="NODES",
                    help="instead of the mappers: on one layer per class (SWEEP_LAYERS: 1x1, 3x3 stride 1 and 2, fc, "
                    "depthwise), the least energy under a ladder of latency caps in NODES nodes per solve, over the six "
                    "spatial candidates: the EDP lower bound of the mapping space against zigzag and miredo")
    ap.add_argument("--floor", action="store_true",
                    help="instead of the mappers: on one layer per class (as --sweep), the analytic EDP floor of the "
                    "six spatial candidates (dataflow.edp_floor: MVM steps, every operand once over DRAM and through "
                    "the global buffer) against zigzag and miredo (seconds, not hours)")
    ap.add_argument("--net-floor", action="store_true",
                    help="instead of the mappers: per network (--nets), the network-level EDP ceiling over zigzag "
                    "(floor_network: the least over one spatial candidate per layer of (sum of the latency floors) x "
                    "(sum of the energy floors), exact by a Pareto-front DP, against zigzag's network EDP)")
    ap.add_argument("--ratio", type=float, default=1.25, help="latency ladder step of --sweep (default 1.25)")
    ap.add_argument("--classes", nargs="*", help=f"--sweep only these classes (of {', '.join(SWEEP_LAYERS)})")
    ap.add_argument("--choice", choices=("network", "layer"), default="network",
                    help="miredo's mapping per layer: the point of its front giving the least network EDP (model; "
                    "default, --objective edp only) or its least EDP per layer; both totals are reported")
    ap.add_argument("--zigzag-spatial", type=int, default=DF.ZIGZAG_SPATIAL, metavar="K",
                    help=f"spatial unrollings the zigzag baselines search, best utilisation first (default "
                    f"{DF.ZIGZAG_SPATIAL}; 1: the best one given, as ZigZag takes the spatial mapping as an input)")
    ap.add_argument("--json", help="write all figures to this file")
    ap.add_argument("--plots", help="folder for the PNG plots")
    a = ap.parse_args()
    nets = a.nets or (["resnet18"] if a.quick else ["resnet18", "vgg16", "mobilenetv2"])
    image = a.image or (32 if a.quick else 224)
    try:
        hw = tvm_cim.load(a.hw)
        hier = LN.Hierarchy.of(hw)
    except (ValueError, tvm_cim.UnknownHardwareError, tvm_cim.HardwareDescriptionError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    unknown = [n for n in nets if n not in zoo.MODELS]
    if unknown:
        print(f"error: unknown zoo model(s) {unknown}; choose from {sorted(zoo.MODELS)}", file=sys.stderr)
        return 2
    try:
        workers = DF.workers_default() if a.workers is None else a.workers
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if workers < 1:
        print(f"error: --workers {workers}: expected a positive integer", file=sys.stderr)
        return 2
    if a.zigzag_spatial < 1:
        print(f"error: --zigzag-spatial {a.zigzag_spatial}: expected a positive integer", file=sys.stderr)
        return 2
    settings = dict(node_limit=a.node_limit or DF.dataflow_mip.NODE_LIMIT,
                    time_limit=a.time_limit or DF.dataflow_mip.SAFETY_TIME_LIMIT, spatial_top=1,
                    starts=1, max_orders=60 if a.quick else 100, seed=a.seed, ws_point=a.ws_point,
                    warm={"off": False, "on": True, "auto": None}[a.warm], zigzag_spatial=a.zigzag_spatial)
    results = {}
    t0 = time.perf_counter()
    if a.sweep or a.floor:
        return sweep_main(a, hier, image, settings)
    out = {"hw": hw.name, "image": image, "objective": a.objective, "settings": settings, "paper": PAPER,
           "networks": results}
    for net in tqdm(nets, desc="networks"):
        layers = layers_of(zoo.build_model(net, image_size=image))[: a.layers]
        if a.only:
            layers = [x for x in layers if x.name.split(":", 1)[-1] in a.only]
            if not layers:
                print(f"error: no layer of {net} is named {' or '.join(a.only)}", file=sys.stderr)
                return 2
        if a.net_floor:
            r = results[net] = floor_network(layers, hier, settings)
            print(f"{net}: {len(layers)} layers; zigzag network EDP {r['zigzag_edp_model']:.3e} (model), "
                  f"{r['zigzag_edp_sim']:.3e} (simulated); floor {r['floor_edp']:.3e} pJ.ns (latency "
                  f"{r['floor_latency_ns'] / 1e3:.1f} us, energy {r['floor_energy_pj'] / 1e6:.2f} uJ) -> no mapping "
                  f"beats zigzag's network EDP by more than {r['max_gain_vs_zigzag_model']:.2f}x (model), "
                  f"{r['max_gain_vs_zigzag_sim']:.2f}x (simulated); looser floor (least latency and least energy "
                  f"independently) {r['floor_edp_loose']:.3e}: {r['max_gain_loose_vs_zigzag_model']:.2f}x "
                  f"(model); Pareto front at most {r['front_size']} points; over zigzag-roofline (network EDP "
                  f"{r['zigzag-roofline_edp_sim']:.3e} simulated) at most {r['max_gain_vs_zigzag-roofline_model']:.2f}x "
                  f"(model), {r['max_gain_vs_zigzag-roofline_sim']:.2f}x (simulated)", flush=True)
            if a.json:  # after every network
                Path(a.json).write_text(json.dumps(out, indent=1, default=float))
            continue
        if a.bounds:
            results[net] = bounds_network(layers, hier, a.bounds, settings)
            out["wall_s"] = time.perf_counter() - t0
            if a.json:
                Path(a.json).write_text(json.dumps(out, indent=1, default=float))
            continue
        def partial(rows, net=net):  # a killed run keeps the layers it finished
            if a.json:
                Path(a.json).write_text(json.dumps({**out, "partial": {net: rows}}, indent=1, default=float))

        results[net] = run_network(net, layers, hier, settings, a.objective, progress=partial, choice=a.choice,
                                   workers=workers)
        print_network(net, results[net])
        out["wall_s"] = time.perf_counter() - t0
        if a.json:  # after every network: a killed run keeps what it finished
            Path(a.json).write_text(json.dumps(out, indent=1, default=float))
    if a.plots:
        out["plots"] = plots(results, Path(a.plots))
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1, default=float))
    return 0


def sweep_main(a, hier: LN.Hierarchy, image: int, settings: dict) -> int:
    """``--sweep`` (or ``--floor``): one layer per class, JSON written after every layer."""
    classes = a.classes or list(SWEEP_LAYERS)
    bad = [c for c in classes if c not in SWEEP_LAYERS]
    if bad:
        print(f"error: unknown class(es) {bad}; choose from {list(SWEEP_LAYERS)}", file=sys.stderr)
        return 2
    out = {"image": image, "nodes": a.sweep, "ratio": a.ratio, "floor_only": not a.sweep, "settings": settings,
           "classes": {}}
    nets: dict = {}
    for cls in classes:
        net, lname = SWEEP_LAYERS[cls]
        if net not in nets:
            nets[net] = layers_of(zoo.build_model(net, image_size=image))
        layer = next(x for x in nets[net] if x.name.split(":", 1)[1] == lname)
        if not a.sweep:
            r = out["classes"][cls] = floor_layer(layer, hier, settings)
            print(f"{cls:<10} {lname:<24} zigzag {r['zigzag_edp']:.3e}  miredo {r['miredo_edp']:.3e}  floor "
                  f"{r['edp_floor']:.3e}  -> no mapping beats zigzag by more than {r['max_gain_vs_zigzag']:.2f}x "
                  f"(miredo {r['miredo_gain_vs_zigzag']:.2f}x)", flush=True)
            if a.json:
                Path(a.json).write_text(json.dumps(out, indent=1, default=str))
            continue
        r = sweep_layer(layer, hier, a.sweep, a.ratio, settings)
        out["classes"][cls] = r
        print(f"{cls:<10} {lname:<24} zigzag {r['zigzag_edp']:.3e}  miredo {r['miredo_edp']:.3e}  best found "
              f"{r['best_found_polished_edp']:.3e}  lower bound {r['edp_lower']:.3e}  -> no mapping beats zigzag by "
              f"more than {r['max_gain_vs_zigzag']:.2f}x (miredo {r['miredo_gain_vs_zigzag']:.2f}x, "
              f"{r['left_vs_miredo']:.2f}x left)", flush=True)
        if a.json:
            Path(a.json).write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

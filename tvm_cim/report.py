"""Turn simulator statistics into a report: JSON data and a terminal summary."""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np
from tqdm import tqdm

from .common.report import compare  # noqa: F401  (compare is part of this module's API)
from .common.report import si as _si
from .common.runtime import gc_paused
from .compiler.mapping import precision
from .compiler.transform import CompileInfo
from .hardware import crossbar as xbar
from .hardware.cost import leakage_mw as chip_leakage_mw
from .simulator.batch import schedule_batch
from .simulator.engine import Chip, timing_inputs
from .simulator.engine import Options as SimOptions
from .simulator.localmem import schedule_shared
from .simulator.timeline import schedule_graph


def timeline(info: CompileInfo, stats: list, power_cap_mw: float | None = None):
    """One inference's timeline under the schedule's pipeline (:func:`schedule_graph`; with PIMCOMP's layer
    grouping, :func:`tvm_cim.simulator.batch.schedule_batch` of one input); ``power_cap_mw``: peak computing
    power allowed (time-division activation of crossbars)."""
    opts = info.schedule.options if info.schedule else None
    pipeline = bool(opts.pipeline) if opts else False
    regions = [(s.name, s.events, s.segment) for s in stats if s.events is not None]
    if opts is not None and opts.grouping and not pipeline:
        return schedule_batch(regions, info.producers, False, 1, grouping=True).timeline
    shared = {s.name: s.buffers for s in stats if s.buffers is not None}
    if shared and pipeline:  # PIMCOMP's heap per core shared by the regions: allocated while scheduling
        cap = max(s.localmem["capacity_bytes"] for s in stats if s.buffers is not None)
        spill = getattr(opts, "local_spill", "faster")
        if spill not in ("faster", "stuck"):
            raise ValueError(f"local_spill must be 'faster' or 'stuck', not {spill!r}")
        tl, lm = schedule_shared(regions, info.producers, shared, cap, power_cap_mw, spill_faster=spill == "faster")
        tl.localmem = lm
        return tl
    return schedule_graph(regions, info.producers, pipeline, power_cap_mw)


def simulate_timing(info: CompileInfo, power_cap_mw: float | None = None, schedule: bool = True):
    """Run the compiled programs on a timing-only chip (no values) and schedule the timeline.

    For design-space sweeps: latency, energy and power without the numeric work; ``power_cap_mw``
    caps the peak computing power (:func:`schedule_graph`); ``schedule=False`` returns None for the
    timeline (a caller that schedules it itself, as :func:`build_report` does).

    Returns
    -------
    stats : list of RegionStats
    timeline : tvm_cim.simulator.timeline.Timeline
    """
    chip = Chip(info.hw, SimOptions(functional=False))
    stats = []
    with gc_paused():  # one pause over all regions: the collector's scan runs once after them, not per region
        for p in tqdm(info.programs, desc="simulating regions (timing only)", unit="region", disable=None,
                      leave=False):
            # no values are computed: every input and constant is a zero-stride placeholder of its declared
            # shape (nothing the size of the weights or of attention's score matrices is allocated)
            stats.append(chip.run(p, timing_inputs(p))[1])
    return stats, timeline(info, stats, power_cap_mw) if schedule else None


def batch_summary(info: CompileInfo, stats: list, batch: int, latency_ns: float, energy_pj: float) -> dict:
    """``batch`` inputs through the compiled schedule on one timeline (:mod:`tvm_cim.simulator.batch`).

    ``throughput_per_s`` is the steady state: one result per interval between
    the first and the last input's results; ``batch_throughput_per_s``
    includes the fill and drain of the pipeline.  Energy per input: the
    dynamic energy of one inference plus the chip's leakage over
    ``makespan / batch``.
    """
    opts = info.schedule.options if info.schedule else None
    pipeline = bool(opts.pipeline) if opts else False
    if batch == 1:
        interval = makespan = latency_ns
    else:
        bt = schedule_batch([(s.name, s.events, s.segment) for s in stats if s.events is not None],
                            info.producers, pipeline, batch, grouping=bool(opts.grouping) if opts else False)
        interval, makespan = bt.interval_ns, bt.makespan_ns
    leak = chip_leakage_mw(info.hw)
    scope = ("inputs overlap wherever the resources allow (sample pipeline), each keeping the schedule's own "
             "pipeline; throughput_per_s from the interval between the first and the last result")
    if batch > 1 and any(s.buffers for s in stats if s.events is not None):
        scope += ("; not modelled across inputs: the waits of the local-memory heap shared by a core's regions "
                  "(one input's are in latency_ns)")
    if batch > 1 and any(s.events.ring for s in stats if s.events is not None):
        scope += ("; line buffers (CMSwitch) are enforced within one input only: a region whose crossbars are "
                  "rewritten every input waits for its whole input, which its line buffer cannot hold")
    return {
        "inputs": batch,
        "makespan_ns": makespan,
        "interval_ns": interval,
        "throughput_per_s": 1e9 / interval if interval else 0.0,
        "batch_throughput_per_s": 1e9 * batch / makespan if makespan else 0.0,
        "energy_per_input_pj": energy_pj + leak * makespan / batch,
        "scope": scope,
    }


def local_memory_summary(stats: list, shared: dict | None = None) -> dict | None:
    """PIMCOMP's low-latency heap (:mod:`tvm_cim.simulator.localmem`) over all regions: allocations, those
    that waited for earlier buffers' readers (a full local memory stalls the sender), spills, and the
    busiest core's peak bytes in use against its share; None when no region manages local memory.
    ``shared``: what :func:`~tvm_cim.simulator.localmem.schedule_shared` did with one heap per core shared
    by the regions (the timeline's ``localmem``), reported instead of the regions' own heaps."""
    lm = [(s.name, s.localmem) for s in stats if getattr(s, "localmem", None)]
    if not lm:
        return None
    if shared is not None:  # one heap per core for all regions: what the scheduler did
        return {**shared, "peak_share_bytes": shared["capacity_bytes"], "heap": "one per core, shared by its regions"}
    tot = {k: int(sum(x[k] for _, x in lm)) for k in ("allocations", "waits", "spills", "spilled_bytes")}
    worst = max(lm, key=lambda nx: nx[1]["peak_bytes"] / max(1, nx[1]["capacity_bytes"]))
    return {**tot, "peak_bytes": worst[1]["peak_bytes"], "peak_share_bytes": worst[1]["capacity_bytes"],
            "peak_region": worst[0], "per_region": {n: x for n, x in lm}}


def build_report(info: CompileInfo, stats: list, hw_name: str, batch: int = 1) -> dict:
    """Aggregate the per-region statistics of one inference (and of ``batch`` inputs through the pipeline).

    Parameters
    ----------
    info : CompileInfo
        From the build (regions, programs, placements, host operators).
    stats : list of RegionStats
        One entry per region executed (from :func:`tvm_cim.runtime.collect`).
    hw_name : str
    batch : int
        Inputs run through the pipeline for ``throughput_per_s`` (``batch`` section).

    Returns
    -------
    dict
        The JSON report (see the README for its fields).
    """
    hw = info.hw
    cyc = hw.cycle_ns
    sched = info.schedule
    tl = timeline(info, stats)
    regions = []
    energy = defaultdict(float)
    counts: Counter = Counter()
    setup_ns = 0.0
    adc_err_sq = adc_ref_sq = 0.0
    by_name = {r.name: r for r in info.regions}
    for s in stats:
        pl = info.chip_map.placements.get(s.name) if info.chip_map else None
        r = by_name.get(s.name)
        run_energy = {k: v for k, v in s.energy_pj.items() if not k.startswith("setup_") and k != "leakage"}
        for k, v in s.energy_pj.items():
            if k != "leakage":
                energy[k] += v
        counts.update(s.metaop_counts)
        setup_ns += s.setup_ns
        e = s.adc_error
        if e:
            adc_err_sq += e.get("sum_sq_err", 0.0)
            adc_ref_sq += e.get("sum_sq_ref", 0.0)
        regions.append(
            {
                "name": s.name,
                "op": s.op,
                "shape_mkn": list(r.mkn) if r else None,
                "batch": r.batch if r else 1,
                "latency_ns": s.latency_ns,
                "latency_cycles": s.latency_ns / cyc,
                "twin_of": s.twin_of,
                "estimate_ns": sched.estimate_regions_ns.get(s.name) if sched else None,
                "start_ns": tl.region_span.get(s.name, (0.0, 0.0))[0],
                "finish_ns": tl.region_span.get(s.name, (0.0, 0.0))[1],
                "replicas": len(pl.replicas) if pl else 1,
                "energy_pj": float(sum(run_energy.values())),
                "setup_ns": s.setup_ns,
                "setup_energy_pj": float(sum(v for k, v in s.energy_pj.items() if k.startswith("setup_"))),
                "crossbars": s.crossbars,
                "tiles": len(pl.tiles) if pl else 0,
                "passes": len(pl.passes) if pl else 0,
                "segment": pl.segment if pl else 0,
                "weights_resident": pl.resident if pl else False,
                "weight_writes": s.weight_writes,
                "buffer_bytes": s.buffer_peak_bytes,
                "spills_offchip": s.spills,
                "macs": s.macs,
                "metaop_counts": dict(s.metaop_counts),
                "adc_rel_rms_error": (
                    float(np.sqrt(e["sum_sq_err"] / e["sum_sq_ref"])) if e and e.get("sum_sq_ref") else 0.0
                ),
                "adc_max_abs_error": float(e.get("max_abs", 0.0)) if e else 0.0,
                "mapping": info.accuracy.get("regions", {}).get(s.name),
            }
        )
    shared = getattr(tl, "localmem", None)
    if shared and shared.get("spilled_energy_pj"):  # scatters the shared heap streamed from the global buffer
        energy["noc+buffer"] += shared["spilled_energy_pj"]
    latency_ns = tl.latency_ns
    energy["leakage"] = chip_leakage_mw(hw) * latency_ns  # of the whole chip over the inference
    run_energy_total = float(sum(v for k, v in energy.items() if not k.startswith("setup_")))
    batch_rep = batch_summary(info, stats, batch, latency_ns, run_energy_total - energy["leakage"])
    # utilisation
    used_cells = alloc_cells = 0
    xbs_used: set[int] = set()
    if info.chip_map:
        by_name = {r.name: r for r in info.regions}
        for name, pl in info.chip_map.placements.items():
            per_weight = (by_name[name].chip(hw) if name in by_name else hw).cols_per_weight(precision(hw)[0])
            for rep_xbs in pl.replicas:  # every copy of the weights (duplication), not only the first
                for t, xb in zip(pl.tiles, rep_xbs):
                    used_cells += t.rows * t.cols * per_weight
                    alloc_cells += hw.crossbar.rows * hw.crossbar.cols
                    xbs_used.add(xb)
    peak = max((s.buffer_peak_bytes for s in stats), default=0)
    gbuf = hw.chip.global_buffer.capacity_kb * 1024
    return {
        "hw": hw_name,
        "hw_file": hw.source_path,
        "computing_mode": hw.chip.computing_mode,
        "latency_ns": latency_ns,
        "latency_cycles": latency_ns / cyc,
        "throughput_per_s": batch_rep["throughput_per_s"],
        "batch": batch_rep,
        "energy_pj": run_energy_total,
        "energy_breakdown_pj": {k: float(v) for k, v in sorted(energy.items()) if not k.startswith("setup_")},
        "average_power_mw": run_energy_total / latency_ns if latency_ns else 0.0,
        "peak_power_mw": tl.peak_power_mw,
        "peak_power_scope": "computing: crossbar reads with their DACs and ADCs active at once",
        "peak_write_power_mw": tl.peak_write_power_mw,
        "strategy": sched.strategy if sched else "none",
        "schedule": {
            "options": dict(vars(sched.options)) if sched else {},
            "segments": sched.segments if sched else 1,
            "estimate_ns": sched.estimate_ns if sched else None,
            "estimate_error": (sched.estimate_ns - latency_ns) / latency_ns if sched and latency_ns else None,
        },
        "resource_utilisation": tl.utilisation,
        "setup": {
            "latency_ns": setup_ns,
            "energy_pj": float(sum(v for k, v in energy.items() if k.startswith("setup_"))),
            "note": "one-time weight programming of weight-stationary crossbars (not part of latency)",
        },
        "regions": regions,
        "host_ops": dict(info.host_ops),
        "metaop_counts": dict(sorted(counts.items())),
        "mapping": {
            "crossbars_needed": info.chip_map.crossbars_needed if info.chip_map else 0,
            "crossbars_available": hw.total_crossbars,
            "segments": info.chip_map.segments if info.chip_map else 0,
            "weight_stationary": info.chip_map.weight_stationary if info.chip_map else True,
        },
        "utilisation": {
            "crossbars_used": len(xbs_used),
            "crossbars_total": hw.total_crossbars,
            "crossbar_fraction": len(xbs_used) / hw.total_crossbars,
            "cell_fraction_of_used_crossbars": used_cells / alloc_cells if alloc_cells else 0.0,
            "buffer_peak_bytes": peak,
            "global_buffer_bytes": gbuf,
            "buffer_fraction": peak / gbuf if gbuf else 0.0,
            "regions_spilled_offchip": sum(1 for s in stats if s.spills),
        },
        "dual_mode": dual_mode_summary(info, tl, energy, counts),
        "replication": info.replication,
        "local_memory": local_memory_summary(stats, getattr(tl, "localmem", None)),
        "accuracy": accuracy_summary(info.accuracy),
        "adc": {
            "bits": hw.crossbar.adc_bits,
            "mode": hw.crossbar.adc_mode,
            "range": hw.crossbar.adc_range,
            "lossless": xbar.is_lossless(hw),
            "max_partial_sum": xbar.max_partial_sum(hw),
            "rel_rms_error": float(np.sqrt(adc_err_sq / adc_ref_sq)) if adc_ref_sq else 0.0,
        },
        "latency_scope": "CIM regions on the simulator's resource timeline; host operators are listed in host_ops and not timed",
    }


# meta-operator kinds of each overhead CMSwitch distinguishes at segment boundaries
OVERHEAD_KINDS = {
    "switch": ("CM.switch",),
    "rewrite": ("CIM.write_xb", "DMOV.fetch"),
    "write_back": ("DMOV.writeback",),
}


def dual_mode_summary(info: CompileInfo, tl, energy: dict, counts) -> dict:
    """Array modes per segment (``AllocateArrayModes``) and the time share of switches, rewrites, write-backs.

    Shares are the time during which at least one operation of the kind runs,
    over the inference latency (they may overlap other work and each other).
    """
    lat = tl.latency_ns
    share = {k: (tl.busy_ns(kinds) / lat if lat else 0.0) for k, kinds in OVERHEAD_KINDS.items()}
    return {
        "segments": info.modes,
        "switches": int(counts.get("CM.switch", 0)),
        "time_share": share,
        "switch_energy_pj": float(energy.get("switch", 0.0)),
        "memory_mode_energy_pj": float(energy.get("xbmem", 0.0)),
        "write_back_energy_pj": float(energy.get("writeback", 0.0)),
        "note": "write-backs: outputs kept in memory-mode arrays whose consumers include a later segment are "
                "written back (DMOV.writeback) at the end of their region; outputs consumed only inside their "
                "segment are consumed in place",
    }


def accuracy_summary(acc: dict) -> dict:
    """The error budget, what the chosen crossbar mappings cost against the fastest ones, and per-layer choices.

    Latencies are the fast estimate of each layer alone (one copy of its weights); ``latency_cost`` is
    their sum over the chosen mappings divided by the sum over the fastest (unconstrained) ones.
    """
    if not acc:
        return {"budget": "not needed: every layer is exact as the chip reads it by default"}
    regs = acc.get("regions", {})
    chosen = sum(v["ns"] for v in regs.values())
    fastest = sum(v["fastest_ns"] for v in regs.values())
    return {
        "max_error": acc["max_error"],
        "int8_error": acc["int8_error"],
        "predicted_error": acc["predicted_error"],
        "met": acc["met"],
        "layers_changed": sum(1 for v in regs.values() if v["mapping"] != v["fastest"]),
        "estimate_ns_chosen": chosen,
        "estimate_ns_fastest": fastest,
        "latency_cost": chosen / fastest if fastest else 1.0,
        "scope": "errors are 1 - cosine on the calibration samples; latencies the estimate of each layer alone",
    }


def summary(rep: dict, top: int = 8) -> str:
    """A readable multi-line summary of a report."""
    lines = []
    lines.append(f"hardware      {rep['hw']} ({rep['computing_mode']} mode)   {rep.get('hw_file', '')}")
    if rep.get("nonideal"):
        lines.append("non-ideal     " + ", ".join(f"{k} {v}" for k, v in rep["nonideal"].items()))
    if "model" in rep:
        lines.append(f"model         {rep['model']}")
    lines.append(
        f"latency       {_si(rep['latency_ns'] * 1e-9, 's')}  ({rep['latency_cycles']:.4g} cycles)"
    )
    b = rep.get("batch")
    if b:
        lines.append(f"throughput    {b['throughput_per_s']:.4g} inferences/s over a batch of {b['inputs']} "
                     f"(batch of {b['inputs']} in {_si(b['makespan_ns'] * 1e-9, 's')})")
    sc = rep.get("schedule", {})
    if sc.get("estimate_ns"):
        lines.append(
            f"schedule      {rep.get('strategy')}: {sc.get('segments')} segment(s); analytical estimate "
            f"{_si(sc['estimate_ns'] * 1e-9, 's')} ({100 * sc['estimate_error']:+.1f}% vs simulator)"
        )
    lines.append(
        f"energy        {_si(rep['energy_pj'] * 1e-12, 'J')}   avg power {_si(rep['average_power_mw'] * 1e-3, 'W')}"
        f"   peak compute power {_si(rep.get('peak_power_mw', 0.0) * 1e-3, 'W')}"
    )
    br = rep["energy_breakdown_pj"]
    tot = sum(br.values()) or 1.0
    lines.append("  breakdown   " + ", ".join(f"{k} {100 * v / tot:.1f}%" for k, v in sorted(br.items(), key=lambda kv: -kv[1])))
    st = rep["setup"]
    lines.append(f"weight setup {_si(st['latency_ns'] * 1e-9, 's')}, {_si(st['energy_pj'] * 1e-12, 'J')} (once)")
    m, u = rep["mapping"], rep["utilisation"]
    seg = "weight-stationary" if m["weight_stationary"] else f"{m['segments']} segments, weights rewritten per inference"
    lines.append(
        f"crossbars     {m['crossbars_needed']} needed / {m['crossbars_available']} on chip; "
        f"{seg}; "
        f"cell use {100 * u['cell_fraction_of_used_crossbars']:.1f}%; buffer peak {_si(u['buffer_peak_bytes'], 'B')} "
        f"({100 * u['buffer_fraction']:.0f}% of global buffer"
        + (f"; {u['regions_spilled_offchip']} region(s) keep activations off-chip)" if u.get('regions_spilled_offchip') else ")")
    )
    dm = rep.get("dual_mode", {})
    if dm.get("segments"):
        mem = [sg["memory_arrays"] for sg in dm["segments"]]
        ts = dm["time_share"]
        lines.append(
            f"array modes   memory-mode arrays per segment {mem[:12]}{' ...' if len(mem) > 12 else ''}; "
            f"{dm['switches']} CM.switch; time share: switches {100 * ts['switch']:.3f}%, rewrites "
            f"{100 * ts['rewrite']:.1f}%, write-backs {100 * ts['write_back']:.1f}%")
    a = rep["adc"]
    lines.append(
        f"ADC           {a['bits']}-bit {a['mode']}, {'lossless' if a['lossless'] else 'lossy'} "
        f"(max partial sum {a['max_partial_sum']}); accumulator rel. RMS error {a['rel_rms_error']:.3g}"
    )
    acc = rep.get("accuracy", {})
    if "max_error" in acc:
        pred = "n/a" if acc["predicted_error"] is None else f"{acc['predicted_error']:.3g}"
        lines.append(
            f"error budget  1-cos <= {acc['max_error']:.3g} on calibration samples ({'met' if acc['met'] else 'NOT met'}; "
            f"predicted {pred}); {acc['layers_changed']} layer(s) read more slowly than the fastest mapping, "
            f"x{acc['latency_cost']:.3g} layer latency")
    if "cosine" in rep:
        lines.append(f"vs reference  cosine {rep['cosine']:.6f}   max |err| {rep['max_abs_err']:.4g}  ({rep.get('reference', 'llvm')})")
    lines.append(f"regions       {len(rep['regions'])} on CIM; host ops: " + (", ".join(f"{k.removeprefix('relax.')}x{v}" for k, v in rep["host_ops"].items()) or "none"))
    if rep.get("onnx_ops_on_host"):
        lines.append(f"ONNX ops on host: {', '.join(rep['onnx_ops_on_host'])}")
    lines.append("meta-ops      " + ", ".join(f"{k} {v}" for k, v in rep["metaop_counts"].items()))
    regs = sorted(rep["regions"], key=lambda r: -r["latency_ns"])[:top]
    if regs:
        lines.append(f"slowest regions (of {len(rep['regions'])}):")
        lines.append(f"  {'region':34s} {'op':8s} {'M x K x N':>20s} {'reps':>5s} {'xbars':>6s} {'latency':>10s} {'energy':>10s} {'ADC err':>8s}  mapping")
        for r in regs:
            mkn = "x".join(str(v) for v in r["shape_mkn"]) if r["shape_mkn"] else ""
            mp = r.get("mapping") or {}
            lines.append(
                f"  {r['name'][-34:]:34s} {r['op']:8s} {mkn:>20s} {r.get('replicas', 1):5d} {r['crossbars']:6d} "
                f"{_si(r['latency_ns'] * 1e-9, 's'):>10s} {_si(r['energy_pj'] * 1e-12, 'J'):>10s} {r['adc_rel_rms_error']:8.2g}"
                f"  {mp.get('mapping', '')}"
            )
    if "timing_s" in rep:
        t = rep["timing_s"]
        lines.append("wall time     " + ", ".join(f"{k} {v:.2f}s" for k, v in t.items()))
    return "\n".join(lines)

"""Reports of PIM runs: JSON data and a terminal summary (mirrors :mod:`tvm_cim.report`)."""

from __future__ import annotations

from collections import Counter, defaultdict

from tvm_cim.common.report import si

from .hardware.view import PimView
from .offload import CompileInfo


def build_report(info: CompileInfo, stats: list[dict], hw_name: str) -> dict:
    """Aggregate one inference: PIM kernels (simulated) plus host operators (roofline).

    Parameters
    ----------
    info : CompileInfo
        From the build (:func:`tvm_pim.last_compile_info`).
    stats : list of dict
        One entry per PIM kernel executed (:func:`tvm_pim.runtime.collect`).
    hw_name : str

    Returns
    -------
    dict
        ``latency_ns`` (PIM kernels + host operators), ``gpu_latency_ns`` (the
        same graph GPU-only under the host model), ``speedup_over_gpu``,
        ``energy_pj`` (PIM side), per-kernel records, host operators, command
        counts and the data-rearrangement / compute / host breakdown.
    """
    view = PimView(info.hw)
    by_name = {k.name: k for k in info.kernels}
    kernels = []
    energy: dict = defaultdict(float)
    counts: Counter = Counter()
    split = defaultdict(float)
    for s in stats:
        k = by_name.get(s["name"])
        for c, e in s["energy_breakdown_pj"].items():
            energy[c] += e
        counts.update(s["command_counts"])
        split["data_rearrangement_ns"] += s["data_rearrangement_ns"]
        split["pim_compute_ns"] += s["compute_ns"]
        split["pim_host_ns"] += s["host_ns"]
        kernels.append(
            {
                "name": s["name"],
                "kind": s["kind"],
                "kernel": k.spec.name if k else "",
                "sizes": dict(k.spec.sizes) if k else {},
                "draft": str(k.choice.draft) if k and k.choice else "",
                "strategy": k.choice.strategy if k and k.choice else "",
                "latency_ns": s["latency_ns"],
                "gpu_ns": k.host_ns if k else 0.0,
                "data_rearrangement_ns": s["data_rearrangement_ns"],
                "compute_ns": s["compute_ns"],
                "host_ns": s["host_ns"],
                "setup_ns": s["setup_ns"],
                "energy_pj": s["energy_pj"],
            }
        )
    pim_ns = float(sum(k["latency_ns"] for k in kernels))
    latency = pim_ns + info.host_op_ns
    return {
        "hw": hw_name,
        "hw_file": info.hw.source_path,
        "abstraction": view.describe(),
        "latency_ns": latency,
        "gpu_latency_ns": info.gpu_latency_ns,
        "speedup_over_gpu": info.gpu_latency_ns / latency if latency else 0.0,
        "pim_kernels_ns": pim_ns,
        "host_ops_ns": info.host_op_ns,
        "breakdown_ns": dict(split),
        "energy_pj": float(sum(energy.values())),
        "energy_breakdown_pj": {k: float(v) for k, v in sorted(energy.items())},
        "kernels": kernels,
        "decisions": [k.as_dict() for k in info.kernels],
        "host_ops": dict(info.host_ops),
        "command_counts": dict(sorted(counts.items())),
        "latency_scope": "PIM kernels simulated; host operators timed with the host roofline; "
        "energy covers the PIM devices only",
    }


def summary(rep: dict, top: int = 10) -> str:
    """A readable multi-line summary of a report."""
    a = rep["abstraction"]
    lines = [
        f"hardware      {rep['hw']}: {a['system']['groups']} PIM groups ({a['group']['level']}) x "
        f"{a['group']['cores']} cores, {a['core']['lanes']} FP16 lanes; host {a['system']['host']}",
    ]
    if "model" in rep:
        lines.append(f"model         {rep['model']}")
    lines.append(
        f"latency       {si(rep['latency_ns'] * 1e-9, 's')}  (PIM kernels {si(rep['pim_kernels_ns'] * 1e-9, 's')}, "
        f"host ops {si(rep['host_ops_ns'] * 1e-9, 's')})"
    )
    lines.append(
        f"GPU only      {si(rep['gpu_latency_ns'] * 1e-9, 's')}  -> speedup {rep['speedup_over_gpu']:.2f}x"
    )
    b = rep["breakdown_ns"]
    if b:
        lines.append(
            "PIM breakdown " + ", ".join(f"{k.removesuffix('_ns')} {si(v * 1e-9, 's')}" for k, v in b.items())
        )
    lines.append(f"energy        {si(rep['energy_pj'] * 1e-12, 'J')} (PIM devices)")
    if "cosine" in rep:
        lines.append(
            f"vs reference  cosine {rep['cosine']:.6f}   max |err| {rep['max_abs_err']:.4g}  ({rep.get('reference', 'llvm')})"
        )
    off = [d for d in rep["decisions"] if d["offloaded"]]
    lines.append(
        f"kernels       {len(off)} on PIM, {len(rep['decisions']) - len(off)} matched but left on the host; host ops: "
        + (", ".join(f"{k.removeprefix('relax.')}x{v}" for k, v in rep["host_ops"].items()) or "none")
    )
    if rep["decisions"]:
        lines.append(f"  {'kernel':34s} {'where':5s} {'PIM':>10s} {'GPU':>10s}  draft / reason")
        for d in rep["decisions"][:top]:
            lines.append(
                f"  {d['kernel'][:34]:34s} {'PIM' if d['offloaded'] else 'host':5s} "
                f"{si(d['predicted_pim_ns'] * 1e-9, 's') if d['predicted_pim_ns'] != float('inf') else '-':>10s} "
                f"{si(d['host_ns'] * 1e-9, 's'):>10s}  {(d['draft'] or '') if d['offloaded'] else d['reason']}"
            )
    if "timing_s" in rep:
        lines.append("wall time     " + ", ".join(f"{k} {v:.2f}s" for k, v in rep["timing_s"].items()))
    return "\n".join(lines)

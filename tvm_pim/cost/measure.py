"""A draft's cost on the simulator: the ground truth every search is measured against.

:func:`evaluate` generates a draft's command stream and times it on the
simulator (timing only); :func:`best_by_simulation` is the exhaustive search
over a candidate list; :func:`lower_bound_ns` bounds every draft's time from
below without generating any, so that the offload can skip searching kernels
the host certainly runs faster.
"""

from __future__ import annotations

from ..compiler.codegen import DCC, CodegenOptions, generate
from ..compiler.kernels import KernelSpec
from ..compiler.space import Draft, InfeasibleDraft
from ..hardware.view import PimView, ceil_div
from ..program.stream import Stream
from ..simulator.engine import Simulator


def evaluate(spec: KernelSpec, view: PimView, draft: Draft, opts: CodegenOptions = DCC) -> tuple[Stream, float]:
    """Stream and simulated latency (timing only) of one draft.

    Parameters
    ----------
    spec : KernelSpec
    view : PimView
    draft : Draft
    opts : CodegenOptions
        Code-optimiser switches (DCC's by default).

    Returns
    -------
    tuple of (Stream, float)
        The command stream and its simulated end-to-end latency in ns.

    Raises
    ------
    InfeasibleDraft
        The draft does not fit the device.
    """
    stream = generate(spec, draft, view, opts)
    return stream, Simulator(view.hw).run(stream, functional=False).latency_ns


def best_by_simulation(spec: KernelSpec, view: PimView, drafts: list[Draft]) -> tuple[Draft, Stream, float]:
    """The fastest draft of a candidate list, each timed on the simulator.

    Parameters
    ----------
    spec : KernelSpec
    view : PimView
    drafts : list of Draft
        Candidates; infeasible ones are skipped.

    Returns
    -------
    tuple of (Draft, Stream, float)
        The best draft, its stream and its latency in ns (the first of equals).

    Raises
    ------
    InfeasibleDraft
        If no candidate can run on the device.
    """
    best = None
    for d in drafts:
        try:
            st, ns = evaluate(spec, view, d)
        except InfeasibleDraft:
            continue
        if best is None or ns < best[2]:
            best = (d, st, ns)
    if best is None:
        raise InfeasibleDraft(f"no feasible draft for {spec.name} on {view.name}")
    return best


def lower_bound_ns(spec: KernelSpec, view: PimView) -> float:
    """A lower bound of any draft's PIM time: launch plus every column op spread over all cores.

    Each resident or streamed operand element is read by some core at least once per
    input row that uses it (every GEMV input row takes its own unit cycle per weight column),
    ``lanes`` elements per column per unit cycle (a batched GEMV's lanes still do one input row per
    unit cycle).
    """
    d = spec.dims
    lanes = view.elems_per_column
    if spec.kind == "gemv":
        cols = d["b"] * d["n"] * ceil_div(d["k"], lanes) * d["m"]
    elif spec.kind == "red":
        cols = d["b"] * d["n"] * ceil_div(d["k"], lanes)
    elif spec.kind in ("va", "relu"):
        cols = d["b"] * ceil_div(d["i"], lanes)
    else:
        cols = 2 * d["b"] * d["n"] * ceil_div(d["k"], lanes)
    units = view.groups * view.cores_per_group
    # a unit's lanes take one column per unit cycle (core.frequency_mhz, checked to within 1% of tCCD_L x tCK)
    cycle = min(view.unit_ns, view.hw.dram.timing.tccd_l * view.tck_ns)
    return view.hw.system.host.launch_overhead_us * 1e3 + cols / units * cycle

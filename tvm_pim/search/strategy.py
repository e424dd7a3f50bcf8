"""Choosing a kernel's tiling draft: the user-selectable schedule strategies.

``database``   the tuned record for this workload in ``schedules/<hw>/``
               (meta-schedule database written by ``python -m tvm_pim tune``);
``predictor``  DCC's coupled predictor (paper 002 sec. IV-D, "dynamic
               prediction"): the XGBoost model ranks every draft of the pruned
               space and the best one is kept in a lookup table;
``simulate``   every draft of the pruned space is timed on the simulator
               (exact within the pruned space, slower);
``default``    the backend's fixed tiling (AttAcc's distribution);
``auto``       database, then predictor, then simulate.

Every choice is cached per (device, kernel, strategy) for the process.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm_cim.common import hardware as loader

from .abstraction import PimView
from .codegen import DCC, CodegenOptions, generate
from .commands import Stream
from .kernels import KernelSpec
from .simulator import simulator_for
from .space import Draft, InfeasibleDraft, default_draft, enumerate_drafts

STRATEGIES = ("auto", "database", "predictor", "simulate", "default")


@dataclass
class Choice:
    """A chosen draft with its stream and simulated latency."""

    draft: Draft
    stream: Stream
    latency_ns: float
    strategy: str


_CACHE: dict = {}


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
    """
    stream = generate(spec, draft, view, opts)
    return stream, simulator_for(view.hw).run(stream, functional=False).latency_ns


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
        The best draft, its stream and its latency in ns.

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


def _by_strategy(spec: KernelSpec, view: PimView, strategy: str) -> Choice | None:
    if strategy == "default":
        d = default_draft(spec, view)
        st, ns = evaluate(spec, view, d, CodegenOptions(staging=False))
        return Choice(d, st, ns, "default")
    if strategy == "database":
        from .tuning import lookup

        d = lookup(spec, view)
        if d is None:
            return None
        st, ns = evaluate(spec, view, d)
        return Choice(d, st, ns, "database")
    if strategy == "predictor":
        from .predictor import Predictor

        model = Predictor.load_for(view)
        if model is None:
            return None
        drafts, _ = enumerate_drafts(spec, view)
        for d in model.rank(spec, view, drafts):
            try:
                st, ns = evaluate(spec, view, d)
            except InfeasibleDraft:
                continue
            return Choice(d, st, ns, "predictor")
        return None
    if strategy == "simulate":
        drafts, _ = enumerate_drafts(spec, view)
        d, st, ns = best_by_simulation(spec, view, drafts)
        return Choice(d, st, ns, "simulate")
    raise ValueError(f"unknown strategy {strategy!r}; known: {', '.join(STRATEGIES)}")


def choose(spec: KernelSpec, view: PimView, strategy: str = "auto") -> Choice:
    """Pick a draft for a kernel with a strategy (see the module docstring)."""
    key = (loader.to_json(view.hw), spec, strategy)
    if key in _CACHE:
        return _CACHE[key]
    order = ("database", "predictor", "simulate") if strategy == "auto" else (strategy,)
    ch = None
    for s in order:
        ch = _by_strategy(spec, view, s)
        if ch is not None:
            break
    if ch is None:
        raise InfeasibleDraft(f"strategy {strategy} found no draft for {spec.name} (no database record / predictor?)")
    _CACHE[key] = ch
    return ch

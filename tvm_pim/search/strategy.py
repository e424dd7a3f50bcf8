"""Choosing a kernel's tiling draft: the user-selectable schedule strategies.

=============  ==================================================================
strategy       how the draft is chosen
=============  ==================================================================
``database``   the tuned record for this kernel and device: the user's database,
               then the shipped one (:mod:`tvm_pim.search.database`; written by
               ``python -m tvm_pim tune``)
``predictor``  DCC's coupled predictor (paper 002 sec. IV-D, "dynamic
               prediction"): the XGBoost model ranks every draft of the pruned
               space and the best feasible one is kept
``simulate``   every draft of the pruned space is timed on the simulator (exact
               within the pruned space, slower)
``default``    the backend's fixed tiling (AttAcc's distribution), without
               staged rearrangement
``auto``       database, then predictor, then simulate
=============  ==================================================================

Every choice is cached per (device description, kernel, strategy) for the
process, and forgotten when a database or the trained predictor it may have
read changes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..compiler.codegen import CodegenOptions
from ..compiler.kernels import KernelSpec
from ..compiler.space import Draft, InfeasibleDraft, default_draft, enumerate_drafts
from ..cost.measure import best_by_simulation, evaluate
from ..hardware.view import PimView
from ..program.stream import Stream
from . import database

#: every strategy name, ``auto`` first (the CLI's choices and the offload's validation read it)
STRATEGIES = ("auto", "database", "predictor", "simulate", "default")
_AUTO = ("database", "predictor", "simulate")


@dataclass
class Choice:
    """A chosen draft with its stream and simulated latency."""

    draft: Draft
    stream: Stream
    latency_ns: float
    strategy: str


_CACHE: dict = {}


def _by_strategy(spec: KernelSpec, view: PimView, strategy: str, db_root) -> Choice | None:
    if strategy == "default":
        d = default_draft(spec, view)
        st, ns = evaluate(spec, view, d, CodegenOptions(staging=False))
        return Choice(d, st, ns, "default")
    if strategy == "database":
        d = database.lookup(spec, view, db_root)
        if d is None:
            return None
        st, ns = evaluate(spec, view, d)
        return Choice(d, st, ns, "database")
    if strategy == "predictor":
        model = database.load_predictor(view.name)
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


def choose(spec: KernelSpec, view: PimView, strategy: str = "auto",
           db_root: str | os.PathLike | None = None) -> Choice:
    """Pick a draft for a kernel with a strategy (see the module docstring).

    Parameters
    ----------
    spec : KernelSpec
    view : PimView
    strategy : str
        One of :data:`STRATEGIES`.
    db_root : str or os.PathLike, optional
        A database root consulted instead of the user's cache (then the shipped databases).

    Returns
    -------
    Choice

    Raises
    ------
    InfeasibleDraft
        The strategy found no draft (no database record, no trained predictor).
    """
    key = (view.digest, spec, strategy, database.state(view.name, db_root))
    if key in _CACHE:
        return _CACHE[key]
    ch = None
    for s in _AUTO if strategy == "auto" else (strategy,):
        ch = _by_strategy(spec, view, s, db_root)
        if ch is not None:
            break
    if ch is None:
        raise InfeasibleDraft(f"strategy {strategy} found no draft for {spec.name} (no database record / predictor?)")
    _CACHE[key] = ch
    return ch

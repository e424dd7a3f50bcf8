"""Duplication pieces: how many copies of each operator's weights, and how tall their tiles are.

* :func:`dp` -- CIM-MLC's graph level: replicas by dynamic programming
  (:func:`tvm_cim.compiler.solvers.knapsack.duplicate`) under the core
  budget, minimising the slowest operator (pipeline) or the sum, then
  balanced so that no operator has more replicas than the bottleneck needs;
* :func:`greedy` -- Poly-Schedule's policy: duplicate the slowest operator
  while cores remain;
* :func:`crossbar_level` -- CIM-MLC Eq. 1: fill the crossbars of the cores an
  operator holds with more copies;
* :func:`crossbar_dp` -- the DP re-run at crossbar granularity after Eq. 1
  (with ``remap``: each operator's crossbars hold full-height or remapped
  copies, whichever is faster, so duplication and remapping share them);
* :func:`remap` -- CIM-MLC's wordline level: tiles of ``rows_active`` rows so
  a read step drives every row of its tile.

The latency each piece minimises is the fast estimate
(:class:`tvm_cim.compiler.estimate.Estimator`).
"""

from __future__ import annotations

import math

import numpy as np

from ...hardware.schema import CIMHardware
from ..estimate import Estimator, shape_key
from ..region import DMATMUL, Region
from ..solvers.knapsack import duplicate as knapsack


def curve_grid(max_d: int, exact: int = 32, step: float = 1.08) -> list[int]:
    """The replica counts :func:`latency_curve` evaluates: all up to ``exact``, then a geometric grid."""
    grid = sorted({*range(1, min(exact, max_d) + 1), *np.unique(np.geomspace(exact, max_d, num=max(
        2, int(math.log(max(max_d, exact) / exact) / math.log(step)) + 2)).astype(int)).tolist(), max_d})
    return [d for d in grid if 1 <= d <= max_d]


def latency_curve(latency, max_d: int, exact: int = 32, step: float = 1.08) -> np.ndarray:
    """``latency(d)`` for ``d = 1 .. max_d``, evaluated exactly up to ``exact`` replicas and then on a
    geometric grid (ratio ``step``, :func:`curve_grid`); between grid points the value of the grid point
    below holds, so the duplication DP, which pays for every replica, only picks grid points there."""
    grid = curve_grid(max_d, exact, step)
    vals = np.array([latency(d) for d in grid])
    idx = np.searchsorted(grid, np.arange(1, max_d + 1), side="right") - 1
    return vals[idx]


def vectors(r: Region) -> int:
    """Input vectors that replicas can share out (a ``dmatmul``'s chunks cut ``M``; each holds every head)."""
    return r.mkn[0] if r.kind == DMATMUL else r.batch * r.mkn[0]


def max_replicas(r: Region, budget_units: int, unit_cost: int) -> int:
    """Most copies worth making: one per input vector, within the budget.

    A ``dmatmul``'s replicas each write the run-time operand (in parallel, at
    the start of the region).
    """
    return max(1, min(vectors(r), budget_units // max(1, unit_cost)))


def dp(seg: list[Region], est: Estimator, tile_rows: dict, costs: list[int], budget: int, resident: bool,
       pipeline: bool, grid_only: bool = False, latency=None) -> list[int]:
    """Replicas by dynamic programming under a budget (cores, or crossbars at crossbar granularity),
    balanced to the bottleneck with the pipeline; ``grid_only``: the DP visits only the replica counts
    the latency curves were evaluated at (:func:`curve_grid`; same result, faster on large budgets);
    ``latency(r, d)``: the latency of ``d`` units of region ``r`` (default: ``d`` replicas); layers equal
    under :func:`~tvm_cim.compiler.estimate.shape_key` share one curve, so it may depend on nothing else of ``r``."""
    if latency is None:
        def latency(r, d):
            return est.region_ns(r, d, tile_rows[r.name], resident)
    curves: dict = {}  # layers of one shape share their curve (estimate.shape_key)
    lat = []
    for r, c in zip(seg, costs):
        max_d = max_replicas(r, budget, c)
        key = (shape_key(r), tile_rows[r.name], max_d)
        if key not in curves:
            curves[key] = latency_curve(lambda d, r=r: latency(r, d), max_d)
        lat.append(curves[key])
    cand = [curve_grid(len(curve)) for curve in lat] if grid_only else None
    reps = knapsack(lat, costs, budget, "max" if pipeline else "sum", cand)
    if pipeline:  # balance: no more replicas than the bottleneck needs
        bott = max(l[d - 1] for l, d in zip(lat, reps))
        reps = [int(np.argmax(l <= bott * (1 + 1e-9))) + 1 for l in lat]
    return reps


def greedy(seg: list[Region], est: Estimator, tile_rows: dict, costs: list[int], budget: int) -> list[int]:
    """Poly-Schedule's greedy policy: keep duplicating the slowest operator while cores remain."""
    reps = [1] * len(seg)
    used = sum(costs)
    lat = [est.region_ns(r, 1, tile_rows[r.name]) for r in seg]
    while True:
        order = np.argsort(lat)[::-1]
        for i in order:
            if used + costs[i] <= budget and reps[i] < vectors(seg[i]):
                reps[i] += 1
                used += costs[i]
                lat[i] = est.region_ns(seg[i], reps[i], tile_rows[seg[i].name])
                break
        else:
            return reps


def crossbar_level(seg: list[Region], reps: list[int], costs: list[int], est: Estimator, tile_rows: dict,
                   budget: int, hw: CIMHardware) -> list[int]:
    """CIM-MLC Eq. 1: fill the crossbars of the cores an operator holds, never exceeding the chip."""
    per_core = hw.core.crossbars
    xbs = [est.tiles(r, tile_rows[r.name]) for r in seg]
    reps = [
        max(d, min(max_replicas(r, budget * per_core, 1), (c * d * per_core) // max(1, x)))
        if c * per_core >= x else d
        for r, c, d, x in zip(seg, costs, reps, xbs)
    ]
    while sum(d * x for x, d in zip(xbs, reps)) > hw.total_crossbars and max(reps) > 1:
        i = int(np.argmax([d * x if d > 1 else -1 for x, d in zip(xbs, reps)]))
        reps[i] -= 1
    return reps


def crossbar_dp(seg: list[Region], est: Estimator, tile_rows: dict, hw: CIMHardware, resident: bool,
                pipeline: bool, remap: bool = False) -> list[int] | None:
    """The graph-level DP re-run at crossbar granularity (after Eq. 1, :func:`crossbar_level`).

    Every replica costs its crossbars (not whole cores) out of the chip's
    crossbars, so the crossbars Eq. 1 cannot use (a core an operator holds
    but cannot fill) go to the operators that gain most.  With ``remap``
    (wordline level) the crossbars of ``d`` full-height copies may instead
    hold :func:`remapped` copies, whichever is faster: the DP allots them
    knowing what remapping will make of them (:func:`remap` then converts).
    None when one copy of every operator does not fit the chip.
    """
    xbs = [est.tiles(r, tile_rows[r.name]) for r in seg]
    if sum(xbs) > hw.total_crossbars:
        return None
    latency = None
    if remap and hw.crossbar.rows_active < hw.crossbar.rows:
        def latency(r, d):
            full = est.region_ns(r, d, tile_rows[r.name], resident)
            d_r = remapped(r, d, est, tile_rows[r.name], hw)
            return min(full, est.region_ns(r, d_r, hw.crossbar.rows_active, resident)) if d_r else full
    return dp(seg, est, tile_rows, xbs, hw.total_crossbars, resident, pipeline, grid_only=True, latency=latency)


def remapped(r: Region, replicas: int, est: Estimator, tile_rows: int, hw: CIMHardware) -> int:
    """Copies of ``rows_active``-row tiles the crossbars of ``replicas`` full-height copies hold
    (0: none, or a ``dmatmul``, which is not remapped)."""
    if r.kind == DMATMUL:
        return 0
    return (replicas * est.tiles(r, tile_rows)) // est.tiles(r, hw.crossbar.rows_active)


def remap(seg: list[Region], reps: list[int], est: Estimator, tile_rows: dict, hw: CIMHardware,
          resident: bool) -> list[int]:
    """Wordline level: spread each tile's rows over crossbars of ``rows_active`` rows when the replicas'
    crossbars can hold the remapped copies and that is faster (updates ``tile_rows`` in place)."""
    ra = hw.crossbar.rows_active
    if ra >= hw.crossbar.rows:
        return reps
    reps = list(reps)
    for i, r in enumerate(seg):
        d_r = remapped(r, reps[i], est, tile_rows[r.name], hw)
        if d_r >= 1 and est.region_ns(r, d_r, ra, resident) < est.region_ns(r, reps[i], hw.crossbar.rows, resident):
            tile_rows[r.name] = ra
            reps[i] = d_r
    return reps

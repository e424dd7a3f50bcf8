"""Segmentation pieces: cutting a network larger than the chip into segments that run one after another.

A segment's weights are written when it starts (and fetched over the
off-chip interface); a single layer larger than the chip runs in passes.

* :func:`greedy` -- maximal consecutive prefixes whose single copies fit;
* :func:`refine` -- CIM-MLC's construction: from each maximal prefix, move
  trailing operators to the next segment while that lowers the latency the
  duplication DP achieves.
"""

from __future__ import annotations

from typing import Callable

from ..estimate import Estimator
from ..region import Region
from ..solvers.knapsack import duplicate as knapsack
from . import duplication


def greedy(regions: list[Region], footprint: Callable[[Region], int], capacity: int) -> list[list[Region]]:
    """Maximal consecutive groups of regions whose footprints (crossbars of one copy) fit ``capacity``."""
    segments: list[list[Region]] = []
    cur: list[Region] = []
    used = 0
    for r in regions:
        need = footprint(r)
        if cur and used + need > capacity:
            segments.append(cur)
            cur, used = [], 0
        cur.append(r)
        used += need
    if cur:
        segments.append(cur)
    return segments


def refine(regions: list[Region], est: Estimator, tile_rows: dict, budget: int, pipeline: bool,
           footprint: Callable[[Region], int], capacity: int) -> list[list[Region]]:
    """CIM-MLC's segment construction: pop trailing operators while that lowers latency."""

    def seg_latency(seg):
        if not seg:
            return 0.0
        costs = [est.plan_cores(r, tile_rows[r.name]) for r in seg]
        if sum(costs) > budget:
            return sum(est.region_ns(r, 1, tile_rows[r.name], False) for r in seg)
        lat = [
            duplication.latency_curve(lambda d, r=r: est.region_ns(r, d, tile_rows[r.name], False),
                                      duplication.max_replicas(r, budget, c))
            for r, c in zip(seg, costs)
        ]
        reps = knapsack(lat, costs, budget, "max" if pipeline else "sum")
        vals = [l[d - 1] for l, d in zip(lat, reps)]
        return max(vals) if pipeline else sum(vals)

    out = []
    pending = list(regions)
    while pending:
        used, n = 0, 0  # maximal prefix that fits
        for r in pending:
            c = footprint(r)
            if n and used + c > capacity:
                break
            used += c
            n += 1
        seg = pending[:n]
        while len(seg) > 1:  # pop trailing nodes while moving them to the next segment lowers the total
            whole = seg_latency(seg)
            split = seg_latency(seg[:-1]) + seg_latency([seg[-1]])
            if split < whole:
                seg = seg[:-1]
            else:
                break
        out.append(seg)
        pending = pending[len(seg):]
    return out

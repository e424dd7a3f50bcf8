"""Cutting a chain of operators into consecutive segments by dynamic programming.

The state is the last segment ``(i, j)``: its cost may depend on the plan the
segment gets, and the cost of moving from one segment to the next on both
plans (CMSwitch's inter-segment write-back, switch and rewrite costs), so::

    best[i][j] = intra(i, j) + min_k ( best[k][i-1] + inter((k, i-1), (i, j)) )
    best[0][j] = intra(0, j) + inter(None, (0, j))

Feasible segments are those ``intra`` does not give ``inf`` for; segments
longer than ``max_len`` are not considered.  ``O(m * max_len^2)`` transitions.

Dominance pruning (``lower``, ``inter_max``): the segments ending at ``j``
are costed in increasing order of ``P(i) + lower(i, j)``, ``P(i)`` the best
cost of the operators before ``i`` as far as the DP has costed them; a
segment whose ``P(i) + lower(i, j)`` exceeds ``best[i'][j] + inter_max`` for
one already costed ``i'`` is not costed at all (``intra`` is not called).
Every continuation of ``(i, j)`` is open to ``(i', j)`` at an entry cost at
most ``inter_max`` higher, so no cut through ``(i, j)`` can be cheaper than,
or tie with, the best one, and the DP returns the same cost and cut, ties
broken the same way.  (The prefix of a best cut is a best prefix that no
pruning has removed, so ``P(i)`` is exact wherever the inequality matters.)
"""

from __future__ import annotations

import math
from typing import Callable

REL_MARGIN = 1e-9  # pruning needs the bound to exceed by this share: the sums are rounded in another order


def segment(m: int, intra: Callable[[int, int], float], inter: Callable[[tuple | None, tuple], float],
            max_len: int | None = None, lower: Callable[[int, int], float] | None = None,
            inter_max: float = 0.0, stats: dict | None = None) -> tuple[float, list[tuple[int, int]]]:
    """Best cut of operators ``0 .. m-1`` into consecutive segments (inclusive bounds).

    Parameters
    ----------
    m : int
        Operators in the chain.
    intra : callable
        ``intra(i, j)``: cost of segment ``i..j`` alone (``inf`` if infeasible).
    inter : callable
        ``inter(prev, seg)``: cost of entering segment ``seg = (i, j)`` after
        ``prev = (k, i-1)`` (``None`` for the first segment).
    max_len : int, optional
        Longest segment considered.
    lower : callable, optional
        ``lower(i, j)``: a lower bound on ``intra(i, j)`` (never above it; cheap);
        enables the dominance pruning of the module docstring.
    inter_max : float
        With ``lower``: an upper bound on every ``inter`` (``inter`` must be at least 0).
    stats : dict, optional
        Receives ``costed`` (``intra`` calls) and ``pruned`` (segments not costed).

    Returns
    -------
    cost : float
        Total cost (``inf`` if no cut is feasible).
    segments : list of (int, int)
        ``(first, last)`` of every segment, in order.
    """
    if m == 0:
        return 0.0, []
    max_len = m if max_len is None else max(1, max_len)
    best: dict[tuple[int, int], float] = {}
    back: dict[tuple[int, int], tuple[int, int] | None] = {}
    intra_c: dict[tuple[int, int], float] = {}
    costed = pruned = 0
    for j in range(m):
        col = list(range(max(0, j - max_len + 1), j + 1))
        pre: dict[int, float] = {}
        if lower is not None:  # best prefix before i (so far), the column in increasing order of its bound
            for i in col:
                prev = [best[(k, i - 1)] for k in range(max(0, i - max_len), i) if (k, i - 1) in best]
                pre[i] = 0.0 if i == 0 else min(prev, default=math.inf)
            bound = {i: pre[i] + lower(i, j) for i in col}
            col.sort(key=lambda i: (bound[i], i))
        lo = math.inf  # the best cost of a segment ending at j costed so far
        for i in col:
            if lower is not None:
                if not math.isfinite(pre[i]):  # no cut reaches i
                    continue
                if bound[i] - (lo + inter_max) > REL_MARGIN * abs(lo + inter_max):
                    pruned += 1
                    continue
            costed += 1
            c = intra(i, j)
            if not math.isfinite(c):
                continue
            intra_c[(i, j)] = c
            if i == 0:
                best[(0, j)] = c + inter(None, (0, j))
                back[(0, j)] = None
                lo = min(lo, best[(0, j)])
                continue
            cand, arg = math.inf, None
            for k in range(max(0, i - max_len), i):
                prev = (k, i - 1)
                if prev not in best:
                    continue
                v = best[prev] + inter(prev, (i, j))
                if v < cand:
                    cand, arg = v, prev
            if arg is not None:
                best[(i, j)] = c + cand
                back[(i, j)] = arg
                lo = min(lo, best[(i, j)])
    if stats is not None:
        stats.update(costed=costed, pruned=pruned)
    ends = [(i, m - 1) for i in range(m) if (i, m - 1) in best]
    if not ends:
        return math.inf, []
    last = min(ends, key=lambda s: best[s])
    total = best[last]
    out = []
    cur: tuple[int, int] | None = last
    while cur is not None:
        out.append(cur)
        cur = back[cur]
    return total, list(reversed(out))

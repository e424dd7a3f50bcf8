"""Cutting a chain of operators into consecutive segments by dynamic programming.

The state is the last segment ``(i, j)``: its cost may depend on the plan the
segment gets, and the cost of moving from one segment to the next on both
plans (CMSwitch's inter-segment write-back, switch and rewrite costs), so::

    best[i][j] = intra(i, j) + min_k ( best[k][i-1] + inter((k, i-1), (i, j)) )
    best[0][j] = intra(0, j) + inter(None, (0, j))

Feasible segments are those ``intra`` does not give ``inf`` for; segments
longer than ``max_len`` are not considered.  ``O(m * max_len^2)`` transitions.
"""

from __future__ import annotations

import math
from typing import Callable


def segment(m: int, intra: Callable[[int, int], float], inter: Callable[[tuple | None, tuple], float],
            max_len: int | None = None) -> tuple[float, list[tuple[int, int]]]:
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
    for j in range(m):
        for i in range(max(0, j - max_len + 1), j + 1):
            c = intra(i, j)
            if not math.isfinite(c):
                continue
            intra_c[(i, j)] = c
            if i == 0:
                best[(0, j)] = c + inter(None, (0, j))
                back[(0, j)] = None
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

"""Replicas per operator under a resource budget: a multiple-choice knapsack solved by dynamic programming."""

from __future__ import annotations

import numpy as np


def duplicate(lat: list[np.ndarray], cost: list[int], budget: int, objective: str,
              candidates: list | None = None) -> list[int]:
    """Choose replicas per operator minimising the sum or the max of their latencies under a budget.

    Parameters
    ----------
    lat : list of numpy.ndarray
        ``lat[i][d-1]``: latency of operator ``i`` with ``d`` replicas.
    cost : list of int
        Units (cores) one replica of operator ``i`` needs.
    budget : int
        Units available.
    objective : {'sum', 'max'}
        ``sum`` for operators that run one after another, ``max`` for a pipeline.
    candidates : list of sequence of int, optional
        Per operator, the replica counts to consider (default: all); where
        ``lat`` is constant between them, the others are never chosen.

    Returns
    -------
    list of int
        Replicas per operator (>= 1); on ties, fewer replicas.

    Raises
    ------
    ValueError
        The operators do not fit the budget even without duplication.
    """
    inf = np.inf
    combine = np.add if objective == "sum" else np.maximum
    dp = np.zeros(budget + 1)  # dp[b]: best objective of ops so far using <= b units
    choice = []
    for i, (li, ci) in enumerate(zip(lat, cost)):
        new = np.full(budget + 1, inf)
        arg = np.zeros(budget + 1, dtype=np.int32)
        for d in (range(1, len(li) + 1) if candidates is None else candidates[i]):
            need = d * ci
            if need > budget:
                break
            cand = np.full(budget + 1, inf)
            cand[need:] = combine(dp[: budget + 1 - need], li[d - 1])
            better = cand < new * (1 - 1e-12)  # strict: prefer fewer replicas on ties
            new = np.where(better, cand, new)
            arg = np.where(better, d, arg)
        dp = new
        choice.append(arg)
    b = int(np.argmin(dp))
    if not np.isfinite(dp[b]):
        raise ValueError("operators do not fit the core budget even without duplication")
    reps = []
    for arg, ci in zip(reversed(choice), reversed(cost)):
        d = int(arg[b])
        reps.append(d)
        b -= d * ci
    return list(reversed(reps))

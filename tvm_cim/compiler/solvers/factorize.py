"""Flexible factorisation of loop bounds (MIREDO, paper 001, Alg. 1).

The MIP assigns every *factor* of a loop bound to a temporal slot or a
spatial axis, so the factor set decides both the search space and the model
size.  Prime factors give the finest tilings but many slots; Alg. 1 merges
pairs of factors greedily while the loss of *flexibility* stays below ``alpha``:

``FlexScore(F) = mu1 |P1| + mu2 |P2| + mu3 |P3|``, where ``P_k`` is the set of
distinct sorted product tuples over all partitions of ``F`` into ``k``
non-empty disjoint subsets (how many different ways the bound can be split
over ``k`` loop levels).  The paper leaves ``mu``, ``alpha`` and ``k_min``
open; the defaults are the public code's (``mu = (1, 0.5, 0.25)``,
``alpha = 0.1``, ``k_min = 2``).
"""

from __future__ import annotations

import itertools
import math
from functools import lru_cache

from ...hardware import loopnest as LN

MU = (1.0, 0.5, 0.25)
ALPHA = 0.10
K_MIN = 2


def prime_factors(n: int) -> list[int]:
    """Prime factors of ``n`` with multiplicity, ascending (``[]`` for 1)."""
    if n < 1:
        raise ValueError(f"loop bound must be positive, got {n}")
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return out


@lru_cache(maxsize=4096)
def _partitions(factors: tuple, k: int) -> int:
    """Distinct sorted product tuples over the partitions of ``factors`` into ``k`` non-empty subsets."""
    if k > len(factors):
        return 0
    seen = set()
    for labels in itertools.product(range(k), repeat=len(factors)):
        if len(set(labels)) < k:
            continue
        prods = [1] * k
        for f, lab in zip(factors, labels):
            prods[lab] *= f
        seen.add(tuple(sorted(prods)))
    return len(seen)


def flex_score(factors, mu=MU) -> float:
    """``sum_k mu_k |P_k(F)|`` for ``k = 1 .. len(mu)``."""
    f = tuple(sorted(factors))
    return sum(w * _partitions(f, k + 1) for k, w in enumerate(mu))


def flexible_factors(n: int, k_min: int = K_MIN, alpha: float = ALPHA, mu=MU) -> list[int]:
    """Alg. 1: the factor set of loop bound ``n`` (ascending; its product is ``n``).

    Parameters
    ----------
    n : int
        Loop bound.
    k_min : int
        Never merge below this many factors.
    alpha : float
        Largest relative flexibility loss (against the prime factorisation) one merge may cost.
    mu : tuple of float
        Weights of the 1-, 2-, 3-way partition counts.

    Returns
    -------
    list of int
    """
    f = prime_factors(n)
    if len(f) <= k_min:
        return f
    full = flex_score(f, mu)
    while len(f) > k_min:
        base = flex_score(f, mu)
        best, best_delta = None, math.inf
        for i, j in itertools.combinations(range(len(f)), 2):
            g = sorted([x for t, x in enumerate(f) if t not in (i, j)] + [f[i] * f[j]])
            delta = (base - flex_score(g, mu)) / full
            if delta < best_delta - 1e-12:
                best, best_delta = g, delta
        if best is None or best_delta > alpha:
            break
        f = best
    return sorted(f)


def residual_bounds(layer: LN.Layer, spatial: tuple) -> dict:
    """Loop bounds left for the temporal loops after ``spatial`` unrolling."""
    b = dict(layer.bounds)
    for _, fs in spatial:
        for d, f in fs:
            b[d] //= f
    return b


def factors_of(bounds: dict, flexible: bool = True) -> list[tuple]:
    """``(dim, factor)`` of every temporal factor (Alg. 1, or primes)."""
    out = []
    for d in LN.DIMS:
        fs = flexible_factors(bounds[d]) if flexible else prime_factors(bounds[d])
        out += [(d, f) for f in fs]
    return out

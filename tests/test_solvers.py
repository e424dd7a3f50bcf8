"""The shared solvers against exhaustive enumeration written here."""

import itertools
import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tvm_cim.compiler.solvers import ga, knapsack, milp, segments


def all_cuts(m):
    """Every way to cut 0..m-1 into consecutive segments, as lists of (first, last)."""
    for mask in range(1 << (m - 1)):
        cuts, start = [], 0
        for i in range(m - 1):
            if mask >> i & 1:
                cuts.append((start, i))
                start = i + 1
        cuts.append((start, m - 1))
        yield cuts


@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 8), seed=st.integers(0, 10**6), max_len=st.one_of(st.none(), st.integers(1, 8)))
def test_segment_dp_equals_brute_force(m, seed, max_len):
    rng = random.Random(seed)
    intra_t = {(i, j): (math.inf if rng.random() < 0.15 else rng.uniform(1, 10)) for i in range(m) for j in range(i, m)}
    inter_t = {}

    def intra(i, j):
        return intra_t[(i, j)]

    def inter(prev, seg):  # depends on both segments (CMSwitch's switch and rewrite costs do)
        key = (prev, seg)
        if key not in inter_t:
            inter_t[key] = rng.uniform(0, 5)
        return inter_t[key]

    cost, cut = segments.segment(m, intra, inter, max_len)
    best = math.inf
    for cuts in all_cuts(m):
        if max_len is not None and any(j - i + 1 > max_len for i, j in cuts):
            continue
        c = sum(intra(i, j) for i, j in cuts) + inter(None, cuts[0])
        c += sum(inter(a, b) for a, b in zip(cuts, cuts[1:]))
        best = min(best, c)
    if math.isinf(best):
        assert math.isinf(cost) and cut == []
    else:
        assert cost == pytest.approx(best)
        assert [i for i, _ in cut][0] == 0 and cut[-1][1] == m - 1
        again = sum(intra(i, j) for i, j in cut) + inter(None, cut[0]) + sum(inter(a, b) for a, b in zip(cut, cut[1:]))
        assert again == pytest.approx(cost)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 4), budget=st.integers(1, 12), seed=st.integers(0, 10**6),
       objective=st.sampled_from(["sum", "max"]))
def test_knapsack_equals_brute_force(n, budget, seed, objective):
    rng = np.random.default_rng(seed)
    cost = [int(c) for c in rng.integers(1, 4, size=n)]
    lat = [np.sort(rng.uniform(1, 100, size=6))[::-1] for _ in range(n)]  # more replicas, not slower
    agg = sum if objective == "sum" else max
    best = math.inf
    for reps in itertools.product(range(1, 7), repeat=n):
        if sum(d * c for d, c in zip(reps, cost)) <= budget:
            best = min(best, agg(l[d - 1] for l, d in zip(lat, reps)))
    if math.isinf(best):
        with pytest.raises(ValueError):
            knapsack.duplicate(lat, cost, budget, objective)
        return
    reps = knapsack.duplicate(lat, cost, budget, objective)
    assert sum(d * c for d, c in zip(reps, cost)) <= budget
    assert agg(l[d - 1] for l, d in zip(lat, reps)) == pytest.approx(best)


def test_milp_equals_enumeration_and_reports_status():
    rng = np.random.default_rng(0)
    for _ in range(5):
        w, v, cap = rng.integers(1, 9, 6), rng.integers(1, 20, 6), 15
        m = milp.Model("knapsack", time_limit=5.0, seed=1)
        x = [m.var(f"x{i}", 0, 2, integer=True) for i in range(6)]
        m.add(sum(int(w[i]) * x[i] for i in range(6)) <= cap)
        sol = m.maximize(sum(int(v[i]) * x[i] for i in range(6)))
        best = max(sum(int(v[i]) * c[i] for i in range(6)) for c in itertools.product(range(3), repeat=6)
                   if sum(int(w[i]) * c[i] for i in range(6)) <= cap)
        assert sol.optimal and sol.objective == pytest.approx(best)
        assert sum(int(w[i]) * round(sol[x[i]]) for i in range(6)) <= cap
    m = milp.Model("infeasible")
    y = m.var("y", 0, 1, integer=True)
    m.add(y >= 2)
    sol = m.maximize(y)
    assert not sol.feasible and sol.status == "Infeasible"


def test_ga_is_seeded_never_regresses_and_finds_a_small_optimum():
    target = np.array([3, 1, 4, 1, 5, 9, 2, 6])

    def init(rng):
        return np.array([rng.randrange(10) for _ in range(8)])

    def mutate(g, rng):
        g = g.copy()
        g[rng.randrange(8)] = rng.randrange(10)
        return g

    def fitness(g):
        return float(np.abs(g - target).sum())

    a = ga.evolve(init, mutate, fitness, population=40, generations=300, seed=5, progress=False, stagnation=60)
    b = ga.evolve(init, mutate, fitness, population=40, generations=300, seed=5, progress=False, stagnation=60)
    assert np.array_equal(a.best, b.best) and a.history == b.history  # seeded
    assert all(y <= x for x, y in zip(a.history, a.history[1:]))  # elitist
    assert a.fitness == 0 and np.array_equal(a.best, target)
    c = ga.evolve(init, mutate, fitness, population=40, generations=10**6, seed=1, progress=False,
                  time_limit=0.2, stagnation=10**6)
    assert c.stopped == "time limit"


def test_ga_budget_of_evaluations_decides_not_the_clock():
    """With a budget of fitness calls the result does not depend on the time limit (a generous one and
    none give the same genome and history); the clock only stops a search that would run too long."""
    def init(rng):
        return np.array([rng.randrange(50) for _ in range(6)])

    def mutate(g, rng):
        g = g.copy()
        g[rng.randrange(6)] = rng.randrange(50)
        return g

    def fitness(g):
        return float(np.abs(g - 17).sum())

    kw = dict(population=30, generations=10**6, seed=2, progress=False, stagnation=10**6, evaluations=500)
    a = ga.evolve(init, mutate, fitness, time_limit=None, **kw)
    b = ga.evolve(init, mutate, fitness, time_limit=600.0, **kw)
    assert a.stopped == b.stopped == "evaluations"
    assert np.array_equal(a.best, b.best) and a.history == b.history
    assert 500 <= a.evaluations < 500 + 30  # stops after the generation that reaches the budget


def test_milp_node_limit_decides_and_is_reproducible():
    """A node limit (not the clock) stops the search: a two-row 0-1 knapsack with large coefficients
    (HiGHS runs past a 20 s limit on it unbounded) stops after one node with a feasible answer that is
    not proven optimal, and two solves under the same limit agree exactly."""
    rng = np.random.default_rng(3)
    n = 30
    a, a2 = rng.integers(1000, 100000, n), np.random.default_rng(5).integers(1000, 100000, n)

    def solve():
        m = milp.Model("market", time_limit=60.0, seed=0, node_limit=1)
        x = [m.binary(f"x{i}") for i in range(n)]
        m.add(sum(int(a[i]) * x[i] for i in range(n)) <= int(a.sum() // 2) + 1)
        m.add(sum(int(a2[i]) * x[i] for i in range(n)) <= int(a2.sum() // 2))
        sol = m.maximize(sum(int(a[i] + a2[i]) * x[i] for i in range(n)))
        return sol, [round(sol[xi]) for xi in x]

    (s1, x1), (s2, x2) = solve(), solve()
    assert s1.feasible and not s1.optimal and "limit" in s1.status.lower()
    assert x1 == x2 and s1.objective == s2.objective
    assert sum(int(a[i]) * x1[i] for i in range(n)) <= int(a.sum() // 2) + 1
    assert sum(int(a2[i]) * x1[i] for i in range(n)) <= int(a2.sum() // 2)

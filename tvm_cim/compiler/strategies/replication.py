"""PIMCOMP's weight replication and array-group layout by genetic algorithm (paper 004 sec. VI-A).

The problem: how many replicas of every layer, and on which cores their
array groups (AGs, :mod:`tvm_cim.compiler.unfold`) sit, under the crossbars
of every core.

* **Encoding** (value-position, as the paper): a genome is a ``cores x slots``
  integer array; gene ``(c, s)`` holds ``layer * 10000 + n`` -- ``n`` AG units
  of ``layer`` on core ``c`` -- or 0 (empty slot).  An AG wider than a core
  is cut into units that fit one (:class:`Problem`).  A layer's units always
  make whole replicas.
* **Initialisation**: one replica of every layer, placed first-fit on the
  cores in a random order; then (as PIMCOMP's code) replicas added to the
  slowest layer until a random share in [0.1, 0.9] of the crossbars is free.
* **Mutations** (the code's five operators, rate 0.2 each, every result
  legal): increase or decrease a layer's replication (paper mutation I; by
  one replica or up to as many as it has, :func:`_step`; half of them
  directed to the slowest layer or away from layers with slack, ours),
  split a gene onto another core, gather a small gene onto a core already
  holding its layer, exchange two genes between cores (paper mutation II).
  No crossover (neither the paper nor the code has one).
* **Selection**: the shared DEAP driver (:func:`tvm_cim.compiler.solvers.ga.evolve`):
  the best 30 % survive, each other with probability 0.2, mutations refill
  a population of 200.
* **Fitness**: the shared estimate (:class:`tvm_cim.compiler.estimate.Estimator`),
  which the simulator's cost primitives underlie: for high throughput the
  pipeline cycle -- the slowest layer at its replicas, or the global-buffer
  port and chip ALU all layers share, if busier; for low latency the
  estimate of one input through the element pipeline
  (:meth:`Estimator.graph_ns`).  The paper runs its profiler on a simplified
  instruction stream; ours sees the AG layout only through replica counts
  (activations pass through the global buffer in our programs, so which core
  holds an AG does not change the estimate), and the executed placement is
  the ``Place`` pass's packing of those replicas.

:func:`dp_same_problem` gives our duplication DP
(:func:`tvm_cim.compiler.solvers.knapsack.duplicate`) the same problem
(crossbars of a replica's units, all crossbars as the budget, the cycle as
objective) for comparison.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ...hardware.schema import CIMHardware
from ..estimate import Estimator
from ..plan import row_blocks
from ..region import Region
from ..solvers.ga import evolve
from ..solvers.knapsack import duplicate as knapsack
from .duplication import latency_curve, vectors

BASE = 10000  # gene value = layer * BASE + units (PIMCOMP's encoding)
MAX_SLOTS = 32  # PIMCOMP's max_AG_kind_per_core
RATES = {"increase": 0.2, "decrease": 0.2, "split": 0.2, "gather": 0.2, "exchange": 0.2}
RETRIES = 30


@dataclass
class Problem:
    """Replication and AG layout of the layers of one segment.

    Attributes
    ----------
    units : numpy.ndarray
        Per layer, AG units of one replica (AGs, each cut into pieces that fit a core).
    unit_xbs : numpy.ndarray
        Per layer, crossbars of one unit.
    ags : numpy.ndarray
        Per layer, AGs of one replica (row blocks of its tiles).
    max_reps : numpy.ndarray
        Per layer, most replicas worth making (one per input vector, within the chip).
    cores, per_core, slots : int
    lat : list of numpy.ndarray
        ``lat[l][d - 1]``: the estimate of layer ``l`` alone with ``d`` replicas.
    shared_ns : float
        Busy time of the global-buffer port and chip ALU summed over the layers (the
        pipeline cycle's floor: every layer of every input uses them).
    """

    units: np.ndarray
    unit_xbs: np.ndarray
    ags: np.ndarray
    max_reps: np.ndarray
    cores: int
    per_core: int
    slots: int
    lat: list = field(default_factory=list)
    shared_ns: float = 0.0

    @property
    def n(self) -> int:
        return len(self.units)

    def replica_xbs(self) -> np.ndarray:
        """Crossbars one replica's units occupy, per layer."""
        return self.units * self.unit_xbs

    def cycle_ns(self, reps) -> float:
        """The high-throughput objective: the slowest layer at its replicas, or the shared units."""
        return max(self.shared_ns, max(float(lt[min(int(d), len(lt)) - 1]) for lt, d in zip(self.lat, reps)))

    def cycle_search(self, reps) -> float:
        """:meth:`cycle_ns` with a tie-breaker the GA climbs on: plus a millionth of the layers' latencies'
        8-norm, so speeding up any of the slowest layers improves the fitness before the slowest one moves."""
        lat = np.array([float(lt[min(int(d), len(lt)) - 1]) for lt, d in zip(self.lat, reps)])
        return self.cycle_ns(reps) + 1e-6 * float(np.sum((lat / lat.max()) ** 8) ** 0.125 * lat.max())


def problem(seg: list[Region], est: Estimator, tile_rows: dict, hw: CIMHardware, resident: bool = True) -> Problem:
    """The replication problem of one segment on the estimate.

    Parameters
    ----------
    seg : list of Region
    est : Estimator
    tile_rows : dict
        Region name -> rows per tile (the unfolding's AG height).
    hw : CIMHardware
    resident : bool
        Weights programmed once.

    Returns
    -------
    Problem
    """
    per_core, cores = hw.core.crossbars, hw.cores
    units, unit_xbs, ags, max_reps, lat = [], [], [], [], []
    shared = [0.0, 0.0]
    cap = cores * per_core
    for r in seg:
        tiles = est.tile_list(r, tile_rows[r.name])
        blocks = row_blocks(tiles)
        n_ag = max(1, len(blocks))
        per_ag = max(1, math.ceil(len(tiles) / n_ag))
        pieces = math.ceil(per_ag / per_core)
        u = math.ceil(per_ag / pieces)
        units.append(n_ag * pieces)
        unit_xbs.append(u)
        ags.append(n_ag)
        md = max(1, min(vectors(r), cap // (n_ag * pieces * u)))
        max_reps.append(md)
        lat.append(latency_curve(lambda d, r=r: est.region_ns(r, d, tile_rows[r.name], resident), md))
        _, busy = est.chunk_finish(r, 1, tile_rows[r.name], resident)
        shared[0] += busy[0]
        shared[1] += busy[1]
    return Problem(np.array(units), np.array(unit_xbs), np.array(ags), np.array(max_reps), cores, per_core,
                   min(MAX_SLOTS, max(1, len(seg))), lat, max(shared))


# --------------------------------------------------------------------------- genome helpers
def decode(p: Problem, g: np.ndarray) -> np.ndarray:
    """Replicas per layer of a genome."""
    tot = np.zeros(p.n, dtype=np.int64)
    v = g[g > 0]
    np.add.at(tot, v // BASE, v % BASE)
    return tot // p.units


def free_xbs(p: Problem, g: np.ndarray) -> np.ndarray:
    """Free crossbars per core."""
    lay, cnt = g // BASE, g % BASE
    used = np.where(g > 0, cnt * p.unit_xbs[lay], 0).sum(axis=1)
    return p.per_core - used


def legal(p: Problem, g: np.ndarray) -> bool:
    """Capacity of every core, whole replicas of every layer (at least one), at most one gene per layer and core."""
    if g.shape != (p.cores, p.slots) or np.any(free_xbs(p, g) < 0):
        return False
    tot = np.zeros(p.n, dtype=np.int64)
    v = g[g > 0]
    if np.any(v // BASE >= p.n):
        return False
    np.add.at(tot, v // BASE, v % BASE)
    if np.any(tot < p.units) or np.any(tot % p.units):
        return False
    for row in g:
        lays = row[row > 0] // BASE
        if len(set(lays.tolist())) != len(lays):
            return False
    return True


def _order(rng: random.Random, n: int) -> list[int]:
    """A random order of ``n`` cores drawn from ``rng`` (one draw, then numpy)."""
    return np.random.default_rng(rng.getrandbits(63)).permutation(n).tolist()


def _place(p: Problem, g: np.ndarray, layer: int, units: int, order, free: np.ndarray | None = None) -> bool:
    """Put ``units`` units of ``layer`` first-fit on the cores in ``order`` (in place); False if they do not fit.

    ``free``: the free crossbars per core, when the caller keeps them (updated in place on success).
    """
    free = free_xbs(p, g) if free is None else free
    u = int(p.unit_xbs[layer])
    plan = []
    for c in order:
        if units == 0:
            break
        k = min(units, int(free[c]) // u)
        if k <= 0:
            continue
        row = g[c]
        hit = np.flatnonzero((row > 0) & (row // BASE == layer))
        if hit.size:
            s = int(hit[0])
        else:
            empty = np.flatnonzero(row == 0)
            if not empty.size:
                continue
            s = int(empty[0])
        if (row[s] % BASE) + k >= BASE:
            continue
        plan.append((c, s, k))
        units -= k
    if units:
        return False
    for c, s, k in plan:
        g[c, s] = layer * BASE + (g[c, s] % BASE) + k
        free[c] -= k * u
    return True


def _remove(p: Problem, g: np.ndarray, layer: int, units: int, first: tuple | None, rng: random.Random) -> None:
    """Take ``units`` units of ``layer`` away (from gene ``first`` first, then random genes), in place."""
    cells = [tuple(x) for x in np.argwhere((g > 0) & (g // BASE == layer))]
    rng.shuffle(cells)
    if first is not None and first in cells:
        cells.remove(first)
        cells.insert(0, first)
    for c, s in cells:
        if units == 0:
            break
        have = int(g[c, s] % BASE)
        k = min(have, units)
        g[c, s] = 0 if k == have else g[c, s] - k
        units -= k


def random_genome(p: Problem, rng: random.Random, fill: bool = True) -> np.ndarray:
    """One replica of every layer on randomly ordered cores; then (``fill``) replicas of the slowest
    layer until a random share in [0.1, 0.9] of the crossbars is free (PIMCOMP's initialisation).

    Raises
    ------
    ValueError
        One replica of every layer does not fit the cores.
    """
    sizes = p.replica_xbs()
    for _ in range(RETRIES):
        g = np.zeros((p.cores, p.slots), dtype=np.int64)
        order = _order(rng, p.cores)
        free = np.full(p.cores, p.per_core, dtype=np.int64)
        if all(_place(p, g, li, int(p.units[li]), order, free) for li in sorted(range(p.n), key=lambda i: -sizes[i])):
            break
    else:
        raise ValueError("one replica of every layer does not fit the cores' crossbars")
    if fill:
        margin = rng.uniform(0.1, 0.9) * p.cores * p.per_core
        reps = decode(p, g)
        while free.sum() > margin:
            cand = [i for i in range(p.n) if reps[i] < p.max_reps[i]]
            if not cand:
                break
            li = max(cand, key=lambda i: p.lat[i][reps[i] - 1])
            k = max(1, min(int(reps[li]) // 2, int(p.max_reps[li] - reps[li])))  # in doublings, then one by one
            if not _place(p, g, li, int(p.units[li]) * k, order, free):
                if k == 1 or not _place(p, g, li, int(p.units[li]), order, free):
                    break
                k = 1
            reps[li] += k
    return g


def _step(rng: random.Random, reps: int) -> int:
    """Replicas a mutation adds or removes: from 1 up to the layer's replicas (larger jumps for layers with
    many replicas, whose latency falls in steps; the paper does not fix the step)."""
    return rng.randint(1, max(1, reps))


def _directed(p: Problem, h: np.ndarray, reps: np.ndarray, kind: str, rng: random.Random) -> tuple | None:
    """A gene of the slowest layer that can grow (``increase``), or of a layer that stays faster than the
    slowest one with one replica fewer, drawn in proportion to the crossbars it frees (``decrease``): the
    directed half of the replication mutations."""
    lat = np.array([float(lt[d - 1]) for lt, d in zip(p.lat, reps)])
    if kind == "increase":
        grow = np.where(reps < p.max_reps, lat, -1.0)
        layer = int(np.argmax(grow))
        if grow[layer] < 0:
            return None
    else:
        ok = [i for i, (lt, d) in enumerate(zip(p.lat, reps)) if d > 1 and lt[d - 2] < lat.max()]
        if not ok:
            return None
        layer = rng.choices(ok, [float(p.replica_xbs()[i]) for i in ok])[0]
    cells = np.argwhere((h > 0) & (h // BASE == layer))
    return tuple(cells[0]) if len(cells) else None


def mutate(p: Problem, g: np.ndarray, rng: random.Random) -> np.ndarray:
    """One of the five legal mutations (a new genome; the parent when none applies after retries).

    Half of the replication mutations are directed (ours; the paper picks a
    random gene): an increase goes to the slowest layer, a decrease to a
    layer that stays faster than it without the replicas removed, so that
    crossbars move towards the bottleneck when the chip is full.
    """
    kinds, weights = zip(*RATES.items())
    for _ in range(RETRIES):
        h = g.copy()
        kind = rng.choices(kinds, weights)[0]
        genes = [tuple(x) for x in np.argwhere(h > 0)]
        if not genes:
            return g
        c, s = genes[rng.randrange(len(genes))]
        reps = decode(p, h)
        if kind in ("increase", "decrease") and rng.random() < 0.5:
            cell = _directed(p, h, reps, kind, rng)
            if cell is not None:
                c, s = int(cell[0]), int(cell[1])
        layer = int(h[c, s] // BASE)
        order = _order(rng, p.cores)
        if kind == "increase":
            k = min(_step(rng, int(reps[layer])), int(p.max_reps[layer] - reps[layer]))
            if k <= 0:
                continue
            if _place(p, h, layer, int(p.units[layer]) * k, [c] + [o for o in order if o != c]):
                return h
        elif kind == "decrease":
            k = min(_step(rng, int(reps[layer])), int(reps[layer]) - 1)
            if k <= 0:
                continue
            _remove(p, h, layer, int(p.units[layer]) * k, (c, s), rng)
            return h
        elif kind == "split":
            have = int(h[c, s] % BASE)
            if have < 2:
                continue
            k = rng.randint(1, have - 1)
            h[c, s] -= k
            if _place(p, h, layer, k, [o for o in order if o != c]):
                return h
        elif kind == "gather":
            have = int(h[c, s] % BASE)
            if have > 2:
                continue
            others = [int(o) for o in np.flatnonzero(((h > 0) & (h // BASE == layer)).any(axis=1)) if o != c]
            if not others:
                continue
            h[c, s] = 0
            if _place(p, h, layer, have, others):
                return h
        else:  # exchange two genes of different cores
            c2, s2 = genes[rng.randrange(len(genes))]
            if c2 == c:
                continue
            h[c, s], h[c2, s2] = h[c2, s2], h[c, s]
            if legal(p, h):
                return h
    return g


def layout(p: Problem, g: np.ndarray) -> dict[int, list[tuple[int, int]]]:
    """Per layer, ``(core, AG units)`` of a genome."""
    out: dict[int, list[tuple[int, int]]] = {}
    for c, s in np.argwhere(g > 0):
        out.setdefault(int(g[c, s] // BASE), []).append((int(c), int(g[c, s] % BASE)))
    return out


# --------------------------------------------------------------------------- solvers
@dataclass
class Outcome:
    """Replicas chosen by one method and what they cost.

    Attributes
    ----------
    replicas : list of int
    fitness : float
        The objective (ns) on the estimate.
    seconds : float
    detail : dict
        Method-specific: generations, stop reason, history (GA); packability (DP).
    """

    replicas: list
    fitness: float
    seconds: float
    detail: dict = field(default_factory=dict)


def ga(p: Problem, fitness: Callable[[np.ndarray], float], *, generations: int = 100, population: int = 200,
       time_limit: float | None = 10.0, seed: int = 0, progress: bool = True, stagnation: int = 25,
       seeds: list | None = None, report: Callable[[np.ndarray], float] | None = None) -> tuple[Outcome, np.ndarray]:
    """PIMCOMP's GA on the shared driver.

    Parameters
    ----------
    p : Problem
    fitness : callable
        ``replicas (numpy array) -> ns``, lower is better.
    generations, population : int
        The paper: population 200, up to 1000 iterations.
    time_limit : float, optional
        Seconds.
    seed : int
    progress : bool
        A progress bar.
    stagnation : int
        Stop after this many generations without improvement.
    seeds : list of numpy.ndarray, optional
        Genomes for the first population.
    report : callable, optional
        The objective the outcome states (``fitness`` when it is a search
        surrogate, e.g. :meth:`Problem.cycle_search`); default ``fitness``.

    Returns
    -------
    Outcome
    numpy.ndarray
        The best genome.
    """
    cache: dict = {}

    def fit(g):
        reps = decode(p, g)
        key = reps.tobytes()
        if key not in cache:
            cache[key] = float(fitness(reps))
        return cache[key]

    res = evolve(lambda rng: random_genome(p, rng), lambda g, rng: mutate(p, g, rng), fit,
                 population=population, generations=generations, seed=seed, time_limit=time_limit,
                 stagnation=stagnation, progress=progress, desc="PIMCOMP GA", seeds=seeds)
    reps = decode(p, res.best)
    return Outcome([int(d) for d in reps], float(report(reps)) if report else res.fitness, res.seconds, {
        "generations": res.generations, "stopped": res.stopped, "history": [float(h) for h in res.history],
        "evaluations": len(cache), "population": population, "seed": seed}), res.best


def dp_same_problem(p: Problem, fitness: Callable[[np.ndarray], float]) -> Outcome:
    """Our duplication DP on the same problem: replicas under all crossbars, minimising the pipeline cycle.

    The DP sees the crossbars of a replica's units and the chip's total (no
    per-core packing); whether its answer packs onto the cores is checked
    first-fit and reported (``packs``).
    """
    t0 = time.perf_counter()
    cost = [int(x) for x in p.replica_xbs()]
    reps = knapsack(p.lat, cost, p.cores * p.per_core, "max")
    bott = max(float(lt[d - 1]) for lt, d in zip(p.lat, reps))
    reps = [int(np.argmax(lt <= bott * (1 + 1e-9))) + 1 for lt in p.lat]  # balanced to the bottleneck
    g = pack(p, reps)
    secs = time.perf_counter() - t0
    return Outcome(reps, float(fitness(np.array(reps))), secs, {"packs": g is not None, "genome": g})


def pack(p: Problem, reps) -> np.ndarray | None:
    """A genome holding ``reps`` replicas of every layer, packed first-fit (largest units first), or None."""
    g = np.zeros((p.cores, p.slots), dtype=np.int64)
    ok = all(_place(p, g, li, int(p.units[li]) * int(reps[li]), range(p.cores))
             for li in sorted(range(p.n), key=lambda i: -p.unit_xbs[i]))
    return g if ok else None

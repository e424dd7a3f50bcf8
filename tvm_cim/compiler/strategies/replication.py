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
  No crossover (neither the paper nor the code has one).  Ours, a sixth
  mutation at the same rate, also the repair step: :func:`balance` trims
  every layer to the start of its latency plateau under the current cycle
  and moves the slowest layers several replicas at once to their curves'
  next step, on the emptiest cores (without it, the GA without the DP's
  seed stops short of the DP on stepped curves).
* **Selection**: the shared DEAP driver (:func:`tvm_cim.compiler.solvers.ga.evolve`):
  the best 30 % survive, each other with probability 0.2, mutations refill
  a population of 200.
* **Fitness**: the shared estimate (:class:`tvm_cim.compiler.estimate.Estimator`),
  which the simulator's cost primitives underlie: for high throughput the
  pipeline cycle -- the slowest layer at its replicas, or the global-buffer
  port and chip ALU all layers share, if busier; for low latency the
  estimate of one input through the element pipeline
  (:meth:`Estimator.graph_ns`), each bounded below by the busiest core under
  the genome's layout (:meth:`Problem.core_ns`: a replica reduces and
  dequantises on the core of its first AG unit and receives its input over
  that core's link, so replicas homed on one core share them).  The paper
  runs its profiler on a simplified instruction stream.
* **Layout is executed**: :func:`unit_cores` gives every AG unit of every
  replica its core; the ``Place`` pass puts the unit's crossbars there
  (:func:`crossbars`), so the program and the simulator follow the genome.

:func:`dp_same_problem` gives our duplication DP
(:func:`tvm_cim.compiler.solvers.knapsack.duplicate`) the same problem
(crossbars of a replica's units, all crossbars as the budget, the cycle as
objective) for comparison.
"""

from __future__ import annotations

import math
import random
import time
from bisect import bisect_left
from dataclasses import dataclass, field
from functools import cached_property
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
RATES = {"increase": 0.2, "decrease": 0.2, "split": 0.2, "gather": 0.2, "exchange": 0.2, "balance": 0.2}
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
    post_ns, link_ns : numpy.ndarray, optional
        Per layer, one input's work on the core ALUs (partial-sum reduction,
        dequantisation) and on the core links (input slices), summed over its
        chunks: shared out among the replicas, on the cores the layout gives
        (:meth:`core_ns`).
    per_unit_links : bool
        Each AG gets its input slice over its own core's link (MVM-grained
        pipeline); otherwise a replica's input goes over its first core's link.
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
    post_ns: np.ndarray | None = None
    link_ns: np.ndarray | None = None
    per_unit_links: bool = False

    @property
    def n(self) -> int:
        return len(self.units)

    @cached_property
    def neg_best(self) -> list[list[float]]:
        """Per layer, minus the running minimum of its latency curve (non-decreasing: binary-searchable)."""
        return [(-np.minimum.accumulate(np.asarray(lt, dtype=float))).tolist() for lt in self.lat]

    def replica_xbs(self) -> np.ndarray:
        """Crossbars one replica's units occupy, per layer."""
        return self.units * self.unit_xbs

    def cycle_ns(self, reps) -> float:
        """The high-throughput objective: the slowest layer at its replicas, or the shared units."""
        return max(self.shared_ns, max(float(lt[min(int(d), len(lt)) - 1]) for lt, d in zip(self.lat, reps)))

    def core_ns(self, g: np.ndarray) -> float:
        """The busiest core's ALU or link for one input under the layout of genome ``g``.

        A replica does ``1/d`` of its layer's chunks: its reduction and
        dequantisation run on the ALU of the core holding its first AG unit
        (where the program accumulates), its input slices go over the link of
        that core (or of each unit's core, :attr:`per_unit_links`).  Replicas of
        any layers homed on one core share that core's ALU and link, in the
        simulator as here; this is how the AG layout enters the fitness.
        """
        if self.post_ns is None:
            return 0.0
        alu = np.zeros(self.cores)
        link = np.zeros(self.cores)
        cells = np.argwhere(g > 0)
        vals = g[cells[:, 0], cells[:, 1]]
        by_layer = np.argsort(vals // BASE, kind="stable")  # layer by layer, each in core order
        lay, cnt = vals[by_layer] // BASE, vals[by_layer] % BASE
        seq = np.repeat(cells[by_layer, 0], cnt)  # every unit's core
        seq_lay = np.repeat(lay, cnt)
        total = np.bincount(seq_lay, minlength=self.n)
        first = np.cumsum(total) - total  # where each layer's units start in seq
        u = self.units[seq_lay]
        pos = np.arange(len(seq)) - first[seq_lay]
        d = total[seq_lay] // u
        home = pos % u == 0  # each replica's first unit
        np.add.at(alu, seq[home], self.post_ns[seq_lay[home]] / d[home])
        if self.per_unit_links:
            np.add.at(link, seq, self.link_ns[seq_lay] / (d * u))
        else:
            np.add.at(link, seq[home], self.link_ns[seq_lay[home]] / d[home])
        return float(max(alu.max(), link.max()))

    def cycle_search(self, reps) -> float:
        """:meth:`cycle_ns` with a tie-breaker the GA climbs on: plus a millionth of the layers' latencies'
        8-norm, so speeding up any of the slowest layers improves the fitness before the slowest one moves."""
        lat = np.array([float(lt[min(int(d), len(lt)) - 1]) for lt, d in zip(self.lat, reps)])
        return self.cycle_ns(reps) + 1e-6 * float(np.sum((lat / lat.max()) ** 8) ** 0.125 * lat.max())


def problem(seg: list[Region], est: Estimator, tile_rows: dict, hw: CIMHardware, resident: bool = True,
            layout: bool = True) -> Problem:
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
    layout : bool
        The AG layout reaches the fitness: a layer's latency curve has its
        replicas on cores of their own, and :meth:`Problem.core_ns` charges the
        replicas that share a core (otherwise the curve packs replicas onto
        consecutive crossbars, as the ``Place`` pass does without a layout).

    Returns
    -------
    Problem
    """
    per_core, cores = hw.core.crossbars, hw.cores
    units, unit_xbs, ags, max_reps, lat, post, link = [], [], [], [], [], [], []
    shared = [0.0, 0.0]
    cap = cores * per_core
    for r in seg:
        tiles = est.tile_list(r, tile_rows[r.name])
        cut = unit_tiles(tiles, per_core)
        n_ag = max(1, len(row_blocks(tiles)))
        u = max(len(x) for x in cut)
        units.append(len(cut))
        unit_xbs.append(u)
        ags.append(n_ag)
        md = max(1, min(vectors(r), cap // (len(cut) * u)))
        max_reps.append(md)
        lat.append(latency_curve(lambda d, r=r: est.region_ns(r, d, tile_rows[r.name], resident, spread=layout), md))
        _, busy = est.chunk_finish(r, 1, tile_rows[r.name], resident)
        shared[0] += busy[0]
        shared[1] += busy[1]
        work = est._chunk_work(r, est.chunks(r, 1), tile_rows[r.name])
        link.append(float(np.sum(work[2])))
        post.append(float(np.sum(work[4])))
    return Problem(np.array(units), np.array(unit_xbs), np.array(ags), np.array(max_reps), cores, per_core,
                   min(MAX_SLOTS, max(1, len(seg))), lat, max(shared),
                   np.array(post) if layout else None, np.array(link) if layout else None,
                   bool(est.mvm_pipeline and hw.chip.computing_mode != "core"))


def unit_tiles(tiles: list, per_core: int) -> list[list[int]]:
    """The AG units of one replica: per unit, the indices of its tiles.

    An AG is a row block of the tiles (:func:`tvm_cim.compiler.plan.row_blocks`,
    row-major order); an AG wider than a core is cut into ``pieces`` units of
    at most ``u`` tiles, the same cut for every AG (``pieces`` and ``u`` from the
    largest AG: the AGs of a grouped convolution hold different numbers of
    non-zero tiles), so every unit of a layer fits the ``u`` crossbars the GA
    counts for it.
    """
    groups: dict[int, list[int]] = {}
    for i, t in enumerate(tiles):
        groups.setdefault(t.k0, []).append(i)
    per_ag = max(len(g) for g in groups.values())
    pieces = math.ceil(per_ag / per_core)
    u = math.ceil(per_ag / pieces)
    return [groups[k][j * u:(j + 1) * u] for k in sorted(groups) for j in range(pieces)]


def unit_cores(p: Problem, g: np.ndarray) -> list[list[list[int]]]:
    """The core of every AG unit of every replica of every layer, from a genome.

    A layer's genes, in core order, give a sequence of units; replica ``r``
    takes units ``r * units[l]`` to ``(r + 1) * units[l] - 1`` of it (so a
    replica's AGs stay together on as few cores as the genes allow).

    Returns
    -------
    list
        ``out[layer][replica][unit]`` -> core.
    """
    seq: list[list[int]] = [[] for _ in range(p.n)]
    for c, s in np.argwhere(g > 0):  # row-major: cores in order
        v = int(g[c, s])
        seq[v // BASE].extend([int(c)] * (v % BASE))
    out = []
    for li, cores in enumerate(seq):
        u = int(p.units[li])
        out.append([cores[i:i + u] for i in range(0, len(cores), u)])
    return out


def crossbars(tiles: list, cores: list[list[int]], per_core: int, nxt: dict) -> list[list[int]]:
    """Chip crossbars of every replica of a layer laid out as the GA says (what ``Place`` records).

    Parameters
    ----------
    tiles : list of Tile
        One replica's tiles.
    cores : list of list of int
        Per replica, the core of each of its AG units (:func:`unit_cores`).
    per_core : int
        Crossbars per core.
    nxt : dict
        Core -> its next free crossbar (local index), shared by the layers of
        one segment and updated in place.

    Returns
    -------
    list of list of int
        Per replica, the crossbar id of every tile (tile order).

    Raises
    ------
    ValueError
        The units do not fit a core (a layout edited by hand, say).
    """
    cut = unit_tiles(tiles, per_core)
    out = []
    for rep in cores:
        if len(rep) != len(cut):
            raise ValueError(f"a replica has {len(rep)} AG units in the layout, the layer has {len(cut)}")
        ids = [0] * len(tiles)
        for c, unit in zip(rep, cut):
            base = nxt.get(c, 0)
            if base + len(unit) > per_core:
                raise ValueError(f"core {c} holds more than its {per_core} crossbars in the layout")
            for j, t in enumerate(unit):
                ids[t] = c * per_core + base + j
            nxt[c] = base + len(unit)
        out.append(ids)
    return out


# --------------------------------------------------------------------------- genome helpers
def decode(p: Problem, g: np.ndarray) -> np.ndarray:
    """Replicas per layer of a genome."""
    v = g[g > 0]
    return np.bincount(v // BASE, weights=v % BASE, minlength=p.n).astype(np.int64) // p.units


def free_xbs(p: Problem, g: np.ndarray) -> np.ndarray:
    """Free crossbars per core."""
    at = np.flatnonzero(g)
    v = g.ravel()[at]
    used = np.bincount(at // g.shape[1], weights=(v % BASE) * p.unit_xbs[v // BASE], minlength=g.shape[0])
    return p.per_core - used.astype(np.int64)


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


def _min_reps_upto(neg_best: list, reps: int, bound: float) -> int:
    """Fewest replicas, at most ``reps``, whose latency is within ``bound`` (the start of the curve's plateau at
    or under it; ``reps`` if none): a binary search in ``neg_best``, minus the curve's running minimum
    (:attr:`Problem.neg_best`)."""
    i = bisect_left(neg_best, -(bound * (1 + 1e-12)))
    return i + 1 if i < reps else reps


def _next_step(lt: np.ndarray, d: int) -> int | None:
    """Fewest replicas faster than ``d`` replicas (the next step down the curve), or None."""
    faster = np.flatnonzero(lt[d:] < lt[d - 1] * (1 - 1e-12))
    return d + 1 + int(faster[0]) if faster.size else None


def _trim(p: Problem, h: np.ndarray, bound: float, rng: random.Random) -> None:
    """Every layer down to the start of its plateau under ``bound`` (frees crossbars, no layer slower), in place."""
    reps = decode(p, h).tolist()
    neg_best = p.neg_best
    for li in range(p.n):
        d = _min_reps_upto(neg_best[li], reps[li], bound)
        if d < reps[li]:
            _remove(p, h, li, int(p.units[li]) * int(reps[li] - d), None, rng)


def balance(p: Problem, g: np.ndarray, rng: random.Random) -> np.ndarray:
    """Repair and climb along the latency curves (ours, a mutation and the GA's repair step).

    Trims every layer to the first replica count of its plateau under the
    current cycle (the crossbars of replicas that do not make it faster come
    free), then moves the slowest layers down to their curves' next step --
    several replicas at once -- placed on the cores with the most free
    crossbars, trimming again under the new cycle; repeated while the
    replicas fit.  The AG layout of the untouched genes is kept.
    """
    h = g.copy()
    lat = np.array([float(lt[d - 1]) for lt, d in zip(p.lat, decode(p, h))])
    _trim(p, h, float(lat.max()), rng)
    for _ in range(4 * p.n):
        reps = decode(p, h)
        lat = np.array([float(lt[d - 1]) for lt, d in zip(p.lat, reps)])
        top = float(lat.max())
        slow = np.flatnonzero(lat >= top * (1 - 1e-12))
        steps = [_next_step(p.lat[li], int(reps[li])) for li in slow]
        if any(st is None for st in steps):
            break
        trial = h.copy()
        is_slow = set(slow.tolist())
        new_top = max([float(p.lat[li][st - 1]) for li, st in zip(slow, steps)]
                      + [float(x) for i, x in enumerate(lat) if i not in is_slow])
        _trim(p, trial, new_top, rng)
        free = free_xbs(p, trial)
        ok = True
        for li, st in zip(slow, steps):
            order = np.argsort(-free, kind="stable").tolist()  # spread over the emptiest cores
            if not _place(p, trial, int(li), int(p.units[li]) * (st - int(reps[li])), order, free):
                ok = False
                break
        if not ok:
            break
        h = trial
    return h


def mutate(p: Problem, g: np.ndarray, rng: random.Random) -> np.ndarray:
    """One of the legal mutations -- the code's five and our :func:`balance` -- (a new genome; the parent when
    none applies after retries).

    Half of the replication mutations are directed (ours; the paper picks a
    random gene): an increase goes to the slowest layer, a decrease to a
    layer that stays faster than it without the replicas removed, so that
    crossbars move towards the bottleneck when the chip is full.
    """
    kinds, weights = zip(*RATES.items())
    genes = np.argwhere(g > 0).tolist()  # every retry starts from g
    for _ in range(RETRIES):
        h = g.copy()
        kind = rng.choices(kinds, weights)[0]
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
        if kind == "balance":
            out = balance(p, h, rng)
            if not np.array_equal(out, g):
                return out
            continue
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
       seeds: list | None = None, report: Callable[[np.ndarray], float] | None = None,
       evaluations: int | None = None) -> tuple[Outcome, np.ndarray]:
    """PIMCOMP's GA on the shared driver.

    Parameters
    ----------
    p : Problem
    fitness : callable
        ``replicas (numpy array) -> ns``, lower is better.
    generations, population : int
        The paper: population 200, up to 1000 iterations.
    time_limit : float, optional
        Seconds, a safety net (reported as the stop reason when it decides).
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
    evaluations : int, optional
        The deterministic budget: genomes evaluated (:func:`~tvm_cim.compiler.solvers.ga.evolve`).

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
        return max(cache[key], p.core_ns(g))

    c0 = time.process_time()
    res = evolve(lambda rng: random_genome(p, rng), lambda g, rng: mutate(p, g, rng), fit,
                 population=population, generations=generations, seed=seed, time_limit=time_limit,
                 stagnation=stagnation, progress=progress, desc="PIMCOMP GA", seeds=seeds, evaluations=evaluations)
    cpu = time.process_time() - c0
    reps = decode(p, res.best)
    return Outcome([int(d) for d in reps], max(float(report(reps)), p.core_ns(res.best)) if report else res.fitness,
                   res.seconds, {
        "generations": res.generations, "stopped": res.stopped, "history": [float(h) for h in res.history],
        "evaluations": res.evaluations, "distinct_replicas": len(cache), "population": population,
        "seed": seed, "cpu_seconds": cpu}), res.best


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
    f = float(fitness(np.array(reps)))
    return Outcome(reps, max(f, p.core_ns(g)) if g is not None else f, secs,
                   {"packs": g is not None, "genome": g, "counts_ns": f})


def pack(p: Problem, reps) -> np.ndarray | None:
    """A genome holding ``reps`` replicas of every layer, or None if they do not fit.

    Largest units first; each replica first-fit from the core after the
    previous replica's first core (round robin), so that replicas spread over
    the cores' ALUs and links where capacity allows; the whole thing
    first-fit from core 0 when that fails.
    """
    order = sorted(range(p.n), key=lambda i: -p.unit_xbs[i])
    g = np.zeros((p.cores, p.slots), dtype=np.int64)
    free = np.full(p.cores, p.per_core, dtype=np.int64)
    start, ok = 0, True
    for li in order:
        for _ in range(int(reps[li])):
            cores = [(start + j) % p.cores for j in range(p.cores)]
            if not _place(p, g, li, int(p.units[li]), cores, free):
                ok = False
                break
            start = (start + 1) % p.cores
        if not ok:
            break
    if ok:
        return g
    g = np.zeros((p.cores, p.slots), dtype=np.int64)
    ok = all(_place(p, g, li, int(p.units[li]) * int(reps[li]), range(p.cores)) for li in order)
    return g if ok else None

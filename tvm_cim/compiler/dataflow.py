"""MIREDO's per-layer dataflow (paper 001): spatial candidates, mappings, baselines, and the optimiser entry point.

The dataflow piece (``Options.dataflow == 'miredo'``) chooses, per layer, a
:class:`~tvm_cim.hardware.loopnest.Mapping` -- spatial unrolling, loop order
and tiling factors, the memory level of every operand tile, double
buffering -- minimising the stall-aware latency of
:mod:`tvm_cim.hardware.loopnest`.  Three methods share the cost model:

* ``miredo``: the MIP of :mod:`tvm_cim.compiler.solvers.dataflow_mip`, one
  per spatial candidate (candidates ranked by a utilisation lower bound),
  among greedy, structured and (on large dense windowed layers,
  :func:`blocked_start`) position-blocked starts on weight-split cores
  (:func:`weight_split_candidates`), and the best double-buffered variant
  of the heuristic mappings of dense layers (:func:`double_buffered_variants`);
* ``ws``: the same MIP with the weight-stationary constraints (every weight
  tile is loaded into the macro once; the loops weights do not depend on run
  innermost);
* ``zigzag``: a ZigZag/LOMA-like heuristic: loop orders of the merged
  factors (all, or a seeded sample), each filled greedily bottom-up (every
  operand's innermost level takes as many inner loops as fit, then the next
  level), single-buffered, the best by the same evaluator;
* ``zigzag-roofline``: the same search choosing by the max-of-levels latency
  (:func:`~tvm_cim.hardware.loopnest.roofline_latency`: the busiest port or
  the MVMs, every transfer overlapped), the model MIREDO attributes to prior
  analytical tools (001, sec. III-B); its mapping is then costed by the
  stall-aware model like every other.

Objectives: ``edp``, the default (:data:`DEFAULT_OBJECTIVE`; an
epsilon-constraint sweep: the least energy under latency bounds
``(1 + eps) L*``, every point evaluated exactly, the smallest energy-delay
product kept) and ``latency`` (the paper's MIP objective; lexicographic:
minimal latency, then the least energy within 0.1 % of it).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
import subprocess
import time
from concurrent.futures import as_completed
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm
from tvm.support.popen_pool import PopenPoolExecutor

from ..common import hardware as loader
from ..common.report import pareto
from ..common.runtime import workers_default
from ..hardware import loopnest as LN
from ..hardware.schema import CIMHardware
from .region import CONV2D, MATMUL, Region
from .solvers import dataflow_mip
from .solvers.factorize import factors_of, residual_bounds

METHODS = ("miredo", "ws", "zigzag", "zigzag-roofline")
TIME_LIMIT_STATUS = "Time limit reached"  # HiGHS's status when the safety net stopped a solve
OBJECTIVES = ("latency", "edp")
STRUCTURED_SPLIT = (12, 4)  # weight-/output-stationary greedy orders among miredo's candidates (outer x inner)
# the structured greedy orders among miredo's candidates (heuristic_starts flags): weight-stationary and
# output-stationary; "wo" (weights once per core, the macro's reduction loops inside the output positions) is
# offered, not the default: on ResNet-18@224 it changes one of the 12 shapes' mappings, layer2.0.conv2 (3x3 s1),
# whose simulated EDP falls to 0.92x (model: miredo 1.07x zigzag's EDP instead of 1.00x), for 1 % more solve CPU
# (75.5 -> 76.3 s at load 10), but MobileNetV2 and VGG-16 are not checked yet
STRUCTURED = ("ws", "os")
BLOCKED_MIN_POSITIONS = 28 * 28  # blocked_start: output positions (P x Q) from which (windowed) / below which (1x1) it runs
BLOCKED_KEEP = 3  # position-blocked greedy orders per spatial candidate, each polished (optimise(blocked=True))
# a blocked point (weight-split unrolling or position-blocked start) is taken, and enters the front, only when the
# model rates it this much better than the best other point: below the model's resolution (about 5 % per layer
# against the simulator) a blocked point is as likely worse in execution (MobileNetV2 features.0.0: model EDP
# 0.9998x, simulated 1.15x); the blocked points that win are 3-72 % better in the model (README)
BLOCKED_MARGIN = 0.01
POLISH_BUDGET = 400  # exact-model evaluations per local search (dataflow.polish)
# optimise: the best double-buffered variant of the heuristic mappings of dense layers (groups 1), polished, is a
# candidate.  Not on depthwise layers: there the model is 8-17 % optimistic on them (MobileNetV2 features.14.conv.1.0
# chose one at 0.834 accuracy, simulated EDP 1.27x; the network's model accuracy fell to 0.941)
DOUBLED_STARTS = True
# optimise on depthwise layers (groups > 1), when on: the best of doubled_search (the levels that may be doubled,
# one after the other) from the two best heuristic mappings, polished, is a candidate (multi-row input tiles
# double-buffered in the input and the global buffer).  MobileNetV2 features.2.conv.1.0 (floor 301,056 cycles):
# model 460,672 -> 303,569 (executed 507,658 before), features.1.conv.0.0 529,780 -> 403,562 (floor 401.4 k).
# On by default since session 14: over the whole network it wins when executed, although the model is 7-15 %
# optimistic on these mappings.  benchmarks/miredo.py --nets mobilenetv2 (the full benchmark, flag off -> on):
# network EDP over zigzag 1.277x -> 1.455x, over ws 1.119x -> 1.275x, latency 11,797 -> 10,458 us, model accuracy
# 0.9553 -> 0.9556, miredo's solve 168 -> 185 s CPU; of 17 depthwise layers whose mapping changes 13 run faster
# (features.2.conv.1.0 507,658 -> 352,011 executed cycles, features.4.conv.1.0 167,983 -> 133,797,
# features.14.conv.1.0 37,980 -> 34,839), features.7.conv.1.0 is slower (42,806 -> 45,825).  Granting the global
# buffer's port in issue order in the simulator (branch fcfs14) does not remove the optimism (README).
DOUBLED_DEPTHWISE = True
DOUBLED_BEAM = 4
# optimise: doubled_search from the chosen mapping itself (the MIP's or a heuristic's), polished, replaces it when
# the model rates it better.  The one-round variants of the heuristic starts (DOUBLED_STARTS) miss mappings that
# need two levels doubled with their cuts moved in: MobileNetV2 features.3.conv.0.0 (a DRAM-bound 1x1 expansion,
# floor 122,736 cycles) ran 183,600 cycles with single-buffered partial sums and runs 130,712 with the global and
# output buffers' partial sums double-buffered (model 130,944).  benchmarks/miredo.py (off -> on): MobileNetV2
# network EDP over zigzag 1.455x -> 1.533x, 13 of 31 shapes changed, model accuracy 0.956 -> 0.950 (doubled 1x1
# mappings sharing the global buffer's port are optimistic in the model, as the depthwise ones); ResNet-18 1.159x
# -> 1.179x.  0.1-0.2 s CPU per shape.
DOUBLED_FINAL = True
# optimise: the chosen mapping (after DOUBLED_FINAL) improved by a local search whose moves take one loop to any
# other position (relocations: its tile grows in one level and shrinks in another in one move).  polish swaps
# adjacent loops and moves one cut by one slot, and stops where three such moves are needed, each worse alone:
# MobileNetV2 features.2.conv.1.0 stopped at an input tile of one output row (model 303,569 cycles, executed
# 352,011) where moving its P7 loop inside the input buffer's cut gives a 7x7 tile (model EDP 0.995x, executed
# 316,635 cycles).  At most RELOCATE_BUDGET exact-model evaluations per layer shape.
RELOCATE_FINAL = True
RELOCATE_BUDGET = 600
DEFAULT_OBJECTIVE = "edp"  # the figure of merit of the issue and of the paper's results (EDP gains)


# ============================================================================ spatial unrolling
def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _axis_options(bounds: dict, axis: LN.Axis, limit: int = 64) -> list[dict]:
    """Ways to unroll the remaining bounds over one axis (products of divisors up to its size), fullest first."""
    dims = [d for d in LN.DIMS if d in axis.loops and bounds[d] > 1]
    opts = []
    for combo in itertools.product(*[_divisors(bounds[d]) for d in dims]):
        p = math.prod(combo)
        if p <= axis.size:
            opts.append({d: f for d, f in zip(dims, combo) if f > 1})
    opts.sort(key=lambda o: -math.prod(o.values()))
    return opts[:limit]


def spatial_candidates(layer: LN.Layer, hier: LN.Hierarchy, top: int = 4) -> list[tuple]:
    """Spatial unrollings ranked by utilisation (macro rows x columns x cores used), best ``top``.

    Returns
    -------
    list
        ``Mapping.spatial`` tuples.
    """
    out = []
    axes = list(reversed(hier.axes))  # the macro's axes first, then the cores
    def rec(i, bounds, chosen):
        if i == len(axes):
            out.append(dict(chosen))
            return
        for o in _axis_options(bounds, axes[i], limit=6):
            nb = dict(bounds)
            for d, f in o.items():
                nb[d] //= f
            chosen[axes[i].name] = o
            rec(i + 1, nb, chosen)
    rec(0, dict(layer.bounds), {})
    def util(c):
        return math.prod(math.prod(c[a.name].values()) / a.size for a in hier.axes)
    seen, ranked = set(), []
    for c in sorted(out, key=lambda c: -util(c)):
        sp = tuple((a.name, tuple(sorted(c[a.name].items()))) for a in hier.axes)
        if sp not in seen:
            seen.add(sp)
            ranked.append(sp)
    return ranked[:top]


def weight_split_candidates(layer: LN.Layer, hier: LN.Hierarchy, top: int = 1) -> list[tuple]:
    """The best-utilised spatial unrollings whose cores take only loops the weights depend on (``K``, ``G``).

    Every core then holds its own slice of the weights, so each weight enters
    one macro only, and a weight tile loaded into the macro can serve a block
    of output positions before the next is loaded.  :func:`spatial_candidates`
    rarely ranks them among its first few (the cores' options are cut at six
    per axis, in dimension order, and position splits tie with them on
    utilisation); ``miredo`` adds them on the layers :func:`blocked_start`
    selects.  Ranked like :func:`spatial_candidates`.
    """
    core = hier.axes[0]
    rel = LN.Axis(core.name, core.order, core.size, frozenset(d for d in core.loops if d in LN.RELEVANT["W"]))
    return spatial_candidates(layer, dataclasses.replace(hier, axes=(rel,) + hier.axes[1:]), top=top)


def edp_floor(layer: LN.Layer, hier: LN.Hierarchy, spatial: tuple) -> dict:
    """An analytic lower bound of the model's latency, energy and EDP over every mapping of one spatial unrolling.

    Independent of the MIP: latency is at least the MVM steps times one MVM
    and every operand's bits once over the outermost level's port; energy is
    at least the MVMs, every operand once out of (inputs, weights) or into
    (outputs) the outermost level and once into the next (not bypassable)
    level, the weights (and the inputs, unless a stride skips some) once out
    of it, and leakage over that latency.  Two terms every mapping pays on a
    weight-streaming macro:

    * every core's macro receives its share of the weights (all of them
      unless the cores split a dimension the weights depend on) at least
      once over the macro's port, and a single-buffered macro does not
      compute while it is refilled (:func:`tvm_cim.hardware.loopnest._exposed`:
      its refills add to their iteration), so that fill adds to the MVM steps
      (with double buffering, the latency is at least the larger of the two);
      every weight is written into a macro once;
    * every MVM reads its inputs from, and writes its partial sums to, some
      level of their chains (at least the cheapest level's energy per bit).

    The terms are those :func:`tvm_cim.hardware.loopnest.evaluate` charges at
    least once for any loop order, tiling, level choice and buffering.

    Returns
    -------
    dict
        ``cycles``, ``energy_pj``, ``edp`` (pJ x ns).
    """
    m = LN.Mapping(spatial, (), ())
    par = math.prod(f for _, fs in spatial for _, f in fs)
    steps = layer.macs / par
    active = math.prod(m.spatial_of(hier.axes[0].name).values())
    # outputs leave at least once with their reduction done (final precision, :func:`LN.out_bits`)
    bits = {o: layer.elems(o, layer.bounds) * (LN.out_bits(hier, False) if o == "O" else hier.bits[o]) for o in "IWO"}
    # inputs: only the elements some window reads (a stride larger than the window skips the others, and a
    # mapping whose input tiles follow the output rows moves only those; the bounding box overcounts them)
    b = layer.bounds
    rows, cols = ({p * s + r * d for p in range(b[pd]) for r in range(b[rd])}
                  for pd, rd, s, d in (("P", "R", layer.stride[0], layer.dilation[0]),
                                       ("Q", "S", layer.stride[1], layer.dilation[1])))
    bits["I"] = min(bits["I"], b["N"] * b["G"] * b["C"] * len(rows) * len(cols) * hier.bits["I"])
    top = hier.levels[0]
    nxt = [lv for lv in hier.levels[1:] if not lv.bypass and set("IWO") <= lv.operands]
    macro = hier.levels_of("W")[-1]
    core = hier.axes[0].name
    split = math.prod(f for d, f in m.spatial_of(core).items() if d in LN.RELEVANT["W"])
    fill = (bits["W"] / split if macro.per_core else bits["W"]) / macro.bandwidth_bits
    compute = steps * hier.mvm_cycles
    overlapped = macro.double_buffer or hier.weight_double_buffer
    cycles = max(max(compute, fill) if overlapped else compute + fill, sum(bits.values()) / top.bandwidth_bits)
    e = steps * active * hier.mvm_energy_pj + sum(bits.values()) * top.read_pj  # the model charges a parent read
    e += bits["W"] * macro.write_pj
    t = {d: 1 for d in LN.DIMS}  # one MVM's inputs and partial sums (the spatial axes inside a core)
    for ax in hier.axes[1:]:
        for d, f in m.spatial_of(ax.name).items():
            t[d] *= f
    mvms = steps * active
    e += mvms * layer.elems("I", t) * hier.bits["I"] * min(lv.read_pj for lv in hier.levels_of("I"))
    e += (mvms * layer.elems("O", t) * LN.drain_bits(layer, hier, spatial)
          * min(lv.write_pj for lv in hier.levels_of("O")))
    if nxt:
        lv = nxt[0]
        e += sum(bits.values()) * lv.write_pj + bits["W"] * lv.read_pj
        dense = all(s <= (k - 1) * d + 1 for s, k, d in zip(layer.stride, (layer.bounds["R"], layer.bounds["S"]),
                                                             layer.dilation))
        e += bits["I"] * lv.read_pj if dense else 0.0
    e += hier.leakage_mw * cycles * hier.cycle_ns
    return {"cycles": cycles, "energy_pj": e, "edp": e * cycles * hier.cycle_ns}


def network_edp_floor(layers: list, hier: LN.Hierarchy, spatial_top: int = 6, weight_split: bool = True) -> dict:
    """A lower bound of the network EDP of any mapping of every layer, from :func:`edp_floor`.

    Network EDP is (sum over layers of latency) x (sum of energy), as
    ``benchmarks/miredo.py`` defines it.  Per layer and spatial candidate (the
    ``spatial_top`` of :func:`spatial_candidates`, which zigzag and miredo
    search, and, with ``weight_split``, :func:`weight_split_candidates`,
    which miredo adds) the
    floor's latency and energy bound every mapping of that candidate, so a
    choice of one mapping per layer has a network EDP of at least
    ``(sum of the chosen candidates' latency floors) x (sum of their energy
    floors)``.  ``edp`` is the least of that over every choice of one
    candidate per layer, exact over the discrete choices: a dynamic programme
    over the layers keeps the Pareto front of (latency sum, energy sum), on
    which the least product lies (the product grows with either sum).
    ``edp_loose`` is the earlier bound, (sum of the least latency floors) x
    (sum of the least energy floors), which may take a layer's latency and
    energy from different candidates.

    Returns
    -------
    dict
        ``pairs`` (per layer, the ``(cycles, energy_pj)`` floor of every
        candidate), ``cycles`` and ``energy_pj`` (per layer, the least over
        its candidates), ``latency_ns`` and ``energy_pj_total`` (the sums of
        the optimal choice), ``edp`` and ``edp_loose`` (pJ x ns),
        ``front_size`` (the largest Pareto front kept).
    """
    pairs = []
    for layer in layers:
        sps = spatial_candidates(layer, hier, top=spatial_top)
        sps += [sp for sp in weight_split_candidates(layer, hier) if weight_split and sp not in sps]
        fl = [edp_floor(layer, hier, sp) for sp in sps]
        pairs.append(sorted({(f["cycles"], f["energy_pj"]) for f in fl}))
    front, widest = [(0.0, 0.0)], 1
    for ps in pairs:
        front = pareto_front([(a + c, b + e) for a, b in front for c, e in ps])
        widest = max(widest, len(front))
    cyc, en = min(front, key=lambda x: x[0] * x[1])
    least_c = [min(c for c, _ in ps) for ps in pairs]
    least_e = [min(e for _, e in ps) for ps in pairs]
    return {"pairs": pairs, "cycles": least_c, "energy_pj": least_e, "latency_ns": cyc * hier.cycle_ns,
            "energy_pj_total": en, "edp": cyc * hier.cycle_ns * en,
            "edp_loose": sum(least_c) * hier.cycle_ns * sum(least_e), "front_size": widest}


def choose_network(fronts: list, counts: list | None = None) -> list[int]:
    """One point per layer minimising the network EDP, (sum of latencies) x (sum of energies).

    Parameters
    ----------
    fronts : list of list of (float, float)
        Per layer (or distinct shape), ``(cycles, energy_pj)`` of its choices.
    counts : list of int, optional
        How often each shape occurs in the network (its choice counts that often).

    Returns
    -------
    list of int
        The index chosen in each front.  Exact over the discrete choices: a
        dynamic programme over the layers keeps the Pareto front of the
        partial sums (on which the least product lies), with the choices
        that reach each point.
    """
    counts = counts or [1] * len(fronts)
    states = {(0.0, 0.0): ()}
    for pts, n in zip(fronts, counts):
        nxt: dict = {}
        for (a, b), ch in states.items():
            for j, (c, e) in enumerate(pts):
                nxt.setdefault((a + n * c, b + n * e), ch + (j,))
        states = {p: nxt[p] for p in pareto_front(list(nxt))}
    return list(states[min(states, key=lambda p: p[0] * p[1])])


def pareto_front(points: list) -> list:
    """The points no other point is below in both coordinates (ties: one kept), sorted by the first
    (:func:`tvm_cim.common.report.pareto` on tuples)."""
    pts = sorted(set(points))
    return [pts[i] for i in pareto(np.asarray(pts, dtype=float))] if pts else []


# ============================================================================ enumeration (tests, heuristic)
def level_choices(hier: LN.Hierarchy, operand: str, n_slots: int):
    """Every assignment of cuts to the operand's inner levels (monotone; bypassable levels may be skipped)."""
    lvs = hier.levels_of(operand)[1:]
    opts = [([None] if lv.bypass else []) + list(range(n_slots + 1)) for lv in lvs]
    for combo in itertools.product(*opts):
        cuts = [c for c in combo if c is not None]
        if all(a <= b for a, b in zip(cuts, cuts[1:])):
            yield tuple((operand, lv.name, c) for lv, c in zip(lvs, combo) if c is not None)


def double_choices(hier: LN.Hierarchy, cuts: tuple):
    """Every set of ``(operand, level)`` pairs that may run double-buffered."""
    can = [(o, lv) for o, lv, _ in cuts
           if hier.level(lv).double_buffer or (o == "W" and hier.weight_double_buffer and lv == hier.levels_of("W")[-1].name)]
    for r in range(len(can) + 1):
        for sub in itertools.combinations(can, r):
            yield frozenset(sub)


def exhaustive(layer: LN.Layer, hier: LN.Hierarchy, spatial: tuple, flexible: bool = True, key=None):
    """The best mapping of a (tiny) layer by enumerating every loop order, level cut and buffering choice.

    Returns
    -------
    (Mapping, Cost, int)
        Best mapping, its cost and the number of valid mappings seen.
    """
    key = key or (lambda c: c.cycles)
    facs = factors_of(residual_bounds(layer, spatial), flexible)
    best, n_valid = None, 0
    orders = set(itertools.permutations(facs))
    for loops in orders:
        per = [list(level_choices(hier, o, len(loops))) for o in "IWO"]
        for ci, cw, co in itertools.product(*per):
            cuts = ci + cw + co
            for dbl in double_choices(hier, cuts):
                m = LN.Mapping(spatial, tuple(loops), cuts, dbl)
                if LN.check(layer, hier, m):
                    continue
                n_valid += 1
                c = LN.evaluate(layer, hier, m)
                if best is None or key(c) < key(best[1]) - 1e-9:
                    best = (m, c)
    if best is None:
        raise ValueError(f"no valid mapping of {layer.name}")
    return best[0], best[1], n_valid


def random_mapping(layer: LN.Layer, hier: LN.Hierarchy, rng: random.Random, spatial: tuple | None = None,
                   tries: int = 200) -> LN.Mapping:
    """A random valid mapping (seeded ``rng``): tests and the simulator comparison."""
    sps = [spatial] if spatial else spatial_candidates(layer, hier, top=8)
    for _ in range(tries):
        sp = rng.choice(sps)
        loops = factors_of(residual_bounds(layer, sp), flexible=rng.random() < 0.5)
        rng.shuffle(loops)
        cuts = []
        for o in "IWO":
            cuts += list(rng.choice(list(level_choices(hier, o, len(loops)))))
        dbl = rng.choice(list(double_choices(hier, tuple(cuts))))
        m = LN.Mapping(sp, tuple(loops), tuple(cuts), dbl)
        if not LN.check(layer, hier, m):
            return m
    raise ValueError(f"no random valid mapping of {layer.name} in {tries} tries")


# ============================================================================ the ZigZag-like heuristic
def greedy_fill(layer: LN.Layer, hier: LN.Hierarchy, spatial: tuple, loops: tuple) -> LN.Mapping | None:
    """Bottom-up level fill of one loop order: each operand's innermost level takes the most inner loops
    that fit (shared levels split between the operands in turn), then the next level out.  When an
    outer level cannot hold what the inner ones took, the inner ones are filled to a half, a quarter ...
    of their capacity."""
    for k in range(6):
        m = _fill(layer, hier, spatial, loops, 0.5 ** k)
        if m is not None:
            return m
    return None


def _fill(layer: LN.Layer, hier: LN.Hierarchy, spatial: tuple, loops: tuple, inner_share: float) -> LN.Mapping | None:
    outer_shared = min((lv.order for lv in hier.levels[1:] if not lv.per_core), default=0)
    cuts: dict = {}
    n = len(loops)
    tiles = LN.Mapping(spatial, loops, ())  # the tile of a cut depends on the loops and the unrolling only

    def bits(oo, lv, c):  # LN.tile_bits of operand oo at level lv cut at c
        return layer.elems(oo, LN.tile_extents(hier, tiles, c, lv.per_core)) * hier.bits[oo]

    # innermost levels first
    for lv in sorted(hier.levels[1:], key=lambda v: -v.order):
        ops = [o for o in "WIO" if o in lv.operands]
        for o in ops:
            inner = [cuts[(o, x.name)] for x in hier.levels_of(o) if x.order > lv.order and (o, x.name) in cuts]
            lo = min(inner) if inner else n
            chosen = None
            for c in range(0, lo + 1):  # the largest tile (smallest cut) that fits with what is already placed
                trial = dict(cuts)
                trial[(o, lv.name)] = c
                used = sum(bits(oo, lv, trial[(oo, lv.name)]) for oo in "IWO" if (oo, lv.name) in trial)
                share = lv.capacity_bits if o == ops[-1] else lv.capacity_bits * (ops.index(o) + 1) / len(ops)
                if lv.order > outer_shared and o != "W":
                    share *= inner_share
                if used <= share:
                    chosen = c
                    break
            if chosen is None:
                if not lv.bypass:
                    return None
                continue
            cuts[(o, lv.name)] = chosen
    m = LN.Mapping(spatial, loops, tuple((a, b, x) for (a, b), x in sorted(cuts.items())))
    return None if LN.check(layer, hier, m) else m


#: What chooses among the zigzag baselines' filled loop orders: the stall-aware model (``zigzag``) or the
#: max-of-levels latency (``zigzag-roofline``), :func:`zigzag`'s ``model``.
ZIGZAG_MODELS = ("stall", "roofline")
#: The zigzag baselines among :data:`METHODS`, each with the model that chooses its mapping.
ZIGZAG_METHODS = {"zigzag": "stall", "zigzag-roofline": "roofline"}
#: Spatial unrollings the zigzag baselines search (the best-utilisation ones, :func:`spatial_candidates`): six, as
#: miredo's ranking offers; 1 is ZigZag's own set-up, where the spatial mapping is an input of the search.
ZIGZAG_SPATIAL = 6


def zigzag(layer: LN.Layer, hier: LN.Hierarchy, objective: str = "latency", seed: int = 0,
           max_orders: int = 2000, spatial_top: int = ZIGZAG_SPATIAL, model: str = "stall"):
    """ZigZag-like baseline: loop orders (all, or ``max_orders`` seeded samples) x greedy level fill.

    Parameters
    ----------
    layer, hier, objective, seed, max_orders, spatial_top
        As for :func:`optimise` (``spatial_top``: spatial candidates searched).
    model : {'stall', 'roofline'}
        What chooses among the filled orders: the stall-aware model
        (:func:`tvm_cim.hardware.loopnest.evaluate`, the ``zigzag`` baseline) or
        the max-of-levels latency (:func:`tvm_cim.hardware.loopnest.evaluate_roofline`,
        the ``zigzag-roofline`` baseline; with ``objective='latency'`` its ties, frequent where one
        port bounds many orders alike, go to the least energy).

    Returns
    -------
    (Mapping, Cost)
        The chosen mapping and its stall-aware cost (whatever chose it).
    """
    if model not in ZIGZAG_MODELS:
        raise ValueError(f"unknown zigzag model {model!r}; choose one of {', '.join(ZIGZAG_MODELS)}")
    rng = random.Random(seed)
    judge = LN.evaluate if model == "stall" else LN.evaluate_roofline
    key = (lambda c: c.cycles) if objective == "latency" else (lambda c: c.edp)
    if model == "roofline" and objective == "latency":
        key = lambda c: (c.cycles, c.energy_pj)  # noqa: E731
    best = None
    for sp in spatial_candidates(layer, hier, top=spatial_top):
        facs = factors_of(residual_bounds(layer, sp), flexible=True)
        orders = _orders(facs, max_orders, rng)
        for loops in orders:
            m = greedy_fill(layer, hier, sp, loops)
            if m is None:
                continue
            c = judge(layer, hier, m)
            if best is None or key(c) < key(best[1]):
                best = (m, c)
    if best is None:
        raise ValueError(f"the heuristic found no valid mapping of {layer.name}")
    return best[0], (best[1] if model == "stall" else LN.evaluate(layer, hier, best[0]))


def heuristic_starts(layer: LN.Layer, hier: LN.Hierarchy, spatial: tuple, objective: str = "latency",
                     ws: bool = False, rng: random.Random | None = None, max_orders: int = 300,
                     keep: int = 3, os: bool = False, split: tuple = (40, 8), wo: bool = False,
                     blk: bool = False, evaluate=LN.evaluate) -> list:
    """The best greedy-filled loop orders of a spatial unrolling (the MIP's first incumbents), best first.

    With ``ws``, only weight-stationary orders (every loop the weights do not
    depend on inside the macro's tile, after those they depend on); with
    ``os``, only output-stationary orders (the reduction loops innermost, so a
    partial sum stays in the innermost output level it fits in until it is final); with ``wo``,
    weight-stationary orders whose innermost weight loops that fit in the macro
    move inside the loops the weights do not depend on (every weight still enters
    each core's macro once, and a macro tile of several compartments serves
    every output position before the next is loaded; the partial sums wait in
    the output levels).  ``split``: orders of the outer and the inner group
    sampled for ``ws``, ``os`` and ``wo`` (their product is filled); with ``blk``,
    position-blocked orders: the loops the weights do not depend on split into
    an outer group (blocks of output positions) and an inner one, with the
    loops the weights depend on between them, so every weight tile in the
    macro serves a whole block of positions (every split point of each
    sampled inner order; ``split`` as for ``ws``).  ``evaluate``: the exact model
    (:func:`tvm_cim.hardware.loopnest.evaluate`, or an :class:`Evaluations` memo of it).
    """
    rng = rng or random.Random(0)
    key = (lambda c: c.cycles) if objective == "latency" else (lambda c: c.edp)
    facs = factors_of(residual_bounds(layer, spatial), flexible=True)
    macro = hier.levels_of("W")[-1].name
    if ws:
        rel = [f for f in facs if f[0] in LN.RELEVANT["W"]]
        irr = [f for f in facs if f[0] not in LN.RELEVANT["W"]]
        orders = [a + b for a in _orders(rel, split[0], rng) for b in _orders(irr, split[1], rng)]
    elif wo:
        rel = [f for f in facs if f[0] in LN.RELEVANT["W"]]
        irr = [f for f in facs if f[0] not in LN.RELEVANT["W"]]
        orders = []
        for a in _orders(rel, split[0], rng):
            k = _macro_suffix(layer, hier, spatial, a)
            orders += [a[:len(a) - k] + b + a[len(a) - k:] for b in _orders(irr, split[1], rng)]
    elif blk:
        rel = [f for f in facs if f[0] in LN.RELEVANT["W"]]
        irr = [f for f in facs if f[0] not in LN.RELEVANT["W"]]
        orders = [b[:k] + a + b[k:] for a in _orders(rel, split[0], rng) for b in _orders(irr, split[1], rng)
                  for k in range(1, len(b))]
    elif os:
        red = [f for f in facs if f[0] in LN.REDUCTION]
        rest = [f for f in facs if f[0] not in LN.REDUCTION]
        orders = [a + b for a in _orders(rest, split[0], rng) for b in _orders(red, split[1], rng)]
    else:
        orders = _orders(facs, max_orders, rng)
    found = []
    for loops in orders:
        m = greedy_fill(layer, hier, spatial, tuple(loops))
        if m is None:
            continue
        if ws or wo:
            first_irr = next((i for i, (d, _) in enumerate(loops) if d not in LN.RELEVANT["W"]), len(loops))
            cut_w = min(m.cut("W", macro), first_irr)  # every weight tile enters the macro once
            cuts = tuple((o, lv, min(c, cut_w) if o == "W" else c) for o, lv, c in m.cuts)
            m = LN.Mapping(m.spatial, m.loops, cuts, m.double)
            if LN.check(layer, hier, m):
                continue
        found.append((key(evaluate(layer, hier, m)), len(found), m))
    found.sort(key=lambda x: x[:2])
    return [m for _, _, m in found[:keep]]


def _macro_suffix(layer: LN.Layer, hier: LN.Hierarchy, spatial: tuple, loops: tuple) -> int:
    """How many innermost loops of ``loops`` the weight tile of one macro can hold (with the spatial tile)."""
    macro = hier.levels_of("W")[-1]
    for k in range(len(loops), 0, -1):
        m = LN.Mapping(spatial, tuple(loops), (("W", macro.name, len(loops) - k),))
        if LN.tile_bits(layer, hier, m, "W", macro) <= macro.capacity_bits:
            return k
    return 0


def _can_double(hier: LN.Hierarchy, operand: str, level: str) -> bool:
    lv = hier.level(level)
    return lv.double_buffer or (operand == "W" and hier.weight_double_buffer and level == hier.levels_of("W")[-1].name)


def double_buffered_variants(layer: LN.Layer, hier: LN.Hierarchy, m: LN.Mapping) -> list:
    """Mappings with one more level double-buffered, its tile shrunk until two fit.

    For every ``(operand, level)`` of ``m`` that may run double-buffered and
    does not yet, every cut from its own inward (the operand's inner levels
    moved in with it, so their cuts stay below), double-buffered; only the
    valid ones (capacities with the doubled tile).  Greedy fills never double a
    level and one-move local search (:func:`neighbours`) cannot reach these
    mappings: doubling a large tile overflows the level, and shrinking it by
    one loop at a time is not better until it is doubled.  A double-buffered
    output tile of a few MVM steps in the global buffer, written back while
    the next ones are computed, keeps DRAM busy on DRAM-bound 1x1 layers
    (MobileNetV2 features.2.conv.0.0, see the README).
    """
    out = []
    n = len(m.loops)
    for o, lv, c in m.cuts:
        if (o, lv) in m.double or not _can_double(hier, o, lv):
            continue
        order = hier.level(lv).order
        for c2 in range(c, n + 1):
            cuts = tuple((oo, ll, c2 if (oo, ll) == (o, lv) else max(cc, c2) if oo == o and hier.level(ll).order > order
                          else cc) for oo, ll, cc in m.cuts)
            mm = LN.Mapping(m.spatial, m.loops, cuts, m.double | {(o, lv)})
            if not LN.check(layer, hier, mm):
                out.append(mm)
    return out


def doubled_search(layer: LN.Layer, hier: LN.Hierarchy, m: LN.Mapping, key, beam: int = DOUBLED_BEAM,
                   evaluate=LN.evaluate) -> LN.Mapping:
    """The best mapping, by ``key`` of the exact model, of rounds of :func:`double_buffered_variants`.

    Round one takes the variants of ``m``, every next round the variants of
    the ``beam`` best of the round before, until no level is left to double
    (at most one round per cut of ``m``).  One round doubles one level; a
    mapping whose inputs and outputs are double-buffered at both the
    per-core and the global buffer (a multi-row input tile copied while
    the previous one is computed, MobileNetV2's depthwise layers) is
    several rounds away from a greedy fill, and the intermediate mappings
    need not be better than ``m``.  Returns ``m`` when no variant is better.
    """
    best, best_k = m, key(evaluate(layer, hier, m))
    front = [m]
    for _ in range(len(m.cuts)):
        found = {}
        for x in front:
            for v in double_buffered_variants(layer, hier, x):
                if v not in found:
                    found[v] = key(evaluate(layer, hier, v))
        if not found:
            break
        front = sorted(found, key=lambda v: (found[v], v.text()))[:beam]
        if found[front[0]] < best_k:
            best, best_k = front[0], found[front[0]]
    return best


def neighbours(m: LN.Mapping, hier: LN.Hierarchy) -> list:
    """Mappings one move from ``m``: two adjacent loops swapped, one cut moved by one slot, one level's
    double buffering toggled (not checked for validity)."""
    out = []
    n = len(m.loops)
    for i in range(n - 1):
        if m.loops[i] != m.loops[i + 1]:
            loops = m.loops[:i] + (m.loops[i + 1], m.loops[i]) + m.loops[i + 2:]
            out.append(LN.Mapping(m.spatial, loops, m.cuts, m.double))
    for j, (o, lv, c) in enumerate(m.cuts):
        for c2 in (c - 1, c + 1):
            if 0 <= c2 <= n:
                cuts = m.cuts[:j] + ((o, lv, c2),) + m.cuts[j + 1:]
                out.append(LN.Mapping(m.spatial, m.loops, cuts, m.double))
        if _can_double(hier, o, lv):
            out.append(LN.Mapping(m.spatial, m.loops, m.cuts, m.double ^ {(o, lv)}))
    return out


def relocations(m: LN.Mapping) -> list:
    """Mappings one relocation from ``m``: one loop taken out and put back at another position, on either side
    of the level cuts there (the other loops keep their order and every cut stays between the same two of them;
    not checked for validity).  An adjacent swap of :func:`neighbours` with no cut between the two loops is a
    relocation by one position.
    (Cuts put at any position, their buffering toggled, were tried as moves too: on MobileNetV2 they chose
    1x1 projections whose doubled partial sums and inputs share the global buffer's port, on which the model is
    up to 29 % optimistic: features.2.conv.2 ran 81,336 cycles against the model's 58,116, and the network's
    model accuracy fell below 0.95.)"""
    out, seen = [], {m}
    n = len(m.loops)
    for i in range(n):
        rest = m.loops[:i] + m.loops[i + 1:]
        base = [(o, lv, c - 1 if c > i else c) for o, lv, c in m.cuts]  # the cuts without loop i
        for j in range(n):
            loops = rest[:j] + (m.loops[i],) + rest[j:]
            at_j = [k for k, (_, _, c) in enumerate(base) if c == j]
            # the loop goes below every cut at j, or above the first `above` of them (in the mapping's order of
            # cuts; the level chains' order is left to LN.check)
            for above in range(len(at_j) + 1):
                keep = set(at_j[:above])
                cuts = tuple((o, lv, c + 1 if c > j or (c == j and k not in keep) else c)
                             for k, (o, lv, c) in enumerate(base))
                cand = LN.Mapping(m.spatial, loops, cuts, m.double)
                if cand not in seen:
                    seen.add(cand)
                    out.append(cand)
    return out


def relocate(layer: LN.Layer, hier: LN.Hierarchy, m: LN.Mapping, key, budget: int = RELOCATE_BUDGET,
             evaluate=LN.evaluate) -> tuple:
    """Steepest-descent local search in the exact model over :func:`relocations`, at most ``budget``
    evaluations; deterministic.  Returns ``(Mapping, Cost)``, never worse than ``m`` under ``key``."""
    return _descent(layer, hier, m, key, budget, evaluate, relocations)


def polish(layer: LN.Layer, hier: LN.Hierarchy, m: LN.Mapping, key, budget: int = 400,
           evaluate=LN.evaluate) -> tuple:
    """Steepest-descent local search in the exact model (:func:`neighbours`), at most ``budget`` evaluations.

    Deterministic (a work budget, not a clock).  Returns ``(Mapping, Cost)``,
    never worse than ``m`` under ``key``.  ``evaluate``: the exact model (or an
    :class:`Evaluations` memo of it; the same result).
    """
    return _descent(layer, hier, m, key, budget, evaluate, lambda x: neighbours(x, hier))


def _descent(layer: LN.Layer, hier: LN.Hierarchy, m: LN.Mapping, key, budget: int, evaluate, moves) -> tuple:
    """Steepest descent from ``m`` over ``moves(mapping)`` (valid ones, each mapping evaluated at most once),
    at most ``budget`` evaluations: ``(Mapping, Cost)``."""
    best = (m, evaluate(layer, hier, m))
    seen = {m}
    used = 0
    while used < budget:
        step = None
        for nb in moves(best[0]):
            if nb in seen or used >= budget:
                continue
            seen.add(nb)
            if LN.check(layer, hier, nb):
                continue
            used += 1
            c = evaluate(layer, hier, nb)
            if key(c) < key((step or best)[1]) * (1 - 1e-9):
                step = (nb, c)
        if step is None:
            break
        best = step
    return best


class Evaluations:
    """:func:`tvm_cim.hardware.loopnest.evaluate` of one layer on one chip, each mapping computed once.

    The model is a pure function of ``(layer, hier, mapping)``, so the memo gives
    exactly what evaluating again gives; one :func:`optimise` call meets the same
    mapping several times (ranking, polishing, the final choice).  Called with
    another layer or chip, it raises.
    """

    def __init__(self, layer: LN.Layer, hier: LN.Hierarchy):
        self.layer, self.hier = layer, hier
        self.memo: dict = {}

    def __call__(self, layer: LN.Layer, hier: LN.Hierarchy, m: LN.Mapping) -> LN.Cost:
        if layer is not self.layer or hier is not self.hier:
            raise ValueError("Evaluations: a memo of one layer on one chip")
        c = self.memo.get(m)
        if c is None:
            c = self.memo[m] = LN.evaluate(layer, hier, m)
        return c


def _orders(facs: list, max_orders: int, rng: random.Random) -> list[tuple]:
    """Distinct loop orders of a factor multiset: all when few, else a seeded sample of ``max_orders``."""
    distinct = math.factorial(len(facs))
    for f in set(facs):
        distinct //= math.factorial(facs.count(f))
    if distinct <= max_orders:
        return sorted(_multiset_permutations(sorted(facs)))
    out: set = set()
    tries = 0
    while len(out) < max_orders and tries < 50 * max_orders:
        p = list(facs)
        rng.shuffle(p)
        out.add(tuple(p))
        tries += 1
    return sorted(out)


def _multiset_permutations(items: list):
    """Every distinct permutation of a sorted list with repeats."""
    if not items:
        yield ()
        return
    for i, x in enumerate(items):
        if i and items[i - 1] == x:
            continue
        for rest in _multiset_permutations(items[:i] + items[i + 1:]):
            yield (x,) + rest


# ============================================================================ the optimiser
@dataclass(frozen=True)
class Result:
    """The dataflow chosen for a layer.

    Attributes
    ----------
    mapping : Mapping
    cost : Cost
        The analytical model's latency and energy.
    seconds : float
        Wall-clock optimisation time.
    method, objective : str
    status : str
        Solver status of the chosen point (``heuristic`` for the baseline).
    mip_cycles : float
        Latency the MIP itself computed (nan for the heuristic).
    time_limit_hit : bool
        Some solve stopped at the wall-clock safety net instead of its node
        limit (the mapping may then depend on the machine's load).
    cpu_seconds : float
    front : tuple
        ``(Mapping, Cost)`` of the mappings the search evaluated that no
        other beats in both latency and energy, fastest first (``miredo`` and
        ``ws``; empty for the heuristic): the choices of
        :func:`choose_network`.
    """

    mapping: LN.Mapping
    cost: LN.Cost
    seconds: float
    method: str
    objective: str
    status: str
    mip_cycles: float = math.nan
    time_limit_hit: bool = False
    cpu_seconds: float = math.nan
    front: tuple = ()


_WS: dict = {}  # the ws baseline's result per (chip, layer shape, settings): miredo's candidate and the baseline


def warm_start(layer: LN.Layer) -> bool:
    """Whether ``optimise(..., warm=None)`` (the default) starts the MIP of ``layer`` from the best heuristic mapping.

    On windowed layers (``R x S > 1``) the LP relaxation is loose (ResNet-18@224
    layer3.0.conv1: root bound 0.26 of the start's latency), and a cold start
    under the start's latency as an upper bound finds no feasible mapping
    within 20 nodes on ResNet-18's eight 3x3 and 7x7 shapes; warm, HiGHS
    improves on the start in less time (conv1 simulated EDP 0.80x,
    layer3.0.conv1 0.94x).  On 1x1 layers and matrix products the cold search
    (its restart and RINS) finds mappings the warm one misses within the same
    nodes (layer4.0.downsample.0: model EDP 1.26x worse warm).  Depthwise
    layers (more than one group) stay cold too: warm, two of MobileNetV2's got
    worse (features.4.conv.1.0 by 13.8 %, features.7.conv.1.0 by 21.5 %
    simulated EDP).  The README (``benchmarks/miredo.py``) gives the network
    figures against the cold start (network EDP = total simulated latency x
    total energy, every layer counted).
    """
    return layer.bounds["R"] * layer.bounds["S"] > 1 and layer.bounds["G"] == 1


def blocked_start(layer: LN.Layer) -> bool:
    """Whether ``optimise(..., blocked=None)`` (the default) adds position-blocked starts on weight-split cores.

    On dense windowed layers (``R x S > 1``, one group) with a macro written
    far slower than it computes (the ``miredo`` preset: one 8-bit weight per
    cycle, one MVM of 512 weights in 8 cycles) every weight must serve many
    output positions per load; the unrollings whose cores split the output
    channels (:func:`weight_split_candidates`) with position-blocked loop
    orders (``heuristic_starts(blk=True)``) do that (VGG-16 features.12: model
    EDP 1.22e16 against 2.10e16 without).  Only on layers with at least
    :data:`BLOCKED_MIN_POSITIONS` output positions: on ResNet-18's and
    VGG-16's 14x14 and 7x7 layers it found nothing better (one block holds
    every position already) and cost about 1 s CPU per shape.  Also on dense
    1x1 layers with fewer output positions: few positions per weight make
    them weight-fill bound, and the six ranked unrollings cut the cores'
    options before they reach the output channels (MobileNetV2
    features.15.conv.2, 960 -> 160 channels at 7x7: simulated EDP 0.281x,
    the position-split cores reload every weight into every core;
    features.8.conv.2 0.89x).  On MobileNetV2's 1x1 layers with at least
    28x28 outputs it found nothing better (features.1.conv.1 1.000x).  The
    README gives the per-shape and network figures.
    """
    b = layer.bounds
    if b["G"] != 1:
        return False
    if b["R"] * b["S"] > 1:
        return b["P"] * b["Q"] >= BLOCKED_MIN_POSITIONS
    return b["P"] * b["Q"] < BLOCKED_MIN_POSITIONS


def _ws_key(layer: LN.Layer, hier: LN.Hierarchy, settings: dict) -> tuple:
    return (repr(hier), tuple(sorted(layer.bounds.items())), layer.stride, layer.dilation,
            tuple(sorted(settings.items())))


def optimise(layer: LN.Layer, hier: LN.Hierarchy, method: str = "miredo", objective: str = DEFAULT_OBJECTIVE,
             node_limit: int = dataflow_mip.NODE_LIMIT, spatial_top: int = 2, starts: int = 3,
             max_orders: int = 500, seed: int = 0, time_limit: float = dataflow_mip.SAFETY_TIME_LIMIT,
             fix_starts: bool = False, polish_budget: int = POLISH_BUDGET, warm: bool | None = None,
             energy_stage: bool = False, ws_point: bool = False, blocked: bool | None = None,
             zigzag_spatial: int = ZIGZAG_SPATIAL) -> Result:
    """The dataflow of one layer.

    Parameters
    ----------
    layer : Layer
    hier : Hierarchy
    method : {'miredo', 'ws', 'zigzag', 'zigzag-roofline'}
    objective : {'latency', 'edp'}
    node_limit : int
        Branch-and-bound nodes per MIP solve (deterministic: the same mapping on any machine).
    time_limit : float
        Seconds per MIP solve, a safety net only (``Result.status`` says when it was hit).
    spatial_top : int
        Spatial candidates tried (best utilisation first).
    starts : int
        Greedy loop orders (the best by the objective) in the pool; the full
        MIP starts from the best of them.
    max_orders : int
        Loop orders the heuristic (and the MIP's warm start) fills per spatial candidate.
    seed : int
    fix_starts : bool
        Also solve the levels and buffering of every start with its loop order
        fixed (one MIP each) before the full MIP.  Off by default: on
        ResNet-18@224 it cost a third of the solve time and the network's EDP
        was better without it (benchmarks/miredo.py, see the README).

    polish_budget : int
        Exact-model evaluations of the local search (:func:`polish`) run on
        the heuristic mappings and on the MIP's result (``miredo`` only; 0: off).
    warm : bool or None
        Give the MIP the best heuristic mapping as its first incumbent (HiGHS
        accepts it: the MIP at its integers gives its exact latency); when
        False, the MIP starts cold with that mapping's latency as an upper
        bound.  None (default): warm on dense layers with a window
        (``R x S > 1``, one group), cold on 1x1, depthwise and matrix-product
        layers (:func:`warm_start`, which gives the measurements).
    energy_stage : bool
        After the latency solve, the energy solve(s) of the objective
        (lexicographic / epsilon-constraint, :data:`dataflow_mip.EPS`).  Off
        by default: it doubled the solve time (and a cold one took 85 s CPU on
        ResNet-18 layer3.0.conv2); the EDP is then chosen in the exact model
        among the candidates and the polished MIP point.  ``ws`` (the
        baseline) always runs warm and with the energy stage, as before.
    ws_point : bool
        ``miredo`` only: the ``ws`` baseline's mapping (the same MIP with the
        weight-stationary constraints, same settings), and that mapping
        polished, are candidates of the final choice, so miredo never loses
        to ``ws`` in the exact model.  The ``ws`` result is cached per chip,
        layer shape and settings: a later ``ws`` call of the same layer returns
        it without solving again.  miredo's ``cpu_seconds`` include the ``ws``
        solve's CPU time whether it was solved here or cached.  Off by
        default: the ws solves (three HiGHS solves per shape, mostly root-node
        heuristics a node limit does not bound) took ResNet-18@224 from 53.9
        to 153 s CPU, past the one-minute budget, for a network EDP against
        ws of 3.09x instead of 2.96x (benchmarks/miredo.py --ws-point).

    blocked : bool or None
        ``miredo`` only: also the weight-split spatial unrolling
        (:func:`weight_split_candidates`) and position-blocked greedy orders
        (``heuristic_starts(blk=True)``) on every candidate.  None (default):
        :func:`blocked_start` decides (dense windowed layers with many
        output positions, dense 1x1 layers with few).

    zigzag_spatial : int
        ``zigzag`` and ``zigzag-roofline`` only: the spatial unrollings they search
        (:data:`ZIGZAG_SPATIAL`; 1: the best-utilisation one, given as ZigZag takes it).

    With ``miredo`` the result is never worse, in the exact model, than any
    heuristic mapping it contains: the greedy orders of every spatial
    candidate (the zigzag baseline's sample when ``max_orders`` is the same),
    weight- and output-stationary greedy orders, and the MIP's points.

    Returns
    -------
    Result
    """
    if method not in METHODS:
        raise ValueError(f"unknown dataflow method {method!r}; choose one of {', '.join(METHODS)}")
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; choose one of {', '.join(OBJECTIVES)}")
    t0, c0 = time.perf_counter(), time.process_time()
    if warm is None:
        warm = warm_start(layer)
    if blocked is None:
        blocked = blocked_start(layer)
    if method in ZIGZAG_METHODS:
        m, c = zigzag(layer, hier, objective, seed=seed, max_orders=max_orders, spatial_top=zigzag_spatial,
                      model=ZIGZAG_METHODS[method])
        return Result(m, c, time.perf_counter() - t0, method, objective, "heuristic",
                      cpu_seconds=time.process_time() - c0)
    ws_settings = dict(objective=objective, node_limit=node_limit, spatial_top=spatial_top, starts=starts,
                       max_orders=max_orders, seed=seed, time_limit=time_limit, fix_starts=fix_starts)
    if method == "ws":
        wkey = _ws_key(layer, hier, ws_settings)
        if wkey not in _WS:
            _WS[wkey] = _optimise(layer, hier, method, objective, node_limit, spatial_top, starts, max_orders, seed,
                                  time_limit, fix_starts, polish_budget, warm, energy_stage, t0, c0)
        return _WS[wkey]
    res = _optimise(layer, hier, method, objective, node_limit, spatial_top, starts, max_orders, seed, time_limit,
                    fix_starts, polish_budget, warm, energy_stage, t0, c0,
                    ws_settings if ws_point else None, blocked)
    return res


def _optimise(layer, hier, method, objective, node_limit, spatial_top, starts, max_orders, seed, time_limit,
              fix_starts, polish_budget, warm, energy_stage, t0, c0, ws_settings=None, blocked=False) -> Result:
    """:func:`optimise` after the argument checks (``ws_settings``: take the ws baseline's point too;
    ``blocked``: the weight-split unrolling and position-blocked starts too)."""
    key = (lambda c: c.cycles) if objective == "latency" else (lambda c: c.edp)
    best = None
    rng = random.Random(seed)
    ws = method == "ws"
    ev = Evaluations(layer, hier)  # every mapping of this solve evaluated once
    hit = False
    # spatial candidates ranked by their best heuristic mappings (the utilisation bound ties often); for
    # miredo these are greedy orders (the same sample as the zigzag baseline's), weight- and output-stationary
    # orders, each polished in the exact model -- every one of them is also a candidate of the final choice
    ranked, extra = [], []
    # blocked: position-blocked starts on every candidate and the weight-split unrollings, each polished, are
    # candidates of the final choice only; the ranking and the MIP's candidate and start stay those without them
    blocked = blocked and not ws
    sps = spatial_candidates(layer, hier, top=max(spatial_top, 6))
    base = len(sps)
    if blocked:
        sps += [sp for sp in weight_split_candidates(layer, hier) if sp not in sps]
    blk_pts: list = []
    dbl_pts: list = []  # double-buffered variants of the heuristic mappings (double_buffered_variants)
    for n_sp, sp in enumerate(sps):
        sts = heuristic_starts(layer, hier, sp, objective, ws=ws, rng=rng, keep=starts, max_orders=max_orders,
                               evaluate=ev)
        if not ws:
            sub = random.Random(seed)
            sts += [m for flag in STRUCTURED
                    for m in heuristic_starts(layer, hier, sp, objective, rng=sub, keep=1, max_orders=max_orders,
                                              split=STRUCTURED_SPLIT, evaluate=ev, **{flag: True})]
            if polish_budget and sts:
                sts = sorted(sts, key=lambda m: key(ev(layer, hier, m)))
                sts.insert(0, polish(layer, hier, sts[0], key, polish_budget, ev)[0])
            if blocked:
                bl = heuristic_starts(layer, hier, sp, objective, rng=sub, keep=BLOCKED_KEEP,
                                      max_orders=max_orders, split=STRUCTURED_SPLIT, blk=True, evaluate=ev)
                blk_pts += bl + [polish(layer, hier, m, key, polish_budget, ev)[0] for m in bl if polish_budget]
        if n_sp >= base:
            blk_pts += sts
            continue
        if DOUBLED_STARTS and not ws and layer.bounds["G"] == 1:  # of the polished best and the best greedy mapping
            dbl_pts += [v for m in sts[:2] for v in double_buffered_variants(layer, hier, m)]
        elif DOUBLED_DEPTHWISE and not ws and layer.bounds["G"] > 1:
            dbl_pts += [doubled_search(layer, hier, m, key, evaluate=ev) for m in sts[:2]]
        if sts:
            scored = sorted((key(ev(layer, hier, m)), i, m) for i, m in enumerate(sts))
            sts = [m for _, _, m in scored]
            ranked.append((scored[0][0], len(ranked), sp, sts))
    ranked.sort(key=lambda x: x[:2])
    others = []  # the other heuristic mappings of those candidates: not better by the key, points of the front
    for _, _, _, sts in ranked[spatial_top:] if not ws else ():
        extra += [(m, math.nan, "heuristic") for m in sts[:1]]
        others += [(m, math.nan, "heuristic") for m in sts[1:]]
    for _, _, sp, sts in ranked[:spatial_top]:
        # warm start: the best heuristic mapping (with fix_starts, each with its levels and buffering solved)
        pool = [(st, math.nan, "heuristic") for st in sts]
        for st in sts[:starts] if fix_starts else ():
            for m, cyc, status in dataflow_mip.solve(layer, hier, sp, ws=ws, node_limit=node_limit,
                                                     time_limit=time_limit, seed=seed, start=st, fix_order=True,
                                                     lexicographic=False):
                pool.append((m, cyc, status))
        valid = [(key(ev(layer, hier, m)), i, m) for i, (m, _, _) in enumerate(pool)
                 if not LN.check(layer, hier, m)]
        start = min(valid, key=lambda x: x[:2])[2] if valid else None
        sols = dataflow_mip.solve(layer, hier, sp, objective=objective, ws=ws, node_limit=node_limit,
                                  time_limit=time_limit, seed=seed, start=start, incumbent=warm or ws,
                                  lexicographic=energy_stage or ws)  # the ws baseline as before
        if polish_budget and not ws:  # the MIP's point polished in the exact model (its energy is approximate)
            sols += [(polish(layer, hier, m, key, polish_budget, ev)[0], math.nan, "polished " + st)
                     for m, cyc, st in sols if not LN.check(layer, hier, m)]
        pool += sols
        hit = hit or any(status == TIME_LIMIT_STATUS for _, _, status in pool)
        extra += pool
    if dbl_pts:  # the best of them, polished: it needs no MIP (the MIP's node limit rarely reaches such points)
        m = min(dbl_pts, key=lambda x: key(ev(layer, hier, x)))
        extra.append((polish(layer, hier, m, key, polish_budget, ev)[0] if polish_budget else m, math.nan,
                      "double-buffered heuristic"))
    ws_cpu = 0.0
    if ws_settings is not None:  # the ws baseline's point (cached: solved once per layer shape and settings)
        c1 = time.process_time()
        w = optimise(layer, hier, "ws", **ws_settings)
        ws_cpu = w.cpu_seconds - (time.process_time() - c1)  # its CPU time, counted once, solved here or not
        hit = hit or w.time_limit_hit
        extra.append((w.mapping, w.mip_cycles, "ws " + w.status))
        if polish_budget:
            extra.append((polish(layer, hier, w.mapping, key, polish_budget, ev)[0], math.nan,
                          "polished ws " + w.status))
    # the final choice: every candidate by the exact model
    seen: dict = {}
    for i, (m, mip_cyc, status) in enumerate(extra + others):
        if LN.check(layer, hier, m):
            continue
        c = ev(layer, hier, m)
        seen.setdefault((c.cycles, c.energy_pj), (m, c))
        if i < len(extra) and (best is None or key(c) < key(best[1]) - 1e-9):
            best = (m, c, status, mip_cyc)
    # blocked points last: they win (and enter the front) only when better by BLOCKED_MARGIN
    bar = key(best[1]) * (1 - BLOCKED_MARGIN) if best is not None else math.inf
    for m in blk_pts:
        if LN.check(layer, hier, m):
            continue
        c = ev(layer, hier, m)
        if key(c) < bar:
            seen.setdefault((c.cycles, c.energy_pj), (m, c))
            if best is None or key(c) < key(best[1]) - 1e-9:
                best = (m, c, "blocked heuristic", math.nan)
    if best is None:
        raise ValueError(f"the {method} MIP found no mapping of {layer.name}")
    if DOUBLED_FINAL and not ws:  # the chosen mapping's levels doubled one after the other, polished
        m = doubled_search(layer, hier, best[0], key, evaluate=ev)
        if m != best[0]:
            m = polish(layer, hier, m, key, polish_budget, ev)[0] if polish_budget else m
            c = ev(layer, hier, m)
            seen.setdefault((c.cycles, c.energy_pj), (m, c))
            if key(c) < key(best[1]) - 1e-9:
                best = (m, c, "double-buffered " + best[2], math.nan)
    if RELOCATE_FINAL and not ws and polish_budget:  # the chosen mapping with loops relocated, polished
        m, c = relocate(layer, hier, best[0], key, RELOCATE_BUDGET, ev)
        if m != best[0]:
            m, c = polish(layer, hier, m, key, polish_budget, ev)
            seen.setdefault((c.cycles, c.energy_pj), (m, c))
            if key(c) < key(best[1]) - 1e-9:
                best = (m, c, "relocated " + best[2], math.nan)
    front = tuple(seen[p] for p in pareto_front(list(seen)))
    return Result(best[0], best[1], time.perf_counter() - t0, method, objective, best[2], best[3], hit,
                  time.process_time() - c0 + ws_cpu, front)


def _optimise_job(layer: LN.Layer, hier: LN.Hierarchy, kw: dict) -> Result:
    return optimise(layer, hier, **kw)


def optimise_all(jobs: list, hier: LN.Hierarchy, workers: int | None = None, desc: str | None = None,
                 done=None) -> list:
    """:func:`optimise` of many layers, in parallel worker processes.

    The layers' solves are independent and each is deterministic, so the
    results are those of calling :func:`optimise` on each in turn; only the
    elapsed time changes.  Workers are TVM's
    :class:`~tvm.support.popen_pool.PopenPoolExecutor` (the pool
    meta-schedule builds with), started for the call and shut down after it.

    Parameters
    ----------
    jobs : list of (Layer, dict)
        Each layer with the keyword arguments of its :func:`optimise` call.
    hier : Hierarchy
    workers : int, optional
        Worker processes (default :func:`workers_default`); 1, or a single
        job, solves in this process.
    desc : str, optional
        A tqdm progress bar with this label (none when omitted).
    done : callable, optional
        Called as ``done(i, result)`` when job ``i`` finishes (jobs start in
        their order; they finish in any).

    Returns
    -------
    list of Result
        In the order of ``jobs``.
    """
    workers = min(workers_default() if workers is None else int(workers), len(jobs))
    bar = tqdm(total=len(jobs), desc=desc, leave=False, disable=desc is None)
    try:
        if workers <= 1:
            out = []
            for i, (layer, kw) in enumerate(jobs):
                out.append(optimise(layer, hier, **kw))
                if done is not None:
                    done(i, out[-1])
                bar.update(1)
            return out
        pool = PopenPoolExecutor(max_workers=workers, stdout=subprocess.DEVNULL)  # HiGHS's banner, once per worker
        try:
            futs = {pool.submit(_optimise_job, layer, hier, dict(kw)): i for i, (layer, kw) in enumerate(jobs)}
            out = [None] * len(jobs)
            for f in as_completed(futs):
                i = futs[f]
                out[i] = f.result()
                if done is not None:
                    done(i, out[i])
                bar.update(1)
            return out
        finally:
            pool.shutdown()
    finally:
        bar.close()


# ============================================================================ the dataflow piece of the pipeline
# settings the compiler uses per layer (the benchmark passes its own)
PIPELINE_SETTINGS = dict(method="miredo", objective=DEFAULT_OBJECTIVE, node_limit=dataflow_mip.NODE_LIMIT, spatial_top=1, starts=2,
                         max_orders=200)
_PLANS: dict = {}
# plan_all solves in worker processes from this many distinct shapes: a worker takes 2-5 s to start (it imports
# TVM), which a few small layers' solves do not repay (tests/test_miredo's pipeline cases: 13.2 -> 16.8 s with two)
PARALLEL_MIN_LAYERS = 4


def layer_of(region: Region) -> LN.Layer | None:
    """The loop nest of a region (convolutions and matrix products with constant weights; else None)."""
    if region.kind == CONV2D:
        n, c, _, _ = region.in_shapes[0]
        _, oc, oh, ow = region.out_shape
        cv = region.conv
        g = int(cv.get("groups", 1))
        kh, kw = cv["kernel"]
        return LN.Layer.conv(region.name, int(n), int(oc) // g, int(c) // g, int(oh), int(ow), int(kh), int(kw), g,
                             tuple(int(x) for x in cv["strides"]), tuple(int(x) for x in cv["dilation"]))
    if region.kind == MATMUL:
        m, k, n = region.mkn
        return LN.Layer.conv(region.name, 1, int(n), int(k), int(m), 1, 1, 1)
    return None


def _plan_key(layer: LN.Layer, hw: CIMHardware, kw: dict) -> tuple:
    return (loader.digest(hw), tuple(sorted(layer.bounds.items())), layer.stride, layer.dilation,
            tuple(sorted(kw.items())))


def plan_all(regions: list, hw: CIMHardware, workers: int | None = None, **settings) -> None:
    """Solve the dataflow of every region not planned yet, distinct shapes in parallel (:func:`optimise_all`)
    when there are at least :data:`PARALLEL_MIN_LAYERS` of them; :func:`plan` then returns them from its cache
    (the same results as solving them one by one)."""
    if not hw.dataflow.levels:
        return
    kw = {**PIPELINE_SETTINGS, **settings}
    todo: dict = {}
    for r in regions:
        layer = layer_of(r)
        if layer is not None:
            key = _plan_key(layer, hw, kw)
            if key not in _PLANS:
                todo.setdefault(key, layer)
    if len(todo) >= PARALLEL_MIN_LAYERS:
        res = optimise_all([(layer, kw) for layer in todo.values()], LN.Hierarchy.of(hw), workers,
                           desc="dataflow layers")
        _PLANS.update(zip(todo, res))


def plan(region: Region, hw: CIMHardware, **settings) -> tuple | None:
    """The MIREDO dataflow of a region on a chip with a ``[dataflow]`` table (cached by shape and chip).

    Returns
    -------
    (Layer, Result) or None
        None when the region has no loop nest (run-time weights) or the chip no dataflow view.
    """
    layer = layer_of(region)
    if layer is None or not hw.dataflow.levels:
        return None
    kw = {**PIPELINE_SETTINGS, **settings}
    key = _plan_key(layer, hw, kw)
    if key not in _PLANS:
        _PLANS[key] = optimise(layer, LN.Hierarchy.of(hw), **kw)
    return layer, _PLANS[key]

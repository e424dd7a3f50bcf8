"""MIREDO's per-layer dataflow MIP (paper 001, Eq. 2-14) on HiGHS, for one spatial unrolling.

Variables (paper notation in brackets):

* ``X[f, i]`` -- temporal factor ``f`` (Alg. 1 factors of the residual
  bounds) sits in loop slot ``i`` (X^L); every slot holds one factor, equal
  factors of a dimension keep their order (symmetry);
* ``Z[o, m, c]`` -- level ``m`` of operand ``o`` holds the loops from slot
  ``c`` inwards (X^M / X^Z as a one-hot cut); ``psi = sum_c Z`` is 0 when a
  bypassable level is skipped (psi^U); cuts of inner levels lie below outer ones;
* ``Y[f, o, m]`` -- factor ``f`` lies inside level ``m``'s tile (exact
  linearisation of ``Z and X``); tile log-sizes are linear in ``Y`` (Eq. 6);
  the input halo ``(p - 1) s + (r - 1) d + 1`` is linearised by a one-hot over
  the achievable ``(p, r)`` pairs (Eq. 7-8);
* ``E[o, m]`` -- elements of the tile, bounded below by the tangents of
  ``exp`` at every achievable log-size, which is exact at those points
  because ``exp`` is convex (no one-hot over sizes needed);
* ``D[o, m]`` -- double buffering (psi^DM): capacity ``(1 + D) E bits <= CA``
  (Eq. 9);
* ``R[o, m]`` -- partial sums leave and come back (a reduction loop outside);
* ``Lat[i]``, ``Crit[i]`` -- the stall-aware recursion of
  :func:`tvm_cim.hardware.loopnest.latency` (Table III): a transfer at slot
  ``i`` (cut at ``i + 1``) adds to the iteration when single-buffered and
  overlaps it when double-buffered; ``N_i x Crit_i`` is linearised exactly
  by ``sum_f F_f W[f, i]`` with ``W >= Crit - M (1 - X)`` (V^F).

A single-buffered input or weight level read only by a single-buffered
child refilled at an inner loop ``j`` refills during the child's last block
(:func:`tvm_cim.hardware.loopnest._exposed`): a credit ``CR[i, j] <=
Lat[j + 1]``, allowed only when the child's cut is at ``j + 1``, the child
is single-buffered and no output level is refilled at a loop in ``(i, j]``.
Overlapped refills move at their yield rate ``r`` while the macros compute
(:func:`tvm_cim.hardware.loopnest.yield_rate`, constant per stream and
feed scenario): ``Crit[i] >= T + (1 - r) Cmp[i + 1]`` with ``Cmp`` the
compute cycles of the inner loops (``N_i x Cmp`` linearised like
``N_i x Crit``), and the credit is at most ``r Lat[j + 1]``.

The transfer is charged at the loop just outside a cut, and a cut may only
sit below a loop the operand depends on (a cut below a loop it does not
depend on holds the same data as one slot higher: no optimum is lost).

Objectives.  ``latency``: lexicographic -- minimal latency ``L*``, then the
least energy with latency within 0.1 % of ``L*``.  ``edp``: an
epsilon-constraint sweep -- the least energy under ``latency <= (1 + eps) L*``
for ``eps`` in :data:`EPS`; every point is returned and the caller keeps the
smallest exactly evaluated EDP.  The energy the MIP sees is the transfer
volume of every level times its read/write energies (tangents of ``exp`` on
a 0.1-step grid of log-volumes: a lower bound within 0.5 %), the feed of the
MVMs and leakage times latency.  Weight-stationary (``ws``): every loop the
weights do not depend on is inside the macro's tile and after every loop
they depend on, so each weight tile enters the macro once.
"""

from __future__ import annotations

import itertools
import math

import highspy
import numpy as np

from ...hardware import loopnest as LN
from .factorize import factors_of, residual_bounds
from .milp import Model

# sweep points.  One: on ResNet-18@224 the sweep (0, 0.1, 0.3, 1.0) only ever chose 0 or 0.3, and eps = 0
# alone (a lexicographic solve: least energy at minimal latency), without fixed-order warm-start solves, gave a
# lower network EDP than (0, 0.3) with them (2.75e16 and 2.78e16 against 2.80e16 pJ.ns) in 63-77 % of the CPU
# time (two runs under heavy load); callers may set more points
EPS = (0.0,)
NODE_LIMIT = 20  # branch-and-bound nodes per solve (deterministic)
SAFETY_TIME_LIMIT = 300.0  # seconds per solve, reported when hit (the paper caps a layer at 5 min); under a load
# of ~15 on 2 cores single solves took over 60 s and the old 60 s net decided conv1 of ResNet-18 and 3 VGG-16 layers


def _qsum(terms):
    terms = list(terms)
    if not terms:
        return 0.0
    if hasattr(highspy, "qsum"):
        return highspy.qsum(terms)
    return sum(terms[1:], terms[0])


def _add(mdl: Model, con) -> None:
    """Add a constraint without the round-off coefficients (|a| < 1e-9) HiGHS rejects."""
    merged: dict = {}
    for i, v in zip(con.idxs, con.vals):
        merged[i] = merged.get(i, 0.0) + v
    keep = [(i, v) for i, v in merged.items() if abs(v) >= 1e-9]
    con.idxs, con.vals = [i for i, _ in keep], [v for _, v in keep]
    mdl.add(con)


def _subset_products(fs: list[int]) -> list[int]:
    out = {1}
    for f in fs:
        out |= {x * f for x in out}
    return sorted(out)


def solve(layer: LN.Layer, hier: LN.Hierarchy, spatial: tuple, objective: str = "latency", ws: bool = False,
          node_limit: int = NODE_LIMIT, time_limit: float = SAFETY_TIME_LIMIT, seed: int = 0, flexible: bool = True, start: LN.Mapping | None = None,
          fix_order: bool = False, lexicographic: bool = True, bounds: bool = False, incumbent: bool = True,
          ladder=()):
    """Solve the dataflow MIP of one spatial unrolling.

    Parameters
    ----------
    layer, hier : the workload and the chip's dataflow view
    spatial : tuple
        ``Mapping.spatial`` (from :func:`tvm_cim.compiler.dataflow.spatial_candidates`).
    objective : {'latency', 'edp'}
    ws : bool
        Add the weight-stationary constraints.
    node_limit : int
        Branch-and-bound nodes per HiGHS solve (``mip_max_nodes``): the limit
        that decides where the search stops, the same on every machine and
        under any load, so a layer always gets the same mapping.
    time_limit : float
        Seconds per HiGHS solve: only a safety net (the status then says
        ``Time limit reached`` and the result may depend on the machine).
    seed : int
    flexible : bool
        Alg. 1 factors (else prime factors).
    start : Mapping, optional
        A valid mapping of the same spatial unrolling given to HiGHS as the
        first incumbent (the solver never returns anything worse).
    fix_order : bool
        Keep the start's loop order and optimise only the levels, cuts and
        buffering (a fast exact sub-problem).
    incumbent : bool
        Give ``start`` to HiGHS as its first incumbent; when False, the start
        only bounds the latency from above (its big-M terms stay tight) and
        the search starts cold.
    bounds : bool
        Instead of mappings, return the lower bounds the MIP proves within
        ``node_limit`` nodes (see :func:`lower_bounds`).
    ladder : tuple of float
        With ``bounds``: latencies (cycles, increasing) under which the least
        energy is also solved (see :func:`lower_bounds`).

    Returns
    -------
    list of (Mapping, float, str)
        Mappings with the latency the MIP computed and the solver status (one
        for ``latency``, one per sweep point for ``edp``); empty if infeasible.
    """
    facs = factors_of(residual_bounds(layer, spatial), flexible)
    n = len(facs)
    core = hier.axes[0].name
    sp_all = {d: 1 for d in LN.DIMS}
    sp_per = {d: 1 for d in LN.DIMS}
    for a, fs in spatial:
        for d, f in fs:
            sp_all[d] *= f
            if a != core:
                sp_per[d] *= f
    core_sp = dict(next((fs for a, fs in spatial if a == core), ()))
    copies = {o: math.prod(f for d, f in core_sp.items() if d in LN.RELEVANT[o]) for o in "IWO"}
    steps = math.prod(f for _, f in facs)
    active = math.prod(core_sp.values()) if core_sp else 1

    mdl = Model(f"miredo-{layer.name}", time_limit=time_limit, seed=seed, node_limit=node_limit)
    tsc = 1.0 / max(1.0, steps * hier.mvm_cycles)  # cycles are scaled to O(1) for the solver's tolerances
    X = [[mdl.binary(f"X{f}_{i}") for i in range(n)] for f in range(n)]
    for f in range(n):
        _add(mdl, _qsum(X[f]) == 1)
    for i in range(n):
        _add(mdl, _qsum(X[f][i] for f in range(n)) == 1)
    pos = [_qsum(i * X[f][i] for i in range(1, n)) for f in range(n)]
    for f, g in itertools.combinations(range(n), 2):
        if facs[f] == facs[g]:
            _add(mdl, pos[f] + 1 <= pos[g])

    # ---------------------------------------------------------------- levels, cuts, tiles
    streams = []  # (o, lv, parent)
    for o in "IWO":
        chain = hier.levels_of(o)
        for k, lv in enumerate(chain[1:], start=1):
            parent = next(p for p in reversed(chain[:k]) if not p.bypass)
            if any(p.bypass for p in chain[chain.index(parent) + 1:k]):
                raise NotImplementedError("a bypassable level between two levels of one operand")
            streams.append((o, lv, parent))
    Z, psi, C, Y, E, Tb, Teff, D, R, ell_bounds = {}, {}, {}, {}, {}, {}, {}, {}, {}, {}
    Tmax, sizes_big, Hs, frac = {}, {}, {}, {}
    for o, lv, parent in streams:
        key = (o, lv.name)
        Z[key] = [mdl.binary(f"Z{o}{lv.name}{c}") for c in range(n + 1)]
        psi[key] = _qsum(Z[key])
        _add(mdl, psi[key] <= 1) if lv.bypass else _add(mdl, psi[key] == 1)
        C[key] = [_qsum(Z[key][: i + 1]) for i in range(n)]
        for c in range(1, n + 1):  # a cut sits below a loop the operand depends on
            rel = [X[f][c - 1] for f in range(n) if facs[f][0] in LN.RELEVANT[o]]
            _add(mdl, Z[key][c] <= _qsum(rel)) if rel else _add(mdl, Z[key][c] <= 0)
        Y[key] = []
        for f in range(n):
            y = mdl.binary(f"Y{f}{o}{lv.name}")
            for i in range(n):
                _add(mdl, y >= X[f][i] + C[key][i] - 1)
                _add(mdl, y <= 1 - X[f][i] + C[key][i])
            Y[key].append(y)
        # tile log-size (elements), exact at every achievable point
        base = sp_per if lv.per_core else sp_all
        log_terms = []
        dims_plain = [d for d in LN.DIMS if d in LN.RELEVANT[o] and not (o == "I" and d in "PQRS")]
        for d in dims_plain:
            log_terms.append(math.log(base[d]) + _qsum(math.log(facs[f][1]) * Y[key][f]
                                                       for f in range(n) if facs[f][0] == d))
        value_sets = [[base[d] * p for p in _subset_products([F for dd, F in facs if dd == d])] for d in dims_plain]
        if o == "I":
            for ax, (pd, rd) in enumerate((("P", "R"), ("Q", "S"))):
                ps = [base[pd] * p for p in _subset_products([F for dd, F in facs if dd == pd])]
                rs = [base[rd] * r for r in _subset_products([F for dd, F in facs if dd == rd])]
                pairs = list(itertools.product(ps, rs))
                H = [mdl.binary(f"H{o}{lv.name}{ax}_{j}") for j in range(len(pairs))]
                Hs[(key, ax)] = (pairs, H)
                _add(mdl, _qsum(H) == 1)
                for which, dd in ((0, pd), (1, rd)):
                    _add(mdl, _qsum(math.log(pr[which]) * h for pr, h in zip(pairs, H))
                            == math.log(base[dd]) + _qsum(math.log(facs[f][1]) * Y[key][f]
                                                          for f in range(n) if facs[f][0] == dd))
                ext = layer._in_extent(ax)
                st, dl = layer.stride[ax], layer.dilation[ax]
                hs = [min((p - 1) * st + (r - 1) * dl + 1, ext) for p, r in pairs]
                log_terms.append(_qsum(math.log(h) * v for h, v in zip(hs, H)))
                value_sets.append(sorted(set(hs)))
        ell = _qsum(log_terms)
        sizes = sorted({math.prod(c) for c in itertools.product(*value_sets)})
        if len(sizes) > 600:  # keep the tangents tractable (a lower bound between kept points)
            idx = sorted({round(j * (len(sizes) - 1) / 599) for j in range(600)})
            sizes = [sizes[j] for j in idx]
        e = mdl.var(f"E{o}{lv.name}")  # elements / big
        big = sizes[-1]
        for s in sizes:
            _add(mdl, e >= (s / big) * (1 + ell - math.log(s)) - 1.01 * (1 - psi[key]))
        E[key] = e
        sizes_big[key] = big
        ell_bounds[key] = ell
        # outputs: final (requantised) when no reduction loop is outside the cut (R = 0), else partial sums
        # there and back (Teff below); capacities count partial sums
        bits = LN.out_bits(hier, False) if o == "O" else hier.bits[o]
        k = max(copies[o] / parent.bandwidth_bits, 1 / lv.bandwidth_bits) if lv.per_core else \
            max(1 / parent.bandwidth_bits, 1 / lv.bandwidth_bits)
        if lv.per_core:
            frac[key] = {parent.name: (copies[o] / parent.bandwidth_bits) / k, lv.name: (1 / lv.bandwidth_bits) / k}
        else:
            frac[key] = {parent.name: (1 / parent.bandwidth_bits) / k, lv.name: (1 / lv.bandwidth_bits) / k}
        Tb[key] = (bits * k * big * tsc) * e
        Tmax[key] = (2 * hier.bits["O"] if o == "O" else bits) * k * big * tsc
        can_dbl = lv.double_buffer or (o == "W" and lv.name == hier.levels_of("W")[-1].name and hier.weight_double_buffer)
        D[key] = mdl.binary(f"D{o}{lv.name}") if can_dbl else None
        if D[key] is not None:
            _add(mdl, D[key] <= psi[key])
        if o == "O":
            R[key] = mdl.binary(f"R{lv.name}")
            for f in range(n):
                if facs[f][0] in LN.REDUCTION:
                    for i in range(n):
                        _add(mdl, R[key] >= X[f][i] - C[key][i] - (1 - psi[key]))
            tr = mdl.var(f"TR{lv.name}")
            back = 2 * hier.bits["O"] / bits - 1  # partial sums: 2 x psum bits where a final tile moves bits
            _add(mdl, tr >= back * Tb[key] - Tmax[key] * (1 - R[key]))
            Teff[key] = Tb[key] + tr
        else:
            Teff[key] = Tb[key]

    # cuts of inner levels below outer ones
    for o in "IWO":
        ks = [(o, lv.name) for oo, lv, _ in streams if oo == o]
        for a, b in itertools.combinations(ks, 2):
            ca = _qsum(c * z for c, z in enumerate(Z[a]))
            cb = _qsum(c * z for c, z in enumerate(Z[b]))
            _add(mdl, cb >= ca - n * (1 - psi[a]) - n * (1 - psi[b]))

    # capacities (Eq. 9)
    for lv in hier.levels[1:]:
        terms = []
        for o in "IWO":
            key = (o, lv.name)
            if key not in E:
                continue
            b = hier.bits[o]
            terms.append((b * sizes_big[key] / lv.capacity_bits) * E[key])
            if D[key] is not None:
                ed = mdl.var(f"ED{o}{lv.name}")
                _add(mdl, ed >= (b * sizes_big[key] / lv.capacity_bits) * E[key] - 4 * (1 - D[key]))
                terms.append(ed)
        if terms:
            _add(mdl, _qsum(terms) <= 1)

    # weight stationary
    if ws:
        macro = hier.levels_of("W")[-1].name
        irr = [f for f in range(n) if facs[f][0] not in LN.RELEVANT["W"]]
        rel = [f for f in range(n) if facs[f][0] in LN.RELEVANT["W"]]
        for f in irr:
            _add(mdl, Y[("W", macro)][f] == 1)
            for g in rel:
                _add(mdl, pos[f] >= pos[g] + 1)

    # ---------------------------------------------------------------- latency (Table III recursion)
    leaf = mdl.var("leaf", lb=float(hier.mvm_cycles) * tsc)
    feeds = {}
    for o in "IO":
        chain = hier.levels_of(o)
        t = {d: 1 for d in LN.DIMS}
        for ax in hier.axes[1:]:
            for d, f in dict(next((fs for a, fs in spatial if a == ax.name), ())).items():
                t[d] *= f
        per = layer.elems(o, t) * (hier.bits["I"] if o == "I" else LN.drain_bits(layer, hier, spatial))
        for k_, lv in enumerate(chain):
            bits = per if lv.per_core else per * copies[o]
            fd = bits / lv.bandwidth_bits * tsc
            inner = [psi[(o, x.name)] for x in chain[k_ + 1:] if (o, x.name) in psi]
            _add(mdl, leaf >= fd - fd * _qsum(inner) if inner else leaf >= fd)
            feeds[(o, lv.name)] = bits
    t_all = sum(Tmax.values())
    mc = steps * (max(hier.mvm_cycles, max(feeds.values(), default=0)) * tsc + 2 * t_all) + t_all
    ub = None
    if start is not None and not LN.check(layer, hier, start):
        # only mappings at least as fast as the start are wanted: every Lat_i and Crit_i is below its
        # latency, which makes the big-M of N_i x Crit_i tight (the solver's integrality tolerance times M
        # must stay far below the latencies)
        ub = LN.latency(layer, hier, start) * tsc * (1 + 1e-6) + 1e-9
        mc = min(mc, ub)
    # scenarios: which level feeds the MVMs' inputs and which takes their partial sums
    scen = {}
    chain_i, chain_o = hier.levels_of("I"), hier.levels_of("O")

    def _mis(o, chain, k_):
        lv = chain[k_]
        inner = [psi[(o, x.name)] for x in chain[k_ + 1:] if (o, x.name) in psi]
        here = psi[(o, lv.name)] if (o, lv.name) in psi else None
        return (1 - here if here is not None else 0.0) + (_qsum(inner) if inner else 0.0)

    for ki, li in enumerate(chain_i):
        for ko, lo_ in enumerate(chain_o):
            fi = feeds[("I", li.name)] / li.bandwidth_bits
            fo = feeds[("O", lo_.name)] / lo_.bandwidth_bits
            step = max(float(hier.mvm_cycles), fi, fo, fi + fo if li.name == lo_.name else 0.0)
            share = {}
            share[li.name] = share.get(li.name, 0.0) + fi / step
            share[lo_.name] = share.get(lo_.name, 0.0) + fo / step
            mis = _mis("I", chain_i, ki) + _mis("O", chain_o, ko)
            scen[(li.name, lo_.name)] = (share, mis)
            if li.name == lo_.name:  # inputs and partial sums through one port
                _add(mdl, leaf >= (fi + fo) * tsc - (fi + fo) * tsc * mis)
    # overlapped refills move at loopnest.yield_rate while the macros compute: per stream, the scenarios whose
    # MVM feed leaves it less than its full pace, (rate, mis)
    slowed = {}
    for key in E:
        for share, mis in scen.values():
            r = 1.0
            for pn, x in frac[key].items():
                u = share.get(pn, 0.0)
                if u > 0 and x > 0:
                    r = min(r, max(0.0, 1.0 - u) / x)
            if r < 1.0 - 1e-12:
                slowed.setdefault(key, []).append((r, mis))
    cmp_next = leaf  # cycles the macros compute in one iteration of the inner loops
    lat_next = leaf
    prologues = []  # first tile of every double-buffered stream (it prefetches across loop boundaries)
    # a level whose only reader is a child refilled at the same loop (pass-through, loopnest.pass_through)
    children = {}
    for o, lv, parent in streams:
        if (o, parent.name) in E:
            children.setdefault((o, parent.name), []).append((o, lv.name))
    # port-occupancy classes (loopnest.occupancy_terms): per stream, (port, class, weight)
    occ_terms = {}
    for key in E:
        sh = frac[key]
        terms = []
        for pn, x in sh.items():
            if LN.heavy(x):
                terms.append((pn, "*", 1.0))
            else:
                terms.append((pn, None, x))
                terms += [(pn, q, 1.0) for q, y in sh.items() if q != pn and LN.heavy(y)]
        occ_terms[key] = terms
    classes = sorted({(pn, None) for ts_ in occ_terms.values() for pn, _, _ in ts_}
                     | {(pn, c) for ts_ in occ_terms.values() for pn, c, _ in ts_ if c != "*"}
                     | {(pn, None) for share, _ in scen.values() for pn in share}, key=str)
    # occupancy of one leaf step: the MVMs' inputs and partial sums (per scenario)
    occ_next = {}
    for cl in classes:
        v = mdl.var(f"occL{cl}")
        if cl[1] is None:
            for (li, lo), (share, mis) in scen.items():
                if share.get(cl[0], 0.0):
                    _add(mdl, v >= share[cl[0]] * leaf - mc * mis)
        occ_next[cl] = v
    body_of = {}  # loop -> its inner loops' duration (loopnest._exposed)
    o_keys = [key for key in E if key[0] == "O"]
    for i in range(n - 1, -1, -1):
        body_of[i] = lat_next
        crit = mdl.var(f"crit{i}")
        serial, pro, on_port = [], [], {}
        passing = {}
        for key, kids in children.items():
            for kid in kids:
                pv = mdl.var(f"PS{key}{kid}{i}", lb=0.0, ub=1.0)
                _add(mdl, pv <= Z[key][i + 1])
                _add(mdl, pv <= Z[kid][i + 1])
                _add(mdl, pv >= Z[key][i + 1] + Z[kid][i + 1] - 1)
                passing.setdefault(key, []).append((kid, pv))
        for key in E:
            z = Z[key][i + 1]
            mt = Tmax[key]
            pas = _qsum(pv for _, pv in passing.get(key, []))
            ts = mdl.var(f"TS{key}{i}")
            credit = []  # an input/weight level read only by one single-buffered child refilled at loop j > i:
            # its refill overlaps the child's last block, body_of[j] (no output write-back at a loop in (i, j])
            kids = children.get(key, []) if key[0] != "O" else []
            for kid in kids if len(kids) == 1 else ():
                for j in range(i + 1, n):
                    cr = mdl.var(f"CR{key}{i}_{j}", lb=0.0)
                    _add(mdl, cr <= body_of[j])
                    _add(mdl, cr <= mc * Z[kid][j + 1])
                    if D[kid] is not None:
                        _add(mdl, cr <= mc * (1 - D[kid]))
                    for ok in o_keys:
                        for c in range(i + 2, j + 2):
                            _add(mdl, cr <= mc * (1 - Z[ok][c]))
                    for r, mis in slowed.get(key, ()):  # it moves at its yield rate while the child computes
                        _add(mdl, cr <= r * body_of[j] + mc * mis)
                    credit.append(cr)
            _add(mdl, ts >= Teff[key] - mt * (1 - z) - (mt * D[key] if D[key] is not None else 0.0) - mt * pas
                 - _qsum(credit))
            serial.append(ts)
            big = mt + mc
            for kid, pv in passing.get(key, []):  # the level is busy for its refill and the child's
                dm = mt * D[key] if D[key] is not None else 0.0
                _add(mdl, crit >= Teff[key] + Teff[kid] - (mt + Tmax[kid]) * (1 - pv) - dm)
                for r, mis in slowed.get(key, ()):  # ... and slowed while the macros compute
                    _add(mdl, crit >= Teff[key] + Teff[kid] + (1 - r) * cmp_next - (big + Tmax[kid]) * (1 - pv)
                         - (big * D[key] if D[key] is not None else 0.0) - big * mis)
                if key[0] != "O":  # its first tile has no body before it to hide behind (a prologue)
                    tq = mdl.var(f"TQ{key}{kid}{i}")
                    _add(mdl, tq >= Tb[key] - mt * (1 - pv) - dm)
                    pro.append(tq)
            ot = mdl.var(f"OT{key}{i}")  # the refill at this loop, whole duration
            _add(mdl, ot >= Teff[key] - mt * (1 - z))
            for pn, c, w in occ_terms[key]:
                for cl in classes:
                    if cl[0] == pn and (c == "*" or cl[1] == c):
                        on_port.setdefault(cl, []).append(w * ot)
            if D[key] is not None:
                td = mdl.var(f"TD{key}{i}")
                _add(mdl, td >= Teff[key] - mt * (1 - z) - mt * (1 - D[key]))
                _add(mdl, crit >= td)
                for r, mis in slowed.get(key, ()):
                    _add(mdl, crit >= Teff[key] + (1 - r) * cmp_next - big * (2 - z - D[key]) - big * mis)
                tp = mdl.var(f"TP{key}{i}")
                _add(mdl, tp >= Tb[key] - mt * (1 - z) - mt * (1 - D[key]))
                pro.append(tp)
        _add(mdl, crit >= lat_next + _qsum(serial))
        # overlapped refills at i holding a port an inner loop's refill needs (loopnest.blocking); per port an
        # indicator: some stream refilled at a slot > i uses it (for outputs' write-backs, which go first at an
        # iteration boundary, also an input or weight stream refilled at i)
        inner_on, inner_on_o = {}, {}
        for key in E:
            for pn in frac[key]:
                if pn not in inner_on:
                    inner_on[pn] = mdl.var(f"A{pn}{i}", lb=0.0, ub=1.0)
                    inner_on_o[pn] = mdl.var(f"AO{pn}{i}", lb=0.0, ub=1.0)
                if i + 1 < n:  # nothing is refilled inside the innermost loop
                    _add(mdl, inner_on[pn] >= psi[key] - C[key][i + 1])
                if key[0] != "O":
                    _add(mdl, inner_on_o[pn] >= psi[key] - C[key][i])
                elif i + 1 < n:
                    _add(mdl, inner_on_o[pn] >= psi[key] - C[key][i + 1])
        held = {}
        for key in E:
            # a double-buffered output write-back or a pass-through refill (an input or weight prefetch moves
            # in the room the inner refills leave)
            dk = D[key] if D[key] is not None else 0.0
            ovs = ([D[key]] if D[key] is not None and key[0] == "O" else []) \
                + [pv - (0.0 if key[0] == "O" else dk) for _, pv in passing.get(key, [])]
            if not ovs:
                continue
            ov = mdl.var(f"OV{key}{i}", lb=0.0, ub=1.0)  # the refill overlaps the body
            for x in ovs:
                _add(mdl, ov >= x)
            for pn, x in frac[key].items():
                if LN.holds(x):
                    bl = mdl.var(f"BL{key}{pn}{i}")
                    mt = Tmax[key]
                    a = (inner_on_o if key[0] == "O" else inner_on)[pn]
                    _add(mdl, bl >= Teff[key] - mt * (3 - Z[key][i + 1] - ov - a))
                    held.setdefault(pn, []).append(bl)
        for pn, bls in held.items():
            _add(mdl, crit >= lat_next + _qsum(serial) + _qsum(bls))
        occ_here = {}
        for cl in classes:  # every port's occupancy in one iteration (loopnest.latency)
            oc = mdl.var(f"occ{cl}{i}")
            _add(mdl, oc >= occ_next[cl] + _qsum(on_port.get(cl, [])))
            _add(mdl, crit >= oc)
            occ_here[cl] = oc

        def n_times(value, prefix, i=i):
            """N_i x value: the factor chosen at position i (one-hot X) times value, big-M linearised."""
            terms = []
            for f in range(n):
                w = mdl.var(f"{prefix}{f}_{i}")
                _add(mdl, w >= value - mc * (1 - X[f][i]))
                terms.append(facs[f][1] * w)
            return _qsum(terms)

        lat = mdl.var(f"lat{i}")
        _add(mdl, lat >= n_times(crit, "W"))
        if slowed:
            cmp = mdl.var(f"cmp{i}")
            _add(mdl, cmp >= n_times(cmp_next, "WC"))
            cmp_next = cmp
        for pn, oc in occ_here.items():  # N_i x occupancy, linearised like N_i x crit
            nxt = mdl.var(f"occN{pn}{i}")
            _add(mdl, nxt >= n_times(oc, f"WO{pn}"))
            occ_next[pn] = nxt
        prologues += pro
        lat_next = lat
    total = mdl.var("total", ub=ub if ub is not None else math.inf)
    once = []
    for key in E:
        to = mdl.var(f"TO{key}")
        _add(mdl, to >= Teff[key] - Tmax[key] * (1 - Z[key][0]))
        once.append(to)
    _add(mdl, total >= lat_next + _qsum(once + prologues))
    bound = mdl.var("bound", lb=0.0)
    _add(mdl, total <= bound)

    # ---------------------------------------------------------------- energy the MIP sees
    eref = max(1e-9, steps * active * hier.mvm_energy_pj)  # energy in units of the layer's MVM energy
    e_terms = [(hier.leakage_mw * hier.cycle_ns / tsc / eref) * total]
    lf = math.log
    port_load: dict = {}
    for o, lv, parent in streams:
        key = (o, lv.name)
        outside = _qsum(lf(facs[f][1]) * (1 - Y[key][f]) for f in range(n))
        lam = ell_bounds[key] + outside + (lf(copies[o]) if lv.per_core else 0.0)
        lo = max(0.0, lf(max(1.0, layer.elems(o, layer.bounds))) + lf(steps) + lf(max(1, copies[o])) + 1 - 12)
        hi = lf(max(1.0, layer.elems(o, layer.bounds))) + lf(steps) + lf(max(1, copies[o])) + 1
        vol = mdl.var(f"V{o}{lv.name}")
        g = lo
        while g <= hi:
            _add(mdl, vol >= math.exp(g - hi) * (1 + lam - g) - 3 * (1 - psi[key]))  # volume / exp(hi)
            g += 0.1
        b1 = LN.out_bits(hier, False) if o == "O" else hier.bits[o]  # a tile moved once (outputs: final)
        e_terms.append((b1 * (parent.read_pj + lv.write_pj) * math.exp(hi) / eref) * vol)
        moved = [(b1, vol)]
        if key in R:  # partial sums go back and come back: 2 x psum bits in all
            vr = mdl.var(f"VR{o}{lv.name}")
            _add(mdl, vr >= vol - 3 * (1 - R[key]))
            moved.append((2 * hier.bits["O"] - b1, vr))
            if hier.bits["O"] > b1:  # one trip at psum bits, as a final tile's at b1
                e_terms.append(((hier.bits["O"] - b1) * (parent.read_pj + lv.write_pj) * math.exp(hi) / eref) * vr)
        for pn, x in ((parent.name, parent), (lv.name, lv)):
            per_port = (1 / max(1, copies[o])) if (x.per_core and lv.per_core) else 1.0
            coef = math.exp(hi) * per_port / x.bandwidth_bits * tsc
            port_load.setdefault(pn, []).extend(coef * b * v for b, v in moved)
    mvms = steps * active
    for o in "IO":
        chain = hier.levels_of(o)
        for k_, lv in enumerate(chain):
            inner = [psi[(o, x.name)] for x in chain[k_ + 1:] if (o, x.name) in psi]
            here = psi[(o, lv.name)] if (o, lv.name) in psi else 1.0
            per_bits = feeds[(o, lv.name)] / (1 if lv.per_core else max(1, copies[o]))
            rate = lv.read_pj if o == "I" else lv.write_pj
            coef = mvms * per_bits * rate / eref
            if coef and not inner:
                e_terms.append(coef * here)
            elif coef:
                ind = mdl.var(f"inner{o}{lv.name}", lb=0.0)  # 1 when lv is the innermost used level
                _add(mdl, ind >= here - _qsum(inner))
                e_terms.append(coef * ind)
    energy = _qsum(e_terms)
    # no port moves more than its bandwidth allows over the whole layer (refills and MVM feeds)
    for o in "IO":
        chain = hier.levels_of(o)
        for k_, lv in enumerate(chain):
            inner = [psi[(o, x.name)] for x in chain[k_ + 1:] if (o, x.name) in psi]
            here = psi[(o, lv.name)] if (o, lv.name) in psi else 1.0
            fc = steps * feeds[(o, lv.name)] / lv.bandwidth_bits * tsc
            if not inner:
                port_load.setdefault(lv.name, []).append(fc * here)
            else:
                ind = mdl.var(f"feedin{o}{lv.name}", lb=0.0)
                _add(mdl, ind >= here - _qsum(inner))
                port_load.setdefault(lv.name, []).append(fc * ind)
    for terms in port_load.values():
        _add(mdl, total >= _qsum(terms))

    if bounds:
        return _lower_bounds(mdl, total, energy, tsc, eref, hier, bound, ladder,
                             lambda sol: _extract(sol, X, Z, D, facs, spatial, n))

    # ---------------------------------------------------------------- solve
    h = mdl.h
    bidx = bound.index

    def set_bound(v):
        h.changeColBounds(bidx, 0.0, v if math.isfinite(v) else highspy.kHighsInf)

    set_bound(math.inf)
    vals = _start_values(start, facs, n, X, Z, Y, D, R, Hs, hier) if start is not None and incumbent else []
    if vals and fix_order:
        xs = {id(x) for row in X for x in row}
        for v, x in vals:
            if id(v) in xs:
                h.changeColBounds(v.index, x, x)
    first = None
    if vals:
        # the start's own point: integers fixed, the LP gives the rest; then it is HiGHS's first incumbent
        for v, x in vals:
            h.changeColBounds(v.index, x, x)
        fixed = mdl.minimize(total)
        full = h.getSolution() if fixed.feasible else None
        xs = {id(x) for row in X for x in row}
        for v, x in vals:
            if not (fix_order and id(v) in xs):
                h.changeColBounds(v.index, 0.0, 1.0)
        if full is not None:
            h.setSolution(full)
        first = mdl._solve(lambda _e: h.run(), None)
        if not first.feasible and fixed.feasible:
            first = fixed
    else:
        first = mdl.minimize(total)
    if not first.feasible:
        return []
    l_star = first[total]
    if not lexicographic:
        return [(_extract(first, X, Z, D, facs, spatial, n), l_star / tsc, first.status)]
    out = []
    eps = (1e-3,) if objective == "latency" else EPS
    best_full = h.getSolution()
    _set_objective(h, energy)
    for ep in eps:
        set_bound(l_star * (1 + ep) + 1e-6)
        h.setSolution(best_full)
        sol = mdl._solve(lambda _e: h.run(), None)
        if not sol.feasible:
            sol = first
        out.append((_extract(sol, X, Z, D, facs, spatial, n), sol[total] / tsc, sol.status))
    return out


def _lower_bounds(mdl: Model, total, energy, tsc: float, eref: float, hier: LN.Hierarchy, bound=None,
                  ladder=(), extract=None) -> dict:
    """Minimal latency and minimal energy, each on its own, with HiGHS's proven (dual) bounds; then the least
    energy under every latency of ``ladder`` (an epsilon-constraint sweep) and the EDP bound it proves."""
    out = {}
    for name, expr, scale in (("cycles", total, 1 / tsc), ("energy_pj", energy, eref)):
        sol = mdl.minimize(expr)
        info = mdl.h.getInfo()
        dual = float(info.mip_dual_bound)
        out[name] = {"lower": dual * scale, "best": sol.objective * scale if sol.feasible else math.nan,
                     "status": sol.status, "nodes": int(info.mip_node_count)}
        if extract is not None and sol.feasible:
            out[name]["mapping"] = extract(sol)
    # EDP >= (least latency) x (least energy): each bound holds for every mapping of the space
    out["edp_lower"] = out["cycles"]["lower"] * hier.cycle_ns * out["energy_pj"]["lower"]
    if callable(ladder):
        ladder = tuple(ladder(out["cycles"]["lower"], out["energy_pj"]["lower"]))
    if not ladder:
        return out
    steps = []
    for cap in ladder:
        mdl.h.changeColBounds(bound.index, 0.0, cap * tsc)
        sol = mdl.minimize(energy)
        info = mdl.h.getInfo()
        infeasible = sol.status == "Infeasible"
        low = math.inf if infeasible else max(float(info.mip_dual_bound) * eref, out["energy_pj"]["lower"])
        steps.append({"cycles_cap": cap, "energy_lower": low, "status": sol.status,
                      "energy_best": sol.objective * eref if sol.feasible else math.nan,
                      "nodes": int(info.mip_node_count),
                      "mapping": extract(sol) if (extract is not None and sol.feasible) else None})
    mdl.h.changeColBounds(bound.index, 0.0, highspy.kHighsInf)
    # a mapping with latency in (cap[k-1], cap[k]] has EDP >= cap[k-1] x (least energy under cap[k]); below the
    # first cap the latency bound stands for cap[-1]; above the last cap, the least energy without a cap
    lows = [out["cycles"]["lower"]] + [st["cycles_cap"] for st in steps]
    cands = [max(lo, out["cycles"]["lower"]) * st["energy_lower"] for lo, st in zip(lows, steps)]
    cands.append(steps[-1]["cycles_cap"] * out["energy_pj"]["lower"])
    out["ladder"] = steps
    out["edp_lower_ladder"] = min(cands) * hier.cycle_ns
    return out


def lower_bounds(layer: LN.Layer, hier: LN.Hierarchy, spatial: tuple, node_limit: int = 2000,
                 time_limit: float = 600.0, seed: int = 0, ladder=()) -> dict:
    """Lower bounds of latency, energy and EDP over every mapping of one spatial unrolling that the MIP spans.

    The MIP's latency is the exact model's, and its energy a lower bound of it
    (tangents of ``exp``), so ``cycles.lower x cycle_ns x energy_pj.lower``
    bounds the exact EDP of any mapping of this spatial unrolling from below
    (``edp_lower``); when a solve is optimal its bound equals its best point.

    With a ``ladder`` of latencies ``L_1 < ... < L_k`` (cycles; or a function
    of the proven latency and energy bounds giving them), the least
    energy ``E(L_j)`` under ``latency <= L_j`` is solved for each, and the
    bound tightens to ``edp_lower_ladder = min_j L_(j-1) E(L_j)`` (with
    ``L_0`` the latency bound and a last term ``L_k x`` the least energy):
    every mapping lies in one of the latency intervals, so within a ladder
    ratio ``L_j / L_(j-1)`` of the best EDP of the space when the energy
    bounds are tight.

    Returns
    -------
    dict
        ``cycles`` and ``energy_pj`` (``lower``: HiGHS's dual bound, ``best``:
        the best point found, ``mapping``, ``status``, ``nodes``) and
        ``edp_lower`` (pJ x ns); with a ladder also ``ladder`` (per cap:
        ``energy_lower``, ``energy_best``, ``mapping``, ``status``) and
        ``edp_lower_ladder``.
    """
    return solve(layer, hier, spatial, node_limit=node_limit, time_limit=time_limit, seed=seed, bounds=True,
                 ladder=ladder if callable(ladder) else tuple(ladder))


def _set_objective(h, expr) -> None:
    """Make ``expr`` the (minimised) objective without solving."""
    n = h.getNumCol()
    idx = np.arange(n, dtype=np.int32)
    cost = np.zeros(n)
    for i, v in zip(expr.idxs, expr.vals):
        cost[i] += v
    h.changeColsCost(n, idx, cost)
    h.changeObjectiveOffset(float(expr.constant or 0.0))
    h.changeObjectiveSense(highspy.ObjSense.kMinimize)


def normalise(m: LN.Mapping) -> LN.Mapping:
    """The same mapping with every cut moved above the loops its operand does not depend on (same cost)."""
    cuts = []
    for o, lv, c in m.cuts:
        while c > 0 and m.loops[c - 1][0] not in LN.RELEVANT[o]:
            c -= 1
        cuts.append((o, lv, c))
    return LN.Mapping(m.spatial, m.loops, tuple(cuts), m.double)


def _start_values(m: LN.Mapping, facs, n, X, Z, Y, D, R, Hs, hier) -> list:
    """Values of the integer variables for mapping ``m`` (empty if its loops are not these factors)."""
    m = normalise(m)
    if sorted(m.loops) != sorted(facs):
        return []
    slot_of, used = {}, set()
    for i, lp in enumerate(m.loops):  # equal factors fill slots in index order (symmetry breaking)
        f = next(f for f in range(n) if facs[f] == lp and f not in used)
        used.add(f)
        slot_of[f] = i
    vals = [(X[f][i], 1.0 if slot_of[f] == i else 0.0) for f in range(n) for i in range(n)]
    for key, zs in Z.items():
        c = m.cut(*key)
        vals += [(z, 1.0 if c == k else 0.0) for k, z in enumerate(zs)]
        vals += [(Y[key][f], 1.0 if c is not None and slot_of[f] >= c else 0.0) for f in range(n)]
        if D[key] is not None:
            vals.append((D[key], 1.0 if key in m.double else 0.0))
        if key in R:
            red = c is not None and any(d in LN.REDUCTION for d, _ in m.loops[:c])
            vals.append((R[key], 1.0 if red else 0.0))
    for (key, ax), (pairs, H) in Hs.items():
        c = m.cut(*key)
        lv = hier.level(key[1])
        pd, rd = ("P", "R") if ax == 0 else ("Q", "S")
        ext = LN.tile_extents(hier, m, c if c is not None else len(m.loops), lv.per_core)
        if c is None:
            ext = LN.tile_extents(hier, LN.Mapping(m.spatial, (), ()), 0, lv.per_core)
        target = (ext[pd], ext[rd])
        vals += [(h, 1.0 if pr == target else 0.0) for pr, h in zip(pairs, H)]
    return vals


def _extract(sol, X, Z, D, facs, spatial, n) -> LN.Mapping:
    loops = []
    for i in range(n):
        f = max(range(n), key=lambda f: sol[X[f][i]])
        loops.append(facs[f])
    cuts, dbl = [], set()
    for (o, lv), zs in Z.items():
        vals = [sol[z] for z in zs]
        if max(vals) > 0.5:
            cuts.append((o, lv, int(max(range(n + 1), key=lambda c: vals[c]))))
            if D[(o, lv)] is not None and sol[D[(o, lv)]] > 0.5:
                dbl.add((o, lv))
    return LN.Mapping(spatial, tuple(loops), tuple(cuts), frozenset(dbl))

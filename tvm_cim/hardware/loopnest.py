"""Loop-nest cost primitives of a weight-streaming CIM accelerator (MIREDO, paper 001, sec. III-IV).

Part of the one cost model (:mod:`tvm_cim.hardware.cost`): the dataflow
optimiser (:mod:`tvm_cim.compiler.dataflow`) minimises the latency these
functions give, its MIP encodes the same recursion (but for output
write-backs sharing a port, which it counts as excluding, as before: an upper
bound there, see :func:`latency`), and the benchmark
compares both with the event-level execution of the loop nest
(:mod:`tvm_cim.simulator.loopnest`), which books every transfer and MVM on
the ports and the macro instead of summing a formula.

A layer is the convolution loop nest over ``N G K C P Q R S`` (batch, groups,
output channels, input channels per group, output rows and columns, kernel
rows and columns).  A :class:`Mapping` gives

* spatial unrolling: per spatial axis of the chip (cores, macro rows, macro
  columns; ``hw.dataflow.spatial``) the factors of the loops it unrolls;
* temporal loops, outermost first, ``(dim, factor)``;
* per operand ``I``/``W``/``O`` and used memory level, the *cut*: the level
  holds the data of ``loops[cut:]`` (plus the spatial tile); a level not
  listed is bypassed; the outermost level (off-chip) holds everything;
* which ``(operand, level)`` pairs run double-buffered.

Latency (cycles; the recursion of Table III / the code's ``Critical``):
the tile of ``(operand, level)`` is brought in at every iteration of the
loop just outside its cut (``T`` = bits over the slower of the parent's
shared port and the level's own port); a single-buffered transfer adds to
the iteration (``T + body``), a double-buffered one overlaps it
(``max(T, body)``; its first tile is exposed once, since the stream
prefetches across loop boundaries).  Weights enter the macro in
memory mode, which excludes computing, so they are single-buffered unless
the chip has ``weight_double_buffer``.  Output tiles are written back (and,
when reduction loops remain outside, read back: twice ``T``).  A
single-buffered input or weight level whose only reader is a
single-buffered child refilled at an inner loop is refilled while the
child's last tile is being used: only what exceeds that block is exposed
(:func:`_exposed`).  One MVM takes
``input bits / dac_bits`` cycles, or longer when the innermost input level
cannot feed it or the innermost output level cannot absorb its partial sums.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from . import cost
from .schema import CIMHardware

DIMS = ("N", "G", "K", "C", "P", "Q", "R", "S")
RELEVANT = {
    "I": frozenset("NGCPQRS"),
    "W": frozenset("GKCRS"),
    "O": frozenset("NGKPQ"),
}
REDUCTION = frozenset("CRS")


# ============================================================================ workload
@dataclass(frozen=True)
class Layer:
    """One convolution (or matrix product: ``P = Q = R = S = 1``) as a loop nest.

    Attributes
    ----------
    name : str
    bounds : dict
        Loop bound of every dimension of :data:`DIMS`.
    stride, dilation : tuple of int
        ``(rows, cols)``; they decide the input tile (halo).
    """

    name: str
    bounds: dict
    stride: tuple = (1, 1)
    dilation: tuple = (1, 1)

    @staticmethod
    def conv(name: str, n: int, k: int, c: int, p: int, q: int, r: int, s: int, groups: int = 1,
             stride=(1, 1), dilation=(1, 1)) -> "Layer":
        """A grouped convolution: ``k`` and ``c`` are per group."""
        b = dict(N=n, G=groups, K=k, C=c, P=p, Q=q, R=r, S=s)
        return Layer(name, b, tuple(stride), tuple(dilation))

    @property
    def macs(self) -> int:
        return math.prod(self.bounds[d] for d in DIMS)

    def elems(self, operand: str, t: dict) -> int:
        """Elements of ``operand`` covered by a tile with per-dimension extents ``t`` (missing = 1)."""
        g = lambda d: t.get(d, 1)  # noqa: E731
        if operand == "W":
            return g("G") * g("K") * g("C") * g("R") * g("S")
        if operand == "O":
            return g("N") * g("G") * g("K") * g("P") * g("Q")
        h = (g("P") - 1) * self.stride[0] + (g("R") - 1) * self.dilation[0] + 1
        w = (g("Q") - 1) * self.stride[1] + (g("S") - 1) * self.dilation[1] + 1
        return g("N") * g("G") * g("C") * min(h, self._in_extent(0)) * min(w, self._in_extent(1))

    def _in_extent(self, axis: int) -> int:
        b = self.bounds
        p, r = (b["P"], b["R"]) if axis == 0 else (b["Q"], b["S"])
        return (p - 1) * self.stride[axis] + (r - 1) * self.dilation[axis] + 1


# ============================================================================ the chip, as the optimiser sees it
@dataclass(frozen=True)
class Level:
    """A memory level (``hw.dataflow.levels``)."""

    name: str
    order: int
    operands: frozenset
    capacity_bits: int
    bandwidth_bits: int
    per_core: bool
    double_buffer: bool
    bypass: bool
    read_pj: float
    write_pj: float


@dataclass(frozen=True)
class Axis:
    """A spatial axis (``hw.dataflow.spatial``)."""

    name: str
    order: int
    size: int
    loops: frozenset


@dataclass(frozen=True)
class Hierarchy:
    """The dataflow view of a chip: memory levels, spatial axes, macro.

    Attributes
    ----------
    levels : tuple of Level
        Outermost first.
    axes : tuple of Axis
        Outermost (the cores) first.
    mvm_cycles : int
        Cycles of one MVM (bit-serial input steps).
    bits : dict
        Bits per element moved of every operand (``O``: partial sums; ``O_final``: outputs whose reduction
        is done, requantised before they leave a level, :func:`out_bits`).
    compartments : int
        Weight tiles a macro stores (one computes at a time).
    weight_double_buffer : bool
    mvm_energy_pj : float
        One MVM on one macro (array, converters, input drivers, shift-and-add).
    leakage_mw : float
    cycle_ns : float
    """

    levels: tuple
    axes: tuple
    mvm_cycles: int
    bits: dict
    compartments: int
    weight_double_buffer: bool
    mvm_energy_pj: float
    leakage_mw: float
    cycle_ns: float
    _by_name: dict = field(default_factory=dict, compare=False, repr=False)

    @staticmethod
    def of(hw: CIMHardware) -> "Hierarchy":
        """Read ``hw.dataflow`` (and the macro fields the MVM cost needs).

        Raises
        ------
        ValueError
            The chip has no ``[dataflow]`` levels.
        """
        df = hw.dataflow
        if not df.levels:
            raise ValueError(f"hardware {hw.name!r} has no [dataflow] levels; the MIREDO dataflow needs them "
                             "(see targets/miredo.toml)")
        levels = tuple(sorted(
            (Level(n, lv.order, frozenset(lv.operands), lv.capacity_bits, lv.bandwidth_bits, lv.per_core,
                   lv.double_buffer, lv.bypass, lv.read_energy_pj_per_bit, lv.write_energy_pj_per_bit)
             for n, lv in df.levels.items()), key=lambda lv: lv.order))
        axes = tuple(sorted((Axis(n, a.order, a.size, frozenset(a.loops)) for n, a in df.spatial.items()),
                            key=lambda a: a.order))
        wbits, ibits = hw.crossbar.weight_bits, hw.crossbar.input_bits
        xb = hw.crossbar
        _, e = cost.read(hw, xb.rows, hw.logical_cols(wbits), 1, 1, wbits, ibits, False)
        bits = {"I": ibits, "W": wbits, "O": df.psum_bits, "O_final": df.output_bits or df.psum_bits}
        return Hierarchy(levels, axes, cost.input_steps(hw, ibits, False), bits,
                         hw.core.crossbars, df.weight_double_buffer, float(sum(e.values())), cost.leakage_mw(hw),
                         hw.cycle_ns, {lv.name: lv for lv in levels})

    def level(self, name: str) -> Level:
        return self._by_name[name]

    def levels_of(self, operand: str) -> list:
        """Levels that may hold ``operand``, outermost first."""
        return [lv for lv in self.levels if operand in lv.operands]

    @property
    def cores(self) -> int:
        """Instances of a per-core level: the size of the outermost spatial axis."""
        return self.axes[0].size


# ============================================================================ a mapping
@dataclass(frozen=True)
class Mapping:
    """A dataflow of one layer (see the module docstring).

    Attributes
    ----------
    spatial : tuple
        ``((axis, ((dim, factor), ...)), ...)``.
    loops : tuple
        Temporal loops ``((dim, factor), ...)``, outermost first.
    cuts : tuple
        ``((operand, level, cut), ...)`` for every used level below the outermost.
    double : frozenset
        ``(operand, level)`` pairs that run double-buffered.
    """

    spatial: tuple
    loops: tuple
    cuts: tuple
    double: frozenset = frozenset()

    # The lookups below are memoised on the instance (outside the dataclass fields: equality, hashing and the
    # text forms ignore them); the optimiser evaluates each mapping's tiles dozens of times.

    def cut(self, operand: str, level: str) -> int | None:
        memo = self.__dict__.get("_cut_of")
        if memo is None:
            memo = {}
            for o, lv, c in self.cuts:
                memo.setdefault((o, lv), c)  # the first entry, as a scan would find it
            object.__setattr__(self, "_cut_of", memo)
        return memo.get((operand, level))

    def spatial_of(self, axis: str) -> dict:
        """Factor of every dimension the spatial axis unrolls (a shared dict: do not modify)."""
        memo = self.__dict__.get("_spatial_of")
        if memo is None:
            memo = {}
            for a, fs in self.spatial:
                if a not in memo:
                    out: dict = {}
                    for d, f in fs:
                        out[d] = out.get(d, 1) * f
                    memo[a] = out
            object.__setattr__(self, "_spatial_of", memo)
        return memo.get(axis, {})

    def as_dict(self) -> dict:
        """Plain values (JSON, program attributes)."""
        return {"spatial": {a: [list(x) for x in fs] for a, fs in self.spatial},
                "loops": [list(x) for x in self.loops],
                "cuts": [list(x) for x in self.cuts],
                "double": sorted("/".join(x) for x in self.double)}

    def text(self) -> str:
        """One line: spatial, then loops outermost first with level boundaries ``|level:operand``."""
        sp = " ".join(f"{a}[" + ",".join(f"{d}{f}" for d, f in fs) + "]" for a, fs in self.spatial)
        parts = []
        for i, (d, f) in enumerate(self.loops):
            marks = [f"|{lv}:{o}{'*' if (o, lv) in self.double else ''}" for o, lv, c in self.cuts if c == i]
            parts += marks + [f"{d}{f}"]
        parts += [f"|{lv}:{o}{'*' if (o, lv) in self.double else ''}" for o, lv, c in self.cuts
                  if c == len(self.loops)]
        return sp + " :: " + " ".join(parts)


def check(layer: Layer, hier: Hierarchy, m: Mapping) -> list[str]:
    """What is wrong with a mapping (empty when valid): bounds, axes, levels, cut order, capacities."""
    errs = []
    prod = {d: 1 for d in DIMS}
    for ax in hier.axes:
        sp = m.spatial_of(ax.name)
        if math.prod(sp.values()) > ax.size:
            errs.append(f"axis {ax.name}: {sp} exceeds {ax.size}")
        for d, f in sp.items():
            if d not in ax.loops and f > 1:
                errs.append(f"axis {ax.name} cannot unroll {d}")
            prod[d] *= f
    for d, f in m.loops:
        prod[d] *= f
    for d in DIMS:
        if prod[d] != layer.bounds[d]:
            errs.append(f"dimension {d}: factors give {prod[d]}, bound {layer.bounds[d]}")
    for o in "IWO":
        prev = 0
        for lv in hier.levels_of(o)[1:]:
            c = m.cut(o, lv.name)
            if c is None:
                if not lv.bypass:
                    errs.append(f"{o} cannot bypass {lv.name}")
                continue
            if c < prev:
                errs.append(f"{o}: level {lv.name} cut {c} above an outer level's {prev}")
            prev = c
        for oo, lvn, c in m.cuts:
            if oo == o and o not in hier.level(lvn).operands:
                errs.append(f"{o} cannot live in {lvn}")
    for lv in hier.levels[1:]:
        used = sum(tile_bits(layer, hier, m, o, lv) * (2 if (o, lv.name) in m.double else 1)
                   for o in "IWO" if m.cut(o, lv.name) is not None)
        if used > lv.capacity_bits:
            errs.append(f"{lv.name}: {used} bits exceed {lv.capacity_bits}")
        for o in "IWO":
            if (o, lv.name) in m.double and not (lv.double_buffer or (o == "W" and hier.weight_double_buffer)):
                errs.append(f"{lv.name} cannot double-buffer")
    return errs


# ============================================================================ tiles and transfers
def _core_axis(hier: Hierarchy) -> str:
    return hier.axes[0].name


def tile_extents(hier: Hierarchy, m: Mapping, cut: int, per_core: bool) -> dict:
    """Per-dimension extents of the data of ``loops[cut:]`` with the spatial tile (one core's, or all cores').

    Memoised on the mapping per chip (a shared dict: do not modify).
    """
    memo = m.__dict__.get("_extents")
    if memo is None or memo[0] is not hier.axes:  # held, so the identity test cannot meet a reused id
        memo = (hier.axes, {})
        object.__setattr__(m, "_extents", memo)
    key = (cut, per_core)
    t = memo[1].get(key)
    if t is None:
        t = memo[1][key] = _tile_extents(hier, m, cut, per_core)
    return t


def _tile_extents(hier: Hierarchy, m: Mapping, cut: int, per_core: bool) -> dict:
    t = {d: 1 for d in DIMS}
    for ax in hier.axes:
        if per_core and ax.name == _core_axis(hier):
            continue
        for d, f in m.spatial_of(ax.name).items():
            t[d] *= f
    for d, f in m.loops[cut:]:
        t[d] *= f
    return t


def tile_bits(layer: Layer, hier: Hierarchy, m: Mapping, operand: str, lv: Level) -> int:
    """Bits of ``operand`` one instance of level ``lv`` holds under mapping ``m``."""
    c = m.cut(operand, lv.name)
    if c is None:
        return 0
    return layer.elems(operand, tile_extents(hier, m, c, lv.per_core)) * hier.bits[operand]


def out_bits(hier: Hierarchy, partial: bool) -> int:
    """Bits per output element moved: partial sums at ``psum_bits``, final outputs (every reduction done) at
    ``output_bits`` (the reference's ``O_final``: requantised before they leave the level)."""
    return hier.bits["O"] if partial else hier.bits["O_final"]


def drain_bits(layer: Layer, hier: Hierarchy, spatial: tuple) -> int:
    """Bits per output element an MVM drains into the innermost output level: final (:func:`out_bits`) only when
    every reduction dimension is wholly unrolled in space, else partial sums that a temporal loop still
    accumulates.  ``spatial``: a mapping's ``spatial`` field."""
    sp: dict = {}
    for _, fs in spatial:
        for d, f in fs:
            sp[d] = sp.get(d, 1) * f
    return out_bits(hier, any(layer.bounds[d] > sp.get(d, 1) for d in REDUCTION))


def copies(hier: Hierarchy, m: Mapping, operand: str) -> int:
    """Distinct per-core tiles of ``operand`` (core-unrolled loops it depends on; the rest is multicast)."""
    return math.prod(f for d, f in m.spatial_of(_core_axis(hier)).items() if d in RELEVANT[operand])


def used_levels(hier: Hierarchy, m: Mapping, operand: str) -> list:
    """``(level, cut)`` of the levels ``operand`` uses, outermost first (the outermost with cut 0)."""
    lvs = hier.levels_of(operand)
    out = [(lvs[0], 0)]
    for lv in lvs[1:]:
        c = m.cut(operand, lv.name)
        if c is not None:
            out.append((lv, c))
    return out


@dataclass(frozen=True)
class Transfer:
    """Refills of one ``(operand, level)`` from its parent level.

    Attributes
    ----------
    operand, level, parent : str
    slot : int
        The loop whose every iteration refills the tile (``-1``: once, before the nest).
    cycles : float
        One refill (write-back plus read-back for partial outputs: ``times``).
    times : int
        Port uses per refill (2 for outputs with reduction loops still outside).
    count : int
        Refills over the whole layer.
    bits : int
        Bits over the parent's port per refill (all cores).
    double : bool
    """

    operand: str
    level: str
    parent: str
    slot: int
    cycles: float
    times: int
    count: int
    bits: int
    double: bool


def transfers(layer: Layer, hier: Hierarchy, m: Mapping) -> list:
    """Every ``(operand, level)`` refill stream of a mapping."""
    out = []
    for o in "IWO":
        chain = used_levels(hier, m, o)
        for (par, _), (lv, c) in zip(chain[:-1], chain[1:]):
            # refilled at the innermost loop above the cut the operand depends on (inner irrelevant loops reuse it)
            slot = max((j for j in range(c) if m.loops[j][0] in RELEVANT[o]), default=-1)
            times = 1
            per = tile_bits(layer, hier, m, o, lv)  # what the level holds (outputs: partial sums)
            if o == "O":
                if any(d in REDUCTION and f > 1 for d, f in m.loops[:slot + 1]):
                    times = 2  # partial sums go back and come back
                else:  # the tile leaves once, its reduction done: requantised on the way out
                    per = per // hier.bits["O"] * out_bits(hier, False)
            total = per * (copies(hier, m, o) if lv.per_core else 1)
            child_bw = lv.bandwidth_bits
            t = max(total / par.bandwidth_bits, per / child_bw)
            count = math.prod(f for _, f in m.loops[:slot + 1])
            dbl = (o, lv.name) in m.double
            out.append(Transfer(o, lv.name, par.name, slot, float(t), times, count, total, dbl))
    return out


def mvm_feed(layer: Layer, hier: Hierarchy, m: Mapping) -> tuple[float, float, str, str]:
    """Cycles to feed one MVM's inputs and to drain its partial sums, and the levels they use.

    Returns
    -------
    feed, drain : float
    i_level, o_level : str
        The innermost used input and output levels.
    """
    res = []
    for o in "IO":
        lv, _ = used_levels(hier, m, o)[-1]
        t = {d: 1 for d in DIMS}
        for ax in hier.axes[1:]:
            for d, f in m.spatial_of(ax.name).items():
                t[d] *= f
        per = layer.elems(o, t) * (hier.bits["I"] if o == "I" else drain_bits(layer, hier, m.spatial))
        bits = per if lv.per_core else per * copies(hier, m, o)
        res.append((bits / lv.bandwidth_bits, lv.name))
    return float(res[0][0]), float(res[1][0]), res[0][1], res[1][1]


def leaf_cycles(layer: Layer, hier: Hierarchy, m: Mapping, fed: tuple | None = None) -> float:
    """One MVM step of all cores: the bit-serial MVM, unless feeding or draining it is slower
    (both, when inputs and partial sums use the same port).  ``fed``: :func:`mvm_feed`'s result, when known."""
    feed, drain, i_lv, o_lv = fed or mvm_feed(layer, hier, m)
    return max(float(hier.mvm_cycles), feed, drain, feed + drain if i_lv == o_lv else 0.0)


# ============================================================================ latency and energy
def port_cycles(hier: Hierarchy, m: Mapping, t: Transfer) -> dict:
    """Cycles one refill of ``t`` occupies each port it uses (the slower one for its whole duration)."""
    par, lv = hier.level(t.parent), hier.level(t.level)
    per = t.bits / max(1, copies(hier, m, t.operand)) if lv.per_core else t.bits
    return {x.name: (per if x.per_core else t.bits) / x.bandwidth_bits for x in (par, lv)}


def mvm_port_share(layer: Layer, hier: Hierarchy, m: Mapping, fed: tuple | None = None) -> dict:
    """Share of their ports the MVMs' input feed and partial-sum drain use while computing
    (``fed``: :func:`mvm_feed`'s result, when known)."""
    fed = fed or mvm_feed(layer, hier, m)
    feed, drain, i_lv, o_lv = fed
    step = leaf_cycles(layer, hier, m, fed)
    share: dict = {}
    for lv, t in ((i_lv, feed), (o_lv, drain)):
        share[lv] = share.get(lv, 0.0) + t / step
    return share


def port_shares(hier: Hierarchy, m: Mapping, t: Transfer, pc: dict | None = None) -> dict:
    """Share of each of its ports a refill of ``t`` takes (1 on the slower end; ``pc``: its
    :func:`port_cycles`, when known)."""
    pc = pc or port_cycles(hier, m, t)
    top = max(pc.values())
    return {p: (c / top if top > 0 else 0.0) for p, c in pc.items()}


def heavy(share: float) -> bool:
    """A transfer taking more than half of a port excludes every other transfer from it."""
    return share > 0.5 + 1e-9


def occupancy_terms(hier: Hierarchy, m: Mapping, t: Transfer, sh: dict | None = None) -> list:
    """What one refill of ``t`` adds to the port-occupancy classes, per cycle of its duration.

    Returns ``(port, cls, weight)`` triples.  A transfer taking more than half
    of a port excludes every other transfer from it (``cls = '*'``: weight 1 in
    every class of the port).  The lighter ones share the port (class ``None``:
    weight = share), except that those heavy on another port ``q`` exclude each
    other there (class ``q``: weight 1): a DRAM-to-buffer stream occupies half
    the buffer's port, and no buffer-to-core transfer, which needs all of it,
    can run meanwhile.  ``sh``: its :func:`port_shares`, when known.
    """
    sh = sh or port_shares(hier, m, t)
    out = []
    for p, x in sh.items():
        if heavy(x):
            out.append((p, "*", 1.0))
        else:
            out.append((p, None, x))
            out += [(p, q, 1.0) for q, y in sh.items() if q != p and heavy(y)]
    return out


def occupancy_classes(hier: Hierarchy, m: Mapping, trs: list, terms: dict | None = None) -> list:
    """The ``(port, cls)`` occupancy classes of a mapping's transfers (see :func:`occupancy_terms`;
    ``terms``: theirs by ``id``, when known)."""
    keys = set()
    for t in trs:
        for p, c, _ in terms[id(t)] if terms is not None else occupancy_terms(hier, m, t):
            keys.add((p, None))
            if c != "*":
                keys.add((p, c))
    return sorted(keys, key=str)


def pass_through(trs: list) -> dict:
    """Refills whose level only feeds a child level refilled at the same loop: ``{id(parent): child}``.

    Such a level's tile is in use only while the child copies it (inputs) or
    sends its partial sums up (outputs), not while the macros compute, so its
    own refill overlaps the computation even when it is single-buffered.
    """
    out = {}
    for t in trs:
        for c in trs:
            if c.operand == t.operand and c.parent == t.level and c.slot == t.slot:
                out[id(t)] = c
    return out


def holds(share: float) -> bool:
    """A transfer taking all of a port (its slower end) leaves no room on it for any other transfer."""
    return share >= 1.0 - 1e-9


def blocking(hier: Hierarchy, m: Mapping, trs: list, passing: dict, i: int, pcs: dict | None = None,
             shs: dict | None = None) -> dict:
    """Overlapped refills at loop ``i`` that hold a port the inner loops' serial refills need: ``{port: cycles}``.

    A refill that overlaps the body of loop ``i`` (a double-buffered output
    write-back, or a single-buffered pass-through level, :func:`pass_through`) and takes all
    of a port (:func:`holds`) is issued when the iteration starts (an output
    write-back when its tile is complete, a pass-through refill when the
    child has copied the tile before), before the inner loops issue theirs;
    every refill of an inner loop (slot ``> i``) using that port waits for it
    (a double-buffered one is only one tile ahead), and so do the macros
    waiting for that refill: its duration adds to the iteration instead of
    overlapping it.  Output write-backs go first at an iteration boundary, so
    the input and weight refills of loop ``i`` itself wait for them too.  A
    double-buffered input or weight prefetch does not block: it is requested
    when its buffer frees, during the iteration before, and moves in the room
    the inner refills leave (the port-occupancy bound of :func:`latency`
    covers it).  ``pcs``, ``shs``: the transfers' :func:`port_cycles` and
    :func:`port_shares` by ``id``, when known.
    """
    pcs = pcs if pcs is not None else {id(t): port_cycles(hier, m, t) for t in trs}
    inner_ports, here_ports = set(), set()
    for t in trs:
        if t.slot > i:
            inner_ports |= set(pcs[id(t)])
        elif t.slot == i and t.operand != "O":
            here_ports |= set(pcs[id(t)])
    out: dict = {}
    for t in trs:
        if t.slot != i or not (t.operand == "O" and t.double or id(t) in passing and not t.double):
            continue
        waiting = inner_ports | here_ports if t.operand == "O" else inner_ports
        for p, x in (shs[id(t)] if shs is not None else port_shares(hier, m, t, pcs[id(t)])).items():
            if holds(x) and p in waiting:
                out[p] = out.get(p, 0.0) + t.times * t.cycles
    return out


def yield_rate(hier: Hierarchy, m: Mapping, t: Transfer, mvm_share: dict, sh: dict | None = None) -> float:
    """Pace (fraction of full) at which a refill of ``t`` moves while the macros compute.

    The MVMs' input feed and partial-sum drain have priority on their ports
    (``mvm_share``, :func:`mvm_port_share`); a transfer moves in the room they
    leave, at the pace of the port with the least room for it: ``min(1, (1 -
    u_p) / s_p)`` over its ports ``p`` (``s_p``: its share of ``p`` at full
    pace, :func:`port_shares`; ``sh``, when known).  0 when the MVMs use all of one of its ports.
    """
    r = 1.0
    for p, x in (sh or port_shares(hier, m, t)).items():
        u = mvm_share.get(p, 0.0)
        if u > 0 and x > 0:
            r = min(r, max(0.0, 1.0 - u) / x)
    return r


def overlap_room(busy: dict, share: dict) -> float:
    """Pace (fraction of full) at which a transfer with port shares ``share`` moves beside one with ``busy``.

    The room ``1 - busy[p]`` the other leaves on every port both use, over
    what this one needs there, at most 1 (:func:`port_shares` of both).  A
    double-buffered DRAM prefetch cannot move while a single-buffered
    write-back holds the DRAM port: MobileNetV2 features.1.conv.1 with its
    input prefetched and its outputs written back at the same loop, the
    MVMs holding the buffer's port meanwhile, ran 21,504 cycles per
    iteration (compute, write-back and prefetch one after another) against
    the 14,336 the model gave when the prefetch's room beside the write-back
    was not counted.
    """
    r = 1.0
    for p, x in share.items():
        if x > 0 and p in busy:
            r = min(r, max(0.0, 1.0 - busy[p]) / x)
    return r


def _phases_add(phases: dict, cycles: float, use: dict, mvm: bool = False) -> dict:
    """``phases`` (``{key: (cycles, {port: share in use}, by the MVMs)}``, one entry per distinct use of the
    ports) with ``cycles`` more of ``use`` (``mvm``: the MVMs' feed, which has priority over every refill)."""
    if cycles <= 1e-9:
        return phases
    key = (mvm,) + tuple(sorted((p, round(u, 9)) for p, u in use.items() if u > 1e-12))
    d = phases.get(key, (0.0,))[0]
    phases[key] = (d + cycles, use, mvm)
    return phases


def _unplaced(doubles: list, windows: list, shs: dict, terms: dict, double: frozenset) -> float:
    """Cycles the double-buffered refills ``doubles`` of one iteration need beyond its ``windows``
    (``(cycles, {port: share in use}, by the MVMs)``: the inner loops' phases, each serial refill of the
    iteration; ``double``: the mapping's double-buffered ``(operand, level)``).

    In each window they move in turn, at the pace the room left on their
    ports allows (:func:`overlap_room`): output write-backs first, in the
    room the MVMs leave (they are issued when the iteration starts, and the
    inner refills move in the room they leave: the occupancy classes of
    :func:`latency` bound those), then input and weight prefetches, in the
    room everything else leaves (:func:`blocking`).  What is left runs
    alone, under the port-occupancy classes of
    :func:`occupancy_terms` (a refill taking all of a port excludes the
    others from it; those heavy on another port exclude each other there).
    MobileNetV2 features.4.conv.2 (a 1x1 layer whose input prefetch, output
    write-back and the partial sums' move up to the global buffer all run
    at one loop, the MVMs using three quarters of the buffer's port): 144
    cycles per iteration executed, 104 when each refill was given the room
    the MVMs leave as if it were alone.
    """
    left = {id(t): float(t.times * t.cycles) for t in doubles}
    order = [t for t in doubles if t.operand == "O"] + [t for t in doubles if t.operand != "O"]
    for cycles, use, mvm in windows:
        if cycles <= 0:
            continue
        taken: dict = {}  # port -> share the refills moved here take
        for t in order:
            if left[id(t)] <= 0:
                continue
            busy = use if mvm or t.operand != "O" else {}
            busy = {p: busy.get(p, 0.0) + taken.get(p, 0.0) for p in shs[id(t)]}
            moved = min(left[id(t)], overlap_room(busy, shs[id(t)]) * cycles)
            for p, x in shs[id(t)].items():
                taken[p] = taken.get(p, 0.0) + x * moved / cycles
            left[id(t)] -= moved
    classes: dict = {}
    for t in doubles:
        for p, c, _ in terms[id(t)]:
            classes.setdefault((p, None), 0.0)
            if c not in (None, "*"):
                classes.setdefault((p, c), 0.0)
    for t in doubles:
        # a double-buffered output write-back into a double-buffered level runs beside that level's own
        # (as in latency's occupancy classes)
        into_double = t.operand == "O" and (t.operand, t.parent) in double
        for p, c, w in terms[id(t)]:
            for k in classes:
                if k[0] == p and (k[1] == c or c == "*" and (k[1] is None or not into_double)):
                    classes[k] += w * left[id(t)]
    return max(classes.values(), default=0.0)


def _exposed(t: Transfer, trs: list, body: dict, rate: float = 1.0) -> float:
    """Cycles a single-buffered refill adds to its iteration.

    An input or weight level read only by one single-buffered child level
    refilled at an inner loop ``j`` is free once that child has copied its
    last tile of the current iteration: its refill then overlaps the last
    iteration's inner loops of ``j`` (``body[j]``), and only what is longer
    adds -- unless output tiles are written back at a loop in between (they
    go first at an iteration boundary, on the same ports).
    """
    full = t.times * t.cycles
    if t.operand == "O":
        return full
    kids = [c for c in trs if c.operand == t.operand and c.parent == t.level]
    if len(kids) != 1 or kids[0].slot <= t.slot or kids[0].double \
            or any(o.operand == "O" and t.slot < o.slot <= kids[0].slot for o in trs):
        return full  # a double-buffered child copies ahead; an output write-back in between takes the ports first
    return max(0.0, full - rate * body[kids[0].slot])


def latency(layer: Layer, hier: Hierarchy, m: Mapping) -> float:
    """Cycles of the layer under mapping ``m`` (the stall-aware recursion of the module docstring).

    Per loop ``i`` (innermost first), one iteration lasts the longest of

    * the inner loops plus every single-buffered refill at ``i`` whose tile the
      inner loops use (``T + body``), plus, per port, the overlapped refills at
      ``i`` that hold a port an inner loop's refill needs
      (:func:`blocking`);
    * the serial part plus what of the double-buffered refills at ``i``
      (``T`` each: they overlap the body) finds no room in the iteration
      (:func:`_unplaced`): the iteration is a list of phases, each with what
      it uses of every port (the MVMs computing, each serial refill, the
      inner loops' phases and prefetch leftovers, kept per loop); in each,
      output write-backs move in the room the MVMs leave, input and weight
      prefetches in the room everything leaves; what is left runs alone under
      the port-occupancy classes below.  The last iteration prefetches
      nothing, so what a prefetch adds beyond every other term comes off its
      first tile's prologue once;
    * every single-buffered level that only feeds a child refilled at the same
      loop: its refill plus the child's (:func:`pass_through`), moving only at
      :func:`yield_rate` while the macros compute (``C`` cycles per
      iteration): ``T + T_child + (1 - rate) C``;
    * every port's occupancy (:func:`occupancy_terms`): the inner loops'
      occupancy (with the MVMs' input and partial-sum traffic) plus that of
      every refill at ``i``.  In an exclusion class ``(p, q)`` a refill at
      ``i`` heavy on ``p`` or an input or weight refill heavy on ``q`` adds
      to the inner loops' occupancy (and to the cycles of their refills heavy
      on ``q``, whichever is larger); an output write-back at ``i`` heavy on
      ``q`` does not: it is issued when the iteration starts, before the
      inner loops' refills, which move in the room it leaves (the port's
      shares bound them together), so it only adds to the cycles of the
      refills heavy on ``q``; nor does a double-buffered output write-back
      heavy on ``p`` into a double-buffered level, which runs beside that
      level's own write-back of the tile before.  (Counting every one as
      excluding put MobileNetV2 features.2.conv.0.0 under weight-stationary's
      mapping at 477,568 cycles against 364,856 executed.)  The MIP
      (:mod:`tvm_cim.compiler.solvers.dataflow_mip`) keeps counting them as
      excluding, an upper bound of this latency: encoding the sharing (an
      indicator per class and loop) cost its node-limited search its points
      (ResNet-18 conv1 389,537 -> 483,336 simulated cycles, network EDP over
      zigzag 1.164x -> 1.142x); the mappings that need it come from
      :func:`tvm_cim.compiler.dataflow.double_buffered_variants`, judged by
      this model.
    """
    return _latency(layer, hier, m, transfers(layer, hier, m))


def _latency(layer: Layer, hier: Hierarchy, m: Mapping, trs: list) -> float:
    """:func:`latency` given the mapping's :func:`transfers` (each port figure computed once per transfer)."""
    passing = pass_through(trs)
    fed = mvm_feed(layer, hier, m)
    pcs = {id(t): port_cycles(hier, m, t) for t in trs}
    shs = {id(t): port_shares(hier, m, t, pcs[id(t)]) for t in trs}
    terms = {id(t): occupancy_terms(hier, m, t, shs[id(t)]) for t in trs}
    lat = leaf_cycles(layer, hier, m, fed)
    occ = {c: 0.0 for c in occupancy_classes(hier, m, trs, terms)}
    heavy_sum = {c: 0.0 for c in occ if c[1] is not None}  # per class (p, q): cycles of the refills heavy on q
    mvm_share = mvm_port_share(layer, hier, m, fed)
    for p, u in mvm_share.items():  # the MVMs' inputs and partial sums, per step
        occ[(p, None)] = occ.get((p, None), 0.0) + u * lat
    rate = {id(t): yield_rate(hier, m, t, mvm_share, shs[id(t)]) for t in trs}
    computing = lat  # cycles the macros compute in one iteration of the inner loops
    phases = _phases_add({}, lat, mvm_share, True)  # what one iteration of the inner loops does to the ports
    outer_double = min((t.slot for t in trs if t.double and t.slot >= 0), default=len(m.loops))
    body: dict = {}  # loop index -> duration of one iteration's inner loops (without its own refills)
    extends: dict = {}  # overlapped refill id -> cycles it adds to its iteration beyond every other term
    for i in range(len(m.loops) - 1, -1, -1):
        n = m.loops[i][1]
        body[i] = lat
        here = [t for t in trs if t.slot == i]
        exposed = [(t, _exposed(t, trs, body, rate[id(t)])) for t in here if not t.double and id(t) not in passing]
        serial = lat + sum(e for _, e in exposed)
        crit = serial + max(blocking(hier, m, trs, passing, i, pcs, shs).values(), default=0.0)
        ph, qh, ow = {}, {}, {}  # per class (p, q): cycles of the refills at i heavy on p, of those heavy on q,
        # and of the output write-backs among the latter
        doubles = [t for t in here if t.double]
        for t in here:
            if id(t) in passing and not t.double:  # the child copies the tile once it is in
                c = passing[id(t)]
                crit = max(crit, t.times * t.cycles + c.times * c.cycles + (1 - rate[id(t)]) * computing)
        for t in here:
            d = t.times * t.cycles
            # a double-buffered output write-back into a double-buffered level: pipelined behind that level's own
            into_double = t.operand == "O" and t.double and (t.operand, t.parent) in m.double
            for p, c, w in terms[id(t)]:
                for k in occ:
                    if k[0] == p and k[1] is None:
                        occ[k] += (w if c in (None, "*") else 0.0) * d
                    elif k[0] == p and c == "*" and not into_double:
                        ph[k] = ph.get(k, 0.0) + d
                    elif k[0] == p and c == k[1]:
                        qh[k] = qh.get(k, 0.0) + d
                        if t.operand == "O":
                            ow[k] = ow.get(k, 0.0) + d
        for k in heavy_sum:  # the exclusion classes (occupancy_terms): an output write-back at i heavy on q is
            # issued when the iteration starts, before the inner loops' refills, which move in the room it leaves
            # (the port's shares bound them together); a refill at i heavy on p, or an input or weight refill
            # heavy on q (issued after the inner loops' refills before it), excludes every refill heavy on q
            # inside and at i
            q_inner = heavy_sum[k]
            heavy_sum[k] += qh.get(k, 0.0)
            if ph.get(k, 0.0) + qh.get(k, 0.0) - ow.get(k, 0.0) > 0:
                occ[k] = max(occ[k], q_inner) + ph.get(k, 0.0) + qh.get(k, 0.0)
            else:
                occ[k] = max(occ[k], heavy_sum[k])
        crit = max(crit, max(occ.values(), default=0.0))
        unplaced = 0.0
        if doubles:  # the prefetches: the iteration's serial part plus what of them finds no room in it
            body_phases = _phases_add(dict(phases), lat - sum(v[0] for v in phases.values()), {})
            windows = [(d, use, mvm) for d, use, mvm in body_phases.values()]
            windows += [(e, shs[id(o)], False) for o, e in exposed]
            unplaced = _unplaced(doubles, windows, shs, terms, m.double)
            if serial + unplaced > crit:
                for t in doubles:  # what each adds beyond every other term: what its last prefetch adds
                    rest = [d for d in doubles if d is not t]
                    extends[id(t)] = serial + unplaced - max(crit, serial + _unplaced(rest, windows, shs, terms, m.double))
                crit = serial + unplaced
        if i > outer_double:  # one iteration's phases (for the prefetches of the loops above): the inner
            # loops', each serial refill, the prefetches' leftover (on their ports), and whatever else the
            # iteration waits for (no port)
            phases = _phases_add(phases, lat - sum(v[0] for v in phases.values()), {})
            for o, e in exposed:
                phases = _phases_add(phases, e, shs[id(o)])
            if unplaced > 0:
                phases = _phases_add(phases, unplaced, {p: 1.0 for t in doubles for p in shs[id(t)]})
            phases = _phases_add(phases, crit - sum(v[0] for v in phases.values()), {})
            phases = {k: (n * d, use, mvm) for k, (d, use, mvm) in phases.items()}
        lat = n * crit
        computing *= n
        occ = {k: n * v for k, v in occ.items()}
        heavy_sum = {k: n * v for k, v in heavy_sum.items()}
    # a double-buffered stream prefetches across loop boundaries: its first tile is exposed, and its last
    # iteration prefetches nothing (the iterations above count a prefetch each: what it added to the last one
    # comes off)
    prologue = sum(max(0.0, t.cycles - extends.get(id(t), 0.0)) for t in trs if t.double and t.slot >= 0)
    # so does a single-buffered pass-through input or weight level: its first tile has no body before it to hide
    # behind (the later ones arrive while the one before is computed on)
    prologue += sum(t.cycles for t in trs if id(t) in passing and not t.double and t.operand != "O" and t.slot >= 0)
    total = lat + prologue + sum(t.times * t.cycles for t in trs if t.slot == -1)
    # no port moves more than its bandwidth allows over the whole layer (refills and MVM feeds together)
    return max(total, max(port_loads(m, trs, fed, pcs).values()))


def port_loads(m: Mapping, trs: list, fed: tuple, pcs: dict, revisits_only: bool = False) -> dict:
    """Cycles every port is busy over the whole layer: every transfer's port uses and the MVMs' input feed and
    partial-sum drain.

    Parameters
    ----------
    m : Mapping
    trs : list of Transfer
        ``transfers(layer, hier, m)``.
    fed : tuple
        :func:`mvm_feed`'s result.
    pcs : dict
        ``id(transfer) -> port_cycles(hier, m, transfer)`` of every transfer of ``trs``.
    revisits_only : bool
        False (the model, :func:`latency`): a partial-sum tile is read back at every refill (``times`` uses
        each).  True (what the execution moves): only a tile visited before is read back, so the first visit
        of each of the ``distinct`` tiles (the product of the output loops' factors down to its slot) writes
        only.

    Returns
    -------
    dict
        Port (level name) -> busy cycles.
    """
    load: dict = {}
    for t in trs:
        uses = t.count * t.times
        if revisits_only and t.times == 2:
            uses -= math.prod(f for d, f in m.loops[:t.slot + 1] if d in RELEVANT["O"])
        for p, c in pcs[id(t)].items():
            load[p] = load.get(p, 0.0) + uses * c
    steps = math.prod(f for _, f in m.loops)
    feed, drain, i_lv, o_lv = fed
    load[i_lv] = load.get(i_lv, 0.0) + steps * feed
    load[o_lv] = load.get(o_lv, 0.0) + steps * drain
    return load


@dataclass(frozen=True)
class Cost:
    """Latency and energy of a layer under a mapping.

    Attributes
    ----------
    cycles : float
    ns : float
    energy_pj : float
    breakdown : dict
        pJ by component: ``mvm``, ``<level>`` (reads and writes of that level), ``leakage``.
    """

    cycles: float
    ns: float
    energy_pj: float
    breakdown: dict

    @property
    def edp(self) -> float:
        """Energy-delay product (pJ x ns)."""
        return self.energy_pj * self.ns


def energy(layer: Layer, hier: Hierarchy, m: Mapping, cycles: float, trs: list | None = None) -> dict:
    """Energy (pJ by component) of the layer under ``m`` lasting ``cycles`` (``trs``: its
    :func:`transfers`, when known)."""
    br: dict = {}

    def add(k, v):
        br[k] = br.get(k, 0.0) + v

    for t in trs if trs is not None else transfers(layer, hier, m):
        par, lv = hier.level(t.parent), hier.level(t.level)
        bits = t.bits * t.count
        add(par.name, bits * par.read_pj)
        add(lv.name, bits * lv.write_pj)
        if t.times == 2:  # the partial sums written back too
            add(par.name, bits * par.write_pj)
            add(lv.name, bits * lv.read_pj)
    steps = math.prod(f for _, f in m.loops)
    active = math.prod(m.spatial_of(_core_axis(hier)).values())
    mvms = steps * active
    feed_i, feed_o = used_levels(hier, m, "I")[-1][0], used_levels(hier, m, "O")[-1][0]
    t = {d: 1 for d in DIMS}
    for ax in hier.axes[1:]:
        for d, f in m.spatial_of(ax.name).items():
            t[d] *= f
    add(feed_i.name, mvms * layer.elems("I", t) * hier.bits["I"] * feed_i.read_pj)
    add(feed_o.name, mvms * layer.elems("O", t) * drain_bits(layer, hier, m.spatial) * feed_o.write_pj)
    add("mvm", mvms * hier.mvm_energy_pj)
    add("leakage", hier.leakage_mw * cycles * hier.cycle_ns)
    return br


def evaluate(layer: Layer, hier: Hierarchy, m: Mapping) -> Cost:
    """Latency and energy of ``layer`` under ``m`` (the analytical model)."""
    trs = transfers(layer, hier, m)
    cyc = _latency(layer, hier, m, trs)
    br = energy(layer, hier, m, cyc, trs)
    return Cost(cyc, cyc * hier.cycle_ns, float(sum(br.values())), br)


def _roofline(layer: Layer, hier: Hierarchy, m: Mapping, trs: list) -> float:
    fed = mvm_feed(layer, hier, m)
    steps = math.prod(f for _, f in m.loops)
    loads = port_loads(m, trs, fed, {id(t): port_cycles(hier, m, t) for t in trs}, revisits_only=True)
    return max([steps * leaf_cycles(layer, hier, m, fed)] + list(loads.values()))


def roofline_latency(layer: Layer, hier: Hierarchy, m: Mapping) -> float:
    """Cycles of ``layer`` under ``m`` if every transfer overlapped everything else: the larger of the MVMs'
    cycles and the busiest port's occupancy (:func:`port_loads` of what the execution moves: every refill and
    write-back, the read-backs of partial sums visited before, the MVMs' input feed and partial-sum drain).

    The model MIREDO describes prior analytical models by: "latency equals the maximum access time across all
    memory hierarchy levels" (paper 001, sec. III-B), blind to single buffering, weight-load stalls and
    operand synchronisation.  A floor of every execution of ``m`` that keeps within the ports' bandwidths
    (the loop-nest simulator's does, but for a compute block whose start did not settle, which it runs on top
    of the ports' bookings: ``SimResult.arbitration['unsettled']``); used by the ``zigzag-roofline`` baseline
    to choose its mappings (:func:`tvm_cim.compiler.dataflow.zigzag`), not to report them.

    Parameters
    ----------
    layer : Layer
    hier : Hierarchy
    m : Mapping

    Returns
    -------
    float
        Cycles.
    """
    return _roofline(layer, hier, m, transfers(layer, hier, m))


def evaluate_roofline(layer: Layer, hier: Hierarchy, m: Mapping) -> Cost:
    """:func:`evaluate` with :func:`roofline_latency` for the cycles (leakage over those cycles).

    Parameters
    ----------
    layer, hier, m
        As for :func:`roofline_latency`.

    Returns
    -------
    Cost
    """
    trs = transfers(layer, hier, m)
    cyc = _roofline(layer, hier, m, trs)
    br = energy(layer, hier, m, cyc, trs)
    return Cost(cyc, cyc * hier.cycle_ns, float(sum(br.values())), br)


# ============================================================================ text form (program operands)
def encode(layer: Layer, m: Mapping) -> dict:
    """Operands of a ``CIM.loopnest`` meta-operator: the layer and the mapping as compact strings."""
    b = layer.bounds
    return {
        "layer": ",".join(f"{d}{b[d]}" for d in DIMS) + f";s{layer.stride[0]}x{layer.stride[1]}"
                 f";d{layer.dilation[0]}x{layer.dilation[1]}",
        "spatial": ";".join(f"{a}:" + ".".join(f"{d}{f}" for d, f in fs) for a, fs in m.spatial),
        "loops": ",".join(f"{d}{f}" for d, f in m.loops),
        "cuts": ";".join(f"{o}.{lv}.{c}" for o, lv, c in m.cuts),
        "double": ";".join(f"{o}.{lv}" for o, lv in sorted(m.double)),
    }


def _df(tok: str) -> tuple:
    return tok[0], int(tok[1:])


def decode(layer: str, spatial: str, loops: str, cuts: str, double: str, name: str = "layer") -> tuple:
    """Inverse of :func:`encode`: ``(Layer, Mapping)``.

    Raises
    ------
    ValueError
        Malformed text.
    """
    try:
        dims, st, dl = layer.split(";")
        bounds = dict(_df(t) for t in dims.split(","))
        stride = tuple(int(x) for x in st[1:].split("x"))
        dil = tuple(int(x) for x in dl[1:].split("x"))
        sp = []
        for part in spatial.split(";"):
            a, fs = part.split(":")
            sp.append((a, tuple(_df(t) for t in fs.split(".") if t)))
        lp = tuple(_df(t) for t in loops.split(",") if t)
        cs = tuple((p[0], p[1], int(p[2])) for p in (x.split(".") for x in cuts.split(";") if x))
        db = frozenset(tuple(x.split(".")) for x in double.split(";") if x)
    except (ValueError, IndexError) as e:
        raise ValueError(f"malformed loop nest: {e}") from None
    if set(bounds) != set(DIMS):
        raise ValueError(f"malformed loop nest: dimensions {sorted(bounds)}")
    return Layer(name, bounds, stride, dil), Mapping(tuple(sp), lp, cs, db)

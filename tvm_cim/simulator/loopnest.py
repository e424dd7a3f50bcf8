"""Event-level execution of a layer's loop nest on a weight-streaming CIM accelerator (MIREDO's Sec. III).

The analytical model (:func:`tvm_cim.hardware.loopnest.latency`) sums a
recursion; this module *executes* the mapping: it walks the temporal loops
in order and, whenever the data an operand's level holds changes, books a
transfer on the ports of the two levels (a shared level has one port for
all cores; a per-core level one per core, all cores doing the same thing at
the same time).  A transfer starts when

* both ports have room: a transfer takes of each port the share its bits
  need at the pace of the slower one, so transfers interleave on a faster
  port (a single-ported SRAM serving requests in turn),
* the parent level holds the data (its own refill is done), and
* the level has room: single-buffered, the previous tile is no longer used;
  double-buffered, the tile before it is no longer used (ping-pong).

Weights enter a macro in memory mode: a single-buffered weight load waits
for the macro to stop computing and blocks it.  Output tiles are written
back when they change and read back only if they were written before
(partial sums of reduction loops still running).  The innermost block of
loops without any transfer runs as one compute interval of ``steps x MVM``
cycles; its inputs and partial sums occupy the ports of the innermost
input and output levels meanwhile.  Latency is the end of the last
write-back.  Durations of one transfer and of one MVM step come from the
cost primitives (:mod:`tvm_cim.hardware.loopnest`); how they overlap is
what this module decides.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from ..hardware import loopnest as LN


@dataclass
class _Stream:
    t: LN.Transfer
    key_slots: tuple  # slots whose (relevant) indices identify the tile
    key: tuple | None = None
    uses: list = None  # end of last use of every tile so far, in order
    ready: float = 0.0  # the current tile is present
    seen: set = None
    parent_stream: "_Stream | None" = None

    def __post_init__(self):
        self.uses, self.seen = [], set()


class _Port:
    """A level's port shared by time: bookings ``(start, end, share)``; shares at any time add up to at most 1.

    A transfer moving ``bits`` in ``dur`` cycles takes ``bits / bandwidth / dur``
    of each port it uses (the slower port fully), so transfers over a faster
    port interleave, as on a single-ported SRAM serving requests in turn.
    """

    __slots__ = ("iv",)
    KEEP = 24

    def __init__(self):
        self.iv: list = []

    def load(self, t: float) -> float:
        return sum(f for a, b, f in self.iv if a <= t < b)

    def fits(self, start: float, end: float, share: float) -> bool:
        pts = [start] + [a for a, _, _ in self.iv if start < a < end]
        return all(self.load(t) + share <= 1.0 + 1e-9 for t in pts)

    def add(self, start: float, end: float, share: float) -> None:
        self.iv.append((start, end, share))
        if len(self.iv) > self.KEEP:
            self.iv.sort(key=lambda x: x[1])
            del self.iv[: len(self.iv) - self.KEEP]


def _earliest(uses: list, t: float, dur: float) -> float:
    """The earliest start at or after ``t`` where every ``(port, share)`` fits for ``dur`` cycles."""
    cands = sorted({t} | {b for p, _ in uses for _, b, _ in p.iv if b > t})
    for c in cands:
        if all(p.fits(c, c + dur, f) for p, f in uses):
            return c
    return cands[-1]


@dataclass(frozen=True)
class SimResult:
    """What the execution gives.

    Attributes
    ----------
    cycles : float
        End of the last write-back.
    compute_cycles : float
        Cycles the macros compute.
    stall_cycles : float
        Cycles they wait (transfers, weight loads): ``cycles - compute_cycles``.
    transfers : dict
        Refills executed per ``operand/level``.
    energy_pj : dict
        pJ by component of what was executed: ``mvm``, every level's reads and
        writes (refills, write-backs, read-backs actually done, MVM feeds), ``leakage``.
    """

    cycles: float
    compute_cycles: float
    stall_cycles: float
    transfers: dict
    energy_pj: dict

    @property
    def total_energy_pj(self) -> float:
        return float(sum(self.energy_pj.values()))


def simulate(layer: LN.Layer, hier: LN.Hierarchy, m: LN.Mapping, max_events: int = 2_000_000) -> SimResult:
    """Execute ``layer`` under mapping ``m`` and return its timing.

    Raises
    ------
    ValueError
        Invalid mapping (:func:`tvm_cim.hardware.loopnest.check`) or more outer iterations than ``max_events``.
    """
    errs = LN.check(layer, hier, m)
    if errs:
        raise ValueError("invalid mapping: " + "; ".join(errs))
    trs = LN.transfers(layer, hier, m)
    loops = m.loops
    depth = max((t.slot + 1 for t in trs), default=0)
    outer_n = math.prod(f for _, f in loops[:depth])
    if outer_n > max_events:
        raise ValueError(f"{outer_n} outer iterations exceed max_events={max_events}")
    block_steps = math.prod(f for _, f in loops[depth:])
    feed, drain, i_lv, o_lv = LN.mvm_feed(layer, hier, m)
    step = LN.leaf_cycles(layer, hier, m)

    streams: dict = {}
    for t in trs:
        rel = LN.RELEVANT[t.operand]
        s = _Stream(t, tuple(j for j in range(t.slot + 1) if loops[j][0] in rel))
        streams[(t.operand, t.level)] = s
    for (o, _), s in streams.items():
        s.parent_stream = streams.get((o, s.t.parent))
    order = sorted(streams.values(), key=lambda s: (hier.level(s.t.level).order))
    ports = {lv.name: _Port() for lv in hier.levels}
    macro_free = 0.0
    busy = 0.0
    counts = {f"{s.t.operand}/{s.t.level}": 0 for s in order}
    energy: dict = {}

    def charge(level: str, pj: float) -> None:
        energy[level] = energy.get(level, 0.0) + pj

    def moved(s: _Stream, back: bool) -> None:  # one refill (or write-back) of a stream's tile
        par, lv = hier.level(s.t.parent), hier.level(s.t.level)
        if back:
            charge(lv.name, s.t.bits * lv.read_pj)
            charge(par.name, s.t.bits * par.write_pj)
        else:
            charge(par.name, s.t.bits * par.read_pj)
            charge(lv.name, s.t.bits * lv.write_pj)

    w_blocks = not hier.weight_double_buffer

    def book(s: _Stream, earliest: float, reps: int = 1) -> float:
        dur = reps * s.t.cycles
        if dur <= 0:
            return earliest
        par, lv = hier.level(s.t.parent), hier.level(s.t.level)
        per = s.t.bits / max(1, LN.copies(hier, m, s.t.operand)) if lv.per_core else s.t.bits
        uses = [(ports[x.name], min(1.0, reps * (per if x.per_core else s.t.bits) / x.bandwidth_bits / dur))
                for x in (par, lv)]
        start = _earliest(uses, earliest, dur)
        for p, f in uses:
            p.add(start, start + dur, f)
        return start + dur

    def slot_free(s: _Stream) -> float:
        k = 2 if s.t.double else 1
        return s.uses[-k] if len(s.uses) >= k else 0.0

    macro = hier.levels_of("W")[-1].name
    outs_inner_first = [s for s in reversed(order) if s.t.operand == "O"]
    innermost = [max((s for s in order if s.t.operand == o), key=lambda s: hier.level(s.t.level).order)
                 for o in "IWO" if any(s.t.operand == o for s in order)]
    ranges = [range(f) for _, f in loops[:depth]]
    for idx in itertools.product(*ranges) if depth else [()]:
        changed = {}
        for s in order:
            key = tuple(idx[j] for j in s.key_slots)
            if key != s.key:
                changed[id(s)] = key
                counts[f"{s.t.operand}/{s.t.level}"] += 1
        # ---- finished output tiles go back, innermost level first (a parent waits for its children)
        child_done = 0.0
        for s in outs_inner_first:
            if id(s) in changed and s.key is not None:
                s.ready = book(s, max(s.uses[-1], child_done))
                child_done = s.uses[-1] = s.ready  # the buffer is free once written back
                if s.parent_stream is not None:  # the parent's tile is in use until its children are back
                    s.parent_stream.uses[-1] = max(s.parent_stream.uses[-1], s.ready)
                moved(s, back=True)
        # ---- refills, outer levels first (a child reads what its parent holds)
        for s in order:
            if id(s) not in changed:
                continue
            key = changed[id(s)]
            par_ready = s.parent_stream.ready if s.parent_stream else 0.0
            room = slot_free(s)
            if s.t.operand == "O":
                if not s.t.double:
                    room = max(room, s.ready)  # one buffer: the write-back must finish first
                if key in s.seen:
                    s.ready = book(s, max(room, par_ready))
                    moved(s, back=False)
                else:
                    s.ready = room
                s.seen.add(key)
            else:
                earliest = max(room, par_ready)
                blocks = s.t.operand == "W" and s.t.level == macro and w_blocks
                if blocks:
                    earliest = max(earliest, macro_free)
                s.ready = book(s, earliest)
                moved(s, back=False)
                if blocks:
                    macro_free = s.ready  # memory mode: the macro cannot compute meanwhile
            s.key = key
            s.uses.append(0.0)
            if s.parent_stream is not None:  # the parent's tile is in use until its children have copied it
                s.parent_stream.uses[-1] = max(s.parent_stream.uses[-1], s.ready)
        # ---- the compute block
        start = max([macro_free] + [s.ready for s in order])
        end = start + block_steps * step
        for lvn, t in ((i_lv, feed), (o_lv, drain)):  # the MVMs' inputs and partial sums use these ports
            if t > 0:
                ports[lvn].add(start, end, min(1.0, t / step))
        macro_free = end
        busy += end - start
        for s in innermost:  # the MVMs read (and the partial sums go to) the innermost levels
            s.uses[-1] = end
    # ---- the last output tiles go back, innermost level first
    finish = macro_free
    for s in sorted((s for s in order if s.t.operand == "O"), key=lambda s: -hier.level(s.t.level).order):
        if s.key is not None:
            finish = max(finish, book(s, max(s.uses[-1], finish)))
            moved(s, back=True)
    if not any(s.t.operand == "O" for s in order):
        finish = macro_free
    # the MVMs: every core that unrolls a loop computes; inputs fed and partial sums drained per MVM
    active = math.prod(m.spatial_of(hier.axes[0].name).values())
    mvms = outer_n * block_steps * active
    t = {d: 1 for d in LN.DIMS}
    for ax in hier.axes[1:]:
        for d, f in m.spatial_of(ax.name).items():
            t[d] *= f
    charge(i_lv, mvms * layer.elems("I", t) * hier.bits["I"] * hier.level(i_lv).read_pj)
    charge(o_lv, mvms * layer.elems("O", t) * hier.bits["O"] * hier.level(o_lv).write_pj)
    charge("mvm", mvms * hier.mvm_energy_pj)
    charge("leakage", hier.leakage_mw * finish * hier.cycle_ns)
    return SimResult(finish, busy, finish - busy, counts, energy)

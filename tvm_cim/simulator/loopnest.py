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
from array import array
from dataclasses import dataclass, field

import numpy as np

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

    A transfer takes of each port it uses the share its bits need; when other
    bookings leave less than that, it proceeds at the pace of the port with
    the least room left (a DMA streaming bursts into the free cycles of the
    port, as an arbiter interleaves requests on a single-ported SRAM).
    """

    __slots__ = ("iv", "ends", "horizon", "min_end")
    KEEP = 4096  # safety net: bookings kept; older ones are forgotten and the port counts as full until they end
    # (the simulation first forgets bookings that end before any later transfer may start, :meth:`forget`;
    # with 96 and only this rule, VGG/MobileNet layers with thousands of small write-backs per refill saw the
    # port full over a whole block: MobileNetV2 features.14.conv.1.0 ran 58,854 cycles instead of 42,1xx)
    PRUNE = 64  # bookings above which :meth:`forget` filters
    SCAN = 128  # bookings above which :meth:`after` selects with numpy (below, a list comprehension is faster)

    def __init__(self):
        self.iv: list = []
        self.ends = array("d")  # the bookings' ends, in the order of ``iv`` (every change to ``iv`` mirrored)
        self.horizon = 0.0
        self.min_end = math.inf  # at most the earliest end of a booking in ``iv`` (removals leave it below)

    def forget(self, floor: float) -> None:
        """Drop the bookings that end by ``floor`` (no later transfer starts before it: exact).  The list is
        filtered only when its earliest end is at or below ``floor`` (``min_end``, a lower bound kept as
        bookings are added; most iterations drop nothing)."""
        if len(self.iv) > self.PRUNE and self.min_end <= floor:
            self._keep((np.frombuffer(self.ends) > floor).nonzero()[0])
            self.min_end = min(self.ends, default=math.inf)

    def _keep(self, idx: np.ndarray) -> None:
        iv = self.iv
        self.iv = [iv[i] for i in idx.tolist()]
        self.ends = array("d", [x[1] for x in self.iv])

    def after(self, t: float) -> list:
        """The bookings that end after ``t``, in booking order."""
        if len(self.iv) <= self.SCAN:
            return [x for x in self.iv if x[1] > t]
        iv = self.iv
        return [iv[i] for i in (np.frombuffer(self.ends) > t).nonzero()[0].tolist()]

    def load(self, t: float) -> float:
        return sum(f for a, b, f in self.iv if a <= t < b)

    def add(self, start: float, end: float, share: float) -> None:
        if end <= start or share <= 0:
            return
        self.iv.append((start, end, share))
        self.ends.append(end)
        if end < self.min_end:
            self.min_end = end

    def truncate(self, n: int) -> None:
        """Undo the bookings made after the first ``n``."""
        del self.iv[n:]
        del self.ends[n:]

    def remove(self, k: int) -> None:
        """Undo the ``k``-th booking."""
        del self.iv[k]
        del self.ends[k]

    def trim(self) -> None:
        """Keep at most :attr:`KEEP` bookings (between iterations: one iteration's bookings can be undone)."""
        if len(self.iv) > self.KEEP:
            self.iv.sort(key=lambda x: x[1])
            drop = len(self.iv) - self.KEEP // 2
            self.horizon = max(self.horizon, self.iv[drop - 1][1])
            del self.iv[:drop]
            self.ends = array("d", [x[1] for x in self.iv])


def _stream(uses: list, t: float) -> float:
    """Book a transfer that needs ``w`` cycles of every ``(port, w)`` in ``uses`` at full pace (the slowest
    port's ``w`` is its duration when nothing else is moving), from ``t`` on, into the room the ports
    leave; returns its end."""
    w_max = max(w for _, w in uses)
    if w_max <= 0:
        return t
    t = max([t] + [p.horizon for p, _ in uses])
    ivs = [p.after(t) for p, _ in uses]
    if not any(ivs):  # nothing else on these ports: full pace
        for p, w in uses:
            p.add(t, t + w_max, w / w_max)
        return t + w_max
    pts = sorted({x[1] for iv in ivs for x in iv} | {x[0] for iv in ivs for x in iv if x[0] > t})
    left, now, k = 1.0, t, 0  # share of the transfer still to move
    segs = []
    # the bookings under way at ``now`` (a <= now < b), per port, by their index in its list: ``now`` only grows,
    # so they are kept as it moves instead of scanning every booking at every step; their shares add up in the
    # list's order, the same sum as over the whole list
    by_start = [sorted(range(len(iv)), key=lambda i: iv[i][0]) for iv in ivs]
    entered = [0] * len(ivs)
    active: list = [[] for _ in ivs]
    while left * w_max > 1e-9:
        while k < len(pts) and pts[k] <= now:
            k += 1
        nxt = pts[k] if k < len(pts) else math.inf
        rate = 1.0 / w_max  # transfer fraction per cycle
        for j, ((_, w), iv) in enumerate(zip(uses, ivs)):
            q, order, new = entered[j], by_start[j], False
            while q < len(order) and iv[order[q]][0] <= now:
                active[j].append(order[q])
                q, new = q + 1, True
            entered[j] = q
            active[j] = [i for i in active[j] if iv[i][1] > now]
            if new:
                active[j].sort()
            if w > 0:
                rate = min(rate, max(0.0, 1.0 - sum(iv[i][2] for i in active[j])) / w)
        if rate <= 1e-12:
            now = nxt
            continue
        end = min(now + left / rate, nxt)
        if end <= now:  # what is left is below the clock's resolution
            break
        if segs and segs[-1][1] == now and segs[-1][2] == rate:
            segs[-1][1] = end
        else:
            segs.append([now, end, rate])
        left -= rate * (end - now)
        now = end
    for a, b, r in segs:
        for p, w in uses:
            p.add(a, b, r * w)
    return now


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
    arbitration : dict
        ``rebooked``: compute blocks whose port needs the transfers booked before them
        would have exceeded, so the transfers were booked again around them;
        ``unsettled``: of those, blocks whose start did not settle (they run on top).
    """

    cycles: float
    compute_cycles: float
    stall_cycles: float
    transfers: dict
    energy_pj: dict
    arbitration: dict = field(default_factory=dict)

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

    def book(s: _Stream, earliest: float) -> float:
        if s.t.cycles <= 0:
            return earliest
        par, lv = hier.level(s.t.parent), hier.level(s.t.level)
        per = s.t.bits / max(1, LN.copies(hier, m, s.t.operand)) if lv.per_core else s.t.bits
        return _stream([(ports[x.name], (per if x.per_core else s.t.bits) / x.bandwidth_bits) for x in (par, lv)],
                       earliest)

    def slot_free(s: _Stream) -> float:
        k = 2 if s.t.double else 1
        return s.uses[-k] if len(s.uses) >= k else 0.0

    macro = hier.levels_of("W")[-1].name
    outs_inner_first = [s for s in reversed(order) if s.t.operand == "O"]
    innermost = [max((s for s in order if s.t.operand == o), key=lambda s: hier.level(s.t.level).order)
                 for o in "IWO" if any(s.t.operand == o for s in order)]
    block = block_steps * step
    shares: dict = {}  # the MVMs' inputs and partial sums use these ports while computing
    for lvn, t in ((i_lv, feed), (o_lv, drain)):
        if t > 0:
            shares[lvn] = shares.get(lvn, 0.0) + min(1.0, t / step)
    port_list = list(ports.values())

    def transfers_of(idx: tuple, mf: float, moves: list, seen_now: list) -> tuple:
        """Book the write-backs and refills of iteration ``idx``; returns the macro's free time (weights in
        memory mode) and the earliest start of its compute block.  ``moves`` gets ``(stream, what)`` of every
        tile changed (``None``), written back (``True``) or read (``False``); ``seen_now`` the output tiles
        begun."""
        changed = {}
        for s in order:
            key = tuple(idx[j] for j in s.key_slots)
            if key != s.key:
                changed[id(s)] = key
                moves.append((s, None))
        # ---- finished output tiles go back, innermost level first (a parent waits for its children)
        child_done = 0.0
        for s in outs_inner_first:
            if id(s) in changed and s.key is not None:
                # into the parent's current tile: it must be there (a single-buffered parent's own write-back done)
                par_ready = s.parent_stream.ready if s.parent_stream is not None else 0.0
                s.ready = book(s, max(s.uses[-1], child_done, par_ready))
                child_done = s.uses[-1] = s.ready  # the buffer is free once written back
                if s.parent_stream is not None:  # the parent's tile is in use until its children are back
                    s.parent_stream.uses[-1] = max(s.parent_stream.uses[-1], s.ready)
                moves.append((s, True))
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
                    moves.append((s, False))
                else:
                    s.ready = room
                seen_now.append((s, key))
            else:
                earliest = max(room, par_ready)
                blocks = s.t.operand == "W" and s.t.level == macro and w_blocks
                if blocks:
                    earliest = max(earliest, mf)
                s.ready = book(s, earliest)
                moves.append((s, False))
                if blocks:
                    mf = s.ready  # memory mode: the macro cannot compute meanwhile
            s.key = key
            s.uses.append(0.0)
            if s.parent_stream is not None:  # the parent's tile is in use until its children have copied it
                s.parent_stream.uses[-1] = max(s.parent_stream.uses[-1], s.ready)
        # the MVMs need the tiles of the innermost levels (an outer output level may still be writing back)
        return mf, max([mf] + [s.ready for s in innermost])

    def snapshot() -> tuple:
        return ([len(p.iv) for p in port_list],
                [(s.key, len(s.uses), s.uses[-1] if s.uses else None, s.ready) for s in order])

    def restore(snap: tuple) -> None:
        for p, n in zip(port_list, snap[0]):
            p.truncate(n)
        for s, (key, n, last, ready) in zip(order, snap[1]):
            s.key, s.ready = key, ready
            del s.uses[n:]
            if n:
                s.uses[-1] = last

    def oversubscribed(start: float, n0: list) -> bool:
        """The compute block from ``start`` would need more of a port than bookings made since ``n0`` leave."""
        end = start + block
        for lvn, u in shares.items():
            p = ports[lvn]
            k = port_list.index(p)
            if not any(a < end and b > start for a, b, _ in p.iv[n0[k]:]):
                continue  # only this iteration's transfers can yield to the compute block
            pts = sorted({start} | {x for a, b, _ in p.iv for x in (a, b) if start < x < end})
            if any(p.load(t) + u > 1.0 + 1e-9 for t in pts):
                return True
        return False

    stats = {"rebooked": 0, "unsettled": 0}
    ranges = [range(f) for _, f in loops[:depth]]
    for idx in itertools.product(*ranges) if depth else [()]:
        # every later request starts at or after the end of use of a stream's current tile (the one before
        # it when double-buffered: slot_free, write-backs), so bookings ending before the earliest of them
        # can be forgotten; a tile loaded once (slot -1) is not booked again but for its write-back after
        # the last block; a tile not used yet (0.0) is used no earlier than it is ready
        floor = min([min((x if x > 0 else s.ready) for x in s.uses[-(2 if s.t.double else 1):]) if s.uses else 0.0
                     for s in order if s.t.slot >= 0 or not s.uses], default=macro_free)
        for p in port_list:
            p.forget(floor)
            p.trim()
        snap = snapshot()
        moves: list = []
        seen_now: list = []
        mf, start = transfers_of(idx, macro_free, moves, seen_now)
        if shares and oversubscribed(start, snap[0]):
            # port arbitration: the MVMs' feed has priority, transfers move in the room it leaves.  Book the
            # compute block first at the start found and the transfers around it again, until the start
            # they give is the one reserved
            stats["rebooked"] += 1
            at = start
            for _ in range(8):
                restore(snap)
                moves, seen_now = [], []
                for lvn, u in shares.items():
                    ports[lvn].add(at, at + block, u)
                mf, start = transfers_of(idx, macro_free, moves, seen_now)
                if abs(start - at) <= 1e-9:
                    break
                at = start
            else:  # not settled: the block runs when its tiles are there, on top of what the ports hold
                stats["unsettled"] += 1
                for lvn in shares:
                    k = port_list.index(ports[lvn])
                    ports[lvn].remove(snap[0][k])  # the reservation, the first booking after the snapshot
                for lvn, u in shares.items():
                    ports[lvn].add(start, start + block, u)
        else:
            for lvn, u in shares.items():
                ports[lvn].add(start, start + block, u)
        for s, key in seen_now:
            s.seen.add(key)
        for s, back in moves:
            if back is None:
                counts[f"{s.t.operand}/{s.t.level}"] += 1
            else:
                moved(s, back)
        # ---- the compute block
        end = start + block
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
    charge(o_lv, mvms * layer.elems("O", t) * LN.drain_bits(layer, hier, m.spatial)
           * hier.level(o_lv).write_pj)
    charge("mvm", mvms * hier.mvm_energy_pj)
    charge("leakage", hier.leakage_mw * finish * hier.cycle_ns)
    return SimResult(finish, busy, finish - busy, counts, energy, stats)

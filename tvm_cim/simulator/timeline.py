"""Resource timeline: when every meta-operator runs.

Each executed meta-operator becomes an :class:`Events` row: a duration, the
resources it occupies (crossbars, core ALUs and links, the global-buffer port,
the chip ALU, the off-chip interface), its energy and power class, and the rows it depends on.  An
operation starts when its inputs are ready and all of its resources are free
(each resource keeps a sorted list of busy intervals, touching ones merged, so a
later operation can use an earlier gap).  ``parallel{}`` bodies overlap because they use different
resources and do not depend on each other.

:func:`schedule_graph` stitches the per-region event lists of one inference
into a single timeline: a region's input loads depend on the output stores of
the regions that produce its input (with the inter-layer pipeline, only on the
share of the output they need; without it, on all of it and on the end of the
previous region).  It returns start/finish times, the power profile (peak
power of crossbars and ADCs active at once), and per-resource utilisation.
"""

from __future__ import annotations

import bisect
import itertools
import operator
from array import array
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from ..common.runtime import gc_paused
from .compiled import Resources, TableEvents, place

LONG_DEPS = 16  # dependency lists longer than this are stored as compact int64 arrays
_BLOCK = 32  # busy intervals of a resource are kept in blocks of _BLOCK to 2 * _BLOCK
_NONE = float("-inf")  # the latest finish of no dependencies
_GAP_MARGIN = 1e-3  # ns: a block is skipped only if its largest gap is this much shorter than needed


class Prefix:
    """Dependencies of one operation: ``rest`` (a tuple, an array or a Prefix) plus the first ``count`` entries of
    a list that only grows (or never changes).

    Many operations depend on every earlier member of one list (the weight
    fetches of a layer larger than the chip: each pass's crossbar writes wait
    for all of them); sharing the list keeps that linear in memory, and the
    scheduler keeps a running maximum of its members' finish times.
    Iterates, ``len`` and ``in`` like a tuple of all the dependencies.
    """

    __slots__ = ("members", "count", "rest")

    def __init__(self, members: list, count: int, rest):
        self.members, self.count, self.rest = members, count, rest

    def __iter__(self):
        yield from self.rest
        yield from itertools.islice(self.members, self.count)

    def __len__(self) -> int:
        return len(self.rest) + self.count

    def __contains__(self, d) -> bool:
        return d in self.rest or d in itertools.islice(self.members, self.count)


@dataclass
class Events:
    """The operations of one region execution, in program order."""

    dur: list = field(default_factory=list)  # ns
    res: list = field(default_factory=list)  # tuple of resource names
    deps: list = field(default_factory=list)  # tuple of local indices
    energy: list = field(default_factory=list)  # pJ
    analog: list = field(default_factory=list)  # True for crossbar reads with DACs/ADCs (peak compute power)
    kind: list = field(default_factory=list)  # meta-operator kind
    inputs: list = field(default_factory=list)  # (index, frac0, frac1) region-input loads
    outputs: list = field(default_factory=list)  # (index, frac0, frac1) region-output stores
    ring: float = 0.0  # share of its output a line buffer in memory-mode arrays holds at once (0: whole)
    _last: tuple = field(default=(), repr=False, compare=False)  # the last short dependency tuple (shared)
    # (start, finish) arrays of the rows scheduled alone from time 0 (:func:`schedule_graph` records them)
    alone: tuple | None = field(default=None, repr=False, compare=False)

    def add(self, dur, res, deps, energy, analog, kind, shared: list | None = None) -> int:
        """Append an operation; ``shared``: it also depends on every current member of this growing list."""
        self.dur.append(float(dur))
        self.res.append(tuple(res))
        # long dependency lists (all reads of a chunk, of a crossbar) as compact int64 arrays
        if type(deps) is Prefix:  # already shared (a crossbar's readers, :meth:`Chip._write_deps_of`)
            d = deps
        elif len(deps) <= LONG_DEPS:
            d = tuple(deps)
            if d == self._last:  # the reads of one parallel block wait for the same operations: one tuple
                d = self._last
            self._last = d
        else:
            d = array("q", deps)
        self.deps.append(d if shared is None else Prefix(shared, len(shared), d))
        self.energy.append(float(energy))
        self.analog.append(bool(analog))
        self.kind.append(kind)
        return len(self.dur) - 1

    def stored(self, deps):
        """The stored form of a dependency list (what :meth:`add` keeps): a tuple (the previous short one
        when equal), an int64 array when longer than ``LONG_DEPS``; a :class:`Prefix` as it is."""
        if type(deps) is Prefix:
            return deps
        if len(deps) <= LONG_DEPS:
            d = tuple(deps)
            if d == self._last:
                d = self._last
            self._last = d
            return d
        return array("q", deps)

    def add_stored(self, dur: float, res: tuple, deps, energy: float, analog: bool, kind: str) -> int:
        """Append an operation whose dependencies are already in stored form (:meth:`stored`; several rows
        may share one) and whose resources are a tuple."""
        self.dur.append(float(dur))
        self.res.append(res)
        self.deps.append(deps)
        self.energy.append(float(energy))
        self.analog.append(bool(analog))
        self.kind.append(kind)
        return len(self.dur) - 1

    def __len__(self) -> int:
        return len(self.dur)


class _Resource:
    """Busy intervals of one resource, sorted by start, in blocks that know their largest gap.

    The intervals are disjoint (touching ones are merged) and kept in blocks of
    at most ``2 * _BLOCK``; each block records its last end and the largest gap
    before or between its own intervals (in a numpy array), so that
    :meth:`earliest` jumps over every block in which no gap is long enough in
    one vectorised search.  A batch of inputs leaves many short gaps on a
    resource; scanning them one by one made the schedule quadratic in the batch.
    """

    __slots__ = ("bs", "be", "gap", "last", "busy", "_room")

    def __init__(self):
        self.bs: list[list[float]] = []  # per block: starts of its intervals
        self.be: list[list[float]] = []  # per block: ends
        # per block: largest gap inside it or between the previous block's last end and its first start
        # (a view of the first blocks of ``_room``, which grows by doubling: a new block appends in place)
        self.gap = self._room = np.zeros(0)
        self.last: list[float] = []  # per block: its last end (sorted: bisect finds a block)
        self.busy = 0.0

    def earliest(self, t: float, dur: float) -> float:
        """Earliest start >= t of a gap of length dur."""
        last = self.last
        if not last or t >= last[-1]:
            return t
        b = bisect.bisect_right(last, t)  # the first block with an interval ending after t
        s, e = self.bs[b], self.be[b]
        i = bisect.bisect_right(e, t)
        nb = len(last)
        while True:
            n = len(s)
            while i < n:
                if s[i] >= t + dur:
                    return t
                if e[i] > t:
                    t = e[i]
                i += 1
            b += 1
            if b == nb:
                return t
            # t is the previous block's last end: jump to the first block that may hold a gap long enough
            # (a margin far above rounding: the exact test in the scan decides)
            fits = self.gap[b:] >= dur - _GAP_MARGIN
            k = int(fits.argmax())
            if not fits[k]:
                return last[-1]
            if k:
                b += k
                t = last[b - 1]
            s, e, i = self.bs[b], self.be[b], 0

    def _fix(self, b: int) -> None:
        """Recompute the gap of block ``b`` (after it or the previous block's last end changed)."""
        if b < len(self.bs):
            s, e = self.bs[b], self.be[b]
            g = max(map(operator.sub, s[1:], e[:-1]), default=0.0)
            if b:
                g = max(g, s[0] - self.last[b - 1])
            self.gap[b] = g

    def reserve(self, t: float, dur: float, count: bool = True) -> None:
        """Mark ``[t, t + dur)`` busy (a gap :meth:`earliest` returned); ``count=False``: its time was
        already added to :attr:`busy`."""
        end = t + dur
        last = self.last
        if count:
            self.busy += dur
        if not last or t >= last[-1]:  # the usual case: after everything booked so far
            if last and last[-1] == t:
                self.be[-1][-1] = end
                last[-1] = end
            elif not last or len(self.bs[-1]) >= 2 * _BLOCK:
                n = len(self.gap)
                if n == len(self._room):  # (what np.append of the new block's gap gives, amortised)
                    room = np.zeros(max(8, 2 * n))
                    room[:n] = self.gap
                    self._room = room
                self._room[n] = t - last[-1] if last else 0.0
                self.gap = self._room[:n + 1]
                self.bs.append([t])
                self.be.append([end])
                last.append(end)
            else:
                s, e = self.bs[-1], self.be[-1]
                if t - e[-1] > self.gap[-1]:
                    self.gap[-1] = t - e[-1]
                s.append(t)
                e.append(end)
                last[-1] = end
            return
        b = bisect.bisect_right(last, t)
        s, e = self.bs[b], self.be[b]
        i = bisect.bisect_left(s, t)
        if i > 0:
            joins_prev = e[i - 1] == t
        else:
            joins_prev = b > 0 and last[b - 1] == t
        joins_next = i < len(s) and s[i] == end
        if joins_prev and joins_next:
            if i > 0:
                e[i - 1] = e[i]
                del s[i], e[i]
            else:
                self.be[b - 1][-1] = e[0]
                last[b - 1] = e[0]
                del s[0], e[0]
                if not s:
                    del self.bs[b], self.be[b], last[b]
                    self.gap = self._room = np.delete(self.gap, b)
                    self._fix(b)
                    return
            last[b] = e[-1]
            self._fix(b)
        elif joins_prev:
            if i > 0:
                e[i - 1] = end
            else:
                self.be[b - 1][-1] = end
                last[b - 1] = end
            self._fix(b)
        elif joins_next:
            s[i] = t
            self._fix(b)
        else:
            s.insert(i, t)
            e.insert(i, end)
            if len(s) > 2 * _BLOCK:
                self.bs.insert(b + 1, s[_BLOCK:])
                self.be.insert(b + 1, e[_BLOCK:])
                del s[_BLOCK:], e[_BLOCK:]
                self.gap = self._room = np.insert(self.gap, b + 1, 0.0)
                last.insert(b + 1, self.be[b + 1][-1])
                last[b] = e[-1]
                self._fix(b + 1)
            self._fix(b)


class _Power:
    """Power drawn by crossbar reads over time (a step function): a peak-power cap by time-division activation.

    ``t[i]``, ``p[i]``: from ``t[i]`` to ``t[i + 1]`` (the last: forever) the reads running draw ``p[i]`` mW.
    """

    __slots__ = ("cap", "t", "p")

    def __init__(self, cap_mw: float):
        self.cap = float(cap_mw)
        self.t: list[float] = [0.0]
        self.p: list[float] = [0.0]

    def earliest(self, t: float, dur: float, power: float) -> float:
        """Earliest start >= t of a read drawing ``power`` for ``dur`` that keeps the total within the cap
        (a read above the cap alone runs when nothing else does)."""
        lim = max(self.cap - power, 0.0) * (1 + 1e-12)
        ts, ps = self.t, self.p
        i = bisect.bisect_right(ts, t) - 1
        j = i
        while j < len(ts) and (j == i or ts[j] < t + dur):
            if ps[j] > lim:  # over the cap somewhere in the window: start after this step
                if j + 1 == len(ts):
                    raise RuntimeError("power profile does not return to zero")  # the tail is always 0
                t = ts[j + 1]
                i = j = j + 1
                continue
            j += 1
        return t

    def _split(self, x: float) -> int:
        ts = self.t
        i = bisect.bisect_left(ts, x)
        if i < len(ts) and ts[i] == x:
            return i
        ts.insert(i, x)
        self.p.insert(i, self.p[i - 1])
        return i

    def add(self, t: float, dur: float, power: float) -> None:
        """Book a read drawing ``power`` over ``[t, t + dur)``."""
        i, j = self._split(t), self._split(t + dur)
        ps = self.p
        for k in range(i, j):
            ps[k] += power


@dataclass
class Timeline:
    """The scheduled inference."""

    latency_ns: float
    region_span: dict  # name -> (start, finish)
    region_busy: dict  # name -> summed durations of its events
    peak_power_mw: float
    peak_write_power_mw: float
    analog_energy_pj: float
    utilisation: dict  # resource class -> mean busy fraction
    start: np.ndarray
    finish: np.ndarray
    kinds: np.ndarray = field(default_factory=lambda: np.asarray([], dtype=object))  # meta-operator kind per row

    def busy_ns(self, kinds) -> float:
        """Time during which at least one operation of the given kinds runs (union of their intervals)."""
        sel = np.isin(self.kinds, list(kinds)) if len(self.kinds) else np.zeros(0, dtype=bool)
        sel &= self.finish > self.start
        if not sel.any():
            return 0.0
        order = np.argsort(self.start[sel])
        st, fi = self.start[sel][order], self.finish[sel][order]
        reach = np.maximum.accumulate(fi)
        new = np.ones(len(st), dtype=bool)
        new[1:] = st[1:] > reach[:-1]
        idx = np.flatnonzero(new)
        ends = np.append(idx[1:], len(st)) - 1
        return float(np.sum(reach[ends] - st[idx]))


def schedule_graph(regions: list[tuple[str, Events, int]], producers: dict[str, list[str]],
                   pipeline: bool, power_cap_mw: float | None = None, summary: bool = True) -> Timeline:
    """Schedule the events of every region of one inference.

    With ``power_cap_mw``, crossbar reads (with their DACs and ADCs, the
    power :attr:`Timeline.peak_power_mw` measures) are activated by time
    division: a read waits until the reads already running leave room for
    it under the cap (CIM-MLC's time-division activation of crossbars).

    Parameters
    ----------
    regions : list of (name, Events, segment)
        In execution order.  A region of a new segment starts after every
        operation of the previous segment (the chip is reprogrammed).
    producers : dict
        Region name -> regions whose outputs its input is computed from.
    pipeline : bool
        Inter-layer pipeline on or off.
    power_cap_mw : float, optional
        Peak computing power allowed (mW); None: no cap.
    summary : bool
        False: only the latency, the spans and the start and finish times are filled in (the power
        profile, energies and utilisation are left empty: a caller that needs only the latency).

    Returns
    -------
    Timeline
    """
    with gc_paused():
        if power_cap_mw is None and all(type(ev) is TableEvents for _, ev, _ in regions):
            return _schedule_tables(regions, producers, pipeline, summary)
        return _schedule_graph(regions, producers, pipeline, power_cap_mw, summary)


def _schedule_tables(regions, producers, pipeline, summary=True) -> Timeline:
    """:func:`schedule_graph` of regions given as tables (:class:`~.compiled.TableEvents`): each region's
    operations recorded and placed in compiled code on the resources of the whole timeline, in order, from its
    floor and its inputs' ready times -- what :func:`_place` does with their rows (the same times)."""
    resources = Resources()
    starts, finishes, span, busy, outs = [], [], {}, {}, {}
    prev_end, cur_seg, seg_floor = 0.0, None, 0.0
    for name, ev, seg in regions:
        if seg != cur_seg:
            cur_seg, seg_floor = seg, prev_end
        tab = ev.table
        prods = [outs[p] for p in producers.get(name, []) if p in outs]
        ext = _inputs_ready(ev.inputs, prods, seg_floor if pipeline else prev_end, pipeline)
        ready = np.full(len(tab), prev_end if not pipeline else seg_floor)
        if ext:
            ready[list(ext)] = list(ext.values())
        st, fin = place(tab, ev.res_names, resources, ready)
        outs[name] = (np.array([g0 for _, g0, _ in ev.outputs], dtype=float),
                      np.array([g1 for _, _, g1 in ev.outputs], dtype=float),
                      fin[[j for j, _, _ in ev.outputs]].astype(float))
        starts.append(st)
        finishes.append(fin)
        span[name] = (float(min(prev_end, st.min())) if len(tab) else prev_end,
                      float(max(prev_end, fin.max(initial=prev_end))))
        busy[name] = float(np.sum(tab.dur))
        prev_end = max(prev_end, span[name][1])
    start = np.concatenate(starts) if starts else np.zeros(0)
    finish = np.concatenate(finishes) if finishes else np.zeros(0)
    latency = float(finish.max(initial=0.0))
    if not summary:
        return Timeline(latency_ns=latency, region_span=span, region_busy=busy, peak_power_mw=0.0,
                        peak_write_power_mw=0.0, analog_energy_pj=0.0, utilisation={}, start=start, finish=finish)
    tabs = [ev.table for _, ev, _ in regions]
    d = np.concatenate([t.dur for t in tabs])
    e = np.concatenate([t.energy for t in tabs])
    a = np.concatenate([t.analog for t in tabs])
    kinds = np.concatenate([np.asarray(t.kinds)[t.kind] for t in tabs]) if len(d) else np.asarray([])
    # busy time per resource, summed in row order, and the order the list scheduler first books them in
    gid, gdur = [], []
    for (_, ev, _), t in zip(regions, tabs):
        ids = resources.index(ev.res_names)[t.res_idx]
        per = np.repeat(t.dur, np.diff(t.res_ptr))
        on = per > 0
        gid.append(ids[on])
        gdur.append(per[on])
    gid = np.concatenate(gid) if gid else np.zeros(0, np.int64)
    gdur = np.concatenate(gdur) if gdur else np.zeros(0)
    names = list(resources.ids)
    booked = np.bincount(gid, weights=gdur, minlength=len(names))
    used, first = np.unique(gid, return_index=True)
    util = defaultdict(list)
    for r in used[np.argsort(first)].tolist():
        util[names[r].split(":")[0]].append(float(booked[r]) / latency if latency else 0.0)
    return Timeline(
        latency_ns=latency,
        region_span=span,
        region_busy=busy,
        peak_power_mw=_peak(start, finish, e, d, a),
        peak_write_power_mw=_peak(start, finish, e, d, kinds == "CIM.write_xb") if len(kinds) else 0.0,
        analog_energy_pj=float(e[a].sum()) if len(e) else 0.0,
        utilisation={k: float(np.mean(v)) for k, v in util.items()},
        start=start,
        finish=finish,
        kinds=kinds,
    )


def _schedule_graph(regions, producers, pipeline, power_cap_mw, summary=True) -> Timeline:
    res: dict[str, _Resource] = defaultdict(_Resource)
    starts, finishes, analog, energy, durs = [], [], [], [], []
    span, busy = {}, {}
    outs: dict[str, list] = {}
    out_np: dict = {}  # region -> its outputs' (start, stop, finish) arrays (_outputs_of)
    acc = (starts, finishes, analog, energy, durs, outs, span, busy)
    prev_end = 0.0
    seg_floor, cur_seg = 0.0, None
    power = _Power(power_cap_mw) if power_cap_mw is not None else None
    pending: list = []  # regions placed from their schedule alone whose intervals are not booked yet
    chain: list = []  # regions with a line buffer for the next one: placed together with the last consumer
    for k, (name, ev, seg) in enumerate(regions):
        if seg != cur_seg:
            cur_seg, seg_floor = seg, prev_end
        paired = False  # a line buffer (its consumer on this timeline): placed with the consumer
        if ev.ring and any(name in producers.get(r, ()) for r, _, _ in regions[k + 1:]):
            nxt = regions[k + 1]
            if not pipeline or nxt[2] != seg or list(producers.get(nxt[0], [])) != [name]:
                raise RuntimeError(f"region '{name}' keeps its output in a line buffer: its only consumer must be "
                                   "the next region, in its segment, with the inter-layer pipeline")
            paired = True
        n_ev = len(ev)
        st = [0.0] * n_ev
        fin = [0.0] * n_ev
        prods = [p for p in producers.get(name, []) if p in outs]
        ext_ready = _inputs_ready(ev.inputs, [_outputs_of(p, outs, finishes, out_np) for p in prods],
                                  seg_floor if pipeline else prev_end, pipeline)
        floor = prev_end if not pipeline else seg_floor
        if paired:  # placed with its consumer
            chain.append((name, ev, ext_ready, st, fin))
            continue
        ev_dur, ev_res = ev.dur, ev.res
        # Isolated (every earlier operation has finished by the floor, where all its inputs are ready): the
        # region's schedule is its schedule alone, shifted to the floor -- exactly, when every time is an
        # integer (then no sum rounds, and every comparison the scheduler makes is the same).
        alone = ev.alone if power is None and floor == prev_end and floor > 0.0 and not chain else None
        if chain:  # the last consumer of line buffers and their producers, interleaved
            for pev, pst in pending:
                _book(pev, pst, res)
            pending.clear()
            _place_chain(chain + [(name, ev, ext_ready, st, fin)], floor, res, power)
            for pname, pev, _, pst, pfin in chain:
                prev_end = _append(acc, pname, pev, pst, pfin, prev_end)
            chain = []
        elif alone is not None and _shifts_exactly(alone, ev, floor):
            st = (floor + np.frombuffer(alone[0])).tolist()
            fin = (floor + np.frombuffer(alone[1])).tolist()
            for i, dur in enumerate(ev_dur):  # busy time in the same order as booking it would add it
                if dur > 0:
                    for r in ev_res[i]:
                        res[r].busy += dur
            pending.append((ev, st))
        else:
            for pev, pst in pending:  # book the intervals of the regions placed before, in order
                _book(pev, pst, res)
            pending.clear()
            _place(ev, st, fin, floor, ext_ready, res, power)
            if power is None and prev_end == 0.0:  # scheduled alone from time 0: remembered for a later shift
                ev.alone = (array("d", st), array("d", fin))
        prev_end = _append(acc, name, ev, st, fin, prev_end)
    if not summary:
        finish = np.asarray(finishes)
        return Timeline(latency_ns=float(finish.max(initial=0.0)), region_span=span, region_busy=busy,
                        peak_power_mw=0.0, peak_write_power_mw=0.0, analog_energy_pj=0.0, utilisation={},
                        start=np.asarray(starts), finish=finish)
    return _summary(regions, res, starts, finishes, analog, energy, durs, span, busy)


def _outputs_of(name: str, outs: dict, finishes: list, memo: dict) -> tuple:
    """A placed region's outputs as arrays: their starts, stops and finish times (in ``outs`` order; memoised
    per ``outs`` entry: a region executed again replaces it)."""
    o = outs[name]
    hit = memo.get(name)
    if hit is None or hit[0] is not o:
        hit = memo[name] = (o, (np.array([g0 for _, g0, _ in o], dtype=float),
                                np.array([g1 for _, _, g1 in o], dtype=float),
                                np.array([finishes[j] for j, _, _ in o], dtype=float)))
    return hit[1]


_READY_CHUNK = 1 << 22  # input x output pairs compared at once (bounded memory)


def _inputs_ready(inputs: list, prods: list, t0: float, pipeline: bool) -> dict:
    """When each input load of a region may start: ``t0``, or the latest finish of the producers' outputs it
    reads -- with the inter-layer pipeline, those whose share of the output overlaps the load's ``[f0, f1)``;
    without it, all of them.

    Parameters
    ----------
    inputs : list of (event, f0, f1)
    prods : list of (starts, stops, finishes) arrays, one per producer (:func:`_outputs_of`)
    t0 : float
    pipeline : bool

    Returns
    -------
    dict
        Event index -> earliest start (a later duplicate of an event overrides, as ``inputs`` lists it).
    """
    idx = [i for i, _, _ in inputs]
    if not idx:
        return {}
    prods = [p for p in prods if len(p[2])]
    if not prods:
        return dict.fromkeys(idx, t0)
    if not pipeline:  # every output of every producer
        return dict.fromkeys(idx, max(t0, max(float(p[2].max()) for p in prods)))
    lo = np.array([f0 for _, f0, _ in inputs], dtype=float) + 1e-12
    hi = np.array([f1 for _, _, f1 in inputs], dtype=float) - 1e-12
    best = np.full(len(idx), t0, dtype=float)
    for g0, g1, fin in prods:
        step = max(1, _READY_CHUNK // len(g0))
        for a in range(0, len(idx), step):
            over = (g0[None, :] < hi[a:a + step, None]) & (g1[None, :] > lo[a:a + step, None])
            np.maximum(best[a:a + step], np.where(over, fin[None, :], -np.inf).max(axis=1), out=best[a:a + step])
    return dict(zip(idx, best.tolist()))


def _append(acc: tuple, name: str, ev, st: list, fin: list, prev_end: float) -> float:
    """Add a placed region's events to the timeline's lists ``acc`` (starts, finishes, analog and dynamic
    energy, durations, outputs, spans, busy times); return the new end of the regions placed so far."""
    starts, finishes, analog, energy, durs, outs, span, busy = acc
    base = len(starts)
    starts.extend(st)
    finishes.extend(fin)
    analog.extend(ev.analog)
    energy.extend(ev.energy)
    durs.extend(ev.dur)
    outs[name] = [(base + j, g0, g1) for j, g0, g1 in ev.outputs]
    span[name] = (float(min(prev_end, min(st))) if len(ev) else prev_end, float(max(prev_end, max(fin, default=prev_end))))
    busy[name] = float(np.sum(ev.dur))
    return max(prev_end, span[name][1])


def _place_chain(items: list, floor: float, res: dict, power) -> None:
    """Place regions each of which keeps its output in a line buffer for the next (``Events.ring``: the share
    of it the memory-mode arrays hold at once), the last one included, together, in slices of their programs:
    a consumer load waits for the stores of the output it reads, and a producer store of the share
    ``[g0, g1)`` waits until every load of its consumer that starts below ``g1 - ring`` (what the store
    overwrites) has finished.  Each region is placed as far as those waits allow, in turn; a buffer that
    cannot hold a window and a store is an error (it would deadlock)."""
    edges = []
    for (pname, pev, _, _, _), (_, cev, _, _, _) in zip(items, items[1:]):
        ring = pev.ring
        stores, loads = sorted(pev.outputs), sorted(cev.inputs)  # (event, f0, f1) in program order
        if loads and stores and (max(f1 - f0 for _, f0, f1 in loads) + max(g1 - g0 for _, g0, g1 in stores)
                                 > ring + 1e-9):
            raise RuntimeError(f"region '{pname}': its line buffer ({ring:.4g} of its output) cannot hold a "
                               "window of its consumer and a store")
        by_start = sorted((f0, i) for i, f0, _ in loads)
        f0s = [f for f, _ in by_start]
        last_to = list(itertools.accumulate((i for _, i in by_start), max))
        n_load = [bisect.bisect_left(f0s, g1 - ring - 1e-12) for _, _, g1 in stores]
        over = [[j for j, g0, g1 in stores if g0 < f1 - 1e-12 and g1 > f0 + 1e-12] for _, f0, f1 in loads]
        edges.append({"stores": stores, "loads": loads, "by_start": by_start, "n_load": n_load,
                      "need_load": [last_to[n - 1] if n else -1 for n in n_load], "over": over,
                      "need_store": [max(o, default=-1) for o in over], "si": 0, "li": 0, "bp": 0, "bmax": floor})
    cur = [0] * len(items)
    while any(c < len(it[1]) for c, it in zip(cur, items)):
        moved = False
        for m, (name, ev, ext, st, fin) in enumerate(items):
            stop = len(ev)
            if m + 1 < len(items):  # its stores wait for the loads of its consumer
                e, cfin = edges[m], items[m + 1][4]
                stores, n_load = e["stores"], e["n_load"]
                while e["si"] < len(stores) and e["need_load"][e["si"]] < cur[m + 1]:
                    si = e["si"]
                    while e["bp"] < n_load[si]:  # all placed: need_load is the last of them in program order
                        e["bmax"] = max(e["bmax"], cfin[e["by_start"][e["bp"]][1]])
                        e["bp"] += 1
                    if n_load[si]:
                        j = stores[si][0]
                        ext[j] = max(ext.get(j, floor), e["bmax"])
                    e["si"] += 1
                if e["si"] < len(stores):
                    stop = min(stop, stores[e["si"]][0])
            if m:  # its loads wait for the stores of its producer
                e, pfin = edges[m - 1], items[m - 1][4]
                loads = e["loads"]
                while e["li"] < len(loads) and e["need_store"][e["li"]] < cur[m - 1]:
                    li = e["li"]
                    if e["over"][li]:
                        i = loads[li][0]
                        ext[i] = max(ext.get(i, floor), max(pfin[j] for j in e["over"][li]))
                    e["li"] += 1
                if e["li"] < len(loads):
                    stop = min(stop, loads[e["li"]][0])
            if stop > cur[m]:
                _place(ev, st, fin, floor, ext, res, power, cur[m], stop)
                cur[m], moved = stop, True
        if not moved:
            raise RuntimeError(f"region '{items[0][0]}': line buffers and their consumers wait for each other")


def _shifts_exactly(alone: tuple, ev: Events, floor: float) -> bool:
    """Whether the schedule alone, shifted by ``floor``, is computed without rounding: every time and
    duration an integer (ns) and the shifted times below 2**53."""
    a0, a1 = np.frombuffer(alone[0]), np.frombuffer(alone[1])
    if len(a0) != len(ev) or not float(floor).is_integer():
        return False
    if not len(a0):
        return True
    d = np.asarray(ev.dur)
    return bool(floor + a1.max() < 2.0**53 and np.all(a0 == np.floor(a0)) and np.all(a1 == np.floor(a1))
                and np.all(d == np.floor(d)))


def _book(ev: Events, st: list, res: dict) -> None:
    """Book a placed region's intervals on their resources (in the order the scheduler books them)."""
    for i, dur in enumerate(ev.dur):
        if dur > 0:
            t = st[i]
            for r in ev.res[i]:
                res[r].reserve(t, dur, count=False)


def _place(ev: Events, st: list, fin: list, floor: float, ext_ready: dict, res: dict, power, lo: int = 0,
           hi: int | None = None) -> None:
    """List-schedule one region's operations ``lo .. hi - 1`` (default all) in order (``st``, ``fin``: filled in)."""
    ev_deps, ev_dur, ev_res = ev.deps, ev.dur, ev.res
    n_ev = len(ev)
    ready = ext_ready.get  # an input load's time is never below the floor (it starts from it)
    fin_at = fin.__getitem__
    run_max: dict = {}  # id(shared list) -> running maxima of its members' finish times
    prev_deps, prev_t = None, 0.0  # rows sharing one stored dependency list (reads of a parallel block)
    for i in range(lo, n_ev if hi is None else hi):
        t = ready(i, floor)
        deps = ev_deps[i]
        if deps is prev_deps:  # the same operations, already finished: the same latest finish
            if prev_t > t:
                t = prev_t
        else:
            prev_deps, td, t = deps, t, _NONE
            while type(deps) is Prefix:  # (its rest may be a Prefix too)
                rm = run_max.setdefault(id(deps.members), [])
                while len(rm) < deps.count:
                    f = fin[deps.members[len(rm)]]
                    rm.append(f if not rm or f > rm[-1] else rm[-1])
                if deps.count and rm[deps.count - 1] > t:
                    t = rm[deps.count - 1]
                deps = deps.rest
            if len(deps) > LONG_DEPS:
                f = max(map(fin_at, deps))
                if f > t:
                    t = f
            else:
                for d in deps:
                    if fin[d] > t:
                        t = fin[d]
            prev_t = t  # the dependencies' latest finish (-inf: none)
            if td > t:
                t = td
        dur = ev_dur[i]
        if dur > 0:
            names = ev_res[i]
            capped = power is not None and ev.analog[i]
            if len(names) == 1 and not capped:  # one resource: its earliest gap (the loop's fixed point)
                r = res[names[0]]
                last = r.last
                if last:  # the cases earliest + reserve settle without a search (what they do then)
                    s_last = r.bs[-1][-1]
                    if t < last[-1] and s_last <= t and s_last < t + dur:  # in the last busy interval: after it
                        t = last[-1]
                    if t >= last[-1]:  # after everything booked on it
                        end = t + dur
                        r.busy += dur
                        if last[-1] == t:  # touches the last interval: extends it
                            r.be[-1][-1] = end
                            last[-1] = end
                        else:
                            r.reserve(t, dur, False)
                        st[i], fin[i] = t, end
                        continue
                t = r.earliest(t, dur)
                r.reserve(t, dur)
                st[i], fin[i] = t, t + dur
                continue
            t = _book_one(t, dur, names, res, power, ev.analog[i], ev.energy[i])
        st[i], fin[i] = t, t + dur


def _book_one(t: float, d: float, names: tuple, res: dict, power, analog: bool, energy: float) -> float:
    """Earliest start >= t at which every resource is free for ``d`` (and the power cap allows it); booked."""
    capped = power is not None and analog
    rl = [res[r] for r in names]
    while True:
        t2 = t
        for r in rl:
            t2 = r.earliest(t2, d)
        if capped:
            t2 = power.earliest(t2, d, energy / d)
        if t2 == t:
            break
        t = t2
    for r in rl:
        r.reserve(t, d)
    if capped:
        power.add(t, d, energy / d)
    return t


def _summary(regions, res, starts, finishes, analog, energy, durs, span, busy) -> Timeline:
    start = np.asarray(starts)
    finish = np.asarray(finishes)
    latency = float(finish.max(initial=0.0))
    a = np.asarray(analog, dtype=bool)
    d = np.asarray(durs)
    e = np.asarray(energy)
    kinds = np.asarray([k for _, ev, _ in regions for k in ev.kind])
    peak = _peak(start, finish, e, d, a)  # computing: crossbar reads with their DACs and ADCs
    peak_write = _peak(start, finish, e, d, kinds == "CIM.write_xb") if len(kinds) else 0.0
    util = defaultdict(list)
    for rname, r in res.items():
        util[rname.split(":")[0]].append(r.busy / latency if latency else 0.0)
    return Timeline(
        latency_ns=latency,
        region_span=span,
        region_busy=busy,
        peak_power_mw=peak,
        peak_write_power_mw=peak_write,
        analog_energy_pj=float(e[a].sum()) if len(e) else 0.0,
        utilisation={k: float(np.mean(v)) for k, v in util.items()},
        start=start,
        finish=finish,
        kinds=kinds,
    )


def _peak(start: np.ndarray, finish: np.ndarray, energy: np.ndarray, dur: np.ndarray, mask: np.ndarray) -> float:
    """Largest summed power (mW) of the masked operations active at one instant."""
    m = mask & (dur > 0)
    if not m.any():
        return 0.0
    p = energy[m] / dur[m]  # pJ/ns = mW
    t = np.concatenate([start[m], finish[m]])
    delta = np.concatenate([p, -p])
    order = np.lexsort((delta, t))  # at equal times, ends (negative) first
    return float(np.max(np.cumsum(delta[order]), initial=0.0))

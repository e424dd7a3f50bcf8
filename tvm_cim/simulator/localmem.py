"""Cores' local memories managed by a heap allocator (PIMCOMP's pixel-level runtime management, paper 004 sec. VII).

In low-latency mode PIMCOMP keeps every pixel-level buffer in the local
memory of the core that uses it: the input slice an array group reads, the
output pixel a replica produced until it is sent.  A heap-based manager
allocates a buffer when data arrives and frees it when no replica needs it
any more (Fig. 9, C.1 / C.2), and memory is never reclaimed before the
pending transmission of that data completes.

With ``local_heap = "core"`` (the default, the paper's), one heap per core
serves every region with arrays on it: the simulator only records each
program's buffers (:class:`LocalMemory` with ``record``) and
:func:`schedule_shared` allocates them while it schedules all regions
together, in the order operations become ready (the element pipeline's time
order), placing a buffer where the bytes it reuses are freed first.
With ``local_heap = "region"``, :class:`LocalMemory` is that manager for one
program on the simulated chip: one :class:`Heap` per core, bounded by the
program's share of the core's local memory (``local_bytes``).  The simulator allocates in program order
and frees a buffer once its readers are recorded; a new buffer that reuses
the bytes of freed ones **waits for their readers** (a write-after-read
dependency on the timeline), so the data a core receives can run ahead of
its reads by at most its local memory: a full memory stalls the sender.
A buffer larger than the whole share cannot be held: it **spills** (stays in
the global buffer and is streamed from there; the simulator charges that
traffic).  Allocation is next-fit (the search continues after the last
allocation), so freed space is reused as late as possible and the memory
works as a ring of in-flight buffers.
"""

from __future__ import annotations

import bisect
import heapq
from collections import defaultdict
from dataclasses import dataclass, field

from ..common.runtime import gc_paused
from ..program import Op, Range
from .timeline import Timeline, _book_one, _Power, _Resource, _summary


@dataclass
class Buffer:
    """One allocated buffer: its bytes and the operations that read it."""

    addr: int
    size: int
    readers: list = field(default_factory=list)
    writer: int = -1  # the operation that fills it (set by the simulator once recorded)
    spill: tuple | None = None  # (ns, resources, pJ) of the writer if the buffer cannot be held (shared heap)

    @property
    def end(self) -> int:
        return self.addr + self.size


class Heap:
    """A next-fit heap over ``capacity`` bytes whose buffers are freed once their readers are known.

    Parameters
    ----------
    capacity : int
        Bytes.
    """

    def __init__(self, capacity: int):
        self.capacity = int(capacity)
        self.live: list[Buffer] = []  # sorted by address
        self.ptr = 0
        self.peak = 0
        self.used = 0

    def alloc(self, size: int, free_at=None) -> tuple[Buffer | None, list]:
        """Allocate ``size`` bytes (next fit; with ``free_at``, a function giving the time a freed buffer's
        readers finish, where the bytes it reuses are freed earliest).

        Returns
        -------
        buffer : Buffer or None
            None when the buffer cannot be held (larger than the heap, or every
            placement overlaps a buffer nobody has read yet): a spill.
        waits : list
            Readers of the freed buffers whose bytes it reuses (it must wait for them).
        """
        size = max(1, int(size))
        if size > self.capacity:
            return None, []
        if free_at is not None:
            a = self.earliest(size, free_at)[0]
            if a is None:
                return None, []
            return self._take(a, size)
        for start in (self.ptr, 0):
            a = start
            while a + size <= self.capacity:
                blocking = [b for b in self.live if b.addr < a + size and b.end > a and not b.readers]
                if not blocking:
                    return self._take(a, size)
                a = max(b.end for b in blocking)
        return None, []

    def _take(self, a: int, size: int) -> tuple[Buffer, list]:
        """Place a buffer at ``a`` over freed bytes (see :meth:`alloc`)."""
        reused = [b for b in self.live if b.addr < a + size and b.end > a]
        waits = [r for b in reused for r in b.readers]
        self.live = [b for b in self.live if b not in reused]
        for b in reused:  # the bytes of a freed buffer it does not cover stay behind its readers
            if b.addr < a:
                self.live.append(Buffer(b.addr, a - b.addr, b.readers))
            if b.end > a + size:
                self.live.append(Buffer(a + size, b.end - a - size, b.readers))
        buf = Buffer(a, size)
        self.live.append(buf)
        self.live.sort(key=lambda b: b.addr)
        self.ptr = buf.end
        self.used = sum(b.size for b in self.live if not b.readers)
        self.peak = max(self.peak, self.used)
        return buf, waits

    def earliest(self, size: int, free_at) -> tuple[int | None, float | None]:
        """The address where a buffer of ``size`` bytes can be filled first, and when: the placement whose
        reused bytes are freed earliest (``free_at(buffer)``: when its readers finish; -inf if it reuses
        none), the next-fit order breaking ties; (None, None) if every placement overlaps a buffer still
        needed.  Only an address of 0 or right after a buffer can be best (moving a placement down to one
        never adds an overlap)."""
        size = max(1, int(size))
        live = self.live
        ends = [b.end for b in live]
        cands = sorted({0, *(e for e in ends if e + size <= self.capacity)}, key=lambda x: (x < self.ptr, x))
        best, best_t = None, None
        for a in cands:
            t = float("-inf")
            for k in range(bisect.bisect_right(ends, a), len(live)):
                b = live[k]
                if b.addr >= a + size:
                    break
                if not b.readers:
                    t = None
                    break
                t = max(t, free_at(b))
            if t is not None and (best_t is None or t < best_t):
                best, best_t = a, t
                if t == float("-inf"):  # nothing to wait for
                    break
        return best, best_t

    def read(self, buf: Buffer, op: int) -> None:
        """Operation ``op`` reads ``buf`` (its bytes are free for later buffers, after ``op``)."""
        buf.readers.append(op)
        self.used = sum(b.size for b in self.live if not b.readers)


class LocalMemory:
    """The heaps of the cores one program uses, with what happened to them.

    Parameters
    ----------
    capacity : int
        Bytes of each core's local memory this program may use.
    record : bool
        One heap per core shared by the regions (``local_heap = "core"``): every
        allocation is held here with no address and no wait, and recorded in
        :attr:`held`; the heaps are run when the timeline of all regions is
        scheduled (:func:`schedule_shared`).
    """

    def __init__(self, capacity: int, record: bool = False):
        self.capacity = int(capacity)
        self.record = bool(record)
        self.heaps: dict[int, Heap] = {}
        self.allocs = 0
        self.waits = 0
        self.spills = 0
        self.spilled_bytes = 0
        self.held: list[tuple[int, Buffer]] = []  # (core, buffer) of every allocation that was held

    def alloc(self, core: int, size: int) -> tuple[Buffer | None, list]:
        """Allocate on ``core`` (see :meth:`Heap.alloc`), counting waits and spills."""
        heap = self.heaps.setdefault(core, Heap(self.capacity))
        if self.record:
            buf = Buffer(-1, max(1, int(size)))
            self.allocs += 1
            self.held.append((core, buf))
            return buf, []
        buf, waits = heap.alloc(size)
        self.allocs += 1
        if buf is None:
            self.spills += 1
            self.spilled_bytes += int(size)
        else:
            self.held.append((core, buf))
            if waits:
                self.waits += 1
        return buf, waits

    def in_flight(self, start, finish) -> int:
        """Peak bytes one core holds over time on the scheduled timeline: a buffer from the start of the
        operation that fills it to the finish of its last reader.

        Parameters
        ----------
        start, finish : numpy.ndarray
            Start and finish of every operation (:class:`~tvm_cim.simulator.timeline.Timeline`).

        Returns
        -------
        int
            Bytes (the largest over the cores).
        """
        steps: dict[int, list] = {}
        end = float(max(finish, default=0.0))
        for core, b in self.held:
            t0 = float(start[b.writer]) if b.writer >= 0 else 0.0
            t1 = max((float(finish[r]) for r in b.readers), default=end)
            steps.setdefault(core, []).extend(((t0, b.size), (max(t0, t1), -b.size)))
        peak = 0
        for ev in steps.values():
            cur = 0
            for _, d in sorted(ev, key=lambda e: (e[0], e[1])):  # a release before an allocation at one time
                cur += d
                peak = max(peak, cur)
        return peak

    def summary(self) -> dict:
        """Capacity per core, peak bytes in use on the busiest core, allocations, stalls (allocations that
        wait for earlier buffers' readers) and spills."""
        return {"capacity_bytes": self.capacity, "cores": len(self.heaps),
                "peak_bytes": max((h.peak for h in self.heaps.values()), default=0),
                "allocations": self.allocs, "waits": self.waits, "spills": self.spills,
                "spilled_bytes": self.spilled_bytes}


def buffer_bytes(op: Op, batch: int, n: int, m: int) -> int | None:
    """Bytes of the local-memory buffer ``op`` allocates, or None if it allocates none.

    A ``DMOV.scatter`` receives an input slice into the core that reads it; a
    core-level ``DCOM.dequantize`` keeps the output pixels its replica produced
    until they are sent (``batch`` inferences of the op's vectors of ``n``
    bytes each; ``m`` vectors when the op names none).

    Parameters
    ----------
    op : Op
        A meta-operator of a program's ``run`` section.
    batch, n, m : int
        The program's ``batch``, ``N`` and vectors (``M`` x ``batch``).

    Returns
    -------
    int or None
    """
    if op.opcode == "DMOV" and op.get("op") == "scatter":
        return int(op.get("bytes", 0))
    if op.opcode == "DCOM" and op.get("op") == "dequantize" and op.get("core") is not None:
        v = op.get("vecs")
        return int(batch) * (v.size if isinstance(v, Range) else int(m)) * int(n)
    return None



def schedule_shared(regions: list, producers: dict, buffers: dict, capacity: int,
                    power_cap_mw: float | None = None, spill_faster: bool = False) -> tuple[Timeline, dict]:
    """Schedule one inference's element pipeline with one heap per core shared by every region on it.

    PIMCOMP's runtime memory management (paper 004, sec. VII, Fig. 9): a
    pixel's buffer is allocated in the receiving core's local memory when the
    pipeline gets to it, and freed once no replica needs it.  The regions'
    operations are list-scheduled together in the order they become ready
    (earliest ready time first), so allocations happen in the time order of
    the element pipeline, across regions.  When an operation fills a buffer,
    the core's heap (:class:`Heap`, next-fit) places it; the bytes it reuses
    belong to buffers whose every reader has been scheduled, and it starts
    after those readers finish.  If every placement overlaps a buffer that is
    still needed, it waits until another buffer of that core is released.  If
    nothing can proceed (every operation left waits for memory), the earliest
    waiting buffer **spills**: it stays in the global buffer (a scatter then
    costs and occupies what the simulator recorded for that case, ``Buffer.spill``).

    Parameters
    ----------
    regions : list of (name, Events, segment)
        As :func:`~tvm_cim.simulator.timeline.schedule_graph` takes them, with the inter-layer pipeline.
    producers : dict
        Region name -> regions whose outputs its input is computed from.
    buffers : dict
        Region name -> list of (core, :class:`Buffer`) the region fills (operations as local indices).
    capacity : int
        Bytes of local memory per core.
    power_cap_mw : float, optional
        Peak computing power allowed (as :func:`~tvm_cim.simulator.timeline.schedule_graph`).
    spill_faster : bool
        A buffer that could be held only after a wait (or not at all yet) stays in the global buffer when
        streaming it from there (``Buffer.spill``) would finish sooner.

    Returns
    -------
    timeline : Timeline
    summary : dict
        Cores, allocations, those that waited, spills and their bytes, peak bytes of one core in use over time.
    """
    with gc_paused():
        return _schedule_shared(regions, producers, buffers, int(capacity), power_cap_mw, spill_faster)


def _schedule_shared(regions, producers, buffers, capacity, power_cap_mw, spill_faster):
    res: dict = defaultdict(_Resource)
    power = _Power(power_cap_mw) if power_cap_mw is not None else None
    dur, rs, deps, succ = [], [], [], []
    analog, energy = [], []
    outs: dict = {}
    segs: list = []  # (segment, first, stop) global index ranges of regions, in order
    writer_of: dict = {}  # global op -> [core, Buffer (global indices), spilled]
    reads_of: dict = defaultdict(list)  # global op -> buffers it is a reader of
    left: dict = {}  # id(buffer) -> readers not yet scheduled
    for name, ev, seg in regions:
        base = len(dur)
        dur.extend(ev.dur)
        rs.extend(ev.res)
        analog.extend(ev.analog)
        energy.extend(ev.energy)
        for d in ev.deps:
            deps.append([base + x for x in d])
        prods = [p for p in producers.get(name, []) if p in outs]
        for idx, f0, f1 in ev.inputs:
            for p in prods:
                deps[base + idx].extend(j for j, g0, g1 in outs[p] if g0 < f1 - 1e-12 and g1 > f0 + 1e-12)
        outs[name] = [(base + j, g0, g1) for j, g0, g1 in ev.outputs]
        segs.append((seg, base, len(dur)))
        for core, b in buffers.get(name, ()):
            g = Buffer(-1, b.size, sorted({base + r for r in b.readers}), base + b.writer, b.spill)
            writer_of[g.writer] = [core, g, False]
            left[id(g)] = len(g.readers)
            for r in g.readers:
                reads_of[r].append((core, g))
    n = len(dur)
    succ = [[] for _ in range(n)]
    for i, d in enumerate(deps):
        for x in d:
            succ[x].append(i)
    st, fin = [0.0] * n, [0.0] * n
    heaps: dict = {}
    blocked: dict = defaultdict(list)
    stats = {"allocations": 0, "waits": 0, "spills": 0, "spilled_bytes": 0, "spilled_energy_pj": 0.0}
    held: list = []
    floor = 0.0

    def free_at(b):
        return max(fin[r] for r in b.readers)
    k = 0
    while k < len(segs):  # a segment (the chip reprogrammed) starts after everything before it
        seg = segs[k][0]
        first = segs[k][1]
        while k < len(segs) and segs[k][0] == seg:
            k += 1
        stop = segs[k - 1][2]
        pending = [0] * (stop - first)
        ready = [floor] * (stop - first)
        queue = []
        for i in range(first, stop):
            p = 0
            for x in deps[i]:
                if x >= first:
                    p += 1
                elif fin[x] > ready[i - first]:
                    ready[i - first] = fin[x]
            pending[i - first] = p
            if not p:
                queue.append((ready[i - first], i))
        heapq.heapify(queue)
        while True:
            while queue:
                t, i = heapq.heappop(queue)
                d, names = dur[i], rs[i]
                w = writer_of.get(i)
                if w is not None and not w[2]:
                    core, b = w[0], w[1]
                    heap = heaps.get(core)
                    if heap is None:
                        heap = heaps[core] = Heap(capacity)
                    if spill_faster and b.spill is not None:  # stream it from the global buffer if that is sooner
                        a, tw = heap.earliest(b.size, free_at) if b.size <= capacity else (None, None)
                        if a is None or max(t, tw) + d > t + b.spill[0]:
                            w[2] = True
                if w is not None and not w[2]:
                    got, waits = heap.alloc(b.size, free_at)
                    if got is None and b.size <= capacity:  # memory full of buffers still needed: wait
                        blocked[core].append((t, i))
                        continue
                    stats["allocations"] += 1
                    if got is None:
                        w[2] = True
                    else:
                        b.addr = got.addr
                        w.append(got)
                        held.append((core, b))
                        tw = max((fin[r] for r in waits), default=t)
                        if tw > t:
                            stats["waits"] += 1
                            t = tw
                if w is not None and w[2]:  # spilled
                    stats["spills"] += 1
                    stats["spilled_bytes"] += w[1].size
                    if w[1].spill is not None:
                        d, names = w[1].spill[0], w[1].spill[1]
                        stats["spilled_energy_pj"] += w[1].spill[2]
                    dur[i], rs[i] = d, names
                if d > 0:
                    t = _book_one(t, d, names, res, power, analog[i], energy[i])
                st[i], fin[i] = t, t + d
                if w is not None and not w[1].readers:  # never read: free once filled
                    _release(w, [i], blocked, queue)
                for core, b in reads_of.get(i, ()):
                    left[id(b)] -= 1
                    if not left[id(b)]:
                        _release(writer_of[b.writer], b.readers, blocked, queue)
                for s in succ[i]:
                    j = s - first
                    if fin[i] > ready[j]:
                        ready[j] = fin[i]
                    pending[j] -= 1
                    if not pending[j]:
                        heapq.heappush(queue, (ready[j], s))
            waiting = [(t, i, c) for c, q in blocked.items() for t, i in q]
            if not waiting:
                break
            t, i, c = min(waiting)  # nothing can proceed: the earliest buffer waiting for memory spills
            blocked[c].remove((t, i))
            writer_of[i][2] = True
            heapq.heappush(queue, (t, i))
        floor = max(floor, max(fin[:stop], default=0.0))
    steps: dict = defaultdict(list)
    for core, b in held:
        t0, t1 = st[b.writer], max((fin[r] for r in b.readers), default=fin[b.writer])
        steps[core].extend(((t0, b.size), (max(t0, t1), -b.size)))
    _check_bounds(held, st, fin, capacity)
    peak = 0
    for ev in steps.values():
        cur = 0
        for _, x in sorted(ev):
            cur += x
            peak = max(peak, cur)
    stats.update(capacity_bytes=capacity, cores=len(heaps), peak_bytes=peak)
    span, busy = {}, {}
    for (name, ev, _), (_, a, b) in zip(regions, segs):
        span[name] = (min(st[a:b], default=0.0), max(fin[a:b], default=0.0))
        busy[name] = float(sum(ev.dur))
    tl = _summary(regions, res, st, fin, analog, energy, dur, span, busy)
    return tl, stats


def _release(w: list, readers: list, blocked: dict, queue: list) -> None:
    """Every reader of the buffer ``w`` holds is scheduled: its bytes may be reused after them; the
    operations of its core waiting for memory try again."""
    if len(w) > 3:
        w[3].readers = list(readers)
    q = blocked.pop(w[0], None)
    if q:
        for x in q:
            heapq.heappush(queue, x)


def _check_bounds(held: list, st: list, fin: list, capacity: int) -> None:
    """Every held buffer lies inside its core's memory, and two buffers of one core that share bytes are never
    in use at once (from the start of the operation that fills one to the finish of its last reader)."""
    by_core: dict = defaultdict(list)
    for core, b in held:
        if b.addr < 0 or b.addr + b.size > capacity:
            raise RuntimeError(f"core {core}: buffer [{b.addr}, {b.addr + b.size}) outside its {capacity}-byte memory")
        by_core[core].append((b.addr, b.addr + b.size, st[b.writer],
                              max((fin[r] for r in b.readers), default=fin[b.writer])))
    for core, bs in by_core.items():
        bs.sort()
        for i, (a0, a1, t0, t1) in enumerate(bs):
            for b0, b1, u0, u1 in bs[i + 1:]:
                if b0 >= a1:
                    break
                if u0 < t1 and t0 < u1:
                    raise RuntimeError(f"core {core}: buffers [{a0}, {a1}) and [{b0}, {b1}) in use at once "
                                       f"({t0}-{t1} ns, {u0}-{u1} ns)")

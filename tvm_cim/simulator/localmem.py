"""Cores' local memories managed by a heap allocator (PIMCOMP's pixel-level runtime management, paper 004 sec. VII).

In low-latency mode PIMCOMP keeps every pixel-level buffer in the local
memory of the core that uses it: the input slice an array group reads, the
output pixel a replica produced until it is sent.  A heap-based manager
allocates a buffer when data arrives and frees it when no replica needs it
any more (Fig. 9, C.1 / C.2), and memory is never reclaimed before the
pending transmission of that data completes.

:class:`LocalMemory` is that manager for one program on the simulated chip:
one :class:`Heap` per core, bounded by the program's share of the core's
local memory (``local_bytes``).  The simulator allocates in program order
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

from dataclasses import dataclass, field

from ..program import Op, Range


@dataclass
class Buffer:
    """One allocated buffer: its bytes and the operations that read it."""

    addr: int
    size: int
    readers: list = field(default_factory=list)
    writer: int = -1  # the operation that fills it (set by the simulator once recorded)

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

    def alloc(self, size: int) -> tuple[Buffer | None, list]:
        """Allocate ``size`` bytes.

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
        for start in (self.ptr, 0):
            a = start
            while a + size <= self.capacity:
                blocking = [b for b in self.live if b.addr < a + size and b.end > a and not b.readers]
                if not blocking:
                    reused = [b for b in self.live if b.addr < a + size and b.end > a]
                    waits = [r for b in reused for r in b.readers]
                    self.live = [b for b in self.live if b not in reused]
                    buf = Buffer(a, size)
                    self.live.append(buf)
                    self.live.sort(key=lambda b: b.addr)
                    self.ptr = buf.end
                    self.used = sum(b.size for b in self.live if not b.readers)
                    self.peak = max(self.peak, self.used)
                    return buf, waits
                a = max(b.end for b in blocking)
        return None, []

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
    """

    def __init__(self, capacity: int):
        self.capacity = int(capacity)
        self.heaps: dict[int, Heap] = {}
        self.allocs = 0
        self.waits = 0
        self.spills = 0
        self.spilled_bytes = 0
        self.held: list[tuple[int, Buffer]] = []  # (core, buffer) of every allocation that was held

    def alloc(self, core: int, size: int) -> tuple[Buffer | None, list]:
        """Allocate on ``core`` (see :meth:`Heap.alloc`), counting waits and spills."""
        heap = self.heaps.setdefault(core, Heap(self.capacity))
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


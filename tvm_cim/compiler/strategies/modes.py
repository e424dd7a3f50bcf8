"""Array-mode pieces (CMSwitch, paper 000): segmentation by DP and per-segment compute/memory allocation.

* :func:`op_terms` -- an operator's costs in the MIP's terms, from the shared
  cost model (the estimate's per-chunk work, :mod:`tvm_cim.hardware.cost`);
* :func:`allocate_segment` -- the count MILP of Eq. 5-10
  (:func:`tvm_cim.compiler.solvers.arrays.allocate`);
* :func:`segment_dp` -- the corrected DP of Eq. 1-4
  (:func:`tvm_cim.compiler.solvers.segments.segment`): the cost of a segment
  is the estimate of the segment under its MIP allocation (intra: pipelined
  operators, weight fetches and rewrites, T^rw), the cost of entering it the
  mode switches from the previous segment's allocation (T^swc, Eq. 1);
* :func:`memory_layout` -- physical arrays (:func:`place`): memory-mode
  arrays at the top of the switchable range (below any held for an earlier
  segment, in operator order), compute arrays from 0 (placement), and the
  ``CM.switch`` lists at every segment start;
* :func:`carry` -- after the allocation, data kept in memory mode across
  segment boundaries.

Where an input comes from (:func:`tvm_cim.compiler.region.sources`): its
only producer or, at a join of several (a residual add on the host), the
latest one, whose arrays the join's result is taken to be written into
(host operators are not timed, for any strategy).  An operator may keep its
output in memory-mode arrays when a consumer in the segment loads it.  If
a region after the segment still needs it (:func:`needed_until`: a reader,
or a join that reads it when its latest producer has run), the data is
live at the boundary.  Then either it is written back (T^wb, Eq. 4,
``DMOV.writeback``) to the global buffer (off-chip when it spills) at the
end of the producer, before the next segment's switches -- part of that
segment's estimate, the DP's intra cost (the MIP sees it as port and array
traffic) -- or :func:`carry` keeps it: its arrays stay in memory mode in
the following segments up to its last reader (reserved in their MIPs), and
the readers load from them.  The DP itself does not see carried data; the
carry pass re-allocates the segments it chose and keeps a carry where the
shared estimate of those segments drops.

Operators larger than the chip (issue 10 sec. 3, paper Alg. 1 L4) are split
into sub-operators that fit: the tiles of each pass over the segment's
compute-mode arrays.  A segment whose operators do not fit at once is
*serial*: its operators run one after another on the same compute arrays
(``pass_xbs`` of them, in as many passes as each needs) while the rest of
the switchable arrays hold, in memory mode, the outputs its later
operators read (:func:`serial_allocation`: every subset of the operators
that may keep their output, costed by the shared estimate).  The DP
considers serial segments of up to :data:`SERIAL_MAX` operators; a serial
segment with no memory array is the old whole-chip passes.
"""

from __future__ import annotations

import dataclasses
import math
import weakref
from dataclasses import dataclass, field

import numpy as np

from ...hardware import cost
from ...hardware.schema import CIMHardware
from ..estimate import Estimator
from ..region import DMATMUL, Region, line_buffer_pairs, sources
from ..solvers import arrays as mip
from ..solvers.segments import segment as dp_segment
from . import duplication

TIME_LIMIT_S = 5.0  # per MIP solve
SERIAL_MAX = 4  # longest serial segment (operators run one after another, split into passes) the DP considers
# longest pipelined segment the DP considers (a compile-time bound, not in the paper's Alg. 1, which tries
# every i..j): the DP's cut is the same with and without it on MobileNetV2 and ResNet-18 at 224 (longest
# segment chosen: 5 operators), and it removes the MIP solves of 7..20-operator candidates (6 -> 5 would
# leave the estimate of MobileNetV2, ResNet-18, VGG-16 and BERT-large as it is, for -23% of MobileNetV2's
# compile CPU, but it changes the carries of test_cmswitch's segmented test network: kept at 6)
PIPELINE_MAX = 6
SERIAL_KEEP_MAX = 4  # at most 2^this memory choices are costed per serial segment
CARRY_SPAN = 3  # data stays in memory-mode arrays across at most this many segment boundaries
CORE_SHARED = True  # the MIP sees scatters and post-processing on the cores' links and ALUs (shared by copies)
REFINE_PASSES = 1  # sweeps of the cut refinement over every boundary (:func:`refine_cut`)
# the cut refinement runs on segmentations of at most this many segments (a compile-time bound: every move
# re-allocates its neighbours with their carries; MobileNetV2 at 224, 20 segments: estimate -0.6% for 4.5x
# CIM-MLC's compile CPU instead of 2.8x; ResNet-18, 10 segments: -2.4% for about +0.6 s)
REFINE_MAX_SEGMENTS = 12
# spread layout (:func:`place`, :func:`compute_layout`): memory-mode arrays spread over the cores and every copy
# on the core whose link and ALU are least loaded, instead of memory arrays at the top and copies packed from 0
# (which leaves the links of the cores holding memory arrays idle while the others saturate)
SPREAD = True
SPREAD_MIP = True  # the MIP sees the spread layout's cores (copies on different cores share none's link)
# the DP costs its candidate segments in the packed layout; the chosen ones are allocated again with the spread
# layout where it pays (a compile-time bound: each spread candidate is costed twice, +25% of cmswitch's compile
# CPU on MobileNetV2 at 224)
DP_PACKED = True
# the segmentation DP skips candidate segments that a costed one ending at the same operator provably beats
# (:func:`tvm_cim.compiler.solvers.segments.segment`, the weight-fetch bound :func:`fetch_bounds`): same cut
DP_PRUNE = True
DP_STATS: dict = {}  # the last DP's segments costed and pruned


@dataclass
class SegmentModes:
    """The allocation of one segment.

    Attributes
    ----------
    first, last : int
        Operators (indices in execution order, inclusive).
    alloc : Allocation
        Copies and memory arrays per operator, solver status and time.
    producer : list of int or None
        Per operator, the index (in the segment) of the operator whose memory arrays hold its input.
    live : list of bool
        Per operator, whether a consumer is in a later segment (its output, if
        kept in memory mode, is written back).
    pass_xbs : int
        A serial segment (operators larger than the free arrays, split into
        passes): the compute-mode arrays every operator runs on, one after
        another; 0: operators pipelined (or a single one on the whole chip).
    inplace : dict
        Keys in place (:func:`inplace_candidates`): index of a ``dmatmul`` ->
        (index of the producer of its run-time operand, arrays).
    carry_in : dict
        Inputs a previous segment left in memory-mode arrays: index (in the
        segment) of the consumer -> index (in the network) of the producer.
    carry_out : set
        Indices (in the segment) of the operators whose output the next
        segment reads from their memory-mode arrays (not written back).
    held : dict
        Physical arrays of the data carried in: producer index (in the network) -> arrays.
    tiles : list of int
        Spread layout (:data:`SPREAD`, :func:`spreads`): per operator, the tiles of one copy; empty: packed.
    core_load : list of float
        Spread layout: per operator, the time (ns) its copies keep the cores' links and ALUs busy in all.
    """

    first: int
    last: int
    alloc: mip.Allocation
    producer: list
    live: list = field(default_factory=list)
    pass_xbs: int = 0
    inplace: dict = field(default_factory=dict)
    carry_in: dict = field(default_factory=dict)
    carry_out: set = field(default_factory=set)
    held: dict = field(default_factory=dict)
    tiles: list = field(default_factory=list)
    core_load: list = field(default_factory=list)

    @property
    def reserved(self) -> int:
        """Arrays holding data carried in from the previous segment."""
        return sum(len(x) for x in self.held.values())

    def floor(self, top: int) -> int:
        """Arrays from the switchable top down to the lowest one holding carried-in data (0 in the spread
        layout: its compute arrays take any free array)."""
        return top - min(min(x) for x in self.held.values()) if self.held and not self.tiles else 0


def _consumers(names: list[str], producers: dict[str, list[str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {n: [] for n in names}
    for c, ps in producers.items():
        for p in ps:
            if p in out:
                out[p].append(c)
    return out


def needed_until(regions: list[Region], producers: dict[str, list[str]]) -> list[int]:
    """Per region (index), the last region (index) that needs its output where it is.

    A consumer that loads it (:func:`sources`) needs it until it runs; a
    consumer fed through a join whose result lands with a later producer
    needs it until that producer has run (the join reads it then).
    """
    order = {r.name: i for i, r in enumerate(regions)}
    src = sources(regions, producers)
    out = list(range(len(regions)))
    # where a join merges p into the arrays of a later producer s', the joins after it read p through s'
    # (the flattened producers list p for every region downstream of that chain): p is read by the first one
    merged: dict[str, list[tuple[int, set]]] = {}
    for c, ps in producers.items():
        s = src.get(c)
        if c in order and s is not None and len(ps) > 1:
            for p in ps:
                if p != s and p in order:
                    merged.setdefault(p, []).append((order[s], set(ps)))
    for c, ps in producers.items():
        if c not in order:
            continue
        s = src.get(c)
        for p in ps:
            if p in order:
                if s is not None and s != p and any(
                        at0 < order[s] and regions[at0].name in ps and prev <= set(ps)
                        for at0, prev in merged.get(p, [])):
                    continue  # read through an earlier join's result
                at = order[c] if (s is None or s == p) else order[s]
                out[order[p]] = max(out[order[p]], at)
    return out


_FLOW: dict = {}  # (region names and kinds, producers) -> what :func:`_flow` derives from them (the last few networks)


def _flow(regions: list[Region], producers: dict[str, list[str]]) -> tuple[dict, list[int], dict]:
    """:func:`sources`, :func:`needed_until` and the readers of every region (who loads its output), memoised
    on the names and producers (the DP asks for them with every candidate segment)."""
    key = (tuple((r.name, r.kind) for r in regions), tuple((k, tuple(v)) for k, v in producers.items()))
    if key not in _FLOW:
        if len(_FLOW) >= 8:
            _FLOW.clear()
        src = sources(regions, producers)
        readers = _consumers([r.name for r in regions], {c: [p] for c, p in src.items() if p is not None})
        _FLOW[key] = (src, needed_until(regions, producers), readers)
    return _FLOW[key]


_BASE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # Estimator -> region name -> its terms
_RING: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # Estimator -> (producer, consumer) -> bytes


def ring_bytes(p: Region, c: Region, est: Estimator, copies: int = 1) -> int:
    """Bytes of a line buffer in memory-mode arrays between producer ``p`` and its only consumer ``c`` of a
    pipelined segment: the largest input window a chunk of ``c`` loads, one of ``p``'s output chunks (being
    stored) and, per copy of ``c`` (its chunks in flight), the input one more chunk of ``c`` moves on by
    (chunks with one copy of each: the largest; more copies cut smaller ones).  The simulator holds a store
    until the consumer's loads have released the rows it overwrites
    (:func:`tvm_cim.simulator.timeline.schedule_graph`); a window and a chunk within the buffer cannot
    deadlock.  0 when the buffer would not be smaller than the whole output."""
    cache = _RING.setdefault(est, {})
    key = (p.name, c.name, copies)
    if key not in cache:
        total = p.mkn[0] * p.mkn[2] * est.obytes
        chp, chc = est.chunks(p, 1), est.chunks(c, 1)
        window = float(np.max(chc.f1 - chc.f0)) if len(chc) else 1.0
        step = float(np.max(np.diff(chc.f1, prepend=0.0))) if len(chc) else 1.0
        chunk = float(np.max(chp.stops - chp.starts)) / p.mkn[0] if len(chp) else 1.0
        ring = math.ceil((window + chunk + copies * step) * total)
        cache[key] = ring if ring < total else 0
    return cache[key]


def line_buffers(regions: list[Region], first: int, last: int, est: Estimator,
                 producers: dict[str, list[str]], copies: dict | None = None) -> dict[int, int]:
    """Outputs of a pipelined segment that may be kept in memory-mode arrays as a rolling line buffer
    (:func:`ring_bytes`) instead of whole: index in the segment -> bytes.

    Where :func:`tvm_cim.compiler.region.line_buffer_pairs` allows it (the only consumer is the next region
    and reads that output alone, in order).  Not in a serial segment (the producer runs whole before its
    consumer).  ``copies``: per consumer (index in the segment), its copies (default 1).
    """
    hw = est.hw
    seg = regions[first:last + 1]
    if (hw.dual_mode.switchable_arrays <= 0 or hw.dual_mode.memory_bandwidth_bits <= 0
            or hw.memory_capacity_bytes <= 0 or sum(_base_terms(r, est)["tiles"] for r in seg) > hw.total_crossbars):
        return {}
    cache = _RING.setdefault(est, {})
    key = ("pairs", tuple(r.name for r in regions))
    if key not in cache:  # the network's pairs, once (the DP asks for every candidate segment)
        cache[key] = line_buffer_pairs(regions, producers)
    pairs = cache[key]
    out = {}
    for i, p in enumerate(seg[:-1]):
        c = seg[i + 1]
        if pairs.get(p.name) != c.name:
            continue
        ring = ring_bytes(p, c, est, (copies or {}).get(i + 1, 1))
        if ring:
            out[i] = ring
    return out


def _base_terms(r: Region, est: Estimator) -> dict:
    """What of an operator's MIP terms does not depend on its segment (cached per estimator: the DP asks
    for every operator in every candidate segment)."""
    cache = _BASE.setdefault(est, {})
    if r.name not in cache:
        hw = est.hw
        rows = hw.crossbar.rows
        n_arr = hw.total_crossbars
        dual = hw.dual_mode.switchable_arrays > 0 and hw.dual_mode.memory_bandwidth_bits > 0
        ch = est.chunks(r, 1)
        load, prep, scatter, read, post, store = est._chunk_work(r, ch, rows)
        out_bytes = r.batch * ch.size * r.mkn[2]
        tiles = est.tiles(r, rows)
        cache[r.name] = dict(
            tiles=tiles,
            compute_ns=float(np.sum(read)) if CORE_SHARED else float(np.sum(scatter) + np.sum(read) + np.sum(post)),
            compute_all_ns=float(np.sum(scatter) + np.sum(read) + np.sum(post)),
            # a core's link and ALU serve every copy on it: d copies of t tiles span d * t / per_core cores
            core_ns=(max(float(np.sum(scatter)), float(np.sum(post))) * max(1.0, hw.core.crossbars / tiles)
                     if CORE_SHARED and hw.chip.computing_mode != "core" else 0.0),
            core_load=max(float(np.sum(scatter)), float(np.sum(post))),
            max_replicas=duplication.max_replicas(r, n_arr, tiles) if tiles <= n_arr else 1,
            in_ns_mem=float(np.sum(cost.memory_access(hw, ch.load_bytes, 1, False)[0])) if dual else 0.0,
            out_ns_mem=float(np.sum(cost.memory_access(hw, out_bytes, 1, True)[0])) if dual else 0.0,
            in_ns_port=float(np.sum(load)),
            out_ns_port=float(np.sum(store)),
            prep_ns=float(np.sum(prep)),
            wb_ns_mem=float(np.sum(cost.memory_access(hw, out_bytes, 1, False)[0])) if dual else 0.0,
            out_bytes=float(np.sum(out_bytes)), chunks=len(ch), dual=dual)
    return cache[r.name]


def rings_of(regions: list[Region], sm: SegmentModes, est: Estimator, producers: dict[str, list[str]]) -> dict:
    """The line buffers a segment's allocation uses (index in the segment -> bytes): outputs
    :func:`line_buffers` allows whose memory-mode arrays cannot hold them whole; each as large as its
    consumer's copies ask, as far as its arrays hold."""
    if sm.pass_xbs or sm.alloc is None:
        return {}
    cap = est.hw.memory_capacity_bytes
    live = sm.live or [False] * (sm.last - sm.first + 1)
    grown = line_buffers(regions, sm.first, sm.last, est, producers, dict(enumerate(sm.alloc.replicas)))
    out = {}
    for i, ring in line_buffers(regions, sm.first, sm.last, est, producers).items():
        b = _base_terms(regions[sm.first + i], est)
        slack = b["chunks"] + est.hw.total_crossbars  # each store rounds up per array
        whole = math.ceil((b["out_bytes"] + slack) / cap)
        if 0 < sm.alloc.memory[i] < whole and not live[i] and i not in sm.carry_out:
            out[i] = max(ring, min(grown.get(i) or b["out_bytes"], sm.alloc.memory[i] * cap - slack))
    return out


def op_terms(regions: list[Region], first: int, last: int, est: Estimator,
             producers: dict[str, list[str]], carry_in: dict | None = None,
             carry_out: set | None = None, per_copy: bool = False, spread: bool = False,
             copies: dict | None = None) -> tuple[list[mip.OpTerms], list]:
    """The MIP terms of operators ``first .. last`` (and each one's producer inside the segment).

    ``per_copy``: scatters and post-processing split among copies like crossbar reads (no per-core term),
    the model before :data:`CORE_SHARED`.  ``spread`` (the spread layout, :func:`spreads`): the per-core
    term of one copy is not scaled by the copies packed on its core (copies go to different cores; the MIP
    then bounds the cores' total, ``cores`` of :func:`tvm_cim.compiler.solvers.arrays.allocate`).
    ``copies``: per consumer (index in the segment) of a line buffer, the copies its size is for (default 1).

    An operator may keep its output in memory mode when a consumer in the
    segment loads it (:func:`sources`); it is live (written back, T^wb) when
    some region after the segment still needs it (:func:`needed_until`),
    unless the next segment keeps it in the arrays (``carry_out``: indices in
    the segment; then it must keep it).  ``carry_in``: per index in the
    segment, the memory-mode arrays a previous segment left its input in.
    """
    hw = est.hw
    seg = regions[first:last + 1]
    idx = {r.name: i for i, r in enumerate(seg)}
    src, until, readers = _flow(regions, producers)
    cap = hw.memory_capacity_bytes
    n_arr = hw.total_crossbars
    carry_in, carry_out = carry_in or {}, carry_out or set()
    rings = line_buffers(regions, first, last, est, producers, copies)
    terms, prod = [], []
    for i, r in enumerate(seg):
        b = _base_terms(r, est)
        p = idx.get(src[r.name]) if src[r.name] is not None else None
        prod.append(p)
        inside = [c for c in readers.get(r.name, []) if c in idx]
        keep = bool(inside) or i in carry_out
        live = keep and until[first + i] > last and i not in carry_out  # needed later: written back (T^wb)
        chunks_max = b["chunks"] + n_arr  # chunk count grows with copies; each store rounds up per array
        held_bytes = rings[i] if (i in rings and not live and i not in carry_out) else b["out_bytes"]
        need = math.ceil((held_bytes + chunks_max) / cap) if (keep and cap and b["dual"]) else 0
        terms.append(mip.OpTerms(
            tiles=b["tiles"], compute_ns=b["compute_all_ns"] if per_copy else b["compute_ns"],
            core_ns=0.0 if per_copy else (b["core_load"] if spread and CORE_SHARED else b["core_ns"]),
            max_replicas=b["max_replicas"],
            in_ns_mem=b["in_ns_mem"], out_ns_mem=b["out_ns_mem"], in_ns_port=b["in_ns_port"],
            out_ns_port=b["out_ns_port"], prep_ns=b["prep_ns"], memory_need=need, producer=p, live=live,
            wb_ns_mem=b["wb_ns_mem"] if live else 0.0, carried_in=float(carry_in.get(i, 0)),
            must_keep=i in carry_out,
        ))
    return terms, prod


_SEGS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # Estimator -> allocation key -> SegmentModes
_NS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # Estimator -> segment content key -> estimate
# Estimator -> the MIP's inputs -> its allocation: segments of the same shapes (MobileNetV2's repeated blocks)
# give the same terms, and the MIP is a function of its inputs (:func:`_allocate`)
_MIPS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _copy(sm: SegmentModes) -> SegmentModes:
    """A copy whose containers the callers may change (the allocation itself is replaced, never changed)."""
    return SegmentModes(sm.first, sm.last, sm.alloc, list(sm.producer), list(sm.live), sm.pass_xbs,
                        dict(sm.inplace), dict(sm.carry_in), set(sm.carry_out), {k: tuple(v) for k, v in sm.held.items()},
                        list(sm.tiles), list(sm.core_load))


def _content(regions: list[Region], sm: SegmentModes, resident: bool) -> tuple:
    """What the estimate of a segment depends on (its regions and every decision), as a memo key."""
    a = sm.alloc
    return (tuple(r.name for r in regions[sm.first:sm.last + 1]), resident, tuple(a.replicas), tuple(a.memory),
            sm.pass_xbs, tuple(sm.live), tuple(sorted(sm.inplace.items())), tuple(sorted(sm.carry_in.items())),
            tuple(sorted((k, tuple(v)) for k, v in sm.held.items())), bool(sm.tiles))


_HANDED: list = []  # the Segment pass's estimator with what it was built for, until the mode allocation takes it


def hand_over(est: Estimator, regions: list[Region], producers: dict[str, list[str]]) -> None:
    """Keep the segmentation's estimator (its memoised allocations and estimates) for :func:`take_over`."""
    _HANDED[:] = [(est, tuple(regions), {k: list(v) for k, v in producers.items()})]


def take_over(hw: CIMHardware, wbits: int, ibits: int, opts, regions: list[Region],
              producers: dict[str, list[str]]) -> Estimator | None:
    """The estimator :func:`hand_over` kept, if it was built for this chip, precision, options, the very same
    region objects (immutable once built, :func:`tvm_cim.compiler.transform.region_of`) and producers; at most once."""
    if not _HANDED:
        return None
    est, rs, prods = _HANDED.pop()
    same = (est.hw is hw and (est.wbits, est.ibits) == (wbits, ibits) and len(rs) == len(regions)
            and all(a is b for a, b in zip(rs, regions)) and prods == {k: list(v) for k, v in producers.items()}
            and est.offchip_in_order == (opts.modes == "dual") and est.mvm_pipeline == opts.mvm_pipeline
            and est.rounds == opts.pipeline_rounds and est.vectors == opts.pipeline_vectors)
    return est if same else None


def segment_ns(regions: list[Region], sm: SegmentModes, est: Estimator, producers: dict[str, list[str]],
               make_plan, resident: bool = False) -> float:
    """The shared estimate of one segment under its allocation, alone (memoised per estimator on its content)."""
    cache = _NS.setdefault(est, {})
    key = _content(regions, sm, resident)
    if key not in cache:
        seg = regions[sm.first:sm.last + 1]
        cache[key] = est.graph_ns(seg, segment_plans(regions, sm, est, 0, resident, make_plan, producers=producers), True,
                                 producers)[0]
    return cache[key]


def allocate_segment(regions: list[Region], first: int, last: int, est: Estimator,
                     producers: dict[str, list[str]], time_limit: float = TIME_LIMIT_S,
                     seed: int = 0, make_plan=None, carry_in: dict | None = None, carry_out: set | None = None,
                     held: dict | None = None, per_copy: bool = False, packed: bool = False) -> SegmentModes:
    """:func:`allocate_segment_once`, memoised per estimator (the DP, the carry pass and the cut refinement
    ask for the same segments again); each call gets its own copy."""
    key = (tuple(r.name for r in regions[first:last + 1]), first, time_limit, seed, make_plan is not None, per_copy,
           packed,
           tuple(sorted((carry_in or {}).items())), tuple(sorted(carry_out or ())),
           tuple(sorted((k, tuple(v)) for k, v in (held or {}).items())))
    cache = _SEGS.setdefault(est, {})
    if key not in cache:
        try:
            cache[key] = allocate_segment_once(regions, first, last, est, producers, time_limit, seed, make_plan,
                                               carry_in, carry_out, held, per_copy, packed)
        except (ValueError, RuntimeError) as e:  # infeasible: remembered too
            cache[key] = e
    hit = cache[key]
    if isinstance(hit, Exception):
        raise hit
    return _copy(hit)


def allocate_segment_once(regions: list[Region], first: int, last: int, est: Estimator,
                          producers: dict[str, list[str]], time_limit: float = TIME_LIMIT_S,
                          seed: int = 0, make_plan=None, carry_in: dict | None = None, carry_out: set | None = None,
                          held: dict | None = None, per_copy: bool = False, packed: bool = False) -> SegmentModes:
    """Allocate operators ``first .. last``: the MIP when one copy of each fits the chip, otherwise a
    serial segment (:func:`serial_allocation`; ``make_plan`` -- :func:`schedule.make_plan` -- costs its
    memory choices; without it, no memory array).

    ``carry_in`` (consumer index in the segment -> producer index in the network), ``held`` (producer
    index -> its physical arrays) and ``carry_out`` (indices in the segment): data kept in memory-mode
    arrays across the segment's boundaries (:func:`carry`; pipelined segments only).

    The spread layout (:func:`spreads`; the MIP then sees the cores' total, :func:`op_terms`) is kept where
    the shared estimate finds the segment faster than the packed layout with its own MIP allocation;
    ``packed``: packed only (the DP's candidates, :data:`DP_PACKED`).
    """
    hw = est.hw
    carry_in, held, carry_out = carry_in or {}, held or {}, carry_out or set()
    arrays_in = {i: len(held[g]) for i, g in carry_in.items()}
    spread = spreads(hw, regions[first:last + 1]) and not packed
    terms, prod = op_terms(regions, first, last, est, producers, arrays_in, carry_out, per_copy,
                           spread and SPREAD_MIP)
    n = hw.total_crossbars
    live = [t.live for t in terms]
    if sum(t.tiles for t in terms) > n:
        return serial_allocation(regions, first, last, est, producers, terms, prod, make_plan)
    top = hw.dual_mode.switchable_arrays
    sm = SegmentModes(first, last, None, prod, live, carry_in=dict(carry_in), carry_out=set(carry_out),
                      held=dict(held))
    if spread:
        sm.tiles = [t.tiles for t in terms]
        sm.core_load = [_base_terms(r, est)["core_load"] for r in regions[first:last + 1]]
    cores = hw.cores if spread and SPREAD_MIP and CORE_SHARED and not per_copy else 0
    sm.alloc = _allocate(est, terms, n, top, time_limit, seed, sm.reserved, sm.floor(top), cores)
    # line buffers sized for one copy of their consumer hold fewer of its chunks in flight than it has
    # copies: allocated once more with buffers for the copies the first allocation gave it (not for the packed
    # layout, the DP's candidates: a compile-time bound, MobileNetV2@224 8.9 -> 6.4 s CPU, same estimate)
    cap = hw.memory_capacity_bytes
    copies = {} if packed else {
        i + 1: sm.alloc.replicas[i + 1] for i, ring in line_buffers(regions, first, last, est, producers).items()
        if sm.alloc.memory[i] and sm.alloc.replicas[i + 1] > 1}
    grown = line_buffers(regions, first, last, est, producers, copies)
    if any(sm.alloc.memory[i - 1] * cap < (grown.get(i - 1) or math.inf) for i in copies):
        terms2, _ = op_terms(regions, first, last, est, producers, arrays_in, carry_out, per_copy,
                             spread and SPREAD_MIP, copies)
        try:
            sm.alloc = _allocate(est, terms2, n, top, time_limit, seed, sm.reserved, sm.floor(top), cores)
        except (ValueError, RuntimeError):  # the larger buffers do not fit: the first allocation
            pass
    if spread and make_plan is not None:  # the spread layout where the shared estimate finds it faster
        try:  # than the packed one with its own allocation (the DP's, memoised)
            alt = allocate_segment(regions, first, last, est, producers, time_limit, seed, make_plan, carry_in,
                                   carry_out, held, per_copy, packed=True)
        except (ValueError, RuntimeError):  # packed, it does not fit beside the held arrays
            return sm
        if segment_ns(regions, alt, est, producers, make_plan) <= segment_ns(regions, sm, est, producers, make_plan):
            return alt
    return sm


def _allocate(est: Estimator, terms: list[mip.OpTerms], n: int, top: int, time_limit: float, seed: int,
              reserved: int, floor: int, cores: int) -> mip.Allocation:
    """:func:`~tvm_cim.compiler.solvers.arrays.allocate`, memoised per estimator on its inputs (a repeat
    reports 0 s of solve time; infeasible inputs are remembered too)."""
    key = (tuple(terms), n, top, time_limit, seed, reserved, floor, cores)
    cache = _MIPS.setdefault(est, {})
    if key in cache:
        hit = cache[key]
        if isinstance(hit, Exception):
            raise hit
        return dataclasses.replace(hit, replicas=list(hit.replicas), memory=list(hit.memory), seconds=0.0)
    try:
        cache[key] = mip.allocate(terms, n, top, time_limit, seed, reserved=reserved, floor=floor, cores=cores)
    except (ValueError, RuntimeError) as e:
        cache[key] = e
        raise
    a = cache[key]
    return dataclasses.replace(a, replicas=list(a.replicas), memory=list(a.memory))


def spreads(hw: CIMHardware, seg: list[Region]) -> bool:
    """Whether a pipelined segment takes the spread layout (:data:`SPREAD`): every array switchable (memory
    arrays anywhere), crossbar-level computing (a copy's link is its lowest core's), no ``dmatmul`` (keys in
    place sit below the memory arrays)."""
    return (SPREAD and hw.dual_mode.switchable_arrays >= hw.total_crossbars and hw.chip.computing_mode != "core"
            and not any(r.kind == DMATMUL for r in seg))


def serial_choices(hw: CIMHardware, terms: list[mip.OpTerms]) -> list[tuple[list[int], int]]:
    """Memory choices of a serial segment: ``(memory arrays per operator, compute arrays)``.

    Every subset of the operators that may keep their output (a consumer in
    the segment that reads nothing else; up to :data:`SERIAL_KEEP_MAX` of
    them), each kept at the arrays its output needs; the memory arrays sit at
    the top of the switchable range, the compute arrays below them, so at
    least one array must stay computing.  The first choice keeps nothing.
    """
    n, top = hw.total_crossbars, hw.dual_mode.switchable_arrays
    keep = [i for i, t in enumerate(terms) if t.memory_need][:SERIAL_KEEP_MAX]
    out = []
    for mask in range(1 << len(keep)):
        mem = [0] * len(terms)
        for b, i in enumerate(keep):
            if mask >> b & 1:
                mem[i] = terms[i].memory_need
        total = sum(mem)
        comp = n if not total else top - total
        if total <= top and comp >= 1:
            out.append((mem, comp))
    return out


def serial_allocation(regions: list[Region], first: int, last: int, est: Estimator,
                      producers: dict[str, list[str]], terms: list[mip.OpTerms], prod: list,
                      make_plan=None) -> SegmentModes:
    """A serial segment's allocation: the memory choice (:func:`serial_choices`) the shared estimate finds
    fastest, every operator with one copy on the compute arrays (in passes when larger).

    A single operator keeps nothing and runs on the whole chip, as before the split.
    """
    n = est.hw.total_crossbars
    live = [t.live for t in terms]
    choices = serial_choices(est.hw, terms) if make_plan is not None else [([0] * len(terms), n)]
    best = None
    for mem, comp in choices:
        xbs = comp if (first != last or any(mem)) else 0
        alloc = mip.Allocation([1] * len(terms), mem, math.inf, status="passes", compute_arrays=comp)
        sm = SegmentModes(first, last, alloc, prod, live, pass_xbs=xbs)
        if len(choices) == 1:
            return sm
        t = segment_ns(regions, sm, est, producers, make_plan)  # memoised: the DP asks for the kept one again
        sm.alloc.latency_ns = t
        if best is None or t < best[0]:
            best = (t, sm)
    return best[1]


def switch_counts(prev_memory: int, memory: int) -> tuple[int, int]:
    """(TOM, TOC) arrays when a segment with ``memory`` memory arrays follows one with ``prev_memory``
    (memory arrays sit at the top of the switchable range, so the sets are nested)."""
    return max(0, memory - prev_memory), max(0, prev_memory - memory)


def switch_ns(hw: CIMHardware, tom: int, toc: int) -> float:
    """Time of a segment's switches (TOM and TOC run at once, on different arrays)."""
    return max(cost.switch(hw, tom, True)[0] if tom else 0.0, cost.switch(hw, toc, False)[0] if toc else 0.0)


def effective_arrays(regions: list[Region], est: Estimator, memory: dict[str, int],
                     source: dict[str, str], segment: dict[str, int] | None = None) -> dict[str, tuple[float, float]]:
    """Per region, the memory arrays its loads and its stores get, as the estimate costs them.

    A producer's arrays serve its stores and its consumers' loads; each
    access gets a share of their bandwidth proportional to its bytes, so the
    arrays are busy for the sum of both, as on the simulator's timeline.
    Accesses in different segments (``segment``: region name -> segment;
    data kept across a boundary) do not overlap in time and do not share.

    Parameters
    ----------
    memory : dict
        Region name -> memory arrays holding its output.
    source : dict
        Region name -> the region whose memory arrays hold its input.
    """
    by = {r.name: r for r in regions}
    seg = segment or {}
    loads = {n: float(np.sum(est.chunks(by[n], 1).load_bytes)) for n in source}
    stores = {n: float(by[n].batch * np.prod(by[n].mkn[::2])) for n, b in memory.items() if b and n in by}
    total = {(n, seg.get(n)): v for n, v in stores.items()}
    for c, p in source.items():
        total[(p, seg.get(c))] = total.get((p, seg.get(c)), 0.0) + loads[c]
    out = {}
    for r in regions:
        n = r.name
        b_out = memory.get(n, 0)
        p = source.get(n)
        eff_out = b_out * stores[n] / total[(n, seg.get(n))] if b_out else 0.0
        eff_in = memory[p] * loads[n] / total[(p, seg.get(n))] if p is not None and memory.get(p) else 0.0
        out[n] = (eff_in, eff_out)
    return out


def segment_plans(regions: list[Region], sm: SegmentModes, est: Estimator, seg_idx: int, resident: bool,
                  make_plan, switch: float = 0.0, latency: bool = False, inplace_xbs: dict | None = None,
                  producers: dict[str, list[str]] | None = None) -> dict:
    """The region plans of a segment under its allocation (``make_plan``: :func:`schedule.make_plan`).

    ``inplace_xbs``: per ``dmatmul`` with keys in place, its physical arrays
    (:func:`memory_layout`); without it, placeholders of the right count.  ``producers`` given: the
    rolling line buffers the allocation uses (:func:`rings_of`) are in the plans (``mem_ring``), so
    that the estimate counts their stores' waits.
    """
    out = {}
    rows = est.hw.crossbar.rows
    seg = regions[sm.first:sm.last + 1]
    memory = {r.name: b for r, b in zip(seg, sm.alloc.memory)}
    xbs_of = {}  # keys in place: the producer stores into the arrays the dmatmul computes on
    for qi, (ki, t) in sm.inplace.items():
        xbs = tuple((inplace_xbs or {}).get(qi, range(t)))
        xbs_of[qi] = xbs_of[ki] = xbs
        memory[seg[ki].name] = len(xbs)
    source = {r.name: seg[p].name for r, p in zip(seg, sm.producer) if p is not None and sm.alloc.memory[p]}
    eff = effective_arrays(seg, est, memory, source)
    for ci, g in sm.carry_in.items():  # loaded from the arrays the previous segment left it in (no store now)
        eff[seg[ci].name] = (float(len(sm.held[g])), eff[seg[ci].name][1])
    live = sm.live or [False] * len(seg)
    spread = compute_layout(est.hw, sm) if sm.tiles and not sm.pass_xbs else [()] * len(seg)
    rings = rings_of(regions, sm, est, producers) if producers is not None else {}
    for i, r in enumerate(seg):
        out[r.name] = make_plan(r, est, 1 if i in sm.inplace else sm.alloc.replicas[i], rows, seg_idx, resident,
                                latency=latency, mem_in=eff[r.name][0], mem_out=eff[r.name][1],
                                switch_ns=switch if i == 0 else 0.0, mem_wb=sm.alloc.memory[i] if live[i] else 0,
                                pass_xbs=sm.pass_xbs, inplace_xbs=xbs_of.get(i, ()), compute_xbs=spread[i],
                                mem_ring=rings.get(i, 0))
    return out


def inplace_candidates(regions: list[Region], sm: SegmentModes, est: Estimator, producers: dict[str, list[str]],
                       operands: dict[str, list[list[str]]]) -> list[tuple[int, int, int]]:
    """Keys in place (paper sec. 5.3) a pipelined segment allows: ``(dmatmul, producer, arrays)`` indices.

    A ``dmatmul`` (``Q K^T``) has two producers; the one of its run-time
    operand (the K projection; ``operands``: per region and operand, the
    regions reaching it) may store its output into memory-mode arrays that
    then switch to compute mode keeping the data as the ``dmatmul``'s one
    copy of weights, when: both are in the segment, the producer's output
    goes nowhere else, every array keeps what its tile needs (all heads of a
    tile: ``rows x cols x batch`` bytes) within its memory capacity, and the
    arrays fit beside the segment's other compute and memory arrays.
    """
    hw = est.hw
    if sm.pass_xbs or hw.chip.computing_mode == "core" or hw.dual_mode.switchable_arrays <= 0:
        return []
    rows = hw.crossbar.rows
    seg = regions[sm.first:sm.last + 1]
    idx = {r.name: i for i, r in enumerate(seg)}
    cons = _consumers([r.name for r in regions], producers)
    tiles = [est.tiles(r, rows) for r in seg]
    wbytes = -(-est.wbits // 8)
    out = []
    for qi, q in enumerate(seg):
        ops = operands.get(q.name) or []
        if q.kind != DMATMUL or len(ops) < 2 or len(ops[1]) != 1 or ops[1][0] not in idx:
            continue
        ki = idx[ops[1][0]]
        k = seg[ki]
        if cons.get(k.name) != [q.name] or sm.alloc.memory[ki]:
            continue
        t = tiles[qi]
        ch = est.chunks(k, sm.alloc.replicas[ki])
        kept = int(sum(-(-int(b) // t) for b in k.batch * ch.size * k.mkn[2]))  # each store splits evenly
        need = max((x.k1 - x.k0) * (x.n1 - x.n0) for x in est.tile_list(q, rows)) * q.batch * wbytes
        if not need <= kept <= hw.memory_capacity_bytes:
            continue
        others = sum(d * n for i, (d, n) in enumerate(zip(sm.alloc.replicas, tiles)) if i != qi)
        top = hw.dual_mode.switchable_arrays
        if others + max(sm.alloc.memory_arrays + sm.reserved, sm.floor(top)) + t > top:
            continue
        out.append((qi, ki, t))
    return out


def segment_dp(regions: list[Region], est: Estimator, producers: dict[str, list[str]], make_plan,
               time_limit: float = TIME_LIMIT_S, seed: int = 0) -> tuple[list[SegmentModes], bool]:
    """CMSwitch's segmentation (corrected Eq. 3) with every candidate segment allocated by the MIP.

    Returns
    -------
    segments : list of SegmentModes
        In order; their allocations.
    resident : bool
        The whole network is one segment whose weights stay on the chip.
    """
    m = len(regions)
    if m == 0:
        return [], True
    hw = est.hw
    n = hw.total_crossbars
    tiles = [est.tiles(r, hw.crossbar.rows) for r in regions]
    if sum(tiles) <= n:  # everything fits: one segment, weights written once
        return [allocate_segment(regions, 0, m - 1, est, producers, time_limit, seed, make_plan)], True
    cache: dict[tuple[int, int], SegmentModes] = {}
    prefix = np.concatenate([[0], np.cumsum(tiles)])

    def modes(i, j):
        if (i, j) not in cache:
            cache[(i, j)] = allocate_segment(regions, i, j, est, producers, time_limit, seed, make_plan,
                                             packed=DP_PACKED)
        return cache[(i, j)]

    def intra(i, j):
        if prefix[j + 1] - prefix[i] > n and j - i + 1 > SERIAL_MAX:
            return math.inf
        sm = modes(i, j)
        if sm.alloc.status == "passes" and math.isfinite(sm.alloc.latency_ns):  # serial_allocation costed it
            return sm.alloc.latency_ns
        return segment_ns(regions, sm, est, producers, make_plan)

    def inter(prev, seg):
        before = modes(*prev).alloc.memory_arrays if prev is not None else 0
        return switch_ns(hw, *switch_counts(before, modes(*seg).alloc.memory_arrays))

    longest = 1
    for i in range(m):
        j = i
        while j + 1 < m and prefix[j + 2] - prefix[i] <= n and j + 2 - i <= PIPELINE_MAX:
            j += 1
        longest = max(longest, j - i + 1, min(SERIAL_MAX, m - i))
    fetched = np.concatenate([[0.0], np.cumsum(fetch_bounds(regions, est))])
    _, cut = dp_segment(m, intra, inter, longest, lower=(lambda i, j: float(fetched[j + 1] - fetched[i])) if DP_PRUNE
                        else None, inter_max=switch_bound(hw), stats=DP_STATS)
    return [modes(i, j) for i, j in cut], False


def fetch_bounds(regions: list[Region], est: Estimator) -> list[float]:
    """Per region, a lower bound on what its constant weights add to a segment's estimate (non-resident).

    The shared estimate (:meth:`~tvm_cim.compiler.estimate.Estimator.graph_ns`) ends a segment no earlier than
    the off-chip interface has fetched the weights of all its regions, one after another: a region's pass
    fetches take :meth:`~tvm_cim.compiler.estimate.Estimator.fetch_ns` each, at least the fetch of all its
    tiles at once (the interface's cycles round up per transfer), whatever its copies and memory arrays.
    A ``dmatmul`` fetches nothing.  The segmentation DP's ``lower`` (:func:`segment_dp`).
    """
    rows = est.hw.crossbar.rows
    return [float(np.sum(est.fetch_ns(r, rows, 1, max(1, est.tiles(r, rows))))) for r in regions]


def switch_bound(hw: CIMHardware) -> float:
    """The longest switch between two segments (:func:`switch_ns` of any TOM and TOC counts)."""
    top = hw.dual_mode.switchable_arrays
    return max((switch_ns(hw, t, t) for t in range(top + 1)), default=0.0)


def place(hw: CIMHardware, sm: SegmentModes) -> tuple[list[tuple], set, dict]:
    """Physical memory arrays of a segment's operators.

    The arrays holding data carried in (``sm.held``) stay where they are;
    the segment's own memory arrays take the highest free arrays of the
    switchable range, those carried out first, then in operator order; keys
    in place sit below the lowest memory array.

    Returns
    -------
    arrays : list of tuple
        Per operator, its memory arrays.
    mine : set
        Every array in memory mode during the segment.
    inplace : dict
        Per ``dmatmul`` with keys in place, its arrays.
    """
    top = hw.dual_mode.switchable_arrays
    taken = {x for xs in sm.held.values() for x in xs}
    free = [x for x in range(top - 1, -1, -1) if x not in taken]
    if sm.tiles and not sm.pass_xbs:  # spread: the k-th memory array on the core with the most free arrays
        per = hw.core.crossbars
        by_core: dict[int, list[int]] = {}
        for x in free:
            by_core.setdefault(x // per, []).append(x)  # highest first
        order = []
        for _ in range(min(sum(sm.alloc.memory), len(free))):
            c = max(by_core, key=lambda c_: (len(by_core[c_]), c_))
            order.append(by_core[c].pop(0))
        free = order
    arrays: list[tuple] = [()] * len(sm.alloc.memory)
    k = 0
    for i in sorted(sm.carry_out) + [i for i in range(len(sm.alloc.memory)) if i not in sm.carry_out]:
        b = sm.alloc.memory[i]
        arrays[i] = tuple(sorted(free[k:k + b]))
        k += b
    mine = taken | {x for xs in arrays for x in xs}
    inplace, lo = {}, (min(mine) if mine else top)
    for qi, (_, t) in sorted(sm.inplace.items()):
        inplace[qi] = tuple(range(lo - t, lo))
        lo -= t
    return arrays, mine, inplace


def compute_layout(hw: CIMHardware, sm: SegmentModes) -> list[tuple]:
    """The spread layout's compute arrays (:data:`SPREAD`): per operator, per copy, the crossbar of every tile.

    The arrays :func:`place` leaves free (neither held nor in memory mode)
    take the copies, heaviest first (per copy, ``core_load`` split among the
    copies): each goes to the core whose link and ALU carry the least so far
    among those with room for all its tiles (its lowest free arrays), or,
    when no core has room, starts on the least loaded core with any and
    continues on the next ones.  A copy's scatters use the link of its lowest
    core, as on the simulator.  Deterministic.
    """
    per = hw.core.crossbars
    mine = place(hw, sm)[1]
    free: dict[int, list[int]] = {}
    for x in range(hw.total_crossbars):
        if x not in mine:
            free.setdefault(x // per, []).append(x)
    load = {c: 0.0 for c in free}
    reps = sm.alloc.replicas
    copies = sorted(((-sm.core_load[i] / reps[i], i, q) for i in range(len(reps)) for q in range(reps[i])))
    out: list[list] = [[None] * d for d in reps]
    for w, i, q in copies:
        t = sm.tiles[i]
        room = [c for c in free if len(free[c]) >= t]
        if room:
            c = min(room, key=lambda c_: (load[c_], c_))
            xs, free[c] = free[c][:t], free[c][t:]
        else:
            cores = sorted((c_ for c_ in free if free[c_]), key=lambda c_: (load[c_], c_))
            if not cores:
                raise ValueError(f"the spread layout has no free array for a copy of {t} tiles")
            ring = sorted(free)
            at = ring.index(cores[0])
            xs = []
            for c_ in ring[at:] + ring[:at]:
                k = min(t - len(xs), len(free[c_]))
                xs, free[c_] = xs + free[c_][:k], free[c_][k:]
                if len(xs) == t:
                    break
            if len(xs) < t:
                raise ValueError(f"the spread layout has {len(xs)} free arrays for a copy of {t} tiles")
            c = min(xs) // per
        load[c] -= w
        out[i][q] = tuple(xs)
    return [tuple(x) for x in out]


def memory_layout(hw: CIMHardware, segs: list[SegmentModes]) -> list[dict]:
    """Physical memory arrays per operator and the switches at every segment start (:func:`place`).

    Returns
    -------
    list of dict
        Per segment: ``out`` (per operator: tuple of its memory arrays),
        ``inplace`` (per ``dmatmul`` with keys in place: its arrays, below
        the memory ones), ``tom`` / ``toc`` (arrays switched at the segment start; the first
        segment switches from the last one's modes, and switches all its own
        memory arrays TOM so the first inference starts right).  Arrays
        holding data carried into a segment stay in memory mode.
    """
    placed = [place(hw, sm) for sm in segs]
    out = []
    for s, (arrays, mine, inplace) in enumerate(placed):
        theirs = placed[s - 1][1] if s else placed[-1][1]
        tom = sorted(mine if s == 0 else mine - theirs)
        toc = sorted(theirs - mine)
        out.append({"out": arrays, "tom": tuple(tom), "toc": tuple(toc), "inplace": inplace})
    return out


def carry(regions: list[Region], segs: list[SegmentModes], est: Estimator, producers: dict[str, list[str]],
          make_plan, resident: bool = False, time_limit: float = TIME_LIMIT_S, seed: int = 0,
          packed: bool = False) -> list[int]:
    """Keep live outputs in memory-mode arrays across segment boundaries (paper sec. 4: memory-mode arrays
    as on-chip buffers for intermediate data), where the shared estimate finds it faster.

    Segment by segment, in order, an output some later region still needs
    (:func:`needed_until`), at most :data:`CARRY_SPAN` segments on, may stay
    in its memory-mode arrays: the segment keeps it there (``must_keep``, no
    write-back), the segments up to its last reader keep those arrays in
    memory mode (they count in their budgets, their compute arrays stay below
    them) and its readers load from them instead of the port.  All these
    segments are allocated again by the MIP; the candidate that lowers their
    estimated latency most is kept, and the search repeats until none does.
    Serial segments take part in none.

    Returns
    -------
    list of int
        Per boundary taken, the index of the segment before it (``segs`` is updated in place).
    """
    hw = est.hw
    top = hw.dual_mode.switchable_arrays
    if (len(segs) < 2 or top <= 0 or hw.dual_mode.memory_bandwidth_bits <= 0 or hw.memory_capacity_bytes <= 0
            or hw.chip.computing_mode == "core"):
        return []
    src, until, _ = _flow(regions, producers)
    order = {r.name: i for i, r in enumerate(regions)}

    seg_of = [s for s, sm in enumerate(segs) for _ in range(sm.last - sm.first + 1)]

    def cost_of(s_idx, sm):
        return segment_ns(regions, sm, est, producers, make_plan, resident)

    def serial(sm):
        return sm.pass_xbs or sm.alloc.status == "passes"

    taken = []
    for s in range(len(segs) - 1):
        if serial(segs[s]):
            continue
        while True:
            a = segs[s]
            best = None
            for g in range(a.first, a.last + 1):
                if g - a.first in a.carry_out or until[g] <= a.last:
                    continue
                keep = a.carry_out | {g - a.first}
                t = max(seg_of[until[a.first + i]] for i in keep)  # the last segment holding any of them
                if seg_of[until[g]] - s > CARRY_SPAN or any(serial(x) for x in segs[s + 1:t + 1]):
                    continue
                readers = [order[c] for c, p in src.items() if p == regions[g].name and order[c] > a.last]
                if any(regions[c].kind == DMATMUL for c in readers):
                    continue
                try:
                    a2 = allocate_segment(regions, a.first, a.last, est, producers, time_limit, seed, make_plan,
                                          a.carry_in, keep, a.held, packed=packed)
                    if not a2.alloc.memory[g - a.first]:
                        continue
                    out_xbs = place(hw, a2)[0]
                    new = [a2]
                    for x in segs[s + 1:t + 1]:  # hold the arrays (at their new places) up to the last reader
                        held = {k: (out_xbs[k - a.first] if a.first <= k <= a.last else v) for k, v in x.held.items()}
                        if until[g] >= x.first:
                            held[g] = out_xbs[g - a.first]
                        cin = x.carry_in | {c - x.first: g for c in readers if x.first <= c <= x.last}
                        x2 = allocate_segment(regions, x.first, x.last, est, producers, time_limit, seed, make_plan,
                                              cin, x.carry_out, held, packed=packed)
                        if x2.pass_xbs:
                            raise ValueError("serial")
                        new.append(x2)
                except (ValueError, RuntimeError):  # does not fit beside the held arrays
                    continue
                v = sum(cost_of(s + i, y) for i, y in enumerate(new))
                base = sum(cost_of(i, segs[i]) for i in range(s, t + 1))
                if v < base and (best is None or v - base < best[0]):
                    best = (v - base, new)
            if best is None:
                break
            segs[s:s + len(best[1])] = best[1]
            taken.extend(range(s, s + len(best[1]) - 1))
    return taken


def refine_cut(segment_of: list[int], cost, passes: int = REFINE_PASSES) -> tuple[list[int], float]:
    """Move segment boundaries one operator either way while ``cost`` (of a whole segmentation) drops.

    The DP costs every segment alone, before :func:`carry` decides what
    stays in memory mode across boundaries; this search prices each move
    with the carries the whole allocation then makes (``cost``: the shared
    estimate after :func:`tvm_cim.compiler.schedule.allocate_modes`), first
    improvement, boundary by boundary from the first, ``passes`` sweeps.
    Deterministic.

    Returns
    -------
    segment_of : list of int
        Per region, its segment.
    cost : float
        Its cost.
    """
    n = len(segment_of)
    cuts = [i for i in range(1, n) if segment_of[i] != segment_of[i - 1]]
    best = cost(list(segment_of))

    def seg_of(cs):
        return [sum(1 for c in cs if c <= i) for i in range(n)]

    for _ in range(passes):
        moved = False
        for k in range(len(cuts)):
            for d in (1, -1):
                c = cuts[k] + d
                if c <= (cuts[k - 1] if k else 0) or c >= (cuts[k + 1] if k + 1 < len(cuts) else n):
                    continue
                trial = cuts[:k] + [c] + cuts[k + 1:]
                try:
                    v = cost(seg_of(trial))
                except (ValueError, RuntimeError):
                    continue
                if v < best:
                    best, cuts, moved = v, trial, True
                    break
        if not moved:
            break
    return seg_of(cuts), best

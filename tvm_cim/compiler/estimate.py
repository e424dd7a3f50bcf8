"""The fast estimate: latency and energy of regions and graphs, from the chunk plan and the cost primitives.

What the optimisers minimise.  It applies the per-operation cost primitives
of :mod:`tvm_cim.hardware.cost` (the ones the simulator charges) to the
chunks of :mod:`tvm_cim.compiler.plan` (the ones the code generator emits),
aggregated per shared resource with max-plus recurrences instead of an event
timeline:

* every chunk's input is loaded through the shared global-buffer port (and,
  a network input only, quantised by the chip ALU), in program order;
* it is scattered to its replica's core and read there; a replica reads its
  chunks one after another;
* post-processing on the replica's core ALU (including quantising the output
  for the consuming regions) and the store follow the read;
* a region lasts until its last chunk is stored, and at least as long as
  the global-buffer port and the chip ALU are busy.

:meth:`Estimator.graph_ns` stitches regions with the inter-layer pipeline and
segments; there the units regions share (global-buffer port, chip ALU,
off-chip interface, each core's link and ALU) are booked region by region,
chunk by chunk in program order at the earliest gap (:func:`book`), as the
simulator's list scheduler books them -- a region waits where an earlier one
holds a unit, which the busy-time bound alone misses (ResNet-18 at 224 on
``dynaplasia`` under ``cim-mlc``: -20% without, 0.0% with); :meth:`Estimator.linear_terms` exposes the region cost in the
form mixed-integer programs need (linear in replicas).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from ..hardware import cost
from ..hardware.schema import CIMHardware
from ..simulator.timeline import _Resource
from . import plan as P
from .mapping import tile_matrix
from .region import CONV2D, DMATMUL, Region, line_buffer_pairs, sources


def maxplus(ready: np.ndarray, work: np.ndarray, axis: int = 0) -> np.ndarray:
    """Finish times of jobs served in order by one unit: ``f[i] = max(f[i-1], ready[i]) + work[i]``."""
    w = np.cumsum(work, axis=axis)
    return np.maximum.accumulate(ready - (w - work), axis=axis) + w


def range_max(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``max(values[lo[i]:hi[i]])`` for every ``i`` (sparse table, vectorised; ranges non-empty).

    Non-decreasing values (a region's chunks stored in order, the usual case): the last of each range."""
    v = np.asarray(values, dtype=float)
    if len(v) and np.all(hi > lo) and np.all(v[1:] >= v[:-1]):
        return v[hi - 1]
    table = [v]
    span = 1
    while 2 * span <= len(values):
        prev = table[-1]
        table.append(np.maximum(prev[:-span], prev[span:]))
        span *= 2
    length = np.maximum(hi - lo, 1)
    level = np.floor(np.log2(length)).astype(np.int64)
    out = np.empty(len(lo))
    for lv in np.unique(level):
        sel = level == lv
        t = table[lv]
        out[sel] = np.maximum(t[lo[sel]], t[hi[sel] - (1 << lv)])
    return out


def book(rs: tuple, t: float, dur: float) -> float:
    """Finish time of a job of ``dur`` on the units ``rs`` (all at once), at their earliest common gap >= ``t``.

    The simulator's list scheduler (:func:`tvm_cim.simulator.timeline.schedule_graph`)
    books each operation this way, in program order and region by region;
    the units are its :class:`tvm_cim.simulator.timeline._Resource`.
    """
    if dur <= 0:
        return t
    if len(rs) == 1:
        u = rs[0]
        t = u.earliest(t, dur)  # returns t at once when t is after everything booked
        u.reserve(t, dur)
        return t + dur
    while True:
        t2 = t
        for u in rs:
            t2 = u.earliest(t2, dur)
        if t2 == t:
            break
        t = t2
    for u in rs:
        u.reserve(t, dur)
    return t + dur


@dataclass(frozen=True)
class LinearTerms:
    """A region's cost in the form an MIP takes: ``latency ~ fixed_ns + max(serial_ns, parallel_ns / replicas)``.

    Attributes
    ----------
    fixed_ns : float
        Work that does not shrink with replicas and does not overlap the reads:
        writing run-time weights, the last chunk's post-processing and store.
    serial_ns : float
        Work on units every replica shares (global-buffer port, chip ALU).
    parallel_ns : float
        Work split among replicas (crossbar reads, scatters, core post-processing).
    tiles : int
        Crossbars one replica occupies.
    energy_pj : float
        Dynamic energy of one inference (does not depend on replicas).
    """

    fixed_ns: float
    serial_ns: float
    parallel_ns: float
    tiles: int
    energy_pj: float

    def latency_ns(self, replicas):
        """The linearised latency at ``replicas`` copies (works on arrays)."""
        return self.fixed_ns + np.maximum(self.serial_ns, self.parallel_ns / np.asarray(replicas, dtype=float))


def _region_key(r: Region) -> tuple:
    """What of a (mutable) region an estimate depends on, besides its identity: memo keys stay valid."""
    return (r.name, r.kind, tuple(map(tuple, r.in_shapes)), tuple(r.out_shape), r.x_signed, r.rows_per_step,
            r.adc_lsb, r.weight_encoding, r.input_encoding, r.quant_at_producer, r.requant_out, id(r.w_int),
            id(r.adc_lsb_cols), tuple(sorted((k, str(v)) for k, v in r.conv.items())))


def shape_key(r: Region) -> tuple:
    """What the estimate of a region on its own (:meth:`Estimator.region_ns` at any plan, inputs ready at 0)
    depends on: regions equal under it have the same latency curve whatever their names and weights (a
    dense network repeats layers of one shape).  Weights enter through their shape only, except a grouped
    convolution's (its all-zero tiles are skipped); the mapping's ADC range is kept although no estimate
    reads it."""
    grouped = r.kind == CONV2D and r.conv.get("groups", 1) > 1
    cols = r.adc_lsb_cols
    return (r.kind, tuple(map(tuple, r.in_shapes)), tuple(r.out_shape), r.x_signed, r.rows_per_step, r.adc_lsb,
            r.weight_encoding, r.input_encoding, r.quant_at_producer, r.requant_out,
            None if r.w_int is None else r.w_int.shape, id(r.w_int) if grouped else None,
            None if cols is None else (cols.shape, cols.tobytes()),
            tuple(sorted((k, str(v)) for k, v in r.conv.items())))


def _unit(units: dict, *names: str) -> tuple:
    """The shared resources ``names`` (created in ``units`` on first use), as a tuple :func:`book` takes."""
    return tuple(units[x] if x in units else units.setdefault(x, _Resource()) for x in names)


def _shared_units(unit, region: str, spill: bool) -> tuple:
    """What one region books besides its crossbars: its port (the global buffer, and the off-chip link when
    its working set spills), the chip ALU, the off-chip link, and its memory-mode input and output arrays."""
    port = unit("gbuf", "offchip") if spill else unit("gbuf")
    return port, unit("chipalu"), unit("offchip"), unit(f"{region}:mem_in"), unit(f"{region}:mem_out")


class Estimator:
    """Fast analytical latency (and energy) of regions under a plan.

    Parameters
    ----------
    hw : CIMHardware
    wbits, ibits : int
        Quantised precision.
    mvm_pipeline : bool
        Whether row blocks of a replica start as their own input slices arrive.
    offchip_in_order : bool
        In :meth:`graph_ns`, a region's weight fetch waits for the off-chip
        activation traffic of the earlier regions of its segment (the
        simulator's timeline books them first and a fetch rarely fits between
        them); used by the dual-mode strategy, whose segments are chosen on
        this estimate.  Not after regions booked on the shared units
        (``shared_units``): there the fetch takes the first gap long enough
        that their bookings leave, as on the simulator.
    rounds : int
        Chunks per replica at least (the pipeline granularity,
        :func:`tvm_cim.compiler.plan.chunk_count`).
    vectors : int
        Output vectors per chunk at most (0: output rows).
    shared_units : bool
        In :meth:`graph_ns`, book the units regions share (global-buffer
        port, chip ALU, off-chip interface, each core's link and ALU) region
        by region as the simulator does, on the tiles placed as
        :func:`tvm_cim.compiler.mapping.allocate` places them; off, each region
        has them to itself and the segment lasts at least their busy time.
        Off for PIMCOMP's layouts (array groups on cores the GA chooses, local
        memories, batched sends), which that placement and program order do not describe.
    """

    def __init__(self, hw: CIMHardware, wbits: int, ibits: int, mvm_pipeline: bool = False,
                 offchip_in_order: bool = False, rounds: int = 1, shared_units: bool = True, vectors: int = 0):
        self.hw, self.wbits, self.ibits = hw, wbits, ibits
        self.abits = hw.activation_bits(ibits)  # an activation on links and in buffers
        self.obytes = -(-self.abits // 8)  # an output element as stored
        self.shared_units = shared_units
        self.mvm_pipeline = mvm_pipeline
        self.offchip_in_order = offchip_in_order
        self.rounds = rounds
        self.vectors = vectors
        self.xbs_per_core = hw.core.crossbars
        self._tile_bytes: dict = {}
        self._tiles: dict = {}
        self._region_ns: dict = {}
        self._shape_ns: dict = {}
        self._chunks: dict = {}

    @classmethod
    def of(cls, hw: CIMHardware, wbits: int, ibits: int, opts) -> "Estimator":
        """The estimate of a schedule's options (:class:`tvm_cim.compiler.strategies.Options`)."""
        return cls(hw, wbits, ibits, mvm_pipeline=opts.mvm_pipeline, offchip_in_order=opts.modes == "dual",
                   rounds=opts.pipeline_rounds, vectors=opts.pipeline_vectors,
                   shared_units=opts.duplication != "ga" and not opts.local_memory and opts.send_batch <= 1)

    def hw_of(self, r: Region) -> CIMHardware:
        """The chip as region ``r`` is mapped onto it (rows per read step, encodings: :meth:`Region.chip`)."""
        return r.chip(self.hw)

    def logical_cols(self, r: Region) -> int:
        """Weight columns one crossbar holds for region ``r`` (its weight encoding)."""
        return self.hw_of(r).logical_cols(self.wbits)

    def tile_list(self, r: Region, tile_rows: int) -> list:
        """The tiles the mapper places for one copy (all-zero tiles of grouped convolutions skipped)."""
        key = (r.name, tile_rows, r.weight_encoding)
        t = self._tiles.get(key)
        if t is None:
            _, k, n = r.mkn
            grouped = r.kind == CONV2D and r.conv.get("groups", 1) > 1
            t = self._tiles[key] = tile_matrix(k, n, self.hw_of(r), r.w_int if grouped else None, tile_rows=tile_rows)
        return t

    def tiles(self, r: Region, tile_rows: int) -> int:
        """Crossbar tiles of one copy of a region's weights."""
        return len(self.tile_list(r, tile_rows))

    def plan_cores(self, r: Region, tile_rows: int) -> int:
        """Cores one replica spans."""
        return max(1, math.ceil(self.tiles(r, tile_rows) / self.xbs_per_core))

    def fetch_ns(self, r: Region, tile_rows: int, passes: int = 1, cap: int | None = None) -> np.ndarray:
        """Time to bring each pass's weight tiles (one copy) over the off-chip interface.

        Zero for a ``dmatmul``, whose weights are computed on chip.  ``cap``:
        crossbars a pass may use (default: the whole chip).
        """
        if r.kind == DMATMUL:
            return np.zeros(passes)
        key = (r.name, tile_rows, r.weight_encoding)
        b = self._tile_bytes.get(key)
        if b is None:
            b = self._tile_bytes[key] = P.tile_bytes(self.tile_list(r, tile_rows), self.wbits)
        cap = cap or self.hw.total_crossbars
        per_pass = np.array([b[p * cap:(p + 1) * cap].sum() for p in range(passes)])
        return cost.fetch(self.hw, per_pass)[0]

    def mvm_ns(self, r: Region, tile_rows: int, rows: int | None = None) -> float:
        """One input vector through one replica (its tiles work in parallel).

        ``rows``: the tallest tile read (``tile_rows`` unless only a last, shorter row block is).
        """
        m, k, n = r.mkn
        driven = min(tile_rows if rows is None else rows, k)
        return cost.mvm_ns(self.hw_of(r), driven, min(self.logical_cols(r), n), self.wbits, self.ibits, bool(r.x_signed))

    def write_ns(self, r: Region, tile_rows: int) -> float:
        """Programming one replica's crossbars (rows serially, crossbars in parallel)."""
        return cost.write(self.hw_of(r), min(tile_rows, r.mkn[1]), 0, r.batch, self.wbits)[0]

    def region_ns(self, r: Region, replicas: int, tile_rows: int, resident: bool = True, passes: int = 1,
                  mem_in: int = 0, mem_out: int = 0, mem_wb: int = 0, cap: int | None = None,
                  inplace: bool = False, spread: bool = False) -> float:
        """Analytical latency of one region with ``replicas`` copies, inputs ready at time 0.

        ``mem_in`` / ``mem_out``: memory-mode arrays its input is loaded from / its output is stored into;
        ``mem_wb``: memory-mode arrays whose live output is written back after it (:meth:`writeback_ns`);
        ``cap``: crossbars its passes may use (default: the whole chip); ``inplace``: a ``dmatmul``'s
        run-time operand is already in its arrays (keys in place); ``spread``: every replica on its own core
        (a layout that says so, PIMCOMP's GA), not packed.
        """
        key = (id(r), _region_key(r), replicas, tile_rows, resident, passes, mem_in, mem_out, mem_wb, cap, inplace,
               spread)
        hit = self._region_ns.get(key)
        if hit is not None and hit[0] is r:  # the strategies ask for the same plan many times
            return hit[1]
        # layers of one shape (a dense network repeats them; the crossbar mapper tries each mapping on a copy of
        # the region) have one estimate: shape_key is what it depends on (a grouped convolution's weights by id,
        # so those are left to the identity key above)
        grouped = r.kind == CONV2D and r.conv.get("groups", 1) > 1
        skey = None if grouped else (shape_key(r),) + key[2:]
        ns = self._shape_ns.get(skey) if skey is not None else None
        if ns is None:
            fin, busy = self.chunk_finish(r, replicas, tile_rows, resident, passes, mem_in=mem_in, mem_out=mem_out,
                                          cap=cap, inplace=inplace, spread=spread)
            ns = max(float(np.max(fin)) + self.writeback_ns(r, mem_wb), *busy)
            if skey is not None:
                self._shape_ns[skey] = ns
        self._region_ns[key] = (r, ns)  # r kept alive: its id stays its own
        return ns

    def writeback_ns(self, r: Region, arrays: int) -> float:
        """Writing a region's output back from ``arrays`` memory-mode arrays (CMSwitch T^wb; 0 if none)."""
        if not arrays:
            return 0.0
        out_bytes = r.batch * int(np.prod(r.mkn[::2]))
        spill = P.spill_level(r, self.hw, self.wbits, self.ibits) == "offchip"
        return float(cost.writeback(self.hw, out_bytes, arrays, spill)[0])

    def chunks(self, r: Region, replicas: int) -> P.Chunks:
        """The chunks the code generator emits (:func:`tvm_cim.compiler.plan.chunks`), computed once per region
        and replica count (the strategies' searches ask for the same ones thousands of times); the arrays are
        read-only, so no caller can change a shared one."""
        key = (id(r), _region_key(r), replicas)
        hit = self._chunks.get(key)
        if hit is not None and hit[0] is r:
            return hit[1]
        ch = P.chunks(r, replicas, self.hw, self.wbits, self.ibits, self.rounds, self.vectors)
        for a in (ch.starts, ch.stops, ch.f0, ch.f1, ch.load_bytes, ch.quant_elems, ch.im2col_elems):
            a.flags.writeable = False
        self._chunks[key] = (r, ch)  # r kept alive: its id stays its own
        return ch

    # ------------------------------------------------------------------ per-chunk work
    def _chunk_work(self, r: Region, ch: P.Chunks, tile_rows: int, mem_in: int = 0, mem_out: int = 0):
        """What every chunk costs on each unit, from the cost primitives.

        Loads (stores) go through ``mem_in`` (``mem_out``) memory-mode arrays when there are any.
        """
        hw = self.hw
        m, k, n = r.mkn
        bt = r.batch
        off = ch.level == "offchip"
        size = ch.size
        blocks = P.row_blocks(self.tile_list(r, tile_rows))
        row_blocks = len(blocks)
        load = (cost.memory_access(hw, ch.load_bytes, mem_in, False)[0] if mem_in
                else cost.load_store(hw, ch.load_bytes, off)[0])
        # the chip ALU quantises a network input; the producing cores quantise the rest (with their
        # post-processing); im2col is the scatter's gather pattern (no ALU time)
        prep = cost.alu(hw, "quantize", ch.quant_elems if not r.quant_at_producer else np.zeros_like(ch.quant_elems),
                        core_level=False)[0]
        scatter = cost.scatter(hw, P.scatter_bytes(bt, size, sum(b1 - b0 for b0, b1 in blocks), self.abits))[0]
        read = bt * size * self.mvm_ns(r, tile_rows)
        post = cost.alu(hw, "dequantize", bt * size * n * 3, core_level=True)[0]
        if r.requant_out:
            post = post + cost.alu(hw, "quantize", bt * size * n, core_level=True)[0]
        if row_blocks > 1:
            post = post + cost.alu(hw, "reduce", bt * size * n * (row_blocks - 1), core_level=True)[0]
        store = (cost.memory_access(hw, bt * size * n * self.obytes, mem_out, True)[0] if mem_out
                 else cost.load_store(hw, bt * size * n * self.obytes, off)[0])
        return load, prep, scatter, read, post, store

    def chunk_finish(self, r: Region, replicas: int, tile_rows: int, resident: bool = True, passes: int = 1,
                     t_in: np.ndarray | float = 0.0,
                     t_free: float | None = None,
                     t_offchip: float | None = None, mem_in: int = 0,
                     mem_out: int = 0, cap: int | None = None,
                     inplace: bool = False, spread: bool = False, units: dict | None = None,
                     xbs: list | None = None, steps: dict | None = None,
                     arrays_free: float | None = None) -> tuple[np.ndarray, tuple[float, float, float]]:
        """When each chunk of a region is stored, given when its input is available.

        Weights written at run time (not resident, or a ``dmatmul``'s run-time
        operand) delay the first read by the write time, and constant weights
        are first fetched over the off-chip interface; a layer larger than the
        chip runs ``passes`` times over its prepared inputs.  A region whose
        working set exceeds the global buffer loads and stores at the off-chip
        bandwidth.

        Parameters
        ----------
        r : Region
        replicas, tile_rows : int
            The plan.
        resident : bool
            Weights programmed once, outside the inference.
        passes : int
            Passes of a layer larger than the chip.
        t_in : numpy.ndarray or float
            Time each chunk's input is available (producers, inter-layer pipeline).
        t_free : float, optional
            When work that needs no input may start (writing run-time weights):
            the start of the segment; the earliest ``t_in`` by default.
        t_offchip : float, optional
            When the off-chip interface is free for this region's weight
            fetches (after the fetches of earlier regions of the segment).
        mem_in, mem_out : int
            Memory-mode arrays (CMSwitch) the input is loaded from and the
            output stored into; their traffic bypasses the global-buffer port
            and off-chip memory.
        cap : int, optional
            Crossbars a pass may use (CMSwitch: the compute-mode arrays of a
            segment whose operators run one after another); the whole chip by default.
        inplace : bool
            A ``dmatmul`` whose run-time operand was stored into its arrays in
            memory mode and kept at the switch to compute mode (CMSwitch's keys
            in place): it is neither loaded nor written, but waits for all of it.
        spread : bool
            Every replica on cores of its own (its link and ALU unshared);
            otherwise replicas are packed onto consecutive crossbars.
        units : dict, optional
            The chip's shared units as booked by the regions before this one
            (:func:`book`): the global-buffer port, the chip ALU, the off-chip
            interface, each core's link and ALU.  Given (with ``xbs``), a
            region run in one pass books its operations on them chunk by
            chunk in program order, as the simulator's list scheduler does,
            so it waits where earlier regions hold a unit.
        xbs : list of numpy.ndarray, optional
            With ``units``: the crossbar of every tile, per replica (its cores).
        steps : dict, optional
            With ``units`` and ``xbs`` (one pass): return, instead of the finish
            times, the booking as a generator (:meth:`_booked`) that asks for
            each chunk's input time and store floor and records its load and
            store times in ``steps``, so that regions sharing a line buffer are
            booked interleaved (:meth:`book_chain`); None where the booking
            does not apply.
        arrays_free : float, optional
            With ``units``: when the crossbars it computes on are free (a serial
            segment's regions share them, one after another); its loads,
            scatters and weight fetch need not wait for that, its writes and
            reads do.

        Returns
        -------
        finish : numpy.ndarray
            Store-completion time of every chunk.
        busy : tuple of float
            Busy time of the three units all regions share: the global-buffer
            port, the chip ALU and the off-chip interface.
        """
        hw = self.hw
        m, k, n = r.mkn
        bt = r.batch
        ib = self.abits
        ch = self.chunks(r, replicas)
        spill = ch.level == "offchip"
        tiles = self.tile_list(r, tile_rows)
        blocks = P.row_blocks(tiles)
        row_blocks = len(blocks)
        size = ch.size
        nch = len(size)
        reps = max(1, min(replicas, nch)) if passes == 1 else 1
        load, prep, scatter, read, post, store = self._chunk_work(r, ch, tile_rows, mem_in, mem_out)
        # ---- inputs ready in program order (global-buffer port, then chip ALU)
        t_in = np.broadcast_to(np.asarray(t_in, dtype=float), (nch,))
        t0 = float(t_in.min())
        tf = t0 if t_free is None else min(t0, t_free)
        fetch = self.fetch_ns(r, tile_rows, passes, cap) if not resident else np.zeros(passes)
        t_in_given = t_in
        # fetches need no input and no crossbar: they start once the interface is free (before the crossbars
        # are, in a serial segment), as the simulator books them
        t_off = t_off0 = tf if t_offchip is None else t_offchip
        if spill and not mem_in and passes == 1 and fetch[0] > 0:  # loads queue behind weights off-chip
            t_in = np.maximum(t_in, t_off + fetch[0])
        loaded = maxplus(t_in, load)
        if spill and passes > 1 and not mem_in:  # here the weights of every pass queue behind off-chip loads
            t_off = max(t_off, float(loaded[-1]))
        fetched = t_off + np.cumsum(fetch)
        ready = maxplus(loaded, prep)
        start = t0
        if r.kind == DMATMUL and inplace:  # the run-time operand is in place once all of it is stored
            y_el = float(np.prod(r.in_shapes[1]))
            y_q = cost.alu(hw, "quantize", y_el, core_level=False)[0]
            start = max(t0, tf + y_q)
            ready = np.maximum(ready, tf + y_q)
        elif r.kind == DMATMUL:  # the run-time operand is loaded, quantised and written first
            y_el = float(np.prod(r.in_shapes[1]))
            y_load = cost.load_store(hw, math.ceil(y_el * self.wbits / 8), spill)[0]
            y_q = cost.alu(hw, "quantize", y_el, core_level=False)[0]
            start = max(t0, tf + y_load + y_q + self.write_ns(r, tile_rows))
            ready = np.maximum(ready, tf + y_load + y_q)
        if r.kind != DMATMUL and not resident and passes == 1:
            start = max(t0, float(fetched[0]) + self.write_ns(r, tile_rows))
        moved = float((0.0 if mem_in else np.sum(load)) + (0.0 if mem_out else np.sum(store)))
        busy = (moved, float(np.sum(prep)), float(np.sum(fetch)) + (moved if spill else 0.0))
        if units is not None and passes == 1 and xbs is not None:
            g = self._booked(r, tile_rows, ch, tiles, blocks, reps, t_in_given, tf, t_off0, fetch, resident,
                             (load, prep, scatter, read, post, store), mem_in, mem_out, inplace, units, xbs, steps,
                             arrays_free)
            if steps is not None:
                return g, busy
            try:
                next(g)
            except StopIteration as done:  # without steps it asks for nothing
                return done.value, busy
            raise AssertionError("the booking asked for input times without steps")
        if steps is not None:
            return None, busy
        if units is not None and passes > 1 and r.kind != DMATMUL:
            return self._booked_passes(r, tile_rows, ch, tiles, t_in_given, tf, t_off0, fetch, (load, prep, post, store),
                                       mem_in, mem_out, cap or hw.total_crossbars, units, arrays_free), busy
        if passes > 1:
            # every pass rewrites all crossbars with the next tiles (row-major over row and column
            # blocks), then reads every chunk; the link sends the passes' inputs in program order
            cap, per_core = cap or hw.total_crossbars, hw.core.crossbars
            pipelined = self.mvm_pipeline and hw.chip.computing_mode != "core" and row_blocks > 1
            sc_p = np.empty((passes, nch))
            rows_p = []
            for p_idx, idx in enumerate(P.pass_ranges(len(tiles), cap)):
                ptiles = [tiles[i] for i in idx]
                pblocks = P.row_blocks(ptiles)
                rows_in = sum(b1 - b0 for b0, b1 in pblocks)  # a pass sends its rows only
                # with the MVM-grained pipeline, each row block goes over the link of its first tile's core
                first = {}
                for i in idx:
                    first.setdefault(tiles[i].k0, (i % cap) // per_core)
                links = len(set(first.values())) if pipelined else 1
                sc_p[p_idx] = cost.scatter(hw, P.scatter_bytes(bt, size, rows_in, ib))[0] / links
                rows_p.append(max(t.rows for t in ptiles))
            sent = maxplus(np.tile(ready, passes), sc_p.ravel()).reshape(passes, nch)
            t = tf
            for p_idx in range(passes):
                t = max(t, float(fetched[p_idx])) + cost.write(self.hw_of(r), min(rows_p[p_idx], k), 0, r.batch,
                                                               self.wbits)[0]
                t = float(maxplus(np.maximum(sent[p_idx], t), bt * size * self.mvm_ns(r, tile_rows, rows_p[p_idx]))[-1])
            return maxplus(maxplus(np.full(nch, t), post), store), busy
        # ---- per replica: scatter over its core's link, read (row blocks in parallel with the
        # MVM-grained pipeline), post-process on its core's ALU; replicas that share a core share both
        nb = row_blocks if (self.mvm_pipeline and hw.chip.computing_mode != "core" and row_blocks > 1) else 1
        n_tiles = len(tiles)
        per_core = hw.core.crossbars
        q = 1 if (spread or hw.chip.computing_mode == "core" or n_tiles >= per_core) else min(
            reps, -(-per_core // n_tiles))
        R = -(-reps // q) * q
        rounds = -(-nch // reps)

        def grid(x, fill):  # chunk c -> (round, core, slot): replica c % reps, round c // reps
            g = np.full((rounds, R), fill, dtype=float)
            flat = np.full(rounds * reps, fill, dtype=float)
            flat[:nch] = x
            g[:, :reps] = flat.reshape(rounds, reps)
            return g.reshape(rounds, R // q, q)

        rdy = grid(ready, -np.inf)
        sc, rd, po = grid(scatter, 0.0), grid(read, 0.0), grid(post, 0.0)
        C = R // q
        # a row block of a replica starts at its first tile; its scatter uses the link of that
        # tile's core, so blocks on different cores are sent in parallel, each its share of the rows
        first: dict[int, int] = {}
        for i, t in enumerate(tiles):
            first.setdefault(t.k0, i // per_core)
        cores = [first[b0] for b0, _ in blocks] if nb > 1 else [0]
        on_core = np.bincount(cores)
        L, nbg = int(np.count_nonzero(on_core)), int(on_core.max())  # links, blocks on the busiest one
        blk_w = np.zeros(L * nbg)
        rows_all = sum(b1 - b0 for b0, b1 in blocks)
        blk_w[:nb] = [(b1 - b0) / rows_all for b0, b1 in blocks] if nb > 1 else [1.0]
        # each link sends its (round, slot, block) in program order
        link_in = np.broadcast_to(rdy.transpose(1, 0, 2)[:, None, :, :, None], (C, L, rounds, q, nbg)).reshape(C, L, -1)
        link_w = (sc.transpose(1, 0, 2)[:, None, :, :, None] * blk_w.reshape(L, nbg)[None, :, None, None, :]).reshape(C, L, -1)
        sent = maxplus(link_in, link_w, axis=2).reshape(C, L, rounds, q, nbg).transpose(2, 0, 3, 1, 4)
        sent = sent.reshape(rounds, C, q, L * nbg)[..., :nb]
        # each (replica, block) reads its chunks in order
        read_done = maxplus(np.maximum(sent, start), np.broadcast_to(rd[..., None], sent.shape), axis=0).max(axis=3)
        alu_in = read_done.transpose(1, 0, 2).reshape(C, -1)
        posted = maxplus(alu_in, po.transpose(1, 0, 2).reshape(C, -1), axis=1).reshape(C, rounds, q).transpose(1, 0, 2)
        done = posted.reshape(rounds, R)[:, :reps].ravel()[:nch]
        return maxplus(done, store), busy  # the stores share the global-buffer port, in program order

    def _booked(self, r: Region, tile_rows: int, ch: P.Chunks, tiles: list, blocks: list, reps: int, t_in: np.ndarray, tf: float,
                t_off: float, fetch: np.ndarray, resident: bool, work: tuple, mem_in: int, mem_out: int, inplace: bool,
                units: dict, xbs: list, steps: dict | None = None, arrays_free: float | None = None):
        """:meth:`chunk_finish` of a region in one pass, booking the shared units in program order (:func:`book`).

        A generator whose return value is the store-completion time of every chunk.  With ``steps`` (a dict)
        it yields ``("in", c)`` before chunk ``c`` is loaded and is sent the time its input is available
        (``t_in`` then only bounds the first reads), and ``("store", c)`` before the chunk is stored and is
        sent the earliest time the store may start (a line buffer's store waits for the loads that read the
        rows it overwrites); ``steps["loaded"]`` and ``steps["fin"]`` hold the load- and store-completion
        times so far.  Without ``steps`` it yields nothing.
        """
        hw = self.hw
        load, prep, scatter, read, post, store = (np.asarray(w, dtype=float).tolist() for w in work)
        spill = ch.level == "offchip"
        unit = functools.partial(_unit, units)
        port, alu, off, m_in, m_out = _shared_units(unit, r.name, spill)
        per_core = hw.core.crossbars
        nch = len(load)
        pipelined = self.mvm_pipeline and hw.chip.computing_mode != "core" and len(blocks) > 1
        rows_all = sum(b1 - b0 for b0, b1 in blocks)
        # per replica: the link of each (row) block's lowest core, the ALU of its first crossbar's core
        links, alus = [], []
        for xr in xbs:
            xr = np.asarray(xr)
            if pipelined:
                by_k = {}
                for i, t in enumerate(tiles):
                    by_k[t.k0] = min(by_k.get(t.k0, 1 << 60), int(xr[i]) // per_core)
                links.append([(unit(f"link:{by_k[b0]}"), (b1 - b0) / rows_all) for b0, b1 in blocks])
            else:
                links.append([(unit(f"link:{int(xr.min()) // per_core}"), 1.0)])
            alus.append(unit(f"alu:{int(xr[0]) // per_core}"))
        # the weights first: fetched (constant weights not resident) or the run-time operand loaded, then written
        start = t0 = float(np.min(t_in))
        if r.kind == DMATMUL:
            y_el = float(np.prod(r.in_shapes[1]))
            t = tf
            if not inplace:
                t = book(port, t, float(cost.load_store(hw, math.ceil(y_el * self.wbits / 8), spill)[0]))
            t = book(alu, t, float(cost.alu(hw, "quantize", y_el, core_level=False)[0]))
            start = max(t0, t if inplace else t + self.write_ns(r, tile_rows))
        elif not resident:
            t = book(off, min(tf, t_off), float(fetch[0]))
            start = max(t0, t + self.write_ns(r, tile_rows))
        if arrays_free is not None:  # its crossbars are written (and read) once the region before is done
            writes = (not inplace) if r.kind == DMATMUL else not resident
            start = max(start, arrays_free + (self.write_ns(r, tile_rows) if writes else 0.0))
        fin = np.empty(nch)
        last = [[start] * len(links[0]) for _ in range(reps)]
        tin = np.broadcast_to(t_in, (nch,)).tolist()
        if steps is not None:
            loaded = steps["loaded"] = np.full(nch, -np.inf)
            steps["fin"] = fin
        for c in range(nch):
            q = c % reps
            t = book(m_in if mem_in else port, tin[c] if steps is None else (yield ("in", c)), load[c])
            if steps is not None:
                loaded[c] = t
            t = book(alu, t, prep[c])
            done = t
            for j, (link, w) in enumerate(links[q]):
                s_ = book(link, t, scatter[c] * w)
                last[q][j] = max(s_, last[q][j]) + read[c]
                done = max(done, last[q][j])
            t = book(alus[q], done, post[c])
            if steps is not None:
                t = max(t, (yield ("store", c)))
            fin[c] = book(m_out if mem_out else port, t, store[c])
        return fin

    def book_chain(self, items: list, base: float) -> list:
        """Book regions each of which keeps its output in a rolling line buffer for the next, the last one
        the consumer of the one before it, interleaved as the simulator places them
        (:func:`tvm_cim.simulator.timeline._place_chain`): a consumer's chunk is loaded once the producer's
        chunks holding its window are stored, and a producer's store of the output share ``[g0, g1)``
        waits until every load of its consumer that starts below ``g1 - ring`` (the rows it overwrites)
        has finished.

        Parameters
        ----------
        items : list of tuple
            Per region ``(region, replicas, generator, steps, t_in, ring)``: the generator from
            :meth:`chunk_finish` with the dict ``steps``, ``t_in`` when each chunk's input is available
            from regions outside the chain, ``ring`` the share of its output its line buffer holds
            (ignored for the last).
        base : float
            The earliest time of anything (the segment's start).

        Returns
        -------
        list of numpy.ndarray
            Per region, the store-completion time of every chunk.
        """
        n = len(items)
        chs = [self.chunks(r, d) for r, d, _, _, _, _ in items]
        gens = [it[2] for it in items]
        recs = [it[3] for it in items]
        req: list = [None] * n  # each region's next request; started in turn (its weight fetch is booked then)
        fins: list = [None] * n
        # per producer store: the last (in program order) of the consumer loads it waits for, and which
        waits = []
        for m in range(n - 1):
            g1 = chs[m].stops / items[m][0].mkn[0]
            f0 = np.asarray(chs[m + 1].f0)
            order = np.argsort(f0, kind="stable")
            cnt = np.searchsorted(f0[order], g1 - items[m][5] - 1e-12, side="left")
            last = np.maximum.accumulate(order) if len(order) else order
            waits.append([(int(last[k - 1]) if k else -1, order[:k]) for k in cnt])
        reads = [None]  # per consumer chunk: the producer stores overlapping its window
        for m in range(1, n):
            pr = items[m - 1][0]
            g0, g1 = chs[m - 1].starts / pr.mkn[0], chs[m - 1].stops / pr.mkn[0]
            f0, f1 = chs[m].f0, chs[m].f1
            lo = np.searchsorted(g1, f0 + 1e-12, side="right")
            hi = np.minimum(np.maximum(np.searchsorted(g0, f1 - 1e-12, side="left"), lo + 1), len(g0))
            reads.append((lo, hi))

        def stored(m):  # stores of region m booked so far (in program order)
            return len(chs[m]) if fins[m] is not None else 0 if req[m] is None else req[m][1]

        def loaded(m):  # loads of region m booked so far
            if fins[m] is not None:
                return len(chs[m])
            return 0 if req[m] is None else req[m][1] + (req[m][0] == "store")

        while any(f is None for f in fins):
            moved = False
            for m in range(n):
                if req[m] is None and fins[m] is None:
                    try:
                        req[m] = next(gens[m])
                    except StopIteration as done:  # no chunk
                        fins[m] = done.value
                    moved = True
                while fins[m] is None:
                    kind, c = req[m]
                    t = base
                    if kind == "in":
                        t = max(t, float(items[m][4][c]))
                        if m:
                            lo, hi = reads[m][0][c], reads[m][1][c]
                            if stored(m - 1) < hi:
                                break
                            if hi > lo:
                                t = max(t, float(np.max(recs[m - 1]["fin"][lo:hi])))
                    elif m + 1 < n:
                        need, which = waits[m][c]
                        if need >= 0:
                            if loaded(m + 1) <= need:
                                break
                            t = max(t, float(np.max(recs[m + 1]["loaded"][which])))
                    try:
                        req[m] = gens[m].send(t)
                    except StopIteration as done:
                        fins[m] = done.value
                    moved = True
            if not moved:
                raise RuntimeError(f"region '{items[0][0].name}': line buffers and their consumers wait for each other")
        return fins

    @staticmethod
    def _ring_chain(regions: list[Region], i: int, plans: dict, producers: dict[str, list[str]]) -> list[int]:
        """Region ``i`` and the regions after it each reading the rolling line buffer (``mem_ring``) of the one
        before it as its only input, in one segment and one pass each: their indices; [] if there is none."""
        out = [i]
        while out[-1] + 1 < len(regions):
            p, c = regions[out[-1]], regions[out[-1] + 1]
            pp, pc = plans[p.name], plans[c.name]
            if not (getattr(pp, "mem_ring", 0) and pc.segment == pp.segment and pp.passes == 1 and pc.passes == 1
                    and list(producers.get(c.name, [])) == [p.name]):
                break
            out.append(out[-1] + 1)
        return out if len(out) > 1 else []

    def _booked_passes(self, r: Region, tile_rows: int, ch: P.Chunks, tiles: list, t_in: np.ndarray, tf: float,
                       t_off: float,
                       fetch: np.ndarray, work: tuple, mem_in: int, mem_out: int, cap: int,
                       units: dict, arrays_free: float | None = None) -> np.ndarray:
        """:meth:`chunk_finish` of a region run in passes, booking the shared units in program order.

        As the code generator emits it: every chunk is loaded and prepared
        (port, chip ALU), then per pass the weights are fetched (off-chip
        interface) and written, and every chunk is scattered (its row blocks'
        links) and read, after the pass's writes and the previous chunk's
        read; then every chunk is post-processed (the ALU of the core of the
        first crossbar) and stored (port).
        """
        hw = self.hw
        m, k, n = r.mkn
        bt = r.batch
        spill = ch.level == "offchip"
        size = ch.size
        load, prep, post, store = (np.asarray(w, dtype=float).tolist() for w in work)
        nch = len(load)
        unit = functools.partial(_unit, units)
        port, alu, off, m_in, m_out = _shared_units(unit, r.name, spill)
        per_core = hw.core.crossbars
        pipelined = self.mvm_pipeline and hw.chip.computing_mode != "core"
        tin = np.broadcast_to(t_in, (nch,)).tolist()
        ready = []
        for c in range(nch):
            t = book(m_in if mem_in else port, tin[c], load[c])
            ready.append(book(alu, t, prep[c]))
        t_fetch = min(tf, t_off)
        last = tf if arrays_free is None else max(tf, arrays_free)
        for p_idx, idx in enumerate(P.pass_ranges(len(tiles), cap)):
            ptiles = [tiles[i] for i in idx]
            pblocks = P.row_blocks(ptiles)
            rows_in = sum(b1 - b0 for b0, b1 in pblocks)
            first: dict[int, int] = {}
            for i in idx:
                first.setdefault(tiles[i].k0, (i % cap) // per_core)
            if pipelined and len(pblocks) > 1:
                links = [(unit(f"link:{first[b0]}"), (b1 - b0) / rows_in) for b0, b1 in pblocks]
            else:
                links = [(unit(f"link:{min(first.values())}"), 1.0)]
            t_fetch = book(off, t_fetch, float(fetch[p_idx])) if len(fetch) > p_idx else t_fetch
            rows = max(t.rows for t in ptiles)
            t_w = max(last, t_fetch) + cost.write(self.hw_of(r), min(rows, k), 0, bt, self.wbits)[0]
            sc = cost.scatter(hw, P.scatter_bytes(bt, size, rows_in, self.abits))[0]
            rd = bt * size * self.mvm_ns(r, tile_rows, rows)
            done = t_w
            for c in range(nch):
                sent = max(book(link, ready[c], float(sc[c]) * w) for link, w in links)
                done = max(done, sent) + float(rd[c])
            last = done
        core_alu = unit("alu:0")  # every pass's first tile sits on crossbar 0
        fin = np.empty(nch)
        for c in range(nch):
            t = book(core_alu, last, post[c])
            fin[c] = book(m_out if mem_out else port, t, store[c])
        return fin

    # ------------------------------------------------------------------ for solvers
    def linear_terms(self, r: Region, tile_rows: int, resident: bool = True) -> LinearTerms:
        """The region's cost as terms linear in the replica count (for MIP objectives).

        Built from the same per-chunk work as :meth:`chunk_finish`: the
        shared units' total (global-buffer port, chip ALU) cannot shrink with
        replicas, the per-replica work (scatter, read, core post-processing)
        is divided among them, and run-time weight writes (plus, for weights
        that are not resident, their off-chip fetch) come first.  How far
        this is from the simulator is reported by ``benchmarks/cim_multilevel.py``.
        """
        ch = self.chunks(r, 1)
        load, prep, scatter, read, post, store = self._chunk_work(r, ch, tile_rows)
        fixed = 0.0
        if r.kind == DMATMUL or not resident:
            fixed += self.write_ns(r, tile_rows)
        if r.kind != DMATMUL and not resident:
            fixed += float(self.fetch_ns(r, tile_rows)[0])
        fixed += float(post[-1] + store[-1])
        serial = float(max(np.sum(load) + np.sum(store), np.sum(prep)))
        parallel = float(np.sum(scatter) + np.sum(read) + np.sum(post))
        return LinearTerms(fixed, serial, parallel, self.tiles(r, tile_rows), self.region_energy_pj(r, tile_rows, resident))

    def region_energy_pj(self, r: Region, tile_rows: int, resident: bool = True, replicas: int = 1) -> float:
        """Dynamic energy of one inference of a region, from the cost primitives.

        Every operation the program runs is charged as the simulator charges
        it; only weight writes (run-time operands, weights that are not
        resident) grow with the replica count.
        """
        hw = self.hw
        m, k, n = r.mkn
        bt = r.batch
        ch = self.chunks(r, replicas)
        off = ch.level == "offchip"
        size = ch.size
        e = 0.0
        for nbytes in (ch.load_bytes, bt * size * n * self.obytes):
            e += sum(float(np.sum(v)) for v in cost.load_store(hw, nbytes, off)[1].values())
        if not r.quant_at_producer:
            e += float(np.sum(cost.alu(hw, "quantize", ch.quant_elems, False)[1]))
        if r.requant_out:
            e += float(cost.alu(hw, "quantize", bt * m * n, True)[1])
        grouped = r.kind == CONV2D and r.conv.get("groups", 1) > 1
        xhw = self.hw_of(r)
        tiles = tile_matrix(k, n, xhw, r.w_int if grouped else None, tile_rows=tile_rows)
        e += float(np.sum(cost.scatter(hw, np.floor(bt * size * k * self.abits / 8))[1]))
        ra = xhw.crossbar.rows_active
        for t in tiles:  # wordline mode reads one group of rows_active rows per operation
            groups = [(min(ra, t.rows - g), 1) for g in range(0, t.rows, ra)] \
                if hw.chip.computing_mode == "wordline" else [(t.rows, math.ceil(t.rows / ra))]
            for rows, g in groups:
                _, er = cost.read(xhw, rows, t.cols, bt * m, g, self.wbits, self.ibits, bool(r.x_signed))
                e += sum(er.values())
        row_blocks = len({t.k0 for t in tiles})
        e += float(cost.alu(hw, "dequantize", bt * m * n * 3, True)[1])
        if row_blocks > 1:
            e += float(cost.alu(hw, "reduce", bt * m * n * (row_blocks - 1), True)[1])
        if r.kind == DMATMUL:
            y_el = int(np.prod(r.in_shapes[1]))
            e += sum(float(v) for v in cost.load_store(hw, y_el * self.wbits // 8, off)[1].values())
            e += float(cost.alu(hw, "quantize", y_el, False)[1]) + float(cost.alu(hw, "colsum", bt * k * n, False)[1])
        if r.kind == DMATMUL or not resident:
            e += replicas * sum(cost.write(xhw, t.rows, t.cols, bt if r.kind == DMATMUL else 1, self.wbits)[1]
                                for t in tiles)
        if r.kind != DMATMUL and not resident:
            e += float(cost.fetch(hw, float(np.sum(P.tile_bytes(tiles, self.wbits))))[1])
        return e

    # ------------------------------------------------------------------ whole graph
    def _placement(self, r: Region, p, nxt: int) -> list | None:
        """The crossbar of every tile of each replica, as :func:`tvm_cim.compiler.mapping.allocate` places them.

        ``nxt``: the first crossbar free in the segment.  None for a region
        run in passes (it reuses the crossbars; :meth:`chunk_finish` books its units pass by pass).
        """
        n_t = self.tiles(r, p.tile_rows)
        cap, per_core = self.hw.total_crossbars, self.hw.core.crossbars
        fixed = getattr(p, "inplace_xbs", ())
        if fixed and r.kind == DMATMUL:
            return [np.asarray(fixed)]
        spread = getattr(p, "compute_xbs", ())
        if spread:  # CMSwitch's spread layout: the crossbars it names
            return [np.asarray(x) for x in spread]
        serial = getattr(p, "pass_xbs", 0)
        if serial or n_t > cap:
            return [np.arange(n_t)] if p.passes == 1 and n_t <= (serial or cap) else None
        out = []
        for _ in range(p.replicas):
            if self.hw.chip.computing_mode == "core" and nxt % per_core:
                nxt += per_core - nxt % per_core
            out.append(np.arange(nxt, nxt + n_t))
            nxt += n_t
        return out


    def graph_ns(self, regions: list[Region], plans: dict, pipeline: bool,
                 producers: dict[str, list[str]] | None = None,
                 prefix: "GraphPrefix | None" = None) -> tuple[float, dict[str, float]]:
        """End-to-end estimate of one inference.

        Without the pipeline, regions run one after the other.  With it, each
        chunk of a region may load its input as soon as the producing regions
        have stored the part of their output it needs (its input span, kernel
        halo included; outputs of producers are matched by share of the
        tensor, as host operators in between are element-wise or pooling);
        :meth:`chunk_finish` then gives when each of its chunks is stored.
        Segments run one after the other.

        ``prefix`` (:class:`GraphPrefix`): calls that share the plans of their
        first regions share the state after them (exact: the estimate of a
        region depends only on the regions before it).

        Returns
        -------
        float
            End-to-end latency (ns).
        dict
            Per-region latency when run alone (the plans').
        """
        per = {r.name: plans[r.name].latency_ns for r in regions}
        producers = producers or {}
        curves: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        end = seg_start = 0.0
        cur_seg = shared_seg = None
        shared = (0.0, 0.0, 0.0)
        off_free = 0.0  # the off-chip interface fetches the weights of a segment's regions in order
        units: dict = {}  # the shared units, booked region by region as the simulator does
        nxt = 0
        first, node, keys = 0, None, None
        if prefix is not None:  # resume after the longest run of first regions evaluated before with these plans
            keys = [(r.name, plans[r.name].replicas) for r in regions]
            first, node = prefix.longest(keys)
            if first:
                curves = node.curves()
                end, seg_start, cur_seg, shared_seg, shared, off_free, nxt = node.state
        joint: dict = {}  # regions booked with the line buffer of the region before them: (finish, busy)

        def inputs(r, p, ch):  # when each chunk's input is available from the regions estimated so far
            t_in = np.full(len(ch.starts), seg_start if pipeline else end)
            if pipeline:
                f0, f1 = ch.f0, ch.f1
                for q in producers.get(r.name, []):
                    if q not in curves:
                        continue
                    g0, g1, fq = curves[q]
                    if plans[q].segment != p.segment:
                        t_in = np.maximum(t_in, fq.max())
                        continue
                    lo = np.searchsorted(g1, f0 + 1e-12, side="right")
                    hi = np.maximum(np.searchsorted(g0, f1 - 1e-12, side="left"), lo + 1)
                    t_in = np.maximum(t_in, range_max(fq, lo, np.minimum(hi, len(fq))))
            return t_in

        def place(r, p):  # its tiles' crossbars, and the first crossbar free after them
            xbs = self._placement(r, p, nxt) if self.shared_units else None
            if xbs is not None and not (getattr(p, "inplace_xbs", ()) or getattr(p, "pass_xbs", 0)
                                        or getattr(p, "compute_xbs", ())):
                return xbs, int(xbs[-1][-1]) + 1
            return xbs, nxt

        def finish(r, p, t_in, xbs, steps=None):
            serial = getattr(p, "pass_xbs", 0)  # its segment's regions share the compute arrays: one at a time
            booked = xbs is not None or (p.passes > 1 and r.kind != DMATMUL)
            if serial and not booked:
                t_in = np.maximum(t_in, end)
            return self.chunk_finish(r, p.replicas, p.tile_rows, p.resident, p.passes, t_in,
                                     t_free=end if (serial or not pipeline) else seg_start,
                                     t_offchip=off_free if pipeline else None,
                                     mem_in=getattr(p, "mem_in", 0), mem_out=getattr(p, "mem_out", 0),
                                     cap=getattr(p, "pass_xbs", 0) or None,
                                     inplace=bool(getattr(p, "inplace_xbs", ())),
                                     units=units if (xbs is not None or p.passes > 1) else None, xbs=xbs, steps=steps,
                                     arrays_free=end if serial and booked else None)

        def fetched(r, p):  # the off-chip interface after its weight fetches
            if p.resident:
                return off_free
            return max(off_free, seg_start if pipeline else end) + float(
                np.sum(self.fetch_ns(r, p.tile_rows, p.passes, getattr(p, "pass_xbs", 0) or None)))

        for i in range(first, len(regions)):
            r = regions[i]
            p = plans[r.name]
            if p.segment != cur_seg:  # a new segment starts once the previous one is done (and its switches)
                cur_seg, seg_start = p.segment, end + getattr(p, "switch_ns", 0.0)
                off_free, nxt = seg_start, 0
            ch = self.chunks(r, p.replicas)
            starts, stops = ch.starts, ch.stops
            booked = True  # its operations booked on the shared units (a later fetch finds the gaps they leave)
            if r.name in joint:
                fin, busy, t_in = joint.pop(r.name)
            else:
                t_in = inputs(r, p, ch)
                fin = None
                chain = self._ring_chain(regions, i, plans, producers) if pipeline and self.shared_units else []
                if chain:  # line buffers: the producers' stores wait for their consumers' loads
                    state = (nxt, off_free)  # (the generators book nothing before book_chain runs them)
                    items, got = [], []
                    for j in chain:
                        rj, pj = regions[j], plans[regions[j].name]
                        xbs, nxt = place(rj, pj)
                        rec: dict = {}
                        tj = t_in if j == i else inputs(rj, pj, self.chunks(rj, pj.replicas))
                        g, bj = finish(rj, pj, tj, xbs, rec)
                        if g is None:  # not booked chunk by chunk: each region on its own
                            (nxt, off_free), items = state, []
                            break
                        off_free = fetched(rj, pj)
                        total = rj.mkn[0] * rj.mkn[2] * self.obytes
                        items.append((rj, pj.replicas, g, rec, tj, getattr(pj, "mem_ring", 0) / total))
                        got.append((rj.name, bj, tj))
                    if items:
                        for (name, bj, tj), fj in zip(got, self.book_chain(items, seg_start)):
                            joint[name] = (fj, bj, tj)
                        fin, busy, t_in = joint.pop(r.name)
                if fin is None:
                    xbs, nxt = place(r, p)
                    fin, busy = finish(r, p, t_in, xbs)
                    off_free = fetched(r, p)
                    booked = xbs is not None or (p.passes > 1 and r.kind != DMATMUL)
            if self.offchip_in_order and ch.level == "offchip" and not booked and not (
                    getattr(p, "mem_in", 0) and getattr(p, "mem_out", 0)):
                off_free = max(off_free, float(fin.max()))
            # the global-buffer port, the chip ALU and the off-chip interface serve every region of the segment
            shared = busy if p.segment != shared_seg else tuple(a + b for a, b in zip(shared, busy))
            shared_seg = p.segment
            base = seg_start if pipeline else float(t_in.min())
            m = r.mkn[0]
            curves[r.name] = (starts / m, stops / m, fin)
            wb = self.writeback_ns(r, getattr(p, "mem_wb", 0))  # live data leaves its arrays after the region
            t_wb = float(fin.max()) + wb
            if wb and units:  # through the global buffer (and off-chip), which later fetches and loads queue behind
                t_wb = book(_unit(units, "gbuf", "offchip") if ch.level == "offchip" else _unit(units, "gbuf"),
                            float(fin.max()), wb)
            end = max(end, t_wb, base + (max(shared) if pipeline else max(busy)))
            if node is not None and not units:  # the state after this region: the scalars and the curves
                node = prefix.add(node, keys[i], r.name, curves[r.name],
                                  (end, seg_start, cur_seg, shared_seg, shared, off_free, nxt))
            else:
                node = None
        return end, per


class GraphPrefix:
    """What :meth:`Estimator.graph_ns` knows after each run of first regions, by their plans (a trie).

    The GA evaluates genomes that share the replicas of their first layers
    (a mutation changes one or two layers): the estimate resumes after the
    longest run of first regions it has seen with the same plans.  The key of
    a region is its name and replica count, so one instance serves calls whose
    plans follow from the replicas alone (the GA's fitness).  At most
    ``limit`` states are kept (then it starts again empty).
    """

    class _Node:
        __slots__ = ("kids", "parent", "name", "curve", "state")

        def __init__(self, parent, name, curve, state):
            self.kids, self.parent, self.name, self.curve, self.state = {}, parent, name, curve, state

        def curves(self) -> dict:
            out, n = {}, self
            while n.parent is not None:
                out[n.name] = n.curve
                n = n.parent
            return out

    def __init__(self, limit: int = 100_000):
        self.limit = int(limit)
        self.root = self._Node(None, None, None, None)
        self.size = 0
        self.resumed = 0  # regions whose estimate was taken from a state

    def longest(self, keys: list) -> tuple:
        """How many first keys have a state, and the node of the last one (the root if none)."""
        node, n = self.root, 0
        for k in keys:
            nxt = node.kids.get(k)
            if nxt is None:
                break
            node, n = nxt, n + 1
        self.resumed += n
        return n, node

    def add(self, node, key, name: str, curve, state: tuple):
        """The state after one more region (a child of ``node``); None once the limit is reached."""
        if self.size >= self.limit:
            self.root, self.size = self._Node(None, None, None, None), 0
            return None
        child = node.kids.get(key)
        if child is None:
            child = node.kids[key] = self._Node(node, name, curve, state)
            self.size += 1
        return child


def input_elements_read(r: Region) -> int:
    """Elements of a region's data input that some output reads (a convolution's windows, padding left out;
    every element otherwise): every chunking loads at least these."""
    if r.kind != CONV2D:
        return int(np.prod(r.in_shapes[0]))
    n, c, h, w = r.in_shapes[0]
    _, _, oh, ow = r.out_shape
    cv = r.conv
    taps = []
    for ax, (size, out) in enumerate(((h, oh), (w, ow))):
        s, d, k, p = cv["strides"][ax], cv["dilation"][ax], cv["kernel"][ax], cv["padding"][ax]
        pos = (np.arange(out)[:, None] * s - p + np.arange(k)[None, :] * d).ravel()
        taps.append(len(np.unique(pos[(pos >= 0) & (pos < size)])))
    return int(n * c * taps[0] * taps[1])


def forced_activation_ns(hw: CIMHardware, regions: list[Region], wbits: int, ibits: int,
                         producers: dict[str, list[str]]) -> dict:
    """Off-chip link time for activations that no allocation keeps on the chip (the bound's activation term).

    A region whose working set exceeds the global buffer loads and stores
    off-chip (:func:`tvm_cim.compiler.plan.spill_level`, fixed by the region
    alone) unless through memory-mode arrays.  Those can hold at most what
    every switchable array but one holds (one must compute); a store into
    them holds the region's whole output (or, when its next region alone reads
    it, :func:`tvm_cim.compiler.region.line_buffer_pairs`, only rows of it: a
    line buffer), and a region loads from them only what its source producer
    (:func:`tvm_cim.compiler.region.sources`) stored there.  So an output larger than that crosses the link when stored
    (batch x M x N bytes), and so does every input read (the elements some
    window reads, :func:`input_elements_read`) whose source output is larger,
    or that has no producer.  Times at the off-chip bandwidth, unrounded.

    Returns
    -------
    dict
        ``loads_ns``, ``stores_ns`` and the ``capacity_bytes`` of memory mode used.
    """
    dm = hw.dual_mode
    dual = dm.switchable_arrays > 0 and dm.memory_bandwidth_bits > 0
    cap = min(dm.switchable_arrays, hw.total_crossbars - 1) * hw.memory_capacity_bytes if dual else 0
    bits = cost.buffer_bits(hw, True)
    src = sources(regions, producers)
    by = {r.name: r for r in regions}

    def out_bytes(r):
        return r.batch * int(np.prod(r.mkn[::2]))

    # an output its next region alone reads may be kept as a line buffer, which needs only rows of it
    ring = set(line_buffer_pairs(regions, producers)) if dual else set()
    loads = stores = 0.0
    for r in regions:
        if P.spill_level(r, hw, wbits, ibits) != "offchip":
            continue
        if out_bytes(r) > cap and r.name not in ring:
            stores += out_bytes(r) * 8 / bits * hw.cycle_ns
        s = src.get(r.name)
        if s is None or (out_bytes(by[s]) > cap and s not in ring):
            loads += input_elements_read(r) * ibits / 8 * 8 / bits * hw.cycle_ns
    return {"loads_ns": loads, "stores_ns": stores, "capacity_bytes": cap}


def latency_lower_bound(hw: CIMHardware, regions: list[Region], wbits: int, ibits: int, layers: int = 1,
                        producers: dict[str, list[str]] | None = None) -> dict:
    """A latency no allocation of ``hw`` can beat on ``regions`` (CMSwitch's headroom, issue 10).

    Whatever the segmentation, duplication and array modes, two resources
    must carry fixed work:

    * the off-chip link must bring every constant weight tile that is not
      resident before the run starts.  At most ``total_crossbars`` tiles
      (the largest ones) can be resident, and the chip's buffers could hold
      at most their capacity more; the rest crosses at
      ``offchip_bandwidth_bits``;
    * the ``total_crossbars`` arrays must do every tile's reads (each input
      vector through each tile: :func:`tvm_cim.hardware.cost.mvm_ns`) and
      program every non-resident weight tile (rows serially,
      :func:`tvm_cim.hardware.cost.write`); at best all arrays compute all
      the time.  A ``dmatmul``'s run-time operand writes are left out (a
      layout that keeps keys in place may avoid them).

    The bound is the larger of the two times.  Tiles are taken at the
    crossbar's full height (the fewest tiles, the least work).  With
    ``producers``, the link also carries the activations no allocation can
    keep on the chip (:func:`forced_activation_ns`); other activation
    traffic, digital operations and dependences are left out, so the bound
    is optimistic.

    Parameters
    ----------
    hw : CIMHardware
    regions : list of Region
        One copy of the repeated part (a transformer layer) or the whole network.
    wbits, ibits : int
        Quantised precision.
    layers : int
        Times the regions run back to back (a model of ``layers`` identical
        layers): the resident tiles and buffers count once for all of them.
    producers : dict, optional
        Region name -> regions feeding it: adds the forced activation traffic to the link.

    Returns
    -------
    dict
        ``link_ns`` and ``arrays_ns`` per layer (the whole model's divided by
        ``layers``), ``bound_ns`` their maximum, ``weight_bytes`` and weight ``tiles``
        of one layer, ``weights_link_ns`` and ``activations_link_ns`` (the two parts of ``link_ns``).
    """
    est = Estimator(hw, wbits, ibits)
    rows = hw.crossbar.rows
    xbs = hw.total_crossbars
    nbytes, writes, reads = [], [], 0.0
    for r in regions:
        tiles = est.tile_list(r, rows)
        m, _, n = r.mkn
        t_rows = np.array([t.k1 - t.k0 for t in tiles])
        mvm = cost.mvm_ns(est.hw_of(r), t_rows, np.full(len(tiles), min(est.logical_cols(r), n)), wbits, ibits,
                          bool(r.x_signed))
        reads += r.batch * m * float(np.sum(mvm))
        if r.kind != DMATMUL:
            nbytes.append(P.tile_bytes(tiles, wbits))
            writes.append(cost.write(est.hw_of(r), t_rows, 0, 1, wbits)[0])
    nbytes = np.sort(np.concatenate(nbytes)) if nbytes else np.zeros(0)
    writes = np.sort(np.concatenate(writes)) if writes else np.zeros(0)
    buffers = (hw.system.chips * hw.chip.global_buffer.capacity_kb + hw.cores * hw.core.local_buffer.capacity_kb) * 1024
    streamed = max(0.0, layers * float(nbytes.sum()) - float(nbytes[-xbs:].sum()) - buffers)
    weights_ns = float(cost.fetch(hw, streamed)[0]) / layers
    act = forced_activation_ns(hw, regions, wbits, ibits, producers) if producers is not None else {}
    act_ns = act.get("loads_ns", 0.0) + act.get("stores_ns", 0.0)
    link_ns = weights_ns + act_ns
    arrays_ns = (layers * (reads + float(writes.sum())) - float(writes[-xbs:].sum())) / xbs / layers
    return {"link_ns": link_ns, "arrays_ns": arrays_ns, "bound_ns": max(link_ns, arrays_ns),
            "weight_bytes": int(nbytes.sum()), "tiles": int(len(nbytes)), "weights_link_ns": weights_ns,
            "activations_link_ns": act_ns}

"""Execute meta-operator programs on a simulated CIM chip.

The simulator sees only programs (:mod:`tvm_cim.program`) and the hardware
description.  A :class:`Chip` keeps crossbar contents between runs: a
program's ``setup`` section runs the first time the program runs on the chip
(weights stay, weight-stationary), its ``run`` section every time.

Every meta-operator has

* a functional effect, computed with numpy.  Crossbar reads are queued and
  executed together (grouped by crossbar, vectorised over tiles, vectors and
  bit steps) when an operation needs their results or a crossbar is rewritten;
* a cost: a duration, the resources it occupies and its energy, recorded as a
  row of :class:`tvm_cim.simulator.timeline.Events`.  Dependencies come from
  the data: an operation depends on the operations that last wrote the vector
  range of every tensor it reads (and a crossbar write on the reads before it).

Dual-mode arrays (CMSwitch): ``CM.switch`` puts arrays in memory mode (TOM)
or compute mode (TOC), and the chip remembers the mode between programs.  An
array in memory mode is storage: ``DMOV`` loads and stores with
``level="xbmem"`` move data through it at its memory-mode bandwidth, and what
a program stores into it (overwriting what it held) may not exceed its capacity.  Reading or programming a
crossbar in memory mode, using an array in compute mode as memory, loading
from memory-mode arrays nothing was stored into, or switching an array that
cannot switch is a :class:`SimulationError`.  ``CM.switch TOC keep=True``
keeps what was stored in the arrays as their cells, and ``CIM.write_xb
inplace=True`` then uses it as the tile (keys in place for ``QK^T``): nothing
is written or charged again, and an in-place tile the array does not hold
(nothing kept, or fewer bytes than the tile) is an error.  Modes persist across the
programs of one build (names ``m<uid>.<region>``); a program of another
build finds every array in compute mode.

Every operation is charged with the cost primitives of
:mod:`tvm_cim.hardware.cost` (the ones the compiler's estimate uses), and the
kinds it executes are those :mod:`tvm_cim.program.ops` defines.  Leakage is
the chip's static power over the elapsed time.
"""

from __future__ import annotations

import functools
import operator
from collections import OrderedDict, defaultdict
from dataclasses import dataclass, field, replace

import numpy as np

from ..common.layout import dequantize, im2col, quantize_codes
from ..common.runtime import gc_paused, thread_map
from ..hardware import cost, loopnest
from ..hardware import crossbar as X
from ..hardware.schema import CIMHardware
from ..program import OPS, Op, Parallel, Program, Range, Ref, same_timing, timing_key
from ..program.encode import encode, reads_of_one_slice
from .compiled import SectionTable, TableEvents, assemble
from .localmem import LocalMemory, buffer_bytes
from .loopnest import simulate as simulate_loopnest
from .timeline import LONG_DEPS, Events, Prefix, schedule_graph


@dataclass(frozen=True)
class _TimingRun:
    """What a later timing-only run of a twin program takes (:meth:`Chip._take_run`)."""

    stats: "RegionStats"
    written: frozenset  # the crossbars the program writes (their owner becomes the twin)
    grouped: int  # reads it recorded together
    loopnest: object  # the chip's loopnest_result after it


class SimulationError(RuntimeError):
    """A program cannot be executed (missing tensor, unknown operator, bad shape)."""


@dataclass
class RegionStats:
    """What one execution of a program did."""

    name: str
    op: str
    latency_ns: float = 0.0
    energy_pj: dict = field(default_factory=lambda: defaultdict(float))
    metaop_counts: dict = field(default_factory=lambda: defaultdict(int))
    crossbars: int = 0
    weight_writes: int = 0
    setup_ns: float = 0.0
    macs: int = 0
    buffer_peak_bytes: int = 0
    spills: bool = False  # inputs and output kept in off-chip memory
    adc_error: dict = field(default_factory=dict)
    events: Events | None = None
    segment: int = 0
    pipeline: bool = False
    localmem: dict | None = None  # the cores' heaps (programs with ``local_bytes``: PIMCOMP low latency)
    # with one heap per core shared by the regions (``local_heap = "core"``): the (core, Buffer) of every buffer
    # the program fills, allocated when the timeline is scheduled (:func:`~.localmem.schedule_shared`)
    buffers: list | None = None
    # timing only: the program, the same but for its quantisation scales, whose run's figures it took
    # (:meth:`Chip._take_run`; not simulated again)
    twin_of: str | None = None

    def total_energy(self) -> float:
        return float(sum(self.energy_pj.values()))


@dataclass
class Options:
    """Simulator switches.

    Attributes
    ----------
    exact_shortcut : bool or "tile"
        ``True``: compute MVMs as one integer product when the ADC provably
        cannot alter any conversion of the hardware setting (identical
        results).  ``"tile"`` (``--bitwise``): every read goes through the
        crossbar model, and only the bitlines of a tile whose conversions a
        bound proves unaltered are summed as an integer product
        (:func:`tvm_cim.hardware.crossbar.mvm`; on a chip whose ADC cannot
        alter any conversion, every bitline).  ``False``: every conversion
        bit-serially (tests use it to exercise the bitwise path).
    measure_adc_error : bool
        When the ADC is lossy, also compute the ideal result and report the
        error of the integer accumulators.
    functional : bool
        Compute values.  ``False`` only builds the timeline and energy (for
        large design-space sweeps); the output is then all zeros.
    nonideal : tvm_cim.hardware.crossbar.Nonideal or None
        Seeded device non-idealities (conductance variation, IR drop, ADC
        offset); None or all zero: the ideal device.
    """

    exact_shortcut: bool | str = True
    measure_adc_error: bool = True
    functional: bool = True
    nonideal: X.Nonideal | None = None


class _Tile:
    """The weights one ``CIM.write_xb`` programs: the integer tile, its decoded weights, its cells on demand.

    When decoding the encoding is the identity on every clipped code (checked
    per program, :meth:`Chip._roundtrip`), the weights are the clipped tile
    and the cells are encoded only if a read needs them (bit-serial path,
    lossy ADC, non-ideal device); otherwise the cells are encoded at once and
    the weights decoded from them.
    """

    __slots__ = ("w", "hw", "bits", "_cells", "weights")

    def __init__(self, w: np.ndarray, hw: CIMHardware, bits: int, roundtrip: bool, in_range: bool = False):
        self.w, self.hw, self.bits, self._cells = w, hw, bits, None
        if roundtrip and in_range:  # integer codes already within the clipping range: the tile itself (read only)
            self.weights = w.view()
            self.weights.setflags(write=False)
        elif roundtrip:
            lim = 2 ** (bits - 1) - 1
            if w.dtype.kind not in "iu" or np.iinfo(w.dtype).max < lim:
                w = w.astype(np.int64)
            # integer codes (the source's integer type); the ufuncs np.clip calls, without its per-call checks
            self.weights = np.minimum(np.maximum(w, -lim), lim)
        else:
            self.weights = X.decode(self.cells(), hw, bits)

    def cells(self) -> np.ndarray:
        if self._cells is None:
            self._cells = X.encode(self.w, self.hw, self.bits)
        return self._cells


# Bound the memory of one batch of queued crossbar reads (bytes of their input vectors as float64).
_FLUSH_BYTES = 96 * 2**20
_THREAD_MACS = 2**24  # an exact product this large (multiply-adds) is cut in two for two threads
# Bound the memory of the placed tiles reads keep for the next flush of the same reads (_Blocks).
_BLOCK_BYTES = 128 * 2**20


class _Blocks:
    """Tiles placed for a flush of queued reads (:meth:`Chip._exact_product`'s matrix,
    :meth:`Chip._flush_group`'s stacked weights and cells), kept for the next flush of the same reads; least
    recently used out first, bounded in bytes.

    On a chip with resident weights every flush reads the same crossbars for a few vectors, so the same
    tiles were placed thousands of times.  A key names every tile array it placed by identity and the entry
    keeps those arrays alive, so no other array takes their identities while it is kept; tiles are never
    modified in place (a write programs a new one), and the placed arrays are read-only.
    """

    def __init__(self, limit: int):
        self.limit, self.bytes, self._memo = limit, 0, OrderedDict()

    def get(self, key):
        """The value kept under ``key`` (now the most recent), or None."""
        entry = self._memo.get(key)
        if entry is None:
            return None
        self._memo.move_to_end(key)
        return entry[0]

    def put(self, key, value, keep: list, size: int) -> None:
        """Keep ``value`` (``size`` bytes) under ``key``; ``keep``: the arrays its key names by identity."""
        if size <= self.limit:
            self._memo[key] = [value, keep, 0]
            self.grow(key, size)

    def grow(self, key, size: int) -> None:
        """Entry ``key`` holds ``size`` more bytes (a part of its value filled in later); the oldest leave."""
        entry = self._memo.get(key)
        if entry is None:
            return
        entry[2] += size
        self.bytes += size
        while self.bytes > self.limit and self._memo:
            self.bytes -= self._memo.popitem(last=False)[1][2]
# Bound the tiles (int64 weights) queued reads hold across crossbar rewrites.
_TILE_BYTES = 32 * 2**20


_FROM0: dict = {}  # n -> Range(0, n) (one object per n: ranges are immutable, and building one costs)


# Programs of more operations than this drop the argument dicts their operations built while they ran (Op._index:
# VGG-19 on jain21, 882,112 operations, held 277 MB of them to the end of the run).
_KEEP_ARGS_OPS = 10_000
_READS = frozenset(("CIM.read_xb", "CIM.read_core", "CIM.read_row"))  # the reads (_record_read)
# whole-tensor layout and element-wise operations: computed once, later chunks only cost time (Chip._apply)
_WHOLE_TENSOR = frozenset(("DCOM.quantize", "DCOM.im2col", "DCOM.reshape", "DCOM.colsum", "DCOM.zeros"))


def _from0(n: int) -> Range:
    r = _FROM0.get(n)
    if r is None:
        r = _FROM0[n] = Range(0, n)
    return r


def _vector_index(ranges: list) -> tuple:
    """The vectors ``(start, stop)`` ranges cover, in order: ``(index, count, once)``, ``index`` a slice when
    they follow one another, else an integer array; ``once``: no vector twice."""
    n = len(ranges)
    if n == 1 or all(ranges[i][0] == ranges[i - 1][1] for i in range(1, n)):
        return slice(ranges[0][0], ranges[-1][1]), ranges[-1][1] - ranges[0][0], True
    r = np.array(ranges, dtype=np.int64)
    size = r[:, 1] - r[:, 0]
    idx = np.repeat(r[:, 0] - np.cumsum(size) + size, size) + np.arange(int(size.sum()), dtype=np.int64)
    once = bool((r[1:, 0] >= r[:-1, 1]).all()) or len(np.unique(idx)) == len(idx)
    return idx, len(idx), once


def _vecs(o: Op, default: int) -> Range:
    v = o._index.get("vecs")
    return v if isinstance(v, Range) else _from0(default)


def _ops(stmts) -> list:
    """Every operation of a statement list in program order, parallel blocks flattened (:func:`walk`,
    as a list: no generator per block)."""
    out = []
    for s in stmts:
        if type(s) is Parallel:
            body = s.body
            if len(body) == 1 and type(body[0]) is not Parallel:  # a block of one operation
                out.append(body[0])
            else:
                out.extend(_ops(body))
        else:
            out.append(s)
    return out


def _vxb_prefix(program: str) -> str:
    """The start of the names of a program's virtual-crossbar resources (:meth:`Chip._read_tag`)."""
    return f"vxb:{program}:"


def _renamed(ev: Events, old: str, new: str) -> Events:
    """A region's events as another program's (:meth:`Chip._take_run`): the same rows (their lists shared,
    read-only from here), the resources named after the program (a read's virtual crossbar,
    :meth:`Chip._read_tag`) named after ``new``."""
    prefix, to = _vxb_prefix(old), _vxb_prefix(new)
    memo: dict = {}  # id(resource tuple) -> renamed (reads of one set share one tuple)
    res = []
    for r in ev.res:
        t = memo.get(id(r))
        if t is None:
            t = memo[id(r)] = tuple(to + n[len(prefix):] if n.startswith(prefix) else n for n in r)
        res.append(t)
    return replace(ev, res=res)


def timing_inputs(prog: Program) -> dict[str, np.ndarray]:
    """Placeholders for a timing-only run (``Options(functional=False)``): every input and constant a
    zero-stride array of its declared shape (nothing the size of the weights is allocated)."""
    return {d.name: np.broadcast_to(np.zeros((), d.dtype), d.shape) for d in prog.decls
            if d.role in ("input", "const")}


def heap_peak(hw: CIMHardware, prog: Program) -> int:
    """Peak bytes one core's local memory holds over time while ``prog`` runs alone (timing only).

    The first pass of the low-latency heap split: the program is simulated as
    it is, with the ``local_bytes`` it declares (a whole core's memory, in that
    pass), and its timeline scheduled; a buffer is held from the start of the
    operation that fills it to the finish of its last reader
    (:meth:`LocalMemory.in_flight`).  0 if it declares none.

    Parameters
    ----------
    hw : CIMHardware
    prog : Program

    Returns
    -------
    int
    """
    if not int(prog.attr("local_bytes", 0)):
        return 0
    chip = Chip(hw, Options(functional=False))
    stats = chip.run(prog, timing_inputs(prog))[1]
    tl = schedule_graph([(prog.name, stats.events, 0)], {}, pipeline=True)
    return int(chip._lmem.in_flight(tl.start, tl.finish))


class _Binds(dict):
    """A program's virtual crossbars (vxb id -> [(xb, rows Range, cols Range)]), each decoded from its
    ``CIM.bind_vxb`` (the last one binding it, as a dict built in program order keeps) when first asked for."""

    def __init__(self):
        super().__init__()
        self._op: dict = {}  # vxb -> (section, index) of the binding not decoded yet
        self._sig: dict = {}  # vxb -> the template of its binding (bindings of one template bind alike)
        self._lookup = None  # _sig as sorted arrays (templates)

    def add(self, sec, rows: np.ndarray) -> None:
        """The bindings at ``rows`` of an encoded section."""
        vx = sec.vxb[rows]
        ok = vx >= 0
        for i in rows[~ok].tolist():  # not an int: decoded at once
            o = sec.ops[i]
            dict.__setitem__(self, o["vxb"], list(zip(o["xbs"], o["rows"], o["cols"])))
        vs, ops = vx[ok].tolist(), sec.ops
        self._op.update(zip(vs, [ops[i] for i in rows[ok].tolist()]))
        self._sig.update(zip(vs, sec.tid[rows][ok].tolist()))
        for v in dict.keys(self) & set(vs):  # bound again: decoded from its new binding when asked for
            dict.__delitem__(self, v)
        self._lookup = None

    def templates(self, vxbs: np.ndarray) -> np.ndarray:
        """The template of the binding of each of ``vxbs`` (-1: not bound by an encoded binding)."""
        if self._lookup is None:
            keys = np.fromiter(self._sig.keys(), np.int64, len(self._sig))
            order = np.argsort(keys)
            self._lookup = keys[order], np.fromiter(self._sig.values(), np.int64, len(self._sig))[order]
        keys, vals = self._lookup
        if not len(keys):
            return np.full(len(vxbs), -1, np.int64)
        at = np.minimum(np.searchsorted(keys, vxbs), len(keys) - 1)
        return np.where(keys[at] == vxbs, vals[at], -1)

    def crossbars(self) -> set:
        """Every crossbar bound."""
        out = {xb for ent in dict.values(self) for xb, _, _ in ent}
        seen = set()
        for o in self._op.values():
            if id(o.args) not in seen:
                seen.add(id(o.args))
                out.update(o["xbs"])
        return out

    def __missing__(self, v):
        o = self._op.pop(v, None)
        if o is None:
            raise KeyError(v)
        ent = list(zip(o["xbs"], o["rows"], o["cols"]))
        dict.__setitem__(self, v, ent)
        return ent

    def __contains__(self, v) -> bool:
        return dict.__contains__(self, v) or v in self._op

    def __iter__(self):
        for v in list(self._op):
            self[v]
        return dict.__iter__(self)

    def __len__(self) -> int:
        return dict.__len__(self) + len(self._op)

    def values(self):
        return [self[v] for v in list(self)]


def recorded_rows(hw: CIMHardware, prog: Program) -> Events:
    """The rows the Python recorder gives ``prog``'s run section on a fresh timing-only chip (what a
    :class:`~.compiled.TableEvents` reader of its rows gets)."""
    chip = Chip(hw, Options(functional=False))
    chip.compiled = False
    chip.reuse_timing = False
    return chip.run(prog, timing_inputs(prog))[1].events


class Chip:
    """A simulated chip: crossbar contents plus the programs already set up.

    ``together`` (default True): the row-group reads of a parallel block are recorded together
    (:meth:`_record_reads`); False records every operation on its own (tests compare the two).
    ``prune_readers`` (default True): a read is kept as a reader of its crossbars only where its section
    writes, writes back from or switches them (:meth:`_reset_board`); False keeps every read.
    ``compiled`` (default True): timing only, sections whose operations :func:`~.compiled.assemble` covers
    are recorded and placed in compiled code (the same times, counts and energy as the Python recorder's); False
    records every section in Python (tests compare the two).
    ``reuse_timing`` (default True): timing only, a program that runs as one already run on this chip
    (:meth:`_twin_key`: the same operations but for the quantisation scales, from the same state) takes
    that run's figures instead of being simulated again; False simulates every program (tests compare).
    """

    together = True
    grouped_reads = 0  # reads recorded together so far (on this chip)
    prune_readers = True  # False: every read kept as a reader of its crossbars (tests compare the two)
    reuse_timing = True
    compiled = True  # timing only: sections recorded and placed in compiled code (:mod:`.compiled`) where covered

    def __init__(self, hw: CIMHardware, options: Options | None = None):
        self.hw = hw
        self.options = options or Options()
        self.xb_cells: dict[int, np.ndarray] = {}  # xb -> (Bt, rows, S, P, n) cells
        self.xb_weights: dict[int, np.ndarray] = {}  # decoded, for the exact shortcut
        self.xb_owner: dict[int, tuple] = {}
        self.xb_offsets: dict[int, np.ndarray] = {}  # ADC offsets per bitline (non-ideal device)
        self._setup_done: set[str] = set()
        self._hier = None
        self._loopnest = False
        self.loopnest_result = None
        self._leak_mw = cost.leakage_mw(hw)
        self.xb_memory: set[int] = set()  # dual-mode arrays now in memory mode (CM.switch TOM)
        self.xb_stored: dict[int, int] = {}  # memory-mode array -> bytes its current data occupies
        self.xb_kept: dict[int, int] = {}  # compute-mode array -> bytes kept from memory mode (TOC keep)
        self._stored_now: set[int] = set()  # arrays this run of the program has stored into
        self._modes_of: str | None = None  # the build whose programs set the current modes
        self._lazy = False  # reads resolve their tiles when flushed (_start_lazy)
        self._placed = _Blocks(_BLOCK_BYTES)  # tiles placed for flushed reads, for the next of the same
        # timing only: timing_key -> [(program, _TimingRun)] of the runs a later twin may take (_twin_key), for
        # the programs of the current build
        self._timing_runs: dict = {}
        self.twins: dict[str, str] = {}  # program -> the one whose timing-only run's figures it took

    @property
    def leakage_mw(self) -> float:
        """Static power of the whole chip."""
        return self._leak_mw

    # ------------------------------------------------------------------ public
    def run(self, prog: Program, tensors: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], RegionStats]:
        """Execute a program (see :meth:`_run`; the garbage collector is paused meanwhile, :func:`gc_paused`)."""
        with gc_paused():
            return self._run(prog, tensors)

    def _run(self, prog: Program, tensors: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], RegionStats]:
        """Execute a program.

        Parameters
        ----------
        prog : Program
        tensors : dict
            Inputs and constants by declared name (without ``%``).

        Returns
        -------
        env : dict
            Every tensor of the program after execution (``env['out']`` is the
            output, ``env['acc']`` the integer accumulators ``(Bt, M, N)``).
        stats : RegionStats
            Counts, energy and the operations' :class:`Events` (timeline rows).
        """
        env = dict(tensors)
        for d in prog.decls:
            if d.role in ("input", "const") and d.name not in env:
                raise SimulationError(f"program '{prog.name}': missing {d.role} %{d.name}")
        self.wbits = int(prog.attr("weight_bits", self.hw.crossbar.weight_bits))
        self.ibits = int(prog.attr("input_bits", self.hw.crossbar.input_bits))
        if self.wbits > self.hw.crossbar.weight_bits or self.ibits > self.hw.crossbar.input_bits:
            raise SimulationError(
                f"program '{prog.name}' needs {self.wbits}-bit weights / {self.ibits}-bit inputs; "
                f"the chip supports {self.hw.crossbar.weight_bits} / {self.hw.crossbar.input_bits}"
            )
        stats = RegionStats(prog.name, str(prog.attr("op", "")))
        stats.segment = int(prog.attr("segment", 0))
        stats.pipeline = bool(prog.attr("pipeline", False))
        self.prog = prog
        self.signed_input = bool(prog.attr("signed_input", False))
        # the region's crossbar mapping: rows driven per read step and the programmed ADC range
        try:  # its encodings (the chip's defaults unless the program says otherwise)
            self.phw = self.hw.mapped(None, prog.attr("weight_encoding"), prog.attr("input_encoding"))
        except ValueError as e:
            raise SimulationError(f"program '{prog.name}': {e}") from None
        self.xhw = self.phw.driving(prog.attr("rows_per_step"))
        self.adc_lsb = prog.attr("adc_lsb")
        if self.adc_lsb is not None:
            self.adc_lsb = int(self.adc_lsb)
        programmed = self.adc_lsb is not None or any(d.name == "adclsb" for d in prog.decls)
        if programmed and self.hw.crossbar.adc_range == "fixed":
            raise SimulationError(f"program '{prog.name}' programs the ADC range; the chip's range is fixed")
        rps = prog.attr("rows_per_step")
        if rps is not None and not 1 <= int(rps) <= self.hw.crossbar.rows_active:
            raise SimulationError(f"program '{prog.name}' drives {rps} rows per read step; "
                                  f"the chip drives 1 to {self.hw.crossbar.rows_active}")
        build = prog.name.split(".")[0]  # programs of one build share a prefix (m<uid>.<region>)
        if build != self._modes_of:  # another network is loaded: every array starts in compute mode
            self._modes_of = build
            self.xb_memory.clear()
            self.xb_stored.clear()
            self.xb_kept.clear()
            self._timing_runs.clear()  # twins within one network: what a chip keeps stays bounded
        self._stored_now = set()
        twin_key = self._twin_key(prog)
        if twin_key is not None:
            for q, done in self._timing_runs.get(twin_key, ()):
                if same_timing(prog, q):
                    return self._take_run(prog, env, stats, done)
        grouped0 = self.grouped_reads
        self.vxbs, self._loopnest, setup_xbs, written, rewritten = self._structure(prog)
        self.bind_templates = encode(prog).templates  # (what _Binds.templates gives indexes)
        self.M = int(prog.attr("M", 1)) * int(prog.attr("batch", 1))
        self._batch = int(prog.attr("batch", 1))
        self._pending: dict = {}  # (input, accumulator) -> queued reads, in program order
        self._deferred: list = []
        self._pending_xbs: set = set()  # crossbars and tensors the queued reads / deferred ops touch
        self._pending_dsts: set = set()
        self._pending_srcs: set = set()  # inputs of the queued reads (an operation writing one flushes them)
        # what the deferred post-processing reads: tensor -> (first, stop) of the vectors it reads (a read
        # into them flushes)
        self._deferred_srcs: dict = {}
        self._pending_tiles: dict = {}  # id -> tile weights the queued reads captured (bounded: _FLUSH_BYTES)
        self._pending_tile_bytes = 0
        self._snaps: dict = {}  # id(_entries list) -> what a read of it sees now (_capture; reset by writes)
        self._cross = self._cross_pass()
        self._start_lazy(env, bool(written - set(setup_xbs)))
        self._entries_memo: dict = {}  # (opcode, vxb or its shapes, block, group) -> _entries
        self._blocks: dict = {}  # vxb -> row-block start -> its crossbars (in binding order)
        self._vxb_shapes: dict = {}  # vxb -> its crossbars and tile shapes (_vxb_shape)
        self._read_tags: dict = {}  # (vxb, block) -> a read's resource and input key
        self._write_cost: dict = {}  # (xb, tile shape) -> (ns, pJ) of programming it, its key and resources
        self._read_memo: dict = {}  # aggregated cost of a read of one crossbar set
        self._read_plans: dict = {}  # block shape -> what its reads append (_read_plan)
        self._xb_key_sets: dict = {}  # crossbar keys of a read -> the one tuple of them (_read_cost)
        self._cores: dict = {}  # id(_entries list) -> the cores of its crossbars (a scatter's destination), link
        self._scatter_static: dict = {}  # (input, vxb, block, bytes) -> a scatter's cores, link, ns, pJ and key
        self._read_static: dict = {}  # (vxb, block, group, opcode, vectors, input) -> a read's cost, keys, tags
        self._dmov_cost: dict = {}  # (scatter | fetch, bytes) -> (ns, pJ)
        self._alu_cost: dict = {}  # a DCOM's (op, elements, core level, requant, at) -> (ns, pJ)
        self._alu_res: dict = {}  # core (None: the chip ALU) -> the resources of its DCOMs
        self._shape_memo: dict = {}  # (rows, cols, vectors, groups) -> cost.read of this program's mapping
        self._done_full: set[str] = set()
        self._write_memo: dict = {}
        self._range_ok: dict = {}  # weight tensor name -> (the tensor, its codes need no clipping)
        self._sp = None
        self._identity = None
        cap = int(prog.attr("local_bytes", 0))
        self._lmem = None
        need_setup = prog.name not in self._setup_done or any(self.xb_owner.get(x) != (prog.name,) for x in setup_xbs)
        tables = self._section_tables(prog, need_setup, cap)
        if tables is not None:  # timing only, every operation covered: recorded and placed in compiled code
            ev = self._run_tables(prog, stats, *tables)
        else:
            ev = self._run_recorded(prog, env, stats, need_setup, rewritten, cap)
        if not self.options.functional:
            out = prog.decl("output")[0]
            env["out"] = np.broadcast_to(np.float32(0), out.shape)  # timing only: no values
        stats.events = ev
        tl = schedule_graph([(prog.name, ev, 0)], {}, pipeline=True, summary=False)  # its latency
        stats.latency_ns = tl.latency_ns
        for k, e in self._energy.items():
            stats.energy_pj[k] += e
        stats.energy_pj["leakage"] += self._leak_mw * tl.latency_ns  # mW x ns = pJ
        xbs = self.vxbs.crossbars() | written
        stats.crossbars = len(xbs)
        # the region's working set in the global buffer: quantised inputs, 8-bit stored output
        ins = [int(np.prod(d.shape)) for d in prog.decls if d.role == "input"]
        abytes = -(-self.hw.activation_bits(self.ibits) // 8)  # an activation as stored
        in_bytes = ins[0] * abytes + sum(ins[1:]) * -(-self.wbits // 8)
        stats.buffer_peak_bytes = int(in_bytes + sum(int(np.prod(d.shape)) for d in prog.decls
                                                     if d.role == "output") * abytes)
        stats.spills = bool(prog.attr("spills", False))
        if len(ev) > _KEEP_ARGS_OPS and type(ev) is not TableEvents:
            # a large program run operation by operation: its operations' argument dicts go (rebuilt if it runs again)
            for o in _ops(prog.setup) + _ops(prog.run):
                o.__dict__.pop("_index", None)
        counts = stats.metaop_counts
        if (twin_key is not None and not self.xb_memory and not self.xb_kept and not counts.get("CM.switch")
                and not counts.get("DMOV.writeback")):  # it ended as it started: every array in compute mode
            self._timing_runs.setdefault(twin_key, []).append(
                (prog, _TimingRun(stats, frozenset(written), self.grouped_reads - grouped0, self.loopnest_result)))
        return env, stats

    def _run_recorded(self, prog: Program, env: dict, stats: RegionStats, need_setup: bool, rewritten: dict,
                      cap: int) -> Events:
        """Execute the setup section (when ``need_setup``) and the run section operation by operation: values
        (unless timing only) and the Python recorder's rows; returns the run section's rows."""
        if need_setup:
            ev = Events()
            self._reset_board(rewritten["setup"])
            self._energy = defaultdict(float)
            self._block(prog.setup, env, stats, ev)
            self._flush(env, stats)
            tl = schedule_graph([(prog.name, ev, 0)], {}, pipeline=False, summary=False)
            stats.setup_ns = tl.latency_ns
            for k, e in self._energy.items():
                stats.energy_pj["setup_" + k] += e
            self._setup_done.add(prog.name)
        ev = Events()
        self._reset_board(rewritten["run"])
        self._energy = defaultdict(float)
        # pixel-level buffers in the cores' local memories (one heap per core shared by the regions: recorded
        # here, allocated when the timeline is scheduled)
        self._lmem = LocalMemory(cap, record=prog.attr("local_heap") == "core") if cap > 0 else None
        self._lbuf: dict = {}
        self._block(prog.run, env, stats, ev)
        self._flush(env, stats)
        if self._lmem is not None:
            stats.localmem = self._lmem.summary()
            if self._lmem.record:
                stats.buffers = self._lmem.held
        return ev

    def _section_tables(self, prog: Program, need_setup: bool, cap: int) -> tuple | None:
        """The setup (None when it does not run) and run sections as :class:`~.compiled.SectionTable`, or None
        when the program is executed operation by operation: values are computed, the compiled path is off
        (``compiled``), the program runs a loop nest or uses local memories, an array is in memory mode or
        holds kept data, or an operation is one :func:`~.compiled.assemble` does not cover."""
        if (self.options.functional or not self.compiled or self._loopnest or cap or self.xb_memory
                or self.xb_kept):
            return None
        enc = encode(prog)
        setup = assemble(self, enc.templates, enc.setup) if need_setup else None
        if need_setup and setup is None:
            return None
        run = assemble(self, enc.templates, enc.run)
        return None if run is None else (setup, run)

    def _count(self, stats: RegionStats, table: SectionTable) -> None:
        """What executing a section's operations counts (:meth:`_block`): meta-operators, crossbar writes
        and their owner, reads recorded together."""
        counts = stats.metaop_counts
        for k, n in table.counts.items():
            counts[k] += n
        stats.weight_writes += len(table.writes)
        owner, xb_owner = (self.prog.name,), self.xb_owner
        for x in table.writes:
            xb_owner[x] = owner
        self.grouped_reads += table.grouped

    def _run_tables(self, prog: Program, stats: RegionStats, setup: SectionTable | None,
                    run: SectionTable) -> TableEvents:
        """Timing only: the sections' counts, energy and setup time from their tables; the run section's rows
        as :class:`~.compiled.TableEvents` (the Python recorder's rows built only if something reads them)."""
        if setup is not None:
            self._count(stats, setup)
            tl = schedule_graph([(prog.name, TableEvents(setup, None), 0)], {}, pipeline=False, summary=False)
            stats.setup_ns = tl.latency_ns
            for k, e in setup.energy_by_component().items():
                stats.energy_pj["setup_" + k] += e
            self._setup_done.add(prog.name)
        self._count(stats, run)
        self._energy = run.energy_by_component()
        hw = self.hw
        return TableEvents(run, lambda: recorded_rows(hw, prog))

    def _twin_key(self, prog: Program) -> tuple | None:
        """The :func:`~tvm_cim.program.timing_key` under which a timing-only run of ``prog`` may take, or leave
        for a later twin, a run's figures; None when the run depends on more than the program: values are
        computed, arrays are in memory mode or hold kept data, the program was set up on this chip already
        (its setup may not run again), or it uses the cores' local memories (buffers shared between regions)."""
        if (self.options.functional or not self.reuse_timing or self.xb_memory or self.xb_kept
                or prog.name in self._setup_done or int(prog.attr("local_bytes", 0))):
            return None
        return timing_key(prog)

    def _take_run(self, prog: Program, env: dict, stats: RegionStats, done: "_TimingRun"):
        """What a timing-only run of ``prog`` would give, from its twin's run (:meth:`_twin_key`): the same
        events, counts and energy under its own name and segment; the crossbars it writes are its own."""
        s = done.stats
        if isinstance(s.events, TableEvents):
            hw = self.hw
            events = s.events.renamed(_vxb_prefix(s.name), _vxb_prefix(prog.name), lambda: recorded_rows(hw, prog))
        else:
            events = _renamed(s.events, s.name, prog.name)
        stats = replace(s, name=prog.name, segment=stats.segment, energy_pj=defaultdict(float, s.energy_pj),
                        metaop_counts=defaultdict(int, s.metaop_counts), adc_error=dict(s.adc_error),
                        events=events, twin_of=s.name)
        owner = (prog.name,)
        for x in done.written:
            self.xb_owner[x] = owner
        self._setup_done.add(prog.name)
        self.grouped_reads += done.grouped
        self.loopnest_result = done.loopnest
        self.twins[prog.name] = s.name
        out = prog.decl("output")[0]
        env["out"] = np.broadcast_to(np.float32(0), out.shape)
        return env, stats

    # ------------------------------------------------------------------ structure
    @staticmethod
    def _structure(prog: Program) -> tuple[dict[int, list], bool, list, set, dict]:
        """What the program's operations declare, from its encoded form (:func:`~tvm_cim.program.encode.encode`:
        each operation template looked at once): its virtual crossbars (vxb id -> [(xb, rows Range, cols Range)]
        from ``CIM.bind_vxb``), whether its run section has a ``CIM.loopnest``, the crossbars its setup section
        writes (in order), every crossbar it writes, and per section (``setup``, ``run``) the keys of the
        crossbars it writes, writes back from or switches (the only operations that wait for a crossbar's reads)."""
        enc = encode(prog)
        tpl = enc.templates
        out, setup_xbs, written, loop = _Binds(), [], set(), False
        rewritten = {"setup": set(), "run": set()}
        for section, sec in (("setup", enc.setup), ("run", enc.run)):
            rw = rewritten[section]
            opc = np.array([tpl[t].opcode for t in range(len(tpl))] + [""], dtype=object)[sec.tid]
            binds = np.flatnonzero(opc == "CIM.bind_vxb")
            if len(binds):
                out.add(sec, binds)
            xbs = sec.xb[opc == "CIM.write_xb"].tolist()
            written.update(xbs)
            rw.update([f"xb:{x}" for x in set(xbs)])
            if section == "setup":
                setup_xbs = xbs
            for t in np.unique(sec.tid).tolist():
                o = tpl[t]
                if o.opcode == "CIM.loopnest" and section == "run":
                    loop = True
                elif o.opcode == "CM.switch" or (o.opcode == "DMOV" and o.kind == "DMOV.writeback"):
                    for i in np.flatnonzero(sec.tid == t).tolist():
                        rw.update(f"xb:{x}" for x in sec.ops[i]["xbs"])
        return out, loop, setup_xbs, written, rewritten

    def _entries(self, o: Op, shape_only: bool = False) -> list:
        """(xb, rows, cols, base row) of the crossbars a read activates (memoised per operation of the program).

        ``shape_only`` (always, timing only): for what needs only the crossbars and the tile shapes (costs,
        resources, modes), not which weights they hold.  Virtual crossbars bound to the same crossbars with
        the same shapes (every pass of a layer larger than the chip) then share one list, whose cost is
        computed once (``_read_memo``).
        """
        shape_only = shape_only or not self.options.functional
        a = o._index
        blk = a.get("block")
        v = a.get("vxb")
        if blk is None and shape_only:
            v = self._vxb_shape(v)
        # operations that activate the same crossbars share one list (every chunk's reads)
        key = (o.opcode, v, None if blk is None else blk.start, a.get("group"))
        hit = self._entries_memo.get(key)
        if hit is None:
            hit = self._entries_memo[key] = self._entries_of(o)
        return hit

    def _vxb_shape(self, v) -> tuple:
        """A virtual crossbar's crossbars and tile shapes, in binding order (memoised per vxb)."""
        sig = self._vxb_shapes.get(v)
        if sig is None:
            if v not in self.vxbs:
                raise SimulationError(f"program '{self.prog.name}': read of unbound virtual crossbar {v}")
            sig = self._vxb_shapes[v] = ("shape",) + tuple([(xb, r.stop - r.start, c.stop - c.start)
                                                             for xb, r, c in self.vxbs[v]])
        return sig

    def _entries_of(self, o: Op) -> list:
        v = o["vxb"]
        if v not in self.vxbs:
            raise SimulationError(f"program '{self.prog.name}': read of unbound virtual crossbar {v}")
        ents = self.vxbs[v]
        blk = o.get("block")
        if blk is not None:  # the crossbars of one row block (indexed once per virtual crossbar)
            index = self._blocks.get(v)
            if index is None:
                index = self._blocks[v] = defaultdict(list)
                for e in ents:
                    index[e[1].start].append(e)
            ents = index.get(blk.start, [])
        return self._activated(ents, o.opcode, o.get("group"))

    def _activated(self, ents: list, opcode: str, group: int | None) -> list:
        """(xb, rows, cols, base row) of the crossbars ``ents`` (a virtual crossbar's, or a row block's, binding
        entries) that an ``opcode`` read of row group ``group`` activates (:meth:`_entries`)."""
        if opcode == "CIM.read_row":  # the rows of its group: ``group * rows_active`` into each tile
            off = int(group) * self.xhw.crossbar.rows_active
            act = self._active_rows(np.array([rows.size for _, rows, _ in ents], np.int64), int(group)).tolist()
            return [(xb, Range(rows.start + off, rows.start + off + n), cols, rows.start)
                    for (xb, rows, cols), n in zip(ents, act) if n > 0]
        return [(xb, rows, cols, rows.start) for xb, rows, cols in ents]

    def _active_rows(self, sizes: np.ndarray, groups: np.ndarray) -> np.ndarray:
        """:meth:`_activated` over arrays: the rows a read of row group ``groups`` (-1: a read of every row)
        activates in tiles of ``sizes`` rows (0: none; the group's rows start ``group * rows_active`` into it)."""
        ra = self.xhw.crossbar.rows_active
        return np.where(groups < 0, sizes, np.clip(sizes - groups * ra, 0, ra))

    # ------------------------------------------------------------------ execution
    def _block(self, stmts, env, stats, ev: Events) -> None:
        counts, functional, record = stats.metaop_counts, self.options.functional, self._RECORD
        owner = (self.prog.name,)
        xb_memory, xb_kept, xb_owner = self.xb_memory, self.xb_kept, self.xb_owner
        fast_writes = not functional and not self._loopnest
        record_write = self._record_write
        record_dcom, record_dmov = record["DCOM"], record["DMOV"]
        for s in stmts:
            if type(s) is Parallel:
                body = s.body
                if len(body) != 1 or type(body[0]) is Parallel:
                    if not self._reads_together(body, env, stats, ev):
                        self._block(body, env, stats, ev)
                    continue
                s = body[0]  # a block of one operation: executed as the operation (what _block(body) does)
            opc = s.opcode
            if opc == "CIM.write_xb" and fast_writes and not xb_memory and not xb_kept:
                a = s._index
                if not a.get("inplace"):  # what the general path below does for it, timing only
                    counts[opc] += 1
                    stats.weight_writes += 1
                    xb_owner[a["xb"]] = owner
                    record_write(s, ev)
                    continue
            kind = s.kind
            counts[kind] += 1
            if opc == "CIM.bind_vxb":
                continue
            if kind not in OPS:
                raise SimulationError(f"program '{self.prog.name}': unknown meta-operator {kind}")
            if fast_writes:  # timing only: what the general path below does for a DCOM, a DMOV that does not
                # touch memory-mode arrays, a read while every array is in compute mode (no checks apply)
                if opc == "DCOM":
                    record_dcom(self, s, ev)
                    continue
                if opc == "DMOV":
                    a = s._index
                    if a.get("level") != "xbmem" and a.get("op") != "writeback":
                        record_dmov(self, s, ev)
                        continue
                elif opc in _READS and not xb_memory:
                    record[opc](self, s, ev)
                    continue
            if opc == "CM.switch" or (opc == "DMOV" and (s.get("level") == "xbmem" or s.get("op") == "writeback")):
                self._dual_mode(s)
            elif opc.startswith("CIM.") and opc != "CIM.loopnest":
                self._check_compute_mode(s)
            if not functional:
                if opc == "CIM.write_xb":
                    stats.weight_writes += 1
                    self.xb_owner[s["xb"]] = owner
            elif opc.startswith("CIM.read"):
                self._queue_read(s, env, stats)
            else:
                self._exec(s, env, stats)
            if self._loopnest and opc != "CIM.loopnest":  # what _record does
                continue
            handler = record.get(opc)
            if handler is None:
                raise SimulationError(f"program '{self.prog.name}': no cost for meta-operator {kind}")
            handler(self, s, ev)

    def _reads_together(self, body, env, stats, ev: Events) -> bool:
        """A parallel block of reads of one virtual crossbar (its row groups), one input slice and one
        accumulator: executed as :meth:`_block` executes them, their rows recorded together
        (:meth:`_record_reads`).  False (nothing done) for any other block."""
        if not self._together(body):
            return False
        o0 = body[0]
        counts = stats.metaop_counts
        if self.options.functional or self.xb_memory:
            for o in body:  # what _block does per operation, in program order (checks)
                counts[o.kind] += 1
                if o.kind not in OPS:
                    raise SimulationError(f"program '{self.prog.name}': unknown meta-operator {o.kind}")
                self._check_compute_mode(o)
            if self.options.functional:
                self._queue_block(body, env, stats)
        else:  # timing only, every array in compute mode: the reads (one kind) are only counted
            kind = o0.kind
            if kind not in OPS:
                raise SimulationError(f"program '{self.prog.name}': unknown meta-operator {kind}")
            counts[kind] += len(body)
        self._record_reads(body, ev)
        self.grouped_reads += len(body)
        return True

    def _together(self, body) -> bool:
        """Whether a parallel block is reads of one virtual crossbar (its row groups), one input slice and one
        accumulator, recorded together (:meth:`_reads_together`)."""
        return self.together and not self._loopnest and self._lmem is None and reads_of_one_slice(body)

    def _check_compute_mode(self, o: Op) -> None:
        """A crossbar read or write needs its arrays in compute mode (an in-place write, the tile's data)."""
        if self.xb_memory:  # the crossbar lists are only needed when some array is in memory mode
            xbs = [o["xb"]] if o.opcode == "CIM.write_xb" else [xb for xb, _, _, _ in self._entries(o, True)]
            bad = sorted(x for x in xbs if x in self.xb_memory)
            if bad:
                raise SimulationError(f"program '{self.prog.name}': {o.kind} uses crossbars {bad} in memory mode "
                                      "(switch them to compute mode with CM.switch TOC first)")
        if o.opcode == "CIM.write_xb":
            kept = self.xb_kept.pop(o["xb"], 0)  # whatever happens, a write replaces the kept data
            if o.get("inplace"):
                need = o["rows"].size * o["cols"].size * int(o.get("batch", 1)) * -(-self.wbits // 8)
                if kept < need:
                    raise SimulationError(
                        f"program '{self.prog.name}': in-place tile of crossbar {o['xb']} needs {need} bytes "
                        f"stored in memory mode and kept at CM.switch TOC (keep=True); it holds {kept}")

    def _dual_mode(self, o: Op) -> None:
        """Mode changes and the memory-mode accesses they allow (checked in every simulation mode)."""
        xbs = [int(x) for x in o["xbs"]]
        if o.opcode == "CM.switch":
            if not cost.switchable(self.hw, xbs):
                raise SimulationError(f"program '{self.prog.name}': CM.switch of crossbars {xbs}; only crossbars "
                                      f"0..{self.hw.dual_mode.switchable_arrays - 1} can switch mode")
            if o["type"] == "TOM":
                for x in xbs:
                    if x not in self.xb_memory:  # its cells now hold data: the weights are gone
                        self.xb_memory.add(x)
                        self.xb_stored[x] = 0
                        for d in (self.xb_owner, self.xb_cells, self.xb_weights):
                            d.pop(x, None)
                        self._snaps = {}
                        if self._lazy:
                            self._note_write(x)
            else:  # data left in the array is lost (kept as its cells with keep=True): a crossbar again
                for x in xbs:
                    if o.get("keep") and x in self.xb_memory:
                        self.xb_kept[x] = self.xb_stored.get(x, 0)
                    self.xb_memory.discard(x)
                    self.xb_stored.pop(x, None)
            return
        bad = sorted(x for x in xbs if x not in self.xb_memory)
        if bad:
            raise SimulationError(f"program '{self.prog.name}': {o.kind} uses crossbars {bad} as memory but they "
                                  "are in compute mode (switch them with CM.switch TOM first)")
        nbytes = int(o.get("bytes", 0))
        if o.get("op") == "store":
            cap = self.hw.memory_capacity_bytes
            share = -(-nbytes // len(xbs))
            for x in xbs:  # a program's first store into an array overwrites what it held
                if x not in self._stored_now:
                    self._stored_now.add(x)
                    self.xb_stored[x] = 0
            ring = int(o.get("ring", 0))  # a line buffer: each array holds at most its share of the ring
            held = -(-ring // len(xbs)) if ring else None
            if ring and (held > cap or nbytes > ring):
                raise SimulationError(f"program '{self.prog.name}': a line buffer of {ring} bytes in memory-mode "
                                      f"crossbars {xbs} ({cap} bytes each) cannot take a store of {nbytes} bytes")
            over = [x for x in xbs if self.xb_stored[x] + share > cap and not ring]
            if over:
                raise SimulationError(f"program '{self.prog.name}': storing {nbytes} bytes into memory-mode "
                                      f"crossbars {xbs} exceeds their capacity ({cap} bytes each)")
            for x in xbs:
                self.xb_stored[x] = min(self.xb_stored[x] + share, held) if ring else self.xb_stored[x] + share
        elif not any(self.xb_stored.get(x, 0) for x in xbs):
            raise SimulationError(f"program '{self.prog.name}': {o.kind} reads memory-mode crossbars {xbs} "
                                  "that hold no data")

    def _cross_pass(self) -> bool:
        """Whether queued reads may stay queued across crossbar writes (they captured their tiles): when the
        batches they execute in cannot change any figure -- integer results are the same for any split, but a
        lossy ADC's summed error statistics (floating point) may round differently."""
        if not self.options.measure_adc_error:
            return True
        ni = self.options.nonideal
        if ni is not None and ni.active or any(d.name == "adclsb" for d in self.prog.decls):
            return False
        return X.exact(self.xhw, self.adc_lsb)

    def _touches_pending(self, o: Op) -> bool:
        if not self._pending and not self._deferred:
            return False
        if o.opcode == "CIM.write_xb":
            return o["xb"] in self._pending_xbs
        names = self._pending_dsts
        dst = o.get("dst")
        if isinstance(dst, Ref) and dst.name in self._pending_srcs:  # it overwrites what queued reads read
            return True
        return any(isinstance(v, Ref) and v.name in names for _, v in o.args)

    def _exec(self, o: Op, env, stats) -> None:
        k = o.kind
        if k == "DCOM.dequantize" and self._pending:
            # post-processing waits for its chunk's reads: defer it so that the
            # reads of all chunks execute as one vectorised batch
            self._deferred.append(o)
            dst = o["dst"].name
            self._pending_dsts.add(dst)
            v = _vecs(o, self.M)
            held = self._deferred_srcs
            for name, ref in o.args:  # its accumulator over its chunk's vectors, the other inputs whole
                if isinstance(ref, Ref) and ref.name != dst:
                    lo, hi = (v.start, v.stop) if name == "src" else (0, 1 << 60)
                    was = held.get(ref.name)
                    held[ref.name] = (lo, hi) if was is None else (min(was[0], lo), max(was[1], hi))
            return
        if self._touches_pending(o) and not self._inert(o):
            self._flush(env, stats)
        self._apply(o, env, stats)

    def _codes_in_range(self, name: str, src: np.ndarray) -> bool:
        """Whether weight tensor ``src`` holds integer codes a tile needs no clipping of (checked once per
        tensor and run): every value within ``±(2^(bits-1) - 1)`` in an integer type that holds that bound."""
        hit = self._range_ok.get(name)
        if hit is None or hit[0] is not src:
            lim = 2 ** (self.wbits - 1) - 1
            ok = (src.dtype.kind in "iu" and np.iinfo(src.dtype).max >= lim
                  and bool(src.min(initial=0) >= -lim) and bool(src.max(initial=0) <= lim))
            hit = self._range_ok[name] = (src, ok)
        return hit[1]

    def _deferred_reads(self, name: str, v: Range) -> bool:
        """Whether deferred post-processing reads vectors ``v`` of tensor ``name`` (the span from the first to
        the last vector it reads there: chunks are deferred in order, so the span is what they read)."""
        held = self._deferred_srcs.get(name)
        return held is not None and held[0] < v.stop and v.start < held[1]

    def _inert(self, o: Op) -> bool:
        """Whether executing ``o`` changes no value (:meth:`_apply` only charges it: a data movement, a mode
        switch, a whole-tensor operation already computed): it need not wait for the queued reads."""
        if o.opcode in ("DMOV", "CM.switch", "CIM.loopnest") or o.kind == "DCOM.reduce":
            return True
        return o.kind in _WHOLE_TENSOR and o["dst"].name in self._done_full

    def _apply(self, o: Op, env, stats) -> None:
        k = o.kind
        if o.opcode == "CIM.loopnest":  # timing and energy only (_record_loopnest)
            return
        if o.opcode == "CIM.write_xb":
            src = env[o["src"].name]
            w = src[..., o["rows"].slice(), o["cols"].slice()]
            if w.ndim == 2:
                w = w[None]
            xb = o["xb"]
            # replicas program identical tiles: encode each distinct tile once (the tiles of the last
            # total_crossbars writes are remembered: one pass, whatever the number of passes)
            key = (o["src"].name, id(src), o["rows"].start, o["rows"].stop, o["cols"].start, o["cols"].stop)
            memo = self._write_memo.get(key)
            if memo is None:
                memo = self._write_memo[key] = _Tile(w, self.phw, self.wbits, self._roundtrip(),
                                                     self._codes_in_range(o["src"].name, src))
                if len(self._write_memo) > self.hw.total_crossbars:
                    del self._write_memo[next(iter(self._write_memo))]
            self.xb_cells[xb], self.xb_weights[xb] = memo, memo.weights
            self._snaps = {}
            ni = self.options.nonideal
            if ni is not None and ni.active:  # this crossbar's device realises the cells imperfectly
                cells = memo.cells()
                self.xb_cells[xb] = ni.program(cells, xb)
                self.xb_offsets[xb] = ni.offsets(cells.shape[-3:], xb)
            self.xb_owner[xb] = (self.prog.name,)
            if self._lazy:
                self._note_write(xb)
            stats.weight_writes += 1
            return
        if o.opcode in ("DMOV", "CM.switch"):  # costs only; modes are tracked by _dual_mode
            return
        if k in _WHOLE_TENSOR:
            # whole-tensor layout/element-wise ops: computed once, later chunks only cost time
            dst = o["dst"].name
            if dst in self._done_full:
                return
            self._done_full.add(dst)
            if k == "DCOM.quantize":
                env[dst] = quantize_codes(env[o["src"].name], o["scale"], o["zero"], o["bits"], o.get("signed", False))
            elif k == "DCOM.im2col":
                cols = im2col(env[o["src"].name], o["kernel"], o["strides"], o["padding"], o["dilation"], o["pad_value"])
                env[dst] = cols[None]
            elif k == "DCOM.reshape":
                x = env[o["src"].name]
                bs = o.get("batch_shape")
                if bs is not None:
                    x = np.broadcast_to(x, tuple(bs) + x.shape[-2:])
                env[dst] = np.ascontiguousarray(x).reshape(tuple(o["shape"]))
            elif k == "DCOM.colsum":
                env[dst] = env[o["src"].name].astype(np.int64).sum(axis=-2)[:, None, :]
            else:
                env[dst] = np.zeros(tuple(o["shape"]), dtype=np.int64)
        elif k == "DCOM.reduce":
            pass  # the reads accumulated the partial sums; cost only
        elif k == "DCOM.dequantize":
            v = _vecs(o, self.M).slice()
            acc = env[o["src"].name][:, v]
            wsum = env[o["wsum"].name].reshape(-1, 1, acc.shape[-1]) if o.get("zero") else None
            acc = dequantize(acc, o["scale"], o.get("zero") or 0, wsum,
                             *(env[o[n].name] if o.get(n) is not None else None for n in ("wscale", "bias")))
            dst = o["dst"].name
            if dst not in env:
                env[dst] = np.zeros(env[o["src"].name].shape, dtype=np.float32)
            env[dst][:, v] = acc
        elif k == "DCOM.layout":
            y = env[o["src"].name]
            shape = tuple(o["shape"])
            if o["layout"] == "nchw":
                n, ch, h, w = shape
                y = y.reshape(n, h, w, ch).transpose(0, 3, 1, 2)
            env[o["dst"].name] = np.ascontiguousarray(y.reshape(shape), dtype=np.float32)
        else:
            raise SimulationError(f"unknown meta-operator {k}")

    def _queue_read(self, o: Op, env, stats) -> None:
        src, dst = o["src"].name, o["dst"].name
        if src not in env:
            raise SimulationError(f"program '{self.prog.name}': read of %{src} before it was computed")
        if self._deferred_reads(dst, _vecs(o, env[src].shape[1])):  # deferred post-processing reads what it changes
            self._flush(env, stats)
        queue = self._pending.get((src, dst))
        if queue is None:
            queue = self._pending[(src, dst)] = []
        ents = self._entries(o)
        if self._lazy:
            queue.append((self._lazy_key(id(ents), ents), self._gen, _vecs(o, env[src].shape[1])))
            self._pending_dsts.add(dst)
            self._pending_srcs.add(src)
            if self._pending_tile_bytes > _TILE_BYTES:
                self._flush(env, stats)
            return
        # the read sees the tiles the crossbars hold now (captured: a later write need not flush it); reads of
        # the same crossbars between two writes (and flushes) share one capture
        snap = self._snaps.get(id(ents))
        if snap is None:
            snap = self._snaps[id(ents)] = self._capture(ents)
        queue.append((snap, _vecs(o, env[src].shape[1])))
        self._pending_dsts.add(dst)
        self._pending_srcs.add(src)
        if self._pending_tile_bytes > _TILE_BYTES:  # bound the tiles held for queued reads
            self._flush(env, stats)

    def _queue_block(self, body: list, env, stats) -> None:
        """Queue the reads of a parallel block (:meth:`_reads_together`: one virtual crossbar, input,
        accumulator and vector range) as :meth:`_queue_read` queues each.  On a chip whose reads are exact
        integer products (:meth:`_start_lazy`: any split into batches gives the same integers), the block
        is one queued read of all its crossbars and rows; otherwise every read is queued on its own (the
        batches, and so a lossy ADC's error sums and a non-ideal device's float sums, stay as they were)."""
        if not self._lazy:
            for o in body:
                self._queue_read(o, env, stats)
            return
        o0 = body[0]
        src, dst = o0["src"].name, o0["dst"].name
        if src not in env:
            raise SimulationError(f"program '{self.prog.name}': read of %{src} before it was computed")
        if self._deferred_reads(dst, _vecs(o0, env[src].shape[1])):
            self._flush(env, stats)
        queue = self._pending.get((src, dst))
        if queue is None:
            queue = self._pending[(src, dst)] = []
        # the blocks of a layer's passes read the same crossbars: one table for all of them
        lists = tuple([self._entries(o) for o in body])
        key = tuple([id(e) for e in lists])
        if key not in self._valid:
            self._lazy_key(key, [e for ents in lists for e in ents])
        queue.append((key, self._gen, _vecs(o0, env[src].shape[1])))
        self._pending_dsts.add(dst)
        self._pending_srcs.add(src)
        if self._pending_tile_bytes > _TILE_BYTES:
            self._flush(env, stats)

    def _start_lazy(self, env, run_writes: bool) -> None:
        """Reads of a chip whose products are exact integers (:meth:`_exact_reads`'s conditions that hold for
        the whole program: ideal device, shortcut allowed, an ADC that cannot alter a conversion) are queued
        as (crossbars, write generation, vectors) and resolve the tiles they saw when flushed
        (:meth:`_lazy_table`): the crossbars' writes since the last flush are logged.  Any split of such reads
        into batches gives the same integers, so the tiles are bounded when written.  Only for programs whose
        run section writes crossbars (layers in passes): with resident weights, flushes are small and
        frequent, and capturing each read costs less than resolving it."""
        sc, ni = self.options.exact_shortcut, self.options.nonideal
        self._lazy = bool(run_writes and (sc is True or sc == "tile") and (ni is None or not ni.active) and
                          X.exact(self.xhw, self.adc_lsb if "adclsb" not in env else env["adclsb"]))
        if not self._lazy:
            return
        self._gen = 0  # counts logged writes
        self._reg: dict = {}  # tile id -> (weights, cells, ADC offsets)
        self._cur: dict = {}  # crossbar -> tile id it holds (-1: none)
        for xb, c in self.xb_cells.items():
            self._cur[xb] = len(self._reg)
            self._reg[len(self._reg)] = (self.xb_weights[xb], c, self.xb_offsets.get(xb))
        self._ntid = len(self._reg)
        self._base = dict(self._cur)  # what the crossbars held when the first queued read was queued
        self._wlog: list = []  # (crossbar, generation, tile id) of the writes since
        self._tables: dict = {}  # key -> (crossbars, rows, columns) table of a read's crossbars
        self._valid: set = set()  # keys whose crossbars all hold a tile (reset when a tile is removed)

    def _note_write(self, xb: int) -> None:
        """Crossbar ``xb``'s tile changed (written, or removed by a switch to memory mode): logged while reads
        are queued (:meth:`_start_lazy`)."""
        tid = -1
        if xb in self.xb_cells:
            tid = self._ntid
            self._ntid += 1
            self._reg[tid] = t = (self.xb_weights[xb], self.xb_cells[xb], self.xb_offsets.get(xb))
            if self._pending:  # the queued reads may hold it: bounded (the float64 products convert it)
                w = t[0]
                if id(w) not in self._pending_tiles:
                    self._pending_tiles[id(w)] = w
                    self._pending_tile_bytes += 8 * w.size
        else:
            self._valid = set()
        old = self._cur.get(xb, -1)
        self._cur[xb] = tid
        if self._pending:
            self._gen += 1
            self._wlog.append((xb, self._gen, tid))
        else:  # no read needs the tile it replaces
            self._base[xb] = tid
            self._reg.pop(old, None)

    def _lazy_key(self, key, ents: list):
        """``key`` of a read of crossbars ``ents`` (the ids of its :meth:`_entries` lists, which live as long
        as the run): its table remembered, and checked now: every crossbar holds a tile."""
        if key not in self._valid:
            for xb, _, _, _ in ents:
                if xb not in self.xb_cells:
                    raise SimulationError(f"read of crossbar {xb} before it was written")
            if key not in self._tables:
                self._tables[key] = np.array([(xb, r.start, r.stop, base, c.start, c.stop) for xb, r, c, base in ents],
                                             dtype=np.int64).reshape(len(ents), 6)
            self._valid.add(key)
        return key

    def _lazy_table(self, items: list) -> tuple[np.ndarray, list]:
        """:meth:`_read_table` of lazy reads ``(key, generation, vectors)``: each crossbar's tile is the one
        its last write before the read's generation (or, without one, the base state) put there."""
        keys = list(dict.fromkeys(k for k, _, _ in items))
        kidx = {k: i for i, k in enumerate(keys)}
        tables = [self._tables[k] for k in keys]
        sizes = np.array([len(t) for t in tables], dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        rid = np.fromiter((kidx[k] for k, _, _ in items), dtype=np.int64, count=len(items))
        gen = np.fromiter((g for _, g, _ in items), dtype=np.int64, count=len(items))
        v0 = np.fromiter((v.start for _, _, v in items), dtype=np.int64, count=len(items))
        v1 = np.fromiter((v.stop for _, _, v in items), dtype=np.int64, count=len(items))
        n = sizes[rid]
        first = np.repeat(np.cumsum(n) - n, n)
        row = np.repeat(starts[rid], n) + np.arange(int(n.sum()), dtype=np.int64) - first
        allt = np.concatenate(tables)[row]
        xb, g = allt[:, 0], np.repeat(gen, n)
        # the tile id each row sees: the base state's, unless a logged write at or before its generation
        nx = int(max(xb.max(initial=0), max(self._base, default=0))) + 1
        base_tid = np.full(nx, -1, dtype=np.int64)
        base_tid[np.fromiter(self._base.keys(), np.int64, len(self._base))] = np.fromiter(
            self._base.values(), np.int64, len(self._base))
        tid = base_tid[xb]
        if self._wlog:
            lx, lg, lt_arr = (np.array(c, dtype=np.int64) for c in zip(*self._wlog))
            span = int(self._gen) + 2
            order = np.lexsort((lg, lx))
            kw = lx[order] * span + lg[order]
            pos = np.searchsorted(kw, xb * span + g, side="right") - 1
            hit = pos >= 0
            hit[hit] = lx[order][pos[hit]] == xb[hit]
            tid[hit] = lt_arr[order][pos[hit]]
        if (tid < 0).any():
            raise SimulationError(f"read of crossbar {int(xb[tid < 0][0])} before it was written")
        used, col = np.unique(tid, return_inverse=True)
        # one tile per distinct (weights, cells, offsets): replicas' crossbars hold the same tile objects
        index: dict = {}
        tiles: list = []
        canon = np.empty(len(used), dtype=np.int64)
        for i, t in enumerate(used.tolist()):
            tile = self._reg[t]
            key = (id(tile[0]), id(tile[1]), id(tile[2]))
            j = index.get(key)
            if j is None:
                j = index[key] = len(tiles)
                tiles.append(tile)
            canon[i] = j
        col = canon[col.reshape(-1)]
        meta = np.empty((len(row), 8), dtype=np.int64)
        meta[:, 0:5] = allt[:, 1:6]
        meta[:, 5] = np.repeat(v0, n)
        meta[:, 6] = np.repeat(v1, n)
        meta[:, 7] = col
        return meta, tiles

    def _capture(self, ents: list) -> tuple:
        """What a read of crossbars ``ents`` sees: ``(table, tiles)``, ``table`` an integer array with one row
        per crossbar (rows start and stop, the tile's first row, columns start and stop, index into
        ``tiles``), ``tiles`` the ``(weights, cells, ADC offsets)`` they hold now.  Counts the tiles new to
        the queued reads (:data:`_TILE_BYTES`)."""
        cells, weights, offsets, held = self.xb_cells, self.xb_weights, self.xb_offsets, self._pending_tiles
        try:
            tiles = [(weights[xb], cells[xb], offsets.get(xb)) for xb, _, _, _ in ents]
        except KeyError:
            xb = next(xb for xb, _, _, _ in ents if xb not in cells)
            raise SimulationError(f"read of crossbar {xb} before it was written") from None
        for w, _, _ in tiles:
            if id(w) not in held:
                held[id(w)] = w
                self._pending_tile_bytes += 8 * w.size  # as the float64 the product converts it to
        if not self._cross:
            self._pending_xbs.update(xb for xb, _, _, _ in ents)
        table = np.array([(r.start, r.stop, base, c.start, c.stop, i) for i, (_, r, c, base) in enumerate(ents)],
                         dtype=np.int64).reshape(len(ents), 6)
        return table, tiles

    def _flush(self, env, stats) -> None:
        """Execute the queued reads (grouped by crossbar, vectorised), then the deferred post-processing."""
        self._flush_reads(env, stats)
        deferred, self._deferred = self._deferred, []
        self._pending_xbs = set()
        self._pending_dsts = set()
        self._pending_srcs = set()
        self._deferred_srcs = {}
        self._pending_tiles = {}
        self._pending_tile_bytes = 0
        self._snaps = {}
        if self._lazy:
            self._base = dict(self._cur)
            self._wlog = []
            self._gen = 0
            live = set(self._cur.values())
            if len(self._reg) > 2 * len(live) + 64:  # tiles no crossbar holds and no queued read needs
                self._reg = {t: r for t, r in self._reg.items() if t in live}
        for o in deferred:
            self._apply(o, env, stats)

    def _flush_reads(self, env, stats) -> None:
        if not self._pending:
            return
        groups, self._pending = self._pending, {}
        with X.one_blas_thread():
            for (src, dst), all_items in groups.items():
                if not all_items:
                    continue
                meta, tiles = (self._lazy_table if self._lazy else self._read_table)(all_items)
                if self._exact_reads(env, meta, tiles):
                    self._flush_exact(env[src], env[dst], self._merge_rows(meta), tiles, stats, self._placed)
                    continue
                for i0, i1 in self._batches(meta, env[src].shape[0]):
                    self._flush_group(src, dst, meta[i0:i1], tiles, env, stats)

    def _exact_reads(self, env, meta: np.ndarray, tiles: list) -> bool:
        """Whether queued reads (:meth:`_read_table`) sum exact integer products: the simulator may take the
        shortcut (``exact_shortcut`` True or "tile": "tile" proves every bitline of every tile, the bound of
        :func:`X._exact_groups` being at most the one of :func:`X.exact`), the device is ideal, its ADC
        cannot alter any conversion, the input encoding recombines to the signed product, and every tile
        holds one batch."""
        sc, ni = self.options.exact_shortcut, self.options.nonideal
        if not (sc is True or sc == "tile") or (ni is not None and ni.active):
            return False
        if not X.exact(self.xhw, self.adc_lsb if "adclsb" not in env else env["adclsb"]):
            return False
        if self.signed_input and self.xhw.crossbar.input_encoding == "twos":
            return False
        return all(tiles[j][0].shape[0] == 1 for j in set(meta[:, 7].tolist()))

    @staticmethod
    def _read_table(items: list) -> tuple[np.ndarray, list]:
        """Queued reads as integer columns: ``meta`` of shape ``(N, 8)``, one row per crossbar a read
        activates, in queue order (rows start and stop, the tile's first row ``base``, columns start and stop,
        vectors start and stop, tile index), and the tiles ``[(weights, cells, ADC offsets)]`` the reads
        captured (one per distinct triple).  ``items``: ``(capture, vectors)`` pairs, the capture as
        :meth:`_capture` makes it."""
        index: dict = {}
        tiles: list = []
        known: dict = {}  # id(capture) -> its number
        tables, rid, v0, v1 = [], [], [], []
        for snap, v in items:
            k = known.get(id(snap))
            if k is None:
                k = known[id(snap)] = len(tables)
                table, held = snap
                glob = []
                for w, cells, off in held:  # the capture's tiles, numbered across the reads
                    key = (id(w), id(cells), id(off))
                    j = index.get(key)
                    if j is None:
                        j = index[key] = len(tiles)
                        tiles.append((w, cells, off))
                    glob.append(j)
                t = table.copy()
                t[:, 5] = np.asarray(glob, dtype=np.int64)[table[:, 5]] if len(table) else 0
                tables.append(t)
            rid.append(k)
            v0.append(v.start)
            v1.append(v.stop)
        if not tables:
            return np.zeros((0, 8), dtype=np.int64), tiles
        sizes = np.array([len(t) for t in tables], dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        rid = np.array(rid, dtype=np.int64)
        n = sizes[rid]  # rows per read
        first = np.repeat(np.cumsum(n) - n, n)  # each row's read's first row in the table
        row = np.repeat(starts[rid], n) + np.arange(int(n.sum()), dtype=np.int64) - first
        allt = np.concatenate(tables)[row]
        meta = np.empty((len(row), 8), dtype=np.int64)
        meta[:, 0:5] = allt[:, 0:5]
        meta[:, 5] = np.repeat(np.array(v0, dtype=np.int64), n)
        meta[:, 6] = np.repeat(np.array(v1, dtype=np.int64), n)
        meta[:, 7] = allt[:, 5]
        return meta, tiles

    @staticmethod
    def _batches(meta: np.ndarray, bt: int):
        """Consecutive runs ``(i0, i1)`` of queued reads (rows of :meth:`_read_table`'s ``meta``) whose input
        vectors (as float64) fit :data:`_FLUSH_BYTES`: the peak memory of a flush stays bounded however many
        chunks a pass has.  Greedy: a run ends before the read that would take it past the bound (a read
        larger than the bound is a run of its own).  (Integer results are the same for any split; only a
        lossy ADC's summed error statistics may round differently.)"""
        n = len(meta)
        cum = np.cumsum(8 * bt * (meta[:, 6] - meta[:, 5]) * (meta[:, 1] - meta[:, 0]))
        start = 0
        while start < n:
            base = int(cum[start - 1]) if start else 0
            over = int(np.searchsorted(cum, base + _FLUSH_BYTES, side="right"))  # first read past the bound
            first = int(np.searchsorted(cum, base, side="right"))  # a run holds at least one read with vectors
            end = min(n, max(over, first + 1, start + 1))
            yield start, end
            start = end

    def _flush_group(self, src: str, dst: str, meta: np.ndarray, tiles: list, env, stats) -> None:
        """Execute queued reads of one input and one accumulator, vectorised over tiles and vectors
        (``meta``, ``tiles``: the reads as :meth:`_read_table` gives them)."""
        x, acc = env[src], env[dst]
        bt = x.shape[0]
        by_key: dict[tuple, list] = {}
        tile = {}  # key -> (weights, cells, ADC offsets) the reads captured
        for r0, r1, base, c0, c1, v0, v1, j in meta.tolist():
            key = (j, r0, r1, base, c0, c1)
            got = by_key.get(key)
            if got is None:
                tile[key] = tiles[j]
                got = by_key[key] = []
            got.append((v0, v1))
        keys = list(by_key)
        t_n = len(keys)
        r_max = max(k[2] - k[1] for k in keys)
        n_max = max(k[5] - k[4] for k in keys)
        vecs = [_vector_index(by_key[k]) for k in keys]  # each tile's vectors: (index, count, each once)
        v_max = max(v[1] for v in vecs)
        xs = np.zeros((t_n, bt, v_max, r_max), dtype=np.int32)
        for t, key in enumerate(keys):
            _, r0, r1, base, c0, c1 = key
            idx, cnt, _ = vecs[t]
            xs[t, :, :cnt, : r1 - r0] = x[:, idx, r0:r1]
        # the same reads of the same tiles: their stacked weights (and cells) are placed once (_Blocks); what
        # the cells prove depends on how this program drives the crossbar (rows per step, DAC and ADC bits)
        xb = self.xhw.crossbar
        ident = (bt, xb.rows_active, xb.dac_bits, xb.adc_bits,
                 tuple((id(tile[k][0]), id(tile[k][1])) + k[1:] for k in keys))
        placed = self._placed.get(ident)
        if placed is None:
            wts = np.stack([self._fit(tile[k][0][:, k[1] - k[3] : k[2] - k[3]], bt, r_max, n_max) for k in keys])
            wts.setflags(write=False)
            placed = [wts, None, None]  # stacked weights, cells, the bitlines they prove (X.proven_groups)
            self._placed.put(ident, placed, [tile[k] for k in keys], wts.nbytes)
        wts = placed[0]
        shape = (t_n, bt, r_max) + self._slices_planes() + (n_max,)  # of the stacked cells
        lsb = self._lsb(env, keys, shape)
        hw, sc = self.xhw, self.options.exact_shortcut
        ni = self.options.nonideal
        offset = None
        if ni is not None and ni.active:
            offset = np.zeros((t_n,) + shape[-3:], dtype=np.float32)
            for t, key in enumerate(keys):
                off = tile[key][2]
                offset[t, ..., : off.shape[-1]] = off[..., : shape[-1]]
            if lsb is None:
                lsb = X.adc_lsb(hw, r_max)
        if sc and offset is None and X.exact(hw, lsb, r_max):  # (implies the bound of every tile, "tile")
            # the exact integer product: only the cells' shape is used, not their values
            cells = np.broadcast_to(np.zeros((), np.float32), shape)
        elif placed[1] is not None:
            cells = placed[1]
        else:
            parts = [self._cells(tile[k][1])[:, k[1] - k[3] : k[2] - k[3]] for k in keys]
            cells = np.zeros(shape, dtype=np.result_type(*parts))  # (one copy: no padded intermediates)
            for t, c in enumerate(parts):
                cells[t, :, : c.shape[1], ..., : c.shape[-1]] = c
            cells.setflags(write=False)
            placed[1], placed[2] = cells, X.proven_groups(cells, hw)
            self._placed.grow(ident, cells.nbytes + placed[2].nbytes)
        ideal = None
        if self.options.measure_adc_error and (offset is not None or not X.exact(hw, lsb, r_max)):
            ideal = X.exact_matmul(xs, wts)
        if self.signed_input:  # as the input encoding applies them (two unsigned phases by default)
            res = X.mvm_signed(xs, cells, hw, self.wbits, self.ibits, sc, weights=wts, lsb=lsb, offset=offset,
                               proven=placed[2])
        else:  # (the unsigned product starts from the ideal one)
            res = X.mvm(xs, cells, hw, self.wbits, self.ibits, sc, weights=wts, lsb=lsb, offset=offset,
                        product=ideal, proven=placed[2])
        if ideal is not None:
            # only the tiles' own bitlines: a padded column holds no weight (with offset encoding its zero
            # cells decode to -2^(b-1), so the chip's result there is not 0, and no output reads it)
            cols = np.arange(n_max) < np.array([k[5] - k[4] for k in keys])[:, None]
            err = np.abs(res - ideal) * cols[:, None, None, :]
            e = stats.adc_error
            e["max_abs"] = max(e.get("max_abs", 0.0), float(err.max(initial=0)))
            e["sum_sq_err"] = e.get("sum_sq_err", 0.0) + float((err.astype(np.float64) ** 2).sum())
            e["sum_sq_ref"] = e.get("sum_sq_ref", 0.0) + float((ideal**2).sum())
        for t, key in enumerate(keys):
            _, r0, r1, base, c0, c1 = key
            idx, cnt, once = vecs[t]
            stats.macs += bt * cnt * (r1 - r0) * (c1 - c0)
            if once:  # (an indexed += adds each vector once)
                acc[:, idx, c0:c1] += res[t, :, :cnt, : c1 - c0]
                continue
            off = 0
            for v0, v1 in by_key[key]:
                acc[:, v0:v1, c0:c1] += res[t, :, off : off + v1 - v0, : c1 - c0]
                off += v1 - v0

    @staticmethod
    def _flush_exact(x: np.ndarray, acc: np.ndarray, meta: np.ndarray, tiles: list, stats,
                     blocks: _Blocks | None = None) -> None:
        """Queued reads whose conversions the ADC cannot alter: each adds the integer product of its input
        slice and its tile's rows and columns to the accumulator (what :func:`X.mvm`'s exact shortcut computes,
        and, for unsigned, ``phases`` or ``offset`` inputs, what its signed passes recombine to).

        Vector ranges read from the same tiles (the same multiset of tile, rows and columns: every chunk of
        a pass, or of a layer's passes) are one product: the tiles are placed (added) into one matrix over the
        rows and columns they span, built once, and the inputs' rows times that matrix are added to the
        accumulator's columns (:func:`X.exact_matmul`: float32 slices of the rows, added in float64).  Every
        partial sum is an integer below 2^53 (checked), summed exactly in any order: the same integers as one
        product per read.  ``meta``, ``tiles``: the reads as
        :meth:`_read_table` gives them; ``blocks``: the matrices earlier flushes placed (:class:`_Blocks`)."""
        if not len(meta):
            return
        bt = x.shape[0]
        r_sz, c_sz, v_sz = meta[:, 1] - meta[:, 0], meta[:, 4] - meta[:, 3], meta[:, 6] - meta[:, 5]
        stats.macs += int(bt * (v_sz * r_sz * c_sz).sum())
        meta = meta[v_sz > 0]
        if not len(meta):
            return
        # each vector range's multiset of pieces (tile, rows, columns); the ranges of one multiset are one class
        rows = meta.tolist()
        by_range: dict = {}
        for i, r in enumerate(rows):
            by_range.setdefault((r[5], r[6]), []).append(i)
        classes: dict = {}  # the pieces' multiset -> (its reads, its vector ranges)
        for vrange, idx in by_range.items():
            pieces = sorted(((*rows[i][:5], rows[i][7]), i) for i in idx)
            sig = tuple(p for p, _ in pieces)
            hit = classes.get(sig)
            if hit is None:
                classes[sig] = ([i for _, i in pieces], [vrange])
            else:
                hit[1].append(vrange)
        for idx, vranges in classes.values():
            spans: list = []  # the class's vector ranges, adjacent ones joined
            for v0, v1 in sorted(vranges):
                if spans and spans[-1][1] == v0:
                    spans[-1][1] = v1
                else:
                    spans.append([v0, v1])
            Chip._exact_product(x, acc, spans, meta[idx], tiles, blocks)

    @staticmethod
    def _exact_product(x: np.ndarray, acc: np.ndarray, spans: list, g: np.ndarray, tiles: list,
                       blocks: _Blocks | None = None) -> None:
        """The reads ``g`` (rows of ``meta``, one per piece) of every vector range of ``spans``: one product
        per block of columns whose pieces fill at least half of it (:meth:`_flush_exact`)."""
        area = int(((g[:, 1] - g[:, 0]) * (g[:, 4] - g[:, 3])).sum())
        r0, r1, c0, c1 = int(g[:, 0].min()), int(g[:, 1].max()), int(g[:, 3].min()), int(g[:, 4].max())
        if 2 * area < (r1 - r0) * (c1 - c0) and len(g) > 1:  # sparse: split by column ranges, then rows
            for cols in (slice(3, 5), slice(0, 2)):
                parts = np.unique(g[:, cols], axis=0)
                if len(parts) > 1:
                    for a, b in parts.tolist():
                        Chip._exact_product(x, acc, spans, g[(g[:, cols][:, 0] == a) & (g[:, cols][:, 1] == b)],
                                            tiles, blocks)
                    return
        pieces = g.tolist()
        key = (r0, r1, c0, c1, tuple((a, b, base, c, d, id(tiles[j][0])) for a, b, base, c, d, _, _, j in pieces))
        hit = blocks.get(key) if blocks is not None else None
        if hit is None:
            dt = np.result_type(*{tiles[j][0].dtype for *_, j in pieces})
            # float32 holds every sum of these pieces exactly when no sum can reach 2^24 (int8 or int16 tiles)
            small = dt.kind in "iu" and dt.itemsize <= 2 and len(pieces) << (8 * dt.itemsize) < 2**24
            w = np.zeros((r1 - r0, c1 - c0), dtype=np.float32 if small else np.float64)
            for a, b, base, c, d, _, _, j in pieces:
                w[a - r0 : b - r0, c - c0 : d - c0] += tiles[j][0][0, a - base : b - base, : d - c]
            w_max = float(np.abs(w).max(initial=0.0))
            if w_max < 2.0**24:  # integers float32 holds: X.exact_matmul reads it without a copy
                w = w.astype(np.float32, copy=False)
            w.setflags(write=False)
            hit = (w, w_max)
            if blocks is not None:
                blocks.put(key, hit, [tiles[j][0] for *_, j in pieces], w.nbytes)
        w, w_max = hit
        bt = x.shape[0]
        step = max(1, _FLUSH_BYTES // max(1, 8 * bt * (r1 - r0 + 2 * (c1 - c0))))
        n_v = sum(v1 - v0 for v0, v1 in spans)
        if n_v > 1 and bt * n_v * (r1 - r0) * (c1 - c0) >= _THREAD_MACS:  # a large product: on two threads,
            step = min(-(-n_v // 2), max(1, step // 2))  # in halves of the chunk one thread would hold

        def product(chunk):  # bounded memory: the inputs and the product of a chunk of vectors
            a, b = chunk
            xs = x[:, a:b, r0:r1]
            # every partial sum is an integer at most this large: exact in float64 below 2^53
            if max(float(xs.max(initial=0)), -float(xs.min(initial=0))) * w_max * (r1 - r0) >= 2.0**53:
                raise SimulationError("crossbar read sums exceed the integers float64 holds exactly")
            res = X.exact_matmul(xs, w)
            acc[:, a:b, c0:c1] += np.rint(res, out=res).astype(np.int64)

        # (the chunks add to their own vectors of the accumulator: on threads, the values of a loop)
        thread_map(product, [(a, min(v1, a + step)) for v0, v1 in spans for a in range(v0, v1, step)])

    @staticmethod
    def _merge_rows(meta: np.ndarray) -> np.ndarray:
        """Reads of adjacent row groups of one tile for the same vectors and columns as one read of their rows
        (the exact integer product sums over rows: the same result as the groups' products added).  ``meta``
        as :meth:`_read_table` gives it; returns the merged reads in the same form.  A read of rows already
        read (twice) stays a read of its own."""
        if len(meta) < 2:
            return meta
        key = meta[:, 2:]  # base, columns, vectors, tile: what must match
        order = np.lexsort((meta[:, 0],) + tuple(key[:, j] for j in range(key.shape[1] - 1, -1, -1)))
        m = meta[order]
        cont = np.ones(len(m), dtype=bool)  # read i continues read i - 1's rows
        cont[0] = False
        cont[1:] = (m[1:, 2:] == m[:-1, 2:]).all(axis=1) & (m[1:, 0] == m[:-1, 1])
        starts = np.flatnonzero(~cont)
        ends = np.append(starts[1:], len(m)) - 1
        out = m[starts].copy()
        out[:, 1] = m[ends, 1]
        return out

    def _lsb(self, env, keys: list, shape: tuple):
        """The programmed ADC LSB of the tiles being read: the program's ``adc_lsb``, or its per-bitline
        constant ``%adclsb`` (slice x plane, column), or None (the hardware's fixed rule)."""
        if "adclsb" in env:
            per_col = env["adclsb"]  # (S*P, N)
            t_n, _, _, s_n, p_n, n_max = shape
            out = np.ones((t_n, s_n * p_n, n_max), dtype=np.float64)
            for t, key in enumerate(keys):
                c0, c1 = key[4], key[5]
                out[t, :, : c1 - c0] = per_col[:, c0:c1]
            return out.reshape(t_n, s_n, p_n, n_max)
        return self.adc_lsb

    @staticmethod
    def _cells(c) -> np.ndarray:
        """The cells a crossbar holds (``xb_cells`` entry: tiles are encoded when a read first needs them)."""
        return c.cells() if isinstance(c, _Tile) else c

    def _slices_planes(self) -> tuple[int, int]:
        """(S, P) of this program's cells: weight slices and planes of its encoding."""
        if self._sp is None:
            self._sp = X.encode(np.zeros((1, 1), np.int32), self.phw, self.wbits).shape[-3:-1]
        return self._sp

    def _roundtrip(self) -> bool:
        """Whether decoding the encoded cells gives back the clipped weights for every code of this
        program's encoding (checked once per run); then a tile's weights need no encoding."""
        if self._identity is None:
            lim = 2 ** (self.wbits - 1) - 1
            codes = np.arange(-lim, lim + 1, dtype=np.int64)[:, None]
            self._identity = bool(np.array_equal(X.decode(X.encode(codes, self.phw, self.wbits), self.phw,
                                                          self.wbits), codes))
        return self._identity

    @staticmethod
    def _fit(a: np.ndarray, bt: int, r_max: int, n_max: int) -> np.ndarray:
        """Pad a crossbar's contents to the common (Bt, rows, ..., n) shape."""
        if a.shape[0] != bt:
            a = np.broadcast_to(a, (bt,) + a.shape[1:])
        pad = [(0, 0)] * a.ndim
        pad[1] = (0, r_max - a.shape[1])
        pad[-1] = (0, n_max - a.shape[-1])
        if any(p != (0, 0) for p in pad):
            a = np.pad(a, pad)
        return a

    # ------------------------------------------------------------------ costs / events
    # Scoreboard.  Tensor keys: vector range -> operations that wrote it (all of
    # them: reads accumulate partial sums into the same range).  Crossbar keys:
    # the last write and the reads since (a write waits for them).
    _FULL = Range(0, 1 << 60)

    def _reset_board(self, rewritten: set | None = None) -> None:
        """A fresh scoreboard for one section; ``rewritten``: the keys of the crossbars the section writes,
        writes back from or switches (only their reads are kept as readers: no other operation waits for a
        crossbar's reads); None: every crossbar."""
        self._rewritten = rewritten
        self._live_keys: dict = {}  # id(crossbar keys of a read) -> those in ``rewritten``
        self._ranges: dict = defaultdict(dict)
        self._xb_write: dict = {}
        self._xb_epoch = 0  # counts crossbar writes: the cached write dependencies of reads are valid within one
        self._write_deps: dict = {}  # id(crossbar keys) -> (epoch, their last writes)
        self._readers_seen: dict = {}  # (count, first, last) -> the last reader list of crossbars (_write_deps_of)
        self._xb_readers: dict = defaultdict(list)

    def _live(self, xb_keys: tuple) -> tuple:
        """The crossbar keys whose readers this section consults (:meth:`_reset_board`)."""
        rw = self._rewritten
        return xb_keys if rw is None or not self.prune_readers else tuple([k for k in xb_keys if k in rw])

    def _deps(self, key: str, v: Range, write: bool = False) -> list[int]:
        """Operations the access of ``key`` over ``v`` must wait for."""
        table = self._ranges.get(key)  # (a crossbar's key is never in it: _mark)
        if not table:
            if key.startswith("xb:"):
                last = self._xb_write.get(key)
                deps = [] if last is None else [last]
                return deps + self._xb_readers[key] if write else deps
            return []
        exact = table.get((v.start, v.stop))
        full = table.get((0, 1 << 60), [])
        if exact is not None:
            return exact + full if full is not exact else exact
        out = []
        for (a, b), idx in table.items():
            if a < v.stop and b > v.start:
                out += idx
        return out

    def _mark(self, key: str, v: Range, idx: int, write: bool) -> None:
        if key.startswith("xb:"):
            if write:
                self._xb_epoch += 1
                self._xb_write[key] = idx
                self._xb_readers[key] = []
            else:
                self._xb_readers[key].append(idx)
            return
        self._ranges[key].setdefault((v.start, v.stop), []).append(idx)

    def _record(self, o: Op, env, ev: Events) -> None:
        """Charge an operation (:mod:`tvm_cim.hardware.cost`) and put it on the timeline.

        A program with a ``CIM.loopnest`` (a MIREDO dataflow) is timed and
        charged by executing its loop nest; its other operations only compute values.
        """
        if self._loopnest and o.opcode != "CIM.loopnest":
            return
        handler = self._RECORD.get(o.opcode)
        if handler is None:
            raise SimulationError(f"program '{self.prog.name}': no cost for meta-operator {o.kind}")
        handler(self, o, ev)

    def _write_static(self, a: dict) -> tuple:
        """A crossbar write's duration, energy, crossbar key and resources (``a``: its arguments)."""
        xb = a["xb"]
        r, c = a["rows"], a["cols"]
        wkey = (xb, r.stop - r.start, c.stop - c.start, a.get("batch", 1), a.get("inplace"))
        hit = self._write_cost.get(wkey)
        if hit is None:  # tiles of one shape cost the same (every pass rewrites the same shapes)
            shape = (wkey[1], wkey[2], int(wkey[3]), bool(wkey[4]))
            dur, e = cost.write(self.phw, shape[0], shape[1], shape[2], self.wbits)
            if shape[3]:  # its data was charged when it was stored in memory mode
                dur, e = 0.0, 0.0
            res = self._write_res(xb)
            hit = self._write_cost[wkey] = (float(dur), float(e), res[0], res)
        return hit

    def _write_res(self, xb: int) -> tuple:
        """The resources a write of crossbar ``xb`` occupies: the crossbar, and its write port where arrays
        programmed at once share the write ports."""
        return self._write_resources([xb])[0]

    def _write_resources(self, xbs: list) -> list[tuple]:
        """:meth:`_write_res` of each of ``xbs``."""
        ports = self.hw.dual_mode.write_ports
        if ports:
            return [(f"xb:{x}", f"wport:{x % ports}") for x in xbs]
        return [(f"xb:{x}",) for x in xbs]

    def _record_write(self, o: Op, ev: Events) -> None:
        a = o._index
        dur, e, key, res = self._write_static(a)
        src = a["src"].name
        table = self._ranges.get(src)
        shared = None
        if table and len(table) == 1 and (0, self.M) in table:  # every weight fetch so far: a shared list
            shared = table[(0, self.M)]
            readers = self._xb_readers[key]
            if len(readers) <= LONG_DEPS:  # (_write_deps_of)
                last = self._xb_write.get(key)
                deps = readers if last is None else [last] + readers
            else:
                deps = self._write_deps_of(key)
        else:
            deps = self._deps(key, _from0(1), write=True)
            deps += self._deps(src, _from0(self.M), write=False)
        self._energy["write"] += e
        if shared is not None and type(deps) is list and len(deps) <= LONG_DEPS:  # what ev.add stores, inline
            d = tuple(deps)
            if d == ev._last:
                d = ev._last
            ev._last = d
            i = ev.add_stored(dur, res, Prefix(shared, len(shared), d), e, False, "CIM.write_xb")
        else:
            i = ev.add(dur, res, deps, e, False, "CIM.write_xb", shared)
        self._xb_epoch += 1  # _mark(key, ..., write=True)
        self._xb_write[key] = i
        self._xb_readers[key] = []

    def _write_deps_of(self, key: str):
        """A crossbar write's dependencies: its last write, then the reads of it since (in that order).

        Crossbars read together (every row group of a pass reads all of them) have equal reader lists:
        those are stored once (a :class:`Prefix` of one shared list after the last write), which keeps
        the timeline of a layer rewritten in many passes small and lets the scheduler maximise the list once.
        """
        last = self._xb_write.get(key)
        readers = self._xb_readers[key]
        if len(readers) <= LONG_DEPS:
            return ([] if last is None else [last]) + readers
        sig = (len(readers), readers[0], readers[-1])
        same = self._readers_seen.get(sig)
        if same is None or same != readers:
            same = self._readers_seen[sig] = list(readers)
        return Prefix(same, len(same), () if last is None else (last,))

    def _record_read(self, o: Op, ev: Events) -> None:
        a = o._index
        v = a.get("vecs")
        if not isinstance(v, Range):
            v = _from0(self.M)
        src = a["src"].name
        dur, energy, total, xb_keys, tag, src_key = self._read_static_of(o, a, v)
        deps = self._deps(src_key, v, False) + self._deps(src, v, False)
        wd = self._write_deps.get(id(xb_keys))
        if wd is None or wd[0] != self._xb_epoch:  # the last writes of its crossbars (until one is rewritten)
            xb_write = self._xb_write
            wd = self._write_deps[id(xb_keys)] = (self._xb_epoch, [xb_write[k] for k in xb_keys if k in xb_write])
        deps += wd[1]
        acc = self._energy
        for k2, val in energy.items():
            acc[k2] += val
        i = ev.add(dur, tag, deps, total, True, o.opcode)
        if self._lmem is not None:  # the input slice it reads may be reused after it
            held = self._lbuf.get((src_key, v.start, v.stop))
            if held is not None:
                held[0].read(held[1], i)
        live = self._live_keys.get(id(xb_keys))
        if live is None:
            live = self._live_keys[id(xb_keys)] = self._live(xb_keys)
        readers = self._xb_readers
        for k in live:
            readers[k].append(i)
        self._ranges[a["dst"].name].setdefault((v.start, v.stop), []).append(i)  # _mark(dst, v, i, True)

    def _read_static_of(self, o: Op, a: dict, v: Range) -> tuple:
        """What a read costs and occupies, which depends only on the crossbars read, its input and the number of
        vectors: duration, energy by component, total energy, crossbar keys, resources, input-slice key."""
        blk = a.get("block")
        src = a["src"].name
        skey = (a["vxb"], None if blk is None else blk.start, a.get("group"), o.opcode, v.stop - v.start, src)
        st = self._read_static.get(skey)
        if st is None:
            ents = self._entries(o, True)
            vectors = v.size * self._batch
            agg_key = (id(ents), vectors, o.opcode)
            agg = self._read_memo.get(agg_key)
            if agg is None:  # the same crossbars read for the same number of vectors cost the same
                agg = self._read_memo[agg_key] = self._read_cost(o, ents, vectors)
            st = self._read_static[skey] = (*agg, *self._read_tags_of(o))
        return st

    def _read_tags_of(self, o: Op) -> tuple:
        """A read's resources and input-slice key (:meth:`_read_tag`, memoised per virtual crossbar, input and
        row block)."""
        blk = o.get("block")
        tag_key = (o["vxb"], o["src"].name, None if blk is None else blk.start)
        tags = self._read_tags.get(tag_key)
        if tags is None:
            tags = self._read_tags[tag_key] = self._read_tag(o)
        return tags

    def _record_reads(self, body, ev: Events) -> None:
        """:meth:`_record_read` of reads of one virtual crossbar, input slice and accumulator (the row groups
        of a parallel block), in order: the same rows, energy sums and scoreboard.  A read marks only its
        accumulator and its crossbars' reader lists, which no other read of the block consults, so their
        input dependencies are looked up once; reads of the same crossbars share one stored dependency list.
        What depends only on the block's operations (durations, energies, crossbar sets) is planned once per
        block shape (:meth:`_read_plan`): every pass of a layer reads the same row groups."""
        o0 = body[0]
        a0 = o0._index
        v = _vecs(o0, self.M)
        vectors = v.size * self._batch
        src = a0["src"].name
        blk = a0.get("block")
        bstart = None if blk is None else blk.start
        tag_key = (a0["vxb"], src, bstart)
        tags = self._read_tags.get(tag_key)
        if tags is None:
            tags = self._read_tags[tag_key] = self._read_tag(o0)
        tag, src_key = tags
        vkey = self._vxb_shape(a0["vxb"]) if blk is None else a0["vxb"]  # what _entries keys the crossbars by
        sig = (o0.opcode, vkey, bstart, vectors, tuple([o._index.get("group") for o in body]))
        plan = self._read_plans.get(sig)
        if plan is None:
            plan = self._read_plans[sig] = self._read_plan(body, vectors)
        durs, totals, analog, kinds, energy, sets, which, runs = plan
        base = self._deps(src_key, v, False) + self._deps(src, v, False)
        wdeps, xb_write, epoch = self._write_deps, self._xb_write, self._xb_epoch
        stored = []  # per distinct crossbar set, in order of first use: the reads' stored dependency list
        for xb_keys in sets:
            wd = wdeps.get(id(xb_keys))
            if wd is None or wd[0] != epoch:
                wd = wdeps[id(xb_keys)] = (epoch, [xb_write[k] for k in xb_keys if k in xb_write])
            stored.append(ev.stored(base + wd[1]))
        acc_e, readers = self._energy, self._xb_readers
        for k2, vals in energy:  # each component summed in program order (the same floating-point sums)
            acc_e[k2] = functools.reduce(operator.add, vals, acc_e[k2])
        i0 = len(ev.dur)
        ev.dur.extend(durs)
        ev.res.extend([tag] * len(durs))
        ev.deps.extend([stored[j] for j in which] if len(stored) > 1 else [stored[0]] * len(durs))
        ev.energy.extend(totals)
        ev.analog.extend(analog)
        ev.kind.extend(kinds)
        live_keys = self._live_keys
        for xb_keys, r0, r1 in runs:  # consecutive reads of the same crossbars: reader lists extended once
            run = range(i0 + r0, i0 + r1)
            live = live_keys.get(id(xb_keys))
            if live is None:
                live = live_keys[id(xb_keys)] = self._live(xb_keys)
            for k in live:
                readers[k].extend(run)
        self._ranges[a0["dst"].name].setdefault((v.start, v.stop), []).extend(range(i0, i0 + len(durs)))

    def _read_plan(self, body, vectors: int) -> tuple:
        """What :meth:`_record_reads` appends for a block, apart from dependencies: durations, total energies,
        analog flags and kinds of its rows; its energy by component (component, values in program order);
        its distinct crossbar sets (in order of first use), the set of each read (an index into them) and
        the runs ``(crossbar keys, first, stop)`` of consecutive reads of one set."""
        memo = self._read_memo
        durs, totals, energy, sets, which, runs = [], [], {}, [], [], []
        pos: dict = {}
        for n, o in enumerate(body):
            ents = self._entries(o, True)
            agg_key = (id(ents), vectors, o.opcode)
            agg = memo.get(agg_key)
            if agg is None:
                agg = memo[agg_key] = self._read_cost(o, ents, vectors)
            dur, e, total, xb_keys = agg
            durs.append(float(dur))
            totals.append(float(total))
            for k2, val in e.items():
                energy.setdefault(k2, []).append(val)
            j = pos.get(id(xb_keys))
            if j is None:
                j = pos[id(xb_keys)] = len(sets)
                sets.append(xb_keys)
            which.append(j)
            if runs and runs[-1][0] is xb_keys:
                runs[-1][2] = n + 1
            else:
                runs.append([xb_keys, n, n + 1])
        return (durs, totals, [True] * len(durs), [o.opcode for o in body], list(energy.items()), sets, which,
                [tuple(r) for r in runs])

    def _read_cost(self, o: Op, ents: list, vectors: int) -> tuple:
        """Duration, energy by component, total energy and crossbar keys of a read."""
        shapes = tuple((rows.size, cols.size) for _, rows, cols, _ in ents)
        hit = self._read_shape_cost(shapes, vectors, o.opcode == "CIM.read_row")
        keys = tuple(f"xb:{xb}" for xb, _, _, _ in ents)
        return (*hit, self._xb_key_sets.setdefault(keys, keys))  # one tuple per crossbar set (cached by id)

    def _read_shape_cost(self, shapes: tuple, vectors: int, row: bool) -> tuple:
        """Duration, energy by component and total energy of reading tiles of ``shapes`` ((rows, columns)
        activated, in order) for ``vectors`` vectors (``row``: one row group each, ``CIM.read_row``)."""
        ra = self.xhw.crossbar.rows_active
        sig = (shapes, vectors, row)
        hit = self._shape_memo.get(sig)
        if hit is None:  # crossbar sets of the same tile shapes cost the same (summed in the same order)
            durs, energy = [], defaultdict(float)
            memo = self._shape_memo
            for r, c in shapes:
                groups = 1 if row else -(-r // ra)
                key = (r, c, vectors, groups)
                one = memo.get(key)
                if one is None:
                    one = memo[key] = cost.read(self.xhw, r, c, vectors, groups, self.wbits, self.ibits,
                                                self.signed_input)
                d, e = one
                durs.append(d)
                for k2, val in e.items():
                    energy[k2] += val
            hit = self._shape_memo[sig] = (max(durs, default=0.0), dict(energy), float(sum(energy.values())))
        return hit

    def _read_tag(self, o: Op) -> tuple[tuple, str]:
        """The resources a read occupies (one tuple shared by its reads) and the key of the input slice it reads (the scatter that sent it)."""
        blk = o.get("block")
        return self._read_names(o["vxb"], o["src"].name, None if blk is None else blk.start)

    def _read_names(self, vxb: int, src: str, block: int | None) -> tuple[tuple, str]:
        """:meth:`_read_tag` of a read of ``vxb`` (row block starting at ``block``, None: all) from ``src``."""
        suffix = f":{block}" if block is not None else ""
        return (self._read_resources([vxb], [block])[0],), f"{src}@{vxb}{suffix}"

    def _read_resources(self, vxbs: list, blocks: list) -> list[str]:
        """The resource a read of ``vxbs[i]`` (row block starting at ``blocks[i]``; None or -1: all) occupies:
        the virtual crossbar's (row groups of one crossbar are sequential: they share it)."""
        pre = _vxb_prefix(self.prog.name)
        return [f"{pre}{v}" if b is None or b < 0 else f"{pre}{v}:{b}" for v, b in zip(vxbs, blocks)]

    def _record_dmov(self, o: Op, ev: Events) -> None:
        hw = self.hw
        a = o._index
        v = a.get("vecs")
        if not isinstance(v, Range):
            v = _from0(self.M)
        nbytes = int(a.get("bytes", 0))
        sub = a.get("op")
        src = a["src"].name
        if sub == "scatter":
            cores, res, dur, e, key = self._scatter_static_of(o, a, src, nbytes)
            deps = self._deps(src, v, False)
            held = None
            if self._lmem is not None:  # a buffer in the receiving core's local memory (PIMCOMP's heap)
                buf, waits = self._lmem.alloc(cores[0], nbytes)
                deps = deps + waits  # bytes freed by earlier slices: after their reads (a full memory stalls)
                if buf is None:  # cannot be held: stays in the global buffer, streamed from there
                    d2, e2 = cost.load_store(hw, nbytes, False)
                    dur, e = max(dur, float(d2)), e + float(sum(e2.values()))
                    res = res + ("gbuf",)
                else:
                    held = (self._lmem.heaps[cores[0]], buf)
                    if self._lmem.record:  # what the scatter costs if the scheduled heap cannot hold it
                        d2, e2 = cost.load_store(hw, nbytes, False)
                        buf.spill = (max(dur, float(d2)), res + ("gbuf",), float(sum(e2.values())))
            self._energy["noc+buffer"] += e
            i = ev.add(dur, res, deps, e, False, "DMOV.scatter")
            if held is not None:
                held[1].writer = i
                self._lbuf[(key, v.start, v.stop)] = held
            self._ranges[key].setdefault((v.start, v.stop), []).append(i)  # _mark(key, v, i, True): a tensor
            return
        if sub == "writeback":  # live data out of memory-mode arrays (CMSwitch T^wb), after what it holds
            xbs = tuple(o["xbs"])
            offchip = o["level"] == "offchip"
            dur, energy = cost.writeback(hw, nbytes, len(xbs), offchip)
            self._energy["writeback"] += float(sum(energy.values()))  # its own line of the breakdown
            res = tuple(f"xb:{x}" for x in xbs) + (("gbuf", "offchip") if offchip else ("gbuf",))
            deps = [d for x in xbs for d in self._deps(f"xb:{x}", _from0(1), write=True)]
            i = ev.add(dur, res, deps + self._deps(src, _from0(self.M), False), float(sum(energy.values())),
                       False, "DMOV.writeback")
            for x in xbs:
                self._mark(f"xb:{x}", _from0(1), i, True)
            return
        if sub == "fetch":  # constant weights from off-chip memory into the global buffer
            dur, e = self._fetch_static(nbytes)
            self._energy["offchip"] += e
            i = ev.add(dur, ("offchip",), [], e, False, "DMOV.fetch")
            self._mark(src, _from0(self.M), i, True)
            return
        level = a.get("level")
        offchip = level == "offchip"  # the working set does not fit the global buffer
        if level == "xbmem":  # memory-mode arrays, all in parallel
            xbs = tuple(a["xbs"])
            dur, energy = cost.memory_access(hw, nbytes, len(xbs), write=sub == "store")
            res = tuple(f"xb:{x}" for x in xbs)
            e = float(sum(energy.values()))
            mem = [r for r in res if r.startswith("xb:")]
            mem_deps = [d for r in mem for d in self._deps(r, _from0(1), write=False)]
        else:
            dur, energy, e, res = self._load_store_static(nbytes, offchip)
            mem = mem_deps = ()
        acc = self._energy
        for k2, val in energy.items():
            acc[k2] += val
        f = a.get("frac", (0.0, 1.0))
        if sub == "load":
            i = ev.add(dur, res, mem_deps, e, False, "DMOV.load")  # (an empty tuple stored like an empty list)
            for r in mem:
                self._mark(r, _from0(1), i, False)
            ev.inputs.append((i, float(f[0]), float(f[1])))
            self._ranges[src].setdefault((v.start, v.stop), []).append(i)  # _mark(src, v, i, True): a tensor
        else:  # store
            i = ev.add(dur, res, self._deps(src, v, False) + list(mem_deps), e, False, "DMOV.store")
            if a.get("ring") and f[1] > f[0]:  # the share of the output the line buffer holds
                ev.ring = float(a["ring"]) * (float(f[1]) - float(f[0])) / nbytes
            held = self._lbuf.get(("out", v.start, v.stop)) if self._lmem is not None else None
            if held is not None:  # the output pixels it sends leave the core's local memory
                held[0].read(held[1], i)
            for r in mem:
                self._mark(r, _from0(1), i, False)
            ev.outputs.append((i, float(f[0]), float(f[1])))

    def _scatter_static_of(self, o: Op, a: dict, src: str, nbytes: int) -> tuple:
        """What a scatter costs and occupies, which depends only on the crossbars it feeds, its input and its
        bytes: the receiving cores, the link, duration, energy and the key of the slice it sends."""
        blk = a.get("block")
        skey = (src, a.get("vxb"), None if blk is None else blk.start, nbytes)
        hit = self._scatter_static.get(skey)
        if hit is None:
            if "vxb" in a:
                cores, res = self._scatter_cores(self._entries(o, True))
            else:
                cores, res = [0], ("link:0",)
            hit = self._scatter_cost(nbytes)
            # the slice it sends is the one the reads of those crossbars take (one naming rule: _read_names)
            key = self._read_names(a["vxb"], src, None if blk is None else blk.start)[1]
            hit = self._scatter_static[skey] = (cores, res, *hit, key)
        return hit

    def _scatter_cost(self, nbytes: int) -> tuple:
        """Duration and energy of a scatter of ``nbytes`` (a pure function of the bytes)."""
        hit = self._dmov_cost.get(("scatter", nbytes))
        if hit is None:
            hit = self._dmov_cost[("scatter", nbytes)] = cost.scatter(self.hw, nbytes)
        return hit

    def _scatter_cores(self, ents: list) -> tuple:
        """The cores receiving a scatter to the crossbars ``ents`` (an :meth:`_entries` list) and the link it
        occupies (memoised per list)."""
        hit = self._cores.get(id(ents))
        if hit is None:
            cores = sorted({self._core_of(xb) for xb, _, _, _ in ents})
            hit = self._cores[id(ents)] = (cores, tuple(self._links(cores[:1])))
        return hit

    def _core_of(self, xb):
        """The core of crossbar ``xb`` (an int or an array of them)."""
        return xb // self.hw.core.crossbars

    @staticmethod
    def _links(cores: list) -> list[str]:
        """The links to ``cores`` (a scatter to a core's crossbars occupies its link)."""
        return [f"link:{c}" for c in cores]

    def _fetch_static(self, nbytes: int) -> tuple:
        """Duration and energy of fetching ``nbytes`` of weights from off-chip memory."""
        hit = self._dmov_cost.get(("fetch", nbytes))
        if hit is None:
            hit = self._dmov_cost[("fetch", nbytes)] = cost.fetch(self.hw, nbytes)
        return hit

    def _load_store_static(self, nbytes: int, offchip: bool) -> tuple:
        """Duration, energy by component, total energy and resources of a load or store of ``nbytes``."""
        hit = self._dmov_cost.get(("load_store", nbytes, offchip))
        if hit is None:  # a pure function of the bytes and the level
            dur, energy = cost.load_store(self.hw, nbytes, offchip)
            hit = self._dmov_cost[("load_store", nbytes, offchip)] = (
                dur, energy, float(sum(energy.values())), ("gbuf", "offchip") if offchip else ("gbuf",))
        return hit

    def _alu_static(self, o: Op, a: dict) -> tuple:
        """Duration, energy and resources of a DCOM (a pure function of its sub-operation, elements, core level,
        requantisation and where it is charged: every chunk of a layer costs the same)."""
        core = a.get("core")
        ckey = (a.get("op"), a.get("elements", 0), core is not None, a.get("requant"), a.get("at"))
        hit = self._alu_cost.get(ckey)
        if hit is None:
            sub, elements = ckey[0], int(ckey[1])
            if sub == "im2col" or ckey[4] == "producer":
                # im2col is the scatter's gather pattern (costed there); a quantisation done by the producing
                # cores was charged with their post-processing (DCOM.dequantize requant=)
                elements = 0
            dur, e = cost.alu(self.hw, sub, elements, core_level=core is not None)
            if ckey[3]:  # quantising the output for the consuming regions, on the same core ALU
                d2, e2 = cost.alu(self.hw, "quantize", int(ckey[3]), core_level=core is not None)
                dur, e = dur + d2, e + e2
            hit = self._alu_cost[ckey] = (dur, e)
        dur, e = hit
        if not dur:
            return dur, e, ()
        return dur, e, self._alu_resources(core)

    def _alu_resources(self, core: int | None) -> tuple:
        """The resources of a DCOM on ``core`` (None: the chip's ALU)."""
        res = self._alu_res.get(core)
        if res is None:
            res = self._alu_res[core] = (f"alu:{core}",) if core is not None else ("chipalu",)
        return res

    def _record_dcom(self, o: Op, ev: Events) -> None:
        a = o._index
        v = a.get("vecs")
        if not isinstance(v, Range):
            v = _from0(self.M)
        sub = a.get("op")
        dst = a.get("dst")
        core = a.get("core")
        dur, e, res = self._alu_static(o, a)
        self._energy["alu"] += e
        deps = []
        rng_in = v if sub not in ("layout", "colsum") else Range(0, 1 << 60)
        dname = None if dst is None else dst.name
        for _, val in o.args:
            if isinstance(val, Ref) and (val.name != dname or sub == "reduce"):
                deps += self._deps(val.name, rng_in, False)
        held = None
        if self._lmem is not None and sub == "dequantize" and core is not None:  # output pixels, until sent
            n_bytes = int(self.prog.attr("N", 1)) * -(-self.hw.activation_bits(self.ibits) // 8)  # one output vector
            buf, waits = self._lmem.alloc(int(core), buffer_bytes(o, self._batch, n_bytes, self.M))
            deps += waits
            if buf is not None:
                held = (self._lmem.heaps[int(core)], buf)
        i = ev.add(dur, res, deps, e, False, o.kind)
        if held is not None:
            held[1].writer = i
            self._lbuf[("out", v.start, v.stop)] = held
        if dst is not None:
            whole = sub in ("layout", "colsum", "zeros", "reshape") and not a.get("vecs")
            if whole:
                v = Range(0, 1 << 60)
            self._ranges[dname].setdefault((v.start, v.stop), []).append(i)  # _mark(dst, v, i, True): a tensor

    def _record_bind(self, o: Op, ev: Events) -> None:
        return

    def _record_loopnest(self, o: Op, ev: Events) -> None:
        if self._hier is None:
            self._hier = loopnest.Hierarchy.of(self.hw)
        layer, m = loopnest.decode(o["layer"], o["spatial"], o["loops"], o["cuts"], o["double"], self.prog.name)
        try:
            res = simulate_loopnest(layer, self._hier, m)
        except ValueError as e:
            raise SimulationError(f"program '{self.prog.name}': {e}") from None
        e = {k: v for k, v in res.energy_pj.items() if k != "leakage"}  # leakage: over the region's latency
        for k, v in e.items():
            self._energy[k] += v
        self.loopnest_result = res
        i = ev.add(res.cycles * self.hw.cycle_ns, ("macros", "gbuf", "offchip"), [], float(sum(e.values())), True,
                   "CIM.loopnest")
        ev.inputs.append((i, 0.0, 1.0))
        ev.outputs.append((i, 0.0, 1.0))

    def _record_switch(self, o: Op, ev: Events) -> None:
        xbs = [int(x) for x in o["xbs"]]
        dur, e = cost.switch(self.hw, len(xbs), o["type"] == "TOM")
        keys = [f"xb:{x}" for x in xbs]
        deps = [d for k in keys for d in self._deps(k, _from0(1), write=True)]
        self._energy["switch"] += e
        i = ev.add(dur, tuple(keys), deps, e, False, "CM.switch")
        for k in keys:  # later writes and reads of these arrays wait for the switch
            self._mark(k, _from0(1), i, True)
        if o.get("keep"):  # the kept data was stored by the producing regions: all of it must be there
            ev.inputs.append((i, 0.0, 1.0))

    _RECORD = {
        "CIM.write_xb": _record_write,
        "CIM.read_xb": _record_read,
        "CIM.read_core": _record_read,
        "CIM.read_row": _record_read,
        "CIM.bind_vxb": _record_bind,
        "CIM.loopnest": _record_loopnest,
        "DMOV": _record_dmov,
        "DCOM": _record_dcom,
        "CM.switch": _record_switch,
    }

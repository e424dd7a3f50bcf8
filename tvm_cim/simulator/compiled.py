"""Compiled timing: a program section as arrays, its scoreboard kept and its operations placed in compiled code.

The Python recorder (:class:`~.engine.Chip`'s ``_record_*`` methods) walks the
operations, keeps the scoreboard of what each one waits for and appends a row
per operation to :class:`~.timeline.Events`, which the list scheduler
(:func:`~.timeline.schedule_graph`) then places.  In a timing-only run that
per-operation Python is the whole cost of the simulation.  Here a section is
first assembled (:func:`assemble`) into a :class:`SectionTable`: what each
operation costs and occupies (from the chip's own cost look-ups, the ones the
recorder uses), the tensor ranges it reads and writes, the crossbars it reads
or programs.  :func:`_record_place` (numba) then keeps the same scoreboard and
places each operation as soon as it is recorded:

* a read of tensor ``key`` over ``[a, b)`` waits for the writes of exactly that
  range and of the whole tensor or, when no write had that range, for every
  write overlapping it (``Chip._deps``);
* a crossbar write waits for the crossbar's last write and for the reads of it
  since; a read waits for the last writes of its crossbars;
* an operation starts at the latest finish of what it waits for (at least the
  floor, or its input's ready time) and at the earliest gap every resource it
  occupies has for it: the same search and the same floating-point operations
  as :func:`~.timeline._place` and :func:`~.timeline._book_one`, so the times are
  identical (tests compare the two on every preset).

Placing a region on a network's timeline is the same execution of its table
with the network's resources and its inputs' ready times
(:func:`schedule_tables`), so no dependency lists are kept.  What needs them
(the critical path, batches, shared local memories, a power cap, line
buffers) reads :class:`TableEvents`' rows, which the Python recorder builds on
first use.  Sections with operations this module does not cover (memory-mode
arrays, switches, write-backs, in-place writes, line buffers, loop nests,
local memories) are recorded by the Python recorder as before.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
from numba import types
from numba.typed import Dict

from ..program import OPS, Ref

_WHOLE = (0, 1 << 60)  # a write of the whole tensor (Chip._FULL)
_KEY3 = types.UniTuple(types.int64, 3)
_SUPPORTED_DMOV = frozenset(("load", "store", "scatter", "fetch"))


@dataclass
class SectionTable:
    """One program section's operations as arrays (every operation but ``CIM.bind_vxb`` is a row).

    Attributes
    ----------
    kind : ndarray of int32
        Index into ``kinds`` (the meta-operator kind) per row.
    dur, energy : ndarray of float64
        Duration (ns) and total energy (pJ) per row.
    analog : ndarray of bool
        Crossbar reads (their DACs and ADCs count towards peak computing power).
    res_ptr, res_idx : ndarray of int64
        Resources each row occupies (CSR; indices into ``res_names``).
    lk_ptr, lk : ndarray of int64
        Tensor ranges each row reads, ``(key, start, stop)`` rows (CSR).
    mk_ptr, mk : ndarray of int64
        Tensor ranges each row writes.
    xset, set_ptr, set_xb : ndarray of int64
        The crossbar set a read activates (-1: none) and the sets (CSR of crossbar ids).
    xw : ndarray of int64
        The crossbar a row programs (-1: none).
    comp_ptr, comp_id, comp_val
        Energy per component per row (CSR; indices into ``comp_names``), summed in row order.
    inputs, outputs : list of (row, f0, f1)
        Region-input loads and region-output stores, as :class:`~.timeline.Events` keeps them.
    counts : dict
        Meta-operators executed per kind, bindings included (in program order).
    writes : list of int
        Crossbars programmed, in order.
    grouped : int
        Reads in parallel blocks the Python recorder records together (``Chip.grouped_reads``).
    """

    kinds: list
    kind: np.ndarray
    dur: np.ndarray
    energy: np.ndarray
    analog: np.ndarray
    res_names: list
    res_ptr: np.ndarray
    res_idx: np.ndarray
    lk_ptr: np.ndarray
    lk: np.ndarray
    mk_ptr: np.ndarray
    mk: np.ndarray
    xset: np.ndarray
    set_ptr: np.ndarray
    set_xb: np.ndarray
    xw: np.ndarray
    comp_names: list
    comp_ptr: np.ndarray
    comp_id: np.ndarray
    comp_val: np.ndarray
    inputs: list
    outputs: list
    counts: dict
    writes: list
    grouped: int
    n_keys: int
    n_xb: int

    def __len__(self) -> int:
        return len(self.dur)

    def energy_by_component(self) -> dict:
        """Energy per component (pJ), each summed in row order (the recorder's sums), in first-use order."""
        acc = _sum_components(self.comp_ptr, self.comp_id, self.comp_val, len(self.comp_names))
        return {k: float(acc[i]) for i, k in enumerate(self.comp_names)}


class TableEvents:
    """A section's rows as a :class:`SectionTable`; the :class:`~.timeline.Events` rows on first use.

    :func:`~.timeline.schedule_graph` places regions of tables by executing
    them (:func:`schedule_tables`); every other reader of ``dur``, ``res``,
    ``deps``, ``energy``, ``analog`` or ``kind`` gets the rows the Python
    recorder gives the section (``rows``: a function building them), which
    tests check equal to the table's schedule.
    """

    _ROWS = frozenset(("dur", "res", "deps", "energy", "analog", "kind", "_last"))

    def __init__(self, table: SectionTable, rows, rename: tuple | None = None):
        self.table = table
        self._rows = rows
        self._rename = rename  # (old prefix, new prefix) of resource names (a twin's run, Chip._take_run)
        self.inputs = table.inputs
        self.outputs = table.outputs
        self.ring = 0.0
        self.alone = None
        self._events = None

    def __len__(self) -> int:
        return len(self.table)

    @property
    def res_names(self) -> list:
        """The table's resource names (renamed for a twin)."""
        if self._rename is None:
            return self.table.res_names
        old, new = self._rename
        return [new + n[len(old):] if n.startswith(old) else n for n in self.table.res_names]

    def renamed(self, old: str, new: str, rows) -> "TableEvents":
        """The same rows with resource names starting with ``old`` starting with ``new`` instead (``rows``: the
        Python recorder's rows of the program they are now)."""
        if self._rename is not None:
            old = self._rename[0]
        return TableEvents(self.table, rows, (old, new))

    def events(self):
        """The rows as :class:`~.timeline.Events` (built by the Python recorder once)."""
        if self._events is None:
            self._events = self._rows()
        return self._events

    def __getattr__(self, name):
        if name in TableEvents._ROWS:
            return getattr(self.events(), name)
        raise AttributeError(name)


# explicit signatures: compiled (or loaded from numba's cache) when the module is imported, not at the first call
@numba.njit("f8[::1](i8[::1], i8[::1], f8[::1], i8)", cache=True)
def _sum_components(ptr, cid, val, n):
    acc = np.zeros(n)
    for i in range(ptr.shape[0] - 1):
        for q in range(ptr[i], ptr[i + 1]):
            acc[cid[q]] += val[q]
    return acc


@numba.njit("f8(f8[::1], f8[::1], i8, i8, f8, f8)", cache=True)
def _earliest(bs, be, o, n, t, dur):
    """Earliest start >= t of a gap of length ``dur`` among the ``n`` sorted disjoint busy intervals at
    ``o`` of the pools ``bs``, ``be``."""
    lo, hi = o, o + n
    while lo < hi:  # the first interval ending after t
        mid = (lo + hi) >> 1
        if be[mid] <= t:
            lo = mid + 1
        else:
            hi = mid
    i = lo
    while i < o + n:
        if bs[i] >= t + dur:
            return t
        if be[i] > t:
            t = be[i]
        i += 1
    return t


@numba.njit("Tuple((f8[:, ::1], i8))(f8[:, ::1], i8[::1], i8[::1], i8[::1], i8, i8, f8, f8)", cache=True)
def _reserve(P, off, cnt, cap, top, r, t, end):
    """Mark ``[t, end)`` busy on resource ``r`` (touching intervals merged).  ``P``: the pools (starts, ends) in
    a 2-row array, each resource's intervals a block of it (moved to the top, the pool doubled, when full).
    Returns the pools and their top."""
    nn = cnt[r]
    o = off[r]
    if nn > 0:
        if t >= P[1, o + nn - 1]:
            if P[1, o + nn - 1] == t:
                P[1, o + nn - 1] = end
                return P, top
            pos = o + nn
        else:
            lo, hi = o, o + nn
            while lo < hi:
                mid = (lo + hi) >> 1
                if P[0, mid] < t:
                    lo = mid + 1
                else:
                    hi = mid
            pos = lo
            jp = pos > o and P[1, pos - 1] == t
            jn = pos < o + nn and P[0, pos] == end
            if jp and jn:
                P[1, pos - 1] = P[1, pos]
                for z in range(pos, o + nn - 1):
                    P[0, z] = P[0, z + 1]
                    P[1, z] = P[1, z + 1]
                cnt[r] = nn - 1
                return P, top
            if jp:
                P[1, pos - 1] = end
                return P, top
            if jn:
                P[0, pos] = t
                return P, top
    else:
        pos = o
    if nn == cap[r]:  # full (or new): a block twice the size at the top of the pool
        size = max(16, 2 * nn)
        if top + size > P.shape[1]:
            Q = np.empty((2, max(2 * P.shape[1], top + size)))
            Q[:, :top] = P[:, :top]
            P = Q
        P[:, top:top + nn] = P[:, o:o + nn]
        pos = pos - o + top
        o = top
        off[r] = top
        cap[r] = size
        top += size
    for z in range(o + nn, pos, -1):
        P[0, z] = P[0, z - 1]
        P[1, z] = P[1, z - 1]
    P[0, pos] = t
    P[1, pos] = end
    cnt[r] = nn + 1
    return P, top


@numba.njit("Tuple((f8[::1], f8[::1], f8[:, ::1], i8))(f8[:, ::1], i8[::1], i8[::1], i8[::1], i8, f8[::1], "
            "i8[::1], i8[::1], f8[::1], i8[::1], i8[:, ::1], i8[::1], i8[:, ::1], i8[::1], i8[::1], i8[::1], i8[::1], "
            "i8, i8)", cache=True)
def _record_place(P, off, cnt, cap, top, dur, res_ptr, res_idx, ready, lk_ptr, lk, mk_ptr, mk, xset, set_ptr,
                  set_xb, xw, n_xb, n_keys):
    """Keep a section's scoreboard and place its rows in order (``ready``: each row's earliest start).

    ``P``, ``off``, ``cnt``, ``cap``, ``top``: the busy intervals of every resource (global ids in ``res_idx``;
    :func:`_reserve`).  Returns the start and finish of every row, and the pools and their top."""
    n = dur.shape[0]
    st = np.empty(n)
    fin = np.empty(n)
    emap = Dict.empty(key_type=_KEY3, value_type=types.int64)  # (key, a, b) -> scoreboard entry
    m = 64
    e_a = np.empty(m, np.int64)
    e_b = np.empty(m, np.int64)
    e_max = np.empty(m)  # the latest finish of the writes of the entry so far
    e_next = np.empty(m, np.int64)  # the key's previous entry
    ne = 0
    head = np.full(n_keys, -1, np.int64)
    whole = np.full(n_keys, -1, np.int64)
    last_w = np.full(n_xb, -np.inf)  # finish of each crossbar's last write
    rd_max = np.full(n_xb, -np.inf)  # the latest finish of its reads since
    for i in range(n):
        t = -np.inf
        for q in range(lk_ptr[i], lk_ptr[i + 1]):
            key, a, b = lk[q, 0], lk[q, 1], lk[q, 2]
            k3 = (key, a, b)
            if k3 in emap:
                ex = emap[k3]
                if e_max[ex] > t:
                    t = e_max[ex]
                f = whole[key]
                if f >= 0 and e_max[f] > t:
                    t = e_max[f]
            else:
                j = head[key]
                while j >= 0:
                    if e_a[j] < b and e_b[j] > a and e_max[j] > t:
                        t = e_max[j]
                    j = e_next[j]
        s = xset[i]
        if s >= 0:
            for q in range(set_ptr[s], set_ptr[s + 1]):
                x = set_xb[q]
                if last_w[x] > t:
                    t = last_w[x]
        w = xw[i]
        if w >= 0:
            if last_w[w] > t:
                t = last_w[w]
            if rd_max[w] > t:
                t = rd_max[w]
        if ready[i] > t:
            t = ready[i]
        d = dur[i]
        if d > 0:
            r0, r1 = res_ptr[i], res_ptr[i + 1]
            while True:  # every resource free for d (the fixed point of their earliest gaps)
                t2 = t
                for q in range(r0, r1):
                    r = res_idx[q]
                    t2 = _earliest(P[0], P[1], off[r], cnt[r], t2, d)
                if t2 == t:
                    break
                t = t2
            for q in range(r0, r1):
                P, top = _reserve(P, off, cnt, cap, top, res_idx[q], t, t + d)
        st[i] = t
        f = t + d
        fin[i] = f
        for q in range(mk_ptr[i], mk_ptr[i + 1]):
            key, a, b = mk[q, 0], mk[q, 1], mk[q, 2]
            k3 = (key, a, b)
            if k3 in emap:
                ex = emap[k3]
                if f > e_max[ex]:
                    e_max[ex] = f
            else:
                if ne == m:
                    m *= 2
                    na = np.empty(m, np.int64)
                    na[:ne] = e_a[:ne]
                    e_a = na
                    nb = np.empty(m, np.int64)
                    nb[:ne] = e_b[:ne]
                    e_b = nb
                    nm = np.empty(m)
                    nm[:ne] = e_max[:ne]
                    e_max = nm
                    nx = np.empty(m, np.int64)
                    nx[:ne] = e_next[:ne]
                    e_next = nx
                e_a[ne] = a
                e_b[ne] = b
                e_max[ne] = f
                e_next[ne] = head[key]
                head[key] = ne
                emap[k3] = ne
                if a == 0 and b == 1 << 60:
                    whole[key] = ne
                ne += 1
        if s >= 0:
            for q in range(set_ptr[s], set_ptr[s + 1]):
                x = set_xb[q]
                if f > rd_max[x]:
                    rd_max[x] = f
        if w >= 0:
            last_w[w] = f
            rd_max[w] = -np.inf
    return st, fin, P, top


class Resources:
    """Busy intervals of the resources of one timeline, by name (what :func:`_record_place` books on)."""

    def __init__(self):
        self.ids: dict = {}
        self.P = np.empty((2, 1024))
        self.top = 0
        self.off = np.zeros(0, np.int64)
        self.cnt = np.zeros(0, np.int64)
        self.cap = np.zeros(0, np.int64)

    def index(self, names: list) -> np.ndarray:
        """Global ids of ``names`` (new resources added, free)."""
        ids = self.ids
        n0 = len(ids)
        out = np.fromiter((ids.setdefault(nm, len(ids)) for nm in names), np.int64, len(names))
        grow = len(ids) - n0
        if grow:
            self.off = np.concatenate([self.off, np.zeros(grow, np.int64)])
            self.cnt = np.concatenate([self.cnt, np.zeros(grow, np.int64)])
            self.cap = np.concatenate([self.cap, np.zeros(grow, np.int64)])
        return out


def place(table: SectionTable, res_names: list, resources: Resources, ready: np.ndarray) -> tuple:
    """Record and place a section's rows on ``resources`` (``ready``: each row's earliest start).

    Returns
    -------
    start, finish : ndarray
    """
    gids = resources.index(res_names)
    st, fin, resources.P, resources.top = _record_place(
        resources.P, resources.off, resources.cnt, resources.cap, resources.top, table.dur, table.res_ptr,
        gids[table.res_idx], ready, table.lk_ptr, table.lk, table.mk_ptr, table.mk, table.xset, table.set_ptr,
        table.set_xb, table.xw, table.n_xb, table.n_keys)
    return st, fin


def _gather(ptr: np.ndarray, data: np.ndarray, u: np.ndarray) -> tuple:
    """Rows ``u`` of a ragged array (``ptr``, ``data``): their CSR pointers and data."""
    cnt = ptr[u + 1] - ptr[u]
    out = np.zeros(len(u) + 1, np.int64)
    np.cumsum(cnt, out=out[1:])
    idx = np.repeat(ptr[u] - out[:-1], cnt) + np.arange(out[-1], dtype=np.int64)
    return out, data[idx]


def _unique_rows(cols: list) -> tuple:
    """The distinct rows of integer columns: the index of each one's first occurrence and each row's one."""
    key = np.zeros(len(cols[0]), np.int64)
    span = 1
    for c in cols:
        c = np.asarray(c, np.int64)
        lo = int(c.min(initial=0))
        width = int(c.max(initial=0)) - lo + 1
        if span * width >= 1 << 62:  # compress the key so far to the ids of its distinct values
            _, key = np.unique(key, return_inverse=True)
            key = key.reshape(-1)
            span = int(key.max(initial=0)) + 1
        key = key * width + (c - lo)
        span *= width
    _, first, inv = np.unique(key, return_index=True, return_inverse=True)
    return first, inv.reshape(-1)


def _ragged(rows: list, width: int = 0, dtype=np.int64) -> tuple:
    """CSR of a list of lists (of ``width``-tuples when ``width``)."""
    ptr = np.zeros(len(rows) + 1, np.int64)
    np.cumsum([len(r) for r in rows], out=ptr[1:])
    flat = [x for r in rows for x in r]
    data = np.array(flat, dtype) if flat else np.zeros((0, width) if width else 0, dtype)
    return ptr, data


_VEC = 0  # a range of the operation's vectors (its ``vecs``)
_FIXED = 1  # a fixed range
_PAIR = -1  # a read's resource or input-slice key: its virtual crossbar's (per row)
_XB_RES, _XB_PORT = -2, -3  # a write's resources: its crossbar's (per row)
_READ_OPS = frozenset(("CIM.read_xb", "CIM.read_core", "CIM.read_row"))


def _class_row(chip, o, size: int, key, shapes: tuple | None):
    """What every operation of one class (a template with the same cost-relevant operands) costs, occupies,
    reads and writes, from the chip's cost look-ups (the Python recorder's); None if not covered here.
    ``shapes``: a read's tiles, (rows, columns) activated."""
    opc = o.opcode
    a = o._index
    M = chip.M
    look, mark, xs, io = [], [], -1, 0
    if opc == "DMOV":
        sub = a.get("op")
        if sub not in _SUPPORTED_DMOV or a.get("level") == "xbmem" or a.get("ring"):
            return None
        src = a["src"].name
        nbytes = int(a.get("bytes", 0))
        if sub == "scatter":
            d, e = chip._scatter_cost(nbytes)
            r = (_PAIR,)  # the link to its crossbars' (row block's) cores (per row)
            look.append((key(src), _VEC, 0, 0))
            mark.append((_PAIR, _VEC, 0, 0))  # the slice it sends: its virtual crossbar's (per row)
            ce = [("noc+buffer", e)]
        elif sub == "fetch":
            d, e = chip._fetch_static(nbytes)
            r = ("offchip",)
            mark.append((key(src), _FIXED, 0, M))
            ce = [("offchip", e)]
        else:
            d, en, e, r = chip._load_store_static(nbytes, a.get("level") == "offchip")
            if sub == "load":
                mark.append((key(src), _VEC, 0, 0))
                io = 1
            else:
                look.append((key(src), _VEC, 0, 0))
                io = 2
            ce = list(en.items())
        an = False
    elif opc == "DCOM":
        sub = a.get("op")
        dst = a.get("dst")
        d, e, r = chip._alu_static(o, a)
        if r and type(a.get("core")) is int:
            r = (_PAIR,)  # its core's ALU (per row)
        whole_in = sub in ("layout", "colsum")
        dname = None if dst is None else dst.name
        for _, val in o.args:
            if isinstance(val, Ref) and (val.name != dname or sub == "reduce"):
                look.append((key(val.name), _FIXED, *_WHOLE) if whole_in else (key(val.name), _VEC, 0, 0))
        if dst is not None:
            whole = sub in ("layout", "colsum", "zeros", "reshape") and not a.get("vecs")
            mark.append((key(dname), _FIXED, *_WHOLE) if whole else (key(dname), _VEC, 0, 0))
        ce = [("alu", e)]
        an = False
    elif opc in _READ_OPS:
        d, en, e = chip._read_shape_cost(shapes, size * chip._batch, opc == "CIM.read_row")
        r = None  # its virtual crossbar's resource (per row)
        look.append((_PAIR, _VEC, 0, 0))
        look.append((key(a["src"].name), _VEC, 0, 0))
        mark.append((key(a["dst"].name), _VEC, 0, 0))
        xs = _PAIR  # its crossbars (of its row block; per row)
        ce = list(en.items())
        an = True
    elif opc == "CIM.write_xb":
        if a.get("inplace"):
            return None
        d, e, _, r = chip._write_static(a)
        r = (_XB_RES, _XB_PORT)[:len(r)]  # its crossbar's (per row)
        look.append((key(a["src"].name), _FIXED, 0, M))
        ce = [("write", e)]
        an = False
    else:
        return None
    return float(d), float(e), an, r, look, mark, xs, ce, io


def assemble(chip, templates: tuple, sec) -> SectionTable | None:
    """A section of the program ``chip`` is running (after :meth:`Chip._run` set up its mapping), encoded
    (:func:`tvm_cim.program.encode.encode`), as a :class:`SectionTable`; None when it has an operation this
    module does not cover.

    The operations are grouped into classes that cost the same: a template with the same tile size (writes),
    the same tile shapes, row group and vector count (reads), tile shapes (scatters), core or chip ALU
    (DCOMs).  The chip's cost look-ups run once per class.  What varies within a class is found over arrays:
    a write's crossbar and write port (once per crossbar), a read's virtual crossbar (its resource), the
    input slice a read takes and its scatter sends (one key per input, virtual crossbar and row block), a DCOM's
    core's ALU, and a read's crossbars and a scatter's link, once per binding template (every virtual crossbar
    bound alike), row block and row group, from the bindings' entries as flat arrays.

    Parameters
    ----------
    chip : tvm_cim.simulator.engine.Chip
    templates : tuple of Op
    sec : tvm_cim.program.encode.EncodedSection

    Returns
    -------
    SectionTable or None
    """
    M = chip.M
    tid = sec.tid
    n_all = len(tid)
    has = sec.v0 >= 0
    v0 = np.where(has, sec.v0, 0)
    v1 = np.where(has, sec.v1, M)
    nt = len(templates)
    cat = np.zeros(nt + 1, np.int64)  # 0 other, 1 write, 2 read, 3 read of a row block, 4 scatter, 5 DCOM, 6 bind
    for t in np.unique(tid).tolist():
        o = templates[t]
        if o.kind not in OPS:  # the Python recorder says what is wrong with it
            return None
        opc = o.opcode
        cat[t] = (1 if opc == "CIM.write_xb" else (3 if o.get("block") is not None else 2) if opc in _READ_OPS
                  else 4 if o.kind == "DMOV.scatter" else 5 if opc == "DCOM" else 6 if opc == "CIM.bind_vxb" else 0)
    c = cat[tid]
    vxb = sec.vxb
    if np.any(sec.xb[c == 1] < 0) or np.any(vxb[(c >= 2) & (c <= 4)] < 0):  # not in the encoded columns
        return None
    sig = vxb.copy()  # reads and scatters: the crossbars and tile shapes of the virtual crossbar
    plain = np.flatnonzero((c >= 2) & (c <= 4))  # reads, reads of a row block, scatters
    if len(plain):
        # the virtual crossbar as far as the cost matters: its tile shapes (of a row block: the ranges of its
        # rows, which tiles start each block); the crossbars come per row
        bt = chip.vxbs.templates(vxb[plain])  # each one's binding template
        if len(bt) and bt.min() < 0:
            return None
        ubt, bi = np.unique(bt, return_inverse=True)  # the binding templates, each one's index among them
        bi = bi.reshape(-1)
        # their entries as flat arrays, in binding order: crossbar, first and last row, columns
        e_xb, e_r0, e_r1, e_nc, e_n = [], [], [], [], []
        for t in ubt.tolist():
            a = chip.bind_templates[t]._index
            rs = a["rows"]
            e_xb += a["xbs"]
            e_r0 += [r.start for r in rs]
            e_r1 += [r.stop for r in rs]
            e_nc += [q.stop - q.start for q in a["cols"]]
            e_n.append(len(rs))
        e_ptr = np.zeros(len(ubt) + 1, np.int64)
        np.cumsum(e_n, out=e_ptr[1:])
        e_xb, e_r0, e_r1, e_nc = (np.array(x, np.int64) for x in (e_xb, e_r0, e_r1, e_nc))
        e_rs = e_r1 - e_r0
        shapes: dict = {}
        of_t = np.empty(len(ubt), np.int64)
        of_b = np.empty(len(ubt), np.int64)
        for i, (p0, p1) in enumerate(zip(e_ptr[:-1].tolist(), e_ptr[1:].tolist())):
            nc = e_nc[p0:p1].tobytes()
            of_t[i] = shapes.setdefault((e_rs[p0:p1].tobytes(), nc), len(shapes))
            of_b[i] = shapes.setdefault(("block", e_r0[p0:p1].tobytes(), e_r1[p0:p1].tobytes(), nc), len(shapes))
        blk_of = np.full(nt + 1, -1, np.int64)  # each template's row block (-1: none)
        for t in np.unique(tid[plain]).tolist():
            blk = templates[t].get("block")
            if blk is not None:
                blk_of[t] = blk.start
        blocked = blk_of[tid[plain]] >= 0
        sig[plain] = np.where(blocked, of_b[bi], of_t[bi])
        row_group = np.array([templates[t].opcode == "CIM.read_row" for t in range(nt)] + [False])
        t_rd, v_rd, b_rd = tid[plain], vxb[plain], blk_of[tid[plain]]
        g_rd = np.where(row_group[t_rd], sec.group[plain], -1)  # a row group's read: its group
        # a read's tiles, a scatter's crossbars: the same for every virtual crossbar of one binding template,
        # found for each (binding template, row block, row group, read or scatter) over its entries at once
        sc_rd = c[plain] == 4
        bf, binv = _unique_rows([bi, b_rd, g_rd, sc_rd])
        binv = binv.reshape(-1)
        qb, qblk, qg, qsc = bi[bf], b_rd[bf], g_rd[bf], sc_rd[bf]
        # the entries of a row block: a run of the entries ordered by (binding template, first row), each
        # block's in binding order (a stable sort); of every row, the binding template's own run
        r_lo = int(e_r0.min(initial=0))
        width = int(e_r0.max(initial=0)) - r_lo + 1
        e_key = np.repeat(np.arange(len(ubt), dtype=np.int64), e_n) * width + (e_r0 - r_lo)
        by_block = np.argsort(e_key, kind="stable")
        e_key = e_key[by_block]
        q_key = qb * width + (qblk - r_lo)
        blk_q = qblk >= 0
        q0 = np.where(blk_q, np.searchsorted(e_key, q_key, "left"), e_ptr[qb])
        q1 = np.where(blk_q, np.searchsorted(e_key, q_key, "right"), e_ptr[qb + 1])
        cnt = q1 - q0
        at = np.zeros(len(bf) + 1, np.int64)
        np.cumsum(cnt, out=at[1:])
        rep = np.repeat(np.arange(len(bf), dtype=np.int64), cnt)
        idx = np.repeat(q0 - at[:-1], cnt) + np.arange(at[-1], dtype=np.int64)
        idx = np.where(blk_q[rep], by_block[idx], idx)
        act = chip._active_rows(e_rs[idx], qg[rep])  # of a row group: the rows in it
        keep = act > 0
        sel_q, sel_xb, sel_rows, sel_nc = rep[keep], e_xb[idx[keep]], act[keep], e_nc[idx[keep]]
        n_sel = np.bincount(sel_q, minlength=len(bf))
        lo = np.zeros(len(bf) + 1, np.int64)
        np.cumsum(n_sel, out=lo[1:])
        combo = np.full(n_all, -1, np.int64)
        combo[plain] = binv
    k1 = np.select([(c == 2) | (c == 3) | (c == 4), c == 5], [sig, sec.core >= 0], 0)
    k2 = np.select([c == 1, (c == 2) | (c == 3)], [sec.rows, sec.group], 0)
    k3 = np.select([c == 1, (c == 2) | (c == 3)], [sec.cols, v1 - v0], 0)
    first, inv = _unique_rows([tid, k1, k2, k3])
    order = np.argsort(first, kind="stable")  # classes in order of first use
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    inv = rank[inv]
    first = first[order]
    keys: dict = {}
    key = lambda name: keys.setdefault(name, len(keys))  # noqa: E731
    set_ptr, set_xb = np.zeros(1, np.int64), np.zeros(0, np.int64)  # the crossbar sets reads activate
    kinds: dict = {}
    names: dict = {}
    comps: dict = {}
    res_of: dict = {}
    ops = sec.ops
    rows = []
    empty = (0.0, 0.0, False, [], [], [], -1, [], 0)
    for j in first.tolist():
        o = ops[j]
        k = kinds.setdefault(o.kind, len(kinds))
        if c[j] == 6:
            rows.append((k, True, empty))
            continue
        shp = None
        if c[j] == 2 or c[j] == 3:  # a read: its tiles
            q0, q1 = lo[combo[j]], lo[combo[j] + 1]
            shp = tuple(zip(sel_rows[q0:q1].tolist(), sel_nc[q0:q1].tolist()))
        row = _class_row(chip, o, int(v1[j] - v0[j]), key, shp)
        if row is None:
            return None
        d, e, an, r, look, mark, xs, ce, io = row
        if r is None or r == (_PAIR,):
            rid = [_PAIR]
        elif r and type(r[0]) is int:
            rid = list(r)
        else:
            rid = res_of.get(id(r))
            if rid is None:
                rid = res_of[id(r)] = (r, [names.setdefault(x, len(names)) for x in r])
            rid = rid[1]
        rows.append((k, False, (d, e, an, rid, look, mark, xs,
                                [(comps.setdefault(c2, len(comps)), float(v)) for c2, v in ce], io)))
    kind_c = np.array([r[0] for r in rows], np.int64)
    bind_c = np.array([r[1] for r in rows], bool)
    kind_all = kind_c[inv]
    on = ~bind_c[inv]  # every operation but the bindings is a row
    kind_names = list(kinds)
    cnt = np.bincount(kind_all, minlength=len(kinds))
    ku, kf = np.unique(kind_all, return_index=True)
    counts = {kind_names[k]: int(cnt[k]) for k in ku[np.argsort(kf)].tolist()}
    real = [r[2] for r in rows]
    u = inv[on]
    rv0, rv1 = v0[on], v1[on]
    n = len(u)
    # a read's virtual crossbar: its resource and the key of the slice its scatter sent (once per one)
    pair_res = np.full(n_all, -1, np.int64)
    pair_key = np.full(n_all, -1, np.int64)
    pair_set = np.full(n_all, -1, np.int64)
    n_keys = len(keys)
    dc = np.flatnonzero((c == 5) & (sec.core >= 0))
    if len(dc):  # a DCOM's core's ALU
        uc, ic = np.unique(sec.core[dc], return_inverse=True)
        ids = [names.setdefault(chip._alu_resources(x)[0], len(names)) for x in uc.tolist()]
        pair_res[dc] = np.array(ids, np.int64)[ic.reshape(-1)]
    if len(plain):
        srcs: dict = {}
        src_of = np.full(nt + 1, -1, np.int64)
        for t in np.unique(t_rd).tolist():
            src_of[t] = srcs.setdefault(templates[t]["src"].name, len(srcs))
        # the input slice a read takes, the one its scatter sent: one key per (input, vxb, row block)
        # (Chip._read_names)
        sk, sinv = _unique_rows([src_of[t_rd], v_rd, b_rd])
        pair_key[plain] = n_keys + sinv
        n_keys += len(sk)
        # a read's resource: its virtual crossbar's (of its row block)
        rdg = np.flatnonzero(c[plain] != 4)
        if len(rdg):
            rf, rinv = _unique_rows([v_rd[rdg], b_rd[rdg]])
            ids = [names.setdefault(x, len(names))
                   for x in chip._read_resources(v_rd[rdg][rf].tolist(), b_rd[rdg][rf].tolist())]
            pair_res[plain[rdg]] = np.array(ids, np.int64)[rinv]
        got = np.empty(len(bf), np.int64)
        if qsc.any():  # a scatter: the link to its crossbars' cores (Chip._scatter_cores: the first core's)
            if np.any(n_sel[qsc] == 0):
                return None
            first_xb = np.zeros(len(bf), np.int64)
            ne = n_sel > 0
            first_xb[ne] = np.minimum.reduceat(sel_xb, lo[:-1][ne])  # (segments of the combinations with tiles)
            core = chip._core_of(first_xb[qsc])
            uc, ic = np.unique(core, return_inverse=True)
            ids = [names.setdefault(chip._links([x])[0], len(names)) for x in uc.tolist()]
            got[qsc] = np.array(ids, np.int64)[ic.reshape(-1)]
        # a read: its crossbars (a set per combination)
        got[~qsc] = np.arange(int((~qsc).sum()), dtype=np.int64)
        rd_sel = ~qsc[sel_q]
        set_ptr = np.zeros(int((~qsc).sum()) + 1, np.int64)
        np.cumsum(n_sel[~qsc], out=set_ptr[1:])
        set_xb = sel_xb[rd_sel]
        got = got[binv]
        pair_res[plain[sc_rd]] = got[sc_rd]
        pair_set[plain[~sc_rd]] = got[~sc_rd]
    pair_res, pair_key, pair_set = pair_res[on], pair_key[on], pair_set[on]
    res_ptr, res_idx = _gather(*_ragged([r[3] for r in real]), u)
    res_row = np.repeat(np.arange(n, dtype=np.int64), np.diff(res_ptr))
    ph = res_idx == _PAIR
    if ph.any():
        res_idx[ph] = pair_res[res_row[ph]]
    wr = res_idx <= _XB_RES
    if wr.any():  # a write's crossbar and write port (once per crossbar)
        xb_on = sec.xb[on]
        ux, ix = np.unique(xb_on[res_row[wr]], return_inverse=True)
        per = chip._write_resources(ux.tolist())
        first_id = np.array([names.setdefault(r[0], len(names)) for r in per], np.int64)
        port_id = np.array([names.setdefault(r[-1], len(names)) for r in per], np.int64)
        res_idx[wr] = np.where(res_idx[wr] == _XB_RES, first_id[ix.reshape(-1)], port_id[ix.reshape(-1)])

    def ranges(col: int) -> tuple:
        ptr, data = _gather(*_ragged([r[col] for r in real], 4), u)
        row = np.repeat(np.arange(n, dtype=np.int64), np.diff(ptr))
        vec = data[:, 1] == _VEC
        out = np.empty((len(data), 3), np.int64)
        out[:, 0] = np.where(data[:, 0] == _PAIR, pair_key[row], data[:, 0])
        out[:, 1] = np.where(vec, rv0[row], data[:, 2])
        out[:, 2] = np.where(vec, rv1[row], data[:, 3])
        return ptr, out

    lk_ptr, lk = ranges(4)
    mk_ptr, mk = ranges(5)
    xset = np.array([r[6] for r in real], np.int64)[u]
    xset = np.where(xset == _PAIR, pair_set, xset)
    xw = np.where(c[on] == 1, sec.xb[on], -1).astype(np.int64)
    cptr, cdata = _ragged([r[7] for r in real], 2, np.float64)
    comp_ptr, cd = _gather(cptr, cdata, u)
    io = np.array([r[8] for r in real], np.int64)[u]
    f0, f1 = sec.f0[on], sec.f1[on]
    ins, outs = np.flatnonzero(io == 1), np.flatnonzero(io == 2)
    return SectionTable(
        kinds=kind_names, kind=kind_c[u].astype(np.int32),
        dur=np.array([r[0] for r in real], np.float64)[u], energy=np.array([r[1] for r in real], np.float64)[u],
        analog=np.array([r[2] for r in real], bool)[u], res_names=list(names), res_ptr=res_ptr, res_idx=res_idx,
        lk_ptr=lk_ptr, lk=lk, mk_ptr=mk_ptr, mk=mk, xset=xset, set_ptr=set_ptr, set_xb=set_xb, xw=xw,
        comp_names=list(comps), comp_ptr=comp_ptr, comp_id=cd[:, 0].astype(np.int64), comp_val=np.ascontiguousarray(cd[:, 1]),
        inputs=list(zip(ins.tolist(), f0[ins].tolist(), f1[ins].tolist())),
        outputs=list(zip(outs.tolist(), f0[outs].tolist(), f1[outs].tolist())),
        counts=counts, writes=xw[xw >= 0].tolist(), grouped=sec.together if chip.together else 0,
        n_keys=max(n_keys, 1), n_xb=max(int(xw.max(initial=-1)), int(set_xb.max(initial=-1)), 0) + 1)

"""A program's encoded form: each operation as a template and a vector range.

A compiled program repeats a few operations thousands of times, chunk after
chunk, differing only in the vectors they work on (``vecs=``).  The encoding
keeps each distinct operation once with ``vecs`` taken out (a *template*:
the first operation of its kind, whose other operands every operation of
the template shares) and, per operation in execution order
(:func:`~tvm_cim.program.ir.walk` order, parallel blocks flattened), the
index of its template and its ``vecs`` range.  It is what the compiled
timing path of the simulator (:mod:`tvm_cim.simulator.compiled`) reads: the
simulator looks at each template once rather than at each operation.

The code generator encodes every program it emits (:func:`encode` caches the
result on the program); a program built or parsed elsewhere is encoded on
first use.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..common.runtime import gc_paused
from .ir import Op, Parallel, Program, Range, Ref

# operands kept per operation (columns) rather than in its template: they change from one chunk, pass or
# crossbar to the next while the rest of the operation stays the same
COLUMNS = ("vecs", "xb", "vxb", "group", "core", "frac")


@dataclass(frozen=True)
class EncodedSection:
    """One section (``setup`` or ``run``) of an encoded program, an entry per operation in execution order.

    Attributes
    ----------
    ops : tuple of Op
        The operations (parallel blocks flattened).
    tid : ndarray of int32
        The template of each: the operation without the operands of :data:`COLUMNS` (and, for
        ``CIM.write_xb``, without its ``rows`` and ``cols``).
    v0, v1 : ndarray of int32 (int64 if a value needs it)
        ``vecs`` (-1, -1 when absent).
    xb, vxb, group, core : ndarray of int32
        Those operands (-1 when absent).
    f0, f1 : ndarray of float64
        ``frac`` (0, 1 when absent).
    rows, cols : ndarray of int32
        ``CIM.write_xb``'s tile size (0 otherwise).
    together : int
        Operations in parallel blocks of two or more reads of one virtual crossbar, one input slice and one
        accumulator (:func:`reads_of_one_slice`).
    """

    ops: tuple
    tid: np.ndarray
    v0: np.ndarray
    v1: np.ndarray
    xb: np.ndarray
    vxb: np.ndarray
    group: np.ndarray
    core: np.ndarray
    f0: np.ndarray
    f1: np.ndarray
    rows: np.ndarray
    cols: np.ndarray
    together: int


@dataclass(frozen=True)
class Encoded:
    """A program's templates (one operation each: the first of the template) and its two sections."""

    templates: tuple[Op, ...]
    setup: EncodedSection
    run: EncodedSection


def _slice_key(o) -> tuple:
    vxb = src = dst = vecs = block = None
    for k, x in o.args:
        if k == "vxb":
            vxb = x
        elif k == "src":
            src = x
        elif k == "dst":
            dst = x
        elif k == "vecs":
            vecs = x
        elif k == "block":
            block = x
    return vxb, src, dst, vecs, block


def reads_of_one_slice(body) -> bool:
    """Whether a parallel block is two or more reads of one virtual crossbar (its row groups), one input slice
    and one accumulator (the simulator records those together)."""
    if len(body) < 2:
        return False
    o0 = body[0]
    if type(o0) is not Op or not o0.opcode.startswith("CIM.read"):
        return False
    opc = o0.opcode
    key = _slice_key(o0)
    if not isinstance(key[1], Ref) or not isinstance(key[2], Ref) or key[1].name == key[2].name:
        return False
    for o in body:
        if type(o) is not Op or o.opcode != opc or _slice_key(o) != key:
            return False
    return True


_INT_COLS = {"xb": 2, "vxb": 3, "group": 4, "core": 5}
_PLACE = {k: (k, None) for k in ("vecs", "frac", "xb", "vxb", "group", "core", "rows", "cols")}  # in a template


def _section(stmts, index: dict, templates: list) -> EncodedSection:
    ops, tid, cols, fracs = [], [], [], []
    together = 0
    place, ints = _PLACE, _INT_COLS

    def visit(body):
        nonlocal together
        for s in body:
            if type(s) is Parallel:
                if len(s.body) > 1 and reads_of_one_slice(s.body):
                    together += len(s.body)
                visit(s.body)
                continue
            ops.append(s)
            v = [-1, -1, -1, -1, -1, -1, 0, 0]  # v0 v1 xb vxb group core rows cols
            f = (0.0, 1.0)
            write = s.opcode == "CIM.write_xb"
            rest = []
            for p in s.args:
                k, x = p
                tx = type(x)
                if k == "vecs" and tx is Range:
                    v[0], v[1] = x.start, x.stop
                elif k == "frac" and tx is tuple and len(x) == 2:
                    f = (float(x[0]), float(x[1]))
                elif tx is int and k in ints:
                    v[ints[k]] = x
                elif write and tx is Range and (k == "rows" or k == "cols"):
                    v[6 if k == "rows" else 7] = x.stop - x.start
                else:
                    rest.append(p)
                    continue
                rest.append(place[k])
            key = (s.opcode, tuple(rest))
            t = index.get(key)
            if t is None:
                t = index[key] = len(templates)
                templates.append(s)
            tid.append(t)
            cols.append(v)
            fracs.append(f)

    with gc_paused():
        visit(stmts)
    a = np.array(cols, np.int64).reshape(-1, 8)
    small = not len(a) or a.max() < 2**31
    a = np.ascontiguousarray(a.T, dtype=np.int32 if small else np.int64)  # as compact as the numbers allow
    fr = np.ascontiguousarray(np.array(fracs, np.float64).reshape(-1, 2).T)
    return EncodedSection(tuple(ops), np.array(tid, np.int32), a[0], a[1], a[2], a[3], a[4], a[5], fr[0], fr[1],
                          a[6], a[7], together)


def encode(prog: Program) -> Encoded:
    """The encoded form of ``prog`` (computed once, then kept on the program).

    Parameters
    ----------
    prog : Program

    Returns
    -------
    Encoded
    """
    enc = prog.__dict__.get("_encoded")
    if enc is None:
        index: dict = {}
        templates: list = []
        setup = _section(prog.setup, index, templates)
        run = _section(prog.run, index, templates)
        enc = Encoded(tuple(templates), setup, run)
        object.__setattr__(prog, "_encoded", enc)
    return enc

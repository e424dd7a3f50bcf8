"""On-bank tile layouts: where each element column of a core's tile lives in its banks.

A host transfer (``lay=`` operand) names the layout its tile is written in
or read back from; the code generator picks the layout that its compute
commands walk row by row, and the simulator maps columns with
:func:`layout_address`.
"""

from __future__ import annotations

import numpy as np

from .stream import StreamFormatError


def parse_layout(text: str) -> tuple:
    """``'blk:8:4:2:1:64'`` -> ``('blk', 8, 4, 2, 1, 64)``."""
    p = text.split(":")
    return (p[0],) + tuple(int(x) for x in p[1:])


def unit_base(unit, ucols: int, R: int):
    """Column address of a layout unit: units pack into rows, or span whole rows."""
    if ucols <= R:
        upr = R // ucols
        return (unit // upr) * R + (unit % upr) * ucols
    rpu = -(-ucols // R)
    return unit * rpu * R


def layout_address(lay: str, v, col, m=0, slot: str = "data"):
    """Core column address of element column ``col`` of tile vector ``v``.

    Layouts
    -------
    ``blk:ob:kc:nch:rc:R``
        Contraction tiles.  Vectors form blocks of ``ob``; each vector's
        columns form ``nch`` chunks of ``kc``; a *unit* (one block, one chunk)
        holds ``ob*kc`` data columns followed by ``ob*rc`` result columns
        (``rc`` results per vector, e.g. one per input row ``m``; only the
        block's last chunk uses them).  Units pack into rows of ``R``
        columns, or span whole rows.  ``slot='res'`` addresses result ``m``
        of vector ``v``.
    ``ilv:slots:slot:kc:R:P``
        Element-wise tiles.  The tile's columns in order (vector ``v`` has
        ``P`` columns) form chunks of ``kc``; a unit holds one chunk of each
        of ``slots`` operands side by side; ``slot`` selects the operand.
    ``lin:P``
        Vector ``v`` at ``v*P``.
    """
    L = parse_layout(lay)
    kind = L[0]
    v = np.asarray(v)
    col = np.asarray(col)
    if kind == "blk":
        ob, kc, nch, rc, R = L[1:]
        ucols = ob * kc + ob * rc
        blk = v // ob
        vi = v % ob
        if slot == "res":
            return unit_base(blk * nch + nch - 1, ucols, R) + ob * kc + np.asarray(m) * ob + vi
        return unit_base(blk * nch + col // kc, ucols, R) + vi * kc + col % kc
    if kind == "ilv":
        slots, which, kc, R, P = L[1:]
        s = v * P + col
        q = s // kc
        upr = max(1, R // (slots * kc))
        return (q // upr) * R + (q % upr) * slots * kc + which * kc + s % kc
    if kind == "lin":
        (P,) = L[1:]
        return v * P + col
    raise StreamFormatError(f"unknown layout {lay!r}")

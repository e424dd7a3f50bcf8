"""PIMCOMP's layer partitioning: array groups and the five weight-unfolding formats (paper 004 sec. V, Table IV).

A convolution's ``I x O x K^2`` weights are unfolded into ``P`` matrices of
``H x W`` (``H W P = I O K^2``; no factor of ``O`` in ``H``, the accumulation
direction).  Each matrix is cut by the array height into ``ceil(H / H_array)``
*array groups* (AGs) of ``ceil(W / W_array)`` arrays that share one input
slice; an AG is the unit of mapping and of scheduling.

Table IV gives, per format, the computation cycles, the volume loaded from
global memory and the additional local memory (the row ``(I, OK^2, 1)``
lost its cycle entry in the text; it is ``F_in^2``, one MVM per input pixel).
PIMCOMP chooses per layer the format of fewest computation cycles, then of
least load volume in high-throughput mode or least additional memory in
low-latency mode (:func:`choose`).

What this project executes of a format: the AG height.  The crossbars hold
the rows of the im2col matrix (order ``(c, i, j)``, :func:`tvm_cim.compiler.
region.unfold_conv_weight`) in AGs of the format's height
(:func:`tile_rows`), which gives the format's AG and array counts, and the
partial sums of the AGs add up exactly as for any other cut of the rows.
The two formats that put kernel factors into ``W`` (``(I, OK^2, 1)``,
``(IK, OK, 1)``) need a col2im scatter-add of partial outputs, which the code
generator does not emit; they are never chosen by the rule above on a layer
whose output is smaller than its padded input, because their computation
cycles (``F_in^2``, ``F_in F_out``) are then larger.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .region import CONV2D, Region

FORMATS = ("(I,O,K2)", "(I,OK2,1)", "(IK,O,K)", "(IK,OK,1)", "(IK2,O,1)")
EXECUTABLE = ("(I,O,K2)", "(IK,O,K)", "(IK2,O,1)")  # H carries kernel factors only: partial sums add


@dataclass(frozen=True)
class Format:
    """One unfolding of a layer and its Table IV figures.

    Attributes
    ----------
    name : str
        ``(H, W, P)`` as in Table IV.
    H, W, P : int
        Matrix height (accumulated), width, and number of matrices.
    cycles : int
        Computation cycles (MVMs of one replica).
    load : int
        Elements loaded from global memory.
    memory : int
        Additional local memory (elements).
    """

    name: str
    H: int
    W: int
    P: int
    cycles: int
    load: int
    memory: int

    def array_groups(self, rows: int) -> int:
        """AGs of one replica on arrays of ``rows`` wordlines: ``P x ceil(H / rows)``."""
        return self.P * math.ceil(self.H / rows)


def geometry(r: Region) -> tuple[int, int, int, int, int]:
    """``(I, O, K, F_in, F_out)`` of a layer (square sides: the larger of height and width).

    ``F_in`` is the padded input side; a matrix multiplication is a ``1 x 1``
    convolution over its rows (``F_in = F_out = sqrt(M)``, rounded up).
    """
    m, k, n = r.mkn
    if r.kind == CONV2D:
        kh, kw = r.conv["kernel"]
        i_ch = k // (kh * kw)
        h_in, w_in = r.in_shapes[0][-2:]
        pt, pl, pb, pr = r.conv["padding"]
        f_in = max(h_in + pt + pb, w_in + pl + pr)
        f_out = max(r.out_shape[-2:])
        return i_ch, n, max(kh, kw), f_in, f_out
    side = math.isqrt(max(1, m - 1)) + 1 if m > 1 else 1
    return k, n, 1, side, side


def formats(r: Region) -> list[Format]:
    """The five unfoldings of Table IV with their figures (for a 1 x 1 kernel they coincide)."""
    i, o, k, fi, fo = geometry(r)
    k2 = k * k
    return [
        Format("(I,O,K2)", i, o, k2, fo * fo, fi * fo * k * i, k2 * i + k2 * o),
        Format("(I,OK2,1)", i, o * k2, 1, fi * fi, fi * fi * i, i + k2 * o),
        Format("(IK,O,K)", i * k, o, k, fo * fo, fi * fo * k * i, k2 * i + k * o),
        Format("(IK,OK,1)", i * k, o * k, 1, fi * fo, fi * fo * k * i, k * i + k * o),
        Format("(IK2,O,1)", i * k2, o, 1, fo * fo, fo * fo * k2 * i, k2 * i + o),
    ]


def choose(r: Region, mode: str) -> Format:
    """PIMCOMP's choice: fewest computation cycles, then least load volume (``ht``) or least additional
    memory (``ll``); remaining ties (which the paper leaves open) to the other of the two criteria, then to
    the usual im2col ``(IK2,O,1)``, then Table IV order.

    Only formats the code generator can execute (:data:`EXECUTABLE`) are candidates; the others are
    reported by :func:`formats`.
    """
    if mode not in ("ht", "ll"):
        raise ValueError(f"unfolding mode must be 'ht' or 'll', got {mode!r}")
    cands = [f for f in formats(r) if f.name in EXECUTABLE]
    def key(f):
        crit = (f.load, f.memory) if mode == "ht" else (f.memory, f.load)
        return (f.cycles, *crit, f.name != "(IK2,O,1)", FORMATS.index(f.name))

    return min(cands, key=key)


def tile_rows(r: Region, fmt: Format, rows: int) -> int:
    """Rows per crossbar tile that give the format's AGs: its height split evenly over
    ``ceil(H / rows)`` arrays (``rows`` for the usual im2col and for matrices)."""
    if r.kind != CONV2D or fmt.name == "(IK2,O,1)":
        return rows
    return min(rows, math.ceil(fmt.H / math.ceil(fmt.H / rows)))

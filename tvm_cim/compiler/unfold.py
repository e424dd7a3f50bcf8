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

What is *not* executed: the input reuse that gives ``(I,O,K2)`` and
``(IK,O,K)`` their smaller Table IV load volume (``F_in F_out K I`` against
im2col's ``F_out^2 K^2 I``: a loaded input row feeds the ``K`` (or ``K^2``)
matrices of its kernel rows, each with its own shifted window).  Our program
loads a chunk's input rows, kernel halo included, once, unfolds them by
im2col and scatters the ``K^2 I`` rows of every window to the AGs, whatever
the AG height; so every executable format loads the same bytes from global
memory.  The high-throughput rule therefore keeps the paper's criteria
(fewest computation cycles, then least load volume) but evaluates the load
volume the program executes (:func:`executed_load`, from the chunk plan and
the crossbar tiles the code generator emits, :mod:`tvm_cim.compiler.plan`),
not Table IV's, which :func:`formats` still reports.  With the volumes equal,
the remaining tie goes to the format of fewest array groups, the only
executed difference between the formats (fewer arrays per replica, fewer
ADC conversions and partial-sum reductions, more replicas on the chip); that
is im2col ``(IK2,O,1)`` on every layer (``ceil(K^2 I / rows) <= K ceil(K I
/ rows) <= K^2 ceil(I / rows)``).  Choosing by Table IV's volume picked
``(IK,O,K)``, a format whose only executed effect is more array groups (the
7x7x3 stem: 7 AGs instead of 2), measured 1.45x lower throughput on the
paper's 12 points.  Executing the reuse is future work: each matrix ``p`` of
a format would read its own window offset of one loaded input row (a
per-matrix shifted scatter from a line buffer of ``K`` input rows, instead of
one im2col gather), the load would then count the unique input rows per
chunk, and the estimate and codegen would both read it from the chunk plan.

The low-latency rule (fewest cycles, then least additional memory) is kept
on Table IV's memory figures.  The same argument applies to it -- our heap
holds each scatter's input slice (``K^2 I`` rows of a window, in one or in
several row blocks) and each replica's output pixels, the same bytes for
every executable format -- but the choice does not change: among the
executable formats of equal cycles im2col has the least Table IV memory
(``K^2 I + O``) on every layer with ``K > 1``, and for ``K = 1`` the formats
coincide.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from . import plan as P
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


def executed_load(r: Region, fmt: Format, est) -> int:
    """Bytes one replica of ``r`` unfolded as ``fmt`` loads from global and off-chip memory, as the code
    generator emits them: every chunk's input (:func:`tvm_cim.compiler.plan.chunks`) and the weights of
    the crossbar tiles the format's AG height cuts (:func:`tvm_cim.compiler.plan.tile_bytes`).

    Parameters
    ----------
    r : Region
        The layer.
    fmt : Format
        One of :func:`formats`.
    est : tvm_cim.compiler.estimate.Estimator
        The shared estimate (its chunks and tiles are the code generator's).

    Returns
    -------
    int
    """
    rows = tile_rows(r, fmt, est.hw_of(r).crossbar.rows)
    return int(est.chunks(r, 1).load_bytes.sum() + P.tile_bytes(est.tile_list(r, rows), est.wbits).sum())


def choose(r: Region, mode: str, est=None) -> Format:
    """PIMCOMP's choice: fewest computation cycles, then least load volume (``ht``) or least additional
    memory (``ll``).

    ``ht`` evaluates the load volume the program executes (:func:`executed_load`, which needs ``est``),
    not Table IV's (see the module docstring); its remaining ties go to the fewest array groups.
    ``ll`` uses Table IV's additional memory; its remaining ties go to Table IV's load volume.  Then
    the usual im2col ``(IK2,O,1)``, then Table IV order.

    Only formats the code generator can execute (:data:`EXECUTABLE`) are candidates; the others are
    reported by :func:`formats`.

    Parameters
    ----------
    r : Region
        The layer.
    mode : {'ht', 'll'}
        High throughput or low latency.
    est : tvm_cim.compiler.estimate.Estimator, optional
        The shared estimate; required for ``ht``.

    Returns
    -------
    Format
    """
    if mode not in ("ht", "ll"):
        raise ValueError(f"unfolding mode must be 'ht' or 'll', got {mode!r}")
    if mode == "ht" and est is None:
        raise ValueError("the high-throughput unfolding needs the estimate (est=) for the executed load volume")
    cands = [f for f in formats(r) if f.name in EXECUTABLE]

    def key(f):
        if mode == "ht":
            crit = (executed_load(r, f, est), f.array_groups(est.hw_of(r).crossbar.rows))
        else:
            crit = (f.memory, f.load)
        return (f.cycles, *crit, f.name != "(IK2,O,1)", FORMATS.index(f.name))

    return min(cands, key=key)


def tile_rows(r: Region, fmt: Format, rows: int) -> int:
    """Rows per crossbar tile that give the format's AGs: its height split evenly over
    ``ceil(H / rows)`` arrays (``rows`` for the usual im2col and for matrices)."""
    if r.kind != CONV2D or fmt.name == "(IK2,O,1)":
        return rows
    return min(rows, math.ceil(fmt.H / math.ceil(fmt.H / rows)))

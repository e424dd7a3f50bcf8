"""Map weight matrices onto crossbars and crossbars onto the chip.

Three steps, all driven by the hardware description:

1. :func:`tile_matrix` cuts a ``K x N`` weight matrix into crossbar tiles of
   ``crossbar.rows`` rows by :attr:`CIMHardware.logical_cols` columns (a
   logical column spans the bit-sliced cells of one weight, twice for the
   differential encoding).  Tiles that hold only zeros (the off-diagonal
   blocks of grouped / depthwise convolutions) are not allocated.
2. :func:`allocate` assigns chip crossbars to the tiles of all regions.  When
   every constant-weight tile fits at once, weights are written once
   (weight-stationary, the ``setup`` section).  Otherwise the network is cut
   into consecutive segments that each fit, and every segment rewrites its
   weights when it runs; a single region larger than the chip runs in several
   passes.  Nothing is rejected for being too large.
3. The code generator then emits reads in the preset's computing mode.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..hardware.schema import CIMHardware
from .region import DMATMUL, Region

QUANT_BITS = 8  # the compiler quantises weights and activations to int8


@dataclass(frozen=True)
class Tile:
    """A rectangle of the weight matrix held by one crossbar."""

    k0: int
    k1: int
    n0: int
    n1: int

    @property
    def rows(self) -> int:
        return self.k1 - self.k0

    @property
    def cols(self) -> int:
        return self.n1 - self.n0


def precision(hw: CIMHardware) -> tuple[int, int]:
    """Weight and input bits the compiler quantises to: int8, capped by the chip."""
    return min(QUANT_BITS, hw.crossbar.weight_bits), min(QUANT_BITS, hw.crossbar.input_bits)


def tile_matrix(k: int, n: int, hw: CIMHardware, w: np.ndarray | None = None) -> list[Tile]:
    """Cut a ``k x n`` matrix into crossbar tiles, dropping all-zero tiles of ``w``.

    Parameters
    ----------
    k, n : int
        Matrix rows (crossbar wordlines) and columns (weights per input vector).
    hw : CIMHardware
        The chip; gives crossbar rows and logical columns.
    w : np.ndarray, optional
        The matrix; when given, tiles whose weights are all zero are skipped.

    Returns
    -------
    list of Tile
        In row-major order over (row block, column block).
    """
    rows, cols = hw.crossbar.rows, hw.logical_cols(precision(hw)[0])
    tiles = []
    for k0 in range(0, k, rows):
        for n0 in range(0, n, cols):
            t = Tile(k0, min(k, k0 + rows), n0, min(n, n0 + cols))
            if w is not None and not np.any(w[t.k0 : t.k1, t.n0 : t.n1]):
                continue
            tiles.append(t)
    if not tiles:  # an all-zero weight still needs one tile to produce zeros
        tiles.append(Tile(0, min(k, rows), 0, min(n, cols)))
    return tiles


@dataclass
class Placement:
    """Where one region's tiles live and when they are written.

    Attributes
    ----------
    tiles : list of Tile
    passes : list of list of int
        Tile indices per pass; each pass uses crossbars ``xbs[i]`` of its tiles.
    xbs : list of int
        Chip crossbar id of each tile.
    resident : bool
        True if the weights are written once (``setup``) and stay; False if
        they are written every time the region runs.
    segment : int
        Index of the network segment the region belongs to.
    """

    tiles: list[Tile]
    xbs: list[int]
    passes: list[list[int]]
    resident: bool
    segment: int = 0


@dataclass
class ChipMap:
    """Placement of every region and a summary of the chip occupancy."""

    placements: dict[str, Placement] = field(default_factory=dict)
    segments: int = 1
    weight_stationary: bool = True
    crossbars_needed: int = 0
    crossbars_available: int = 0


def allocate(regions: list[Region], hw: CIMHardware) -> ChipMap:
    """Assign chip crossbars to the tiles of all regions.

    Parameters
    ----------
    regions : list of Region
        In execution (topological) order.
    hw : CIMHardware
        The chip.

    Returns
    -------
    ChipMap
        Placements keyed by region name.
    """
    cap = hw.total_crossbars
    tiles = {}
    for r in regions:
        m, k, n = r.mkn
        tiles[r.name] = tile_matrix(k, n, hw, r.w_int if r.kind != DMATMUL else None)
    need = sum(len(t) for t in tiles.values())
    cmap = ChipMap(crossbars_needed=need, crossbars_available=cap)
    if need <= cap:
        nxt = 0
        for r in regions:
            ts = tiles[r.name]
            xbs = list(range(nxt, nxt + len(ts)))
            nxt += len(ts)
            cmap.placements[r.name] = Placement(
                ts, xbs, [list(range(len(ts)))], resident=r.kind != DMATMUL
            )
        return cmap

    # Segmentation: consecutive regions that fit together form a segment; the
    # segment's weights are (re)written whenever it runs.
    cmap.weight_stationary = False
    seg, used = 0, 0
    for r in regions:
        ts = tiles[r.name]
        if used and used + len(ts) > cap:
            seg, used = seg + 1, 0
        if len(ts) > cap:  # one region larger than the chip: several passes
            passes = [list(range(i, min(len(ts), i + cap))) for i in range(0, len(ts), cap)]
            xbs = [i % cap for i in range(len(ts))]
            cmap.placements[r.name] = Placement(ts, xbs, passes, resident=False, segment=seg)
            seg, used = seg + 1, 0
            continue
        xbs = list(range(used, used + len(ts)))
        used += len(ts)
        cmap.placements[r.name] = Placement(ts, xbs, [list(range(len(ts)))], resident=False, segment=seg)
    cmap.segments = seg + 1 if used else seg
    return cmap

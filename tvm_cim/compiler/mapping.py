"""Map weight matrices onto crossbars and crossbars onto the chip.

Three steps, all driven by the hardware description:

1. :func:`tile_matrix` cuts a ``K x N`` weight matrix into crossbar tiles of
   ``crossbar.rows`` rows by :attr:`CIMHardware.logical_cols` columns (a
   logical column spans the bit-sliced cells of one weight, twice for the
   differential encoding).  Tiles that hold only zeros (the off-diagonal
   blocks of grouped / depthwise convolutions) are not allocated.
2. :func:`allocate` assigns chip crossbars to the tiles of all regions, every
   replica the schedule asks for (or fails with :class:`PlacementError`).  When
   every constant-weight tile fits at once, weights are written once
   (weight-stationary, the ``setup`` section).  Otherwise the network is cut
   into consecutive segments that each fit, and every segment rewrites its
   weights when it runs; a single region larger than the chip runs in several
   passes.  Nothing is rejected for being too large.
3. The code generator then emits reads in the preset's computing mode.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import numpy as np

from ..hardware.schema import CIMHardware
from .plan import pass_ranges
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


#: Non-zero tile masks by weight array (ids of live arrays only: the weak reference is checked).
_NZ_CACHE: dict[int, tuple] = {}
#: Tiles of matrices without a mask, by shape and tiling (:func:`tile_matrix`; a masked one's are in _NZ_CACHE).
_TILES: dict[tuple, tuple] = {}


def _nonzero_tiles(w: np.ndarray, k: int, n: int, rows: int, cols: int) -> np.ndarray:
    """Which ``rows x cols`` tiles of ``w[:k, :n]`` hold a non-zero weight (``kb x nb`` booleans).

    The passes tile the same quantised weights many times (estimates,
    allocation, placement, code generation); the mask is computed once per
    array and tiling.  Read-only arrays only are cached (a writeable one
    could change under the cache).
    """
    kb, nb = -(-k // rows), -(-n // cols)
    key = (k, n, rows, cols)
    cacheable = isinstance(w, np.ndarray) and not w.flags.writeable
    if cacheable:
        hit = _NZ_CACHE.get(id(w))
        if hit is not None and hit[0]() is w and key in hit[1]:
            return hit[1][key]
    nz = np.zeros((kb * rows, nb * cols), dtype=bool)
    nz[:k, :n] = np.asarray(w)[:k, :n] != 0
    nonzero = nz.reshape(kb, rows, nb, cols).any(axis=(1, 3))
    if cacheable:
        hit = _NZ_CACHE.get(id(w))
        if hit is None or hit[0]() is not w:
            if len(_NZ_CACHE) > 4096:
                _NZ_CACHE.clear()
            wid = id(w)
            hit = _NZ_CACHE[wid] = (weakref.ref(w, lambda _r, wid=wid: _NZ_CACHE.pop(wid, None)), {})
        hit[1][key] = nonzero
    return nonzero


def tile_matrix(k: int, n: int, hw: CIMHardware, w: np.ndarray | None = None,
                tile_rows: int | None = None) -> list[Tile]:
    """Cut a ``k x n`` matrix into crossbar tiles, dropping all-zero tiles of ``w``.

    Parameters
    ----------
    k, n : int
        Matrix rows (crossbar wordlines) and columns (weights per input vector).
    hw : CIMHardware
        The chip; gives crossbar rows and logical columns.
    w : np.ndarray, optional
        The matrix; when given, tiles whose weights are all zero are skipped.
    tile_rows : int, optional
        Rows per tile; ``crossbar.rows`` by default, ``rows_active`` when rows
        are remapped over crossbars (wordline level).

    Returns
    -------
    list of Tile
        In row-major order over (row block, column block).
    """
    rows, cols = tile_rows or hw.crossbar.rows, hw.logical_cols(precision(hw)[0])
    key = ("tiles", k, n, rows, cols)
    memo = _TILES if w is None else None  # the passes tile the same matrices many times: remembered
    if w is None:
        hit = _TILES.get(key)
        if hit is not None:
            return list(hit)
        nonzero = None
    else:
        nonzero = _nonzero_tiles(w, k, n, rows, cols)
        entry = _NZ_CACHE.get(id(w))  # a read-only array's entry (see _nonzero_tiles)
        if entry is not None and entry[0]() is w:
            memo = entry[1]
            hit = memo.get(key)
            if hit is not None:
                return list(hit)
    tiles = []
    for i, k0 in enumerate(range(0, k, rows)):
        for j, n0 in enumerate(range(0, n, cols)):
            if nonzero is not None and not nonzero[i, j]:
                continue
            tiles.append(Tile(k0, min(k, k0 + rows), n0, min(n, n0 + cols)))
    if not tiles:  # an all-zero weight still needs one tile to produce zeros
        tiles.append(Tile(0, min(k, rows), 0, min(n, cols)))
    if memo is not None:
        if memo is _TILES and len(_TILES) > 4096:
            _TILES.clear()
        memo[key] = tuple(tiles)
    return tiles


@dataclass
class Placement:
    """Where one region's tiles live and when they are written.

    Attributes
    ----------
    tiles : list of Tile
        The tiles of one copy of the weights.
    replicas : list of list of int
        Chip crossbar id of every tile, per replica (duplication).  Each
        replica is a virtual crossbar: its physical crossbars bound to the
        row and column ranges of the weight matrix given by ``tiles``.
    passes : list of list of int
        Tile indices per pass when one copy is larger than the chip (then
        there is a single replica whose crossbars are reused between passes).
    resident : bool
        True if the weights are written once (``setup``) and stay; False if
        they are written every time the region runs.
    segment : int
        Index of the network segment the region belongs to.
    """

    tiles: list[Tile]
    replicas: list[list[int]]
    passes: list[list[int]]
    resident: bool
    segment: int = 0

    @property
    def xbs(self) -> list[int]:
        """Crossbars of the first replica (one per tile)."""
        return self.replicas[0]


@dataclass
class ChipMap:
    """Placement of every region and a summary of the chip occupancy."""

    placements: dict[str, Placement] = field(default_factory=dict)
    segments: int = 1
    weight_stationary: bool = True
    crossbars_needed: int = 0
    crossbars_available: int = 0


class PlacementError(ValueError):
    """The regions of a segment, with their replicas, need more crossbars than the chip has."""


def allocate(regions: list[Region], hw: CIMHardware, plans: dict | None = None) -> ChipMap:
    """Assign chip crossbars to the tiles of all regions, as the plans say.

    Parameters
    ----------
    regions : list of Region
        In execution (topological) order.
    hw : CIMHardware
        The chip.
    plans : dict, optional
        Region name -> :class:`tvm_cim.compiler.schedule.RegionPlan` (replicas,
        tile rows, segment).  Without them, every region gets one copy and
        segments are cut greedily.

    Returns
    -------
    ChipMap
        Placements keyed by region name; every replica the plans ask for is placed.

    Raises
    ------
    PlacementError
        A segment's replicas do not fit the chip (a plan edited by hand, say);
        the message names the segment, what it needs and what to lower.
    """
    cap = hw.total_crossbars
    per_core = hw.core.crossbars
    core_mode = hw.chip.computing_mode == "core"
    plans = plans or {}
    tiles, reps, seg_of = {}, {}, {}
    for r in regions:
        m, k, n = r.mkn
        p = plans.get(r.name)
        tr = p.tile_rows if p else None
        tiles[r.name] = tile_matrix(k, n, r.chip(hw), r.w_int if r.kind != DMATMUL else None, tile_rows=tr)
        reps[r.name] = p.replicas if p else 1
    need = sum(len(tiles[r.name]) for r in regions)
    cmap = ChipMap(crossbars_needed=need, crossbars_available=cap)

    def footprint(r, d=None):
        t = len(tiles[r.name])
        if core_mode:  # a replica occupies whole cores
            t = -(-t // per_core) * per_core
        return t * (reps[r.name] if d is None else d)

    if plans:
        for r in regions:
            seg_of[r.name] = plans[r.name].segment
    else:
        seg, used = 0, 0
        for r in regions:
            f = footprint(r)
            if used and used + f > cap:
                seg, used = seg + 1, 0
            seg_of[r.name] = seg
            used += f
            if f > cap:
                seg, used = seg + 1, 0
    n_segments = max(seg_of.values(), default=0) + 1
    stationary = n_segments == 1 and sum(footprint(r) for r in regions) <= cap
    cmap.weight_stationary = stationary
    cmap.segments = n_segments
    nxt, cur_seg = 0, 0
    for r in regions:
        ts = tiles[r.name]
        if seg_of[r.name] != cur_seg:
            cur_seg, nxt = seg_of[r.name], 0
        fixed = plans[r.name].inplace_xbs if r.name in plans and r.kind == DMATMUL else ()
        if fixed:  # CMSwitch's keys in place: its one copy on the arrays its run-time operand was stored into
            if len(fixed) != len(ts):
                raise PlacementError(f"region {r.name}: {len(ts)} tiles, keys in place on {len(fixed)} arrays")
            cmap.placements[r.name] = Placement(ts, [list(fixed)], [list(range(len(ts)))], resident=False,
                                                segment=seg_of[r.name])
            continue
        spread = plans[r.name].compute_xbs if r.name in plans else ()
        if spread:  # CMSwitch's spread layout: every replica on the crossbars it names
            if len(spread) != reps[r.name] or any(len(x) != len(ts) for x in spread):
                raise PlacementError(f"region {r.name}: the layout names {[len(x) for x in spread]} crossbars per "
                                     f"replica, the plan has {reps[r.name]} replicas of {len(ts)} tiles")
            cmap.placements[r.name] = Placement(ts, [list(x) for x in spread], [list(range(len(ts)))],
                                                resident=stationary and r.kind != DMATMUL, segment=seg_of[r.name])
            continue
        serial = plans[r.name].pass_xbs if r.name in plans else 0  # CMSwitch: alone on crossbars 0 .. serial-1
        if len(ts) > (serial or cap) or serial:  # one copy larger than the chip: passes over reused crossbars
            c = serial or cap
            if reps[r.name] > 1:
                raise PlacementError(f"region {r.name} is larger than the chip ({len(ts)} tiles on {c} "
                                     f"crossbars) and runs in passes; it cannot have {reps[r.name]} replicas")
            cmap.placements[r.name] = Placement(ts, [[i % c for i in range(len(ts))]], [list(rg) for rg in pass_ranges(len(ts), c)],
                                                resident=False, segment=seg_of[r.name])
            continue
        replicas = []
        for _ in range(reps[r.name]):
            if core_mode and nxt % per_core:
                nxt += per_core - nxt % per_core
            if nxt + len(ts) > cap:
                used = sum(footprint(q) for q in regions if seg_of[q.name] == cur_seg)
                raise PlacementError(
                    f"segment {cur_seg} needs {used} crossbars with its replicas, the chip has {cap}: "
                    f"lower the replicas of its regions (region {r.name} asks for {reps[r.name]})")
            replicas.append(list(range(nxt, nxt + len(ts))))
            nxt += len(ts)
        cmap.placements[r.name] = Placement(
            ts, replicas, [list(range(len(ts)))],
            resident=stationary and r.kind != DMATMUL, segment=seg_of[r.name],
        )
    return cmap

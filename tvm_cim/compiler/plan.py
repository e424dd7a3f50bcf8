"""The dataflow inside a region: how its input vectors are cut into chunks, and what each chunk moves.

The code generator emits one load / quantise / unfold / scatter / read /
post-process / store sequence per chunk, and the fast estimate
(:mod:`tvm_cim.compiler.estimate`) costs the same chunks: both read this
module, so the estimate describes the program the simulator runs.

* :func:`chunk_count` -- the pipeline granularity: output rows of a
  convolution, at most 16 row blocks of a matrix product (at least one chunk
  per replica); a ``dmatmul``'s chunks cut ``M`` and hold every head.  With
  a vector granularity (CIM-MLC's pipeline, one sliding window at a time)
  a chunk holds at most that many output vectors, up to :data:`MAX_CHUNKS`
  chunks per region.
* :class:`Chunks` -- per chunk: its output vectors ``[start, stop)``, the
  share of the region input it needs (kernel halo included), the bytes it
  loads and the elements it quantises and unfolds.
* :func:`tile_bytes`, :func:`pass_ranges`, :func:`row_blocks`,
  :func:`scatter_bytes` -- the weight bytes of every crossbar tile, which
  tiles each pass of a layer larger than the chip holds, the row blocks a
  set of tiles covers (each gets its own input slice), and the bytes of
  input codes sent to them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..hardware.schema import CIMHardware
from .region import CONV2D, DMATMUL, Region


def chunk_bounds(m_total: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``[start, stop)`` of the ``n`` near-equal chunks of ``m_total`` vectors (empty ones dropped)."""
    edges = np.linspace(0, m_total, n + 1).round().astype(np.int64)
    keep = edges[1:] > edges[:-1]
    return edges[:-1][keep], edges[1:][keep]


MAX_CHUNKS = 1024  # chunks per region at a vector granularity (tractability: events and program size per region)


def chunk_count(r: Region, replicas: int, rounds: int = 1, vectors: int = 0) -> int:
    """Pipeline granularity: output rows for convolutions, at most 16 row blocks otherwise, and at
    least ``rounds`` chunks per replica of a duplicated region (so that its consumer can start after
    a share of it, not only after all of it); a ``dmatmul``'s chunks cut ``M`` and hold every head.

    ``vectors`` > 0: chunks of at most that many output vectors (CIM-MLC pipelines one sliding window
    at a time), at most :data:`MAX_CHUNKS` of them (never coarser than the default)."""
    m, _, _ = r.mkn
    if r.kind == DMATMUL:
        return int(min(m, max(16, replicas)))
    if r.kind == CONV2D:
        base = r.out_shape[0] * r.out_shape[2]  # batch x output rows
    else:
        base = min(16, r.batch * m)
    if vectors > 0:
        base = max(base, min(MAX_CHUNKS, -(-r.batch * m // vectors)))
    n = max(base, replicas * (rounds if replicas > 1 else 1))
    return int(min(n, r.batch * m))


def spill_level(r: Region, hw: CIMHardware, wbits: int, ibits: int) -> str:
    """Where the region's activations live: ``global`` buffer, or ``offchip`` when its working set does not fit."""
    return "offchip" if r.spills(hw.chip.global_buffer.capacity_kb * 1024 * hw.system.chips,
                                 hw.activation_bits(ibits), wbits) else "global"


@dataclass(frozen=True)
class Chunks:
    """The chunks of a region's input vectors and what each moves (arrays over chunks).

    Attributes
    ----------
    starts, stops : numpy.ndarray
        Output vectors ``[start, stop)`` of every chunk (vectors of one batch element).
    f0, f1 : numpy.ndarray
        Share ``[f0, f1)`` of the region input each chunk needs.
    load_bytes : numpy.ndarray
        Bytes of quantised input each chunk loads.
    quant_elems : numpy.ndarray
        Input elements each chunk quantises when the chip ALU quantises the
        input: those no earlier chunk covered (a convolution's kernel halo
        is quantised once).
    im2col_elems : numpy.ndarray
        Elements each chunk unfolds (convolutions; zero otherwise).
    level : str
        ``global`` or ``offchip`` (:func:`spill_level`).
    """

    starts: np.ndarray
    stops: np.ndarray
    f0: np.ndarray
    f1: np.ndarray
    load_bytes: np.ndarray
    quant_elems: np.ndarray
    im2col_elems: np.ndarray
    level: str

    @property
    def size(self) -> np.ndarray:
        return (self.stops - self.starts).astype(float)

    def __len__(self) -> int:
        return len(self.starts)


def chunks(r: Region, replicas: int, hw: CIMHardware, wbits: int, ibits: int, rounds: int = 1,
           vectors: int = 0) -> Chunks:
    """The chunks the code generator emits for a region with ``replicas`` copies of its weights
    (at least ``rounds`` per replica, at most ``vectors`` output vectors each: :func:`chunk_count`).

    At a vector granularity a convolution's chunk needs the input from its first window's first
    element to its last window's last one (:meth:`Region.input_span` ``exact``), and loads only the
    input no earlier chunk loaded (the kernel halo stays in the core's buffer, as a line buffer);
    otherwise it needs and loads whole input rows, its halo included."""
    m, k, _ = r.mkn
    starts, stops = chunk_bounds(m, chunk_count(r, replicas, rounds, vectors))
    f0, f1 = r.input_span(starts, stops, exact=vectors > 0)
    covered = np.concatenate([[0.0], np.maximum.accumulate(f1)[:-1]])  # input quantised by earlier chunks
    fresh = np.maximum(0.0, f1 - np.maximum(f0, covered)) * float(np.prod(r.in_shapes[0]))
    share = fresh if vectors > 0 else (f1 - f0) * float(np.prod(r.in_shapes[0]))
    load = np.maximum(1, np.ceil(share * hw.activation_bits(ibits) / 8))  # at the activations' storage width
    quant = np.maximum(1, fresh.astype(np.int64))
    im2col = (stops - starts) * k if r.kind == CONV2D else np.zeros(len(starts), dtype=np.int64)
    return Chunks(starts, stops, f0, f1, load, quant, im2col, spill_level(r, hw, wbits, ibits))


def tile_bytes(tiles, wbits: int) -> np.ndarray:
    """Bytes of the weights of every tile (``ceil(rows x cols x wbits / 8)``)."""
    return np.array([-(-(t.k1 - t.k0) * (t.n1 - t.n0) * wbits // 8) for t in tiles])


def pass_ranges(n_tiles: int, capacity: int) -> list[range]:
    """Tile indices of every pass of a layer whose ``n_tiles`` tiles exceed the chip's ``capacity`` crossbars."""
    return [range(i, min(n_tiles, i + capacity)) for i in range(0, n_tiles, capacity)]


def passes_of(n_tiles: int, capacity: int) -> int:
    """Passes a layer of ``n_tiles`` tiles needs on ``capacity`` crossbars."""
    return max(1, math.ceil(n_tiles / capacity))


def row_blocks(tiles) -> list[tuple[int, int]]:
    """``(k0, k1)`` of every row block a set of tiles covers, in row order (``k1``: its tallest tile)."""
    ends: dict[int, int] = {}
    for t in tiles:
        ends[t.k0] = max(ends.get(t.k0, t.k1), t.k1)
    return sorted(ends.items())


def scatter_bytes(batch: int, vectors, rows: int, ibits: int):
    """Bytes of the input codes of ``vectors`` vectors over ``rows`` rows (works on arrays)."""
    if isinstance(vectors, np.ndarray):
        return np.floor(batch * vectors * rows * ibits / 8)
    return batch * vectors * rows * ibits // 8

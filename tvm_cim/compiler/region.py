"""The compiler's description of one offloaded region after quantisation.

A :class:`Region` is what the Relax passes hand to the crossbar mapper and the
code generator: the operator, its shapes, its quantisation parameters and, for
operators with constant weights, the int8 weight matrix in the unfolded
``K x N`` form that crossbars hold (convolutions are unfolded by im2col;
grouped and depthwise convolutions become block-diagonal matrices whose
all-zero crossbar tiles are never allocated).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# Operators a crossbar region can implement.
CONV2D = "conv2d"  # activation x constant kernel
MATMUL = "matmul"  # activation x constant matrix (Gemm / dense / MatMul)
DMATMUL = "dmatmul"  # activation x activation (attention): weights written at run time


@dataclass
class Region:
    """One offloaded operator with its quantisation.

    Attributes
    ----------
    name : str
        Unique name in the module (used for program and report names).
    kind : str
        One of ``conv2d``, ``matmul``, ``dmatmul``.
    in_shapes : list of tuple
        Float input shapes (one, or two for ``dmatmul``).
    out_shape : tuple
        Float output shape.
    x_scale, x_zero : float, int
        Activation quantisation: ``q = clip(round(x / x_scale) + x_zero, 0, 2^bits - 1)``.
    x_signed : bool
        Signed activations: ``q = clip(round(x / x_scale), -(2^(bits-1)-1), 2^(bits-1)-1)``,
        applied to the crossbars as ``input_encoding`` says (two unsigned phases by default).
    y_scale : float
        Per-tensor scale of the second (run-time) operand of a ``dmatmul``.
    w_int : np.ndarray or None
        Constant int8 weights, shape ``(K, N)``.
    w_scale : np.ndarray or None
        Per-output-channel weight scales, shape ``(N,)``.
    bias : np.ndarray or None
        Float bias added after dequantisation, shape ``(N,)``.
    conv : dict
        ``kernel``, ``strides``, ``padding`` (top, left, bottom, right),
        ``dilation``, ``groups`` for convolutions.
    rows_per_step : int or None
        Wordlines driven per read step (None: the chip's ``rows_active``).
    adc_lsb : int or None
        ADC LSB programmed for all the region's arrays (None: the fixed rule).
    adc_lsb_cols : np.ndarray or None
        ADC LSB programmed per bitline, shape ``(slices x planes, N)``.
    weight_encoding, input_encoding : str or None
        How the crossbars hold the weights and take signed inputs (None: the
        chip's ``crossbar.weight_encoding`` / ``crossbar.input_encoding``).
    quant_at_producer : bool
        Its (first) input is computed from other regions' outputs, whose
        cores quantise it as they produce it (CIM-MLC, PUMA: quantisation at
        the producing core's vector unit); otherwise the chip ALU quantises it.
    requant_out : bool
        Its output feeds other regions: its cores quantise it for them in
        their post-processing.
    """

    name: str
    kind: str
    in_shapes: list[tuple[int, ...]]
    out_shape: tuple[int, ...]
    x_scale: float = 1.0
    x_zero: int = 0
    x_signed: bool = False
    y_scale: float = 1.0
    w_int: np.ndarray | None = None
    w_scale: np.ndarray | None = None
    bias: np.ndarray | None = None
    conv: dict = field(default_factory=dict)
    rows_per_step: int | None = None
    adc_lsb: int | None = None
    adc_lsb_cols: np.ndarray | None = None
    weight_encoding: str | None = None
    input_encoding: str | None = None
    quant_at_producer: bool = False
    requant_out: bool = False

    def chip(self, hw):
        """The chip as this region is mapped onto it (:meth:`CIMHardware.mapped`): its rows per read
        step and encodings."""
        return hw.mapped(self.rows_per_step, self.weight_encoding, self.input_encoding)

    # ------------------------------------------------------------------ shapes
    @property
    def batch(self) -> int:
        """Independent matrices (``Bt``): 1 unless a ``dmatmul`` has batch dims."""
        if self.kind != DMATMUL:
            return 1
        return int(np.prod(self.batch_shape, dtype=np.int64))

    @property
    def batch_shape(self) -> tuple[int, ...]:
        if self.kind != DMATMUL:
            return ()
        a, b = self.in_shapes
        return tuple(np.broadcast_shapes(tuple(a[:-2]), tuple(b[:-2])))

    @property
    def mkn(self) -> tuple[int, int, int]:
        """The matrix problem: ``M`` vectors of length ``K`` times ``K x N``."""
        if self.kind == CONV2D:
            n, _, _, _ = self.in_shapes[0]
            _, oc, oh, ow = self.out_shape
            k = self.w_int.shape[0]
            return n * oh * ow, k, oc
        if self.kind == MATMUL:
            x = self.in_shapes[0]
            m = int(np.prod(x[:-1], dtype=np.int64))
            return m, x[-1], self.w_int.shape[1]
        a, b = self.in_shapes
        return a[-2], a[-1], b[-1]

    def working_set_bytes(self, ibits: int, wbits: int) -> int:
        """Bytes of the region's inputs (quantised) and output (stored as an activation: ``ibits`` wide, at
        least a byte) in the global buffer."""
        x = int(np.prod(self.in_shapes[0], dtype=np.int64)) * -(-ibits // 8)
        y = int(np.prod(self.in_shapes[1], dtype=np.int64)) * -(-wbits // 8) if self.kind == DMATMUL else 0
        return x + y + int(np.prod(self.out_shape, dtype=np.int64)) * max(1, -(-ibits // 8))

    def spills(self, capacity_bytes: float, ibits: int, wbits: int) -> bool:
        """Whether the region's working set exceeds the global buffer, so it stays in off-chip memory.

        A region that spills loads its inputs from and stores its output to
        off-chip memory (``DMOV level="offchip"``), at the smaller of the
        global-buffer and off-chip bandwidths.
        """
        return self.working_set_bytes(ibits, wbits) > capacity_bytes

    def input_span(self, starts, stops, exact: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Share ``[f0, f1)`` of the region input that output vectors ``[start, stop)`` need.

        Vectorised over chunks.  A convolution's chunk needs whole input rows,
        its kernel halo included; with ``exact``, the input in raster order
        (batch, row, column) from the first element of its first window to
        the last element of its last window (a window's pixels arrive in the
        order its producer stores them).  Other operators need the same share
        of their input as of their output.
        """
        starts, stops = np.asarray(starts), np.asarray(stops)
        m_total = self.mkn[0]
        if self.kind != CONV2D:
            return starts / m_total, stops / m_total
        n, _, h, w = self.in_shapes[0]
        _, _, oh, ow = self.out_shape
        s, d, k = self.conv["strides"][0], self.conv["dilation"][0], self.conv["kernel"][0]
        pt = self.conv["padding"][0]
        if exact:
            sw, dw, kw, pl = (self.conv["strides"][1], self.conv["dilation"][1], self.conv["kernel"][1],
                              self.conv["padding"][1])

            def up(i, step):  # the first kernel tap at or after the padding: i + a multiple of the dilation
                return np.where(i < 0, i + (-i + step - 1) // step * step, i)

            def down(i, step, size):  # the last one before the padding
                return np.where(i > size - 1, i - (i - size + step) // step * step, i)

            def first(v):  # raster index of the first input element output vector v reads
                b, y, x = v // (oh * ow), (v // ow) % oh, v % ow
                return (b * h + up(y * s - pt, d)) * w + up(x * sw - pl, dw)

            def last(v):  # ... and the last one
                b, y, x = v // (oh * ow), (v // ow) % oh, v % ow
                return (b * h + down(y * s - pt + (k - 1) * d, d, h)) * w + down(x * sw - pl + (kw - 1) * dw, dw, w)

            # a window's own first and last elements; over a chunk's windows the extremes (where the kernel
            # is clipped at an edge, a window other than the chunk's first or last reaches further)
            v = np.arange(n * oh * ow + 1)  # one past the end: a chunk's stop may be the last vector's end
            idx = np.stack([starts, stops], axis=1).ravel()
            beg = np.minimum.reduceat(first(v), idx)[::2] if len(starts) else starts
            end = np.maximum.reduceat(last(v), idx)[::2] if len(starts) else stops
            tot = n * h * w
            return beg / tot, np.minimum(1.0, (end + 1) / tot)
        r0, r1 = starts // ow, -(-stops // ow)  # global output rows (n*OH + oh)
        i0 = (r0 // oh) * h + (r0 % oh) * s - pt
        i1 = ((r1 - 1) // oh) * h + ((r1 - 1) % oh) * s - pt + (k - 1) * d + 1
        tot = n * h
        return np.maximum(0.0, i0 / tot), np.minimum(1.0, i1 / tot)

    @property
    def macs(self) -> int:
        """Useful multiply-accumulates (zeros of block-diagonal groups excluded)."""
        m, k, n = self.mkn
        if self.kind == CONV2D:
            g = self.conv.get("groups", 1)
            return m * k * n // g
        return self.batch * m * k * n


def unfold_conv_weight(w: np.ndarray, groups: int) -> np.ndarray:
    """Unfold an OIHW kernel into the ``K x N`` matrix a crossbar holds.

    Row ``k`` is input channel ``c``, kernel row ``i`` and column ``j`` in the
    order ``(c, i, j)`` (the order :func:`tvm_cim.common.layout.im2col`
    produces); column ``n`` is output channel ``n``.  For ``groups > 1`` the
    matrix is block diagonal: group ``g`` occupies rows
    ``g*Cg*KH*KW : (g+1)*Cg*KH*KW`` and columns ``g*Og : (g+1)*Og``.

    Parameters
    ----------
    w : np.ndarray
        Kernel of shape ``(O, C/groups, KH, KW)``.
    groups : int
        Convolution groups.

    Returns
    -------
    np.ndarray
        Matrix of shape ``(C*KH*KW, O)`` with ``w``'s dtype.
    """
    o, cg, kh, kw = w.shape
    og = o // groups
    kg = cg * kh * kw
    out = np.zeros((groups * kg, o), dtype=w.dtype)
    for g in range(groups):
        blk = w[g * og : (g + 1) * og].reshape(og, kg).T
        out[g * kg : (g + 1) * kg, g * og : (g + 1) * og] = blk
    return out


def sources(regions: list[Region], producers: dict[str, list[str]]) -> dict[str, str | None]:
    """Per region, the producer whose memory-mode arrays its input may be loaded from.

    Its only producer; at a join of several (a residual add, host
    operators between regions), the latest in execution order: the host's
    element-wise join is taken to write its result where that producer's
    output is, and reads the other operands where they are (host operators
    are not timed, for any strategy).  A ``dmatmul`` (two run-time
    operands): its only producer, else none.
    """
    order = {r.name: i for i, r in enumerate(regions)}
    out: dict[str, str | None] = {}
    for r in regions:
        ps = [p for p in producers.get(r.name, []) if p in order]
        out[r.name] = max(ps, key=order.__getitem__) if len(ps) == 1 or (ps and r.kind != DMATMUL) else None
    return out


def line_buffer_pairs(regions: list[Region], producers: dict[str, list[str]]) -> dict[str, str]:
    """Producers whose output may be kept in memory-mode arrays as a rolling line buffer (CMSwitch,
    :func:`tvm_cim.compiler.strategies.modes.line_buffers`), with their consumer: the producer's only consumer
    is the next region, reads only that output (no join), exactly all of it, in order by chunks (not a
    ``dmatmul``), one batch element."""
    out = {}
    for p, c in zip(regions, regions[1:]):
        if (c.kind != DMATMUL and list(producers.get(c.name, [])) == [p.name] and p.batch == 1 and c.batch == 1
                and int(np.prod(c.in_shapes[0])) == p.mkn[0] * p.mkn[2]
                and not any(p.name in ps for n, ps in producers.items() if n != c.name)):
            out[p.name] = c.name
    return out

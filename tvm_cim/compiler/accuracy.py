"""ADC-aware crossbar mapping: per layer, the fastest mapping whose error on the calibration samples fits a budget.

A layer's *mapping* is how its crossbars hold its weights and are read,
within what the hardware file allows:

* **weight encoding** (``crossbar.weight_encoding`` and the extras in
  ``crossbar.weight_encodings``): differential, offset or two's complement
  slices; fewer bitlines per weight read faster, and encodings whose sums
  stay small (differential: sparse magnitudes) lose less in the ADC;
* **input encoding** of signed activations (``crossbar.input_encoding`` /
  ``input_encodings``): two unsigned phases, one offset pass, or two's
  complement with a sign step -- the number of input steps against the size
  of the sums;
* **rows driven per read step** (at most ``crossbar.rows_active``; the other
  rows get zero input).  Fewer rows keep every bitline's analogue sum small,
  so the ADC alters fewer conversions, at the price of more read steps.  The
  cost is what the cost primitives charge for the chip as the layer drives it
  (:meth:`tvm_cim.hardware.schema.CIMHardware.driving`): ``cost.read`` and
  ``cost.mvm_ns`` count ``ceil(rows / rows_per_step)`` row groups.
* **the ADC's input range**, where ``crossbar.adc_range`` lets the compiler
  program it: one power-of-two LSB for all of the layer's arrays (``array``)
  or one per bitline (``column``), calibrated on the largest partial sum the
  calibration samples produce (as activation scales are calibrated on the
  ranges they produce); larger sums saturate.  With ``fixed`` the LSB follows
  ``adc_mode``.

Error budget.  ``max_error`` bounds ``1 - cosine`` between the network's
outputs and the float reference on the calibration samples (default 0.005:
cosine >= 0.995 on the samples, a margin for cosine >= 0.99 on other inputs).  Int8 quantisation alone costs ``e_q``, measured end to end
on the samples with every region replaced by exact int8 arithmetic; the
mappings may add the rest.  The error a mapping adds to a layer is measured on
a seeded sample of the layer's calibration input vectors: ``1 - cosine``
between its output through the modelled crossbars
(:func:`tvm_cim.hardware.crossbar.mvm`, the device physics the simulator executes) and its
exact int8 output.  Layer errors are taken to add up at the network output
(``1 - cos`` is half the squared relative error, and independent relative
errors of successive layers add in quadrature); residual connections and
pooling attenuate them, so the sum is conservative.

Candidates are encodings x rows per step x ADC options (:class:`Front`).

Choice.  Every layer starts at its fastest candidate (the most accurate of
the equally fast ones); while the summed error exceeds the allowance, the
layer whose next more accurate candidate removes the most error per
nanosecond added moves to it.  Driving few enough rows that no sum can exceed
the ADC is exact, so any budget above ``e_q`` can be met.  Latencies are the
fast estimate of the layer alone (one copy of its weights).
"""

from __future__ import annotations

import dataclasses
import zlib
from dataclasses import dataclass, field

import numpy as np

from ..common.layout import dequantize, im2col, quantize_codes
from ..common.runtime import thread_map
from ..hardware import crossbar as X
from ..hardware.schema import CIMHardware
from .estimate import Estimator
from .plan import passes_of
from .quantize import Observation
from .region import CONV2D, DMATMUL, MATMUL, Region

DEFAULT_MAX_ERROR = 0.005  # 1 - cosine against the float reference on the calibration samples (half of 0.99's)
SAMPLE_COLS = 32  # output columns an error is measured on (all columns calibrate a programmed range)
_COL_CHUNK = 256  # columns encoded at once when calibrating ranges
_CACHE_CELLS = 2**25  # cells of a layer kept encoded (one byte each) between row counts


# ============================================================================ mappings
@dataclass(frozen=True)
class Mapping:
    """How a layer's crossbars are read.

    Attributes
    ----------
    rows_per_step : int
        Wordlines driven per read step.
    adc : str
        ``fixed`` (the hardware's rule), ``array`` (one programmed LSB) or
        ``column`` (one programmed LSB per bitline).
    lsb : int or None
        The programmed LSB (``array``).
    lsb_cols : np.ndarray or None
        The programmed LSB per bitline, shape ``(slices x planes, N)`` (``column``).
    weight_encoding : str or None
        How the weights are stored (None: the chip's ``crossbar.weight_encoding``).
    input_encoding : str or None
        How signed inputs are applied (None: the chip's ``crossbar.input_encoding``,
        or unsigned inputs).
    """

    rows_per_step: int
    adc: str = "fixed"
    lsb: int | None = None
    lsb_cols: np.ndarray | None = field(default=None, compare=False, repr=False)
    weight_encoding: str | None = None
    input_encoding: str | None = None

    def describe(self) -> str:
        """One line for reports."""
        enc = ""
        if self.weight_encoding is not None:
            enc += f"{self.weight_encoding} weights, "
        if self.input_encoding is not None:
            enc += f"{self.input_encoding} inputs, "
        if self.adc == "array":
            return f"{enc}{self.rows_per_step} rows/step, ADC LSB {self.lsb}"
        if self.adc == "column":
            lo, hi = int(self.lsb_cols.min()), int(self.lsb_cols.max())
            return f"{enc}{self.rows_per_step} rows/step, ADC LSB per bitline {lo}..{hi}"
        return f"{enc}{self.rows_per_step} rows/step, fixed ADC range"

    def attrs(self) -> dict:
        """The region-function attributes that record it (``cim.rows_per_step``, ``cim.adc_lsb[_cols]``,
        ``cim.weight_encoding``, ``cim.input_encoding``)."""
        out: dict = {"rows_per_step": int(self.rows_per_step)}
        if self.adc == "array":
            out["adc_lsb"] = int(self.lsb)
        if self.adc == "column":
            out["adc_lsb_cols"] = lsb_cols_text(self.lsb_cols)
        if self.weight_encoding is not None:
            out["weight_encoding"] = str(self.weight_encoding)
        if self.input_encoding is not None:
            out["input_encoding"] = str(self.input_encoding)
        return out


def lsb_cols_text(lsb: np.ndarray) -> str:
    """Per-bitline LSBs (powers of two) as text: one hex digit of the exponent per column, rows by ``/``."""
    e = np.log2(np.asarray(lsb)).round().astype(np.int64)
    if e.min() < 0 or e.max() > 15:
        raise ValueError("programmed ADC LSBs must be 2^0 .. 2^15")
    digits = np.array(list("0123456789abcdef"))
    return "/".join("".join(digits[row]) for row in e)


def lsb_cols_parse(text: str) -> np.ndarray:
    """Inverse of :func:`lsb_cols_text`: ``(slices x planes, N)`` int64 LSBs."""
    return np.array([[1 << int(c, 16) for c in row] for row in str(text).split("/")], dtype=np.int64)


def apply(r: Region, m: Mapping | None) -> Region:
    """A copy of a region read with mapping ``m`` (None: the chip's defaults)."""
    if m is None:
        return dataclasses.replace(r, rows_per_step=None, adc_lsb=None, adc_lsb_cols=None, weight_encoding=None,
                                   input_encoding=None)
    return dataclasses.replace(r, rows_per_step=m.rows_per_step, adc_lsb=m.lsb if m.adc == "array" else None,
                               adc_lsb_cols=m.lsb_cols if m.adc == "column" else None,
                               weight_encoding=m.weight_encoding, input_encoding=m.input_encoding)


def encodings(hw: CIMHardware, signed: bool) -> list[tuple[str | None, str | None]]:
    """``(weight encoding, input encoding)`` pairs the chip allows a layer, its defaults first (as None).

    The input encoding matters only for signed inputs.
    """
    ws = [None] + hw.weight_encoding_options[1:]
    ins = [None] + hw.input_encoding_options[1:] if signed else [None]
    return [(w, i) for w in ws for i in ins]


def row_options(hw: CIMHardware) -> list[int]:
    """Rows per read step worth trying: ``rows_active`` halved until no sum can exceed the ADC, and that count.

    Largest first (the fastest).
    """
    xb = hw.crossbar
    per_row = (2**xb.dac_bits - 1) * (2**xb.cell_bits - 1)
    r_exact = max(1, (2**xb.adc_bits - 1) // per_row)
    out, r = [], xb.rows_active
    while r > r_exact:
        out.append(r)
        r //= 2
    out.append(min(xb.rows_active, r_exact))
    return sorted(set(out), reverse=True)


def needs_mapping(hw: CIMHardware) -> bool:
    """False when every layer is exact as the chip reads it by default and nothing else is allowed
    (nothing to decide)."""
    return (hw.crossbar.adc_range != "fixed" or not X.is_lossless(hw) or len(hw.weight_encoding_options) > 1
            or len(hw.input_encoding_options) > 1)


# ============================================================================ measuring a layer
class LayerProbe:
    """A layer's calibration vectors, quantised, and its crossbars as they would be programmed.

    Parameters
    ----------
    r : Region
        The quantised layer.
    vectors : list of dict
        Its sampled calibration input vectors (:func:`tvm_cim.compiler.quantize.sample_vectors`).
    hw : CIMHardware
    wbits, ibits : int
        Quantised precision.
    """

    def __init__(self, r: Region, vectors: list[dict], hw: CIMHardware, wbits: int, ibits: int):
        self.r, self.hw, self.wbits, self.ibits = r, hw, wbits, ibits
        x = np.concatenate([v["x"] for v in vectors])
        self.xq = quantize_codes(x, r.x_scale, r.x_zero, ibits, r.x_signed)
        if r.kind == DMATMUL:
            ys, which, off = [], [], 0
            for v in vectors:
                ys.append(quantize_codes(v["y"], r.y_scale, 0, wbits, True))
                which.append(v["b"] + off)
                off += len(v["y"])
            self.w = np.concatenate(ys)  # (B, K, N)
            self.which = np.concatenate(which)
        else:
            self.w = r.w_int.astype(np.int32)[None]
            self.which = np.zeros(len(self.xq), dtype=np.int64)
        n = self.w.shape[-1]
        seed = zlib.crc32(r.name.encode())
        self.cols = np.sort(np.random.default_rng(seed).choice(n, min(n, SAMPLE_COLS), replace=False))
        self.exact = self._output(self._exact_acc(self.cols), self.cols)
        self._cells: dict = {}
        self._xs: dict = {}
        self._peaks: dict = {}

    # ------------------------------------------------------------------ helpers
    def _blocks(self) -> list[tuple[int, int]]:
        k, rows = self.w.shape[1], self.hw.crossbar.rows
        return [(k0, min(k, k0 + rows)) for k0 in range(0, k, rows)]

    def _inputs(self, b: int):
        """Input tiles ``(T, 1, V, R)`` of the vectors meeting weight matrix ``b`` (rows padded as the
        simulator pads a tile), and which vectors they are."""
        hit = self._xs.get(b)
        if hit is None:
            rows = min(self.w.shape[1], self.hw.crossbar.rows)
            sel = self.which == b
            xs = np.zeros((len(self._blocks()), 1, int(sel.sum()), rows), dtype=np.int32)
            for i, (k0, k1) in enumerate(self._blocks()):
                xs[i, 0, :, : k1 - k0] = self.xq[sel, k0:k1]
            hit = self._xs[b] = (xs, sel)
        return hit

    def _encode(self, b: int, cols: np.ndarray, whw: CIMHardware, dtype=np.float32) -> np.ndarray:
        """Cells ``(T, 1, R, S, P, n)`` of columns ``cols`` of weight matrix ``b`` as ``whw`` (the chip with
        the layer's weight encoding) holds them (:func:`tvm_cim.hardware.crossbar.encode`, rows padded with
        zero weights), as ``dtype``.

        Every weight is one of ``2^wbits - 1`` codes, so the cells are looked up in a table of the encoding
        of every code: one gather of all of a weight's cells instead of the encoder's passes.
        """
        lim = 2 ** (self.wbits - 1) - 1
        key = ("lut", whw.crossbar.weight_encoding, np.dtype(dtype).str)
        lut = self._cells.get(key)
        if lut is None:
            table = X.encode(np.arange(-lim, lim + 1)[:, None], whw, self.wbits)[..., 0].astype(dtype)  # (codes, S, P)
            lut = self._cells[key] = (np.ascontiguousarray(table.reshape(len(table), -1)).view(
                f"V{table[0].nbytes}")[:, 0], table.shape[1:])
        table, sp = lut
        k, rows = self.w.shape[1], min(self.w.shape[1], self.hw.crossbar.rows)
        t_n = len(self._blocks())
        w = self.w[b]
        sub = w[:, cols[0] : cols[-1] + 1] if cols[-1] - cols[0] + 1 == len(cols) else w[:, cols]
        idx = np.full((t_n * rows, len(cols)), lim, dtype=np.int16)  # tile t holds rows t*R .. (t+1)*R - 1
        np.add(sub, lim, out=idx[:k], dtype=np.int16, casting="unsafe")
        np.clip(idx, 0, 2 * lim, out=idx)
        cells = np.take(table, idx).view(dtype).reshape(t_n, rows, len(cols), *sp)
        return np.ascontiguousarray(np.moveaxis(cells, 2, -1))[:, None]

    def _tiles(self, b: int, cols: np.ndarray, whw: CIMHardware, sampled: bool = False):
        """Input tiles ``(T, 1, V, R)`` of the vectors meeting weight matrix ``b``, their cells
        ``(T, 1, R, S, P, n)`` and which vectors they are.

        Cells are cached for the sampled columns (``sampled``), and for all columns (as small
        integers, when the layer is small enough), so that every row count and ADC option reuses them.
        """
        xs, sel = self._inputs(b)
        enc = whw.crossbar.weight_encoding
        if sampled:
            key = (b, cols.tobytes(), enc)
            cells = self._cells.get(key)
            if cells is None:
                cells = self._cells[key] = self._encode(b, cols, whw)
            return xs, cells, sel
        full = self._cells.get((b, "all", enc))
        if full is None:
            if self._kept(whw):
                full = self._cells[(b, "all", enc)] = self._encode(b, np.arange(self.w.shape[-1]), whw, np.uint8)
            else:
                return xs, self._encode(b, cols, whw), sel
        part = full[..., cols[0] : cols[-1] + 1] if cols[-1] - cols[0] + 1 == len(cols) else full[..., cols]
        return xs, part.astype(np.float32), sel

    def _kept(self, whw: CIMHardware) -> bool:
        """Whether every cell of the layer is kept encoded (:data:`_CACHE_CELLS`) for weight encoding ``whw``."""
        rows = min(self.w.shape[1], self.hw.crossbar.rows)
        return len(self._blocks()) * rows * self.w.shape[-1] * whw.cols_per_weight(self.wbits) <= _CACHE_CELLS

    def _passes(self, x: np.ndarray, view: CIMHardware) -> list[tuple[np.ndarray, int, int]]:
        """(unsigned codes, input bits, factor) of each pass the crossbars are read in."""
        if self.r.x_signed:
            return X.input_passes(x, view, self.ibits)
        return [(x, self.ibits, 1)]

    def _exact_acc(self, cols: np.ndarray) -> np.ndarray:
        acc = np.zeros((len(self.xq), len(cols)))
        for b in np.unique(self.which):
            sel = self.which == b
            acc[sel] = self.xq[sel].astype(np.float64) @ self.w[b][:, cols].astype(np.float64)
        return acc

    def _output(self, acc: np.ndarray, cols: np.ndarray) -> np.ndarray:
        r = self.r
        scale = r.x_scale * (r.y_scale if r.kind == DMATMUL else 1.0)
        wsum = self.w.sum(axis=1)[self.which][:, cols] if r.x_zero else None
        wscale = r.w_scale[cols] if r.w_scale is not None else None
        bias = r.bias[cols] if r.bias is not None else None
        return dequantize(acc, scale, r.x_zero, wsum, wscale, bias)

    def view(self, m: Mapping) -> CIMHardware:
        """The chip as mapping ``m`` reads the layer."""
        return self.hw.mapped(m.rows_per_step, m.weight_encoding, m.input_encoding)

    # ------------------------------------------------------------------ what the compiler asks
    def peaks(self, m: Mapping) -> np.ndarray:
        """Largest analogue sum of every bitline, ``(slices x planes, N)``, read with mapping ``m``
        (its rows per step and encodings; the ADC setting does not matter).

        A layer too large to keep encoded (:data:`_CACHE_CELLS`) is encoded again on every pass over its
        columns, so its first call measures every row count whose sums can exceed the ADC's range at one
        unit (the others' programmed LSB is one whatever the samples) in one pass, and later calls
        return what it found.
        """
        key = (m.rows_per_step, m.weight_encoding, m.input_encoding)
        hit = self._peaks.get(key)
        if hit is not None:
            return hit
        views = {m.rows_per_step: self.view(m)}
        if not self._kept(views[m.rows_per_step]):
            for rp in row_options(self.hw):
                v = self.view(dataclasses.replace(m, rows_per_step=rp))
                if rp not in views and not X.exact(v, 1):
                    views[rp] = v
        xhw = views[m.rows_per_step]
        n = self.w.shape[-1]
        s_p = xhw.cols_per_weight(self.wbits)
        outs = {rp: np.zeros((s_p, n)) for rp in views}
        for c0 in range(0, n, _COL_CHUNK):
            cols = np.arange(c0, min(n, c0 + _COL_CHUNK))
            for b in np.unique(self.which):
                xs, cells, _ = self._tiles(int(b), cols, xhw)
                for x, bits, _ in self._passes(xs, xhw):
                    for rp, v in views.items():
                        p = X.bitline_peaks(x, cells, v, bits).max(axis=0)  # (S, P, n)
                        outs[rp][:, cols] = np.maximum(outs[rp][:, cols], p.reshape(s_p, len(cols)))
        for rp, out in outs.items():
            self._peaks[(rp,) + key[1:]] = out
        return outs[m.rows_per_step]

    def array_lsb(self, m: Mapping) -> int:
        """The LSB a range programmed for all of the layer's arrays gets when read with mapping ``m``:
        ``programmed_lsb(peaks(m).max())``, measured only as far as it can change.

        One unit where no sum can pass the top code at one unit.  Otherwise
        the columns are read in parts, in order of an upper bound on their
        sums (every row driven at the largest input digit it ever gets); a part
        whose bound cannot raise the LSB found so far is not measured, and
        measuring stops once the LSB is the largest any bound allows.
        """
        view, hw = self.view(m), self.hw
        if X.exact(view, 1):
            return 1
        key = (m.rows_per_step, m.weight_encoding, m.input_encoding)
        if key in self._peaks or not self._kept(view):  # (a layer encoded again per pass: all row counts at once)
            return int(X.programmed_lsb(self.peaks(m).max(), hw))
        n, step = self.w.shape[-1], _COL_CHUNK // 4
        parts = []
        for b in np.unique(self.which):
            for c0 in range(0, n, step):
                cols = np.arange(c0, min(n, c0 + step))
                xs, cells, _ = self._tiles(int(b), cols, view)
                for i, (x, bits, _) in enumerate(self._passes(xs, view)):
                    parts.append((_bound(x, cells, view, bits), int(b), c0, i))
        parts.sort(key=lambda p: -p[0])
        hi, lsb = X.programmed_lsb(parts[0][0], hw), 1
        for bound, b, c0, i in parts:
            if lsb == hi or X.programmed_lsb(bound, hw) <= lsb:
                break
            xs, cells, _ = self._tiles(b, np.arange(c0, min(n, c0 + step)), view)
            x, bits, _ = self._passes(xs, view)[i]
            lsb = max(lsb, X.programmed_lsb(X.bitline_peaks(x, cells, view, bits).max(), hw))
        return int(lsb)

    def error(self, m: Mapping) -> float:
        """``1 - cosine`` of the layer's output read with mapping ``m`` against its exact int8 output."""
        return self.errors([m])[0]

    def errors(self, ms: list[Mapping]) -> list[float]:
        """:meth:`error` of mappings ``ms`` that differ only in their ADC setting (the same rows per step
        and encodings): the crossbars' analogue sums are computed once for all of them."""
        if len({(m.rows_per_step, m.weight_encoding, m.input_encoding) for m in ms}) > 1:
            raise ValueError("errors(): the mappings must share rows per step and encodings")
        xhw = self.view(ms[0])
        out: list[float] = [0.0] * len(ms)
        todo, lsbs = [], []
        for i, m in enumerate(ms):
            lsb = m.lsb if m.adc == "array" else None
            if m.adc == "column":
                s_n = xhw.weight_slices(self.wbits)
                lsb = m.lsb_cols[:, self.cols].reshape(s_n, -1, len(self.cols))[None]
            if not X.exact(xhw, lsb, min(self.w.shape[1], self.hw.crossbar.rows)):
                todo.append(i)
                lsbs.append(lsb)
        accs = [np.zeros((len(self.xq), len(self.cols))) for _ in todo]
        for b in np.unique(self.which) if todo else ():
            xs, cells, sel = self._tiles(int(b), self.cols, xhw, sampled=True)
            t_lsbs = [np.broadcast_to(lsb, (len(xs),) + cells.shape[-3:]) if np.ndim(lsb) else lsb for lsb in lsbs]
            if self.r.x_signed:
                res = [X.mvm_signed(xs, cells, xhw, self.wbits, self.ibits, exact_shortcut=True, lsb=t_lsb)
                       for t_lsb in t_lsbs]
            else:
                res = X.mvm_lsbs(xs, cells, xhw, self.wbits, self.ibits, t_lsbs)
            for acc, r in zip(accs, res):
                acc[sel] += r.sum(axis=0)[0]
        for i, acc in zip(todo, accs):
            out[i] = cosine_error(self._output(acc, self.cols), self.exact)
        return out


def _bound(x: np.ndarray, cells: np.ndarray, view: CIMHardware, bits: int) -> float:
    """An upper bound on every analogue sum of inputs ``x`` ``(T, 1, V, R)`` (``bits``-bit codes) on
    ``cells`` ``(T, 1, R, S, P, n)`` read as ``view`` drives them: each row at the largest input digit any
    vector gives it in any step, summed per row group."""
    d = view.crossbar.dac_bits
    digit = np.zeros(x.shape[:1] + x.shape[-1:], dtype=np.int64)  # (T, R)
    for b in range(view.input_steps(bits)):
        np.maximum(digit, ((x >> (b * d)) & ((1 << d) - 1)).max(axis=(1, 2)), out=digit)
    cg = cells.reshape(cells.shape[0], cells.shape[2], -1)  # (T, R, K)
    top, ra = 0.0, view.crossbar.rows_active
    for g0 in range(0, cg.shape[1], ra):
        top = max(top, float(np.matmul(digit[:, None, g0 : g0 + ra].astype(np.float32), cg[:, g0 : g0 + ra]).max(
            initial=0.0)))
    return top


def cosine_error(a: np.ndarray, b: np.ndarray) -> float:
    """``1 - cosine`` of two arrays (0 when both are zero)."""
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if na == 0 or nb == 0:
        return 0.0 if na == nb else 1.0
    return float(max(0.0, 1.0 - (a @ b) / (na * nb)))


# ============================================================================ candidates and the choice
@dataclass
class Candidate:
    """One mapping of a layer with its estimated latency and measured error."""

    mapping: Mapping
    ns: float
    error: float


@dataclass
class Choice:
    """What the compiler chose for one layer, and what the fastest mapping would have given."""

    region: str
    chosen: Candidate
    fastest: Candidate
    tried: int


class Front:
    """A layer's mappings that no other beats on both latency and error, fastest first, measured lazily.

    Candidates are every encoding the chip allows (:func:`encodings`) at
    every row count (:func:`row_options`), in order of estimated latency
    (ties: the chip's default encodings, then more rows, first).  At each,
    the ADC options are the fixed rule and, where the chip can program its
    range, the calibrated range (and half of it, which clips the rarest sums
    but halves the rounding step) per array, or per bitline.  A candidate
    joins the front with its most accurate ADC option if that beats the
    faster ones; slower candidates are measured only when the choice asks
    for them.

    Parameters
    ----------
    probe : LayerProbe
    est : Estimator
    """

    def __init__(self, probe: LayerProbe, est: Estimator):
        self.probe, self.est = probe, est
        hw, r = probe.hw, probe.r
        self.rows = row_options(hw)
        self.items: list[Candidate] = []
        self.tried = 0
        todo = []
        for e_i, (we, ie) in enumerate(encodings(hw, bool(r.x_signed))):
            enc = apply(r, Mapping(hw.crossbar.rows_active, weight_encoding=we, input_encoding=ie))
            passes = passes_of(est.tiles(enc, hw.crossbar.rows), hw.total_crossbars)
            for j, rp in enumerate(self.rows):
                m = Mapping(rp, weight_encoding=we, input_encoding=ie)
                todo.append((est.region_ns(apply(r, m), 1, hw.crossbar.rows, True, passes), e_i, j, m))
        self._todo = sorted(todo, key=lambda c: c[:3])
        self._next = 0
        self._extend()

    def _extend(self) -> None:
        hw = self.probe.hw
        ns, _, _, base = self._todo[self._next]
        self._next += 1
        opts = [base]
        if hw.crossbar.adc_range in ("array", "column"):
            lsb = self.probe.array_lsb(base)
            same = {"rows_per_step": base.rows_per_step, "weight_encoding": base.weight_encoding,
                    "input_encoding": base.input_encoding}
            opts += [Mapping(adc="array", lsb=lsb, **same)] + ([Mapping(adc="array", lsb=lsb // 2, **same)]
                                                               if lsb > 1 else [])
            if hw.crossbar.adc_range == "column":
                view = self.probe.view(base)
                peak = (self.probe.peaks(base) if not X.exact(view, 1) else  # (else every LSB is one unit)
                        np.zeros((view.cols_per_weight(self.probe.wbits), self.probe.w.shape[-1])))
                opts.append(Mapping(adc="column", lsb_cols=np.asarray(X.programmed_lsb(peak, hw)), **same))
        found = [Candidate(m, ns, e) for m, e in zip(opts, self.probe.errors(opts))]
        self.tried += len(found)
        best = min(found, key=lambda c: c.error)
        if not self.items or best.error < self.items[-1].error:
            self.items.append(best)

    def get(self, i: int) -> Candidate | None:
        """The ``i``-th front entry (measuring slower candidates as needed), None if there is none."""
        while len(self.items) <= i and self._next < len(self._todo) and self.items[-1].error > 0:
            self._extend()
        return self.items[i] if i < len(self.items) else None


def allocate(fronts: dict[str, Front], allowance: float) -> dict[str, int]:
    """Index into every layer's front: the fastest start, then the best error removed per ns added until
    the summed error fits ``allowance`` (or no layer can do better)."""
    idx = {k: 0 for k in fronts}
    total = sum(f.get(0).error for f in fronts.values())
    while total > allowance:
        best, gain = None, -1.0
        for k, f in fronts.items():
            cur, nxt = f.get(idx[k]), f.get(idx[k] + 1)
            if nxt is None:
                continue
            gain_k = (cur.error - nxt.error) / max(nxt.ns - cur.ns, 1e-9)
            if gain_k > gain:
                best, gain = k, gain_k
        if best is None:
            break
        f = fronts[best]
        total -= f.get(idx[best]).error - f.get(idx[best] + 1).error
        idx[best] += 1
    return idx


@dataclass
class Result:
    """The mapping of every layer and what it means for the network.

    Attributes
    ----------
    choices : list of Choice
    max_error : float
        The budget (``1 - cosine`` against the float reference on the calibration samples).
    int8_error : float or None
        Measured ``1 - cosine`` of exact int8 arithmetic (None when not needed: no layer loses accuracy).
    predicted_error : float or None
        ``int8_error`` plus the chosen mappings' layer errors.
    met : bool
        Whether the prediction fits the budget.
    """

    choices: list[Choice]
    max_error: float
    int8_error: float | None
    predicted_error: float | None
    met: bool


def map_layers(regions: list[Region], obs: Observation, hw: CIMHardware, wbits: int, ibits: int,
               max_error: float | None, int8_error) -> Result:
    """Choose every layer's mapping (see the module docstring).

    Parameters
    ----------
    regions : list of Region
        The quantised layers.
    obs : Observation
        What calibration saw (the sampled input vectors of every layer).
    hw : CIMHardware
    wbits, ibits : int
    max_error : float or None
        The budget; None: :data:`DEFAULT_MAX_ERROR`; 1 or more: unconstrained (the fastest mappings).
    int8_error : callable
        ``() -> float``: the measured error of exact int8 arithmetic (called only when needed).

    Returns
    -------
    Result
    """
    # The measurement is many small matrix products: BLAS threads only add synchronisation, and on a
    # busy machine spinning threads slow it several times over (same numbers: the sums are exact integers).
    with X.one_blas_thread():
        return _map_layers(regions, obs, hw, wbits, ibits, max_error, int8_error)


def _map_layers(regions, obs, hw, wbits, ibits, max_error, int8_error) -> Result:
    budget = DEFAULT_MAX_ERROR if max_error is None else float(max_error)
    est = Estimator(hw, wbits, ibits)
    for r in regions:
        if not obs.vectors.get(r.name):
            raise ValueError(f"region {r.name}: no calibration vectors; run Calibrate on this module first")
    # The layers are measured independently (each front's entries depend on its layer only), so they are
    # measured on threads, largest weight matrix first: the same fronts, hence the same choice, as in a loop.
    big_first = sorted(regions, key=lambda r: -r.w_int.size if r.w_int is not None else 0)
    made = dict(zip([r.name for r in big_first], thread_map(
        lambda r: Front(LayerProbe(r, obs.vectors[r.name], hw, wbits, ibits), est), big_first)))
    fronts = {r.name: made[r.name] for r in regions}
    lossy = sum(f.get(0).error for f in fronts.values()) > 0
    e_q = None
    if lossy and budget < 1.0:
        e_q = float(int8_error())
        allowance = max(0.0, budget - e_q)
        if sum(f.get(0).error for f in fronts.values()) > allowance:  # allocate's first step asks every layer
            thread_map(lambda f: f.get(1), made.values())
        idx = allocate(fronts, allowance)
    else:
        idx = {k: 0 for k in fronts}
    choices = [Choice(r.name, fronts[r.name].get(idx[r.name]), fronts[r.name].get(0), fronts[r.name].tried)
               for r in regions]
    pred = None if e_q is None else e_q + sum(c.chosen.error for c in choices)
    return Result(choices, budget, e_q, pred, pred is None or pred <= budget)


# ============================================================================ exact int8 network


def emulate(r: Region, xs: list[np.ndarray], wbits: int, ibits: int) -> np.ndarray:
    """A region computed with exact int8 arithmetic (no ADC): what a lossless chip gives."""
    if r.kind == CONV2D:
        c = r.conv
        xq = quantize_codes(xs[0], r.x_scale, r.x_zero, ibits, r.x_signed).astype(np.float32)  # exact codes
        cols = im2col(xq, c["kernel"], c["strides"], c["padding"], c["dilation"], r.x_zero)
        wsum = r.w_int.sum(axis=0, dtype=np.float64) if r.x_zero else None
        y = dequantize(X.exact_matmul(cols, r.w_int), r.x_scale, r.x_zero, wsum, r.w_scale, r.bias)
        n, oc, oh, ow = r.out_shape
        y = y.reshape(n, oh, ow, oc).transpose(0, 3, 1, 2)
    elif r.kind == MATMUL:
        xq = quantize_codes(xs[0], r.x_scale, r.x_zero, ibits, r.x_signed)
        wsum = r.w_int.sum(axis=0, dtype=np.float64) if r.x_zero else None
        y = dequantize(X.exact_matmul(xq, r.w_int), r.x_scale, r.x_zero, wsum, r.w_scale, r.bias)
    else:
        xq = quantize_codes(xs[0], r.x_scale, r.x_zero, ibits, r.x_signed).astype(np.float64)
        yq = quantize_codes(xs[1], r.y_scale, 0, wbits, True).astype(np.float64)
        wsum = yq.sum(axis=-2, keepdims=True)
        y = dequantize(np.matmul(xq, yq), r.x_scale * r.y_scale, r.x_zero, wsum)
    return y.reshape(r.out_shape)


def int8_network_error(regions: dict[str, Region], obs: Observation, wbits: int, ibits: int) -> float:
    """``1 - cosine`` of the network with every region in exact int8 arithmetic (:func:`emulate`), against
    the float outputs calibration recorded, over the calibration samples."""
    outs = obs.runner.run(obs.inputs, lambda name, xs: emulate(regions[name], xs, wbits, ibits))
    got = np.concatenate([np.ravel(a) for sample in outs for a in sample])
    ref = np.concatenate([np.ravel(a) for sample in obs.outputs for a in sample])
    return cosine_error(got, ref)

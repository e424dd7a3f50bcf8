"""Bit-accurate model of crossbar arrays (the physics the simulator executes).

Weights are stored as cell-level bit slices:

* ``differential`` encoding: ``w = w+ - w-`` with magnitudes in
  ``[0, 2^(b-1) - 1]`` on separate bitlines, ``ceil((b-1)/cell_bits)`` cells each;
* ``offset`` encoding: ``u = w + 2^(b-1)`` in ``[0, 2^b - 1]`` on
  ``ceil(b/cell_bits)`` cells, the offset removed digitally as
  ``2^(b-1) * sum(x)``;
* ``twos`` encoding: the ``b - 1`` low bits of the two's complement code on
  ``ceil((b-1)/cell_bits)`` cells and the sign bit on one more cell whose
  bitline is recombined with weight ``-2^(b-1)`` (the negative most
  significant slice; no digital correction).

Signed input codes ``x`` in ``[-(2^(b-1)-1), 2^(b-1)-1]`` are applied
(:func:`mvm_signed`, ``crossbar.input_encoding``) as

* ``phases``: two unsigned passes of ``b - 1`` bits, ``max(x, 0)`` then
  ``max(-x, 0)``, subtracted digitally;
* ``offset``: one unsigned pass of ``u = x + 2^(b-1)`` (``b`` bits), minus
  ``2^(b-1)`` times the column sums of the weights (digital);
* ``twos``: the ``b - 1`` low bits of the two's complement code bit-serially,
  then the sign bit in one more input step recombined with weight
  ``-2^(b-1)``.

Which encodings a chip supports is stated by its hardware file
(``crossbar.weight_encodings``, ``crossbar.input_encodings``); the compiler
chooses per layer (:mod:`tvm_cim.compiler.accuracy`).

Inputs are unsigned codes applied bit-serially, ``dac_bits`` at a time.  Each
read step drives ``rows_active`` wordlines (a region may drive fewer:
:meth:`CIMHardware.driving`); every bitline's analogue sum over those rows
is converted by its ADC.

The ADC model
-------------
A conversion maps the analogue sum ``s >= 0`` of one bitline in one read
step (integer units of one cell level times one input level) to

    ``q = min(floor(s / LSB + 1/2), 2^adc_bits - 1) * LSB``

* **levels**: ``2^adc_bits`` codes, ``0 .. 2^adc_bits - 1``;
* **range**: ``[0, (2^adc_bits - 1) * LSB]``; sums are never negative
  (cells and inputs are unsigned, signs are handled digitally);
* **rounding**: to the nearest multiple of the LSB, ties up;
* **saturation**: sums above the range give the top code.

The LSB (always a power of two, so shift-and-add stays exact digital logic):

* ``adc_mode = "clip"``: one unit (a converter whose levels match the cell
  levels, saturating above);
* ``adc_mode = "scale"``: the smallest ``2^e`` with ``(2^adc_bits - 1) * 2^e``
  covering the largest sum the driven rows can produce
  (:func:`adc_lsb`);
* programmed (``crossbar.adc_range = "array"`` or ``"column"``): the LSB the
  compiler calibrated on the calibration samples' partial sums
  (:func:`programmed_lsb`), one per layer or one per bitline, carried by the
  program (``adc_lsb`` attribute, ``%adclsb`` constant).

Against the papers the presets cite: ISAAC (8-bit ADC over 128 rows of 2-bit
cells and 1-bit inputs; its data encoding keeps sums within the ADC) and the
CIM-MLC baseline of 8 rows are lossless here; PUMA's 8-bit ADC on 128 rows
of 2-bit cells saturates only above 255 (``clip``); PRIME's 6-bit sense
amplifiers with precision control, which keep the chosen most significant
bits of a result, are the ``array``-programmable range over 64 rows of 4-bit
cells and 3-bit inputs; Jia et al.'s charge-domain columns normalise the sum
of the driven rows to an 8-bit ADC (``scale``); Dynaplasia and Jain et al.
are modelled with converters that cover every sum.

Device non-idealities (:class:`Nonideal`, off by default, seeded): each
cell's conductance varies around its level (``conductance_sigma``, relative,
drawn once when the crossbar is programmed), wordline ``r`` of an array
delivers ``1 - ir_drop * r`` of its current (IR drop as a per-row
attenuation), and every bitline's ADC has an input offset (``adc_offset``
LSBs, drawn once per ADC); then ``q = min(max(floor((s + offset) / LSB + 1/2),
0), 2^adc_bits - 1) * LSB``.  The compiler maps for the ideal device; the
simulator applies these when asked (``Options.nonideal``) and reports them.

Shift-and-add recombines input steps and weight slices.  When no conversion
can be altered (the largest possible sum fits the ADC with an LSB of one), the
result equals the integer matrix product exactly and :func:`mvm` computes it
as one product (``exact_shortcut``); the bitwise path gives the same numbers
and is what tests compare against the integer reference.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import asdict, dataclass

import numpy as np
from threadpoolctl import ThreadpoolController

from ..common.runtime import thread_map
from ..hardware.schema import CIMHardware

# Bound the working set of the bitwise path (bytes of float32 partial sums).
# 4 MB: a chunk's sums stay in the caches between the product and the passes that convert and reduce them
# (VGG-19 on prime, one thread: 16 MB chunks took 1.1-2.3x as long on its bit-serial blocks; 1 MB chunks
# make more, smaller products).
_CHUNK_BYTES = 4 * 2**20
#: The share of (tile, row group, weight slice) blocks that no bound proves below which :func:`mvm` computes
#: the integer product and converts only those blocks (:func:`_corrections`); above it every bitline is
#: converted bit-serially in one batched product (the same results).
_SPLIT_MAX_CONVERTED = 0.75
_BLAS: list = []  # the ThreadpoolController, made on first use (finding the libraries costs about a millisecond)


def one_blas_thread():
    """Context manager: BLAS runs on one thread inside it.

    The simulator's products are many small batched matrix products: BLAS
    threads add synchronisation, and on a busy machine a spinning thread makes
    a product many times slower (a 1 ms product of the ResNet-18 stem on PRIME
    took 30-300 ms with two threads at a load of 5 on 2 cores).  The results
    are the same: each output element is one dot product on one thread
    (OpenBLAS splits a product over its output rows and columns, not over the
    summed dimension).
    """
    if not _BLAS:
        _BLAS.append(ThreadpoolController())
    return _BLAS[0].limit(limits=1, user_api="blas")


@dataclass(frozen=True)
class Nonideal:
    """Seeded device non-idealities the simulator may apply (all zero: the ideal device).

    Attributes
    ----------
    conductance_sigma : float
        Relative standard deviation of every cell's conductance (programming variation).
    ir_drop : float
        Attenuation per wordline position: row ``r`` of an array contributes ``(1 - ir_drop * r)``.
    adc_offset : float
        Standard deviation of every bitline ADC's input offset, in LSBs.
    seed : int
        Seed of the draws (each crossbar draws from ``(seed, crossbar id)``).
    """

    conductance_sigma: float = 0.0
    ir_drop: float = 0.0
    adc_offset: float = 0.0
    seed: int = 0

    def __post_init__(self):
        for k in ("conductance_sigma", "ir_drop", "adc_offset"):
            if not getattr(self, k) >= 0:
                raise ValueError(f"non-ideality {k} must be >= 0, got {getattr(self, k)}")

    @property
    def active(self) -> bool:
        """Whether anything departs from the ideal device."""
        return bool(self.conductance_sigma or self.ir_drop or self.adc_offset)

    def describe(self) -> dict:
        """The settings, for reports."""
        return asdict(self)

    @classmethod
    def parse(cls, text: str) -> "Nonideal":
        """From ``"conductance=0.02,ir_drop=1e-4,adc_offset=0.5,seed=0"`` (any subset)."""
        names = {"conductance": "conductance_sigma", "conductance_sigma": "conductance_sigma",
                 "ir_drop": "ir_drop", "adc_offset": "adc_offset", "seed": "seed"}
        kw = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            k, _, v = part.partition("=")
            if k.strip() not in names or not v:
                raise ValueError(f"non-idealities: expected key=value with keys {sorted(names)}, got {part!r}")
            kw[names[k.strip()]] = int(v) if k.strip() == "seed" else float(v)
        return cls(**kw)

    def _rng(self, xb: int, what: str) -> np.random.Generator:
        return np.random.default_rng([self.seed, int(xb), zlib.crc32(what.encode())])

    def program(self, cells: np.ndarray, xb: int) -> np.ndarray:
        """The cells crossbar ``xb`` holds, ``(..., rows, S, P, n)``, as the device realises them."""
        out = cells.astype(np.float32)
        if self.conductance_sigma:
            var = self._rng(xb, "g").standard_normal(cells.shape[-4:]).astype(np.float32)
            out = out * np.maximum(0.0, 1.0 + self.conductance_sigma * var)
        if self.ir_drop:
            rows = cells.shape[-4]
            att = np.maximum(0.0, 1.0 - self.ir_drop * np.arange(rows, dtype=np.float32))
            out = out * att[:, None, None, None]
        return out

    def offsets(self, shape: tuple, xb: int) -> np.ndarray:
        """ADC input offsets of crossbar ``xb``'s bitlines (LSBs), shape ``(S, P, n)``."""
        return (self.adc_offset * self._rng(xb, "adc").standard_normal(shape)).astype(np.float32)


def adc_lsb(hw: CIMHardware, rows: int | None = None) -> int:
    """ADC least significant bit in units of one cell-times-input-step product.

    In ``scale`` mode the ADC's range is programmed for the largest sum the
    driven rows can produce (``rows``, at most ``rows_active``).
    """
    xb = hw.crossbar
    if xb.adc_mode == "clip":
        return 1
    full = max_partial_sum(hw, rows)
    levels = 2**xb.adc_bits - 1
    return 1 << max(0, math.ceil(math.log2(max(1.0, full / levels))))


def max_partial_sum(hw: CIMHardware, rows: int | None = None) -> int:
    """Largest value one bitline can accumulate in one read step over ``rows`` driven rows."""
    xb = hw.crossbar
    r = xb.rows_active if rows is None else min(rows, xb.rows_active)
    return r * (2**xb.dac_bits - 1) * (2**xb.cell_bits - 1)


def is_lossless(hw: CIMHardware) -> bool:
    """True if the ADC can never alter a conversion (then MVMs are exact)."""
    return adc_lsb(hw) == 1 and max_partial_sum(hw) <= 2**hw.crossbar.adc_bits - 1


def encode(w: np.ndarray, hw: CIMHardware, bits: int) -> np.ndarray:
    """Program signed integer weights into cell values.

    Parameters
    ----------
    w : np.ndarray
        Integer weights of shape ``(..., rows, n)`` in ``[-(2^(b-1)-1), 2^(b-1)-1]``.
    hw : CIMHardware
    bits : int
        Weight precision of the program (at most ``crossbar.weight_bits``).

    Returns
    -------
    np.ndarray
        float32 cells of shape ``(..., rows, S, P, n)``: ``S`` slices (least
        significant first), ``P`` = 2 (positive, negative) or 1 (offset).
    """
    xb = hw.crossbar
    c, s_n = xb.cell_bits, hw.weight_slices(bits)
    mask = (1 << c) - 1
    w = w.astype(np.int32)
    lim = 2 ** (bits - 1) - 1
    w = np.clip(w, -lim, lim)
    if xb.weight_encoding == "differential":
        planes = np.stack([np.maximum(w, 0), np.maximum(-w, 0)], axis=-2)  # (..., rows, 2, n)
    elif xb.weight_encoding == "twos":
        low = (w & ((1 << (bits - 1)) - 1))[..., None, :]  # the bits - 1 low bits of the two's complement code
        cells = [(low >> (s * c)) & mask for s in range(s_n - 1)] + [(w < 0).astype(np.int32)[..., None, :]]
        return np.stack(cells, axis=-3).astype(np.float32)
    else:
        planes = (w + 2 ** (bits - 1))[..., None, :]  # (..., rows, 1, n)
    cells = np.stack([(planes >> (s * c)) & mask for s in range(s_n)], axis=-3)
    return cells.astype(np.float32)


def _slice_weights(hw: CIMHardware, bits: int) -> np.ndarray:
    """Recombination weight of each (slice, plane): ``±2^(s*cell_bits)`` (``-2^(bits-1)`` for a sign slice)."""
    xb = hw.crossbar
    s = 2.0 ** (xb.cell_bits * np.arange(hw.weight_slices(bits)))
    if xb.weight_encoding == "differential":
        return np.stack([s, -s], axis=1)  # (S, 2)
    if xb.weight_encoding == "twos":  # the last slice is the sign bit, worth -2^(bits-1)
        s[-1] = -(2.0 ** (bits - 1))
    return s[:, None]  # (S, 1)


def decode(cells: np.ndarray, hw: CIMHardware, bits: int) -> np.ndarray:
    """Inverse of :func:`encode`: the signed integer weights the cells hold."""
    w = np.einsum("...rspn,sp->...rn", cells.astype(np.float64), _slice_weights(hw, bits))
    if hw.crossbar.weight_encoding == "offset":
        w = w - 2 ** (bits - 1)
    return np.rint(w).astype(np.int64)


def programmed_lsb(peak, hw: CIMHardware):
    """The LSB a programmable ADC range gets for partial sums up to ``peak``.

    The smallest power of two ``2^e`` (at least one unit) with
    ``(2^adc_bits - 1) * 2^e >= peak``: the calibrated range covers the
    largest partial sum observed on the calibration samples, and larger sums
    saturate.  Works on arrays (one LSB per bitline).
    """
    levels = 2**hw.crossbar.adc_bits - 1
    ratio = np.maximum(np.asarray(peak, dtype=np.float64), 1.0) / levels
    e = np.maximum(0, np.ceil(np.log2(np.maximum(ratio, 1.0)) - 1e-12)).astype(np.int64)
    out = np.left_shift(1, e)
    return int(out) if np.ndim(out) == 0 else out


def exact(hw: CIMHardware, lsb=None, rows: int | None = None) -> bool:
    """True if no conversion of tiles of ``rows`` rows can be altered with this ADC setting.

    ``lsb`` None: the fixed rule (:func:`adc_lsb`); ``rows`` None: ``rows_active``.
    """
    if lsb is None:
        lsb = adc_lsb(hw, rows)
    return bool(np.all(np.asarray(lsb) == 1)) and max_partial_sum(hw, rows) <= 2**hw.crossbar.adc_bits - 1


def _adc(part: np.ndarray, hw: CIMHardware, lsb, offset=None) -> np.ndarray:
    """Convert analogue bitline sums: round to the nearest multiple of ``lsb`` (ties up), saturate at the top code.

    ``offset``: ADC input offsets in LSBs (a non-ideal device: sums may be fractional, every code is
    rounded, and codes below zero clamp at zero).
    """
    top = float(2**hw.crossbar.adc_bits - 1)
    if offset is not None:
        q = np.floor(part / lsb + offset + 0.5)
        np.clip(q, 0.0, top, out=q)
        q *= lsb
        return q
    if np.ndim(lsb) == 0 and lsb == 1:  # integer sums: nothing to round
        return np.minimum(part, top, out=part)
    q = np.floor(part / lsb + 0.5)
    np.minimum(q, top, out=q)
    q *= lsb
    return q


def _row_groups(x: np.ndarray, cg: np.ndarray, ra: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Inputs ``x`` ``(T, Bt, V, R)`` as int32 and cells ``cg`` ``(T, Bt, R, K)`` padded with zero rows to whole
    row groups of ``ra`` rows: ``(inputs (T, Bt, V, G*ra), cells (T, Bt, G, ra, K), G)``."""
    t_n, bt, _, r = x.shape
    g_n = -(-r // ra)
    pad = g_n * ra - r
    xi = x.astype(np.int32)
    if pad:
        xi = np.concatenate([xi, np.zeros(x.shape[:-1] + (pad,), np.int32)], axis=-1)
        cg = np.concatenate([cg, np.zeros((t_n, bt, pad, cg.shape[-1]), cg.dtype)], axis=2)
    return xi, cg.reshape(t_n, bt, g_n, ra, cg.shape[-1]), g_n


def _conversions(x: np.ndarray, cells: np.ndarray, hw: CIMHardware, input_bits: int):
    """The analogue sums every ADC converts, chunk of vectors by chunk.

    Yields ``(v0, v1, b, part)``: input step ``b`` of vectors ``[v0, v1)``,
    ``part`` of shape ``(T, Bt, G, v1 - v0, S*P*n)`` -- one value per tile,
    batch, row group of ``rows_active`` rows, vector and bitline.
    """
    xb = hw.crossbar
    t_n, bt, v, r = x.shape
    s_n, p_n, n = cells.shape[-3:]
    ra, d = xb.rows_active, xb.dac_bits
    xi, cg, g_n = _row_groups(x, cells.reshape(t_n, bt, r, s_n * p_n * n), ra)  # cg: (T, Bt, G, ra, SPn)
    mask = (1 << d) - 1
    per_vec = t_n * bt * g_n * s_n * p_n * n * 4
    chunk = max(1, _CHUNK_BYTES // max(1, per_vec))
    for v0 in range(0, v, chunk):
        v1 = min(v, v0 + chunk)
        xv = xi[:, :, v0:v1].reshape(t_n, bt, v1 - v0, g_n, ra).transpose(0, 1, 3, 2, 4)  # (T,Bt,G,V,ra)
        for b in range(hw.input_steps(input_bits)):
            xs = ((xv >> (b * d)) & mask).astype(np.float32)
            yield v0, v1, b, np.matmul(xs, cg)  # (T, Bt, G, V, SPn): one conversion per element


def bitline_peaks(x: np.ndarray, cells: np.ndarray, hw: CIMHardware, input_bits: int) -> np.ndarray:
    """Largest analogue sum each bitline produces over every read step of these inputs.

    What a programmable ADC range is calibrated on.  Shapes as in
    :func:`mvm`; returns ``(T, S, P, n)``.
    """
    xb = hw.crossbar
    t_n, bt, v, r = x.shape
    spn = int(np.prod(cells.shape[-3:]))
    ra, d = xb.rows_active, xb.dac_bits
    xi, cg, g_n = _row_groups(x, cells.reshape(t_n, bt, r, spn), ra)
    mask = (1 << d) - 1
    steps = hw.input_steps(input_bits)

    shifts = (d * np.arange(steps, dtype=np.int32))[:, None, None]  # (B, 1, 1)

    def peaks(chunk):  # the largest sum of each bitline of tiles [t0, t1) over vectors [v0, v1) and every step
        t0, t1, v0, v1 = chunk
        xv = xi[t0:t1, :, v0:v1].reshape(t1 - t0, bt, v1 - v0, g_n, ra).transpose(0, 1, 3, 2, 4)
        xs = ((xv[:, :, :, None] >> shifts) & mask).astype(np.float32).reshape(t1 - t0, bt, g_n, -1, ra)
        return chunk, np.matmul(xs, cg[t0:t1]).max(axis=(1, 2, 3))  # (every step in one product: one read of cg)

    peak = np.zeros((t_n, spn), dtype=np.float64)
    for (t0, t1, _, _), top in thread_map(peaks, _chunks(t_n, v, bt * g_n * steps * spn * 4)):
        np.maximum(peak[t0:t1], top, out=peak[t0:t1])
    return peak.reshape((t_n,) + cells.shape[-3:])


def proven_groups(cells: np.ndarray, hw: CIMHardware) -> np.ndarray:
    """Which (tile, row group, bitline) the ADC leaves unaltered whatever the inputs, shape ``(T, G, K)``.

    The bound of :func:`_exact_groups` with every row driven at the top DAC
    level: a bitline's cells summed over a row group, times that level, within
    the top code.  It depends on the cells only, so a caller reading the same
    cells again computes it once; the LSB is checked per read.  ``cells`` as
    :func:`mvm` takes them.
    """
    xb = hw.crossbar
    t_n, bt, r = cells.shape[:3]
    cg = cells.reshape(t_n, bt, r, -1)
    ra = xb.rows_active
    g_n = max(1, -(-r // ra))
    if g_n * ra != r:
        cg = np.concatenate([cg, np.zeros((t_n, bt, g_n * ra - r, cg.shape[-1]), dtype=cg.dtype)], axis=2)
    if cg.dtype.kind not in "u" and (cg < 0).any():  # (cells are levels: a negative one adds nothing to the bound)
        cg = np.maximum(cg, 0)
    sums = cg.reshape(t_n, bt, g_n, ra, -1).sum(axis=3, dtype=np.float64).max(axis=1)
    return sums * ((1 << xb.dac_bits) - 1) <= float(2**xb.adc_bits - 1)


def _exact_groups(x: np.ndarray, cg: np.ndarray, hw: CIMHardware, input_bits: int, lsb,
                  proven: np.ndarray | None = None) -> np.ndarray:
    """Which (tile, row group, bitline) the ADC provably leaves unaltered on these inputs, shape ``(T, G, K)``.

    A bound, not a measurement: in a read step, row ``r`` is driven with at
    most ``min(2^dac_bits - 1, max_v x[v, r])``, so a bitline's sum over a row
    group (``rows_active`` rows) never exceeds ``sum_r that level * cell[r]``.
    When that bound is within the top code and the bitline's LSB is one, every
    conversion of the bitline in that group returns its sum unchanged.
    ``cg``: integer cells ``(T, Bt, R, K)``; ``lsb``: one value or
    ``(T, 1, 1, 1, K)``; ``proven``: :func:`proven_groups` of these cells, if
    the caller has it (when it proves every bitline, these inputs need no bound).
    """
    xb = hw.crossbar
    t_n, _, v, r = x.shape
    k = cg.shape[-1]
    ra = xb.rows_active
    g_n = max(1, -(-r // ra))
    if np.ndim(lsb):
        lsb_ok = np.asarray(lsb).reshape(t_n, 1, k) == 1
    elif lsb != 1:
        return np.zeros((t_n, g_n, k), dtype=bool)
    else:
        lsb_ok = np.ones((t_n, 1, k), dtype=bool)
    if v == 0 or r == 0:
        return np.broadcast_to(lsb_ok, (t_n, g_n, k)).copy()
    top = 2**xb.adc_bits - 1
    level = min((1 << xb.dac_bits) - 1, (1 << input_bits) - 1)
    if min(r, ra) * level * (2**xb.cell_bits - 1) <= top:  # every cell at its top level still fits
        return np.broadcast_to(lsb_ok, (t_n, g_n, k)).copy()
    if proven is not None and proven.all():  # these cells at the top drive level: so at any lower one
        return np.broadcast_to(lsb_ok, (t_n, g_n, k)).copy()
    xm = np.minimum(x.max(axis=(1, 2)), level).astype(np.float32)  # (T, R): the largest level each row is driven with
    bound = np.empty((t_n, g_n, k), dtype=np.float32)
    full = r // ra  # per row group: the drive levels times the cells, summed over rows (the full groups at once)
    if full:
        xg = xm[:, None, : full * ra].reshape(t_n, 1, full, 1, ra)
        bound[:, :full] = np.matmul(xg, cg[:, :, : full * ra].reshape(t_n, -1, full, ra, k)).max(axis=(1, 3))
    if full < g_n:
        bound[:, full] = np.matmul(xm[:, None, None, full * ra :], cg[:, :, full * ra :]).max(axis=(1, 2))
    return (bound <= float(top)) & lsb_ok


def _corrections(x: np.ndarray, cg: np.ndarray, hw: CIMHardware, input_bits: int, lsb, ok: np.ndarray,
                 sw: np.ndarray, n: int, out: np.ndarray) -> None:
    """Add to ``out`` (float64 ``(T, Bt, V, n)``, holding the integer product) what the ADC changes.

    The bitlines are taken in blocks of ``n`` (one weight slice and plane).  Where ``ok`` (``(T, G, K)``,
    :func:`_exact_groups`) does not prove every bitline of a block in a (tile, row group), the block is
    converted bit-serially there (all input steps of a chunk of vectors in one batched product, as
    :func:`_bit_serial`): every conversion minus its analogue sum, shift-and-added over the input steps
    (weights ``2^(b * dac_bits)``) and weighted with the block's slice weight ``sw``.  A proven bitline
    converts to its sum (nothing to add).  Every value is an integer that float64 holds exactly, so
    ``out`` ends equal to the shift-and-add of every conversion.
    """
    xb = hw.crossbar
    t_n, bt, v, r = x.shape
    k = cg.shape[-1]
    sp = k // n
    ra, d = xb.rows_active, xb.dac_bits
    xi, cg, g_n = _row_groups(x, cg, ra)  # (g_n == ok.shape[1])
    cb = cg.reshape(t_n, bt, g_n, ra, sp, n)
    bad = (~ok).reshape(t_n, g_n, sp, n).any(axis=3)  # (T, G, SP): blocks to convert
    steps = hw.input_steps(input_bits)
    shifts = (d * np.arange(steps, dtype=np.int32))[:, None, None]  # (B, 1, 1)
    step_w = 2.0 ** (d * np.arange(steps, dtype=np.float64))
    mask = (1 << d) - 1
    top = float(2**xb.adc_bits - 1)
    lsb_b = np.asarray(lsb).reshape(t_n, sp, n) if np.ndim(lsb) else None
    # a conversion differs from its sum by at most the larger of the two: float32 adds the groups' exactly
    exact32 = g_n * (ra * mask * float(2**xb.cell_bits - 1) + top * float(np.max(lsb))) < 2.0**24
    plan = []  # per block: None (every tile and group) or the (tile, group) pairs to convert
    for s in range(sp):
        m = int(bad[:, :, s].sum())
        if m:
            plan.append((s, None if 2 * m > t_n * g_n else np.nonzero(bad[:, :, s])))
    pairs_by_tile = [None if p is None else np.searchsorted(p[0], np.arange(t_n + 1)) for _, p in plan]

    def convert(chunk):  # the chunk's tiles [t0, t1) and vectors [v0, v1): out there gets its corrections
        t0, t1, v0, v1 = chunk
        vc = v1 - v0
        xv = xi[t0:t1, :, v0:v1].reshape(t1 - t0, bt, vc, g_n, ra).transpose(0, 1, 3, 2, 4)  # (T', Bt, G, V, ra)
        xs = ((xv[:, :, :, None] >> shifts) & mask).astype(np.float32).reshape(t1 - t0, bt, g_n, steps * vc, ra)
        for (s, pairs), at in zip(plan, pairs_by_tile):
            if pairs is None:
                a = np.matmul(xs, cb[t0:t1, :, :, :, s])  # (T', Bt, G, B*V, n): the analogue sums
                tiles = None
            else:
                ti, gi = pairs[0][at[t0] : at[t1]], pairs[1][at[t0] : at[t1]]
                if not len(ti):
                    continue
                a = np.matmul(xs[ti - t0, :, gi], cb[ti, :, gi, :, s])  # (M, Bt, B*V, n)
                tiles = ti
            summed = False  # conv summed over the row groups of each tile
            if lsb_b is None and lsb == 1:  # min(a, top) - a = top - max(a, top): two passes over the sums
                np.maximum(a, top, out=a)
                if tiles is None and exact32:  # summed over the groups first: sum(top - max) = G * top - sum(max)
                    conv, summed = np.subtract(g_n * top, a.sum(axis=2), dtype=np.float32), True
                else:
                    conv = np.subtract(top, a, out=a)
            else:  # round to the nearest multiple of the LSB (ties up), saturate at the top code (as _adc), - a
                if lsb_b is None:
                    lb = lsb
                elif tiles is None:
                    lb = lsb_b[t0:t1, None, None, None, s]
                else:
                    lb = lsb_b[tiles, None, None, s]
                conv = np.divide(a, lb, dtype=np.result_type(a, lb))
                conv += 0.5
                np.floor(conv, out=conv)
                np.minimum(conv, top, out=conv)
                conv *= lb
                conv -= a
            if not conv.any():  # (the usual case: no conversion of the block saturates or rounds)
                continue
            if tiles is None and not summed:  # sum the groups of each tile (integers: exact in float32 below 2^24)
                conv = conv.sum(axis=2, dtype=np.float32 if conv.dtype == np.float32 and exact32 else np.float64)
            delta = np.einsum("mbsvn,s->mbvn", conv.reshape(len(conv), bt, steps, vc, n), step_w)
            delta *= sw[s]
            if tiles is None:
                out[t0:t1, :, v0:v1] += delta
            else:  # the pairs are in tile order: one sum per tile
                uniq, first = np.unique(tiles, return_index=True)
                if len(uniq) < len(tiles):
                    delta = np.add.reduceat(delta, first, axis=0)
                out[uniq, :, v0:v1] += delta

    thread_map(convert, _chunks(t_n, v, bt * g_n * steps * (n + ra) * 8))  # (each writes its own part of out)


def _chunks(t_n: int, v: int, per_tv: int) -> list[tuple[int, int, int, int]]:
    """Chunks ``(t0, t1, v0, v1)`` of tiles and vectors of about :data:`_CHUNK_BYTES` (``per_tv``: bytes per
    tile and vector): every vector of as many tiles as fit, else part of one tile's vectors.

    The batched products are one per (tile, row group) over a chunk's vector rows, so chunks of few vectors
    make many tiny products; chunks of whole tiles keep them as large as the memory allows.  The chunks
    cover disjoint parts of the results, so they can run on threads (:func:`thread_map`).
    """
    if v * per_tv <= _CHUNK_BYTES:
        tc, vc = max(1, _CHUNK_BYTES // max(1, v * per_tv)), max(1, v)
    else:
        tc, vc = 1, max(1, _CHUNK_BYTES // max(1, per_tv))
    return [(t0, min(t_n, t0 + tc), v0, min(v, v0 + vc)) for t0 in range(0, t_n, tc) for v0 in range(0, v, vc)]


def _bit_serial(x: np.ndarray, cg: np.ndarray, hw: CIMHardware, input_bits: int, lsb) -> np.ndarray:
    """Every conversion of bitlines ``cg`` (integer cells ``(T, Bt, R, K)``), shift-and-added over input steps.

    All input steps of a chunk of vectors go through one batched product
    (tiles x batch x row groups), the ADC converts every element, and the
    steps are recombined with their weights ``2^(b * dac_bits)``.  ``lsb``:
    one value or ``(T, 1, 1, 1, K)``.  Returns float64 ``(T, Bt, V, K)``
    (integers).
    """
    return _bit_serial_lsbs(x, cg, hw, input_bits, [lsb])[0]


def _bit_serial_lsbs(x: np.ndarray, cg: np.ndarray, hw: CIMHardware, input_bits: int, lsbs: list) -> list:
    """:func:`_bit_serial` for several ADC settings ``lsbs`` of the same bitlines: the analogue sums are
    computed once and converted with each setting (the same values as one call per setting)."""
    xb = hw.crossbar
    t_n, bt, v, r = x.shape
    k = cg.shape[-1]
    ra, d = xb.rows_active, xb.dac_bits
    xi, cg, g_n = _row_groups(x, cg, ra)
    steps = hw.input_steps(input_bits)
    shifts = (d * np.arange(steps, dtype=np.int32))[:, None, None]  # (B, 1, 1)
    step_w = 2.0 ** (d * np.arange(steps, dtype=np.float64))
    mask = (1 << d) - 1
    top = float(2**xb.adc_bits - 1)
    outs = [np.empty((t_n, bt, v, k), dtype=np.float64) for _ in lsbs]
    lsb_maxes = [float(np.max(lsb)) for lsb in lsbs]

    def convert(chunk):  # tiles [t0, t1) and vectors [v0, v1) of every output
        t0, t1, v0, v1 = chunk
        tc, vc = t1 - t0, v1 - v0
        xv = xi[t0:t1, :, v0:v1].reshape(tc, bt, vc, g_n, ra).transpose(0, 1, 3, 2, 4)  # (T', Bt, G, V, ra)
        xs = ((xv[:, :, :, None] >> shifts) & mask).astype(np.float32)  # (T', Bt, G, B, V, ra)
        analog = np.matmul(xs.reshape(tc, bt, g_n, steps * vc, ra), cg[t0:t1])  # one conversion per element
        for lsb, out, lsb_max in zip(lsbs, outs, lsb_maxes):
            if np.ndim(lsb) and len(lsb) == t_n:  # (one per tile: this chunk's)
                lsb = lsb[t0:t1]
            if not np.ndim(lsb) and lsb == 1:
                part = np.minimum(analog, top, out=analog if len(lsbs) == 1 else None)
            else:  # floor(analog / lsb + 0.5) in the dtype that expression has, without its temporaries
                dt = np.result_type(analog, lsb)
                part = np.divide(analog, lsb, dtype=dt,
                                 out=analog if len(lsbs) == 1 and dt == analog.dtype else None)
                part += 0.5
                np.floor(part, out=part)
                np.minimum(part, top, out=part)
                part *= lsb
            # the converted sums are integers: float32 adds them exactly below 2^24 (the same values)
            exact32 = part.dtype == np.float32 and g_n * top * lsb_max < 2.0**24
            conv = part.sum(axis=2, dtype=None if exact32 else np.float64).reshape(tc, bt, steps, vc, k)
            out[t0:t1, :, v0:v1] = np.einsum("tbsvk,s->tbvk", conv, step_w)

    thread_map(convert, _chunks(t_n, v, bt * g_n * steps * (k + ra) * 8))
    return outs


def mvm(x: np.ndarray, cells: np.ndarray, hw: CIMHardware, weight_bits: int, input_bits: int,
        exact_shortcut: bool | str = True, weights: np.ndarray | None = None, lsb=None,
        offset=None, product: np.ndarray | None = None, proven: np.ndarray | None = None) -> np.ndarray:
    """Bit-serial matrix-vector products on crossbars, vectorised over tiles.

    Parameters
    ----------
    x : np.ndarray
        Unsigned input codes, shape ``(T, Bt, V, R)``: ``T`` crossbar tiles,
        ``Bt`` batch, ``V`` input vectors of ``R`` rows (zero-padded).
    cells : np.ndarray
        Cell values from :func:`encode`, shape ``(T, Bt, R, S, P, n)``.
    hw : CIMHardware
        The chip as the region drives it (:meth:`CIMHardware.driving`): a read
        step sums ``crossbar.rows_active`` rows.
    weight_bits, input_bits : int
        Precision of the program's weights and input codes.
    exact_shortcut : bool or "tile"
        ``True``: one integer product when the ADC provably cannot alter any
        conversion of this hardware setting, otherwise as ``"tile"``.
        ``"tile"``: per tile, row group and bitline, a bound on these inputs
        (:func:`_exact_groups`) proves which conversions are unaltered; the
        integer product of every bitline is computed, and only the blocks
        (tile, row group, weight slice) holding an unproven bitline are
        converted bit-serially, adding what their ADC changes
        (:func:`_corrections`).  ``False``: every conversion bit-serially.
        The three give the same results; the proofs only skip work.
    weights : np.ndarray, optional
        ``decode(cells)`` if the caller has it cached (shortcut only).
    lsb : int or np.ndarray, optional
        The programmed ADC LSB: one value, or one per bitline of every tile,
        shape ``(T, S, P, n)``.  None: the fixed rule of ``adc_mode``
        (:func:`adc_lsb`).
    offset : np.ndarray, optional
        ADC input offsets in LSBs, shape ``(T, S, P, n)`` (a non-ideal device,
        :class:`Nonideal`; the cells may then hold non-integer conductances,
        and every conversion is computed).
    product : np.ndarray, optional
        ``x @ weights`` as float64, shape ``(T, Bt, V, n)``, if the caller has
        it (the shortcuts start from it; it is not modified).
    proven : np.ndarray, optional
        :func:`proven_groups` of ``cells``, if the caller has it cached.

    Returns
    -------
    np.ndarray
        int64 results of shape ``(T, Bt, V, n)``: what the shift-and-add
        units produce after the ADCs.
    """
    xb = hw.crossbar
    t_n, bt, v, r = x.shape
    s_n, p_n, n = cells.shape[-3:]
    if lsb is None:
        lsb = adc_lsb(hw, r)
    elif np.ndim(lsb):
        lsb = np.asarray(lsb, dtype=np.float64).reshape(t_n, 1, 1, 1, s_n * p_n * n)
    if offset is not None:
        offset = np.asarray(offset, dtype=np.float32).reshape(t_n, 1, 1, 1, s_n * p_n * n)
        return _mvm_nonideal(x, cells, hw, weight_bits, input_bits, lsb, offset)
    if exact_shortcut is True and exact(hw, lsb, r):
        return np.rint(_product(x, cells, hw, weight_bits, weights, product)).astype(np.int64)

    sp, spn = s_n * p_n, s_n * p_n * n
    sw = _slice_weights(hw, weight_bits).reshape(sp)
    cg = cells.reshape(t_n, bt, r, spn)
    ok = _exact_groups(x, cg, hw, input_bits, lsb, proven) if exact_shortcut else None
    if ok is not None and (ok.all() or _SPLIT_MAX_CONVERTED * ok[..., 0].size * sp >= (~ok).reshape(
            t_n, -1, sp, n).any(axis=3).sum()):
        # the integer product of every bitline, plus what the ADC changes on the blocks no bound proves
        out = _product(x, cells, hw, weight_bits, weights, product)
        if not ok.all():
            out = out.copy() if out is product else out
            _corrections(x, cg, hw, input_bits, lsb, ok, sw, n, out)
        return np.rint(out).astype(np.int64)
    out = np.zeros((t_n, bt, v, n), dtype=np.float64)
    acc = _bit_serial(x, cg, hw, input_bits, lsb).reshape(t_n, bt, v, sp, n)
    out += np.einsum("tbvsn,s->tbvn", acc, sw)
    if xb.weight_encoding == "offset":
        out -= float(2 ** (weight_bits - 1)) * x.astype(np.float64).sum(axis=-1, keepdims=True)
    return np.rint(out).astype(np.int64)


def _product(x: np.ndarray, cells: np.ndarray, hw: CIMHardware, weight_bits: int, weights, product) -> np.ndarray:
    """The integer product ``x @ decode(cells)`` in float64 (``product`` if given; ``weights`` if given)."""
    if product is not None:
        return product
    w = decode(cells, hw, weight_bits) if weights is None else weights
    return exact_matmul(x, w)


def exact_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` of integer-valued arrays as float64, exactly (``np.matmul`` broadcasting, ``b`` at least 2-D).

    Computed in float32 over slices of the summed dimension short enough that
    no partial sum can reach ``2^24`` (float32 holds every integer below it,
    so whatever order BLAS adds in, every sum is the exact integer), the
    slices added in float64: the float64 product's values (both exact) at half
    its memory traffic, without a float copy of all of ``b`` (VGG-19's first
    classifier layer has 103 M weights).  In float64 when one product of the
    largest magnitudes already reaches ``2^24``.
    """
    k = a.shape[-1]
    top = (max(float(a.max()), -float(a.min())) * max(float(b.max()), -float(b.min()))
           if a.size and b.size else 0.0)
    if top == 0:  # (all zeros, or nothing to sum)
        return np.matmul(np.zeros(a.shape[:-1] + (0,)), np.zeros(b.shape[:-2] + (0, b.shape[-1])))
    step = int(2.0**24 // top)
    if step < 1:
        return np.matmul(a.astype(np.float64), b.astype(np.float64))
    a32 = a.astype(np.float32, copy=False)
    out = None
    for k0 in range(0, k, step):
        part = np.matmul(a32[..., k0 : k0 + step], b[..., k0 : k0 + step, :].astype(np.float32, copy=False))
        if out is None:
            out = part.astype(np.float64)
        else:
            out += part
    return out


def mvm_lsbs(x: np.ndarray, cells: np.ndarray, hw: CIMHardware, weight_bits: int, input_bits: int,
             lsbs: list) -> list[np.ndarray]:
    """:func:`mvm` (``exact_shortcut=True``) of the same inputs and cells under several ADC settings.

    Returns ``[mvm(x, cells, hw, weight_bits, input_bits, lsb=l) for l in lsbs]``, identical values:
    the settings with one LSB above one (where :func:`mvm` proves no bitline and converts every one
    bit-serially) share one analogue product; the others go through :func:`mvm`.
    """
    t_n, bt, v, r = x.shape
    s_n, p_n, n = cells.shape[-3:]
    out: list = [None] * len(lsbs)
    shared = []
    for i, lsb in enumerate(lsbs):
        one = adc_lsb(hw, r) if lsb is None else lsb
        if np.ndim(one) or one == 1 or t_n * s_n * p_n * n == 0:
            out[i] = mvm(x, cells, hw, weight_bits, input_bits, True, lsb=lsb)
        else:
            shared.append((i, one))
    if shared:
        sp = s_n * p_n
        sw = _slice_weights(hw, weight_bits).reshape(sp)
        accs = _bit_serial_lsbs(x, cells.reshape(t_n, bt, r, sp * n), hw, input_bits, [one for _, one in shared])
        for (i, _), acc in zip(shared, accs):
            res = np.zeros((t_n, bt, v, n), dtype=np.float64)
            res += np.einsum("tbvsn,s->tbvn", acc.reshape(t_n, bt, v, sp, n), sw)
            if hw.crossbar.weight_encoding == "offset":
                res -= float(2 ** (weight_bits - 1)) * x.astype(np.float64).sum(axis=-1, keepdims=True)
            out[i] = np.rint(res).astype(np.int64)
    return out


def _mvm_nonideal(x: np.ndarray, cells: np.ndarray, hw: CIMHardware, weight_bits: int, input_bits: int,
                  lsb, offset: np.ndarray) -> np.ndarray:
    """:func:`mvm` on a non-ideal device: every conversion, input step by input step (the float32 sums of
    non-integer conductances keep their order of summation)."""
    xb = hw.crossbar
    t_n, bt, v, r = x.shape
    s_n, p_n, n = cells.shape[-3:]
    d = xb.dac_bits
    sw = _slice_weights(hw, weight_bits).reshape(s_n * p_n, 1)
    out = np.zeros((t_n, bt, v, n), dtype=np.float64)
    acc = None
    for v0, v1, b, part in _conversions(x, cells, hw, input_bits):
        if b == 0:  # shift-and-add over input bits first (per cell slice), then over slices once
            acc = np.zeros((t_n, bt, v1 - v0, s_n * p_n * n), dtype=np.float64)
        part = _adc(part, hw, lsb, offset).sum(axis=2)  # (T, Bt, V, SPn)
        if b:
            part *= float(1 << (b * d))
        acc += part
        if b == hw.input_steps(input_bits) - 1:
            a = acc.reshape(t_n, bt, v1 - v0, s_n * p_n, n)
            out[:, :, v0:v1] = np.matmul(a.transpose(0, 1, 2, 4, 3), sw)[..., 0]
    if xb.weight_encoding == "offset":
        out -= float(2 ** (weight_bits - 1)) * x.astype(np.float64).sum(axis=-1, keepdims=True)
    return np.rint(out).astype(np.int64)


def input_passes(x: np.ndarray, hw: CIMHardware, input_bits: int) -> list[tuple[np.ndarray, int, int]]:
    """The unsigned passes signed input codes make through the crossbars, as ``crossbar.input_encoding`` says.

    Returns
    -------
    list of (codes, bits, factor)
        Unsigned codes of each pass, their bit count, and the digital weight
        the pass's result is recombined with.  ``offset`` also needs
        ``- 2^(b-1) x`` the weight column sums (:func:`mvm_signed`).
    """
    b = input_bits
    x = x.astype(np.int32)
    enc = hw.crossbar.input_encoding
    half = 1 << (b - 1)
    if enc == "phases":
        return [(np.maximum(x, 0), b - 1, 1), (np.maximum(-x, 0), b - 1, -1)]
    if enc == "offset":
        return [(x + half, b, 1)]
    # twos: the low bits, then the sign bit in one more input step (the ADC keeps its range)
    return [(x & (half - 1), b - 1, 1), ((x < 0).astype(np.int32), 1, -half)]


def mvm_signed(x: np.ndarray, cells: np.ndarray, hw: CIMHardware, weight_bits: int, input_bits: int,
               exact_shortcut: bool = True, weights: np.ndarray | None = None, lsb=None, offset=None,
               proven: np.ndarray | None = None) -> np.ndarray:
    """:func:`mvm` of signed input codes, applied as ``hw.crossbar.input_encoding`` says.

    ``x`` holds signed codes in ``[-(2^(b-1)-1), 2^(b-1)-1]`` (``b = input_bits``);
    the other arguments are as in :func:`mvm`.  Every pass the crossbars make
    (:func:`input_passes`) is an unsigned :func:`mvm` whose conversions go
    through the ADC; the recombination of passes is digital and exact.
    """
    res = None
    for codes, bits, factor in input_passes(x, hw, input_bits):
        part = mvm(codes, cells, hw, weight_bits, bits, exact_shortcut, weights, lsb, offset, proven=proven)
        res = factor * part if res is None else res + factor * part
    if hw.crossbar.input_encoding == "offset":
        w = decode(cells, hw, weight_bits) if weights is None else weights
        res -= (1 << (input_bits - 1)) * np.rint(w.astype(np.float64).sum(axis=-2, keepdims=True)).astype(np.int64)
    return res

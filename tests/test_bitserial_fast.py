"""The lossy crossbar product's shortcuts (issue 15): the integer product of every bitline plus what the ADC
changes on the (tile, row group, weight slice) blocks no bound proves equals every conversion made one by one.

The reference is plain int64 numpy written from the ADC's definition (round each row group's analogue sum of one
input step to the nearest multiple of the LSB, ties up, saturate at the top code; shift-and-add over steps;
recombine slices and planes with their digital weights), not the simulator's own bit-serial code.
"""

import dataclasses

import numpy as np
import pytest

import tvm_cim
from tvm_cim.hardware import crossbar


def _slice_weights(hw, bits, s_n, p_n):
    """The digital weight of each (slice, plane), from the encodings' definitions."""
    xb = hw.crossbar
    w = np.array([1 << (s * xb.cell_bits) for s in range(s_n)], dtype=np.int64)
    if xb.weight_encoding == "differential":
        return np.stack([w, -w], axis=1)
    if xb.weight_encoding == "twos":
        w[-1] = -(1 << (bits - 1))
    return w[:, None]


def reference(x, cells, hw, weight_bits, input_bits, lsb):
    """Every conversion, in int64: ``x`` ``(T, Bt, V, R)`` unsigned codes, ``cells`` ``(T, Bt, R, S, P, n)``
    integer cells, ``lsb`` one power of two or one per bitline ``(T, S, P, n)``."""
    xb = hw.crossbar
    t_n, bt, v, r = x.shape
    s_n, p_n, n = cells.shape[-3:]
    k = s_n * p_n * n
    c = np.rint(cells).astype(np.int64).reshape(t_n, bt, r, k)
    lsb = (np.asarray(lsb, np.int64).reshape(t_n, 1, 1, k) if np.ndim(lsb)
           else np.full((t_n, 1, 1, k), lsb, np.int64))
    top = (1 << xb.adc_bits) - 1
    ra, d = xb.rows_active, xb.dac_bits
    acc = np.zeros((t_n, bt, v, k), np.int64)
    xi = x.astype(np.int64)
    for b in range(-(-input_bits // d)):
        digit = (xi >> (b * d)) & ((1 << d) - 1)
        for g0 in range(0, r, ra):
            a = np.einsum("tbvr,tbrk->tbvk", digit[..., g0 : g0 + ra], c[:, :, g0 : g0 + ra])
            code = np.minimum((2 * a + lsb) // (2 * lsb), top)  # floor(a / lsb + 1/2), at most the top code
            acc += (code * lsb) << (b * d)
    out = np.einsum("tbvspn,sp->tbvn", acc.reshape(t_n, bt, v, s_n, p_n, n),
                    _slice_weights(hw, weight_bits, s_n, p_n))
    if xb.weight_encoding == "offset":
        out -= (1 << (weight_bits - 1)) * xi.sum(axis=-1, keepdims=True)
    return out


def _case(name, seed, wmax=127):
    """Tiles of one preset's arrays with inputs from dense to mostly idle rows, and weights from full range to
    small (blocks the bound proves next to ones that saturate)."""
    rng = np.random.default_rng(seed)
    hw = tvm_cim.load(name)
    r = 2 * hw.crossbar.rows_active if hw.crossbar.rows_active <= 128 else hw.crossbar.rows_active
    w = rng.integers(-wmax, wmax + 1, size=(4, 1, r, 16))
    w[1] //= 64
    w[2, :, :, :8] //= 16
    x = rng.integers(0, 256, size=(4, 1, 5, r))
    x[2, :, :, rng.random(r) < 0.9] = 0  # most rows idle for every vector
    x[3] //= 32
    x[3, :, :, rng.random(r) < 0.6] = 0
    return hw, x, crossbar.encode(w, hw, 8), w


@pytest.mark.parametrize("name", ["prime", "pimcomp-c"])
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("programmed", [False, True])
def test_fast_lossy_product_equals_every_conversion(name, seed, programmed):
    """PRIME-like (64-row groups, 3-bit DAC, 4-bit cells, differential) and PIMCOMP-C-like (512-row groups,
    1-bit DAC, 2-bit cells, offset) arrays: the shortcut modes equal the int64 reference, with the fixed ADC
    and with a programmed LSB per bitline (ones and larger powers of two mixed); the bound proves some blocks and
    not others, and the ADC does alter some sums (else the test would not test the shortcut)."""
    hw, x, cells, w = _case(name, seed)
    lsb = crossbar.adc_lsb(hw, x.shape[-1])
    if programmed:
        rng = np.random.default_rng(100 + seed)
        lsb = np.where(rng.random((4,) + cells.shape[-3:]) < 0.5, 1, 1 << rng.integers(1, 4, (4,) + cells.shape[-3:]))
    ref = reference(x, cells, hw, 8, 8, lsb)
    assert not np.array_equal(ref, np.einsum("tbvr,tbrn->tbvn", x, w))  # the ADC alters sums here
    ok = crossbar._exact_groups(x, cells.reshape(x.shape[:2] + (x.shape[-1], -1)), hw, 8,
                                lsb if not np.ndim(lsb) else lsb.reshape(4, 1, 1, 1, -1))
    assert 0 < ok.mean() < 1  # proven and unproven bitlines side by side
    for mode in (False, "tile", True):
        np.testing.assert_array_equal(crossbar.mvm(x, cells, hw, 8, 8, exact_shortcut=mode, lsb=lsb), ref)
        np.testing.assert_array_equal(crossbar.mvm(x, cells, hw, 8, 8, exact_shortcut=mode, lsb=lsb,
                                                   weights=w), ref)
    prod = np.einsum("tbvr,tbrn->tbvn", x, w).astype(np.float64)
    got = crossbar.mvm(x, cells, hw, 8, 8, exact_shortcut="tile", lsb=lsb, product=prod)
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(prod, np.einsum("tbvr,tbrn->tbvn", x, w))  # the caller's product untouched


@pytest.mark.parametrize("seed", [3, 4])
def test_fast_lossy_product_split_row_groups(seed):
    """Tiles whose rows are not a multiple of the row group (a padded last group), several batches."""
    rng = np.random.default_rng(seed)
    hw = tvm_cim.load("prime")
    w = rng.integers(-127, 128, size=(3, 2, 150, 9))
    w[0] //= 32
    x = rng.integers(0, 256, size=(3, 2, 7, 150))
    x[1, :, :, 70:] = 0
    cells = crossbar.encode(w, hw, 8)
    for mode in (False, "tile", True):
        np.testing.assert_array_equal(crossbar.mvm(x, cells, hw, 8, 8, exact_shortcut=mode),
                                      reference(x, cells, hw, 8, 8, 1))


def test_bound_at_the_top_code_is_proven_and_one_above_is_not():
    """A 64-row group of PRIME (top code 255, LSB 1): bitline 0 sums to 256 (one above the top code: the ADC
    clips it to 255), bitline 1 to exactly 255.  The proof must leave the first to the bit-serial path and may
    take the second as its integer sum; a bound loosened by one unit (or a check of ``<`` against the wrong
    side) gives a different result here."""
    hw = tvm_cim.load("prime")
    r = hw.crossbar.rows_active
    x = np.zeros((1, 1, 1, r), np.int64)
    x[..., :36] = 7  # one 3-bit input step: the top level of the DAC
    x[..., 36] = 4
    x[..., 37] = 3
    cells = np.zeros((1, 1, r, 2, 2, 2), np.float32)  # (T, Bt, R, S, P, n): bitlines (slice 0, plane +, column)
    cells[0, 0, :36, 0, 0, :] = 1
    cells[0, 0, 36, 0, 0, 0] = 1  # bitline 0: 36 * 7 + 4 = 256
    cells[0, 0, 37, 0, 0, 1] = 1  # bitline 1: 36 * 7 + 3 = 255
    ok = crossbar._exact_groups(x, cells.reshape(1, 1, r, 8), hw, 3, 1)
    assert not ok[0, 0, 0] and ok[0, 0, 1:].all()
    ref = reference(x, cells, hw, 8, 3, 1)
    np.testing.assert_array_equal(ref[0, 0, 0], [255, 255])
    for mode in (False, "tile", True):
        np.testing.assert_array_equal(crossbar.mvm(x, cells, hw, 8, 3, exact_shortcut=mode), ref)


@pytest.mark.parametrize("name", ["prime", "pimcomp-c"])
def test_conductance_variation_converts_every_sum(name):
    """With conductance variation and ADC offsets (non-integer sums) no bound applies: every shortcut mode
    gives the every-conversion result, and it departs from the ideal device's."""
    hw, x, cells, w = _case(name, 5)
    ni = crossbar.Nonideal(conductance_sigma=0.05, adc_offset=0.3, seed=5)
    real = np.stack([ni.program(cells[t], t) for t in range(len(cells))])
    off = np.stack([ni.offsets(cells.shape[-3:], t) for t in range(len(cells))])
    full = crossbar.mvm(x, real, hw, 8, 8, exact_shortcut=False, offset=off)
    for mode in ("tile", True):
        np.testing.assert_array_equal(crossbar.mvm(x, real, hw, 8, 8, exact_shortcut=mode, offset=off), full)
    assert not np.array_equal(full, reference(x, cells, hw, 8, 8, crossbar.adc_lsb(hw, x.shape[-1])))


def test_reference_is_the_integer_product_on_a_lossless_adc():
    """The reference itself: with an ADC wide enough for every sum it is the plain integer product."""
    hw, x, cells, w = _case("pimcomp-c", 6)
    wide = dataclasses.replace(hw, crossbar=dataclasses.replace(hw.crossbar, adc_bits=16))
    np.testing.assert_array_equal(reference(x, cells, wide, 8, 8, 1), np.einsum("tbvr,tbrn->tbvn", x, w))


@pytest.mark.parametrize("name", ["prime", "pimcomp-c"])
@pytest.mark.parametrize("seed", [0, 1])
def test_bitlines_proven_for_any_input_are_proven_for_these_inputs(name, seed):
    """``proven_groups`` (the cells alone, every row at the top DAC level) equals the per-read bound of
    inputs at the top level, implies the bound of any other inputs, and handing it to ``mvm`` changes no
    result: on cells it proves whole (level at most one, four rows set) and on cells it does not."""
    hw, x, cells, w = _case(name, seed)
    small = np.minimum(cells, 1).astype(cells.dtype) * (np.arange(cells.shape[2]) < 4)[:, None, None, None]
    top = np.full_like(x, (1 << hw.crossbar.dac_bits) - 1)
    for c in (cells, small):
        proven = crossbar.proven_groups(c, hw)
        cg = c.reshape(x.shape[:2] + (x.shape[-1], -1))
        np.testing.assert_array_equal(proven, crossbar._exact_groups(top, cg, hw, 8, 1))
        assert not (proven & ~crossbar._exact_groups(x, cg, hw, 8, 1)).any()
        ref = reference(x, c, hw, 8, 8, 1)
        for mode in ("tile", True):
            np.testing.assert_array_equal(crossbar.mvm(x, c, hw, 8, 8, exact_shortcut=mode, proven=proven), ref)
    assert crossbar.proven_groups(small, hw).all() and not crossbar.proven_groups(cells, hw).all()


@pytest.mark.parametrize("chunk_bytes", [1, 3000, 1 << 30])
def test_chunks_on_threads_equal_every_conversion(monkeypatch, chunk_bytes):
    """The bit-serial paths cut their work into chunks of tiles and vectors that run on two threads: part of
    one tile's vectors per chunk (1 byte), every vector of a few tiles (3000 bytes) or all in one; the products,
    with the fixed ADC and a programmed LSB per bitline, and the bitline peaks (the largest analogue sum of one
    row group in one input step, from int64 numpy) are the same."""
    monkeypatch.setattr(crossbar, "_CHUNK_BYTES", chunk_bytes)
    monkeypatch.setenv("TVM_CIM_WORKERS", "2")
    hw, x, cells, w = _case("prime", 5)
    # (4 tiles of 5 vectors, 300 bytes per tile and vector: 20 chunks of one vector, 2 of two tiles, or one)
    assert len(crossbar._chunks(4, 5, 300)) == {1: 20, 3000: 2, 1 << 30: 1}[chunk_bytes]
    rng = np.random.default_rng(7)
    per_bitline = np.where(rng.random((4,) + cells.shape[-3:]) < 0.5, 1, 1 << rng.integers(1, 4, (4,) + cells.shape[-3:]))
    for lsb in (crossbar.adc_lsb(hw, x.shape[-1]), per_bitline):
        ref = reference(x, cells, hw, 8, 8, lsb)
        for mode in (False, "tile"):
            np.testing.assert_array_equal(crossbar.mvm(x, cells, hw, 8, 8, exact_shortcut=mode, lsb=lsb), ref)
    xb = hw.crossbar
    c = np.rint(cells).astype(np.int64).reshape(x.shape[0], 1, x.shape[-1], -1)
    peak = np.zeros((x.shape[0], c.shape[-1]), np.int64)
    for b in range(-(-8 // xb.dac_bits)):
        digit = (x.astype(np.int64) >> (b * xb.dac_bits)) & ((1 << xb.dac_bits) - 1)
        for g0 in range(0, x.shape[-1], xb.rows_active):
            a = np.einsum("tbvr,tbrk->tvk", digit[..., g0 : g0 + xb.rows_active], c[:, :, g0 : g0 + xb.rows_active])
            peak = np.maximum(peak, a.max(axis=1))
    np.testing.assert_array_equal(crossbar.bitline_peaks(x, cells, hw, 8), peak.reshape((-1,) + cells.shape[-3:]))

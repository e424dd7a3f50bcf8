"""The ADC model against a per-bitline reference, and ADC-aware mapping under an error budget.

The reference below is written from the documented model (cell slices,
bit-serial inputs, one conversion per bitline per read step: round to the
nearest multiple of the LSB, saturate at the top code, shift-and-add),
one bitline at a time in plain numpy, without tvm_cim's encoder.
"""

import dataclasses
import json

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_cim
from tvm_cim.compiler import accuracy, codegen, mapping, schedule
from tvm_cim.compiler.region import MATMUL, Region
from tvm_cim.hardware import cost, crossbar
from tvm_cim.simulator.engine import Chip, Options, SimulationError

from . import test_build

R = dataclasses.replace


def reference_mvm(x, w, hw, wbits, ibits, rows_per_step, lsb):
    """Bit-serial MVM one bitline at a time: x (V, K) unsigned codes, w (K, N) signed ints.

    ``lsb``: a number, or a function ``(slice, plane, column) -> LSB``.
    """
    xb = hw.crossbar
    c, d, top = xb.cell_bits, xb.dac_bits, 2**xb.adc_bits - 1
    enc = xb.weight_encoding
    # every bitline: (plane index, slice index, its cells as a function of the weight column, digital weight)
    lines = []
    if enc == "differential":
        for p, plane in enumerate([np.maximum(w, 0), np.maximum(-w, 0)]):
            for s in range(-(-(wbits - 1) // c)):
                lines.append((p, s, (plane >> (s * c)) & ((1 << c) - 1), (1 - 2 * p) * 2 ** (s * c)))
    elif enc == "offset":
        for s in range(-(-wbits // c)):
            lines.append((0, s, ((w + 2 ** (wbits - 1)) >> (s * c)) & ((1 << c) - 1), 2 ** (s * c)))
    else:  # two's complement: low bits in cells of c bits, the sign bit alone, worth -2^(b-1)
        code = np.where(w < 0, w + 2**wbits, w)  # the b-bit two's complement code as an unsigned number
        low_slices = -(-(wbits - 1) // c)
        for s in range(low_slices):
            lines.append((0, s, (code % 2 ** (wbits - 1)) // 2 ** (s * c) % 2**c, 2 ** (s * c)))
        lines.append((0, low_slices, code // 2 ** (wbits - 1), -(2 ** (wbits - 1))))
    v_n, k = x.shape
    out = np.zeros((v_n, w.shape[1]), dtype=np.int64)
    for v in range(v_n):
        for j in range(w.shape[1]):
            total = 0
            for p, s, cells, weight in lines:
                cell = cells[:, j]
                step_lsb = lsb(s, p, j) if callable(lsb) else lsb
                for b in range(-(-ibits // d)):
                    xbits = (x[v] >> (b * d)) & ((1 << d) - 1)
                    for g0 in range(0, k, rows_per_step):
                        analog = int(np.dot(xbits[g0:g0 + rows_per_step], cell[g0:g0 + rows_per_step]))
                        code_ = min(int(np.floor(analog / step_lsb + 0.5)), top)
                        total += weight * (code_ * step_lsb) * 2 ** (b * d)
            if enc == "offset":
                total -= 2 ** (wbits - 1) * int(x[v].sum())
            out[v, j] = total
    return out


def reference_signed_mvm(x, w, hw, wbits, ibits, rows_per_step, lsb):
    """Signed input codes x (V, K) applied as ``crossbar.input_encoding`` documents, each unsigned pass
    through :func:`reference_mvm`."""
    enc, half = hw.crossbar.input_encoding, 2 ** (ibits - 1)
    if enc == "phases":
        return (reference_mvm(np.maximum(x, 0), w, hw, wbits, ibits - 1, rows_per_step, lsb)
                - reference_mvm(np.maximum(-x, 0), w, hw, wbits, ibits - 1, rows_per_step, lsb))
    if enc == "offset":
        return reference_mvm(x + half, w, hw, wbits, ibits, rows_per_step, lsb) - half * w.sum(axis=0)
    code = np.where(x < 0, x + 2**ibits, x)  # two's complement code: low bits, then the sign bit
    return (reference_mvm(code % half, w, hw, wbits, ibits - 1, rows_per_step, lsb)
            - half * reference_mvm(code // half, w, hw, wbits, 1, rows_per_step, lsb))


def crossbar_mvm(x, w, hw, wbits, ibits, lsb=None):
    cells = crossbar.encode(w, hw, wbits)[None, None]
    return crossbar.mvm(x[None, None], cells, hw, wbits, ibits, exact_shortcut=False, lsb=lsb)[0, 0]


@pytest.mark.parametrize("preset,rows", [("prime", 64), ("prime", 8), ("jia21", 100), ("jia21", 37),
                                         ("puma", 128), ("isaac", 8)])
def test_adc_fixed_rule_matches_a_per_bitline_reference(preset, rows):
    """clip (LSB one unit) and scale (LSB covering the largest sum of the driven rows), saturation included."""
    rng = np.random.default_rng(rows)
    hw = tvm_cim.load(preset)
    hw = R(hw, crossbar=R(hw.crossbar, rows=max(rows, 64), adc_bits=6)).driving(rows)
    k = min(hw.crossbar.rows, 70)
    x = rng.integers(0, 256, size=(3, k))
    x[0] = 255  # dense inputs saturate
    w = rng.integers(-127, 128, size=(k, 5))
    lsb = crossbar.adc_lsb(hw, k)
    got = crossbar_mvm(x, w, hw, 8, 8)
    np.testing.assert_array_equal(got, reference_mvm(x, w, hw, 8, 8, hw.crossbar.rows_active, lsb))
    altered = not np.array_equal(got, x @ w)
    assert altered == (crossbar.max_partial_sum(hw, k) > 63)  # the 6-bit ADC alters these conversions iff it can


@pytest.mark.parametrize("encoding", ["differential", "offset"])
def test_programmed_adc_range_per_array_and_per_bitline_matches_the_reference(encoding):
    rng = np.random.default_rng(7)
    hw = tvm_cim.load("prime")
    hw = R(hw, crossbar=R(hw.crossbar, weight_encoding=encoding, adc_range="column")).driving(16)
    x = rng.integers(0, 256, size=(4, 40))
    w = rng.integers(-127, 128, size=(40, 6))
    got = crossbar_mvm(x, w, hw, 8, 8, lsb=4)
    np.testing.assert_array_equal(got, reference_mvm(x, w, hw, 8, 8, 16, 4))
    s_n, p_n = hw.weight_slices(8), hw.cols_per_weight(8) // hw.weight_slices(8)
    per = 1 << rng.integers(0, 4, size=(s_n, p_n, 6))
    got = crossbar_mvm(x, w, hw, 8, 8, lsb=per[None])
    np.testing.assert_array_equal(got, reference_mvm(x, w, hw, 8, 8, 16, lambda s, p, j: int(per[s, p, j])))


@pytest.mark.parametrize("preset", ["prime", "jia21", "puma"])
@pytest.mark.parametrize("wenc", ["differential", "offset", "twos"])
@pytest.mark.parametrize("ienc", ["phases", "offset", "twos"])
def test_every_encoding_matches_the_per_bitline_reference(preset, wenc, ienc):
    """Weight and input encodings through lossy conversions (a 6-bit ADC, a programmed LSB), and exact
    against the integer product when no conversion can be altered."""
    rng = np.random.default_rng(len(preset) + 7 * len(wenc) + len(ienc))
    base = tvm_cim.load(preset)
    hw = R(base, crossbar=R(base.crossbar, adc_bits=6, weight_encoding=wenc, input_encoding=ienc)).driving(16)
    x = rng.integers(-127, 128, size=(3, 40))
    x[0] = -127  # dense negative inputs: every low bit of their two's complement code is 1 but one
    w = rng.integers(-127, 128, size=(40, 5))
    w[:, 0] = -1
    cells = crossbar.encode(w, hw, 8)
    np.testing.assert_array_equal(crossbar.decode(cells, hw, 8), w)
    for lsb in (None, 2):
        got = crossbar.mvm_signed(x[None, None], cells[None, None], hw, 8, 8, exact_shortcut=False, lsb=lsb)[0, 0]
        want_lsb = crossbar.adc_lsb(hw, 40) if lsb is None else lsb
        np.testing.assert_array_equal(got, reference_signed_mvm(x, w, hw, 8, 8, 16, want_lsb))
    exact_hw = R(hw, crossbar=R(hw.crossbar, adc_bits=16, adc_mode="clip"))
    got = crossbar.mvm_signed(x[None, None], cells[None, None], exact_hw, 8, 8, exact_shortcut=False)[0, 0]
    np.testing.assert_array_equal(got, x.astype(np.int64) @ w.astype(np.int64))


def test_encodings_set_bitlines_and_input_steps():
    hw = tvm_cim.load("prime")  # 4-bit cells, 3-bit DAC, 8-bit weights and inputs
    bitlines = {e: R(hw, crossbar=R(hw.crossbar, weight_encoding=e)).cols_per_weight(8)
                for e in ("differential", "offset", "twos")}
    assert bitlines == {"differential": 4, "offset": 2, "twos": 3}  # 2x ceil(7/4); ceil(8/4); ceil(7/4) + 1
    steps = {e: cost.input_steps(R(hw, crossbar=R(hw.crossbar, input_encoding=e)), 8, True)
             for e in ("phases", "offset", "twos")}
    assert steps == {"phases": 6, "offset": 3, "twos": 4}  # 2x ceil(7/3); ceil(8/3); ceil(7/3) + 1
    assert cost.input_steps(hw, 8, False) == 3


def test_hardware_file_bounds_the_encodings():
    hw = tvm_cim.load("prime")
    assert hw.weight_encoding_options == ["differential"] and hw.input_encoding_options == ["phases"]
    with pytest.raises(ValueError, match="not allowed"):
        hw.mapped(None, "twos")
    jia = tvm_cim.load("jia21")
    assert set(jia.weight_encoding_options) == {"offset", "twos", "differential"}
    assert accuracy.encodings(jia, False) == [(None, None), ("twos", None), ("differential", None)]
    assert len(accuracy.encodings(jia, True)) == 9
    view = jia.mapped(8, "twos", "offset")
    assert (view.crossbar.rows_active, view.crossbar.weight_encoding, view.crossbar.input_encoding) == \
        (8, "twos", "offset")


def test_simulator_follows_the_programs_encodings():
    """A region mapped with two's complement weights and offset inputs: the program says so, the simulator
    computes what the per-bitline reference gives, and the read time follows the input steps."""
    rng = np.random.default_rng(5)
    hw = tvm_cim.load("jia21")
    w = rng.integers(-127, 128, size=(300, 6)).astype(np.int8)
    x = rng.integers(-127, 128, size=(4, 300)).astype(np.float32)
    results = {}
    for wenc, ienc in [(None, None), ("twos", "offset"), ("differential", "twos")]:
        r = Region("mm", MATMUL, [(4, 300)], (4, 6), x_scale=1.0, x_signed=True, w_int=w,
                   w_scale=np.ones(6, np.float32), weight_encoding=wenc, input_encoding=ienc)
        sched = schedule.schedule([r], hw, "none")
        prog = codegen.generate(r, mapping.allocate([r], hw, sched.plans).placements["mm"], hw, sched.options, "none")
        assert prog.attr("weight_encoding") == wenc and prog.attr("input_encoding") == ienc
        env, stats = Chip(hw, Options(exact_shortcut=False)).run(prog, {"x": x, **codegen.region_constants(r)})
        view = r.chip(hw)
        want = reference_signed_mvm(x.astype(np.int64), w.astype(np.int64), view, 8, 8, 1152,
                                    crossbar.adc_lsb(view, 300))
        np.testing.assert_array_equal(env["acc"][0], want)
        results[(wenc, ienc)] = (stats.latency_ns, sched.plans["mm"].latency_ns)
    # offset inputs take 8 input steps instead of 2 x 7: faster; the estimate agrees in direction
    assert results[("twos", "offset")][0] < results[(None, None)][0]
    assert results[("twos", "offset")][1] < results[(None, None)][1]


@pytest.mark.parametrize("encoding", ["differential", "offset", "twos"])
def test_several_adc_settings_at_once_match_the_reference(encoding):
    """``mvm_lsbs`` (the analogue sums computed once, converted under each ADC setting) gives every setting's
    per-bitline reference: the fixed rule, one unit, programmed LSBs per array and per bitline."""
    rng = np.random.default_rng(3)
    hw = tvm_cim.load("prime")
    hw = R(hw, crossbar=R(hw.crossbar, weight_encoding=encoding, adc_range="column")).driving(16)
    x = rng.integers(0, 256, size=(2, 1, 4, 40))
    x[0, 0, 0] = 255  # dense inputs saturate
    w = rng.integers(-127, 128, size=(2, 1, 40, 6))
    cells = crossbar.encode(w, hw, 8)
    per = 1 << rng.integers(0, 4, size=(2,) + cells.shape[-3:])
    lsbs = [None, 1, 4, 2, per]
    got = crossbar.mvm_lsbs(x, cells, hw, 8, 8, lsbs)
    assert len(got) == len(lsbs)
    for lsb, g in zip(lsbs, got):
        for t in range(2):
            if lsb is None:
                ref_lsb = crossbar.adc_lsb(hw, 40)
            elif np.ndim(lsb):
                ref_lsb = (lambda t: lambda s, p, j: int(per[t, s, p, j]))(t)
            else:
                ref_lsb = lsb
            np.testing.assert_array_equal(g[t, 0], reference_mvm(x[t, 0], w[t, 0], hw, 8, 8, 16, ref_lsb))
    assert not np.array_equal(got[2][0, 0], x[0, 0] @ w[0, 0])  # the ADC alters these conversions


def test_programmed_lsb_is_the_smallest_power_of_two_covering_the_peak():
    hw = tvm_cim.load("prime")  # 8-bit ADC: 255 levels
    assert crossbar.programmed_lsb(0, hw) == 1 and crossbar.programmed_lsb(255, hw) == 1
    assert crossbar.programmed_lsb(256, hw) == 2 and crossbar.programmed_lsb(510, hw) == 2
    assert crossbar.programmed_lsb(511, hw) == 4
    np.testing.assert_array_equal(crossbar.programmed_lsb(np.array([10, 600, 4000]), hw), [1, 4, 16])


def test_bitline_peaks_are_the_largest_analogue_sums():
    rng = np.random.default_rng(2)
    hw = tvm_cim.load("prime").driving(8)
    x = rng.integers(0, 256, size=(5, 20))
    w = rng.integers(-127, 128, size=(20, 3))
    cells = crossbar.encode(w, hw, 8)  # (20, S, P, 3)
    peaks = crossbar.bitline_peaks(x[None, None], cells[None, None], hw, 8)[0]
    want = np.zeros(cells.shape[1:])
    for b in range(hw.input_steps(8)):
        xb = (x >> (3 * b)) & 7
        for g0 in range(0, 20, 8):
            want = np.maximum(want, np.einsum("vr,rspn->vspn", xb[:, g0:g0 + 8], cells[g0:g0 + 8]).max(axis=0))
    np.testing.assert_array_equal(peaks, want)


def test_row_options_end_with_an_exact_count():
    for name, want in [("prime", [64, 32, 16, 8, 4, 2]), ("jia21", [1152, 576, 288, 255]), ("puma", [128, 85]),
                       ("isaac", [8]), ("dynaplasia", [320]), ("jain21", [32])]:
        hw = tvm_cim.load(name)
        assert accuracy.row_options(hw) == want
        last = hw.driving(want[-1])
        assert crossbar.max_partial_sum(last) <= 2**hw.crossbar.adc_bits - 1


def test_fewer_rows_per_step_cost_more_read_steps():
    hw = tvm_cim.load("prime")
    base = cost.mvm_ns(hw, 256, 10, 8, 8, False)
    assert cost.mvm_ns(hw.driving(16), 256, 10, 8, 8, False) == pytest.approx(4 * base)
    assert hw.driving(1000) is hw and hw.driving(None) is hw


def test_simulated_rows_per_step_matches_estimate_and_reference():
    """A program that drives 2 rows per step (no sum exceeds the ADC): exact results, longer reads."""
    rng = np.random.default_rng(9)
    hw = tvm_cim.load("prime")
    w = rng.integers(-127, 128, size=(100, 12)).astype(np.int8)
    x = rng.integers(0, 256, size=(6, 100)).astype(np.float32)
    results = {}
    for rps in (None, 2):
        r = Region("mm", MATMUL, [(6, 100)], (6, 12), x_scale=1.0, w_int=w, w_scale=np.ones(12, np.float32),
                   rows_per_step=rps)
        sched = schedule.schedule([r], hw, "none")
        cmap = mapping.allocate([r], hw, sched.plans)
        prog = codegen.generate(r, cmap.placements["mm"], hw, sched.options, "none")
        assert (prog.attr("rows_per_step") == 2) == (rps == 2)
        env, stats = Chip(hw, Options(exact_shortcut=False)).run(prog, {"x": x, **codegen.region_constants(r)})
        results[rps] = (env["acc"][0], stats.latency_ns, sched.plans["mm"].latency_ns)
    exact = x.astype(np.int64) @ w.astype(np.int64)
    np.testing.assert_array_equal(results[2][0], exact)
    assert not np.array_equal(results[None][0], exact)
    assert results[2][1] > results[None][1] and results[2][2] > results[None][2]


def test_simulator_rejects_a_mapping_the_chip_cannot_do():
    rng = np.random.default_rng(1)
    hw = tvm_cim.load("puma")  # fixed ADC range
    w = rng.integers(-127, 128, size=(20, 4)).astype(np.int8)
    r = Region("mm", MATMUL, [(2, 20)], (2, 4), x_scale=1.0, w_int=w, w_scale=np.ones(4, np.float32), adc_lsb=2)
    sched = schedule.schedule([r], hw, "none")
    prog = codegen.generate(r, mapping.allocate([r], hw, sched.plans).placements["mm"], hw, sched.options)
    with pytest.raises(SimulationError, match="fixed"):
        Chip(hw).run(prog, {"x": np.ones((2, 20), np.float32), **codegen.region_constants(r)})


def test_lsb_cols_text_round_trip():
    a = 1 << np.array([[0, 3, 15], [2, 2, 1]])
    np.testing.assert_array_equal(accuracy.lsb_cols_parse(accuracy.lsb_cols_text(a)), a)


# ---------------------------------------------------------------------------- whole builds
cnn = test_build.cnn  # the small CNN, its input and its float reference (a fixture)
cosine = test_build.cosine


def build_run(mod, x, hw, max_error=None):
    with tvm_cim.accuracy_budget(max_error):
        ex = relax.build(mod, target=f"cim -hw={hw}")
    info = tvm_cim.last_compile_info()
    tvm_cim.runtime.reset()
    with tvm_cim.runtime.collect() as stats:
        y = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    return y, info, stats


@pytest.mark.parametrize("hw", ["prime", "jia21"])
def test_default_budget_gives_a_usable_network_on_lossy_presets(cnn, hw):
    mod, x, ref = cnn
    y, info, _ = build_run(mod, x, hw)
    acc = info.accuracy
    assert acc["max_error"] == accuracy.DEFAULT_MAX_ERROR and acc["met"]
    assert acc["predicted_error"] is None or acc["predicted_error"] <= acc["max_error"]
    assert cosine(y, ref) >= 0.99
    for prog in info.programs:  # the programs carry the mapping the report gives
        rep = acc["regions"][prog.name]
        rps = prog.attr("rows_per_step", info.hw.crossbar.rows_active)
        assert f"{rps} rows/step" in rep["mapping"]
        for key in ("weight_encoding", "input_encoding"):  # encodings the chip allows, named when not the default
            enc = prog.attr(key)
            assert enc is None or (enc in rep["mapping"] and enc in getattr(info.hw, key + "_options"))
        assert rep["ns"] >= rep["fastest_ns"] and rep["error"] <= rep["fastest_error"]


def test_tighter_budget_is_slower_and_more_accurate(cnn):
    mod, x, ref = cnn
    loose_y, loose, _ = build_run(mod, x, "prime", max_error=1.0)
    tight_y, tight, _ = build_run(mod, x, "prime", max_error=0.001)
    assert all(v["mapping"] == v["fastest"] for v in loose.accuracy["regions"].values())
    assert loose.accuracy["int8_error"] is None  # unconstrained: nothing measured end to end
    ns = [sum(v["ns"] for v in a.accuracy["regions"].values()) for a in (loose, tight)]
    assert ns[1] > ns[0]
    assert cosine(tight_y, ref) > cosine(loose_y, ref)


def test_lossless_presets_are_left_as_they_were(cnn):
    mod, x, ref = cnn
    for hw in ("isaac", "dynaplasia", "jain21"):
        y, info, _ = build_run(mod, x, hw)
        assert info.accuracy == {}
        assert all(p.attr("rows_per_step") is None and p.attr("adc_lsb") is None for p in info.programs)


def test_an_edited_mapping_is_followed(cnn):
    mod, x, ref = cnn
    from tvm_cim.compiler import transform as T

    hw = tvm_cim.load("prime")
    m = T.MapCrossbars(hw)(T.Quantize(hw)(T.Calibrate()(T.FindRegions()(mod))))
    g = T.region_functions(m)[1][0]
    m.update_func(m.get_global_var(g), m[g].with_attr("cim.rows_per_step", 4).with_attr("cim.adc_lsb", 2))
    for p in (T.Segment(hw), T.DuplicateWeights(hw), T.Place(hw), T.GenerateMetaOps(hw)):
        m = p(m)
    from tvm_cim.program import parse_program

    prog = parse_program(str(m[g].attrs["cim.program"]))
    assert prog.attr("rows_per_step") == 4 and prog.attr("adc_lsb") == 2
    assert "cim.accuracy" in m.attrs and json.loads(str(m.attrs["cim.accuracy"]))["met"]


def test_budget_as_a_target_option(cnn):
    mod, x, ref = cnn
    ex = relax.build(mod, target="cim -hw=prime -max_error=1")
    loose = tvm_cim.last_compile_info().accuracy
    assert loose["max_error"] == 1.0 and all(v["mapping"] == v["fastest"] for v in loose["regions"].values())
    with tvm_cim.accuracy_budget(1.0):  # the target's option wins over the ambient budget
        relax.build(mod, target="cim -hw=prime -max_error=0.001")
    tight = tvm_cim.last_compile_info().accuracy
    assert tight["max_error"] == 0.001
    assert sum(v["ns"] for v in tight["regions"].values()) > sum(v["ns"] for v in loose["regions"].values())
    y = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    assert y.shape == ref.shape
    from tvm_cim.common.target import options_of

    assert options_of(tvm.target.Target("cim -hw=prime -max_error=0.01")) == {"max_error": 0.01}
    assert options_of(tvm.target.Target("cim -hw=prime")) == {}
    with pytest.raises(ValueError, match="unknown option -foo"):
        tvm.target.Target("cim -hw=prime -foo=1")
    with pytest.raises(ValueError, match="max_error"):
        tvm.target.Target("cim -hw=prime -max_error=-1")


# ---------------------------------------------------------------------------- device non-idealities
def test_nonideal_device_matches_a_per_bitline_reference():
    """Conductance variation and IR drop (the drawn conductances are inputs here) and ADC offsets, converted one
    bitline at a time: q = clip(floor((s + offset) / LSB + 1/2), 0, top) * LSB, shift-and-add."""
    rng = np.random.default_rng(3)
    hw = tvm_cim.load("prime").driving(16)
    ni = crossbar.Nonideal(conductance_sigma=0.05, ir_drop=2e-3, adc_offset=0.4, seed=11)
    x = rng.integers(0, 256, size=(3, 40))
    w = rng.integers(-127, 128, size=(40, 4))
    ideal = crossbar.encode(w, hw, 8)
    g = ni.program(ideal, xb=5)  # (rows, S, P, n) conductances as programmed
    off = ni.offsets(ideal.shape[-3:], xb=5)
    assert ni.active and not crossbar.Nonideal().active
    np.testing.assert_allclose(ni.program(np.ones_like(ideal), 5)[:, 0, 0, 0] > 0, True)
    got = crossbar.mvm(x[None, None], g[None, None], hw, 8, 8, lsb=2, offset=off[None],
                       weights=crossbar.decode(ideal, hw, 8)[None, None])[0, 0]
    top, want = 255, np.zeros((3, 4))
    for v in range(3):
        for j in range(4):
            total = 0.0
            for s in range(2):
                for p, sign in enumerate((1, -1)):
                    for b in range(3):
                        xbits = (x[v] >> (3 * b)) & 7
                        for g0 in range(0, 40, 16):
                            analog = float(np.dot(xbits[g0:g0 + 16].astype(np.float64), g[g0:g0 + 16, s, p, j]))
                            code = min(max(np.floor(analog / 2 + float(off[s, p, j]) + 0.5), 0), top)
                            total += sign * code * 2 * 2 ** (3 * b + 4 * s)
            want[v, j] = total
    np.testing.assert_array_equal(got, np.rint(want).astype(np.int64))
    exact = x @ w
    assert not np.array_equal(got, exact) and np.corrcoef(got.ravel(), exact.ravel())[0, 1] > 0.95


@pytest.mark.slow
def test_nonideal_simulation_is_seeded_off_by_default_and_reported():
    from tvm_cim.evaluate import evaluate

    spec = "zoo:resnet18?image_size=32"
    base, outs0, _ = evaluate(spec, "isaac", "none")
    zero, outs_z, _ = evaluate(spec, "isaac", "none", nonideal=crossbar.Nonideal(seed=4))
    np.testing.assert_array_equal(outs0[0], outs_z[0])  # all zero: the ideal device, bit for bit
    assert "nonideal" not in base and "nonideal" not in zero
    ni = crossbar.Nonideal(conductance_sigma=0.1, ir_drop=1e-3, adc_offset=0.5, seed=1)
    a, outs_a, _ = evaluate(spec, "isaac", "none", nonideal=ni)
    b, outs_b, _ = evaluate(spec, "isaac", "none", nonideal=ni)
    c, outs_c, _ = evaluate(spec, "isaac", "none", nonideal=dataclasses.replace(ni, seed=2))
    np.testing.assert_array_equal(outs_a[0], outs_b[0])
    assert not np.array_equal(outs_a[0], outs_c[0]) and not np.array_equal(outs_a[0], outs0[0])
    assert a["nonideal"] == ni.describe() and a["cosine"] < base["cosine"]
    assert a["latency_ns"] == base["latency_ns"]  # the device's accuracy, not its timing
    tvm_cim.runtime.set_options(nonideal=None)
    with pytest.raises(ValueError, match="conductance"):
        crossbar.Nonideal.parse("conductanc=0.1")
    assert crossbar.Nonideal.parse("conductance=0.1,seed=3") == crossbar.Nonideal(conductance_sigma=0.1, seed=3)


def _probe(hw, k=300, n=40, vectors=5, seed=4, signed=False):
    """A LayerProbe of a random int8 layer of k rows (more than one tile, the last padded)."""
    rng = np.random.default_rng(seed)
    w = rng.integers(-127, 128, size=(k, n)).astype(np.int8)
    x = rng.uniform(-1.0 if signed else 0.0, 1.0, size=(vectors, k)).astype(np.float32)
    x[0, :] = 1.0  # one dense vector: the largest sums
    r = Region("mm", MATMUL, [(vectors, k)], (vectors, n), x_scale=1.0 / 255, x_signed=signed, w_int=w,
               w_scale=np.ones(n, np.float32))
    return accuracy.LayerProbe(r, [{"x": x}], hw, 8, 8), w


@pytest.mark.parametrize("encoding", ["differential", "offset", "twos"])
def test_probe_cells_are_what_the_encoder_programs(encoding):
    """The probe looks cells up in a table of every weight code: the same cells as crossbar.encode of the
    zero-padded tiles, for every weight encoding, as float32 and as bytes."""
    hw = tvm_cim.load("prime")
    hw = R(hw, crossbar=R(hw.crossbar, weight_encoding=encoding))
    probe, w = _probe(hw)
    rows = hw.crossbar.rows
    tiles = np.zeros((2, rows, w.shape[1]), dtype=np.int32)
    tiles[0], tiles[1, : w.shape[0] - rows] = w[:rows], w[rows:]
    cols = np.array([0, 3, 4, 17, 39])
    want = crossbar.encode(tiles, hw, 8)[:, None]
    for c in (cols, np.arange(5, 30)):
        got = probe._encode(0, c, hw)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, want[..., c])
    np.testing.assert_array_equal(probe._encode(0, np.arange(40), hw, np.uint8), want)


def _reference_peaks(xq, w, hw, rows_per_step):
    """Largest analogue sum of every bitline: loops over tiles, row groups, vectors and input steps."""
    cells = crossbar.encode(w, hw, 8)  # (K, S, P, N)
    d = hw.crossbar.dac_bits
    out = np.zeros(cells.shape[1:])
    for t0 in range(0, len(w), hw.crossbar.rows):
        for g0 in range(t0, min(len(w), t0 + hw.crossbar.rows), rows_per_step):
            g1 = min(g0 + rows_per_step, t0 + hw.crossbar.rows, len(w))
            for b in range(hw.input_steps(8)):
                xb = (xq[:, g0:g1] >> (b * d)) & ((1 << d) - 1)
                out = np.maximum(out, np.einsum("vr,rspn->spn", xb, cells[g0:g1]) if len(xb) == 1 else
                                 np.einsum("vr,rspn->vspn", xb, cells[g0:g1]).max(axis=0))
    return out.reshape(-1, w.shape[1])


@pytest.mark.parametrize("kept", [True, False])
def test_probe_peaks_match_a_reference_at_every_row_count(kept, monkeypatch):
    """Peaks per bitline at every row count, for a layer kept encoded and for one encoded again per pass
    (which measures every row count in its first pass); and where no sum can pass the top code at one
    unit, the programmed LSB is one whatever the inputs (what the choice assumes without measuring)."""
    if not kept:
        monkeypatch.setattr(accuracy, "_CACHE_CELLS", 1)
    hw = tvm_cim.load("prime")
    probe, w = _probe(hw)
    assert probe._kept(hw) == kept
    for rp in accuracy.row_options(hw):
        m = accuracy.Mapping(rp)
        got = probe.peaks(m)
        np.testing.assert_array_equal(got, _reference_peaks(probe.xq, w, hw, rp))
        view = probe.view(m)
        assert got.max() <= crossbar.max_partial_sum(view)
        if crossbar.exact(view, 1):
            assert crossbar.programmed_lsb(got.max(), hw) == 1
    assert len(probe._peaks) == len(accuracy.row_options(hw))


def test_exact_matmul_equals_the_integer_product():
    """Long sums of the largest codes (partial sums far above 2^24): the float32 slices give the integer
    product exactly, with leading dimensions, signed codes, and an empty summed dimension."""
    rng = np.random.default_rng(5)
    a = rng.integers(0, 256, size=(2, 3, 2000))
    a[0, 0] = 255
    b = rng.integers(-127, 128, size=(2000, 7)).astype(np.int8)
    b[:, 0] = 127
    got = crossbar.exact_matmul(a.astype(np.float32), b)
    assert got.dtype == np.float64 and got.shape == (2, 3, 7)
    np.testing.assert_array_equal(got, a.astype(np.int64) @ b.astype(np.int64))
    assert got[0, 0, 0] == 255 * 127 * 2000 > 2**24
    s = rng.integers(-127, 128, size=(4, 2000)).astype(np.int32)
    np.testing.assert_array_equal(crossbar.exact_matmul(s, b), s.astype(np.int64) @ b.astype(np.int64))
    assert crossbar.exact_matmul(np.zeros((3, 0)), np.zeros((0, 2), np.int8)).shape == (3, 2)


@pytest.mark.parametrize("signed", [False, True])
def test_array_lsb_is_the_programmed_lsb_of_the_largest_peak(signed):
    """The array-wide LSB, measured part by part in order of a bound and stopped where it cannot change,
    equals the programmed LSB of the reference's largest peak at every row count (inputs dense enough
    to reach the top LSB at some counts and not at others)."""
    hw = tvm_cim.load("prime")
    probe, w = _probe(hw, k=300, n=200, vectors=6, seed=7, signed=signed)
    got, want = [], []
    for rp in accuracy.row_options(hw):
        m = accuracy.Mapping(rp)
        if signed:
            ref = max(_reference_peaks(x[0, 0], w, hw, rp).max() for x, _, _ in probe._passes(probe.xq[None, None], hw))
        else:
            ref = _reference_peaks(probe.xq, w, hw, rp).max()
        got.append(probe.array_lsb(m))
        want.append(crossbar.programmed_lsb(ref, hw))
    assert got == want
    tops = [crossbar.programmed_lsb(crossbar.max_partial_sum(hw.driving(rp)), hw) for rp in accuracy.row_options(hw)]
    assert any(g == t for g, t in zip(got, tops)) and any(g < t for g, t in zip(got, tops))

"""With an ADC that cannot clip, crossbar results equal plain integer numpy exactly.

Regions are compiled (scheduled, mapped, generated) for every computing mode,
both signed-weight encodings and every scheduling strategy, then run on the
simulator's bit-serial path (DAC steps x cell slices x ADC x shift-and-add).
The references are written here independently of tvm_cim's own im2col.
"""

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tvm_cim
from tvm_cim.compiler import codegen, mapping, schedule, strategies
from tvm_cim.compiler.region import CONV2D, DMATMUL, MATMUL, Region, unfold_conv_weight
from tvm_cim.hardware import crossbar
from tvm_cim.simulator.engine import Chip, Options

R = dataclasses.replace
MODES = {"crossbar": "isaac", "core": "jia21", "wordline": "jain21"}
STRATEGIES = strategies.names()


def lossless(hw, encoding=None):
    xb = R(hw.crossbar, adc_bits=24, adc_mode="clip")
    if encoding:
        xb = R(xb, weight_encoding=encoding)
    return R(hw, crossbar=xb)


def small_chip(hw, cores, per_core):
    return R(hw, chip=R(hw.chip, cores=cores), core=R(hw.core, crossbars=per_core))


def run(region, hw, strategy, x, y=None, shortcut=False, options=None):
    sched = schedule.schedule([region], hw, strategy, options)
    cmap = mapping.allocate([region], hw, sched.plans)
    prog = codegen.generate(region, cmap.placements[region.name], hw, sched.options, strategy)
    tensors = {"x": x, **codegen.region_constants(region)}
    if y is not None:
        tensors["y"] = y
    env, stats = Chip(hw, Options(exact_shortcut=shortcut)).run(prog, tensors)
    return env, stats, prog, cmap


def codes(rng, shape, zero):
    """Integer-valued float inputs whose quantised codes (scale 1) are known."""
    lo, hi = (-zero, 255 - zero)
    return rng.integers(lo, hi + 1, size=shape).astype(np.float32)


def conv_reference(xu, w, stride, pad, dil, groups, pad_value):
    """Direct integer convolution with explicit loops over kernel positions."""
    n, c, h, wd = xu.shape
    oc, cg, kh, kw = w.shape
    xp = np.pad(xu, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=pad_value).astype(np.int64)
    oh = (h + 2 * pad - dil * (kh - 1) - 1) // stride + 1
    ow = (wd + 2 * pad - dil * (kw - 1) - 1) // stride + 1
    out = np.zeros((n, oc, oh, ow), np.int64)
    og = oc // groups
    for g in range(groups):
        xs = xp[:, g * cg : (g + 1) * cg]
        ws = w[g * og : (g + 1) * og].astype(np.int64)
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * dil : i * dil + stride * (oh - 1) + 1 : stride, j * dil : j * dil + stride * (ow - 1) + 1 : stride]
                out[:, g * og : (g + 1) * og] += np.einsum("nchw,oc->nohw", patch, ws[:, :, i, j])
    return out


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    m=st.integers(1, 40), k=st.integers(1, 300), n=st.integers(1, 80),
    mode=st.sampled_from(list(MODES)), enc=st.sampled_from(["differential", "offset"]),
    strategy=st.sampled_from(STRATEGIES), zero=st.sampled_from([0, 128]), seed=st.integers(0, 2**16),
)
def test_matmul_exact(m, k, n, mode, enc, strategy, zero, seed):
    rng = np.random.default_rng(seed)
    hw = lossless(tvm_cim.load(MODES[mode]), enc)
    w = rng.integers(-127, 128, size=(k, n)).astype(np.int8)
    r = Region("mm", MATMUL, [(m, k)], (m, n), x_scale=1.0, x_zero=zero, w_int=w, w_scale=np.ones(n, np.float32))
    x = codes(rng, (m, k), zero)
    env, stats, prog, _ = run(r, hw, strategy, x)
    xu = x.astype(np.int64) + zero
    np.testing.assert_array_equal(env["acc"][0], xu @ w.astype(np.int64))
    # dequantised output removes the zero point: equals the signed integer product
    np.testing.assert_allclose(env["out"], (xu - zero) @ w.astype(np.int64), rtol=1e-6, atol=1e-3)


@st.composite
def conv_cases(draw):
    groups_kind = draw(st.sampled_from(["dense", "grouped", "depthwise"]))
    c = draw(st.integers(1, 6)) * (2 if groups_kind == "grouped" else 1)
    groups = {"dense": 1, "grouped": 2, "depthwise": c}[groups_kind]
    oc = groups * draw(st.integers(1, 4)) if groups_kind != "dense" else draw(st.integers(1, 24))
    kh = draw(st.integers(1, 3))
    stride, pad, dil = draw(st.integers(1, 2)), draw(st.integers(0, 2)), draw(st.integers(1, 2))
    h = draw(st.integers(dil * (kh - 1) + 1, 9))
    return dict(c=c, oc=oc, groups=groups, k=kh, stride=stride, pad=pad, dil=dil, h=h)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=conv_cases(), mode=st.sampled_from(list(MODES)), strategy=st.sampled_from(STRATEGIES),
       zero=st.sampled_from([0, 128]), seed=st.integers(0, 2**16))
def test_conv_exact(case, mode, strategy, zero, seed):
    rng = np.random.default_rng(seed)
    hw = lossless(tvm_cim.load(MODES[mode]))
    c, oc, g, kk = case["c"], case["oc"], case["groups"], case["k"]
    s, p, d, h = case["stride"], case["pad"], case["dil"], case["h"]
    w = rng.integers(-127, 128, size=(oc, c // g, kk, kk)).astype(np.int8)
    oh = (h + 2 * p - d * (kk - 1) - 1) // s + 1
    conv = dict(kernel=(kk, kk), strides=(s, s), padding=(p, p, p, p), dilation=(d, d), groups=g)
    r = Region("cv", CONV2D, [(1, c, h, h)], (1, oc, oh, oh), x_scale=1.0, x_zero=zero,
               w_int=unfold_conv_weight(w, g), w_scale=np.ones(oc, np.float32), conv=conv)
    x = codes(rng, (1, c, h, h), zero)
    env, _, _, _ = run(r, hw, strategy, x)
    ref = conv_reference(x.astype(np.int64) + zero, w, s, p, d, g, zero)
    np.testing.assert_array_equal(env["acc"][0], ref.transpose(0, 2, 3, 1).reshape(-1, oc))


@settings(max_examples=15, deadline=None)
@given(m=st.integers(1, 12), k=st.integers(1, 150), n=st.integers(1, 40), bcast=st.booleans(),
       mode=st.sampled_from(list(MODES)), seed=st.integers(0, 2**16))
def test_dynamic_matmul_exact(m, k, n, bcast, mode, seed):
    """Attention-style matmul of two run-time operands: the right one is written at run time."""
    rng = np.random.default_rng(seed)
    hw = lossless(tvm_cim.load(MODES[mode]))
    a_shape, b_shape = (2, 3, m, k), ((1, 3, k, n) if bcast else (2, 3, k, n))
    r = Region("dm", DMATMUL, [a_shape, b_shape], (2, 3, m, n), x_scale=1.0, x_zero=128, y_scale=1.0)
    x = codes(rng, a_shape, 128)
    y = rng.integers(-127, 128, size=b_shape).astype(np.float32)
    env, stats, prog, _ = run(r, hw, "cim-mlc", x, y)
    ref = np.matmul(x.astype(np.int64) + 128, np.broadcast_to(y.astype(np.int64), (2, 3, k, n)))
    np.testing.assert_array_equal(env["acc"], ref.reshape(6, m, n))
    assert stats.weight_writes > 0 and prog.count_ops()["CIM.write_xb"] >= 1
    assert all(o.opcode != "CIM.write_xb" for o in prog.ops("setup"))  # written at run time


def test_shortcut_and_bitwise_paths_agree():
    rng = np.random.default_rng(3)
    hw = lossless(tvm_cim.load("prime"))
    w = rng.integers(-127, 128, size=(700, 90)).astype(np.int8)
    r = Region("mm", MATMUL, [(33, 700)], (33, 90), x_scale=1.0, w_int=w, w_scale=np.ones(90, np.float32))
    x = codes(rng, (33, 700), 0)
    a = run(r, hw, "cim-mlc", x, shortcut=False)[0]["acc"]
    b = run(r, hw, "cim-mlc", x, shortcut=True)[0]["acc"]
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("preset,n", [("prime", 32), ("pimcomp-c", 160)])
def test_lossy_adc_error_is_measured(preset, n):
    """prime: 8-bit clipping ADC over 64 rows of 4-bit cells; pimcomp-c: offset-encoded 2-bit cells under an
    8-bit clipping ADC, 160 columns = a tile of 128 and one of 32 read together (the narrow one padded to the
    wide one's bitlines, whose zero cells do not decode to 0 with offset encoding). The rows fit one tile, so
    each output is one tile's read: the measured error is the outputs' error against integer numpy."""
    rng = np.random.default_rng(4)
    hw = tvm_cim.load(preset)
    assert not crossbar.is_lossless(hw)
    w = rng.integers(-127, 128, size=(256, n)).astype(np.int8)
    r = Region("mm", MATMUL, [(16, 256)], (16, n), x_scale=1.0, w_int=w, w_scale=np.ones(n, np.float32))
    x = rng.integers(128, 256, size=(16, 256)).astype(np.float32)  # dense high bits saturate the ADC
    env, stats, _, _ = run(r, hw, "none", x)
    exact = x.astype(np.int64) @ w.astype(np.int64)
    err = env["acc"][0] - exact
    assert not np.array_equal(env["acc"][0], exact)
    assert stats.adc_error["max_abs"] > 0
    assert stats.adc_error["max_abs"] == pytest.approx(np.abs(err).max())
    assert stats.adc_error["sum_sq_err"] == pytest.approx(float((err.astype(np.float64) ** 2).sum()))
    assert stats.adc_error["sum_sq_ref"] == pytest.approx(float((exact.astype(np.float64) ** 2).sum()))


def test_weights_stay_resident_across_runs():
    rng = np.random.default_rng(5)
    hw = lossless(tvm_cim.load("isaac"))
    w = rng.integers(-127, 128, size=(200, 50)).astype(np.int8)
    r = Region("mm", MATMUL, [(4, 200)], (4, 50), x_scale=1.0, w_int=w, w_scale=np.ones(50, np.float32))
    sched = schedule.schedule([r], hw, "none")
    cmap = mapping.allocate([r], hw, sched.plans)
    prog = codegen.generate(r, cmap.placements["mm"], hw)
    assert cmap.placements["mm"].resident
    chip = Chip(hw, Options(exact_shortcut=False))
    t = {"x": codes(rng, (4, 200), 0), **codegen.region_constants(r)}
    _, s1 = chip.run(prog, t)
    env, s2 = chip.run(prog, t)
    assert s1.weight_writes > 0 and s2.weight_writes == 0
    np.testing.assert_array_equal(env["acc"][0], t["x"].astype(np.int64) @ w.astype(np.int64))


def test_layer_larger_than_chip_runs_in_passes():
    rng = np.random.default_rng(6)
    hw = small_chip(lossless(tvm_cim.load("isaac")), cores=1, per_core=2)
    w = rng.integers(-127, 128, size=(600, 100)).astype(np.int8)  # 5 x 4 tiles > 2 crossbars
    r = Region("mm", MATMUL, [(7, 600)], (7, 100), x_scale=1.0, w_int=w, w_scale=np.ones(100, np.float32))
    x = codes(rng, (7, 600), 0)
    env, stats, prog, cmap = run(r, hw, "cim-mlc", x)
    pl = cmap.placements["mm"]
    assert len(pl.passes) > 1 and not pl.resident
    assert max(xb for reps in pl.replicas for xb in reps) < hw.total_crossbars
    np.testing.assert_array_equal(env["acc"][0], x.astype(np.int64) @ w.astype(np.int64))
    # every pass rewrites: a second run writes again
    chip = Chip(hw, Options(exact_shortcut=False))
    t = {"x": x, **codegen.region_constants(r)}
    chip.run(prog, t)
    assert chip.run(prog, t)[1].weight_writes == len(pl.tiles)


def test_encode_decode_round_trip():
    rng = np.random.default_rng(7)
    for name in ("isaac", "puma", "prime", "jia21", "jain21", "dynaplasia"):
        hw = tvm_cim.load(name)
        w = rng.integers(-127, 128, size=(1, 20, 9))
        assert np.array_equal(crossbar.decode(crossbar.encode(w, hw, 8), hw, 8), w)


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_and_mode_exact_with_signed_inputs(strategy, mode):
    """Each of the 12 (strategy, computing mode) pairs, signed activations (two unsigned phases)."""
    rng = np.random.default_rng(11)
    hw = lossless(tvm_cim.load(MODES[mode]))
    w = rng.integers(-127, 128, size=(300, 70)).astype(np.int8)
    r = Region("mm", MATMUL, [(37, 300)], (37, 70), x_scale=1.0, x_zero=0, x_signed=True, w_int=w,
               w_scale=np.ones(70, np.float32))
    x = rng.integers(-127, 128, size=(37, 300)).astype(np.float32)
    env, _, prog, _ = run(r, hw, strategy, x)
    assert prog.attr("signed_input") is True
    np.testing.assert_array_equal(env["acc"][0], x.astype(np.int64) @ w.astype(np.int64))
    read = {"crossbar": "CIM.read_xb", "core": "CIM.read_core", "wordline": "CIM.read_row"}[mode]
    assert prog.count_ops().get(read, 0) > 0


def test_each_technique_takes_effect_and_stays_exact():
    """Duplication adds replicas, wordline remapping shortens tiles to the active rows; all exact, all faster."""
    rng = np.random.default_rng(1)
    w = rng.integers(-127, 128, size=(300, 70)).astype(np.int8)
    r = Region("mm", MATMUL, [(37, 300)], (37, 70), x_scale=1.0, x_zero=0, w_int=w, w_scale=np.ones(70, np.float32))
    x = codes(rng, (37, 300), 0)
    ref = x.astype(np.int64) @ w.astype(np.int64)
    wl = small_chip(lossless(tvm_cim.load("jain21")), cores=4, per_core=64)  # room to remap rows
    res = {}
    for strategy in STRATEGIES:
        env, stats, prog, _ = run(r, wl, strategy, x)
        np.testing.assert_array_equal(env["acc"][0], ref)
        res[strategy] = (prog.attr("tile_rows"), prog.attr("replicas"), stats.latency_ns)
    assert res["none"][0] == wl.crossbar.rows
    # wordline remapping where it beats duplicating full-height tiles: here with one chunk per replica (with
    # cim-mlc's finer pipeline granularity, seven full-height copies are estimated faster than one remapped)
    one = R(strategies.get("cim-mlc").options(wl), pipeline_rounds=1, pipeline_vectors=0)
    env, stats, prog, _ = run(r, wl, "cim-mlc", x, options=one)
    np.testing.assert_array_equal(env["acc"][0], ref)
    assert prog.attr("tile_rows") == wl.crossbar.rows_active and stats.latency_ns < res["none"][2]
    assert res["greedy"][1] > 1
    assert res["cim-mlc"][2] < res["none"][2] and res["greedy"][2] < res["none"][2]
    xb = lossless(tvm_cim.load("isaac"))
    env, _, prog, _ = run(r, xb, "cim-mlc", x)
    np.testing.assert_array_equal(env["acc"][0], ref)
    assert prog.attr("replicas") > 1 and prog.attr("mvm_pipeline") is True


def test_dynamic_matmul_duplicated_stays_exact():
    """Replicas of a run-time operand are each written at run time; the vectors are shared out among them."""
    rng = np.random.default_rng(8)
    hw = lossless(tvm_cim.load("isaac"))
    a_shape, b_shape = (1, 4, 40, 64), (1, 4, 64, 30)
    r = Region("dm", DMATMUL, [a_shape, b_shape], (1, 4, 40, 30), x_scale=1.0, x_zero=128, y_scale=1.0)
    x = codes(rng, a_shape, 128)
    y = rng.integers(-127, 128, size=b_shape).astype(np.float32)
    env, stats, prog, cmap = run(r, hw, "cim-mlc", x, y)
    n_rep = len(cmap.placements["dm"].replicas)
    assert n_rep > 1 and stats.weight_writes == n_rep * len(cmap.placements["dm"].tiles)
    ref = np.matmul(x.astype(np.int64) + 128, y.astype(np.int64))
    np.testing.assert_array_equal(env["acc"], ref.reshape(4, 40, 30))


def test_offchip_weight_fetch_and_activation_spill_are_costed():
    """Rewritten weights come over the off-chip interface; a working set larger than the global buffer
    stays off-chip. Both cost time, results stay exact and the analytical estimate follows."""
    rng = np.random.default_rng(9)
    base = small_chip(lossless(tvm_cim.load("isaac")), cores=1, per_core=2)
    w = rng.integers(-127, 128, size=(600, 100)).astype(np.int8)  # 20 tiles on 2 crossbars: passes
    r = Region("mm", MATMUL, [(64, 600)], (64, 100), x_scale=1.0, w_int=w, w_scale=np.ones(100, np.float32))
    x = codes(rng, (64, 600), 0)
    ref = x.astype(np.int64) @ w.astype(np.int64)
    small_buf = R(base, chip=R(base.chip, global_buffer=R(base.chip.global_buffer, capacity_kb=16.0)))
    out = {}
    for name, hw in (("fits", base), ("spills", small_buf)):
        env, stats, prog, cmap = run(r, hw, "none", x)
        np.testing.assert_array_equal(env["acc"][0], ref)
        fetches = [o for o in prog.ops("run") if o.kind == "DMOV.fetch"]
        assert len(fetches) == len(cmap.placements["mm"].passes) > 1
        assert sum(o["bytes"] for o in fetches) == w.size  # one copy of the int8 weights per inference
        levels = {o["level"] for o in prog.ops("run") if o.kind in ("DMOV.load", "DMOV.store")}
        assert levels == ({"offchip"} if name == "spills" else {"global"})
        assert stats.spills == (name == "spills") and stats.energy_pj["offchip"] > 0
        # the off-chip interface alone needs this long for the weights
        assert stats.latency_ns >= w.size * 8 / hw.chip.offchip_bandwidth_bits * hw.cycle_ns
        est = schedule.schedule([r], hw, "none").estimate_ns
        assert abs(est / stats.latency_ns - 1) < 0.05
        out[name] = stats.latency_ns
    assert out["spills"] > out["fits"]  # loads and stores at the off-chip bandwidth


def test_joint_remap_dp_stays_exact_and_shares_the_crossbars():
    """The crossbar DP that knows about remapping (remap_joint) keeps outputs exact; a region's remapped
    copies fit in the crossbars its full-height copies would take."""
    from tvm_cim.compiler.estimate import Estimator
    from tvm_cim.compiler.strategies import duplication

    rng = np.random.default_rng(2)
    w = rng.integers(-127, 128, size=(300, 70)).astype(np.int8)
    r = Region("mm", MATMUL, [(37, 300)], (37, 70), x_scale=1.0, x_zero=0, w_int=w, w_scale=np.ones(70, np.float32))
    x = codes(rng, (37, 300), 0)
    ref = x.astype(np.int64) @ w.astype(np.int64)
    wl = small_chip(lossless(tvm_cim.load("jain21")), cores=4, per_core=64)
    opts = R(strategies.get("cim-mlc").options(wl), remap_joint=True)
    env, stats, prog, _ = run(r, wl, "cim-mlc", x, options=opts)
    np.testing.assert_array_equal(env["acc"][0], ref)
    est = Estimator.of(wl, 8, 8, opts)
    full, short = est.tiles(r, wl.crossbar.rows), est.tiles(r, wl.crossbar.rows_active)
    for d in (1, 5, 40):
        d_r = duplication.remapped(r, d, est, wl.crossbar.rows, wl)
        assert d_r * short <= d * full < (d_r + 1) * short
    assert prog.attr("replicas") * est.tiles(r, prog.attr("tile_rows")) <= wl.total_crossbars


@settings(max_examples=25, deadline=None)
@given(name=st.sampled_from(["prime", "puma", "jia21", "jain21", "isaac"]), wmax=st.sampled_from([1, 7, 40, 127]),
       xmax=st.sampled_from([1, 9, 127]), programmed=st.booleans(), seed=st.integers(0, 2**16))
def test_tile_proofs_skip_work_not_results(name, wmax, xmax, programmed, seed):
    """Bitlines a bound proves unaltered by the ADC are summed as an integer product ("tile"); the results equal
    every conversion made bit-serially, on lossy chips too, and plain integer numpy when the ADC cannot clip."""
    rng = np.random.default_rng(seed)
    hw = tvm_cim.load(name)
    w = rng.integers(-wmax, wmax + 1, size=(3, 1, 90, 11))
    w[0, :, :, :5] //= 16  # tiles and columns with small weights: their high slices hold zeros
    x = rng.integers(-xmax, xmax + 1, size=(3, 1, 6, 90))
    x[1] //= 8
    cells = crossbar.encode(w, hw, 8)
    lsb = None
    if programmed:
        lsb = crossbar.programmed_lsb(rng.integers(1, 4 * crossbar.max_partial_sum(hw), size=(3,) + cells.shape[-3:]),
                                      hw)
    full = crossbar.mvm_signed(x, cells, hw, 8, 8, exact_shortcut=False, lsb=lsb)
    for mode in ("tile", True):
        np.testing.assert_array_equal(crossbar.mvm_signed(x, cells, hw, 8, 8, exact_shortcut=mode, lsb=lsb), full)
    exact_hw = lossless(hw)
    np.testing.assert_array_equal(crossbar.mvm_signed(x, cells, exact_hw, 8, 8, exact_shortcut="tile"),
                                  np.einsum("tbvr,tbrn->tbvn", x, w))


def test_tile_proofs_on_a_lossy_chip_match_the_bitwise_path():
    """A region on PRIME (programmed 8-bit ADC over 64 rows of 4-bit cells: lossy): the simulator's "tile" mode
    (``--bitwise``) gives the accumulators of the every-conversion path, and of the default."""
    rng = np.random.default_rng(12)
    hw = tvm_cim.load("prime")
    w = rng.integers(-127, 128, size=(300, 40)).astype(np.int8)
    w[:, :20] //= 32  # small weights in half the columns: bitlines the bound proves exact
    r = Region("mm", MATMUL, [(9, 300)], (9, 40), x_scale=1.0, w_int=w, w_scale=np.ones(40, np.float32))
    x = rng.integers(0, 256, size=(9, 300)).astype(np.float32)
    x[:, ::3] = 0
    accs = [run(r, hw, "cim-mlc", x, shortcut=mode)[0]["acc"] for mode in (False, "tile", True)]
    assert not np.array_equal(accs[0][0], x.astype(np.int64) @ w.astype(np.int64))  # the ADC does alter sums
    np.testing.assert_array_equal(accs[1], accs[0])
    np.testing.assert_array_equal(accs[2], accs[0])

"""CMSwitch (paper 000): dual-mode arrays in the program format, the simulator, and the compiler.

Simulator semantics are checked on hand-edited programs of a small matrix
product on the ``dynaplasia`` preset (results against plain integer numpy;
durations against the preset's numbers written out here).
"""

import dataclasses
import math

import numpy as np
import pytest

import tvm_cim
from tvm_cim.compiler import codegen, mapping, schedule
from tvm_cim.compiler.region import MATMUL, Region
from tvm_cim.program import op, parse_program, print_program, verify
from tvm_cim.program.verify import ProgramError
from tvm_cim.simulator.engine import Chip, Options, SimulationError

R = dataclasses.replace


def _dyn():
    return tvm_cim.load("dynaplasia")


def _matmul(m=6, k=50, n=30, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.integers(-127, 128, size=(k, n)).astype(np.int8)
    r = Region("mm", MATMUL, [(m, k)], (m, n), x_scale=1.0, x_zero=0, w_int=w, w_scale=np.ones(n, np.float32))
    x = rng.integers(0, 256, size=(m, k)).astype(np.float32)
    return r, x, w


def _program(hw, r, strategy="none"):
    sched = schedule.schedule([r], hw, strategy)
    cmap = mapping.allocate([r], hw, sched.plans)
    return codegen.generate(r, cmap.placements[r.name], hw, sched.options, strategy), cmap


def _with_memory_store(prog, xbs):
    """The program with TOM on ``xbs`` first and every output store going into them."""
    run = [op("CM.switch", type="TOM", xbs=tuple(xbs))]
    for s in prog.run:
        if getattr(s, "opcode", None) == "DMOV" and s.get("op") == "store":
            args = dict(s.args)
            args["level"] = "xbmem"
            args["xbs"] = tuple(xbs)
            s = op("DMOV", **args)
        run.append(s)
    return R(prog, run=tuple(run))


def _run(hw, prog, r, x, functional=True):
    return Chip(hw, Options(functional=functional)).run(prog, {"x": x, **codegen.region_constants(r)})


def test_memory_mode_store_is_exact_costed_and_round_trips():
    hw = _dyn()
    r, x, w = _matmul()
    prog, cmap = _program(hw, r)
    mem = (94, 95)
    assert not set(mem) & set(cmap.placements["mm"].xbs)
    p2 = verify(_with_memory_store(prog, mem), hw.total_crossbars)
    assert parse_program(print_program(p2)) == p2
    env, stats = _run(hw, p2, r, x)
    np.testing.assert_array_equal(env["acc"][0], x.astype(np.int64) @ w.astype(np.int64))
    assert stats.metaop_counts["CM.switch"] == 1
    assert stats.energy_pj["switch"] == 2 * 1.0  # two arrays, 1 pJ each (preset)
    ev = stats.events
    sw = ev.kind.index("CM.switch")
    assert ev.dur[sw] == pytest.approx(5.0)  # 1 cycle at 200 MHz
    stores = [i for i, k in enumerate(ev.kind) if k == "DMOV.store"]
    nbytes = [int(s.get("bytes")) for s in p2.ops("run") if s.kind == "DMOV.store"]
    for i, b in zip(stores, nbytes):  # two arrays at 32 b/cycle each
        assert ev.dur[i] == pytest.approx(math.ceil(b * 8 / 64) * 5.0)
        assert ev.res[i] == ("xb:94", "xb:95")
        assert sw in ev.deps[i] or ev.deps[i]  # after the switch (directly or through its chunk)
    assert stats.energy_pj["xbmem"] == pytest.approx(sum(nbytes) * 8 * 0.035)


def test_reading_a_crossbar_in_memory_mode_is_an_error():
    hw = _dyn()
    r, x, _ = _matmul()
    prog, cmap = _program(hw, r)
    xb = cmap.placements["mm"].xbs[0]
    bad = R(prog, run=(op("CM.switch", type="TOM", xbs=(xb,)),) + prog.run)
    for functional in (True, False):
        with pytest.raises(SimulationError, match="memory mode"):
            _run(hw, bad, r, x, functional)


def test_memory_access_needs_memory_mode_capacity_and_data():
    hw = _dyn()
    r, x, _ = _matmul(m=40, n=320)  # 40 x 320 outputs = 12 800 bytes
    prog, _ = _program(hw, r)
    # storing into arrays that compute
    compute = R(_with_memory_store(prog, (95,)), run=_with_memory_store(prog, (95,)).run[1:])
    with pytest.raises(SimulationError, match="compute mode"):
        _run(hw, compute, r, x)
    # capacity: one array holds 12 800 bytes, the output fits exactly; a second store overflows
    _run(hw, _with_memory_store(prog, (95,)), r, x)
    twice = _with_memory_store(prog, (95,))
    stores = [s for s in twice.run if getattr(s, "opcode", None) == "DMOV" and s.get("op") == "store"]
    with pytest.raises(SimulationError, match="capacity"):
        _run(hw, R(twice, run=twice.run + tuple(stores)), r, x)
    # loading from a memory array that holds nothing
    load = op("DMOV", op="load", src=tvm_cim.program.Ref("x"), level="xbmem", frac=(0.0, 1.0), bytes=10, xbs=(90,))
    empty = R(prog, run=(op("CM.switch", type="TOM", xbs=(90,)), load) + prog.run)
    with pytest.raises(SimulationError, match="hold no data"):
        _run(hw, empty, r, x)


def test_switch_only_switchable_arrays_and_verifier_checks_levels():
    isaac = tvm_cim.load("isaac")
    r, x, _ = _matmul()
    prog, _ = _program(isaac, r)
    with pytest.raises(SimulationError, match="can switch"):
        _run(isaac, R(prog, run=(op("CM.switch", type="TOM", xbs=(3,)),) + prog.run), r, x)
    hw = _dyn()
    prog, _ = _program(hw, r)
    bad = op("DMOV", op="store", src=tvm_cim.program.Ref("yf"), level="xbmem", frac=(0.0, 1.0), bytes=1)
    with pytest.raises(ProgramError, match="xbmem"):
        verify(R(prog, run=prog.run[:-1] + (bad,) + prog.run[-1:]), hw.total_crossbars)
    with pytest.raises(ProgramError, match="does not exist"):
        verify(_with_memory_store(prog, (96,)), hw.total_crossbars)


def test_toc_then_rewrite_restores_computing_and_weights_are_lost_on_tom():
    hw = _dyn()
    r, x, w = _matmul()
    prog, cmap = _program(hw, r)
    chip = Chip(hw)
    tensors = {"x": x, **codegen.region_constants(r)}
    chip.run(prog, tensors)
    xb = cmap.placements["mm"].xbs[0]
    other, _ = _program(hw, _matmul(seed=1)[0])
    other = R(other, name="other", setup=(), run=(op("CM.switch", type="TOM", xbs=(xb,)),
                                                   op("CM.switch", type="TOC", xbs=(xb,))))
    chip.run(other, {"x": x, **codegen.region_constants(_matmul(seed=1)[0])})
    # the weights in xb were destroyed by TOM: the program's setup runs again and the result is exact
    env, stats = chip.run(prog, tensors)
    assert stats.setup_ns > 0
    np.testing.assert_array_equal(env["acc"][0], x.astype(np.int64) @ w.astype(np.int64))


def test_write_ports_serialise_programming():
    hw = _dyn()
    r, x, _ = _matmul(k=900, n=100)  # 3 row blocks x 3 column blocks = 9 tiles
    prog, cmap = _program(hw, r)
    tiles = len(cmap.placements["mm"].tiles)
    assert tiles == 9
    _, free = _run(hw, prog, r, x, functional=False)
    one = R(hw, dual_mode=R(hw.dual_mode, write_ports=1))
    _, serial = _run(one, prog, r, x, functional=False)
    row_write = hw.crossbar.device.write_latency_ns
    fetch = math.ceil(900 * 100 * 8 / hw.chip.offchip_bandwidth_bits) * hw.cycle_ns  # weights cross the link first
    assert free.setup_ns == pytest.approx(fetch + 320 * row_write)  # all tiles at once, 320 rows each
    assert serial.setup_ns == pytest.approx(fetch + (2 * 320 + 260) * 3 * row_write)  # one tile after another

"""Timing-only shortcuts (issue 15): chains of reads booked at once and crossbar readers kept only where a section
rewrites the crossbar give, event by event, what placing every row on its own and keeping every reader give."""

import numpy as np
import pytest

import tvm_cim
from tvm_cim.common import zoo
from tvm_cim.common.onnx_io import import_onnx
from tvm_cim.report import timeline as report_timeline
from tvm_cim.simulator import timeline as T
from tvm_cim.simulator.engine import Chip, timing_inputs
from tvm_cim.simulator.engine import Options as SimOptions
from tvm_cim.simulator.timeline import Events, schedule_graph

from .test_timeline import _brute_schedule, _same_recording


def _run(info, bulk: bool, monkeypatch):
    """Timing-only runs of every program and the network's timeline, with the shortcuts on or off."""
    monkeypatch.setattr(T, "CHAINS", bulk)
    monkeypatch.setattr(Chip, "prune_readers", bulk)
    chip = Chip(info.hw, SimOptions(functional=False))
    stats = [chip.run(p, timing_inputs(p))[1] for p in info.programs]
    alone = [(s.events.alone, s.latency_ns, s.setup_ns) for s in stats]
    return stats, alone, report_timeline(info, stats)


def _count_chains(monkeypatch):
    """Rows :func:`timeline._chain` booked at once and refused, counted."""
    seen = {"booked": 0, "refused": 0}
    real = T._chain

    def spy(ev, i, j, *a):
        ok = real(ev, i, j, *a)
        seen["booked" if ok else "refused"] += max(j - i - 1, 0)
        return ok

    monkeypatch.setattr(T, "_chain", spy)
    return seen


def _same_network(info, monkeypatch):
    seen = _count_chains(monkeypatch)
    a, alone_a, tl_a = _run(info, False, monkeypatch)
    assert seen == {"booked": 0, "refused": 0}  # the switch turns the chains off
    b, alone_b, tl_b = _run(info, True, monkeypatch)
    _same_recording(a, b)
    for (sa, la, ua), (sb, lb, ub) in zip(alone_a, alone_b, strict=True):  # each program's schedule alone
        assert la == lb and ua == ub
        assert (sa is None) == (sb is None)
        if sa is not None:
            assert sa[0].tobytes() == sb[0].tobytes() and sa[1].tobytes() == sb[1].tobytes()
    assert np.array_equal(tl_a.start, tl_b.start) and np.array_equal(tl_a.finish, tl_b.finish)
    assert tl_a.latency_ns == tl_b.latency_ns and tl_a.utilisation == tl_b.utilisation
    assert tl_a.peak_power_mw == tl_b.peak_power_mw and tl_a.region_span == tl_b.region_span
    return seen, b


@pytest.mark.parametrize("hw_name", ["jain21", "miredo", "isaac"])
def test_bulk_timing_equals_per_row_timing_on_resnet18(hw_name, monkeypatch):
    """ResNet-18 (32x32): jain21 and miredo rewrite their crossbars in many passes (readers consulted), isaac
    keeps them resident (no reader consulted); jain21's row-group blocks are booked as chains."""
    mod = import_onnx(zoo.build_model("resnet18", image_size=32), "r18")[0]
    _, info = tvm_cim.offload(mod, tvm_cim.load(hw_name), strategy="cim-mlc")
    seen, stats = _same_network(info, monkeypatch)
    if hw_name == "jain21":
        assert seen["booked"] > 1000
        assert any(s.events.chains for s in stats)


@pytest.mark.slow
def test_bulk_timing_equals_per_row_timing_on_cmswitch_segments(monkeypatch):
    """CMSwitch on Dynaplasia (MobileNetV2 32x32): several segments, crossbars switched between compute and
    memory mode (switches and memory-mode accesses wait for the arrays' readers)."""
    mod = import_onnx(zoo.build_model("mobilenetv2", image_size=32), "mnv2")[0]
    _, info = tvm_cim.offload(mod, tvm_cim.load("dynaplasia"), strategy="cmswitch")
    assert info.schedule.segments > 1
    assert any(o.opcode == "CM.switch" for p in info.programs for o in p.ops("run"))
    _same_network(info, monkeypatch)


def _region_with_hints(rng, n):
    """Random operations on a few resources (integer durations) with chain hints over runs of reads, some of
    which the scheduler must refuse: a run whose first read fits an earlier gap, a run holding a read of
    duration 0, a run of reads with different dependencies, a run with a region-input load inside."""
    ev = Events()
    kinds = []
    while len(ev) < n:
        i = len(ev)
        kind = int(rng.integers(0, 6))
        if kind <= 2 and i:  # a block of reads of one virtual crossbar: one dependency list, one resource
            deps = tuple(sorted(set(rng.integers(max(0, i - 30), i, 2).tolist())))
            r = (f"vxb:{int(rng.integers(0, 3))}",)
            m = int(rng.integers(2, 9))
            durs = [float(rng.integers(1, 9)) for _ in range(m)]
            flaw = int(rng.integers(0, 4))
            if flaw == 1:
                durs[int(rng.integers(1, m))] = 0.0
            for k, d in enumerate(durs):
                dk = tuple(sorted(set(deps) | {i - 1})) if flaw == 2 and k == m - 1 else deps
                ev.add_stored(d, r, dk, 1.0, True, "CIM.read_row")
            ev.chains[i] = i + m
            if flaw == 3:
                ev.inputs.append((i + m - 1, 0.0, 1.0))
            kinds.append(flaw)
        else:
            res = tuple(sorted(set(rng.choice(["vxb:0", "vxb:1", "vxb:2", "link:0"], rng.integers(1, 3)))))
            deps = tuple(sorted(set(rng.integers(0, i, rng.integers(0, 3)).tolist()))) if i else ()
            ev.add(float(rng.integers(0, 20)), res, deps, 1.0, False, "CIM.write_xb")
    return ev, kinds


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_chains_book_what_each_row_books_and_fall_back_where_not_covered(seed, monkeypatch):
    """Chain hints over random blocks of reads (some valid, some with a zero-duration read, different
    dependencies or an input load inside): the start and finish of every row equal placing each row on its own
    and a unit-step list scheduler (independent); refused hints fall back to the per-row path."""
    rng = np.random.default_rng(seed)
    ev, kinds = _region_with_hints(rng, 500)
    assert {0, 1, 2, 3} <= set(kinds)
    seen = _count_chains(monkeypatch)
    bulk = schedule_graph([("r", ev, 0)], {}, pipeline=True)
    assert seen["booked"] > 0 and seen["refused"] > 0  # both paths taken
    ev.alone = None
    monkeypatch.setattr(T, "CHAINS", False)
    rows = schedule_graph([("r", ev, 0)], {}, pipeline=True)
    assert np.array_equal(bulk.start, rows.start) and np.array_equal(bulk.finish, rows.finish)
    assert bulk.utilisation == rows.utilisation
    plain = Events(dur=ev.dur, res=ev.res, deps=ev.deps, energy=ev.energy, analog=ev.analog, kind=ev.kind)
    start, finish = _brute_schedule(plain)  # (region-input loads start at 0, what the brute scheduler assumes)
    assert bulk.start.tolist() == start and bulk.finish.tolist() == finish


def test_chain_refused_when_its_first_read_fills_an_earlier_gap(monkeypatch):
    """The first read of a block fits a gap before the resource's last busy interval: the next reads are not
    back to back after it (a shorter one may fit another gap), so the chain is refused and each row placed."""
    ev = Events()
    ev.add(10.0, ("vxb:0",), (), 1.0, False, "CIM.write_xb")  # 0: [0, 10)
    ev.add(5.0, ("link:0",), (), 1.0, False, "DMOV.scatter")  # 1: [0, 5)
    ev.add(10.0, ("vxb:0",), (1,), 1.0, False, "CIM.write_xb")  # 2: [10, 20)
    ev.add(30.0, ("vxb:0",), (), 1.0, False, "CIM.write_xb")  # 3: [20, 50)
    ev.add(12.0, ("vxb:0",), (2,), 1.0, False, "CIM.write_xb")  # 4: [50, 62)
    ev.add(20.0, ("vxb:0",), (4,), 1.0, False, "CIM.write_xb")  # 5: [62, 82)
    ev.add(20.0, ("vxb:0",), (), 1.0, False, "CIM.write_xb")  # 6: [82, 102)
    deps = (1,)
    for d in (4.0, 3.0, 3.0):  # reads ready at 5: the first one at the end (no gap), all back to back
        ev.add_stored(d, ("vxb:0",), deps, 1.0, True, "CIM.read_row")
    ev.chains[7] = 10
    seen = _count_chains(monkeypatch)
    tl = schedule_graph([("r", ev, 0)], {}, pipeline=True)
    assert seen == {"booked": 2, "refused": 0}
    assert tl.start[7:].tolist() == [102.0, 106.0, 109.0]

    # a shorter read may fill a gap the first read did not fit: [50, 54) is free when a block ready at 0 comes
    ev2 = Events()
    ev2.add(50.0, ("vxb:0",), (), 1.0, False, "CIM.write_xb")  # 0: [0, 50)
    ev2.add(54.0, ("link:0",), (), 1.0, False, "DMOV.scatter")  # 1: [0, 54)
    ev2.add(48.0, ("vxb:0",), (1,), 1.0, False, "CIM.write_xb")  # 2: [54, 102)
    for d in (6.0, 3.0):  # the first after everything (the gap is too short), the second in the gap
        ev2.add_stored(d, ("vxb:0",), (), 1.0, True, "CIM.read_row")
    ev2.chains[3] = 5
    seen = _count_chains(monkeypatch)
    tl2 = schedule_graph([("r", ev2, 0)], {}, pipeline=True)
    assert seen == {"booked": 0, "refused": 1}
    assert tl2.start[3:].tolist() == [102.0, 50.0]
    start, finish = _brute_schedule(ev2)
    assert tl2.start.tolist() == start and tl2.finish.tolist() == finish

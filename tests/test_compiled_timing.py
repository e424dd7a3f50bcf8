"""The compiled timing path (issue 15): a section encoded, its scoreboard kept and its operations placed in
compiled code, against the Python recorder and list scheduler, and the encoded form against the program."""

import numpy as np
import pytest

import tvm_cim
from tvm_cim.common import zoo
from tvm_cim.common.onnx_io import import_onnx
from tvm_cim.hardware import cost
from tvm_cim.program import Decl, Parallel, Program, Range, Ref, op, walk
from tvm_cim.program.encode import encode
from tvm_cim.report import build_report, simulate_timing
from tvm_cim.report import timeline as report_timeline
from tvm_cim.simulator.compiled import TableEvents
from tvm_cim.simulator.critical import critical_path
from tvm_cim.simulator.engine import Chip, timing_inputs
from tvm_cim.simulator.engine import Options as SimOptions
from tvm_cim.simulator.timeline import schedule_graph


def _offload(model: str, hw: str, strategy: str = "cim-mlc", size: int = 32):
    mod = import_onnx(zoo.build_model(model, image_size=size), model)[0]
    return tvm_cim.offload(mod, tvm_cim.load(hw), strategy=strategy)[1]


def _timing(info, compiled: bool, monkeypatch):
    monkeypatch.setattr(Chip, "compiled", compiled)
    stats, _ = simulate_timing(info, schedule=False)
    return stats, report_timeline(info, stats)


@pytest.mark.parametrize("hw_name", ["isaac", "jain21", "prime", "pimcomp-a", "dynaplasia", "jia21"])
def test_compiled_timing_gives_what_the_python_recorder_gives(hw_name, monkeypatch):
    """ResNet-18 (32x32), timing only: every region's latency, setup time, energy by component and counts,
    and the network's start and finish of every operation, utilisation and power, equal bit for bit (resident
    weights on isaac, prime and jia21; crossbars rewritten in passes on jain21; write ports on pimcomp-a)."""
    info = _offload("resnet18", hw_name)
    a, tl_a = _timing(info, False, monkeypatch)
    b, tl_b = _timing(info, True, monkeypatch)
    assert all(type(s.events) is TableEvents for s in b)  # every region took the compiled path
    assert not any(type(s.events) is TableEvents for s in a)
    for sa, sb in zip(a, b, strict=True):
        assert sa.latency_ns == sb.latency_ns and sa.setup_ns == sb.setup_ns
        assert dict(sa.energy_pj) == dict(sb.energy_pj) and list(sa.energy_pj) == list(sb.energy_pj)
        assert dict(sa.metaop_counts) == dict(sb.metaop_counts)
        assert sa.weight_writes == sb.weight_writes and sa.crossbars == sb.crossbars
        assert len(sa.events) == len(sb.events)
        assert sa.events.inputs == sb.events.inputs and sa.events.outputs == sb.events.outputs
        t, names = sb.events.table, sb.events.res_names  # what each row occupies: the recorder's resources
        assert [tuple(names[k] for k in t.res_idx[t.res_ptr[i]:t.res_ptr[i + 1]]) for i in range(len(t))] == \
            [tuple(r) for r in sa.events.res]
    assert np.array_equal(tl_a.start, tl_b.start) and np.array_equal(tl_a.finish, tl_b.finish)
    assert tl_a.latency_ns == tl_b.latency_ns and tl_a.region_span == tl_b.region_span
    assert tl_a.region_busy == tl_b.region_busy and tl_a.utilisation == tl_b.utilisation
    assert list(tl_a.utilisation) == list(tl_b.utilisation)
    assert tl_a.peak_power_mw == tl_b.peak_power_mw and tl_a.peak_write_power_mw == tl_b.peak_write_power_mw
    assert tl_a.analog_energy_pj == tl_b.analog_energy_pj and list(tl_a.kinds) == list(tl_b.kinds)
    ra, rb = build_report(info, a, hw_name), build_report(info, b, hw_name)
    assert ra == rb


def test_the_rows_of_a_compiled_region_are_the_python_recorders_and_schedule_the_same(monkeypatch):
    """What reads a compiled region's rows (the critical path walks its dependencies) gets the Python
    recorder's rows, and scheduling those gives the times the compiled path gave."""
    info = _offload("resnet18", "jain21")
    b, tl_b = _timing(info, True, monkeypatch)
    monkeypatch.setattr(Chip, "compiled", False)
    chip = Chip(info.hw, SimOptions(functional=False))
    ref = [chip.run(p, timing_inputs(p))[1].events for p in info.programs]
    for s, ev in zip(b, ref, strict=True):
        assert s.events.dur == ev.dur and s.events.res == ev.res and s.events.kind == ev.kind
        assert [tuple(d) for d in s.events.deps] == [tuple(d) for d in ev.deps]
    pipeline = bool(info.schedule.options.pipeline)
    rows = [(s.name, s.events.events(), s.segment) for s in b]  # the Python scheduler places the rows
    tl_rows = schedule_graph(rows, info.producers, pipeline)
    assert np.array_equal(tl_rows.start, tl_b.start) and np.array_equal(tl_rows.finish, tl_b.finish)
    regions = [(s.name, s.events, s.segment) for s in b]  # the critical path reads the compiled regions' rows
    path = critical_path(regions, info.producers, pipeline, tl_b)
    assert path["latency_ns"] == tl_b.latency_ns and path["path_ns"] == pytest.approx(tl_b.latency_ns)


def test_a_hand_timed_section_dependencies_and_a_shared_port(monkeypatch):
    """Two loads share the global-buffer port; a quantisation waits for the first on the chip ALU; the store
    waits for the quantisation and for the port: latency max(L + Q, 2L) + L by hand, with and without the
    compiled path."""
    hw = tvm_cim.load("isaac")
    run = (op("DMOV", op="load", src=Ref("x"), vecs=Range(0, 1), level="global", frac=(0.0, 1.0), bytes=64),
           op("DCOM", op="quantize", src=Ref("x"), dst=Ref("q"), vecs=Range(0, 1), scale=1.0, zero=0, bits=8,
              signed=False, elements=4096),
           op("DMOV", op="load", src=Ref("y"), vecs=Range(0, 1), level="global", frac=(0.0, 1.0), bytes=64),
           op("DMOV", op="store", src=Ref("q"), vecs=Range(0, 1), level="global", frac=(0.0, 1.0), bytes=64))
    decls = (Decl("input", "x", "float32", (1, 64)), Decl("input", "y", "float32", (1, 64)),
             Decl("output", "out", "float32", (1, 64)))
    prog = Program("m0.r000_hand", (("M", 1),), decls, (), run)
    lat = {}
    for compiled in (False, True):
        monkeypatch.setattr(Chip, "compiled", compiled)
        s = Chip(hw, SimOptions(functional=False)).run(prog, timing_inputs(prog))[1]
        assert (type(s.events) is TableEvents) == compiled
        lat[compiled] = s.latency_ns
    d_load = float(cost.load_store(hw, 64, False)[0])
    d_q = float(cost.alu(hw, "quantize", 4096, core_level=False)[0])
    assert d_q > 0 and d_load > 0
    assert lat[True] == lat[False] == pytest.approx(max(d_load + d_q, 2 * d_load) + d_load)


def test_the_encoding_rebuilds_every_operation():
    """Each operation is its template with the encoded columns put back (vecs, frac, crossbar, virtual
    crossbar, row group, core; a write's tile size), in execution order; operations of one template differ
    only there."""
    info = _offload("resnet18", "jain21")
    names = {2: "xb", 3: "vxb", 4: "group", 5: "core"}
    for p in info.programs[:6]:
        enc = encode(p)
        assert encode(p) is enc  # kept on the program
        for section, sec in (("setup", enc.setup), ("run", enc.run)):
            ops = list(walk(getattr(p, section)))
            assert list(sec.ops) == ops
            cols = np.stack([sec.v0, sec.v1, sec.xb, sec.vxb, sec.group, sec.core], axis=1)
            for i, o in enumerate(ops):
                t = enc.templates[sec.tid[i]]
                assert t.opcode == o.opcode
                a, ta = o._index, t._index
                assert set(a) == set(ta)
                for k, v in a.items():
                    if k == "vecs" and isinstance(v, Range):
                        assert (v.start, v.stop) == (cols[i, 0], cols[i, 1])
                    elif k == "frac":
                        assert (float(v[0]), float(v[1])) == (sec.f0[i], sec.f1[i])
                    elif k in names.values() and type(v) is int:
                        assert v == cols[i, [j for j, n in names.items() if n == k][0]]
                    elif o.opcode == "CIM.write_xb" and k in ("rows", "cols"):
                        assert v.stop - v.start == (sec.rows if k == "rows" else sec.cols)[i]
                    else:
                        assert v == ta[k], (o, t)


def test_parallel_reads_of_one_slice_are_counted_as_the_recorder_groups_them():
    """The encoding counts the reads the Python recorder records together (one virtual crossbar, input slice
    and accumulator per block), not other parallel blocks."""
    rd = [op("CIM.read_row", vxb=0, group=g, src=Ref("x"), vecs=Range(0, 2), dst=Ref("acc")) for g in range(3)]
    other = op("CIM.read_row", vxb=1, group=0, src=Ref("x"), vecs=Range(0, 2), dst=Ref("acc"))
    prog = Program("p", run=(Parallel(tuple(rd)), Parallel((rd[0], other)), rd[1]))
    enc = encode(prog)
    assert enc.run.together == 3 and len(enc.run.ops) == 6
    assert enc.templates[enc.run.tid[0]] is rd[0] and enc.run.tid[1] == enc.run.tid[0]
    assert enc.run.tid[4] == enc.run.tid[0]  # another virtual crossbar: the same template, its own column
    assert enc.run.vxb.tolist() == [0, 0, 0, 0, 1, 0] and enc.run.group.tolist() == [0, 1, 2, 0, 0, 1]


@pytest.mark.parametrize("hw_name,strategy", [("dynaplasia", "cmswitch"), ("pimcomp-b", "pimcomp-ll"),
                                              ("miredo", "miredo")])
def test_programs_the_compiled_path_does_not_cover_are_recorded_in_python(hw_name, strategy, monkeypatch):
    """Memory-mode arrays and switches (CMSwitch), local memories (PIMCOMP low latency) and loop nests (MIREDO)
    are recorded operation by operation, with the same figures whether the compiled path is on or off."""
    info = _offload("resnet18", hw_name, strategy)
    a, tl_a = _timing(info, False, monkeypatch)
    b, tl_b = _timing(info, True, monkeypatch)
    assert any(type(s.events) is not TableEvents for s in b)
    assert [s.latency_ns for s in a] == [s.latency_ns for s in b]
    assert tl_a.latency_ns == tl_b.latency_ns


def test_twins_of_compiled_regions_take_their_figures_and_keep_their_own_resources(monkeypatch):
    """VGG-16 (32x32) on jain21, timing only: regions that are an earlier one but for their quantisation
    scales take its table (their virtual crossbars renamed): the network's timeline, utilisation included,
    equals simulating every program, compiled or in Python."""
    info = _offload("vgg16", "jain21")
    taken, tl_taken = _timing(info, True, monkeypatch)
    assert sum(1 for s in taken if s.twin_of) >= 3 and all(type(s.events) is TableEvents for s in taken)
    monkeypatch.setattr(Chip, "reuse_timing", False)
    every, tl_every = _timing(info, True, monkeypatch)
    python, tl_python = _timing(info, False, monkeypatch)
    for tl in (tl_every, tl_python):
        assert np.array_equal(tl_taken.start, tl.start) and np.array_equal(tl_taken.finish, tl.finish)
        assert tl_taken.utilisation == tl.utilisation and tl_taken.peak_power_mw == tl.peak_power_mw
    for a, b in zip(taken, python, strict=True):
        assert a.latency_ns == b.latency_ns and dict(a.energy_pj) == dict(b.energy_pj)

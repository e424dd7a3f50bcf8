"""Timing-only recording (issue 15): crossbar readers kept only where a section writes, writes back from or
switches the crossbar give, event by event, what keeping every reader gives, and the same schedules."""

import numpy as np
import pytest

import tvm_cim
from tvm_cim.common import zoo
from tvm_cim.common.onnx_io import import_onnx
from tvm_cim.program import Parallel, Program, Range, Ref, op
from tvm_cim.report import timeline as report_timeline
from tvm_cim.simulator.engine import Chip, timing_inputs
from tvm_cim.simulator.engine import Options as SimOptions

from .test_timeline import _same_recording


def _run(info, prune: bool, monkeypatch):
    """Timing-only runs of every program and the network's timeline, readers pruned or not."""
    monkeypatch.setattr(Chip, "prune_readers", prune)
    chip = Chip(info.hw, SimOptions(functional=False))
    chip.compiled = False  # the Python recorder's readers (the compiled path keeps no reader lists)
    stats = [chip.run(p, timing_inputs(p))[1] for p in info.programs]
    alone = [(s.events.alone, s.latency_ns, s.setup_ns) for s in stats]
    return stats, alone, report_timeline(info, stats)


def _same_network(info, monkeypatch):
    kept = []
    real = Chip._live

    def spy(self, xb_keys):
        out = real(self, xb_keys)
        kept.append((len(out), len(xb_keys)))
        return out

    monkeypatch.setattr(Chip, "_live", spy)
    a, alone_a, tl_a = _run(info, False, monkeypatch)
    assert all(k == n for k, n in kept)  # the switch keeps every reader
    kept.clear()
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
    return kept


@pytest.mark.parametrize("hw_name", ["jain21", "miredo", "isaac"])
def test_pruned_readers_record_what_every_reader_records_on_resnet18(hw_name, monkeypatch):
    """ResNet-18 (32x32): jain21 and miredo rewrite their crossbars in many passes (readers consulted, kept),
    isaac keeps them resident (no reader consulted in the run section: none kept there)."""
    mod = import_onnx(zoo.build_model("resnet18", image_size=32), "r18")[0]
    _, info = tvm_cim.offload(mod, tvm_cim.load(hw_name), strategy="cim-mlc")
    kept = _same_network(info, monkeypatch)
    assert kept
    if hw_name == "isaac":
        assert all(k == 0 for k, _ in kept)  # resident weights: no read kept as a reader
    else:
        assert any(k > 0 for k, _ in kept)  # crossbars rewritten: their reads kept (the writes wait for them)


@pytest.mark.slow
def test_pruned_readers_record_what_every_reader_records_on_cmswitch_segments(monkeypatch):
    """CMSwitch on Dynaplasia (MobileNetV2 32x32): several segments, crossbars switched between compute and
    memory mode (switches and memory-mode accesses wait for the arrays' readers)."""
    mod = import_onnx(zoo.build_model("mobilenetv2", image_size=32), "mnv2")[0]
    _, info = tvm_cim.offload(mod, tvm_cim.load("dynaplasia"), strategy="cmswitch")
    assert info.schedule.segments > 1
    assert any(o.opcode == "CM.switch" for p in info.programs for o in p.ops("run"))
    _same_network(info, monkeypatch)


def test_structure_collects_every_operation_that_waits_for_reads():
    """Per section, the crossbars written, written back from or switched: the only operations that consult a
    crossbar's readers (a read of any other crossbar is not kept as a reader)."""
    w = op("CIM.write_xb", xb=3, src=Ref("w"), rows=Range(0, 4), cols=Range(0, 4))
    sw = op("CM.switch", xbs=(5, 6), type="TOM")
    wb = op("DMOV", op="writeback", src=Ref("y"), xbs=(7,), level="global", bytes=16)
    rd = op("CIM.read_xb", vxb=0, src=Ref("x"), dst=Ref("acc"))
    prog = Program("p", setup=(op("CIM.bind_vxb", vxb=0, xbs=(1,), rows=(Range(0, 4),), cols=(Range(0, 4),)), w),
                   run=(rd, Parallel((sw, rd)), wb))
    vxbs, loop, setup_xbs, written, rewritten = Chip._structure(prog)
    assert setup_xbs == [3] and written == {3} and not loop and list(vxbs) == [0]
    assert rewritten == {"setup": {"xb:3"}, "run": {"xb:5", "xb:6", "xb:7"}}

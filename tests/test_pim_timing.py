"""The PIM timing model against the devices' own timing rules (issue 14, section 1).

Hand-written command streams isolate one rule at a time: the MAC issue rate
(unit clock, power constraint), the pseudo-channels' separate data buses, the
activation windows (tRRD / tFAW) and the result moves (MVSB) that overlap the
MACs on their own data path.
"""

from __future__ import annotations

import dataclasses
import pathlib

import pytest

from tvm_cim.common.hardware import HardwareDescriptionError
from tvm_pim import load
from tvm_pim.compiler import codegen, space
from tvm_pim.compiler.kernels import KernelSpec
from tvm_pim.cost.host import roofline
from tvm_pim.hardware.view import PimView
from tvm_pim.simulator import Simulator

HEAD = (
    "pimstream 1\ndevice {dev}\n"
    'kernel {{"kind": "va", "resident": [], "scale": 1.0, "sizes": {{"b": 1, "i": 65536}}}}\n'
    "tensor A float16 1x65536 input\ntensor B float16 1x65536 input\ntensor C float16 1x65536 output\n"
    "units 1 {cores}\nmemory 4096\n"
)


def _run(dev: str, body: str, phase: str = "compute"):
    view = PimView(load(dev))
    text = HEAD.format(dev=dev, cores=view.cores_per_group) + f"phase {phase}\n" + body
    return Simulator(view.hw).run(text, functional=False), view


def _mac_stream(view: PimView, n: int) -> str:
    mac = view.command("dot", "group") or view.command("mac", "group")
    act, pre = view.command("act", "group"), view.command("pre", "group")
    return f"  {act} @0:* row=0\n  {mac} @0:* addr=0 n={n} acc=0 per={n} pitch={n} vecs=1 fresh=1 reg=0\n  {pre} @0:*\n"


@pytest.mark.parametrize("dev", ["hbm-pim", "attacc-unconstrained", "attacc"])
def test_mac_issue_rate_is_the_unit_clock(dev):
    """Back-to-back all-bank MACs issue at the unit clock; under AttAcc's power constraint every tccd_ab."""
    view = PimView(load(dev))
    t1 = _run(dev, _mac_stream(view, 1000))[0].compute_ns
    t2 = _run(dev, _mac_stream(view, 3000))[0].compute_ns
    rate_mhz = 2000 / (t2 - t1) * 1e3
    t = view.hw.dram.timing
    mac = view.hw.commands[view.command("dot", "group") or view.command("mac", "group")]
    expect = view.hw.core.frequency_mhz * mac.latency_cycles / max(mac.latency_cycles, t.tccd_ab or 0)
    assert rate_mhz == pytest.approx(expect, rel=0.01)
    if dev == "attacc":
        # AttAcc's default is power-constrained: 4 of 6 cycles, 325 MHz x 4/6
        assert rate_mhz == pytest.approx(325.0 * 4 / 6, rel=0.01)
    if dev == "attacc-unconstrained":
        # the HBM3 5.2 Gbps clock: tCK = 1 / (5200 MT/s / 4) = 0.769 ns, one MAC per 4 tCK
        assert rate_mhz == pytest.approx(1e3 / (4 * 1e3 / 1300), rel=0.01)


def test_unit_clock_must_match_the_dram_clock(tmp_path):
    """core.frequency_mhz is checked against the column cadence, with a message naming the key."""
    text = pathlib.Path(load("attacc").source_path).read_text()
    f = tmp_path / "bad-clock.toml"
    f.write_text(text.replace('name = "attacc"', 'name = "bad-clock"').replace("frequency_mhz = 325.0", "frequency_mhz = 333.0"))
    with pytest.raises(HardwareDescriptionError, match="core.frequency_mhz"):
        load(str(f))


def _writes(cores: str, cols: int = 256) -> str:
    return f"  WR @0:{cores} addr=0 src=A[0,0:{cols * 16}:{cols * 16}] lay=lin:{cols * 16}\n"


def test_pseudo_channels_have_separate_data_buses():
    """Host writes to 8 banks: all on one pseudo-channel take twice as long as 4 + 4 on both; one
    pseudo-channel's bus moves a 32 B burst per nBL = 2 tCK."""
    one = "0,4,8,12,16,20,24,28"  # bank groups 0-7: pseudo-channel 0
    two = "0,4,8,12,32,36,40,44"  # bank groups 0-3 and 8-11: both pseudo-channels
    r1, view = _run("attacc", _writes(one), "rearrange_in")
    r2, _ = _run("attacc", _writes(two), "rearrange_in")
    assert r1.command_counts["WR"] == r2.command_counts["WR"] == 8 * 256
    assert r1.latency_ns == pytest.approx(2 * r2.latency_ns, rel=0.05)
    pch_gbs = view.column_bytes / (r1.latency_ns / (8 * 256))  # GB/s of one pseudo-channel
    assert pch_gbs == pytest.approx(32 / (2 * 0.769), rel=0.02)


def _acts(cores: str, n: int = 100) -> str:
    return f"  loop r {n}\n    ACT @0:{cores} row=r\n    PRE @0:{cores}\n  end\n"


def test_activation_windows_limit_single_bank_activations():
    """16 single-bank ACTs per round in one rank wait for tFAW (4 per 39 tCK); spread over the 4 ranks
    of the channel, the banks' own row cycles bound the time instead."""
    one_rank = "0-15"  # bank groups 0-3
    four_ranks = "0-3,16-19,32-35,48-51"
    r1, view = _run("attacc", _acts(one_rank))
    r4, _ = _run("attacc", _acts(four_ranks))
    t = view.hw.dram.timing
    assert r1.compute_ns >= 16 * 100 * t.tfaw / 4 * t.tck_ns * 0.999
    assert r4.compute_ns < 0.5 * r1.compute_ns
    assert r4.compute_ns >= 100 * (t.tras + t.trp) * t.tck_ns * 0.999  # each bank: ACT -> PRE -> ACT


def test_result_moves_overlap_the_macs():
    """MVSB leaves on the data path: an ATTN / GEMV compute phase takes about as long without its MVSBs."""
    view = PimView(load("attacc"))
    sim = Simulator(view.hw)
    for spec in (KernelSpec.make("attn", b=32, n=1024, k=128), KernelSpec.make("gemv", b=32, m=1, n=1024, k=128)):
        text = codegen.generate_text(spec, space.default_draft(spec, view), view)
        assert "MVSB" in text
        with_mv = sim.run(text, functional=False)
        without = sim.run("\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("MVSB")) + "\n",
                          functional=False)
        assert with_mv.command_counts["MVSB"] > 0
        assert with_mv.compute_ns <= 1.05 * without.compute_ns, spec.name


def test_power_constraint_slows_the_macs_only():
    """attacc (power-constrained) vs attacc-unconstrained: same streams, slower all-bank MACs only."""
    pc, npc = PimView(load("attacc")), PimView(load("attacc-unconstrained"))
    spec = KernelSpec.make("gemv", b=32, m=1, n=4096, k=128)
    d = space.default_draft(spec, pc)
    a = Simulator(pc.hw).run(codegen.generate(spec, d, pc), functional=False)
    b = Simulator(npc.hw).run(codegen.generate(spec, d, npc), functional=False)
    assert a.command_counts == b.command_counts
    assert b.compute_ns < a.compute_ns <= 1.5 * b.compute_ns
    assert a.phases_ns["rearrange_in"] == b.phases_ns["rearrange_in"]


def test_host_roofline_launch_and_paper_platform():
    """Launch overhead is a parameter; the paper platform host reads the five stacks, derated."""
    view = PimView(load("attacc"))
    nbytes = 1e9
    base = roofline(view, nbytes, 0.0, launch_us=0.0)
    assert base.ns == pytest.approx(nbytes / 2039.0)
    assert roofline(view, nbytes, 0.0, launch_us=1.5).ns - base.ns == pytest.approx(1500.0)
    assert roofline(view, nbytes, 0.0).ns - base.ns == pytest.approx(view.hw.system.host.launch_overhead_us * 1e3)
    paper = view.hosts["paper-gpu"]
    assert roofline(view, nbytes, 0.0, host=paper, launch_us=0.0).ns == pytest.approx(nbytes / (5 * 670.4 * 0.85))
    flops = 1e12
    assert roofline(view, 0.0, flops, host=paper, launch_us=0.0).ns == pytest.approx(flops / (312e3 * 0.8))
    # a derated host with more bandwidth than the stacks is capped by the stacks
    fast = dataclasses.replace(paper, bandwidth_gbs=1e6, bandwidth_utilisation=1.0)
    assert view.host_bandwidth(fast) == pytest.approx(5 * 670.4)


def test_staging_memory_bounds_the_rounds_of_the_parallel_rearrangement():
    """A streamed input passes through the host's staging memory in double-buffered rounds of half of it
    (at least two): more rounds, less pipeline fill; never slower than without staging; no staging memory
    means no staging (serial).  The rounds survive printing and parsing."""
    from tvm_pim import program

    view = PimView(load("hbm-pim"))
    spec = KernelSpec.make("red", b=4, n=1024, k=1024)  # A: 8 MiB, streamed
    d = space.default_draft(spec, view)

    def run(kb, opts=codegen.DCC):
        hw = dataclasses.replace(view.hw, system=dataclasses.replace(view.hw.system, onchip_staging_kb=kb))
        st = codegen.generate(spec, d, PimView(hw), opts)
        rin = {ph.name: ph for ph in st.phases}["rearrange_in"]
        return Simulator(hw).run(program.parse_stream(program.print_stream(st)), functional=False), rin

    big, rin_big = run(1e9)
    small, rin_small = run(1024.0)  # 1 MiB: 8 MiB in halves of 512 KiB = 16 rounds
    serial, _ = run(1e9, codegen.CodegenOptions(staging=False))
    assert (rin_big.rounds, rin_small.rounds) == (2, 16) and not rin_small.serial
    assert small.phases_ns["rearrange_in"] < big.phases_ns["rearrange_in"] < serial.phases_ns["rearrange_in"]
    assert small.phases_ns["compute"] == big.phases_ns["compute"]
    none, rin_none = run(0.0)  # no staging memory: serial
    assert rin_none.serial
    assert none.phases_ns["rearrange_in"] == pytest.approx(serial.phases_ns["rearrange_in"])


def test_batched_gemv_reads_each_weight_column_once_per_held_rows():
    """Decode GEMV with 4 input rows on power-constrained AttAcc: the unit holds 2 rows (4 + 4 unit cycles
    fill the 6-cycle MAC_AB spacing), so each weight column is read twice, not 4 times; faster than 4
    single-row passes; the result matches numpy.  Without the power constraint nothing is gained by
    holding rows and the rows are streamed one by one."""
    import numpy as np

    view = PimView(load("attacc"))
    sim = Simulator(view.hw)
    one = KernelSpec.make("gemv", b=1, m=1, n=512, k=1024, resident=("A",))
    four = KernelSpec.make("gemv", b=1, m=4, n=512, k=1024, resident=("A",))
    d = space.Draft((space.Part("b", 1, 1), space.Part("m", 1, 1), space.Part("n", 8, 64), space.Part("k", 1, 1)), "expand")
    s1, s4 = codegen.generate(one, d, view), codegen.generate(four, d, view)
    assert "rows=2" in codegen.print_stream(s4)
    r1, r4 = sim.run(s1, functional=False), sim.run(s4, functional=False)
    assert r4.command_counts["MAC_AB"] == 2 * r1.command_counts["MAC_AB"]
    assert r4.compute_ns < 3.5 * r1.compute_ns
    inputs = four.random_inputs(seed=5)
    out = sim.run(s4, inputs).output.astype(np.float32)
    assert np.all(np.abs(out - four.reference(inputs)) <= four.error_bound(inputs, -(-1024 // 16) + 3))
    npc = PimView(load("attacc-unconstrained"))
    s4n = codegen.generate(four, d, npc)
    assert "rows=" not in codegen.print_stream(s4n)


@pytest.mark.parametrize("scenario", ["streamed", "resident"])
def test_breakdown_adds_up_to_the_latency_and_names_the_bound(scenario):
    """Fig. 10's split (data rearrangement + compute + host actions) adds up to the end-to-end latency, the
    staged rounds' pipeline fill included; every phase names the resource that bounds it, whose busy time
    plus the host actions is the phase time (unstaged, parallel phases)."""
    view = PimView(load("hbm-pim"))
    spec = KernelSpec.make("red", b=4, n=1024, k=1024, resident=("A",) if scenario == "resident" else ())
    drafts, _ = space.enumerate_drafts(spec, view)
    for d in drafts[:3] + [space.default_draft(spec, view)]:
        for opts in (codegen.DCC, codegen.CodegenOptions(staging=False)):
            res = Simulator(view.hw).run(codegen.generate(spec, d, view, opts), functional=False)
            assert res.rearrangement_ns + res.compute_ns + res.host_ns == pytest.approx(res.latency_ns, rel=1e-12)
            for name, r in res.extra["resources"].items():
                assert r["bound"] in r["terms_ns"]
                if r["rounds"] == 1 and not r["serial"]:  # (a serial phase sums its channels)
                    assert r["terms_ns"][r["bound"]] + r["host_ns"] == pytest.approx(res.phases_ns[name], rel=1e-12)

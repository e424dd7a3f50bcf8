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
    # (refresh, tested below, stops the MACs now and then: its time is taken out here)
    r1, r2 = _run(dev, _mac_stream(view, 1000))[0], _run(dev, _mac_stream(view, 3000))[0]
    t1 = r1.compute_ns - r1.extra["resources"]["compute"]["refresh_ns"]
    t2 = r2.compute_ns - r2.extra["resources"]["compute"]["refresh_ns"]
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
                    ref = r["refresh_ns"] if r["bound"] != "host_link" else 0.0  # refresh stops the channel
                    assert r["terms_ns"][r["bound"]] + ref + r["host_ns"] == pytest.approx(res.phases_ns[name],
                                                                                           rel=1e-12)


# The devices' simulators, as numbers (tCK): AttAcc's HBM3_5.2Gbps preset (HBM3-PIM.cpp: nRCDRD 19, nRAS 45,
# nRP 19, nRTPL 8, nCCDAB 6 / 4 without the power constraint, nREFI 5070, nRFC = 350 ns at 0.769 ns = 456) and
# Samsung's PIMSimulator (HBM2_samsung_2M_16B_x64.ini: tRCDRD 14, tRAS 33, tRP 14, tCCDL 4, tREFI 3900,
# tRFC 350; READ_TO_PRE_DELAY = AL + BL/2 + max(tRTPL, tCCDL) - tCCDL = 0 + 2 + 5 - 4 = 3).
SIM = {
    "attacc": dict(rcd=19, ras=45, rp=19, rtp=8, mac=6, refi=5070, rfc=456),
    "attacc-unconstrained": dict(rcd=19, ras=45, rp=19, rtp=8, mac=4, refi=5070, rfc=456),
    "hbm-pim": dict(rcd=14, ras=33, rp=14, rtp=3, mac=4, refi=3900, rfc=350),
}


def _row_cycles(d: dict, n: int) -> int:
    """ACT at 0, MAC i at rcd + i * spacing, PRE at max(ACT + tRAS, last MAC + tRTP), done tRP later."""
    last_mac = d["rcd"] + (n - 1) * d["mac"]
    return max(d["ras"], last_mac + d["rtp"]) + d["rp"]


def _with_refresh(d: dict, work: int) -> int:
    """Wall time of ``work`` cycles when a refresh fires every tREFI of wall time (the refresh managers'
    counters), each closing the open row (tRP), refreshing (tRFC) and re-opening it (tRCD)."""
    t, next_ref = 0, d["refi"]
    while True:
        if work <= next_ref - t:
            return t + work
        work -= next_ref - t
        t = next_ref + d["rp"] + d["rfc"] + d["rcd"]
        next_ref += d["refi"]


@pytest.mark.parametrize("dev", sorted(SIM))
@pytest.mark.parametrize("n", [2, 8])
def test_precharge_waits_for_read_to_precharge(dev, n):
    """ACT, n MACs, PRE: the precharge waits tRAS after the ACT and tRTP after the last MAC (AttAcc's
    MACAB -> PREA nRTPL = 8: 2 tCK more per row at the power-constrained spacing 6, 4 at spacing 4; HBM-PIM's
    3 tCK lie inside the 4 tCK spacing)."""
    d = SIM[dev]
    view = PimView(load(dev))
    r = _run(dev, _mac_stream(view, n))[0]
    assert r.compute_ns / view.hw.dram.timing.tck_ns == pytest.approx(_row_cycles(d, n))
    if dev == "attacc" and n == 8:
        assert _row_cycles(d, n) == 88  # 19 + 7 x 6 + 8 + 19


@pytest.mark.parametrize("dev", sorted(SIM))
@pytest.mark.parametrize("n", [500, 1000, 3000, 10000])
def test_all_bank_refresh_stops_the_channel(dev, n):
    """A row of n MACs against the refresh timeline built from the rule (a refresh every tREFI of wall time)."""
    d = SIM[dev]
    view = PimView(load(dev))
    r = _run(dev, _mac_stream(view, n))[0]
    expect = _with_refresh(d, _row_cycles(d, n))
    assert r.compute_ns / view.hw.dram.timing.tck_ns == pytest.approx(expect)
    if n == 10000:
        assert expect > _row_cycles(d, n) * 1.09  # about 9.7% (AttAcc) / 10.7% (HBM-PIM) of the time refreshing


def test_refresh_interval_must_exceed_its_cost(tmp_path):
    """trefi no longer than one refresh's cost is refused, naming the key."""
    text = pathlib.Path(load("attacc").source_path).read_text()
    f = tmp_path / "bad-refresh.toml"
    f.write_text(text.replace('name = "attacc"', 'name = "bad-refresh"').replace("trefi = 5070", "trefi = 400"))
    with pytest.raises(HardwareDescriptionError, match="dram.timing.trefi"):
        load(str(f))


def _no_turnaround(tmp_path) -> str:
    """hbm-pim without the turnaround rule (twtr = trtw = 0), as a preset file."""
    text = pathlib.Path(load("hbm-pim").source_path).read_text()
    f = tmp_path / "hbm-pim-noturn.toml"
    f.write_text(text.replace('name = "hbm-pim"', 'name = "hbm-pim-noturn"').replace("twtr = 19, trtw = 15", "twtr = 0, trtw = 0"))
    return str(f)


def test_read_write_turnarounds_on_hbm_pim(tmp_path):
    """HBM-PIM's MACs are triggered by column reads, its input-register writes are column writes
    (PIMSimulator: WRIO_TO_GRF writes, then MAC reads): 3 iterations of (write x, MAC row) turn the bus
    W -> R three times (WL + BL/2 + tWTR_L = 8 + 2 + 9 = 19 tCK) and R -> W twice (RL + BL/2 + tRTRS - WL =
    20 + 2 + 1 - 8 = 15 tCK), 87 tCK in all; a stream that only reads turns nothing."""
    body = ("  loop q 3\n    WR_AB @0:* reg=0 src=A[0,0:32:32]\n    ACT_AB @0:* row=0\n"
            "    MAC @0:* addr=0 n=4 acc=0 per=4 pitch=4 vecs=1 fresh=1 reg=0\n    PRE_AB @0:*\n  end\n")
    plain = _no_turnaround(tmp_path)
    view = PimView(load("hbm-pim"))
    with_rule = _run("hbm-pim", body)[0].compute_ns / view.hw.dram.timing.tck_ns
    hw0 = load(plain)
    text = HEAD.format(dev="hbm-pim-noturn", cores=view.cores_per_group) + "phase compute\n" + body
    without = Simulator(hw0).run(text, functional=False).compute_ns / view.hw.dram.timing.tck_ns
    assert with_rule - without == pytest.approx(3 * 19 + 2 * 15)
    reads = _mac_stream(view, 8)
    text = HEAD.format(dev="hbm-pim-noturn", cores=view.cores_per_group) + "phase compute\n" + reads
    assert _run("hbm-pim", reads)[0].compute_ns == pytest.approx(Simulator(hw0).run(text, functional=False).compute_ns)


def test_attacc_macs_have_no_turnaround():
    """AttAcc's simulator has no turnaround between MACAB and the data-path commands (WRGB, MVSB): its
    RD <-> WR rules name RD and WR only, which never share a phase here; the presets leave twtr / trtw 0."""
    for dev in ("attacc", "attacc-unconstrained"):
        t = load(dev).dram.timing
        assert (t.twtr, t.trtw) == (0, 0)

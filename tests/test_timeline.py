"""The resource timeline: dependencies respected, resources never double-booked."""

import dataclasses

import numpy as np
import pytest

import tvm_cim
from tvm_cim.common import zoo
from tvm_cim.common.onnx_io import import_onnx
from tvm_cim.program import Op, Parallel, Ref
from tvm_cim.report import simulate_timing
from tvm_cim.simulator.engine import Chip, timing_inputs
from tvm_cim.simulator.engine import Options as SimOptions
from tvm_cim.simulator.timeline import Events, _Resource, schedule_graph


def timed_regions(hw_name, strategy, image=32):
    mod = import_onnx(zoo.build_model("resnet18", image_size=image), "r18")[0]
    hw = tvm_cim.load(hw_name)
    _, info = tvm_cim.offload(mod, hw, strategy=strategy)
    return info, simulate_timing(info)[0]


@pytest.mark.parametrize("hw_name,strategy", [("isaac", "cim-mlc"), ("isaac", "none"), ("jain21", "cim-mlc"), ("jia21", "puma")])
def test_schedule_respects_dependencies_and_resources(hw_name, strategy):
    info, stats = timed_regions(hw_name, strategy)
    regions = [(s.name, s.events, s.segment) for s in stats]
    tl = schedule_graph(regions, info.producers, info.schedule.options.pipeline)
    base = 0
    busy = {}
    for _, ev, _ in regions:
        for i in range(len(ev)):
            g = base + i
            for d in ev.deps[i]:
                assert tl.start[g] >= tl.finish[base + d] - 1e-6
            if ev.dur[i] > 0:
                for r in ev.res[i]:
                    busy.setdefault(r, []).append((tl.start[g], tl.finish[g]))
        base += len(ev)
    for r, iv in busy.items():
        iv.sort()
        for (a0, a1), (b0, b1) in zip(iv, iv[1:]):
            assert b0 >= a1 - 1e-6, f"resource {r} double-booked"
    # the end-to-end latency covers the busiest resource and the longest dependency chain
    for r, iv in busy.items():
        assert tl.latency_ns >= sum(b - a for a, b in iv) - 1e-6, r
    base, longest = 0, 0.0
    for _, ev, _ in regions:
        chain = np.zeros(len(ev))
        for i in range(len(ev)):
            chain[i] = ev.dur[i] + max((chain[d] for d in ev.deps[i]), default=0.0)
        longest = max(longest, float(chain.max(initial=0.0)))
        base += len(ev)
    assert tl.latency_ns >= longest - 1e-6
    assert tl.peak_power_mw > 0


def test_pipeline_overlaps_regions_and_barrier_does_not():
    info, stats = timed_regions("isaac", "cim-mlc")
    regions = [(s.name, s.events, s.segment) for s in stats]
    piped = schedule_graph(regions, info.producers, pipeline=True)
    serial = schedule_graph(regions, info.producers, pipeline=False)
    spans = [serial.region_span[s.name] for s in stats]
    assert all(b[0] >= a[1] - 1e-6 for a, b in zip(spans, spans[1:]))  # one after another
    pspans = [piped.region_span[s.name] for s in stats]
    assert any(b[0] < a[1] for a, b in zip(pspans, pspans[1:]))  # consumers start early
    assert piped.latency_ns < serial.latency_ns


def test_peak_power_counts_concurrent_activity():
    ev = Events()
    a = ev.add(10.0, ("xb:0",), (), 100.0, True, "CIM.read_xb")  # 10 mW for 10 ns
    ev.add(15.0, ("xb:1",), (), 300.0, True, "CIM.read_xb")  # 20 mW over [0, 15)
    ev.add(10.0, ("xb:0",), (a,), 300.0, True, "CIM.read_xb")  # 30 mW over [10, 20), after the first
    ev.add(5.0, ("gbuf",), (), 5000.0, False, "DMOV.load")  # not crossbar activity
    tl = schedule_graph([("r", ev, 0)], {}, pipeline=True)
    assert tl.latency_ns == pytest.approx(20.0)
    assert tl.peak_power_mw == pytest.approx(50.0)  # 20 + 30 overlap in [10, 15)


def test_quantisation_at_the_producing_cores_and_im2col_as_data_movement():
    """CIM-MLC / PUMA: a region's cores quantise its output for its consumers; only the network input is
    quantised by the chip ALU (each element once, halo included); im2col costs no ALU time."""
    info, stats = timed_regions("puma", "puma")
    hw = info.hw
    consumers_of = {q for ps in info.producers.values() for q in ps}
    fed = {name for name, ps in info.producers.items() if ps}
    assert fed and consumers_of
    for p in info.programs:
        ops = [o for o in p.run if hasattr(o, "kind")]
        quant = [o for o in ops if o.kind == "DCOM.quantize"]
        deq = [o for o in ops if o.kind == "DCOM.dequantize"]
        assert all((o.get("at") == "producer") == (p.name in fed) for o in quant), p.name
        assert all(bool(o.get("requant")) == (p.name in consumers_of) for o in deq), p.name
    chip_alu = im2col = 0.0
    for s in stats:
        ev = s.events
        chip_alu += sum(d for d, r in zip(ev.dur, ev.res) if "chipalu" in r)
        im2col += sum(d for d, k in zip(ev.dur, ev.kind) if k == "DCOM.im2col")
    assert im2col == 0.0
    n_in = 3 * 32 * 32  # the network input, the only tensor the chip ALU quantises
    chunks = sum(1 for s in stats if s.name not in fed for k in s.events.kind if k == "DCOM.quantize")
    cyc = hw.cycle_ns
    assert n_in / hw.chip.alu.ops_per_cycle * cyc - 1e-6 <= chip_alu <= (n_in / hw.chip.alu.ops_per_cycle + chunks) * cyc


def test_power_cap_activates_reads_by_time_division():
    ev = Events()
    ev.add(10.0, ("xb:0",), (), 100.0, True, "CIM.read_xb")  # 10 mW
    ev.add(10.0, ("xb:1",), (), 200.0, True, "CIM.read_xb")  # 20 mW
    ev.add(10.0, ("xb:2",), (), 300.0, True, "CIM.read_xb")  # 30 mW
    ev.add(10.0, ("xb:3",), (), 500.0, True, "CIM.read_xb")  # 50 mW: above the cap, runs alone
    free = schedule_graph([("r", ev, 0)], {}, pipeline=True)
    assert free.peak_power_mw == pytest.approx(110.0) and free.latency_ns == pytest.approx(10.0)
    tl = schedule_graph([("r", ev, 0)], {}, pipeline=True, power_cap_mw=35.0)
    assert tl.peak_power_mw == pytest.approx(50.0)  # the 50 mW read alone; otherwise at most 35 mW
    # 10 + 20 at [0, 10), 30 at [10, 20), 50 alone at [20, 30)
    assert list(tl.start) == pytest.approx([0.0, 0.0, 10.0, 20.0])
    assert tl.latency_ns == pytest.approx(30.0)


def test_power_cap_on_a_network_keeps_dependencies_and_the_cap():
    info, stats = timed_regions("isaac", "cim-mlc")
    regions = [(s.name, s.events, s.segment) for s in stats]
    free = schedule_graph(regions, info.producers, True)
    cap = 0.4 * free.peak_power_mw
    tl = schedule_graph(regions, info.producers, True, power_cap_mw=cap)
    assert tl.peak_power_mw <= cap * (1 + 1e-9)
    assert tl.latency_ns >= free.latency_ns
    base = 0
    for _, ev, _ in regions:
        for i in range(len(ev)):
            for d in ev.deps[i]:
                assert tl.start[base + i] >= tl.finish[base + d] - 1e-6
        base += len(ev)


def test_resource_gaps_match_a_brute_force_calendar():
    """The blocked interval list (block skipping by largest gap) books exactly what a unit-step calendar
    books: random operations with integer times, many of them into earlier gaps, enough to split and
    merge blocks many times over."""
    rng = np.random.default_rng(7)
    res, busy = _Resource(), np.zeros(100000, dtype=bool)
    for _ in range(4000):
        t, dur = int(rng.integers(0, 30000)), int(rng.choice([1, 2, 3, 7, 40]))
        free = np.flatnonzero(np.convolve(~busy, np.ones(dur, dtype=int), "valid") == dur)
        want = int(free[np.searchsorted(free, t)])  # the first start >= t with dur free steps
        got = res.earliest(float(t), float(dur))
        assert got == want
        res.reserve(got, float(dur))
        busy[want:want + dur] = True
    assert res.busy == busy.sum()
    assert res.gap.shape == (len(res.bs),)
    starts = [s for b in res.bs for s in b]
    ends = [e for b in res.be for e in b]
    assert all(e < s for e, s in zip(ends, starts[1:]))  # disjoint, sorted, touching ones merged
    assert len(res.bs) > 10


def test_critical_path_follows_producers_and_own_crossbars():
    from tvm_cim.simulator.critical import critical_path

    # producer: two chunks on one replica (load -> read -> store each), the reads queue on the replica
    a = Events()
    for c in range(2):
        ld = a.add(1.0, ("gbuf",), (), 0.0, False, "DMOV.load")
        a.inputs.append((ld, c / 2, (c + 1) / 2))
        rd = a.add(10.0, ("vxb:a:0",), (ld,), 5.0, True, "CIM.read_xb")
        st = a.add(1.0, ("gbuf",), (rd,), 0.0, False, "DMOV.store")
        a.outputs.append((st, c / 2, (c + 1) / 2))
    # consumer: one chunk needing the second half of the producer's output
    b = Events()
    ld = b.add(1.0, ("gbuf",), (), 0.0, False, "DMOV.load")
    b.inputs.append((ld, 0.5, 1.0))
    rd = b.add(4.0, ("vxb:b:0",), (ld,), 2.0, True, "CIM.read_xb")
    st = b.add(1.0, ("gbuf",), (rd,), 0.0, False, "DMOV.store")
    b.outputs.append((st, 0.0, 1.0))
    regions = [("a", a, 0), ("b", b, 0)]
    tl = schedule_graph(regions, {"b": ["a"]}, pipeline=True)
    cp = critical_path(regions, {"b": ["a"]}, True, tl)
    # by hand: a's second load overlaps nothing but waits for the port (t=1..2); its read waits for
    # the first read (own crossbars, 1..11) -> 11..21, store 21..22; b loads 22..23, reads 23..27, stores 27..28
    assert tl.latency_ns == pytest.approx(28.0)
    assert cp["path_ns"] == pytest.approx(tl.latency_ns)
    assert cp["regions"]["a"]["queue_ns"] == pytest.approx(11.0)  # the first chunk's load and read
    assert cp["regions"]["a"]["run_ns"] == pytest.approx(11.0)  # the second chunk's read and store
    assert cp["regions"]["b"]["path_ns"] == pytest.approx(6.0) and cp["regions"]["b"]["entered"] == ["producer"]
    assert cp["edges"]["own"] == pytest.approx(10.0) and cp["edges"]["producer"] == pytest.approx(1.0)


@pytest.mark.parametrize("strategy", ["cim-mlc", "none"])
def test_critical_path_of_a_network_adds_up_to_the_latency(strategy):
    from tvm_cim.simulator.critical import critical_path

    info, stats = timed_regions("isaac", strategy)
    regions = [(s.name, s.events, s.segment) for s in stats]
    pipeline = info.schedule.options.pipeline
    tl = schedule_graph(regions, info.producers, pipeline)
    cp = critical_path(regions, info.producers, pipeline, tl)
    # every instant of the latency is an operation on the path, found by the scheduler's own rules
    assert cp["path_ns"] == pytest.approx(tl.latency_ns, rel=1e-9)
    assert sum(r["path_ns"] for r in cp["regions"].values()) == pytest.approx(tl.latency_ns, rel=1e-9)
    for r in cp["regions"].values():
        assert r["run_ns"] + r["queue_ns"] == pytest.approx(r["path_ns"])
    if not pipeline:  # one region after another: every region is on the path for its whole span
        for name, (s0, s1) in tl.region_span.items():
            assert cp["regions"][name]["path_ns"] == pytest.approx(s1 - s0, rel=1e-9, abs=1e-6)


def _random_region(rng, n, integer):
    """A region of ``n`` random operations on a few shared resources, with random earlier dependencies."""
    ev = Events()
    for i in range(n):
        dur = float(rng.integers(0, 50)) if integer else float(rng.uniform(0.0, 50.0))
        res = tuple(sorted(set(rng.choice(["gbuf", "alu:0", "vxb:0", "vxb:1", "link:0"], rng.integers(1, 3)))))
        deps = tuple(sorted(set(rng.integers(0, i, rng.integers(0, 4)).tolist()))) if i else ()
        ev.add(dur, res, deps, 1.0, "vxb:0" in res, "CIM.read_xb")
    ev.inputs.append((0, 0.0, 1.0))
    ev.outputs.append((n - 1, 0.0, 1.0))
    return ev


@pytest.mark.parametrize("integer", [True, False])
@pytest.mark.parametrize("pipeline", [True, False])
def test_isolated_region_placed_from_its_schedule_alone(integer, pipeline):
    """A region every earlier operation has finished before (no pipeline, or a new segment) is placed from its
    schedule alone, shifted (Events.alone): the timeline must equal the list scheduler's, operation by operation
    (with non-integer times the shift may round, so the scheduler runs instead)."""
    rng = np.random.default_rng(7)
    names = ["a", "b", "c", "d"]
    segs = [0, 1, 1, 2]  # c shares b's segment: with the pipeline it is scheduled against b's bookings
    evs = [_random_region(rng, 60, integer) for _ in names]
    regions = list(zip(names, evs, segs))
    prods = {"b": ["a"], "c": ["b"], "d": ["c"]}
    for ev in evs:  # what Chip.run does: each region scheduled alone from time 0 records its schedule
        schedule_graph([("x", ev, 0)], {}, pipeline=True)
        assert ev.alone is not None
    fast = schedule_graph(regions, prods, pipeline)
    for ev in evs:
        ev.alone = None
    slow = schedule_graph(regions, prods, pipeline)
    assert np.array_equal(fast.start, slow.start) and np.array_equal(fast.finish, slow.finish)
    assert fast.latency_ns == slow.latency_ns and fast.utilisation == slow.utilisation
    assert fast.region_span == slow.region_span and fast.peak_power_mw == slow.peak_power_mw


def _timing_run(progs, hw, together):
    """Timing-only runs of ``progs`` on a fresh chip, recording grouped reads or every operation alone (the
    Python recorder: the compiled path is compared with it in test_compiled_timing.py)."""
    chip = Chip(hw, SimOptions(functional=False))
    chip.together = together
    chip.compiled = False
    stats = [chip.run(p, timing_inputs(p))[1] for p in progs]
    return chip, stats


def _same_recording(a, b):
    for x, y in zip(a, b, strict=True):
        ex, ey = x.events, y.events
        for f in ("dur", "res", "energy", "analog", "kind", "inputs", "outputs"):
            assert getattr(ex, f) == getattr(ey, f), (x.name, f)
        assert [tuple(d) for d in ex.deps] == [tuple(d) for d in ey.deps], x.name
        assert dict(x.energy_pj) == dict(y.energy_pj) and dict(x.metaop_counts) == dict(y.metaop_counts)
        assert x.latency_ns == y.latency_ns and x.weight_writes == y.weight_writes


def test_grouped_reads_record_and_schedule_what_each_operation_alone_does():
    """The row-group reads of a parallel block recorded together (one dependency look-up, a shared stored list)
    give the rows, energy and schedule of recording every operation alone, event by event; a block whose reads
    differ in anything but their row group (another accumulator here) falls back to the per-operation path."""
    mod = import_onnx(zoo.build_model("vgg16", image_size=32), "v16")[0]
    hw = tvm_cim.load("jain21")
    _, info = tvm_cim.offload(mod, hw, strategy="cim-mlc")
    progs = [p for p in info.programs if int(p.attr("passes", 1)) > 8][:3]  # layers rewritten in many passes
    assert progs
    alone, a = _timing_run(progs, hw, False)
    grouped, b = _timing_run(progs, hw, True)
    assert alone.grouped_reads == 0 and grouped.grouped_reads > 0.9 * sum(
        1 for p in progs for o in p.ops("run") if o.opcode.startswith("CIM.read"))
    _same_recording(a, b)
    names = [p.name for p in progs]
    ta = schedule_graph([(n, s.events, 0) for n, s in zip(names, a)], {}, pipeline=True)
    tb = schedule_graph([(n, s.events, 0) for n, s in zip(names, b)], {}, pipeline=True)
    assert np.array_equal(ta.start, tb.start) and np.array_equal(ta.finish, tb.finish)

    # one block's second read into another accumulator: not a block of row groups
    p = progs[0]
    k = next(i for i, s in enumerate(p.run) if isinstance(s, Parallel) and len(s.body) > 1)
    body = list(p.run[k].body)
    body[1] = Op(body[1].opcode, tuple((n, Ref("acc2") if n == "dst" else v) for n, v in body[1].args))
    bad = dataclasses.replace(p, run=p.run[:k] + (Parallel(tuple(body)),) + p.run[k + 1:])
    alone, a = _timing_run([bad], hw, False)
    grouped, b = _timing_run([bad], hw, True)
    n_reads = sum(1 for o in bad.ops("run") if o.opcode.startswith("CIM.read"))
    assert grouped.grouped_reads == n_reads - len(body)  # every block but the altered one
    _same_recording(a, b)


def _brute_schedule(ev):
    """An independent list scheduler over unit steps (integer times): each operation in order starts at the first
    step >= its dependencies' latest finish from which every one of its resources is free for its duration."""
    horizon = int(sum(ev.dur)) + 1
    busy = {}
    start, finish = [], []
    for i in range(len(ev)):
        t = max((finish[d] for d in ev.deps[i]), default=0)
        dur = int(ev.dur[i])
        if dur:
            cals = [busy.setdefault(r, np.zeros(horizon, dtype=bool)) for r in ev.res[i]]
            while any(c[t:t + dur].any() for c in cals):
                t += 1
            for c in cals:
                c[t:t + dur] = True
        start.append(t)
        finish.append(t + dur)
    return start, finish


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_one_resource_chains_match_a_brute_force_list_scheduler(seed):
    """The scheduler's shortcuts for an operation on one resource (after everything booked on it, or ready
    inside its last busy interval: right after it) give the start and finish a unit-step list scheduler gives:
    chains of reads sharing one resource and one dependency list, interleaved with operations that book
    earlier gaps and two-resource operations."""
    rng = np.random.default_rng(seed)
    ev = Events()
    for i in range(400):
        kind = rng.integers(0, 3)
        if kind == 0 and i:  # a block of reads of one virtual crossbar: one dependency list, one resource
            deps = tuple(sorted(set(rng.integers(max(0, i - 30), i, 2).tolist())))
            r = (f"vxb:{int(rng.integers(0, 3))}",)
            for _ in range(int(rng.integers(2, 9))):
                ev.add_stored(float(rng.integers(1, 9)), r, deps, 1.0, True, "CIM.read_row")
        else:
            res = tuple(sorted(set(rng.choice(["xb:0", "xb:1", "vxb:0", "vxb:1", "link:0"], rng.integers(1, 3)))))
            n = len(ev)
            deps = tuple(sorted(set(rng.integers(0, n, rng.integers(0, 3)).tolist()))) if n else ()
            ev.add(float(rng.integers(0, 20)), res, deps, 1.0, False, "CIM.write_xb")
    tl = schedule_graph([("r", ev, 0)], {}, pipeline=True)
    start, finish = _brute_schedule(ev)
    assert tl.start.tolist() == start and tl.finish.tolist() == finish


def _full_runs(progs, hw):
    """Full simulations (values computed from seeded random inputs and constants) of ``progs`` on one chip."""
    chip = Chip(hw, SimOptions())
    rng = np.random.default_rng(0)
    full = []
    for p in progs:
        tensors = {}
        for d in p.decls:
            if d.role in ("input", "const"):
                kind = np.dtype(d.dtype).kind
                tensors[d.name] = (rng.integers(-3, 4, d.shape).astype(d.dtype) if kind in "iu"
                                   else rng.standard_normal(d.shape).astype(d.dtype))
        full.append(chip.run(p, tensors)[1])
    return full


def test_timing_only_records_what_a_full_simulation_records():
    """Timing only (crossbar writes on their short path, reads of a block from one plan) records the rows,
    dependencies, energy sums, counts and latency of the full simulation (every operation on the general
    path, values computed), event by event, on layers rewritten in many passes."""
    mod = import_onnx(zoo.build_model("vgg16", image_size=32), "v16")[0]
    hw = tvm_cim.load("jain21")
    _, info = tvm_cim.offload(mod, hw, strategy="cim-mlc")
    progs = [p for p in info.programs if int(p.attr("passes", 1)) > 8][:2]
    assert progs
    _, timing = _timing_run(progs, hw, True)
    _same_recording(timing, _full_runs(progs, hw))


def _with_op(p, k, **changes):
    """``p`` renamed, its run section's k-th operation with some arguments changed."""
    o = p.run[k]
    args = tuple((n, changes.get(n, v)) for n, v in o.args)
    return dataclasses.replace(p, name=p.name + "_b", run=p.run[:k] + (Op(o.opcode, args),) + p.run[k + 1:])


def test_a_twin_program_takes_the_figures_a_full_simulation_gives_it():
    """Timing only, a program that is an earlier one but for its quantisation scales (VGG-16's convolutions of
    one shape) is not simulated again: its rows, energy, counts and latency are what a full simulation of it
    records, event by event, and the network's timeline is that of simulating every program; a program that
    differs in any other operand is simulated."""
    mod = import_onnx(zoo.build_model("vgg16", image_size=32), "v16")[0]
    hw = tvm_cim.load("jain21")
    _, info = tvm_cim.offload(mod, hw, strategy="cim-mlc")
    chip, taken = _timing_run(info.programs, hw, True)
    Chip.reuse_timing = False
    try:
        every_chip, every = _timing_run(info.programs, hw, True)
    finally:
        Chip.reuse_timing = True
    assert not every_chip.twins and len(chip.twins) >= 3
    assert [s.twin_of for s in taken] == [chip.twins.get(p.name) for p in info.programs]
    _same_recording(taken, every)
    regions = [(s.name, s.events, s.segment) for s in taken]
    ta = schedule_graph(regions, info.producers, pipeline=True)
    tb = schedule_graph([(s.name, s.events, s.segment) for s in every], info.producers, pipeline=True)
    assert np.array_equal(ta.start, tb.start) and np.array_equal(ta.finish, tb.finish)
    assert ta.utilisation == tb.utilisation  # every region's read resources its own

    # the full simulation (values computed, every operation on the general path) of a twin after its original
    by_name = {p.name: p for p in info.programs}
    twin, orig = next(iter(chip.twins.items()))
    full = _full_runs([by_name[orig], by_name[twin]], hw)
    _same_recording([taken[info.programs.index(by_name[twin])]], full[1:])

    # the same program but for a scale is a twin; with another byte count, another kind of read, it is not
    p = by_name[orig]
    kq = next(k for k, s in enumerate(p.run) if isinstance(s, Op) and s.kind == "DCOM.quantize")
    kl = next(k for k, s in enumerate(p.run) if isinstance(s, Op) and s.kind == "DMOV.load")
    for q, twin_of in ((_with_op(p, kq, scale=123.0), p.name), (_with_op(p, kl, bytes=p.run[kl]["bytes"] + 64), None),
                       (_with_op(p, kq, bits=4), None)):
        c, (first, second) = _timing_run([p, q], hw, True)
        assert second.twin_of == twin_of
        if twin_of is None:
            c2, (alone,) = _timing_run([q], hw, True)
            _same_recording([second], [alone])


@pytest.mark.parametrize("pipeline", [True, False])
def test_input_loads_wait_for_the_producer_outputs_they_read(pipeline):
    """Every input load of a consumer starts at the latest finish of the producer stores whose share of the
    output overlaps its own (with the pipeline; all of them without), checked against a brute force over
    the pairs, on random overlapping shares; nothing else delays the loads (own resources, no dependencies)."""
    rng = np.random.default_rng(7)
    prod, cons = Events(), Events()
    for k in range(300):
        i = prod.add(float(rng.integers(1, 50)), (f"p{k % 7}",), (), 1.0, False, "DMOV.store")
        g0 = float(rng.random())
        prod.outputs.append((i, g0, min(1.0, g0 + float(rng.random()) * 0.05)))
    for k in range(200):
        i = cons.add(3.0, (f"c{k}",), (), 1.0, False, "DMOV.load")
        f0 = float(rng.random())
        cons.inputs.append((i, f0, min(1.0, f0 + float(rng.random()) * 0.1)))
    tl = schedule_graph([("p", prod, 0), ("c", cons, 0)], {"c": ["p"]}, pipeline=pipeline)
    fin = tl.finish[:len(prod)]
    prev_end = float(fin.max())
    for i, f0, f1 in cons.inputs:
        want = 0.0 if pipeline else prev_end
        for j, g0, g1 in prod.outputs:
            if not pipeline or (g0 < f1 - 1e-12 and g1 > f0 + 1e-12):
                want = max(want, float(fin[j]))
        assert tl.start[len(prod) + i] == want
    assert pipeline is False or len({tl.start[len(prod) + i] for i, _, _ in cons.inputs}) > 20

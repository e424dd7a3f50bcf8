"""The CIM build as Relax passes: decisions as attributes, edits followed, the pipeline hook, the registry."""

import threading

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_cim
from tvm_cim import transform as T
from tvm_cim.common import zoo
from tvm_cim.common.onnx_io import import_onnx
from tvm_cim.common.relax_utils import ShareHostKernels, operator_calls
from tvm_cim.common.runtime import thread_map
from tvm_cim.compiler import strategies
from tvm_cim.compiler import transform as CT
from tvm_cim.compiler.estimate import Estimator, shape_key
from tvm_cim.compiler.quantize import CALIBRATION_TARGET
from tvm_cim.program import print_program
from tvm_cim.report import simulate_timing

from .onnx_models import small_cnn

HW = "isaac"


@pytest.fixture(scope="module")
def model():
    mod = import_onnx(small_cnn(), "small")[0]
    x = np.random.default_rng(3).standard_normal((1, 3, 16, 16)).astype("float32")
    return mod, x


def run(mod, x):
    ex = relax.build(mod, target="llvm")
    with tvm_cim.runtime.collect() as stats:
        y = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    return y, stats


def regions(mod):
    return [(gv, f) for gv, f in mod.functions.items() if f.attrs is not None and "cim.region" in f.attrs]


def test_each_pass_writes_its_decisions(model):
    mod, _ = model
    steps = [("FindRegions", T.FindRegions(), "cim.region"), ("Calibrate", T.Calibrate(), "cim.range"),
             ("Quantize", T.Quantize(HW), "cim.x_scale"), ("Segment", T.Segment(HW), "cim.segment"),
             ("DuplicateWeights", T.DuplicateWeights(HW), "cim.replicas"), ("Place", T.Place(HW), "cim.xbs"),
             ("GenerateMetaOps", T.GenerateMetaOps(HW), "cim.program")]
    for name, p, attr in steps:
        before = mod.script()
        mod = p(mod)
        assert attr not in before and attr in mod.script(), name  # visible between passes
        assert all(attr in f.attrs for _, f in regions(mod)), name
    assert str(mod.attrs["cim.strategy"]) == strategies.DEFAULT
    assert "CIM.read_xb" in str(regions(mod)[0][1].attrs["cim.program"])
    lowered = T.LowerToRuntime(HW)(mod)
    assert not regions(lowered) and "tvm_cim.run_region" in lowered.script()


def test_the_passes_in_sequence_equal_the_pipeline(model):
    mod, x = model
    seq = tvm.transform.Sequential([T.FindRegions(), T.Calibrate(), T.Quantize(HW), T.Segment(HW),
                                    T.DuplicateWeights(HW), T.Place(HW), T.GenerateMetaOps(HW),
                                    T.LowerToRuntime(HW)])
    by_hand, _ = run(seq(mod), x)
    ref, _ = run(tvm_cim.offload(mod, tvm_cim.load(HW))[0], x)
    np.testing.assert_array_equal(by_hand, ref)


def test_an_edited_decision_is_followed(model):
    """Set the replicas of one layer by hand: placement, program and timing follow, results do not change."""
    mod, x = model
    mod = tvm.transform.Sequential([T.FindRegions(), T.Calibrate(), T.Quantize(HW), T.Segment(HW),
                                    T.DuplicateWeights(HW)])(mod)
    gv, f = regions(mod)[0]
    chosen = int(f.attrs["cim.replicas"])
    edited = mod.clone()
    edited.update_func(gv, f.with_attr("cim.replicas", 3))
    outs, lat, reps = {}, {}, {}
    for key, m in (("chosen", mod), ("edited", edited)):
        m = tvm.transform.Sequential([T.Place(HW), T.GenerateMetaOps(HW), T.LowerToRuntime(HW)])(m)
        info = tvm_cim.last_compile_info()
        prog = info.programs[0]
        reps[key] = (prog.attr("replicas"), len(info.chip_map.placements[prog.name].replicas))
        outs[key], stats = run(m, x)
        lat[key] = stats[0].latency_ns
    assert chosen != 3 and reps["edited"] == (3, 3) and reps["chosen"] == (chosen, chosen)
    np.testing.assert_array_equal(outs["edited"], outs["chosen"])
    assert lat["edited"] != lat["chosen"]


def test_replicas_that_do_not_fit_fail_clearly(model):
    mod, _ = model
    mod = tvm.transform.Sequential([T.FindRegions(), T.Calibrate(), T.Quantize(HW), T.Segment(HW),
                                    T.DuplicateWeights(HW)])(mod)
    gv, f = regions(mod)[0]
    mod.update_func(gv, f.with_attr("cim.replicas", 10**6))
    with pytest.raises(Exception) as e:
        T.Place(HW)(mod)
    assert "lower the replicas" in str(e.value) and "crossbars" in str(e.value)


def test_a_pass_out_of_order_says_what_is_missing(model):
    mod, _ = model
    with pytest.raises(Exception) as e:
        T.DuplicateWeights(HW)(T.FindRegions()(mod))
    assert "run Quantize first" in str(e.value) or "run Segment first" in str(e.value)


@pytest.mark.parametrize("pipeline", ["default", "cim"])
def test_relax_build_runs_the_cim_pipeline(model, pipeline):
    mod, x = model
    ex = relax.build(mod, target=f"cim -hw={HW}", relax_pipeline=pipeline)
    info = tvm_cim.last_compile_info()
    assert len(info.regions) == 3 and not any("conv2d" in k for k in info.host_ops)
    with tvm_cim.runtime.collect() as stats:
        relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x))
    assert len(stats) == 3  # the regions ran on the simulator


def test_strategy_registry_is_the_one_list():
    names = strategies.names()
    assert names[:4] == ["none", "greedy", "puma", "cim-mlc"] and strategies.DEFAULT in names
    for s in strategies.all_strategies():
        assert isinstance(s.options(tvm_cim.load(HW)), strategies.Options) and s.doc
    with pytest.raises(ValueError) as e:
        strategies.get("nope")
    assert all(n in str(e.value) for n in names)
    with pytest.raises(ValueError):
        with tvm_cim.scheduling("nope"):
            pass
    from tvm_cim.cli import main

    with pytest.raises(SystemExit):  # argparse choices come from the registry
        main(["run", "zoo:resnet18", "--strategy", "nope"])


@pytest.mark.parametrize("hw_name", ["isaac", "prime", "jain21", "jia21", "dynaplasia", "puma"])
def test_estimated_energy_is_what_the_simulator_charges(model, hw_name):
    """The estimate and the simulator charge the same cost primitives: per region, the same energy."""
    mod, _ = model
    hw = tvm_cim.load(hw_name)
    _, info = tvm_cim.offload(mod, hw)
    stats, _ = simulate_timing(info)
    est = Estimator.of(hw, 8, 8, info.schedule.options)
    for r, st in zip(info.regions, stats):
        p = info.schedule.plans[r.name]
        e_sim = sum(v for k, v in st.energy_pj.items() if not k.startswith("setup_") and k != "leakage")
        assert est.region_energy_pj(r, p.tile_rows, p.resident, p.replicas) == pytest.approx(e_sim, rel=1e-6)


@pytest.mark.parametrize("name", ["densenet121", "resnet18"])
def test_calibration_build_computes_the_bits_of_the_optimised_build(name):
    """The calibration build (LLVM unoptimised, for compile speed) must see exactly what the optimised one computes."""
    mod = import_onnx(zoo.build_model(name, image_size=32), name)[0]
    x = np.random.default_rng(4).standard_normal((1, 3, 32, 32)).astype("float32")
    outs = []
    for target in ("llvm", CALIBRATION_TARGET):
        ex = relax.build(mod, target=tvm.target.Target(target))
        outs.append(relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy())
    assert outs[0].dtype == np.float32 and np.isfinite(outs[0]).all()
    np.testing.assert_array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))


@pytest.mark.parametrize("name", ["densenet121"])
def test_shared_host_kernels_compute_the_bits_of_static_ones(name):
    """``ShareHostKernels``: one batch-norm kernel per spatial size (not per channel count), and the model's
    output bits of TVM's static-shape ``llvm`` build."""
    mod = import_onnx(zoo.build_model(name, image_size=32), name)[0]
    shared = ShareHostKernels(mod)
    with tvm.target.Target("llvm"):
        legal = relax.transform.LegalizeOps()(shared)
    bn_sizes = {tuple(int(c.args[0].ty.shape[i]) for i in (2, 3)) for c in operator_calls(mod)
                if c.op.name == "relax.nn.batch_norm"}
    bn_kernels = [g for g, f in legal.functions.items()
                  if isinstance(f, tvm.tirx.PrimFunc) and g.name_hint.startswith("batch_norm")]
    assert bn_sizes and len(bn_kernels) == len(bn_sizes)
    x = np.random.default_rng(5).standard_normal((1, 3, 32, 32)).astype("float32")
    outs = [relax.VirtualMachine(relax.build(m, target="llvm"), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
            for m in (mod, shared)]
    assert np.isfinite(outs[0]).all()
    np.testing.assert_array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))


@pytest.mark.parametrize("shape", [
    # (n, c, h, w, kernel, stride, pad, dilation)
    (1, 2, 9, 7, 3, 1, 1, 1), (2, 1, 8, 8, 3, 2, 1, 1), (1, 1, 11, 10, 7, 2, 3, 1), (1, 3, 6, 6, 1, 1, 0, 1),
    (1, 1, 9, 9, 3, 1, 2, 2), (1, 1, 5, 8, 2, 2, 0, 1),
])
def test_exact_input_span_is_the_raster_range_of_the_windows(shape):
    """At a vector granularity a chunk needs the input from its first window's first element to its last
    window's last one: checked against every window's elements enumerated one by one."""
    from tvm_cim.compiler import plan
    from tvm_cim.compiler.region import CONV2D, Region

    n, c, h, w, k, s, p, d = shape
    oh, ow = (h + 2 * p - d * (k - 1) - 1) // s + 1, (w + 2 * p - d * (k - 1) - 1) // s + 1
    r = Region("c", CONV2D, [(n, c, h, w)], (n, 4, oh, ow), w_int=np.zeros((c * k * k, 4), np.int8),
               conv={"kernel": (k, k), "strides": (s, s), "padding": (p, p, p, p), "dilation": (d, d)})

    def reads(v):  # raster indices (b, row, col) of the input elements output vector v reads
        b, y, x = v // (oh * ow), (v // ow) % oh, v % ow
        return [(b * h + yy) * w + xx for i in range(k) for j in range(k)
                for yy, xx in [(y * s - p + i * d, x * s - p + j * d)] if 0 <= yy < h and 0 <= xx < w]

    m = n * oh * ow
    for size in (1, 2, ow, ow + 3):
        starts = np.arange(0, m, size)
        stops = np.minimum(starts + size, m)
        f0, f1 = r.input_span(starts, stops, exact=True)
        for a, b, g0, g1 in zip(starts, stops, f0, f1):
            idx = [i for v in range(a, b) for i in reads(v)]
            assert round(g0 * n * h * w) == min(idx) and round(g1 * n * h * w) == max(idx) + 1, (a, b)
    # one vector per chunk, never more than MAX_CHUNKS chunks, never coarser than output rows
    assert plan.chunk_count(r, 1, 1, vectors=1) == min(m, plan.MAX_CHUNKS)
    assert plan.chunk_count(r, 1, 1, vectors=0) == n * oh
    # every input element is loaded once at a vector granularity (the halo stays in the core's buffer)
    ch = plan.chunks(r, 1, tvm_cim.load(HW), 8, 8, vectors=1)
    assert int(ch.load_bytes.sum()) <= n * c * h * w + len(ch)  # at least one byte per chunk


@pytest.fixture(scope="module")
def resnet18_isaac():
    """ResNet-18 at 32x32 (layers of repeated shapes) through the passes one at a time, and through the pipeline."""
    mod = import_onnx(zoo.build_model("resnet18", image_size=32), "resnet18")[0]
    by_hand = tvm.transform.Sequential([T.FindRegions(), T.Calibrate(), T.Quantize(HW), T.MapCrossbars(HW),
                                        T.Segment(HW), T.DuplicateWeights(HW), T.AllocateArrayModes(HW),
                                        T.Place(HW), T.PlanDataflow(HW), T.GenerateMetaOps(HW)])(mod)
    _, info = tvm_cim.offload(mod, tvm_cim.load(HW))
    return by_hand, info


def test_passes_on_their_own_decide_what_the_pipeline_decides(resnet18_isaac):
    """Inside the pipeline the passes share one estimate (and its memos); run one at a time each makes its
    own: the programs and the replicas must be the same text."""
    by_hand, info = resnet18_isaac
    texts = [str(f.attrs["cim.program"]) for _, f in CT.region_functions(by_hand)]
    assert texts == [print_program(p) for p in info.programs]
    assert [int(f.attrs["cim.replicas"]) for _, f in CT.region_functions(by_hand)] == [
        info.schedule.plans[p.name].replicas for p in info.programs]
    assert max(info.schedule.plans[p.name].replicas for p in info.programs) > 1  # the DP duplicated something


def test_layers_of_one_shape_have_one_latency_curve(resnet18_isaac):
    """The duplication DP computes one latency curve per layer shape (estimate.shape_key): layers equal under
    the key must have the same latency at every replica count, each estimated by an estimator of its own."""
    by_hand, info = resnet18_isaac
    regions = [r for _, r in CT.regions_of(by_hand)]
    groups: dict = {}
    for r in regions:
        groups.setdefault(shape_key(r), []).append(r)
    shared = [g for g in groups.values() if len(g) > 1]
    assert shared, "ResNet-18 repeats layer shapes"
    hw = tvm_cim.load(HW)
    for g in shared:
        for d in (1, 2, 3, 7, 16):
            ns = {Estimator(hw, 8, 8).region_ns(r, d, hw.crossbar.rows) for r in g}
            assert len(ns) == 1, [r.name for r in g]
    # and layers of different shapes differ somewhere (the key is not trivially shared)
    firsts = [g[0] for g in groups.values()]
    assert len({Estimator(hw, 8, 8).region_ns(r, 1, hw.crossbar.rows) for r in firsts}) > 1


def test_thread_map_keeps_order_runs_nested_maps_inline_and_raises(monkeypatch):
    """``thread_map`` returns the loop's list in item order on a pool of threads, a map called from a pool
    thread runs in that thread (no nested pool to deadlock on), and an item's exception reaches the caller."""
    monkeypatch.setenv("TVM_CIM_WORKERS", "2")
    main = threading.get_ident()
    outer = thread_map(lambda i: (i * i, threading.get_ident(),
                                  {threading.get_ident() for _ in thread_map(lambda j: j, range(4))}), range(8))
    assert [o[0] for o in outer] == [i * i for i in range(8)]
    assert all(o[1] != main and o[2] == {o[1]} for o in outer)  # items on pool threads; nested maps inline
    assert thread_map(lambda i: threading.get_ident(), range(3), workers=1) == [main] * 3

    def boom(i):
        if i == 3:
            raise ValueError("item 3")
        return i

    with pytest.raises(ValueError, match="item 3"):
        thread_map(boom, range(6))

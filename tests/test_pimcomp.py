"""PIMCOMP (paper 004): unfolding formats, GA replication and layout, the pimcomp-ht / pimcomp-ll strategies."""

import contextlib
import dataclasses
import itertools
import math
import pathlib
import random

import numpy as np
import pytest
import tvm

import tvm_cim
from tvm_cim.common import hardware, zoo
from tvm_cim.common.onnx_io import import_onnx
from tvm_cim.compiler import strategies, unfold
from tvm_cim.compiler.estimate import Estimator
from tvm_cim.compiler.mapping import tile_matrix
from tvm_cim.compiler.region import CONV2D, Region
from tvm_cim.compiler.strategies import replication as RP
from tvm_cim.hardware import cost
from tvm_cim.hardware import crossbar as X
from tvm_cim.report import batch_summary, build_report, simulate_timing

R = dataclasses.replace


def conv(i, o, k, f_out, stride=1, pad=None):
    pad = (k // 2) if pad is None else pad
    f_in = (f_out - 1) * stride + k - 2 * pad
    return Region(f"c{i}_{o}_{k}", CONV2D, [(1, i, f_in, f_in)], (1, o, f_out, f_out),
                  w_int=np.ones((i * k * k, o), np.int8),
                  conv={"kernel": (k, k), "strides": (stride, stride), "padding": (pad, pad, pad, pad),
                        "dilation": (1, 1), "groups": 1})


# --------------------------------------------------------------------------- 16-bit weight storage (Table V)
@pytest.mark.parametrize("preset", ["pimcomp-a", "pimcomp-b", "pimcomp-c"])
def test_int8_weights_take_16_bit_storage(preset):
    """The presets store every weight in 16 bits (8 two-bit cells), so a crossbar holds half the int8 columns."""
    hw = hardware.load(preset, kind="cim")
    assert hw.crossbar.weight_storage_bits == 16 and hw.cols_per_weight(8) == 8
    assert hw.logical_cols(8) == hw.crossbar.cols // 8
    eight = R(hw, crossbar=R(hw.crossbar, weight_storage_bits=0))
    assert eight.cols_per_weight(8) == 4  # what the int8 quantisation alone would slice
    k, n = 300, 70
    tiles = tile_matrix(k, n, hw, np.ones((k, n), np.int8))
    assert len(tiles) == math.ceil(k / hw.crossbar.rows) * math.ceil(n / (hw.crossbar.cols // 8))


@pytest.mark.parametrize("encoding", ["offset", "twos", "differential"])
def test_16_bit_storage_of_int8_weights_is_exact_through_the_adc(encoding):
    """int8 weights in 16-bit slicing: zero upper slices, and the bit-serial MVM with the clipping ADC equals
    the integer product of plain numpy for every number of driven rows whose sums the ADC converts exactly
    (2-bit cells, 1-bit inputs: 85 rows), and equals the 8-bit slicing's result where the ADC clips."""
    base = hardware.load("pimcomp-a", kind="cim")
    hw = R(base, crossbar=R(base.crossbar, weight_encoding=encoding))
    eight = R(hw, crossbar=R(hw.crossbar, weight_storage_bits=0))
    rng = np.random.default_rng(0)
    w = rng.integers(-127, 128, size=(128, 9))
    cells, cells8 = X.encode(w, hw, 8), X.encode(w, eight, 8)
    s16, s8 = hw.weight_slices(8), eight.weight_slices(8)
    assert s16 > s8 and cells.shape[-3] == s16
    assert not cells[..., s8 - (encoding == "twos"):s16 - (encoding == "twos"), :, :].any()  # upper slices zero
    assert np.array_equal(X.decode(cells, hw, 8), w)
    lossless = (2 ** hw.crossbar.adc_bits - 1) // (2 ** hw.crossbar.cell_bits - 1)  # 85 rows
    for rows in (1, 17, lossless, 128):
        x = rng.integers(0, 256, size=(1, 1, 5, rows))
        c = cells[None, None, :rows]
        got = X.mvm(x, c, hw.driving(rows), 8, 8, exact_shortcut=False)[0, 0]
        if rows <= lossless:
            assert np.array_equal(got, x[0, 0].astype(np.int64) @ w[:rows].astype(np.int64))
        else:  # the ADC clips: the zero upper slices add nothing, so 16-bit storage gives the 8-bit result
            ref = X.mvm(x, cells8[None, None, :rows], eight.driving(rows), 8, 8, exact_shortcut=False)[0, 0]
            assert np.array_equal(got, ref)


def test_storage_wider_than_the_chip_is_rejected(tmp_path):
    text = (pathlib.Path(tvm_cim.__file__).parent.parent / "targets" / "pimcomp-a.toml").read_text()
    path = tmp_path / "wide.toml"
    path.write_text(text.replace("weight_storage_bits = 16", "weight_storage_bits = 32"))
    with pytest.raises(hardware.HardwareDescriptionError, match="weight_storage_bits"):
        hardware.load(str(path), kind="cim")


# --------------------------------------------------------------------------- 16-bit activations (sec. VIII-A)
def test_int8_activations_take_16_bit_storage():
    """The presets hold every activation in 16 bits: 16 one-bit input steps per MVM (unsigned; signed in two
    phases of 15 magnitude bits), and a region's scatters and stores move twice the bytes of 8-bit storage
    (by hand: a chunk of v output vectors receives v x 144 rows x 2 bytes over its row blocks, stores
    v x 16 x 2)."""
    from tvm_cim.compiler import codegen, mapping
    from tvm_cim.hardware import cost

    hw = tvm_cim.load("pimcomp-a")
    eight = R(hw, crossbar=R(hw.crossbar, input_storage_bits=0))
    assert hw.crossbar.input_storage_bits == 16 and hw.activation_bits(8) == 16 and eight.activation_bits(8) == 8
    assert (cost.input_steps(hw, 8, False), cost.input_steps(eight, 8, False)) == (16, 8)
    assert (cost.input_steps(hw, 8, True), cost.input_steps(eight, 8, True)) == (30, 14)  # phases: 2 x magnitude
    assert cost.mvm_ns(hw, 128, 16, 8, 8, False) == 2 * cost.mvm_ns(eight, 128, 16, 8, 8, False)
    r = conv(16, 16, 3, 8)
    r.x_scale, r.x_zero, r.x_signed, r.w_scale = 1.0, 0, False, np.ones(16, np.float32)
    opts = strategies.get("pimcomp-ll").options(hw)
    moved = {}
    for label, h in (("16", hw), ("8", eight)):
        pl = mapping.allocate([r], h).placements[r.name]
        prog = codegen.generate(r, pl, h, opts, "pimcomp-ll")
        per: dict = {}
        for o in prog.ops("run"):
            if o.opcode == "DMOV" and o.get("op") in ("scatter", "store"):
                key = (o.get("op"), o.get("vecs").start, o.get("vecs").size)
                per[key] = per.get(key, 0) + int(o["bytes"])
        moved[label] = per
    assert moved["16"] and moved["16"].keys() == moved["8"].keys()
    for (kind, _, v), b16 in moved["16"].items():
        assert b16 == 2 * moved["8"][(kind, _, v)] == 2 * v * (16 * 9 if kind == "scatter" else 16)


@pytest.mark.slow
def test_16_bit_activations_keep_outputs_and_only_cost_time():
    """The same network with 8- and 16-bit activation storage: outputs bit-identical (and equal to ``none``'s),
    16-bit storage slower (twice the input steps)."""
    from tvm import relax

    mod = import_onnx(zoo.build_model("vgg8", image_size=8), "v8")[0]
    x = np.random.default_rng(0).standard_normal((1, 1, 8, 8)).astype("float32")
    base = tvm_cim.load("pimcomp-a")
    outs, lat = {}, {}
    for label, bits, strat in (("16", 16, "pimcomp-ll"), ("8", 0, "pimcomp-ll"), ("ref", 16, "none")):
        hw = R(base, crossbar=R(base.crossbar, input_storage_bits=bits))
        opts = strategies.get(strat).options(hw)
        if opts.duplication == "ga":
            opts = R(opts, ga_generations=3)
        lowered, info = tvm_cim.offload(mod, hw, strategy=strat, options=opts)
        outs[label] = relax.VirtualMachine(relax.build(lowered, target="llvm"), tvm.cpu())["main"](
            tvm.runtime.tensor(x)).numpy()
        lat[label] = simulate_timing(info)[1].latency_ns
    np.testing.assert_array_equal(outs["16"], outs["8"])
    np.testing.assert_array_equal(outs["16"], outs["ref"])
    assert lat["16"] > lat["8"]


def test_activation_storage_wider_than_the_chip_is_rejected(tmp_path):
    text = (pathlib.Path(tvm_cim.__file__).parent.parent / "targets" / "pimcomp-a.toml").read_text()
    path = tmp_path / "wide.toml"
    path.write_text(text.replace("input_storage_bits = 16", "input_storage_bits = 32"))
    with pytest.raises(hardware.HardwareDescriptionError, match="input_storage_bits"):
        hardware.load(str(path), kind="cim")


# --------------------------------------------------------------------------- unfolding (Table IV)
@pytest.mark.parametrize("i,o,k,f", [(3, 64, 3, 32), (64, 128, 3, 16), (256, 256, 3, 8), (64, 64, 1, 8), (3, 64, 7, 112)])
def test_formats_cover_the_weights(i, o, k, f):
    r = conv(i, o, k, f)
    fm = unfold.formats(r)
    assert [x.name for x in fm] == list(unfold.FORMATS)
    for x in fm:
        assert x.H * x.W * x.P == i * o * k * k
        assert x.H % i == 0  # no factor of O in the accumulated direction


def test_choice_follows_the_paper_on_a_worked_layer():
    """I=64, O=128, K=3, 32x32 output of a padded 34x34 input, worked by hand from Table IV:
    cycles F_out^2 = 1024 for (I,O,K2), (IK,O,K), (IK2,O,1); loads 34*32*3*64 = 208896 for the first two,
    32^2*9*64 = 589824 for im2col; extra memory 576+1152, 576+384, 576+128."""
    r = conv(64, 128, 3, 32)
    fm = {x.name: x for x in unfold.formats(r)}
    assert (fm["(I,O,K2)"].cycles, fm["(I,OK2,1)"].cycles, fm["(IK,OK,1)"].cycles) == (1024, 34 * 34, 34 * 32)
    assert fm["(I,O,K2)"].load == fm["(IK,O,K)"].load == 208896 and fm["(IK2,O,1)"].load == 589824
    assert (fm["(I,O,K2)"].memory, fm["(IK,O,K)"].memory, fm["(IK2,O,1)"].memory) == (1728, 960, 704)
    assert unfold.choose(r, "ll").name == "(IK2,O,1)"  # least additional memory
    with pytest.raises(ValueError, match="ht"):
        unfold.choose(r, "fast")
    with pytest.raises(ValueError, match="estimate"):
        unfold.choose(r, "ht")  # the executed load volume needs the estimate


def _stem_and_3x3(seed=0):
    """x 1x3x32x32 -> conv 7x7/2 (pad 3, 16 channels) -> relu -> conv 3x3 (pad 1, 32 channels)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((16, 3, 7, 7)) * 0.2).astype("float32")
    w2 = (rng.standard_normal((32, 16, 3, 3)) * 0.2).astype("float32")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[3, 3, 3, 3], strides=[2, 2]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["y"], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(
        nodes, "stem", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 16, 16])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    return import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), "stem")[0]


def test_high_throughput_unfolding_is_the_least_executed_load(monkeypatch):
    """On a 7x7x3 stem and a 3x3 layer: compile ``pimcomp-ht`` with each executable format forced and count
    the bytes the emitted programs load from global and off-chip memory (input loads and weight fetches,
    one replica: no duplication).  The rule's choice is a format of least executed load among those of
    fewest computation cycles and, among them, of fewest array groups (distinct row blocks of the placed
    tiles); its outputs, and every forced format's, are bit-identical to ``none``'s."""
    from tvm import relax

    mod = _stem_and_3x3()
    hw = tvm_cim.load("pimcomp-a")
    x = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype("float32")

    def run(strategy, opts=None):
        lowered, info = tvm_cim.offload(mod, hw, strategy=strategy, options=opts)
        out = relax.VirtualMachine(relax.build(lowered, target="llvm"), tvm.cpu())["main"](tvm.runtime.tensor(x))
        return out.numpy(), info

    ref, _ = run("none")
    opts = R(strategies.get("pimcomp-ht").options(hw), duplication="none")
    rule = unfold.choose
    chosen: dict = {}

    def spy(r, mode, est=None):
        f = rule(r, mode, est)
        chosen[r.name] = f.name
        return f

    loads: dict = {}  # format -> region -> bytes loaded
    groups: dict = {}  # format -> region -> row blocks of one replica's tiles
    for name in (None, *unfold.EXECUTABLE):
        force = spy if name is None else (lambda r, mode, est=None, name=name:
                                          next(f for f in unfold.formats(r) if f.name == name))
        monkeypatch.setattr(unfold, "choose", force)
        out, info = run("pimcomp-ht", opts)
        np.testing.assert_array_equal(out, ref)
        key = name or "rule"
        loads[key], groups[key] = {}, {}
        for r in info.regions:  # by the region's own name (the report prefixes a hash of the compiled module)
            prog = next(p for p in info.programs if p.name.endswith(r.name))
            short = r.name.rsplit(".", 1)[-1]
            loads[key][short] = sum(int(o["bytes"]) for o in prog.ops()
                                    if o.opcode == "DMOV" and o.get("op") in ("load", "fetch"))
            groups[key][short] = len({t.k0 for t in info.chip_map.placements[r.name].tiles})
    monkeypatch.setattr(unfold, "choose", rule)
    est = Estimator.of(hw, 8, 8, opts)
    convs = [r for r in info.regions if r.kind == CONV2D]
    assert len(convs) == 2 and set(chosen) == {r.name.rsplit(".", 1)[-1] for r in convs}
    for r in convs:
        name = r.name.rsplit(".", 1)[-1]
        fm = {f.name: f for f in unfold.formats(r) if f.name in unfold.EXECUTABLE}
        fewest = min(f.cycles for f in fm.values())
        cands = [n for n, f in fm.items() if f.cycles == fewest]
        least = min(loads[n][name] for n in cands)
        best = [n for n in cands if loads[n][name] == least]
        c = chosen[name]
        assert c in best and loads["rule"][name] == least
        # the volume the rule compares is the one the programs load (int8 weights and activations)
        assert all(unfold.executed_load(r, fm[n], est) == loads[n][name] for n in cands)
        assert groups["rule"][name] == groups[c][name] == min(groups[n][name] for n in best)
        # what Table IV's volume would pick does more array groups, not less load
        by_table = min(cands, key=lambda n: (fm[n].load, fm[n].memory))
        assert loads[by_table][name] >= least and groups[by_table][name] > groups[c][name]


@pytest.mark.parametrize("i,k,fmt", [(64, 3, "(I,O,K2)"), (64, 3, "(IK,O,K)"), (3, 3, "(IK,O,K)"),
                                     (256, 3, "(I,O,K2)"), (64, 3, "(IK2,O,1)")])
def test_tile_rows_give_the_array_groups_of_the_format(i, k, fmt):
    """The crossbar tiles the mapper cuts with the format's tile rows form P x ceil(H / rows) row blocks."""
    hw = tvm_cim.load("pimcomp-a")
    r = conv(i, 32, k, 8)
    f = next(x for x in unfold.formats(r) if x.name == fmt)
    tr = unfold.tile_rows(r, f, hw.crossbar.rows)
    tiles = tile_matrix(i * k * k, 32, hw, tile_rows=tr)
    assert len({t.k0 for t in tiles}) == f.array_groups(hw.crossbar.rows)


# --------------------------------------------------------------------------- GA on a small problem
def toy(cores=4, per_core=8):
    """Three layers, synthetic latency curves work / replicas (the estimate is not needed to test the search)."""
    work = [90.0, 40.0, 25.0]
    units, uxbs = np.array([1, 2, 1]), np.array([3, 2, 4])
    max_reps = np.array([8, 8, 8])
    lat = [np.array([w / d for d in range(1, m + 1)]) for w, m in zip(work, max_reps)]
    return RP.Problem(units, uxbs, units.copy(), max_reps, cores, per_core, 3, lat, 0.0)


def brute_force(p):
    """Best cycle over every replica vector that packs onto the cores (exhaustive packing search)."""
    best = math.inf
    for reps in itertools.product(*(range(1, m + 1) for m in p.max_reps)):
        if sum(int(u * x * d) for u, x, d in zip(p.units, p.unit_xbs, reps)) > p.cores * p.per_core:
            continue
        if _packs(p, reps):
            best = min(best, p.cycle_ns(reps))
    return best


def _packs(p, reps):
    items = sorted([int(x) for li, d in enumerate(reps) for x in [p.unit_xbs[li]] * int(p.units[li] * d)], reverse=True)
    free = [p.per_core] * p.cores

    def place(j):
        if j == len(items):
            return True
        seen = set()
        for c in range(p.cores):
            if free[c] >= items[j] and free[c] not in seen:
                seen.add(free[c])
                free[c] -= items[j]
                if place(j + 1):
                    return True
                free[c] += items[j]
        return False

    return place(0)


def independent_legal(p, g):
    """Capacity and whole replicas, recomputed from the gene values."""
    used = [0] * p.cores
    total = [0] * p.n
    for c in range(p.cores):
        for v in g[c]:
            if v:
                lay, cnt = divmod(int(v), RP.BASE)
                used[c] += cnt * int(p.unit_xbs[lay])
                total[lay] += cnt
    return all(u <= p.per_core for u in used) and all(t >= u and t % u == 0 for t, u in zip(total, p.units))


def test_every_genome_is_legal():
    p = toy()
    rng = random.Random(3)
    for _ in range(50):
        g = RP.random_genome(p, rng)
        assert independent_legal(p, g) and RP.legal(p, g)
        for _ in range(40):
            g = RP.mutate(p, g, rng)
            assert independent_legal(p, g) and RP.legal(p, g)


def test_ga_finds_the_brute_force_optimum_and_never_gets_worse():
    p = toy()
    out, best = RP.ga(p, p.cycle_ns, generations=60, population=60, time_limit=None, seed=1, progress=False)
    assert out.fitness == pytest.approx(brute_force(p))
    h = out.detail["history"]
    assert all(b <= a for a, b in zip(h, h[1:]))
    assert RP.legal(p, best) and list(RP.decode(p, best)) == out.replicas
    again, _ = RP.ga(p, p.cycle_ns, generations=60, population=60, time_limit=None, seed=1, progress=False)
    assert again.replicas == out.replicas  # seeded


def test_dp_on_the_same_problem():
    p = toy()
    dp = RP.dp_same_problem(p, p.cycle_ns)
    assert dp.detail["packs"]
    assert dp.fitness == pytest.approx(brute_force(p))


def test_one_replica_that_does_not_fit_is_reported():
    p = toy(cores=1, per_core=4)
    with pytest.raises(ValueError, match="do(es)? not fit"):
        RP.random_genome(p, random.Random(0))


# --------------------------------------------------------------------------- strategies
def test_registered_with_their_pieces():
    hw = tvm_cim.load("pimcomp-a")
    ht, ll = strategies.get("pimcomp-ht").options(hw), strategies.get("pimcomp-ll").options(hw)
    assert (ht.duplication, ht.unfolding, ht.grouping, ht.pipeline) == ("ga", "ht", True, False)
    assert (ll.duplication, ll.unfolding, ll.pipeline, ll.mvm_pipeline) == ("ga", "ll", True, True)
    o = R(ht, ga_time_limit=2.5, ga_generations=7, ga_seed=3, ga_evaluations=123)
    assert strategies.Options.from_attrs(o.as_attrs()) == o


@pytest.mark.parametrize("strategy", ["pimcomp-ht", "pimcomp-ll"])
def test_ga_result_does_not_depend_on_the_clock(resnet, strategy):
    """The budget of evaluations decides: two compilations with different (generous) time limits choose the
    same replicas and layout, and say the budget (or stagnation) stopped them."""
    hw = tvm_cim.load("pimcomp-a")
    reps = []
    for limit in (3000.0, 6000.0):  # far above what the budget takes, even on a loaded machine
        opts = R(strategies.get(strategy).options(hw), ga_time_limit=limit, ga_evaluations=400, ga_seed_dp=False)
        _, info = tvm_cim.offload(resnet, hw, strategy=strategy, options=opts)
        rep = info.replication[0]
        assert rep["ga"]["stopped"] in ("evaluations", "stagnation", "generations")
        # region names carry a build id that hashes the options: compare the layers in order
        reps.append((rep["ga"]["fitness_ns"], [(v["replicas"], v["cores"]) for v in rep["layers"].values()]))
    assert reps[0] == reps[1]


def test_memoised_low_latency_fitness_is_exact(resnet, monkeypatch):
    """The GA's low-latency fitness remembers chunk finishes, chunks and per-chunk work within one solve
    (``schedule._memo_chunk_finish``) and resumes the graph estimate after the first layers it has seen with
    the same replicas (``estimate.GraphPrefix``); without the prefix, and without both, the GA evaluates the
    same fitness values, so it chooses the same replicas and layout, and the DP scores the same."""
    from tvm_cim.compiler import estimate, schedule

    made = []

    class Counting(estimate.GraphPrefix):
        def __init__(self):
            super().__init__()
            made.append(self)

    hw = tvm_cim.load("pimcomp-a")
    opts = R(strategies.get("pimcomp-ll").options(hw), ga_evaluations=300)
    runs = []
    for variant in ("memo+prefix", "memo", "none"):
        if variant == "memo+prefix":
            monkeypatch.setattr(schedule, "GraphPrefix", Counting)
        if variant == "memo":
            monkeypatch.setattr(schedule, "GraphPrefix", lambda: None)
        if variant == "none":
            monkeypatch.setattr(schedule, "_memo_chunk_finish", lambda est: contextlib.nullcontext())
        rep = tvm_cim.offload(resnet, hw, strategy="pimcomp-ll", options=opts)[1].replication[0]
        runs.append((rep["ga"]["fitness_ns"], rep["ga"]["history"] if "history" in rep["ga"] else None,
                     rep["dp"]["fitness_ns"], [(v["replicas"], v["cores"]) for v in rep["layers"].values()]))
    assert runs[0] == runs[1] == runs[2]
    assert made and sum(p.resumed for p in made) > 0  # the prefix was used


def test_range_max_of_non_decreasing_values_is_the_last_of_each_range():
    """The shortcut for stored-in-order finish times equals the sparse table's answer (and plain numpy's)."""
    from tvm_cim.compiler.estimate import range_max

    rng = np.random.default_rng(0)
    for n in (1, 2, 7, 64, 100):
        for values in (np.sort(rng.random(n)), rng.random(n), np.repeat(rng.random(1), n)):
            lo = rng.integers(0, n, 30)
            hi = np.minimum(lo + 1 + rng.integers(0, n, 30), n)
            ref = np.array([values[a:b].max() for a, b in zip(lo, hi)])
            np.testing.assert_array_equal(range_max(values, lo, hi), ref)


def test_program_names_do_not_depend_on_solve_time(resnet):
    """Two identical builds get the same program names: the build id leaves out the GA's recorded run
    time, which differs between the runs (names used to differ on every run)."""
    hw = tvm_cim.load("pimcomp-a")
    opts = R(strategies.get("pimcomp-ht").options(hw), ga_evaluations=200)
    runs = [tvm_cim.offload(resnet, hw, strategy="pimcomp-ht", options=opts)[1] for _ in range(2)]
    assert runs[0].replication[0]["ga"]["seconds"] != runs[1].replication[0]["ga"]["seconds"]
    assert [p.name for p in runs[0].programs] == [p.name for p in runs[1].programs]


@pytest.fixture(scope="module")
def resnet():
    return import_onnx(zoo.build_model("resnet18", image_size=32), "r18")[0]


@pytest.mark.parametrize("strategy", ["pimcomp-ht", "pimcomp-ll"])
def test_strategy_compiles_and_reports_ga_against_dp(resnet, strategy):
    hw = tvm_cim.load("pimcomp-a")
    opts = R(strategies.get(strategy).options(hw), ga_evaluations=1000, ga_generations=20)
    _, info = tvm_cim.offload(resnet, hw, strategy=strategy, options=opts)
    rep = info.replication[0]
    assert set(rep["layers"]) == {r.name for r in info.regions}
    # the replicas the GA chose are the ones placed
    for r in info.regions:
        assert len(info.chip_map.placements[r.name].replicas) == rep["layers"][r.name]["replicas"]
    assert rep["ga"]["fitness_ns"] > 0 and rep["dp"]["fitness_ns"] > 0
    if strategy == "pimcomp-ht":  # both minimise the pipeline cycle, which the DP solves exactly
        assert rep["ga"]["fitness_ns"] >= rep["dp"]["fitness_ns"] * (1 - 1e-9)
    stats, tl = simulate_timing(info)
    assert tl.latency_ns > 0


@pytest.mark.parametrize("strategy", ["pimcomp-ht", "pimcomp-ll"])
def test_placement_follows_the_ga_layout(resnet, strategy):
    """Every AG unit of every replica sits on one core, and each layer has on each core the units the GA's
    genome gives it; no crossbar holds two tiles; the simulator runs the program on those crossbars."""
    hw = tvm_cim.load("pimcomp-a")
    opts = R(strategies.get(strategy).options(hw), ga_evaluations=600, ga_generations=10)
    _, info = tvm_cim.offload(resnet, hw, strategy=strategy, options=opts)
    rep = info.replication[0]
    per_core = hw.core.crossbars
    seen: set = set()
    progs = {p.name: p for p in info.programs}
    for r in info.regions:
        pl = info.chip_map.placements[r.name]
        units = RP.unit_tiles(pl.tiles, per_core)
        count: dict = {}
        for xbs in pl.replicas:
            for unit in units:
                cores = {xbs[t] // per_core for t in unit}
                assert len(cores) == 1  # a unit never straddles cores
                c = cores.pop()
                count[c] = count.get(c, 0) + 1
            assert not seen & set(xbs)
            seen |= set(xbs)
        assert count == {c: n for c, n in rep["layers"][r.name]["cores"]}
        # the program binds exactly those crossbars
        prog = next(p for n, p in progs.items() if n.endswith(r.name))
        binds = {tuple(o["xbs"]) for o in prog.setup if getattr(o, "opcode", "") == "CIM.bind_vxb"}
        assert binds == {tuple(x) for x in pl.replicas}
    stats, tl = simulate_timing(info)
    assert tl.latency_ns > 0
    # the report's crossbar utilisation counts every replica: the crossbars the programs bind
    bound = {xb for p in info.programs for o in p.setup if getattr(o, "opcode", "") == "CIM.bind_vxb" for xb in o["xbs"]}
    one_copy = {xb for pl in info.chip_map.placements.values() for xb in pl.replicas[0]}
    assert len(bound) > len(one_copy)  # the GA replicated something
    util = build_report(info, stats, "pimcomp-a")["utilisation"]
    assert util["crossbars_used"] == len(bound)


def test_layer_grouping_runs_independent_layers_at_once(resnet):
    """Without the pipeline, grouping lets a residual branch overlap the main path; never slower than serial."""
    hw = tvm_cim.load("pimcomp-a")
    opts = R(strategies.get("pimcomp-ht").options(hw), ga_evaluations=600, ga_generations=10)
    _, info = tvm_cim.offload(resnet, hw, strategy="pimcomp-ht", options=opts)
    stats, grouped = simulate_timing(info)
    info.schedule.options = R(opts, grouping=False)
    _, serial = simulate_timing(info)
    assert grouped.latency_ns <= serial.latency_ns + 1e-6
    spans = grouped.region_span
    assert any(spans[b][0] < spans[a][1] for a, b in zip(spans, list(spans)[1:]))  # some overlap


def test_estimator_problem_on_a_real_layer():
    hw = tvm_cim.load("pimcomp-c")
    r = conv(256, 512, 3, 4)
    est = Estimator(hw, 8, 8)
    p = RP.problem([r], est, {r.name: hw.crossbar.rows}, hw)
    # an AG wider than a core is cut into units that fit one
    assert p.unit_xbs[0] <= hw.core.crossbars
    assert p.units[0] * p.unit_xbs[0] >= len(est.tile_list(r, hw.crossbar.rows))


# --------------------------------------------------------------------------- pseudo-instructions (Table III)
@pytest.mark.parametrize("strategy", ["pimcomp-ll", "cim-mlc", "none"])
def test_pseudo_instructions_round_trip_and_pair(strategy):
    from tvm_cim.program import pimcomp_isa as ISA

    mod = import_onnx(zoo.build_model("vgg8", image_size=8), "v8")[0]
    hw = tvm_cim.load("pimcomp-a")
    opts = strategies.get(strategy).options(hw)
    if opts.duplication == "ga":
        opts = R(opts, ga_generations=3)
    _, info = tvm_cim.offload(mod, hw, strategy=strategy, options=opts)
    for prog in info.programs:
        isa = ISA.lower(prog, hw.core.crossbars, hw.cores)
        text = ISA.print_isa(isa)
        back = ISA.parse_isa(text)
        assert back.code == isa.code and back.skipped == isa.skipped and ISA.print_isa(back) == text
        ISA.check(isa, int(hw.core.local_buffer.capacity_kb * 1024))
        # one mvm per crossbar read, one send and one recv per scatter, one vec per ALU operation
        kinds = prog.count_ops()
        c = isa.counts()
        assert c.get("mvm", 0) == sum(v for k, v in kinds.items() if k.startswith("CIM.read_"))
        assert c.get("send", 0) == c.get("recv", 0) == kinds.get("DMOV.scatter", 0)
        assert c.get("store", 0) == kinds.get("DMOV.store", 0)
        alu = ("DCOM.quantize", "DCOM.im2col", "DCOM.colsum", "DCOM.reduce", "DCOM.dequantize")
        assert c.get("vec", 0) == sum(kinds.get(k, 0) for k in alu)
        # every mvm runs on the core holding its crossbars
        assert all(core < hw.cores for core, code in isa.code.items() for i in code if i.name == "mvm")


def test_pseudo_instruction_errors():
    from tvm_cim.program import pimcomp_isa as ISA

    isa = ISA.IsaProgram("t", 2)
    isa.emit(2, "send", 0, "x[0:4]", 16)
    with pytest.raises(ValueError, match="do not match"):
        ISA.check(isa)
    isa.emit(0, "recv", 2, "x[0:4]", 16)
    ISA.check(isa)
    ISA.check(isa, local_bytes=16)
    with pytest.raises(ValueError, match="core 0: recv.*16 bytes, more than its 15-byte local memory"):
        ISA.check(isa, local_bytes=15)
    with pytest.raises(ValueError, match="line 3"):
        ISA.parse_isa('isa "t" cores=2\ncore 0 {\n  bogus(1)\n}\n')
    with pytest.raises(ValueError, match="takes 4 operands"):
        ISA.Instr("mvm", (1, 2))


# --------------------------------------------------------------------------- low latency: heap and batched sends
def test_heap_next_fit_waits_for_readers_and_spills():
    from tvm_cim.simulator.localmem import Heap

    h = Heap(100)
    a, w = h.alloc(40)
    assert (a.addr, w) == (0, [])
    b, w = h.alloc(40)
    assert (b.addr, w) == (40, [])
    assert h.alloc(40)[0] is None  # both still unread: no room, a spill
    h.read(a, 7)
    c, w = h.alloc(30)  # next fit wraps to the start and reuses a's bytes after a's reader
    assert (c.addr, w) == (0, [7])
    assert h.alloc(101)[0] is None and h.peak == 80


def test_heap_reusing_part_of_a_freed_buffer_leaves_the_rest_behind_its_readers():
    """A buffer that reuses the first 40 of 100 freed bytes waits for their reader; the next one, placed in the
    other 60, must wait for that reader as well (the freed buffer's bytes are all in use until it finishes)."""
    from tvm_cim.simulator.localmem import Buffer, Heap, _check_bounds

    h = Heap(100)
    a, _ = h.alloc(100)
    h.read(a, 7)
    b, w = h.alloc(40)
    assert (b.addr, w) == (0, [7])
    c, w = h.alloc(40)
    assert (c.addr, w) == (40, [7])
    # placed where the bytes are freed first (the shared heap's choice); next fit would take a's bytes
    h = Heap(100)
    a, _ = h.alloc(50)
    b, _ = h.alloc(50)
    h.read(a, 1)
    h.read(b, 2)
    c, w = h.alloc(50, free_at=lambda buf: {1: 10.0, 2: 5.0}[buf.readers[0]])
    assert (c.addr, w) == (50, [2])
    # the bounds check: two buffers sharing bytes in use at once are refused, apart in time they pass
    x, y = Buffer(0, 50, [1], 0), Buffer(40, 20, [3], 2)
    _check_bounds([(0, x), (0, y)], [0, 0, 10, 0], [1, 5, 11, 12], 100)
    with pytest.raises(RuntimeError, match="in use at once"):
        _check_bounds([(0, x), (0, y)], [0, 0, 4, 0], [1, 5, 5, 12], 100)
    with pytest.raises(RuntimeError, match="outside"):
        _check_bounds([(0, Buffer(90, 20, [1], 0))], [0, 0], [1, 2], 100)


def test_low_latency_heap_stalls_when_memory_is_small_and_keeps_outputs_bit_identical():
    """The heap bounds what a core holds: a smaller local memory makes senders wait (slower, never faster),
    the unread bytes never exceed a region's share, and the outputs equal those of a strategy without it."""
    from tvm import relax

    mod = import_onnx(zoo.build_model("vgg8", image_size=8), "v8")[0]
    x = np.random.default_rng(0).standard_normal((1, 1, 8, 8)).astype("float32")
    base = tvm_cim.load("pimcomp-a")
    outs, lat, mem = {}, {}, {}
    for label, kb, strat in (("big", 64.0, "pimcomp-ll"), ("tiny", 1.0, "pimcomp-ll"), ("ref", 64.0, "none")):
        hw = R(base, core=R(base.core, local_buffer=R(base.core.local_buffer, capacity_kb=kb)))
        opts = strategies.get(strat).options(hw)
        if opts.duplication == "ga":
            opts = R(opts, ga_generations=3)
        lowered, info = tvm_cim.offload(mod, hw, strategy=strat, options=opts)
        with tvm_cim.runtime.collect() as stats:
            outs[label] = relax.VirtualMachine(relax.build(lowered, target="llvm"), tvm.cpu())["main"](
                tvm.runtime.tensor(x)).numpy()
        lat[label] = info
        mem[label] = [s.localmem for s in stats]
    np.testing.assert_array_equal(outs["big"], outs["ref"])
    np.testing.assert_array_equal(outs["tiny"], outs["ref"])
    assert all(m is None for m in mem["ref"])
    _, t_big = simulate_timing(lat["big"])
    _, t_tiny = simulate_timing(lat["tiny"])
    big, tiny = t_big.localmem, t_tiny.localmem  # one heap per core, shared by the regions on it
    assert tiny["capacity_bytes"] == 1024 and 0 < tiny["peak_bytes"] <= 1024 < big["peak_bytes"]
    assert tiny["waits"] + tiny["spills"] > big["waits"] + big["spills"]
    assert t_tiny.latency_ns >= t_big.latency_ns
    # the global-buffer traffic of what the shared heap spilled is in the report's energy, not only in its count
    st_tiny, _ = simulate_timing(lat["tiny"])
    rep = build_report(lat["tiny"], st_tiny, "pimcomp-a")
    own = sum(s.energy_pj.get("noc+buffer", 0.0) for s in st_tiny)
    assert tiny["spills"] > 0 and tiny["spilled_energy_pj"] > 0
    assert rep["energy_breakdown_pj"]["noc+buffer"] == pytest.approx(own + tiny["spilled_energy_pj"], rel=1e-12)
    # a batch says that the shared heap's waits are not modelled across inputs; a run without the heap does not
    assert "heap" in batch_summary(lat["tiny"], st_tiny, 2, 1.0, 1.0)["scope"]
    st_ref, _ = simulate_timing(lat["ref"])
    assert "heap" not in batch_summary(lat["ref"], st_ref, 2, 1.0, 1.0)["scope"]


def _shared_case(cap: int, spill: bool = False, faster: bool = False):
    """Two regions with buffers on core 0 (hand-built events): A fills a (60 B) and reads it for 100 ns; B fills
    b (60 B) and reads it for 5 ns; with ``spill``, A's one reader needs a second 60 B buffer as well."""
    from tvm_cim.simulator.localmem import Buffer, schedule_shared
    from tvm_cim.simulator.timeline import Events

    ea, eb = Events(), Events()
    ea.add(10, ("link:0",), [], 1.0, False, "DMOV.scatter")
    bufs_a = [(0, Buffer(-1, 60, [1 + spill], 0))]
    if spill:
        ea.add(10, ("link:0",), [], 1.0, False, "DMOV.scatter")
        bufs_a.append((0, Buffer(-1, 60, [2], 1, (50.0, ("link:0", "gbuf"), 3.0))))
    ea.add(100, ("xb:1",), list(range(1 + spill)), 1.0, True, "CIM.read")
    eb.add(10, ("link:1",), [], 1.0, False, "DMOV.scatter")
    eb.add(5, ("xb:2",), [0], 1.0, True, "CIM.read")
    regions = [("A", ea, 0), ("B", eb, 0)]
    b = Buffer(-1, 60, [1], 0, (15.0, ("link:1", "gbuf"), 2.0))
    return schedule_shared(regions, {}, {"A": bufs_a, "B": [(0, b)]}, cap, spill_faster=faster)


def test_shared_heap_makes_a_region_wait_for_another_regions_reader():
    """One heap per core for every region on it: B's buffer reuses a's bytes once A's reader has finished
    (times by hand); with room for both, B does not wait; the memory in use never exceeds the capacity."""
    tl, lm = _shared_case(100)
    np.testing.assert_array_equal(tl.start, [0, 10, 110, 120])
    assert tl.latency_ns == 125 and lm["waits"] == 1 and lm["spills"] == 0 and lm["peak_bytes"] == 60
    tl, lm = _shared_case(120)
    np.testing.assert_array_equal(tl.start, [0, 10, 0, 10])
    assert tl.latency_ns == 110 and lm["waits"] == 0 and lm["peak_bytes"] == 120
    # streaming b from the global buffer (15 ns) finishes before waiting 110 ns for A's reader: it spills
    tl, lm = _shared_case(100, faster=True)
    np.testing.assert_array_equal(tl.start, [0, 10, 0, 15])
    assert tl.latency_ns == 110 and lm["waits"] == 0 and lm["spills"] == 1 and lm["peak_bytes"] == 60


def test_shared_heap_spills_when_nothing_can_proceed():
    """A's reader needs two 60 B buffers in a 100 B memory: the second cannot be held and nothing else frees
    memory, so it spills and its scatter takes the recorded spill cost (50 ns on the global buffer too)."""
    tl, lm = _shared_case(100, spill=True)
    assert lm["spills"] == 1 and lm["spilled_bytes"] == 60 and lm["spilled_energy_pj"] == 3.0
    assert tl.finish[1] - tl.start[1] == 50 and tl.start[2] == max(tl.finish[:2])
    assert lm["peak_bytes"] <= 100


def test_in_flight_bytes_follow_the_timeline():
    """A buffer is held from the start of the operation that fills it to the finish of its last reader; the
    peak is the largest sum over one core at any time (hand-computed timeline)."""
    from tvm_cim.simulator.localmem import LocalMemory

    mem = LocalMemory(1000)
    a, _ = mem.alloc(0, 100)
    b, _ = mem.alloc(0, 200)
    c, _ = mem.alloc(1, 250)
    a.writer, b.writer, c.writer = 0, 1, 2
    a.readers, b.readers, c.readers = [3], [4], [5]
    start = np.array([0.0, 5.0, 0.0, 0.0, 0.0, 0.0])
    finish = np.array([1.0, 6.0, 1.0, 4.0, 9.0, 3.0])
    assert mem.in_flight(start, finish) == 250  # core 0: a [0, 4], b [5, 9] apart; core 1: c [0, 3]
    finish[3] = 7.0  # a read late: a and b overlap on core 0
    assert mem.in_flight(start, finish) == 300
    finish[3] = 5.0  # a released at 5 as b is filled: the release counts first
    assert mem.in_flight(start, finish) == 250


def test_low_latency_heap_is_split_by_measured_demand():
    """With ``local_heap="region"``, each core's memory is divided by need, measured in a first pass (each program alone with a whole
    core's memory): the shares of the regions on a core never exceed it, and a region whose demand fits
    next to the smaller ones gets at least that much."""
    from tvm_cim.compiler import transform as T
    from tvm_cim.simulator.engine import heap_peak

    mod = import_onnx(zoo.build_model("resnet18", image_size=32, in_channels=1, num_classes=10), "r18")[0]
    hw = tvm_cim.load("pimcomp-a")
    opts = R(strategies.get("pimcomp-ll").options(hw), ga_generations=3, local_heap="region")
    _, info = tvm_cim.offload(mod, hw, strategy="pimcomp-ll", options=opts)
    cap = int(hw.core.local_buffer.capacity_kb * 1024)
    share = {p.name: int(p.attr("local_bytes", 0)) for p in info.programs}
    assert all(share.values())
    whole = [dataclasses.replace(p, attrs=tuple((k, cap if k == "local_bytes" else v) for k, v in p.attrs))
             for p in info.programs]
    peak = {p.name: heap_peak(hw, w) for p, w in zip(info.programs, whole)}
    assert all(0 < v for v in peak.values())
    on_core: dict = {}
    for name, pl in info.chip_map.placements.items():
        for c in {xb // hw.core.crossbars for rep in pl.replicas for xb in rep}:
            on_core.setdefault((pl.segment, c), []).append(name)
    assert max(len(v) for v in on_core.values()) > 1  # cores are shared: the split matters
    admitted: dict = {}
    for names in on_core.values():
        assert sum(share[n] for n in names) <= cap
        total = 0
        for n in sorted(names, key=lambda n: (peak[n], n)):
            total += peak[n]
            admitted[n] = admitted.get(n, True) and total <= cap
    assert any(admitted.values()) and all(share[n] >= peak[n] for n, ok in admitted.items() if ok)
    assert T._local_shares(info.chip_map, hw, peak) == share


def test_batched_sends_defer_the_results():
    """Alg. 2: with a threshold of T chunks, stores come in groups of T after T chunks' computations."""
    hw = tvm_cim.load("pimcomp-a")
    r = conv(16, 16, 3, 8)
    r.x_scale, r.x_zero, r.x_signed, r.w_scale = 1.0, 0, False, np.ones(16, np.float32)
    from tvm_cim.compiler import codegen, mapping

    opts = strategies.get("pimcomp-ll").options(hw)
    pl = mapping.allocate([r], hw).placements[r.name]
    kinds = {}
    for t in (1, 4):
        prog = codegen.generate(r, pl, hw, R(opts, send_batch=t), "pimcomp-ll")
        kinds[t] = [o.kind for o in prog.ops("run") if o.kind in ("DMOV.store", "DCOM.dequantize")]
    assert kinds[1][:4] == ["DCOM.dequantize", "DMOV.store"] * 2
    n = kinds[4].count("DMOV.store")
    assert n == kinds[1].count("DMOV.store") and n > 4
    assert kinds[4][:8] == ["DCOM.dequantize"] * 4 + ["DMOV.store"] * 4


def stepped(cores=12, per_core=16, seed=0):
    """Six layers whose latency falls in steps (ceil(chunks / replicas) rounds), as the estimate's curves do."""
    rng = np.random.default_rng(seed)
    chunks = rng.integers(8, 64, 6)
    per_round = rng.uniform(1.0, 5.0, 6)
    units = rng.integers(1, 3, 6)
    uxbs = rng.integers(1, 5, 6)
    max_reps = np.minimum(chunks, cores * per_core // (units * uxbs))
    lat = [np.array([math.ceil(c / d) * t for d in range(1, m + 1)]) for c, t, m in zip(chunks, per_round, max_reps)]
    return RP.Problem(units, uxbs, units.copy(), max_reps, cores, per_core, 6, lat, 0.0)


def test_trim_search_equals_a_scan_of_the_curve():
    """The plateau search the trim uses (a binary search over the curve's running minimum) gives the first
    replica count within the bound among the first ``reps``, as a plain scan does, on curves that rise too."""
    rng = np.random.default_rng(3)
    for _ in range(300):
        lt = rng.choice([1.0, 2.0, 3.0, 5.0, 8.0], rng.integers(1, 12))
        p = RP.Problem(np.ones(1, int), np.ones(1, int), np.ones(1, int), np.array([len(lt)]), 1, 16, 1, [lt], 0.0)
        for reps in range(1, len(lt) + 1):
            for bound in (0.5, 1.0, 2.0, 2.5, 3.0, 8.0):
                within = [i + 1 for i in range(reps) if lt[i] <= bound * (1 + 1e-12)]
                assert RP._min_reps_upto(p.neg_best[0], reps, bound) == (within[0] if within else reps)


@pytest.mark.parametrize("seed", [0, 2, 4])
def test_unseeded_ga_reaches_the_dp_on_stepped_curves(seed):
    """Without the DP in its first population the GA still reaches the DP's cycle (the DP is exact here: its
    answer is a lower bound on the counts alone), helped by the balance mutation that moves layers along their
    plateaus."""
    p = stepped(seed=seed)
    dp = RP.dp_same_problem(p, p.cycle_ns)
    out, best = RP.ga(p, p.cycle_search, generations=80, population=100, time_limit=None, seed=seed,
                      progress=False, report=p.cycle_ns)
    assert RP.legal(p, best)
    assert out.fitness <= dp.fitness * (1 + 1e-9)


# --------------------------------------------------------------------------- static power (sec. VIII-B)
@pytest.mark.parametrize("preset, per_chip", [("pimcomp-a", (168, 96, 42)), ("pimcomp-c", (4, 8, 1))])
def test_static_power_counts_every_crossbar_used_or_idle(preset, per_chip):
    """PIMCOMP's energy savings come from leakage over a shorter run: every crossbar's periphery (ADCs, DACs,
    the rest), every core and every router draw static power for the whole run, used or idle.  A tiny network
    uses a few crossbars; its report's leakage is still the whole accelerator's, summed here unit by unit from
    the file's numbers (PUMA's leakage figures)."""
    import tomllib

    raw = tomllib.loads((pathlib.Path(tvm_cim.__file__).parents[1] / "targets" / f"{preset}.toml").read_text())
    xb, core, chip = raw["crossbar"], raw["core"], raw["chip"]
    chips = raw.get("system", {}).get("chips", 1)
    cores, xbs, routers = per_chip
    assert (chip["cores"], core["crossbars"]) == (cores, xbs)
    assert chip["leakage_mw"] == pytest.approx(routers * 0.41)  # puma-simulator's 4-port router
    one_xb = xb["adcs"] * 0.2 + xb["rows"] * 0.000390625 + xb["leakage_mw"]  # 8-bit ADC, 1-bit DAC (PUMA)
    expect_mw = chips * (cores * xbs * one_xb + cores * (core["local_buffer"]["leakage_mw"] + core["alu"]["leakage_mw"])
                         + chip["leakage_mw"] + chip["global_buffer"]["leakage_mw"] + chip["alu"]["leakage_mw"])
    assert chips * cores * xbs * one_xb > 0.9 * expect_mw  # the crossbars' periphery dominates
    mod = import_onnx(zoo.build_model("vgg8", image_size=8), "v8")[0]
    hw = tvm_cim.load(preset)
    _, info = tvm_cim.offload(mod, hw, strategy="none")
    stats, _ = simulate_timing(info)
    rep = build_report(info, stats, preset)
    assert 0 < rep["utilisation"]["crossbars_used"] < chips * cores * xbs / 2  # most crossbars idle
    assert rep["energy_breakdown_pj"]["leakage"] == pytest.approx(expect_mw * rep["latency_ns"], rel=1e-12)
    # the keys are the model's: without them the crossbars draw nothing
    bare = R(hw, crossbar=R(hw.crossbar, adc_leakage_mw=0.0, dac_leakage_mw=0.0, leakage_mw=0.0))
    assert cost.leakage_terms_mw(bare)["crossbars"] == 0.0
    assert cost.leakage_mw(hw) - cost.leakage_mw(bare) == pytest.approx(chips * cores * xbs * one_xb)

"""The data-centric schedule space, its pruning rules, the predictor and meta-schedule tuning."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import tvm
from tvm import te

from tvm_pim import load
from tvm_pim.compiler import space
from tvm_pim.compiler.kernels import KernelSpec
from tvm_pim.cost import predictor
from tvm_pim.cost.measure import best_by_simulation, evaluate
from tvm_pim.hardware.view import PimView
from tvm_pim.search import database, tuning

HBM = PimView(load("hbm-pim"))
ATT = PimView(load("attacc"))


def _units(total: int) -> list[int]:
    """Unit counts a dimension set may take: divisors of the total and powers of two below it."""
    return sorted({d for d in range(1, total + 1) if total % d == 0} | {1 << i for i in range(total.bit_length())
                                                                       if 1 << i <= total})


def _brute_force_allocations(spec, view) -> int:
    """Allocations counted by brute force over every (groups, cores) tuple (no fixed dimensions here)."""
    extents = [s.extent for s in space.dimension_sets(spec)]
    per_set = [[(g, c) for g in _units(view.groups) if g <= e for c in _units(view.cores_per_group) if c * g <= e]
               for e in extents]
    n = 0
    for combo in itertools.product(*per_set):
        if np.prod([g for g, _ in combo]) <= view.groups and np.prod([c for _, c in combo]) <= view.cores_per_group:
            n += 1
    return n


def test_dimension_sets_come_from_the_tir():
    sets = space.dimension_sets(KernelSpec.make("gemv", b=2, m=1, n=64, k=128))
    assert [s.name for s in sets] == ["b", "m", "n", "k"]
    by = {s.name: s for s in sets}
    assert {m.buffer for m in by["k"].members} == {"A", "x"}
    assert {m.buffer for m in by["n"].members} == {"A", "gemv"}
    assert by["k"].reduction and not by["n"].reduction
    # attention: three blocks share b, n, k through the intermediate buffers
    att = {s.name: s for s in space.dimension_sets(KernelSpec.make("attn", b=2, n=64, k=32))}
    assert set(att) == {"b", "n", "k"}
    assert {m.buffer for m in att["k"].members} >= {"K", "V", "q"}


def test_enumeration_and_sampling_share_one_space():
    spec = KernelSpec.make("gemv", b=4, m=1, n=256, k=128)
    drafts, st = space.enumerate_drafts(spec, ATT, pruned=False)
    # the full space, counted independently: allocations x representative mappings x index ranges
    members = [max(1, len(s.members)) for s in space.dimension_sets(spec)]
    assert st.total == _brute_force_allocations(spec, ATT) * int(np.prod(members)) * 2 > len(drafts)
    rng = np.random.default_rng(0)
    for i in rng.choice(len(drafts), 20, replace=False):
        d = drafts[i]
        sch = space.schedule_of(spec, ATT, d)  # the same sampling instructions, fixed decisions
        assert space.draft_of(sch) == d
        kinds = [inst.kind.name for inst in sch.trace.insts]
        assert "SampleCategorical" in kinds and "Split" in kinds and "Annotate" in kinds
    # randomly sampled schedules decode to drafts of the enumerated space
    fn = space.schedule_fn(ATT)
    seen = {space.rule1_key(spec, d) for d in drafts}
    for seed in range(15):
        sch = tvm.s_tir.Schedule(spec.ir_module(), seed=seed + 1)
        d = space.draft_of(fn(sch))
        assert space.rule1_key(spec, d) in seen


def test_rule1_removes_equivalent_mappings():
    spec = KernelSpec.make("gemv", b=1, m=1, n=512, k=128)
    full = space.all_drafts(spec, HBM)
    kept, st = space.prune(spec, HBM, full, rules=(1,))
    # what is left: one draft per allocation, distinct mapping function and index range
    distinct = [len({m.expr for m in s.members}) or 1 for s in space.dimension_sets(spec)]
    assert len(kept) == _brute_force_allocations(spec, HBM) * int(np.prod(distinct)) * 2 < len(full)
    assert st.after_rule1 == len(kept)
    # every removed draft generates exactly the same stream as a kept one
    keys = {space.rule1_key(spec, d) for d in kept}
    assert {space.rule1_key(spec, d) for d in full} == keys
    a = space.Draft((space.Part("b", 1, 1, 0), space.Part("m", 1, 1, 0), space.Part("n", 4, 2, 0), space.Part("k", 1, 1, 0)))
    b = space.Draft((space.Part("b", 1, 1, 2), space.Part("m", 1, 1, 1), space.Part("n", 4, 2, 1), space.Part("k", 1, 1, 1)))
    assert space.rule1_key(spec, a) == space.rule1_key(spec, b)
    assert evaluate(spec, HBM, a)[1] == evaluate(spec, HBM, b)[1]


def test_rule1_keeps_distinct_mapping_functions():
    """On a convolution the set {n, r} has members x[n + r], w[r], y[n]: rule 1 keeps all three mappings
    of it and merges the three identical ones of the batch set."""
    B, N, R = 4, 256, 8
    x = te.placeholder((B, N + R - 1), "float16", name="x")
    w = te.placeholder((B, R), "float16", name="w")
    r = te.reduce_axis((0, R), "r")
    y = te.compute((B, N), lambda b, n: te.sum(x[b, n + r] * w[b, r], axis=r), name="y")
    res = space.rule1_on_func(te.create_prim_func([x, w, y]), "y", HBM)
    assert sorted(res["sets"]) == ["b", "nr"]
    assert {m.split("=")[1] for m in res["sets"]["nr"]} == {"n + r", "r", "n"}
    assert res["total"] == 3 * res["after_rule1"]  # 3 x 3 mappings per allocation -> 1 x 3
    gemv = KernelSpec.make("gemv", b=B, m=1, n=N, k=R)
    g = space.rule1_on_func(gemv.prim_func(), gemv.block_name, HBM)
    assert g["after_rule1"] == space.enumerate_drafts(gemv, HBM, pruned=False)[1].after_rule1
    assert g["total"] == space.space_size(gemv, HBM)


def test_rule_shrinkage_alone():
    spec = KernelSpec.make("red", b=1, n=1024, k=1024)
    sh = space.rule_shrinkage(spec, HBM)
    base = space.all_drafts(spec, HBM, distinct_mappings=True)
    assert sh["rule1"] == len(base)
    assert sh["rule2_alone"] == sum(space.rule2_ok(spec, HBM, d) for d in base)
    assert sh["rule3_alone"] == len({space.rule3_key(spec, d) for d in base})
    assert sh["rules23"] <= min(sh["rule2_alone"], sh["rule3_alone"])


def test_rule2_keeps_lane_aligned_drafts_or_skips():
    spec = KernelSpec.make("va", b=1, i=4096)
    drafts, st = space.prune(spec, HBM, space.all_drafts(spec, HBM, distinct_mappings=True), rules=(2,))
    assert not st.rule2_skipped
    assert all(space.per_core_length(spec, d)["i"] % 16 == 0 for d in drafts)
    # an extent that no split can align: the rule is skipped, nothing is lost
    odd = KernelSpec.make("va", b=1, i=17)
    all_odd = space.all_drafts(odd, HBM, distinct_mappings=True)
    kept, st2 = space.prune(odd, HBM, all_odd, rules=(2,))
    assert st2.rule2_skipped and len(kept) == len(all_odd)


def test_rule3_keeps_one_draft_per_worst_core_work():
    spec = KernelSpec.make("red", b=1, n=1024, k=1024)
    base = space.all_drafts(spec, HBM, distinct_mappings=True)
    kept, st = space.prune(spec, HBM, base, rules=(3,))
    keys = [space.rule3_key(spec, d) for d in kept]
    assert len(keys) == len(set(keys)) == st.after_rule3 < len(base)
    # the survivor of each class uses the most groups
    for d in base:
        k = space.rule3_key(spec, d)
        survivor = kept[keys.index(k)]
        assert survivor.groups_used >= d.groups_used


def test_pruning_shrinks_a_lot_and_keeps_good_drafts():
    spec = KernelSpec.make("gemv", b=1, m=1, n=2048, k=128)
    full, st_full = space.enumerate_drafts(spec, HBM, pruned=False)
    pruned, st = space.enumerate_drafts(spec, HBM, pruned=True)
    assert st.total == st_full.total
    assert st.after_rule3 < st.after_rule2 < st.after_rule1 < st.total
    assert st.after_rule3 / st.total < 0.05
    best_all = best_by_simulation(spec, HBM, full)[2]
    best_pruned = best_by_simulation(spec, HBM, pruned)[2]
    assert best_pruned <= 1.25 * best_all  # the rules are speculative, but not far off here


def test_default_tiling_follows_attacc():
    spec = KernelSpec.make("gemv", b=32, m=1, n=1024, k=128)
    d = space.default_draft(spec, ATT)
    assert d.part("b").groups == 32 and d.part("n").cores == 16 and d.part("k").cores == 4
    d2 = space.default_draft(spec, HBM)
    assert d2.part("n").cores == HBM.bank_groups and d2.part("k").cores == HBM.cores_per_bank_group
    # a shared-weight GEMV: the adjusted default spreads the idle channels over n, the literal one does not
    fc = KernelSpec.make("gemv", b=1, m=1, n=4096, k=4096)
    assert space.default_draft(fc, ATT).groups_used == ATT.groups
    lit = space.default_draft(fc, ATT, literal=True)
    assert lit.groups_used == 1 and lit.part("n").cores == space.default_draft(fc, ATT).part("n").cores


def test_predictor_learns_and_ranks_well():
    wl = [KernelSpec.make("gemv", b=b, m=1, n=n, k=128) for b in (1, 4) for n in (256, 1024)]
    samples = predictor.generate_samples(wl, HBM, drafts_per_workload=60, seed=0, progress=False)
    model = predictor.Predictor(n_estimators=120, seed=0).fit(samples, progress=False)
    test = KernelSpec.make("gemv", b=2, m=1, n=512, k=128)  # a size not seen in training
    drafts, _ = space.enumerate_drafts(test, HBM)
    sim = np.array([evaluate(test, HBM, d)[1] for d in drafts])
    pred = model.predict_ns(test, drafts, HBM)
    # rank correlation between predicted and simulated times is strong
    r_sim = np.argsort(np.argsort(sim))
    r_pred = np.argsort(np.argsort(pred))
    rho = np.corrcoef(r_sim, r_pred)[0, 1]
    assert rho > 0.7
    chosen = sim[drafts.index(model.best(test, HBM, drafts))]
    assert chosen <= 1.5 * sim.min()
    # lookup table: offline fill, then dynamic prediction of a new size
    table = predictor.LookupTable(HBM.name)
    table.fill(model, HBM, wl[:1])
    d, hit = table.lookup_or_predict(model, HBM, wl[0])
    assert hit
    d2, hit2 = table.lookup_or_predict(model, HBM, test)
    assert not hit2 and table.get(test) == d2
    assert predictor.LookupTable.from_json(table.to_json()).entries == table.entries


def test_ranking_predictor_with_active_sampling(tmp_path):
    """Per-workload ranking (qid groups) plus active sampling: picks near the optimum of an unseen size,
    adds only drafts of the training workloads, and survives save / load; it predicts no times."""
    wl = [KernelSpec.make("gemv", b=b, m=1, n=n, k=128) for b in (1, 4) for n in (256, 1024)]
    first = predictor.generate_samples(wl, HBM, drafts_per_workload=30, seed=0, progress=False)
    model, samples = predictor.active_samples(
        lambda: predictor.Predictor(n_estimators=80, seed=0, objective="rank:pairwise"), first, wl, HBM,
        rounds=2, per_round=6, progress=False)
    assert len(samples) > len(first) and {s.spec for s in samples} == set(wl)
    assert len({(s.spec, s.draft) for s in samples}) == len(samples)  # nothing simulated twice
    test = KernelSpec.make("gemv", b=2, m=1, n=512, k=128)  # a size not seen in training
    assert test not in wl
    drafts, _ = space.enumerate_drafts(test, HBM)
    sim = np.array([evaluate(test, HBM, d)[1] for d in drafts])
    cost = model.cost(test, drafts, HBM)
    rho = np.corrcoef(np.argsort(np.argsort(sim)), np.argsort(np.argsort(cost)))[0, 1]
    assert rho > 0.7
    assert sim[drafts.index(model.best(test, HBM, drafts))] <= 1.1 * sim.min()
    with pytest.raises(RuntimeError, match="predicts no times"):
        model.predict_ns(test, drafts, HBM)
    model.save(tmp_path / "p.ubj")
    again = predictor.Predictor.load(tmp_path / "p.ubj")
    assert again.ranking and np.array_equal(again.cost(test, drafts, HBM), cost)
    with pytest.raises(ValueError, match="unknown objective"):
        predictor.Predictor(objective="rank:map")


@pytest.mark.usefixtures("metaschedule_ready")
def test_short_tuning_improves_on_first_candidate(tmp_path, monkeypatch):
    monkeypatch.setenv("TVM_PIM_CACHE", str(tmp_path))
    spec = KernelSpec.make("gemv", b=1, m=1, n=1024, k=4096)
    res = tuning.tune(spec, HBM, trials=32, per_iter=16, seed=0, save=True)
    assert res.trials >= 16
    assert res.best_ns < res.first_ns
    assert res.best_ns == pytest.approx(min(res.history_ns))
    # the record is saved as a meta-schedule database and read back
    d = tmp_path / "hbm-pim"
    assert (d / "database_workload.json").exists() and (d / "database_tuning_record.json").exists()
    got = database.lookup(spec, HBM)
    assert got is not None and evaluate(spec, HBM, got)[1] == pytest.approx(res.best_ns)
    line = (d / "database_tuning_record.json").read_text().splitlines()[0]
    json.loads(line)

"""Coupled-predictor accuracy (DCC, paper 002 Table II) and its three uses.

For each device and kernel, workloads of seeded random batch/tensor sizes are
generated.  The XGBoost predictor is trained *offline* on a sample of drafts
of the training workloads, labelled with simulated times: by default a
learning-to-rank objective with one query group per workload
(``--objective rank:pairwise``; ``regression`` is the paper's log-latency
regressor), and after a first fit, ``--rounds`` rounds of active sampling
that simulate the ``--per-round`` drafts each training workload's model
ranks best but were not simulated yet (where the model is unsure which is
best).  Then, for every test workload, all drafts of the candidate set are
simulated (ground truth) and compared with the predictor's choice:

* ``#best`` / top-1: the predictor picks a draft as fast as the true optimum
  (within a relative 1e-9: when several drafts tie at the optimum -- e.g.
  ``exact`` and ``expand`` index ranges of evenly divided sizes -- any of
  them is a hit);
* top-1 within 1%: the chosen draft is at most 1% slower than the optimum;
* ``suboptimal performance``: geometric mean of best / chosen time when not
  (the paper's "share of optimum", 96.25%); also over every workload.

Test workloads never appear in training (checked), and every random choice
takes ``--seed``.  ``--gt-cache FILE`` keeps the exhaustive simulations
(ground truth) in a JSON file, written after every workload, so that a run
killed or repeated with other model settings does not simulate them again.

Two test sets: the training sizes (the offline lookup table) and sizes never
seen in training (on-the-fly prediction).  The candidate set is the pruned
space; ``--unpruned`` uses every distinct draft (rule 1 only), as in the
paper's "pruning disabled", which is far slower.  Also reported: offline
training time (sampling + simulation + XGBoost; paper: 42 s), how far the
predictor is from the simulator (MAPE, rank correlation, speed), and a short
meta-schedule run with the predictor as cost model against a random one.

Usage::

    python benchmarks/pim_predictor.py [--workloads 24] [--json out.json] [--plots out/pim_predictor]
                                       [--objective rank:pairwise] [--rounds 3] [--per-round 8]
                                       [--gt-cache gt.json] [--save-models] [--unpruned]
                                       [--devices hbm-pim,attacc]   # one device per run: runs can go in parallel
    python benchmarks/pim_predictor.py --quick   # GEMV only, small sizes, a short demo (a test runs it)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tqdm import tqdm  # noqa: E402

import tvm_pim  # noqa: E402
from tvm_cim.common.report import finish_benchmark  # noqa: E402
from tvm_pim.compiler.kernels import KernelSpec  # noqa: E402
from tvm_pim.compiler.space import Draft, InfeasibleDraft, enumerate_drafts  # noqa: E402
from tvm_pim.cost import predictor as P  # noqa: E402
from tvm_pim.cost.measure import evaluate  # noqa: E402
from tvm_pim.hardware.view import PimView  # noqa: E402
from tvm_pim.search import database  # noqa: E402
from tvm_pim.search.metaschedule import PimCostModel  # noqa: E402
from tvm_pim.search.tuning import tune  # noqa: E402

KERNELS = {"hbm-pim": ["gemv", "red", "va", "relu"], "attacc": ["attn", "gemv", "red"]}
SIZES = [256, 384, 512, 768, 1000, 1024, 1536, 2048, 3000, 4096]
# --quick: GEMV only, small sizes, few trees, a 16-trial tuning demo
QUICK = {"kernels": {"hbm-pim": ["gemv"], "attacc": ["gemv"]}, "sizes": [256, 512], "ks": [256, 512], "batches": [1, 2],
         "trees": 60, "trials": 16}


def random_workloads(kind: str, n: int, rng: np.random.Generator, sizes=SIZES, ks=(1024, 2048, 4096),
                     batches=(1, 2, 4, 8, 16)) -> list[KernelSpec]:
    """Seeded workloads of a kernel: batch x heads, token / tensor sizes like LLM layers."""
    seen, out = set(), []
    tries = 0
    while len(out) < n and tries < 100 * n:
        tries += 1
        bt = int(rng.choice(batches))
        s = int(rng.choice(sizes))
        if kind == "gemv":
            if rng.random() < 0.7:
                spec = KernelSpec.make("gemv", b=bt * int(rng.choice([8, 32])), m=1, n=s, k=128)
            else:
                spec = KernelSpec.make("gemv", b=1, m=bt, n=s * 4, k=int(rng.choice(ks)))
        elif kind == "attn":
            spec = KernelSpec.make("attn", b=bt * int(rng.choice([8, 32])), n=s, k=128)
        elif kind == "red":
            spec = KernelSpec.make("red", b=bt, n=s, k=s, resident=("A",))
        elif kind == "va":
            spec = KernelSpec.make("va", b=bt, i=s * s // 4, resident=("A", "B"))
        else:
            spec = KernelSpec.make("relu", b=bt, i=s * s // 4, resident=("A",))
        if spec not in seen:
            seen.add(spec)
            out.append(spec)
    return out


class GroundTruth:
    """Exhaustive simulation of a workload's candidate drafts, kept in an optional JSON file."""

    def __init__(self, path: str | None):
        self.path = Path(path) if path else None
        self.data = json.loads(self.path.read_text()) if self.path and self.path.exists() else {}

    def __call__(self, spec, view, unpruned: bool):
        key = f"{view.name}|{view.digest}|{'all' if unpruned else 'pruned'}|{spec.to_json()}"
        hit = self.data.get(key)
        if hit is not None:
            return [Draft.from_json(d) for d, _ in hit], np.asarray([t for _, t in hit], float)
        drafts, _ = enumerate_drafts(spec, view, pruned=not unpruned)
        ok, times = [], []
        for d in drafts:
            try:
                times.append(evaluate(spec, view, d)[1])
                ok.append(d)
            except InfeasibleDraft:
                continue
        if self.path:
            self.data[key] = [[d.to_json(), t] for d, t in zip(ok, times)]
            self.path.write_text(json.dumps(self.data))
        return ok, np.asarray(times)


def evaluate_selection(model, spec, view, drafts, times):
    t0 = time.perf_counter()
    cost = model.cost(spec, drafts, view)
    pred_s = time.perf_counter() - t0
    pred = cost if model.ranking else model.predict_ns(spec, drafts, view)
    i = int(np.argmin(cost))
    best = float(times.min())
    chosen = float(times[i])
    correct = chosen <= best * (1 + 1e-9)
    r_sim = np.argsort(np.argsort(times))
    r_pred = np.argsort(np.argsort(cost))
    rho = float(np.corrcoef(r_sim, r_pred)[0, 1]) if len(times) > 2 else 1.0
    ape = np.abs(pred - times) / times if not model.ranking else np.full(len(times), np.nan)
    return {
        "workload": spec.name,
        "drafts": len(drafts),
        "best_ns": best,
        "chosen_ns": chosen,
        "correct": bool(correct),
        "within_1pct": bool(chosen <= best * 1.01),
        "share_of_optimal": best / chosen,
        "rank_correlation": rho,
        "mape": float(ape.mean()),
        "predict_us_per_draft": 1e6 * pred_s / len(drafts),
        "pred": pred.tolist(),
        "sim": times.tolist(),
    }


def run_device(dev: str, n_workloads: int, drafts_per_workload: int, seed: int, unpruned: bool, save: bool,
               kernels=KERNELS, sizes=SIZES, ks=(1024, 2048, 4096), batches=(1, 2, 4, 8, 16), trees: int = 400,
               objective: str = "rank:pairwise", rounds: int = 3, per_round: int = 8, gt: GroundTruth | None = None):
    view = PimView(tvm_pim.load(dev))
    gt = gt or GroundTruth(None)
    rng = np.random.default_rng(seed)
    train, test = {}, {}
    for k in kernels[dev]:
        ws = random_workloads(k, 2 * n_workloads, rng, sizes, ks, batches)
        train[k], test[k] = ws[:n_workloads], ws[n_workloads:]
        assert not set(train[k]) & set(test[k]), "a test workload leaked into training"
    train_ws = [w for k in train for w in train[k]]
    # ---------------------------------------------------------------- offline training
    t0 = time.perf_counter()
    samples = P.generate_samples(train_ws, view, drafts_per_workload, seed=seed)
    first = len(samples)
    t1 = time.perf_counter()
    model, samples = P.active_samples(lambda: P.Predictor(n_estimators=trees, seed=seed, objective=objective),
                                      samples, train_ws, view, rounds=rounds, per_round=per_round)
    t2 = time.perf_counter()
    table = P.LookupTable(view.name)
    table.fill(model, view, [w for k in train for w in train[k]])
    t3 = time.perf_counter()
    offline = {"simulate_samples_s": t1 - t0, "train_and_active_sampling_s": t2 - t1, "lookup_table_s": t3 - t2,
               "total_s": t3 - t0, "samples": len(samples), "samples_random": first,
               "samples_active": len(samples) - first}
    if save:
        model.meta.update({"device": view.name, "workloads": sum(len(v) for v in train.values()),
                           "drafts_per_workload": drafts_per_workload, "seed": seed})
        model.save(database.predictor_path(view.name))
    # ---------------------------------------------------------------- accuracy
    results = {}
    sim_s = [(t1 - t0) / max(1, first)]  # per simulated draft (the random sample's simulations)
    for k in kernels[dev]:
        for split, ws in (("seen", train[k]), ("unseen", test[k])):
            rows = []
            for w in tqdm(ws, desc=f"{dev} {k} ({split} sizes): exhaustive simulation", unit="workload"):
                drafts, times = gt(w, view, unpruned)
                if not drafts:
                    continue
                rows.append(evaluate_selection(model, w, view, drafts, times))
            results[f"{k}/{split}"] = rows
    return view, model, offline, results, float(np.mean(sim_s)), table


def summarise(results):
    out = {}
    for key, rows in results.items():
        wrong = [r for r in rows if not r["correct"]]
        out[key] = {
            "total": len(rows),
            "best": len(rows) - len(wrong),
            "accuracy": (len(rows) - len(wrong)) / len(rows) if rows else 0.0,
            "within_1pct": sum(r["within_1pct"] for r in rows) / len(rows) if rows else 0.0,
            "suboptimal_cases": len(wrong),
            "suboptimal_performance_geomean": float(np.exp(np.mean(np.log([r["share_of_optimal"] for r in wrong])))) if wrong else 1.0,
            "share_of_optimal_geomean_all": float(np.exp(np.mean(np.log([r["share_of_optimal"] for r in rows])))) if rows else 1.0,
            "mape": float(np.mean([r["mape"] for r in rows])) if rows else 0.0,
            "rank_correlation": float(np.mean([r["rank_correlation"] for r in rows])) if rows else 0.0,
        }
    return out


def cost_model_demo(view, model, seed: int, trials: int = 32, quick: bool = False):
    """A short meta-schedule run with the predictor as cost model vs with a random cost model."""
    if quick:
        specs = [KernelSpec.make("gemv", b=1, m=1, n=1024, k=1024)]
    else:
        specs = {"hbm-pim": [KernelSpec.make("gemv", b=1, m=4, n=8192, k=4096)],
                 "attacc": [KernelSpec.make("gemv", b=1, m=4, n=8192, k=4096),
                            KernelSpec.make("attn", b=128, n=2048, k=128)]}[view.name]
    rows = []
    for spec in specs:
        r_pred = tune(spec, view, trials=trials, per_iter=16, seed=seed, cost_model=PimCostModel(view, model, seed=seed))
        r_rand = tune(spec, view, trials=trials, per_iter=16, seed=seed, cost_model=PimCostModel(view, None, seed=seed))
        rows.append({"kernel": spec.name, "trials": trials, "best_ns_with_predictor": r_pred.best_ns,
                     "best_ns_with_random_model": r_rand.best_ns, "first_ns_with_predictor": r_pred.first_ns})
    return rows


def plot(all_results, outdir: Path, kernels=KERNELS, ranking: bool = False):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    outdir.mkdir(parents=True, exist_ok=True)
    files = []
    for dev, res in all_results.items():
        fig, axes = plt.subplots(1, len(kernels[dev]), figsize=(4 * len(kernels[dev]), 3.6))
        for ax, k in zip(np.atleast_1d(axes), kernels[dev]):
            rows = res[f"{k}/unseen"]
            if ranking:  # a ranker predicts no times: each draft's predicted rank against its simulated rank
                sim = np.concatenate([np.argsort(np.argsort(r["sim"])) / max(1, len(r["sim"]) - 1) for r in rows])
                pred = np.concatenate([np.argsort(np.argsort(r["pred"])) / max(1, len(r["pred"]) - 1) for r in rows])
                ax.plot(sim, pred, ".", ms=2, alpha=0.4)
                ax.plot([0, 1], [0, 1], "k-", lw=0.8)
                ax.set_xlabel("simulated rank (0 = fastest)")
                ax.set_ylabel("predicted rank")
            else:
                sim = np.concatenate([r["sim"] for r in rows]) / 1e3
                pred = np.concatenate([r["pred"] for r in rows]) / 1e3
                ax.loglog(sim, pred, ".", ms=2, alpha=0.4)
                lo, hi = min(sim.min(), pred.min()), max(sim.max(), pred.max())
                ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
                ax.set_xlabel("simulated (us)")
                ax.set_ylabel("predicted (us)")
            ax.set_title(f"{dev} {k.upper()} (unseen sizes)")
        fig.tight_layout()
        f = outdir / f"predicted_vs_simulated_{dev}.png"
        fig.savefig(f, dpi=120)
        plt.close(fig)
        files.append(str(f))
    return files


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", type=int, default=24, help="training (and as many test) workloads per kernel")
    p.add_argument("--drafts", type=int, default=40, help="sampled drafts per training workload")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--unpruned", action="store_true", help="ground truth over every distinct draft (slow)")
    p.add_argument("--save-models", action="store_true",
                   help="save the predictors where the 'predictor' strategy finds them (~/.cache/tvm_pim or $TVM_PIM_CACHE)")
    p.add_argument("--no-tuning-demo", action="store_true")
    p.add_argument("--objective", default="rank:pairwise", choices=P.OBJECTIVES,
                   help="XGBoost objective: per-workload ranking (default) or the paper's log-latency regression")
    p.add_argument("--rounds", type=int, default=3, help="rounds of active sampling after the first fit")
    p.add_argument("--per-round", type=int, default=8, help="drafts added per training workload and round")
    p.add_argument("--gt-cache", help="JSON file keeping the exhaustive simulations (ground truth) between runs")
    p.add_argument("--quick", action="store_true", help="GEMV only, 2 small workloads, 10 drafts, a 16-trial demo")
    p.add_argument("--devices", default="hbm-pim,attacc",
                   help="comma-separated devices (separate runs can go in parallel; the table sums what it gets)")
    p.add_argument("--json", help="write all results here")
    p.add_argument("--plots", default="out/pim_predictor")
    args = p.parse_args(argv)
    if args.quick:
        args.workloads, args.drafts = 2, 10
    if args.workloads <= 0 or args.drafts <= 0 or args.rounds < 0 or args.per_round <= 0:
        print("error: --workloads, --drafts and --per-round must be positive, --rounds not negative", file=sys.stderr)
        return 2
    gt = GroundTruth(args.gt_cache)
    if args.quick:
        kernels, sizes, ks, batches = QUICK["kernels"], QUICK["sizes"], QUICK["ks"], QUICK["batches"]
    else:
        kernels, sizes, ks, batches = KERNELS, SIZES, (1024, 2048, 4096), (1, 2, 4, 8, 16)
    t0 = time.perf_counter()
    out = {"settings": vars(args), "devices": {}}
    all_results = {}
    devices = [d for d in args.devices.split(",") if d]
    unknown = [d for d in devices if d not in KERNELS]
    if unknown or not devices:
        print(f"error: --devices takes some of {', '.join(KERNELS)}; got {args.devices!r}", file=sys.stderr)
        return 2
    for dev in devices:
        view, model, offline, results, sim_s, table = run_device(
            dev, args.workloads, args.drafts, args.seed, args.unpruned, args.save_models, kernels, sizes, ks, batches,
            QUICK["trees"] if args.quick else 400, args.objective, args.rounds, args.per_round, gt,
        )
        summ = summarise(results)
        all_results[dev] = results
        d = {"offline": offline, "summary": summ, "simulation_ms_per_draft": 1e3 * sim_s,
             "lookup_table_entries": len(table.entries)}
        if not args.no_tuning_demo:
            d["cost_model_demo"] = cost_model_demo(view, model, args.seed, QUICK["trials"] if args.quick else 32,
                                                   args.quick)
        d["rows"] = {k: [{kk: vv for kk, vv in r.items() if kk not in ("pred", "sim")} for r in v] for k, v in results.items()}
        out["devices"][dev] = d
    # ---------------------------------------------------------------- print
    print("\n== Table II: predictor top-1 against exhaustive simulation "
          f"({'every distinct draft' if args.unpruned else 'pruned space'}; objective {args.objective}, "
          f"{args.rounds} rounds x {args.per_round} active drafts, seed {args.seed}) ==")
    print(f"{'backend+kernel':22s} {'sizes':7s} {'total':>6s} {'#best':>6s} {'top-1':>7s} {'<=1%':>7s} "
          f"{'suboptimal perf':>22s} {'share all':>9s} {'MAPE':>7s} {'rank rho':>8s}")
    tot = {"seen": [0, 0, 0, [], []], "unseen": [0, 0, 0, [], []]}
    for dev, d in out["devices"].items():
        for key, s in d["summary"].items():
            k, split = key.split("/")
            print(f"{dev + '+' + k.upper():22s} {split:7s} {s['total']:6d} {s['best']:6d} {100 * s['accuracy']:6.2f}% "
                  f"{100 * s['within_1pct']:6.2f}% {100 * s['suboptimal_performance_geomean']:9.2f}% "
                  f"({s['suboptimal_cases']:3d} cases) {100 * s['share_of_optimal_geomean_all']:8.2f}% "
                  f"{100 * s['mape']:6.1f}% {s['rank_correlation']:8.3f}")
            rows = d["rows"][key]
            t = tot[split]
            t[0] += s["total"]
            t[1] += s["best"]
            t[2] += sum(r["within_1pct"] for r in rows)
            t[3] += [r["share_of_optimal"] for r in rows if not r["correct"]]
            t[4] += [r["share_of_optimal"] for r in rows]
    for split, (n, b, w1, wrong, every) in tot.items():
        g = float(np.exp(np.mean(np.log(wrong)))) if wrong else 1.0
        ga = float(np.exp(np.mean(np.log(every)))) if every else 1.0
        out[f"overall_{split}"] = {"total": n, "best": b, "accuracy": b / n if n else 0, "within_1pct": w1 / n if n else 0,
                                   "suboptimal_performance_geomean": g, "share_of_optimal_geomean_all": ga}
        print(f"{'ALL':22s} {split:7s} {n:6d} {b:6d} {100 * b / max(n, 1):6.2f}% {100 * w1 / max(n, 1):6.2f}% "
              f"{100 * g:9.2f}% {'':11s} {100 * ga:8.2f}%  (paper: top-1 89.28%, suboptimal perf 96.25%)")
    print("\n== Offline training (paper: 42 s for all kernels, sizes and backends) ==")
    total = 0.0
    for dev, d in out["devices"].items():
        o = d["offline"]
        total += o["total_s"]
        print(f"{dev:8s} {o['samples_random']} random + {o['samples_active']} active drafts; random ones simulated in "
              f"{o['simulate_samples_s']:.1f}s, XGBoost and active sampling {o['train_and_active_sampling_s']:.1f}s, "
              f"lookup table {o['lookup_table_s']:.1f}s ({d['lookup_table_entries']} entries) -> {o['total_s']:.1f}s")
    print(f"both     {total:.1f}s")
    print("\n== Predictor vs simulator (the two cost models) ==")
    for dev, d in out["devices"].items():
        per = np.mean([r["predict_us_per_draft"] for rows in d["rows"].values() for r in rows])
        print(f"{dev:8s} simulation {d['simulation_ms_per_draft']:.2f} ms/draft, prediction {per:.1f} us/draft; "
              f"MAPE {100 * np.mean([s['mape'] for s in d['summary'].values()]):.1f}%, "
              f"rank correlation {np.mean([s['rank_correlation'] for s in d['summary'].values()]):.3f}")
    if not args.no_tuning_demo:
        print(f"\n== Meta-schedule with the predictor as cost model ({QUICK['trials'] if args.quick else 32} trials) ==")
        for dev, d in out["devices"].items():
            for r in d["cost_model_demo"]:
                print(f"{dev:8s} {r['kernel']:28s} best {r['best_ns_with_predictor'] / 1e3:8.2f} us with the predictor, "
                      f"{r['best_ns_with_random_model'] / 1e3:8.2f} us with a random cost model")
    return finish_benchmark(out, plot(all_results, Path(args.plots), kernels, args.objective != "regression"), args.json, t0)


if __name__ == "__main__":
    sys.exit(main())

"""DCC's coupled predictor: XGBoost on tiling-draft features, simulator labels.

Paper 002 sec. IV-D: one learned model estimates a draft's *end-to-end*
time (data rearrangement and compute together), trained on drafts sampled
across tensor sizes and labelled with measured times -- here the simulator's
timing of each draft's command stream (:func:`tvm_pim.cost.measure.evaluate`).
It serves three uses:

* **cost model** of meta-schedule (:class:`tvm_pim.search.metaschedule.PimCostModel`);
* **offline lookup table** (:class:`LookupTable`): for given workloads the
  best predicted draft is recorded once and reused;
* **dynamic prediction**: for a size never seen, every draft of the pruned
  space is ranked and the best is added to the table
  (:meth:`Predictor.best`, used by the ``predictor`` schedule strategy).

The features are :func:`tvm_pim.cost.features.features`.  Two objectives:

* ``regression`` (the paper's): labels are ``log(latency_ns)`` less the
  host's launch overhead; :meth:`Predictor.predict_ns` estimates times;
* ``rank:pairwise`` / ``rank:ndcg``: XGBoost learning-to-rank with one query
  group per workload, so the trees learn only the *order* of a workload's
  drafts -- what picking the best draft needs -- and not the absolute scale
  across workloads.  Such a model ranks drafts (:meth:`Predictor.rank`) but
  predicts no times.

:func:`active_samples` adds drafts where the model is unsure which is best:
after a first fit, the drafts each training workload's model ranks highest
that were not simulated yet are simulated and added, for a few rounds.
Where a device's trained model is kept is :mod:`tvm_pim.search.database`'s
business.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ..compiler.kernels import KernelSpec
from ..compiler.space import Draft, InfeasibleDraft, default_draft, enumerate_drafts
from ..hardware.view import PimView
from .features import FEATURE_VERSION, features, prior_log_ns
from .measure import evaluate


def _xgboost():
    """The ``xgboost`` module, imported on first use.

    Deliberately not a module-level import: loading xgboost's native library
    adds about a quarter of a second to ``import tvm_pim`` (a fifth of
    ``import tvm``), and a build only needs it when a trained predictor is
    used or trained.
    """
    import xgboost  # lazy on purpose, see above

    return xgboost


def launch_ns(view: PimView) -> float:
    """The host's kernel-launch overhead (ns): a known constant of every draft's time."""
    return view.hw.system.host.launch_overhead_us * 1e3


@dataclass
class Sample:
    """One training example: a kernel's draft, its simulated latency and its features."""

    spec: KernelSpec
    draft: Draft
    latency_ns: float
    x: np.ndarray
    launch_ns: float = 0.0


def sample_drafts(spec: KernelSpec, view: PimView, n: int, rng: np.random.Generator, pruned: bool = True) -> list[Draft]:
    """A seeded sample of a kernel's drafts (always including the backend default)."""
    drafts, _ = enumerate_drafts(spec, view, pruned=pruned)
    k = min(n, len(drafts))
    pick = [drafts[i] for i in rng.choice(len(drafts), k, replace=False)]
    d0 = default_draft(spec, view)
    if d0 not in pick:
        pick.append(d0)
    return pick


def generate_samples(workloads: list[KernelSpec], view: PimView, drafts_per_workload: int, seed: int = 0,
                     progress: bool = True, pruned: bool = True) -> list[Sample]:
    """Simulate sampled drafts of each workload (training data), with a progress bar."""
    rng = np.random.default_rng(seed)
    out: list[Sample] = []
    jobs = [(w, d) for w in workloads for d in sample_drafts(w, view, drafts_per_workload, rng, pruned)]
    for w, d in tqdm(jobs, desc=f"simulating drafts ({view.name})", disable=not progress, unit="draft"):
        try:
            _, ns = evaluate(w, view, d)
        except InfeasibleDraft:
            continue
        out.append(Sample(w, d, ns, features(w, d, view), launch_ns(view)))
    return out


OBJECTIVES = ("regression", "rank:pairwise", "rank:ndcg")


def _labels(samples: list[Sample]) -> np.ndarray:
    """``log(latency_ns)`` less the launch overhead (a known constant of every draft)."""
    return np.log(np.maximum(np.array([s.latency_ns - s.launch_ns for s in samples]), 1e-3))


def _relevance(samples: list[Sample], groups: list[list[int]], objective: str) -> np.ndarray:
    """Relevance of each draft within its workload (higher = faster).

    ``rank:pairwise``: minus the log latency (only the order within a group matters).
    ``rank:ndcg``: integer grades, 0 for the slowest, one more per ~1% faster (``log2`` steps of
    1/70), the gain linear rather than exponential (``ndcg_exp_gain`` off).
    """
    y = _labels(samples)
    if objective == "rank:pairwise":
        return (-y).astype(np.float32)
    rel = np.zeros(len(samples), dtype=np.float32)
    for idx in groups:
        rel[idx] = np.floor((y[idx].max() - y[idx]) / np.log(2) * 70)
    return rel


class Predictor:
    """XGBoost model of draft features: a regressor of ``log(latency)`` or a per-workload ranker.

    Parameters
    ----------
    n_estimators, learning_rate, max_depth : xgboost settings
    seed : int
    objective : {'regression', 'rank:pairwise', 'rank:ndcg'}
        ``regression`` predicts times; the ranking objectives learn each workload's draft order
        (one query group per workload).
    """

    def __init__(self, n_estimators: int = 400, learning_rate: float = 0.08, max_depth: int = 8, seed: int = 0,
                 objective: str = "regression", prior_weight: float | None = None):
        if objective not in OBJECTIVES:
            raise ValueError(f"unknown objective {objective!r}; known: {', '.join(OBJECTIVES)}")
        if prior_weight is None:  # rankers start from the plan's estimate: one unit of score per 1% of time
            prior_weight = 1.0 / np.log(1.01) if objective != "regression" else 0.0
        self.params = dict(n_estimators=n_estimators, learning_rate=learning_rate, max_depth=max_depth, seed=seed,
                           objective=objective, prior_weight=float(prior_weight))
        self.model = None
        self.meta: dict = {}
        self.train_seconds = 0.0

    # ------------------------------------------------------------------ training
    @property
    def ranking(self) -> bool:
        """Whether the model ranks drafts (and predicts no times)."""
        return self.params.get("objective", "regression") != "regression"

    def fit(self, samples: list[Sample], progress: bool = True) -> "Predictor":
        """Train on simulated samples (labels ``log(latency_ns)``, or per-workload relevance when ranking)."""
        xgb = _xgboost()
        if not samples:
            raise ValueError("no training samples")
        objective = self.params.get("objective", "regression")
        extra: dict = {"objective": "reg:squarederror"}
        if self.ranking:
            # one query group per workload, its drafts contiguous
            by: dict = {}
            for i, s in enumerate(samples):
                by.setdefault(s.spec, []).append(i)
            order = [i for idx in by.values() for i in idx]
            samples = [samples[i] for i in order]
            groups, at = [], 0
            for idx in by.values():
                groups.append(list(range(at, at + len(idx))))
                at += len(idx)
            qid = np.concatenate([np.full(len(g), j) for j, g in enumerate(groups)])
            y = _relevance(samples, groups, objective)
            extra = {"objective": objective, "lambdarank_pair_method": "mean", "lambdarank_num_pair_per_sample": 16,
                     "ndcg_exp_gain": False}
        else:
            y = _labels(samples)
        X = np.stack([s.x for s in samples])
        t0 = time.perf_counter()
        bar = tqdm(total=self.params["n_estimators"], desc="training XGBoost", disable=not progress, unit="tree")

        class _Bar(xgb.callback.TrainingCallback):
            def after_iteration(self, model, epoch, evals_log):
                bar.update(1)
                return False

        dtrain = xgb.DMatrix(X, label=y, qid=qid) if self.ranking else xgb.DMatrix(X, label=y)
        margin = self._margin(X)
        if margin is not None:
            dtrain.set_base_margin(margin)
        self.model = xgb.train(
            {
                "eta": self.params["learning_rate"],
                "max_depth": self.params["max_depth"],
                **extra,
                "seed": self.params["seed"],
                "nthread": 1,  # deterministic, and robust on shared machines
            },
            dtrain,
            num_boost_round=self.params["n_estimators"],
            callbacks=[_Bar()],
        )
        bar.close()
        self.train_seconds = time.perf_counter() - t0
        self.meta.update({"samples": len(samples), "feature_version": FEATURE_VERSION, "train_seconds": self.train_seconds})
        return self

    def _margin(self, X: np.ndarray) -> np.ndarray | None:
        """A ranker's starting score: minus ``prior_weight`` x the plan's ``ln`` time estimate
        (:func:`tvm_pim.cost.features.prior_log_ns`), so the trees learn corrections to it; 0 for
        kernels without a plan, far below every other draft where the tile does not fit."""
        w = float(self.params.get("prior_weight", 0.0))
        if not self.ranking or w <= 0:
            return None
        p = prior_log_ns(X)
        return np.where(np.isnan(p), 0.0, np.where(np.isinf(p), -w * 100.0, -w * np.nan_to_num(p, posinf=0.0)))

    # ------------------------------------------------------------------ prediction
    def predict_ns(self, spec: KernelSpec, drafts: list[Draft], view: PimView) -> np.ndarray:
        """Predicted end-to-end latency (ns) of each draft of one kernel.

        Parameters
        ----------
        spec : KernelSpec
        drafts : list of Draft
        view : PimView

        Returns
        -------
        numpy.ndarray
            One latency per draft, launch overhead included.
        """
        if self.ranking:
            raise RuntimeError(f"a {self.params['objective']} model ranks drafts but predicts no times")
        return np.exp(self.cost(spec, drafts, view)) + launch_ns(view)

    def cost(self, spec: KernelSpec, drafts: list[Draft], view: PimView) -> np.ndarray:
        """A per-draft cost, lower = faster: the predicted ``log`` latency less launch (regression), or
        minus the ranking score.  Comparable between drafts of one kernel only."""
        xgb = _xgboost()
        if self.model is None:
            raise RuntimeError("the predictor is not trained")
        X = np.stack([features(spec, d, view) for d in drafts])
        dm = xgb.DMatrix(X)
        margin = self._margin(X)
        if margin is not None:
            dm.set_base_margin(margin)
        out = self.model.predict(dm)
        return -out if self.ranking else out

    def rank(self, spec: KernelSpec, view: PimView, drafts: list[Draft] | None = None) -> list[Draft]:
        """Drafts sorted by predicted cost (ties keep the enumeration order)."""
        if drafts is None:
            drafts, _ = enumerate_drafts(spec, view)
        pred = self.cost(spec, drafts, view)
        order = np.argsort(pred, kind="stable")
        return [drafts[i] for i in order]

    def best(self, spec: KernelSpec, view: PimView, drafts: list[Draft] | None = None) -> Draft:
        """The draft with the lowest predicted latency (of ``drafts``, else of the pruned space)."""
        return self.rank(spec, view, drafts)[0]

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | os.PathLike) -> None:
        """Write the model (XGBoost's format) and, beside it, ``<name>.meta.json``."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        self.model.save_model(str(p))
        p.with_suffix(".meta.json").write_text(json.dumps({**self.meta, "params": self.params}, indent=1))

    @staticmethod
    def load(path: str | os.PathLike) -> "Predictor":
        """Read a model written by :meth:`save`.

        Raises
        ------
        ValueError
            The model was trained on another feature encoding (:data:`FEATURE_VERSION`).
        """
        p = Path(path)
        pr = Predictor()
        meta_p = p.with_suffix(".meta.json")
        if meta_p.exists():
            pr.meta = json.loads(meta_p.read_text())
            pr.params.update(pr.meta.get("params", {}))
            if pr.meta.get("feature_version") != FEATURE_VERSION:
                raise ValueError(f"{p}: predictor features v{pr.meta.get('feature_version')}, this code uses v{FEATURE_VERSION}")
        pr.model = _xgboost().Booster()
        pr.model.load_model(str(p))
        return pr


def active_samples(model_factory, samples: list[Sample], workloads: list[KernelSpec], view: PimView,
                   rounds: int = 3, per_round: int = 8, progress: bool = True) -> tuple["Predictor", list[Sample]]:
    """Fit, then sample more drafts where the model is unsure, and refit (``rounds`` times).

    After each fit, every training workload's pruned drafts are ranked; the
    ``per_round`` best-ranked drafts that were not simulated yet -- where the
    model's choice rests on an unverified guess -- are simulated and added.

    Parameters
    ----------
    model_factory : callable
        Returns a fresh, untrained :class:`Predictor`.
    samples : list of Sample
        The first sample (e.g. :func:`generate_samples`), of ``workloads`` only.
    workloads : list of KernelSpec
    view : PimView
    rounds, per_round : int
    progress : bool

    Returns
    -------
    Predictor, list of Sample
        The last fitted model and every sample simulated.
    """
    samples = list(samples)
    done = {(s.spec, s.draft) for s in samples}
    model = model_factory().fit(samples, progress=progress)
    for r in range(rounds):
        added = 0
        for w in tqdm(workloads, desc=f"active sampling, round {r + 1}/{rounds}", disable=not progress, unit="workload"):
            drafts, _ = enumerate_drafts(w, view)
            picked = 0
            for d in model.rank(w, view, drafts):
                if picked >= per_round:
                    break
                if (w, d) in done:
                    continue
                done.add((w, d))
                picked += 1
                try:
                    _, ns = evaluate(w, view, d)
                except InfeasibleDraft:
                    continue
                samples.append(Sample(w, d, ns, features(w, d, view), launch_ns(view)))
                added += 1
        if not added:
            break
        model = model_factory().fit(samples, progress=progress)
    return model, samples


@dataclass
class LookupTable:
    """Best predicted draft per workload (DCC's offline table, extended on the fly)."""

    device: str
    entries: dict[str, str] = field(default_factory=dict)  # spec json -> draft json

    def get(self, spec: KernelSpec) -> Draft | None:
        """The recorded draft of a kernel, or None."""
        d = self.entries.get(spec.to_json())
        return Draft.from_json(d) if d else None

    def fill(self, predictor: Predictor, view: PimView, workloads: list[KernelSpec]) -> None:
        """Offline: predict and record the best draft of each workload."""
        for w in workloads:
            self.entries[w.to_json()] = predictor.best(w, view).to_json()

    def lookup_or_predict(self, predictor: Predictor, view: PimView, spec: KernelSpec) -> tuple[Draft, bool]:
        """Dynamic prediction: the recorded draft, or predict one now and record it."""
        d = self.get(spec)
        if d is not None:
            return d, True
        d = predictor.best(spec, view)
        self.entries[spec.to_json()] = d.to_json()
        return d, False

    def to_json(self) -> str:
        """The table as JSON."""
        return json.dumps({"device": self.device, "entries": self.entries}, indent=1)

    @staticmethod
    def from_json(text: str) -> "LookupTable":
        """Inverse of :meth:`to_json`."""
        d = json.loads(text)
        return LookupTable(d["device"], dict(d["entries"]))

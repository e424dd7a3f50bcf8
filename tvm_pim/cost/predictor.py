"""DCC's coupled predictor: XGBoost on tiling-draft features, simulator labels.

Paper 002 sec. IV-D: one learned model estimates a draft's *end-to-end*
time (data rearrangement and compute together), trained on drafts sampled
across tensor sizes and labelled with measured times -- here the simulator's
timing of each draft's command stream.  It serves three uses:

* **cost model** of meta-schedule (:class:`PimCostModel`, a ``PyCostModel``);
* **offline lookup table** (:class:`LookupTable`): for given workloads the
  best predicted draft is recorded once and reused;
* **dynamic prediction**: for a size never seen, every draft of the pruned
  space is ranked and the best is added to the table
  (:meth:`Predictor.best`, used by the ``predictor`` schedule strategy).

Features describe the kernel, the draft and the device (so one model can
serve several backends): sizes, per-dimension-set allocations and per-core
lengths, padding, units used, bytes the draft moves and which inputs can be
broadcast, plus the device's organisation, DRAM timing and bandwidths.
Labels are ``log(latency_ns)``.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .abstraction import ELEM_BYTES, PimView, ceil_div
from .kernels import KINDS, KernelSpec
from .space import Draft, InfeasibleDraft, default_draft, dimension_sets, enumerate_drafts

FEATURE_VERSION = 3
_DIMS = ("b", "m", "n", "k", "i")


def _l2(x: float) -> float:
    return math.log2(max(float(x), 1.0))


def _static_features(spec: KernelSpec, view: PimView) -> list[float]:
    """Kernel and device part of the features (the same for every draft)."""
    key = (spec, id(view.hw))
    hit = _STATIC.get(key)
    if hit is not None:
        return hit
    f: list[float] = [1.0 if spec.kind == k else 0.0 for k in KINDS]
    hw = view.hw
    t = hw.dram.timing
    f += [
        _l2(view.groups), _l2(view.cores_per_group), _l2(view.lanes), float(t.tccd_l), float(t.trcd + t.trp),
        t.tck_ns, _l2(view.channel_bw_gbs), _l2(view.host_bw_gbs), 1.0 if view.contraction == "dot" else 0.0,
        float(view.input_regs), float(view.acc_regs), _l2(view.core_row_cols),
        1.0 if hw.group.accumulator else 0.0,
    ]
    streamed = sum(int(np.prod(spec.shape(t_))) for t_ in spec.inputs if spec.role(t_) == "input")
    out = int(np.prod(spec.shape(spec.output)))
    f += [_l2(streamed * ELEM_BYTES), _l2(out * ELEM_BYTES)]
    _STATIC[key] = f
    return f


_STATIC: dict = {}
_SETS: dict = {}


def features(spec: KernelSpec, draft: Draft, view: PimView) -> np.ndarray:
    """Feature vector of a (kernel, draft, device) triple.

    Besides the raw configuration (sizes, per-dimension-set groups, cores,
    per-core lengths, padding, units used, index ranges) it carries a few
    first-order estimates that a PIM programmer would compute -- column
    commands per core, row activations, bytes each channel moves for the
    streamed inputs and the (partial) outputs, per-core input writes -- so
    that the trees learn corrections rather than the whole DRAM behaviour.
    """
    f = list(_static_features(spec, view))
    dims = spec.dims
    sets = _SETS.get(spec)
    if sets is None:
        sets = _SETS[spec] = {s.name: s.extent for s in dimension_sets(spec)}
    parts = {p.dim: p for p in draft.parts}
    per = {d: ceil_div(E, parts[d].groups * parts[d].cores) if d in parts else E for d, E in sets.items()}
    for d in _DIMS:
        E = dims.get(d, 1)
        p = parts.get(d)
        g, c = (p.groups, p.cores) if p else (1, 1)
        L = per.get(d, 1)
        f += [_l2(E), _l2(g), _l2(c), _l2(L), (L * g * c) / max(E, 1)]
    lanes = view.elems_per_column
    lane_len = per[spec.lane_dim]
    cols = ceil_div(lane_len, lanes)
    vec = 1
    for d, L in per.items():
        if d != spec.lane_dim:
            vec *= L
    G = draft.groups_used
    C = draft.cores_used
    f += [_l2(G), _l2(C), 1.0 if draft.index_range == "exact" else 0.0]
    f += [_l2(vec * cols), (lane_len % lanes) / lanes, _l2(cols)]
    kparts = 1
    for d in spec.reduce_dims:
        p = parts.get(d)
        if p:
            kparts *= p.groups * p.cores
    out = int(np.prod(spec.shape(spec.output)))
    shared = all((parts.get(d).cores if parts.get(d) else 1) == 1 for d in ("b", "m", "k"))
    # first-order estimates
    ccols = vec * cols * (1 if spec.kind != "attn" else 2)
    rows = ccols / view.core_row_cols
    streamed = sum(int(np.prod(spec.shape(t))) for t in spec.inputs if spec.role(t) == "input") * ELEM_BYTES
    ch_bytes_in = streamed / max(G, 1)
    out_parts = kparts // (C if (view.hw.group.accumulator and spec.kind != "va") else 1) if kparts > 1 else 1
    ch_bytes_out = out * max(out_parts, 1) * (lanes if view.contraction == "mac" and spec.kind in ("gemv", "red") else 1) * ELEM_BYTES / max(G, 1)
    x_writes = (per.get("b", 1) * per.get("m", 1) * cols) * (1 if shared else C)
    f += [_l2(kparts), _l2(out * kparts * ELEM_BYTES), 1.0 if shared else 0.0]
    f += [_l2(ccols), _l2(rows), _l2(ch_bytes_in), _l2(ch_bytes_out), _l2(x_writes), _l2(G * C)]
    return np.asarray(f, dtype=np.float32)


def _launch_ns(view: PimView) -> float:
    return view.hw.system.host.launch_overhead_us * 1e3


@dataclass
class Sample:
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
    from tqdm import tqdm

    from .schedule import evaluate

    rng = np.random.default_rng(seed)
    out: list[Sample] = []
    jobs = [(w, d) for w in workloads for d in sample_drafts(w, view, drafts_per_workload, rng, pruned)]
    for w, d in tqdm(jobs, desc=f"simulating drafts ({view.name})", disable=not progress, unit="draft"):
        try:
            _, ns = evaluate(w, view, d)
        except InfeasibleDraft:
            continue
        out.append(Sample(w, d, ns, features(w, d, view), _launch_ns(view)))
    return out


class Predictor:
    """XGBoost regressor of ``log(latency)`` over draft features.

    Parameters
    ----------
    n_estimators, learning_rate, max_depth : xgboost settings
    seed : int
    """

    def __init__(self, n_estimators: int = 400, learning_rate: float = 0.08, max_depth: int = 8, seed: int = 0):
        self.params = dict(n_estimators=n_estimators, learning_rate=learning_rate, max_depth=max_depth, seed=seed)
        self.model = None
        self.meta: dict = {}
        self.train_seconds = 0.0

    # ------------------------------------------------------------------ training
    def fit(self, samples: list[Sample], progress: bool = True) -> "Predictor":
        """Train on simulated samples (labels ``log(latency_ns)``)."""
        import xgboost as xgb
        from tqdm import tqdm

        if not samples:
            raise ValueError("no training samples")
        X = np.stack([s.x for s in samples])
        # the host's launch overhead is a known constant of every draft: learn the rest
        y = np.log(np.maximum(np.array([s.latency_ns - s.launch_ns for s in samples]), 1e-3))
        t0 = time.perf_counter()
        bar = tqdm(total=self.params["n_estimators"], desc="training XGBoost", disable=not progress, unit="tree")

        class _Bar(xgb.callback.TrainingCallback):
            def after_iteration(self, model, epoch, evals_log):
                bar.update(1)
                return False

        dtrain = xgb.DMatrix(X, label=y)
        self.model = xgb.train(
            {
                "eta": self.params["learning_rate"],
                "max_depth": self.params["max_depth"],
                "objective": "reg:squarederror",
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
        import xgboost as xgb

        if self.model is None:
            raise RuntimeError("the predictor is not trained")
        X = np.stack([features(spec, d, view) for d in drafts])
        return np.exp(self.model.predict(xgb.DMatrix(X))) + _launch_ns(view)

    def rank(self, spec: KernelSpec, view: PimView, drafts: list[Draft] | None = None) -> list[Draft]:
        """Drafts sorted by predicted time (ties keep the enumeration order)."""
        if drafts is None:
            drafts, _ = enumerate_drafts(spec, view)
        pred = self.predict_ns(spec, drafts, view)
        order = np.argsort(pred, kind="stable")
        return [drafts[i] for i in order]

    def best(self, spec: KernelSpec, view: PimView, drafts: list[Draft] | None = None) -> Draft:
        """The draft with the lowest predicted latency (of ``drafts``, else of the pruned space)."""
        return self.rank(spec, view, drafts)[0]

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | os.PathLike) -> None:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        self.model.save_model(str(p))
        p.with_suffix(".meta.json").write_text(json.dumps({**self.meta, "params": self.params}, indent=1))

    @staticmethod
    def load(path: str | os.PathLike) -> "Predictor":
        import xgboost as xgb

        p = Path(path)
        pr = Predictor()
        meta_p = p.with_suffix(".meta.json")
        if meta_p.exists():
            pr.meta = json.loads(meta_p.read_text())
            pr.params.update(pr.meta.get("params", {}))
            if pr.meta.get("feature_version") != FEATURE_VERSION:
                raise ValueError(f"{p}: predictor features v{pr.meta.get('feature_version')}, this code uses v{FEATURE_VERSION}")
        pr.model = xgb.Booster()
        pr.model.load_model(str(p))
        return pr

    _LOADED: dict = {}

    @staticmethod
    def path_for(view: PimView) -> Path:
        from .tuning import cache_dir

        return cache_dir(view.name) / "predictor.ubj"

    @staticmethod
    def load_for(view: PimView) -> "Predictor | None":
        """The trained predictor of a device (``python -m tvm_pim predictor``), if any."""
        p = Predictor.path_for(view)
        if not p.exists():
            return None
        key = str(p)
        if key not in Predictor._LOADED:
            try:
                Predictor._LOADED[key] = Predictor.load(p)
            except ValueError:
                Predictor._LOADED[key] = None
        return Predictor._LOADED[key]


@dataclass
class LookupTable:
    """Best predicted draft per workload (DCC's offline table, extended on the fly)."""

    device: str
    entries: dict[str, str] = field(default_factory=dict)  # spec json -> draft json

    def get(self, spec: KernelSpec) -> Draft | None:
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
        return json.dumps({"device": self.device, "entries": self.entries}, indent=1)

    @staticmethod
    def from_json(text: str) -> "LookupTable":
        d = json.loads(text)
        return LookupTable(d["device"], dict(d["entries"]))


# ============================================================================ meta-schedule cost model
def _make_cost_model():
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.cost_model import PyCostModel

    @derived_object
    class PimCostModel(PyCostModel):
        """The coupled predictor as a meta-schedule cost model (higher score = faster).

        ``update`` keeps the measured (simulated) candidates and refits the
        XGBoost model on the base training samples plus everything measured,
        every ``refit_every`` new measurements (DCC's optional training at
        inference time).
        """

        def __init__(self, view: PimView, predictor: Predictor | None = None, base: list[Sample] | None = None,
                     refit_every: int = 32, seed: int = 0):
            super().__init__()
            self.view = view
            self.predictor = predictor
            self.base = list(base or [])
            self.measured: list[Sample] = []
            self.refit_every = refit_every
            self.pending = 0
            self.seed = seed

        def load(self, path: str) -> None:
            self.predictor = Predictor.load(path)

        def save(self, path: str) -> None:
            if self.predictor is not None and self.predictor.model is not None:
                self.predictor.save(path)

        def update(self, context, candidates, results) -> None:
            from .kernels import spec_of
            from .space import draft_of

            for cand, res in zip(candidates, results):
                secs = [float(s) for s in (res.run_secs or [])]
                if not secs or res.error_msg:
                    continue
                mod = cand.sch.mod
                spec, d = spec_of(mod), draft_of(mod)
                self.measured.append(Sample(spec, d, min(secs) * 1e9, features(spec, d, self.view), _launch_ns(self.view)))
                self.pending += 1
            if self.pending >= self.refit_every and (self.base or len(self.measured) >= 2 * self.refit_every):
                self.predictor = Predictor(n_estimators=150, seed=self.seed).fit(self.base + self.measured, progress=False)
                self.pending = 0

        def predict(self, context, candidates) -> np.ndarray:
            from .kernels import spec_of
            from .space import draft_of

            if self.predictor is None or self.predictor.model is None:
                return np.random.default_rng(self.seed + len(self.measured)).random(len(candidates))
            scores = np.full(len(candidates), -1e9)  # a candidate that is not a valid draft ranks last
            spec, drafts, where = None, [], []
            for i, cand in enumerate(candidates):
                mod = cand.sch.mod
                try:
                    spec, d = spec_of(mod), draft_of(mod)
                except (InfeasibleDraft, ValueError, KeyError):
                    continue
                drafts.append(d)
                where.append(i)
            if drafts:
                scores[where] = -np.log(self.predictor.predict_ns(spec, drafts, self.view))
            return scores

    return PimCostModel


_COST_MODEL_CLS = None


def PimCostModel(view: PimView, predictor: Predictor | None = None, **kw):  # noqa: N802
    """Build the meta-schedule cost model wrapping a :class:`Predictor`."""
    global _COST_MODEL_CLS
    if _COST_MODEL_CLS is None:
        _COST_MODEL_CLS = _make_cost_model()
    return _COST_MODEL_CLS(view, predictor, **kw)


# ============================================================================ workload sets
def default_workloads(view: PimView, kind: str, scale: str = "small") -> list[KernelSpec]:
    """Workloads of a kind like DCC's evaluation (batch x heads, head size 128, LLM sizes)."""
    out: list[KernelSpec] = []
    if kind == "gemv":
        sizes = [512, 1024, 2048, 4096] if scale != "tiny" else [256, 1024]
        batches = [1, 4, 16, 32] if scale != "tiny" else [1, 8]
        for b in batches:
            for n in sizes:
                out.append(KernelSpec.make("gemv", b=b, m=1, n=n, k=128))
        for n, k in ((4096, 4096), (5120, 5120), (15360, 5120), (6656, 6656)) if scale != "tiny" else ((1024, 1024),):
            out.append(KernelSpec.make("gemv", b=1, m=1, n=n, k=k))
    elif kind == "red":
        for b in ([1, 4, 16] if scale != "tiny" else [1, 4]):
            for n in ([1024, 2048, 4096] if scale != "tiny" else [256, 1024]):
                out.append(KernelSpec.make("red", b=b, n=n, k=n, resident=("A",)))
    elif kind in ("va", "relu"):
        for b in ([1, 4, 16] if scale != "tiny" else [1, 4]):
            for n in ([1024, 2048, 4096] if scale != "tiny" else [256, 1024]):
                res = ("A", "B") if kind == "va" else ("A",)
                out.append(KernelSpec.make(kind, b=b, i=n * n // 4 if scale != "tiny" else n * 16, resident=res))
    elif kind == "attn":
        for b in ([4, 16, 32] if scale != "tiny" else [4, 8]):
            for n in ([512, 1024, 2048] if scale != "tiny" else [128, 512]):
                out.append(KernelSpec.make("attn", b=b, n=n, k=128))
    return [w for w in out if view.supports(w.kind)]

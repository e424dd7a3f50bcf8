"""Meta-schedule tuning of PIM kernels and the tuned-schedule databases.

:func:`tune` runs ``tvm.s_tir.meta_schedule.tune_tir`` on a kernel's TIR
PrimFunc with

* the data-centric space (:func:`tvm_pim.space.schedule_fn`) as a
  ``ScheduleFn`` space, a mutator that re-samples one of its categorical
  decisions (:class:`PimMutator`) and a postprocessor that drops drafts the
  device cannot run (:class:`VerifyDraft`);
* :class:`PimBuilder`, which builds nothing with LLVM: it reads the draft
  from the scheduled module and generates its command stream;
* :class:`PimRunner`, which "measures" a candidate by timing its command
  stream on the simulator;
* the coupled predictor as cost model (:func:`tvm_pim.predictor.PimCostModel`).

The best record of each workload is kept in a meta-schedule JSON database
under ``schedules/<hw>/`` (``database_workload.json``,
``database_tuning_record.json``); :func:`lookup` reads it back and
``relax.build`` for ``pim`` targets applies it (schedule strategy
``database``).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import tvm
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder
from tvm.s_tir.meta_schedule.mutator import PyMutator
from tvm.s_tir.meta_schedule.postproc import PyPostproc
from tvm.s_tir.meta_schedule.runner import PyRunner, RunnerFuture, RunnerResult

from tvm_cim.common import hardware as loader

from .abstraction import PimView
from .codegen import generate
from .kernels import KernelSpec, spec_of
from .simulator import simulator_for
from .space import Draft, InfeasibleDraft, check_draft, draft_of, schedule_fn


# ============================================================================ where databases live
def schedules_root() -> Path:
    """``$TVM_PIM_SCHEDULES``, else the repository's ``schedules/``, else the installed copy."""
    env = os.environ.get("TVM_PIM_SCHEDULES")
    if env:
        return Path(env)
    repo = Path(__file__).resolve().parents[1] / "schedules"
    if repo.is_dir():
        return repo
    return Path(sys.prefix) / "share" / "tvm_cim" / "schedules"


def schedules_dir(hw_name: str) -> Path:
    return schedules_root() / hw_name


def cache_dir(hw_name: str) -> Path:
    """Where trained predictors are kept: ``$TVM_PIM_CACHE`` or ``~/.cache/tvm_pim`` (not the repository)."""
    root = Path(os.environ.get("TVM_PIM_CACHE") or Path.home() / ".cache" / "tvm_pim")
    return root / hw_name


def target_of(view: PimView) -> tvm.target.Target:
    from tvm_cim.common.target import register_hardware

    src = view.hw.source_path
    name = view.name if name_is_preset(view) else src
    return tvm.target.Target(register_hardware("pim", name))


def name_is_preset(view: PimView) -> bool:
    return view.name in loader.known_presets("pim") and loader.load(view.name, kind="pim") == view.hw


# ============================================================================ meta-schedule pieces
def _artifact(spec: KernelSpec, draft: Draft) -> str:
    return json.dumps({"spec": spec.to_json(), "draft": draft.to_json()})


@derived_object
class PimBuilder(PyBuilder):
    """Builds a candidate without LLVM: its artifact is the draft; the stream is generated to validate it."""

    def __init__(self, view: PimView):
        super().__init__()
        self.view = view

    def build(self, build_inputs):
        out = []
        for bi in build_inputs:
            try:
                spec, d = spec_of(bi.mod), draft_of(bi.mod)
                generate(spec, d, self.view)
                out.append(BuilderResult(_artifact(spec, d), None))
            except (InfeasibleDraft, ValueError) as e:
                out.append(BuilderResult(None, f"infeasible draft: {e}"))
        return out


@derived_object
class PimRunner(PyRunner):
    """Measures a candidate by timing its command stream on the simulator (seconds)."""

    def __init__(self, view: PimView):
        super().__init__()
        self.view = view
        self.sim = simulator_for(view.hw)
        self.history: list[tuple[str, float]] = []

    def run(self, runner_inputs):
        futures = []
        for ri in runner_inputs:
            a = json.loads(ri.artifact_path)
            spec, d = KernelSpec.from_json(a["spec"]), Draft.from_json(a["draft"])
            try:
                secs = self.sim.run(generate(spec, d, self.view), functional=False).latency_ns * 1e-9
                res = RunnerResult([secs], None)
                self.history.append((d.to_json(), secs))
            except (InfeasibleDraft, ValueError) as e:
                res = RunnerResult(None, str(e))
            futures.append(RunnerFuture(f_done=lambda: True, f_result=lambda res=res: res))
        return futures


@derived_object
class PimMutator(PyMutator):
    """Re-samples one categorical decision (groups, cores, mapping or index range) of a draft."""

    def __init__(self, seed: int = 0):
        super().__init__()
        self.rng = np.random.default_rng(seed)

    def _initialize_with_tune_context(self, context) -> None:
        pass

    def apply(self, trace, _rand_state):
        insts = [i for i in trace.insts if i.kind.name == "SampleCategorical"]
        if not insts:
            return None
        inst = insts[int(self.rng.integers(len(insts)))]
        n = len(inst.attrs[0])
        if n < 2:
            return None
        old = int(trace.decisions[inst])
        new = int(self.rng.integers(n - 1))
        new = new + 1 if new >= old else new
        return trace.with_decision(inst, new, True)

    def clone(self):
        return PimMutator(int(self.rng.integers(1 << 30)))


@derived_object
class VerifyDraft(PyPostproc):
    """Rejects schedules whose draft the device cannot run."""

    def __init__(self, view: PimView):
        super().__init__()
        self.view = view

    def _initialize_with_tune_context(self, context) -> None:
        pass

    def apply(self, sch) -> bool:
        try:
            check_draft(spec_of(sch.mod), self.view, draft_of(sch.mod))
            return True
        except (InfeasibleDraft, ValueError):
            return False

    def clone(self):
        return VerifyDraft(self.view)


# ============================================================================ tuning
@dataclass
class TuneResult:
    """Outcome of tuning one kernel.

    ``best_ns`` is the best record of the search's database, which starts with
    the seeds (the backend's default draft and the predictor's top picks);
    ``first_ns`` and ``history_ns`` are the candidates the search measured.
    """

    spec: KernelSpec
    best: Draft
    best_ns: float
    first_ns: float
    trials: int
    history_ns: list[float] = field(default_factory=list)
    seeds: list[tuple[str, float]] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "kernel": self.spec.name,
            "best_draft": str(self.best),
            "best_ns": self.best_ns,
            "first_candidate_ns": self.first_ns,
            "improvement": self.first_ns / self.best_ns if self.best_ns else 0.0,
            "trials": self.trials,
        }


def tune(spec: KernelSpec, view: PimView, trials: int = 64, per_iter: int = 16, seed: int = 0,
         cost_model=None, work_dir: str | None = None, save: bool = False, verbose: bool = False) -> TuneResult:
    """Tune one kernel with meta-schedule over the data-centric space.

    Parameters
    ----------
    spec : KernelSpec
    view : PimView
    trials : int
        Simulated candidates in total.
    per_iter : int
        Candidates per search iteration.
    seed : int
    cost_model : PyCostModel, optional
        Defaults to :func:`tvm_pim.predictor.PimCostModel` with the shipped
        predictor if there is one (else it learns from the measurements).
    work_dir : str, optional
        Meta-schedule's working directory (a temporary one by default).
    save : bool
        Add the best record to ``schedules/<hw>/``.
    verbose : bool
        Let meta-schedule log to the console.

    Returns
    -------
    TuneResult
    """
    from .predictor import PimCostModel, Predictor

    if cost_model is None:
        cost_model = PimCostModel(view, Predictor.load_for(view), seed=seed)
    runner = PimRunner(view)
    ms_logger = logging.getLogger("tvm.s_tir.meta_schedule")
    level = ms_logger.level
    saved_handlers = list(ms_logger.handlers)
    # meta-schedule's logging config re-lists the logger's handlers by name; unnamed ones
    # (e.g. attached by a test harness) make it fail, and earlier runs' file handlers pile up
    ms_logger.handlers = []
    if not verbose:
        ms_logger.setLevel(logging.WARNING)
    tmp = None
    if work_dir is None:
        tmp = work_dir = tempfile.mkdtemp(prefix="tvm_pim_tune_")
    try:
        target = target_of(view)
        seeds = _seed_database(spec, view, work_dir, target, cost_model)
        space = ms.space_generator.ScheduleFn(
            schedule_fn(view), sch_rules=[], postprocs=[VerifyDraft(view)], mutator_probs={PimMutator(seed): 1.0}
        )
        db = ms.tune_tir(
            spec.ir_module(),
            target,
            work_dir,
            max_trials_global=trials,
            num_trials_per_iter=per_iter,
            builder=PimBuilder(view),
            runner=runner,
            cost_model=cost_model,
            space=space,
            database="json",
            strategy=ms.search_strategy.EvolutionarySearch(
                population_size=max(32, 2 * per_iter),
                init_measured_ratio=0.2,
                init_min_unmeasured=per_iter,
                genetic_num_iters=2,
                genetic_mutate_prob=0.85,
                genetic_max_fail_count=10,
                eps_greedy=0.1,
            ),
            num_tuning_cores=1,
            measure_callbacks=[ms.measure_callback.AddToDatabase(), ms.measure_callback.UpdateCostModel()],
            seed=seed,
        )
        recs = db.get_top_k(db.commit_workload(spec.ir_module()), 1)
        if not recs:
            raise InfeasibleDraft(f"tuning found no valid candidate for {spec.name}")
        best_rec = recs[0]
        sch = tvm.s_tir.Schedule(spec.ir_module())
        best_rec.trace.apply_to_schedule(sch, remove_postproc=True)
        best = draft_of(sch)
        hist = [s for _, s in runner.history]
        if not hist:
            raise InfeasibleDraft(f"tuning measured no candidate for {spec.name}")
        best_ns = float(best_rec.run_secs[0]) * 1e9
        res = TuneResult(spec, best, best_ns, float(hist[0]) * 1e9, len(hist), [h * 1e9 for h in hist])
        res.seeds = seeds
        if save:
            save_record(view, spec, best_rec)
        return res
    finally:
        for h in ms_logger.handlers:
            if h not in saved_handlers:
                h.close()
        ms_logger.handlers = saved_handlers
        ms_logger.setLevel(level)
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def _seed_database(spec: KernelSpec, view: PimView, work_dir: str, target, cost_model, top: int = 3):
    """Pre-measure the backend's default draft and the predictor's top picks into the search database.

    Meta-schedule's evolutionary search starts from the best measured records,
    so the search never ends worse than the default and begins where the
    predictor expects the optimum.
    """
    from .predictor import Predictor
    from .schedule import evaluate
    from .space import default_draft, enumerate_drafts, schedule_of

    drafts = [default_draft(spec, view)]
    pred = getattr(cost_model, "predictor", None)
    if isinstance(pred, Predictor) and pred.model is not None:
        cands, _ = enumerate_drafts(spec, view)
        drafts += [d for d in pred.rank(spec, view, cands)[: top * 2] if d not in drafts][:top]
    db = ms.database.JSONDatabase(
        os.path.join(work_dir, "database_workload.json"),
        os.path.join(work_dir, "database_tuning_record.json"),
        allow_missing=True,
        module_equality="structural",
    )
    wl = db.commit_workload(spec.ir_module())
    out = []
    for d in drafts:
        try:
            ns = evaluate(spec, view, d)[1]
        except InfeasibleDraft:
            continue
        sch = schedule_of(spec, view, d)
        db.commit_tuning_record(
            ms.database.TuningRecord(sch.trace, wl, [ns * 1e-9], target, ms.arg_info.ArgInfo.from_prim_func(spec.prim_func()))
        )
        out.append((str(d), ns))
    return out


def _repo_db(view: PimView, create: bool = False):
    d = schedules_dir(view.name)
    if create:
        d.mkdir(parents=True, exist_ok=True)
    wl, tr = d / "database_workload.json", d / "database_tuning_record.json"
    if not create and not (wl.exists() and tr.exists()):
        return None
    return ms.database.JSONDatabase(str(wl), str(tr), allow_missing=True, module_equality="structural")


def save_record(view: PimView, spec: KernelSpec, record) -> None:
    """Keep ``record`` as the best of its workload in ``schedules/<hw>/``."""
    db = _repo_db(view, create=True)
    wl = db.commit_workload(spec.ir_module())
    old = db.get_top_k(wl, 1)
    new_secs = float(record.run_secs[0]) if record.run_secs else float("inf")
    if old and old[0].run_secs and float(old[0].run_secs[0]) <= new_secs:
        return
    db.commit_tuning_record(
        ms.database.TuningRecord(record.trace, wl, record.run_secs, target_of(view), record.args_info)
    )
    _lookup_cached.cache_clear()
    _open_db.cache_clear()


@lru_cache(maxsize=16)
def _open_db(name: str, path: str):
    d = Path(path)
    wl, tr = d / "database_workload.json", d / "database_tuning_record.json"
    if not (wl.exists() and tr.exists()):
        return None
    return ms.database.JSONDatabase(str(wl), str(tr), allow_missing=False, module_equality="structural")


@lru_cache(maxsize=4096)
def _lookup_cached(hw_json: str, spec_json: str, path: str) -> str | None:
    hw = loader.from_json(hw_json)
    view = PimView(hw)
    db = _open_db(view.name, path)
    if db is None:
        return None
    spec = KernelSpec.from_json(spec_json)
    mod = spec.ir_module()
    if not db.has_workload(mod):
        return None
    recs = db.get_top_k(db.commit_workload(mod), 1)
    if not recs:
        return None
    sch = tvm.s_tir.Schedule(mod)
    recs[0].trace.apply_to_schedule(sch, remove_postproc=True)
    d = draft_of(sch)
    try:
        check_draft(spec, view, d)
    except InfeasibleDraft:
        return None
    return d.to_json()


def lookup(spec: KernelSpec, view: PimView) -> Draft | None:
    """The tuned draft of a workload from ``schedules/<hw>/``, or None."""
    d = _lookup_cached(loader.to_json(view.hw), spec.to_json(), str(schedules_dir(view.name)))
    return Draft.from_json(d) if d else None


def database_workloads(view: PimView) -> list[KernelSpec]:
    """Workloads with a record in ``schedules/<hw>/``."""
    db = _open_db(view.name, str(schedules_dir(view.name)))
    if db is None:
        return []
    out = []
    for rec in db.get_all_tuning_records():
        try:
            out.append(spec_of(rec.workload.mod))
        except ValueError:
            continue
    return out

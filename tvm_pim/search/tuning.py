"""Meta-schedule tuning of PIM kernels over DCC's data-centric space.

:func:`tune` runs ``tvm.s_tir.meta_schedule.tune_tir`` on a kernel's TIR
PrimFunc with the data-centric space (:func:`tvm_pim.compiler.space.schedule_fn`)
as a ``ScheduleFn`` space and the simulator-backed pieces of
:mod:`tvm_pim.search.metaschedule`: nothing is built with LLVM, every
candidate is timed on the simulator.  The search database is seeded with the
backend's default draft and the predictor's top picks, so a search never
ends worse than the default.

With ``save=True`` the best record is kept in the user's database
(:mod:`tvm_pim.search.database`), where ``relax.build`` for ``pim`` targets
finds it (schedule strategy ``database``).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from dataclasses import dataclass, field

import tvm
from tvm.s_tir import meta_schedule as ms

from ..compiler.kernels import KernelSpec
from ..compiler.space import Draft, InfeasibleDraft, default_draft, draft_of, enumerate_drafts, schedule_fn, schedule_of
from ..cost.measure import evaluate
from ..cost.predictor import Predictor
from ..hardware.view import PimView
from .database import load_predictor, save_record, target_of, user_folder
from .metaschedule import PimBuilder, PimCostModel, PimMutator, PimRunner, VerifyDraft


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
        """The result as plain data (for reports)."""
        return {
            "kernel": self.spec.name,
            "best_draft": str(self.best),
            "best_ns": self.best_ns,
            "first_candidate_ns": self.first_ns,
            "improvement": self.first_ns / self.best_ns if self.best_ns else 0.0,
            "trials": self.trials,
        }


def tune(spec: KernelSpec, view: PimView, trials: int = 64, per_iter: int = 16, seed: int = 0,
         cost_model=None, work_dir: str | None = None, save: bool = False,
         database: str | os.PathLike | None = None, verbose: bool = False) -> TuneResult:
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
        Defaults to :class:`~tvm_pim.search.metaschedule.PimCostModel` with the
        device's trained predictor if there is one (else it learns from the
        measurements).
    work_dir : str, optional
        Meta-schedule's working directory (a temporary one by default).
    save : bool
        Keep the best record in the user's database (see ``database``).
    database : str or os.PathLike, optional
        The database root records are saved under (``<root>/<hw>/``); by
        default the user's cache (:func:`tvm_pim.search.database.user_root`).
    verbose : bool
        Let meta-schedule log to the console.

    Returns
    -------
    TuneResult
    """
    if cost_model is None:
        cost_model = PimCostModel(view, load_predictor(view.name), seed=seed)
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
            save_record(view, spec, best_rec, user_folder(view.name, database))
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

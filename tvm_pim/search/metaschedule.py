"""The pieces through which meta-schedule searches PIM tiling drafts without building anything.

=================  =============================================================
piece              what it does
=================  =============================================================
``PimBuilder``     a ``PyBuilder``: reads the draft from the scheduled module and
                   generates its command stream to validate it (no LLVM build)
``PimRunner``      a ``PyRunner``: "measures" a candidate by timing its command
                   stream on the simulator
``PimMutator``     a ``PyMutator``: re-samples one categorical decision of a draft
``VerifyDraft``    a ``PyPostproc``: drops drafts the device cannot run
``PimCostModel``   a ``PyCostModel``: DCC's coupled XGBoost predictor, refitted
                   on the measurements as the search goes
=================  =============================================================

The space itself is :func:`tvm_pim.compiler.space.schedule_fn`; the search
that wires them together is :func:`tvm_pim.search.tuning.tune`.
"""

from __future__ import annotations

import json

import numpy as np
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder
from tvm.s_tir.meta_schedule.cost_model import PyCostModel
from tvm.s_tir.meta_schedule.mutator import PyMutator
from tvm.s_tir.meta_schedule.postproc import PyPostproc
from tvm.s_tir.meta_schedule.runner import PyRunner, RunnerFuture, RunnerResult

from ..compiler.codegen import generate
from ..compiler.kernels import KernelSpec, spec_of
from ..compiler.space import Draft, InfeasibleDraft, check_draft, draft_of
from ..cost.features import features
from ..cost.predictor import Predictor, Sample, launch_ns
from ..hardware.view import PimView
from ..simulator.engine import Simulator


def _artifact(spec: KernelSpec, draft: Draft) -> str:
    return json.dumps({"spec": spec.to_json(), "draft": draft.to_json()})


@derived_object
class PimBuilder(PyBuilder):
    """Builds a candidate without LLVM: its artifact is the draft; the stream is generated to validate it."""

    def __init__(self, view: PimView):
        super().__init__()
        self.view = view

    def build(self, build_inputs):
        """One result per candidate: the draft as artifact, or why it cannot run."""
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
        self.sim = Simulator(view.hw)
        self.history: list[tuple[str, float]] = []

    def run(self, runner_inputs):
        """Simulated end-to-end time (seconds) of each built candidate."""
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
        """The trace with one categorical decision changed to another value, or None."""
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
        """A copy with its own random stream."""
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
        """Whether the schedule's draft passes :func:`tvm_pim.compiler.space.check_draft`."""
        try:
            check_draft(spec_of(sch.mod), self.view, draft_of(sch.mod))
            return True
        except (InfeasibleDraft, ValueError):
            return False

    def clone(self):
        """A copy for another tuning thread."""
        return VerifyDraft(self.view)


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
        """Read a saved predictor."""
        self.predictor = Predictor.load(path)

    def save(self, path: str) -> None:
        """Write the predictor, if it is trained."""
        if self.predictor is not None and self.predictor.model is not None:
            self.predictor.save(path)

    def update(self, context, candidates, results) -> None:
        """Keep the measured candidates; refit every ``refit_every`` new measurements."""
        for cand, res in zip(candidates, results):
            secs = [float(s) for s in (res.run_secs or [])]
            if not secs or res.error_msg:
                continue
            mod = cand.sch.mod
            spec, d = spec_of(mod), draft_of(mod)
            self.measured.append(Sample(spec, d, min(secs) * 1e9, features(spec, d, self.view), launch_ns(self.view)))
            self.pending += 1
        if self.pending >= self.refit_every and (self.base or len(self.measured) >= 2 * self.refit_every):
            self.predictor = Predictor(n_estimators=150, seed=self.seed).fit(self.base + self.measured, progress=False)
            self.pending = 0

    def predict(self, context, candidates) -> np.ndarray:
        """Scores of candidates: minus the log of the predicted latency (random without a model)."""
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
            if self.predictor.ranking:
                scores[where] = -self.predictor.cost(spec, drafts, self.view)
            else:
                scores[where] = -np.log(self.predictor.predict_ns(spec, drafts, self.view))
        return scores

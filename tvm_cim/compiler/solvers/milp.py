"""Mixed-integer linear programs on HiGHS (``highspy``): a thin model with a time limit and a seed.

Every MIP of the project (CMSwitch's array allocation, MIREDO's dataflow)
builds its model here, so that solve-time limits, seeds, thread counts and
the report of what the solver achieved are handled once::

    m = Model("alloc", time_limit=5.0, seed=0)
    c = m.var("c", lb=1, integer=True)
    r = m.var("r")
    m.add(r * 100 <= c * 40)
    sol = m.maximize(r)
    sol.status, sol.objective, sol[c], sol.seconds
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import highspy


@dataclass
class Solution:
    """What HiGHS returned.

    Attributes
    ----------
    status : str
        HiGHS's model status (``Optimal``, ``Time limit reached``, ``Infeasible`` ...).
    objective : float
        Objective of the best solution found (``nan`` if none).
    seconds : float
        Solve time.
    gap : float
        Relative MIP gap of the returned solution (0 when proven optimal).
    """

    status: str
    objective: float
    seconds: float
    gap: float
    _values: dict = field(default_factory=dict, repr=False)

    @property
    def feasible(self) -> bool:
        return not math.isnan(self.objective)

    @property
    def optimal(self) -> bool:
        return self.status == "Optimal"

    def __getitem__(self, var) -> float:
        return self._values[var.index]


class Model:
    """A HiGHS model with the project's solver settings.

    Parameters
    ----------
    name : str
    time_limit : float
        Seconds; the best solution found by then is returned (``status`` says so).
        Wall-clock, so a run that reaches it depends on the machine's load: give
        ``node_limit`` as the limit that decides and keep this as a safety net.
    node_limit : int, optional
        Branch-and-bound nodes (HiGHS ``mip_max_nodes``): a deterministic work
        limit; the best solution found by then is returned (``status`` says so).
    seed : int
        HiGHS's random seed (its search is deterministic for a seed).
    threads : int
        Solver threads (1 keeps results reproducible across machines).
    """

    def __init__(self, name: str, time_limit: float = 10.0, seed: int = 0, threads: int = 1,
                 node_limit: int | None = None):
        self.name = name
        self.h = highspy.Highs()
        self.h.setOptionValue("output_flag", False)
        self.h.setOptionValue("time_limit", float(time_limit))
        self.h.setOptionValue("random_seed", int(seed))
        self.h.setOptionValue("threads", int(threads))
        self.h.setOptionValue("mip_rel_gap", 1e-6)
        if node_limit is not None:
            self.h.setOptionValue("mip_max_nodes", int(node_limit))
        self._vars: list = []

    def var(self, name: str, lb: float = 0.0, ub: float = math.inf, integer: bool = False):
        """A new variable."""
        vtype = highspy.HighsVarType.kInteger if integer else highspy.HighsVarType.kContinuous
        v = self.h.addVariable(lb=lb, ub=ub if math.isfinite(ub) else highspy.kHighsInf, type=vtype, name=name)
        self._vars.append(v)
        return v

    def binary(self, name: str):
        """A new 0/1 variable."""
        return self.var(name, 0, 1, integer=True)

    def add(self, constraint) -> None:
        """Add a linear constraint built from variables (``a * x + b <= c``)."""
        self.h.addConstr(constraint)

    def _solve(self, sense, expr) -> Solution:
        sense(expr)
        status = self.h.modelStatusToString(self.h.getModelStatus())
        info = self.h.getInfo()
        has = info.primal_solution_status == 2  # kSolutionStatusFeasible
        values = {}
        if has:
            sol = self.h.getSolution().col_value
            values = {v.index: sol[v.index] for v in self._vars}
        gap = float(getattr(info, "mip_gap", 0.0) or 0.0)
        return Solution(status, float(info.objective_function_value) if has else math.nan,
                        float(self.h.getRunTime()), 0.0 if status == "Optimal" else gap, values)

    def minimize(self, expr) -> Solution:
        """Solve, minimising ``expr``."""
        return self._solve(self.h.minimize, expr)

    def maximize(self, expr) -> Solution:
        """Solve, maximising ``expr``."""
        return self._solve(self.h.maximize, expr)

"""Multi-level scheduling of CIM regions: duplication, pipelining, segmentation.

The method is CIM-MLC (paper 003, sec. 3.3), applied per computing mode:

* **graph level** (all modes): operator duplication over cores by dynamic
  programming under the core budget, then balancing so that no operator is
  duplicated beyond what the bottleneck needs; the per-operator latency used
  by the DP already includes the NoC / buffer-bandwidth and ALU limits, so
  duplication never exceeds what the data paths can feed; inter-layer
  pipelining; segmentation into maximal sub-graphs that fit the chip when the
  network does not, each segment with its own duplication and its weight
  rewrites costed;
* **crossbar level** (crossbar and wordline modes): duplication over the
  crossbars of the cores an operator holds (paper Eq. 1), virtual crossbars
  binding the weight matrix's dimensions to physical crossbars, and the
  MVM-grained pipeline (a crossbar starts as soon as its input slice arrives);
* **wordline level** (wordline mode): rows remapped over crossbars so that the
  ``rows_active`` limit does not serialise an MVM.

Strategies (``--strategy``): ``none`` (no optimisation), ``greedy`` (greedy
duplication of the slowest operator with a batch pipeline: the Poly-Schedule
baseline CIM-MLC compares with; for one input the layers run one after the
other), ``puma`` (inter-layer pipeline, no duplication), ``cim-mlc`` (the full
method).  :class:`Options` switches the levels individually for ablations.

:class:`CostModel` is the fast analytical estimate the optimisers use; the
simulator's timeline measures (``benchmarks/cim_multilevel.py`` reports how
far apart they are).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from ..hardware.schema import CIMHardware
from .region import CONV2D, DMATMUL, Region

STRATEGIES = ("none", "greedy", "puma", "cim-mlc")


@dataclass(frozen=True)
class Options:
    """Which scheduling techniques are on.

    Attributes
    ----------
    duplication : {'none', 'dp', 'greedy'}
        Graph-level operator duplication over cores.
    pipeline : bool
        Inter-layer pipeline (consumers start on partial producer output).
    crossbar_dup : bool
        Crossbar-level duplication inside the allocated cores (Eq. 1).
    mvm_pipeline : bool
        MVM-grained pipeline: crossbars start when their own input slice arrives.
    remap : bool
        Wordline-level row remapping.
    """

    duplication: str = "none"
    pipeline: bool = False
    crossbar_dup: bool = False
    mvm_pipeline: bool = False
    remap: bool = False

    @staticmethod
    def for_strategy(strategy: str, hw: CIMHardware) -> "Options":
        """The techniques a strategy uses, restricted to what the computing mode allows."""
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
        mode = hw.chip.computing_mode
        if strategy == "none":
            return Options()
        if strategy == "greedy":
            return Options(duplication="greedy")
        if strategy == "puma":
            return Options(pipeline=True)
        return Options(
            duplication="dp",
            pipeline=True,
            crossbar_dup=mode in ("crossbar", "wordline"),
            mvm_pipeline=mode in ("crossbar", "wordline"),
            remap=mode == "wordline",
        )


@dataclass
class RegionPlan:
    """How one region is executed.

    Attributes
    ----------
    replicas : int
        Copies of the weights (duplication); input vectors are split among them.
    tile_rows : int
        Rows per crossbar tile (``crossbar.rows``, or ``rows_active`` when remapped).
    tiles : int
        Crossbar tiles of one replica.
    cores : int
        Cores one replica spans (core-level unit).
    segment : int
    latency_ns : float
        Analytical estimate of the region alone.
    """

    replicas: int = 1
    tile_rows: int = 0
    tiles: int = 0
    cores: int = 1
    segment: int = 0
    latency_ns: float = 0.0
    write_ns: float = 0.0


@dataclass
class Schedule:
    """The result of scheduling: one plan per region plus the options used."""

    strategy: str
    options: Options
    plans: dict[str, RegionPlan] = field(default_factory=dict)
    segments: int = 1
    estimate_ns: float = 0.0
    estimate_regions_ns: dict[str, float] = field(default_factory=dict)


# --------------------------------------------------------------------------- cost model
class CostModel:
    """Fast analytical latency of regions under a plan (what the optimisers minimise).

    Per region with ``D`` replicas: every replica runs ``ceil(M / D)`` MVMs of
    ``input_steps x row_groups`` read steps; input codes reach the cores at the
    lower of the global-buffer and the NoC bandwidth; outputs are post-processed
    by the ALUs of the cores the replicas occupy.  These three overlap (double
    buffering), so the region takes the longest of them, plus one MVM to fill.
    """

    def __init__(self, hw: CIMHardware, wbits: int, ibits: int):
        self.hw, self.wbits, self.ibits = hw, wbits, ibits
        xb = hw.crossbar
        self.xbs_per_core = hw.core.crossbars

    def logical_cols(self) -> int:
        return self.hw.logical_cols(self.wbits)

    def tiles(self, r: Region, tile_rows: int) -> int:
        m, k, n = r.mkn
        cols = self.logical_cols()
        if r.kind == CONV2D and r.conv.get("groups", 1) > 1 and r.w_int is not None:
            from .mapping import tile_matrix

            return len(tile_matrix(k, n, self.hw, r.w_int, tile_rows=tile_rows))
        return math.ceil(k / tile_rows) * math.ceil(n / cols)

    def step_ns(self, cols_used: int) -> float:
        xb = self.hw.crossbar
        bitlines = cols_used * self.hw.cols_per_weight(self.wbits)
        return max(xb.device.read_latency_ns, math.ceil(bitlines / xb.adcs) * xb.adc_latency_ns)

    def mvm_ns(self, r: Region, tile_rows: int) -> float:
        """One input vector through one replica (its tiles work in parallel)."""
        groups = math.ceil(min(tile_rows, r.mkn[1]) / self.hw.crossbar.rows_active)
        steps = 2 * self.hw.input_steps(self.ibits - 1) if r.x_signed else self.hw.input_steps(self.ibits)
        return steps * groups * self.step_ns(min(self.logical_cols(), r.mkn[2]))

    def region_ns(self, r: Region, replicas: int, tile_rows: int, resident: bool = True, passes: int = 1) -> float:
        """Analytical latency of one region with ``replicas`` copies.

        The same per-operation formulas as the simulator, aggregated per
        resource: the region lasts as long as its busiest resource (chunks
        stream through load, quantise/unfold, scatter, read, post-process and
        store, each on its own unit) plus the time one chunk takes through the
        whole chain (pipeline fill).
        """
        hw = self.hw
        m, k, n = r.mkn
        bt = r.batch
        cyc = hw.cycle_ns
        chunks = chunk_count(r, replicas) if r.kind != DMATMUL else min(m, 16)
        vec_chunk = m / chunks
        per_rep_chunks = math.ceil(chunks / replicas)
        in_elems = float(np.prod(r.in_shapes[0]))
        halo = 1.0 + halo_fraction(r) * chunks
        gb = hw.chip.global_buffer.bandwidth_bits
        link = min(hw.chip.noc.link_bandwidth_bits, hw.core.local_buffer.bandwidth_bits)
        row_blocks = math.ceil(k / tile_rows)
        q = hw.op("quantize").latency_cycles
        # per-resource busy time
        gbuf = (in_elems * min(halo, 3.0) * self.ibits + bt * m * n * 8) / gb * cyc
        chip_alu = (in_elems * min(halo, 3.0) * q + (bt * m * k if r.kind == CONV2D else 0)) / hw.chip.alu.ops_per_cycle * cyc
        scatter_chunk = math.ceil(bt * vec_chunk * k * self.ibits / link) * cyc
        read_chunk = bt * vec_chunk * self.mvm_ns(r, tile_rows)
        post_el = bt * vec_chunk * n * (max(0, row_blocks - 1) * hw.op("add").latency_cycles + 3 * hw.op("mul").latency_cycles)
        post_chunk = math.ceil(post_el / hw.core.alu.ops_per_cycle) * cyc
        per_rep = per_rep_chunks * max(scatter_chunk, read_chunk, post_chunk) * passes
        store_chunk = bt * vec_chunk * n * 8 / gb * cyc
        fill = scatter_chunk + read_chunk + post_chunk + store_chunk + gbuf / chunks
        t = max(gbuf, chip_alu, per_rep) + fill
        if not resident or r.kind == DMATMUL:
            t += self.write_ns(r, tile_rows) * passes
        return t

    def write_ns(self, r: Region, tile_rows: int) -> float:
        """Programming one replica's crossbars (rows serially, crossbars in parallel)."""
        rows = min(tile_rows, r.mkn[1])
        return r.batch * rows * self.hw.crossbar.device.write_latency_ns

    def plan_cores(self, r: Region, tile_rows: int) -> int:
        return max(1, math.ceil(self.tiles(r, tile_rows) / self.xbs_per_core))

    # ------------------------------------------------------------------ whole graph
    def graph_ns(self, regions: list[Region], plans: dict[str, RegionPlan], pipeline: bool,
                 producers: dict[str, list[str]] | None = None) -> tuple[float, dict[str, float]]:
        """End-to-end estimate: sum of regions, or a chunk-level pipeline recurrence.

        With the pipeline on, a region starts a chunk of its output once the
        producing regions have finished the share of their output it needs
        (proportional, plus the convolution halo); chunks of one region follow
        each other at the region's throughput.
        """
        per = {r.name: plans[r.name].latency_ns for r in regions}
        if not pipeline:  # regions (with their weight writes) one after the other
            return float(sum(per.values())), per
        producers = producers or {}
        finish_curve: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        end = 0.0
        seg_end = 0.0
        cur_seg = None
        for r in regions:
            p = plans[r.name]
            if p.segment != cur_seg:  # segments run one after the other
                cur_seg, seg_end = p.segment, end
            n_chunks = chunk_count(r, p.replicas) if r.kind != DMATMUL else min(r.mkn[0], 16)
            frac_end = np.arange(1, n_chunks + 1) / n_chunks
            need = np.minimum(1.0, frac_end + halo_fraction(r))
            # weights of a segment are written at its start, crossbars in parallel
            ready = np.full(n_chunks, seg_end + p.write_ns)
            for q in producers.get(r.name, []):
                if q in finish_curve and plans[q].segment == p.segment:
                    fx, ft = finish_curve[q]
                    idx = np.minimum(np.searchsorted(fx, need - 1e-12), len(fx) - 1)
                    ready = np.maximum(ready, ft[idx])
                elif q in finish_curve:
                    ready = np.maximum(ready, finish_curve[q][1][-1])
            step = (p.latency_ns - p.write_ns) / n_chunks
            # finish[c] = max(finish[c-1], ready[c]) + step  (vectorised)
            fin = np.maximum.accumulate(ready - step * np.arange(n_chunks)) + step * np.arange(1, n_chunks + 1)
            finish_curve[r.name] = (frac_end, fin)
            end = max(end, float(fin[-1]))
        return end, per


def halo_fraction(r: Region) -> float:
    """Extra share of a convolution's input needed beyond its output share (kernel halo)."""
    if r.kind != CONV2D:
        return 0.0
    h = r.in_shapes[0][2]
    kh = r.conv["kernel"][0]
    dh = r.conv["dilation"][0]
    return (dh * (kh - 1)) / max(1, h)


def chunk_count(r: Region, replicas: int) -> int:
    """Pipeline granularity: output rows for convolutions, at most 16 row blocks otherwise."""
    m, _, _ = r.mkn
    if r.kind == CONV2D:
        base = r.out_shape[0] * r.out_shape[2]  # batch x output rows
    else:
        base = min(16, r.batch * m)
    n = max(base, replicas)
    return int(min(n, r.batch * m))


# --------------------------------------------------------------------------- duplication
def _dp_duplicate(lat: list[np.ndarray], cost: list[int], budget: int, objective: str) -> list[int]:
    """Choose replicas per operator minimising sum or max latency under a core budget.

    Parameters
    ----------
    lat : list of np.ndarray
        ``lat[i][d-1]`` latency of operator ``i`` with ``d`` replicas.
    cost : list of int
        Cores one replica of operator ``i`` needs.
    budget : int
        Cores available.
    objective : {'sum', 'max'}

    Returns
    -------
    list of int
        Replicas per operator (>= 1).
    """
    inf = np.inf
    combine = np.add if objective == "sum" else np.maximum
    dp = np.zeros(budget + 1)  # dp[b]: best objective of ops so far using <= b cores
    choice = []
    for li, ci in zip(lat, cost):
        new = np.full(budget + 1, inf)
        arg = np.zeros(budget + 1, dtype=np.int32)
        for d in range(1, len(li) + 1):
            need = d * ci
            if need > budget:
                break
            cand = np.full(budget + 1, inf)
            cand[need:] = combine(dp[: budget + 1 - need], li[d - 1])
            better = cand < new * (1 - 1e-12)  # strict: prefer fewer replicas on ties
            new = np.where(better, cand, new)
            arg = np.where(better, d, arg)
        dp = new
        choice.append(arg)
    b = int(np.argmin(dp))
    if not np.isfinite(dp[b]):
        raise ValueError("operators do not fit the core budget even without duplication")
    reps = []
    for arg, ci in zip(reversed(choice), reversed(cost)):
        d = int(arg[b])
        reps.append(d)
        b -= d * ci
    return list(reversed(reps))


def _greedy_duplicate(regions, cm: CostModel, tile_rows, cost, budget) -> list[int]:
    """Poly-Schedule's greedy policy: keep duplicating the slowest operator while cores remain."""
    reps = [1] * len(regions)
    used = sum(cost)
    lat = [cm.region_ns(r, 1, tile_rows[i]) for i, r in enumerate(regions)]
    while True:
        order = np.argsort(lat)[::-1]
        for i in order:
            if used + cost[i] <= budget and reps[i] < regions[i].batch * regions[i].mkn[0] and regions[i].kind != DMATMUL:
                reps[i] += 1
                used += cost[i]
                lat[i] = cm.region_ns(regions[i], reps[i], tile_rows[i])
                break
        else:
            return reps


def _max_replicas(r: Region, budget_units: int, unit_cost: int) -> int:
    if r.kind == DMATMUL:
        return 1  # run-time weights: duplicates would each need rewriting
    return max(1, min(r.batch * r.mkn[0], budget_units // max(1, unit_cost)))


def schedule(regions: list[Region], hw: CIMHardware, strategy: str = "cim-mlc",
             options: Options | None = None, producers: dict[str, list[str]] | None = None,
             wbits: int = 8, ibits: int = 8) -> Schedule:
    """Schedule regions on a chip.

    Parameters
    ----------
    regions : list of Region
        In execution order.
    hw : CIMHardware
    strategy : str
        One of :data:`STRATEGIES`.
    options : Options, optional
        Override the strategy's techniques (ablations).
    producers : dict, optional
        Region name -> names of the regions whose outputs it consumes.
    wbits, ibits : int
        Quantised precision.

    Returns
    -------
    Schedule
    """
    opts = options or Options.for_strategy(strategy, hw)
    cm = CostModel(hw, wbits, ibits)
    sched = Schedule(strategy, opts)
    ra = hw.crossbar.rows_active
    tile_rows = {r.name: hw.crossbar.rows for r in regions}
    xbs_total = hw.total_crossbars

    # ---- segmentation: maximal consecutive sub-graphs whose single copies fit
    def xbs_of(r):
        return cm.tiles(r, tile_rows[r.name])

    def cores_of(r):
        return cm.plan_cores(r, tile_rows[r.name])

    core_mode = hw.chip.computing_mode == "core"

    def footprint(r):  # crossbars one copy occupies (whole cores in core mode)
        return cores_of(r) * hw.core.crossbars if core_mode else xbs_of(r)

    unit_budget = hw.chip.cores
    segments: list[list[Region]] = []
    cur: list[Region] = []
    used = 0
    for r in regions:
        need = footprint(r)
        if cur and used + need > xbs_total:
            segments.append(cur)
            cur, used = [], 0
        cur.append(r)
        used += need
    if cur:
        segments.append(cur)
    fits = len(segments) == 1 and sum(footprint(r) for r in regions) <= xbs_total
    if len(segments) > 1 and opts.duplication == "dp":
        segments = _refine_segments(segments, cm, tile_rows, unit_budget, opts, footprint, xbs_total)

    for s_idx, seg in enumerate(segments):
        resident = fits
        budget = unit_budget
        costs = [cores_of(r) for r in seg]
        if sum(costs) > budget:  # a single region larger than the chip: passes, no duplication
            reps = [1] * len(seg)
        elif opts.duplication == "dp":
            lat = [
                np.array([cm.region_ns(r, d, tile_rows[r.name], resident) for d in range(1, _max_replicas(r, budget, c) + 1)])
                for r, c in zip(seg, costs)
            ]
            reps = _dp_duplicate(lat, costs, budget, "max" if opts.pipeline else "sum")
            if opts.pipeline:  # balance: no more replicas than the bottleneck needs
                bott = max(l[d - 1] for l, d in zip(lat, reps))
                reps = [int(np.argmax(l <= bott * (1 + 1e-9))) + 1 for l in lat]
        elif opts.duplication == "greedy":
            reps = _greedy_duplicate(seg, cm, [tile_rows[r.name] for r in seg], costs, budget)
        else:
            reps = [1] * len(seg)
        if opts.crossbar_dup:  # Eq. 1: fill the crossbars of the allocated cores
            reps = [
                max(d, min(_max_replicas(r, budget * hw.core.crossbars, 1),
                           (c * d * hw.core.crossbars) // max(1, xbs_of(r))))
                if r.kind != DMATMUL and c * hw.core.crossbars >= xbs_of(r) else d
                for r, c, d in zip(seg, costs, reps)
            ]
            # never exceed the chip's crossbars
            while sum(d * xbs_of(r) for r, d in zip(seg, reps)) > xbs_total and max(reps) > 1:
                i = int(np.argmax([d * xbs_of(r) if d > 1 else -1 for r, d in zip(seg, reps)]))
                reps[i] -= 1
        if opts.remap and ra < hw.crossbar.rows:
            # wordline level: spread each tile's rows over crossbars of rows_active rows
            # when the replicas' crossbars can hold the remapped copies
            for i, r in enumerate(seg):
                if r.kind == DMATMUL:
                    continue
                full = xbs_of(r)
                remapped = cm.tiles(r, ra)
                d_r = (reps[i] * full) // remapped
                if d_r >= 1 and cm.region_ns(r, d_r, ra, resident) < cm.region_ns(r, reps[i], hw.crossbar.rows, resident):
                    tile_rows[r.name] = ra
                    reps[i] = d_r
        for r, c, d in zip(seg, costs, reps):
            tr = tile_rows[r.name]
            sched.plans[r.name] = RegionPlan(
                replicas=d, tile_rows=tr, tiles=xbs_of(r), cores=c, segment=s_idx,
                latency_ns=cm.region_ns(r, d, tr, resident, passes=max(1, math.ceil(xbs_of(r) / xbs_total))),
                write_ns=(0.0 if resident and r.kind != DMATMUL else
                          cm.write_ns(r, tr) * max(1, math.ceil(xbs_of(r) / xbs_total))),
            )
    sched.segments = len(segments)
    sched.estimate_ns, sched.estimate_regions_ns = cm.graph_ns(regions, sched.plans, opts.pipeline, producers)
    return sched


def _refine_segments(segments, cm, tile_rows, budget, opts, footprint, capacity):
    """CIM-MLC's segment construction: pop trailing operators while that lowers latency."""

    def seg_latency(seg):
        if not seg:
            return 0.0
        costs = [cm.plan_cores(r, tile_rows[r.name]) for r in seg]
        if sum(costs) > budget:
            return sum(cm.region_ns(r, 1, tile_rows[r.name], False) for r in seg)
        lat = [
            np.array([cm.region_ns(r, d, tile_rows[r.name], False) for d in range(1, _max_replicas(r, budget, c) + 1)])
            for r, c in zip(seg, costs)
        ]
        reps = _dp_duplicate(lat, costs, budget, "max" if opts.pipeline else "sum")
        vals = [l[d - 1] for l, d in zip(lat, reps)]
        return max(vals) if opts.pipeline else sum(vals)

    out = []
    pending = [r for seg in segments for r in seg]
    while pending:
        # maximal prefix that fits
        used, n = 0, 0
        for r in pending:
            c = footprint(r)
            if n and used + c > capacity:
                break
            used += c
            n += 1
        seg = pending[:n]
        # pop trailing nodes while moving them to the next segment lowers the total
        while len(seg) > 1:
            whole = seg_latency(seg)
            split = seg_latency(seg[:-1]) + seg_latency([seg[-1]])
            if split < whole:
                seg = seg[:-1]
            else:
                break
        out.append(seg)
        pending = pending[len(seg):]
    return out

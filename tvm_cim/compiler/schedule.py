"""Multi-level scheduling of CIM regions: segmentation, duplication, pipelining (the pieces' driver).

The method is CIM-MLC (paper 003, sec. 3.3), applied per computing mode, and
each technique is a piece of :mod:`tvm_cim.compiler.strategies`:

* **graph level** (all modes): segmentation into sub-graphs that fit the
  chip when the network does not (each segment with its weight rewrites
  costed), operator duplication over cores by dynamic programming under the
  core budget and balanced to the bottleneck, inter-layer pipelining;
* **crossbar level** (crossbar and wordline modes): duplication over the
  crossbars of the cores an operator holds (Eq. 1), virtual crossbars and the
  MVM-grained pipeline;
* **wordline level** (wordline mode): rows remapped over crossbars so that
  ``rows_active`` does not serialise an MVM.

:func:`segment` and :func:`duplicate` are what the ``Segment`` and
``DuplicateWeights`` passes run; :func:`schedule` runs both on a list of
regions (the Python API used without Relax).  Latencies come from the fast
estimate (:class:`tvm_cim.compiler.estimate.Estimator`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import weakref
from dataclasses import dataclass, field

import numpy as np

from ..hardware.schema import CIMHardware
from . import unfold
from .estimate import Estimator, GraphPrefix
from .plan import passes_of
from .region import DMATMUL, Region
from .strategies import Options, duplication, get, modes, replication, segmentation


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
    write_ns : float
        Weight writes of one inference (zero when the weights are resident).
    resident : bool
        Weights written once, before the first inference.
    passes : int
        Passes of a layer larger than the chip.
    mem_in, mem_out : int
        Dual-mode arrays in memory mode its input is loaded from and its
        output is stored into (``AllocateArrayModes``; 0: global buffer).
    switch_ns : float
        Mode switches before its segment starts (on the segment's first region).
    mem_wb : int
        Memory-mode arrays holding its output that is still needed after its
        segment: written back at the end of the region (T^wb).
    pass_xbs : int
        CMSwitch's split of operators larger than the chip: its segment's
        regions run one after another, each on crossbars ``0 .. pass_xbs - 1``
        (the compute-mode arrays; the others hold the segment's data in memory
        mode), in passes (sub-operators) when larger; 0: the usual placement.
    inplace_xbs : tuple of int
        CMSwitch's keys in place: a ``dmatmul`` whose run-time operand its
        producer stored into these memory-mode arrays, switched to compute
        mode keeping the data (its one replica's crossbars; neither loaded nor
        written); on the producer: the arrays it stores into (switched to
        memory mode at its start every inference).
    ag_cores : list, optional
        PIMCOMP's AG layout: per replica, the core of each of its AG units
        (:func:`~tvm_cim.compiler.strategies.replication.unit_cores`); ``Place``
        puts the crossbars there.  None: replicas packed.
    mem_ring : int
        CMSwitch's line buffer: its output is kept in its ``mem_out`` arrays as a rolling buffer of this many
        bytes (the rows its only consumer's window still needs, :func:`~tvm_cim.compiler.strategies.modes.ring_bytes`),
        not whole; 0: whole (or not in memory mode).
    compute_xbs : tuple of tuple of int
        CMSwitch's spread layout (:func:`~tvm_cim.compiler.strategies.modes.compute_layout`): per replica,
        the crossbar of every tile; empty: replicas packed from the segment's first crossbar.
    """

    replicas: int = 1
    tile_rows: int = 0
    tiles: int = 0
    cores: int = 1
    segment: int = 0
    latency_ns: float = 0.0
    write_ns: float = 0.0
    resident: bool = True
    passes: int = 1
    mem_in: int = 0
    mem_out: int = 0
    switch_ns: float = 0.0
    mem_wb: int = 0
    pass_xbs: int = 0
    inplace_xbs: tuple = ()
    ag_cores: list | None = None
    compute_xbs: tuple = ()
    mem_ring: int = 0


@dataclass
class Schedule:
    """The result of scheduling: one plan per region plus the options used."""

    strategy: str
    options: Options
    plans: dict[str, RegionPlan] = field(default_factory=dict)
    segments: int = 1
    estimate_ns: float = 0.0
    estimate_regions_ns: dict[str, float] = field(default_factory=dict)


def _core_mode(hw: CIMHardware) -> bool:
    return hw.chip.computing_mode == "core"


def footprint(r: Region, est: Estimator, tile_rows: int) -> int:
    """Crossbars one copy of a region occupies (whole cores in core mode)."""
    if _core_mode(est.hw):
        return est.plan_cores(r, tile_rows) * est.hw.core.crossbars
    return est.tiles(r, tile_rows)


def segment(regions: list[Region], hw: CIMHardware, opts: Options, est: Estimator,
            producers: dict[str, list[str]] | None = None) -> tuple[list[int], bool]:
    """Segment of every region, and whether the weights of the whole network fit at once (resident).

    ``producers`` (region -> regions feeding it) is what CMSwitch's DP
    (``segmentation='dp'``) needs to cost pipelined segments.

    Returns
    -------
    segment_of : list of int
        Per region, in order.
    resident : bool
    """
    rows = {r.name: hw.crossbar.rows for r in regions}
    cap = hw.total_crossbars

    def fp(r):
        return footprint(r, est, rows[r.name])

    if opts.segmentation == "dp":
        segs_dp, fits = modes.segment_dp(regions, est, producers or {}, make_plan)
        seg_of = [i for i, sm in enumerate(segs_dp) for _ in range(sm.last - sm.first + 1)]
        if opts.modes == "dual" and not fits and 1 < len(segs_dp) <= modes.REFINE_MAX_SEGMENTS:  # with carries

            def cost(so):
                segs = allocate_segments(regions, so, fits, est, producers or {}, per_copy=False,
                                         packed=modes.DP_PACKED)[0]
                return sum(modes.segment_ns(regions, sm, est, producers or {}, make_plan, fits) for sm in segs) + sum(
                    modes.switch_ns(hw, *modes.switch_counts(a.alloc.memory_arrays, b.alloc.memory_arrays))
                    for a, b in zip(segs, segs[1:]))

            seg_of, _ = modes.refine_cut(seg_of, cost)
        return seg_of, fits
    segs = segmentation.greedy(regions, fp, cap)
    fits = len(segs) == 1 and sum(fp(r) for r in regions) <= cap
    if len(segs) > 1 and opts.segmentation == "refine":
        segs = segmentation.refine(regions, est, rows, hw.cores, opts.pipeline, fp, cap)
    return [i for i, s in enumerate(segs) for _ in s], fits


def duplicate(regions: list[Region], segment_of: list[int], resident: bool, hw: CIMHardware, opts: Options,
              est: Estimator, producers: dict[str, list[str]] | None = None,
              summary: list | None = None) -> dict[str, RegionPlan]:
    """Replicas and tile rows of every region, segment by segment, with their estimated latency.

    ``producers`` (region -> regions feeding it) is what PIMCOMP's low-latency
    GA needs for its fitness; ``summary``, when given, receives per segment
    what the GA found and our DP on the same problem
    (:func:`pimcomp_replication`).
    """
    tile_rows = {r.name: hw.crossbar.rows for r in regions}
    budget = hw.cores
    plans: dict[str, RegionPlan] = {}
    by_seg: dict[int, list[Region]] = {}
    for r, s in zip(regions, segment_of):
        by_seg.setdefault(s, []).append(r)
    for s_idx, seg in by_seg.items():
        if opts.unfolding in ("ht", "ll"):  # PIMCOMP's formats, where the segment still fits the chip with them
            trial = {r.name: unfold.tile_rows(r, unfold.choose(r, opts.unfolding, est), hw.crossbar.rows) for r in seg}
            if sum(footprint(r, est, trial[r.name]) for r in seg) <= hw.total_crossbars:
                tile_rows.update(trial)
        costs = [est.plan_cores(r, tile_rows[r.name]) for r in seg]
        if sum(costs) > budget:  # a single region larger than the chip: passes, no duplication
            reps = [1] * len(seg)
        elif opts.duplication == "dp":
            reps = duplication.dp(seg, est, tile_rows, costs, budget, resident, opts.pipeline)
        elif opts.duplication == "greedy":
            reps = duplication.greedy(seg, est, tile_rows, costs, budget)
        elif opts.duplication == "ga":
            reps, info = pimcomp_replication(seg, est, tile_rows, hw, opts, resident, s_idx, producers)
            if summary is not None:
                summary.append(info)
            layouts = info.pop("_unit_cores")
        else:
            reps = [1] * len(seg)
        if opts.crossbar_dup:
            reps = duplication.crossbar_level(seg, reps, costs, est, tile_rows, budget, hw)
            joint = opts.remap and opts.remap_joint
            alt = (duplication.crossbar_dp(seg, est, tile_rows, hw, resident, opts.pipeline, remap=joint)
                   if opts.crossbar_dp else None)
            if alt is not None:  # the DP at crossbar granularity, kept where the graph estimate finds it faster
                def graph(rs, seg=seg):
                    rows = dict(tile_rows)
                    if joint:  # both as the wordline level will remap them
                        rs = duplication.remap(seg, rs, est, rows, hw, resident)
                    pl = {r.name: make_plan(r, est, d, rows[r.name], s_idx, resident, latency=False)
                          for r, d in zip(seg, rs)}
                    return est.graph_ns(seg, pl, opts.pipeline, producers)[0]
                if graph(alt) < graph(reps):
                    reps = alt
        if opts.remap:
            reps = duplication.remap(seg, reps, est, tile_rows, hw, resident)
        for i, (r, c, d) in enumerate(zip(seg, costs, reps)):
            plans[r.name] = make_plan(r, est, d, tile_rows[r.name], s_idx, resident, cores=c)
            if opts.duplication == "ga" and sum(costs) <= budget and hw.chip.computing_mode != "core":
                plans[r.name].ag_cores = layouts[i]
    return plans


def pimcomp_replication(seg: list[Region], est: Estimator, tile_rows: dict, hw: CIMHardware, opts: Options,
                        resident: bool, s_idx: int = 0, producers: dict[str, list[str]] | None = None,
                        compare_dp: bool = True) -> tuple[list[int], dict]:
    """PIMCOMP's GA replication of one segment (:mod:`~tvm_cim.compiler.strategies.replication`).

    The fitness is the shared estimate: the pipeline cycle for high
    throughput (``opts.pipeline`` off), one input's latency through the
    element pipeline for low latency.  With ``compare_dp`` our duplication DP
    gets the same problem and both are scored by the same fitness.

    Returns
    -------
    replicas : list of int
    summary : dict
        Per-layer unfolding, replicas and core layout, the GA's and the DP's
        fitness and time; ``_unit_cores``: per layer, the core of every AG unit
        of every replica (what ``Place`` follows).
    """
    prob = replication.problem(seg, est, tile_rows, hw, resident, layout=hw.chip.computing_mode != "core")
    memo = contextlib.nullcontext()
    if opts.pipeline:
        prefix = GraphPrefix()  # plans follow from the replicas: genomes sharing first layers share their state

        def fitness(reps):
            plans = {r.name: make_plan(r, est, int(d), tile_rows[r.name], 0, resident, latency=False)
                     for r, d in zip(seg, reps)}
            return est.graph_ns(seg, plans, True, producers, prefix=prefix)[0]
        search = fitness
        memo = _memo_chunk_finish(est)
    else:
        fitness, search = prob.cycle_ns, prob.cycle_search
    with memo:
        dp = replication.dp_same_problem(prob, fitness) if compare_dp or opts.ga_seed_dp else None
        seeds = [dp.detail["genome"]] if opts.ga_seed_dp and dp.detail["genome"] is not None else None
        out, best = replication.ga(prob, search, generations=opts.ga_generations, population=opts.ga_population,
                                   time_limit=opts.ga_time_limit, seed=opts.ga_seed, seeds=seeds, report=fitness,
                                   evaluations=opts.ga_evaluations)
    lay = replication.layout(prob, best)
    cores_used = {c for cs in lay.values() for c, _ in cs}
    info = {
        "segment": s_idx,
        "objective": "one input's latency (element pipeline)" if opts.pipeline else "pipeline cycle",
        "ga": {"fitness_ns": out.fitness, "seconds": out.seconds, "seeded_with_dp": seeds is not None,
               **{k: v for k, v in out.detail.items() if k != "history"}},
        "dp": ({"fitness_ns": dp.fitness, "seconds": dp.seconds, "replicas": dp.replicas,
                "packs": dp.detail["packs"], "counts_ns": dp.detail["counts_ns"]} if dp else None),
        "cores_used": len(cores_used),
        "_unit_cores": replication.unit_cores(prob, best),
        "layers": {r.name: {"unfolding": _unfolding_name(r, opts, tile_rows[r.name], hw, est), "tile_rows": tile_rows[r.name], "array_groups": int(prob.ags[i]),
                            "replicas": out.replicas[i], "cores": lay.get(i, [])}
                   for i, r in enumerate(seg)},
    }
    return out.replicas, info


@contextlib.contextmanager
def _memo_chunk_finish(est: Estimator):
    """Within the block, ``est.chunk_finish`` remembers its answers (incremental evaluation of the GA).

    One input's latency is evaluated region after region; a mutation changes
    one or two layers' replicas, so every region before the first changed one
    (and every later one whose inputs arrive at the same times) repeats a call
    already made with the same arguments.  The chunks of a region at a replica
    count and their per-chunk work do not depend on the input times: they are
    remembered too (every region at every count, once).  The answers are the
    same objects (the graph estimate only reads them).
    """
    orig, cache = est.chunk_finish, {}
    orig_chunks, chunk_cache = est.chunks, {}
    orig_work, work_cache = est._chunk_work, {}

    def cached(r, replicas, tile_rows, resident=True, passes=1, t_in=0.0, **kw):
        key = (r.name, replicas, tile_rows, resident, passes, np.asarray(t_in, dtype=float).tobytes(),
               tuple(sorted(kw.items())))
        if key not in cache:
            cache[key] = orig(r, replicas, tile_rows, resident, passes, t_in, **kw)
        return cache[key]

    def chunks(r, replicas):
        key = (r.name, replicas)
        if key not in chunk_cache:
            chunk_cache[key] = orig_chunks(r, replicas)
        return chunk_cache[key]

    def work(r, ch, tile_rows, mem_in=0, mem_out=0):
        key = (r.name, id(ch), tile_rows, mem_in, mem_out)
        hit = work_cache.get(key)
        if hit is None or hit[0] is not ch:  # ch kept in the entry: its id is not reused
            hit = work_cache[key] = (ch, orig_work(r, ch, tile_rows, mem_in, mem_out))
        return hit[1]

    est.chunk_finish, est.chunks, est._chunk_work = cached, chunks, work
    try:
        yield
    finally:
        del est.chunk_finish, est.chunks, est._chunk_work  # back to the methods


def _unfolding_name(r: Region, opts: Options, rows: int, hw: CIMHardware, est: Estimator) -> str:
    """The Table IV format a region runs in (the chosen one, unless its segment did not fit with it)."""
    if opts.unfolding in ("ht", "ll"):
        f = unfold.choose(r, opts.unfolding, est)
        if unfold.tile_rows(r, f, hw.crossbar.rows) == rows:
            return f.name
    return "(IK2,O,1)"


def allocate_modes(regions: list[Region], segment_of: list[int], resident: bool, est: Estimator,
                   producers: dict[str, list[str]] | None = None, time_limit: float = modes.TIME_LIMIT_S,
                   seed: int = 0, operands: dict[str, list[list[str]]] | None = None
                   ) -> tuple[dict[str, RegionPlan], list[dict]]:
    """CMSwitch's allocation of every segment (copies, memory-mode arrays, switches), as plans and a summary.

    ``operands`` (per region and operand, the regions reaching it) lets a
    ``dmatmul`` use its run-time operand in place (keys in place,
    :func:`modes.inplace_candidates`) where the shared estimate finds the
    segment faster with it.

    Returns
    -------
    plans : dict
        Region name -> :class:`RegionPlan` with ``replicas``, ``mem_in``,
        ``mem_out`` and (first region of a segment) ``switch_ns``.
    summary : list of dict
        Per segment: its regions, arrays in compute and memory mode, the
        allocation per region, the physical memory arrays and switches,
        the solver's status and time, which allocation was kept
        (``chosen``: the MIP's, ``all-compute`` -- CIM-MLC's duplication of
        the segment -- when the shared estimate finds it faster, or
        ``mip+carry`` when re-allocated to keep data in memory mode across
        a boundary, :func:`modes.carry`) and ``carried_in`` (per producer of
        an earlier segment, the memory-mode arrays holding its output).
    """
    hw = est.hw
    producers = producers or {}
    segs, chosen = allocate_segments(regions, segment_of, resident, est, producers, time_limit, seed)
    for s_idx, sm in enumerate(segs):
        seg = regions[sm.first:sm.last + 1]
        for qi, ki, t in modes.inplace_candidates(regions, sm, est, producers, operands or {}):
            before = est.graph_ns(seg, modes.segment_plans(regions, sm, est, s_idx, resident, make_plan, producers=producers),
                                  True, producers)[0]
            sm.inplace[qi] = (ki, t)
            after = est.graph_ns(seg, modes.segment_plans(regions, sm, est, s_idx, resident, make_plan, producers=producers),
                                 True, producers)[0]
            if after >= before:  # it does not pay
                del sm.inplace[qi]
    layout = modes.memory_layout(hw, segs)
    plans: dict[str, RegionPlan] = {}
    summary = []
    for s_idx, (sm, lay) in enumerate(zip(segs, layout)):
        sw = modes.switch_ns(hw, len(lay["tom"]), len(lay["toc"])) if len(segs) > 1 else 0.0
        plans.update(modes.segment_plans(regions, sm, est, s_idx, resident, make_plan, sw, latency=True,
                                         inplace_xbs=lay["inplace"], producers=producers))
        names = [r.name for r in regions[sm.first:sm.last + 1]]
        rings = modes.rings_of(regions, sm, est, producers)  # in the plans too (segment_plans)
        a = sm.alloc
        carried = {names[c]: regions[g].name for c, g in sm.carry_in.items()}
        summary.append({
            "segment": s_idx, "regions": names,
            "compute_arrays": int(a.compute_arrays), "memory_arrays": int(a.memory_arrays + sm.reserved),
            "idle_arrays": int(hw.total_crossbars - a.compute_arrays - a.memory_arrays - sm.reserved),
            "serial_xbs": int(sm.pass_xbs),
            "allocation": {n: {"replicas": int(d), "memory_out": int(b), "input_from": (
                names[p] if p is not None and a.memory[p] else carried.get(n)), "write_back": bool(b and lv),
                "line_buffer_bytes": int(rings.get(i, 0))}
                for i, (n, d, b, p, lv) in enumerate(zip(names, a.replicas, a.memory, sm.producer,
                                                         sm.live or [False] * len(names)))},
            "carried_in": {regions[g].name: list(x) for g, x in sm.held.items()},
            "memory_xbs": {n: list(x) for n, x in zip(names, lay["out"]) if x},
            "switch": {"TOM": list(lay["tom"]), "TOC": list(lay["toc"]), "ns": sw},
            "keys_in_place": {names[qi]: {"keys_from": names[ki], "xbs": list(lay["inplace"][qi])}
                              for qi, (ki, _) in sm.inplace.items()},
            "solver": {"status": a.status, "seconds": a.seconds, "gap": a.gap, "bound_ns": a.latency_ns,
                       "time_limit_s": time_limit},
            "chosen": chosen[s_idx][0], "estimate_mip_ns": chosen[s_idx][1],
            "estimate_all_compute_ns": chosen[s_idx][2],
        })
    return plans, summary


_ALL_COMPUTE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # Estimator -> segment -> CIM-MLC's


def allocate_segments(regions: list[Region], segment_of: list[int], resident: bool, est: Estimator,
                      producers: dict[str, list[str]], time_limit: float = modes.TIME_LIMIT_S,
                      seed: int = 0, per_copy: bool = True, packed: bool = False) -> tuple[list, list]:
    """Every segment's allocation before keys in place (:func:`allocate_modes`): the MIP's or CIM-MLC's
    duplication, whichever the shared estimate finds faster, then the carries (:func:`modes.carry`).

    ``per_copy``: also try the per-copy MIP per segment (not while the cut is refined: compile time).
    ``packed``: no spread layout (:func:`modes.allocate_segment`; while the cut is refined, as the DP).

    Returns
    -------
    segs : list of modes.SegmentModes
    chosen : list of tuple
        Per segment: which allocation was kept, the estimate of the MIP's and of CIM-MLC's.
    """
    hw = est.hw
    bounds: dict[int, list[int]] = {}
    for i, s_idx in enumerate(segment_of):
        bounds.setdefault(s_idx, []).append(i)
    segs = [modes.allocate_segment(regions, idx[0], idx[-1], est, producers, time_limit, seed, make_plan,
                                   packed=packed)
            for _, idx in sorted(bounds.items())]
    # every array computing is one of the allocations CMSwitch chooses from: keep CIM-MLC's duplication
    # of the segment (all arrays computing) when the shared estimate says it is faster than the MIP's
    # (CIM-MLC's duplication as it was before its crossbar-granularity DP: with that DP, all-compute wins on
    # small chips where the MIP keeps memory-mode arrays; whether CMSwitch should compare with it is open)
    mlc = dataclasses.replace(get("cim-mlc").options(hw), crossbar_dp=False)
    memo = _ALL_COMPUTE.setdefault(est, {})
    chosen = []
    for s_idx, sm in enumerate(segs):
        seg = regions[sm.first:sm.last + 1]
        key = (tuple(r.name for r in seg), resident)
        if key not in memo:
            theirs = duplicate(seg, [s_idx] * len(seg), resident, hw, mlc, est)
            memo[key] = ([theirs[r.name].replicas for r in seg], est.graph_ns(seg, theirs, True, producers)[0])
        reps, t_theirs = memo[key]
        t_mine = modes.segment_ns(regions, sm, est, producers, make_plan, resident)
        label = "mip"
        # the MIP with scatters split among copies too (on few segments: a compile-time bound, as the cut's
        # refinement; MobileNetV2@224, 19 segments, 12.410 -> 12.326 ms for about +0.35 s of compile CPU)
        if per_copy and modes.CORE_SHARED and sm.alloc.status != "passes" and len(segs) <= modes.REFINE_MAX_SEGMENTS:
            alt = modes.allocate_segment(regions, sm.first, sm.last, est, producers, time_limit, seed, make_plan,
                                         per_copy=True)
            t_alt = modes.segment_ns(regions, alt, est, producers, make_plan, resident)
            if t_alt < t_mine:
                segs[s_idx] = sm = alt
                t_mine, label = t_alt, "mip-per-copy"
        if sm.alloc.status != "passes" and t_theirs < t_mine:
            a = sm.alloc
            sm.alloc = dataclasses.replace(a, replicas=list(reps), memory=[0] * len(seg), compute_arrays=sum(
                d * est.tiles(r, hw.crossbar.rows) for d, r in zip(reps, seg)))
            chosen.append(("all-compute", t_mine, t_theirs))
        else:
            chosen.append((label, t_mine, t_theirs))
    for s_idx in modes.carry(regions, segs, est, producers, make_plan, resident, time_limit, seed, packed):
        for k in (s_idx, s_idx + 1):  # re-allocated with data kept across the boundary
            chosen[k] = ("mip+carry",) + chosen[k][1:]
    return segs, chosen


def make_plan(r: Region, est: Estimator, replicas: int, tile_rows: int, segment_idx: int, resident: bool,
              cores: int | None = None, latency: bool = True, mem_in: int = 0, mem_out: int = 0,
              switch_ns: float = 0.0, mem_wb: int = 0, pass_xbs: int = 0, inplace_xbs: tuple = (),
              compute_xbs: tuple = (), mem_ring: int = 0) -> RegionPlan:
    """The plan of a region from its decisions, with the estimate's latency (if ``latency``) and write time."""
    tiles = est.tiles(r, tile_rows)
    passes = passes_of(tiles, pass_xbs or est.hw.total_crossbars)
    return RegionPlan(
        replicas=replicas, tile_rows=tile_rows, tiles=tiles,
        cores=est.plan_cores(r, tile_rows) if cores is None else cores, segment=segment_idx,
        latency_ns=est.region_ns(r, replicas, tile_rows, resident, passes=passes, mem_in=mem_in,
                                 mem_out=mem_out, mem_wb=mem_wb, cap=pass_xbs or None,
                                 inplace=bool(inplace_xbs) and r.kind == DMATMUL) if latency else 0.0,
        write_ns=(0.0 if (resident and r.kind != DMATMUL) or (inplace_xbs and r.kind == DMATMUL)
                  else est.write_ns(r, tile_rows) * passes),
        resident=resident, passes=passes, mem_in=mem_in, mem_out=mem_out, switch_ns=switch_ns, mem_wb=mem_wb,
        pass_xbs=pass_xbs, inplace_xbs=tuple(inplace_xbs), compute_xbs=tuple(tuple(x) for x in compute_xbs),
        mem_ring=mem_ring,
    )


def schedule(regions: list[Region], hw: CIMHardware, strategy: str = "cim-mlc",
             options: Options | None = None, producers: dict[str, list[str]] | None = None,
             wbits: int = 8, ibits: int = 8) -> Schedule:
    """Schedule regions on a chip (segmentation, duplication, the graph estimate).

    Parameters
    ----------
    regions : list of Region
        In execution order.
    hw : CIMHardware
    strategy : str
        A registered strategy (:func:`tvm_cim.compiler.strategies.names`).
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
    opts = options or get(strategy).options(hw)
    est = Estimator.of(hw, wbits, ibits, opts)
    segment_of, resident = segment(regions, hw, opts, est, producers)
    plans = duplicate(regions, segment_of, resident, hw, opts, est, producers)
    if opts.modes == "dual":
        plans, _ = allocate_modes(regions, segment_of, resident, est, producers)
    sched = Schedule(strategy, opts, plans, segments=max(segment_of, default=0) + 1)
    sched.estimate_ns, sched.estimate_regions_ns = est.graph_ns(regions, plans, opts.pipeline, producers)
    return sched

"""The critical path of a scheduled inference, and what each region spends on it.

:func:`critical_path` walks back from the operation that finishes last,
each time to what its start waited for, under the rules of
:func:`tvm_cim.simulator.timeline.schedule_graph`:

* ``dep`` -- an earlier operation of the same region (a chunk's own steps:
  load, quantise, scatter, reads, reduction, post-processing, store);
* ``producer`` -- an output store of a region producing its input (a load
  waits for the share of the producer's output it needs);
* ``own`` -- its resource was busy with an earlier operation of the same
  region: a read queued behind an earlier chunk on the same replica's
  crossbars (a load or scatter behind the region's own transfers);
* ``shared`` -- its resource (global-buffer port, links, ALUs) was busy with
  another region;
* ``power`` -- the peak-power cap held it back.

Every instant of the latency belongs to one operation on the path, so the
time the path spends in each region adds up to the latency.  A region's
time on the path splits into ``run`` (the chunks that carried the path
through it: the operations after the last ``own`` edge) and ``queue``
(earlier chunks on its own crossbars ahead of that one); waiting for a
producer shows as the producer's own time on the path.
"""

from __future__ import annotations

import bisect
from collections import defaultdict

import numpy as np

from .timeline import Events, Timeline

_EPS = 1e-6  # ns: times computed by the same additions compare equal; this absorbs rounding


def _class(resource: str) -> str:
    return resource.split(":")[0]


def critical_path(regions: list[tuple[str, Events, int]], producers: dict[str, list[str]], pipeline: bool,
                  tl: Timeline) -> dict:
    """The critical path of a timeline and its split over regions.

    Parameters
    ----------
    regions : list of (name, Events, segment)
        What :func:`~tvm_cim.simulator.timeline.schedule_graph` scheduled, in the same order.
    producers : dict
        Region name -> regions whose outputs it consumes.
    pipeline : bool
        The inter-layer pipeline (as scheduled).
    tl : Timeline
        The scheduled inference.

    Returns
    -------
    dict
        ``latency_ns``; ``path_ns``: the summed durations on the path
        (equals the latency when nothing else held the path: the check that
        the walk follows the scheduler's rules); ``edges``: time per kind of
        edge the path took into an operation; ``regions``: per region (in
        order) ``path_ns``, ``run_ns``, ``queue_ns``, ``reads`` (crossbar
        reads on the path), ``entered`` (how the path entered it, going
        forward: ``producer``, ``shared`` or ``start``) and its timeline
        ``span_ns``; ``stretches``: consecutive path operations in one
        region, in time order.
    """
    offsets = np.cumsum([0] + [len(ev) for _, ev, _ in regions])
    names = [n for n, _, _ in regions]
    index = {n: k for k, n in enumerate(names)}
    start, finish = tl.start, tl.finish
    # resource -> (finish times sorted, global indices), to find who held a resource until an operation started
    by_res: dict[str, list] = defaultdict(list)
    for k, (_, ev, _) in enumerate(regions):
        base = int(offsets[k])
        for i, rs in enumerate(ev.res):
            if ev.dur[i] > 0:
                for r in rs:
                    by_res[r].append(base + i)
    res_index = {}
    for r, idx in by_res.items():
        a = np.asarray(idx)
        order = np.argsort(finish[a], kind="stable")
        res_index[r] = (finish[a][order], a[order])
    prev_end, cur, floor_seg = 0.0, None, 0.0
    floor_of, prev_of = [], []  # per region: the earliest start of its operations, and the previous regions' end
    for k, (_, _, seg) in enumerate(regions):
        if seg != cur:
            cur, floor_seg = seg, prev_end
        floor_of.append(floor_seg if pipeline else prev_end)
        prev_of.append(prev_end)
        if offsets[k + 1] > offsets[k]:
            prev_end = max(prev_end, float(finish[offsets[k]:offsets[k + 1]].max()))
    inputs = [{i: (f0, f1) for i, f0, f1 in ev.inputs} for _, ev, _ in regions]
    outputs = [ev.outputs for _, ev, _ in regions]

    def locate(g: int) -> tuple[int, int]:
        k = int(np.searchsorted(offsets, g, side="right")) - 1
        return k, g - int(offsets[k])

    def holder(r: str, t: float, me: int) -> int | None:
        fins, idx = res_index[r]
        j = bisect.bisect_right(fins, t + _EPS) - 1
        while j >= 0 and fins[j] > t - _EPS:
            if idx[j] != me:
                return int(idx[j])
            j -= 1
        return None

    g = int(np.argmax(finish)) if len(finish) else -1
    path: list[tuple[int, str]] = []  # (global index, kind of the edge into it)
    while g >= 0:
        k, i = locate(g)
        ev = regions[k][1]
        base = int(offsets[k])
        best_t, best, kind = floor_of[k], None, "start"
        deps = ev.deps[i]
        for d in deps:
            f = finish[base + int(d)]
            if f > best_t + _EPS or (best is None and f >= best_t - _EPS and f > 0):
                best_t, best, kind = f, base + int(d), "dep"
        if i in inputs[k]:
            f0, f1 = inputs[k][i]
            for p in producers.get(names[k], []):
                kp = index.get(p)
                if kp is None or kp >= k:
                    continue
                bp = int(offsets[kp])
                for j, g0, g1 in outputs[kp]:
                    if (not pipeline or (g0 < f1 - 1e-12 and g1 > f0 + 1e-12)) and finish[bp + j] > best_t + _EPS:
                        best_t, best, kind = finish[bp + j], bp + j, "producer"
            if not pipeline and prev_of[k] > best_t + _EPS:
                best_t, best, kind = prev_of[k], None, "previous"
        s = start[g]
        if s > best_t + _EPS:  # a resource (or the power cap) held it back
            best, kind = None, "power"
            for r in ev.res[i]:
                h = holder(r, s, g)
                if h is not None:
                    best, kind = h, "own" if locate(h)[0] == k else "shared"
                    break
            if best is None:  # the power cap: a read ending when it started
                for r, (fins, idx) in res_index.items():
                    if r.startswith("vxb:"):
                        h = holder(r, s, g)
                        if h is not None:
                            best = h
                            break
        if best is None and kind in ("start", "previous") and best_t > _EPS:  # the previous segment's end
            cand = np.flatnonzero(np.abs(finish[:base] - best_t) < _EPS)
            best = int(cand[-1]) if len(cand) else None
        path.append((g, kind))
        if best is None:
            break
        g = best
    path.reverse()  # time order; path[j][1] is the edge from path[j - 1] into path[j]
    edges: dict[str, float] = defaultdict(float)
    stretches = []
    for g, kind in path:
        k, i = locate(g)
        dur = float(finish[g] - start[g])
        edges[kind] += dur
        if not stretches or stretches[-1]["region"] != names[k]:
            stretches.append({"region": names[k], "entered": kind if kind in ("producer", "shared", "power") else "start",
                              "t0_ns": float(start[g]), "t1_ns": float(finish[g]), "path_ns": 0.0, "queue_ns": 0.0,
                              "reads": 0, "_since_own": 0.0})
        st = stretches[-1]
        if kind == "own":  # everything so far in this stretch was an earlier chunk ahead of this one
            st["queue_ns"] += st["_since_own"]
            st["_since_own"] = 0.0
        st["_since_own"] += dur
        st["path_ns"] += dur
        st["t1_ns"] = float(finish[g])
        st["reads"] += int(regions[k][1].analog[i])
    per = {n: {"path_ns": 0.0, "run_ns": 0.0, "queue_ns": 0.0, "reads": 0, "entered": [], "span_ns": 0.0}
           for n in names}
    for st in stretches:
        st.pop("_since_own")
        p = per[st["region"]]
        p["path_ns"] += st["path_ns"]
        p["queue_ns"] += st["queue_ns"]
        p["run_ns"] += st["path_ns"] - st["queue_ns"]
        p["reads"] += st["reads"]
        p["entered"].append(st["entered"])
    for n, (a, b) in tl.region_span.items():
        if n in per:
            per[n]["span_ns"] = float(b - a)
    return {"latency_ns": float(tl.latency_ns), "path_ns": float(sum(edges.values())), "edges": dict(edges),
            "regions": per, "stretches": stretches}

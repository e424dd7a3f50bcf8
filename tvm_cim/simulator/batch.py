"""A batch of inferences on one resource timeline: latency of the batch and steady-state throughput.

The simulator records the events of one inference per region
(:class:`tvm_cim.simulator.timeline.Events`); a batch of ``N`` inputs runs
the same operations ``N`` times on the same crossbars, links, ALUs and
buffer ports.  :func:`schedule_batch` puts ``N`` copies of every region's
events on one timeline (:func:`tvm_cim.simulator.timeline.schedule_graph`),
inference after inference in program order, each copy depending on the
copies of its producers *of the same input*.  A later input's operations
take the gaps earlier inputs leave on a resource, so the inputs overlap as
far as the resources allow: this is the batch (sample-granularity) pipeline,
and the throughput follows from when the inputs' last results are stored.

Within one input a schedule keeps its own pipeline: with the inter-layer
pipeline a region waits only for the part of its producers' outputs it
reads; without it, a region starts when its producers and the region before
it (program order) are done, as in a single inference; with PIMCOMP's layer
grouping, when its producers are done (independent layers run at once).  A region whose
crossbars are written during the inference (weights rewritten, or the
run-time operand of a ``dmatmul``) also waits for its own copy of the
previous input, so the write never overtakes the reads of the earlier
input.  Segments of a network larger than the chip run one after another,
input after input (weights are rewritten every inference).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .timeline import Events, Timeline, schedule_graph

WRITE_KINDS = ("CIM.write_xb", "DMOV.fetch")


@dataclass
class BatchTimeline:
    """``N`` inferences on one timeline.

    Attributes
    ----------
    batch : int
        Inputs.
    makespan_ns : float
        First input in to last result out, the whole batch.
    finish_ns : numpy.ndarray
        When each input's last result is stored (program order of the inputs).
    interval_ns : float
        Steady-state interval between results: ``(finish[N-1] - finish[0]) / (N - 1)``
        (the makespan for one input).
    timeline : Timeline
        The scheduled events of every input.
    """

    batch: int
    makespan_ns: float
    finish_ns: np.ndarray
    interval_ns: float
    timeline: Timeline

    @property
    def throughput_per_s(self) -> float:
        """Inferences per second in the steady state (``1 / interval``)."""
        return 1e9 / self.interval_ns if self.interval_ns > 0 else 0.0

    @property
    def batch_throughput_per_s(self) -> float:
        """Inferences per second over the whole batch, fill and drain included (``N / makespan``)."""
        return 1e9 * self.batch / self.makespan_ns if self.makespan_ns > 0 else 0.0


def _gated(ev: Events) -> Events:
    """The region's events behind one zero-time gate that every root operation waits for.

    The gate is the region's only input load, covering its whole input: the
    region starts when everything it depends on is done.
    """
    g = Events()
    g.add(0.0, (), (), 0.0, False, "gate")
    for i in range(len(ev)):
        deps = tuple(d + 1 for d in ev.deps[i]) or (0,)
        g.add(ev.dur[i], ev.res[i], deps, ev.energy[i], ev.analog[i], ev.kind[i])
    g.inputs.append((0, 0.0, 1.0))
    g.outputs.extend((i + 1, f0, f1) for i, f0, f1 in ev.outputs)
    return g


def schedule_batch(regions: list[tuple[str, Events, int]], producers: dict[str, list[str]], pipeline: bool,
                   batch: int, grouping: bool = False) -> BatchTimeline:
    """Schedule ``batch`` inferences of the same regions on one timeline.

    Parameters
    ----------
    regions : list of (name, Events, segment)
        One inference's regions in execution order (what
        :func:`tvm_cim.simulator.timeline.schedule_graph` takes).
    producers : dict
        Region name -> regions whose outputs its input is computed from.
    pipeline : bool
        The schedule's inter-layer pipeline within one input.
    batch : int
        Inputs (>= 1).
    grouping : bool
        Without the pipeline: a region waits for its producers' whole outputs
        only, not for the region before it, so independent layers of one
        input run at once (PIMCOMP's layer grouping, Alg. 1).

    Returns
    -------
    BatchTimeline
    """
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    segs = sorted({s for _, _, s in regions})
    seg_index = {s: i for i, s in enumerate(segs)}
    several = len(segs) > 1
    rewrites = {name for name, ev, _ in regions if any(k in WRITE_KINDS for k in ev.kind)}
    gated = {name: _gated(ev) for name, ev, _ in regions if not pipeline or name in rewrites}
    names = [name for name, _, _ in regions]
    rows: list[tuple[str, Events, int]] = []
    prods: dict[str, list[str]] = {}
    owner: list[int] = []
    for b in range(batch):
        prev = None
        for name, ev, seg in regions:
            tag = f"{name}#{b}" if batch > 1 else name
            p = [f"{q}#{b}" if batch > 1 else q for q in producers.get(name, []) if q in names]
            if not pipeline and not grouping and prev is not None:
                p.append(prev)  # without the inter-layer pipeline: after the region before it
            if name in rewrites and b > 0:
                p.append(f"{name}#{b - 1}")  # its crossbars are rewritten: after the previous input's reads
            prods[tag] = p
            e = gated.get(name, ev)
            rows.append((tag, e, b * len(segs) + seg_index[seg] if several else 0))
            owner.extend([b] * len(e))
            prev = tag
    tl = schedule_graph(rows, prods, pipeline=True)
    owner_arr = np.asarray(owner, dtype=np.int64)
    finish = np.zeros(batch)
    if len(owner_arr):
        np.maximum.at(finish, owner_arr, tl.finish)
    makespan = float(finish.max(initial=0.0))
    interval = float(finish[-1] - finish[0]) / (batch - 1) if batch > 1 else makespan
    return BatchTimeline(batch, makespan, finish, interval, tl)

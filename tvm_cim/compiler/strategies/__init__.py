"""Scheduling strategies: one registry, each strategy a composition of shared pieces.

A :class:`Strategy` names the techniques it uses (:class:`Options`); the
Relax passes of :mod:`tvm_cim.compiler.transform` run the pieces those
options select:

=================  ===========================================================
piece              module
=================  ===========================================================
segmentation       :mod:`~tvm_cim.compiler.strategies.segmentation` (greedy
                   maximal segments, CIM-MLC's refinement), CMSwitch's DP
                   (:mod:`~tvm_cim.compiler.strategies.modes`)
array modes        :mod:`~tvm_cim.compiler.strategies.modes` (CMSwitch's
                   compute / memory allocation by MIP, switches)
duplication        :mod:`~tvm_cim.compiler.strategies.duplication` (DP
                   knapsack, Poly-Schedule's greedy, crossbar-level Eq. 1,
                   wordline remapping)
dataflow           :mod:`~tvm_cim.compiler.plan` (chunks of output vectors),
                   :mod:`~tvm_cim.compiler.dataflow` (MIREDO's per-layer MIP)
pipeline           inter-layer and MVM-grained pipelines (codegen + estimate)
=================  ===========================================================

The CLI's ``--strategy`` choices, :func:`tvm_cim.scheduling`, the README and
the tests read :func:`names` and :func:`get`; a new method registers itself
with :func:`register`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Callable

from ...hardware.schema import CIMHardware


@dataclass(frozen=True)
class Options:
    """Which techniques a schedule uses (a strategy's pieces; ablations override them).

    Attributes
    ----------
    segmentation : {'greedy', 'refine', 'dp'}
        How a network larger than the chip is cut: maximal prefixes that fit
        (``greedy``), CIM-MLC's refinement that moves trailing operators to
        the next segment while that lowers latency (``refine``, used with DP
        duplication), or CMSwitch's dynamic programming over all cuts with
        every candidate segment allocated by the MIP (``dp``,
        :mod:`~tvm_cim.compiler.strategies.modes`).
    modes : {'compute', 'dual'}
        Array modes: every array computes (``compute``), or CMSwitch's
        dual-mode allocation per segment: copies in compute mode and arrays
        in memory mode for operators' outputs, by MIP (``dual``).
    dataflow : {'chunks', 'miredo'}
        Dataflow inside a region: output vectors in fixed chunks
        (:mod:`tvm_cim.compiler.plan`), or, on a chip with a ``[dataflow]``
        table, MIREDO's per-layer loop nest chosen by MIP
        (:mod:`tvm_cim.compiler.dataflow`; the program carries it as
        ``CIM.loopnest`` and the simulator executes it).
    duplication : {'none', 'dp', 'greedy', 'ga'}
        Graph-level operator duplication over cores; ``ga``: PIMCOMP's
        replication and array-group layout over crossbars by genetic algorithm.
    pipeline : bool
        Inter-layer pipeline (consumers start on partial producer output).
    crossbar_dup : bool
        Crossbar-level duplication inside the allocated cores (Eq. 1).
    crossbar_dp : bool
        With ``crossbar_dup``: re-run the duplication DP at crossbar
        granularity after Eq. 1 (a replica costs its crossbars, not whole
        cores), kept where the graph estimate finds it faster.
    mvm_pipeline : bool
        MVM-grained pipeline: crossbars start when their own input slice arrives.
    pipeline_rounds : int
        Pipeline granularity: a duplicated region's input vectors are cut
        into at least this many chunks per replica (taken round-robin), so
        its consumer starts after the first round instead of after the
        whole region (:func:`tvm_cim.compiler.plan.chunk_count`).
    pipeline_vectors : int
        Pipeline granularity in output vectors: chunks hold at most this
        many (CIM-MLC pipelines one sliding window at a time: 1), up to
        :data:`tvm_cim.compiler.plan.MAX_CHUNKS` per region; 0: output rows.
    remap : bool
        Wordline-level row remapping.
    remap_joint : bool
        With ``remap`` and ``crossbar_dp``: the crossbar-granularity DP
        knows that an operator's crossbars may hold remapped copies instead
        of full-height ones, so duplication and remapping share the
        crossbars (otherwise remapping only reuses what the DP allotted).
    unfolding : {'im2col', 'ht', 'll'}
        How convolution weights are unfolded into array groups: the usual
        im2col, or PIMCOMP's per-layer choice among the formats of Table IV
        for high throughput or low latency (:mod:`tvm_cim.compiler.unfold`).
    grouping : bool
        PIMCOMP's layer grouping (Alg. 1) without the inter-layer pipeline: a
        region waits for its producers' whole outputs only, so independent
        layers run at once (otherwise also for the region before it).
    ga_generations, ga_population, ga_evaluations, ga_time_limit, ga_seed
        PIMCOMP's genetic algorithm (``duplication='ga'``,
        :mod:`~tvm_cim.compiler.strategies.replication`): generations,
        population, budget of genomes evaluated per segment (with the
        generations and a 25-generation stagnation stop, what decides:
        deterministic), seconds per segment (a safety net only, reported
        when it stops the search), seed.
    ga_seed_dp : bool
        Put our DP's replication (packed first-fit) into the GA's first
        population (ours; the paper starts from one replica per layer).
    local_memory : bool
        PIMCOMP's pixel-level memory management (low latency): every input
        slice a core receives and every output it produces is a buffer in that
        core's local memory, allocated and freed by a heap
        (:mod:`tvm_cim.simulator.localmem`); the program carries each region's
        share of its cores' local memories (``local_bytes``) and the simulator
        stalls a sender when the memory is full and spills what cannot be held.
    local_heap : str
        With ``local_memory``: ``"core"`` (the paper's): one heap per core,
        shared by every region with arrays on it, whose buffers are allocated
        when the timeline is scheduled, in the element pipeline's time order
        (:func:`~tvm_cim.simulator.localmem.schedule_shared`); ``"region"``:
        each region gets a fixed share of its cores' memories, by the demand
        it measures running alone (a heap per region and core).
    local_spill : str
        With ``local_heap="core"``: ``"faster"``: an input slice that could
        be held only after a wait (or not at all yet) stays in the global
        buffer and is streamed from there when that finishes sooner (a runtime
        that keeps data on the chip as its local memory allows); ``"stuck"``:
        it waits for memory, and spills only when nothing can proceed.
    send_batch : int
        Alg. 2's batched sends: results are sent when this many chunks have
        been computed (the transmit-request queue's threshold); 1 sends each
        result as soon as it is computed.
    """

    segmentation: str = "greedy"
    duplication: str = "none"
    modes: str = "compute"
    dataflow: str = "chunks"
    pipeline: bool = False
    crossbar_dup: bool = False
    crossbar_dp: bool = False
    mvm_pipeline: bool = False
    pipeline_rounds: int = 1
    pipeline_vectors: int = 0
    remap: bool = False
    remap_joint: bool = False
    unfolding: str = "im2col"
    grouping: bool = False
    ga_generations: int = 100
    ga_population: int = 200
    ga_evaluations: int = 4000
    ga_time_limit: float = 300.0
    ga_seed: int = 0
    ga_seed_dp: bool = True
    local_memory: bool = False
    local_heap: str = "core"
    local_spill: str = "faster"
    send_batch: int = 1

    def as_attrs(self) -> dict:
        """The options as plain values (module attributes, reports)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @staticmethod
    def from_attrs(attrs) -> "Options":
        """Inverse of :meth:`as_attrs` (values as TVM gives them back)."""
        kw = {}
        for f in fields(Options):
            if f.name in attrs:
                v = attrs[f.name]
                kw[f.name] = bool(v) if isinstance(f.default, bool) else type(f.default)(
                    v.value if hasattr(v, "value") else v) if isinstance(f.default, (int, float)) else str(v)
        return Options(**kw)


@dataclass(frozen=True)
class Strategy:
    """A named scheduling method.

    Attributes
    ----------
    name : str
        What ``--strategy`` and :func:`tvm_cim.scheduling` take.
    doc : str
        One line for ``--help`` and the README.
    techniques : callable
        ``hw -> Options``: the pieces it uses on a chip (restricted to what
        the chip's computing mode allows).
    """

    name: str
    doc: str
    techniques: Callable[[CIMHardware], Options]

    def options(self, hw: CIMHardware) -> Options:
        return self.techniques(hw)


_REGISTRY: dict[str, Strategy] = {}
DEFAULT = "cim-mlc"


def register(strategy: Strategy) -> Strategy:
    """Add a strategy to the registry (its name must be new)."""
    if strategy.name in _REGISTRY:
        raise ValueError(f"strategy {strategy.name!r} is already registered")
    _REGISTRY[strategy.name] = strategy
    return strategy


def get(name: str) -> Strategy:
    """The strategy of a name.

    Raises
    ------
    ValueError
        Unknown name; the message lists the known ones.
    """
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown strategy {name!r}; choose one of {', '.join(_REGISTRY)}") from None


def names() -> list[str]:
    """Registered strategy names, in registration order."""
    return list(_REGISTRY)


def all_strategies() -> list[Strategy]:
    """Registered strategies, in registration order."""
    return list(_REGISTRY.values())


# CIM-MLC pipelines per MVM; chunks of a few vectors keep the simulation tractable: at least 8 per
# replica, so a consumer waits for an eighth of a duplicated producer (benchmarks/cim_multilevel.py
# reports 1, 4, 8 and 16)
PIPELINE_ROUNDS = 8
# The paper's granularity: a consumer starts on the windows it needs, one output vector at a time
# (Fig. 12: one sliding window per step).  The critical path of ResNet-50 holds about one chunk per
# stage, so whole output rows as chunks make it about 3x longer (benchmarks/cim_multilevel.py --only 8).
# benchmarks/cim_multilevel.py measures CIM-MLC's levels at this granularity; the `cim-mlc` strategy
# keeps output rows (``Options.pipeline_vectors=0``) until its cost is paid down: on ResNet-18@224 /
# prime one vector per chunk runs 1.98 instead of 2.73 ms but compiles in 13.1 instead of 9.5 s and
# simulates in 16.9 instead of 4.6 s (37.8 k crossbar reads), against issue 15's time goals.
# Opt in with ``dataclasses.replace(strategies.get("cim-mlc").options(hw), pipeline_vectors=1)``.
PIPELINE_VECTORS = 1


def _cim_mlc(hw: CIMHardware) -> Options:
    mode = hw.chip.computing_mode
    return Options(
        segmentation="refine",
        duplication="dp",
        pipeline=True,
        crossbar_dup=mode in ("crossbar", "wordline"),
        crossbar_dp=mode in ("crossbar", "wordline"),
        mvm_pipeline=mode in ("crossbar", "wordline"),
        remap=mode == "wordline",
        pipeline_rounds=PIPELINE_ROUNDS,
    )


register(Strategy("none", "no optimisation: one copy per layer, layers one after another", lambda hw: Options()))
register(Strategy("greedy", "Poly-Schedule's greedy duplication of the slowest layer, batch pipeline",
                  lambda hw: Options(duplication="greedy")))
register(Strategy("puma", "PUMA's inter-layer pipeline without duplication", lambda hw: Options(pipeline=True)))
register(Strategy("cim-mlc", "CIM-MLC's multi-level method: DP duplication, inter-layer and MVM-grained "
                  "pipelines, crossbar-level duplication, wordline remapping, segmentation refined by latency",
                  _cim_mlc))
register(Strategy("miredo", "CIM-MLC's graph level with MIREDO's per-layer dataflow (MIP over loop order, tiling, "
                  "memory levels and double buffering) on chips with a [dataflow] table",
                  lambda hw: dataclasses.replace(_cim_mlc(hw), dataflow="miredo", pipeline_rounds=1)))


def _cmswitch(hw: CIMHardware) -> Options:
    mode = hw.chip.computing_mode
    return Options(segmentation="dp", modes="dual", pipeline=True, mvm_pipeline=mode in ("crossbar", "wordline"))


register(Strategy("cmswitch", "CMSwitch's dual-mode method: segmentation by DP with switch and rewrite costs, "
                  "per segment a MIP allocating arrays to compute (with duplication) and to memory for "
                  "operators' outputs, CM.switch between segments", _cmswitch))


SEND_BATCH = 8  # Alg. 2's transmit threshold (the paper gives none; 8 chunks, an ablation sets 1)
LL_EVALUATIONS = 1000  # the low-latency fitness simulates one input's element pipeline (ms per genome, not us)


def _pimcomp(hw: CIMHardware, mode: str) -> Options:
    xbar = hw.chip.computing_mode in ("crossbar", "wordline")
    if mode == "ht":
        return Options(duplication="ga", unfolding="ht", grouping=True)
    return Options(duplication="ga", unfolding="ll", pipeline=True, mvm_pipeline=xbar, local_memory=True,
                   send_batch=SEND_BATCH, ga_evaluations=LL_EVALUATIONS)


register(Strategy("pimcomp-ht", "PIMCOMP high throughput: Table IV unfolding per layer (least load), replication and "
                  "array-group layout by GA on the pipeline cycle, batch pipeline with layer grouping (Alg. 1)",
                  lambda hw: _pimcomp(hw, "ht")))
register(Strategy("pimcomp-ll", "PIMCOMP low latency: Table IV unfolding per layer (least extra memory), replication "
                  "and array-group layout by GA on one input's latency, element pipeline across layers (Alg. 2)",
                  lambda hw: _pimcomp(hw, "ll")))

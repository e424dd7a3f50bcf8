"""Data-centric schedule space: DCC tiling drafts as s_tir schedules.

DCC (paper 002, sec. IV-B) builds its schedule space from the *data*:

1. **Dimension sets.**  Every tensor dimension gets the set of loop variables
   its index expressions use (its reference set); dimensions that share a
   variable are grouped.  :func:`dimension_sets` reads them from the kernel's
   TIR PrimFunc.
2. **Data tiles.**  Each dimension set gets a number of PIM groups and of
   cores per group (depth-first search with memoisation; the groups left for
   the next set are ``G_{i+1} = G_i // g_i``), plus a *representative
   mapping* (which tensor dimension's index function the tiles are cut
   along) and, for irregular tiles, *expanded* (ceil-blocked, padded to a
   uniform size) or *exact* (balanced, only the needed indices) index ranges.
3. **Pruning** with the paper's three rules (:func:`prune`).

The same space is written once with s_tir schedule primitives and sampling
instructions (:func:`apply_space`): ``sample_categorical`` chooses groups,
cores, representative mapping and index ranges, ``split`` cuts each dimension
set's loop into ``[groups, cores, per-core]`` loops, ``annotate`` records the
choice.  Meta-schedule uses it as a ``ScheduleFn`` space
(:func:`schedule_fn`); :func:`enumerate_drafts` is the exhaustive driver that
replays the same function with fixed decisions.  :func:`draft_of` reads the
draft back from a scheduled module.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import tvm
import tvm_ffi

from ..hardware.view import PimView, ceil_div
from .kernels import KernelSpec, spec_of

INDEX_RANGES = ("expand", "exact")


def allocation_candidates(total: int) -> list[int]:
    """Counts of groups (or cores) a dimension set may be given.

    The divisors of ``total`` and the powers of two up to it, so that a draft
    can use every unit of the device (80 groups = 5 stacks x 16) as well as
    power-of-two splits of power-of-two tensor sizes.
    """
    s = {d for d in range(1, total + 1) if total % d == 0}
    p = 1
    while p <= total:
        s.add(p)
        p *= 2
    return sorted(s)


# ============================================================================ dimension sets
@dataclass(frozen=True)
class Member:
    """A tensor dimension in a dimension set, with its index function."""

    buffer: str
    dim: int
    expr: str  # the index expression (the mapping function), e.g. 'v_n'

    def __str__(self) -> str:
        return f"{self.buffer}[{self.dim}]={self.expr}"


@dataclass(frozen=True)
class DimSet:
    """A dimension set: tensor dimensions whose index functions share loop variables."""

    name: str  # joined variable names, e.g. 'n'
    variables: tuple[str, ...]
    extent: int
    members: tuple[Member, ...]
    reduction: bool


def _strip(name: str) -> str:
    return name[2:] if name.startswith("v_") else name


@lru_cache(maxsize=512)
def _dimension_sets_cached(spec_json: str) -> tuple[DimSet, ...]:
    spec = KernelSpec.from_json(spec_json)
    return dimension_sets_of(spec.prim_func(), spec.block_name, spec.dim_names)


def dimension_sets_of(func, main_block: str, dim_names=()) -> tuple[DimSet, ...]:
    """The dimension sets of any TIR PrimFunc (what :func:`dimension_sets` reads from a kernel's).

    Parameters
    ----------
    func : tvm.tirx.PrimFunc
    main_block : str
        The block whose reduction variables mark reduction sets.
    dim_names : sequence of str
        Preferred order of the sets (others follow).
    """
    args = {str(p.name) for p in func.params}
    nodes: dict[tuple[str, int], set[str]] = {}
    exprs: dict[tuple[str, int], set[str]] = {}
    extents: dict[str, int] = {}
    reduce_vars: set[str] = set()

    def visit_block(block):
        for iv in block.iter_vars:
            nm = _strip(str(iv.var.name))
            extents[nm] = max(extents.get(nm, 0), int(iv.dom.extent))
            if block.name_hint == main_block and int(iv.iter_type) == 2:  # CommReduce
                reduce_vars.add(nm)

        def access(node):
            buf = str(node.buffer.name) if hasattr(node, "buffer") else str(node.source.name)
            for d, idx in enumerate(node.indices):
                used: set[str] = set()
                tvm_ffi.structural_walk(idx, [(tvm.ir.Var, lambda v: used.add(_strip(str(v.name))))], order="pre")
                nodes.setdefault((buf, d), set()).update(used)
                text = str(idx)
                for v in used:
                    text = text.replace("v_" + v, v)
                exprs.setdefault((buf, d), set()).add(text)

        tvm_ffi.structural_walk(
            block.body, [(tvm.ir.TensorLoad, access), (tvm.tirx.BufferStore, access)], order="pre"
        )

    tvm_ffi.structural_walk(func.body, [(tvm.s_tir.SBlock, visit_block)], order="pre")
    # union-find of tensor dimensions that share a loop variable
    parent = {k: k for k in nodes}

    def find(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    by_var: dict[str, tuple[str, int]] = {}
    for k, vs in nodes.items():
        for v in vs:
            if v in by_var:
                parent[find(k)] = find(by_var[v])
            else:
                by_var[v] = k
    groups: dict[tuple[str, int], list[tuple[str, int]]] = {}
    for k in nodes:
        groups.setdefault(find(k), []).append(k)
    sets = []
    for ks in groups.values():
        vs = sorted(set().union(*(nodes[k] for k in ks)))
        if not vs:
            continue
        members = tuple(
            Member(b, d, sorted(exprs[(b, d)])[0]) for b, d in sorted(ks) if b in args
        )
        name = "".join(vs)
        ext = max(extents[v] for v in vs)
        sets.append(DimSet(name, tuple(vs), ext, members, any(v in reduce_vars for v in vs)))
    order = {d: i for i, d in enumerate(dim_names)}
    sets.sort(key=lambda s: order.get(s.name, 99))
    return tuple(sets)


def dimension_sets(spec: KernelSpec) -> tuple[DimSet, ...]:
    """The dimension sets of a kernel, read from its TIR PrimFunc (DCC stage 1).

    Parameters
    ----------
    spec : KernelSpec

    Returns
    -------
    tuple of DimSet
        In the kernel's dimension order.
    """
    return _dimension_sets_cached(spec.to_json())


# ============================================================================ drafts
@dataclass(frozen=True)
class Part:
    """One dimension set's share of a draft: ``[groups, cores, representative mapping]``."""

    dim: str
    groups: int
    cores: int
    rep: int = 0  # index into DimSet.members


@dataclass(frozen=True)
class Draft:
    """A DCC tiling draft: one :class:`Part` per dimension set plus the index-range strategy."""

    parts: tuple[Part, ...]
    index_range: str = "expand"

    def part(self, dim: str) -> Part:
        """The part of a dimension set (one group and one core if the draft does not split it)."""
        for p in self.parts:
            if p.dim == dim:
                return p
        return Part(dim, 1, 1, 0)

    @property
    def groups_used(self) -> int:
        return int(np.prod([p.groups for p in self.parts]))

    @property
    def cores_used(self) -> int:
        return int(np.prod([p.cores for p in self.parts]))

    def to_json(self) -> str:
        """The draft as compact JSON (what streams and lookup tables store)."""
        return json.dumps(
            {"parts": [[p.dim, p.groups, p.cores, p.rep] for p in self.parts], "index_range": self.index_range},
            separators=(",", ":"),
        )

    @staticmethod
    def from_json(text: str) -> "Draft":
        """Inverse of :meth:`to_json`."""
        d = json.loads(text)
        return Draft(tuple(Part(a, int(g), int(c), int(r)) for a, g, c, r in d["parts"]), d["index_range"])

    def __str__(self) -> str:
        return "[" + ", ".join(f"{p.dim}:{p.groups}g x {p.cores}c" for p in self.parts) + f"] {self.index_range}"


class InfeasibleDraft(ValueError):
    """A draft that the device cannot execute (too many units, constraint of the kernel)."""


def _fixed(spec: KernelSpec, dim: str) -> tuple[bool, bool]:
    """Whether a dimension's (groups, cores) are forced to 1 by the kernel's semantics."""
    if spec.kind == "attn":
        if dim == "k":
            return True, True  # the head dimension feeds both GEMVs; kept whole per core
        if dim == "n":
            return True, False  # softmax needs every token of a head inside one group
    return False, False


def index_ranges(spec: KernelSpec) -> tuple[str, ...]:
    """Index-range strategies a kernel allows (ATTN's softmax needs ceil-blocked token ranges)."""
    return ("expand",) if spec.kind == "attn" else INDEX_RANGES


def group_candidates(spec: KernelSpec, view: PimView, ds: DimSet, avail: int) -> list[int]:
    """PIM-group counts a dimension set may take when ``avail`` groups are left (DCC stage 2)."""
    if _fixed(spec, ds.name)[0]:
        return [1]
    return [g for g in allocation_candidates(view.groups) if g <= avail and g <= ds.extent]


def core_candidates(spec: KernelSpec, view: PimView, ds: DimSet, avail: int, groups: int) -> list[int]:
    """Cores per group a dimension set may take, given its groups and the ``avail`` cores left."""
    if _fixed(spec, ds.name)[1]:
        return [1]
    return [c for c in allocation_candidates(view.cores_per_group) if c <= avail and c * groups <= ds.extent]


def check_draft(spec: KernelSpec, view: PimView, draft: Draft) -> None:
    """Raise :class:`InfeasibleDraft` if the device cannot run the draft."""
    sets = {s.name: s for s in dimension_sets(spec)}
    if draft.index_range not in index_ranges(spec):
        raise InfeasibleDraft(f"index range '{draft.index_range}' is not one of {index_ranges(spec)} for {spec.kind}")
    if draft.groups_used > view.groups:
        raise InfeasibleDraft(f"draft uses {draft.groups_used} groups; the device has {view.groups}")
    if draft.cores_used > view.cores_per_group:
        raise InfeasibleDraft(f"draft uses {draft.cores_used} cores per group; a group has {view.cores_per_group}")
    for p in draft.parts:
        ds = sets.get(p.dim)
        if ds is None:
            raise InfeasibleDraft(f"no dimension set '{p.dim}' in {spec.kind}")
        fg, fc = _fixed(spec, p.dim)
        if (fg and p.groups != 1) or (fc and p.cores != 1):
            raise InfeasibleDraft(f"{spec.kind}: dimension set '{p.dim}' cannot be split that way")
        if p.groups * p.cores > ds.extent:
            raise InfeasibleDraft(f"dimension set '{p.dim}' has {ds.extent} indices for {p.groups * p.cores} units")
        if p.groups < 1 or p.cores < 1 or not (0 <= p.rep < max(1, len(ds.members))):
            raise InfeasibleDraft(f"bad part {p}")


# ============================================================================ exhaustive generation
def _allocations(spec: KernelSpec, view: PimView) -> list[tuple[tuple[int, int], ...]]:
    """Every (groups, cores) allocation over the dimension sets (DFS with memoisation)."""
    sets = dimension_sets(spec)
    memo: dict[tuple[int, int, int], list[tuple[tuple[int, int], ...]]] = {}

    def rec(i: int, g_av: int, c_av: int):
        if i == len(sets):
            return [()]
        key = (i, g_av, c_av)
        if key in memo:
            return memo[key]
        out = []
        for g in group_candidates(spec, view, sets[i], g_av):
            for c in core_candidates(spec, view, sets[i], c_av, g):
                for rest in rec(i + 1, g_av // g, c_av // c):
                    out.append(((g, c),) + rest)
        memo[key] = out
        return out

    return rec(0, view.groups, view.cores_per_group)


def all_drafts(spec: KernelSpec, view: PimView, distinct_mappings: bool = False) -> list[Draft]:
    """The unpruned space: allocations x representative mappings x index ranges.

    Parameters
    ----------
    distinct_mappings : bool
        Enumerate only one representative mapping per distinct mapping
        function (what rule 1 leaves), which avoids materialising the
        redundant drafts of large spaces.
    """
    sets = dimension_sets(spec)
    reps = []
    for s in sets:
        if not s.members:
            reps.append([0])
        elif distinct_mappings:
            first: dict[str, int] = {}
            for i, m in enumerate(s.members):
                first.setdefault(m.expr, i)
            reps.append(sorted(first.values()))
        else:
            reps.append(list(range(len(s.members))))
    out = []
    for alloc in _allocations(spec, view):
        for rep in itertools.product(*reps):
            for ir in index_ranges(spec):
                out.append(Draft(tuple(Part(s.name, g, c, r) for s, (g, c), r in zip(sets, alloc, rep)), ir))
    return out


def space_size(spec: KernelSpec, view: PimView) -> int:
    """Size of the unpruned space without materialising it."""
    sets = dimension_sets(spec)
    reps = int(np.prod([max(1, len(s.members)) for s in sets]))
    return len(_allocations(spec, view)) * reps * len(index_ranges(spec))


def per_core_length(spec: KernelSpec, draft: Draft) -> dict[str, int]:
    """Largest number of indices of each dimension set one core holds."""
    sets = {s.name: s for s in dimension_sets(spec)}
    return {p.dim: ceil_div(sets[p.dim].extent, p.groups * p.cores) for p in draft.parts}


def rule1_key(spec: KernelSpec, draft: Draft):
    """Drafts with equal data tiles and equivalent representative mappings (same function)."""
    sets = {s.name: s for s in dimension_sets(spec)}
    return (
        tuple((p.dim, p.groups, p.cores, sets[p.dim].members[p.rep].expr if sets[p.dim].members else "") for p in draft.parts),
        draft.index_range,
    )


def rule2_ok(spec: KernelSpec, view: PimView, draft: Draft) -> bool:
    """The per-core length of the SIMD dimension is a multiple of the lane count."""
    return per_core_length(spec, draft)[spec.lane_dim] % view.lanes == 0


def rule3_key(spec: KernelSpec, draft: Draft):
    """Drafts whose groups have the same worst per-core work on every dimension set."""
    return (tuple(sorted(per_core_length(spec, draft).items())), draft.index_range)


@dataclass
class PruneStats:
    """How far each pruning rule shrinks the space."""

    total: int
    after_rule1: int
    after_rule2: int
    after_rule3: int
    rule2_skipped: bool

    def as_dict(self) -> dict:
        """The counts as plain data, with the fraction of the space kept."""
        return {
            "total": self.total,
            "after_rule1": self.after_rule1,
            "after_rule2": self.after_rule2,
            "after_rule3": self.after_rule3,
            "rule2_skipped": self.rule2_skipped,
            "kept_fraction": self.after_rule3 / self.total if self.total else 0.0,
        }


def prune(spec: KernelSpec, view: PimView, drafts: list[Draft], rules=(1, 2, 3)) -> tuple[list[Draft], PruneStats]:
    """Apply DCC's pruning rules (paper 002 sec. IV-B stage 3).

    Rule 1 removes drafts that repeat another's data tiles with an equivalent
    representative mapping.  Rule 2 removes drafts whose per-core share of the
    SIMD dimension is not a multiple of the lane count (skipped if no draft
    satisfies it).  Rule 3 keeps one draft among those whose groups have the
    same worst per-core work on every dimension set; we keep the one using the
    most PIM groups (more channels for data movement), ties broken by order.

    Returns
    -------
    list of Draft, PruneStats
    """
    total = len(drafts)
    out = drafts
    if 1 in rules:
        seen, kept = set(), []
        for d in out:
            k = rule1_key(spec, d)
            if k not in seen:
                seen.add(k)
                kept.append(d)
        out = kept
    n1 = len(out)
    skipped = False
    if 2 in rules:
        ok = [d for d in out if rule2_ok(spec, view, d)]
        if ok:
            out = ok
        else:
            skipped = True
    n2 = len(out)
    if 3 in rules:
        best: dict = {}
        for i, d in enumerate(out):
            k = rule3_key(spec, d)
            if k not in best or d.groups_used > best[k][1].groups_used:
                best[k] = (i, d)
        out = [d for _, d in sorted(best.values(), key=lambda t: t[0])]
    return out, PruneStats(total, n1, n2, len(out), skipped)


def enumerate_drafts(spec: KernelSpec, view: PimView, pruned: bool = True) -> tuple[list[Draft], PruneStats]:
    """The exhaustive driver: every draft of the space, optionally pruned.

    Parameters
    ----------
    spec : KernelSpec
    view : PimView
    pruned : bool
        Apply the three rules.  Without them, only drafts that repeat another
        draft's data tiles with an equivalent mapping function are dropped
        (they generate identical command streams, so they time identically).

    Returns
    -------
    list of Draft, PruneStats
        ``PruneStats.total`` counts the full space, redundant drafts included.
        The pruned list also holds the backend's default draft
        (:func:`default_draft`) when the rules removed it: rule 2 is
        speculative and can prune it (80 channels never divide a power-of-two
        tensor into lane multiples), and a search must never end worse than
        the backend's own tiling.
    """
    total = space_size(spec, view)
    drafts = all_drafts(spec, view, distinct_mappings=True)  # == the space after rule 1
    if not pruned:
        return drafts, PruneStats(total, len(drafts), len(drafts), len(drafts), True)
    out, st = prune(spec, view, drafts, rules=(2, 3))
    d0 = default_draft(spec, view)
    if d0 not in out and rule1_key(spec, d0) not in {rule1_key(spec, d) for d in out}:
        out = out + [d0]
    return out, PruneStats(total, len(drafts), st.after_rule2, st.after_rule3, st.rule2_skipped)


def rule_shrinkage(spec: KernelSpec, view: PimView) -> dict:
    """How far each pruning rule shrinks a kernel's space on its own.

    Returns
    -------
    dict
        ``total`` (the full space), ``rule1`` (after rule 1), and ``rule2_alone``,
        ``rule3_alone``, ``rules23`` (applied to the rule-1 space).
    """
    drafts = all_drafts(spec, view, distinct_mappings=True)
    return {
        "total": space_size(spec, view),
        "rule1": len(drafts),
        "rule2_alone": len(prune(spec, view, drafts, rules=(2,))[0]),
        "rule3_alone": len(prune(spec, view, drafts, rules=(3,))[0]),
        "rules23": len(prune(spec, view, drafts, rules=(2, 3))[0]),
    }


def rule1_on_func(func, main_block: str, view: PimView) -> dict:
    """Rule 1 on any TIR PrimFunc: every (groups, cores) allocation of its dimension sets times
    every representative mapping, deduplicated by (data tile, mapping function).

    For a kernel whose dimension-set members index with different functions
    (e.g. a convolution's ``x[n + r]``, ``w[r]``, ``y[n]``) rule 1 keeps one
    draft per distinct function; where all members share one it keeps one.

    Returns
    -------
    dict
        ``sets`` (name -> member expressions), ``total``, ``after_rule1``.
    """
    sets = dimension_sets_of(func, main_block)
    gc, cc = allocation_candidates(view.groups), allocation_candidates(view.cores_per_group)

    def allocs(i, g_av, c_av):
        if i == len(sets):
            yield ()
            return
        for g in (g for g in gc if g <= g_av and g <= sets[i].extent):
            for c in (c for c in cc if c <= c_av and c * g <= sets[i].extent):
                for rest in allocs(i + 1, g_av // g, c_av // c):
                    yield ((g, c),) + rest

    total, keys = 0, set()
    reps = [range(max(1, len(s.members))) for s in sets]
    for alloc in allocs(0, view.groups, view.cores_per_group):
        for rep in itertools.product(*reps):
            for ir in INDEX_RANGES:
                total += 1
                keys.add((tuple((s.name, g, c, s.members[r].expr if s.members else "")
                                for s, (g, c), r in zip(sets, alloc, rep)), ir))
    return {"sets": {s.name: [str(m) for m in s.members] for s in sets}, "total": total, "after_rule1": len(keys)}


# ============================================================================ the s_tir space
def apply_space(sch, view: PimView, draft: Draft | None = None):
    """Write the tiling-draft space into a schedule (sampling, split, annotate).

    With ``draft=None`` every choice is a sampling instruction whose decision
    meta-schedule samples and mutates; with a draft the same instructions are
    replayed with that draft's decisions (the exhaustive driver).

    Parameters
    ----------
    sch : tvm.s_tir.Schedule
        A schedule of a kernel from :mod:`tvm_pim.compiler.kernels`.
    view : PimView
    draft : Draft, optional

    Returns
    -------
    tvm.s_tir.Schedule
    """
    spec = spec_of(sch.mod["main"])
    sets = dimension_sets(spec)
    blk = sch.get_sblock(spec.block_name)
    loops = {
        _strip(str(iv.var.name)): lp
        for iv, lp in zip(sch.get(blk).iter_vars, sch.get_loops(blk)[-len(sch.get(blk).iter_vars):])
    }
    g_av, c_av = view.groups, view.cores_per_group

    def choose(cands: list[int], want: int | None):
        if want is not None and want not in cands:
            raise InfeasibleDraft(f"value {want} is not among the candidates {cands}")
        dec = None if want is None else cands.index(want)
        return sch.sample_categorical(cands, [1.0 / len(cands)] * len(cands), decision=dec)

    for ds in sets:
        p = draft.part(ds.name) if draft is not None else None
        gc = group_candidates(spec, view, ds, g_av)
        g_rv = choose(gc, p.groups if p else None)
        g = int(sch.get(g_rv))
        cc = core_candidates(spec, view, ds, c_av, g) or [1]
        c_rv = choose(cc, p.cores if p else None)
        c = int(sch.get(c_rv))
        outer, mid, _inner = sch.split(loops[ds.name], [g_rv, c_rv, None])
        sch.annotate(outer, "pim.groups_of", ds.name)
        sch.annotate(mid, "pim.cores_of", ds.name)
        if len(ds.members) > 1:
            r_rv = choose(list(range(len(ds.members))), p.rep if p else None)
            sch.annotate(blk, f"pim.rep.{ds.name}", r_rv)
        g_av //= g
        c_av //= c
    irs = [INDEX_RANGES.index(x) for x in index_ranges(spec)]
    ir_rv = choose(irs, INDEX_RANGES.index(draft.index_range) if draft is not None else None)
    sch.annotate(blk, "pim.index_range", ir_rv)
    return sch


def schedule_fn(view: PimView):
    """The space as a function for ``ms.space_generator.ScheduleFn``."""

    def fn(sch):
        apply_space(sch, view)
        return sch

    return fn


def schedule_of(spec: KernelSpec, view: PimView, draft: Draft):
    """A schedule of ``spec`` with a fixed draft (same instructions, fixed decisions)."""
    sch = tvm.s_tir.Schedule(spec.ir_module())
    return apply_space(sch, view, draft)


def draft_of(mod) -> Draft:
    """Read the draft back from a scheduled module (loop extents and annotations)."""
    if hasattr(mod, "mod"):  # a Schedule
        mod = mod.mod
    func = mod["main"]
    spec = spec_of(func)
    sets = dimension_sets(spec)
    groups: dict[str, int] = {}
    cores: dict[str, int] = {}
    ann: dict[str, int] = {}

    def on_for(loop):
        a = loop.annotations
        if "pim.groups_of" in a:
            groups[str(a["pim.groups_of"])] = int(loop.extent)
        if "pim.cores_of" in a:
            cores[str(a["pim.cores_of"])] = int(loop.extent)

    def on_block(block):
        if block.name_hint == spec.block_name:
            for k, v in block.annotations.items():
                if str(k).startswith("pim."):
                    ann[str(k)] = int(v)

    tvm_ffi.structural_walk(func.body, [(tvm.tirx.For, on_for), (tvm.s_tir.SBlock, on_block)], order="pre")
    if "pim.index_range" not in ann:
        raise ValueError("module has no tiling draft (was the PIM schedule space applied?)")
    parts = tuple(
        Part(s.name, groups.get(s.name, 1), cores.get(s.name, 1), ann.get(f"pim.rep.{s.name}", 0)) for s in sets
    )
    return Draft(parts, INDEX_RANGES[ann["pim.index_range"]])


# ============================================================================ the backends' default
def default_draft(spec: KernelSpec, view: PimView, literal: bool = False) -> Draft:
    """The backend's fixed tiling (AttAcc's open-source distribution, DCC sec. V).

    Batches or heads (``b``) over channels (PIM groups); the first non-batch
    dimension of the main tensor over bank groups; the second over the banks
    (cores) of a bank group.  With a single non-batch dimension it takes every
    core of the group.  ATTN keeps the head dimension whole and spreads tokens
    over all cores of a group.  Counts are capped by the dimension's extent
    (largest allocation candidate that fits).

    When there are fewer batches / heads than channels (``b = 1`` for the
    fully-connected layers of a decode step), the channels left over split
    the first non-batch dimension.  This is our reading: AttAcc's text only
    names heads and batches, and taken literally it would leave 79 of 80
    channels idle for a shared-weight GEMV, tens of times slower than the GPU,
    whereas DCC reports the default at about 0.8x of the GPU on those layers.
    ATTN cannot split tokens over channels (its softmax needs a head's tokens
    in one group), so it keeps the literal distribution.

    Parameters
    ----------
    spec : KernelSpec
    view : PimView
    literal : bool
        AttAcc's distribution as written: channels only for batches / heads,
        the leftover channels idle (the benchmarks report both).
    """
    sets = {s.name: s for s in dimension_sets(spec)}

    def fit(n: int, extent: int, cands: list[int]) -> int:
        return max(c for c in cands if c <= min(n, extent))

    gc, cc = allocation_candidates(view.groups), allocation_candidates(view.cores_per_group)
    alloc = {d: [1, 1] for d in sets}
    alloc["b"][0] = fit(view.groups, sets["b"].extent, gc)
    left = 1 if literal else view.groups // alloc["b"][0]  # channels the batches / heads leave idle
    if spec.kind in ("gemv", "red"):
        first, second = "n", "k"
        alloc[first][1] = fit(view.bank_groups, sets[first].extent, cc)
        alloc[first][0] = fit(left, sets[first].extent // alloc[first][1], gc)
        alloc[second][1] = fit(view.cores_per_bank_group, sets[second].extent, cc)
    elif spec.kind in ("va", "relu"):
        alloc["i"][1] = fit(view.cores_per_group, sets["i"].extent, cc)
        alloc["i"][0] = fit(left, sets["i"].extent // alloc["i"][1], gc)
    else:
        alloc["n"][1] = fit(view.cores_per_group, sets["n"].extent, cc)
    d = Draft(tuple(Part(s, g, c, 0) for s, (g, c) in alloc.items()), "expand")
    # keep the dimension-set order of the space
    order = [s.name for s in dimension_sets(spec)]
    return Draft(tuple(sorted(d.parts, key=lambda p: order.index(p.dim))), "expand")

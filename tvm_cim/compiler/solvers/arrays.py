"""CMSwitch's per-segment allocation of dual-mode arrays (paper 000, Eq. 5-10), as a count MILP on HiGHS.

Arrays are homogeneous, so the MIP decides counts and placement comes after
(shared notes, wave2-specs sec. 1.2).  For every operator ``i`` of a segment:
``d_i`` copies of its weights (``d_i x tiles_i`` arrays in compute mode,
duplication), ``z_i`` whether its output is kept in memory-mode arrays and
``b_i`` how many.  Its consumers in the segment load it from the same arrays
(Eq. 6: an output-buffer array of ``O_i`` is the input-buffer array of
``O_j``), so an operator's memory arrays serve its output and its
consumers' input.  With ``r`` the throughput of the pipelined segment
(``1 / latency``, Eq. 9: the slowest operator decides), maximise ``r``
subject to (Eq. 10, each bound a rate)::

    r * compute_i                      <= d_i                 (crossbar work, split among copies)
    r * (out_i + sum_c in_c) / D       <= b_i     if z_i      (its arrays serve its stores and the
                                                               loads of its consumers c, Eq. 6)
    r * sum_i (in_i (1 - z_p(i)) + out_i (1 - z_i)) * port_i <= 1  (the shared global-buffer port: D_main;
                                                               out_i counts fully when O_i is live: T^wb)
    r * sum_i prep_i     <= 1                                  (the shared chip ALU)
    need_i z_i <= b_i <= S z_i                                 (capacity; only if every consumer is in S)
    sum_i d_i tiles_i + sum_i b_i <= N,  sum_i b_i <= S        (Eq. 5 and 8)

Data a previous segment left in memory-mode arrays (``carried_in``: a
consumer loads its input from them, not through the port) holds
``reserved`` arrays: they count in Eq. 5 and 8, and the compute arrays stay
below the lowest of them (``floor``: arrays from the top of the switchable
range down to it).  An operator whose output the next segment reads from
its arrays (``must_keep``) keeps it (``z_i = 1``).

The allocation a segment gets is defined exactly (:func:`canonical_key`):
the slowest bound, then less traffic through the shared port (the port and
the off-chip link it spills to are busier in the simulator than the rate
bound says: scatters and loads queue behind one another), then more compute
copies and fewer memory arrays (spare arrays compute, as CMSwitch's
post-allocation duplication does), then a fixed rule on the vectors.
:func:`solve_exact` finds it without a solver (segments have few
operators); :func:`allocate` uses it.  The MILP (:func:`allocate_mip`,
``r * z`` linearised exactly, ``r`` bounded, the ties as tiny weights) is
the path for segments with more than :data:`SUBSETS_MAX` operators that may
keep their output, and the independent check of the slowest bound in the
tests: its ties fall below HiGHS's gap tolerance, so which tied allocation
it returns depends on its search path.
"""

from __future__ import annotations

import bisect
import itertools
import math
import time
from dataclasses import dataclass

from .milp import Model

TIE = 1e-4  # weight of the tie-break terms against a throughput of order 1


@dataclass(frozen=True)
class OpTerms:
    """One operator of a segment, in the units the MIP needs (times in ns, from the shared cost model).

    Attributes
    ----------
    tiles : int
        Arrays one copy of its weights occupies.
    compute_ns : float
        Work split among copies (crossbar reads, scatters, post-processing) with one copy.
    max_replicas : int
        Most copies worth making.
    in_ns_mem, out_ns_mem : float
        Its input load / output store through one memory-mode array.
    in_ns_port, out_ns_port : float
        The same through the shared global-buffer port (or off-chip when it spills).
    prep_ns : float
        Work on the shared chip ALU (quantise, unfold).
    memory_need : int
        Arrays that hold its output; 0 when it may not keep it in memory mode
        (a consumer outside the segment, or none).
    producer : int or None
        Index (in the segment) of the operator whose memory arrays may hold its input.
    live : bool
        A consumer is outside the segment: kept in memory mode, its output is
        written back at the segment's end (T^wb, Eq. 4) -- read out of its
        arrays (``wb_ns_mem`` through one array) and through the shared port
        (``out_ns_port``), so memory mode saves it only its consumers' loads.
    carried_in : float
        Memory-mode arrays a previous segment left its input in (0: none):
        it loads ``in_ns_mem`` through them, nothing through the port.
    must_keep : bool
        Its output must stay in memory mode (a later segment reads it there).
    core_ns : float
        Work on units of the cores its copies sit on (a core's link and ALU: scatters, post-processing) with
        one copy, already scaled by the copies that share a core: ``d`` copies split it ``d`` ways.
    """

    tiles: int
    compute_ns: float
    max_replicas: int
    in_ns_mem: float = 0.0
    out_ns_mem: float = 0.0
    in_ns_port: float = 0.0
    out_ns_port: float = 0.0
    prep_ns: float = 0.0
    memory_need: int = 0
    producer: int | None = None
    live: bool = False
    wb_ns_mem: float = 0.0
    carried_in: float = 0.0
    must_keep: bool = False
    core_ns: float = 0.0


@dataclass
class Allocation:
    """A segment's allocation.

    Attributes
    ----------
    replicas, memory : list of int
        Per operator: copies of its weights, memory-mode arrays for its output.
    latency_ns : float
        ``1 / r``: the slowest bound (Eq. 9), the MIP's objective.
    status : str
        How it was found: ``exact`` (:func:`solve_exact`), the MILP's status (``Optimal``, ``Time limit
        reached`` ...), ``passes`` (a serial segment), ``trivial`` when nothing was solved.
    seconds : float
        Solve time.
    gap : float
        Relative MIP gap.
    compute_arrays : int
        Arrays in compute mode (copies x tiles).
    """

    replicas: list[int]
    memory: list[int]
    latency_ns: float
    status: str = "trivial"
    seconds: float = 0.0
    gap: float = 0.0
    compute_arrays: int = 0

    @property
    def memory_arrays(self) -> int:
        return sum(self.memory)


def array_traffic_ns(ops: list[OpTerms]) -> list[float]:
    """Per operator, the time its memory arrays would be busy through one array: its stores and
    its consumers' loads (they share the same arrays), and the write-back of live data."""
    t = [o.out_ns_mem + (o.wb_ns_mem if o.live else 0.0) for o in ops]
    for o in ops:
        if o.producer is not None:
            t[o.producer] += o.in_ns_mem
    return t


def latency_of(ops: list[OpTerms], replicas, memory, cores: int = 0) -> float:
    """The slowest bound of an allocation (what the MIP minimises), by direct evaluation.

    ``cores`` (the spread layout): the operators' copies spread over this many cores, whose links and ALUs
    carry every operator's ``core_ns`` together.
    """
    t = constant_bound(ops, cores)
    traffic = array_traffic_ns(ops)
    for i, o in enumerate(ops):
        t = max(t, o.compute_ns / replicas[i], o.core_ns / replicas[i])
        if memory[i]:
            t = max(t, traffic[i] / memory[i])
    return max(t, port_ns(ops, memory))


def constant_bound(ops: list[OpTerms], cores: int = 0) -> float:
    """The part of :func:`latency_of` no copy or memory array changes.

    Parameters
    ----------
    ops : list of OpTerms
    cores : int
        The spread layout (:func:`latency_of`).

    Returns
    -------
    float
        The largest of the cores' shared links and ALUs (``core_ns`` summed over ``cores``), every carried
        input read from its arrays, and the preparation time summed (ns).
    """
    t = sum(o.core_ns for o in ops) / cores if cores else 0.0
    for o in ops:
        if o.carried_in:
            t = max(t, o.in_ns_mem / o.carried_in)
    return max(t, sum(o.prep_ns for o in ops))


def port_ns(ops: list[OpTerms], memory) -> float:
    """Time the shared global-buffer port is busy in an allocation.

    Parameters
    ----------
    ops : list of OpTerms
    memory : sequence of int
        Memory-mode arrays per operator (only which are non-zero matters).

    Returns
    -------
    float
        Stores not kept in memory mode or written back, plus loads not from memory-mode arrays (ns), summed
        in operator order.
    """
    port = 0.0
    for i, o in enumerate(ops):
        if not memory[i] or o.live:  # stored through the port, or written back through it
            port += o.out_ns_port
        p = o.producer
        if not o.carried_in and (p is None or not memory[p]):
            port += o.in_ns_port
    return port


def feasible(ops: list[OpTerms], replicas, memory, arrays: int, switchable: int, reserved: int = 0,
             floor: int = 0) -> bool:
    """Whether an allocation respects copies, capacity and the array budget (Eq. 5, 8; ``reserved`` arrays
    hold data of a previous segment, the compute arrays stay ``floor`` arrays below the switchable top)."""
    mem = sum(memory) + reserved
    comp = sum(d * o.tiles for d, o in zip(replicas, ops))
    if mem > switchable or comp + mem > arrays:
        return False
    if mem and (switchable < arrays or reserved) and comp > switchable - max(mem, floor):
        return False
    for d, b, o in zip(replicas, memory, ops):
        if not 1 <= d <= o.max_replicas:
            return False
        if b and (not o.memory_need or b < o.memory_need):
            return False
        if o.must_keep and not b:
            return False
    return True


def _keepers(ops: list[OpTerms], arrays: int, switchable: int, reserved: int, floor: int) -> tuple[list, set]:
    """The operators that may keep their output in memory mode and those that must, after the checks every
    allocation shares: one copy of each operator fits, and every output that must stay can (:func:`feasible`)."""
    if sum(o.tiles for o in ops) > arrays - max(reserved, floor):
        raise ValueError(f"one copy of the segment's operators needs {sum(o.tiles for o in ops)} arrays, "
                         f"the chip has {arrays}")
    can = [i for i, o in enumerate(ops) if 0 < o.memory_need <= switchable]
    must = {i for i, o in enumerate(ops) if o.must_keep}
    if not must <= set(can):
        raise RuntimeError("allocation: Infeasible (an output that must stay in memory mode cannot)")
    return can, must


NODE_LIMIT = 10_000  # branch-and-bound nodes per segment: the deterministic limit (solves take a few ms)


def allocate(ops: list[OpTerms], arrays: int, switchable: int, time_limit: float = 10.0,
             seed: int = 0, node_limit: int = NODE_LIMIT, reserved: int = 0, floor: int = 0,
             cores: int = 0) -> Allocation:
    """A segment's allocation: the canonical one (:func:`canonical_key`) by :func:`solve_exact` when at most
    :data:`SUBSETS_MAX` operators may keep their output in memory mode, else the MILP (:func:`allocate_mip`,
    whose ties follow HiGHS's search path).

    Parameters
    ----------
    ops, arrays, switchable, reserved, floor, cores
        As :func:`allocate_mip`.
    time_limit, seed, node_limit
        The MILP's (unused by the exact search).

    Returns
    -------
    Allocation
        ``status`` ``exact``, or the MILP's.

    Raises
    ------
    ValueError
        One copy of every operator does not fit ``arrays``.
    RuntimeError
        No feasible allocation.
    """
    if sum(1 for o in ops if 0 < o.memory_need <= switchable) <= SUBSETS_MAX:
        return solve_exact(ops, arrays, switchable, reserved, floor, cores)
    return allocate_mip(ops, arrays, switchable, time_limit, seed, node_limit, reserved, floor, cores)


def allocate_mip(ops: list[OpTerms], arrays: int, switchable: int, time_limit: float = 10.0,
                 seed: int = 0, node_limit: int = NODE_LIMIT, reserved: int = 0, floor: int = 0,
                 cores: int = 0) -> Allocation:
    """Solve the allocation MILP of a segment (Eq. 5-10 on HiGHS; the slowest bound is optimal to HiGHS's
    gap, the ties are weighted terms, so which of several tied allocations it returns depends on its path).

    Parameters
    ----------
    ops : list of OpTerms
    arrays : int
        Arrays on the chip (``N_cim``).
    switchable : int
        Arrays that can switch to memory mode (ids ``0 .. switchable - 1``).
    time_limit : float
        Seconds, a safety net (wall clock: a run that reaches it depends on the
        machine's load); the best allocation found by then is returned (its status says so).
    seed : int
    node_limit : int
        Branch-and-bound nodes, the deterministic limit (HiGHS ``mip_max_nodes``).
    reserved, floor : int
        Arrays holding a previous segment's data for this one, and how far below the switchable top the
        lowest of them sits (the compute arrays stay below it).
    cores : int
        The spread layout (:func:`latency_of`): every operator's ``core_ns`` over this many cores; 0: none.

    Returns
    -------
    Allocation

    Raises
    ------
    ValueError
        One copy of every operator does not fit ``arrays``.
    RuntimeError
        An output that must stay in memory mode cannot (``"allocation: Infeasible"``), as :func:`feasible` says.
    """
    n = len(ops)
    _keepers(ops, arrays, switchable, reserved, floor)
    t0 = max(max((max(o.compute_ns, o.core_ns) for o in ops), default=0.0), 1e-9)
    # r is in units of 1 / t0; an upper bound from every operator's best compute rate
    r_max = min(o.max_replicas * t0 / max(o.compute_ns, o.core_ns, 1e-12) for o in ops)
    r_max = max(r_max, 1e-9)
    m = Model("cmswitch-alloc", time_limit=time_limit, seed=seed, node_limit=node_limit)
    r = m.var("r", 0.0, r_max)
    d = [m.var(f"d{i}", 1, max(1, o.max_replicas), integer=True) for i, o in enumerate(ops)]
    mem_ok = [o.memory_need > 0 and o.memory_need <= switchable for o in ops]
    z = [m.binary(f"z{i}") if ok else None for i, ok in enumerate(mem_ok)]
    b = [m.var(f"b{i}", 0, switchable, integer=True) if ok else None for i, ok in enumerate(mem_ok)]
    w = []  # w_i = r * z_i
    for i in range(n):
        if z[i] is None:
            w.append(None)
            continue
        wi = m.var(f"w{i}", 0.0, r_max)
        m.add(wi <= r_max * z[i])
        m.add(wi <= r)
        m.add(wi >= r - r_max * (1 - z[i]))
        m.add(b[i] >= ops[i].memory_need * z[i])
        m.add(b[i] <= switchable * z[i])
        w.append(wi)
    port = 0
    prep = sum(o.prep_ns for o in ops) / t0
    traffic = array_traffic_ns(ops)
    if cores and any(o.core_ns for o in ops):
        m.add(r * (sum(o.core_ns for o in ops) / t0 / cores) <= 1)
    for i, o in enumerate(ops):
        m.add(r * (o.compute_ns / t0) <= d[i])
        if o.core_ns:
            m.add(r * (o.core_ns / t0) <= d[i])
        if o.must_keep and z[i] is not None:
            m.add(z[i] >= 1)
        if o.carried_in:  # loaded from the arrays a previous segment left it in
            m.add(r * (o.in_ns_mem / t0) <= o.carried_in)
        if z[i] is not None:  # through its own memory arrays when kept there (big-M off otherwise)
            c = traffic[i] / t0
            m.add(r * c <= b[i] + r_max * c * (1 - z[i]))
            port = port + o.out_ns_port / t0 * (r if o.live else r - w[i])  # live: written back through it
        else:
            port = port + o.out_ns_port / t0 * r
        p = o.producer
        if o.carried_in:
            pass
        elif p is not None and z[p] is not None:
            port = port + o.in_ns_port / t0 * (r - w[p])
        else:
            port = port + o.in_ns_port / t0 * r
    if not isinstance(port, (int, float)):
        m.add(port <= 1)
    if prep > 0:
        m.add(r * prep <= 1)
    comp = sum(d[i] * o.tiles for i, o in enumerate(ops))
    mems = [x for x in b if x is not None]
    mem = (sum(mems) if mems else 0) + reserved
    m.add(comp + mem <= arrays)
    if reserved:  # a previous segment's data sits at the top: compute below all memory arrays
        m.add(comp + mem <= switchable)
        m.add(comp + floor <= switchable)
    elif mems:
        m.add(mem <= switchable)
        if switchable < arrays:  # memory arrays sit at the top of the switchable range, compute from 0
            y = m.binary("any_memory")
            m.add(mem <= switchable * y)
            m.add(comp + mem <= switchable + (arrays - switchable) * (1 - y))
    obj = r + TIE * (comp - mem) / arrays
    if not isinstance(port, (int, float)):  # then less traffic through the shared port (at most 1: a tie-break)
        obj = obj - TIE * port
    sol = m.maximize(obj)
    if not sol.feasible:
        raise RuntimeError(f"allocation MIP: {sol.status}")
    reps = [int(round(sol[x])) for x in d]
    memory = [int(round(sol[x])) if x is not None else 0 for x in b]
    memory = [bi if (z[i] is not None and sol[z[i]] > 0.5) else 0 for i, bi in enumerate(memory)]
    return Allocation(reps, memory, latency_of(ops, reps, memory, cores), sol.status, sol.seconds, sol.gap,
                      compute_arrays=sum(di * o.tiles for di, o in zip(reps, ops)))


def enumerate_best(ops: list[OpTerms], arrays: int, switchable: int, reserved: int = 0,
                   floor: int = 0, cores: int = 0) -> tuple[float, list[int], list[int]]:
    """Brute force over every allocation (small cases; the reference the MIP is tested against)."""
    best = (math.inf, None, None)
    rep_ranges = [range(1, o.max_replicas + 1) for o in ops]
    mem_ranges = [[0] + (list(range(o.memory_need, switchable + 1)) if o.memory_need else []) for o in ops]
    for reps in itertools.product(*rep_ranges):
        for mem in itertools.product(*mem_ranges):
            if not feasible(ops, reps, mem, arrays, switchable, reserved, floor):
                continue
            t = latency_of(ops, reps, mem, cores)
            if t < best[0]:
                best = (t, list(reps), list(mem))
    return best


# ---------------------------------------------------------------------------- the canonical allocation
# The allocation a segment gets is defined exactly, so that it does not depend on a solver's search path
# (HiGHS's gap tolerance, 1e-6 relative, is above tie-break weights of 1e-6 per array on objectives of order
# 10-60: a different path returned different copies and memory arrays for the same slowest operator).
# Among the feasible allocations (:func:`feasible`) the smallest key of :func:`canonical_key` is the answer.
SUBSETS_MAX = 14  # operators that may keep their output: their 2^k keep-sets are searched exactly


def canonical_key(ops: list[OpTerms], replicas, memory, cores: int = 0) -> tuple:
    """The total order that defines a segment's allocation (smallest first), lexicographically:

    1. the slowest bound, :func:`latency_of` (Eq. 9, the MIP's objective);
    2. the time the shared port is busy, :func:`port_ns` (less traffic through the port and the off-chip link
       it spills to: they are busier in the simulator than the rate bound says);
    3. memory arrays minus compute arrays (spare arrays compute, as CMSwitch's post-allocation duplication
       does; no memory array beyond what the bound needs);
    4. the copies, then the memory arrays, each vector lexicographically smallest: a deterministic final
       rule that makes the optimum unique (spare copies go to the segment's later operators first; the
       other direction, earlier operators first, simulated MobileNetV2 1.8% faster, VGG-16 0.7% faster and
       ResNet-18 0.7% slower: this one is no slower than HiGHS's path-dependent choice on any of the three).

    Parameters
    ----------
    ops : list of OpTerms
    replicas, memory : sequence of int
        The allocation (feasible, :func:`feasible`).
    cores : int
        The spread layout (:func:`latency_of`).

    Returns
    -------
    tuple
        Floats computed in a fixed order (ties are exact equalities) and integers.
    """
    comp = sum(d * o.tiles for d, o in zip(replicas, ops))
    return (latency_of(ops, replicas, memory, cores), port_ns(ops, memory), sum(memory) - comp,
            tuple(replicas), tuple(memory))


def _least(work: float, bound: float, lo: int, hi: int) -> int:
    """Smallest ``k`` in ``lo .. hi`` with ``work / k <= bound`` (as floats), ``hi + 1`` if none."""
    if work / hi > bound:
        return hi + 1
    if work / lo <= bound:
        return lo
    k = min(hi, max(lo, math.ceil(work / bound) if bound > 0 else hi))
    while k > lo and work / (k - 1) <= bound:
        k -= 1
    while work / k > bound:
        k += 1
    return k


def solve_exact(ops: list[OpTerms], arrays: int, switchable: int, reserved: int = 0, floor: int = 0,
                cores: int = 0) -> Allocation:
    """The canonical allocation (the smallest :func:`canonical_key` among :func:`feasible` ones), exactly.

    Every set ``Z`` of operators that keep their output in memory mode is searched (``2^k``, ``k`` the
    operators that may keep it): given ``Z`` and a latency ``L``, the fewest copies and memory arrays that meet
    ``L`` follow from the data, and the port's time is fixed, so the smallest feasible ``L`` is found by
    bisection over the values the bounds can take (every ``work / copies`` and ``traffic / arrays``, and the
    constant bounds), the exact float values :func:`latency_of` computes.  At the best ``L``, each tied ``Z``
    keeps the fewest memory arrays and gives the spare arrays to copies (a subset-sum over the operators'
    copies, the lexicographically smallest copies reaching the most compute arrays), and the keys decide.

    Parameters
    ----------
    ops, arrays, switchable, reserved, floor, cores
        As :func:`allocate`.

    Returns
    -------
    Allocation
        ``status`` is ``"exact"``.

    Raises
    ------
    ValueError
        One copy of every operator does not fit ``arrays``, or too many operators may keep their output
        (more than :data:`SUBSETS_MAX`).
    RuntimeError
        No feasible allocation (``"allocation: Infeasible"``).
    """
    t_start = time.perf_counter()
    n = len(ops)
    can, must = _keepers(ops, arrays, switchable, reserved, floor)
    if len(can) > SUBSETS_MAX:
        raise ValueError(f"{len(can)} operators may keep their output: more than {SUBSETS_MAX}")
    top = [max(1, o.max_replicas) for o in ops]
    work = [max(o.compute_ns, o.core_ns) for o in ops]
    traffic = array_traffic_ns(ops)
    fixed = constant_bound(ops, cores)
    values = {w / d for w, t in zip(work, top) for d in range(1, t + 1)}
    for i in can:
        if traffic[i] > 0:
            values.update(traffic[i] / b for b in range(ops[i].memory_need, switchable + 1))
    spread_cap = switchable < arrays or reserved > 0

    def need(bound, keep):
        """Fewest copies and memory arrays meeting ``bound`` with ``keep``, or None."""
        reps = []
        for w, t in zip(work, top):
            d = _least(w, bound, 1, t) if w > 0 else 1
            if d > t:
                return None
            reps.append(d)
        mem = [0] * n
        for i in keep:
            o = ops[i]
            b = _least(traffic[i], bound, o.memory_need, switchable) if traffic[i] > 0 else o.memory_need
            if b > switchable:
                return None
            mem[i] = b
        used = sum(mem) + reserved
        comp = sum(d * o.tiles for d, o in zip(reps, ops))
        cap = arrays - used
        if used and spread_cap:
            cap = min(cap, switchable - max(used, floor))
        if used > switchable or comp > cap:
            return None
        return reps, mem, cap

    ordered = sorted(values)
    best_l, tied = math.inf, []
    for mask in range(1 << len(can)):
        keep = [i for b, i in enumerate(can) if mask >> b & 1]
        if not must <= set(keep):
            continue
        memory = [0] * n
        for i in keep:
            memory[i] = 1
        const = max(fixed, port_ns(ops, memory))
        if const > best_l:
            continue
        lo = bisect.bisect_right(ordered, const)
        cands = [const] + ordered[lo:]
        if need(cands[-1], keep) is None:
            continue
        a, b = 0, len(cands) - 1  # the smallest feasible candidate (feasibility is monotone in the bound)
        while a < b:
            mid = (a + b) // 2
            if need(cands[mid], keep) is None:
                a = mid + 1
            else:
                b = mid
        if cands[a] < best_l:
            best_l, tied = cands[a], [keep]
        elif cands[a] == best_l:
            tied.append(keep)
    if not tied:
        raise RuntimeError("allocation: Infeasible")
    best = None
    for keep in tied:
        reps, mem, cap = need(best_l, keep)
        reps = _most_copies(ops, reps, top, cap)
        key = canonical_key(ops, reps, mem, cores)
        if best is None or key < best[0]:
            best = (key, reps, mem)
    _, reps, mem = best
    return Allocation(reps, mem, latency_of(ops, reps, mem, cores), "exact", time.perf_counter() - t_start, 0.0,
                      compute_arrays=sum(d * o.tiles for d, o in zip(reps, ops)))


def _most_copies(ops: list[OpTerms], low: list[int], top: list[int], cap: int) -> list[int]:
    """Copies between ``low`` and ``top`` per operator filling the most compute arrays up to ``cap``; among
    those, the lexicographically smallest (a subset-sum over bit sets of reachable totals)."""
    n = len(ops)
    full = (1 << (cap + 1)) - 1
    reach = [0] * (n + 1)  # reach[i]: totals the operators i.. can fill
    reach[n] = 1
    for i in range(n - 1, -1, -1):
        t, acc = ops[i].tiles, 0
        for d in range(low[i], top[i] + 1):
            if d * t > cap:
                break
            acc |= reach[i + 1] << (d * t)
        reach[i] = acc & full
    left = reach[0].bit_length() - 1  # the most compute arrays
    reps = []
    for i in range(n):
        t = ops[i].tiles
        for d in range(low[i], top[i] + 1):
            rest = left - d * t
            if rest >= 0 and reach[i + 1] >> rest & 1:
                reps.append(d)
                left = rest
                break
    return reps

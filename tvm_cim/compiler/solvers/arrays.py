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

``r * z`` is linearised exactly (``r`` is bounded).  Ties are broken towards
more compute copies and fewer memory arrays (a tiny weight), so spare arrays
compute, as CMSwitch's post-allocation duplication does, and towards less
traffic through the shared port (its use, at most 1, with the same weight):
the port and the off-chip link it spills to are busier in the simulator than
the rate bound says (scatters and loads queue behind one another).
"""

from __future__ import annotations

import itertools
import math
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
        Solver status (``Optimal``, ``Time limit reached`` ...; ``trivial`` when nothing was solved).
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
    t = sum(o.core_ns for o in ops) / cores if cores else 0.0
    port = prep = 0.0
    traffic = array_traffic_ns(ops)
    for i, o in enumerate(ops):
        t = max(t, o.compute_ns / replicas[i], o.core_ns / replicas[i])
        if memory[i]:
            t = max(t, traffic[i] / memory[i])
        if not memory[i] or o.live:  # stored through the port, or written back through it
            port += o.out_ns_port
        p = o.producer
        if o.carried_in:
            t = max(t, o.in_ns_mem / o.carried_in)
        elif p is None or not memory[p]:
            port += o.in_ns_port
        prep += o.prep_ns
    return max(t, port, prep)


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


NODE_LIMIT = 10_000  # branch-and-bound nodes per segment: the deterministic limit (solves take a few ms)


def allocate(ops: list[OpTerms], arrays: int, switchable: int, time_limit: float = 10.0,
             seed: int = 0, node_limit: int = NODE_LIMIT, reserved: int = 0, floor: int = 0,
             cores: int = 0) -> Allocation:
    """Solve the allocation MILP of a segment.

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
    """
    n = len(ops)
    if sum(o.tiles for o in ops) > arrays - max(reserved, floor):
        raise ValueError(f"one copy of the segment's operators needs {sum(o.tiles for o in ops)} arrays, "
                         f"the chip has {arrays}")
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

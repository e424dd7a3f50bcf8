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
from dataclasses import dataclass, field

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
    resident: bool = True
    passes: int = 1


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

    def __init__(self, hw: CIMHardware, wbits: int, ibits: int, mvm_pipeline: bool = False):
        self.hw, self.wbits, self.ibits = hw, wbits, ibits
        self.mvm_pipeline = mvm_pipeline
        self.xbs_per_core = hw.core.crossbars
        self._tile_bytes: dict = {}

    def logical_cols(self) -> int:
        return self.hw.logical_cols(self.wbits)

    def tiles(self, r: Region, tile_rows: int) -> int:
        m, k, n = r.mkn
        cols = self.logical_cols()
        if r.kind == CONV2D and r.conv.get("groups", 1) > 1 and r.w_int is not None:
            from .mapping import tile_matrix

            return len(tile_matrix(k, n, self.hw, r.w_int, tile_rows=tile_rows))
        return math.ceil(k / tile_rows) * math.ceil(n / cols)

    def fetch_ns(self, r: Region, tile_rows: int, passes: int = 1) -> np.ndarray:
        """Time to bring each pass's weight tiles (one copy) over the off-chip interface.

        Zero for a ``dmatmul``, whose weights are computed on chip.
        """
        if r.kind == DMATMUL:
            return np.zeros(passes)
        key = (r.name, tile_rows)
        b = self._tile_bytes.get(key)
        if b is None:  # the tiles the mapper places (all-zero tiles of grouped convolutions skipped)
            from .mapping import tile_matrix

            _, k, n = r.mkn
            grouped = r.kind == CONV2D and r.conv.get("groups", 1) > 1
            ts = tile_matrix(k, n, self.hw, r.w_int if grouped else None, tile_rows=tile_rows)
            b = self._tile_bytes[key] = np.array([-(-(t.k1 - t.k0) * (t.n1 - t.n0) * self.wbits // 8) for t in ts])
        cap = self.hw.total_crossbars
        per_pass = np.array([b[p * cap:(p + 1) * cap].sum() for p in range(passes)])
        return np.ceil(per_pass * 8 / self.hw.chip.offchip_bandwidth_bits) * self.hw.cycle_ns

    def step_ns(self, cols_used: int) -> float:
        xb = self.hw.crossbar
        bitlines = cols_used * self.hw.cols_per_weight(self.wbits)
        return max(xb.device.read_latency_ns, math.ceil(bitlines / xb.adcs) * xb.adc_latency_ns)

    def mvm_ns(self, r: Region, tile_rows: int, rows: int | None = None) -> float:
        """One input vector through one replica (its tiles work in parallel).

        ``rows``: the tallest tile read (``tile_rows`` unless only a last, shorter row block is).
        """
        groups = math.ceil(min(tile_rows if rows is None else rows, r.mkn[1]) / self.hw.crossbar.rows_active)
        steps = 2 * self.hw.input_steps(self.ibits - 1) if r.x_signed else self.hw.input_steps(self.ibits)
        return steps * groups * self.step_ns(min(self.logical_cols(), r.mkn[2]))

    def region_ns(self, r: Region, replicas: int, tile_rows: int, resident: bool = True, passes: int = 1) -> float:
        """Analytical latency of one region with ``replicas`` copies, inputs ready at time 0.

        See :meth:`chunk_finish` for the model.
        """
        fin, busy = self.chunk_finish(r, replicas, tile_rows, resident, passes)
        return max(float(np.max(fin)), *busy)

    def chunks(self, r: Region, replicas: int) -> tuple[np.ndarray, np.ndarray]:
        """``[start, stop)`` output vectors of the chunks the code generator emits."""
        m = r.mkn[0]
        return chunk_bounds(m, chunk_count(r, replicas))

    def chunk_finish(self, r: Region, replicas: int, tile_rows: int, resident: bool = True, passes: int = 1,
                     t_in: np.ndarray | float = 0.0,
                     t_free: float | None = None,
                     t_offchip: float | None = None) -> tuple[np.ndarray, tuple[float, float, float]]:
        """When each chunk of a region is stored, given when its input is available.

        The simulator's per-operation formulas, applied to the chunks the code
        generator emits (output vectors cut into :func:`chunk_bounds`, chunk
        ``c`` on replica ``c mod replicas``) and aggregated per resource
        instead of per operation:

        * every chunk's input is loaded through the shared global-buffer port
          and quantised / unfolded by the chip ALU, in program order, so chunk
          ``c`` is ready once the first ``c + 1`` loads and preparations are
          done (both pipelined: a max-plus recurrence);
        * it is scattered to its replica's core and read there; a replica reads
          its chunks one after another (another max-plus recurrence);
        * post-processing and the store follow the last read;
        * the region lasts until the latest chunk is stored, and at least as
          long as the global-buffer port and the chip ALU are busy.

        Weights written at run time (not resident, or a ``dmatmul``'s run-time
        operand) delay the first read by the write time, and constant weights
        are first fetched over the off-chip interface; a layer larger than the
        chip runs ``passes`` times over its prepared inputs.  A region whose
        working set exceeds the global buffer loads and stores at the off-chip
        bandwidth (:meth:`Region.spills`).

        Parameters
        ----------
        r : Region
        replicas, tile_rows : int
            The plan.
        resident : bool
            Weights programmed once, outside the inference.
        passes : int
            Passes of a layer larger than the chip.
        t_in : numpy.ndarray or float
            Time each chunk's input is available (producers, inter-layer pipeline).
        t_free : float, optional
            When work that needs no input may start (writing run-time weights):
            the start of the segment; the earliest ``t_in`` by default.
        t_offchip : float, optional
            When the off-chip interface is free for this region's weight
            fetches (after the fetches of earlier regions of the segment).

        Returns
        -------
        finish : numpy.ndarray
            Store-completion time of every chunk.
        busy : tuple of float
            Busy time of the three units all regions share: the global-buffer
            port, the chip ALU and the off-chip interface.
        """
        hw = self.hw
        m, k, n = r.mkn
        bt = r.batch
        cyc = hw.cycle_ns
        ib = self.ibits
        gb = hw.chip.global_buffer.bandwidth_bits
        spill = r.spills(hw.chip.global_buffer.capacity_kb * 1024, ib, self.wbits)
        if spill:
            gb = min(gb, hw.chip.offchip_bandwidth_bits)
        link = min(hw.chip.noc.link_bandwidth_bits, hw.core.local_buffer.bandwidth_bits)
        chip_ops, core_ops = hw.chip.alu.ops_per_cycle, hw.core.alu.ops_per_cycle
        row_blocks = math.ceil(k / tile_rows)
        starts, stops = self.chunks(r, replicas)
        size = (stops - starts).astype(float)
        nch = len(size)
        reps = max(1, min(replicas, nch)) if passes == 1 else 1
        in_elems = float(np.prod(r.in_shapes[0]))
        f0, f1 = r.input_span(starts, stops)
        share = (f1 - f0) * in_elems
        # ---- per chunk, what the simulator charges
        load = np.ceil(np.maximum(1, np.ceil(share * ib / 8)) * 8 / gb) * cyc
        prep = np.ceil(np.maximum(1, share.astype(np.int64)) / chip_ops) * hw.op("quantize").latency_cycles * cyc
        if r.kind == CONV2D:
            prep = prep + np.ceil(size * k / chip_ops) * hw.op("im2col").latency_cycles * cyc
        scatter = np.ceil(bt * size * k * ib / 8 * 8 / link) * cyc
        read = bt * size * self.mvm_ns(r, tile_rows)
        post = np.ceil(bt * size * n * 3 / core_ops) * hw.op("mul").latency_cycles * cyc
        if row_blocks > 1:
            post = post + np.ceil(bt * size * n * (row_blocks - 1) / core_ops) * hw.op("add").latency_cycles * cyc
        store = np.ceil(bt * size * n * 8 / gb) * cyc
        # ---- inputs ready in program order (global-buffer port, then chip ALU)
        t_in = np.broadcast_to(np.asarray(t_in, dtype=float), (nch,))
        t0 = float(t_in.min())
        tf = t0 if t_free is None else min(t0, t_free)
        fetch = self.fetch_ns(r, tile_rows, passes) if not resident else np.zeros(passes)
        t_off = tf if t_offchip is None else max(tf, t_offchip)
        if spill and passes == 1 and fetch[0] > 0:  # the loads queue behind the weights on the off-chip port
            t_in = np.maximum(t_in, t_off + fetch[0])
        loaded = _maxplus(t_in, load)
        if spill and passes > 1:  # here the weights of every pass queue behind the loads
            t_off = max(t_off, float(loaded[-1]))
        fetched = t_off + np.cumsum(fetch)
        ready = _maxplus(loaded, prep)
        start = t0
        if r.kind == DMATMUL:  # the run-time operand is loaded, quantised and written first
            y_el = float(np.prod(r.in_shapes[1]))
            y_load = math.ceil(math.ceil(y_el * self.wbits / 8) * 8 / gb) * cyc
            y_q = math.ceil(y_el / chip_ops) * hw.op("quantize").latency_cycles * cyc
            start = max(t0, tf + y_load + y_q + self.write_ns(r, tile_rows))
            ready = np.maximum(ready, tf + y_load + y_q)
        if r.kind != DMATMUL and not resident and passes == 1:
            start = max(t0, float(fetched[0]) + self.write_ns(r, tile_rows))
        moved = float(np.sum(load) + np.sum(store))
        busy = (moved, float(np.sum(prep)), float(np.sum(fetch)) + (moved if spill else 0.0))
        if passes > 1:
            # every pass rewrites all crossbars with the next tiles (row-major over row and column
            # blocks), then reads every chunk; the link sends the passes' inputs in program order
            cap, nct = hw.total_crossbars, math.ceil(n / self.logical_cols())
            n_tiles = row_blocks * nct
            pipelined = self.mvm_pipeline and hw.chip.computing_mode != "core" and row_blocks > 1
            sc_p = np.empty((passes, nch))
            for p_idx in range(passes):
                i0, i1 = p_idx * cap, min(n_tiles, (p_idx + 1) * cap)
                blocks = range(i0 // nct, (i1 - 1) // nct + 1)
                rows_in = sum(min(tile_rows, k - b * tile_rows) for b in blocks)  # a pass sends its rows only
                # with the MVM-grained pipeline, each row block goes over the link of its first tile's core
                links = len({(max(b * nct, i0) % cap) // hw.core.crossbars for b in blocks}) if pipelined else 1
                sc_p[p_idx] = np.ceil(bt * size * rows_in * ib / link) * cyc / links
            sent = _maxplus(np.tile(ready, passes), sc_p.ravel()).reshape(passes, nch)
            t = tf
            for p_idx in range(passes):
                b_last = (min(n_tiles, (p_idx + 1) * cap) - 1) // nct
                rows_p = min(tile_rows, k - b_last * tile_rows) if p_idx * cap // nct == b_last else tile_rows
                t = max(t, float(fetched[p_idx])) + r.batch * min(rows_p, k) * hw.crossbar.device.write_latency_ns
                t = float(_maxplus(np.maximum(sent[p_idx], t), bt * size * self.mvm_ns(r, tile_rows, rows_p))[-1])
            return _maxplus(_maxplus(np.full(nch, t), post), store), busy
        # ---- per replica: scatter over its core's link, read (row blocks in parallel with the
        # MVM-grained pipeline), post-process on its core's ALU; replicas that share a core share both
        nb = row_blocks if (self.mvm_pipeline and hw.chip.computing_mode != "core" and row_blocks > 1) else 1
        tiles = self.tiles(r, tile_rows)
        per_core = hw.core.crossbars
        q = 1 if (hw.chip.computing_mode == "core" or tiles >= per_core) else min(reps, -(-per_core // tiles))
        R = -(-reps // q) * q
        rounds = -(-nch // reps)

        def grid(x, fill):  # chunk c -> (round, core, slot): replica c % reps, round c // reps
            g = np.full((rounds, R), fill, dtype=float)
            flat = np.full(rounds * reps, fill, dtype=float)
            flat[:nch] = x
            g[:, :reps] = flat.reshape(rounds, reps)
            return g.reshape(rounds, R // q, q)

        rdy = grid(ready, -np.inf)
        sc, rd, po = grid(scatter / nb, 0.0), grid(read, 0.0), grid(post, 0.0)
        C = R // q
        # row block b of a replica starts at its tile b * (column tiles); its scatter uses the link of
        # that tile's core, so blocks on different cores are sent in parallel
        nct = math.ceil(n / self.logical_cols())
        on_core = np.bincount([(b * nct) // per_core for b in range(nb)]) if nb > 1 else np.array([1])
        L, nbg = int(np.count_nonzero(on_core)), int(on_core.max())  # links, blocks on the busiest one
        blk_w = np.zeros(L * nbg)
        blk_w[:nb] = 1.0
        # each link sends its (round, slot, block) in program order
        link_in = np.broadcast_to(rdy.transpose(1, 0, 2)[:, None, :, :, None], (C, L, rounds, q, nbg)).reshape(C, L, -1)
        link_w = (sc.transpose(1, 0, 2)[:, None, :, :, None] * blk_w.reshape(L, nbg)[None, :, None, None, :]).reshape(C, L, -1)
        sent = _maxplus(link_in, link_w, axis=2).reshape(C, L, rounds, q, nbg).transpose(2, 0, 3, 1, 4)
        sent = sent.reshape(rounds, C, q, L * nbg)[..., :nb]
        # each (replica, block) reads its chunks in order
        read_done = _maxplus(np.maximum(sent, start), np.broadcast_to(rd[..., None], sent.shape), axis=0).max(axis=3)
        alu_in = read_done.transpose(1, 0, 2).reshape(C, -1)
        posted = _maxplus(alu_in, po.transpose(1, 0, 2).reshape(C, -1), axis=1).reshape(C, rounds, q).transpose(1, 0, 2)
        done = posted.reshape(rounds, R)[:, :reps].ravel()[:nch]
        return _maxplus(done, store), busy  # the stores share the global-buffer port, in program order

    def write_ns(self, r: Region, tile_rows: int) -> float:
        """Programming one replica's crossbars (rows serially, crossbars in parallel)."""
        rows = min(tile_rows, r.mkn[1])
        return r.batch * rows * self.hw.crossbar.device.write_latency_ns

    def plan_cores(self, r: Region, tile_rows: int) -> int:
        return max(1, math.ceil(self.tiles(r, tile_rows) / self.xbs_per_core))

    # ------------------------------------------------------------------ whole graph
    def graph_ns(self, regions: list[Region], plans: dict[str, RegionPlan], pipeline: bool,
                 producers: dict[str, list[str]] | None = None) -> tuple[float, dict[str, float]]:
        """End-to-end estimate of one inference.

        Without the pipeline, regions run one after the other.  With it, each
        chunk of a region may load its input as soon as the producing regions
        have stored the part of their output it needs (its input span, kernel
        halo included; outputs of producers are matched by share of the
        tensor, as host operators in between are element-wise or pooling);
        :meth:`chunk_finish` then gives when each of its chunks is stored.
        Segments run one after the other.

        Returns
        -------
        float
            End-to-end latency (ns).
        dict
            Per-region latency when run alone (the plans').
        """
        per = {r.name: plans[r.name].latency_ns for r in regions}
        producers = producers or {}
        curves: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        end = seg_start = 0.0
        cur_seg = shared_seg = None
        shared = (0.0, 0.0, 0.0)
        off_free = 0.0  # the off-chip interface fetches the weights of a segment's regions in order
        for r in regions:
            p = plans[r.name]
            if p.segment != cur_seg:  # a new segment starts once the previous one is done
                cur_seg, seg_start = p.segment, end
                off_free = seg_start
            starts, stops = self.chunks(r, p.replicas)
            t_in = np.full(len(starts), seg_start if pipeline else end)
            if pipeline:
                f0, f1 = r.input_span(starts, stops)
                for q in producers.get(r.name, []):
                    if q not in curves:
                        continue
                    g0, g1, fq = curves[q]
                    if plans[q].segment != p.segment:
                        t_in = np.maximum(t_in, fq.max())
                        continue
                    lo = np.searchsorted(g1, f0 + 1e-12, side="right")
                    hi = np.maximum(np.searchsorted(g0, f1 - 1e-12, side="left"), lo + 1)
                    t_in = np.maximum(t_in, _range_max(fq, lo, np.minimum(hi, len(fq))))
            fin, busy = self.chunk_finish(r, p.replicas, p.tile_rows, p.resident, p.passes, t_in,
                                          t_free=seg_start if pipeline else end,
                                          t_offchip=off_free if pipeline else None)
            if not p.resident:
                off_free = max(off_free, seg_start if pipeline else end) + float(
                    np.sum(self.fetch_ns(r, p.tile_rows, p.passes)))
            # the global-buffer port, the chip ALU and the off-chip interface serve every region of the segment
            shared = busy if p.segment != shared_seg else tuple(a + b for a, b in zip(shared, busy))
            shared_seg = p.segment
            base = seg_start if pipeline else float(t_in.min())
            m = r.mkn[0]
            curves[r.name] = (starts / m, stops / m, fin)
            end = max(end, float(fin.max()), base + (max(shared) if pipeline else max(busy)))
        return end, per


def _range_max(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``max(values[lo[i]:hi[i]])`` for every ``i`` (sparse table, vectorised; ranges non-empty)."""
    table = [np.asarray(values, dtype=float)]
    span = 1
    while 2 * span <= len(values):
        prev = table[-1]
        table.append(np.maximum(prev[:-span], prev[span:]))
        span *= 2
    length = np.maximum(hi - lo, 1)
    level = np.floor(np.log2(length)).astype(np.int64)
    out = np.empty(len(lo))
    for lv in np.unique(level):
        sel = level == lv
        t = table[lv]
        out[sel] = np.maximum(t[lo[sel]], t[hi[sel] - (1 << lv)])
    return out


def halo_fraction(r: Region) -> float:
    """Extra share of a convolution's input needed beyond its output share (kernel halo)."""
    if r.kind != CONV2D:
        return 0.0
    h = r.in_shapes[0][2]
    kh = r.conv["kernel"][0]
    dh = r.conv["dilation"][0]
    return (dh * (kh - 1)) / max(1, h)


def chunk_bounds(m_total: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``[start, stop)`` of the ``n`` near-equal chunks of ``m_total`` vectors (empty ones dropped)."""
    edges = np.linspace(0, m_total, n + 1).round().astype(np.int64)
    keep = edges[1:] > edges[:-1]
    return edges[:-1][keep], edges[1:][keep]


def _maxplus(ready: np.ndarray, work: np.ndarray, axis: int = 0) -> np.ndarray:
    """Finish times of jobs served in order by one unit: ``f[i] = max(f[i-1], ready[i]) + work[i]``."""
    w = np.cumsum(work, axis=axis)
    return np.maximum.accumulate(ready - (w - work), axis=axis) + w


def chunk_count(r: Region, replicas: int) -> int:
    """Pipeline granularity: output rows for convolutions, at most 16 row blocks otherwise
    (at least one per replica); a ``dmatmul``'s chunks cut ``M`` and hold every head."""
    m, _, _ = r.mkn
    if r.kind == DMATMUL:
        return int(min(m, max(16, replicas)))
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
            if used + cost[i] <= budget and reps[i] < _vectors(regions[i]):
                reps[i] += 1
                used += cost[i]
                lat[i] = cm.region_ns(regions[i], reps[i], tile_rows[i])
                break
        else:
            return reps


def _latency_curve(latency, max_d: int, exact: int = 32, step: float = 1.08) -> np.ndarray:
    """``latency(d)`` for ``d = 1 .. max_d``, evaluated exactly up to ``exact`` replicas and then on a
    geometric grid (ratio ``step``); between grid points the value of the grid point below holds, so
    the duplication DP, which pays for every replica, only picks grid points there."""
    grid = sorted({*range(1, min(exact, max_d) + 1), *np.unique(np.geomspace(exact, max_d, num=max(
        2, int(math.log(max(max_d, exact) / exact) / math.log(step)) + 2)).astype(int)).tolist(), max_d})
    grid = [d for d in grid if 1 <= d <= max_d]
    vals = np.array([latency(d) for d in grid])
    idx = np.searchsorted(grid, np.arange(1, max_d + 1), side="right") - 1
    return vals[idx]


def _vectors(r: Region) -> int:
    """Input vectors that replicas can share out (a ``dmatmul``'s chunks cut ``M``; each holds every head)."""
    return r.mkn[0] if r.kind == DMATMUL else r.batch * r.mkn[0]


def _max_replicas(r: Region, budget_units: int, unit_cost: int) -> int:
    # a dmatmul's replicas each write the run-time operand (in parallel, at the start of the region)
    return max(1, min(_vectors(r), budget_units // max(1, unit_cost)))


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
    cm = CostModel(hw, wbits, ibits, mvm_pipeline=opts.mvm_pipeline)
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
                _latency_curve(lambda d: cm.region_ns(r, d, tile_rows[r.name], resident), _max_replicas(r, budget, c))
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
                if c * hw.core.crossbars >= xbs_of(r) else d
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
            passes = max(1, math.ceil(xbs_of(r) / xbs_total))
            sched.plans[r.name] = RegionPlan(
                replicas=d, tile_rows=tr, tiles=xbs_of(r), cores=c, segment=s_idx,
                latency_ns=cm.region_ns(r, d, tr, resident, passes=passes),
                write_ns=(0.0 if resident and r.kind != DMATMUL else cm.write_ns(r, tr) * passes),
                resident=resident, passes=passes,
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
            _latency_curve(lambda d: cm.region_ns(r, d, tile_rows[r.name], False), _max_replicas(r, budget, c))
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

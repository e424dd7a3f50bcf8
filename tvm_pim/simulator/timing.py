"""The bank-PIM simulator: executes command streams functionally and in time.

It sees only a command stream (:mod:`tvm_pim.commands`) and the hardware
description; it knows what each command does from its *roles* in the
hardware file.

Functional execution
    Banks, input registers, accumulators and group buffers hold FP16 values
    (unwritten memory is NaN, so reading it shows up in the results).  Every
    command runs vectorised over the groups and cores it addresses.  The units
    compute as the hardware does: products and sums are rounded to FP16 at
    every step, accumulation follows the order of the column commands
    (``numpy.add.accumulate`` in float16), an adder tree (``dot``) rounds its
    16-product sum once, the group softmax unit computes in float32 and
    stores FP16.  The host merges partial results in float32 and rounds the
    output to FP16 once.

Timing
    Per PIM group (channel) and phase, with vectorised per-channel and
    per-core arithmetic (loops are multiplied out, never expanded):

    * every command occupies the channel's command/data bus for its
      ``latency_cycles`` (host data transfers at least one column's transfer
      time at the channel's share of the host bus);
    * every core (its banks) accumulates its own busy time: ``ACT`` costs
      ``tRCD``, ``PRE`` costs ``tRP`` and stretches the open row to ``tRAS``,
      column commands cost their issue spacing (at least ``tCCD_L`` for one
      bank's successive bank-level commands), host bursts into a bank pay
      their row activations, precharges and ``tWR``;
    * bank-level column commands (host transfers to one bank, per-core
      compute) also occupy their bank group's data path for ``tCCD_L`` each,
      while the bus spaces commands to different bank groups by ``tCCD_S``;
    * a channel's time is ``max(bus, busiest core, busiest bank group)``, so
      bank-level commands to different cores overlap their row cycles while
      sharing the bus, and those to different bank groups overlap their
      column spacing;
    * a phase lasts as long as its slowest channel (all channels in parallel),
      or the sum over channels for ``serial`` phases, and at least its host
      traffic divided by the host bandwidth; host actions (launch, merges) add
      the host model's time.

    ``setup`` (placing resident tensors) is reported apart from the latency.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from .abstraction import PimView, ceil_div
from .commands import Command, Loop, Stream, eval_expr, layout_address, parse_ref, parse_stream
from .hardware.schema import PIMHardware


class SimulationError(RuntimeError):
    """The stream asked for something the device or the stream's declarations do not allow."""


@dataclass
class SimResult:
    """What one run of a stream produced."""

    latency_ns: float
    phases_ns: dict[str, float]
    setup_ns: float
    rearrangement_ns: float
    compute_ns: float
    host_ns: float
    energy_pj: float
    energy_breakdown_pj: dict[str, float]
    command_counts: dict[str, int]
    host_bytes: float
    output: np.ndarray | None = None
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "latency_ns": self.latency_ns,
            "phases_ns": dict(self.phases_ns),
            "setup_ns": self.setup_ns,
            "data_rearrangement_ns": self.rearrangement_ns,
            "compute_ns": self.compute_ns,
            "host_ns": self.host_ns,
            "energy_pj": self.energy_pj,
            "energy_breakdown_pj": dict(self.energy_breakdown_pj),
            "command_counts": dict(self.command_counts),
            "host_bytes": self.host_bytes,
        }


_DATA_ROLES = ("host_read", "host_write", "reg_write")


def _role_of(hw: PIMHardware, op: str, args: dict | None = None) -> tuple[str, ...]:
    """The role a command plays here; a command with several roles is resolved by its operands."""
    cmd = hw.commands.get(op)
    if cmd is None:
        raise SimulationError(f"command {op} is not in {hw.meta.name}'s command set")
    roles = tuple(cmd.roles) or ("other",)
    if len(roles) > 1 and args is not None:
        if "acc_add" in roles and "vecs" in args:
            return ("acc_add",)
        if "reg_write" in roles and "reg" in args and "lay" not in args:
            return ("reg_write",)
        if "host_write" in roles and "lay" in args:
            return ("host_write",)
        for r in roles:
            if r not in ("acc_add", "reg_write"):
                return (r,)
    return roles


def _selection(it: Command, C: int):
    """Index objects for a command's groups and cores (slices when contiguous), cached on the command."""
    sel = getattr(it, "_sel", None)
    if sel is not None and sel[4] == C:
        return sel[:4]
    g = np.asarray(it.groups, dtype=np.int64)
    cs = np.arange(C) if it.cores is None else np.asarray(it.cores, dtype=np.int64)
    gsel = slice(int(g[0]), int(g[-1]) + 1) if g.size and g[-1] - g[0] + 1 == g.size else g
    csel = slice(int(cs[0]), int(cs[-1]) + 1) if cs.size and cs[-1] - cs[0] + 1 == cs.size else cs
    it._sel = (gsel, csel, g, cs, C)
    return gsel, csel, g, cs


def _ci(gsel, csel):
    """Index of a (groups x cores) block of a 2-D array."""
    if isinstance(gsel, slice) or isinstance(csel, slice):
        return gsel, csel
    return np.ix_(gsel, csel)


class _LazyEnv:
    """An :class:`_Env` built on first use (timing rarely needs one)."""

    def __init__(self, stream, g, cs):
        self.args = (stream, {}, g, cs)
        self.env = None

    def __call__(self, text: str):
        if self.env is None:
            self.env = _Env(*self.args)
        return self.env(text)


class _Env:
    """Expression environment of one command: tables sliced to its groups/cores, loop variables."""

    def __init__(self, stream: Stream, loops: dict[str, int], groups: np.ndarray, cores: np.ndarray):
        self.d = dict(loops)
        G, C = stream.groups, stream.cores
        gfull = len(groups) == G and groups[0] == 0 and groups[-1] == G - 1
        cfull = len(cores) == C and cores[0] == 0 and cores[-1] == C - 1
        for name, (kind, arr) in stream.tables.items():
            if kind == "g":
                self.d[name] = (arr if gfull else arr[groups])[:, None]
            elif gfull and cfull:
                self.d[name] = arr.reshape(G, C)
            else:
                self.d[name] = arr.reshape(G, C)[np.ix_(groups, cores)]
        self.d["g"] = groups[:, None]
        self.d["c"] = cores[None, :]

    def __call__(self, text: str):
        return eval_expr(text, self.d)


def _ref_indices(ref_text: str, env: _Env, shape, ng: int, nc: int, perm=None):
    """Index arrays, validity and tile masks of a tensor box for every (group, core).

    Returns (index tuple in tensor-dim order broadcast to (ng, nc, *box)), valid mask,
    tile mask, box (in box order).
    """
    ref = parse_ref(ref_text)
    if len(ref.comps) != len(shape):
        raise SimulationError(f"{ref_text}: tensor has {len(shape)} dimensions")
    ranges = [i for i, c in enumerate(ref.comps) if len(c) >= 3]
    order = list(range(len(ranges))) if perm is None else list(perm)
    box = [int(ref.comps[ranges[i]][-1]) for i in order]
    nd = len(box)
    idx = []
    valid = np.ones((ng, nc) + (1,) * nd, bool)
    tile = np.ones((1, 1) + (1,) * nd, bool)
    for t, c in enumerate(ref.comps):
        if len(c) == 1:
            v = np.broadcast_to(np.asarray(env(c[0])), (ng, nc)).reshape((ng, nc) + (1,) * nd)
            idx.append(v)
            valid = valid & (v >= 0) & (v < shape[t])
            continue
        org = np.broadcast_to(np.asarray(env(c[0])), (ng, nc))
        val = np.broadcast_to(np.asarray(env(c[1])), (ng, nc))
        tl = int(c[2])
        slots = int(c[-1])
        axis = order.index(ranges.index(t))
        ar = np.arange(slots).reshape((1, 1) + tuple(slots if a == axis else 1 for a in range(nd)))
        pos = org.reshape((ng, nc) + (1,) * nd) + ar
        idx.append(pos)
        lim = np.minimum(val, tl).reshape((ng, nc) + (1,) * nd)
        valid = valid & (ar < lim) & (pos < shape[t]) & (pos >= 0)
        tile = tile & (ar < tl)
    full = (ng, nc) + tuple(box)
    idx = tuple(np.broadcast_to(np.clip(i, 0, shape[t] - 1), full) for t, i in enumerate(idx))
    return idx, np.broadcast_to(valid, full), np.broadcast_to(tile, full), box


def _box_data(src: str, env, T: np.ndarray, ng: int, nc: int, perm=None):
    """Data of a tensor box for every (group, core), by slicing (no index arrays).

    Returns ``data`` (ng, nc, *box) FP16 with zeros outside the tensor and the
    valid range, ``vvalid`` (ng, nc, V) whether each vector exists, ``vtile``
    (V,) whether each vector lies in the tile, and the box (in box order).
    """
    ref = parse_ref(src)
    if len(ref.comps) != T.ndim:
        raise SimulationError(f"{src}: tensor has {T.ndim} dimensions")
    fixed: dict[int, np.ndarray] = {}
    rng: dict[int, tuple] = {}
    for t, c in enumerate(ref.comps):
        if len(c) == 1:
            fixed[t] = np.broadcast_to(np.asarray(env(c[0])), (ng, nc))
        else:
            org = np.broadcast_to(np.asarray(env(c[0])), (ng, nc))
            val = np.broadcast_to(np.asarray(env(c[1])), (ng, nc))
            tl, slots = int(c[2]), int(c[-1])
            n = np.clip(np.minimum(np.minimum(val, tl), T.shape[t] - org), 0, slots)
            rng[t] = (org, n, tl, slots)
    rdims = sorted(rng)
    order = list(range(len(rdims))) if perm is None else list(perm)
    box_t = [rng[t][3] for t in rdims]  # tensor order
    data = np.zeros((ng, nc) + tuple(box_t), np.float16)
    for gi in range(ng):
        for ci in range(nc):
            sl, dst = [], []
            ok = True
            for t in range(T.ndim):
                if t in fixed:
                    i = int(fixed[t][gi, ci])
                    if not 0 <= i < T.shape[t]:
                        ok = False
                        break
                    sl.append(i)
                else:
                    org, n, _, _ = rng[t]
                    o, k = int(org[gi, ci]), int(n[gi, ci])
                    if k <= 0:
                        ok = False
                        break
                    sl.append(slice(o, o + k))
                    dst.append(slice(0, k))
            if ok:
                data[(gi, ci) + tuple(dst)] = T[tuple(sl)]
    fixed_ok = np.ones((ng, nc), bool)
    for t, v in fixed.items():
        fixed_ok &= (v >= 0) & (v < T.shape[t])
    box = [box_t[i] for i in order]
    if perm is not None:
        data = np.transpose(data, [0, 1] + [2 + i for i in order])
    rd = [rdims[i] for i in order]
    vv = (fixed_ok & (rng[rd[-1]][1] > 0)).reshape(ng, nc, 1)
    vt = np.ones((1,), bool)
    for t in rd[:-1]:
        _org, n, tl, slots = rng[t]
        ar = np.arange(slots)
        mask = ar[None, None, :] < np.asarray(n).reshape(ng, nc, 1)
        vv = (vv[:, :, :, None] & mask[:, :, None, :]).reshape(ng, nc, -1)
        vt = (vt[:, None] & (ar < tl)[None, :]).reshape(-1)
    return data, vv, vt, box


class Simulator:
    """Runs command streams on one PIM device.

    Parameters
    ----------
    hw : PIMHardware
    """

    def __init__(self, hw: PIMHardware):
        self.hw = hw
        self.view = PimView(hw)
        t = hw.dram.timing
        self.t = t
        v = self.view
        self.col_host = max(float(t.tccd_s), v.column_bytes / v.channel_bw_gbs / t.tck_ns)
        self.lanes = v.elems_per_column

    # ================================================================== public API
    def run(self, stream: Stream | str, inputs: dict[str, np.ndarray] | None = None, functional: bool = True) -> SimResult:
        """Execute a stream.

        Parameters
        ----------
        stream : Stream or str
            A parsed stream or its text.
        inputs : dict of str to numpy.ndarray, optional
            Host tensors (inputs and resident ones); needed when ``functional``.
        functional : bool
            Compute values (else timing only).

        Returns
        -------
        SimResult
        """
        if isinstance(stream, str):
            stream = parse_stream(stream)
        if stream.device != self.hw.meta.name:
            raise SimulationError(f"stream is for device '{stream.device}', simulator models '{self.hw.meta.name}'")
        if stream.groups > self.view.groups or stream.cores > self.view.cores_per_group:
            raise SimulationError(
                f"stream uses {stream.groups} groups x {stream.cores} cores; the device has "
                f"{self.view.groups} x {self.view.cores_per_group}"
            )
        res = self._time(stream)
        if functional:
            res.output = self._execute(stream, inputs or {})
        return res

    # ================================================================== timing
    def _time(self, stream: Stream) -> SimResult:
        v, t, hw = self.view, self.t, self.hw
        Gs, C = v.groups, stream.cores
        R = v.core_row_cols
        counts: Counter = Counter()
        energy: Counter = Counter()
        phases: dict[str, float] = {}
        split = {"rearrangement": 0.0, "compute": 0.0, "host": 0.0}
        host_bytes_total = 0.0
        lanes = self.lanes

        for ph in stream.phases:
            bus = np.zeros(Gs)
            data_bus = np.zeros(Gs)  # part of bus time spent on host data transfers
            chain = np.zeros((Gs, C))
            seg = np.zeros((Gs, C))
            colw = np.zeros((Gs, C))  # bank-level column commands per core, each tCCD_L of its bank group
            host_bytes = 0.0
            host_ns = 0.0
            st = {"bus": bus, "chain": chain, "seg": seg, "data_bus": data_bus, "colw": colw}
            # commands addressing every group and core of the stream add the same time to all of them:
            # they are summed as scalars (the common case), the others per channel / core in arrays
            U = {"bus": 0.0, "chain": 0.0, "seg": 0.0, "colw": 0.0}
            seg_dirty = False
            Gst = stream.groups
            tRCD, tRP, tRAS, tCCDL = float(t.trcd), float(t.trp), float(t.tras), float(t.tccd_l)

            def uniform(it) -> bool:
                u = getattr(it, "_uniform", None)
                if u is None or u[1] != (Gst, C):
                    g = it.groups
                    full_g = len(g) == Gst and (Gst == 0 or (g[0] == 0 and g[-1] == Gst - 1))
                    full_c = it.cores is None or (len(it.cores) == C and it.cores[0] == 0 and it.cores[-1] == C - 1)
                    u = (full_g and full_c, (Gst, C))
                    it._uniform = u
                return u[0]

            def walk(items, mult, loops):
                nonlocal host_bytes, host_ns, seg_dirty
                for it in items:
                    if isinstance(it, Loop):
                        # the body's cost does not depend on the loop variable's value
                        walk(it.body, mult * it.count, {**loops, it.var: 0})
                        continue
                    op = it.op
                    if op.startswith("HOST."):
                        host_bytes, host_ns = self._time_host(it, mult, st, host_bytes, host_ns, counts, energy, Gs)
                        continue
                    roles = _role_of(hw, op, it.args)
                    cmd = hw.commands[op]
                    lat = float(cmd.latency_cycles)
                    bcast = it.cores is None
                    role = roles[0]
                    if role not in _DATA_ROLES and uniform(it) and not (role == "pre" and seg_dirty):
                        issues = 1 if bcast else C
                        if role == "act":
                            U["chain"] += mult * max(lat, tRCD)
                            U["seg"] = 0.0
                            U["bus"] += mult * issues
                            n_cmd = 1
                        elif role == "pre":
                            U["chain"] += mult * (max(lat, tRP) + max(0.0, tRAS - tRCD - U["seg"]))
                            U["seg"] = 0.0
                            U["bus"] += mult * issues
                            n_cmd = 1
                        elif role in ("mac", "dot", "acc_add", "load", "add", "mul", "store"):
                            n = int(it.args.get("n", "1"))
                            step = lat if bcast else max(lat, tCCDL)
                            U["bus"] += mult * issues * n * lat
                            U["chain"] += mult * n * step
                            U["seg"] += n * step
                            if not bcast:
                                U["colw"] += mult * n * tCCDL
                            n_cmd = n * issues
                        elif role in ("to_group", "from_group"):
                            n = int(it.args.get("n", "1"))
                            cols = ceil_div(n, lanes) if role == "to_group" else n
                            U["bus"] += mult * cols * lat * (C if role == "to_group" else 1)
                            U["chain"] += mult * cols * lat
                            n_cmd = cols * (C if role == "to_group" else 1)
                        elif role == "group_softmax":
                            cols = ceil_div(int(it.args["pieces"]) * int(it.args["tile"]), lanes)
                            U["bus"] += mult * cols * lat
                            n_cmd = cols
                        else:
                            U["bus"] += mult * lat
                            U["chain"] += mult * lat
                            n_cmd = 1
                        counts[op] += mult * n_cmd * Gst  # one issue on every group's channel
                        energy[op] += mult * n_cmd * Gst * cmd.energy_pj
                        continue
                    if role != "pre" and role not in _DATA_ROLES:
                        seg_dirty = True
                    gsel, csel, g, cs = _selection(it, C)
                    issues = 1 if bcast else len(cs)
                    if role in ("act",):
                        lat = max(lat, float(t.trcd))
                        chain[_ci(gsel, csel)] += mult * lat
                        seg[_ci(gsel, csel)] = 0.0
                        bus[gsel] += mult * issues  # one command slot
                        n_cmd = 1
                    elif role == "pre":
                        lat = max(lat, float(t.trp))
                        stretch = np.maximum(0.0, t.tras - t.trcd - seg[_ci(gsel, csel)] - U["seg"])
                        U["seg"] = 0.0
                        chain[_ci(gsel, csel)] += mult * (lat + stretch)
                        seg[_ci(gsel, csel)] = 0.0
                        bus[gsel] += mult * issues
                        n_cmd = 1
                    elif role in _DATA_ROLES:
                        # (columns summed over every group and core already)
                        n_cmd = self._time_data(it, role, lat, mult, g, cs, bcast, stream, st, R, gsel, csel)
                        host_bytes += mult * n_cmd * v.column_bytes
                        counts[op] += mult * n_cmd
                        energy[op] += mult * n_cmd * cmd.energy_pj
                        continue
                    elif role in ("mac", "dot", "acc_add", "load", "add", "mul", "store"):
                        n = int(it.args.get("n", "1"))
                        step = lat if bcast else max(lat, float(t.tccd_l))
                        bus[gsel] += mult * issues * n * lat
                        chain[_ci(gsel, csel)] += mult * n * step
                        seg[_ci(gsel, csel)] += n * step
                        if not bcast:
                            colw[_ci(gsel, csel)] += mult * n * tCCDL
                        n_cmd = n * issues
                    elif role in ("to_group", "from_group"):
                        n = int(it.args.get("n", "1"))
                        cols = ceil_div(n, lanes) if role == "to_group" else n
                        bus[gsel] += mult * cols * lat * (C if role == "to_group" else 1)
                        chain[_ci(gsel, csel)] += mult * cols * lat
                        n_cmd = cols * (C if role == "to_group" else 1)
                    elif role == "group_softmax":
                        cols = ceil_div(int(it.args["pieces"]) * int(it.args["tile"]), lanes)
                        bus[gsel] += mult * cols * lat
                        n_cmd = cols
                    else:  # mode, control, refresh, other
                        bus[gsel] += mult * lat
                        chain[gsel, :] += mult * lat
                        n_cmd = 1
                    counts[op] += mult * n_cmd * len(g)
                    energy[op] += mult * n_cmd * len(g) * cmd.energy_pj

            walk(ph.body, 1, {})
            bus[:Gst] += U["bus"]
            chain[:Gst, :] += U["chain"]
            colw[:Gst, :] += U["colw"]
            # bank-group parallelism: bank-level column commands to the banks of one bank group are
            # spaced by tCCD_L, to different bank groups by tCCD_S (the bus term)
            bg_of = np.arange(C) // v.cores_per_bank_group
            bg_busy = np.zeros((Gs, int(bg_of[-1]) + 1 if C else 1))
            np.add.at(bg_busy.T, bg_of, colw.T)
            per_ch = np.maximum(np.maximum(bus, chain.max(axis=1)), bg_busy.max(axis=1))
            tck = t.tck_ns
            if ph.serial:
                dev_ns = float(per_ch.sum()) * tck
            else:
                dev_ns = float(per_ch.max()) * tck
            bw_ns = host_bytes / v.host_bw_gbs  # bytes / (GB/s) = ns
            phase_ns = max(dev_ns, bw_ns) + host_ns
            phases[ph.name] = phase_ns
            host_bytes_total += host_bytes if ph.name != "setup" else 0.0
            if ph.name == "compute":
                # share of the compute phase spent moving data between host and cores
                busiest = int(np.argmax(per_ch))
                frac = float(data_bus[busiest] / per_ch[busiest]) if per_ch[busiest] > 0 else 0.0
                d = max(dev_ns, bw_ns)
                split["rearrangement"] += d * frac
                split["compute"] += d * (1 - frac)
                split["host"] += host_ns
            elif ph.name != "setup":
                split["rearrangement"] += max(dev_ns, bw_ns)
                split["host"] += host_ns
        latency = sum(ns for name, ns in phases.items() if name != "setup")
        return SimResult(
            latency_ns=latency,
            phases_ns=phases,
            setup_ns=phases.get("setup", 0.0),
            rearrangement_ns=split["rearrangement"],
            compute_ns=split["compute"],
            host_ns=split["host"],
            energy_pj=float(sum(energy.values())),
            energy_breakdown_pj={k: float(e) for k, e in sorted(energy.items())},
            command_counts={k: int(n) for k, n in sorted(counts.items())},
            host_bytes=host_bytes_total,
        )

    def _time_host(self, it: Command, mult, st, host_bytes, host_ns, counts, energy, Gs):
        v, hw = self.view, self.hw
        if it.op == "HOST.LAUNCH":
            host_ns += mult * hw.system.host.launch_overhead_us * 1e3
        elif it.op in ("HOST.LOAD", "HOST.STORE"):
            nbytes = float(it.args["bytes"])
            cols = nbytes / v.column_bytes / Gs  # spread over every channel (host layout interleaves)
            st["bus"][:] += mult * cols * self.col_host
            st["data_bus"][:] += mult * cols * self.col_host
            host_bytes += mult * nbytes
            name = "RD" if it.op == "HOST.LOAD" else "WR"
            if name in hw.commands:
                n = mult * nbytes / v.column_bytes
                counts[f"{it.op}({name})"] += int(round(n))
                energy[f"{it.op}({name})"] += n * hw.commands[name].energy_pj
        elif it.op == "HOST.REDUCE":
            flops = float(it.args.get("flops", 0))
            host_ns += mult * flops / (hw.system.host.tflops_fp16 * 1e3)
        else:
            raise SimulationError(f"unknown host action {it.op}")
        return host_bytes, host_ns

    def _time_data(self, it: Command, role, lat, mult, g, cs, bcast, stream: Stream, st, R, gsel, csel) -> int:
        """Bus/bank time of a host data command; returns the columns moved (all issues)."""
        t = self.t
        lanes = self.lanes
        bus, chain, data_bus, colw = st["bus"], st["chain"], st["data_bus"], st["colw"]
        env = _LazyEnv(stream, g, cs if not bcast else np.arange(stream.cores)[:1])
        src = it.args.get("src") or it.args.get("dst")
        if role == "reg_write":
            n_is = 1 if bcast else len(cs)
            if src.startswith("ones:"):
                cols = np.full((len(g), n_is), ceil_div(int(src[5:]), lanes))
            else:
                ref = parse_ref(src)
                cols = np.full((len(g), n_is), ceil_div(ref.box[-1], lanes))
        elif it.args.get("from") == "gbuf":
            ref = parse_ref(src)
            regions = ceil_div(stream.cores, int(it.args.get("cdiv", "1")))
            cols = np.full((len(g), regions), ceil_div(int(np.prod(ref.box)), lanes))
            ncols = cols.sum(axis=1)
            step = max(lat, self.col_host)
            bus[gsel] += mult * ncols * step
            data_bus[gsel] += mult * ncols * step
            return int(ncols.sum())
        else:
            cols = self._box_columns(it, env, stream, len(g), 1 if bcast else len(cs))
        if bcast:
            cols = cols[:, :1]
        step_bus = max(lat, self.col_host) if bcast else self.col_host
        per_core = cols.astype(float)
        ncols_ch = per_core.sum(axis=1)
        bus[gsel] += mult * ncols_ch * step_bus
        data_bus[gsel] += mult * ncols_ch * step_bus
        rows = np.ceil(per_core / R) if role != "reg_write" else 0.0
        bank = per_core * max(lat, self.col_host, float(t.tccd_l) if not bcast else 0.0) + rows * (
            t.trcd + t.trp + (t.twr if role == "host_write" else 0)
        )
        if bcast:
            chain[gsel, :] += mult * np.broadcast_to(bank, (len(g), 1))
        else:
            chain[_ci(gsel, csel)] += mult * bank
            colw[_ci(gsel, csel)] += mult * per_core * float(t.tccd_l)
        return int(per_core.sum())

    def _box_columns(self, it: Command, env: _Env, stream: Stream, ng: int, nc: int) -> np.ndarray:
        """Columns a tile transfer moves for each (group, core)."""
        lanes = self.lanes
        ref = parse_ref(it.args.get("src") or it.args.get("dst"))
        pad = it.args.get("pad", "0") == "1"
        perm = [int(x) for x in it.args["perm"].split(",")] if "perm" in it.args else None
        ranges = [c for c in ref.comps if len(c) >= 3]
        order = list(range(len(ranges))) if perm is None else perm
        ranges = [ranges[i] for i in order]
        vec_counts = np.ones((ng, nc))
        for c in ranges[:-1]:
            tl = int(c[2])
            if pad:
                vec_counts = vec_counts * tl
            else:
                val = np.broadcast_to(np.asarray(env(c[1])), (ng, nc))
                vec_counts = vec_counts * np.clip(val, 0, tl)
        last = ranges[-1]
        if it.args.get("slot") == "res":
            # one result column per output (its lanes hold partial sums, or the result in lane 0)
            if pad:
                lane_cols = int(last[2])
            else:
                lane_cols = np.clip(np.broadcast_to(np.asarray(env(last[1])), (ng, nc)), 0, int(last[2]))
        elif it.args.get("lay", "").startswith("ilv") and it.args.get("from") == "bank":
            val = np.broadcast_to(np.asarray(env(last[1])), (ng, nc))
            lane_cols = np.ceil(np.clip(val, 0, int(last[2])) / lanes)
        else:
            lane_cols = ceil_div(int(last[-1]), lanes)
        return vec_counts * lane_cols

    # ================================================================== functional
    def _execute(self, stream: Stream, inputs: dict[str, np.ndarray]) -> np.ndarray:
        v, hw = self.view, self.hw
        G, C = stream.groups, stream.cores
        lanes = self.lanes
        for tdecl in stream.tensors:
            if tdecl.role != "output":
                if tdecl.name not in inputs:
                    raise SimulationError(f"stream needs tensor '{tdecl.name}' {tdecl.shape}")
                a = np.asarray(inputs[tdecl.name])
                if tuple(a.shape) != tdecl.shape:
                    raise SimulationError(f"tensor '{tdecl.name}' has shape {a.shape}, the stream declares {tdecl.shape}")
        host = {t.name: np.asarray(inputs[t.name]).astype(np.float16) for t in stream.tensors if t.role != "output"}
        out_decl = [t for t in stream.tensors if t.role == "output"][0]
        out = np.zeros(out_decl.shape, np.float32)
        host[out_decl.name] = out
        mem = np.full((G, C, max(1, stream.memory), lanes), np.nan, np.float16)
        regs = np.full((G, C, max(1, v.input_regs), lanes), np.nan, np.float16)
        acc = np.zeros((G, C, max(1, v.acc_regs) * lanes), np.float16)
        gbuf = np.full((G, max(1, stream.gbuf)), np.nan, np.float16)
        S = {"mem": mem, "regs": regs, "acc": acc, "gbuf": gbuf, "host": host, "out": out}
        allc = np.arange(C)

        def walk(items, loops):
            for it in items:
                if isinstance(it, Loop):
                    for i in range(it.count):
                        loops[it.var] = i
                        walk(it.body, loops)
                    loops.pop(it.var, None)
                    continue
                if it.op.startswith("HOST."):
                    continue
                roles = _role_of(hw, it.op, it.args)
                g = np.asarray(it.groups)
                if g.size and (g.max() >= G):
                    raise SimulationError(f"{it.op}: group {g.max()} beyond the stream's {G} groups")
                cs = allc if it.cores is None else np.asarray(it.cores)
                env = _Env(stream, loops, g, cs)
                self._exec(it, roles, env, g, cs, it.cores is None, stream, S)

        for ph in stream.phases:
            walk(ph.body, {})
        return out.astype(np.float16)

    # ------------------------------------------------------------------ one command
    def _addr(self, it, env, key="addr", ng=1, nc=1):
        a = np.asarray(env(it.args.get(key, "0")))
        return np.broadcast_to(a, (ng, nc)).astype(np.int64)

    def _check_uniform(self, arr, what, it):
        arr = np.asarray(arr)
        if arr.ndim >= 2 and arr.shape[1] > 1 and not np.array_equal(arr, np.broadcast_to(arr[:, :1], arr.shape)):
            raise SimulationError(f"{it.op}: a group-level command needs the same {what} in every core")

    def _exec(self, it: Command, roles, env: _Env, g, cs, bcast, stream: Stream, S):
        lanes = self.lanes
        mem, regs, acc, gbuf = S["mem"], S["regs"], S["acc"], S["gbuf"]
        ng, nc = len(g), len(cs)
        a = it.args
        role = roles[0]
        if role in ("act", "pre", "mode", "control", "refresh", "other"):
            return
        if role == "reg_write":
            src = a["src"]
            r0 = int(env(a.get("reg", "0")))
            if src.startswith("ones:"):
                n = int(src[5:])
                data = np.ones((ng, nc, n), np.float16)
            else:
                tname = parse_ref(src).name
                T = S["host"][tname]
                idx, valid, _tile, box = _ref_indices(src, env, T.shape, ng, nc)
                data = np.where(valid, T[idx], 0).astype(np.float16).reshape(ng, nc, -1)
                if bcast:
                    self._check_uniform(data, "data", it)
            ncols = ceil_div(data.shape[-1], lanes)
            pad = ncols * lanes - data.shape[-1]
            if pad:
                data = np.concatenate([data, np.zeros((ng, nc, pad), np.float16)], axis=-1)
            if r0 + ncols > regs.shape[2]:
                raise SimulationError(f"{it.op}: {ncols} registers from {r0}; the core has {regs.shape[2]}")
            regs[np.ix_(g, cs, np.arange(r0, r0 + ncols))] = data.reshape(ng, nc, ncols, lanes)
            return
        if role == "host_write":
            self._host_write(it, env, g, cs, bcast, stream, S)
            return
        if role == "host_read":
            self._host_read(it, env, g, cs, stream, S)
            return
        if role in ("mac", "dot", "acc_add"):
            nv, per, pitch = int(a["vecs"]), int(a["per"]), int(a["pitch"])
            addr = self._addr(it, env, ng=ng, nc=nc)
            if bcast:
                self._check_uniform(addr, "address", it)
            a0 = int(env(a.get("acc", "0")))
            offs = (np.arange(nv)[:, None] * pitch + np.arange(per)[None, :])
            cols = addr[:, :, None, None] + offs[None, None]
            if cols.max() >= mem.shape[2]:
                raise SimulationError(f"{it.op}: column {cols.max()} beyond the stream's memory {mem.shape[2]}")
            data = mem[g[:, None, None, None], cs[None, :, None, None], cols]  # (ng, nc, nv, per, lanes)
            fresh = a.get("fresh", "0") == "1"
            if role == "acc_add":
                terms = data
            else:
                r0 = int(env(a.get("reg", "0")))
                rr = regs[np.ix_(g, cs, np.arange(r0, r0 + per))]  # (ng, nc, per, lanes)
                terms = (data * rr[:, :, None, :, :]).astype(np.float16)
            if role == "dot":
                terms = terms.astype(np.float32).sum(axis=-1).astype(np.float16)  # adder tree, one rounding
                av = acc.reshape(acc.shape[0], acc.shape[1], -1)
                cur = av[np.ix_(g, cs, np.arange(a0, a0 + nv))]
                init = np.zeros_like(cur) if fresh else cur
                seq = np.concatenate([init[..., None], terms], axis=-1)
                res = np.add.accumulate(seq, axis=-1, dtype=np.float16)[..., -1]
                av[np.ix_(g, cs, np.arange(a0, a0 + nv))] = res
            else:
                av = acc.reshape(acc.shape[0], acc.shape[1], -1, lanes)
                if a0 + nv > av.shape[2]:
                    raise SimulationError(f"{it.op}: accumulators {a0}..{a0 + nv - 1}; the core has {av.shape[2]}")
                cur = av[np.ix_(g, cs, np.arange(a0, a0 + nv))]  # (ng, nc, nv, lanes)
                init = np.zeros_like(cur) if fresh else cur
                seq = np.concatenate([init[:, :, :, None, :], terms], axis=3)
                res = np.add.accumulate(seq, axis=3, dtype=np.float16)[:, :, :, -1, :]
                av[np.ix_(g, cs, np.arange(a0, a0 + nv))] = res
            return
        if role in ("load", "add", "mul", "store"):
            n = int(a["n"])
            addr = self._addr(it, env, ng=ng, nc=nc)
            if bcast:
                self._check_uniform(addr, "address", it)
            cols = addr[:, :, None] + np.arange(n)[None, None, :]
            if cols.max() >= mem.shape[2]:
                raise SimulationError(f"{it.op}: column {cols.max()} beyond the stream's memory {mem.shape[2]}")
            gi, ci = g[:, None, None], cs[None, :, None]
            relu = a.get("relu", "0") == "1"
            if role == "store":
                if "acc" in a and "reg" not in a:
                    a0 = int(env(a["acc"]))
                    av = acc.reshape(acc.shape[0], acc.shape[1], -1, lanes)
                    val = av[np.ix_(g, cs, np.arange(a0, a0 + n))]
                else:
                    r0 = int(env(a.get("reg", "0")))
                    val = regs[np.ix_(g, cs, np.arange(r0, r0 + n))]
                if relu:
                    val = np.maximum(val, np.float16(0))
                mem[gi, ci, cols] = val
                return
            r0 = int(env(a.get("reg", "0")))
            data = mem[gi, ci, cols]
            if role == "load":
                val = data
            elif role == "add":
                val = (data + regs[np.ix_(g, cs, np.arange(r0, r0 + n))]).astype(np.float16)
            else:
                val = (data * regs[np.ix_(g, cs, np.arange(r0, r0 + n))]).astype(np.float16)
            if relu:
                val = np.maximum(val, np.float16(0))
            regs[np.ix_(g, cs, np.arange(r0, r0 + n))] = val
            return
        if role == "to_group":
            n = int(a["n"])
            a0 = int(env(a.get("acc", "0")))
            stride = int(env(a["stride"]))
            cdiv = int(a.get("cdiv", "1"))
            dst = np.broadcast_to(np.asarray(env(a["dst"])), (ng, 1)).astype(np.int64)
            av = acc.reshape(acc.shape[0], acc.shape[1], -1)
            val = av[np.ix_(g, cs, np.arange(a0, a0 + n))]  # (ng, nc, n)
            pos = dst[:, :, None] + (cs[None, :, None] // cdiv) * stride + np.arange(n)[None, None, :]
            if pos.max() >= gbuf.shape[1]:
                raise SimulationError(f"{it.op}: group-buffer entry {pos.max()} beyond {gbuf.shape[1]}")
            gi = np.broadcast_to(g[:, None, None], pos.shape)
            if a.get("sum", "0") == "1":
                if not self.hw.group.accumulator:
                    raise SimulationError(f"{it.op}: {self.hw.meta.name}'s groups have no accumulator (sum=1)")
                gbuf[gi, pos] = 0  # the accumulator adds the cores' results in core order, in FP16
                np.add.at(gbuf, (gi.reshape(-1), pos.reshape(-1)), val.reshape(-1))
            else:
                gbuf[gi, pos] = val
            return
        if role == "from_group":
            n = int(a["n"])
            r0 = int(env(a.get("reg", "0")))
            stride = int(env(a["stride"]))
            src = np.broadcast_to(np.asarray(env(a["src"])), (ng, 1)).astype(np.int64)
            pos = src[:, :, None] + cs[None, :, None] * stride + np.arange(n * lanes)[None, None, :]
            val = gbuf[g[:, None, None], np.minimum(pos, gbuf.shape[1] - 1)]
            regs[np.ix_(g, cs, np.arange(r0, r0 + n))] = val.reshape(ng, nc, n, lanes)
            return
        if role == "group_softmax":
            pieces, pstride, plen, tile = (int(env(a[k])) for k in ("pieces", "pstride", "plen", "tile"))
            valid = int(env(a["valid"]))
            scale = float(a["scale"])
            base = np.broadcast_to(np.asarray(env(a["base"])), (ng, 1)).astype(np.int64)
            j = np.arange(plen)
            p = np.arange(pieces)
            pos = base[:, :, None] + (p[:, None] * pstride + j[None, :]).reshape(1, 1, -1)
            ok = ((j[None, :] < tile) & (p[:, None] * tile + j[None, :] < valid)).reshape(-1)
            sv = gbuf[g[:, None, None], pos].astype(np.float32)[:, 0, :]
            sv = np.where(ok[None, :], sv * scale, -np.inf)
            sv = sv - sv.max(axis=-1, keepdims=True)
            e = np.where(ok[None, :], np.exp(sv), 0.0)
            pr = (e / e.sum(axis=-1, keepdims=True)).astype(np.float16)
            gbuf[g[:, None], pos[:, 0, :]] = pr
            return
        raise SimulationError(f"{it.op}: role '{role}' has no functional model")

    def _host_write(self, it: Command, env: _Env, g, cs, bcast, stream: Stream, S):
        mem = S["mem"]
        lanes = self.lanes
        src = it.args["src"]
        T = S["host"][parse_ref(src).name]
        perm = [int(x) for x in it.args["perm"].split(",")] if "perm" in it.args else None
        ng, nc = len(g), len(cs)
        data, vv, vt, box = _box_data(src, env, T, ng, nc, perm)
        pad = it.args.get("pad", "0") == "1"
        vec_box = box[:-1]
        V = int(np.prod(vec_box)) if vec_box else 1
        ncol = ceil_div(box[-1], lanes)
        data = data.reshape(ng, nc, V, box[-1])
        if box[-1] < ncol * lanes:
            data = np.concatenate([data, np.zeros((ng, nc, V, ncol * lanes - box[-1]), np.float16)], axis=-1)
        data = data.reshape(ng, nc, V, ncol, lanes)
        # a vector is written if it lies inside the core's tile and exists (or padding is written)
        write = vt[None, None, :] & (vv | pad)
        lay = it.args.get("lay", f"lin:{ncol}")
        base = self._addr(it, env, ng=ng, nc=nc)
        vidx = np.arange(V)[:, None]
        cidx = np.arange(ncol)[None, :]
        addr = base[:, :, None, None] + layout_address(lay, vidx, cidx)[None, None]
        if addr.max() >= mem.shape[2]:
            raise SimulationError(f"{it.op}: column {addr.max()} beyond the stream's memory {mem.shape[2]}")
        gi = g[:, None, None, None]
        ci = cs[None, :, None, None]
        if bcast:
            # identical data for every core of the group
            self._check_uniform(data, "data", it)
            ci_all = np.arange(stream.cores)[None, :, None, None]
            d0 = np.broadcast_to(data[:, :1], (ng, stream.cores) + data.shape[2:])
            w0 = np.broadcast_to(write[:, :1], (ng, stream.cores, V))
            a0 = np.broadcast_to(addr[:, :1], (ng, stream.cores) + addr.shape[2:])
            cur = mem[gi, ci_all, a0]
            mem[gi, ci_all, a0] = np.where(w0[..., None, None], d0, cur)
            return
        cur = mem[gi, ci, addr]
        mem[gi, ci, addr] = np.where(write[..., None, None], data, cur)

    def _host_read(self, it: Command, env: _Env, g, cs, stream: Stream, S):
        mem, gbuf, out = S["mem"], S["gbuf"], S["out"]
        lanes = self.lanes
        dst = it.args["dst"]
        ng, nc = len(g), len(cs)
        idx, valid, tile, box = _ref_indices(dst, env, out.shape, ng, nc)
        accumulate = it.args.get("acc", "0") == "1"
        flat = int(np.prod(box))
        if it.args.get("from") == "gbuf":
            base = int(env(it.args.get("base", "0")))
            stride = int(env(it.args["stride"]))
            cdiv = int(it.args.get("cdiv", "1"))
            pos = base + (cs[None, :, None] // cdiv) * stride + np.arange(flat)[None, None, :]
            if pos.max() >= gbuf.shape[1]:
                raise SimulationError(f"{it.op}: group-buffer entry {pos.max()} beyond {gbuf.shape[1]}")
            vals = gbuf[g[:, None, None], np.broadcast_to(pos, (ng, nc, flat))].astype(np.float32)
            # cores that share a region (summed by the accumulator) are read once
            valid = valid & (cs % cdiv == 0).reshape((1, nc) + (1,) * len(box))
        else:
            lay = it.args["lay"]
            base = self._addr(it, env, ng=ng, nc=nc)
            if it.args.get("slot") == "res":
                NB = box[-1]
                f = np.arange(flat)
                if len(box) == 3:
                    bl = f // (box[1] * NB)
                    ml = (f // NB) % box[1]
                else:
                    bl, ml = f // NB, np.zeros_like(f)
                nl = f % NB
                vec = bl * NB + nl
                addr = base[:, :, None] + layout_address(lay, vec, 0, ml, "res")[None, None, :]
                col = mem[g[:, None, None], cs[None, :, None], addr].astype(np.float32)  # (ng, nc, flat, lanes)
                vals = col.sum(axis=-1) if it.args.get("lanesum", "0") == "1" else col[..., 0]
            else:
                f = np.arange(flat)
                vec = f // box[-1]
                el = f % box[-1]
                addr = base[:, :, None] + layout_address(lay, vec, el // lanes)[None, None, :]
                vals = mem[g[:, None, None], cs[None, :, None], addr, (el % lanes)[None, None, :]].astype(np.float32)
        vals = vals.reshape((ng, nc) + tuple(box))
        m = valid
        if accumulate:
            np.add.at(out, tuple(i[m] for i in idx), vals[m])
        else:
            out[tuple(i[m] for i in idx)] = vals[m]


# ============================================================================ convenience
_SIMS: dict[str, Simulator] = {}


def simulator_for(hw: PIMHardware) -> Simulator:
    """A cached simulator per hardware description."""
    from tvm_cim.common import hardware as loader

    key = id(hw)
    s = _SIMS.get(key)
    if s is None or s.hw is not hw:
        json_key = loader.to_json(hw)
        s = _SIMS.get(json_key)
        if s is None:
            s = _SIMS[json_key] = Simulator(hw)
        _SIMS[key] = s
    return s


def kernel_of(stream: Stream):
    from .kernels import KernelSpec

    return KernelSpec.from_json(stream.kernel)

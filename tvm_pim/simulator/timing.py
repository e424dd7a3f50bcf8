"""The simulator's timing model: how long a command stream takes, and its energy.

Per PIM group (channel) and phase, with vectorised per-channel and per-core
arithmetic (loops are multiplied out, never expanded):

* every compute command occupies the channel's command path for its
  issue spacing: its ``latency_cycles``, at least ``tccd_ab`` / ``tccd_sb``
  for group / bank_group scope (a power constraint such as AttAcc's);
* host data transfers occupy the data bus of their core's pseudo-channel
  (``group.pseudo_channels`` buses per group) for ``max(tBL, one column at
  the pseudo-channel's share of the host link)`` per column, transfers to
  one rank are spaced by ``tCCD_S``; transfers spread over the channel
  (host layout, group-buffer reads, result moves) use every bus; result
  moves to the group buffer (``to_group``) use this data path and overlap
  the compute commands; input-register writes and moves from the group
  buffer feed the next compute commands and are charged on the command
  path;
* single-bank activations (scope ``bank``) are spaced
  ``max(tRRD, tFAW / 4)`` in each rank of a pseudo-channel;
* every core (its banks) accumulates its own busy time: ``ACT`` costs
  ``tRCD``, ``PRE`` costs ``tRP`` and stretches the open row to ``tRAS``
  and to ``tRTP`` after the row's last bank-reading column command,
  column commands cost their issue spacing (at least ``tCCD_L`` for one
  bank's successive bank-level commands), host bursts into a bank pay
  their row activations, precharges and ``tWR``;
* bank-level column commands (host transfers to one bank, per-core
  compute) also occupy their bank group's data path for ``tCCD_L`` each,
  while transfers to different bank groups of a rank are spaced by
  ``tCCD_S``;
* a channel's time is ``max(command path, busiest core, busiest bank
  group, busiest data bus, busiest rank)``, so
  bank-level commands to different cores overlap their row cycles while
  sharing the bus, and those to different bank groups overlap their
  column spacing;
* read/write turnarounds (``twtr`` / ``trtw``, on devices whose PIM
  commands are column reads and writes) delay the command path and every
  core once per switch between writes and reads in the phase's order;
* all-bank refresh (``tREFI`` / ``tRFC``, when the device sets them)
  stops the whole channel: a channel busy ``W`` cycles in a phase takes
  ``floor(W / (tREFI - c)) * c`` more, ``c = tRFC + tRP + tRCD`` (close the
  open row, refresh, re-open it), counting from a refresh at the phase start;
* a phase lasts as long as its slowest channel (all channels in parallel),
  or the sum over channels for ``serial`` phases, and at least its host
  traffic divided by the host bandwidth; host actions (launch, merges) add
  the host model's time; a phase staged in ``rounds`` adds one round's
  share of the shorter of the two (pipeline fill).

``setup`` (placing resident tensors) is reported apart from the latency.
Energy is each command's ``energy_pj`` from the hardware file, per issue.

:data:`TIMING_MODEL_VERSION` names this model: tuned schedule databases key
their records (which store simulated times) with it, so records timed by an
older model are ignored.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from ..hardware.view import PimView, ceil_div
from ..program.expr import parse_ref
from ..program.stream import Command, Loop, Stream
from .decode import DATA_ROLES, Env, LazyEnv, SimulationError, role_of

#: Version of the timing model.  Bump it whenever the simulated time or energy of a stream changes
#: (this module, or the streams the code generator emits for a draft): the records of tuned
#: schedule databases store simulated times and carry this number in their key
#: (:func:`tvm_pim.search.database.record_key`), so records of an older model are ignored, not applied.
TIMING_MODEL_VERSION = 3


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
    #: ``resources``: per phase, the busy time (ns) of each resource on the busiest channel (command path,
    #: busiest core, bank group, data bus, activation window, rank), of the host link, the host actions,
    #: and which resource bounds the phase
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        """The result without the output tensor, as plain data (report entries)."""
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


#: roles that write a column of a bank or a core's registers, and roles that read a bank column (read/write
#: turnarounds, on devices whose PIM commands are column reads and writes)
_WRITES = ("host_write", "reg_write", "store")
_READS = ("host_read", "mac", "dot", "acc_add", "load", "add", "mul")


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


class TimingModel:
    """Time and energy of command streams on one PIM device (see the module docstring).

    Parameters
    ----------
    view : PimView
    """

    def __init__(self, view: PimView):
        self.view, self.hw, self.t = view, view.hw, view.hw.dram.timing
        self.lanes = view.elems_per_column
        g = self.hw.group
        self.npch = g.pseudo_channels
        # one column on a pseudo-channel's data bus: its burst (nBL), at least its share of the stack's host link
        self.col_bus = max(float(self.t.tbl), view.column_bytes / (view.channel_bw_gbs / self.npch) / self.t.tck_ns)
        # activation windows: at most one ACT per tRRD and four per tFAW in each rank of a pseudo-channel
        self.act_step = max(float(self.t.trrd), self.t.tfaw / 4.0)
        # all-bank refresh: every tREFI one refresh closes the open row (tRP), blocks the banks for tRFC and
        # re-opens the row (tRCD); between two refreshes the banks work tREFI minus that
        t = self.t
        self.ref_cost = float(t.trfc + t.trp + t.trcd) if t.trefi else 0.0
        self.ref_gap = float(t.trefi) - self.ref_cost if t.trefi else 0.0

    def turnarounds(self, items) -> tuple[str | None, str | None, int, int]:
        """Read/write turnarounds of a command sequence, loops multiplied out without expanding them.

        A command is a column write (host or input-register write, a bank-writing PIM command) or a column
        read (host read, a bank-reading PIM command); activations, precharges and control commands are
        neither.  Only meaningful on devices that set ``twtr`` / ``trtw`` (PIM commands triggered by column
        reads and writes, HBM-PIM).

        Parameters
        ----------
        items : list
            Commands and loops of a phase.

        Returns
        -------
        tuple
            ``(first, last, writes_to_reads, reads_to_writes)``: the first and last direction (``"R"``,
            ``"W"`` or None when no command moves data) and the number of each turnaround.
        """
        first = last = None
        wtr = rtw = 0

        def step(f, lo, a, b, times):
            nonlocal first, last, wtr, rtw
            if f is None:
                return
            wtr, rtw = wtr + a * times, rtw + b * times
            if times > 1 and lo != f:  # from one iteration into the next
                wtr, rtw = wtr + (times - 1) * (lo == "W"), rtw + (times - 1) * (lo == "R")
            if last is not None and last != f:
                wtr, rtw = wtr + (last == "W"), rtw + (last == "R")
            first = first or f
            last = lo

        for it in items:
            if isinstance(it, Loop):
                step(*self.turnarounds(it.body), it.count)
                continue
            if it.op.startswith("HOST."):
                continue
            role = role_of(self.hw, it.op, it.args)[0]
            d = "W" if role in _WRITES else "R" if role in _READS else None
            step(d, d, 0, 0, 1)
        return first, last, wtr, rtw

    def refreshes(self, cycles):
        """All-bank refreshes that fall into ``cycles`` of bank work started right after a refresh: the
        refresh manager fires every ``trefi`` cycles of wall time and each one stops the work for
        ``trfc + trp + trcd``, so ``floor(cycles / (trefi - trfc - trp - trcd))`` of them (0 without refresh).

        Parameters
        ----------
        cycles : float or numpy.ndarray
            Busy cycles of a channel in one phase, without refresh.

        Returns
        -------
        numpy.ndarray
            Refresh count (same shape).
        """
        c = np.asarray(cycles, dtype=float)
        if not self.ref_gap:
            return np.zeros_like(c)
        return np.floor(c / self.ref_gap)

    def spacing(self, cmd) -> float:
        """Issue-to-issue time of a compute command: its latency, at least the device's power-constraint spacing
        for its scope (``tccd_ab`` for group scope, ``tccd_sb`` for bank_group scope)."""
        lat = float(cmd.latency_cycles)
        if cmd.scope == "group":
            return max(lat, float(self.t.tccd_ab))
        if cmd.scope == "bank_group":
            return max(lat, float(self.t.tccd_sb))
        return lat

    def _compute_step(self, it: Command, cmd) -> tuple[float, int]:
        """Issue spacing of a compute command and its energy multiple: a batched command (``rows=R``) reads
        each column once but its lanes do R rows' operations, one unit cycle (its latency) per row."""
        rows = int(it.args.get("rows", "1"))
        return max(self.spacing(cmd), rows * float(cmd.latency_cycles)), rows

    def _domains(self, C: int) -> tuple[np.ndarray, np.ndarray, int]:
        """Pseudo-channel and activation domain (rank of a pseudo-channel) of each core, and the domain count."""
        v, g = self.view, self.hw.group
        bg = np.arange(C) // v.cores_per_bank_group
        per_pch = max(1, v.bank_groups // self.npch)
        per_dom = max(1, v.bank_groups // (self.npch * g.ranks_per_pseudo_channel))
        return bg // per_pch, bg // per_dom, self.npch * g.ranks_per_pseudo_channel

    def time(self, stream: Stream) -> SimResult:
        """Latency, phase times, breakdown, energy and command counts of a stream (no values).

        Parameters
        ----------
        stream : Stream

        Returns
        -------
        SimResult
            ``output`` is None.
        """
        v, t, hw = self.view, self.t, self.hw
        Gs, C = v.groups, stream.cores
        R = v.core_row_cols
        counts: Counter = Counter()
        energy: Counter = Counter()
        phases: dict[str, float] = {}
        resources: dict[str, dict] = {}
        split = {"rearrangement": 0.0, "compute": 0.0, "host": 0.0}
        host_bytes_total = 0.0
        lanes = self.lanes

        for ph in stream.phases:
            bus = np.zeros(Gs)
            data_bus = np.zeros(Gs)  # part of bus time spent on host data transfers
            chain = np.zeros((Gs, C))
            seg = np.zeros((Gs, C))
            colw = np.zeros((Gs, C))  # bank-level column commands per core, each tCCD_L of its bank group
            dcore = np.zeros((Gs, C))  # data-bus time of transfers to one core, on its pseudo-channel's bus
            dspread = np.zeros(Gs)  # data-bus time of transfers spread over every pseudo-channel of the group
            acts = np.zeros((Gs, C))  # single-bank activations per core (tRRD / tFAW)
            host_bytes = 0.0
            host_ns = 0.0
            st = {"bus": bus, "chain": chain, "seg": seg, "data_bus": data_bus, "colw": colw, "dcore": dcore,
                  "dspread": dspread, "acts": acts}
            # commands addressing every group and core of the stream add the same time to all of them:
            # they are summed as scalars (the common case), the others per channel / core in arrays
            U = {"bus": 0.0, "chain": 0.0, "seg": 0.0, "colw": 0.0, "dspread": 0.0, "acts": 0.0}
            seg_dirty = False
            Gst = stream.groups
            tRCD, tRP, tRAS, tCCDL = float(t.trcd), float(t.trp), float(t.tras), float(t.tccd_l)
            tRTP = float(t.trtp)
            # issue spacing of the open row's last bank-reading column command: the precharge may issue
            # tRTP after that command's issue, i.e. tRTP - spacing after the chain's time (earlier when tRTP
            # is shorter than the spacing; without a tRTP the precharge follows the last spacing)
            last = {"step": 0.0}

            def rtp_wait(open_seg):
                return np.where(open_seg > 0, tRTP - last["step"], 0.0) if tRTP else 0.0

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
                    roles = role_of(hw, op, it.args)
                    cmd = hw.commands[op]
                    lat = float(cmd.latency_cycles)
                    bcast = it.cores is None
                    role = roles[0]
                    e_rows = 1
                    if role not in DATA_ROLES and uniform(it) and not (role == "pre" and seg_dirty):
                        issues = 1 if bcast else C
                        if role == "act":
                            U["chain"] += mult * max(lat, tRCD)
                            U["seg"] = 0.0
                            last["step"] = 0.0
                            U["bus"] += mult * issues
                            if not bcast and cmd.scope == "bank":
                                U["acts"] += mult
                            n_cmd = 1
                        elif role == "pre":
                            wait = max(tRAS - tRCD - U["seg"], float(rtp_wait(U["seg"]))) if tRTP else \
                                max(0.0, tRAS - tRCD - U["seg"])
                            U["chain"] += mult * (max(lat, tRP) + wait)
                            U["seg"] = 0.0
                            last["step"] = 0.0
                            U["bus"] += mult * issues
                            n_cmd = 1
                        elif role in ("mac", "dot", "acc_add", "load", "add", "mul", "store"):
                            n = int(it.args.get("n", "1"))
                            lat, e_rows = self._compute_step(it, cmd)
                            step = lat if bcast else max(lat, tCCDL)
                            U["bus"] += mult * issues * n * lat
                            U["chain"] += mult * n * step
                            U["seg"] += n * step
                            if role != "store":
                                last["step"] = step
                            if not bcast:
                                U["colw"] += mult * n * tCCDL
                            n_cmd = n * issues
                        elif role == "to_group":
                            # results leave on the data path (pseudo-channel buses, bank-group spacing),
                            # beside the compute path: they overlap the next commands' MACs
                            cols = ceil_div(int(it.args.get("n", "1")), lanes)
                            U["dspread"] += mult * cols * C * self.col_bus
                            U["colw"] += mult * cols * tCCDL
                            n_cmd = cols * C
                        elif role == "from_group":
                            cols = int(it.args.get("n", "1"))
                            U["bus"] += mult * cols * lat
                            U["chain"] += mult * cols * lat
                            n_cmd = cols
                        elif role == "group_softmax":
                            cols = ceil_div(int(it.args["pieces"]) * int(it.args["tile"]), lanes)
                            U["bus"] += mult * cols * lat
                            n_cmd = cols
                        else:
                            U["bus"] += mult * lat
                            U["chain"] += mult * lat
                            n_cmd = 1
                        counts[op] += mult * n_cmd * Gst  # one issue on every group's channel
                        energy[op] += mult * n_cmd * Gst * cmd.energy_pj * e_rows
                        continue
                    if role != "pre" and role not in DATA_ROLES:
                        seg_dirty = True
                    gsel, csel, g, cs = _selection(it, C)
                    issues = 1 if bcast else len(cs)
                    if role in ("act",):
                        lat = max(lat, float(t.trcd))
                        chain[_ci(gsel, csel)] += mult * lat
                        seg[_ci(gsel, csel)] = 0.0
                        last["step"] = 0.0
                        bus[gsel] += mult * issues  # one command slot
                        if not bcast and cmd.scope == "bank":
                            acts[_ci(gsel, csel)] += mult
                        n_cmd = 1
                    elif role == "pre":
                        lat = max(lat, float(t.trp))
                        open_seg = seg[_ci(gsel, csel)] + U["seg"]
                        stretch = np.maximum(0.0 if not tRTP else rtp_wait(open_seg), t.tras - t.trcd - open_seg)
                        U["seg"] = 0.0
                        last["step"] = 0.0
                        chain[_ci(gsel, csel)] += mult * (lat + stretch)
                        seg[_ci(gsel, csel)] = 0.0
                        bus[gsel] += mult * issues
                        n_cmd = 1
                    elif role in DATA_ROLES:
                        # (columns summed over every group and core already)
                        n_cmd = self._time_data(it, role, lat, mult, g, cs, bcast, stream, st, R, gsel, csel)
                        host_bytes += mult * n_cmd * v.column_bytes
                        counts[op] += mult * n_cmd
                        energy[op] += mult * n_cmd * cmd.energy_pj
                        continue
                    elif role in ("mac", "dot", "acc_add", "load", "add", "mul", "store"):
                        n = int(it.args.get("n", "1"))
                        lat, e_rows = self._compute_step(it, cmd)
                        step = lat if bcast else max(lat, float(t.tccd_l))
                        bus[gsel] += mult * issues * n * lat
                        chain[_ci(gsel, csel)] += mult * n * step
                        seg[_ci(gsel, csel)] += n * step
                        if role != "store":
                            last["step"] = step
                        if not bcast:
                            colw[_ci(gsel, csel)] += mult * n * tCCDL
                        n_cmd = n * issues
                    elif role == "to_group":
                        cols = ceil_div(int(it.args.get("n", "1")), lanes)
                        nc = C if bcast else len(cs)
                        dspread[gsel] += mult * cols * nc * self.col_bus
                        colw[_ci(gsel, csel)] += mult * cols * tCCDL
                        n_cmd = cols * nc
                    elif role == "from_group":
                        cols = int(it.args.get("n", "1"))
                        bus[gsel] += mult * cols * lat
                        chain[_ci(gsel, csel)] += mult * cols * lat
                        n_cmd = cols
                    elif role == "group_softmax":
                        cols = ceil_div(int(it.args["pieces"]) * int(it.args["tile"]), lanes)
                        bus[gsel] += mult * cols * lat
                        n_cmd = cols
                    else:  # mode, control, refresh, other
                        bus[gsel] += mult * lat
                        chain[gsel, :] += mult * lat
                        n_cmd = 1
                    counts[op] += mult * n_cmd * len(g)
                    energy[op] += mult * n_cmd * len(g) * cmd.energy_pj * e_rows

            walk(ph.body, 1, {})
            if t.twtr or t.trtw:
                # the rank's banks wait for the turnaround: the command path and every core
                _, _, n_wtr, n_rtw = self.turnarounds(ph.body)
                turn = float(n_wtr * t.twtr + n_rtw * t.trtw)
                U["bus"] += turn
                U["chain"] += turn
            bus[:Gst] += U["bus"]
            chain[:Gst, :] += U["chain"]
            colw[:Gst, :] += U["colw"]
            dspread[:Gst] += U["dspread"]
            acts[:Gst, :] += U["acts"]
            # bank-group parallelism: bank-level column commands to the banks of one bank group are
            # spaced by tCCD_L, to different bank groups by tCCD_S (the bus term)
            bg_of = np.arange(C) // v.cores_per_bank_group
            bg_busy = np.zeros((Gs, int(bg_of[-1]) + 1 if C else 1))
            np.add.at(bg_busy.T, bg_of, colw.T)
            # data path: each pseudo-channel's data bus; single-bank activations: each rank's tRRD / tFAW
            pch_of, dom_of, ndom = self._domains(C)
            pch_busy = np.zeros((Gs, self.npch))
            np.add.at(pch_busy.T, pch_of, dcore.T)
            pch_busy += (dspread / self.npch)[:, None]
            act_busy = np.zeros((Gs, ndom))
            np.add.at(act_busy.T, dom_of, acts.T)
            # transfers to the banks of one rank are spaced by tCCD_S (bank groups of that rank)
            rank_busy = np.zeros((Gs, ndom))
            np.add.at(rank_busy.T, dom_of, dcore.T)
            terms = {"command_path": bus, "busiest_core": chain.max(axis=1), "busiest_bank_group": bg_busy.max(axis=1),
                     "busiest_data_bus": pch_busy.max(axis=1), "activation_window": act_busy.max(axis=1) * self.act_step,
                     "busiest_rank": rank_busy.max(axis=1) * (float(t.tccd_s) / self.col_bus)}
            work = np.maximum.reduce(list(terms.values()))
            tck = t.tck_ns
            # all-bank refresh stops every resource of the channel: each channel's refreshes lengthen its time
            # (a serial phase's channels work one after another, each refreshed while it works)
            n_ref = self.refreshes(work)
            per_ch = work + n_ref * self.ref_cost
            if ph.serial:
                dev_ns = float(per_ch.sum()) * tck
            else:
                dev_ns = float(per_ch.max()) * tck
            bw_ns = host_bytes / v.host_bw_gbs  # bytes / (GB/s) = ns
            phase_ns = max(dev_ns, bw_ns) + host_ns
            fill = 0.0
            if ph.rounds > 1:
                # staging in double-buffered rounds: the first round's host read overlaps no PIM write
                fill = min(dev_ns, bw_ns) / ph.rounds
                phase_ns += fill
            phases[ph.name] = phase_ns
            # what bounds the phase: each resource's busy time on the busiest channel, the host link, host actions
            b = int(np.argmax(per_ch)) if per_ch.size else 0
            res = {k: float(v[b]) * tck for k, v in terms.items()} if per_ch.size else {}
            res["host_link"] = bw_ns
            res_refresh = float(n_ref[b] * self.ref_cost) * tck if per_ch.size else 0.0
            # (refresh stops the channel's resources, not the host link)
            bound = max(res, key=lambda k: res[k] + (res_refresh if k != "host_link" else 0.0)) if res else "none"
            resources[ph.name] = {"ns": phase_ns, "bound": bound, "terms_ns": res, "host_ns": host_ns,
                                  "refresh_ns": res_refresh, "refreshes": int(n_ref.sum()) if n_ref.size else 0,
                                  "host_data_share_of_command_path": float(data_bus[b] / bus[b]) if per_ch.size and bus[b] > 0 else 0.0,
                                  "channels": int(Gst), "serial": bool(ph.serial), "rounds": int(ph.rounds)}
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
                split["rearrangement"] += max(dev_ns, bw_ns) + fill
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
            extra={"resources": resources},
        )

    def _time_host(self, it: Command, mult, st, host_bytes, host_ns, counts, energy, Gs):
        v, hw = self.view, self.hw
        if it.op == "HOST.LAUNCH":
            host_ns += mult * hw.system.host.launch_overhead_us * 1e3
        elif it.op in ("HOST.LOAD", "HOST.STORE"):
            nbytes = float(it.args["bytes"])
            cols = nbytes / v.column_bytes / Gs  # spread over every channel (host layout interleaves)
            st["dspread"][:] += mult * cols * self.col_bus
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
        col = self.col_bus
        env = LazyEnv(stream, g, cs if not bcast else np.arange(stream.cores)[:1])
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
            # the group buffer sits beside the data path: reads at the burst length, over every pseudo-channel
            st["dspread"][gsel] += mult * ncols * col
            return int(ncols.sum())
        else:
            cols = self._box_columns(it, env, stream, len(g), 1 if bcast else len(cs))
        if bcast:
            cols = cols[:, :1]
        per_core = cols.astype(float)
        ncols_ch = per_core.sum(axis=1)
        if role == "reg_write":
            # inputs of the next compute commands: the compute path waits for them (the pseudo-channels'
            # buses carry writes to different cores in parallel)
            step_bus = max(lat, col) if bcast else col / self.npch
            bus[gsel] += mult * ncols_ch * step_bus
            data_bus[gsel] += mult * ncols_ch * step_bus
        elif bcast:
            st["dspread"][gsel] += mult * ncols_ch * max(lat, col)
        else:
            st["dcore"][_ci(gsel, csel)] += mult * per_core * col
        rows = np.ceil(per_core / R) if role != "reg_write" else 0.0
        if role != "reg_write" and not bcast:
            st["acts"][_ci(gsel, csel)] += mult * rows
        bank = per_core * max(lat, col, float(t.tccd_l) if not bcast else 0.0) + rows * (
            t.trcd + t.trp + (t.twr if role == "host_write" else 0)
        )
        if bcast:
            chain[gsel, :] += mult * np.broadcast_to(bank, (len(g), 1))
        else:
            chain[_ci(gsel, csel)] += mult * bank
            colw[_ci(gsel, csel)] += mult * per_core * float(t.tccd_l)
        return int(per_core.sum())

    def _box_columns(self, it: Command, env: Env, stream: Stream, ng: int, nc: int) -> np.ndarray:
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

"""Code generation: a tiling draft becomes a PIM command stream.

The generator lowers a draft (:mod:`tvm_pim.compiler.space`) of a kernel
(:mod:`tvm_pim.compiler.kernels`) to the device's command set, read from the
hardware file by role (:class:`tvm_pim.hardware.view.PimView`), and applies DCC's
PIM-specific code optimiser (paper 002 sec. IV-C):

* **Data rearrangement through on-chip staging** (``staging=True``): the
  host reads each input sequentially from host layout (all channels) into
  on-chip memory (GPU shared memory) and writes the PIM tiles of all groups in
  parallel, so both the reads and the PIM writes use every channel.  The
  on-chip memory holds ``system.onchip_staging_kb``: the input passes in
  double-buffered rounds of half of it (at least two), and the first round's
  read cannot overlap any write.  Without
  it the host streams the tensor in host order and the PIM writes reach one
  channel at a time (the input phase is ``serial``; reading results back is
  parallel either way, as the paper's text describes host reads).
* **Hierarchical commands** (``hierarchical=True``): every core's tile is
  padded to the group's uniform tile so that compute commands are one
  group-level (broadcast) issue per group with identical addresses; inputs
  that every core of a group shares are written once per group.  Where the
  data differ between cores (e.g. different slices of ``x``), or with
  ``hierarchical=False``, bank-level commands go to each core.

Layouts are data-centric: each core's tile is stored in the order its compute
code walks it (blocks of outputs x chunks of the reduction that fit the input
registers), so one row activation serves as many columns as possible.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np

from ..hardware.view import ELEM_BYTES, PimView, UnsupportedOnDevice, ceil_div, next_pow2
from ..program.expr import format_ref
from ..program.stream import Command, Loop, Phase, Stream, Tensor
from ..program.text import print_stream
from .kernels import KernelSpec
from .space import Draft, InfeasibleDraft, check_draft


@dataclass(frozen=True)
class CodegenOptions:
    """Switches of the PIM-specific code optimiser (both on = DCC)."""

    staging: bool = True
    hierarchical: bool = True


DCC = CodegenOptions()


# ============================================================================ tiling
class Tiling:
    """Per-core index ranges of every dimension set for a draft.

    Group ids and core ids enumerate the mixed-radix product of the
    dimension sets' allocations (first dimension most significant).
    ``expand``: ceil-sized blocks, each core padded to the uniform size;
    ``exact``: balanced blocks holding only the needed indices.
    """

    def __init__(self, spec: KernelSpec, draft: Draft):
        self.spec = spec
        self.dims = spec.dim_names
        parts = {p.dim: p for p in draft.parts}
        self.g = {d: parts[d].groups if d in parts else 1 for d in self.dims}
        self.c = {d: parts[d].cores if d in parts else 1 for d in self.dims}
        self.G = int(np.prod([self.g[d] for d in self.dims]))
        self.C = int(np.prod([self.c[d] for d in self.dims]))
        gid, cid = np.arange(self.G), np.arange(self.C)
        self.gcoord, self.ccoord = {}, {}
        gs = cs = 1
        for d in reversed(self.dims):
            self.gcoord[d] = (gid // gs) % self.g[d]
            self.ccoord[d] = (cid // cs) % self.c[d]
            gs *= self.g[d]
            cs *= self.c[d]
        E = spec.dims
        self.org, self.size, self.T = {}, {}, {}
        for d in self.dims:
            P = self.g[d] * self.c[d]
            j = self.gcoord[d][:, None] * self.c[d] + self.ccoord[d][None, :]
            T = ceil_div(E[d], P)
            if draft.index_range == "expand":
                org = j * T
                size = np.clip(E[d] - org, 0, T)
            else:
                org = j * E[d] // P
                size = (j + 1) * E[d] // P - org
            self.org[d], self.size[d], self.T[d] = org.astype(np.int64), size.astype(np.int64), T
        self.expand = draft.index_range == "expand"

    def tables(self) -> dict[str, tuple[str, np.ndarray]]:
        """The per-(group, core) origin ``o_<d>`` and size ``s_<d>`` tables of every dimension."""
        t = {}
        for d in self.dims:
            t[f"o_{d}"] = ("gc", self.org[d].ravel())
            t[f"s_{d}"] = ("gc", self.size[d].ravel())
        return t

    def shared(self, *dims: str) -> bool:
        """Whether every core of a group has the same range of these dimensions."""
        return all(self.c.get(d, 1) == 1 for d in dims)

    def splits(self, d: str) -> int:
        """Into how many ranges (groups x cores) dimension ``d`` is cut."""
        return self.g[d] * self.c[d]


# ============================================================================ stream builder
class _Builder:
    def __init__(self, spec: KernelSpec, draft: Draft, view: PimView, til: Tiling, opts: CodegenOptions):
        self.spec, self.view, self.til, self.opts = spec, view, til, opts
        self.stream = Stream(device=view.name, kernel=spec.to_json(), draft=draft.to_json())
        for t in spec.tensors:
            self.stream.tensors.append(Tensor(t, "float16", spec.shape(t), spec.role(t)))
        self.stream.groups, self.stream.cores = til.G, til.C
        self.stream.tables = til.tables()
        self.allg = tuple(range(til.G))
        self.allc = tuple(range(til.C))
        self._stack: list[list] = []

    def phase(self, name: str, serial: bool = False, rounds: int = 1):
        ph = Phase(name, serial, rounds=rounds)
        self.stream.phases.append(ph)
        self._stack = [ph.body]

    def rearrange_phase(self, staged: list[str]):
        """Open ``rearrange_in``.  Without staging the groups are written one after the other.  With it
        the tensors rearranged through the host's on-chip memory (``staged``) pass in rounds, double-
        buffered through two halves of ``system.onchip_staging_kb`` (at least two rounds, so that reading
        the next round overlaps writing this one); every round gathers its share of every group's tiles,
        so all groups are written in parallel.  No staging memory: serial."""
        nbytes = sum(int(np.prod(self.spec.shape(t))) * ELEM_BYTES for t in staged)
        cap = self.view.hw.system.onchip_staging_kb * 1024
        if not self.opts.staging or (nbytes and cap <= 0):
            return self.phase("rearrange_in", serial=True)
        rounds = max(2, ceil_div(2 * nbytes, int(cap))) if nbytes else 1
        return self.phase("rearrange_in", rounds=rounds)

    @contextlib.contextmanager
    def loop(self, var: str, count: int):
        if count <= 0:
            raise ValueError("empty loop")
        lp = Loop(var, int(count))
        self._stack[-1].append(lp)
        self._stack.append(lp.body)
        try:
            yield var
        finally:
            self._stack.pop()

    def emit(self, op: str, cores=None, **args):
        """cores: None = group-level broadcast; 'each' = one bank-level issue per core."""
        if op.startswith("HOST."):
            self._stack[-1].append(Command(op, (), None, {k: str(v) for k, v in args.items()}))
            return
        cs = None if cores is None else (self.allc if cores == "each" else tuple(cores))
        self._stack[-1].append(Command(op, self.allg, cs, {k: str(v) for k, v in args.items()}))

    # ------------------------------------------------------------------ command choice
    def group_cmd(self, role: str) -> str | None:
        if not self.view.hw.group.broadcast or not self.opts.hierarchical:
            return None
        return self.view.command(role, "group")

    def _first(self, role: str, tries) -> tuple[str, str | None]:
        """The first ``(command, cores)`` of ``tries`` whose command the device has."""
        for name, cores in tries:
            if name:
                return name, cores
        raise UnsupportedOnDevice(f"{self.view.name}: no '{role}' command")

    def compute_cmd(self, role: str):
        """(name, cores) for a compute command: broadcast if possible, else per bank."""
        v = self.view
        return self._first(role, [
            (self.group_cmd(role), None),
            (v.command(role, "bank"), "each"),
            (v.command(role, "group"), None),  # the device only has broadcast compute: cores run in lock-step
        ])

    def data_cmd(self, role: str, shared: bool):
        """(name, cores) for a host data command (host_write / reg_write / host_read)."""
        v = self.view
        return self._first(role, [
            (self.group_cmd(role) if shared else None, None),
            (v.command(role, "bank"), "each"),
            (v.command(role), "each"),  # a group-level data command addressed to one core at a time
        ])

    def act_pre(self, cores):
        if cores is None:
            return self.view.require("act", "group"), self.view.require("pre", "group")
        return (self.view.command("act", "bank") or self.view.require("act")), (
            self.view.command("pre", "bank") or self.view.require("pre")
        )

    def mode_changes(self):
        for name, cmd in self.view.hw.commands.items():
            if "mode" in cmd.roles:
                self.emit(name, None)

    def finish(self) -> Stream:
        return self.stream


def _ref(name: str, comps) -> str:
    return format_ref(name, comps)


def _rng(d: str, tile: int, slots: int | None = None, shift: str = "") -> tuple:
    """``o_d[+shift]:s_d[-shift]:tile[:slots]``."""
    org = f"o_{d}" + (f"+{shift}" if shift else "")
    val = f"s_{d}" + (f"-{shift}" if shift else "")
    return (org, val, tile) if slots is None or slots == tile else (org, val, tile, slots)


# ============================================================================ contraction (gemv, red)
@dataclass
class _ContractPlan:
    Tb: int
    Tm: int
    Tn: int
    Tk: int
    P: int  # columns per vector (reduction dim)
    kc: int  # columns per chunk (fit the input registers)
    nch: int
    ob: int  # vectors (outputs) per block
    rc: int  # result columns per vector in a unit (bank result path)
    nb: int  # blocks per b
    nbp: int  # blocks per b, padded to whole rows
    ucols: int
    upr: int
    rpu: int
    rows_b: int  # rows per b
    op_role: str
    needs_x: bool
    result: str  # 'bank' or 'group'

    @property
    def lay(self) -> str:
        return f"blk:{self.ob}:{self.kc}:{self.nch}:{self.rc}:{self.R}"

    R: int = 0
    mb: int = 1  # input rows (m) held in the registers at once: each column read serves all of them


def _batch_rows(Tm: int, limit: int, want: int) -> int:
    """Input rows a unit holds at once (batched GEMV): the smallest divisor of ``Tm`` that is at least
    ``want`` (else the largest), never above ``limit``."""
    divs = [d for d in range(1, max(1, min(Tm, limit)) + 1) if Tm % d == 0]
    return next((d for d in divs if d >= want), divs[-1])


def _chunking(P: int, regs: int, R: int) -> tuple[int, int]:
    """Columns per chunk of a ``P``-column vector (what the input registers and a row hold), and chunks."""
    kc = min(regs, next_pow2(P), R)
    return kc, ceil_div(P, kc)


def _pack_units(ob: int, kc: int, nch: int, rc: int, nb: int, R: int) -> tuple[int, int, int, int, int]:
    """How the units of a ``blk`` layout (:func:`tvm_pim.program.layout.layout_address`) fill rows.

    A unit is one block of ``ob`` vectors x one chunk of ``kc`` columns, plus
    ``ob * rc`` result columns; ``nb`` blocks of ``nch`` chunks each.

    Returns
    -------
    ucols, upr, rpu, nbp, rows : int
        Columns per unit; units per row (1 if a unit spans rows); rows per
        unit (1 if units share rows); blocks padded so that every row is
        whole; rows per index of the batch dimension.
    """
    ucols = ob * kc + ob * rc
    if ucols <= R:
        upr, rpu = R // ucols, 1
    else:
        upr, rpu = 1, ceil_div(ucols, R)
    nbp = nb
    while (nbp * nch) % upr:
        nbp += 1
    rows = (nbp * nch) // upr if ucols <= R else nbp * nch * rpu
    return ucols, upr, rpu, nbp, rows


@dataclass(frozen=True)
class _GemvTiles:
    """One core's tiles of a GEMV on the dot units: ``nvec`` vectors of ``P`` columns in ``blk`` units."""

    P: int  # columns per vector
    kc: int  # columns per chunk
    nch: int  # chunks per vector
    ob: int  # vectors per block
    nb: int  # blocks
    u: int  # columns per unit
    upr: int  # units per row
    rpu: int  # rows per unit
    nbp: int  # blocks padded to whole rows
    rows: int  # rows per index of the batch dimension

    @staticmethod
    def plan(P: int, nvec: int, regs: int, cap: int, R: int) -> "_GemvTiles":
        kc, nch = _chunking(P, regs, R)
        ob = min(cap, nvec)
        nb = ceil_div(nvec, ob)
        return _GemvTiles(P, kc, nch, ob, nb, *_pack_units(ob, kc, nch, 0, nb, R))

    @property
    def slots(self) -> int:
        """Vector slots per batch index (blocks padded)."""
        return self.nbp * self.ob

    def layout(self, R: int) -> str:
        return f"blk:{self.ob}:{self.kc}:{self.nch}:0:{R}"


def _contract_plan(spec: KernelSpec, view: PimView, til: Tiling) -> _ContractPlan:
    red = spec.kind == "red"
    Tb, Tn, Tk = til.T["b"], til.T["n"], til.T["k"]
    Tm = 1 if red else til.T["m"]
    lanes = view.elems_per_column
    R = view.core_row_cols
    P = ceil_div(Tk, lanes)
    mode = view.contraction
    if mode is None:
        raise UnsupportedOnDevice(f"{view.name} cannot multiply-accumulate")
    if red and mode == "mac" and view.command("acc_add"):
        op_role, needs_x = "acc_add", False
    elif red:
        op_role, needs_x = mode, False  # multiply by a register of ones
    else:
        op_role, needs_x = mode, True
    cap = view.acc_regs * (lanes if op_role == "dot" else 1)
    # batched GEMV: the unit holds mb input rows (registers and accumulators split between them), so one
    # read of a weight column serves every row held.  Its lanes still do one row per unit cycle, so holding
    # rows pays only where column reads are spaced wider than the unit cycle (a power constraint): as
    # many rows as fill that spacing; otherwise one row (fewer, longer register chunks)
    cmd = view.cmd(view.command(op_role, "group") or view.require(op_role))
    gap = max(cmd.latency_cycles, view.hw.dram.timing.tccd_ab if cmd.scope == "group" else 0)
    mb = _batch_rows(Tm, min(view.input_regs, cap), ceil_div(gap, cmd.latency_cycles)) if needs_x and gap > cmd.latency_cycles else 1
    kc, nch = _chunking(P, view.input_regs // mb, R)
    cap //= mb
    result = "bank" if (op_role in ("mac", "acc_add") and view.command("store")) else "group"
    if result == "group" and not view.command("to_group"):
        raise UnsupportedOnDevice(f"{view.name}: no way to move results out of the cores")
    if result == "bank":
        rc = Tm
        ob = min(cap, R // (kc + Tm))
        if ob < 1:
            raise InfeasibleDraft(f"{Tm} input rows per core leave no room in a {R}-column row for results")
    else:
        rc, ob = 0, cap
    ob = min(ob, max(1, Tn))
    nb = ceil_div(Tn, ob)
    ucols, upr, rpu, nbp, rows_b = _pack_units(ob, kc, nch, rc, nb, R)
    pl = _ContractPlan(Tb, Tm, Tn, Tk, P, kc, nch, ob, rc, nb, nbp, ucols, upr, rpu, rows_b, op_role, needs_x, result)
    pl.R, pl.mb = R, mb
    cap_cols = view.hw.dram.rows_per_bank * R
    if Tb * rows_b * R > cap_cols:
        raise InfeasibleDraft(f"per-core tile needs {Tb * rows_b} rows; a bank has {view.hw.dram.rows_per_bank}")
    return pl


def contract_plan(spec: KernelSpec, draft: Draft, view: PimView) -> _ContractPlan:
    """How :func:`gen_contract` lays out one core's tile of a ``gemv`` / ``red`` draft (no stream built).

    Parameters
    ----------
    spec : KernelSpec
        A ``gemv`` or ``red`` kernel.
    draft : Draft
    view : PimView

    Returns
    -------
    _ContractPlan
        Per-core tile sizes, register chunking (``kc`` columns, ``nch`` chunks), vectors per block
        (``ob``), blocks (``nb``), rows per batch index (``rows_b``), input rows held at once (``mb``)
        and the result path (``bank`` or ``group``).

    Raises
    ------
    InfeasibleDraft
        The tile does not fit a bank.
    """
    return _contract_plan(spec, view, Tiling(spec, draft))


def _unit_addr(pl: _ContractPlan, unit_expr: str) -> str:
    if pl.ucols <= pl.R:
        return f"(({unit_expr})//{pl.upr})*{pl.R}+(({unit_expr})%{pl.upr})*{pl.ucols}"
    return f"({unit_expr})*{pl.rpu * pl.R}"


def _tile_write(B: _Builder, tensor: str, dims_vec: list[tuple[str, int, int]], lane: tuple[str, int], lay: str, phase_pad: bool):
    """Host writes one tensor tile into every core (vector dims, then the lane dim)."""
    comps = []
    for d, tile, slots in dims_vec:
        comps.append(_rng(d, tile, slots))
    d, tile = lane
    comps.append(_rng(d, tile, ceil_div(tile, B.view.elems_per_column) * B.view.elems_per_column))
    shared = B.til.shared(*[x for x, _, _ in dims_vec], d)
    name, cores = B.data_cmd("host_write", shared and B.til.C > 1)
    B.emit(name, cores, addr=0, src=_ref(tensor, comps), lay=lay, pad=int(phase_pad))


def gen_contract(spec: KernelSpec, draft: Draft, view: PimView, opts: CodegenOptions = DCC) -> Stream:
    """Command stream of ``gemv`` / ``red`` for one draft."""
    til = Tiling(spec, draft)
    pl = _contract_plan(spec, view, til)
    B = _Builder(spec, draft, view, til, opts)
    red = spec.kind == "red"
    lanes = view.elems_per_column
    R = pl.R
    B.stream.memory = til.T["b"] * pl.rows_b * R
    NB = pl.nbp * pl.ob  # vector slots per b
    a_vec = [("b", pl.Tb, pl.Tb), ("n", pl.Tn, NB)]
    a_role = spec.role("A")
    # group buffer for results (dot path): per output region Tb*Tm*NB scalars; cores that split the
    # reduction of the same outputs add into one region when the group has an accumulator
    S = pl.Tb * pl.Tm * NB
    cdiv = til.c["k"] if (pl.result == "group" and view.hw.group.accumulator) else 1
    if pl.result == "group":
        B.stream.gbuf = (til.C // cdiv) * S

    # ---------------------------------------------------------------- setup / rearrange_in
    B.phase("setup")
    if a_role == "resident":
        _tile_write(B, "A", a_vec, ("k", pl.Tk), pl.lay, True)
    B.rearrange_phase(["A"] if a_role == "input" else [])
    B.emit("HOST.LAUNCH")
    if a_role == "input":
        B.emit("HOST.LOAD", tensor="A", bytes=int(np.prod(spec.shape("A"))) * ELEM_BYTES)
        _tile_write(B, "A", a_vec, ("k", pl.Tk), pl.lay, til.expand)
    if pl.needs_x:
        B.emit("HOST.LOAD", tensor="x", bytes=int(np.prod(spec.shape("x"))) * ELEM_BYTES)

    # ---------------------------------------------------------------- compute
    B.phase("compute")
    op, op_cores = B.compute_cmd(pl.op_role)
    act, pre = B.act_pre(op_cores)
    # the ones vector of a reduction run as dot products is the same in every core: broadcast it
    x_shared = til.shared("b", "m", "k") or not pl.needs_x
    xw, xw_cores = B.data_cmd("reg_write", x_shared and til.C > 1) if (pl.needs_x or pl.op_role == "dot") else (None, None)
    if not pl.needs_x and pl.op_role == "dot":
        B.emit(xw, None if xw_cores is None else "each", reg=0, src=f"ones:{pl.kc * lanes}")
    if pl.result == "bank":
        st, st_cores = B.compute_cmd("store")
    else:
        st, st_cores = B.compute_cmd("to_group")

    # the input rows held at once: ``mi`` alone, or rows mg*mb .. mg*mb+mb-1 (batched GEMV)
    mis = ["mi"] if pl.mb == 1 else [f"(mg*{pl.mb}+{r})" for r in range(pl.mb)]

    def load_x(h_expr: str, ncols: int):
        if not pl.needs_x:
            return
        shift = f"{pl.kc * lanes}*({h_expr})" if h_expr != "0" else ""
        for r, mi in enumerate(mis):
            comps = [("o_b+bi",), (f"o_m+{mi}",), _rng("k", ncols * lanes, shift=shift)]
            B.emit(xw, xw_cores, reg=r * pl.kc, src=_ref("x", comps))

    def flush(nv: int, blk_expr: str):
        for r, mi in enumerate(mis):
            if pl.result == "bank":
                # results of the block go into the result columns of its last unit (row still open)
                unit = f"({blk_expr})*{pl.nch}+{pl.nch - 1}"
                addr = f"bi*{pl.rows_b * R}+{_unit_addr(pl, unit)}+{pl.ob * pl.kc}+{mi}*{pl.ob}"
                B.emit(st, st_cores, addr=addr, n=nv, acc=r * pl.ob)
            else:
                dst = f"(bi*{pl.Tm}+{mi})*{NB}+({blk_expr})*{pl.ob}"
                extra = {"cdiv": cdiv, "sum": 1} if cdiv > 1 else {}
                B.emit(st, st_cores, acc=r * pl.ob, n=nv, dst=dst, stride=S, **extra)

    def mac_run(addr: str, nv: int, per: int, fresh: int, acc0: int = 0):
        args = dict(addr=addr, n=nv * per, acc=acc0, per=per, pitch=pl.kc, vecs=nv, fresh=fresh)
        if pl.op_role != "acc_add":
            args["reg"] = 0
        if pl.mb > 1:
            args.update(rows=pl.mb, rreg=pl.kc, racc=pl.ob)
        B.emit(op, op_cores, **args)

    full_blocks = pl.Tn // pl.ob
    tail_nv = pl.Tn - full_blocks * pl.ob
    last_per = pl.P - (pl.nch - 1) * pl.kc

    def blocks_single_chunk():
        # nch == 1: units are whole blocks; upr blocks per row
        upr = pl.upr
        full_rows = full_blocks // upr
        if full_rows:
            with B.loop("r", full_rows):
                B.emit(act, op_cores, row=f"bi*{pl.rows_b}+r")
                for j in range(upr):
                    mac_run(f"bi*{pl.rows_b * R}+r*{R}+{j * pl.ucols}", pl.ob, pl.P, 1)
                    flush(pl.ob, f"r*{upr}+{j}")
                B.emit(pre, op_cores)
        rem = full_blocks - full_rows * upr
        if rem or tail_nv:
            B.emit(act, op_cores, row=f"bi*{pl.rows_b}+{full_rows}")
            for j in range(rem):
                mac_run(f"bi*{pl.rows_b * R}+{full_rows * R + j * pl.ucols}", pl.ob, pl.P, 1)
                flush(pl.ob, f"{full_rows * upr + j}")
            if tail_nv:
                mac_run(f"bi*{pl.rows_b * R}+{full_rows * R + rem * pl.ucols}", tail_nv, pl.P, 1)
                flush(tail_nv, f"{full_blocks}")
            B.emit(pre, op_cores)

    def block_multi_chunk(blk_expr: str, nv: int):
        vpr = max(1, R // pl.kc)  # vectors of a unit per row (unit spans rows)
        for h in range(pl.nch):
            per = pl.kc if h < pl.nch - 1 else last_per
            if pl.nch > 1:
                load_x(str(h), per)
            unit = f"({blk_expr})*{pl.nch}+{h}"
            base = f"bi*{pl.rows_b * R}+{_unit_addr(pl, unit)}"
            if pl.ucols <= R:
                B.emit(act, op_cores, row=f"({base})//{R}")
                mac_run(base, nv, per, int(h == 0))
                if h == pl.nch - 1:
                    flush(nv, blk_expr)
                B.emit(pre, op_cores)
            else:
                for r in range(ceil_div(nv, vpr)):
                    v0 = r * vpr
                    B.emit(act, op_cores, row=f"({base})//{R}+{r}")
                    mac_run(f"{base}+{r * R}", min(vpr, nv - v0), per, int(h == 0), v0)
                    B.emit(pre, op_cores)
                if h == pl.nch - 1:
                    flush(nv, blk_expr)

    with B.loop("bi", pl.Tb):
        with B.loop("mi" if pl.mb == 1 else "mg", pl.Tm // pl.mb):
            if pl.nch == 1:
                load_x("0", pl.P)
            if pl.nch == 1 and pl.ucols <= R:
                blocks_single_chunk()
            else:
                if full_blocks:
                    with B.loop("q", full_blocks):
                        block_multi_chunk("q", pl.ob)
                if tail_nv:
                    block_multi_chunk(str(full_blocks), tail_nv)
    B.mode_changes()

    # ---------------------------------------------------------------- rearrange_out
    B.phase("rearrange_out")  # host reads of results are spread over channels either way
    y_comps = [_rng("b", pl.Tb)] + ([] if red else [_rng("m", pl.Tm)]) + [_rng("n", pl.Tn, NB)]
    if pl.result == "bank":
        rd, rd_cores = B.data_cmd("host_read", False)
        B.emit(rd, rd_cores, **{"from": "bank"}, lay=pl.lay, slot="res", base=0, rows=pl.rows_b * R,
               dst=_ref("y", y_comps), lanesum=int(pl.op_role != "dot"), acc=1)
    else:
        rd = view.require("host_read")
        B.emit(rd, None, **{"from": "gbuf"}, base=0, stride=S, cdiv=cdiv, dst=_ref("y", y_comps), acc=1)
    parts = til.splits("k") // cdiv * (lanes if pl.op_role != "dot" else 1)
    out_elems = int(np.prod(spec.shape("y")))
    if parts > 1:
        B.emit("HOST.REDUCE", bytes=out_elems * parts * ELEM_BYTES, flops=out_elems * (parts - 1))
    B.emit("HOST.STORE", tensor="y", bytes=out_elems * ELEM_BYTES)
    return B.finish()


# ============================================================================ element-wise (va, relu)
def gen_eltwise(spec: KernelSpec, draft: Draft, view: PimView, opts: CodegenOptions = DCC) -> Stream:
    """Command stream of ``va`` / ``relu`` for one draft."""
    if not view.supports(spec.kind):
        raise UnsupportedOnDevice(f"{view.name} has no near-bank units for {spec.kind.upper()}")
    til = Tiling(spec, draft)
    B = _Builder(spec, draft, view, til, opts)
    lanes = view.elems_per_column
    R = view.core_row_cols
    Tb, Ti = til.T["b"], til.T["i"]
    P = ceil_div(Ti, lanes)
    ins = ["A", "B"] if spec.kind == "va" else ["A"]
    slots = len(ins) + 1
    kc = min(view.input_regs, next_pow2(P), max(1, R // slots))
    total_cols = Tb * P
    chunks = ceil_div(total_cols, kc)
    upr = max(1, R // (slots * kc))
    rows = ceil_div(chunks, upr)
    B.stream.memory = rows * R
    if rows > view.hw.dram.rows_per_bank:
        raise InfeasibleDraft(f"per-core tile needs {rows} rows; a bank has {view.hw.dram.rows_per_bank}")
    lay = lambda s: f"ilv:{slots}:{s}:{kc}:{R}:{P}"  # noqa: E731

    B.phase("setup")
    for s, t in enumerate(ins):
        if spec.role(t) == "resident":
            _tile_write(B, t, [("b", Tb, Tb)], ("i", Ti), lay(s), True)
    B.rearrange_phase([t for t in ins if spec.role(t) == "input"])
    B.emit("HOST.LAUNCH")
    for s, t in enumerate(ins):
        if spec.role(t) == "input":
            B.emit("HOST.LOAD", tensor=t, bytes=int(np.prod(spec.shape(t))) * ELEM_BYTES)
            _tile_write(B, t, [("b", Tb, Tb)], ("i", Ti), lay(s), til.expand)

    B.phase("compute")
    ld, ld_cores = B.compute_cmd("load")
    add = B.compute_cmd("add")[0] if spec.kind == "va" else None
    st, _ = B.compute_cmd("store")
    act, pre = B.act_pre(ld_cores)
    relu_on_load = spec.kind == "relu" and view.cmd(ld).relu
    relu_on_store = spec.kind == "relu" and not relu_on_load
    if spec.kind == "relu" and not (view.cmd(ld).relu or view.cmd(st).relu):
        raise UnsupportedOnDevice(f"{view.name}: no command applies ReLU")

    def unit(addr: str, n: int):
        B.emit(ld, ld_cores, addr=addr, n=n, reg=0, relu=int(relu_on_load))
        if add:
            B.emit(add, ld_cores, addr=f"{addr}+{kc}", n=n, reg=0)
        B.emit(st, ld_cores, addr=f"{addr}+{(slots - 1) * kc}", n=n, reg=0, relu=int(relu_on_store))

    full_rows = chunks // upr
    if full_rows:
        with B.loop("r", full_rows):
            B.emit(act, ld_cores, row="r")
            for j in range(upr):
                unit(f"r*{R}+{j * slots * kc}", kc)
            B.emit(pre, ld_cores)
    rem = chunks - full_rows * upr
    if rem:
        B.emit(act, ld_cores, row=str(full_rows))
        for j in range(rem):
            q = full_rows * upr + j
            n = min(kc, total_cols - q * kc)
            unit(f"{full_rows * R + j * slots * kc}", n)
        B.emit(pre, ld_cores)
    B.mode_changes()

    B.phase("rearrange_out")  # host reads of results are spread over channels either way
    rd, rd_cores = B.data_cmd("host_read", False)
    comps = [_rng("b", Tb), _rng("i", Ti, P * lanes)]
    B.emit(rd, rd_cores, **{"from": "bank"}, lay=lay(slots - 1), base=0, dst=_ref("C", comps), acc=0)
    B.emit("HOST.STORE", tensor="C", bytes=int(np.prod(spec.shape("C"))) * ELEM_BYTES)
    return B.finish()


# ============================================================================ attention (AttAcc)
def gen_attn(spec: KernelSpec, draft: Draft, view: PimView, opts: CodegenOptions = DCC) -> Stream:
    """Command stream of ``attn``: scores on the GEMV units, softmax on the group unit, then x V."""
    if not view.supports("attn"):
        raise UnsupportedOnDevice(f"{view.name} has no softmax unit per PIM group; ATTN cannot run there")
    if draft.index_range != "expand":
        raise InfeasibleDraft("attn needs ceil-blocked (expanded) token ranges for the softmax unit")
    til = Tiling(spec, draft)
    B = _Builder(spec, draft, view, til, opts)
    lanes = view.elems_per_column
    R = view.core_row_cols
    Tb, Tn, K = til.T["b"], til.T["n"], spec.dims["k"]
    regs = view.input_regs
    cap = view.acc_regs * lanes
    cn = til.c["n"]
    g1 = _GemvTiles.plan(ceil_div(K, lanes), Tn, regs, cap, R)  # scores: vectors (b, n) over k
    NB1 = g1.slots
    # output: vectors (b, kk) over the core's tokens; the probabilities slice (token slots, zero-padded)
    g2 = _GemvTiles.plan(ceil_div(NB1, lanes), K, regs, cap, R)
    NB1s = g2.P * lanes  # score slots per head in the group buffer (whole columns; the softmax zeroes padding)
    NB2 = g2.slots
    k_base_rows = Tb * g1.rows
    B.stream.memory = (k_base_rows + Tb * g2.rows) * R
    if k_base_rows + Tb * g2.rows > view.hw.dram.rows_per_bank:
        raise InfeasibleDraft("per-core K/V tiles exceed the bank")
    S_sc = Tb * NB1s  # scores region per core
    S_o = Tb * NB2  # output region per core (or per head group, summed by the accumulator)
    odiv = cn if view.hw.group.accumulator else 1
    o_base = til.C * S_sc
    B.stream.gbuf = o_base + (til.C // odiv) * S_o

    # K: vectors (b, n) over k.  V is stored transposed: vectors (b, k) over the core's tokens.
    k_comps = [_rng("b", Tb), _rng("n", Tn, NB1), ("0", str(K), K, g1.P * lanes)]
    v_comps = [_rng("b", Tb), _rng("n", Tn, g2.P * lanes), ("0", str(K), K, NB2)]
    writes = (("K", k_comps, "0,1,2", g1.layout(R), 0), ("V", v_comps, "0,2,1", g2.layout(R), k_base_rows * R))
    B.phase("setup")
    for t, comps, perm, lay, base in writes:
        if spec.role(t) == "resident":
            _attn_write(B, t, comps, perm, lay, base)
    B.rearrange_phase([t for t, *_ in writes if spec.role(t) == "input"])
    B.emit("HOST.LAUNCH")
    for t, comps, perm, lay, base in writes:
        if spec.role(t) == "input":
            B.emit("HOST.LOAD", tensor=t, bytes=int(np.prod(spec.shape(t))) * ELEM_BYTES)
            _attn_write(B, t, comps, perm, lay, base)
    B.emit("HOST.LOAD", tensor="q", bytes=int(np.prod(spec.shape("q"))) * ELEM_BYTES)

    B.phase("compute")
    dot, dcores = B.compute_cmd("dot")
    act, pre = B.act_pre(dcores)
    mv, _ = B.compute_cmd("to_group")
    sfm = view.require("group_softmax")
    mvg, _ = B.compute_cmd("from_group")
    qw, qw_cores = B.data_cmd("reg_write", til.shared("b") and til.C > 1)

    def gemv(g: _GemvTiles, nvec: int, base_rows: int, load, out_dst):
        nb, ob, kc, nch, P, rows_b, upr, rpu, u = g.nb, g.ob, g.kc, g.nch, g.P, g.rows, g.upr, g.rpu, g.u
        vpr = max(1, R // kc)
        last = P - (nch - 1) * kc
        for q in range(nb):
            nv = min(ob, nvec - q * ob)
            for h in range(nch):
                per = kc if h < nch - 1 else last
                if nch > 1 or q == 0:
                    load(h, per)
                unit = q * nch + h
                ub = (unit // upr) * R + (unit % upr) * u if u <= R else unit * rpu * R
                base = f"{base_rows * R}+bi*{rows_b * R}+{ub}"
                for r in range(ceil_div(nv, vpr) if u > R else 1):
                    n_here = min(vpr, nv - r * vpr) if u > R else nv
                    B.emit(act, dcores, row=f"({base})//{R}+{r}")
                    B.emit(dot, dcores, addr=f"{base}+{r * R}", n=n_here * per, acc=r * vpr if u > R else 0,
                           per=per, pitch=kc, vecs=n_here, fresh=int(h == 0), reg=0)
                    B.emit(pre, dcores)
            B.emit(mv, None, acc=0, n=nv, **out_dst(q, ob))

    with B.loop("bi", Tb):
        def load_q(h, per):
            shift = f"{g1.kc * lanes * h}" if h else ""
            comps = [("o_b+bi",), ("0" if not shift else shift, f"{K}" if not shift else f"{K}-{shift}", per * lanes)]
            B.emit(qw, qw_cores, reg=0, src=_ref("q", comps))

        gemv(g1, Tn, 0, load_q, lambda q, ob: {"dst": f"bi*{NB1s}+{q * ob}", "stride": S_sc})
    # softmax of every head of the group: its tokens sit in the score regions of the cores
    # that share the head (consecutive core ids, one per token block)
    with B.loop("hb", til.c["b"]):
        with B.loop("bi", Tb):
            B.emit(sfm, None, base=f"hb*{cn * S_sc}+bi*{NB1s}", pieces=cn, pstride=S_sc,
                   plen=NB1s, tile=Tn, valid=spec.dims["n"], scale=repr(spec.scale))
    with B.loop("bi", Tb):
        def load_p(h, per):
            B.emit(mvg, None, src=f"bi*{NB1s}+{g2.kc * lanes * h}", stride=S_sc, reg=0, n=per)

        out_extra = {"cdiv": odiv, "sum": 1} if odiv > 1 else {}
        gemv(g2, K, k_base_rows, load_p, lambda q, ob: {"dst": f"{o_base}+bi*{NB2}+{q * ob}", "stride": S_o, **out_extra})
    B.mode_changes()

    B.phase("rearrange_out")  # host reads of results are spread over channels either way
    rd = view.require("host_read")
    B.emit(rd, None, **{"from": "gbuf"}, base=o_base, stride=S_o, cdiv=odiv,
           dst=_ref("o", [_rng("b", Tb), ("0", str(K), K, NB2)]), acc=1)
    out_elems = int(np.prod(spec.shape("o")))
    if cn // odiv > 1:
        parts = cn // odiv
        B.emit("HOST.REDUCE", bytes=out_elems * parts * ELEM_BYTES, flops=out_elems * (parts - 1))
    B.emit("HOST.STORE", tensor="o", bytes=out_elems * ELEM_BYTES)
    return B.finish()


def _attn_write(B: _Builder, t: str, comps, perm: str, lay: str, base: int):
    name, cores = B.data_cmd("host_write", False)
    B.emit(name, cores, addr=base, src=_ref(t, comps), perm=perm, lay=lay, pad=1)


# ============================================================================ entry point
def generate(spec: KernelSpec, draft: Draft, view: PimView, opts: CodegenOptions = DCC) -> Stream:
    """Lower one draft of a kernel to a command stream.

    Parameters
    ----------
    spec : KernelSpec
    draft : Draft
    view : PimView
    opts : CodegenOptions
        The code optimiser's switches (default: DCC, both on).

    Returns
    -------
    Stream

    Raises
    ------
    UnsupportedOnDevice
        The device's command set cannot run this kernel.
    InfeasibleDraft
        The draft does not fit the device.
    """
    if not view.supports(spec.kind):
        raise UnsupportedOnDevice(f"{view.name} cannot run {spec.kind.upper()} (its command set lacks the units)")
    check_draft(spec, view, draft)
    if spec.kind in ("gemv", "red"):
        return gen_contract(spec, draft, view, opts)
    if spec.kind in ("va", "relu"):
        return gen_eltwise(spec, draft, view, opts)
    return gen_attn(spec, draft, view, opts)


def generate_text(spec: KernelSpec, draft: Draft, view: PimView, opts: CodegenOptions = DCC) -> str:
    """The printed command stream of a draft: :func:`generate` (same parameters), then
    :func:`~tvm_pim.program.text.print_stream`."""
    return print_stream(generate(spec, draft, view, opts))

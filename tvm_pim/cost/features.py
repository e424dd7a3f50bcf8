"""Features of a (kernel, draft, device) triple: what DCC's coupled predictor learns from.

Paper 002 sec. IV-D: the features describe the kernel, the draft and the
device, so that one model can serve several backends: sizes,
per-dimension-set allocations and per-core lengths, padding, units used,
bytes the draft moves and which inputs can be broadcast, plus the device's
organisation, DRAM timing and bandwidths.  A few first-order estimates a PIM
programmer would compute (column commands per core, row activations, bytes
per channel) are added so that the trees learn corrections rather than the
whole DRAM behaviour.

:data:`FEATURE_VERSION` names this encoding; a saved predictor trained on
another version is refused.
"""

from __future__ import annotations

import math

import numpy as np

from ..compiler.codegen import contract_plan
from ..compiler.kernels import KINDS, KernelSpec
from ..compiler.space import Draft, InfeasibleDraft, dimension_sets
from ..hardware.view import ELEM_BYTES, PimView, ceil_div
from ..simulator.timing import TimingModel

FEATURE_VERSION = 5
_DIMS = ("b", "m", "n", "k", "i")

# caches: (spec, hardware digest) -> the static part; spec -> dimension-set extents
_STATIC: dict = {}
_SETS: dict = {}


def _l2(x: float) -> float:
    return math.log2(max(float(x), 1.0))


def _static_features(spec: KernelSpec, view: PimView) -> list[float]:
    """Kernel and device part of the features (the same for every draft)."""
    key = (spec, view.digest)
    hit = _STATIC.get(key)
    if hit is not None:
        return hit
    f: list[float] = [1.0 if spec.kind == k else 0.0 for k in KINDS]
    hw = view.hw
    t = hw.dram.timing
    f += [
        _l2(view.groups), _l2(view.cores_per_group), _l2(view.lanes), float(t.tccd_l), float(t.trcd + t.trp),
        t.tck_ns, _l2(view.channel_bw_gbs), _l2(view.host_bw_gbs), 1.0 if view.contraction == "dot" else 0.0,
        float(view.input_regs), float(view.acc_regs), _l2(view.core_row_cols),
        1.0 if hw.group.accumulator else 0.0,
    ]
    streamed = sum(int(np.prod(spec.shape(t_))) for t_ in spec.inputs if spec.role(t_) == "input")
    out = int(np.prod(spec.shape(spec.output)))
    f += [_l2(streamed * ELEM_BYTES), _l2(out * ELEM_BYTES)]
    _STATIC[key] = f
    return f



def features(spec: KernelSpec, draft: Draft, view: PimView) -> np.ndarray:
    """Feature vector of a (kernel, draft, device) triple.

    Besides the raw configuration (sizes, per-dimension-set groups, cores,
    per-core lengths, padding, units used, index ranges) it carries a few
    first-order estimates that a PIM programmer would compute -- column
    commands per core, row activations, bytes each channel moves for the
    streamed inputs and the (partial) outputs, per-core input writes -- so
    that the trees learn corrections rather than the whole DRAM behaviour.
    """
    f = list(_static_features(spec, view))
    dims = spec.dims
    sets = _SETS.get(spec)
    if sets is None:
        sets = _SETS[spec] = {s.name: s.extent for s in dimension_sets(spec)}
    parts = {p.dim: p for p in draft.parts}
    per = {d: ceil_div(E, parts[d].groups * parts[d].cores) if d in parts else E for d, E in sets.items()}
    for d in _DIMS:
        E = dims.get(d, 1)
        p = parts.get(d)
        g, c = (p.groups, p.cores) if p else (1, 1)
        L = per.get(d, 1)
        f += [_l2(E), _l2(g), _l2(c), _l2(L), (L * g * c) / max(E, 1)]
    lanes = view.elems_per_column
    lane_len = per[spec.lane_dim]
    cols = ceil_div(lane_len, lanes)
    vec = 1
    for d, L in per.items():
        if d != spec.lane_dim:
            vec *= L
    G = draft.groups_used
    C = draft.cores_used
    f += [_l2(G), _l2(C), 1.0 if draft.index_range == "exact" else 0.0]
    f += [_l2(vec * cols), (lane_len % lanes) / lanes, _l2(cols)]
    kparts = 1
    for d in spec.reduce_dims:
        p = parts.get(d)
        if p:
            kparts *= p.groups * p.cores
    out = int(np.prod(spec.shape(spec.output)))
    shared = all((parts.get(d).cores if parts.get(d) else 1) == 1 for d in ("b", "m", "k"))
    # first-order estimates
    ccols = vec * cols * (1 if spec.kind != "attn" else 2)
    rows = ccols / view.core_row_cols
    streamed = sum(int(np.prod(spec.shape(t))) for t in spec.inputs if spec.role(t) == "input") * ELEM_BYTES
    ch_bytes_in = streamed / max(G, 1)
    out_parts = kparts // (C if (view.hw.group.accumulator and spec.kind != "va") else 1) if kparts > 1 else 1
    ch_bytes_out = out * max(out_parts, 1) * (lanes if view.contraction == "mac" and spec.kind in ("gemv", "red") else 1) * ELEM_BYTES / max(G, 1)
    x_writes = (per.get("b", 1) * per.get("m", 1) * cols) * (1 if shared else C)
    f += [_l2(kparts), _l2(out * kparts * ELEM_BYTES), 1.0 if shared else 0.0]
    f += [_l2(ccols), _l2(rows), _l2(ch_bytes_in), _l2(ch_bytes_out), _l2(x_writes), _l2(G * C)]
    f += _plan_features(spec, draft, view)
    return np.asarray(f, dtype=np.float32)


_N_PLAN = 27


def prior_log_ns(X: np.ndarray) -> np.ndarray:
    """The plan's first-order time estimate, ``ln(ns)``, of each row of a feature matrix.

    It is the last feature (``log2`` of the command-path / core busy time plus the results' way
    out, :func:`plan_counts`): NaN for kernels without a plan, ``+inf`` where the tile does not fit.
    """
    last = np.asarray(X, dtype=np.float64)[:, -1]
    return np.where(last > 0, last * np.log(2.0), np.where(last < 0, np.inf, np.nan))


def plan_counts(spec: KernelSpec, draft: Draft, view: PimView) -> dict[str, float] | None:
    """Per-core command counts and first-order busy times of a ``gemv`` / ``red`` draft, from its tile plan.

    :func:`tvm_pim.compiler.codegen.contract_plan` says how one core's tile is
    cut (register chunks, vectors per block, blocks, rows, input rows held at
    once, result path) without building the stream.  From it follow the
    commands every core issues and a PIM programmer's estimate of the time
    they take: each row opened pays ``tRCD + tRP`` and stays open at least
    ``tRAS``; compute commands are issued at their spacing; input-register
    writes take a bus slot per column and cross the host link; results moved
    to the group buffer (``to_group``, AttAcc's MVSB) occupy the channel's
    data buses beside the compute; read/write turnarounds and refresh follow
    the device's rules; the partial outputs are read over the host link and
    summed on the host.  The trees learn corrections to these.

    Parameters
    ----------
    spec : KernelSpec
    draft : Draft
    view : PimView

    Returns
    -------
    dict or None
        ``acts`` (row activations per core), ``compute_cols`` (compute column commands per core),
        ``x_cols`` (input-register columns written per core, the ones vector of a dot-product
        reduction included), ``result_moves`` (store / move commands per core), ``move_cols`` (result
        columns moved to the group buffer per core), ``core_cycles``, ``command_path_cycles``,
        ``data_bus_cycles`` (result moves on the channel's data buses), ``x_link_ns`` (input writes over
        the host link), ``pim_ns`` (the compute phase: the busiest of these, with turnarounds and
        refresh), ``out_ns`` (result read-out and host sum), ``reduce_ns`` and the plan's sizes; None
        for other kernels.

    Raises
    ------
    InfeasibleDraft
        The tile does not fit a bank.
    """
    if spec.kind not in ("gemv", "red"):
        return None
    pl = contract_plan(spec, draft, view)
    R = view.core_row_cols
    reps = pl.Tb * max(1, pl.Tm // pl.mb)
    full, tail = pl.Tn // pl.ob, pl.Tn % pl.ob
    if pl.nch == 1 and pl.ucols <= R:  # whole blocks, upr to a row
        acts_per = full // pl.upr + int(full % pl.upr > 0 or tail > 0)
    elif pl.ucols <= R:  # one row per chunk of a block
        acts_per = (full + int(tail > 0)) * pl.nch
    else:  # a chunk's vectors span rows
        vpr = max(1, R // pl.kc)
        acts_per = pl.nch * (full * ceil_div(pl.ob, vpr) + (ceil_div(tail, vpr) if tail else 0))
    acts = reps * acts_per
    mac_cols = reps * pl.Tn * pl.P
    x_cols = pl.Tb * pl.Tm * pl.P * (pl.nb if pl.nch > 1 else 1) if pl.needs_x else 0
    x_loads = pl.Tb * pl.Tm // pl.mb * (pl.nb * pl.nch if pl.nch > 1 else 1) if pl.needs_x else 0
    ones = not pl.needs_x and pl.op_role == "dot"  # (a reduction's ones vector, written once, broadcast)
    if ones:
        x_cols = pl.kc
    t = view.hw.dram.timing
    role = pl.op_role
    cmd = view.cmd(view.command(role, "group") or view.require(role))
    step = max(pl.mb * float(cmd.latency_cycles), float(t.tccd_ab) if cmd.scope == "group" else float(t.tccd_l))
    act_cyc = acts * float(t.trcd + t.trp)
    mac_cyc = mac_cols * step
    open_cyc = acts * max(mac_cyc / max(acts, 1), float(t.tras - t.trcd))
    npch = view.hw.group.pseudo_channels
    col_bus = max(float(t.tbl), view.column_bytes / (view.channel_bw_gbs / npch) / t.tck_ns)
    xw = view.command("reg_write", "group") or view.command("reg_write")
    x_lat = float(view.cmd(xw).latency_cycles) if xw else 0.0
    x_cyc = x_cols * max(x_lat, col_bus)
    st_cyc = pl.Tb * pl.Tm * pl.Tn * step if pl.result == "bank" else 0.0
    core_cyc = act_cyc + open_cyc + x_cyc + st_cyc
    C = draft.cores_used
    shared = (all(draft.part(d).cores == 1 for d in ("b", "m", "k")) or ones) and C > 1
    x_bus = x_cols * (max(x_lat, col_bus) if shared else C * col_bus / npch)
    bus_cyc = 2 * acts + mac_cyc + x_bus + st_cyc
    # results moved to the group buffer: every core's columns on the channel's data buses (beside the MACs)
    lanes = view.elems_per_column
    move_cols = reps * pl.mb * (full * ceil_div(pl.ob, lanes) + (ceil_div(tail, lanes) if tail else 0)) \
        if pl.result == "group" else 0
    dbus_cyc = move_cols * C * col_bus / npch
    x_link_ns = draft.groups_used * x_cols * (1 if shared else C) * view.column_bytes / view.host_bw_gbs
    # read/write turnarounds (devices whose PIM commands are column reads and writes): one pair per input load,
    # one per block whose results are stored back into the bank
    turn = (x_loads + (reps * pl.nb if pl.result == "bank" else 0)) * float(t.twtr + t.trtw)
    work = np.maximum.reduce([bus_cyc, core_cyc, dbus_cyc]) + turn
    tm = TimingModel(view)
    pim_cyc = float(work + tm.refreshes(work) * tm.ref_cost)
    ks = draft.part("k").groups * draft.part("k").cores
    cdiv = draft.part("k").cores if (pl.result == "group" and view.hw.group.accumulator) else 1
    parts = ks // cdiv * (view.elems_per_column if role != "dot" else 1)
    out = int(np.prod(spec.shape(spec.output)))
    reduce_ns = out * (parts - 1) / (view.hw.system.host.tflops_fp16 * 1e3)
    if pl.result == "group":
        read_bytes = draft.groups_used * (C // cdiv) * ceil_div(pl.Tb * pl.Tm * pl.nbp * pl.ob, view.elems_per_column) * view.column_bytes
    else:
        read_bytes = out * parts * ELEM_BYTES
    return {
        "kc": pl.kc, "nch": pl.nch, "ob": pl.ob, "nb": pl.nb, "upr": pl.upr, "rpu": pl.rpu, "rows": pl.rows_b * pl.Tb,
        "mb": pl.mb, "bank_result": float(pl.result == "bank"), "acts": acts, "compute_cols": mac_cols,
        "x_cols": x_cols, "result_moves": reps * pl.nb * pl.mb, "move_cols": move_cols, "act_cycles": act_cyc,
        "compute_cycles": mac_cyc, "data_bus_cycles": dbus_cyc, "x_link_ns": x_link_ns, "turnaround_cycles": turn,
        "pim_ns": max(pim_cyc * t.tck_ns, x_link_ns),
        "block_padding": (pl.nbp * pl.ob - pl.Tn) / max(pl.nbp * pl.ob, 1), "core_cycles": core_cyc,
        "x_cycles": x_cyc, "command_path_cycles": bus_cyc, "reduce_ns": reduce_ns,
        "out_ns": read_bytes / view.host_bw_gbs + reduce_ns, "tck_ns": t.tck_ns,
    }


def _plan_features(spec: KernelSpec, draft: Draft, view: PimView) -> list[float]:
    """:func:`plan_counts` as features: zeros for other kernels, -1 where the tile does not fit a bank."""
    if spec.kind not in ("gemv", "red"):
        return [0.0] * _N_PLAN
    try:
        c = plan_counts(spec, draft, view)
    except InfeasibleDraft:
        return [-1.0] * _N_PLAN
    pim_ns = c["pim_ns"]
    return [_l2(c["kc"]), _l2(c["nch"]), _l2(c["ob"]), _l2(c["nb"]), _l2(c["upr"]), _l2(c["rpu"]), _l2(c["rows"]),
            float(c["mb"]), c["bank_result"], _l2(c["acts"]), _l2(c["compute_cols"]), _l2(c["x_cols"] + 1),
            _l2(c["result_moves"]), _l2(c["act_cycles"] + c["compute_cycles"]),
            c["act_cycles"] / max(c["act_cycles"] + c["compute_cycles"], 1.0), c["block_padding"],
            _l2(c["core_cycles"]), _l2(c["core_cycles"] * c["tck_ns"]), c["x_cycles"] / max(c["core_cycles"], 1.0),
            _l2(c["command_path_cycles"]), _l2(c["data_bus_cycles"] + 1), _l2(c["x_link_ns"] + 1),
            _l2(c["turnaround_cycles"] + 1), _l2(pim_ns), _l2(c["out_ns"]), _l2(c["reduce_ns"] + 1),
            _l2(pim_ns + c["out_ns"])]

"""The simulator's functional model: the values a command stream computes, in FP16.

Banks, input registers, accumulators and group buffers hold FP16 values
(unwritten memory is NaN, so reading it shows up in the results).  Every
command runs vectorised over the groups and cores it addresses.  The units
compute as the hardware does: products and sums are rounded to FP16 at
every step, accumulation follows the order of the column commands
(``numpy.add.accumulate`` in float16), an adder tree (``dot``) rounds its
16-product sum once, the group softmax unit computes in float32 and
stores FP16.  The host merges partial results in float32 and rounds the
output to FP16 once.
"""

from __future__ import annotations

import numpy as np

from ..hardware.view import PimView, ceil_div
from ..program.expr import parse_ref
from ..program.layout import layout_address
from ..program.stream import Command, Loop, Stream
from .decode import Env, SimulationError, role_of


def _ref_indices(ref_text: str, env: Env, shape, ng: int, nc: int, perm=None):
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


class FunctionalModel:
    """FP16 execution of command streams on one PIM device (see the module docstring).

    Parameters
    ----------
    view : PimView
    """

    def __init__(self, view: PimView):
        self.view, self.hw, self.lanes = view, view.hw, view.elems_per_column

    def execute(self, stream: Stream, inputs: dict[str, np.ndarray]) -> np.ndarray:
        """Run a stream on FP16 data and return its output tensor (FP16).

        Parameters
        ----------
        stream : Stream
        inputs : dict of str to numpy.ndarray
            Host tensors: every input and resident tensor the stream declares.

        Returns
        -------
        numpy.ndarray

        Raises
        ------
        SimulationError
            A tensor is missing or has the wrong shape, or a command addresses
            units, registers or memory the stream did not declare.
        """
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
                roles = role_of(hw, it.op, it.args)
                g = np.asarray(it.groups)
                if g.size and (g.max() >= G):
                    raise SimulationError(f"{it.op}: group {g.max()} beyond the stream's {G} groups")
                cs = allc if it.cores is None else np.asarray(it.cores)
                env = Env(stream, loops, g, cs)
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

    def _exec(self, it: Command, roles, env: Env, g, cs, bcast, stream: Stream, S):
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
            # batched GEMV: each column read serves ``rows`` input rows (registers reg + r*rreg,
            # accumulators acc + r*racc), in row order
            rows, rreg, racc = int(a.get("rows", "1")), int(a.get("rreg", "0")), int(a.get("racc", "0"))
            reg0 = int(env(a.get("reg", "0")))
            for r in range(rows):
                self._contract(it, role, data, S, g, cs, reg0 + r * rreg, a0 + r * racc, nv, fresh)
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

    def _contract(self, it, role, data, S, g, cs, r0, a0, nv, fresh):
        """One multiply-accumulate command on one input row: registers from ``r0``, accumulators from ``a0``."""
        regs, acc, lanes = S["regs"], S["acc"], self.lanes
        per = data.shape[3]
        if role == "acc_add":
            terms = data
        else:
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

    def _host_write(self, it: Command, env: Env, g, cs, bcast, stream: Stream, S):
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

    def _host_read(self, it: Command, env: Env, g, cs, stream: Stream, S):
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

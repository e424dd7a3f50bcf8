"""Execute meta-operator programs on a simulated CIM chip.

The simulator sees only programs (:mod:`tvm_cim.program`) and the hardware
description.  A :class:`Chip` keeps crossbar contents between runs: a
program's ``setup`` section runs the first time the program runs on the chip
(weights stay, weight-stationary), its ``run`` section every time.

Each meta-operator has a functional effect (numpy, vectorised over the
crossbars of a ``parallel`` block) and a cost: latency in cycles and energy in
pJ by component.  Statements of a ``parallel`` block overlap (the block lasts
as long as its longest statement); other statements run one after another.
Leakage power is charged over the elapsed time.

Cost formulas (all figures from the hardware file):

* ``CIM.write_xb``: ``rows x write_latency_ns`` per matrix (row-serial
  programming), ``rows x physical columns x write_energy_pj_per_cell``.
* ``CIM.read_xb`` on ``V`` vectors: ``V x input_steps x ceil(rows / rows_active)``
  read steps, each ``max(read_latency_ns, ceil(bitlines / adcs) x adc_latency_ns)``;
  energy per step ``read_energy_pj x rows/crossbar.rows`` plus one ADC
  conversion per bitline, plus DAC energy per driven row and input step.
* ``CIM.read_row``: as ``read_xb`` for one group of ``rows_active`` rows.
* ``CIM.read_core``: the core's crossbars operate in parallel.
* ``DCOM``: elements / ALU ops per cycle; energy from ``ops.<name>`` or the ALU.
* ``DMOV``: bytes x 8 / buffer bandwidth; energy per bit of the buffer.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from ..hardware.schema import CIMHardware
from ..program import Op, Parallel, Program, Range
from . import crossbar as X
from .functional import im2col


class SimulationError(RuntimeError):
    """A program cannot be executed (missing tensor, unknown operator, bad shape)."""


@dataclass
class Cost:
    """Latency and energy of a statement."""

    ns: float = 0.0
    energy: dict = field(default_factory=lambda: defaultdict(float))

    def add_energy(self, other: "Cost") -> None:
        for k, v in other.energy.items():
            self.energy[k] += v


@dataclass
class RegionStats:
    """What one execution of a program did."""

    name: str
    op: str
    latency_ns: float = 0.0
    energy_pj: dict = field(default_factory=lambda: defaultdict(float))
    metaop_counts: dict = field(default_factory=lambda: defaultdict(int))
    crossbars: int = 0
    cells_used: int = 0
    weight_writes: int = 0
    setup_ns: float = 0.0
    macs: int = 0
    buffer_peak_bytes: int = 0
    adc_error: dict = field(default_factory=dict)

    def total_energy(self) -> float:
        return float(sum(self.energy_pj.values()))


@dataclass
class Options:
    """Simulator switches.

    Attributes
    ----------
    exact_shortcut : bool
        Compute MVMs as one integer product when the ADC provably cannot alter
        any conversion (identical results).  Tests turn it off to exercise the
        bitwise path.
    measure_adc_error : bool
        When the ADC is lossy, also compute the ideal result and report the
        error of the integer accumulators.
    """

    exact_shortcut: bool = True
    measure_adc_error: bool = True


class Chip:
    """A simulated chip: crossbar contents plus the programs already set up."""

    def __init__(self, hw: CIMHardware, options: Options | None = None):
        self.hw = hw
        self.options = options or Options()
        self.xb_cells: dict[int, np.ndarray] = {}  # xb -> (Bt, rows, S, P, n) cells
        self.xb_weights: dict[int, np.ndarray] = {}  # decoded, for the exact shortcut
        self.xb_owner: dict[int, tuple] = {}
        self._setup_done: set[str] = set()

    # ------------------------------------------------------------------ public
    def run(self, prog: Program, tensors: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], RegionStats]:
        """Execute a program.

        Parameters
        ----------
        prog : Program
        tensors : dict
            Inputs and constants by declared name (without ``%``).

        Returns
        -------
        env : dict
            Every tensor of the program after execution (``env['out']`` is the output).
        stats : RegionStats
        """
        env = dict(tensors)
        for d in prog.decls:
            if d.role in ("input", "const") and d.name not in env:
                raise SimulationError(f"program '{prog.name}': missing {d.role} %{d.name}")
        stats = RegionStats(prog.name, str(prog.attr("op", "")))
        self.wbits = int(prog.attr("weight_bits", self.hw.crossbar.weight_bits))
        self.ibits = int(prog.attr("input_bits", self.hw.crossbar.input_bits))
        if self.wbits > self.hw.crossbar.weight_bits or self.ibits > self.hw.crossbar.input_bits:
            raise SimulationError(
                f"program '{prog.name}' needs {self.wbits}-bit weights / {self.ibits}-bit inputs; "
                f"the chip supports {self.hw.crossbar.weight_bits} / {self.hw.crossbar.input_bits}"
            )
        key = prog.name
        if key not in self._setup_done or any(
            self.xb_owner.get(o["xb"]) != (prog.name,) for o in prog.ops("setup")
        ):
            c = self._block(prog.setup, env, stats, parallel=False)
            stats.setup_ns = c.ns
            for k, v in c.energy.items():
                stats.energy_pj["setup_" + k] += v
            self._setup_done.add(key)
        c = self._block(prog.run, env, stats, parallel=False)
        stats.latency_ns = c.ns
        for k, v in c.energy.items():
            stats.energy_pj[k] += v
        # leakage over the run
        stats.energy_pj["leakage"] += self._leakage_mw() * c.ns  # mW * ns = pJ
        xbs = {o["xb"] for o in prog.ops() if "xb" in dict(o.args)}
        for o in prog.ops():
            if o.opcode == "CIM.read_core":
                xbs.update(o["xbs"])
        stats.crossbars = len(xbs)
        # working set in hardware formats: input codes (1 B each) + int32 outputs
        outs = [d for d in prog.decls if d.role == "output"]
        in_bytes = sum(int(np.prod(d.shape)) for d in prog.decls if d.role == "input") * ((self.hw.crossbar.input_bits + 7) // 8)
        stats.buffer_peak_bytes = int(in_bytes + sum(int(np.prod(d.shape)) * 4 for d in outs))
        return env, stats

    def _leakage_mw(self) -> float:
        hw = self.hw
        return (
            hw.chip.leakage_mw
            + hw.chip.global_buffer.leakage_mw
            + hw.chip.alu.leakage_mw
            + hw.chip.cores * (hw.core.local_buffer.leakage_mw + hw.core.alu.leakage_mw)
        )

    # ------------------------------------------------------------------ blocks
    def _block(self, stmts, env, stats, parallel: bool) -> Cost:
        total = Cost()
        reads = [s for s in stmts if isinstance(s, Op) and s.opcode.startswith("CIM.read")]
        if parallel and reads:
            self._exec_reads(reads, env, stats)
        for s in stmts:
            if isinstance(s, Parallel):
                c = self._block(s.body, env, stats, parallel=True)
            else:
                stats.metaop_counts[s.kind] += 1
                if not (parallel and s.opcode.startswith("CIM.read")):
                    if s.opcode.startswith("CIM.read"):
                        self._exec_reads([s], env, stats)
                    else:
                        self._exec(s, env, stats)
                c = self._cost(s, env)
            total.ns = max(total.ns, c.ns) if parallel else total.ns + c.ns
            total.add_energy(c)
        return total

    # ------------------------------------------------------------------ functional
    def _exec(self, o: Op, env, stats) -> None:
        k = o.kind
        if o.opcode == "CIM.write_xb":
            src = env[o["src"].name]
            r, c = o["rows"].slice(), o["cols"].slice()
            w = src[..., r, c]
            if w.ndim == 2:
                w = w[None]
            xb = o["xb"]
            cells = X.encode(w, self.hw, self.wbits)
            self.xb_cells[xb] = cells
            self.xb_weights[xb] = X.decode(cells, self.hw, self.wbits)
            self.xb_owner[xb] = (stats.name,)
            stats.weight_writes += 1
            return
        if o.opcode == "DMOV":
            return
        if k == "DCOM.quantize":
            x = env[o["src"].name]
            bits, zero = o["bits"], o["zero"]
            q = np.rint(x.astype(np.float64) / o["scale"])
            if o.get("signed", False):
                lim = 2 ** (bits - 1) - 1
                q = np.clip(q, -lim, lim)
            else:
                q = np.clip(q + zero, 0, 2**bits - 1)
            env[o["dst"].name] = q.astype(np.int32)
        elif k == "DCOM.im2col":
            x = env[o["src"].name]
            cols = im2col(x, o["kernel"], o["strides"], o["padding"], o["dilation"], o["pad_value"])
            env[o["dst"].name] = cols[None]
        elif k == "DCOM.reshape":
            x = env[o["src"].name]
            shape = tuple(o["shape"])
            bs = o.get("batch_shape")
            if bs is not None:
                x = np.broadcast_to(x, tuple(bs) + x.shape[-2:])
            env[o["dst"].name] = np.ascontiguousarray(x).reshape(shape)
        elif k == "DCOM.colsum":
            y = env[o["src"].name]
            env[o["dst"].name] = y.astype(np.int64).sum(axis=-2)[:, None, :]
        elif k == "DCOM.zeros":
            env[o["dst"].name] = np.zeros(tuple(o["shape"]), dtype=np.int64)
        elif k == "DCOM.reduce":
            pass  # partial sums were accumulated by the reads; cost only
        elif k == "DCOM.zero_point":
            acc = env[o["dst"].name]
            acc -= int(o["zero"]) * env[o["wsum"].name].astype(np.int64)
        elif k == "DCOM.dequantize":
            acc = env[o["src"].name].astype(np.float64) * o["scale"]
            if o.get("wscale") is not None:
                acc = acc * env[o["wscale"].name].astype(np.float64)
            if o.get("bias") is not None:
                acc = acc + env[o["bias"].name].astype(np.float64)
            shape = tuple(o["shape"])
            if o["layout"] == "nchw":
                n, ch, h, w = shape
                acc = acc.reshape(n, h, w, ch).transpose(0, 3, 1, 2)
            env[o["dst"].name] = np.ascontiguousarray(acc.reshape(shape), dtype=np.float32)
        else:
            raise SimulationError(f"unknown meta-operator {k}")

    def _exec_reads(self, reads: list[Op], env, stats) -> None:
        """Execute the reads of one parallel block as one vectorised MVM."""
        items = []  # (xb, rows Range, cols Range, src, dst)
        for o in reads:
            if o.opcode == "CIM.read_core":
                items += [(xb, r, c, o["src"].name, o["dst"].name) for xb, r, c in zip(o["xbs"], o["rows"], o["cols"])]
            elif o.opcode == "CIM.read_row":
                base = o["base"]
                items.append((o["xb"], o["rows"], o["cols"], o["src"].name, o["dst"].name, base))
            else:
                items.append((o["xb"], o["rows"], o["cols"], o["src"].name, o["dst"].name))
        groups: dict[tuple, list] = defaultdict(list)
        for it in items:
            groups[(it[3], it[4])].append(it)
        for (src, dst), its in groups.items():
            x = env[src]
            acc = env[dst]
            bt, v, _ = x.shape
            for it in its:
                if it[0] not in self.xb_cells:
                    raise SimulationError(f"read of crossbar {it[0]} before it was written")
            r_max = max(it[1].size for it in its)
            t_n = len(its)
            xs = np.zeros((t_n, bt, v, r_max), dtype=np.int32)
            cells, wts = [], []
            n_max = max(it[2].size for it in its)
            for t, it in enumerate(its):
                xb, rows, cols = it[0], it[1], it[2]
                xs[t, :, :, : rows.size] = x[:, :, rows.slice()]
                c = self.xb_cells[xb]
                w = self.xb_weights[xb]
                if len(it) == 6:  # read_row: a row group of the crossbar
                    off = rows.start - it[5]
                    c = c[:, off : off + rows.size]
                    w = w[:, off : off + rows.size]
                c = self._fit(c, bt, r_max, n_max, axis_rows=1)
                w = self._fit(w, bt, r_max, n_max, axis_rows=1)
                cells.append(c)
                wts.append(w)
            cells = np.stack(cells)
            wts = np.stack(wts)
            res = X.mvm(xs, cells, self.hw, self.wbits, self.ibits, self.options.exact_shortcut, weights=wts)
            if self.options.measure_adc_error and not X.is_lossless(self.hw):
                ideal = np.matmul(xs.astype(np.float64), wts.astype(np.float64))
                err = np.abs(res - ideal)
                e = stats.adc_error
                e["max_abs"] = max(e.get("max_abs", 0.0), float(err.max(initial=0)))
                e["sum_sq_err"] = e.get("sum_sq_err", 0.0) + float((err.astype(np.float64) ** 2).sum())
                e["sum_sq_ref"] = e.get("sum_sq_ref", 0.0) + float((ideal**2).sum())
            for t, it in enumerate(its):
                cols = it[2]
                acc[:, :, cols.slice()] += res[t, :, :, : cols.size]
                stats.macs += bt * v * it[1].size * cols.size

    @staticmethod
    def _fit(a: np.ndarray, bt: int, r_max: int, n_max: int, axis_rows: int) -> np.ndarray:
        """Pad a crossbar's contents to the block's common (Bt, rows, ..., n) shape."""
        if a.shape[0] != bt:
            a = np.broadcast_to(a, (bt,) + a.shape[1:])
        pad = [(0, 0)] * a.ndim
        pad[1] = (0, r_max - a.shape[1])
        pad[-1] = (0, n_max - a.shape[-1])
        if any(p != (0, 0) for p in pad):
            a = np.pad(a, pad)
        return a

    # ------------------------------------------------------------------ costs
    def _read_cost(self, rows: int, cols: int, vectors: int, steps_rows: int | None = None) -> Cost:
        hw, xb = self.hw, self.hw.crossbar
        groups = steps_rows if steps_rows is not None else -(-rows // xb.rows_active)
        bitlines = cols * hw.cols_per_weight(self.wbits)
        step_ns = max(xb.device.read_latency_ns, -(-bitlines // xb.adcs) * xb.adc_latency_ns)
        steps = vectors * hw.input_steps(self.ibits) * groups
        c = Cost(ns=steps * step_ns)
        c.energy["crossbar"] += steps * xb.device.read_energy_pj * min(rows, xb.rows_active) / xb.rows
        c.energy["adc"] += steps * bitlines * xb.adc_energy_pj
        c.energy["dac"] += vectors * hw.input_steps(self.ibits) * rows * xb.dac_energy_pj
        sa = hw.op("shift_add")
        c.energy["alu"] += steps * cols * sa.energy_pj
        return c

    def _cost(self, o: Op, env) -> Cost:
        hw = self.hw
        cyc = hw.cycle_ns
        batch = int(o.get("batch", 1))
        if o.opcode == "CIM.write_xb":
            rows, cols = o["rows"].size, o["cols"].size
            c = Cost(ns=batch * rows * hw.crossbar.device.write_latency_ns)
            c.energy["write"] += batch * rows * cols * hw.cols_per_weight(self.wbits) * hw.crossbar.device.write_energy_pj_per_cell
            return c
        if o.opcode in ("CIM.read_xb", "CIM.read_row", "CIM.read_core"):
            src = env[o["src"].name]
            vectors = src.shape[0] * src.shape[1]
            if o.opcode == "CIM.read_core":
                parts = [self._read_cost(r.size, c.size, vectors) for r, c in zip(o["rows"], o["cols"])]
                c = Cost(ns=max(p.ns for p in parts))
                for p in parts:
                    c.add_energy(p)
                return c
            if o.opcode == "CIM.read_row":
                return self._read_cost(o["rows"].size, o["cols"].size, vectors, steps_rows=1)
            return self._read_cost(o["rows"].size, o["cols"].size, vectors)
        if o.opcode == "DMOV":
            nbytes = int(o.get("bytes", 0))
            buf = hw.chip.global_buffer if o.get("level") == "global" else hw.core.local_buffer
            ports = 1 if o.get("level") == "global" else hw.chip.cores
            c = Cost(ns=math.ceil(nbytes * 8 / (buf.bandwidth_bits * ports)) * cyc)
            e = nbytes * 8 * (buf.read_energy_pj_per_bit + buf.write_energy_pj_per_bit)
            if o.get("level") == "core":
                e += nbytes * 8 * hw.chip.noc.energy_pj_per_bit_hop
            c.energy["buffer"] += e
            return c
        # DCOM
        sub = o.get("op")
        elements = {
            "quantize": lambda: env[o["dst"].name].size,
            "im2col": lambda: env[o["dst"].name].size,
            "reshape": lambda: 0,
            "zeros": lambda: 0,
            "colsum": lambda: env[o["src"].name].size,
            "reduce": lambda: int(o["elements"]) * (int(o["terms"]) - 1),
            "zero_point": lambda: env[o["dst"].name].size,
            "dequantize": lambda: env[o["src"].name].size * 2,
        }.get(sub, lambda: 0)()
        alu = hw.core.alu if sub in ("reduce", "zero_point") else hw.chip.alu
        lanes = alu.ops_per_cycle * (hw.chip.cores if alu is hw.core.alu else 1)
        cost_name = {"reduce": "add", "zero_point": "add", "dequantize": "mul"}.get(sub, sub)
        per = hw.ops.get(cost_name)
        lat = per.latency_cycles if per else 1.0
        c = Cost(ns=math.ceil(elements / lanes) * lat * cyc if elements else 0.0)
        c.energy["alu"] += elements * (per.energy_pj if per else alu.energy_pj_per_op)
        return c

"""Schema of CIM crossbar chips: the data every compiler pass and the simulator read.

The CIM-MLC three-tier abstraction (chip / core / crossbar, paper 003) with the
computing mode (core, crossbar, wordline), crossbar geometry, rows active at
once, cell / DAC / ADC bits, device read/write latency and energy, buffers per
level, NoC, ALUs, CMSwitch's dual-mode arrays (paper 000) and per-operation
costs of the digital meta-operators.

Descriptions are TOML files (``targets/``) validated by
:func:`tvm_cim.common.hardware.load`; every field below is a key of the file,
its pydantic type carries its constraints, and ``doc`` / ``unit`` are what
``python -m tvm_cim presets --schema cim`` prints.  :data:`NOT_MODELLED` lists
the keys the model does not read, and why.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from ..common.schema import (
    Count,
    Flag,
    Meta,
    NonNegFloat,
    PositiveFloat,
    PositiveInt,
    hw_dataclass,
    key,
)


@hw_dataclass
class Buffer:
    """An on-chip buffer level (MIREDO memory level / CIM-MLC L0-L2)."""

    capacity_kb: PositiveFloat = key(doc="capacity", unit="KiB")
    bandwidth_bits: PositiveInt = key(doc="bits transferred per cycle per port", unit="bit/cycle")
    double_buffer: Flag = key(False, doc="whether the buffer can double-buffer (ping-pong)")
    read_energy_pj_per_bit: NonNegFloat = key(0.0, doc="dynamic read energy", unit="pJ/bit")
    write_energy_pj_per_bit: NonNegFloat = key(0.0, doc="dynamic write energy", unit="pJ/bit")
    leakage_mw: NonNegFloat = key(0.0, doc="static power", unit="mW")


@hw_dataclass
class Alu:
    """A vector / scalar ALU used for shift-and-add, activation, pooling, etc."""

    ops_per_cycle: PositiveInt = key(doc="element operations per cycle")
    energy_pj_per_op: NonNegFloat = key(0.0, doc="dynamic energy per element operation", unit="pJ")
    leakage_mw: NonNegFloat = key(0.0, doc="static power", unit="mW")


@hw_dataclass
class Noc:
    """On-chip network between cores."""

    topology: Literal["mesh", "bus", "crossbar", "ring"] = key("mesh", doc="interconnect topology")
    link_bandwidth_bits: PositiveInt = key(256, doc="bits per cycle per link", unit="bit/cycle")
    hop_latency_cycles: Count = key(1, doc="router + link latency per hop", unit="cycle")
    energy_pj_per_bit_hop: NonNegFloat = key(0.0, doc="energy per bit per hop", unit="pJ/bit")


# Digital operations whose per-element cost a CIM description may set in [ops].
CIM_OPS = ("add", "colsum", "dmov", "im2col", "mul", "pool", "quantize", "relu", "shift_add", "sigmoid")


@hw_dataclass
class Device:
    """The memory cell technology of the crossbars."""

    type: Literal["reram", "pcm", "sram", "edram", "mram", "flash"] = key(doc="cell technology")
    read_latency_ns: NonNegFloat = key(doc="one analogue crossbar read (MVM step, one input bit slice)", unit="ns")
    write_latency_ns: NonNegFloat = key(doc="programming one crossbar row", unit="ns")
    read_energy_pj: NonNegFloat = key(doc="energy of one crossbar read (whole array, one input slice)", unit="pJ")
    write_energy_pj_per_cell: NonNegFloat = key(doc="programming energy per cell", unit="pJ")
    endurance_writes: NonNegFloat = key(0.0, doc="write endurance (0 = unlimited / not modelled)")


WeightEncoding = Literal["differential", "offset", "twos"]
InputEncoding = Literal["phases", "offset", "twos"]


@hw_dataclass
class Crossbar:
    """The crossbar (array / macro) tier."""

    rows: PositiveInt = key(doc="wordlines")
    cols: PositiveInt = key(doc="bitlines")
    rows_active: PositiveInt = key(doc="wordlines that may be activated at once (parallel rows)")
    cell_bits: PositiveInt = key(doc="bits stored per cell")
    dac_bits: PositiveInt = key(doc="input bits applied per read step (bit-serial input)")
    adc_bits: PositiveInt = key(doc="ADC resolution")
    adc_mode: Literal["clip", "scale"] = key(
        "clip",
        doc="'clip': ADC LSB is one unit and larger sums saturate; "
        "'scale': the LSB is the smallest power of two that covers the largest possible sum",
    )
    adc_range: Literal["fixed", "array", "column"] = key(
        "fixed",
        doc="what the compiler may program of the ADC's input range: 'fixed' (set by adc_mode), "
        "'array' (one power-of-two LSB per layer's arrays) or 'column' (one per bitline); "
        "programmed ranges are calibrated on the partial sums of calibration samples",
    )
    adcs: PositiveInt = key(1, doc="ADCs per crossbar, shared by the columns")
    adc_latency_ns: NonNegFloat = key(1.0, doc="one conversion", unit="ns")
    adc_energy_pj: NonNegFloat = key(0.0, doc="one conversion", unit="pJ")
    dac_energy_pj: NonNegFloat = key(0.0, doc="driving one row for one input slice", unit="pJ")
    adc_leakage_mw: NonNegFloat = key(
        0.0, doc="static power of one ADC (times adcs), whether or not it converts", unit="mW")
    dac_leakage_mw: NonNegFloat = key(
        0.0, doc="static power of one row's DAC (times rows), whether or not it drives", unit="mW")
    leakage_mw: NonNegFloat = key(
        0.0, doc="static power of the rest of one crossbar's periphery (sample-and-hold, shift-and-add, input and "
        "output registers; the cells themselves when volatile), whether or not it computes", unit="mW")
    weight_bits: PositiveInt = key(8, doc="weight precision the chip supports")
    weight_storage_bits: Count = key(
        0,
        doc="bits every weight occupies in the cells (bit slices per weight, hence columns per weight and "
        "crossbars per layer), whatever precision the compiler quantises to; 0: the quantised precision. "
        "A narrower value is stored in the low slices (its own offset / sign slice) with zero upper slices",
    )
    input_bits: PositiveInt = key(8, doc="activation precision the chip supports")
    input_storage_bits: Count = key(
        0,
        doc="bits every activation occupies in buffers and on links and is applied with bit-serially (input "
        "steps per MVM), whatever precision the compiler quantises to; 0: the quantised precision. A narrower "
        "value is held in the low bits (the upper input steps drive zeros, or sign bits)",
    )
    weight_encoding: WeightEncoding = key(
        "differential",
        doc="how signed weights are stored by default: positive/negative column pairs ('differential'), "
        "with a +2^(b-1) offset removed digitally ('offset'), or two's complement slices whose most "
        "significant slice holds the sign bit with negative weight ('twos')",
    )
    weight_encodings: list[WeightEncoding] = key(
        factory=list,
        doc="weight encodings the compiler may choose per layer besides weight_encoding "
        "(what the chip's periphery supports); empty: weight_encoding only",
    )
    input_encoding: InputEncoding = key(
        "phases",
        doc="how signed activations are applied by default: two unsigned phases, positive and negative "
        "parts ('phases'), offset by +2^(b-1) with the offset removed digitally ('offset'), or two's "
        "complement bit-serially with a negative sign step ('twos')",
    )
    input_encodings: list[InputEncoding] = key(
        factory=list,
        doc="input encodings the compiler may choose per layer besides input_encoding; empty: input_encoding only",
    )
    device: Device = key(doc="cell technology")


@hw_dataclass
class Core:
    """The core (tile / PE) tier."""

    crossbars: PositiveInt = key(doc="crossbars per core")
    local_buffer: Buffer = key(doc="core-local input/output buffer (L1)")
    alu: Alu = key(doc="core vector unit (shift-and-add, activations)")
    input_register_bits: Count = key(0, doc="per-crossbar input register (L0); 0 = not modelled", unit="bit")
    output_register_bits: Count = key(0, doc="per-crossbar output register (L0); 0 = not modelled", unit="bit")


@hw_dataclass
class DualMode:
    """CMSwitch dual-mode arrays that can serve as memory instead of computing."""

    switchable_arrays: Count = key(0, doc="crossbars 0 .. n-1 can switch between compute and memory mode")
    memory_bandwidth_bits: Count = key(0, doc="bits per cycle an array delivers in memory mode", unit="bit/cycle")
    to_memory_cycles: Count = key(0, doc="latency of switching compute -> memory (TOM)", unit="cycle")
    to_compute_cycles: Count = key(0, doc="latency of switching memory -> compute (TOC)", unit="cycle")
    to_memory_energy_pj: NonNegFloat = key(0.0, doc="energy of switching one array compute -> memory", unit="pJ")
    to_compute_energy_pj: NonNegFloat = key(0.0, doc="energy of switching one array memory -> compute", unit="pJ")
    memory_capacity_kb: NonNegFloat = key(
        0.0, doc="data one array holds in memory mode (0 = rows x cols x cell_bits)", unit="KiB")
    memory_read_energy_pj_per_bit: NonNegFloat = key(0.0, doc="reading an array in memory mode", unit="pJ/bit")
    memory_write_energy_pj_per_bit: NonNegFloat = key(0.0, doc="writing an array in memory mode", unit="pJ/bit")
    write_ports: Count = key(
        0, doc="arrays whose weights can be programmed at the same time (0 = all of them)")


@hw_dataclass
class OpCost:
    """Latency and energy of one meta-operator instance."""

    latency_cycles: NonNegFloat = key(doc="latency", unit="cycle")
    energy_pj: NonNegFloat = key(0.0, doc="dynamic energy", unit="pJ")


OPERANDS = ("I", "W", "O")
LOOP_DIMS = ("N", "G", "K", "C", "P", "Q", "R", "S")


@hw_dataclass
class MemLevel:
    """One memory level of MIREDO's hierarchy (sec. III-A): which operands may live there, how it is reached."""

    order: Count = key(doc="position in the hierarchy: 0 = outermost (off-chip); larger = closer to the macro")
    operands: list[Literal["I", "W", "O"]] = key(doc="operands the level may hold (MIREDO C^M)")
    capacity_bits: PositiveInt = key(doc="capacity of one instance (per core when per_core)", unit="bit")
    bandwidth_bits: PositiveInt = key(doc="read/write bits per cycle of one instance", unit="bit/cycle")
    per_core: Flag = key(False, doc="one instance per core (else shared by all cores)")
    double_buffer: Flag = key(False, doc="the level may run ping-pong (half its capacity per tile)")
    bypass: Flag = key(False, doc="the optimiser may skip the level (the operand goes directly past it)")
    read_energy_pj_per_bit: NonNegFloat = key(0.0, doc="dynamic read energy", unit="pJ/bit")
    write_energy_pj_per_bit: NonNegFloat = key(0.0, doc="dynamic write energy", unit="pJ/bit")


@hw_dataclass
class SpatialAxis:
    """A spatial axis of the accelerator (MIREDO C^X): its size and the loops it may unroll."""

    order: Count = key(doc="0 = outermost axis (cores); the macro's row and column axes follow")
    size: PositiveInt = key(doc="parallel units along the axis")
    loops: list[Literal[LOOP_DIMS]] = key(doc="loop dimensions the axis may unroll: " + ", ".join(LOOP_DIMS))  # type: ignore[valid-type]


@hw_dataclass
class Dataflow:
    """What the per-layer dataflow optimiser (MIREDO, paper 001) sees: memory levels, spatial axes, macro modes.

    Empty (no levels) on chips whose weights stay in crossbars; the
    ``miredo`` dataflow piece needs it.
    """

    levels: dict[str, MemLevel] = key(factory=dict, doc="memory levels by name (off-chip memory included)")
    spatial: dict[str, SpatialAxis] = key(factory=dict, doc="spatial axes by name")
    weight_double_buffer: Flag = key(False, doc="a macro may load weights into an idle compartment while computing")
    psum_bits: PositiveInt = key(16, doc="partial-sum precision moved between output levels", unit="bit")
    output_bits: PositiveInt | None = key(
        None, doc="precision of final outputs (every reduction done, requantised) moved out of a level; "
                  "absent: psum_bits", unit="bit")


@hw_dataclass
class Chip:
    """The chip tier."""

    cores: PositiveInt = key(doc="cores on the chip")
    frequency_mhz: PositiveFloat = key(doc="digital clock", unit="MHz")
    computing_mode: Literal["core", "crossbar", "wordline"] = key(
        doc="finest unit the compiler controls (CIM-MLC sec. 3.3): core (CM), crossbar (XBM), wordline (WLM)"
    )
    global_buffer: Buffer = key(doc="chip-level buffer (L2)")
    noc: Noc = key(factory=Noc, doc="core interconnect")
    alu: Alu = key(doc="chip-level ALU")
    offchip_bandwidth_bits: PositiveInt = key(64, doc="off-chip interface width per cycle", unit="bit/cycle")
    offchip_energy_pj_per_bit: NonNegFloat = key(0.0, doc="off-chip access energy", unit="pJ/bit")
    leakage_mw: NonNegFloat = key(0.0, doc="static power of everything not listed elsewhere", unit="mW")


@hw_dataclass
class System:
    """The accelerator above the chip tier (PIMCOMP Table II): identical chips joined by inter-chip links.

    With one chip (the default) nothing changes.  With several, every chip
    has the ``[chip]`` resources (cores, global buffer, ALU); the cores of
    all chips are one pool for the compiler, the chips' global buffers and
    chip ALUs are pooled (a load or store uses the port of the chip holding
    the data, so the pooled port moves ``chips x bandwidth_bits`` per cycle;
    the chip-level digital work is spread likewise), and a
    core's input crosses an inter-chip link (most of it is held by another
    chip's global buffer), so its scatter runs at the smaller of its NoC
    link and the inter-chip link and pays the link's energy.
    """

    chips: PositiveInt = key(1, doc="identical chips of the accelerator")
    link_bandwidth_bits: PositiveInt = key(64, doc="inter-chip link width per cycle", unit="bit/cycle")
    link_energy_pj_per_bit: NonNegFloat = key(0.0, doc="inter-chip transfer energy", unit="pJ/bit")


@hw_dataclass
class CIMHardware:
    """A computing-in-memory crossbar chip (CIM-MLC three-tier abstraction)."""

    meta: Meta
    chip: Chip
    core: Core
    crossbar: Crossbar
    dual_mode: DualMode = key(factory=DualMode, doc="CMSwitch dual-mode arrays")
    system: System = key(factory=System, doc="chips of the accelerator and the links between them (PIMCOMP)")
    dataflow: Dataflow = key(factory=Dataflow, doc="MIREDO's per-layer dataflow view (memory levels, spatial axes)")
    ops: dict[Literal[CIM_OPS], OpCost] = key(  # type: ignore[valid-type]
        factory=dict,
        doc="per-element latency/energy of digital meta-operators; keys: " + ", ".join(CIM_OPS),
    )
    source_path: str = dataclasses.field(default="", compare=False)

    # ----------------------------------------------------------------- checks
    def problems(self) -> list[tuple[str, str, object]]:
        """Values that are valid alone but not together: ``(key, expected, got)``."""
        out = []
        xb = self.crossbar
        if xb.rows_active > xb.rows:
            out.append(("crossbar.rows_active", f"at most crossbar.rows ({xb.rows})", xb.rows_active))
        if xb.dac_bits > xb.input_bits:
            out.append(("crossbar.dac_bits", f"at most crossbar.input_bits ({xb.input_bits})", xb.dac_bits))
        if xb.cell_bits > xb.weight_bits:
            out.append(("crossbar.cell_bits", f"at most crossbar.weight_bits ({xb.weight_bits})", xb.cell_bits))
        if xb.weight_storage_bits > xb.weight_bits:
            out.append(("crossbar.weight_storage_bits", f"at most crossbar.weight_bits ({xb.weight_bits})",
                        xb.weight_storage_bits))
        if xb.input_storage_bits > xb.input_bits:
            out.append(("crossbar.input_storage_bits", f"at most crossbar.input_bits ({xb.input_bits})",
                        xb.input_storage_bits))
        if self.dual_mode.switchable_arrays > self.total_crossbars:
            out.append(("dual_mode.switchable_arrays", f"at most the chip's crossbars ({self.total_crossbars})",
                        self.dual_mode.switchable_arrays))
        df = self.dataflow
        if df.levels:
            orders = sorted(lv.order for lv in df.levels.values())
            if len(set(orders)) != len(orders):
                out.append(("dataflow.levels", "distinct 'order' values", orders))
            outer = min(df.levels.values(), key=lambda lv: lv.order)
            if set(outer.operands) != set(OPERANDS) or outer.bypass:
                out.append(("dataflow.levels", "an outermost level holding I, W and O that cannot be bypassed",
                            outer.operands))
            if not any("W" in lv.operands and lv.per_core for lv in df.levels.values()):
                out.append(("dataflow.levels", "a per-core level holding W (the macro)", "none"))
            if not df.spatial:
                out.append(("dataflow.spatial", "at least one spatial axis", "none"))
        if self.dual_mode.write_ports > self.total_crossbars:
            out.append(("dual_mode.write_ports", f"at most the chip's crossbars ({self.total_crossbars})",
                        self.dual_mode.write_ports))
        if self.dual_mode.switchable_arrays and not self.dual_mode.memory_bandwidth_bits:
            out.append(("dual_mode.memory_bandwidth_bits", "> 0 when arrays can switch", 0))
        return out

    # ----------------------------------------------------------------- derived
    @property
    def name(self) -> str:
        return self.meta.name

    @property
    def cores(self) -> int:
        """Cores of the whole accelerator (every chip)."""
        return self.system.chips * self.chip.cores

    @property
    def total_crossbars(self) -> int:
        """Crossbars of the whole accelerator (every core of every chip)."""
        return self.cores * self.core.crossbars

    @property
    def cycle_ns(self) -> float:
        """Length of one digital clock cycle in nanoseconds."""
        return 1e3 / self.chip.frequency_mhz

    def weight_slices(self, bits: int) -> int:
        """Cells that hold one ``bits``-bit weight on one bitline each (bit slicing), per plane.

        ``differential``: the ``bits - 1`` magnitude bits (on each of two
        planes); ``offset``: the ``bits`` bits of ``w + 2^(bits-1)``;
        ``twos``: the ``bits - 1`` low bits of the two's complement code and
        one cell for the sign bit.  At least ``crossbar.weight_storage_bits``
        are sliced: a narrower weight keeps its own code in the low slices and
        leaves the upper ones zero.
        """
        xb = self.crossbar
        c = xb.cell_bits
        bits = max(bits, xb.weight_storage_bits)  # storage precision: a narrower value leaves upper slices zero
        if xb.weight_encoding == "offset":
            return -(-bits // c)
        return -(-(bits - 1) // c) + (1 if xb.weight_encoding == "twos" else 0)

    @property
    def weight_encoding_options(self) -> list[str]:
        """Weight encodings the compiler may choose: the default first, then ``weight_encodings``."""
        xb = self.crossbar
        return list(dict.fromkeys([xb.weight_encoding, *xb.weight_encodings]))

    @property
    def input_encoding_options(self) -> list[str]:
        """Encodings of signed inputs the compiler may choose: the default first, then ``input_encodings``."""
        xb = self.crossbar
        return list(dict.fromkeys([xb.input_encoding, *xb.input_encodings]))

    def cols_per_weight(self, bits: int) -> int:
        """Physical bitlines one logical weight column of ``bits``-bit weights occupies."""
        diff = 2 if self.crossbar.weight_encoding == "differential" else 1
        return self.weight_slices(bits) * diff

    def logical_cols(self, bits: int) -> int:
        """Weight-matrix columns one crossbar holds at ``bits``-bit weights."""
        return max(1, self.crossbar.cols // self.cols_per_weight(bits))

    def activation_bits(self, bits: int) -> int:
        """Bits an activation quantised to ``bits`` occupies in buffers and on links and is applied with
        (bit-serial input steps): at least ``crossbar.input_storage_bits``.  The values stay ``bits`` wide."""
        return max(int(bits), self.crossbar.input_storage_bits)

    def input_steps(self, bits: int) -> int:
        """Bit-serial input steps per MVM of ``bits``-bit inputs."""
        return -(-bits // self.crossbar.dac_bits)

    def mapped(self, rows: int | None = None, weight_encoding: str | None = None,
               input_encoding: str | None = None) -> "CIMHardware":
        """The chip as a layer mapped with these choices sees it (None: the chip's default).

        ``rows``: wordlines driven per read step (:meth:`driving`);
        ``weight_encoding`` / ``input_encoding``: one of the encodings the file
        allows (``weight_encodings``, ``input_encodings``).  Every cost
        primitive and the device model follow from the returned description.
        """
        xb = self.crossbar
        changes = {}
        if weight_encoding is not None and weight_encoding != xb.weight_encoding:
            if weight_encoding not in self.weight_encoding_options:
                raise ValueError(f"{self.name}: weight encoding '{weight_encoding}' is not allowed "
                                 f"(crossbar.weight_encodings: {self.weight_encoding_options})")
            changes["weight_encoding"] = weight_encoding
        if input_encoding is not None and input_encoding != xb.input_encoding:
            if input_encoding not in self.input_encoding_options:
                raise ValueError(f"{self.name}: input encoding '{input_encoding}' is not allowed "
                                 f"(crossbar.input_encodings: {self.input_encoding_options})")
            changes["input_encoding"] = input_encoding
        hw = self
        if changes:
            key_ = tuple(sorted(changes.items()))
            hw = _VIEWS.get((id(self), key_))
            if hw is None or hw[0] is not self:
                hw = (self, dataclasses.replace(self, crossbar=dataclasses.replace(xb, **changes)))
                _VIEWS[(id(self), key_)] = hw
            hw = hw[1]
        return hw.driving(rows)

    def driving(self, rows: int | None) -> "CIMHardware":
        """The chip as a region that drives at most ``rows`` wordlines per read step sees it.

        Driving fewer rows than ``crossbar.rows_active`` (the others get zero
        input) is a per-layer mapping decision: a read then takes more row
        groups, and every cost primitive follows from ``rows_active``.
        """
        if rows is None or rows >= self.crossbar.rows_active:
            return self
        return dataclasses.replace(self, crossbar=dataclasses.replace(self.crossbar, rows_active=int(rows)))

    @property
    def memory_capacity_bytes(self) -> int:
        """Bytes one dual-mode array holds in memory mode."""
        kb = self.dual_mode.memory_capacity_kb
        if kb > 0:
            return int(kb * 1024)
        xb = self.crossbar
        return xb.rows * xb.cols * xb.cell_bits // 8

    def op(self, name: str) -> OpCost:
        """Cost of a digital operation, defaulting to one cycle and no energy."""
        return self.ops.get(name, _UNIT_OP)


_UNIT_OP = OpCost(latency_cycles=1.0, energy_pj=0.0)
_VIEWS: dict = {}  # (id(chip), changes) -> (chip, view): views are reused (estimates memoise on them)

# Keys a CIM file may set that the compiler and simulator do not read, and why.
NOT_MODELLED: dict[str, str] = {
    "chip.noc.topology": "every core reaches the global buffer over its own link; hop counts are not modelled",
    "chip.noc.hop_latency_cycles": "transfers are bandwidth-bound (link_bandwidth_bits); per-hop latency is not added",
    "chip.global_buffer.double_buffer": "the timeline overlaps loads with compute wherever dependencies allow",
    "core.local_buffer.double_buffer": "the timeline overlaps loads with compute wherever dependencies allow",
    "core.local_buffer.capacity_kb": "chunks are sized by the pipeline granularity, not by the local buffer "
                                     "(only PIMCOMP's low-latency heap, Options.local_memory, is bounded by it)",
    "core.input_register_bits": "L0 registers are folded into the crossbar read step",
    "core.output_register_bits": "L0 registers are folded into the crossbar read step",
    "crossbar.device.endurance_writes": "wear is not modelled",
    "ops.relu": "activations run on the host (Relax), not in CIM programs",
    "ops.pool": "pooling runs on the host (Relax), not in CIM programs",
    "ops.sigmoid": "activations run on the host (Relax), not in CIM programs",
    "ops.dmov": "data movement is costed by buffer and link bandwidths",
    "ops.im2col": "im2col is the gather pattern of the scatter into the crossbar input registers: data movement, "
                  "costed by the link bandwidth (CIM-MLC, PUMA)",
}

"""Hardware description schema for CIM crossbar chips and bank-level PIM DRAM.

The schema is the single data model that every compiler pass, solver and
simulator in this project reads.  It covers what the five reference papers
need:

* CIM-MLC (three tiers chip / core / crossbar, computing mode core / crossbar /
  wordline, rows active at once, per-operation latency and energy);
* CMSwitch (dual-mode arrays: how many can switch, memory-mode bandwidth and
  switch latency in each direction);
* PIMCOMP (cores, crossbars per core, local/global memory bandwidth, links);
* MIREDO (buffer levels with capacity, bandwidth and double buffering);
* DCC (bank PIM: system / group / core levels, banks per core, SIMD width,
  registers, DRAM timing, host bus, command set and a host GPU roofline).

Descriptions are written as TOML files (see ``targets/``) and validated
field by field by :mod:`tvm_cim.hardware.loader`; every dataclass field below
is a key of the file.  Field metadata ``doc`` says what the key means and
``unit`` its unit; :func:`describe_schema` prints them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal


def _f(default=dataclasses.MISSING, doc: str = "", unit: str = "", factory=None):
    """Declare a schema field with documentation metadata."""
    meta = {"doc": doc, "unit": unit}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    if default is dataclasses.MISSING:
        return field(metadata=meta)
    return field(default=default, metadata=meta)


# --------------------------------------------------------------------------- common
@dataclass(frozen=True, kw_only=True)
class Meta:
    """Identity and provenance of a hardware description."""

    name: str = _f(doc="short preset name used in target strings, e.g. 'prime'")
    kind: Literal["cim", "pim"] = _f(doc="'cim' for crossbar chips, 'pim' for bank-level PIM DRAM")
    description: str = _f("", doc="one-line human description")
    sources: list[str] = _f(factory=list, doc="publications / code the figures come from")
    assumptions: list[str] = _f(factory=list, doc="figures that are assumptions, and why")


@dataclass(frozen=True, kw_only=True)
class Buffer:
    """An on-chip buffer level (MIREDO memory level / CIM-MLC L0-L2)."""

    capacity_kb: float = _f(doc="capacity", unit="KiB")
    bandwidth_bits: int = _f(doc="bits transferred per cycle per port", unit="bit/cycle")
    double_buffer: bool = _f(False, doc="whether the buffer can double-buffer (ping-pong)")
    read_energy_pj_per_bit: float = _f(0.0, doc="dynamic read energy", unit="pJ/bit")
    write_energy_pj_per_bit: float = _f(0.0, doc="dynamic write energy", unit="pJ/bit")
    leakage_mw: float = _f(0.0, doc="static power", unit="mW")


@dataclass(frozen=True, kw_only=True)
class Alu:
    """A vector / scalar ALU used for shift-and-add, activation, pooling, etc."""

    ops_per_cycle: int = _f(doc="element operations per cycle")
    energy_pj_per_op: float = _f(0.0, doc="dynamic energy per element operation", unit="pJ")
    leakage_mw: float = _f(0.0, doc="static power", unit="mW")


@dataclass(frozen=True, kw_only=True)
class Noc:
    """On-chip network between cores."""

    topology: Literal["mesh", "bus", "crossbar", "ring"] = _f("mesh", doc="interconnect topology")
    link_bandwidth_bits: int = _f(256, doc="bits per cycle per link", unit="bit/cycle")
    hop_latency_cycles: int = _f(1, doc="router + link latency per hop", unit="cycle")
    energy_pj_per_bit_hop: float = _f(0.0, doc="energy per bit per hop", unit="pJ/bit")


# --------------------------------------------------------------------------- CIM
# Digital operations whose per-element cost a CIM description may set in [ops].
CIM_OPS = ("add", "colsum", "dmov", "im2col", "mul", "pool", "quantize", "relu", "shift_add", "sigmoid")

@dataclass(frozen=True, kw_only=True)
class Device:
    """The memory cell technology of the crossbars."""

    type: Literal["reram", "pcm", "sram", "edram", "mram", "flash"] = _f(doc="cell technology")
    read_latency_ns: float = _f(doc="one analogue crossbar read (MVM step, one input bit slice)", unit="ns")
    write_latency_ns: float = _f(doc="programming one crossbar row", unit="ns")
    read_energy_pj: float = _f(doc="energy of one crossbar read (whole array, one input slice)", unit="pJ")
    write_energy_pj_per_cell: float = _f(doc="programming energy per cell", unit="pJ")
    endurance_writes: float = _f(0.0, doc="write endurance (0 = unlimited / not modelled)")


@dataclass(frozen=True, kw_only=True)
class Crossbar:
    """The crossbar (array / macro) tier."""

    rows: int = _f(doc="wordlines")
    cols: int = _f(doc="bitlines")
    rows_active: int = _f(doc="wordlines that may be activated at once (parallel rows)")
    cell_bits: int = _f(doc="bits stored per cell")
    dac_bits: int = _f(doc="input bits applied per read step (bit-serial input)")
    adc_bits: int = _f(doc="ADC resolution")
    adc_mode: Literal["clip", "scale"] = _f(
        "clip",
        doc="'clip': ADC LSB is one unit and larger sums saturate; "
        "'scale': the LSB is the smallest power of two that covers the largest possible sum",
    )
    adcs: int = _f(1, doc="ADCs per crossbar, shared by the columns")
    adc_latency_ns: float = _f(1.0, doc="one conversion", unit="ns")
    adc_energy_pj: float = _f(0.0, doc="one conversion", unit="pJ")
    dac_energy_pj: float = _f(0.0, doc="driving one row for one input slice", unit="pJ")
    weight_bits: int = _f(8, doc="weight precision the chip supports")
    input_bits: int = _f(8, doc="activation precision the chip supports")
    weight_encoding: Literal["differential", "offset"] = _f(
        "differential",
        doc="signed weights as positive/negative column pairs ('differential') "
        "or with a +2^(b-1) offset removed digitally ('offset')",
    )
    device: Device = _f(doc="cell technology")


@dataclass(frozen=True, kw_only=True)
class Core:
    """The core (tile / PE) tier."""

    crossbars: int = _f(doc="crossbars per core")
    local_buffer: Buffer = _f(doc="core-local input/output buffer (L1)")
    alu: Alu = _f(doc="core vector unit (shift-and-add, activations)")
    input_register_bits: int = _f(0, doc="per-crossbar input register (L0); 0 = not modelled", unit="bit")
    output_register_bits: int = _f(0, doc="per-crossbar output register (L0); 0 = not modelled", unit="bit")


@dataclass(frozen=True, kw_only=True)
class DualMode:
    """CMSwitch dual-mode arrays that can serve as memory instead of computing."""

    switchable_arrays: int = _f(0, doc="crossbars that can switch between compute and memory mode")
    memory_bandwidth_bits: int = _f(0, doc="bits per cycle an array delivers in memory mode", unit="bit/cycle")
    to_memory_cycles: int = _f(0, doc="latency of switching compute -> memory (TOM)", unit="cycle")
    to_compute_cycles: int = _f(0, doc="latency of switching memory -> compute (TOC)", unit="cycle")


@dataclass(frozen=True, kw_only=True)
class OpCost:
    """Latency and energy of one meta-operator instance."""

    latency_cycles: float = _f(doc="latency", unit="cycle")
    energy_pj: float = _f(0.0, doc="dynamic energy", unit="pJ")


@dataclass(frozen=True, kw_only=True)
class Chip:
    """The chip tier."""

    cores: int = _f(doc="cores on the chip")
    frequency_mhz: float = _f(doc="digital clock", unit="MHz")
    computing_mode: Literal["core", "crossbar", "wordline"] = _f(
        doc="finest unit the compiler controls (CIM-MLC sec. 3.3): core (CM), crossbar (XBM), wordline (WLM)"
    )
    global_buffer: Buffer = _f(doc="chip-level buffer (L2)")
    noc: Noc = _f(factory=Noc, doc="core interconnect")
    alu: Alu = _f(doc="chip-level ALU")
    offchip_bandwidth_bits: int = _f(64, doc="off-chip interface width per cycle", unit="bit/cycle")
    offchip_energy_pj_per_bit: float = _f(0.0, doc="off-chip access energy", unit="pJ/bit")
    leakage_mw: float = _f(0.0, doc="static power of everything not listed elsewhere", unit="mW")


@dataclass(frozen=True, kw_only=True)
class CIMHardware:
    """A computing-in-memory crossbar chip (CIM-MLC three-tier abstraction)."""

    meta: Meta
    chip: Chip
    core: Core
    crossbar: Crossbar
    dual_mode: DualMode = _f(factory=DualMode, doc="CMSwitch dual-mode arrays")
    ops: dict[str, OpCost] = _f(
        factory=dict,
        doc="per-element latency/energy of digital meta-operators; keys: " + ", ".join(CIM_OPS),
    )
    source_path: str = field(default="", compare=False)

    # ----------------------------------------------------------------- derived
    @property
    def name(self) -> str:
        return self.meta.name

    @property
    def total_crossbars(self) -> int:
        """Crossbars on the whole chip."""
        return self.chip.cores * self.core.crossbars

    @property
    def cycle_ns(self) -> float:
        """Length of one digital clock cycle in nanoseconds."""
        return 1e3 / self.chip.frequency_mhz

    def weight_slices(self, bits: int) -> int:
        """Cells that hold the magnitude bits of one ``bits``-bit weight (bit slicing)."""
        xb = self.crossbar
        mag = bits - 1 if xb.weight_encoding == "differential" else bits
        return -(-mag // xb.cell_bits)

    def cols_per_weight(self, bits: int) -> int:
        """Physical bitlines one logical weight column of ``bits``-bit weights occupies."""
        diff = 2 if self.crossbar.weight_encoding == "differential" else 1
        return self.weight_slices(bits) * diff

    def logical_cols(self, bits: int) -> int:
        """Weight-matrix columns one crossbar holds at ``bits``-bit weights."""
        return max(1, self.crossbar.cols // self.cols_per_weight(bits))

    def input_steps(self, bits: int) -> int:
        """Bit-serial input steps per MVM of ``bits``-bit inputs."""
        return -(-bits // self.crossbar.dac_bits)

    def op(self, name: str) -> OpCost:
        """Cost of a digital operation, defaulting to one cycle and no energy."""
        return self.ops.get(name, OpCost(latency_cycles=1.0, energy_pj=0.0))


# --------------------------------------------------------------------------- PIM
@dataclass(frozen=True, kw_only=True)
class HostModel:
    """Roofline model of the host processor (DCC's GPU baseline)."""

    name: str = _f(doc="host device, e.g. 'A100-80GB'")
    bandwidth_gbs: float = _f(doc="memory bandwidth", unit="GB/s")
    tflops_fp16: float = _f(doc="peak FP16 throughput", unit="TFLOP/s")
    launch_overhead_us: float = _f(0.0, doc="fixed cost per kernel", unit="us")


@dataclass(frozen=True, kw_only=True)
class DramTiming:
    """DRAM timing parameters in memory-clock cycles (tCK)."""

    tck_ns: float = _f(doc="memory clock period", unit="ns")
    trcd: int = _f(doc="ACT to column command", unit="tCK")
    trp: int = _f(doc="precharge", unit="tCK")
    tras: int = _f(doc="ACT to precharge", unit="tCK")
    trc: int = _f(doc="ACT to ACT, same bank", unit="tCK")
    tccd_s: int = _f(doc="column to column, different bank group", unit="tCK")
    tccd_l: int = _f(doc="column to column, same bank group", unit="tCK")
    trrd: int = _f(4, doc="ACT to ACT, different bank", unit="tCK")
    tfaw: int = _f(16, doc="four-activation window", unit="tCK")
    tcl: int = _f(14, doc="read latency", unit="tCK")
    twr: int = _f(12, doc="write recovery", unit="tCK")


# What a PIM command does, as the bank-PIM code generator and simulator
# (tvm_pim) understand it.  A device file tags every command with its roles, so
# a new device that fits the abstraction needs only a new file.
PIM_ROLES = (
    "act",  # open a row (scope group: all banks of every core of the group)
    "pre",  # precharge (close the open row)
    "host_read",  # host reads columns (from banks, or from the group buffer)
    "host_write",  # host writes columns into banks
    "reg_write",  # host writes columns into core input registers (GRF / GEMV buffer)
    "mac",  # lanewise multiply-accumulate: acc += bank * reg (one column per command)
    "dot",  # dot product through an adder tree: scalar acc += sum(bank * reg)
    "acc_add",  # lanewise accumulate: acc += bank
    "load",  # reg <- bank (optionally with ReLU, see PimCommand.relu)
    "add",  # reg <- bank + reg
    "mul",  # reg <- bank * reg
    "store",  # bank <- reg or accumulator (optionally with ReLU)
    "to_group",  # core accumulators -> the group's buffer
    "group_softmax",  # the group's softmax unit over its buffer
    "from_group",  # group buffer -> core input registers
    "mode",  # mode change (e.g. HBM-PIM SB / AB / AB-PIM)
    "control",  # NOP, JUMP, EXIT, BARRIER, configuration
    "refresh",
    "other",
)
PimRole = Literal[PIM_ROLES]  # type: ignore[valid-type]


@dataclass(frozen=True, kw_only=True)
class PimCommand:
    """One command of the device's PIM command set."""

    latency_cycles: int = _f(doc="issue-to-issue latency", unit="tCK")
    energy_pj: float = _f(0.0, doc="dynamic energy", unit="pJ")
    description: str = _f("", doc="what it does")
    roles: list[PimRole] = _f(factory=list, doc="what the command does for the code generator; each one of " + ", ".join(PIM_ROLES))
    scope: Literal["group", "bank", "bank_group", "host"] = _f(
        "group",
        doc="who one issue addresses: every core of a PIM group (broadcast), one core's bank(s), "
        "the same bank of every bank group, or the host side only",
    )
    relu: bool = _f(False, doc="whether the command can apply ReLU to the value it moves")


@dataclass(frozen=True, kw_only=True)
class PimSystem:
    """System level: stacks / channels and the host link."""

    stacks: int = _f(doc="PIM-enabled DRAM stacks (cubes / HBMs)")
    channels_per_stack: int = _f(doc="(pseudo-)channels per stack")
    host_bus_bandwidth_gbs: float = _f(doc="host <-> PIM memory bandwidth per stack", unit="GB/s")
    host: HostModel = _f(doc="host processor roofline")
    onchip_staging_kb: float = _f(0.0, doc="host on-chip memory used to stage rearranged data", unit="KiB")


@dataclass(frozen=True, kw_only=True)
class PimGroup:
    """PIM group level (DCC): the unit a broadcast command addresses."""

    level: Literal["channel", "pseudo_channel", "rank", "bank_group"] = _f(doc="DRAM level of a PIM group")
    bank_groups: int = _f(doc="bank groups per PIM group")
    banks_per_bank_group: int = _f(doc="banks per bank group")
    broadcast: bool = _f(True, doc="whether one command can address every core of the group")
    softmax_unit: bool = _f(False, doc="whether the group has a softmax / reduction unit (AttAcc)")
    accumulator: bool = _f(
        False, doc="whether results moved into the group buffer can be summed across its cores (AttAcc's accumulator)"
    )


@dataclass(frozen=True, kw_only=True)
class PimCore:
    """PIM core level (DCC): one processing unit beside its banks."""

    banks_per_core: int = _f(doc="banks a PIM unit serves")
    simd_lanes: int = _f(doc="FP16 lanes per unit")
    frequency_mhz: float = _f(doc="unit clock", unit="MHz")
    grf_entries: int = _f(doc="general registers (vector, register_bits wide)")
    srf_entries: int = _f(0, doc="scalar registers")
    register_bits: int = _f(256, doc="width of one vector register", unit="bit")
    crf_entries: int = _f(0, doc="command (instruction) register file entries")
    acc_entries: int = _f(0, doc="accumulator registers (register_bits wide); 0 = the device cannot accumulate")
    acc_in_grf: bool = _f(
        False, doc="whether the accumulators are part of grf_entries (HBM-PIM GRF_B); otherwise they are extra"
    )
    dtype: Literal["float16", "bfloat16", "int8"] = _f("float16", doc="arithmetic type")


@dataclass(frozen=True, kw_only=True)
class PimDram:
    """DRAM organisation and timing."""

    row_bytes: int = _f(doc="row (page) size per bank", unit="B")
    column_bytes: int = _f(doc="bytes per column access (burst)", unit="B")
    rows_per_bank: int = _f(doc="rows per bank")
    timing: DramTiming = _f(doc="DRAM timing")
    act_energy_pj: float = _f(0.0, doc="energy of one ACT+PRE pair", unit="pJ")
    column_energy_pj: float = _f(0.0, doc="energy of one column read/write", unit="pJ")


@dataclass(frozen=True, kw_only=True)
class PIMHardware:
    """A bank-level processing-in-memory device (DCC multi-layer abstraction)."""

    meta: Meta
    system: PimSystem
    group: PimGroup
    core: PimCore
    dram: PimDram
    commands: dict[str, PimCommand] = _f(factory=dict, doc="the device's PIM command set")
    source_path: str = field(default="", compare=False)

    @property
    def name(self) -> str:
        return self.meta.name

    @property
    def banks_per_group(self) -> int:
        return self.group.bank_groups * self.group.banks_per_bank_group

    @property
    def cores_per_group(self) -> int:
        return self.banks_per_group // self.core.banks_per_core

    @property
    def groups(self) -> int:
        """PIM groups in the whole system (one per channel of every stack)."""
        return self.system.stacks * self.system.channels_per_stack


HardwareDescription = CIMHardware | PIMHardware

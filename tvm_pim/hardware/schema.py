"""Schema of bank-level PIM DRAM devices (DCC's multi-layer abstraction, paper 002).

System (stacks, channels, host link, host roofline) / PIM group (the unit a
broadcast command addresses) / PIM core (the unit beside its banks), the DRAM
organisation and timing, and the device's command set with the roles the code
generator and simulator understand.  Validated by
:func:`tvm_cim.common.hardware.load` like every hardware file;
:data:`NOT_MODELLED` lists the keys the model does not read, and why.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from tvm_cim.common.schema import (
    Count,
    DescriptionRoot,
    Flag,
    Meta,
    NonNegFloat,
    PositiveFloat,
    PositiveInt,
    Text,
    hw_dataclass,
    key,
)


@hw_dataclass
class HostModel:
    """Roofline model of the host processor (DCC's GPU baseline)."""

    name: Text = key(doc="host device, e.g. 'A100-80GB'")
    bandwidth_gbs: PositiveFloat = key(doc="memory bandwidth", unit="GB/s")
    tflops_fp16: PositiveFloat = key(doc="peak FP16 throughput", unit="TFLOP/s")
    launch_overhead_us: NonNegFloat = key(0.0, doc="fixed cost per kernel", unit="us")
    bandwidth_utilisation: PositiveFloat = key(
        1.0, doc="share of bandwidth_gbs a memory-bound kernel reaches (derating; 1 = the datasheet roof)"
    )
    compute_utilisation: PositiveFloat = key(
        1.0, doc="share of tflops_fp16 a compute-bound kernel reaches (derating; 1 = the datasheet roof)"
    )


@hw_dataclass
class DramTiming:
    """DRAM timing parameters in memory-clock cycles (tCK)."""

    tck_ns: PositiveFloat = key(doc="memory clock period", unit="ns")
    trcd: Count = key(doc="ACT to column command", unit="tCK")
    trp: Count = key(doc="precharge", unit="tCK")
    tras: Count = key(doc="ACT to precharge", unit="tCK")
    trc: Count = key(doc="ACT to ACT, same bank", unit="tCK")
    tccd_s: Count = key(doc="column to column, different bank group", unit="tCK")
    tccd_l: Count = key(doc="column to column, same bank group", unit="tCK")
    trrd: Count = key(4, doc="ACT to ACT, different bank", unit="tCK")
    tfaw: Count = key(16, doc="four-activation window", unit="tCK")
    tcl: Count = key(14, doc="read latency", unit="tCK")
    twr: Count = key(12, doc="write recovery", unit="tCK")
    tbl: Count = key(2, doc="burst length: time one column occupies a pseudo-channel's data bus (nBL)", unit="tCK")
    tccd_ab: Count = key(
        0, doc="minimum spacing of consecutive group-scope (all-bank) compute commands, e.g. AttAcc's power "
        "constraint (nCCDAB); 0 = only the command's own latency", unit="tCK"
    )
    tccd_sb: Count = key(
        0, doc="minimum spacing of consecutive bank_group-scope (same-bank) compute commands (nCCDSB); "
        "0 = only the command's own latency", unit="tCK"
    )
    trtp: Count = key(
        0, doc="column read (or bank-reading compute command) to precharge of the same row: the precharge "
        "waits this long after the row's last such command (nRTPL; 0 = no rule beyond the issue spacing)",
        unit="tCK",
    )
    twtr: Count = key(
        0, doc="write-to-read turnaround of a rank: a column write (host write, input-register write, or a "
        "bank-writing PIM command) to the next column read (host read, or a bank-reading PIM command), "
        "WL + BL/2 + tWTR; on devices whose PIM commands are triggered by column reads and writes (HBM-PIM); "
        "0 = not modelled", unit="tCK",
    )
    trtw: Count = key(
        0, doc="read-to-write turnaround of a rank (RL + BL/2 + tRTRS - WL), the reverse of twtr; 0 = not "
        "modelled", unit="tCK",
    )
    trefi: Count = key(
        0, doc="all-bank refresh interval: every trefi cycles a refresh blocks the group's banks (0 = refresh "
        "not modelled)", unit="tCK"
    )
    trfc: Count = key(0, doc="all-bank refresh cycle time (the banks are blocked this long per refresh)", unit="tCK")


# What a PIM command does, as the bank-PIM code generator and simulator
# understand it.  A device file tags every command with its roles, so a new
# device that fits the abstraction needs only a new file.
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


@hw_dataclass
class PimCommand:
    """One command of the device's PIM command set."""

    latency_cycles: Count = key(doc="issue-to-issue latency", unit="tCK")
    energy_pj: NonNegFloat = key(0.0, doc="dynamic energy", unit="pJ")
    description: Text = key("", doc="what it does")
    roles: list[PimRole] = key(factory=list, doc="what the command does for the code generator; each one of "
                               + ", ".join(PIM_ROLES))
    scope: Literal["group", "bank", "bank_group", "host"] = key(
        "group",
        doc="who one issue addresses: every core of a PIM group (broadcast), one core's bank(s), "
        "the same bank of every bank group, or the host side only",
    )
    relu: Flag = key(False, doc="whether the command can apply ReLU to the value it moves")


@hw_dataclass
class PimSystem:
    """System level: stacks / channels and the host link."""

    stacks: PositiveInt = key(doc="PIM-enabled DRAM stacks (cubes / HBMs)")
    channels_per_stack: PositiveInt = key(doc="(pseudo-)channels per stack")
    host_bus_bandwidth_gbs: PositiveFloat = key(doc="host <-> PIM memory bandwidth per stack", unit="GB/s")
    host: HostModel = key(doc="host processor roofline (the GPU the compiler offloads from)")
    baselines: dict[str, HostModel] = key(
        factory=dict, doc="further GPU rooflines that benchmarks report speedups against (e.g. the paper's platform); "
        "not used for compiling"
    )
    onchip_staging_kb: NonNegFloat = key(
        0.0, doc="host on-chip memory used to stage rearranged data (0: no staging, rearrangement is serial)", unit="KiB"
    )


@hw_dataclass
class PimGroup:
    """PIM group level (DCC): the unit a broadcast command addresses."""

    level: Literal["channel", "pseudo_channel", "rank", "bank_group"] = key(doc="DRAM level of a PIM group")
    bank_groups: PositiveInt = key(doc="bank groups per PIM group")
    banks_per_bank_group: PositiveInt = key(doc="banks per bank group")
    broadcast: Flag = key(True, doc="whether one command can address every core of the group")
    softmax_unit: Flag = key(False, doc="whether the group has a softmax / reduction unit (AttAcc)")
    accumulator: Flag = key(
        False, doc="whether results moved into the group buffer can be summed across its cores (AttAcc's accumulator)"
    )
    pseudo_channels: PositiveInt = key(
        1, doc="pseudo-channels in a group, each with its own data bus; the bank groups are split evenly "
        "among them (in order)"
    )
    ranks_per_pseudo_channel: PositiveInt = key(
        1, doc="ranks (stack IDs) per pseudo-channel; each has its own tRRD / tFAW activation window"
    )


@hw_dataclass
class PimCore:
    """PIM core level (DCC): one processing unit beside its banks."""

    banks_per_core: PositiveInt = key(doc="banks a PIM unit serves")
    simd_lanes: PositiveInt = key(doc="FP16 lanes per unit")
    frequency_mhz: PositiveFloat = key(doc="unit clock", unit="MHz")
    grf_entries: PositiveInt = key(doc="general registers (vector, register_bits wide)")
    srf_entries: Count = key(0, doc="scalar registers")
    register_bits: PositiveInt = key(256, doc="width of one vector register", unit="bit")
    crf_entries: Count = key(0, doc="command (instruction) register file entries")
    acc_entries: Count = key(0, doc="accumulator registers (register_bits wide); 0 = the device cannot accumulate")
    acc_in_grf: Flag = key(
        False, doc="whether the accumulators are part of grf_entries (HBM-PIM GRF_B); otherwise they are extra"
    )
    dtype: Literal["float16", "bfloat16", "int8"] = key("float16", doc="arithmetic type")


@hw_dataclass
class PimDram:
    """DRAM organisation and timing."""

    row_bytes: PositiveInt = key(doc="row (page) size per bank", unit="B")
    column_bytes: PositiveInt = key(doc="bytes per column access (burst)", unit="B")
    rows_per_bank: PositiveInt = key(doc="rows per bank")
    timing: DramTiming = key(doc="DRAM timing")
    act_energy_pj: NonNegFloat = key(0.0, doc="energy of one ACT+PRE pair", unit="pJ")
    column_energy_pj: NonNegFloat = key(0.0, doc="energy of one column read/write", unit="pJ")


@hw_dataclass
class PIMHardware(DescriptionRoot):
    """A bank-level processing-in-memory device (DCC multi-layer abstraction)."""

    meta: Meta
    system: PimSystem
    group: PimGroup
    core: PimCore
    dram: PimDram
    commands: dict[str, PimCommand] = key(factory=dict, doc="the device's PIM command set")
    source_path: str = dataclasses.field(default="", compare=False)

    def problems(self) -> list[tuple[str, str, object]]:
        """Values that are valid alone but not together: ``(key, expected, got)``."""
        banks = self.group.bank_groups * self.group.banks_per_bank_group
        if banks % self.core.banks_per_core:
            return [("core.banks_per_core", f"a divisor of the banks per group ({banks})", self.core.banks_per_core)]
        domains = self.group.pseudo_channels * self.group.ranks_per_pseudo_channel
        if self.group.bank_groups % domains:
            return [("group.bank_groups", f"a multiple of pseudo_channels x ranks_per_pseudo_channel ({domains})",
                     self.group.bank_groups)]
        # the unit consumes one column per tCCD_L (its bank group's column cadence): its clock must say so
        unit_mhz = 1e3 / (self.dram.timing.tccd_l * self.dram.timing.tck_ns)
        if abs(self.core.frequency_mhz / unit_mhz - 1.0) > 0.01:
            return [("core.frequency_mhz", f"1 / (tccd_l x tck_ns) = {unit_mhz:.1f} MHz within 1% (one column per "
                     "tCCD_L)", self.core.frequency_mhz)]
        t = self.dram.timing
        if t.trefi and t.trefi <= t.trfc + t.trp + t.trcd:
            return [("dram.timing.trefi", f"0 (no refresh) or more than trfc + trp + trcd = {t.trfc + t.trp + t.trcd}",
                     t.trefi)]
        return []

    @property
    def banks_per_group(self) -> int:
        """Banks a broadcast command reaches in one PIM group."""
        return self.group.bank_groups * self.group.banks_per_bank_group

    @property
    def cores_per_group(self) -> int:
        """PIM cores (near-bank units) in one group."""
        return self.banks_per_group // self.core.banks_per_core

    @property
    def groups(self) -> int:
        """PIM groups in the whole system (one per channel of every stack)."""
        return self.system.stacks * self.system.channels_per_stack


# Keys a PIM file may set that the model does not read, and why.
NOT_MODELLED: dict[str, str] = {
    "dram.timing.tcl": "read latency is hidden behind the column-command pipeline",
    "dram.timing.trc": "row cycles are charged as tRAS + tRP",
    "dram.act_energy_pj": "energy is charged per command from the command set",
    "dram.column_energy_pj": "energy is charged per command from the command set",
    "group.banks_per_bank_group": "only the banks per group (bank_groups x banks_per_bank_group) and the bank-group "
                                  "count are used",
    "core.srf_entries": "scalar registers are not used by the generated kernels",
    "core.crf_entries": "command buffers are not modelled: the host issues every command",
    "core.register_bits": "register width is taken as simd_lanes x 16 bits (FP16)",
}

"""The multi-layer PIM abstraction (system / PIM group / PIM core) of a device.

DCC (paper 002, sec. IV-A) describes every near-bank PIM device with three
levels: the *system* (host xPU, host memory space, PIM devices), the *PIM
group* (cores sharing a channel / rank, addressed together by broadcast
commands, possibly with a group unit such as AttAcc's softmax) and the *PIM
core* (a processing unit beside one or a few banks).  :class:`PimView`
derives that view from a validated :class:`~tvm_pim.hardware.schema.PIMHardware`
description, so the compiler and the simulator never read device-specific
constants: a new device that fits the abstraction needs only a new hardware
file.

Also here: the element size of PIM data (FP16), the error raised when a
device's command set cannot run a kernel, and the integer helpers the layers
above use to count columns, rows and registers.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from tvm_cim.common.hardware import digest

from .schema import HostModel, PimCommand, PIMHardware

ELEM_BYTES = 2  # FP16 everywhere on the PIM side


class UnsupportedOnDevice(ValueError):
    """The device's command set cannot run a kernel (e.g. ReLU on AttAcc)."""


@dataclass(frozen=True)
class PimView:
    """System / group / core view of a PIM device.

    Parameters
    ----------
    hw : PIMHardware
        A validated description (``tvm_pim.load('hbm-pim')``).
    """

    hw: PIMHardware

    # ------------------------------------------------------------------ system level
    @property
    def name(self) -> str:
        return self.hw.meta.name

    @cached_property
    def digest(self) -> str:
        """Short hash of the whole description (:func:`tvm_cim.common.hardware.digest`); keys caches."""
        return digest(self.hw)

    @property
    def groups(self) -> int:
        """PIM groups in the system (every stack's channels / pseudo-channels)."""
        return self.hw.system.stacks * self.hw.system.channels_per_stack

    @property
    def tck_ns(self) -> float:
        return self.hw.dram.timing.tck_ns

    @property
    def channel_bw_gbs(self) -> float:
        """Host-bus bandwidth of one PIM group (its channel), GB/s."""
        return self.hw.system.host_bus_bandwidth_gbs / self.hw.system.channels_per_stack

    @property
    def host_bw_gbs(self) -> float:
        """Bandwidth at which the host moves data to and from PIM memory, GB/s.

        The PIM stacks are the host's memory, so neither the host's own memory
        interface nor the stacks' buses can be exceeded.
        """
        return self.host_bandwidth(self.hw.system.host)

    def host_bandwidth(self, host: HostModel) -> float:
        """Effective memory bandwidth of a host roofline reading the PIM stacks, GB/s.

        ``min(host bandwidth, stacks x host link) x host.bandwidth_utilisation``.

        Parameters
        ----------
        host : HostModel
            ``hw.system.host`` or one of ``hw.system.baselines``.
        """
        s = self.hw.system
        return min(host.bandwidth_gbs, s.stacks * s.host_bus_bandwidth_gbs) * host.bandwidth_utilisation

    @property
    def hosts(self) -> dict[str, HostModel]:
        """Every GPU roofline of the description: ``'host'`` (the compiler's) and the named baselines."""
        return {"host": self.hw.system.host, **self.hw.system.baselines}

    # ------------------------------------------------------------------ group level
    @property
    def bank_groups(self) -> int:
        return self.hw.group.bank_groups

    @property
    def cores_per_group(self) -> int:
        return self.hw.cores_per_group

    @property
    def cores_per_bank_group(self) -> int:
        return max(1, self.cores_per_group // self.bank_groups)

    @property
    def group_unit(self) -> bool:
        """Whether each group has a softmax/accumulator unit (AttAcc)."""
        return self.hw.group.softmax_unit

    # ------------------------------------------------------------------ core level
    @property
    def lanes(self) -> int:
        return self.hw.core.simd_lanes

    @property
    def column_bytes(self) -> int:
        return self.hw.dram.column_bytes

    @property
    def elems_per_column(self) -> int:
        return self.hw.dram.column_bytes // ELEM_BYTES

    @property
    def cols_per_row(self) -> int:
        """Columns of one bank row."""
        return self.hw.dram.row_bytes // self.hw.dram.column_bytes

    @property
    def core_row_cols(self) -> int:
        """Columns one core reaches while a row is open (all its banks)."""
        return self.cols_per_row * self.hw.core.banks_per_core

    @property
    def input_regs(self) -> int:
        """Vector registers holding inputs (GRF_A / GEMV buffer)."""
        c = self.hw.core
        return c.grf_entries - c.acc_entries if c.acc_in_grf else c.grf_entries

    @property
    def acc_regs(self) -> int:
        return self.hw.core.acc_entries

    @property
    def unit_ns(self) -> float:
        return 1e3 / self.hw.core.frequency_mhz

    # ------------------------------------------------------------------ command set
    def command(self, role: str, scope: str | None = None) -> str | None:
        """Name of the command with a role (and scope), or None.

        Parameters
        ----------
        role : str
            One of :data:`tvm_pim.hardware.schema.PIM_ROLES`.
        scope : str, optional
            Required scope (``'group'``, ``'bank'``, ...).
        """
        for name, cmd in self.hw.commands.items():
            if role in cmd.roles and (scope is None or cmd.scope == scope):
                return name
        return None

    def require(self, role: str, scope: str | None = None, why: str = "") -> str:
        """Like :meth:`command` but raises :class:`UnsupportedOnDevice`."""
        name = self.command(role, scope)
        if name is None:
            raise UnsupportedOnDevice(
                f"{self.name}: no command with role '{role}'" + (f" and scope '{scope}'" if scope else "")
                + (f" ({why})" if why else "")
            )
        return name

    def cmd(self, name: str) -> PimCommand:
        """The command called ``name`` in the device's command set."""
        return self.hw.commands[name]

    @cached_property
    def contraction(self) -> str | None:
        """How the device multiplies and accumulates: 'mac' (lanewise), 'dot' (adder tree) or None."""
        if self.command("dot", "group") or self.command("dot"):
            return "dot"
        if self.command("mac"):
            return "mac"
        return None

    def supports(self, kind: str) -> bool:
        """Whether a kernel kind can run on the device at all."""
        if kind in ("gemv", "red"):
            return self.contraction is not None and self.acc_regs > 0 and self._result_path() is not None
        if kind == "va":
            return all(self.command(r) for r in ("load", "add", "store"))
        if kind == "relu":
            return self.command("load") is not None and any(
                c.relu for c in self.hw.commands.values() if ("load" in c.roles or "store" in c.roles)
            ) and self.command("store") is not None
        if kind == "attn":
            return (
                self.group_unit
                and self.contraction == "dot"
                and all(self.command(r) for r in ("to_group", "group_softmax", "from_group"))
            )
        return False

    def _result_path(self) -> str | None:
        """Where accumulators go before the host reads them: 'bank' (store) or 'group' (to_group)."""
        if self.contraction == "mac" and self.command("store"):
            return "bank"
        if self.command("to_group"):
            return "group"
        if self.command("store"):
            return "bank"
        return None

    @property
    def result_path(self) -> str | None:
        return self._result_path()

    def describe(self) -> dict:
        """The three levels as plain data (for reports)."""
        h = self.hw
        return {
            "system": {
                "stacks": h.system.stacks,
                "groups": self.groups,
                "host": h.system.host.name,
                "host_bandwidth_gbs": h.system.host.bandwidth_gbs,
                "host_tflops_fp16": h.system.host.tflops_fp16,
                "pim_bus_gbs": h.system.stacks * h.system.host_bus_bandwidth_gbs,
            },
            "group": {
                "level": h.group.level,
                "cores": self.cores_per_group,
                "bank_groups": self.bank_groups,
                "broadcast": h.group.broadcast,
                "group_unit": self.group_unit,
            },
            "core": {
                "banks": h.core.banks_per_core,
                "lanes": self.lanes,
                "input_registers": self.input_regs,
                "accumulators": self.acc_regs,
                "contraction": self.contraction,
            },
        }


def ceil_div(a: int, b: int) -> int:
    """``ceil(a / b)`` for non-negative integers (and integer numpy arrays)."""
    return -(-a // b)


def next_pow2(n: int) -> int:
    """The smallest power of two that is at least ``n`` (1 for ``n <= 1``)."""
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()

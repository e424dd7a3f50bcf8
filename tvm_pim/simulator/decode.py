"""How the simulator reads one command: its role, and the environment of its operands.

A device file tags every command with roles (:data:`tvm_pim.hardware.schema.PIM_ROLES`);
:func:`role_of` picks the one a command plays where it has several (a command
that both writes banks and input registers is told apart by its operands).
:class:`Env` evaluates a command's operand expressions for every PIM group
and core it addresses at once (tables sliced to those units, loop variables,
``g`` and ``c``).  Both the timing model and the functional model use them.
"""

from __future__ import annotations

import numpy as np

from ..hardware.schema import PIMHardware
from ..program.expr import eval_expr
from ..program.stream import Stream


class SimulationError(RuntimeError):
    """The stream asked for something the device or the stream's declarations do not allow."""


#: roles of commands that move host data (timed on the host bus, not as column commands)
DATA_ROLES = ("host_read", "host_write", "reg_write")


def role_of(hw: PIMHardware, op: str, args: dict | None = None) -> tuple[str, ...]:
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


class LazyEnv:
    """An :class:`Env` built on first use (timing rarely needs one)."""

    def __init__(self, stream, g, cs):
        self.args = (stream, {}, g, cs)
        self.env = None

    def __call__(self, text: str):
        if self.env is None:
            self.env = Env(*self.args)
        return self.env(text)


class Env:
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

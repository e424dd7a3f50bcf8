"""A PIM command stream as data: phases, loops, commands and tensor declarations.

:class:`Stream` is what the code generator (:mod:`tvm_pim.compiler.codegen`)
builds, what the text format (:mod:`tvm_pim.program.text`) prints and parses,
and what the simulator (:mod:`tvm_pim.simulator`) executes.  A command's
operands stay text: integer expressions and tensor references
(:mod:`tvm_pim.program.expr`) evaluated per PIM group and core, and on-bank
tile layouts (:mod:`tvm_pim.program.layout`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

VERSION = 1
#: phases of a stream; ``setup`` places resident tensors once and is not part of a run's latency
PHASES = ("setup", "rearrange_in", "compute", "rearrange_out")


class StreamFormatError(ValueError):
    """A command stream that does not follow the format."""


@dataclass
class Command:
    """One command line."""

    op: str
    groups: tuple[int, ...]
    cores: tuple[int, ...] | None  # None = group-level broadcast issue ('*')
    args: dict[str, str] = field(default_factory=dict)

    def arg(self, key: str, default: str | None = None) -> str | None:
        """The text of operand ``key``, or ``default``."""
        return self.args.get(key, default)


@dataclass
class Loop:
    """``loop <var> <count>`` ... ``end``: the body repeated, ``var`` counting 0..count-1."""

    var: str
    count: int
    body: list = field(default_factory=list)


@dataclass
class Phase:
    """``phase <name> [serial] [rounds=N]``: one of :data:`PHASES` and its commands.

    ``rounds``: the phase streams its data through the host's bounded on-chip memory in
    this many double-buffered rounds (the first round's read overlaps no write).
    """

    name: str
    serial: bool = False
    body: list = field(default_factory=list)
    rounds: int = 1


@dataclass
class Tensor:
    """``tensor <name> <dtype> <shape> <role>``: a host tensor the stream reads or writes."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    role: str


@dataclass
class Stream:
    """A parsed command stream."""

    device: str
    kernel: str  # JSON of the KernelSpec
    draft: str = ""  # JSON of the Draft
    tensors: list[Tensor] = field(default_factory=list)
    groups: int = 1
    cores: int = 1
    memory: int = 0
    gbuf: int = 0
    tables: dict[str, tuple[str, np.ndarray]] = field(default_factory=dict)
    phases: list[Phase] = field(default_factory=list)

    def tensor(self, name: str) -> Tensor:
        """The declaration of tensor ``name``."""
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(name)

    def commands(self):
        """Every command (loops not expanded), with the phase name.

        Yields
        ------
        tuple of (str, Command)
        """

        def walk(items, phase):
            for it in items:
                if isinstance(it, Loop):
                    yield from walk(it.body, phase)
                else:
                    yield phase, it

        for ph in self.phases:
            yield from walk(ph.body, ph.name)

    def kernel_data(self) -> dict:
        """The ``kernel`` line as plain data (kind, sizes, residency, scale)."""
        return json.loads(self.kernel)

"""Data types of meta-operator programs: values, operations, blocks, programs and networks.

A :class:`Program` is what one offloaded region compiles to; a
:class:`Network` is what sits above the regions: the segments a model is cut
into, their order, and the operations between segments (array mode switches
``CM.switch``, write-backs of live data, transfers between cores).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union


@dataclass(frozen=True)
class Ref:
    """A reference to a named tensor of the program (``%name``)."""

    name: str

    def __str__(self) -> str:
        return f"%{self.name}"


@dataclass(frozen=True)
class Range:
    """A half-open integer range ``start:stop``."""

    start: int
    stop: int

    @property
    def size(self) -> int:
        return self.stop - self.start

    def slice(self) -> slice:
        return slice(self.start, self.stop)

    def __str__(self) -> str:
        return f"{self.start}:{self.stop}"


Value = Union[int, float, str, bool, Ref, Range, tuple]


class _once:
    """A computed attribute stored on the instance at its first use (like ``functools.cached_property``,
    without its lock: programs hold hundreds of thousands of operations)."""

    def __init__(self, f):
        self.f, self.name, self.__doc__ = f, f.__name__, f.__doc__

    def __get__(self, obj, cls=None):
        if obj is None:
            return self
        v = obj.__dict__[self.name] = self.f(obj)
        return v


@dataclass(frozen=True)
class Op:
    """One meta-operator: an opcode and keyword arguments (kept in order)."""

    opcode: str
    args: tuple[tuple[str, Value], ...] = ()

    @_once
    def _index(self) -> dict:
        """The arguments by name (built at the first look-up; names are unique: they are keywords)."""
        return dict(self.args)

    def __getitem__(self, key: str) -> Value:
        try:
            return self._index[key]
        except KeyError:
            raise KeyError(f"{self.opcode} has no argument '{key}'") from None

    def get(self, key: str, default=None):
        return self._index.get(key, default)

    @_once
    def kind(self) -> str:
        """The meta-operator name, with DCOM's and DMOV's sub-operation: ``DCOM.add`` (computed once per op)."""
        if self.opcode in ("DCOM", "DMOV"):
            for k, sub in self.args:  # not self.get: its index is a dict per operation, built only when asked
                if k == "op":
                    break
            else:
                sub = None
            if not sub:
                return self.opcode
            name = _KINDS.get((self.opcode, sub))
            if name is None:  # one string per kind, not per operation
                name = _KINDS[(self.opcode, sub)] = f"{self.opcode}.{sub}"
            return name
        return self.opcode


_new = object.__new__
_KINDS: dict = {}  # (opcode, sub-operation) -> kind name (Op.kind)


def op(opcode: str, **kwargs) -> Op:
    """Build an :class:`Op` from keyword arguments (order preserved)."""
    o = _new(Op)  # the fields set directly: the frozen dataclass's __init__ costs more than the rest of op()
    d = o.__dict__
    d["opcode"] = opcode
    d["args"] = tuple(kwargs.items())
    return o


def op_from(opcode: str, args: tuple) -> Op:
    """An :class:`Op` from its ``(name, value)`` pairs as they are (the code generator shares the pairs
    that operations repeat: they are immutable)."""
    o = _new(Op)
    d = o.__dict__
    d["opcode"] = opcode
    d["args"] = args
    return o


@dataclass(frozen=True)
class Parallel:
    """A ``parallel { ... }`` block: its statements run concurrently."""

    body: tuple["Stmt", ...]


Stmt = Union[Op, Parallel]


def walk(stmts):
    """Every :class:`Op` of a statement list, parallel blocks flattened, in program order."""
    for s in stmts:
        if isinstance(s, Parallel):
            yield from walk(s.body)
        else:
            yield s


@dataclass(frozen=True)
class Decl:
    """Declaration of an external tensor: an input, a constant or the output."""

    role: str  # "input" | "const" | "output"
    name: str
    dtype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class Program:
    """A meta-operator program for one offloaded region."""

    name: str
    attrs: tuple[tuple[str, Value], ...] = ()
    decls: tuple[Decl, ...] = ()
    setup: tuple[Stmt, ...] = ()
    run: tuple[Stmt, ...] = ()

    def attr(self, key: str, default=None):
        for k, v in self.attrs:
            if k == key:
                return v
        return default

    def decl(self, role: str) -> list[Decl]:
        return [d for d in self.decls if d.role == role]

    def ops(self, section: str = "all"):
        """Iterate over every :class:`Op`, flattening parallel blocks."""
        sections = {"setup": [self.setup], "run": [self.run], "all": [self.setup, self.run]}[section]
        for sec in sections:
            yield from walk(sec)

    def count_ops(self) -> dict[str, int]:
        """Number of meta-operators of each kind (``DCOM`` split by sub-op)."""
        counts: dict[str, int] = {}
        for o in self.ops():
            counts[o.kind] = counts.get(o.kind, 0) + 1
        return counts


@dataclass(frozen=True)
class Segment:
    """A group of regions mapped onto the chip at once and run pipelined.

    Attributes
    ----------
    index : int
    prologue : tuple of Stmt
        What runs before the segment's regions: write-backs of live data,
        array mode switches (``CM.switch``), transfers.
    regions : tuple of str
        Program names of the regions, in execution order.
    """

    index: int
    prologue: tuple[Stmt, ...] = ()
    regions: tuple[str, ...] = ()


@dataclass(frozen=True)
class Network:
    """What sits above one region: the segments of a model and their order."""

    name: str
    attrs: tuple[tuple[str, Value], ...] = ()
    segments: tuple[Segment, ...] = ()

    def attr(self, key: str, default=None):
        for k, v in self.attrs:
            if k == key:
                return v
        return default

    @property
    def regions(self) -> list[str]:
        """Every region's program name, in execution order."""
        return [r for s in self.segments for r in s.regions]

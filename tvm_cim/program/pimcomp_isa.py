"""PIMCOMP's pseudo-instructions (paper 004, Table III) as a lowering of meta-operator programs.

Eight instructions, per core, with Table III's operands:

=========  ===============================  ============================================
``mvm``    ``(idx, dst, src, len)``          array group ``idx`` multiplies ``len`` inputs
``vec``    ``(op, dst, src1, src2, len)``    vector unit
``copy``   ``(dst, src, len)``               local memory to local memory
``write``  ``(dst, len, imm)``               fill local memory with an immediate
``load``   ``(dst, src, len)``               global memory to local memory
``store``  ``(dst, src, len)``               local memory to global memory
``send``   ``(idx, src, len)``               to core ``idx``
``recv``   ``(idx, dst, len)``               from core ``idx``
=========  ===============================  ============================================

:func:`lower` translates one region's program one operation to one
instruction (a scatter to two, ``send`` + ``recv``).  The work our programs
give the chip-level units (loads from the global buffer, quantisation and
unfolding on the chip ALU) runs on a ``global`` pseudo-core, index
``cores`` (PIMCOMP's cores load and unfold in their own local memory);
crossbar reads become ``mvm`` on the core holding the array group (a virtual
crossbar, or one row block of it with the MVM-grained pipeline); core-ALU
operations become ``vec`` on their core; stores are issued by the core that
last wrote the stored data.  Setup (weight programming), array-mode
switches and MIREDO loop nests have no pseudo-instruction and are counted in
``skipped``.  :func:`print_isa` and :func:`parse_isa` round-trip;
:func:`check` verifies that every ``send`` has its ``recv`` (synchronous
communication, in order and with the same length) and, given the cores'
local memory, that no core instruction moves more bytes through it than it holds.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from .ir import Program, Range, Ref, walk

OPERANDS = {
    "mvm": ("idx", "dst", "src", "len"),
    "vec": ("op", "dst", "src1", "src2", "len"),
    "copy": ("dst", "src", "len"),
    "write": ("dst", "len", "imm"),
    "load": ("dst", "src", "len"),
    "store": ("dst", "src", "len"),
    "send": ("idx", "src", "len"),
    "recv": ("idx", "dst", "len"),
}
GLOBAL = "global"


@dataclass(frozen=True)
class Instr:
    """One pseudo-instruction: its name and operands in Table III's order (ints or address strings)."""

    name: str
    args: tuple

    def __post_init__(self):
        if self.name not in OPERANDS:
            raise ValueError(f"unknown pseudo-instruction {self.name!r}")
        if len(self.args) != len(OPERANDS[self.name]):
            raise ValueError(f"{self.name} takes {len(OPERANDS[self.name])} operands "
                             f"({', '.join(OPERANDS[self.name])}), got {len(self.args)}")


@dataclass
class IsaProgram:
    """Pseudo-instructions of one region, per core (the ``global`` pseudo-core is index ``cores``).

    Attributes
    ----------
    name : str
    cores : int
        Cores of the chip; index ``cores`` is the global pseudo-core.
    code : dict
        Core index -> list of :class:`Instr`, in program order.
    skipped : dict
        Meta-operator kind -> operations with no pseudo-instruction.
    """

    name: str
    cores: int
    code: dict = field(default_factory=dict)
    skipped: dict = field(default_factory=dict)

    def emit(self, core: int, name: str, *args) -> None:
        self.code.setdefault(int(core), []).append(Instr(name, tuple(args)))

    def counts(self) -> dict[str, int]:
        """Instructions of each name over all cores."""
        out: dict[str, int] = {}
        for ins in (i for code in self.code.values() for i in code):
            out[ins.name] = out.get(ins.name, 0) + 1
        return out


def _addr(ref, vecs) -> str:
    name = ref.name if isinstance(ref, Ref) else str(ref)
    return f"{name}[{vecs.start}:{vecs.stop}]" if isinstance(vecs, Range) else name


def lower(prog: Program, per_core: int, cores: int) -> IsaProgram:
    """PIMCOMP pseudo-instructions of a region's meta-operator program.

    Parameters
    ----------
    prog : Program
    per_core : int
        Crossbars per core (crossbar ids map to cores).
    cores : int
        Cores of the chip (the global pseudo-core is index ``cores``).

    Returns
    -------
    IsaProgram
    """
    isa = IsaProgram(prog.name, cores)
    g = cores
    core_of_vxb: dict[int, int] = {}
    block_core: dict[tuple[int, int], int] = {}
    for o in prog.ops("setup"):
        if o.opcode == "CIM.bind_vxb":
            xbs, rows = o["xbs"], o["rows"]
            core_of_vxb[int(o["vxb"])] = int(xbs[0]) // per_core
            for xb, r in zip(xbs, rows):
                block_core.setdefault((int(o["vxb"]), int(r.start)), int(xb) // per_core)
        else:
            isa.skipped[o.kind] = isa.skipped.get(o.kind, 0) + 1
    writer: dict[str, int] = {}  # tensor -> core that last wrote it
    for o in walk(prog.run):
        kind, v = o.kind, o.get("vecs")
        if kind in ("CIM.read_xb", "CIM.read_core", "CIM.read_row"):
            vxb, blk = int(o["vxb"]), o.get("block")
            core = block_core.get((vxb, blk.start), core_of_vxb.get(vxb, 0)) if blk is not None else core_of_vxb.get(vxb, 0)
            idx = f"{vxb}.{blk.start}" if blk is not None else vxb
            isa.emit(core, "mvm", idx, _addr(o["dst"], v), _addr(o["src"], v), v.size if v else 0)
            writer[o["dst"].name] = core
        elif kind == "DMOV.scatter":
            vxb, blk = int(o["vxb"]), o.get("block")
            core = block_core.get((vxb, blk.start), core_of_vxb.get(vxb, 0)) if blk is not None else core_of_vxb.get(vxb, 0)
            n = int(o["bytes"])
            isa.emit(g, "send", core, _addr(o["src"], v), n)
            isa.emit(core, "recv", g, _addr(o["src"], v), n)
        elif kind in ("DMOV.load", "DMOV.fetch"):
            src = o["src"]
            isa.emit(g, "load", _addr(src, v), f"gm.{src.name}", int(o["bytes"]))
            writer[src.name] = g
        elif kind == "DMOV.store":
            src = o["src"]
            isa.emit(writer.get(src.name, g), "store", f"gm.{src.name}", _addr(src, v), int(o["bytes"]))
        elif kind == "DCOM.zeros":
            isa.emit(g, "write", _addr(o["dst"], None), int(math.prod(o["shape"])), 0)
            writer[o["dst"].name] = g
        elif kind in ("DCOM.reshape", "DCOM.layout"):
            isa.emit(g, "copy", _addr(o["dst"], v), _addr(o["src"], v), int(math.prod(o["shape"])))
            writer[o["dst"].name] = g
        elif o.opcode == "DCOM":
            core = int(o["core"]) if o.get("core") is not None else g
            dst = o.get("dst")
            src = o.get("src", dst)
            isa.emit(core, "vec", o["op"], _addr(dst, v), _addr(src, v), "-", int(o.get("elements", 0)))
            if dst is not None:
                writer[dst.name] = core
        else:
            isa.skipped[kind] = isa.skipped.get(kind, 0) + 1
    return isa


def print_isa(isa: IsaProgram) -> str:
    """The text form: a header, then one block per core (``core 3 {`` ... ``}``, ``core global``)."""
    lines = [f'isa "{isa.name}" cores={isa.cores}']
    for k, n in sorted(isa.skipped.items()):
        lines.append(f"skipped {k} {n}")
    for core in sorted(isa.code):
        lines.append(f"core {GLOBAL if core == isa.cores else core} {{")
        for ins in isa.code[core]:
            lines.append(f"  {ins.name}({', '.join(str(a) for a in ins.args)})")
        lines.append("}")
    return "\n".join(lines) + "\n"


_INSTR = re.compile(r"^\s*([a-z]+)\((.*)\)\s*$")


def _value(tok: str):
    tok = tok.strip()
    return int(tok) if re.fullmatch(r"-?\d+", tok) else tok


def parse_isa(text: str) -> IsaProgram:
    """Inverse of :func:`print_isa`.

    Raises
    ------
    ValueError
        A malformed line (its number and text in the message).
    """
    isa, core = None, None
    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s:
            continue
        try:
            if s.startswith("isa "):
                m = re.fullmatch(r'isa "(.*)" cores=(\d+)', s)
                isa = IsaProgram(m.group(1), int(m.group(2)))
            elif s.startswith("skipped "):
                _, k, c = s.split()
                isa.skipped[k] = int(c)
            elif s.startswith("core "):
                name = s.split()[1]
                core = isa.cores if name == GLOBAL else int(name)
                isa.code.setdefault(core, [])
            elif s == "}":
                core = None
            else:
                m = _INSTR.match(s)
                if m is None or core is None:
                    raise ValueError("expected an instruction inside a core block")
                args = tuple(_value(a) for a in m.group(2).split(",")) if m.group(2).strip() else ()
                isa.code[core].append(Instr(m.group(1), args))
        except (AttributeError, ValueError, TypeError) as e:
            raise ValueError(f"line {n}: {line!r}: {e}") from None
    if isa is None:
        raise ValueError("no 'isa' header")
    return isa


LOCAL_BYTES = ("recv", "load", "store")  # instructions whose ``len`` (bytes) is held in a core's local memory


def check(isa: IsaProgram, local_bytes: int | None = None) -> None:
    """Every ``send(b, ..., len)`` of core ``a`` is matched, in order, by a ``recv(a, ..., len)`` of core ``b``;
    with ``local_bytes``, every ``recv``, ``load`` and ``store`` of a core moves at most that many bytes.

    Parameters
    ----------
    isa : IsaProgram
    local_bytes : int, optional
        A core's local memory (the preset's ``core.local_buffer``); the global pseudo-core is not bounded.

    Raises
    ------
    ValueError
        An unmatched or mismatched pair, or a transfer larger than a core's local memory.
    """
    sends: dict[tuple[int, int], list[int]] = {}
    recvs: dict[tuple[int, int], list[int]] = {}
    for core, code in isa.code.items():
        for ins in code:
            if local_bytes is not None and core != isa.cores and ins.name in LOCAL_BYTES \
                    and int(ins.args[-1]) > local_bytes:
                raise ValueError(f"{isa.name}: core {core}: {ins.name}({', '.join(map(str, ins.args))}) moves "
                                 f"{ins.args[-1]} bytes, more than its {local_bytes}-byte local memory")
            if ins.name == "send":
                sends.setdefault((core, int(ins.args[0])), []).append(int(ins.args[2]))
            elif ins.name == "recv":
                recvs.setdefault((int(ins.args[0]), core), []).append(int(ins.args[2]))
    for pair in set(sends) | set(recvs):
        if sends.get(pair, []) != recvs.get(pair, []):
            raise ValueError(f"{isa.name}: sends {pair[0]} -> {pair[1]} {sends.get(pair, [])} do not match the "
                             f"receives {recvs.get(pair, [])}")

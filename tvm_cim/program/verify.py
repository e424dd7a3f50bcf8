"""Verifier: a program is well formed against the meta-operator definitions and the chip.

Run after code generation (and by the parser's users on hand-written text).
Checks every operation's kind and operands against :data:`tvm_cim.program.ops.OPS`,
that tensors are declared or produced before they are read, that virtual
crossbars are bound before use, that crossbar ids exist on the chip (also the
arrays ``CM.switch`` and memory-mode ``DMOV`` name), and that
vector ranges lie inside the region's ``M`` dimension.
"""

from __future__ import annotations

from ..hardware.loopnest import DIMS, decode
from .ir import Network, Op, Program, Range, Ref
from .ops import OPS


class ProgramError(ValueError):
    """A program is not well formed; the message names the program, the operation and the problem."""


_SIGS: dict = {}  # kind -> (operand types by name, required names), from OPS


def _signature(kind: str):
    sig = _SIGS.get(kind)
    if sig is None:
        d = OPS.get(kind)
        if d is None:
            return None
        sig = _SIGS[kind] = ({x.name: x.types for x in d.operands}, frozenset(x.name for x in d.operands if x.required))
    return sig


_CHECKED: set = set()  # (kind, operand names and value classes) that passed _check_op's checks


def _check_op(o: Op, where: str, key: tuple | None = None) -> None:
    """Check an operation's kind and operand types (``key``: its :func:`_op_key`, if already made)."""
    if key is None:
        key = (o.kind,) + tuple([(k, v.__class__) for k, v in o.args])
    if key in _CHECKED:  # the checks depend on nothing else: this kind with these operands of these types passed
        return
    sig = _signature(o.kind)
    if sig is None:
        raise ProgramError(f"{where}: unknown meta-operator {o.kind}")
    types, required = sig
    for k, v in o.args:
        t = types.get(k)
        if t is None:
            raise ProgramError(f"{where}: {o.kind} has no operand '{k}' "
                               f"(operands: {', '.join(x.name for x in OPS[o.kind].operands)})")
        if not isinstance(v, t) or (v.__class__ is bool and t in (int, (int, float))):
            raise ProgramError(f"{where}: {o.kind} operand '{k}' is {v!r}, not of the expected type")
    if len(required) > len(o.args) or not required.issubset([k for k, _ in o.args]):
        for spec in OPS[o.kind].operands:
            if spec.required and spec.name not in [k for k, _ in o.args]:
                raise ProgramError(f"{where}: {o.kind} lacks the operand '{spec.name}'")
    if len(_CHECKED) < 65536:
        _CHECKED.add(key)


#: Kinds :func:`_check_values` constrains beyond operand types.
_VALUE_KINDS = frozenset({"CM.switch", "DMOV.load", "DMOV.store", "DMOV.writeback", "CIM.bind_vxb", "CIM.write_xb"})


def _crossbars_of(o: Op) -> tuple:
    if o.kind == "CIM.bind_vxb":
        return tuple(o["xbs"])
    if o.kind == "CIM.write_xb":
        return (o["xb"],)
    if o.kind in ("CM.switch", "DMOV.writeback") or (o.kind in ("DMOV.load", "DMOV.store") and o.get("xbs") is not None):
        return tuple(o["xbs"])
    return ()


def _check_values(o: Op, where: str, crossbars: int | None) -> None:
    """Operand values the definitions constrain beyond their type: switch types, crossbar ids."""
    if o.kind == "CM.switch" and o["type"] not in ("TOM", "TOC"):
        raise ProgramError(f"{where}: CM.switch type must be 'TOM' or 'TOC', got {o['type']!r}")
    if o.kind in ("DMOV.load", "DMOV.store") and (o["level"] == "xbmem") != (o.get("xbs") is not None):
        raise ProgramError(f"{where}: {o.kind} names memory-mode arrays (xbs) exactly when its level is 'xbmem'")
    if o.kind == "DMOV.store" and o.get("ring") is not None and (o["level"] != "xbmem" or int(o["ring"]) <= 0):
        raise ProgramError(f"{where}: DMOV.store ring= (a line buffer) needs level 'xbmem' and a positive size")
    if o.kind == "DMOV.writeback" and o["level"] not in ("global", "offchip"):
        raise ProgramError(f"{where}: DMOV.writeback goes to 'global' or 'offchip', got {o['level']!r}")
    if o.kind == "CM.switch" and not o["xbs"]:
        raise ProgramError(f"{where}: CM.switch switches no arrays")
    if o.kind == "CIM.bind_vxb" and not len(o["xbs"]) == len(o["rows"]) == len(o["cols"]):
        raise ProgramError(f"{where}: CIM.bind_vxb binds {len(o['xbs'])} crossbars to "
                           f"{len(o['rows'])} row and {len(o['cols'])} column ranges")
    if crossbars is not None:
        for xb in _crossbars_of(o):
            if not 0 <= int(xb) < crossbars:
                raise ProgramError(f"{where}: crossbar {xb} does not exist (the chip has {crossbars})")


def _check_loopnest(o, where: str, prog: Program) -> None:
    """A loop nest decodes, its factors multiply to its bounds, and it computes the program's M x N outputs."""
    try:
        layer, m = decode(o["layer"], o["spatial"], o["loops"], o["cuts"], o["double"])
    except ValueError as e:
        raise ProgramError(f"{where}: {e}") from None
    prod = {d: 1 for d in DIMS}
    for _, fs in m.spatial:
        for d, f in fs:
            prod[d] *= f
    for d, f in m.loops:
        prod[d] *= f
    if prod != layer.bounds:
        raise ProgramError(f"{where}: loop factors {prod} do not multiply to the bounds {layer.bounds}")
    b = layer.bounds
    mm, nn = prog.attr("M"), prog.attr("N")
    if mm is not None and (b["N"] * b["P"] * b["Q"] != int(mm) or b["G"] * b["K"] != int(nn)):
        raise ProgramError(f"{where}: the loop nest computes {b['N'] * b['P'] * b['Q']} x {b['G'] * b['K']} "
                           f"outputs, the program {mm} x {nn}")


def verify(prog: Program, crossbars: int | None = None) -> Program:
    """Check a program; return it unchanged.

    Parameters
    ----------
    prog : Program
    crossbars : int, optional
        Crossbars on the chip; crossbar ids must be below it.

    Raises
    ------
    ProgramError
    """
    m_total = int(prog.attr("M", 0)) or None
    known = {d.name for d in prog.decls}
    bound: set[int] = set()
    checked = _CHECKED
    for section in ("setup", "run"):
        for i, o in enumerate(prog.ops(section)):
            kind = o.kind
            # one look at the operands: the type-check key, the tensors read, dst, vxb and vecs (an argument
            # name occurs once: Op arguments are keywords); errors in _check_op's order, then the first unread
            key = [kind]
            dst = vxb = vecs = unknown = None
            for k, v in o.args:
                c = v.__class__
                key.append((k, c))
                if k == "dst":
                    dst = v
                    continue
                if k == "vxb":
                    vxb = v
                elif k == "vecs":
                    vecs = v
                if c is Ref and unknown is None and v.name not in known:
                    unknown = v
            key = tuple(key)
            if key not in checked:
                _check_op(o, f"program '{prog.name}' {section}[{i}]", key)
            if unknown is not None:
                raise ProgramError(f"program '{prog.name}' {section}[{i}]: {kind} reads %{unknown.name} before it "
                                   "is declared or computed")
            if isinstance(dst, Ref):
                known.add(dst.name)
            if kind in _VALUE_KINDS:
                _check_values(o, f"program '{prog.name}' {section}[{i}]", crossbars)
            if kind == "CIM.bind_vxb":
                bound.add(int(o["vxb"]))
            elif vxb is not None and int(vxb) not in bound:
                raise ProgramError(f"program '{prog.name}' {section}[{i}]: {kind} uses virtual crossbar {vxb} "
                                   "before CIM.bind_vxb")
            if kind == "CIM.loopnest":
                _check_loopnest(o, f"program '{prog.name}' {section}[{i}]", prog)
            if vecs.__class__ is Range and (vecs.start < 0 or vecs.stop < vecs.start
                                            or (m_total and vecs.stop > m_total)):
                raise ProgramError(f"program '{prog.name}' {section}[{i}]: vector range {vecs} outside 0:{m_total}")
    return prog


def verify_network(net: Network, programs: dict[str, Program] | None = None,
                   crossbars: int | None = None) -> Network:
    """Check a network: segments in order, prologue operations well formed, regions known.

    Raises
    ------
    ProgramError
    """
    prev = -1
    seen: set[str] = set()
    for seg in net.segments:
        if seg.index <= prev:
            raise ProgramError(f"network '{net.name}': segment {seg.index} after segment {prev}")
        prev = seg.index
        for i, s in enumerate(seg.prologue):
            ops = [s] if isinstance(s, Op) else list(getattr(s, "body", ()))
            for o in ops:
                where = f"network '{net.name}' segment {seg.index} prologue[{i}]"
                _check_op(o, where)
                _check_values(o, where, crossbars)
        for r in seg.regions:
            if r in seen:
                raise ProgramError(f"network '{net.name}': region {r} appears twice")
            seen.add(r)
            if programs is not None and r not in programs:
                raise ProgramError(f"network '{net.name}': segment {seg.index} names unknown region {r}")
    return net

"""Text form of meta-operator programs and networks: printer and parser.

A program is what one offloaded region compiles to.  Its operations use the
meta-operator vocabulary of CIM-MLC (paper 003, Fig. 10-16; the typed
definitions are in :mod:`tvm_cim.program.ops`):

``CIM.write_xb``  program a weight tile into a crossbar
``CIM.read_xb``   bit-serial MVM on one crossbar (crossbar computing mode)
``CIM.read_core`` MVM on all crossbars of a core at once (core computing mode)
``CIM.read_row``  MVM on a group of wordlines of a crossbar (wordline mode)
``DMOV``          data movement between buffer levels
``DCOM``          digital computation on an ALU (quantise, im2col, add, ...)
``CM.switch``     switch arrays between compute and memory mode (CMSwitch)
``parallel{}``    a block whose operations run concurrently

The text form is meant to be read by people.  Example::

    program "conv2d_0" {
      attr hw = "prime"
      input %x : float32[1, 3, 8, 8]
      const %w : int8[27, 8]
      output %y : float32[1, 8, 4, 4]
      setup {
        CIM.write_xb(xb=0, src=%w, rows=0:27, cols=0:8)
      }
      run {
        DCOM(op="quantize", src=%x, dst=%xq, scale=0.02, bits=8)
        parallel {
          CIM.read_xb(xb=0, src=%cols, rows=0:27, dst=%p0)
        }
      }
    }

A network lists the segments of a model, their order and what runs between
them::

    network "m1a2b3c4" {
      attr hw = "dynaplasia"
      segment 0 {
        region "m1a2b3c4.r000_conv2d"
      }
      segment 1 {
        CM.switch(type="TOM", xbs=(40, 41))
        region "m1a2b3c4.r001_conv2d"
      }
    }

:func:`print_program` and :func:`parse_program` round-trip exactly:
``parse_program(print_program(p)) == p``; so do :func:`print_network` and
:func:`parse_network`.
"""

from __future__ import annotations

import re

from .ir import Decl, Network, Op, Parallel, Program, Range, Ref, Segment, Stmt, Value

# --------------------------------------------------------------------------- printer
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")


def _fmt(v: Value) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(float(v))
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (Ref, Range)):
        return str(v)
    if isinstance(v, tuple):
        return "(" + ", ".join(_fmt(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    raise TypeError(f"cannot print value {v!r} of type {type(v).__name__}")


#: Formatters by exact type for the common values (the same text as :func:`_fmt`, faster).
_TUPLES: dict = {}  # tuple value -> its text (programs repeat the same shapes, kernels and crossbar lists)


def _fmt_tuple(v: tuple) -> str:
    for x in v:  # only tuples of ints and ranges are remembered: (1, True) and (1.0,) equal (1, 1) and (1,)
        if x.__class__ is not int and x.__class__ is not Range:
            return _fmt(v)
    return _remembered(_TUPLES, v)


_STRS: dict = {}  # string value -> its quoted text (opcodes' sub-operations, levels, tensor layouts repeat)


def _fmt_str(v: str) -> str:
    return _remembered(_STRS, v)


def _remembered(cache: dict, v) -> str:
    """``_fmt(v)``, remembered in ``cache`` (emptied when it passes 65,536 values)."""
    t = cache.get(v)
    if t is None:
        t = _fmt(v)
        if len(cache) > 65536:
            cache.clear()
        cache[v] = t
    return t


def _fmt_op(o: Op) -> str:
    """One operation's text; the common value types by exact class, the same text as :func:`_fmt`."""
    out = []
    for k, v in o.args:
        c = v.__class__
        if c is Ref:
            out.append(f"{k}=%{v.name}")
        elif c is Range:
            out.append(f"{k}={v.start}:{v.stop}")
        elif c is int:
            out.append(f"{k}={v}")
        elif c is str:
            out.append(f"{k}={_fmt_str(v)}")
        elif c is float:
            out.append(f"{k}={v!r}")
        elif c is tuple:
            out.append(f"{k}={_fmt_tuple(v)}")
        elif c is bool:
            out.append(f"{k}=true" if v else f"{k}=false")
        else:
            out.append(f"{k}={_fmt(v)}")
    return f"{o.opcode}({', '.join(out)})"


def _print_stmts(stmts, indent: int, out: list[str]) -> None:
    pad = "  " * indent
    for s in stmts:
        if isinstance(s, Parallel):
            out.append(f"{pad}parallel {{")
            _print_stmts(s.body, indent + 1, out)
            out.append(f"{pad}}}")
        else:
            out.append(pad + _fmt_op(s))


def print_program(p: Program) -> str:
    """Render a program as text (inverse of :func:`parse_program`)."""
    out = [f"program {_fmt(p.name)} {{"]
    for k, v in p.attrs:
        out.append(f"  attr {k} = {_fmt(v)}")
    for d in p.decls:
        shape = ", ".join(str(s) for s in d.shape)
        out.append(f"  {d.role} %{d.name} : {d.dtype}[{shape}]")
    for sec in ("setup", "run"):
        out.append(f"  {sec} {{")
        _print_stmts(getattr(p, sec), 2, out)
        out.append("  }")
    out.append("}")
    return "\n".join(out) + "\n"


def print_network(n: Network) -> str:
    """Render a network as text (inverse of :func:`parse_network`)."""
    out = [f"network {_fmt(n.name)} {{"]
    for k, v in n.attrs:
        out.append(f"  attr {k} = {_fmt(v)}")
    for seg in n.segments:
        out.append(f"  segment {seg.index} {{")
        _print_stmts(seg.prologue, 2, out)
        for r in seg.regions:
            out.append(f"    region {_fmt(r)}")
        out.append("  }")
    out.append("}")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- parser
class ProgramSyntaxError(ValueError):
    """The text is not a valid meta-operator program."""


_TOKEN = re.compile(
    r"""
    (?P<ws>\s+|\#[^\n]*)
  | (?P<str>"(?:[^"\\]|\\.)*")
  | (?P<range>-?\d+:-?\d+)
  | (?P<num>[-+]?(?:\d+\.\d*(?:[eE][-+]?\d+)?|\d*\.\d+(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+|(?:inf|nan)(?![A-Za-z0-9_.])|\d+))
  | (?P<ref>%[A-Za-z_][A-Za-z0-9_.]*)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_.]*)
  | (?P<punct>[{}()\[\]=,:])
    """,
    re.VERBOSE,
)


class _Parser:
    def __init__(self, text: str):
        self.toks: list[tuple[str, str, int]] = []
        pos, line = 0, 1
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if not m:
                raise ProgramSyntaxError(f"line {line}: unexpected character {text[pos]!r}")
            kind = m.lastgroup
            if kind != "ws":
                self.toks.append((kind, m.group(), line))
            line += m.group().count("\n")
            pos = m.end()
        self.i = 0

    def peek(self, k: int = 0):
        j = self.i + k
        return self.toks[j] if j < len(self.toks) else ("eof", "", -1)

    def next(self):
        t = self.peek()
        self.i += 1
        return t

    def expect(self, value: str | None = None, kind: str | None = None) -> str:
        k, v, line = self.next()
        if (value is not None and v != value) or (kind is not None and k != kind):
            want = repr(value) if value is not None else kind
            raise ProgramSyntaxError(f"line {line}: expected {want}, got {v or 'end of text'!r}")
        return v

    def value(self) -> Value:
        k, v, line = self.next()
        if k == "str":
            return re.sub(r"\\(.)", r"\1", v[1:-1])
        if k == "range":
            a, b = v.split(":")
            return Range(int(a), int(b))
        if k == "num":
            if re.fullmatch(r"[-+]?\d+", v):
                return int(v)
            return float(v)
        if k == "ref":
            return Ref(v[1:])
        if k == "ident":
            if v in ("true", "false"):
                return v == "true"
            if v in ("inf", "nan"):
                return float(v)
            raise ProgramSyntaxError(f"line {line}: bare word {v!r} is not a value (quote strings)")
        if v == "(":
            items = []
            while self.peek()[1] != ")":
                items.append(self.value())
                if self.peek()[1] == ",":
                    self.next()
            self.expect(")")
            return tuple(items)
        raise ProgramSyntaxError(f"line {line}: expected a value, got {v or 'end of text'!r}")

    def op(self) -> Op:
        opcode = self.expect(kind="ident")
        self.expect("(")
        args = []
        while self.peek()[1] != ")":
            key = self.expect(kind="ident")
            self.expect("=")
            args.append((key, self.value()))
            if self.peek()[1] == ",":
                self.next()
        self.expect(")")
        return Op(opcode, tuple(args))

    def stmts(self) -> tuple[Stmt, ...]:
        self.expect("{")
        body: list[Stmt] = []
        while self.peek()[1] != "}":
            if self.peek()[0] == "eof":
                raise ProgramSyntaxError("unexpected end of text: missing '}'")
            if self.peek()[1] == "parallel" and self.peek(1)[1] == "{":
                self.next()
                body.append(Parallel(self.stmts()))
            else:
                body.append(self.op())
        self.expect("}")
        return tuple(body)

    def program(self) -> Program:
        self.expect("program")
        name = self.value()
        if not isinstance(name, str):
            raise ProgramSyntaxError("program name must be a quoted string")
        self.expect("{")
        attrs, decls = [], []
        sections = {"setup": (), "run": ()}
        while self.peek()[1] != "}":
            k, v, line = self.peek()
            if v == "attr":
                self.next()
                key = self.expect(kind="ident")
                self.expect("=")
                attrs.append((key, self.value()))
            elif v in ("input", "const", "output"):
                self.next()
                ref = self.expect(kind="ref")[1:]
                self.expect(":")
                dtype = self.expect(kind="ident")
                self.expect("[")
                shape = []
                while self.peek()[1] != "]":
                    shape.append(int(self.expect(kind="num")))
                    if self.peek()[1] == ",":
                        self.next()
                self.expect("]")
                decls.append(Decl(v, ref, dtype, tuple(shape)))
            elif v in sections:
                self.next()
                sections[v] = self.stmts()
            else:
                raise ProgramSyntaxError(f"line {line}: unexpected {v or 'end of text'!r} in program body")
        self.expect("}")
        return Program(name, tuple(attrs), tuple(decls), sections["setup"], sections["run"])


    def network(self) -> Network:
        self.expect("network")
        name = self.value()
        if not isinstance(name, str):
            raise ProgramSyntaxError("network name must be a quoted string")
        self.expect("{")
        attrs, segments = [], []
        while self.peek()[1] != "}":
            k, v, line = self.peek()
            if v == "attr":
                self.next()
                key = self.expect(kind="ident")
                self.expect("=")
                attrs.append((key, self.value()))
            elif v == "segment":
                self.next()
                index = int(self.expect(kind="num"))
                self.expect("{")
                prologue, regions = [], []
                while self.peek()[1] != "}":
                    if self.peek()[0] == "eof":
                        raise ProgramSyntaxError("unexpected end of text: missing '}'")
                    if self.peek()[1] == "region":
                        self.next()
                        r = self.value()
                        if not isinstance(r, str):
                            raise ProgramSyntaxError(f"line {line}: region name must be a quoted string")
                        regions.append(r)
                    elif self.peek()[1] == "parallel" and self.peek(1)[1] == "{":
                        self.next()
                        prologue.append(Parallel(self.stmts()))
                    else:
                        prologue.append(self.op())
                self.expect("}")
                segments.append(Segment(index, tuple(prologue), tuple(regions)))
            else:
                raise ProgramSyntaxError(f"line {line}: unexpected {v or 'end of text'!r} in network body")
        self.expect("}")
        return Network(name, tuple(attrs), tuple(segments))


def parse_network(text: str) -> Network:
    """Parse the text form of a network (inverse of :func:`print_network`)."""
    p = _Parser(text)
    net = p.network()
    if p.peek()[0] != "eof":
        raise ProgramSyntaxError(f"line {p.peek()[2]}: text after the end of the network")
    return net


def parse_program(text: str) -> Program:
    """Parse the text form of a program (inverse of :func:`print_program`)."""
    p = _Parser(text)
    prog = p.program()
    if p.peek()[0] != "eof":
        raise ProgramSyntaxError(f"line {p.peek()[2]}: text after the end of the program")
    return prog


def parse_programs(text: str) -> list[Program]:
    """Parse the programs of a text that holds several (``--emit`` files; a network in it is skipped)."""
    return parse_emitted(text)[1]


def parse_emitted(text: str) -> tuple[Network | None, list[Program]]:
    """Parse what ``--emit`` writes: an optional network, then the programs."""
    p = _Parser(text)
    net, progs = None, []
    while p.peek()[0] != "eof":
        if p.peek()[1] == "network":
            net = p.network()
        else:
            progs.append(p.program())
    return net, progs

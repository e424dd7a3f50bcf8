"""The text format of PIM command streams: a printer and a parser that round-trip.

A stream is plain text in the device's own command set (the mnemonics of the
hardware file's ``[commands]`` table) plus a few host-side actions
(``HOST.*``).  Example (abridged)::

    pimstream 1
    device hbm-pim
    kernel {"kind": "gemv", ...}
    tensor A float16 1x4096x128 resident
    tensor x float16 1x1x128 input
    tensor y float16 1x1x4096 output
    units 80 8
    memory 1152
    table o_n gc 0 512 1024 ...
    phase rearrange_in
      HOST.LOAD x bytes=256
      WR_AB @0-79:* reg=0 src=x[o_b,o_m,o_k:s_k:128]
    phase compute
      loop i 1
        ACT_AB @0-79:* row=i
        MAC @0-79:* addr=64*i n=64 acc=0 per=8 pitch=8 reg=0 vecs=8
        ...
        PRE_AB @0-79:*
      end
    phase rearrange_out
      RD @0-79:0-7 from=bank lay=blk:7:8:1:1:64 slot=res base=0 dst=y[o_b:s_b:1,o_m:s_m:1,o_n:s_n:7] res=bmn lanesum=1 acc=1

Lines
-----
``pimstream 1``                    format version.
``device <name>``                  hardware preset the stream is for.
``kernel <json>``                  the kernel (kind, sizes, residency).
``draft <json>``                   the tiling draft that produced it (informative).
``tensor <name> <dtype> <shape> <role>``  role: input, resident, output.
``units <groups> <cores>``         PIM groups and cores per group the stream uses.
``memory <columns>``               columns per core the stream addresses.
``gbuf <entries>``                 group-buffer entries (FP16) it addresses.
``table <name> g|gc <values>``     per-group or per-(group, core) integers.
``phase <name> [serial] [rounds=N]``  rearrange_in, compute, rearrange_out; ``serial``
                                   means the channels of the phase do not overlap;
                                   ``rounds=N`` that the data pass through the host's
                                   staging memory in N double-buffered rounds.
``loop <var> <count>`` / ``end``   repetition; ``var`` counts 0..count-1.
``<MNEMONIC> @<groups>:<cores> key=value ...``  a command; ``<cores>`` is ``*`` for
                                   one group-level (broadcast) issue, or a set of
                                   cores for one bank-level issue per core.

Host actions: ``HOST.LAUNCH`` (one kernel launch), ``HOST.LOAD`` /
``HOST.STORE tensor=T bytes=N`` (the host reads / writes a tensor in host
layout, spread over every channel), ``HOST.REDUCE bytes=N flops=F`` (the host
merges partial results as it reads them back: its ``bytes`` are the ``RD``
traffic already charged, so only the ``flops`` cost time).

Values are integer expressions (``+ - * // %``, loop variables, table names,
``g`` and ``c``), tensor references ``T[e, org:valid:padded, ...]`` or plain
words (:mod:`tvm_pim.program.expr`).  :func:`tvm_pim.program.layout.layout_address`
defines the on-bank tile layouts (``lay=``).  Printing a parsed stream gives
its text back: ``print_stream(parse_stream(text)) == text`` for every text
:func:`print_stream` wrote.
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from .stream import PHASES, VERSION, Command, Loop, Phase, Stream, StreamFormatError, Tensor


# ============================================================================ sets of units
def format_set(values) -> str:
    """``[0,1,2,3,8]`` -> ``'0-3,8'``."""
    v = sorted(int(x) for x in values)
    if not v:
        raise StreamFormatError("empty unit set")
    out, start, prev = [], v[0], v[0]
    for x in v[1:]:
        if x == prev + 1:
            prev = x
            continue
        out.append(f"{start}-{prev}" if prev > start else f"{start}")
        start = prev = x
    out.append(f"{start}-{prev}" if prev > start else f"{start}")
    return ",".join(out)


def parse_set(text: str) -> tuple[int, ...]:
    """``'0-3,8'`` -> ``(0, 1, 2, 3, 8)`` (inverse of :func:`format_set`)."""
    out: list[int] = []
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-")
            out.extend(range(int(a), int(b) + 1))
        elif part:
            out.append(int(part))
    return tuple(out)


# ============================================================================ printer
def _command_text(c: Command) -> str:
    """``<MNEMONIC> @<groups>:<cores> k=v ...`` (host actions have no unit set)."""
    head = c.op
    if not c.op.startswith("HOST."):
        head += f" @{format_set(c.groups)}:" + ("*" if c.cores is None else format_set(c.cores))
    return " ".join([head] + [f"{k}={v}" for k, v in c.args.items()])


def _body_lines(items, depth: int):
    """Lines of a phase or loop body, two spaces of indentation per level."""
    for it in items:
        if isinstance(it, Loop):
            yield f"{'  ' * depth}loop {it.var} {it.count}"
            yield from _body_lines(it.body, depth + 1)
            yield f"{'  ' * depth}end"
        else:
            yield "  " * depth + _command_text(it)


def print_stream(s: Stream) -> str:
    """The text of a stream (:func:`parse_stream` reads it back)."""
    lines = [f"pimstream {VERSION}", f"device {s.device}", f"kernel {s.kernel}"]
    if s.draft:
        lines.append(f"draft {s.draft}")
    for t in s.tensors:
        lines.append(f"tensor {t.name} {t.dtype} {'x'.join(str(d) for d in t.shape)} {t.role}")
    lines.append(f"units {s.groups} {s.cores}")
    lines.append(f"memory {s.memory}")
    if s.gbuf:
        lines.append(f"gbuf {s.gbuf}")
    for name, (kind, arr) in s.tables.items():
        lines.append(f"table {name} {kind} " + " ".join(str(int(v)) for v in np.asarray(arr).ravel()))
    for ph in s.phases:
        lines.append(f"phase {ph.name}" + (" serial" if ph.serial else "") + (f" rounds={ph.rounds}" if ph.rounds > 1 else ""))
        lines.extend(_body_lines(ph.body, 1))
    return "\n".join(lines) + "\n"


_CMD_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_.]*)(?:\s+@([0-9,\-]+):(\*|[0-9,\-]+))?((?:\s+[A-Za-z_][A-Za-z0-9_]*=\S+)*)\s*$")


def parse_stream(text: str) -> Stream:
    """Parse the text of a stream.

    Raises
    ------
    StreamFormatError
        With the line number and what was expected.
    """
    s: Stream | None = None
    header: dict = {}
    stack: list[list] = []
    tensors: list[Tensor] = []
    tables: dict = {}
    phases: list[Phase] = []
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].rstrip() if not raw.lstrip().startswith(("kernel", "draft")) else raw.rstrip()
        if not line.strip():
            continue
        word, _, rest = line.strip().partition(" ")

        def fail(msg):
            raise StreamFormatError(f"line {no}: {msg}: {raw.strip()!r}")

        if word == "pimstream":
            if rest.strip() != str(VERSION):
                fail(f"unsupported stream version (this reader knows {VERSION})")
            header["version"] = True
            continue
        if "version" not in header:
            fail("a stream starts with 'pimstream 1'")
        if word in ("device", "kernel", "draft"):
            header[word] = rest.strip()
            continue
        if word == "tensor":
            p = rest.split()
            if len(p) != 4 or p[3] not in ("input", "resident", "output"):
                fail("expected 'tensor <name> <dtype> <d0>x<d1>... input|resident|output'")
            try:
                shape = tuple(int(d) for d in p[2].split("x"))
            except ValueError:
                fail("bad shape")
            tensors.append(Tensor(p[0], p[1], shape, p[3]))
            continue
        if word in ("units", "memory", "gbuf"):
            try:
                vals = [int(v) for v in rest.split()]
            except ValueError:
                fail(f"'{word}' takes integers")
            header[word] = vals
            continue
        if word == "table":
            p = rest.split()
            if len(p) < 2 or p[1] not in ("g", "gc"):
                fail("expected 'table <name> g|gc <values>'")
            try:
                tables[p[0]] = (p[1], np.array([int(v) for v in p[2:]], dtype=np.int64))
            except ValueError:
                fail("table values must be integers")
            continue
        if word == "phase":
            p = rest.split()
            if not p or p[0] not in PHASES:
                fail("phase must be one of " + ", ".join(PHASES))
            rounds = [w for w in p[1:] if w.startswith("rounds=")]
            if any(w != "serial" and not w.startswith("rounds=") for w in p[1:]):
                fail("expected 'phase <name> [serial] [rounds=N]'")
            try:
                n_rounds = int(rounds[-1][7:]) if rounds else 1
            except ValueError:
                n_rounds = 0
            if n_rounds < 1:
                fail("rounds must be a positive integer")
            ph = Phase(p[0], serial="serial" in p[1:], rounds=n_rounds)
            phases.append(ph)
            stack = [ph.body]
            continue
        if not stack:
            fail("command outside a phase")
        if word == "loop":
            p = rest.split()
            if len(p) != 2 or not p[0].isidentifier():
                fail("expected 'loop <var> <count>'")
            lp = Loop(p[0], int(p[1]))
            stack[-1].append(lp)
            stack.append(lp.body)
            continue
        if word == "end":
            if len(stack) < 2:
                fail("'end' without 'loop'")
            stack.pop()
            continue
        m = _CMD_RE.match(line.strip())
        if not m:
            fail("expected '<MNEMONIC> @<groups>:<cores> key=value ...'")
        op, gs, cs, argtext = m.groups()
        if not op.startswith("HOST.") and gs is None:
            fail("a device command needs '@<groups>:<cores>'")
        args = {}
        for kv in argtext.split():
            k, _, v = kv.partition("=")
            args[k] = v
        stack[-1].append(
            Command(op, parse_set(gs) if gs else (), None if (cs in (None, "*")) else parse_set(cs), args)
        )
    if "version" not in header:
        raise StreamFormatError("empty stream (expected 'pimstream 1')")
    for key in ("device", "kernel", "units", "memory"):
        if key not in header:
            raise StreamFormatError(f"stream lacks the '{key}' line")
    if len(stack) > 1:
        raise StreamFormatError("unterminated 'loop' (missing 'end')")
    s = Stream(
        device=header["device"],
        kernel=header["kernel"],
        draft=header.get("draft", ""),
        tensors=tensors,
        groups=header["units"][0],
        cores=header["units"][1],
        memory=header["memory"][0],
        gbuf=header.get("gbuf", [0])[0],
        tables={k: (kind, arr.reshape(-1) if kind == "g" else arr) for k, (kind, arr) in tables.items()},
        phases=phases,
    )
    for name, (kind, arr) in s.tables.items():
        want = s.groups if kind == "g" else s.groups * s.cores
        if arr.size != want:
            raise StreamFormatError(f"table {name}: {arr.size} values, expected {want}")
    return s


@lru_cache(maxsize=1024)
def parse_stream_cached(text: str) -> Stream:
    """:func:`parse_stream` with a cache (the runtime parses the same stream at every call).

    The returned stream is shared: do not modify it.
    """
    return parse_stream(text)

"""The meta-operators: one typed definition per operator, with its operands.

Every operation a program may hold is defined here once (:data:`OPS`, keyed
by :attr:`tvm_cim.program.ir.Op.kind`): what it does, the unit that executes
it and the operands it takes with their types.  The verifier
(:mod:`tvm_cim.program.verify`) checks programs against these definitions,
the simulator dispatches on the same kinds, and ``--emit`` output can be read
with them at hand.
"""

from __future__ import annotations

from dataclasses import dataclass

from .ir import Op, Parallel, Program, Range, Ref

INT, FLOAT, STR, BOOL, REF, RANGE, TUPLE = int, (int, float), str, bool, Ref, Range, tuple


@dataclass(frozen=True)
class Operand:
    """One keyword operand of a meta-operator."""

    name: str
    types: type | tuple[type, ...]
    required: bool = True
    doc: str = ""
    timed: bool = True  # False: it changes only the values computed, never a duration, energy or resource


@dataclass(frozen=True)
class OpDef:
    """The definition of a meta-operator kind.

    Attributes
    ----------
    kind : str
        ``CIM.read_xb``, ``DMOV.load``, ``DCOM.quantize``, ``CM.switch`` ...
    unit : str
        What executes it: ``crossbar``, ``chip-alu`` / ``core-alu``, ``buffer``
        (global-buffer port), ``link`` (a core's NoC link), ``offchip``,
        ``mode`` (array mode control) or ``none`` (declarations).
    doc : str
    operands : tuple of Operand
    """

    kind: str
    unit: str
    doc: str
    operands: tuple[Operand, ...]

    def operand(self, name: str) -> Operand | None:
        for o in self.operands:
            if o.name == name:
                return o
        return None


OPS: dict[str, OpDef] = {}


def define(kind: str, unit: str, doc: str, *operands: Operand) -> OpDef:
    """Add a meta-operator definition (one per kind)."""
    if kind in OPS:
        raise ValueError(f"meta-operator {kind} is already defined")
    d = OpDef(kind, unit, doc, tuple(operands))
    OPS[kind] = d
    return d


def definition(o: Op) -> OpDef | None:
    """The definition of an operation's kind, or None if the kind is unknown."""
    return OPS.get(o.kind)


def _o(name, types, required=True, doc="", timed=True):
    return Operand(name, types, required, doc, timed)


def untimed_operands(kind: str) -> frozenset:
    """The operands of a kind that change only the values computed (``Operand.timed`` False: quantisation
    scales and zero points); a timing-only simulation does not read them."""
    d = OPS.get(kind)
    return frozenset(o.name for o in d.operands if not o.timed) if d is not None else frozenset()


def timing_key(p: Program) -> tuple:
    """What two programs that run alike on a timing-only simulation share, cheap to compute: their
    attributes but the name and the segment, their declarations and the length of each section (a dict key
    for candidates of :func:`same_timing`)."""
    return (tuple(kv for kv in p.attrs if kv[0] != "segment"), p.decls, len(p.setup), len(p.run))


def same_timing(a: Program, b: Program) -> bool:
    """Whether two programs with the same :func:`timing_key` take the same time and energy on a chip in the same
    state: the same operations in the same order and blocks, up to operands that change only values
    (:func:`untimed_operands`: the quantisation scales of two layers of the same shape)."""
    return _same_stmts(a.setup, b.setup) and _same_stmts(a.run, b.run)


def _same_stmts(xs, ys) -> bool:
    if len(xs) != len(ys):
        return False
    for x, y in zip(xs, ys):
        if x is y:
            continue
        tx = type(x)
        if tx is not type(y):
            return False
        if tx is Parallel:
            if not _same_stmts(x.body, y.body):
                return False
        elif x.opcode != y.opcode or (x.args != y.args and not _same_but_untimed(x, y)):
            return False
    return True


def _same_but_untimed(x: Op, y: Op) -> bool:
    if len(x.args) != len(y.args):
        return False
    skip = untimed_operands(x.kind)
    return bool(skip) and all(kx == ky and (vx == vy or kx in skip) for (kx, vx), (ky, vy) in zip(x.args, y.args))


_SUB = _o("op", STR, doc="sub-operation")
_VECS = _o("vecs", RANGE, False, "input vectors (rows of the M dimension) the operation covers")
_BATCH = _o("batch", INT, False, "independent matrices of a run-time operand")
_BLOCK = _o("block", RANGE, False, "the row block of a virtual crossbar (MVM-grained pipeline)")
_ELEMS = _o("elements", INT, False, "elements the ALU processes (its cost)")

# ---------------------------------------------------------------------------- crossbars
define("CIM.bind_vxb", "none", "bind physical crossbars to row and column ranges of the weight matrix (a virtual crossbar)",
       _o("vxb", INT), _o("xbs", TUPLE), _o("rows", TUPLE), _o("cols", TUPLE))
define("CIM.write_xb", "crossbar", "program a weight tile into a crossbar (rows serially)",
       _o("xb", INT), _o("src", REF), _o("rows", RANGE), _o("cols", RANGE), _BATCH,
       _o("inplace", BOOL, False, "the tile is already in the array's cells (stored there in memory mode and "
          "kept by CM.switch TOC keep=True, e.g. keys for QK^T): nothing is written or charged"))
define("CIM.read_xb", "crossbar", "bit-serial MVM on the crossbars of a virtual crossbar (crossbar mode)",
       _o("vxb", INT), _o("src", REF), _VECS, _o("dst", REF), _BLOCK, _BATCH)
define("CIM.read_core", "crossbar", "MVM on all crossbars of the cores of a virtual crossbar (core mode)",
       _o("vxb", INT), _o("src", REF), _VECS, _o("dst", REF), _BATCH)
define("CIM.read_row", "crossbar", "MVM on one group of rows_active wordlines (wordline mode)",
       _o("vxb", INT), _o("group", INT), _o("src", REF), _VECS, _o("dst", REF), _BLOCK, _BATCH)
define("CIM.loopnest", "crossbar",
       "the layer's dataflow on a weight-streaming macro hierarchy (MIREDO): the simulator executes its loop nest "
       "-- refills between memory levels, weight loads into the macros, MVMs -- for the region's timing and energy",
       _o("layer", STR, doc="loop bounds N,G,K,C,P,Q,R,S; stride; dilation"),
       _o("spatial", STR, doc="per spatial axis the unrolled factors"),
       _o("loops", STR, doc="temporal loops, outermost first"),
       _o("cuts", STR, doc="operand.level.cut: the level holds the loops from slot cut inwards"),
       _o("double", STR, doc="operand.level pairs that run double-buffered"),
       _o("predicted_cycles", FLOAT, False, "the optimiser's latency"))
# ---------------------------------------------------------------------------- array modes
define("CM.switch", "mode", "switch arrays to memory mode (TOM) or to compute mode (TOC) (CMSwitch)",
       _o("type", STR, doc="'TOM' or 'TOC'"), _o("xbs", TUPLE, doc="crossbar ids"),
       _o("keep", BOOL, False, "TOC: the data stored in the arrays stays in their cells as weights "
          "(used in place by CIM.write_xb inplace=True); otherwise it is lost"))
# ---------------------------------------------------------------------------- data movement
_LEVEL = _o("level", STR, doc="'global', 'offchip', 'core' or 'xbmem' (dual-mode arrays in memory mode)")
_MEMXBS = _o("xbs", TUPLE, False, "the memory-mode arrays holding the data (level 'xbmem')")
_FRAC = _o("frac", TUPLE, False, "share [f0, f1) of the region input or output it moves")
_BYTES = _o("bytes", INT, doc="bytes moved (its cost)")
define("DMOV.load", "buffer", "bring the region input (codes) from the global buffer, off-chip memory "
       "or memory-mode arrays", _SUB, _o("src", REF), _VECS, _LEVEL, _FRAC, _BYTES, _MEMXBS)
define("DMOV.store", "buffer", "store region output to the global buffer, off-chip memory or memory-mode arrays",
       _SUB, _o("src", REF), _VECS, _LEVEL, _FRAC, _BYTES, _MEMXBS,
       _o("ring", INT, False, "level 'xbmem': the arrays hold the output as a rolling line buffer of this many "
          "bytes (a store waits until the consumer's loads have released what it overwrites)"))
define("DMOV.scatter", "link", "send input codes over a core's link to a virtual crossbar (or one row block)",
       _SUB, _o("src", REF), _VECS, _o("vxb", INT), _LEVEL, _BYTES, _BLOCK)
define("DMOV.writeback", "buffer", "write live data back from memory-mode arrays that switch to compute mode "
       "(a segment boundary, CMSwitch T^wb) to the global buffer or off-chip memory",
       _SUB, _o("src", REF), _o("level", STR, doc="'global' or 'offchip': where the data goes"), _BYTES,
       _o("xbs", TUPLE, doc="the memory-mode arrays holding the data"))
define("DMOV.fetch", "offchip", "bring constant weights over the off-chip interface (before they are written)",
       _SUB, _o("src", REF), _LEVEL, _BYTES)
# ---------------------------------------------------------------------------- digital computation
define("DCOM.quantize", "chip-alu", "float -> integer codes (scale, zero point, signed or unsigned)",
       _SUB, _o("src", REF), _o("dst", REF), _VECS, _o("scale", FLOAT, timed=False), _o("zero", INT, timed=False),
       _o("bits", INT),
       _o("signed", BOOL), _ELEMS,
       _o("at", STR, False, "'chip' (default: the chip ALU) or 'producer': the cores of the regions producing "
          "the input quantised it in their post-processing (DCOM.dequantize requant=...), so it costs nothing here"))
define("DCOM.im2col", "none", "unfold a convolution input into input vectors: the gather pattern of the "
       "DMOV.scatter that sends the unfolded vectors to the crossbar input registers (data movement, no ALU time)",
       _SUB, _o("src", REF), _o("dst", REF), _VECS, _o("kernel", TUPLE), _o("strides", TUPLE),
       _o("padding", TUPLE), _o("dilation", TUPLE), _o("pad_value", INT), _ELEMS)
define("DCOM.reshape", "none", "view codes as (batch, vectors, length)",
       _SUB, _o("src", REF), _o("dst", REF), _VECS, _o("shape", TUPLE), _o("batch_shape", TUPLE, False))
define("DCOM.colsum", "chip-alu", "column sums of a run-time operand (offset removal)",
       _SUB, _o("src", REF), _o("dst", REF), _ELEMS)
define("DCOM.zeros", "none", "clear the integer accumulators", _SUB, _o("dst", REF), _o("shape", TUPLE))
define("DCOM.reduce", "core-alu", "add the partial sums of a layer's row blocks",
       _SUB, _o("dst", REF), _VECS, _o("core", INT), _o("terms", INT), _ELEMS)
define("DCOM.dequantize", "core-alu", "integer accumulators -> float (scales, zero point, bias)",
       _SUB, _o("src", REF), _o("dst", REF), _VECS, _o("core", INT), _o("scale", FLOAT, timed=False),
       _o("zero", INT, False, timed=False), _o("wsum", REF, False), _o("wscale", REF, False), _o("bias", REF, False), _ELEMS,
       _o("requant", INT, False, "elements it also quantises for the regions consuming the output (their "
          "DCOM.quantize at='producer'), charged on the same core ALU"))
define("DCOM.layout", "none", "results into the output layout (NCHW or row-major)",
       _SUB, _o("src", REF), _o("dst", REF), _o("layout", STR), _o("shape", TUPLE))

"""Program format: the layer between the CIM compiler and the simulator.

==============  ================================================================
module          what it holds
==============  ================================================================
``ir``          values, operations, ``parallel{}`` blocks, programs and networks
``ops``         the typed definition of every meta-operator (one place)
``text``        printer and parser (round-trip exactly)
``verify``      the verifier run after code generation
``encode``      the encoded form the simulator's compiled timing path reads (templates, vector ranges)
``pimcomp_isa`` PIMCOMP's pseudo-instructions (Table III) as a lowering, printer, parser
==============  ================================================================
"""

from .ir import Decl, Network, Op, Parallel, Program, Range, Ref, Segment, Stmt, Value, op, op_from, walk
from .ops import OPS, OpDef, Operand, definition, same_timing, timing_key, untimed_operands
from .text import (
    ProgramSyntaxError,
    parse_emitted,
    parse_network,
    parse_program,
    parse_programs,
    print_network,
    print_program,
)
from .verify import ProgramError, verify, verify_network

__all__ = [
    "Decl", "Network", "Op", "Parallel", "Program", "Range", "Ref", "Segment", "Stmt", "Value", "op", "op_from", "walk",
    "OPS", "OpDef", "Operand", "definition", "same_timing", "timing_key", "untimed_operands",
    "ProgramSyntaxError", "parse_emitted", "parse_network", "parse_program", "parse_programs",
    "print_network", "print_program", "ProgramError", "verify", "verify_network",
]

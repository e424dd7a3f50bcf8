"""Program format: PIM command streams, the layer between the code generator and the simulator.

==========  ====================================================================
module      what it holds
==========  ====================================================================
``stream``  the data model: streams, phases, loops, commands, tensor declarations
``text``    the text format: printer and parser (they round-trip)
``expr``    operand values: integer expressions and tensor references
``layout``  on-bank tile layouts (where a core's tile columns live)
==========  ====================================================================
"""

from .expr import TensorRef, eval_expr, format_ref, parse_ref
from .layout import layout_address
from .stream import PHASES, VERSION, Command, Loop, Phase, Stream, StreamFormatError, Tensor
from .text import format_set, parse_set, parse_stream, parse_stream_cached, print_stream

__all__ = [
    "TensorRef", "eval_expr", "format_ref", "parse_ref", "layout_address",
    "PHASES", "VERSION", "Command", "Loop", "Phase", "Stream", "StreamFormatError", "Tensor",
    "format_set", "parse_set", "parse_stream", "parse_stream_cached", "print_stream",
]

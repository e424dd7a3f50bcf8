"""Operand values of the stream language: integer expressions and tensor references.

Expressions (``+ - * // %`` over integers, loop variables, table names and
the unit indices ``g`` and ``c``) are compiled once from a whitelisted
Python AST and evaluated with numpy arrays, so one evaluation covers every
PIM group and core a command addresses.  A tensor reference
``T[e, org:valid:tile:slots, ...]`` names the box of a host tensor a
command moves (:class:`TensorRef`).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import lru_cache

from .stream import StreamFormatError

_ALLOWED = (
    ast.Expression, ast.BinOp, ast.UnaryOp, ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod,
    ast.USub, ast.UAdd, ast.Constant, ast.Name, ast.Load,
)


@lru_cache(maxsize=8192)
def compile_expr(text: str):
    """Compile an integer expression of the stream language."""
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as e:
        raise StreamFormatError(f"bad expression {text!r}: {e.msg}") from None
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED) or (isinstance(node, ast.Constant) and not isinstance(node.value, int)):
            raise StreamFormatError(f"bad expression {text!r}: only integers, names and + - * // % are allowed")
    return compile(tree, "<expr>", "eval")


def eval_expr(text: str, env: dict):
    """Evaluate an expression; names come from ``env`` (ints or numpy arrays)."""
    code = compile_expr(text)
    try:
        return eval(code, {"__builtins__": {}}, env)  # noqa: S307 - whitelisted AST
    except NameError as e:
        raise StreamFormatError(f"expression {text!r}: {e}") from None


@dataclass(frozen=True)
class TensorRef:
    """``T[e0, org:valid:tile:slots, ...]``: a box of a host tensor.

    A component with one expression fixes the index.  ``org:valid:tile:slots``
    spans ``slots`` positions of the on-PIM tile starting at tensor index
    ``org``: the first ``valid`` exist in the tensor, positions up to
    ``tile`` are the core's (zero) padding, the rest are layout slots that are
    never touched.  ``org:valid:slots`` means ``tile == slots``.
    """

    name: str
    comps: tuple[tuple[str, ...], ...]

    @property
    def box(self) -> tuple[int, ...]:
        return tuple(int(c[-1]) for c in self.comps if len(c) >= 3)

    @property
    def tile(self) -> tuple[int, ...]:
        return tuple(int(c[2]) for c in self.comps if len(c) >= 3)


@lru_cache(maxsize=8192)
def parse_ref(text: str) -> TensorRef:
    """Parse ``T[e0, org:valid:tile[:slots], ...]``.

    Raises
    ------
    StreamFormatError
        Not a tensor reference, or a component with 2 or more than 4 parts.
    """
    m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)\[(.*)\]", text)
    if not m:
        raise StreamFormatError(f"bad tensor reference {text!r}")
    comps = []
    for c in m.group(2).split(","):
        parts = tuple(c.split(":"))
        if len(parts) not in (1, 3, 4):
            raise StreamFormatError(f"bad tensor reference {text!r}: component {c!r}")
        comps.append(parts)
    return TensorRef(m.group(1), tuple(comps))


def format_ref(name: str, comps) -> str:
    """The text of a tensor reference (components: one expression, or a tuple of range parts)."""
    return f"{name}[" + ",".join(":".join(str(x) for x in (c if isinstance(c, tuple) else (c,))) for c in comps) + "]"

"""Building blocks of the hardware schemas (pydantic v2 dataclasses).

A hardware description is a tree of frozen pydantic dataclasses; every field
is a key of the TOML file.  The field types below carry their constraints
(strict types, positive / non-negative bounds, finite numbers), so the loader
(:mod:`tvm_cim.common.hardware`) only turns pydantic's errors into messages
that name the file, the dotted key and what was expected.

Each schema module lists, in one place (``NOT_MODELLED``), the keys a file
may set that the compiler and simulator do not read, with the reason;
``tests/test_hardware.py`` fails on a key that is neither read nor listed.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, Strict
from pydantic.dataclasses import dataclass as _pyd_dataclass

CONFIG = ConfigDict(extra="forbid")

# Leaf types: strict (no "128" for 128, no true for 1), bounded, finite.
PositiveInt = Annotated[int, Strict(), Field(gt=0)]
Count = Annotated[int, Strict(), Field(ge=0)]
PositiveFloat = Annotated[float, Strict(), Field(gt=0, allow_inf_nan=False)]
NonNegFloat = Annotated[float, Strict(), Field(ge=0, allow_inf_nan=False)]
Flag = Annotated[bool, Strict()]
Text = Annotated[str, Strict()]


def hw_dataclass(cls):
    """Declare a table of a hardware file: a frozen, keyword-only pydantic dataclass."""
    return _pyd_dataclass(frozen=True, kw_only=True, config=CONFIG)(cls)


def key(default: Any = dataclasses.MISSING, doc: str = "", unit: str = "", factory=None):
    """Declare a key of a hardware table with its documentation and unit."""
    extra = {"unit": unit} if unit else None
    if factory is not None:
        return Field(default_factory=factory, description=doc, json_schema_extra=extra)
    if default is dataclasses.MISSING:
        return Field(description=doc, json_schema_extra=extra)
    return Field(default=default, description=doc, json_schema_extra=extra)


@hw_dataclass
class Meta:
    """Identity and provenance of a hardware description."""

    name: Text = key(doc="short preset name used in target strings, e.g. 'prime'")
    kind: Literal["cim", "pim"] = key(doc="'cim' for crossbar chips, 'pim' for bank-level PIM DRAM")
    description: Text = key("", doc="one-line human description")
    sources: list[Text] = key(factory=list, doc="publications / code the figures come from")
    assumptions: list[Text] = key(factory=list, doc="figures that are assumptions, and why")


class DescriptionRoot:
    """What the root table of every hardware description offers, besides its keys.

    A schema's root class (``@hw_dataclass class XHardware(DescriptionRoot)``)
    has a ``meta`` table; it overrides :meth:`problems` to check values that
    are valid alone but not together (the loader reports each as a key error).
    """

    @property
    def name(self) -> str:
        """The description's short name (``meta.name``), as in target strings."""
        return self.meta.name

    def problems(self) -> list[tuple[str, str, object]]:
        """Values that are valid alone but not together: ``(key, expected, got)``; none by default."""
        return []

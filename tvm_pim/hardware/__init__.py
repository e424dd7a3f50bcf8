"""PIM hardware: the schema of device files and the system / group / core view the compiler uses.

==========  ====================================================================
module      what it holds
==========  ====================================================================
``schema``  the keys of a PIM hardware file (pydantic), command roles, ``NOT_MODELLED``
``view``    :class:`PimView`: DCC's system / PIM group / PIM core levels and the
            command set by role, derived from a description
==========  ====================================================================
"""

from .schema import NOT_MODELLED, PIM_ROLES, PimCommand, PIMHardware
from .view import ELEM_BYTES, PimView, UnsupportedOnDevice

__all__ = ["NOT_MODELLED", "PIM_ROLES", "PimCommand", "PIMHardware", "ELEM_BYTES", "PimView", "UnsupportedOnDevice"]

"""Model zoo: seeded, code-generated ONNX models of published architectures.

See :mod:`tvm_cim.models.zoo` for details.
"""

from . import zoo
from .zoo import *  # noqa: F401,F403  (the zoo's public names, listed in zoo.__all__)

__all__ = list(zoo.__all__)

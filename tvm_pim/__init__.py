"""tvm_pim: bank-level processing-in-memory DRAM (HBM-PIM, AttAcc) as TVM targets.

Importing the package registers ``pim -hw=<preset>`` for every PIM preset in
``targets/`` (and any PIM hardware file on first use), the offload pass that
``relax.build`` runs for those targets and the simulator runtime the built
executables call::

    import tvm_pim, tvm
    from tvm import relax
    ex = relax.build(mod, target="pim -hw=attacc")

The compiler follows DCC (paper 002).  Layers, bottom up (see the README's
PIM section for the module table):

==================  ============================================================
package / module    what it holds
==================  ============================================================
``hardware``        the schema of PIM device files; DCC's system / group / core view
``program``         command streams: data model, text format, expressions, layouts
``simulator``       functional (FP16) and timed execution of command streams
``compiler``        kernels as TIR, the data-centric schedule space, code generation
``cost``            the GPU roofline, a draft's simulated cost, the XGBoost predictor
``search``          tuned databases, meta-schedule tuning, the schedule strategies
``workloads``       kernel sizes of the paper's evaluation, LLM decode layers
``offload``         the Relax pass: patterns, offload decision, lowering
``runtime``         the packed function the VM calls; statistics collection
``report``, ``cli`` reports and ``python -m tvm_pim``
==================  ============================================================

Of :mod:`tvm_cim`, only :mod:`tvm_cim.common` is used.
"""

from __future__ import annotations

from tvm_cim.common import hardware as _hardware
from tvm_cim.common import target as _target

from . import runtime  # noqa: F401  (registers tvm_pim.run_kernel)
from .hardware.schema import PIMHardware
from .offload import OffloadToPIM, last_compile_info, offload_options


def known_presets() -> list[str]:
    """Names of the PIM presets."""
    return _hardware.known_presets("pim")


def load(name_or_path: str) -> PIMHardware:
    """Load a PIM hardware description by preset name or file path.

    Raises
    ------
    tvm_cim.common.hardware.UnknownHardwareError, tvm_cim.common.hardware.HardwareDescriptionError
        See :func:`tvm_cim.common.hardware.load`.
    """
    return _hardware.load(name_or_path, kind="pim")


_target.install()
_target.register_backend("pim", OffloadToPIM)
_target.register_presets("pim")

__all__ = ["known_presets", "load", "OffloadToPIM", "offload_options", "last_compile_info"]

"""tvm_pim: bank-level processing-in-memory DRAM (HBM-PIM, AttAcc) as TVM targets.

Importing the package registers ``pim -hw=<preset>`` for every PIM preset in
``targets/`` (and any PIM hardware file on first use), the offload pass that
``relax.build`` runs for those targets and the simulator runtime the built
executables call::

    import tvm_pim, tvm
    from tvm import relax
    ex = relax.build(mod, target="pim -hw=attacc")

The hardware descriptions share the schema of :mod:`tvm_cim.hardware`
(system / PIM group / PIM core levels, DRAM timing, host model, command set).
The compiler follows DCC (paper 002): a data-centric schedule space of tiling
drafts (:mod:`tvm_pim.space`), a PIM-specific code optimiser
(:mod:`tvm_pim.codegen`), a coupled XGBoost predictor
(:mod:`tvm_pim.predictor`) and meta-schedule tuning (:mod:`tvm_pim.tuning`).
"""

from __future__ import annotations

from tvm_cim.common import target as _target
from tvm_cim.common.hardware import known_presets as _known

from . import runtime  # noqa: F401  (registers tvm_pim.run_kernel)
from .offload import OffloadToPIM, last_compile_info, offload_options


def known_presets() -> list[str]:
    """Names of the PIM presets."""
    return _known("pim")


def load(name_or_path: str):
    """Load a PIM hardware description by preset name or file path."""
    from tvm_cim.common.hardware import load as _load

    return _load(name_or_path, kind="pim")


_target.install()
_target.register_backend("pim", OffloadToPIM)
_target.register_presets("pim")

__all__ = ["known_presets", "load", "OffloadToPIM", "offload_options", "last_compile_info"]

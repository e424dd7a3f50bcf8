"""tvm_pim: bank-level processing-in-memory DRAM (HBM-PIM, AttAcc) as TVM targets.

Importing the package registers ``pim -hw=<preset>`` for every PIM preset in
``targets/`` (and any PIM hardware file on first use)::

    import tvm_pim, tvm
    tvm.target.Target("pim -hw=hbm-pim")

The hardware descriptions share the schema of :mod:`tvm_cim.hardware`
(system / PIM group / PIM core levels, DRAM timing, host model, command set).
"""

from __future__ import annotations

from tvm_cim import target as _target
from tvm_cim.hardware.loader import known_presets as _known


def known_presets() -> list[str]:
    """Names of the PIM presets."""
    return _known("pim")


def load(name_or_path: str):
    """Load a PIM hardware description by preset name or file path."""
    from tvm_cim.hardware.loader import load as _load

    return _load(name_or_path, kind="pim")


_target.install()
_target.register_presets("pim")

__all__ = ["known_presets", "load"]

"""tvm_cim: compile neural networks for computing-in-memory crossbar chips.

Importing the package registers the ``cim -hw=<preset>`` targets (and any
hardware file on first use), the Relax pipeline that ``relax.build`` runs for
them (:func:`tvm_cim.transform.CIMPipeline`) and the simulator runtime the
built executables call::

    import tvm_cim
    from tvm import relax
    ex = relax.build(mod, target="cim -hw=prime")

Layers (see the README's layout table): hardware descriptions
(:mod:`tvm_cim.hardware`, presets in ``targets/``), the compiler
(:mod:`tvm_cim.compiler`: passes, strategies, solvers, estimate, codegen), the
program format (:mod:`tvm_cim.program`) and the simulator
(:mod:`tvm_cim.simulator`); :mod:`tvm_cim.common` is what the CIM and PIM
backends share.
"""

from __future__ import annotations

import importlib.metadata

from . import (
    runtime,  # noqa: F401  (registers tvm_cim.run_region)
    transform,
)
from .common import target as _target
from .common.hardware import (
    HardwareDescriptionError,
    UnknownHardwareError,
    known_presets,
    load,
)
from .compiler import strategies
from .compiler.quantize import CalibrationConfig
from .compiler.transform import CIMPipeline, accuracy_budget, calibration, last_compile_info, offload, scheduling

__version__ = importlib.metadata.version("tvm-cim")  # one place: setup.py

_target.install()
_target.register_backend("cim", CIMPipeline)
_target.register_presets("cim")

__all__ = [
    "transform",
    "strategies",
    "scheduling",
    "calibration",
    "accuracy_budget",
    "CIMPipeline",
    "offload",
    "last_compile_info",
    "CalibrationConfig",
    "load",
    "known_presets",
    "HardwareDescriptionError",
    "UnknownHardwareError",
]

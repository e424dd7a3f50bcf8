"""tvm_cim: compile neural networks for computing-in-memory crossbar chips.

Importing the package registers the ``cim -hw=<preset>`` targets (and any
hardware file on first use), the offload pass that ``relax.build`` runs for
them, and the simulator runtime the built executables call::

    import tvm_cim
    from tvm import relax
    ex = relax.build(mod, target="cim -hw=prime")
"""

from __future__ import annotations

import contextlib

from . import runtime  # noqa: F401  (registers tvm_cim.run_region)
from . import target  # noqa: F401
from . import target as _target
from .compiler.lower import OffloadToCIM, last_compile_info, offload
from .compiler.quantize import CalibrationConfig
from .hardware.loader import (
    HardwareDescriptionError,
    UnknownHardwareError,
    known_presets,
    load,
)

__version__ = "0.1.0"

_target.install()
_target.register_offload("cim", OffloadToCIM)
_target.register_presets("cim")


@contextlib.contextmanager
def calibration(samples: int = 1, seed: int = 0, inputs=None):
    """Set how builds inside the block calibrate activations.

    Parameters
    ----------
    samples : int
        Seeded random samples when ``inputs`` is not given.
    seed : int
        Seed of those samples.
    inputs : list of dict, optional
        Calibration inputs (graph input name -> array).
    """
    from .compiler import lower

    prev = lower.calibration_config()
    lower.set_calibration_config(CalibrationConfig(samples=samples, seed=seed, inputs=inputs))
    try:
        yield
    finally:
        lower.set_calibration_config(prev)


@contextlib.contextmanager
def scheduling(strategy: str = "cim-mlc", options=None):
    """Set the scheduling strategy of builds inside the block.

    Parameters
    ----------
    strategy : {'none', 'greedy', 'puma', 'cim-mlc'}
        ``cim-mlc`` (default) is the multi-level method of CIM-MLC; ``greedy``
        the Poly-Schedule baseline; ``puma`` inter-layer pipeline without
        duplication; ``none`` no optimisation.
    options : tvm_cim.compiler.schedule.Options, optional
        Switch individual techniques (ablations).
    """
    from .compiler import lower

    prev = lower.scheduling()
    lower.set_scheduling(strategy, options)
    try:
        yield
    finally:
        lower.set_scheduling(*prev)


__all__ = [
    "scheduling",
    "OffloadToCIM",
    "offload",
    "last_compile_info",
    "calibration",
    "load",
    "known_presets",
    "HardwareDescriptionError",
    "UnknownHardwareError",
]

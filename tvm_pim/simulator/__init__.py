"""The bank-PIM simulator: command streams timed and executed on a device description.

==============  ================================================================
module          what it holds
==============  ================================================================
``engine``      :class:`Simulator`: checks a stream against the device, runs both models
``timing``      the timing and energy model, :data:`TIMING_MODEL_VERSION`, :class:`SimResult`
``functional``  FP16 execution as the near-bank units compute
``decode``      a command's role and the environment of its operand expressions
==============  ================================================================
"""

from .decode import SimulationError
from .engine import Simulator
from .timing import TIMING_MODEL_VERSION, SimResult

__all__ = ["SimulationError", "Simulator", "TIMING_MODEL_VERSION", "SimResult"]

"""The bank-PIM simulator: one entry point that times a command stream and computes its values.

It sees only a command stream (:mod:`tvm_pim.program`) and the hardware
description; it knows what each command does from its *roles* in the
hardware file.  :class:`Simulator` checks that the stream fits the device,
then runs the timing model (:mod:`tvm_pim.simulator.timing`) and, if asked,
the functional model (:mod:`tvm_pim.simulator.functional`).  A simulator
keeps no state between runs.
"""

from __future__ import annotations

import numpy as np

from ..hardware.schema import PIMHardware
from ..hardware.view import PimView
from ..program.stream import Stream
from ..program.text import parse_stream
from .decode import SimulationError
from .functional import FunctionalModel
from .timing import SimResult, TimingModel


class Simulator:
    """Runs command streams on one PIM device.

    Parameters
    ----------
    hw : PIMHardware
    """

    def __init__(self, hw: PIMHardware):
        self.hw = hw
        self.view = PimView(hw)
        self.timing = TimingModel(self.view)
        self.functional = FunctionalModel(self.view)

    def run(self, stream: Stream | str, inputs: dict[str, np.ndarray] | None = None, functional: bool = True) -> SimResult:
        """Execute a stream.

        Parameters
        ----------
        stream : Stream or str
            A parsed stream or its text.
        inputs : dict of str to numpy.ndarray, optional
            Host tensors (inputs and resident ones); needed when ``functional``.
        functional : bool
            Compute values (else timing only).

        Returns
        -------
        SimResult
        """
        if isinstance(stream, str):
            stream = parse_stream(stream)
        if stream.device != self.hw.meta.name:
            raise SimulationError(f"stream is for device '{stream.device}', simulator models '{self.hw.meta.name}'")
        if stream.groups > self.view.groups or stream.cores > self.view.cores_per_group:
            raise SimulationError(
                f"stream uses {stream.groups} groups x {stream.cores} cores; the device has "
                f"{self.view.groups} x {self.view.cores_per_group}"
            )
        res = self.timing.time(stream)
        if functional:
            res.output = self.functional.execute(stream, inputs or {})
        return res

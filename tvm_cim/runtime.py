"""The packed function through which the Relax VM runs regions on the simulator.

``tvm_cim.run_region(*inputs, *consts, hw_json, program_text, out)`` parses
the program (cached), finds the simulated chip for the hardware description
(one per description, so weights written by ``setup`` stay between runs),
executes it and writes the float output.  Per-region statistics are appended
to every active :func:`collect` list.
"""

from __future__ import annotations

import contextlib
from functools import lru_cache

import numpy as np
import tvm
from tqdm import tqdm

from .common.runtime import Collectors, PerDevice
from .compiler.transform import compiled_program
from .simulator.engine import Chip, Options

_OPTIONS = Options()
_CHIPS = PerDevice(lambda hw: Chip(hw, _OPTIONS))
_COLLECTORS = Collectors()
_BARS: list = []  # active progress bars (:func:`progress`)


@lru_cache(maxsize=4096)
def _program(text: str):
    # the program object the compiler generated, if this process compiled it (no re-parse)
    return compiled_program(text)


def chip_for(hw_json: str) -> Chip:
    """The simulated chip of a hardware description (created on first use)."""
    return _CHIPS.get(hw_json)


def set_options(**kwargs) -> None:
    """Change simulator options (see :class:`tvm_cim.simulator.engine.Options`)."""
    for k, v in kwargs.items():
        if not hasattr(_OPTIONS, k):
            raise ValueError(f"unknown simulator option {k!r}")
        setattr(_OPTIONS, k, v)
    if "nonideal" in kwargs:  # crossbars programmed before hold the other device's cells
        reset()


def reset() -> None:
    """Forget every chip's crossbar contents (the next run rewrites weights)."""
    _CHIPS.clear()


@contextlib.contextmanager
def progress(total: int, desc: str = "simulating regions"):
    """Show a progress bar of the regions run inside the block (on terminals only).

    Parameters
    ----------
    total : int
        Regions expected.
    desc : str
        Label of the bar.
    """
    bar = tqdm(total=total, desc=desc, unit="region", disable=None, leave=False)
    _BARS.append(bar)
    try:
        yield bar
    finally:
        _BARS.remove(bar)
        bar.close()


@contextlib.contextmanager
def collect():
    """Collect the :class:`RegionStats` of every region run inside the block.

    Yields
    ------
    list of RegionStats
    """
    with _COLLECTORS.collect() as stats:
        yield stats


@tvm.register_global_func("tvm_cim.run_region", override=True)
def _run_region(*args):
    out = args[-1]
    prog = _program(str(args[-2]))
    chip = chip_for(str(args[-3]))
    names = [d.name for d in prog.decls if d.role in ("input", "const")]
    if len(names) != len(args) - 3:
        raise RuntimeError(
            f"program {prog.name} declares {len(names)} tensors but the call passes {len(args) - 3}"
        )
    tensors = {n: a.numpy() for n, a in zip(names, args[:-3])}
    env, stats = chip.run(prog, tensors)
    result = env["out"]
    out.copyfrom(np.ascontiguousarray(result, dtype=np.float32))
    _COLLECTORS.publish(stats)
    for bar in _BARS:
        bar.update(1)

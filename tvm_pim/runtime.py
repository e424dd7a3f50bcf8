"""The packed function through which the Relax VM runs PIM kernels on the simulator.

``tvm_pim.run_kernel(*args, *consts, hw_json, stream_text, binding_json, out)``
maps the Relax operands to the kernel's tensors (the layout steps folded from
the graph, then reshape / transpose as the binding says, FP16), runs the stream on the simulator of that hardware
description (functional and timing) and writes the output.  Statistics of
every kernel run are appended to every active :func:`collect` list.
"""

from __future__ import annotations

import contextlib
import json

import numpy as np
import tvm

from tvm_cim.common.runtime import Collectors, PerDevice

from .program.text import parse_stream_cached
from .simulator.engine import Simulator

RUN_KERNEL = "tvm_pim.run_kernel"

_SIMS = PerDevice(Simulator)  # one simulator per embedded hardware description (its JSON text)
_COLLECTORS = Collectors()


@contextlib.contextmanager
def collect():
    """Collect the statistics of every PIM kernel run inside the block.

    Yields
    ------
    list of dict
        One entry per kernel run: ``name``, ``kind``, ``latency_ns``,
        ``data_rearrangement_ns``, ``compute_ns``, ``host_ns``, ``energy_pj``,
        ``command_counts`` ...
    """
    with _COLLECTORS.collect() as stats:
        yield stats


def bind(binding: dict, args: list[np.ndarray]) -> dict[str, np.ndarray]:
    """Kernel tensors from the Relax operands, as the binding describes."""
    out = {}
    for name, b in binding["tensors"].items():
        a = np.asarray(args[b["arg"]])
        for step, val in b.get("steps", ()):  # layout operators folded into the kernel (offload.peel_layout)
            if step == "permute":
                a = np.transpose(a, val)
            elif step == "reshape":
                a = a.reshape(val)
            elif step == "broadcast":
                a = np.broadcast_to(a, val)
            else:
                raise ValueError(f"unknown layout step {step!r} in the kernel binding")
        if b.get("perm"):
            a = np.transpose(a, b["perm"])
        out[name] = np.ascontiguousarray(a.reshape(b["shape"])).astype(np.float16)
    return out


@tvm.register_global_func(RUN_KERNEL, override=True)
def _run_kernel(*args):
    out = args[-1]
    binding = json.loads(str(args[-2]))
    stream = parse_stream_cached(str(args[-3]))
    sim = _SIMS.get(str(args[-4]))
    arrays = [a.numpy() for a in args[:-4]]
    tensors = bind(binding, arrays)
    res = sim.run(stream, tensors)
    result = res.output.astype(np.float32).reshape(binding["out_shape"])
    out.copyfrom(np.ascontiguousarray(result, dtype=np.float32))
    if _COLLECTORS:
        entry = {"name": binding.get("name", ""), "kind": stream.kernel_data()["kind"], **res.as_dict()}
        _COLLECTORS.publish(entry)

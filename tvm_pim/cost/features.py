"""Features of a (kernel, draft, device) triple: what DCC's coupled predictor learns from.

Paper 002 sec. IV-D: the features describe the kernel, the draft and the
device, so that one model can serve several backends: sizes,
per-dimension-set allocations and per-core lengths, padding, units used,
bytes the draft moves and which inputs can be broadcast, plus the device's
organisation, DRAM timing and bandwidths.  A few first-order estimates a PIM
programmer would compute (column commands per core, row activations, bytes
per channel) are added so that the trees learn corrections rather than the
whole DRAM behaviour.

:data:`FEATURE_VERSION` names this encoding; a saved predictor trained on
another version is refused.
"""

from __future__ import annotations

import math

import numpy as np

from ..compiler.kernels import KINDS, KernelSpec
from ..compiler.space import Draft, dimension_sets
from ..hardware.view import ELEM_BYTES, PimView, ceil_div

FEATURE_VERSION = 3
_DIMS = ("b", "m", "n", "k", "i")

# caches: (spec, hardware digest) -> the static part; spec -> dimension-set extents
_STATIC: dict = {}
_SETS: dict = {}


def _l2(x: float) -> float:
    return math.log2(max(float(x), 1.0))


def _static_features(spec: KernelSpec, view: PimView) -> list[float]:
    """Kernel and device part of the features (the same for every draft)."""
    key = (spec, view.digest)
    hit = _STATIC.get(key)
    if hit is not None:
        return hit
    f: list[float] = [1.0 if spec.kind == k else 0.0 for k in KINDS]
    hw = view.hw
    t = hw.dram.timing
    f += [
        _l2(view.groups), _l2(view.cores_per_group), _l2(view.lanes), float(t.tccd_l), float(t.trcd + t.trp),
        t.tck_ns, _l2(view.channel_bw_gbs), _l2(view.host_bw_gbs), 1.0 if view.contraction == "dot" else 0.0,
        float(view.input_regs), float(view.acc_regs), _l2(view.core_row_cols),
        1.0 if hw.group.accumulator else 0.0,
    ]
    streamed = sum(int(np.prod(spec.shape(t_))) for t_ in spec.inputs if spec.role(t_) == "input")
    out = int(np.prod(spec.shape(spec.output)))
    f += [_l2(streamed * ELEM_BYTES), _l2(out * ELEM_BYTES)]
    _STATIC[key] = f
    return f



def features(spec: KernelSpec, draft: Draft, view: PimView) -> np.ndarray:
    """Feature vector of a (kernel, draft, device) triple.

    Besides the raw configuration (sizes, per-dimension-set groups, cores,
    per-core lengths, padding, units used, index ranges) it carries a few
    first-order estimates that a PIM programmer would compute -- column
    commands per core, row activations, bytes each channel moves for the
    streamed inputs and the (partial) outputs, per-core input writes -- so
    that the trees learn corrections rather than the whole DRAM behaviour.
    """
    f = list(_static_features(spec, view))
    dims = spec.dims
    sets = _SETS.get(spec)
    if sets is None:
        sets = _SETS[spec] = {s.name: s.extent for s in dimension_sets(spec)}
    parts = {p.dim: p for p in draft.parts}
    per = {d: ceil_div(E, parts[d].groups * parts[d].cores) if d in parts else E for d, E in sets.items()}
    for d in _DIMS:
        E = dims.get(d, 1)
        p = parts.get(d)
        g, c = (p.groups, p.cores) if p else (1, 1)
        L = per.get(d, 1)
        f += [_l2(E), _l2(g), _l2(c), _l2(L), (L * g * c) / max(E, 1)]
    lanes = view.elems_per_column
    lane_len = per[spec.lane_dim]
    cols = ceil_div(lane_len, lanes)
    vec = 1
    for d, L in per.items():
        if d != spec.lane_dim:
            vec *= L
    G = draft.groups_used
    C = draft.cores_used
    f += [_l2(G), _l2(C), 1.0 if draft.index_range == "exact" else 0.0]
    f += [_l2(vec * cols), (lane_len % lanes) / lanes, _l2(cols)]
    kparts = 1
    for d in spec.reduce_dims:
        p = parts.get(d)
        if p:
            kparts *= p.groups * p.cores
    out = int(np.prod(spec.shape(spec.output)))
    shared = all((parts.get(d).cores if parts.get(d) else 1) == 1 for d in ("b", "m", "k"))
    # first-order estimates
    ccols = vec * cols * (1 if spec.kind != "attn" else 2)
    rows = ccols / view.core_row_cols
    streamed = sum(int(np.prod(spec.shape(t))) for t in spec.inputs if spec.role(t) == "input") * ELEM_BYTES
    ch_bytes_in = streamed / max(G, 1)
    out_parts = kparts // (C if (view.hw.group.accumulator and spec.kind != "va") else 1) if kparts > 1 else 1
    ch_bytes_out = out * max(out_parts, 1) * (lanes if view.contraction == "mac" and spec.kind in ("gemv", "red") else 1) * ELEM_BYTES / max(G, 1)
    x_writes = (per.get("b", 1) * per.get("m", 1) * cols) * (1 if shared else C)
    f += [_l2(kparts), _l2(out * kparts * ELEM_BYTES), 1.0 if shared else 0.0]
    f += [_l2(ccols), _l2(rows), _l2(ch_bytes_in), _l2(ch_bytes_out), _l2(x_writes), _l2(G * C)]
    return np.asarray(f, dtype=np.float32)

"""The memory-bound kernels PIM runs, each as a TIR PrimFunc plus a numpy reference.

Kernels (paper 002 sec. V: GEMV, RED, VA, RELU on HBM-PIM; GEMV, RED, ATTN on
AttAcc):

``gemv``  ``y[b, m, n] = sum_k A[b, n, k] * x[b, m, k]`` -- a batch of ``b``
          independent matrices (heads, or 1 for a shared weight), each
          multiplied by ``m`` vectors (decode rows sharing the weight).
``red``   ``y[b, n] = sum_k A[b, n, k]`` (row sums).
``va``    ``C[b, i] = A[b, i] + B[b, i]``.
``relu``  ``C[b, i] = max(A[b, i], 0)``.
``attn``  ``o[b, :] = softmax(scale * K[b] q[b]) V[b]`` for ``b`` = batch x
          heads, ``n`` tokens, head size ``k``.

Every tensor has a *residency*: ``input`` (produced by the host, in host
layout: rearranged into PIM layout on every call), ``resident`` (already in
PIM memory in the layout the schedule chose, e.g. weights and the KV cache;
its layout cost is a one-time setup) or ``output`` (rearranged back to host
layout).  By default GEMV matrices and ATTN's K/V are resident and everything
else is an input, as in DCC's evaluation where weights and KV caches live in
the PIM devices.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np
import tvm
from tvm import te

KINDS = ("gemv", "red", "va", "relu", "attn")

_DIMS = {
    "gemv": ("b", "m", "n", "k"),
    "red": ("b", "n", "k"),
    "va": ("b", "i"),
    "relu": ("b", "i"),
    "attn": ("b", "n", "k"),
}
_TENSORS = {
    "gemv": {"A": ("b", "n", "k"), "x": ("b", "m", "k"), "y": ("b", "m", "n")},
    "red": {"A": ("b", "n", "k"), "y": ("b", "n")},
    "va": {"A": ("b", "i"), "B": ("b", "i"), "C": ("b", "i")},
    "relu": {"A": ("b", "i"), "C": ("b", "i")},
    "attn": {"K": ("b", "n", "k"), "V": ("b", "n", "k"), "q": ("b", "k"), "o": ("b", "k")},
}
_OUTPUT = {"gemv": "y", "red": "y", "va": "C", "relu": "C", "attn": "o"}
_RESIDENT = {"gemv": ("A",), "red": (), "va": (), "relu": (), "attn": ("K", "V")}
# the dimension that lies along SIMD lanes (contiguous within a column)
_LANE = {"gemv": "k", "red": "k", "va": "i", "relu": "i", "attn": "k"}
_REDUCE = {"gemv": ("k",), "red": ("k",), "va": (), "relu": (), "attn": ("k",)}


class KernelShapeError(ValueError):
    """A kernel was given an impossible shape."""


@dataclass(frozen=True)
class KernelSpec:
    """A PIM kernel instance: kind, sizes and tensor residency.

    Parameters
    ----------
    kind : {'gemv', 'red', 'va', 'relu', 'attn'}
    sizes : tuple of (str, int)
        Extent of every dimension, in the kind's dimension order.
    resident : tuple of str
        Tensors already in PIM memory (see the module docstring).
    scale : float
        Softmax scale of ``attn``.
    """

    kind: str
    sizes: tuple[tuple[str, int], ...]
    resident: tuple[str, ...] = ()
    scale: float = 1.0
    _cache: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    # ------------------------------------------------------------------ construction
    @staticmethod
    def make(kind: str, resident: tuple[str, ...] | None = None, scale: float | None = None, **sizes: int) -> "KernelSpec":
        """Build a spec, checking the sizes.

        Examples
        --------
        >>> KernelSpec.make("gemv", b=32, m=1, n=4096, k=128)
        """
        if kind not in KINDS:
            raise KernelShapeError(f"unknown PIM kernel '{kind}'; known: {', '.join(KINDS)}")
        dims = _DIMS[kind]
        missing = [d for d in dims if d not in sizes]
        extra = sorted(set(sizes) - set(dims))
        if missing or extra:
            raise KernelShapeError(f"kernel {kind} takes sizes {', '.join(dims)}; missing {missing}, unknown {extra}")
        for d in dims:
            v = sizes[d]
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v <= 0:
                raise KernelShapeError(f"kernel {kind}: size {d} must be a positive integer, got {v!r}")
        res = _RESIDENT[kind] if resident is None else tuple(resident)
        bad = [t for t in res if t not in _TENSORS[kind] or t == _OUTPUT[kind]]
        if bad:
            raise KernelShapeError(f"kernel {kind}: cannot make {bad} resident; tensors are {list(_TENSORS[kind])}")
        if scale is None:
            scale = 1.0 / math.sqrt(sizes["k"]) if kind == "attn" else 1.0
        return KernelSpec(kind, tuple((d, int(sizes[d])) for d in dims), tuple(sorted(res)), float(scale))

    @staticmethod
    def from_json(text: str) -> "KernelSpec":
        """Inverse of :meth:`to_json`."""
        d = json.loads(text)
        return KernelSpec.make(d["kind"], resident=tuple(d["resident"]), scale=d["scale"], **d["sizes"])

    def to_json(self) -> str:
        """The spec as canonical JSON (kind, sizes, residency, scale)."""
        return json.dumps(
            {"kind": self.kind, "sizes": dict(self.sizes), "resident": list(self.resident), "scale": self.scale},
            sort_keys=True,
        )

    # ------------------------------------------------------------------ properties
    @property
    def dims(self) -> dict[str, int]:
        return dict(self.sizes)

    @property
    def dim_names(self) -> tuple[str, ...]:
        return tuple(d for d, _ in self.sizes)

    @property
    def tensors(self) -> dict[str, tuple[str, ...]]:
        return dict(_TENSORS[self.kind])

    @property
    def output(self) -> str:
        return _OUTPUT[self.kind]

    @property
    def inputs(self) -> list[str]:
        return [t for t in _TENSORS[self.kind] if t != self.output]

    @property
    def lane_dim(self) -> str:
        return _LANE[self.kind]

    @property
    def reduce_dims(self) -> tuple[str, ...]:
        return _REDUCE[self.kind]

    def role(self, tensor: str) -> str:
        """``'output'``, ``'resident'`` or ``'input'`` (see the module docstring)."""
        if tensor == self.output:
            return "output"
        return "resident" if tensor in self.resident else "input"

    def shape(self, tensor: str) -> tuple[int, ...]:
        """The shape of one of the kernel's tensors."""
        d = self.dims
        return tuple(d[x] for x in _TENSORS[self.kind][tensor])

    @property
    def name(self) -> str:
        """Workload name, e.g. ``gemv_b32_m1_n4096_k128``."""
        s = "_".join(f"{d}{v}" for d, v in self.sizes)
        res = "".join(self.resident)
        return f"{self.kind}_{s}" + (f"_r{res}" if res != "".join(_RESIDENT[self.kind]) else "")

    # ------------------------------------------------------------------ cost figures
    def flops(self) -> float:
        """Arithmetic operations of the kernel (a multiply-add counts two)."""
        d = self.dims
        if self.kind == "gemv":
            return 2.0 * d["b"] * d["m"] * d["n"] * d["k"]
        if self.kind == "red":
            return float(d["b"] * d["n"] * d["k"])
        if self.kind in ("va", "relu"):
            return float(d["b"] * d["i"])
        return float(d["b"] * (4 * d["n"] * d["k"] + 5 * d["n"]))

    def bytes(self, elem_bytes: int = 2) -> float:
        """Bytes a host kernel reads and writes (each tensor once, FP16)."""
        return float(sum(int(np.prod(self.shape(t))) for t in self.tensors) * elem_bytes)

    # ------------------------------------------------------------------ data
    def random_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Seeded FP16 inputs (standard normal, FP16-representable)."""
        rng = np.random.default_rng(seed)
        return {t: rng.standard_normal(self.shape(t)).astype(np.float16) for t in self.inputs}

    def reference(self, inputs: dict[str, np.ndarray]) -> np.ndarray:
        """The float32 numpy result (the independent reference)."""
        f = {k: np.asarray(v, np.float32) for k, v in inputs.items()}
        if self.kind == "gemv":
            return np.einsum("bnk,bmk->bmn", f["A"], f["x"])
        if self.kind == "red":
            return f["A"].sum(axis=-1)
        if self.kind == "va":
            return f["A"] + f["B"]
        if self.kind == "relu":
            return np.maximum(f["A"], 0.0)
        s = np.einsum("bnk,bk->bn", f["K"], f["q"]) * np.float32(self.scale)
        s = s - s.max(axis=-1, keepdims=True)
        p = np.exp(s)
        p /= p.sum(axis=-1, keepdims=True)
        return np.einsum("bn,bnk->bk", p, f["V"])

    def error_bound(self, inputs: dict[str, np.ndarray], chain: int) -> np.ndarray:
        """Elementwise bound on |PIM - reference| for FP16 arithmetic.

        ``chain`` is the longest sequence of FP16 roundings an output goes
        through (products, sequential FP16 additions on the core, final FP16
        store).  The bound is the classic ``gamma_n * sum |terms|`` of
        floating-point summation (Higham, Accuracy and Stability of
        Numerical Algorithms, eq. 3.5) with the FP16 unit roundoff 2^-11,
        plus one rounding of the result.  It also covers the FP16 rounding
        of the inputs' float32 sources, because inputs are FP16 already.
        """
        u = 2.0**-11
        n = max(1, chain)
        gamma = n * u / (1 - n * u) if n * u < 0.5 else 1.0
        f = {k: np.abs(np.asarray(v, np.float64)) for k, v in inputs.items()}
        if self.kind == "gemv":
            mag = np.einsum("bnk,bmk->bmn", f["A"], f["x"])
        elif self.kind == "red":
            mag = f["A"].sum(axis=-1)
        elif self.kind == "va":
            mag = f["A"] + f["B"]
        elif self.kind == "relu":
            mag = f["A"]
        else:
            # scores carry gamma*|K||q|*scale; softmax is 1-Lipschitz in the max-norm of the
            # scores (times 2 for the normalisation), and the weighted sum of V adds its own gamma.
            smag = np.einsum("bnk,bk->bn", f["K"], f["q"]) * self.scale
            ds = gamma * smag.max(axis=-1) * 2.0 + 4 * u
            vmax = f["V"].max(axis=1)
            mag = (ds[:, None] + gamma) * vmax + vmax * 2 * u
            return mag + u * np.abs(self.reference(inputs))
        return gamma * mag + u * np.abs(self.reference(inputs))

    # ------------------------------------------------------------------ TIR
    def prim_func(self):
        """The kernel as a TIR PrimFunc (FP16), built with ``te``.

        The function carries the spec as the attribute ``pim.kernel`` so that
        schedule-space functions and tuning pieces can recover it.
        """
        if "pf" in self._cache:
            return self._cache["pf"]
        d = self.dims
        dt = "float16"
        if self.kind == "gemv":
            A = te.placeholder((d["b"], d["n"], d["k"]), dt, name="A")
            x = te.placeholder((d["b"], d["m"], d["k"]), dt, name="x")
            k = te.reduce_axis((0, d["k"]), name="k")
            y = te.compute((d["b"], d["m"], d["n"]), lambda b, m, n: te.sum(A[b, n, k] * x[b, m, k], axis=k), name="gemv")
            args = [A, x, y]
        elif self.kind == "red":
            A = te.placeholder((d["b"], d["n"], d["k"]), dt, name="A")
            k = te.reduce_axis((0, d["k"]), name="k")
            y = te.compute((d["b"], d["n"]), lambda b, n: te.sum(A[b, n, k], axis=k), name="red")
            args = [A, y]
        elif self.kind == "va":
            A = te.placeholder((d["b"], d["i"]), dt, name="A")
            B = te.placeholder((d["b"], d["i"]), dt, name="B")
            C = te.compute((d["b"], d["i"]), lambda b, i: A[b, i] + B[b, i], name="va")
            args = [A, B, C]
        elif self.kind == "relu":
            A = te.placeholder((d["b"], d["i"]), dt, name="A")
            C = te.compute((d["b"], d["i"]), lambda b, i: te.max(A[b, i], te.const(0, dt)), name="relu")
            args = [A, C]
        else:
            K = te.placeholder((d["b"], d["n"], d["k"]), dt, name="K")
            V = te.placeholder((d["b"], d["n"], d["k"]), dt, name="V")
            q = te.placeholder((d["b"], d["k"]), dt, name="q")
            k = te.reduce_axis((0, d["k"]), name="k")
            s = te.compute(
                (d["b"], d["n"]),
                lambda b, n: te.sum(K[b, n, k] * q[b, k], axis=k),
                name="attn",  # the scores block carries the draft
            )
            n1 = te.reduce_axis((0, d["n"]), name="n")
            mx = te.compute((d["b"],), lambda b: te.max(s[b, n1], axis=n1), name="attn_max")
            e = te.compute((d["b"], d["n"]), lambda b, n: te.exp((s[b, n] - mx[b]) * te.const(self.scale, dt)), name="attn_exp")
            n2 = te.reduce_axis((0, d["n"]), name="n")
            den = te.compute((d["b"],), lambda b: te.sum(e[b, n2], axis=n2), name="attn_sum")
            n3 = te.reduce_axis((0, d["n"]), name="n")
            acc = te.compute((d["b"], d["k"]), lambda b, k: te.sum(e[b, n3] * V[b, n3, k], axis=n3), name="attn_pv")
            o = te.compute((d["b"], d["k"]), lambda b, k: acc[b, k] / den[b], name="attn_out")
            args = [K, V, q, o]
        f = te.create_prim_func(args).with_attr("pim.kernel", self.to_json()).with_attr("global_symbol", self.name)
        self._cache["pf"] = f
        return f

    def ir_module(self) -> tvm.IRModule:
        """An IRModule whose ``main`` is :meth:`prim_func`."""
        return tvm.IRModule({"main": self.prim_func()})

    @property
    def block_name(self) -> str:
        """The TIR block that carries the schedule (draft) annotations."""
        return self.kind


def spec_of(func) -> KernelSpec:
    """Recover the :class:`KernelSpec` of a kernel PrimFunc (or an IRModule holding one)."""
    if isinstance(func, tvm.IRModule):
        func = func["main"]
    attrs = func.attrs
    if attrs is None or "pim.kernel" not in attrs:
        raise ValueError("not a tvm_pim kernel: the PrimFunc has no 'pim.kernel' attribute")
    return KernelSpec.from_json(str(attrs["pim.kernel"]))

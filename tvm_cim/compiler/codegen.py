"""Emit the meta-operator program of one region (CIM-MLC meta-operator flow).

The read meta-operator follows the preset's computing mode (paper 003 sec. 3.3):

* ``crossbar`` mode: one ``CIM.read_xb`` per crossbar tile;
* ``core`` mode: one ``CIM.read_core`` per core, covering the tiles held by
  that core's crossbars;
* ``wordline`` mode: one ``CIM.read_row`` per group of ``rows_active``
  wordlines of each tile.

Tensor conventions inside a program (see :mod:`tvm_cim.simulator.engine`):
``%x`` (and ``%y`` for a run-time second operand) are the float inputs, ``%xq``
the quantised codes, ``%xm`` the ``(Bt, M, K)`` matrix of input vectors,
``%acc`` the ``(Bt, M, N)`` integer accumulators and ``%out`` the float output.
"""

from __future__ import annotations

import numpy as np

from ..hardware.schema import CIMHardware
from ..program import Decl, Op, Parallel, Program, Range, Ref, op
from .mapping import Placement, precision
from .region import CONV2D, DMATMUL, MATMUL, Region


def _reads(region: Region, pl: Placement, idx: list[int], hw: CIMHardware, src: str) -> list[Op]:
    mode = hw.chip.computing_mode
    batch = region.batch
    extra = {"batch": batch} if batch > 1 else {}
    out: list[Op] = []
    if mode == "core":
        per_core = hw.core.crossbars
        by_core: dict[int, list[int]] = {}
        for i in idx:
            by_core.setdefault(pl.xbs[i] // per_core, []).append(i)
        for core, ids in by_core.items():
            out.append(
                op(
                    "CIM.read_core",
                    core=core,
                    xbs=tuple(pl.xbs[i] for i in ids),
                    src=Ref(src),
                    rows=tuple(Range(pl.tiles[i].k0, pl.tiles[i].k1) for i in ids),
                    dst=Ref("acc"),
                    cols=tuple(Range(pl.tiles[i].n0, pl.tiles[i].n1) for i in ids),
                    **extra,
                )
            )
        return out
    for i in idx:
        t = pl.tiles[i]
        if mode == "wordline":
            ra = hw.crossbar.rows_active
            for r0 in range(t.k0, t.k1, ra):
                out.append(
                    op(
                        "CIM.read_row",
                        xb=pl.xbs[i],
                        src=Ref(src),
                        rows=Range(r0, min(t.k1, r0 + ra)),
                        base=t.k0,
                        dst=Ref("acc"),
                        cols=Range(t.n0, t.n1),
                        **extra,
                    )
                )
        else:
            out.append(
                op(
                    "CIM.read_xb",
                    xb=pl.xbs[i],
                    src=Ref(src),
                    rows=Range(t.k0, t.k1),
                    dst=Ref("acc"),
                    cols=Range(t.n0, t.n1),
                    **extra,
                )
            )
    return out


def _writes(region: Region, pl: Placement, idx: list[int]) -> list[Op]:
    src = "w" if region.kind != DMATMUL else "yq"
    extra = {"batch": region.batch} if region.batch > 1 else {}
    return [
        op(
            "CIM.write_xb",
            xb=pl.xbs[i],
            src=Ref(src),
            rows=Range(pl.tiles[i].k0, pl.tiles[i].k1),
            cols=Range(pl.tiles[i].n0, pl.tiles[i].n1),
            **extra,
        )
        for i in idx
    ]


def generate(region: Region, pl: Placement, hw: CIMHardware) -> Program:
    """Generate the meta-operator program of a region.

    Parameters
    ----------
    region : Region
        The quantised operator.
    pl : Placement
        Its crossbar tiles and allocation (from :func:`mapping.allocate`).
    hw : CIMHardware
        The chip.

    Returns
    -------
    Program
        Declares ``%x`` (and ``%y``) as inputs, the constants
        ``%w, %wscale, %wsum[, %bias]`` for constant-weight operators, and the
        output ``%out``.
    """
    m, k, n = region.mkn
    bt = region.batch
    wbits, bits = precision(hw)
    decls = [Decl("input", "x", "float32", tuple(region.in_shapes[0]))]
    if region.kind == DMATMUL:
        decls.append(Decl("input", "y", "float32", tuple(region.in_shapes[1])))
    else:
        decls += [
            Decl("const", "w", "int8", (k, n)),
            Decl("const", "wscale", "float32", (n,)),
            Decl("const", "wsum", "int32", (n,)),
        ]
        if region.bias is not None:
            decls.append(Decl("const", "bias", "float32", (n,)))
    decls.append(Decl("output", "out", "float32", tuple(region.out_shape)))

    attrs = [
        ("hw", hw.name),
        ("mode", hw.chip.computing_mode),
        ("op", region.kind),
        ("M", m),
        ("K", k),
        ("N", n),
        ("batch", bt),
        ("weight_bits", wbits),
        ("input_bits", bits),
        ("tiles", len(pl.tiles)),
        ("passes", len(pl.passes)),
        ("segment", pl.segment),
        ("resident", pl.resident),
    ]

    run: list = [op("DMOV", op="load", src=Ref("x"), level="global", bytes=int(np.prod(region.in_shapes[0])) * 4)]
    run.append(
        op("DCOM", op="quantize", src=Ref("x"), dst=Ref("xq"), scale=float(region.x_scale), zero=int(region.x_zero), bits=bits, signed=False)
    )
    if region.kind == CONV2D:
        c = region.conv
        run.append(
            op(
                "DCOM",
                op="im2col",
                src=Ref("xq"),
                dst=Ref("xm"),
                kernel=tuple(c["kernel"]),
                strides=tuple(c["strides"]),
                padding=tuple(c["padding"]),
                dilation=tuple(c["dilation"]),
                pad_value=int(region.x_zero),
            )
        )
    else:
        lead = (bt, m, k) if region.kind == DMATMUL else (1, m, k)
        if region.kind == DMATMUL:
            run.append(op("DCOM", op="reshape", src=Ref("xq"), dst=Ref("xm"), shape=lead, batch_shape=region.batch_shape))
        else:
            run.append(op("DCOM", op="reshape", src=Ref("xq"), dst=Ref("xm"), shape=lead))
    if region.kind == DMATMUL:
        run.append(op("DMOV", op="load", src=Ref("y"), level="global", bytes=int(np.prod(region.in_shapes[1])) * 4))
        run.append(op("DCOM", op="quantize", src=Ref("y"), dst=Ref("yq0"), scale=float(region.y_scale), zero=0, bits=wbits, signed=True))
        run.append(op("DCOM", op="reshape", src=Ref("yq0"), dst=Ref("yq"), shape=(bt, k, n), batch_shape=region.batch_shape))
        run.append(op("DCOM", op="colsum", src=Ref("yq"), dst=Ref("wsum")))
    run.append(op("DMOV", op="scatter", src=Ref("xm"), level="core", bytes=bt * m * k))
    run.append(op("DCOM", op="zeros", dst=Ref("acc"), shape=(bt, m, n)))

    setup: list = []
    for idx in pl.passes:
        if pl.resident:
            setup += _writes(region, pl, idx)
        else:
            run += _writes(region, pl, idx)
        run.append(Parallel(tuple(_reads(region, pl, idx, hw, "xm"))))
    # partial sums of tiles that share output columns are added digitally
    row_blocks = len({t.k0 for t in pl.tiles})
    if row_blocks > 1:
        run.append(op("DCOM", op="reduce", dst=Ref("acc"), terms=row_blocks, elements=bt * m * n))
    if region.x_zero:
        run.append(op("DCOM", op="zero_point", dst=Ref("acc"), zero=int(region.x_zero), wsum=Ref("wsum")))
    deq = dict(
        op="dequantize",
        src=Ref("acc"),
        dst=Ref("out"),
        scale=float(region.x_scale * (region.y_scale if region.kind == DMATMUL else 1.0)),
    )
    if region.kind != DMATMUL:
        deq["wscale"] = Ref("wscale")
    if region.bias is not None:
        deq["bias"] = Ref("bias")
    deq["layout"] = "nchw" if region.kind == CONV2D else "rowmajor"
    deq["shape"] = tuple(region.out_shape)
    run.append(Op("DCOM", tuple(deq.items())))
    run.append(op("DMOV", op="store", src=Ref("out"), level="global", bytes=int(np.prod(region.out_shape)) * 4))
    return Program(region.name, tuple(attrs), tuple(decls), tuple(setup), tuple(run))


def region_constants(region: Region) -> dict[str, np.ndarray]:
    """The constant tensors a region's program declares, by name."""
    if region.kind == DMATMUL:
        return {}
    consts = {
        "w": np.ascontiguousarray(region.w_int, dtype=np.int8),
        "wscale": np.ascontiguousarray(region.w_scale, dtype=np.float32),
        "wsum": region.w_int.astype(np.int32).sum(axis=0).astype(np.int32),
    }
    if region.bias is not None:
        consts["bias"] = np.ascontiguousarray(region.bias, dtype=np.float32)
    return consts

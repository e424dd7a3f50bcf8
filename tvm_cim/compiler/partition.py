"""Find the operators a crossbar can run, with TVM's pattern machinery.

:func:`cim_patterns` returns ``FusionPattern`` objects for
``FuseOpsByPattern``.  Matched operators become composite functions named
``cim.<kind>``; everything else stays in the Relax graph and runs on the host
(``llvm``):

* ``cim.conv2d_bias`` / ``cim.conv2d``: NCHW/OIHW conv2d with a constant
  kernel (strided, padded, dilated, grouped and depthwise), optionally
  followed by a per-channel constant bias;
* ``cim.matmul_bias`` / ``cim.matmul``: matmul with a constant 2-D right
  operand (ONNX Gemm / MatMul / dense), optionally with a constant bias;
* ``cim.dmatmul``: matmul of two run-time operands (attention ``QK^T`` and
  ``x V``): the right operand is written into crossbars at run time.
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.dpl import is_const, is_op, wildcard
from tvm.relax.transform import FusionPattern

from ..common.relax_utils import FoldConstantsNumpy, dtype_of, shape_of

PREFIX = "cim."


_shape, _dtype = shape_of, dtype_of


def _conv_ok(call) -> bool:
    a = call.attrs
    if str(a.data_layout) != "NCHW" or str(a.kernel_layout) != "OIHW" or str(a.out_layout) != "NCHW":
        return False
    x, w = _shape(call.args[0]), _shape(call.args[1])
    return x is not None and w is not None and len(x) == 4 and _dtype(call.args[0]) == "float32"


def _matmul_const_ok(call) -> bool:
    x, w = _shape(call.args[0]), _shape(call.args[1])
    return x is not None and w is not None and len(w) == 2 and len(x) >= 1 and _dtype(call.args[0]) == "float32"


def _dmatmul_ok(call) -> bool:
    a, b = _shape(call.args[0]), _shape(call.args[1])
    if a is None or b is None or len(a) < 2 or len(b) < 2:
        return False
    if isinstance(call.args[1], tvm.ir.GenericConst) or isinstance(call.args[0], tvm.ir.GenericConst):
        return False
    return _dtype(call.args[0]) == "float32" and _dtype(call.args[1]) == "float32"


def _bias_ok(bias, out_shape, channel_axis: int) -> bool:
    b = _shape(bias)
    if b is None or out_shape is None:
        return False
    n = out_shape[channel_axis]
    # a constant that only varies along the channel axis
    full = (1,) * (len(out_shape) - len(b)) + b
    return len(full) == len(out_shape) and all(
        d == 1 or (i == channel_axis % len(out_shape) and d == n) for i, d in enumerate(full)
    )


def cim_patterns() -> list[FusionPattern]:
    """The fusion patterns of crossbar-executable operators, highest priority first.

    Returns
    -------
    list of tvm.relax.transform.FusionPattern
    """
    x, w, b = wildcard(), is_const(), is_const()
    conv = is_op("relax.nn.conv2d")(x, w)
    conv_bias = is_op("relax.add")(conv, b)
    mm = is_op("relax.matmul")(x, w)
    mm_bias = is_op("relax.add")(mm, b)
    a2, b2 = wildcard(), wildcard()
    dmm = is_op("relax.matmul")(a2, b2)

    def check_conv(ctx) -> bool:
        return _conv_ok(ctx.annotated_expr["root"])

    def check_conv_bias(ctx) -> bool:
        c = ctx.annotated_expr["root"]
        return _conv_ok(c) and _bias_ok(ctx.annotated_expr["bias"], _shape(c), 1)

    def check_mm(ctx) -> bool:
        return _matmul_const_ok(ctx.annotated_expr["root"])

    def check_mm_bias(ctx) -> bool:
        c = ctx.annotated_expr["root"]
        return _matmul_const_ok(c) and _bias_ok(ctx.annotated_expr["bias"], _shape(c), -1)

    def check_dmm(ctx) -> bool:
        return _dmatmul_ok(ctx.annotated_expr["root"])

    return [
        FusionPattern(PREFIX + "conv2d_bias", conv_bias, {"root": conv, "bias": b}, check_conv_bias),
        FusionPattern(PREFIX + "conv2d", conv, {"root": conv}, check_conv),
        FusionPattern(PREFIX + "matmul_bias", mm_bias, {"root": mm, "bias": b}, check_mm_bias),
        FusionPattern(PREFIX + "matmul", mm, {"root": mm}, check_mm),
        FusionPattern(PREFIX + "dmatmul", dmm, {"root": dmm}, check_dmm),
    ]


def PartitionForCIM() -> tvm.transform.Pass:  # noqa: N802 - TVM pass naming
    """Group crossbar-executable operators into ``cim.*`` composite functions.

    Returns
    -------
    tvm.transform.Pass
        Constant folding (so that transposed Gemm weights and BatchNorm-folded
        kernels become constants; elementwise arithmetic and layout changes
        in numpy, the rest by ``FoldConstant``) followed by
        ``FuseOpsByPattern`` with :func:`cim_patterns`.
    """
    return tvm.transform.Sequential(
        [
            FoldConstantsNumpy,
            relax.transform.FoldConstant(),
            relax.transform.FuseOpsByPattern(cim_patterns(), bind_constants=True, annotate_codegen=False),
        ],
        name="PartitionForCIM",
    )

"""The CIM compilation passes, as TVM exposes ``relax.transform`` (see :mod:`tvm_cim.compiler.transform`).

Each is a ``tvm.transform`` module pass usable on its own, in this order::

    seq = tvm.transform.Sequential([
        tvm_cim.transform.FindRegions(), tvm_cim.transform.Calibrate(), tvm_cim.transform.Quantize("prime"),
        tvm_cim.transform.MapCrossbars("prime"), tvm_cim.transform.Segment("prime"), tvm_cim.transform.DuplicateWeights("prime"),
        tvm_cim.transform.AllocateArrayModes("prime"), tvm_cim.transform.Place("prime"),
        tvm_cim.transform.PlanDataflow("prime"), tvm_cim.transform.GenerateMetaOps("prime"),
        tvm_cim.transform.LowerToRuntime("prime"), tvm_cim.transform.ShareHostKernels,
    ])

:func:`CIMPipeline` is that sequence.
"""

from .common.relax_utils import ShareHostKernels
from .compiler.transform import (
    AllocateArrayModes,
    Calibrate,
    CIMPipeline,
    DuplicateWeights,
    FindRegions,
    GenerateMetaOps,
    LowerToRuntime,
    MapCrossbars,
    Place,
    PlanDataflow,
    Quantize,
    Segment,
)

__all__ = ["FindRegions", "Calibrate", "Quantize", "MapCrossbars", "Segment", "DuplicateWeights", "AllocateArrayModes", "Place", "PlanDataflow", "GenerateMetaOps",
           "LowerToRuntime", "ShareHostKernels", "CIMPipeline"]

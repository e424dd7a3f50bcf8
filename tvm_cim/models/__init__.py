"""Model zoo: seeded, code-generated ONNX models of published architectures.

See :mod:`tvm_cim.models.zoo` for details.
"""

from .zoo import (
    MODELS,
    bert_layer,
    build_model,
    export,
    input_shapes,
    llama_layer,
    mobilenetv2,
    random_inputs,
    resnet18,
    resnet34,
    resnet50,
    resnet101,
    vgg16,
    vit_base,
)

__all__ = [
    "MODELS",
    "bert_layer",
    "build_model",
    "export",
    "input_shapes",
    "llama_layer",
    "mobilenetv2",
    "random_inputs",
    "resnet18",
    "resnet34",
    "resnet50",
    "resnet101",
    "vgg16",
    "vit_base",
]

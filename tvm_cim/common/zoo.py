"""Model zoo generated in code from published layer configurations.

Every model is built directly as an :class:`onnx.ModelProto` with
:mod:`onnx.helper` (no deep-learning framework is needed) and filled with
seeded random weights drawn from :func:`numpy.random.default_rng`.  The graphs
follow the reference architectures closely enough that their operator mix,
tensor shapes and parameter counts match the published networks, which makes
them suitable for compiler, mapping and performance studies of
computing-in-memory (CIM) back-ends.  They are *not* trained: outputs are
meaningless as predictions but numerically well behaved.

Available models (see :data:`MODELS`):

``resnet18``, ``resnet34``, ``resnet50``, ``resnet101``
    He et al., "Deep Residual Learning for Image Recognition", CVPR 2016,
    torchvision layer configuration (stride on the 3x3 convolution of the
    bottleneck, 1x1 convolution + BatchNorm projection shortcuts).
``vgg16``, ``vgg19``
    Simonyan & Zisserman 2015, configurations D and E without BatchNorm.
``alexnet``, ``zfnet``
    Krizhevsky et al. 2012 (torchvision configuration) and Zeiler & Fergus 2014.
``densenet121``
    Huang et al., "Densely Connected Convolutional Networks", CVPR 2017
    (torchvision configuration: growth rate 32, blocks 6-12-24-16).
``mobilenetv2``
    Sandler et al., "MobileNetV2: Inverted Residuals and Linear Bottlenecks",
    CVPR 2018 (torchvision variant, ReLU6 expressed as ``Clip``).
``vit_base``
    Dosovitskiy et al. 2021, ViT-B/16 (pre-LN encoder, class token).
``bert_layer``
    One post-LN BERT encoder layer (Devlin et al. 2019).
``llama_layer``
    One LLaMA decoder layer (Touvron et al. 2023): RMSNorm, rotary position
    embedding, causal self-attention and a SwiGLU feed-forward network.
``gpt_decode``, ``llama_decode``
    One decoder layer processing one new token per sequence against a KV
    cache given as graph inputs (``k_cache`` already transposed), for
    bank-level PIM experiments (:func:`decode_layer`).

Weight initialisation
---------------------
Convolutions and linear layers use a zero-mean normal distribution with
standard deviation ``sqrt(gain / fan_in)``: ``gain = 2`` (He-normal) for
layers whose output feeds a (ReLU-like) non-linearity and ``gain = 1`` for
"linear" layers whose output is summed into a residual stream or returned
(the last convolution of a residual branch, the MobileNetV2 projection
convolutions, classifier heads).  BatchNorm layers are exported as inference
``BatchNormalization`` nodes whose scale is drawn near 1, bias near 0, running
mean near 0 and running variance near 1; the last BatchNorm of every residual
branch uses a smaller scale (``residual_gamma``, 0.3 by default) so the
residual sums stay bounded over 100+ layers.  Transformer weights are normal
with standard deviation ``init_std`` (0.02 by default), biases near zero and
normalisation weights 1 / biases 0.

All graphs use float32, static shapes, graph input ``"input"`` (CNNs, ViT) or
``"hidden_states"`` (single transformer layers) and a single output named
``"output"``.  CNNs and ``llama_layer`` use ONNX opset 17.  ``vit_base`` and
``bert_layer`` use opset 20 with the native ``Gelu`` operator by default
(``gelu="op"``, supported by both onnxruntime and TVM's Relax ONNX frontend);
pass ``gelu="erf"`` to get an opset-17 graph that spells GELU out as
``0.5 * x * (1 + Erf(x / sqrt(2)))``.
"""

from __future__ import annotations

import math
import os
import pathlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

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
    "vgg19",
    "vgg8",
    "googlenet",
    "alexnet",
    "zfnet",
    "densenet121",
    "vit_base",
]

#: Default ONNX opset of the generated graphs.
DEFAULT_OPSET = 17
#: Opset used when the native ``Gelu`` operator is requested.
GELU_OPSET = 20
_GELU_MODES = ("op", "erf")


# ---------------------------------------------------------------------------
# Graph construction helpers
# ---------------------------------------------------------------------------
class _GraphBuilder:
    """Small helper accumulating nodes and seeded initializers.

    Parameters
    ----------
    name : str
        Graph name.
    seed : int
        Seed of the :func:`numpy.random.default_rng` generator used for all
        weights of the graph (drawn in construction order).
    opset : int
        ONNX opset of the default domain.
    """

    def __init__(self, name: str, seed: int, opset: int = DEFAULT_OPSET) -> None:
        self.name = name
        self.opset = opset
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[tuple[str, np.ndarray]] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self._names: set[str] = set()
        self._consts: dict[tuple, str] = {}

    # -- naming -----------------------------------------------------------
    def unique(self, base: str) -> str:
        """Return ``base`` or ``base_<k>`` such that the name is unused."""
        name, k = base, 1
        while name in self._names:
            name = f"{base}_{k}"
            k += 1
        self._names.add(name)
        return name

    # -- tensors ----------------------------------------------------------
    def add_input(self, name: str, shape: Sequence[int]) -> str:
        """Declare a float32 graph input."""
        self._names.add(name)
        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
        return name

    def init(self, name: str, array: np.ndarray) -> str:
        """Add an initializer holding ``array`` and return its (unique) name."""
        name = self.unique(name)
        self.initializers.append((name, np.asarray(array)))
        return name

    def normal(self, name: str, shape: Sequence[int], std: float, mean: float = 0.0) -> str:
        """Add a float32 initializer drawn from ``N(mean, std**2)``."""
        arr = self.rng.standard_normal(tuple(shape), dtype=np.float32)
        arr *= np.float32(std)
        if mean:
            arr += np.float32(mean)
        return self.init(name, arr)

    def uniform(self, name: str, shape: Sequence[int], low: float, high: float) -> str:
        """Add a float32 initializer drawn from ``U(low, high)``."""
        arr = self.rng.uniform(low, high, size=tuple(shape)).astype(np.float32)
        return self.init(name, arr)

    def const(self, value: Any, dtype: type = np.float32) -> str:
        """Shared constant initializer (scalars, shapes, axes ...)."""
        arr = np.asarray(value, dtype=dtype)
        key = (arr.dtype.str, arr.shape, arr.tobytes())
        if key not in self._consts:
            label = "c" if arr.ndim == 0 else "shape"
            self._consts[key] = self.init(f"const.{label}{len(self._consts)}", arr)
        return self._consts[key]

    def ints(self, values: Sequence[int]) -> str:
        """Shared 1-D int64 constant (for Reshape / Slice / Expand operands)."""
        return self.const(list(values), np.int64)

    # -- nodes ------------------------------------------------------------
    def op(self, op_type: str, inputs: Sequence[str], name: str, out: str | None = None, **attrs) -> str:
        """Append a single-output node and return its output name."""
        node_name = self.unique(name)
        output = out if out is not None else node_name
        if out is not None:
            self._names.add(out)
        self.nodes.append(
            helper.make_node(op_type, list(inputs), [output], name=node_name, **attrs)
        )
        return output

    # -- finalisation ------------------------------------------------------
    def build(self, output_shape: Sequence[int], doc: str = "") -> onnx.ModelProto:
        """Create the :class:`onnx.ModelProto` (last node output must be ``output``)."""
        outputs = [helper.make_tensor_value_info("output", TensorProto.FLOAT, list(output_shape))]
        graph = helper.make_graph(self.nodes, self.name, self.inputs, outputs)
        for name, array in self.initializers:
            # Filled in place: avoids the extra copy of make_graph(initializer=...).
            tensor = graph.initializer.add()
            tensor.name = name
            tensor.data_type = helper.np_dtype_to_tensor_dtype(array.dtype)
            tensor.dims.extend(array.shape)
            # raw_data is little-endian by the ONNX spec (no copy on LE hosts).
            little = array.dtype.newbyteorder("<")
            tensor.raw_data = np.ascontiguousarray(array, dtype=little).tobytes()
        opset = [helper.make_opsetid("", self.opset)]
        model = helper.make_model(
            graph,
            opset_imports=opset,
            producer_name="tvm_cim.models.zoo",
            ir_version=helper.find_min_ir_version_for(opset),
            doc_string=doc,
        )
        return model


class GraphParts:
    """Nodes and initializers of a graph written node by node, named by one counter.

    Parameters
    ----------
    const_prefix : str
        Prefix of the constants' names (``prefix`` + counter); node outputs are ``t`` + counter.
    """

    def __init__(self, const_prefix: str = "c") -> None:
        self.inits: list[onnx.TensorProto] = []
        self.nodes: list[onnx.NodeProto] = []
        self.prefix = const_prefix
        self._n = 0

    def const(self, value: Any, dtype: type = np.float32) -> str:
        """Add a constant initializer and return its name."""
        self._n += 1
        name = f"{self.prefix}{self._n}"
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def op(self, op_type: str, inputs: Sequence[str], **attrs) -> str:
        """Append a single-output node and return its output name."""
        self._n += 1
        out = f"t{self._n}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=f"{op_type}_{self._n}", **attrs))
        return out


def _pair(value: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(value, (int, np.integer)):
        return int(value), int(value)
    h, w = value
    return int(h), int(w)


def _conv_out(size: int, kernel: int, stride: int, pad: int) -> int:
    return (size + 2 * pad - kernel) // stride + 1


def _check_positive(**values: int) -> None:
    for key, val in values.items():
        if int(val) < 1:
            raise ValueError(f"{key} must be >= 1, got {val}")


# ---------------------------------------------------------------------------
# CNN building blocks
# ---------------------------------------------------------------------------
def _conv(
    g: _GraphBuilder,
    x: str,
    cin: int,
    cout: int,
    kernel: int,
    name: str,
    stride: int = 1,
    pad: int = 0,
    group: int = 1,
    bias: bool = False,
    gain: float = 2.0,
) -> str:
    """Conv node with ``N(0, gain / fan_in)`` weights (He-normal for gain 2)."""
    fan_in = (cin // group) * kernel * kernel
    w = g.normal(f"{name}.weight", (cout, cin // group, kernel, kernel), math.sqrt(gain / fan_in))
    inputs = [x, w]
    if bias:
        inputs.append(g.normal(f"{name}.bias", (cout,), 0.01))
    return g.op(
        "Conv",
        inputs,
        name,
        kernel_shape=[kernel, kernel],
        strides=[stride, stride],
        pads=[pad, pad, pad, pad],
        group=group,
    )


def _bn(g: _GraphBuilder, x: str, channels: int, name: str, gamma: float = 1.0) -> str:
    """Inference BatchNormalization with near-identity seeded statistics."""
    scale = g.uniform(f"{name}.weight", (channels,), 0.9 * gamma, 1.1 * gamma)
    beta = g.normal(f"{name}.bias", (channels,), 0.02)
    mean = g.normal(f"{name}.running_mean", (channels,), 0.02)
    var = g.uniform(f"{name}.running_var", (channels,), 0.9, 1.1)
    return g.op("BatchNormalization", [x, scale, beta, mean, var], name, epsilon=1e-5)


def _relu(g: _GraphBuilder, x: str, name: str) -> str:
    return g.op("Relu", [x], name)


def _relu6(g: _GraphBuilder, x: str, name: str) -> str:
    return g.op("Clip", [x, g.const(0.0), g.const(6.0)], name)


def _classifier(g: _GraphBuilder, x: str, cin: int, num_classes: int, name: str, gain: float = 1.0,
                out: str | None = "output") -> str:
    """Gemm(x, W^T) + b as in ``torch.nn.Linear`` (weight shape ``(out, in)``)."""
    w = g.normal(f"{name}.weight", (num_classes, cin), math.sqrt(gain / cin))
    b = g.normal(f"{name}.bias", (num_classes,), 0.01)
    return g.op("Gemm", [x, w, b], name, out=out, transB=1)


def _gap_flatten(g: _GraphBuilder, x: str) -> str:
    x = g.op("GlobalAveragePool", [x], "avgpool")
    return g.op("Flatten", [x], "flatten", axis=1)


# ---------------------------------------------------------------------------
# ResNet
# ---------------------------------------------------------------------------
def _basic_block(g, x, cin, planes, stride, name, residual_gamma):
    out = _conv(g, x, cin, planes, 3, f"{name}.conv1", stride=stride, pad=1)
    out = _relu(g, _bn(g, out, planes, f"{name}.bn1"), f"{name}.relu1")
    out = _conv(g, out, planes, planes, 3, f"{name}.conv2", pad=1, gain=1.0)
    out = _bn(g, out, planes, f"{name}.bn2", gamma=residual_gamma)
    shortcut = x
    if stride != 1 or cin != planes:
        shortcut = _conv(g, x, cin, planes, 1, f"{name}.downsample.0", stride=stride)
        shortcut = _bn(g, shortcut, planes, f"{name}.downsample.1")
    out = g.op("Add", [out, shortcut], f"{name}.add")
    return _relu(g, out, f"{name}.relu2"), planes


def _bottleneck(g, x, cin, planes, stride, name, residual_gamma):
    width, cout = planes, planes * 4
    out = _conv(g, x, cin, width, 1, f"{name}.conv1")
    out = _relu(g, _bn(g, out, width, f"{name}.bn1"), f"{name}.relu1")
    out = _conv(g, out, width, width, 3, f"{name}.conv2", stride=stride, pad=1)
    out = _relu(g, _bn(g, out, width, f"{name}.bn2"), f"{name}.relu2")
    out = _conv(g, out, width, cout, 1, f"{name}.conv3", gain=1.0)
    out = _bn(g, out, cout, f"{name}.bn3", gamma=residual_gamma)
    shortcut = x
    if stride != 1 or cin != cout:
        shortcut = _conv(g, x, cin, cout, 1, f"{name}.downsample.0", stride=stride)
        shortcut = _bn(g, shortcut, cout, f"{name}.downsample.1")
    out = g.op("Add", [out, shortcut], f"{name}.add")
    return _relu(g, out, f"{name}.relu3"), cout


def _resnet(
    arch: str,
    bottleneck: bool,
    layers: Sequence[int],
    seed: int,
    batch: int,
    image_size: int | Sequence[int],
    num_classes: int,
    in_channels: int,
    residual_gamma: float,
) -> onnx.ModelProto:
    h, w = _pair(image_size)
    _check_positive(batch=batch, image_height=h, image_width=w, num_classes=num_classes,
                    in_channels=in_channels)
    if h < 32 or w < 32:
        raise ValueError(f"{arch} needs an image size of at least 32x32, got {h}x{w}")
    g = _GraphBuilder(arch, seed)
    x = g.add_input("input", (batch, in_channels, h, w))
    x = _conv(g, x, in_channels, 64, 7, "conv1", stride=2, pad=3)
    x = _relu(g, _bn(g, x, 64, "bn1"), "relu")
    x = g.op("MaxPool", [x], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    block = _bottleneck if bottleneck else _basic_block
    cin = 64
    for stage, (planes, blocks) in enumerate(zip((64, 128, 256, 512), layers), start=1):
        for i in range(blocks):
            stride = 2 if (stage > 1 and i == 0) else 1
            x, cin = block(g, x, cin, planes, stride, f"layer{stage}.{i}", residual_gamma)
    x = _gap_flatten(g, x)
    _classifier(g, x, cin, num_classes, "fc")
    doc = f"{arch} (He et al. 2016, torchvision configuration), seed={seed}"
    return g.build((batch, num_classes), doc)


def resnet18(seed: int = 0, batch: int = 1, image_size: int | Sequence[int] = 224,
             num_classes: int = 1000, in_channels: int = 3,
             residual_gamma: float = 0.3) -> onnx.ModelProto:
    """ResNet-18: BasicBlock, stages ``[2, 2, 2, 2]``.

    Parameters
    ----------
    seed : int, optional
        Seed of the weight generator.
    batch : int, optional
        Batch size of the static input shape.
    image_size : int or (int, int), optional
        Input height and width (at least 32).
    num_classes : int, optional
        Width of the final fully connected layer.
    in_channels : int, optional
        Number of input image channels.
    residual_gamma : float, optional
        Scale of the last BatchNorm of every residual branch.

    Returns
    -------
    onnx.ModelProto
        Graph with input ``"input"`` of shape ``(batch, in_channels, H, W)``
        and output ``"output"`` of shape ``(batch, num_classes)``.
    """
    return _resnet("resnet18", False, (2, 2, 2, 2), seed, batch, image_size, num_classes,
                   in_channels, residual_gamma)


def resnet34(seed: int = 0, batch: int = 1, image_size: int | Sequence[int] = 224,
             num_classes: int = 1000, in_channels: int = 3,
             residual_gamma: float = 0.3) -> onnx.ModelProto:
    """ResNet-34: BasicBlock, stages ``[3, 4, 6, 3]``.

    Parameters
    ----------
    seed, batch, image_size, num_classes, in_channels, residual_gamma
        See :func:`resnet18`.

    Returns
    -------
    onnx.ModelProto
        Graph with input ``"input"`` and output ``"output"`` ``(batch, num_classes)``.
    """
    return _resnet("resnet34", False, (3, 4, 6, 3), seed, batch, image_size, num_classes,
                   in_channels, residual_gamma)


def resnet50(seed: int = 0, batch: int = 1, image_size: int | Sequence[int] = 224,
             num_classes: int = 1000, in_channels: int = 3,
             residual_gamma: float = 0.3) -> onnx.ModelProto:
    """ResNet-50: Bottleneck (expansion 4), stages ``[3, 4, 6, 3]``.

    Parameters
    ----------
    seed, batch, image_size, num_classes, in_channels, residual_gamma
        See :func:`resnet18`.

    Returns
    -------
    onnx.ModelProto
        Graph with input ``"input"`` and output ``"output"`` ``(batch, num_classes)``.
    """
    return _resnet("resnet50", True, (3, 4, 6, 3), seed, batch, image_size, num_classes,
                   in_channels, residual_gamma)


def resnet101(seed: int = 0, batch: int = 1, image_size: int | Sequence[int] = 224,
              num_classes: int = 1000, in_channels: int = 3,
              residual_gamma: float = 0.3) -> onnx.ModelProto:
    """ResNet-101: Bottleneck (expansion 4), stages ``[3, 4, 23, 3]``.

    Parameters
    ----------
    seed, batch, image_size, num_classes, in_channels, residual_gamma
        See :func:`resnet18`.

    Returns
    -------
    onnx.ModelProto
        Graph with input ``"input"`` and output ``"output"`` ``(batch, num_classes)``.
    """
    return _resnet("resnet101", True, (3, 4, 23, 3), seed, batch, image_size, num_classes,
                   in_channels, residual_gamma)


# ---------------------------------------------------------------------------
# VGG-16
# ---------------------------------------------------------------------------
_VGG16_CFG = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
              512, 512, 512, "M")
_VGG19_CFG = (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
              512, 512, 512, 512, "M")


def vgg16(seed: int = 0, batch: int = 1, image_size: int | Sequence[int] = 224,
          num_classes: int = 1000, in_channels: int = 3,
          fc_hidden: int = 4096) -> onnx.ModelProto:
    """VGG-16 (configuration D, no BatchNorm).

    Thirteen 3x3 convolutions (with bias) + ReLU, five 2x2/2 max-pools and the
    classifier ``FC fc_hidden -> ReLU -> FC fc_hidden -> ReLU -> FC num_classes``
    (dropout is an identity at inference and omitted).  At 224x224 the
    classifier sees the usual 7x7x512 features; for other image sizes the
    first FC layer takes ``512 * (H // 32) * (W // 32)`` inputs (no adaptive
    pooling).

    Parameters
    ----------
    seed : int, optional
        Seed of the weight generator.
    batch : int, optional
        Batch size.
    image_size : int or (int, int), optional
        Input height and width (at least 32).
    num_classes : int, optional
        Number of output classes.
    in_channels : int, optional
        Number of input image channels.
    fc_hidden : int, optional
        Width of the two hidden fully connected layers.

    Returns
    -------
    onnx.ModelProto
        Graph with input ``"input"`` and output ``"output"`` ``(batch, num_classes)``.
    """
    return _vgg("vgg16", _VGG16_CFG, "configuration D", seed, batch, image_size, num_classes, in_channels, fc_hidden)


def vgg19(seed: int = 0, batch: int = 1, image_size: int | Sequence[int] = 224,
          num_classes: int = 1000, in_channels: int = 3,
          fc_hidden: int = 4096) -> onnx.ModelProto:
    """VGG-19 (configuration E, no BatchNorm): sixteen 3x3 convolutions, otherwise as :func:`vgg16`.

    Parameters
    ----------
    seed, batch, image_size, num_classes, in_channels, fc_hidden
        As for :func:`vgg16`.

    Returns
    -------
    onnx.ModelProto
        Graph with input ``"input"`` and output ``"output"`` ``(batch, num_classes)``.
    """
    return _vgg("vgg19", _VGG19_CFG, "configuration E", seed, batch, image_size, num_classes, in_channels, fc_hidden)


def _classifier_head(g: _GraphBuilder, x: str, feat: int, fc_hidden: int, num_classes: int) -> str:
    """``FC fc_hidden -> ReLU -> FC fc_hidden -> ReLU -> FC num_classes`` (dropout omitted at inference)."""
    x = _classifier(g, x, feat, fc_hidden, "classifier.0", gain=2.0, out=None)
    x = _relu(g, x, "classifier.1")
    x = _classifier(g, x, fc_hidden, fc_hidden, "classifier.3", gain=2.0, out=None)
    x = _relu(g, x, "classifier.4")
    return _classifier(g, x, fc_hidden, num_classes, "classifier.6")


def _vgg(name, cfg, label, seed, batch, image_size, num_classes, in_channels, fc_hidden) -> onnx.ModelProto:
    h, w = _pair(image_size)
    _check_positive(batch=batch, image_height=h, image_width=w, num_classes=num_classes,
                    in_channels=in_channels, fc_hidden=fc_hidden)
    if h < 32 or w < 32:
        raise ValueError(f"{name} needs an image size of at least 32x32, got {h}x{w}")
    g = _GraphBuilder(name, seed)
    x = g.add_input("input", (batch, in_channels, h, w))
    cin, idx = in_channels, 0
    for item in cfg:
        if item == "M":
            x = g.op("MaxPool", [x], f"features.{idx}", kernel_shape=[2, 2], strides=[2, 2])
            h, w = h // 2, w // 2
        else:
            x = _conv(g, x, cin, item, 3, f"features.{idx}", pad=1, bias=True)
            x = _relu(g, x, f"features.{idx + 1}")
            cin = item
            idx += 1
        idx += 1
    x = g.op("Flatten", [x], "flatten", axis=1)
    _classifier_head(g, x, cin * h * w, fc_hidden, num_classes)
    return g.build((batch, num_classes), f"{name} ({label}), seed={seed}")


_VGG8_CFG = (128, 128, "M", 256, 256, "M", 512, 512, "M")


def vgg8(seed: int = 0, batch: int = 1, image_size: int | Sequence[int] = 28,
         num_classes: int = 10, in_channels: int = 1, fc_hidden: int = 1024) -> onnx.ModelProto:
    """VGG-8: six 3x3 convolutions in three VGG stages and two fully connected layers, MNIST-sized.

    PIMCOMP (paper 004, sec. VIII-A) evaluates "vgg8 trained on MNIST" and
    cites Simonyan and Zisserman, who define no 8-layer configuration; the
    configuration here is the widely used VGG-8 of DNN+NeuroSim
    (128-128-M-256-256-M-512-512-M, FC 1024, FC classes), on 28x28 single-channel
    inputs.  This is an assumption (the paper's own layer table is not published).

    Parameters
    ----------
    seed : int, optional
        Seed of the weights.
    batch : int, optional
    image_size : int or (int, int), optional
        Input height and width (at least 8; the three 2x2 pools floor).
    num_classes, in_channels, fc_hidden : int, optional

    Returns
    -------
    onnx.ModelProto
        Graph with input ``"input"`` ``(batch, in_channels, H, W)`` and output
        ``"output"`` ``(batch, num_classes)``.
    """
    h, w = _pair(image_size)
    _check_positive(batch=batch, image_height=h, image_width=w, num_classes=num_classes,
                    in_channels=in_channels, fc_hidden=fc_hidden)
    if h < 8 or w < 8:
        raise ValueError(f"vgg8 needs an image size of at least 8x8, got {h}x{w}")
    g = _GraphBuilder("vgg8", seed)
    x = g.add_input("input", (batch, in_channels, h, w))
    cin = in_channels
    for idx, item in enumerate(_VGG8_CFG):
        if item == "M":
            x = g.op("MaxPool", [x], f"features.{idx}", kernel_shape=[2, 2], strides=[2, 2])
            h, w = h // 2, w // 2
        else:
            x = _relu(g, _conv(g, x, cin, item, 3, f"features.{idx}", pad=1, bias=True), f"features.{idx}.relu")
            cin = item
    x = g.op("Flatten", [x], "flatten", axis=1)
    x = _relu(g, _classifier(g, x, cin * h * w, fc_hidden, "classifier.0", gain=2.0, out=None), "classifier.1")
    _classifier(g, x, fc_hidden, num_classes, "classifier.2")
    return g.build((batch, num_classes), f"vgg8 (DNN+NeuroSim configuration), seed={seed}")


# (1x1, 3x3 reduce, 3x3, 5x5 reduce, 5x5, pool projection) of each inception module, Szegedy et al. Table 1
_GOOGLENET_CFG = (
    ("3a", (64, 96, 128, 16, 32, 32)), ("3b", (128, 128, 192, 32, 96, 64)), "M",
    ("4a", (192, 96, 208, 16, 48, 64)), ("4b", (160, 112, 224, 24, 64, 64)), ("4c", (128, 128, 256, 24, 64, 64)),
    ("4d", (112, 144, 288, 32, 64, 64)), ("4e", (256, 160, 320, 32, 128, 128)), "M",
    ("5a", (256, 160, 320, 32, 128, 128)), ("5b", (384, 192, 384, 48, 128, 128)),
)


def _inception(g, x, cin, cfg, name):
    c1, r3, c3, r5, c5, pp = cfg
    b1 = _relu(g, _conv(g, x, cin, c1, 1, f"{name}.b1", bias=True), f"{name}.b1.relu")
    b2 = _relu(g, _conv(g, x, cin, r3, 1, f"{name}.b2.0", bias=True), f"{name}.b2.0.relu")
    b2 = _relu(g, _conv(g, b2, r3, c3, 3, f"{name}.b2.1", pad=1, bias=True), f"{name}.b2.1.relu")
    b3 = _relu(g, _conv(g, x, cin, r5, 1, f"{name}.b3.0", bias=True), f"{name}.b3.0.relu")
    b3 = _relu(g, _conv(g, b3, r5, c5, 5, f"{name}.b3.1", pad=2, bias=True), f"{name}.b3.1.relu")
    b4 = g.op("MaxPool", [x], f"{name}.b4.pool", kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    b4 = _relu(g, _conv(g, b4, cin, pp, 1, f"{name}.b4.1", bias=True), f"{name}.b4.1.relu")
    return g.op("Concat", [b1, b2, b3, b4], f"{name}.concat", axis=1), c1 + c3 + c5 + pp


def googlenet(seed: int = 0, batch: int = 1, image_size: int | Sequence[int] = 224,
              num_classes: int = 1000, in_channels: int = 3) -> onnx.ModelProto:
    """GoogLeNet (Inception v1, Szegedy et al. 2015, Table 1) without the auxiliary classifiers.

    Inception modules with 1x1, 3x3 and 5x5 branches and a pooled projection
    (the paper's 5x5, not torchvision's 3x3), ReLU after every convolution,
    no LRN (it is not a crossbar operation and would run on the host), max
    pools 3x3/2 padded by 1 (the paper's sizes 112-56-28-14-7 at 224),
    global average pooling and one fully connected layer.

    Parameters
    ----------
    seed : int, optional
    batch : int, optional
    image_size : int or (int, int), optional
        At least 32x32.
    num_classes, in_channels : int, optional

    Returns
    -------
    onnx.ModelProto
        Graph with input ``"input"`` and output ``"output"`` ``(batch, num_classes)``.
    """
    h, w = _pair(image_size)
    _check_positive(batch=batch, image_height=h, image_width=w, num_classes=num_classes, in_channels=in_channels)
    if h < 32 or w < 32:
        raise ValueError(f"googlenet needs an image size of at least 32x32, got {h}x{w}")
    g = _GraphBuilder("googlenet", seed)
    x = g.add_input("input", (batch, in_channels, h, w))
    pool = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    x = _relu(g, _conv(g, x, in_channels, 64, 7, "conv1", stride=2, pad=3, bias=True), "conv1.relu")
    x = g.op("MaxPool", [x], "pool1", **pool)
    x = _relu(g, _conv(g, x, 64, 64, 1, "conv2", bias=True), "conv2.relu")
    x = _relu(g, _conv(g, x, 64, 192, 3, "conv3", pad=1, bias=True), "conv3.relu")
    x = g.op("MaxPool", [x], "pool2", **pool)
    cin = 192
    for i, item in enumerate(_GOOGLENET_CFG):
        if item == "M":
            x = g.op("MaxPool", [x], f"pool{3 + i}", **pool)
        else:
            x, cin = _inception(g, x, cin, item[1], f"inception{item[0]}")
    x = _gap_flatten(g, x)
    _classifier(g, x, cin, num_classes, "fc")
    return g.build((batch, num_classes), f"googlenet (Szegedy et al. 2015, Table 1), seed={seed}")


# ---------------------------------------------------------------------------
# AlexNet, ZFNet
# ---------------------------------------------------------------------------
# (out channels, kernel, stride, pad, max-pool 3x3/2 after it with this padding or None)
_ALEXNET_CFG = ((64, 11, 4, 2, 0), (192, 5, 1, 2, 0), (384, 3, 1, 1, None), (256, 3, 1, 1, None), (256, 3, 1, 1, 0))
_ZFNET_CFG = ((96, 7, 2, 1, 1), (256, 5, 2, 0, 1), (384, 3, 1, 1, None), (384, 3, 1, 1, None), (256, 3, 1, 1, 0))


def _alexnet_like(name, cfg, label, seed, batch, image_size, num_classes, in_channels, fc_hidden):
    h, w = _pair(image_size)
    _check_positive(batch=batch, image_height=h, image_width=w, num_classes=num_classes,
                    in_channels=in_channels, fc_hidden=fc_hidden)
    if h < 63 or w < 63:
        raise ValueError(f"{name} needs an image size of at least 63x63, got {h}x{w}")
    g = _GraphBuilder(name, seed)
    x = g.add_input("input", (batch, in_channels, h, w))
    cin = in_channels
    for i, (cout, k, st, pad, pool) in enumerate(cfg):
        x = _relu(g, _conv(g, x, cin, cout, k, f"features.{i}.conv", stride=st, pad=pad, bias=True), f"features.{i}.relu")
        h, w = _conv_out(h, k, st, pad), _conv_out(w, k, st, pad)
        cin = cout
        if pool is not None:
            x = g.op("MaxPool", [x], f"features.{i}.pool", kernel_shape=[3, 3], strides=[2, 2], pads=[pool] * 4)
            h, w = _conv_out(h, 3, 2, pool), _conv_out(w, 3, 2, pool)
    x = g.op("Flatten", [x], "flatten", axis=1)
    _classifier_head(g, x, cin * h * w, fc_hidden, num_classes)
    return g.build((batch, num_classes), f"{name} ({label}), seed={seed}")


def alexnet(seed: int = 0, batch: int = 1, image_size: int | Sequence[int] = 224,
            num_classes: int = 1000, in_channels: int = 3, fc_hidden: int = 4096) -> onnx.ModelProto:
    """AlexNet (Krizhevsky et al. 2012, torchvision's single-tower configuration).

    Five convolutions (11x11/4, 5x5, three 3x3) with ReLU, three 3x3/2
    max-pools, and the classifier of :func:`vgg16` on the ``256 x 6 x 6``
    features (at 224x224; no adaptive pooling).

    Parameters
    ----------
    seed, batch, image_size, num_classes, in_channels, fc_hidden
        As for :func:`vgg16`.

    Returns
    -------
    onnx.ModelProto
        Graph with input ``"input"`` and output ``"output"`` ``(batch, num_classes)``.
    """
    return _alexnet_like("alexnet", _ALEXNET_CFG, "torchvision configuration", seed, batch, image_size,
                         num_classes, in_channels, fc_hidden)


def zfnet(seed: int = 0, batch: int = 1, image_size: int | Sequence[int] = 224,
          num_classes: int = 1000, in_channels: int = 3, fc_hidden: int = 4096) -> onnx.ModelProto:
    """ZFNet (Zeiler & Fergus 2014): AlexNet with a 7x7/2 first layer, a 5x5/2 second and 384/384/256 3x3 layers.

    Parameters
    ----------
    seed, batch, image_size, num_classes, in_channels, fc_hidden
        As for :func:`vgg16`.

    Returns
    -------
    onnx.ModelProto
        Graph with input ``"input"`` and output ``"output"`` ``(batch, num_classes)``.
    """
    return _alexnet_like("zfnet", _ZFNET_CFG, "Zeiler & Fergus 2014", seed, batch, image_size,
                         num_classes, in_channels, fc_hidden)


# ---------------------------------------------------------------------------
# DenseNet
# ---------------------------------------------------------------------------
def _dense_layer(g, x, cin, growth, bn_size, name):
    """BN-ReLU-Conv1x1 (``bn_size * growth``) - BN-ReLU-Conv3x3 (``growth``), concatenated to the input."""
    y = _relu(g, _bn(g, x, cin, f"{name}.norm1"), f"{name}.relu1")
    y = _conv(g, y, cin, bn_size * growth, 1, f"{name}.conv1")
    y = _relu(g, _bn(g, y, bn_size * growth, f"{name}.norm2"), f"{name}.relu2")
    y = _conv(g, y, bn_size * growth, growth, 3, f"{name}.conv2", pad=1)
    return g.op("Concat", [x, y], f"{name}.concat", axis=1), cin + growth


def _densenet(arch, blocks, growth, init_features, bn_size, seed, batch, image_size, num_classes, in_channels):
    h, w = _pair(image_size)
    _check_positive(batch=batch, image_height=h, image_width=w, num_classes=num_classes, in_channels=in_channels,
                    growth_rate=growth, init_features=init_features, bn_size=bn_size)
    if h < 32 or w < 32:
        raise ValueError(f"{arch} needs an image size of at least 32x32, got {h}x{w}")
    g = _GraphBuilder(arch, seed)
    x = g.add_input("input", (batch, in_channels, h, w))
    x = _conv(g, x, in_channels, init_features, 7, "features.conv0", stride=2, pad=3)
    x = _relu(g, _bn(g, x, init_features, "features.norm0"), "features.relu0")
    x = g.op("MaxPool", [x], "features.pool0", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = init_features
    for b, layers in enumerate(blocks, start=1):
        for i in range(layers):
            x, cin = _dense_layer(g, x, cin, growth, bn_size, f"features.denseblock{b}.denselayer{i + 1}")
        if b < len(blocks):  # transition: BN-ReLU-Conv1x1 halving the channels, 2x2 average pooling
            name = f"features.transition{b}"
            x = _relu(g, _bn(g, x, cin, f"{name}.norm"), f"{name}.relu")
            x = _conv(g, x, cin, cin // 2, 1, f"{name}.conv")
            x = g.op("AveragePool", [x], f"{name}.pool", kernel_shape=[2, 2], strides=[2, 2])
            cin //= 2
    x = _relu(g, _bn(g, x, cin, "features.norm5"), "features.relu5")
    x = _gap_flatten(g, x)
    _classifier(g, x, cin, num_classes, "classifier")
    return g.build((batch, num_classes), f"{arch} (Huang et al. 2017, torchvision configuration), seed={seed}")


def densenet121(seed: int = 0, batch: int = 1, image_size: int | Sequence[int] = 224,
                num_classes: int = 1000, in_channels: int = 3) -> onnx.ModelProto:
    """DenseNet-121 (Huang et al. 2017, torchvision configuration): 120 convolutions and one FC layer.

    A 7x7/2 stem (64 channels, BN, ReLU, 3x3/2 max-pool), four dense blocks of
    6, 12, 24 and 16 layers (growth rate 32, bottleneck width ``4 x 32``: each
    layer is BN-ReLU-Conv1x1-BN-ReLU-Conv3x3 and its 32 output channels are
    concatenated to its input), transitions (BN-ReLU-Conv1x1 halving the
    channels, 2x2/2 average pooling) between the blocks, a final BN-ReLU,
    global average pooling and one fully connected layer.  The BatchNorms
    come *before* their convolutions (pre-activation), so they are not folded
    into them.

    Parameters
    ----------
    seed, batch : int, optional
    image_size : int or (int, int), optional
        At least 32x32.
    num_classes, in_channels : int, optional

    Returns
    -------
    onnx.ModelProto
        Graph with input ``"input"`` and output ``"output"`` ``(batch, num_classes)``.
    """
    return _densenet("densenet121", (6, 12, 24, 16), 32, 64, 4, seed, batch, image_size, num_classes, in_channels)


# ---------------------------------------------------------------------------
# MobileNetV2
# ---------------------------------------------------------------------------
_MBV2_SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                  (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


def _make_divisible(value: float, divisor: int = 8) -> int:
    new = max(divisor, int(value + divisor / 2) // divisor * divisor)
    if new < 0.9 * value:
        new += divisor
    return new


def mobilenetv2(seed: int = 0, batch: int = 1, image_size: int | Sequence[int] = 224,
                num_classes: int = 1000, in_channels: int = 3, width_mult: float = 1.0,
                residual_gamma: float = 0.3) -> onnx.ModelProto:
    """MobileNetV2 (Sandler et al. 2018, torchvision configuration).

    Stem 3x3/2 convolution to 32 channels, 17 inverted-residual blocks with
    settings ``(t, c, n, s)`` = (1,16,1,1), (6,24,2,2), (6,32,3,2), (6,64,4,2),
    (6,96,3,1), (6,160,3,2), (6,320,1,1), a 1x1 convolution to 1280 channels,
    global average pooling and a fully connected classifier.  Every
    convolution is followed by BatchNorm; ReLU6 is ``Clip(x, 0, 6)`` and the
    depthwise 3x3 convolutions are ``Conv`` with ``group = channels``.

    Parameters
    ----------
    seed : int, optional
        Seed of the weight generator.
    batch : int, optional
        Batch size.
    image_size : int or (int, int), optional
        Input height and width (at least 32).
    num_classes : int, optional
        Number of output classes.
    in_channels : int, optional
        Number of input image channels.
    width_mult : float, optional
        Channel width multiplier (channels rounded to multiples of 8).
    residual_gamma : float, optional
        Scale of the projection BatchNorm of blocks with a residual connection.

    Returns
    -------
    onnx.ModelProto
        Graph with input ``"input"`` and output ``"output"`` ``(batch, num_classes)``.
    """
    h, w = _pair(image_size)
    _check_positive(batch=batch, image_height=h, image_width=w, num_classes=num_classes,
                    in_channels=in_channels)
    if h < 32 or w < 32:
        raise ValueError(f"mobilenetv2 needs an image size of at least 32x32, got {h}x{w}")
    if width_mult <= 0:
        raise ValueError(f"width_mult must be positive, got {width_mult}")
    g = _GraphBuilder("mobilenetv2", seed)
    x = g.add_input("input", (batch, in_channels, h, w))
    cin = _make_divisible(32 * width_mult)
    last = _make_divisible(1280 * max(1.0, width_mult))
    x = _conv(g, x, in_channels, cin, 3, "features.0.0", stride=2, pad=1)
    x = _relu6(g, _bn(g, x, cin, "features.0.1"), "features.0.2")
    idx = 1
    for t, c, n, s in _MBV2_SETTINGS:
        cout = _make_divisible(c * width_mult)
        for i in range(n):
            stride = s if i == 0 else 1
            name = f"features.{idx}"
            hidden = int(round(cin * t))
            use_res = stride == 1 and cin == cout
            y, j = x, 0
            if t != 1:
                y = _conv(g, y, cin, hidden, 1, f"{name}.conv.{j}.0")
                y = _relu6(g, _bn(g, y, hidden, f"{name}.conv.{j}.1"), f"{name}.conv.{j}.2")
                j += 1
            y = _conv(g, y, hidden, hidden, 3, f"{name}.conv.{j}.0", stride=stride, pad=1,
                      group=hidden)
            y = _relu6(g, _bn(g, y, hidden, f"{name}.conv.{j}.1"), f"{name}.conv.{j}.2")
            j += 1
            y = _conv(g, y, hidden, cout, 1, f"{name}.conv.{j}", gain=1.0)
            y = _bn(g, y, cout, f"{name}.conv.{j + 1}", gamma=residual_gamma if use_res else 1.0)
            x = g.op("Add", [x, y], f"{name}.add") if use_res else y
            cin = cout
            idx += 1
    x = _conv(g, x, cin, last, 1, f"features.{idx}.0")
    x = _relu6(g, _bn(g, x, last, f"features.{idx}.1"), f"features.{idx}.2")
    x = _gap_flatten(g, x)
    _classifier(g, x, last, num_classes, "classifier.1")
    return g.build((batch, num_classes), f"mobilenetv2 (width {width_mult}), seed={seed}")


# ---------------------------------------------------------------------------
# Transformer building blocks
# ---------------------------------------------------------------------------
def _linear(g: _GraphBuilder, x: str, fin: int, fout: int, name: str, std: float,
            bias: bool = True, out: str | None = None) -> str:
    """``x @ W (+ b)`` with a constant ``(fin, fout)`` weight (MatMul + Add)."""
    wname = g.normal(f"{name}.weight", (fin, fout), std)
    if not bias:
        return g.op("MatMul", [x, wname], name, out=out)
    y = g.op("MatMul", [x, wname], f"{name}.matmul")
    b = g.normal(f"{name}.bias", (fout,), 0.02)
    return g.op("Add", [y, b], f"{name}.add", out=out)


def _layer_norm(g: _GraphBuilder, x: str, hidden: int, name: str, eps: float,
                out: str | None = None) -> str:
    gamma = g.init(f"{name}.weight", np.ones(hidden, np.float32))
    beta = g.init(f"{name}.bias", np.zeros(hidden, np.float32))
    return g.op("LayerNormalization", [x, gamma, beta], name, out=out, axis=-1, epsilon=eps)


def _gelu(g: _GraphBuilder, x: str, name: str, mode: str) -> str:
    if mode == "op":
        return g.op("Gelu", [x], name)
    # 0.5 * x * (1 + erf(x / sqrt(2)))
    t = g.op("Div", [x, g.const(math.sqrt(2.0))], f"{name}.div")
    t = g.op("Erf", [t], f"{name}.erf")
    t = g.op("Add", [t, g.const(1.0)], f"{name}.add")
    t = g.op("Mul", [x, t], f"{name}.mul")
    return g.op("Mul", [t, g.const(0.5)], f"{name}.half")


def _split_heads(g, x, batch, seq, heads, head_dim, name, transpose_k=False):
    x = g.op("Reshape", [x, g.ints((batch, seq, heads, head_dim))], f"{name}.reshape")
    perm = [0, 2, 3, 1] if transpose_k else [0, 2, 1, 3]
    return g.op("Transpose", [x], f"{name}.transpose", perm=perm)


def _attention_core(g, q, k, v, batch, seq, heads, head_dim, name, mask=None):
    """softmax(q k^T / sqrt(d) [+ mask]) v, merged back to ``(batch, seq, hidden)``.

    ``q`` and ``v`` are ``(B, H, S, D)``; ``k`` is already ``(B, H, D, S)``.
    """
    scores = g.op("MatMul", [q, k], f"{name}.qk")
    scores = g.op("Mul", [scores, g.const(1.0 / math.sqrt(head_dim))], f"{name}.scale")
    if mask is not None:
        scores = g.op("Add", [scores, mask], f"{name}.mask")
    probs = g.op("Softmax", [scores], f"{name}.softmax", axis=-1)
    ctx = g.op("MatMul", [probs, v], f"{name}.pv")
    ctx = g.op("Transpose", [ctx], f"{name}.merge.transpose", perm=[0, 2, 1, 3])
    return g.op("Reshape", [ctx, g.ints((batch, seq, heads * head_dim))], f"{name}.merge.reshape")


def _mha(g, x, batch, seq, hidden, heads, name, std):
    """Multi-head self-attention with biased Q/K/V/output projections."""
    d = hidden // heads
    q = _linear(g, x, hidden, hidden, f"{name}.query", std)
    k = _linear(g, x, hidden, hidden, f"{name}.key", std)
    v = _linear(g, x, hidden, hidden, f"{name}.value", std)
    q = _split_heads(g, q, batch, seq, heads, d, f"{name}.query")
    k = _split_heads(g, k, batch, seq, heads, d, f"{name}.key", transpose_k=True)
    v = _split_heads(g, v, batch, seq, heads, d, f"{name}.value")
    ctx = _attention_core(g, q, k, v, batch, seq, heads, d, f"{name}.attn")
    return _linear(g, ctx, hidden, hidden, f"{name}.output", std)


def _check_transformer(hidden: int, heads: int, **others: int) -> None:
    _check_positive(hidden=hidden, heads=heads, **others)
    if hidden % heads:
        raise ValueError(f"hidden ({hidden}) must be divisible by heads ({heads})")


def _check_gelu(mode: str) -> int:
    if mode not in _GELU_MODES:
        raise ValueError(f"gelu must be one of {_GELU_MODES}, got {mode!r}")
    return GELU_OPSET if mode == "op" else DEFAULT_OPSET


# ---------------------------------------------------------------------------
# ViT
# ---------------------------------------------------------------------------
def vit_base(seed: int = 0, batch: int = 1, image_size: int | Sequence[int] = 224,
             patch_size: int = 16, hidden: int = 768, depth: int = 12, heads: int = 12,
             mlp: int = 3072, num_classes: int = 1000, in_channels: int = 3,
             gelu: str = "op", init_std: float = 0.02, eps: float = 1e-6) -> onnx.ModelProto:
    """Vision Transformer, ViT-B/16 by default (Dosovitskiy et al. 2021).

    Patch embedding as a ``patch_size`` x ``patch_size`` convolution with
    stride ``patch_size``, a learned class token (``Expand`` + ``Concat``),
    learned position embedding, ``depth`` pre-LN encoder layers
    (``x + MHA(LN(x))``, ``x + MLP(LN(x))``), a final LayerNorm and a linear
    head on the class token (``Gather`` index 0).

    Parameters
    ----------
    seed : int, optional
        Seed of the weight generator.
    batch : int, optional
        Batch size.
    image_size : int or (int, int), optional
        Input height and width; must be multiples of ``patch_size``.
    patch_size : int, optional
        Patch edge length.
    hidden : int, optional
        Embedding width.
    depth : int, optional
        Number of encoder layers.
    heads : int, optional
        Number of attention heads (must divide ``hidden``).
    mlp : int, optional
        Hidden width of the MLP blocks.
    num_classes : int, optional
        Width of the classification head.
    in_channels : int, optional
        Number of input image channels.
    gelu : {"op", "erf"}, optional
        ``"op"``: native ``Gelu`` operator (opset 20); ``"erf"``: Erf-based
        formula (opset 17).
    init_std : float, optional
        Standard deviation of the transformer weights.
    eps : float, optional
        LayerNorm epsilon.

    Returns
    -------
    onnx.ModelProto
        Graph with input ``"input"`` ``(batch, in_channels, H, W)`` and output
        ``"output"`` ``(batch, num_classes)``.
    """
    h, w = _pair(image_size)
    _check_transformer(hidden, heads, batch=batch, image_height=h, image_width=w,
                       patch_size=patch_size, depth=depth, mlp=mlp, num_classes=num_classes,
                       in_channels=in_channels)
    if h % patch_size or w % patch_size:
        raise ValueError(f"image size {h}x{w} is not a multiple of patch_size {patch_size}")
    g = _GraphBuilder("vit_base", seed, opset=_check_gelu(gelu))
    n_patches = (h // patch_size) * (w // patch_size)
    seq = n_patches + 1
    x = g.add_input("input", (batch, in_channels, h, w))
    fan_in = in_channels * patch_size * patch_size
    pw = g.normal("conv_proj.weight", (hidden, in_channels, patch_size, patch_size),
                  math.sqrt(1.0 / fan_in))
    pb = g.normal("conv_proj.bias", (hidden,), 0.02)
    x = g.op("Conv", [x, pw, pb], "conv_proj", kernel_shape=[patch_size, patch_size],
             strides=[patch_size, patch_size])
    x = g.op("Reshape", [x, g.ints((batch, hidden, n_patches))], "patches.reshape")
    x = g.op("Transpose", [x], "patches.transpose", perm=[0, 2, 1])
    cls = g.normal("class_token", (1, 1, hidden), init_std)
    cls = g.op("Expand", [cls, g.ints((batch, 1, hidden))], "class_token.expand")
    x = g.op("Concat", [cls, x], "tokens", axis=1)
    pos = g.normal("encoder.pos_embedding", (1, seq, hidden), init_std)
    x = g.op("Add", [x, pos], "encoder.pos_add")
    for i in range(depth):
        name = f"encoder.layers.{i}"
        y = _layer_norm(g, x, hidden, f"{name}.ln_1", eps)
        y = _mha(g, y, batch, seq, hidden, heads, f"{name}.self_attention", init_std)
        x = g.op("Add", [x, y], f"{name}.residual1")
        y = _layer_norm(g, x, hidden, f"{name}.ln_2", eps)
        y = _linear(g, y, hidden, mlp, f"{name}.mlp.0", init_std)
        y = _gelu(g, y, f"{name}.mlp.1", gelu)
        y = _linear(g, y, mlp, hidden, f"{name}.mlp.3", init_std)
        x = g.op("Add", [x, y], f"{name}.residual2")
    x = _layer_norm(g, x, hidden, "encoder.ln", eps)
    x = g.op("Gather", [x, g.const(0, np.int64)], "class_token.select", axis=1)
    _linear(g, x, hidden, num_classes, "heads.head", init_std, out="output")
    return g.build((batch, num_classes), f"ViT (hidden={hidden}, depth={depth}), seed={seed}")


# ---------------------------------------------------------------------------
# BERT encoder layer
# ---------------------------------------------------------------------------
def bert_layer(seed: int = 0, batch: int = 1, seq_len: int = 128, hidden: int = 768,
               heads: int = 12, ffn: int = 3072, gelu: str = "op", init_std: float = 0.02,
               eps: float = 1e-12, layers: int = 1) -> onnx.ModelProto:
    """One post-LN BERT encoder layer (BERT-base sizes by default), or ``layers`` of them in a row.

    ``h = LN(x + Wo(MHA(x)))``, ``out = LN(h + W2(GELU(W1 h)))``.  The Q/K/V
    and output projections are ``MatMul`` with constant weights + ``Add``
    bias; the attention products ``Q K^T`` and ``P V`` are ``MatMul`` nodes
    whose both operands are runtime tensors.

    Parameters
    ----------
    seed : int, optional
        Seed of the weight generator.
    batch : int, optional
        Batch size.
    seq_len : int, optional
        Sequence length.
    hidden : int, optional
        Hidden size.
    heads : int, optional
        Number of attention heads (must divide ``hidden``).
    ffn : int, optional
        Intermediate (feed-forward) size.
    gelu : {"op", "erf"}, optional
        ``"op"``: native ``Gelu`` operator (opset 20); ``"erf"``: Erf-based
        formula (opset 17).
    init_std : float, optional
        Standard deviation of the weights.
    eps : float, optional
        LayerNorm epsilon.
    layers : int, optional
        Encoder layers one after another (names prefixed ``layer.<i>.`` when
        more than one; one layer keeps the names above).

    Returns
    -------
    onnx.ModelProto
        Graph with input ``"hidden_states"`` ``(batch, seq_len, hidden)`` and
        output ``"output"`` of the same shape.
    """
    _check_transformer(hidden, heads, batch=batch, seq_len=seq_len, ffn=ffn, layers=layers)
    g = _GraphBuilder("bert_layer", seed, opset=_check_gelu(gelu))
    y = g.add_input("hidden_states", (batch, seq_len, hidden))
    for i in range(layers):
        p = f"layer.{i}." if layers > 1 else ""
        last = i == layers - 1
        x = y
        y = _mha(g, x, batch, seq_len, hidden, heads, p + "attention", init_std)
        x = g.op("Add", [y, x], p + "attention.residual")
        x = _layer_norm(g, x, hidden, p + "attention.output.LayerNorm", eps)
        y = _linear(g, x, hidden, ffn, p + "intermediate.dense", init_std)
        y = _gelu(g, y, p + "intermediate.gelu", gelu)
        y = _linear(g, y, ffn, hidden, p + "output.dense", init_std)
        y = g.op("Add", [y, x], p + "output.residual")
        y = _layer_norm(g, y, hidden, p + "output.LayerNorm", eps, out="output" if last else None)
    what = "BERT encoder layer" if layers == 1 else f"BERT encoder ({layers} layers)"
    return g.build((batch, seq_len, hidden),
                   f"{what} (hidden={hidden}, heads={heads}), seed={seed}")


# ---------------------------------------------------------------------------
# LLaMA decoder layer
# ---------------------------------------------------------------------------
def _rms_norm(g: _GraphBuilder, x: str, hidden: int, name: str, eps: float) -> str:
    """``x / sqrt(mean(x^2) + eps) * w`` with primitive ops."""
    sq = g.op("Pow", [x, g.const(2.0)], f"{name}.pow")
    ms = g.op("ReduceMean", [sq], f"{name}.mean", axes=[-1], keepdims=1)
    ms = g.op("Add", [ms, g.const(eps)], f"{name}.eps")
    rms = g.op("Sqrt", [ms], f"{name}.sqrt")
    y = g.op("Div", [x, rms], f"{name}.div")
    wname = g.init(f"{name}.weight", np.ones(hidden, np.float32))
    return g.op("Mul", [y, wname], f"{name}.mul")


def _rope_tables(seq: int, head_dim: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    inv_freq = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    freqs = np.outer(np.arange(seq, dtype=np.float64), inv_freq)
    emb = np.concatenate([freqs, freqs], axis=-1)
    return np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)


def _apply_rope(g, x, cos, sin, head_dim, name):
    """``x * cos + rotate_half(x) * sin`` on ``(B, H, S, D)`` tensors."""
    half = head_dim // 2
    axes = g.ints([-1])
    x1 = g.op("Slice", [x, g.ints([0]), g.ints([half]), axes], f"{name}.x1")
    x2 = g.op("Slice", [x, g.ints([half]), g.ints([head_dim]), axes], f"{name}.x2")
    nx2 = g.op("Neg", [x2], f"{name}.neg")
    rot = g.op("Concat", [nx2, x1], f"{name}.rotate_half", axis=-1)
    a = g.op("Mul", [x, cos], f"{name}.cos")
    b = g.op("Mul", [rot, sin], f"{name}.sin")
    return g.op("Add", [a, b], f"{name}.add")


def llama_layer(seed: int = 0, batch: int = 1, seq_len: int = 128, hidden: int = 4096,
                heads: int = 32, ffn: int = 11008, init_std: float = 0.02,
                eps: float = 1e-6, rope_theta: float = 10000.0) -> onnx.ModelProto:
    """One LLaMA decoder layer (LLaMA-7B sizes by default).

    ``h = x + Wo(CausalAttn(RoPE(Wq n), RoPE(Wk n), Wv n))`` with
    ``n = RMSNorm(x)``, then ``out = h + Wd(SiLU(Wg m) * Wu m)`` with
    ``m = RMSNorm(h)``.  RMSNorm is spelled out with
    ``Pow``/``ReduceMean``/``Add``/``Sqrt``/``Div``/``Mul``; projections have no
    bias; rotary cos/sin tables (positions ``0..seq_len-1``) and the additive
    causal mask are constants; SiLU is ``x * Sigmoid(x)``.

    Parameters
    ----------
    seed : int, optional
        Seed of the weight generator.
    batch : int, optional
        Batch size.
    seq_len : int, optional
        Sequence length.
    hidden : int, optional
        Hidden size.
    heads : int, optional
        Number of attention heads (``hidden / heads`` must be even).
    ffn : int, optional
        Intermediate size of the SwiGLU feed-forward network.
    init_std : float, optional
        Standard deviation of the projection weights.
    eps : float, optional
        RMSNorm epsilon.
    rope_theta : float, optional
        Base of the rotary embedding frequencies.

    Returns
    -------
    onnx.ModelProto
        Graph with input ``"hidden_states"`` ``(batch, seq_len, hidden)`` and
        output ``"output"`` of the same shape.
    """
    _check_transformer(hidden, heads, batch=batch, seq_len=seq_len, ffn=ffn)
    d = hidden // heads
    if d % 2:
        raise ValueError(f"head dimension hidden/heads = {d} must be even for rotary embedding")
    g = _GraphBuilder("llama_layer", seed)
    x = g.add_input("hidden_states", (batch, seq_len, hidden))
    cos_t, sin_t = _rope_tables(seq_len, d, rope_theta)
    cos = g.init("rope.cos", cos_t)
    sin = g.init("rope.sin", sin_t)
    mask_t = np.triu(np.full((seq_len, seq_len), -1e9, np.float32), k=1)
    mask = g.init("causal_mask", mask_t)

    n = _rms_norm(g, x, hidden, "input_layernorm", eps)
    q = _linear(g, n, hidden, hidden, "self_attn.q_proj", init_std, bias=False)
    k = _linear(g, n, hidden, hidden, "self_attn.k_proj", init_std, bias=False)
    v = _linear(g, n, hidden, hidden, "self_attn.v_proj", init_std, bias=False)
    q = _split_heads(g, q, batch, seq_len, heads, d, "self_attn.q")
    k = _split_heads(g, k, batch, seq_len, heads, d, "self_attn.k")
    v = _split_heads(g, v, batch, seq_len, heads, d, "self_attn.v")
    q = _apply_rope(g, q, cos, sin, d, "self_attn.q_rope")
    k = _apply_rope(g, k, cos, sin, d, "self_attn.k_rope")
    k = g.op("Transpose", [k], "self_attn.k_t", perm=[0, 1, 3, 2])
    ctx = _attention_core(g, q, k, v, batch, seq_len, heads, d, "self_attn.attn", mask=mask)
    y = _linear(g, ctx, hidden, hidden, "self_attn.o_proj", init_std, bias=False)
    x = g.op("Add", [x, y], "residual1")

    m = _rms_norm(g, x, hidden, "post_attention_layernorm", eps)
    gate = _linear(g, m, hidden, ffn, "mlp.gate_proj", init_std, bias=False)
    up = _linear(g, m, hidden, ffn, "mlp.up_proj", init_std, bias=False)
    sig = g.op("Sigmoid", [gate], "mlp.sigmoid")
    act = g.op("Mul", [gate, sig], "mlp.silu")
    act = g.op("Mul", [act, up], "mlp.glu")
    y = _linear(g, act, ffn, hidden, "mlp.down_proj", init_std, bias=False)
    g.op("Add", [x, y], "residual2", out="output")
    return g.build((batch, seq_len, hidden),
                   f"LLaMA decoder layer (hidden={hidden}, heads={heads}), seed={seed}")


# ---------------------------------------------------------------------------
# Decode steps (one new token against a KV cache), for bank-level PIM
# ---------------------------------------------------------------------------
def decode_layer(batch: int = 1, ctx: int = 128, hidden: int = 512, heads: int = 4, ffn: int = 2048,
                 arch: str = "gpt", seed: int = 0):
    """One decoder layer for one new token (ONNX ModelProto).

    Parameters
    ----------
    batch, ctx, hidden, heads, ffn : int
        Sequences, cached tokens, hidden size, heads, MLP width.
    arch : {'gpt', 'llama'}
    seed : int
        Seed of the weights.

    Returns
    -------
    onnx.ModelProto
        Inputs ``x`` (B, 1, hidden), ``k_cache``, ``v_cache``; outputs ``y``,
        ``k_new``, ``v_new``.
    """
    for k, v in dict(batch=batch, ctx=ctx, hidden=hidden, heads=heads, ffn=ffn).items():
        if not isinstance(v, int) or v <= 0:
            raise ValueError(f"decode_layer: {k} must be a positive integer, got {v!r}")
    if hidden % heads:
        raise ValueError(f"decode_layer: hidden ({hidden}) must be divisible by heads ({heads})")
    if arch not in ("gpt", "llama"):
        raise ValueError(f"decode_layer: arch must be 'gpt' or 'llama', got {arch!r}")
    D = hidden // heads
    rng = np.random.default_rng(seed)
    g = GraphParts("const.")
    inits, nodes, c, op = g.inits, g.nodes, g.const, g.op

    def w(name, shape, std):
        a = (rng.standard_normal(shape) * std).astype(np.float32)
        inits.append(numpy_helper.from_array(a, name))
        return name

    def norm(x, name):
        if arch == "gpt":
            return op("LayerNormalization", [x, c(np.ones(hidden)), c(np.zeros(hidden))], axis=-1, epsilon=1e-5)
        sq = op("Mul", [x, x])
        ms = op("ReduceMean", [sq], axes=[-1], keepdims=1)
        r = op("Sqrt", [op("Add", [ms, c(1e-6)])])
        return op("Mul", [op("Div", [x, r]), c(np.ones(hidden))])

    std = 0.02
    h = norm("x", "ln1")
    qkv = op("MatMul", [h, w("w_qkv", (hidden, 3 * hidden), std)])
    q, kn, vn = (op("Slice", [qkv, c([i * hidden], np.int64), c([(i + 1) * hidden], np.int64), c([-1], np.int64)]) for i in range(3))
    nodes.append(helper.make_node("Identity", [kn], ["k_new"]))
    nodes.append(helper.make_node("Identity", [vn], ["v_new"]))
    qh = op("Transpose", [op("Reshape", [q, c([batch, 1, heads, D], np.int64)])], perm=[0, 2, 1, 3])
    s = op("MatMul", [qh, "k_cache"])
    s = op("Mul", [s, c(1.0 / math.sqrt(D))])
    p = op("Softmax", [s], axis=-1)
    o = op("MatMul", [p, "v_cache"])
    o = op("Reshape", [op("Transpose", [o], perm=[0, 2, 1, 3]), c([batch, 1, hidden], np.int64)])
    o = op("MatMul", [o, w("w_o", (hidden, hidden), std)])
    x1 = op("Add", ["x", o])
    h2 = norm(x1, "ln2")
    if arch == "gpt":
        u = op("MatMul", [h2, w("w_fc1", (hidden, ffn), std)])
        u = op("Mul", [u, op("Sigmoid", [op("Mul", [u, c(1.702)])])])  # GELU (sigmoid approximation)
    else:
        g = op("MatMul", [h2, w("w_gate", (hidden, ffn), std)])
        up = op("MatMul", [h2, w("w_up", (hidden, ffn), std)])
        u = op("Mul", [op("Mul", [g, op("Sigmoid", [g])]), up])
    d = op("MatMul", [u, w("w_fc2", (ffn, hidden), std)])
    nodes.append(helper.make_node("Add", [x1, d], ["y"]))
    graph = helper.make_graph(
        nodes,
        f"{arch}_decode_layer",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 1, hidden]),
            helper.make_tensor_value_info("k_cache", TensorProto.FLOAT, [batch, heads, D, ctx]),
            helper.make_tensor_value_info("v_cache", TensorProto.FLOAT, [batch, heads, ctx, D]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 1, hidden]),
            helper.make_tensor_value_info("k_new", TensorProto.FLOAT, [batch, 1, hidden]),
            helper.make_tensor_value_info("v_new", TensorProto.FLOAT, [batch, 1, hidden]),
        ],
        inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def gpt_decode(seed: int = 0, **kwargs: Any) -> onnx.ModelProto:
    """One GPT-3 style (LayerNorm, GELU MLP) decoder layer for one new token against a KV cache.

    Parameters
    ----------
    seed : int
        Seed of the weights.
    **kwargs
        ``batch``, ``ctx``, ``hidden``, ``heads``, ``ffn`` (see :func:`decode_layer`).

    Returns
    -------
    onnx.ModelProto
    """
    return decode_layer(arch="gpt", seed=seed, **kwargs)


def llama_decode(seed: int = 0, **kwargs: Any) -> onnx.ModelProto:
    """One LLaMA style (RMSNorm, SwiGLU MLP) decoder layer for one new token against a KV cache.

    Parameters
    ----------
    seed : int
        Seed of the weights.
    **kwargs
        ``batch``, ``ctx``, ``hidden``, ``heads``, ``ffn`` (see :func:`decode_layer`).

    Returns
    -------
    onnx.ModelProto
    """
    return decode_layer(arch="llama", seed=seed, **kwargs)


# ---------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------
#: Registry of model builders, ``name -> builder(seed=..., batch=..., **size_knobs)``.
MODELS: dict[str, Callable[..., onnx.ModelProto]] = {
    "resnet18": resnet18,
    "resnet34": resnet34,
    "resnet50": resnet50,
    "resnet101": resnet101,
    "vgg16": vgg16,
    "vgg19": vgg19,
    "vgg8": vgg8,
    "googlenet": googlenet,
    "alexnet": alexnet,
    "zfnet": zfnet,
    "densenet121": densenet121,
    "mobilenetv2": mobilenetv2,
    "vit_base": vit_base,
    "bert_layer": bert_layer,
    "llama_layer": llama_layer,
    "gpt_decode": gpt_decode,
    "llama_decode": llama_decode,
}


def build_model(name: str, seed: int = 0, **kwargs: Any) -> onnx.ModelProto:
    """Build a zoo model by name.

    Parameters
    ----------
    name : str
        One of the keys of :data:`MODELS`.
    seed : int, optional
        Seed of the weight generator; equal seeds give identical weights.
    **kwargs
        Size knobs forwarded to the builder (``batch``, ``image_size``,
        ``seq_len``, ``hidden`` ...).

    Returns
    -------
    onnx.ModelProto
        The generated model.

    Raises
    ------
    ValueError
        If ``name`` is unknown (the message lists the known names) or a size
        knob is invalid.
    """
    try:
        builder = MODELS[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown model {name!r}; known models: {', '.join(MODELS)}"
        ) from None
    return builder(seed=seed, **kwargs)


def export(name: str, path: str | os.PathLike, seed: int = 0, **kwargs: Any) -> pathlib.Path:
    """Build a zoo model and save it as an ``.onnx`` file.

    Parameters
    ----------
    name : str
        Model name (see :data:`MODELS`).
    path : str or os.PathLike
        Destination file; missing parent directories are created.
    seed : int, optional
        Seed of the weight generator.
    **kwargs
        Size knobs forwarded to the builder.

    Returns
    -------
    pathlib.Path
        The path written.
    """
    model = build_model(name, seed=seed, **kwargs)
    out = pathlib.Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(out))
    return out


def input_shapes(model: onnx.ModelProto) -> dict[str, tuple]:
    """Shapes of the true graph inputs (initializers excluded).

    Parameters
    ----------
    model : onnx.ModelProto
        Any ONNX model.

    Returns
    -------
    dict of str to tuple
        ``name -> shape``; static dimensions are ints, symbolic ones their
        ``dim_param`` string (or ``None`` if unnamed).
    """
    inits = {t.name for t in model.graph.initializer}
    shapes: dict[str, tuple] = {}
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        dims = []
        for dim in inp.type.tensor_type.shape.dim:
            if dim.HasField("dim_value"):
                dims.append(int(dim.dim_value))
            elif dim.HasField("dim_param"):
                dims.append(dim.dim_param)
            else:
                dims.append(None)
        shapes[inp.name] = tuple(dims)
    return shapes


def random_inputs(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Standard-normal float32 arrays for every graph input.

    Parameters
    ----------
    model : onnx.ModelProto
        Model with static input shapes.
    seed : int, optional
        Seed of the generator.

    Returns
    -------
    dict of str to numpy.ndarray
        ``name -> array`` suitable as an onnxruntime feed.

    Raises
    ------
    ValueError
        If an input has a symbolic or unknown dimension.
    """
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for name, shape in input_shapes(model).items():
        if not all(isinstance(d, int) for d in shape):
            raise ValueError(f"input {name!r} has a non-static shape {shape}")
        feeds[name] = rng.standard_normal(shape, dtype=np.float32)
    return feeds

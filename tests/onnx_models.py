"""Small ONNX models built in code for tests (no tvm_cim import here)."""

import numpy as np
from onnx import TensorProto, helper, numpy_helper


def small_cnn(seed=0):
    """conv (strided, padded) -> relu -> depthwise conv -> maxpool -> softmax(gemm)."""
    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype("float32")
    b1 = rng.standard_normal(8).astype("float32") * 0.1
    w2 = (rng.standard_normal((8, 1, 3, 3)) * 0.3).astype("float32")
    g = (rng.standard_normal((10, 8 * 4 * 4)) * 0.1).astype("float32")
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], group=8),
        helper.make_node("MaxPool", ["c2"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "g"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["y"], axis=1),
    ]
    graph = helper.make_graph(
        nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (g, "g"))],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])

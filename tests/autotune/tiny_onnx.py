"""A tiny ONNX model for whole-model tuning tests: x[4, n] -> MatMul -> Add -> Relu -> MatMul
-> Softmax, three fused functions (matmul+add+relu, matmul, softmax) that build in
milliseconds."""
from __future__ import annotations

import numpy as np


def write_tiny_mlp(path, n: int = 32) -> str:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((n, n)).astype(np.float32), "w1"),
               numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "b1"),
               numpy_helper.from_array(rng.standard_normal((n, 16)).astype(np.float32), "w2")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("Add", ["h", "b1"], ["h2"]),
             helper.make_node("Relu", ["h2"], ["h3"]),
             helper.make_node("MatMul", ["h3", "w2"], ["h4"]),
             helper.make_node("Softmax", ["h4"], ["y"], axis=-1)]
    graph = helper.make_graph(
        nodes, "tiny_mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (4, n))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (4, 16))], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    # The IR version the test models use (tests/graph/onnx_models.py): a newer onnx writes
    # a newer one by default, which an older onnxruntime refuses to load.
    model.ir_version = 8
    onnx.save(model, str(path))
    return str(path)

"""The ONNX corpus of tests/models: the onnx.helper models written by make_corpus.py and the
PyTorch exports written by export_torch.py.  Every model imports (its symbolic dimensions
fixed by input_shapes), builds with default schedules and matches onnxruntime; the helper
models are the ones their script writes today; the exports keep their dynamic axes."""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest

pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper

from autotune.frontends import load_model
from autotune.frontends.onnx import operator_report
from autotune.graph.errors import FrontendError
from autotune.graph.build import build_model

from ..models.corpus import (
    CORPUS,
    HELPER_MODELS,
    TORCH_MODELS,
    input_shapes,
    make_inputs,
    path_of,
)
from .helpers import TARGET
from .onnx_models import run_onnxruntime


def _check_against_onnxruntime(path, specs, shapes=None):
    feeds = make_inputs(specs)
    expected = run_onnxruntime(onnx.load(path), feeds)
    lib = build_model(load_model(path, shapes), TARGET, warn=False)
    got = lib.run(feeds)
    assert set(got) == set(expected)
    for out, want in expected.items():
        assert got[out].shape == want.shape, out
        # fp32: the kernels sum in another order than onnxruntime's.
        np.testing.assert_allclose(got[out], want, rtol=1e-4, atol=1e-4, err_msg=out)


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_corpus_model_matches_onnxruntime(name):
    path = path_of(name)
    assert os.path.getsize(path) < 1 << 20
    assert all(ok for _, _, ok in operator_report(path))
    _check_against_onnxruntime(path, CORPUS[name],
                               input_shapes(name) if name in TORCH_MODELS else None)


@pytest.mark.parametrize("name", sorted(TORCH_MODELS))
def test_torch_exports_keep_their_dynamic_axes(name):
    """The files declare the symbolic axes they were exported with; imported without
    input_shapes, the error names the input and the dimension, and says how to fix it."""
    spec = TORCH_MODELS[name]
    declared = {vi.name: [d.dim_param for d in vi.type.tensor_type.shape.dim]
                for vi in onnx.load(path_of(name)).graph.input}
    for input_name, axes in spec["dynamic_axes"].items():
        for axis, dim in axes.items():
            assert declared[input_name][axis] == dim
    first, axes = next(iter(spec["dynamic_axes"].items()))
    with pytest.raises(FrontendError, match=rf"input '{first}' .*symbolic dimension "
                                            rf"'{axes[0]}' at axis 0.*input_shapes="
                                            rf".*--input-shape {first}="):
        load_model(path_of(name))


def test_bert_layer_runs_at_a_batch_and_sequence_it_was_not_traced_with():
    """The Shape/Gather/Concat chains of the export are folded for the shapes given, not for
    the ones the exporter traced (2 x 8)."""
    specs = [("hidden", (3, 5, 32), "float32"), ("mask", (3, 5), "int64")]
    _check_against_onnxruntime(path_of("bert_layer_mask.onnx"), specs,
                               {n: s for n, s, _ in specs})


def test_expand_of_a_computed_bool_mask_matches_onnxruntime():
    """DistilBERT's masked_fill exports Expand on the bool result of Equal."""
    nodes = [helper.make_node("Greater", ["x", "zero"], ["m"]),
             helper.make_node("Expand", ["m", "shape"], ["e"]),
             helper.make_node("Where", ["e", "x", "fill"], ["y"])]
    graph = helper.make_graph(
        nodes, "expand_bool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0]),
         helper.make_tensor("fill", TensorProto.FLOAT, [], [-7.0]),
         helper.make_tensor("shape", TensorProto.INT64, [2], [3, 4])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.array([[-1.0, 2.0, -3.0, 4.0]], np.float32)
    got = build_model(load_model(proto), TARGET, warn=False).run({"x": x})["y"]
    np.testing.assert_array_equal(got, run_onnxruntime(proto, {"x": x})["y"])
    np.testing.assert_array_equal(got, np.broadcast_to(np.where(x > 0, x, -7.0), (3, 4)))


@pytest.mark.parametrize("name", sorted(HELPER_MODELS))
def test_corpus_file_is_what_the_script_writes(name):
    """A file edited by hand, or a script changed without rerunning it, shows here.  Nodes
    and weights are compared, not the whole file: another onnx version may write another
    IR version or inferred value_info.  (The PyTorch exports are not compared: their bytes
    depend on the PyTorch version.)"""
    build, shape = HELPER_MODELS[name]
    stored, fresh = onnx.load(path_of(name)).graph, build(shape).graph
    assert [n.SerializeToString() for n in stored.node] == \
        [n.SerializeToString() for n in fresh.node]
    assert [t.SerializeToString() for t in stored.initializer] == \
        [t.SerializeToString() for t in fresh.initializer]

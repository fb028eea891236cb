"""An index from the data outside its buffer is a typed error from a built model and from its
exported artifact, never a silent zero or a read past the buffer.

The model: an embedding lookup (ONNX Gather of a weight table at the token ids, the model's
input) followed by a Relu, as the first node of a language model does.
"""
from __future__ import annotations

import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import autotune
from search import SearchConfig
from tensor_ir import KernelIndexError

VOCAB, WIDTH, TOKENS = 50, 32, 7


def embedding_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    table = rng.standard_normal((VOCAB, WIDTH)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["rows"], axis=0),
         helper.make_node("Relu", ["rows"], ["out"])],
        "embedding",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, TOKENS])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, TOKENS, WIDTH])],
        initializer=[numpy_helper.from_array(table, "table")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def built():
    onnx_model = embedding_model()
    table = numpy_helper.to_array(onnx_model.graph.initializer[0])
    return autotune.build(autotune.load_model(onnx_model), "llvm"), table


def good_ids():
    return np.array([[0, 49, 3, 3, -1, 17, -50]], dtype=np.int64)  # ONNX: negative from the end


def test_the_lookup_matches_numpy(built):
    lib, table = built
    out = lib.run({"ids": good_ids()})["out"]
    np.testing.assert_array_equal(out, np.maximum(table[good_ids() % VOCAB], 0))


@pytest.mark.parametrize("bad", [VOCAB, -VOCAB - 1, 1 << 33])
def test_an_index_outside_the_table_raises_naming_it(built, bad):
    lib, table = built
    ids = good_ids()
    ids[0, 2] = bad
    with pytest.raises(KernelIndexError) as info:
        lib.run({"ids": ids})
    err = info.value
    assert err.value == "table" and err.extent == VOCAB and err.axis == 0
    # The kernel checks the index after ONNX's wrap of negative ones.
    assert err.index == (bad + VOCAB if bad < 0 else bad)
    # The executor goes on: the next good run is right.
    out = lib.run({"ids": good_ids()})["out"]
    np.testing.assert_array_equal(out, np.maximum(table[good_ids() % VOCAB], 0))


def test_the_exported_artifact_raises_too(built, tmp_path):
    lib, table = built
    folder = lib.export_library(tmp_path / "embedding")
    sys.path.insert(0, str(folder))
    try:
        import loader
        deployed = loader.load(folder)
        out = deployed.run({"ids": good_ids()})["out"]
        np.testing.assert_array_equal(out, np.maximum(table[good_ids() % VOCAB], 0))
        ids = good_ids()
        ids[0, 5] = VOCAB + 4
        with pytest.raises(loader.DataIndexError) as info:
            deployed.run({"ids": ids})
        err = info.value
        assert (err.value, err.axis, err.index, err.extent) == ("table", 0, VOCAB + 4, VOCAB)
        assert isinstance(err, IndexError)
        out = deployed.run({"ids": good_ids()})["out"]
        np.testing.assert_array_equal(out, np.maximum(table[good_ids() % VOCAB], 0))
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("loader", None)


def test_a_gather_tunes_on_indices_drawn_in_range():
    # The measurement fills an index input from [0, extent) (runner.param_spec's bound): on
    # the small random integers of other inputs a 3-row table would fail its checks.
    from autotune.measure.runner import param_spec
    from tensor_ir import te

    table = te.placeholder((3, 64), "float32", name="table")
    ids = te.placeholder((40,), "int64", name="ids")
    out = te.compute((40, 64), lambda i, j: table[ids[i], j] + 1.0, name="out")
    func = te.create_prim_func([table, ids, out], name="lookup")
    assert [p.get("bound") for p in param_spec(func)] == [None, 3, None]
    result = autotune.tune(func, "llvm", trials=8, search=SearchConfig(batch_size=4, seed=0),
                           log=False)
    errors = [t for t in result.history if t.error_kind]
    assert result.best_schedule is not None and not errors, errors[:2]

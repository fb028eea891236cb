"""The ONNX corpus of tests/models (written by tests/models/make_corpus.py): every model
imports, builds with default schedules and matches onnxruntime; the files are the ones the
script writes today."""
from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from autotune.frontends import load_model  # noqa: E402
from autotune.frontends.onnx import operator_report  # noqa: E402
from autotune.model_build import build_model  # noqa: E402

from .helpers import TARGET  # noqa: E402
from .onnx_models import run_onnxruntime  # noqa: E402

CORPUS = os.path.join(os.path.dirname(__file__), os.pardir, "models")


def _corpus_module():
    spec = importlib.util.spec_from_file_location("make_corpus",
                                                  os.path.join(CORPUS, "make_corpus.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MODELS = _corpus_module().MODELS


@pytest.mark.parametrize("name", sorted(MODELS))
def test_corpus_model_matches_onnxruntime(name):
    path = os.path.join(CORPUS, name)
    assert os.path.getsize(path) < 1 << 20
    assert all(ok for _, _, ok in operator_report(path))
    _, shape = MODELS[name]
    x = np.random.default_rng(0).uniform(-1, 1, shape).astype(np.float32)
    expected = run_onnxruntime(onnx.load(path), {"x": x})
    lib = build_model(load_model(path), TARGET, warn=False)
    got = lib.run({"x": x})
    assert set(got) == set(expected)
    for out, want in expected.items():
        np.testing.assert_allclose(got[out], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_corpus_file_is_what_the_script_writes(name):
    """A file edited by hand, or a script changed without rerunning it, shows here.  Nodes
    and weights are compared, not the whole file: another onnx version may write another
    IR version or inferred value_info."""
    build, shape = MODELS[name]
    stored, fresh = onnx.load(os.path.join(CORPUS, name)).graph, build(shape).graph
    assert [n.SerializeToString() for n in stored.node] == \
        [n.SerializeToString() for n in fresh.node]
    assert [t.SerializeToString() for t in stored.initializer] == \
        [t.SerializeToString() for t in fresh.initializer]

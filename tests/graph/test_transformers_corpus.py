"""Hugging Face ``transformers`` models as torch.onnx.export writes them: narrow two-layer
BERT, GPT-2 (also its decode step: one token after a 127-token cache passed in and out as
tensors) and wav2vec2 (the same operators as the full-size ones: embeddings, the padding
and causal masks, attention, layer norm, GELU, wav2vec2's 1-D convolution front end), built
from their configurations with random weights by ``python -m benchmarks.model_corpus --small
--write tests/models/transformers`` (torch, onnxscript and transformers installed by hand).
Each imports, builds with default schedules and matches onnxruntime on its saved inputs."""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest

from autotune.frontends import load_model
from autotune.graph.build import build_model

from .helpers import TARGET
from .onnx_models import run_onnxruntime

FOLDER = os.path.join(os.path.dirname(__file__), os.pardir, "models", "transformers")
MODELS = ("bert_base_small", "gpt2_small", "gpt2_decode_small", "wav2vec2_base_small")


@pytest.mark.parametrize("name", MODELS)
def test_the_export_builds_and_matches_onnxruntime(name):
    path = os.path.join(FOLDER, f"{name}.onnx")
    with np.load(os.path.join(FOLDER, f"{name}_inputs.npz")) as saved:
        feeds = {key: saved[key] for key in saved.files}
    proto = onnx.load(path)
    assert max(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")) >= 18
    expected = run_onnxruntime(proto, feeds)
    lib = build_model(load_model(path), TARGET, warn=False)
    got = lib.run(feeds)
    assert set(got) == set(expected)
    for out, want in expected.items():
        scale = float(np.max(np.abs(want))) or 1.0
        assert got[out].shape == want.shape
        assert float(np.max(np.abs(got[out] - want))) / scale <= 1e-4, out

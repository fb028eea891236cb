"""Every model of the ONNX corpus with the inputs to run it on: the onnx.helper models of
``make_corpus.py`` (one float input ``x``, static shapes) and the PyTorch exports of
``export_torch.py`` (listed in ``torch_corpus.py``, with symbolic batch and sequence axes that
the shapes below fix)."""
from __future__ import annotations

import os

import numpy as np

from .make_corpus import MODELS as HELPER_MODELS
from .torch_corpus import TORCH_MODELS

FOLDER = os.path.dirname(os.path.abspath(__file__))

# file -> [(input name, shape, dtype)]
CORPUS = {name: [("x", shape, "float32")] for name, (_, shape) in HELPER_MODELS.items()}
CORPUS.update({name: list(spec["inputs"]) for name, spec in TORCH_MODELS.items()})


def path_of(name: str) -> str:
    return os.path.join(FOLDER, name)


def input_shapes(name: str) -> dict[str, tuple[int, ...]]:
    return {input_name: shape for input_name, shape, _ in CORPUS[name]}


def make_inputs(specs, seed: int = 0) -> dict[str, np.ndarray]:
    """Uniform floats in [-1, 1]; an int64 input is an attention mask of ones whose first row
    ends in two padded (0) positions, so that masking changes the result."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for input_name, shape, dtype in specs:
        if dtype == "int64":
            mask = np.ones(shape, np.int64)
            mask[0, -2:] = 0
            feeds[input_name] = mask
        else:
            feeds[input_name] = rng.uniform(-1, 1, shape).astype(dtype)
    return feeds

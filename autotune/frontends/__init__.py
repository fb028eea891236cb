"""Model frontends: ONNX import and the built-in zoo, behind ``load_model``."""
from __future__ import annotations

import os

from ..graph.errors import FrontendError
from ..graph.ir import Model
from .onnx import DEFAULT_MAX_ELEMENTS, SUPPORTED_OPS, from_onnx
from .zoo import ZOO, get_model

__all__ = ["load_model", "from_onnx", "get_model", "ZOO", "SUPPORTED_OPS",
           "DEFAULT_MAX_ELEMENTS"]


def load_model(source, input_shapes: dict | None = None, *,
               max_elements: int = DEFAULT_MAX_ELEMENTS, **options) -> Model:
    """A Model from an .onnx path, an ``onnx.ModelProto`` (or its serialized bytes), a zoo
    name ("resnet18", "resnet50", "mobilenet_v2", "bert_base_layer"), or a Model (returned
    as is).  ``input_shapes`` fixes symbolic ONNX input dimensions; ``options`` go to the zoo
    model (``image_size``, ``batch``, ``seq``, ...).  ``max_elements`` bounds the size of
    every tensor an ONNX import creates (2**31 elements by default; a larger model raises
    FrontendError and may pass a larger limit)."""
    if isinstance(source, Model):
        return source
    if isinstance(source, (str, os.PathLike)):
        text = os.fspath(source)
        if text in ZOO:
            if input_shapes:
                raise FrontendError("input_shapes applies to ONNX models; zoo models take "
                                    "options such as image_size=, batch=, seq=")
            return get_model(text, **options)
        if text.endswith(".onnx") or os.path.exists(text):
            if options:
                raise FrontendError(f"load_model({text!r}): options {sorted(options)} apply to "
                                    f"zoo models only")
            return from_onnx(text, input_shapes, max_elements=max_elements)
        raise FrontendError(f"load_model: {text!r} is neither an existing ONNX file nor a zoo "
                            f"model ({', '.join(sorted(ZOO))})")
    if options:
        raise FrontendError(f"load_model: options {sorted(options)} apply to zoo models only")
    return from_onnx(source, input_shapes, max_elements=max_elements)

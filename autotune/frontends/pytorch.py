"""The PyTorch entry: a ``torch.nn.Module`` to a Model in one call, through ONNX.

    import autotune
    model = autotune.from_torch(module, (example_input,))
    lib = autotune.build(model, "llvm")

The module is exported with ``torch.onnx.export`` as a user would export it (the default
exporter of the installed torch: from torch 2.9 on the dynamo-based one, which needs the
``onnxscript`` package; the weights in an external data file beside the graph), into a
temporary folder, and imported from there by :func:`autotune.frontends.load_model`.  The
shapes of ``example_inputs`` become the model's fixed input shapes.  torch is imported only
here, when the function is called: ``pip install "autotune[torch]"`` brings it.
"""
from __future__ import annotations

import os
import tempfile
import warnings

from ..graph.errors import FrontendError
from ..graph.ir import Model

__all__ = ["from_torch", "export_onnx"]

# The opset of the export: the first one every exporter of torch >= 2.5 writes by default,
# and one the importer's conformance figures are measured against.
DEFAULT_OPSET = 18


def export_onnx(module, example_inputs, path: str | os.PathLike, *,
                input_names: list[str] | None = None, output_names: list[str] | None = None,
                opset: int = DEFAULT_OPSET, dynamo: bool | None = None) -> str:
    """Export ``module`` on ``example_inputs`` (a tensor or a tuple of them) to the ONNX file
    ``path`` with torch's exporter; returns the path.  ``dynamo``: the exporter (None: the
    installed torch's default).  FrontendError when torch is missing or the export fails."""
    try:
        import torch
    except ImportError as err:
        raise FrontendError('from_torch needs PyTorch: pip install "autotune[torch]"'
                            ) from err
    if not isinstance(module, torch.nn.Module):
        raise FrontendError(f"from_torch takes a torch.nn.Module, got "
                            f"{type(module).__name__}")
    args = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    for k, arg in enumerate(args):
        if not isinstance(arg, torch.Tensor):
            raise FrontendError(f"from_torch: example input {k} is a {type(arg).__name__}, "
                                f"not a torch.Tensor")
    path = os.fspath(path)
    # verbose=False: the dynamo exporter otherwise narrates its passes on standard output,
    # which is the caller's (a script printing JSON, a notebook).
    options = {"opset_version": opset, "input_names": input_names,
               "output_names": output_names, "verbose": False}
    if dynamo is not None:
        options["dynamo"] = dynamo
    module = module.eval()
    try:
        with torch.no_grad(), warnings.catch_warnings():
            # The exporters narrate their passes as warnings; a failure is an exception.
            warnings.simplefilter("ignore")
            torch.onnx.export(module, args, path, **options)
    except Exception as err:  # noqa: BLE001 - any exporter failure is the user's to read
        raise FrontendError(f"from_torch: torch.onnx.export of {type(module).__name__} "
                            f"failed: {type(err).__name__}: {err}") from err
    return path


def from_torch(module, example_inputs, *, input_names: list[str] | None = None,
               output_names: list[str] | None = None, opset: int = DEFAULT_OPSET,
               dynamo: bool | None = None, **load_options) -> Model:
    """The Model of ``module`` exported on ``example_inputs`` (see the module text).
    ``input_names``/``output_names`` name the graph's values (torch's names otherwise);
    ``load_options`` go to ``load_model`` (e.g. ``max_elements``)."""
    from . import load_model

    name = type(module).__name__
    with tempfile.TemporaryDirectory(prefix="autotune-torch-") as folder:
        path = export_onnx(module, example_inputs, os.path.join(folder, f"{name}.onnx"),
                           input_names=input_names, output_names=output_names, opset=opset,
                           dynamo=dynamo)
        # The import reads every weight into memory, so the folder may go afterwards.
        return load_model(path, **load_options)

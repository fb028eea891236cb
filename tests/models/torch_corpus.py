"""The PyTorch-exported part of the ONNX corpus, as data: each file's inputs (name, concrete
shape, dtype) and the dynamic axes it was exported with.  ``export_torch.py`` writes the files
from this table; the corpus tests read it to fix the symbolic dimensions (it needs no torch)."""
from __future__ import annotations

OPSET = 17

_BATCH = {0: "batch"}
_TOKENS = {0: "batch", 1: "seq"}

# file -> {"inputs": [(name, shape, dtype)], "dynamic_axes": {input: {axis: dim name}}}
TORCH_MODELS = {
    "resnet50_bottleneck.onnx": {
        "inputs": [("x", (2, 16, 16, 16), "float32")],
        "dynamic_axes": {"x": _BATCH}},
    "mobilenetv3_small.onnx": {
        "inputs": [("x", (2, 3, 64, 64), "float32")],
        "dynamic_axes": {"x": _BATCH}},
    "efficientnet_b0_stem.onnx": {
        "inputs": [("x", (2, 3, 32, 32), "float32")],
        "dynamic_axes": {"x": _BATCH}},
    "vit_block.onnx": {
        "inputs": [("x", (2, 3, 32, 32), "float32")],
        "dynamic_axes": {"x": _BATCH}},
    "bert_layer_mask.onnx": {
        "inputs": [("hidden", (2, 8, 32), "float32"), ("mask", (2, 8), "int64")],
        "dynamic_axes": {"hidden": _TOKENS, "mask": _TOKENS}},
    "unet_small.onnx": {
        "inputs": [("x", (2, 3, 16, 16), "float32")],
        "dynamic_axes": {"x": _BATCH}},
    "detection_neck_yolo.onnx": {
        "inputs": [("p3", (2, 8, 16, 16), "float32"), ("p4", (2, 16, 8, 8), "float32"),
                   ("p5", (2, 24, 4, 4), "float32")],
        "dynamic_axes": {"p3": _BATCH, "p4": _BATCH, "p5": _BATCH}},
}

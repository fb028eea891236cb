"""The built-in model zoo and load_model."""
from __future__ import annotations

import numpy as np
import pytest

import autotune
from autotune.frontends import ZOO, get_model, load_model
from autotune.graph import FrontendError, extract_tasks, optimize, partition
from autotune.graph.build import build_model

from .helpers import TARGET, random_inputs

# name -> (input shape, output shape, GFLOP counting 2 per multiply-add, within 5%)
FULL = {
    "resnet18": ((1, 3, 224, 224), (1, 1000), 3.64),
    "resnet50": ((1, 3, 224, 224), (1, 1000), 8.2),
    "mobilenet_v2": ((1, 3, 224, 224), (1, 1000), 0.6),
    "bert_base_layer": ((1, 128, 768), (1, 128, 768), 1.86),
}


@pytest.mark.parametrize("name", sorted(FULL))
def test_zoo_models_have_their_shapes_and_flops(name):
    model = load_model(name)
    in_shape, out_shape, gflop = FULL[name]
    assert model.types[model.inputs[0]].shape == in_shape
    assert model.types[model.outputs[0]].shape == out_shape
    # The model's own arithmetic: its convolutions direct (Winograd does less, below).
    _, _, funcs = partition(optimize(model, winograd=False), optimized=True)
    direct = sum(f.flops for f in funcs.values()) / 1e9
    assert abs(direct - gflop) / gflop < 0.05, direct
    tasks = extract_tasks(model)
    total = sum(t.total_flops for t in tasks) / 1e9
    if name == "resnet18":
        # Winograd on ten of its 3x3 convolutions (64, 128 and 256 channels).
        assert 0.5 * gflop < total < 0.65 * gflop, total
    elif name != "resnet50":
        assert total == pytest.approx(direct), total
    assert len(tasks) < sum(t.weight for t in tasks) or name == "bert_base_layer"


def test_weights_are_deterministic():
    a, b = get_model("resnet18", image_size=32, width=8), get_model("resnet18", image_size=32,
                                                                    width=8)
    assert a.constants.keys() == b.constants.keys()
    for key in a.constants:
        np.testing.assert_array_equal(a.constants[key], b.constants[key])
    c = get_model("resnet18", image_size=32, width=8, seed=1)
    assert any(not np.array_equal(a.constants[k], c.constants[k]) for k in a.constants)


@pytest.mark.parametrize("name, options", [
    ("resnet18", dict(image_size=32, width=8, num_classes=10)),
    ("resnet50", dict(image_size=32, width=4, num_classes=10)),
    ("mobilenet_v2", dict(image_size=32, width=0.25, num_classes=10)),
    ("bert_base_layer", dict(seq=8, hidden=32, heads=4, ffn=64)),
])
def test_tiny_zoo_models_build_and_match_numpy(name, options):
    model = load_model(name, **options)
    lib = build_model(model, TARGET)
    inputs = random_inputs(model)
    got = lib.run(inputs)["output"]
    expected = model.evaluate(inputs)["output"]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


def test_load_model_errors():
    with pytest.raises(FrontendError, match="neither an existing ONNX file nor a zoo model"):
        load_model("resnet19")
    with pytest.raises(FrontendError, match="zoo model resnet18: .*unexpected keyword"):
        load_model("resnet18", depth=3)
    with pytest.raises(FrontendError, match="no model named"):
        get_model("alexnet")
    assert set(ZOO) == {"resnet18", "resnet50", "mobilenet_v2", "bert_base_layer"}


def test_public_api():
    model = autotune.load_model("bert_base_layer", seq=4, hidden=16, heads=2, ffn=32)
    assert load_model(model) is model
    lib = autotune.build_model(model, TARGET)
    assert set(lib.run(random_inputs(model))) == {"output"}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet18", "bert_base_layer"])
def test_full_size_models_build_and_run(name):
    model = load_model(name)
    lib = build_model(model, TARGET)
    inputs = random_inputs(model)
    out = lib.run(inputs)["output"]
    assert out.shape == FULL[name][1] and np.isfinite(out).all()

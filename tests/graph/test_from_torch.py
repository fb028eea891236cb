"""autotune.from_torch: a torch.nn.Module to a built model in one line, through torch's own
ONNX exporter.  Needs torch (and onnxscript for its default exporter): the extra
``autotune[torch]``; skipped where torch is not installed."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")

import autotune  # noqa: E402
from autotune.graph.errors import FrontendError  # noqa: E402

from .helpers import TARGET  # noqa: E402


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.norm = torch.nn.BatchNorm2d(8)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x):
        y = torch.relu(self.norm(self.conv(x)))
        return torch.softmax(self.head(y.mean(dim=(2, 3))), dim=-1)


def test_a_module_imports_builds_and_matches_torch():
    torch.manual_seed(0)
    net = Net().eval()
    x = torch.randn(2, 3, 16, 16)
    model = autotune.from_torch(net, (x,), input_names=["image"], output_names=["probs"])
    assert model.inputs == ["image"] and model.outputs == ["probs"]
    got = autotune.build(model, TARGET).run({"image": x.numpy()})["probs"]
    with torch.no_grad():
        want = net(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def test_bad_arguments_are_typed_errors():
    with pytest.raises(FrontendError, match="torch.nn.Module"):
        autotune.from_torch(lambda x: x, (torch.zeros(1),))
    with pytest.raises(FrontendError, match="not a torch.Tensor"):
        autotune.from_torch(Net(), (np.zeros((1, 3, 8, 8), np.float32),))

"""Export the PyTorch part of the ONNX corpus: small-width, random-weight versions of the model
families users bring, written by ``torch.onnx.export`` the way a user's script writes them.
PyTorch is not a dependency of this project (nor of its tests); run this by hand, with torch
installed, after changing a model:

    python tests/models/export_torch.py

The TorchScript exporter (``dynamo=False``) is used: it needs nothing beyond torch, and it
writes the Shape/Gather/Unsqueeze/Concat chains that a dynamic axis brings, which the importer
must fold.  Every model has a dynamic batch axis (``batch``); the language models have a
dynamic sequence axis (``seq``) too.  ``TORCH_MODELS`` (in ``torch_corpus.py``, which needs no
torch) maps each file to its inputs' concrete shapes, read by the corpus tests.

Weights are drawn from a fixed seed, and a rerun with the same PyTorch writes the same bytes
(the files here were written by torch 2.13.0, CPU build); another version's exporter or random
streams may write others, so the tests check the files against onnxruntime, not against this
script.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch
from torch import nn
from torch.nn import functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from torch_corpus import OPSET, TORCH_MODELS


class Bottleneck(nn.Module):
    """ResNet-50's bottleneck with a projection shortcut: 1x1 reduce, 3x3 (stride 2), 1x1
    expand, batch norms (folded by the exporter in eval mode), residual add, ReLU."""

    def __init__(self, cin=16, mid=8, cout=32, stride=2):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid)
        self.conv2 = nn.Conv2d(mid, mid, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(mid)
        self.conv3, self.bn3 = nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout)
        self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                  nn.BatchNorm2d(cout))

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.relu(self.bn2(self.conv2(h)))
        return F.relu(self.bn3(self.conv3(h)) + self.down(x))


class SqueezeExcite(nn.Module):
    def __init__(self, channels, squeeze, gate):
        super().__init__()
        self.reduce, self.expand = nn.Conv2d(channels, squeeze, 1), nn.Conv2d(squeeze, channels, 1)
        self.act = nn.ReLU() if gate == "hard" else nn.SiLU()
        self.gate = nn.Hardsigmoid() if gate == "hard" else nn.Sigmoid()

    def forward(self, x):
        s = F.adaptive_avg_pool2d(x, 1)
        return x * self.gate(self.expand(self.act(self.reduce(s))))


class InvertedResidual(nn.Module):
    """MobileNetV3 / EfficientNet MBConv: expand 1x1, depthwise kxk, optional squeeze-excite,
    project 1x1, residual when shapes allow."""

    def __init__(self, cin, expand, cout, kernel, stride, se, act, gate="hard"):
        super().__init__()
        layers = []
        if expand != cin:
            layers += [nn.Conv2d(cin, expand, 1, bias=False), nn.BatchNorm2d(expand), act()]
        layers += [nn.Conv2d(expand, expand, kernel, stride, kernel // 2, groups=expand,
                             bias=False), nn.BatchNorm2d(expand), act()]
        if se:
            layers.append(SqueezeExcite(expand, max(8, expand // 4), gate))
        layers += [nn.Conv2d(expand, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.body(x)
        return x + y if self.residual else y


class MobileNetV3Small(nn.Module):
    """MobileNetV3-small at a small width: HardSwish stem, the first blocks of the real network
    (SE with HardSigmoid, ReLU and HardSwish blocks), the last conv, the pooled classifier with
    HardSwish and dropout."""

    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8),
                                  nn.Hardswish())
        self.blocks = nn.Sequential(
            InvertedResidual(8, 8, 8, 3, 2, True, nn.ReLU),
            InvertedResidual(8, 32, 12, 3, 2, False, nn.ReLU),
            InvertedResidual(12, 40, 12, 3, 1, False, nn.ReLU),
            InvertedResidual(12, 48, 16, 5, 2, True, nn.Hardswish),
            InvertedResidual(16, 64, 16, 5, 1, True, nn.Hardswish))
        self.last = nn.Sequential(nn.Conv2d(16, 64, 1, bias=False), nn.BatchNorm2d(64),
                                  nn.Hardswish())
        self.head = nn.Sequential(nn.Linear(64, 96), nn.Hardswish(), nn.Dropout(0.2),
                                  nn.Linear(96, classes))

    def forward(self, x):
        x = self.last(self.blocks(self.stem(x)))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class EfficientNetStem(nn.Module):
    """EfficientNet-B0's stem (3x3 stride-2 conv, BN, SiLU) and its first MBConv blocks: the
    depthwise one without expansion and an expanding one, both with SiLU squeeze-excitation."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16),
                                  nn.SiLU())
        self.block1 = InvertedResidual(16, 16, 8, 3, 1, True, nn.SiLU, gate="sigmoid")
        self.block2 = InvertedResidual(8, 48, 12, 3, 2, True, nn.SiLU, gate="sigmoid")

    def forward(self, x):
        return self.block2(self.block1(self.stem(x)))


class ViTBlock(nn.Module):
    """ViT: patch embedding by a strided conv, class token and position embedding, one
    pre-norm encoder block (LayerNorm, multi-head attention written out, MLP with GELU)."""

    def __init__(self, image=32, patch=8, dim=32, heads=2):
        super().__init__()
        self.heads, self.dim = heads, dim
        self.embed = nn.Conv2d(3, dim, patch, patch)
        tokens = (image // patch) ** 2 + 1
        self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, tokens, dim) * 0.02)
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2)
        cls = self.cls.expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1) + self.pos
        b, n, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(b, n, 3, self.heads, c // self.heads) \
            .permute(2, 0, 3, 1, 4)
        attn = (q @ k.transpose(-2, -1)) * (c // self.heads) ** -0.5
        h = (attn.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, n, c)
        x = x + self.proj(h)
        return x + self.mlp(self.norm2(x))


class BertLayer(nn.Module):
    """A DistilBERT encoder layer with a padding mask: the (batch, seq) 0/1 mask is compared
    with 0, viewed and expanded to the scores' shape (shapes taken from Shape nodes) and
    applied with masked_fill (Where), as Hugging Face's DistilBERT writes it; post-norm
    LayerNorms, erf GELU (the exporter writes Erf at opset 17)."""

    def __init__(self, dim=32, heads=4, ffn=64):
        super().__init__()
        self.heads, self.dim = heads, dim
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)
        self.norm1, self.norm2 = nn.LayerNorm(dim, eps=1e-12), nn.LayerNorm(dim, eps=1e-12)
        self.ffn1, self.ffn2 = nn.Linear(dim, ffn), nn.Linear(ffn, dim)

    def split(self, t):
        b, n, _ = t.shape
        return t.view(b, n, self.heads, self.dim // self.heads).transpose(1, 2)

    def forward(self, hidden, mask):
        q, k, v = self.split(self.q(hidden)), self.split(self.k(hidden)), \
            self.split(self.v(hidden))
        scores = q @ k.transpose(-1, -2) / (self.dim // self.heads) ** 0.5
        b, n = mask.shape
        padded = (mask == 0).view(b, 1, 1, n).expand_as(scores)
        scores = scores.masked_fill(padded, torch.finfo(scores.dtype).min)
        ctx = scores.softmax(-1) @ v
        b, _, n, _ = ctx.shape
        ctx = ctx.transpose(1, 2).reshape(b, n, self.dim)
        h = self.norm1(hidden + self.out(ctx))
        return self.norm2(h + self.ffn2(F.gelu(self.ffn1(h))))


class UNet(nn.Module):
    """A two-level U-Net: double convs with batch norm, max-pool down, a bottleneck with
    GroupNorm and SiLU (as diffusion U-Nets have; the exporter writes GroupNorm as Reshape,
    InstanceNormalization, Reshape, Mul, Add), one path up by ConvTranspose and one by
    bilinear Upsample (Resize), skip connections by Concat."""

    def __init__(self, cin=3, base=8, classes=2):
        super().__init__()

        def double(a, b):
            return nn.Sequential(nn.Conv2d(a, b, 3, padding=1, bias=False), nn.BatchNorm2d(b),
                                 nn.ReLU(), nn.Conv2d(b, b, 3, padding=1, bias=False),
                                 nn.BatchNorm2d(b), nn.ReLU())
        self.enc1, self.enc2 = double(cin, base), double(base, 2 * base)
        self.mid = nn.Sequential(nn.Conv2d(2 * base, 2 * base, 3, padding=1),
                                 nn.GroupNorm(4, 2 * base), nn.SiLU())
        self.up2 = nn.ConvTranspose2d(2 * base, 2 * base, 2, stride=2)
        self.dec2 = double(4 * base, base)
        self.up1 = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.dec1 = double(2 * base, base)
        self.head = nn.Conv2d(base, classes, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(F.max_pool2d(e1, 2))
        m = self.mid(F.max_pool2d(e2, 2))
        d2 = self.dec2(torch.cat([self.up2(m), e2], dim=1))
        d1 = self.dec1(torch.cat([self.up1(d2), e1], dim=1))
        return self.head(d1)


class DetectionNeck(nn.Module):
    """A YOLO/FPN-style neck on three pyramid levels: 1x1 lateral convs, nearest upsampling
    (by a scale factor, and to the size of the level below as FPNs write it, the sizes taken
    from a Shape node), Concat with the level below, conv + BN + LeakyRelu; a strided conv
    back down (PAN)."""

    def __init__(self, c3=8, c4=16, c5=24, width=8):
        super().__init__()

        def cbl(a, b, k=1, s=1):
            return nn.Sequential(nn.Conv2d(a, b, k, s, k // 2, bias=False), nn.BatchNorm2d(b),
                                 nn.LeakyReLU(0.1))
        self.lat5, self.lat4 = cbl(c5, width), cbl(c4, width)
        self.fuse4, self.fuse3 = cbl(2 * width, width, 3), cbl(c3 + width, width, 3)
        self.down3, self.out4 = cbl(width, width, 3, 2), cbl(2 * width, width, 3)

    def forward(self, p3, p4, p5):
        t5 = self.lat5(p5)
        t4 = self.fuse4(torch.cat([self.lat4(p4), F.interpolate(t5, scale_factor=2.0,
                                                                mode="nearest")], 1))
        o3 = self.fuse3(torch.cat([p3, F.interpolate(t4, size=p3.shape[-2:], mode="nearest")],
                                  1))
        o4 = self.out4(torch.cat([self.down3(o3), t4], 1))
        return o3, o4


FAMILIES = {
    "resnet50_bottleneck.onnx": Bottleneck,
    "mobilenetv3_small.onnx": MobileNetV3Small,
    "efficientnet_b0_stem.onnx": EfficientNetStem,
    "vit_block.onnx": ViTBlock,
    "bert_layer_mask.onnx": BertLayer,
    "unet_small.onnx": UNet,
    "detection_neck_yolo.onnx": DetectionNeck,
}


def _randomize_norms(module: nn.Module, generator: torch.Generator) -> None:
    """Batch norms with running statistics and affine weights away from the identity, so that
    a folding or broadcasting mistake in the importer changes the result."""
    for m in module.modules():
        if isinstance(m, (nn.BatchNorm2d, nn.LayerNorm, nn.GroupNorm)):
            with torch.no_grad():
                m.weight.uniform_(0.5, 1.5, generator=generator)
                m.bias.uniform_(-0.2, 0.2, generator=generator)
                if isinstance(m, nn.BatchNorm2d):
                    m.running_mean.uniform_(-0.2, 0.2, generator=generator)
                    m.running_var.uniform_(0.5, 1.5, generator=generator)


def _example(spec, generator: torch.Generator):
    _, shape, dtype = spec
    if dtype == "int64":  # an attention mask: ones, the last positions of a row padded
        mask = torch.ones(shape, dtype=torch.int64)
        mask[0, -2:] = 0
        return mask
    return torch.randn(shape, generator=generator)


def export(name: str, path: str, opset: int = OPSET) -> None:
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    model = FAMILIES[name]().eval()
    _randomize_norms(model, generator)
    spec = TORCH_MODELS[name]
    inputs = tuple(_example(s, generator) for s in spec["inputs"])
    with torch.no_grad():
        outputs = model(*inputs)
    count = len(outputs) if isinstance(outputs, tuple) else 1
    output_names = [f"y{k}" for k in range(count)] if count > 1 else ["y"]
    torch.onnx.export(model, inputs, path, opset_version=opset, dynamo=False,
                      input_names=[s[0] for s in spec["inputs"]], output_names=output_names,
                      dynamic_axes=spec["dynamic_axes"], do_constant_folding=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=HERE, help="folder to write to (default: this one)")
    parser.add_argument("--opset", type=int, default=OPSET,
                        help=f"ONNX opset to export (default {OPSET}; other opsets are for "
                             f"trying the importer, the corpus is written at {OPSET})")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    for name in FAMILIES:
        path = os.path.join(args.out, name)
        export(name, path, args.opset)
        print(f"{name}: {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()

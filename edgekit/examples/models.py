"""Example models for recipes, demos and benchmarks. Each factory returns (module, inputs).

Weights are seeded so every build of the same factory produces the same model digest.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def _conv_bn(cin: int, cout: int, stride: int = 1, groups: int = 1, act: bool = True):
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, 3 if groups > 1 or stride > 1 or cin == 3
                                         else 1, stride, padding="same" if stride == 1 else 1,
                                         groups=groups, bias=False),
                               nn.BatchNorm2d(cout)]
    if act:
        layers.append(nn.ReLU6())
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        hidden = cin * expand
        layers: list[nn.Module] = []
        if expand != 1:
            layers.append(_conv_bn(cin, hidden))                       # 1x1 expand
        layers.append(_conv_bn(hidden, hidden, stride, groups=hidden))  # 3x3 depthwise
        layers.append(_conv_bn(hidden, cout, act=False))                # 1x1 project
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.block(x)
        return x + y if self.residual else y


class MobileNetV2Like(nn.Module):
    """MobileNetV2's layout (inverted residuals, depthwise convs, ReLU6) at a chosen width."""

    # (expand, channels, repeats, stride) as in the MobileNetV2 paper
    SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                (6, 160, 3, 2), (6, 320, 1, 1))

    def __init__(self, num_classes: int = 1000, width: float = 1.0):
        super().__init__()
        c = lambda n: max(8, int(n * width + 4) // 8 * 8)  # noqa: E731 - channel rounding
        layers: list[nn.Module] = [_conv_bn(3, c(32), stride=2)]
        cin = c(32)
        for expand, ch, repeats, stride in self.SETTINGS:
            for i in range(repeats):
                layers.append(InvertedResidual(cin, c(ch), stride if i == 0 else 1, expand))
                cin = c(ch)
        layers.append(_conv_bn(cin, c(1280)))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(c(1280), num_classes)

    def forward(self, image):
        x = self.features(image).mean(dim=(2, 3))
        return self.classifier(x)


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                   nn.BatchNorm2d(cout)) if stride != 1 or cin != cout else None)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (self.down(x) if self.down is not None else x))


class ResNet18Like(nn.Module):
    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64),
                                  nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            blocks += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(512, num_classes)

    def forward(self, image):
        return self.fc(self.blocks(self.stem(image)).mean(dim=(2, 3)))


class EncoderLayer(nn.Module):
    """Pre-norm transformer encoder layer written out (export-friendly, no fused fast path)."""

    def __init__(self, dim: int, heads: int, ff: int):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, ff), nn.GELU(), nn.Linear(ff, dim))

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(b, s, 3, self.heads, d // self.heads) \
            .permute(2, 0, 3, 1, 4)
        attn = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d // self.heads), dim=-1)
        x = x + self.proj((attn @ v).transpose(1, 2).reshape(b, s, d))
        return x + self.ff(self.norm2(x))


class TextEncoder(nn.Module):
    """A small MiniLM-shaped encoder: token ids → embeddings → layers → mean pool → classes."""

    def __init__(self, vocab: int = 1000, dim: int = 128, heads: int = 4, layers: int = 2,
                 seq: int = 128, num_classes: int = 4):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.position = nn.Parameter(torch.randn(1, seq, dim) * 0.02)
        self.layers = nn.Sequential(*[EncoderLayer(dim, heads, 4 * dim) for _ in range(layers)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, tokens):
        x = self.layers(self.embed(tokens) + self.position[:, : tokens.shape[1]])
        return self.head(self.norm(x).mean(dim=1))


class KeywordSpottingMLP(nn.Module):
    """Keyword spotting on 49 frames x 10 MFCCs (the DS-CNN/MLP benchmark input), 12 classes."""

    def __init__(self, frames: int = 49, coeffs: int = 10, hidden: int = 256, classes: int = 12):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(frames * coeffs, hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, classes))

    def forward(self, mfcc):
        return self.net(mfcc)


def _seeded(seed: int = 0) -> None:
    torch.manual_seed(seed)


@torch.no_grad()
def _realistic(model: nn.Module, input_shape: tuple[int, ...]) -> nn.Module:
    """Give an untrained CNN activations of a trained one's scale: torchvision's conv init, then
    batch-norm statistics gathered on random images. Without this the features of a deep random
    net vanish to ~1e-8 and every output equals the classifier bias, which would make golden
    outputs (and validation) meaningless."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out")
        elif isinstance(m, nn.BatchNorm2d):
            m.momentum = None  # cumulative average over the calibration batches
    model.train()
    for _ in range(2):
        model(torch.randn(4, *input_shape[1:]))
    return model.eval()


def mobilenet_v2_like():
    _seeded()
    model = _realistic(MobileNetV2Like(), (1, 3, 224, 224))
    return model, (torch.randn(1, 3, 224, 224),)


def resnet18_like():
    _seeded()
    model = _realistic(ResNet18Like(), (1, 3, 224, 224))
    return model, (torch.randn(1, 3, 224, 224),)


def text_encoder():
    _seeded()
    return TextEncoder().eval(), (torch.randint(0, 1000, (1, 128)),)


def kws_mlp():
    _seeded()
    return KeywordSpottingMLP().eval(), (torch.randn(1, 49, 10),)


# --- small models for quantized builds (tests and the quantization recipes) --------------------

class SmallCNN(nn.Module):
    """A 32x32 image classifier: 3x3 conv-bn-relu stages and a pooled linear head."""

    def __init__(self, classes: int = 10):
        super().__init__()
        stage = lambda cin, cout, stride: nn.Sequential(  # noqa: E731
            nn.Conv2d(cin, cout, 3, stride, padding=1, bias=False), nn.BatchNorm2d(cout),
            nn.ReLU())
        self.features = nn.Sequential(stage(3, 16, 2), stage(16, 32, 1), stage(32, 64, 2),
                                      stage(64, 64, 1))
        self.head = nn.Linear(64, classes)

    def forward(self, image):
        return self.head(self.features(image).mean(dim=(2, 3)))


def small_cnn():
    _seeded()
    return _realistic(SmallCNN(), (1, 3, 32, 32)), (torch.randn(1, 3, 32, 32),)


class ConvMean(nn.Module):
    """A convolution, then a mean over the image: README's bisect example (SPIR-V built for
    Mali's Valhall, run on Mesa's llvmpipe, gets the mean wrong)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv(x)).mean(dim=(2, 3))


def conv_mean():
    torch.manual_seed(3)
    return ConvMean().eval(), (torch.randn(1, 3, 16, 16),)


def transformer_block():
    """One pre-norm encoder layer (attention + MLP), sequence 16, width 64."""
    _seeded()
    return EncoderLayer(64, 4, 128).eval(), (torch.randn(1, 16, 64),)


def _calibration(shape: tuple[int, ...], count: int = 16, seed: int = 1):
    generator = torch.Generator().manual_seed(seed)
    for _ in range(count):
        yield (torch.randn(*shape, generator=generator),)


def small_cnn_calibration():
    """Calibration batches for `small_cnn` (random images: stand-ins for a real dataset)."""
    return _calibration((1, 3, 32, 32))


def transformer_block_calibration():
    return _calibration((1, 16, 64))


def kws_mlp_calibration():
    return _calibration((1, 49, 10))

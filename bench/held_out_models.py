"""Held-out real architectures for bench/tuned_latency.py (`--models resnet50,...`): models the
tuner's flag sets and rewrites were never measured on. Random weights, nothing downloaded;
each factory returns (model, example inputs) as a recipe's `python:` model does.

- resnet50: the corpus's ResNet-50 (tests/corpus/models.py: bottleneck stages (3, 4, 6, 3),
  base 64, 1000 classes), 224x224.
- mobilenet_v3_small: torchvision's MobileNetV3-Small (its `_mobilenet_v3_conf` table:
  hardswish, squeeze-excitation, 5x5 depthwise convolutions), written here because
  torchvision's wheel does not import beside this torch (facts.md), 224x224.
- minilm: MiniLM-L6 (all-MiniLM-L6-v2's BertConfig: 6 layers, hidden 384, 12 heads,
  intermediate 1536, vocab 30522) from transformers' own BertModel, 128 tokens, mean-pooled.
  Its TOSA lowering fails (transformers' attention mask: an f64 `tosa.cast`), so it is tuned
  on linalg (`--lowerings linalg`), where the untuned build falls back to as well.

First run, 1 thread, `--brief --fastest --tune-rounds 7` (a shared 2-core machine at a load of
~25, so the long models' figures are rough), untuned → tuned, ratio to onnxruntime: ResNet-50
3.09× → 2.22× (tosa/convs-as-matmul+data-tiling+tile-1m, its win repeated at -30.6% ±3.3%;
round spread 77-102%), MobileNetV3-Small 1.86× → 1.52× (tosa/fold-batchnorm+data-tiling,
-20.0% ±4.5%; spread 7-14%), MiniLM-L6 1.97× → 1.33× (linalg/data-tiling, -22.5% ±8.3%;
spread 64-99%).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.corpus.models import _randomized_bn, resnet50  # noqa: E402,F401

SEQ = 128


def _divisible(v: float, divisor: int = 8) -> int:
    """torchvision's _make_divisible: channels rounded to 8, never below 90 % of `v`."""
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


def _conv_bn_act(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1,
                 act: type[nn.Module] | None = nn.Hardswish) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups,
                                         bias=False), nn.BatchNorm2d(cout, eps=0.001)]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


class SqueezeExcitation(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        squeeze = _divisible(channels // 4)
        self.fc1, self.fc2 = nn.Conv2d(channels, squeeze, 1), nn.Conv2d(squeeze, channels, 1)

    def forward(self, x):
        s = nn.functional.adaptive_avg_pool2d(x, 1)
        return x * nn.functional.hardsigmoid(self.fc2(torch.relu(self.fc1(s))))


class Bneck(nn.Module):
    """MobileNetV3's block: 1x1 expand, k x k depthwise, squeeze-excitation, 1x1 project."""

    def __init__(self, cin: int, k: int, expanded: int, cout: int, se: bool, act: str,
                 stride: int):
        super().__init__()
        activation = nn.Hardswish if act == "HS" else nn.ReLU
        layers: list[nn.Module] = []
        if expanded != cin:
            layers.append(_conv_bn_act(cin, expanded, 1, act=activation))
        layers.append(_conv_bn_act(expanded, expanded, k, stride, expanded, activation))
        if se:
            layers.append(SqueezeExcitation(expanded))
        layers.append(_conv_bn_act(expanded, cout, 1, act=None))
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.block(x)
        return x + y if self.residual else y


# torchvision's mobilenet_v3_small: input, kernel, expanded, output, SE, activation, stride
SMALL = ((16, 3, 16, 16, True, "RE", 2), (16, 3, 72, 24, False, "RE", 2),
         (24, 3, 88, 24, False, "RE", 1), (24, 5, 96, 40, True, "HS", 2),
         (40, 5, 240, 40, True, "HS", 1), (40, 5, 240, 40, True, "HS", 1),
         (40, 5, 120, 48, True, "HS", 1), (48, 5, 144, 48, True, "HS", 1),
         (48, 5, 288, 96, True, "HS", 2), (96, 5, 576, 96, True, "HS", 1),
         (96, 5, 576, 96, True, "HS", 1))


class MobileNetV3Small(nn.Module):
    def __init__(self, classes: int = 1000):
        super().__init__()
        layers: list[nn.Module] = [_conv_bn_act(3, 16, 3, 2)]
        layers += [Bneck(*conf) for conf in SMALL]
        layers.append(_conv_bn_act(96, 576, 1))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Linear(576, 1024), nn.Hardswish(),
                                        nn.Linear(1024, classes))

    def forward(self, x):
        return self.classifier(torch.flatten(nn.functional.adaptive_avg_pool2d(
            self.features(x), 1), 1))


def mobilenet_v3_small():
    torch.manual_seed(0)
    model = MobileNetV3Small()
    # He initialisation: PyTorch's default shrinks the activations layer by layer until the
    # logits are the same for every image (to 1e-8), which a golden output cannot validate
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
    return (_randomized_bn(model).eval(),
            (torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(0)),))


class MeanPooled(nn.Module):
    """A sentence embedding as sentence-transformers makes it: the tokens' mean."""

    def __init__(self, encoder: nn.Module):
        super().__init__()
        self.encoder = encoder

    def forward(self, ids):
        return self.encoder(ids).last_hidden_state.mean(dim=1)


def minilm():
    from transformers import BertConfig, BertModel
    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6,
                        num_attention_heads=12, intermediate_size=1536,
                        max_position_embeddings=512)
    ids = torch.randint(0, config.vocab_size, (1, SEQ),
                        generator=torch.Generator().manual_seed(0))
    return MeanPooled(BertModel(config, add_pooling_layer=False)).eval(), (ids,)


# name → its validation tolerances: the example CNN recipes', but ResNet-50's logits (random
# weights, the corpus's init) move by only ~4e-3 between images, which those would call "the
# same for every sample": ten times tighter there (fp32 reorderings stay near 1e-6)
TOLERANCES = {"resnet50": (1.0e-4, 1.0e-3), "mobilenet_v3_small": (1.0e-3, 1.0e-2),
              "minilm": (1.0e-3, 1.0e-2)}
RECIPES = {name: f"model:\n  python: \"{__file__}:{name}\"\nlowering: auto\nvalidation:\n"
                 f"  atol: {atol}\n  rtol: {rtol}\n  min_cosine: 0.9999\nseed: 0\n"
           for name, (atol, rtol) in TOLERANCES.items()}


def recipe(name: str, directory: Path) -> Path:
    """A recipe for the held-out model `name`, written into `directory`."""
    path = directory / f"{name}.yaml"
    directory.mkdir(parents=True, exist_ok=True)
    path.write_text(f"name: {name.replace('_', '-')}\n{RECIPES[name]}")
    return path

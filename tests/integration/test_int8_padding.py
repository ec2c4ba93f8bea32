"""int8 builds of `padding="same"` convolutions (real PT2E → torch-mlir → IREE).

`nn.Conv2d(..., padding="same")` exports `aten.conv2d.padding`; the quantizer rewrites it to an
explicit convolution and quantizes it (MobileNetV2-like: 47 of its 52 convolutions). Fully
integer, a MobileNetV2 block — a 1x1 projection whose float output is both requantized for the
next convolution and a residual add's input — made IREE 3.13 pack a whole data-tiled matmul
tile on the stack ("exceeded stack allocation limit of 32768 bytes" with pack ukernels;
"operations with large vector sizes (32768 bytes)" without) until the int8 flags asked for
16 KiB matmul tiles (targets/host.yaml). This model is that block at its second stage's size
(both tests fail without the flag; at 56×56 the 1×1 convolutions keep the `on` form, as in
MobileNetV2-like: with only u8-able convolutions the u8 inner-tiled path compiles it anyway).
The depthwise convolution becomes integer tap sums (pipeline/rewrite_int8_depthwise.py): not a
contraction any more.
"""

import numpy as np
import pytest
import torch

from edgekit import BuildOptions, build, validate_local
from edgekit.config.recipe import load_recipe
from edgekit.pipeline.frontends.registry import frontend_for

MODEL = '''import torch
from torch import nn


class SameResidual(nn.Module):
    """Two MobileNetV2 blocks' 1x1 expand/project pairs (the second residual) on the input, and
    a depthwise 3x3 beside them (no u8 form: the build takes `on`, as MobileNetV2's does);
    every convolution `padding="same"`."""

    def __init__(self, c=24, hidden=96):
        super().__init__()
        conv = lambda cin, cout, k=1, groups=1: nn.Conv2d(  # noqa: E731
            cin, cout, k, padding="same", groups=groups)
        self.expand1, self.project1 = conv(c, hidden), conv(hidden, c)
        self.expand2, self.project2 = conv(c, hidden), conv(hidden, c)
        self.spatial = conv(c, c, 3, groups=c)

    def forward(self, x):
        y = self.project1(torch.relu(self.expand1(x)))
        return y + self.project2(torch.relu(self.expand2(y))), self.spatial(x)


def same_residual():
    torch.manual_seed(0)
    return SameResidual().eval(), (torch.randn(1, 24, 56, 56),)
'''

SHAPE = (1, 24, 56, 56)


@pytest.fixture()
def recipe(int8_recipe):
    return int8_recipe("same-residual", MODEL, "same_residual", SHAPE)


def test_same_padded_convolutions_are_quantized_and_the_module_matches(recipe):
    bundle = build(BuildOptions(recipe=recipe, target="host")).bundle
    q = bundle.manifest.quantization
    # every convolution (all `padding="same"`) reads int8 and runs as integer arithmetic: four
    # integer matmuls and the depthwise one's integer tap sums
    assert q.quantized_ops == 5
    assert q.contractions.total == q.contractions.integer == 4
    assert "1 int8 depthwise convolutions as integer tap sums" in bundle.manifest.lowering.note
    assert "--iree-llvmcpu-matmul-tile-bytes=16384" in bundle.manifest.compile_flags
    assert validate_local(bundle.path).ok
    # the compiled module computes the quantized PyTorch model
    loaded = load_recipe(recipe)
    frontend = frontend_for(loaded.model)
    quantized = frontend.quantize(loaded, frontend.export(loaded, frontend.load(loaded)))
    from iree.runtime import load_vm_flatbuffer_file
    module = load_vm_flatbuffer_file(str(bundle.module), driver="local-sync")
    x = np.random.default_rng(11).standard_normal(SHAPE).astype(np.float32)
    wanted = quantized.program.module()(torch.from_numpy(x))
    for got, want in zip(module.main(x), wanted):
        want = want.detach().numpy()
        assert np.abs(np.asarray(got) - want).max() <= 0.02 * np.abs(want).max()


def test_the_residual_block_compiles_without_pack_ukernels(recipe):
    # without IREE's pack ukernels the same dispatch failed with "large vector sizes"
    text = recipe.read_text() + "compile: {flags: [--iree-llvmcpu-enable-ukernels=none]}\n"
    recipe.write_text(text)
    bundle = build(BuildOptions(recipe=recipe, target="host")).bundle
    q = bundle.manifest.quantization
    assert q.contractions.total == q.contractions.integer == 4
    flags = bundle.manifest.compile_flags
    assert flags[-1] == "--iree-llvmcpu-enable-ukernels=none"
    assert "--iree-llvmcpu-matmul-tile-bytes=16384" in flags
    assert validate_local(bundle.path).ok

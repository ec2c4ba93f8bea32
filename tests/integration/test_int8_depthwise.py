"""Quantized depthwise convolutions as integer tap sums (pipeline/rewrite_int8_depthwise.py):
the rewritten graph computes the quantized PyTorch model (one rounding at the end instead of
one per product), and IREE compiles it as elementwise integer arithmetic, not as the scalar
direct int8 convolution it made of it before (MobileNetV2-like: 2.07 ms → 0.32 ms for its
112×112×32 depthwise 3×3)."""

import numpy as np
import pytest
import torch
from torch import nn

from edgekit import BuildOptions, build, validate_local
from edgekit.config.recipe import load_recipe
from edgekit.pipeline.frontends.registry import frontend_for
from edgekit.pipeline.rewrite_int8 import rewrite_int8_convs

MODEL = '''import torch
from torch import nn


class Inverted(nn.Module):
    """A MobileNetV2 inverted residual pair: 1x1 expand, depthwise 3x3 (stride 1, then 2),
    ReLU6, 1x1 project."""

    def __init__(self, c=8, hidden=32):
        super().__init__()
        self.expand = nn.Conv2d(c, hidden, 1)
        self.dw1 = nn.Conv2d(hidden, hidden, 3, 1, 1, groups=hidden)
        self.dw2 = nn.Conv2d(hidden, hidden, 3, 2, 1, groups=hidden, bias=False)
        self.project = nn.Conv2d(hidden, c, 1)

    def forward(self, x):
        y = nn.functional.relu6(self.expand(x))
        y = nn.functional.relu6(self.dw1(y))
        return self.project(nn.functional.relu6(self.dw2(y)))


def inverted():
    torch.manual_seed(0)
    return Inverted().eval(), (torch.randn(1, 8, 16, 16),)
'''

SHAPE = (1, 8, 16, 16)


@pytest.fixture()
def recipe(int8_recipe):
    return int8_recipe("inverted", MODEL, "inverted", SHAPE)


def _quantized(recipe):
    loaded = load_recipe(recipe)
    frontend = frontend_for(loaded.model)
    return frontend.quantize(loaded, frontend.export(loaded, frontend.load(loaded))).program


def test_the_tap_sums_compute_the_quantized_depthwise_convolutions(recipe):
    program = _quantized(recipe)
    done = rewrite_int8_convs(program)
    assert (done.depthwise, done.im2col, done.total) == (2, 2, 4)
    grouped = [n for n in done.program.graph.nodes if n.op == "call_function" and
               ("convolution" in str(n.target) or "conv2d" in str(n.target))]
    assert grouped == []                    # the 1x1s are matmuls, the depthwise ones taps
    x = torch.from_numpy(np.random.default_rng(11).standard_normal(SHAPE).astype(np.float32))
    want = program.module()(x)
    want = want[0] if isinstance(want, tuple) else want
    got = done.program.module()(x)
    got = got[0] if isinstance(got, tuple) else got
    # the same quantized model: the output is requantized after each layer, so at most a
    # rounding step of the last layer's output apart
    err = (got - want).abs().max().item()
    assert err <= 0.05 * want.abs().max().item()


def test_a_depthwise_int8_build_is_all_integer_and_validates(recipe):
    bundle = build(BuildOptions(recipe=recipe, target="host")).bundle
    q = bundle.manifest.quantization
    assert q.contractions.total == q.contractions.integer == 2        # the two 1x1s
    assert "2 int8 depthwise convolutions as integer tap sums" in bundle.manifest.lowering.note
    assert validate_local(bundle.path).ok
    from iree.runtime import load_vm_flatbuffer_file
    module = load_vm_flatbuffer_file(str(bundle.module), driver="local-sync")
    x = np.random.default_rng(12).standard_normal(SHAPE).astype(np.float32)
    want = _quantized(recipe).module()(torch.from_numpy(x))
    want = (want[0] if isinstance(want, tuple) else want).detach().numpy()
    got = np.asarray(module.main(x))
    assert np.abs(got - want).max() <= 0.05 * np.abs(want).max()


def test_a_grouped_convolution_that_is_not_depthwise_is_left_alone():
    from edgekit.pipeline.rewrite_int8_depthwise import is_int8_depthwise
    m = nn.Conv2d(8, 8, 3, padding=1, groups=2).eval()
    program = torch.export.export(m, (torch.randn(1, 8, 8, 8),))
    conv = next(n for n in program.graph.nodes if n.op == "call_function")
    assert not is_int8_depthwise(conv)

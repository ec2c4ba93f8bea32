"""The TOSA legalisation rewrites (pipeline/rewrite_tosa.py) compute what eager PyTorch
computes: the rewritten program against the model as written, on inputs it was not exported
with, including values where a float64 comparison would answer otherwise."""

import numpy as np
import torch

from edgekit.pipeline.rewrite_tosa import legalise_for_tosa
from tests.fixtures.tosa_legalisation import image, legalisation


def _legalised(model, example):
    program = torch.export.export(model, (example,))
    return legalise_for_tosa(program, (example.numpy(),))


def test_every_rewrite_is_made_said_and_exact_against_eager():
    model, (example,) = legalisation()
    program, notes = _legalised(model, example)
    said = " ".join(notes)
    assert "2 float64 constant(s) (scale, offset) stored as float32" in said, notes
    assert "folded into constants" in said and "float-scalar comparison(s)" in said, notes
    assert "1 convolution(s) of more than 31 groups (groups=32 (64x64))" in said, notes
    graph = {str(n.target) for n in program.graph.nodes}
    assert not graph & {"aten.arange.start_step", "aten.arange.default", "aten.gt.Scalar"}
    dtypes = {getattr(n.meta.get("val"), "dtype", None) for n in program.graph.nodes}
    assert torch.float64 not in dtypes and torch.int64 not in dtypes
    rewritten = program.module()
    for seed in (1, 2, 3):
        x = image(seed)
        with torch.no_grad():
            expected, got = model(x), rewritten(x)
        # the same sums in another grouping (the split convolution): float32 rounding only
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=0, atol=1e-6)


def test_a_comparison_with_a_float_that_float32_rounds_keeps_eager_answer():
    class Compare(torch.nn.Module):
        def forward(self, x):
            return (x == 0.1).float() + (x < 0.1).float() * 2

    x = torch.tensor([0.1, 0.09999999, 0.2], dtype=torch.float32)
    program, notes = _legalised(Compare(), x)
    assert any("2 float-scalar comparison(s)" in n for n in notes), notes
    assert torch.equal(program.module()(x), Compare()(x))   # f32(0.1) == 0.1 in eager
    assert Compare()(x)[0] == 1.0


def test_float64_math_that_eager_does_in_float64_is_left_alone():
    class Wide(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("table", torch.linspace(0, 1, 4, dtype=torch.float64))

        def forward(self, x):
            return (x.double() * self.table).float()    # rank-1 float64: computed in float64

    program, notes = _legalised(Wide(), torch.randn(4))
    assert not any("float64 constant" in n for n in notes), notes


def test_a_model_with_nothing_to_legalise_is_returned_as_it_was():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, groups=1), torch.nn.ReLU()).eval()
    program = torch.export.export(model, (torch.randn(1, 3, 8, 8),))
    assert legalise_for_tosa(program, (np.zeros((1, 3, 8, 8), np.float32),)) == (program, ())
